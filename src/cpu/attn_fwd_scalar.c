/* Plain-C attention forward: the reference path (FLASHC_CPU_ISA=scalar) for
 * F32/F16/BF16, computed in fp32, and the F64 path for every ISA. The body
 * is attn_fwd_scalar_body.h, instantiated twice below. */
#include "attn_fwd.h"

#include <omp.h>

/* Query rows per block and keys per tile. Small blocks: this path favours
 * plainness over speed. */
#define SBR 16
#define SBC 64

/* Element `off` (in elements, may be negative) of a tensor of `dtype`. */
static inline double fc_scalar_load(const void *base, int64_t off, int dtype) {
    switch (dtype) {
    case FLASHC_F32: return ((const float *)base)[off];
    case FLASHC_F16: return fc_f16_to_f32(((const uint16_t *)base)[off]);
    case FLASHC_BF16: return fc_bf16_to_f32(((const uint16_t *)base)[off]);
    default: return ((const double *)base)[off];
    }
}

/* Rounds x to `dtype` (F16/BF16 via fp32, nearest-even) and stores it. */
static inline void fc_scalar_store(void *base, int64_t off, int dtype, double x) {
    switch (dtype) {
    case FLASHC_F32: ((float *)base)[off] = (float)x; break;
    case FLASHC_F16: ((uint16_t *)base)[off] = fc_f32_to_f16((float)x); break;
    case FLASHC_BF16: ((uint16_t *)base)[off] = fc_f32_to_bf16((float)x); break;
    default: ((double *)base)[off] = x; break;
    }
}

/* fp32: the oracle of the F32/F16/BF16 SIMD paths (fp32 scores, tanhf). */
#define REAL float
#define EXPR expf
#define TANHR tanhf
#define MODT fc_score_modf
#define MOD_OF(m) fc_score_modf_of(m)
#define SCORE(mod, u, t, dist) fc_scoref((mod), (u), (t), (dist))
#define FN(x) fc_scalar_f32_##x
#include "attn_fwd_scalar_body.h" /* undefines its parameters */

#define REAL double
#define EXPR exp
#define TANHR tanh
#define MODT fc_score_mod
#define MOD_OF(m) (m)
#define SCORE(mod, u, t, dist) fc_score((mod), (u), (t), (dist))
#define FN(x) fc_scalar_f64_##x
#include "attn_fwd_scalar_body.h" /* undefines its parameters */

flashc_status fc_attn_fwd_scalar_f32(const fc_attn *a) { return fc_scalar_f32_run(a); }
flashc_status fc_attn_fwd_scalar_f64(const fc_attn *a) { return fc_scalar_f64_run(a); }
