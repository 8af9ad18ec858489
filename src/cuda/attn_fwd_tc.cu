/*
 * attn_fwd_tc.cu — tensor-core attention forward for F16/BF16 (sm_80+).
 *
 * FlashAttention-2 schedule on mma.sync m16n8k16:
 *   one CTA per (query block of BM rows, query head, batch), NW warps, each
 *   warp owning MT m16 tiles (16·MT query rows); K/V tiles of BN keys stream
 *   through shared memory by cp.async, the V load overlapping QK^T and the
 *   next K load overlapping softmax + PV; S and O stay in fp32 registers;
 *   online softmax in the exp2 domain; P is rounded to the input type before
 *   PV (as FlashAttention does) while the row sums use the fp32 P.
 *
 *   q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D], o like q, lse [B, Hq, Sq] (f32);
 *   any strides with stride(d) = 1; D ≤ 256 padded with zeros to HD.
 *
 * The per-tile steps (score modifiers, masks, online softmax, row finish)
 * are attn_fwd_tile.cuh's, shared with the wgmma kernel; the plain path
 * (no softcap/ALiBi, scale > 0) folds scale·log2(e) into one FFMA, the
 * modifier path (template MOD) scores each element first (attn_score.h).
 * Masking (attn_mask.h): key tiles are chosen by loop bounds from the key
 * segments of the CTA's rows (fc_block_keysegs; a window costs O(window));
 * tiles visible to every row of the CTA skip per-element masks.
 * Shared-memory rows are padded by 16 bytes (row pitch HD + 8 elements), so
 * the 8 row addresses of every ldmatrix phase hit distinct bank quads.
 */
#include "attn_fwd_tile.cuh"

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

/* S = Q·Kᵀ for the warp's MT m16 tiles × BN keys of the K tile in smem.
 * Q fragments from registers (K::QREG: qf) or re-read from smem each k16
 * step; q_off / k_off: the lane's ldmatrix offsets (elements). */
template <typename T, class K>
__device__ __forceinline__ void qk_tile(float (&acc_s)[K::MT][K::BN / 8][4],
                                        const uint32_t (&qf)[K::QREG ? K::MT : 1][K::QREG ? K::HD / 16 : 1][4],
                                        uint32_t sQa, uint32_t sKa, int q_off, int k_off) {
    constexpr int MT = K::MT, NJ = K::BN / 8, LD = K::LD;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_s[mt][j][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < K::HD / 16; ++kk) {
        uint32_t qa[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            if (K::QREG) {
#pragma unroll
                for (int e = 0; e < 4; ++e) qa[mt][e] = qf[K::QREG ? mt : 0][K::QREG ? kk : 0][e];
            } else {
                ldsm_x4(sQa + 2 * (q_off + mt * 16 * LD + kk * 16), qa[mt][0], qa[mt][1], qa[mt][2], qa[mt][3]);
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
}

/* O += P·V with the V tile in smem (transposed ldmatrix; v_off: the lane's offset). */
template <typename T, class K>
__device__ __forceinline__ void pv_tile(float (&acc_o)[K::MT][K::HD / 8][4],
                                        const uint32_t (&pa)[K::MT][K::BN / 16][4], uint32_t sVa, int v_off) {
#pragma unroll
    for (int kk = 0; kk < K::BN / 16; ++kk)
#pragma unroll
        for (int dd = 0; dd < K::HD / 16; ++dd) {
            uint32_t b0, b1, b2, b3;
            ldsm_x4_t(sVa + 2 * (v_off + kk * 16 * K::LD + dd * 16), b0, b1, b2, b3);
#pragma unroll
            for (int mt = 0; mt < K::MT; ++mt) {
                Ops<T>::mma(acc_o[mt][2 * dd], pa[mt][kk], b0, b1);
                Ops<T>::mma(acc_o[mt][2 * dd + 1], pa[mt][kk], b2, b3);
            }
        }
}

/* Stores the warp's 16·MT rows of O, staged as T in smem rows [rbase, rbase
 * + 16·MT) of pitch LD (written by this warp only), to rows m0 + rbase + r of
 * Ob (row stride so1): 16-byte stores when vec, else element by element. */
template <typename T, class K>
__device__ __forceinline__ void store_o_rows(T *Ob, int64_t so1, const T *stage, int m0, int rbase, int Sq, int D,
                                             bool vec, int lane) {
    constexpr int HD = K::HD, LD = K::LD, CPR = HD / 8, WR = 16 * K::MT;
    if (vec) {
#pragma unroll
        for (int idx = lane; idx < WR * CPR; idx += 32) {
            const int r = idx / CPR, c = idx % CPR;
            const int row = m0 + rbase + r;
            if (row < Sq && c * 8 < D)
                *reinterpret_cast<uint4 *>(Ob + (int64_t)row * so1 + c * 8) =
                    *reinterpret_cast<const uint4 *>(stage + (rbase + r) * LD + c * 8);
        }
    } else {
        for (int idx = lane; idx < WR * HD; idx += 32) {
            const int r = idx / HD, d = idx % HD;
            const int row = m0 + rbase + r;
            if (row < Sq && d < D) Ob[(int64_t)row * so1 + d] = stage[(rbase + r) * LD + d];
        }
    }
}

/* One launch runs nM·Hq·B virtual blocks (total), grid-strided. MOD: the
 * modifier path (attn_fwd_tile.cuh), chosen once on the host. */
template <typename T, class K, bool MOD>
__global__ void __launch_bounds__(K::NT)
    attn_fwd_tc_kernel(const __grid_constant__ fcc_attn p, const int nM, const int64_t total) {
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
    const fc_attn &a = p.a;
    const T *Qg = static_cast<const T *>(a.q);
    const T *Kg = static_cast<const T *>(a.k);
    const T *Vg = static_cast<const T *>(a.v);
    T *Og = static_cast<T *>(a.o);
    /* exp2 argument per unit of the fragment's scores, and the row max's
     * factor to natural units (attn_fwd_tile.cuh, "two score paths"). */
    /* The factors (attn_fwd_tile.cuh, "two score paths") do not depend on the
     * head: the modifier path's are those of head 0. */
    float mul = p.sl2e, mul_ln = p.scale;
    if (MOD) score_factors(fcc_score_mod_l2(p, 0, 0), &mul, &mul_ln);

    /* Per-lane ldmatrix offsets (elements), see tc_common.cuh for layouts. */
    const int q_off = (warp * MT * 16 + (lane & 15)) * LD + (lane >> 4) * 8;
    const int k_off = ((lane >> 4) * 8 + (lane & 7)) * LD + ((lane >> 3) & 1) * 8;
    const int v_off = (((lane >> 3) & 1) * 8 + (lane & 7)) * LD + (lane >> 4) * 8;
    const uint32_t sQa = smem_u32(sQ), sKa = smem_u32(sK), sVa = smem_u32(sV);

    for (int64_t vb = blockIdx.x; vb < total; vb += gridDim.x) {
        /* Heaviest (last, under causal masks) query blocks first. */
        const int mb = nM - 1 - (int)(vb % nM);
        const int64_t bh = vb / nM;
        const int h = (int)(bh % p.Hq);
        const int64_t b = bh / p.Hq;
        const int hk = h / p.group;
        const int m0 = mb * BM;
        const int mlast = min(m0 + BM, p.Sq) - 1;

        const T *Qb = Qg + b * a.sq[0] + (int64_t)h * a.sq[2];
        const T *Kb = Kg + b * a.sk[0] + (int64_t)hk * a.sk[2];
        const T *Vb = Vg + b * a.sv[0] + (int64_t)hk * a.sv[2];

        const KeyTiles kt = key_tiles<BN>(p.mask, m0, mlast);
        const Vis vfirst = vis_of(p.mask, m0, p.Sq), vlast = vis_of(p.mask, mlast, p.Sq);
        /* This thread's rows: row0 + 16·mt (+8), row0 = m0 + warp·16·MT + g. */
        const int row0 = m0 + warp * 16 * MT + g;
        RowVis rv[MT];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) rv[mt] = row_vis(p.mask, row0 + 16 * mt, p.Sq);
        fc_score_modf mod = {0.f, 0.f, 0.f};
        fc_score_foldf fold = {0.f, 0.f, 0.f, 0};
        if (MOD) {
            mod = fcc_score_mod_l2(p, b, h);
            fold = fc_score_fold(&mod);
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
        load_tile<T, K, BM>(sQ, Qb, a.sq[1], m0, p.Sq, p.D, p.vec16, tid);
        if (kt.first < kt.b1) load_tile<T, K, BN>(sK, Kb, a.sk[1], kt.first * BN, p.Sk, p.D, p.vec16, tid);
        cp_async_commit();

        uint32_t qf[K::QREG ? MT : 1][K::QREG ? NKK : 1][4];
        if (K::QREG) {
            cp_async_wait<0>();
            __syncthreads();
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int kk = 0; kk < NKK; ++kk)
                    ldsm_x4(sQa + 2 * (q_off + mt * 16 * LD + kk * 16), qf[mt][kk][0], qf[mt][kk][1],
                            qf[mt][kk][2], qf[mt][kk][3]);
        }

        for (int tile = kt.first; tile < kt.b1; tile = kt.next(tile)) {
            const int n0 = tile * BN;
            cp_async_wait<0>(); /* K[tile] (and Q) landed */
            __syncthreads();    /* ... for all threads; everyone is done with sV */
            load_tile<T, K, BN>(sV, Vb, a.sv[1], n0, p.Sk, p.D, p.vec16, tid);
            cp_async_commit();

            float acc_s[MT][NJ][4]; /* MT·16 × BN per warp */
            qk_tile<T, K>(acc_s, qf, sQa, sKa, q_off, k_off);
            if (MOD) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    float dist0[2];
                    tile_dist0(p, row0 + 16 * mt, n0 + 2 * t4, dist0);
                    tile_score_mod(acc_s[mt], mod, fold, dist0);
                }
            }
            /* Per-element masks only where some row of the CTA sees part of the tile. */
            if (!tile_full<BN>(vfirst, vlast, n0, p.Sk)) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) tile_mask(acc_s[mt], rv[mt], n0 + 2 * t4);
            }

            cp_async_wait<0>(); /* V[tile] landed */
            __syncthreads();    /* ... for all; everyone is done with sK */
            if (kt.next(tile) < kt.b1) {
                load_tile<T, K, BN>(sK, Kb, a.sk[1], kt.next(tile) * BN, p.Sk, p.D, p.vec16, tid);
                cp_async_commit();
            }

            uint32_t pa[MT][BN / 16][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                float alpha[2];
                tile_softmax(acc_s[mt], m_i[mt], l_i[mt], alpha, mul);
                tile_rescale(acc_o[mt], alpha);
                tile_pack_p<T>(acc_s[mt], pa[mt]);
            }
            pv_tile<T, K>(acc_o, pa, sVa, v_off);
        }
        /* No cp.async of any thread may still target sQ (no key tile leaves
         * the Q load pending) when the warps start staging O there. */
        cp_async_wait<0>();
        __syncthreads();

        /* Epilogue: O·factor and L (row_finish, with the sink logit); O staged
         * in this warp's own sQ rows (only this warp ever read them). */
        const bool has_sink = a.sink_logits != nullptr;
        const float sink = (float)fc_attn_sink(&a, h);
        float *lse = static_cast<float *>(a.lse);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            float f[2], L[2];
            row_finish(m_i[mt], l_i[mt], mul_ln, has_sink, sink, f, L);
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int row = row0 + 16 * mt + 8 * hf;
                if (lse && t4 == 0 && row < p.Sq)
                    lse[b * a.slse[0] + (int64_t)h * a.slse[1] + (int64_t)row * a.slse[2]] = L[hf];
            }
#pragma unroll
            for (int j = 0; j < ND; ++j) {
                const int r = warp * 16 * MT + mt * 16 + g;
                const int c = j * 8 + 2 * t4;
                *reinterpret_cast<uint32_t *>(sQ + r * LD + c) =
                    Ops<T>::pack(acc_o[mt][j][0] * f[0], acc_o[mt][j][1] * f[0]);
                *reinterpret_cast<uint32_t *>(sQ + (r + 8) * LD + c) =
                    Ops<T>::pack(acc_o[mt][j][2] * f[1], acc_o[mt][j][3] * f[1]);
            }
        }
        __syncwarp();
        store_o_rows<T, K>(Og + b * a.so[0] + (int64_t)h * a.so[2], a.so[1], sQ, m0, warp * 16 * MT, p.Sq, p.D,
                           p.out_vec16, lane);
        __syncthreads(); /* smem is reused by the next virtual block */
    }
}

template <class K> static constexpr size_t smem_bytes() { return (size_t)K::SMEM_ELEMS * 2; /* 2-byte T */ }

/* Launches tile shape K: the plain or the modifier path (attn_fwd_tile.cuh). */
template <typename T, class K> static flashc_status run_fwd(const fcc_attn &p) {
    const int nM = (p.Sq + K::BM - 1) / K::BM;
    const int64_t total = (int64_t)nM * p.Hq * p.a.B;
    const int64_t maxg = 2147483647;
    const unsigned grid = (unsigned)(total < maxg ? total : maxg);
    const bool mod = !p.plain_score || !p.scale_pos;
    auto kern = mod ? attn_fwd_tc_kernel<T, K, true> : attn_fwd_tc_kernel<T, K, false>;
    FCC_TRY(fcc_set_smem((const void *)kern, smem_bytes<K>(), "attn_fwd_tc"));
    kern<<<grid, K::NT, smem_bytes<K>(), fcc_stream(p.a.stream)>>>(p, nM, total);
    FCC_CHECK_LAUNCH("attn_fwd_tc_kernel");
    return FLASHC_OK;
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

/* Calls f(K{}) with the tile shape K of padded head dim HDp (BM = 16·MT·NW
 * rows per CTA): two m16 tiles per warp up to HD = 128 (each K/V fragment
 * read from smem feeds two MMAs: measured 295 vs 198 TFLOP/s at HD 128,
 * H100, see benchmarks/NOTES.md); above HD = 64 the Q fragments are re-read
 * from smem each k16 step to stay within 255 registers; HD ≥ 192 keeps one
 * m16 tile. */
template <class F> static auto with_tile(int HDp, F &&f) {
    switch (HDp) {
    case 32: return f(FwdTraits<32, 4, 2, 64, true>{});
    case 64: return f(FwdTraits<64, 4, 2, 64, true>{});
    case 96: return f(FwdTraits<96, 4, 1, 64, true>{});
    case 128: return f(FwdTraits<128, 4, 2, 64, false>{});
    case 192: return f(FwdTraits<192, 4, 1, 64, false>{});
    default: return f(FwdTraits<256, 4, 1, 64, false>{});
    }
}

#ifdef FC_TC_EXPERIMENTS
/* Tile-shape experiments for the harness (tests/cuda_harness): not built in
 * the module. Variant v of a problem fcc_fwd_mma_supports() accepted, D ≤ 128. */
flashc_status fc_tc_fwd_variant(const fcc_attn &p, int v) {
#define FC_V(T)                                                                     \
    switch (v) {                                                                    \
    case 0: return p.D <= 64 ? run_fwd<T, FwdTraits<64, 4, 2, 64, true>>(p)         \
                             : run_fwd<T, FwdTraits<128, 4, 1, 64, true>>(p);       \
    case 1: return p.D <= 64 ? run_fwd<T, FwdTraits<64, 4, 1, 64, true>>(p)         \
                             : run_fwd<T, FwdTraits<128, 8, 1, 64, true>>(p);       \
    case 2: return p.D <= 64 ? run_fwd<T, FwdTraits<64, 8, 1, 64, true>>(p)         \
                             : run_fwd<T, FwdTraits<128, 4, 2, 64, false>>(p);      \
    case 3: return p.D <= 64 ? run_fwd<T, FwdTraits<64, 4, 2, 128, true>>(p)        \
                             : run_fwd<T, FwdTraits<128, 4, 1, 128, true>>(p);      \
    case 4: return p.D <= 64 ? run_fwd<T, FwdTraits<64, 8, 2, 64, true>>(p)         \
                             : run_fwd<T, FwdTraits<128, 8, 1, 128, true>>(p);      \
    case 5: return p.D <= 64 ? run_fwd<T, FwdTraits<64, 4, 2, 64, false>>(p)        \
                             : run_fwd<T, FwdTraits<128, 4, 2, 32, false>>(p);      \
    case 6: return p.D <= 64 ? run_fwd<T, FwdTraits<64, 4, 2, 32, true>>(p)         \
                             : run_fwd<T, FwdTraits<128, 8, 2, 64, false>>(p);      \
    default: return fcc_error(FLASHC_ERR_INVALID_ARGUMENT, "no tile variant %d", v); \
    }
    if (p.a.dtype == FLASHC_BF16) { FC_V(__nv_bfloat16) }
    FC_V(__half)
#undef FC_V
}
#endif

} // namespace fctc

bool fcc_fwd_mma_supports(const fcc_attn &p) {
    const fc_attn &a = p.a;
    /* F32 must stay accurate to fp32 (no TF32) and F64 in F64: generic kernel. */
    if (a.dtype != FLASHC_F16 && a.dtype != FLASHC_BF16) return false;
    /* m16n8k16 bf16 needs sm_80; ldmatrix/cp.async need contiguous rows of d;
     * positions are int32 inside the kernel. */
    if (p.dev.cc < 80 || a.D < 1 || a.D > 256 || !p.d_contig || !p.fits_int32) return false;
    const size_t smem = fctc::with_tile(fctc::padded_hd(a.D), [](auto k) { return fctc::smem_bytes<decltype(k)>(); });
    return smem <= (size_t)p.dev.smem_optin;
}

flashc_status fcc_fwd_mma_run(const fcc_attn &p) {
    return fctc::with_tile(fctc::padded_hd(p.D), [&](auto k) {
        using K = decltype(k);
        if (p.a.dtype == FLASHC_BF16) return fctc::run_fwd<__nv_bfloat16, K>(p);
        return fctc::run_fwd<__half, K>(p);
    });
}
