/*
 * attn_fwd.h — private to the CPU attention forward (src/cpu/attn_fwd*.c).
 *
 * The forward is FlashAttention-2: a work item is a block of query rows; it
 * walks the key tiles that some row of the block can see, keeping per row a
 * running max m, a running sum ℓ and an unnormalised output accumulator, and
 * rescales them by exp(m_old − m_new) when the max grows. The Sq×Sk score
 * matrix is never built. What is shared between the paths lives here: the
 * union of the rows' visible key ranges, tile classification, the work list
 * (heaviest first), and the per-row finish (O / ℓ, lse, sink logit).
 *
 * Few query rows (decode) take another SIMD path, attn_fwd_decode_body.h:
 * keys on the lanes, work split over (b, kv head, key range); see there.
 */
#ifndef FLASHC_CPU_ATTN_FWD_H
#define FLASHC_CPU_ATTN_FWD_H

#include "flashc_internal.h"

#include <math.h>
#include <stdlib.h>

/* Per-path entry points; fc_cpu_attn_fwd (attn_fwd.c) picks one. */
flashc_status fc_attn_fwd_scalar_f32(const fc_attn *a);
flashc_status fc_attn_fwd_scalar_f64(const fc_attn *a); /* F64: every ISA */
flashc_status fc_attn_fwd_avx2_f32(const fc_attn *a);   /* F32, F16, BF16 */
flashc_status fc_attn_fwd_avx512_f32(const fc_attn *a); /* F32, F16, BF16 */
flashc_status fc_attn_fwd_avx512bf16(const fc_attn *a);  /* BF16 on vdpbf16ps */

/* The keys some row of a block may see, as at most two disjoint sorted
 * half-open segments [s0[k], s1[k]), k < n. Because lo, hi and sink_end are
 * non-decreasing in the row index and consecutive rows' windows shift by at
 * most one key, the union of the rows' window ranges is one interval. */
typedef struct fc_keysegs {
    int n;
    int64_t s0[2], s1[2];
} fc_keysegs;

/* Query rows [ia, ib] (inclusive, ia ≤ ib) → the union of their visible keys. */
static inline void fc_block_keysegs(const fc_attn *a, int64_t ia, int64_t ib, fc_keysegs *ks) {
    int64_t se_max = 0, lo_min = a->Sk, hi_max = 0, se, lo, hi;
    for (int64_t i = ia; i <= ib; ++i) {
        fc_visible_range(a, i, &se, &lo, &hi);
        if (se > se_max) se_max = se;
        if (lo < hi) {
            if (lo < lo_min) lo_min = lo;
            if (hi > hi_max) hi_max = hi;
        }
    }
    ks->n = 0;
    if (hi_max <= lo_min) { lo_min = hi_max = 0; } /* no row has a window key */
    if (se_max > 0 && hi_max > lo_min && se_max >= lo_min) { /* touching: merge */
        ks->s0[0] = 0;
        ks->s1[0] = se_max > hi_max ? se_max : hi_max;
        ks->n = 1;
        return;
    }
    if (se_max > 0) { ks->s0[ks->n] = 0; ks->s1[ks->n] = se_max; ks->n++; }
    if (hi_max > lo_min) { ks->s0[ks->n] = lo_min; ks->s1[ks->n] = hi_max; ks->n++; }
}

/* Tile [j0, j1) for n query rows whose visible ranges are se[], lo[], hi[]
 * (fc_visible_range): FC_TILE_FULL when every row sees every key (no mask),
 * FC_TILE_EMPTY when no row sees any (skip), else FC_TILE_PARTIAL (mask per
 * element). O(n) per tile, against O(n·(j1−j0)·D) of arithmetic. */
enum { FC_TILE_EMPTY = 0, FC_TILE_PARTIAL = 1, FC_TILE_FULL = 2 };
static inline int fc_tile_kind(const int64_t *se, const int64_t *lo, const int64_t *hi, int n,
                               int64_t j0, int64_t j1) {
    int all = 1, any = 0;
    for (int r = 0; r < n; ++r) {
        /* When the sinks reach the window the row sees one interval [0, hi). */
        const int64_t wlo = se[r] == lo[r] ? 0 : lo[r];
        const int full = j1 <= se[r] || (wlo <= j0 && j1 <= hi[r]);
        const int none = j0 >= se[r] && (lo[r] >= hi[r] || j1 <= lo[r] || j0 >= hi[r]);
        all &= full;
        any |= !none;
    }
    return all ? FC_TILE_FULL : any ? FC_TILE_PARTIAL : FC_TILE_EMPTY;
}

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

/* Per-row finish, shared by every path. acc is the unnormalised output row
 * relative to e^M (M = the row max in natural-log units, −inf when the row
 * saw nothing), l = Σ e^{x − M}. Writes the factor to multiply acc by, and
 * the row's lse L = log(l·e^M + e^s) (s = sink logit, has_sink), computed
 * without overflow. A row with no visible key: factor 0, L = s or −inf. */
static inline void fc_row_finish(double M, double l, int has_sink, double s,
                                 double *factor, double *lse) {
    if (!(l > 0.0)) {
        *factor = 0.0;
        *lse = has_sink ? s : -INFINITY;
        return;
    }
    if (!has_sink) {
        *factor = 1.0 / l;
        *lse = M + log(l);
        return;
    }
    const double mx = M > s ? M : s;
    const double den = l * exp(M - mx) + exp(s - mx); /* ≥ 1 term is e^0 */
    *factor = exp(M - mx) / den;                        /* = 1 / (l + e^{s−M}) */
    *lse = mx + log(den);
}

/* The SIMD paths take the decode path (attn_fwd_decode_body.h: keys on the
 * lanes) when a (b, kv head) has at most this many query rows Sq·G.
 * FLASHC_CPU_DECODE_ROWS=n overrides the ISA's default (0 = never; capped
 * at 64), read at every call so that tests can drive both paths. */
static inline int64_t fc_decode_rows_max(int64_t dflt) {
    const char *e = getenv("FLASHC_CPU_DECODE_ROWS");
    if (!e || !*e) return dflt;
    const long n = strtol(e, NULL, 10);
    return n < 0 ? 0 : n > 64 ? 64 : n;
}

#endif /* FLASHC_CPU_ATTN_FWD_H */
