/*
 * attn_dispatch.cu — the module's attention entries. The tensor-core kernels
 * (attn_tc.h) are asked first; they return FLASHC_ERR_UNSUPPORTED for a case
 * they decline, and the generic SIMT kernels (attn_generic_fwd.cu,
 * attn_generic_bwd.cu), which accept every valid fc_attn, run instead.
 * Forward order: the Hopper wgmma kernel (attn_fwd_wgmma.cu; only on compute
 * capability 9.0, the one arch its sm_90a code runs on), then the mma.sync
 * kernel (attn_fwd_tc.cu), then generic.
 *
 * FLASHC_CUDA_KERNEL in the environment forces a path (tests and benchmarks
 * compare them): "generic" = the generic kernels only; "mma" = skip the
 * wgmma forward (mma.sync, then generic). It is read on every call so a test
 * may change it between calls.
 */
#include "fc_cuda.cuh"
#include "attn_tc.h"

#include <atomic>
#include <stdlib.h>
#include <string.h>

enum { FCC_KERNEL_AUTO = 0, FCC_KERNEL_MMA = 1, FCC_KERNEL_GENERIC = 2 };

static int fcc_forced_kernel(void) {
    const char *e = getenv("FLASHC_CUDA_KERNEL");
    if (!e) return FCC_KERNEL_AUTO;
    if (strcmp(e, "generic") == 0) return FCC_KERNEL_GENERIC;
    if (strcmp(e, "mma") == 0) return FCC_KERNEL_MMA;
    return FCC_KERNEL_AUTO;
}

/* 1 when the current device is compute capability 9.0 (sm_90a code runs
 * there and nowhere else). Queried once per device ordinal, then cached. */
static bool fcc_device_is_sm90(void) {
    static std::atomic<int> cache[64]; /* 0 unknown, 1 yes, 2 no */
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    int c = (dev >= 0 && dev < 64) ? cache[dev].load(std::memory_order_relaxed) : 0;
    if (c == 0) {
        int major = 0, minor = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
            cudaGetLastError();
            return false;
        }
        c = (major == 9 && minor == 0) ? 1 : 2;
        if (dev >= 0 && dev < 64) cache[dev].store(c, std::memory_order_relaxed);
    }
    return c == 1;
}

flashc_status fcc_attn_fwd(const fc_attn *a) {
    const int forced = fcc_forced_kernel();
    if (forced == FCC_KERNEL_AUTO && fcc_device_is_sm90()) {
        const flashc_status st = fc_cuda_attn_fwd_wgmma(a);
        if (st != FLASHC_ERR_UNSUPPORTED) return st;
        fcc_clear_error();
    }
    if (forced != FCC_KERNEL_GENERIC) {
        const flashc_status st = fc_cuda_attn_fwd_tc(a);
        if (st != FLASHC_ERR_UNSUPPORTED) return st;
        fcc_clear_error();
    }
    return fcc_attn_fwd_generic(a);
}

flashc_status fcc_attn_bwd(const fc_attn *a) {
    if (fcc_forced_kernel() != FCC_KERNEL_GENERIC) {
        const flashc_status st = fc_cuda_attn_bwd_tc(a);
        if (st != FLASHC_ERR_UNSUPPORTED) return st;
        fcc_clear_error();
    }
    return fcc_attn_bwd_generic(a);
}
