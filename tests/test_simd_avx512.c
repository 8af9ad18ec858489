/* The AVX-512 vector vocabulary's math (tests/simd/tanh_check.h), compiled
 * with the AVX-512 flags like src/cpu/*_avx512.c; skipped (passes) on a CPU
 * without AVX-512. */
#include "simd_avx512.h"

#include "simd/tanh_check.h"

int main(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512dq") || !__builtin_cpu_supports("avx512vl")) {
        printf("avx512: not on this CPU, skipped\n");
        return 0;
    }
    return tanh_check("avx512");
}
