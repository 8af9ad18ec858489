/*
 * attn_generic_fwd.cu — generic (SIMT) attention forward, every dtype and
 * every semantic of flashc.h; the fallback for whatever the tensor-core
 * kernels decline.
 *
 *   q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D] -> o [B, Sq, Hq, D], lse [B, Hq, Sq]
 *
 * One block per (query block of BM rows, head, batch), folded into gridDim.x
 * (y/z are limited to 65535). Key tiles of BN columns stream through shared
 * memory; an online softmax keeps per-row max m and sum l in registers:
 *   m' = max(m, max_j x_ij),  l' = l·e^{m−m'} + Σ_j e^{x_ij−m'},
 *   O' = O·e^{m−m'} + Σ_j e^{x_ij−m'} v_j.
 * Masking is by loop bounds (fcc_key_segments) plus a per-element check
 * against fcc_visible_range, so windows cost O(window). F32 stays in fp32
 * (no TF32), F64 in fp64, F16/BF16 compute in fp32 with P rounded to the
 * storage type before P·V.
 */
#include "attn_generic.cuh"

#include <limits.h>

template <class T, int DP>
__global__ void __launch_bounds__(256) fcc_attn_fwd_kernel(const fc_attn a, int64_t nqb) {
    using A = typename fcc_type<T>::acc;
    using C = fcc_gen_cfg<A, DP>;
    constexpr int BM = C::BM, BN = C::BN, RM = C::RM, RN = C::RN, CD = C::CD, LD = C::LD,
                  LP = C::LP;
    extern __shared__ __align__(16) unsigned char fcc_smem_raw[];
    A *Qs = reinterpret_cast<A *>(fcc_smem_raw); /* [BM][LD] */
    A *Ks = Qs + BM * LD;                         /* [BN][LD] */
    A *Vs = Ks + BN * LD;                         /* [BN][LD] */
    A *Ps = Vs + BN * LD;                         /* [BM][LP] */

    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    int64_t bid = blockIdx.x;
    const int64_t qb = nqb - 1 - bid % nqb; /* heaviest (causal) blocks first */
    bid /= nqb;
    const int64_t h = bid % a.Hq, b = bid / a.Hq;
    const int64_t hk = h / (a.Hq / a.Hkv);
    const int64_t i0 = qb * BM;
    const int ni = (int)min((int64_t)BM, a.Sq - i0);
    const int D = (int)a.D;

    const T *qp = (const T *)a.q + b * a.sq[0] + i0 * a.sq[1] + h * a.sq[2];
    const T *kp = (const T *)a.k + b * a.sk[0] + hk * a.sk[2];
    const T *vp = (const T *)a.v + b * a.sv[0] + hk * a.sv[2];
    fcc_load_tile<T, DP, BM>(Qs, qp, a.sq[1], a.sq[3], ni, D);

    int64_t se[RM], lo[RM], hi[RM];
#pragma unroll
    for (int r = 0; r < RM; ++r) {
        const int ir = ty + 16 * r;
        if (ir < ni) fcc_visible_range(a, i0 + ir, &se[r], &lo[r], &hi[r]);
        else se[r] = lo[r] = hi[r] = 0;
    }
    const A NEG_INF = fcc_neg_inf<A>();
    const A scale = (A)a.scale;
    A m[RM], l[RM], o[RM][CD];
#pragma unroll
    for (int r = 0; r < RM; ++r) {
        m[r] = NEG_INF;
        l[r] = A(0);
#pragma unroll
        for (int c = 0; c < CD; ++c) o[r][c] = A(0);
    }

    const fcc_segs g = fcc_key_segments(a, i0, ni);
    for (int sg = 0; sg < 2; ++sg) {
        for (int64_t j0 = g.s[sg]; j0 < g.e[sg]; j0 += BN) {
            const int nj = (int)min((int64_t)BN, g.e[sg] - j0);
            __syncthreads(); /* previous tile's K/V/P reads are done */
            fcc_load_tile<T, DP, BN>(Ks, kp + j0 * a.sk[1], a.sk[1], a.sk[3], nj, D);
            fcc_load_tile<T, DP, BN>(Vs, vp + j0 * a.sv[1], a.sv[1], a.sv[3], nj, D);
            __syncthreads();

            /* S = Q Kᵀ for this thread's RM × RN scores */
            A s[RM][RN];
#pragma unroll
            for (int r = 0; r < RM; ++r)
#pragma unroll
                for (int c = 0; c < RN; ++c) s[r][c] = A(0);
#pragma unroll 4
            for (int d = 0; d < D; ++d) {
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

            /* mask, online-softmax update, P to shared memory */
#pragma unroll
            for (int r = 0; r < RM; ++r) {
                A mt = NEG_INF;
#pragma unroll
                for (int c = 0; c < RN; ++c) {
                    const int jc = tx + 16 * c;
                    const int64_t j = j0 + jc;
                    const bool vis = jc < nj && (j < se[r] || (j >= lo[r] && j < hi[r]));
                    s[r][c] = vis ? s[r][c] * scale : NEG_INF;
                    mt = fmax(mt, s[r][c]);
                }
                mt = fcc_row_max16(mt);
                const A mn = fmax(m[r], mt);
                A alpha = A(1), rs = A(0);
                if (mn != NEG_INF) {
                    alpha = fcc_exp(m[r] - mn); /* 0 when m was −inf */
#pragma unroll
                    for (int c = 0; c < RN; ++c) {
                        const A p = fcc_exp(s[r][c] - mn); /* 0 for masked (−inf) */
                        rs += p;
                        Ps[(ty + 16 * r) * LP + tx + 16 * c] = fcc_round_to<T>(p);
                    }
                } else {
#pragma unroll
                    for (int c = 0; c < RN; ++c) Ps[(ty + 16 * r) * LP + tx + 16 * c] = A(0);
                }
                rs = fcc_row_sum16(rs);
                l[r] = l[r] * alpha + rs;
                m[r] = mn;
#pragma unroll
                for (int c = 0; c < CD; ++c) o[r][c] *= alpha;
            }
            __syncthreads();

            /* O += P V */
            for (int jj = 0; jj < nj; ++jj) {
                A pr[RM], vv[CD];
#pragma unroll
                for (int r = 0; r < RM; ++r) pr[r] = Ps[(ty + 16 * r) * LP + jj];
#pragma unroll
                for (int c = 0; c < CD; ++c) vv[c] = Vs[jj * LD + tx + 16 * c];
#pragma unroll
                for (int r = 0; r < RM; ++r)
#pragma unroll
                    for (int c = 0; c < CD; ++c) o[r][c] = fma(pr[r], vv[c], o[r][c]);
            }
        }
    }

    /* Finalise: fold in the sink logit (one more denominator term with no
     * value), then O = acc / l and L = m + log l; empty rows give O = 0 and
     * L = −inf (L = s_h with a sink logit). */
    const bool has_sink = a.sink_logits != nullptr;
    const A sink = has_sink ? ((const A *)a.sink_logits)[h] : NEG_INF;
    T *op = (T *)a.o + b * a.so[0] + h * a.so[2];
#pragma unroll
    for (int r = 0; r < RM; ++r) {
        const int ir = ty + 16 * r;
        A mm = m[r], ll = l[r], rescale = A(1);
        if (has_sink && sink != NEG_INF) {
            /* acc and l are relative to e^{m}; the sink may raise the max
             * to M, so both are rescaled by e^{m−M} (0 when m = −inf). */
            const A M = fmax(mm, sink);
            rescale = fcc_exp(mm - M);
            ll = ll * rescale + fcc_exp(sink - M);
            mm = M;
        }
        const A inv = ll > A(0) ? rescale / ll : A(0);
        const A L = ll > A(0) ? mm + fcc_log(ll) : NEG_INF;
        if (ir < ni) {
            const int64_t i = i0 + ir;
#pragma unroll
            for (int c = 0; c < CD; ++c) {
                const int d = tx + 16 * c;
                if (d < D) op[i * a.so[1] + d * a.so[3]] = fcc_type<T>::from(o[r][c] * inv);
            }
            if (a.lse && tx == 0)
                ((A *)a.lse)[b * a.slse[0] + h * a.slse[1] + i * a.slse[2]] = L;
        }
    }
}

template <class T, int DP> static flashc_status fcc_launch_fwd(const fc_attn *a) {
    using A = typename fcc_type<T>::acc;
    using C = fcc_gen_cfg<A, DP>;
    const size_t smem = (size_t)(C::BM * C::LD + 2 * C::BN * C::LD + C::BM * C::LP) * sizeof(A);
    auto kern = fcc_attn_fwd_kernel<T, DP>;
    FCC_TRY(fcc_set_smem((const void *)kern, smem, "attn_fwd_generic"));
    const int64_t nqb = (a->Sq + C::BM - 1) / C::BM;
    const int64_t blocks = nqb * a->Hq * a->B;
    if (blocks > INT_MAX)
        return fcc_error(FLASHC_ERR_UNSUPPORTED,
                         "attn_fwd_generic: %lld blocks (B·Hq·⌈Sq/%d⌉) exceed the grid limit",
                         (long long)blocks, C::BM);
    kern<<<(unsigned)blocks, C::THREADS, smem, fcc_stream(a->stream)>>>(*a, nqb);
    FCC_CHECK_LAUNCH("fcc_attn_fwd_kernel");
    return FLASHC_OK;
}

flashc_status fcc_attn_fwd_generic(const fc_attn *a) {
    if (a->Sq == 0 || a->B == 0 || a->Hq == 0) return FLASHC_OK;
    FCC_DISPATCH_DTYPE(a->dtype, FCC_DISPATCH_DP(a->D, return fcc_launch_fwd<T, DP>(a)));
    return FLASHC_OK;
}
