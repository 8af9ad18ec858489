/* Errors, version, params defaults: the parts of the ABI with no op. */
#include "core.h"
#include "common/knobs.h"

#include <omp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

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
    case FLASHC_I32: return 4;
    default: return 0;
    }
}

const char *fc_dtype_name(int dtype) {
    switch (dtype) {
    case FLASHC_F32: return "F32";
    case FLASHC_F16: return "F16";
    case FLASHC_BF16: return "BF16";
    case FLASHC_F64: return "F64";
    case FLASHC_I32: return "I32";
    default: return "unknown";
    }
}

flashc_status fc_check_knobs(void) {
    const char *value = NULL;
    const fc_knob_spec *bad = fc_knobs_invalid(&value);
    FC_RETURN_IF(bad, FLASHC_ERR_INVALID_ARGUMENT,
                 "environment variable %s='%s' is not a value it accepts: expected %s (unset or empty = auto; "
                 "flashc.h, \"Environment\")",
                 bad->var, value, bad->accepted);
    return FLASHC_OK;
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

/* ------------------------------------------------------------ OpenMP team */
/* libgomp keeps a pool of threads per calling thread, so a team size this
 * thread has run once needs no new threads: no check then (the hot path is
 * two omp_ calls). */
static _Thread_local int fc_team_ok = 1;

/* The stack of one OpenMP thread: OMP_STACKSIZE / GOMP_STACKSIZE as libgomp
 * reads them (a number, suffix B, K, M or G, default K), else the default
 * pthread stack size. */
static size_t omp_stack_bytes(void) {
    const char *e = getenv("OMP_STACKSIZE");
    if (!e || !*e) e = getenv("GOMP_STACKSIZE");
    if (e && *e) {
        char *end;
        const unsigned long long n = strtoull(e, &end, 10);
        while (*end == ' ') ++end;
        const int sh = *end == 'B' || *end == 'b' ? 0 : *end == 'M' || *end == 'm' ? 20 : *end == 'G' || *end == 'g' ? 30 : 10;
        if (end != e && n > 0 && n < (1ull << (63 - sh))) return (size_t)(n << sh);
    }
    size_t s = 0;
    pthread_attr_t at;
    if (pthread_getattr_default_np(&at) == 0) {
        pthread_attr_getstacksize(&at, &s);
        pthread_attr_destroy(&at);
    }
    return s ? s : (size_t)8 << 20;
}

fc_team fc_cpu_team_begin(void) {
    fc_team t;
    t.saved = t.used = omp_get_max_threads();
    if (t.used <= fc_team_ok) return t;
    /* Can the address space hold the new threads' stacks (+1 MiB each for
     * guard page, TLS and the runtime's own data)? Twice that, so that the
     * call's own buffers, allocated after this check, leave the threads
     * theirs. A PROT_NONE reservation costs no memory, only address space
     * (what ulimit -v and RLIMIT_AS count). Halve the team until it fits. */
    const size_t per = omp_stack_bytes() + ((size_t)1 << 20);
    while (t.used > fc_team_ok) {
        const size_t want = 2 * (size_t)(t.used - fc_team_ok) * per;
        void *p = mmap(NULL, want, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p != MAP_FAILED) {
            munmap(p, want);
            break;
        }
        t.used = t.used / 2 > fc_team_ok ? t.used / 2 : fc_team_ok;
    }
    if (t.used != t.saved) omp_set_num_threads(t.used);
    return t;
}

void fc_cpu_team_end(fc_team t) {
    if (t.used != t.saved) omp_set_num_threads(t.saved);
    if (t.used > fc_team_ok) fc_team_ok = t.used;
}
