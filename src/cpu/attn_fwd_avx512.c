/* AVX-512 attention forward (F32/F16/BF16, fp32 arithmetic): the kernels
 * for attn_fwd_body.h. Built with -mavx512f/bw/vl/dq -mfma -mf16c only.
 *
 * Register blocking (32 zmm): S = Q·Kᵀ is 8 keys × 32 query rows (16
 * accumulators, 2 query loads + 8 broadcasts per d); O += P·V is 8 head dims
 * × 32 query rows (16 accumulators, 2 P loads + 8 broadcasts per key). One
 * zmm FMA per cycle (Zen 4 runs them as two 256-bit halves) at 4-cycle
 * latency needs ≥ 4 chains; 16 leaves the load ports slack. Blocks of 128
 * rows × tiles of 128 keys measured best (benchmarks/NOTES.md): at D = 256
 * the per-thread scratch is ~600 KB, inside the 1 MB L2.
 *
 * BF16 on a CPU with AVX512_BF16 goes to attn_fwd_avx512bf16.c instead
 * (bf16 dot products), except on the decode path. The helpers shared with
 * that file are in attn_fwd_avx512_kern.h. */
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

#include "attn_fwd_avx512_kern.h"

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
    if (a->dtype == FLASHC_BF16 && fc_cpu_has_avx512bf16()) return fc_attn_fwd_avx512bf16(a);
    return FN(run)(a);
}
