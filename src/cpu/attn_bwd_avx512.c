/* Attention backward: AVX-512 microkernels (fp32 working precision; F64 uses
 * the portable path). Compiled with AVX-512 flags only (CMakeLists.txt).
 * See attn_bwd.h for what each one computes. */
#include "attn_bwd.h"

#include <immintrin.h>
#include <math.h>

#define FC_AI static inline __attribute__((always_inline))

/* ------------------------------------------------------------------- gemm */
/* Register tile MR rows × NV vectors of 16: per k, NV loads of b, MR
 * broadcasts of a, MR·NV FMAs. 6×4 uses 24 accumulators + 4 b + 1 a. */
FC_AI void mk512(const int MR, const int NV, int K, const float *a, ptrdiff_t ars,
                 ptrdiff_t acs, const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc,
                 int accumulate) {
    __m512 acc[6][4];
    for (int m = 0; m < MR; ++m)
        for (int v = 0; v < NV; ++v)
            acc[m][v] = accumulate ? _mm512_loadu_ps(c + m * ldc + 16 * v) : _mm512_setzero_ps();
    for (int k = 0; k < K; ++k) {
        __m512 bv[4];
        const float *bk = b + (ptrdiff_t)k * ldb, *ak = a + (ptrdiff_t)k * acs;
        for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(bk + 16 * v);
        for (int m = 0; m < MR; ++m) {
            const __m512 av = _mm512_set1_ps(ak[m * ars]);
            for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_fmadd_ps(av, bv[v], acc[m][v]);
        }
    }
    for (int m = 0; m < MR; ++m)
        for (int v = 0; v < NV; ++v) _mm512_storeu_ps(c + m * ldc + 16 * v, acc[m][v]);
}

#define MK_CASE(MR, NV) \
    case (MR) * 8 + (NV): mk512(MR, NV, K, a, ars, acs, b, ldb, c, ldc, accumulate); break;

static void mk512_dispatch(int mr, int nv, int K, const float *a, ptrdiff_t ars, ptrdiff_t acs,
                           const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc,
                           int accumulate) {
    switch (mr * 8 + nv) {
    MK_CASE(1, 1) MK_CASE(1, 2) MK_CASE(1, 3) MK_CASE(1, 4)
    MK_CASE(2, 1) MK_CASE(2, 2) MK_CASE(2, 3) MK_CASE(2, 4)
    MK_CASE(3, 1) MK_CASE(3, 2) MK_CASE(3, 3) MK_CASE(3, 4)
    MK_CASE(4, 1) MK_CASE(4, 2) MK_CASE(4, 3) MK_CASE(4, 4)
    MK_CASE(5, 1) MK_CASE(5, 2) MK_CASE(5, 3) MK_CASE(5, 4)
    MK_CASE(6, 1) MK_CASE(6, 2) MK_CASE(6, 3) MK_CASE(6, 4)
    default: break;
    }
}

static void gemm512(int M, int N, int K, const void *a_, ptrdiff_t ars, ptrdiff_t acs,
                    const void *b_, ptrdiff_t ldb, void *c_, ptrdiff_t ldc, int accumulate) {
    const float *a = (const float *)a_, *b = (const float *)b_;
    float *c = (float *)c_;
    for (int n0 = 0; n0 < N; n0 += 64) {
        const int nv = (N - n0 >= 64 ? 64 : N - n0) / 16;
        for (int m0 = 0; m0 < M; m0 += 6) {
            const int mr = M - m0 >= 6 ? 6 : M - m0;
            mk512_dispatch(mr, nv, K, a + (ptrdiff_t)m0 * ars, ars, acs, b + n0, ldb,
                           c + (ptrdiff_t)m0 * ldc + n0, ldc, accumulate);
        }
    }
}

/* -------------------------------------------------------------------- exp */
/* exp(x) for x ≤ ~0 (P never exceeds 1 but for rounding): Cephes expf
 * polynomial on r = x − n·ln2, |r| ≤ ln2/2, scaled by 2^n with vscalefps
 * (which underflows to 0 gracefully). ~2 ulp. */
FC_AI __m512 exp512(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
    x = _mm512_min_ps(x, _mm512_set1_ps(88.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

/* --------------------------------------------------------------------- ew */
FC_AI void ew_vec(float *sp, float *dpp, __m512 x, __m512 L, __m512 dl, __m512 sc, __mmask16 vis) {
    const __m512 p = _mm512_maskz_mov_ps(vis, exp512(_mm512_fmsub_ps(sc, x, L)));
    const __m512 dp = _mm512_loadu_ps(dpp);
    _mm512_storeu_ps(sp, p);
    _mm512_storeu_ps(dpp, _mm512_mul_ps(_mm512_mul_ps(sc, p), _mm512_sub_ps(dp, dl)));
}

static void ew_q512(int rows, int ncols, void *s_, void *dp_, ptrdiff_t ld, const void *L_,
                    const void *dl_, double scale, const int32_t *se, const int32_t *lo,
                    const int32_t *hi) {
    float *s = (float *)s_, *dp = (float *)dp_;
    const float *L = (const float *)L_, *dl = (const float *)dl_;
    const __m512 sc = _mm512_set1_ps((float)scale);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int r = 0; r < rows; ++r) {
        float *sr = s + (ptrdiff_t)r * ld, *dr = dp + (ptrdiff_t)r * ld;
        const __m512 Lr = _mm512_set1_ps(L[r]), dlr = _mm512_set1_ps(dl[r]);
        const __m512i vse = _mm512_set1_epi32(se[r]), vlo = _mm512_set1_epi32(lo[r]),
                      vhi = _mm512_set1_epi32(hi[r]);
        for (int c0 = 0; c0 < ncols; c0 += 16) {
            const __m512i col = _mm512_add_epi32(lane, _mm512_set1_epi32(c0));
            const __mmask16 vis = _mm512_cmplt_epi32_mask(col, vse) |
                                  (_mm512_cmpge_epi32_mask(col, vlo) & _mm512_cmplt_epi32_mask(col, vhi));
            ew_vec(sr + c0, dr + c0, _mm512_loadu_ps(sr + c0), Lr, dlr, sc, vis);
        }
    }
}

static void ew_k512(int rows, int ncols, void *s_, void *dp_, ptrdiff_t ld, const void *L_,
                    const void *dl_, double scale, const int32_t *se, const int32_t *lo,
                    const int32_t *hi) {
    float *s = (float *)s_, *dp = (float *)dp_;
    const float *L = (const float *)L_, *dl = (const float *)dl_;
    const __m512 sc = _mm512_set1_ps((float)scale);
    for (int c0 = 0; c0 < ncols; c0 += 16) {
        const __m512 Lc = _mm512_loadu_ps(L + c0), dlc = _mm512_loadu_ps(dl + c0);
        const __m512i vse = _mm512_loadu_si512(se + c0), vlo = _mm512_loadu_si512(lo + c0),
                      vhi = _mm512_loadu_si512(hi + c0);
        for (int r = 0; r < rows; ++r) {
            float *sr = s + (ptrdiff_t)r * ld, *dr = dp + (ptrdiff_t)r * ld;
            const __m512i row = _mm512_set1_epi32(r);
            const __mmask16 vis = _mm512_cmplt_epi32_mask(row, vse) |
                                  (_mm512_cmpge_epi32_mask(row, vlo) & _mm512_cmplt_epi32_mask(row, vhi));
            ew_vec(sr + c0, dr + c0, _mm512_loadu_ps(sr + c0), Lc, dlc, sc, vis);
        }
    }
}

/* ------------------------------------------------------------------- pack */
/* Fast path: unit column stride (rows of D contiguous); otherwise portable. */
static void pack512(int dtype, const void *src, int64_t rs, int64_t cs, int rows, int cols,
                    int cols_pad, void *dst_, ptrdiff_t ld) {
    if (cs != 1 || dtype == FLASHC_F64) {
        fc_bwd_pack_generic(4, dtype, src, rs, cs, rows, cols, cols_pad, dst_, ld);
        return;
    }
    float *dst = (float *)dst_;
    for (int r = 0; r < rows; ++r) {
        float *d = dst + (ptrdiff_t)r * ld;
        for (int c0 = 0; c0 < cols_pad; c0 += 16) {
            const int n = cols - c0;
            const __mmask16 m = n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
            __m512 x;
            if (dtype == FLASHC_F32) {
                x = _mm512_maskz_loadu_ps(m, (const float *)src + r * rs + c0);
            } else {
                const __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)src + r * rs + c0);
                if (dtype == FLASHC_F16)
                    x = _mm512_cvtph_ps(h);
                else
                    x = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
            }
            _mm512_storeu_ps(d + c0, x);
        }
    }
}

const fc_bwd_kern fc_bwd_avx512_f32 = {4, gemm512, ew_q512, ew_k512, pack512};
