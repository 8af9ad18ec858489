/*
 * host_prof.h — optional timestamps along one call's host path (issue 9: a
 * decode step's CPU time before its first kernel). Off unless
 * FLASHC_HOST_PROF is defined when the library and module are compiled; then
 * each shared object keeps a thread-local array of CLOCK_MONOTONIC
 * nanoseconds (the clock of Python's time.perf_counter_ns) that a mark
 * overwrites, exported as flashc_host_prof_marks (core library) and
 * flashc_cuda_host_prof_marks (CUDA module) for benchmarks/prof_host_path.py
 * (cmake -DFLASHC_HOST_PROF=ON). Marks, core (attention.c): 0 flashc_attn_fwd
 * entered, 4 knobs checked, 1 validated, 2 backend resolved, 3 returned;
 * module: 0 entered, 1 fcc_attn built, 2 planned, 3 tensor maps (TMA decode),
 * 4 scratch, 5 shared-memory attribute, 6 first launch, 7 second launch,
 * 8 scratch returned (decode).
 */
#ifndef FLASHC_COMMON_HOST_PROF_H
#define FLASHC_COMMON_HOST_PROF_H
#ifdef FLASHC_HOST_PROF
#include <stdint.h>
#include <time.h>
enum { FC_PROF_N = 16 };
static inline uint64_t fc_prof_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}
#define FC_PROF_MARK(arr, i) ((arr)[i] = fc_prof_now())
#ifdef __cplusplus
extern thread_local uint64_t fcc_prof_marks[FC_PROF_N]; /* the CUDA module's (attn_dispatch.cu) */
#endif
#else
#define FC_PROF_MARK(arr, i) ((void)0)
#endif
#endif /* FLASHC_COMMON_HOST_PROF_H */
