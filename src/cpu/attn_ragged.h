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

/* attn_fwd.c: the forward of one sequence as attn_ragged.c hands it over
 * (B = 1; dense, or paged with only block_table, sbt, page_size, max_pages
 * and Bk of the ragged fields set: the forward paths read its pages through
 * fc_kv_rows), and of every dense problem. */
flashc_status fc_cpu_attn_fwd_one(const fc_attn *a);

#endif /* FLASHC_CPU_ATTN_RAGGED_H */
