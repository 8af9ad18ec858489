/*
 * simd_avx2.h — the AVX2 (+FMA, F16C) vector vocabulary of the CPU backend:
 * one fp32 vector type and the operations the kernels are written in
 * (arithmetic, exp2/exp/tanh, horizontal reductions, lane masks, the
 * visibility test of attn_mask.h on lanes, f16/bf16 rows with conversion).
 * simd_avx512.h defines the same names for AVX-512, so that a body written
 * once over them (attn_fwd_body.h, attn_fwd_decode_body.h, simd_score.h)
 * compiles for either. Include from a file built with -mavx2 -mfma -mf16c
 * only (*_avx2.c); everything is static inline, so each ISA file gets its
 * own copy compiled with its own flags.
 *
 *   fc_vf  FC_VF_W fp32 lanes        fc_vi  FC_VF_W int32 lanes
 *   fc_vm  a lane mask (here all-ones/all-zero fp32 lanes; __mmask16 on AVX-512)
 *   fc_vd  FC_VD_W f64 lanes (the few operations the F64 weighted sum needs)
 */
#ifndef FLASHC_CPU_SIMD_AVX2_H
#define FLASHC_CPU_SIMD_AVX2_H

#include "flashc_internal.h"

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define FC_SIMD_AVX2 1
#define FC_VF_W 8
#ifndef FC_SI
#define FC_SI static inline __attribute__((always_inline))
#endif

typedef __m256 fc_vf;
typedef __m256i fc_vi;
typedef __m256 fc_vm;

/* ------------------------------------------------------------ arithmetic */
FC_SI fc_vf fc_vf_zero(void) { return _mm256_setzero_ps(); }
FC_SI fc_vf fc_vf_set1(float x) { return _mm256_set1_ps(x); }
FC_SI fc_vf fc_vf_load(const float *p) { return _mm256_loadu_ps(p); }
FC_SI fc_vf fc_vf_loada(const float *p) { return _mm256_load_ps(p); } /* 32-byte aligned */
FC_SI void fc_vf_store(float *p, fc_vf x) { _mm256_storeu_ps(p, x); }
FC_SI void fc_vf_storea(float *p, fc_vf x) { _mm256_store_ps(p, x); }
FC_SI fc_vf fc_vf_bcast(const float *p) { return _mm256_broadcast_ss(p); }
FC_SI fc_vf fc_vf_add(fc_vf a, fc_vf b) { return _mm256_add_ps(a, b); }
FC_SI fc_vf fc_vf_sub(fc_vf a, fc_vf b) { return _mm256_sub_ps(a, b); }
FC_SI fc_vf fc_vf_mul(fc_vf a, fc_vf b) { return _mm256_mul_ps(a, b); }
FC_SI fc_vf fc_vf_div(fc_vf a, fc_vf b) { return _mm256_div_ps(a, b); }
FC_SI fc_vf fc_vf_fma(fc_vf a, fc_vf b, fc_vf c) { return _mm256_fmadd_ps(a, b, c); }   /* a·b + c */
FC_SI fc_vf fc_vf_fnma(fc_vf a, fc_vf b, fc_vf c) { return _mm256_fnmadd_ps(a, b, c); } /* c − a·b */
FC_SI fc_vf fc_vf_fms(fc_vf a, fc_vf b, fc_vf c) { return _mm256_fmsub_ps(a, b, c); }   /* a·b − c */
/* max/min: when a lane of either operand is NaN the lane of b is returned. */
FC_SI fc_vf fc_vf_max(fc_vf a, fc_vf b) { return _mm256_max_ps(a, b); }
FC_SI fc_vf fc_vf_min(fc_vf a, fc_vf b) { return _mm256_min_ps(a, b); }
FC_SI fc_vf fc_vf_abs(fc_vf a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
FC_SI fc_vf fc_vf_xorsign(fc_vf a, fc_vf b) { return _mm256_xor_ps(a, _mm256_and_ps(_mm256_set1_ps(-0.0f), b)); } /* a, negated where b's sign bit is set */
/* Lane k = k (0 ≤ k < FC_VF_W). */
FC_SI fc_vf fc_vf_iota(void) { return _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7); }

FC_SI fc_vi fc_vi_set1(int32_t x) { return _mm256_set1_epi32(x); }
FC_SI fc_vi fc_vi_load(const int32_t *p) { return _mm256_loadu_si256((const __m256i *)p); }
FC_SI fc_vi fc_vi_add(fc_vi a, fc_vi b) { return _mm256_add_epi32(a, b); }
FC_SI fc_vi fc_vi_iota(void) { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }

/* ------------------------------------------------------------ lane masks */
FC_SI fc_vm fc_vm_and(fc_vm a, fc_vm b) { return _mm256_and_ps(a, b); }
FC_SI fc_vm fc_vm_or(fc_vm a, fc_vm b) { return _mm256_or_ps(a, b); }
FC_SI fc_vm fc_vm_andnot(fc_vm a, fc_vm b) { return _mm256_andnot_ps(a, b); } /* ¬a ∧ b */
FC_SI int fc_vm_any(fc_vm m) { return _mm256_movemask_ps(m) != 0; }
FC_SI int fc_vm_all(fc_vm m) { return _mm256_movemask_ps(m) == 0xff; }
/* Lanes k < n (n may be ≤ 0 or ≥ FC_VF_W). */
FC_SI fc_vm fc_vm_tail(int64_t n) {
    const int32_t c = n < 0 ? 0 : n > FC_VF_W ? FC_VF_W : (int32_t)n;
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(c), fc_vi_iota()));
}
FC_SI fc_vm fc_vf_lt(fc_vf a, fc_vf b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
FC_SI fc_vm fc_vf_le(fc_vf a, fc_vf b) { return _mm256_cmp_ps(a, b, _CMP_LE_OQ); }
FC_SI fc_vm fc_vf_eq(fc_vf a, fc_vf b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
FC_SI fc_vm fc_vf_ne(fc_vf a, fc_vf b) { return _mm256_cmp_ps(a, b, _CMP_NEQ_UQ); } /* NaN: true */
/* Lanes holding ±inf or NaN. */
FC_SI fc_vm fc_vf_nonfinite(fc_vf x) { return _mm256_cmp_ps(fc_vf_abs(x), _mm256_set1_ps(INFINITY), _CMP_NLT_UQ); }
/* m ? a : b, lane-wise. */
FC_SI fc_vf fc_vf_select(fc_vm m, fc_vf a, fc_vf b) { return _mm256_blendv_ps(b, a, m); }
/* m ? a : 0. */
FC_SI fc_vf fc_vf_keep(fc_vm m, fc_vf a) { return _mm256_and_ps(m, a); }
/* FC_KEY_VISIBLE (attn_mask.h) lane-wise: j < se || (lo ≤ j && j < hi). */
FC_SI fc_vm fc_vm_key_visible(fc_vi se, fc_vi lo, fc_vi hi, fc_vi j) {
    return _mm256_castsi256_ps(_mm256_or_si256(
        _mm256_cmpgt_epi32(se, j), _mm256_andnot_si256(_mm256_cmpgt_epi32(lo, j), _mm256_cmpgt_epi32(hi, j))));
}
/* Lanes k < n of p (the others 0); reads nothing past p[n − 1]. */
FC_SI fc_vf fc_vf_load_tail(const float *p, int64_t n) {
    return _mm256_maskload_ps(p, _mm256_castps_si256(fc_vm_tail(n)));
}
FC_SI void fc_vf_store_tail(float *p, int64_t n, fc_vf x) {
    _mm256_maskstore_ps(p, _mm256_castps_si256(fc_vm_tail(n)), x);
}

/* ------------------------------------------------------------------ math */
/* P(f) with 2^f = 1 + f·P(f): the degree-7 Taylor polynomial of 2^f
 * without its constant term, for |f| ≤ 1/2 (relative error < 6e-9). */
FC_SI fc_vf fc_vf_exp2_taylor(fc_vf f) {
    __m256 p = _mm256_set1_ps(1.5252733804059838e-05f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.5403530393381606e-04f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.3333558146428441e-03f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.6181291076284770e-03f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.5504108664821576e-02f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.4022650695910071e-01f));
    return _mm256_fmadd_ps(p, f, _mm256_set1_ps(FC_LN2_F));
}
/* 2^n for integral n in [−127, 127], built in the exponent field (n = −127
 * gives the bit pattern of +0). */
FC_SI fc_vf fc_vf_pow2i(fc_vf n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}

/* 2^x for x ≤ 127 (−inf → 0; NaN stays NaN, so that a score a row sees as
 * NaN makes its results NaN, flashc.h): x = n + f, |f| ≤ 1/2, 2^f = 1 + f·P(f),
 * 2^n by fc_vf_pow2i, where any x < −126.5 gives n = −127: +0. */
FC_SI fc_vf fc_vf_exp2(fc_vf x) {
    x = _mm256_max_ps(_mm256_set1_ps(-127.0f), x); /* NaN: the second operand */
    const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 f = _mm256_sub_ps(x, n);
    return _mm256_mul_ps(_mm256_fmadd_ps(fc_vf_exp2_taylor(f), f, _mm256_set1_ps(1.0f)), fc_vf_pow2i(n));
}

/* e^x for x ≤ 88 (larger saturates at e^88; −inf and NaN → 0, x < −87.9 →
 * 0): n = round(x·log2 e), r = x − n·ln 2 in two parts (Cephes expf),
 * e^r by a degree-6 polynomial (relative error ~1e-7). */
FC_SI fc_vf fc_vf_exp(fc_vf x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-88.5f));
    x = _mm256_min_ps(x, _mm256_set1_ps(88.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(FC_LOG2E_F)),
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
    /* n ≥ −128 here; n = −128 and −127 give exponent fields ≤ 0: clamp to
     * the pattern of +0 (−127 + 127 = 0). */
    const __m256i ni = _mm256_max_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(-127));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(ni, _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* 2^y = s·(1 + p) for y ≤ 0, as the pair (s, p) = (2^n, 2^f − 1 = f·P(f)):
 * p keeps its relative accuracy near 0; s = +0 below −127. NaN stays NaN
 * (in p). */
FC_SI void fc_vf_exp2_parts(fc_vf y, fc_vf *s, fc_vf *p) {
    y = _mm256_max_ps(_mm256_set1_ps(-127.0f), y); /* NaN: the second operand */
    const __m256 n = _mm256_round_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 f = _mm256_sub_ps(y, n);
    *p = _mm256_mul_ps(fc_vf_exp2_taylor(f), f);
    *s = fc_vf_pow2i(n);
}

/* 2^y − 1 for y ≤ 0 (→ −1 below −127; NaN stays NaN), relative error ~1e-7
 * also near 0: s·p + (s − 1), which cancels nothing (n = 0: s − 1 = 0). */
FC_SI fc_vf fc_vf_exp2m1(fc_vf y) {
    fc_vf s, p;
    fc_vf_exp2_parts(y, &s, &p);
    return _mm256_fmadd_ps(s, p, _mm256_sub_ps(s, _mm256_set1_ps(1.0f)));
}

#include "simd_tanh.h" /* fc_vf_tanh, over the vocabulary above */

/* Horizontal max / sum, a fixed order: 128-bit halves, then pairs, then singles. */
FC_SI float fc_vf_hmax(fc_vf x) {
    __m128 y = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    y = _mm_max_ps(y, _mm_movehl_ps(y, y));
    y = _mm_max_ss(y, _mm_shuffle_ps(y, y, 1));
    return _mm_cvtss_f32(y);
}
FC_SI float fc_vf_hsum(fc_vf x) {
    __m128 y = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    y = _mm_add_ps(y, _mm_movehl_ps(y, y));
    y = _mm_add_ss(y, _mm_shuffle_ps(y, y, 1));
    return _mm_cvtss_f32(y);
}

/* Σ of FC_VF_W vectors at once: lane j of the result = hsum of the vector in
 * slot FC_VF_SLOT(j) of a (a fixed tree: 128-bit halves, then pairs and
 * singles within lanes). */
#define FC_VF_SLOT(j) (2 * ((j) % 4) + (j) / 4)
FC_SI fc_vf fc_vf_hreduce(const fc_vf *a) {
    __m256 v[4], z[2];
    for (int i = 0; i < 4; ++i)
        v[i] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * i], a[2 * i + 1], 0x20),
                             _mm256_permute2f128_ps(a[2 * i], a[2 * i + 1], 0x31));
    for (int i = 0; i < 2; ++i)
        z[i] = _mm256_add_ps(_mm256_shuffle_ps(v[2 * i], v[2 * i + 1], 0x44),
                             _mm256_shuffle_ps(v[2 * i], v[2 * i + 1], 0xEE));
    return _mm256_add_ps(_mm256_shuffle_ps(z[0], z[1], 0x88), _mm256_shuffle_ps(z[0], z[1], 0xDD));
}

/* dst[c·ldd + k] = src[k·lds + c] for a FC_VF_W × FC_VF_W block (any alignment). */
FC_SI void fc_vf_transpose(const float *src, int64_t lds, float *dst, int64_t ldd) {
    __m256 r[8], t[8];
    for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(src + k * lds);
    for (int k = 0; k < 4; ++k) {
        t[2 * k] = _mm256_unpacklo_ps(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm256_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
    /* r[4g + c], 128-bit lane L: column 4L + c of rows 4g..4g+3. */
    for (int g = 0; g < 2; ++g) {
        r[4 * g] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * g + 1] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[4 * g + 2] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * g + 3] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int c = 0; c < 4; ++c) {
        _mm256_storeu_ps(dst + c * ldd, _mm256_permute2f128_ps(r[c], r[4 + c], 0x20));
        _mm256_storeu_ps(dst + (4 + c) * ldd, _mm256_permute2f128_ps(r[c], r[4 + c], 0x31));
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

/* FC_VF_W consecutive f16 / bf16 values as fp32 (exact). */
FC_SI fc_vf fc_vf_load_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
FC_SI fc_vf fc_vf_load_bf16(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
/* As fc_f32_to_bf16 lane-wise: nearest-even; NaN keeps its top bits and gets the quiet bit. */
FC_SI __m128i fc_vf_pack_bf16(fc_vf v) {
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
FC_SI __m128i fc_vf_pack_f16(fc_vf v) { return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
FC_SI void fc_vf_store_f16(uint16_t *p, fc_vf v) { _mm_storeu_si128((__m128i *)p, fc_vf_pack_f16(v)); }
FC_SI void fc_vf_store_bf16(uint16_t *p, fc_vf v) { _mm_storeu_si128((__m128i *)p, fc_vf_pack_bf16(v)); }

/* FC_VF_W consecutive elements of a FLASHC_F32/F16/BF16 array, as fp32 / from fp32. */
FC_SI fc_vf fc_vf_load_as(const void *p, int dtype) {
    return dtype == FLASHC_F32   ? _mm256_loadu_ps((const float *)p)
           : dtype == FLASHC_F16 ? fc_vf_load_f16((const uint16_t *)p)
                                 : fc_vf_load_bf16((const uint16_t *)p);
}
FC_SI void fc_vf_store_as(void *p, int dtype, fc_vf x) {
    if (dtype == FLASHC_F32) _mm256_storeu_ps((float *)p, x);
    else if (dtype == FLASHC_F16) fc_vf_store_f16((uint16_t *)p, x);
    else fc_vf_store_bf16((uint16_t *)p, x);
}

/* Lanes k < n of FC_VF_W consecutive elements as fp32 (the others 0; reads
 * nothing past element n − 1), and back (writes nothing past element n − 1). */
FC_SI fc_vf fc_vf_load_f16_tail(const uint16_t *p, int64_t n) {
    uint16_t buf[8] = {0};
    memcpy(buf, p, (size_t)(n < 0 ? 0 : n > 8 ? 8 : n) * sizeof(uint16_t));
    return fc_vf_load_f16(buf);
}
FC_SI fc_vf fc_vf_load_bf16_tail(const uint16_t *p, int64_t n) {
    uint16_t buf[8] = {0};
    memcpy(buf, p, (size_t)(n < 0 ? 0 : n > 8 ? 8 : n) * sizeof(uint16_t));
    return fc_vf_load_bf16(buf);
}
FC_SI fc_vf fc_vf_load_as_tail(const void *p, int dtype, int64_t n) {
    return dtype == FLASHC_F32   ? fc_vf_load_tail((const float *)p, n)
           : dtype == FLASHC_F16 ? fc_vf_load_f16_tail((const uint16_t *)p, n)
                                 : fc_vf_load_bf16_tail((const uint16_t *)p, n);
}
FC_SI void fc_vf_store_as_tail(void *p, int dtype, int64_t n, fc_vf x) {
    if (dtype == FLASHC_F32) {
        fc_vf_store_tail((float *)p, n, x);
        return;
    }
    uint16_t buf[8];
    fc_vf_store_as(buf, dtype, x);
    memcpy(p, buf, (size_t)(n < 0 ? 0 : n > 8 ? 8 : n) * sizeof(uint16_t));
}

/* fc_vf_store_as through non-temporal stores (p aligned to the store's width,
 * FC_VF_W · element size bytes), for outputs too large to be read back from
 * cache; fc_stream_fence() orders them before the thread's later stores
 * (call it before the thread leaves its parallel region). */
FC_SI void fc_vf_stream_as(void *p, int dtype, fc_vf x) {
    if (dtype == FLASHC_F32) _mm256_stream_ps((float *)p, x);
    else if (dtype == FLASHC_F16) _mm_stream_si128((__m128i *)p, fc_vf_pack_f16(x));
    else _mm_stream_si128((__m128i *)p, fc_vf_pack_bf16(x));
}
FC_SI void fc_stream_fence(void) { _mm_sfence(); }

/* dst[0..D) = mul · src[d·stride] as fp32 (src points at element 0 of the row). */
static inline void fc_cvt_row(float *dst, const void *src, int64_t stride, int dtype, int64_t D, float mul) {
    int64_t d = 0;
    if (stride == 1) {
        const size_t esz = dtype == FLASHC_F32 ? 4 : 2;
        for (; d + 8 <= D; d += 8)
            _mm256_storeu_ps(dst + d, _mm256_mul_ps(fc_vf_load_as((const char *)src + d * esz, dtype),
                                                    _mm256_set1_ps(mul)));
    }
    for (; d < D; ++d) dst[d] = mul * fc_ld1_f32(src, d * stride, dtype);
}

/* dst[d·stride] = mul · src[d] rounded to dtype (nearest-even), d < D. */
static inline void fc_store_row(void *dst, int64_t stride, int dtype, const float *src, int64_t D, float mul) {
    int64_t d = 0;
    if (stride == 1) {
        const size_t esz = dtype == FLASHC_F32 ? 4 : 2;
        for (; d + 8 <= D; d += 8)
            fc_vf_store_as((char *)dst + d * esz, dtype, _mm256_mul_ps(_mm256_loadu_ps(src + d), _mm256_set1_ps(mul)));
    }
    for (; d < D; ++d) fc_st1_f32(dst, d * stride, dtype, mul * src[d]);
}

/* ------------------------------------------------------------------- f64 */
/* fc_vd: FC_VD_W f64 lanes, what the F64 weighted sum needs. */
#define FC_VD_W 4
typedef __m256d fc_vd;
FC_SI fc_vd fc_vd_zero(void) { return _mm256_setzero_pd(); }
FC_SI fc_vd fc_vd_set1(double x) { return _mm256_set1_pd(x); }
FC_SI fc_vd fc_vd_load(const double *p) { return _mm256_loadu_pd(p); }
FC_SI void fc_vd_store(double *p, fc_vd x) { _mm256_storeu_pd(p, x); }
FC_SI fc_vd fc_vd_add(fc_vd a, fc_vd b) { return _mm256_add_pd(a, b); }
FC_SI fc_vd fc_vd_mul(fc_vd a, fc_vd b) { return _mm256_mul_pd(a, b); }
FC_SI fc_vd fc_vd_fma(fc_vd a, fc_vd b, fc_vd c) { return _mm256_fmadd_pd(a, b, c); } /* a·b + c */
/* Lanes k < n of p (the others 0); reads nothing past p[n − 1]. */
FC_SI fc_vd fc_vd_load_tail(const double *p, int64_t n) {
    const int64_t c = n < 0 ? 0 : n > FC_VD_W ? FC_VD_W : n;
    return _mm256_maskload_pd(p, _mm256_cmpgt_epi64(_mm256_set1_epi64x(c), _mm256_setr_epi64x(0, 1, 2, 3)));
}
/* Non-temporal store, p 32-byte aligned (see fc_vf_stream_as). */
FC_SI void fc_vd_stream(double *p, fc_vd x) { _mm256_stream_pd(p, x); }
/* Horizontal sum, a fixed order: 128-bit halves, then the pair. */
FC_SI double fc_vd_hsum(fc_vd x) {
    const __m128d t = _mm_add_pd(_mm256_castpd256_pd128(x), _mm256_extractf128_pd(x, 1));
    return _mm_cvtsd_f64(_mm_add_sd(t, _mm_unpackhi_pd(t, t)));
}

#endif /* FLASHC_CPU_SIMD_AVX2_H */
