/*
 * simd_score.h — the score pipeline of attn_score.h (softcap, then ALiBi,
 * then the mask of attn_mask.h) on vectors, written once over the
 * vocabulary of simd_avx2.h / simd_avx512.h: include one of those first.
 *
 * Units as attn_score.h: a kernel multiplies <q, k> by mod.qk_mul (folded
 * into Q) giving u; with modf = fc_score_modf_of(mod) in unit U, lane-wise
 *   s = cap·tanh(u) (cap = modf.cap ≠ 0) or u;   s −= slope·|dist|
 * exactly as fc_scoref (a product, then a difference: no fused rounding),
 * with dist = i + Sk − Sq − j, exact in fp32 while |i + Sk − Sq| and j stay
 * below 2^24. The mode (which steps run) is a compile-time argument: call
 * these through FC_VSCORE_DISPATCH, so that each combination is its own
 * straight-line code and FC_SCORE_PLAIN costs nothing.
 */
#ifndef FLASHC_CPU_SIMD_SCORE_H
#define FLASHC_CPU_SIMD_SCORE_H

#if !defined(FC_SIMD_AVX2) && !defined(FC_SIMD_AVX512)
#error "include simd_avx2.h or simd_avx512.h before simd_score.h"
#endif

/* The vector steps below run every step their variant names (no run-time
 * check): they take the exact variants of FC_SCORE_VARIANTS (attn_score.h),
 * dispatched per tile by FC_VSCORE_DISPATCH on fc_score_mode(p) or
 * fc_score_mode_of(mod). */
_Static_assert(FC_SCORE_LIST_N(FC_SCORE_VARIANTS) == 1 << FC_SCORE_NBITS,
               "simd_score.h: FC_SCORE_VARIANTS must list every combination exactly");
#define FC_VSCORE_DISPATCH(mode, CALL) FC_SCORE_DISPATCH(FC_SCORE_VARIANTS, mode, CALL)

/* fc_scoref lane-wise. u: lanes of qk_mul·<q, k>; cap: U·softcap
 * (broadcast); slope: U·slope per lane; dist: i + Sk − Sq − j per lane.
 * *t receives tanh(u) when mode has FC_SCORE_CAP (for the backward's
 * fc_score_dgradf), else is left alone. */
FC_SI fc_vf fc_vf_scoref_t(int mode, fc_vf u, fc_vf cap, fc_vf slope, fc_vf dist, fc_vf *t) {
    fc_vf s = u;
    if (FC_SCORE_NEEDS_TANH(mode)) {
        *t = fc_vf_tanh(u);
        s = fc_vf_mul(cap, *t);
    }
    if (FC_SCORE_NEEDS_DIST(mode)) s = fc_vf_sub(s, fc_vf_mul(slope, fc_vf_abs(dist)));
    return s;
}
FC_SI fc_vf fc_vf_scoref(int mode, fc_vf u, fc_vf cap, fc_vf slope, fc_vf dist) {
    fc_vf t;
    return fc_vf_scoref_t(mode, u, cap, slope, dist, &t);
}

/* fc_score_dgradf lane-wise: 1 − t² with the softcap (t = tanh u), else 1. */
FC_SI fc_vf fc_vf_score_dgradf(int mode, fc_vf t) {
    return FC_SCORE_NEEDS_TANH(mode) ? fc_vf_fnma(t, t, fc_vf_set1(1.0f)) : fc_vf_set1(1.0f);
}

/* ------------------------------------------------ the softcap in the softmax
 * A full tile whose only score step is the softcap (mode FC_SCORE_CAP) runs
 * the step inside the softmax (attn_fwd_body.h, attn_fwd_avx512bf16.c): the
 * max pass turns each u into t = tanh u in place (fc_vf_cap_max) and keeps
 * the row max of t, scaled once (cap·max t = max cap·t exactly: rounding is
 * monotone and cap > 0); the exponent is t·cap − m in one rounding
 * (fc_vf_softmax_arg). One pass over the tile and one multiply a score less
 * than fc_vtile_score_rows before the softmax. */
FC_SI float fc_softmax_cap(int mode, int partial, float cap) {
    return mode == FC_SCORE_CAP && !partial ? cap : 0.0f;
}
/* *p ← tanh *p; returns max(mt, that). */
FC_SI fc_vf fc_vf_cap_max(float *p, fc_vf mt) {
    const fc_vf t = fc_vf_tanh(fc_vf_loada(p));
    fc_vf_storea(p, t);
    return fc_vf_max(mt, t);
}
/* The softmax's exponent of x against the row max m: x − m, or x·cap − m
 * when the step is fused (cap > 0, vcap = cap broadcast). */
FC_SI fc_vf fc_vf_softmax_arg(float cap, fc_vf x, fc_vf vcap, fc_vf m) {
    return cap > 0.0f ? fc_vf_fms(x, vcap, m) : fc_vf_sub(x, m);
}

/* s where vis, −inf elsewhere (the mask step; whatever s holds, even NaN,
 * does not pass an invisible lane). */
FC_SI fc_vf fc_vf_mask_ninf(fc_vm vis, fc_vf s) { return fc_vf_select(vis, s, fc_vf_set1(-INFINITY)); }

/* ------------------------------------------------ keys on the lanes */
/* Lanes k (tile-relative key k) visible to a row whose tile-relative ranges
 * are (se, lo, hi): FC_KEY_VISIBLE(se, lo, hi, k). */
FC_SI fc_vm fc_vm_keys_visible(int32_t se, int32_t lo, int32_t hi) {
    return fc_vm_key_visible(fc_vi_set1(se), fc_vi_set1(lo), fc_vi_set1(hi), fc_vi_iota());
}
/* Scores of one row on keys j0 + k (k < FC_VF_W): ioff = i + Sk − Sq − j0
 * of the row, slope its U·slope. */
FC_SI fc_vf fc_vf_score_keys(int mode, fc_vf u, float cap, float slope, float ioff) {
    return fc_vf_scoref(mode, u, fc_vf_set1(cap), fc_vf_set1(slope), fc_vf_sub(fc_vf_set1(ioff), fc_vf_iota()));
}

/* ------------------------------------------------ rows on the lanes */
// st is (nb, ld) with lanes = query rows: st[j·ld + r] = u of row r and key j0 + j, for r < nrows
// (a multiple of FC_VF_W; st rows FC_VF_W-aligned). Becomes the score of fc_scoref with row r's
// slope[r] (U units) and dist = ioff[r] − (j0 + j), ioff[r] = i_r + Sk − Sq; when partial, −inf where
// row r does not see the key: FC_KEY_VISIBLE(sel[r], lol[r], hil[r], j) on tile-relative ranges.
// Modes with no per-element step and !partial do nothing.
FC_SI void fc_vtile_score_rows(int mode, int partial, float *st, int64_t ld, int nb, int nrows, int64_t j0,
                               float cap, const float *slope, const float *ioff, const int32_t *sel,
                               const int32_t *lol, const int32_t *hil) {
    if (mode == FC_SCORE_PLAIN && !partial) return;
    const fc_vf vcap = fc_vf_set1(cap);
    for (int rb = 0; rb < nrows; rb += FC_VF_W) {
        const fc_vf sl = FC_SCORE_NEEDS_DIST(mode) ? fc_vf_load(slope + rb) : fc_vf_zero();
        const fc_vf io = FC_SCORE_NEEDS_DIST(mode) ? fc_vf_sub(fc_vf_load(ioff + rb), fc_vf_set1((float)j0)) : fc_vf_zero();
        fc_vi vse = fc_vi_set1(0), vlo = vse, vhi = vse;
        if (partial) {
            vse = fc_vi_load(sel + rb);
            vlo = fc_vi_load(lol + rb);
            vhi = fc_vi_load(hil + rb);
        }
        for (int j = 0; j < nb; ++j) {
            float *p = st + (int64_t)j * ld + rb;
            fc_vf s = fc_vf_scoref(mode, fc_vf_loada(p), vcap, sl, fc_vf_sub(io, fc_vf_set1((float)j)));
            if (partial) s = fc_vf_mask_ninf(fc_vm_key_visible(vse, vlo, vhi, fc_vi_set1(j)), s);
            fc_vf_storea(p, s);
        }
    }
}

/* fc_vtile_score_rows with a run-time mode: one instantiation per (variant, partial). */
static inline void fc_vtile_score_rows_any(int mode, int partial, float *st, int64_t ld, int nb, int nrows,
                                           int64_t j0, float cap, const float *slope, const float *ioff,
                                           const int32_t *sel, const int32_t *lol, const int32_t *hil) {
#define FC_VS_ROWS(m, pa) fc_vtile_score_rows((m), (pa), st, ld, nb, nrows, j0, cap, slope, ioff, sel, lol, hil)
#define FC_VS_ROWS_PARTIAL(m) FC_VS_ROWS(m, 1)
#define FC_VS_ROWS_FULL(m) FC_VS_ROWS(m, 0)
    if (partial) {
        FC_VSCORE_DISPATCH(mode, FC_VS_ROWS_PARTIAL);
    } else {
        FC_VSCORE_DISPATCH(mode, FC_VS_ROWS_FULL);
    }
#undef FC_VS_ROWS_FULL
#undef FC_VS_ROWS_PARTIAL
#undef FC_VS_ROWS
}

#endif /* FLASHC_CPU_SIMD_SCORE_H */
