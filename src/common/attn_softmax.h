/*
 * attn_softmax.h — how a row of the online softmax is finished, and the sink
 * logit's gradient: the one place flashc.h's "sink logit" and "row with no
 * visible key" rules are written as code. Plain C, host and device.
 *
 * A kernel ends a row with M (the row max of the modified scores, natural
 * units; −inf when the row saw nothing) and l = Σ_j e^{x_j − M}. With a sink
 * logit s (GPT-OSS), the denominator gains e^s:
 *   O = acc · factor,   factor = e^M / (l·e^M + e^s) = 1 / (l + e^{s − M})
 *   L = log(l·e^M + e^s)
 * computed without overflow. No visible key: factor = 0, L = s (or −inf
 * without a sink), never NaN. A row that saw a NaN score (M or l NaN: a NaN
 * or infinite key it sees) ends with factor = L = NaN, flashc.h's
 * "non-finite results" — not as an empty row (both flavours: the double one
 * of the CPU paths and the CUDA generic F64 kernel, the fp32 one of the
 * CUDA kernels).
 *
 * Backward: d s_h = Σ_{b,i} fc_dsink_term(s_h, L_i, Δ_i) with
 * Δ_i = Σ_d dO_id·O_id; each term is −e^{s − L_i}·Δ_i.
 */
#ifndef FLASHC_COMMON_ATTN_SOFTMAX_H
#define FLASHC_COMMON_ATTN_SOFTMAX_H

#include "fc_defs.h"

#include <math.h>

static inline FC_HOST_DEVICE void fc_row_finish(double M, double l, int has_sink, double s, double *factor,
                                                double *lse) {
    if (l != l || M != M) {
        *factor = *lse = NAN;
        return;
    }
    if (!(l > 0.0) || M == -INFINITY) {
        *factor = 0.0;
        *lse = has_sink ? s : -INFINITY;
        return;
    }
    if (!has_sink) {
        *factor = 1.0 / l;
        *lse = M + log(l);
        return;
    }
    const double mx = M > s ? M : s;
    const double den = l * exp(M - mx) + exp(s - mx); /* one term is e^0 */
    *factor = exp(M - mx) / den;
    *lse = mx + log(den);
}

/* fp32 flavour (device kernels): same rules, fp32 arithmetic. */
static inline FC_HOST_DEVICE void fc_row_finishf(float M, float l, int has_sink, float s, float *factor,
                                                 float *lse) {
    if (l != l || M != M) { /* the row saw a NaN score (l = NaN where every score it saw was) */
        *factor = *lse = NAN;
        return;
    }
    if (!(l > 0.0f) || M == -INFINITY) {
        *factor = 0.0f;
        *lse = has_sink ? s : -INFINITY;
        return;
    }
    if (!has_sink) {
        *factor = 1.0f / l;
        *lse = M + logf(l);
        return;
    }
    const float mx = M > s ? M : s;
    const float den = l * expf(M - mx) + expf(s - mx);
    *factor = expf(M - mx) / den;
    *lse = mx + logf(den);
}

/* One row's contribution to d(sink logit). */
static inline FC_HOST_DEVICE double fc_dsink_term(double s, double L, double delta) {
    return L == -INFINITY ? 0.0 : -exp(s - L) * delta;
}
static inline FC_HOST_DEVICE float fc_dsink_termf(float s, float L, float delta) {
    return L == -INFINITY ? 0.0f : -expf(s - L) * delta;
}

#endif /* FLASHC_COMMON_ATTN_SOFTMAX_H */
