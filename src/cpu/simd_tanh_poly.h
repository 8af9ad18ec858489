/*
 * simd_tanh_poly.h — tanh x = x·P(x²) for |x| ≤ 1, P of degree 7 (a
 * relative-error least-squares fit; max relative error 1.3e-7 evaluated in
 * fp32 by Horner's rule over [−1, 1]), written once over the vector
 * vocabulary: simd_avx2.h and simd_avx512.h include it after their
 * arithmetic (fc_vf_set1, fc_vf_mul, fc_vf_fma), and their fc_vf_tanh takes
 * it on the lanes with |x| ≤ 1 — a softcap's u = s / cap nearly always —
 * and the exp-based form elsewhere. 9 operations instead of ~22.
 */
#ifndef FLASHC_CPU_SIMD_TANH_POLY_H
#define FLASHC_CPU_SIMD_TANH_POLY_H

#if !defined(FC_SIMD_AVX2) && !defined(FC_SIMD_AVX512)
#error "simd_tanh_poly.h is included by simd_avx2.h / simd_avx512.h"
#endif

FC_SI fc_vf fc_vf_tanh_poly(fc_vf x) {
    const fc_vf z = fc_vf_mul(x, x);
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
