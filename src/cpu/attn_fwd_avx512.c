/* AVX-512 attention forward (F32/F16/BF16, fp32 arithmetic): the bodies
 * attn_fwd_body.h and attn_fwd_decode_body.h on the AVX-512 vocabulary
 * (simd_avx512.h). Built with -mavx512f/bw/vl/dq -mfma -mf16c only.
 *
 * Register blocking (32 zmm): S = Q·Kᵀ is 8 keys × 32 query rows (16
 * accumulators, 2 query loads + 8 broadcasts per d); O += P·V is 8 head dims
 * × 32 query rows (16 accumulators, 2 P loads + 8 broadcasts per key). One
 * zmm FMA per cycle (Zen 4 runs them as two 256-bit halves) at 4-cycle
 * latency needs ≥ 4 chains; 16 leaves the load ports slack. Blocks of 128
 * rows × tiles of 128 keys measured best (benchmarks/NOTES.md): at D = 256
 * the per-thread scratch is ~600 KB, inside the 1 MB L2.
 *
 * BF16 on a CPU with AVX512_BF16 goes to attn_fwd_avx512bf16.c instead
 * (bf16 dot products), except on the decode path (plan.h). */
#include "attn_fwd.h"
#include "simd_avx512.h"
#include "simd_score.h"

#include <omp.h>
#include <string.h>

#define FN(x) fc_avx512_##x
#define FC_BR 128
#define FC_BC 128
#define FC_RG 32       /* query rows per register block of both kernels */
#define FC_QK_KB 8     /* keys per QK register block */
#define FC_PV_DBLOCK 8 /* head dims per PV register block */
#define FC_SM_NV 8     /* row vectors per softmax pass: the whole block */
#include "attn_fwd_body.h"

#define FC_DEC_ROWBLK 4
#include "attn_fwd_decode_body.h"

/* The plan (plan.h) picks between the two: the decode path for few query
 * rows per (b, kv head). */
flashc_status fc_attn_fwd_avx512_f32(const fc_attn *a) { return FN(run)(a); }
flashc_status fc_attn_fwd_avx512_decode(const fc_attn *a) { return FN(dec_run)(a); }
