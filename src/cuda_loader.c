/* Loading the CUDA module (libflashc_cuda.so) on first use, backend
 * resolution, and the ABI's device-memory helpers that forward to it.
 * The core never links cudart: a machine with no module, driver or GPU just
 * reports FLASHC_BACKEND_CUDA unavailable, with the reason. */
#include "core.h"
#include "common/knobs.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_once_t fc_cuda_once = PTHREAD_ONCE_INIT;
static const fc_cuda_module *fc_cuda_mod;
static char fc_cuda_why[768];

/* Directory holding this library, so that the module next to it is found
 * with no environment variable set. */
static void self_dir(char *buf, size_t len) {
    Dl_info info;
    buf[0] = '\0';
    if (dladdr((void *)&self_dir, &info) && info.dli_fname) {
        snprintf(buf, len, "%s", info.dli_fname);
        char *slash = strrchr(buf, '/');
        if (slash) slash[1] = '\0';
        else buf[0] = '\0';
    }
}

/* Every reason below starts with "CUDA backend unavailable: " once; the
 * bindings pass the message on as it is. */
static void load_module(void) {
    char path[4096];
    const char *env = fc_knob_cuda_module();
    if (env) {
        snprintf(path, sizeof path, "%s", env);
    } else {
        char dir[3800];
        self_dir(dir, sizeof dir);
        snprintf(path, sizeof path, "%slibflashc_cuda.so", dir);
    }
    /* An absent file is the common case (a CPU-only build), told apart from a
     * module that exists but does not load (a missing dependency). */
    if (access(path, F_OK) != 0) {
        if (env)
            snprintf(fc_cuda_why, sizeof fc_cuda_why,
                     "CUDA backend unavailable: FLASHC_CUDA_MODULE=%s: no such file", path);
        else
            snprintf(fc_cuda_why, sizeof fc_cuda_why,
                     "CUDA backend unavailable: CUDA module not built (FLASHC_CUDA=OFF, or nvcc missing at build "
                     "time): no %s",
                     path);
        return;
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(fc_cuda_why, sizeof fc_cuda_why, "CUDA backend unavailable: cannot load the module (%s)",
                 e ? e : path);
        return;
    }
    fc_cuda_module_init_fn init = (fc_cuda_module_init_fn)dlsym(h, FC_CUDA_MODULE_INIT_SYMBOL);
    if (!init) {
        snprintf(fc_cuda_why, sizeof fc_cuda_why, "CUDA backend unavailable: %s has no symbol %s", path,
                 FC_CUDA_MODULE_INIT_SYMBOL);
        dlclose(h);
        return;
    }
    const fc_cuda_module *m = init();
    if (!m || m->api_version != FC_CUDA_MODULE_API_VERSION || m->struct_size < sizeof(fc_cuda_module)) {
        snprintf(fc_cuda_why, sizeof fc_cuda_why,
                 "CUDA backend unavailable: %s speaks module API %u, this library %u", path,
                 m ? m->api_version : 0u, (unsigned)FC_CUDA_MODULE_API_VERSION);
        dlclose(h);
        return;
    }
    if (m->probe() != FLASHC_OK) {
        snprintf(fc_cuda_why, sizeof fc_cuda_why, "CUDA backend unavailable: %s", m->last_error());
        return; /* keep it mapped: cudart's static state may hold threads */
    }
    fc_cuda_mod = m;
}

const fc_cuda_module *fc_cuda(void) {
    pthread_once(&fc_cuda_once, load_module);
    if (!fc_cuda_mod) fc_set_error(FLASHC_ERR_BACKEND_UNAVAILABLE, "%s", fc_cuda_why);
    return fc_cuda_mod;
}

flashc_status fc_cuda_status(const fc_cuda_module *m, flashc_status s) {
    if (s != FLASHC_OK) fc_set_error(s, "%s", m->last_error());
    return s;
}

FLASHC_API int flashc_backend_available(int backend) {
    fc_clear_error();
    switch (backend) {
    case FLASHC_BACKEND_AUTO:
    case FLASHC_BACKEND_CPU: return 1;
    case FLASHC_BACKEND_CUDA: return fc_cuda() != NULL;
    default:
        fc_set_error(FLASHC_ERR_INVALID_ARGUMENT, "backend=%d is not a flashc_backend", backend);
        return 0;
    }
}

flashc_status fc_resolve_backend(int requested, const void *const *ptrs, const char *const *names, int n,
                                 int *backend) {
    FC_RETURN_IF(requested != FLASHC_BACKEND_AUTO && requested != FLASHC_BACKEND_CPU &&
                     requested != FLASHC_BACKEND_CUDA,
                 FLASHC_ERR_INVALID_ARGUMENT, "params.backend=%d is not a flashc_backend (0=AUTO, 1=CPU, 2=CUDA)",
                 requested);
    const fc_cuda_module *m = fc_cuda();
    if (!m) {
        if (requested == FLASHC_BACKEND_CUDA) return FLASHC_ERR_BACKEND_UNAVAILABLE; /* message set */
        fc_clear_error(); /* no CUDA here: every pointer is host memory */
        *backend = FLASHC_BACKEND_CPU;
        return FLASHC_OK;
    }
    int n_dev = 0, n_host = 0, first_host = -1, first_dev = -1;
    for (int i = 0; i < n; ++i) {
        if (!ptrs[i]) continue;
        int is_dev = 0;
        FC_TRY(fc_cuda_status(m, m->pointer_is_device(ptrs[i], &is_dev)));
        if (is_dev) { ++n_dev; if (first_dev < 0) first_dev = i; }
        else { ++n_host; if (first_host < 0) first_host = i; }
    }
    /* The CPU backend reading device memory would crash the caller's process. */
    FC_RETURN_IF(requested == FLASHC_BACKEND_CPU && n_dev > 0, FLASHC_ERR_DEVICE_MISMATCH,
                 "backend CPU needs host memory, but %s is a device pointer", names[first_dev]);
    if (requested == FLASHC_BACKEND_CPU) {
        *backend = FLASHC_BACKEND_CPU;
        return FLASHC_OK;
    }
    if (requested == FLASHC_BACKEND_CUDA) {
        FC_RETURN_IF(n_host > 0, FLASHC_ERR_DEVICE_MISMATCH,
                     "backend CUDA needs device memory, but %s is a host pointer", names[first_host]);
        *backend = FLASHC_BACKEND_CUDA;
        return FLASHC_OK;
    }
    FC_RETURN_IF(n_dev > 0 && n_host > 0, FLASHC_ERR_DEVICE_MISMATCH,
                 "host and device pointers mixed in one call (%s is device memory, %s host memory)",
                 names[first_dev], names[first_host]);
    *backend = n_dev > 0 ? FLASHC_BACKEND_CUDA : FLASHC_BACKEND_CPU;
    return FLASHC_OK;
}

/* ----------------------------------------------------- device helpers */
#define FC_WITH_CUDA(m)                                          \
    fc_clear_error();                                            \
    const fc_cuda_module *m = fc_cuda();                         \
    if (!m) return FLASHC_ERR_BACKEND_UNAVAILABLE

FLASHC_API flashc_status flashc_cuda_device_count(int *count) {
    FC_RETURN_IF(!count, FLASHC_ERR_NULL_POINTER, "count is NULL");
    *count = 0;
    FC_WITH_CUDA(m);
    return fc_cuda_status(m, m->device_count(count));
}

FLASHC_API flashc_status flashc_cuda_device_name(int device, char *buf, size_t len) {
    FC_RETURN_IF(!buf || len == 0, FLASHC_ERR_NULL_POINTER, "buf is NULL or len is 0");
    buf[0] = '\0';
    FC_WITH_CUDA(m);
    return fc_cuda_status(m, m->device_name(device, buf, len));
}

FLASHC_API flashc_status flashc_cuda_set_device(int device) {
    FC_WITH_CUDA(m);
    return fc_cuda_status(m, m->set_device(device));
}

FLASHC_API flashc_status flashc_cuda_malloc(void **ptr, size_t bytes) {
    FC_RETURN_IF(!ptr, FLASHC_ERR_NULL_POINTER, "ptr is NULL");
    *ptr = NULL;
    FC_WITH_CUDA(m);
    return fc_cuda_status(m, m->malloc_(ptr, bytes));
}

FLASHC_API flashc_status flashc_cuda_free(void *ptr) {
    if (!ptr) return FLASHC_OK;
    FC_WITH_CUDA(m);
    return fc_cuda_status(m, m->free_(ptr));
}

FLASHC_API flashc_status flashc_cuda_memcpy(void *dst, const void *src, size_t bytes, int kind) {
    FC_RETURN_IF(kind < FLASHC_MEMCPY_HOST_TO_DEVICE || kind > FLASHC_MEMCPY_DEVICE_TO_DEVICE,
                 FLASHC_ERR_INVALID_ARGUMENT, "kind=%d is not a flashc_memcpy_kind", kind);
    if (bytes == 0) return FLASHC_OK;
    FC_RETURN_IF(!dst || !src, FLASHC_ERR_NULL_POINTER, "%s is NULL", !dst ? "dst" : "src");
    FC_WITH_CUDA(m);
    return fc_cuda_status(m, m->memcpy_(dst, src, bytes, kind));
}

FLASHC_API flashc_status flashc_cuda_synchronize(void) {
    FC_WITH_CUDA(m);
    return fc_cuda_status(m, m->synchronize());
}

FLASHC_API flashc_status flashc_cuda_stream_wait(void *stream, void *producer) {
    FC_WITH_CUDA(m);
    return fc_cuda_status(m, m->stream_wait(stream, producer));
}

FLASHC_API flashc_status flashc_pointer_is_device(const void *ptr, int *is_device) {
    FC_RETURN_IF(!is_device, FLASHC_ERR_NULL_POINTER, "is_device is NULL");
    *is_device = 0;
    fc_clear_error();
    const fc_cuda_module *m = fc_cuda();
    if (!m || !ptr) {
        fc_clear_error();
        return FLASHC_OK;
    }
    return fc_cuda_status(m, m->pointer_is_device(ptr, is_device));
}
