/*
 * attn_decode.cu — split-KV attention forward for few query rows per KV head
 * (decode, speculative and chunked decode), F16/BF16 on sm_80+ (mma.sync
 * m16n8k16), for dense batches, KV caches and paged caches alike; on sm_90
 * the plan prefers attn_decode_tma.cu where its tensor maps apply. Rows,
 * the tile step, the merge and the scratch: attn_decode.cuh.
 *
 *   q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D] (or a ragged batch: fc_attn_seq,
 *   fc_attn_key_offset) -> o like q, lse [B, Hq, Sq] (f32)
 *
 * Keys. The key tiles (BN = 16 keys) that the block's rows may see are cut
 * into nsplit equal ranges, one per CTA: grid = (row block, split, hk, b).
 * Inside a CTA the NW warps take the split's tiles round-robin; each warp
 * streams its tiles through its own ring of ST shared-memory stages with
 * cp.async (no CTA barrier in the loop: a warp waits for its own copies and
 * __syncwarp()s), keeping (ST−1) tiles of K and V in flight per warp, and
 * runs the tile step of attn_decode.cuh on each.
 *
 * Sequences. Lengths, row and key origins come from fc_attn_seq, key rows
 * through fc_attn_key_offset (paged: the page of a key via the block table,
 * any page size), one key row per lane (load_kv_tile). Keys at or past a
 * sequence's end are never read (zero-filled in shared memory and masked),
 * so garbage there has no effect. The split count comes from the longest sequence (p.a.Sk); a split
 * whose keys lie past a short sequence's end writes an empty partial
 * (m = −inf, O not written and never read).
 */
#include "attn_decode.cuh"
#include "common/host_prof.h"

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
    static constexpr size_t MERGE_BYTES = merge_bytes(NW, RB, LDF);
    static constexpr size_t SMEM = Q_BYTES + (RING_BYTES > MERGE_BYTES ? RING_BYTES : MERGE_BYTES);
    static_assert(HD % 16 == 0 && HD <= 256 && BN % 16 == 0 && ST >= 2, "tile shape");
    static_assert(RB <= NT, "one thread per row in the merge");
    static_assert(Q_BYTES % 16 == 0 && (STAGE * 2) % 16 == 0, "16-byte aligned smem rows");
};

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

/* One CTA: row block rb, key split `split` of (kv head hk, sequence b);
 * MOD: DecWarp's. */
template <typename T, class K, bool MOD>
__global__ void __launch_bounds__(K::NT) attn_decode_kernel(const __grid_constant__ fcc_attn p, const DecArgs da) {
    constexpr int BN = K::BN, LD = K::LD, RB = K::RB, NW = K::NW, ST = K::ST;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *sQ = reinterpret_cast<T *>(smem_raw);
    T *ring = sQ + RB * LD;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const fc_attn &a = p.a;
    fcc_pdl_trigger();
    DecCta<RB, BN> c;
    if (!c.init(p, da)) return;
    fcc_pdl_wait(); /* the KV append's cache rows (a no-op unless launched dependent) */
    DecWarp<T, K, MOD> w;
    w.init(p, c, smem_u32(sQ), lane);

    /* Per-warp pipeline: warp tiles k0 + warp + NW·n, n < nt, tile n in stage n % ST. */
    const T *Kg = static_cast<const T *>(a.k);
    const T *Vg = static_cast<const T *>(a.v);
    T *wring = ring + warp * ST * K::STAGE;
    const int nt = c.k0 + warp < c.k1 ? (c.k1 - c.k0 - warp + NW - 1) / NW : 0;
    auto tile_of = [&](int n) { return c.k0 + warp + n * NW; };
    auto issue = [&](int n) {
        if (n < nt)
            load_kv_tile<T, K>(wring + (n % ST) * K::STAGE, Kg, Vg, a, c.seq, c.b, c.hk, c.tile_key0(tile_of(n)),
                               w.Sk, p.D, p.vec16, lane);
        cp_async_commit(); /* one group per tile slot, empty or not: the wait counts stay uniform */
    };

    load_q_block<T, K::HD, RB, K::NT>(sQ, p, c.seq, c.hk, c.r0, c.nr, tid);
    cp_async_commit();
#pragma unroll 1
    for (int n = 0; n < ST - 1; ++n) issue(n);
    cp_async_wait<ST - 1>(); /* this thread's Q copies landed (the oldest group) ... */
    __syncthreads();         /* ... and everyone's */
    w.load_q();

    const int k_off = ((lane >> 4) * 8 + (lane & 7)) * LD + ((lane >> 3) & 1) * 8;
    const int v_off = (((lane >> 3) & 1) * 8 + (lane & 7)) * LD + (lane >> 4) * 8;
    for (int n = 0; n < nt; ++n) {
        cp_async_wait<ST - 2>(); /* tile n landed (this lane's copies) ... */
        __syncwarp();            /* ... all lanes'; and every lane is done with stage (n − 1) % ST */
        issue(n + ST - 1);
        const uint32_t sKa = smem_u32(wring + (n % ST) * K::STAGE), sVa = sKa + BN * LD * 2;
        w.tile(
            c.tile_key0(tile_of(n)), [=](int kk, int jj) { return sKa + 2 * (k_off + jj * 16 * LD + kk * 16); },
            [=](int kk, int dd) { return sVa + 2 * (v_off + kk * 16 * LD + dd * 16); });
    }
    cp_async_wait<0>(); /* only empty groups can be left; none may target the ring below */
    __syncthreads();    /* every warp is done with its ring: it becomes the merge area */
    w.template merge<K::NT>(p, da, c, reinterpret_cast<float *>(ring), warp, tid,
                            [] { __syncthreads(); });
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
    const uint32_t row = blockIdx.x; /* 32-bit index arithmetic: the grid is ≤ INT_MAX CTAs (decode_plan) */
    const fc_attn &a = p.a;
    const int r = (int)(row % (uint32_t)da.rmax);
    const int hk = (int)(row / (uint32_t)da.rmax % (uint32_t)p.Hkv);
    const int64_t b = (int64_t)(row / (uint32_t)da.rmax / (uint32_t)p.Hkv);
    const fc_seq seq = fc_attn_seq(&a, b);
    const int G = p.group, D = p.D, n = da.nsplit;
    if (r >= G * (int)seq.Sq) return; /* (uniform over the CTA) */
    const int i = r / G;
    const int64_t h = (int64_t)hk * G + r % G;

    const int64_t P0 = part_index(da, b, hk, p.Hkv, 0, r), PS = da.rmax; /* partial s at P0 + s·PS */
    /* This warp's first O rows (splits w + 4u) are loaded before their weights are known (one
     * memory round trip instead of two); an empty partial's row (never written) is dropped by
     * the select below, not multiplied (it may hold NaN). */
    float v[CMB_UNROLL][CD];
    auto load_o = [&](int s0) {
#pragma unroll
        for (int u = 0; u < CMB_UNROLL; ++u) {
            const int sp = s0 + u * CMB_WARPS;
            const float *po = da.part_o + (P0 + (int64_t)sp * PS) * D;
#pragma unroll
            for (int c = 0; c < CD; ++c) v[u][c] = sp < n && lane + 32 * c < D ? po[lane + 32 * c] : 0.f;
        }
    };
    fcc_pdl_wait(); /* the split kernel's partials (a no-op unless launched dependent) */
    load_o(w);
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
        if (s0 != w) load_o(s0);
#pragma unroll
        for (int u = 0; u < CMB_UNROLL; ++u) {
            const int sp = s0 + u * CMB_WARPS;
            const float xs = sp < n ? wsh[sp] : 0.f;
#pragma unroll
            for (int c = 0; c < CD; ++c) acc[c] = fmaf(xs != 0.f ? v[u][c] : 0.f, xs, acc[c]);
        }
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

/* f(K{}) for the tile shape of (HD, MT). Stages: enough K/V in flight per
 * SM (2 CTAs × 4 warps × (ST − 1) tiles ≥ 64 KB at HD 64/128) while two
 * CTAs fit 227 KB (sm_90); HD 256: one CTA, 2 stages (fits sm_80's 163 KB). */
template <class F> static auto with_traits(int HD, int MT, F &&f) {
    if (HD == 64) return MT == 1 ? f(DecTraits<64, 1, 5>{}) : f(DecTraits<64, 2, 5>{});
    if (HD == 128) return MT == 1 ? f(DecTraits<128, 1, 3>{}) : f(DecTraits<128, 2, 3>{});
    return f(DecTraits<256, 1, 2>{});
}

} // namespace fcdec

fcdec::DecPlan fcdec::decode_plan(const fcc_attn &p, int bn, int nw, size_t (*smem_of)(int HD, int MT),
                                  int max_per_sm) {
    const fc_attn &a = p.a;
    DecPlan pl = {};
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
    pl.smem = smem_of(pl.HD, pl.MT);
    if (pl.smem > (size_t)p.dev.smem_optin) return pl;
    /* Keys a row block may see: all, or the window's span and the sinks. */
    int64_t keys = a.Sk;
    if (a.wl >= 0 && a.wl < a.Sk) { /* (sides clamped to the sequence: no overflow for huge windows) */
        const int64_t wr = a.wr >= 0 && a.wr < a.Sk ? a.wr : a.Sk, ns = a.n_sink < a.Sk ? a.n_sink : a.Sk;
        const int64_t span = a.wl + a.Sq + wr + ns;
        keys = span < keys ? span : keys;
    }
    const int64_t per_sm = (p.dev.smem_optin + 1024) / ((int64_t)pl.smem + 1024); /* + the per-block reserve */
    const int64_t slots = (int64_t)p.dev.sm_count * (per_sm < 1 ? 1 : per_sm > max_per_sm ? max_per_sm : per_sm);
    pl.nsplit = fcc_decode_splits(a.B * a.Hkv * pl.nrb, (keys + bn - 1) / bn, slots, nw);
    pl.grid = a.B * a.Hkv * pl.nrb * pl.nsplit;
    pl.combine_grid = a.B * a.Hkv * rmax; /* one CTA per row */
    pl.ok = pl.grid <= INT_MAX && pl.combine_grid <= INT_MAX;
    return pl;
}

flashc_status fcdec::decode_scratch(const fcc_attn &p, const DecPlan &pl, DecArgs *da, float **scr) {
    *da = {pl.nsplit, pl.nrb, pl.rmax, nullptr, nullptr};
    *scr = nullptr;
    if (pl.nsplit > 1) {
        const size_t n = (size_t)(p.a.B * p.Hkv * pl.nsplit) * (size_t)pl.rmax;
        FCC_CHECK(fcc_scratch_alloc((void **)scr, n * (2 + (size_t)p.D) * sizeof(float), fcc_stream(p.a.stream)));
        da->part_ml = *scr;
        da->part_o = *scr + 2 * n;
    }
    FC_PROF_MARK(fcc_prof_marks, 4);
    return FLASHC_OK;
}

flashc_status fcdec::decode_combine(const fcc_attn &p, const DecPlan &pl, const DecArgs &da, float *scr,
                                    flashc_status s) {
    cudaStream_t st = fcc_stream(p.a.stream);
    if (s == FLASHC_OK && pl.nsplit > 1) {
        const unsigned grid = (unsigned)pl.combine_grid, block = 32 * CMB_WARPS;
        const bool pdl = p.dev.cc >= 90; /* (fcc_pdl_wait) */
        const cudaError_t e =
            p.a.dtype == FLASHC_BF16
                ? fcc_launch(attn_decode_combine_kernel<__nv_bfloat16>, grid, block, 0, st, pdl, p, da)
                : fcc_launch(attn_decode_combine_kernel<__half>, grid, block, 0, st, pdl, p, da);
        if (e != cudaSuccess) s = fcc_cuda_error(e, __FILE__, __LINE__, "launch of attn_decode_combine_kernel");
    }
    FC_PROF_MARK(fcc_prof_marks, 7);
    if (scr) {
        /* Stream-ordered: freed after the kernels above have run. */
        const cudaError_t e = fcc_scratch_free(scr, st);
        if (s == FLASHC_OK && e != cudaSuccess) return fcc_cuda_error(e, __FILE__, __LINE__, "fcc_scratch_free");
    }
    FC_PROF_MARK(fcc_prof_marks, 8);
    return s;
}

namespace fcdec {
static size_t smem_of(int HD, int MT) {
    return with_traits(HD, MT, [](auto k) { return decltype(k)::SMEM; });
}
static DecPlan make_plan(const fcc_attn &p) {
    return decode_plan(p, DecTraits<64, 1, 5>::BN, DecTraits<64, 1, 5>::NW, smem_of, 4);
}

template <typename T, class K> static flashc_status run(const fcc_attn &p, const DecPlan &pl) {
    DecArgs da;
    float *scr;
    FCC_TRY(decode_scratch(p, pl, &da, &scr));
    const bool mod = !p.plain_score || !p.scale_pos;
    auto kern = mod ? attn_decode_kernel<T, K, true> : attn_decode_kernel<T, K, false>;
    flashc_status s = fcc_set_smem((const void *)kern, K::SMEM, "attn_decode");
    if (s == FLASHC_OK) {
        const cudaError_t e = fcc_launch(kern, (unsigned)pl.grid, K::NT, K::SMEM, fcc_stream(p.a.stream),
                                         dec_after_append(p), p, da);
        if (e != cudaSuccess) s = fcc_cuda_error(e, __FILE__, __LINE__, "launch of attn_decode_kernel");
    }
    return decode_combine(p, pl, da, scr, s);
}

} // namespace fcdec

/* Splits of the keys per work unit (row block × kv head × sequence): one when
 * the units alone fill 0.8 of a wave of CTA slots (sm_count × CTAs per SM);
 * else the smallest count whose waves are ≥ 95 % as full as the best one's
 * (FlashAttention's num_splits_heuristic takes 85 %: on the H200, B=1 Hkv 8
 * got 15 splits of 17–18 tiles instead of 16 of 16, and 4k keys ran 0.4 µs
 * longer, benchmarks/NOTES.md), with every warp of a split
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
        if (eff[s] >= 0.95 * best) return (int)s;
    return 1;
}

bool fcc_fwd_decode_supports(const fcc_attn &p) { return fcdec::make_plan(p).ok; }

flashc_status fcc_fwd_decode_run(const fcc_attn &p) {
    const fcdec::DecPlan pl = fcdec::make_plan(p);
    if (!pl.ok) return fcc_error(FLASHC_ERR_INTERNAL, "attn_decode: run without supports()");
    return fcdec::with_traits(pl.HD, pl.MT, [&](auto k) {
        using K = decltype(k);
        if (p.a.dtype == FLASHC_BF16) return fcdec::run<__nv_bfloat16, K>(p, pl);
        return fcdec::run<__half, K>(p, pl);
    });
}
