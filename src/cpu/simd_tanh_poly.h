/*
 * simd_tanh_poly.h — tanh x = x·P(x²) on two ranges, written once over the
 * vector vocabulary: simd_avx2.h and simd_avx512.h include it after their
 * arithmetic (fc_vf_set1, fc_vf_mul, fc_vf_fma), and their fc_vf_tanh takes
 *   |x| ≤ 1/2:  fc_vf_tanh_poly_small, P of degree 4 (max relative error
 *               1.0e-7 evaluated in fp32 by Horner's rule) — a softcap's
 *               u = s / cap nearly always, 7 operations with z = x²;
 *   |x| ≤ 1:    fc_vf_tanh_poly, P of degree 7 (1.3e-7), 9 operations;
 *   elsewhere:  the exp-based form (~22 operations).
 * Both P are relative-error fits of tanh(x)/x in z = x², P(0) = 1.
 */
#ifndef FLASHC_CPU_SIMD_TANH_POLY_H
#define FLASHC_CPU_SIMD_TANH_POLY_H

#if !defined(FC_SIMD_AVX2) && !defined(FC_SIMD_AVX512)
#error "simd_tanh_poly.h is included by simd_avx2.h / simd_avx512.h"
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

#endif /* FLASHC_CPU_SIMD_TANH_POLY_H */
