/*
 * test_mask_seam.c — the masking seam's tile shortcut (src/common/attn_mask.h):
 * fc_vis_span_of / fc_vis_span_at give, for the rows i0 + c (c < FC_VIS_SPAN),
 * exactly the ranges fc_visible_keys gives row by row. Random and edge masks
 * (open sides, windows wider than the sequence, INT64_MAX windows, sink counts
 * past Sk, Sq ≠ Sk both ways), every row and every c.
 */
#include "common/attn_mask.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static int64_t pick_side(int64_t S) {
    switch (rnd() % 6) {
    case 0: return -1;
    case 1: return INT64_MAX;
    case 2: return S + (int64_t)(rnd() % 5);
    default: return (int64_t)(rnd() % (uint64_t)(S + 1));
    }
}

int main(void) {
    long checked = 0, bad = 0;
    for (int t = 0; t < 3000; ++t) {
        fc_mask m;
        m.Sq = 1 + (int64_t)(rnd() % 300);
        m.Sk = 1 + (int64_t)(rnd() % 300);
        m.wl = pick_side(m.Sk);
        m.wr = rnd() % 3 == 0 ? 0 : pick_side(m.Sq); /* 0: causal */
        m.n_sink = rnd() % 3 == 0 ? 0 : (int64_t)(rnd() % (uint64_t)(m.Sk + 8));
        const int64_t step = 1 + (int64_t)(rnd() % 64);
        for (int64_t i0 = 0; i0 < m.Sq; i0 += step) {
            const fc_vis_span v = fc_vis_span_of(&m, i0);
            for (int c = 0; c < FC_VIS_SPAN && i0 + c < m.Sq; ++c) {
                int64_t s, l, h;
                int s2, l2, h2;
                fc_visible_keys(&m, i0 + c, &s, &l, &h);
                fc_vis_span_at(v, c, &s2, &l2, &h2);
                ++checked;
                if (s != s2 || l != l2 || h != h2) {
                    if (++bad <= 10)
                        fprintf(stderr,
                                "Sq %lld Sk %lld wl %lld wr %lld sinks %lld row %lld: (%lld %lld %lld) vs span (%d %d %d)\n",
                                (long long)m.Sq, (long long)m.Sk, (long long)m.wl, (long long)m.wr,
                                (long long)m.n_sink, (long long)(i0 + c), (long long)s, (long long)l, (long long)h,
                                s2, l2, h2);
                }
            }
        }
    }
    printf("test_mask_seam: %ld rows checked, %ld differ\n", checked, bad);
    return bad != 0 || checked < 100000;
}
