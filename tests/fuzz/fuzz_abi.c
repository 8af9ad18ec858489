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
 * Usage: fuzz_abi [--seeds FILE] [--cases N] [--start S] [--seed X] [-v]
 *   --seeds FILE  run every seed listed in FILE first (one per line, '#'
 *                 comments): the kept corpus (tests/fuzz/seeds.txt)
 *   --cases N     then N new cases, seeds S, S+1, … (default N = 1000, S = 1;
 *                 FLASHC_FUZZ_CASES in the environment overrides N)
 *   --seed X      run the one case X (reproduce a failure) and print it
 * Exit status: 0 when every case passed; prints each failing seed.
 */
#include "flashc.h"

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

#define MAXT 24
static void *g_live[MAXT]; /* the buffers of the case, freed after it */
static int g_nlive;

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
        g_live[g_nlive++] = f->base;
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
    g_live[g_nlive++] = f->base;
}
static void ft_free_all(void) {
    for (int i = 0; i < g_nlive; ++i) free(g_live[i]);
    g_nlive = 0;
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
static void cmp_check(const cmp *c, int dt, const char *what) {
    const double rel = c->err / (c->mag > 1e-3 ? c->mag : 1e-3);
    if (c->bad_special || !(rel <= tol_of(dt)))
        FAIL("%s: error %.3g relative to %.3g (tolerance %.1g)%s", what, c->err, c->mag, tol_of(dt),
             c->bad_special ? ", NaN/inf mismatch" : "");
}

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
    double dot = 0;
    for (int64_t d = 0; d < a->D; ++d) dot += get4(&a->q.t, b, i, h, d) * get4(&a->k.t, b, j, hk, d);
    double x = a->scale * dot;
    *t = 0;
    if (a->p.softcap > 0) {
        *t = tanh(x / a->p.softcap);
        x = a->p.softcap * *t;
    }
    return x - slope_of(a, b, h) * fabs((double)(i + a->Sk - a->Sq - j));
}

static void attn_check_fwd(const attn *a) {
    cmp co = {0}, cl = {0};
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
                    double acc = 0;
                    if (any)
                        for (int64_t j = 0; j < a->Sk; ++j)
                            if (x[j] != 0.0) acc += x[j] * get4(&a->v.t, b, j, hk, d);
                    cmp_add(&co, get4(&a->o.t, b, i, h, d), any ? acc / den : 0.0);
                }
                if (a->has_lse) {
                    const int64_t idx[3] = {b, h, i};
                    cmp_add(&cl, get(&a->lse.t, idx), L);
                }
            }
    free(x);
    cmp_check(&co, a->dt, "attn_fwd o");
    cmp_check(&cl, a->ldt == FLASHC_F64 ? FLASHC_F64 : FLASHC_F32, "attn_fwd lse");
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
                    const double dS = P * (dp - delta) * fac, dSa = fabs(P * fac) * (fabs(dp) + fabs(delta));
                    for (int64_t d = 0; d < a->D; ++d) {
                        dqa[IQ(b, i, h, d)] += dSa * fabs(get4(&a->k.t, b, j, hk, d));
                        dka[IK(b, j, hk, d)] += dSa * fabs(get4(&a->q.t, b, i, h, d));
                        dv[IK(b, j, hk, d)] += P * get4(&a->dout.t, b, i, h, d);
                        dq[IQ(b, i, h, d)] += dS * get4(&a->k.t, b, j, hk, d);
                        dk[IK(b, j, hk, d)] += dS * get4(&a->q.t, b, i, h, d);
                    }
                }
            }
    cmp cq = {0}, ck = {0}, cv = {0}, cs = {0};
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
    cmp_check(&cq, a->dt, "attn_bwd dq");
    cmp_check(&ck, a->dt, "attn_bwd dk");
    cmp_check(&cv, a->dt, "attn_bwd dv");
    cmp_check(&cs, a->ldt, "attn_bwd dsinks");
    free(dq), free(dk), free(dv), free(ds), free(dqa), free(dka);
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
    const flashc_tensor *tq = &a.q.t, *tk = &a.k.t, *tlse = a.has_lse ? &a.lse.t : NULL, *tdq = NULL;
    if (!bwd) {
        const int want = mutate ? attn_mutate(&a, 0, &tq, &tk, &tlse, &tdq) : FLASHC_OK;
        const flashc_status s = flashc_attn_fwd(tq, tk, &a.v.t, &a.o.t, tlse, &a.p);
        check_status(s, want == FLASHC_OK ? want_valid : want, "attn_fwd");
        if (want == FLASHC_OK && s == FLASHC_OK) attn_check_fwd(&a);
        return;
    }
    /* Backward: a valid forward first (o, lse as the forward wrote them). */
    a.has_lse = 1;
    flashc_status s = flashc_attn_fwd(&a.q.t, &a.k.t, &a.v.t, &a.o.t, &a.lse.t, &a.p);
    check_status(s, want_valid, "attn_fwd (before bwd)");
    if (s != FLASHC_OK) return;
    const int64_t qs[4] = {a.B, a.Sq, a.Hq, a.D}, ks[4] = {a.B, a.Sk, a.Hkv, a.D}, hs[1] = {a.Hq};
    ft_make(&a.dout, a.dt, 4, qs, 0, 1.0);
    ft_make(&a.dq, a.dt, 4, qs, 1, 0);
    ft_make(&a.dk, a.dt, 4, ks, 1, 0);
    ft_make(&a.dv, a.dt, 4, ks, 1, 0);
    void *dsink_arg = NULL;
    if (a.has_sinks) {
        if (coin(0.5)) {
            ft_make(&a.dsinks, a.ldt, 1, hs, 1, 0);
            a.p.dsinks = &a.dsinks.t;
        } else {
            dsink_arg = a.dt == FLASHC_F64 ? (void *)a.dsink_arg_d : (void *)a.dsink_arg_f;
        }
    }
    tdq = &a.dq.t;
    tlse = &a.lse.t;
    int want = FLASHC_OK;
    if (mutate) {
        if (a.has_sinks && coin(0.1)) {
            want = FLASHC_ERR_NULL_POINTER; /* sinks without their gradient */
            a.p.dsinks = NULL;
            dsink_arg = NULL;
        } else {
            want = attn_mutate(&a, 1, &tq, &tk, &tlse, &tdq);
        }
    }
    s = flashc_attn_bwd(&a.dout.t, tq, tk, &a.v.t, &a.o.t, tlse, tdq, &a.dk.t, &a.dv.t, dsink_arg, &a.p);
    check_status(s, want, "attn_bwd");
    if (want == FLASHC_OK && s == FLASHC_OK) attn_check_bwd(&a);
}

/* ------------------------------------------------------------ weighted sum */
static void wsum_case(int bwd, int mutate) {
    static const int dts[4] = {FLASHC_F32, FLASHC_F16, FLASHC_BF16, FLASHC_F64};
    const int dt = dts[rint_in(0, 3)];
    const int nd = (int)rint_in(1, 4);
    int64_t xs[4];
    for (int i = 0; i < nd - 1; ++i) xs[i] = coin(0.05) ? 0 : rint_in(1, 5);
    xs[nd - 1] = coin(0.05) ? 0 : coin(0.2) ? rint_in(100, 700) : rint_in(1, 40);
    const int64_t D = xs[nd - 1];
    ft x, w, y, dy, dx, dw;
    ft_make(&x, dt, nd, xs, 0, 1.0);
    ft_make(&w, dt, 1, &xs[nd - 1], 0, 1.0);
    flashc_exec_params ep = flashc_exec_params_default();
    const int r = (int)rint_in(0, 19);
    ep.backend = r < 9 ? FLASHC_BACKEND_AUTO : r < 19 ? FLASHC_BACKEND_CPU : FLASHC_BACKEND_CUDA;
    if (ep.backend == FLASHC_BACKEND_CUDA && flashc_backend_available(FLASHC_BACKEND_CUDA)) ep.backend = FLASHC_BACKEND_CPU;
    const int want_valid = ep.backend == FLASHC_BACKEND_CUDA ? FLASHC_ERR_BACKEND_UNAVAILABLE : FLASHC_OK;
    const flashc_tensor *tx = &x.t, *tw = &w.t;
    int want = FLASHC_OK;
    int64_t R = 1;
    for (int i = 0; i < nd - 1; ++i) R *= xs[i];
    if (g_verbose) printf("wsum %s dt=%d ndim=%d R=%lld D=%lld backend=%d\n", bwd ? "bwd" : "fwd", dt, nd, (long long)R, (long long)D, ep.backend);
    if (!bwd) {
        ft_make(&y, dt, nd - 1, xs, 1, 0);
        if (mutate) switch (rint_in(0, 7)) {
            case 0: tx = NULL; want = FLASHC_ERR_NULL_POINTER; break;
            case 1: w.t.shape[0] += 1; want = ANY_ERR; break; /* (an empty w: wild strides, NULL) */
            case 2: y.t.dtype = dt == FLASHC_F32 ? FLASHC_F16 : FLASHC_F32; want = FLASHC_ERR_DTYPE; break;
            case 3: if (nd == 1) { x.t.ndim = 0; want = ANY_ERR; /* (x may be empty and NULL) */ } else { y.t.shape[0] += 1; want = ANY_ERR; } break; /* (y's strides may now overlap) */
            case 4: ep.struct_size = 3; want = FLASHC_ERR_PARAMS_SIZE; break;
            case 5: if (numel(&y.t) > 1) for (int i = 0; i < y.t.ndim; ++i) if (y.t.shape[i] > 1) { y.t.strides[i] = 0; want = FLASHC_ERR_STRIDE; break; } break;
            case 6: x.t.ndim = FLASHC_MAX_DIMS + 1; want = FLASHC_ERR_SHAPE; break;
            case 7: if (numel(&w.t) > 0) { w.t.data = NULL; want = FLASHC_ERR_NULL_POINTER; } break;
            }
        const flashc_status s = flashc_weighted_sum(tx, tw, &y.t, &ep);
        check_status(s, want == FLASHC_OK ? want_valid : want, "weighted_sum");
        if (want != FLASHC_OK || s != FLASHC_OK) return;
        cmp c = {0};
        int64_t idx[4] = {0};
        for (int64_t rr = 0; rr < R; ++rr) {
            int64_t q = rr;
            for (int i = nd - 2; i >= 0; --i) idx[i] = q % xs[i], q /= xs[i];
            double acc = 0;
            for (int64_t d = 0; d < D; ++d) {
                idx[nd - 1] = d;
                acc += get(&x.t, idx) * get(&w.t, &d);
            }
            cmp_add(&c, get(&y.t, idx), acc);
        }
        cmp_check(&c, dt, "weighted_sum y");
        return;
    }
    ft_make(&dy, dt, nd - 1, xs, 0, 1.0);
    const int want_dx = coin(0.8), want_dw = !want_dx || coin(0.8);
    if (want_dx) ft_make(&dx, dt, nd, xs, 1, 0);
    if (want_dw) ft_make(&dw, dt, 1, &xs[nd - 1], 1, 0);
    const flashc_tensor *tdx = want_dx ? &dx.t : NULL, *tdw = want_dw ? &dw.t : NULL;
    if (mutate) switch (rint_in(0, 4)) {
        case 0: tdx = tdw = NULL; want = FLASHC_ERR_NULL_POINTER; break;
        case 1: dy.t.dtype = 9; want = FLASHC_ERR_DTYPE; break;
        case 2: if (tdw) { dw.t.shape[0] += 2; want = ANY_ERR; } break;
        case 3: if (tdx && nd >= 2 && numel(&dx.t) > 0 && dx.t.shape[0] > 1 && dx.t.shape[nd - 1] > 1) { dx.t.strides[0] = dx.t.strides[nd - 1]; want = FLASHC_ERR_STRIDE; } break;
        case 4: tw = NULL; want = FLASHC_ERR_NULL_POINTER; break;
        }
    const flashc_status s = flashc_weighted_sum_bwd(&dy.t, tx, tw, tdx, tdw, &ep);
    check_status(s, want == FLASHC_OK ? want_valid : want, "weighted_sum_bwd");
    if (want != FLASHC_OK || s != FLASHC_OK) return;
    cmp cdx = {0}, cdw = {0};
    double *dwr = calloc((size_t)(D > 0 ? D : 1), sizeof(double));
    int64_t idx[4] = {0};
    for (int64_t rr = 0; rr < R; ++rr) {
        int64_t q = rr;
        for (int i = nd - 2; i >= 0; --i) idx[i] = q % xs[i], q /= xs[i];
        const double g = nd > 1 ? get(&dy.t, idx) : ld(dt, dy.t.data, 0);
        for (int64_t d = 0; d < D; ++d) {
            idx[nd - 1] = d;
            if (tdx) cmp_add(&cdx, get(&dx.t, idx), g * get(&w.t, &d));
            dwr[d] += g * get(&x.t, idx);
        }
    }
    if (tdw)
        for (int64_t d = 0; d < D; ++d) cmp_add(&cdw, get(&dw.t, &d), dwr[d]);
    free(dwr);
    cmp_check(&cdx, dt, "weighted_sum_bwd dx");
    cmp_check(&cdw, dt, "weighted_sum_bwd dw");
}

/* ------------------------------------------------------------ driver */
static void run_case(uint64_t seed) {
    g_seed = seed;
    g_state = seed * 0x2545f4914f6cdd1dull + 1;
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
        else if (!strcmp(argv[i], "-v")) g_verbose = 1;
        else if (!strcmp(argv[i], "-vv")) g_verbose = 2;
        else {
            fprintf(stderr, "usage: %s [--seeds FILE] [--cases N] [--start S] [--seed X] [-v]\n", argv[0]);
            return 2;
        }
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
    printf("fuzz_abi: %lld cases, %d failed (cpu isa %s)\n", ran, failed, flashc_cpu_isa());
    return failed ? 1 : 0;
}
