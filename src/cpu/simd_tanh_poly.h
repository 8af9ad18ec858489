/*
 * simd_tanh_poly.h — tanh x = x·P(x²) for |x| ≤ 1, P of degree 7 (a
 * relative-error least-squares fit; max relative error 1.3e-7 evaluated in
 * fp32 by Horner's rule over [−1, 1]), shared by the vector vocabularies
 * (simd_avx2.h, simd_avx512.h): their fc_vf_tanh takes it for a vector
 * whose every lane has |x| ≤ 1 — a softcap's u = s / cap nearly always —
 * and the exp-based form otherwise. 9 operations instead of ~22.
 */
#ifndef FLASHC_CPU_SIMD_TANH_POLY_H
#define FLASHC_CPU_SIMD_TANH_POLY_H

#define FC_TANH_P7 (-3.5326494253240526e-04f)
#define FC_TANH_P6 (2.2819458972662687e-03f)
#define FC_TANH_P5 (-7.917051203548908e-03f)
#define FC_TANH_P4 (2.1464549005031586e-02f)
#define FC_TANH_P3 (-5.387081578373909e-02f)
#define FC_TANH_P2 (1.333215832710266e-01f)
#define FC_TANH_P1 (-3.3333277702331543e-01f)
#define FC_TANH_P0 1.0f

#endif /* FLASHC_CPU_SIMD_TANH_POLY_H */
