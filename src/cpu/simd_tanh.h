/*
 * simd_tanh.h — the vector tanh, written once over the vector vocabulary:
 * simd_avx2.h and simd_avx512.h include it after their arithmetic, lane
 * masks and fc_vf_exp2_parts. fc_vf_tanh takes, per lane,
 *   |x| ≤ 1/2:  fc_vf_tanh_poly_small, x·P(x²) with P of degree 4 (max
 *               relative error 1.0e-7 evaluated in fp32 by Horner's
 *               rule) — a softcap's u = s / cap nearly always, 7
 *               operations with z = x²;
 *   |x| ≤ 1:    fc_vf_tanh_poly, P of degree 7 (1.3e-7), 9 operations;
 *   elsewhere:  the exp-based form (~22 operations).
 * Both P are relative-error fits of tanh(x)/x in z = x², P(0) = 1.
 */
#ifndef FLASHC_CPU_SIMD_TANH_H
#define FLASHC_CPU_SIMD_TANH_H

#if !defined(FC_SIMD_AVX2) && !defined(FC_SIMD_AVX512)
#error "simd_tanh.h is included by simd_avx2.h / simd_avx512.h"
#endif

FC_SI fc_vf fc_vf_tanh_poly_small(fc_vf x, fc_vf z) {
    fc_vf q = fc_vf_set1(1.724213734e-02f);
    q = fc_vf_fma(q, z, fc_vf_set1(-5.304576457e-02f));
    q = fc_vf_fma(q, z, fc_vf_set1(1.332588196e-01f));
    q = fc_vf_fma(q, z, fc_vf_set1(-3.333314359e-01f));
    q = fc_vf_fma(q, z, fc_vf_set1(1.0f));
    return fc_vf_mul(x, q);
}
FC_SI fc_vf fc_vf_tanh_poly(fc_vf x, fc_vf z) {
    fc_vf q = fc_vf_set1(-3.5326494253240526e-04f);
    q = fc_vf_fma(q, z, fc_vf_set1(2.2819458972662687e-03f));
    q = fc_vf_fma(q, z, fc_vf_set1(-7.917051203548908e-03f));
    q = fc_vf_fma(q, z, fc_vf_set1(2.1464549005031586e-02f));
    q = fc_vf_fma(q, z, fc_vf_set1(-5.387081578373909e-02f));
    q = fc_vf_fma(q, z, fc_vf_set1(1.333215832710266e-01f));
    q = fc_vf_fma(q, z, fc_vf_set1(-3.3333277702331543e-01f));
    q = fc_vf_fma(q, z, fc_vf_set1(1.0f));
    return fc_vf_mul(x, q);
}

/* tanh x, relative error ~2.5e-7 everywhere, odd, ±1 for large |x| (never
 * NaN unless x is NaN). Lanes with |x| ≤ 1/2 (a softcap's s / cap, nearly
 * always): fc_vf_tanh_poly_small; 1/2 < |x| ≤ 1: fc_vf_tanh_poly; the
 * others: with w = 1 − e^(−2|x|) ∈ [0, 1) (fc_vf_exp2_parts, no
 * cancellation near 0), tanh |x| = w / (2 − w), then the sign of x. Each
 * lane's form depends on its own value only (a masked key's Inf must not
 * change a clean lane's bits); a vector computes a wider form only when some
 * lane needs it. */
FC_SI fc_vf fc_vf_tanh(fc_vf x) {
    const fc_vf one = fc_vf_set1(1.0f), z = fc_vf_mul(x, x);
    const fc_vm tiny = fc_vf_le(z, fc_vf_set1(0.25f)); /* (NaN: not ≤) */
    fc_vf tp = fc_vf_tanh_poly_small(x, z);
    if (fc_vm_all(tiny)) return tp;
    const fc_vm small = fc_vf_le(z, one);
    if (fc_vm_any(fc_vm_andnot(tiny, small))) tp = fc_vf_select(tiny, tp, fc_vf_tanh_poly(x, z));
    if (fc_vm_all(small)) return tp;
    fc_vf s, p;
    fc_vf_exp2_parts(fc_vf_mul(fc_vf_abs(x), fc_vf_set1(-2.0f * FC_LOG2E_F)), &s, &p);
    const fc_vf w = fc_vf_fnma(s, p, fc_vf_sub(one, s));
    const fc_vf t = fc_vf_div(w, fc_vf_sub(fc_vf_set1(2.0f), w));
    return fc_vf_select(small, tp, fc_vf_xorsign(t, x)); /* per lane: a lane's value alone picks its form */
}

#endif /* FLASHC_CPU_SIMD_TANH_H */
