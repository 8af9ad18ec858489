/*
 * attn_params.cuh — the one attention parameter struct of the CUDA module,
 * and the plan that picks a kernel.
 *
 * The dispatcher (attn_dispatch.cu) builds an fcc_attn once per call from the
 * core's validated fc_attn: the problem itself, its masking and score parts
 * as the seam (src/common/) takes them, and the facts every kernel's
 * supports() check needs (int32 limits, alignment, device limits), worked
 * out here once instead of in each kernel. Kernels take it by value
 * (it is a plain struct of ~700 bytes, well under the 4 KB parameter limit)
 * and read what they need; kernel-specific scratch pointers travel as extra
 * kernel arguments.
 *
 * Plan: fcc_plan_fwd / fcc_plan_bwd are pure functions of (problem, device,
 * knob) → kernel enum; each kernel exports a supports() predicate, the plan
 * takes the first that holds in order of speed. FLASHC_CUDA_KERNEL
 * (common/knobs.h) may force the generic family or skip wgmma.
 */
#ifndef FC_ATTN_PARAMS_CUH
#define FC_ATTN_PARAMS_CUH

#include "fc_cuda.cuh"

/* The device facts the plan needs (the current device, cached per ordinal). */
struct fcc_device {
    int ordinal;
    int cc;          /* compute capability, 10·major + minor (90 = Hopper) */
    int sm_count;
    int smem_optin;  /* max dynamic shared memory per block with opt-in, bytes (capped by
                        FLASHC_CUDA_SMEM_LIMIT: every plan reads this, never the device) */
};
/* Queries (once per ordinal) the current device. */
flashc_status fcc_device_query(fcc_device *d);

struct fcc_attn {
    fc_attn a;               /* the normalised problem (pointers, int64 strides in elements) */
    fc_mask mask;            /* = fc_attn_mask(&a) */
    fc_score_params score;   /* = fc_attn_score(&a) */
    /* int32 copies, valid when fits_int32 (every position and head index < 2^30) */
    int Sq, Sk, Hq, Hkv, D, group;
    bool fits_int32;
    bool d_contig;     /* stride(d) = 1 on q, k, v, o (and dout, dq, dk, dv in the backward) */
    bool vec16;        /* d_contig, D % 8 == 0, every row start 16-byte aligned (pointers and
                          strides of those tensors in multiples of 8 elements of 2 bytes) */
    bool out_pairs;    /* outputs (o, or dq/dk/dv) take aligned 32-bit pair stores */
    bool out_vec16;    /* outputs as vec16: D % 8 == 0, 16-byte aligned rows (uint4 stores) */
    bool plain_score;  /* fc_score_is_plain: no softcap, no ALiBi */
    bool scale_pos;    /* softmax scale > 0 */
    bool bwd;          /* built for the backward (dout, dq, dk, dv, dsinks set) */
    float scale;       /* softmax scale */
    float sl2e;        /* scale · log2(e): the plain path's one-FMA exp2 argument */
    fcc_device dev;
};

/* Builds p from a (backward fields when bwd). Queries the device once. */
flashc_status fcc_attn_make(const fc_attn *a, bool bwd, fcc_attn *p);

/* The score modifiers of (b, h) in log2 units (the fast kernels' unit). */
__host__ __device__ __forceinline__ fc_score_modf fcc_score_mod_l2(const fcc_attn &p, int64_t b, int64_t h) {
    return fc_score_modf_of(fc_score_mod_make(&p.score, b, h, FC_LOG2E));
}

/* ------------------------------------------------------------------ plan */
enum fcc_fwd_kernel { FCC_FWD_WGMMA = 0, FCC_FWD_MMA = 1, FCC_FWD_GENERIC = 2, FCC_FWD_DECODE = 3, FCC_FWD_DECODE_TMA = 4 };
enum fcc_bwd_kernel { FCC_BWD_MMA = 0, FCC_BWD_GENERIC = 1, FCC_BWD_WGMMA = 2 };

/* What each kernel accepts (the generic ones accept every valid problem). */
bool fcc_fwd_wgmma_supports(const fcc_attn &p);
bool fcc_fwd_mma_supports(const fcc_attn &p);
/* Split-KV decode (attn_decode.cu): F16/BF16, few query rows per kv head. */
bool fcc_fwd_decode_supports(const fcc_attn &p);
/* Its Hopper form (attn_decode_tma.cu, sm_90a): the same problems where the
 * k/v tensor maps apply (16-byte rows, page sizes multiple of 16). */
bool fcc_fwd_decode_tma_supports(const fcc_attn &p);
/* Its split count per work unit (row block × kv head × sequence) from the
 * units, the key tiles a unit may visit, the CTA slots of the device
 * (sm_count × CTAs per SM) and the warps per CTA. Pure. */
int fcc_decode_splits(int64_t units, int64_t tiles, int64_t slots, int nw);
bool fcc_bwd_mma_supports(const fcc_attn &p);
bool fcc_bwd_wgmma_supports(const fcc_attn &p);

/* forced: fc_knob_cuda_kernel() (FC_KNOB_AUTO, FC_KNOB_CUDA_GENERIC, FC_KNOB_CUDA_MMA). */
fcc_fwd_kernel fcc_plan_fwd(const fcc_attn &p, int forced);
fcc_bwd_kernel fcc_plan_bwd(const fcc_attn &p, int forced);

/* The kernels' launchers (each assumes its supports() held). */
flashc_status fcc_fwd_wgmma_run(const fcc_attn &p);
flashc_status fcc_fwd_mma_run(const fcc_attn &p);
flashc_status fcc_fwd_generic_run(const fcc_attn &p);
flashc_status fcc_fwd_decode_run(const fcc_attn &p);
flashc_status fcc_fwd_decode_tma_run(const fcc_attn &p);
flashc_status fcc_bwd_mma_run(const fcc_attn &p);
flashc_status fcc_bwd_wgmma_run(const fcc_attn &p);
flashc_status fcc_bwd_generic_run(const fcc_attn &p);

/* The row passes both backward kernels share (attn_generic_bwd.cu), on
 * p.a.stream; A = the accumulation type (double for F64, else float).
 * prep: Δ_i = Σ_d dO_id·O_id into Dbuf and L_i (natural units, from lse) into
 * Lbuf, both [B, Hq, Sq] of A. dsinks: dsinks[h·sdsink] = Σ_{b,i}
 * fc_dsink_term(s_h, L, Δ) in a fixed order (no atomics); only with sink logits. */
flashc_status fcc_bwd_prep_run(const fcc_attn &p, void *Lbuf, void *Dbuf);
flashc_status fcc_bwd_dsinks_run(const fcc_attn &p, const void *Lbuf, const void *Dbuf);

#endif /* FC_ATTN_PARAMS_CUH */
