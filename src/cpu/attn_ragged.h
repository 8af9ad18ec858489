/*
 * attn_ragged.h — the CPU backend of ragged batches and KV caches (flashc.h,
 * "Ragged batches and KV caches"): problems with fc_attn_is_ragged(a).
 * fc_cpu_attn_fwd / fc_cpu_attn_bwd hand those to these; attn_ragged.c says
 * how they run.
 */
#ifndef FLASHC_CPU_ATTN_RAGGED_H
#define FLASHC_CPU_ATTN_RAGGED_H

#include "flashc_internal.h"

/* Varlen or KV cache forward (KV append included). */
flashc_status fc_cpu_attn_ragged_fwd(const fc_attn *a);
/* Varlen backward. */
flashc_status fc_cpu_attn_ragged_bwd(const fc_attn *a);

#endif /* FLASHC_CPU_ATTN_RAGGED_H */
