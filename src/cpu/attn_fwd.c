/* CPU attention forward: picks the path once per call. The problem `a` has
 * been validated and normalised by the core (src/flashc.c); see
 * attn_fwd.h for the algorithm and flashc.h for the semantics. */
#include "attn_fwd.h"

flashc_status fc_cpu_attn_fwd(const fc_attn *a) {
    if (a->Sq == 0) return FLASHC_OK;
    /* F64 is the reference precision; one plain-C path serves every ISA. */
    if (a->dtype == FLASHC_F64) return fc_attn_fwd_scalar_f64(a);
    switch (fc_cpu_isa_level()) {
    case FC_ISA_AVX512: return fc_attn_fwd_avx512_f32(a);
    case FC_ISA_AVX2: return fc_attn_fwd_avx2_f32(a);
    default: return fc_attn_fwd_scalar_f32(a);
    }
}
