/* CPU weighted row-sum: entry points of the SIMD paths (weighted_sum_avx2.c,
 * weighted_sum_avx512.c, both built from weighted_sum_body.h) and what they
 * share with the plain-C reference in weighted_sum.c. */
#ifndef FLASHC_CPU_WEIGHTED_SUM_H
#define FLASHC_CPU_WEIGHTED_SUM_H

#include "flashc_internal.h"

/* Rows per dw partial block: a function of R only, never of the thread
 * count, so dw is bit-identical for any number of threads. */
static inline int64_t fc_wsum_rows_per_block(int64_t R) {
    int64_t rpb = (R + 4095) / 4096;
    return rpb < 64 ? 64 : rpb;
}

/* The SIMD paths take the case where every D-axis that is read or written
 * is unit-stride (x_dstr, dx_dstr; w and dw may have any stride), D > 0,
 * R > 0. Anything else stays on the reference path. */
static inline int fc_wsum_simd_ok_fwd(const fc_wsum *p) {
    return p->D > 0 && p->R > 0 && (p->x_dstr == 1 || p->D == 1);
}
static inline int fc_wsum_simd_ok_bwd(const fc_wsum *p) {
    return p->D > 0 && p->R > 0 && (!p->dw || p->x_dstr == 1 || p->D == 1) &&
           (!p->dx || p->dx_dstr == 1 || p->D == 1);
}

flashc_status fc_wsum_fwd_avx2(const fc_wsum *p);
flashc_status fc_wsum_bwd_avx2(const fc_wsum *p);
flashc_status fc_wsum_fwd_avx512(const fc_wsum *p);
flashc_status fc_wsum_bwd_avx512(const fc_wsum *p);

#endif
