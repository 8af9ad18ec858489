/*
 * attn_bwd_tc.cu — tensor-core attention backward for F16/BF16: NOT YET
 * IMPLEMENTED. It declines every case (FLASHC_ERR_UNSUPPORTED, no message),
 * so attn_dispatch.cu runs the generic SIMT backward (attn_generic_bwd.cu).
 *
 * Planned design (same building blocks as attn_fwd_tc.cu, tc_common.cuh):
 *   1. Δ_i = Σ_d dO_id · O_id (fp32), one pass over dO and O.
 *   2. dK, dV per key block, deterministic: a CTA owns BN keys of one K/V
 *      head and loops over the query tiles that see them (all query heads of
 *      the GQA group, in a fixed order), computing the transposed products
 *      so that every operand is an ldmatrix fragment and nothing is
 *      transposed through registers:
 *        S^T = K Q^T,  P^T = exp(S^T·scale − L),  dV += P^T dO,
 *        dP^T = V dO^T, dS^T = P^T ∘ (dP^T − Δ),   dK += scale · dS^T Q.
 *   3. dQ per query block (the forward's loop with dP = dO V^T,
 *      dS = P ∘ (dP − Δ), dQ += scale · dS K); or, when deterministic == 0,
 *      dQ by fp32 atomics from pass 2.
 *   4. d s_h = −Σ_{b,i} exp(s_h − L_i) Δ_i by a fixed-order per-head reduction.
 */
#include "attn_tc.h"

flashc_status fc_cuda_attn_bwd_tc(const fc_attn *a) {
    (void)a;
    return FLASHC_ERR_UNSUPPORTED;
}
