/*
 * attn_bwd.h — private to the CPU attention backward (src/cpu/attn_bwd*.c).
 *
 * The driver (attn_bwd.c) walks tiles and packs them; each ISA file provides
 * one table of microkernels that work on packed tiles in the working
 * precision ("real": float for F32/F16/BF16, double for F64). Buffers are
 * passed as void * so that one driver serves both precisions; esz says which.
 */
#ifndef FC_CPU_ATTN_BWD_H
#define FC_CPU_ATTN_BWD_H

#include <stddef.h>
#include <stdint.h>

#include "flashc_internal.h"

/* Tile extents: BR query rows × BC key rows. Column counts handed to the
 * microkernels are multiples of FC_BWD_NPAD (the widest vector, 16 floats). */
#define FC_BWD_BR 64
#define FC_BWD_BC 64
#define FC_BWD_NPAD 16

typedef struct fc_bwd_kern {
    size_t esz; /* bytes per real: 4 (float) or 8 (double) */

    /* c[m*ldc + n] (+)= Σ_{k<K} a[m*ars + k*acs] · b[k*ldb + n]
     * for m < M, n < N; N is a multiple of FC_BWD_NPAD. accumulate = 0
     * overwrites c (also when K = 0). Each c element is summed in k order. */
    void (*gemm)(int M, int N, int K, const void *a, ptrdiff_t ars, ptrdiff_t acs,
                 const void *b, ptrdiff_t ldb, void *c, ptrdiff_t ldc, int accumulate);

    /* Elementwise step of one tile, rows = queries, columns = keys (pass 1).
     * In: s = raw scores q·k (unscaled), dp = dO·vᵀ. Row r, column c is visible
     * when c < se[r] || (lo[r] ≤ c < hi[r]). Out (in place):
     *   s  ← P  = visible ? exp(scale·s − L[r]) : 0
     *   dp ← dS' = scale · P · (dp − delta[r])           (scale folded in)
     * ncols is a multiple of FC_BWD_NPAD. */
    void (*ew_q)(int rows, int ncols, void *s, void *dp, ptrdiff_t ld, const void *L,
                 const void *delta, double scale, const int32_t *se, const int32_t *lo,
                 const int32_t *hi);

    /* The same with the tile transposed (pass 2): rows = keys, columns =
     * queries; L, delta, se, lo, hi are indexed by the column, and row r is
     * visible to column c when r < se[c] || (lo[c] ≤ r < hi[c]). */
    void (*ew_k)(int rows, int ncols, void *s, void *dp, ptrdiff_t ld, const void *L,
                 const void *delta, double scale, const int32_t *se, const int32_t *lo,
                 const int32_t *hi);

    /* dst[r*ld + c] = (real) src[r*rs + c*cs] for r < rows, c < cols, and 0
     * for cols ≤ c < cols_pad. src has dtype `dtype`. */
    void (*pack)(int dtype, const void *src, int64_t rs, int64_t cs, int rows, int cols,
                 int cols_pad, void *dst, ptrdiff_t ld);
} fc_bwd_kern;

extern const fc_bwd_kern fc_bwd_scalar_f32;
extern const fc_bwd_kern fc_bwd_scalar_f64;
extern const fc_bwd_kern fc_bwd_avx2_f32;
extern const fc_bwd_kern fc_bwd_avx512_f32;

/* The portable pack (any strides, any dtype; float or double destination per
 * esz); the SIMD packs fall back to it off their fast path. */
void fc_bwd_pack_generic(size_t esz, int dtype, const void *src, int64_t rs, int64_t cs,
                         int rows, int cols, int cols_pad, void *dst, ptrdiff_t ld);

#endif /* FC_CPU_ATTN_BWD_H */
