/* Attention backward: AVX2 + FMA microkernels (fp32 working precision; F64
 * uses the portable path). Compiled with AVX2 flags only (CMakeLists.txt).
 * See attn_bwd.h for what each one computes. */
#include "attn_bwd.h"

#include <immintrin.h>
#include <math.h>

#define FC_AI static inline __attribute__((always_inline))

/* ------------------------------------------------------------------- gemm */
/* Register tile MR rows × 2 vectors of 8 (16 columns: N is a multiple of 16):
 * 12 accumulators + 2 b + 1 a of the 16 ymm registers. */
FC_AI void mk256(const int MR, int K, const float *a, ptrdiff_t ars, ptrdiff_t acs,
                 const float *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int accumulate) {
    __m256 acc[6][2];
    for (int m = 0; m < MR; ++m)
        for (int v = 0; v < 2; ++v)
            acc[m][v] = accumulate ? _mm256_loadu_ps(c + m * ldc + 8 * v) : _mm256_setzero_ps();
    for (int k = 0; k < K; ++k) {
        const float *bk = b + (ptrdiff_t)k * ldb, *ak = a + (ptrdiff_t)k * acs;
        const __m256 b0 = _mm256_loadu_ps(bk), b1 = _mm256_loadu_ps(bk + 8);
        for (int m = 0; m < MR; ++m) {
            const __m256 av = _mm256_broadcast_ss(ak + m * ars);
            acc[m][0] = _mm256_fmadd_ps(av, b0, acc[m][0]);
            acc[m][1] = _mm256_fmadd_ps(av, b1, acc[m][1]);
        }
    }
    for (int m = 0; m < MR; ++m)
        for (int v = 0; v < 2; ++v) _mm256_storeu_ps(c + m * ldc + 8 * v, acc[m][v]);
}

static void gemm256(int M, int N, int K, const void *a_, ptrdiff_t ars, ptrdiff_t acs,
                    const void *b_, ptrdiff_t ldb, void *c_, ptrdiff_t ldc, int accumulate) {
    const float *a = (const float *)a_, *b = (const float *)b_;
    float *c = (float *)c_;
    for (int n0 = 0; n0 < N; n0 += 16) {
        for (int m0 = 0; m0 < M; m0 += 6) {
            const float *am = a + (ptrdiff_t)m0 * ars;
            float *cm = c + (ptrdiff_t)m0 * ldc + n0;
            switch (M - m0 >= 6 ? 6 : M - m0) {
            case 6: mk256(6, K, am, ars, acs, b + n0, ldb, cm, ldc, accumulate); break;
            case 5: mk256(5, K, am, ars, acs, b + n0, ldb, cm, ldc, accumulate); break;
            case 4: mk256(4, K, am, ars, acs, b + n0, ldb, cm, ldc, accumulate); break;
            case 3: mk256(3, K, am, ars, acs, b + n0, ldb, cm, ldc, accumulate); break;
            case 2: mk256(2, K, am, ars, acs, b + n0, ldb, cm, ldc, accumulate); break;
            default: mk256(1, K, am, ars, acs, b + n0, ldb, cm, ldc, accumulate); break;
            }
        }
    }
}

/* -------------------------------------------------------------------- exp */
/* Cephes expf polynomial; 2^n built in the exponent field. x is clamped to
 * [−87.3, 88] so that n + 127 stays in 1..254 (an exp below e^−87.3 comes out
 * as ~1e−38 rather than 0: far below anything that matters in a sum of P). */
FC_AI __m256 exp256(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
    x = _mm256_min_ps(x, _mm256_set1_ps(88.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* --------------------------------------------------------------------- ew */
FC_AI void ew_vec(float *sp, float *dpp, __m256 L, __m256 dl, __m256 sc, __m256i vis) {
    const __m256 p = _mm256_and_ps(_mm256_castsi256_ps(vis),
                                   exp256(_mm256_fmsub_ps(sc, _mm256_loadu_ps(sp), L)));
    const __m256 dp = _mm256_loadu_ps(dpp);
    _mm256_storeu_ps(sp, p);
    _mm256_storeu_ps(dpp, _mm256_mul_ps(_mm256_mul_ps(sc, p), _mm256_sub_ps(dp, dl)));
}

/* idx < se || (lo ≤ idx < hi), as an all-ones lane mask. */
FC_AI __m256i vis_mask(__m256i idx, __m256i se, __m256i lo, __m256i hi) {
    return _mm256_or_si256(_mm256_cmpgt_epi32(se, idx),
                           _mm256_andnot_si256(_mm256_cmpgt_epi32(lo, idx), _mm256_cmpgt_epi32(hi, idx)));
}

static void ew_q256(int rows, int ncols, void *s_, void *dp_, ptrdiff_t ld, const void *L_,
                    const void *dl_, double scale, const int32_t *se, const int32_t *lo,
                    const int32_t *hi) {
    float *s = (float *)s_, *dp = (float *)dp_;
    const float *L = (const float *)L_, *dl = (const float *)dl_;
    const __m256 sc = _mm256_set1_ps((float)scale);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int r = 0; r < rows; ++r) {
        float *sr = s + (ptrdiff_t)r * ld, *dr = dp + (ptrdiff_t)r * ld;
        const __m256 Lr = _mm256_set1_ps(L[r]), dlr = _mm256_set1_ps(dl[r]);
        const __m256i vse = _mm256_set1_epi32(se[r]), vlo = _mm256_set1_epi32(lo[r]),
                      vhi = _mm256_set1_epi32(hi[r]);
        for (int c0 = 0; c0 < ncols; c0 += 8) {
            const __m256i col = _mm256_add_epi32(lane, _mm256_set1_epi32(c0));
            ew_vec(sr + c0, dr + c0, Lr, dlr, sc, vis_mask(col, vse, vlo, vhi));
        }
    }
}

static void ew_k256(int rows, int ncols, void *s_, void *dp_, ptrdiff_t ld, const void *L_,
                    const void *dl_, double scale, const int32_t *se, const int32_t *lo,
                    const int32_t *hi) {
    float *s = (float *)s_, *dp = (float *)dp_;
    const float *L = (const float *)L_, *dl = (const float *)dl_;
    const __m256 sc = _mm256_set1_ps((float)scale);
    for (int c0 = 0; c0 < ncols; c0 += 8) {
        const __m256 Lc = _mm256_loadu_ps(L + c0), dlc = _mm256_loadu_ps(dl + c0);
        const __m256i vse = _mm256_loadu_si256((const __m256i *)(se + c0)),
                      vlo = _mm256_loadu_si256((const __m256i *)(lo + c0)),
                      vhi = _mm256_loadu_si256((const __m256i *)(hi + c0));
        for (int r = 0; r < rows; ++r) {
            float *sr = s + (ptrdiff_t)r * ld, *dr = dp + (ptrdiff_t)r * ld;
            ew_vec(sr + c0, dr + c0, Lc, dlc, sc, vis_mask(_mm256_set1_epi32(r), vse, vlo, vhi));
        }
    }
}

/* ------------------------------------------------------------------- pack */
static void pack256(int dtype, const void *src, int64_t rs, int64_t cs, int rows, int cols,
                    int cols_pad, void *dst_, ptrdiff_t ld) {
    if (cs != 1 || dtype == FLASHC_F64) {
        fc_bwd_pack_generic(4, dtype, src, rs, cs, rows, cols, cols_pad, dst_, ld);
        return;
    }
    float *dst = (float *)dst_;
    for (int r = 0; r < rows; ++r) {
        float *d = dst + (ptrdiff_t)r * ld;
        int c = 0;
        if (dtype == FLASHC_F32) {
            const float *s = (const float *)src + r * rs;
            for (; c + 8 <= cols; c += 8) _mm256_storeu_ps(d + c, _mm256_loadu_ps(s + c));
            for (; c < cols; ++c) d[c] = s[c];
        } else if (dtype == FLASHC_F16) {
            const uint16_t *s = (const uint16_t *)src + r * rs;
            for (; c + 8 <= cols; c += 8)
                _mm256_storeu_ps(d + c, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + c))));
            for (; c < cols; ++c) d[c] = fc_f16_to_f32(s[c]);
        } else {
            const uint16_t *s = (const uint16_t *)src + r * rs;
            for (; c + 8 <= cols; c += 8) {
                const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + c)));
                _mm256_storeu_ps(d + c, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
            }
            for (; c < cols; ++c) d[c] = fc_bf16_to_f32(s[c]);
        }
        for (; c < cols_pad; ++c) d[c] = 0.0f;
    }
}

const fc_bwd_kern fc_bwd_avx2_f32 = {4, gemm256, ew_q256, ew_k256, pack256};
