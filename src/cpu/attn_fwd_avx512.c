/* AVX-512 attention forward (F32/F16/BF16, fp32 arithmetic): the kernels
 * for attn_fwd_body.h. Built with -mavx512f/bw/vl/dq -mfma -mf16c only.
 *
 * Register blocking (32 zmm): S = Q·Kᵀ is 8 keys × 32 query rows (16
 * accumulators, 2 query loads + 8 broadcasts per d); O += P·V is 8 head dims
 * × 32 query rows (16 accumulators, 2 P loads + 8 broadcasts per key). One
 * zmm FMA per cycle (Zen 4 runs them as two 256-bit halves) at 4-cycle
 * latency needs ≥ 4 chains; 16 leaves the load ports slack. Blocks of 128
 * rows × tiles of 128 keys measured best (benchmarks/NOTES.md): at D = 256
 * the per-thread scratch is ~600 KB, inside the 1 MB L2. */
#include "attn_fwd.h"

#include <immintrin.h>
#include <omp.h>
#include <string.h>

#define FN(x) fc_avx512_##x
#define FC_BR 128
#define FC_BC 128
#define FC_VW 16
#define FC_DALIGN 16
#define FC_RG 32      /* query rows per register block of both kernels */
#define FC_PV_DBLOCK 8 /* head dims per PV register block */

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
static void FN(cvt_row)(float *dst, const void *src, int64_t stride, int dtype, int64_t D, float mul) {
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
static void FN(store_row)(void *dst, int64_t stride, int dtype, const float *src, int64_t D, float mul) {
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

// qt is (D, BR), kp is (nb, ldk), st is (BC, BR): st[j][r] = <qt[:, r], kp[j, :]>, computed for the
// key groups that meet [jlo[g], jhi[g]) of row group g = r / FC_RG (others left as they were).
static void FN(qk)(const float *qt, const float *kp, int64_t ldk, int nb, int64_t D, const int32_t *jlo,
                   const int32_t *jhi, float *st) {
    for (int j = 0; j < nb; j += 8) {
        /* The last group repeats key nb−1 into st rows ≥ nb (never read). */
        const float *k[8];
        for (int t = 0; t < 8; ++t) k[t] = kp + (j + t < nb ? j + t : nb - 1) * ldk;
        const float *k0 = k[0], *k1 = k[1], *k2 = k[2], *k3 = k[3];
        const float *k4 = k[4], *k5 = k[5], *k6 = k[6], *k7 = k[7];
        for (int rb = 0; rb < FC_BR; rb += FC_RG) {
            if (j >= jhi[rb / FC_RG] || j + 8 <= jlo[rb / FC_RG]) continue;
            __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
            __m512 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
            __m512 c60 = c00, c61 = c00, c70 = c00, c71 = c00;
            const float *q = qt + rb;
            for (int64_t d = 0; d < D; ++d, q += FC_BR) {
                const __m512 q0 = _mm512_load_ps(q), q1 = _mm512_load_ps(q + 16);
                __m512 b;
#define FC_QK_STEP(t)                        \
    b = _mm512_set1_ps(k##t[d]);             \
    c##t##0 = _mm512_fmadd_ps(q0, b, c##t##0); \
    c##t##1 = _mm512_fmadd_ps(q1, b, c##t##1);
                FC_QK_STEP(0) FC_QK_STEP(1) FC_QK_STEP(2) FC_QK_STEP(3)
                FC_QK_STEP(4) FC_QK_STEP(5) FC_QK_STEP(6) FC_QK_STEP(7)
#undef FC_QK_STEP
            }
            float *s = st + (int64_t)j * FC_BR + rb;
#define FC_QK_STORE(t)                                   \
    _mm512_store_ps(s + (t) * FC_BR, c##t##0);           \
    _mm512_store_ps(s + (t) * FC_BR + 16, c##t##1);
            FC_QK_STORE(0) FC_QK_STORE(1) FC_QK_STORE(2) FC_QK_STORE(3)
            FC_QK_STORE(4) FC_QK_STORE(5) FC_QK_STORE(6) FC_QK_STORE(7)
#undef FC_QK_STORE
        }
    }
}

// st is (BC, BR); row r sees tile key j iff j < sel[r] or lol[r] ≤ j < hil[r].
static void FN(mask)(float *st, int nb, const int32_t *sel, const int32_t *lol, const int32_t *hil) {
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

// st is (BC, BR) scores in log2 units; m, l, alpha are (BR).
static void FN(softmax)(float *st, int nb, float *m, float *l, float *alpha) {
    enum { NV = FC_BR / 16 };
    __m512 mx[NV], ms[NV], sum[NV];
    for (int v = 0; v < NV; ++v) mx[v] = _mm512_load_ps(m + 16 * v);
    for (int j = 0; j < nb; ++j)
        for (int v = 0; v < NV; ++v) mx[v] = _mm512_max_ps(mx[v], _mm512_load_ps(st + j * FC_BR + 16 * v));
    for (int v = 0; v < NV; ++v) {
        /* A row that has seen nothing keeps −inf; exponentiate against 0
         * so that 2^(−inf) = 0 rather than NaN. */
        const __mmask16 dead = _mm512_cmp_ps_mask(mx[v], _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ);
        ms[v] = _mm512_mask_mov_ps(mx[v], dead, _mm512_setzero_ps());
        sum[v] = _mm512_setzero_ps();
    }
    for (int j = 0; j < nb; ++j)
        for (int v = 0; v < NV; ++v) {
            float *p = st + j * FC_BR + 16 * v;
            const __m512 e = fc_exp2_ps(_mm512_sub_ps(_mm512_load_ps(p), ms[v]));
            _mm512_store_ps(p, e);
            sum[v] = _mm512_add_ps(sum[v], e);
        }
    for (int v = 0; v < NV; ++v) {
        const __m512 al = fc_exp2_ps(_mm512_sub_ps(_mm512_load_ps(m + 16 * v), ms[v]));
        _mm512_store_ps(alpha + 16 * v, al);
        _mm512_store_ps(l + 16 * v, _mm512_fmadd_ps(_mm512_load_ps(l + 16 * v), al, sum[v]));
        _mm512_store_ps(m + 16 * v, mx[v]);
    }
}

// ot is (dp, BR), pt is (BC, BR), vp is (nb, ldv):
// ot[d][r] = alpha[r]·ot[d][r] + Σ_{jlo[g] ≤ j < jhi[g]} vp[j][d]·pt[j][r], g = r / FC_RG,
// for d < D rounded up to 8 (columns past D are zero in vp and never stored).
static void FN(pv)(float *ot, int64_t D, const float *pt, const float *vp, int64_t ldv, const int32_t *jlo,
                   const int32_t *jhi, const float *alpha) {
    for (int64_t d = 0; d < D; d += 8) {
        for (int rb = 0; rb < FC_BR; rb += FC_RG) {
            const __m512 a0 = _mm512_load_ps(alpha + rb), a1 = _mm512_load_ps(alpha + rb + 16);
            float *o = ot + d * FC_BR + rb;
#define FC_PV_LOAD(t)                                                            \
    __m512 c##t##0 = _mm512_mul_ps(_mm512_load_ps(o + (t) * FC_BR), a0);         \
    __m512 c##t##1 = _mm512_mul_ps(_mm512_load_ps(o + (t) * FC_BR + 16), a1);
            FC_PV_LOAD(0) FC_PV_LOAD(1) FC_PV_LOAD(2) FC_PV_LOAD(3)
            FC_PV_LOAD(4) FC_PV_LOAD(5) FC_PV_LOAD(6) FC_PV_LOAD(7)
#undef FC_PV_LOAD
            const int j0 = jlo[rb / FC_RG], j1 = jhi[rb / FC_RG];
            const float *p = pt + (int64_t)j0 * FC_BR + rb, *v = vp + j0 * ldv + d;
            for (int j = j0; j < j1; ++j, p += FC_BR, v += ldv) {
                const __m512 p0 = _mm512_load_ps(p), p1 = _mm512_load_ps(p + 16);
                __m512 b;
#define FC_PV_STEP(t)                          \
    b = _mm512_set1_ps(v[t]);                  \
    c##t##0 = _mm512_fmadd_ps(p0, b, c##t##0); \
    c##t##1 = _mm512_fmadd_ps(p1, b, c##t##1);
                FC_PV_STEP(0) FC_PV_STEP(1) FC_PV_STEP(2) FC_PV_STEP(3)
                FC_PV_STEP(4) FC_PV_STEP(5) FC_PV_STEP(6) FC_PV_STEP(7)
#undef FC_PV_STEP
            }
#define FC_PV_STORE(t)                                  \
    _mm512_store_ps(o + (t) * FC_BR, c##t##0);          \
    _mm512_store_ps(o + (t) * FC_BR + 16, c##t##1);
            FC_PV_STORE(0) FC_PV_STORE(1) FC_PV_STORE(2) FC_PV_STORE(3)
            FC_PV_STORE(4) FC_PV_STORE(5) FC_PV_STORE(6) FC_PV_STORE(7)
#undef FC_PV_STORE
        }
    }
}

#include "attn_fwd_body.h"

/* ------------------------------------------------ decode path (keys on lanes) */
typedef __m512 fc_v;
#define FC_VLOAD(p) _mm512_loadu_ps(p)
#define FC_VSTORE(p, x) _mm512_storeu_ps((p), (x))
#define FC_VSET1(x) _mm512_set1_ps(x)
#define FC_VFMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define FC_VMUL(a, b) _mm512_mul_ps((a), (b))
#define FC_VADD(a, b) _mm512_add_ps((a), (b))
#define FC_VSUB(a, b) _mm512_sub_ps((a), (b))
#define FC_VZERO() _mm512_setzero_ps()
#define FC_VHMAX(x) _mm512_reduce_max_ps(x)
#define FC_VHSUM(x) _mm512_reduce_add_ps(x)

/* s with −inf where key lane j is not visible: visible iff j < sel or lol ≤ j < hil. */
static inline fc_v FN(dec_mask)(fc_v s, int32_t sel, int32_t lol, int32_t hil) {
    const __m512i j = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __mmask16 vis = _mm512_cmpgt_epi32_mask(_mm512_set1_epi32(sel), j) |
                          (_mm512_cmple_epi32_mask(_mm512_set1_epi32(lol), j) &
                           _mm512_cmpgt_epi32_mask(_mm512_set1_epi32(hil), j));
    return _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), vis, s);
}

#define FC_DEC_ROWBLK 4
/* Σ of 16 vectors: out lane j = Σ of slot 4·(j % 4) + j / 4 (a fixed tree:
 * 256-bit halves, 128-bit lanes, then pairs and singles within lanes). */
#define FC_DEC_SLOT(j) (4 * ((j) % 4) + (j) / 4)
static inline fc_v FN(dec_hreduce)(const fc_v *a) {
    fc_v v[8], w[4], z[2];
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
#include "attn_fwd_decode_body.h"

/* Rows per (b, kv head) up to which the decode path is faster (measured,
 * benchmarks/NOTES.md "CPU decode"). */
#define FC_DEC_ROWS_DEFAULT 16

flashc_status fc_attn_fwd_avx512_f32(const fc_attn *a) {
    if (a->Sq * (a->Hq / a->Hkv) <= fc_decode_rows_max(FC_DEC_ROWS_DEFAULT)) return FN(dec_run)(a);
    return FN(run)(a);
}
