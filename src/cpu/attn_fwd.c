/* CPU attention forward: picks the path once per call. The problem `a` has
 * been validated and normalised by the core (src/attention.c); see
 * attn_fwd.h for the algorithm and flashc.h for the semantics. */
#include "attn_fwd.h"
#include "attn_ragged.h"
#include "plan.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

flashc_status fc_cpu_attn_fwd(const fc_attn *a) {
    if (fc_attn_is_ragged(a)) return fc_cpu_attn_ragged_fwd(a); /* per sequence, back through here */
    if (a->Sq == 0) return FLASHC_OK;
    const fc_cpu_env env = fc_cpu_env_read();
    return fc_fwd_run_path(fc_plan_fwd(a, &env), a); /* plan.h */
}

/* The driver shared by the SIMD paths (attn_fwd_body.h, attn_fwd_avx512bf16.c):
 * work items (b, kv head, block of br rows of the group's query rows), sorted
 * heaviest first under schedule(dynamic, 1), one zeroed scratch per thread. */
flashc_status fc_fwd_run_grouped(const fc_attn *a, int64_t br, size_t scratch_floats, fc_fwd_block_fn block) {
    const int64_t G = a->Hq / a->Hkv, R = a->Sq * G;
    const int64_t nblk = (R + br - 1) / br, nouter = a->B * a->Hkv;
    if (nblk == 0) return FLASHC_OK;
    const int64_t nitems = nouter * nblk;
    fc_work *work = (fc_work *)malloc((size_t)nitems * sizeof(fc_work));
    if (!work) return fc_set_error(FLASHC_ERR_OUT_OF_MEMORY, "attn_fwd: work list of %lld items",
                                   (long long)nitems);
    const fc_mask mk = fc_attn_mask(a);
    for (int64_t t = 0; t < nblk; ++t) {
        const int64_t r0 = t * br, r1 = (r0 + br < R ? r0 + br : R);
        fc_keysegs ks;
        fc_block_keysegs(&mk, r0 / G, (r1 - 1) / G, &ks);
        int64_t keys = 0;
        for (int sg = 0; sg < ks.n; ++sg) keys += ks.s1[sg] - ks.s0[sg];
        for (int64_t u = 0; u < nouter; ++u) work[u * nblk + t] = (fc_work){u, t, (keys + 1) * (r1 - r0)};
    }
    qsort(work, (size_t)nitems, sizeof(fc_work), fc_work_cmp);

    int nt = omp_get_max_threads();
    if ((int64_t)nt > nitems) nt = (int)nitems;
    const size_t per = (scratch_floats + 15) & ~(size_t)15; /* 64-byte rows */
    float *scratch = (float *)aligned_alloc(64, (size_t)nt * per * sizeof(float));
    if (!scratch) {
        free(work);
        return fc_set_error(FLASHC_ERR_OUT_OF_MEMORY, "attn_fwd: %zu bytes of scratch",
                            (size_t)nt * per * sizeof(float));
    }
#pragma omp parallel num_threads(nt)
    {
        float *ws = scratch + (size_t)omp_get_thread_num() * per;
        /* The packed V tile's padding columns (D..dp) must be finite: the PV
         * kernel reads them (their results are never stored). */
        memset(ws, 0, per * sizeof(float));
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < nitems; ++t) {
            const int64_t u = work[t].outer;
            block(a, u / a->Hkv, u % a->Hkv, work[t].blk * br, ws);
        }
    }
    free(scratch);
    free(work);
    return FLASHC_OK;
}
