/*
 * attn_generic_bwd.cu — generic (SIMT) attention backward by recomputation,
 * every dtype and semantic; deterministic (no atomics anywhere).
 *
 *   inputs  dout, q, o [B, Sq, Hq, D]; k, v [B, Sk, Hkv, D]; lse [B, Hq, Sq]
 *   outputs dq [B, Sq, Hq, D]; dk, dv [B, Sk, Hkv, D]; dsinks [Hq]
 *
 * Forward, restated:  x_ij = scale·<q_i, k_j>,  P_ij = exp(x_ij − L_i),
 *                     O_i = Σ_j P_ij v_j.
 * Backward:           Δ_i = Σ_d dO_id O_id,  dP_ij = <dO_i, v_j>,
 *                     dS_ij = P_ij (dP_ij − Δ_i),
 *                     dV_j = Σ_i P_ij dO_i,  dK_j = scale Σ_i dS_ij q_i,
 *                     dQ_i = scale Σ_j dS_ij k_j,
 *                     d s_h = −Σ_{b,i} exp(s_h − L_i) Δ_i.
 * Passes (all on a->stream, temporaries stream-ordered):
 *   1. prep:  Δ and L per row into [B, Hq, Sq] buffers (A precision), and
 *             the sink term per row into [Hq, B·Sq].
 *   2. sinks: one block per head sums its B·Sq terms in a fixed order.
 *   3. dK/dV: one block per (key block, kv head, batch); it loops over the
 *             query heads of its GQA group and over the query rows that see
 *             the key block (found by binary search: the visible bounds are
 *             monotone in i), so GQA sums need no atomics.
 *   4. dQ:    one block per (query block, head, batch), like the forward.
 */
#include "attn_generic.cuh"

#include <limits.h>

/* ----------------------------------------------------------- 1. prep */
template <class T>
__global__ void __launch_bounds__(256) fcc_attn_bwd_prep_kernel(const fc_attn a,
                                                                 typename fcc_type<T>::acc *Lbuf,
                                                                 typename fcc_type<T>::acc *Dbuf,
                                                                 typename fcc_type<T>::acc *Sbuf) {
    using A = typename fcc_type<T>::acc;
    const int64_t nrows = a.B * a.Hq * a.Sq;
    const int64_t row = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5); /* one warp per row */
    const int lane = threadIdx.x & 31;
    if (row >= nrows) return;
    const int64_t i = row % a.Sq, bh = row / a.Sq, h = bh % a.Hq, b = bh / a.Hq;
    const T *dop = (const T *)a.dout + b * a.sdo[0] + i * a.sdo[1] + h * a.sdo[2];
    const T *op = (const T *)a.o + b * a.so[0] + i * a.so[1] + h * a.so[2];
    A acc = A(0);
    for (int64_t d = lane; d < a.D; d += 32)
        acc = fma(fcc_type<T>::to(dop[d * a.sdo[3]]), fcc_type<T>::to(op[d * a.so[3]]), acc);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) {
        const A L = ((const A *)a.lse)[b * a.slse[0] + h * a.slse[1] + i * a.slse[2]];
        Lbuf[row] = L;
        Dbuf[row] = acc;
        if (Sbuf) {
            const A s = ((const A *)a.sink_logits)[h];
            Sbuf[h * (a.B * a.Sq) + b * a.Sq + i] =
                L == fcc_neg_inf<A>() ? A(0) : fcc_exp(s - L) * acc;
        }
    }
}

/* ---------------------------------------------------------- 2. sinks */
/* dsinks[h] = −Σ_k Sbuf[h][k], k < n: each thread sums a fixed strided
 * subset, then a fixed tree: the same order on every run. */
template <class A>
__global__ void __launch_bounds__(256) fcc_attn_bwd_sinks_kernel(const A *Sbuf, int64_t n,
                                                                  A *dsinks) {
    __shared__ A part[256];
    const int64_t h = blockIdx.x;
    A acc = A(0);
    for (int64_t k = threadIdx.x; k < n; k += 256) acc += Sbuf[h * n + k];
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int w = 128; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) dsinks[h] = -part[0];
}

/* --------------------------------------------------------- 3. dK / dV */
/* First i in [0, n) with pred(i) true (n if none); pred false…false true…true. */
template <class F> __device__ __forceinline__ int64_t fcc_lower_bound(int64_t n, F pred) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (pred(mid)) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}


/* S = Q Kᵀ and dP = dO Vᵀ for one register tile: rows ty + 16r of Qs/dOs,
 * key columns tx + 16c of Ks/Vs (shared-memory rows of pitch LD), summed
 * over d < D in order. Shared by the dK/dV and the dQ kernels. */
template <typename A, int RM, int RN, int LD, typename S>
__device__ __forceinline__ void fcc_tile_s_dp(const S *Qs, const S *dOs, const S *Ks, const S *Vs, int D,
                                              int ty, int tx, A (&s)[RM][RN], A (&dp)[RM][RN]) {
#pragma unroll
    for (int r = 0; r < RM; ++r)
#pragma unroll
        for (int c = 0; c < RN; ++c) s[r][c] = dp[r][c] = A(0);
#pragma unroll 2
    for (int d = 0; d < D; ++d) {
        A qv[RM], ov[RM], kv[RN], vv[RN];
#pragma unroll
        for (int r = 0; r < RM; ++r) {
            qv[r] = Qs[(ty + 16 * r) * LD + d];
            ov[r] = dOs[(ty + 16 * r) * LD + d];
        }
#pragma unroll
        for (int c = 0; c < RN; ++c) {
            kv[c] = Ks[(tx + 16 * c) * LD + d];
            vv[c] = Vs[(tx + 16 * c) * LD + d];
        }
#pragma unroll
        for (int r = 0; r < RM; ++r)
#pragma unroll
            for (int c = 0; c < RN; ++c) {
                s[r][c] = fma(qv[r], kv[c], s[r][c]);
                dp[r][c] = fma(ov[r], vv[c], dp[r][c]);
            }
    }
}

template <class T, int DP>
__global__ void __launch_bounds__(256) fcc_attn_bwd_dkdv_kernel(const fc_attn a, int64_t nkb,
                                                                 const typename fcc_type<T>::acc *Lbuf,
                                                                 const typename fcc_type<T>::acc *Dbuf) {
    using A = typename fcc_type<T>::acc;
    using C = fcc_gen_cfg<A, DP>;
    constexpr int BM = C::BM, BN = C::BN, RM = C::RM, RN = C::RN, CD = C::CD, LD = C::LD,
                  LP = C::LP;
    extern __shared__ __align__(16) unsigned char fcc_smem_raw[];
    A *Ks = reinterpret_cast<A *>(fcc_smem_raw); /* [BN][LD] */
    A *Vs = Ks + BN * LD;                         /* [BN][LD] */
    A *Qs = Vs + BN * LD;                         /* [BM][LD] */
    A *dOs = Qs + BM * LD;                        /* [BM][LD] */
    A *Ps = dOs + BM * LD;                        /* [BM][LP] */
    A *dSs = Ps + BM * LP;                        /* [BM][LP] */
    A *Ls = dSs + BM * LP;                        /* [BM] */
    A *Ds = Ls + BM;                              /* [BM] */

    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    int64_t bid = blockIdx.x;
    const int64_t kb = bid % nkb;
    bid /= nkb;
    const int64_t hk = bid % a.Hkv, b = bid / a.Hkv;
    const int64_t G = a.Hq / a.Hkv;
    const int64_t j0 = kb * BN;
    const int nj = (int)min((int64_t)BN, a.Sk - j0);
    const int64_t j1 = j0 + nj;
    const int D = (int)a.D;
    const A scale = (A)a.scale;
    const A NEG_INF = fcc_neg_inf<A>();

    fcc_load_tile<T, DP, BN>(Ks, (const T *)a.k + b * a.sk[0] + j0 * a.sk[1] + hk * a.sk[2],
                             a.sk[1], a.sk[3], nj, D);
    fcc_load_tile<T, DP, BN>(Vs, (const T *)a.v + b * a.sv[0] + j0 * a.sv[1] + hk * a.sv[2],
                             a.sv[1], a.sv[3], nj, D);

    /* Query rows that see any key of [j0, j1): the window rows
     * [first i with hi_i > j0, first i with lo_i ≥ j1) and the sink rows
     * [first i with sink_end_i > j0, Sq). Merged when they touch. */
    int64_t seg_s[2], seg_e[2];
    {
        const int64_t ia = fcc_lower_bound(a.Sq, [&](int64_t i) {
            int64_t s, l, h; fcc_visible_range(a, i, &s, &l, &h); return h > j0; });
        const int64_t ib = fcc_lower_bound(a.Sq, [&](int64_t i) {
            int64_t s, l, h; fcc_visible_range(a, i, &s, &l, &h); return l >= j1; });
        const int64_t ic = fcc_lower_bound(a.Sq, [&](int64_t i) {
            int64_t s, l, h; fcc_visible_range(a, i, &s, &l, &h); return s > j0; });
        const bool hasA = ia < ib, hasC = ic < a.Sq;
        seg_s[0] = seg_e[0] = seg_s[1] = seg_e[1] = 0;
        if (hasA && hasC && max(ia, ic) <= min(ib, a.Sq)) {
            seg_s[0] = min(ia, ic); seg_e[0] = max(ib, a.Sq);
        } else if (hasA && hasC) {
            seg_s[0] = min(ia, ic); seg_e[0] = ia < ic ? ib : a.Sq;
            seg_s[1] = max(ia, ic); seg_e[1] = ia < ic ? a.Sq : ib;
        } else if (hasA) {
            seg_s[0] = ia; seg_e[0] = ib;
        } else if (hasC) {
            seg_s[0] = ic; seg_e[0] = a.Sq;
        }
    }

    A dk[RN][CD], dv[RN][CD]; /* key rows ty + 16r, dims tx + 16c */
#pragma unroll
    for (int r = 0; r < RN; ++r)
#pragma unroll
        for (int c = 0; c < CD; ++c) dk[r][c] = dv[r][c] = A(0);

    for (int64_t g = 0; g < G; ++g) {
        const int64_t h = hk * G + g;
        const T *qp = (const T *)a.q + b * a.sq[0] + h * a.sq[2];
        const T *dop = (const T *)a.dout + b * a.sdo[0] + h * a.sdo[2];
        const int64_t rowbase = (b * a.Hq + h) * a.Sq;
        for (int sg = 0; sg < 2; ++sg) {
            for (int64_t i0 = seg_s[sg]; i0 < seg_e[sg]; i0 += BM) {
                const int ni = (int)min((int64_t)BM, seg_e[sg] - i0);
                __syncthreads(); /* previous tile fully consumed */
                fcc_load_tile<T, DP, BM>(Qs, qp + i0 * a.sq[1], a.sq[1], a.sq[3], ni, D);
                fcc_load_tile<T, DP, BM>(dOs, dop + i0 * a.sdo[1], a.sdo[1], a.sdo[3], ni, D);
                for (int t = tid; t < BM; t += 256) {
                    Ls[t] = t < ni ? Lbuf[rowbase + i0 + t] : A(0);
                    Ds[t] = t < ni ? Dbuf[rowbase + i0 + t] : A(0);
                }
                __syncthreads();

                /* S = Q Kᵀ and dP = dO Vᵀ: rows ty + 16r, key columns tx + 16c */
                A s[RM][RN], dp[RM][RN];
                fcc_tile_s_dp<A, RM, RN, LD>(Qs, dOs, Ks, Vs, D, ty, tx, s, dp);
#pragma unroll
                for (int r = 0; r < RM; ++r) {
                    const int ir = ty + 16 * r;
                    int64_t se = 0, lo = 0, hi = 0;
                    if (ir < ni) fcc_visible_range(a, i0 + ir, &se, &lo, &hi);
                    const A L = Ls[ir], Dl = Ds[ir];
#pragma unroll
                    for (int c = 0; c < RN; ++c) {
                        const int jc = tx + 16 * c;
                        const int64_t j = j0 + jc;
                        const bool vis = jc < nj && (j < se || (j >= lo && j < hi));
                        const A p = vis ? fcc_exp(s[r][c] * scale - L) : A(0);
                        Ps[ir * LP + jc] = p;
                        dSs[ir * LP + jc] = p * (dp[r][c] - Dl);
                    }
                }
                (void)NEG_INF;
                __syncthreads();

                /* dV_j += Σ_i P_ij dO_i,  dK_j += Σ_i dS_ij q_i (scale at the end) */
                for (int ii = 0; ii < ni; ++ii) {
                    A pr[RN], dsr[RN], ov[CD], qv[CD];
#pragma unroll
                    for (int r = 0; r < RN; ++r) {
                        pr[r] = Ps[ii * LP + ty + 16 * r];
                        dsr[r] = dSs[ii * LP + ty + 16 * r];
                    }
#pragma unroll
                    for (int c = 0; c < CD; ++c) {
                        ov[c] = dOs[ii * LD + tx + 16 * c];
                        qv[c] = Qs[ii * LD + tx + 16 * c];
                    }
#pragma unroll
                    for (int r = 0; r < RN; ++r)
#pragma unroll
                        for (int c = 0; c < CD; ++c) {
                            dv[r][c] = fma(pr[r], ov[c], dv[r][c]);
                            dk[r][c] = fma(dsr[r], qv[c], dk[r][c]);
                        }
                }
            }
        }
    }

    T *dkp = (T *)a.dk + b * a.sdk[0] + hk * a.sdk[2];
    T *dvp = (T *)a.dv + b * a.sdv[0] + hk * a.sdv[2];
#pragma unroll
    for (int r = 0; r < RN; ++r) {
        const int jr = ty + 16 * r;
        if (jr >= nj) continue;
        const int64_t j = j0 + jr;
#pragma unroll
        for (int c = 0; c < CD; ++c) {
            const int d = tx + 16 * c;
            if (d < D) {
                dkp[j * a.sdk[1] + d * a.sdk[3]] = fcc_type<T>::from(dk[r][c] * scale);
                dvp[j * a.sdv[1] + d * a.sdv[3]] = fcc_type<T>::from(dv[r][c]);
            }
        }
    }
}

/* ---------------------------------------------------------------- 4. dQ */
template <class T, int DP>
__global__ void __launch_bounds__(256) fcc_attn_bwd_dq_kernel(const fc_attn a, int64_t nqb,
                                                               const typename fcc_type<T>::acc *Lbuf,
                                                               const typename fcc_type<T>::acc *Dbuf) {
    using A = typename fcc_type<T>::acc;
    using C = fcc_gen_cfg<A, DP>;
    constexpr int BM = C::BM, BN = C::BN, RM = C::RM, RN = C::RN, CD = C::CD, LD = C::LD,
                  LP = C::LP;
    extern __shared__ __align__(16) unsigned char fcc_smem_raw[];
    A *Qs = reinterpret_cast<A *>(fcc_smem_raw); /* [BM][LD] */
    A *dOs = Qs + BM * LD;                        /* [BM][LD] */
    A *Ks = dOs + BM * LD;                        /* [BN][LD] */
    A *Vs = Ks + BN * LD;                         /* [BN][LD] */
    A *dSs = Vs + BN * LD;                        /* [BM][LP] */

    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    int64_t bid = blockIdx.x;
    const int64_t qb = nqb - 1 - bid % nqb;
    bid /= nqb;
    const int64_t h = bid % a.Hq, b = bid / a.Hq;
    const int64_t hk = h / (a.Hq / a.Hkv);
    const int64_t i0 = qb * BM;
    const int ni = (int)min((int64_t)BM, a.Sq - i0);
    const int D = (int)a.D;
    const A scale = (A)a.scale;

    fcc_load_tile<T, DP, BM>(Qs, (const T *)a.q + b * a.sq[0] + i0 * a.sq[1] + h * a.sq[2],
                             a.sq[1], a.sq[3], ni, D);
    fcc_load_tile<T, DP, BM>(dOs, (const T *)a.dout + b * a.sdo[0] + i0 * a.sdo[1] + h * a.sdo[2],
                             a.sdo[1], a.sdo[3], ni, D);
    const T *kp = (const T *)a.k + b * a.sk[0] + hk * a.sk[2];
    const T *vp = (const T *)a.v + b * a.sv[0] + hk * a.sv[2];
    const int64_t rowbase = (b * a.Hq + h) * a.Sq + i0;

    int64_t se[RM], lo[RM], hi[RM];
    A L[RM], Dl[RM];
#pragma unroll
    for (int r = 0; r < RM; ++r) {
        const int ir = ty + 16 * r;
        se[r] = lo[r] = hi[r] = 0;
        L[r] = Dl[r] = A(0);
        if (ir < ni) {
            fcc_visible_range(a, i0 + ir, &se[r], &lo[r], &hi[r]);
            L[r] = Lbuf[rowbase + ir];
            Dl[r] = Dbuf[rowbase + ir];
        }
    }
    A dq[RM][CD];
#pragma unroll
    for (int r = 0; r < RM; ++r)
#pragma unroll
        for (int c = 0; c < CD; ++c) dq[r][c] = A(0);

    const fcc_segs g = fcc_key_segments(a, i0, ni);
    for (int sg = 0; sg < 2; ++sg) {
        for (int64_t j0 = g.s[sg]; j0 < g.e[sg]; j0 += BN) {
            const int nj = (int)min((int64_t)BN, g.e[sg] - j0);
            __syncthreads();
            fcc_load_tile<T, DP, BN>(Ks, kp + j0 * a.sk[1], a.sk[1], a.sk[3], nj, D);
            fcc_load_tile<T, DP, BN>(Vs, vp + j0 * a.sv[1], a.sv[1], a.sv[3], nj, D);
            __syncthreads();

            A s[RM][RN], dp[RM][RN];
            fcc_tile_s_dp<A, RM, RN, LD>(Qs, dOs, Ks, Vs, D, ty, tx, s, dp);
#pragma unroll
            for (int r = 0; r < RM; ++r)
#pragma unroll
                for (int c = 0; c < RN; ++c) {
                    const int jc = tx + 16 * c;
                    const int64_t j = j0 + jc;
                    const bool vis = jc < nj && (j < se[r] || (j >= lo[r] && j < hi[r]));
                    const A p = vis ? fcc_exp(s[r][c] * scale - L[r]) : A(0);
                    dSs[(ty + 16 * r) * LP + jc] = p * (dp[r][c] - Dl[r]);
                }
            __syncthreads();

            /* dQ_i += Σ_j dS_ij k_j (scale at the end) */
            for (int jj = 0; jj < nj; ++jj) {
                A dsr[RM], kv[CD];
#pragma unroll
                for (int r = 0; r < RM; ++r) dsr[r] = dSs[(ty + 16 * r) * LP + jj];
#pragma unroll
                for (int c = 0; c < CD; ++c) kv[c] = Ks[jj * LD + tx + 16 * c];
#pragma unroll
                for (int r = 0; r < RM; ++r)
#pragma unroll
                    for (int c = 0; c < CD; ++c) dq[r][c] = fma(dsr[r], kv[c], dq[r][c]);
            }
        }
    }

    T *dqp = (T *)a.dq + b * a.sdq[0] + h * a.sdq[2];
#pragma unroll
    for (int r = 0; r < RM; ++r) {
        const int ir = ty + 16 * r;
        if (ir >= ni) continue;
        const int64_t i = i0 + ir;
#pragma unroll
        for (int c = 0; c < CD; ++c) {
            const int d = tx + 16 * c;
            if (d < D) dqp[i * a.sdq[1] + d * a.sdq[3]] = fcc_type<T>::from(dq[r][c] * scale);
        }
    }
}

/* ---------------------------------------------------------------- host */
template <class T, int DP>
static flashc_status fcc_launch_bwd(const fc_attn *a, typename fcc_type<T>::acc *Lbuf,
                                    typename fcc_type<T>::acc *Dbuf,
                                    typename fcc_type<T>::acc *Sbuf) {
    using A = typename fcc_type<T>::acc;
    using C = fcc_gen_cfg<A, DP>;
    cudaStream_t st = fcc_stream(a->stream);
    const int64_t nrows = a->B * a->Hq * a->Sq;
    if (nrows > 0) {
        const int64_t blocks = (nrows + 7) / 8;
        if (blocks > INT_MAX)
            return fcc_error(FLASHC_ERR_UNSUPPORTED, "attn_bwd_generic: B·Hq·Sq=%lld rows exceed the grid limit",
                             (long long)nrows);
        fcc_attn_bwd_prep_kernel<T><<<(unsigned)blocks, 256, 0, st>>>(*a, Lbuf, Dbuf, Sbuf);
        FCC_CHECK_LAUNCH("fcc_attn_bwd_prep_kernel");
    }
    if (a->sink_logits) {
        fcc_attn_bwd_sinks_kernel<A><<<(unsigned)a->Hq, 256, 0, st>>>(Sbuf, a->B * a->Sq,
                                                                      (A *)a->dsinks);
        FCC_CHECK_LAUNCH("fcc_attn_bwd_sinks_kernel");
    }
    if (a->Sk > 0) {
        const size_t smem =
            (size_t)(2 * C::BN * C::LD + 2 * C::BM * C::LD + 2 * C::BM * C::LP + 2 * C::BM) * sizeof(A);
        auto kern = fcc_attn_bwd_dkdv_kernel<T, DP>;
        FCC_TRY(fcc_set_smem((const void *)kern, smem, "attn_bwd_generic (dK/dV)"));
        const int64_t nkb = (a->Sk + C::BN - 1) / C::BN;
        const int64_t blocks = nkb * a->Hkv * a->B;
        if (blocks > INT_MAX)
            return fcc_error(FLASHC_ERR_UNSUPPORTED, "attn_bwd_generic: %lld dK/dV blocks exceed the grid limit",
                             (long long)blocks);
        kern<<<(unsigned)blocks, C::THREADS, smem, st>>>(*a, nkb, Lbuf, Dbuf);
        FCC_CHECK_LAUNCH("fcc_attn_bwd_dkdv_kernel");
    }
    if (a->Sq > 0) {
        const size_t smem = (size_t)(2 * C::BM * C::LD + 2 * C::BN * C::LD + C::BM * C::LP) * sizeof(A);
        auto kern = fcc_attn_bwd_dq_kernel<T, DP>;
        FCC_TRY(fcc_set_smem((const void *)kern, smem, "attn_bwd_generic (dQ)"));
        const int64_t nqb = (a->Sq + C::BM - 1) / C::BM;
        const int64_t blocks = nqb * a->Hq * a->B;
        if (blocks > INT_MAX)
            return fcc_error(FLASHC_ERR_UNSUPPORTED, "attn_bwd_generic: %lld dQ blocks exceed the grid limit",
                             (long long)blocks);
        kern<<<(unsigned)blocks, C::THREADS, smem, st>>>(*a, nqb, Lbuf, Dbuf);
        FCC_CHECK_LAUNCH("fcc_attn_bwd_dq_kernel");
    }
    return FLASHC_OK;
}

template <class T> static flashc_status fcc_attn_bwd_typed(const fc_attn *a) {
    using A = typename fcc_type<T>::acc;
    cudaStream_t st = fcc_stream(a->stream);
    const size_t nrows = (size_t)(a->B * a->Hq * a->Sq);
    A *Lbuf = nullptr, *Dbuf = nullptr, *Sbuf = nullptr;
    if (nrows > 0) {
        FCC_CHECK(cudaMallocAsync((void **)&Lbuf, 2 * nrows * sizeof(A), st));
        Dbuf = Lbuf + nrows;
        if (a->sink_logits) {
            cudaError_t e = cudaMallocAsync((void **)&Sbuf, nrows * sizeof(A), st);
            if (e != cudaSuccess) {
                cudaFreeAsync(Lbuf, st);
                return fcc_cuda_error(e, __FILE__, __LINE__, "cudaMallocAsync(sink terms)");
            }
        }
    }
    flashc_status s = FLASHC_OK;
    FCC_DISPATCH_DP(a->D, s = fcc_launch_bwd<T, DP>(a, Lbuf, Dbuf, Sbuf));
    /* Stream-ordered: freed after the kernels above have run. */
    if (Sbuf) cudaFreeAsync(Sbuf, st);
    if (Lbuf) cudaFreeAsync(Lbuf, st);
    return s;
}

flashc_status fcc_attn_bwd_generic(const fc_attn *a) {
    if (a->B == 0 || a->Hq == 0) return FLASHC_OK;
    FCC_DISPATCH_DTYPE(a->dtype, return fcc_attn_bwd_typed<T>(a));
    return FLASHC_OK;
}
