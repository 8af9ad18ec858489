/* The CPU plans (plan.h): pure functions of (problem, fc_cpu_env). */
#include "plan.h"

#include "attn_fwd.h"
#include "common/knobs.h"

fc_cpu_env fc_cpu_env_read(void) {
    fc_cpu_env e;
    e.isa = fc_cpu_isa_level();
    e.bf16 = fc_cpu_has_avx512bf16();
    e.amx = fc_cpu_has_amx();
    e.decode_rows = fc_knob_cpu_decode_rows();
    e.bwd_twopass = fc_knob_cpu_bwd_twopass();
    return e;
}

/* ------------------------------------------------------------ forward */
/* Rows per (b, kv head) up to which the decode path is faster (measured,
 * benchmarks/NOTES.md "CPU decode"); FLASHC_CPU_DECODE_ROWS overrides
 * (0 = never). */
enum { FC_DEC_ROWS_AVX2 = 8, FC_DEC_ROWS_AVX512 = 16 };

static int decode_fits(const fc_attn *a, const fc_cpu_env *e, long dflt) {
    const long max = e->decode_rows == FC_KNOB_AUTO ? dflt : e->decode_rows;
    return a->Sq * (a->Hq / a->Hkv) <= (int64_t)max;
}

int fc_fwd_supports(fc_fwd_path path, const fc_attn *a, const fc_cpu_env *e) {
    const int f64 = a->dtype == FLASHC_F64;
    switch (path) {
    case FC_FWD_SCALAR_F64: return f64;
    case FC_FWD_AVX512_DECODE: return !f64 && e->isa >= FC_ISA_AVX512 && decode_fits(a, e, FC_DEC_ROWS_AVX512);
    case FC_FWD_AVX512BF16: return a->dtype == FLASHC_BF16 && e->isa >= FC_ISA_AVX512 && e->bf16;
    case FC_FWD_AMX_BF16: return a->dtype == FLASHC_BF16 && e->isa >= FC_ISA_AVX512 && e->amx;
    case FC_FWD_AVX512: return !f64 && e->isa >= FC_ISA_AVX512;
    case FC_FWD_AVX2_DECODE: return !f64 && e->isa >= FC_ISA_AVX2 && decode_fits(a, e, FC_DEC_ROWS_AVX2);
    case FC_FWD_AVX2: return !f64 && e->isa >= FC_ISA_AVX2;
    case FC_FWD_SCALAR: return !f64;
    default: return 0;
    }
}

/* The forward paths, fastest first. */
static const fc_fwd_path fc_fwd_order[FC_FWD_NPATHS] = {
    FC_FWD_SCALAR_F64, FC_FWD_AVX512_DECODE, FC_FWD_AMX_BF16, FC_FWD_AVX512BF16,
    FC_FWD_AVX512,     FC_FWD_AVX2_DECODE,   FC_FWD_AVX2,     FC_FWD_SCALAR,
};

fc_fwd_path fc_plan_fwd(const fc_attn *a, const fc_cpu_env *e) {
    for (int p = 0; p < FC_FWD_NPATHS; ++p)
        if (fc_fwd_supports(fc_fwd_order[p], a, e)) return fc_fwd_order[p];
    return FC_FWD_SCALAR; /* unreachable: every dtype has a path */
}

flashc_status fc_fwd_run_path(fc_fwd_path path, const fc_attn *a) {
    switch (path) {
    case FC_FWD_SCALAR_F64: return fc_attn_fwd_scalar_f64(a);
    case FC_FWD_AVX512_DECODE: return fc_attn_fwd_avx512_decode(a);
    case FC_FWD_AVX512BF16: return fc_attn_fwd_avx512bf16(a);
    case FC_FWD_AMX_BF16: return fc_attn_fwd_amx_bf16(a);
    case FC_FWD_AVX512: return fc_attn_fwd_avx512_f32(a);
    case FC_FWD_AVX2_DECODE: return fc_attn_fwd_avx2_decode(a);
    case FC_FWD_AVX2: return fc_attn_fwd_avx2_f32(a);
    default: return fc_attn_fwd_scalar_f32(a);
    }
}

/* ----------------------------------------------------------- backward */
int fc_bwd_supports(fc_bwd_path path, const fc_attn *a, const fc_cpu_env *e) {
    const int f64 = a->dtype == FLASHC_F64;
    switch (path) {
    case FC_BWD_SCALAR_F64: return f64;
    case FC_BWD_AVX512BF16: return a->dtype == FLASHC_BF16 && e->isa >= FC_ISA_AVX512 && e->bf16;
    case FC_BWD_AMX_BF16: return a->dtype == FLASHC_BF16 && e->isa >= FC_ISA_AVX512 && e->amx;
    case FC_BWD_AVX512: return !f64 && e->isa >= FC_ISA_AVX512;
    case FC_BWD_AVX2: return !f64 && e->isa >= FC_ISA_AVX2;
    case FC_BWD_SCALAR: return !f64;
    default: return 0;
    }
}

fc_bwd_plan fc_plan_bwd(const fc_attn *a, const fc_cpu_env *e, int64_t bc, int64_t dp) {
    fc_bwd_plan pl;
    static const fc_bwd_path order[FC_BWD_NPATHS] = {FC_BWD_SCALAR_F64, FC_BWD_AMX_BF16, FC_BWD_AVX512BF16,
                                                     FC_BWD_AVX512,     FC_BWD_AVX2,     FC_BWD_SCALAR};
    pl.path = FC_BWD_SCALAR;
    for (int p = 0; p < FC_BWD_NPATHS; ++p)
        if (fc_bwd_supports(order[p], a, e)) {
            pl.path = order[p];
            break;
        }
    /* Fused mode (5 tile GEMMs instead of 7) when the dQ partials fit in
     * FUSED_MAX_BYTES. The chunk count depends on the shape only — never on
     * the thread count — so the summation order, and the result, is fixed. */
    enum { FUSED_TASKS = 16 };
    const double FUSED_MAX_BYTES = 1024.0 * 1024 * 1024;
    const int64_t nkb = (a->Sk + bc - 1) / bc, nouter = a->B * a->Hkv > 0 ? a->B * a->Hkv : 1;
    int64_t nch = (FUSED_TASKS + nouter - 1) / nouter;
    if (nch > nkb) nch = nkb;
    if (nch < 1) nch = 1;
    pl.nchunk = nch;
    const double esz = pl.path == FC_BWD_SCALAR_F64 ? 8.0 : 4.0;
    const double partials = (double)nch * (double)(a->B * a->Hq * a->Sq) * (double)dp * esz;
    /* FLASHC_CPU_BWD=twopass forces the two-pass mode (tests, benchmarks). */
    pl.sched = !e->bwd_twopass && nkb > 0 && partials <= FUSED_MAX_BYTES ? FC_BWD_FUSED : FC_BWD_TWOPASS;
    return pl;
}
