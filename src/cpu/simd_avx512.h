/*
 * simd_avx512.h — the AVX-512 (F, BW, VL, DQ + FMA, F16C) vector vocabulary
 * of the CPU backend: the same names as simd_avx2.h (see there) on 16 fp32
 * lanes, with __mmask16 lane masks. Include from a file built with the
 * AVX-512 flags only (*_avx512.c, *_avx512bf16.c); everything is static
 * inline, so each ISA file gets its own copy compiled with its own flags.
 */
#ifndef FLASHC_CPU_SIMD_AVX512_H
#define FLASHC_CPU_SIMD_AVX512_H

#include "flashc_internal.h"

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define FC_SIMD_AVX512 1
#define FC_VF_W 16
#ifndef FC_SI
#define FC_SI static inline __attribute__((always_inline))
#endif

typedef __m512 fc_vf;
typedef __m512i fc_vi;
typedef __mmask16 fc_vm;

/* ------------------------------------------------------------ arithmetic */
FC_SI fc_vf fc_vf_zero(void) { return _mm512_setzero_ps(); }
FC_SI fc_vf fc_vf_set1(float x) { return _mm512_set1_ps(x); }
FC_SI fc_vf fc_vf_load(const float *p) { return _mm512_loadu_ps(p); }
FC_SI fc_vf fc_vf_loada(const float *p) { return _mm512_load_ps(p); } /* 64-byte aligned */
FC_SI void fc_vf_store(float *p, fc_vf x) { _mm512_storeu_ps(p, x); }
FC_SI void fc_vf_storea(float *p, fc_vf x) { _mm512_store_ps(p, x); }
FC_SI fc_vf fc_vf_bcast(const float *p) { return _mm512_set1_ps(*p); }
FC_SI fc_vf fc_vf_add(fc_vf a, fc_vf b) { return _mm512_add_ps(a, b); }
FC_SI fc_vf fc_vf_sub(fc_vf a, fc_vf b) { return _mm512_sub_ps(a, b); }
FC_SI fc_vf fc_vf_mul(fc_vf a, fc_vf b) { return _mm512_mul_ps(a, b); }
FC_SI fc_vf fc_vf_div(fc_vf a, fc_vf b) { return _mm512_div_ps(a, b); }
FC_SI fc_vf fc_vf_fma(fc_vf a, fc_vf b, fc_vf c) { return _mm512_fmadd_ps(a, b, c); }   /* a·b + c */
FC_SI fc_vf fc_vf_fnma(fc_vf a, fc_vf b, fc_vf c) { return _mm512_fnmadd_ps(a, b, c); } /* c − a·b */
FC_SI fc_vf fc_vf_fms(fc_vf a, fc_vf b, fc_vf c) { return _mm512_fmsub_ps(a, b, c); }   /* a·b − c */
/* max/min: when a lane of either operand is NaN the lane of b is returned. */
FC_SI fc_vf fc_vf_max(fc_vf a, fc_vf b) { return _mm512_max_ps(a, b); }
FC_SI fc_vf fc_vf_min(fc_vf a, fc_vf b) { return _mm512_min_ps(a, b); }
FC_SI fc_vf fc_vf_abs(fc_vf a) { return _mm512_abs_ps(a); }
FC_SI fc_vf fc_vf_xorsign(fc_vf a, fc_vf b) { /* a, negated where b's sign bit is set */
    return _mm512_castsi512_ps(_mm512_xor_si512(
        _mm512_castps_si512(a), _mm512_and_si512(_mm512_castps_si512(b), _mm512_set1_epi32((int)0x80000000u))));
}
FC_SI fc_vf fc_vf_iota(void) { return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }

FC_SI fc_vi fc_vi_set1(int32_t x) { return _mm512_set1_epi32(x); }
FC_SI fc_vi fc_vi_load(const int32_t *p) { return _mm512_loadu_si512(p); }
FC_SI fc_vi fc_vi_add(fc_vi a, fc_vi b) { return _mm512_add_epi32(a, b); }
FC_SI fc_vi fc_vi_iota(void) { return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }

/* ------------------------------------------------------------ lane masks */
FC_SI fc_vm fc_vm_and(fc_vm a, fc_vm b) { return (fc_vm)(a & b); }
FC_SI fc_vm fc_vm_or(fc_vm a, fc_vm b) { return (fc_vm)(a | b); }
FC_SI fc_vm fc_vm_andnot(fc_vm a, fc_vm b) { return (fc_vm)(~a & b); } /* ¬a ∧ b */
FC_SI int fc_vm_any(fc_vm m) { return m != 0; }
FC_SI int fc_vm_all(fc_vm m) { return m == (fc_vm)0xffff; }
/* Lanes k < n (n may be ≤ 0 or ≥ FC_VF_W). */
FC_SI fc_vm fc_vm_tail(int64_t n) {
    return n >= 16 ? (fc_vm)0xffff : n <= 0 ? (fc_vm)0 : (fc_vm)((1u << n) - 1u);
}
FC_SI fc_vm fc_vf_lt(fc_vf a, fc_vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
FC_SI fc_vm fc_vf_le(fc_vf a, fc_vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ); }
FC_SI fc_vm fc_vf_eq(fc_vf a, fc_vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
FC_SI fc_vm fc_vf_ne(fc_vf a, fc_vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_NEQ_UQ); } /* NaN: true */
/* Lanes holding ±inf or NaN. */
FC_SI fc_vm fc_vf_nonfinite(fc_vf x) {
    return _mm512_cmp_ps_mask(_mm512_abs_ps(x), _mm512_set1_ps(INFINITY), _CMP_NLT_UQ);
}
/* m ? a : b, lane-wise. */
FC_SI fc_vf fc_vf_select(fc_vm m, fc_vf a, fc_vf b) { return _mm512_mask_mov_ps(b, m, a); }
/* m ? a : 0. */
FC_SI fc_vf fc_vf_keep(fc_vm m, fc_vf a) { return _mm512_maskz_mov_ps(m, a); }
/* FC_KEY_VISIBLE (attn_mask.h) lane-wise: j < se || (lo ≤ j && j < hi). */
FC_SI fc_vm fc_vm_key_visible(fc_vi se, fc_vi lo, fc_vi hi, fc_vi j) {
    return (fc_vm)(_mm512_cmpgt_epi32_mask(se, j) |
                   (_mm512_cmple_epi32_mask(lo, j) & _mm512_cmpgt_epi32_mask(hi, j)));
}
/* Lanes k < n of p (the others 0); reads nothing past p[n − 1]. */
FC_SI fc_vf fc_vf_load_tail(const float *p, int64_t n) { return _mm512_maskz_loadu_ps(fc_vm_tail(n), p); }
FC_SI void fc_vf_store_tail(float *p, int64_t n, fc_vf x) { _mm512_mask_storeu_ps(p, fc_vm_tail(n), x); }

/* ------------------------------------------------------------------ math */
/* P(f) with 2^f = 1 + f·P(f): the degree-7 Taylor polynomial of 2^f
 * without its constant term, for |f| ≤ 1/2 (relative error < 6e-9). */
FC_SI fc_vf fc_vf_exp2_taylor(fc_vf f) {
    __m512 p = _mm512_set1_ps(1.5252733804059838e-05f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.5403530393381606e-04f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428441e-03f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291076284770e-03f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504108664821576e-02f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022650695910071e-01f));
    return _mm512_fmadd_ps(p, f, _mm512_set1_ps(FC_LN2_F));
}

/* 2^x (−inf → 0; NaN stays NaN, so that a score a row sees as NaN makes
 * its results NaN, flashc.h): x = n + f, |f| ≤ 1/2, 2^f = 1 + f·P(f), 2^n
 * applied by vscalefps, which flushes to exactly 0 below the denormal range. */
FC_SI fc_vf fc_vf_exp2(fc_vf x) {
    x = _mm512_max_ps(_mm512_set1_ps(-150.0f), x); /* NaN: the second operand */
    const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(x, n);
    return _mm512_scalef_ps(_mm512_fmadd_ps(fc_vf_exp2_taylor(f), f, _mm512_set1_ps(1.0f)), n);
}

/* e^x for x ≤ 88 (larger saturates at e^88; −inf and NaN → 0): as
 * simd_avx2.h (Cephes expf reduction and polynomial), 2^n by vscalefps. */
FC_SI fc_vf fc_vf_exp(fc_vf x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
    x = _mm512_min_ps(x, _mm512_set1_ps(88.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(FC_LOG2E_F)),
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

/* 2^y = s·(1 + p) for y ≤ 0 as the pair (s, p) = (2^n, 2^f − 1 = f·P(f));
 * as simd_avx2.h, s by vscalefps (+0 far below). NaN stays NaN (in p). */
FC_SI void fc_vf_exp2_parts(fc_vf y, fc_vf *s, fc_vf *p) {
    y = _mm512_max_ps(_mm512_set1_ps(-150.0f), y); /* NaN: the second operand */
    const __m512 n = _mm512_roundscale_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(y, n);
    *p = _mm512_mul_ps(fc_vf_exp2_taylor(f), f);
    *s = _mm512_scalef_ps(_mm512_set1_ps(1.0f), n);
}

/* 2^y − 1 for y ≤ 0 (→ −1 far below; NaN stays NaN), relative error ~1e-7
 * also near 0; as simd_avx2.h. */
FC_SI fc_vf fc_vf_exp2m1(fc_vf y) {
    fc_vf s, p;
    fc_vf_exp2_parts(y, &s, &p);
    return _mm512_fmadd_ps(s, p, _mm512_sub_ps(s, _mm512_set1_ps(1.0f)));
}

#include "simd_tanh.h" /* fc_vf_tanh, over the vocabulary above */

/* Horizontal max / sum (a fixed order). */
FC_SI float fc_vf_hmax(fc_vf x) { return _mm512_reduce_max_ps(x); }
FC_SI float fc_vf_hsum(fc_vf x) { return _mm512_reduce_add_ps(x); }

/* Σ of FC_VF_W vectors at once: lane j of the result = hsum of the vector in
 * slot FC_VF_SLOT(j) of a (a fixed tree: 256-bit halves, 128-bit lanes, then
 * pairs and singles within lanes). */
#define FC_VF_SLOT(j) (4 * ((j) % 4) + (j) / 4)
FC_SI fc_vf fc_vf_hreduce(const fc_vf *a) {
    __m512 v[8], w[4], z[2];
    for (int i = 0; i < 8; ++i)
        v[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xEE));
    for (int i = 0; i < 4; ++i)
        w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xDD));
    for (int i = 0; i < 2; ++i)
        z[i] = _mm512_add_ps(_mm512_shuffle_ps(w[2 * i], w[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(w[2 * i], w[2 * i + 1], 0xEE));
    return _mm512_add_ps(_mm512_shuffle_ps(z[0], z[1], 0x88), _mm512_shuffle_ps(z[0], z[1], 0xDD));
}

/* dst[c·ldd + k] = src[k·lds + c] for a FC_VF_W × FC_VF_W block (any alignment). */
FC_SI void fc_vf_transpose(const float *src, int64_t lds, float *dst, int64_t ldd) {
    __m512 r[16], t[16];
    for (int k = 0; k < 16; ++k) r[k] = _mm512_loadu_ps(src + k * lds);
    for (int k = 0; k < 8; ++k) {
        t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
    /* r[4g + c], 128-bit lane L: column 4L + c of rows 4g..4g+3. */
    for (int g = 0; g < 4; ++g) {
        r[4 * g] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int c = 0; c < 4; ++c) {
        const __m512 x0 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88), x1 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xdd);
        const __m512 y0 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88),
                     y1 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xdd);
        _mm512_storeu_ps(dst + c * ldd, _mm512_shuffle_f32x4(x0, y0, 0x88));
        _mm512_storeu_ps(dst + (4 + c) * ldd, _mm512_shuffle_f32x4(x1, y1, 0x88));
        _mm512_storeu_ps(dst + (8 + c) * ldd, _mm512_shuffle_f32x4(x0, y0, 0xdd));
        _mm512_storeu_ps(dst + (12 + c) * ldd, _mm512_shuffle_f32x4(x1, y1, 0xdd));
    }
}

/* --------------------------------------------- f16 / bf16 / f32 elements */
/* One element of a FLASHC_F32/F16/BF16 tensor as fp32, and back (nearest-even). */
FC_SI float fc_ld1_f32(const void *src, int64_t o, int dtype) {
    return dtype == FLASHC_F32   ? ((const float *)src)[o]
           : dtype == FLASHC_F16 ? fc_f16_to_f32(((const uint16_t *)src)[o])
                                 : fc_bf16_to_f32(((const uint16_t *)src)[o]);
}
FC_SI void fc_st1_f32(void *dst, int64_t o, int dtype, float x) {
    if (dtype == FLASHC_F32) ((float *)dst)[o] = x;
    else if (dtype == FLASHC_F16) ((uint16_t *)dst)[o] = fc_f32_to_f16(x);
    else ((uint16_t *)dst)[o] = fc_f32_to_bf16(x);
}

/* Lanes k < n of FC_VF_W consecutive f16 / bf16 values as fp32 (exact; the others 0). */
FC_SI fc_vf fc_vf_load_f16_tail(const uint16_t *p, int64_t n) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(fc_vm_tail(n), p));
}
FC_SI fc_vf fc_vf_load_bf16_tail(const uint16_t *p, int64_t n) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(fc_vm_tail(n), p)), 16));
}
FC_SI fc_vf fc_vf_load_f16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
FC_SI fc_vf fc_vf_load_bf16(const uint16_t *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
/* As fc_f32_to_bf16 lane-wise: nearest-even; NaN keeps its top bits and gets the quiet bit. */
FC_SI __m256i fc_vf_pack_bf16(fc_vf x) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rnd = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd)), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    const __m512i qn = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rnd, nan, qn));
}
FC_SI __m256i fc_vf_pack_f16(fc_vf x) { return _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
FC_SI void fc_vf_store_f16(uint16_t *p, fc_vf v) { _mm256_storeu_si256((__m256i *)p, fc_vf_pack_f16(v)); }
FC_SI void fc_vf_store_bf16(uint16_t *p, fc_vf v) { _mm256_storeu_si256((__m256i *)p, fc_vf_pack_bf16(v)); }

/* Lanes k < n of FC_VF_W consecutive elements of a FLASHC_F32/F16/BF16 array
 * as fp32 (the others 0; reads nothing past element n − 1), and back. */
FC_SI fc_vf fc_vf_load_as_tail(const void *p, int dtype, int64_t n) {
    return dtype == FLASHC_F32   ? _mm512_maskz_loadu_ps(fc_vm_tail(n), p)
           : dtype == FLASHC_F16 ? fc_vf_load_f16_tail((const uint16_t *)p, n)
                                 : fc_vf_load_bf16_tail((const uint16_t *)p, n);
}
FC_SI void fc_vf_store_as_tail(void *p, int dtype, int64_t n, fc_vf x) {
    const fc_vm mk = fc_vm_tail(n);
    if (dtype == FLASHC_F32) _mm512_mask_storeu_ps(p, mk, x);
    else if (dtype == FLASHC_F16) _mm256_mask_storeu_epi16(p, mk, fc_vf_pack_f16(x));
    else _mm256_mask_storeu_epi16(p, mk, fc_vf_pack_bf16(x));
}
/* fc_vf_store_as through non-temporal stores (p aligned to the store's width,
 * FC_VF_W · element size bytes), for outputs too large to be read back from
 * cache; fc_stream_fence() orders them before the thread's later stores
 * (call it before the thread leaves its parallel region). */
FC_SI void fc_vf_stream_as(void *p, int dtype, fc_vf x) {
    if (dtype == FLASHC_F32) _mm512_stream_ps((float *)p, x);
    else if (dtype == FLASHC_F16) _mm256_stream_si256((__m256i *)p, fc_vf_pack_f16(x));
    else _mm256_stream_si256((__m256i *)p, fc_vf_pack_bf16(x));
}
FC_SI void fc_stream_fence(void) { _mm_sfence(); }
FC_SI fc_vf fc_vf_load_as(const void *p, int dtype) {
    return dtype == FLASHC_F32   ? _mm512_loadu_ps(p)
           : dtype == FLASHC_F16 ? fc_vf_load_f16((const uint16_t *)p)
                                 : fc_vf_load_bf16((const uint16_t *)p);
}
FC_SI void fc_vf_store_as(void *p, int dtype, fc_vf x) {
    if (dtype == FLASHC_F32) _mm512_storeu_ps(p, x);
    else if (dtype == FLASHC_F16) fc_vf_store_f16((uint16_t *)p, x);
    else fc_vf_store_bf16((uint16_t *)p, x);
}

/* dst[0..D) = mul · src[d·stride] as fp32 (src points at element 0 of the row). */
static inline void fc_cvt_row(float *dst, const void *src, int64_t stride, int dtype, int64_t D, float mul) {
    if (stride != 1) {
        for (int64_t d = 0; d < D; ++d) dst[d] = mul * fc_ld1_f32(src, d * stride, dtype);
        return;
    }
    const size_t esz = dtype == FLASHC_F32 ? 4 : 2;
    for (int64_t d = 0; d < D; d += 16)
        _mm512_mask_storeu_ps(dst + d, fc_vm_tail(D - d),
                              _mm512_mul_ps(fc_vf_load_as_tail((const char *)src + d * esz, dtype, D - d),
                                            _mm512_set1_ps(mul)));
}

/* dst[d·stride] = mul · src[d] rounded to dtype (nearest-even), d < D. */
static inline void fc_store_row(void *dst, int64_t stride, int dtype, const float *src, int64_t D, float mul) {
    if (stride != 1) {
        for (int64_t d = 0; d < D; ++d) fc_st1_f32(dst, d * stride, dtype, mul * src[d]);
        return;
    }
    const size_t esz = dtype == FLASHC_F32 ? 4 : 2;
    for (int64_t d = 0; d < D; d += 16)
        fc_vf_store_as_tail((char *)dst + d * esz, dtype, D - d,
                            _mm512_mul_ps(_mm512_maskz_loadu_ps(fc_vm_tail(D - d), src + d), _mm512_set1_ps(mul)));
}

/* ------------------------------------------------------------------- f64 */
/* fc_vd: FC_VD_W f64 lanes, what the F64 weighted sum needs. */
#define FC_VD_W 8
typedef __m512d fc_vd;
FC_SI fc_vd fc_vd_zero(void) { return _mm512_setzero_pd(); }
FC_SI fc_vd fc_vd_set1(double x) { return _mm512_set1_pd(x); }
FC_SI fc_vd fc_vd_load(const double *p) { return _mm512_loadu_pd(p); }
FC_SI void fc_vd_store(double *p, fc_vd x) { _mm512_storeu_pd(p, x); }
FC_SI fc_vd fc_vd_add(fc_vd a, fc_vd b) { return _mm512_add_pd(a, b); }
FC_SI fc_vd fc_vd_mul(fc_vd a, fc_vd b) { return _mm512_mul_pd(a, b); }
FC_SI fc_vd fc_vd_fma(fc_vd a, fc_vd b, fc_vd c) { return _mm512_fmadd_pd(a, b, c); } /* a·b + c */
/* Lanes k < n of p (the others 0); reads nothing past p[n − 1]. */
FC_SI fc_vd fc_vd_load_tail(const double *p, int64_t n) {
    const __mmask8 m = n >= FC_VD_W ? (__mmask8)0xff : n <= 0 ? (__mmask8)0 : (__mmask8)((1u << n) - 1u);
    return _mm512_maskz_loadu_pd(m, p);
}
/* Non-temporal store, p 64-byte aligned (see fc_vf_stream_as). */
FC_SI void fc_vd_stream(double *p, fc_vd x) { _mm512_stream_pd(p, x); }
/* Horizontal sum, a fixed order: 256-bit halves, 128-bit halves, then the pair. */
FC_SI double fc_vd_hsum(fc_vd x) {
    const __m256d s = _mm256_add_pd(_mm512_castpd512_pd256(x), _mm512_extractf64x4_pd(x, 1));
    const __m128d t = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    return _mm_cvtsd_f64(_mm_add_sd(t, _mm_unpackhi_pd(t, t)));
}

#endif /* FLASHC_CPU_SIMD_AVX512_H */
