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
flashc_status fc_attn_fwd_amx_bf16(const fc_attn *a);      /* BF16 on AMX tiles (same file) */

/* Work list: item t is (outer index, block index); cost = visible keys of
 * the block's union times its rows. Sorted heaviest first so that the
 * dynamic schedule does not end on one long causal block, then by `order`
 * (the caller's choice of which items run close together in time). */
typedef struct fc_work {
    int64_t outer, blk, cost, order;
} fc_work;

static inline int fc_work_cmp(const void *x, const void *y) {
    const fc_work *p = (const fc_work *)x, *q = (const fc_work *)y;
    if (p->cost != q->cost) return p->cost > q->cost ? -1 : 1;
    return p->order < q->order ? -1 : p->order > q->order;
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

/* Key rows. The kernels find K/V rows only through fc_kv_rows, so that
 * every path reads a paged KV cache in place: key j of batch b, kv head hk
 * of a k/v-shaped tensor with strides st (a->sk or a->sv) is at
 * b·st[0] + j·st[1] + hk·st[2] (elements) in a dense problem, and in a
 * paged one (a->block_table: attn_ragged.c hands each paged sequence over
 * as a B = 1 problem that keeps its row of the block table, page_size, sbt
 * and Bk) at row j % page_size of page block_table[b·sbt[0] + (j / page_size)
 * ·sbt[1]], clamped to [0, Bk) — fc_attn_key_offset's addressing. Any
 * page_size ≥ 1; one division per call, none per key.
 * off[t] = the offset of key j0 + t, t < n. */
static inline void fc_kv_rows(const fc_attn *a, const int64_t st[4], int64_t b, int64_t hk, int64_t j0, int64_t n,
                              int64_t *off) {
    if (!a->block_table) {
        const int64_t o = b * st[0] + j0 * st[1] + hk * st[2];
        for (int64_t t = 0; t < n; ++t) off[t] = o + t * st[1];
        return;
    }
    const int64_t ps = a->page_size;
    const int32_t *bt = a->block_table + b * a->sbt[0];
    int64_t p = j0 / ps, r = j0 - p * ps;
    for (int64_t t = 0; t < n; ++p, r = 0) {
        const int64_t o = fc_clamp64(bt[p * a->sbt[1]], 0, a->Bk - 1) * st[0] + hk * st[2];
        for (; r < ps && t < n; ++r, ++t) off[t] = o + r * st[1];
    }
}

/* Prefetches (into L2) the K and V rows [j1, n1) of kv head hk, batch b,
 * for the next tile; only for unit d-strides (rows are contiguous). */
static inline void fc_prefetch_kv(const fc_attn *a, int64_t b, int64_t hk, int64_t j1, int64_t n1, size_t esz) {
    if (a->sk[3] != 1 || a->sv[3] != 1) return;
    enum { CH = 32 };
    int64_t ko[CH], vo[CH];
    for (int64_t j = j1; j < n1; j += CH) {
        const int64_t n = n1 - j < CH ? n1 - j : CH;
        fc_kv_rows(a, a->sk, b, hk, j, n, ko);
        fc_kv_rows(a, a->sv, b, hk, j, n, vo);
        for (int64_t t = 0; t < n; ++t) {
            const char *kr = (const char *)a->k + ko[t] * (int64_t)esz, *vr = (const char *)a->v + vo[t] * (int64_t)esz;
            for (int64_t x = 0; x < a->D * (int64_t)esz; x += 64) {
                __builtin_prefetch(kr + x, 0, 2);
                __builtin_prefetch(vr + x, 0, 2);
            }
        }
    }
}

/* ---- key splits ----
 * With few (b, kv head, row block) items a thread would get one item or
 * none: then each block's keys are also cut into ns contiguous ranges of
 * its key list (the keys of fc_block_keysegs, in order), each item leaves
 * partial (m, ℓ, O) rows, and a second pass merges them in split order
 * (fc_fwd_merge). ns is a function of the shape only, never of the thread
 * count, so results are bit-identical across OMP_NUM_THREADS. */

/* Splits per block: enough for `target` items out of `items` unsplit ones,
 * with at least min_keys keys per split of the longest key list `keys`. */
static inline int64_t fc_fwd_nsplit(int64_t items, int64_t keys, int64_t target, int64_t min_keys) {
    if (items >= target) return 1;
    int64_t ns = (target + items - 1) / items;
    if (ns > keys / min_keys) ns = keys / min_keys;
    return ns < 1 ? 1 : ns;
}

/* Split s of ns of a key list of n keys: positions [*p0, *p1), cut at
 * multiples of align (the kernel's key tile), the last one to n. */
static inline void fc_fwd_split(int64_t n, int64_t s, int64_t ns, int64_t align, int64_t *p0, int64_t *p1) {
    *p0 = (n * s / ns) / align * align;
    *p1 = s + 1 == ns ? n : (n * (s + 1) / ns) / align * align;
}

/* The keys of ks at key-list positions [p0, p1) (positions count ks's keys
 * in order); [0, n) gives ks itself. */
static inline fc_keysegs fc_keysegs_part(const fc_keysegs *ks, int64_t p0, int64_t p1) {
    fc_keysegs out = {0};
    int64_t base = 0; /* key-list position of the segment's first key */
    for (int sg = 0; sg < ks->n; ++sg) {
        const int64_t len = ks->s1[sg] - ks->s0[sg];
        const int64_t q0 = p0 > base ? p0 : base, q1 = p1 < base + len ? p1 : base + len;
        if (q0 < q1) {
            out.s0[out.n] = ks->s0[sg] + (q0 - base);
            out.s1[out.n] = ks->s0[sg] + (q1 - base);
            ++out.n;
        }
        base += len;
    }
    return out;
}

static inline int64_t fc_keysegs_count(const fc_keysegs *ks) {
    int64_t n = 0;
    for (int sg = 0; sg < ks->n; ++sg) n += ks->s1[sg] - ks->s0[sg];
    return n;
}

/* A partial of `rows` rows: o (rows, dp) unnormalised, then m (rows, log2
 * units), then ℓ (rows): rows·dp + 2·rows floats. Merges the ns partials at
 * part + s·per_part (s < ns), rows r < nr, in split order: M = max_s m_s,
 * O = Σ_s 2^(m_s − M)·O_s, ℓ = Σ_s 2^(m_s − M)·ℓ_s, into o (nr, dp), m, l
 * (a row no split saw keeps M = −inf, ℓ = 0, O = 0). */
static inline void fc_fwd_merge(const float *part, int64_t per_part, int64_t ns, int64_t rows, int64_t nr,
                                int64_t dp, float *o, float *m, float *l) {
    for (int64_t r = 0; r < nr; ++r) {
        float mx = -INFINITY;
        for (int64_t s = 0; s < ns; ++s) mx = fmaxf(mx, part[s * per_part + rows * dp + r]);
        const float ms = mx == -INFINITY ? 0.0f : mx;
        float lsum = 0.0f;
        for (int64_t d = 0; d < dp; ++d) o[r * dp + d] = 0.0f;
        for (int64_t s = 0; s < ns; ++s) {
            const float *ps = part + s * per_part;
            const float w = exp2f(ps[rows * dp + r] - ms);
            lsum += w * ps[rows * dp + rows + r];
            for (int64_t d = 0; d < dp; ++d) o[r * dp + d] += w * ps[r * dp + d];
        }
        m[r] = mx;
        l[r] = lsum;
    }
}

/* The row finish of rows r0 .. r0 + nr − 1 of the grouped layout of batch
 * b, kv head hk (row r is query r / G of head hk·G + r % G): o (nr, ldo)
 * unnormalised, m (log2 units), l → the output rows (through store, the
 * ISA's fc_store_row) and lse. */
typedef void (*fc_store_row_fn)(void *dst, int64_t stride, int dtype, const float *src, int64_t D, float mul);
static inline void fc_fwd_finish_rows(const fc_attn *a, int64_t b, int64_t hk, int64_t r0, int64_t nr, const float *o,
                                      int64_t ldo, const float *m, const float *l, fc_store_row_fn store) {
    const int64_t G = a->Hq / a->Hkv;
    const size_t esz = a->dtype == FLASHC_F32 ? 4 : 2;
    for (int64_t r = 0; r < nr; ++r) {
        const int64_t i = (r0 + r) / G, h = hk * G + (r0 + r) % G;
        double factor, lse;
        fc_row_finish((double)m[r] * FC_LN2, (double)l[r], a->sink_logits != NULL, fc_attn_sink(a, h), &factor, &lse);
        const int64_t off = b * a->so[0] + i * a->so[1] + h * a->so[2];
        store((char *)a->o + off * (int64_t)esz, a->so[3], a->dtype, o + r * ldo, a->D, (float)factor);
        if (a->lse) ((float *)a->lse)[b * a->slse[0] + h * a->slse[1] + i * a->slse[2]] = (float)lse;
    }
}

/* ---- the grouped forward's driver (attn_fwd_body.h, attn_fwd_avx512bf16.c) ----
 * block: rows [r0, r0 + br) of the (query, group head) rows of batch b and
 * kv head hk, over the key-list positions [p0, p1) of the block's keys
 * (fc_keysegs_part of fc_fwd_rows_setup's keys); ws is this thread's
 * scratch. part = NULL: finishes the rows (output, lse); else leaves their
 * partial there (fc_fwd_merge's layout, rows = br, dp = the kernel's).
 * finish: fc_fwd_finish_rows with the ISA's store (for merged rows). */
typedef void (*fc_fwd_block_fn)(const fc_attn *a, int64_t b, int64_t hk, int64_t r0, int64_t p0, int64_t p1,
                                float *ws, float *part);
typedef void (*fc_fwd_finish_fn)(const fc_attn *a, int64_t b, int64_t hk, int64_t r0, int64_t nr, const float *o,
                                 int64_t ldo, const float *m, const float *l);
typedef struct fc_fwd_kernel {
    int64_t br, bc;        /* query rows per block, keys per tile */
    int64_t dp;            /* the head dim of the partial rows (≥ D) */
    size_t scratch_floats; /* per thread, zeroed once per call */
    fc_fwd_block_fn block;
    fc_fwd_finish_fn finish;
} fc_fwd_kernel;

/* Items the grouped forward aims at before it splits keys, and the fewest
 * keys per split (fc_fwd_nsplit): 32 items keep 16–32 cores busy, 512 keys
 * (4 tiles) make a split's partial rows and merge cheap next to its work. */
#define FC_FWD_SPLIT_TARGET 32
#define FC_FWD_SPLIT_KEYS 512

/* Runs the kernel over every (b, kv head, row block of br rows[, key
 * split]) under OpenMP, heaviest first, then merges the splits. */
flashc_status fc_fwd_run_grouped(const fc_attn *a, const fc_fwd_kernel *kn);

#endif /* FLASHC_CPU_ATTN_FWD_H */
