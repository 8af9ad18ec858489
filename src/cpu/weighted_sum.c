/* CPU weighted row-sum, forward and backward, all four dtypes.
 *   x is (R, D) viewed through fc_wsum's outer multi-index; w is (D,)
 *   fwd: y[r]     = Σ_d x[r, d] · w[d]
 *   bwd: dx[r, d] = dy[r] · w[d]
 *        dw[d]    = Σ_r dy[r] · x[r, d], reduced through per-block partial
 *                   buffers in a fixed block order: bit-identical for any
 *                   thread count (no atomics, no thread-dependent split).
 * Accumulation in fp32 (F64 in F64). Memory-bound: rows are converted to
 * fp32 in chunks so the inner loops are plain unit-stride arrays the
 * compiler vectorises.
 * This file is the reference (FLASHC_CPU_ISA=scalar) and the path for
 * strided D axes; unit-stride cases go to weighted_sum_avx2.c /
 * weighted_sum_avx512.c (weighted_sum_body.h), chosen by fc_cpu_isa_level(). */
#include "weighted_sum.h"

#include <stdlib.h>
#include <string.h>

#define CHUNK 512 /* elements of a row converted at once */

/* Loads n elements (stride s) of dtype `dt` at p as float. */
static void load_f32(int dt, const void *p, int64_t s, int64_t n, float *out) {
    if (dt == FLASHC_F32) {
        const float *x = (const float *)p;
        if (s == 1 && n > 0) memcpy(out, x, (size_t)n * 4); /* n = 0: x may be NULL */
        else for (int64_t i = 0; i < n; ++i) out[i] = x[i * s];
    } else if (dt == FLASHC_BF16) {
        const uint16_t *x = (const uint16_t *)p;
        for (int64_t i = 0; i < n; ++i) out[i] = fc_bf16_to_f32(x[i * s]);
    } else {
        const uint16_t *x = (const uint16_t *)p;
        for (int64_t i = 0; i < n; ++i) out[i] = fc_f16_to_f32(x[i * s]);
    }
}

static void store_f32(int dt, void *p, int64_t s, int64_t n, const float *in) {
    if (dt == FLASHC_F32) {
        float *x = (float *)p;
        for (int64_t i = 0; i < n; ++i) x[i * s] = in[i];
    } else if (dt == FLASHC_BF16) {
        uint16_t *x = (uint16_t *)p;
        for (int64_t i = 0; i < n; ++i) x[i * s] = fc_f32_to_bf16(in[i]);
    } else {
        uint16_t *x = (uint16_t *)p;
        for (int64_t i = 0; i < n; ++i) x[i * s] = fc_f32_to_f16(in[i]);
    }
}

static size_t esz(int dt) { return flashc_dtype_size(dt); }
#define AT(base, dt, off) ((const char *)(base) + (off) * (int64_t)esz(dt))
#define AT_W(base, dt, off) ((char *)(base) + (off) * (int64_t)esz(dt))

/* ------------------------------------------------------------ forward */
static void fwd_f64(const fc_wsum *p) {
    const double *w = (const double *)p->w;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < p->R; ++r) {
        const double *x = (const double *)p->x + fc_wsum_row_offset(p, p->x_ostr, r);
        double acc = 0.0;
        for (int64_t d = 0; d < p->D; ++d) acc += x[d * p->x_dstr] * w[d * p->w_str];
        ((double *)p->y)[fc_wsum_row_offset(p, p->y_ostr, r)] = acc;
    }
}

static void fwd_f32(const fc_wsum *p, const float *w) {
    const int dt = p->dtype;
#pragma omp parallel
    {
        float buf[CHUNK];
#pragma omp for schedule(static)
        for (int64_t r = 0; r < p->R; ++r) {
            const int64_t xo = fc_wsum_row_offset(p, p->x_ostr, r);
            float acc = 0.0f;
            for (int64_t d0 = 0; d0 < p->D; d0 += CHUNK) {
                const int64_t n = p->D - d0 < CHUNK ? p->D - d0 : CHUNK;
                const float *xs = buf;
                if (dt == FLASHC_F32 && p->x_dstr == 1) xs = (const float *)p->x + xo + d0;
                else load_f32(dt, AT(p->x, dt, xo + d0 * p->x_dstr), p->x_dstr, n, buf);
                float part = 0.0f;
#pragma omp simd reduction(+ : part)
                for (int64_t d = 0; d < n; ++d) part += xs[d] * w[d0 + d];
                acc += part;
            }
            store_f32(dt, AT_W(p->y, dt, fc_wsum_row_offset(p, p->y_ostr, r)), 1, 1, &acc);
        }
    }
}

flashc_status fc_cpu_weighted_sum(const fc_wsum *p) {
    if (p->R == 0) return FLASHC_OK;
    if (p->D == 0) { /* y = 0; x and w are empty (maybe NULL) and never touched */
        const float z = 0.0f;
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < p->R; ++r) {
            const int64_t yo = fc_wsum_row_offset(p, p->y_ostr, r);
            if (p->dtype == FLASHC_F64) ((double *)p->y)[yo] = 0.0;
            else store_f32(p->dtype, AT_W(p->y, p->dtype, yo), 1, 1, &z);
        }
        return FLASHC_OK;
    }
    if (fc_wsum_simd_ok_fwd(p)) {
        switch (fc_cpu_isa_level()) {
        case FC_ISA_AVX512: return fc_wsum_fwd_avx512(p);
        case FC_ISA_AVX2: return fc_wsum_fwd_avx2(p);
        default: break;
        }
    }
    if (p->dtype == FLASHC_F64) {
        fwd_f64(p);
        return FLASHC_OK;
    }
    float *w = (float *)malloc((size_t)(p->D > 0 ? p->D : 1) * sizeof(float));
    if (!w) return fc_set_error(FLASHC_ERR_OUT_OF_MEMORY, "weighted_sum: cannot allocate %lld floats for w",
                                (long long)p->D);
    load_f32(p->dtype, p->w, p->w_str, p->D, w);
    fwd_f32(p, w);
    free(w);
    return FLASHC_OK;
}

/* ----------------------------------------------------------- backward */
/* Rows per partial block: a function of R only, never of the thread count. */
#define rows_per_block fc_wsum_rows_per_block

static flashc_status bwd_f64(const fc_wsum *p) {
    const double *w = (const double *)p->w;
    const double *dy = (const double *)p->dy;
    const int64_t rpb = rows_per_block(p->R), nb = (p->R + rpb - 1) / rpb, D = p->D;
    double *part = NULL;
    if (p->dw && D > 0) {
        part = (double *)malloc((size_t)nb * (size_t)D * sizeof(double));
        if (!part) return fc_set_error(FLASHC_ERR_OUT_OF_MEMORY, "weighted_sum_bwd: dw partial buffer (%lld x %lld doubles)",
                                       (long long)nb, (long long)D);
    }
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < nb; ++b) {
        double *acc = part ? part + b * D : NULL;
        if (acc) memset(acc, 0, (size_t)D * sizeof(double));
        const int64_t r1 = (b + 1) * rpb < p->R ? (b + 1) * rpb : p->R;
        for (int64_t r = b * rpb; r < r1; ++r) {
            const double g = dy[fc_wsum_row_offset(p, p->dy_ostr, r)];
            if (p->dx) {
                double *dx = (double *)p->dx + fc_wsum_row_offset(p, p->dx_ostr, r);
                for (int64_t d = 0; d < D; ++d) dx[d * p->dx_dstr] = g * w[d * p->w_str];
            }
            if (acc) {
                const double *x = (const double *)p->x + fc_wsum_row_offset(p, p->x_ostr, r);
                for (int64_t d = 0; d < D; ++d) acc[d] += g * x[d * p->x_dstr];
            }
        }
    }
    if (p->dw) {
        double *dw = (double *)p->dw;
#pragma omp parallel for schedule(static)
        for (int64_t d = 0; d < D; ++d) {
            double s = 0.0;
            for (int64_t b = 0; b < nb; ++b) s += part[b * D + d];
            dw[d * p->dw_str] = s;
        }
    }
    free(part);
    return FLASHC_OK;
}

static flashc_status bwd_f32(const fc_wsum *p) {
    const int dt = p->dtype;
    const int64_t rpb = rows_per_block(p->R), nb = (p->R + rpb - 1) / rpb, D = p->D;
    float *w = (float *)malloc((size_t)(D > 0 ? D : 1) * sizeof(float));
    if (!w) return fc_set_error(FLASHC_ERR_OUT_OF_MEMORY, "weighted_sum_bwd: cannot allocate %lld floats for w",
                                (long long)D);
    float *part = (p->dw && D > 0) ? (float *)malloc((size_t)nb * (size_t)D * sizeof(float)) : NULL;
    if (p->dw && D > 0 && !part) {
        free(w);
        return fc_set_error(FLASHC_ERR_OUT_OF_MEMORY, "weighted_sum_bwd: dw partial buffer (%lld x %lld floats)",
                            (long long)nb, (long long)D);
    }
    load_f32(dt, p->w, p->w_str, D, w);
#pragma omp parallel
    {
        float buf[CHUNK], gw[CHUNK];
#pragma omp for schedule(static)
        for (int64_t b = 0; b < nb; ++b) {
            float *acc = part ? part + b * D : NULL;
            if (acc) memset(acc, 0, (size_t)D * sizeof(float));
            const int64_t r1 = (b + 1) * rpb < p->R ? (b + 1) * rpb : p->R;
            for (int64_t r = b * rpb; r < r1; ++r) {
                float g;
                load_f32(dt, AT(p->dy, dt, fc_wsum_row_offset(p, p->dy_ostr, r)), 1, 1, &g);
                const int64_t xo = acc ? fc_wsum_row_offset(p, p->x_ostr, r) : 0;
                const int64_t dxo = p->dx ? fc_wsum_row_offset(p, p->dx_ostr, r) : 0;
                for (int64_t d0 = 0; d0 < D; d0 += CHUNK) {
                    const int64_t n = D - d0 < CHUNK ? D - d0 : CHUNK;
                    if (p->dx) {
                        for (int64_t d = 0; d < n; ++d) gw[d] = g * w[d0 + d];
                        store_f32(dt, AT_W(p->dx, dt, dxo + d0 * p->dx_dstr), p->dx_dstr, n, gw);
                    }
                    if (acc) {
                        load_f32(dt, AT(p->x, dt, xo + d0 * p->x_dstr), p->x_dstr, n, buf);
#pragma omp simd
                        for (int64_t d = 0; d < n; ++d) acc[d0 + d] += g * buf[d];
                    }
                }
            }
        }
    }
    if (p->dw) {
        float out[CHUNK];
        for (int64_t d0 = 0; d0 < D; d0 += CHUNK) {
            const int64_t n = D - d0 < CHUNK ? D - d0 : CHUNK;
            for (int64_t d = 0; d < n; ++d) {
                float s = 0.0f;
                for (int64_t b = 0; b < nb; ++b) s += part[b * D + d0 + d];
                out[d] = s;
            }
            store_f32(dt, AT_W(p->dw, dt, d0 * p->dw_str), p->dw_str, n, out);
        }
    }
    free(w);
    free(part);
    return FLASHC_OK;
}

flashc_status fc_cpu_weighted_sum_bwd(const fc_wsum *p) {
    if (p->dw && p->R == 0) { /* dw = 0 */
        for (int64_t d = 0; d < p->D; ++d) {
            const float z = 0.0f;
            if (p->dtype == FLASHC_F64) ((double *)p->dw)[d * p->dw_str] = 0.0;
            else store_f32(p->dtype, AT_W(p->dw, p->dtype, d * p->dw_str), 1, 1, &z);
        }
        return FLASHC_OK;
    }
    if (p->R == 0 || p->D == 0) return FLASHC_OK; /* dx and dw are empty */
    if (fc_wsum_simd_ok_bwd(p)) {
        switch (fc_cpu_isa_level()) {
        case FC_ISA_AVX512: return fc_wsum_bwd_avx512(p);
        case FC_ISA_AVX2: return fc_wsum_bwd_avx2(p);
        default: break;
        }
    }
    return p->dtype == FLASHC_F64 ? bwd_f64(p) : bwd_f32(p);
}
