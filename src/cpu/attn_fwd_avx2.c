/* AVX2 + FMA attention forward (F32/F16/BF16, fp32 arithmetic): the kernels
 * for attn_fwd_body.h. Built with -mavx2 -mfma -mf16c only.
 *
 * Register blocking (16 ymm): S = Q·Kᵀ is 4 keys × 24 query rows and
 * O += P·V is 4 head dims × 24 query rows: 12 accumulators, 3 row loads and
 * one broadcast register. Two ymm FMAs per cycle at 4-cycle latency need ≥ 8
 * chains. A block is 96 rows (four 24-row groups), a tile 128 keys: measured
 * best on the 2-core Zen 4 dev machine (benchmarks/NOTES.md). */
#include "attn_fwd.h"

#include <immintrin.h>
#include <omp.h>
#include <string.h>

#define FN(x) fc_avx2_##x
#define FC_BR 96
#define FC_BC 128
#define FC_VW 8
#define FC_DALIGN 8
#define FC_RG 24      /* query rows per register block of both kernels */
#define FC_PV_DBLOCK 4 /* head dims per PV register block */

/* 2^x for x ≤ 0 (and −inf → 0): x = n + f, |f| ≤ 1/2, 2^f by its degree-7
 * Taylor polynomial; 2^n built in the exponent field, where n = −127 (any
 * x < −126.5) gives the bit pattern of +0. */
static inline __m256 fc_exp2_ps(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-127.0f));
    const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 f = _mm256_sub_ps(x, n);
    __m256 p = _mm256_set1_ps(1.5252733804059838e-05f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.5403530393381606e-04f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.3333558146428441e-03f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.6181291076284770e-03f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.5504108664821576e-02f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.4022650695910071e-01f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.9314718055994531e-01f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

static inline float fc_ld1(const void *src, int64_t o, int dtype) {
    return dtype == FLASHC_F32   ? ((const float *)src)[o]
           : dtype == FLASHC_F16 ? fc_f16_to_f32(((const uint16_t *)src)[o])
                                 : fc_bf16_to_f32(((const uint16_t *)src)[o]);
}

/* dst[0..D) = mul · src[d·stride] as fp32 (src points at element 0 of the row). */
static void FN(cvt_row)(float *dst, const void *src, int64_t stride, int dtype, int64_t D, float mul) {
    int64_t d = 0;
    if (stride == 1) {
        for (; d + 8 <= D; d += 8) {
            __m256 x;
            if (dtype == FLASHC_F32) {
                x = _mm256_loadu_ps((const float *)src + d);
            } else {
                const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)src + d));
                x = dtype == FLASHC_F16 ? _mm256_cvtph_ps(h)
                                        : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
            }
            _mm256_storeu_ps(dst + d, _mm256_mul_ps(x, _mm256_set1_ps(mul)));
        }
    }
    for (; d < D; ++d) dst[d] = mul * fc_ld1(src, d * stride, dtype);
}

/* dst[d·stride] = mul · src[d] rounded to dtype (nearest-even), d < D. */
static void FN(store_row)(void *dst, int64_t stride, int dtype, const float *src, int64_t D, float mul) {
    int64_t d = 0;
    if (stride == 1 && dtype != FLASHC_BF16) {
        for (; d + 8 <= D; d += 8) {
            const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(src + d), _mm256_set1_ps(mul));
            if (dtype == FLASHC_F32)
                _mm256_storeu_ps((float *)dst + d, x);
            else
                _mm_storeu_si128((__m128i *)((uint16_t *)dst + d),
                                 _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        }
    }
    for (; d < D; ++d) {
        const int64_t o = d * stride;
        const float x = mul * src[d];
        if (dtype == FLASHC_F32) ((float *)dst)[o] = x;
        else if (dtype == FLASHC_F16) ((uint16_t *)dst)[o] = fc_f32_to_f16(x);
        else ((uint16_t *)dst)[o] = fc_f32_to_bf16(x);
    }
}

/* dst[c·ldd + k] = src[k·lds + c] for an 8 × 8 block (any alignment). */
static inline void FN(transpose)(const float *src, int64_t lds, float *dst, int64_t ldd) {
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

// qt is (D, BR), kp is (nb, ldk), st is (BC, BR): st[j][r] = <qt[:, r], kp[j, :]>, computed for the
// key groups that meet [jlo[g], jhi[g]) of row group g = r / FC_RG (others left as they were).
static void FN(qk)(const float *qt, const float *kp, int64_t ldk, int nb, int64_t D, const int32_t *jlo,
                   const int32_t *jhi, float *st) {
    for (int j = 0; j < nb; j += 4) {
        /* The last group repeats key nb−1 into st rows ≥ nb (never read). */
        const float *k0 = kp + (int64_t)j * ldk;
        const float *k1 = kp + (j + 1 < nb ? j + 1 : nb - 1) * ldk;
        const float *k2 = kp + (j + 2 < nb ? j + 2 : nb - 1) * ldk;
        const float *k3 = kp + (j + 3 < nb ? j + 3 : nb - 1) * ldk;
        for (int rb = 0; rb < FC_BR; rb += FC_RG) {
            if (j >= jhi[rb / FC_RG] || j + 4 <= jlo[rb / FC_RG]) continue;
            __m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c10 = c00, c11 = c00, c12 = c00;
            __m256 c20 = c00, c21 = c00, c22 = c00, c30 = c00, c31 = c00, c32 = c00;
            const float *q = qt + rb;
            for (int64_t d = 0; d < D; ++d, q += FC_BR) {
                const __m256 q0 = _mm256_load_ps(q), q1 = _mm256_load_ps(q + 8), q2 = _mm256_load_ps(q + 16);
                __m256 b;
#define FC_QK_STEP(t)                             \
    b = _mm256_broadcast_ss(k##t + d);            \
    c##t##0 = _mm256_fmadd_ps(q0, b, c##t##0);    \
    c##t##1 = _mm256_fmadd_ps(q1, b, c##t##1);    \
    c##t##2 = _mm256_fmadd_ps(q2, b, c##t##2);
                FC_QK_STEP(0) FC_QK_STEP(1) FC_QK_STEP(2) FC_QK_STEP(3)
#undef FC_QK_STEP
            }
            float *s = st + (int64_t)j * FC_BR + rb;
#define FC_QK_STORE(t)                                \
    _mm256_store_ps(s + (t) * FC_BR, c##t##0);        \
    _mm256_store_ps(s + (t) * FC_BR + 8, c##t##1);    \
    _mm256_store_ps(s + (t) * FC_BR + 16, c##t##2);
            FC_QK_STORE(0) FC_QK_STORE(1) FC_QK_STORE(2) FC_QK_STORE(3)
#undef FC_QK_STORE
        }
    }
}

// st is (BC, BR); row r sees tile key j iff j < sel[r] or lol[r] ≤ j < hil[r].
static void FN(mask)(float *st, int nb, const int32_t *sel, const int32_t *lol, const int32_t *hil) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    for (int rb = 0; rb < FC_BR; rb += 8) {
        const __m256i s = _mm256_loadu_si256((const __m256i *)(sel + rb));
        const __m256i lo = _mm256_loadu_si256((const __m256i *)(lol + rb));
        const __m256i hi = _mm256_loadu_si256((const __m256i *)(hil + rb));
        for (int j = 0; j < nb; ++j) {
            const __m256i jv = _mm256_set1_epi32(j), j1 = _mm256_set1_epi32(j + 1);
            const __m256i vis = _mm256_or_si256(
                _mm256_cmpgt_epi32(s, jv),
                _mm256_and_si256(_mm256_cmpgt_epi32(j1, lo), _mm256_cmpgt_epi32(hi, jv)));
            float *p = st + (int64_t)j * FC_BR + rb;
            _mm256_store_ps(p, _mm256_blendv_ps(ninf, _mm256_load_ps(p), _mm256_castsi256_ps(vis)));
        }
    }
}

// st is (BC, BR) scores in log2 units; m, l, alpha are (BR).
static void FN(softmax)(float *st, int nb, float *m, float *l, float *alpha) {
    enum { NV = FC_BR / 8 };
    for (int v = 0; v < NV; ++v) {
        __m256 mx = _mm256_load_ps(m + 8 * v);
        for (int j = 0; j < nb; ++j) mx = _mm256_max_ps(mx, _mm256_load_ps(st + j * FC_BR + 8 * v));
        /* A row that has seen nothing keeps −inf; exponentiate against 0
         * so that 2^(−inf) = 0 rather than NaN. */
        const __m256 dead = _mm256_cmp_ps(mx, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ);
        const __m256 ms = _mm256_andnot_ps(dead, mx);
        __m256 s0 = _mm256_setzero_ps(), s1 = s0;
        int j = 0;
        for (; j + 2 <= nb; j += 2) {
            float *p = st + j * FC_BR + 8 * v;
            const __m256 e0 = fc_exp2_ps(_mm256_sub_ps(_mm256_load_ps(p), ms));
            const __m256 e1 = fc_exp2_ps(_mm256_sub_ps(_mm256_load_ps(p + FC_BR), ms));
            _mm256_store_ps(p, e0);
            _mm256_store_ps(p + FC_BR, e1);
            s0 = _mm256_add_ps(s0, e0);
            s1 = _mm256_add_ps(s1, e1);
        }
        if (j < nb) {
            float *p = st + j * FC_BR + 8 * v;
            const __m256 e0 = fc_exp2_ps(_mm256_sub_ps(_mm256_load_ps(p), ms));
            _mm256_store_ps(p, e0);
            s0 = _mm256_add_ps(s0, e0);
        }
        const __m256 al = fc_exp2_ps(_mm256_sub_ps(_mm256_load_ps(m + 8 * v), ms));
        _mm256_store_ps(alpha + 8 * v, al);
        _mm256_store_ps(l + 8 * v, _mm256_fmadd_ps(_mm256_load_ps(l + 8 * v), al, _mm256_add_ps(s0, s1)));
        _mm256_store_ps(m + 8 * v, mx);
    }
}

// ot is (dp, BR), pt is (BC, BR), vp is (nb, ldv):
// ot[d][r] = alpha[r]·ot[d][r] + Σ_{jlo[g] ≤ j < jhi[g]} vp[j][d]·pt[j][r], g = r / FC_RG,
// for d < D rounded up to 4 (columns past D are zero in vp and never stored).
static void FN(pv)(float *ot, int64_t D, const float *pt, const float *vp, int64_t ldv, const int32_t *jlo,
                   const int32_t *jhi, const float *alpha) {
    for (int64_t d = 0; d < D; d += 4) {
        for (int rb = 0; rb < FC_BR; rb += FC_RG) {
            const __m256 a0 = _mm256_load_ps(alpha + rb), a1 = _mm256_load_ps(alpha + rb + 8),
                         a2 = _mm256_load_ps(alpha + rb + 16);
            float *o = ot + d * FC_BR + rb;
#define FC_PV_LOAD(t)                                                               \
    __m256 c##t##0 = _mm256_mul_ps(_mm256_load_ps(o + (t) * FC_BR), a0);            \
    __m256 c##t##1 = _mm256_mul_ps(_mm256_load_ps(o + (t) * FC_BR + 8), a1);        \
    __m256 c##t##2 = _mm256_mul_ps(_mm256_load_ps(o + (t) * FC_BR + 16), a2);
            FC_PV_LOAD(0) FC_PV_LOAD(1) FC_PV_LOAD(2) FC_PV_LOAD(3)
#undef FC_PV_LOAD
            const int j0 = jlo[rb / FC_RG], j1 = jhi[rb / FC_RG];
            const float *p = pt + (int64_t)j0 * FC_BR + rb, *v = vp + j0 * ldv + d;
            for (int j = j0; j < j1; ++j, p += FC_BR, v += ldv) {
                const __m256 p0 = _mm256_load_ps(p), p1 = _mm256_load_ps(p + 8), p2 = _mm256_load_ps(p + 16);
                __m256 b;
#define FC_PV_STEP(t)                             \
    b = _mm256_broadcast_ss(v + (t));             \
    c##t##0 = _mm256_fmadd_ps(p0, b, c##t##0);    \
    c##t##1 = _mm256_fmadd_ps(p1, b, c##t##1);    \
    c##t##2 = _mm256_fmadd_ps(p2, b, c##t##2);
                FC_PV_STEP(0) FC_PV_STEP(1) FC_PV_STEP(2) FC_PV_STEP(3)
#undef FC_PV_STEP
            }
#define FC_PV_STORE(t)                                 \
    _mm256_store_ps(o + (t) * FC_BR, c##t##0);         \
    _mm256_store_ps(o + (t) * FC_BR + 8, c##t##1);     \
    _mm256_store_ps(o + (t) * FC_BR + 16, c##t##2);
            FC_PV_STORE(0) FC_PV_STORE(1) FC_PV_STORE(2) FC_PV_STORE(3)
#undef FC_PV_STORE
        }
    }
}

#include "attn_fwd_body.h"

/* ------------------------------------------------ decode path (keys on lanes) */
typedef __m256 fc_v;
#define FC_VLOAD(p) _mm256_loadu_ps(p)
#define FC_VSTORE(p, x) _mm256_storeu_ps((p), (x))
#define FC_VSET1(x) _mm256_set1_ps(x)
#define FC_VFMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define FC_VMUL(a, b) _mm256_mul_ps((a), (b))
#define FC_VADD(a, b) _mm256_add_ps((a), (b))
#define FC_VSUB(a, b) _mm256_sub_ps((a), (b))
#define FC_VZERO() _mm256_setzero_ps()

static inline float fc_hmax8(__m256 x) {
    __m128 y = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    y = _mm_max_ps(y, _mm_movehl_ps(y, y));
    y = _mm_max_ss(y, _mm_shuffle_ps(y, y, 1));
    return _mm_cvtss_f32(y);
}
static inline float fc_hsum8(__m256 x) {
    __m128 y = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    y = _mm_add_ps(y, _mm_movehl_ps(y, y));
    y = _mm_add_ss(y, _mm_shuffle_ps(y, y, 1));
    return _mm_cvtss_f32(y);
}
#define FC_VHMAX(x) fc_hmax8(x)
#define FC_VHSUM(x) fc_hsum8(x)

/* s with −inf where key lane j is not visible: visible iff j < sel or lol ≤ j < hil. */
static inline fc_v FN(dec_mask)(fc_v s, int32_t sel, int32_t lol, int32_t hil) {
    const __m256i j = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i vis = _mm256_or_si256(
        _mm256_cmpgt_epi32(_mm256_set1_epi32(sel), j),
        _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(lol), j),
                            _mm256_cmpgt_epi32(_mm256_set1_epi32(hil), j)));
    return _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), s, _mm256_castsi256_ps(vis));
}

#define FC_DEC_ROWBLK 2
/* Σ of 8 vectors: out lane j = Σ of slot 2·(j % 4) + j / 4 (a fixed tree:
 * 128-bit halves, then pairs and singles within lanes). */
#define FC_DEC_SLOT(j) (2 * ((j) % 4) + (j) / 4)
static inline fc_v FN(dec_hreduce)(const fc_v *a) {
    fc_v v[4], z[2];
    for (int i = 0; i < 4; ++i)
        v[i] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * i], a[2 * i + 1], 0x20),
                             _mm256_permute2f128_ps(a[2 * i], a[2 * i + 1], 0x31));
    for (int i = 0; i < 2; ++i)
        z[i] = _mm256_add_ps(_mm256_shuffle_ps(v[2 * i], v[2 * i + 1], 0x44),
                             _mm256_shuffle_ps(v[2 * i], v[2 * i + 1], 0xEE));
    return _mm256_add_ps(_mm256_shuffle_ps(z[0], z[1], 0x88), _mm256_shuffle_ps(z[0], z[1], 0xDD));
}
#include "attn_fwd_decode_body.h"

/* Rows per (b, kv head) up to which the decode path is faster (measured,
 * benchmarks/NOTES.md "CPU decode"). */
#define FC_DEC_ROWS_DEFAULT 8

flashc_status fc_attn_fwd_avx2_f32(const fc_attn *a) {
    if (a->Sq * (a->Hq / a->Hkv) <= fc_decode_rows_max(FC_DEC_ROWS_DEFAULT)) return FN(dec_run)(a);
    return FN(run)(a);
}
