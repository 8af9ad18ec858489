/* amx.h — the AMX tile configuration both AMX paths use (attn_fwd_avx512bf16.c,
 * attn_bwd_avx512bf16.c; compiled with -mamx-tile -mamx-bf16 where
 * FLASHC_HAVE_AMX): palette 1, tiles 0-7 all 16 rows × 64 bytes (16 fp32,
 * or 16 bf16 pairs, a row). The configuration is per thread: each caller
 * loads it before its tile instructions and releases it (_tile_release)
 * after them. */
#ifndef FLASHC_CPU_AMX_H
#define FLASHC_CPU_AMX_H

#if defined(FLASHC_HAVE_AMX)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

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
