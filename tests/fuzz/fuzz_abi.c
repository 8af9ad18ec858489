/*
 * fuzz_abi.c — a deterministic random driver of the flashc C ABI, with an
 * oracle written from include/flashc.h alone (not from the sources).
 *
 * Each case is a function of one 64-bit seed: random descriptors for one of
 * the four ops (attention forward, attention forward + backward, weighted
 * sum, weighted sum backward): dtypes, ndim, shapes (empty ones included),
 * strides (permuted axes, padding, flipped and, on inputs, zero strides;
 * wild strides on empty tensors), NULL data where flashc.h allows it,
 * params (scale, causal, windows up to INT64_MAX, sink tokens, sink logits
 * as a tensor or the 0.1 pointer, softcap, ALiBi [Hq] / [B, Hq]), k and v
 * sharing memory, backends (AUTO, CPU, CUDA when unavailable). Every tensor
 * lives in a heap buffer of exactly its extent, so that the sanitizer build
 * catches any access outside it. Then, with probability 1/2, exactly one
 * mutation makes the call invalid (NULL descriptor or data, ndim, dtype,
 * extents, Hq % Hkv, D, strides that alias or overflow, params values and
 * struct_size, both sink forms, a non-finite ALiBi slope, …).
 *
 * Checks: the call returns (never crashes; the sanitizers turn bad accesses
 * and UB into crashes); an invalid call never returns FLASHC_OK and returns
 * the status flashc.h names for it; every non-OK status comes with a
 * non-empty flashc_last_error() and OK with an empty one; a valid call
 * returns OK and its outputs match a float64 reference within a tolerance
 * of the dtype (F64 1e-9, F32 2e-4, F16 1e-2, BF16 4e-2, relative to the
 * largest reference value of the output).
 *
 * CUDA replay (--cuda, for the GPU machine): after the CPU call and its
 * checks, every call of the four ops is made again on device twins of its
 * buffers: each host buffer gets a device buffer of exactly its size (the
 * data pointer at the same offset inside it, so negative, zero and permuted
 * strides reach the same extent), inputs copied, outputs filled with 0xFF
 * bytes (NaN in every float dtype); backend CUDA (AUTO where the case had
 * AUTO: device pointers must resolve to CUDA). A valid call must return
 * FLASHC_OK: flashc.h names no option of these four calls that the CUDA
 * backend lacks (ALiBi slopes are not inspected there: the non-finite slope
 * mutation is not replayed). Its outputs, copied back, must pass the same
 * float64 oracle (a documented CUDA-only allowance: with a softcap, F16/BF16
 * logits may differ by |x|·2^-10.9, tanh.approx) and match the CPU's: NaN
 * poison in exactly the same elements (nothing written outside the tensor,
 * nothing left unwritten) and values within the sum of both oracle checks'
 * allowed errors. An invalid call must return the CPU's status (validation
 * is shared) and leave every output untouched. In the forward + backward
 * op both calls are replayed (the forward then also checked on the CPU);
 * the backward reads the CPU's o and lse. Device memory comes from libcudart
 * (dlopen: libcudart.so, .so.13, .so.12, /usr/local/cuda/lib64), else from
 * flashc's own flashc_cuda_* helpers. Without a CUDA backend it prints a
 * "skipped" line and exits 0. A CUDA error (a faulting kernel) stops the run.
 *
 * Usage: fuzz_abi [--seeds FILE] [--cases N] [--start S] [--seed X] [--cuda] [-v]
 *   --seeds FILE  run every seed listed in FILE first (one per line, '#'
 *                 comments): the kept corpus (tests/fuzz/seeds.txt)
 *   --cases N     then N new cases, seeds S, S+1, … (default N = 1000, S = 1;
 *                 FLASHC_FUZZ_CASES in the environment overrides N)
 *   --seed X      run the one case X (reproduce a failure) and print it
 *   --cuda        replay every case on the CUDA backend (above)
 * Exit status: 0 when every case passed; prints each failing seed.
 */
#include "flashc.h"

#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ rng */
static uint64_t g_state;
static uint64_t rnd(void) { /* splitmix64 */
    uint64_t z = (g_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static int64_t rint_in(int64_t lo, int64_t hi) { return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1)); }
static double runif(double lo, double hi) { return lo + (hi - lo) * ((double)(rnd() >> 11) * 0x1.0p-53); }
static int coin(double p) { return runif(0, 1) < p; }

static int g_verbose = 0, g_fail = 0;
static uint64_t g_seed;
#define FAIL(...)                                                        \
    do {                                                                 \
        fprintf(stderr, "fuzz_abi: seed %llu: ", (unsigned long long)g_seed); \
        fprintf(stderr, __VA_ARGS__);                                    \
        fprintf(stderr, "\n");                                           \
        g_fail = 1;                                                      \
    } while (0)

/* ------------------------------------------------------------ dtypes */
static size_t esz(int dt) { return dt == FLASHC_F64 ? 8 : dt == FLASHC_F32 ? 4 : 2; }
static double f16_to_d(uint16_t h) {
    _Float16 f;
    memcpy(&f, &h, 2);
    return (double)f;
}
static uint16_t d_to_f16(double x) {
    _Float16 f = (_Float16)x;
    uint16_t h;
    memcpy(&h, &f, 2);
    return h;
}
static double bf16_to_d(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint16_t d_to_bf16(double x) { /* round to nearest even; NaN stays NaN */
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static double ld(int dt, const void *p, int64_t off) {
    switch (dt) {
    case FLASHC_F64: return ((const double *)p)[off];
    case FLASHC_F32: return ((const float *)p)[off];
    case FLASHC_F16: return f16_to_d(((const uint16_t *)p)[off]);
    default: return bf16_to_d(((const uint16_t *)p)[off]);
    }
}
static void st(int dt, void *p, int64_t off, double x) {
    switch (dt) {
    case FLASHC_F64: ((double *)p)[off] = x; break;
    case FLASHC_F32: ((float *)p)[off] = (float)x; break;
    case FLASHC_F16: ((uint16_t *)p)[off] = d_to_f16(x); break;
    default: ((uint16_t *)p)[off] = d_to_bf16(x); break;
    }
}

/* ------------------------------------------------------------ tensors */
/* A tensor and the exact-size heap buffer behind it. */
typedef struct ft {
    flashc_tensor t;
    void *base;
    int64_t nelem; /* elements of the buffer */
} ft;

/* The case's host buffers (every ft_make; during a CUDA replay also the
 * attn struct's bare sink arrays): freed after the case, and where the
 * replay finds the device twin of a host pointer. */
typedef struct region {
    void *h;      /* host buffer; NULL for an empty tensor's NULL data */
    size_t bytes; /* its size */
    int dt;       /* element dtype */
    int64_t n;    /* elements (0: an empty tensor's 1-byte stand-in) */
    int owned;    /* a heap buffer of the case, freed after it */
    void *d;      /* the device twin, during a replay */
} region;
#define MAXT 24
static region g_reg[MAXT];
static int g_nreg;
static void reg_add(void *h, size_t bytes, int dt, int64_t n, int owned) {
    g_reg[g_nreg++] = (region){h, bytes, dt, n, owned, NULL};
}

static int64_t numel(const flashc_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; ++i) n *= t->shape[i];
    return n;
}

/* Random layout for `shape`: a random memory order of the axes, padding,
 * flips and (inputs only) zero strides; the buffer holds exactly the
 * elements between the lowest and the highest offset. Inputs get values in
 * [-amp, amp] (rounded to the dtype), outputs NaN. An empty tensor gets
 * wild strides and NULL data half of the time. */
static void ft_make(ft *f, int dt, int ndim, const int64_t *shape, int is_output, double amp) {
    memset(f, 0, sizeof *f);
    f->t.dtype = dt;
    f->t.ndim = ndim;
    int perm[FLASHC_MAX_DIMS];
    for (int i = 0; i < ndim; ++i) {
        f->t.shape[i] = shape[i];
        perm[i] = i;
    }
    if (coin(0.3))
        for (int i = ndim - 1; i > 0; --i) {
            const int j = (int)rint_in(0, i), x = perm[i];
            perm[i] = perm[j];
            perm[j] = x;
        }
    int64_t acc = 1;
    for (int k = ndim - 1; k >= 0; --k) { /* perm[ndim-1] is the innermost axis */
        const int ax = perm[k];
        if (!is_output && shape[ax] > 1 && coin(0.07)) {
            f->t.strides[ax] = 0;
            continue;
        }
        const int64_t s = acc + (coin(0.15) ? rint_in(1, 3) : 0);
        f->t.strides[ax] = coin(0.15) ? -s : s;
        acc = s * (shape[ax] > 0 ? shape[ax] : 1);
    }
    if (numel(&f->t) == 0) {
        for (int i = 0; i < ndim; ++i)
            if (coin(0.3)) f->t.strides[i] = coin(0.5) ? INT64_MAX - rint_in(0, 3) : -INT64_MAX + rint_in(0, 3);
        f->base = coin(0.5) ? NULL : malloc(1);
        f->t.data = f->base;
        reg_add(f->base, 1, dt, 0, 1);
        return;
    }
    int64_t lo = 0, hi = 0;
    for (int i = 0; i < ndim; ++i) {
        const int64_t r = (shape[i] - 1) * f->t.strides[i];
        if (r < 0) lo += r;
        else hi += r;
    }
    f->nelem = hi - lo + 1;
    f->base = malloc((size_t)f->nelem * esz(dt));
    for (int64_t e = 0; e < f->nelem; ++e) st(dt, f->base, e, is_output ? NAN : amp * runif(-1, 1));
    f->t.data = (char *)f->base + (-lo) * (int64_t)esz(dt);
    reg_add(f->base, (size_t)f->nelem * esz(dt), dt, f->nelem, 1);
}
static void ft_free_all(void) {
    for (int i = 0; i < g_nreg; ++i)
        if (g_reg[i].owned) free(g_reg[i].h);
    g_nreg = 0;
}
static int64_t off_of(const flashc_tensor *t, const int64_t *idx) {
    int64_t o = 0;
    for (int i = 0; i < t->ndim; ++i) o += idx[i] * t->strides[i];
    return o;
}
static double get(const flashc_tensor *t, const int64_t *idx) { return ld(t->dtype, t->data, off_of(t, idx)); }
static double get4(const flashc_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d) {
    const int64_t idx[4] = {a, b, c, d};
    return get(t, idx);
}

/* Error accumulator: max |ours − ref| over the largest |ref| of one output. */
typedef struct cmp {
    double err, mag;
    int bad_special; /* NaN where the reference is finite, or ±inf mismatched */
} cmp;
static void cmp_add(cmp *c, double ours, double ref) {
    if (g_verbose > 1 && !(ours == ref || fabs(ours - ref) <= 1e-6 * fabs(ref))) printf("    ours %.9g ref %.9g\n", ours, ref);
    if (isinf(ref) || isinf(ours)) {
        if (ours != ref) c->bad_special = 1;
        return;
    }
    if (isnan(ours) || isnan(ref)) {
        c->bad_special = 1;
        return;
    }
    c->err = fmax(c->err, fabs(ours - ref));
    c->mag = fmax(c->mag, fabs(ref));
}
/* The same with the magnitude of the terms summed into ref (for sums that cancel). */
static void cmp_add_m(cmp *c, double ours, double ref, double mag) {
    cmp_add(c, ours, ref);
    c->mag = fmax(c->mag, mag);
}
static double tol_of(int dt) {
    return dt == FLASHC_F64 ? 1e-9 : dt == FLASHC_F32 ? 2e-4 : dt == FLASHC_F16 ? 1e-2 : 4e-2;
}
/* The allowed absolute error of each named check of the case, summed over
 * its runs (the CPU's, then the CUDA replay's): by the triangle inequality
 * it bounds |CPU − CUDA| (replay_outputs). */
typedef struct allowed {
    const char *what;
    double allow;
} allowed;
static allowed g_allow[16];
static int g_nallow;
static int g_on_cuda; /* the oracle is judging the CUDA replay's outputs */
static double allow_of(const char *what) {
    for (int i = 0; i < g_nallow; ++i)
        if (!strcmp(g_allow[i].what, what)) return g_allow[i].allow;
    return 0.0;
}
/* CUDA replay of F16/BF16 with a softcap: the tensor-core kernels take tanh
 * from tanh.approx (flashc.h, "Precision"), so a softcapped logit x may be
 * off by |x|·2^-10.9: g_dlogit is that bound over the case's logits (0
 * otherwise), g_xcap the largest |x| after the softcap the oracle met. */
static double g_dlogit, g_xcap;
/* The largest scale·Σ_d |q_d·k_d| the oracle met in the case: a kernel's dot
 * product of D terms in its working precision u (fp32 for F32/F16/BF16, fp64
 * for F64) is off by up to ~D·u times it (same-signed terms: q or k constant
 * along D makes every term of a row the same), and the library's L by as
 * much, so P by e^±2·D·u·g_dotmag — what a same-precision naive
 * implementation also gets (found by seed 9228185: F32, D 256, logits ±16). */
static double g_dotmag;
static double round_dlogit(int dt, int64_t D) {
    return 2.0 * (double)D * (dt == FLASHC_F64 ? 0x1p-53 : 0x1p-24) * g_dotmag;
}

/* Fails unless err ≤ tol·max(mag, 1e-3) + slack (slack: g_dlogit's share). */
static void cmp_check_slack(const cmp *c, int dt, double slack, const char *what) {
    const double allow = tol_of(dt) * (c->mag > 1e-3 ? c->mag : 1e-3) + slack;
    int i = 0;
    while (i < g_nallow && strcmp(g_allow[i].what, what)) ++i;
    if (i == g_nallow && g_nallow < 16) g_allow[g_nallow++] = (allowed){what, 0.0};
    if (i < g_nallow) g_allow[i].allow += allow;
    if (c->bad_special || !(c->err <= allow))
        FAIL("%s%s: error %.3g relative to %.3g (tolerance %.1g%s)%s", g_on_cuda ? "cuda " : "", what, c->err,
             c->mag, tol_of(dt), slack > 0 ? " + tanh.approx allowance" : "",
             c->bad_special ? ", NaN/inf mismatch" : "");
}
static void cmp_check(const cmp *c, int dt, const char *what) { cmp_check_slack(c, dt, 0.0, what); }

/* ------------------------------------------------------------ status oracle */
#define ANY_ERR (-1)
static void check_status(flashc_status s, int want, const char *op) {
    const char *msg = flashc_last_error();
    if (s != FLASHC_OK && (!msg || !msg[0])) FAIL("%s: status %s with an empty message", op, flashc_status_string(s));
    if (s == FLASHC_OK && msg && msg[0]) FAIL("%s: OK with a message '%s'", op, msg);
    if (want == FLASHC_OK && s != FLASHC_OK)
        FAIL("%s: valid call refused: %s: %s", op, flashc_status_string(s), msg);
    else if (want != FLASHC_OK && s == FLASHC_OK)
        FAIL("%s: invalid call (want %s) returned FLASHC_OK", op, want == ANY_ERR ? "an error" : flashc_status_string(want));
    else if (want > 0 && s != want)
        FAIL("%s: status %s, want %s (%s)", op, flashc_status_string(s), flashc_status_string(want), msg);
    if (g_verbose) printf("  %s -> %s %s\n", op, flashc_status_string(s), msg);
}

/* ------------------------------------------------------------ CUDA replay (--cuda) */
/* Device memory of the replay: libcudart through dlopen (the library under
 * test does not move its own test data), else flashc's helpers. Memcpy
 * kinds: 1 host to device, 2 device to host (cudaMemcpyKind's values and
 * flashc_memcpy_kind's agree). Every function returns 0 on success. */
typedef struct cuda_rt {
    const char *from;
    int (*malloc_)(void **, size_t);
    int (*free_)(void *);
    int (*memcpy_)(void *, const void *, size_t, int);
    int (*memset_)(void *, int, size_t);
    int (*sync)(void);
    const char *(*error)(int);
} cuda_rt;
static cuda_rt rt;
static int g_cuda;                          /* --cuda */
static long long g_cuda_valid, g_cuda_invalid; /* calls replayed */

static int fc_malloc(void **p, size_t n) { return flashc_cuda_malloc(p, n); }
static int fc_free(void *p) { return flashc_cuda_free(p); }
static int fc_memcpy(void *d, const void *s, size_t n, int kind) { return flashc_cuda_memcpy(d, s, n, kind); }
static int fc_memset(void *d, int v, size_t n) {
    void *h = malloc(n);
    memset(h, v, n);
    const int s = flashc_cuda_memcpy(d, h, n, FLASHC_MEMCPY_HOST_TO_DEVICE);
    free(h);
    return s;
}
static int fc_sync(void) { return flashc_cuda_synchronize(); }
static const char *fc_error(int s) { return s ? flashc_last_error() : ""; }

static void rt_load(void) {
    static const char *const names[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                                        "/usr/local/cuda/lib64/libcudart.so"};
    for (size_t i = 0; i < sizeof names / sizeof *names; ++i) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!h) continue;
        const cuda_rt r = {names[i], (int (*)(void **, size_t))dlsym(h, "cudaMalloc"),
                           (int (*)(void *))dlsym(h, "cudaFree"),
                           (int (*)(void *, const void *, size_t, int))dlsym(h, "cudaMemcpy"),
                           (int (*)(void *, int, size_t))dlsym(h, "cudaMemset"),
                           (int (*)(void))dlsym(h, "cudaDeviceSynchronize"),
                           (const char *(*)(int))dlsym(h, "cudaGetErrorString")};
        if (r.malloc_ && r.free_ && r.memcpy_ && r.memset_ && r.sync && r.error) {
            rt = r;
            return;
        }
        dlclose(h);
    }
    rt = (cuda_rt){"flashc_cuda_* (no libcudart found)", fc_malloc, fc_free, fc_memcpy, fc_memset, fc_sync, fc_error};
}

/* A CUDA error in the replay's own calls (a faulting kernel surfaces at the
 * synchronisation): the context may be lost, so the run stops here. */
static void rt_check(int e, const char *what) {
    if (e == 0) return;
    const char *msg = rt.error(e);
    fprintf(stderr, "fuzz_abi: seed %llu: %s failed: %s\n", (unsigned long long)g_seed, what, msg);
    printf("fuzz_abi: stopped at seed %llu: CUDA error in %s: %s\n", (unsigned long long)g_seed, what, msg);
    exit(1);
}

/* The device address of host pointer p: its buffer's twin at the same offset. */
static void *dev_of(const void *p) {
    if (!p) return NULL;
    for (int i = 0; i < g_nreg; ++i) {
        const uintptr_t h = (uintptr_t)g_reg[i].h, x = (uintptr_t)p;
        if (g_reg[i].h && x >= h && x < h + g_reg[i].bytes) return (char *)g_reg[i].d + (x - h);
    }
    FAIL("replay: a pointer outside the case's buffers");
    return NULL;
}
/* The device twin of a descriptor, in *slot; NULL stays NULL. */
static const flashc_tensor *twin(flashc_tensor *slot, const flashc_tensor *t) {
    if (!t) return NULL;
    *slot = *t;
    slot->data = dev_of(t->data);
    return slot;
}
static region *region_at(const void *h) {
    for (int i = 0; h && i < g_nreg; ++i)
        if (g_reg[i].h == h) return &g_reg[i];
    return NULL;
}

/* Compares an output the CPU wrote (cpu) with the CUDA replay's (gpu), n
 * elements of dt: NaN (the poison) in the same elements, the same
 * infinities, other values within allow. */
static void compare_output(const char *what, int dt, int64_t n, const void *cpu, const void *gpu, double allow) {
    double worst = 0;
    int64_t at = -1;
    for (int64_t e = 0; e < n; ++e) {
        const double c = ld(dt, cpu, e), g = ld(dt, gpu, e);
        if (!isnan(c) != !isnan(g)) {
            FAIL("cuda %s: element %lld of the buffer is %g on the CPU, %g on CUDA (%s)", what, (long long)e, c, g,
                 isnan(c) ? "written outside the tensor" : "left unwritten");
            return;
        }
        if (isnan(c)) continue;
        if (isinf(c) || isinf(g)) {
            if (c != g) {
                FAIL("cuda %s: element %lld of the buffer is %g on the CPU, %g on CUDA", what, (long long)e, c, g);
                return;
            }
            continue;
        }
        if (fabs(c - g) > worst) worst = fabs(c - g), at = e;
    }
    if (!(worst <= allow))
        FAIL("cuda %s: CPU and CUDA differ by %.3g at element %lld (allowed: the two oracle bounds, %.3g)", what,
             worst, (long long)at, allow);
}

/* Replays one call the CPU made (status s_cpu; valid: the case's call is
 * valid) on device twins of every buffer of the case: outs[0..n) are the
 * host buffers of its outputs (NULL: none), checks[i] the oracle check that
 * judges outs[i]. call(ctx) makes the call on the twins, oracle(ctx) checks
 * the outputs in the host buffers. */
static void replay(const char *op, int valid, flashc_status s_cpu, void *const *outs, const char *const *checks,
                   int n, flashc_status (*call)(const void *), void (*oracle)(const void *), const void *ctx) {
    for (int i = 0; i < g_nreg; ++i) { /* the twins: inputs copied, outputs 0xFF (NaN) */
        region *r = &g_reg[i];
        int out = 0;
        for (int k = 0; k < n; ++k) out |= outs[k] && outs[k] == r->h;
        r->d = NULL;
        if (!r->h) continue;
        rt_check(rt.malloc_(&r->d, r->bytes), "cudaMalloc");
        rt_check(out ? rt.memset_(r->d, 0xFF, r->bytes) : rt.memcpy_(r->d, r->h, r->bytes, 1),
                 out ? "cudaMemset" : "cudaMemcpy to the device");
    }
    const flashc_status s = call(ctx);
    check_status(s, valid ? FLASHC_OK : (int)s_cpu, op);
    rt_check(rt.sync(), "cudaDeviceSynchronize after the call");
    void *cpu[8] = {0};
    for (int k = 0; k < n; ++k) {
        region *r = region_at(outs[k]);
        if (!r) continue;
        cpu[k] = malloc(r->bytes); /* the CPU's outputs aside; the CUDA ones into the host buffers */
        memcpy(cpu[k], r->h, r->bytes);
        rt_check(rt.memcpy_(r->h, r->d, r->bytes, 2), "cudaMemcpy to the host");
        if (!valid)
            for (size_t b = 0; b < r->bytes; ++b)
                if (((const unsigned char *)r->h)[b] != 0xFF) {
                    FAIL("%s: the refused call wrote into an output (%s)", op, checks[k]);
                    break;
                }
    }
    if (valid && s == FLASHC_OK) {
        g_on_cuda = 1;
        oracle(ctx);
        g_on_cuda = 0;
        for (int k = 0; k < n; ++k) {
            region *r = region_at(outs[k]);
            if (r) compare_output(checks[k], r->dt, r->n, cpu[k], r->h, allow_of(checks[k]));
        }
    }
    for (int k = 0; k < n; ++k) {
        region *r = region_at(outs[k]);
        if (!r) continue;
        memcpy(r->h, cpu[k], r->bytes); /* the CPU's outputs back (inputs of what follows) */
        free(cpu[k]);
    }
    for (int i = 0; i < g_nreg; ++i)
        if (g_reg[i].d) {
            rt_check(rt.free_(g_reg[i].d), "cudaFree");
            g_reg[i].d = NULL;
        }
    ++*(valid ? &g_cuda_valid : &g_cuda_invalid);
}

/* ------------------------------------------------------------ attention */
typedef struct attn {
    int dt, ldt;
    int64_t B, Sq, Sk, Hq, Hkv, D;
    ft q, k, v, o, lse, dout, dq, dk, dv, sinks, dsinks, alibi;
    flashc_attn_params p;
    int legacy_sinks, has_sinks, has_alibi, has_lse;
    float legacy_f[64];
    double legacy_d[64], dsink_arg_d[64];
    float dsink_arg_f[64];
    double scale;
    /* the call's arguments, as the case and its mutation left them */
    int bwd, cpu_only; /* cpu_only: a refusal only the CPU backend makes */
    const flashc_tensor *tq, *tk, *tlse, *tdq;
    void *dsink_arg;
} attn;

static int64_t pick_window(int64_t S) {
    const int r = (int)rint_in(0, 9);
    if (r < 5) return -1;
    if (r < 8) return rint_in(0, S + 1);
    return r == 8 ? INT64_MAX - rint_in(0, 2) : ((int64_t)1 << 62) + rint_in(0, 5);
}

static void attn_make(attn *a) {
    memset(a, 0, sizeof *a);
    static const int dts[4] = {FLASHC_F32, FLASHC_F16, FLASHC_BF16, FLASHC_F64};
    a->dt = dts[rint_in(0, 3)];
    a->ldt = a->dt == FLASHC_F64 ? FLASHC_F64 : FLASHC_F32;
    const int big = coin(0.12); /* shapes that cross the SIMD tiles */
    a->B = rint_in(1, 2);
    a->Sq = coin(0.05) ? 0 : big ? rint_in(1, 80) : rint_in(1, 9);
    a->Sk = coin(0.05) ? 0 : big ? rint_in(1, 100) : rint_in(1, 12);
    a->Hkv = rint_in(1, 3);
    a->Hq = a->Hkv * rint_in(1, 3);
    static const int64_t bigD[] = {32, 64, 65, 96, 128, 256};
    a->D = coin(0.15) ? bigD[rint_in(0, 5)] : rint_in(1, 17);
    if (big && a->D > 64) a->D = 64;
    const double amp = coin(0.1) ? 4.0 : 1.0;
    const int64_t qs[4] = {a->B, a->Sq, a->Hq, a->D}, ks[4] = {a->B, a->Sk, a->Hkv, a->D};
    const int64_t ls[3] = {a->B, a->Hq, a->Sq};
    ft_make(&a->q, a->dt, 4, qs, 0, amp);
    ft_make(&a->k, a->dt, 4, ks, 0, amp);
    if (coin(0.15)) a->v = a->k; /* k and v share memory: inputs may alias */
    else ft_make(&a->v, a->dt, 4, ks, 0, 1.0);
    ft_make(&a->o, a->dt, 4, qs, 1, 0);
    ft_make(&a->lse, a->ldt, 3, ls, 1, 0);
    a->has_lse = coin(0.85);

    flashc_attn_params *p = &a->p;
    *p = flashc_attn_params_default();
    const int r = (int)rint_in(0, 19);
    p->backend = r < 9 ? FLASHC_BACKEND_AUTO : r < 19 ? FLASHC_BACKEND_CPU : FLASHC_BACKEND_CUDA;
    p->softmax_scale = coin(0.5) ? 0.0 : (coin(0.5) ? 1 : -1) * runif(0.01, 2.0);
    if (coin(0.02)) p->softmax_scale = FLASHC_SOFTMAX_SCALE_MAX * 1e-6;
    a->scale = p->softmax_scale != 0 ? p->softmax_scale : 1.0 / sqrt((double)a->D);
    p->causal = coin(0.3);
    p->window_left = pick_window(a->Sk);
    p->window_right = p->causal ? (coin(0.5) ? -1 : 0) : pick_window(a->Sk);
    p->num_sink_tokens = coin(0.7) ? 0 : coin(0.9) ? rint_in(1, 3) : INT64_MAX - rint_in(0, 2);
    p->deterministic = coin(0.9);
    p->softcap = coin(0.7) ? 0.0 : coin(0.95) ? runif(0.5, 30) : 1e30;
    if (coin(0.3)) {
        a->has_alibi = 1;
        const int64_t as2[2] = {a->B, a->Hq}, as1[1] = {a->Hq};
        if (coin(0.5)) ft_make(&a->alibi, a->ldt, 2, as2, 0, 0.5);
        else ft_make(&a->alibi, a->ldt, 1, as1, 0, 0.5);
        p->alibi_slopes = &a->alibi.t;
    }
    if (coin(0.4)) {
        a->has_sinks = 1;
        const int64_t hs[1] = {a->Hq};
        if (coin(0.25) && a->Hq <= 64) {
            a->legacy_sinks = 1;
            for (int h = 0; h < a->Hq; ++h) a->legacy_f[h] = (float)(a->legacy_d[h] = runif(-2, 2));
            p->sink_logits = a->dt == FLASHC_F64 ? (const void *)a->legacy_d : (const void *)a->legacy_f;
        } else {
            ft_make(&a->sinks, a->ldt, 1, hs, 0, 2.0);
            p->sinks = &a->sinks.t;
        }
    }
}

/* Visibility from flashc.h ("Visibility"), in 128-bit arithmetic. */
static int visible(const attn *a, int64_t i, int64_t j) {
    const __int128 diag = (__int128)i + a->Sk - a->Sq;
    const int64_t L = a->p.window_left, R = a->p.causal ? 0 : a->p.window_right;
    const int right_ok = R < 0 || (__int128)j <= diag + R;
    const int left_ok = L < 0 || (__int128)j >= diag - L;
    if (right_ok && left_ok) return 1;
    return j < a->p.num_sink_tokens && right_ok;
}
static double sink_of(const attn *a, int64_t h) {
    if (a->legacy_sinks) return a->dt == FLASHC_F64 ? a->legacy_d[h] : (double)a->legacy_f[h];
    const int64_t idx[1] = {h};
    return get(&a->sinks.t, idx);
}
static double slope_of(const attn *a, int64_t b, int64_t h) {
    if (!a->has_alibi) return 0.0;
    if (a->alibi.t.ndim == 2) {
        const int64_t idx[2] = {b, h};
        return get(&a->alibi.t, idx);
    }
    const int64_t idx[1] = {h};
    return get(&a->alibi.t, idx);
}
/* x_ij and t = tanh(scale·<q,k>/c) (0 without a softcap). */
static double logit(const attn *a, int64_t b, int64_t h, int64_t i, int64_t j, double *t) {
    const int64_t hk = h / (a->Hq / a->Hkv);
    double dot = 0, mag = 0;
    for (int64_t d = 0; d < a->D; ++d) {
        const double t = get4(&a->q.t, b, i, h, d) * get4(&a->k.t, b, j, hk, d);
        dot += t;
        mag += fabs(t);
    }
    g_dotmag = fmax(g_dotmag, fabs(a->scale) * mag);
    double x = a->scale * dot;
    *t = 0;
    if (a->p.softcap > 0) {
        *t = tanh(x / a->p.softcap);
        x = a->p.softcap * *t;
        g_xcap = fmax(g_xcap, fabs(x));
    }
    return x - slope_of(a, b, h) * fabs((double)(i + a->Sk - a->Sq - j));
}

static void attn_check_fwd(const attn *a) {
    cmp co = {0}, cl = {0};
    double vmax = 0; /* the largest |v| a row averaged (g_dlogit's share of o's error) */
    double *x = malloc(sizeof(double) * (size_t)(a->Sk > 0 ? a->Sk : 1));
    for (int64_t b = 0; b < a->B; ++b)
        for (int64_t h = 0; h < a->Hq; ++h)
            for (int64_t i = 0; i < a->Sq; ++i) {
                const int64_t hk = h / (a->Hq / a->Hkv);
                double m = -INFINITY, t;
                int any = 0;
                for (int64_t j = 0; j < a->Sk; ++j)
                    if (visible(a, i, j)) {
                        x[j] = logit(a, b, h, i, j, &t);
                        m = fmax(m, x[j]);
                        any = 1;
                    }
                const double s = a->has_sinks ? sink_of(a, h) : -INFINITY;
                double L, den = 0;
                if (!any) {
                    L = s;
                } else {
                    const double mm = fmax(m, s);
                    for (int64_t j = 0; j < a->Sk; ++j)
                        if (visible(a, i, j)) den += exp(x[j] - mm);
                    den += a->has_sinks ? exp(s - mm) : 0.0;
                    L = mm + log(den);
                    for (int64_t j = 0; j < a->Sk; ++j) x[j] = visible(a, i, j) ? exp(x[j] - mm) : 0.0;
                }
                for (int64_t d = 0; d < a->D; ++d) {
                    double acc = 0, mag = 0; /* mag = Σ p_j·|v_j|: o's scale when the sum cancels */
                    if (any)
                        for (int64_t j = 0; j < a->Sk; ++j)
                            if (x[j] != 0.0) {
                                const double vj = get4(&a->v.t, b, j, hk, d);
                                acc += x[j] * vj;
                                mag += x[j] * fabs(vj);
                                vmax = fmax(vmax, fabs(vj));
                            }
                    cmp_add_m(&co, get4(&a->o.t, b, i, h, d), any ? acc / den : 0.0, any ? mag / den : 0.0);
                }
                if (a->has_lse) {
                    const int64_t idx[3] = {b, h, i};
                    cmp_add(&cl, get(&a->lse.t, idx), L);
                }
            }
    free(x);
    /* Weights off by e^±δ each (δ = g_dlogit + the dot products' rounding) move a convex
     * combination by ≤ (e^2δ − 1)·max|v|. */
    const double dl = g_dlogit + round_dlogit(a->dt, a->D);
    cmp_check_slack(&co, a->dt, expm1(2 * dl) * vmax, "attn_fwd o");
    cmp_check_slack(&cl, a->ldt == FLASHC_F64 ? FLASHC_F64 : FLASHC_F32, dl, "attn_fwd lse");
}

/* Backward reference from the library's own o and lse (flashc.h: the
 * backward recomputes P from them). */
static void attn_check_bwd(const attn *a) {
    const int64_t G = a->Hq / a->Hkv, nq = a->B * a->Sq * a->Hq * a->D, nk = a->B * a->Sk * a->Hkv * a->D;
    double *dq = calloc((size_t)(nq > 0 ? nq : 1), sizeof(double));
    double *dk = calloc((size_t)(nk > 0 ? nk : 1), sizeof(double));
    double *dv = calloc((size_t)(nk > 0 ? nk : 1), sizeof(double));
    double *ds = calloc((size_t)a->Hq, sizeof(double));
    double *dqa = calloc((size_t)(nq > 0 ? nq : 1), sizeof(double)); /* Σ |terms| of dq, dk */
    double *dka = calloc((size_t)(nk > 0 ? nk : 1), sizeof(double));
    double *dva = calloc((size_t)(nk > 0 ? nk : 1), sizeof(double)); /* Σ P·|dout| (g_dlogit's share of dv's error) */
#define IQ(b, i, h, d) ((((b) * a->Sq + (i)) * a->Hq + (h)) * a->D + (d))
#define IK(b, j, h, d) ((((b) * a->Sk + (j)) * a->Hkv + (h)) * a->D + (d))
    for (int64_t b = 0; b < a->B; ++b)
        for (int64_t h = 0; h < a->Hq; ++h)
            for (int64_t i = 0; i < a->Sq; ++i) {
                const int64_t hk = h / G, li[3] = {b, h, i};
                const double L = get(&a->lse.t, li);
                double delta = 0;
                int any = 0;
                for (int64_t j = 0; j < a->Sk && !any; ++j) any = visible(a, i, j);
                if (any)
                    for (int64_t d = 0; d < a->D; ++d) delta += get4(&a->dout.t, b, i, h, d) * get4(&a->o.t, b, i, h, d);
                if (a->has_sinks && L != -INFINITY) ds[h] += -exp(sink_of(a, h) - L) * delta;
                for (int64_t j = 0; j < a->Sk; ++j) {
                    if (!visible(a, i, j)) continue;
                    double t;
                    const double P = exp(logit(a, b, h, i, j, &t) - L);
                    double dp = 0;
                    for (int64_t d = 0; d < a->D; ++d) dp += get4(&a->dout.t, b, i, h, d) * get4(&a->v.t, b, j, hk, d);
                    const double fac = (a->p.softcap > 0 ? 1 - t * t : 1.0) * a->scale;
                    /* (With g_dlogit, the magnitude leaves out 1 − t²: tanh.approx's error in it is absolute.) */
                    const double dS = P * (dp - delta) * fac,
                                 dSa = fabs(P * (g_dlogit > 0 ? a->scale : fac)) * (fabs(dp) + fabs(delta));
                    for (int64_t d = 0; d < a->D; ++d) {
                        dqa[IQ(b, i, h, d)] += dSa * fabs(get4(&a->k.t, b, j, hk, d));
                        dka[IK(b, j, hk, d)] += dSa * fabs(get4(&a->q.t, b, i, h, d));
                        dva[IK(b, j, hk, d)] += P * fabs(get4(&a->dout.t, b, i, h, d));
                        dv[IK(b, j, hk, d)] += P * get4(&a->dout.t, b, i, h, d);
                        dq[IQ(b, i, h, d)] += dS * get4(&a->k.t, b, j, hk, d);
                        dk[IK(b, j, hk, d)] += dS * get4(&a->q.t, b, i, h, d);
                    }
                }
            }
    cmp cq = {0}, ck = {0}, cv = {0}, cs = {0};
    double dvamax = 0;
    for (int64_t b = 0; b < a->B; ++b)
        for (int64_t i = 0; i < a->Sq; ++i)
            for (int64_t h = 0; h < a->Hq; ++h)
                for (int64_t d = 0; d < a->D; ++d) cmp_add_m(&cq, get4(&a->dq.t, b, i, h, d), dq[IQ(b, i, h, d)], dqa[IQ(b, i, h, d)]);
    for (int64_t b = 0; b < a->B; ++b)
        for (int64_t j = 0; j < a->Sk; ++j)
            for (int64_t h = 0; h < a->Hkv; ++h)
                for (int64_t d = 0; d < a->D; ++d) {
                    cmp_add_m(&ck, get4(&a->dk.t, b, j, h, d), dk[IK(b, j, h, d)], dka[IK(b, j, h, d)]);
                    cmp_add(&cv, get4(&a->dv.t, b, j, h, d), dv[IK(b, j, h, d)]);
                    dvamax = fmax(dvamax, dva[IK(b, j, h, d)]);
                }
    if (a->has_sinks)
        for (int64_t h = 0; h < a->Hq; ++h) {
            double got;
            if (a->p.dsinks) {
                const int64_t idx[1] = {h};
                got = get(&a->dsinks.t, idx);
            } else {
                got = a->dt == FLASHC_F64 ? a->dsink_arg_d[h] : (double)a->dsink_arg_f[h];
            }
            cmp_add(&cs, got, ds[h]);
        }
#undef IQ
#undef IK
    /* dS = P(dP − Δ) cancels: dq and dk are judged against the sums of
     * the absolute values of their terms. */
    /* P off by a factor e^±δ (L is the CPU's), 1 − t² by ≤ 2^-9.9 absolute. */
    const double sp = expm1(g_dlogit + round_dlogit(a->dt, a->D)), sg = g_dlogit > 0 ? 2e-3 : 0.0;
    cmp_check_slack(&cq, a->dt, (sp + sg) * cq.mag, "attn_bwd dq");
    cmp_check_slack(&ck, a->dt, (sp + sg) * ck.mag, "attn_bwd dk");
    cmp_check_slack(&cv, a->dt, sp * dvamax, "attn_bwd dv");
    cmp_check(&cs, a->ldt, "attn_bwd dsinks");
    free(dq), free(dk), free(dv), free(ds), free(dqa), free(dka), free(dva);
}

/* The mutations: each makes an otherwise valid call invalid; returns the
 * status flashc.h names for it (ANY_ERR where more than one applies). */
static int attn_mutate(attn *a, int bwd, const flashc_tensor **tq, const flashc_tensor **tk,
                       const flashc_tensor **tlse, const flashc_tensor **tdq) {
    flashc_tensor *outs_f[] = {&a->o.t, &a->lse.t}, *outs_b[] = {&a->dq.t, &a->dk.t, &a->dv.t};
    flashc_tensor **outs = bwd ? outs_b : outs_f; /* (o and lse are inputs of the backward) */
    const int nouts = bwd ? 3 : 2;
    switch (rint_in(0, 24)) {
    case 0: *tq = NULL; return FLASHC_ERR_NULL_POINTER;
    case 1: if (numel(&a->q.t) == 0) break; a->q.t.data = NULL; return FLASHC_ERR_NULL_POINTER;
    case 2: a->k.t.ndim = coin(0.5) ? 3 : 5; return FLASHC_ERR_SHAPE;
    case 3: a->q.t.dtype = coin(0.5) ? FLASHC_I32 : -1; return FLASHC_ERR_DTYPE; /* I32: index tensors only */
    case 4: a->o.t.dtype = a->dt == FLASHC_F32 ? FLASHC_F64 : FLASHC_F32; return FLASHC_ERR_DTYPE;
    case 5: a->k.t.shape[1] = -1 - rint_in(0, 5); return FLASHC_ERR_SHAPE;
    case 6: a->v.t.shape[1] += 1; return ANY_ERR; /* (an empty v has wild strides, maybe NULL data) */
    case 7: a->o.t.shape[rint_in(0, 3)] += 1; return ANY_ERR;
    case 8: if (a->Hq == 1) break; a->k.t.shape[2] = a->Hq + 1; a->v.t.shape[2] = a->Hq + 1; return FLASHC_ERR_SHAPE;
    case 9: return (a->p.softmax_scale = coin(0.5) ? NAN : (coin(0.5) ? 1 : -1) * (FLASHC_SOFTMAX_SCALE_MAX * 2 + runif(0, 1e30))), FLASHC_ERR_INVALID_ARGUMENT;
    case 10: a->p.window_left = -2 - rint_in(0, 1000); return FLASHC_ERR_INVALID_ARGUMENT;
    case 11: a->p.causal = 1; a->p.window_right = rint_in(1, 5); return FLASHC_ERR_INVALID_ARGUMENT;
    case 12: a->p.causal = (int32_t)rint_in(2, 9); return FLASHC_ERR_INVALID_ARGUMENT;
    case 13: a->p.num_sink_tokens = -rint_in(1, 9); return FLASHC_ERR_INVALID_ARGUMENT;
    case 14: a->p.softcap = coin(0.5) ? -runif(0.1, 5) : INFINITY; return FLASHC_ERR_INVALID_ARGUMENT;
    case 15: {
        const uint32_t sz = (uint32_t)rint_in(0, 300);
        if (sz == sizeof(flashc_attn_params) || sz == FLASHC_ATTN_PARAMS_SIZE_V1) break;
        a->p.struct_size = sz;
        return FLASHC_ERR_PARAMS_SIZE;
    }
    case 16: { /* an output with a zero stride on an axis of extent > 1 */
        flashc_tensor *t = outs[rint_in(0, nouts - 1)];
        if (t == &a->lse.t && !a->has_lse) break;
        for (int i = 0; i < t->ndim; ++i) if (t->shape[i] > 1 && numel(t) > 0) { t->strides[i] = 0; return FLASHC_ERR_STRIDE; }
        break;
    }
    case 17: { /* an output that overlaps itself: one axis's stride set to another's */
        flashc_tensor *t = outs[rint_in(0, nouts - 1)];
        if ((t == &a->lse.t && !a->has_lse) || numel(t) == 0) break;
        int ax[FLASHC_MAX_DIMS], n = 0;
        for (int i = 0; i < t->ndim; ++i) if (t->shape[i] > 1) ax[n++] = i;
        if (n < 2) break;
        t->strides[ax[0]] = t->strides[ax[1]];
        return FLASHC_ERR_STRIDE;
    }
    case 18: { /* offsets that overflow int64 */
        flashc_tensor *t = &a->k.t;
        if (numel(t) == 0) break;
        for (int i = 0; i < 4; ++i) if (t->shape[i] > 1) { t->strides[i] = INT64_MAX / 2 + rint_in(0, 9); return FLASHC_ERR_OVERFLOW; }
        if (numel(t) > 0) { t->shape[0] = INT64_MAX / 3; return ANY_ERR; }
        break;
    }
    case 19: /* both forms of the sink logits */
        if (!a->has_sinks || a->legacy_sinks) break;
        a->p.sink_logits = a->legacy_f;
        return FLASHC_ERR_INVALID_ARGUMENT;
    case 20:
        if (!a->has_alibi) break;
        if (coin(0.5)) { a->alibi.t.dtype = a->ldt == FLASHC_F64 ? FLASHC_F32 : FLASHC_F64; return FLASHC_ERR_DTYPE; }
        a->alibi.t.shape[a->alibi.t.ndim - 1] += 1; return FLASHC_ERR_SHAPE;
    case 21:
        if (!a->has_alibi || a->p.backend == FLASHC_BACKEND_CUDA) break;
        a->cpu_only = 1; /* CUDA does not inspect the slopes (flashc.h) */
        st(a->alibi.t.dtype, a->alibi.t.data, 0, coin(0.5) ? NAN : INFINITY); return FLASHC_ERR_INVALID_ARGUMENT;
    case 22: a->q.t.shape[3] = a->k.t.shape[3] = a->v.t.shape[3] = a->o.t.shape[3] = coin(0.5) ? 0 : 257;
        if (bwd) a->dout.t.shape[3] = a->dq.t.shape[3] = a->dk.t.shape[3] = a->dv.t.shape[3] = a->q.t.shape[3];
        return ANY_ERR;
    case 23: if (!bwd) break; *tlse = NULL; return FLASHC_ERR_NULL_POINTER;
    case 24: if (!bwd) break; *tdq = NULL; return FLASHC_ERR_NULL_POINTER;
    }
    (void)tk;
    return FLASHC_OK;
}

/* The case's call (a->bwd: the backward) on the host buffers, or (cuda) on
 * their device twins with backend CUDA (AUTO stays AUTO). */
static flashc_status attn_call(const attn *a, int cuda) {
    flashc_attn_params p = a->p;
    const flashc_tensor *q = a->tq, *k = a->tk, *v = &a->v.t, *o = &a->o.t, *lse = a->tlse;
    const flashc_tensor *dout = &a->dout.t, *dq = a->tdq, *dk = &a->dk.t, *dv = &a->dv.t;
    void *dsink_arg = a->dsink_arg;
    flashc_tensor s[12];
    if (cuda) {
        if (p.backend != FLASHC_BACKEND_AUTO) p.backend = FLASHC_BACKEND_CUDA;
        p.alibi_slopes = twin(&s[0], p.alibi_slopes);
        p.sinks = twin(&s[1], p.sinks);
        p.dsinks = twin(&s[2], p.dsinks);
        p.sink_logits = dev_of(p.sink_logits);
        q = twin(&s[3], q), k = twin(&s[4], k), v = twin(&s[5], v), o = twin(&s[6], o), lse = twin(&s[7], lse);
        dout = twin(&s[8], dout), dq = twin(&s[9], dq), dk = twin(&s[10], dk), dv = twin(&s[11], dv);
        dsink_arg = dev_of(dsink_arg);
    }
    if (!a->bwd) return flashc_attn_fwd(q, k, v, o, lse, &p);
    return flashc_attn_bwd(dout, q, k, v, o, lse, dq, dk, dv, dsink_arg, &p);
}
static flashc_status attn_call_cuda(const void *a) { return attn_call(a, 1); }
static void attn_check_any(const void *p) {
    const attn *a = p;
    if (a->bwd) attn_check_bwd(a);
    else attn_check_fwd(a);
}

/* --cuda: the call again on CUDA (replay), after the CPU's (status s_cpu). */
static void attn_replay(attn *a, int valid, flashc_status s_cpu) {
    if (!g_cuda || (valid ? s_cpu != FLASHC_OK : s_cpu == FLASHC_OK || a->cpu_only)) return;
    const int n0 = g_nreg;
    /* the struct's bare arrays: 0.1 sink logits (input), 0.1 dsinks argument (output) */
    if (a->p.sink_logits == (const void *)a->legacy_f) reg_add(a->legacy_f, (size_t)a->Hq * 4, FLASHC_F32, a->Hq, 0);
    if (a->p.sink_logits == (const void *)a->legacy_d) reg_add(a->legacy_d, (size_t)a->Hq * 8, FLASHC_F64, a->Hq, 0);
    if (a->dsink_arg) reg_add(a->dsink_arg, (size_t)a->Hq * esz(a->ldt), a->ldt, a->Hq, 0);
    void *const fo[] = {a->o.base, a->lse.base};
    void *const bo[] = {a->dq.base, a->dk.base, a->dv.base, a->dsinks.base, a->dsink_arg};
    static const char *const fc[] = {"attn_fwd o", "attn_fwd lse"};
    static const char *const bc[] = {"attn_bwd dq", "attn_bwd dk", "attn_bwd dv", "attn_bwd dsinks", "attn_bwd dsinks"};
    g_dlogit = a->p.softcap > 0 && (a->dt == FLASHC_F16 || a->dt == FLASHC_BF16) ? 1.05 * exp2(-10.9) * g_xcap : 0.0;
    replay(a->bwd ? "cuda attn_bwd" : "cuda attn_fwd", valid, s_cpu, a->bwd ? bo : fo, a->bwd ? bc : fc,
           a->bwd ? 5 : 2, attn_call_cuda, attn_check_any, a);
    g_dlogit = 0;
    g_nreg = n0;
}

/* -vv: every tensor's shape and strides (elements); unset ones print empty. */
static void attn_dump(const attn *a) {
    const struct { const char *n; const ft *f; } ts[] = {{"q", &a->q}, {"k", &a->k}, {"v", &a->v}, {"o", &a->o},
        {"lse", &a->lse}, {"dout", &a->dout}, {"dq", &a->dq}, {"dk", &a->dk}, {"dv", &a->dv}};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) {
        const flashc_tensor *t = &ts[i].f->t;
        printf("  %-4s data=%s shape/strides:", ts[i].n, t->data ? "set" : "NULL");
        for (int d = 0; d < t->ndim && d < 8; ++d) printf(" %lld/%lld", (long long)t->shape[d], (long long)t->strides[d]);
        printf("\n");
    }
}

static void attn_case(int bwd, int mutate) {
    attn a;
    attn_make(&a);
    const int cuda = flashc_backend_available(FLASHC_BACKEND_CUDA);
    if (a.p.backend == FLASHC_BACKEND_CUDA && cuda) a.p.backend = FLASHC_BACKEND_CPU; /* host pointers */
    const int want_valid = a.p.backend == FLASHC_BACKEND_CUDA ? FLASHC_ERR_BACKEND_UNAVAILABLE : FLASHC_OK;
    if (g_verbose)
        printf("attn %s dt=%d B=%lld Sq=%lld Sk=%lld Hq=%lld Hkv=%lld D=%lld causal=%d win=(%lld,%lld) nsink=%lld "
               "sinks=%d alibi=%d cap=%g scale=%g backend=%d\n",
               bwd ? "fwd+bwd" : "fwd", a.dt, (long long)a.B, (long long)a.Sq, (long long)a.Sk, (long long)a.Hq,
               (long long)a.Hkv, (long long)a.D, a.p.causal, (long long)a.p.window_left, (long long)a.p.window_right,
               (long long)a.p.num_sink_tokens, a.has_sinks, a.has_alibi, a.p.softcap, a.p.softmax_scale, a.p.backend);
    if (g_verbose > 1) attn_dump(&a);
    a.tq = &a.q.t, a.tk = &a.k.t, a.tlse = a.has_lse ? &a.lse.t : NULL, a.tdq = NULL;
    if (!bwd) {
        const int want = mutate ? attn_mutate(&a, 0, &a.tq, &a.tk, &a.tlse, &a.tdq) : FLASHC_OK;
        const flashc_status s = attn_call(&a, 0);
        check_status(s, want == FLASHC_OK ? want_valid : want, "attn_fwd");
        if (want == FLASHC_OK && s == FLASHC_OK) attn_check_fwd(&a);
        attn_replay(&a, want == FLASHC_OK, s);
        return;
    }
    /* Backward: a valid forward first (o, lse as the forward wrote them). */
    a.has_lse = 1;
    a.tlse = &a.lse.t;
    flashc_status s = attn_call(&a, 0);
    check_status(s, want_valid, "attn_fwd (before bwd)");
    if (s != FLASHC_OK) return;
    if (g_cuda) { /* (replayed, so checked here too) */
        attn_check_fwd(&a);
        attn_replay(&a, 1, s);
    }
    const int64_t qs[4] = {a.B, a.Sq, a.Hq, a.D}, ks[4] = {a.B, a.Sk, a.Hkv, a.D}, hs[1] = {a.Hq};
    ft_make(&a.dout, a.dt, 4, qs, 0, 1.0);
    ft_make(&a.dq, a.dt, 4, qs, 1, 0);
    ft_make(&a.dk, a.dt, 4, ks, 1, 0);
    ft_make(&a.dv, a.dt, 4, ks, 1, 0);
    if (g_verbose > 1) attn_dump(&a);
    if (a.has_sinks) {
        if (coin(0.5)) {
            ft_make(&a.dsinks, a.ldt, 1, hs, 1, 0);
            a.p.dsinks = &a.dsinks.t;
        } else {
            a.dsink_arg = a.dt == FLASHC_F64 ? (void *)a.dsink_arg_d : (void *)a.dsink_arg_f;
        }
    }
    a.bwd = 1;
    a.tdq = &a.dq.t;
    int want = FLASHC_OK;
    if (mutate) {
        if (a.has_sinks && coin(0.1)) {
            want = FLASHC_ERR_NULL_POINTER; /* sinks without their gradient */
            a.p.dsinks = NULL;
            a.dsink_arg = NULL;
        } else {
            want = attn_mutate(&a, 1, &a.tq, &a.tk, &a.tlse, &a.tdq);
        }
    }
    s = attn_call(&a, 0);
    check_status(s, want, "attn_bwd");
    if (want == FLASHC_OK && s == FLASHC_OK) attn_check_bwd(&a);
    attn_replay(&a, want == FLASHC_OK, s);
}

/* ------------------------------------------------------------ weighted sum */
typedef struct wsum {
    int dt, nd, bwd, want_dx, want_dw;
    int64_t xs[4], D, R;
    ft x, w, y, dy, dx, dw;
    flashc_exec_params ep;
    const flashc_tensor *tx, *tw, *tdx, *tdw; /* the call's, as the mutation left them */
} wsum;

/* The case's call on the host buffers, or (cuda) on their device twins. */
static flashc_status wsum_call(const wsum *c, int cuda) {
    flashc_exec_params ep = c->ep;
    const flashc_tensor *x = c->tx, *w = c->tw, *y = &c->y.t, *dy = &c->dy.t, *dx = c->tdx, *dw = c->tdw;
    flashc_tensor s[6];
    if (cuda) {
        if (ep.backend != FLASHC_BACKEND_AUTO) ep.backend = FLASHC_BACKEND_CUDA;
        x = twin(&s[0], x), w = twin(&s[1], w), y = twin(&s[2], y), dy = twin(&s[3], dy);
        dx = twin(&s[4], dx), dw = twin(&s[5], dw);
    }
    return c->bwd ? flashc_weighted_sum_bwd(dy, x, w, dx, dw, &ep) : flashc_weighted_sum(x, w, y, &ep);
}
static flashc_status wsum_call_cuda(const void *c) { return wsum_call(c, 1); }

static void wsum_check(const void *p) {
    const wsum *c = p;
    const int nd = c->nd, dt = c->dt;
    const int64_t D = c->D, R = c->R;
    int64_t idx[4] = {0};
    if (!c->bwd) {
        cmp cy = {0};
        for (int64_t rr = 0; rr < R; ++rr) {
            int64_t q = rr;
            for (int i = nd - 2; i >= 0; --i) idx[i] = q % c->xs[i], q /= c->xs[i];
            double acc = 0, mag = 0; /* mag: the terms' magnitude (the sum may cancel) */
            for (int64_t d = 0; d < D; ++d) {
                idx[nd - 1] = d;
                const double t = get(&c->x.t, idx) * get(&c->w.t, &d);
                acc += t;
                mag += fabs(t);
            }
            cmp_add_m(&cy, get(&c->y.t, idx), acc, mag);
        }
        cmp_check(&cy, dt, "weighted_sum y");
        return;
    }
    cmp cdx = {0}, cdw = {0};
    double *dwr = calloc((size_t)(D > 0 ? D : 1), sizeof(double));
    double *dwm = calloc((size_t)(D > 0 ? D : 1), sizeof(double)); /* the terms' magnitude (sums that cancel) */
    for (int64_t rr = 0; rr < R; ++rr) {
        int64_t q = rr;
        for (int i = nd - 2; i >= 0; --i) idx[i] = q % c->xs[i], q /= c->xs[i];
        const double g = nd > 1 ? get(&c->dy.t, idx) : ld(dt, c->dy.t.data, 0);
        for (int64_t d = 0; d < D; ++d) {
            idx[nd - 1] = d;
            if (c->want_dx) cmp_add(&cdx, get(&c->dx.t, idx), g * get(&c->w.t, &d));
            const double t = g * get(&c->x.t, idx);
            dwr[d] += t;
            dwm[d] += fabs(t);
        }
    }
    if (c->want_dw)
        for (int64_t d = 0; d < D; ++d) cmp_add_m(&cdw, get(&c->dw.t, &d), dwr[d], dwm[d]);
    free(dwr);
    free(dwm);
    cmp_check(&cdx, dt, "weighted_sum_bwd dx");
    cmp_check(&cdw, dt, "weighted_sum_bwd dw");
}

static void wsum_case(int bwd, int mutate) {
    static const int dts[4] = {FLASHC_F32, FLASHC_F16, FLASHC_BF16, FLASHC_F64};
    wsum c;
    memset(&c, 0, sizeof c);
    const int dt = c.dt = dts[rint_in(0, 3)];
    const int nd = c.nd = (int)rint_in(1, 4);
    int64_t *xs = c.xs;
    for (int i = 0; i < nd - 1; ++i) xs[i] = coin(0.05) ? 0 : rint_in(1, 5);
    xs[nd - 1] = coin(0.05) ? 0 : coin(0.2) ? rint_in(100, 700) : rint_in(1, 40);
    const int64_t D = c.D = xs[nd - 1];
    ft_make(&c.x, dt, nd, xs, 0, 1.0);
    ft_make(&c.w, dt, 1, &xs[nd - 1], 0, 1.0);
    c.ep = flashc_exec_params_default();
    const int r = (int)rint_in(0, 19);
    c.ep.backend = r < 9 ? FLASHC_BACKEND_AUTO : r < 19 ? FLASHC_BACKEND_CPU : FLASHC_BACKEND_CUDA;
    if (c.ep.backend == FLASHC_BACKEND_CUDA && flashc_backend_available(FLASHC_BACKEND_CUDA)) c.ep.backend = FLASHC_BACKEND_CPU;
    const int want_valid = c.ep.backend == FLASHC_BACKEND_CUDA ? FLASHC_ERR_BACKEND_UNAVAILABLE : FLASHC_OK;
    c.tx = &c.x.t, c.tw = &c.w.t;
    int want = FLASHC_OK;
    int64_t R = 1;
    for (int i = 0; i < nd - 1; ++i) R *= xs[i];
    c.R = R;
    c.bwd = bwd;
    if (g_verbose) printf("wsum %s dt=%d ndim=%d R=%lld D=%lld backend=%d\n", bwd ? "bwd" : "fwd", dt, nd, (long long)R, (long long)D, c.ep.backend);
    if (!bwd) {
        ft_make(&c.y, dt, nd - 1, xs, 1, 0);
        if (mutate) switch (rint_in(0, 7)) {
            case 0: c.tx = NULL; want = FLASHC_ERR_NULL_POINTER; break;
            case 1: c.w.t.shape[0] += 1; want = ANY_ERR; break; /* (an empty w: wild strides, NULL) */
            case 2: c.y.t.dtype = dt == FLASHC_F32 ? FLASHC_F16 : FLASHC_F32; want = FLASHC_ERR_DTYPE; break;
            case 3: if (nd == 1) { c.x.t.ndim = 0; want = ANY_ERR; /* (x may be empty and NULL) */ } else { c.y.t.shape[0] += 1; want = ANY_ERR; } break; /* (y's strides may now overlap) */
            case 4: c.ep.struct_size = 3; want = FLASHC_ERR_PARAMS_SIZE; break;
            case 5: if (numel(&c.y.t) > 1) for (int i = 0; i < c.y.t.ndim; ++i) if (c.y.t.shape[i] > 1) { c.y.t.strides[i] = 0; want = FLASHC_ERR_STRIDE; break; } break;
            case 6: c.x.t.ndim = FLASHC_MAX_DIMS + 1; want = FLASHC_ERR_SHAPE; break;
            case 7: if (numel(&c.w.t) > 0) { c.w.t.data = NULL; want = FLASHC_ERR_NULL_POINTER; } break;
            }
    } else {
        ft_make(&c.dy, dt, nd - 1, xs, 0, 1.0);
        c.want_dx = coin(0.8), c.want_dw = !c.want_dx || coin(0.8);
        if (c.want_dx) ft_make(&c.dx, dt, nd, xs, 1, 0);
        if (c.want_dw) ft_make(&c.dw, dt, 1, &xs[nd - 1], 1, 0);
        c.tdx = c.want_dx ? &c.dx.t : NULL, c.tdw = c.want_dw ? &c.dw.t : NULL;
        if (mutate) switch (rint_in(0, 4)) {
            case 0: c.tdx = c.tdw = NULL; want = FLASHC_ERR_NULL_POINTER; break;
            case 1: c.dy.t.dtype = 9; want = FLASHC_ERR_DTYPE; break;
            case 2: if (c.tdw) { c.dw.t.shape[0] += 2; want = ANY_ERR; } break;
            case 3: if (c.tdx && nd >= 2 && numel(&c.dx.t) > 0 && c.dx.t.shape[0] > 1 && c.dx.t.shape[nd - 1] > 1) { c.dx.t.strides[0] = c.dx.t.strides[nd - 1]; want = FLASHC_ERR_STRIDE; } break;
            case 4: c.tw = NULL; want = FLASHC_ERR_NULL_POINTER; break;
            }
    }
    const flashc_status s = wsum_call(&c, 0);
    check_status(s, want == FLASHC_OK ? want_valid : want, bwd ? "weighted_sum_bwd" : "weighted_sum");
    if (want == FLASHC_OK && s == FLASHC_OK) wsum_check(&c);
    const int valid = want == FLASHC_OK;
    if (!g_cuda || (valid ? s != FLASHC_OK : s == FLASHC_OK)) return;
    void *const fo[] = {c.y.base}, *const bo[] = {c.dx.base, c.dw.base};
    static const char *const fc[] = {"weighted_sum y"}, *const bc[] = {"weighted_sum_bwd dx", "weighted_sum_bwd dw"};
    replay(bwd ? "cuda weighted_sum_bwd" : "cuda weighted_sum", valid, s, bwd ? bo : fo, bwd ? bc : fc, bwd ? 2 : 1,
           wsum_call_cuda, wsum_check, &c);
}

/* ------------------------------------------------------------ driver */
static void run_case(uint64_t seed) {
    g_seed = seed;
    g_state = seed * 0x2545f4914f6cdd1dull + 1;
    g_nallow = 0;
    g_xcap = 0;
    g_dotmag = 0;
    const int op = (int)rint_in(0, 9), mutate = coin(0.5);
    if (op < 4) attn_case(0, mutate);
    else if (op < 7) attn_case(1, mutate);
    else if (op < 9) wsum_case(0, mutate);
    else wsum_case(1, mutate);
    ft_free_all();
}

int main(int argc, char **argv) {
    const char *seeds = NULL;
    long long cases = 1000, start = 1, one = -1;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--seeds") && i + 1 < argc) seeds = argv[++i];
        else if (!strcmp(argv[i], "--cases") && i + 1 < argc) cases = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--start") && i + 1 < argc) start = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) one = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--cuda")) g_cuda = 1;
        else if (!strcmp(argv[i], "-v")) g_verbose = 1;
        else if (!strcmp(argv[i], "-vv")) g_verbose = 2;
        else {
            fprintf(stderr, "usage: %s [--seeds FILE] [--cases N] [--start S] [--seed X] [--cuda] [-v]\n", argv[0]);
            return 2;
        }
    }
    if (g_cuda) {
        if (!flashc_backend_available(FLASHC_BACKEND_CUDA)) {
            printf("fuzz_abi: --cuda: skipped (%s)\n", flashc_last_error());
            return 0;
        }
        rt_load();
        char dev[128] = "";
        if (flashc_cuda_device_name(0, dev, sizeof dev) != FLASHC_OK || !dev[0]) strcpy(dev, "device 0");
        printf("fuzz_abi: --cuda: every case replayed on %s (device memory through %s)\n", dev, rt.from);
    }
    const char *env = getenv("FLASHC_FUZZ_CASES");
    if (env && *env) cases = atoll(env);
    int failed = 0;
    long long ran = 0;
    if (one >= 0) {
        if (!g_verbose) g_verbose = 1;
        run_case((uint64_t)one);
        return g_fail;
    }
    if (seeds) {
        FILE *f = fopen(seeds, "r");
        if (!f) {
            fprintf(stderr, "fuzz_abi: cannot open %s\n", seeds);
            return 2;
        }
        char line[256];
        while (fgets(line, sizeof line, f)) {
            char *p = line;
            while (*p == ' ' || *p == '\t') ++p;
            if (*p == '#' || *p == '\n' || !*p) continue;
            g_fail = 0;
            run_case(strtoull(p, NULL, 10));
            failed += g_fail;
            ++ran;
        }
        fclose(f);
    }
    for (long long c = 0; c < cases; ++c) {
        g_fail = 0;
        run_case((uint64_t)(start + c));
        failed += g_fail;
        ++ran;
    }
    char cu[96] = "";
    if (g_cuda) snprintf(cu, sizeof cu, "; cuda replay: %lld valid, %lld invalid calls", g_cuda_valid, g_cuda_invalid);
    printf("fuzz_abi: %lld cases, %d failed (cpu isa %s%s)\n", ran, failed, flashc_cpu_isa(), cu);
    return failed ? 1 : 0;
}
