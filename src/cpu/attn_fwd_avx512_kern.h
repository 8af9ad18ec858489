/* AVX-512 helpers of the forward, shared by attn_fwd_avx512.c (fp32
 * arithmetic) and attn_fwd_avx512bf16.c (vdpbf16ps for BF16). Included after
 * FN and FC_BR are defined; every function is static, so each ISA file gets
 * its own copy, compiled with its own flags. No include guard. */

/* 2^x for x ≤ 0 (and −inf → 0): x = n + f, |f| ≤ 1/2, 2^f by its degree-7
 * Taylor polynomial (relative error < 6e-9), 2^n applied by vscalefps,
 * which flushes to exactly 0 below the denormal range. */
static inline __m512 fc_exp2_ps(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-150.0f));
    const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(x, n);
    __m512 p = _mm512_set1_ps(1.5252733804059838e-05f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.5403530393381606e-04f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428441e-03f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291076284770e-03f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504108664821576e-02f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022650695910071e-01f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718055994531e-01f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

static inline __mmask16 fc_tailmask(int64_t n) { return (__mmask16)((1u << n) - 1u); }

/* dst[0..D) = mul · src[d·stride] as fp32 (src points at element 0 of the row). */
static inline void FN(cvt_row)(float *dst, const void *src, int64_t stride, int dtype, int64_t D, float mul) {
    if (stride != 1) {
        for (int64_t d = 0; d < D; ++d) {
            const int64_t o = d * stride;
            dst[d] = mul * (dtype == FLASHC_F32    ? ((const float *)src)[o]
                            : dtype == FLASHC_F16 ? fc_f16_to_f32(((const uint16_t *)src)[o])
                                                  : fc_bf16_to_f32(((const uint16_t *)src)[o]));
        }
        return;
    }
    for (int64_t d = 0; d < D; d += 16) {
        const __mmask16 mk = D - d >= 16 ? (__mmask16)0xffff : fc_tailmask(D - d);
        __m512 x;
        if (dtype == FLASHC_F32) {
            x = _mm512_maskz_loadu_ps(mk, (const float *)src + d);
        } else {
            const __m256i h = _mm256_maskz_loadu_epi16(mk, (const uint16_t *)src + d);
            x = dtype == FLASHC_F16 ? _mm512_cvtph_ps(h)
                                    : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        }
        _mm512_mask_storeu_ps(dst + d, mk, _mm512_mul_ps(x, _mm512_set1_ps(mul)));
    }
}

/* dst[d·stride] = mul · src[d] rounded to dtype (nearest-even), d < D. */
static inline void FN(store_row)(void *dst, int64_t stride, int dtype, const float *src, int64_t D, float mul) {
    if (stride != 1) {
        for (int64_t d = 0; d < D; ++d) {
            const int64_t o = d * stride;
            const float x = mul * src[d];
            if (dtype == FLASHC_F32) ((float *)dst)[o] = x;
            else if (dtype == FLASHC_F16) ((uint16_t *)dst)[o] = fc_f32_to_f16(x);
            else ((uint16_t *)dst)[o] = fc_f32_to_bf16(x);
        }
        return;
    }
    for (int64_t d = 0; d < D; d += 16) {
        const __mmask16 mk = D - d >= 16 ? (__mmask16)0xffff : fc_tailmask(D - d);
        const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, src + d), _mm512_set1_ps(mul));
        if (dtype == FLASHC_F32) {
            _mm512_mask_storeu_ps((float *)dst + d, mk, x);
        } else if (dtype == FLASHC_F16) {
            const __m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            _mm256_mask_storeu_epi16((uint16_t *)dst + d, mk, h);
        } else { /* bf16: as fc_f32_to_bf16, 16 lanes at once */
            const __m512i u = _mm512_castps_si512(x);
            const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
            const __m512i rnd = _mm512_srli_epi32(
                _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd)), 16);
            const __mmask16 nan = _mm512_cmpgt_epu32_mask(
                _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
            const __m512i qn = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
            const __m256i h = _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rnd, nan, qn));
            _mm256_mask_storeu_epi16((uint16_t *)dst + d, mk, h);
        }
    }
}

/* dst[c·ldd + k] = src[k·lds + c] for a 16 × 16 block (any alignment). */
static inline void FN(transpose)(const float *src, int64_t lds, float *dst, int64_t ldd) {
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
        const __m512 y0 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88), y1 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xdd);
        _mm512_storeu_ps(dst + c * ldd, _mm512_shuffle_f32x4(x0, y0, 0x88));
        _mm512_storeu_ps(dst + (4 + c) * ldd, _mm512_shuffle_f32x4(x1, y1, 0x88));
        _mm512_storeu_ps(dst + (8 + c) * ldd, _mm512_shuffle_f32x4(x0, y0, 0xdd));
        _mm512_storeu_ps(dst + (12 + c) * ldd, _mm512_shuffle_f32x4(x1, y1, 0xdd));
    }
}

// st is (BC, BR); row r sees tile key j iff j < sel[r] or lol[r] ≤ j < hil[r].
static inline void FN(mask)(float *st, int nb, const int32_t *sel, const int32_t *lol, const int32_t *hil) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int rb = 0; rb < FC_BR; rb += 16) {
        const __m512i s = _mm512_loadu_si512(sel + rb), lo = _mm512_loadu_si512(lol + rb),
                      hi = _mm512_loadu_si512(hil + rb);
        for (int j = 0; j < nb; ++j) {
            const __m512i jv = _mm512_set1_epi32(j);
            const __mmask16 vis = _mm512_cmpgt_epi32_mask(s, jv) |
                                  (_mm512_cmple_epi32_mask(lo, jv) & _mm512_cmpgt_epi32_mask(hi, jv));
            float *p = st + (int64_t)j * FC_BR + rb;
            _mm512_store_ps(p, _mm512_mask_mov_ps(ninf, vis, _mm512_load_ps(p)));
        }
    }
}

