/*
 * test_mask_seam.c — the masking seam's tile shortcut (src/common/attn_mask.h):
 * fc_vis_span_of / fc_vis_span_at give, for the rows i0 + c (c < FC_VIS_SPAN),
 * exactly the ranges fc_visible_keys gives row by row. Random and edge masks
 * (open sides, windows wider than the sequence, INT64_MAX windows, sink counts
 * past Sk, Sq ≠ Sk both ways), every row and every c.
 * And fc_key_block_rows: for key blocks of several widths, its ≤ 2 row
 * segments hold exactly the rows that see some key of the block (brute
 * force over the keys), and their union over the blocks exactly the rows
 * that see some key at all (!fc_tile_empty(se, lo, hi, 0, Sk), the
 * predicate the convert kernel uses, itself checked against brute force
 * over every key) — what the CUDA backward's
 * ordered dQ relies on: every dQ tile holding such a row is visited, and
 * so initialised by its first block's copy; the convert kernel reads only
 * those rows (src/cuda/attn_bwd_wgmma.cu).
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

/* Sq, Sk ≤ 300; random and edge window sides (wr = 0: causal), sink counts
 * up to past Sk. */
static fc_mask random_mask(void) {
    fc_mask m;
    m.Sq = 1 + (int64_t)(rnd() % 300);
    m.Sk = 1 + (int64_t)(rnd() % 300);
    m.wl = pick_side(m.Sk);
    m.wr = rnd() % 3 == 0 ? 0 : pick_side(m.Sq);
    m.n_sink = rnd() % 3 == 0 ? 0 : (int64_t)(rnd() % (uint64_t)(m.Sk + 8));
    return m;
}

int main(void) {
    long checked = 0, bad = 0;
    for (int t = 0; t < 3000; ++t) {
        const fc_mask m = random_mask();
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

    long bchecked = 0, bbad = 0;
    static const int64_t widths[] = {1, 16, 64, 128, 176};
    for (int t = 0; t < 600; ++t) {
        const fc_mask m = random_mask();
        const int64_t BN = t % 6 == 5 ? 1 + (int64_t)(rnd() % 200) : widths[t % 5];
        /* per row, over the blocks: in some block's rows / sees some key of a block (brute force) */
        static unsigned char covered[300], seen[300]; /* random_mask: Sq ≤ 300 */
        for (int64_t i = 0; i < m.Sq; ++i) covered[i] = seen[i] = 0;
        for (int64_t j0 = 0; j0 < m.Sk; j0 += BN) {
            const int64_t j1 = j0 + BN < m.Sk ? j0 + BN : m.Sk;
            int64_t r0[2], r1[2];
            const int n = fc_key_block_rows(&m, j0, j1, r0, r1);
            for (int64_t i = 0; i < m.Sq; ++i) {
                int64_t s, l, h;
                fc_visible_keys(&m, i, &s, &l, &h);
                int sees = 0;
                for (int64_t j = j0; j < j1 && !sees; ++j) sees = fc_key_visible(s, l, h, j);
                int in = 0;
                for (int k = 0; k < n; ++k) in |= r0[k] <= i && i < r1[k];
                covered[i] |= (unsigned char)in;
                seen[i] |= (unsigned char)sees;
                ++bchecked;
                if (sees != in && ++bbad <= 10)
                    fprintf(stderr, "Sq %lld Sk %lld wl %lld wr %lld sinks %lld keys [%lld, %lld) row %lld: sees %d, rows %d\n",
                            (long long)m.Sq, (long long)m.Sk, (long long)m.wl, (long long)m.wr, (long long)m.n_sink,
                            (long long)j0, (long long)j1, (long long)i, sees, in);
            }
        }
        for (int64_t i = 0; i < m.Sq; ++i) {
            int64_t s, l, h;
            fc_visible_keys(&m, i, &s, &l, &h);
            const int some = !fc_tile_empty(s, l, h, 0, m.Sk), brute = seen[i] != 0;
            bchecked += 2;
            if ((some != brute || some != (covered[i] != 0)) && ++bbad <= 10)
                fprintf(stderr, "Sq %lld Sk %lld wl %lld wr %lld sinks %lld row %lld: sees a key %d (brute force %d), in a block's rows %d\n",
                        (long long)m.Sq, (long long)m.Sk, (long long)m.wl, (long long)m.wr, (long long)m.n_sink,
                        (long long)i, some, brute, covered[i]);
        }
    }
    printf("test_mask_seam: %ld block rows checked, %ld differ\n", bchecked, bbad);
    return bad != 0 || checked < 100000 || bbad != 0 || bchecked < 100000;
}
