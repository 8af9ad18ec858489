/*
 * attn_bwd_simd_body.h — the SIMD microkernels of the attention backward
 * (attn_bwd.h's fc_bwd_kern: gemm, ew_q, ew_k, pack; fp32 working
 * precision), written once over the vector vocabulary for the AVX2 and
 * AVX-512 files. No include guard: each ISA file includes simd_<isa>.h and
 * simd_score.h, defines
 *   FN(x)      name mangling (fc_bwd_avx512_##x)
 *   FC_BWD_NV  vectors per row of the GEMM register tile (6 rows × FC_BWD_NV
 *              vectors of accumulators + FC_BWD_NV b loads + 1 broadcast
 *              must fit the register file: 2 on AVX2, 4 on AVX-512)
 * then includes this and builds its table from the FN() functions.
 * Column counts are multiples of FC_BWD_NPAD (16), hence of FC_VF_W.
 */

/* ------------------------------------------------------------------- gemm */
/* Register tile MR rows × NV vectors: per k, NV loads of b, MR broadcasts
 * of a, MR·NV FMAs; each c element summed in k order. VIS (compile-time):
 * gemm_vis, the same FMAs on the visible pairs only (rows m0 + m of the
 * product; attn_bwd.h). The small loops are unrolled before GCC's scalar
 * replacement, or the accumulators live in memory (measured: a 2× slower
 * backward on AVX2). */
FC_SI void FN(mk)(const int VIS, const int MR, const int NV, int K, const float *a, ptrdiff_t ars, ptrdiff_t acs,
                  const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int accumulate, int q_is_m, int m0,
                  const int32_t *se, const int32_t *lo, const int32_t *hi) {
    fc_vf acc[6][FC_BWD_NV];
#pragma GCC unroll 6
    for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v)
            acc[m][v] = accumulate ? fc_vf_load(c + m * ldc + FC_VF_W * v) : fc_vf_zero();
    for (int k = 0; k < K; ++k) {
        fc_vf bv[FC_BWD_NV];
        const float *bk = b + (ptrdiff_t)k * ldb, *ak = a + (ptrdiff_t)k * acs;
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) bv[v] = fc_vf_load(bk + FC_VF_W * v);
#pragma GCC unroll 6
        for (int m = 0; m < MR; ++m) {
            if (VIS) {
                const int q = q_is_m ? m0 + m : k, key = q_is_m ? k : m0 + m;
                if (!FC_KEY_VISIBLE(se[q], lo[q], hi[q], key)) continue;
            }
            const fc_vf av = fc_vf_bcast(ak + m * ars);
#pragma GCC unroll 4
            for (int v = 0; v < NV; ++v) acc[m][v] = fc_vf_fma(av, bv[v], acc[m][v]);
        }
    }
#pragma GCC unroll 6
    for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) fc_vf_store(c + m * ldc + FC_VF_W * v, acc[m][v]);
}

#define FC_BWD_MK(MR, NV)                                                                           \
    case (MR) * 8 + (NV):                                                                           \
        FN(mk)(VIS, MR, NV, K, am, ars, acs, b + n0, ldb, cm, ldc, accumulate, q_is_m, m0, se, lo, hi); \
        break;
#define FC_BWD_MK_ROWS(NV) \
    FC_BWD_MK(1, NV) FC_BWD_MK(2, NV) FC_BWD_MK(3, NV) FC_BWD_MK(4, NV) FC_BWD_MK(5, NV) FC_BWD_MK(6, NV)

/* The product in register tiles of up to 6 rows × FC_BWD_NV vectors. */
FC_SI void FN(gemm_body)(const int VIS, int M, int N, int K, const float *a, ptrdiff_t ars, ptrdiff_t acs,
                         const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int accumulate, int q_is_m,
                         const int32_t *se, const int32_t *lo, const int32_t *hi) {
    enum { NB = FC_BWD_NV * FC_VF_W }; /* columns per register tile */
    for (int n0 = 0; n0 < N; n0 += NB) {
        const int nv = (N - n0 >= NB ? NB : N - n0) / FC_VF_W;
        for (int m0 = 0; m0 < M; m0 += 6) {
            const int mr = M - m0 >= 6 ? 6 : M - m0;
            const float *am = a + (ptrdiff_t)m0 * ars;
            float *cm = c + (ptrdiff_t)m0 * ldc + n0;
            switch (mr * 8 + nv) {
            FC_BWD_MK_ROWS(1)
            FC_BWD_MK_ROWS(2)
#if FC_BWD_NV >= 3
            FC_BWD_MK_ROWS(3)
#endif
#if FC_BWD_NV >= 4
            FC_BWD_MK_ROWS(4)
#endif
            default: break;
            }
        }
    }
}
#undef FC_BWD_MK_ROWS
#undef FC_BWD_MK

static void FN(gemm)(int M, int N, int K, const void *a, ptrdiff_t ars, ptrdiff_t acs, const void *b,
                     ptrdiff_t ldb, void *c, ptrdiff_t ldc, int accumulate) {
    FN(gemm_body)(0, M, N, K, (const float *)a, ars, acs, (const float *)b, ldb, (float *)c, ldc, accumulate, 0,
                  NULL, NULL, NULL);
}

static void FN(gemm_vis)(int M, int N, int K, const void *a, ptrdiff_t ars, ptrdiff_t acs, const void *b,
                         ptrdiff_t ldb, void *c, ptrdiff_t ldc, int q_is_m, const int32_t *se,
                         const int32_t *lo, const int32_t *hi) {
    FN(gemm_body)(1, M, N, K, (const float *)a, ars, acs, (const float *)b, ldb, (float *)c, ldc, 1, q_is_m,
                  se, lo, hi);
}

/* --------------------------------------------------------------------- ew */
/* One vector of tile elements (attn_bwd.h): s ← P, dp ← dS', both kept only
 * where vis is set (s, dp may be Inf/NaN elsewhere). The forward line, in
 * log2 units (L = log2(e)·lse): P = 2^(x − L), x = fc_vf_scoref_t(mode, u,
 * …) with u = qk·s; the backward line: dS' = scale·(1 − t²)·P·(dP − Δ)
 * (softcap) or scale·P·(dP − Δ). mode is compile-time (simd_score.h):
 * FC_SCORE_PLAIN is today's two-instruction score, x − L = fms(qk, s, L). */
FC_SI void FN(ew_vec)(float *sp, float *dpp, fc_vf L, fc_vf dl, fc_vf qk, fc_vf sc, fc_vm vis, const int mode,
                      fc_vf cap, fc_vf slope, fc_vf dist) {
    fc_vf xl, g = sc;
    if (mode == FC_SCORE_PLAIN) {
        xl = fc_vf_fms(qk, fc_vf_load(sp), L);
    } else {
        fc_vf t = fc_vf_zero();
        xl = fc_vf_sub(fc_vf_scoref_t(mode, fc_vf_mul(qk, fc_vf_load(sp)), cap, slope, dist, &t), L);
        if (FC_SCORE_NEEDS_TANH(mode)) g = fc_vf_mul(sc, fc_vf_score_dgradf(mode, t));
    }
    const fc_vf p = fc_vf_keep(vis, fc_vf_exp2(xl));
    const fc_vf ds = fc_vf_mul(fc_vf_mul(g, p), fc_vf_sub(fc_vf_load(dpp), dl));
    fc_vf_store(sp, p);
    fc_vf_store(dpp, fc_vf_keep(vis, ds));
}

/* Rows = queries: row r sees column c when FC_KEY_VISIBLE(se[r], lo[r], hi[r], c);
 * element (r, c) has the ALiBi distance dist0 + r − c. */
FC_SI void FN(ew_q_body)(const int mode, int rows, int ncols, float *s, float *dp, ptrdiff_t ld, const float *L,
                         const float *dl, const fc_bwd_score *sc, const int32_t *se, const int32_t *lo,
                         const int32_t *hi) {
    const fc_score_modf m = fc_score_modf_of(sc->mod);
    const fc_vf vsc = fc_vf_set1((float)sc->scale), qk = fc_vf_set1(m.qk_mul);
    const fc_vf cap = fc_vf_set1(m.cap), slope = fc_vf_set1(m.slope);
    for (int r = 0; r < rows; ++r) {
        float *sr = s + (ptrdiff_t)r * ld, *dr = dp + (ptrdiff_t)r * ld;
        const fc_vf Lr = fc_vf_set1(L[r]), dlr = fc_vf_set1(dl[r]);
        const fc_vi vse = fc_vi_set1(se[r]), vlo = fc_vi_set1(lo[r]), vhi = fc_vi_set1(hi[r]);
        const double d0 = sc->dist0 + r;
        for (int c0 = 0; c0 < ncols; c0 += FC_VF_W) {
            const fc_vm vis = fc_vm_key_visible(vse, vlo, vhi, fc_vi_add(fc_vi_iota(), fc_vi_set1(c0)));
            const fc_vf dist = FC_SCORE_NEEDS_DIST(mode) ? fc_vf_sub(fc_vf_set1((float)(d0 - c0)), fc_vf_iota()) : fc_vf_zero();
            FN(ew_vec)(sr + c0, dr + c0, Lr, dlr, qk, vsc, vis, mode, cap, slope, dist);
        }
    }
}

/* Rows = keys, columns = queries: row r is visible to column c when
 * FC_KEY_VISIBLE(se[c], lo[c], hi[c], r); element (r, c) has the distance
 * dist0 + c − r. */
FC_SI void FN(ew_k_body)(const int mode, int rows, int ncols, float *s, float *dp, ptrdiff_t ld, const float *L,
                         const float *dl, const fc_bwd_score *sc, const int32_t *se, const int32_t *lo,
                         const int32_t *hi) {
    const fc_score_modf m = fc_score_modf_of(sc->mod);
    const fc_vf vsc = fc_vf_set1((float)sc->scale), qk = fc_vf_set1(m.qk_mul);
    const fc_vf cap = fc_vf_set1(m.cap), slope = fc_vf_set1(m.slope);
    for (int c0 = 0; c0 < ncols; c0 += FC_VF_W) {
        const fc_vf Lc = fc_vf_load(L + c0), dlc = fc_vf_load(dl + c0);
        const fc_vi vse = fc_vi_load(se + c0), vlo = fc_vi_load(lo + c0), vhi = fc_vi_load(hi + c0);
        for (int r = 0; r < rows; ++r) {
            float *sr = s + (ptrdiff_t)r * ld, *dr = dp + (ptrdiff_t)r * ld;
            const fc_vm vis = fc_vm_key_visible(vse, vlo, vhi, fc_vi_set1(r));
            const fc_vf dist = FC_SCORE_NEEDS_DIST(mode) ? fc_vf_add(fc_vf_set1((float)(sc->dist0 - r + c0)), fc_vf_iota())
                                                       : fc_vf_zero();
            FN(ew_vec)(sr + c0, dr + c0, Lc, dlc, qk, vsc, vis, mode, cap, slope, dist);
        }
    }
}

/* One branch per tile on the steps this head needs (a head whose ALiBi
 * slope is 0 has none); each variant is its own straight-line loop. */
#define FC_BWD_EW_Q(v) FN(ew_q_body)((v), rows, ncols, fs, fd, ld, fL, fl, sc, se, lo, hi)
#define FC_BWD_EW_K(v) FN(ew_k_body)((v), rows, ncols, fs, fd, ld, fL, fl, sc, se, lo, hi)
#define FC_BWD_EW(NAME, CALL)                                                                             \
    static void FN(NAME)(int rows, int ncols, void *s, void *dp, ptrdiff_t ld, const void *L, const void *dl, \
                         const fc_bwd_score *sc, const int32_t *se, const int32_t *lo, const int32_t *hi) {   \
        float *fs = (float *)s, *fd = (float *)dp;                                                        \
        const float *fL = (const float *)L, *fl = (const float *)dl;                                      \
        FC_VSCORE_DISPATCH(fc_score_mode_of(&sc->mod), CALL);                                             \
    }
FC_BWD_EW(ew_q, FC_BWD_EW_Q)
FC_BWD_EW(ew_k, FC_BWD_EW_K)
#undef FC_BWD_EW
#undef FC_BWD_EW_K
#undef FC_BWD_EW_Q

/* ------------------------------------------------------------------- pack */
/* Unit column stride (rows of D contiguous) in F32/F16/BF16: vector
 * conversions, the tail read with lane masks (nothing past column cols − 1);
 * otherwise the portable pack. */
static void FN(pack)(int dtype, const void *src, int64_t rs, int64_t cs, int rows, int cols, int cols_pad,
                     void *dst_, ptrdiff_t ld) {
    if (cs != 1 || dtype == FLASHC_F64) {
        fc_bwd_pack_generic(4, dtype, src, rs, cs, rows, cols, cols_pad, dst_, ld);
        return;
    }
    const size_t esz = flashc_dtype_size(dtype);
    float *dst = (float *)dst_;
    for (int r = 0; r < rows; ++r) {
        const char *s = (const char *)src + (size_t)(r * rs) * esz;
        float *d = dst + (ptrdiff_t)r * ld;
        int c = 0;
        for (; c + FC_VF_W <= cols; c += FC_VF_W) fc_vf_store(d + c, fc_vf_load_as(s + c * esz, dtype));
        if (c < cols) {
            fc_vf_store(d + c, fc_vf_load_as_tail(s + c * esz, dtype, cols - c));
            c += FC_VF_W;
        }
        for (; c < cols_pad; c += FC_VF_W) fc_vf_store(d + c, fc_vf_zero());
    }
}
