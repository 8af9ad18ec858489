/* AVX-512 (F/BW/VL/DQ + FMA, F16C) weighted row-sum: weighted_sum_body.h on
 * the AVX-512 vocabulary (simd_avx512.h). Built with only this ISA's flags. */
#include "weighted_sum.h"
#include "simd_avx512.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define FN(x) fc_wsum_avx512_##x
#include "weighted_sum_body.h"

flashc_status fc_wsum_fwd_avx512(const fc_wsum *p) { return FN(fwd)(p); }
flashc_status fc_wsum_bwd_avx512(const fc_wsum *p) { return FN(bwd)(p); }
