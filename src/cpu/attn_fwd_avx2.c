/* AVX2 + FMA attention forward (F32/F16/BF16, fp32 arithmetic): the bodies
 * attn_fwd_body.h and attn_fwd_decode_body.h on the AVX2 vocabulary
 * (simd_avx2.h). Built with -mavx2 -mfma -mf16c only.
 *
 * Register blocking (16 ymm): S = Q·Kᵀ is 4 keys × 24 query rows and
 * O += P·V is 4 head dims × 24 query rows: 12 accumulators, 3 row loads and
 * one broadcast register. Two ymm FMAs per cycle at 4-cycle latency need ≥ 8
 * chains. A block is 96 rows (four 24-row groups), a tile 128 keys: measured
 * best on the 2-core Zen 4 dev machine (benchmarks/NOTES.md). */
#include "attn_fwd.h"
#include "simd_avx2.h"
#include "simd_score.h"

#include <omp.h>
#include <string.h>

#define FN(x) fc_avx2_##x
#define FC_BR 96
#define FC_BC 128
#define FC_RG 24       /* query rows per register block of both kernels */
#define FC_QK_KB 4     /* keys per QK register block */
#define FC_PV_DBLOCK 4 /* head dims per PV register block */
#define FC_SM_NV 2     /* row vectors per softmax pass */
#include "attn_fwd_body.h"

#define FC_DEC_ROWBLK 2
#include "attn_fwd_decode_body.h"

/* The plan (plan.h) picks between the two: the decode path for few query
 * rows per (b, kv head). */
flashc_status fc_attn_fwd_avx2_f32(const fc_attn *a) { return FN(run)(a); }
flashc_status fc_attn_fwd_avx2_decode(const fc_attn *a) { return FN(dec_run)(a); }
