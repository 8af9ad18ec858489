/* The AVX2 vector vocabulary's math (tests/simd/tanh_check.h), compiled with
 * the AVX2 flags like src/cpu/*_avx2.c; skipped (passes) on a CPU without
 * AVX2 and FMA. */
#include "simd_avx2.h"

#include "simd/tanh_check.h"

int main(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
        printf("avx2: not on this CPU, skipped\n");
        return 0;
    }
    return tanh_check("avx2");
}
