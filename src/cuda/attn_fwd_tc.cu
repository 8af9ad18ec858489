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
 * Ragged problems (varlen, KV caches, paged): the RAG instantiations
 * (attn_ragged.cuh); the dense ones (RAG = false) are the code of before.
 */
#include "attn_fwd_tile.cuh"
#include "attn_ragged.cuh"

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
            qk_tile<T, K>(acc_s, qf, sQa, sKa, q_off, k_off);
            if (MOD) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    float dist0[2];
                    tile_dist0(sp.score(p), row0 + 16 * mt, n0 + 2 * t4, dist0);
                    tile_score_mod(acc_s[mt], mod, fold, dist0);
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
                *reinterpret_cast<uint32_t *>(sQ + r * LD + c) =
                    Ops<T>::pack(acc_o[mt][j][0] * f[0], acc_o[mt][j][1] * f[0]);
                *reinterpret_cast<uint32_t *>(sQ + (r + 8) * LD + c) =
                    Ops<T>::pack(acc_o[mt][j][2] * f[1], acc_o[mt][j][3] * f[1]);
            }
        }
        __syncwarp();
        store_o_rows<T, K>(Og + fc_attn_row_offset(&se, a.so, 0, h), a.so[1], sQ, m0, warp * 16 * MT, Sq, p.D,
                           p.out_vec16, lane);
        __syncthreads(); /* smem is reused by the next virtual block */
    }
}

/* 2-byte T; RAG adds the three key-row tables. */
template <class K, bool RAG = false> static constexpr size_t smem_bytes() {
    return (size_t)K::SMEM_ELEMS * 2 + (RAG ? 3 * K::BN * sizeof(int64_t) : 0);
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
/* Shared memory of shape (HDp, small), dense or ragged (rag). */
static size_t tile_smem(int HDp, bool small, bool rag) {
    return with_tile(HDp, small, [&](auto k) {
        return rag ? smem_bytes<decltype(k), true>() : smem_bytes<decltype(k)>();
    });
}
/* The shape the plan's shared-memory limit takes: 0 = regular, 1 = small,
 * −1 = none fits (the generic kernel runs). */
static int tile_fit(const fcc_attn &p) {
    const int HDp = padded_hd(p.D);
    const bool rag = fc_attn_is_ragged(&p.a);
    const size_t lim = (size_t)p.dev.smem_optin;
    if (tile_smem(HDp, false, rag) <= lim) return 0;
    if (has_small(HDp) && tile_smem(HDp, true, rag) <= lim) return 1;
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
    /* F32 must stay accurate to fp32 (no TF32) and F64 in F64: generic kernel. */
    if (a.dtype != FLASHC_F16 && a.dtype != FLASHC_BF16) return false;
    /* m16n8k16 bf16 needs sm_80; ldmatrix/cp.async need contiguous rows of d;
     * positions are int32 inside the kernel. */
    if (p.dev.cc < 80 || a.D < 1 || a.D > 256 || !p.d_contig || !p.fits_int32) return false;
    return fctc::tile_fit(p) >= 0; /* shared memory: the plan's limit takes a shape */
}

flashc_status fcc_fwd_mma_run(const fcc_attn &p) {
    return fctc::with_tile(fctc::padded_hd(p.D), fctc::tile_fit(p) == 1, [&](auto k) {
        using K = decltype(k);
        if (p.a.dtype == FLASHC_BF16) return fctc::run_fwd<__nv_bfloat16, K>(p);
        return fctc::run_fwd<__half, K>(p);
    });
}
