/* A program outside flashc that uses the installed library: attention
 * forward on a small problem, checked against a naive float64 loop.
 * Built by CMakeLists.txt (find_package) and by Makefile (pkg-config);
 * scripts/check-install builds and runs both against an install prefix. */
#include <flashc.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Problem: q [B, Sq, Hq, D], k and v [B, Sk, Hkv, D] (GQA: Hq/Hkv query heads
 * share one K/V head), o like q, causal aligned bottom-right (Sk > Sq). */
enum { B = 2, SQ = 5, SK = 9, HQ = 4, HKV = 2, D = 16 };

static void dense(flashc_tensor *t, float *p, int64_t s, int64_t h) {
    *t = (flashc_tensor){.data = p, .dtype = FLASHC_F32, .ndim = 4,
                         .shape = {B, s, h, D}, .strides = {s * h * D, h * D, D, 1}};
}

int main(void) {
    static float q[B * SQ * HQ * D], k[B * SK * HKV * D], v[B * SK * HKV * D], o[B * SQ * HQ * D];
    unsigned seed = 12345;
    float *arrays[] = {q, k, v};
    size_t sizes[] = {sizeof q / sizeof *q, sizeof k / sizeof *k, sizeof v / sizeof *v};
    for (int a = 0; a < 3; a++)
        for (size_t i = 0; i < sizes[a]; i++) {
            seed = seed * 1664525u + 1013904223u;
            arrays[a][i] = (float)((seed >> 8) / 16777216.0 * 2.0 - 1.0);
        }

    flashc_tensor tq, tk, tv, to;
    dense(&tq, q, SQ, HQ);
    dense(&tk, k, SK, HKV);
    dense(&tv, v, SK, HKV);
    dense(&to, o, SQ, HQ);
    flashc_attn_params p = flashc_attn_params_default();
    p.causal = 1;
    if (flashc_attn_fwd(&tq, &tk, &tv, &to, NULL, &p) != FLASHC_OK) {
        fprintf(stderr, "consumer: flashc_attn_fwd failed: %s\n", flashc_last_error());
        return 1;
    }

    /* Naive reference: softmax over visible keys j <= i + Sk - Sq. */
    double max_err = 0.0, scale = 1.0 / sqrt((double)D);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < HQ; h++)
            for (int i = 0; i < SQ; i++) {
                const float *qi = q + ((b * SQ + i) * HQ + h) * D;
                int hk = h / (HQ / HKV), last = i + SK - SQ;
                double s[SK], m = -INFINITY, l = 0.0, out[D] = {0};
                for (int j = 0; j <= last; j++) {
                    const float *kj = k + ((b * SK + j) * HKV + hk) * D;
                    s[j] = 0.0;
                    for (int d = 0; d < D; d++) s[j] += (double)qi[d] * kj[d];
                    s[j] *= scale;
                    m = fmax(m, s[j]);
                }
                for (int j = 0; j <= last; j++) {
                    double e = exp(s[j] - m);
                    const float *vj = v + ((b * SK + j) * HKV + hk) * D;
                    l += e;
                    for (int d = 0; d < D; d++) out[d] += e * vj[d];
                }
                const float *oi = o + ((b * SQ + i) * HQ + h) * D;
                for (int d = 0; d < D; d++) max_err = fmax(max_err, fabs(out[d] / l - oi[d]));
            }

    /* The header this program was compiled with and the library it runs
     * with must be the same version. */
    int ok = max_err < 1e-5 && flashc_version_number() == FLASHC_VERSION_NUMBER;
    printf("consumer: flashc %s (header %s), attention fwd max |err| vs naive = %.2e: %s\n",
           flashc_version_string(), FLASHC_VERSION_STRING, max_err, ok ? "OK" : "FAIL");
    return ok ? 0 : 1;
}
