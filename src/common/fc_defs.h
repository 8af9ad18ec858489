/*
 * fc_defs.h — the few definitions every part of flashc shares, host and
 * device: the host/device qualifier and the constants of the exp2 domain.
 * Plain C (C11 and CUDA C++). Private; not installed.
 */
#ifndef FLASHC_COMMON_DEFS_H
#define FLASHC_COMMON_DEFS_H

#include <stdint.h>

#if defined(__CUDACC__)
#  define FC_HOST_DEVICE __host__ __device__
#else
#  define FC_HOST_DEVICE
#endif

/* log2(e) and ln(2): scores are moved into the exp2 domain by multiplying
 * with FC_LOG2E (exp(x) = exp2(x·log2 e)) and back with FC_LN2. */
#define FC_LOG2E 1.4426950408889634
#define FC_LN2 0.6931471805599453
#define FC_LOG2E_F 1.4426950408889634f
#define FC_LN2_F 0.6931471805599453f

#endif /* FLASHC_COMMON_DEFS_H */
