/*
 * attn_bwd_tc.cu — tensor-core attention backward for F16/BF16 (sm_80+),
 * FlashAttention-2 schedule on mma.sync m16n8k16 (tc_common.cuh).
 *
 *   inputs  dout, q, o [B, Sq, Hq, D]; k, v [B, Sk, Hkv, D]; lse [B, Hq, Sq] f32
 *   outputs dq [B, Sq, Hq, D]; dk, dv [B, Sk, Hkv, D]; dsinks [Hq] f32
 *
 * Forward, restated:  x_ij = scale·<q_i, k_j>,  P_ij = exp(x_ij − L_i),
 *                     O_i = Σ_j P_ij v_j.
 * Backward:           Δ_i = Σ_d dO_id O_id,  dP_ij = <dO_i, v_j>,
 *                     dS_ij = P_ij (dP_ij − Δ_i),
 *                     dV_j = Σ_i P_ij dO_i,  dK_j = scale Σ_i dS_ij q_i,
 *                     dQ_i = scale Σ_j dS_ij k_j,
 *                     d s_h = −Σ_{b,i} exp(s_h − L_i) Δ_i.
 *
 * Kernels (all on a->stream; scratch by cudaMallocAsync/cudaFreeAsync):
 *   1. prep: one warp per row: Δ (fp32) and L·log2(e) (−inf → +inf, so that
 *      P = exp2(x·log2e − L·log2e) is 0 for rows with nothing visible and
 *      for padding rows) into [B, Hq, Sq]; the sink term per row into
 *      [Hq, B·Sq]; 2. sinks: per-head fixed-order tree (no atomics).
 *   3. dK/dV: one CTA per (key block of 64, kv head, batch), 4 warps, each
 *      owning 16 keys. It loops over the query heads of its GQA group and
 *      the query tiles (64 rows) that see the key block (the visible bounds
 *      are monotone in i: binary search, as the generic kernel); Q/dO tiles
 *      double-buffered by cp.async. Transposed products so that every
 *      operand is an ldmatrix fragment and C fragments feed the next MMA:
 *        Sᵀ = K Qᵀ, Pᵀ = exp2(Sᵀ·scale·log2e − L·log2e), dPᵀ = V dOᵀ,
 *        dSᵀ = Pᵀ ∘ (dPᵀ − Δ), dV += Pᵀ dO (P rounded to T),
 *        dK += dSᵀ Q (dS rounded to T); dK·scale at the end.
 *      Per-element masks only on tiles not wholly visible.
 *      deterministic == 0 (HD ≤ 64, Sk ≥ 2048 only, where it measured
 *      faster): dSᵀ is staged in smem and dQ += dS K is added to an fp32
 *      [B, Hq, Sq, HD] buffer with atomics, then converted.
 *   4. deterministic: dQ per (query block of 64, head, batch), the forward's
 *      loop (K/V tiles double-buffered): S = QKᵀ, dP = dO Vᵀ, dS, dQ += dS K.
 *      No atomics anywhere, fixed order: bit-identical across runs.
 *
 * Head dims: D ≤ 128, zero-padded to HD ∈ {32, 64, 96, 128}; larger D
 * declines (the dK/dV accumulators, 2·HD/2 fp32 per thread, would spill).
 */
#include "tc_common.cuh"

#include "attn_tc.h"

#include <math.h>

namespace fctcb {
using namespace fctc;

constexpr int NW = 4;           /* warps per CTA */
constexpr int NT = 32 * NW;     /* threads per CTA */
constexpr int BK = 16 * NW;     /* dK/dV kernel: keys per CTA (16 per warp) */
constexpr int BQ = 64;          /* dK/dV kernel: query rows per tile */
constexpr int LDS = BQ + 8;     /* pitch of the staged dSᵀ [BK][LDS] */
constexpr float LOG2E = 1.4426950408889634f;

struct BwdParams {
    const void *q, *k, *v, *o, *dout;
    void *dq, *dk, *dv;
    const float *lse, *sink;
    float *dsinks;
    float *Lb, *Db, *Sb, *dQacc; /* scratch */
    int64_t sq0, sq1, sq2, sk0, sk1, sk2, sv0, sv1, sv2, so0, so1, so2, sdo0, sdo1, sdo2;
    int64_t sdq0, sdq1, sdq2, sdk0, sdk1, sdk2, sdv0, sdv1, sdv2;
    int64_t sl0, sl1, sl2;
    int64_t B;
    int Sq, Sk, Hq, Hkv, D, group;
    int64_t wl, wr, n_sink;
    float scale, sl2e;
    int vec;     /* 16-byte cp.async loads (rows 16-byte aligned, D % 8 == 0) */
    int vec_out; /* packed 32-bit stores of dq/dk/dv (4-byte aligned pairs) */
};

/* fc_visible_range (flashc_internal.h) on the fields of BwdParams, int results. */
__device__ __forceinline__ void vis_range(const BwdParams &p, int64_t i, int &s, int &lo, int &hi) {
    int64_t s6, l6, h6;
    const fc_mask mk = {p.Sq, p.Sk, p.wl, p.wr, p.n_sink};
    fc_visible_keys(&mk, i, &s6, &l6, &h6);
    s = (int)s6;
    lo = (int)l6;
    hi = (int)h6;
}

/* Rows [row0, row0 + R) of a [*, D] slice (row stride rs) into smem rows of
 * pitch LD; rows ≥ nrows and columns ≥ D up to HD are zero-filled. */
template <typename T, int HD, int R>
__device__ __forceinline__ void load_tile(T *s, const T *g, int64_t rs, int row0, int nrows,
                                          int D, bool vec, int tid) {
    constexpr int CPR = HD / 8, LD = HD + 8;
    if (vec) {
#pragma unroll
        for (int idx = tid; idx < R * CPR; idx += NT) {
            const int r = idx / CPR, c = idx % CPR;
            const bool ok = (row0 + r < nrows) && (c * 8 < D);
            const T *src = ok ? g + (int64_t)(row0 + r) * rs + c * 8 : g;
            cp_async16(smem_u32(s + r * LD + c * 8), src, ok);
        }
    } else {
        for (int idx = tid; idx < R * CPR; idx += NT) {
            const int r = idx / CPR, c = idx % CPR;
            const bool rok = row0 + r < nrows;
            const T *src = g + (int64_t)(row0 + r) * rs;
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const int d = c * 8 + e;
                s[r * LD + d] = (rok && d < D) ? src[d] : Ops<T>::from_f(0.f);
            }
        }
    }
}

/* Stores the (row, col..col+1) pair of fp32 values in T, dropping columns ≥ D. */
template <typename T>
__device__ __forceinline__ void store_pair(T *row, int col, int D, float x0, float x1, bool vec) {
    if (vec && col + 1 < D) {
        *reinterpret_cast<uint32_t *>(row + col) = Ops<T>::pack(x0, x1);
    } else {
        if (col < D) row[col] = Ops<T>::from_f(x0);
        if (col + 1 < D) row[col + 1] = Ops<T>::from_f(x1);
    }
}

/* ----------------------------------------------------------- 1. prep */
template <typename T>
__global__ void __launch_bounds__(256) bwd_prep_kernel(const BwdParams p) {
    const int64_t nrows = p.B * p.Hq * p.Sq;
    const int64_t row = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5); /* one warp per row */
    const int lane = threadIdx.x & 31;
    if (row >= nrows) return;
    const int64_t i = row % p.Sq, bh = row / p.Sq, h = bh % p.Hq, b = bh / p.Hq;
    const T *dop = static_cast<const T *>(p.dout) + b * p.sdo0 + i * p.sdo1 + h * p.sdo2;
    const T *op = static_cast<const T *>(p.o) + b * p.so0 + i * p.so1 + h * p.so2;
    float acc = 0.f;
    for (int d = lane; d < p.D; d += 32) acc = fmaf(Ops<T>::to_f(dop[d]), Ops<T>::to_f(op[d]), acc);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) {
        const float L = p.lse[b * p.sl0 + h * p.sl1 + i * p.sl2];
        const bool none = L == -INFINITY;
        p.Db[row] = acc;
        p.Lb[row] = none ? INFINITY : L * LOG2E;
        if (p.Sb) p.Sb[h * (p.B * p.Sq) + b * p.Sq + i] = none ? 0.f : expf(p.sink[h] - L) * acc;
    }
}

/* ---------------------------------------------------------- 2. sinks */
/* dsinks[h] = −Σ_k Sb[h][k]: fixed strided subsets, then a fixed tree. */
__global__ void __launch_bounds__(256) bwd_sinks_kernel(const float *Sb, int64_t n, float *dsinks) {
    __shared__ float part[256];
    const int64_t h = blockIdx.x;
    float acc = 0.f;
    for (int64_t k = threadIdx.x; k < n; k += 256) acc += Sb[h * n + k];
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int w = 128; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) dsinks[h] = -part[0];
}

/* First i in [0, n) with pred(i) (n if none); pred false…false true…true. */
template <class F> __device__ __forceinline__ int lower_bound_i(int n, F pred) {
    int lo = 0, hi = n;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (pred(mid)) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

/* --------------------------------------------------------- 3. dK / dV */
template <int HD, bool ATOMIC> struct DkdvSmem {
    static constexpr int LD = HD + 8;
    static constexpr size_t bytes_T = (size_t)(2 * BK + 4 * BQ) * LD + (ATOMIC ? BK * LDS : 0);
    static constexpr size_t bytes = bytes_T * 2 + 4 * BQ * sizeof(float);
};

template <typename T, int HD, bool ATOMIC>
__global__ void __launch_bounds__(NT, 2) bwd_dkdv_kernel(const BwdParams p, int nkb) {
    constexpr int LD = HD + 8;
    constexpr int NJ = BQ / 8;  /* n8 tiles of Sᵀ (query columns) */
    constexpr int ND = HD / 8;  /* n8 tiles of dK/dV */
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *sK = reinterpret_cast<T *>(smem_raw); /* [BK][LD] */
    T *sV = sK + BK * LD;                    /* [BK][LD] */
    T *sQ = sV + BK * LD;                    /* [2][BQ][LD] */
    T *sdO = sQ + 2 * BQ * LD;               /* [2][BQ][LD] */
    T *sdS = sdO + 2 * BQ * LD;              /* [BK][LDS], ATOMIC only */
    float *sL = reinterpret_cast<float *>(sdS + (ATOMIC ? BK * LDS : 0)); /* [2][BQ] */
    float *sDl = sL + 2 * BQ;                                              /* [2][BQ] */

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    int64_t vb = blockIdx.x;
    const int kb = (int)(vb % nkb);
    vb /= nkb;
    const int hk = (int)(vb % p.Hkv);
    const int64_t b = vb / p.Hkv;
    const int n0 = kb * BK, n1 = min(n0 + BK, p.Sk);

    const T *Qg = static_cast<const T *>(p.q) + b * p.sq0;
    const T *dOg = static_cast<const T *>(p.dout) + b * p.sdo0;

    /* Query rows that see a key of [n0, n1): window rows [ia, ib) and sink
     * rows [ic, Sq), merged when they touch (as attn_generic_bwd.cu). */
    int seg_s[2] = {0, 0}, seg_e[2] = {0, 0};
    {
        const int ia = lower_bound_i(p.Sq, [&](int i) { int s, l, h; vis_range(p, i, s, l, h); return h > n0; });
        const int ib = lower_bound_i(p.Sq, [&](int i) { int s, l, h; vis_range(p, i, s, l, h); return l >= n1; });
        const int ic = lower_bound_i(p.Sq, [&](int i) { int s, l, h; vis_range(p, i, s, l, h); return s > n0; });
        const bool hasA = ia < ib, hasC = ic < p.Sq;
        if (hasA && hasC && max(ia, ic) <= min(ib, p.Sq)) {
            seg_s[0] = min(ia, ic); seg_e[0] = max(ib, p.Sq);
        } else if (hasA && hasC) {
            seg_s[0] = min(ia, ic); seg_e[0] = ia < ic ? ib : p.Sq;
            seg_s[1] = max(ia, ic); seg_e[1] = ia < ic ? p.Sq : ib;
        } else if (hasA) {
            seg_s[0] = ia; seg_e[0] = ib;
        } else if (hasC) {
            seg_s[0] = ic; seg_e[0] = p.Sq;
        }
    }
    const int nt0 = (seg_e[0] - seg_s[0] + BQ - 1) / BQ;
    const int ntg = nt0 + (seg_e[1] - seg_s[1] + BQ - 1) / BQ;
    const int n_iter = p.group * ntg;

    /* Tile it: query head, first row, end of its segment. */
    auto tile_of = [&](int it, int &h, int &i0, int &iend) {
        const int gi = it / ntg, r = it % ntg;
        h = hk * p.group + gi;
        if (r < nt0) { i0 = seg_s[0] + r * BQ; iend = seg_e[0]; }
        else { i0 = seg_s[1] + (r - nt0) * BQ; iend = seg_e[1]; }
    };
    auto issue = [&](int it, int buf) {
        int h, i0, iend;
        tile_of(it, h, i0, iend);
        load_tile<T, HD, BQ>(sQ + buf * BQ * LD, Qg + (int64_t)h * p.sq2, p.sq1, i0, iend, p.D, p.vec, tid);
        load_tile<T, HD, BQ>(sdO + buf * BQ * LD, dOg + (int64_t)h * p.sdo2, p.sdo1, i0, iend, p.D, p.vec, tid);
        const int64_t rowbase = (b * p.Hq + h) * (int64_t)p.Sq;
        for (int t = tid; t < BQ; t += NT) {
            const bool ok = i0 + t < iend; /* rows past the segment: P = 0 */
            sL[buf * BQ + t] = ok ? p.Lb[rowbase + i0 + t] : INFINITY;
            sDl[buf * BQ + t] = ok ? p.Db[rowbase + i0 + t] : 0.f;
        }
    };

    load_tile<T, HD, BK>(sK, static_cast<const T *>(p.k) + b * p.sk0 + (int64_t)hk * p.sk2, p.sk1, n0,
                         p.Sk, p.D, p.vec, tid);
    load_tile<T, HD, BK>(sV, static_cast<const T *>(p.v) + b * p.sv0 + (int64_t)hk * p.sv2, p.sv1, n0,
                         p.Sk, p.D, p.vec, tid);
    if (n_iter > 0) issue(0, 0);
    cp_async_commit();

    /* ldmatrix lane offsets (elements): A rows of this warp's keys; B of a
     * [n][k] tile (non-trans); B of a [k][n] tile (trans). */
    const int a_off = (warp * 16 + (lane & 15)) * LD + (lane >> 4) * 8;
    const int bn_off = ((lane >> 4) * 8 + (lane & 7)) * LD + ((lane >> 3) & 1) * 8;
    const int bt_off = (((lane >> 3) & 1) * 8 + (lane & 7)) * LD + (lane >> 4) * 8;
    const uint32_t sKa = smem_u32(sK), sVa = smem_u32(sV);

    float acc_dk[ND][4], acc_dv[ND][4];
#pragma unroll
    for (int j = 0; j < ND; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_dk[j][e] = acc_dv[j][e] = 0.f;

    const int key0 = n0 + warp * 16 + g; /* this thread's keys: key0, key0 + 8 */

    for (int it = 0; it < n_iter; ++it) {
        const int buf = it & 1;
        cp_async_wait<0>();
        __syncthreads(); /* tile `it` landed for all; everyone is done with buf^1 */
        if (it + 1 < n_iter) issue(it + 1, buf ^ 1);
        cp_async_commit();

        int h, i0, iend;
        tile_of(it, h, i0, iend);
        const uint32_t sQa = smem_u32(sQ + buf * BQ * LD), sdOa = smem_u32(sdO + buf * BQ * LD);
        const float *Lt = sL + buf * BQ, *Dt = sDl + buf * BQ;

        /* Sᵀ = K Qᵀ  (16 keys × BQ queries per warp) */
        float acc_s[NJ][4];
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_s[j][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk) {
            uint32_t a[4];
            ldsm_x4(sKa + 2 * (a_off + kk * 16), a[0], a[1], a[2], a[3]);
#pragma unroll
            for (int jj = 0; jj < NJ / 2; ++jj) {
                uint32_t b0, b1, b2, b3;
                ldsm_x4(sQa + 2 * (bn_off + jj * 16 * LD + kk * 16), b0, b1, b2, b3);
                Ops<T>::mma(acc_s[2 * jj], a, b0, b1);
                Ops<T>::mma(acc_s[2 * jj + 1], a, b2, b3);
            }
        }

        /* Pᵀ; masks only when some (key, row) pair of the tile is not visible. */
        {
            const int ilast = min(i0 + BQ, iend) - 1;
            int sf, lof, hif, sl_, lol, hil;
            vis_range(p, i0, sf, lof, hif);
            vis_range(p, ilast, sl_, lol, hil);
            const bool full = (n0 + BK <= p.Sk) && ((lol <= n0 && hif >= n0 + BK) || sf >= n0 + BK);
#pragma unroll
            for (int j = 0; j < NJ; ++j)
#pragma unroll
                for (int c2 = 0; c2 < 2; ++c2) {
                    const int col = j * 8 + 2 * t4 + c2;
                    const float Lc = Lt[col];
                    float p0 = exp2_approx(fmaf(acc_s[j][c2], p.sl2e, -Lc));
                    float p1 = exp2_approx(fmaf(acc_s[j][2 + c2], p.sl2e, -Lc));
                    if (!full) {
                        int s, lo, hi;
                        vis_range(p, i0 + col, s, lo, hi);
                        if (!(key0 < s || (key0 >= lo && key0 < hi))) p0 = 0.f;
                        if (!(key0 + 8 < s || (key0 + 8 >= lo && key0 + 8 < hi))) p1 = 0.f;
                    }
                    acc_s[j][c2] = p0;
                    acc_s[j][2 + c2] = p1;
                }
        }

        /* dPᵀ = V dOᵀ */
        float acc_dp[NJ][4];
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_dp[j][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk) {
            uint32_t a[4];
            ldsm_x4(sVa + 2 * (a_off + kk * 16), a[0], a[1], a[2], a[3]);
#pragma unroll
            for (int jj = 0; jj < NJ / 2; ++jj) {
                uint32_t b0, b1, b2, b3;
                ldsm_x4(sdOa + 2 * (bn_off + jj * 16 * LD + kk * 16), b0, b1, b2, b3);
                Ops<T>::mma(acc_dp[2 * jj], a, b0, b1);
                Ops<T>::mma(acc_dp[2 * jj + 1], a, b2, b3);
            }
        }

        /* dSᵀ = Pᵀ ∘ (dPᵀ − Δ); P and dS rounded to T as A fragments. */
        uint32_t pa[BQ / 16][4], da[BQ / 16][4];
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int c2 = 0; c2 < 2; ++c2) {
                const float Dc = Dt[j * 8 + 2 * t4 + c2];
                acc_dp[j][c2] = acc_s[j][c2] * (acc_dp[j][c2] - Dc);
                acc_dp[j][2 + c2] = acc_s[j][2 + c2] * (acc_dp[j][2 + c2] - Dc);
            }
#pragma unroll
        for (int kk = 0; kk < BQ / 16; ++kk) {
            pa[kk][0] = Ops<T>::pack(acc_s[2 * kk][0], acc_s[2 * kk][1]);
            pa[kk][1] = Ops<T>::pack(acc_s[2 * kk][2], acc_s[2 * kk][3]);
            pa[kk][2] = Ops<T>::pack(acc_s[2 * kk + 1][0], acc_s[2 * kk + 1][1]);
            pa[kk][3] = Ops<T>::pack(acc_s[2 * kk + 1][2], acc_s[2 * kk + 1][3]);
            da[kk][0] = Ops<T>::pack(acc_dp[2 * kk][0], acc_dp[2 * kk][1]);
            da[kk][1] = Ops<T>::pack(acc_dp[2 * kk][2], acc_dp[2 * kk][3]);
            da[kk][2] = Ops<T>::pack(acc_dp[2 * kk + 1][0], acc_dp[2 * kk + 1][1]);
            da[kk][3] = Ops<T>::pack(acc_dp[2 * kk + 1][2], acc_dp[2 * kk + 1][3]);
        }
        if (ATOMIC) {
            /* Stage dSᵀ (this warp's 16 key rows) for dQ = dS K. The previous
             * tile's readers finished before this iteration's first barrier. */
            const int r = warp * 16 + g;
#pragma unroll
            for (int kk = 0; kk < BQ / 16; ++kk) {
                const int c = kk * 16 + 2 * t4;
                *reinterpret_cast<uint32_t *>(sdS + r * LDS + c) = da[kk][0];
                *reinterpret_cast<uint32_t *>(sdS + (r + 8) * LDS + c) = da[kk][1];
                *reinterpret_cast<uint32_t *>(sdS + r * LDS + c + 8) = da[kk][2];
                *reinterpret_cast<uint32_t *>(sdS + (r + 8) * LDS + c + 8) = da[kk][3];
            }
        }

        /* dV += Pᵀ dO,  dK += dSᵀ Q  (k = the tile's query rows) */
#pragma unroll
        for (int kk = 0; kk < BQ / 16; ++kk)
#pragma unroll
            for (int dd = 0; dd < HD / 16; ++dd) {
                uint32_t b0, b1, b2, b3;
                ldsm_x4_t(sdOa + 2 * (bt_off + kk * 16 * LD + dd * 16), b0, b1, b2, b3);
                Ops<T>::mma(acc_dv[2 * dd], pa[kk], b0, b1);
                Ops<T>::mma(acc_dv[2 * dd + 1], pa[kk], b2, b3);
                ldsm_x4_t(sQa + 2 * (bt_off + kk * 16 * LD + dd * 16), b0, b1, b2, b3);
                Ops<T>::mma(acc_dk[2 * dd], da[kk], b0, b1);
                Ops<T>::mma(acc_dk[2 * dd + 1], da[kk], b2, b3);
            }

        if (ATOMIC) {
            __syncthreads(); /* all of dSᵀ staged */
            /* dQ[rows 16·warp..] += dS K: A = dS from dSᵀ (trans), B = K [key][d] (trans). */
            const int r0 = i0 + warp * 16 + g;
            if (i0 + warp * 16 < iend) {
                uint32_t qa[BK / 16][4];
                const uint32_t sdSa = smem_u32(sdS);
#pragma unroll
                for (int kk = 0; kk < BK / 16; ++kk)
                    ldsm_x4_t(sdSa + 2 * ((kk * 16 + (lane >> 4) * 8 + (lane & 7)) * LDS + warp * 16 +
                                          ((lane >> 3) & 1) * 8),
                              qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3]);
                float *dst = p.dQacc + ((b * p.Hq + h) * (int64_t)p.Sq) * HD;
                const bool ok0 = r0 < iend, ok1 = r0 + 8 < iend;
#pragma unroll
                for (int dd = 0; dd < HD / 16; ++dd) {
                    float c[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
                    for (int kk = 0; kk < BK / 16; ++kk) {
                        uint32_t b0, b1, b2, b3;
                        ldsm_x4_t(sKa + 2 * (bt_off + kk * 16 * LD + dd * 16), b0, b1, b2, b3);
                        Ops<T>::mma(c[0], qa[kk], b0, b1);
                        Ops<T>::mma(c[1], qa[kk], b2, b3);
                    }
#pragma unroll
                    for (int jn = 0; jn < 2; ++jn) {
                        const int col = dd * 16 + jn * 8 + 2 * t4;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
                        if (ok0) atomicAdd(reinterpret_cast<float2 *>(dst + (int64_t)r0 * HD + col),
                                           make_float2(c[jn][0], c[jn][1]));
                        if (ok1) atomicAdd(reinterpret_cast<float2 *>(dst + (int64_t)(r0 + 8) * HD + col),
                                           make_float2(c[jn][2], c[jn][3]));
#else
                        if (ok0) {
                            atomicAdd(dst + (int64_t)r0 * HD + col, c[jn][0]);
                            atomicAdd(dst + (int64_t)r0 * HD + col + 1, c[jn][1]);
                        }
                        if (ok1) {
                            atomicAdd(dst + (int64_t)(r0 + 8) * HD + col, c[jn][2]);
                            atomicAdd(dst + (int64_t)(r0 + 8) * HD + col + 1, c[jn][3]);
                        }
#endif
                    }
                }
            }
        }
    }
    cp_async_wait<0>(); /* nothing may still be in flight at exit */

    /* Epilogue: dK·scale, dV; keys key0 and key0 + 8 of this block. */
    T *dkp = static_cast<T *>(p.dk) + b * p.sdk0 + (int64_t)hk * p.sdk2;
    T *dvp = static_cast<T *>(p.dv) + b * p.sdv0 + (int64_t)hk * p.sdv2;
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        const int key = key0 + 8 * hf;
        if (key >= p.Sk) continue;
        T *dkr = dkp + (int64_t)key * p.sdk1;
        T *dvr = dvp + (int64_t)key * p.sdv1;
#pragma unroll
        for (int j = 0; j < ND; ++j) {
            const int col = j * 8 + 2 * t4;
            store_pair(dkr, col, p.D, acc_dk[j][2 * hf] * p.scale, acc_dk[j][2 * hf + 1] * p.scale,
                       p.vec_out);
            store_pair(dvr, col, p.D, acc_dv[j][2 * hf], acc_dv[j][2 * hf + 1], p.vec_out);
        }
    }
}

/* ------------------------------------------------ 4. dQ (deterministic) */
template <typename T, int HD>
__global__ void __launch_bounds__(NT, 2) bwd_dq_kernel(const BwdParams p, int nqb) {
    constexpr int LD = HD + 8, BM = 16 * NW, BN = 64;
    constexpr int NJ = BN / 8, ND = HD / 8;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *sQ = reinterpret_cast<T *>(smem_raw); /* [BM][LD] */
    T *sdO = sQ + BM * LD;                   /* [BM][LD] */
    T *sK = sdO + BM * LD;                   /* [2][BN][LD] */
    T *sV = sK + 2 * BN * LD;                /* [2][BN][LD] */

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    int64_t vb = blockIdx.x;
    const int mb = nqb - 1 - (int)(vb % nqb); /* heaviest (causal) blocks first */
    vb /= nqb;
    const int h = (int)(vb % p.Hq);
    const int64_t b = vb / p.Hq;
    const int hk = h / p.group;
    const int m0 = mb * BM, mlast = min(m0 + BM, p.Sq) - 1;

    const T *Kb = static_cast<const T *>(p.k) + b * p.sk0 + (int64_t)hk * p.sk2;
    const T *Vb = static_cast<const T *>(p.v) + b * p.sv0 + (int64_t)hk * p.sv2;

    int s0, lo0, hi0, s1, lo1, hi1;
    vis_range(p, m0, s0, lo0, hi0);
    vis_range(p, mlast, s1, lo1, hi1);
    const int na = (s1 + BN - 1) / BN;
    const int tb1 = (hi1 + BN - 1) / BN;
    const int tb0 = max(lo0 / BN, na);
    const int n_iter = na + max(tb1 - tb0, 0);

    const int64_t rowbase = (b * p.Hq + h) * (int64_t)p.Sq;
    int rs[2], rlo[2], rhi[2];
    float Lr[2], Dr[2];
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        const int row = m0 + warp * 16 + g + 8 * hf;
        vis_range(p, min(row, p.Sq - 1), rs[hf], rlo[hf], rhi[hf]);
        Lr[hf] = row < p.Sq ? p.Lb[rowbase + row] : INFINITY;
        Dr[hf] = row < p.Sq ? p.Db[rowbase + row] : 0.f;
    }

    load_tile<T, HD, BM>(sQ, static_cast<const T *>(p.q) + b * p.sq0 + (int64_t)h * p.sq2, p.sq1, m0,
                         p.Sq, p.D, p.vec, tid);
    load_tile<T, HD, BM>(sdO, static_cast<const T *>(p.dout) + b * p.sdo0 + (int64_t)h * p.sdo2, p.sdo1,
                         m0, p.Sq, p.D, p.vec, tid);
    auto tile_n0 = [&](int it) { return (it < na ? it : tb0 + (it - na)) * BN; };
    if (n_iter > 0) {
        load_tile<T, HD, BN>(sK, Kb, p.sk1, tile_n0(0), p.Sk, p.D, p.vec, tid);
        load_tile<T, HD, BN>(sV, Vb, p.sv1, tile_n0(0), p.Sk, p.D, p.vec, tid);
    }
    cp_async_commit();

    const int a_off = (warp * 16 + (lane & 15)) * LD + (lane >> 4) * 8;
    const int bn_off = ((lane >> 4) * 8 + (lane & 7)) * LD + ((lane >> 3) & 1) * 8;
    const int bt_off = (((lane >> 3) & 1) * 8 + (lane & 7)) * LD + (lane >> 4) * 8;
    const uint32_t sQa = smem_u32(sQ), sdOa = smem_u32(sdO);

    float acc_dq[ND][4];
#pragma unroll
    for (int j = 0; j < ND; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_dq[j][e] = 0.f;

    for (int it = 0; it < n_iter; ++it) {
        const int buf = it & 1;
        cp_async_wait<0>();
        __syncthreads();
        if (it + 1 < n_iter) {
            load_tile<T, HD, BN>(sK + (buf ^ 1) * BN * LD, Kb, p.sk1, tile_n0(it + 1), p.Sk, p.D, p.vec, tid);
            load_tile<T, HD, BN>(sV + (buf ^ 1) * BN * LD, Vb, p.sv1, tile_n0(it + 1), p.Sk, p.D, p.vec, tid);
        }
        cp_async_commit();
        const int n0 = tile_n0(it);
        const uint32_t sKa = smem_u32(sK + buf * BN * LD), sVa = smem_u32(sV + buf * BN * LD);

        float acc_s[NJ][4], acc_dp[NJ][4];
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_s[j][e] = acc_dp[j][e] = 0.f;
        /* S = Q Kᵀ */
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk) {
            uint32_t a[4];
            ldsm_x4(sQa + 2 * (a_off + kk * 16), a[0], a[1], a[2], a[3]);
#pragma unroll
            for (int jj = 0; jj < NJ / 2; ++jj) {
                uint32_t b0, b1, b2, b3;
                ldsm_x4(sKa + 2 * (bn_off + jj * 16 * LD + kk * 16), b0, b1, b2, b3);
                Ops<T>::mma(acc_s[2 * jj], a, b0, b1);
                Ops<T>::mma(acc_s[2 * jj + 1], a, b2, b3);
            }
        }
        const bool full = (n0 + BN <= p.Sk) && ((n0 >= lo1 && n0 + BN <= hi0) || (n0 + BN <= s0));
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int hf = e >> 1;
                float pv = exp2_approx(fmaf(acc_s[j][e], p.sl2e, -Lr[hf]));
                if (!full) {
                    const int col = n0 + j * 8 + 2 * t4 + (e & 1);
                    if (!(col < rs[hf] || (col >= rlo[hf] && col < rhi[hf]))) pv = 0.f;
                }
                acc_s[j][e] = pv;
            }
        /* dP = dO Vᵀ */
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk) {
            uint32_t a[4];
            ldsm_x4(sdOa + 2 * (a_off + kk * 16), a[0], a[1], a[2], a[3]);
#pragma unroll
            for (int jj = 0; jj < NJ / 2; ++jj) {
                uint32_t b0, b1, b2, b3;
                ldsm_x4(sVa + 2 * (bn_off + jj * 16 * LD + kk * 16), b0, b1, b2, b3);
                Ops<T>::mma(acc_dp[2 * jj], a, b0, b1);
                Ops<T>::mma(acc_dp[2 * jj + 1], a, b2, b3);
            }
        }
        /* dS = P ∘ (dP − Δ), rounded to T as the A fragment of dS K */
        uint32_t da[BN / 16][4];
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_dp[j][e] = acc_s[j][e] * (acc_dp[j][e] - Dr[e >> 1]);
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            da[kk][0] = Ops<T>::pack(acc_dp[2 * kk][0], acc_dp[2 * kk][1]);
            da[kk][1] = Ops<T>::pack(acc_dp[2 * kk][2], acc_dp[2 * kk][3]);
            da[kk][2] = Ops<T>::pack(acc_dp[2 * kk + 1][0], acc_dp[2 * kk + 1][1]);
            da[kk][3] = Ops<T>::pack(acc_dp[2 * kk + 1][2], acc_dp[2 * kk + 1][3]);
        }
        /* dQ += dS K  (B = K [key][d], trans) */
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
            for (int dd = 0; dd < HD / 16; ++dd) {
                uint32_t b0, b1, b2, b3;
                ldsm_x4_t(sKa + 2 * (bt_off + kk * 16 * LD + dd * 16), b0, b1, b2, b3);
                Ops<T>::mma(acc_dq[2 * dd], da[kk], b0, b1);
                Ops<T>::mma(acc_dq[2 * dd + 1], da[kk], b2, b3);
            }
    }
    cp_async_wait<0>();

    T *dqp = static_cast<T *>(p.dq) + b * p.sdq0 + (int64_t)h * p.sdq2;
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        const int row = m0 + warp * 16 + g + 8 * hf;
        if (row >= p.Sq) continue;
        T *r = dqp + (int64_t)row * p.sdq1;
#pragma unroll
        for (int j = 0; j < ND; ++j)
            store_pair(r, j * 8 + 2 * t4, p.D, acc_dq[j][2 * hf] * p.scale,
                       acc_dq[j][2 * hf + 1] * p.scale, p.vec_out);
    }
}

/* dq = scale · dQacc  ([B, Hq, Sq, HD] fp32 → strided T), after the atomics. */
template <typename T, int HD>
__global__ void __launch_bounds__(256) bwd_dq_convert_kernel(const BwdParams p) {
    const int64_t n = p.B * p.Hq * p.Sq * (int64_t)(HD / 2);
    for (int64_t idx = (int64_t)blockIdx.x * 256 + threadIdx.x; idx < n; idx += (int64_t)gridDim.x * 256) {
        const int c = (int)(idx % (HD / 2)) * 2;
        const int64_t row = idx / (HD / 2);
        if (c >= p.D) continue;
        const int64_t i = row % p.Sq, bh = row / p.Sq, h = bh % p.Hq, b = bh / p.Hq;
        const float2 x = *reinterpret_cast<const float2 *>(p.dQacc + row * HD + c);
        T *r = static_cast<T *>(p.dq) + b * p.sdq0 + i * p.sdq1 + h * p.sdq2;
        store_pair(r, c, p.D, x.x * p.scale, x.y * p.scale, p.vec_out);
    }
}

/* ---------------------------------------------------------------- host */
template <typename T, int HD> static flashc_status run_bwd(const BwdParams &p0, bool atomic,
                                                          cudaStream_t st) {
    BwdParams p = p0;
    const int64_t nrows = p.B * p.Hq * p.Sq;
    {
        const int64_t blocks = (nrows + 7) / 8;
        bwd_prep_kernel<T><<<(unsigned)blocks, 256, 0, st>>>(p);
        FCC_CHECK_LAUNCH("bwd_prep_kernel");
    }
    if (p.Sb) {
        bwd_sinks_kernel<<<(unsigned)p.Hq, 256, 0, st>>>(p.Sb, p.B * p.Sq, p.dsinks);
        FCC_CHECK_LAUNCH("bwd_sinks_kernel");
    }
    const int nkb = (p.Sk + BK - 1) / BK;
    const unsigned gk = (unsigned)((int64_t)nkb * p.Hkv * p.B);
    if (atomic) {
        FCC_CHECK(cudaMemsetAsync(p.dQacc, 0, (size_t)nrows * HD * sizeof(float), st));
        using S = DkdvSmem<HD, true>;
        auto kern = bwd_dkdv_kernel<T, HD, true>;
        FCC_TRY(fcc_set_smem((const void *)kern, S::bytes, "attn_bwd_tc (dK/dV)"));
        kern<<<gk, NT, S::bytes, st>>>(p, nkb);
        FCC_CHECK_LAUNCH("bwd_dkdv_kernel");
        const int64_t n = nrows * (HD / 2);
        const int64_t want = (n + 255) / 256;
        const unsigned gc = (unsigned)(want < 65536 * 16 ? want : 65536 * 16);
        bwd_dq_convert_kernel<T, HD><<<gc, 256, 0, st>>>(p);
        FCC_CHECK_LAUNCH("bwd_dq_convert_kernel");
    } else {
        using S = DkdvSmem<HD, false>;
        auto kern = bwd_dkdv_kernel<T, HD, false>;
        FCC_TRY(fcc_set_smem((const void *)kern, S::bytes, "attn_bwd_tc (dK/dV)"));
        kern<<<gk, NT, S::bytes, st>>>(p, nkb);
        FCC_CHECK_LAUNCH("bwd_dkdv_kernel");
        constexpr int LD = HD + 8;
        const size_t smem = (size_t)(2 * 64 + 4 * 64) * LD * sizeof(T);
        auto kq = bwd_dq_kernel<T, HD>;
        FCC_TRY(fcc_set_smem((const void *)kq, smem, "attn_bwd_tc (dQ)"));
        const int nqb = (p.Sq + 63) / 64;
        kq<<<(unsigned)((int64_t)nqb * p.Hq * p.B), NT, smem, st>>>(p, nqb);
        FCC_CHECK_LAUNCH("bwd_dq_kernel");
    }
    return FLASHC_OK;
}

template <typename T> static flashc_status dispatch_bwd(const BwdParams &p, int HDp, bool atomic,
                                                       cudaStream_t st) {
    switch (HDp) {
    case 32: return run_bwd<T, 32>(p, atomic, st);
    case 64: return run_bwd<T, 64>(p, atomic, st);
    case 96: return run_bwd<T, 96>(p, atomic, st);
    case 128: return run_bwd<T, 128>(p, atomic, st);
    default: break;
    }
    return fcc_error(FLASHC_ERR_INTERNAL, "attn_bwd_tc: no tile for head dim %d", HDp);
}

} // namespace fctcb

flashc_status fc_cuda_attn_bwd_tc(const fc_attn *a) {
    using namespace fctcb;
    /* Declines (no message; the generic kernel runs): F32 (no TF32) and F64,
     * D > 128, non-unit d strides, empty problems, sizes past int32 grids. */
    if (a->dtype != FLASHC_F16 && a->dtype != FLASHC_BF16) return FLASHC_ERR_UNSUPPORTED;
    if (a->D < 1 || a->D > 128) return FLASHC_ERR_UNSUPPORTED;
    if (a->Sq == 0 || a->Sk == 0 || a->B == 0) return FLASHC_ERR_UNSUPPORTED;
    if (a->D > 1 && (a->sq[3] != 1 || a->sk[3] != 1 || a->sv[3] != 1 || a->so[3] != 1 ||
                     a->sdo[3] != 1 || a->sdq[3] != 1 || a->sdk[3] != 1 || a->sdv[3] != 1))
        return FLASHC_ERR_UNSUPPORTED;
    const int64_t lim = (int64_t)1 << 30;
    if (a->Sq >= lim || a->Sk >= lim || a->Hq >= lim) return FLASHC_ERR_UNSUPPORTED;
    const int64_t nrows = a->B * a->Hq * a->Sq;
    const int HDp = a->D <= 32 ? 32 : a->D <= 64 ? 64 : a->D <= 96 ? 96 : 128;
    const int64_t gmax = 2147483647;
    if ((nrows + 7) / 8 > gmax || ((a->Sk + BK - 1) / BK) * a->Hkv * a->B > gmax ||
        ((a->Sq + 63) / 64) * a->Hq * a->B > gmax)
        return FLASHC_ERR_UNSUPPORTED;

    BwdParams p;
    p.q = a->q; p.k = a->k; p.v = a->v; p.o = a->o; p.dout = a->dout;
    p.dq = a->dq; p.dk = a->dk; p.dv = a->dv;
    p.lse = static_cast<const float *>(a->lse);
    p.sink = static_cast<const float *>(a->sink_logits);
    p.dsinks = static_cast<float *>(a->dsinks);
    p.sq0 = a->sq[0]; p.sq1 = a->sq[1]; p.sq2 = a->sq[2];
    p.sk0 = a->sk[0]; p.sk1 = a->sk[1]; p.sk2 = a->sk[2];
    p.sv0 = a->sv[0]; p.sv1 = a->sv[1]; p.sv2 = a->sv[2];
    p.so0 = a->so[0]; p.so1 = a->so[1]; p.so2 = a->so[2];
    p.sdo0 = a->sdo[0]; p.sdo1 = a->sdo[1]; p.sdo2 = a->sdo[2];
    p.sdq0 = a->sdq[0]; p.sdq1 = a->sdq[1]; p.sdq2 = a->sdq[2];
    p.sdk0 = a->sdk[0]; p.sdk1 = a->sdk[1]; p.sdk2 = a->sdk[2];
    p.sdv0 = a->sdv[0]; p.sdv1 = a->sdv[1]; p.sdv2 = a->sdv[2];
    p.sl0 = a->slse[0]; p.sl1 = a->slse[1]; p.sl2 = a->slse[2];
    p.B = a->B;
    p.Sq = (int)a->Sq; p.Sk = (int)a->Sk; p.Hq = (int)a->Hq; p.Hkv = (int)a->Hkv; p.D = (int)a->D;
    p.group = (int)(a->Hq / a->Hkv);
    p.wl = a->wl; p.wr = a->wr; p.n_sink = a->n_sink;
    p.scale = (float)a->scale;
    p.sl2e = (float)(a->scale * 1.4426950408889634);
    bool vec = (a->D % 8) == 0;
    const void *in[5] = {a->q, a->k, a->v, a->o, a->dout};
    for (int i = 0; i < 5; ++i) vec = vec && ((uintptr_t)in[i] % 16) == 0;
    const int64_t *sin_[5] = {a->sq, a->sk, a->sv, a->so, a->sdo};
    for (int i = 0; i < 5; ++i)
        for (int j = 0; j < 3; ++j) vec = vec && (sin_[i][j] % 8) == 0;
    p.vec = vec ? 1 : 0;
    bool vo = true;
    const void *out[3] = {a->dq, a->dk, a->dv};
    for (int i = 0; i < 3; ++i) vo = vo && ((uintptr_t)out[i] % 4) == 0;
    const int64_t *sout[3] = {a->sdq, a->sdk, a->sdv};
    for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) vo = vo && (sout[i][j] % 2) == 0;
    p.vec_out = vo ? 1 : 0;

    /* deterministic == 0 may use the atomic-dQ path; it is used only where it
     * measured faster (H100, bf16: HD ≤ 64 at S = 4k, +1–5 %); at HD = 128 and
     * at S = 1k the separate dQ kernel was faster (benchmarks/NOTES.md). */
    const bool atomic = a->deterministic == 0 && HDp <= 64 && a->Sk >= 2048;
    cudaStream_t st = (cudaStream_t)a->stream;
    /* Scratch: L·log2e and Δ [2][B·Hq·Sq], sink terms [Hq][B·Sq], dQ fp32 [B·Hq·Sq][HD]. */
    size_t nfl = 2 * (size_t)nrows;
    const size_t off_S = nfl;
    if (a->sink_logits) nfl += (size_t)nrows;
    const size_t off_Q = (nfl + 3) & ~(size_t)3;
    if (atomic) nfl = off_Q + (size_t)nrows * HDp;
    float *scr = nullptr;
    FCC_CHECK(cudaMallocAsync((void **)&scr, nfl * sizeof(float), st));
    p.Lb = scr;
    p.Db = scr + nrows;
    p.Sb = a->sink_logits ? scr + off_S : nullptr;
    p.dQacc = atomic ? scr + off_Q : nullptr;
    flashc_status s;
    if (a->dtype == FLASHC_BF16) s = dispatch_bwd<__nv_bfloat16>(p, HDp, atomic, st);
    else s = dispatch_bwd<__half>(p, HDp, atomic, st);
    /* Stream-ordered: freed after the kernels above have run. */
    const cudaError_t e = cudaFreeAsync(scr, st);
    if (s == FLASHC_OK && e != cudaSuccess) return fcc_cuda_error(e, __FILE__, __LINE__, "cudaFreeAsync");
    return s;
}
