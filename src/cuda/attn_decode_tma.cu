/*
 * attn_decode_tma.cu — the split-KV decode forward on Hopper (sm_90a code,
 * compute capability 9.0 only): the key tiles arrive by TMA, whole tiles per
 * instruction, instead of cp.async issued by the consumer warps
 * (attn_decode.cu). Rows, the tile step, the merge, the splits and the
 * combine are attn_decode.cuh's, shared with that kernel.
 *
 *   q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D], KV caches [Bk, Sc, Hkv, D] with
 *   per-sequence lengths, packed keys [Tk, Hkv, D] (cu_seqlens_k) or pages
 *   [pages, page_size, Hkv, D] (page_size a multiple of 16; other sizes take
 *   the cp.async kernel, attn_decode.cu) -> o, lse.
 *
 * Why. The cp.async kernel keeps at most (stages − 1) 16-key tiles a warp in
 * flight and spends its warps' issue slots on 16-byte copies. Here one
 * producer lane keeps a ring of ~96 KB a CTA (two CTAs an SM) of K/V tiles
 * in flight from the first cycle and the three consumer warps only compute.
 * Measured (H200, kernel µs, bf16 Hq 32 Hkv 8 D 128, cuDNN's in the same
 * run; benchmarks/NOTES.md): B = 1 Sk = 8k 12.5 → 9.5 (cuDNN 8.2); at B ≥ 16
 * the ring alone read at 4.0–4.1 TB/s like the cp.async kernel, and without
 * the tensor maps' L2 promotion at 4.4–4.6 (cuDNN 4.5–4.6).
 *
 * CTA: warp 0 = producer (lane 0 issues every TMA load), warps 1..3 =
 * consumers. Key tiles of BN = 32 keys go through a ring of ST stages (K
 * tile then V tile, NDB blocks of [BN][64] elements each, 128B-swizzled as
 * TMA writes them); tile n of the CTA's split is in stage n % ST and is run
 * by consumer warp n % NW, which releases the stage (`empty`, one arrival)
 * once it has read it; the producer refills it in tile order. No CTA barrier
 * in the loop.
 *
 * Keys past a sequence's end inside a tile: zeros where they lie past the
 * tensor's extent (TMA's out-of-bounds fill), else whatever the cache or
 * the packed batch holds there — masked, and their V values scrubbed of
 * NaN/Inf on those (partial) tiles by the tile step, as the keys a row
 * cannot see (attn_fwd_tile.cuh). Paged: a tile is one box from one page
 * where the page size is a multiple of BN, else (page sizes 16, 48, 80, ...)
 * two boxes of 16 rows, each inside one page; block table entries clamped to
 * [0, Bk) (fc_attn_page), boxes past the sequence's end take its last key's.
 */
#include "attn_decode.cuh"
#include "attn_wgmma.cuh"

#include <limits.h>

namespace fcdec {
using fcwg::make_map;
using fcwg::mbar_arrive;
using fcwg::mbar_expect_tx;
using fcwg::mbar_fence_init;
using fcwg::mbar_init;
using fcwg::mbar_wait;
using fcwg::tma_load_4d;

/* Keys a tile (64 or 128: no faster, measured) and consumer warps a CTA,
 * the same at every head dim (the plan's split count uses both). */
constexpr int TMA_BN = 32, TMA_NW = 3;

template <int HD_, int MT_> struct TmaTraits {
    static constexpr int HD = HD_, MT = MT_;
    static constexpr int NW = TMA_NW;        /* consumer warps (ST % NW == 0, below) */
    static constexpr int NT = 32 * (1 + NW); /* + the producer warp */
    static constexpr int BN = TMA_BN;
    static constexpr int RB = 16 * MT;       /* query rows a CTA */
    static constexpr int LD = HD + 8;        /* Q's smem pitch (elements): conflict-free ldmatrix */
    static constexpr int LDF = HD + 8;       /* merge rows (floats) */
    static constexpr int NDB = HD / 64;      /* 64-column (128-byte) blocks of a row */
    static constexpr int KV_BYTES = BN * HD * 2;
    static constexpr int STAGE = 2 * KV_BYTES; /* K tile then V tile */
    /* ~96 KB of stages a CTA, two CTAs an SM (one CTA with 192 KB: no faster, measured) */
    static constexpr int ST = (96 * 1024) / STAGE; /* 12 / 6 / 3 stages at HD 64 / 128 / 256 */
    static constexpr size_t RING_BYTES = (size_t)ST * STAGE;
    static constexpr size_t Q_BYTES = (size_t)RB * LD * 2;
    static constexpr size_t MERGE_BYTES = merge_bytes(NW, RB, LDF);
    /* ring (1024-byte aligned: the swizzle atoms), then Q; the ring is the merge area after the loop */
    static constexpr size_t SMEM = 1024 + (RING_BYTES > MERGE_BYTES ? RING_BYTES : MERGE_BYTES) + Q_BYTES;
    static_assert(ST >= 2 && KV_BYTES % 1024 == 0 && (HD == 64 || HD == 128 || HD == 256), "tile shape");
    /* Every stage belongs to one warp (tile n: stage n % ST, warp n % NW), so a warp waits on a
     * stage's `full` barrier at most one phase ahead of it: a parity wait two phases ahead would
     * pass on the phase before (measured: with 6 stages over 4 warps, a warp overtook a tile that
     * had not landed and the kernel faulted at B = 16, Sk = 8k). */
    static_assert(ST % NW == 0, "one warp per stage");
};

/* f(K{}) for (HD, MT), as attn_decode.cu's with_traits. */
template <class F> static auto with_tma_traits(int HD, int MT, F &&f) {
    if (HD == 64) return MT == 1 ? f(TmaTraits<64, 1>{}) : f(TmaTraits<64, 2>{});
    if (HD == 128) return MT == 1 ? f(TmaTraits<128, 1>{}) : f(TmaTraits<128, 2>{});
    return f(TmaTraits<256, 1>{});
}

/* The consumer warps' own barrier (named barrier 1, their 32·NW threads). */
template <int NW> __device__ __forceinline__ void consumers_sync() {
    asm volatile("bar.sync 1, %0;\n" ::"n"(32 * NW) : "memory");
}

/* One CTA: row block, key split, kv head, sequence (DecCta). PAGED: k/v are
 * pages of a multiple of 16 rows (supports()), read through the block table
 * in boxes of pb rows (the maps' box: BN where it divides the page size,
 * else 16), each inside one page. */
template <typename T, class K, bool MOD, bool PAGED>
__global__ void __launch_bounds__(K::NT, 2)
    attn_decode_tma_kernel(const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv,
                           const __grid_constant__ fcc_attn p, const DecArgs da, const int pb) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BN = K::BN, RB = K::RB, NW = K::NW, ST = K::ST, NDB = K::NDB;
    extern __shared__ unsigned char smem_raw[];
    __shared__ __align__(8) uint64_t bars[2 * ST]; /* full[ST], empty[ST] */
    const uint32_t raw = smem_u32(smem_raw);
    const uint32_t base = (raw + 1023u) & ~1023u;
    unsigned char *ring = smem_raw + (base - raw);
    T *sQ = reinterpret_cast<T *>(ring + (K::RING_BYTES > K::MERGE_BYTES ? K::RING_BYTES : K::MERGE_BYTES));
    const uint32_t full = smem_u32(&bars[0]), empty = smem_u32(&bars[ST]);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    fcc_pdl_trigger();
    DecCta<RB, BN> c;
    if (!c.init(p, da)) return; /* (uniform over the CTA) */
    const int nt = c.k1 - c.k0;
    if (tid == 0) {
        /* the descriptors into the TMA unit's cache while the barriers are set up */
        asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tk)) : "memory");
        asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tv)) : "memory");
        for (int s = 0; s < ST; ++s) {
            mbar_init(full + 8 * s, 1);  /* the producer's expect_tx */
            mbar_init(empty + 8 * s, 1); /* the consuming warp's lane 0 */
        }
        mbar_fence_init();
    }
    __syncthreads();

    if (warp == 0) {
        /* ------------------------------------------------ producer */
        if (lane == 0) {
            const fc_attn &a = p.a;
            const int Sk = (int)c.seq.Sk;
            /* Boxes a tile: 1, or 2 of 16 rows (pages whose size BN does not divide). Box h
             * of a tile lands at row h·pb of each of its [BN][64] blocks: whole 8-row
             * swizzle atoms, so the consumers' addressing is the same either way. */
            const int nb = PAGED ? BN / pb : 1;
            const int jlast = PAGED ? (Sk - 1) / pb * pb : 0; /* Sk ≥ 1: the split has tiles */
            fcc_pdl_wait(); /* the KV append's cache rows (a no-op unless launched dependent) */
            for (int n = 0; n < nt; ++n) {
                const int s = n % ST;
                /* The tile's coordinates (paged: its table entries, loaded here) before the
                 * wait for its stage: the loads' latency under the wait, not after it. */
                const int key0 = c.tile_key0(c.k0 + n);
                int row[2], b4[2];
                if (PAGED) {
                    /* Box h's pb keys lie in one page (pb divides the page size and the
                     * box's first key); past the sequence's end, the box of its last key. */
                    const int ps = (int)a.page_size;
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int j = min(key0 + h * pb, jlast);
                        const int pi = j / ps;
                        b4[h] = h < nb ? (int)fc_attn_page(&a, c.b, pi) : 0;
                        row[h] = j - pi * ps;
                    }
                } else {
                    row[0] = (int)c.seq.k_row + key0;
                    b4[0] = (int)c.seq.kb;
                }
                if (n >= ST) mbar_wait(empty + 8 * s, ((n / ST) - 1) & 1);
                mbar_expect_tx(full + 8 * s, K::STAGE);
                const uint32_t dk = base + s * K::STAGE, dv = dk + K::KV_BYTES;
#pragma unroll
                for (int db = 0; db < NDB; ++db) {
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        if (h >= nb) break;
                        const uint32_t off = db * BN * 128 + h * pb * 128;
                        tma_load_4d(dk + off, &tk, full + 8 * s, db * 64, row[h], c.hk, b4[h]);
                        tma_load_4d(dv + off, &tv, full + 8 * s, db * 64, row[h], c.hk, b4[h]);
                    }
                }
            }
        }
        return;
    }

    /* ------------------------------------------------ consumers */
    const int cw = warp - 1, ctid = tid - 32;
    load_q_block<T, K::HD, RB, 32 * NW>(sQ, p, c.seq, c.hk, c.r0, c.nr, ctid);
    cp_async_commit();
    cp_async_wait<0>();
    consumers_sync<NW>();
    DecWarp<T, K, MOD> w;
    w.init(p, c, smem_u32(sQ), lane);
    w.load_q();

    /* ldmatrix addresses in the 128B-swizzled tiles: row r's 16-byte chunk
     * q sits at chunk q ^ (r % 8); every lane's rows are ≡ lane (mod 8). */
    const uint32_t sw = lane & 7;
    const uint32_t krow = (((lane >> 4) * 8) + (lane & 7)) * 128, kch = (lane >> 3) & 1;
    const uint32_t vrow = ((((lane >> 3) & 1) * 8) + (lane & 7)) * 128, vch = lane >> 4;
    for (int n = cw; n < nt; n += NW) {
        const int s = n % ST;
        mbar_wait(full + 8 * s, (n / ST) & 1);
        const uint32_t sK = base + s * K::STAGE, sV = sK + K::KV_BYTES;
        w.tile(
            c.tile_key0(c.k0 + n),
            [=](int kk, int jj) {
                return sK + (kk >> 2) * BN * 128 + jj * 16 * 128 + krow + ((((kk & 3) * 2 + kch) ^ sw) << 4);
            },
            [=](int kk, int dd) {
                return sV + (dd >> 2) * BN * 128 + kk * 16 * 128 + vrow + ((((dd & 3) * 2 + vch) ^ sw) << 4);
            });
        __syncwarp(); /* every lane's reads of the stage are done */
        if (lane == 0) mbar_arrive(empty + 8 * s);
    }
    consumers_sync<NW>(); /* every tile consumed (so every load landed): the ring becomes the merge area */
    w.template merge<32 * NW>(p, da, c, reinterpret_cast<float *>(ring), cw, ctid,
                              [] { consumers_sync<NW>(); });
#endif
}

static size_t tma_smem_of(int HD, int MT) {
    return with_tma_traits(HD, MT, [](auto k) { return decltype(k)::SMEM; });
}
/* attn_decode.cu's plan with this kernel's tiles and CTA. The split count
 * counts one CTA slot an SM although two fit: a work unit a CTA as soon as
 * the units fill 0.8 of the SMs (B·Hkv = 128 on 132 SMs: one split, no
 * combine kernel), and the SM's second CTA takes another unit. Measured
 * against two slots an SM (two splits at B = 16): B = 16, Sk = 8k 124.9 →
 * 120.6 µs, the other decode rows equal or better. */
static DecPlan make_tma_plan(const fcc_attn &p) {
    return decode_plan(p, TMA_BN, TMA_NW, tma_smem_of, 1);
}


template <typename T, class K>
static flashc_status run(const fcc_attn &p, const DecPlan &pl, const CUtensorMap &tk, const CUtensorMap &tv,
                         int pb) {
    DecArgs da;
    float *scr;
    FCC_TRY(decode_scratch(p, pl, &da, &scr));
    const bool mod = !p.plain_score || !p.scale_pos, paged = p.a.block_table != nullptr;
    auto kern = mod ? (paged ? attn_decode_tma_kernel<T, K, true, true> : attn_decode_tma_kernel<T, K, true, false>)
                    : (paged ? attn_decode_tma_kernel<T, K, false, true> : attn_decode_tma_kernel<T, K, false, false>);
    flashc_status s = fcc_set_smem((const void *)kern, K::SMEM, "attn_decode_tma");
    if (s == FLASHC_OK) {
        const cudaError_t e = fcc_launch(kern, (unsigned)pl.grid, K::NT, K::SMEM, fcc_stream(p.a.stream),
                                         dec_after_append(p), tk, tv, p, da, pb);
        if (e != cudaSuccess) s = fcc_cuda_error(e, __FILE__, __LINE__, "launch of attn_decode_tma_kernel");
    }
    return decode_combine(p, pl, da, scr, s);
}

} // namespace fcdec

bool fcc_fwd_decode_tma_supports(const fcc_attn &p) {
    using namespace fcdec;
    const fc_attn &a = p.a;
    if (p.dev.cc != 90) return false; /* sm_90a code runs there and nowhere else */
    /* TMA: 16-byte aligned rows and strides (vec16), D % 8 == 0 (vec16), int32 coordinates. */
    if (!p.vec16 || fcwg::encode_fn() == nullptr) return false;
    /* Paged: page sizes that are multiples of 16 (boxes of 16 rows where BN does not
     * divide the page: page_box). Where pages of 16 first ran in 16-row boxes (sixteenth
     * session) the producer loaded a tile's table entries after the wait for its stage
     * and read at 3.05 TB/s against 3.85 for the cp.async kernel; with the entries
     * loaded before the wait (H100, B=16 Sk=8k, kernel µs, shuffled pages): pages of
     * 16 / 48 / 80 185 / 182 / 180 against 196 / 192 / 191 on the cp.async kernel,
     * dense 177 (benchmarks/NOTES.md, thirty-first session). */
    if (a.block_table && a.page_size % 16 != 0) return false;
    const fcwg::MapExtents ex = fcwg::map_extents(a); /* k/v: axis 0 batch, cache rows or pages; axis 1 keys */
    const int64_t e0 = ex.k0, e1 = ex.k1;
    if (e0 > INT_MAX || e1 > INT_MAX - 256) return false;
    cuuint64_t dims[4], strides[3];
    if (!fcwg::map_shape(e0, e1, a.Hkv, a.D, a.sk, dims, strides) ||
        !fcwg::map_shape(e0, e1, a.Hkv, a.D, a.sv, dims, strides))
        return false;
    return make_tma_plan(p).ok;
}

/* Rows of a K/V box: the tile, or 16 for pages the tile does not divide. */
static int page_box(const fc_attn &a) {
    return a.block_table && a.page_size % fcdec::TMA_BN != 0 ? 16 : fcdec::TMA_BN;
}

flashc_status fcc_fwd_decode_tma_run(const fcc_attn &p) {
    using namespace fcdec;
    const fc_attn &a = p.a;
    const int pb = page_box(a);
    const DecPlan pl = make_tma_plan(p);
    if (!pl.ok) return fcc_error(FLASHC_ERR_INTERNAL, "attn_decode_tma: run without supports()");
    const CUtensorMapDataType dt =
        a.dtype == FLASHC_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    const fcwg::MapExtents ex = fcwg::map_extents(a); /* k/v: axis 0 batch, cache rows or pages; axis 1 keys */
    const int64_t e0 = ex.k0, e1 = ex.k1;
    CUtensorMap tk, tv;
    const fcwg::EncodeTiledFn enc = fcwg::encode_fn();
    /* No L2 promotion: every key row is read once, in 128-byte boxes; promoted to 256 bytes the
     * same loads ran at 4.0–4.1 TB/s instead of 4.4–4.5 (B ≥ 16, H200; cuDNN 4.5). */
    if (!enc || !make_map(&tk, enc, dt, a.k, e0, e1, a.Hkv, a.D, a.sk, pb, CU_TENSOR_MAP_L2_PROMOTION_NONE) ||
        !make_map(&tv, enc, dt, a.v, e0, e1, a.Hkv, a.D, a.sv, pb, CU_TENSOR_MAP_L2_PROMOTION_NONE))
        return fcc_fwd_decode_run(p); /* the driver refused a map supports() accepted: the cp.async kernel */
    return with_tma_traits(pl.HD, pl.MT, [&](auto k) {
        using K = decltype(k);
        if (a.dtype == FLASHC_BF16) return run<__nv_bfloat16, K>(p, pl, tk, tv, pb);
        return run<__half, K>(p, pl, tk, tv, pb);
    });
}
