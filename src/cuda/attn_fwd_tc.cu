/*
 * attn_fwd_tc.cu — tensor-core attention forward for F16/BF16 and F32
 * (sm_80+).
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
 * Ragged problems (varlen, KV caches, paged): the RAG instantiations
 * (attn_ragged.cuh); the dense ones (RAG = false) are the code of before.
 *
 * F32 (T = float, FwdTraits ES = 4): the same schedule on mma.sync
 * m16n8k8 tf32 with every product in 3xTF32 (tc_common.cuh: fp32 accuracy,
 * as torch's memory-efficient kernel; S accumulated in place, O a fresh
 * fragment per 16 keys added in fp32, since the tensor cores round an
 * accumulation toward zero and O's running sum keeps its sign over
 * thousands of keys), tiles and O staged as fp32 (pitch
 * HD + 4), Q and K fragments by ldmatrix (8 rows × 4 floats per matrix),
 * P kept in fp32 and split per use, V read by 32-bit loads with the keys of
 * a k8 chunk in the order the C fragment of S holds them (slot t ↔ key 2t,
 * slot t+4 ↔ key 2t+1: no shuffles between S and P·V), the softcap's tanh
 * accurate (tanhf). qk_tile_f32, pv_tile_f32 and the F32 versions of the
 * bad-value steps below.
 */
#include "attn_fwd_tile.cuh"
#include "attn_ragged.cuh"

#include <math.h>

namespace fctc {

/* Compile-time tile shape of one forward instantiation (ES: bytes an
 * element, 2 for F16/BF16, 4 for F32). */
template <int HD_, int NW_, int MT_, int BN_, bool QREG_, int ES_ = 2> struct FwdTraits {
    static constexpr int HD = HD_;     /* padded head dim */
    static constexpr int NW = NW_;     /* warps per CTA */
    static constexpr int MT = MT_;     /* m16 tiles per warp */
    static constexpr int BN = BN_;     /* keys per tile */
    static constexpr bool QREG = QREG_;/* Q fragments held in registers */
    static constexpr int ES = ES_;
    static constexpr int BM = 16 * MT * NW;
    static constexpr int NT = 32 * NW;
    static constexpr int LD = HD + 16 / ES; /* smem row pitch, elements (16 bytes of padding) */
    static constexpr int SMEM_ELEMS = (BM + 2 * BN) * LD;
    static_assert(HD % 16 == 0 && HD >= 16 && HD <= 256, "HD: multiple of 16 in [16, 256]");
    static_assert(BN % 16 == 0 && BN >= 16, "BN: multiple of 16");
    static_assert(MT >= 1 && MT <= 2 && NW >= 1 && NW <= 8, "MT 1..2, NW 1..8");
    static_assert(ES == 2 || (ES == 4 && !QREG), "F32 re-reads its Q fragments (hi and lo would double them)");
    static_assert((LD * ES) % 16 == 0, "rows must stay 16-byte aligned for cp.async/ldmatrix");
};

/* S = Q·Kᵀ for the warp's MT m16 tiles × BN keys of the K tile in smem.
 * Q fragments from registers (K::QREG: qf) or re-read from smem each k16
 * step; q_off / k_off: the lane's ldmatrix offsets (elements). */
template <typename T, class K>
__device__ __forceinline__ void qk_tile(float (&acc_s)[K::MT][K::BN / 8][4],
                                        const uint32_t (&qf)[K::QREG ? K::MT : 1][K::QREG ? K::HD / 16 : 1][4],
                                        uint32_t sQa, uint32_t sKa, int q_off, int k_off) {
    constexpr int MT = K::MT, NJ = K::BN / 8, LD = K::LD;
    zero_frags(acc_s);
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

/* O += P·V with the V tile in smem (transposed ldmatrix; v_off: the lane's
 * offset); SAN: the chunks of `san` with non-finite values read as 0
 * (attn_fwd_tile.cuh, "values of keys a row cannot see"). */
template <typename T, class K, bool SAN = false>
__device__ __forceinline__ void pv_tile(float (&acc_o)[K::MT][K::HD / 8][4],
                                        const uint32_t (&pa)[K::MT][K::BN / 16][4], uint32_t sVa, int v_off,
                                        uint32_t san = 0) {
    pv_mma<T, K::MT, K::BN / 16, K::HD / 16, SAN>(
        acc_o, pa, [=](int kk, int dd) { return sVa + 2 * (v_off + kk * 16 * K::LD + dd * 16); }, san);
}

/* ------------------------------------------------ F32: 3xTF32 steps */

/* F32: the small terms of 3xTF32 in their own accumulators (tc_common.cuh,
 * mma_3xtf32) for S and each 16 keys' P·V. Off: measured on the H100
 * (2026-12-07, with tf32_split's integer rounding) it halves the error at
 * S = 1k (D=128 1.4e-6 → 7.8e-7, causal 1.0e-6 → 4.2e-7) but not at 4k
 * (2.9e-6 → 2.6e-6), and costs 3–13 % at D=64, 18–19 % at D=128 (the extra
 * accumulators spill 1.5 KB at HD 128). The backward keeps it on (its dQ
 * needed it). */
constexpr bool F32_SPLIT = false;

/* S = Q·Kᵀ in 3xTF32 for the warp's MT m16 tiles × BN keys
 * (attn_fwd_tile.cuh, tile_abt_3xtf32; q_off / k_off its a_off / b_off). */
template <class K>
__device__ __forceinline__ void qk_tile_f32(float (&acc_s)[K::MT][K::BN / 8][4], uint32_t sQa, uint32_t sKa, int q_off,
                                            int k_off) {
    tile_abt_3xtf32<K::MT, K::BN / 8, K::HD, K::LD, F32_SPLIT>(acc_s, sQa, q_off, sKa, k_off);
}

/* O += P·V in 3xTF32: P the fp32 C fragments of S (n8 tile j = the k8
 * chunk of keys 8j..8j+7, slot t ↔ key 2t, slot t + 4 ↔ key 2t + 1, so
 * a0..a3 = p0, p2, p1, p3), V fp32 rows in smem at sV (pitch LD floats),
 * this lane's b0, b1 = V[8j + 2t][8dd + g], V[8j + 2t + 1][8dd + g]. SAN: in
 * the chunks of `san`, non-finite values read as +0 (attn_fwd_tile.cuh,
 * "values of keys a row cannot see"). */
template <class K, bool SAN = false>
__device__ __forceinline__ void pv_tile_f32(float (&acc_o)[K::MT][K::HD / 8][4], const float (&ps)[K::MT][K::BN / 8][4],
                                            const float *sV, int g, int t4, uint32_t san = 0) {
    constexpr int MT = K::MT, LD = K::LD;
    static_assert(K::BN % 16 == 0, "k8 chunks in pairs");
#pragma unroll
    for (int j2 = 0; j2 < K::BN / 16; ++j2) { /* two k8 chunks a step: 16 keys */
        uint32_t ah[2][MT][4], al[2][MT][4];
#pragma unroll
        for (int c = 0; c < 2; ++c)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const int j = 2 * j2 + c;
                tf32_split(ps[mt][j][0], ah[c][mt][0], al[c][mt][0]);
                tf32_split(ps[mt][j][2], ah[c][mt][1], al[c][mt][1]);
                tf32_split(ps[mt][j][1], ah[c][mt][2], al[c][mt][2]);
                tf32_split(ps[mt][j][3], ah[c][mt][3], al[c][mt][3]);
            }
#pragma unroll
        for (int dd = 0; dd < K::HD / 8; ++dd) {
            /* The 16 keys' products into a zeroed fragment, added to O in
             * fp32 (tc_common.cuh, mma_3xtf32: O's long sum stays unbiased). */
            float t[MT][4], ts[F32_SPLIT ? MT : 1][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) t[mt][0] = t[mt][1] = t[mt][2] = t[mt][3] = 0.f;
#pragma unroll
            for (int mt = 0; mt < (F32_SPLIT ? MT : 1); ++mt) ts[mt][0] = ts[mt][1] = ts[mt][2] = ts[mt][3] = 0.f;
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                const int j = 2 * j2 + c;
                const float *v0 = sV + (8 * j + 2 * t4) * LD + g;
                float x0 = v0[8 * dd], x1 = v0[LD + 8 * dd];
                if (SAN && ((san >> j) & 1u)) {
                    x0 = isfinite(x0) ? x0 : 0.f;
                    x1 = isfinite(x1) ? x1 : 0.f;
                }
                uint32_t bh0, bl0, bh1, bl1;
                tf32_split(x0, bh0, bl0);
                tf32_split(x1, bh1, bl1);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    if constexpr (F32_SPLIT) mma_3xtf32(t[mt], ts[mt], ah[c][mt], al[c][mt], bh0, bh1, bl0, bl1);
                    else mma_3xtf32(t[mt], ah[c][mt], al[c][mt], bh0, bh1, bl0, bl1);
                }
            }
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc_o[mt][dd][e] += F32_SPLIT ? t[mt][e] + ts[mt][e] : t[mt][e];
        }
    }
}

/* pv_bad_keys for the F32 tiles: bit 2j + e for key 8j + 2t + e of the k8
 * chunks `chk` (warp-uniform) whose V row holds a non-finite value, OR-ed
 * over the head dim and the 8 lanes of the same t. */
template <class K> __device__ __forceinline__ uint32_t pv_bad_keys_f32(const float *sV, int g, int t4, uint32_t chk) {
    static_assert(K::BN / 8 <= 16, "2 bits per chunk in 32");
    constexpr int LD = K::LD;
    uint32_t bad = 0;
#pragma unroll
    for (int j = 0; j < K::BN / 8; ++j) {
        if (!((chk >> j) & 1u)) continue;
        const float *v0 = sV + (8 * j + 2 * t4) * LD + g;
        uint32_t x = 0;
#pragma unroll
        for (int dd = 0; dd < K::HD / 8; ++dd)
            x |= (isfinite(v0[8 * dd]) ? 0u : 1u) | (isfinite(v0[LD + 8 * dd]) ? 0u : 2u);
        bad |= x << (2 * j);
    }
    bad |= __shfl_xor_sync(0xffffffffu, bad, 4);
    bad |= __shfl_xor_sync(0xffffffffu, bad, 8);
    bad |= __shfl_xor_sync(0xffffffffu, bad, 16);
    return bad;
}

/* poison_p for the F32 fragments: P (s, the fp32 C layout) set to NaN where
 * the row sees a key of `bad` (pv_bad_keys_f32); c0 = n0 + 2t. */
template <int NJ>
__device__ __forceinline__ void poison_p_f32(float (&s)[NJ][4], const RowVis &rv, int c0, uint32_t bad) {
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const Vis &v = rv.r[e >> 1];
            if (((bad >> (2 * j + (e & 1))) & 1u) && FC_KEY_VISIBLE(v.se, v.lo, v.hi, c0 + 8 * j + (e & 1)))
                s[j][e] = __int_as_float(0x7FC00000);
        }
}

/* Stores the warp's 16·MT rows of O, staged as T in smem rows [rbase, rbase
 * + 16·MT) of pitch LD (written by this warp only), to rows m0 + rbase + r of
 * Ob (row stride so1): 16-byte stores when vec, else element by element. */
template <typename T, class K>
__device__ __forceinline__ void store_o_rows(T *Ob, int64_t so1, const T *stage, int m0, int rbase, int Sq, int D,
                                             bool vec, int lane) {
    constexpr int HD = K::HD, LD = K::LD, EPC = 16 / K::ES, CPR = HD / EPC, WR = 16 * K::MT;
    if (vec) {
#pragma unroll
        for (int idx = lane; idx < WR * CPR; idx += 32) {
            const int r = idx / CPR, c = idx % CPR;
            const int row = m0 + rbase + r;
            if (row < Sq && c * EPC < D)
                *reinterpret_cast<uint4 *>(Ob + (int64_t)row * so1 + c * EPC) =
                    *reinterpret_cast<const uint4 *>(stage + (rbase + r) * LD + c * EPC);
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
 * modifier path (attn_fwd_tile.cuh), chosen once on the host. RAG: ragged
 * problems (attn_ragged.cuh): B sequences, nM query blocks of the longest;
 * K/V tiles loaded through key-row tables: tK (the next K tile) and tV (two,
 * the current V tile's and the next one's), all filled at the top of the
 * loop (where the fewest registers are live), one barrier before their use. */
template <typename T, class K, bool MOD, bool RAG>
__global__ void __launch_bounds__(K::NT)
    attn_fwd_tc_kernel(const __grid_constant__ fcc_attn p, const int nM, const int64_t total) {
    constexpr int HD = K::HD, BN = K::BN, BM = K::BM, LD = K::LD, MT = K::MT, NT = K::NT;
    constexpr int NKK = HD / 16; /* k16 chunks of QK^T */
    constexpr int NJ = BN / 8;   /* n8 tiles of S */
    constexpr int ND = HD / 8;   /* n8 tiles of O */
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *sQ = reinterpret_cast<T *>(smem_raw);
    T *sK = sQ + BM * LD;
    T *sV = sK + BN * LD;
    int64_t *tK = reinterpret_cast<int64_t *>(sV + BN * LD); /* RAG: [BN] key-row offsets of the next K tile */
    int64_t *tV = tK + BN;                                   /* RAG: [2][BN] ... of V tiles, by iteration parity */

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

    /* Per-lane ldmatrix offsets (elements), see tc_common.cuh for layouts:
     * the column of the second matrix pair is 16 bytes on (8 elements of 2
     * bytes; F32: 4 floats, qk_tile_f32). */
    constexpr int F32 = K::ES == 4, CW = 16 / K::ES;
    const int q_off = (warp * MT * 16 + (lane & 15)) * LD + (lane >> 4) * CW;
    const int k_off = ((lane >> 4) * 8 + (lane & 7)) * LD + ((lane >> 3) & 1) * CW;
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
        /* Sequence b (attn_ragged.cuh; dense: the problem itself). */
        const fc_seq s = fcc_seq_of<RAG>(a, b);
        const int Sq = RAG ? (int)s.Sq : p.Sq, Sk = RAG ? (int)s.Sk : p.Sk;
        if (RAG && m0 >= Sq) continue; /* past this sequence's rows (the whole CTA: no barrier skipped) */
        const fcc_seq_parts<RAG> sp(p, s);
        const fc_mask &mask = sp.mask(p);
        const int mlast = min(m0 + BM, Sq) - 1;

        const T *Qb = Qg + fc_attn_row_offset(&s, a.sq, 0, h);
        const T *Kb = Kg + b * a.sk[0] + (int64_t)hk * a.sk[2]; /* dense only */
        const T *Vb = Vg + b * a.sv[0] + (int64_t)hk * a.sv[2];
        auto load_k = [&](int tile) {
            if constexpr (RAG)
                load_key_rows<T, HD, BN, NT>(sK, Kg, tK, a.sk[1], fcc_tile_contig(a, BN), tile * BN, Sk, p.D, p.vec16, tid);
            else load_rows<T, HD, BN, NT>(sK, Kb, a.sk[1], tile * BN, Sk, p.D, p.vec16, tid);
        };
        auto load_v = [&](int tile, int par) {
            if constexpr (RAG)
                load_key_rows<T, HD, BN, NT>(sV, Vg, tV + par * BN, a.sv[1], fcc_tile_contig(a, BN), tile * BN, Sk, p.D,
                                             p.vec16, tid);
            else load_rows<T, HD, BN, NT>(sV, Vb, a.sv[1], tile * BN, Sk, p.D, p.vec16, tid);
        };

        const KeyTiles kt = key_tiles<BN>(mask, m0, mlast);
        const Vis vfirst = vis_of(mask, m0, Sq), vlast = vis_of(mask, mlast, Sq);
        /* This thread's rows: row0 + 16·mt (+8), row0 = m0 + warp·16·MT + g. */
        const int row0 = m0 + warp * 16 * MT + g;
        RowVis rv[MT];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) rv[mt] = row_vis(mask, row0 + 16 * mt, Sq);
        fc_score_modf mod = {0.f, 0.f, 0.f};
        fc_score_foldf fold = {0.f, 0.f, 0.f, 0};
        if (MOD) {
            mod = fcc_score_mod_l2(p, b, h);
            fold = fc_score_fold(&mod);
        }

        float acc_o[MT][ND][4];
        float m_i[MT][2], l_i[MT][2];
        tile_state_zero(acc_o, m_i, l_i);

        /* Prologue: Q and the first K tile. RAG: the first tile's tables
         * before (the previous virtual block ended with a barrier). */
        load_rows<T, HD, BM, NT>(sQ, Qb, a.sq[1], m0, Sq, p.D, p.vec16, tid);
        if constexpr (RAG) {
            if (kt.first < kt.b1)
                fcc_kv_rows<BN, NT>(tK, tV, a, s, b, hk, (int64_t)kt.first * BN, fcc_tile_contig(a, BN), tid);
            __syncthreads();
        }
        if (kt.first < kt.b1) load_k(kt.first);
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

        for (int tile = kt.first, par = 0; tile < kt.b1; tile = kt.next(tile), par ^= 1) {
            const int n0 = tile * BN;
            cp_async_wait<0>(); /* K[tile] (and Q) landed */
            __syncthreads();    /* ... for all threads; everyone is done with sV, tK and tV[par ^ 1] */
            load_v(tile, par);
            cp_async_commit();
            /* RAG: the next tile's tables (K: read after the next barrier; V:
             * next iteration). The sequence is re-read, not kept in registers. */
            if constexpr (RAG) {
                if (kt.next(tile) < kt.b1)
                    fcc_kv_rows<BN, NT>(tK, tV + (par ^ 1) * BN, a, fcc_seq_of<RAG>(a, b), b, hk,
                                        (int64_t)kt.next(tile) * BN, fcc_tile_contig(a, BN), tid);
            }

            float acc_s[MT][NJ][4]; /* MT·16 × BN per warp */
            if constexpr (F32) qk_tile_f32<K>(acc_s, sQa, sKa, q_off, k_off);
            else qk_tile<T, K>(acc_s, qf, sQa, sKa, q_off, k_off);
            if (MOD) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    float dist0[2];
                    tile_dist0(sp.score(p), row0 + 16 * mt, n0 + 2 * t4, dist0);
                    if constexpr (F32) tile_score_mod<fcc_tanh_accurate>(acc_s[mt], mod, fold, dist0);
                    else tile_score_mod(acc_s[mt], mod, fold, dist0);
                }
            }
            /* Per-element masks only where some row of the CTA sees part of the tile. */
            const bool part = !tile_full<BN>(vfirst, vlast, n0, Sk);
            if (part) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) tile_mask(acc_s[mt], rv[mt], n0 + 2 * t4);
            }

            cp_async_wait<0>(); /* V[tile] landed */
            __syncthreads();    /* ... for all; everyone is done with sK */
            if (kt.next(tile) < kt.b1) {
                load_k(kt.next(tile));
                cp_async_commit();
            }

            if constexpr (F32) {
                /* P stays fp32 in acc_s (split per use by pv_tile_f32). */
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    float alpha[2];
                    tile_softmax(acc_s[mt], m_i[mt], l_i[mt], alpha, mul);
                    tile_rescale(acc_o[mt], alpha);
                }
                const float *sVf = sV;
                uint32_t san = 0;
                if (part) { /* as below, on k8 chunks */
                    const int w0 = m0 + warp * 16 * MT;
                    const uint32_t chk =
                        masked_chunks<BN / 8, 8>(vis_of(mask, w0, Sq), vis_of(mask, w0 + 16 * MT - 1, Sq), n0);
                    const uint32_t bad = chk ? pv_bad_keys_f32<K>(sVf, g, t4, chk) : 0u;
                    if (bad) {
#pragma unroll
                        for (int mt = 0; mt < MT; ++mt) poison_p_f32(acc_s[mt], rv[mt], n0 + 2 * t4, bad);
                    }
                    if (__any_sync(0xffffffffu, bad != 0)) san = chk;
                }
                if (san) pv_tile_f32<K, true>(acc_o, acc_s, sVf, g, t4, san);
                else pv_tile_f32<K>(acc_o, acc_s, sVf, g, t4);
            } else {
            uint32_t pa[MT][BN / 16][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                float alpha[2];
                tile_softmax(acc_s[mt], m_i[mt], l_i[mt], alpha, mul);
                tile_rescale(acc_o[mt], alpha);
                tile_pack_p<T>(acc_s[mt], pa[mt]);
            }
            /* Non-finite values of keys some row of this warp cannot see
             * (attn_fwd_tile.cuh): checked once P is packed (fewest live
             * registers), on partial tiles only. */
            uint32_t san = 0;
            if (part) {
                const int w0 = m0 + warp * 16 * MT;
                const uint32_t chk =
                    masked_chunks<BN / 16>(vis_of(mask, w0, Sq), vis_of(mask, w0 + 16 * MT - 1, Sq), n0);
                const uint32_t bad = chk ? pv_bad_keys<T, BN / 16, HD / 16>(
                                               [=](int kk, int dd) { return sVa + 2 * (v_off + kk * 16 * LD + dd * 16); },
                                               chk)
                                         : 0u;
                if (bad) {
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) poison_p<T>(pa[mt], rv[mt], n0 + 2 * t4, bad);
                }
                if (__any_sync(0xffffffffu, bad != 0)) san = chk;
            }
            if (san) pv_tile<T, K, true>(acc_o, pa, sVa, v_off, san);
            else pv_tile<T, K>(acc_o, pa, sVa, v_off);
            } /* F32 */
        }
        /* No cp.async of any thread may still target sQ (no key tile leaves
         * the Q load pending) when the warps start staging O there. */
        cp_async_wait<0>();
        __syncthreads();

        /* Epilogue: O·factor and L (row_finish, with the sink logit); O staged
         * in this warp's own sQ rows (only this warp ever read them). */
        const bool has_sink = a.sink_logits != nullptr;
        const float sink = (float)fc_attn_sink(&a, h);
        const fc_seq se = fcc_seq_of<RAG>(a, b); /* re-read (RAG), not kept through the loop */
        float *lse = static_cast<float *>(a.lse);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            float f[2], L[2];
            row_finish(m_i[mt], l_i[mt], mul_ln, has_sink, sink, f, L);
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int row = row0 + 16 * mt + 8 * hf;
                if (lse && t4 == 0 && row < Sq) lse[fc_attn_lse_offset(&se, a.slse, h, row)] = L[hf];
            }
#pragma unroll
            for (int j = 0; j < ND; ++j) {
                const int r = warp * 16 * MT + mt * 16 + g;
                const int c = j * 8 + 2 * t4;
                if constexpr (F32) {
                    *reinterpret_cast<float2 *>(sQ + r * LD + c) = make_float2(acc_o[mt][j][0] * f[0], acc_o[mt][j][1] * f[0]);
                    *reinterpret_cast<float2 *>(sQ + (r + 8) * LD + c) =
                        make_float2(acc_o[mt][j][2] * f[1], acc_o[mt][j][3] * f[1]);
                } else {
                    *reinterpret_cast<uint32_t *>(sQ + r * LD + c) =
                        Ops<T>::pack(acc_o[mt][j][0] * f[0], acc_o[mt][j][1] * f[0]);
                    *reinterpret_cast<uint32_t *>(sQ + (r + 8) * LD + c) =
                        Ops<T>::pack(acc_o[mt][j][2] * f[1], acc_o[mt][j][3] * f[1]);
                }
            }
        }
        __syncwarp();
        store_o_rows<T, K>(Og + fc_attn_row_offset(&se, a.so, 0, h), a.so[1], sQ, m0, warp * 16 * MT, Sq, p.D,
                           p.out_vec16, lane);
        __syncthreads(); /* smem is reused by the next virtual block */
    }
}

/* K::ES bytes an element; RAG adds the three key-row tables. */
template <class K, bool RAG = false> static constexpr size_t smem_bytes() {
    return (size_t)K::SMEM_ELEMS * K::ES + (RAG ? 3 * K::BN * sizeof(int64_t) : 0);
}

/* Launches tile shape K: the plain or the modifier path (attn_fwd_tile.cuh),
 * dense or ragged (batch axis: the B sequences; p.Sq: the longest). */
template <typename T, class K, bool RAG> static flashc_status run_fwd_as(const fcc_attn &p) {
    const int nM = (p.Sq + K::BM - 1) / K::BM;
    const int64_t total = (int64_t)nM * p.Hq * p.a.B;
    const int64_t maxg = 2147483647;
    const unsigned grid = (unsigned)(total < maxg ? total : maxg);
    const bool mod = !p.plain_score || !p.scale_pos;
    auto kern = mod ? attn_fwd_tc_kernel<T, K, true, RAG> : attn_fwd_tc_kernel<T, K, false, RAG>;
    constexpr size_t smem = smem_bytes<K, RAG>();
    FCC_TRY(fcc_set_smem((const void *)kern, smem, "attn_fwd_tc"));
    kern<<<grid, K::NT, smem, fcc_stream(p.a.stream)>>>(p, nM, total);
    FCC_CHECK_LAUNCH("attn_fwd_tc_kernel");
    return FLASHC_OK;
}
template <typename T, class K> static flashc_status run_fwd(const fcc_attn &p) {
    return fc_attn_is_ragged(&p.a) ? run_fwd_as<T, K, true>(p) : run_fwd_as<T, K, false>(p);
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
 * m16 tile. small (has_small): the shape for GPUs with less shared memory —
 * one m16 tile per warp, 32-key tiles (HD 128: 34 KB, fits 48 KB; HD 256:
 * 66 KB, the ragged kernel on a 99 KB sm_86/89). */
constexpr bool has_small(int HDp) { return HDp == 128 || HDp == 256; }
template <class F> static auto with_tile(int HDp, bool small, F &&f) {
    switch (HDp) {
    case 32: return f(FwdTraits<32, 4, 2, 64, true>{});
    case 64: return f(FwdTraits<64, 4, 2, 64, true>{});
    case 96: return f(FwdTraits<96, 4, 1, 64, true>{});
    case 128: return small ? f(FwdTraits<128, 4, 1, 32, false>{}) : f(FwdTraits<128, 4, 2, 64, false>{});
    case 192: return f(FwdTraits<192, 4, 1, 64, false>{});
    default: return small ? f(FwdTraits<256, 4, 1, 32, false>{}) : f(FwdTraits<256, 4, 1, 64, false>{});
    }
}
/* The F32 shapes (3xTF32): fp32 tiles take twice the bytes and the
 * accumulators as many registers, so one m16 tile a warp from HD 96 on
 * (HD 128: 101 KB, sm_80's 163 KB; small: 32-key tiles, 68 KB, a 99 KB
 * sm_86/89); HD ≥ 192: 32-key tiles (small: 2 warps, 16-key tiles). */
template <class F> static auto with_tile_f32(int HDp, bool small, F &&f) {
    switch (HDp) {
    case 32: return f(FwdTraits<32, 4, 2, 64, false, 4>{});
    case 64: return f(FwdTraits<64, 4, 2, 64, false, 4>{});
    case 96: return f(FwdTraits<96, 4, 1, 64, false, 4>{});
    case 128: return small ? f(FwdTraits<128, 4, 1, 32, false, 4>{}) : f(FwdTraits<128, 4, 2, 32, false, 4>{});
    case 192: return small ? f(FwdTraits<192, 2, 1, 16, false, 4>{}) : f(FwdTraits<192, 4, 1, 32, false, 4>{});
    default: return small ? f(FwdTraits<256, 2, 1, 16, false, 4>{}) : f(FwdTraits<256, 4, 1, 32, false, 4>{});
    }
}
constexpr bool has_small_f32(int HDp) { return HDp >= 128; }
/* Shared memory of shape (HDp, small), dense or ragged (rag). */
static size_t tile_smem(bool f32, int HDp, bool small, bool rag) {
    auto bytes = [&](auto k) { return rag ? smem_bytes<decltype(k), true>() : smem_bytes<decltype(k)>(); };
    return f32 ? with_tile_f32(HDp, small, bytes) : with_tile(HDp, small, bytes);
}
/* The shape the plan's shared-memory limit takes: 0 = regular, 1 = small,
 * −1 = none fits (the generic kernel runs). */
static int tile_fit(const fcc_attn &p) {
    const int HDp = padded_hd(p.D);
    const bool rag = fc_attn_is_ragged(&p.a), f32 = p.a.dtype == FLASHC_F32;
    const size_t lim = (size_t)p.dev.smem_optin;
    if (tile_smem(f32, HDp, false, rag) <= lim) return 0;
    if ((f32 ? has_small_f32(HDp) : has_small(HDp)) && tile_smem(f32, HDp, true, rag) <= lim) return 1;
    return -1;
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
    /* F32 stays accurate to fp32 (3xTF32, not plain TF32); F64 in F64: the
     * generic kernel. F32 with fewer than 16 query rows a head (a decode
     * step) would fill 1/16 of its m16 tiles: the generic kernel too. */
    if (a.dtype != FLASHC_F16 && a.dtype != FLASHC_BF16 && a.dtype != FLASHC_F32) return false;
    if (a.dtype == FLASHC_F32 && a.Sq < 16) return false;
    /* m16n8k16 bf16 needs sm_80; ldmatrix/cp.async need contiguous rows of d;
     * positions are int32 inside the kernel. */
    if (p.dev.cc < 80 || a.D < 1 || a.D > 256 || !p.d_contig || !p.fits_int32) return false;
    return fctc::tile_fit(p) >= 0; /* shared memory: the plan's limit takes a shape */
}

flashc_status fcc_fwd_mma_run(const fcc_attn &p) {
    const int HDp = fctc::padded_hd(p.D);
    const bool small = fctc::tile_fit(p) == 1;
    if (p.a.dtype == FLASHC_F32)
        return fctc::with_tile_f32(HDp, small, [&](auto k) { return fctc::run_fwd<float, decltype(k)>(p); });
    return fctc::with_tile(HDp, small, [&](auto k) {
        using K = decltype(k);
        if (p.a.dtype == FLASHC_BF16) return fctc::run_fwd<__nv_bfloat16, K>(p);
        return fctc::run_fwd<__half, K>(p);
    });
}
