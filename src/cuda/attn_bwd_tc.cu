/*
 * attn_bwd_tc.cu — tensor-core attention backward for F16/BF16 (sm_80+),
 * FlashAttention-2 schedule on mma.sync m16n8k16 (tc_common.cuh), and for
 * F32 at D ≤ 128 the same schedule on m16n8k8 tf32 in 3xTF32 (below).
 *
 *   inputs  dout, q, o [B, Sq, Hq, D]; k, v [B, Sk, Hkv, D]; lse [B, Hq, Sq] f32
 *   outputs dq [B, Sq, Hq, D]; dk, dv [B, Sk, Hkv, D]; dsinks [Hq] f32
 *
 * Forward, restated:  x_ij = the modified score of scale·<q_i, k_j>
 *                     (attn_score.h; −inf where masked),
 *                     P_ij = exp(x_ij − L_i),  O_i = Σ_j P_ij v_j.
 * Backward:           Δ_i = Σ_d dO_id O_id,  dP_ij = <dO_i, v_j>,
 *                     dS_ij = P_ij (dP_ij − Δ_i) · g_ij,
 *                     g_ij = ∂x_ij/∂(scale·<q_i, k_j>) (1 − tanh² with a softcap, else 1),
 *                     dV_j = Σ_i P_ij dO_i,  dK_j = scale Σ_i dS_ij q_i,
 *                     dQ_i = scale Σ_j dS_ij k_j,
 *                     d s_h = Σ_{b,i} fc_dsink_term(s_h, L_i, Δ_i).
 * Everything in the exp2 domain: P = exp2(s − L·log2e) with s the log2-unit
 * logit (plain: s = qk·scale·log2e, one FFMA; modifiers: fcc_score_step,
 * attn_score.cuh).
 * Entries a row cannot see get P = dS = 0 by selection (never a product with
 * 0), so a NaN/Inf score or dP of such a pair stays out of every sum.
 *
 * Kernels (all on a->stream; scratch by fcc_scratch_alloc/free, the module pool):
 *   1. prep, 2. dsinks: shared with the generic kernel (attn_generic_bwd.cu):
 *      Δ and L per row into [B, Hq, Sq] fp32; the per-head dsinks tree.
 *   3. dK/dV: one CTA per (key block of 64, kv head, batch), 4 warps, each
 *      owning 16 keys. It loops over the query heads of its GQA group and
 *      the query tiles (64 rows) of the row segments that see the key block
 *      (fc_key_block_rows); Q/dO tiles double-buffered by cp.async.
 *      Transposed products so that every operand is an ldmatrix fragment and
 *      C fragments feed the next MMA:
 *        Sᵀ = K Qᵀ, Pᵀ = exp2(sᵀ − L·log2e), dPᵀ = V dOᵀ,
 *        dSᵀ = Pᵀ ∘ gᵀ ∘ (dPᵀ − Δ), dV += Pᵀ dO (P rounded to T),
 *        dK += dSᵀ Q (dS rounded to T); dK·scale at the end.
 *      Per-element masks only on tiles not wholly visible.
 *      deterministic == 0 (HD ≤ 64, Sk ≥ 2048 only, where it measured
 *      faster): dSᵀ is staged in smem and dQ += dS K is added to an fp32
 *      [B, Hq, Sq, HD] buffer with atomics, then converted.
 *   4. deterministic: dQ per (query block of 64, head, batch), the forward's
 *      loop (K/V tiles double-buffered): S = QKᵀ, dP = dO Vᵀ, dS, dQ += dS K.
 *      No atomics anywhere, fixed order: bit-identical across runs.
 * V (template): the score variant (attn_score.cuh, FCC_SCORE_FEW: plain or
 * the catch-all, chosen on the host); MOD = V is not plain: the score
 * modifiers (softcap, ALiBi). Plain problems run the instantiation without
 * them, the code and speed of before.
 *
 * Head dims: D ≤ 256, zero-padded to HD ∈ {32, 64, 96, 128, 192, 256}.
 * Wide heads (HD > 128, CS = 2 column slices): the accumulators of a warp
 * owning a whole HD row (dK/dV: 2·HD/2, dQ: HD/2 fp32 per thread) would
 * spill, so each CTA has 8 warps, two per row group: warp (w, c) computes
 * the c-th half of the Sᵀ/dPᵀ (dQ kernel: S/dP) columns of row group w over
 * the whole head dim, stages its P and dS (T) in shared memory, and after a
 * barrier of the pair accumulates the c-th half of the head dim over all of
 * the tile's columns — no product computed twice, half the registers.
 * Ragged (varlen) problems: the RAG instantiations (attn_ragged.cuh); the
 * dense ones (RAG = false) are the code of before.
 * F32 (T = float): fp32 tiles (pitch HD + 4), 32-row query tiles (dK/dV)
 * and 32-key tiles (dQ); Sᵀ, dPᵀ (S, dP) by tile_abt_3xtf32 (ldmatrix
 * fragments split into tf32 hi + lo), P and dS kept fp32 and split once a
 * tile into A fragments in the C fragment's column order, their B rows (dO,
 * Q; K) read as 32-bit values in that order (tile_ab_3xtf32, each column
 * tile summed in a zeroed fragment and added in fp32: dK/dV/dQ sum
 * thousands of terms); the accurate tanh; no atomic path; HD 128 takes one
 * buffer so that two CTAs share an SM (bwd_nbuf).
 */
#include "attn_bwd_tile.cuh"
#include "tc_common.cuh"

#include <algorithm>
#include <limits.h>
#include <math.h>

namespace fctcb {
using namespace fctc;

constexpr int NW = 4;           /* warps per CTA */
constexpr int NT = 32 * NW;     /* threads per CTA */
constexpr int BK = 16 * NW;     /* dK/dV kernel: keys per CTA (16 per warp) */
constexpr int BQ = 64;          /* dK/dV kernel: query rows per tile */
constexpr int LDS = BQ + 8;     /* pitch of the staged dSᵀ [BK][LDS] */
constexpr int BM = 16 * NW;     /* dQ kernel: query rows per CTA */
constexpr int BN = 64;          /* dQ kernel: keys per tile */
static_assert(BN == BQ, "the staged dS tiles of both kernels share the pitch LDS");

/* Column slices of a head row for padded head dim HD (see above). */
constexpr int col_slices(int HD) { return HD > 128 ? 2 : 1; }

/* F32 (3xTF32, HD ≤ 128): query tiles of 32 rows (dK/dV) and key tiles of
 * 32 keys (dQ) — the fp32 tiles take twice the bytes and the split operands
 * the registers; the smem pitch is HD + 16 / sizeof(T) elements (16 bytes
 * of pad: HD + 8 of 2 bytes, HD + 4 floats). */
template <typename T> constexpr int bq_of() { return sizeof(T) == 4 ? 32 : BQ; }
template <typename T> constexpr int bn_of() { return sizeof(T) == 4 ? 32 : BN; }
template <typename T> constexpr int epc_of() { return 16 / (int)sizeof(T); }

/* Shared memory (bytes) of the dK/dV kernel: K, V, NB×Q, NB×dO tiles of T,
 * the staged dSᵀ (atomic dQ or wide heads) and Pᵀ (wide heads), 2×(L, Δ)
 * fp32, 2× the tile's score modifiers (fc_score_modf, padded to 4 floats);
 * and of the dQ kernel: Q, dO, NB×K, NB×V, the staged dS (wide heads).
 * NB: the streamed tiles' buffers, 2 (the next tile loads under this one's
 * products) or 1 (GPUs with less shared memory: load after the products).
 * rag: the key-row tables of the ragged kernels (attn_ragged.cuh): K and V
 * of the block (dK/dV), of each buffer (dQ).
 * pad_rows: the F32 one-buffer dK/dV kernel keeps a tile row's L·log2e and Δ
 * in its Q row's pad (columns HD, HD + 1; the loads never write the pad) and
 * the tile's score modifiers in dO row 0's: its K, V, Q, dO tiles alone take
 * 101,376 bytes at HD 128, all of a 99 KB GPU's block. */
template <typename T> constexpr bool pad_rows(int nb) { return sizeof(T) == 4 && nb == 1; }
template <typename T>
constexpr size_t dkdv_smem(int HD, bool atomic, bool rag = false, int nb = 2) {
    return ((size_t)(2 * BK + 2 * nb * bq_of<T>()) * (HD + epc_of<T>()) + (atomic || col_slices(HD) > 1 ? BK * LDS : 0) +
            (col_slices(HD) > 1 ? BK * LDS : 0)) * sizeof(T) +
           (pad_rows<T>(nb) ? 0 : (4 * bq_of<T>() + 8) * sizeof(float)) + (rag ? 2 * BK * sizeof(int64_t) : 0);
}
template <typename T> constexpr size_t dq_smem(int HD, bool rag = false, int nb = 2) {
    return ((size_t)(2 * BM + 2 * nb * bn_of<T>()) * (HD + epc_of<T>()) + (col_slices(HD) > 1 ? BM * LDS : 0)) *
               sizeof(T) +
           (rag ? 2 * nb * bn_of<T>() * sizeof(int64_t) : 0);
}
/* Single-buffered instances exist for the head dims where they decide
 * whether a GPU runs tensor cores at all: HD 128 at 99 KB (sm_86/89), HD
 * 192/256 at 163 KB (sm_80); F32 also HD 96 at 99 KB (double-buffered
 * 102,944 bytes, single 76,800) and HD 128 (101,376: pad_rows). */
constexpr bool has_nb1(int HD, bool f32) { return HD >= 128 || (f32 && HD == 96); }

/* Rows [row0, row0 + R) of a [*, D] slice into smem rows of pitch HD + 8
 * (tc_common.cuh: load_rows), by this CTA's NT threads. */
template <typename T, int HD, int R, int NTC = NT>
__device__ __forceinline__ void load_tile(T *s, const T *g, int64_t rs, int row0, int nrows,
                                          int D, bool vec, int tid) {
    load_rows<T, HD, R, NTC>(s, g, rs, row0, nrows, D, vec, tid);
}

/* Stages KW k16 A fragments of a warp into a [*][LDS] tile of T: the
 * thread's rows r, r + 8 (r = 16·w + g), columns c0 + 16·kk (c0 includes the
 * thread's 2·t4) and + 8; read back as A fragments by stage_ld after a barrier. */
template <int KW>
__device__ __forceinline__ void stage_st(void *s, const uint32_t (&a)[KW][4], int r, int c0) {
    uint32_t *u = static_cast<uint32_t *>(s);
#pragma unroll
    for (int kk = 0; kk < KW; ++kk) {
        const int c = c0 + kk * 16; /* in T units; the thread's pair: (c + 2·t4) / 2 in uint32 */
        u[(r * LDS + c) / 2] = a[kk][0];
        u[((r + 8) * LDS + c) / 2] = a[kk][1];
        u[(r * LDS + c + 8) / 2] = a[kk][2];
        u[((r + 8) * LDS + c + 8) / 2] = a[kk][3];
    }
}
/* The A fragment (rows 16·w .., k16 chunk kk) of a staged [*][LDS] tile. */
__device__ __forceinline__ void stage_ld(uint32_t (&a)[4], uint32_t s, int w, int kk, int lane) {
    ldsm_x4(s + 2 * ((w * 16 + (lane & 15)) * LDS + kk * 16 + (lane >> 4) * 8), a[0], a[1], a[2], a[3]);
}
/* Barrier of the two warps of row group w (wide heads): ids 1..NW. */
__device__ __forceinline__ void pair_sync(int w) { asm volatile("bar.sync %0, 64;\n" ::"r"(1 + w) : "memory"); }

/* ------------------------------------------------------ tile products */
/* c0, c1 (two adjacent n8 tiles) += a · B, B the 16(k) × 16(n) block at
 * shared address addr of a tile stored [n][k] (mma_n16) or [k][n] (mma_n16_t). */
template <typename T>
__device__ __forceinline__ void mma_n16(float (&c0)[4], float (&c1)[4], const uint32_t (&a)[4], uint32_t addr) {
    uint32_t b0, b1, b2, b3;
    ldsm_x4(addr, b0, b1, b2, b3);
    Ops<T>::mma(c0, a, b0, b1);
    Ops<T>::mma(c1, a, b2, b3);
}
/* SAN && san: B read with non-finite values as +0 (the keys of a chunk that
 * a row cannot see, where dS is 0: attn_fwd_tile.cuh, "values of keys a row
 * cannot see"; the rows that do see such a key have a non-finite dS). */
template <typename T, bool SAN = false>
__device__ __forceinline__ void mma_n16_t(float (&c0)[4], float (&c1)[4], const uint32_t (&a)[4], uint32_t addr,
                                          bool san = false) {
    uint32_t b0, b1, b2, b3;
    ldsm_x4_t(addr, b0, b1, b2, b3);
    if (SAN && san) {
        b0 = zero_nonfinite2(b0, Ops<T>::EXP);
        b1 = zero_nonfinite2(b1, Ops<T>::EXP);
        b2 = zero_nonfinite2(b2, Ops<T>::EXP);
        b3 = zero_nonfinite2(b3, Ops<T>::EXP);
    }
    Ops<T>::mma(c0, a, b0, b1);
    Ops<T>::mma(c1, a, b2, b3);
}

/* acc = A·Bᵀ over the padded head dim: A = this warp's 16 rows of a [row][d]
 * tile (sA + a_off), B = NJ·8 rows of another (sB + bn_off); pitch HD + 8.
 * Sᵀ = K Qᵀ and dPᵀ = V dOᵀ (dK/dV), S = Q Kᵀ and dP = dO Vᵀ (dQ). */
template <typename T, int HD, int NJ>
__device__ __forceinline__ void tile_abt(float (&acc)[NJ][4], uint32_t sA, int a_off, uint32_t sB, int bn_off) {
    constexpr int LD = HD + 8;
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
        uint32_t a[4];
        ldsm_x4(sA + 2 * (a_off + kk * 16), a[0], a[1], a[2], a[3]);
#pragma unroll
        for (int jj = 0; jj < NJ / 2; ++jj)
            mma_n16<T>(acc[2 * jj], acc[2 * jj + 1], a, sB + 2 * (bn_off + jj * 16 * LD + kk * 16));
    }
}

/* acc += A·B over the HD columns [c0, c0 + 8·NC): A = KT k16 fragments,
 * B = the [k][n] tile at sB (k rows, pitch HD + 8; bt_off the lane's
 * ldmatrix.trans offset).
 * dV += Pᵀ dO, dK += dSᵀ Q, dQ += dS K. */
template <typename T, int HD, int KT, bool SAN = false, int NC>
__device__ __forceinline__ void tile_ab(float (&acc)[NC][4], const uint32_t (&a)[KT][4], uint32_t sB,
                                        int bt_off, uint32_t san = 0, int c0 = 0) {
    constexpr int LD = HD + 8;
    /* NC n8 tiles from column c0 (wide heads: one slice of HD). */
    static_assert(NC % 2 == 0 && NC * 8 <= HD, "whole n16 column pairs inside the head dim");
#pragma unroll
    for (int kk = 0; kk < KT; ++kk)
#pragma unroll
        for (int dd = 0; dd < NC / 2; ++dd)
            mma_n16_t<T, SAN>(acc[2 * dd], acc[2 * dd + 1], a[kk], sB + 2 * (bt_off + kk * 16 * LD + c0 + dd * 16),
                              (san >> kk) & 1u);
}

/* dQ[i0 + 16·warp + ..] += dS K for the atomic path: A = dS from the staged
 * dSᵀ [BK][LDS] (ldmatrix.trans), B = K [key][d] (trans), fp32 atomics into
 * the [Sq, HD] slab dst of this (b, h). Rows ≥ iend are skipped. */
template <typename T, int HD>
__device__ __forceinline__ void dq_atomic_add(float *dst, uint32_t sdSa, uint32_t sKa, int bt_off, int i0,
                                              int iend, int warp, int lane, uint32_t san) {
    const int g = lane >> 2, t4 = lane & 3;
    const int r0 = i0 + warp * 16 + g;
    if (i0 + warp * 16 >= iend) return;
    uint32_t qa[BK / 16][4];
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk)
        ldsm_x4_t(sdSa + 2 * ((kk * 16 + (lane >> 4) * 8 + (lane & 7)) * LDS + warp * 16 + ((lane >> 3) & 1) * 8),
                  qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3]);
    const bool ok0 = r0 < iend, ok1 = r0 + 8 < iend;
    constexpr int LD = HD + 8;
#pragma unroll
    for (int dd = 0; dd < HD / 16; ++dd) {
        float c[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk)
            mma_n16_t<T, true>(c[0], c[1], qa[kk], sKa + 2 * (bt_off + kk * 16 * LD + dd * 16), (san >> kk) & 1u);
#pragma unroll
        for (int jn = 0; jn < 2; ++jn) {
            const int col = dd * 16 + jn * 8 + 2 * t4;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            if (ok0) atomicAdd(reinterpret_cast<float2 *>(dst + (int64_t)r0 * HD + col),
                               make_float2(c[jn][0], c[jn][1]));
            if (ok1) atomicAdd(reinterpret_cast<float2 *>(dst + (int64_t)(r0 + 8) * HD + col),
                               make_float2(c[jn][2], c[jn][3]));
#else
            if (ok0) {
                atomicAdd(dst + (int64_t)r0 * HD + col, c[jn][0]);
                atomicAdd(dst + (int64_t)r0 * HD + col + 1, c[jn][1]);
            }
            if (ok1) {
                atomicAdd(dst + (int64_t)(r0 + 8) * HD + col, c[jn][2]);
                atomicAdd(dst + (int64_t)(r0 + 8) * HD + col + 1, c[jn][3]);
            }
#endif
        }
    }
}

/* --------------------------------------------------------- 3. dK / dV */
/* RAG: ragged problems (attn_ragged.cuh): B sequences, nkb key blocks of the
 * longest; K/V through key-row tables tK, tV. */
template <typename T, int HD, bool ATOMIC, int V, bool RAG, int NB = 2>
__global__ void __launch_bounds__(NT * col_slices(HD), col_slices(HD) > 1 ? 1 : 2)
    bwd_dkdv_kernel(const __grid_constant__ fcc_attn p, int nkb, const float *Lb, const float *Db, float *dQacc) {
    constexpr bool F32 = sizeof(T) == 4; /* 3xTF32 products (tile_abt_3xtf32, tile_ab_3xtf32) */
    constexpr int BQ = bq_of<T>();       /* query rows a tile (the F16/BF16 constant, or F32's) */
    constexpr int EPC = epc_of<T>(), LD = HD + EPC;
    constexpr bool MOD = V != FC_SCORE_PLAIN;
    constexpr int CS = col_slices(HD);
    constexpr int NTC = NT * CS;  /* threads */
    constexpr int NJ = BQ / 8 / CS; /* n8 tiles of Sᵀ (query columns) per warp */
    constexpr int ND = HD / 8 / CS; /* n8 tiles of dK/dV per warp */
    constexpr int KQ = BQ / 16;     /* k16 chunks of the query rows */
    static_assert(NJ * 4 <= 32, "one visibility bit per fragment element");
    static_assert(!(ATOMIC && CS > 1), "wide heads: deterministic dQ kernel only");
    static_assert(!F32 || (!ATOMIC && CS == 1), "F32: HD ≤ 128, deterministic dQ kernel");
    static_assert(NB == 2 || (NB == 1 && !ATOMIC), "buffers of the streamed Q/dO tiles");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *sK = reinterpret_cast<T *>(smem_raw); /* [BK][LD] */
    T *sV = sK + BK * LD;                    /* [BK][LD] */
    T *sQ = sV + BK * LD;                    /* [NB][BQ][LD] */
    T *sdO = sQ + NB * BQ * LD;              /* [NB][BQ][LD] */
    T *sdS = sdO + NB * BQ * LD;             /* [BK][LDS], ATOMIC or CS > 1 */
    T *sP = sdS + (ATOMIC || CS > 1 ? BK * LDS : 0);                           /* [BK][LDS], CS > 1 */
    constexpr bool PADR = pad_rows<T>(NB); /* L, Δ, modifiers in the pads (dkdv_smem) */
    float *sL = reinterpret_cast<float *>(sP + (CS > 1 ? BK * LDS : 0));      /* [2][BQ] (not PADR) */
    float *sDl = sL + 2 * BQ;                                                  /* [2][BQ] (not PADR) */
    /* [2][4]: fc_score_modf of the tile's head (MOD); PADR: dO row 0's pad */
    float *sMod = PADR ? reinterpret_cast<float *>(sdO) + HD : sDl + 2 * BQ;
    int64_t *tK = reinterpret_cast<int64_t *>(sL + (PADR ? 0 : 4 * BQ + 8)); /* RAG: [BK] key-row offsets of the K block */
    int64_t *tV = tK + BK;                                /* RAG: [BK] ... of the V block */

    const fc_attn &a = p.a;
    const int tid = threadIdx.x, lane = tid & 31;
    const int warp = (tid >> 5) % NW; /* row group: this warp's 16 keys */
    const int cs = (tid >> 5) / NW;   /* column slice (CS > 1) */
    const int g = lane >> 2, t4 = lane & 3;
    /* This warp's Sᵀ/dPᵀ columns (query rows of the tile) and dK/dV columns. */
    const int qo = cs * (BQ / CS), co = cs * (HD / CS);
    int64_t vb = blockIdx.x;
    const int kb = (int)(vb % nkb);
    vb /= nkb;
    const int hk = (int)(vb % p.Hkv);
    const int64_t b = vb / p.Hkv;
    /* Sequence b (attn_ragged.cuh; dense: the problem itself). */
    const fc_seq s = fcc_seq_of<RAG>(a, b);
    const int Sq = RAG ? (int)s.Sq : p.Sq, Sk = RAG ? (int)s.Sk : p.Sk;
    const int n0 = kb * BK;
    if (RAG && n0 >= Sk) return; /* past this sequence's keys */
    const int n1 = min(n0 + BK, Sk);
    const fcc_seq_parts<RAG> sp(p, s);
    const fc_mask &mask = sp.mask(p);

    const T *Qg = static_cast<const T *>(a.q) + fc_attn_row_offset(&s, a.sq, 0, 0);
    const T *dOg = static_cast<const T *>(a.dout) + fc_attn_row_offset(&s, a.sdo, 0, 0);

    /* The query rows that see some key of [n0, n1): ≤ 2 row segments, cut
     * into tiles of BQ rows; iterations: the GQA group's heads × the tiles. */
    int seg_s[2] = {0, 0}, seg_e[2] = {0, 0};
    {
        int64_t r0[2], r1[2];
        const int n = fc_key_block_rows(&mask, n0, n1, r0, r1);
        if (n > 0) { seg_s[0] = (int)r0[0]; seg_e[0] = (int)r1[0]; } /* constant indices: no stack frame */
        if (n > 1) { seg_s[1] = (int)r0[1]; seg_e[1] = (int)r1[1]; }
    }
    const int nt0 = (seg_e[0] - seg_s[0] + BQ - 1) / BQ;
    const int ntg = nt0 + (seg_e[1] - seg_s[1] + BQ - 1) / BQ;
    const int n_iter = p.group * ntg;

    /* Tile it: query head, first row, end of its segment. */
    auto tile_of = [&](int it, int &h, int &i0, int &iend) {
        const int gi = it / ntg, r = it % ntg;
        h = hk * p.group + gi;
        if (r < nt0) { i0 = seg_s[0] + r * BQ; iend = seg_e[0]; }
        else { i0 = seg_s[1] + (r - nt0) * BQ; iend = seg_e[1]; }
    };
    auto issue = [&](int it, int buf) {
        int h, i0, iend;
        tile_of(it, h, i0, iend);
        load_tile<T, HD, BQ, NTC>(sQ + buf * BQ * LD, Qg + (int64_t)h * a.sq[2], a.sq[1], i0, iend, p.D, p.vec16,
                                  tid);
        load_tile<T, HD, BQ, NTC>(sdO + buf * BQ * LD, dOg + (int64_t)h * a.sdo[2], a.sdo[1], i0, iend, p.D,
                                  p.vec16, tid);
        /* RAG: the sequence re-read (L1), not kept in registers through the loop */
        const int64_t rowbase = fcc_rowbuf_at<RAG>(a, fcc_seq_of<RAG>(a, b), b, h, 0);
        for (int t = tid; t < BQ; t += NTC) {
            const bool ok = i0 + t < iend; /* rows past the segment: P = 0 */
            const float l = ok ? lse_l2(Lb[rowbase + i0 + t]) : INFINITY, d = ok ? Db[rowbase + i0 + t] : 0.f;
            if constexpr (PADR) {
                float *pad = reinterpret_cast<float *>(sQ) + t * LD + HD; /* NB = 1: buf 0 */
                pad[0] = l;
                pad[1] = d;
            } else {
                sL[buf * BQ + t] = l;
                sDl[buf * BQ + t] = d;
            }
        }
        /* In smem rather than registers: the MOD kernel at HD = 128 is at the
         * register limit. */
        if (MOD && tid == 0) {
            const fc_score_modf m = fcc_score_mod_l2(p, b, h);
            sMod[buf * 4 + 0] = m.qk_mul;
            sMod[buf * 4 + 1] = m.cap;
            sMod[buf * 4 + 2] = m.slope;
        }
    };

    if constexpr (RAG) {
        const bool contig = fcc_tile_contig(a, BK);
        fcc_kv_rows<BK, NTC>(tK, tV, a, s, b, hk, n0, contig, tid);
        __syncthreads();
        load_key_rows<T, HD, BK, NTC>(sK, static_cast<const T *>(a.k), tK, a.sk[1], contig, n0, Sk, p.D, p.vec16,
                                      tid);
        load_key_rows<T, HD, BK, NTC>(sV, static_cast<const T *>(a.v), tV, a.sv[1], contig, n0, Sk, p.D, p.vec16,
                                      tid);
    } else {
        load_tile<T, HD, BK, NTC>(sK, static_cast<const T *>(a.k) + b * a.sk[0] + (int64_t)hk * a.sk[2], a.sk[1],
                                  n0, p.Sk, p.D, p.vec16, tid);
        load_tile<T, HD, BK, NTC>(sV, static_cast<const T *>(a.v) + b * a.sv[0] + (int64_t)hk * a.sv[2], a.sv[1],
                                  n0, p.Sk, p.D, p.vec16, tid);
    }
    if (n_iter > 0) issue(0, 0);
    cp_async_commit();

    /* ldmatrix lane offsets (elements): A rows of this warp's keys; B of a
     * [n][k] tile (non-trans); B of a [k][n] tile (trans). */
    const int a_off = (warp * 16 + (lane & 15)) * LD + (lane >> 4) * EPC;
    const int bn_off = ((lane >> 4) * 8 + (lane & 7)) * LD + ((lane >> 3) & 1) * EPC;
    const int bt_off = (((lane >> 3) & 1) * 8 + (lane & 7)) * LD + (lane >> 4) * 8;
    const uint32_t sKa = smem_u32(sK), sVa = smem_u32(sV);

    float acc_dk[ND][4], acc_dv[ND][4];
#pragma unroll
    for (int j = 0; j < ND; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_dk[j][e] = acc_dv[j][e] = 0.f;

    const int key0 = n0 + warp * 16 + g; /* this thread's keys: key0, key0 + 8 */
    for (int it = 0; it < n_iter; ++it) {
        const int buf = NB == 2 ? it & 1 : 0;
        cp_async_wait<0>();
        __syncthreads(); /* tile `it` landed for all; everyone is done with buf^1 */
        if constexpr (NB == 2) {
            if (it + 1 < n_iter) issue(it + 1, buf ^ 1);
            cp_async_commit();
        }

        int h, i0, iend;
        tile_of(it, h, i0, iend);
        const uint32_t sQa = smem_u32(sQ + buf * BQ * LD), sdOa = smem_u32(sdO + buf * BQ * LD);
        const float *Lt = sL + buf * BQ, *Dt = sDl + buf * BQ;

        /* Does every row of the tile see every key of the block? Then no per-element mask. */
        const bool full =
            tile_full<BK>(vis_of(mask, i0, Sq), vis_of(mask, min(i0 + BQ, iend) - 1, Sq), n0, Sk);
        uint32_t vis = ~0u;
        fc_score_modf mod = {0.f, 0.f, 0.f};
        if (MOD) {
            mod.qk_mul = sMod[buf * 4 + 0];
            mod.cap = sMod[buf * 4 + 1];
            mod.slope = sMod[buf * 4 + 2];
        }
        if constexpr (F32) {
            /* 3xTF32: Sᵀ, Pᵀ (MOD: P in pv, P·g in s), dPᵀ, dSᵀ in fp32; P and
             * dS split once a tile into the A fragments of dV += Pᵀ dO and
             * dK += dSᵀ Q, whose B rows (dO, Q) are read in the fragments' order. */
            float s[1][NJ][4], dp[1][NJ][4], pv[NJ][4];
            constexpr int RS = PADR ? LD : 1; /* L, Δ: in the Q rows' pad, or the arrays */
            const float *sQf = reinterpret_cast<const float *>(sQ);
            const strided_rows<RS> Lr{PADR ? sQf + HD : Lt}, Dr{PADR ? sQf + HD + 1 : Dt};
            tile_abt_3xtf32<1, NJ, HD, LD, true>(s, sKa, a_off, sQa, bn_off); /* Sᵀ = K Qᵀ */
            dkdv_p<V, NJ, NJ, fcc_tanh_accurate>(p, mask, sp.score(p), mod, s[0], pv, 0, Lr, i0, iend, key0, t4,
                                                 full, vis);
            tile_abt_3xtf32<1, NJ, HD, LD, true>(dp, sVa, a_off, sdOa, bn_off); /* dPᵀ = V dOᵀ */
            dkdv_ds(dp[0], s[0], Dr, t4, full, vis);
            uint32_t ah[NJ][4], al[NJ][4];
            if constexpr (MOD) split_c_as_a(pv, ah, al);
            else split_c_as_a(s[0], ah, al);
            tile_ab_3xtf32<NJ, HD / 8, LD>(acc_dv, ah, al, sdO + buf * BQ * LD, 0, g, t4);
            split_c_as_a(dp[0], ah, al);
            tile_ab_3xtf32<NJ, HD / 8, LD>(acc_dk, ah, al, sQ + buf * BQ * LD, 0, g, t4);
        } else {
        float acc_s[NJ][4], acc_dp[NJ][4];
        uint32_t pa[NJ / 2][4], da[NJ / 2][4];
        tile_abt<T, HD, NJ>(acc_s, sKa, a_off, sQa + 2 * qo * LD, bn_off); /* Sᵀ = K Qᵀ */
        if (MOD && CS == 1) {
            /* Per k16 chunk of query rows: P, P·g, then at once dV += Pᵀ dO for
             * the chunk, so that only P·g stays live through dPᵀ (P and g of
             * the whole tile at once would not fit beside dK/dV). */
#pragma unroll
            for (int kk = 0; kk < KQ; ++kk) {
                float pv[2][4];
                uint32_t pa1[1][4];
                dkdv_p<V>(p, mask, sp.score(p), mod, acc_s, pv, 2 * kk, Lt, i0, iend, key0, t4, full, vis);
                tile_pack_p<T>(pv, pa1);
                tile_ab<T, HD, 1>(acc_dv, pa1, sdOa + 2 * kk * 16 * LD, bt_off);
            }
        } else if (MOD) { /* wide: P staged for the pair's dV below */
            float pv[NJ][4];
            dkdv_p<V>(p, mask, sp.score(p), mod, acc_s, pv, 0, Lt + qo, i0 + qo, iend, key0, t4, full, vis);
            tile_pack_p<T>(pv, pa);
        } else {
            dkdv_p<V>(p, mask, sp.score(p), mod, acc_s, acc_s, 0, Lt + qo, i0 + qo, iend, key0, t4, full,
                      vis); /* pv: unused */
        }
        tile_abt<T, HD, NJ>(acc_dp, sVa, a_off, sdOa + 2 * qo * LD, bn_off); /* dPᵀ = V dOᵀ */
        dkdv_ds(acc_dp, acc_s, Dt + qo, t4, full, vis);
        if (!MOD) tile_pack_p<T>(acc_s, pa);
        tile_pack_p<T>(acc_dp, da);
        if constexpr (CS > 1) {
            /* Wide heads: the pair's Pᵀ and dSᵀ halves through smem, then
             * dV += Pᵀ dO and dK += dSᵀ Q over all BQ query rows, on this
             * warp's slice of the head dim. The previous tile's readers
             * finished before this iteration's first barrier. */
            const int r = warp * 16 + g;
            stage_st(sP, pa, r, qo + 2 * t4);
            stage_st(sdS, da, r, qo + 2 * t4);
            pair_sync(warp);
#pragma unroll
            for (int kk = 0; kk < KQ; ++kk) {
                uint32_t pk[1][4], dk[1][4];
                stage_ld(pk[0], smem_u32(sP), warp, kk, lane);
                stage_ld(dk[0], smem_u32(sdS), warp, kk, lane);
                tile_ab<T, HD, 1>(acc_dv, pk, sdOa + 2 * kk * 16 * LD, bt_off, 0u, co);
                tile_ab<T, HD, 1>(acc_dk, dk, sQa + 2 * kk * 16 * LD, bt_off, 0u, co);
            }
        } else {
            if (ATOMIC) /* stage dSᵀ (this warp's 16 key rows) for dQ = dS K */
                stage_st(sdS, da, warp * 16 + g, 2 * t4);
            if (MOD) {
                tile_ab<T, HD, KQ>(acc_dk, da, sQa, bt_off); /* dK += dSᵀ Q */
            } else {
                /* dV += Pᵀ dO and dK += dSᵀ Q, interleaved (k = the tile's query rows) */
#pragma unroll
                for (int kk = 0; kk < KQ; ++kk)
#pragma unroll
                    for (int dd = 0; dd < HD / 16; ++dd) {
                        mma_n16_t<T>(acc_dv[2 * dd], acc_dv[2 * dd + 1], pa[kk],
                                     sdOa + 2 * (bt_off + kk * 16 * LD + dd * 16));
                        mma_n16_t<T>(acc_dk[2 * dd], acc_dk[2 * dd + 1], da[kk],
                                     sQa + 2 * (bt_off + kk * 16 * LD + dd * 16));
                    }
            }
        }
        } /* F16/BF16 */
        if constexpr (ATOMIC) {
            __syncthreads(); /* all of dSᵀ staged */
            const int64_t row = fcc_rowbuf_at<RAG>(a, fcc_seq_of<RAG>(a, b), b, h, 0);
            /* K chunks some of this warp's rows cannot see: read with non-finite values as 0. */
            const int w0 = i0 + warp * 16;
            const uint32_t san = full || w0 >= iend ? 0u
                : masked_chunks<BK / 16>(vis_of(mask, w0, Sq), vis_of(mask, min(w0 + 15, iend - 1), Sq), n0);
            dq_atomic_add<T, HD>(dQacc + row * HD, smem_u32(sdS), sKa, bt_off, i0, iend, warp, lane, san);
        }
        if constexpr (NB == 1) { /* the one buffer takes the next tile once everyone is done with it */
            __syncthreads();
            if (it + 1 < n_iter) issue(it + 1, 0);
            cp_async_commit();
        }
    }
    cp_async_wait<0>(); /* nothing may still be in flight at exit */

    /* Epilogue: dK·scale, dV; keys key0 and key0 + 8 of this block. */
    const fc_seq se = fcc_seq_of<RAG>(a, b); /* re-read (RAG), not kept through the loop */
    T *dkp = static_cast<T *>(a.dk) + b * a.sdk[0] + (int64_t)hk * a.sdk[2];
    T *dvp = static_cast<T *>(a.dv) + b * a.sdv[0] + (int64_t)hk * a.sdv[2];
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        const int key = key0 + 8 * hf;
        if (key >= Sk) continue;
        T *dkr = RAG ? static_cast<T *>(a.dk) + fc_attn_key_offset(&a, &se, b, a.sdk, key, hk)
                     : dkp + (int64_t)key * a.sdk[1];
        T *dvr = RAG ? static_cast<T *>(a.dv) + fc_attn_key_offset(&a, &se, b, a.sdv, key, hk)
                     : dvp + (int64_t)key * a.sdv[1];
#pragma unroll
        for (int j = 0; j < ND; ++j) {
            const int col = co + j * 8 + 2 * t4;
            store_pair(dkr, col, p.D, acc_dk[j][2 * hf] * p.scale, acc_dk[j][2 * hf + 1] * p.scale,
                       p.out_pairs);
            store_pair(dvr, col, p.D, acc_dv[j][2 * hf], acc_dv[j][2 * hf + 1], p.out_pairs);
        }
    }
}

/* ------------------------------------------------ 4. dQ (deterministic) */
/* RAG: ragged problems (attn_ragged.cuh): B sequences, nqb query blocks of
 * the longest; K/V through key-row tables, one per K/V buffer, each filled
 * one iteration (barrier) ahead of its load. */
template <typename T, int HD, int V, bool RAG, int NB = 2>
__global__ void __launch_bounds__(NT * col_slices(HD), col_slices(HD) > 1 ? 1 : 2)
    bwd_dq_kernel(const __grid_constant__ fcc_attn p, int nqb, const float *Lb, const float *Db) {
    constexpr bool F32 = sizeof(T) == 4; /* 3xTF32 products, as the dK/dV kernel's */
    constexpr int BN = bn_of<T>();       /* keys a tile (the F16/BF16 constant, or F32's) */
    constexpr int EPC = epc_of<T>(), LD = HD + EPC;
    constexpr int CS = col_slices(HD);
    constexpr int NTC = NT * CS;
    constexpr int NJ = BN / 8 / CS, ND = HD / 8 / CS; /* per warp: n8 tiles of S/dP, of dQ */
    constexpr bool MOD = V != FC_SCORE_PLAIN;
    static_assert(NJ * 4 <= 32, "one visibility bit per fragment element");
    static_assert(!F32 || CS == 1, "F32: HD ≤ 128");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *sQ = reinterpret_cast<T *>(smem_raw); /* [BM][LD] */
    T *sdO = sQ + BM * LD;                   /* [BM][LD] */
    T *sK = sdO + BM * LD;                   /* [NB][BN][LD] */
    T *sV = sK + NB * BN * LD;               /* [NB][BN][LD] */
    T *sdS = sV + NB * BN * LD;              /* [BM][LDS], CS > 1 */
    int64_t *tK = reinterpret_cast<int64_t *>(sdS + (CS > 1 ? BM * LDS : 0)); /* RAG: [NB][BN] key-row offsets per K buffer */
    int64_t *tV = tK + NB * BN;                                  /* RAG: [NB][BN] ... per V buffer */

    const fc_attn &a = p.a;
    const int tid = threadIdx.x, lane = tid & 31;
    const int warp = (tid >> 5) % NW; /* row group: this warp's 16 query rows */
    const int cs = (tid >> 5) / NW;   /* column slice (CS > 1) */
    const int g = lane >> 2, t4 = lane & 3;
    /* This warp's S/dP columns (keys of the tile) and dQ columns. */
    const int ko = cs * (BN / CS), co = cs * (HD / CS);
    int64_t vb = blockIdx.x;
    const int mb = nqb - 1 - (int)(vb % nqb); /* heaviest (causal) blocks first */
    vb /= nqb;
    const int h = (int)(vb % p.Hq);
    const int64_t b = vb / p.Hq;
    const int hk = h / p.group;
    const int m0 = mb * BM;
    /* Sequence b (attn_ragged.cuh; dense: the problem itself). */
    const fc_seq s = fcc_seq_of<RAG>(a, b);
    const int Sq = RAG ? (int)s.Sq : p.Sq, Sk = RAG ? (int)s.Sk : p.Sk;
    if (RAG && m0 >= Sq) return; /* past this sequence's rows */
    const fcc_seq_parts<RAG> sp(p, s);
    const fc_mask &mask = sp.mask(p);
    const int mlast = min(m0 + BM, Sq) - 1;

    const T *Kb = static_cast<const T *>(a.k) + b * a.sk[0] + (int64_t)hk * a.sk[2]; /* dense only */
    const T *Vb = static_cast<const T *>(a.v) + b * a.sv[0] + (int64_t)hk * a.sv[2];
    /* K/V tile `tile` into buffer buf (RAG: through that buffer's tables). */
    auto load_kv = [&](int tile, int buf) {
        if constexpr (RAG) {
            const bool contig = fcc_tile_contig(a, BN);
            load_key_rows<T, HD, BN, NTC>(sK + buf * BN * LD, static_cast<const T *>(a.k), tK + buf * BN, a.sk[1],
                                         contig, tile * BN, Sk, p.D, p.vec16, tid);
            load_key_rows<T, HD, BN, NTC>(sV + buf * BN * LD, static_cast<const T *>(a.v), tV + buf * BN, a.sv[1],
                                         contig, tile * BN, Sk, p.D, p.vec16, tid);
        } else {
            load_tile<T, HD, BN, NTC>(sK + buf * BN * LD, Kb, a.sk[1], tile * BN, p.Sk, p.D, p.vec16, tid);
            load_tile<T, HD, BN, NTC>(sV + buf * BN * LD, Vb, a.sv[1], tile * BN, p.Sk, p.D, p.vec16, tid);
        }
    };
    auto kv_rows = [&](int tile, int buf) {
        if constexpr (RAG)
            fcc_kv_rows<BN, NTC>(tK + buf * BN, tV + buf * BN, a, fcc_seq_of<RAG>(a, b), b, hk, (int64_t)tile * BN,
                                fcc_tile_contig(a, BN), tid);
    };

    const KeyTiles kt = key_tiles<BN>(mask, m0, mlast);
    const Vis vfirst = vis_of(mask, m0, Sq), vlast = vis_of(mask, mlast, Sq);
    const int row0 = m0 + warp * 16 + g; /* this thread's rows: row0, row0 + 8 */
    const RowVis rv = row_vis(mask, row0, Sq);
    fc_score_modf mod = {0.f, 0.f, 0.f};
    if (MOD) mod = fcc_score_mod_l2(p, b, h);

    const int64_t rowbase = fcc_rowbuf_at<RAG>(a, s, b, h, 0);
    float Lr[2], Dr[2];
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        const int row = row0 + 8 * hf;
        Lr[hf] = row < Sq ? lse_l2(Lb[rowbase + row]) : INFINITY;
        Dr[hf] = row < Sq ? Db[rowbase + row] : 0.f;
    }

    load_tile<T, HD, BM, NTC>(sQ, static_cast<const T *>(a.q) + fc_attn_row_offset(&s, a.sq, 0, h), a.sq[1], m0, Sq,
                         p.D, p.vec16, tid);
    load_tile<T, HD, BM, NTC>(sdO, static_cast<const T *>(a.dout) + fc_attn_row_offset(&s, a.sdo, 0, h), a.sdo[1], m0,
                         Sq, p.D, p.vec16, tid);
    if constexpr (RAG) { /* the tables of the first two tiles (NB = 1: of the first) */
        if (kt.first < kt.b1) {
            kv_rows(kt.first, 0);
            if (NB == 2 && kt.next(kt.first) < kt.b1) kv_rows(kt.next(kt.first), 1);
        }
        __syncthreads();
    }
    if (kt.first < kt.b1) load_kv(kt.first, 0);
    cp_async_commit();

    const int a_off = (warp * 16 + (lane & 15)) * LD + (lane >> 4) * EPC;
    const int bn_off = ((lane >> 4) * 8 + (lane & 7)) * LD + ((lane >> 3) & 1) * EPC;
    const int bt_off = (((lane >> 3) & 1) * 8 + (lane & 7)) * LD + (lane >> 4) * 8;
    const uint32_t sQa = smem_u32(sQ), sdOa = smem_u32(sdO);

    float acc_dq[ND][4];
#pragma unroll
    for (int j = 0; j < ND; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_dq[j][e] = 0.f;

    for (int t = kt.first, buf = 0; t < kt.b1; t = kt.next(t), buf = NB == 2 ? buf ^ 1 : 0) {
        cp_async_wait<0>();
        __syncthreads();
        const int tn = kt.next(t);
        if constexpr (NB == 2) {
            if (tn < kt.b1) load_kv(tn, buf ^ 1);
            cp_async_commit();
            /* RAG: buffer buf's tables were read by tile t's load, before the
             * barrier above; they take the tile after tn, loaded next iteration. */
            if constexpr (RAG) {
                if (tn < kt.b1 && kt.next(tn) < kt.b1) kv_rows(kt.next(tn), buf);
            }
        }
        const int n0 = t * BN;
        const uint32_t sKa = smem_u32(sK + buf * BN * LD), sVa = smem_u32(sV + buf * BN * LD);
        const bool full = tile_full<BN>(vfirst, vlast, n0, Sk);
        /* dQ += dS K: on a partial tile the K chunks some row of this warp
         * cannot see are read with non-finite values as 0 (dS is 0 there);
         * taken after the products (registers). */
        auto san_of = [&]() -> uint32_t {
            return full ? 0u
                        : masked_chunks<BN / 16>(vis_of(mask, m0 + warp * 16, Sq),
                                                 vis_of(mask, m0 + warp * 16 + 15, Sq), n0);
        };

        if constexpr (F32) { /* 3xTF32 (the dK/dV kernel's note) */
            float s[1][NJ][4], dp[1][NJ][4];
            tile_abt_3xtf32<1, NJ, HD, LD, true>(s, sQa, a_off, sKa, bn_off); /* S = Q Kᵀ */
            const uint32_t vis = dq_p<V, NJ, fcc_tanh_accurate>(p, sp.score(p), mod, s[0], rv, Lr, row0, n0, t4, full);
            tile_abt_3xtf32<1, NJ, HD, LD, true>(dp, sdOa, a_off, sVa, bn_off); /* dP = dO Vᵀ */
            dq_ds(dp[0], s[0], Dr, full, vis);
            uint32_t ah[NJ][4], al[NJ][4];
            split_c_as_a(dp[0], ah, al);
            const uint32_t san = san_of();
            const float *Kt = sK + buf * BN * LD;
            if (san) tile_ab_3xtf32<NJ, HD / 8, LD, true>(acc_dq, ah, al, Kt, 0, g, t4, san);
            else tile_ab_3xtf32<NJ, HD / 8, LD>(acc_dq, ah, al, Kt, 0, g, t4);
        } else {
        float acc_s[NJ][4], acc_dp[NJ][4];
        uint32_t da[NJ / 2][4];
        tile_abt<T, HD, NJ>(acc_s, sQa, a_off, sKa + 2 * ko * LD, bn_off); /* S = Q Kᵀ */
        const uint32_t vis = dq_p<V>(p, sp.score(p), mod, acc_s, rv, Lr, row0, n0 + ko, t4, full);
        tile_abt<T, HD, NJ>(acc_dp, sdOa, a_off, sVa + 2 * ko * LD, bn_off); /* dP = dO Vᵀ */
        dq_ds(acc_dp, acc_s, Dr, full, vis);
        tile_pack_p<T>(acc_dp, da);                    /* dS rounded to T */
        const uint32_t san = san_of();
        if constexpr (CS > 1) {
            /* Wide heads: the pair's dS halves through smem, then dQ over
             * all BN keys on this warp's slice of the head dim. The
             * previous tile's readers finished before this iteration's
             * first barrier. */
            stage_st(sdS, da, warp * 16 + g, ko + 2 * t4);
            pair_sync(warp);
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk) {
                uint32_t dk[1][4];
                stage_ld(dk[0], smem_u32(sdS), warp, kk, lane);
                if (san) tile_ab<T, HD, 1, true>(acc_dq, dk, sKa + 2 * kk * 16 * LD, bt_off, san >> kk, co);
                else tile_ab<T, HD, 1>(acc_dq, dk, sKa + 2 * kk * 16 * LD, bt_off, 0u, co);
            }
        } else {
            if (san) tile_ab<T, HD, BN / 16, true>(acc_dq, da, sKa, bt_off, san);
            else tile_ab<T, HD, BN / 16>(acc_dq, da, sKa, bt_off);
        }
        } /* F16/BF16 */
        if constexpr (NB == 1) { /* the one buffer (and its tables) take tile tn once everyone is done */
            __syncthreads();
            if (tn < kt.b1) {
                if constexpr (RAG) {
                    kv_rows(tn, 0);
                    __syncthreads();
                }
                load_kv(tn, 0);
            }
            cp_async_commit();
        }
    }
    cp_async_wait<0>();

    const fc_seq se = fcc_seq_of<RAG>(a, b); /* re-read (RAG), not kept through the loop */
    T *dqp = static_cast<T *>(a.dq) + fc_attn_row_offset(&se, a.sdq, 0, h);
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
        const int row = row0 + 8 * hf;
        if (row >= Sq) continue;
        T *r = dqp + (int64_t)row * a.sdq[1];
#pragma unroll
        for (int j = 0; j < ND; ++j)
            store_pair(r, co + j * 8 + 2 * t4, p.D, acc_dq[j][2 * hf] * p.scale, acc_dq[j][2 * hf + 1] * p.scale,
                       p.out_pairs);
    }
}

/* dq = scale · dQacc  ([nb, Hq, nq, HD] fp32, the row buffers' layout
 * (attn_ragged.cuh: [B, Hq, Sq], packed [1, Hq, Tq]) → strided T), after the
 * atomics. Packed rows outside every sequence got no atomics: zeros. */
template <typename T, int HD>
__global__ void __launch_bounds__(256) bwd_dq_convert_kernel(const __grid_constant__ fcc_attn p, const float *dQacc,
                                                             int64_t nb, int64_t nq) {
    const fc_attn &a = p.a;
    const int64_t n = nb * p.Hq * nq * (int64_t)(HD / 2);
    for (int64_t idx = (int64_t)blockIdx.x * 256 + threadIdx.x; idx < n; idx += (int64_t)gridDim.x * 256) {
        const int c = (int)(idx % (HD / 2)) * 2;
        const int64_t row = idx / (HD / 2);
        if (c >= p.D) continue;
        const int64_t i = row % nq, bh = row / nq, h = bh % p.Hq, b = bh / p.Hq;
        const float2 x = *reinterpret_cast<const float2 *>(dQacc + row * HD + c);
        T *r = static_cast<T *>(a.dq) + b * a.sdq[0] + i * a.sdq[1] + h * a.sdq[2];
        store_pair(r, c, p.D, x.x * p.scale, x.y * p.scale, p.out_pairs);
    }
}

/* ---------------------------------------------------------------- host */
static int padded_hd(int D) { return D <= 32 ? 32 : D <= 64 ? 64 : D <= 96 ? 96 : D <= 128 ? 128 : D <= 192 ? 192 : 256; }

/* deterministic == 0 may use the atomic-dQ path; it is used only where it
 * measured faster (H100, bf16: HD ≤ 64 at S = 4k, +1–5 %); at HD = 128 and
 * at S = 1k the separate dQ kernel was faster (benchmarks/NOTES.md). */
static bool use_atomic(const fcc_attn &p) {
    return p.a.deterministic == 0 && p.a.dtype != FLASHC_F32 && padded_hd(p.D) <= 64 && p.Sk >= 2048 &&
           dkdv_smem<__half>(padded_hd(p.D), true, fc_attn_is_ragged(&p.a)) <= (size_t)p.dev.smem_optin;
}

/* Buffers of the streamed tiles (dkdv_smem) the plan's shared-memory limit
 * takes for the deterministic kernels: 2, 1 (has_nb1), or 0 (none fits).
 * F32 takes 1 where only that lets two CTAs share an SM (HD 128: 4 warps a
 * CTA cannot hide the split products' latencies alone). */
static int bwd_nbuf(const fcc_attn &p) {
    const int HD = padded_hd(p.D);
    const bool rag = fc_attn_is_ragged(&p.a), f32 = p.a.dtype == FLASHC_F32;
    const size_t lim = (size_t)p.dev.smem_optin;
    auto need = [&](int nb) {
        return f32 ? std::max(dkdv_smem<float>(HD, false, rag, nb), dq_smem<float>(HD, rag, nb))
                   : std::max(dkdv_smem<__half>(HD, false, rag, nb), dq_smem<__half>(HD, rag, nb));
    };
    if (f32 && has_nb1(HD, f32) && 2 * need(2) > lim && 2 * need(1) <= lim) return 1;
    if (need(2) <= lim) return 2;
    if (has_nb1(HD, f32) && need(1) <= lim) return 1;
    return 0;
}

/* The deterministic kernels (dK/dV, then dQ) with NB buffers. */
template <typename T, int HD, int V, bool RAG, int NB>
static flashc_status run_bwd_det(const fcc_attn &p, const float *Lb, const float *Db) {
    cudaStream_t st = fcc_stream(p.a.stream);
    const int nkb = (p.Sk + BK - 1) / BK;
    const unsigned gk = (unsigned)((int64_t)nkb * p.Hkv * p.a.B);
    auto kern = bwd_dkdv_kernel<T, HD, false, V, RAG, NB>;
    constexpr size_t smem_kv = dkdv_smem<T>(HD, false, RAG, NB), smem_q = dq_smem<T>(HD, RAG, NB);
    FCC_TRY(fcc_set_smem((const void *)kern, smem_kv, "attn_bwd_tc (dK/dV)"));
    kern<<<gk, NT * col_slices(HD), smem_kv, st>>>(p, nkb, Lb, Db, nullptr);
    FCC_CHECK_LAUNCH("bwd_dkdv_kernel");
    auto kq = bwd_dq_kernel<T, HD, V, RAG, NB>;
    FCC_TRY(fcc_set_smem((const void *)kq, smem_q, "attn_bwd_tc (dQ)"));
    const int nqb = (p.Sq + BM - 1) / BM;
    kq<<<(unsigned)((int64_t)nqb * p.Hq * p.a.B), NT * col_slices(HD), smem_q, st>>>(p, nqb, Lb, Db);
    FCC_CHECK_LAUNCH("bwd_dq_kernel");
    return FLASHC_OK;
}

/* RAG (attn_ragged.cuh): the grids run over the B sequences and the longest
 * one's blocks; the kernels add their key-row tables to shared memory. */
template <typename T, int HD, int V, bool RAG>
static flashc_status run_bwd(const fcc_attn &p, const float *Lb, const float *Db, float *dQacc) {
    if constexpr (HD <= 64 && sizeof(T) == 2) { /* the atomic path exists only where it is used */
        if (dQacc) {
            cudaStream_t st = fcc_stream(p.a.stream);
            const int nkb = (p.Sk + BK - 1) / BK;
            const unsigned gk = (unsigned)((int64_t)nkb * p.Hkv * p.a.B);
            const fcc_rowbuf rb = fcc_rowbuf_of(p.a);
            const int64_t nrows = rb.nb * p.Hq * rb.nq;
            FCC_CHECK(cudaMemsetAsync(dQacc, 0, (size_t)nrows * HD * sizeof(float), st));
            auto kern = bwd_dkdv_kernel<T, HD, true, V, RAG>;
            constexpr size_t smem = dkdv_smem<T>(HD, true, RAG);
            FCC_TRY(fcc_set_smem((const void *)kern, smem, "attn_bwd_tc (dK/dV)"));
            kern<<<gk, NT, smem, st>>>(p, nkb, Lb, Db, dQacc);
            FCC_CHECK_LAUNCH("bwd_dkdv_kernel");
            const int64_t want = (nrows * (HD / 2) + 255) / 256;
            const unsigned gc = (unsigned)(want < 65536 * 16 ? want : 65536 * 16);
            bwd_dq_convert_kernel<T, HD><<<gc, 256, 0, st>>>(p, dQacc, rb.nb, rb.nq);
            FCC_CHECK_LAUNCH("bwd_dq_convert_kernel");
            return FLASHC_OK;
        }
    }
    if constexpr (has_nb1(HD, sizeof(T) == 4)) {
        if (bwd_nbuf(p) == 1) return run_bwd_det<T, HD, V, RAG, 1>(p, Lb, Db);
    }
    return run_bwd_det<T, HD, V, RAG, 2>(p, Lb, Db);
}

template <typename T>
static flashc_status dispatch_bwd(const fcc_attn &p, const float *Lb, const float *Db, float *dQacc) {
    const int mode = fc_score_mode(&p.score);
#define FCC_BWD_HD(HD)                                                                              \
    case HD:                                                                                        \
        if constexpr (sizeof(T) == 4 && HD > 128) break; /* F32: HD ≤ 128 (fcc_bwd_mma_supports) */ \
        else return fcc_score_dispatch<FCC_SCORE_FEW>(                                              \
            mode, [&](auto v) {                                                                     \
                return fc_attn_is_ragged(&p.a) ? run_bwd<T, HD, decltype(v)::value, true>(p, Lb, Db, dQacc)  \
                                               : run_bwd<T, HD, decltype(v)::value, false>(p, Lb, Db, dQacc); \
            })
    switch (padded_hd(p.D)) {
    FCC_BWD_HD(32);
    FCC_BWD_HD(64);
    FCC_BWD_HD(96);
    FCC_BWD_HD(128);
    FCC_BWD_HD(192);
    FCC_BWD_HD(256);
    default: break;
    }
#undef FCC_BWD_HD
    return fcc_error(FLASHC_ERR_INTERNAL, "attn_bwd_tc: no tile for head dim %d", p.D);
}

} // namespace fctcb

bool fcc_bwd_mma_supports(const fcc_attn &p) {
    using namespace fctcb;
    const fc_attn &a = p.a;
    /* F32 in 3xTF32 (fp32 accuracy) at D ≤ 128, where its fp32 tiles fit;
     * F64 in F64: the generic kernel. */
    if (a.dtype != FLASHC_F16 && a.dtype != FLASHC_BF16 && a.dtype != FLASHC_F32) return false;
    if (a.dtype == FLASHC_F32 && a.D > 128) return false;
    /* D > 256: no tile (the generic kernel). */
    if (a.D < 1 || a.D > 256) return false;
    /* Empty problems: the generic kernel writes the zeros. */
    if (a.Sq == 0 || a.Sk == 0 || a.B == 0) return false;
    /* mma.sync bf16 needs sm_80; ldmatrix/cp.async need contiguous rows of d;
     * positions are int32 inside the kernels. */
    if (p.dev.cc < 80 || !p.d_contig || !p.fits_int32) return false;
    const int64_t gmax = INT_MAX;
    const fcc_rowbuf rb = fcc_rowbuf_of(a);
    if ((rb.nb * a.Hq * rb.nq + 7) / 8 > gmax || ((a.Sk + BK - 1) / BK) * a.Hkv * a.B > gmax ||
        ((a.Sq + BM - 1) / BM) * a.Hq * a.B > gmax)
        return false;
    /* Shared memory: the plan's limit (fcc_device::smem_optin) takes some instance. */
    return use_atomic(p) || bwd_nbuf(p) > 0;
}

flashc_status fcc_bwd_mma_run(const fcc_attn &p) {
    using namespace fctcb;
    const bool atomic = use_atomic(p);
    cudaStream_t st = fcc_stream(p.a.stream);
    /* Scratch: L and Δ [2][rows] fp32 (prep), dQ fp32 [rows][HD] (atomic path);
     * rows: the row buffers' (attn_ragged.cuh: B·Hq·Sq, packed Hq·Tq). */
    const fcc_rowbuf rb = fcc_rowbuf_of(p.a);
    const size_t nrows = (size_t)(rb.nb * p.Hq * rb.nq);
    const size_t off_Q = (2 * nrows + 3) & ~(size_t)3;
    const size_t nfl = atomic ? off_Q + nrows * padded_hd(p.D) : 2 * nrows;
    float *scr = nullptr;
    FCC_CHECK(fcc_scratch_alloc((void **)&scr, nfl * sizeof(float), st));
    float *Lb = scr, *Db = scr + nrows, *dQacc = atomic ? scr + off_Q : nullptr;
    flashc_status s = fcc_bwd_prep_run(p, Lb, Db);
    if (s == FLASHC_OK) s = fcc_bwd_dsinks_run(p, Lb, Db);
    if (s == FLASHC_OK)
        s = p.a.dtype == FLASHC_BF16 ? dispatch_bwd<__nv_bfloat16>(p, Lb, Db, dQacc)
            : p.a.dtype == FLASHC_F32 ? dispatch_bwd<float>(p, Lb, Db, dQacc)
                                      : dispatch_bwd<__half>(p, Lb, Db, dQacc);
    /* Stream-ordered: freed after the kernels above have run. */
    const cudaError_t e = fcc_scratch_free(scr, st);
    if (s == FLASHC_OK && e != cudaSuccess) return fcc_cuda_error(e, __FILE__, __LINE__, "fcc_scratch_free");
    return s;
}
