/*
 * attn_mask.h — which keys a query row sees: the one place the masking
 * semantics of flashc.h (causal, sliding window, sink tokens, bottom-right
 * alignment) are written as code. Plain C, host and device (FC_HOST_DEVICE):
 * every kernel of both backends derives its loop bounds, its per-element
 * test and its tile classification from the functions below and restates
 * none of them.
 *
 * For query row i (0 ≤ i < Sq) the visible keys are the union of two
 * disjoint half-open ranges [0, se) ∪ [lo, hi), 0 ≤ se ≤ lo ≤ hi ≤ Sk
 * (se: sink tokens; [lo, hi): the window). se, lo and hi are non-decreasing
 * in i, and consecutive rows' windows move by at most one key: block
 * unions and the binary searches below rely on both facts.
 */
#ifndef FLASHC_COMMON_ATTN_MASK_H
#define FLASHC_COMMON_ATTN_MASK_H

#include "fc_defs.h"

/* The masking part of a problem (what fc_attn resolved from the params):
 * wl/wr = window (L, R), −1 open, causal folded in as wr = 0. */
typedef struct fc_mask {
    int64_t Sq, Sk, wl, wr, n_sink;
} fc_mask;

/* Per-element test: key j is visible to a row whose ranges are (se, lo, hi).
 * Type-generic (int32 tile-relative bounds or int64 absolute ones). */
#define FC_KEY_VISIBLE(se, lo, hi, j) ((j) < (se) || ((lo) <= (j) && (j) < (hi)))

static inline FC_HOST_DEVICE int fc_key_visible(int64_t se, int64_t lo, int64_t hi, int64_t j) {
    return FC_KEY_VISIBLE(se, lo, hi, j);
}

/* The visible ranges of row i. Saturating: window sizes up to INT64_MAX
 * never overflow (a window wider than the sequence is an open side). The
 * window sides are clamped to the sequence first (wl to Sk, wr to Sq: the
 * same ranges), so that no expression below can overflow even when a
 * compiler evaluates both arms of a selection: nvcc turned
 * `wl >= diag ? 0 : diag − wl` into max(0, diag − wl), which wrapped for
 * wl near INT64_MAX (every row then saw no key in the CUDA dK/dV kernel). */
static inline FC_HOST_DEVICE void fc_visible_keys(const fc_mask *m, int64_t i, int64_t *se, int64_t *lo,
                                                  int64_t *hi) {
    const int64_t diag = i + (m->Sk - m->Sq); /* the key aligned with row i: −Sq < diag < Sk */
    const int64_t wl = (m->wl < 0 || m->wl > m->Sk) ? m->Sk : m->wl; /* 0 ≤ wl ≤ Sk */
    const int64_t wr = (m->wr < 0 || m->wr > m->Sq) ? m->Sq : m->wr; /* 0 ≤ wr ≤ Sq */
    /* hi = min(Sk, diag + wr + 1): Sk − diag = Sq − i ≥ 1, and
     * diag + wr + 1 ≤ Sk + Sq. */
    int64_t h = wr >= m->Sk - diag ? m->Sk : diag + wr + 1;
    if (h < 0) h = 0;
    /* lo = max(0, diag − wl): −Sq − Sk < diag − wl < Sk. */
    int64_t l = wl >= diag ? 0 : diag - wl;
    if (l > h) l = h;
    int64_t s = m->n_sink < l ? m->n_sink : l;
    if (s < 0) s = 0;
    *se = s;
    *lo = l;
    *hi = h;
}

/* The same with int results, for kernels whose sizes are known to fit. */
static inline FC_HOST_DEVICE void fc_visible_keys_int(const fc_mask *m, int64_t i, int *se, int *lo, int *hi) {
    int64_t s, l, h;
    fc_visible_keys(m, i, &s, &l, &h);
    *se = (int)s;
    *lo = (int)l;
    *hi = (int)h;
}

/* The visible ranges of the rows i0 + c, 0 ≤ c < FC_VIS_SPAN, from one
 * evaluation at row i0 (fc_vis_span_of, 64-bit) and int32 min/max per row
 * (fc_vis_span_at): for kernels whose per-element test walks the rows of a
 * tile (the backward's columns are query rows), where a full evaluation per
 * row cost ~30 instructions. Exact for every row < Sq: hi = clamp(diag + wr
 * + 1, 0, Sk) and lo = clamp(diag − wl, 0, hi) are linear in the row until
 * they clamp, and the bases are clamped to [−FC_VIS_SPAN, Sk] first, which
 * changes no clamped value for c < FC_VIS_SPAN. Sizes must fit int32
 * (tests/test_mask_seam.c checks it against fc_visible_keys). */
#define FC_VIS_SPAN 256
typedef struct fc_vis_span {
    int32_t h0, l0, ns, sk; /* hi and lo of row i0 unclamped (in [−SPAN, Sk]), sinks in [0, Sk], Sk */
} fc_vis_span;

static inline FC_HOST_DEVICE fc_vis_span fc_vis_span_of(const fc_mask *m, int64_t i0) {
    const int64_t diag = i0 + (m->Sk - m->Sq);
    const int64_t wl = (m->wl < 0 || m->wl > m->Sk) ? m->Sk : m->wl; /* as fc_visible_keys */
    const int64_t wr = (m->wr < 0 || m->wr > m->Sq) ? m->Sq : m->wr;
    const int64_t h = diag + wr + 1, l = diag - wl, lo_ = -(int64_t)FC_VIS_SPAN; /* |.| ≤ Sq + Sk + 1 */
    fc_vis_span v;
    v.h0 = (int32_t)(h < lo_ ? lo_ : h > m->Sk ? m->Sk : h);
    v.l0 = (int32_t)(l < lo_ ? lo_ : l > m->Sk ? m->Sk : l);
    v.ns = (int32_t)(m->n_sink < 0 ? 0 : m->n_sink > m->Sk ? m->Sk : m->n_sink);
    v.sk = (int32_t)m->Sk;
    return v;
}

static inline FC_HOST_DEVICE void fc_vis_span_at(fc_vis_span v, int c, int *se, int *lo, int *hi) {
    int h = v.h0 + c, l = v.l0 + c;
    h = h < 0 ? 0 : h > v.sk ? v.sk : h;
    l = l < 0 ? 0 : l > h ? h : l;
    *se = v.ns < l ? v.ns : l;
    *lo = l;
    *hi = h;
}

/* Is key j visible to row i? (The per-element test on absolute indices.) */
static inline FC_HOST_DEVICE int fc_visible(const fc_mask *m, int64_t i, int64_t j) {
    int64_t s, l, h;
    fc_visible_keys(m, i, &s, &l, &h);
    return FC_KEY_VISIBLE(s, l, h, j);
}

/* ------------------------------------------------ key segments of a row block */
/* The keys some row of [ia, ib] (inclusive) may see, as at most two disjoint
 * sorted half-open segments [s0[k], s1[k]), k < n: the sink range of the
 * last row and the union of the window ranges (one interval, by the facts
 * above); merged when they touch. */
typedef struct fc_keysegs {
    int n;
    int64_t s0[2], s1[2];
} fc_keysegs;

static inline FC_HOST_DEVICE void fc_block_keysegs(const fc_mask *m, int64_t ia, int64_t ib, fc_keysegs *ks) {
    int64_t se_max = 0, lo_min = m->Sk, hi_max = 0, se, lo, hi;
    /* lo, hi, se are non-decreasing: the extremes come from rows ia and ib,
     * except that rows with an empty window must not pull lo_min down. */
    for (int64_t i = ia; i <= ib; ++i) {
        fc_visible_keys(m, i, &se, &lo, &hi);
        if (se > se_max) se_max = se;
        if (lo < hi) {
            if (lo < lo_min) lo_min = lo;
            if (hi > hi_max) hi_max = hi;
            break; /* the first row with a window has the smallest lo */
        }
    }
    fc_visible_keys(m, ib, &se, &lo, &hi);
    if (se > se_max) se_max = se;
    if (lo < hi) {
        if (lo < lo_min) lo_min = lo;
        if (hi > hi_max) hi_max = hi;
    }
    if (hi_max <= lo_min) lo_min = hi_max = 0; /* no row has a window key */
    const int has_s = se_max > 0, has_w = hi_max > lo_min;
    if (has_s && has_w && se_max >= lo_min) { /* touching: merge */
        ks->s0[0] = 0;
        ks->s1[0] = se_max > hi_max ? se_max : hi_max;
        ks->n = 1;
        return;
    }
    /* Constant indices only, so that device code keeps ks in registers. */
    ks->s0[0] = has_s ? 0 : lo_min;
    ks->s1[0] = has_s ? se_max : hi_max;
    ks->s0[1] = lo_min;
    ks->s1[1] = hi_max;
    ks->n = has_s + has_w;
}

/* Tile classification for a block of consecutive rows, from the ranges of its
 * first row (se_a, lo_a, hi_a) and last row (se_b, lo_b, hi_b):
 * full  — every row sees every key of [j0, j1) (no per-element mask needed);
 * empty — no row sees any key of [j0, j1) (skip the tile).
 * Both are conservative (a false answer only costs a mask). The macros are
 * type-generic (int32 in the tensor-core kernels: an int64 test there made
 * nvcc predicate and spill the per-element mask, measured on sm_80). */
#define FC_TILE_FULL(se_a, lo_b, hi_a, j0, j1) ((j1) <= (se_a) || ((lo_b) <= (j0) && (j1) <= (hi_a)))
#define FC_TILE_EMPTY(se_b, lo_a, hi_b, j0, j1) ((j0) >= (se_b) && ((hi_b) <= (j0) || (lo_a) >= (j1)))
static inline FC_HOST_DEVICE int fc_tile_full(int64_t se_a, int64_t lo_b, int64_t hi_a, int64_t j0, int64_t j1) {
    return FC_TILE_FULL(se_a, lo_b, hi_a, j0, j1);
}
static inline FC_HOST_DEVICE int fc_tile_empty(int64_t se_b, int64_t lo_a, int64_t hi_b, int64_t j0, int64_t j1) {
    return FC_TILE_EMPTY(se_b, lo_a, hi_b, j0, j1);
}

/* Per-row classification (exact) of the tile [j0, j1) for rows with ranges
 * se[r], lo[r], hi[r], r < n: FC_TILE_FULL, FC_TILE_EMPTY or FC_TILE_PARTIAL. */
enum { FC_TILE_EMPTY = 0, FC_TILE_PARTIAL = 1, FC_TILE_FULL = 2 };
static inline FC_HOST_DEVICE int fc_tile_kind(const int64_t *se, const int64_t *lo, const int64_t *hi, int n,
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

/* ------------------------------------------- query rows that see a key block */
/* The first row i in [0, Sq) for which a monotone predicate on its ranges
 * holds (Sq when none): one binary search, three predicates. */
enum { FC_ROWS_HI_GT = 0, /* hi(i) > key */
       FC_ROWS_LO_GE = 1, /* lo(i) ≥ key */
       FC_ROWS_SE_GT = 2  /* se(i) > key */ };
static inline FC_HOST_DEVICE int64_t fc_first_row(const fc_mask *m, int pred, int64_t key) {
    int64_t a = 0, b = m->Sq; /* answer in [a, b] */
    while (a < b) {
        const int64_t mid = a + (b - a) / 2;
        int64_t s, l, h;
        fc_visible_keys(m, mid, &s, &l, &h);
        const int ok = pred == FC_ROWS_HI_GT ? h > key : pred == FC_ROWS_LO_GE ? l >= key : s > key;
        if (ok) b = mid;
        else a = mid + 1;
    }
    return a;
}

/* The query rows that see some key of [j0, j1), as at most two disjoint
 * sorted half-open row segments [r0[k], r1[k]), k < return value: the rows
 * whose window meets the block ([first hi > j0, first lo ≥ j1)) and the rows
 * whose sink range meets it ([first se > j0, Sq)); merged when they touch.
 * (A row inside a segment may still see none of the block's keys; the
 * per-element test decides.) */
static inline FC_HOST_DEVICE int fc_key_block_rows(const fc_mask *m, int64_t j0, int64_t j1, int64_t r0[2],
                                                   int64_t r1[2]) {
    const int64_t ia = fc_first_row(m, FC_ROWS_HI_GT, j0);
    const int64_t ib = fc_first_row(m, FC_ROWS_LO_GE, j1);
    const int64_t ic = fc_first_row(m, FC_ROWS_SE_GT, j0);
    const int has_w = ia < ib, has_s = ic < m->Sq;
    /* Constant indices only (device code keeps r0/r1 in registers); entries
     * past the returned count are empty segments. */
    r0[1] = ic;
    r1[1] = m->Sq;
    if (has_w && has_s && ic <= ib) { /* touching or overlapping: one segment */
        r0[0] = ia < ic ? ia : ic;
        r1[0] = m->Sq;
        r0[1] = r1[1] = 0;
        return 1;
    }
    r0[0] = has_w ? ia : ic;
    r1[0] = has_w ? ib : m->Sq;
    if (!(has_w && has_s)) r0[1] = r1[1] = 0;
    return has_w + has_s;
}

#endif /* FLASHC_COMMON_ATTN_MASK_H */
