/* Attention backward: the portable microkernels (the reference path, and the
 * only F64 path). Plain loops; the compiler may vectorise them with the
 * baseline ISA. See attn_bwd.h for what each one computes. */
#include "attn_bwd.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------- pack */
static inline double load_as_double(int dtype, const void *p, int64_t off) {
    switch (dtype) {
    case FLASHC_F32: return ((const float *)p)[off];
    case FLASHC_F16: return fc_f16_to_f32(((const uint16_t *)p)[off]);
    case FLASHC_BF16: return fc_bf16_to_f32(((const uint16_t *)p)[off]);
    default: return ((const double *)p)[off];
    }
}

void fc_bwd_pack_generic(size_t esz, int dtype, const void *src, int64_t rs, int64_t cs,
                         int rows, int cols, int cols_pad, void *dst, ptrdiff_t ld) {
    for (int r = 0; r < rows; ++r) {
        const int64_t base = (int64_t)r * rs;
        if (esz == 8) {
            double *d = (double *)dst + (ptrdiff_t)r * ld;
            for (int c = 0; c < cols; ++c) d[c] = load_as_double(dtype, src, base + c * cs);
            for (int c = cols; c < cols_pad; ++c) d[c] = 0.0;
        } else {
            float *d = (float *)dst + (ptrdiff_t)r * ld;
            if (dtype == FLASHC_F32 && cs == 1) {
                memcpy(d, (const float *)src + base, (size_t)cols * sizeof(float));
            } else if (dtype == FLASHC_BF16) {
                const uint16_t *s = (const uint16_t *)src + base;
                for (int c = 0; c < cols; ++c) d[c] = fc_bf16_to_f32(s[c * cs]);
            } else {
                for (int c = 0; c < cols; ++c) d[c] = (float)load_as_double(dtype, src, base + c * cs);
            }
            for (int c = cols; c < cols_pad; ++c) d[c] = 0.0f;
        }
    }
}

static void pack_f32(int dtype, const void *src, int64_t rs, int64_t cs, int rows, int cols,
                     int cols_pad, void *dst, ptrdiff_t ld) {
    fc_bwd_pack_generic(4, dtype, src, rs, cs, rows, cols, cols_pad, dst, ld);
}
static void pack_f64(int dtype, const void *src, int64_t rs, int64_t cs, int rows, int cols,
                     int cols_pad, void *dst, ptrdiff_t ld) {
    fc_bwd_pack_generic(8, dtype, src, rs, cs, rows, cols, cols_pad, dst, ld);
}

/* ---------------------------------------------------------- gemm and ew */
/* Instantiated for float and double. The k loop is outermost per row of c, so
 * each c element is a sum in k order (the SIMD kernels keep the same order
 * per element but not the same rounding: FMA). */
#define FC_BWD_SCALAR_KERNELS(T, SUF, EXP)                                                  \
    static void gemm_##SUF(int M, int N, int K, const void *a_, ptrdiff_t ars,              \
                           ptrdiff_t acs, const void *b_, ptrdiff_t ldb, void *c_,          \
                           ptrdiff_t ldc, int accumulate) {                                 \
        const T *a = (const T *)a_, *b = (const T *)b_;                                     \
        T *c = (T *)c_;                                                                     \
        for (int m = 0; m < M; ++m) {                                                       \
            T *cr = c + (ptrdiff_t)m * ldc;                                                 \
            if (!accumulate)                                                                \
                for (int n = 0; n < N; ++n) cr[n] = 0;                                      \
            for (int k = 0; k < K; ++k) {                                                   \
                const T av = a[(ptrdiff_t)m * ars + (ptrdiff_t)k * acs];                    \
                const T *br = b + (ptrdiff_t)k * ldb;                                       \
                for (int n = 0; n < N; ++n) cr[n] += av * br[n];                            \
            }                                                                               \
        }                                                                                   \
    }                                                                                       \
    /* P = exp(scale·s − L) where visible, dS' = scale·P·(dP − Δ). */                      \
    static void ew_q_##SUF(int rows, int ncols, void *s_, void *dp_, ptrdiff_t ld,         \
                           const void *L_, const void *dl_, double scale_,                  \
                           const int32_t *se, const int32_t *lo, const int32_t *hi) {       \
        T *s = (T *)s_, *dp = (T *)dp_;                                                     \
        const T *L = (const T *)L_, *dl = (const T *)dl_, scale = (T)scale_;                \
        for (int r = 0; r < rows; ++r) {                                                    \
            T *sr = s + (ptrdiff_t)r * ld, *dr = dp + (ptrdiff_t)r * ld;                    \
            for (int c = 0; c < ncols; ++c) {                                               \
                const int vis = c < se[r] || (c >= lo[r] && c < hi[r]);                     \
                const T p = vis ? EXP(scale * sr[c] - L[r]) : (T)0;                         \
                sr[c] = p;                                                                  \
                dr[c] = vis ? scale * p * (dr[c] - dl[r]) : (T)0;                           \
            }                                                                               \
        }                                                                                   \
    }                                                                                       \
    static void ew_k_##SUF(int rows, int ncols, void *s_, void *dp_, ptrdiff_t ld,         \
                           const void *L_, const void *dl_, double scale_,                  \
                           const int32_t *se, const int32_t *lo, const int32_t *hi) {       \
        T *s = (T *)s_, *dp = (T *)dp_;                                                     \
        const T *L = (const T *)L_, *dl = (const T *)dl_, scale = (T)scale_;                \
        for (int r = 0; r < rows; ++r) {                                                    \
            T *sr = s + (ptrdiff_t)r * ld, *dr = dp + (ptrdiff_t)r * ld;                    \
            for (int c = 0; c < ncols; ++c) {                                               \
                const int vis = r < se[c] || (r >= lo[c] && r < hi[c]);                     \
                const T p = vis ? EXP(scale * sr[c] - L[c]) : (T)0;                         \
                sr[c] = p;                                                                  \
                dr[c] = vis ? scale * p * (dr[c] - dl[c]) : (T)0;                           \
            }                                                                               \
        }                                                                                   \
    }

FC_BWD_SCALAR_KERNELS(float, f32, expf)
FC_BWD_SCALAR_KERNELS(double, f64, exp)

const fc_bwd_kern fc_bwd_scalar_f32 = {4, gemm_f32, ew_q_f32, ew_k_f32, pack_f32};
const fc_bwd_kern fc_bwd_scalar_f64 = {8, gemm_f64, ew_q_f64, ew_k_f64, pack_f64};
