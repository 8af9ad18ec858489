/*
 * attn_generic.cuh — pieces shared by the generic (SIMT) attention kernels,
 * attn_generic_fwd.cu and attn_generic_bwd.cu: the tile shapes and the
 * shared-memory tile loader.
 *
 * Every kernel runs 256 threads as a 16 × 16 grid (tx = tid % 16,
 * ty = tid / 16). A score tile S [BM query rows × BN key columns] is owned
 * as rows ty + 16·r (r < RM) × columns tx + 16·c (c < RN); an output tile
 * [rows × DP] as rows ty + 16·r × dims tx + 16·c (c < DP/16). Row
 * reductions are therefore shuffles among the 16 lanes sharing ty.
 *
 * Q/K/V tiles are held in shared memory in the accumulation type A (fp32, or
 * fp64 for F64), rows padded to DP + 1 elements so that the 16 lanes reading
 * 16 different rows at one d hit 16 different banks.
 */
#ifndef FC_ATTN_GENERIC_CUH
#define FC_ATTN_GENERIC_CUH

#include "attn_params.cuh"
#include "attn_ragged.cuh"
#include "attn_score.cuh"

#include <limits.h>
#include <type_traits>

/* DP: head dim padded up to 32, 64, 128 or 256. Tiles shrink with DP and
 * with fp64 so that the biggest kernel (dK/dV: K, V, Q, dO tiles plus P and
 * dS) stays under the 163 KB an sm_80 block may use. SMALL: the shape for
 * GPUs with less shared memory (chosen by the host from the plan's limit,
 * fcc_device::smem_optin): 16 × 16 score tiles, and the Q/K/V/dO tiles hold
 * a chunk of DC ≤ 64 head dims at a time (NCH chunks, loaded in turn for
 * each product; the output rows stay whole in registers): ≤ 38 KB at fp64
 * D = 256, so every problem runs on a 48 KB GPU. Regular: DC = DP, the tiles
 * stay resident for their loop. */
template <class A, int DP, bool SMALL = false> struct fcc_gen_cfg {
    static constexpr bool dbl = sizeof(A) == 8;
    static constexpr int BM = SMALL ? 16 : dbl ? (DP >= 256 ? 16 : DP >= 128 ? 32 : 64) : (DP >= 256 ? 32 : 64);
    static constexpr int BN = SMALL ? 16 : dbl ? (DP >= 256 ? 16 : 32) : (DP >= 128 ? 32 : 64);
    static constexpr int THREADS = 256;
    static constexpr int DC = SMALL && DP > 64 ? 64 : DP; /* head dims a tile holds */
    static constexpr int NCH = DP / DC;                   /* chunks of a head row */
    static constexpr int RM = BM / 16, RN = BN / 16, CD = DP / 16, CC = DC / 16;
    static constexpr int LD = DC + 1; /* padded row of a Q/K/V/dO tile */
    static constexpr int LP = BN + 1; /* padded row of a P/dS tile */
    static_assert(BM % 16 == 0 && BN % 16 == 0 && DP % 16 == 0 && DP % DC == 0, "tile shapes");
};

/* f(std::integral_constant<int, I>) for I = 0 .. N−1 (chunk loops whose
 * index selects registers). */
template <int N, int I = 0, class F> __device__ __forceinline__ void fcc_static_for(F &&f) {
    if constexpr (I < N) {
        f(std::integral_constant<int, I>{});
        fcc_static_for<N, I + 1>(f);
    }
}

/* Loads rows [0, nrows) × dims [0, D) of a [rows, D] view into
 * sm[ROWS][DP+1], zero-filling the rest so padded rows contribute 0 (never
 * NaN) to sums: row r starts at base + off(r) (asked only for r < nrows),
 * dim stride dstride (elements, any sign). */
template <class T, int DP, int ROWS, class A, class Off>
__device__ __forceinline__ void fcc_load_tile_at(A *sm, const T *__restrict__ base, Off off, int64_t dstride,
                                                 int nrows, int D) {
    for (int idx = threadIdx.x; idx < ROWS * DP; idx += 256) {
        const int r = idx / DP, d = idx % DP;
        A v = A(0);
        if (r < nrows && d < D) v = fcc_type<T>::to(base[off(r) + d * dstride]);
        sm[r * (DP + 1) + d] = v;
    }
}
/* ... of a strided view: row r at base + r·rstride. */
template <class T, int DP, int ROWS, class A>
__device__ __forceinline__ void fcc_load_tile(A *sm, const T *__restrict__ base, int64_t rstride,
                                              int64_t dstride, int nrows, int D) {
    fcc_load_tile_at<T, DP, ROWS>(sm, base, [=](int r) { return r * rstride; }, dstride, nrows, D);
}
/* ... key rows through a table of element offsets (attn_ragged.cuh,
 * fcc_key_rows): row r at base + tbl[r]. */
template <class T, int DP, int ROWS, class A>
__device__ __forceinline__ void fcc_load_tile_tbl(A *sm, const T *__restrict__ base, const int64_t *tbl,
                                                  int64_t dstride, int nrows, int D) {
    fcc_load_tile_at<T, DP, ROWS>(sm, base, [=](int r) { return tbl[r]; }, dstride, nrows, D);
}

/* Head dims [c0, c0 + DC) of the nj key rows from j0 of K or V (x = a.k or
 * a.v, strides st) into sm[BN][DC + 1]: dense, row j at dense + j·st[1]
 * (dense = x at the block's batch and kv head); RAG, through the tile's
 * key-row table tbl (fcc_kv_rows). */
template <class T, int DC, int BN, bool RAG, class A>
__device__ __forceinline__ void fcc_load_key_chunk(A *sm, const T *x, const T *dense, const int64_t *tbl,
                                                   const int64_t *st, int64_t j0, int nj, int c0, int D) {
    if constexpr (RAG) fcc_load_tile_tbl<T, DC, BN>(sm, x + c0 * st[3], tbl, st[3], nj, D - c0);
    else fcc_load_tile<T, DC, BN>(sm, dense + j0 * st[1] + c0 * st[3], st[1], st[3], nj, D - c0);
}

/* The query block of a forward / dQ block: blockIdx.x = (b·Hq + h)·nqb +
 * (nqb − 1 − qb), so that the heaviest (causal) blocks start first; rows
 * [i0, i0 + ni) of head h (kv head hk), batch b. */
struct fcc_qblock {
    int64_t b, h, hk, i0;
    int ni;
};
template <int BM> __device__ __forceinline__ fcc_qblock fcc_qblock_of(const fc_attn &a, int64_t nqb) {
    fcc_qblock q;
    int64_t bid = blockIdx.x;
    const int64_t qb = nqb - 1 - bid % nqb;
    bid /= nqb;
    q.h = bid % a.Hq;
    q.b = bid / a.Hq;
    q.hk = q.h / (a.Hq / a.Hkv);
    q.i0 = qb * BM;
    q.ni = (int)min((int64_t)BM, a.Sq - q.i0);
    return q;
}

/* The visible key ranges of this thread's rows ty + 16·r of a query block
 * (all empty for padding rows ≥ ni). */
template <int RM>
__device__ __forceinline__ void fcc_rows_visible(const fc_mask &m, int64_t i0, int ni, int ty, int64_t (&se)[RM],
                                                 int64_t (&lo)[RM], int64_t (&hi)[RM]) {
#pragma unroll
    for (int r = 0; r < RM; ++r) {
        se[r] = lo[r] = hi[r] = 0;
        if (ty + 16 * r < ni) fc_visible_keys(&m, i0 + ty + 16 * r, &se[r], &lo[r], &hi[r]);
    }
}

/* max that keeps NaN (fmax drops it): a NaN score a row sees must reach its
 * softmax, not read as the masked −inf (flashc.h: non-finite results). */
template <class A> __device__ __forceinline__ A fcc_max_nan(A a, A b) {
    return a != a || b != b ? a + b : fmax(a, b);
}
/* Max / sum over the 16 lanes that share ty (lanes differ in bits 0..3). */
template <class A> __device__ __forceinline__ A fcc_row_max16(A v) {
#pragma unroll
    for (int off = 8; off > 0; off >>= 1) v = fcc_max_nan(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}
template <class A> __device__ __forceinline__ A fcc_row_sum16(A v) {
#pragma unroll
    for (int off = 8; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

/* The score pipeline (attn_score.h) in the generic kernels' unit (natural:
 * exp, not exp2) and accumulation type A: fc_score_modf for fp32, fc_score_mod
 * for fp64, tanhf / tanh (F32/F64 accuracy). For the kernels' modifier
 * variants; the plain one keeps qk·scale. */
template <class A> struct fcc_gen_mod_t;
template <> struct fcc_gen_mod_t<float> { using type = fc_score_modf; };
template <> struct fcc_gen_mod_t<double> { using type = fc_score_mod; };
__device__ __forceinline__ void fcc_gen_mod_as(fc_score_mod m, fc_score_modf &out) { out = fc_score_modf_of(m); }
__device__ __forceinline__ void fcc_gen_mod_as(fc_score_mod m, fc_score_mod &out) { out = m; }
template <class A>
__device__ __forceinline__ typename fcc_gen_mod_t<A>::type fcc_gen_mod(const fcc_attn &p, int64_t b, int64_t h) {
    typename fcc_gen_mod_t<A>::type m;
    fcc_gen_mod_as(fc_score_mod_make(&p.score, b, h, 1.0), m);
    return m;
}
/* ... for a kernel of variant V (nothing to make on the plain path). */
template <int V, class A>
__device__ __forceinline__ typename fcc_gen_mod_t<A>::type fcc_gen_mod_v(const fcc_attn &p, int64_t b, int64_t h) {
    return V != FC_SCORE_PLAIN ? fcc_gen_mod<A>(p, b, h) : typename fcc_gen_mod_t<A>::type{};
}
/* x (natural units) of variant V (attn_score.cuh) from qk = <q, k> and the
 * ALiBi distance; dg = ∂x/∂(scale·qk). */
template <int V, class A, class M> __device__ __forceinline__ A fcc_gen_score(const M &m, A qk, A dist, A &dg) {
    return fcc_score_step<V, fcc_tanh_accurate>(m, qk, dist, dg);
}

/* acc_i += Σ_j P_ij x_j over the tile's nj keys (P [BM][LP], X [BN][LD] in
 * shared memory), in key order: rows ty + 16r, dims tx + 16c of X into
 * acc[r][C0 + c], c < CW (a chunk of the head row: CW = CD, C0 = 0 when X
 * holds it all). The forward's O += P·V and the backward's dQ += dS·K. SKIP0
 * (tiles some row cannot wholly see, fcc_tile_all_visible): zero P entries
 * are skipped, so that a NaN/Inf in a key a row cannot see never reaches it
 * (0·NaN = NaN; flashc.h). */
template <class A, int RM, int CD, int LD, int LP, bool SKIP0 = false, int CW = CD, int C0 = 0>
__device__ __forceinline__ void fcc_tile_acc_pv(const A *Ps, const A *Xs, int nj, int ty, int tx,
                                                A (&acc)[RM][CD]) {
    static_assert(C0 + CW <= CD, "chunk inside the head row");
    for (int jj = 0; jj < nj; ++jj) {
        A pr[RM], xv[CW];
#pragma unroll
        for (int r = 0; r < RM; ++r) pr[r] = Ps[(ty + 16 * r) * LP + jj];
#pragma unroll
        for (int c = 0; c < CW; ++c) xv[c] = Xs[jj * LD + tx + 16 * c];
#pragma unroll
        for (int r = 0; r < RM; ++r) {
            if (SKIP0 && pr[r] == A(0)) continue;
#pragma unroll
            for (int c = 0; c < CW; ++c) acc[r][C0 + c] = fma(pr[r], xv[c], acc[r][C0 + c]);
        }
    }
}
/* ... dispatched on whether every row of [i0, i0 + ni) sees every key of [j0, j0 + nj). */
__device__ __forceinline__ bool fcc_tile_all_visible(const fc_mask &m, int64_t i0, int ni, int64_t j0, int nj) {
    int64_t sa, la, ha, sb, lb, hb;
    fc_visible_keys(&m, i0, &sa, &la, &ha);
    fc_visible_keys(&m, i0 + (ni > 0 ? ni - 1 : 0), &sb, &lb, &hb);
    return FC_TILE_FULL(sa, lb, ha, j0, j0 + nj);
}
template <class A, int RM, int CD, int LD, int LP, int CW = CD, int C0 = 0>
__device__ __forceinline__ void fcc_tile_acc_pv_masked(bool all_visible, const A *Ps, const A *Xs, int nj, int ty,
                                                       int tx, A (&acc)[RM][CD]) {
    if (all_visible) fcc_tile_acc_pv<A, RM, CD, LD, LP, false, CW, C0>(Ps, Xs, nj, ty, tx, acc);
    else fcc_tile_acc_pv<A, RM, CD, LD, LP, true, CW, C0>(Ps, Xs, nj, ty, tx, acc);
}

/* Launches a generic kernel (256 threads) over `blocks` CTAs with `smem`
 * bytes of dynamic shared memory (the attribute set once per kernel): an
 * error past the grid limit or when the launch fails. */
template <class Kern, class... Args>
static flashc_status fcc_gen_launch(Kern kern, int64_t blocks, size_t smem, cudaStream_t st, const char *name,
                                    Args... args) {
    FCC_TRY(fcc_set_smem((const void *)kern, smem, name));
    if (blocks > INT_MAX)
        return fcc_error(FLASHC_ERR_UNSUPPORTED, "%s: %lld blocks exceed the grid limit", name, (long long)blocks);
    kern<<<(unsigned)blocks, 256, smem, st>>>(args...);
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? FLASHC_OK : fcc_cuda_error(e, __FILE__, __LINE__, name);
}

/* acc += P·X with X staged as C (fcc_gen_cfg) holds it: the forward's
 * O += P·V and dQ += dS·K. Whole head rows (NCH = 1): X is already in Xs,
 * one barrier (P written). Chunks: per chunk of DC head dims a barrier (P
 * written; the previous chunk's reads done), load(c0) stages it into Xs, a
 * barrier, the chunk's columns of acc. */
template <class C, class A, class Load>
__device__ __forceinline__ void fcc_tile_acc_pv_chunked(bool all_visible, const A *Ps, const A *Xs, int nj, int D,
                                                        int ty, int tx, A (&acc)[C::RM][C::CD], Load &&load) {
    if constexpr (C::NCH == 1) {
        __syncthreads();
        fcc_tile_acc_pv_masked<A, C::RM, C::CD, C::LD, C::LP>(all_visible, Ps, Xs, nj, ty, tx, acc);
    } else {
        fcc_static_for<C::NCH>([&](auto ch) {
            constexpr int c0 = decltype(ch)::value * C::DC;
            if (c0 >= D) return;
            __syncthreads();
            load(c0);
            __syncthreads();
            fcc_tile_acc_pv_masked<A, C::RM, C::CD, C::LD, C::LP, C::CC, c0 / 16>(all_visible, Ps, Xs, nj, ty, tx,
                                                                                 acc);
        });
    }
}

/* The generic launchers' shape choice: the regular tiles where the plan's
 * shared-memory limit (fcc_device::smem_optin) takes them, else SMALL;
 * bytes(small) → size_t for either. An error when neither fits. */
template <class F>
static flashc_status fcc_gen_pick(const fcc_attn &p, size_t regular, size_t small, const char *name, F &&run) {
    if (regular <= (size_t)p.dev.smem_optin) return run(std::false_type{});
    if (small <= (size_t)p.dev.smem_optin) return run(std::true_type{});
    return fcc_error(FLASHC_ERR_UNSUPPORTED, "%s: needs %zu bytes of shared memory per block, the device (or "
                     "FLASHC_CUDA_SMEM_LIMIT) allows %d", name, small, p.dev.smem_optin);
}

/* Round p to the storage type before P·V (F16/BF16, as FlashAttention). */
template <class T, class A> __device__ __forceinline__ A fcc_round_to(A p) {
    return fcc_type<T>::to(fcc_type<T>::from(p));
}

/* Head dims padded: 32, 64, 128, 256. Calls BODY with `DP` bound. */
#define FCC_DISPATCH_DP(D, ...)                                               \
    if ((D) <= 32) { constexpr int DP = 32; __VA_ARGS__; }                    \
    else if ((D) <= 64) { constexpr int DP = 64; __VA_ARGS__; }               \
    else if ((D) <= 128) { constexpr int DP = 128; __VA_ARGS__; }             \
    else { constexpr int DP = 256; __VA_ARGS__; }

#endif
