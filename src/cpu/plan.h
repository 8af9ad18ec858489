/*
 * plan.h — which CPU kernel runs a problem: one pure plan function per
 * direction (problem + machine facts → path enum), as the CUDA module's
 * fcc_plan_fwd / fcc_plan_bwd (src/cuda/attn_params.cuh). Each path says
 * what it supports; the plan takes the first that does, in order of speed.
 * The machine facts and the FLASHC_CPU_* knobs are read once per call into
 * an fc_cpu_env (the knobs through src/common/knobs.h, nowhere else), so
 * that the plans themselves read nothing but their arguments.
 */
#ifndef FLASHC_CPU_PLAN_H
#define FLASHC_CPU_PLAN_H

#include "flashc_internal.h"

typedef struct fc_cpu_env {
    int isa;          /* fc_cpu_isa_level(): FC_ISA_*, capped by FLASHC_CPU_ISA */
    int bf16;         /* fc_cpu_has_avx512bf16(): AVX512-BF16 usable (FLASHC_CPU_BF16) */
    int amx;          /* fc_cpu_has_amx(): the AMX-BF16 forward usable (FLASHC_CPU_AMX) */
    long decode_rows; /* FLASHC_CPU_DECODE_ROWS, FC_KNOB_AUTO = the ISA's default */
    int bwd_twopass;  /* FLASHC_CPU_BWD=twopass */
} fc_cpu_env;

/* Reads the machine and the knobs (at every call: tests change knobs). */
fc_cpu_env fc_cpu_env_read(void);

/* ------------------------------------------------------------ forward */
/* Append-only values; the plan tries them in fc_fwd_order (fastest first). */
typedef enum fc_fwd_path {
    FC_FWD_SCALAR_F64 = 0,    /* F64, every ISA (the reference precision) */
    FC_FWD_AVX512_DECODE = 1, /* few query rows: keys on the lanes (attn_fwd_decode_body.h) */
    FC_FWD_AVX512BF16 = 2,    /* BF16 on vdpbf16ps */
    FC_FWD_AVX512 = 3,
    FC_FWD_AVX2_DECODE = 4,
    FC_FWD_AVX2 = 5,
    FC_FWD_SCALAR = 6,        /* the fp32 oracle (FLASHC_CPU_ISA=scalar) */
    FC_FWD_AMX_BF16 = 7,      /* BF16 on AMX tiles (before AVX512BF16 in the plan) */
    FC_FWD_NPATHS
} fc_fwd_path;

int fc_fwd_supports(fc_fwd_path path, const fc_attn *a, const fc_cpu_env *e);
fc_fwd_path fc_plan_fwd(const fc_attn *a, const fc_cpu_env *e);
/* Runs path (its supports() held). */
flashc_status fc_fwd_run_path(fc_fwd_path path, const fc_attn *a);

/* ----------------------------------------------------------- backward */
/* The microkernel table (attn_bwd.h). Append-only values; the plan tries
 * them in fc_bwd_order (fastest first). */
typedef enum fc_bwd_path {
    FC_BWD_SCALAR_F64 = 0,
    FC_BWD_AVX512BF16 = 1, /* the AVX-512 table with the tile GEMMs on vdpbf16ps */
    FC_BWD_AVX512 = 2,
    FC_BWD_AVX2 = 3,
    FC_BWD_SCALAR = 4,
    FC_BWD_AMX_BF16 = 5,   /* as AVX512BF16 with the tile GEMMs on AMX (before it in the plan) */
    FC_BWD_NPATHS
} fc_bwd_path;

/* The schedule (attn_bwd.c): fused (5 tile GEMMs, dQ partials per chunk of
 * key blocks) or two-pass (7 GEMMs, no partials). */
typedef enum fc_bwd_sched { FC_BWD_FUSED = 0, FC_BWD_TWOPASS = 1 } fc_bwd_sched;

typedef struct fc_bwd_plan {
    fc_bwd_path path;
    fc_bwd_sched sched;
    int64_t nchunk; /* fused: key blocks split into this many chunks (a function of the shape only) */
} fc_bwd_plan;

int fc_bwd_supports(fc_bwd_path path, const fc_attn *a, const fc_cpu_env *e);
/* bc: keys per tile, dp: the padded head dim, esz: bytes per real of the
 * path's table (the fused partials are nchunk·B·Hq·Sq·dp reals). */
fc_bwd_plan fc_plan_bwd(const fc_attn *a, const fc_cpu_env *e, int64_t bc, int64_t dp);

#endif /* FLASHC_CPU_PLAN_H */
