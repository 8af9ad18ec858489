/*
 * attn_fwd_wgmma.cu — Hopper (sm_90a) attention forward for F16/BF16,
 * D ∈ {64, 128}: warpgroup MMA (wgmma) fed by TMA, FA3-style warp
 * specialisation. Compiled only for sm_90a (src/cuda/CMakeLists.txt); the
 * dispatcher (attn_dispatch.cu) calls it only on compute capability 9.0 and
 * falls back to the mma.sync kernel (attn_fwd_tc.cu) when it declines.
 *
 *   q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D], o like q, lse [B, Hq, Sq] (f32);
 *   stride(d) = 1, 16-byte aligned pointers and q/k/v strides (TMA).
 *
 * One CTA per (128 query rows, query head, batch); 3 warpgroups:
 *   WG0, producer (setmaxnreg 40): one thread issues TMA loads of the Q tile
 *     (once) and of K/V tiles of 128 keys into a 2-stage ring; stage s is
 *     `full[s]` when its bytes landed and `empty[s]` when both consumer
 *     warpgroups finished reading it.
 *   WG1, WG2, consumers (setmaxnreg 232): each owns 64 query rows.
 *     S = Q·Kᵀ by m64n128k16 wgmma with both operands in smem (128B
 *     swizzle), online softmax in registers (exp2 domain, scale·log2 e folded
 *     into one FFMA, as attn_fwd_tc.cu), P rounded to the input type and used
 *     as the register A operand of O += P·V (m64n64k16 per 64 columns of D,
 *     V read from smem through a transposed descriptor).
 * Masking is attn_fwd_tc.cu's: key tiles by loop bounds from the visible
 * ranges of the CTA's first and last rows (sink-token tiles first, then the
 * window), per-element masks only on tiles not visible to every row of the
 * warpgroup; rows with no visible key get O = 0, L = −inf (or s_h). Rows and
 * keys past Sq / Sk read zeros (TMA out-of-bounds fill).
 */
#include "attn_fwd_wgmma.cuh"
#include "tc_common.cuh"

#include "attn_tc.h"

#include <math.h>

namespace fcwg {

using fctc::exp2_approx;
using fctc::Ops;
using fctc::smem_u32;

template <int HD_> struct WgTraits {
    static constexpr int HD = HD_;
    static constexpr int BM = 128;           /* query rows per CTA (2 × 64) */
    static constexpr int BN = 128;           /* keys per tile */
    static constexpr int STAGES = 2;
    static constexpr int NT = 384;           /* producer + 2 consumer warpgroups */
    static constexpr int NDB = HD / 64;      /* 64-column (128-byte) blocks of a row */
    static constexpr int Q_BYTES = BM * HD * 2;
    static constexpr int KV_BYTES = BN * HD * 2; /* one K or one V tile */
    static constexpr int OFF_K = Q_BYTES;
    static constexpr int OFF_V = OFF_K + STAGES * KV_BYTES;
    static constexpr int SMEM = OFF_V + STAGES * KV_BYTES + 1024; /* + alignment slack */
    static_assert(HD == 64 || HD == 128, "HD 64 or 128");
    static_assert(BN == 128, "S = Q·Kᵀ uses m64n128");
};

struct WgParams {
    void *o;
    float *lse;
    const float *sink;
    int64_t so0, so1, so2, sl0, sl1, sl2;
    int Sq, Sk, Hq, group, nM;
    int64_t wl, wr, n_sink;
    float sl2e, scale;
};

/* fc_visible_range (flashc_internal.h) on the fields of WgParams, int results. */
__device__ __forceinline__ void vis_range(const WgParams &p, int64_t i, int &s, int &lo, int &hi) {
    int64_t s6, l6, h6;
    const fc_mask mk = {p.Sq, p.Sk, p.wl, p.wr, p.n_sink};
    fc_visible_keys(&mk, i, &s6, &l6, &h6);
    s = (int)s6;
    lo = (int)l6;
    hi = (int)h6;
}

template <typename T, class K>
__global__ void __launch_bounds__(384, 1)
    attn_fwd_wgmma_kernel(const __grid_constant__ CUtensorMap tq,
                          const __grid_constant__ CUtensorMap tk,
                          const __grid_constant__ CUtensorMap tv, const WgParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int HD = K::HD, BN = K::BN, BM = K::BM, ST = K::STAGES, NDB = K::NDB;
    extern __shared__ unsigned char smem_raw[];
    __shared__ __align__(8) uint64_t bars[1 + 2 * ST]; /* Q, full[ST], empty[ST] */
    /* 128B-swizzled tiles need 1024-byte aligned atoms. */
    const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const uint32_t sQ = base, sK = base + K::OFF_K, sV = base + K::OFF_V;
    const uint32_t barQ = smem_u32(&bars[0]);
    const uint32_t barF = smem_u32(&bars[1]), barE = smem_u32(&bars[1 + ST]); /* + 8·s */

    const int tid = threadIdx.x, wg = tid >> 7;

    /* Heaviest (last, under causal masks) query blocks first. */
    const int vb = blockIdx.x;
    const int mb = p.nM - 1 - vb % p.nM;
    const int bh = vb / p.nM;
    const int h = bh % p.Hq;
    const int b = bh / p.Hq;
    const int hk = h / p.group;
    const int m0 = mb * BM;
    const int mlast = min(m0 + BM, p.Sq) - 1;

    /* Key tiles: [0, na) for sink tokens, then [tb0, tb0 + nb). */
    int s0, lo0, hi0, s1, lo1, hi1;
    vis_range(p, m0, s0, lo0, hi0);
    vis_range(p, mlast, s1, lo1, hi1);
    const int na = (s1 + BN - 1) / BN;
    const int tb1 = (hi1 + BN - 1) / BN;
    const int tb0 = max(lo0 / BN, na);
    const int n_iter = na + max(tb1 - tb0, 0);

    if (tid == 0) {
        mbar_init(barQ, 1);
        for (int s = 0; s < ST; ++s) {
            mbar_init(barF + 8 * s, 1);
            mbar_init(barE + 8 * s, 256); /* every consumer thread arrives */
        }
        mbar_fence_init();
    }
    __syncthreads();

    if (wg == 0) {
        /* ------------------------------------------------ producer */
        setmaxnreg_dec<40>();
        if (tid == 0 && n_iter > 0) {
            mbar_expect_tx(barQ, K::Q_BYTES);
#pragma unroll
            for (int db = 0; db < NDB; ++db) tma_load_4d(sQ + db * BM * 128, &tq, barQ, db * 64, m0, h, b);
            for (int it = 0; it < n_iter; ++it) {
                const int s = it % ST;
                if (it >= ST) mbar_wait(barE + 8 * s, ((it / ST) - 1) & 1);
                const int n0 = (it < na ? it : tb0 + (it - na)) * BN;
                const uint32_t bar = barF + 8 * s;
                mbar_expect_tx(bar, 2 * K::KV_BYTES);
#pragma unroll
                for (int db = 0; db < NDB; ++db) {
                    tma_load_4d(sK + s * K::KV_BYTES + db * BN * 128, &tk, bar, db * 64, n0, hk, b);
                    tma_load_4d(sV + s * K::KV_BYTES + db * BN * 128, &tv, bar, db * 64, n0, hk, b);
                }
            }
        }
    } else {
        /* ------------------------------------------------ consumers */
        setmaxnreg_inc<232>();
        const int cw = wg - 1;                  /* this warpgroup's 64 rows: r0 .. r0+63 */
        const int warp = (tid >> 5) & 3, lane = tid & 31;
        const int g = lane >> 2, t4 = lane & 3;
        const int r0 = m0 + cw * 64;

        int ws0, wlo0, whi0, ws1, wlo1, whi1; /* the warpgroup's first and last rows */
        vis_range(p, min(r0, p.Sq - 1), ws0, wlo0, whi0);
        vis_range(p, min(r0 + 63, p.Sq - 1), ws1, wlo1, whi1);
        int rs_[2], rlo[2], rhi[2]; /* this thread's rows r0 + 16·warp + g (+8) */
#pragma unroll
        for (int hf = 0; hf < 2; ++hf)
            vis_range(p, min(r0 + warp * 16 + g + 8 * hf, p.Sq - 1), rs_[hf], rlo[hf], rhi[hf]);

        float acc_o[HD / 2];
#pragma unroll
        for (int i = 0; i < HD / 2; ++i) acc_o[i] = 0.f;
        float m_i[2] = {-INFINITY, -INFINITY}, l_i[2] = {0.f, 0.f};

        if (n_iter > 0) mbar_wait(barQ, 0);
        const uint32_t qrow = sQ + cw * 64 * 128;
        for (int it = 0; it < n_iter; ++it) {
            const int s = it % ST;
            const int n0 = (it < na ? it : tb0 + (it - na)) * BN;
            mbar_wait(barF + 8 * s, (it / ST) & 1);

            /* S = Q Kᵀ: 64 × 128 per warpgroup */
            float acc_s[BN / 2];
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) acc_s[i] = 0.f;
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < HD / 16; ++kk) {
                const uint32_t koff = (kk & 3) * 32; /* k16 step inside the 128-byte row */
                const uint64_t da = sw128_desc(qrow + (kk >> 2) * BM * 128 + koff, 16, 1024);
                const uint64_t dk =
                    sw128_desc(sK + s * K::KV_BYTES + (kk >> 2) * BN * 128 + koff, 16, 1024);
                WgOps<T>::ss_n128(acc_s, da, dk, kk > 0 ? 1 : 0);
            }
            wg_commit();
            wg_wait<0>();
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) reg_fence(acc_s[i]);

            /* Per-element masks only where some row of the warpgroup sees part of the tile. */
            const bool full = (n0 + BN <= p.Sk) &&
                              ((n0 >= wlo1 && n0 + BN <= whi0) || (n0 + BN <= ws0));
            if (!full) {
#pragma unroll
                for (int j = 0; j < BN / 8; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int hf = e >> 1;
                        const int col = n0 + j * 8 + 2 * t4 + (e & 1);
                        const bool vis = col < rs_[hf] || (col >= rlo[hf] && col < rhi[hf]);
                        if (!vis) acc_s[j * 4 + e] = -INFINITY;
                    }
            }

            /* Online softmax (exp2 domain); rows g and g+8 of the warp's 16. */
            float mx[2] = {m_i[0], m_i[1]};
#pragma unroll
            for (int j = 0; j < BN / 8; ++j) {
                mx[0] = fmaxf(mx[0], fmaxf(acc_s[j * 4 + 0], acc_s[j * 4 + 1]));
                mx[1] = fmaxf(mx[1], fmaxf(acc_s[j * 4 + 2], acc_s[j * 4 + 3]));
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
                alpha[hf] = exp2_approx(m_i[hf] * p.sl2e - mu[hf]);
                m_i[hf] = mx[hf];
            }
            float rsum[2] = {0.f, 0.f};
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) {
                const float pe = exp2_approx(fmaf(acc_s[i], p.sl2e, -mu[(i >> 1) & 1]));
                acc_s[i] = pe;
                rsum[(i >> 1) & 1] += pe;
            }
            l_i[0] = l_i[0] * alpha[0] + rsum[0];
            l_i[1] = l_i[1] * alpha[1] + rsum[1];
#pragma unroll
            for (int i = 0; i < HD / 2; ++i) acc_o[i] *= alpha[(i >> 1) & 1];
            uint32_t pa[BN / 16][4];
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk) {
                pa[kk][0] = Ops<T>::pack(acc_s[8 * kk + 0], acc_s[8 * kk + 1]);
                pa[kk][1] = Ops<T>::pack(acc_s[8 * kk + 2], acc_s[8 * kk + 3]);
                pa[kk][2] = Ops<T>::pack(acc_s[8 * kk + 4], acc_s[8 * kk + 5]);
                pa[kk][3] = Ops<T>::pack(acc_s[8 * kk + 6], acc_s[8 * kk + 7]);
            }

            /* O += P V: V rows are keys (k), columns d (n), d contiguous → transposed B. */
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
                for (int db = 0; db < NDB; ++db) {
                    const uint64_t dv = sw128_desc(
                        sV + s * K::KV_BYTES + db * BN * 128 + kk * 16 * 128, 1024, 1024);
                    WgOps<T>::rs_n64_tb(acc_o + db * 32, pa[kk], dv);
                }
            wg_commit();
            wg_wait<0>();
#pragma unroll
            for (int i = 0; i < HD / 2; ++i) reg_fence(acc_o[i]);
            mbar_arrive(barE + 8 * s); /* this thread is done with stage s */
        }

        /* Epilogue: O /= denominator (with the sink logit), L. */
        const float sink = p.sink ? p.sink[h] : 0.f;
        T *Ob = static_cast<T *>(p.o) + (int64_t)b * p.so0 + (int64_t)h * p.so2;
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            float l = l_i[hf];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const bool any = m_i[hf] != -INFINITY;
            const float M = any ? m_i[hf] * p.scale : -INFINITY; /* natural-log units */
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
            const int row = r0 + warp * 16 + g + 8 * hf;
            if (row < p.Sq) {
                if (p.lse && t4 == 0)
                    p.lse[(int64_t)b * p.sl0 + (int64_t)h * p.sl1 + (int64_t)row * p.sl2] = L;
                T *orow = Ob + (int64_t)row * p.so1;
#pragma unroll
                for (int j = 0; j < HD / 8; ++j)
                    *reinterpret_cast<uint32_t *>(orow + j * 8 + 2 * t4) =
                        Ops<T>::pack(acc_o[j * 4 + 2 * hf] * f, acc_o[j * 4 + 2 * hf + 1] * f);
            }
        }
    }
#endif
}

/* ------------------------------------------------------------ host */
typedef CUresult (*EncodeTiledFn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                  const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                  const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                  CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* cuTensorMapEncodeTiled through the runtime's driver entry point (the
 * module links no libcuda); NULL when the driver lacks it. Looked up once. */
static EncodeTiledFn encode_fn(void) {
    static const EncodeTiledFn fn = [] {
        void *f = nullptr;
        cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
        const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000,
                                                               cudaEnableDefault, &q);
        if (e != cudaSuccess || q != cudaDriverEntryPointSuccess) {
            cudaGetLastError();
            return (EncodeTiledFn) nullptr;
        }
        return (EncodeTiledFn)f;
    }();
    return fn;
}

/* Tensor map of a [B, S, H, D] operand (element strides st, st[3] = 1) read
 * in boxes of [rows, 64]; 128B swizzle; zeros outside [0, S). A stride of an
 * extent-1 axis is never used and is replaced by a valid one. */
static bool make_map(CUtensorMap *m, EncodeTiledFn enc, CUtensorMapDataType dt, const void *ptr,
                     int64_t B, int64_t S, int64_t H, int64_t D, const int64_t *st, int rows) {
    const int64_t ext[3] = {S, H, B};
    const int64_t str[3] = {st[1], st[2], st[0]};
    cuuint64_t dims[4] = {(cuuint64_t)D, 0, 0, 0}, strides[3];
    for (int i = 0; i < 3; ++i) {
        int64_t s = str[i];
        if (ext[i] == 1) s = D;
        if (s <= 0 || s % 8 != 0 || s * 2 >= ((int64_t)1 << 40)) return false;
        dims[i + 1] = (cuuint64_t)ext[i];
        strides[i] = (cuuint64_t)(s * 2);
    }
    const cuuint32_t box[4] = {64, (cuuint32_t)rows, 1, 1}, estr[4] = {1, 1, 1, 1};
    return enc(m, dt, 4, const_cast<void *>(ptr), dims, strides, box, estr,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <typename T, class K>
static flashc_status launch(const fc_attn *a, const CUtensorMap &tq, const CUtensorMap &tk,
                            const CUtensorMap &tv, WgParams p) {
    p.nM = (p.Sq + K::BM - 1) / K::BM;
    const int64_t grid = (int64_t)p.nM * p.Hq * a->B;
    if (grid > 2147483647) return FLASHC_ERR_UNSUPPORTED;
    auto kern = attn_fwd_wgmma_kernel<T, K>;
    FCC_TRY(fcc_set_smem((const void *)kern, K::SMEM, "attn_fwd_wgmma"));
    kern<<<(unsigned)grid, K::NT, K::SMEM, (cudaStream_t)a->stream>>>(tq, tk, tv, p);
    FCC_CHECK_LAUNCH("attn_fwd_wgmma_kernel");
    return FLASHC_OK;
}

} // namespace fcwg

flashc_status fc_cuda_attn_fwd_wgmma(const fc_attn *a) {
    using namespace fcwg;
    if (a->dtype != FLASHC_F16 && a->dtype != FLASHC_BF16) return FLASHC_ERR_UNSUPPORTED;
    if (a->D != 64 && a->D != 128) return FLASHC_ERR_UNSUPPORTED;
    if (a->sq[3] != 1 || a->sk[3] != 1 || a->sv[3] != 1 || a->so[3] != 1)
        return FLASHC_ERR_UNSUPPORTED;
    if (!(a->scale > 0.0)) return FLASHC_ERR_UNSUPPORTED; /* row max of unscaled scores */
    if (a->Sq == 0) return FLASHC_OK;
    if (a->Sk == 0) return FLASHC_ERR_UNSUPPORTED; /* no tensor map of extent 0 */
    const int64_t lim = (int64_t)1 << 30;
    if (a->Sq >= lim || a->Sk >= lim || a->Hq >= lim || a->B >= lim) return FLASHC_ERR_UNSUPPORTED;
    /* TMA: 16-byte aligned base addresses; o is written in 4-byte pairs. */
    const void *in[3] = {a->q, a->k, a->v};
    for (int i = 0; i < 3; ++i)
        if ((uintptr_t)in[i] % 16 != 0) return FLASHC_ERR_UNSUPPORTED;
    if ((uintptr_t)a->o % 4 != 0 || a->so[0] % 2 || a->so[1] % 2 || a->so[2] % 2)
        return FLASHC_ERR_UNSUPPORTED;
    const EncodeTiledFn enc = encode_fn();
    if (!enc) return FLASHC_ERR_UNSUPPORTED;

    const CUtensorMapDataType dt =
        a->dtype == FLASHC_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    CUtensorMap tq, tk, tv;
    if (!make_map(&tq, enc, dt, a->q, a->B, a->Sq, a->Hq, a->D, a->sq, 128) ||
        !make_map(&tk, enc, dt, a->k, a->B, a->Sk, a->Hkv, a->D, a->sk, 128) ||
        !make_map(&tv, enc, dt, a->v, a->B, a->Sk, a->Hkv, a->D, a->sv, 128))
        return FLASHC_ERR_UNSUPPORTED;

    WgParams p;
    p.o = a->o;
    p.lse = static_cast<float *>(a->lse);
    p.sink = static_cast<const float *>(a->sink_logits);
    p.so0 = a->so[0]; p.so1 = a->so[1]; p.so2 = a->so[2];
    p.sl0 = a->slse[0]; p.sl1 = a->slse[1]; p.sl2 = a->slse[2];
    p.Sq = (int)a->Sq; p.Sk = (int)a->Sk; p.Hq = (int)a->Hq;
    p.group = (int)(a->Hq / a->Hkv);
    p.nM = 0;
    p.wl = a->wl; p.wr = a->wr; p.n_sink = a->n_sink;
    p.scale = (float)a->scale;
    p.sl2e = (float)(a->scale * 1.4426950408889634);

    if (a->dtype == FLASHC_BF16) {
        if (a->D == 64) return launch<__nv_bfloat16, WgTraits<64>>(a, tq, tk, tv, p);
        return launch<__nv_bfloat16, WgTraits<128>>(a, tq, tk, tv, p);
    }
    if (a->D == 64) return launch<__half, WgTraits<64>>(a, tq, tk, tv, p);
    return launch<__half, WgTraits<128>>(a, tq, tk, tv, p);
}
