/* Attention backward: the AVX2 + FMA microkernels (fp32 working precision;
 * F64 uses the portable path), attn_bwd_simd_body.h over simd_avx2.h.
 * Compiled with AVX2 flags only (CMakeLists.txt). See attn_bwd.h for what
 * each one computes. */
#include "attn_bwd.h"
#include "simd_avx2.h"
#include "simd_score.h"

#define FN(x) fc_bwd_avx2_##x
/* GEMM register tile 6 rows × 2 vectors (16 columns): 12 accumulators + 2 b
 * + 1 broadcast of the 16 ymm registers. */
#define FC_BWD_NV 2
#include "attn_bwd_simd_body.h"

const fc_bwd_kern fc_bwd_avx2_f32 = {4, FC_LOG2E, FN(gemm), FN(gemm_vis), FN(ew_q), FN(ew_k), FN(pack)};
