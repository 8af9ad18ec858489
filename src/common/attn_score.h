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

/* The modified score in unit U from u = qk_mul·<q, k> and t = tanh(u)
 * (t is read only when mod->cap ≠ 0). float and double flavours. */
static inline FC_HOST_DEVICE float fc_scoref(const fc_score_modf *m, float u, float t, float dist) {
    float s = m->cap != 0.0f ? m->cap * t : u;
    return s - m->slope * (dist < 0.0f ? -dist : dist);
}
static inline FC_HOST_DEVICE double fc_score(const fc_score_mod *m, double u, double t, double dist) {
    double s = m->cap != 0.0 ? m->cap * t : u;
    return s - m->slope * (dist < 0.0 ? -dist : dist);
}

/* ∂x/∂(scale·<q, k>) at t = tanh(u): 1 − t² when capped, else 1. */
static inline FC_HOST_DEVICE float fc_score_dgradf(const fc_score_modf *m, float t) {
    return m->cap != 0.0f ? 1.0f - t * t : 1.0f;
}
static inline FC_HOST_DEVICE double fc_score_dgrad(const fc_score_mod *m, double t) {
    return m->cap != 0.0 ? 1.0 - t * t : 1.0;
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
/* inner from the raw dot, t = tanh(dot·qk_mul) (read only when capped). */
static inline FC_HOST_DEVICE float fc_score_innerf(const fc_score_foldf *f, float dot, float t, float dist) {
    const float s = f->capped ? t : dot;
    return s - f->slope * (dist < 0.0f ? -dist : dist);
}

#endif /* FLASHC_COMMON_ATTN_SCORE_H */
