/*
 * attn_fwd_body.h — the SIMD FlashAttention-2 forward (F32, F16, BF16 in
 * fp32), written once over the vector vocabulary (simd_avx2.h or
 * simd_avx512.h, then simd_score.h) for the AVX2 and AVX-512 files. No
 * include guard: each ISA file includes its vocabulary, defines, then
 * includes this:
 *   FN(x)          name mangling (fc_avx512_##x)
 *   FC_BR, FC_BC   rows per block, keys per tile (multiples of the kernels'
 *                  register blocking)
 *   FC_RG          query rows per register block of the kernels (a multiple
 *                  of FC_VF_W dividing FC_BR)
 *   FC_QK_KB       keys per QK register block: FC_QK_KB × FC_RG/FC_VF_W
 *                  accumulators
 *   FC_PV_DBLOCK   head dims per PV register block (≤ FC_VF_W):
 *                  FC_PV_DBLOCK × FC_RG/FC_VF_W accumulators
 *   FC_SM_NV       row vectors the softmax keeps in registers at once
 *                  (divides FC_BR/FC_VF_W)
 *
 * Layout: everything is "query rows fastest", so that each SIMD lane is one
 * query row and the softmax is lane-wise (vertical max/sum, no shuffles):
 *   Qt (Dp, BR)  the block's queries, transposed, pre-scaled by mod.qk_mul
 *                (scale·log2 e without a softcap: the exp2 domain)
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
 * whole group, and a decode step (Sq = 1) still fills G lanes. ALiBi slopes
 * differ per head, hence per row (lane): they are kept per row.
 */

_Static_assert(FC_BR % FC_RG == 0 && FC_BR % (FC_SM_NV * FC_VF_W) == 0 && FC_RG % FC_VF_W == 0, "row blocking");

static size_t FN(dpad)(int64_t D) { return (size_t)((D + FC_VF_W - 1) & ~(int64_t)(FC_VF_W - 1)); }

/* Per-thread scratch in floats; int32 arrays are carved from it too. */
static size_t FN(scratch_floats)(int64_t D) {
    const size_t dp = FN(dpad)(D);
    return 2 * dp * FC_BR + (size_t)FC_BC * FC_BR + 2 * (size_t)FC_BC * dp + 8 * FC_BR + FC_VF_W * dp;
}

// qt is (D, BR), kr[j] (j < nb) points at key j's fp32 row, st is (BC, BR): st[j][r] = <qt[:, r], kr[j]>,
// computed for the key groups that meet [jlo[g], jhi[g]) of row group g = r / FC_RG (others left as
// they were).
static void FN(qk)(const float *qt, const float *const *kr, int nb, int64_t D, const int32_t *jlo,
                   const int32_t *jhi, float *st) {
    enum { KB = FC_QK_KB, RV = FC_RG / FC_VF_W };
    /* Row groups outermost: a group's Qt columns (D·FC_RG floats) stay in
     * L1 while the tile's keys stream past them from L2. */
    for (int rb = 0; rb < FC_BR; rb += FC_RG) {
        const int g = rb / FC_RG;
        for (int j = jlo[g] / KB * KB; j < jhi[g]; j += KB) {
            /* The last group repeats key nb−1 into st rows ≥ nb (never read). */
            const float *k[KB];
            for (int t = 0; t < KB; ++t) k[t] = kr[j + t < nb ? j + t : nb - 1];
            fc_vf c[KB][RV];
#pragma GCC unroll 8
            for (int t = 0; t < KB; ++t)
#pragma GCC unroll 4
                for (int v = 0; v < RV; ++v) c[t][v] = fc_vf_zero();
            const float *q = qt + rb;
            for (int64_t d = 0; d < D; ++d, q += FC_BR) {
                fc_vf qv[RV];
#pragma GCC unroll 4
                for (int v = 0; v < RV; ++v) qv[v] = fc_vf_loada(q + v * FC_VF_W);
#pragma GCC unroll 8
                for (int t = 0; t < KB; ++t) {
                    const fc_vf b = fc_vf_bcast(k[t] + d);
#pragma GCC unroll 4
                    for (int v = 0; v < RV; ++v) c[t][v] = fc_vf_fma(qv[v], b, c[t][v]);
                }
            }
            float *s = st + (int64_t)j * FC_BR + rb;
#pragma GCC unroll 8
            for (int t = 0; t < KB; ++t)
#pragma GCC unroll 4
                for (int v = 0; v < RV; ++v) fc_vf_storea(s + t * FC_BR + v * FC_VF_W, c[t][v]);
        }
    }
}

// st is (BC, BR) scores in log2 units; m, l, alpha are (BR); rows [0, nrs) (a multiple of
// FC_SM_NV·FC_VF_W) are updated, the others left as they are. cap > 0: st holds u = qk_mul·<q, k>
// of a full tile whose only score step is the softcap, run here (simd_score.h: fc_softmax_cap).
// bounded: m holds the fixed running max of fc_score_max_bound_l2f: no row max (α = 2^0 = 1),
// and the step, if here, runs in the exponential's pass.
static void FN(softmax)(float *st, int nb, int nrs, float *m, float *l, float *alpha, float cap, int bounded) {
    enum { NV = FC_SM_NV, W = FC_VF_W };
    const fc_vf vcap = fc_vf_set1(cap);
    const int fused = cap > 0.0f && bounded; /* tanh in the exp pass below */
    for (int r0 = 0; r0 < nrs; r0 += NV * W) {
        fc_vf mx[NV], ms[NV], sum[NV];
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) mx[v] = fc_vf_loada(m + r0 + v * W);
        if (bounded) {
            /* mx = m: fixed */
        } else if (cap > 0.0f) {
            fc_vf mt[NV];
#pragma GCC unroll 8
            for (int v = 0; v < NV; ++v) mt[v] = fc_vf_set1(-INFINITY);
            for (int j = 0; j < nb; ++j)
#pragma GCC unroll 8
                for (int v = 0; v < NV; ++v) mt[v] = fc_vf_cap_max(st + j * FC_BR + r0 + v * W, mt[v]);
#pragma GCC unroll 8
            for (int v = 0; v < NV; ++v) mx[v] = fc_vf_max(mx[v], fc_vf_mul(mt[v], vcap));
        } else {
            for (int j = 0; j < nb; ++j)
#pragma GCC unroll 8
                for (int v = 0; v < NV; ++v) mx[v] = fc_vf_max(mx[v], fc_vf_loada(st + j * FC_BR + r0 + v * W));
        }
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) {
            /* A row that has seen nothing keeps −inf; exponentiate against 0
             * so that 2^(−inf) = 0 rather than NaN. */
            ms[v] = fc_vf_select(fc_vf_eq(mx[v], fc_vf_set1(-INFINITY)), fc_vf_zero(), mx[v]);
            sum[v] = fc_vf_zero();
        }
        for (int j = 0; j < nb; ++j)
#pragma GCC unroll 8
            for (int v = 0; v < NV; ++v) {
                float *p = st + j * FC_BR + r0 + v * W;
                const fc_vf x = fc_vf_loada(p);
                const fc_vf e = fc_vf_exp2(fc_vf_softmax_arg(cap, fused ? fc_vf_tanh(x) : x, vcap, ms[v]));
                fc_vf_storea(p, e);
                sum[v] = fc_vf_add(sum[v], e);
            }
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) {
            const fc_vf al = fc_vf_exp2(fc_vf_sub(fc_vf_loada(m + r0 + v * W), ms[v]));
            fc_vf_storea(alpha + r0 + v * W, al);
            fc_vf_storea(l + r0 + v * W, fc_vf_fma(fc_vf_loada(l + r0 + v * W), al, sum[v]));
            fc_vf_storea(m + r0 + v * W, mx[v]);
        }
    }
}

// ot is (dp, BR), pt is (BC, BR), vr[j] (j < nb) points at value j's fp32 row:
// ot[d][r] = alpha[r]·ot[d][r] + Σ_{jlo[g] ≤ j < jhi[g]} vr[j][d]·pt[j][r], g = r / FC_RG,
// for d < D rounded up to FC_PV_DBLOCK (columns past D are zero in converted rows and never stored).
static void FN(pv)(float *ot, int64_t D, const float *pt, const float *const *vr, const int32_t *jlo,
                   const int32_t *jhi, const float *alpha) {
    enum { DB = FC_PV_DBLOCK, RV = FC_RG / FC_VF_W };
    /* Row groups outermost: a group's P columns (nb·FC_RG floats) stay in
     * L1 while the head dims walk the tile's V rows. */
    for (int rb = 0; rb < FC_BR; rb += FC_RG) {
        const int j0 = jlo[rb / FC_RG], j1 = jhi[rb / FC_RG];
        fc_vf al[RV];
#pragma GCC unroll 4
        for (int v = 0; v < RV; ++v) al[v] = fc_vf_loada(alpha + rb + v * FC_VF_W);
        for (int64_t d = 0; d < D; d += DB) {
            fc_vf c[DB][RV];
            float *o = ot + d * FC_BR + rb;
#pragma GCC unroll 8
            for (int t = 0; t < DB; ++t)
#pragma GCC unroll 4
                for (int v = 0; v < RV; ++v) c[t][v] = fc_vf_mul(fc_vf_loada(o + t * FC_BR + v * FC_VF_W), al[v]);
            const float *p = pt + (int64_t)j0 * FC_BR + rb;
            for (int j = j0; j < j1; ++j, p += FC_BR) {
                const float *vj = vr[j] + d;
                fc_vf pv[RV];
#pragma GCC unroll 4
                for (int v = 0; v < RV; ++v) pv[v] = fc_vf_loada(p + v * FC_VF_W);
#pragma GCC unroll 8
                for (int t = 0; t < DB; ++t) {
                    const fc_vf b = fc_vf_bcast(vj + t);
#pragma GCC unroll 4
                    for (int v = 0; v < RV; ++v) c[t][v] = fc_vf_fma(pv[v], b, c[t][v]);
                }
            }
#pragma GCC unroll 8
            for (int t = 0; t < DB; ++t)
#pragma GCC unroll 4
                for (int v = 0; v < RV; ++v) fc_vf_storea(o + t * FC_BR + v * FC_VF_W, c[t][v]);
        }
    }
}

/* Do rows vr[0..nb) × columns [0, D) hold only finite values? */
static int FN(rows_finite)(const float *const *vr, int nb, int64_t D) {
    fc_vm bad = fc_vm_tail(0);
    for (int j = 0; j < nb; ++j) {
        const float *r = vr[j];
        int64_t d = 0;
        for (; d + FC_VF_W <= D; d += FC_VF_W) bad = fc_vm_or(bad, fc_vf_nonfinite(fc_vf_load(r + d)));
        if (d < D) bad = fc_vm_or(bad, fc_vf_nonfinite(fc_vf_load_tail(r + d, D - d)));
    }
    return !fc_vm_any(bad);
}

// FN(pv) for a partial tile whose V holds a non-finite value: a row's P is exactly 0 on the keys it
// does not see, and 0·inf would be NaN, so V is zeroed in the lanes whose p is 0. The same FMAs
// in the same order as FN(pv) otherwise, so that a row's output does not change by a bit when
// values it cannot see turn non-finite. d < D only; a rare path, one vector of rows at a time.
static void FN(pv_masked)(float *ot, int64_t D, const float *pt, const float *const *vr, const int32_t *jlo,
                          const int32_t *jhi, const float *alpha) {
    for (int rb = 0; rb < FC_BR; rb += FC_VF_W) {
        const int j0 = jlo[rb / FC_RG], j1 = jhi[rb / FC_RG];
        const fc_vf al = fc_vf_loada(alpha + rb);
        for (int64_t d = 0; d < D; ++d) {
            float *o = ot + d * FC_BR + rb;
            fc_vf c = fc_vf_mul(fc_vf_loada(o), al);
            for (int j = j0; j < j1; ++j) {
                const fc_vf p = fc_vf_loada(pt + (int64_t)j * FC_BR + rb);
                c = fc_vf_fma(p, fc_vf_keep(fc_vf_ne(p, fc_vf_zero()), fc_vf_bcast(vr[j] + d)), c);
            }
            fc_vf_storea(o, c);
        }
    }
}

/* fc_fwd_finish_fn: rows r0 .. r0 + nr − 1, o (nr, ldo). */
static void FN(finish)(const fc_attn *a, int64_t b, int64_t hk, int64_t r0, int64_t nr, const float *o, int64_t ldo,
                       const float *m, const float *l) {
    fc_fwd_finish_rows(a, b, hk, r0, nr, o, ldo, m, l, fc_store_row);
}

#include "attn_fwd_store.h"

// q, o are (B, Sq, Hq, D); k, v are (B, Sk, Hkv, D); lse is (B, Hq, Sq).
// Computes rows [r0, r0 + FC_BR) ∩ [0, Sq·G) of kv head hk of batch b over the key-list positions
// [p0, p1) of the block's keys: finished, or as a partial into part (fc_fwd_block_fn).
static void FN(block)(const fc_attn *a, int64_t b, int64_t hk, int64_t r0, int64_t p0, int64_t p1, float *ws,
                      float *part) {
    const int64_t D = a->D, G = a->Hq / a->Hkv, R = a->Sq * G;
    const int64_t dp = (int64_t)FN(dpad)(D);
    const int nr = (int)(R - r0 < FC_BR ? R - r0 : FC_BR);
    const int nrv = (nr + FC_VF_W - 1) / FC_VF_W * FC_VF_W; /* rows in whole vectors */
    /* Rows the softmax updates: the row groups with a real row, in whole
     * softmax passes (a chunk of a few query tokens fills one or two groups;
     * the others have no keys and their alpha, only ever multiplying zero
     * accumulators, stays finite from an earlier pass or the zeroed scratch). */
    enum { SMR = FC_SM_NV * FC_VF_W };
    const int nrg = (nr + FC_RG - 1) / FC_RG * FC_RG, nrs = (nrg + SMR - 1) / SMR * SMR;
    float *qt = ws;                         /* (dp, BR) */
    float *ot = qt + dp * FC_BR;            /* (dp, BR) */
    float *st = ot + dp * FC_BR;            /* (BC, BR) */
    float *kp = st + FC_BC * FC_BR;         /* (BC, dp) */
    float *vp = kp + FC_BC * dp;            /* (BC, dp); columns ≥ D stay 0 */
    float *m = vp + FC_BC * dp;             /* (BR) running max, log2 units */
    float *l = m + FC_BR;                   /* (BR) running sum */
    float *alpha = l + FC_BR;               /* (BR) rescale of this tile */
    float *slope = alpha + FC_BR;           /* (BR) log2e·ALiBi slope of the row's head */
    float *ioff = slope + FC_BR;            /* (BR) i + Sk − Sq of the row (ALiBi distance) */
    int32_t *sel = (int32_t *)(ioff + FC_BR); /* (BR) visible ranges relative */
    int32_t *lol = sel + FC_BR;                /*   to the tile start: */
    int32_t *hil = lol + FC_BR;                /*   FC_KEY_VISIBLE(sel, lol, hil, j) */
    float *tmp = (float *)(hil + FC_BR);    /* (VW, dp) rows being converted */

    /* Query positions ia..ia+np−1 of the block, their visible ranges, the
     * keys the block sees, the score variant (fc_fwd_rows_setup). */
    int64_t se[FC_BR], lo[FC_BR], hi[FC_BR];
    const fc_fwd_rows rw = fc_fwd_rows_setup(a, b, hk, r0, nr, FC_BR, se, lo, hi, slope, ioff);
    const int64_t ia = rw.ia;
    const int np = rw.np, mode = rw.mode;
    const fc_score_modf mod = rw.mod;

    const size_t esz = a->dtype == FLASHC_F32 ? 4 : 2;
    /* Qt: FC_VF_W rows at a time are converted into tmp, then transposed in
     * FC_VF_W × FC_VF_W blocks (columns D..dp and rows past nr are zero). */
    for (int rg = 0; rg < FC_BR; rg += FC_VF_W) {
        for (int k = 0; k < FC_VF_W; ++k) {
            const int r = rg + k;
            float *row = tmp + k * dp;
            int64_t d = 0;
            if (r < nr) {
                const int64_t i = (r0 + r) / G, h = hk * G + (r0 + r) % G;
                const int64_t off = b * a->sq[0] + i * a->sq[1] + h * a->sq[2];
                fc_cvt_row(row, (const char *)a->q + off * (int64_t)esz, a->sq[3], a->dtype, D, mod.qk_mul);
                d = D;
            }
            for (; d < dp; ++d) row[d] = 0.0f;
        }
        /* qt[d][rg + k] = tmp[k][d] */
        for (int64_t d = 0; d < dp; d += FC_VF_W) fc_vf_transpose(tmp + d, dp, qt + d * FC_BR + rg, FC_BR);
    }
    /* The running max starts at the scores' bound where there is one
     * (fc_score_max_bound_l2f: a softcap alone), else at −inf. */
    const float mbound = fc_score_max_bound_l2f(mode, mod.cap, FC_P_LO_F32, FC_P_HI_F32); /* P in fp32 / bf16 */
    for (int r = 0; r < FC_BR; ++r) {
        m[r] = mbound;
        l[r] = 0.0f;
    }
    for (int64_t x = 0; x < dp * FC_BR; ++x) ot[x] = 0.0f;

    const int k_inplace = a->dtype == FLASHC_F32 && a->sk[3] == 1;
    const int v_inplace = a->dtype == FLASHC_F32 && a->sv[3] == 1 && D % FC_PV_DBLOCK == 0;
    const fc_keysegs ks = fc_keysegs_part(&rw.keys, p0, p1);
    for (int sg = 0; sg < ks.n; ++sg) {
        for (int64_t j0 = ks.s0[sg]; j0 < ks.s1[sg]; j0 += FC_BC) {
            const int64_t j1 = j0 + FC_BC < ks.s1[sg] ? j0 + FC_BC : ks.s1[sg];
            const int nb = (int)(j1 - j0);
            const int kind = fc_tile_kind(se, lo, hi, np, j0, j1);
            if (kind == FC_TILE_EMPTY) continue;
            /* The tile's K/V rows (dense or paged: fc_kv_rows). fp32 rows
             * with unit d-stride are used in place (any row stride, even 0
             * or negative); others are converted into kp/vp. The PV kernel
             * reads d up to D rounded to FC_PV_DBLOCK, so V is used in
             * place only when that stays inside the row. */
            int64_t ko[FC_BC], vo[FC_BC];
            const float *kr[FC_BC], *vr[FC_BC];
            fc_kv_rows(a, a->sk, b, hk, j0, nb, ko);
            fc_kv_rows(a, a->sv, b, hk, j0, nb, vo);
            for (int jj = 0; jj < nb; ++jj) {
                if (k_inplace) {
                    kr[jj] = (const float *)a->k + ko[jj];
                } else {
                    fc_cvt_row(kp + jj * dp, (const char *)a->k + ko[jj] * (int64_t)esz, a->sk[3], a->dtype, D, 1.0f);
                    kr[jj] = kp + jj * dp;
                }
                if (v_inplace) {
                    vr[jj] = (const float *)a->v + vo[jj];
                } else {
                    fc_cvt_row(vp + jj * dp, (const char *)a->v + vo[jj] * (int64_t)esz, a->sv[3], a->dtype, D, 1.0f);
                    vr[jj] = vp + jj * dp;
                }
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
            /* st[j][r] = Σ_d qt[d][r]·kr[j][d] for j < nb; entries outside
             * the group's [jlo, jhi) may be left stale (the mask overwrites
             * them), rows of st up to nb rounded to the kernel's key
             * blocking may be overwritten. */
            FN(qk)(qt, kr, nb, D, jlo, jhi, st);
            /* The score step (softcap, ALiBi) on rows < nrv, then, in a
             * partial tile, st[j][r] = −inf where row r does not see key
             * j0 + j. A plain full tile is left as it is. (Fusing the step
             * into the QK kernel's stores measured no faster: the tanh's
             * arithmetic, not the pass over st, is its cost.) */
            const float fcap = fc_softmax_cap(mode, kind == FC_TILE_PARTIAL, mod.cap);
            if (fcap == 0.0f)
                fc_vtile_score_rows_any(mode, kind == FC_TILE_PARTIAL, st, FC_BR, nb, nrv, j0, mod.cap, slope, ioff,
                                        sel, lol, hil);
            /* Online softmax over st[0..nb): updates m, l; st becomes
             * P = 2^(st − m_new); alpha = 2^(m_old − m_new). A full tile
             * whose only step is the softcap runs the step in it (fcap). */
            FN(softmax)(st, nb, nrs, m, l, alpha, fcap, mbound > -INFINITY);
            /* ot[d][r] = alpha[r]·ot[d][r] + Σ_{jlo ≤ j < jhi} vr[j][d]·st[j][r]
             * (P is 0 outside), d < D rounded up to FC_PV_DBLOCK. In a
             * partial tile a row's P is 0 on keys it does not see; should
             * V hold an inf or NaN there, 0·inf must not reach the row. */
            if (kind == FC_TILE_PARTIAL && !FN(rows_finite)(vr, nb, D))
                FN(pv_masked)(ot, D, st, vr, jlo, jhi, alpha);
            else
                FN(pv)(ot, D, st, vr, jlo, jhi, alpha);
        }
    }

    FN(block_store)(a, b, hk, r0, nr, ot, dp, tmp, m, l, part);
}

static flashc_status FN(run)(const fc_attn *a) {
    const fc_fwd_kernel kn = {FC_BR, FC_BC, (int64_t)FN(dpad)(a->D), FN(scratch_floats)(a->D), FN(block), FN(finish)};
    return fc_fwd_run_grouped(a, &kn);
}
