/*
 * tests/simd/tanh_check.h — the body of tests/test_simd_avx2.c and
 * tests/test_simd_avx512.c: the vector tanh of one vocabulary (included
 * before this file) against double tanh.
 *   - relative error ≤ 2.5e-7 on a dense sweep of [−12, 12] (both polynomial
 *     ranges, their borders, the exp form) and on every binade from 2^−140
 *     to 2^20, both signs;
 *   - odd, |tanh| ≤ 1, tanh(±0) = ±0, tanh(±inf) = ±1, NaN stays NaN;
 *   - per lane: a lane's bits do not depend on the other lanes' values
 *     (the masked-key rule of flashc.h: a masked key's Inf/NaN sitting in
 *     the neighbouring lanes must not move a visible score's bits).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static void tanh_vec(const float *in, float *out) { fc_vf_store(out, fc_vf_tanh(fc_vf_load(in))); }

static int tanh_check(const char *isa) {
    enum { W = FC_VF_W };
    float in[W], out[W];
    double worst = 0.0, worst_x = 0.0;
    int bad = 0;
#define TC_FAIL(...) do { if (bad++ < 10) { printf("%s: ", isa); printf(__VA_ARGS__); printf("\n"); } } while (0)
    /* the dense sweep, then the binades */
    const long N = 1L << 22;
    for (int pass = 0; pass < 2; ++pass) {
        const long n = pass == 0 ? N : 2L * 160 * 4096;
        for (long i0 = 0; i0 < n; i0 += W) {
            for (int l = 0; l < W; ++l) {
                const long i = i0 + l;
                if (pass == 0) {
                    in[l] = (float)(-12.0 + 24.0 * (double)i / (double)N);
                } else {
                    const long e = (i / 4096) % 160, m = i % 4096, s = i / (160 * 4096);
                    in[l] = (s ? -1.0f : 1.0f) * ldexpf(1.0f + (float)m / 4096.0f, (int)e - 140);
                }
            }
            tanh_vec(in, out);
            for (int l = 0; l < W; ++l) {
                const double t = tanh((double)in[l]);
                const double rel = t == 0.0 ? fabs((double)out[l]) : fabs((double)out[l] - t) / fabs(t);
                if (rel > worst) worst = rel, worst_x = in[l];
                if (!(fabsf(out[l]) <= 1.0f)) TC_FAIL("|tanh(%a)| = %a > 1", in[l], out[l]);
            }
        }
    }
    if (worst > 2.5e-7) TC_FAIL("max relative error %.3g at x = %.9g (> 2.5e-7)", worst, worst_x);
    /* oddness, on the sweep's grid */
    for (long i0 = 0; i0 < N / 4; i0 += W) {
        float neg[W], oneg[W];
        for (int l = 0; l < W; ++l) in[l] = (float)(12.0 * (double)(i0 + l) / (double)(N / 4)), neg[l] = -in[l];
        tanh_vec(in, out);
        tanh_vec(neg, oneg);
        for (int l = 0; l < W; ++l)
            if (oneg[l] != -out[l]) TC_FAIL("tanh(-%a) = %a != -tanh(%a) = %a", in[l], oneg[l], in[l], -out[l]);
    }
    /* special values, each alone in a vector of 0.3s and in a vector of NaNs */
    const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e30f, -1e30f, 1e-45f, -1e-45f};
    const float want[] = {0.0f, -0.0f, 1.0f, -1.0f, NAN, 1.0f, -1.0f, 1e-45f, -1e-45f};
    for (size_t k = 0; k < sizeof sp / sizeof sp[0]; ++k)
        for (int fill = 0; fill < 2; ++fill) {
            for (int l = 0; l < W; ++l) in[l] = fill ? NAN : 0.3f;
            in[W / 2] = sp[k];
            tanh_vec(in, out);
            const float o = out[W / 2];
            const int ok = isnan(want[k]) ? isnan(o) : (o == want[k] && signbit(o) == signbit(want[k]));
            if (!ok) TC_FAIL("tanh(%g) = %g, want %g", sp[k], o, want[k]);
        }
    /* lane independence: each probe value alone (all lanes) against the same
     * value in one lane among poison neighbours, for every lane and poison */
    const float probe[] = {0.013f, -0.4999f, 0.5001f, 0.77f, -0.99f, 1.0001f, -3.5f, 9.9f, 0.25f, 0.5f, 1.0f};
    const float poison[] = {INFINITY, -INFINITY, NAN, 2.0f, 0.9f, 0.1f, -1e30f};
    for (size_t a = 0; a < sizeof probe / sizeof probe[0]; ++a) {
        for (int l = 0; l < W; ++l) in[l] = probe[a];
        tanh_vec(in, out);
        const float ref = out[0];
        for (size_t b = 0; b < sizeof poison / sizeof poison[0]; ++b)
            for (int lane = 0; lane < W; ++lane) {
                float o2[W];
                for (int l = 0; l < W; ++l) in[l] = poison[b];
                in[lane] = probe[a];
                tanh_vec(in, o2);
                if (memcmp(&o2[lane], &ref, sizeof ref) != 0)
                    TC_FAIL("tanh(%g) in lane %d next to %g: %a, alone %a", probe[a], lane, poison[b], o2[lane], ref);
            }
    }
#undef TC_FAIL
    printf("%s: vector tanh max relative error %.3g (x = %.9g); %s\n", isa, worst, worst_x, bad ? "FAILED" : "ok");
    return bad != 0;
}
