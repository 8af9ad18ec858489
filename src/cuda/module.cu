/*
 * module.cu — the entry point of libflashc_cuda.so: the fc_cuda_module table
 * (flashc_internal.h) returned by flashc_cuda_module_init(), the module's
 * thread-local error message, and the device-memory helpers.
 *
 * This is the only exported symbol; everything else has hidden visibility.
 * cudart is linked statically, so only the driver (libcuda.so.1) is needed
 * at run time; without one, probe() fails with a clear message.
 */
#include "fc_cuda.cuh"
#include "common/knobs.h"

#include <mutex>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ errors */
static thread_local char fcc_msg[1024];

const char *fcc_last_error(void) { return fcc_msg; }
void fcc_clear_error(void) { fcc_msg[0] = '\0'; }

flashc_status fcc_error(flashc_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fcc_msg, sizeof fcc_msg, fmt, ap);
    va_end(ap);
    return st;
}

flashc_status fcc_cuda_error(cudaError_t e, const char *file, int line, const char *what) {
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    const flashc_status st = (e == cudaErrorMemoryAllocation) ? FLASHC_ERR_OUT_OF_MEMORY
                                                              : FLASHC_ERR_CUDA;
    return fcc_error(st, "%s:%d: %s: %s (%s)", base, line, what, cudaGetErrorString(e),
                     cudaGetErrorName(e));
}

/* Raising a kernel's dynamic shared-memory limit is done once per (kernel,
 * device, size) and remembered: cudaFuncSetAttribute and the attribute
 * query cost microseconds that every call would otherwise pay. A small
 * table under a mutex; when full, calls simply set the attribute again. */
flashc_status fcc_set_smem(const void *kernel, size_t bytes, const char *name) {
    if (bytes <= 48 * 1024) return FLASHC_OK;
    struct Entry {
        const void *kernel;
        int dev;
        size_t bytes;
    };
    static Entry table[256];
    static int used = 0;
    static std::mutex mu;
    int dev = 0;
    FCC_CHECK(cudaGetDevice(&dev));
    {
        std::lock_guard<std::mutex> lock(mu);
        for (int i = 0; i < used; ++i)
            if (table[i].kernel == kernel && table[i].dev == dev && table[i].bytes >= bytes) return FLASHC_OK;
    }
    int optin = 0;
    FCC_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if ((size_t)optin < bytes)
        return fcc_error(FLASHC_ERR_UNSUPPORTED,
                         "%s needs %zu bytes of shared memory per block; device %d allows %d",
                         name, bytes, dev, optin);
    FCC_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)bytes));
    std::lock_guard<std::mutex> lock(mu);
    if (used < 256) table[used++] = Entry{kernel, dev, bytes};
    return FLASHC_OK;
}

/* Module-owned stream-ordered pools, one per device, created on first use
 * (fc_cuda.cuh, fcc_scratch_alloc). Falls back to the device's current pool
 * where pools cannot be created. */
static cudaMemPool_t fcc_pool_of(int dev) {
    enum { MAXDEV = 64 };
    static cudaMemPool_t pools[MAXDEV];
    static bool tried[MAXDEV];
    static std::mutex mu;
    if (dev < 0 || dev >= MAXDEV) return nullptr;
    std::lock_guard<std::mutex> lock(mu);
    if (!tried[dev]) {
        tried[dev] = true;
        cudaMemPoolProps props;
        memset(&props, 0, sizeof props);
        props.allocType = cudaMemAllocationTypePinned;
        props.handleTypes = cudaMemHandleTypeNone;
        props.location.type = cudaMemLocationTypeDevice;
        props.location.id = dev;
        cudaMemPool_t pool = nullptr;
        if (cudaMemPoolCreate(&pool, &props) == cudaSuccess) {
            uint64_t keep = FCC_POOL_KEEP;
            cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
            pools[dev] = pool;
        } else {
            (void)cudaGetLastError(); /* not sticky: clear it */
        }
    }
    return pools[dev];
}

static cudaError_t pool_alloc(void **ptr, size_t bytes, int dev, cudaStream_t st) {
    cudaMemPool_t pool = fcc_pool_of(dev);
    return pool ? cudaMallocFromPoolAsync(ptr, bytes, pool, st) : cudaMallocAsync(ptr, bytes, st);
}

/* Small scratch kept per (device, stream) between calls: requests up to
 * FCC_SLAB_MAX bytes on a stream that is not capturing a graph (a split
 * decode's partial results) take a slab kept for that pair, for at most
 * FCC_SLABS pairs — no allocation and free a call (~3 µs of CPU measured on
 * the H200's host, before the first launch). A slab is lent to one call at a
 * time; every use of it is ordered on its stream, so a call may take it while
 * the previous call's kernels still run, and growing it frees the old one on
 * that stream too. It stays allocated (≤ 2·FCC_SLAB_MAX a pair).
 * cudaStreamPerThread, a capture, a slab lent to another call or a full table
 * take the pool. */
#define FCC_SLAB_MAX ((size_t)1 << 20)
#define FCC_SLABS 64
namespace {
struct Slab {
    int dev;
    cudaStream_t st;
    void *ptr;
    size_t bytes;
    bool lent;
};
Slab slabs[FCC_SLABS];
int nslabs = 0;
std::mutex slab_mu;
} // namespace

/* The slab of (dev, st), lent to the caller; nullptr when it is lent already,
 * the table is full, or st is not a stream a slab may serve. */
static Slab *slab_take(int dev, cudaStream_t st) {
    /* cudaStreamPerThread names a different stream on every thread. */
    if (st == cudaStreamPerThread) return nullptr;
    std::lock_guard<std::mutex> lock(slab_mu);
    for (int i = 0; i < nslabs; ++i) {
        Slab &b = slabs[i];
        if (b.dev == dev && b.st == st) {
            if (b.lent) return nullptr;
            b.lent = true;
            return &b;
        }
    }
    if (nslabs == FCC_SLABS) return nullptr;
    slabs[nslabs] = Slab{dev, st, nullptr, 0, true};
    return &slabs[nslabs++];
}

static cudaError_t scratch_take(void **ptr, size_t bytes, cudaStream_t st);

/* Scratch for one call (fc_cuda.cuh); under FLASHC_CUDA_POISON_SCRATCH=1
 * (common/knobs.h: tests) filled with 0xFF bytes on the stream first. */
cudaError_t fcc_scratch_alloc(void **ptr, size_t bytes, cudaStream_t st) {
    cudaError_t e = scratch_take(ptr, bytes, st);
    if (e == cudaSuccess && bytes > 0 && fc_knob_cuda_poison_scratch()) {
        e = cudaMemsetAsync(*ptr, 0xFF, bytes, st);
        if (e != cudaSuccess) {
            (void)fcc_scratch_free(*ptr, st);
            *ptr = nullptr;
        }
    }
    return e;
}

static cudaError_t scratch_take(void **ptr, size_t bytes, cudaStream_t st) {
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    if (bytes <= FCC_SLAB_MAX) {
        /* A graph being captured gets its own allocation node (a replay may
         * run on any stream, beside eager calls on this one). */
        cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(st, &cs) != cudaSuccess) {
            (void)cudaGetLastError();
            cs = cudaStreamCaptureStatusActive;
        }
        Slab *b = cs == cudaStreamCaptureStatusNone ? slab_take(dev, st) : nullptr;
        if (b) {
            if (b->bytes < bytes) {
                size_t want = 64 * 1024;
                while (want < bytes) want *= 2;
                void *grown = nullptr;
                e = pool_alloc(&grown, want, dev, st);
                if (e != cudaSuccess) {
                    std::lock_guard<std::mutex> lock(slab_mu);
                    b->lent = false;
                    return e;
                }
                if (b->ptr) (void)cudaFreeAsync(b->ptr, st);
                b->ptr = grown;
                b->bytes = want;
            }
            *ptr = b->ptr;
            return cudaSuccess;
        }
    }
    return pool_alloc(ptr, bytes, dev, st);
}

cudaError_t fcc_scratch_free(void *ptr, cudaStream_t st) {
    if (!ptr) return cudaSuccess;
    {
        std::lock_guard<std::mutex> lock(slab_mu);
        for (int i = 0; i < nslabs; ++i)
            if (slabs[i].lent && slabs[i].ptr == ptr && slabs[i].st == st) {
                slabs[i].lent = false;
                return cudaSuccess;
            }
    }
    return cudaFreeAsync(ptr, st);
}

/* ------------------------------------------------------------ table */
static const char *m_last_error(void) { return fcc_msg; }

/* The reasons a user can act on, told apart: no driver at all (cudart,
 * linked statically, reports it as cudaErrorInsufficientDriver, whose text
 * "CUDA driver version is insufficient" misleads), a driver older than the
 * runtime this module was built with, no device. The loader prefixes
 * "CUDA backend unavailable: ". */
static flashc_status m_probe(void) {
    int drv = 0, n = 0;
    /* 0 when no driver (libcuda.so.1) can be loaded. */
    if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;
    cudaGetLastError();
    if (drv == 0)
        return fcc_error(FLASHC_ERR_BACKEND_UNAVAILABLE,
                         "no CUDA driver (libcuda.so.1 not found: install the NVIDIA driver)");
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorInsufficientDriver) {
        cudaGetLastError();
        return fcc_error(FLASHC_ERR_BACKEND_UNAVAILABLE,
                         "CUDA driver too old: it supports CUDA %d.%d, this module was built with CUDA "
                         "runtime %d.%d (update the NVIDIA driver)",
                         drv / 1000, drv % 1000 / 10, CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
    }
    if (e == cudaErrorNoDevice || (e == cudaSuccess && n < 1)) {
        cudaGetLastError();
        return fcc_error(FLASHC_ERR_BACKEND_UNAVAILABLE, "no CUDA device (driver for CUDA %d.%d found, 0 devices)",
                         drv / 1000, drv % 1000 / 10);
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        return fcc_error(FLASHC_ERR_BACKEND_UNAVAILABLE, "cudaGetDeviceCount failed: %s (%s)",
                         cudaGetErrorString(e), cudaGetErrorName(e));
    }
    int dev = 0, major = 0;
    FCC_CHECK(cudaGetDevice(&dev));
    FCC_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    if (major < 8)
        return fcc_error(FLASHC_ERR_BACKEND_UNAVAILABLE,
                         "CUDA device %d has compute capability %d.x; flashc needs ≥ 8.0", dev,
                         major);
    /* Touch the context so that a broken driver shows up here, not later. */
    FCC_CHECK(cudaFree(0));
    return FLASHC_OK;
}

static flashc_status m_attn_fwd(const fc_attn *a) { fcc_clear_error(); return fcc_attn_fwd(a); }
static flashc_status m_attn_bwd(const fc_attn *a) { fcc_clear_error(); return fcc_attn_bwd(a); }
static flashc_status m_wsum(const fc_wsum *p) { fcc_clear_error(); return fcc_weighted_sum(p); }
static flashc_status m_wsum_bwd(const fc_wsum *p) { fcc_clear_error(); return fcc_weighted_sum_bwd(p); }

static flashc_status m_device_count(int *count) {
    *count = 0;
    cudaError_t e = cudaGetDeviceCount(count);
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
        cudaGetLastError();
        *count = 0;
        return FLASHC_OK;
    }
    FCC_CHECK(e);
    return FLASHC_OK;
}

static flashc_status m_device_name(int device, char *buf, size_t len) {
    cudaDeviceProp prop;
    FCC_CHECK(cudaGetDeviceProperties(&prop, device));
    if (buf && len > 0) {
        strncpy(buf, prop.name, len - 1);
        buf[len - 1] = '\0';
    }
    return FLASHC_OK;
}

static flashc_status m_set_device(int device) {
    FCC_CHECK(cudaSetDevice(device));
    return FLASHC_OK;
}

static flashc_status m_malloc(void **ptr, size_t bytes) {
    *ptr = NULL;
    if (bytes == 0) return FLASHC_OK;
    cudaError_t e = cudaMalloc(ptr, bytes);
    if (e != cudaSuccess) {
        *ptr = NULL;
        cudaGetLastError(); /* allocation errors are not sticky; clear them */
        char what[96];
        snprintf(what, sizeof what, "cudaMalloc(%zu bytes)", bytes);
        return fcc_cuda_error(e, __FILE__, __LINE__, what);
    }
    return FLASHC_OK;
}

static flashc_status m_free(void *ptr) {
    if (!ptr) return FLASHC_OK;
    FCC_CHECK(cudaFree(ptr));
    return FLASHC_OK;
}

static flashc_status m_memcpy(void *dst, const void *src, size_t bytes, int kind) {
    cudaMemcpyKind k;
    switch (kind) {
    case FLASHC_MEMCPY_HOST_TO_DEVICE: k = cudaMemcpyHostToDevice; break;
    case FLASHC_MEMCPY_DEVICE_TO_HOST: k = cudaMemcpyDeviceToHost; break;
    case FLASHC_MEMCPY_DEVICE_TO_DEVICE: k = cudaMemcpyDeviceToDevice; break;
    default:
        return fcc_error(FLASHC_ERR_INVALID_ARGUMENT,
                         "flashc_cuda_memcpy: kind=%d is not a flashc_memcpy_kind (1, 2 or 3)", kind);
    }
    if (bytes == 0) return FLASHC_OK;
    FCC_CHECK(cudaMemcpy(dst, src, bytes, k));
    return FLASHC_OK;
}

static flashc_status m_synchronize(void) {
    FCC_CHECK(cudaDeviceSynchronize());
    return FLASHC_OK;
}

static flashc_status m_pointer_is_device(const void *ptr, int *is_device) {
    *is_device = 0;
    if (!ptr) return FLASHC_OK;
    cudaPointerAttributes at;
    cudaError_t e = cudaPointerGetAttributes(&at, ptr);
    if (e != cudaSuccess) {
        /* An unregistered host pointer on old runtimes: not device memory.
         * Clear the (non-sticky) error so later calls don't see it. */
        cudaGetLastError();
        return FLASHC_OK;
    }
    *is_device = (at.type == cudaMemoryTypeDevice || at.type == cudaMemoryTypeManaged);
    return FLASHC_OK;
}

/* NULL and cudaStreamLegacy ((cudaStream_t)1) name the same stream. */
static cudaStream_t canonical_stream(void *s) { return s ? (cudaStream_t)s : cudaStreamLegacy; }

/* A fresh event per call: the wait captures the record at enqueue time, and
 * destroying a pending event is safe (released when it completes). Only
 * calls whose inputs come from another stream pay the ~µs it costs. */
static flashc_status m_stream_wait(void *stream, void *producer) {
    cudaStream_t s = canonical_stream(stream), p = canonical_stream(producer);
    if (s == p) return FLASHC_OK;
    cudaEvent_t ev;
    FCC_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    cudaError_t e = cudaEventRecord(ev, p);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(s, ev, 0);
    cudaEventDestroy(ev);
    FCC_CHECK(e);
    return FLASHC_OK;
}

static const fc_cuda_module fcc_table = {
    FC_CUDA_MODULE_API_VERSION,
    (uint32_t)sizeof(fc_cuda_module),
    m_last_error,
    m_probe,
    m_attn_fwd,
    m_attn_bwd,
    m_wsum,
    m_wsum_bwd,
    m_device_count,
    m_device_name,
    m_set_device,
    m_malloc,
    m_free,
    m_memcpy,
    m_synchronize,
    m_pointer_is_device,
    m_stream_wait,
};

extern "C" __attribute__((visibility("default"))) const fc_cuda_module *flashc_cuda_module_init(void) {
    return &fcc_table;
}
