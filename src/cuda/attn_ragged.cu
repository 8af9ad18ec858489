/*
 * attn_ragged.cu — the two small passes of ragged problems (attn_ragged.cuh)
 * around the attention kernels, both on p.a.stream:
 *
 *   KV append (flashc_attn_kvcache_fwd): k_new, v_new [B, S_new, Hkv, D]
 *     into the cache in place, key position seqlen_k[b] + t of sequence b,
 *     through fc_attn_key_offset (cache_batch_idx, block table); before the
 *     attention, whose fc_attn_seq then counts them (seqlen_k_add = S_new).
 *   Gaps (varlen backward): zeros into the rows of dq, dk, dv that belong to
 *     no sequence (flashc.h: the backward writes them).
 *
 * One warp per row of D elements; rows grid-strided.
 */
#include "attn_ragged.cuh"

#include <algorithm>

/* ------------------------------------------------------------- append */
template <class T> __global__ void __launch_bounds__(256) fcc_kv_append_kernel(const __grid_constant__ fc_attn a) {
    /* The decode kernel after it may start (it waits for this grid before reading the cache:
     * attn_decode.cuh). */
    fcc_pdl_trigger();
    const int lane = threadIdx.x & 31;
    const int64_t nrows = a.B * a.S_new * a.Hkv;
    for (int64_t row = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5); row < nrows; row += (int64_t)gridDim.x * 8) {
        const int64_t hk = row % a.Hkv, bt = row / a.Hkv, t = bt % a.S_new, b = bt / a.S_new;
        /* The raw cache length, not fc_attn_seq's Sk − S_new: that one is
         * clamped to the capacity and would move the append onto cached keys. */
        const int64_t j = (int64_t)a.seqlen_k[b * a.sseqlen_k] + t;
        if (j < 0 || j >= a.Sk) continue; /* outside the cache: skipped, never written */
        const fc_seq s = fc_attn_seq(&a, b);
        T *kc = (T *)a.k + fc_attn_key_offset(&a, &s, b, a.sk, j, hk);
        T *vc = (T *)a.v + fc_attn_key_offset(&a, &s, b, a.sv, j, hk);
        const T *kn = (const T *)a.k_new + b * a.skn[0] + t * a.skn[1] + hk * a.skn[2];
        const T *vn = (const T *)a.v_new + b * a.svn[0] + t * a.svn[1] + hk * a.svn[2];
        for (int64_t d = lane; d < a.D; d += 32) {
            kc[d * a.sk[3]] = kn[d * a.skn[3]];
            vc[d * a.sv[3]] = vn[d * a.svn[3]];
        }
    }
}

bool fcc_kv_append_launches(const fc_attn *a) {
    return a->k_new && a->v_new && a->seqlen_k && a->S_new > 0 && a->B > 0 && a->Sk > 0;
}

flashc_status fcc_kv_append_run(const fc_attn *a) {
    if (!fcc_kv_append_launches(a)) return FLASHC_OK;
    const int64_t want = (a->B * a->S_new * a->Hkv + 7) / 8; /* 8 rows per block */
    const unsigned grid = (unsigned)std::min<int64_t>(want, 65535 * 8);
    FCC_DISPATCH_DTYPE(a->dtype, fcc_kv_append_kernel<T><<<grid, 256, 0, fcc_stream(a->stream)>>>(*a));
    FCC_CHECK_LAUNCH("fcc_kv_append_kernel");
    return FLASHC_OK;
}

/* --------------------------------------------------------------- gaps */
/* The rows of a packed axis of T rows outside every sequence: [0, lo) and
 * [hi, T), lo/hi the first row of the first sequence and the end of the
 * last (valid cu_seqlens leave no other rows outside the sequences). */
struct fcc_gaps {
    int64_t lo, hi, n; /* n = lo + T − hi rows */
    __device__ __forceinline__ fcc_gaps(int64_t lo_, int64_t end, int64_t T) {
        lo = lo_;
        hi = end > lo ? end : lo;
        n = lo + T - hi;
    }
    __device__ __forceinline__ int64_t row(int64_t g) const { return g < lo ? g : hi + (g - lo); }
};

template <class T> __device__ __forceinline__ void fcc_zero_row(T *base, const int64_t st[4], int64_t t, int64_t h,
                                                                int64_t D, int lane) {
    T *r = base + t * st[1] + h * st[2];
    for (int64_t d = lane; d < D; d += 32) r[d * st[3]] = fcc_type<T>::from(0.f);
}

/* Warp w of the grid zeroes gap rows w, w + (warps of the grid), ... of
 * dq (cu_q: gap rows × Hq) then of dk and dv (cu_k: gap rows × Hkv). */
template <class T> __global__ void __launch_bounds__(256) fcc_bwd_gaps_kernel(const __grid_constant__ fc_attn a) {
    const int lane = threadIdx.x & 31;
    const fc_seq first = fc_attn_seq(&a, 0), last = fc_attn_seq(&a, a.B - 1);
    const fcc_gaps gq(first.q_row, last.q_row + last.Sq, a.Tq), gk(first.k_row, last.k_row + last.Sk, a.Tk);
    const int64_t nq = a.cu_q ? gq.n * a.Hq : 0, nk = a.cu_k ? gk.n * a.Hkv : 0;
    for (int64_t w = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5); w < nq + nk; w += (int64_t)gridDim.x * 8) {
        if (w < nq) {
            fcc_zero_row((T *)a.dq, a.sdq, gq.row(w / a.Hq), w % a.Hq, a.D, lane);
        } else {
            const int64_t t = gk.row((w - nq) / a.Hkv), hk = (w - nq) % a.Hkv;
            fcc_zero_row((T *)a.dk, a.sdk, t, hk, a.D, lane);
            fcc_zero_row((T *)a.dv, a.sdv, t, hk, a.D, lane);
        }
    }
}

flashc_status fcc_bwd_ragged_gaps_run(const fcc_attn &p) {
    const fc_attn &a = p.a;
    if ((!a.cu_q || a.Tq == 0) && (!a.cu_k || a.Tk == 0)) return FLASHC_OK;
    /* The gaps' size is on the device: a small grid strides over them. */
    const int64_t rows = (a.cu_q ? a.Tq * a.Hq : 0) + (a.cu_k ? a.Tk * a.Hkv : 0);
    const unsigned grid = (unsigned)std::min<int64_t>((rows + 7) / 8, 1024);
    FCC_DISPATCH_DTYPE(a.dtype, fcc_bwd_gaps_kernel<T><<<grid, 256, 0, fcc_stream(a.stream)>>>(a));
    FCC_CHECK_LAUNCH("fcc_bwd_gaps_kernel");
    return FLASHC_OK;
}
