/* Errors, version, params defaults: the parts of the ABI with no op. */
#include "core.h"

#include <stdarg.h>
#include <stdio.h>

/* The message lives in thread-local storage: concurrent callers on other
 * threads never see each other's errors. */
static _Thread_local char fc_errmsg[512];

flashc_status fc_set_error(flashc_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fc_errmsg, sizeof fc_errmsg, fmt, ap);
    va_end(ap);
    return status;
}

void fc_clear_error(void) { fc_errmsg[0] = '\0'; }

FLASHC_API const char *flashc_last_error(void) { return fc_errmsg; }

FLASHC_API const char *flashc_status_string(int status) {
    switch (status) {
    case FLASHC_OK: return "FLASHC_OK";
    case FLASHC_ERR_INVALID_ARGUMENT: return "FLASHC_ERR_INVALID_ARGUMENT";
    case FLASHC_ERR_NULL_POINTER: return "FLASHC_ERR_NULL_POINTER";
    case FLASHC_ERR_SHAPE: return "FLASHC_ERR_SHAPE";
    case FLASHC_ERR_DTYPE: return "FLASHC_ERR_DTYPE";
    case FLASHC_ERR_STRIDE: return "FLASHC_ERR_STRIDE";
    case FLASHC_ERR_OVERFLOW: return "FLASHC_ERR_OVERFLOW";
    case FLASHC_ERR_UNSUPPORTED: return "FLASHC_ERR_UNSUPPORTED";
    case FLASHC_ERR_BACKEND_UNAVAILABLE: return "FLASHC_ERR_BACKEND_UNAVAILABLE";
    case FLASHC_ERR_OUT_OF_MEMORY: return "FLASHC_ERR_OUT_OF_MEMORY";
    case FLASHC_ERR_CUDA: return "FLASHC_ERR_CUDA";
    case FLASHC_ERR_PARAMS_SIZE: return "FLASHC_ERR_PARAMS_SIZE";
    case FLASHC_ERR_DEVICE_MISMATCH: return "FLASHC_ERR_DEVICE_MISMATCH";
    case FLASHC_ERR_INTERNAL: return "FLASHC_ERR_INTERNAL";
    default: return "FLASHC_ERR_UNKNOWN";
    }
}

FLASHC_API const char *flashc_version_string(void) { return FLASHC_VERSION_STRING; }
FLASHC_API int flashc_version_number(void) { return FLASHC_VERSION_NUMBER; }

FLASHC_API size_t flashc_dtype_size(int dtype) {
    switch (dtype) {
    case FLASHC_F32: return 4;
    case FLASHC_F16: return 2;
    case FLASHC_BF16: return 2;
    case FLASHC_F64: return 8;
    default: return 0;
    }
}

FLASHC_API flashc_attn_params flashc_attn_params_default(void) {
    flashc_attn_params p = {0};
    p.struct_size = (uint32_t)sizeof p;
    p.backend = FLASHC_BACKEND_AUTO;
    p.softmax_scale = 0.0;
    p.causal = 0;
    p.deterministic = 1;
    p.window_left = -1;
    p.window_right = -1;
    p.num_sink_tokens = 0;
    p.sink_logits = NULL;
    p.stream = NULL;
    p.softcap = 0.0;
    p.alibi_slopes = NULL;
    p.sinks = NULL;
    p.dsinks = NULL;
    return p;
}
FLASHC_API size_t flashc_attn_params_size(void) { return sizeof(flashc_attn_params); }

FLASHC_API flashc_exec_params flashc_exec_params_default(void) {
    flashc_exec_params p = {0};
    p.struct_size = (uint32_t)sizeof p;
    p.backend = FLASHC_BACKEND_AUTO;
    p.stream = NULL;
    return p;
}
FLASHC_API size_t flashc_exec_params_size(void) { return sizeof(flashc_exec_params); }
