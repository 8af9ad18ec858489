/*
 * attn_fwd_wgmma.cu — Hopper (sm_90a) attention forward for F16/BF16,
 * D ≤ 256 with D % 8 == 0, zero-padded by the tensor maps to HD ∈ {64, 128,
 * 192, 256} (columns past D read 0 and are never stored; D in (64, 96] runs
 * the products at width 80 or 96 only, WgTraits::DV): warpgroup MMA (wgmma)
 * fed by TMA, FA3-style warp
 * specialisation. Compiled only for sm_90a (src/cuda/CMakeLists.txt); the
 * plan (attn_dispatch.cu) picks it when fcc_fwd_wgmma_supports() holds
 * (compute capability 9.0 among its conditions), else the mma.sync kernel.
 *
 *   q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D], o like q, lse [B, Hq, Sq] (f32);
 *   stride(d) = 1, 16-byte aligned pointers and q/k/v strides (TMA).
 *   Ragged problems (attn_ragged.cuh): packed sequences (cu_q: q/o
 *   [1, Tq, Hq, D]; cu_k: k/v [1, Tk, Hkv, D]), contiguous KV caches (k/v
 *   [Bk, S_cache, Hkv, D], per-sequence lengths, cache_batch_idx) and
 *   paged caches of any page size that is a multiple of 16 (a tile is whole
 *   boxes, each inside one page: wg_page_box). The
 *   RAG instantiations take sequence b's row origins (or pages) as TMA
 *   coordinates and its own mask and score parts; a key tile that holds
 *   the sequence's last key reads the next sequence's keys (or the cache's
 *   garbage) past it, so it is always scrubbed (SCRUB); a warpgroup's O
 *   rows go out by TMA only where all 64 lie inside the sequence. Measured
 *   (H200): varlen prefill of 8 prompts of 64..4096 tokens, D 128 causal
 *   bf16, 164 → 367 TFLOP/s against the mma.sync kernel that ran it before
 *   (bench_serving.py --gpu); chunked prefill of 1024 tokens after 3072
 *   cached (B 4, GQA 32/8), 194 → 501 contiguous, 484 / 412 / 216 with
 *   pages of 256 / 64 / 16 (bench_prefill_cache.py; dense ceiling 549).
 *   Since 2026-12-03 a tile's block-table entries are loaded before the
 *   wait for its K stage and reused by its V copy, and pages that divide
 *   the tile go in one box of several pages where they are consecutive in
 *   the pool (tkr / tvr): in one run, pages of 16 / 32 / 64 shuffled 355 /
 *   419 / 470, consecutive 485 / 475 / 487, contiguous 500 (was 310 / 364 /
 *   399 shuffled, either order).
 *
 * One CTA per (BM query rows, query head, batch); 1 + NC warpgroups (NC = 3
 * consumers, BM = 192 at HD = 64 where the plan takes it, wg_nc; else NC = 2,
 * BM = 128):
 *   WG0, producer (setmaxnreg 24 / 32 / 40): one thread issues TMA loads of the Q tile
 *     (once) and of K and V tiles of BN keys (128; 112 at HD = 192 and 80 at
 *     HD = 256: what two stages of each ring hold beside Q; 176 at HD = 128
 *     where every row sees every key of ≥ 4096, FA3's tile, wg_wide) into two 2-stage rings, in the
 *     order the consumers use them (K(t), then V(t − 1)); a stage is `full`
 *     when its bytes landed and `empty` when every consumer warpgroup has
 *     finished reading it, so a K stage is refilled while P·V still runs.
 *   WG1 .. WG(NC), consumers (setmaxnreg 160 / 232 / 240): each owns 64 query rows.
 *     S = Q·Kᵀ by m64n(BN)k16 wgmma with both operands in smem (128B
 *     swizzle), then the tile steps of attn_fwd_tile.cuh on the accumulator
 *     (the mma.sync kernel's: score modifiers, masks, online softmax in the
 *     exp2 domain, row finish); P rounded to the input type and used as the
 *     register A operand of O += P·V (one m64n(HD)k16 per k16 step, V read
 *     from smem through a transposed descriptor).
 *     Overlap (FA3's two schedules): within a warpgroup, iteration t issues
 *     S(t) and P(t − 1)·V(t − 1) together and runs tile t's softmax while
 *     the second product is in flight; between the warpgroups, named
 *     barriers make them take turns issuing (ping-pong, a ring of NC), so
 *     one's softmax runs under the others' products. Measured on the H100 against the
 *     one-product-at-a-time loop, same run: +4 to +7 % at D = 128 S ≥ 4k,
 *     +10 to +23 % at D = 64 (benchmarks/NOTES.md).
 * Masking (attn_mask.h): key tiles by loop bounds from the key segments of
 * the CTA's rows (sink-token tiles first, then the window), per-element
 * masks only on tiles not visible to every row of the warpgroup; rows with
 * no visible key get O = 0, L = −inf (or s_h). Rows and keys past Sq / Sk
 * read zeros (TMA out-of-bounds fill).
 * Masked NaN/Inf (flashc.h: what a row cannot see never influences it): a
 * masked score is −inf by selection, but P·V multiplies a masked P = 0 by
 * the whole V tile, and 0·Inf = NaN. So the V tiles that some row of the
 * CTA cannot wholly see (scrub_tile: few per CTA, none without masks) land
 * on a producer-only barrier (`vland`); the producer warpgroup replaces
 * their non-finite values by +0 in place (scrub_v: one key row per thread),
 * makes the writes visible to the async proxy (fence.proxy.async) and only
 * then completes the stage's `full` barrier, and each producer thread
 * notes whether its CTA row sees a key that held such a value. At the end
 * those rows (`rowbad`, behind the `logdone` barrier) are stored as NaN
 * (the mma.sync kernel poisons P instead, as the CPU does). The consumers'
 * loop is the one without the scrub: code for it there, even never run,
 * cost 4–10 % (measured); P·V on mma.sync for such tiles made ptxas
 * serialize the wgmma pipeline (−35 %). Problems without a window or
 * causal mask (every row sees every key) run the SCRUB = false instance.
 */
#include "attn_fwd_tile.cuh"
#include "attn_ragged.cuh"
#include "attn_wgmma.cuh"

#include <limits.h>
#include <math.h>
#include <type_traits>

namespace fcwg {

using namespace fctc;

/* The rows of one K/V box of a paged cache (page_size ps, a multiple of 16)
 * in key tiles of bn rows (a multiple of 16): the whole tile where pages are
 * multiples of it, a page where pages divide it, else 16 rows — a box never
 * crosses a page (it starts at a multiple of 16 and 16 divides ps). A tile is
 * bn / rows ≤ 8 boxes. The maps (fcc_fwd_wgmma_run) and the producer agree on it. */
__host__ __device__ __forceinline__ int wg_page_box(int64_t ps, int bn) {
    return ps % bn == 0 ? bn : bn % ps == 0 ? (int)ps : 16;
}

/* NC, consumer warpgroups of 64 query rows each: 3 only at HD = 64 (the
 * softmax's work per score is that of HD = 128 against half the tensor
 * work: it hides under two other warpgroups' products, as in FA3's 192-row
 * tiles; above, the O accumulator leaves no registers for a third). The
 * plan takes 3 at HD = 64 unless rows see different keys (causal, window)
 * and Sq < 4096, where 192-row blocks waste more of the diagonal than they
 * gain (wg_nc; measured in benchmarks/NOTES.md). */
template <int HD_, int NC_ = 2, int DV_ = HD_, int BN_ = 0> struct WgTraits {
    static constexpr int HD = HD_;
    static constexpr int NC = NC_;
    /* DV: the columns the products work on (D rounded up to 16), ≤ HD, the
     * smem tiles' width: heads of 80 and 96 run the k16 steps of S = Q·Kᵀ
     * up to DV and O += P·V as m64n(DV) — 0.625 / 0.75 of the tensor work
     * of their padding to 128 (the tiles keep HD's layout; TMA fills the
     * columns past D with zeros, never read by the products past DV). */
    static constexpr int DV = DV_;
    static_assert(DV == HD || (HD == 128 && (DV == 80 || DV == 96)), "DV: HD, or 80 / 96 at HD 128");
    static_assert(NC == 2 || (NC == 3 && HD == 64), "3 consumer warpgroups only at HD 64");
    static constexpr int BM = 64 * NC;       /* query rows per CTA */
    /* keys per tile: as many as two K and two V stages beside Q fit in smem
     * above HD 128 (a multiple of 16; the per-tile work of the softmax —
     * barriers, the row max's shuffles, α, O's rescale — spread over more
     * keys than 64 took) */
    static constexpr int BN = BN_ ? BN_ : HD == 192 ? 112 : HD == 256 ? 80 : 128;
    /* BN_ = 176 at HD 128 (FA3's 128 × 176 tile): for problems where every
     * row sees every key (wg_wide), the per-tile cost of the softmax and the
     * turns spread over 1.375× the keys; two K and two V stages of 176 rows
     * beside Q take 209 KB. Never scrubbed (no row misses a key there), so
     * one producer thread a key row (scrub_v) does not bind it. */
    static_assert(BN_ == 0 || (BN_ == 176 && HD == 128 && NC == 2), "BN_: 0 (default) or 176 at HD 128");
    static constexpr int STAGES = 2;         /* per ring: K and V each */
    static constexpr int NT = 128 * (1 + NC); /* producer + consumer warpgroups */
    /* setmaxnreg budgets (65536 registers a CTA, multiples of 8) */
    static constexpr int REG_P = NC == 3 ? 32 : BN_ ? 24 : 40, REG_C = NC == 3 ? 160 : BN_ ? 240 : 232;
    static_assert(REG_P * 128 + REG_C * 128 * NC <= 65536, "register budget");
    static constexpr int NDB = HD / 64;      /* 64-column (128-byte) blocks of a row */
    static constexpr int Q_BYTES = BM * HD * 2;
    static constexpr int KV_BYTES = BN * HD * 2; /* one K or one V tile */
    static constexpr int OFF_K = Q_BYTES;
    static constexpr int OFF_V = OFF_K + STAGES * KV_BYTES;
    static constexpr int SMEM = OFF_V + STAGES * KV_BYTES + 1024; /* + alignment slack */
    static_assert(HD == 64 || HD == 128 || HD == 192 || HD == 256, "HD 64, 128, 192 or 256");
    static_assert(SMEM <= 232448, "Hopper opt-in shared memory");
};

/* Warpgroup scheduling (FA3's ping-pong): the NC consumer warpgroups take
 * turns issuing their products, in a ring, so that one's softmax runs under
 * the others' tensor-core work. Named barriers 4 .. 3 + NC (3 is the
 * producer's), 256 threads each: `wait_turn` (this warpgroup's 128 threads)
 * completes with the previous warpgroup's `pass_turn`. */
__device__ __forceinline__ void wait_turn(int cw) {
    asm volatile("bar.sync %0, 256;\n" ::"r"(4 + cw) : "memory");
}
template <int NC> __device__ __forceinline__ void pass_turn(int cw) {
    asm volatile("bar.arrive %0, 256;\n" ::"r"(4 + (cw + 1 == NC ? 0 : cw + 1)) : "memory");
}

/* The fixed running max (log2 units) of a softcap-only problem whose P is
 * rounded to T (attn_score.h, fc_score_max_bound_l2f), or −inf. cap = log2 e·softcap. */
template <typename T> __host__ __device__ __forceinline__ float wg_fixed_max(float cap) {
    return std::is_same<T, __half>::value ? fc_score_max_bound_l2f(FC_SCORE_CAP, cap, FC_P_LO_F16, FC_P_HI_F16)
                                          : fc_score_max_bound_l2f(FC_SCORE_CAP, cap, FC_P_LO_F32, FC_P_HI_F32);
}

/* S = Q·Kᵀ for one warpgroup: 64 × BN from smem Q rows (qrow) and a K tile
 * (sk); issued and committed, not waited for. */
template <typename T, class K>
__device__ __forceinline__ void issue_s(float (&acc_s)[K::BN / 8][4], uint32_t qrow, uint32_t sk) {
    wg_fence();
    const uint64_t da0 = sw128_desc(qrow, 16, 1024), dk0 = sw128_desc(sk, 16, 1024);
#pragma unroll
    for (int kk = 0; kk < K::DV / 16; ++kk) {
        const uint32_t koff = (kk & 3) * 32; /* k16 step inside the 128-byte row */
        /* HD 256: rebuilt per step (two more live registers spill there) */
        const uint64_t da = K::HD == 256 ? sw128_desc(qrow + (kk >> 2) * K::BM * 128 + koff, 16, 1024)
                                         : desc_add(da0, (kk >> 2) * K::BM * 128 + koff);
        const uint64_t dk = K::HD == 256 ? sw128_desc(sk + (kk >> 2) * K::BN * 128 + koff, 16, 1024)
                                         : desc_add(dk0, (kk >> 2) * K::BN * 128 + koff);
        WgOps<T>::template ss<K::BN>(&acc_s[0][0], da, dk, kk > 0 ? 1 : 0); /* kk = 0 overwrites */
    }
    wg_commit();
}

/* O += P·V: V rows are keys (k), columns d (n), d contiguous → transposed B;
 * one m64n(DV)k16 per k16 step, the tile's 64-column blocks BN·128 bytes
 * apart (the descriptor's leading byte offset); issued and committed, not
 * waited for. */
template <typename T, class K>
__device__ __forceinline__ void issue_pv(float (&acc_o)[K::DV / 8][4], const uint32_t (&pa)[K::BN / 16][4],
                                         uint32_t sv) {
    wg_fence();
    const uint64_t dv0 = sw128_desc(sv, K::BN * 128, 1024);
#pragma unroll
    for (int kk = 0; kk < K::BN / 16; ++kk) {
        const uint64_t dv = desc_add(dv0, kk * 16 * 128);
        WgOps<T>::template rs_tb<K::DV>(&acc_o[0][0], pa[kk], dv);
    }
    wg_commit();
}

/* One CTA per virtual block (nM query blocks × Hq × B). MOD: the modifier
 * path (attn_fwd_tile.cuh), chosen once on the host; FIXM (with MOD): a
 * softcap alone, rows run with a fixed running max (wg_fixed_max). */
template <typename T, class K, bool MOD, bool SCRUB, bool FIXM = false, bool RAG = false>
__global__ void __launch_bounds__(K::NT, 1)
    attn_fwd_wgmma_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                          const __grid_constant__ CUtensorMap tv, const __grid_constant__ CUtensorMap to,
                          const __grid_constant__ CUtensorMap tkr, const __grid_constant__ CUtensorMap tvr,
                          const __grid_constant__ fcc_attn p, const int nM, const int otma, const int runs) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int DV = K::DV, BN = K::BN, BM = K::BM, ST = K::STAGES, NDB = K::NDB, NC = K::NC;
    extern __shared__ unsigned char smem_raw[];
    /* Q, K full/empty, V full/empty, V land (scrubbed stages), logdone */
    __shared__ __align__(8) uint64_t bars[1 + 5 * ST + 1];
    __shared__ uint32_t vbad[4];   /* the tile being scrubbed: keys that held NaN/Inf */
    __shared__ uint32_t rowbad[BM / 32]; /* the CTA's rows that saw such a key (bit r: row m0 + r) */
    /* 128B-swizzled tiles need 1024-byte aligned atoms. */
    const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const uint32_t sQ = base, sK = base + K::OFF_K, sV = base + K::OFF_V;
    const uint32_t barQ = smem_u32(&bars[0]);
    const Ring<ST> rk = {smem_u32(&bars[1]), smem_u32(&bars[1 + ST])};
    const Ring<ST> rv = {smem_u32(&bars[1 + 2 * ST]), smem_u32(&bars[1 + 3 * ST])};
    const uint32_t vland = smem_u32(&bars[1 + 4 * ST]); /* vland + 8·s: a scrubbed stage's TMA landed */
    const uint32_t logdone = smem_u32(&bars[1 + 5 * ST]); /* rowbad written */

    const int tid = threadIdx.x, wg = tid >> 7;

    /* Heaviest (last, under causal masks) query blocks first. */
    const int vb = blockIdx.x;
    const int mb = nM - 1 - vb % nM;
    const int bh = vb / nM;
    const int h = bh % p.Hq;
    const int b = bh / p.Hq;
    const int hk = h / p.group;
    const int m0 = mb * BM;
    /* RAG (packed varlen batches, fcc_fwd_wgmma_supports): b is the
     * sequence; its rows and keys start at rows q_row / k_row of the packed
     * [1, T, H, D] tensors, and its mask and score parts are its own
     * (bottom-right aligned per sequence). The dense instantiation reads
     * the problem's, as before. */
    const fc_seq sq = fcc_seq_of<RAG>(p.a, b);
    const int Sq = RAG ? (int)sq.Sq : p.Sq, Sk = RAG ? (int)sq.Sk : p.Sk;
    if (RAG && m0 >= Sq) return; /* past this sequence's rows (the whole CTA, before any barrier) */
    const fcc_seq_parts<RAG> sp(p, sq);
    const fc_mask &mask = sp.mask(p);
    const int qr0 = RAG ? (int)sq.q_row : 0, kr0 = RAG ? (int)sq.k_row : 0; /* row origins (int32: supports()) */
    const int qb = RAG ? (int)sq.qb : b, kb = RAG ? (int)sq.kb : b;         /* batch coordinates of q/o, k/v */
    const int mlast = min(m0 + BM, Sq) - 1;

    const KeyTiles kt = key_tiles<BN>(mask, m0, mlast);
    const Vis cfirst = vis_of(mask, m0, Sq), clast = vis_of(mask, mlast, Sq);

    if (tid == 0) {
        mbar_init(barQ, 1);
        for (int s = 0; s < ST; ++s) {
            mbar_init(rk.full + 8 * s, 1);
            mbar_init(rk.empty + 8 * s, 128 * NC); /* every consumer thread arrives */
            mbar_init(rv.full + 8 * s, 1);
            mbar_init(rv.empty + 8 * s, 128 * NC);
            mbar_init(vland + 8 * s, 1);
        }
        mbar_init(logdone, 128); /* every producer thread */
        mbar_fence_init();
    }
    __syncthreads();

    if (wg == 0) {
        /* ------------------------------------------------ producer */
        setmaxnreg_dec<K::REG_P>();
        /* bit i: CTA row m0 + tid + 128i sees a key whose value held NaN/Inf */
        uint32_t saw = 0;
        if (kt.first < kt.b1) {
            /* Thread 0 issues every load; the whole warpgroup scrubs the V
             * stages that need it (scrub_tile) once they have landed. */
            if (tid == 0) {
                mbar_expect_tx(barQ, K::Q_BYTES);
#pragma unroll
                for (int db = 0; db < NDB; ++db) tma_load_4d(sQ + db * BM * 128, &tq, barQ, db * 64, qr0 + m0, h, qb);
            }
            /* Tile `tile` into stage it % ST of a ring, completing on bar: by
             * thread 0, or for paged caches by warp 0 (nis threads, below). */
            const bool paged = RAG && p.a.block_table != nullptr;
            const int nis = paged ? 32 : 1; /* the threads that issue a tile's copies */
            /* Paged: boxes of pr = wg_page_box rows (the maps' box; pr a multiple
             * of 8, so boxes laid end to end keep the 128B swizzle), each inside
             * one page. A box past the sequence's last key reads its last page
             * (any rows: they are masked and the tile scrubbed). Lane j of warp 0
             * issues box j (BN / pr ≤ 8 boxes), its table entry loaded by that
             * lane: one load latency a tile, not one a box (one thread walking
             * the boxes, each entry loaded just before its copy, ran pages of 16
             * at 216 TFLOP/s against 484 for pages of 256; all of a tile's entries
             * loaded first by that thread spilled in the 40-register producer:
             * benchmarks/NOTES.md). The entry of K(t) is loaded before the wait
             * for its stage (its latency under the wait), and V(t) reuses it. */
            const int ps = paged ? (int)p.a.page_size : 1, pr = paged ? wg_page_box(ps, BN) : BN;
            const int plast = paged ? (Sk - 1) / ps : 0;
            auto page_entry = [&](int tile) -> int {
                int pg = 0;
                if constexpr (RAG) {
                    const int j = tid * pr, pi = min((tile * BN + j) / ps, plast);
                    if (paged && j < BN)
                        pg = (int)fc_attn_page(&p.a, b, pi);
                }
                return pg;
            };
            /* A tile's pages as the copies take them: pg this lane's page, run
             * (warp-uniform) when the tile's pages are consecutive in the pool
             * and all inside the sequence (runs != 0: whole pages dividing the
             * tile) — one box of BN / ps pages (maps tkr / tvr) from page pg0
             * instead of BN / ps boxes: the same rows in the same places. */
            struct Pages {
                int pg, pg0;
                bool run;
            };
            auto page_vote = [&](int pg, int tile) -> Pages {
                Pages s = {pg, 0, false};
                if constexpr (RAG) {
                    if (paged && runs) {
                        const int j = tid * pr;
                        s.pg0 = __shfl_sync(0xffffffffu, pg, 0);
                        s.run = __all_sync(0xffffffffu,
                                           j >= BN || (pg == s.pg0 + tid && (tile * BN + j) / ps <= plast));
                    }
                }
                return s;
            };
            auto issue = [&](uint32_t dst, const CUtensorMap *map, uint32_t bar, int it, int tile, const Pages &pgs) {
                if constexpr (RAG) {
                    if (paged) {
                        if (tid == 0) mbar_expect_tx(bar, K::KV_BYTES);
                        __syncwarp(); /* the expected bytes before any copy completes on bar */
                        if (pgs.run) {
                            if (tid == 0) {
                                const CUtensorMap *rmap = map == &tk ? &tkr : &tvr;
#pragma unroll
                                for (int db = 0; db < NDB; ++db)
                                    tma_load_4d(dst + (it % ST) * K::KV_BYTES + db * BN * 128, rmap, bar, db * 64, 0,
                                                hk, pgs.pg0);
                            }
                            return;
                        }
                        const int j = tid * pr, key = tile * BN + j;
                        if (j < BN) {
#pragma unroll
                            for (int db = 0; db < NDB; ++db)
                                tma_load_4d(dst + (it % ST) * K::KV_BYTES + db * BN * 128 + j * 128, map, bar, db * 64,
                                            key - (key / ps) * ps, hk, pgs.pg);
                        }
                        return;
                    }
                }
                mbar_expect_tx(bar, K::KV_BYTES);
#pragma unroll
                for (int db = 0; db < NDB; ++db)
                    tma_load_4d(dst + (it % ST) * K::KV_BYTES + db * BN * 128, map, bar, db * 64, kr0 + tile * BN, hk, kb);
            };
            /* In the order the consumers use them: K(t) then V(t − 1). */
            Pages pk = {0, 0, false}, pv = pk; /* K(t)'s pages; V(t − 1)'s (K(t − 1)'s) */
            auto load_k = [&](int it, int tile) {
                if (tid >= nis) return;
                const int pg = page_entry(tile); /* in flight during the wait */
                rk.wait_empty(it);
                pk = page_vote(pg, tile);
                issue(sK, &tk, rk.full + 8 * (it % ST), it, tile, pk);
            };
            const Vis myrow = vis_of(mask, m0 + tid, Sq), myrow2 = vis_of(mask, m0 + 128 + tid, Sq);
            const bool two = BM > 128 && 128 + tid < BM; /* this thread also holds row m0 + 128 + tid */
            uint32_t vpar = 0; /* bit s: parity of vland[s]'s next phase (one per scrubbed use) */
            auto load_v = [&](int it, int tile) {
                if constexpr (SCRUB) {
                    /* RAG: also the tile holding the sequence's end, whose keys past Sk
                     * are the next sequence's rows (a dense tile reads zeros there) */
                    if (scrub_tile<BN>(cfirst, clast, tile, Sk) || (RAG && (tile + 1) * BN > Sk)) {
                        const int st = it % ST;
                        if (tid < nis) {
                            rv.wait_empty(it);
                            issue(sV, &tv, vland + 8 * st, it, tile, pv);
                        }
                        saw |= scrub_stage<T, K>(sV + st * K::KV_BYTES, vland + 8 * st, (vpar >> st) & 1u,
                                                 rv.full + 8 * st, tid, vbad, myrow, two, myrow2, tile * BN);
                        vpar ^= 1u << st;
                        return;
                    }
                }
                if (tid >= nis) return;
                rv.wait_empty(it);
                issue(sV, &tv, rv.full + 8 * (it % ST), it, tile, pv);
            };
            int it = 0, prev = -1;
            for (int tile = kt.first;; prev = tile, tile = kt.next(tile), ++it) { /* one call site of each */
                const bool more = tile < kt.b1;
                if (more) load_k(it, tile);
                if (it > 0) load_v(it - 1, prev);
                if (!more) break;
                pv = pk;
            }
        }
        if (SCRUB) {
#pragma unroll
            for (int i = 0; i < (BM + 127) / 128; ++i) {
                const uint32_t m = __ballot_sync(0xffffffffu, (saw >> i) & 1u);
                if ((tid & 31) == 0 && 128 * i + tid < BM) rowbad[4 * i + (tid >> 5)] = m;
            }
            mbar_arrive(logdone);
        }
    } else {
        /* ------------------------------------------------ consumers */
        setmaxnreg_inc<K::REG_C>();
        const int cw = wg - 1;                  /* this warpgroup's 64 rows: r0 .. r0+63 */
        const int warp = (tid >> 5) & 3, lane = tid & 31;
        const int g = lane >> 2, t4 = lane & 3;
        const int r0 = m0 + cw * 64;
        const int row0 = r0 + warp * 16 + g;    /* this thread's rows: row0, row0 + 8 */
        const fc_attn &a = p.a;
        /* exp2 argument per unit of the fragment's scores, and the row max's
         * factor to natural units (attn_fwd_tile.cuh, "two score paths"). */
        float mul = p.sl2e, mul_ln = p.scale;

        const Vis wfirst = vis_of(mask, r0, Sq), wlast = vis_of(mask, r0 + 63, Sq);
        const RowVis rvis = row_vis(mask, row0, Sq);
        fc_score_modf mod = {0.f, 0.f, 0.f};
        fc_score_foldf fold = {0.f, 0.f, 0.f, 0};
        if (MOD) {
            mod = fcc_score_mod_l2(p, b, h);
            fold = fc_score_fold(&mod);
            score_factors(mod, &mul, &mul_ln);
        }
        /* FIXM: the fixed running max in log2 units (mu_fix) and in the
         * fragment's units (m_i, for row_finish); P in T's range. */
        float mu_fix = 0.f;
        if constexpr (FIXM) {
            static_assert(MOD, "a fixed max is the softcap's");
            mu_fix = wg_fixed_max<T>(mod.cap);
        }

        float acc_o[DV / 8][4]; /* wgmma accumulator layout = the m16n8 C layout per warp */
#pragma unroll
        for (int j = 0; j < DV / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_o[j][e] = 0.f;
        float m_i[2] = {FIXM ? mu_fix / mul : -INFINITY, FIXM ? mu_fix / mul : -INFINITY}, l_i[2] = {0.f, 0.f};
        float acc_s[BN / 8][4]; /* written by the first k16 step of each S (scale-d = 0) */
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_s[j][e] = 0.f; /* once: defined for the "+f" operands */
        uint32_t pa[BN / 16][4]; /* P of the previous tile, the A operand of O += P·V */
        const uint32_t qrow = sQ + cw * 64 * 128;

        /* Scores of tile `tile` (in acc_s) → P in acc_s, online max/sum, α. */
        auto softmax_step = [&](int tile, float (&alpha)[2]) {
            const int n0 = tile * BN;
            if (MOD) {
                float dist0[2];
                tile_dist0(sp.score(p), row0, n0 + 2 * t4, dist0);
                tile_score_mod(acc_s, mod, fold, dist0);
            }
            /* Per-element masks only where some row of the warpgroup sees part of the tile. */
            if (!tile_full<BN>(wfirst, wlast, n0, Sk)) tile_mask(acc_s, rvis, n0 + 2 * t4);
            if constexpr (FIXM) {
                tile_softmax_fixed(acc_s, l_i, mul, mu_fix);
                alpha[0] = alpha[1] = 1.f;
            } else {
                tile_softmax(acc_s, m_i, l_i, alpha, mul);
            }
        };

        /* Software pipeline over the key tiles (FA3's intra-warpgroup
         * overlap): iteration it issues S(it) and O += P(it − 1)·V(it − 1),
         * then runs tile it's softmax while the second product is in flight;
         * O is rescaled once that product has landed. */
        if (kt.first < kt.b1) {
            mbar_wait(barQ, 0);
            if (cw == NC - 1) pass_turn<NC>(cw); /* warpgroup 0 issues first */
            float alpha[2];
            /* tile 0: S only */
            int tile = kt.first, it = 0;
            rk.wait_full(0);
            wait_turn(cw);
            issue_s<T, K>(acc_s, qrow, sK);
            pass_turn<NC>(cw);
            wg_wait<0>();
            acc_fence(acc_s);
            rk.release(0);
            softmax_step(tile, alpha);
            tile_pack_p<T>(acc_s, pa); /* O = 0: no rescale */
            for (tile = kt.next(tile), it = 1; tile < kt.b1; tile = kt.next(tile), ++it) {
                rk.wait_full(it);
                rv.wait_full(it - 1);
                wait_turn(cw);
                issue_s<T, K>(acc_s, qrow, sK + (it % ST) * K::KV_BYTES);
                issue_pv<T, K>(acc_o, pa, sV + ((it - 1) % ST) * K::KV_BYTES);
                pass_turn<NC>(cw);
                wg_wait<1>(); /* S(it) landed; P·V in flight */
                acc_fence(acc_s);
                rk.release(it);
                softmax_step(tile, alpha);
                wg_wait<0>();
                acc_fence(acc_o);
                acc_fence(pa); /* pa's registers stay P(it − 1) until the product has read them */
                rv.release(it - 1);
                if constexpr (!FIXM) tile_rescale(acc_o, alpha);
                tile_pack_p<T>(acc_s, pa);
            }
            /* the last tile's P·V */
            rv.wait_full(it - 1);
            wait_turn(cw);
            issue_pv<T, K>(acc_o, pa, sV + ((it - 1) % ST) * K::KV_BYTES);
            if (cw != NC - 1) pass_turn<NC>(cw); /* a pass from the last warpgroup here would have no taker */
            wg_wait<0>();
            acc_fence(acc_o);
            rv.release(it - 1);
        }

        /* Epilogue: O·factor and L (row_finish, with the sink logit). O goes
         * out through this warpgroup's Q rows in smem (its last S has been
         * read) by TMA stores where o's layout allows (otma), else straight
         * from registers in 4-byte pairs (32 scattered 4-byte stores a
         * thread: at 1k keys the epilogue took as long as a key tile). */
        float f[2], L[2];
        row_finish(m_i, l_i, mul_ln, a.sink_logits != nullptr, (float)fc_attn_sink(&a, h), f, L);
        if (SCRUB) {
            mbar_wait(logdone, 0);
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int r = row0 + 8 * hf - m0;
                if ((rowbad[r >> 5] >> (r & 31)) & 1u) f[hf] = __int_as_float(0x7fc00000); /* O = NaN: saw NaN/Inf */
            }
        }
        float *lse = static_cast<float *>(a.lse);
        const int64_t lse0 = (int64_t)qb * a.slse[0] + (int64_t)h * a.slse[1] + (int64_t)qr0 * a.slse[2];
        /* RAG: TMA stores only of a warpgroup's rows wholly inside the sequence
         * (a box past its end would write the next sequence's rows) */
        if (otma && (!RAG || r0 + 64 <= Sq)) {
            /* The box layout of the Q load (128B swizzle: the 16-byte chunk
             * c of row r at chunk c ^ (r & 7)); bank-conflict free: a warp's
             * 8 rows × 4 pairs of one j cover the 32 banks. */
            const uint32_t so = sQ + cw * 64 * 128;
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int r = warp * 16 + g + 8 * hf;
#pragma unroll
                for (int j = 0; j < DV / 8; ++j)
                    st_shared_u32(so + sw128_off(r, j * 8 + 2 * t4, BM),
                                  Ops<T>::pack(acc_o[j][2 * hf] * f[hf], acc_o[j][2 * hf + 1] * f[hf]));
            }
            fence_proxy_async_smem();
            asm volatile("bar.sync %0, 128;\n" ::"r"(8 + cw) : "memory"); /* this warpgroup's rows written */
            if ((tid & 127) == 0 && r0 < Sq) {
#pragma unroll
                for (int db = 0; db < (DV + 63) / 64; ++db)
                    if (db * 64 < p.D) tma_store_4d(&to, so + db * BM * 128, db * 64, qr0 + r0, h, qb); /* rows ≥ Sq, columns ≥ D clipped */
                bulk_commit();
                bulk_wait_read();
            }
            if (lse && t4 == 0)
#pragma unroll
                for (int hf = 0; hf < 2; ++hf)
                    if (row0 + 8 * hf < Sq) lse[lse0 + (int64_t)(row0 + 8 * hf) * a.slse[2]] = L[hf];
        } else {
            T *Ob = static_cast<T *>(a.o) + (int64_t)qb * a.so[0] + (int64_t)qr0 * a.so[1] + (int64_t)h * a.so[2];
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int row = row0 + 8 * hf;
                if (row < Sq) {
                    if (lse && t4 == 0) lse[lse0 + (int64_t)row * a.slse[2]] = L[hf];
                    T *orow = Ob + (int64_t)row * a.so[1];
#pragma unroll
                    for (int j = 0; j < DV / 8; ++j)
                        if (j * 8 < p.D) /* D % 8 == 0: a pair is wholly inside or outside */
                            *reinterpret_cast<uint32_t *>(orow + j * 8 + 2 * t4) =
                                Ops<T>::pack(acc_o[j][2 * hf] * f[hf], acc_o[j][2 * hf + 1] * f[hf]);
                }
            }
        }
    }
#endif
}

/* ------------------------------------------------------------ host */
/* Does some row miss some key (hi and lo are non-decreasing in the row:
 * row 0 has the smallest hi, the last row the largest lo; sink tokens that
 * reach lo close the gap)? */
static bool rows_differ(const fcc_attn &p) {
    int64_t se0, lo0, hi0, sel, lol, hil;
    fc_visible_keys(&p.mask, 0, &se0, &lo0, &hi0);
    fc_visible_keys(&p.mask, p.Sq - 1, &sel, &lol, &hil);
    return !(hi0 == p.Sk && (lol == 0 || sel == lol));
}
/* Consumer warpgroups at HD = 64 (WgTraits): 3 (192 query rows a CTA)
 * unless some row misses some key and the rows are short (Sq < 4096), or
 * the window is narrow (≤ 256 keys a row: a CTA's keys are its rows plus
 * the window, so 192 rows compute ~(192 + W) / (128 + W) the keys of 128
 * for the same useful work). Measured at W = 128, GQA 64/8, D = 64, S = 8k
 * with sink logits (H100, benchmarks/NOTES.md, thirty-first session):
 * forward 59.0 / 64.0 → 68.5 / 66.1 TFLOP/s with 2 instead of 3. */
static int wg_nc(const fcc_attn &p) {
    if (!rows_differ(p)) return 3;
    const int64_t wl = p.mask.wl, wr = p.mask.wr; /* −1: open */
    const bool narrow = wl >= 0 && wr >= 0 && wl <= 256 && wr <= 256 && wl + wr + 1 <= 256;
    return p.Sq < 4096 || narrow ? 2 : 3;
}
/* 176-key tiles at D in (64, 128] (WgTraits' BN_): where every row sees
 * every key (no masked tile, nothing to scrub), the rows are long and the
 * device has the shared memory. Measured (benchmarks/NOTES.md, nineteenth
 * session): the cost of 128 keys of a tile 1.86 → 1.74 µs a wave, the
 * per-CTA cost 2.2 → 3.9 µs (the pipeline's fill and drain hold more keys,
 * the last tile is partial more often) — a loss below ~2k keys. */
using WgWide = WgTraits<128, 2, 128, 176>;
constexpr int WG_WIDE_MIN_SK = 4096;
static bool wg_wide(const fcc_attn &p) {
    return p.a.D > 64 && p.a.D <= 128 && p.Sk >= WG_WIDE_MIN_SK && !rows_differ(p) &&
           WgWide::SMEM <= p.dev.smem_optin;
}

template <typename T, class K, bool RAG = false>
static flashc_status launch(const fcc_attn &p, const CUtensorMap &tq, const CUtensorMap &tk,
                            const CUtensorMap &tv, const CUtensorMap *to, const CUtensorMap *runs) {
    const int nM = (p.Sq + K::BM - 1) / K::BM; /* RAG: Sq is the longest sequence's */
    const unsigned grid = (unsigned)((int64_t)nM * p.Hq * p.a.B); /* ≤ INT_MAX: supports() */
    const bool mod = !p.plain_score || !p.scale_pos;
    const bool fixm = fc_score_mode(&p.score) == FC_SCORE_CAP &&
                      wg_fixed_max<T>((float)(FC_LOG2E * p.score.softcap)) > -INFINITY;
    auto kern = mod ? attn_fwd_wgmma_kernel<T, K, true, false> : attn_fwd_wgmma_kernel<T, K, false, false>;
    if constexpr (RAG) {
        /* Always SCRUB: a tile holding a sequence's last key holds the next
         * sequence's first ones (or a cache's garbage past its length). */
        static_assert(K::BN <= 128, "RAG: tiles the producer can scrub");
        kern = fixm  ? attn_fwd_wgmma_kernel<T, K, true, true, true, true>
               : mod ? attn_fwd_wgmma_kernel<T, K, true, true, false, true>
                     : attn_fwd_wgmma_kernel<T, K, false, true, false, true>;
    } else {
        /* SCRUB (see the top): only where some row misses some key; never
         * with 176-key tiles (wg_wide) */
        constexpr bool CAN_SCRUB = K::BN <= 128;
        const bool scrub = CAN_SCRUB && rows_differ(p);
        if constexpr (CAN_SCRUB)
            if (scrub) kern = mod ? attn_fwd_wgmma_kernel<T, K, true, true> : attn_fwd_wgmma_kernel<T, K, false, true>;
        /* A softcap alone whose logits fit P's range: rows with a fixed max. */
        if (fixm) {
            kern = attn_fwd_wgmma_kernel<T, K, true, false, true>;
            if constexpr (CAN_SCRUB)
                if (scrub) kern = attn_fwd_wgmma_kernel<T, K, true, true, true>;
        }
    }
    FCC_TRY(fcc_set_smem((const void *)kern, K::SMEM, "attn_fwd_wgmma"));
    kern<<<grid, K::NT, K::SMEM, fcc_stream(p.a.stream)>>>(tq, tk, tv, to ? *to : tq, runs ? runs[0] : tk,
                                                             runs ? runs[1] : tv, p, nM, to ? 1 : 0, runs ? 1 : 0);
    FCC_CHECK_LAUNCH("attn_fwd_wgmma_kernel");
    return FLASHC_OK;
}

/* The traits of D: HD the padded width (64, 128, 192, 256), D in (64, 96]
 * at its own product width (DV 80 or 96). */
template <typename T>
static flashc_status launch_d(const fcc_attn &p, bool nc3, bool wide, const CUtensorMap &tq, const CUtensorMap &tk,
                              const CUtensorMap &tv, const CUtensorMap *to, const CUtensorMap *runs) {
    const int D = p.a.D;
    if (fc_attn_is_ragged(&p.a)) {
        /* Ragged: two consumer warpgroups, 128-key tiles, D in (64, 128] at
         * HD 128's full width (fewer instantiations; the maps' zero fill
         * pads) */
        if (D <= 64) return launch<T, WgTraits<64>, true>(p, tq, tk, tv, to, runs);
        if (D <= 128) return launch<T, WgTraits<128>, true>(p, tq, tk, tv, to, runs);
        if (D <= 192) return launch<T, WgTraits<192>, true>(p, tq, tk, tv, to, runs);
        return launch<T, WgTraits<256>, true>(p, tq, tk, tv, to, runs);
    }
    if (D <= 64) return nc3 ? launch<T, WgTraits<64, 3>>(p, tq, tk, tv, to, nullptr) : launch<T, WgTraits<64>>(p, tq, tk, tv, to, nullptr);
    if (D <= 80)
        return wide ? launch<T, WgTraits<128, 2, 80, 176>>(p, tq, tk, tv, to, nullptr) : launch<T, WgTraits<128, 2, 80>>(p, tq, tk, tv, to, nullptr);
    if (D <= 96)
        return wide ? launch<T, WgTraits<128, 2, 96, 176>>(p, tq, tk, tv, to, nullptr) : launch<T, WgTraits<128, 2, 96>>(p, tq, tk, tv, to, nullptr);
    if (D <= 128) return wide ? launch<T, WgWide>(p, tq, tk, tv, to, nullptr) : launch<T, WgTraits<128>>(p, tq, tk, tv, to, nullptr);
    if (D <= 192) return launch<T, WgTraits<192>>(p, tq, tk, tv, to, nullptr);
    return launch<T, WgTraits<256>>(p, tq, tk, tv, to, nullptr);
}

} // namespace fcwg

bool fcc_fwd_wgmma_supports(const fcc_attn &p) {
    using namespace fcwg;
    const fc_attn &a = p.a;
    if (p.dev.cc != 90) return false; /* sm_90a code runs there and nowhere else */
    /* Ragged: packed sequences (cu_q, cu_k), KV caches with per-sequence
     * lengths (and cache_batch_idx), and paged caches whose page size is a
     * multiple of 16 (a tile is whole boxes, each inside one page:
     * wg_page_box). */
    if (a.block_table && a.page_size % 16 != 0) return false;
    if (a.dtype != FLASHC_F16 && a.dtype != FLASHC_BF16) return false;
    /* D padded to HD by the maps' zero fill: whole 16-byte chunks (vec16 below). */
    if (a.D < 8 || a.D > 256 || a.D % 8 != 0) return false;
    /* Positions are int32; no tensor map of extent 0; TMA reads 16-byte
     * aligned rows of q/k/v (vec16); o is written in 4-byte pairs. */
    if (!p.fits_int32 || a.Sk == 0 || !p.vec16 || !p.out_pairs) return false;
    const MapExtents ex = map_extents(a);
    const int64_t qe0 = ex.q0, qe1 = ex.q1, ke0 = ex.k0, ke1 = ex.k1;
    /* (row coordinates: a sequence's origin plus a block's rows, in int32) */
    if (qe0 > INT_MAX || ke0 > INT_MAX || qe1 >= ((int64_t)1 << 30) || ke1 >= ((int64_t)1 << 30) || qe1 == 0 ||
        ke1 == 0)
        return false;
    cuuint64_t dims[4], strides[3];
    if (!map_shape(qe0, qe1, a.Hq, a.D, a.sq, dims, strides) ||
        !map_shape(ke0, ke1, a.Hkv, a.D, a.sk, dims, strides) ||
        !map_shape(ke0, ke1, a.Hkv, a.D, a.sv, dims, strides))
        return false;
    if ((a.Sq + WgTraits<128>::BM - 1) / WgTraits<128>::BM * a.Hq * a.B > INT_MAX) return false; /* grid (smallest BM) */
    const int smem = a.D <= 64    ? (WgTraits<64, 3>::SMEM > WgTraits<64>::SMEM ? WgTraits<64, 3>::SMEM : WgTraits<64>::SMEM)
                     : a.D <= 128 ? WgTraits<128>::SMEM
                     : a.D <= 192 ? WgTraits<192>::SMEM
                                  : WgTraits<256>::SMEM;
    return smem <= p.dev.smem_optin && encode_fn() != nullptr;
}

flashc_status fcc_fwd_wgmma_run(const fcc_attn &p) {
    using namespace fcwg;
    const fc_attn &a = p.a;
    const CUtensorMapDataType dt =
        a.dtype == FLASHC_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    const EncodeTiledFn enc = encode_fn();
    CUtensorMap tq, tk, tv;
    const bool rag = fc_attn_is_ragged(&a);
    const bool wide = !rag && wg_wide(p);
    const int bn = a.D > 192 ? WgTraits<256>::BN : a.D > 128 ? WgTraits<192>::BN
                   : wide      ? WgWide::BN
                               : WgTraits<128>::BN; /* K/V box rows */
    const bool nc3 = !rag && a.D <= 64 && wg_nc(p) == 3;
    const int bm = nc3 ? WgTraits<64, 3>::BM : WgTraits<128>::BM; /* Q box rows */
    static_assert(WgTraits<64>::BM == WgTraits<128>::BM && WgTraits<128>::BM == WgTraits<256>::BM, "one BM at NC 2");
    const MapExtents ex = map_extents(a);
    const int64_t qe0 = ex.q0, qe1 = ex.q1, ke0 = ex.k0, ke1 = ex.k1;
    const int kbox = a.block_table ? wg_page_box(a.page_size, bn) : bn; /* paged: boxes inside a page */
    if (!enc || !make_map(&tq, enc, dt, a.q, qe0, qe1, a.Hq, a.D, a.sq, bm) ||
        !make_map(&tk, enc, dt, a.k, ke0, ke1, a.Hkv, a.D, a.sk, kbox) ||
        !make_map(&tv, enc, dt, a.v, ke0, ke1, a.Hkv, a.D, a.sv, kbox))
        return fcc_fwd_mma_run(p); /* the driver refused a map supports() accepted: same problem, mma.sync */
    /* O by TMA stores where its base and strides allow (64-row boxes, one
     * consumer warpgroup's rows); else 4-byte stores from registers. */
    CUtensorMap to;
    const bool otma = ((uintptr_t)a.o & 15u) == 0 && make_map(&to, enc, dt, a.o, qe0, qe1, a.Hq, a.D, a.so, 64);
    /* Paged with pages that divide the key tile: maps of BN / page_size pages a box,
     * for the tiles whose pages are consecutive in the pool (the kernel checks). */
    CUtensorMap runs[2];
    const bool use_runs = rag && a.block_table && kbox == a.page_size && kbox < bn &&
                          make_map(&runs[0], enc, dt, a.k, ke0, ke1, a.Hkv, a.D, a.sk, kbox,
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B, bn / kbox) &&
                          make_map(&runs[1], enc, dt, a.v, ke0, ke1, a.Hkv, a.D, a.sv, kbox,
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B, bn / kbox);
    const CUtensorMap *rp = use_runs ? runs : nullptr;
    if (a.dtype == FLASHC_BF16) return launch_d<__nv_bfloat16>(p, nc3, wide, tq, tk, tv, otma ? &to : nullptr, rp);
    return launch_d<__half>(p, nc3, wide, tq, tk, tv, otma ? &to : nullptr, rp);
}
