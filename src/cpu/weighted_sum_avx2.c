/* AVX2 (+FMA, F16C) weighted row-sum: weighted_sum_body.h on the AVX2
 * vocabulary (simd_avx2.h). Built with -mavx2 -mfma -mf16c only. */
#include "weighted_sum.h"
#include "simd_avx2.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define FN(x) fc_wsum_avx2_##x
#include "weighted_sum_body.h"

flashc_status fc_wsum_fwd_avx2(const fc_wsum *p) { return FN(fwd)(p); }
flashc_status fc_wsum_bwd_avx2(const fc_wsum *p) { return FN(bwd)(p); }
