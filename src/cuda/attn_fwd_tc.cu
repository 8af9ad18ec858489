/*
 * attn_fwd_tc.cu — tensor-core attention forward for F16/BF16 (sm_80+).
 *
 * FlashAttention-2 schedule on mma.sync m16n8k16:
 *   one CTA per (query block of BM rows, query head, batch), NW warps, each
 *   warp owning MT m16 tiles (16·MT query rows); K/V tiles of BN keys stream
 *   through shared memory by cp.async, the V load overlapping QK^T and the
 *   next K load overlapping softmax + PV; S and O stay in fp32 registers;
 *   online softmax in the exp2 domain with scale·log2(e) folded into one FFMA;
 *   P is rounded to the input type before PV (as FlashAttention does) while
 *   the row sums use the fp32 P.
 *
 *   q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D], o like q, lse [B, Hq, Sq] (f32);
 *   any strides with stride(d) = 1; D ≤ 256 padded with zeros to HD.
 *
 * Masking (flashc.h, fc_visible_range): key tiles are chosen by loop bounds
 * from the visible ranges of the CTA's first and last rows (a window costs
 * O(window)); tiles visible to every row of the CTA skip per-element masks.
 * Shared-memory rows are padded by 16 bytes (row pitch HD + 8 elements), so
 * the 8 row addresses of every ldmatrix phase hit distinct bank quads.
 */
#include "tc_common.cuh"

#include "attn_tc.h"

#include <math.h>

namespace fctc {

/* Compile-time tile shape of one forward instantiation. */
template <int HD_, int NW_, int MT_, int BN_, bool QREG_> struct FwdTraits {
    static constexpr int HD = HD_;     /* padded head dim */
    static constexpr int NW = NW_;     /* warps per CTA */
    static constexpr int MT = MT_;     /* m16 tiles per warp */
    static constexpr int BN = BN_;     /* keys per tile */
    static constexpr bool QREG = QREG_;/* Q fragments held in registers */
    static constexpr int BM = 16 * MT * NW;
    static constexpr int NT = 32 * NW;
    static constexpr int LD = HD + 8;  /* smem row pitch, elements */
    static constexpr int SMEM_ELEMS = (BM + 2 * BN) * LD;
    static_assert(HD % 16 == 0 && HD >= 16 && HD <= 256, "HD: multiple of 16 in [16, 256]");
    static_assert(BN % 16 == 0 && BN >= 16, "BN: multiple of 16");
    static_assert(MT >= 1 && MT <= 2 && NW >= 1 && NW <= 8, "MT 1..2, NW 1..8");
    static_assert((LD * 2) % 16 == 0, "rows must stay 16-byte aligned for cp.async/ldmatrix");
};

/* Everything the kernel needs, by value (normalised from fc_attn on the host). */
struct FwdParams {
    const void *q, *k, *v;
    void *o;
    float *lse;
    const float *sink;
    int64_t sq0, sq1, sq2, sk0, sk1, sk2, sv0, sv1, sv2, so0, so1, so2;
    int64_t sl0, sl1, sl2;
    int64_t B;
    int Sq, Sk, Hq, D, group; /* group = Hq / Hkv */
    int nM;                   /* query blocks per (b, h) */
    int64_t total;            /* nM · Hq · B virtual blocks */
    int64_t wl, wr, n_sink;
    float sl2e;               /* scale · log2(e) */
    float scale;
    int vec;                  /* 1: 16-byte cp.async path (D % 8 == 0, strides % 8 == 0, aligned) */
};

/* fc_visible_range (flashc_internal.h) on the fields of FwdParams, int results. */
__device__ __forceinline__ void vis_range(const FwdParams &p, int64_t i, int &s, int &lo, int &hi) {
    int64_t s6, l6, h6;
    const fc_mask mk = {p.Sq, p.Sk, p.wl, p.wr, p.n_sink};
    fc_visible_keys(&mk, i, &s6, &l6, &h6);
    s = (int)s6;
    lo = (int)l6;
    hi = (int)h6;
}

/* Loads rows [row0, row0 + R) of a [*, D] slice (row stride rs) into smem
 * rows of pitch LD, zero-filling rows ≥ nrows and columns ≥ D up to HD. */
template <typename T, class K, int R>
__device__ __forceinline__ void load_tile(T *s, const T *g, int64_t rs, int row0, int nrows,
                                          int D, bool vec, int tid) {
    constexpr int CPR = K::HD / 8; /* 16-byte chunks per row */
    if (vec) {
#pragma unroll
        for (int idx = tid; idx < R * CPR; idx += K::NT) {
            const int r = idx / CPR, c = idx % CPR;
            const bool ok = (row0 + r < nrows) && (c * 8 < D);
            const T *src = ok ? g + (int64_t)(row0 + r) * rs + c * 8 : g;
            cp_async16(smem_u32(s + r * K::LD + c * 8), src, ok);
        }
    } else {
        /* Unaligned / odd D: plain loads, still zero-filled. Visible to the
         * other warps after the same barrier that follows cp.async waits. */
        for (int idx = tid; idx < R * CPR; idx += K::NT) {
            const int r = idx / CPR, c = idx % CPR;
            const bool rok = row0 + r < nrows;
            const T *src = g + (int64_t)(row0 + r) * rs;
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const int d = c * 8 + e;
                s[r * K::LD + d] = (rok && d < D) ? src[d] : Ops<T>::from_f(0.f);
            }
        }
    }
}

template <typename T, class K>
__global__ void __launch_bounds__(K::NT) attn_fwd_tc_kernel(const FwdParams p) {
    constexpr int HD = K::HD, BN = K::BN, BM = K::BM, LD = K::LD, MT = K::MT;
    constexpr int NKK = HD / 16; /* k16 chunks of QK^T */
    constexpr int NJ = BN / 8;   /* n8 tiles of S */
    constexpr int ND = HD / 8;   /* n8 tiles of O */
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *sQ = reinterpret_cast<T *>(smem_raw);
    T *sK = sQ + BM * LD;
    T *sV = sK + BN * LD;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const T *Qg = static_cast<const T *>(p.q);
    const T *Kg = static_cast<const T *>(p.k);
    const T *Vg = static_cast<const T *>(p.v);
    T *Og = static_cast<T *>(p.o);

    /* Per-lane ldmatrix offsets (elements), see tc_common.cuh for layouts. */
    const int q_off = (warp * MT * 16 + (lane & 15)) * LD + (lane >> 4) * 8;
    const int k_off = ((lane >> 4) * 8 + (lane & 7)) * LD + ((lane >> 3) & 1) * 8;
    const int v_off = (((lane >> 3) & 1) * 8 + (lane & 7)) * LD + (lane >> 4) * 8;
    const uint32_t sQa = smem_u32(sQ), sKa = smem_u32(sK), sVa = smem_u32(sV);

    for (int64_t vb = blockIdx.x; vb < p.total; vb += gridDim.x) {
        /* Heaviest (last, under causal masks) query blocks first. */
        const int mb = p.nM - 1 - (int)(vb % p.nM);
        const int64_t bh = vb / p.nM;
        const int h = (int)(bh % p.Hq);
        const int64_t b = bh / p.Hq;
        const int hk = h / p.group;
        const int m0 = mb * BM;
        const int mlast = min(m0 + BM, p.Sq) - 1;

        const T *Qb = Qg + b * p.sq0 + (int64_t)h * p.sq2;
        const T *Kb = Kg + b * p.sk0 + (int64_t)hk * p.sk2;
        const T *Vb = Vg + b * p.sv0 + (int64_t)hk * p.sv2;

        /* Key tiles: [0, ceil(s1/BN)) for sink tokens, then the window. */
        int s0, lo0, hi0, s1, lo1, hi1;
        vis_range(p, m0, s0, lo0, hi0);
        vis_range(p, mlast, s1, lo1, hi1);
        const int ta1 = (s1 + BN - 1) / BN;
        const int tb1 = (hi1 + BN - 1) / BN;
        const int tb0 = max(lo0 / BN, ta1);
        const int na = ta1, nb = max(tb1 - tb0, 0);
        const int n_iter = na + nb;

        /* This thread's rows: m0 + warp·16·MT + mt·16 + g (+8), clamped to Sq−1. */
        int rs_[MT][2], rlo[MT][2], rhi[MT][2];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int row = min(m0 + warp * 16 * MT + mt * 16 + g + 8 * hf, p.Sq - 1);
                vis_range(p, row, rs_[mt][hf], rlo[mt][hf], rhi[mt][hf]);
            }

        float acc_o[MT][ND][4];
        float m_i[MT][2], l_i[MT][2];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int j = 0; j < ND; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc_o[mt][j][e] = 0.f;
            m_i[mt][0] = m_i[mt][1] = -INFINITY;
            l_i[mt][0] = l_i[mt][1] = 0.f;
        }

        /* Prologue: Q and the first K tile. */
        load_tile<T, K, BM>(sQ, Qb, p.sq1, m0, p.Sq, p.D, p.vec, tid);
        if (n_iter > 0) {
            const int t0 = 0 < na ? 0 : tb0;
            load_tile<T, K, BN>(sK, Kb, p.sk1, t0 * BN, p.Sk, p.D, p.vec, tid);
        }
        cp_async_commit();

        uint32_t qf[K::QREG ? MT : 1][K::QREG ? NKK : 1][4];
        if (K::QREG) {
            cp_async_wait<0>();
            __syncthreads();
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int kk = 0; kk < NKK; ++kk)
                    ldsm_x4(sQa + 2 * (q_off + mt * 16 * LD + kk * 16), qf[mt][kk][0],
                            qf[mt][kk][1], qf[mt][kk][2], qf[mt][kk][3]);
        }

        for (int it = 0; it < n_iter; ++it) {
            const int tile = it < na ? it : tb0 + (it - na);
            const int n0 = tile * BN;
            cp_async_wait<0>(); /* K[tile] (and Q) landed */
            __syncthreads();    /* ... for all threads; everyone is done with sV */
            load_tile<T, K, BN>(sV, Vb, p.sv1, n0, p.Sk, p.D, p.vec, tid);
            cp_async_commit();

            /* S = Q K^T  (MT·16 × BN per warp) */
            float acc_s[MT][NJ][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int j = 0; j < NJ; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc_s[mt][j][e] = 0.f;
#pragma unroll
            for (int kk = 0; kk < NKK; ++kk) {
                uint32_t qa[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    if (K::QREG) {
#pragma unroll
                        for (int e = 0; e < 4; ++e) qa[mt][e] = qf[K::QREG ? mt : 0][K::QREG ? kk : 0][e];
                    } else {
                        ldsm_x4(sQa + 2 * (q_off + mt * 16 * LD + kk * 16), qa[mt][0], qa[mt][1],
                                qa[mt][2], qa[mt][3]);
                    }
                }
#pragma unroll
                for (int jj = 0; jj < NJ / 2; ++jj) {
                    uint32_t b0, b1, b2, b3;
                    ldsm_x4(sKa + 2 * (k_off + jj * 16 * LD + kk * 16), b0, b1, b2, b3);
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        Ops<T>::mma(acc_s[mt][2 * jj], qa[mt], b0, b1);
                        Ops<T>::mma(acc_s[mt][2 * jj + 1], qa[mt], b2, b3);
                    }
                }
            }

            /* Per-element masks only where some row of the CTA sees part of the tile. */
            const bool full = (n0 + BN <= p.Sk) &&
                              ((n0 >= lo1 && n0 + BN <= hi0) || (n0 + BN <= s0));
            if (!full) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int j = 0; j < NJ; ++j)
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const int hf = e >> 1;
                            const int col = n0 + j * 8 + 2 * t4 + (e & 1);
                            const bool vis = col < rs_[mt][hf] ||
                                             (col >= rlo[mt][hf] && col < rhi[mt][hf]);
                            if (!vis) acc_s[mt][j][e] = -INFINITY;
                        }
            }

            cp_async_wait<0>(); /* V[tile] landed */
            __syncthreads();    /* ... for all; everyone is done with sK */
            if (it + 1 < n_iter) {
                const int nt = (it + 1) < na ? it + 1 : tb0 + (it + 1 - na);
                load_tile<T, K, BN>(sK, Kb, p.sk1, nt * BN, p.Sk, p.D, p.vec, tid);
                cp_async_commit();
            }

            /* Online softmax (exp2 domain); rows g and g+8 of each m-tile. */
            uint32_t pa[MT][BN / 16][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                float mx[2] = {m_i[mt][0], m_i[mt][1]};
#pragma unroll
                for (int j = 0; j < NJ; ++j) {
                    mx[0] = fmaxf(mx[0], fmaxf(acc_s[mt][j][0], acc_s[mt][j][1]));
                    mx[1] = fmaxf(mx[1], fmaxf(acc_s[mt][j][2], acc_s[mt][j][3]));
                }
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 1));
                    mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 2));
                }
                float mu[2], alpha[2];
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    /* -inf max (nothing visible yet): use 0 so exp2 gives 0, not NaN. */
                    mu[hf] = mx[hf] == -INFINITY ? 0.f : mx[hf] * p.sl2e;
                    alpha[hf] = exp2_approx(m_i[mt][hf] * p.sl2e - mu[hf]);
                    m_i[mt][hf] = mx[hf];
                }
                float rsum[2] = {0.f, 0.f};
#pragma unroll
                for (int j = 0; j < NJ; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const float pe = exp2_approx(fmaf(acc_s[mt][j][e], p.sl2e, -mu[e >> 1]));
                        acc_s[mt][j][e] = pe;
                        rsum[e >> 1] += pe;
                    }
                l_i[mt][0] = l_i[mt][0] * alpha[0] + rsum[0];
                l_i[mt][1] = l_i[mt][1] * alpha[1] + rsum[1];
#pragma unroll
                for (int j = 0; j < ND; ++j) {
                    acc_o[mt][j][0] *= alpha[0];
                    acc_o[mt][j][1] *= alpha[0];
                    acc_o[mt][j][2] *= alpha[1];
                    acc_o[mt][j][3] *= alpha[1];
                }
#pragma unroll
                for (int kk = 0; kk < BN / 16; ++kk) {
                    pa[mt][kk][0] = Ops<T>::pack(acc_s[mt][2 * kk][0], acc_s[mt][2 * kk][1]);
                    pa[mt][kk][1] = Ops<T>::pack(acc_s[mt][2 * kk][2], acc_s[mt][2 * kk][3]);
                    pa[mt][kk][2] = Ops<T>::pack(acc_s[mt][2 * kk + 1][0], acc_s[mt][2 * kk + 1][1]);
                    pa[mt][kk][3] = Ops<T>::pack(acc_s[mt][2 * kk + 1][2], acc_s[mt][2 * kk + 1][3]);
                }
            }

            /* O += P V */
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
                for (int dd = 0; dd < HD / 16; ++dd) {
                    uint32_t b0, b1, b2, b3;
                    ldsm_x4_t(sVa + 2 * (v_off + kk * 16 * LD + dd * 16), b0, b1, b2, b3);
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        Ops<T>::mma(acc_o[mt][2 * dd], pa[mt][kk], b0, b1);
                        Ops<T>::mma(acc_o[mt][2 * dd + 1], pa[mt][kk], b2, b3);
                    }
                }
        }
        /* No cp.async of any thread may still target sQ (n_iter = 0 leaves the
         * Q load pending) when the warps start staging O there. */
        cp_async_wait<0>();
        __syncthreads();

        /* Epilogue: O /= denominator (with the sink logit), L; stage O in this
         * warp's own sQ rows (only this warp ever read them), then 16-byte stores. */
        const float sink = p.sink ? p.sink[h] : 0.f;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            float inv[2];
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                float l = l_i[mt][hf];
                l += __shfl_xor_sync(0xffffffffu, l, 1);
                l += __shfl_xor_sync(0xffffffffu, l, 2);
                const bool any = m_i[mt][hf] != -INFINITY;
                const float M = any ? m_i[mt][hf] * p.scale : -INFINITY; /* natural-log units */
                float L, f;
                if (p.sink) {
                    const float Mt = fmaxf(M, sink);
                    const float a = any ? l * __expf(M - Mt) : 0.f;
                    const float den = a + __expf(sink - Mt);
                    L = Mt + __logf(den);
                    f = any ? __expf(M - Mt) / den : 0.f;
                    if (Mt == -INFINITY) { L = -INFINITY; f = 0.f; } /* s_h = −inf, no keys */
                } else {
                    L = any ? M + __logf(l) : -INFINITY;
                    f = any ? 1.f / l : 0.f;
                }
                inv[hf] = f;
                const int row = m0 + warp * 16 * MT + mt * 16 + g + 8 * hf;
                if (p.lse && t4 == 0 && row < p.Sq)
                    p.lse[b * p.sl0 + (int64_t)h * p.sl1 + (int64_t)row * p.sl2] = L;
            }
#pragma unroll
            for (int j = 0; j < ND; ++j) {
                const int r = warp * 16 * MT + mt * 16 + g;
                const int c = j * 8 + 2 * t4;
                *reinterpret_cast<uint32_t *>(sQ + r * LD + c) =
                    Ops<T>::pack(acc_o[mt][j][0] * inv[0], acc_o[mt][j][1] * inv[0]);
                *reinterpret_cast<uint32_t *>(sQ + (r + 8) * LD + c) =
                    Ops<T>::pack(acc_o[mt][j][2] * inv[1], acc_o[mt][j][3] * inv[1]);
            }
        }
        __syncwarp();
        {
            T *Ob = Og + b * p.so0 + (int64_t)h * p.so2;
            constexpr int CPR = HD / 8, WR = 16 * MT;
            const int rbase = warp * WR;
            if (p.vec) {
#pragma unroll
                for (int idx = lane; idx < WR * CPR; idx += 32) {
                    const int r = idx / CPR, c = idx % CPR;
                    const int row = m0 + rbase + r;
                    if (row < p.Sq && c * 8 < p.D)
                        *reinterpret_cast<uint4 *>(Ob + (int64_t)row * p.so1 + c * 8) =
                            *reinterpret_cast<const uint4 *>(sQ + (rbase + r) * LD + c * 8);
                }
            } else {
                for (int idx = lane; idx < WR * HD; idx += 32) {
                    const int r = idx / HD, d = idx % HD;
                    const int row = m0 + rbase + r;
                    if (row < p.Sq && d < p.D)
                        Ob[(int64_t)row * p.so1 + d] = sQ[(rbase + r) * LD + d];
                }
            }
        }
        __syncthreads(); /* smem is reused by the next virtual block */
    }
}

template <typename T, class K> static flashc_status launch_fwd(const FwdParams &p, cudaStream_t st) {
    const size_t smem = (size_t)K::SMEM_ELEMS * sizeof(T);
    auto kern = attn_fwd_tc_kernel<T, K>;
    FCC_TRY(fcc_set_smem((const void *)kern, smem, "attn_fwd_tc"));
    const int64_t maxg = 2147483647;
    const unsigned grid = (unsigned)(p.total < maxg ? p.total : maxg);
    kern<<<grid, K::NT, smem, st>>>(p);
    FCC_CHECK_LAUNCH("attn_fwd_tc_kernel");
    return FLASHC_OK;
}

/* Sets the grid of tile shape K and launches. */
template <typename T, class K> static flashc_status run_fwd(FwdParams p, cudaStream_t st) {
    p.nM = (p.Sq + K::BM - 1) / K::BM;
    p.total = (int64_t)p.nM * p.Hq * p.B;
    return launch_fwd<T, K>(p, st);
}

/* The tile shape of each padded head dim (BM = 16·MT·NW rows per CTA):
 * two m16 tiles per warp up to HD = 128 (each K/V fragment read from smem
 * feeds two MMAs: measured 295 vs 198 TFLOP/s at HD 128, H100, see
 * benchmarks/NOTES.md); above HD = 64 the Q fragments are re-read from smem
 * each k16 step to stay within 255 registers; HD ≥ 192 keeps one m16 tile. */
template <typename T> static flashc_status dispatch_fwd(const FwdParams &p, int HDp, cudaStream_t st) {
    switch (HDp) {
    case 32: return run_fwd<T, FwdTraits<32, 4, 2, 64, true>>(p, st);
    case 64: return run_fwd<T, FwdTraits<64, 4, 2, 64, true>>(p, st);
    case 96: return run_fwd<T, FwdTraits<96, 4, 1, 64, true>>(p, st);
    case 128: return run_fwd<T, FwdTraits<128, 4, 2, 64, false>>(p, st);
    case 192: return run_fwd<T, FwdTraits<192, 4, 1, 64, false>>(p, st);
    case 256: return run_fwd<T, FwdTraits<256, 4, 1, 64, false>>(p, st);
    default: break;
    }
    return fcc_error(FLASHC_ERR_INTERNAL, "attn_fwd_tc: no tile for head dim %d", HDp);
}

/* Supported padded head dims: D is zero-padded up to the next one. */
static int padded_hd(int64_t D) {
    if (D <= 32) return 32;
    if (D <= 64) return 64;
    if (D <= 96) return 96;
    if (D <= 128) return 128;
    if (D <= 192) return 192;
    return 256;
}

/* Declines (FLASHC_ERR_UNSUPPORTED, no message: the generic kernel runs)
 * what this path does not do; otherwise fills *p. */
static flashc_status make_params(const fc_attn *a, FwdParams *pp) {
    /* F32 must stay accurate to fp32 (no TF32) and F64 in F64: generic kernel. */
    if (a->dtype != FLASHC_F16 && a->dtype != FLASHC_BF16) return FLASHC_ERR_UNSUPPORTED;
    if (a->D > 256 || a->D < 1) return FLASHC_ERR_UNSUPPORTED;
    /* ldmatrix/cp.async need contiguous rows of d. */
    if (a->D > 1 && (a->sq[3] != 1 || a->sk[3] != 1 || a->sv[3] != 1 || a->so[3] != 1))
        return FLASHC_ERR_UNSUPPORTED;
    /* The row max is taken on unscaled scores: valid only for scale > 0. */
    if (!(a->scale > 0.0)) return FLASHC_ERR_UNSUPPORTED;
    /* Positions are int32 inside the kernel. */
    const int64_t lim = (int64_t)1 << 30;
    if (a->Sq >= lim || a->Sk >= lim || a->Hq >= lim) return FLASHC_ERR_UNSUPPORTED;

    FwdParams &p = *pp;
    p.q = a->q; p.k = a->k; p.v = a->v; p.o = a->o;
    p.lse = static_cast<float *>(a->lse);
    p.sink = static_cast<const float *>(a->sink_logits);
    p.sq0 = a->sq[0]; p.sq1 = a->sq[1]; p.sq2 = a->sq[2];
    p.sk0 = a->sk[0]; p.sk1 = a->sk[1]; p.sk2 = a->sk[2];
    p.sv0 = a->sv[0]; p.sv1 = a->sv[1]; p.sv2 = a->sv[2];
    p.so0 = a->so[0]; p.so1 = a->so[1]; p.so2 = a->so[2];
    p.sl0 = a->slse[0]; p.sl1 = a->slse[1]; p.sl2 = a->slse[2];
    p.B = a->B;
    p.Sq = (int)a->Sq; p.Sk = (int)a->Sk; p.Hq = (int)a->Hq; p.D = (int)a->D;
    p.group = (int)(a->Hq / a->Hkv);
    p.wl = a->wl; p.wr = a->wr; p.n_sink = a->n_sink;
    p.scale = (float)a->scale;
    p.sl2e = (float)(a->scale * 1.4426950408889634);
    /* 16-byte path: every row start 16-byte aligned, whole 8-element chunks. */
    bool vec = (a->D % 8) == 0;
    const void *ptrs[4] = {a->q, a->k, a->v, a->o};
    for (int i = 0; i < 4; ++i) vec = vec && ((uintptr_t)ptrs[i] % 16) == 0;
    const int64_t *strs[4] = {a->sq, a->sk, a->sv, a->so};
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 3; ++j) vec = vec && (strs[i][j] % 8) == 0;
    p.vec = vec ? 1 : 0;
    p.nM = 0;
    p.total = 0;
    return FLASHC_OK;
}

#ifdef FC_TC_EXPERIMENTS
/* Tile-shape experiments for the harness (tests/cuda_harness): not built in
 * the module. Variant v of a bf16/f16 problem with D = 64 or 128. */
flashc_status fc_tc_fwd_variant(const fc_attn *a, int v) {
    FwdParams p;
    FCC_TRY(make_params(a, &p));
    if (a->Sq == 0) return FLASHC_OK;
    cudaStream_t st = (cudaStream_t)a->stream;
#define FC_V(T)                                                                     \
    switch (v) {                                                                    \
    case 0: return a->D <= 64 ? run_fwd<T, FwdTraits<64, 4, 2, 64, true>>(p, st)    \
                              : run_fwd<T, FwdTraits<128, 4, 1, 64, true>>(p, st);  \
    case 1: return a->D <= 64 ? run_fwd<T, FwdTraits<64, 4, 1, 64, true>>(p, st)    \
                              : run_fwd<T, FwdTraits<128, 8, 1, 64, true>>(p, st);  \
    case 2: return a->D <= 64 ? run_fwd<T, FwdTraits<64, 8, 1, 64, true>>(p, st)    \
                              : run_fwd<T, FwdTraits<128, 4, 2, 64, false>>(p, st); \
    case 3: return a->D <= 64 ? run_fwd<T, FwdTraits<64, 4, 2, 128, true>>(p, st)   \
                              : run_fwd<T, FwdTraits<128, 4, 1, 128, true>>(p, st); \
    case 4: return a->D <= 64 ? run_fwd<T, FwdTraits<64, 8, 2, 64, true>>(p, st)    \
                              : run_fwd<T, FwdTraits<128, 8, 1, 128, true>>(p, st); \
    case 5: return a->D <= 64 ? run_fwd<T, FwdTraits<64, 4, 2, 64, false>>(p, st)   \
                              : run_fwd<T, FwdTraits<128, 4, 2, 32, false>>(p, st); \
    case 6: return a->D <= 64 ? run_fwd<T, FwdTraits<64, 4, 2, 32, true>>(p, st)    \
                              : run_fwd<T, FwdTraits<128, 8, 2, 64, false>>(p, st); \
    default: return FLASHC_ERR_UNSUPPORTED;                                         \
    }
    if (a->dtype == FLASHC_BF16) { FC_V(__nv_bfloat16) }
    FC_V(__half)
#undef FC_V
}
#endif

} // namespace fctc

flashc_status fc_cuda_attn_fwd_tc(const fc_attn *a) {
    fctc::FwdParams p;
    const flashc_status s = fctc::make_params(a, &p);
    if (s != FLASHC_OK) return s;
    if (a->Sq == 0) return FLASHC_OK;
    const int HDp = fctc::padded_hd(a->D);
    cudaStream_t st = (cudaStream_t)a->stream;
    if (a->dtype == FLASHC_BF16) return fctc::dispatch_fwd<__nv_bfloat16>(p, HDp, st);
    return fctc::dispatch_fwd<__half>(p, HDp, st);
}
