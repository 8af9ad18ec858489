/* amx.h — what both AMX paths use (attn_fwd_avx512bf16.c,
 * attn_bwd_avx512bf16.c; compiled with the AVX-512 flags and -mamx-tile
 * -mamx-bf16 where FLASHC_HAVE_AMX):
 *   fc_amx_config: palette 1, tiles 0-7 all 16 rows × 64 bytes (16 fp32, or
 *     16 bf16 pairs, a row). The configuration is per thread: each caller
 *     loads it before its tile instructions and releases it
 *     (_tile_release) after them.
 *   fc_bf16_scrub: an operand with its non-finite bf16 values replaced by
 *     +0, for the products on scrubbed operands plus the non-finite terms
 *     of the rows that see them (a clean row then gets a clean call's bits). */
#ifndef FLASHC_CPU_AMX_H
#define FLASHC_CPU_AMX_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* dst[0..n) = src[0..n) with every non-finite bf16 (exponent all ones)
 * replaced by +0; n a multiple of 32, dst == src allowed. Returns whether
 * there was one. */
static inline int fc_bf16_scrub(uint16_t *dst, const uint16_t *src, int64_t n) {
    const __m512i expo = _mm512_set1_epi16(0x7f80);
    __mmask32 any = 0;
    for (int64_t i = 0; i < n; i += 32) {
        const __m512i v = _mm512_loadu_si512(src + i);
        const __mmask32 bad = _mm512_cmpeq_epi16_mask(_mm512_and_si512(v, expo), expo);
        any |= bad;
        if (bad || dst != src) _mm512_storeu_si512(dst + i, _mm512_maskz_mov_epi16(~bad, v));
    }
    return any != 0;
}

#if defined(FLASHC_HAVE_AMX)
static inline void fc_amx_config(void) {
    struct {
        uint8_t palette, start_row, rsv[14];
        uint16_t colsb[16];
        uint8_t rows[16];
    } cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; ++t) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    _tile_loadconfig(&cfg);
}
#endif

#endif /* FLASHC_CPU_AMX_H */
