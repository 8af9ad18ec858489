/* IEEE binary16 <-> binary32, bit-exact and portable (no F16C needed): the
 * scalar paths and the SIMD vocabularies' one-element helpers (fc_ld1_f32 /
 * fc_st1_f32 in simd_avx2.h / simd_avx512.h) use these; whole vectors
 * convert with F16C there. */
#include "flashc_internal.h"

#include <string.h>

float fc_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);             /* inf / nan */
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (man << 13);    /* normal */
    } else if (man == 0) {
        bits = sign;                                         /* ±0 */
    } else {                                                 /* subnormal */
        int e = -1;
        do { man <<= 1; ++e; } while (!(man & 0x400u));
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t fc_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu)); /* nan */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to ≥ 65520: inf */
    if (ax < 0x38800000u) {                                   /* result subnormal or 0 */
        if (ax < 0x33000000u) return sign;                    /* < 2^-25: rounds to 0 */
        const uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126u - e;                      /* 14..24 */
        uint32_t r = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (r & 1u))) ++r;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ax - 0x38000000u;                            /* rebias 127 -> 15 */
    r += 0xfffu + ((r >> 13) & 1u);                           /* round to nearest even */
    return (uint16_t)(sign | (r >> 13));
}
