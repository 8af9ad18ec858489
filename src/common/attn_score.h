/*
 * attn_score.h — the score pipeline: how <q_i, k_j> becomes the logit that
 * enters the softmax, and its derivative for the backward. The one place
 * the score modifiers of flashc.h are written as code; plain C, host and
 * device. In order (flashc.h, "Scores"):
 *
 *   x  = scale · <q_i, k_j>
 *   x  = softcap · tanh(x / softcap)          (softcap > 0)
 *   x  = x − slope[b, h] · |i + Sk − Sq − j|   (ALiBi, bottom-right aligned)
 *   x  = −inf where key j is not visible       (attn_mask.h)
 *   softmax over j, with the sink logit in the denominator (attn_softmax.h)
 *
 * Kernels work in a unit U: U = log2(e) for the exp2 domain of the fast
 * kernels, U = 1 for the natural-log oracle. A kernel multiplies the raw dot
 * product by mod.qk_mul (usually folded into Q or into one FMA), giving u,
 * then calls fc_score(mod, u, t, dist) with t = tanh(u) (only read when
 * mod.cap ≠ 0; the kernel computes it with whatever tanh suits its
 * precision) and dist = fc_alibi_dist(...). The result is U·x.
 *
 * Backward: with dS_ij = ∂loss/∂x_ij (the modified, natural-unit logit),
 *   ∂loss/∂<q_i, k_j> = scale · dS_ij · fc_score_dgrad(mod, t),
 * i.e. the softcap multiplies by 1 − tanh², ALiBi adds nothing (slopes are
 * constants). A new modifier changes this file, flashc.h, the core's
 * validation, the Python layer and the tests — no kernel.
 */
#ifndef FLASHC_COMMON_ATTN_SCORE_H
#define FLASHC_COMMON_ATTN_SCORE_H

#include "fc_defs.h"

#include <math.h>

/* What fc_attn resolved from the params: the score part of a problem. */
typedef struct fc_score_params {
    double scale;       /* resolved softmax scale, finite, ≠ 0 */
    double softcap;     /* 0 = off, else > 0 */
    const void *alibi;  /* NULL = off; slope of (b, h) at alibi[b·alibi_sb + h·alibi_sh] */
    int64_t alibi_sb, alibi_sh;
    int32_t alibi_f64;  /* slopes are double (F64 problems), else float */
    int64_t offset;     /* Sk − Sq: the bottom-right alignment of |i + offset − j| */
} fc_score_params;

/* The pipeline's constants for one (batch, head), in unit U. */
typedef struct fc_score_mod {
    double qk_mul; /* u = qk_mul · <q, k>: U·scale, or scale / softcap when capped */
    double cap;    /* U·softcap, 0 = off */
    double slope;  /* U·slope[b, h], 0 = off */
} fc_score_mod;
typedef struct fc_score_modf {
    float qk_mul, cap, slope;
} fc_score_modf;

static inline FC_HOST_DEVICE double fc_alibi_slope(const fc_score_params *p, int64_t b, int64_t h) {
    if (!p->alibi) return 0.0;
    const int64_t o = b * p->alibi_sb + h * p->alibi_sh;
    return p->alibi_f64 ? ((const double *)p->alibi)[o] : (double)((const float *)p->alibi)[o];
}

static inline FC_HOST_DEVICE fc_score_mod fc_score_mod_make(const fc_score_params *p, int64_t b, int64_t h,
                                                            double unit) {
    fc_score_mod m;
    m.qk_mul = p->softcap > 0.0 ? p->scale / p->softcap : unit * p->scale;
    m.cap = p->softcap > 0.0 ? unit * p->softcap : 0.0;
    m.slope = unit * fc_alibi_slope(p, b, h);
    return m;
}

static inline FC_HOST_DEVICE fc_score_modf fc_score_modf_of(fc_score_mod m) {
    fc_score_modf f;
    f.qk_mul = (float)m.qk_mul;
    f.cap = (float)m.cap;
    f.slope = (float)m.slope;
    return f;
}

/* Does the pipeline do anything per element beyond u (so that a kernel may
 * take its plain path)? */
static inline FC_HOST_DEVICE int fc_score_is_plain(const fc_score_params *p) {
    return !(p->softcap > 0.0) && !p->alibi;
}

/* The signed distance of the ALiBi bias: i + Sk − Sq − j. */
static inline FC_HOST_DEVICE int64_t fc_alibi_dist(const fc_score_params *p, int64_t i, int64_t j) {
    return i + p->offset - j;
}

/* ------------------------------------------------------------ variants
 * A kernel compiles its per-element score step once per *variant*: a mode
 * (which modifiers run, FC_SCORE_* bits) known at compile time, so that the
 * steps a problem does not use cost nothing and the plain variant is the
 * kernel's plain path. The run-time mode of a problem is fc_score_mode(p)
 * (or fc_score_mode_of(mod) per head); a kernel maps it to a variant once per
 * launch / block / tile through a variant list below (FC_SCORE_DISPATCH on
 * the CPU, fcc_score_dispatch in src/cuda/attn_score.cuh), never per element.
 *
 * A variant with FC_SCORE_EXACT is taken only for exactly its mode: its steps
 * run unconditionally. One without it is taken for every mode it contains:
 * each of its steps also checks at run time that the modifier is on (softcap
 * 0 → u; a zero slope subtracts 0), so one instantiation serves them all.
 *
 * A new modifier: a bit below (and in FC_SCORE_ALL), its constants in
 * fc_score_mod(f) and fc_score_mod_make, its step in fc_score_stepf /
 * fc_score_step (and _dgrad / _innerf), its inputs in FC_SCORE_NEEDS_*, and
 * optionally exact entries in FC_SCORE_VARIANTS. */
enum {
    FC_SCORE_PLAIN = 0,
    FC_SCORE_CAP = 1,   /* softcap: reads t = tanh(u) */
    FC_SCORE_ALIBI = 2, /* ALiBi: reads dist */
    FC_SCORE_ALL = FC_SCORE_CAP | FC_SCORE_ALIBI,
    FC_SCORE_NBITS = 2,
    FC_SCORE_EXACT = 1 << 8 /* variant flag, never in a problem's mode */
};
/* The inputs a variant's step reads: t = tanh(u); dist = fc_alibi_dist. */
#define FC_SCORE_NEEDS_TANH(v) (((v) & FC_SCORE_CAP) != 0)
#define FC_SCORE_NEEDS_DIST(v) (((v) & FC_SCORE_ALIBI) != 0)

/* The variant lists: X(variant, arg) per entry, cheapest first, LAST(variant,
 * arg) for the last, which catches every mode left: it holds FC_SCORE_ALL,
 * and is exact only when the list holds every combination (checked below).
 *   FC_SCORE_VARIANTS:  one exact variant per combination — the kernels whose
 *       modifier paths are hot (CPU SIMD, tensor-core forward);
 *   FC_SCORE_VARIANTS2: plain + one catch-all — kernels where one modifier
 *       instantiation is enough (generic CUDA kernels, tensor-core backward:
 *       compile time, registers). */
#define FC_SCORE_VARIANTS(X, LAST, arg)                                                                \
    X(FC_SCORE_PLAIN, arg) X(FC_SCORE_CAP | FC_SCORE_EXACT, arg) X(FC_SCORE_ALIBI | FC_SCORE_EXACT, arg) \
    LAST(FC_SCORE_ALL | FC_SCORE_EXACT, arg)
#define FC_SCORE_VARIANTS2(X, LAST, arg) X(FC_SCORE_PLAIN, arg) LAST(FC_SCORE_ALL, arg)

/* Does a problem compiled as variant v run the step `bit`? on: whether the
 * modifier is on at run time (read only for a catch-all variant). */
#define FC_SCORE_ON(v, bit, on) (((v) & (bit)) && (((v) & FC_SCORE_EXACT) || (on)))

/* Does variant v serve mode? (The plain variant is exact by nature.) */
#define FC_SCORE_SERVES(v, mode) \
    (((v) & FC_SCORE_EXACT) || (v) == FC_SCORE_PLAIN ? (mode) == ((v) & ~FC_SCORE_EXACT) : ((mode) & ~(v)) == 0)

/* A list whose last entry is exact must hold every combination. */
#define FC_SCORE_COUNT_(v, arg) +1
#define FC_SCORE_LAST_OK_(v, n) \
    +((((v) & FC_SCORE_ALL) == FC_SCORE_ALL) && (!((v) & FC_SCORE_EXACT) || (0 n) == (1 << FC_SCORE_NBITS)))
#define FC_SCORE_NONE_(v, arg)
#define FC_SCORE_LIST_N(LIST) (0 LIST(FC_SCORE_COUNT_, FC_SCORE_COUNT_, ~))
#define FC_SCORE_LIST_OK(LIST) (0 LIST(FC_SCORE_NONE_, FC_SCORE_LAST_OK_, LIST(FC_SCORE_COUNT_, FC_SCORE_COUNT_, ~)))
#ifdef __cplusplus
static_assert(FC_SCORE_LIST_OK(FC_SCORE_VARIANTS), "FC_SCORE_VARIANTS: exact catch-all on an incomplete list");
static_assert(FC_SCORE_LIST_OK(FC_SCORE_VARIANTS2), "FC_SCORE_VARIANTS2: exact catch-all on an incomplete list");
#else
_Static_assert(FC_SCORE_LIST_OK(FC_SCORE_VARIANTS), "FC_SCORE_VARIANTS: exact catch-all on an incomplete list");
_Static_assert(FC_SCORE_LIST_OK(FC_SCORE_VARIANTS2), "FC_SCORE_VARIANTS2: exact catch-all on an incomplete list");
#endif

/* Runs CALL(v) (a statement) for the variant v of LIST that serves `mode`.
 * Plain C; the CUDA kernels use fcc_score_dispatch (attn_score.cuh). */
#define FC_SCORE_IF_(v, CALL) if (FC_SCORE_SERVES(v, fc_score_mode_)) { CALL(v); } else
#define FC_SCORE_ELSE_(v, CALL) { CALL(v); }
#define FC_SCORE_DISPATCH(LIST, mode, CALL)             \
    do {                                                \
        const int fc_score_mode_ = (mode);              \
        LIST(FC_SCORE_IF_, FC_SCORE_ELSE_, CALL)        \
    } while (0)

/* The modifiers problem p runs. */
static inline FC_HOST_DEVICE int fc_score_mode(const fc_score_params *p) {
    return (p->softcap > 0.0 ? FC_SCORE_CAP : 0) | (p->alibi ? FC_SCORE_ALIBI : 0);
}
/* ... that one head runs (a zero slope is no ALiBi). */
static inline FC_HOST_DEVICE int fc_score_mode_of(const fc_score_mod *m) {
    return (m->cap != 0.0 ? FC_SCORE_CAP : 0) | (m->slope != 0.0 ? FC_SCORE_ALIBI : 0);
}
static inline FC_HOST_DEVICE int fc_score_mode_off(const fc_score_modf *m) {
    return (m->cap != 0.0f ? FC_SCORE_CAP : 0) | (m->slope != 0.0f ? FC_SCORE_ALIBI : 0);
}

/* A running max that a log2-unit kernel (U = log2 e, cap = U·softcap) may
 * fix for every row from the start instead of taking the online max, or
 * −inf where it may not. A head whose only step is the softcap has every
 * score x in [−cap, cap] (|tanh| ≤ 1; a masked one is −inf), so with a
 * fixed m every p = 2^(x − m) lies in [2^(−cap − m), 2^(cap − m)]; the
 * kernel names the range [2^lo, 2^hi] its P may take (FC_P_LO_*, FC_P_HI_*). m = cap
 * (p ≤ 1, as with the online max) where −2 cap ≥ lo, else m = −cap − lo
 * (the smallest p at 2^lo, the largest 2^(2 cap + lo)), where that stays
 * ≤ 2^hi; else −inf. A kernel that takes it skips the row max, α and O's
 * rescale on every tile of the row (and must: a tile that raised m would
 * move the range); a row that sees nothing ends with ℓ = 0 (fc_row_finish's
 * "no visible key"). */
#define FC_P_LO_F32 (-90.0f) /* P, ℓ in fp32 or bf16 (8-bit exponent): p ≥ 2^−90 leaves the products
                                 p·v 36 binades above the normal range, which tensor cores and AMX flush */
#define FC_P_HI_F32 62.0f    /* … p ≤ 2^62: O's sums 65 binades below overflow (softcap ≤ 52.7) */
#define FC_P_LO_F16 (-14.0f) /* P rounded to fp16: its normal range (softcap ≤ 10) */
#define FC_P_HI_F16 15.0f
static inline FC_HOST_DEVICE float fc_score_max_bound_l2f(int mode, float cap, float lo, float hi) {
    if (mode != FC_SCORE_CAP || !(cap > 0.0f) || 2.0f * cap + lo > hi) return -INFINITY;
    return -2.0f * cap >= lo ? cap : -cap - lo;
}

/* The modified score in unit U, variant v (a constant where the kernel is
 * compiled per variant: the untaken steps fold away), from u = qk_mul·<q, k>,
 * t = tanh(u) (read when FC_SCORE_NEEDS_TANH(v)) and dist
 * (FC_SCORE_NEEDS_DIST(v)). float and double flavours. */
static inline FC_HOST_DEVICE float fc_score_stepf(int v, const fc_score_modf *m, float u, float t, float dist) {
    float s = u;
    if (FC_SCORE_ON(v, FC_SCORE_CAP, m->cap != 0.0f)) s = m->cap * t;
    if (v & FC_SCORE_ALIBI) s = s - m->slope * (dist < 0.0f ? -dist : dist);
    return s;
}
static inline FC_HOST_DEVICE double fc_score_step(int v, const fc_score_mod *m, double u, double t, double dist) {
    double s = u;
    if (FC_SCORE_ON(v, FC_SCORE_CAP, m->cap != 0.0)) s = m->cap * t;
    if (v & FC_SCORE_ALIBI) s = s - m->slope * (dist < 0.0 ? -dist : dist);
    return s;
}
/* ∂x/∂(scale·<q, k>) at t = tanh(u), variant v: 1 − t² when capped, else 1. */
static inline FC_HOST_DEVICE float fc_score_step_dgradf(int v, const fc_score_modf *m, float t) {
    return FC_SCORE_ON(v, FC_SCORE_CAP, m->cap != 0.0f) ? 1.0f - t * t : 1.0f;
}
static inline FC_HOST_DEVICE double fc_score_step_dgrad(int v, const fc_score_mod *m, double t) {
    return FC_SCORE_ON(v, FC_SCORE_CAP, m->cap != 0.0) ? 1.0 - t * t : 1.0;
}

/* The same with every check at run time (the catch-all variant), for the
 * reference paths. */
static inline FC_HOST_DEVICE float fc_scoref(const fc_score_modf *m, float u, float t, float dist) {
    return fc_score_stepf(FC_SCORE_ALL, m, u, t, dist);
}
static inline FC_HOST_DEVICE double fc_score(const fc_score_mod *m, double u, double t, double dist) {
    return fc_score_step(FC_SCORE_ALL, m, u, t, dist);
}
static inline FC_HOST_DEVICE float fc_score_dgradf(const fc_score_modf *m, float t) {
    return fc_score_step_dgradf(FC_SCORE_ALL, m, t);
}
static inline FC_HOST_DEVICE double fc_score_dgrad(const fc_score_mod *m, double t) {
    return fc_score_step_dgrad(FC_SCORE_ALL, m, t);
}

/* The same pipeline factored as  fc_scoref = outer · inner,  for kernels that
 * fold `outer` into their exp2 FMA (exp2(inner·outer − m·outer), one FFMA as
 * on the plain path) and take the row max on `inner` — valid when outer > 0:
 *   capped:   outer = cap (U·softcap), inner = tanh(u) − (slope/cap)·|dist|
 *   uncapped: outer = qk_mul (U·scale), inner = dot − (slope/qk_mul)·|dist|
 * where dot is the raw <q, k> (u = dot·qk_mul). Saves the multiply by cap
 * (capped) or by qk_mul (uncapped) per element. outer does not depend on the
 * head: one value per problem. */
typedef struct fc_score_foldf {
    float outer;    /* > 0 when the fold applies */
    float qk_mul;   /* u = dot·qk_mul, the argument of tanh */
    float slope;    /* slope / outer */
    int capped;
} fc_score_foldf;

static inline FC_HOST_DEVICE fc_score_foldf fc_score_fold(const fc_score_modf *m) {
    fc_score_foldf f;
    f.capped = m->cap != 0.0f;
    f.outer = f.capped ? m->cap : m->qk_mul;
    f.qk_mul = m->qk_mul;
    f.slope = f.outer != 0.0f ? m->slope / f.outer : 0.0f;
    return f;
}
/* inner from the raw dot, t = tanh(dot·qk_mul) (read when
 * FC_SCORE_NEEDS_TANH(v)), variant v as fc_score_stepf. */
static inline FC_HOST_DEVICE float fc_score_inner_stepf(int v, const fc_score_foldf *f, float dot, float t,
                                                        float dist) {
    float s = dot;
    if (FC_SCORE_ON(v, FC_SCORE_CAP, f->capped)) s = t;
    if (v & FC_SCORE_ALIBI) s = s - f->slope * (dist < 0.0f ? -dist : dist);
    return s;
}
/* ... the mode a factored step runs (fc_score_fold of one head). */
static inline FC_HOST_DEVICE int fc_score_fold_mode(const fc_score_foldf *f) {
    return (f->capped ? FC_SCORE_CAP : 0) | (f->slope != 0.0f ? FC_SCORE_ALIBI : 0);
}
static inline FC_HOST_DEVICE float fc_score_innerf(const fc_score_foldf *f, float dot, float t, float dist) {
    return fc_score_inner_stepf(FC_SCORE_ALL, f, dot, t, dist);
}

#endif /* FLASHC_COMMON_ATTN_SCORE_H */
