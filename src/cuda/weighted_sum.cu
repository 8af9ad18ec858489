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
 * Temporaries are cudaMallocAsync'd on the stream.
 */
#include "fc_cuda.cuh"

#include <limits.h>

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

static unsigned fcc_grid_rows(int64_t R, int rows_per_block) {
    int64_t b = (R + rows_per_block - 1) / rows_per_block;
    const int64_t cap = 1 << 20; /* grid-stride beyond this */
    return (unsigned)(b < 1 ? 1 : b > cap ? cap : b);
}

template <class T> static flashc_status fcc_wsum_fwd_typed(const fc_wsum *p) {
    using A = typename fcc_type<T>::acc;
    fcc_wsum_args g;
    fcc_collapse(&g, p, false);
    cudaStream_t st = fcc_stream(p->stream);
    if (g.R == 0) return FLASHC_OK;
    /* Few very long rows: split D into fixed chunks (a function of R and D
     * only), so the result does not depend on timing or the device. */
    const int64_t CHUNK = 16384;
    if (g.x_dstr == 1 && g.R < 1024 && g.D >= 2 * CHUNK) {
        const int64_t nsplit = (g.D + CHUNK - 1) / CHUNK;
        if (nsplit <= 65535) {
            A *part = nullptr;
            FCC_CHECK(cudaMallocAsync((void **)&part, (size_t)(g.R * nsplit) * sizeof(A), st));
            dim3 grid(fcc_grid_rows(g.R, 256 / 32), (unsigned)nsplit);
            fcc_wsum_fwd_kernel<T, 32><<<grid, 256, 0, st>>>(g, CHUNK, part);
            cudaError_t e = cudaGetLastError();
            if (e == cudaSuccess) {
                fcc_wsum_fwd_finish_kernel<T><<<(unsigned)((g.R + 255) / 256), 256, 0, st>>>(g, (int)nsplit, part);
                e = cudaGetLastError();
            }
            cudaFreeAsync(part, st);
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

template <class T> static flashc_status fcc_wsum_bwd_typed(const fc_wsum *p) {
    using A = typename fcc_type<T>::acc;
    fcc_wsum_args g;
    fcc_collapse(&g, p, p->dx != nullptr);
    cudaStream_t st = fcc_stream(p->stream);
    if (p->dx && g.R > 0 && g.D > 0) {
        const int64_t inner = g.dxs[g.outer.n - 1];
        if (g.dx_dstr != 1 && (inner < 0 ? -inner : inner) < (g.dx_dstr < 0 ? -g.dx_dstr : g.dx_dstr))
            fcc_wsum_dx_kernel<T, 1><<<fcc_grid_rows(g.R, 256), 256, 0, st>>>(g);
        else if (g.D >= 64)
            fcc_wsum_dx_kernel<T, 32><<<fcc_grid_rows(g.R, 8), 256, 0, st>>>(g);
        else
            fcc_wsum_dx_kernel<T, 4><<<fcc_grid_rows(g.R, 64), 256, 0, st>>>(g);
        FCC_CHECK_LAUNCH("fcc_wsum_dx_kernel");
    }
    if (p->dw && g.D > 0) {
        /* nchunk depends on R only: the summation order is fixed. */
        const int64_t ROWS_MIN = 64, MAXCH = 512;
        int64_t nchunk = (g.R + ROWS_MIN - 1) / ROWS_MIN;
        if (nchunk > MAXCH) nchunk = MAXCH;
        const int64_t CR = nchunk > 0 ? (g.R + nchunk - 1) / nchunk : 0;
        A *part = nullptr;
        if (nchunk > 0) {
            FCC_CHECK(cudaMallocAsync((void **)&part, (size_t)(nchunk * g.D) * sizeof(A), st));
            cudaError_t e;
            const int64_t gx32 = (g.D + 31) / 32;
            if (g.D >= 32 || g.x_dstr != 1) {
                fcc_wsum_dw_partial_kernel<T, 32><<<dim3((unsigned)gx32, (unsigned)nchunk), 256, 0, st>>>(g, CR, part);
            } else {
                fcc_wsum_dw_partial_kernel<T, 8><<<dim3((unsigned)((g.D + 7) / 8), (unsigned)nchunk), 256, 0, st>>>(g, CR, part);
            }
            e = cudaGetLastError();
            if (e != cudaSuccess) {
                cudaFreeAsync(part, st);
                return fcc_cuda_error(e, __FILE__, __LINE__, "launch of fcc_wsum_dw_partial_kernel");
            }
        }
        fcc_wsum_dw_finish_kernel<T><<<(unsigned)((g.D + 255) / 256), 256, 0, st>>>(g, nchunk, part);
        cudaError_t e = cudaGetLastError();
        if (part) cudaFreeAsync(part, st);
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
