/*
 * attn_fwd_store.h — the end of a forward row block, shared by the SIMD
 * bodies (attn_fwd_body.h, attn_fwd_avx512bf16.c): included by them after
 * their FN(finish), with the ISA's vocabulary (fc_vf_transpose, FC_VF_W)
 * and the blocking (FC_BR) in scope.
 */

/* ot (dp, BR): the block's nr rows transposed back into rows; finished
 * through tmp ((VW, dp) rows) and FN(finish), or, with part, stored as the
 * partial (rows, then m, then l: fc_fwd_block_fn's layout). */
static void FN(block_store)(const fc_attn *a, int64_t b, int64_t hk, int64_t r0, int nr, const float *ot, int64_t dp,
                            float *tmp, const float *m, const float *l, float *part) {
    for (int rg = 0; rg < nr; rg += FC_VF_W) {
        /* rows[k][d] = ot[d][rg + k]: into tmp, or the partial's rows */
        float *rows = part ? part + rg * dp : tmp;
        for (int64_t d = 0; d < dp; d += FC_VF_W) fc_vf_transpose(ot + d * FC_BR + rg, FC_BR, rows + d, dp);
        if (!part) FN(finish)(a, b, hk, r0 + rg, nr - rg < FC_VF_W ? nr - rg : FC_VF_W, tmp, dp, m + rg, l + rg);
    }
    if (part) {
        memcpy(part + FC_BR * dp, m, (size_t)nr * sizeof(float));
        memcpy(part + FC_BR * dp + FC_BR, l, (size_t)nr * sizeof(float));
    }
}
