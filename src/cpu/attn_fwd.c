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
    if (fc_attn_is_ragged(a)) return fc_cpu_attn_ragged_fwd(a); /* per sequence, into fc_cpu_attn_fwd_one */
    return fc_cpu_attn_fwd_one(a);
}

flashc_status fc_cpu_attn_fwd_one(const fc_attn *a) {
    if (a->Sq == 0) return FLASHC_OK;
    const fc_cpu_env env = fc_cpu_env_read();
    return fc_fwd_run_path(fc_plan_fwd(a, &env), a); /* plan.h */
}

/* The driver shared by the SIMD paths (attn_fwd_body.h, attn_fwd_avx512bf16.c):
 * work items (b, kv head, block of br rows of the group's query rows[, key
 * split]), sorted heaviest first under schedule(dynamic, 1), one zeroed
 * scratch per thread; then, with splits, one merge per (b, kv head, block)
 * (attn_fwd.h, "key splits"). */
flashc_status fc_fwd_run_grouped(const fc_attn *a, const fc_fwd_kernel *kn) {
    const int64_t G = a->Hq / a->Hkv, R = a->Sq * G, br = kn->br;
    const int64_t nblk = (R + br - 1) / br, nouter = a->B * a->Hkv;
    if (nblk == 0) return FLASHC_OK;
    int64_t *bkeys = (int64_t *)malloc((size_t)nblk * sizeof(int64_t)); /* keys of each row block */
    if (!bkeys) return fc_set_error(FLASHC_ERR_OUT_OF_MEMORY, "attn_fwd: %lld row blocks", (long long)nblk);
    const fc_mask mk = fc_attn_mask(a);
    int64_t maxkeys = 0;
    for (int64_t t = 0; t < nblk; ++t) {
        const int64_t r0 = t * br, r1 = (r0 + br < R ? r0 + br : R);
        fc_keysegs ks;
        fc_block_keysegs(&mk, r0 / G, (r1 - 1) / G, &ks);
        bkeys[t] = fc_keysegs_count(&ks);
        if (bkeys[t] > maxkeys) maxkeys = bkeys[t];
    }
    const int64_t ns = fc_fwd_nsplit(nouter * nblk, maxkeys, FC_FWD_SPLIT_TARGET, FC_FWD_SPLIT_KEYS);
    const int64_t nitems = nouter * nblk * ns, per_part = br * kn->dp + 2 * br;
    fc_work *work = (fc_work *)malloc((size_t)nitems * sizeof(fc_work));
    float *part = ns > 1 ? (float *)malloc((size_t)(nitems * per_part) * sizeof(float)) : NULL;
    if (!work || (ns > 1 && !part)) {
        free(bkeys), free(work), free(part);
        return fc_set_error(FLASHC_ERR_OUT_OF_MEMORY, "attn_fwd: work list of %lld items", (long long)nitems);
    }
    /* Item (u = b·Hkv + hk, t, s): blk = t·ns + s, its partial at part + ((u·nblk + t)·ns + s)·per_part.
     * Among equal costs batch by batch, block by block, split by split, kv
     * heads innermost: the heads of one key range run one after another (in
     * a [Sk, Hkv, D] cache their K/V rows share pages, each key's heads being
     * one span: 7–17 % off chunks of 4–16 tokens on the dev VM, TLB and DRAM
     * page reuse), and a batch's blocks before the next batch's (its K/V
     * read again while still in L3). */
    for (int64_t t = 0; t < nblk; ++t) {
        const int64_t rows = (t * br + br < R ? br : R - t * br);
        for (int64_t sp = 0; sp < ns; ++sp) {
            int64_t p0, p1;
            fc_fwd_split(bkeys[t], sp, ns, kn->bc, &p0, &p1);
            for (int64_t u = 0; u < nouter; ++u)
                work[(u * nblk + t) * ns + sp] = (fc_work){
                    u, t * ns + sp, (p1 - p0 + 1) * rows, ((u / a->Hkv * nblk + t) * ns + sp) * a->Hkv + u % a->Hkv};
        }
    }
    qsort(work, (size_t)nitems, sizeof(fc_work), fc_work_cmp);

    int nt = omp_get_max_threads();
    if ((int64_t)nt > nitems) nt = (int)nitems;
    /* per thread: the kernel's scratch, then (splits) one merged partial */
    const size_t ks_ = (kn->scratch_floats + 15) & ~(size_t)15;
    const size_t per = ks_ + (ns > 1 ? ((size_t)per_part + 15) & ~(size_t)15 : 0); /* 64-byte rows */
    float *scratch = (float *)aligned_alloc(64, (size_t)nt * per * sizeof(float));
    if (!scratch) {
        free(bkeys), free(work), free(part);
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
        for (int64_t x = 0; x < nitems; ++x) {
            const int64_t u = work[x].outer, t = work[x].blk / ns, sp = work[x].blk % ns;
            int64_t p0, p1;
            fc_fwd_split(bkeys[t], sp, ns, kn->bc, &p0, &p1);
            kn->block(a, u / a->Hkv, u % a->Hkv, t * br, p0, p1, ws,
                      ns > 1 ? part + ((u * nblk + t) * ns + sp) * per_part : NULL);
        }
        if (ns > 1) {
            float *o = ws + ks_, *m = o + br * kn->dp, *l = m + br;
#pragma omp for schedule(static)
            for (int64_t y = 0; y < nouter * nblk; ++y) {
                const int64_t u = y / nblk, t = y % nblk, r0 = t * br, nr = (r0 + br < R ? br : R - r0);
                fc_fwd_merge(part + y * ns * per_part, per_part, ns, br, nr, kn->dp, o, m, l);
                kn->finish(a, u / a->Hkv, u % a->Hkv, r0, nr, o, kn->dp, m, l);
            }
        }
    }
    free(scratch);
    free(part);
    free(work);
    free(bkeys);
    return FLASHC_OK;
}
