/*
 * attn_fwd_wgmma.cu — Hopper (sm_90a) attention forward for F16/BF16,
 * D ∈ {64, 128}: warpgroup MMA (wgmma) fed by TMA, FA3-style warp
 * specialisation. Compiled only for sm_90a (src/cuda/CMakeLists.txt); the
 * plan (attn_dispatch.cu) picks it when fcc_fwd_wgmma_supports() holds
 * (compute capability 9.0 among its conditions), else the mma.sync kernel.
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
 *     swizzle), then the tile steps of attn_fwd_tile.cuh on the accumulator
 *     (the mma.sync kernel's: score modifiers, masks, online softmax in the
 *     exp2 domain, row finish); P rounded to the input type and used as the
 *     register A operand of O += P·V (m64n64k16 per 64 columns of D, V read
 *     from smem through a transposed descriptor).
 * Masking (attn_mask.h): key tiles by loop bounds from the key segments of
 * the CTA's rows (sink-token tiles first, then the window), per-element
 * masks only on tiles not visible to every row of the warpgroup; rows with
 * no visible key get O = 0, L = −inf (or s_h). Rows and keys past Sq / Sk
 * read zeros (TMA out-of-bounds fill).
 */
#include "attn_fwd_wgmma.cuh"
#include "attn_fwd_tile.cuh"

#include <limits.h>
#include <math.h>

namespace fcwg {

using namespace fctc;

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

/* One CTA per virtual block (nM query blocks × Hq × B). MOD: the modifier
 * path (attn_fwd_tile.cuh), chosen once on the host. */
template <typename T, class K, bool MOD>
__global__ void __launch_bounds__(384, 1)
    attn_fwd_wgmma_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                          const __grid_constant__ CUtensorMap tv, const __grid_constant__ fcc_attn p,
                          const int nM) {
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
    const int mb = nM - 1 - vb % nM;
    const int bh = vb / nM;
    const int h = bh % p.Hq;
    const int b = bh / p.Hq;
    const int hk = h / p.group;
    const int m0 = mb * BM;
    const int mlast = min(m0 + BM, p.Sq) - 1;

    const KeyTiles kt = key_tiles<BN>(p.mask, m0, mlast);

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
        if (tid == 0 && kt.first < kt.b1) {
            mbar_expect_tx(barQ, K::Q_BYTES);
#pragma unroll
            for (int db = 0; db < NDB; ++db) tma_load_4d(sQ + db * BM * 128, &tq, barQ, db * 64, m0, h, b);
            int it = 0;
            for (int tile = kt.first; tile < kt.b1; tile = kt.next(tile), ++it) {
                const int s = it % ST;
                if (it >= ST) mbar_wait(barE + 8 * s, ((it / ST) - 1) & 1);
                const int n0 = tile * BN;
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
        const int row0 = r0 + warp * 16 + g;    /* this thread's rows: row0, row0 + 8 */
        const fc_attn &a = p.a;
        /* exp2 argument per unit of the fragment's scores, and the row max's
         * factor to natural units (attn_fwd_tile.cuh, "two score paths"). */
        float mul = p.sl2e, mul_ln = p.scale;

        const Vis wfirst = vis_of(p.mask, r0, p.Sq), wlast = vis_of(p.mask, r0 + 63, p.Sq);
        const RowVis rv = row_vis(p.mask, row0, p.Sq);
        fc_score_modf mod = {0.f, 0.f, 0.f};
        fc_score_foldf fold = {0.f, 0.f, 0.f, 0};
        if (MOD) {
            mod = fcc_score_mod_l2(p, b, h);
            fold = fc_score_fold(&mod);
            score_factors(mod, &mul, &mul_ln);
        }

        float acc_o[HD / 8][4]; /* wgmma accumulator layout = the m16n8 C layout per warp */
#pragma unroll
        for (int j = 0; j < HD / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_o[j][e] = 0.f;
        float m_i[2] = {-INFINITY, -INFINITY}, l_i[2] = {0.f, 0.f};

        if (kt.first < kt.b1) mbar_wait(barQ, 0);
        const uint32_t qrow = sQ + cw * 64 * 128;
        int it = 0;
        for (int tile = kt.first; tile < kt.b1; tile = kt.next(tile), ++it) {
            const int s = it % ST;
            const int n0 = tile * BN;
            mbar_wait(barF + 8 * s, (it / ST) & 1);

            /* S = Q Kᵀ: 64 × 128 per warpgroup */
            float acc_s[BN / 8][4];
#pragma unroll
            for (int j = 0; j < BN / 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc_s[j][e] = 0.f;
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < HD / 16; ++kk) {
                const uint32_t koff = (kk & 3) * 32; /* k16 step inside the 128-byte row */
                const uint64_t da = sw128_desc(qrow + (kk >> 2) * BM * 128 + koff, 16, 1024);
                const uint64_t dk =
                    sw128_desc(sK + s * K::KV_BYTES + (kk >> 2) * BN * 128 + koff, 16, 1024);
                WgOps<T>::ss_n128(&acc_s[0][0], da, dk, kk > 0 ? 1 : 0);
            }
            wg_commit();
            wg_wait<0>();
#pragma unroll
            for (int j = 0; j < BN / 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) reg_fence(acc_s[j][e]);

            if (MOD) {
                float dist0[2];
                tile_dist0(p, row0, n0 + 2 * t4, dist0);
                tile_score_mod(acc_s, mod, fold, dist0);
            }
            /* Per-element masks only where some row of the warpgroup sees part of the tile. */
            if (!tile_full<BN>(wfirst, wlast, n0, p.Sk)) tile_mask(acc_s, rv, n0 + 2 * t4);
            float alpha[2];
            tile_softmax(acc_s, m_i, l_i, alpha, mul);
            tile_rescale(acc_o, alpha);
            uint32_t pa[BN / 16][4];
            tile_pack_p<T>(acc_s, pa);

            /* O += P V: V rows are keys (k), columns d (n), d contiguous → transposed B. */
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
                for (int db = 0; db < NDB; ++db) {
                    const uint64_t dv = sw128_desc(
                        sV + s * K::KV_BYTES + db * BN * 128 + kk * 16 * 128, 1024, 1024);
                    WgOps<T>::rs_n64_tb(&acc_o[db * 8][0], pa[kk], dv); /* 64 columns = 8 n8 tiles */
                }
            wg_commit();
            wg_wait<0>();
#pragma unroll
            for (int j = 0; j < HD / 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) reg_fence(acc_o[j][e]);
            mbar_arrive(barE + 8 * s); /* this thread is done with stage s */
        }

        /* Epilogue: O·factor and L (row_finish, with the sink logit), stored
         * straight from registers in 4-byte pairs. */
        float f[2], L[2];
        row_finish(m_i, l_i, mul_ln, a.sink_logits != nullptr, (float)fc_attn_sink(&a, h), f, L);
        T *Ob = static_cast<T *>(a.o) + (int64_t)b * a.so[0] + (int64_t)h * a.so[2];
        float *lse = static_cast<float *>(a.lse);
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int row = row0 + 8 * hf;
            if (row < p.Sq) {
                if (lse && t4 == 0)
                    lse[(int64_t)b * a.slse[0] + (int64_t)h * a.slse[1] + (int64_t)row * a.slse[2]] = L[hf];
                T *orow = Ob + (int64_t)row * a.so[1];
#pragma unroll
                for (int j = 0; j < HD / 8; ++j)
                    *reinterpret_cast<uint32_t *>(orow + j * 8 + 2 * t4) =
                        Ops<T>::pack(acc_o[j][2 * hf] * f[hf], acc_o[j][2 * hf + 1] * f[hf]);
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

/* The tensor-map extents and byte strides of a [B, S, H, D] operand
 * (element strides st, st[3] = 1); false when TMA cannot address it
 * (strides must be positive multiples of 16 bytes below 2^40). A stride of
 * an extent-1 axis is never used and is replaced by a valid one. */
static bool map_shape(int64_t B, int64_t S, int64_t H, int64_t D, const int64_t *st, cuuint64_t dims[4],
                      cuuint64_t strides[3]) {
    const int64_t ext[3] = {S, H, B};
    const int64_t str[3] = {st[1], st[2], st[0]};
    dims[0] = (cuuint64_t)D;
    for (int i = 0; i < 3; ++i) {
        int64_t s = str[i];
        if (ext[i] == 1) s = D;
        if (s <= 0 || s % 8 != 0 || s * 2 >= ((int64_t)1 << 40)) return false;
        dims[i + 1] = (cuuint64_t)ext[i];
        strides[i] = (cuuint64_t)(s * 2);
    }
    return true;
}

/* Tensor map of such an operand read in boxes of [rows, 64]; 128B swizzle;
 * zeros outside [0, S). */
static bool make_map(CUtensorMap *m, EncodeTiledFn enc, CUtensorMapDataType dt, const void *ptr,
                     int64_t B, int64_t S, int64_t H, int64_t D, const int64_t *st, int rows) {
    cuuint64_t dims[4], strides[3];
    if (!map_shape(B, S, H, D, st, dims, strides)) return false;
    const cuuint32_t box[4] = {64, (cuuint32_t)rows, 1, 1}, estr[4] = {1, 1, 1, 1};
    return enc(m, dt, 4, const_cast<void *>(ptr), dims, strides, box, estr,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <typename T, class K>
static flashc_status launch(const fcc_attn &p, const CUtensorMap &tq, const CUtensorMap &tk,
                            const CUtensorMap &tv) {
    const int nM = (p.Sq + K::BM - 1) / K::BM;
    const unsigned grid = (unsigned)((int64_t)nM * p.Hq * p.a.B); /* ≤ INT_MAX: supports() */
    const bool mod = !p.plain_score || !p.scale_pos;
    auto kern = mod ? attn_fwd_wgmma_kernel<T, K, true> : attn_fwd_wgmma_kernel<T, K, false>;
    FCC_TRY(fcc_set_smem((const void *)kern, K::SMEM, "attn_fwd_wgmma"));
    kern<<<grid, K::NT, K::SMEM, fcc_stream(p.a.stream)>>>(tq, tk, tv, p, nM);
    FCC_CHECK_LAUNCH("attn_fwd_wgmma_kernel");
    return FLASHC_OK;
}

} // namespace fcwg

bool fcc_fwd_wgmma_supports(const fcc_attn &p) {
    using namespace fcwg;
    const fc_attn &a = p.a;
    if (p.dev.cc != 90) return false; /* sm_90a code runs there and nowhere else */
    if (a.dtype != FLASHC_F16 && a.dtype != FLASHC_BF16) return false;
    if (a.D != 64 && a.D != 128) return false;
    /* Positions are int32; no tensor map of extent 0; TMA reads 16-byte
     * aligned rows of q/k/v (vec16); o is written in 4-byte pairs. */
    if (!p.fits_int32 || a.Sk == 0 || !p.vec16 || !p.out_pairs) return false;
    cuuint64_t dims[4], strides[3];
    if (!map_shape(a.B, a.Sq, a.Hq, a.D, a.sq, dims, strides) ||
        !map_shape(a.B, a.Sk, a.Hkv, a.D, a.sk, dims, strides) ||
        !map_shape(a.B, a.Sk, a.Hkv, a.D, a.sv, dims, strides))
        return false;
    if ((a.Sq + WgTraits<64>::BM - 1) / WgTraits<64>::BM * a.Hq * a.B > INT_MAX) return false; /* grid */
    const int smem = a.D == 64 ? WgTraits<64>::SMEM : WgTraits<128>::SMEM;
    return smem <= p.dev.smem_optin && encode_fn() != nullptr;
}

flashc_status fcc_fwd_wgmma_run(const fcc_attn &p) {
    using namespace fcwg;
    const fc_attn &a = p.a;
    const CUtensorMapDataType dt =
        a.dtype == FLASHC_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    const EncodeTiledFn enc = encode_fn();
    CUtensorMap tq, tk, tv;
    if (!enc || !make_map(&tq, enc, dt, a.q, a.B, a.Sq, a.Hq, a.D, a.sq, 128) ||
        !make_map(&tk, enc, dt, a.k, a.B, a.Sk, a.Hkv, a.D, a.sk, 128) ||
        !make_map(&tv, enc, dt, a.v, a.B, a.Sk, a.Hkv, a.D, a.sv, 128))
        return fcc_fwd_mma_run(p); /* the driver refused a map supports() accepted: same problem, mma.sync */
    if (a.dtype == FLASHC_BF16) {
        if (a.D == 64) return launch<__nv_bfloat16, WgTraits<64>>(p, tq, tk, tv);
        return launch<__nv_bfloat16, WgTraits<128>>(p, tq, tk, tv);
    }
    if (a.D == 64) return launch<__half, WgTraits<64>>(p, tq, tk, tv);
    return launch<__half, WgTraits<128>>(p, tq, tk, tv);
}
