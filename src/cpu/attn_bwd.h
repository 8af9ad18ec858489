/*
 * attn_bwd.h — private to the CPU attention backward (src/cpu/attn_bwd*.c).
 *
 * The driver (attn_bwd.c) walks tiles and packs them; each ISA file provides
 * one table of microkernels that work on packed tiles in the working
 * precision ("real": float for F32/F16/BF16, double for F64). Buffers are
 * passed as void * so that one driver serves both precisions; esz says which.
 * The scalar table (attn_bwd_scalar.c) is the oracle; the AVX2 and AVX-512
 * tables are one body (attn_bwd_simd_body.h) over the vector vocabulary of
 * simd_<isa>.h and simd_score.h.
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

/* The score pipeline of one tile (attn_score.h), in the microkernels' unit:
 * u = mod.qk_mul·s, t = tanh(u), x = fc_score(mod, u, t, dist) with the ALiBi
 * distance dist = i + Sk − Sq − j = dist0 + (query − key) in tile coordinates.
 * dS' carries the softmax scale and the pipeline's derivative, so the tile
 * products are dQ = dS' K, dK = dS'ᵀ Q. A head with mod.cap = mod.slope = 0
 * (fc_bwd_score_plain) takes the microkernels' plain loop: x = u. */
typedef struct fc_bwd_score {
    fc_score_mod mod; /* fc_score_mod_make(params, b, h, kern->unit) */
    double scale;     /* the softmax scale */
    double dist0;     /* i0 + Sk − Sq − j0: the distance of tile element (query i0, key j0) */
} fc_bwd_score;

static inline int fc_bwd_score_plain(const fc_bwd_score *sc) {
    return sc->mod.cap == 0.0 && sc->mod.slope == 0.0;
}

typedef struct fc_bwd_kern {
    size_t esz;  /* bytes per real: 4 (float) or 8 (double) */
    double unit; /* 1: natural logits (the oracle); FC_LOG2E: the exp2 domain.
                  * L (the log-sum-exp) is handed to ew_* multiplied by it. */

    /* c[m*ldc + n] (+)= Σ_{k<K} a[m*ars + k*acs] · b[k*ldb + n]
     * for m < M, n < N; N is a multiple of FC_BWD_NPAD. accumulate = 0
     * overwrites c (also when K = 0). Each c element is summed in k order. */
    void (*gemm)(int M, int N, int K, const void *a, ptrdiff_t ars, ptrdiff_t acs,
                 const void *b, ptrdiff_t ldb, void *c, ptrdiff_t ldc, int accumulate);

    /* The accumulating gemm over only the pairs (m, k) whose query sees the
     * key: q_is_m = 1 when m is the tile's query row and k the key (visible
     * when FC_KEY_VISIBLE(se[m], lo[m], hi[m], k)), q_is_m = 0 the reverse
     * (se[k], …, m). For b operands holding Inf/NaN (attn_bwd.c, ctx.guard_*):
     * an invisible pair adds nothing, where gemm adds 0·NaN. On the visible
     * pairs the arithmetic and the order are gemm's, and a is 0 on the
     * invisible ones, so on finite data both give the same bits (up to the
     * sign of a zero sum). */
    void (*gemm_vis)(int M, int N, int K, const void *a, ptrdiff_t ars, ptrdiff_t acs,
                     const void *b, ptrdiff_t ldb, void *c, ptrdiff_t ldc, int q_is_m,
                     const int32_t *se, const int32_t *lo, const int32_t *hi);

    /* Elementwise step of one tile, rows = queries, columns = keys (pass 1).
     * In: s = raw scores <q, k> (unscaled), dp = dO·vᵀ, L = unit·lse and
     * delta = Δ per row. Row r sees column c when
     * FC_KEY_VISIBLE(se[r], lo[r], hi[r], c). Out (in place), with
     * t = tanh(u) and x the modified logit in `unit` (fc_bwd_score):
     *   s  ← P   = visible ? exp_unit(x − L[r]) : 0
     *   dp ← dS' = visible ? scale · fc_score_dgrad(mod, t) · P · (dp − delta[r]) : 0
     * Invisible entries are selected to 0, never multiplied by 0: s and dp
     * may hold Inf/NaN there. ncols is a multiple of FC_BWD_NPAD. */
    void (*ew_q)(int rows, int ncols, void *s, void *dp, ptrdiff_t ld, const void *L,
                 const void *delta, const fc_bwd_score *sc, const int32_t *se,
                 const int32_t *lo, const int32_t *hi);

    /* The same with the tile transposed (pass 2): rows = keys, columns =
     * queries; L, delta, se, lo, hi are indexed by the column (ncols entries
     * readable), row r is visible to column c when
     * FC_KEY_VISIBLE(se[c], lo[c], hi[c], r), and the distance of element
     * (r, c) is dist0 + c − r. */
    void (*ew_k)(int rows, int ncols, void *s, void *dp, ptrdiff_t ld, const void *L,
                 const void *delta, const fc_bwd_score *sc, const int32_t *se,
                 const int32_t *lo, const int32_t *hi);

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

/* AVX512-BF16 pieces (attn_bwd_avx512bf16.c), for BF16 inputs when
 * fc_cpu_has_avx512bf16(). Operands hold bf16 pairs along the reduction axis
 * (uint32: low half = even k, high half = odd k); cols / N are multiples of
 * FC_BWD_NPAD.
 * gemm: c[m*ldc + n] (+)= Σ_{k2<K2} a_pair[m*ars + k2*acs] · b_pair[k2*ldb + n]
 *       (vdpbf16ps, fp32 accumulation; accumulate = 0 overwrites c).
 * cvt_rows:  dst[r*ldd + c] = bf16(src[r*lds + c]) (pairs = adjacent columns).
 * pair_rows: dst[(r/2)*ldd + c] = (bf16(src[r][c]), bf16(src[r+1][c])) for
 *            even r < rows; an odd last row is paired with 0. */
void fc_bwd_bf16_gemm(int M, int N, int K2, const uint32_t *a, ptrdiff_t ars, ptrdiff_t acs,
                      const uint32_t *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int accumulate);
/* gemm_vis (above) for the pair layout, accumulating: K is the real
 * reduction length (pairs K2 = ⌈K/2⌉; an index k ≥ K is invisible). A pair
 * with one invisible member has that member's b half zeroed, so the visible
 * product is vdpbf16ps's as in fc_bwd_bf16_gemm. */
void fc_bwd_bf16_gemm_vis(int M, int N, int K, const uint32_t *a, ptrdiff_t ars, ptrdiff_t acs,
                          const uint32_t *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int q_is_m,
                          const int32_t *se, const int32_t *lo, const int32_t *hi);
/* fc_bwd_bf16_gemm on AMX tiles (FLASHC_HAVE_AMX; only called where
 * fc_cpu_has_amx()): whole blocks of 16 rows × 16 pairs on TDPBF16PS, the
 * rest (rows past the last whole block, pairs past the last whole 16) on
 * fc_bwd_bf16_gemm. Same sums, same fp32 accumulation (the tile unit
 * flushes denormals). */
void fc_bwd_amx_gemm(int M, int N, int K2, const uint32_t *a, ptrdiff_t ars, ptrdiff_t acs,
                     const uint32_t *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int accumulate);
/* gemm_vis beside fc_bwd_amx_gemm: the same bits as fc_bwd_amx_gemm on the
 * terms of finite b (b scrubbed of Inf/NaN, so that a call whose b holds
 * non-finite values only where a row cannot see them gives an unguarded
 * call's bits), then each non-finite b's terms added for the rows that see
 * it (gemm_vis's rule). */
void fc_bwd_amx_gemm_vis(int M, int N, int K, const uint32_t *a, ptrdiff_t ars, ptrdiff_t acs,
                         const uint32_t *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int q_is_m,
                         const int32_t *se, const int32_t *lo, const int32_t *hi);
void fc_bwd_bf16_cvt_rows(const float *src, ptrdiff_t lds, int rows, int cols, uint16_t *dst,
                          ptrdiff_t ldd);
void fc_bwd_bf16_pair_rows(const float *src, ptrdiff_t lds, int rows, int cols, uint32_t *dst,
                           ptrdiff_t ldd);
/* pack_both: from bf16 rows with unit column stride (src[r*rs + c]), both
 * forms at once: rows as cvt_rows, pairs of rows as pair_rows; cols_pad a
 * multiple of FC_BWD_NPAD, zeros from cols on. */
void fc_bwd_bf16_pack_both(const uint16_t *src, int64_t rs, int rows, int cols, int cols_pad,
                           uint16_t *dst_rows, ptrdiff_t ldr, uint32_t *dst_pairs, ptrdiff_t ldp);

#endif /* FC_CPU_ATTN_BWD_H */
