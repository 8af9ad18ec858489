/*
 * attn_bwd_wgmma.cu — Hopper (sm_90a) attention backward for F16/BF16,
 * D ≤ 256 (zero-padded to HD = 64, 128, 192 or 256 by the tensor maps;
 * D in (64, 96]: Sᵀ, dPᵀ, dV and dK at width 96, KvTraits::DV; HD > 128:
 * the wide kernel, section "wide heads" below): warpgroup MMA
 * (wgmma) fed by TMA, warp-specialised like the forward (attn_fwd_wgmma.cu).
 * Compiled only for sm_90a; the plan (attn_dispatch.cu) picks it when
 * fcc_bwd_wgmma_supports() holds (compute capability 9.0 among its
 * conditions), else the mma.sync backward (attn_bwd_tc.cu).
 *
 *   dout, q, o [B, Sq, Hq, D]; k, v [B, Sk, Hkv, D]; lse [B, Hq, Sq] f32
 *   → dq like q; dk, dv like k; dsinks [Hq] f32
 *
 * The mathematics is attn_bwd_tc.cu's (the element steps are shared:
 * attn_bwd_tile.cuh), as are the two row passes before the kernel
 * (attn_generic_bwd.cu: Δ and L per row, the dsinks tree).
 *
 * One kernel computes dK, dV and dQ: one CTA per (key block of 128, kv
 * head, batch), 3 warpgroups.
 *   WG0 (producer, setmaxnreg 40): thread 0 loads the K and V blocks once,
 *     then per tile (query head of the GQA group × 64 query rows on the
 *     global 64-row grid, the tiles holding a row that sees the block:
 *     fc_key_block_rows) Q and dO by TMA; warp 1 loads L·log2e and Δ of the
 *     tile's rows; both into a 2- or 3-stage ring. Thread 64 drains the dQ
 *     tiles (below).
 *   WG1, WG2 (consumers, 64 keys each): Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ
 *     (m64n64k16, operands in smem), Pᵀ and dSᵀ in registers (dkdv_p,
 *     dkdv_ds; Pᵀ while dPᵀ is in flight), then at once dV += Pᵀ·dO,
 *     dK += dSᵀ·Q (m64n64k16 per 64 columns of D, Pᵀ/dSᵀ as the register A
 *     operand, dO/Q read transposed) and dQ_tile = dS·K: both warpgroups
 *     write their dSᵀ (bf16/f16) into one [128 keys][64 rows] smem tile,
 *     and a m64n64k16 product with both operands transposed (dS and the
 *     K block) gives 64 columns of dQ per warpgroup over all 128 keys
 *     (HD = 64: m64n32, 32 columns each). The fp32 tiles go to a smem ring
 *     (2 tiles; 4 at HD = 64, KvTraits::NDQ) while [dV, dK] runs; the drain thread adds them to an fp32
 *     [B, Hq, Sq(64), HD] buffer with bulk reductions
 *     (cp.reduce.async.bulk .add.f32), one after the other; a last kernel
 *     converts the buffer to dq — in the deterministic mode (dense rows, no
 *     Split) as a programmatic dependent that converts each tile once its
 *     counter (below) is complete, on the SMs the dK/dV kernel's last wave
 *     leaves idle (bwd_dq_convert_tiles).
 *   Deterministic (default): the key blocks add to each dQ tile in a fixed
 *     order, kept by a counter per (b, h, tile) in global memory: the drain
 *     waits until the count equals its place (key_block_ordinal), adds
 *     (place 0 under ORD_UP/DOWN: copies — the buffer is not zeroed then,
 *     dq_copy_first), and
 *     increments it (a release reduction once the bulk operation is done;
 *     the smem buffer is handed back as soon as it has been read).
 *     The order (ORD_*, below): decreasing key blocks, launched in that
 *     order, where some row misses some key (ORD_DOWN); where every row
 *     sees every key, the order they come in if a head's blocks fit the
 *     device at once (ORD_ROT), else increasing (ORD_UP). Measured price
 *     against the unordered variant (H200, 4k): 7–9 % of the kernel at
 *     HD = 128, 10–12 % at HD = 192/256 causal (benchmarks/NOTES.md).
 *     deterministic = 0: no counters (the order the CTAs come in).
 *   Heavy key block (Split): the sink keys' block, which every row sees
 *     under a sliding window, has its tile walk cut into chunks run by
 *     extra CTAs (partial dK/dV added in chunk order by bwd_kv_combine).
 *   dK·scale and dV are stored from registers at the end. Rows past Sq read
 *     zeros (TMA fill) and get L = +inf: P = dS = 0 there; rows of a tile
 *     that see no key of the block get P = dS = 0 by selection.
 * Masked NaN/Inf: see KSCRUB in the kernel (the K block is scrubbed once,
 * rows that see a scrubbed key get dQ = NaN, that key NaN dK/dV).
 * Packed varlen batches (cu_q, cu_k): the RAG instances, one CTA per (key
 * block, kv head, sequence) of the longest sequence's blocks (those past a
 * sequence's keys return at once), each sequence through tensor maps of its
 * own rows (section "packed sequences": loads past its end read zeros, dK/dV
 * stores clip there), its own mask and score parts, L/Δ in the packed row
 * buffers, dQ tiles in a buffer with no tile shared by two sequences, and
 * bwd_dq_convert_rag back to the packed dq; always SCRUB and ORD_DOWN, no
 * Split.
 * The score modifiers (MOD = the variant is not plain) run the same steps
 * as the mma.sync kernel (attn_bwd_tile.cuh).
 */
#include "attn_bwd_tile.cuh"
#include "attn_wgmma.cuh"

#include <algorithm>
#include <type_traits>
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
template <typename T, int KD, int NJ>
__device__ __forceinline__ void issue_abt(float (&acc)[NJ][4], uint32_t a, int astride, uint32_t bsm, int bstride) {
    static_assert(NJ == 8, "m64n64");
    wg_fence();
    const uint64_t da0 = sw128_desc(a, 16, 1024), db0 = sw128_desc(bsm, 16, 1024);
#pragma unroll
    for (int kk = 0; kk < KD / 16; ++kk) {
        const uint32_t koff = (kk & 3) * 32; /* k16 step inside the 128-byte row */
        const uint64_t da = desc_add(da0, (kk >> 2) * astride + koff);
        const uint64_t db = desc_add(db0, (kk >> 2) * bstride + koff);
        WgOps<T>::ss_n64(&acc[0][0], da, db, kk > 0 ? 1 : 0); /* kk = 0 overwrites */
    }
    wg_commit();
}

/* acc (m64 × HD) += A·B: A = KT k16 register fragments, B = the [k rows][HD]
 * tile at bsm (R rows per column block; d contiguous → transposed). Issued,
 * not committed. */
template <typename T, int HD, int KT, int R>
__device__ __forceinline__ void issue_ab(float (&acc)[HD / 8][4], const uint32_t (&a)[KT][4], uint32_t bsm) {
    const uint64_t b0 = sw128_desc(bsm, R * 128, 1024);
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) /* one m64n(HD)k16: column blocks R·128 bytes apart (the leading byte offset) */
        WgOps<T>::template rs_tb<HD>(&acc[0][0], a[kk], desc_add(b0, kk * 16 * 128));
}

/* The MN-major (transposed) descriptor of column col (a multiple of 32) of
 * a [R rows][HD] tile at t (64-column blocks of R × 128 B: the leading byte
 * offset, read by operands wider than one block), rows from k0. */
template <int R> __device__ __forceinline__ uint64_t mn_desc(uint32_t t, int col, int k0) {
    return sw128_desc(t + (col >> 6) * R * 128 + (col & 63) * 2 + k0 * 128, R * 128, 1024);
}

template <int NJ> __device__ __forceinline__ void zero_acc(float (&acc)[NJ][4]) {
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
}

/* ------------------------------------------------------ packed sequences */
/* Varlen batches (cu_q and cu_k; the RAG instances of both kernels): each
 * sequence gets its own six tensor maps, written on the device
 * by bwd_rag_maps before the kernel runs — copies of the packed axes' maps
 * ([D, T, H, 1]) whose base is the sequence's first row and whose row extent
 * is its length. A tile past a sequence's end then reads zeros and a dK/dV
 * box store clips there, exactly as at the end of a dense problem, so the
 * kernel runs each sequence as the dense B = 1 problem of its own lengths:
 * the next sequence's rows (NaN or not) never enter a product. */
enum { RM_Q, RM_DO, RM_K, RM_V, RM_DK, RM_DV, RM_N };

/* Thread x = b·RM_N + i: map i of sequence b into out[x] (64-byte aligned
 * global memory). The copy and the two replacements are generic-proxy writes
 * of one thread, in program order; the release fence pairs with the
 * kernel's acquire (rag_map_acquire) by each thread that issues copies on a
 * map. */
__global__ void __launch_bounds__(128) bwd_rag_maps(const __grid_constant__ CUtensorMap tq,
                                                    const __grid_constant__ CUtensorMap tdo,
                                                    const __grid_constant__ CUtensorMap tk,
                                                    const __grid_constant__ CUtensorMap tv,
                                                    const __grid_constant__ CUtensorMap tdk,
                                                    const __grid_constant__ CUtensorMap tdv,
                                                    const __grid_constant__ fcc_attn p, CUtensorMap *out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    const fc_attn &a = p.a;
    const int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (x >= a.B * RM_N) return;
    const int64_t b = x / RM_N;
    const int i = (int)(x % RM_N);
    const fc_seq s = fc_attn_seq(&a, b);
    const CUtensorMap *src = i == RM_Q ? &tq : i == RM_DO ? &tdo : i == RM_K ? &tk : i == RM_V ? &tv : i == RM_DK ? &tdk : &tdv;
    const void *base = i == RM_Q ? a.q : i == RM_DO ? a.dout : i == RM_K ? a.k : i == RM_V ? a.v : i == RM_DK ? a.dk : a.dv;
    const int64_t rs = i == RM_Q ? a.sq[1] : i == RM_DO ? a.sdo[1] : i == RM_K ? a.sk[1] : i == RM_V ? a.sv[1]
                       : i == RM_DK ? a.sdk[1] : a.sdv[1];
    const int64_t row0 = i <= RM_DO ? s.q_row : s.k_row, rows = i <= RM_DO ? s.Sq : s.Sk;
    uint4 *d = reinterpret_cast<uint4 *>(out + x);
    const uint4 *sm = reinterpret_cast<const uint4 *>(src);
#pragma unroll
    for (int c = 0; c < 8; ++c) d[c] = sm[c];
    const uint64_t ga = (uint64_t)__cvta_generic_to_global(d);
    const uint64_t addr = reinterpret_cast<uint64_t>(base) + (uint64_t)(row0 * rs * 2); /* 16-byte multiple: vec16 */
    const uint32_t ext = (uint32_t)(rows > 0 ? rows : 1); /* extent 0 is not a map; such a map is never used */
    asm volatile("tensormap.replace.tile.global_address.global.b1024.b64 [%0], %1;\n" ::"l"(ga), "l"(addr) : "memory");
    asm volatile("tensormap.replace.tile.global_dim.global.b1024.b32 [%0], 1, %1;\n" ::"l"(ga), "r"(ext) : "memory");
    asm volatile("fence.proxy.tensormap::generic.release.gpu;\n" ::: "memory");
#endif
}
/* Before a thread's first copy on a map bwd_rag_maps wrote. */
__device__ __forceinline__ void rag_map_acquire(const CUtensorMap *m) {
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(m) : "memory");
}

/* A CTA's view of its batch entry b (dense) or sequence b (RAG): the
 * lengths, mask and score parts (fcc_seq_parts: per-sequence alignment),
 * the maps its copies use and their batch coordinate cb, and its dQ tiles
 * (dq_tile). Dense: the problem's own, the kernel parameters' maps. */
template <bool RAG> struct SeqView {
    fc_seq s;
    fcc_seq_parts<RAG> parts;
    int Sq, Sk, cb;
    const CUtensorMap *mq, *mdo, *mk, *mv, *mdk, *mdv;
    __device__ __forceinline__ SeqView(const fcc_attn &p, int b, const CUtensorMap *rmaps, const CUtensorMap &tq,
                                       const CUtensorMap &tdo, const CUtensorMap &tk, const CUtensorMap &tv,
                                       const CUtensorMap &tdk, const CUtensorMap &tdv)
        : s(fcc_seq_of<RAG>(p.a, b)), parts(p, s) {
        Sq = RAG ? (int)s.Sq : p.Sq;
        Sk = RAG ? (int)s.Sk : p.Sk;
        cb = RAG ? 0 : b;
        const CUtensorMap *rm = RAG ? rmaps + (int64_t)b * RM_N : nullptr;
        mq = RAG ? rm + RM_Q : &tq, mdo = RAG ? rm + RM_DO : &tdo;
        mk = RAG ? rm + RM_K : &tk, mv = RAG ? rm + RM_V : &tv;
        mdk = RAG ? rm + RM_DK : &tdk, mdv = RAG ? rm + RM_DV : &tdv;
    }
    /* by the thread that issues the loads (stores), before the first */
    __device__ __forceinline__ void acquire_loads() const {
        if (RAG) rag_map_acquire(mq), rag_map_acquire(mdo), rag_map_acquire(mk), rag_map_acquire(mv);
    }
    __device__ __forceinline__ void acquire_stores() const {
        if (RAG) rag_map_acquire(mdk), rag_map_acquire(mdv);
    }
    /* The dQ tile (buffer tile and counter) of rows i0.. (i0 % 64 = 0) of
     * head h: dense [B, Hq, Sqp / 64]; packed sequences [Hq, Sqp / 64] with
     * sequence b's tiles from q_row / 64 + b on (no two sequences share one:
     * DqScratch). */
    __device__ __forceinline__ int64_t dq_tile(const fcc_attn &p, int b, int h, int i0, int Sqp) const {
        return RAG ? (int64_t)h * (Sqp / 64) + s.q_row / 64 + b + i0 / 64
                   : ((int64_t)b * p.Hq + h) * (Sqp / 64) + i0 / 64;
    }
    /* The row buffers' (L, Δ) row of query row 0, head h. */
    __device__ __forceinline__ int64_t rowbase(const fcc_attn &p, int b, int h) const {
        return fcc_rowbuf_at<RAG>(p.a, s, b, h, 0);
    }
};

/* ---------------------------------------------------------------- dK/dV */
/* How the CTAs' dQ tiles are added to the fp32 buffer (template DQM): */
enum { DQ_ORDERED = 1, /* in a fixed order of key blocks per tile: deterministic (the default) */
       DQ_ATOMIC = 2 };/* in whatever order the CTAs come (deterministic = 0) */

template <int HD_, int DQM_, int DV_ = HD_> struct KvTraits {
    static constexpr int HD = HD_;
    static constexpr int DQM = DQM_;
    /* DV: the width of Sᵀ's and dPᵀ's k16 steps and of dV, dK (D rounded up:
     * 96 for D in (64, 96] at HD 128, 0.75 of the padded products' work);
     * dQ = dS·K keeps HD (each warpgroup one 64-column block of the K tile;
     * a 48-column half would straddle the tile's swizzle atoms). */
    static constexpr int DV = DV_;
    static_assert(DV == HD || (HD == 128 && DV == 96), "DV: HD, or 96 at HD 128");
    static constexpr int BN = 128; /* keys per CTA: 64 per consumer warpgroup */
    static constexpr int BQ = 64;  /* query rows per tile (tiles on the 64-row grid) */
    /* stages of the Q/dO/L/Δ ring (2 at HD = 128: the dQ buffers take the room) */
    static constexpr int ST = HD == 128 ? 2 : 3;
    static constexpr int NDB = HD / 64;
    static constexpr int KV_BYTES = BN * HD * 2; /* the K or the V block */
    static constexpr int T_BYTES = BQ * HD * 2;  /* one Q or dO tile */
    static constexpr int DS_BYTES = BN * BQ * 2; /* one dSᵀ tile [128 keys][64 rows] */
    static constexpr int DQ_BYTES = BQ * HD * 4; /* one fp32 dQ tile [64 rows][HD]: each warpgroup
                                                    its HD / 2 columns over all 128 keys */
    /* dQ tiles staged for the drain: 4 at HD = 64 (the shared memory is there; a tile
     * takes half HD 128's time, and the ordered additions' turns come no faster), 2 at 128 */
    static constexpr int NDQ = HD == 64 ? 4 : 2;
    static constexpr int OFF_V = KV_BYTES;
    static constexpr int OFF_Q = 2 * KV_BYTES;
    static constexpr int OFF_DO = OFF_Q + ST * T_BYTES;
    static constexpr int OFF_DS = OFF_DO + ST * T_BYTES; /* [2] dSᵀ tiles */
    static constexpr int OFF_DQ = OFF_DS + 2 * DS_BYTES;   /* [NDQ] fp32 dQ tiles */
    static constexpr int OFF_LD = OFF_DQ + NDQ * DQ_BYTES; /* [ST][2][BQ] fp32: L·log2e, Δ */
    static constexpr int SMEM = OFF_LD + ST * 2 * BQ * 4 + 1024; /* + alignment slack */
    static_assert(HD == 64 || HD == 128, "HD 64 or 128");
    static_assert(SMEM <= 232448, "Hopper opt-in shared memory");
};

/* The fp32 dQ tiles of the fused kernel, [64 rows][HD] per tile: element
 * (r, c) at r·HD + (c + 8·(r mod 8)) mod HD, so that the consumers' float2
 * stores from the accumulator layout meet no bank conflict. The same layout
 * in the global buffer (the tile is added there by one bulk reduction);
 * the convert kernel undoes it. */
__host__ __device__ __forceinline__ int dq_col(int r, int c, int HD) { return (c + 8 * (r & 7)) & (HD - 1); }

/* Bulk asynchronous add (store: copy) of `bytes` fp32 from smem to global
 * (TMA engine), issued and committed; bulk_wait_read / bulk_wait_all below
 * wait for the source to be read / for the writes to be done. A tile's
 * first addition in the ordered (deterministic) mode is a copy where
 * dq_copy_first (below) holds: the buffer is not zeroed first. */
__device__ __forceinline__ void bulk_put_f32(float *dst, uint32_t src, uint32_t bytes, bool store) {
    if (store)
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(src), "r"(bytes)
                     : "memory");
    else
        asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
                     "r"(src), "r"(bytes)
                     : "memory");
    bulk_commit();
}
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

/* The order in which the key blocks add to a dQ tile (deterministic mode),
 * chosen on the host:
 *   ORD_UP:   increasing key blocks. A block then waits only on blocks of
 *             lower index (same kv head and batch), launched before it:
 *             safe whatever the grid. Used where a head's blocks outnumber
 *             the SMs (they could not all be resident at once).
 *   ORD_DOWN: decreasing: under causal and window masks a later key block
 *             reaches a given query tile after fewer tiles of its own, so
 *             that is the order they come in (measured: increasing order
 *             cost +85 % at D = 128 S = 4k causal). The blocks of a head
 *             are launched in decreasing order (block_id), so that a block
 *             waits only on blocks launched before it, as under ORD_UP:
 *             safe whatever the grid, and a block that starts late (a head
 *             cut by the end of a wave of CTAs) holds up no earlier one.
 *   ORD_ROT:  every row sees every key: block kb walks the tiles from tile
 *             kb on (rotated) and the blocks add in the order they come.
 *             It waits on blocks of higher index too, so it needs all of a
 *             head's blocks resident at once: nkb ≤ the SM count. */
enum { ORD_UP = 0, ORD_DOWN = 1, ORD_ROT = 2 };

/* How many key blocks of BN keys add to the dQ tile of query rows [i0, i1]
 * before block kb (ORD_UP / ORD_DOWN): the blocks those rows visit
 * (key_tiles: the visibility fc_key_block_rows gives the dK/dV CTAs, so
 * every block counted here adds to the tile exactly once). */
template <int BN>
__device__ __forceinline__ int key_block_ordinal(const fc_mask &m, int i0, int i1, int kb, bool down) {
    const KeyTiles kt = key_tiles<BN>(m, i0, i1);
    const int n = (kt.a1 - kt.first) + (kt.b1 - kt.b0);
    const int up = kb < kt.a1 ? kb - kt.first : (kt.a1 - kt.first) + (kb - kt.b0);
    return down ? n - 1 - up : up;
}
/* ORD_ROT (every row sees every key; block kb's r-th tile is (r + kb) mod
 * nqt, nkb ≤ nqt, so that the blocks of one head do not all wait on the
 * same tile): the blocks add to tile m in the order they reach it, block kb
 * after (m − kb) mod nqt tiles; its place is the number of blocks kb' < nkb
 * among the d = (m − kb) mod nqt tiles m, m − 1, .., m − d + 1 (mod nqt). */
__device__ __forceinline__ int key_block_ordinal_rot(int m, int kb, int nkb, int nqt) {
    const int d = ((m - kb) % nqt + nqt) % nqt, lo = m - d + 1;
    const int hi = min(m, nkb - 1);
    if (lo >= 0) return max(0, hi - lo + 1);
    return (hi + 1) + max(0, nkb - (nqt + lo)); /* [0, m] and the wrapped [nqt + lo, nqt) */
}

/* Whether a dQ tile's first addition is a copy into the unzeroed buffer
 * (ordered mode, ORD_UP / ORD_DOWN: place 0 is then launched before every
 * block that waits on it, so the wait below for the copy cannot hang while
 * the blocks run at all). ORD_ROT waits on blocks launched later: there the
 * buffer is zeroed and every addition an add, so that a wait that expires
 * (the blocks of a head not all resident: another kernel holding SMs) can
 * go on without the copy. */
__host__ __device__ __forceinline__ bool dq_copy_first(int dqm, int order) {
    return dqm == DQ_ORDERED && order != ORD_ROT;
}

/* Polls *sem until it reaches `target` (acquire) for at most ~1 s; whether
 * it did. The bound keeps a fault (blocks that never run: another kernel
 * holding the SMs that long) from hanging the device. */
__device__ __forceinline__ bool sem_reached(const int *sem, int target) {
    for (uint32_t spin = 0; spin < (1u << 22); ++spin) {
        int v;
        asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(sem) : "memory");
        if (v >= target) return true;
        __nanosleep(spin < 64 ? 32 : 256);
    }
    return false;
}

/* Waits until *sem reaches `target` (sem_reached); past its bound (a count
 * that never comes cannot happen, see key_block_ordinal) the wait ends
 * instead of hanging — under copy_first once the tile's copy is done
 * (count ≥ 1): the sum is still complete, only its order (the last bits)
 * may differ. */
__device__ __forceinline__ void sem_wait_geq(const int *sem, int target, bool copy_first) {
    if (sem_reached(sem, target) || !copy_first) return;
    while (!sem_reached(sem, 1)) { /* past the bound: never before the tile's copy */
    }
}

/* Heavy key blocks (the sink keys' under a sliding window: every row sees
 * them, ~S / W times the tiles of any other block): the first nsb blocks of
 * each (batch, kv head) have their tile walk cut into nc chunks of
 * consecutive iterations, chunk 0 by the block's own CTA, chunks 1.. by
 * CTAs appended after the gk regular ones. Each chunk adds its dQ tiles as
 * usual (every dQ tile still gets one addition per key block, so the
 * ordering is unchanged) and writes its partial dK, dV (fp32, unscaled) to
 * part [B, Hkv, nsb, nc][2][BN][HD]; bwd_kv_combine adds the chunks in
 * order (deterministic). nsb = 0: no split. */
struct Split {
    int nsb, nc, gk;
    float *part;
    int okv; /* dK, dV by TMA stores (tdk, tdv) through the K and V tiles' smem */
};

/* The CTA's key block, kv head, batch and chunk (Split) from its index:
 * the gk regular CTAs (key block fastest; in decreasing order under the
 * ordered ORD_DOWN, so that the blocks that add first to a dQ tile are
 * launched first), then the chunks ≥ 1 of the heavy blocks. */
struct BlockId {
    int kb, hk, b, chunk;
};
__device__ __forceinline__ BlockId block_id(int vb, int nkb, int Hkv, const Split &sp, bool rev) {
    BlockId id;
    id.chunk = 0;
    if (vb < sp.gk) {
        id.kb = rev ? nkb - 1 - vb % nkb : vb % nkb;
        vb /= nkb;
    } else { /* a chunk ≥ 1 of a heavy block */
        vb -= sp.gk;
        id.chunk = 1 + vb % (sp.nc - 1);
        vb /= sp.nc - 1;
        id.kb = vb % sp.nsb;
        vb /= sp.nsb;
    }
    id.hk = vb % Hkv;
    id.b = vb / Hkv;
    return id;
}

/* The query tiles (BQ rows on the global grid) that hold a row seeing some
 * key of [n0, n1): the ≤ 2 row segments of fc_key_block_rows, cut on the
 * grid, a tile shared by both counted once; iterations: the GQA group's
 * heads × the tiles, all of them or the CTA's chunk (Split). Rows of a
 * tile that see no key of the block get P = dS = 0 by selection. rot
 * (ORD_ROT): one segment [0, Sq), block kb walks it from tile kb on. */
struct TileWalk {
    int t0a, t1a, nt0, ntg, it_base, n_iter, hk0, kb;
    bool rot;
    __device__ __forceinline__ void tile(int it, int &h, int &i0, int BQ) const {
        const int gi = (it + it_base) / ntg, r = (it + it_base) % ntg;
        h = hk0 + gi;
        i0 = (rot ? (r + kb) % ntg : r < nt0 ? t0a + r : t1a + (r - nt0)) * BQ;
    }
};
template <int BQ>
__device__ __forceinline__ TileWalk tile_walk(const fc_mask &mask, int n0, int n1, int group, int hk, int kb,
                                              int chunk, const Split &sp, bool rot) {
    TileWalk w = {0, 0, 0, 0, 0, 0, hk * group, kb, rot};
    int64_t r0[2], r1[2];
    const int n = fc_key_block_rows(&mask, n0, n1, r0, r1);
    if (n > 0) {
        w.t0a = (int)r0[0] / BQ;
        const int t0b = ((int)r1[0] + BQ - 1) / BQ;
        w.nt0 = w.ntg = t0b - w.t0a;
        if (n > 1) {
            w.t1a = max((int)r0[1] / BQ, t0b);
            w.ntg += max(((int)r1[1] + BQ - 1) / BQ, w.t1a) - w.t1a;
        }
    }
    const int n_all = group * w.ntg;
    const bool partial = kb < sp.nsb;
    w.it_base = partial ? (int)((int64_t)n_all * chunk / sp.nc) : 0;
    w.n_iter = partial ? (int)((int64_t)n_all * (chunk + 1) / sp.nc) - w.it_base : n_all;
    return w;
}

/* A tile's walk facts for the wide kernel's consumers, written by the L/Δ
 * warp into the tile's ring stage (read after the stage's full barrier):
 * the head h, the first row i0 and, bit c, "rows i0 + 32c .. + 31 exist and
 * see every key of the block [n0, n0 + BN)" (full: the P/dS code without
 * per-element tests). Two integer divisions and the 64-bit visibility of two
 * rows a tile, out of every consumer warp. (The HD ≤ 128 kernel measured
 * slower with it: its consumers work them out themselves.) */
template <int BN>
__device__ __forceinline__ int4 tile_info(const fc_mask &mask, int h, int i0, int n0, int Sq, int Sk) {
    int f = 0;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
        const int ia = i0 + 32 * c;
        if (ia + 32 <= Sq && tile_full<BN>(vis_of(mask, ia, Sq), vis_of(mask, ia + 31, Sq), n0, Sk)) f |= 1 << c;
    }
    return make_int4(h, i0, f, 0);
}

/* Ordered dQ (deterministic): wait until the key blocks before this one
 * have added to the tile of rows [i0, i0 + 64) (its counter sem), then,
 * after this block's additions have completed, count it. */
template <int BN>
__device__ __forceinline__ int dq_order_place(const TileWalk &tw, const fc_mask &mask, int i0, int Sq, int nkb,
                                              int order) {
    return tw.rot ? key_block_ordinal_rot(i0 / 64, tw.kb, nkb, tw.ntg)
                  : key_block_ordinal<BN>(mask, i0, min(i0 + 64, Sq) - 1, tw.kb, order == ORD_DOWN);
}
/* dq_order_turn: the drain computes the place and polls the counter once before its
 * buffer is full (the consumers still computing the tile: off the critical
 * path — with one buffer a dQ piece, the wide kernel's consumers wait on
 * whatever the drain does after a piece is full: 1.1× the kernel time at
 * D = 192 causal), and only waits, if the count was not there yet, once
 * the buffer is full (dq_order_wait). */
struct DqTurn {
    int place;  /* the count of the tile's counter this block waits for */
    bool ready; /* the count was there at the poll */
    bool copy;  /* the tile's first addition (place 0, dq_copy_first): a copy, not an add —
                   the dQ buffer is not zeroed (the convert kernel writes 0 for the rows
                   that see no key, whose tiles no block visits) */
};
template <int BN, int DQM>
__device__ __forceinline__ DqTurn dq_order_turn(const TileWalk &tw, const fc_mask &mask, int i0, int Sq, int nkb,
                                                int order, const int *sem) {
    DqTurn t = {0, true, false};
    if (DQM == DQ_ORDERED) {
        t.place = dq_order_place<BN>(tw, mask, i0, Sq, nkb, order);
        t.copy = t.place == 0 && dq_copy_first(DQM, order);
        int v;
        asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(sem) : "memory");
        t.ready = v >= t.place;
    }
    return t;
}
__device__ __forceinline__ void dq_order_wait(const int *sem, const DqTurn &t, int order) {
    if (!t.ready) sem_wait_geq(sem, t.place, dq_copy_first(DQ_ORDERED, order));
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
}
/* After this block's additions to the tile are complete (bulk_wait_all):
 * count it, with release semantics (the async proxy's writes ordered before
 * the generic release by the proxy fence; no fence.sc: measured ~20 % of the
 * drain thread's time). */
__device__ __forceinline__ void dq_order_done(int *sem) {
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
    asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(sem) : "memory");
}

/* A consumer warpgroup's part of a dQ tile (acc: m64 × 8·NJ columns from
 * cb on, rows warp·16 + g (+ 8)) into the drain's fp32 buffer at dq (rows of
 * W columns, dq_col's layout), read next by the bulk reduction (async proxy).
 * Under KSCRUB a row that sees a key whose K held NaN/Inf gets NaN: what the
 * unscrubbed products give. */
template <int W, bool KSCRUB, int NJ>
__device__ __forceinline__ void st_dq_part(uint32_t dq, const float (&acc)[NJ][4], int cb, int warp, int g, int t4,
                                           const fc_mask &mask, int i0, int Sq, int n0, const uint32_t (&bad)[4],
                                           bool anybad) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        const int r = warp * 16 + g + 8 * hf;
        const float poison = KSCRUB && anybad && sees_bad_key(vis_of(mask, i0 + r, Sq), n0, bad)
                                 ? __int_as_float(0x7fc00000)
                                 : 0.f;
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
            const uint32_t addr = dq + (r * W + dq_col(r, cb + 8 * j + 2 * t4, W)) * 4;
            float x0 = acc[j][2 * hf], x1 = acc[j][2 * hf + 1];
            if (KSCRUB) x0 += poison, x1 += poison; /* x + 0.f is not folded: no add without SCRUB */
            asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(x0), "f"(x1) : "memory");
        }
    }
    fence_proxy_async_smem();
}

template <typename T, class K, int V, bool SCRUB, bool RAG = false>
__global__ void __launch_bounds__(384, 1)
    bwd_dkdv_wgmma_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tdo,
                          const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv,
                          const __grid_constant__ CUtensorMap tdk, const __grid_constant__ CUtensorMap tdv,
                          const __grid_constant__ fcc_attn p, const int nkb, const float *Lb, const float *Db,
                          float *dQacc, int *dQsem, const int Sqp, const int order, const Split sp,
                          const CUtensorMap *rmaps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    fcc_pdl_trigger(); /* the dQ convert may be scheduled once every CTA has started (bwd_dq_convert_tiles) */
    constexpr int HD = K::HD, DV = K::DV, BN = K::BN, BQ = K::BQ, ST = K::ST, NDB = K::NDB, DQM = K::DQM;
    constexpr bool MOD = V != FC_SCORE_PLAIN;
    extern __shared__ unsigned char smem_raw[];
    /* K/V; tile full, empty; dQ tile full, empty; K/V landed (SCRUB) */
    __shared__ __align__(8) uint64_t bars[1 + 2 * ST + 2 * K::NDQ + 1];
    __shared__ uint32_t kbad[4]; /* SCRUB: the block's keys whose K held NaN/Inf (bit j: key n0 + j) */
    const uint32_t raw = smem_u32(smem_raw), base = (raw + 1023u) & ~1023u;
    const uint32_t sK = base, sV = base + K::OFF_V, sQ = base + K::OFF_Q, sdO = base + K::OFF_DO;
    const uint32_t sdS = base + K::OFF_DS, sdQ = base + K::OFF_DQ;
    float *sLD = reinterpret_cast<float *>(smem_raw + (base - raw) + K::OFF_LD);
    const uint32_t barKV = smem_u32(&bars[0]);
    const Ring<ST> rq = {smem_u32(&bars[1]), smem_u32(&bars[1 + ST])};
    constexpr int NDQ = K::NDQ;
    const Ring<NDQ> rdq = {smem_u32(&bars[1 + 2 * ST]), smem_u32(&bars[1 + 2 * ST + NDQ])}; /* consumers fill, warp 2 drains */
    const uint32_t kvland = smem_u32(&bars[1 + 2 * ST + 2 * NDQ]);
    /* Masked NaN/Inf: dQ += dS·K multiplies a masked dS = 0 by the
     * whole K block, 0·NaN = NaN. With SCRUB (some row misses some key,
     * chosen on the host) the producer replaces the block's non-finite K
     * values by +0 before any product reads it (the forward's V scrub); the
     * rows that see such a key get dQ = NaN (their dQ tile rows are stored
     * as NaN), and so do that key's dK and dV where some row sees it: what
     * the unscrubbed products give. */
    constexpr bool KSCRUB = SCRUB;

    const fc_attn &a = p.a;
    const int tid = threadIdx.x, wg = tid >> 7;
    const BlockId id = block_id(blockIdx.x, nkb, p.Hkv, sp, DQM == DQ_ORDERED && order == ORD_DOWN);
    const int kb = id.kb, hk = id.hk, b = id.b;
    /* RAG: b is a sequence; its own lengths, mask and score parts, maps
     * (rmaps, batch coordinate 0). Dense: the problem's. */
    const SeqView<RAG> sv(p, b, rmaps, tq, tdo, tk, tv, tdk, tdv);
    const fc_mask &mask = sv.parts.mask(p);
    const fc_score_params &score = sv.parts.score(p);
    const int Sq = sv.Sq, Sk = sv.Sk, cb = sv.cb;
    static_assert(BQ == 64, "dq_tile: 64-row tiles");
    const bool partial = kb < sp.nsb; /* dK, dV of this chunk to sp.part (never under RAG: nsb = 0) */
    const int n0 = kb * BN, n1 = min(n0 + BN, Sk);
    if (RAG && n0 >= Sk) return; /* past this sequence's keys (the whole CTA, before any barrier) */
    /* ORD_ROT (host: every row sees every key, nkb ≤ the tiles): one
     * segment [0, Sq), walked from tile kb on (key_block_ordinal_rot). */
    const TileWalk tw = tile_walk<BQ>(mask, n0, n1, p.group, hk, kb, id.chunk, sp,
                                      DQM == DQ_ORDERED && order == ORD_ROT);
    const int n_iter = tw.n_iter;
    auto tile_of = [&](int it, int &h, int &i0) { tw.tile(it, h, i0, BQ); };

    if (tid == 0) {
        mbar_init(barKV, KSCRUB ? 128 : 1); /* the TMA, or every producer thread after the scrub */
        mbar_init(kvland, 1);
        for (int s = 0; s < ST; ++s) {
            mbar_init(rq.full + 8 * s, 33);   /* the TMA + warp 1's 32 lanes (L/Δ) */
            mbar_init(rq.empty + 8 * s, 256); /* every consumer thread */
        }
        for (int s = 0; s < NDQ; ++s) {
            mbar_init(rdq.full + 8 * s, 256); /* every consumer thread */
            mbar_init(rdq.empty + 8 * s, 1);  /* the draining thread */
        }
        mbar_fence_init();
    }
    __syncthreads();

    if (wg == 0) {
        /* ------------------------------------------------ producer */
        setmaxnreg_dec<40>();
        const int warp = tid >> 5, lane = tid & 31;
        if (n_iter > 0) {
            const uint32_t bar = KSCRUB ? kvland : barKV;
            if (tid == 0) {
                sv.acquire_loads();
                mbar_expect_tx(bar, 2 * K::KV_BYTES);
                tma_tile<BN, NDB>(sK, sv.mk, bar, n0, hk, cb);
                tma_tile<BN, NDB>(sV, sv.mv, bar, n0, hk, cb);
            }
            if (KSCRUB) { /* thread t: key row t of the block */
                mbar_wait(kvland, 0);
                scrub_v<T, K>(sK, tid, kbad);
                fence_proxy_async_smem();
                mbar_arrive(barKV); /* each writer of the scrub and of kbad arrives itself */
            }
        }
        if (tid == 0) {
            for (int it = 0; it < n_iter; ++it) {
                int h, i0;
                tile_of(it, h, i0);
                const int st = it % ST;
                rq.wait_empty(it);
                mbar_expect_tx(rq.full + 8 * st, 2 * K::T_BYTES);
                tma_tile<BQ, NDB>(sQ + st * K::T_BYTES, sv.mq, rq.full + 8 * st, i0, h, cb);
                tma_tile<BQ, NDB>(sdO + st * K::T_BYTES, sv.mdo, rq.full + 8 * st, i0, h, cb);
            }
        } else if (warp == 1) {
            for (int it = 0; it < n_iter; ++it) {
                int h, i0;
                tile_of(it, h, i0);
                const int st = it % ST;
                rq.wait_empty(it);
                const int64_t rowbase = sv.rowbase(p, b, h);
                float *L = sLD + st * 2 * BQ, *Dl = L + BQ;
                for (int r = lane; r < BQ; r += 32) {
                    const bool ok = i0 + r < Sq; /* rows past Sq: P = 0 */
                    L[r] = ok ? lse_l2(Lb[rowbase + i0 + r]) : INFINITY;
                    Dl[r] = ok ? Db[rowbase + i0 + r] : 0.f;
                }
                mbar_arrive(rq.full + 8 * st); /* each lane: its own writes */
            }
        } else if (tid == 64) {
            /* warp 2 drains the dQ tiles: (ordered) bulk add into dQacc. */
            for (int it = 0; it < n_iter; ++it) {
                int h, i0;
                tile_of(it, h, i0);
                const int64_t dqt = sv.dq_tile(p, b, h, i0, Sqp);
                int *sem = dQsem + dqt;
                const DqTurn turn = dq_order_turn<BN, DQM>(tw, mask, i0, Sq, nkb, order, sem);
                rdq.wait_full(it);
                if (DQM == DQ_ORDERED) dq_order_wait(sem, turn, order);
                bulk_put_f32(dQacc + dqt * BQ * HD, sdQ + (it % NDQ) * K::DQ_BYTES,
                             K::DQ_BYTES, turn.copy);
                bulk_wait_read(); /* the buffer is free once read: the consumers go on while the add completes */
                rdq.release(it);
                bulk_wait_all();
                if (DQM == DQ_ORDERED) dq_order_done(sem);
            }
        }
    } else {
        /* ------------------------------------------------ consumers */
        setmaxnreg_inc<232>();
        /* The warpgroup index through a shuffle from lane 0, so that ptxas
         * knows it is warp-uniform (what derives from it: this warpgroup's
         * keys, its smem tiles). Measured with nothing else changed (H200,
         * benchmarks/NOTES.md, twenty-second session): this kernel −2.9 to
         * −3.8 % at HD 128 (dense, causal, window), −1.2 % at HD 64; the wide
         * kernel −1.1 % (HD 192), −3.3 % (HD 256). The forward's consumers
         * measured mixed (−1.6 to +2.6 %) and keep the plain index. */
        const int cw = __shfl_sync(0xffffffffu, wg - 1, 0);
        const int warp = (tid >> 5) & 3, lane = tid & 31;
        const int g = lane >> 2, t4 = lane & 3;
        const int kc0 = n0 + cw * 64;            /* this warpgroup's keys kc0 .. kc0 + 63 */
        const int key0 = kc0 + warp * 16 + g;    /* this thread's: key0, key0 + 8 */
        const uint32_t kA = sK + cw * 64 * 128, vA = sV + cw * 64 * 128;

        float acc_dk[DV / 8][4], acc_dv[DV / 8][4], acc_s[BQ / 8][4], acc_dp[BQ / 8][4];
        zero_acc(acc_dk);
        zero_acc(acc_dv);
        zero_acc(acc_s); /* once: defined for the "+f" operands */
        zero_acc(acc_dp);
        uint32_t pa[BQ / 16][4], da[BQ / 16][4];
        /* Per tile: Sᵀ and dPᵀ issued together, Pᵀ computed while dPᵀ is in
         * flight; then dQ and [dV, dK] issued together, dQ stored to smem
         * while [dV, dK] runs. Nothing is in flight across the loop's back
         * edge (the forward's shape; ptxas serialises wgmmas otherwise). */
        auto issue_dkv = [&](int it) { /* [dV, dK] += [Pᵀ, dSᵀ]·[dO, Q] of tile it (pa, da) */
            const int st = it % ST;
            issue_ab<T, DV, BQ / 16, BQ>(acc_dv, pa, sdO + st * K::T_BYTES); /* dV += Pᵀ dO */
            issue_ab<T, DV, BQ / 16, BQ>(acc_dk, da, sQ + st * K::T_BYTES);  /* dK += dSᵀ Q */
            wg_commit();
        };
        if (n_iter > 0) mbar_wait(barKV, 0);
        uint32_t bad[4] = {0u, 0u, 0u, 0u};
        if (KSCRUB && n_iter > 0)
#pragma unroll
            for (int w = 0; w < 4; ++w) bad[w] = kbad[w];
        const bool anybad = (bad[0] | bad[1] | bad[2] | bad[3]) != 0u;
        for (int it = 0; it < n_iter; ++it) {
            const int st = it % ST;
            const float *Lt = sLD + st * 2 * BQ, *Dt = Lt + BQ;
            rq.wait_full(it);
            /* The tile's facts worked out here, not read from warp 1 (tile_info,
             * as the wide kernel does): measured +7.5 % on the D = 64 kernel,
             * +2 % at D = 128 causal (H200, session 13), fewer instructions
             * notwithstanding; the MOD variants at HD 128 also spilled. */
            int h, i0;
            tile_of(it, h, i0);
            issue_abt<T, DV>(acc_s, kA, BN * 128, sQ + st * K::T_BYTES, BQ * 128);   /* Sᵀ = K Qᵀ */
            issue_abt<T, DV>(acc_dp, vA, BN * 128, sdO + st * K::T_BYTES, BQ * 128); /* dPᵀ = V dOᵀ */
            wg_wait<1>(); /* Sᵀ landed */
            acc_fence(acc_s);
            /* Does every row of the tile see every key of the warpgroup's 64? */
            const bool full =
                tile_full<64>(vis_of(mask, i0, Sq), vis_of(mask, min(i0 + BQ, Sq) - 1, Sq), kc0, Sk);
            uint32_t vis = ~0u;
            fc_score_modf mod = {0.f, 0.f, 0.f};
            if (MOD) {
                mod = fcc_score_mod_l2(p, b, h); /* (b: the sequence under RAG, as ALiBi's [B, Hq] slopes) */
                /* Per k16 chunk of query rows: P packed at once, P·g kept. */
#pragma unroll
                for (int kk = 0; kk < BQ / 16; ++kk) {
                    float pv[2][4];
                    uint32_t pa1[1][4];
                    dkdv_p<V>(p, mask, score, mod, acc_s, pv, 2 * kk, Lt, i0, Sq, key0, t4, full, vis);
                    tile_pack_p<T>(pv, pa1);
#pragma unroll
                    for (int e = 0; e < 4; ++e) pa[kk][e] = pa1[0][e];
                }
            } else if (full) { /* one branch a tile: the full copy has no per-element tests */
                dkdv_p<V>(p, mask, score, mod, acc_s, acc_s, 0, Lt, i0, Sq, key0, t4, true, vis);
            } else {
                dkdv_p<V>(p, mask, score, mod, acc_s, acc_s, 0, Lt, i0, Sq, key0, t4, false, vis);
            }
            wg_wait<0>(); /* dPᵀ landed */
            acc_fence(acc_dp);
            if (!MOD && full) dkdv_ds(acc_dp, acc_s, Dt, t4, true, vis); /* plain only: MOD at HD 128 serialised its wgmmas */
            else dkdv_ds(acc_dp, acc_s, Dt, t4, full, vis);
            if (!MOD) tile_pack_p<T>(acc_s, pa);
            tile_pack_p<T>(acc_dp, da);
            {
                /* dSᵀ of this warpgroup's 64 keys into the [128 keys][64 rows]
                 * tile (128B-swizzled rows; the A operand of dQ = dS·K, read
                 * transposed). */
                const uint32_t ds = sdS + (it & 1) * K::DS_BYTES;
                if constexpr (HD <= 64) { /* stmatrix: 4 stores, not 16 (at HD 128 it serialised the wgmmas: C7512) */
                    const int ln = lane_id_volatile();
#pragma unroll
                    for (int kk = 0; kk < BQ / 16; ++kk) /* the warp's 16 key rows, query chunks 2kk, 2kk + 1 */
                        stsm_x4(sw128_stsm_addr(ds, cw * 64 + warp * 16, 2 * kk, ln), da[kk][0], da[kk][1], da[kk][2],
                                da[kk][3]);
                } else {
                    const int kr = cw * 64 + warp * 16 + g; /* key rows kr, kr + 8: same swizzle phase */
#pragma unroll
                    for (int j = 0; j < BQ / 8; ++j) {
                        const uint32_t off = ((j ^ (kr & 7)) << 4) + 4 * t4;
                        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(ds + kr * 128 + off), "r"(da[j >> 1][(j & 1) * 2])
                                     : "memory");
                        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(ds + (kr + 8) * 128 + off),
                                     "r"(da[j >> 1][(j & 1) * 2 + 1])
                                     : "memory");
                    }
                }
                fence_proxy_async_smem();
                /* dQ(tile) = dS·K: each warpgroup its HD / 2 columns over all
                 * 128 keys (m64n64, HD = 64: m64n32 from 64 bytes into the
                 * swizzled rows for warpgroup 1), both halves of dSᵀ written
                 * first (a 256-thread barrier). One tile per CTA and tile to
                 * the drain (at HD = 64 two partial tiles over 64 keys each
                 * doubled the reduce-add traffic). Every warpgroup issues the
                 * same products (a wgmma under a branch on the warpgroup made
                 * ptxas serialise all of them: C7520). */
                asm volatile("bar.sync 4, 256;\n" ::: "memory");
                float acc_dq[HD / 16][4];
                wg_fence();
                {
                    const uint64_t da0 = sw128_desc(ds, 1024, 1024), db0 = mn_desc<BN>(sK, cw * (HD / 2), 0);
#pragma unroll
                    for (int kk = 0; kk < BN / 16; ++kk) {
                        const uint64_t da = desc_add(da0, kk * 16 * 128);
                        const uint64_t db = desc_add(db0, kk * 16 * 128);
                        if constexpr (HD == 128) WgOps<T>::ss_n64_tt(&acc_dq[0][0], da, db, kk > 0 ? 1 : 0);
                        else WgOps<T>::ss_n32_tt(&acc_dq[0][0], da, db, kk > 0 ? 1 : 0);
                    }
                    wg_commit();
                }
                issue_dkv(it);
                {
                    wg_wait<1>(); /* dQ landed; [dV, dK](it) in flight */
                    acc_fence(acc_dq);
                    rdq.wait_empty(it); /* the drain of tile it − NDQ is done */
                    st_dq_part<HD, KSCRUB>(sdQ + (it % NDQ) * K::DQ_BYTES, acc_dq, cw * (HD / 2), warp, g, t4, mask, i0,
                                           Sq, n0, bad, anybad);
                }
                mbar_arrive(rdq.full + 8 * (it % NDQ));
                wg_wait<0>();
                acc_fence(acc_dv);
                acc_fence(acc_dk);
                acc_fence(pa);
                acc_fence(da);
                rq.release(it);
            }
        }

        if (partial) { /* fp32 dK (unscaled), dV of the chunk; rows key0 − n0, + 8; columns < DV (≥ D) */
            float *pk = sp.part + ((((int64_t)b * p.Hkv + hk) * sp.nsb + kb) * sp.nc + id.chunk) * (2 * BN * HD);
            float *pv = pk + BN * HD;
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int r = key0 + 8 * hf - n0;
#pragma unroll
                for (int j = 0; j < DV / 8; ++j) {
                    const int col = j * 8 + 2 * t4;
                    *reinterpret_cast<float2 *>(pk + r * HD + col) = make_float2(acc_dk[j][2 * hf], acc_dk[j][2 * hf + 1]);
                    *reinterpret_cast<float2 *>(pv + r * HD + col) = make_float2(acc_dv[j][2 * hf], acc_dv[j][2 * hf + 1]);
                }
            }
            return;
        }
        /* Epilogue: dK·scale, dV; keys key0 and key0 + 8. Through the K and V
         * tiles' smem by TMA stores where dk's and dv's layouts allow
         * (sp.okv; the forward's epilogue measured 7-13 % faster so at 1k
         * keys), else 4-byte stores from registers. */
        if (sp.okv) {
            asm volatile("bar.sync 4, 256;\n" ::: "memory"); /* the other warpgroup's last dQ = dS·K has read sK */
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int key = key0 + 8 * hf, r = key - kc0;
                float f, fv;
                kv_out_factors<KSCRUB>(mask, bad, anybad, key, n0, Sk, p.scale, f, fv);
#pragma unroll
                for (int j = 0; j < DV / 8; ++j) { /* the tiles' box layout */
                    const uint32_t off = sw128_off(r, j * 8 + 2 * t4, BN);
                    st_shared_u32(kA + off, Ops<T>::pack(acc_dk[j][2 * hf] * f, acc_dk[j][2 * hf + 1] * f));
                    st_shared_u32(vA + off, Ops<T>::pack(acc_dv[j][2 * hf] * fv, acc_dv[j][2 * hf + 1] * fv));
                }
            }
            fence_proxy_async_smem();
            asm volatile("bar.sync %0, 128;\n" ::"r"(8 + cw) : "memory"); /* this warpgroup's keys written */
            if ((tid & 127) == 0 && kc0 < Sk) {
                sv.acquire_stores();
#pragma unroll
                for (int db = 0; db < (DV + 63) / 64; ++db)
                    if (db * 64 < p.D) { /* keys ≥ Sk, columns ≥ D clipped */
                        tma_store_4d(sv.mdk, kA + db * BN * 128, db * 64, kc0, hk, cb);
                        tma_store_4d(sv.mdv, vA + db * BN * 128, db * 64, kc0, hk, cb);
                    }
                bulk_commit();
                bulk_wait_read();
            }
            return;
        }
        T *dkp = static_cast<T *>(a.dk) + fc_attn_key_offset(&a, &sv.s, b, a.sdk, 0, hk);
        T *dvp = static_cast<T *>(a.dv) + fc_attn_key_offset(&a, &sv.s, b, a.sdv, 0, hk);
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int key = key0 + 8 * hf;
            if (key >= Sk) continue;
            T *dkr = dkp + (int64_t)key * a.sdk[1], *dvr = dvp + (int64_t)key * a.sdv[1];
            float f, fv;
            kv_out_factors<KSCRUB>(mask, bad, anybad, key, n0, Sk, p.scale, f, fv);
#pragma unroll
            for (int j = 0; j < DV / 8; ++j) {
                const int col = j * 8 + 2 * t4;
                store_pair(dkr, col, p.D, acc_dk[j][2 * hf] * f, acc_dk[j][2 * hf + 1] * f, p.out_pairs);
                store_pair(dvr, col, p.D, acc_dv[j][2 * hf] * fv, acc_dv[j][2 * hf + 1] * fv, p.out_pairs);
            }
        }
    }
#endif
}

/* ------------------------------------------------ wide heads (HD 192, 256) */
/* D in (128, 256], zero-padded to HD = 192 or 256 by the tensor maps. dK and
 * dV of 128 keys × 256 columns would need 256 fp32 a consumer thread, so the
 * CTA holds 64 keys and the consumer warpgroups share them differently for
 * each product (no product computed twice):
 *   Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ: warpgroup c the query rows 32c .. 32c + 31 of
 *     the tile (m64n32, K and V read by both); Pᵀ and dSᵀ of its 32 rows
 *     into the [64 keys][64 rows] tiles in smem (bf16/f16, double-buffered
 *     by iteration; a 256-thread barrier after each is written);
 *   dV += Pᵀ·dO, dK += dSᵀ·Q: warpgroup c half the columns over all 64
 *     rows, as two pieces (both operands in smem): HD = 256, the 64-column
 *     blocks 2c and 2c + 1 (m64n64 each); HD = 192, block 2c (m64n64) and
 *     the half c of block 1 (m64n32; warpgroup 1's starts 64 bytes into
 *     the swizzled rows);
 *   dQ = dS·K: warpgroup c the same two column pieces over the 64 keys,
 *     one after the other, each [64 rows][width] fp32 through its own
 *     16 KB smem buffer to the drain thread (bulk reduce-add into the dQ
 *     buffer, per tile the pieces in column order: dq_piece).
 * dO has one stage at HD = 256 (Q, L, Δ two): dV is issued as soon as Pᵀ
 * is complete, so dO's stage is free once dV is done. The rest
 * (the producer, the tile walk, the ordered dQ, Split, the K scrub, the
 * score modifiers, rows past Sq) is the HD ≤ 128 kernel's. */
template <int HD_, int DQM_> struct WideTraits {
    static constexpr int HD = HD_;
    static constexpr int DQM = DQM_;
    static constexpr int BN = 64, BQ = 64, ST = 2, NDB = HD / 64;
    static constexpr int STD = HD == 256 ? 1 : 2; /* dO stages */
    static constexpr int W1 = HD == 256 ? 64 : 32; /* width of a warpgroup's second column piece */
    static constexpr int NJW = (64 + W1) / 8;      /* n8 column tiles of a warpgroup's dK, dV */
    static constexpr int KV_BYTES = BN * HD * 2;  /* the K or the V block */
    static constexpr int T_BYTES = BQ * HD * 2;   /* one Q or dO tile */
    static constexpr int PT_BYTES = BN * BQ * 2;  /* one Pᵀ or dSᵀ tile [64 keys][64 rows] */
    static constexpr int DQB_BYTES = BQ * 64 * 4; /* one fp32 dQ piece [64 rows][64 columns] */
    static constexpr int OFF_V = KV_BYTES;
    static constexpr int OFF_Q = 2 * KV_BYTES;
    static constexpr int OFF_DO = OFF_Q + ST * T_BYTES;
    static constexpr int OFF_P = OFF_DO + STD * T_BYTES;  /* [2][Pᵀ, dSᵀ] */
    static constexpr int OFF_DQ = OFF_P + 4 * PT_BYTES;   /* [2 warpgroups] dQ pieces */
    static constexpr int OFF_LD = OFF_DQ + 2 * DQB_BYTES; /* [ST][2][BQ] fp32: L·log2e, Δ */
    static constexpr int SMEM = OFF_LD + ST * 2 * BQ * 4 + 1024;
    static_assert(HD == 192 || HD == 256, "HD 192 or 256");
    static_assert(SMEM + 256 <= 232448, "Hopper opt-in shared memory (with the static barriers)");
    /* First column of warpgroup c's piece r (0: 64 wide, 1: W1 wide). */
    static __device__ __forceinline__ int piece_col(int c, int r) {
        return r == 0 ? 128 * c : HD == 256 ? 128 * c + 64 : 64 + 32 * c;
    }
};

/* Where column col of a dQ tile lives in the fused kernels' fp32 dQ buffer:
 * per tile ([64 rows][HD] floats) the column pieces in column order, piece
 * [c0, c0 + w) at c0·64 as [64 rows][w], element (r, c) at
 * r·w + dq_col(r, c − c0, w). HD ≤ 128: one piece (w = HD); 256: four of 64;
 * 192: 64, 32, 32, 64 (the wide kernel's pieces). */
__host__ __device__ __forceinline__ int dq_piece_off(int HD, int r, int col) {
    const int w = HD <= 128 ? HD : HD == 192 && col >= 64 && col < 128 ? 32 : 64;
    const int c0 = col & ~(w - 1);
    return c0 * 64 + r * w + dq_col(r, col - c0, w);
}

/* acc (m64 × 32) = A·Bᵀ over HD: A = 64 rows at a, B = 32 rows at bsm
 * (column blocks astride / bstride bytes apart), both K-major
 * 128B-swizzled. Issued and committed, not waited for. */
template <typename T, int HD>
__device__ __forceinline__ void issue_abt_n32(float (&acc)[4][4], uint32_t a, int astride, uint32_t bsm, int bstride) {
    wg_fence();
    const uint64_t da0 = sw128_desc(a, 16, 1024), db0 = sw128_desc(bsm, 16, 1024);
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
        const uint32_t koff = (kk & 3) * 32;
        WgOps<T>::ss_n32(&acc[0][0], desc_add(da0, (kk >> 2) * astride + koff),
                         desc_add(db0, (kk >> 2) * bstride + koff), kk > 0 ? 1 : 0);
    }
    wg_commit();
}

/* acc (m64 × (64 + W1)) += A·B: A = the [64 keys][64 rows] tile at t
 * (K-major), B = warpgroup c's two column pieces of the [64 rows][HD] tile
 * at bsm (MN-major, read transposed). Issued, not committed. */
template <typename T, class K>
__device__ __forceinline__ void issue_tile_ab(float (&acc)[K::NJW][4], uint32_t t, uint32_t bsm, int c) {
    const uint64_t da0 = sw128_desc(t, 16, 1024);
    const uint64_t db0 = mn_desc<64>(bsm, K::piece_col(c, 0), 0), db1 = mn_desc<64>(bsm, K::piece_col(c, 1), 0);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
        const uint64_t da = desc_add(da0, kk * 32);
        if constexpr (K::W1 == 64) { /* HD 256: the pieces are the 64-column blocks 2c, 2c + 1: one m64n128k16 */
            WgOps<T>::ss_n128_tb(&acc[0][0], da, desc_add(db0, 16 * kk * 128), 1);
        } else {
            WgOps<T>::ss_n64_tb(&acc[0][0], da, desc_add(db0, 16 * kk * 128), 1);
            WgOps<T>::ss_n32_tb(&acc[8][0], da, desc_add(db1, 16 * kk * 128), 1);
        }
    }
}

/* This thread's elements of a warpgroup's 32 query rows (32c ..) in a
 * [64 keys][64 rows] tile (128B-swizzled rows of keys): keys kr, kr + 8,
 * rows 32c + 8j + 2·t4 (+1), from the fragment x (rows = keys). Two
 * stmatrix.x4 a call, over the warp's 16 key rows from kr − g. */
template <typename T>
__device__ __forceinline__ void st_tile_half(uint32_t tile, int kr, int c, const float (&x)[4][4]) {
    const int lane = lane_id_volatile();
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) /* chunks 4c + 2jj, + 1: one stmatrix.x4 */
        stsm_x4(sw128_stsm_addr(tile, kr - (lane >> 2), 4 * c + 2 * jj, lane), Ops<T>::pack(x[2 * jj][0], x[2 * jj][1]),
                Ops<T>::pack(x[2 * jj][2], x[2 * jj][3]), Ops<T>::pack(x[2 * jj + 1][0], x[2 * jj + 1][1]),
                Ops<T>::pack(x[2 * jj + 1][2], x[2 * jj + 1][3]));
}

template <typename T, class K, int V, bool SCRUB, bool RAG = false>
__global__ void __launch_bounds__(384, 1)
    bwd_wide_wgmma_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tdo,
                          const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv,
                          const __grid_constant__ CUtensorMap tdk, const __grid_constant__ CUtensorMap tdv,
                          const __grid_constant__ fcc_attn p, const int nkb, const float *Lb, const float *Db,
                          float *dQacc, int *dQsem, const int Sqp, const int order, const Split sp,
                          const CUtensorMap *rmaps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    fcc_pdl_trigger(); /* as the HD ≤ 128 kernel */
    constexpr int HD = K::HD, BN = K::BN, BQ = K::BQ, ST = K::ST, STD = K::STD, NDB = K::NDB, DQM = K::DQM;
    constexpr int NJW = K::NJW, W1 = K::W1;
    constexpr bool MOD = V != FC_SCORE_PLAIN;
    extern __shared__ unsigned char smem_raw[];
    /* K/V; Q full, empty; dO full, empty; dQ piece full, empty of each
     * consumer warpgroup; K/V landed (SCRUB) */
    __shared__ __align__(8) uint64_t bars[1 + 2 * ST + 2 * STD + 4 + 1];
    __shared__ uint32_t kbad[4];
    __shared__ int4 tinfo[ST]; /* per ring stage of Q: tile_info of its tile */
    const uint32_t raw = smem_u32(smem_raw), base = (raw + 1023u) & ~1023u;
    const uint32_t sK = base, sV = base + K::OFF_V, sQ = base + K::OFF_Q, sdO = base + K::OFF_DO;
    const uint32_t sP = base + K::OFF_P, sdQ = base + K::OFF_DQ;
    float *sLD = reinterpret_cast<float *>(smem_raw + (base - raw) + K::OFF_LD);
    const uint32_t barKV = smem_u32(&bars[0]);
    const Ring<ST> rq = {smem_u32(&bars[1]), smem_u32(&bars[1 + ST])};
    constexpr int B0 = 1 + 2 * ST + 2 * STD; /* the dQ pieces' barriers */
    const Ring<STD> rdo = {smem_u32(&bars[1 + 2 * ST]), smem_u32(&bars[1 + 2 * ST + STD])};
    const Ring<1> rdq0 = {smem_u32(&bars[B0]), smem_u32(&bars[B0 + 2])};
    const Ring<1> rdq1 = {smem_u32(&bars[B0 + 1]), smem_u32(&bars[B0 + 3])};
    const uint32_t kvland = smem_u32(&bars[B0 + 4]);
    constexpr bool KSCRUB = SCRUB; /* as the HD ≤ 128 kernel */

    const fc_attn &a = p.a;
    const int tid = threadIdx.x, wg = tid >> 7;
    const BlockId id = block_id(blockIdx.x, nkb, p.Hkv, sp, DQM == DQ_ORDERED && order == ORD_DOWN);
    const int kb = id.kb, hk = id.hk, b = id.b;
    const SeqView<RAG> sv(p, b, rmaps, tq, tdo, tk, tv, tdk, tdv); /* as the HD ≤ 128 kernel */
    const fc_mask &mask = sv.parts.mask(p);
    const fc_score_params &score = sv.parts.score(p);
    const int Sq = sv.Sq, Sk = sv.Sk, cb = sv.cb;
    static_assert(BQ == 64, "dq_tile: 64-row tiles");
    const bool partial = kb < sp.nsb;
    const int n0 = kb * BN, n1 = min(n0 + BN, Sk);
    if (RAG && n0 >= Sk) return; /* past this sequence's keys (the whole CTA, before any barrier) */
    const TileWalk tw = tile_walk<BQ>(mask, n0, n1, p.group, hk, kb, id.chunk, sp,
                                      DQM == DQ_ORDERED && order == ORD_ROT);
    const int n_iter = tw.n_iter;

    if (tid == 0) {
        mbar_init(barKV, KSCRUB ? 128 : 1);
        mbar_init(kvland, 1);
        for (int s = 0; s < ST; ++s) {
            mbar_init(rq.full + 8 * s, 33);   /* the TMA + warp 1's 32 lanes (L/Δ) */
            mbar_init(rq.empty + 8 * s, 256); /* every consumer thread */
        }
        for (int s = 0; s < STD; ++s) {
            mbar_init(rdo.full + 8 * s, 1);
            mbar_init(rdo.empty + 8 * s, 256);
        }
        for (int c = 0; c < 2; ++c) {
            mbar_init((c ? rdq1 : rdq0).full, 128); /* the warpgroup's threads */
            mbar_init((c ? rdq1 : rdq0).empty, 1);  /* the draining thread */
        }
        mbar_fence_init();
    }
    __syncthreads();

    if (wg == 0) {
        /* ------------------------------------------------ producer */
        setmaxnreg_dec<56>();
        const int warp = tid >> 5, lane = tid & 31;
        if (n_iter > 0) {
            const uint32_t bar = KSCRUB ? kvland : barKV;
            if (tid == 0) {
                sv.acquire_loads();
                mbar_expect_tx(bar, 2 * K::KV_BYTES);
                tma_tile<BN, NDB>(sK, sv.mk, bar, n0, hk, cb);
                tma_tile<BN, NDB>(sV, sv.mv, bar, n0, hk, cb);
            }
            if (KSCRUB) {
                mbar_wait(kvland, 0);
                scrub_v<T, K>(sK, tid, kbad);
                fence_proxy_async_smem();
                mbar_arrive(barKV);
            }
        }
        if (tid == 0) {
            for (int it = 0; it < n_iter; ++it) {
                int h, i0;
                tw.tile(it, h, i0, BQ);
                const int st = it % ST;
                rq.wait_empty(it);
                mbar_expect_tx(rq.full + 8 * st, K::T_BYTES);
                tma_tile<BQ, NDB>(sQ + st * K::T_BYTES, sv.mq, rq.full + 8 * st, i0, h, cb);
                const int sd = it % STD;
                rdo.wait_empty(it);
                mbar_expect_tx(rdo.full + 8 * sd, K::T_BYTES);
                tma_tile<BQ, NDB>(sdO + sd * K::T_BYTES, sv.mdo, rdo.full + 8 * sd, i0, h, cb);
            }
        } else if (warp == 1) {
            for (int it = 0; it < n_iter; ++it) {
                int h, i0;
                tw.tile(it, h, i0, BQ);
                const int st = it % ST;
                rq.wait_empty(it);
                const int64_t rowbase = sv.rowbase(p, b, h);
                float *L = sLD + st * 2 * BQ, *Dl = L + BQ;
                for (int r = lane; r < BQ; r += 32) {
                    const bool ok = i0 + r < Sq;
                    L[r] = ok ? lse_l2(Lb[rowbase + i0 + r]) : INFINITY;
                    Dl[r] = ok ? Db[rowbase + i0 + r] : 0.f;
                }
                if (lane == 0) tinfo[st] = tile_info<BN>(mask, h, i0, n0, Sq, Sk);
                mbar_arrive(rq.full + 8 * st);
            }
        } else if (tid == 64) {
            /* warp 2 drains the dQ pieces of each tile in a fixed order:
             * (warpgroup 0, 1) × (its first, second column piece). */
            for (int it = 0; it < n_iter; ++it) {
                int h, i0;
                tw.tile(it, h, i0, BQ);
                const int64_t dqt = sv.dq_tile(p, b, h, i0, Sqp);
                int *sem = dQsem + dqt;
                float *dst = dQacc + dqt * BQ * HD;
                const DqTurn turn = dq_order_turn<BN, DQM>(tw, mask, i0, Sq, nkb, order, sem);
#pragma unroll 1
                for (int pc = 0; pc < 4; ++pc) {
                    const int c = pc & 1, r = pc >> 1;
                    const Ring<1> &rr = c ? rdq1 : rdq0;
                    rr.wait_full(2 * it + r);
                    if (pc == 0 && DQM == DQ_ORDERED) dq_order_wait(sem, turn, order);
                    bulk_put_f32(dst + K::piece_col(c, r) * BQ, sdQ + c * K::DQB_BYTES, (r ? W1 : 64) * BQ * 4,
                                 turn.copy);
                    bulk_wait_read();
                    rr.release(2 * it + r);
                }
                bulk_wait_all();
                if (DQM == DQ_ORDERED) dq_order_done(sem);
            }
        }
    } else {
        /* ------------------------------------------------ consumers */
        setmaxnreg_inc<224>();
        const int cw = __shfl_sync(0xffffffffu, wg - 1, 0); /* warp-uniform (see the HD ≤ 128 kernel) */
        const int warp = (tid >> 5) & 3, lane = tid & 31;
        const int g = lane >> 2, t4 = lane & 3;
        const int kr = warp * 16 + g;   /* this thread's key rows of the block: kr, kr + 8 */
        const int key0 = n0 + kr;
        const int rq0 = cw * 32;        /* this warpgroup's query rows of a tile (Sᵀ, dPᵀ) */
        const Ring<1> &rdq = cw ? rdq1 : rdq0;
        const uint32_t dqbuf = sdQ + cw * K::DQB_BYTES;

        float acc_dk[NJW][4], acc_dv[NJW][4], acc_s[4][4], acc_dp[4][4];
        zero_acc(acc_dk);
        zero_acc(acc_dv);
        zero_acc(acc_s);
        zero_acc(acc_dp);
        if (n_iter > 0) mbar_wait(barKV, 0);
        uint32_t bad[4] = {0u, 0u, 0u, 0u};
        if (KSCRUB && n_iter > 0)
#pragma unroll
            for (int w = 0; w < 4; ++w) bad[w] = kbad[w];
        const bool anybad = (bad[0] | bad[1] | bad[2] | bad[3]) != 0u;
        /* One dQ piece (W columns of the tile's rows) to this warpgroup's
         * buffer, use u; rows that see a scrubbed key: NaN. */
        auto put_dq = [&](const auto &acc_dq, int u, int i0, auto width) {
            rdq.wait_empty(u);
            st_dq_part<decltype(width)::value, KSCRUB>(dqbuf, acc_dq, 0, warp, g, t4, mask, i0, Sq, n0, bad, anybad);
            mbar_arrive(rdq.full);
        };
        /* dQ piece r = dS·K[:, piece r] (both operands transposed). */
        auto issue_dq = [&](auto &acc_dq, uint32_t sdS, int r) {
            wg_fence();
            const uint64_t da0 = sw128_desc(sdS, 1024, 1024), db0 = mn_desc<BN>(sK, K::piece_col(cw, r), 0);
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk) {
                const uint64_t da = desc_add(da0, kk * 16 * 128);
                const uint64_t db = desc_add(db0, kk * 16 * 128);
                if constexpr (sizeof(acc_dq) == 8 * 4 * sizeof(float)) WgOps<T>::ss_n64_tt(&acc_dq[0][0], da, db, kk > 0 ? 1 : 0);
                else WgOps<T>::ss_n32_tt(&acc_dq[0][0], da, db, kk > 0 ? 1 : 0);
            }
            wg_commit();
        };
        for (int it = 0; it < n_iter; ++it) {
            const int st = it % ST;
            const float *Lt = sLD + st * 2 * BQ, *Dt = Lt + BQ;
            const uint32_t sQt = sQ + st * K::T_BYTES, sdOt = sdO + (it % STD) * K::T_BYTES;
            const uint32_t sPt = sP + (it & 1) * 2 * K::PT_BYTES, sdSt = sPt + K::PT_BYTES;
            rq.wait_full(it);
            const int4 ti = tinfo[st];
            const int h = ti.x, i0 = ti.y;
            issue_abt_n32<T, HD>(acc_s, sK, BN * 128, sQt + rq0 * 128, BQ * 128); /* Sᵀ = K Qᵀ */
            rdo.wait_full(it);
            issue_abt_n32<T, HD>(acc_dp, sV, BN * 128, sdOt + rq0 * 128, BQ * 128); /* dPᵀ = V dOᵀ */
            wg_wait<1>();
            acc_fence(acc_s);
            const int ia = i0 + rq0; /* this warpgroup's first row */
            const bool full = (ti.z >> cw) & 1; /* rows ia .. ia + 31 see every key of the block */
            uint32_t vis = ~0u;
            fc_score_modf mod = {0.f, 0.f, 0.f};
            float pv[4][4];
            if (MOD) {
                mod = fcc_score_mod_l2(p, b, h);
                dkdv_p<V>(p, mask, score, mod, acc_s, pv, 0, Lt + rq0, ia, Sq, key0, t4, full, vis);
                st_tile_half<T>(sPt, kr, cw, pv);
            } else {
                if (full) dkdv_p<V>(p, mask, score, mod, acc_s, acc_s, 0, Lt + rq0, ia, Sq, key0, t4, true, vis);
                else dkdv_p<V>(p, mask, score, mod, acc_s, acc_s, 0, Lt + rq0, ia, Sq, key0, t4, false, vis);
                st_tile_half<T>(sPt, kr, cw, acc_s);
            }
            fence_proxy_async_smem();
            asm volatile("bar.sync 4, 256;\n" ::: "memory"); /* Pᵀ complete */
            wg_fence();
            issue_tile_ab<T, K>(acc_dv, sPt, sdOt, cw); /* dV += Pᵀ dO */
            wg_commit();
            wg_wait<1>(); /* dPᵀ landed; dV in flight */
            acc_fence(acc_dp);
            if (!MOD && full) dkdv_ds(acc_dp, acc_s, Dt + rq0, t4, true, vis);
            else dkdv_ds(acc_dp, acc_s, Dt + rq0, t4, full, vis);
            st_tile_half<T>(sdSt, kr, cw, acc_dp);
            fence_proxy_async_smem();
            wg_wait<0>();
            acc_fence(acc_dv);
            rdo.release(it);                                 /* dO read by both products */
            asm volatile("bar.sync 4, 256;\n" ::: "memory"); /* dSᵀ complete */
            float acc_dq[8][4];
            issue_dq(acc_dq, sdSt, 0);
            wg_fence();
            issue_tile_ab<T, K>(acc_dk, sdSt, sQt, cw); /* dK += dSᵀ Q */
            wg_commit();
            wg_wait<1>(); /* the first dQ piece landed; dK in flight */
            acc_fence(acc_dq);
            put_dq(acc_dq, 2 * it, i0, std::integral_constant<int, 64>());
            float acc_dq1[W1 / 8][4]; /* the second piece: its own W1 columns (HD = 192: an n32 accumulator) */
            issue_dq(acc_dq1, sdSt, 1);
            wg_wait<0>();
            acc_fence(acc_dq1);
            acc_fence(acc_dk);
            put_dq(acc_dq1, 2 * it + 1, i0, std::integral_constant<int, W1>());
            rq.release(it);
        }

        /* keys key0, key0 + 8; column tile j: piece j / 8 of the warpgroup */
        auto col_of = [&](int j) { return K::piece_col(cw, j >> 3) + (j & 7) * 8 + 2 * t4; };
        if (partial) { /* fp32 dK (unscaled), dV of the chunk */
            float *pk = sp.part + ((((int64_t)b * p.Hkv + hk) * sp.nsb + kb) * sp.nc + id.chunk) * (2 * BN * HD);
            float *pv = pk + BN * HD;
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int r = kr + 8 * hf;
#pragma unroll
                for (int j = 0; j < NJW; ++j) {
                    const int col = col_of(j);
                    *reinterpret_cast<float2 *>(pk + r * HD + col) = make_float2(acc_dk[j][2 * hf], acc_dk[j][2 * hf + 1]);
                    *reinterpret_cast<float2 *>(pv + r * HD + col) = make_float2(acc_dv[j][2 * hf], acc_dv[j][2 * hf + 1]);
                }
            }
            return;
        }
        if (sp.okv) { /* dK, dV through the K and V tiles by TMA stores, as the HD <= 128 kernel */
            asm volatile("bar.sync 4, 256;\n" ::: "memory"); /* both warpgroups' last products have read K and V */
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int key = key0 + 8 * hf, r = kr + 8 * hf;
                float f, fv;
                kv_out_factors<KSCRUB>(mask, bad, anybad, key, n0, Sk, p.scale, f, fv);
#pragma unroll
                for (int j = 0; j < NJW; ++j) {
                    const uint32_t off = sw128_off(r, col_of(j), BN);
                    st_shared_u32(sK + off, Ops<T>::pack(acc_dk[j][2 * hf] * f, acc_dk[j][2 * hf + 1] * f));
                    st_shared_u32(sV + off, Ops<T>::pack(acc_dv[j][2 * hf] * fv, acc_dv[j][2 * hf + 1] * fv));
                }
            }
            fence_proxy_async_smem();
            asm volatile("bar.sync 4, 256;\n" ::: "memory"); /* every column of both warpgroups written */
            if (tid == 128 && n0 < Sk) {
                sv.acquire_stores();
#pragma unroll
                for (int db = 0; db < NDB; ++db)
                    if (db * 64 < p.D) { /* keys ≥ Sk, columns ≥ D clipped */
                        tma_store_4d(sv.mdk, sK + db * BN * 128, db * 64, n0, hk, cb);
                        tma_store_4d(sv.mdv, sV + db * BN * 128, db * 64, n0, hk, cb);
                    }
                bulk_commit();
                bulk_wait_read();
            }
            return;
        }
        T *dkp = static_cast<T *>(a.dk) + fc_attn_key_offset(&a, &sv.s, b, a.sdk, 0, hk);
        T *dvp = static_cast<T *>(a.dv) + fc_attn_key_offset(&a, &sv.s, b, a.sdv, 0, hk);
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int key = key0 + 8 * hf;
            if (key >= Sk) continue;
            T *dkr = dkp + (int64_t)key * a.sdk[1], *dvr = dvp + (int64_t)key * a.sdv[1];
            float f, fv;
            kv_out_factors<KSCRUB>(mask, bad, anybad, key, n0, Sk, p.scale, f, fv);
#pragma unroll
            for (int j = 0; j < NJW; ++j) {
                const int col = col_of(j);
                store_pair(dkr, col, p.D, acc_dk[j][2 * hf] * f, acc_dk[j][2 * hf + 1] * f, p.out_pairs);
                store_pair(dvr, col, p.D, acc_dv[j][2 * hf] * fv, acc_dv[j][2 * hf + 1] * fv, p.out_pairs);
            }
        }
    }
#endif
}

/* dK·scale, dV of the split blocks (Split): the chunks' partials added in
 * chunk order. One CTA of HD / 2 threads per key row (b, hk, kb < nsb, r);
 * with scrub, a key whose K row holds NaN/Inf and that some row sees gets
 * NaN (as the fused kernel's epilogue). */
template <typename T, int HD, int BN>
__global__ void __launch_bounds__(HD / 2) bwd_kv_combine(const __grid_constant__ fcc_attn p, const Split sp,
                                                          bool scrub) {
    const fc_attn &a = p.a;
    int64_t x = blockIdx.x;
    const int r = (int)(x % BN);
    x /= BN;
    const int kb = (int)(x % sp.nsb);
    x /= sp.nsb;
    const int hk = (int)(x % p.Hkv);
    const int64_t b = x / p.Hkv;
    const int key = kb * BN + r, c = 2 * (int)threadIdx.x;
    if (key >= p.Sk) return; /* whole CTA */
    float f = p.scale, fv = 1.f;
    if (scrub) {
        const T *kr = static_cast<const T *>(a.k) + b * a.sk[0] + (int64_t)key * a.sk[1] + (int64_t)hk * a.sk[2];
        bool bad = false;
        for (int d = threadIdx.x; d < p.D; d += HD / 2) bad |= !isfinite(fcc_type<T>::to(kr[d]));
        int64_t r0[2], r1[2];
        if (__syncthreads_or(bad) && fc_key_block_rows(&p.mask, key, key + 1, r0, r1) > 0)
            f = fv = __int_as_float(0x7fc00000);
    }
    if (c >= p.D) return;
    const float *pk = sp.part + (((b * p.Hkv + hk) * sp.nsb + kb) * sp.nc) * (2 * BN * HD) + r * HD + c;
    float2 dk = make_float2(0.f, 0.f), dv = dk;
    for (int ch = 0; ch < sp.nc; ++ch, pk += 2 * BN * HD) {
        const float2 k2 = *reinterpret_cast<const float2 *>(pk), v2 = *reinterpret_cast<const float2 *>(pk + BN * HD);
        dk.x += k2.x;
        dk.y += k2.y;
        dv.x += v2.x;
        dv.y += v2.y;
    }
    T *dkr = static_cast<T *>(a.dk) + b * a.sdk[0] + (int64_t)key * a.sdk[1] + (int64_t)hk * a.sdk[2];
    T *dvr = static_cast<T *>(a.dv) + b * a.sdv[0] + (int64_t)key * a.sdv[1] + (int64_t)hk * a.sdv[2];
    store_pair(dkr, c, p.D, dk.x * f, dk.y * f, p.out_pairs);
    store_pair(dvr, c, p.D, dv.x * fv, dv.y * fv, p.out_pairs);
}

/* dq = scale · dQacc (the fused kernels' fp32 buffer, [B, Hq, Sqp] rows of
 * HD floats, each 64-row tile laid out by dq_piece_off) in T; a row that
 * sees no key gets 0 without a read (no key block visits its tile if no row
 * of the tile sees a key: under dq_copy_first the buffer is not zeroed).
 * A row per TPR threads (HD / 4 rounded up to a power of two), 4 columns a thread: dq_piece_off keeps 4 columns of a
 * multiple of 4 together (pieces ≥ 32 wide, rotations by multiples of 8),
 * so one 16-byte load. A thread takes CV_ROWS rows a step (RPB rows apart),
 * their loads issued before any store, so that enough bytes are in flight
 * (one row a thread and a block per 8 rows ran at ~2.8 TB/s, and its many
 * short blocks cost ~48 µs at 4k even with nothing to load); grid-stride
 * over groups of CV_ROWS · RPB rows, a few blocks an SM. Each row's i and
 * b·Hq + h from one division of 32-bit values where the rows fit, before
 * the loads; b and h from another in the store phase (64-bit divisions per
 * element cost the old one-pair-a-thread kernel half its time). The shape
 * (CvShape) is the host's grid's too (launch). */
template <int HD> struct CvShape {
    static constexpr int ROWS = 4;                                  /* rows a thread a step */
    static constexpr int TPR = HD <= 64 ? 16 : HD <= 128 ? 32 : 64; /* threads a row */
    static constexpr int RPB = 256 / TPR;                           /* rows of one row a thread */
    static constexpr int GR = ROWS * RPB;                           /* rows a block a step */
};
/* Columns c .. c + 3 of a dq row r: scale · x in T. */
template <typename T>
__device__ __forceinline__ void cv_store(const fcc_attn &p, T *r, int c, const float4 &x) {
    if (p.out_vec16) { /* D % 8 == 0, 16-byte rows: c + 3 < D */
        uint2 w;
        w.x = Ops<T>::pack(x.x * p.scale, x.y * p.scale);
        w.y = Ops<T>::pack(x.z * p.scale, x.w * p.scale);
        __stcs(reinterpret_cast<uint2 *>(r + c), w);
    } else {
        store_pair(r, c, p.D, x.x * p.scale, x.y * p.scale, p.out_pairs);
        store_pair(r, c + 2, p.D, x.z * p.scale, x.w * p.scale, p.out_pairs);
    }
}
/* Row i's four fp32 dQ values from column c of its 64-row tile at `tile`
 * (dq_piece_off's layout), or 0 where !ok or the row sees no key under m
 * (keys < Sk): such a row's tile rows were never written. Visibility is
 * checked under a zeroed buffer too (rotated order, unordered mode): one
 * code path, and no load for a row that sees nothing. Loaded and stored
 * (cv_store) with the evict-first hint: each value is read once, and under
 * the dK/dV kernel's last wave (bwd_dq_convert_tiles) its lines should not
 * push out the K/V and Q/dO tiles that wave reuses. */
template <int HD>
__device__ __forceinline__ float4 cv_row(const fc_mask &m, int64_t Sk, const float *tile, int64_t i, int c, bool ok) {
    int64_t se, lo, hi;
    fc_visible_keys(&m, i, &se, &lo, &hi);
    return ok && !fc_tile_empty(se, lo, hi, 0, Sk)
               ? __ldcs(reinterpret_cast<const float4 *>(tile + dq_piece_off(HD, (int)(i & 63), c)))
               : make_float4(0.f, 0.f, 0.f, 0.f);
}
template <typename T, int HD>
__global__ void __launch_bounds__(256) bwd_dq_convert_wgmma(const __grid_constant__ fcc_attn p, const float *dQacc,
                                                            int Sqp) {
    using CS = CvShape<HD>;
    constexpr int CV_ROWS = CS::ROWS, TPR = CS::TPR, RPB = CS::RPB, GR = CS::GR;
    const fc_attn &a = p.a;
    const int64_t nrows = (int64_t)a.B * p.Hq * p.Sq;
    const bool narrow = nrows <= INT_MAX; /* (uniform) rows in 32 bits */
    const int c = (threadIdx.x % TPR) * 4;
    if (c >= HD || c >= p.D) return; /* no barrier below */
    for (int64_t g0 = (int64_t)blockIdx.x * GR + threadIdx.x / TPR; g0 < nrows; g0 += (int64_t)gridDim.x * GR) {
        float4 x[CV_ROWS];
        int64_t bhs[CV_ROWS];
        int is[CV_ROWS];
#pragma unroll
        for (int u = 0; u < CV_ROWS; ++u) {
            const int64_t row = g0 + u * RPB;
            int i = 0;
            int64_t bh = 0;
            if (row < nrows) {
                if (narrow) {
                    const uint32_t r32 = (uint32_t)row, q = r32 / (uint32_t)p.Sq;
                    i = (int)(r32 - q * (uint32_t)p.Sq), bh = q;
                } else {
                    bh = row / p.Sq, i = (int)(row - bh * p.Sq);
                }
            }
            is[u] = i, bhs[u] = bh;
            x[u] = cv_row<HD>(p.mask, p.Sk, dQacc + (bh * Sqp + (i - (i & 63))) * HD, i, c, row < nrows);
        }
#pragma unroll
        for (int u = 0; u < CV_ROWS; ++u) {
            if (g0 + u * RPB >= nrows) break;
            int64_t h, b;
            if (narrow) {
                const uint32_t q = (uint32_t)bhs[u] / (uint32_t)p.Hq;
                h = (uint32_t)bhs[u] - q * (uint32_t)p.Hq, b = q;
            } else {
                h = bhs[u] % p.Hq, b = bhs[u] / p.Hq;
            }
            cv_store(p, static_cast<T *>(a.dq) + b * a.sdq[0] + (int64_t)is[u] * a.sdq[1] + h * a.sdq[2], c, x[u]);
        }
    }
}

/* The convert of the ordered (deterministic) mode on dense rows without
 * Split, launched as a programmatic dependent of the dK/dV kernel: that
 * kernel's CTAs trigger at their start, so this grid is scheduled once all
 * of them have started, onto the SMs their last wave leaves idle (SWA
 * W = 1024 GQA 32/8 16k: 1024 CTAs on 132 SMs, the eighth wave 100 CTAs of
 * ~200 µs). Block k converts the CV_TILES dQ tiles from k·CV_TILES on, in
 * the order the dK/dV grid finishes them (batch, head), each once its
 * counter shows every addition it gets: one a key block visiting it
 * (key_tiles over the tile's rows, the count key_block_ordinal places the
 * blocks in, dq_order_done reaching it after the block's bulk add has
 * completed). Should a count not come within the bound (it always comes;
 * the bound keeps a fault from hanging the device), the block waits for the
 * whole dK/dV grid (fcc_pdl_wait) instead. The last block waits for it
 * before it exits, so that the grid completes after the dK/dV kernel: what
 * follows on the stream sees both. Measured against the convert after the
 * dK/dV kernel (H100, fwd+bwd through flashc.torch, three rounds,
 * benchmarks/NOTES.md): SWA W=1024 +3.4 %, D=128 4k causal +2 %, the
 * GPT-OSS-like row +3 %, dense and GQA 8k causal ±0.5 %, W = 4096 −0.9 %
 * (its dK/dV kernel's long last wave shares L2 with the whole convert). */
constexpr int CV_TILES = 4;
/* sem_reached, then the bulk adds' writes (async proxy) ordered before the
 * block's generic loads (the barrier after it orders the other threads'). */
__device__ __forceinline__ bool sem_reached_async(const int *sem, int n) {
    if (!sem_reached(sem, n)) return false;
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
    return true;
}
template <typename T, int HD, int BN>
__global__ void __launch_bounds__(256) bwd_dq_convert_tiles(const __grid_constant__ fcc_attn p, const float *dQacc,
                                                             const int *dQsem, int Sqp, int64_t ntiles) {
    using CS = CvShape<HD>;
    constexpr int TPR = CS::TPR, RPB = CS::RPB, RT = 64 / RPB; /* a thread's rows of a tile */
    const fc_attn &a = p.a;
    const int c = (threadIdx.x % TPR) * 4, rr = threadIdx.x / TPR;
    const int tph = Sqp / 64; /* tiles a (batch, head) */
    const int64_t t0 = (int64_t)blockIdx.x * CV_TILES, t1 = min(t0 + CV_TILES, ntiles);
    bool counted = true; /* the counters, until one does not come within the bound */
    for (int64_t t = t0; t < t1; ++t) {
        const int64_t bh = t / tph;
        const int i0 = (int)(t - bh * tph) * 64;
        const KeyTiles kt = key_tiles<BN>(p.mask, i0, min(i0 + 64, p.Sq) - 1);
        const int n = (kt.a1 - kt.first) + (kt.b1 - kt.b0);
        /* one thread polls (with the barrier, the block reads after its acquire) */
        if (counted && n > 0 && !__syncthreads_or(threadIdx.x == 0 && sem_reached_async(dQsem + t, n))) {
            fcc_pdl_wait();
            counted = false;
        }
        if (c >= HD || c >= p.D) continue;
        float4 x[RT];
#pragma unroll
        for (int u = 0; u < RT; ++u) { /* every load issued before any store */
            const int i = i0 + rr + u * RPB;
            x[u] = cv_row<HD>(p.mask, p.Sk, dQacc + t * 64 * HD, i, c, i < p.Sq);
        }
        T *dq = static_cast<T *>(a.dq) + (bh / p.Hq) * a.sdq[0] + (bh % p.Hq) * a.sdq[2];
#pragma unroll
        for (int u = 0; u < RT; ++u) {
            const int i = i0 + rr + u * RPB;
            if (i < p.Sq) cv_store(p, dq + (int64_t)i * a.sdq[1], c, x[u]);
        }
    }
    if (blockIdx.x == gridDim.x - 1) fcc_pdl_wait();
}

/* The sequence holding packed query row r: the last b with q_row(b) ≤ r
 * (bisection over cu_q, clamped as fc_attn_seq clamps); −1 before the first. */
__device__ __forceinline__ int64_t rag_seq_of_row(const fc_attn &a, int64_t r) {
    int64_t lo = 0, hi = a.B;
    while (lo < hi) {
        const int64_t mid = (lo + hi) >> 1;
        if (fc_clamp64(a.cu_q[mid * a.scu_q], 0, a.Tq) <= r) lo = mid + 1;
        else hi = mid;
    }
    return lo - 1;
}

/* bwd_dq_convert_wgmma for packed sequences (RAG): dq row r (packed), head h
 * from the buffer tile of its sequence b (the kernel's dq_tile: h·Sqp/64 +
 * q_row/64 + b + i/64). Rows g = r·Hq + h, so that a step's stores are
 * consecutive heads of one row; rows outside every sequence are the gaps
 * kernel's (fcc_bwd_ragged_gaps_run). */
template <typename T, int HD>
__global__ void __launch_bounds__(256) bwd_dq_convert_rag(const __grid_constant__ fcc_attn p, const float *dQacc,
                                                          int Sqp) {
    using CS = CvShape<HD>;
    constexpr int CV_ROWS = CS::ROWS, TPR = CS::TPR, RPB = CS::RPB, GR = CS::GR;
    const fc_attn &a = p.a;
    const int64_t nrows = a.Tq * p.Hq;
    const int c = (threadIdx.x % TPR) * 4;
    if (c >= HD || c >= p.D) return; /* no barrier below */
    for (int64_t g0 = (int64_t)blockIdx.x * GR + threadIdx.x / TPR; g0 < nrows; g0 += (int64_t)gridDim.x * GR) {
        float4 x[CV_ROWS];
        T *out[CV_ROWS];
#pragma unroll
        for (int u = 0; u < CV_ROWS; ++u) {
            const int64_t row = g0 + u * RPB;
            x[u] = make_float4(0.f, 0.f, 0.f, 0.f);
            out[u] = nullptr;
            if (row >= nrows) continue;
            const int64_t r = row / p.Hq, h = row - r * p.Hq, b = rag_seq_of_row(a, r);
            if (b < 0) continue;
            const fc_seq s = fc_attn_seq(&a, b);
            const int64_t i = r - s.q_row;
            if (i >= s.Sq) continue;
            out[u] = static_cast<T *>(a.dq) + fc_attn_row_offset(&s, a.sdq, i, h);
            const int64_t tile = h * (Sqp / 64) + s.q_row / 64 + b + i / 64;
            x[u] = cv_row<HD>(fc_seq_mask(&a, &s), s.Sk, dQacc + tile * 64 * HD, i, c, true);
        }
#pragma unroll
        for (int u = 0; u < CV_ROWS; ++u)
            if (out[u]) cv_store(p, out[u], c, x[u]);
    }
}

/* ------------------------------------------------------------ host */
static int padded(int D) { return D <= 64 ? 64 : D <= 128 ? 128 : D <= 192 ? 192 : 256; }

struct Maps {
    CUtensorMap q, dout, k, v;
    CUtensorMap dk, dv; /* the kernels' TMA stores of dK, dV (64-key boxes), where okv */
    bool okv;
    CUtensorMap *rmaps; /* packed sequences: [B][RM_N] per-sequence maps (bwd_rag_maps), else NULL */
};

/* Scratch of the fused kernel: dQacc [B, Hq, Sqp, HD] fp32 and the
 * ordering semaphores [B, Hq, Sqp / 64] int32, zeroed on the stream (the
 * buffer only where dq_copy_first does not hold). Packed sequences:
 * [Hq, Sqp] and [Hq, Sqp / 64] with Sqp / 64 = Tq / 64 + B + 1 tiles a head
 * (the kernel's dq_tile). */
struct DqScratch {
    float *acc;
    int *sem;
    int Sqp;
    size_t nacc, nsem; /* elements of acc (contiguous with sem) and of sem */
};

/* Query rows that see some key of block kb (of BN keys). */
static int64_t block_rows(const fcc_attn &p, int kb, int BN) {
    int64_t r0[2], r1[2];
    const int n = fc_key_block_rows(&p.mask, (int64_t)kb * BN, std::min((int64_t)kb * BN + BN, (int64_t)p.Sk), r0, r1);
    int64_t rows = 0;
    for (int i = 0; i < n; ++i) rows += r1[i] - r0[i];
    return rows;
}
/* The heavy block to split (Split): block 0 (the sink keys) when more than
 * 3× the rows of the middle block see it, cut into as many chunks as make a
 * chunk about as long as the middle block (at most 32). Only where no CTA
 * waits on a chunk CTA (appended after every regular one): the ordered
 * dQ's ORD_DOWN, where block 0 adds last to every tile, or the unordered
 * dQ — hence block 0 only (a split block 1 would be waited on by block 0). */
static Split plan_split(const fcc_attn &p, int nkb, int order, int dqm, int BN) {
    Split sp = {0, 1, 0, nullptr};
    if (nkb < 4 || (dqm == DQ_ORDERED && order != ORD_DOWN)) return sp;
    const int64_t typ = std::max<int64_t>(block_rows(p, nkb / 2, BN), 64), heavy = block_rows(p, 0, BN);
    if (heavy <= 3 * typ) return sp;
    sp.nsb = 1;
    sp.nc = (int)std::min<int64_t>((heavy + typ - 1) / typ, 32);
    if ((int64_t)nkb * p.Hkv * p.a.B + (int64_t)(sp.nc - 1) * p.Hkv * p.a.B > INT_MAX) sp.nsb = 0, sp.nc = 1;
    return sp;
}

/* The key block of the kernel at HD: 64 keys at HD = 192, 256, else 128. */
static constexpr int block_keys(int HD) { return HD > 128 ? 64 : 128; }

template <typename T, int HD, int V, int DV = HD>
static flashc_status launch(const fcc_attn &p, const Maps &m, const float *Lb, const float *Db, int dqm,
                            const DqScratch &dq) {
    cudaStream_t st = fcc_stream(p.a.stream);
    constexpr int BN = block_keys(HD);
    const int nkb = (p.Sk + BN - 1) / BN; /* packed sequences: the longest one's */
    const int64_t gk = (int64_t)nkb * p.Hkv * p.a.B;
    /* Packed sequences (m.rmaps): the RAG instance, always SCRUB and the
     * decreasing order (ORD_DOWN is safe whatever the grid), no Split. */
    const bool rag = m.rmaps != nullptr;
    /* SCRUB: only where some row misses some key (as the forward). */
    int64_t se0, lo0, hi0, sel, lol, hil;
    fc_visible_keys(&p.mask, 0, &se0, &lo0, &hi0);
    fc_visible_keys(&p.mask, p.Sq - 1, &sel, &lol, &hil);
    const bool scrub = rag || !(hi0 == p.Sk && (lol == 0 || sel == lol));
    /* The order of the dQ additions (ORD_*): DOWN where some row misses
     * some key (causal, window); else ROT where a head's blocks can all be
     * resident (one CTA per SM) and are no more than the tiles, UP past
     * that. */
    int order = scrub ? ORD_DOWN : nkb <= p.dev.sm_count && nkb <= dq.Sqp / 64 ? ORD_ROT : ORD_UP;
    /* The counters zeroed; the fp32 buffer too unless each tile's first
     * addition is a copy (dq_copy_first). Stream-ordered before the kernel. */
    if (dq_copy_first(dqm, order)) FCC_CHECK(cudaMemsetAsync(dq.sem, 0, dq.nsem * sizeof(int), st));
    else FCC_CHECK(cudaMemsetAsync(dq.acc, 0, dq.nacc * sizeof(float) + dq.nsem * sizeof(int), st));
    Split sp = rag ? Split{0, 1, 0, nullptr, 0} : plan_split(p, nkb, order, dqm, BN);
    sp.gk = (int)gk;
    const int64_t grid = gk + (int64_t)sp.nsb * (sp.nc - 1) * p.Hkv * p.a.B;
    if (sp.nsb > 0) { /* the chunks' partials: stream-ordered scratch, every element written by its chunk */
        const size_t n = (size_t)p.a.B * p.Hkv * sp.nsb * sp.nc * 2 * BN * HD;
        FCC_CHECK(fcc_scratch_alloc((void **)&sp.part, n * sizeof(float), st));
    }
    auto run_kv = [&](auto traits) -> flashc_status {
        using KK = decltype(traits);
        void (*kern)(CUtensorMap, CUtensorMap, CUtensorMap, CUtensorMap, CUtensorMap, CUtensorMap, fcc_attn, int,
                     const float *, const float *, float *, int *, int, int, Split, const CUtensorMap *);
        if constexpr (HD > 128)
            kern = rag     ? bwd_wide_wgmma_kernel<T, KK, V, true, true>
                   : scrub ? bwd_wide_wgmma_kernel<T, KK, V, true>
                           : bwd_wide_wgmma_kernel<T, KK, V, false>;
        else if constexpr (DV == HD) /* (packed sequences run D in (64, 96] at DV = HD: dispatch) */
            kern = rag     ? bwd_dkdv_wgmma_kernel<T, KK, V, true, true>
                   : scrub ? bwd_dkdv_wgmma_kernel<T, KK, V, true>
                           : bwd_dkdv_wgmma_kernel<T, KK, V, false>;
        else
            kern = scrub ? bwd_dkdv_wgmma_kernel<T, KK, V, true> : bwd_dkdv_wgmma_kernel<T, KK, V, false>;
        FCC_TRY(fcc_set_smem((const void *)kern, KK::SMEM, "attn_bwd_wgmma (dK/dV)"));
        sp.okv = m.okv ? 1 : 0;
        kern<<<(unsigned)grid, 384, KK::SMEM, st>>>(m.q, m.dout, m.k, m.v, sp.okv ? m.dk : m.k, sp.okv ? m.dv : m.v, p,
                                                     nkb, Lb, Db, dq.acc, dq.sem, dq.Sqp, order, sp, m.rmaps);
        FCC_CHECK_LAUNCH("bwd_dkdv_wgmma_kernel");
        if (sp.nsb > 0) {
            bwd_kv_combine<T, HD, BN><<<(unsigned)((int64_t)p.a.B * p.Hkv * sp.nsb * BN), HD / 2, 0, st>>>(p, sp, scrub);
            FCC_CHECK_LAUNCH("bwd_kv_combine");
        }
        return FLASHC_OK;
    };
    flashc_status s;
    if constexpr (HD > 128)
        s = dqm == DQ_ORDERED ? run_kv(WideTraits<HD, DQ_ORDERED>()) : run_kv(WideTraits<HD, DQ_ATOMIC>());
    else
        s = dqm == DQ_ORDERED ? run_kv(KvTraits<HD, DQ_ORDERED, DV>()) : run_kv(KvTraits<HD, DQ_ATOMIC, DV>());
    if (sp.part) {
        const cudaError_t e = fcc_scratch_free(sp.part, st);
        if (s == FLASHC_OK && e != cudaSuccess) return fcc_cuda_error(e, __FILE__, __LINE__, "fcc_scratch_free");
    }
    FCC_TRY(s);
    constexpr int GR = CvShape<HD>::GR;
    const int64_t cv_rows = rag ? p.a.Tq * p.Hq : (int64_t)p.a.B * p.Hq * p.Sq;
    const int64_t want = (cv_rows + GR - 1) / GR, most = (int64_t)std::max(p.dev.sm_count, 1) * 8;
    const unsigned gc = (unsigned)std::max<int64_t>(want < most ? want : most, 1); /* 8 blocks of 256 an SM, grid-stride past that */
    if (!rag && sp.nsb == 0 && dqm == DQ_ORDERED) { /* right after the dK/dV kernel, its tiles counted */
        const int64_t nt = (int64_t)p.a.B * p.Hq * (dq.Sqp / 64);
        FCC_CHECK(fcc_launch(bwd_dq_convert_tiles<T, HD, BN>, (unsigned)((nt + CV_TILES - 1) / CV_TILES), 256, 0, st,
                             true, p, (const float *)dq.acc, (const int *)dq.sem, dq.Sqp, nt));
    } else if (rag) {
        bwd_dq_convert_rag<T, HD><<<gc, 256, 0, st>>>(p, dq.acc, dq.Sqp);
    } else {
        bwd_dq_convert_wgmma<T, HD><<<gc, 256, 0, st>>>(p, dq.acc, dq.Sqp);
    }
    FCC_CHECK_LAUNCH("bwd_dq_convert_wgmma");
    return FLASHC_OK;
}

template <typename T>
static flashc_status dispatch(const fcc_attn &p, const Maps &m, const float *Lb, const float *Db, int dqm,
                              const DqScratch &dq) {
    return fcc_score_dispatch<FCC_SCORE_FEW>(fc_score_mode(&p.score), [&](auto v) {
        constexpr int V = decltype(v)::value;
        switch (padded(p.D)) {
        case 64: return launch<T, 64, V>(p, m, Lb, Db, dqm, dq);
        case 128: /* packed sequences at HD 128's full width (fewer instances; the maps' zero fill pads) */
            return p.D <= 96 && !m.rmaps ? launch<T, 128, V, 96>(p, m, Lb, Db, dqm, dq) : launch<T, 128, V>(p, m, Lb, Db, dqm, dq);
        case 192: return launch<T, 192, V>(p, m, Lb, Db, dqm, dq);
        default: return launch<T, 256, V>(p, m, Lb, Db, dqm, dq);
        }
    });
}

} // namespace fcwgb

bool fcc_bwd_wgmma_supports(const fcc_attn &p) {
    using namespace fcwgb;
    const fc_attn &a = p.a;
    if (p.dev.cc != 90) return false; /* sm_90a code runs there and nowhere else */
    /* Ragged: packed varlen batches (cu_q and cu_k) through the per-sequence
     * maps (RAG instances); KV caches have no backward. */
    const bool rag = fc_attn_is_ragged(&a);
    if (rag && (!a.cu_q || !a.cu_k || a.seqlen_k || a.block_table || a.kv_batch)) return false;
    if (a.dtype != FLASHC_F16 && a.dtype != FLASHC_BF16) return false;
    if (a.D < 1 || a.D > 256) return false;
    /* Positions are int32; no tensor map of extent 0; TMA reads 16-byte
     * aligned rows of q/k/v/o/dout (vec16: also D % 8 == 0); dq/dk/dv are
     * written in 4-byte pairs. */
    if (!p.fits_int32 || a.Sq == 0 || a.Sk == 0 || a.B == 0 || !p.vec16 || !p.out_pairs) return false;
    /* the maps' batch and row extents: the packed axes [1, T] under RAG */
    const MapExtents ex = map_extents(a);
    const int64_t qe0 = ex.q0, qe1 = ex.q1, ke0 = ex.k0, ke1 = ex.k1;
    if (rag && (qe1 == 0 || ke1 == 0 || qe1 >= ((int64_t)1 << 30) || ke1 >= ((int64_t)1 << 30) ||
                a.B >= ((int64_t)1 << 22))) /* (dQ tiles a head, Tq / 64 + B + 1, times 64 in int32) */
        return false;
    cuuint64_t dims[4], strides[3];
    if (!map_shape(qe0, qe1, a.Hq, a.D, a.sq, dims, strides) ||
        !map_shape(qe0, qe1, a.Hq, a.D, a.sdo, dims, strides) ||
        !map_shape(ke0, ke1, a.Hkv, a.D, a.sk, dims, strides) ||
        !map_shape(ke0, ke1, a.Hkv, a.D, a.sv, dims, strides))
        return false;
    const int64_t gmax = INT_MAX;
    if ((a.Sq + 127) / 128 * a.Hq * a.B > gmax || (a.Sk + 63) / 64 * a.Hkv * a.B > gmax ||
        (a.B * a.Hq * a.Sq + 7) / 8 > gmax)
        return false;
    const int HD = padded((int)a.D);
    const int smem = HD == 64 ? KvTraits<64, DQ_ORDERED>::SMEM
                     : HD == 128 ? KvTraits<128, DQ_ORDERED>::SMEM
                     : HD == 192 ? WideTraits<192, DQ_ORDERED>::SMEM
                                 : WideTraits<256, DQ_ORDERED>::SMEM;
    return smem <= p.dev.smem_optin && encode_fn() != nullptr;
}

flashc_status fcc_bwd_wgmma_run(const fcc_attn &p) {
    using namespace fcwgb;
    const fc_attn &a = p.a;
    const CUtensorMapDataType dt =
        a.dtype == FLASHC_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    const EncodeTiledFn enc = encode_fn();
    const bool rag = fc_attn_is_ragged(&a); /* packed sequences (supports()) */
    const MapExtents ex = map_extents(a);
    const int64_t qe0 = ex.q0, qe1 = ex.q1, ke0 = ex.k0, ke1 = ex.k1;
    Maps m;
    m.rmaps = nullptr;
    if (!enc || !make_map(&m.q, enc, dt, a.q, qe0, qe1, a.Hq, a.D, a.sq, 64) ||
        !make_map(&m.dout, enc, dt, a.dout, qe0, qe1, a.Hq, a.D, a.sdo, 64) ||
        !make_map(&m.k, enc, dt, a.k, ke0, ke1, a.Hkv, a.D, a.sk, 64) ||
        !make_map(&m.v, enc, dt, a.v, ke0, ke1, a.Hkv, a.D, a.sv, 64))
        return fcc_bwd_mma_run(p); /* the driver refused a map supports() accepted: same problem, mma.sync */
    /* dK, dV by TMA stores where their bases and strides allow (64-key boxes) */
    m.okv = ((uintptr_t)a.dk & 15u) == 0 && ((uintptr_t)a.dv & 15u) == 0 &&
            make_map(&m.dk, enc, dt, a.dk, ke0, ke1, a.Hkv, a.D, a.sdk, 64) &&
            make_map(&m.dv, enc, dt, a.dv, ke0, ke1, a.Hkv, a.D, a.sdv, 64);
    cudaStream_t st = fcc_stream(a.stream);
    const int dqm = a.deterministic ? DQ_ORDERED : DQ_ATOMIC;
    const int HD = padded((int)a.D);
    const fcc_rowbuf rb = fcc_rowbuf_of(a);
    const size_t nrows = (size_t)(rb.nb * a.Hq * rb.nq);
    /* dQ tiles a head: packed sequences Tq / 64 + B + 1 (the kernel's dq_tile), else Sq / 64 per (b, h) */
    const int Sqp = rag ? (int)((a.Tq / 64 + a.B + 1) * 64) : (int)((a.Sq + 63) / 64 * 64);
    const size_t nbh = rag ? (size_t)a.Hq : (size_t)a.B * a.Hq;
    const size_t nacc = nbh * Sqp * HD;
    const size_t nsem = nbh * (Sqp / 64);
    DqScratch dq = {nullptr, nullptr, Sqp, nacc, nsem};
    /* one allocation: the per-sequence maps (RAG; 128-byte objects first,
     * the pool's alignment), L, Δ [nrows] fp32, dQacc (16-byte aligned),
     * semaphores */
    const size_t nmap_fl = rag ? (size_t)a.B * RM_N * sizeof(CUtensorMap) / sizeof(float) : 0;
    const size_t off_ld = nmap_fl;
    const size_t off_acc = (off_ld + 2 * nrows + 3) & ~(size_t)3;
    const size_t bytes = (off_acc + nacc) * sizeof(float) + nsem * sizeof(int);
    float *scr = nullptr;
    FCC_CHECK(fcc_scratch_alloc((void **)&scr, bytes, st));
    float *Lb = scr + off_ld, *Db = Lb + nrows;
    dq.acc = scr + off_acc;
    dq.sem = reinterpret_cast<int *>(dq.acc + nacc);
    flashc_status s = FLASHC_OK;
    if (rag) {
        m.rmaps = reinterpret_cast<CUtensorMap *>(scr);
        const int64_t n = a.B * RM_N;
        bwd_rag_maps<<<(unsigned)((n + 127) / 128), 128, 0, st>>>(m.q, m.dout, m.k, m.v, m.okv ? m.dk : m.k,
                                                                   m.okv ? m.dv : m.v, p, m.rmaps);
        const cudaError_t le = cudaGetLastError();
        if (le != cudaSuccess) s = fcc_cuda_error(le, __FILE__, __LINE__, "launch of bwd_rag_maps");
    }
    if (s == FLASHC_OK) s = fcc_bwd_prep_run(p, Lb, Db);
    if (s == FLASHC_OK) s = fcc_bwd_dsinks_run(p, Lb, Db);
    if (s == FLASHC_OK)
        s = a.dtype == FLASHC_BF16 ? dispatch<__nv_bfloat16>(p, m, Lb, Db, dqm, dq)
                                   : dispatch<__half>(p, m, Lb, Db, dqm, dq);
    /* Stream-ordered: freed after the kernels above have run. */
    const cudaError_t e = fcc_scratch_free(scr, st);
    if (s == FLASHC_OK && e != cudaSuccess) return fcc_cuda_error(e, __FILE__, __LINE__, "fcc_scratch_free");
    return s;
}
