/* core.h — helpers shared by the core's files (the .c files in src/). Private. */
#ifndef FLASHC_CORE_H
#define FLASHC_CORE_H

#include "flashc_internal.h"

/* zstd-style: record status and a message naming the failed condition. */
#define FC_RETURN_IF(cond, status, ...)                  \
    do {                                                 \
        if (cond) return fc_set_error((status), __VA_ARGS__); \
    } while (0)
#define FC_TRY(expr)                                     \
    do {                                                 \
        flashc_status fc_try_s_ = (expr);                \
        if (fc_try_s_ != FLASHC_OK) return fc_try_s_;    \
    } while (0)

/* Validates a tensor argument: non-NULL descriptor, known dtype, the
 * expected ndim (−1: any 0..FLASHC_MAX_DIMS), extents ≥ 0, element count and
 * element/byte offsets within int64, data non-NULL unless it is empty, and
 * for outputs no zero stride on an axis of extent > 1. `name` is used in
 * messages ("q", "lse", …). */
flashc_status fc_check_tensor(const flashc_tensor *t, const char *name, int ndim, int is_output);
int64_t fc_numel(const flashc_tensor *t); /* after fc_check_tensor */
/* "F32", "F16", "BF16", "F64" ("unknown" otherwise): messages name dtypes, never codes. */
const char *fc_dtype_name(int dtype);
/* FLASHC_ERR_INVALID_ARGUMENT naming the first FLASHC_* knob set to a value it
 * does not accept (common/knobs.h); every compute entry point calls it first. */
flashc_status fc_check_knobs(void);

/* The OpenMP team of a CPU call (flashc.h, "Threads"): begin bounds the
 * calling thread's team to what the address space can hold (the OpenMP
 * runtime exits the process when it cannot create a thread), end restores
 * the caller's setting. Bracket every CPU backend call with them. */
typedef struct fc_team {
    int saved, used;
} fc_team;
fc_team fc_cpu_team_begin(void);
void fc_cpu_team_end(fc_team t);

/* Backend resolution. `ptrs` are the data pointers of the call (NULL entries
 * and empty tensors skipped). On success *backend is CPU or CUDA. */
flashc_status fc_resolve_backend(int requested, const void *const *ptrs, int n, int *backend);

/* The CUDA module, loaded once; NULL with the error set when unavailable. */
const fc_cuda_module *fc_cuda(void);
/* Copies the module's message into ours when status != OK. */
flashc_status fc_cuda_status(const fc_cuda_module *m, flashc_status s);

#endif
