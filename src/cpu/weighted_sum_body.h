/* SIMD weighted row-sum body, included once per ISA by weighted_sum_avx2.c
 * and weighted_sum_avx512.c after they define the vector vocabulary:
 *   VF / NF  fp32 vector and its lane count;  VD / ND  the f64 ones
 *   vf_zero vf_set1 vf_load vf_store vf_fma(a,b,c)=a*b+c vf_add vf_mul vf_hsum
 *   vf_hsum4(a,b,c,d,out)  four vf_hsum at once, bit-identical to each
 *   vf_load_bf16 vf_load_f16 vf_store_bf16 vf_store_f16   (16-bit <-> fp32)
 *   vf_stream vf_stream_bf16 vf_stream_f16 vd_stream     (non-temporal, aligned)
 *   vd_zero vd_set1 vd_load vd_store vd_fma vd_add vd_mul vd_hsum
 *   WS_NAME(fwd) / WS_NAME(bwd)  the exported names.
 * Case taken (fc_wsum_simd_ok_*): x / dx unit-stride along D.
 *   x (R, D), w (D,), y (R,):  y[r] = Σ_d x[r, d] · w[d]
 *   bwd: dx[r, d] = dy[r] · w[d];  dw[d] = Σ_r dy[r] · x[r, d]
 * Forward: per row, 4 independent accumulators over d, combined as
 * (a0 + a1) + (a2 + a3) and then across lanes in a fixed tree: the order
 * depends on D only, not on the thread count or the row's position. Backward: the reference path's block
 * scheme (rows_per_block(R), partials reduced in block order); inside a
 * block up to 4 rows are folded into one pass over the partial row, in
 * row order, so each partial element sees the same sequence of FMAs as a
 * row-at-a-time loop. dx is written row by row in its own pass (w stays in
 * L1), with non-temporal stores when dx is large (WS_NT_BYTES), as a copy
 * does. w is converted once to a zero-padded fp32 (f64) row
 * of Dp = D rounded up to the lane count; tails of x use zero-padded
 * copies, tails of dx partial stores. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "weighted_sum.h"

#define WS_AI static inline __attribute__((always_inline))

/* --------------------------------------------------------- 16/32-bit rows */
WS_AI VF ldx(int dt, const void *p, int64_t d) {
    if (dt == FLASHC_F32) return vf_load((const float *)p + d);
    if (dt == FLASHC_BF16) return vf_load_bf16((const uint16_t *)p + d);
    return vf_load_f16((const uint16_t *)p + d);
}
WS_AI VF ldx_tail(int dt, const void *p, int64_t d, int64_t n) {
    float tmp[NF]; /* big enough for NF elements of any 2/4-byte dtype */
    memset(tmp, 0, sizeof tmp);
    const size_t e = dt == FLASHC_F32 ? 4 : 2;
    memcpy(tmp, (const char *)p + d * (int64_t)e, (size_t)n * e);
    return ldx(dt, tmp, 0);
}
WS_AI void stx(int dt, void *p, int64_t d, VF v) {
    if (dt == FLASHC_F32) vf_store((float *)p + d, v);
    else if (dt == FLASHC_BF16) vf_store_bf16((uint16_t *)p + d, v);
    else vf_store_f16((uint16_t *)p + d, v);
}
WS_AI void stx_tail(int dt, void *p, int64_t d, int64_t n, VF v) {
    float tmp[NF];
    const size_t e = dt == FLASHC_F32 ? 4 : 2;
    stx(dt, tmp, 0, v);
    memcpy((char *)p + d * (int64_t)e, tmp, (size_t)n * e);
}
/* Non-temporal stores of v (p + d aligned to the store's width), for dx this large
 * (bytes): it will not be read back from cache before being evicted. */
#define WS_NT_BYTES ((int64_t)16 << 20)
/* ... and rows at least this long (bytes): each row's unaligned head and
 * tail are plain stores, and partly written lines make write-combining
 * slow, so short rows keep plain stores throughout. */
#define WS_NT_ROW_BYTES 1024
WS_AI void stx_nt(int dt, void *p, int64_t d, VF v) {
    if (dt == FLASHC_F32) vf_stream((float *)p + d, v);
    else if (dt == FLASHC_BF16) vf_stream_bf16((uint16_t *)p + d, v);
    else vf_stream_f16((uint16_t *)p + d, v);
}
static size_t ws_esz(int dt) { return flashc_dtype_size(dt); }

/* Scalar element i (stride s) of a 2/4/8-byte row, as float / stored from float. */
WS_AI float ld1(int dt, const void *p, int64_t i) {
    if (dt == FLASHC_F32) return ((const float *)p)[i];
    if (dt == FLASHC_BF16) return fc_bf16_to_f32(((const uint16_t *)p)[i]);
    return fc_f16_to_f32(((const uint16_t *)p)[i]);
}
WS_AI void st1(int dt, void *p, int64_t i, float v) {
    if (dt == FLASHC_F32) ((float *)p)[i] = v;
    else if (dt == FLASHC_BF16) ((uint16_t *)p)[i] = fc_f32_to_bf16(v);
    else ((uint16_t *)p)[i] = fc_f32_to_f16(v);
}

/* Offset of row r; after ws_collapse most callers have a single outer axis. */
WS_AI int64_t roff(const fc_wsum *p, const int64_t *ostr, int64_t r) {
    return p->nouter == 1 ? r * ostr[0] : fc_wsum_row_offset(p, ostr, r);
}

/* Merges outer axes k, k+1 where every tensor in use steps through them as
 * one axis (ostr[k] == ostr[k+1]·shape[k+1]) and drops size-1 axes; the
 * rows and their offsets are unchanged, only cheaper to compute. */
static void ws_collapse(fc_wsum *q) {
    int64_t *str[4];
    int ns = 0;
    if (q->x) str[ns++] = q->x_ostr;
    if (q->y) str[ns++] = q->y_ostr;
    if (q->dy) str[ns++] = q->dy_ostr;
    if (q->dx) str[ns++] = q->dx_ostr;
    int n = 0;
    for (int k = 0; k < q->nouter; ++k) {
        if (q->outer_shape[k] == 1) continue;
        int merge = n > 0;
        for (int i = 0; i < ns && merge; ++i) merge = str[i][n - 1] == str[i][k] * q->outer_shape[k];
        if (merge) {
            q->outer_shape[n - 1] *= q->outer_shape[k];
            for (int i = 0; i < ns; ++i) str[i][n - 1] = str[i][k];
        } else {
            q->outer_shape[n] = q->outer_shape[k];
            for (int i = 0; i < ns; ++i) str[i][n] = str[i][k];
            ++n;
        }
    }
    q->nouter = n;
}

/* ------------------------------------------------------------ forward */
/* x row (D,) of dtype dt · w32 (Dp,) zero-padded. */
WS_AI VF dot_row(int dt, const void *x, const float *w, int64_t D) {
    VF a0 = vf_zero(), a1 = vf_zero(), a2 = vf_zero(), a3 = vf_zero();
    int64_t d = 0;
    for (; d + 4 * NF <= D; d += 4 * NF) {
        a0 = vf_fma(ldx(dt, x, d), vf_load(w + d), a0);
        a1 = vf_fma(ldx(dt, x, d + NF), vf_load(w + d + NF), a1);
        a2 = vf_fma(ldx(dt, x, d + 2 * NF), vf_load(w + d + 2 * NF), a2);
        a3 = vf_fma(ldx(dt, x, d + 3 * NF), vf_load(w + d + 3 * NF), a3);
    }
    if (d + NF <= D) { a0 = vf_fma(ldx(dt, x, d), vf_load(w + d), a0); d += NF; }
    if (d + NF <= D) { a1 = vf_fma(ldx(dt, x, d), vf_load(w + d), a1); d += NF; }
    if (d + NF <= D) { a2 = vf_fma(ldx(dt, x, d), vf_load(w + d), a2); d += NF; }
    if (d < D) a3 = vf_fma(ldx_tail(dt, x, d, D - d), vf_load(w + d), a3);
    return vf_add(vf_add(a0, a1), vf_add(a2, a3));
}

/* Rows [r0, r1) for one dtype. The OpenMP regions live in the drivers
 * below, outside the always_inline bodies: GCC outlines a parallel region
 * before inlining, so a region inside them would keep dt a run-time value. */
WS_AI void fwd_range(int dt, const fc_wsum *p, const float *w, int64_t r0, int64_t r1) {
    const int64_t e = (int64_t)ws_esz(dt);
    const char *x0 = (const char *)p->x;
    int64_t r = r0;
    /* Four rows share one lane reduction (vf_hsum4 is bit-identical to
     * vf_hsum per row, so the grouping leaves every y[r] unchanged). */
    for (; r + 4 <= r1; r += 4) {
        const VF s0 = dot_row(dt, x0 + roff(p, p->x_ostr, r) * e, w, p->D);
        const VF s1 = dot_row(dt, x0 + roff(p, p->x_ostr, r + 1) * e, w, p->D);
        const VF s2 = dot_row(dt, x0 + roff(p, p->x_ostr, r + 2) * e, w, p->D);
        const VF s3 = dot_row(dt, x0 + roff(p, p->x_ostr, r + 3) * e, w, p->D);
        float out[4];
        vf_hsum4(s0, s1, s2, s3, out);
        for (int j = 0; j < 4; ++j) st1(dt, p->y, roff(p, p->y_ostr, r + j), out[j]);
    }
    for (; r < r1; ++r)
        st1(dt, p->y, roff(p, p->y_ostr, r), vf_hsum(dot_row(dt, x0 + roff(p, p->x_ostr, r) * e, w, p->D)));
}

typedef void (*ws_fwd_fn)(const fc_wsum *p, const void *w, int64_t r0, int64_t r1);

/* Rows split evenly into one contiguous range per thread; each row's result
 * depends on the row alone. */
static void fwd_par(const fc_wsum *p, const void *w, ws_fwd_fn f) {
#pragma omp parallel
    {
        const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
        const int64_t r0 = p->R / nt * t + (t < p->R % nt ? t : p->R % nt);
        const int64_t r1 = r0 + p->R / nt + (t < p->R % nt);
        if (r1 > r0) f(p, w, r0, r1);
    }
}

WS_AI double dot_row_f64(const double *x, const double *w, int64_t D) {
    VD a0 = vd_zero(), a1 = vd_zero(), a2 = vd_zero(), a3 = vd_zero();
    int64_t d = 0;
    for (; d + 4 * ND <= D; d += 4 * ND) {
        a0 = vd_fma(vd_load(x + d), vd_load(w + d), a0);
        a1 = vd_fma(vd_load(x + d + ND), vd_load(w + d + ND), a1);
        a2 = vd_fma(vd_load(x + d + 2 * ND), vd_load(w + d + 2 * ND), a2);
        a3 = vd_fma(vd_load(x + d + 3 * ND), vd_load(w + d + 3 * ND), a3);
    }
    if (d + ND <= D) { a0 = vd_fma(vd_load(x + d), vd_load(w + d), a0); d += ND; }
    if (d + ND <= D) { a1 = vd_fma(vd_load(x + d), vd_load(w + d), a1); d += ND; }
    if (d + ND <= D) { a2 = vd_fma(vd_load(x + d), vd_load(w + d), a2); d += ND; }
    if (d < D) {
        double tmp[ND];
        memset(tmp, 0, sizeof tmp);
        memcpy(tmp, x + d, (size_t)(D - d) * sizeof(double));
        a3 = vd_fma(vd_load(tmp), vd_load(w + d), a3);
    }
    return vd_hsum(vd_add(vd_add(a0, a1), vd_add(a2, a3)));
}

static void fwd_range_f64(const fc_wsum *p, const void *wv, int64_t r0, int64_t r1) {
    const double *w = (const double *)wv;
    for (int64_t r = r0; r < r1; ++r)
        ((double *)p->y)[roff(p, p->y_ostr, r)] = dot_row_f64((const double *)p->x + roff(p, p->x_ostr, r), w, p->D);
}
static void fwd_range_f32(const fc_wsum *p, const void *w, int64_t r0, int64_t r1) {
    fwd_range(FLASHC_F32, p, (const float *)w, r0, r1);
}
static void fwd_range_bf16(const fc_wsum *p, const void *w, int64_t r0, int64_t r1) {
    fwd_range(FLASHC_BF16, p, (const float *)w, r0, r1);
}
static void fwd_range_f16(const fc_wsum *p, const void *w, int64_t r0, int64_t r1) {
    fwd_range(FLASHC_F16, p, (const float *)w, r0, r1);
}

/* w (D,) any stride -> zero-padded row of Dp elements (fp32, or f64 for F64). */
static void *load_w(const fc_wsum *p, int64_t Dp) {
    const int f64 = p->dtype == FLASHC_F64;
    /* + one vector: dx_row reads w[d .. d+lanes) at unaligned d < D */
    void *w = calloc((size_t)Dp + 16, f64 ? sizeof(double) : sizeof(float));
    if (!w) return NULL;
    for (int64_t d = 0; d < p->D; ++d) {
        if (f64) ((double *)w)[d] = ((const double *)p->w)[d * p->w_str];
        else ((float *)w)[d] = ld1(p->dtype, p->w, d * p->w_str);
    }
    return w;
}

flashc_status WS_NAME(fwd)(const fc_wsum *p0) {
    fc_wsum q = *p0;
    const fc_wsum *p = &q;
    q.dy = NULL;
    q.dx = NULL;
    ws_collapse(&q);
    const int64_t lanes = p->dtype == FLASHC_F64 ? ND : NF;
    const int64_t Dp = (p->D + lanes - 1) / lanes * lanes;
    void *w = load_w(p, Dp);
    if (!w) return fc_set_error(FLASHC_ERR_OUT_OF_MEMORY, "weighted_sum: cannot allocate %lld elements for w",
                                (long long)Dp);
    fwd_par(p, w, p->dtype == FLASHC_F64   ? fwd_range_f64
                  : p->dtype == FLASHC_F32  ? fwd_range_f32
                  : p->dtype == FLASHC_BF16 ? fwd_range_bf16
                                            : fwd_range_f16);
    free(w);
    return FLASHC_OK;
}

/* ----------------------------------------------------------- backward */
/* KR rows (KR ≤ 4) of one block, one pass over d:
 *   acc[d] = fma(g[KR-1], x[KR-1][d], ... fma(g[0], x[0][d], acc[d]))
 * acc is (Dp,), zero beyond D. */
WS_AI void dw_pass(int dt, int KR, int64_t D, float *acc, const float *g, const char **x) {
    VF gv[4];
#pragma GCC unroll 4
    for (int j = 0; j < KR; ++j) gv[j] = vf_set1(g[j]);
    int64_t d = 0;
    for (; d + NF <= D; d += NF) {
        VF a = vf_load(acc + d);
#pragma GCC unroll 4
        for (int j = 0; j < KR; ++j) a = vf_fma(gv[j], ldx(dt, x[j], d), a);
        vf_store(acc + d, a);
    }
    if (d < D) {
        VF a = vf_load(acc + d);
#pragma GCC unroll 4
        for (int j = 0; j < KR; ++j) a = vf_fma(gv[j], ldx_tail(dt, x[j], d, D - d), a);
        vf_store(acc + d, a);
    }
}

/* dx row (D,) = g · w. With nt, the stretch from the first boundary of a
 * vector store's width on goes through non-temporal stores; the same
 * products either way. */
WS_AI void dx_row(int dt, int nt, char *dx, float g, const float *w, int64_t D) {
    const int64_t e = dt == FLASHC_F32 ? 4 : 2;
    const VF gv = vf_set1(g);
    int64_t d = 0;
    if (nt && ((uintptr_t)dx % (uintptr_t)e) == 0) {
        const uintptr_t vb = (uintptr_t)(NF * e); /* one store's width, and alignment */
        int64_t head = (int64_t)((vb - ((uintptr_t)dx & (vb - 1))) & (vb - 1)) / e; /* < NF */
        if (head > D) head = D;
        if (head) stx_tail(dt, dx, 0, head, vf_mul(gv, vf_load(w)));
        for (d = head; d + NF <= D; d += NF) stx_nt(dt, dx, d, vf_mul(gv, vf_load(w + d)));
    } else {
        for (; d + NF <= D; d += NF) stx(dt, dx, d, vf_mul(gv, vf_load(w + d)));
    }
    if (d < D) stx_tail(dt, dx, d, D - d, vf_mul(gv, vf_load(w + d)));
}

/* Block b: rows [b·rpb, min((b+1)·rpb, R)) into partial row part[b] (Dp,). */
WS_AI void bwd_block(int dt, const fc_wsum *p, const float *w, float *part, int64_t Dp, int64_t rpb,
                     int64_t b) {
    const size_t e = ws_esz(dt);
    float *acc = part ? part + b * Dp : NULL;
    if (acc) memset(acc, 0, (size_t)Dp * sizeof(float));
    const int64_t r1 = (b + 1) * rpb < p->R ? (b + 1) * rpb : p->R;
    for (int64_t r = b * rpb; r < r1;) {
        const int kr = r1 - r >= 4 ? 4 : 1;
        float g[4];
        const char *x[4] = {0};
        char *dx[4] = {0};
        for (int j = 0; j < kr; ++j) {
            g[j] = ld1(dt, p->dy, roff(p, p->dy_ostr, r + j));
            if (acc) x[j] = (const char *)p->x + roff(p, p->x_ostr, r + j) * (int64_t)e;
            if (p->dx) dx[j] = (char *)p->dx + roff(p, p->dx_ostr, r + j) * (int64_t)e;
        }
        if (acc) {
            if (kr == 4) dw_pass(dt, 4, p->D, acc, g, x);
            else dw_pass(dt, 1, p->D, acc, g, x);
        }
        if (p->dx) {
            const int nt = p->R * p->D * (int64_t)e >= WS_NT_BYTES && p->D * (int64_t)e >= WS_NT_ROW_BYTES;
            for (int j = 0; j < kr; ++j) {
                if (nt) dx_row(dt, 1, dx[j], g[j], w, p->D);
                else dx_row(dt, 0, dx[j], g[j], w, p->D);
            }
        }
        r += kr;
    }
    _mm_sfence(); /* order this block's non-temporal stores before the join */
}

/* dw[d .. d+NF) = Σ_b part[b, d ..], b in block order. */
WS_AI void reduce_dw(int dt, const fc_wsum *p, const float *part, int64_t Dp, int64_t nb, int64_t d) {
    VF s = vf_load(part + d);
    for (int64_t b = 1; b < nb; ++b) s = vf_add(s, vf_load(part + b * Dp + d));
    const int64_t n = p->D - d < NF ? p->D - d : NF;
    if (p->dw_str == 1 && n == NF) {
        stx(dt, p->dw, d, s);
    } else {
        float tmp[NF];
        vf_store(tmp, s);
        for (int64_t i = 0; i < n; ++i) st1(dt, p->dw, (d + i) * p->dw_str, tmp[i]);
    }
}

typedef struct ws_bwd_fns {
    void (*block)(const fc_wsum *, const float *, float *, int64_t, int64_t, int64_t);
    void (*reduce)(const fc_wsum *, const float *, int64_t, int64_t, int64_t);
} ws_bwd_fns;
#define WS_BWD_FNS(T, DT)                                                                        \
    static void bwd_block_##T(const fc_wsum *p, const float *w, float *part, int64_t Dp,         \
                              int64_t rpb, int64_t b) {                                          \
        bwd_block(DT, p, w, part, Dp, rpb, b);                                                   \
    }                                                                                            \
    static void reduce_dw_##T(const fc_wsum *p, const float *part, int64_t Dp, int64_t nb,       \
                              int64_t d) {                                                       \
        reduce_dw(DT, p, part, Dp, nb, d);                                                       \
    }                                                                                            \
    static const ws_bwd_fns bwd_fns_##T = {bwd_block_##T, reduce_dw_##T};
WS_BWD_FNS(f32, FLASHC_F32)
WS_BWD_FNS(bf16, FLASHC_BF16)
WS_BWD_FNS(f16, FLASHC_F16)

static flashc_status bwd_f32(const fc_wsum *p) {
    const int dt = p->dtype;
    const int64_t rpb = fc_wsum_rows_per_block(p->R), nb = (p->R + rpb - 1) / rpb;
    const int64_t Dp = (p->D + NF - 1) / NF * NF;
    float *w = (float *)load_w(p, Dp);
    float *part = p->dw ? (float *)malloc((size_t)nb * (size_t)Dp * sizeof(float)) : NULL;
    if (!w || (p->dw && !part)) {
        free(w);
        free(part);
        return fc_set_error(FLASHC_ERR_OUT_OF_MEMORY, "weighted_sum_bwd: partial buffer (%lld x %lld)",
                            (long long)nb, (long long)Dp);
    }
    const ws_bwd_fns *f = dt == FLASHC_F32 ? &bwd_fns_f32 : dt == FLASHC_BF16 ? &bwd_fns_bf16 : &bwd_fns_f16;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < nb; ++b) f->block(p, w, part, Dp, rpb, b);
    if (part) {
#pragma omp parallel for schedule(static)
        for (int64_t d = 0; d < Dp; d += NF) f->reduce(p, part, Dp, nb, d);
    }
    free(w);
    free(part);
    return FLASHC_OK;
}

/* F64: the same scheme in double. */
WS_AI void dw_pass_f64(int KR, int64_t D, double *acc, const double *g, const double **x) {
    VD gv[4];
#pragma GCC unroll 4
    for (int j = 0; j < KR; ++j) gv[j] = vd_set1(g[j]);
    int64_t d = 0;
    for (; d + ND <= D; d += ND) {
        VD a = vd_load(acc + d);
#pragma GCC unroll 4
        for (int j = 0; j < KR; ++j) a = vd_fma(gv[j], vd_load(x[j] + d), a);
        vd_store(acc + d, a);
    }
    for (; d < D; ++d) { /* scalar tail, the same fused operation per element */
        double a = acc[d];
        for (int j = 0; j < KR; ++j) a = __builtin_fma(g[j], x[j][d], a);
        acc[d] = a;
    }
}

WS_AI void dx_row_f64(int nt, double *dx, double g, const double *w, int64_t D) {
    const VD gv = vd_set1(g);
    int64_t d = 0;
    if (nt && ((uintptr_t)dx & 7) == 0) {
        int64_t head = (int64_t)((64 - ((uintptr_t)dx & 63)) & 63) / 8;
        if (head > D) head = D;
        for (; d < head; ++d) dx[d] = g * w[d];
        for (; d + ND <= D; d += ND) vd_stream(dx + d, vd_mul(gv, vd_load(w + d)));
    } else {
        for (; d + ND <= D; d += ND) vd_store(dx + d, vd_mul(gv, vd_load(w + d)));
    }
    for (; d < D; ++d) dx[d] = g * w[d];
}

static flashc_status bwd_f64(const fc_wsum *p) {
    const int64_t rpb = fc_wsum_rows_per_block(p->R), nb = (p->R + rpb - 1) / rpb;
    const int64_t Dp = (p->D + ND - 1) / ND * ND;
    double *w = (double *)load_w(p, Dp);
    double *part = p->dw ? (double *)malloc((size_t)nb * (size_t)Dp * sizeof(double)) : NULL;
    if (!w || (p->dw && !part)) {
        free(w);
        free(part);
        return fc_set_error(FLASHC_ERR_OUT_OF_MEMORY, "weighted_sum_bwd: partial buffer (%lld x %lld)",
                            (long long)nb, (long long)Dp);
    }
    const int fold = p->D * 8 >= WS_NT_ROW_BYTES;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < nb; ++b) {
        double *acc = part ? part + b * Dp : NULL;
        if (acc) memset(acc, 0, (size_t)Dp * sizeof(double));
        const int64_t r1 = (b + 1) * rpb < p->R ? (b + 1) * rpb : p->R;
        for (int64_t r = b * rpb; r < r1;) {
            /* Folding 4 rows per pass measured slower for short f64 rows
             * (D = 64: 18 vs 30 GB/s); either way each acc[d] sees the
             * same FMAs in row order, so the choice never changes dw. */
            const int kr = fold && r1 - r >= 4 ? 4 : 1;
            double g[4];
            const double *x[4] = {0};
            double *dx[4] = {0};
            for (int j = 0; j < kr; ++j) {
                g[j] = ((const double *)p->dy)[roff(p, p->dy_ostr, r + j)];
                if (acc) x[j] = (const double *)p->x + roff(p, p->x_ostr, r + j);
                if (p->dx) dx[j] = (double *)p->dx + roff(p, p->dx_ostr, r + j);
            }
            if (acc) {
                if (kr == 4) dw_pass_f64(4, p->D, acc, g, x);
                else dw_pass_f64(1, p->D, acc, g, x);
            }
            if (p->dx) {
                const int nt = p->R * p->D * 8 >= WS_NT_BYTES && p->D * 8 >= WS_NT_ROW_BYTES;
                for (int j = 0; j < kr; ++j) {
                    if (nt) dx_row_f64(1, dx[j], g[j], w, p->D);
                    else dx_row_f64(0, dx[j], g[j], w, p->D);
                }
            }
            r += kr;
        }
        _mm_sfence();
    }
    if (part) {
        const int64_t nv = Dp / ND;
#pragma omp parallel for schedule(static)
        for (int64_t v = 0; v < nv; ++v) {
            const int64_t d = v * ND;
            VD s = vd_load(part + d);
            for (int64_t b = 1; b < nb; ++b) s = vd_add(s, vd_load(part + b * Dp + d));
            double tmp[ND];
            vd_store(tmp, s);
            const int64_t n = p->D - d < ND ? p->D - d : ND;
            for (int64_t i = 0; i < n; ++i) ((double *)p->dw)[(d + i) * p->dw_str] = tmp[i];
        }
    }
    free(w);
    free(part);
    return FLASHC_OK;
}

flashc_status WS_NAME(bwd)(const fc_wsum *p0) {
    fc_wsum q = *p0;
    const fc_wsum *p = &q;
    q.y = NULL;
    if (!q.dw) q.x = NULL; /* x is read for dw only */
    ws_collapse(&q);
    return p->dtype == FLASHC_F64 ? bwd_f64(p) : bwd_f32(p);
}
