/*
 * attn_bwd_tile.cuh — the element steps of the tensor-core backward kernels,
 * attn_bwd_tc.cu (mma.sync) and attn_bwd_wgmma.cu (wgmma), on the fragment
 * both share (attn_fwd_tile.cuh: one warp's 16 rows × NJ n8 column tiles,
 * the mma.sync C layout = a wgmma m64nN accumulator per warp):
 *   dK/dV (transposed, rows = keys, columns = query rows):
 *     Sᵀ → dkdv_p (Pᵀ, masks, score modifiers) ; dPᵀ → dkdv_ds (dSᵀ);
 *   dQ (rows = query rows, columns = keys):
 *     S → dq_p (P·g, masks) ; dP → dq_ds (dS).
 * The definitions come from the seam (src/common/): visibility (attn_mask.h),
 * the score step and its derivative (attn_score.h).
 */
#ifndef FLASHC_ATTN_BWD_TILE_CUH
#define FLASHC_ATTN_BWD_TILE_CUH

#include "attn_fwd_tile.cuh"
#include "attn_ragged.cuh"

namespace fctcb {
using namespace fctc;

/* L in the exp2 domain: L·log2e; a row that sees nothing (L = −inf) gets
 * +inf so that P = exp2(s − L·log2e) is 0 for it. */
__device__ __forceinline__ float lse_l2(float L) { return L == -INFINITY ? INFINITY : L * FC_LOG2E_F; }

/* Stores the (row, col..col+1) pair of fp32 values in T, dropping columns ≥ D. */
template <typename T>
__device__ __forceinline__ void store_pair(T *row, int col, int D, float x0, float x1, bool vec) {
    if constexpr (sizeof(T) == 2) { /* vec: 4-byte pairs (float: two 4-byte stores) */
        if (vec && col + 1 < D) {
            *reinterpret_cast<uint32_t *>(row + col) = Ops<T>::pack(x0, x1);
            return;
        }
    }
    if (col < D) row[col] = Ops<T>::from_f(x0);
    if (col + 1 < D) row[col + 1] = Ops<T>::from_f(x1);
}

/* ------------------------------------------- dK/dV tile steps (transposed) */
/* The dK/dV fragment: 16 keys × BQ query rows per warp; the thread holds
 * element (j, e) at key key0 + 8·(e >> 1), query row i0 + 8j + 2·t4 + (e & 1)
 * (the mma.sync C layout with rows = keys). Bit 4j + e of a visibility mask
 * is that element. */

/* Per-row values (L, Δ) read at a stride: row r at p[r·S] (S = 1: a plain
 * array; the F32 one-buffer dK/dV kernel keeps them in its Q rows' pad). */
template <int S> struct strided_rows {
    const float *p;
    __device__ __forceinline__ float operator[](int r) const { return p[r * S]; }
};

/* Pᵀ of the n8 tiles [J0, J0 + NC) from the raw dots in acc: plain:
 * acc ← P; MOD: acc ← P·g (the score pipeline) and pv ← P. Lt: the tile's
 * L·log2e per query row (+inf past the segment): a pointer, or anything
 * indexed by the tile's row (strided_rows: a value in each row's pad).
 * Unless full, entries whose row cannot see the key (or past iend) are 0 by
 * selection, in acc too, and their bits are cleared in vis. (J0 is a
 * constant once the caller's loop is unrolled.) mask, sc: the mask and
 * score parts of the block's sequence.
 * TANH: the softcap's tanh (attn_score.cuh; accurate for the F32 kernels). */
template <int V, int NJ, int NC, class TANH = fcc_tanh_fast, class LP = const float *>
__device__ __forceinline__ void dkdv_p(const fcc_attn &p, const fc_mask &mask, const fc_score_params &sc,
                                       const fc_score_modf &mod, float (&acc)[NJ][4],
                                       float (&pv)[NC][4], int J0, LP Lt, int i0, int iend, int key0,
                                       int t4, bool full, uint32_t &vis) {
    constexpr bool MOD = V != FC_SCORE_PLAIN;
    /* ALiBi distance i + Sk − Sq − key of element (0, 0); the rest a constant offset. */
    const float dist0 = MOD ? (float)(int)fc_alibi_dist(&sc, i0 + 2 * t4, key0) : 0.f;
    /* The visible ranges of this thread's rows i0 + col: plain, from one
     * 64-bit evaluation a call (fc_vis_span_of); the modifier variants
     * evaluate each row (the span's registers spilled at HD 128 there). */
    fc_vis_span vs = {0, 0, 0, 0};
    if (!MOD && !full) vs = fc_vis_span_of(&mask, i0);
#pragma unroll
    for (int jc = 0; jc < NC; ++jc)
#pragma unroll
        for (int c2 = 0; c2 < 2; ++c2) {
            const int j = J0 + jc, col = j * 8 + 2 * t4 + c2;
            const float Lc = Lt[col];
            float p0, p1, g0 = 1.f, g1 = 1.f;
            if (MOD) {
                const float d = dist0 + (float)(8 * j + c2);
                p0 = exp2_approx(fcc_score_step<V, TANH>(mod, acc[j][c2], d, g0) - Lc);
                p1 = exp2_approx(fcc_score_step<V, TANH>(mod, acc[j][2 + c2], d - 8.f, g1) - Lc);
            } else {
                p0 = exp2_approx(fmaf(acc[j][c2], p.sl2e, -Lc));
                p1 = exp2_approx(fmaf(acc[j][2 + c2], p.sl2e, -Lc));
            }
            bool v0 = true, v1 = true;
            if (!full) {
                int s, lo, hi;
                if (MOD) fc_visible_keys_int(&mask, i0 + col, &s, &lo, &hi);
                else fc_vis_span_at(vs, col, &s, &lo, &hi);
                const bool row = i0 + col < iend;
                v0 = row && FC_KEY_VISIBLE(s, lo, hi, key0);
                v1 = row && FC_KEY_VISIBLE(s, lo, hi, key0 + 8);
                p0 = v0 ? p0 : 0.f;
                p1 = v1 ? p1 : 0.f;
                if (!v0) vis &= ~(1u << (4 * j + c2));
                if (!v1) vis &= ~(1u << (4 * j + 2 + c2));
            }
            if (MOD) {
                pv[jc][c2] = p0;
                pv[jc][2 + c2] = p1;
                acc[j][c2] = v0 ? p0 * g0 : 0.f; /* g of a masked entry may be NaN */
                acc[j][2 + c2] = v1 ? p1 * g1 : 0.f;
            } else {
                acc[j][c2] = p0;
                acc[j][2 + c2] = p1;
            }
        }
}

/* dSᵀ in place (dp: dPᵀ → dSᵀ) from pg = P (plain) or P·g (MOD) and Δ per
 * query row (Dt, indexed as dkdv_p's Lt). Unless full, 0 where vis has no
 * bit: a NaN/Inf dP of a masked entry cannot get through. */
template <int NJ, class LP = const float *>
__device__ __forceinline__ void dkdv_ds(float (&dp)[NJ][4], const float (&pg)[NJ][4], LP Dt, int t4,
                                        bool full, uint32_t vis) {
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int c2 = 0; c2 < 2; ++c2) {
            const float Dc = Dt[j * 8 + 2 * t4 + c2];
            float d0 = pg[j][c2] * (dp[j][c2] - Dc);
            float d1 = pg[j][2 + c2] * (dp[j][2 + c2] - Dc);
            if (!full) {
                d0 = (vis >> (4 * j + c2)) & 1u ? d0 : 0.f;
                d1 = (vis >> (4 * j + 2 + c2)) & 1u ? d1 : 0.f;
            }
            dp[j][c2] = d0;
            dp[j][2 + c2] = d1;
        }
}

/* The dQ fragment: 16 query rows × BN keys per warp, element (j, e) at row
 * row0 + 8·(e >> 1), key n0 + 8j + 2·t4 + (e & 1) (attn_fwd_tile.cuh). */

/* P·g in place (acc: raw dots → P, times g under MOD; the dQ kernel needs
 * only the product). Lr: L·log2e of the two rows. Unless full, entries a row
 * cannot see are 0 by selection; returns the visibility mask (bit 4j + e,
 * all ones when full). sc: the score part of the block's sequence; TANH as
 * dkdv_p's. */
template <int V, int NJ, class TANH = fcc_tanh_fast>
__device__ __forceinline__ uint32_t dq_p(const fcc_attn &p, const fc_score_params &sc, const fc_score_modf &mod,
                                         float (&acc)[NJ][4],
                                         const RowVis &rv, const float (&Lr)[2], int row0, int n0, int t4,
                                         bool full) {
    constexpr bool MOD = V != FC_SCORE_PLAIN;
    uint32_t vis = ~0u;
    float dist0[2] = {0.f, 0.f};
    if (MOD) tile_dist0(sc, row0, n0 + 2 * t4, dist0);
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int hf = e >> 1;
            float pv;
            if (MOD) {
                float dg;
                const float s = fcc_score_step<V, TANH>(mod, acc[j][e], dist0[hf] - (float)(8 * j + (e & 1)), dg);
                pv = exp2_approx(s - Lr[hf]) * dg;
            } else {
                pv = exp2_approx(fmaf(acc[j][e], p.sl2e, -Lr[hf]));
            }
            if (!full) {
                const Vis &r = rv.r[hf];
                if (!FC_KEY_VISIBLE(r.se, r.lo, r.hi, n0 + j * 8 + 2 * t4 + (e & 1))) {
                    pv = 0.f;
                    vis &= ~(1u << (4 * j + e));
                }
            }
            acc[j][e] = pv;
        }
    return vis;
}

/* dS in place (dp: dP → dS) from pg and Δ per row (Dr); unless full, 0
 * where vis has no bit (as dkdv_ds). */
template <int NJ>
__device__ __forceinline__ void dq_ds(float (&dp)[NJ][4], const float (&pg)[NJ][4], const float (&Dr)[2], bool full,
                                      uint32_t vis) {
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            float d = pg[j][e] * (dp[j][e] - Dr[e >> 1]);
            if (!full) d = (vis >> (4 * j + e)) & 1u ? d : 0.f;
            dp[j][e] = d;
        }
}

} // namespace fctcb

#endif /* FLASHC_ATTN_BWD_TILE_CUH */
