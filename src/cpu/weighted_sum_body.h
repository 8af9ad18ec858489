/*
 * weighted_sum_body.h — the SIMD weighted row-sum, written once over the
 * vector vocabulary for weighted_sum_avx2.c and weighted_sum_avx512.c. No
 * include guard: each ISA file includes weighted_sum.h and simd_<isa>.h
 * (fc_vf / FC_VF_W, fc_vd / FC_VD_W, the f16/bf16 row loads and stores),
 * defines
 *   FN(x)   name mangling (fc_wsum_avx2_##x)
 * then includes this and exports FN(fwd) / FN(bwd).
 *
 * Case taken (fc_wsum_simd_ok_*): x / dx unit-stride along D.
 *   x (R, D), w (D,), y (R,):  y[r] = Σ_d x[r, d] · w[d]
 *   bwd: dx[r, d] = dy[r] · w[d];  dw[d] = Σ_r dy[r] · x[r, d]
 * Forward: per row, 4 independent accumulators over d, combined as
 * (a0 + a1) + (a2 + a3) and then across lanes in a fixed tree: the order
 * depends on D only, not on the thread count or the row's position.
 * Backward: the reference path's block scheme (fc_wsum_rows_per_block(R),
 * partials reduced in block order); inside a block up to 4 rows are folded
 * into one pass over the partial row, in row order, so each partial element
 * sees the same sequence of FMAs as a row-at-a-time loop. dx is written row
 * by row in its own pass (w stays in L1), with non-temporal stores when dx
 * is large (WS_NT_BYTES), as a copy does. w is converted once to a
 * zero-padded fp32 (f64) row of Dp = D rounded up to the lane count; tails
 * of x are zero-filled lane loads, tails of dx partial stores.
 */

/* Non-temporal stores for dx this large (bytes): it will not be read back
 * from cache before being evicted ... */
#define WS_NT_BYTES ((int64_t)16 << 20)
/* ... and rows at least this long (bytes): each row's unaligned head and
 * tail are plain stores, and partly written lines make write-combining
 * slow, so short rows keep plain stores throughout. */
#define WS_NT_ROW_BYTES 1024

/* Bytes per element of a FLASHC_F32/F16/BF16 row. */
FC_SI int64_t FN(esz)(int dt) { return dt == FLASHC_F32 ? 4 : 2; }

/* Offset of row r. ONE (compile-time): a single outer axis, the common case
 * after FN(collapse); the drivers pick it once per call, so the row loops
 * carry no multi-axis index code. */
FC_SI int64_t FN(roff)(const int ONE, const fc_wsum *p, const int64_t *ostr, int64_t r) {
    return ONE ? r * ostr[0] : fc_wsum_row_offset(p, ostr, r);
}

/* Merges outer axes k, k+1 where every tensor in use steps through them as
 * one axis (ostr[k] == ostr[k+1]·shape[k+1]) and drops size-1 axes; the
 * rows and their offsets are unchanged, only cheaper to compute. */
static void FN(collapse)(fc_wsum *q) {
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

/* w (D,) any stride -> zero-padded row of Dp elements (fp32, or f64 for
 * F64), plus one vector: FN(dx_row) reads w[d .. d + lanes) at unaligned d < D. */
static void *FN(load_w)(const fc_wsum *p, int64_t Dp) {
    const int f64 = p->dtype == FLASHC_F64;
    void *w = calloc((size_t)(Dp + FC_VF_W), f64 ? sizeof(double) : sizeof(float));
    if (!w) return NULL;
    for (int64_t d = 0; d < p->D; ++d) {
        if (f64) ((double *)w)[d] = ((const double *)p->w)[d * p->w_str];
        else ((float *)w)[d] = fc_ld1_f32(p->w, d * p->w_str, p->dtype);
    }
    return w;
}

/* ------------------------------------------------------------ forward */
/* x row (D,) of dtype dt · w (Dp,) zero-padded, as a vector of lane sums. */
FC_SI fc_vf FN(dot_row)(int dt, const char *x, const float *w, int64_t D) {
    const int64_t e = FN(esz)(dt), W = FC_VF_W;
    fc_vf a0 = fc_vf_zero(), a1 = fc_vf_zero(), a2 = fc_vf_zero(), a3 = fc_vf_zero();
    int64_t d = 0;
    for (; d + 4 * W <= D; d += 4 * W) {
        a0 = fc_vf_fma(fc_vf_load_as(x + d * e, dt), fc_vf_load(w + d), a0);
        a1 = fc_vf_fma(fc_vf_load_as(x + (d + W) * e, dt), fc_vf_load(w + d + W), a1);
        a2 = fc_vf_fma(fc_vf_load_as(x + (d + 2 * W) * e, dt), fc_vf_load(w + d + 2 * W), a2);
        a3 = fc_vf_fma(fc_vf_load_as(x + (d + 3 * W) * e, dt), fc_vf_load(w + d + 3 * W), a3);
    }
    if (d + W <= D) { a0 = fc_vf_fma(fc_vf_load_as(x + d * e, dt), fc_vf_load(w + d), a0); d += W; }
    if (d + W <= D) { a1 = fc_vf_fma(fc_vf_load_as(x + d * e, dt), fc_vf_load(w + d), a1); d += W; }
    if (d + W <= D) { a2 = fc_vf_fma(fc_vf_load_as(x + d * e, dt), fc_vf_load(w + d), a2); d += W; }
    if (d < D) a3 = fc_vf_fma(fc_vf_load_as_tail(x + d * e, dt, D - d), fc_vf_load(w + d), a3);
    return fc_vf_add(fc_vf_add(a0, a1), fc_vf_add(a2, a3));
}

/* Rows [r0, r1) for one dtype. FC_VF_W rows share one lane reduction:
 * fc_vf_hreduce sums every slot in the same fixed tree, so y[r] depends on
 * row r alone, not on its group, its position or the thread count. */
FC_SI void FN(fwd_range)(const int dt, const int ONE, const fc_wsum *p, const float *w, int64_t r0, int64_t r1) {
    const int64_t e = FN(esz)(dt);
    const char *x = (const char *)p->x;
    for (int64_t r = r0; r < r1; r += FC_VF_W) {
        const int n = r1 - r < FC_VF_W ? (int)(r1 - r) : FC_VF_W;
        fc_vf s[FC_VF_W];
        float out[FC_VF_W];
        if (n == FC_VF_W) {
#pragma GCC unroll 8
            for (int j = 0; j < FC_VF_W; ++j)
                s[FC_VF_SLOT(j)] = FN(dot_row)(dt, x + FN(roff)(ONE, p, p->x_ostr, r + j) * e, w, p->D);
        } else {
            for (int j = 0; j < FC_VF_W; ++j)
                s[FC_VF_SLOT(j)] = j < n ? FN(dot_row)(dt, x + FN(roff)(ONE, p, p->x_ostr, r + j) * e, w, p->D)
                                         : fc_vf_zero();
        }
        fc_vf_store(out, fc_vf_hreduce(s));
        for (int j = 0; j < n; ++j) fc_st1_f32(p->y, FN(roff)(ONE, p, p->y_ostr, r + j), dt, out[j]);
    }
}

/* F64: the same scheme in double, one row at a time. */
FC_SI double FN(dot_row_f64)(const double *x, const double *w, int64_t D) {
    const int64_t W = FC_VD_W;
    fc_vd a0 = fc_vd_zero(), a1 = fc_vd_zero(), a2 = fc_vd_zero(), a3 = fc_vd_zero();
    int64_t d = 0;
    for (; d + 4 * W <= D; d += 4 * W) {
        a0 = fc_vd_fma(fc_vd_load(x + d), fc_vd_load(w + d), a0);
        a1 = fc_vd_fma(fc_vd_load(x + d + W), fc_vd_load(w + d + W), a1);
        a2 = fc_vd_fma(fc_vd_load(x + d + 2 * W), fc_vd_load(w + d + 2 * W), a2);
        a3 = fc_vd_fma(fc_vd_load(x + d + 3 * W), fc_vd_load(w + d + 3 * W), a3);
    }
    if (d + W <= D) { a0 = fc_vd_fma(fc_vd_load(x + d), fc_vd_load(w + d), a0); d += W; }
    if (d + W <= D) { a1 = fc_vd_fma(fc_vd_load(x + d), fc_vd_load(w + d), a1); d += W; }
    if (d + W <= D) { a2 = fc_vd_fma(fc_vd_load(x + d), fc_vd_load(w + d), a2); d += W; }
    if (d < D) a3 = fc_vd_fma(fc_vd_load_tail(x + d, D - d), fc_vd_load(w + d), a3);
    return fc_vd_hsum(fc_vd_add(fc_vd_add(a0, a1), fc_vd_add(a2, a3)));
}

FC_SI void FN(fwd_range_f64)(const int ONE, const fc_wsum *p, const double *w, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
        ((double *)p->y)[FN(roff)(ONE, p, p->y_ostr, r)] =
            FN(dot_row_f64)((const double *)p->x + FN(roff)(ONE, p, p->x_ostr, r), w, p->D);
}

/* Rows [r0, r1): where the run-time dtype and axis count become
 * compile-time ones. The OpenMP regions stay outside the always-inline
 * bodies: GCC outlines a parallel region before inlining, so a region inside
 * them would keep these run-time values. */
static void FN(fwd_rows)(const fc_wsum *p, const void *w, int64_t r0, int64_t r1) {
    const int dt = p->dtype;
    if (p->nouter == 1) {
        if (dt == FLASHC_F64) FN(fwd_range_f64)(1, p, (const double *)w, r0, r1);
        else if (dt == FLASHC_F32) FN(fwd_range)(FLASHC_F32, 1, p, (const float *)w, r0, r1);
        else if (dt == FLASHC_BF16) FN(fwd_range)(FLASHC_BF16, 1, p, (const float *)w, r0, r1);
        else FN(fwd_range)(FLASHC_F16, 1, p, (const float *)w, r0, r1);
    } else {
        if (dt == FLASHC_F64) FN(fwd_range_f64)(0, p, (const double *)w, r0, r1);
        else if (dt == FLASHC_F32) FN(fwd_range)(FLASHC_F32, 0, p, (const float *)w, r0, r1);
        else if (dt == FLASHC_BF16) FN(fwd_range)(FLASHC_BF16, 0, p, (const float *)w, r0, r1);
        else FN(fwd_range)(FLASHC_F16, 0, p, (const float *)w, r0, r1);
    }
}

static flashc_status FN(fwd)(const fc_wsum *p0) {
    fc_wsum q = *p0;
    const fc_wsum *p = &q;
    q.dy = NULL;
    q.dx = NULL;
    FN(collapse)(&q);
    const int64_t lanes = p->dtype == FLASHC_F64 ? FC_VD_W : FC_VF_W;
    const int64_t Dp = (p->D + lanes - 1) / lanes * lanes;
    void *w = FN(load_w)(p, Dp);
    if (!w) return fc_set_error(FLASHC_ERR_OUT_OF_MEMORY, "weighted_sum: cannot allocate %lld elements for w",
                                (long long)Dp);
    /* Rows split evenly into one contiguous range per thread. */
#pragma omp parallel
    {
        const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
        const int64_t r0 = p->R / nt * t + (t < p->R % nt ? t : p->R % nt);
        const int64_t r1 = r0 + p->R / nt + (t < p->R % nt);
        if (r1 > r0) FN(fwd_rows)(p, w, r0, r1);
    }
    free(w);
    return FLASHC_OK;
}

/* ----------------------------------------------------------- backward */
/* KR rows (KR ≤ 4) of one block, one pass over d:
 *   acc[d] = fma(g[KR-1], x[KR-1][d], ... fma(g[0], x[0][d], acc[d]))
 * acc is (Dp,), zero beyond D. */
FC_SI void FN(dw_pass)(int dt, int KR, int64_t D, float *acc, const float *g, const char **x) {
    const int64_t e = FN(esz)(dt);
    fc_vf gv[4];
#pragma GCC unroll 4
    for (int j = 0; j < KR; ++j) gv[j] = fc_vf_set1(g[j]);
    int64_t d = 0;
    for (; d + FC_VF_W <= D; d += FC_VF_W) {
        fc_vf a = fc_vf_load(acc + d);
#pragma GCC unroll 4
        for (int j = 0; j < KR; ++j) a = fc_vf_fma(gv[j], fc_vf_load_as(x[j] + d * e, dt), a);
        fc_vf_store(acc + d, a);
    }
    if (d < D) {
        fc_vf a = fc_vf_load(acc + d);
#pragma GCC unroll 4
        for (int j = 0; j < KR; ++j) a = fc_vf_fma(gv[j], fc_vf_load_as_tail(x[j] + d * e, dt, D - d), a);
        fc_vf_store(acc + d, a);
    }
}

/* dx row (D,) = g · w. With nt, the stretch from the first boundary of a
 * vector store's width on goes through non-temporal stores; the same
 * products either way. */
FC_SI void FN(dx_row)(int dt, int nt, char *dx, float g, const float *w, int64_t D) {
    const int64_t e = FN(esz)(dt);
    const fc_vf gv = fc_vf_set1(g);
    int64_t d = 0;
    if (nt && ((uintptr_t)dx % (uintptr_t)e) == 0) {
        const uintptr_t vb = (uintptr_t)(FC_VF_W * e); /* one store's width, and alignment */
        int64_t head = (int64_t)((vb - ((uintptr_t)dx & (vb - 1))) & (vb - 1)) / e; /* < FC_VF_W */
        if (head > D) head = D;
        if (head) fc_vf_store_as_tail(dx, dt, head, fc_vf_mul(gv, fc_vf_load(w)));
        for (d = head; d + FC_VF_W <= D; d += FC_VF_W)
            fc_vf_stream_as(dx + d * e, dt, fc_vf_mul(gv, fc_vf_load(w + d)));
    } else {
        for (; d + FC_VF_W <= D; d += FC_VF_W) fc_vf_store_as(dx + d * e, dt, fc_vf_mul(gv, fc_vf_load(w + d)));
    }
    if (d < D) fc_vf_store_as_tail(dx + d * e, dt, D - d, fc_vf_mul(gv, fc_vf_load(w + d)));
}

/* Block b: rows [b·rpb, min((b+1)·rpb, R)) into partial row part[b] (Dp,). */
FC_SI void FN(bwd_block)(const int dt, const int ONE, const fc_wsum *p, const float *w, float *part, int64_t Dp,
                         int64_t rpb, int64_t b) {
    const int64_t e = FN(esz)(dt);
    float *acc = part ? part + b * Dp : NULL;
    if (acc) memset(acc, 0, (size_t)Dp * sizeof(float));
    const int nt = p->dx && p->R * p->D * e >= WS_NT_BYTES && p->D * e >= WS_NT_ROW_BYTES;
    const int64_t r1 = (b + 1) * rpb < p->R ? (b + 1) * rpb : p->R;
    for (int64_t r = b * rpb; r < r1;) {
        const int kr = r1 - r >= 4 ? 4 : 1;
        float g[4];
        const char *x[4] = {0};
        char *dx[4] = {0};
        for (int j = 0; j < kr; ++j) {
            g[j] = fc_ld1_f32(p->dy, FN(roff)(ONE, p, p->dy_ostr, r + j), dt);
            if (acc) x[j] = (const char *)p->x + FN(roff)(ONE, p, p->x_ostr, r + j) * e;
            if (p->dx) dx[j] = (char *)p->dx + FN(roff)(ONE, p, p->dx_ostr, r + j) * e;
        }
        if (acc) {
            if (kr == 4) FN(dw_pass)(dt, 4, p->D, acc, g, x);
            else FN(dw_pass)(dt, 1, p->D, acc, g, x);
        }
        if (p->dx) {
            for (int j = 0; j < kr; ++j) {
                if (nt) FN(dx_row)(dt, 1, dx[j], g[j], w, p->D);
                else FN(dx_row)(dt, 0, dx[j], g[j], w, p->D);
            }
        }
        r += kr;
    }
    fc_stream_fence(); /* this block's non-temporal stores before the join */
}

/* dw[d .. d + FC_VF_W) = Σ_b part[b, d ..], b in block order. */
FC_SI void FN(reduce_dw)(int dt, const fc_wsum *p, const float *part, int64_t Dp, int64_t nb, int64_t d) {
    fc_vf s = fc_vf_load(part + d);
    for (int64_t b = 1; b < nb; ++b) s = fc_vf_add(s, fc_vf_load(part + b * Dp + d));
    const int64_t n = p->D - d < FC_VF_W ? p->D - d : FC_VF_W;
    if (p->dw_str == 1 && n == FC_VF_W) {
        fc_vf_store_as((char *)p->dw + d * FN(esz)(dt), dt, s);
    } else {
        float tmp[FC_VF_W];
        fc_vf_store(tmp, s);
        for (int64_t i = 0; i < n; ++i) fc_st1_f32(p->dw, (d + i) * p->dw_str, dt, tmp[i]);
    }
}

/* The run-time dtype (and axis count) to compile-time ones, once per block / dw vector. */
static void FN(bwd_block_dt)(const fc_wsum *p, const float *w, float *part, int64_t Dp, int64_t rpb, int64_t b) {
    const int dt = p->dtype;
    if (p->nouter == 1) {
        if (dt == FLASHC_F32) FN(bwd_block)(FLASHC_F32, 1, p, w, part, Dp, rpb, b);
        else if (dt == FLASHC_BF16) FN(bwd_block)(FLASHC_BF16, 1, p, w, part, Dp, rpb, b);
        else FN(bwd_block)(FLASHC_F16, 1, p, w, part, Dp, rpb, b);
    } else {
        if (dt == FLASHC_F32) FN(bwd_block)(FLASHC_F32, 0, p, w, part, Dp, rpb, b);
        else if (dt == FLASHC_BF16) FN(bwd_block)(FLASHC_BF16, 0, p, w, part, Dp, rpb, b);
        else FN(bwd_block)(FLASHC_F16, 0, p, w, part, Dp, rpb, b);
    }
}
static void FN(reduce_dw_dt)(const fc_wsum *p, const float *part, int64_t Dp, int64_t nb, int64_t d) {
    switch (p->dtype) {
    case FLASHC_F32: FN(reduce_dw)(FLASHC_F32, p, part, Dp, nb, d); break;
    case FLASHC_BF16: FN(reduce_dw)(FLASHC_BF16, p, part, Dp, nb, d); break;
    default: FN(reduce_dw)(FLASHC_F16, p, part, Dp, nb, d); break;
    }
}

static flashc_status FN(bwd_f32)(const fc_wsum *p) {
    const int64_t rpb = fc_wsum_rows_per_block(p->R), nb = (p->R + rpb - 1) / rpb;
    const int64_t Dp = (p->D + FC_VF_W - 1) / FC_VF_W * FC_VF_W;
    float *w = (float *)FN(load_w)(p, Dp);
    float *part = p->dw ? (float *)malloc((size_t)nb * (size_t)Dp * sizeof(float)) : NULL;
    if (!w || (p->dw && !part)) {
        const int w_failed = !w;
        free(w);
        free(part);
        if (w_failed)
            return fc_set_error(FLASHC_ERR_OUT_OF_MEMORY, "weighted_sum_bwd: w staging buffer (%lld floats)",
                                (long long)Dp);
        return fc_set_error(FLASHC_ERR_OUT_OF_MEMORY, "weighted_sum_bwd: dw partial buffer (%lld x %lld floats)",
                            (long long)nb, (long long)Dp);
    }
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < nb; ++b) FN(bwd_block_dt)(p, w, part, Dp, rpb, b);
    if (part) {
#pragma omp parallel for schedule(static)
        for (int64_t d = 0; d < Dp; d += FC_VF_W) FN(reduce_dw_dt)(p, part, Dp, nb, d);
    }
    free(w);
    free(part);
    return FLASHC_OK;
}

/* F64: the same scheme in double. */
FC_SI void FN(dw_pass_f64)(int KR, int64_t D, double *acc, const double *g, const double **x) {
    fc_vd gv[4];
#pragma GCC unroll 4
    for (int j = 0; j < KR; ++j) gv[j] = fc_vd_set1(g[j]);
    int64_t d = 0;
    for (; d + FC_VD_W <= D; d += FC_VD_W) {
        fc_vd a = fc_vd_load(acc + d);
#pragma GCC unroll 4
        for (int j = 0; j < KR; ++j) a = fc_vd_fma(gv[j], fc_vd_load(x[j] + d), a);
        fc_vd_store(acc + d, a);
    }
    for (; d < D; ++d) { /* scalar tail, the same fused operation per element */
        double a = acc[d];
        for (int j = 0; j < KR; ++j) a = __builtin_fma(g[j], x[j][d], a);
        acc[d] = a;
    }
}

FC_SI void FN(dx_row_f64)(int nt, double *dx, double g, const double *w, int64_t D) {
    const fc_vd gv = fc_vd_set1(g);
    int64_t d = 0;
    if (nt && ((uintptr_t)dx & 7) == 0) {
        int64_t head = (int64_t)((64 - ((uintptr_t)dx & 63)) & 63) / 8; /* to a cache line */
        if (head > D) head = D;
        for (; d < head; ++d) dx[d] = g * w[d];
        for (; d + FC_VD_W <= D; d += FC_VD_W) fc_vd_stream(dx + d, fc_vd_mul(gv, fc_vd_load(w + d)));
    } else {
        for (; d + FC_VD_W <= D; d += FC_VD_W) fc_vd_store(dx + d, fc_vd_mul(gv, fc_vd_load(w + d)));
    }
    for (; d < D; ++d) dx[d] = g * w[d];
}

/* Block b of the F64 backward, as FN(bwd_block). */
FC_SI void FN(bwd_block_f64)(const int ONE, const fc_wsum *p, const double *w, double *part, int64_t Dp,
                             int64_t rpb, int64_t b) {
    /* Folding 4 rows per pass measured slower for short f64 rows (D = 64:
     * 18 vs 30 GB/s); either way each acc[d] sees the same FMAs in row
     * order, so the choice never changes dw. */
    const int fold = p->D * 8 >= WS_NT_ROW_BYTES;
    const int nt = p->dx && p->R * p->D * 8 >= WS_NT_BYTES && p->D * 8 >= WS_NT_ROW_BYTES;
    double *acc = part ? part + b * Dp : NULL;
    if (acc) memset(acc, 0, (size_t)Dp * sizeof(double));
    const int64_t r1 = (b + 1) * rpb < p->R ? (b + 1) * rpb : p->R;
    for (int64_t r = b * rpb; r < r1;) {
        const int kr = fold && r1 - r >= 4 ? 4 : 1;
        double g[4];
        const double *x[4] = {0};
        double *dx[4] = {0};
        for (int j = 0; j < kr; ++j) {
            g[j] = ((const double *)p->dy)[FN(roff)(ONE, p, p->dy_ostr, r + j)];
            if (acc) x[j] = (const double *)p->x + FN(roff)(ONE, p, p->x_ostr, r + j);
            if (p->dx) dx[j] = (double *)p->dx + FN(roff)(ONE, p, p->dx_ostr, r + j);
        }
        if (acc) {
            if (kr == 4) FN(dw_pass_f64)(4, p->D, acc, g, x);
            else FN(dw_pass_f64)(1, p->D, acc, g, x);
        }
        if (p->dx) {
            for (int j = 0; j < kr; ++j) {
                if (nt) FN(dx_row_f64)(1, dx[j], g[j], w, p->D);
                else FN(dx_row_f64)(0, dx[j], g[j], w, p->D);
            }
        }
        r += kr;
    }
    fc_stream_fence();
}
static void FN(bwd_block_f64_dt)(const fc_wsum *p, const double *w, double *part, int64_t Dp, int64_t rpb,
                                 int64_t b) {
    if (p->nouter == 1) FN(bwd_block_f64)(1, p, w, part, Dp, rpb, b);
    else FN(bwd_block_f64)(0, p, w, part, Dp, rpb, b);
}

static flashc_status FN(bwd_f64)(const fc_wsum *p) {
    const int64_t rpb = fc_wsum_rows_per_block(p->R), nb = (p->R + rpb - 1) / rpb;
    const int64_t Dp = (p->D + FC_VD_W - 1) / FC_VD_W * FC_VD_W;
    double *w = (double *)FN(load_w)(p, Dp);
    double *part = p->dw ? (double *)malloc((size_t)nb * (size_t)Dp * sizeof(double)) : NULL;
    if (!w || (p->dw && !part)) {
        const int w_failed = !w;
        free(w);
        free(part);
        if (w_failed)
            return fc_set_error(FLASHC_ERR_OUT_OF_MEMORY, "weighted_sum_bwd: w staging buffer (%lld doubles)",
                                (long long)Dp);
        return fc_set_error(FLASHC_ERR_OUT_OF_MEMORY, "weighted_sum_bwd: dw partial buffer (%lld x %lld doubles)",
                            (long long)nb, (long long)Dp);
    }
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < nb; ++b) FN(bwd_block_f64_dt)(p, w, part, Dp, rpb, b);
    if (part) {
        const int64_t nv = Dp / FC_VD_W;
#pragma omp parallel for schedule(static)
        for (int64_t v = 0; v < nv; ++v) {
            const int64_t d = v * FC_VD_W;
            fc_vd s = fc_vd_load(part + d);
            for (int64_t b = 1; b < nb; ++b) s = fc_vd_add(s, fc_vd_load(part + b * Dp + d));
            double tmp[FC_VD_W];
            fc_vd_store(tmp, s);
            const int64_t n = p->D - d < FC_VD_W ? p->D - d : FC_VD_W;
            for (int64_t i = 0; i < n; ++i) ((double *)p->dw)[(d + i) * p->dw_str] = tmp[i];
        }
    }
    free(w);
    free(part);
    return FLASHC_OK;
}

static flashc_status FN(bwd)(const fc_wsum *p0) {
    fc_wsum q = *p0;
    const fc_wsum *p = &q;
    q.y = NULL;
    if (!q.dw) q.x = NULL; /* x is read for dw only */
    FN(collapse)(&q);
    return p->dtype == FLASHC_F64 ? FN(bwd_f64)(p) : FN(bwd_f32)(p);
}
