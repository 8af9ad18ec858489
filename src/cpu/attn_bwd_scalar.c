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
/* Instantiated for float and double, in natural units (unit 1: the oracle).
 * The k loop is outermost per row of c, so each c element is a sum in k
 * order (the SIMD kernels keep the same order per element but not the same
 * rounding: FMA). The ew loops follow attn_bwd.h: forward line
 *   P = exp(x − L), x = fc_score(mod, u, tanh u, dist), u = qk_mul·s,
 * backward line dS' = scale · (1 − t²) · P · (dP − Δ) (softcap), invisible
 * entries selected to 0 (s and dp may be Inf/NaN there). One branch per
 * tile between the plain loop (x = u) and the modified one. */
#define FC_BWD_SCALAR_KERNELS(T, SUF, EXP, TANH, MODT, MODOF, SCORE, DGRAD)                 \
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
    /* gemm's loop with the invisible pairs skipped (attn_bwd.h). */                         \
    static void gemm_vis_##SUF(int M, int N, int K, const void *a_, ptrdiff_t ars,          \
                               ptrdiff_t acs, const void *b_, ptrdiff_t ldb, void *c_,      \
                               ptrdiff_t ldc, int q_is_m, const int32_t *se,                \
                               const int32_t *lo, const int32_t *hi) {                      \
        const T *a = (const T *)a_, *b = (const T *)b_;                                     \
        T *c = (T *)c_;                                                                     \
        for (int m = 0; m < M; ++m) {                                                       \
            T *cr = c + (ptrdiff_t)m * ldc;                                                 \
            for (int k = 0; k < K; ++k) {                                                   \
                const int q = q_is_m ? m : k, key = q_is_m ? k : m;                         \
                if (!FC_KEY_VISIBLE(se[q], lo[q], hi[q], key)) continue;                    \
                const T av = a[(ptrdiff_t)m * ars + (ptrdiff_t)k * acs];                    \
                const T *br = b + (ptrdiff_t)k * ldb;                                       \
                for (int n = 0; n < N; ++n) cr[n] += av * br[n];                            \
            }                                                                               \
        }                                                                                   \
    }                                                                                       \
    /* One element: row r (L, Δ of its query), query − key = qmk. */                       \
    static inline void ew_elem_##SUF(T *s, T *dp, int vis, T Lr, T dlr, T scale,            \
                                     const MODT *m, T qmk_dist) {                           \
        if (!vis) {                                                                         \
            *s = 0;                                                                         \
            *dp = 0;                                                                        \
            return;                                                                         \
        }                                                                                   \
        const T u = m->qk_mul * *s, t = m->cap != 0 ? TANH(u) : (T)0;                       \
        const T p = EXP(SCORE(m, u, t, qmk_dist) - Lr);                                     \
        *s = p;                                                                             \
        *dp = scale * DGRAD(m, t) * p * (*dp - dlr);                                        \
    }                                                                                       \
    /* The tile (attn_bwd.h ew_q / ew_k): rows = queries (kt = 0) or keys (kt = 1). */      \
    static void ew_tile_##SUF(int kt, int rows, int ncols, void *s_, void *dp_, ptrdiff_t ld,\
                              const void *L_, const void *dl_, const fc_bwd_score *sc,      \
                              const int32_t *se, const int32_t *lo, const int32_t *hi) {    \
        T *s = (T *)s_, *dp = (T *)dp_;                                                     \
        const T *L = (const T *)L_, *dl = (const T *)dl_, scale = (T)sc->scale;             \
        const MODT m = MODOF(sc->mod);                                                      \
        const int plain = fc_bwd_score_plain(sc);                                           \
        for (int r = 0; r < rows; ++r) {                                                    \
            T *sr = s + (ptrdiff_t)r * ld, *dr = dp + (ptrdiff_t)r * ld;                    \
            const double d0 = kt ? sc->dist0 - r : sc->dist0 + r;                           \
            for (int c = 0; c < ncols; ++c) {                                               \
                const int q = kt ? c : r, key = kt ? r : c; /* query's L, Δ, visibility */  \
                const int vis = FC_KEY_VISIBLE(se[q], lo[q], hi[q], key);                   \
                if (plain) {                                                                \
                    const T p = vis ? EXP(m.qk_mul * sr[c] - L[q]) : (T)0;                  \
                    sr[c] = p;                                                              \
                    dr[c] = vis ? scale * p * (dr[c] - dl[q]) : (T)0;                       \
                } else {                                                                    \
                    ew_elem_##SUF(sr + c, dr + c, vis, L[q], dl[q], scale, &m,              \
                                  (T)(kt ? d0 + c : d0 - c));                               \
                }                                                                           \
            }                                                                               \
        }                                                                                   \
    }                                                                                       \
    static void ew_q_##SUF(int rows, int ncols, void *s, void *dp, ptrdiff_t ld, const void *L,\
                           const void *dl, const fc_bwd_score *sc, const int32_t *se,       \
                           const int32_t *lo, const int32_t *hi) {                          \
        ew_tile_##SUF(0, rows, ncols, s, dp, ld, L, dl, sc, se, lo, hi);                    \
    }                                                                                       \
    static void ew_k_##SUF(int rows, int ncols, void *s, void *dp, ptrdiff_t ld, const void *L,\
                           const void *dl, const fc_bwd_score *sc, const int32_t *se,       \
                           const int32_t *lo, const int32_t *hi) {                          \
        ew_tile_##SUF(1, rows, ncols, s, dp, ld, L, dl, sc, se, lo, hi);                    \
    }

#define FC_MOD_ID(m) (m)
FC_BWD_SCALAR_KERNELS(float, f32, expf, tanhf, fc_score_modf, fc_score_modf_of, fc_scoref,
                      fc_score_dgradf)
FC_BWD_SCALAR_KERNELS(double, f64, exp, tanh, fc_score_mod, FC_MOD_ID, fc_score, fc_score_dgrad)

const fc_bwd_kern fc_bwd_scalar_f32 = {4, 1.0, gemm_f32, gemm_vis_f32, ew_q_f32, ew_k_f32, pack_f32};
const fc_bwd_kern fc_bwd_scalar_f64 = {8, 1.0, gemm_f64, gemm_vis_f64, ew_q_f64, ew_k_f64, pack_f64};
