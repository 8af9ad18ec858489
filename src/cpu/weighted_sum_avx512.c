/* AVX-512 (F/BW/VL/DQ + F16C) weighted row-sum: the vocabulary for
 * weighted_sum_body.h. Built with only this ISA's flags. */
#include <immintrin.h>

#include "flashc_internal.h"

typedef __m512 VF;
typedef __m512d VD;
#define NF 16
#define ND 8

static inline VF vf_zero(void) { return _mm512_setzero_ps(); }
static inline VF vf_set1(float x) { return _mm512_set1_ps(x); }
static inline VF vf_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void vf_store(float *p, VF v) { _mm512_storeu_ps(p, v); }
static inline VF vf_fma(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
static inline VF vf_add(VF a, VF b) { return _mm512_add_ps(a, b); }
static inline VF vf_mul(VF a, VF b) { return _mm512_mul_ps(a, b); }
static inline float vf_hsum(VF v) {
    __m256 s = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 t = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    t = _mm_add_ps(t, _mm_movehl_ps(t, t));
    t = _mm_add_ss(t, _mm_movehdup_ps(t));
    return _mm_cvtss_f32(t);
}
/* vf_hsum of a, b, c, d with the very same additions (lane i + i+8, then
 * i + i+4, i + i+2, i + i+1), four rows per shuffle. */
static inline void vf_hsum4(VF a, VF b, VF c, VF d, float *out) {
    const VF sab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
    const VF scd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(3, 2, 3, 2)));
    VF t = _mm512_add_ps(_mm512_shuffle_f32x4(sab, scd, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(sab, scd, _MM_SHUFFLE(3, 1, 3, 1)));
    t = _mm512_add_ps(t, _mm512_permute_ps(t, _MM_SHUFFLE(3, 2, 3, 2)));
    t = _mm512_add_ps(t, _mm512_permute_ps(t, _MM_SHUFFLE(3, 3, 1, 1)));
    const __m512i lane0 = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    _mm_storeu_ps(out, _mm512_castps512_ps128(_mm512_permutexvar_ps(lane0, t)));
}
/* bf16 -> fp32 is a 16-bit left shift. */
static inline VF vf_load_bf16(const uint16_t *p) {
    const __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
}
static inline VF vf_load_f16(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
/* fc_f32_to_bf16, lane-wise: round to nearest even; NaN keeps its top bits
 * and gets the quiet bit (0x40). Not vcvtneps2bf16, which flushes denormals. */
static inline __m256i vf_pack_bf16(VF v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i hi = _mm512_srli_epi32(u, 16);
    const __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(hi, _mm512_set1_epi32(1)));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(r);
}
static inline __m256i vf_pack_f16(VF v) { return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline void vf_store_bf16(uint16_t *p, VF v) { _mm256_storeu_si256((__m256i *)p, vf_pack_bf16(v)); }
static inline void vf_store_f16(uint16_t *p, VF v) { _mm256_storeu_si256((__m256i *)p, vf_pack_f16(v)); }
/* Non-temporal stores (p aligned to the store's width) for large dx. */
static inline void vf_stream(float *p, VF v) { _mm512_stream_ps(p, v); }
static inline void vf_stream_bf16(uint16_t *p, VF v) { _mm256_stream_si256((__m256i *)p, vf_pack_bf16(v)); }
static inline void vf_stream_f16(uint16_t *p, VF v) { _mm256_stream_si256((__m256i *)p, vf_pack_f16(v)); }
static inline void vd_stream(double *p, __m512d v) { _mm512_stream_pd(p, v); }

static inline VD vd_zero(void) { return _mm512_setzero_pd(); }
static inline VD vd_set1(double x) { return _mm512_set1_pd(x); }
static inline VD vd_load(const double *p) { return _mm512_loadu_pd(p); }
static inline void vd_store(double *p, VD v) { _mm512_storeu_pd(p, v); }
static inline VD vd_fma(VD a, VD b, VD c) { return _mm512_fmadd_pd(a, b, c); }
static inline VD vd_add(VD a, VD b) { return _mm512_add_pd(a, b); }
static inline VD vd_mul(VD a, VD b) { return _mm512_mul_pd(a, b); }
static inline double vd_hsum(VD v) {
    __m256d s = _mm256_add_pd(_mm512_castpd512_pd256(v), _mm512_extractf64x4_pd(v, 1));
    __m128d t = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    return _mm_cvtsd_f64(_mm_add_sd(t, _mm_unpackhi_pd(t, t)));
}

#define WS_NAME(x) fc_wsum_##x##_avx512
#include "weighted_sum_body.h"
