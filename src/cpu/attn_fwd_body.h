/*
 * attn_fwd_body.h — the SIMD FlashAttention-2 forward (F32, F16, BF16 in
 * fp32), written once for the AVX2 and AVX-512 files. No include guard: each
 * ISA file defines, then includes this:
 *   FN(x)          name mangling (fc_avx512_##x)
 *   FC_BR, FC_BC   rows per block, keys per tile (multiples of the kernels'
 *                  register blocking)
 *   FC_DALIGN      floats per row alignment of the packed tiles (a power of 2)
 *   FC_RG          query rows per register block of the kernels (divides FC_BR)
 *   FC_PV_DBLOCK   head dims per PV register block (≤ FC_DALIGN)
 * and the kernels FN(qk), FN(mask), FN(softmax), FN(pv), FN(cvt_row),
 * FN(store_row), FN(transpose) (contracts below, at their call sites), and
 * FC_VW, the floats per vector.
 *
 * Layout: everything is "query rows fastest", so that each SIMD lane is one
 * query row and the softmax is lane-wise (vertical max/sum, no shuffles):
 *   Qt (Dp, BR)  the block's queries, transposed, pre-scaled by scale·log2(e)
 *   St (BC, BR)  scores, then probabilities, of one key tile
 *   Ot (Dp, BR)  the unnormalised output, transposed
 *   Kp, Vp (BC, Dp)  the key / value tile, fp32, rows as in memory (fp32
 *                rows with unit d-stride are read in place instead)
 * so S = Q·Kᵀ and O += P·V both broadcast one K/V element against a vector
 * of query rows: K and V are only converted, never transposed.
 *
 * Rows of a block: all query heads sharing one K/V head are processed
 * together (GQA): for kv head hk, row r of the Sq·G rows is query position
 * i = r / G of head hk·G + r % G. So each K/V tile is packed once for the
 * whole group, and a decode step (Sq = 1) still fills G lanes.
 */

static size_t FN(dpad)(int64_t D) { return (size_t)((D + FC_DALIGN - 1) & ~(int64_t)(FC_DALIGN - 1)); }

/* Per-thread scratch in floats; int32 arrays are carved from it too. */
static size_t FN(scratch_floats)(int64_t D) {
    const size_t dp = FN(dpad)(D);
    return 2 * dp * FC_BR + (size_t)FC_BC * FC_BR + 2 * (size_t)FC_BC * dp + 6 * FC_BR + FC_VW * dp;
}

// q, o are (B, Sq, Hq, D); k, v are (B, Sk, Hkv, D); lse is (B, Hq, Sq).
// Computes rows [r0, r0 + FC_BR) ∩ [0, Sq·G) of kv head hk of batch b.
static void FN(block)(const fc_attn *a, int64_t b, int64_t hk, int64_t r0, float *ws) {
    const int64_t D = a->D, G = a->Hq / a->Hkv, R = a->Sq * G;
    const int64_t dp = (int64_t)FN(dpad)(D);
    const int nr = (int)(R - r0 < FC_BR ? R - r0 : FC_BR);
    float *qt = ws;                         /* (dp, BR) */
    float *ot = qt + dp * FC_BR;            /* (dp, BR) */
    float *st = ot + dp * FC_BR;            /* (BC, BR) */
    float *kp = st + FC_BC * FC_BR;         /* (BC, dp) */
    float *vp = kp + FC_BC * dp;            /* (BC, dp); columns ≥ D stay 0 */
    float *m = vp + FC_BC * dp;             /* (BR) running max, log2 units */
    float *l = m + FC_BR;                   /* (BR) running sum */
    float *alpha = l + FC_BR;               /* (BR) rescale of this tile */
    int32_t *sel = (int32_t *)(alpha + FC_BR); /* (BR) visible ranges relative */
    int32_t *lol = sel + FC_BR;                /*   to the tile start: j < sel or */
    int32_t *hil = lol + FC_BR;                /*   lol ≤ j < hil */
    float *tmp = (float *)(hil + FC_BR);    /* (VW, dp) rows being converted */

    /* Query positions of the block: ia..ib, visible ranges per position. */
    const int64_t ia = r0 / G, ib = (r0 + nr - 1) / G;
    const int np = (int)(ib - ia + 1);
    int64_t se[FC_BR], lo[FC_BR], hi[FC_BR];
    for (int p = 0; p < np; ++p) fc_visible_range(a, ia + p, &se[p], &lo[p], &hi[p]);

    const size_t esz = a->dtype == FLASHC_F32 ? 4 : 2;
    const float qmul = (float)(a->scale * 1.4426950408889634); /* exp → exp2 */
    /* Qt: FC_VW rows at a time are converted into tmp, then transposed in
     * FC_VW × FC_VW blocks (columns D..dp and rows past nr are zero). */
    for (int rg = 0; rg < FC_BR; rg += FC_VW) {
        for (int k = 0; k < FC_VW; ++k) {
            const int r = rg + k;
            float *row = tmp + k * dp;
            int64_t d = 0;
            if (r < nr) {
                const int64_t i = (r0 + r) / G, h = hk * G + (r0 + r) % G;
                const int64_t off = b * a->sq[0] + i * a->sq[1] + h * a->sq[2];
                FN(cvt_row)(row, (const char *)a->q + off * (int64_t)esz, a->sq[3], a->dtype, D, qmul);
                d = D;
            }
            for (; d < dp; ++d) row[d] = 0.0f;
        }
        /* qt[d][rg + k] = tmp[k][d] */
        for (int64_t d = 0; d < dp; d += FC_VW) FN(transpose)(tmp + d, dp, qt + d * FC_BR + rg, FC_BR);
    }
    for (int r = 0; r < FC_BR; ++r) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    for (int64_t x = 0; x < dp * FC_BR; ++x) ot[x] = 0.0f;

    const int k_inplace = a->dtype == FLASHC_F32 && a->sk[3] == 1;
    const int v_inplace = a->dtype == FLASHC_F32 && a->sv[3] == 1 && D % FC_PV_DBLOCK == 0;
    fc_keysegs ks;
    fc_block_keysegs_of(a, ia, ib, &ks);
    for (int sg = 0; sg < ks.n; ++sg) {
        for (int64_t j0 = ks.s0[sg]; j0 < ks.s1[sg]; j0 += FC_BC) {
            const int64_t j1 = j0 + FC_BC < ks.s1[sg] ? j0 + FC_BC : ks.s1[sg];
            const int nb = (int)(j1 - j0);
            const int kind = fc_tile_kind(se, lo, hi, np, j0, j1);
            if (kind == FC_TILE_EMPTY) continue;
            /* fp32 rows with unit d-stride are used in place (any row
             * stride, even 0 or negative); others are converted into kp/vp.
             * The PV kernel reads d up to D rounded to FC_PV_DBLOCK, so V
             * is used in place only when that stays inside the row. */
            const float *kt = kp, *vt = vp;
            int64_t ldk = dp, ldv = dp;
            const int64_t ko0 = b * a->sk[0] + j0 * a->sk[1] + hk * a->sk[2];
            const int64_t vo0 = b * a->sv[0] + j0 * a->sv[1] + hk * a->sv[2];
            if (k_inplace) { kt = (const float *)a->k + ko0; ldk = a->sk[1]; }
            if (v_inplace) { vt = (const float *)a->v + vo0; ldv = a->sv[1]; }
            for (int jj = 0; jj < nb; ++jj) {
                if (!k_inplace)
                    FN(cvt_row)(kp + jj * dp, (const char *)a->k + (ko0 + jj * a->sk[1]) * (int64_t)esz,
                                a->sk[3], a->dtype, D, 1.0f);
                if (!v_inplace)
                    FN(cvt_row)(vp + jj * dp, (const char *)a->v + (vo0 + jj * a->sv[1]) * (int64_t)esz,
                                a->sv[3], a->dtype, D, 1.0f);
            }
            /* K/V of a long sequence live in L3 (a block streams all of its
             * head's keys): fetch the next tile into L2 while this one is
             * computed, so that reading it does not stall. */
            fc_prefetch_kv(a, b, hk, j1, j1 + FC_BC < ks.s1[sg] ? j1 + FC_BC : ks.s1[sg], esz);
            /* Per group of FC_RG rows, the keys [jlo, jhi) of the tile that
             * some row of the group sees: the kernels skip the rest (the
             * far side of a causal diagonal, beyond a narrow window). */
            int32_t jlo[FC_BR / FC_RG], jhi[FC_BR / FC_RG];
            fc_tile_row_bounds(kind == FC_TILE_PARTIAL, FC_BR, FC_RG, r0, nr, G, ia, np, se, lo, hi, j0, nb,
                               sel, lol, hil, jlo, jhi);
            /* st[j][r] = Σ_d qt[d][r]·kt[j][d] for j < nb; entries outside
             * the group's [jlo, jhi) may be left stale (the mask overwrites
             * them), rows of st up to nb rounded to the kernel's key
             * blocking may be overwritten. */
            FN(qk)(qt, kt, ldk, nb, D, jlo, jhi, st);
            /* st[j][r] = −inf where row r does not see key j0 + j. */
            if (kind == FC_TILE_PARTIAL) FN(mask)(st, nb, sel, lol, hil);
            /* Online softmax over st[0..nb): updates m, l; st becomes
             * P = 2^(st − m_new); alpha = 2^(m_old − m_new). */
            FN(softmax)(st, nb, m, l, alpha);
            /* ot[d][r] = alpha[r]·ot[d][r] + Σ_{jlo ≤ j < jhi} vt[j][d]·st[j][r]
             * (P is 0 outside), d < D rounded up to FC_PV_DBLOCK. */
            FN(pv)(ot, D, st, vt, ldv, jlo, jhi, alpha);
        }
    }

    const int has_sink = a->sink_logits != NULL;
    for (int rg = 0; rg < nr; rg += FC_VW) {
        /* tmp[k][d] = ot[d][rg + k] */
        for (int64_t d = 0; d < dp; d += FC_VW) FN(transpose)(ot + d * FC_BR + rg, FC_BR, tmp + d, dp);
        for (int k = 0; k < FC_VW && rg + k < nr; ++k) {
            const int r = rg + k;
            const int64_t i = (r0 + r) / G, h = hk * G + (r0 + r) % G;
            const double sink = has_sink ? (double)((const float *)a->sink_logits)[h] : 0.0;
            double factor, lse;
            fc_row_finish((double)m[r] * 0.6931471805599453, (double)l[r], has_sink, sink, &factor, &lse);
            const int64_t off = b * a->so[0] + i * a->so[1] + h * a->so[2];
            FN(store_row)((char *)a->o + off * (int64_t)esz, a->so[3], a->dtype, tmp + k * dp, D, (float)factor);
            if (a->lse) ((float *)a->lse)[b * a->slse[0] + h * a->slse[1] + i * a->slse[2]] = (float)lse;
        }
    }
}

static flashc_status FN(run)(const fc_attn *a) {
    return fc_fwd_run_grouped(a, FC_BR, FN(scratch_floats)(a->D), FN(block));
}
