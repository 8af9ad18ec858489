/*
 * attn_fwd_tile.cuh — the tile steps of the tensor-core forward kernels,
 * attn_fwd_tc.cu (mma.sync) and attn_fwd_wgmma.cu (wgmma), on the score
 * fragment both share: one warp's 16 query rows × NJ n8 column tiles, the
 * thread (g = lane / 4, t = lane % 4) holding s[j][e] at row g + 8·(e / 2),
 * column 8j + 2t + (e % 2) (the mma.sync C layout, tc_common.cuh; a wgmma
 * m64nN accumulator is the same per warp, attn_wgmma.cuh).
 *
 * Per key tile a kernel composes
 *   S = Q·Kᵀ → tile_score_mod (modifier path only) → tile_mask (partial tiles)
 *   → tile_softmax (online update, P in place) → O·α + P·V
 * and ends each row with row_finish. The attention definition itself comes
 * from the seam (src/common/): visibility (attn_mask.h), the score step
 * (attn_score.h), the row finish (attn_softmax.h).
 *
 * Two score paths, chosen once per launch by a template bool (MOD):
 *   plain (no softcap, no ALiBi, scale > 0): the fragment holds raw dots; the
 *     row max is taken on them and scale·log2 e is folded into the exp2 FFMA
 *     (mul = sl2e), the maximum scaled by `scale` at the end;
 *   modifier: tile_score_mod turns raw dots into the logits' inner factor
 *     (fc_score_innerf: softcap's cap, or scale·log2 e, folded out into the
 *     exp2 FFMA, mul = that factor, as on the plain path); a negative scale
 *     without softcap has no positive factor and takes log2-unit logits with
 *     mul = 1 (tile_score_as). The maximum is scaled by mul·ln 2 at the end.
 */
#ifndef FLASHC_ATTN_FWD_TILE_CUH
#define FLASHC_ATTN_FWD_TILE_CUH

#include "attn_params.cuh"
#include "attn_score.cuh"
#include "tc_common.cuh"

namespace fctc {

/* The key tiles of BN keys that query rows [ia, ib] visit (fc_block_keysegs,
 * at most two segments): tiles [first, a1) then [b0, b1), a1 ≤ b0 ≤ b1,
 * in increasing order and never one tile twice. Walk them as
 *   for (int t = kt.first; t < kt.b1; t = kt.next(t))
 * (four live integers, as few as the loop needs). */
struct KeyTiles {
    int first, a1, b0, b1;
    __device__ __forceinline__ int next(int t) const { return t + 1 == a1 ? b0 : t + 1; }
};
template <int BN> __device__ __forceinline__ KeyTiles key_tiles(const fc_mask &m, int ia, int ib) {
    fc_keysegs ks;
    fc_block_keysegs(&m, ia, ib, &ks);
    KeyTiles t = {0, 0, 0, 0};
    if (ks.n > 0) {
        t.first = (int)ks.s0[0] / BN;
        t.a1 = t.b0 = t.b1 = ((int)ks.s1[0] + BN - 1) / BN;
        if (ks.n > 1) {
            t.b0 = max((int)ks.s0[1] / BN, t.a1); /* a tile shared by both segments is the first's */
            t.b1 = max(((int)ks.s1[1] + BN - 1) / BN, t.b0);
        }
    }
    return t;
}

/* The visible key ranges [0, se) ∪ [lo, hi) of one query row
 * (fc_visible_keys_int), clamped to the last row: padding rows are never
 * stored, clamping keeps their ranges valid. */
struct Vis {
    int se, lo, hi;
};
__device__ __forceinline__ Vis vis_of(const fc_mask &m, int row, int Sq) {
    Vis v;
    fc_visible_keys_int(&m, min(row, Sq - 1), &v.se, &v.lo, &v.hi);
    return v;
}
/* ... of a thread's two fragment rows, row0 and row0 + 8. */
struct RowVis {
    Vis r[2];
};
__device__ __forceinline__ RowVis row_vis(const fc_mask &m, int row0, int Sq) {
    return RowVis{{vis_of(m, row0, Sq), vis_of(m, row0 + 8, Sq)}};
}

/* Does every row of a block (first row a, last row b) see every key of
 * [n0, n0 + BN) (fc_tile_full)? Keys past Sk are never visible. */
template <int BN> __device__ __forceinline__ bool tile_full(const Vis &a, const Vis &b, int n0, int Sk) {
    return n0 + BN <= Sk && FC_TILE_FULL(a.se, b.lo, a.hi, n0, n0 + BN);
}

/* −inf on the elements whose key is not visible to their row (FC_KEY_VISIBLE);
 * c0 = n0 + 2t, the absolute column of s[0][0]. */
template <int NJ> __device__ __forceinline__ void tile_mask(float (&s)[NJ][4], const RowVis &v, int c0) {
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const Vis &r = v.r[e >> 1];
            const int col = c0 + 8 * j + (e & 1);
            if (!FC_KEY_VISIBLE(r.se, r.lo, r.hi, col)) s[j][e] = -INFINITY;
        }
}

/* The score step of variant V (attn_score.cuh: fcc_score_step, log2 units)
 * on raw dots, with the hardware tanh.approx (F16/BF16 inputs, P rounded to
 * 8–11 bits); dist = i + Sk − Sq − j. dist0[hf] = the distance of s[0][0]'s
 * column for row hf, as float: exact while |dist| < 2^24, the rest a
 * compile-time offset per element (its abs a free operand modifier). */
template <int V>
__device__ __forceinline__ float tile_dist(const float (&dist0)[2], int j, int e) {
    return FC_SCORE_NEEDS_DIST(V) ? fabsf(dist0[e >> 1] - (float)(8 * j + (e & 1))) : 0.f;
}
template <int V, class TANH, int NJ>
__device__ __forceinline__ void tile_score_as(float (&s)[NJ][4], const fc_score_modf &mod, const float (&dist0)[2]) {
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            float dg; /* unused: the forward needs no derivative */
            s[j][e] = fcc_score_step<V, TANH>(mod, s[j][e], tile_dist<V>(dist0, j, e), dg);
        }
}
/* The factored step (fcc_score_inner_step): the fragment becomes `inner`,
 * the kernel folds f.outer into tile_softmax's exp2 FFMA (mul = f.outer > 0).
 * One multiply per element less than tile_score_as. */
template <int V, class TANH, int NJ>
__device__ __forceinline__ void tile_score_fold_as(float (&s)[NJ][4], const fc_score_foldf &f,
                                                   const float (&dist0)[2]) {
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[j][e] = fcc_score_inner_step<V, TANH>(f, s[j][e], tile_dist<V>(dist0, j, e));
}
/* The modifier path's score step, factored when the factor is positive (every
 * softcap, every positive scale; negative scales without softcap take the
 * unfactored tile_score_as). *mul / *mul_ln: tile_softmax's and row_finish's
 * factors for this (b, h). */
__device__ __forceinline__ void score_factors(const fc_score_modf &mod, float *mul, float *mul_ln) {
    const fc_score_foldf f = fc_score_fold(&mod);
    *mul = f.outer > 0.f ? f.outer : 1.f;
    *mul_ln = *mul * FC_LN2_F;
}
/* fold = fc_score_fold(&mod), computed once per (b, h) by the kernel. The
 * variant is chosen per tile from the seam's list (one uniform branch).
 * TANH: the hardware tanh.approx (F16/BF16), or tanhf (the F32 kernel). */
template <class TANH = fcc_tanh_fast, int NJ>
__device__ __forceinline__ void tile_score_mod(float (&s)[NJ][4], const fc_score_modf &mod,
                                               const fc_score_foldf &fold, const float (&dist0)[2]) {
    if (fold.outer > 0.f)
        fcc_score_dispatch<FCC_SCORE_ALL_EXACT>(fc_score_fold_mode(&fold), [&](auto v) {
            tile_score_fold_as<decltype(v)::value, TANH>(s, fold, dist0);
        });
    else
        fcc_score_dispatch<FCC_SCORE_ALL_EXACT>(fc_score_mode_off(&mod), [&](auto v) {
            tile_score_as<decltype(v)::value, TANH>(s, mod, dist0);
        });
}
/* dist0 of tile_score_mod for rows row0, row0 + 8 at column c0 (fc_alibi_dist
 * of the score part sc: the problem's, or a sequence's, attn_ragged.cuh). */
__device__ __forceinline__ void tile_dist0(const fc_score_params &sc, int row0, int c0, float (&dist0)[2]) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) dist0[hf] = (float)(int)fc_alibi_dist(&sc, row0 + 8 * hf, c0);
}
__device__ __forceinline__ void tile_dist0(const fcc_attn &p, int row0, int c0, float (&dist0)[2]) {
    tile_dist0(p.score, row0, c0, dist0);
}

/* MT m16 row tiles of NJ n8 fragments set to 0 (an accumulator before its
 * first product). */
template <int MT, int NJ> __device__ __forceinline__ void zero_frags(float (&f)[MT][NJ][4]) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) f[mt][j][e] = 0.f;
}

/* ------------------------------------------------ F32: 3xTF32 tiles
 * (tc_common.cuh, mma_3xtf32), shared by the F32 forward (attn_fwd_tc.cu)
 * and the F32 backward (attn_bwd_tc.cu); fp32 rows in smem of pitch LD
 * floats (LD ≡ 4 mod 32: the ldmatrix rows and the column reads below are
 * free of bank conflicts). */

/* acc = A·Bᵀ over the HD columns: A = the warp's MT m16 tiles of rows at sA,
 * a_off the lane's ldmatrix offset (floats: row lane % 16, column
 * 4·(lane / 16)); B = NJ·8 rows at sB, b_off (row 8·(lane / 16) + lane % 8,
 * column 4·((lane / 8) % 2): b0, b1 of n8 tile 2jj, then of 2jj + 1).
 * S = Q·Kᵀ (forward); Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ, S = Q·Kᵀ, dP = dO·Vᵀ (backward).
 * SPLIT: the small terms in their own accumulator (tc_common.cuh), added at
 * the end — a third of the truncations in the big sum (HD/8 instead of
 * 3·HD/8: at HD 128 the shrink of |S| toward zero is what limits P's
 * accuracy), for MT·NJ·4 more registers. */
template <int MT, int NJ, int HD, int LD, bool SPLIT = false>
__device__ __forceinline__ void tile_abt_3xtf32(float (&acc)[MT][NJ][4], uint32_t sA, int a_off, uint32_t sB,
                                                int b_off) {
    static_assert(NJ % 2 == 0 && HD % 8 == 0, "n16 column pairs, k8 steps");
    zero_frags(acc);
    float sm[SPLIT ? MT : 1][SPLIT ? NJ : 2][4]; /* SPLIT: the small terms' accumulator */
    zero_frags(sm);
#pragma unroll
    for (int kk = 0; kk < HD / 8; ++kk) {
        uint32_t ah[MT][4], al[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            uint32_t r[4];
            ldsm_x4(sA + 4 * (a_off + mt * 16 * LD + kk * 8), r[0], r[1], r[2], r[3]);
#pragma unroll
            for (int e = 0; e < 4; ++e) tf32_split(__uint_as_float(r[e]), ah[mt][e], al[mt][e]);
        }
#pragma unroll
        for (int jj = 0; jj < NJ / 2; ++jj) {
            uint32_t b[4], bh[4], bl[4];
            ldsm_x4(sB + 4 * (b_off + jj * 16 * LD + kk * 8), b[0], b[1], b[2], b[3]);
#pragma unroll
            for (int e = 0; e < 4; ++e) tf32_split(__uint_as_float(b[e]), bh[e], bl[e]);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                if constexpr (SPLIT) {
                    mma_3xtf32(acc[mt][2 * jj], sm[mt][2 * jj], ah[mt], al[mt], bh[0], bh[1], bl[0], bl[1]);
                    mma_3xtf32(acc[mt][2 * jj + 1], sm[mt][2 * jj + 1], ah[mt], al[mt], bh[2], bh[3], bl[2], bl[3]);
                } else {
                    mma_3xtf32(acc[mt][2 * jj], ah[mt], al[mt], bh[0], bh[1], bl[0], bl[1]);
                    mma_3xtf32(acc[mt][2 * jj + 1], ah[mt], al[mt], bh[2], bh[3], bl[2], bl[3]);
                }
            }
        }
    }
    if constexpr (SPLIT) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int j = 0; j < NJ; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[mt][j][e] += sm[mt][j][e];
    }
}

/* The A fragments (hi, lo) of the k8 chunks of an fp32 C-layout tile (16
 * rows × NJ n8 tiles; n8 tile j is k8 chunk j of the next product) with the
 * chunk's columns in the C fragment's order: slot t ↔ column 2t, slot t + 4
 * ↔ column 2t + 1, so a0..a3 = c0, c2, c1, c3 (no shuffles). The B operand
 * of that product reads its rows in the same order (tile_ab_3xtf32). */
template <int NJ>
__device__ __forceinline__ void split_c_as_a(const float (&c)[NJ][4], uint32_t (&ah)[NJ][4], uint32_t (&al)[NJ][4]) {
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
        tf32_split(c[j][0], ah[j][0], al[j][0]);
        tf32_split(c[j][2], ah[j][1], al[j][1]);
        tf32_split(c[j][1], ah[j][2], al[j][2]);
        tf32_split(c[j][3], ah[j][3], al[j][3]);
    }
}

/* acc[dd] += A·B for the NC n8 column tiles from column c0: A = NJ k8
 * chunks split by split_c_as_a, B = fp32 rows at sB (pitch LD), this lane's
 * b0, b1 = B[8j + 2t][c0 + 8dd + g], B[8j + 2t + 1][..]. Each column tile's
 * NJ chunks go into zeroed fragments (big and small terms apart) added to
 * acc in fp32 (mma_3xtf32: a long sum in one accumulator drifts toward zero). SAN: in the k8 chunks j
 * whose bit j / 2 of san is set (k16 chunks, masked_chunks), non-finite B
 * values read as +0 (attn_fwd_tile.cuh, "values of keys a row cannot see"). */
template <int NJ, int NC, int LD, bool SAN = false>
__device__ __forceinline__ void tile_ab_3xtf32(float (&acc)[NC][4], const uint32_t (&ah)[NJ][4],
                                               const uint32_t (&al)[NJ][4], const float *sB, int c0, int g, int t4,
                                               uint32_t san = 0) {
    const float *b0 = sB + 2 * t4 * LD + c0 + g;
#pragma unroll
    for (int dd = 0; dd < NC; ++dd) {
        float t[4] = {0.f, 0.f, 0.f, 0.f}, ts[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
            float x0 = b0[8 * j * LD + 8 * dd], x1 = b0[(8 * j + 1) * LD + 8 * dd];
            if (SAN && ((san >> (j / 2)) & 1u)) {
                x0 = isfinite(x0) ? x0 : 0.f;
                x1 = isfinite(x1) ? x1 : 0.f;
            }
            uint32_t bh0, bl0, bh1, bl1;
            tf32_split(x0, bh0, bl0);
            tf32_split(x1, bh1, bl1);
            mma_3xtf32(t, ts, ah[j], al[j], bh0, bh1, bl0, bl1);
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[dd][e] += t[e] + ts[e];
    }
}

/* The online softmax's start for MT m16 row tiles of ND n8 columns: O = 0,
 * m = −∞, ℓ = 0. */
template <int MT, int ND>
__device__ __forceinline__ void tile_state_zero(float (&acc_o)[MT][ND][4], float (&m_i)[MT][2], float (&l_i)[MT][2]) {
    zero_frags(acc_o);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        m_i[mt][0] = m_i[mt][1] = -INFINITY;
        l_i[mt][0] = l_i[mt][1] = 0.f;
    }
}

/* Online softmax over one key tile, exp2 domain, for the fragment's rows:
 * x = s·mul (mul = scale·log2 e on raw dots, 1 on log2-unit logits);
 * m ← max(m, max_j s) (kept in s's units), s ← p = 2^(x − m·mul) in place,
 * l ← l·α + Σ p (this thread's columns only; row_finish sums the quad);
 * returns α = 2^((m_old − m)·mul), the factor for O. */
template <int NJ>
__device__ __forceinline__ void tile_softmax(float (&s)[NJ][4], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                             float mul) {
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
        mx[0] = fmaxf(mx[0], fmaxf(s[j][0], s[j][1]));
        mx[1] = fmaxf(mx[1], fmaxf(s[j][2], s[j][3]));
    }
    float mu[2];
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 1));
        mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 2));
        /* −inf max (nothing visible yet): use 0 so exp2 gives 0, not NaN. */
        mu[hf] = mx[hf] == -INFINITY ? 0.f : mx[hf] * mul;
        alpha[hf] = exp2_approx(m[hf] * mul - mu[hf]);
        m[hf] = mx[hf];
    }
    float rsum[2] = {0.f, 0.f};
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float pe = exp2_approx(fmaf(s[j][e], mul, -mu[e >> 1]));
            s[j][e] = pe;
            rsum[e >> 1] += pe;
        }
    l[0] = l[0] * alpha[0] + rsum[0];
    l[1] = l[1] * alpha[1] + rsum[1];
}

/* tile_softmax for rows whose running max is fixed (attn_score.h,
 * fc_score_max_bound_l2f; mu = m·mul in log2 units): p = 2^(s·mul − mu) in
 * place, ℓ += Σ p (this thread's columns); no row max, α = 1. A masked
 * score (−inf) gives p = 0. */
template <int NJ>
__device__ __forceinline__ void tile_softmax_fixed(float (&s)[NJ][4], float (&l)[2], float mul, float mu) {
    float rsum[2] = {0.f, 0.f};
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float pe = exp2_approx(fmaf(s[j][e], mul, -mu));
            s[j][e] = pe;
            rsum[e >> 1] += pe;
        }
    l[0] += rsum[0];
    l[1] += rsum[1];
}

/* O ← O·α for an output fragment of ND n8 tiles (same row layout as s). */
template <int ND> __device__ __forceinline__ void tile_rescale(float (&o)[ND][4], const float (&alpha)[2]) {
#pragma unroll
    for (int j = 0; j < ND; ++j) {
        o[j][0] *= alpha[0];
        o[j][1] *= alpha[0];
        o[j][2] *= alpha[1];
        o[j][3] *= alpha[1];
    }
}

/* P (fp32 fragment) rounded to T as the A fragments of NJ/2 k16 chunks of
 * P·V: the C fragments of n8 tiles 2kk, 2kk+1 are the A fragment of chunk kk. */
template <typename T, int NJ>
__device__ __forceinline__ void tile_pack_p(const float (&s)[NJ][4], uint32_t (&pa)[NJ / 2][4]) {
#pragma unroll
    for (int kk = 0; kk < NJ / 2; ++kk) {
        pa[kk][0] = Ops<T>::pack(s[2 * kk][0], s[2 * kk][1]);
        pa[kk][1] = Ops<T>::pack(s[2 * kk][2], s[2 * kk][3]);
        pa[kk][2] = Ops<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        pa[kk][3] = Ops<T>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
}

/* ------------------------------------ values of keys a row cannot see
 * What a row cannot see never reaches it (flashc.h). On a partial tile a
 * masked P is exactly 0, but the tensor cores multiply it with every V row
 * of the tile, and 0·NaN = NaN: a NaN/Inf in the value of a key that a row
 * cannot see (garbage past a cache length, poisoned padding, the future of
 * a causal row) would reach that row. So, per warp, on the k16 chunks of a
 * partial tile that some of its rows cannot see (masked_chunks):
 * pv_bad_keys finds the keys whose V row there holds a non-finite value;
 * when one does, P is set to NaN where a row does see such a key (poison_p:
 * that row gets NaN, as on the CPU) and P·V reads those chunks with the
 * non-finite values replaced by +0 (pv_mma<SAN>): a masked product is then
 * 0·0, and the rows that cannot see the key get the bits of a run without
 * the bad values. Cost: one ldmatrix pass over those chunks per partial
 * tile, nothing on full tiles. (Keys are safe by selection: tile_mask puts
 * −inf over a masked NaN score.) */

/* Bit kk: chunk kk (CK keys: k16 chunks, k8 for the F32 kernel) of the
 * tile at key n0 holds a key that some row of the warp (its first and last
 * rows' ranges va, vb) cannot see. */
template <int NKK, int CK = 16> __device__ __forceinline__ uint32_t masked_chunks(const Vis &va, const Vis &vb, int n0) {
    uint32_t m = 0;
#pragma unroll
    for (int kk = 0; kk < NKK; ++kk)
        if (!FC_TILE_FULL(va.se, vb.lo, va.hi, n0 + CK * kk, n0 + CK * kk + CK)) m |= 1u << kk;
    return m;
}

/* The keys of the chunks `chk` (warp-uniform) whose V row holds a
 * non-finite value, for this lane's P columns: bit 4kk + e for the keys
 * 16kk + {2t, 2t+1, 2t+8, 2t+9} (e = 0..3), OR-ed over the head dim and the
 * 8 lanes of the same t. vaddr(kk, dd): this lane's ldmatrix.trans address
 * of the 16 × 16 block of keys 16kk.. and columns 16dd.. (the B operand of
 * P·V, as pv_mma reads it). */
template <typename T, int NKK, int NDD, class VA>
__device__ __forceinline__ uint32_t pv_bad_keys(VA vaddr, uint32_t chk) {
    static_assert(NKK <= 8, "4 bits per chunk in 32");
    constexpr uint32_t em = Ops<T>::EXP;
    uint32_t bad = 0;
#pragma unroll
    for (int kk = 0; kk < NKK; ++kk) {
        if (!((chk >> kk) & 1u)) continue;
        uint32_t x = 0, y = 0;
#pragma unroll
        for (int dd = 0; dd < NDD; ++dd) {
            uint32_t b0, b1, b2, b3;
            ldsm_x4_t(vaddr(kk, dd), b0, b1, b2, b3);
            x |= nonfinite2(b0, em) | nonfinite2(b2, em); /* keys 2t, 2t+1 */
            y |= nonfinite2(b1, em) | nonfinite2(b3, em); /* keys 2t+8, 2t+9 */
        }
        bad |= (x | (y << 2)) << (4 * kk);
    }
    bad |= __shfl_xor_sync(0xffffffffu, bad, 4);
    bad |= __shfl_xor_sync(0xffffffffu, bad, 8);
    bad |= __shfl_xor_sync(0xffffffffu, bad, 16);
    return bad;
}

/* P (the packed A fragments of NKK k16 chunks: rows g, g+8 of rv) set to
 * NaN where the row sees a key of `bad` (pv_bad_keys); c0 = n0 + 2t. */
template <typename T, int NKK>
__device__ __forceinline__ void poison_p(uint32_t (&pa)[NKK][4], const RowVis &rv, int c0, uint32_t bad) {
#pragma unroll
    for (int kk = 0; kk < NKK; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r) /* pa[kk][r]: row half r & 1, keys + 8·(r >> 1) */
#pragma unroll
            for (int hb = 0; hb < 2; ++hb) {
                if (!((bad >> (4 * kk + 2 * (r >> 1) + hb)) & 1u)) continue;
                const Vis &v = rv.r[r & 1];
                if (FC_KEY_VISIBLE(v.se, v.lo, v.hi, c0 + 16 * kk + 8 * (r >> 1) + hb))
                    pa[kk][r] = (pa[kk][r] & (hb ? 0x0000FFFFu : 0xFFFF0000u)) | (Ops<T>::QNAN << (16 * hb));
            }
}

/* O += P·V on the tensor cores for MT m16 row tiles: NKK k16 chunks of keys,
 * 2·NDD n8 tiles of O; vaddr as pv_bad_keys. SAN: the chunks of `san` are
 * read with non-finite values replaced by +0 (see above). */
template <typename T, int MT, int NKK, int NDD, bool SAN, class VA>
__device__ __forceinline__ void pv_mma(float (&acc_o)[MT][2 * NDD][4], const uint32_t (&pa)[MT][NKK][4], VA vaddr,
                                       uint32_t san = 0) {
#pragma unroll
    for (int kk = 0; kk < NKK; ++kk)
#pragma unroll
        for (int dd = 0; dd < NDD; ++dd) {
            uint32_t b0, b1, b2, b3;
            ldsm_x4_t(vaddr(kk, dd), b0, b1, b2, b3);
            if (SAN && ((san >> kk) & 1u)) {
                b0 = zero_nonfinite2(b0, Ops<T>::EXP);
                b1 = zero_nonfinite2(b1, Ops<T>::EXP);
                b2 = zero_nonfinite2(b2, Ops<T>::EXP);
                b3 = zero_nonfinite2(b3, Ops<T>::EXP);
            }
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                Ops<T>::mma(acc_o[mt][2 * dd], pa[mt][kk], b0, b1);
                Ops<T>::mma(acc_o[mt][2 * dd + 1], pa[mt][kk], b2, b3);
            }
        }
}

/* Ends the fragment's two rows (fc_row_finishf): l summed over the quad,
 * M = m·mul_ln in natural units (mul_ln > 0: scale for raw-dot maxima,
 * ln 2 for log2-unit ones; −inf stays −inf), the sink logit of the head
 * when there is one. factor: O's multiplier; lse: L (natural log). */
__device__ __forceinline__ void row_finish(const float (&m)[2], const float (&l)[2], float mul_ln, bool has_sink,
                                           float sink, float (&factor)[2], float (&lse)[2]) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        float ls = l[hf];
        ls += __shfl_xor_sync(0xffffffffu, ls, 1);
        ls += __shfl_xor_sync(0xffffffffu, ls, 2);
        fc_row_finishf(m[hf] * mul_ln, ls, has_sink, sink, &factor[hf], &lse[hf]);
    }
}

} // namespace fctc

#endif /* FLASHC_ATTN_FWD_TILE_CUH */
