/*
 * attn_tc.h — the tensor-core attention kernels (src/cuda/attn_fwd_tc.cu,
 * attn_fwd_wgmma.cu, attn_bwd_tc.cu). Each returns FLASHC_ERR_UNSUPPORTED, without launching
 * anything and without recording an error, when it declines a case; the
 * dispatcher (module.cu) then runs the generic SIMT kernels
 * (attn_generic_*.cu). Any other status is final.
 */
#ifndef FC_ATTN_TC_H
#define FC_ATTN_TC_H

#include "flashc_internal.h"

flashc_status fc_cuda_attn_fwd_tc(const fc_attn *a);
/* Hopper wgmma + TMA forward (attn_fwd_wgmma.cu, sm_90a code only): call it
 * only on a compute capability 9.0 device. F16/BF16, D ∈ {64, 128}. */
flashc_status fc_cuda_attn_fwd_wgmma(const fc_attn *a);
flashc_status fc_cuda_attn_bwd_tc(const fc_attn *a);

#endif
