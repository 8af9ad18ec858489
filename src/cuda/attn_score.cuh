/*
 * attn_score.cuh — the score pipeline's variants (src/common/attn_score.h) on
 * the device: the one place where the CUDA kernels turn a problem's run-time
 * modifier mode into a compile-time variant, and the per-element score step
 * of a variant. No kernel lists the modifiers itself.
 *
 * Host, once per launch (a launcher templated on the variant V):
 *   return fcc_score_dispatch<FCC_SCORE_FEW>(fc_score_mode(&p.score), [&](auto v) {
 *       return launch<T, DP, decltype(v)::value>(p);
 *   });
 * Device, per element of a kernel compiled for V (a template int):
 *   x = fcc_score_step<V, fcc_tanh_fast>(mod, qk, dist, dg);
 * where V == FC_SCORE_PLAIN is the kernel's plain path (x = qk·qk_mul: the
 * kernels keep their own one-FFMA form there).
 */
#ifndef FLASHC_CUDA_ATTN_SCORE_CUH
#define FLASHC_CUDA_ATTN_SCORE_CUH

#include "fc_cuda.cuh"

/* A variant as a type, for generic lambdas: decltype(v)::value. */
template <int V> struct fcc_score_variant {
    static constexpr int value = V;
};

/* The variant lists of attn_score.h, as tags for fcc_score_dispatch. */
enum fcc_score_list {
    FCC_SCORE_ALL_EXACT = 0, /* FC_SCORE_VARIANTS: one exact variant per combination */
    FCC_SCORE_FEW = 1        /* FC_SCORE_VARIANTS2: plain + one catch-all */
};

#define FCC_SCORE_TRY_(v, f) \
    if (FC_SCORE_SERVES(v, mode)) return f(fcc_score_variant<(v)>{});
#define FCC_SCORE_LAST_(v, f) return f(fcc_score_variant<(v)>{});

/* f(fcc_score_variant<V>{}) for the variant V of LIST that serves `mode`
 * (fc_score_mode / fc_score_mode_of); returns what f returns. One branch per
 * call: call it per launch on the host or per tile / head on the device. */
#pragma nv_exec_check_disable
template <fcc_score_list LIST, class F>
__host__ __device__ __forceinline__ decltype(auto) fcc_score_dispatch(int mode, F &&f) {
    if constexpr (LIST == FCC_SCORE_ALL_EXACT) {
        FC_SCORE_VARIANTS(FCC_SCORE_TRY_, FCC_SCORE_LAST_, f)
    } else {
        FC_SCORE_VARIANTS2(FCC_SCORE_TRY_, FCC_SCORE_LAST_, f)
    }
}
#undef FCC_SCORE_TRY_
#undef FCC_SCORE_LAST_

/* tanh flavours of the step: accurate (F32/F64 kernels) and the hardware
 * tanh.approx (sm_75+, max relative error about 2^-11: below the F16/BF16
 * rounding of P and dS in the tensor-core kernels). */
__device__ __forceinline__ float fcc_tanh_approx(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
struct fcc_tanh_fast {
    static __device__ __forceinline__ float f(float x) { return fcc_tanh_approx(x); }
};
struct fcc_tanh_accurate {
    static __device__ __forceinline__ float f(float x) { return tanhf(x); }
    static __device__ __forceinline__ double f(double x) { return tanh(x); }
};

/* The seam's step functions, overloaded on the precision of the constants. */
__device__ __forceinline__ float fcc_score_step_of(int v, const fc_score_modf &m, float u, float t, float dist) {
    return fc_score_stepf(v, &m, u, t, dist);
}
__device__ __forceinline__ double fcc_score_step_of(int v, const fc_score_mod &m, double u, double t, double dist) {
    return fc_score_step(v, &m, u, t, dist);
}
__device__ __forceinline__ float fcc_score_dgrad_of(int v, const fc_score_modf &m, float t) {
    return fc_score_step_dgradf(v, &m, t);
}
__device__ __forceinline__ double fcc_score_dgrad_of(int v, const fc_score_mod &m, double t) {
    return fc_score_step_dgrad(v, &m, t);
}

/* The score step of variant V (attn_score.h) from the raw dot qk = <q, k>:
 * u = qk·qk_mul, t = TANH::f(u) when the softcap runs, x in m's unit;
 * dg = ∂x/∂(scale·qk) for the backward's dS. A: float with fc_score_modf,
 * double with fc_score_mod; dist = fc_alibi_dist (read when the variant does). */
template <int V, class TANH, class A, class M>
__device__ __forceinline__ A fcc_score_step(const M &m, A qk, A dist, A &dg) {
    const A u = qk * (A)m.qk_mul;
    const A t = FC_SCORE_ON(V, FC_SCORE_CAP, m.cap != A(0)) ? TANH::f(u) : A(0);
    dg = fcc_score_dgrad_of(V, m, t);
    return fcc_score_step_of(V, m, u, t, dist);
}

/* The factored step (fc_score_fold, attn_score.h) of variant V: `inner` from
 * the raw dot, for kernels that fold f.outer into their exp2 FFMA. */
template <int V, class TANH>
__device__ __forceinline__ float fcc_score_inner_step(const fc_score_foldf &f, float dot, float dist) {
    const float t = FC_SCORE_ON(V, FC_SCORE_CAP, f.capped) ? TANH::f(dot * f.qk_mul) : 0.0f;
    return fc_score_inner_stepf(V, &f, dot, t, dist);
}

#endif /* FLASHC_CUDA_ATTN_SCORE_CUH */
