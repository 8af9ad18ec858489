/*
 * attn_fwd_scalar_body.h — the plain-C FlashAttention-2 forward, written once
 * and instantiated by attn_fwd_scalar.c for REAL = float (the F32/F16/BF16
 * oracle) and REAL = double (F64 on every ISA). No include guard: it is
 * included once per instantiation, with REAL, EXPR (exp for REAL), TANHR
 * (tanh for REAL), SCORE(mod, u, t, dist) (fc_scoref or fc_score on the
 * fc_score_modf / fc_score_mod held in a MODT, made by MOD_OF(mod)) and
 * FN(x) (name mangling) defined; it undefines them at its end.
 *
 * A work item is (b, h, block of SBR query rows); K and V tiles of SBC keys
 * are converted into REAL scratch, then S = Q·Kᵀ, the score pipeline
 * (attn_score.h, natural units: unit 1), the online softmax and O += P·V run
 * as plain loops.
 */

/* Per-thread scratch in REALs for head dim D. */
static size_t FN(scratch_elems)(int64_t D) {
    return (size_t)(2 * SBR * D + 2 * SBC * D + SBR * SBC + 2 * SBR);
}

// q, o are (B, Sq, Hq, D); k, v are (B, Sk, Hkv, D); lse is (B, Hq, Sq).
static void FN(block)(const fc_attn *a, int64_t b, int64_t h, int64_t i0, REAL *ws) {
    const int64_t D = a->D, hk = h / (a->Hq / a->Hkv);
    const int nr = (int)(a->Sq - i0 < SBR ? a->Sq - i0 : SBR);
    REAL *q = ws;               /* (SBR, D), pre-multiplied by mod.qk_mul */
    REAL *o = q + SBR * D;      /* (SBR, D) unnormalised accumulator */
    REAL *kt = o + SBR * D;     /* (SBC, D) key tile */
    REAL *vt = kt + SBC * D;    /* (SBC, D) value tile */
    REAL *s = vt + SBC * D;     /* (SBR, SBC) scores, then probabilities */
    REAL *m = s + SBR * SBC;    /* (SBR) running max */
    REAL *l = m + SBR;          /* (SBR) running sum */
    int64_t se[SBR], lo[SBR], hi[SBR];
    const fc_mask mk = fc_attn_mask(a);
    const fc_score_params sp = fc_attn_score(a);
    const int plain = fc_score_is_plain(&sp);
    const fc_score_mod mod64 = fc_score_mod_make(&sp, b, h, 1.0);
    const MODT mod = MOD_OF(mod64);

    const char *qb = (const char *)a->q;
    for (int r = 0; r < nr; ++r) {
        const int64_t off = b * a->sq[0] + (i0 + r) * a->sq[1] + h * a->sq[2];
        for (int64_t d = 0; d < D; ++d)
            q[r * D + d] = (REAL)(fc_scalar_load(qb, off + d * a->sq[3], a->dtype) * mod64.qk_mul);
        for (int64_t d = 0; d < D; ++d) o[r * D + d] = 0;
        m[r] = (REAL)-INFINITY;
        l[r] = 0;
        fc_visible_keys(&mk, i0 + r, &se[r], &lo[r], &hi[r]);
    }

    fc_keysegs ks;
    fc_block_keysegs(&mk, i0, i0 + nr - 1, &ks);
    for (int sg = 0; sg < ks.n; ++sg) {
        for (int64_t j0 = ks.s0[sg]; j0 < ks.s1[sg]; j0 += SBC) {
            const int64_t j1 = j0 + SBC < ks.s1[sg] ? j0 + SBC : ks.s1[sg];
            const int nb = (int)(j1 - j0);
            const int kind = fc_tile_kind(se, lo, hi, nr, j0, j1);
            if (kind == FC_TILE_EMPTY) continue;
            int64_t ko[SBC], vo[SBC]; /* key rows (fc_kv_rows: dense or paged) */
            fc_kv_rows(a, a->sk, b, hk, j0, nb, ko);
            fc_kv_rows(a, a->sv, b, hk, j0, nb, vo);
            for (int jj = 0; jj < nb; ++jj)
                for (int64_t d = 0; d < D; ++d) {
                    kt[jj * D + d] = (REAL)fc_scalar_load(a->k, ko[jj] + d * a->sk[3], a->dtype);
                    vt[jj * D + d] = (REAL)fc_scalar_load(a->v, vo[jj] + d * a->sv[3], a->dtype);
                }
            for (int r = 0; r < nr; ++r) {
                REAL *sr = s + r * SBC, *orow = o + r * D;
                const REAL *qr = q + r * D;
                REAL mx = m[r];
                for (int jj = 0; jj < nb; ++jj) {
                    const int64_t j = j0 + jj;
                    if (kind == FC_TILE_PARTIAL && !FC_KEY_VISIBLE(se[r], lo[r], hi[r], j)) {
                        sr[jj] = (REAL)-INFINITY;
                        continue;
                    }
                    REAL acc = 0;
                    for (int64_t d = 0; d < D; ++d) acc += qr[d] * kt[jj * D + d];
                    if (!plain) /* softcap, ALiBi */
                        acc = SCORE(&mod, acc, mod.cap != 0 ? TANHR(acc) : (REAL)0,
                                    (REAL)fc_alibi_dist(&sp, i0 + r, j));
                    sr[jj] = acc;
                    if (acc > mx) mx = acc;
                }
                /* A row that has seen nothing keeps m = −inf; exponentiate
                 * against 0 then, so that e^{−inf} = 0 and never NaN. */
                const REAL msafe = mx == (REAL)-INFINITY ? (REAL)0 : mx;
                const REAL alpha = EXPR(m[r] - msafe);
                REAL sum = 0;
                for (int jj = 0; jj < nb; ++jj) {
                    sr[jj] = EXPR(sr[jj] - msafe);
                    sum += sr[jj];
                }
                l[r] = l[r] * alpha + sum;
                m[r] = mx;
                for (int64_t d = 0; d < D; ++d) orow[d] *= alpha;
                for (int jj = 0; jj < nb; ++jj) {
                    const REAL p = sr[jj];
                    if (p == 0) continue;
                    for (int64_t d = 0; d < D; ++d) orow[d] += p * vt[jj * D + d];
                }
            }
        }
    }

    const int has_sink = a->sink_logits != NULL;
    const double sink = fc_attn_sink(a, h);
    for (int r = 0; r < nr; ++r) {
        double factor, lse;
        fc_row_finish((double)m[r], (double)l[r], has_sink, sink, &factor, &lse);
        const int64_t off = b * a->so[0] + (i0 + r) * a->so[1] + h * a->so[2];
        for (int64_t d = 0; d < D; ++d)
            fc_scalar_store(a->o, off + d * a->so[3], a->dtype, (double)(o[r * D + d] * (REAL)factor));
        if (a->lse) {
            const int64_t lo_ = b * a->slse[0] + h * a->slse[1] + (i0 + r) * a->slse[2];
            if (a->dtype == FLASHC_F64) ((double *)a->lse)[lo_] = lse;
            else ((float *)a->lse)[lo_] = (float)lse;
        }
    }
}

static flashc_status FN(run)(const fc_attn *a) {
    const int64_t nqb = (a->Sq + SBR - 1) / SBR, nouter = a->B * a->Hq;
    if (nqb == 0) return FLASHC_OK;
    const int64_t nitems = nouter * nqb;
    const fc_mask mk = fc_attn_mask(a);
    fc_work *work = (fc_work *)malloc((size_t)nitems * sizeof(fc_work));
    if (!work) return fc_set_error(FLASHC_ERR_OUT_OF_MEMORY, "attn_fwd: work list of %lld items",
                                   (long long)nitems);
    for (int64_t t = 0; t < nqb; ++t) {
        const int64_t ia = t * SBR, ib = (ia + SBR < a->Sq ? ia + SBR : a->Sq) - 1;
        fc_keysegs ks;
        fc_block_keysegs(&mk, ia, ib, &ks);
        int64_t keys = 0;
        for (int sg = 0; sg < ks.n; ++sg) keys += ks.s1[sg] - ks.s0[sg];
        for (int64_t u = 0; u < nouter; ++u)
            work[u * nqb + t] = (fc_work){u, t, (keys + 1) * (ib - ia + 1), u * nqb + t};
    }
    qsort(work, (size_t)nitems, sizeof(fc_work), fc_work_cmp);

    int nt = omp_get_max_threads();
    if ((int64_t)nt > nitems) nt = (int)nitems;
    const size_t per = (FN(scratch_elems)(a->D) + 15) & ~(size_t)15;
    REAL *scratch = (REAL *)malloc((size_t)nt * per * sizeof(REAL));
    if (!scratch) {
        free(work);
        return fc_set_error(FLASHC_ERR_OUT_OF_MEMORY, "attn_fwd: %zu bytes of scratch",
                            (size_t)nt * per * sizeof(REAL));
    }
#pragma omp parallel num_threads(nt)
    {
        REAL *ws = scratch + (size_t)omp_get_thread_num() * per;
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < nitems; ++t) {
            const int64_t u = work[t].outer;
            FN(block)(a, u / a->Hq, u % a->Hq, work[t].blk * SBR, ws);
        }
    }
    free(scratch);
    free(work);
    return FLASHC_OK;
}

#undef REAL
#undef EXPR
#undef TANHR
#undef MODT
#undef MOD_OF
#undef SCORE
#undef FN
