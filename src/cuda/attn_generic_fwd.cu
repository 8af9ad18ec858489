/*
 * attn_generic_fwd.cu — generic (SIMT) attention forward, every dtype and
 * every semantic of flashc.h; the kernel the plan falls back to for
 * whatever the tensor-core kernels do not support.
 *
 *   q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D] -> o [B, Sq, Hq, D], lse [B, Hq, Sq]
 *
 * One block per (query block of BM rows, head, batch), folded into gridDim.x
 * (y/z are limited to 65535). Key tiles of BN columns stream through shared
 * memory; an online softmax keeps per-row max m and sum l in registers:
 *   m' = max(m, max_j x_ij),  l' = l·e^{m−m'} + Σ_j e^{x_ij−m'},
 *   O' = O·e^{m−m'} + Σ_j e^{x_ij−m'} v_j.
 * Natural units throughout. x_ij is scale·<q_i, k_j> (plain path) or the
 * score pipeline of attn_score.h (template V, the variant of attn_score.cuh:
 * softcap with tanhf / tanh, ALiBi), then −inf where key j is not visible (attn_mask.h). Masking is by
 * loop bounds (fc_block_keysegs) plus the per-element test, so windows cost
 * O(window); rows end with fc_row_finish(f). F32 stays in fp32 (no TF32),
 * F64 in fp64, F16/BF16 compute in fp32 with P rounded to the storage type
 * before P·V. Ragged problems: the RAG instantiation (attn_ragged.cuh).
 */
#include "attn_generic.cuh"

#include <limits.h>

/* The row finish (attn_softmax.h) in the accumulation type. */
__device__ __forceinline__ void fcc_row_finish(float M, float l, bool has_sink, float s, float &f, float &L) {
    fc_row_finishf(M, l, has_sink, s, &f, &L);
}
__device__ __forceinline__ void fcc_row_finish(double M, double l, bool has_sink, double s, double &f, double &L) {
    fc_row_finish(M, l, has_sink, s, &f, &L);
}

/* The logits of this thread's RM × RN scores of the key tile [j0, j0 + nj)
 * from raw dots s (in place): x = scale·s (plain) or the score pipeline
 * (variant V ≠ plain), −inf where the key is not visible (FC_KEY_VISIBLE) or past nj.
 * sc: the score part of the block's sequence (attn_ragged.cuh). */
template <int V, class A, class M, int RM, int RN>
__device__ __forceinline__ void fcc_fwd_logits(A (&s)[RM][RN], const fcc_attn &p, const fc_score_params &sc,
                                               const M &mod, int64_t i0, int ty, int tx, int64_t j0, int nj,
                                               const int64_t (&se)[RM], const int64_t (&lo)[RM],
                                               const int64_t (&hi)[RM]) {
    const A scale = (A)p.a.scale;
#pragma unroll
    for (int r = 0; r < RM; ++r)
#pragma unroll
        for (int c = 0; c < RN; ++c) {
            const int jc = tx + 16 * c;
            const int64_t i = i0 + ty + 16 * r, j = j0 + jc;
            A x;
            if constexpr (V != FC_SCORE_PLAIN) {
                A dg; /* the backward's factor, unused here */
                x = fcc_gen_score<V>(mod, s[r][c], (A)fc_alibi_dist(&sc, i, j), dg);
            } else {
                x = s[r][c] * scale;
            }
            s[r][c] = jc < nj && FC_KEY_VISIBLE(se[r], lo[r], hi[r], j) ? x : fcc_neg_inf<A>();
        }
}

/* Online-softmax update of row r (the 16 lanes sharing ty) over the tile's
 * logits x[RN]: m, l and the output row o[CD] rescaled, P = e^{x − m}
 * (rounded to T) written to the P tile row prow. */
template <class T, class A, int RN, int CD>
__device__ __forceinline__ void fcc_fwd_softmax_row(const A (&x)[RN], A &m, A &l, A (&o)[CD], A *prow, int tx) {
    const A NEG_INF = fcc_neg_inf<A>();
    A mt = NEG_INF;
#pragma unroll
    for (int c = 0; c < RN; ++c) mt = fcc_max_nan(mt, x[c]);
    mt = fcc_row_max16(mt);
    /* A NaN score makes the tile's max NaN, and from it every P and α: l, O
     * and the running max of the row stay NaN (so does L: fc_row_finish). */
    const A mn = fcc_max_nan(m, mt);
    A alpha = A(1), rs = A(0);
    if (mn != NEG_INF) {
        alpha = fcc_exp(m - mn); /* 0 when m was −inf */
#pragma unroll
        for (int c = 0; c < RN; ++c) {
            const A pe = fcc_exp(x[c] - mn); /* 0 for masked (−inf) */
            rs += pe;
            prow[tx + 16 * c] = fcc_round_to<T>(pe);
        }
    } else {
#pragma unroll
        for (int c = 0; c < RN; ++c) prow[tx + 16 * c] = A(0);
    }
    rs = fcc_row_sum16(rs);
    l = l * alpha + rs;
    m = mn;
#pragma unroll
    for (int c = 0; c < CD; ++c) o[c] *= alpha;
}

/* S += Q Kᵀ over dims d < dn for this thread's RM × RN scores: rows
 * ty + 16r of Qs, key columns tx + 16c of Ks (pitch LD), in d order. */
template <class A, int RM, int RN, int LD>
__device__ __forceinline__ void fcc_tile_qk(const A *Qs, const A *Ks, int dn, int ty, int tx, A (&s)[RM][RN]) {
#pragma unroll 4
    for (int d = 0; d < dn; ++d) {
        A qv[RM], kv[RN];
#pragma unroll
        for (int r = 0; r < RM; ++r) qv[r] = Qs[(ty + 16 * r) * LD + d];
#pragma unroll
        for (int c = 0; c < RN; ++c) kv[c] = Ks[(tx + 16 * c) * LD + d];
#pragma unroll
        for (int r = 0; r < RM; ++r)
#pragma unroll
            for (int c = 0; c < RN; ++c) s[r][c] = fma(qv[r], kv[c], s[r][c]);
    }
}

/* RAG: ragged problems (attn_ragged.cuh): blockIdx.x over the B sequences
 * and the longest one's query blocks; K/V tiles through key-row tables.
 * SMALL (fcc_gen_cfg): Q, K and V pass through shared memory one chunk of
 * DC head dims at a time (S over the chunks in order, then O's chunks). */
template <class T, int DP, int V, bool RAG, bool SMALL>
__global__ void __launch_bounds__(256) fcc_attn_fwd_kernel(const __grid_constant__ fcc_attn p, int64_t nqb) {
    using A = typename fcc_type<T>::acc;
    using C = fcc_gen_cfg<A, DP, SMALL>;
    constexpr int BM = C::BM, BN = C::BN, RM = C::RM, RN = C::RN, CD = C::CD, LD = C::LD,
                  LP = C::LP, DC = C::DC, NCH = C::NCH;
    extern __shared__ __align__(16) unsigned char fcc_smem_raw[];
    A *Qs = reinterpret_cast<A *>(fcc_smem_raw); /* [BM][LD] */
    A *Ks = Qs + BM * LD;                         /* [BN][LD] */
    A *Vs = Ks + BN * LD;                         /* [BN][LD] */
    A *Ps = Vs + BN * LD;                         /* [BM][LP] */
    int64_t *tK = reinterpret_cast<int64_t *>(Ps + BM * LP); /* RAG: [BN] key-row offsets of the K tile */
    int64_t *tV = tK + BN;                                   /* RAG: [BN] ... of the V tile */

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
    const T *kp = (const T *)a.k + b * a.sk[0] + hk * a.sk[2]; /* dense only */
    const T *vp = (const T *)a.v + b * a.sv[0] + hk * a.sv[2];
    if constexpr (NCH == 1) fcc_load_tile<T, DP, BM>(Qs, qp, a.sq[1], a.sq[3], ni, D);
    /* Head dims [c0, c0 + DC) of the K (V) rows of the tile at j0 into Ks (Vs). */
    auto load_k = [&](int64_t j0, int nj, int c0) {
        fcc_load_key_chunk<T, DC, BN, RAG>(Ks, (const T *)a.k, kp, tK, a.sk, j0, nj, c0, D);
    };
    auto load_v = [&](int64_t j0, int nj, int c0) {
        fcc_load_key_chunk<T, DC, BN, RAG>(Vs, (const T *)a.v, vp, tV, a.sv, j0, nj, c0, D);
    };

    int64_t se[RM], lo[RM], hi[RM]; /* this thread's rows ty + 16·r: their visible key ranges */
    fcc_rows_visible(mask, i0, ni, ty, se, lo, hi);
    A m[RM], l[RM], o[RM][CD];
#pragma unroll
    for (int r = 0; r < RM; ++r) {
        m[r] = fcc_neg_inf<A>();
        l[r] = A(0);
#pragma unroll
        for (int c = 0; c < CD; ++c) o[r][c] = A(0);
    }

    /* The keys some row of the block may see: ≤ 2 key segments. */
    fc_keysegs ks;
    fc_block_keysegs(&mask, i0, i0 + ni - 1, &ks);
    for (int sg = 0; sg < ks.n; ++sg) {
        for (int64_t j0 = ks.s0[sg]; j0 < ks.s1[sg]; j0 += BN) {
            const int nj = (int)min((int64_t)BN, ks.s1[sg] - j0);
            __syncthreads(); /* previous tile's K/V/P reads are done */
            if constexpr (RAG) {
                fcc_kv_rows<BN, 256>(tK, tV, a, sq, b, hk, j0, false, tid);
                __syncthreads();
            }

            /* S = Q Kᵀ for this thread's RM × RN scores */
            A s[RM][RN];
#pragma unroll
            for (int r = 0; r < RM; ++r)
#pragma unroll
                for (int c = 0; c < RN; ++c) s[r][c] = A(0);
            if constexpr (NCH == 1) {
                load_k(j0, nj, 0);
                load_v(j0, nj, 0);
                __syncthreads();
                fcc_tile_qk<A, RM, RN, LD>(Qs, Ks, D, ty, tx, s);
            } else {
                for (int c0 = 0; c0 < D; c0 += DC) {
                    __syncthreads(); /* the previous chunk's reads are done */
                    fcc_load_tile<T, DC, BM>(Qs, qp + c0 * a.sq[3], a.sq[1], a.sq[3], ni, D - c0);
                    load_k(j0, nj, c0);
                    __syncthreads();
                    fcc_tile_qk<A, RM, RN, LD>(Qs, Ks, min(DC, D - c0), ty, tx, s);
                }
            }

            fcc_fwd_logits<V>(s, p, sp.score(p), mod, i0, ty, tx, j0, nj, se, lo, hi);
#pragma unroll
            for (int r = 0; r < RM; ++r) fcc_fwd_softmax_row<T>(s[r], m[r], l[r], o[r], Ps + (ty + 16 * r) * LP, tx);

            /* O += P V */
            fcc_tile_acc_pv_chunked<C>(fcc_tile_all_visible(mask, i0, ni, j0, nj), Ps, Vs, nj, D, ty, tx, o,
                                       [&](int c0) { load_v(j0, nj, c0); });
        }
    }

    /* Finish (fc_row_finish(f): sink logit, empty rows → O = 0, L = −inf or s_h). */
    const bool has_sink = a.sink_logits != nullptr;
    const A sink = (A)fc_attn_sink(&a, h);
    T *op = (T *)a.o + fc_attn_row_offset(&sq, a.so, 0, h);
#pragma unroll
    for (int r = 0; r < RM; ++r) {
        const int ir = ty + 16 * r;
        if (ir >= ni) continue;
        A f, L;
        fcc_row_finish(m[r], l[r], has_sink, sink, f, L);
        const int64_t i = i0 + ir;
#pragma unroll
        for (int c = 0; c < CD; ++c) {
            const int d = tx + 16 * c;
            if (d < D) op[i * a.so[1] + d * a.so[3]] = fcc_type<T>::from(o[r][c] * f);
        }
        if (a.lse && tx == 0) ((A *)a.lse)[fc_attn_lse_offset(&sq, a.slse, h, i)] = L;
    }
}

/* Shared memory of the kernel: Q, K, V tiles, P, RAG's key-row tables. */
template <class A, int DP, bool RAG, bool SMALL> static constexpr size_t fcc_fwd_generic_smem() {
    using C = fcc_gen_cfg<A, DP, SMALL>;
    return (size_t)(C::BM * C::LD + 2 * C::BN * C::LD + C::BM * C::LP) * sizeof(A) + (RAG ? 2 * C::BN * sizeof(int64_t) : 0);
}

template <class T, int DP, int V, bool RAG, bool SMALL> static flashc_status fcc_launch_fwd(const fcc_attn &p) {
    using A = typename fcc_type<T>::acc;
    const int64_t nqb = (p.a.Sq + fcc_gen_cfg<A, DP, SMALL>::BM - 1) / fcc_gen_cfg<A, DP, SMALL>::BM;
    return fcc_gen_launch(fcc_attn_fwd_kernel<T, DP, V, RAG, SMALL>, nqb * p.a.Hq * p.a.B,
                          fcc_fwd_generic_smem<A, DP, RAG, SMALL>(), fcc_stream(p.a.stream), "attn_fwd_generic", p, nqb);
}
template <class T, int DP, int V, bool RAG> static flashc_status fcc_launch_fwd_fit(const fcc_attn &p) {
    using A = typename fcc_type<T>::acc;
    return fcc_gen_pick(p, fcc_fwd_generic_smem<A, DP, RAG, false>(), fcc_fwd_generic_smem<A, DP, RAG, true>(),
                        "attn_fwd_generic", [&](auto small) { return fcc_launch_fwd<T, DP, V, RAG, decltype(small)::value>(p); });
}

flashc_status fcc_fwd_generic_run(const fcc_attn &p) {
    const fc_attn &a = p.a;
    if (a.Sq == 0 || a.B == 0 || a.Hq == 0) return FLASHC_OK;
    /* The plain path scales before the max, so any sign of scale is fine there. */
    const int mode = fc_score_mode(&p.score);
    const bool rag = fc_attn_is_ragged(&a);
    FCC_DISPATCH_DTYPE(a.dtype, FCC_DISPATCH_DP(a.D, return fcc_score_dispatch<FCC_SCORE_FEW>(mode, [&](auto v) {
        return rag ? fcc_launch_fwd_fit<T, DP, decltype(v)::value, true>(p)
                   : fcc_launch_fwd_fit<T, DP, decltype(v)::value, false>(p);
    })));
    return FLASHC_OK;
}
