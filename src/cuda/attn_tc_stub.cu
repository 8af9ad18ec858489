/*
 * attn_tc_stub.cu — placeholder so the module links before the tensor-core
 * kernels land: each entry declines every case until its file exists
 * (src/cuda/CMakeLists.txt defines FLASHC_HAVE_TC_FWD when attn_fwd_tc.cu
 * exists, FLASHC_HAVE_TC_BWD when attn_bwd_tc.cu does). Delete this file
 * once both exist.
 */
#include "attn_tc.h"

#if !defined(FLASHC_HAVE_TC) && !defined(FLASHC_HAVE_TC_FWD)
flashc_status fc_cuda_attn_fwd_tc(const fc_attn *a) { (void)a; return FLASHC_ERR_UNSUPPORTED; }
#endif
#if !defined(FLASHC_HAVE_TC) && !defined(FLASHC_HAVE_TC_BWD)
flashc_status fc_cuda_attn_bwd_tc(const fc_attn *a) { (void)a; return FLASHC_ERR_UNSUPPORTED; }
#endif
