/* AVX512-BF16 attention forward for BF16 inputs: S = Q·Kᵀ and O += P·V on
 * vdpbf16ps (per fp32 lane, two bf16 products added to the accumulator;
 * bf16 × bf16 is exact in fp32), the online softmax in fp32 as in
 * attn_fwd_body.h, P rounded to bf16 (nearest-even) before P·V as
 * FlashAttention and the CUDA backend do. Built with the AVX-512 flags plus
 * -mavx512bf16; taken by the plan (plan.h) for BF16 when cpuid reports
 * AVX512_BF16 (src/cpu/isa.c) and the call is not decode-sized.
 *
 * Same blocking and layout as attn_fwd_body.h (lanes = query rows, blocks of
 * 128 rows, tiles of 128 keys, 8 × 32 register blocks), with the reduction
 * axis of each product packed in pairs, as vdpbf16ps wants:
 *   Qt (Dp/2, BR) u32   Qt[e][r] = (q[r][2e], q[r][2e+1]), q as given (the
 *                       score pipeline's qk_mul, scale·log2 e without a
 *                       softcap, is applied to S in fp32, so Q is not
 *                       rounded a second time; then the score step of
 *                       simd_score.h: softcap, ALiBi, mask)
 *   K rows as in memory (bf16, unit d-stride, even D): one broadcast 32-bit
 *                       load is the pair (k[j][2e], k[j][2e+1]); others are
 *                       copied into Kp (BC, Dp) bf16, zero-padded
 *   Pt (BC/2, BR) u32   Pt[i][r] = (p[r][2i], p[r][2i+1]), written by the
 *                       softmax; the pad key of an odd tile has p = 0
 *   Vp (BC/2, Dp) u32   Vp[i][d] = (v[2i][d], v[2i+1][d]), packed per tile
 *                       with two vpermt2w per 32 dims
 * Per pair step the kernels do 2 row loads + 8 broadcasts + 16 vdpbf16ps,
 * twice the multiply-adds per instruction of the fp32 kernels.
 *
 * AMX (FLASHC_HAVE_AMX, taken where the CPU and the OS have AMX-BF16, see
 * isa.c): the same block, softmax and layouts with both products on the
 * tile unit (TDPBF16PS: 16 × 16 fp32 += 16 × 32 bf16 · 32 × 16 bf16 as
 * pairs; fp32 accumulation, denormal inputs and outputs flushed). The
 * layouts above are already what it wants:
 *   S: C = Sᵀ (16 keys × 16 rows) += A · B with A = 16 K rows × 32 dims
 *      (bf16 as in memory, any row stride: read in place when D is a
 *      multiple of 32 and the 16 rows are evenly spaced, else from Kp) and
 *      B = 16 pairs of Qt × 16 rows; blocks of 32 keys × 32 rows (tiles 0-3
 *      C, 4-5 A, 6-7 B), stored into St, then × qk_mul.
 *   O: C = Oᵀ (16 dims × 16 rows, loaded from Ot after the α rescale) +=
 *      A · B with A = 16 rows of Vt (dp, BC) bf16 — V transposed per tile,
 *      one 16 × 16 transpose of the 32-bit key pairs of Vp per block — and
 *      B = 16 pairs of Pt × 16 rows; keys in steps of 32, the pairs past
 *      the tile's end zero in Pt and Vt.
 * Rows past the block's last row group (of 32) are neither computed nor
 * read. */
#include "attn_fwd.h"
#include "amx.h"
#include "simd_avx512.h"
#include "simd_score.h"

#include <omp.h>
#include <string.h>

#define FN(x) fc_avx512bf16_##x
#define FC_BR 128
#define FC_BC 128
#define FC_RG 32 /* query rows per register block of both kernels */
#define FC_KB 8  /* keys (QK) / head dims (PV) per register block */

/* fc_tile_row_bounds groups rows by FC_RG; the kernels' register blocks are FC_RG rows. */
_Static_assert(FC_RG % FC_VF_W == 0 && FC_BR % FC_RG == 0, "row blocking");
_Static_assert(FC_BR / FC_RG == 4, "the softmax's row-group cases (block_impl)");

static inline __m512bh fc_bh(__m512i x) { return (__m512bh)x; }

static inline int32_t fc_ld_pair(const uint16_t *p) {
    int32_t x;
    memcpy(&x, p, sizeof x);
    return x;
}

static inline __mmask32 fc_tailmask32(int64_t n) {
    return n >= 32 ? (__mmask32)0xffffffffu : n <= 0 ? (__mmask32)0 : (__mmask32)((1u << n) - 1u);
}

/* Head dims padded to a multiple of 32 bf16: Dp/2 pairs fill 16-lane blocks. */
static size_t FN(dpad)(int64_t D) { return (size_t)((D + 31) & ~(int64_t)31); }

static size_t FN(scratch_floats)(int64_t D) {
    const size_t dp = FN(dpad)(D);
    return dp * FC_BR / 2             /* Qt */
           + dp * FC_BR               /* Ot */
           + (size_t)FC_BC * FC_BR    /* St */
           + (size_t)FC_BC * FC_BR / 2 /* Pt */
           + (size_t)FC_BC * dp / 2   /* Kp */
           + (size_t)FC_BC * dp / 2   /* Vp */
           + 8 * FC_BR + FC_VF_W * dp + 2 * dp
           + (size_t)FC_BC * dp / 2;  /* Vt (AMX) */
}

/* A bf16 row: src itself when its d-stride is 1, else gathered into buf. */
static inline const uint16_t *FN(row)(const uint16_t *src, int64_t stride, int64_t D, uint16_t *buf) {
    if (stride == 1) return src;
    for (int64_t d = 0; d < D; ++d) buf[d] = src[d * stride];
    return buf;
}

/* dst[0..n) = src[0..D) then zeros; n a multiple of 32. Reads no element past D. */
static inline void FN(copy_row)(uint16_t *dst, const uint16_t *src, int64_t D, int64_t n) {
    for (int64_t d = 0; d < n; d += 32)
        _mm512_storeu_si512(dst + d, _mm512_maskz_loadu_epi16(fc_tailmask32(D - d), src + d));
}

// qt is (dh, BR) bf16 pairs, kr[j] (j < nb) points at key j's bf16 row (pairs read as one 32-bit
// load), st is (BC, BR): st[j][r] = mul · Σ_e <qt[e][r], kr[j][2e..2e+1]>, for the key groups that
// meet [jlo[g], jhi[g]) of row group g = r / FC_RG (others left as they were).
static void FN(qk)(const int32_t *qt, const uint16_t *const *kr, int nb, int64_t dh, const int32_t *jlo,
                   const int32_t *jhi, float *st, float mul) {
    enum { KB = FC_KB, RV = FC_RG / 16 };
    const __m512 vmul = _mm512_set1_ps(mul);
    for (int j = 0; j < nb; j += KB) {
        /* The last group repeats key nb−1 into st rows ≥ nb (never read). */
        const uint16_t *k[KB];
        for (int t = 0; t < KB; ++t) k[t] = kr[j + t < nb ? j + t : nb - 1];
        for (int rb = 0; rb < FC_BR; rb += FC_RG) {
            if (j >= jhi[rb / FC_RG] || j + KB <= jlo[rb / FC_RG]) continue;
            __m512 c[KB][RV];
#pragma GCC unroll 8
            for (int t = 0; t < KB; ++t)
#pragma GCC unroll 2
                for (int v = 0; v < RV; ++v) c[t][v] = _mm512_setzero_ps();
            const int32_t *q = qt + rb;
            for (int64_t e = 0; e < dh; ++e, q += FC_BR) {
                __m512bh qv[RV];
#pragma GCC unroll 2
                for (int v = 0; v < RV; ++v) qv[v] = fc_bh(_mm512_load_si512(q + 16 * v));
#pragma GCC unroll 8
                for (int t = 0; t < KB; ++t) {
                    const __m512bh b = fc_bh(_mm512_set1_epi32(fc_ld_pair(k[t] + 2 * e)));
#pragma GCC unroll 2
                    for (int v = 0; v < RV; ++v) c[t][v] = _mm512_dpbf16_ps(c[t][v], qv[v], b);
                }
            }
            float *s = st + (int64_t)j * FC_BR + rb;
#pragma GCC unroll 8
            for (int t = 0; t < KB; ++t)
#pragma GCC unroll 2
                for (int v = 0; v < RV; ++v) _mm512_store_ps(s + t * FC_BR + 16 * v, _mm512_mul_ps(c[t][v], vmul));
        }
    }
}

// st is (BC, BR) scores in log2 units; m, l, alpha are (BR); pt is (BC/2, BR) bf16 pairs.
// As the fp32 softmax (attn_fwd_body.h), but P = 2^(st − m_new) goes to pt rounded to bf16
// (ℓ sums the fp32 values, as FlashAttention does); key nb of an odd tile gets p = 0. Only the
// first NV vectors of 16 rows (the AMX path: the row groups it computes; others FC_BR / 16).
// cap > 0: st holds u = qk_mul·<q, k> of a full tile whose only score step is the softcap, run
// here (simd_score.h: fc_softmax_cap); cap = 0: st holds the scores. bounded: m holds the fixed
// running max of fc_score_max_bound_l2f: no row max, α = 1, the step (if here) in the exp pass.
static inline __attribute__((always_inline)) void FN(softmax)(float *st, int nb, float *m, float *l,
                                                              float *alpha, int32_t *pt, const int NV,
                                                              const float cap, const int bounded) {
    __m512 mx[FC_BR / 16], ms[FC_BR / 16], sum[FC_BR / 16];
    for (int v = 0; v < NV; ++v) mx[v] = _mm512_load_ps(m + 16 * v);
    const int fused = cap > 0.0f && bounded; /* tanh in the exp pass below */
    if (bounded) {
        /* mx = m: fixed */
    } else if (cap > 0.0f) {
        __m512 mt[FC_BR / 16];
        for (int v = 0; v < NV; ++v) mt[v] = _mm512_set1_ps(-INFINITY);
        for (int j = 0; j < nb; ++j)
            for (int v = 0; v < NV; ++v) mt[v] = fc_vf_cap_max(st + j * FC_BR + 16 * v, mt[v]);
        for (int v = 0; v < NV; ++v) mx[v] = _mm512_max_ps(mx[v], _mm512_mul_ps(mt[v], _mm512_set1_ps(cap)));
    } else {
        for (int j = 0; j < nb; ++j)
            for (int v = 0; v < NV; ++v) mx[v] = _mm512_max_ps(mx[v], _mm512_load_ps(st + j * FC_BR + 16 * v));
    }
    for (int v = 0; v < NV; ++v) {
        /* A row that has seen nothing keeps −inf; exponentiate against 0
         * so that 2^(−inf) = 0 rather than NaN. */
        const __mmask16 dead = _mm512_cmp_ps_mask(mx[v], _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ);
        ms[v] = _mm512_mask_mov_ps(mx[v], dead, _mm512_setzero_ps());
        sum[v] = _mm512_setzero_ps();
    }
    /* vcvtne2ps2bf16 puts the even key's 16 rows in the low half and the
     * odd key's in the high half; this interleaves them into row pairs. */
    const __m512i ilv = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                         23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512 vcap = _mm512_set1_ps(cap);
    for (int j = 0; j < nb; j += 2)
        for (int v = 0; v < NV; ++v) {
            const float *p = st + j * FC_BR + 16 * v;
            __m512 x0 = _mm512_load_ps(p), x1 = j + 1 < nb ? _mm512_load_ps(p + FC_BR) : _mm512_setzero_ps();
            if (fused) {
                x0 = fc_vf_tanh(x0);
                x1 = fc_vf_tanh(x1);
            }
            const __m512 e0 = fc_vf_exp2(fc_vf_softmax_arg(cap, x0, vcap, ms[v]));
            const __m512 e1 = j + 1 < nb ? fc_vf_exp2(fc_vf_softmax_arg(cap, x1, vcap, ms[v])) : _mm512_setzero_ps();
            sum[v] = _mm512_add_ps(_mm512_add_ps(sum[v], e0), e1);
            const __m512i h = (__m512i)_mm512_cvtne2ps_pbh(e1, e0);
            _mm512_store_si512(pt + (j / 2) * FC_BR + 16 * v, _mm512_permutexvar_epi16(ilv, h));
        }
    for (int v = 0; v < NV; ++v) {
        const __m512 al = fc_vf_exp2(_mm512_sub_ps(_mm512_load_ps(m + 16 * v), ms[v]));
        _mm512_store_ps(alpha + 16 * v, al);
        _mm512_store_ps(l + 16 * v, _mm512_fmadd_ps(_mm512_load_ps(l + 16 * v), al, sum[v]));
        _mm512_store_ps(m + 16 * v, mx[v]);
    }
}

// ot is (dp, BR), pt is (BC/2, BR) and vp is (BC/2, dp), both bf16 pairs along the keys:
// ot[d][r] = alpha[r]·ot[d][r] + Σ_{jlo[g]/2 ≤ i < ⌈jhi[g]/2⌉} <vp[i][d], pt[i][r]>, g = r / FC_RG,
// for d < D rounded up to 8 (columns past D are zero in vp and never stored).
static void FN(pv)(float *ot, int64_t D, int64_t dp, const int32_t *pt, const int32_t *vp, const int32_t *jlo,
                   const int32_t *jhi, const float *alpha) {
    enum { DB = FC_KB, RV = FC_RG / 16 };
    for (int64_t d = 0; d < D; d += DB) {
        for (int rb = 0; rb < FC_BR; rb += FC_RG) {
            __m512 al[RV], c[DB][RV];
#pragma GCC unroll 2
            for (int v = 0; v < RV; ++v) al[v] = _mm512_load_ps(alpha + rb + 16 * v);
            float *o = ot + d * FC_BR + rb;
#pragma GCC unroll 8
            for (int t = 0; t < DB; ++t)
#pragma GCC unroll 2
                for (int v = 0; v < RV; ++v) c[t][v] = _mm512_mul_ps(_mm512_load_ps(o + t * FC_BR + 16 * v), al[v]);
            const int i0 = jlo[rb / FC_RG] / 2, i1 = (jhi[rb / FC_RG] + 1) / 2;
            const int32_t *p = pt + (int64_t)i0 * FC_BR + rb, *vr = vp + i0 * dp + d;
            for (int i = i0; i < i1; ++i, p += FC_BR, vr += dp) {
                __m512bh pv[RV];
#pragma GCC unroll 2
                for (int u = 0; u < RV; ++u) pv[u] = fc_bh(_mm512_load_si512(p + 16 * u));
#pragma GCC unroll 8
                for (int t = 0; t < DB; ++t) {
                    const __m512bh b = fc_bh(_mm512_set1_epi32(vr[t]));
#pragma GCC unroll 2
                    for (int u = 0; u < RV; ++u) c[t][u] = _mm512_dpbf16_ps(c[t][u], pv[u], b);
                }
            }
#pragma GCC unroll 8
            for (int t = 0; t < DB; ++t)
#pragma GCC unroll 2
                for (int v = 0; v < RV; ++v) _mm512_store_ps(o + t * FC_BR + 16 * v, c[t][v]);
        }
    }
}

/* Do the packed V pairs vp (npair, dp) hold only finite bf16 values? (Pad
 * columns and the pad key are 0.) */
static int FN(vpairs_finite)(const int32_t *vp, int64_t npair, int64_t dp) {
    const __m512i expo = _mm512_set1_epi16(0x7f80);
    __mmask32 bad = 0;
    for (int64_t x = 0; x < npair * dp; x += 16)
        bad |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(_mm512_loadu_si512(vp + x), expo), expo);
    return bad == 0;
}

// FN(pv) for a partial tile whose V holds a non-finite value: a row's p is exactly 0 on the keys it
// does not see, and 0·inf would be NaN, so the V half of each pair is zeroed in the lanes whose p
// half is 0. Otherwise the same vdpbf16ps in the same order as FN(pv), so that a row's output does
// not change by a bit when values it cannot see turn non-finite. A rare path.
static void FN(pv_masked)(float *ot, int64_t D, int64_t dp, const int32_t *pt, const int32_t *vp,
                          const int32_t *jlo, const int32_t *jhi, const float *alpha) {
    for (int rb = 0; rb < FC_BR; rb += 16) {
        const int i0 = jlo[rb / FC_RG] / 2, i1 = (jhi[rb / FC_RG] + 1) / 2;
        const __m512 al = _mm512_load_ps(alpha + rb);
        for (int64_t d = 0; d < D; ++d) {
            float *o = ot + d * FC_BR + rb;
            __m512 c = _mm512_mul_ps(_mm512_load_ps(o), al);
            for (int i = i0; i < i1; ++i) {
                const __m512i p = _mm512_load_si512(pt + (int64_t)i * FC_BR + rb);
                const __m512i keep = _mm512_movm_epi16(_mm512_test_epi16_mask(p, p)); /* p half ≠ 0 (p ≥ +0) */
                const __m512i b = _mm512_and_si512(_mm512_set1_epi32(vp[i * dp + d]), keep);
                c = _mm512_dpbf16_ps(c, fc_bh(p), fc_bh(b));
            }
            _mm512_store_ps(o, c);
        }
    }
}

// vp[i][d] = (v0[d], v1[d]) for d < dp (0 past D); v1 NULL = a zero row (the pad key).
static inline void FN(pack_vpair)(int32_t *vp, const uint16_t *v0, const uint16_t *v1, int64_t D, int64_t dp) {
    const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                        39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    for (int64_t d = 0; d < dp; d += 32) {
        const __mmask32 mk = fc_tailmask32(D - d);
        const __m512i x = _mm512_maskz_loadu_epi16(mk, v0 + d);
        const __m512i y = v1 ? _mm512_maskz_loadu_epi16(mk, v1 + d) : _mm512_setzero_si512();
        _mm512_storeu_si512(vp + d, _mm512_permutex2var_epi16(x, lo, y));
        _mm512_storeu_si512(vp + d + 16, _mm512_permutex2var_epi16(x, hi, y));
    }
}

#if defined(FLASHC_HAVE_AMX)
/* ------------------------------------------------------------------ AMX */
// st (BC, BR) = mul · (K rows · Qt) for the blocks of 32 keys × 32 rows of the first nrg row groups
// that meet the group's [jlo, jhi) (others left as they were, as FN(qk)). ka[g], kst[g]: the first
// row and the row stride in bytes of key group g (16 keys, dp bf16 readable per row).
static void FN(qk_amx)(const int32_t *qt, const uint16_t *const *ka, const int64_t *kst, int nb, int64_t dp,
                       int nrg, const int32_t *jlo, const int32_t *jhi, float *st, float mul) {
    const __m512 vmul = _mm512_set1_ps(mul);
    for (int j = 0; j < nb; j += 32) {
        const int two = j + 16 < nb; /* the second group of 16 keys */
        const uint16_t *a0 = ka[j / 16], *a1 = two ? ka[j / 16 + 1] : a0;
        const int64_t s0 = kst[j / 16], s1 = two ? kst[j / 16 + 1] : s0;
        for (int rb = 0; rb < nrg * FC_RG; rb += FC_RG) {
            if (j >= jhi[rb / FC_RG] || j + 32 <= jlo[rb / FC_RG]) continue;
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            for (int64_t e = 0; e < dp; e += 32) {
                _tile_loadd(4, a0 + e, s0);
                _tile_loadd(6, qt + (e / 2) * FC_BR + rb, FC_BR * 4);
                _tile_loadd(7, qt + (e / 2) * FC_BR + rb + 16, FC_BR * 4);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                if (two) {
                    _tile_loadd(5, a1 + e, s1);
                    _tile_dpbf16ps(2, 5, 6);
                    _tile_dpbf16ps(3, 5, 7);
                }
            }
            float *o = st + (int64_t)j * FC_BR + rb;
            _tile_stored(0, o, FC_BR * 4);
            _tile_stored(1, o + 16, FC_BR * 4);
            if (two) {
                _tile_stored(2, o + 16 * FC_BR, FC_BR * 4);
                _tile_stored(3, o + 16 * FC_BR + 16, FC_BR * 4);
            }
            for (int t = 0; t < (two ? 32 : 16); ++t) {
                _mm512_store_ps(o + t * FC_BR, _mm512_mul_ps(_mm512_load_ps(o + t * FC_BR), vmul));
                _mm512_store_ps(o + t * FC_BR + 16, _mm512_mul_ps(_mm512_load_ps(o + t * FC_BR + 16), vmul));
            }
        }
    }
}

// ot (dp, BR): ot[d][r] = alpha[r]·ot[d][r] + Σ_{j < nk} vt[d][j]·p[r][j] for the first nrg row
// groups; vt (dp, BC) bf16, pt (BC/2, BR) pairs, both zero on the keys [nb, nk) (nk: a multiple of 32).
static void FN(pv_amx)(float *ot, int64_t dp, const int32_t *pt, const uint16_t *vt, int nk, int nrg,
                       const float *alpha) {
    const int nrow = nrg * FC_RG;
    for (int rb = 0; rb < nrow; rb += 16) {
        const __m512 al = _mm512_load_ps(alpha + rb);
        /* α = 1 on every row of the vector (no new maximum): ot·1 = ot, skip the pass. */
        if (_mm512_cmp_ps_mask(al, _mm512_set1_ps(1.0f), _CMP_NEQ_UQ) == 0) continue;
        for (int64_t d = 0; d < dp; ++d)
            _mm512_store_ps(ot + d * FC_BR + rb, _mm512_mul_ps(_mm512_load_ps(ot + d * FC_BR + rb), al));
    }
    for (int64_t d = 0; d < dp; d += 32)
        for (int rb = 0; rb < nrow; rb += FC_RG) {
            float *o = ot + d * FC_BR + rb;
            _tile_loadd(0, o, FC_BR * 4);
            _tile_loadd(1, o + 16, FC_BR * 4);
            _tile_loadd(2, o + 16 * FC_BR, FC_BR * 4);
            _tile_loadd(3, o + 16 * FC_BR + 16, FC_BR * 4);
            for (int j = 0; j < nk; j += 32) {
                _tile_loadd(4, vt + d * FC_BC + j, FC_BC * 2);
                _tile_loadd(5, vt + (d + 16) * FC_BC + j, FC_BC * 2);
                _tile_loadd(6, pt + (j / 2) * FC_BR + rb, FC_BR * 4);
                _tile_loadd(7, pt + (j / 2) * FC_BR + rb + 16, FC_BR * 4);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
            _tile_stored(0, o, FC_BR * 4);
            _tile_stored(1, o + 16, FC_BR * 4);
            _tile_stored(2, o + 16 * FC_BR, FC_BR * 4);
            _tile_stored(3, o + 16 * FC_BR + 16, FC_BR * 4);
        }
}

// After FN(pv_amx) on scrubbed V: ot[d][r] += p[r][j]·v[j][d] for every non-finite v[j][d] (j < nb,
// d < D) and every row r < nrow whose p[r][j] is not 0: what the unscrubbed product adds there
// (Inf or NaN: the result does not depend on the order). A rare path.
static void FN(pv_fixup)(float *ot, int64_t D, int64_t dp, const int32_t *pt, const int32_t *vp, int nb, int nrow) {
    for (int j = 0; j < nb; ++j) {
        const uint16_t *vj = (const uint16_t *)(vp + (int64_t)(j / 2) * dp) + (j & 1); /* v[j][d] at vj[2d] */
        int any = 0;
        for (int64_t d = 0; d < D && !any; ++d) any = (vj[2 * d] & 0x7f80) == 0x7f80;
        if (!any) continue;
        const uint16_t *pj = (const uint16_t *)(pt + (int64_t)(j / 2) * FC_BR) + (j & 1); /* p[r][j] at pj[2r] */
        for (int r = 0; r < nrow; ++r) {
            if ((pj[2 * r] & 0x7fff) == 0) continue;
            const float p = fc_bf16_to_f32(pj[2 * r]);
            for (int64_t d = 0; d < D; ++d)
                if ((vj[2 * d] & 0x7f80) == 0x7f80) ot[d * FC_BR + r] += p * fc_bf16_to_f32(vj[2 * d]);
        }
    }
}
#endif /* FLASHC_HAVE_AMX */

/* fc_fwd_finish_fn: rows r0 .. r0 + nr − 1, o (nr, ldo). */
static void FN(finish)(const fc_attn *a, int64_t b, int64_t hk, int64_t r0, int64_t nr, const float *o, int64_t ldo,
                       const float *m, const float *l) {
    fc_fwd_finish_rows(a, b, hk, r0, nr, o, ldo, m, l, fc_store_row);
}

#include "attn_fwd_store.h"

// q, o are (B, Sq, Hq, D) bf16; k, v are (B, Sk, Hkv, D) bf16; lse is (B, Hq, Sq).
// Computes rows [r0, r0 + FC_BR) ∩ [0, Sq·G) of kv head hk of batch b (rows as attn_fwd_body.h) over
// the key-list positions [p0, p1) of the block's keys: finished, or as a partial into part
// (fc_fwd_block_fn).
// amx: the products on the tile unit (the caller has loaded the tile configuration).
static inline void FN(block_impl)(const fc_attn *a, int64_t b, int64_t hk, int64_t r0, int64_t p0, int64_t p1,
                                  float *ws, float *part, const int amx) {
    const int64_t D = a->D, G = a->Hq / a->Hkv, R = a->Sq * G;
    const int64_t dp = (int64_t)FN(dpad)(D), dh = (D + 1) / 2;
    const int nr = (int)(R - r0 < FC_BR ? R - r0 : FC_BR);
    const int nrv = (nr + FC_VF_W - 1) / FC_VF_W * FC_VF_W; /* rows in whole vectors */
    int32_t *qt = (int32_t *)ws;                 /* (dp/2, BR) pairs */
    float *ot = ws + dp * FC_BR / 2;             /* (dp, BR) */
    float *st = ot + dp * FC_BR;                 /* (BC, BR) */
    int32_t *pt = (int32_t *)(st + FC_BC * FC_BR); /* (BC/2, BR) pairs */
    uint16_t *kp = (uint16_t *)(pt + FC_BC / 2 * FC_BR); /* (BC, dp) bf16 */
    int32_t *vp = (int32_t *)(kp + FC_BC * dp);  /* (BC/2, dp) pairs */
    float *m = (float *)(vp + FC_BC / 2 * dp);   /* (BR) running max, log2 units */
    float *l = m + FC_BR;                        /* (BR) running sum */
    float *alpha = l + FC_BR;                    /* (BR) rescale of this tile */
    float *slope = alpha + FC_BR;                /* (BR) log2e·ALiBi slope of the row's head */
    float *ioff = slope + FC_BR;                 /* (BR) i + Sk − Sq of the row (ALiBi distance) */
    int32_t *sel = (int32_t *)(ioff + FC_BR);    /* (BR) visible ranges relative */
    int32_t *lol = sel + FC_BR;                  /*   to the tile start: */
    int32_t *hil = lol + FC_BR;                  /*   FC_KEY_VISIBLE(sel, lol, hil, j) */
    float *tmp = (float *)(hil + FC_BR);         /* (VW, dp) rows being transposed */
    uint16_t *rbuf = (uint16_t *)(tmp + FC_VF_W * dp); /* (2, dp) gathered strided rows */
    int32_t *vt = (int32_t *)(tmp + FC_VF_W * dp + dp); /* (dp, BC/2) pairs = (dp, BC) bf16 (AMX) */
    (void)vt; /* unused where the AMX path is not built */
    const int nrg = (nr + FC_RG - 1) / FC_RG;           /* row groups holding a row (AMX) */

    /* Query positions ia..ia+np−1 of the block, their visible ranges, the
     * keys the block sees, the score variant (fc_fwd_rows_setup). */
    int64_t se[FC_BR], lo[FC_BR], hi[FC_BR];
    const fc_fwd_rows rw = fc_fwd_rows_setup(a, b, hk, r0, nr, FC_BR, se, lo, hi, slope, ioff);
    const int64_t ia = rw.ia;
    const int np = rw.np, mode = rw.mode;
    const fc_score_modf mod = rw.mod;
    /* mod.qk_mul is applied to S in fp32 (so Q is not rounded a second time). */

    const uint16_t *q = (const uint16_t *)a->q, *k = (const uint16_t *)a->k, *v = (const uint16_t *)a->v;
    /* Qt: 16 rows at a time are copied as bf16 into tmp (zero past D and for
     * rows past nr), then transposed as 32-bit pairs in 16 × 16 blocks. */
    for (int rg = 0; rg < FC_BR; rg += FC_VF_W) {
        for (int kk = 0; kk < FC_VF_W; ++kk) {
            const int r = rg + kk;
            uint16_t *row = (uint16_t *)(tmp + kk * dp);
            if (r < nr) {
                const int64_t i = (r0 + r) / G, h = hk * G + (r0 + r) % G;
                const uint16_t *src = q + b * a->sq[0] + i * a->sq[1] + h * a->sq[2];
                FN(copy_row)(row, FN(row)(src, a->sq[3], D, rbuf), D, dp);
            } else {
                memset(row, 0, (size_t)dp * sizeof(uint16_t));
            }
        }
        for (int64_t e = 0; e < dp / 2; e += FC_VF_W)
            fc_vf_transpose(tmp + e, dp, (float *)qt + e * FC_BR + rg, FC_BR);
    }
    /* The running max starts at the scores' bound where there is one
     * (fc_score_max_bound_l2f: a softcap alone), else at −inf. */
    const float mbound = fc_score_max_bound_l2f(mode, mod.cap, FC_P_LO_F32, FC_P_HI_F32); /* P in fp32 / bf16 */
    const int bounded = mbound > -INFINITY;
    for (int r = 0; r < FC_BR; ++r) {
        m[r] = mbound;
        l[r] = 0.0f;
    }
    for (int64_t x = 0; x < dp * FC_BR; ++x) ot[x] = 0.0f;

    /* K rows are read in place when a pair never straddles the row's end. */
    const int k_inplace = a->sk[3] == 1 && D % 2 == 0;
    const fc_keysegs ks = fc_keysegs_part(&rw.keys, p0, p1);
    for (int sg = 0; sg < ks.n; ++sg) {
        for (int64_t j0 = ks.s0[sg]; j0 < ks.s1[sg]; j0 += FC_BC) {
            const int64_t j1 = j0 + FC_BC < ks.s1[sg] ? j0 + FC_BC : ks.s1[sg];
            const int nb = (int)(j1 - j0);
            const int kind = fc_tile_kind(se, lo, hi, np, j0, j1);
            if (kind == FC_TILE_EMPTY) continue;
            /* The tile's K/V rows, dense or paged (fc_kv_rows). */
            int64_t ko[FC_BC], vo[FC_BC];
            const uint16_t *kr[FC_BC];
            fc_kv_rows(a, a->sk, b, hk, j0, nb, ko);
            fc_kv_rows(a, a->sv, b, hk, j0, nb, vo);
            for (int jj = 0; jj < nb; ++jj) {
                if (k_inplace) {
                    kr[jj] = k + ko[jj];
                } else {
                    FN(copy_row)(kp + jj * dp, FN(row)(k + ko[jj], a->sk[3], D, rbuf), D, dp);
                    kr[jj] = kp + jj * dp;
                }
            }
            for (int jj = 0; jj < nb; jj += 2) {
                const uint16_t *v0 = FN(row)(v + vo[jj], a->sv[3], D, rbuf);
                const uint16_t *v1 = jj + 1 < nb ? FN(row)(v + vo[jj + 1], a->sv[3], D, rbuf + dp) : NULL;
                FN(pack_vpair)(vp + (jj / 2) * dp, v0, v1, D, dp);
            }
            /* Fetch the next tile's K/V rows into L2 (see attn_fwd_body.h). */
            fc_prefetch_kv(a, b, hk, j1, j1 + FC_BC < ks.s1[sg] ? j1 + FC_BC : ks.s1[sg], 2);
            /* Per group of FC_RG rows, the keys [jlo, jhi) some row sees. */
            int32_t jlo[FC_BR / FC_RG], jhi[FC_BR / FC_RG];
            fc_tile_row_bounds(kind == FC_TILE_PARTIAL, FC_BR, FC_RG, r0, nr, G, ia, np, se, lo, hi, j0, nb,
                               sel, lol, hil, jlo, jhi);
            /* As attn_fwd_body.h; the PV kernel widens [jlo, jhi) to whole
             * key pairs, whose extra keys have p = 0 (masked, or the pad). */
#if defined(FLASHC_HAVE_AMX)
            if (amx) {
                /* A tiles: each group of 16 keys in place (evenly spaced rows
                 * of exactly dp dims, all < nb) or from Kp (zero-padded). */
                const uint16_t *ka[FC_BC / 16];
                int64_t kst[FC_BC / 16];
                for (int j = 0; j < nb; j += 16) {
                    const int n16 = nb - j < 16 ? nb - j : 16;
                    uint16_t *kpj = kp + (int64_t)j * dp;
                    ka[j / 16] = kpj; /* Kp rows (dp apart), unless in place below */
                    kst[j / 16] = dp * 2;
                    if (kr[j] == kpj) continue; /* copied into Kp already (not k_inplace) */
                    int even = D == dp && n16 == 16;
                    const ptrdiff_t step = kr[j + 1] - kr[j];
                    for (int t = 2; t < 16 && even; ++t) even = kr[j + t] - kr[j] == t * step;
                    if (even) {
                        ka[j / 16] = kr[j];
                        kst[j / 16] = step * 2;
                    } else {
                        for (int t = 0; t < n16; ++t) FN(copy_row)(kpj + t * dp, kr[j + t], D, dp);
                    }
                }
                FN(qk_amx)(qt, ka, kst, nb, dp, nrg, jlo, jhi, st, mod.qk_mul);
            } else
#endif
                FN(qk)(qt, kr, nb, dh, jlo, jhi, st, mod.qk_mul);
            /* A full tile whose only step is the softcap: the step runs in
             * the softmax (fc_softmax_cap). */
            const float fcap = fc_softmax_cap(mode, kind == FC_TILE_PARTIAL, mod.cap);
            if (fcap == 0.0f)
                fc_vtile_score_rows_any(mode, kind == FC_TILE_PARTIAL, st, FC_BR, nb, nrv, j0, mod.cap, slope, ioff,
                                        sel, lol, hil);
            switch (amx ? nrg : FC_BR / FC_RG) { /* constant row counts: the softmax's vectors stay in registers */
            case 1: FN(softmax)(st, nb, m, l, alpha, pt, FC_RG / 16, fcap, bounded); break;
            case 2: FN(softmax)(st, nb, m, l, alpha, pt, 2 * FC_RG / 16, fcap, bounded); break;
            case 3: FN(softmax)(st, nb, m, l, alpha, pt, 3 * FC_RG / 16, fcap, bounded); break;
            default: FN(softmax)(st, nb, m, l, alpha, pt, FC_BR / 16, fcap, bounded); break;
            }
            /* A row's P is 0 on the keys of a partial tile it does not see;
             * should V hold an inf or NaN there, 0·inf must not reach it. */
            const int vbad = kind == FC_TILE_PARTIAL && !FN(vpairs_finite)(vp, (nb + 1) / 2, dp);
            if (amx) {
#if defined(FLASHC_HAVE_AMX)
                /* Keys [nb, nk) zero in Pt and Vp; Vt = Vp transposed as 32-bit pairs. */
                const int nk = (nb + 31) & ~31, np2 = (nb + 1) / 2;
                memset(pt + (int64_t)np2 * FC_BR, 0, (size_t)(nk / 2 - np2) * FC_BR * sizeof(int32_t));
                memset(vp + (int64_t)np2 * dp, 0, (size_t)(nk / 2 - np2) * dp * sizeof(int32_t));
                for (int i = 0; i < nk / 2; i += 16)
                    for (int64_t d = 0; d < dp; d += 16)
                        fc_vf_transpose((const float *)vp + i * dp + d, dp, (float *)vt + d * (FC_BC / 2) + i, FC_BC / 2);
                /* Non-finite V on a partial tile: the product on V with those
                 * values scrubbed to 0 (a row's terms on keys it cannot see
                 * are then 0·0, as 0·v in a clean call: the same bits), then
                 * each non-finite value's term added to the rows whose p is
                 * not 0 (FN(pv_masked)'s rule). */
                if (vbad) fc_bf16_scrub((uint16_t *)vt, (const uint16_t *)vt, dp * FC_BC);
                FN(pv_amx)(ot, dp, pt, (const uint16_t *)vt, nk, nrg, alpha);
                if (vbad) FN(pv_fixup)(ot, D, dp, pt, vp, nb, nrg * FC_RG);
#endif
            } else if (vbad) {
                FN(pv_masked)(ot, D, dp, pt, vp, jlo, jhi, alpha);
            } else {
                FN(pv)(ot, D, dp, pt, vp, jlo, jhi, alpha);
            }
        }
    }

    FN(block_store)(a, b, hk, r0, nr, ot, dp, tmp, m, l, part);
}

static void FN(block)(const fc_attn *a, int64_t b, int64_t hk, int64_t r0, int64_t p0, int64_t p1, float *ws,
                      float *part) {
    FN(block_impl)(a, b, hk, r0, p0, p1, ws, part, 0);
}

flashc_status fc_attn_fwd_avx512bf16(const fc_attn *a) {
    const fc_fwd_kernel kn = {FC_BR, FC_BC, (int64_t)FN(dpad)(a->D), FN(scratch_floats)(a->D), FN(block), FN(finish)};
    return fc_fwd_run_grouped(a, &kn);
}

#if defined(FLASHC_HAVE_AMX)
static void FN(block_amx)(const fc_attn *a, int64_t b, int64_t hk, int64_t r0, int64_t p0, int64_t p1, float *ws,
                          float *part) {
    fc_amx_config();
    FN(block_impl)(a, b, hk, r0, p0, p1, ws, part, 1);
    _tile_release();
}
#endif

/* The same forward with both products on AMX (isa.c: fc_cpu_has_amx). */
flashc_status fc_attn_fwd_amx_bf16(const fc_attn *a) {
#if defined(FLASHC_HAVE_AMX)
    const fc_fwd_kernel kn = {FC_BR, FC_BC, (int64_t)FN(dpad)(a->D), FN(scratch_floats)(a->D), FN(block_amx),
                              FN(finish)};
    return fc_fwd_run_grouped(a, &kn);
#else
    return fc_set_error(FLASHC_ERR_INTERNAL, "attn_fwd: the AMX path is not built into this library");
#endif
}
