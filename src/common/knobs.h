/*
 * knobs.h — every FLASHC_* environment variable, read here and nowhere else,
 * with one policy: a knob is read at every call that consults it (getenv is
 * cheap next to any kernel, and tests change knobs between calls); an unset
 * or empty variable means "auto". A value the knob does not accept is an
 * error: every compute call (attention and weighted sum, forward and
 * backward) first runs fc_knobs_check() and fails with
 * FLASHC_ERR_INVALID_ARGUMENT naming the variable and its accepted values,
 * so that a typo never silently means "auto". (The fc_knob_* readers below
 * still map an unknown value to auto: they are only reached after the check,
 * or from the info calls flashc_cpu_isa() / flashc_cpu_features(), which
 * cannot fail.) Header-only, so that the core library and the CUDA module (a
 * separate shared object) read the environment the same way. The list below
 * is mirrored in flashc.h ("Environment").
 *
 *   FLASHC_CPU_ISA=scalar|avx2|avx512   cap the CPU SIMD path (tests, benchmarks)
 *   FLASHC_CPU_BF16=0|1                 AVX512-BF16 paths off / on wherever the CPU has them
 *   FLASHC_CPU_DECODE_ROWS=n            rows per (b, kv head) up to which the CPU forward takes the
 *                                       decode path (0 = never; capped at 64)
 *   FLASHC_CPU_BWD=twopass              force the CPU backward's two-pass (key-major) schedule
 *   FLASHC_CUDA_KERNEL=generic|mma      force a CUDA attention kernel family: generic = SIMT kernels
 *                                       only; mma = mma.sync (skip wgmma and TMA), then generic
 *   FLASHC_CUDA_SMEM_LIMIT=n            CUDA: cap the shared memory a kernel may use at n bytes (below the
 *                                       device's opt-in limit; tests emulate 99 KB / 48 KB GPUs)
 *   FLASHC_CUDA_POISON_SCRATCH=0|1      CUDA: fill every scratch buffer a call takes (the backward's dQ
 *                                       accumulator, split partials, Δ, ...) with 0xFF bytes (NaN as
 *                                       fp32/fp64) before its kernels run, so that a kernel reading scratch
 *                                       it did not write shows in its results (tests; off by default)
 *   FLASHC_CUDA_MODULE=path             the CUDA module to dlopen instead of the one beside libflashc
 *                                       (not checked here: the loader reports a missing file)
 *   FLASHC_WSUM_VARIANT=0|1             CUDA weighted sum: 0 = generic kernels only (tests,
 *                                       benchmarks); 1 = auto
 */
#ifndef FLASHC_COMMON_KNOBS_H
#define FLASHC_COMMON_KNOBS_H

#include <stdlib.h>
#include <string.h>

enum { FC_KNOB_AUTO = -1 };

/* Index of the variable's value in `names` (NULL-terminated), FC_KNOB_AUTO when
 * unset, empty or unknown (unknown values are refused by fc_knobs_check first). */
static inline int fc_knob_choice(const char *var, const char *const *names) {
    const char *e = getenv(var);
    if (!e || !*e) return FC_KNOB_AUTO;
    for (int i = 0; names[i]; ++i)
        if (strcmp(e, names[i]) == 0) return i;
    return FC_KNOB_AUTO;
}

/* Non-negative integer value, capped at `cap`; FC_KNOB_AUTO when unset, empty
 * or not a number (refused by fc_knobs_check first). */
static inline long fc_knob_int(const char *var, long cap) {
    const char *e = getenv(var);
    if (!e || !*e) return FC_KNOB_AUTO;
    char *end = NULL;
    const long n = strtol(e, &end, 10);
    if (end == e || *end != '\0' || n < 0) return FC_KNOB_AUTO;
    return n > cap ? cap : n;
}

/* Raw string value (paths, names); NULL when unset or empty. */
static inline const char *fc_knob_str(const char *var) {
    const char *e = getenv(var);
    return e && *e ? e : NULL;
}

/* ---------------------------------------------------------------- the knobs */
static const char *const fc_knob_isa_names[] = {"scalar", "avx2", "avx512", NULL};
static inline int fc_knob_cpu_isa(void) { return fc_knob_choice("FLASHC_CPU_ISA", fc_knob_isa_names); }

static const char *const fc_knob_bool_names[] = {"0", "1", NULL};
static inline int fc_knob_cpu_bf16(void) { return fc_knob_choice("FLASHC_CPU_BF16", fc_knob_bool_names); }

static inline int fc_knob_cpu_amx(void) { return fc_knob_choice("FLASHC_CPU_AMX", fc_knob_bool_names); }

static inline long fc_knob_cpu_decode_rows(void) { return fc_knob_int("FLASHC_CPU_DECODE_ROWS", 64); }

static const char *const fc_knob_bwd_names[] = {"twopass", NULL};
static inline int fc_knob_cpu_bwd_twopass(void) {
    return fc_knob_choice("FLASHC_CPU_BWD", fc_knob_bwd_names) == 0;
}

enum { FC_KNOB_CUDA_GENERIC = 0, FC_KNOB_CUDA_MMA = 1 };
static const char *const fc_knob_cuda_kernel_names[] = {"generic", "mma", NULL};
static inline int fc_knob_cuda_kernel(void) {
    return fc_knob_choice("FLASHC_CUDA_KERNEL", fc_knob_cuda_kernel_names);
}

/* Bytes; FC_KNOB_AUTO (the device's opt-in limit) when unset. */
static inline long fc_knob_cuda_smem_limit(void) { return fc_knob_int("FLASHC_CUDA_SMEM_LIMIT", 1L << 30); }

/* 1 when FLASHC_CUDA_POISON_SCRATCH=1 (tests), else 0. */
static inline int fc_knob_cuda_poison_scratch(void) {
    return fc_knob_choice("FLASHC_CUDA_POISON_SCRATCH", fc_knob_bool_names) == 1;
}

static inline const char *fc_knob_cuda_module(void) { return fc_knob_str("FLASHC_CUDA_MODULE"); }
/* 1 (auto: fast kernels where they apply) unless FLASHC_WSUM_VARIANT=0. */
static inline int fc_knob_wsum_variant(void) { return fc_knob_int("FLASHC_WSUM_VARIANT", 1) == 0 ? 0 : 1; }

/* ------------------------------------------------------------ validation */
/* The knobs with a closed set of values (names == NULL: a non-negative
 * decimal integer), each with its accepted values as a message shows them. */
typedef struct fc_knob_spec {
    const char *var;
    const char *const *names;
    const char *accepted;
} fc_knob_spec;

static const fc_knob_spec fc_knob_specs[] = {
    {"FLASHC_CPU_ISA", fc_knob_isa_names, "scalar, avx2, avx512"},
    {"FLASHC_CPU_BF16", fc_knob_bool_names, "0, 1"},
    {"FLASHC_CPU_AMX", fc_knob_bool_names, "0, 1"},
    {"FLASHC_CPU_DECODE_ROWS", NULL, "a non-negative integer (0 = never; capped at 64)"},
    {"FLASHC_CPU_BWD", fc_knob_bwd_names, "twopass"},
    {"FLASHC_CUDA_KERNEL", fc_knob_cuda_kernel_names, "generic, mma"},
    {"FLASHC_CUDA_SMEM_LIMIT", NULL, "a non-negative integer (bytes)"},
    {"FLASHC_CUDA_POISON_SCRATCH", fc_knob_bool_names, "0, 1"},
    {"FLASHC_WSUM_VARIANT", fc_knob_bool_names, "0, 1"},
};

#ifdef __cplusplus
extern "C" char **environ;
#else
extern char **environ;
#endif

/* Whether value e is one that spec s accepts (unset and empty are checked by the caller). */
static inline int fc_knob_accepts(const fc_knob_spec *s, const char *e) {
    if (s->names) {
        for (int i = 0; s->names[i]; ++i)
            if (strcmp(e, s->names[i]) == 0) return 1;
        return 0;
    }
    char *end = NULL;
    const long n = strtol(e, &end, 10);
    return end != e && *end == '\0' && n >= 0;
}

/* The first knob whose value it does not accept (its spec; *value gets the
 * value), or NULL when every set knob is valid. Unset and empty are valid.
 * One pass over the environment (every compute call runs this: a getenv per
 * knob would scan it once per knob); where a variable appears twice, the
 * first entry counts, as for getenv. */
static inline const fc_knob_spec *fc_knobs_invalid(const char **value) {
    enum { NSPEC = sizeof fc_knob_specs / sizeof *fc_knob_specs };
    unsigned seen = 0;
    for (char **ep = environ; ep && *ep; ++ep) {
        const char *e = *ep;
        if (e[0] != 'F' || strncmp(e, "FLASHC_", 7) != 0) continue;
        const char *eq = strchr(e, '=');
        if (!eq) continue;
        const size_t n = (size_t)(eq - e);
        for (unsigned k = 0; k < NSPEC; ++k) {
            const fc_knob_spec *s = &fc_knob_specs[k];
            if (strlen(s->var) != n || memcmp(s->var, e, n) != 0) continue;
            if (!(seen & (1u << k)) && eq[1] && !fc_knob_accepts(s, eq + 1)) {
                *value = eq + 1;
                return s;
            }
            seen |= 1u << k;
            break;
        }
    }
    return NULL;
}

#endif /* FLASHC_COMMON_KNOBS_H */
