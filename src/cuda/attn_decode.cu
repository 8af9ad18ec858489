/*
 * attn_decode.cu — split-KV attention forward for few query rows per KV head
 * (decode, speculative and chunked decode), F16/BF16 on sm_80+ (mma.sync
 * m16n8k16), for dense batches, KV caches and paged caches alike.
 *
 *   q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D] (or a ragged batch: fc_attn_seq,
 *   fc_attn_key_offset) -> o like q, lse [B, Hq, Sq] (f32)
 *
 * Rows. The G·Sq query rows of one (sequence b, kv head hk), G = Hq/Hkv, are
 * numbered r = i·G + g (query row i, head hk·G + g): every row of them reads
 * the same keys, so one K/V load serves all of them (GQA reuse), and their
 * visible key ranges are monotone in r (attn_mask.h). A CTA owns a row block
 * of RB = 16·MT rows (MT m16 tiles; a decode step with G ≤ 16 is one block).
 *
 * Keys. The key tiles (BN = 16 keys) that the block's rows may see
 * (fc_block_keysegs: a window costs O(window)) are numbered k = 0 .. T−1 and
 * cut into nsplit equal ranges, one per CTA: grid = (row block, split, hk, b),
 * row blocks fastest so that CTAs reading the same keys run together. Inside
 * a CTA the NW warps take the split's tiles round-robin; each warp streams
 * its tiles through its own ring of ST shared-memory stages with cp.async
 * (no CTA barrier in the loop: a warp waits for its own copies and
 * __syncwarp()s), keeping (ST−1) tiles of K and V in flight per warp. Per
 * tile: S = Q·Kᵀ (Q re-read from shared memory by ldmatrix), the score
 * modifiers (template MOD), the mask on partial tiles, the online softmax in
 * the exp2 domain, O += P·V — attn_fwd_tile.cuh's tile steps, so the
 * arithmetic is the tensor-core forward's.
 *
 * Merge. The warps' partial states (m, ℓ, O) are merged through shared
 * memory in warp order; with one split the CTA finishes its rows
 * (fc_row_finishf: sink logit, empty rows) and writes o and lse directly;
 * otherwise it writes (m, ℓ, O) to a scratch buffer and a combine kernel
 * merges the splits in a fixed order and finishes the rows. Fixed orders
 * everywhere, no atomics: bit-identical across runs. m is kept in log2 units
 * (the exp2 domain) in the scratch.
 *
 * Sequences. Lengths, row and key origins come from fc_attn_seq, key rows
 * through fc_attn_key_offset (paged: the page of a key via the block table,
 * any page size), one key row per lane (load_kv_tile). Keys at or past a
 * sequence's end are never read (zero-filled in shared memory and masked),
 * so garbage there has no effect. The split count comes from the longest sequence (p.a.Sk); a split
 * whose keys lie past a short sequence's end writes an empty partial
 * (m = −inf, O not written and never read).
 *
 * Scratch (split count > 1): [B·Hkv·nsplit·G·Sq] × (m, ℓ) and × O[D] fp32,
 * fcc_scratch_alloc'd on the stream (the module pool; capturable in a CUDA graph), freed after
 * the combine kernel.
 */
#include "attn_fwd_tile.cuh"
#include "attn_ragged.cuh"

#include <limits.h>
#include <math.h>

namespace fcdec {
using namespace fctc;

/* The tile shape of one instantiation: HD = padded head dim, MT = m16 tiles
 * per warp (every warp holds all RB rows and a quarter of the keys), ST =
 * ring stages per warp. Shared memory: the Q block, then the warps' rings,
 * reused after the key loop for the merge. */
template <int HD_, int MT_, int ST_> struct DecTraits {
    static constexpr int HD = HD_, MT = MT_, ST = ST_;
    static constexpr int NW = 4;       /* warps per CTA */
    static constexpr int NT = 32 * NW;
    static constexpr int BN = 16;      /* keys per warp tile: one page of 16 holds a whole tile */
    static constexpr int RB = 16 * MT; /* query rows per CTA */
    static constexpr int LD = HD + 8;  /* smem row pitch (elements): conflict-free ldmatrix */
    static constexpr int STAGE = 2 * BN * LD; /* one ring stage: K tile then V tile */
    static constexpr int LDF = HD + 8; /* merge rows (floats) */
    static constexpr size_t Q_BYTES = (size_t)RB * LD * 2;
    static constexpr size_t RING_BYTES = (size_t)NW * ST * STAGE * 2;
    /* merge: O [NW][RB][LDF], m and ℓ [NW][RB], weights [RB][NW], factor [RB] */
    static constexpr size_t MERGE_BYTES = ((size_t)NW * RB * LDF + 2 * NW * RB + RB * NW + RB) * 4;
    static constexpr size_t SMEM = Q_BYTES + (RING_BYTES > MERGE_BYTES ? RING_BYTES : MERGE_BYTES);
    static_assert(HD % 16 == 0 && HD <= 256 && BN % 16 == 0 && ST >= 2, "tile shape");
    static_assert(RB <= NT, "one thread per row in the merge");
    static_assert(Q_BYTES % 16 == 0 && (STAGE * 2) % 16 == 0, "16-byte aligned smem rows");
};

/* Kernel arguments besides the problem. */
struct DecArgs {
    int nsplit;     /* key splits per (row block, kv head, sequence) */
    int nrb;        /* row blocks per (kv head, sequence) */
    int rmax;       /* G·Sq (Sq: the bound): rows per (b, hk) in the scratch */
    float *part_ml; /* nsplit > 1: [B·Hkv][nsplit][rmax] × (m in log2 units, ℓ) */
    float *part_o;  /* nsplit > 1: [B·Hkv][nsplit][rmax][D], O unnormalised */
};

/* Index of (b, hk, split, r) in the scratch. */
__device__ __forceinline__ int64_t part_index(const DecArgs &da, int64_t b, int hk, int Hkv, int split, int r) {
    return ((b * Hkv + hk) * da.nsplit + split) * (int64_t)da.rmax + r;
}

/* The K and V tiles of keys [n0, n0 + BN) of sequence seq, kv head hk, into
 * smem rows of pitch LD (V BN rows after K), by one warp. Key rows at or past
 * the sequence's end (Sk) and columns ≥ D are zero-filled, never read. Lane
 * l < BN works out the element offset of K row l, lane BN + l that of V row
 * l (one fc_attn_key_offset a lane and tile: a page lookup for paged caches,
 * whatever the page size), and the copies take them by shuffles: the loop
 * stays a few instructions per 16 bytes, so the kernel's code stays small
 * (a decode CTA runs a handful of tiles: instruction fetch, not bandwidth,
 * bounded the B = 1 step when every chunk worked out its own offset).
 * vec: cp.async with the L2::128B prefetch hint, waited for by the caller;
 * else plain loads (a loop, not unrolled: the rare path), visible after the
 * caller's __syncwarp. */
template <typename T, class K>
__device__ __forceinline__ void load_kv_tile(T *sK, const T *Kg, const T *Vg, const fc_attn &a, const fc_seq &seq,
                                             int64_t b, int hk, int n0, int Sk, int D, bool vec, int lane) {
    constexpr int HD = K::HD, BN = K::BN, LD = K::LD, CPR = HD / 8; /* 16-byte chunks per row */
    static_assert(2 * BN == 32 && (BN * CPR) % 32 == 0, "one lane per K/V row offset");
    const int lr = lane & (BN - 1);
    int64_t my = 0;
    if (n0 + lr < Sk) my = lane < BN ? fc_attn_key_offset(&a, &seq, b, a.sk, n0 + lr, hk)
                                     : fc_attn_key_offset(&a, &seq, b, a.sv, n0 + lr, hk);
    T *sV = sK + BN * LD;
    if (vec) {
#pragma unroll
        for (int idx = lane; idx < BN * CPR; idx += 32) {
            const int r = idx / CPR, c = idx % CPR;
            const bool ok = n0 + r < Sk && c * 8 < D;
            const int64_t koff = __shfl_sync(0xffffffffu, my, r), voff = __shfl_sync(0xffffffffu, my, BN + r);
            cp_async16<128>(smem_u32(sK + r * LD + c * 8), ok ? Kg + koff + c * 8 : Kg, ok);
            cp_async16<128>(smem_u32(sV + r * LD + c * 8), ok ? Vg + voff + c * 8 : Vg, ok);
        }
    } else {
#pragma unroll 1
        for (int idx = lane; idx < BN * CPR; idx += 32) {
            const int r = idx / CPR, c = idx % CPR;
            const bool rok = n0 + r < Sk;
            const int64_t koff = __shfl_sync(0xffffffffu, my, r), voff = __shfl_sync(0xffffffffu, my, BN + r);
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const int d = c * 8 + e;
                const bool ok = rok && d < D;
                sK[r * LD + d] = ok ? Kg[koff + d] : Ops<T>::from_f(0.f);
                sV[r * LD + d] = ok ? Vg[voff + d] : Ops<T>::from_f(0.f);
            }
        }
    }
}

/* Rows [r0, r0 + RB) of the (b, hk) row space (r = i·G + g: query row i of
 * head hk·G + g), zero-filled past nr rows and D columns, into sQ (pitch
 * LD), by the whole CTA. */
template <typename T, class K>
__device__ __forceinline__ void load_q_block(T *sQ, const fcc_attn &p, const fc_seq &seq, int hk, int r0, int nr,
                                             int tid) {
    const fc_attn &a = p.a;
    const int G = p.group;
    auto off = [&](int lr) {
        const int r = r0 + min(lr, nr - 1);
        return fc_attn_row_offset(&seq, a.sq, r / G, (int64_t)hk * G + r % G);
    };
    load_rows_at<T, K::HD, K::RB, K::NT>(sQ, static_cast<const T *>(a.q), off, 0, nr, p.D, p.vec16, tid);
}

/* One CTA: row block rb, key split `split` of (kv head hk, sequence b).
 * MOD: the score modifiers run (softcap, ALiBi, or a negative scale): logits
 * in log2 units (fcc_score_step, the catch-all variant, per row: the rows of
 * a fragment belong to different heads); else raw dots with scale·log2 e
 * folded into the exp2 FFMA (attn_fwd_tile.cuh, "two score paths"). */
template <typename T, class K, bool MOD>
__global__ void __launch_bounds__(K::NT) attn_decode_kernel(const __grid_constant__ fcc_attn p, const DecArgs da) {
    constexpr int HD = K::HD, BN = K::BN, LD = K::LD, MT = K::MT, RB = K::RB, NW = K::NW, ST = K::ST;
    constexpr int NKK = HD / 16, NJ = BN / 8, ND = HD / 8, LDF = K::LDF;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *sQ = reinterpret_cast<T *>(smem_raw);
    T *ring = sQ + RB * LD;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const fc_attn &a = p.a;

    int64_t bid = blockIdx.x;
    const int rb = (int)(bid % da.nrb);
    bid /= da.nrb;
    const int split = (int)(bid % da.nsplit);
    bid /= da.nsplit;
    const int hk = (int)(bid % p.Hkv);
    const int64_t b = bid / p.Hkv;

    const fc_seq seq = fc_attn_seq(&a, b);
    const int G = p.group, Sq = (int)seq.Sq, Sk = (int)seq.Sk;
    const int r0 = rb * RB;
    if (r0 >= G * Sq) return; /* a shorter sequence has no such rows (the whole CTA leaves) */
    const int nr = min(RB, G * Sq - r0);
    const fc_mask mask = fc_seq_mask(&a, &seq);

    /* The block's key tiles (≤ 2 segments, key_tiles) as one index range
     * [0, T), and this split's part of it. */
    const KeyTiles kt = key_tiles<BN>(mask, r0 / G, (r0 + nr - 1) / G);
    const int na = kt.a1 - kt.first, T_ = na + (kt.b1 - kt.b0);
    const int k0 = (int)((int64_t)split * T_ / da.nsplit), k1 = (int)((int64_t)(split + 1) * T_ / da.nsplit);
    auto tile_key0 = [&](int k) { return (k < na ? kt.first + k : kt.b0 + (k - na)) * BN; };

    /* This thread's fragment rows lr = 16·mt + g + 8·hf (clamped to the
     * block's last row: padding rows compute, are never stored). */
    auto frag_row = [&](int mt, int hf) { return r0 + min(16 * mt + g + 8 * hf, nr - 1); };
    const Vis vfirst = vis_of(mask, r0 / G, Sq), vlast = vis_of(mask, (r0 + nr - 1) / G, Sq);
    fc_score_modf mod[MOD ? MT : 1][2];
    int dbase[MOD ? MT : 1][2]; /* i + Sk − Sq: the ALiBi distance of key 0 */
    if (MOD) {
        const fc_score_params sp = fc_seq_score(&a, &seq);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int r = frag_row(mt, hf);
                mod[MOD ? mt : 0][hf] = fc_score_modf_of(fc_score_mod_make(&sp, b, (int64_t)hk * G + r % G, FC_LOG2E));
                dbase[MOD ? mt : 0][hf] = (int)fc_alibi_dist(&sp, r / G, 0);
            }
    }
    /* exp2 argument per unit of the scores, and the row maxima's factor to log2 units. */
    const float mul = MOD ? 1.f : p.sl2e;

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

    /* Per-warp pipeline: warp tiles k0 + warp + NW·n, n < nt, tile n in stage n % ST. */
    const T *Kg = static_cast<const T *>(a.k);
    const T *Vg = static_cast<const T *>(a.v);
    T *wring = ring + warp * ST * K::STAGE;
    const int nt = k0 + warp < k1 ? (k1 - k0 - warp + NW - 1) / NW : 0;
    auto tile_of = [&](int n) { return k0 + warp + n * NW; };
    auto issue = [&](int n) {
        if (n < nt)
            load_kv_tile<T, K>(wring + (n % ST) * K::STAGE, Kg, Vg, a, seq, b, hk, tile_key0(tile_of(n)), Sk,
                               p.D, p.vec16, lane);
        cp_async_commit(); /* one group per tile slot, empty or not: the wait counts stay uniform */
    };

    load_q_block<T, K>(sQ, p, seq, hk, r0, nr, tid);
    cp_async_commit();
#pragma unroll 1
    for (int n = 0; n < ST - 1; ++n) issue(n);
    cp_async_wait<ST - 1>(); /* this thread's Q copies landed (the oldest group) ... */
    __syncthreads();         /* ... and everyone's */

    const uint32_t sQa = smem_u32(sQ);
    const int q_off = (lane & 15) * LD + (lane >> 4) * 8;
    const int k_off = ((lane >> 4) * 8 + (lane & 7)) * LD + ((lane >> 3) & 1) * 8;
    const int v_off = (((lane >> 3) & 1) * 8 + (lane & 7)) * LD + (lane >> 4) * 8;
    /* One m16 tile of Q (a decode step) stays in registers across the key
     * tiles (32 registers at HD 128) instead of being re-read by ldmatrix. */
    constexpr bool QREG = MT == 1 && HD <= 128;
    uint32_t qreg[QREG ? NKK : 1][4];
    if constexpr (QREG) {
#pragma unroll
        for (int kk = 0; kk < NKK; ++kk)
            ldsm_x4(sQa + 2 * (q_off + kk * 16), qreg[kk][0], qreg[kk][1], qreg[kk][2], qreg[kk][3]);
    }

    for (int n = 0; n < nt; ++n) {
        cp_async_wait<ST - 2>(); /* tile n landed (this lane's copies) ... */
        __syncwarp();            /* ... all lanes'; and every lane is done with stage (n − 1) % ST */
        issue(n + ST - 1);
        const int n0 = tile_key0(tile_of(n));
        const uint32_t sKa = smem_u32(wring + (n % ST) * K::STAGE), sVa = sKa + BN * LD * 2;

        /* S = Q·Kᵀ: RB rows × BN keys */
        float s[MT][NJ][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int j = 0; j < NJ; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[mt][j][e] = 0.f;
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
                ldsm_x4(sKa + 2 * (k_off + jj * 16 * LD + kk * 16), b0, b1, b2, b3);
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
        auto rvis = [&](int mt) {
            return RowVis{{vis_of(mask, frag_row(mt, 0) / G, Sq), vis_of(mask, frag_row(mt, 1) / G, Sq)}};
        };
        auto vaddr = [=](int kk, int dd) { return sVa + 2 * (v_off + kk * 16 * LD + dd * 16); };
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
        /* Non-finite values of keys some row cannot see (attn_fwd_tile.cuh), on partial tiles only. */
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
    cp_async_wait<0>(); /* only empty groups can be left; none may target the ring below */
    __syncthreads();    /* every warp is done with its ring: it becomes the merge area */

    /* The warps' states: O [NW][RB][LDF], maxima (log2 units) and sums [NW][RB]. */
    float *mo = reinterpret_cast<float *>(ring);
    float *mm = mo + NW * RB * LDF;
    float *ml = mm + NW * RB;
    float *wt = ml + NW * RB; /* [RB][NW]: e^(m_w − M) in the exp2 domain */
    float *rf = wt + RB * NW; /* [RB]: the row's factor (one split) or its max M */
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
    __syncthreads();

    /* Per row (thread lr < nr): M = max over warps, the warps' weights, ℓ;
     * then the row finish (one split) or the partial's (M, ℓ). */
    const bool single = da.nsplit == 1;
    if (tid < nr) {
        const int lr = tid, r = r0 + lr, i = r / G;
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
            const int64_t P = part_index(da, b, hk, p.Hkv, split, r);
            da.part_ml[2 * P] = M;
            da.part_ml[2 * P + 1] = l;
            rf[lr] = M;
        }
    }
    __syncthreads();

    /* O rows: Σ_w O_w·weight_w, in warp order; d fastest (coalesced). */
    const int D = p.D;
    T *Og = static_cast<T *>(a.o);
    for (int idx = tid; idx < nr * D; idx += K::NT) {
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

/* The combine: one CTA of CMB_WARPS warps per (b, hk, row r) merges the
 * nsplit partials (M = max m_s, ℓ = Σ ℓ_s·2^(m_s − M), O = Σ O_s·2^(m_s − M)),
 * finishes the row (fc_row_finishf) and writes o (T) and lse. A decode
 * step waits for it, so it is written for latency: every thread reads one
 * split's (m, ℓ) (M and ℓ by fixed shuffle trees, then across the warps in
 * warp order), the weights go through shared memory, and warp w adds the O
 * rows of splits w, w + CMB_WARPS, ... (CMB_UNROLL of them loaded before
 * any is added), the warps' sums then added in warp order. Fixed orders:
 * bit-identical across runs. */
constexpr int CMB_WARPS = 4;
constexpr int CMB_MAXS = 128;   /* splits at most (fcc_decode_splits) */
constexpr int CMB_UNROLL = 4;   /* splits per warp whose O rows are in flight together */
static_assert(CMB_MAXS <= 32 * CMB_WARPS, "one split's (m, l) per thread");
template <typename T>
__global__ void __launch_bounds__(32 * CMB_WARPS) attn_decode_combine_kernel(const __grid_constant__ fcc_attn p,
                                                                             const DecArgs da) {
    constexpr int CD = 256 / 32; /* D ≤ 256: dims lane + 32·c */
    __shared__ float wsh[CMB_MAXS];              /* split weights */
    __shared__ float red[2][CMB_WARPS];          /* per-warp M, then ℓ */
    __shared__ float osum[CMB_WARPS][CD * 32];   /* per-warp O sums */
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const int64_t row = blockIdx.x;
    const fc_attn &a = p.a;
    const int r = (int)(row % da.rmax);
    const int hk = (int)(row / da.rmax % p.Hkv);
    const int64_t b = row / da.rmax / p.Hkv;
    const fc_seq seq = fc_attn_seq(&a, b);
    const int G = p.group, D = p.D, n = da.nsplit;
    if (r >= G * (int)seq.Sq) return; /* (uniform over the CTA) */
    const int i = r / G;
    const int64_t h = (int64_t)hk * G + r % G;

    const int64_t P0 = part_index(da, b, hk, p.Hkv, 0, r), PS = da.rmax; /* partial s at P0 + s·PS */
    const float ms = tid < n ? da.part_ml[2 * (P0 + tid * PS)] : -INFINITY;
    const float ls = tid < n ? da.part_ml[2 * (P0 + tid * PS) + 1] : 0.f;
    float M = ms;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    if (lane == 0) red[0][w] = M;
    __syncthreads();
    M = red[0][0];
#pragma unroll
    for (int k = 1; k < CMB_WARPS; ++k) M = fmaxf(M, red[0][k]);
    const float x = ms == -INFINITY ? 0.f : exp2f(ms - M); /* empty partial: weight 0, O not written */
    if (tid < n) wsh[tid] = x;
    float l = x != 0.f ? ls * x : 0.f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
    if (lane == 0) red[1][w] = l;
    __syncthreads();

    float acc[CD];
#pragma unroll
    for (int c = 0; c < CD; ++c) acc[c] = 0.f;
    for (int s0 = w; s0 < n; s0 += CMB_WARPS * CMB_UNROLL) {
        float xs[CMB_UNROLL], v[CMB_UNROLL][CD];
#pragma unroll
        for (int u = 0; u < CMB_UNROLL; ++u) {
            const int sp = s0 + u * CMB_WARPS;
            xs[u] = sp < n ? wsh[sp] : 0.f;
            const float *po = da.part_o + (P0 + (int64_t)sp * PS) * D;
#pragma unroll
            for (int c = 0; c < CD; ++c) v[u][c] = xs[u] != 0.f && lane + 32 * c < D ? po[lane + 32 * c] : 0.f;
        }
#pragma unroll
        for (int u = 0; u < CMB_UNROLL; ++u)
#pragma unroll
            for (int c = 0; c < CD; ++c) acc[c] = fmaf(v[u][c], xs[u], acc[c]);
    }
#pragma unroll
    for (int c = 0; c < CD; ++c) osum[w][lane + 32 * c] = acc[c];
    __syncthreads();
    l = red[1][0];
#pragma unroll
    for (int k = 1; k < CMB_WARPS; ++k) l += red[1][k];
    float f, L;
    fc_row_finishf(M * FC_LN2_F, l, a.sink_logits != nullptr, (float)fc_attn_sink(&a, h), &f, &L);
    T *o = static_cast<T *>(a.o) + fc_attn_row_offset(&seq, a.so, i, h);
    for (int d = tid; d < D; d += 32 * CMB_WARPS) {
        float sum = osum[0][d];
#pragma unroll
        for (int k = 1; k < CMB_WARPS; ++k) sum += osum[k][d];
        o[d] = Ops<T>::from_f(sum * f);
    }
    if (a.lse && tid == 0) static_cast<float *>(a.lse)[fc_attn_lse_offset(&seq, a.slse, h, i)] = L;
}

/* ------------------------------------------------------------------ plan */
/* Head dims padded to 64, 128 or 256 (the padding costs shared-memory
 * traffic only: zero-filled columns are never read from global memory). */
static int padded_hd(int64_t D) { return D <= 64 ? 64 : D <= 128 ? 128 : 256; }

/* f(K{}) for the tile shape of (HD, MT). Stages: enough K/V in flight per
 * SM (2 CTAs × 4 warps × (ST − 1) tiles ≥ 64 KB at HD 64/128) while two
 * CTAs fit 227 KB (sm_90); HD 256: one CTA, 2 stages (fits sm_80's 163 KB). */
template <class F> static auto with_traits(int HD, int MT, F &&f) {
    if (HD == 64) return MT == 1 ? f(DecTraits<64, 1, 5>{}) : f(DecTraits<64, 2, 5>{});
    if (HD == 128) return MT == 1 ? f(DecTraits<128, 1, 3>{}) : f(DecTraits<128, 2, 3>{});
    return f(DecTraits<256, 1, 2>{});
}

struct Plan {
    bool ok;
    int HD, MT, nrb, nsplit, rmax;
    size_t smem;
    int64_t grid, combine_grid;
};

static Plan make_plan(const fcc_attn &p) {
    const fc_attn &a = p.a;
    Plan pl = {};
    /* F32 stays accurate to fp32 and F64 in fp64 (no tensor cores): the other kernels. */
    if (a.dtype != FLASHC_F16 && a.dtype != FLASHC_BF16) return pl;
    /* mma.sync bf16 and cp.async need sm_80; ldmatrix rows need unit d stride; int32 positions. */
    if (p.dev.cc < 80 || a.D < 1 || a.D > 256 || !p.d_contig || !p.fits_int32) return pl;
    /* Few query rows per kv head: a decode step or a short chunk (every row
     * block shares each K/V load, rmax ≤ 64), or a chunk of ≤ 64 tokens
     * where the row-parallel kernels would leave SMs idle (B·Hq CTAs). */
    const int64_t rmax = a.Sq * (a.Hq / a.Hkv);
    if (!(rmax <= 64 || (a.Sq <= 64 && a.B * a.Hq < p.dev.sm_count)) || rmax > (1 << 24)) return pl;
    pl.HD = padded_hd(a.D);
    pl.MT = pl.HD <= 128 && rmax > 16 ? 2 : 1;
    pl.rmax = (int)rmax;
    pl.nrb = (int)((rmax + 16 * pl.MT - 1) / (16 * pl.MT));
    int nw = 0, bn = 0;
    with_traits(pl.HD, pl.MT, [&](auto k) {
        using K = decltype(k);
        pl.smem = K::SMEM;
        nw = K::NW;
        bn = K::BN;
        return 0;
    });
    if (pl.smem > (size_t)p.dev.smem_optin) return pl;
    /* Keys a row block may see: all, or the window's span and the sinks. */
    int64_t keys = a.Sk;
    if (a.wl >= 0 && a.wl < a.Sk) { /* (sides clamped to the sequence: no overflow for huge windows) */
        const int64_t wr = a.wr >= 0 && a.wr < a.Sk ? a.wr : a.Sk, ns = a.n_sink < a.Sk ? a.n_sink : a.Sk;
        const int64_t span = a.wl + a.Sq + wr + ns;
        keys = span < keys ? span : keys;
    }
    const int64_t per_sm = (p.dev.smem_optin + 1024) / ((int64_t)pl.smem + 1024); /* + the per-block reserve */
    const int64_t slots = (int64_t)p.dev.sm_count * (per_sm < 1 ? 1 : per_sm > 4 ? 4 : per_sm);
    pl.nsplit = fcc_decode_splits(a.B * a.Hkv * pl.nrb, (keys + bn - 1) / bn, slots, nw);
    pl.grid = a.B * a.Hkv * pl.nrb * pl.nsplit;
    pl.combine_grid = a.B * a.Hkv * rmax; /* one CTA per row */
    pl.ok = pl.grid <= INT_MAX && pl.combine_grid <= INT_MAX;
    return pl;
}

template <typename T, class K> static flashc_status run(const fcc_attn &p, const Plan &pl) {
    cudaStream_t st = fcc_stream(p.a.stream);
    DecArgs da = {pl.nsplit, pl.nrb, pl.rmax, nullptr, nullptr};
    float *scr = nullptr;
    if (pl.nsplit > 1) {
        const size_t n = (size_t)(p.a.B * p.Hkv * pl.nsplit) * (size_t)pl.rmax;
        FCC_CHECK(fcc_scratch_alloc((void **)&scr, n * (2 + (size_t)p.D) * sizeof(float), st));
        da.part_ml = scr;
        da.part_o = scr + 2 * n;
    }
    const bool mod = !p.plain_score || !p.scale_pos;
    auto kern = mod ? attn_decode_kernel<T, K, true> : attn_decode_kernel<T, K, false>;
    flashc_status s = fcc_set_smem((const void *)kern, K::SMEM, "attn_decode");
    if (s == FLASHC_OK) {
        kern<<<(unsigned)pl.grid, K::NT, K::SMEM, st>>>(p, da);
        const cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) s = fcc_cuda_error(e, __FILE__, __LINE__, "launch of attn_decode_kernel");
    }
    if (s == FLASHC_OK && pl.nsplit > 1) {
        attn_decode_combine_kernel<T><<<(unsigned)pl.combine_grid, 32 * CMB_WARPS, 0, st>>>(p, da);
        const cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) s = fcc_cuda_error(e, __FILE__, __LINE__, "launch of attn_decode_combine_kernel");
    }
    if (scr) {
        /* Stream-ordered: freed after the kernels above have run. */
        const cudaError_t e = fcc_scratch_free(scr, st);
        if (s == FLASHC_OK && e != cudaSuccess) return fcc_cuda_error(e, __FILE__, __LINE__, "fcc_scratch_free");
    }
    return s;
}

} // namespace fcdec

/* Splits of the keys per work unit (row block × kv head × sequence): one when
 * the units alone fill 0.8 of a wave of CTA slots (sm_count × CTAs per SM);
 * else the smallest count whose waves are ≥ 85 % as full as the best one's
 * (FlashAttention's num_splits_heuristic), with every warp of a split
 * getting ≥ 2 tiles and at most 128 splits. Decode is bound by memory: the
 * point is to keep every SM streaming, with as few partials as that takes. */
int fcc_decode_splits(int64_t units, int64_t tiles, int64_t slots, int nw) {
    if (units <= 0 || tiles <= 0 || slots <= 0) return 1;
    int64_t maxs = tiles / (2 * (int64_t)nw);
    if (maxs > fcdec::CMB_MAXS) maxs = fcdec::CMB_MAXS;
    if (maxs <= 1 || units * 5 >= slots * 4) return 1;
    double eff[fcdec::CMB_MAXS + 1], best = 0.0;
    for (int64_t s = 1; s <= maxs; ++s) {
        const double w = (double)(units * s) / (double)slots;
        eff[s] = w / ceil(w);
        if (eff[s] > best) best = eff[s];
    }
    for (int64_t s = 1; s <= maxs; ++s)
        if (eff[s] >= 0.85 * best) return (int)s;
    return 1;
}

bool fcc_fwd_decode_supports(const fcc_attn &p) { return fcdec::make_plan(p).ok; }

flashc_status fcc_fwd_decode_run(const fcc_attn &p) {
    const fcdec::Plan pl = fcdec::make_plan(p);
    if (!pl.ok) return fcc_error(FLASHC_ERR_INTERNAL, "attn_decode: run without supports()");
    return fcdec::with_traits(pl.HD, pl.MT, [&](auto k) {
        using K = decltype(k);
        if (p.a.dtype == FLASHC_BF16) return fcdec::run<__nv_bfloat16, K>(p, pl);
        return fcdec::run<__half, K>(p, pl);
    });
}
