/*
 * attn_dispatch.cu — the module's attention entries. The tensor-core kernels
 * (attn_tc.h) are asked first; they return FLASHC_ERR_UNSUPPORTED for a case
 * they decline, and the generic SIMT kernels (attn_generic_fwd.cu,
 * attn_generic_bwd.cu), which accept every valid fc_attn, run instead.
 *
 * FLASHC_CUDA_KERNEL=generic in the environment forces the generic kernels
 * (tests and benchmarks compare the two paths). It is read on every call so
 * a test may change it between calls.
 */
#include "fc_cuda.cuh"
#include "attn_tc.h"

#include <stdlib.h>
#include <string.h>

static bool fcc_force_generic(void) {
    const char *e = getenv("FLASHC_CUDA_KERNEL");
    return e && strcmp(e, "generic") == 0;
}

flashc_status fcc_attn_fwd(const fc_attn *a) {
    if (!fcc_force_generic()) {
        const flashc_status st = fc_cuda_attn_fwd_tc(a);
        if (st != FLASHC_ERR_UNSUPPORTED) return st;
        fcc_clear_error();
    }
    return fcc_attn_fwd_generic(a);
}

flashc_status fcc_attn_bwd(const fc_attn *a) {
    if (!fcc_force_generic()) {
        const flashc_status st = fc_cuda_attn_bwd_tc(a);
        if (st != FLASHC_ERR_UNSUPPORTED) return st;
        fcc_clear_error();
    }
    return fcc_attn_bwd_generic(a);
}
