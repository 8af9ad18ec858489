/*
 * attn_fwd_decode_body.h — the SIMD forward for few query rows (decode:
 * Sq = 1, or a short speculative / chunked step), written once over the
 * vector vocabulary (simd_avx2.h / simd_avx512.h, simd_score.h) for the
 * AVX2 and AVX-512 files. Included after attn_fwd_body.h with FN(x) and
 * FC_DEC_ROWBLK (rows per register block, ≤ 4: 4·rows accumulators plus 4 K
 * or V vectors must fit the register file) defined.
 *
 * Why another path: attn_fwd_body.h puts query rows on the lanes, so a
 * decode step fills G of the FC_RG lanes of a register block (1 of 32 for
 * MHA). Here KEYS are on the lanes: for a chunk of FC_VF_W keys each row
 * forms per key a vector of partial dot products over d (q and K rows as
 * they are in memory), and one shuffle tree (fc_vf_hreduce) reduces the
 * FC_VF_W vectors into the vector of the chunk's scores (30 shuffles per row
 * and chunk, against 64 per 16×16 transpose × D/16 for a transposed K tile),
 * the score step and the mask run on that vector (simd_score.h), the online
 * softmax runs per row with one horizontal max and sum per chunk, and
 * O += P·V is a row-wise FMA over d (broadcast p_j against V row j).
 * Every K/V element is read once per (b, kv head) and used by all R rows.
 *
 * Rows: all R = Sq·G rows of kv head hk (row r is query position r / G of
 * head hk·G + r % G), R ≤ FC_DEC_ROWS_CAP. Work items are (b, group of kv
 * heads, key split): a group takes each chunk of keys for all its heads in
 * turn, so that K/V stream as they lie in memory (dec_item). When the
 * (b, kv head) pairs are few and the keys many, the visible keys are cut
 * into nsplit contiguous ranges; each item leaves (m, ℓ, O) partials per
 * head and a second loop merges them in split order. nsplit depends only
 * on the shape, never on the thread count (the grouping may, but a head's
 * arithmetic does not depend on it), so results are bit-identical across
 * OMP_NUM_THREADS.
 */

#define FC_DEC_ROWS_CAP 64
#define FC_DEC_SPLIT_KEYS 256 /* fewest keys per split */
#define FC_DEC_TARGET_ITEMS 32 /* (b, kv head, split) items aimed at */
#define FC_DEC_GROUP_FLOATS 32768 /* per-head q and o rows of a group of kv heads (128 KB) */
#ifndef FC_DEC_PFK
#define FC_DEC_PFK 32 /* prefetch distance in keys */
#endif

/* Head dims padded to 4 vectors: the PV kernel's register block. */
static int64_t FN(dec_dpp)(int64_t D) {
    const int64_t w = 4 * FC_VF_W;
    return (D + w - 1) / w * w;
}

/* Per-thread scratch in floats: kp and vp (VW, dpp), p (R, VW), alpha (R),
 * then per head of a group of nh: q (R, dpp), slope, ioff (R) (+ slack). */
static size_t FN(dec_scratch_floats)(int64_t R, int64_t dpp, int64_t nh) {
    return (size_t)(2 * FC_VF_W * dpp + R * FC_VF_W + R + nh * (R * dpp + 2 * R) + 16);
}

// q is (nr, ldq) pre-scaled, kr[j] (j < VW) points at key j's fp32 row
// (dp floats; columns ≥ D are 0 in q): s[r][j] = Σ_{d<dp} q[r][d]·kr[j][d].
// 4 keys × nr rows of vector partial sums over d (≥ 4 FMA chains), then per
// row one horizontal reduction of the VW partial-sum vectors, in a fixed
// shuffle tree, into the vector of the VW scores. buf is (4, VW) vectors.
static inline __attribute__((always_inline)) void FN(dec_qk)(const float *q, int64_t ldq, const int nr,
                                                            const float *const *kr, int64_t dp, fc_vf *s,
                                                            fc_vf *buf) {
    for (int j = 0; j < FC_VF_W; j += 4) {
        const float *k0 = kr[j], *k1 = kr[j + 1], *k2 = kr[j + 2], *k3 = kr[j + 3];
        fc_vf acc[4][4];
#pragma GCC unroll 4
        for (int r = 0; r < nr; ++r)
#pragma GCC unroll 4
            for (int t = 0; t < 4; ++t) acc[r][t] = fc_vf_zero();
        for (int64_t d = 0; d < dp; d += FC_VF_W) {
            const fc_vf x0 = fc_vf_load(k0 + d), x1 = fc_vf_load(k1 + d), x2 = fc_vf_load(k2 + d), x3 = fc_vf_load(k3 + d);
#pragma GCC unroll 4
            for (int r = 0; r < nr; ++r) {
                const fc_vf qv = fc_vf_load(q + r * ldq + d);
                acc[r][0] = fc_vf_fma(qv, x0, acc[r][0]);
                acc[r][1] = fc_vf_fma(qv, x1, acc[r][1]);
                acc[r][2] = fc_vf_fma(qv, x2, acc[r][2]);
                acc[r][3] = fc_vf_fma(qv, x3, acc[r][3]);
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < nr; ++r)
#pragma GCC unroll 4
            for (int t = 0; t < 4; ++t) buf[r * FC_VF_W + FC_VF_SLOT(j + t)] = acc[r][t];
    }
#pragma GCC unroll 4
    for (int r = 0; r < nr; ++r) s[r] = fc_vf_hreduce(buf + r * FC_VF_W);
}

// o is (nr, ldo), p is (nr, VW), vr[j] (j < nb) points at value j's fp32 row: for d < dpp,
// o[r][d] = alpha[r]·o[r][d] + Σ_{j<nb} p[r][j]·vr[j][d]. 4 vectors of d × nr rows.
static inline __attribute__((always_inline)) void FN(dec_pv)(float *o, int64_t ldo, const int nr, const float *p,
                                                            const float *alpha, const float *const *vr, int nb,
                                                            int64_t dpp) {
    for (int64_t d = 0; d < dpp; d += 4 * FC_VF_W) {
        fc_vf acc[4][4];
#pragma GCC unroll 4
        for (int r = 0; r < nr; ++r) {
            const fc_vf al = fc_vf_set1(alpha[r]);
#pragma GCC unroll 4
            for (int t = 0; t < 4; ++t) acc[r][t] = fc_vf_mul(fc_vf_load(o + r * ldo + d + t * FC_VF_W), al);
        }
        for (int j = 0; j < nb; ++j) {
            const float *v = vr[j] + d;
            fc_vf vv[4];
#pragma GCC unroll 4
            for (int t = 0; t < 4; ++t) vv[t] = fc_vf_load(v + t * FC_VF_W);
#pragma GCC unroll 4
            for (int r = 0; r < nr; ++r) {
                const fc_vf pb = fc_vf_set1(p[r * FC_VF_W + j]);
#pragma GCC unroll 4
                for (int t = 0; t < 4; ++t) acc[r][t] = fc_vf_fma(pb, vv[t], acc[r][t]);
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < nr; ++r)
#pragma GCC unroll 4
            for (int t = 0; t < 4; ++t) fc_vf_store(o + r * ldo + d + t * FC_VF_W, acc[r][t]);
    }
}

// The chunk's scores, score step, mask and online softmax for all R rows (keys on the lanes):
// scores of row r on keys j0 + k (k < nb ≤ FC_VF_W) → P in pb[r][k] (0 for lanes k ≥ nb and keys
// the row does not see), alpha[r], and the row's m (log2 units) and l updated. mode (simd_score.h)
// is a compile-time constant at each call; slope[r], ioff[r] = U·slope and i + Sk − Sq of row r.
static inline __attribute__((always_inline)) void FN(dec_scores)(
    const int mode, const fc_attn *a, int64_t R, int64_t G, const float *q, int64_t dpp, const float *const *kr,
    int64_t dp, fc_vf *hbuf, int kind, int64_t j0, int nb, const int64_t *se, const int64_t *lo, const int64_t *hi,
    float cap, const float *slope, const float *ioff, float *pb, float *alpha, float *m, float *l) {
    const int masked = !(kind == FC_TILE_FULL && nb == FC_VF_W);
    for (int64_t r0 = 0; r0 < R; r0 += FC_DEC_ROWBLK) {
        const int nr = (int)(R - r0 < FC_DEC_ROWBLK ? R - r0 : FC_DEC_ROWBLK);
        fc_vf s[4];
        switch (nr) {
        case 1: FN(dec_qk)(q + r0 * dpp, dpp, 1, kr, dp, s, hbuf); break;
        case 2: FN(dec_qk)(q + r0 * dpp, dpp, 2, kr, dp, s, hbuf); break;
        case 3: FN(dec_qk)(q + r0 * dpp, dpp, 3, kr, dp, s, hbuf); break;
        default: FN(dec_qk)(q + r0 * dpp, dpp, 4, kr, dp, s, hbuf); break;
        }
        for (int t = 0; t < nr; ++t) {
            const int64_t r = r0 + t, i = r / G;
            fc_vf sv = fc_vf_score_keys(mode, s[t], cap, slope[r], ioff[r] - (float)j0);
            if (masked) {
                int32_t sel = nb, lol = 0, hil = 0; /* FULL: keys < nb */
                if (kind == FC_TILE_PARTIAL) {
                    int64_t x;
                    x = se[i] - j0; sel = (int32_t)(x < 0 ? 0 : x > nb ? nb : x);
                    x = lo[i] - j0; lol = (int32_t)(x < 0 ? 0 : x > nb ? nb : x);
                    x = hi[i] - j0; hil = (int32_t)(x < 0 ? 0 : x > nb ? nb : x);
                }
                sv = fc_vf_mask_ninf(fc_vm_keys_visible(sel, lol, hil), sv);
            }
            const float mx = fmaxf(m[r], fc_vf_hmax(sv));
            /* A row that has seen nothing keeps −inf; exponentiate
             * against 0 then, so that 2^(−inf) = 0, never NaN. */
            const float ms = mx == -INFINITY ? 0.0f : mx;
            const fc_vf e = fc_vf_exp2(fc_vf_sub(sv, fc_vf_set1(ms)));
            fc_vf_store(pb + r * FC_VF_W, e);
            alpha[r] = exp2f(m[r] - ms);
            l[r] = l[r] * alpha[r] + fc_vf_hsum(e);
            m[r] = mx;
        }
    }
}

// dec_pv for a chunk whose V holds a non-finite value: a row's P is exactly 0 on the keys it does
// not see, and 0·inf would be NaN, so products with p = 0 are dropped (as the scalar oracle does).
// A rare path: one row and one vector of d at a time.
static void FN(dec_pv_masked)(float *o, int64_t ldo, int64_t R, const float *p, const float *alpha,
                              const float *const *vr, int nb, int64_t D) {
    for (int64_t r = 0; r < R; ++r) {
        const fc_vf al = fc_vf_set1(alpha[r]);
        for (int64_t d = 0; d < D; d += FC_VF_W) {
            float *orow = o + r * ldo + d;
            fc_vf acc = fc_vf_mul(fc_vf_load(orow), al);
            for (int j = 0; j < nb; ++j) {
                const float pj = p[r * FC_VF_W + j];
                if (pj != 0.0f) acc = fc_vf_fma(fc_vf_set1(pj), fc_vf_load_tail(vr[j] + d, D - d), acc);
            }
            fc_vf_store(orow, acc);
        }
    }
}

// Rows of the nh kv heads hk0 .. hk0 + nh − 1 of batch b over the key-list positions [p0, p1) of ks
// (the union of the rows' visible keys, in order). Each chunk of keys is taken for every head of the
// group in turn, so that K/V are read as they lie in memory ([Sk, Hkv, D]: a chunk's rows of all the
// heads are one contiguous span; a head's rows alone are Hkv·D apart, and reading them head by head
// ran 1.3–2× slower on the dev VM). A head's arithmetic does not depend on its group. Leaves for head
// hk0 + h, at out + h·per_part, the unnormalised o (R, dpp), then the running max m (R, log2 units),
// then the sum l (R).
/* A K or V row at element offset off of x (d-stride ds) as fp32: in place
 * when `inplace` (fp32 rows of unit d-stride), else converted into buf. */
static inline const float *FN(kv_row)(const fc_attn *a, const void *x, int64_t off, int64_t ds, int inplace,
                                      float *buf) {
    if (inplace) return (const float *)x + off;
    fc_cvt_row(buf, (const char *)x + off * (a->dtype == FLASHC_F32 ? 4 : 2), ds, a->dtype, a->D, 1.0f);
    return buf;
}

static void FN(dec_item)(const fc_attn *a, int64_t b, int64_t hk0, int64_t nh, const fc_keysegs *ks, int64_t p0,
                         int64_t p1, const int64_t *se, const int64_t *lo, const int64_t *hi, float *ws, float *out,
                         int64_t per_part) {
    const int64_t D = a->D, G = a->Hq / a->Hkv, R = a->Sq * G, Sq = a->Sq;
    const int64_t dpp = FN(dec_dpp)(D), dp = (D + FC_VF_W - 1) / FC_VF_W * FC_VF_W;
    float *kp = ws;                      /* (VW, dpp), columns ≥ D stay 0 */
    float *vp = kp + FC_VF_W * dpp;      /* (VW, dpp), columns ≥ D stay 0 */
    float *pb = vp + FC_VF_W * dpp;      /* (R, VW) probabilities of the chunk */
    float *alpha = pb + R * FC_VF_W;     /* (R) */
    float *qh = alpha + R;               /* per head: q (R, dpp) (columns ≥ D stay 0), slope (R), ioff (R) */
    const int64_t per_head = R * dpp + 2 * R;
    const size_t esz = a->dtype == FLASHC_F32 ? 4 : 2;
    /* The score pipeline in log2 units (attn_score.h); qk_mul and cap are
     * the same for every head, the slope (per row: slope, ioff = U·slope
     * and i + Sk − Sq of the row) is per head. */
    const fc_score_params sp = fc_attn_score(a);
    const int mode = fc_score_mode(&sp);
    const fc_score_modf mod = fc_score_modf_of(fc_score_mod_make(&sp, b, hk0 * G, FC_LOG2E));

    for (int64_t x = 0; x < nh; ++x) {
        const int64_t hk = hk0 + x;
        float *q = qh + x * per_head, *o = out + x * per_part, *m = o + R * dpp, *l = m + R;
        for (int64_t r = 0; r < R; ++r) {
            const int64_t i = r / G, h = hk * G + r % G;
            const int64_t off = b * a->sq[0] + i * a->sq[1] + h * a->sq[2];
            fc_cvt_row(q + r * dpp, (const char *)a->q + off * (int64_t)esz, a->sq[3], a->dtype, D, mod.qk_mul);
            m[r] = -INFINITY;
            l[r] = 0.0f;
            for (int64_t d = 0; d < dpp; ++d) o[r * dpp + d] = 0.0f;
        }
        fc_fwd_rows_alibi(&sp, b, hk, G, 0, (int)R, (int)R, FC_LOG2E, q + R * dpp, q + R * dpp + R);
    }

    const int k_inplace = a->dtype == FLASHC_F32 && a->sk[3] == 1 && D % FC_VF_W == 0;
    fc_vf hbuf[4 * FC_VF_W];             /* partial sums of the QK kernel */
    const int v_inplace = a->dtype == FLASHC_F32 && a->sv[3] == 1 && D % (4 * FC_VF_W) == 0;
    const int pf = a->sk[3] == 1 && a->sv[3] == 1;
    const fc_keysegs kp_ = fc_keysegs_part(ks, p0, p1);
    for (int sg = 0; sg < kp_.n; ++sg) {
        const int64_t ja = kp_.s0[sg], jb = kp_.s1[sg];
        for (int64_t j0 = ja; j0 < jb; j0 += FC_VF_W) {
            const int nb = (int)(jb - j0 < FC_VF_W ? jb - j0 : FC_VF_W);
            const int kind = fc_tile_kind(se, lo, hi, (int)Sq, j0, j0 + nb);
            if (kind == FC_TILE_EMPTY) continue;
            int64_t ko[FC_VF_W], vo[FC_VF_W];
            if (pf && j0 + FC_DEC_PFK < jb) { /* FC_DEC_PFK keys ahead: K/V stream from L3 or DRAM */
                const int64_t n = jb - (j0 + FC_DEC_PFK) < FC_VF_W ? jb - (j0 + FC_DEC_PFK) : FC_VF_W;
                for (int64_t x = 0; x < nh; ++x) {
                    fc_kv_rows(a, a->sk, b, hk0 + x, j0 + FC_DEC_PFK, n, ko);
                    fc_kv_rows(a, a->sv, b, hk0 + x, j0 + FC_DEC_PFK, n, vo);
                    for (int64_t jj = 0; jj < n; ++jj) {
                        const char *kx = (const char *)a->k + ko[jj] * (int64_t)esz;
                        const char *vx = (const char *)a->v + vo[jj] * (int64_t)esz;
                        for (int64_t y = 0; y < D * (int64_t)esz; y += 64) {
                            __builtin_prefetch(kx + y, 0, 2);
                            __builtin_prefetch(vx + y, 0, 2);
                        }
                    }
                }
            }
            for (int64_t x = 0; x < nh; ++x) {
                const int64_t hk = hk0 + x;
                const float *q = qh + x * per_head, *slope = q + R * dpp, *ioff = slope + R;
                float *o = out + x * per_part, *m = o + R * dpp, *l = m + R;
                /* The chunk's K/V rows, dense or paged (fc_kv_rows), as fp32:
                 * in place when fp32 with unit d-stride (any row stride),
                 * else converted into kp / vp. Key lanes ≥ nb repeat key
                 * nb − 1 (their scores are masked). */
                fc_kv_rows(a, a->sk, b, hk, j0, nb, ko);
                fc_kv_rows(a, a->sv, b, hk, j0, nb, vo);
                const float *kr[FC_VF_W], *vr[FC_VF_W];
                for (int jj = 0; jj < nb; ++jj) {
                    kr[jj] = FN(kv_row)(a, a->k, ko[jj], a->sk[3], k_inplace, kp + jj * dpp);
                    vr[jj] = FN(kv_row)(a, a->v, vo[jj], a->sv[3], v_inplace, vp + jj * dpp);
                }
                for (int jj = nb; jj < FC_VF_W; ++jj) kr[jj] = kr[nb - 1];
#define FC_DEC_SCORES(md)                                                                                  \
    FN(dec_scores)((md), a, R, G, q, dpp, kr, dp, hbuf, kind, j0, nb, se, lo, hi, mod.cap, slope, ioff, pb, \
                   alpha, m, l)
                FC_VSCORE_DISPATCH(mode, FC_DEC_SCORES);
#undef FC_DEC_SCORES
                /* A row's P is 0 on the keys of a partial chunk it does not
                 * see; should V hold an inf or NaN there, 0·inf must not
                 * reach the row. */
                if (kind == FC_TILE_PARTIAL && !FN(rows_finite)(vr, nb, D)) {
                    FN(dec_pv_masked)(o, dpp, R, pb, alpha, vr, nb, D);
                    continue;
                }
                for (int64_t r0 = 0; r0 < R; r0 += FC_DEC_ROWBLK) {
                    const int nr = (int)(R - r0 < FC_DEC_ROWBLK ? R - r0 : FC_DEC_ROWBLK);
                    float *orow = o + r0 * dpp;
                    const float *pr = pb + r0 * FC_VF_W, *al = alpha + r0;
                    switch (nr) {
                    case 1: FN(dec_pv)(orow, dpp, 1, pr, al, vr, nb, dpp); break;
                    case 2: FN(dec_pv)(orow, dpp, 2, pr, al, vr, nb, dpp); break;
                    case 3: FN(dec_pv)(orow, dpp, 3, pr, al, vr, nb, dpp); break;
                    default: FN(dec_pv)(orow, dpp, 4, pr, al, vr, nb, dpp); break;
                    }
                }
            }
        }
    }
}

// o (R, dpp), m, l of (b, hk) → the output rows and lse.
static void FN(dec_finish)(const fc_attn *a, int64_t b, int64_t hk, const float *o, const float *m,
                           const float *l) {
    fc_fwd_finish_rows(a, b, hk, 0, a->Sq * (a->Hq / a->Hkv), o, FN(dec_dpp)(a->D), m, l, fc_store_row);
}

static flashc_status FN(dec_run)(const fc_attn *a) {
    const int64_t G = a->Hq / a->Hkv, R = a->Sq * G, Sq = a->Sq;
    const int64_t dpp = FN(dec_dpp)(a->D);
    int64_t se[FC_DEC_ROWS_CAP], lo[FC_DEC_ROWS_CAP], hi[FC_DEC_ROWS_CAP];
    const fc_mask mk = fc_attn_mask(a);
    for (int64_t i = 0; i < Sq; ++i) fc_visible_keys(&mk, i, &se[i], &lo[i], &hi[i]);
    fc_keysegs ks;
    fc_block_keysegs(&mk, 0, Sq - 1, &ks);
    const int64_t nkeys = fc_keysegs_count(&ks);

    /* The keys are split when the (b, kv head) pairs alone are few: ns is
     * a function of the shape only (determinism), ≥ FC_DEC_SPLIT_KEYS keys
     * per split. Work items are (b, group of nh kv heads, key split). Heads
     * are grouped when a key's rows of all heads lie together (a head
     * stride below the key stride, as in [Sk, Hkv, D] caches and pages;
     * [Hkv, Sk, D] streams best head by head), as many as keep two items
     * per thread and the group's per-head state (q and o rows) within
     * FC_DEC_GROUP_FLOATS. A head's arithmetic does not depend on its group,
     * so the thread count may choose nh. */
    const int64_t ns = fc_fwd_nsplit(a->B * a->Hkv, nkeys, FC_DEC_TARGET_ITEMS, FC_DEC_SPLIT_KEYS);
    const int heads_together = llabs(a->sk[2]) < llabs(a->sk[1]) && llabs(a->sv[2]) < llabs(a->sv[1]);
    int64_t nh = heads_together ? FC_DEC_GROUP_FLOATS / (2 * R * dpp) : 1;
    nh = nh < 1 ? 1 : nh > a->Hkv ? a->Hkv : nh;
    while (nh > 1 && a->B * ((a->Hkv + nh - 1) / nh) * ns < 2 * (int64_t)omp_get_max_threads()) --nh;
    const int64_t ngroups = (a->Hkv + nh - 1) / nh, nouter = a->B * ngroups;
    /* partial of (b, group g, split s, head x): part + ((u·ns + s)·nh + x)·per_part, u = b·ngroups + g */
    const int64_t nitems = nouter * ns, per_part = R * dpp + 2 * R;
    float *part = NULL;
    if (ns > 1) {
        part = (float *)malloc((size_t)(nitems * nh * per_part) * sizeof(float));
        if (!part) return fc_set_error(FLASHC_ERR_OUT_OF_MEMORY, "attn_fwd: %zu bytes of split partials",
                                       (size_t)(nitems * nh * per_part) * sizeof(float));
    }
    int nt = omp_get_max_threads();
    if ((int64_t)nt > nitems) nt = (int)nitems;
    const size_t wsf = FN(dec_scratch_floats)(R, dpp, nh);
    const size_t per = (wsf + (size_t)(nh * per_part) + 15) & ~(size_t)15;
    float *scratch = (float *)aligned_alloc(64, (size_t)nt * per * sizeof(float));
    if (!scratch) {
        free(part);
        return fc_set_error(FLASHC_ERR_OUT_OF_MEMORY, "attn_fwd: %zu bytes of scratch",
                            (size_t)nt * per * sizeof(float));
    }
#pragma omp parallel num_threads(nt)
    {
        float *ws = scratch + (size_t)omp_get_thread_num() * per;
        memset(ws, 0, per * sizeof(float)); /* padding columns stay 0, stale rows finite */
        float *own = ws + wsf; /* per head: (R, dpp) o, then m, l */
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < nitems; ++t) {
            const int64_t u = t / ns, s = t % ns, b = u / ngroups, hk0 = u % ngroups * nh;
            const int64_t nhu = a->Hkv - hk0 < nh ? a->Hkv - hk0 : nh;
            int64_t p0, p1; /* split s: key-list positions [s·N/ns, (s+1)·N/ns), cut at chunk multiples */
            fc_fwd_split(nkeys, s, ns, FC_VF_W, &p0, &p1);
            float *out = ns > 1 ? part + t * nh * per_part : own;
            FN(dec_item)(a, b, hk0, nhu, &ks, p0, p1, se, lo, hi, ws, out, per_part);
            for (int64_t x = 0; ns == 1 && x < nhu; ++x) {
                const float *o = out + x * per_part;
                FN(dec_finish)(a, b, hk0 + x, o, o + R * dpp, o + R * dpp + R);
            }
        }
        if (ns > 1) {
            /* Merge the splits of (b, kv head) in split order (fc_fwd_merge). */
#pragma omp for schedule(static)
            for (int64_t y = 0; y < a->B * a->Hkv; ++y) {
                const int64_t b = y / a->Hkv, hk = y % a->Hkv, u = b * ngroups + hk / nh, x = hk % nh;
                float *o = own, *m = own + R * dpp, *l = m + R;
                fc_fwd_merge(part + (u * ns * nh + x) * per_part, nh * per_part, ns, R, R, dpp, o, m, l);
                FN(dec_finish)(a, b, hk, o, m, l);
            }
        }
    }
    free(scratch);
    free(part);
    return FLASHC_OK;
}
