/*
 * attn_decode.cuh — what the two split-KV decode kernels share: the per-warp
 * state and tile step, the merge of a CTA's warps, and the host side of the
 * splits (scratch, combine kernel).
 *
 *   attn_decode.cu      sm_80+: every warp streams its own key tiles with
 *                       cp.async (one ring per warp);
 *   attn_decode_tma.cu  sm_90a: a producer warp loads whole tiles by TMA
 *                       into one ring the consumer warps take turns on.
 *
 * Rows. The G·Sq query rows of one (sequence b, kv head hk), G = Hq/Hkv, are
 * numbered r = i·G + g (query row i, head hk·G + g): every row of them reads
 * the same keys, so one K/V load serves all of them (GQA reuse), and their
 * visible key ranges are monotone in r (attn_mask.h). A CTA owns a row block
 * of RB = 16·MT rows (MT m16 tiles; a decode step with G ≤ 16 is one block).
 * Every consumer warp holds all RB rows and runs whole key tiles (DecWarp):
 * S = Q·Kᵀ (mma.sync m16n8k16, K by ldmatrix from shared memory through the
 * kernel's address function), the score modifiers (MOD), the mask on
 * partial tiles, the online softmax in the exp2 domain, O += P·V — the tile
 * steps of attn_fwd_tile.cuh, so the arithmetic is the tensor-core forward's.
 *
 * Merge (DecWarp::merge). The warps' partial states (m, ℓ, O) are merged
 * through shared memory in warp order; with one split the CTA finishes its
 * rows (fc_row_finishf: sink logit, empty rows) and writes o and lse
 * directly; otherwise it writes (m, ℓ, O) to a scratch buffer and the
 * combine kernel merges the splits in a fixed order and finishes the rows.
 * Fixed orders everywhere, no atomics: bit-identical across runs. m is kept
 * in log2 units (the exp2 domain) in the scratch.
 *
 * Scratch (split count > 1): [B·Hkv·nsplit·G·Sq] × (m, ℓ) and × O[D] fp32,
 * fcc_scratch_alloc'd on the stream (the module pool; capturable in a CUDA
 * graph), freed after the combine kernel (decode_scratch / decode_combine).
 */
#ifndef FLASHC_ATTN_DECODE_CUH
#define FLASHC_ATTN_DECODE_CUH

#include "attn_fwd_tile.cuh"
#include "attn_ragged.cuh"

#include <math.h>

namespace fcdec {
using namespace fctc;

/* Kernel arguments besides the problem. */
struct DecArgs {
    int nsplit;     /* key splits per (row block, kv head, sequence) */
    int nrb;        /* row blocks per (kv head, sequence) */
    int rmax;       /* G·Sq (Sq: the bound): rows per (b, hk) in the scratch */
    float *part_ml; /* nsplit > 1: [B·Hkv][nsplit][rmax] × (m in log2 units, ℓ) */
    float *part_o;  /* nsplit > 1: [B·Hkv][nsplit][rmax][D], O unnormalised */
};

/* Programmatic dependent launch (fc_cuda.cuh: fcc_pdl_trigger, fcc_pdl_wait,
 * fcc_launch): the split kernel lets the combine kernel be scheduled as soon
 * as every split CTA has started, and the combine kernel waits for the split
 * kernel's completion and memory — the combine's launch latency hides under
 * the split kernel (B = 1, Sk = 8k: the call's GPU time, first kernel start
 * to last end, 13.5 → 11.8 µs; cuDNN's 13.5–14.6). The same pair orders a
 * KV-cache call (flashc_attn_kvcache_fwd with k_new): the append kernel
 * triggers at its start, the split kernel is launched dependent on it and
 * waits before its first K/V load, so its launch and prologue overlap the
 * append. */

/* Whether fcc_kv_append_run launched its kernel for this problem, right
 * before the decode kernel on the same stream: the decode kernel is then
 * launched as its dependent. */
static inline bool dec_after_append(const fcc_attn &p) { return p.dev.cc >= 90 && fcc_kv_append_launches(&p.a); }

/* Index of (b, hk, split, r) in the scratch. */
__device__ __forceinline__ int64_t part_index(const DecArgs &da, int64_t b, int hk, int Hkv, int split, int r) {
    return ((b * Hkv + hk) * da.nsplit + split) * (int64_t)da.rmax + r;
}

/* The CTA's place: row block rb, key split `split` of (kv head hk, sequence
 * b), from blockIdx.x (row blocks fastest, so that CTAs reading the same
 * keys run together); its rows [r0, r0 + nr) and the key tiles (BN keys)
 * [k0, k1) of the block's tile range: the tiles the rows may see
 * (key_tiles: ≤ 2 segments, a window costs O(window)) numbered 0 .. T−1 and
 * cut into nsplit equal ranges. */
template <int RB, int BN> struct DecCta {
    int split, hk;
    int64_t b;
    fc_seq seq;
    fc_mask mask;
    int r0, nr;
    KeyTiles kt;
    int na, k0, k1;
    /* false: this sequence has no such rows (the whole CTA leaves). */
    __device__ __forceinline__ bool init(const fcc_attn &p, const DecArgs &da) {
        /* 32-bit index arithmetic (the grid is ≤ INT_MAX CTAs, decode_plan): a
         * 64-bit division is a long instruction sequence, and this runs before
         * the CTA's first load. */
        uint32_t bid = blockIdx.x;
        const int rb = (int)(bid % (uint32_t)da.nrb);
        bid /= (uint32_t)da.nrb;
        split = (int)(bid % (uint32_t)da.nsplit);
        bid /= (uint32_t)da.nsplit;
        hk = (int)(bid % (uint32_t)p.Hkv);
        b = (int64_t)(bid / (uint32_t)p.Hkv);
        seq = fc_attn_seq(&p.a, b);
        const int G = p.group, Sq = (int)seq.Sq;
        r0 = rb * RB;
        if (r0 >= G * Sq) return false;
        nr = min(RB, G * Sq - r0);
        mask = fc_seq_mask(&p.a, &seq);
        kt = key_tiles<BN>(mask, r0 / G, (r0 + nr - 1) / G);
        na = kt.a1 - kt.first;
        const int T_ = na + (kt.b1 - kt.b0);
        k0 = split_at(split, T_, da.nsplit);
        k1 = split_at(split + 1, T_, da.nsplit);
        return true;
    }
    /* ⌊s·T / n⌋ (0 ≤ s ≤ n): in 32 bits where the product fits. */
    static __device__ __forceinline__ int split_at(int s, int T, int n) {
        const uint64_t x = (uint64_t)s * (uint64_t)T;
        return (int)(x <= 0xFFFFFFFFu ? (uint64_t)((uint32_t)x / (uint32_t)n) : x / (uint64_t)n);
    }
    /* The first key of tile index k (k0 ≤ k < k1). */
    __device__ __forceinline__ int tile_key0(int k) const { return (k < na ? kt.first + k : kt.b0 + (k - na)) * BN; }
};

/* Rows [r0, r0 + RB) of the (b, hk) row space (r = i·G + g: query row i of
 * head hk·G + g), zero-filled past nr rows and D columns, into sQ (pitch
 * LD = HD + 8), by NT threads (tid < NT); cp.async when vec16 (the caller
 * commits and waits). */
template <typename T, int HD, int RB, int NT>
__device__ __forceinline__ void load_q_block(T *sQ, const fcc_attn &p, const fc_seq &seq, int hk, int r0, int nr,
                                             int tid) {
    const fc_attn &a = p.a;
    const int G = p.group;
    auto off = [&](int lr) {
        const int r = r0 + min(lr, nr - 1);
        return fc_attn_row_offset(&seq, a.sq, r / G, (int64_t)hk * G + r % G);
    };
    load_rows_at<T, HD, RB, NT>(sQ, static_cast<const T *>(a.q), off, 0, nr, p.D, p.vec16, tid);
}

/* One consumer warp's state over the key tiles of its CTA: O, m, ℓ of the
 * RB rows, the rows' score modifiers (MOD), Q in registers (one m16 tile at
 * HD ≤ 128) or in shared memory. K: HD, MT, BN, RB, NW, LD (Q's smem pitch,
 * elements), LDF (merge rows, floats).
 * MOD: the score modifiers run (softcap, ALiBi, or a negative scale): logits
 * in log2 units (fcc_score_step, the catch-all variant, per row: the rows of
 * a fragment belong to different heads); else raw dots with scale·log2 e
 * folded into the exp2 FFMA (attn_fwd_tile.cuh, "two score paths"). */
template <typename T, class K, bool MOD> struct DecWarp {
    static constexpr int HD = K::HD, BN = K::BN, MT = K::MT, RB = K::RB, NW = K::NW, LD = K::LD, LDF = K::LDF;
    static constexpr int NKK = HD / 16, NJ = BN / 8, ND = HD / 8;
    /* One m16 tile of Q (a decode step) stays in registers across the key
     * tiles (32 registers at HD 128) instead of being re-read by ldmatrix. */
    static constexpr bool QREG = MT == 1 && HD <= 128;

    float acc_o[MT][ND][4];
    float m_i[MT][2], l_i[MT][2];
    fc_score_modf mod[MOD ? MT : 1][2];
    int dbase[MOD ? MT : 1][2]; /* i + Sk − Sq: the ALiBi distance of key 0 */
    uint32_t qreg[QREG ? NKK : 1][4];
    float mul;                  /* exp2 argument per unit of the scores */
    uint32_t sQa;
    int lane, g, t4;
    const fc_mask *mask;
    int r0, nr, G, Sq, Sk;
    Vis vfirst, vlast;

    /* This thread's fragment rows lr = 16·mt + g + 8·hf (clamped to the
     * block's last row: padding rows compute, are never stored). */
    __device__ __forceinline__ int frag_row(int mt, int hf) const { return r0 + min(16 * mt + g + 8 * hf, nr - 1); }
    __device__ __forceinline__ RowVis rvis(int mt) const {
        return RowVis{{vis_of(*mask, frag_row(mt, 0) / G, Sq), vis_of(*mask, frag_row(mt, 1) / G, Sq)}};
    }

    /* The CTA's rows and mask (c: DecCta::init returned true), Q at sQa_ in shared memory. */
    __device__ __forceinline__ void init(const fcc_attn &p, const DecCta<RB, BN> &c, uint32_t sQa_, int lane_) {
        const fc_attn &a = p.a;
        lane = lane_;
        g = lane >> 2;
        t4 = lane & 3;
        mask = &c.mask;
        r0 = c.r0;
        nr = c.nr;
        G = p.group;
        Sq = (int)c.seq.Sq;
        Sk = (int)c.seq.Sk;
        sQa = sQa_;
        vfirst = vis_of(c.mask, r0 / G, Sq);
        vlast = vis_of(c.mask, (r0 + nr - 1) / G, Sq);
        if (MOD) {
            const fc_score_params sp = fc_seq_score(&a, &c.seq);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const int r = frag_row(mt, hf);
                    mod[MOD ? mt : 0][hf] =
                        fc_score_modf_of(fc_score_mod_make(&sp, c.b, (int64_t)c.hk * G + r % G, FC_LOG2E));
                    dbase[MOD ? mt : 0][hf] = (int)fc_alibi_dist(&sp, r / G, 0);
                }
        }
        mul = MOD ? 1.f : p.sl2e;
        tile_state_zero(acc_o, m_i, l_i);
    }

    /* Q's fragments into registers (QREG), once Q has landed in shared memory. */
    __device__ __forceinline__ void load_q() {
        if constexpr (QREG) {
            const int q_off = (lane & 15) * LD + (lane >> 4) * 8;
#pragma unroll
            for (int kk = 0; kk < NKK; ++kk)
                ldsm_x4(sQa + 2 * (q_off + kk * 16), qreg[kk][0], qreg[kk][1], qreg[kk][2], qreg[kk][3]);
        }
    }

    /* The key tile at n0 (BN keys; K and V in shared memory): kaddr(kk, jj)
     * is this lane's ldmatrix address of the 16 keys 16jj.. × dims 16kk.. of
     * K (the B operand of Q·Kᵀ: lanes 0–7 keys 0–7 dims 0–7, 8–15 keys 0–7
     * dims 8–15, 16–23 keys 8–15 dims 0–7, 24–31 keys 8–15 dims 8–15),
     * vaddr(kk, dd) that of the 16 keys 16kk.. × dims 16dd.. of V read
     * transposed (lanes 0–7 keys 0–7 dims 0–7, 8–15 keys 8–15 dims 0–7,
     * 16–23 keys 0–7 dims 8–15, 24–31 keys 8–15 dims 8–15). */
    template <class KA, class VA> __device__ __forceinline__ void tile(int n0, KA kaddr, VA vaddr) {
        /* S = Q·Kᵀ: RB rows × BN keys */
        float s[MT][NJ][4];
        zero_frags(s);
        const int q_off = (lane & 15) * LD + (lane >> 4) * 8;
#pragma unroll
        for (int kk = 0; kk < NKK; ++kk) {
            uint32_t qa[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                if constexpr (QREG) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) qa[mt][e] = qreg[kk][e];
                } else {
                    ldsm_x4(sQa + 2 * (q_off + mt * 16 * LD + kk * 16), qa[mt][0], qa[mt][1], qa[mt][2], qa[mt][3]);
                }
            }
#pragma unroll
            for (int jj = 0; jj < NJ / 2; ++jj) {
                uint32_t b0, b1, b2, b3;
                ldsm_x4(kaddr(kk, jj), b0, b1, b2, b3);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    Ops<T>::mma(s[mt][2 * jj], qa[mt], b0, b1);
                    Ops<T>::mma(s[mt][2 * jj + 1], qa[mt], b2, b3);
                }
            }
        }
        if (MOD) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int j = 0; j < NJ; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int hf = e >> 1, col = n0 + 8 * j + 2 * t4 + (e & 1);
                        float dg; /* the backward's factor, unused */
                        s[mt][j][e] = fcc_score_step<FC_SCORE_ALL, fcc_tanh_fast>(
                            mod[MOD ? mt : 0][hf], s[mt][j][e], (float)(dbase[MOD ? mt : 0][hf] - col), dg);
                    }
        }
        const bool part = !tile_full<BN>(vfirst, vlast, n0, Sk);
        if (part) { /* the rows' ranges, on these (few) tiles only */
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) tile_mask(s[mt], rvis(mt), n0 + 2 * t4);
        }
        uint32_t pa[MT][BN / 16][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            float alpha[2];
            tile_softmax(s[mt], m_i[mt], l_i[mt], alpha, mul);
            /* α = 1 exactly where no row max moved (most tiles of a long decode): skip the O rescale. */
            if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) tile_rescale(acc_o[mt], alpha);
            tile_pack_p<T>(s[mt], pa[mt]);
        }
        /* Non-finite values of keys some row cannot see (attn_fwd_tile.cuh),
         * on partial tiles only: keys past the sequence's end (a cache's
         * unwritten rows, the next sequence of a packed batch) are among them. */
        uint32_t san = 0;
        if (part) {
            const uint32_t chk = masked_chunks<BN / 16>(vfirst, vlast, n0);
            const uint32_t bad = chk ? pv_bad_keys<T, BN / 16, HD / 16>(vaddr, chk) : 0u;
            if (bad) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) poison_p<T>(pa[mt], rvis(mt), n0 + 2 * t4, bad);
            }
            if (__any_sync(0xffffffffu, bad != 0)) san = chk;
        }
        /* O += P·V */
        if (san) pv_mma<T, MT, BN / 16, HD / 16, true>(acc_o, pa, vaddr, san);
        else pv_mma<T, MT, BN / 16, HD / 16, false>(acc_o, pa, vaddr);
    }

    /* After the key loop, by the NW consumer warps of the CTA (this one is
     * warp `warp`, thread ctid of NT = 32·NW; sync() synchronises exactly
     * them): the warps' states merged in warp order through `area` (shared
     * memory, K::MERGE_BYTES, free by now), then the rows finished (one
     * split) or written to the scratch as partials. */
    template <int NT, class SYNC>
    __device__ __forceinline__ void merge(const fcc_attn &p, const DecArgs &da, const DecCta<RB, BN> &c, float *area,
                                          int warp, int ctid, SYNC sync) {
        const fc_attn &a = p.a;
        const fc_seq &seq = c.seq;
        const int64_t b = c.b;
        const int hk = c.hk, split = c.split;
        float *mo = area;                 /* O [NW][RB][LDF] */
        float *mm = mo + NW * RB * LDF;   /* maxima (log2 units) [NW][RB] */
        float *ml = mm + NW * RB;         /* sums [NW][RB] */
        float *wt = ml + NW * RB;         /* [RB][NW]: e^(m_w − M) in the exp2 domain */
        float *rf = wt + RB * NW;         /* [RB]: the row's factor (one split) or its max M */
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                float ls = l_i[mt][hf];
                ls += __shfl_xor_sync(0xffffffffu, ls, 1);
                ls += __shfl_xor_sync(0xffffffffu, ls, 2);
                const int lr = 16 * mt + g + 8 * hf;
                if (t4 == 0) {
                    mm[warp * RB + lr] = m_i[mt][hf] * mul; /* −inf stays −inf (mul > 0) */
                    ml[warp * RB + lr] = ls;
                }
#pragma unroll
                for (int j = 0; j < ND; ++j)
                    *reinterpret_cast<float2 *>(mo + (warp * RB + lr) * LDF + 8 * j + 2 * t4) =
                        make_float2(acc_o[mt][j][2 * hf], acc_o[mt][j][2 * hf + 1]);
            }
        sync();

        /* Per row (thread lr < nr): M = max over warps, the warps' weights, ℓ;
         * then the row finish (one split) or the partial's (M, ℓ). */
        const bool single = da.nsplit == 1;
        if (ctid < nr) {
            const int lr = ctid, r = r0 + lr, i = r / G;
            const int64_t h = (int64_t)hk * G + r % G;
            float M = -INFINITY;
#pragma unroll
            for (int w = 0; w < NW; ++w) M = fmaxf(M, mm[w * RB + lr]);
            float l = 0.f;
#pragma unroll
            for (int w = 0; w < NW; ++w) {
                const float mw = mm[w * RB + lr];
                const float x = mw == -INFINITY ? 0.f : exp2f(mw - M);
                wt[lr * NW + w] = x;
                l += ml[w * RB + lr] * x;
            }
            if (single) {
                float f, L;
                fc_row_finishf(M * FC_LN2_F, l, a.sink_logits != nullptr, (float)fc_attn_sink(&a, h), &f, &L);
                rf[lr] = f;
                if (a.lse) static_cast<float *>(a.lse)[fc_attn_lse_offset(&seq, a.slse, h, i)] = L;
            } else {
                /* A row whose every score in this split was NaN keeps M = −inf (fmaxf
                 * drops NaN) with ℓ = NaN: stored as M = NaN, not as an empty
                 * partial, so that the combine does not drop it. */
                if (l != l) M = NAN;
                const int64_t P = part_index(da, b, hk, p.Hkv, split, r);
                da.part_ml[2 * P] = M;
                da.part_ml[2 * P + 1] = l;
                rf[lr] = M;
            }
        }
        sync();

        /* O rows: Σ_w O_w·weight_w, in warp order; d fastest (coalesced). */
        const int D = p.D;
        T *Og = static_cast<T *>(a.o);
        for (int idx = ctid; idx < nr * D; idx += NT) {
            const int lr = idx / D, d = idx % D;
            if (!single && rf[lr] == -INFINITY) continue; /* an empty partial: its O is never read */
            float acc = 0.f;
#pragma unroll
            for (int w = 0; w < NW; ++w) acc += mo[(w * RB + lr) * LDF + d] * wt[lr * NW + w];
            const int r = r0 + lr;
            if (single) {
                Og[fc_attn_row_offset(&seq, a.so, r / G, (int64_t)hk * G + r % G) + d] = Ops<T>::from_f(acc * rf[lr]);
            } else {
                da.part_o[part_index(da, b, hk, p.Hkv, split, r) * D + d] = acc;
            }
        }
    }
};

/* Bytes of the merge area for NW warps of RB rows, rows of LDF floats:
 * O [NW][RB][LDF], m and ℓ [NW][RB], weights [RB][NW], factor [RB]. */
constexpr size_t merge_bytes(int NW, int RB, int LDF) {
    return ((size_t)NW * RB * LDF + 2 * (size_t)NW * RB + (size_t)RB * NW + RB) * 4;
}

/* ------------------------------------------------------------------ host */
/* Head dims padded to 64, 128 or 256 (the padding costs shared-memory
 * traffic only: zero-filled columns are never read from global memory). */
static inline int padded_hd(int64_t D) { return D <= 64 ? 64 : D <= 128 ? 128 : 256; }

struct DecPlan {
    bool ok;
    int HD, MT, nrb, nsplit, rmax;
    size_t smem;
    int64_t grid, combine_grid;
};
/* The rows and splits of a decode kernel of nw consumer warps and bn-key
 * tiles whose CTA takes smem_of(HD, MT) bytes of shared memory and of which
 * at most max_per_sm run on an SM (the split count's CTA slots); ok = false
 * where the problem is not a decode one (dtype, few rows per kv head, int32
 * positions) or the CTA does not fit. (attn_decode.cu) */
DecPlan decode_plan(const fcc_attn &p, int bn, int nw, size_t (*smem_of)(int HD, int MT), int max_per_sm);
/* The scratch of a split run (nsplit > 1; else *scr = NULL) and the kernel
 * arguments; after the split kernel, the combine kernel and the scratch's
 * release, both on the stream. decode_combine returns s (the split kernel's
 * launch status) unless the combine or the release fail. (attn_decode.cu) */
flashc_status decode_scratch(const fcc_attn &p, const DecPlan &pl, DecArgs *da, float **scr);
flashc_status decode_combine(const fcc_attn &p, const DecPlan &pl, const DecArgs &da, float *scr, flashc_status s);

} // namespace fcdec

#endif /* FLASHC_ATTN_DECODE_CUH */
