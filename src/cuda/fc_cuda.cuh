/*
 * fc_cuda.cuh — shared by every file of the CUDA module (libflashc_cuda.so):
 * the module's own thread-local error message, CUDA call checking, dtype
 * traits (storage type -> accumulation type).
 *
 * The module never aborts or prints: every CUDA call goes through FCC_CHECK,
 * which turns a failure into FLASHC_ERR_CUDA (FLASHC_ERR_OUT_OF_MEMORY for
 * allocation failures) with a "file:line: call: message" text.
 */
#ifndef FC_CUDA_CUH
#define FC_CUDA_CUH

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include "flashc_internal.h"

/* ------------------------------------------------------------ errors */
#if defined(__GNUC__)
#  define FCC_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#  define FCC_PRINTF(a, b)
#endif
/* Records `st` and a message as this thread's module error; returns st. */
flashc_status fcc_error(flashc_status st, const char *fmt, ...) FCC_PRINTF(2, 3);
/* Maps a cudaError_t to a status and records "file:line: what: reason". */
flashc_status fcc_cuda_error(cudaError_t e, const char *file, int line, const char *what);
const char *fcc_last_error(void);
void fcc_clear_error(void);

#define FCC_CHECK(call)                                                       \
    do {                                                                      \
        cudaError_t fcc_e_ = (call);                                          \
        if (fcc_e_ != cudaSuccess)                                            \
            return fcc_cuda_error(fcc_e_, __FILE__, __LINE__, #call);         \
    } while (0)

/* After every kernel launch: catches bad configurations (grid, smem). */
#define FCC_CHECK_LAUNCH(what)                                                \
    do {                                                                      \
        cudaError_t fcc_e_ = cudaGetLastError();                              \
        if (fcc_e_ != cudaSuccess)                                            \
            return fcc_cuda_error(fcc_e_, __FILE__, __LINE__, "launch of " what); \
    } while (0)

/* Propagates a non-OK flashc_status. */
#define FCC_TRY(expr)                                                         \
    do {                                                                      \
        flashc_status fcc_s_ = (expr);                                        \
        if (fcc_s_ != FLASHC_OK) return fcc_s_;                               \
    } while (0)

/* Opt-in dynamic shared memory above 48 KB for `kernel`, after checking the
 * current device allows `bytes`. */
flashc_status fcc_set_smem(const void *kernel, size_t bytes, const char *name);

/* Stream-ordered scratch (capturable in a CUDA graph) from the module's own
 * memory pool of the current device, which keeps up to FCC_POOL_KEEP bytes
 * cached across synchronisations: the default pool releases everything at
 * each synchronisation, and mapping it again cost ~100-200 µs per call
 * (measured on the H100: decode with split keys, the tensor-core backward).
 * The pool is the module's (cudaMemPoolCreate), so the process's default
 * pool keeps its own settings. Requests up to 1 MiB outside graph capture
 * take a buffer kept per (device, stream) instead (module.cu, FCC_SLAB_MAX):
 * no allocation a call. FLASHC_CUDA_POISON_SCRATCH=1 (tests) fills what is
 * lent with 0xFF bytes first. */
#define FCC_POOL_KEEP ((uint64_t)1 << 30)
cudaError_t fcc_scratch_alloc(void **ptr, size_t bytes, cudaStream_t st);
cudaError_t fcc_scratch_free(void *ptr, cudaStream_t st);

/* ------------------------------------------------------------ dtypes */
/* Storage type T -> accumulation type (fp32, or fp64 for double) and exact
 * conversions both ways (round-to-nearest-even on the way down). */
template <class T> struct fcc_type;
template <> struct fcc_type<float> {
    using acc = float;
    static __device__ __forceinline__ float to(float x) { return x; }
    static __device__ __forceinline__ float from(float x) { return x; }
};
template <> struct fcc_type<double> {
    using acc = double;
    static __device__ __forceinline__ double to(double x) { return x; }
    static __device__ __forceinline__ double from(double x) { return x; }
};
template <> struct fcc_type<__half> {
    using acc = float;
    static __device__ __forceinline__ float to(__half x) { return __half2float(x); }
    static __device__ __forceinline__ __half from(float x) { return __float2half_rn(x); }
};
template <> struct fcc_type<__nv_bfloat16> {
    using acc = float;
    static __device__ __forceinline__ float to(__nv_bfloat16 x) { return __bfloat162float(x); }
    static __device__ __forceinline__ __nv_bfloat16 from(float x) { return __float2bfloat16_rn(x); }
};

/* exp / log in the accumulation precision (accurate versions: F32 results
 * must be accurate to fp32, so no __expf). */
__device__ __forceinline__ float fcc_exp(float x) { return expf(x); }
__device__ __forceinline__ double fcc_exp(double x) { return exp(x); }
__device__ __forceinline__ float fcc_log(float x) { return logf(x); }
__device__ __forceinline__ double fcc_log(double x) { return log(x); }
template <class A> __device__ __forceinline__ A fcc_neg_inf();
template <> __device__ __forceinline__ float fcc_neg_inf<float>() { return -__int_as_float(0x7f800000); }
template <> __device__ __forceinline__ double fcc_neg_inf<double>() { return -__longlong_as_double(0x7ff0000000000000ll); }

/* Calls BODY with `T` bound to the storage type of a flashc_dtype. */
#define FCC_DISPATCH_DTYPE(dtype, ...)                                        \
    switch (dtype) {                                                          \
    case FLASHC_F32: { using T = float; __VA_ARGS__; } break;                 \
    case FLASHC_F16: { using T = __half; __VA_ARGS__; } break;                \
    case FLASHC_BF16: { using T = __nv_bfloat16; __VA_ARGS__; } break;        \
    case FLASHC_F64: { using T = double; __VA_ARGS__; } break;                \
    default: return fcc_error(FLASHC_ERR_DTYPE, "CUDA module: unknown dtype %d", (int)(dtype)); \
    }

static inline cudaStream_t fcc_stream(void *s) { return (cudaStream_t)s; }

/* Attention entries (attn_dispatch.cu): tensor-core kernels first, then the
 * generic (SIMT) kernels (attn_generic_*.cu), the fallback for every case. */
flashc_status fcc_attn_fwd(const fc_attn *a);
flashc_status fcc_attn_bwd(const fc_attn *a);
flashc_status fcc_weighted_sum(const fc_wsum *p);
flashc_status fcc_weighted_sum_bwd(const fc_wsum *p);

/* ------------------------------------------- programmatic dependent launch */
/* (sm_90+) A kernel launched by fcc_launch with pdl = true may be scheduled
 * once every CTA of the kernel before it on the stream has called
 * fcc_pdl_trigger (or exited); fcc_pdl_wait waits until that kernel has
 * completed and its memory is visible. Both are no-ops below sm_90 and in a
 * kernel launched without the attribute. Users: the decode's split and
 * combine kernels and the KV append (attn_decode.cuh), the backward's dK/dV
 * and dQ convert kernels (attn_bwd_wgmma.cu). */
__device__ __forceinline__ void fcc_pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void fcc_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
/* kern<<<grid, block, smem, st>>>(args...); pdl: as a programmatic dependent
 * of the kernel before it on st (only on compute capability ≥ 9.0: the
 * caller decides). */
template <class... KArgs, class... Args>
static cudaError_t fcc_launch(void (*kern)(KArgs...), unsigned grid, unsigned block, size_t smem, cudaStream_t st,
                              bool pdl, Args &&...args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(block);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kern, static_cast<Args &&>(args)...);
}

#endif /* FC_CUDA_CUH */
