/* Attention backward: the AVX-512 microkernels (fp32 working precision; F64
 * uses the portable path), attn_bwd_simd_body.h over simd_avx512.h.
 * Compiled with AVX-512 flags only (CMakeLists.txt). See attn_bwd.h for what
 * each one computes. */
#include "attn_bwd.h"
#include "simd_avx512.h"
#include "simd_score.h"

#define FN(x) fc_bwd_avx512_##x
/* GEMM register tile 6 rows × 4 vectors (64 columns): 24 accumulators + 4 b
 * + 1 broadcast of the 32 zmm registers. */
#define FC_BWD_NV 4
#include "attn_bwd_simd_body.h"

const fc_bwd_kern fc_bwd_avx512_f32 = {4, FC_LOG2E, FN(gemm), FN(gemm_vis), FN(ew_q), FN(ew_k), FN(pack)};
