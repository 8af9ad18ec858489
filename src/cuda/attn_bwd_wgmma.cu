/*
 * attn_bwd_wgmma.cu — Hopper (sm_90a) attention backward for F16/BF16,
 * D ≤ 128 (zero-padded to HD = 64 or 128 by the tensor maps): warpgroup MMA
 * (wgmma) fed by TMA, warp-specialised like the forward (attn_fwd_wgmma.cu).
 * Compiled only for sm_90a; the plan (attn_dispatch.cu) picks it when
 * fcc_bwd_wgmma_supports() holds (compute capability 9.0 among its
 * conditions), else the mma.sync backward (attn_bwd_tc.cu).
 *
 *   dout, q, o [B, Sq, Hq, D]; k, v [B, Sk, Hkv, D]; lse [B, Hq, Sq] f32
 *   → dq like q; dk, dv like k; dsinks [Hq] f32
 *
 * The mathematics is attn_bwd_tc.cu's (the element steps are shared:
 * attn_bwd_tile.cuh), as are the two row passes before the kernels
 * (attn_generic_bwd.cu: Δ and L per row, the dsinks tree). Two kernels,
 * both deterministic (no atomics, a fixed order of every sum: bit-identical
 * across runs whatever `deterministic` says):
 *
 * 1. dK/dV: one CTA per (key block of 128, kv head, batch), 3 warpgroups.
 *    WG0 (producer, setmaxnreg 40): the K and V blocks once; then per tile
 *      (query head of the GQA group × 64 query rows of the row segments
 *      that see the block, fc_key_block_rows) Q and dO by TMA and L·log2e,
 *      Δ by warp 1 into a 3-stage ring.
 *    WG1, WG2 (consumers, 64 keys each): Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ
 *      (m64n64k16, both operands in smem), Pᵀ and dSᵀ in registers
 *      (dkdv_p, dkdv_ds), dV += Pᵀ·dO and dK += dSᵀ·Q (m64n64k16 per 64
 *      columns of D, Pᵀ/dSᵀ as the register A operand, dO/Q through a
 *      transposed descriptor). dK·scale and dV stored from registers.
 *    Rows of a tile past its segment's end read zeros (the TMA fill past
 *    Sq, or the producer zeroes them where the segment ends inside the
 *    problem), and L = +inf: P = dS = 0 there, as the mma.sync kernel's
 *    zero-filled loads give.
 * 2. dQ: one CTA per (128 query rows, head, batch), 3 warpgroups: the
 *    producer loads Q, dO once and K, V tiles of 64 keys into a 3-stage
 *    ring; each consumer (64 rows): S = Q·Kᵀ, dP = dO·Vᵀ, dS (dq_p,
 *    dq_ds), dQ += dS·K (K through a transposed descriptor).
 *    Masked NaN/Inf: dQ += dS·K multiplies a masked dS = 0 by the whole K
 *    tile, so K tiles that some row cannot wholly see are scrubbed by the
 *    producer (non-finite → +0; the forward's V scrub, attn_wgmma.cuh) and
 *    the rows that see a key that held such a value get dQ = NaN.
 *    In the dK/dV kernel a key's own K/V only reach its own dK/dV row.
 * The score modifiers (MOD = the variant is not plain) run the same steps
 * as the mma.sync kernel (attn_bwd_tile.cuh).
 * Within a warpgroup, the next tile's two score products are issued right
 * behind this tile's accumulating products, so the tensor cores have queued
 * work while the elementwise steps run; the two consumer warpgroups overlap
 * each other. benchmarks/NOTES.md has the figures and what is left (dQ in
 * the dK/dV kernel with ordered accumulation, D = 192/256).
 */
#include "attn_bwd_tile.cuh"
#include "attn_wgmma.cuh"

#include <algorithm>
#include <limits.h>
#include <math.h>

namespace fcwgb {
using namespace fcwg;
using namespace fctcb;

/* TMA of a [R rows, HD] tile (R a multiple of 64: the maps' boxes are
 * [64 rows, 64 columns]) at rows row0.. of (head h, batch b) into dst:
 * NDB column blocks of R × 128 bytes. Completion on bar. */
template <int R, int NDB>
__device__ __forceinline__ void tma_tile(uint32_t dst, const CUtensorMap *m, uint32_t bar, int row0, int h, int b) {
#pragma unroll
    for (int db = 0; db < NDB; ++db)
#pragma unroll
        for (int r = 0; r < R / 64; ++r) tma_load_4d(dst + db * R * 128 + r * 64 * 128, m, bar, db * 64, row0 + 64 * r, h, b);
}

/* acc (m64 × N, N = 8·NJ) = A·Bᵀ over HD: A = 64 rows at a (column blocks
 * astride bytes apart), B = N rows at bsm (column blocks bstride apart),
 * both K-major 128B-swizzled. Issued and committed, not waited for. */
template <typename T, int HD, int NJ>
__device__ __forceinline__ void issue_abt(float (&acc)[NJ][4], uint32_t a, int astride, uint32_t bsm, int bstride) {
    static_assert(NJ == 8, "m64n64");
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
        const uint32_t koff = (kk & 3) * 32; /* k16 step inside the 128-byte row */
        const uint64_t da = sw128_desc(a + (kk >> 2) * astride + koff, 16, 1024);
        const uint64_t db = sw128_desc(bsm + (kk >> 2) * bstride + koff, 16, 1024);
        WgOps<T>::ss_n64(&acc[0][0], da, db, kk > 0 ? 1 : 0); /* kk = 0 overwrites */
    }
    wg_commit();
}

/* acc (m64 × HD) += A·B: A = KT k16 register fragments, B = the [k rows][HD]
 * tile at bsm (R rows per column block; d contiguous → transposed). Issued,
 * not committed. */
template <typename T, int HD, int KT, int R>
__device__ __forceinline__ void issue_ab(float (&acc)[HD / 8][4], const uint32_t (&a)[KT][4], uint32_t bsm) {
#pragma unroll
    for (int kk = 0; kk < KT; ++kk)
#pragma unroll
        for (int db = 0; db < HD / 64; ++db)
            WgOps<T>::rs_n64_tb(&acc[db * 8][0], a[kk], sw128_desc(bsm + db * R * 128 + kk * 16 * 128, 1024, 1024));
}

template <int NJ> __device__ __forceinline__ void zero_acc(float (&acc)[NJ][4]) {
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
}

/* ---------------------------------------------------------------- dK/dV */
template <int HD_> struct KvTraits {
    static constexpr int HD = HD_;
    static constexpr int BN = 128; /* keys per CTA: 64 per consumer warpgroup */
    static constexpr int BQ = 64;  /* query rows per tile */
    static constexpr int ST = 3;   /* stages of the Q/dO/L/Δ ring */
    static constexpr int NDB = HD / 64;
    static constexpr int KV_BYTES = BN * HD * 2; /* the K or the V block */
    static constexpr int T_BYTES = BQ * HD * 2;  /* one Q or dO tile */
    static constexpr int OFF_V = KV_BYTES;
    static constexpr int OFF_Q = 2 * KV_BYTES;
    static constexpr int OFF_DO = OFF_Q + ST * T_BYTES;
    static constexpr int OFF_LD = OFF_DO + ST * T_BYTES; /* [ST][2][BQ] fp32: L·log2e, Δ */
    static constexpr int SMEM = OFF_LD + ST * 2 * BQ * 4 + 1024; /* + alignment slack */
    static_assert(HD == 64 || HD == 128, "HD 64 or 128");
};

/* Zeroes rows [r0, R) of the NDB column blocks of a tile at dst (R rows of
 * 128 bytes each; swizzling permutes chunks inside a row only), by the 128
 * producer threads. */
template <int R, int NDB> __device__ __forceinline__ void zero_rows(uint32_t dst, int r0, int t) {
    const int n = (R - r0) * 8 * NDB; /* 16-byte chunks */
    for (int c = t; c < n; c += 128) {
        const int db = c / ((R - r0) * 8), rc = c % ((R - r0) * 8);
        const uint32_t addr = dst + db * R * 128 + (r0 + rc / 8) * 128 + (rc % 8) * 16;
        asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(addr), "r"(0u) : "memory");
    }
}

template <typename T, class K, int V>
__global__ void __launch_bounds__(384, 1)
    bwd_dkdv_wgmma_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tdo,
                          const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv,
                          const __grid_constant__ fcc_attn p, const int nkb, const float *Lb, const float *Db) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int HD = K::HD, BN = K::BN, BQ = K::BQ, ST = K::ST, NDB = K::NDB;
    constexpr bool MOD = V != FC_SCORE_PLAIN;
    /* dPᵀ in flight while Pᵀ is computed, Sᵀ beside [dV, dK]; not on the
     * modifier path at HD = 128 (one product at a time there): its extra
     * registers made ptxas serialise every wgmma. */
    constexpr bool DP_EARLY = !(MOD && HD == 128);
    extern __shared__ unsigned char smem_raw[];
    __shared__ __align__(8) uint64_t bars[1 + 3 * ST]; /* K/V; tile full, empty, land (zeroed stages) */
    const uint32_t raw = smem_u32(smem_raw), base = (raw + 1023u) & ~1023u;
    const uint32_t sK = base, sV = base + K::OFF_V, sQ = base + K::OFF_Q, sdO = base + K::OFF_DO;
    float *sLD = reinterpret_cast<float *>(smem_raw + (base - raw) + K::OFF_LD);
    const uint32_t barKV = smem_u32(&bars[0]);
    const Ring<ST> rq = {smem_u32(&bars[1]), smem_u32(&bars[1 + ST])};
    const uint32_t qland = smem_u32(&bars[1 + 2 * ST]);

    const fc_attn &a = p.a;
    const fc_mask &mask = p.mask;
    const int tid = threadIdx.x, wg = tid >> 7;
    int vb = blockIdx.x;
    const int kb = vb % nkb;
    vb /= nkb;
    const int hk = vb % p.Hkv;
    const int b = vb / p.Hkv;
    const int n0 = kb * BN, n1 = min(n0 + BN, p.Sk);

    /* The query rows that see some key of [n0, n1): ≤ 2 row segments, cut
     * into tiles of BQ rows; iterations: the GQA group's heads × the tiles. */
    int seg_s[2] = {0, 0}, seg_e[2] = {0, 0};
    {
        int64_t r0[2], r1[2];
        const int n = fc_key_block_rows(&mask, n0, n1, r0, r1);
        if (n > 0) { seg_s[0] = (int)r0[0]; seg_e[0] = (int)r1[0]; }
        if (n > 1) { seg_s[1] = (int)r0[1]; seg_e[1] = (int)r1[1]; }
    }
    const int nt0 = (seg_e[0] - seg_s[0] + BQ - 1) / BQ;
    const int ntg = nt0 + (seg_e[1] - seg_s[1] + BQ - 1) / BQ;
    const int n_iter = p.group * ntg;
    auto tile_of = [&](int it, int &h, int &i0, int &iend) {
        const int gi = it / ntg, r = it % ntg;
        h = hk * p.group + gi;
        if (r < nt0) { i0 = seg_s[0] + r * BQ; iend = seg_e[0]; }
        else { i0 = seg_s[1] + (r - nt0) * BQ; iend = seg_e[1]; }
    };

    if (tid == 0) {
        mbar_init(barKV, 1);
        for (int s = 0; s < ST; ++s) {
            mbar_init(rq.full + 8 * s, 2);    /* the TMA (or the zeroing) + warp 1's L/Δ */
            mbar_init(rq.empty + 8 * s, 256); /* every consumer thread */
            mbar_init(qland + 8 * s, 1);
        }
        mbar_fence_init();
    }
    __syncthreads();

    if (wg == 0) {
        /* ------------------------------------------------ producer */
        setmaxnreg_dec<40>();
        const int warp = tid >> 5, lane = tid & 31;
        if (n_iter > 0 && tid == 0) {
            mbar_expect_tx(barKV, 2 * K::KV_BYTES);
            tma_tile<BN, NDB>(sK, &tk, barKV, n0, hk, b);
            tma_tile<BN, NDB>(sV, &tv, barKV, n0, hk, b);
        }
        uint32_t qpar = 0; /* bit s: parity of qland[s]'s next phase */
        for (int it = 0; it < n_iter; ++it) {
            int h, i0, iend;
            tile_of(it, h, i0, iend);
            const int st = it % ST;
            /* Rows [iend, i0 + BQ) inside the problem hold other rows' data: zeroed. */
            const bool fix = i0 + BQ > iend && iend < p.Sq;
            if (tid == 0) {
                rq.wait_empty(it);
                const uint32_t bar = fix ? qland + 8 * st : rq.full + 8 * st;
                mbar_expect_tx(bar, 2 * K::T_BYTES);
                tma_tile<BQ, NDB>(sQ + st * K::T_BYTES, &tq, bar, i0, h, b);
                tma_tile<BQ, NDB>(sdO + st * K::T_BYTES, &tdo, bar, i0, h, b);
            } else if (warp == 1) {
                rq.wait_empty(it);
                const int64_t rowbase = ((int64_t)b * p.Hq + h) * p.Sq;
                float *L = sLD + st * 2 * BQ, *Dl = L + BQ;
                for (int r = lane; r < BQ; r += 32) {
                    const bool ok = i0 + r < iend; /* rows past the segment: P = 0 */
                    L[r] = ok ? lse_l2(Lb[rowbase + i0 + r]) : INFINITY;
                    Dl[r] = ok ? Db[rowbase + i0 + r] : 0.f;
                }
                __syncwarp();
                if (lane == 0) mbar_arrive(rq.full + 8 * st);
            }
            if (fix) {
                mbar_wait(qland + 8 * st, (qpar >> st) & 1u);
                qpar ^= 1u << st;
                zero_rows<BQ, NDB>(sQ + st * K::T_BYTES, iend - i0, tid);
                zero_rows<BQ, NDB>(sdO + st * K::T_BYTES, iend - i0, tid);
                fence_proxy_async_smem();
                producer_sync();
                if (tid == 0) mbar_arrive(rq.full + 8 * st);
            }
        }
    } else {
        /* ------------------------------------------------ consumers */
        setmaxnreg_inc<232>();
        const int cw = wg - 1;
        const int warp = (tid >> 5) & 3, lane = tid & 31;
        const int g = lane >> 2, t4 = lane & 3;
        const int kc0 = n0 + cw * 64;            /* this warpgroup's keys kc0 .. kc0 + 63 */
        const int key0 = kc0 + warp * 16 + g;    /* this thread's: key0, key0 + 8 */
        const uint32_t kA = sK + cw * 64 * 128, vA = sV + cw * 64 * 128;

        float acc_dk[HD / 8][4], acc_dv[HD / 8][4], acc_s[BQ / 8][4], acc_dp[BQ / 8][4];
        zero_acc(acc_dk);
        zero_acc(acc_dv);
        zero_acc(acc_s); /* once: defined for the "+f" operands */
        zero_acc(acc_dp);
        uint32_t pa[BQ / 16][4], da[BQ / 16][4];
        /* Software pipeline (the forward's shape: nothing in flight across
         * the loop's back edge): iteration it issues [dV, dK](it − 1), then
         * Sᵀ(it), then dPᵀ(it); Pᵀ(it) is computed while dPᵀ(it) is in flight. */
        auto issue_dkv = [&](int it) { /* [dV, dK] += [Pᵀ, dSᵀ]·[dO, Q] of tile it (pa, da) */
            const int st = it % ST;
            issue_ab<T, HD, BQ / 16, BQ>(acc_dv, pa, sdO + st * K::T_BYTES); /* dV += Pᵀ dO */
            issue_ab<T, HD, BQ / 16, BQ>(acc_dk, da, sQ + st * K::T_BYTES);  /* dK += dSᵀ Q */
            wg_commit();
        };
        if (n_iter > 0) mbar_wait(barKV, 0);
        for (int it = 0; it < n_iter; ++it) {
            int h, i0, iend;
            tile_of(it, h, i0, iend);
            const int st = it % ST;
            const float *Lt = sLD + st * 2 * BQ, *Dt = Lt + BQ;
            rq.wait_full(it);
            wg_fence();
            if (it > 0) issue_dkv(it - 1);
            if (!DP_EARLY) wg_wait<0>(); /* serial: [dV, dK](it − 1) before Sᵀ(it) */
            issue_abt<T, HD>(acc_s, kA, BN * 128, sQ + st * K::T_BYTES, BQ * 128); /* Sᵀ = K Qᵀ */
            /* dPᵀ only once [dV, dK](it − 1) has landed: its accumulator, Pᵀ/dSᵀ
             * of tile it − 1 and dK/dV together would not fit the registers at
             * HD = 128 (ptxas serialises every wgmma then). */
            wg_wait<1>(); /* [dV, dK](it − 1) landed */
            acc_fence(acc_dv);
            acc_fence(acc_dk);
            acc_fence(pa); /* pa, da: read by [dV, dK](it − 1) until here */
            acc_fence(da);
            if (it > 0) rq.release(it - 1);
            if (DP_EARLY) {
                issue_abt<T, HD>(acc_dp, vA, BN * 128, sdO + st * K::T_BYTES, BQ * 128); /* dPᵀ = V dOᵀ */
                wg_wait<1>(); /* Sᵀ(it) landed */
            } else {
                wg_wait<0>();
            }
            acc_fence(acc_s);
            /* Does every row of the tile see every key of the warpgroup's 64? */
            const bool full =
                tile_full<64>(vis_of(mask, i0, p.Sq), vis_of(mask, min(i0 + BQ, iend) - 1, p.Sq), kc0, p.Sk);
            uint32_t vis = ~0u;
            fc_score_modf mod = {0.f, 0.f, 0.f};
            if (MOD) {
                mod = fcc_score_mod_l2(p, b, h);
                /* Per k16 chunk of query rows: P packed at once, P·g kept. */
#pragma unroll
                for (int kk = 0; kk < BQ / 16; ++kk) {
                    float pv[2][4];
                    uint32_t pa1[1][4];
                    dkdv_p<V>(p, mask, p.score, mod, acc_s, pv, 2 * kk, Lt, i0, iend, key0, t4, full, vis);
                    tile_pack_p<T>(pv, pa1);
#pragma unroll
                    for (int e = 0; e < 4; ++e) pa[kk][e] = pa1[0][e];
                }
            } else {
                dkdv_p<V>(p, mask, p.score, mod, acc_s, acc_s, 0, Lt, i0, iend, key0, t4, full, vis);
            }
            if (!DP_EARLY) issue_abt<T, HD>(acc_dp, vA, BN * 128, sdO + st * K::T_BYTES, BQ * 128);
            wg_wait<0>(); /* dPᵀ(it) landed */
            acc_fence(acc_dp);
            dkdv_ds(acc_dp, acc_s, Dt, t4, full, vis);
            if (!MOD) tile_pack_p<T>(acc_s, pa);
            tile_pack_p<T>(acc_dp, da);
        }
        if (n_iter > 0) {
            wg_fence();
            issue_dkv(n_iter - 1);
            wg_wait<0>();
            acc_fence(acc_dv);
            acc_fence(acc_dk);
            acc_fence(pa);
            acc_fence(da);
            rq.release(n_iter - 1);
        }

        /* Epilogue: dK·scale, dV; keys key0 and key0 + 8. */
        T *dkp = static_cast<T *>(a.dk) + (int64_t)b * a.sdk[0] + (int64_t)hk * a.sdk[2];
        T *dvp = static_cast<T *>(a.dv) + (int64_t)b * a.sdv[0] + (int64_t)hk * a.sdv[2];
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int key = key0 + 8 * hf;
            if (key >= p.Sk) continue;
            T *dkr = dkp + (int64_t)key * a.sdk[1], *dvr = dvp + (int64_t)key * a.sdv[1];
#pragma unroll
            for (int j = 0; j < HD / 8; ++j) {
                const int col = j * 8 + 2 * t4;
                store_pair(dkr, col, p.D, acc_dk[j][2 * hf] * p.scale, acc_dk[j][2 * hf + 1] * p.scale,
                           p.out_pairs);
                store_pair(dvr, col, p.D, acc_dv[j][2 * hf], acc_dv[j][2 * hf + 1], p.out_pairs);
            }
        }
    }
#endif
}

/* ---------------------------------------------------------------- dQ */
template <int HD_> struct QTraits {
    static constexpr int HD = HD_;
    static constexpr int BM = 128; /* query rows per CTA: 64 per consumer warpgroup */
    static constexpr int BN = 64;  /* keys per tile */
    static constexpr int ST = 3;   /* stages of the K/V ring */
    static constexpr int NDB = HD / 64;
    static constexpr int Q_BYTES = BM * HD * 2; /* Q or dO */
    static constexpr int KV_BYTES = BN * HD * 2; /* one K or V tile */
    static constexpr int OFF_DO = Q_BYTES;
    static constexpr int OFF_K = 2 * Q_BYTES;
    static constexpr int OFF_V = OFF_K + ST * KV_BYTES;
    static constexpr int SMEM = OFF_V + ST * KV_BYTES + 1024;
    static_assert(HD == 64 || HD == 128, "HD 64 or 128");
};

template <typename T, class K, int V, bool SCRUB>
__global__ void __launch_bounds__(384, 1)
    bwd_dq_wgmma_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tdo,
                        const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv,
                        const __grid_constant__ fcc_attn p, const int nM, const float *Lb, const float *Db) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int HD = K::HD, BN = K::BN, BM = K::BM, ST = K::ST, NDB = K::NDB;
    extern __shared__ unsigned char smem_raw[];
    /* Q+dO; K/V full, empty, land (scrubbed stages); logdone */
    __shared__ __align__(8) uint64_t bars[1 + 3 * ST + 1];
    __shared__ uint32_t vbad[4];   /* the tile being scrubbed: keys that held NaN/Inf */
    __shared__ uint32_t rowbad[4]; /* the CTA's rows that saw such a key */
    const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const uint32_t sQ = base, sdO = base + K::OFF_DO, sK = base + K::OFF_K, sV = base + K::OFF_V;
    const uint32_t barQ = smem_u32(&bars[0]);
    const Ring<ST> rkv = {smem_u32(&bars[1]), smem_u32(&bars[1 + ST])};
    const uint32_t kland = smem_u32(&bars[1 + 2 * ST]);
    const uint32_t logdone = smem_u32(&bars[1 + 3 * ST]);

    const fc_attn &a = p.a;
    const fc_mask &mask = p.mask;
    const int tid = threadIdx.x, wg = tid >> 7;
    const int vb = blockIdx.x;
    const int mb = nM - 1 - vb % nM; /* heaviest (causal) blocks first */
    const int bh = vb / nM;
    const int h = bh % p.Hq;
    const int b = bh / p.Hq;
    const int hk = h / p.group;
    const int m0 = mb * BM;
    const int mlast = min(m0 + BM, p.Sq) - 1;
    const KeyTiles kt = key_tiles<BN>(mask, m0, mlast);

    if (tid == 0) {
        mbar_init(barQ, 1);
        for (int s = 0; s < ST; ++s) {
            mbar_init(rkv.full + 8 * s, 1);
            mbar_init(rkv.empty + 8 * s, 256);
            mbar_init(kland + 8 * s, 1);
        }
        mbar_init(logdone, 128);
        mbar_fence_init();
    }
    __syncthreads();

    if (wg == 0) {
        /* ------------------------------------------------ producer */
        setmaxnreg_dec<40>();
        bool saw = false; /* CTA row m0 + tid sees a key whose K held NaN/Inf */
        if (kt.first < kt.b1) {
            if (tid == 0) {
                mbar_expect_tx(barQ, 2 * K::Q_BYTES);
                tma_tile<BM, NDB>(sQ, &tq, barQ, m0, h, b);
                tma_tile<BM, NDB>(sdO, &tdo, barQ, m0, h, b);
            }
            const Vis cfirst = vis_of(mask, m0, p.Sq), clast = vis_of(mask, mlast, p.Sq);
            const Vis myrow = vis_of(mask, m0 + tid, p.Sq);
            uint32_t kpar = 0; /* bit s: parity of kland[s]'s next phase */
            int it = 0;
            for (int tile = kt.first; tile < kt.b1; tile = kt.next(tile), ++it) {
                const int st = it % ST;
                const bool scrub = SCRUB && scrub_tile<BN>(cfirst, clast, tile, p.Sk);
                if (tid == 0) {
                    rkv.wait_empty(it);
                    const uint32_t bar = scrub ? kland + 8 * st : rkv.full + 8 * st;
                    mbar_expect_tx(bar, 2 * K::KV_BYTES);
                    tma_tile<BN, NDB>(sK + st * K::KV_BYTES, &tk, bar, tile * BN, hk, b);
                    tma_tile<BN, NDB>(sV + st * K::KV_BYTES, &tv, bar, tile * BN, hk, b);
                }
                if (scrub) {
                    saw |= scrub_stage<T, K>(sK + st * K::KV_BYTES, kland + 8 * st, (kpar >> st) & 1u,
                                             rkv.full + 8 * st, tid, vbad, myrow, tile * BN);
                    kpar ^= 1u << st;
                }
            }
        }
        if (SCRUB) {
            const uint32_t m = __ballot_sync(0xffffffffu, saw);
            if ((tid & 31) == 0) rowbad[tid >> 5] = m;
            mbar_arrive(logdone);
        }
    } else {
        /* ------------------------------------------------ consumers */
        setmaxnreg_inc<232>();
        constexpr int V_ = V;
        const int cw = wg - 1;
        const int warp = (tid >> 5) & 3, lane = tid & 31;
        const int g = lane >> 2, t4 = lane & 3;
        const int r0 = m0 + cw * 64;
        const int row0 = r0 + warp * 16 + g; /* this thread's rows: row0, row0 + 8 */
        const Vis wfirst = vis_of(mask, r0, p.Sq), wlast = vis_of(mask, r0 + 63, p.Sq);
        const RowVis rv = row_vis(mask, row0, p.Sq);
        fc_score_modf mod = {0.f, 0.f, 0.f};
        if (V_ != FC_SCORE_PLAIN) mod = fcc_score_mod_l2(p, b, h);
        const int64_t rowbase = ((int64_t)b * p.Hq + h) * p.Sq;
        float Lr[2], Dr[2];
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int row = row0 + 8 * hf;
            Lr[hf] = row < p.Sq ? lse_l2(Lb[rowbase + row]) : INFINITY;
            Dr[hf] = row < p.Sq ? Db[rowbase + row] : 0.f;
        }
        const uint32_t qA = sQ + cw * 64 * 128, dA = sdO + cw * 64 * 128;

        float acc_dq[HD / 8][4], acc_s[BN / 8][4], acc_dp[BN / 8][4];
        zero_acc(acc_dq);
        zero_acc(acc_s);
        zero_acc(acc_dp);
        uint32_t da[BN / 16][4];
        /* Software pipeline (as the dK/dV kernel): iteration it issues
         * dQ(it − 1), then S(it) and dP(it). */
        if (kt.first < kt.b1) mbar_wait(barQ, 0);
        int it = 0;
        for (int tile = kt.first; tile < kt.b1; tile = kt.next(tile), ++it) {
            const int st = it % ST, n0 = tile * BN;
            rkv.wait_full(it);
            wg_fence();
            if (it > 0) issue_ab<T, HD, BN / 16, BN>(acc_dq, da, sK + ((it - 1) % ST) * K::KV_BYTES); /* dQ += dS K */
            wg_commit();
            issue_abt<T, HD>(acc_s, qA, BM * 128, sK + st * K::KV_BYTES, BN * 128);  /* S = Q Kᵀ */
            issue_abt<T, HD>(acc_dp, dA, BM * 128, sV + st * K::KV_BYTES, BN * 128); /* dP = dO Vᵀ */
            wg_wait<1>(); /* dQ(it − 1) and S(it) landed */
            acc_fence(acc_s);
            acc_fence(acc_dq);
            acc_fence(da); /* read by dQ(it − 1) until here */
            if (it > 0) rkv.release(it - 1);
            const bool full = tile_full<BN>(wfirst, wlast, n0, p.Sk);
            const uint32_t vis = dq_p<V>(p, p.score, mod, acc_s, rv, Lr, row0, n0, t4, full);
            wg_wait<0>(); /* dP(it) landed */
            acc_fence(acc_dp);
            dq_ds(acc_dp, acc_s, Dr, full, vis);
            tile_pack_p<T>(acc_dp, da); /* dS rounded to T */
        }
        if (it > 0) {
            wg_fence();
            issue_ab<T, HD, BN / 16, BN>(acc_dq, da, sK + ((it - 1) % ST) * K::KV_BYTES);
            wg_commit();
            wg_wait<0>();
            acc_fence(acc_dq);
            acc_fence(da);
            rkv.release(it - 1);
        }

        float f[2] = {p.scale, p.scale};
        if (SCRUB) {
            mbar_wait(logdone, 0);
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int r = row0 + 8 * hf - m0;
                if ((rowbad[r >> 5] >> (r & 31)) & 1u) f[hf] = __int_as_float(0x7fc00000); /* saw NaN/Inf */
            }
        }
        T *dqp = static_cast<T *>(a.dq) + (int64_t)b * a.sdq[0] + (int64_t)h * a.sdq[2];
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int row = row0 + 8 * hf;
            if (row >= p.Sq) continue;
            T *r = dqp + (int64_t)row * a.sdq[1];
#pragma unroll
            for (int j = 0; j < HD / 8; ++j)
                store_pair(r, j * 8 + 2 * t4, p.D, acc_dq[j][2 * hf] * f[hf], acc_dq[j][2 * hf + 1] * f[hf],
                           p.out_pairs);
        }
    }
#endif
}

/* ------------------------------------------------------------ host */
static int padded(int D) { return D <= 64 ? 64 : 128; }

struct Maps {
    CUtensorMap q, dout, k, v;
};

template <typename T, int HD, int V>
static flashc_status launch(const fcc_attn &p, const Maps &m, const float *Lb, const float *Db) {
    cudaStream_t st = fcc_stream(p.a.stream);
    using KK = KvTraits<HD>;
    using KQ = QTraits<HD>;
    {
        const int nkb = (p.Sk + KK::BN - 1) / KK::BN;
        auto kern = bwd_dkdv_wgmma_kernel<T, KK, V>;
        FCC_TRY(fcc_set_smem((const void *)kern, KK::SMEM, "attn_bwd_wgmma (dK/dV)"));
        kern<<<(unsigned)((int64_t)nkb * p.Hkv * p.a.B), 384, KK::SMEM, st>>>(m.q, m.dout, m.k, m.v, p, nkb, Lb, Db);
        FCC_CHECK_LAUNCH("bwd_dkdv_wgmma_kernel");
    }
    {
        /* SCRUB: only where some row misses some key (as the forward). */
        int64_t se0, lo0, hi0, sel, lol, hil;
        fc_visible_keys(&p.mask, 0, &se0, &lo0, &hi0);
        fc_visible_keys(&p.mask, p.Sq - 1, &sel, &lol, &hil);
        const bool scrub = !(hi0 == p.Sk && (lol == 0 || sel == lol));
        const int nM = (p.Sq + KQ::BM - 1) / KQ::BM;
        auto kern = scrub ? bwd_dq_wgmma_kernel<T, KQ, V, true> : bwd_dq_wgmma_kernel<T, KQ, V, false>;
        FCC_TRY(fcc_set_smem((const void *)kern, KQ::SMEM, "attn_bwd_wgmma (dQ)"));
        kern<<<(unsigned)((int64_t)nM * p.Hq * p.a.B), 384, KQ::SMEM, st>>>(m.q, m.dout, m.k, m.v, p, nM, Lb, Db);
        FCC_CHECK_LAUNCH("bwd_dq_wgmma_kernel");
    }
    return FLASHC_OK;
}

template <typename T>
static flashc_status dispatch(const fcc_attn &p, const Maps &m, const float *Lb, const float *Db) {
    return fcc_score_dispatch<FCC_SCORE_FEW>(fc_score_mode(&p.score), [&](auto v) {
        constexpr int V = decltype(v)::value;
        return padded(p.D) == 64 ? launch<T, 64, V>(p, m, Lb, Db) : launch<T, 128, V>(p, m, Lb, Db);
    });
}

} // namespace fcwgb

bool fcc_bwd_wgmma_supports(const fcc_attn &p) {
    using namespace fcwgb;
    const fc_attn &a = p.a;
    if (p.dev.cc != 90) return false; /* sm_90a code runs there and nowhere else */
    if (fc_attn_is_ragged(&a)) return false; /* dense tensor maps only: ragged runs on mma.sync */
    if (a.dtype != FLASHC_F16 && a.dtype != FLASHC_BF16) return false;
    if (a.D < 1 || a.D > 128) return false;
    /* Positions are int32; no tensor map of extent 0; TMA reads 16-byte
     * aligned rows of q/k/v/o/dout (vec16: also D % 8 == 0); dq/dk/dv are
     * written in 4-byte pairs. */
    if (!p.fits_int32 || a.Sq == 0 || a.Sk == 0 || a.B == 0 || !p.vec16 || !p.out_pairs) return false;
    cuuint64_t dims[4], strides[3];
    if (!map_shape(a.B, a.Sq, a.Hq, a.D, a.sq, dims, strides) ||
        !map_shape(a.B, a.Sq, a.Hq, a.D, a.sdo, dims, strides) ||
        !map_shape(a.B, a.Sk, a.Hkv, a.D, a.sk, dims, strides) ||
        !map_shape(a.B, a.Sk, a.Hkv, a.D, a.sv, dims, strides))
        return false;
    const int64_t gmax = INT_MAX;
    if ((a.Sq + 127) / 128 * a.Hq * a.B > gmax || (a.Sk + 127) / 128 * a.Hkv * a.B > gmax ||
        (a.B * a.Hq * a.Sq + 7) / 8 > gmax)
        return false;
    const int smem = padded((int)a.D) == 64 ? std::max(KvTraits<64>::SMEM, QTraits<64>::SMEM)
                                             : std::max(KvTraits<128>::SMEM, QTraits<128>::SMEM);
    return smem <= p.dev.smem_optin && encode_fn() != nullptr;
}

flashc_status fcc_bwd_wgmma_run(const fcc_attn &p) {
    using namespace fcwgb;
    const fc_attn &a = p.a;
    const CUtensorMapDataType dt =
        a.dtype == FLASHC_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    const EncodeTiledFn enc = encode_fn();
    Maps m;
    if (!enc || !make_map(&m.q, enc, dt, a.q, a.B, a.Sq, a.Hq, a.D, a.sq, 64) ||
        !make_map(&m.dout, enc, dt, a.dout, a.B, a.Sq, a.Hq, a.D, a.sdo, 64) ||
        !make_map(&m.k, enc, dt, a.k, a.B, a.Sk, a.Hkv, a.D, a.sk, 64) ||
        !make_map(&m.v, enc, dt, a.v, a.B, a.Sk, a.Hkv, a.D, a.sv, 64))
        return fcc_bwd_mma_run(p); /* the driver refused a map supports() accepted: same problem, mma.sync */
    cudaStream_t st = fcc_stream(a.stream);
    const size_t nrows = (size_t)(a.B * a.Hq * a.Sq);
    float *scr = nullptr;
    FCC_CHECK(fcc_scratch_alloc((void **)&scr, 2 * nrows * sizeof(float), st));
    float *Lb = scr, *Db = scr + nrows;
    flashc_status s = fcc_bwd_prep_run(p, Lb, Db);
    if (s == FLASHC_OK) s = fcc_bwd_dsinks_run(p, Lb, Db);
    if (s == FLASHC_OK)
        s = a.dtype == FLASHC_BF16 ? dispatch<__nv_bfloat16>(p, m, Lb, Db) : dispatch<__half>(p, m, Lb, Db);
    /* Stream-ordered: freed after the kernels above have run. */
    const cudaError_t e = fcc_scratch_free(scr, st);
    if (s == FLASHC_OK && e != cudaSuccess) return fcc_cuda_error(e, __FILE__, __LINE__, "fcc_scratch_free");
    return s;
}
