/* AVX2 (+FMA, F16C) weighted row-sum: the vocabulary for
 * weighted_sum_body.h. Built with only this ISA's flags. */
#include <immintrin.h>

#include "flashc_internal.h"

typedef __m256 VF;
typedef __m256d VD;
#define NF 8
#define ND 4

static inline VF vf_zero(void) { return _mm256_setzero_ps(); }
static inline VF vf_set1(float x) { return _mm256_set1_ps(x); }
static inline VF vf_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void vf_store(float *p, VF v) { _mm256_storeu_ps(p, v); }
static inline VF vf_fma(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
static inline VF vf_add(VF a, VF b) { return _mm256_add_ps(a, b); }
static inline VF vf_mul(VF a, VF b) { return _mm256_mul_ps(a, b); }
static inline float vf_hsum(VF v) {
    __m128 t = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    t = _mm_add_ps(t, _mm_movehl_ps(t, t));
    t = _mm_add_ss(t, _mm_movehdup_ps(t));
    return _mm_cvtss_f32(t);
}
/* vf_hsum of a, b, c, d with the very same additions (lane i + i+4, then
 * i + i+2, i + i+1), two rows per shuffle. */
static inline void vf_hsum4(VF a, VF b, VF c, VF d, float *out) {
    VF tab = _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
    VF tcd = _mm256_add_ps(_mm256_permute2f128_ps(c, d, 0x20), _mm256_permute2f128_ps(c, d, 0x31));
    tab = _mm256_add_ps(tab, _mm256_permute_ps(tab, _MM_SHUFFLE(3, 2, 3, 2)));
    tcd = _mm256_add_ps(tcd, _mm256_permute_ps(tcd, _MM_SHUFFLE(3, 2, 3, 2)));
    tab = _mm256_add_ps(tab, _mm256_permute_ps(tab, _MM_SHUFFLE(3, 3, 1, 1)));
    tcd = _mm256_add_ps(tcd, _mm256_permute_ps(tcd, _MM_SHUFFLE(3, 3, 1, 1)));
    /* lanes 0 and 4 of each: a, b, c, d */
    const __m256i pick = _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0);
    const __m128 ab = _mm256_castps256_ps128(_mm256_permutevar8x32_ps(tab, pick));
    const __m128 cd = _mm256_castps256_ps128(_mm256_permutevar8x32_ps(tcd, pick));
    _mm_storeu_ps(out, _mm_movelh_ps(ab, cd));
}
/* bf16 -> fp32 is a 16-bit left shift. */
static inline VF vf_load_bf16(const uint16_t *p) {
    const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}
static inline VF vf_load_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
/* fc_f32_to_bf16, lane-wise: round to nearest even; NaN keeps its top bits
 * and gets the quiet bit (0x40). */
static inline __m128i vf_pack_bf16(VF v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i hi = _mm256_srli_epi32(u, 16);
    const __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(hi, _mm256_set1_epi32(1)));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
    /* |u| and 0x7f800000 are both non-negative as int32: a signed compare works. */
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
    /* every lane is ≤ 0xffff, so the unsigned-saturating pack is exact */
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}
static inline __m128i vf_pack_f16(VF v) { return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline void vf_store_bf16(uint16_t *p, VF v) { _mm_storeu_si128((__m128i *)p, vf_pack_bf16(v)); }
static inline void vf_store_f16(uint16_t *p, VF v) { _mm_storeu_si128((__m128i *)p, vf_pack_f16(v)); }
/* Non-temporal stores (p aligned to the store's width) for large dx. */
static inline void vf_stream(float *p, VF v) { _mm256_stream_ps(p, v); }
static inline void vf_stream_bf16(uint16_t *p, VF v) { _mm_stream_si128((__m128i *)p, vf_pack_bf16(v)); }
static inline void vf_stream_f16(uint16_t *p, VF v) { _mm_stream_si128((__m128i *)p, vf_pack_f16(v)); }
static inline void vd_stream(double *p, __m256d v) { _mm256_stream_pd(p, v); }

static inline VD vd_zero(void) { return _mm256_setzero_pd(); }
static inline VD vd_set1(double x) { return _mm256_set1_pd(x); }
static inline VD vd_load(const double *p) { return _mm256_loadu_pd(p); }
static inline void vd_store(double *p, VD v) { _mm256_storeu_pd(p, v); }
static inline VD vd_fma(VD a, VD b, VD c) { return _mm256_fmadd_pd(a, b, c); }
static inline VD vd_add(VD a, VD b) { return _mm256_add_pd(a, b); }
static inline VD vd_mul(VD a, VD b) { return _mm256_mul_pd(a, b); }
static inline double vd_hsum(VD v) {
    __m128d t = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(t, _mm_unpackhi_pd(t, t)));
}

#define WS_NAME(x) fc_wsum_##x##_avx2
#include "weighted_sum_body.h"
