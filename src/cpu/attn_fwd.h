/*
 * attn_fwd.h — private to the CPU attention forward (src/cpu/attn_fwd*.c).
 *
 * The forward is FlashAttention-2: a work item is a block of query rows; it
 * walks the key tiles that some row of the block can see, keeping per row a
 * running max m, a running sum ℓ and an unnormalised output accumulator, and
 * rescales them by exp(m_old − m_new) when the max grows. The Sq×Sk score
 * matrix is never built. The attention definition (visibility, the score
 * pipeline with softcap and ALiBi, the row finish with the sink logit) is
 * the seam's (src/common/); the SIMD paths apply its score step on vectors
 * (simd_score.h) in the exp2 domain (unit log2 e), the scalar paths in
 * natural units. What is shared between the paths lives here: the per-row
 * ALiBi constants of a block, tile row bounds, K/V prefetch, the work list
 * (heaviest first).
 *
 * A row never sees what it cannot see: masked scores are −inf whatever K
 * holds, and in a partial tile whose V holds an inf or NaN the PV product
 * drops the p = 0 terms (0·inf would be NaN), bit-identically otherwise.
 *
 * Few query rows (decode) take another SIMD path, attn_fwd_decode_body.h:
 * keys on the lanes, work split over (b, kv head, key range); see there.
 */
#ifndef FLASHC_CPU_ATTN_FWD_H
#define FLASHC_CPU_ATTN_FWD_H

#include "flashc_internal.h"

#include <math.h>
#include <stdlib.h>

/* Per-path entry points; fc_plan_fwd (plan.h) picks one. */
flashc_status fc_attn_fwd_scalar_f32(const fc_attn *a);
flashc_status fc_attn_fwd_scalar_f64(const fc_attn *a);    /* F64: every ISA */
flashc_status fc_attn_fwd_avx2_f32(const fc_attn *a);      /* F32, F16, BF16 */
flashc_status fc_attn_fwd_avx2_decode(const fc_attn *a);   /* few query rows */
flashc_status fc_attn_fwd_avx512_f32(const fc_attn *a);    /* F32, F16, BF16 */
flashc_status fc_attn_fwd_avx512_decode(const fc_attn *a); /* few query rows */
flashc_status fc_attn_fwd_avx512bf16(const fc_attn *a);    /* BF16 on vdpbf16ps */

/* Work list: item t is (outer index, block index); cost = visible keys of
 * the block's union times its rows. Sorted heaviest first so that the
 * dynamic schedule does not end on one long causal block. */
typedef struct fc_work {
    int64_t outer, blk, cost;
} fc_work;

static inline int fc_work_cmp(const void *x, const void *y) {
    const fc_work *p = (const fc_work *)x, *q = (const fc_work *)y;
    if (p->cost != q->cost) return p->cost > q->cost ? -1 : 1;
    if (p->outer != q->outer) return p->outer < q->outer ? -1 : 1;
    return p->blk < q->blk ? -1 : p->blk > q->blk;
}

/* Key bounds inside one key tile [j0, j0 + nb) for a block of query rows
 * r0..r0+br of the grouped layout (row r is query (r0 + r) / G; rows ≥ nr
 * are padding and repeat the last query). se/lo/hi hold the visible ranges
 * of queries ia..ia+np-1. Per row: sel/lol/hil, the tile-relative bounds the
 * mask kernel uses (partial tiles only). Per group of rg rows: [jlo, jhi),
 * the keys some row of the group sees, so the kernels skip the far side of
 * a causal diagonal or a narrow window; groups of padding rows get an empty
 * range. */
static inline void fc_tile_row_bounds(int partial, int br, int rg, int64_t r0, int nr, int64_t G,
                                      int64_t ia, int np, const int64_t *se, const int64_t *lo,
                                      const int64_t *hi, int64_t j0, int nb, int32_t *sel,
                                      int32_t *lol, int32_t *hil, int32_t *jlo, int32_t *jhi) {
    if (partial) {
        for (int r = 0; r < br; ++r) {
            const int p = r < nr ? (int)((r0 + r) / G - ia) : np - 1;
            int64_t x;
            x = se[p] - j0; sel[r] = (int32_t)(x < 0 ? 0 : x > nb ? nb : x);
            x = lo[p] - j0; lol[r] = (int32_t)(x < 0 ? 0 : x > nb ? nb : x);
            x = hi[p] - j0; hil[r] = (int32_t)(x < 0 ? 0 : x > nb ? nb : x);
        }
        for (int g = 0; g < br / rg; ++g) {
            int32_t first = nb, last = 0; /* [first, last) */
            for (int r = g * rg; r < (g + 1) * rg; ++r) {
                const int win = lol[r] < hil[r];
                const int32_t f = sel[r] > 0 ? 0 : win ? lol[r] : nb;
                const int32_t e = win && hil[r] > sel[r] ? hil[r] : sel[r];
                if (f < first) first = f;
                if (e > last) last = e;
            }
            jlo[g] = first < last ? first : 0;
            jhi[g] = first < last ? last : 0;
        }
    } else {
        for (int g = 0; g < br / rg; ++g) { jlo[g] = 0; jhi[g] = nb; }
    }
    for (int g = (nr + rg - 1) / rg; g < br / rg; ++g) jlo[g] = jhi[g] = 0;
}

/* ALiBi per row of a block of the grouped layout (rows r0 + r, r < br, of
 * the Sq·G rows of batch b, kv head hk; rows r ≥ nr are padding): slope[r]
 * = unit·slope of the row's head, ioff[r] = i + Sk − Sq of its query
 * position i (the ALiBi distance to key j is ioff[r] − j); 0 for padding. */
static inline void fc_fwd_rows_alibi(const fc_score_params *sp, int64_t b, int64_t hk, int64_t G, int64_t r0, int nr,
                                     int br, double unit, float *slope, float *ioff) {
    for (int r = 0; r < br; ++r) {
        slope[r] = 0.0f;
        ioff[r] = 0.0f;
        if (r >= nr) continue;
        const int64_t i = (r0 + r) / G, h = hk * G + (r0 + r) % G;
        slope[r] = (float)fc_score_mod_make(sp, b, h, unit).slope;
        ioff[r] = (float)fc_alibi_dist(sp, i, 0);
    }
}

/* The seam's view of one row block of the grouped layout (rows r0 + r,
 * r < nr, of batch b and kv head hk; br rows with padding), shared by the
 * SIMD bodies: se/lo/hi receive the visible key ranges of the block's query
 * positions ia..ia+np−1, keys the keys some row sees (fc_block_keysegs); the
 * score variant and its constants in log2 units (qk_mul and cap are the same
 * for every head, the slope is per head, so per row: slope/ioff, written
 * only when the variant reads the ALiBi distance). */
typedef struct fc_fwd_rows {
    int64_t ia;
    int np;
    int mode;           /* fc_score_mode: the variant, dispatched per tile */
    fc_score_modf mod;  /* log2 units */
    fc_keysegs keys;
} fc_fwd_rows;

static inline fc_fwd_rows fc_fwd_rows_setup(const fc_attn *a, int64_t b, int64_t hk, int64_t r0, int nr, int br,
                                            int64_t *se, int64_t *lo, int64_t *hi, float *slope, float *ioff) {
    fc_fwd_rows w = {0}; /* unused key segments zeroed */
    const int64_t G = a->Hq / a->Hkv;
    const fc_mask mk = fc_attn_mask(a);
    const int64_t ib = (r0 + nr - 1) / G;
    w.ia = r0 / G;
    w.np = (int)(ib - w.ia + 1);
    for (int p = 0; p < w.np; ++p) fc_visible_keys(&mk, w.ia + p, &se[p], &lo[p], &hi[p]);
    fc_block_keysegs(&mk, w.ia, ib, &w.keys);
    const fc_score_params sp = fc_attn_score(a);
    w.mode = fc_score_mode(&sp);
    w.mod = fc_score_modf_of(fc_score_mod_make(&sp, b, hk * G, FC_LOG2E));
    if (FC_SCORE_NEEDS_DIST(w.mode)) fc_fwd_rows_alibi(&sp, b, hk, G, r0, nr, br, FC_LOG2E, slope, ioff);
    return w;
}

/* Prefetches (into L2) the K and V rows [j1, n1) of kv head hk, batch b,
 * for the next tile; only for unit d-strides (rows are contiguous). */
static inline void fc_prefetch_kv(const fc_attn *a, int64_t b, int64_t hk, int64_t j1, int64_t n1, size_t esz) {
    if (a->sk[3] != 1 || a->sv[3] != 1) return;
    for (int64_t j = j1; j < n1; ++j) {
        const char *kr = (const char *)a->k + (b * a->sk[0] + j * a->sk[1] + hk * a->sk[2]) * (int64_t)esz;
        const char *vr = (const char *)a->v + (b * a->sv[0] + j * a->sv[1] + hk * a->sv[2]) * (int64_t)esz;
        for (int64_t x = 0; x < a->D * (int64_t)esz; x += 64) {
            __builtin_prefetch(kr + x, 0, 2);
            __builtin_prefetch(vr + x, 0, 2);
        }
    }
}

/* One row block of the grouped forward: rows [r0, r0 + br) of the (query,
 * group head) rows of batch b and kv head hk; ws is this thread's scratch. */
typedef void (*fc_fwd_block_fn)(const fc_attn *a, int64_t b, int64_t hk, int64_t r0, float *ws);
/* Runs block over every (b, kv head, row block of br rows) under OpenMP,
 * heaviest first, with a zeroed scratch of scratch_floats floats per thread. */
flashc_status fc_fwd_run_grouped(const fc_attn *a, int64_t br, size_t scratch_floats, fc_fwd_block_fn block);

#endif /* FLASHC_CPU_ATTN_FWD_H */
