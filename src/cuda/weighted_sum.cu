/*
 * weighted_sum.cu — weighted row-sum, forward and backward, every dtype.
 *
 *   x [..., D], w [D] -> y [...]:   y[r] = Σ_d x[r, d] · w[d]
 *   backward:  dx[r, d] = dy[r] · w[d],   dw[d] = Σ_r dy[r] · x[r, d]
 *
 * Rows r are the outer multi-index (fc_wsum.outer_shape, row-major); the
 * host first collapses outer axes that are uniformly strided in every
 * tensor, so a contiguous x has one outer axis and a row offset costs one
 * multiply. Accumulation is fp32 (fp64 for F64).
 *
 * Contiguous rows (unit D stride, D a multiple of 16 / sizeof(T), aligned)
 * take the fast paths below the generic kernels: persistent grids, 16-byte
 * loads, w in registers for short rows, long rows split along D, dx with
 * 16-byte stores, dw by column tiles × row chunks into fp32 (f64) partials
 * added in a fixed order. Everything else takes the generic kernels:
 *
 * Forward: a group of TPR lanes per row (TPR = 32 for long rows, 4 for short
 * ones, 1 — a thread per row — when x is strided along D but adjacent rows
 * are adjacent in memory). With a unit D stride, x (and w when it is
 * contiguous with the same 16-byte phase) is read with 16-byte vector loads,
 * four in flight per lane. Very long rows with few of them are split along
 * D into fixed chunks whose partial sums a second kernel adds in order.
 *
 * Backward dw: rows are cut into nchunk fixed chunks (a function of R only);
 * each block sums its chunk for W columns into partial[chunk][d]; a second
 * kernel adds the chunks in order. No atomics: bit-identical on every run.
 * Temporaries are fcc_scratch_alloc'd on the stream (the module pool).
 */
#include "fc_cuda.cuh"
#include "common/knobs.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Outer index -> offset, for up to FLASHC_MAX_DIMS - 1 collapsed axes. */
struct fcc_outer {
    int n;
    int64_t shape[FLASHC_MAX_DIMS];
};
__host__ __device__ __forceinline__ int64_t fcc_row_off(const fcc_outer &o, const int64_t *str,
                                                       int64_t r) {
    if (o.n == 1) return r * str[0];
    int64_t off = 0;
    for (int k = o.n - 1; k >= 0; --k) {
        off += (r % o.shape[k]) * str[k];
        r /= o.shape[k];
    }
    return off;
}

struct fcc_wsum_args {
    fcc_outer outer;
    int64_t R, D;
    int64_t xs[FLASHC_MAX_DIMS], x_dstr;
    int64_t ys[FLASHC_MAX_DIMS];   /* y (fwd) or dy (bwd) */
    int64_t dxs[FLASHC_MAX_DIMS], dx_dstr;
    int64_t w_str, dw_str;
    const void *x, *w, *dy;
    void *y, *dx, *dw;
};

/* Collapse axes k, k+1 when every stride array has s[k] == s[k+1]·n[k+1];
 * drop extent-1 axes. Pure index algebra: the rows keep their order. */
static void fcc_collapse(fcc_wsum_args *g, const fc_wsum *p, bool use_dx) {
    int n = 0;
    int64_t sh[FLASHC_MAX_DIMS], xs[FLASHC_MAX_DIMS], ys[FLASHC_MAX_DIMS], ds[FLASHC_MAX_DIMS];
    const int64_t *yo = p->y ? p->y_ostr : p->dy_ostr;
    for (int k = 0; k < p->nouter; ++k) {
        if (p->outer_shape[k] == 1) continue;
        const int64_t dxk = use_dx ? p->dx_ostr[k] : 0;
        if (n > 0 && xs[n - 1] == p->x_ostr[k] * p->outer_shape[k] &&
            ys[n - 1] == yo[k] * p->outer_shape[k] &&
            ds[n - 1] == dxk * p->outer_shape[k]) {
            sh[n - 1] *= p->outer_shape[k];
            xs[n - 1] = p->x_ostr[k];
            ys[n - 1] = yo[k];
            ds[n - 1] = dxk;
            continue;
        }
        sh[n] = p->outer_shape[k];
        xs[n] = p->x_ostr[k];
        ys[n] = yo[k];
        ds[n] = dxk;
        ++n;
    }
    if (n == 0) { /* one row (or R = 0 with some extent 0 — handled by R) */
        sh[0] = 1; xs[0] = ys[0] = ds[0] = 0; n = 1;
    }
    g->outer.n = n;
    for (int k = 0; k < n; ++k) {
        g->outer.shape[k] = sh[k];
        g->xs[k] = xs[k];
        g->ys[k] = ys[k];
        g->dxs[k] = ds[k];
    }
    g->R = p->R;
    g->D = p->D;
    g->x_dstr = p->x_dstr;
    g->dx_dstr = p->dx_dstr;
    g->w_str = p->w_str;
    g->dw_str = p->dw_str;
    g->x = p->x;
    g->w = p->w;
    g->dy = p->dy;
    g->y = p->y;
    g->dx = p->dx;
    g->dw = p->dw;
}

/* Σ_{d in [d0, d1)} x[d]·w[d] over one row, split among TPR lanes (lane =
 * this thread's index in its group). Unit-stride x takes the vector path. */
template <class T, int TPR>
__device__ __forceinline__ typename fcc_type<T>::acc fcc_row_dot(const fcc_wsum_args &g,
                                                                 const T *__restrict__ xr,
                                                                 int64_t d0, int64_t d1,
                                                                 int lane) {
    using A = typename fcc_type<T>::acc;
    const T *__restrict__ w = (const T *)g.w;
    A acc = A(0);
    if (g.x_dstr == 1) {
        constexpr int VEC = 16 / sizeof(T);
        const T *xp = xr + d0;
        const int64_t n = d1 - d0;
        const int64_t mis = (int64_t)(((uintptr_t)xp & 15) / sizeof(T));
        int64_t head = mis ? VEC - mis : 0;
        if (head > n) head = n;
        for (int64_t d = lane; d < head; d += TPR)
            acc = fma(fcc_type<T>::to(xp[d]), fcc_type<T>::to(w[(d0 + d) * g.w_str]), acc);
        const int64_t nvec = (n - head) / VEC;
        const uint4 *xv = reinterpret_cast<const uint4 *>(xp + head);
        const T *wb = w + d0 + head; /* only used when w_str == 1 */
        const bool wvec = g.w_str == 1 && (((uintptr_t)wb & 15) == 0);
        constexpr int U = 4; /* 16-byte loads in flight per lane; one accumulator each */
        A accu[U];
#pragma unroll
        for (int u = 0; u < U; ++u) accu[u] = A(0);
        int64_t k = lane;
        for (; k + (U - 1) * TPR < nvec; k += U * TPR) {
            uint4 xa[U], wa[U];
#pragma unroll
            for (int u = 0; u < U; ++u) xa[u] = __ldg(xv + k + u * TPR);
            if (wvec) {
#pragma unroll
                for (int u = 0; u < U; ++u) wa[u] = __ldg(reinterpret_cast<const uint4 *>(wb) + k + u * TPR);
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const T *xe = reinterpret_cast<const T *>(&xa[u]);
                const T *we = reinterpret_cast<const T *>(&wa[u]);
#pragma unroll
                for (int e = 0; e < VEC; ++e) {
                    const A wv = wvec ? fcc_type<T>::to(we[e])
                                      : fcc_type<T>::to(w[(d0 + head + (k + u * TPR) * VEC + e) * g.w_str]);
                    accu[u] = fma(fcc_type<T>::to(xe[e]), wv, accu[u]);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) acc += accu[u];
        for (; k < nvec; k += TPR) {
            const uint4 xa = __ldg(xv + k);
            const T *xe = reinterpret_cast<const T *>(&xa);
#pragma unroll
            for (int e = 0; e < VEC; ++e)
                acc = fma(fcc_type<T>::to(xe[e]),
                          fcc_type<T>::to(w[(d0 + head + k * VEC + e) * g.w_str]), acc);
        }
        for (int64_t d = head + nvec * VEC + lane; d < n; d += TPR)
            acc = fma(fcc_type<T>::to(xp[d]), fcc_type<T>::to(w[(d0 + d) * g.w_str]), acc);
    } else {
        for (int64_t d = d0 + lane; d < d1; d += TPR)
            acc = fma(fcc_type<T>::to(xr[d * g.x_dstr]), fcc_type<T>::to(w[d * g.w_str]), acc);
    }
#pragma unroll
    for (int off = TPR / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    return acc;
}

/* Forward: a group of TPR lanes per row; grid-stride over rows. With
 * nsplit > 1, blockIdx.y picks a D chunk and the result goes to
 * partial[r·nsplit + chunk] instead of y. */
template <class T, int TPR>
__global__ void __launch_bounds__(256) fcc_wsum_fwd_kernel(const fcc_wsum_args g, int64_t chunk,
                                                            typename fcc_type<T>::acc *partial) {
    using A = typename fcc_type<T>::acc;
    constexpr int RPB = 256 / TPR;
    const int lane = threadIdx.x % TPR;
    const int64_t d0 = partial ? (int64_t)blockIdx.y * chunk : 0;
    const int64_t d1 = partial ? min(d0 + chunk, g.D) : g.D;
    for (int64_t rb = (int64_t)blockIdx.x * RPB; rb < g.R; rb += (int64_t)gridDim.x * RPB) {
        const int64_t r = rb + threadIdx.x / TPR;
        /* the whole warp stays in the loop for the shuffles; idle groups dot 0 */
        const bool live = r < g.R;
        const T *xr = (const T *)g.x + (live ? fcc_row_off(g.outer, g.xs, r) : 0);
        const A acc = fcc_row_dot<T, TPR>(g, xr, d0, live ? d1 : d0, lane);
        if (live && lane == 0) {
            if (partial) partial[r * gridDim.y + blockIdx.y] = acc;
            else ((T *)g.y)[fcc_row_off(g.outer, g.ys, r)] = fcc_type<T>::from(acc);
        }
    }
}

/* y[r] = Σ_c partial[r][c], c in order. */
template <class T>
__global__ void fcc_wsum_fwd_finish_kernel(const fcc_wsum_args g, int nsplit,
                                           const typename fcc_type<T>::acc *partial) {
    using A = typename fcc_type<T>::acc;
    const int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= g.R) return;
    A acc = A(0);
    for (int c = 0; c < nsplit; ++c) acc += partial[r * nsplit + c];
    ((T *)g.y)[fcc_row_off(g.outer, g.ys, r)] = fcc_type<T>::from(acc);
}

/* Backward dx: dx[r, d] = dy[r]·w[d], TPR lanes per row. */
template <class T, int TPR>
__global__ void __launch_bounds__(256) fcc_wsum_dx_kernel(const fcc_wsum_args g) {
    using A = typename fcc_type<T>::acc;
    constexpr int RPB = 256 / TPR;
    const int lane = threadIdx.x % TPR;
    const T *w = (const T *)g.w;
    for (int64_t rb = (int64_t)blockIdx.x * RPB; rb < g.R; rb += (int64_t)gridDim.x * RPB) {
        const int64_t r = rb + threadIdx.x / TPR;
        if (r >= g.R) continue;
        const A dyv = fcc_type<T>::to(((const T *)g.dy)[fcc_row_off(g.outer, g.ys, r)]);
        T *dxr = (T *)g.dx + fcc_row_off(g.outer, g.dxs, r);
        for (int64_t d = lane; d < g.D; d += TPR)
            dxr[d * g.dx_dstr] = fcc_type<T>::from(dyv * fcc_type<T>::to(w[d * g.w_str]));
    }
}

/* Backward dw, pass 1: block (W columns × 256/W row lanes) sums rows
 * [c·CR, min((c+1)·CR, R)) of chunk c = blockIdx.y for columns
 * blockIdx.x·W + tx; row lanes are combined in a fixed order. */
template <class T, int W>
__global__ void __launch_bounds__(256) fcc_wsum_dw_partial_kernel(const fcc_wsum_args g, int64_t CR,
                                                                   typename fcc_type<T>::acc *partial) {
    using A = typename fcc_type<T>::acc;
    constexpr int RY = 256 / W;
    __shared__ A red[RY][W];
    const int tx = threadIdx.x % W, ty = threadIdx.x / W;
    const int64_t d = (int64_t)blockIdx.x * W + tx;
    const int64_t r0 = (int64_t)blockIdx.y * CR, r1 = min(r0 + CR, g.R);
    A acc = A(0);
    if (d < g.D) {
        for (int64_t r = r0 + ty; r < r1; r += RY) {
            const A dyv = fcc_type<T>::to(((const T *)g.dy)[fcc_row_off(g.outer, g.ys, r)]);
            const T *xr = (const T *)g.x + fcc_row_off(g.outer, g.xs, r);
            acc = fma(dyv, fcc_type<T>::to(xr[d * g.x_dstr]), acc);
        }
    }
    red[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && d < g.D) {
        A s = A(0);
#pragma unroll 8
        for (int k = 0; k < RY; ++k) s += red[k][tx];
        partial[(int64_t)blockIdx.y * g.D + d] = s;
    }
}

/* Backward dw, pass 2: dw[d] = Σ_c partial[c][d], c in order. */
template <class T>
__global__ void fcc_wsum_dw_finish_kernel(const fcc_wsum_args g, int64_t nchunk,
                                          const typename fcc_type<T>::acc *partial) {
    using A = typename fcc_type<T>::acc;
    const int64_t d = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= g.D) return;
    A acc = A(0);
    for (int64_t c = 0; c < nchunk; ++c) acc += partial[c * g.D + d];
    ((T *)g.dw)[d * g.dw_str] = fcc_type<T>::from(acc);
}

/* ------------------------------------------------------------ fast paths
 * Taken when every row is a run of D/VEC aligned 16-byte vectors at a
 * uniform row stride (one collapsed outer axis, unit D stride, D a multiple
 * of VEC = 16 / sizeof(T), 16-byte aligned base and row stride) and, where w
 * is read, w is contiguous and 16-byte aligned. Everything else takes the
 * generic kernels above.
 *
 * Streamed x is read with ld.global.nc.L1::no_allocate (fcc_ldx) so that it
 * does not evict w (and dy) from L1. Grids are persistent: the number of
 * warps (blocks) is cut to a whole number of equal waves of what fits on the
 * device; the work of each warp or block, and so every summation order,
 * depends on the shape only. */
template <int LD> __device__ __forceinline__ uint4 fcc_ldx(const uint4 *p) {
    uint4 v;
    if (LD == 1)
        asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
            : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    else if (LD == 2)
        asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
            : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    else
        v = __ldg(p);
    return v;
}

/* 16 bytes of T -> VEC accumulation values, and back (round to nearest even). */
template <class T> struct fcc_vec;
template <> struct fcc_vec<float> {
    static constexpr int N = 4;
    static __device__ __forceinline__ void unpack(const uint4 &v, float (&o)[4]) {
        o[0] = __uint_as_float(v.x); o[1] = __uint_as_float(v.y);
        o[2] = __uint_as_float(v.z); o[3] = __uint_as_float(v.w);
    }
    static __device__ __forceinline__ uint4 pack(const float (&o)[4]) {
        return make_uint4(__float_as_uint(o[0]), __float_as_uint(o[1]), __float_as_uint(o[2]), __float_as_uint(o[3]));
    }
};
template <> struct fcc_vec<double> {
    static constexpr int N = 2;
    static __device__ __forceinline__ void unpack(const uint4 &v, double (&o)[2]) {
        o[0] = __hiloint2double((int)v.y, (int)v.x);
        o[1] = __hiloint2double((int)v.w, (int)v.z);
    }
    static __device__ __forceinline__ uint4 pack(const double (&o)[2]) {
        return make_uint4((unsigned)__double2loint(o[0]), (unsigned)__double2hiint(o[0]),
                          (unsigned)__double2loint(o[1]), (unsigned)__double2hiint(o[1]));
    }
};
template <> struct fcc_vec<__nv_bfloat16> {
    static constexpr int N = 8;
    static __device__ __forceinline__ void two(unsigned u, float *o) {
        o[0] = __uint_as_float(u << 16);
        o[1] = __uint_as_float(u & 0xffff0000u);
    }
    static __device__ __forceinline__ void unpack(const uint4 &v, float (&o)[8]) {
        two(v.x, o); two(v.y, o + 2); two(v.z, o + 4); two(v.w, o + 6);
    }
    static __device__ __forceinline__ unsigned mk(float a, float b) {
        __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
        unsigned u;
        memcpy(&u, &h, 4);
        return u;
    }
    static __device__ __forceinline__ uint4 pack(const float (&o)[8]) {
        return make_uint4(mk(o[0], o[1]), mk(o[2], o[3]), mk(o[4], o[5]), mk(o[6], o[7]));
    }
};
template <> struct fcc_vec<__half> {
    static constexpr int N = 8;
    static __device__ __forceinline__ void two(unsigned u, float *o) {
        __half2 h;
        memcpy(&h, &u, 4);
        const float2 f = __half22float2(h);
        o[0] = f.x;
        o[1] = f.y;
    }
    static __device__ __forceinline__ void unpack(const uint4 &v, float (&o)[8]) {
        two(v.x, o); two(v.y, o + 2); two(v.z, o + 4); two(v.w, o + 6);
    }
    static __device__ __forceinline__ unsigned mk(float a, float b) {
        __half2 h = __floats2half2_rn(a, b);
        unsigned u;
        memcpy(&u, &h, 4);
        return u;
    }
    static __device__ __forceinline__ uint4 pack(const float (&o)[8]) {
        return make_uint4(mk(o[0], o[1]), mk(o[2], o[3]), mk(o[4], o[5]), mk(o[6], o[7]));
    }
};

__device__ __forceinline__ int64_t fcc_warp_id() {
    return ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
}
__device__ __forceinline__ int64_t fcc_warp_count() { return ((int64_t)gridDim.x * blockDim.x) >> 5; }

/* Forward, short rows (D/VEC ≤ 32·NV): TPR lanes per row, NV vectors of the
 * row per lane, w held in registers for the whole kernel. One warp pass
 * covers 32/TPR rows × RU (RU·NV 16-byte loads in flight per lane). */
template <class T, int TPR, int NV, int RU, int LD>
__global__ void __launch_bounds__(256) fcc_wsum_fwd_rows(const fcc_wsum_args g) {
    using A = typename fcc_type<T>::acc;
    constexpr int VEC = fcc_vec<T>::N, GPW = 32 / TPR;
    const int lane = threadIdx.x & 31, sub = lane % TPR, grp = lane / TPR;
    const int64_t nvec = g.D / VEC, rs = g.xs[0] / VEC, ys = g.ys[0];
    const uint4 *__restrict__ xb = (const uint4 *)g.x;
    const uint4 *__restrict__ wb = (const uint4 *)g.w;
    T *__restrict__ y = (T *)g.y;
    A wr[NV][VEC];
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int64_t k = sub + j * TPR;
        fcc_vec<T>::unpack(k < nvec ? __ldg(wb + k) : make_uint4(0, 0, 0, 0), wr[j]);
    }
    const int64_t step = fcc_warp_count() * (GPW * RU);
    for (int64_t rb = fcc_warp_id() * (GPW * RU); rb < g.R; rb += step) {
        uint4 xv[RU][NV];
#pragma unroll
        for (int u = 0; u < RU; ++u) {
            const int64_t r = rb + u * GPW + grp;
#pragma unroll
            for (int j = 0; j < NV; ++j) {
                const int64_t k = sub + j * TPR;
                xv[u][j] = (r < g.R && k < nvec) ? fcc_ldx<LD>(xb + r * rs + k) : make_uint4(0, 0, 0, 0);
            }
        }
#pragma unroll
        for (int u = 0; u < RU; ++u) {
            A acc = A(0);
#pragma unroll
            for (int j = 0; j < NV; ++j) {
                A xe[VEC];
                fcc_vec<T>::unpack(xv[u][j], xe);
#pragma unroll
                for (int e = 0; e < VEC; ++e) acc = fma(xe[e], wr[j][e], acc);
            }
#pragma unroll
            for (int off = TPR / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
            const int64_t r = rb + u * GPW + grp;
            if (sub == 0 && r < g.R) y[r * ys] = fcc_type<T>::from(acc);
        }
    }
}

/* Forward, long rows: a warp per item (RU rows × one chunk of cv vectors);
 * per step of 32·NV vectors it loads that slice of w once and uses it for
 * the RU rows. nchunk = 1: y directly; else partial[r·nchunk + c], added in
 * order by fcc_wsum_fwd_combine. */
template <class T, int NV, int RU, int LD>
__global__ void __launch_bounds__(256) fcc_wsum_fwd_long(const fcc_wsum_args g, int64_t cv, int64_t nchunk,
                                                          typename fcc_type<T>::acc *partial) {
    using A = typename fcc_type<T>::acc;
    constexpr int VEC = fcc_vec<T>::N;
    const int lane = threadIdx.x & 31;
    const int64_t nvec = g.D / VEC, rs = g.xs[0] / VEC, ys = g.ys[0];
    const uint4 *__restrict__ xb = (const uint4 *)g.x;
    const uint4 *__restrict__ wb = (const uint4 *)g.w;
    const int64_t nitems = ((g.R + RU - 1) / RU) * nchunk;
    for (int64_t item = fcc_warp_id(); item < nitems; item += fcc_warp_count()) {
        const int64_t c = item % nchunk, r0 = (item / nchunk) * RU;
        const int64_t k0 = c * cv, k1 = min(k0 + cv, nvec);
        const uint4 *xr[RU];
        bool rok[RU];
#pragma unroll
        for (int u = 0; u < RU; ++u) {
            rok[u] = r0 + u < g.R;
            xr[u] = xb + (rok[u] ? (r0 + u) * rs : 0);
        }
        A acc[RU];
#pragma unroll
        for (int u = 0; u < RU; ++u) acc[u] = A(0);
        for (int64_t kb = k0 + lane; kb < k1; kb += 32 * NV) {
            uint4 wv[NV], xv[RU][NV];
#pragma unroll
            for (int j = 0; j < NV; ++j) {
                const int64_t k = kb + 32 * j;
                wv[j] = k < k1 ? __ldg(wb + k) : make_uint4(0, 0, 0, 0);
#pragma unroll
                for (int u = 0; u < RU; ++u)
                    xv[u][j] = (rok[u] && k < k1) ? fcc_ldx<LD>(xr[u] + k) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int j = 0; j < NV; ++j) {
                A we[VEC];
                fcc_vec<T>::unpack(wv[j], we);
#pragma unroll
                for (int u = 0; u < RU; ++u) {
                    A xe[VEC];
                    fcc_vec<T>::unpack(xv[u][j], xe);
#pragma unroll
                    for (int e = 0; e < VEC; ++e) acc[u] = fma(xe[e], we[e], acc[u]);
                }
            }
        }
        A mine = A(0);
#pragma unroll
        for (int u = 0; u < RU; ++u) {
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) acc[u] += __shfl_xor_sync(0xffffffffu, acc[u], off);
            if (lane == u) mine = acc[u];
        }
        if (lane < RU && r0 + lane < g.R) {
            const int64_t r = r0 + lane;
            if (nchunk == 1) ((T *)g.y)[r * ys] = fcc_type<T>::from(mine);
            else partial[r * nchunk + c] = mine;
        }
    }
}

/* y[r] = Σ_c partial[r·nchunk + c]: a block per row, fixed strided split
 * and fixed tree. */
template <class T>
__global__ void __launch_bounds__(256) fcc_wsum_fwd_combine(const fcc_wsum_args g, int64_t nchunk,
                                                             const typename fcc_type<T>::acc *partial) {
    using A = typename fcc_type<T>::acc;
    __shared__ A red[256];
    const int t = threadIdx.x;
    for (int64_t r = blockIdx.x; r < g.R; r += gridDim.x) {
        A s = A(0);
        for (int64_t c = t; c < nchunk; c += 256) s += partial[r * nchunk + c];
        red[t] = s;
        __syncthreads();
#pragma unroll
        for (int w = 128; w > 0; w >>= 1) {
            if (t < w) red[t] += red[t + w];
            __syncthreads();
        }
        if (t == 0) ((T *)g.y)[r * g.ys[0]] = fcc_type<T>::from(red[0]);
        __syncthreads();
    }
}

/* Backward dx, contiguous rows: TPR lanes per row; item = (RU·32/TPR rows,
 * chunk of cv vectors; nchunk > 1 only for few long rows). Each 16-byte
 * slice of w (from L1) serves RU rows; 16-byte stores; the dy values of the
 * warp's next item are loaded before the stores of this one. */
template <class T, int TPR, int RU>
__global__ void __launch_bounds__(256) fcc_wsum_dx_rows(const fcc_wsum_args g, int64_t cv, int64_t nchunk) {
    using A = typename fcc_type<T>::acc;
    constexpr int VEC = fcc_vec<T>::N, GPW = 32 / TPR;
    const int lane = threadIdx.x & 31, sub = lane % TPR, grp = lane / TPR;
    const int64_t nvec = g.D / VEC, rs = g.dxs[0] / VEC, ys = g.ys[0];
    const uint4 *__restrict__ wb = (const uint4 *)g.w;
    const T *__restrict__ dy = (const T *)g.dy;
    uint4 *__restrict__ dxb = (uint4 *)g.dx;
    const int64_t nitems = ((g.R + GPW * RU - 1) / (GPW * RU)) * nchunk, nw = fcc_warp_count();
    A nxt[RU];
    auto load_dy = [&](int64_t item) {
        const int64_t rb = (item / nchunk) * (GPW * RU);
#pragma unroll
        for (int u = 0; u < RU; ++u) {
            const int64_t r = rb + u * GPW + grp;
            nxt[u] = (item < nitems && r < g.R) ? fcc_type<T>::to(dy[r * ys]) : A(0);
        }
    };
    int64_t item = fcc_warp_id();
    load_dy(item);
    for (; item < nitems; item += nw) {
        A dyv[RU];
#pragma unroll
        for (int u = 0; u < RU; ++u) dyv[u] = nxt[u];
        load_dy(item + nw);
        const int64_t rb = (item / nchunk) * (GPW * RU), c = item % nchunk;
        const int64_t k1 = min((c + 1) * cv, nvec);
        for (int64_t k = c * cv + sub; k < k1; k += TPR) {
            A we[VEC];
            fcc_vec<T>::unpack(__ldg(wb + k), we);
#pragma unroll
            for (int u = 0; u < RU; ++u) {
                const int64_t r = rb + u * GPW + grp;
                if (r < g.R) {
                    A o[VEC];
#pragma unroll
                    for (int e = 0; e < VEC; ++e) o[e] = dyv[u] * we[e];
                    dxb[r * rs + k] = fcc_vec<T>::pack(o);
                }
            }
        }
    }
}

/* Backward dw, contiguous rows: block = TC column lanes (one 16-byte vector
 * of columns each) × RL = 256/TC row lanes; item = (column tile, row chunk
 * of CR rows). Each thread keeps VEC fp32 (f64) sums over rows r ≡ rl
 * (mod RL) in row order; the RL lanes are added in order through shared
 * memory. nchunk = 1: dw directly; else partial[chunk·D + d] for
 * fcc_wsum_dw_combine. */
template <class T, int TC, int U, int LD>
__global__ void __launch_bounds__(256, 2) fcc_wsum_dw_cols(const fcc_wsum_args g, int64_t CR, int64_t nchunk,
                                                         typename fcc_type<T>::acc *partial) {
    using A = typename fcc_type<T>::acc;
    constexpr int VEC = fcc_vec<T>::N, RL = 256 / TC;
    __shared__ A red[VEC * 256];
    const int cl = threadIdx.x % TC, rl = threadIdx.x / TC;
    const int64_t nvec = g.D / VEC, rs = g.xs[0] / VEC, ys = g.ys[0];
    const int64_t ntiles = (nvec + TC - 1) / TC, nitems = ntiles * nchunk;
    const uint4 *__restrict__ xb = (const uint4 *)g.x;
    const T *__restrict__ dy = (const T *)g.dy;
    T *__restrict__ dw = (T *)g.dw;
    for (int64_t item = blockIdx.x; item < nitems; item += gridDim.x) {
        const int64_t tile = item % ntiles, ch = item / ntiles;
        const int64_t k = tile * TC + cl;
        const bool kin = k < nvec;
        const int64_t r0 = ch * CR, r1 = min(r0 + CR, g.R);
        A acc[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[e] = A(0);
        for (int64_t r = r0 + rl; r < r1; r += RL * U) {
            uint4 xv[U];
            A dv[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int64_t rr = r + u * RL;
                const bool ok = rr < r1;
                dv[u] = ok ? fcc_type<T>::to(__ldg(dy + rr * ys)) : A(0);
                xv[u] = (ok && kin) ? fcc_ldx<LD>(xb + rr * rs + k) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                A xe[VEC];
                fcc_vec<T>::unpack(xv[u], xe);
#pragma unroll
                for (int e = 0; e < VEC; ++e) acc[e] = fma(dv[u], xe[e], acc[e]);
            }
        }
        if (RL > 1) {
#pragma unroll
            for (int e = 0; e < VEC; ++e) red[e * 256 + threadIdx.x] = acc[e];
            __syncthreads();
            for (int o = threadIdx.x; o < TC * VEC; o += 256) {
                const int c2 = o % TC, e = o / TC;
                A s = A(0);
                for (int q = 0; q < RL; ++q) s += red[e * 256 + q * TC + c2];
                const int64_t kk = tile * TC + c2;
                if (kk < nvec) {
                    const int64_t d = kk * VEC + e;
                    if (nchunk == 1) dw[d * g.dw_str] = fcc_type<T>::from(s);
                    else partial[ch * g.D + d] = s;
                }
            }
            __syncthreads();
        } else if (kin) {
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
                const int64_t d = k * VEC + e;
                if (nchunk == 1) dw[d * g.dw_str] = fcc_type<T>::from(acc[e]);
                else partial[ch * g.D + d] = acc[e];
            }
        }
    }
}

/* dw[d] = Σ_c partial[c·D + d]: TCF columns × 1024/TCF chunk lanes per
 * block, each lane in chunk order, lanes by a fixed tree. */
template <class T>
__global__ void __launch_bounds__(1024) fcc_wsum_dw_combine(const fcc_wsum_args g, int tcf, int64_t nchunk,
                                                             const typename fcc_type<T>::acc *partial) {
    using A = typename fcc_type<T>::acc;
    __shared__ A red[1024];
    const int lf = 1024 / tcf, cl = threadIdx.x % tcf, q = threadIdx.x / tcf;
    const int64_t d = (int64_t)blockIdx.x * tcf + cl;
    A s = A(0);
    if (d < g.D) {
#pragma unroll 8
        for (int64_t c = q; c < nchunk; c += lf) s += partial[c * g.D + d];
    }
    red[threadIdx.x] = s;
    __syncthreads();
    for (int w = lf / 2; w > 0; w >>= 1) {
        if (q < w) red[q * tcf + cl] += red[(q + w) * tcf + cl];
        __syncthreads();
    }
    if (q == 0 && d < g.D) ((T *)g.dw)[d * g.dw_str] = fcc_type<T>::from(red[cl]);
}

/* ------------------------------------------------------------ host */
static unsigned fcc_grid_rows(int64_t R, int rows_per_block) {
    int64_t b = (R + rows_per_block - 1) / rows_per_block;
    const int64_t cap = 1 << 20; /* grid-stride beyond this */
    return (unsigned)(b < 1 ? 1 : b > cap ? cap : b);
}

/* Blocks for a persistent launch of `kernel` over `items` equal work items,
 * `per_block` items per block and pass (8 for a warp per item, 1 for a
 * block per item): the smallest grid that runs them in as many full waves of
 * resident blocks as the whole device needs, so no wave is mostly idle. */
template <class K>
static flashc_status fcc_persistent_grid(K kernel, int threads, int64_t items, int per_block, unsigned *grid) {
    int dev = 0, sms = 0, per_sm = 0;
    FCC_CHECK(cudaGetDevice(&dev));
    FCC_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    FCC_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
    if (per_sm < 1) per_sm = 1;
    const int64_t slots = (int64_t)sms * per_sm * per_block; /* items one wave takes */
    int64_t waves = (items + slots - 1) / slots;
    if (waves < 1) waves = 1;
    const int64_t units = (items + waves - 1) / waves;
    int64_t b = (units + per_block - 1) / per_block;
    if (b < 1) b = 1;
    if (b > INT_MAX) b = INT_MAX;
    *grid = (unsigned)b;
    return FLASHC_OK;
}

/* Test hook (knobs.h): FLASHC_WSUM_VARIANT=0 sends every case to the
 * generic kernels (to test them, and to compare, on contiguous inputs). */
static int fcc_wsum_variant() { return fc_knob_wsum_variant(); }

/* Rows of x (and dx when given) are runs of aligned 16-byte vectors. */
template <class T> static bool fcc_rows_vec(const fcc_wsum_args &g, const void *base, int64_t dstr, int64_t rstr) {
    const int VEC = 16 / (int)sizeof(T);
    return g.outer.n == 1 && dstr == 1 && g.D > 0 && g.D % VEC == 0 && ((uintptr_t)base & 15) == 0 &&
           rstr % VEC == 0;
}
template <class T> static bool fcc_w_vec(const fcc_wsum_args &g) {
    return g.w_str == 1 && ((uintptr_t)g.w & 15) == 0;
}

static int fcc_pow2_at_least(int64_t n) {
    int p = 1;
    while (p < n && p < 32) p <<= 1;
    return p;
}

/* x loads: ld.nc.L1::no_allocate at 8 or more lanes per row, __ldg below
 * (measured on the H100: D = 128 rows 95 -> 99 % of copy with no_allocate,
 * D = 16 rows 98 -> 95 %). */
template <class T, int TPR, int NV, int RU>
static flashc_status fcc_launch_fwd_rows(const fcc_wsum_args &g, cudaStream_t st) {
    auto k = fcc_wsum_fwd_rows<T, TPR, NV, RU, (TPR >= 8 ? 1 : 0)>;
    unsigned grid;
    FCC_TRY(fcc_persistent_grid(k, 256, (g.R + (32 / TPR) * RU - 1) / ((32 / TPR) * RU), 8, &grid));
    k<<<grid, 256, 0, st>>>(g);
    FCC_CHECK_LAUNCH("fcc_wsum_fwd_rows");
    return FLASHC_OK;
}

template <class T> static flashc_status fcc_wsum_fwd_fast(const fcc_wsum_args &g, cudaStream_t st) {
    using A = typename fcc_type<T>::acc;
    const int VEC = 16 / (int)sizeof(T);
    const int64_t nvec = g.D / VEC;
    if (nvec <= 128) {
        if (nvec > 64) return fcc_launch_fwd_rows<T, 32, 4, 2>(g, st);
        if (nvec > 32) return fcc_launch_fwd_rows<T, 32, 2, 4>(g, st);
        switch (fcc_pow2_at_least(nvec)) {
        case 1: return fcc_launch_fwd_rows<T, 1, 1, 8>(g, st);
        case 2: return fcc_launch_fwd_rows<T, 2, 1, 8>(g, st);
        case 4: return fcc_launch_fwd_rows<T, 4, 1, 8>(g, st);
        case 8: return fcc_launch_fwd_rows<T, 8, 1, 8>(g, st);
        case 16: return fcc_launch_fwd_rows<T, 16, 1, 8>(g, st);
        default: return fcc_launch_fwd_rows<T, 32, 1, 8>(g, st);
        }
    }
    /* Long rows: RU = 4 rows × NV = 2 vectors per lane in flight. With few
     * rows, D is cut into nchunk chunks (multiples of 64 vectors, at least
     * 256) so that there are about 16384 items; nchunk is a function of the
     * shape only. */
    constexpr int NV = 2, RU = 4;
    const int64_t ngrp = (g.R + RU - 1) / RU;
    int64_t cv = nvec, nchunk = 1;
    if (ngrp < 8192) {
        const int64_t want = (16384 + ngrp - 1) / ngrp;
        cv = (nvec + want - 1) / want;
        cv = (cv + 63) / 64 * 64;
        if (cv < 256) cv = 256;
        if (cv > nvec) cv = nvec;
        nchunk = (nvec + cv - 1) / cv;
    }
    auto k = fcc_wsum_fwd_long<T, NV, RU, 0>;
    unsigned grid;
    FCC_TRY(fcc_persistent_grid(k, 256, ngrp * nchunk, 8, &grid));
    if (nchunk == 1) {
        k<<<grid, 256, 0, st>>>(g, cv, 1, nullptr);
        FCC_CHECK_LAUNCH("fcc_wsum_fwd_long");
        return FLASHC_OK;
    }
    A *part = nullptr;
    FCC_CHECK(fcc_scratch_alloc((void **)&part, (size_t)(g.R * nchunk) * sizeof(A), st));
    k<<<grid, 256, 0, st>>>(g, cv, nchunk, part);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) {
        fcc_wsum_fwd_combine<T><<<(unsigned)(g.R < 65536 ? g.R : 65536), 256, 0, st>>>(g, nchunk, part);
        e = cudaGetLastError();
    }
    fcc_scratch_free(part, st);
    if (e != cudaSuccess) return fcc_cuda_error(e, __FILE__, __LINE__, "launch of fcc_wsum_fwd_long (split)");
    return FLASHC_OK;
}

template <class T> static flashc_status fcc_wsum_fwd_typed(const fc_wsum *p) {
    using A = typename fcc_type<T>::acc;
    fcc_wsum_args g;
    fcc_collapse(&g, p, false);
    cudaStream_t st = fcc_stream(p->stream);
    if (g.R == 0) return FLASHC_OK;
    if (fcc_wsum_variant() != 0 && fcc_rows_vec<T>(g, g.x, g.x_dstr, g.xs[0]) && fcc_w_vec<T>(g))
        return fcc_wsum_fwd_fast<T>(g, st);
    /* Few very long rows: split D into fixed chunks (a function of R and D
     * only), so the result does not depend on timing or the device. */
    const int64_t CHUNK = 16384;
    if (g.x_dstr == 1 && g.R < 1024 && g.D >= 2 * CHUNK) {
        const int64_t nsplit = (g.D + CHUNK - 1) / CHUNK;
        if (nsplit <= 65535) {
            A *part = nullptr;
            FCC_CHECK(fcc_scratch_alloc((void **)&part, (size_t)(g.R * nsplit) * sizeof(A), st));
            dim3 grid(fcc_grid_rows(g.R, 256 / 32), (unsigned)nsplit);
            fcc_wsum_fwd_kernel<T, 32><<<grid, 256, 0, st>>>(g, CHUNK, part);
            cudaError_t e = cudaGetLastError();
            if (e == cudaSuccess) {
                fcc_wsum_fwd_finish_kernel<T><<<(unsigned)((g.R + 255) / 256), 256, 0, st>>>(g, (int)nsplit, part);
                e = cudaGetLastError();
            }
            fcc_scratch_free(part, st);
            if (e != cudaSuccess) return fcc_cuda_error(e, __FILE__, __LINE__, "launch of fcc_wsum_fwd_kernel (split)");
            return FLASHC_OK;
        }
    }
    const int VEC = 16 / (int)sizeof(T);
    const int64_t inner = g.xs[g.outer.n - 1];
    if (g.x_dstr == 1) {
        /* lanes per row such that each lane has about U = 4 vectors */
        const int64_t nvec = g.D / VEC;
        if (nvec >= 128) {
            fcc_wsum_fwd_kernel<T, 32><<<fcc_grid_rows(g.R, 8), 256, 0, st>>>(g, 0, nullptr);
        } else if (nvec >= 16) {
            fcc_wsum_fwd_kernel<T, 4><<<fcc_grid_rows(g.R, 64), 256, 0, st>>>(g, 0, nullptr);
        } else {
            fcc_wsum_fwd_kernel<T, 1><<<fcc_grid_rows(g.R, 256), 256, 0, st>>>(g, 0, nullptr);
        }
    } else if ((inner < 0 ? -inner : inner) < (g.x_dstr < 0 ? -g.x_dstr : g.x_dstr)) {
        fcc_wsum_fwd_kernel<T, 1><<<fcc_grid_rows(g.R, 256), 256, 0, st>>>(g, 0, nullptr);
    } else {
        fcc_wsum_fwd_kernel<T, 32><<<fcc_grid_rows(g.R, 8), 256, 0, st>>>(g, 0, nullptr);
    }
    FCC_CHECK_LAUNCH("fcc_wsum_fwd_kernel");
    return FLASHC_OK;
}

template <class T, int TPR>
static flashc_status fcc_launch_dx_rows(const fcc_wsum_args &g, cudaStream_t st) {
    constexpr int RU = TPR == 32 ? 4 : 8, RPI = (32 / TPR) * RU;
    const int VEC = 16 / (int)sizeof(T);
    const int64_t nvec = g.D / VEC, ngrp = (g.R + RPI - 1) / RPI;
    /* few long rows: cut them into chunks (multiples of 32 vectors, ≥ 256)
     * for about 16384 items */
    int64_t cv = nvec, nchunk = 1;
    if (TPR == 32 && ngrp < 8192) {
        const int64_t want = (16384 + ngrp - 1) / ngrp;
        cv = (nvec + want - 1) / want;
        cv = (cv + 31) / 32 * 32;
        if (cv < 256) cv = 256;
        if (cv > nvec) cv = nvec;
        nchunk = (nvec + cv - 1) / cv;
    }
    auto k = fcc_wsum_dx_rows<T, TPR, RU>;
    unsigned grid;
    FCC_TRY(fcc_persistent_grid(k, 256, ngrp * nchunk, 8, &grid));
    k<<<grid, 256, 0, st>>>(g, cv, nchunk);
    FCC_CHECK_LAUNCH("fcc_wsum_dx_rows");
    return FLASHC_OK;
}

template <class T> static flashc_status fcc_wsum_dx_fast(const fcc_wsum_args &g, cudaStream_t st) {
    const int VEC = 16 / (int)sizeof(T);
    switch (fcc_pow2_at_least(g.D / VEC)) {
    case 1: return fcc_launch_dx_rows<T, 1>(g, st);
    case 2: return fcc_launch_dx_rows<T, 2>(g, st);
    case 4: return fcc_launch_dx_rows<T, 4>(g, st);
    case 8: return fcc_launch_dx_rows<T, 8>(g, st);
    case 16: return fcc_launch_dx_rows<T, 16>(g, st);
    default: return fcc_launch_dx_rows<T, 32>(g, st);
    }
}

template <class T, int TC, int U>
static flashc_status fcc_launch_dw_cols(const fcc_wsum_args &g, cudaStream_t st) {
    using A = typename fcc_type<T>::acc;
    constexpr int RL = 256 / TC;
    const int VEC = 16 / (int)sizeof(T);
    const int64_t nvec = g.D / VEC, ntiles = (nvec + TC - 1) / TC;
    /* Row chunks: about 1024 items in all, each thread ≥ 128 rows of its
     * chunk (long runs between the fill and drain of an item). A function of
     * the shape only: the summation order is fixed. */
    const int64_t crmin = (int64_t)RL * 128;
    int64_t nchunk = (1024 + ntiles - 1) / ntiles;
    const int64_t maxch = (g.R + crmin - 1) / crmin;
    if (nchunk > maxch) nchunk = maxch;
    if (nchunk < 1) nchunk = 1;
    const int64_t CR = (g.R + nchunk - 1) / nchunk;
    nchunk = (g.R + CR - 1) / CR;
    auto k = fcc_wsum_dw_cols<T, TC, U, 0>;
    unsigned grid;
    FCC_TRY(fcc_persistent_grid(k, 256, ntiles * nchunk, 1, &grid));
    if (nchunk == 1) {
        k<<<grid, 256, 0, st>>>(g, CR, 1, nullptr);
        FCC_CHECK_LAUNCH("fcc_wsum_dw_cols");
        return FLASHC_OK;
    }
    A *part = nullptr;
    FCC_CHECK(fcc_scratch_alloc((void **)&part, (size_t)(nchunk * g.D) * sizeof(A), st));
    k<<<grid, 256, 0, st>>>(g, CR, nchunk, part);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) {
        /* columns per combine block: at least ~64 blocks where D allows */
        int tcf = 32;
        while (tcf > 1 && (g.D + tcf - 1) / tcf < 64) tcf >>= 1;
        fcc_wsum_dw_combine<T><<<(unsigned)((g.D + tcf - 1) / tcf), 1024, 0, st>>>(g, tcf, nchunk, part);
        e = cudaGetLastError();
    }
    fcc_scratch_free(part, st);
    if (e != cudaSuccess) return fcc_cuda_error(e, __FILE__, __LINE__, "launch of fcc_wsum_dw_cols");
    return FLASHC_OK;
}

/* x loads by __ldg (H100: as fast as or faster than no_allocate here; R = 4
 * huge D 88 -> 97 % of copy). U = 8 rows in flight per thread (fits three
 * blocks per SM; U = 16 at two blocks was slower, bf16 D = 16: 83 -> 59 %). */
template <class T> static flashc_status fcc_wsum_dw_fast(const fcc_wsum_args &g, cudaStream_t st) {
    constexpr int U = 8;
    const int VEC = 16 / (int)sizeof(T);
    const int64_t nvec = g.D / VEC;
    /* few rows: every thread on its own columns (no row lanes to idle) */
    if (g.R < 64 && nvec >= 256) return fcc_launch_dw_cols<T, 256, U>(g, st);
    switch (fcc_pow2_at_least(nvec)) {
    case 1: case 2: case 4: return fcc_launch_dw_cols<T, 4, U>(g, st);
    case 8: return fcc_launch_dw_cols<T, 8, U>(g, st);
    case 16: return fcc_launch_dw_cols<T, 16, U>(g, st);
    default: return fcc_launch_dw_cols<T, 32, U>(g, st);
    }
}

template <class T> static flashc_status fcc_wsum_bwd_typed(const fc_wsum *p) {
    using A = typename fcc_type<T>::acc;
    fcc_wsum_args g;
    fcc_collapse(&g, p, p->dx != nullptr);
    cudaStream_t st = fcc_stream(p->stream);
    const bool fast = fcc_wsum_variant() != 0;
    if (p->dx && g.R > 0 && g.D > 0) {
        const int64_t inner = g.dxs[g.outer.n - 1];
        if (fast && fcc_rows_vec<T>(g, g.dx, g.dx_dstr, g.dxs[0]) && fcc_w_vec<T>(g))
            FCC_TRY(fcc_wsum_dx_fast<T>(g, st));
        else if (g.dx_dstr != 1 && (inner < 0 ? -inner : inner) < (g.dx_dstr < 0 ? -g.dx_dstr : g.dx_dstr))
            fcc_wsum_dx_kernel<T, 1><<<fcc_grid_rows(g.R, 256), 256, 0, st>>>(g);
        else if (g.D >= 64)
            fcc_wsum_dx_kernel<T, 32><<<fcc_grid_rows(g.R, 8), 256, 0, st>>>(g);
        else
            fcc_wsum_dx_kernel<T, 4><<<fcc_grid_rows(g.R, 64), 256, 0, st>>>(g);
        FCC_CHECK_LAUNCH("fcc_wsum_dx_kernel");
    }
    if (p->dw && g.D > 0 && g.R > 0 && fast && fcc_rows_vec<T>(g, g.x, g.x_dstr, g.xs[0]))
        return fcc_wsum_dw_fast<T>(g, st);
    if (p->dw && g.D > 0) {
        /* nchunk depends on R only: the summation order is fixed. */
        const int64_t ROWS_MIN = 64, MAXCH = 512;
        int64_t nchunk = (g.R + ROWS_MIN - 1) / ROWS_MIN;
        if (nchunk > MAXCH) nchunk = MAXCH;
        const int64_t CR = nchunk > 0 ? (g.R + nchunk - 1) / nchunk : 0;
        A *part = nullptr;
        if (nchunk > 0) {
            FCC_CHECK(fcc_scratch_alloc((void **)&part, (size_t)(nchunk * g.D) * sizeof(A), st));
            cudaError_t e;
            const int64_t gx32 = (g.D + 31) / 32;
            if (g.D >= 32 || g.x_dstr != 1) {
                fcc_wsum_dw_partial_kernel<T, 32><<<dim3((unsigned)gx32, (unsigned)nchunk), 256, 0, st>>>(g, CR, part);
            } else {
                fcc_wsum_dw_partial_kernel<T, 8><<<dim3((unsigned)((g.D + 7) / 8), (unsigned)nchunk), 256, 0, st>>>(g, CR, part);
            }
            e = cudaGetLastError();
            if (e != cudaSuccess) {
                fcc_scratch_free(part, st);
                return fcc_cuda_error(e, __FILE__, __LINE__, "launch of fcc_wsum_dw_partial_kernel");
            }
        }
        fcc_wsum_dw_finish_kernel<T><<<(unsigned)((g.D + 255) / 256), 256, 0, st>>>(g, nchunk, part);
        cudaError_t e = cudaGetLastError();
        if (part) fcc_scratch_free(part, st);
        if (e != cudaSuccess) return fcc_cuda_error(e, __FILE__, __LINE__, "launch of fcc_wsum_dw_finish_kernel");
    }
    return FLASHC_OK;
}

flashc_status fcc_weighted_sum(const fc_wsum *p) {
    FCC_DISPATCH_DTYPE(p->dtype, return fcc_wsum_fwd_typed<T>(p));
    return FLASHC_OK;
}

flashc_status fcc_weighted_sum_bwd(const fc_wsum *p) {
    FCC_DISPATCH_DTYPE(p->dtype, return fcc_wsum_bwd_typed<T>(p));
    return FLASHC_OK;
}
