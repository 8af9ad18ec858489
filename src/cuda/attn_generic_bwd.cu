/*
 * attn_generic_bwd.cu — generic (SIMT) attention backward by recomputation,
 * every dtype, head dim and semantic; deterministic (no atomics anywhere).
 * Also the two row passes both backward kernels share (prep, dsinks).
 *
 *   inputs  dout, q, o [B, Sq, Hq, D]; k, v [B, Sk, Hkv, D]; lse [B, Hq, Sq]
 *   outputs dq [B, Sq, Hq, D]; dk, dv [B, Sk, Hkv, D]; dsinks [Hq]
 *
 * Forward, restated:  x_ij = the modified score of scale·<q_i, k_j>
 *                     (attn_score.h: softcap, ALiBi; −inf where masked),
 *                     P_ij = exp(x_ij − L_i),  O_i = Σ_j P_ij v_j.
 * Backward:           Δ_i = Σ_d dO_id O_id,  dP_ij = <dO_i, v_j>,
 *                     dS_ij = P_ij (dP_ij − Δ_i) · ∂x_ij/∂(scale·<q_i, k_j>),
 *                     dV_j = Σ_i P_ij dO_i,  dK_j = scale Σ_i dS_ij q_i,
 *                     dQ_i = scale Σ_j dS_ij k_j,
 *                     d s_h = Σ_{b,i} fc_dsink_term(s_h, L_i, Δ_i).
 * Masked (i, j) get P = dS = 0 by selection, never by a product with 0, so
 * a NaN/Inf score of a pair the row cannot see stays out of every sum.
 * Units: natural (exp), in the accumulation type A (fp32, fp64 for F64).
 *
 * Passes (all on a->stream, temporaries stream-ordered):
 *   1. prep:   Δ and L per row into [B, Hq, Sq] buffers of A (shared with
 *              attn_bwd_tc.cu: fcc_bwd_prep_run).
 *   2. dsinks: one block per head sums its B·Sq terms in a fixed order
 *              (shared: fcc_bwd_dsinks_run).
 *   3. dK/dV:  one block per (key block, kv head, batch); it loops over the
 *              query heads of its GQA group and over the query rows that see
 *              the key block (fc_key_block_rows), so GQA sums need no atomics.
 *   4. dQ:     one block per (query block, head, batch), like the forward.
 * V (template): the score variant (attn_score.cuh, FCC_SCORE_FEW): plain
 * problems run the instantiation without modifiers. RAG (template): ragged
 * (varlen) problems, attn_ragged.cuh.
 */
#include "attn_generic.cuh"

#include <limits.h>

/* ----------------------------------------------------------- 1. prep */
/* One warp per row (b, h, i) of the row buffers [nb, Hq, nq] (attn_ragged.cuh:
 * [B, Hq, Sq]; packed queries [1, Hq, Tq], every packed row, also those of
 * no sequence: read in bounds, never used). */
template <class T>
__global__ void __launch_bounds__(256) fcc_bwd_prep_kernel(const __grid_constant__ fcc_attn p,
                                                           typename fcc_type<T>::acc *Lbuf,
                                                           typename fcc_type<T>::acc *Dbuf, int64_t nb, int64_t nq) {
    using A = typename fcc_type<T>::acc;
    const fc_attn &a = p.a;
    const int64_t nrows = nb * a.Hq * nq;
    const int64_t row = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= nrows) return;
    const int64_t i = row % nq, bh = row / nq, h = bh % a.Hq, b = bh / a.Hq;
    const T *dop = (const T *)a.dout + b * a.sdo[0] + i * a.sdo[1] + h * a.sdo[2];
    const T *op = (const T *)a.o + b * a.so[0] + i * a.so[1] + h * a.so[2];
    A acc = A(0);
    for (int64_t d = lane; d < a.D; d += 32)
        acc = fma(fcc_type<T>::to(dop[d * a.sdo[3]]), fcc_type<T>::to(op[d * a.so[3]]), acc);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) {
        Lbuf[row] = ((const A *)a.lse)[b * a.slse[0] + h * a.slse[1] + i * a.slse[2]];
        Dbuf[row] = acc;
    }
}

/* The same rows, F16/BF16 with vec16 rows (contiguous, 16-byte aligned,
 * D % 8 == 0): eight lanes a row, each 16-byte loads of dO and O (8
 * elements) at d = 8·(lane mod 8) + 64c, c < NC (D ≤ 64·NC), every load
 * issued before the first product, summed in c order and by a fixed shuffle
 * tree: deterministic. 32 rows a 256-thread block. I: the row index type,
 * 32-bit wherever the rows fit (a 64-bit division is ~70 instructions, and
 * four of them stood before the first load). (One lane a column and 2-byte
 * loads ran at ~40 % of copy bandwidth at D = 64.) */
template <class T, class I, int NC>
__global__ void __launch_bounds__(256) fcc_bwd_prep_vec_kernel(const __grid_constant__ fcc_attn p, float *Lbuf,
                                                               float *Dbuf, I nb, I nq) {
    static_assert(sizeof(T) == 2, "2-byte types");
    const fc_attn &a = p.a;
    const I Hq = (I)a.Hq, nrows = nb * Hq * nq;
    const I row = (I)blockIdx.x * 32 + (I)(threadIdx.x >> 3);
    const int l8 = threadIdx.x & 7;
    float acc = 0.f;
    I i = 0, h = 0, b = 0;
    if (row < nrows) {
        const I bh = row / nq;
        i = row - bh * nq;
        b = bh / Hq;
        h = bh - b * Hq;
        const T *dop = (const T *)a.dout + (int64_t)b * a.sdo[0] + (int64_t)i * a.sdo[1] + (int64_t)h * a.sdo[2];
        const T *op = (const T *)a.o + (int64_t)b * a.so[0] + (int64_t)i * a.so[1] + (int64_t)h * a.so[2];
        uint4 x[NC], y[NC];
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            const int d = 8 * l8 + 64 * c;
            if (d < a.D) {
                x[c] = __ldg(reinterpret_cast<const uint4 *>(dop + d));
                y[c] = __ldg(reinterpret_cast<const uint4 *>(op + d));
            }
        }
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            if (8 * l8 + 64 * c < a.D) {
                const T *xs = reinterpret_cast<const T *>(&x[c]), *ys = reinterpret_cast<const T *>(&y[c]);
#pragma unroll
                for (int e = 0; e < 8; ++e) acc = fmaf(fcc_type<T>::to(xs[e]), fcc_type<T>::to(ys[e]), acc);
            }
        }
    }
#pragma unroll
    for (int off = 4; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (row < nrows && l8 == 0) {
        Lbuf[row] = ((const float *)a.lse)[(int64_t)b * a.slse[0] + (int64_t)h * a.slse[1] + (int64_t)i * a.slse[2]];
        Dbuf[row] = acc;
    }
}

/* ---------------------------------------------------------- 2. dsinks */
/* dsinks[h] = Σ_k fc_dsink_term(s_h, L, Δ) over k = b·Sq + i < B·Sq (RAG:
 * over the rows i < Sq_b of every sequence b): each thread sums a fixed
 * strided subset (rows i ≡ thread mod 256 of each sequence, b then i
 * ascending), then a fixed tree: the same order on every run. One block per
 * head; eight rows' loads issued before their terms (one load and a 64-bit
 * division a row in turn took 59 µs at B 2, Sq 8k, Hq 64 on an H100). */
__device__ __forceinline__ double fcc_dsink_term(double s, double L, double Dl) { return fc_dsink_term(s, L, Dl); }
__device__ __forceinline__ float fcc_dsink_term(float s, float L, float Dl) { return fc_dsink_termf(s, L, Dl); }
template <class A> __device__ __forceinline__ A fcc_dsink_rows(A acc, A s, const A *Lr, const A *Dr, int64_t n) {
    constexpr int U = 8;
    int64_t i = threadIdx.x;
    for (; i + (U - 1) * 256 < n; i += U * 256) {
        A l[U], d[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            l[u] = Lr[i + u * 256];
            d[u] = Dr[i + u * 256];
        }
#pragma unroll
        for (int u = 0; u < U; ++u) acc += fcc_dsink_term(s, l[u], d[u]);
    }
    for (; i < n; i += 256) acc += fcc_dsink_term(s, Lr[i], Dr[i]);
    return acc;
}
template <class A>
__global__ void __launch_bounds__(256) fcc_bwd_dsinks_kernel(const __grid_constant__ fcc_attn p,
                                                             const A *Lbuf, const A *Dbuf) {
    __shared__ A part[256];
    const fc_attn &a = p.a;
    const int64_t h = blockIdx.x;
    const A s = (A)fc_attn_sink(&a, h);
    A acc = A(0);
    for (int64_t b = 0; b < a.B; ++b) { /* the sequence's rows of head h in the row buffers */
        const fc_seq sq = fc_attn_seq(&a, b);
        const int64_t row0 = fcc_rowbuf_row(a, sq, h, 0);
        acc = fcc_dsink_rows(acc, s, Lbuf + row0, Dbuf + row0, sq.Sq);
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int w = 128; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) ((A *)a.dsinks)[h * a.sdsink] = part[0];
}

/* ------------------------------------------------------ tile helpers */
/* S = Q Kᵀ and dP = dO Vᵀ for one register tile: rows ty + 16r of Qs/dOs,
 * key columns tx + 16c of Ks/Vs (shared-memory rows of pitch LD), summed
 * over d < D in order (ZERO = false: added to s, dp — the next chunk of the
 * head dims). Shared by the dK/dV and the dQ kernels. */
template <typename A, int RM, int RN, int LD, bool ZERO = true, typename S>
__device__ __forceinline__ void fcc_tile_s_dp(const S *Qs, const S *dOs, const S *Ks, const S *Vs, int D,
                                              int ty, int tx, A (&s)[RM][RN], A (&dp)[RM][RN]) {
    if constexpr (ZERO) {
#pragma unroll
        for (int r = 0; r < RM; ++r)
#pragma unroll
            for (int c = 0; c < RN; ++c) s[r][c] = dp[r][c] = A(0);
    }
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

/* ... over the head dims in chunks of DC (the SMALL shapes, fcc_gen_cfg):
 * s, dp zeroed, then per chunk: a barrier (not before the first: the
 * caller's ends the previous reads), load(c0) stages the chunk's Q, dO, K
 * and V tiles, a barrier, the chunk's products. */
template <typename A, int RM, int RN, int LD, int DC, class Load>
__device__ __forceinline__ void fcc_tile_s_dp_chunked(const A *Qs, const A *dOs, const A *Ks, const A *Vs, int D,
                                                      int ty, int tx, A (&s)[RM][RN], A (&dp)[RM][RN], Load &&load) {
#pragma unroll
    for (int r = 0; r < RM; ++r)
#pragma unroll
        for (int c = 0; c < RN; ++c) s[r][c] = dp[r][c] = A(0);
    for (int c0 = 0; c0 < D; c0 += DC) {
        if (c0 > 0) __syncthreads(); /* the previous chunk's reads are done */
        load(c0);
        __syncthreads();
        fcc_tile_s_dp<A, RM, RN, LD, false>(Qs, dOs, Ks, Vs, min(DC, D - c0), ty, tx, s, dp);
    }
}

/* One row of a register tile, in place: s (qk = <q_i, k_j>) → P, dp → dS.
 * Row i sees (se, lo, hi) (all 0 for a padding row) with L_i, Δ_i; column c
 * is key j0 + tx + 16c, a real key when tx + 16c < nj. Masked entries are 0
 * by selection. V ≠ plain: x from the score pipeline (mod = fcc_gen_mod<A>), else
 * x = scale·qk; sc: the score part of the block's sequence. Shared by the
 * dK/dV and the dQ kernels. */
template <int V, class A, int RN, class M>
__device__ __forceinline__ void fcc_row_p_ds(const fcc_attn &p, const fc_score_params &sc, const M &mod, A (&s)[RN],
                                             A (&dp)[RN],
                                             int64_t se, int64_t lo, int64_t hi, A L, A Dl, int64_t i,
                                             int64_t j0, int tx, int nj) {
    const A scale = (A)p.a.scale;
#pragma unroll
    for (int c = 0; c < RN; ++c) {
        const int jc = tx + 16 * c;
        const int64_t j = j0 + jc;
        const bool vis = jc < nj && FC_KEY_VISIBLE(se, lo, hi, j);
        A P, dS;
        if constexpr (V != FC_SCORE_PLAIN) {
            A dg;
            const A x = fcc_gen_score<V>(mod, s[c], (A)fc_alibi_dist(&sc, i, j), dg);
            P = fcc_exp(x - L);
            dS = P * (dp[c] - Dl) * dg;
        } else {
            P = fcc_exp(s[c] * scale - L);
            dS = P * (dp[c] - Dl);
        }
        s[c] = vis ? P : A(0);
        dp[c] = vis ? dS : A(0);
    }
}

/* dV_j += Σ_i P_ij dO_i and dK_j += Σ_i dS_ij q_i over the tile's ni query
 * rows (P, dS [BM][LP]; dO, Q [BM][LD] in shared memory), in row order:
 * key rows ty + 16r, dims tx + 16c of dO/Q into dk/dv[r][C0 + c], c < CW
 * (a chunk of the head row, fcc_gen_cfg). dK's scale comes at the end. */
template <class A, int RN, int CD, int LD, int LP, int CW = CD, int C0 = 0>
__device__ __forceinline__ void fcc_tile_acc_dkdv(const A *Ps, const A *dSs, const A *dOs, const A *Qs, int ni,
                                                  int ty, int tx, A (&dk)[RN][CD], A (&dv)[RN][CD]) {
    static_assert(C0 + CW <= CD, "chunk inside the head row");
    for (int ii = 0; ii < ni; ++ii) {
        A pr[RN], dsr[RN], ov[CW], qv[CW];
#pragma unroll
        for (int r = 0; r < RN; ++r) {
            pr[r] = Ps[ii * LP + ty + 16 * r];
            dsr[r] = dSs[ii * LP + ty + 16 * r];
        }
#pragma unroll
        for (int c = 0; c < CW; ++c) {
            ov[c] = dOs[ii * LD + tx + 16 * c];
            qv[c] = Qs[ii * LD + tx + 16 * c];
        }
#pragma unroll
        for (int r = 0; r < RN; ++r)
#pragma unroll
            for (int c = 0; c < CW; ++c) {
                dv[r][C0 + c] = fma(pr[r], ov[c], dv[r][C0 + c]);
                dk[r][C0 + c] = fma(dsr[r], qv[c], dk[r][C0 + c]);
            }
    }
}

/* --------------------------------------------------------- 3. dK / dV */
/* RAG: ragged problems (attn_ragged.cuh): blockIdx.x over the B sequences
 * and the longest one's key blocks; K/V through key-row tables. SMALL
 * (fcc_gen_cfg): K, V, Q and dO pass through shared memory one chunk of DC
 * head dims at a time (S and dP over the chunks in order, then dV's and dK's
 * chunks). */
template <class T, int DP, int V, bool RAG, bool SMALL>
__global__ void __launch_bounds__(256) fcc_bwd_dkdv_kernel(const __grid_constant__ fcc_attn p, int64_t nkb,
                                                           const typename fcc_type<T>::acc *Lbuf,
                                                           const typename fcc_type<T>::acc *Dbuf) {
    using A = typename fcc_type<T>::acc;
    using C = fcc_gen_cfg<A, DP, SMALL>;
    constexpr int BM = C::BM, BN = C::BN, RM = C::RM, RN = C::RN, CD = C::CD, LD = C::LD,
                  LP = C::LP, DC = C::DC, NCH = C::NCH;
    extern __shared__ __align__(16) unsigned char fcc_smem_raw[];
    A *Ks = reinterpret_cast<A *>(fcc_smem_raw); /* [BN][LD] */
    A *Vs = Ks + BN * LD;                         /* [BN][LD] */
    A *Qs = Vs + BN * LD;                         /* [BM][LD] */
    A *dOs = Qs + BM * LD;                        /* [BM][LD] */
    A *Ps = dOs + BM * LD;                        /* [BM][LP] */
    A *dSs = Ps + BM * LP;                        /* [BM][LP] */
    A *Ls = dSs + BM * LP;                        /* [BM] */
    A *Ds = Ls + BM;                              /* [BM] */
    int64_t *tK = reinterpret_cast<int64_t *>(Ds + BM); /* RAG: [BN] key-row offsets of the K block */
    int64_t *tV = tK + BN;                              /* RAG: [BN] ... of the V block */

    const fc_attn &a = p.a;
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    int64_t bid = blockIdx.x;
    const int64_t kb = bid % nkb;
    bid /= nkb;
    const int64_t hk = bid % a.Hkv, b = bid / a.Hkv;
    const int64_t G = a.Hq / a.Hkv;
    const int64_t j0 = kb * BN;
    /* Sequence b (attn_ragged.cuh; dense: the problem itself). */
    const fc_seq sq = fcc_seq_of<RAG>(a, b);
    if (RAG && j0 >= sq.Sk) return; /* past this sequence's keys */
    const int nj = (int)min((int64_t)BN, sq.Sk - j0);
    const int D = (int)a.D;
    const fcc_seq_parts<RAG> sp(p, sq);
    const fc_mask &mask = sp.mask(p);

    /* Head dims [c0, c0 + DC) of the block's K and V rows into Ks, Vs. */
    auto load_kv = [&](int c0) {
        fcc_load_key_chunk<T, DC, BN, RAG>(Ks, (const T *)a.k, (const T *)a.k + b * a.sk[0] + hk * a.sk[2], tK, a.sk,
                                           j0, nj, c0, D);
        fcc_load_key_chunk<T, DC, BN, RAG>(Vs, (const T *)a.v, (const T *)a.v + b * a.sv[0] + hk * a.sv[2], tV, a.sv,
                                           j0, nj, c0, D);
    };
    if constexpr (RAG) {
        fcc_kv_rows<BN, 256>(tK, tV, a, sq, b, hk, j0, false, tid);
        __syncthreads();
    }
    if constexpr (NCH == 1) load_kv(0);

    /* The query rows that see some key of [j0, j0 + nj): ≤ 2 row segments. */
    int64_t seg_s[2], seg_e[2];
    const int nseg = fc_key_block_rows(&mask, j0, j0 + nj, seg_s, seg_e);

    A dk[RN][CD], dv[RN][CD]; /* key rows ty + 16r, dims tx + 16c */
#pragma unroll
    for (int r = 0; r < RN; ++r)
#pragma unroll
        for (int c = 0; c < CD; ++c) dk[r][c] = dv[r][c] = A(0);

    for (int64_t g = 0; g < G; ++g) {
        const int64_t h = hk * G + g;
        const auto mod = fcc_gen_mod_v<V, A>(p, b, h);
        const T *qp = (const T *)a.q + fc_attn_row_offset(&sq, a.sq, 0, h);
        const T *dop = (const T *)a.dout + fc_attn_row_offset(&sq, a.sdo, 0, h);
        const int64_t rowbase = fcc_rowbuf_at<RAG>(a, sq, b, h, 0);
        for (int sg = 0; sg < nseg; ++sg) {
            for (int64_t i0 = seg_s[sg]; i0 < seg_e[sg]; i0 += BM) {
                const int ni = (int)min((int64_t)BM, seg_e[sg] - i0);
                /* Head dims [c0, c0 + DC) of the tile's Q and dO rows into Qs, dOs. */
                auto load_q_do = [&](int c0) {
                    fcc_load_tile<T, DC, BM>(Qs, qp + i0 * a.sq[1] + c0 * a.sq[3], a.sq[1], a.sq[3], ni, D - c0);
                    fcc_load_tile<T, DC, BM>(dOs, dop + i0 * a.sdo[1] + c0 * a.sdo[3], a.sdo[1], a.sdo[3], ni,
                                             D - c0);
                };
                __syncthreads(); /* previous tile fully consumed */
                if constexpr (NCH == 1) load_q_do(0);
                for (int t = tid; t < BM; t += 256) {
                    Ls[t] = t < ni ? Lbuf[rowbase + i0 + t] : A(0);
                    Ds[t] = t < ni ? Dbuf[rowbase + i0 + t] : A(0);
                }
                __syncthreads();

                /* S, dP → P, dS: rows ty + 16r, key columns tx + 16c */
                A s[RM][RN], dp[RM][RN];
                if constexpr (NCH == 1) {
                    fcc_tile_s_dp<A, RM, RN, LD>(Qs, dOs, Ks, Vs, D, ty, tx, s, dp);
                } else {
                    fcc_tile_s_dp_chunked<A, RM, RN, LD, DC>(Qs, dOs, Ks, Vs, D, ty, tx, s, dp, [&](int c0) {
                        load_q_do(c0);
                        load_kv(c0);
                    });
                }
#pragma unroll
                for (int r = 0; r < RM; ++r) {
                    const int ir = ty + 16 * r;
                    int64_t se = 0, lo = 0, hi = 0;
                    if (ir < ni) fc_visible_keys(&mask, i0 + ir, &se, &lo, &hi);
                    fcc_row_p_ds<V>(p, sp.score(p), mod, s[r], dp[r], se, lo, hi, Ls[ir], Ds[ir], i0 + ir, j0, tx,
                                    nj);
#pragma unroll
                    for (int c = 0; c < RN; ++c) {
                        Ps[ir * LP + tx + 16 * c] = s[r][c];
                        dSs[ir * LP + tx + 16 * c] = dp[r][c];
                    }
                }
                if constexpr (NCH == 1) {
                    __syncthreads();
                    fcc_tile_acc_dkdv<A, RN, CD, LD, LP>(Ps, dSs, dOs, Qs, ni, ty, tx, dk, dv);
                } else {
                    fcc_static_for<NCH>([&](auto ch) {
                        constexpr int c0 = decltype(ch)::value * DC;
                        if (c0 >= D) return;
                        __syncthreads(); /* P, dS written; the previous chunk's reads are done */
                        load_q_do(c0);
                        __syncthreads();
                        fcc_tile_acc_dkdv<A, RN, CD, LD, LP, C::CC, c0 / 16>(Ps, dSs, dOs, Qs, ni, ty, tx, dk, dv);
                    });
                }
            }
        }
    }

    const A scale = (A)a.scale;
    T *dkp = (T *)a.dk + b * a.sdk[0] + hk * a.sdk[2]; /* dense only */
    T *dvp = (T *)a.dv + b * a.sdv[0] + hk * a.sdv[2];
#pragma unroll
    for (int r = 0; r < RN; ++r) {
        const int jr = ty + 16 * r;
        if (jr >= nj) continue;
        const int64_t j = j0 + jr;
        T *dkr = RAG ? (T *)a.dk + fc_attn_key_offset(&a, &sq, b, a.sdk, j, hk) : dkp + j * a.sdk[1];
        T *dvr = RAG ? (T *)a.dv + fc_attn_key_offset(&a, &sq, b, a.sdv, j, hk) : dvp + j * a.sdv[1];
#pragma unroll
        for (int c = 0; c < CD; ++c) {
            const int d = tx + 16 * c;
            if (d < D) {
                dkr[d * a.sdk[3]] = fcc_type<T>::from(dk[r][c] * scale);
                dvr[d * a.sdv[3]] = fcc_type<T>::from(dv[r][c]);
            }
        }
    }
}

/* ---------------------------------------------------------------- 4. dQ */
/* RAG, SMALL: as the forward (attn_generic_fwd.cu): S and dP over the
 * chunks of Q, dO, K, V in order, then dQ's chunks. */
template <class T, int DP, int V, bool RAG, bool SMALL>
__global__ void __launch_bounds__(256) fcc_bwd_dq_kernel(const __grid_constant__ fcc_attn p, int64_t nqb,
                                                         const typename fcc_type<T>::acc *Lbuf,
                                                         const typename fcc_type<T>::acc *Dbuf) {
    using A = typename fcc_type<T>::acc;
    using C = fcc_gen_cfg<A, DP, SMALL>;
    constexpr int BM = C::BM, BN = C::BN, RM = C::RM, RN = C::RN, CD = C::CD, LD = C::LD,
                  LP = C::LP, DC = C::DC, NCH = C::NCH;
    extern __shared__ __align__(16) unsigned char fcc_smem_raw[];
    A *Qs = reinterpret_cast<A *>(fcc_smem_raw); /* [BM][LD] */
    A *dOs = Qs + BM * LD;                        /* [BM][LD] */
    A *Ks = dOs + BM * LD;                        /* [BN][LD] */
    A *Vs = Ks + BN * LD;                         /* [BN][LD] */
    A *dSs = Vs + BN * LD;                        /* [BM][LP] */
    int64_t *tK = reinterpret_cast<int64_t *>(dSs + BM * LP); /* RAG: [BN] key-row offsets of the K tile */
    int64_t *tV = tK + BN;                                    /* RAG: [BN] ... of the V tile */

    const fc_attn &a = p.a;
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const fcc_qblock qbk = fcc_qblock_of<BM>(a, nqb);
    const int64_t b = qbk.b, h = qbk.h, hk = qbk.hk, i0 = qbk.i0;
    /* Sequence b (attn_ragged.cuh; dense: the problem itself). */
    const fc_seq sq = fcc_seq_of<RAG>(a, b);
    if (RAG && i0 >= sq.Sq) return; /* past this sequence's rows */
    const int ni = RAG ? (int)min((int64_t)BM, sq.Sq - i0) : qbk.ni, D = (int)a.D;
    const fcc_seq_parts<RAG> sp(p, sq);
    const fc_mask &mask = sp.mask(p);
    const auto mod = fcc_gen_mod_v<V, A>(p, b, h);

    const T *qp = (const T *)a.q + fc_attn_row_offset(&sq, a.sq, i0, h);
    const T *dop = (const T *)a.dout + fc_attn_row_offset(&sq, a.sdo, i0, h);
    const T *kp = (const T *)a.k + b * a.sk[0] + hk * a.sk[2]; /* dense only */
    const T *vp = (const T *)a.v + b * a.sv[0] + hk * a.sv[2];
    /* Head dims [c0, c0 + DC) of the block's Q and dO rows, of the K (V) rows
     * of the tile at j0. */
    auto load_q_do = [&](int c0) {
        fcc_load_tile<T, DC, BM>(Qs, qp + c0 * a.sq[3], a.sq[1], a.sq[3], ni, D - c0);
        fcc_load_tile<T, DC, BM>(dOs, dop + c0 * a.sdo[3], a.sdo[1], a.sdo[3], ni, D - c0);
    };
    auto load_k = [&](int64_t j0, int nj, int c0) {
        fcc_load_key_chunk<T, DC, BN, RAG>(Ks, (const T *)a.k, kp, tK, a.sk, j0, nj, c0, D);
    };
    auto load_v = [&](int64_t j0, int nj, int c0) {
        fcc_load_key_chunk<T, DC, BN, RAG>(Vs, (const T *)a.v, vp, tV, a.sv, j0, nj, c0, D);
    };
    if constexpr (NCH == 1) load_q_do(0);
    const int64_t rowbase = fcc_rowbuf_at<RAG>(a, sq, b, h, i0);

    int64_t se[RM], lo[RM], hi[RM];
    fcc_rows_visible(mask, i0, ni, ty, se, lo, hi);
    A L[RM], Dl[RM];
#pragma unroll
    for (int r = 0; r < RM; ++r) {
        const int ir = ty + 16 * r;
        L[r] = ir < ni ? Lbuf[rowbase + ir] : A(0);
        Dl[r] = ir < ni ? Dbuf[rowbase + ir] : A(0);
    }
    A dq[RM][CD];
#pragma unroll
    for (int r = 0; r < RM; ++r)
#pragma unroll
        for (int c = 0; c < CD; ++c) dq[r][c] = A(0);

    /* The keys some row of the block may see: ≤ 2 key segments. */
    fc_keysegs ks;
    fc_block_keysegs(&mask, i0, i0 + ni - 1, &ks);
    for (int sg = 0; sg < ks.n; ++sg) {
        for (int64_t j0 = ks.s0[sg]; j0 < ks.s1[sg]; j0 += BN) {
            const int nj = (int)min((int64_t)BN, ks.s1[sg] - j0);
            __syncthreads();
            if constexpr (RAG) {
                fcc_kv_rows<BN, 256>(tK, tV, a, sq, b, hk, j0, false, tid);
                __syncthreads();
            }

            A s[RM][RN], dp[RM][RN];
            if constexpr (NCH == 1) {
                load_k(j0, nj, 0);
                load_v(j0, nj, 0);
                __syncthreads();
                fcc_tile_s_dp<A, RM, RN, LD>(Qs, dOs, Ks, Vs, D, ty, tx, s, dp);
            } else {
                fcc_tile_s_dp_chunked<A, RM, RN, LD, DC>(Qs, dOs, Ks, Vs, D, ty, tx, s, dp, [&](int c0) {
                    load_q_do(c0);
                    load_k(j0, nj, c0);
                    load_v(j0, nj, c0);
                });
            }
#pragma unroll
            for (int r = 0; r < RM; ++r) {
                const int ir = ty + 16 * r;
                fcc_row_p_ds<V>(p, sp.score(p), mod, s[r], dp[r], se[r], lo[r], hi[r], L[r], Dl[r], i0 + ir, j0, tx,
                                nj);
#pragma unroll
                for (int c = 0; c < RN; ++c) dSs[ir * LP + tx + 16 * c] = dp[r][c];
            }
            /* dQ += dS K */
            fcc_tile_acc_pv_chunked<C>(fcc_tile_all_visible(mask, i0, ni, j0, nj), dSs, Ks, nj, D, ty, tx, dq,
                                       [&](int c0) { load_k(j0, nj, c0); });
        }
    }

    const A scale = (A)a.scale;
    T *dqp = (T *)a.dq + fc_attn_row_offset(&sq, a.sdq, 0, h);
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
template <class T> static flashc_status fcc_bwd_prep_typed(const fcc_attn &p, void *Lbuf, void *Dbuf) {
    using A = typename fcc_type<T>::acc;
    const fcc_rowbuf rb = fcc_rowbuf_of(p.a);
    const int64_t rows = rb.nb * p.a.Hq * rb.nq, blocks = (rows + 7) / 8;
    if (blocks > INT_MAX)
        return fcc_error(FLASHC_ERR_UNSUPPORTED, "attn_bwd: %lld rows (B·Hq·Sq, or Hq·total_q) exceed the grid limit",
                         (long long)rows);
    if constexpr (sizeof(T) == 2) {
        if (p.vec16 && p.a.D <= 256) {
            const unsigned grid = (unsigned)((rows + 31) / 32);
            cudaStream_t st = fcc_stream(p.a.stream);
            /* (rows + 31 fits: the row index of the grid's last lane) */
            const bool i32 = rows + 31 <= (int64_t)UINT32_MAX;
            auto launch = [&](auto nc) {
                constexpr int NC = decltype(nc)::value;
                if (i32)
                    fcc_bwd_prep_vec_kernel<T, uint32_t, NC><<<grid, 256, 0, st>>>(
                        p, (float *)Lbuf, (float *)Dbuf, (uint32_t)rb.nb, (uint32_t)rb.nq);
                else
                    fcc_bwd_prep_vec_kernel<T, int64_t, NC><<<grid, 256, 0, st>>>(p, (float *)Lbuf, (float *)Dbuf,
                                                                                  rb.nb, rb.nq);
            };
            const int D = (int)p.a.D;
            if (D <= 64) launch(std::integral_constant<int, 1>{});
            else if (D <= 128) launch(std::integral_constant<int, 2>{});
            else if (D <= 192) launch(std::integral_constant<int, 3>{});
            else launch(std::integral_constant<int, 4>{});
            FCC_CHECK_LAUNCH("fcc_bwd_prep_vec_kernel");
            return FLASHC_OK;
        }
    }
    fcc_bwd_prep_kernel<T><<<(unsigned)blocks, 256, 0, fcc_stream(p.a.stream)>>>(p, (A *)Lbuf, (A *)Dbuf, rb.nb,
                                                                                 rb.nq);
    FCC_CHECK_LAUNCH("fcc_bwd_prep_kernel");
    return FLASHC_OK;
}

flashc_status fcc_bwd_prep_run(const fcc_attn &p, void *Lbuf, void *Dbuf) {
    const fcc_rowbuf rb = fcc_rowbuf_of(p.a);
    if (rb.nb * p.a.Hq * rb.nq == 0) return FLASHC_OK;
    FCC_DISPATCH_DTYPE(p.a.dtype, return fcc_bwd_prep_typed<T>(p, Lbuf, Dbuf));
    return FLASHC_OK;
}

flashc_status fcc_bwd_dsinks_run(const fcc_attn &p, const void *Lbuf, const void *Dbuf) {
    if (!p.a.sink_logits) return FLASHC_OK;
    /* B·Sq = 0 still runs: dsinks = 0. */
    cudaStream_t st = fcc_stream(p.a.stream);
    if (p.a.dtype == FLASHC_F64)
        fcc_bwd_dsinks_kernel<double><<<(unsigned)p.a.Hq, 256, 0, st>>>(p, (const double *)Lbuf, (const double *)Dbuf);
    else
        fcc_bwd_dsinks_kernel<float><<<(unsigned)p.a.Hq, 256, 0, st>>>(p, (const float *)Lbuf, (const float *)Dbuf);
    FCC_CHECK_LAUNCH("fcc_bwd_dsinks_kernel");
    return FLASHC_OK;
}

/* Shared memory of the dK/dV kernel (K, V, Q, dO tiles, P, dS, L, Δ, RAG's
 * key-row tables) and of the dQ kernel (Q, dO, K, V tiles, dS, the tables). */
template <class A, int DP, bool RAG, bool SMALL> static constexpr size_t fcc_dkdv_generic_smem() {
    using C = fcc_gen_cfg<A, DP, SMALL>;
    return (size_t)(2 * C::BN * C::LD + 2 * C::BM * C::LD + 2 * C::BM * C::LP + 2 * C::BM) * sizeof(A) +
           (RAG ? 2 * C::BN * sizeof(int64_t) : 0);
}
template <class A, int DP, bool RAG, bool SMALL> static constexpr size_t fcc_dq_generic_smem() {
    using C = fcc_gen_cfg<A, DP, SMALL>;
    return (size_t)(2 * C::BM * C::LD + 2 * C::BN * C::LD + C::BM * C::LP) * sizeof(A) +
           (RAG ? 2 * C::BN * sizeof(int64_t) : 0);
}

template <class T, int DP, int V, bool RAG, bool SMALL>
static flashc_status fcc_bwd_dkdv_launch(const fcc_attn &p, const typename fcc_type<T>::acc *Lbuf,
                                         const typename fcc_type<T>::acc *Dbuf) {
    using C = fcc_gen_cfg<typename fcc_type<T>::acc, DP, SMALL>;
    const int64_t nkb = (p.a.Sk + C::BN - 1) / C::BN;
    return fcc_gen_launch(fcc_bwd_dkdv_kernel<T, DP, V, RAG, SMALL>, nkb * p.a.Hkv * p.a.B,
                          fcc_dkdv_generic_smem<typename fcc_type<T>::acc, DP, RAG, SMALL>(), fcc_stream(p.a.stream),
                          "attn_bwd_generic (dK/dV)", p, nkb, Lbuf, Dbuf);
}
template <class T, int DP, int V, bool RAG, bool SMALL>
static flashc_status fcc_bwd_dq_launch(const fcc_attn &p, const typename fcc_type<T>::acc *Lbuf,
                                       const typename fcc_type<T>::acc *Dbuf) {
    using C = fcc_gen_cfg<typename fcc_type<T>::acc, DP, SMALL>;
    const int64_t nqb = (p.a.Sq + C::BM - 1) / C::BM;
    return fcc_gen_launch(fcc_bwd_dq_kernel<T, DP, V, RAG, SMALL>, nqb * p.a.Hq * p.a.B,
                          fcc_dq_generic_smem<typename fcc_type<T>::acc, DP, RAG, SMALL>(), fcc_stream(p.a.stream),
                          "attn_bwd_generic (dQ)", p, nqb, Lbuf, Dbuf);
}

/* Each kernel in the tile shape the plan's shared-memory limit takes (fcc_gen_pick). */
template <class T, int DP, int V, bool RAG>
static flashc_status fcc_bwd_generic_launch(const fcc_attn &p, const typename fcc_type<T>::acc *Lbuf,
                                            const typename fcc_type<T>::acc *Dbuf) {
    using A = typename fcc_type<T>::acc;
    if (p.a.Sk > 0)
        FCC_TRY(fcc_gen_pick(p, fcc_dkdv_generic_smem<A, DP, RAG, false>(), fcc_dkdv_generic_smem<A, DP, RAG, true>(),
                             "attn_bwd_generic (dK/dV)", [&](auto small) {
                                 return fcc_bwd_dkdv_launch<T, DP, V, RAG, decltype(small)::value>(p, Lbuf, Dbuf);
                             }));
    if (p.a.Sq > 0)
        FCC_TRY(fcc_gen_pick(p, fcc_dq_generic_smem<A, DP, RAG, false>(), fcc_dq_generic_smem<A, DP, RAG, true>(),
                             "attn_bwd_generic (dQ)", [&](auto small) {
                                 return fcc_bwd_dq_launch<T, DP, V, RAG, decltype(small)::value>(p, Lbuf, Dbuf);
                             }));
    return FLASHC_OK;
}

template <class T> static flashc_status fcc_bwd_generic_typed(const fcc_attn &p) {
    using A = typename fcc_type<T>::acc;
    cudaStream_t st = fcc_stream(p.a.stream);
    const fcc_rowbuf rb = fcc_rowbuf_of(p.a);
    const size_t nrows = (size_t)(rb.nb * p.a.Hq * rb.nq);
    A *Lbuf = nullptr, *Dbuf = nullptr;
    if (nrows > 0) {
        FCC_CHECK(fcc_scratch_alloc((void **)&Lbuf, 2 * nrows * sizeof(A), st));
        Dbuf = Lbuf + nrows;
    }
    flashc_status s = fcc_bwd_prep_run(p, Lbuf, Dbuf);
    if (s == FLASHC_OK) s = fcc_bwd_dsinks_run(p, Lbuf, Dbuf);
    if (s == FLASHC_OK) {
        const bool rag = fc_attn_is_ragged(&p.a);
        FCC_DISPATCH_DP(p.a.D, s = fcc_score_dispatch<FCC_SCORE_FEW>(fc_score_mode(&p.score), [&](auto v) {
            return rag ? fcc_bwd_generic_launch<T, DP, decltype(v)::value, true>(p, Lbuf, Dbuf)
                       : fcc_bwd_generic_launch<T, DP, decltype(v)::value, false>(p, Lbuf, Dbuf);
        }));
    }
    /* Stream-ordered: freed after the kernels above have run. */
    if (Lbuf) fcc_scratch_free(Lbuf, st);
    return s;
}

flashc_status fcc_bwd_generic_run(const fcc_attn &p) {
    if (p.a.B == 0 || p.a.Hq == 0) return FLASHC_OK;
    FCC_DISPATCH_DTYPE(p.a.dtype, return fcc_bwd_generic_typed<T>(p));
    return FLASHC_OK;
}
