/* C API checks run by ctest: version, status strings, params guards, and
 * every validation error path of the ABI, each with its status code and a
 * message naming the problem. Also a small end-to-end call of each op
 * against a naive reference, so the C entry points are exercised without
 * Python. Returns non-zero on the first failed check's count. */
#define _GNU_SOURCE /* dladdr */
#include "flashc.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static int failures = 0, checks = 0;

#define CHECK(cond, ...)                                          \
    do {                                                          \
        ++checks;                                                 \
        if (!(cond)) {                                            \
            ++failures;                                           \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);  \
            fprintf(stderr, __VA_ARGS__);                         \
            fprintf(stderr, "\n");                                \
        }                                                         \
    } while (0)

/* The call must fail with `want` and a message containing `needle`. */
#define EXPECT_ERR(call, want, needle)                                                          \
    do {                                                                                        \
        flashc_status s_ = (call);                                                              \
        CHECK(s_ == (want), "%s: got %s, want %s (%s)", #call, flashc_status_string(s_),        \
              flashc_status_string(want), flashc_last_error());                                 \
        CHECK(strstr(flashc_last_error(), (needle)) != NULL, "%s: message '%s' lacks '%s'",     \
              #call, flashc_last_error(), (needle));                                            \
    } while (0)

static flashc_tensor t4(void *data, int dtype, int64_t a, int64_t b, int64_t c, int64_t d) {
    flashc_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dtype;
    t.ndim = 4;
    int64_t sh[4] = {a, b, c, d};
    int64_t st = 1;
    for (int i = 3; i >= 0; --i) {
        t.shape[i] = sh[i];
        t.strides[i] = st;
        st *= sh[i];
    }
    return t;
}

static flashc_tensor t_nd(void *data, int dtype, int ndim, const int64_t *shape) {
    flashc_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dtype;
    t.ndim = ndim;
    int64_t st = 1;
    for (int i = ndim - 1; i >= 0; --i) {
        t.shape[i] = shape[i];
        t.strides[i] = st;
        st *= shape[i];
    }
    return t;
}

static double frand(void) { return (double)rand() / RAND_MAX * 2.0 - 1.0; }

/* Attention: B=1, Sq=5, Sk=7, Hq=4, Hkv=2, D=8, F64, causal, one sink logit,
 * checked against a naive softmax written here. */
static void check_attention_values(void) {
    enum { B = 1, SQ = 5, SK = 7, HQ = 4, HKV = 2, D = 8 };
    static double q[B * SQ * HQ * D], k[B * SK * HKV * D], v[B * SK * HKV * D], o[B * SQ * HQ * D];
    static double lse[B * HQ * SQ], sinks[HQ];
    for (size_t i = 0; i < sizeof q / sizeof *q; ++i) q[i] = frand();
    for (size_t i = 0; i < sizeof k / sizeof *k; ++i) k[i] = frand(), v[i] = frand();
    for (int h = 0; h < HQ; ++h) sinks[h] = frand();
    for (size_t i = 0; i < sizeof o / sizeof *o; ++i) o[i] = NAN;
    flashc_tensor tq = t4(q, FLASHC_F64, B, SQ, HQ, D), tk = t4(k, FLASHC_F64, B, SK, HKV, D);
    flashc_tensor tv = t4(v, FLASHC_F64, B, SK, HKV, D), to = t4(o, FLASHC_F64, B, SQ, HQ, D);
    const int64_t lshape[3] = {B, HQ, SQ};
    flashc_tensor tl = t_nd(lse, FLASHC_F64, 3, lshape);
    flashc_attn_params p = flashc_attn_params_default();
    p.causal = 1;
    p.sink_logits = sinks;
    p.backend = FLASHC_BACKEND_CPU;
    flashc_status s = flashc_attn_fwd(&tq, &tk, &tv, &to, &tl, &p);
    CHECK(s == FLASHC_OK, "attn_fwd: %s %s", flashc_status_string(s), flashc_last_error());
    double maxerr = 0.0;
    const double scale = 1.0 / sqrt((double)D);
    for (int h = 0; h < HQ; ++h) {
        const int kh = h / (HQ / HKV);
        for (int i = 0; i < SQ; ++i) {
            double x[SK], m = sinks[h], l = 0.0;
            const int last = i + (SK - SQ); /* causal, bottom-right */
            for (int j = 0; j <= last; ++j) {
                x[j] = 0.0;
                for (int d = 0; d < D; ++d) x[j] += q[(i * HQ + h) * D + d] * k[(j * HKV + kh) * D + d];
                x[j] *= scale;
                if (x[j] > m) m = x[j];
            }
            for (int j = 0; j <= last; ++j) l += exp(x[j] - m);
            l += exp(sinks[h] - m);
            for (int d = 0; d < D; ++d) {
                double acc = 0.0;
                for (int j = 0; j <= last; ++j) acc += exp(x[j] - m) * v[(j * HKV + kh) * D + d];
                maxerr = fmax(maxerr, fabs(acc / l - o[(i * HQ + h) * D + d]));
            }
            maxerr = fmax(maxerr, fabs(m + log(l) - lse[h * SQ + i]));
        }
    }
    CHECK(maxerr < 1e-12, "attention F64 max error %.3g", maxerr);
}

/* The 0.1 layout of flashc_attn_params (up to and including `stream`), as a
 * caller compiled against flashc 0.1 has it: the library must accept its
 * size and read no byte past it. */
typedef struct attn_params_v1 {
    uint32_t struct_size;
    int32_t backend;
    double softmax_scale;
    int32_t causal;
    int32_t deterministic;
    int64_t window_left;
    int64_t window_right;
    int64_t num_sink_tokens;
    const void *sink_logits;
    void *stream;
} attn_params_v1;

typedef char v1_size_matches[sizeof(attn_params_v1) == FLASHC_ATTN_PARAMS_SIZE_V1 ? 1 : -1];

static int same_bytes(const void *a, const void *b, size_t n) { return memcmp(a, b, n) == 0; }

/* A 0.1 caller (0.1 struct size, sink_logits pointer, dsinks argument) and a
 * 0.2 caller (current struct, params.sinks / params.dsinks tensors) of the
 * same problem get the same bytes, forward and backward; unknown sizes are
 * FLASHC_ERR_PARAMS_SIZE. */
static void check_params_versions(void) {
    enum { B = 2, SQ = 6, SK = 9, HQ = 4, HKV = 2, D = 8 };
    static float q[B * SQ * HQ * D], k[B * SK * HKV * D], v[B * SK * HKV * D], dout[B * SQ * HQ * D];
    static float o1[B * SQ * HQ * D], o2[B * SQ * HQ * D], l1[B * HQ * SQ], l2[B * HQ * SQ];
    static float dq1[B * SQ * HQ * D], dk1[B * SK * HKV * D], dv1[B * SK * HKV * D];
    static float dq2[B * SQ * HQ * D], dk2[B * SK * HKV * D], dv2[B * SK * HKV * D];
    static float sinks[HQ], sinks_strided[3 * HQ], ds1[HQ], ds2[2 * HQ];
    for (size_t i = 0; i < sizeof q / sizeof *q; ++i) q[i] = (float)frand(), dout[i] = (float)frand();
    for (size_t i = 0; i < sizeof k / sizeof *k; ++i) k[i] = (float)frand(), v[i] = (float)frand();
    for (int h = 0; h < 3 * HQ; ++h) sinks_strided[h] = NAN;
    for (int h = 0; h < HQ; ++h) sinks[h] = sinks_strided[3 * h] = (float)frand();
    flashc_tensor tq = t4(q, FLASHC_F32, B, SQ, HQ, D), tk = t4(k, FLASHC_F32, B, SK, HKV, D);
    flashc_tensor tv = t4(v, FLASHC_F32, B, SK, HKV, D), tdo = t4(dout, FLASHC_F32, B, SQ, HQ, D);
    flashc_tensor to1 = t4(o1, FLASHC_F32, B, SQ, HQ, D), to2 = t4(o2, FLASHC_F32, B, SQ, HQ, D);
    const int64_t lshape[3] = {B, HQ, SQ}, hshape[1] = {HQ};
    flashc_tensor tl1 = t_nd(l1, FLASHC_F32, 3, lshape), tl2 = t_nd(l2, FLASHC_F32, 3, lshape);
    flashc_tensor tdq1 = t4(dq1, FLASHC_F32, B, SQ, HQ, D), tdk1 = t4(dk1, FLASHC_F32, B, SK, HKV, D);
    flashc_tensor tdv1 = t4(dv1, FLASHC_F32, B, SK, HKV, D), tdq2 = t4(dq2, FLASHC_F32, B, SQ, HQ, D);
    flashc_tensor tdk2 = t4(dk2, FLASHC_F32, B, SK, HKV, D), tdv2 = t4(dv2, FLASHC_F32, B, SK, HKV, D);
    flashc_tensor tsinks = t_nd(sinks_strided, FLASHC_F32, 1, hshape); /* stride 3 */
    tsinks.strides[0] = 3;
    flashc_tensor tds = t_nd(ds2 + 2 * HQ - 1, FLASHC_F32, 1, hshape);  /* stride -2 */
    tds.strides[0] = -2;

    /* Exactly V1 bytes on the heap: a read past them is out of bounds. */
    attn_params_v1 *v1 = malloc(sizeof *v1);
    memset(v1, 0, sizeof *v1);
    v1->struct_size = FLASHC_ATTN_PARAMS_SIZE_V1;
    v1->backend = FLASHC_BACKEND_CPU;
    v1->softmax_scale = 0.3;
    v1->causal = 1;
    v1->deterministic = 1;
    v1->window_left = 4;
    v1->window_right = -1;
    v1->num_sink_tokens = 1;
    v1->sink_logits = sinks;
    const flashc_attn_params *pv1 = (const flashc_attn_params *)(const void *)v1;
    flashc_status s = flashc_attn_fwd(&tq, &tk, &tv, &to1, &tl1, pv1);
    CHECK(s == FLASHC_OK, "fwd with the 0.1 struct size: %s %s", flashc_status_string(s), flashc_last_error());
    s = flashc_attn_bwd(&tdo, &tq, &tk, &tv, &to1, &tl1, &tdq1, &tdk1, &tdv1, ds1, pv1);
    CHECK(s == FLASHC_OK, "bwd with the 0.1 struct size: %s %s", flashc_status_string(s), flashc_last_error());

    flashc_attn_params p = flashc_attn_params_default();
    p.backend = FLASHC_BACKEND_CPU;
    p.softmax_scale = 0.3;
    p.causal = 1;
    p.window_left = 4;
    p.num_sink_tokens = 1;
    p.sinks = &tsinks;
    p.dsinks = &tds;
    s = flashc_attn_fwd(&tq, &tk, &tv, &to2, &tl2, &p);
    CHECK(s == FLASHC_OK, "fwd with params.sinks: %s %s", flashc_status_string(s), flashc_last_error());
    s = flashc_attn_bwd(&tdo, &tq, &tk, &tv, &to2, &tl2, &tdq2, &tdk2, &tdv2, NULL, &p);
    CHECK(s == FLASHC_OK, "bwd with params.dsinks: %s %s", flashc_status_string(s), flashc_last_error());
    CHECK(same_bytes(o1, o2, sizeof o1) && same_bytes(l1, l2, sizeof l1),
          "0.1 struct + sink_logits and 0.2 struct + params.sinks: different forward results");
    CHECK(same_bytes(dq1, dq2, sizeof dq1) && same_bytes(dk1, dk2, sizeof dk1) && same_bytes(dv1, dv2, sizeof dv1),
          "0.1 and 0.2 callers: different dq/dk/dv");
    int ds_same = 1;
    for (int h = 0; h < HQ; ++h) ds_same &= same_bytes(&ds1[h], &ds2[2 * HQ - 1 - 2 * h], sizeof(float));
    CHECK(ds_same, "dsinks argument and params.dsinks (stride -2): different values");

    /* The 0.2 struct with the legacy pointer gives the same bytes too. */
    p.sinks = NULL;
    p.sink_logits = sinks;
    s = flashc_attn_fwd(&tq, &tk, &tv, &to2, &tl2, &p);
    CHECK(s == FLASHC_OK && same_bytes(o1, o2, sizeof o1), "0.2 struct with sink_logits: %s", flashc_last_error());

    /* Sizes this library does not know. */
    const uint32_t bad_sizes[] = {0, 4, FLASHC_ATTN_PARAMS_SIZE_V1 - 8, FLASHC_ATTN_PARAMS_SIZE_V1 + 8,
                                  (uint32_t)sizeof(flashc_attn_params) - 8, (uint32_t)sizeof(flashc_attn_params) + 8,
                                  0xFFFFFFFFu};
    for (size_t i = 0; i < sizeof bad_sizes / sizeof *bad_sizes; ++i) {
        p = flashc_attn_params_default();
        p.struct_size = bad_sizes[i];
        EXPECT_ERR(flashc_attn_fwd(&tq, &tk, &tv, &to2, NULL, &p), FLASHC_ERR_PARAMS_SIZE, "struct_size");
        EXPECT_ERR(flashc_attn_bwd(&tdo, &tq, &tk, &tv, &to2, &tl2, &tdq2, &tdk2, &tdv2, NULL, &p),
                   FLASHC_ERR_PARAMS_SIZE, "struct_size");
    }
    free(v1);
}

/* softcap and ALiBi ([B, Hq] slopes, Sq != Sk, causal, GQA) in F64 against a
 * naive loop written here from flashc.h: x = scale·<q,k>; x = c·tanh(x/c);
 * x -= slope·|i + Sk − Sq − j|; mask; softmax. */
static void check_score_modifier_values(void) {
    enum { B = 2, SQ = 5, SK = 9, HQ = 4, HKV = 2, D = 7 };
    static double q[B * SQ * HQ * D], k[B * SK * HKV * D], v[B * SK * HKV * D], o[B * SQ * HQ * D];
    static double lse[B * HQ * SQ], slopes[B * HQ];
    for (size_t i = 0; i < sizeof q / sizeof *q; ++i) q[i] = 2.0 * frand(), o[i] = NAN;
    for (size_t i = 0; i < sizeof k / sizeof *k; ++i) k[i] = 2.0 * frand(), v[i] = frand();
    for (int i = 0; i < B * HQ; ++i) slopes[i] = 0.3 * frand();
    flashc_tensor tq = t4(q, FLASHC_F64, B, SQ, HQ, D), tk = t4(k, FLASHC_F64, B, SK, HKV, D);
    flashc_tensor tv = t4(v, FLASHC_F64, B, SK, HKV, D), to = t4(o, FLASHC_F64, B, SQ, HQ, D);
    const int64_t lshape[3] = {B, HQ, SQ}, sshape[2] = {B, HQ};
    flashc_tensor tl = t_nd(lse, FLASHC_F64, 3, lshape), ts = t_nd(slopes, FLASHC_F64, 2, sshape);
    flashc_attn_params p = flashc_attn_params_default();
    p.backend = FLASHC_BACKEND_CPU;
    p.causal = 1;
    p.softcap = 1.5;
    p.alibi_slopes = &ts;
    flashc_status s = flashc_attn_fwd(&tq, &tk, &tv, &to, &tl, &p);
    CHECK(s == FLASHC_OK, "attn_fwd softcap+alibi: %s %s", flashc_status_string(s), flashc_last_error());
    const double scale = 1.0 / sqrt((double)D);
    double maxerr = 0.0;
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < HQ; ++h) {
            const int kh = h / (HQ / HKV);
            for (int i = 0; i < SQ; ++i) {
                double x[SK], m = -INFINITY, l = 0.0;
                const int last = i + (SK - SQ);
                for (int j = 0; j <= last; ++j) {
                    double dot = 0.0;
                    for (int d = 0; d < D; ++d)
                        dot += q[((b * SQ + i) * HQ + h) * D + d] * k[((b * SK + j) * HKV + kh) * D + d];
                    x[j] = p.softcap * tanh(scale * dot / p.softcap) - slopes[b * HQ + h] * fabs((double)(last - j));
                    if (x[j] > m) m = x[j];
                }
                for (int j = 0; j <= last; ++j) l += exp(x[j] - m);
                for (int d = 0; d < D; ++d) {
                    double acc = 0.0;
                    for (int j = 0; j <= last; ++j) acc += exp(x[j] - m) * v[((b * SK + j) * HKV + kh) * D + d];
                    maxerr = fmax(maxerr, fabs(acc / l - o[((b * SQ + i) * HQ + h) * D + d]));
                }
                maxerr = fmax(maxerr, fabs(m + log(l) - lse[(b * HQ + h) * SQ + i]));
            }
        }
    CHECK(maxerr < 1e-12, "attention F64 softcap+alibi max error %.3g", maxerr);
}

static void check_weighted_sum_values(void) {
    enum { R = 37, D = 19 };
    static float x[R * D], w[D], y[R], dy[R], dx[R * D], dw[D];
    for (int i = 0; i < R * D; ++i) x[i] = (float)frand();
    for (int d = 0; d < D; ++d) w[d] = (float)frand();
    for (int r = 0; r < R; ++r) dy[r] = (float)frand(), y[r] = NAN;
    const int64_t xs[2] = {R, D}, ys[1] = {R}, ws[1] = {D};
    flashc_tensor tx = t_nd(x, FLASHC_F32, 2, xs), tw = t_nd(w, FLASHC_F32, 1, ws), ty = t_nd(y, FLASHC_F32, 1, ys);
    flashc_tensor tdy = t_nd(dy, FLASHC_F32, 1, ys), tdx = t_nd(dx, FLASHC_F32, 2, xs), tdw = t_nd(dw, FLASHC_F32, 1, ws);
    CHECK(flashc_weighted_sum(&tx, &tw, &ty, NULL) == FLASHC_OK, "weighted_sum: %s", flashc_last_error());
    CHECK(flashc_weighted_sum_bwd(&tdy, &tx, &tw, &tdx, &tdw, NULL) == FLASHC_OK, "weighted_sum_bwd: %s",
          flashc_last_error());
    double ey = 0, edx = 0, edw = 0;
    for (int r = 0; r < R; ++r) {
        double acc = 0;
        for (int d = 0; d < D; ++d) acc += (double)x[r * D + d] * w[d];
        ey = fmax(ey, fabs(acc - y[r]));
        for (int d = 0; d < D; ++d) edx = fmax(edx, fabs((double)dy[r] * w[d] - dx[r * D + d]));
    }
    for (int d = 0; d < D; ++d) {
        double acc = 0;
        for (int r = 0; r < R; ++r) acc += (double)dy[r] * x[r * D + d];
        edw = fmax(edw, fabs(acc - dw[d]));
    }
    CHECK(ey < 1e-5 && edx < 1e-6 && edw < 1e-5, "weighted_sum errors y %.3g dx %.3g dw %.3g", ey, edx, edw);
}

static void check_error_paths(void) {
    float buf[4096];
    flashc_tensor q = t4(buf, FLASHC_F32, 1, 4, 12, 8), k = t4(buf, FLASHC_F32, 1, 4, 5, 8);
    flashc_tensor v = k, o = t4(buf + 2048, FLASHC_F32, 1, 4, 12, 8); /* an output shares no memory */
    flashc_attn_params p = flashc_attn_params_default();

    EXPECT_ERR(flashc_attn_fwd(&q, &k, &v, &o, NULL, NULL), FLASHC_ERR_SHAPE,
               "q.shape[2]=12 is not a multiple of k.shape[2]=5");
    k = t4(buf, FLASHC_F32, 1, 4, 4, 8);
    v = k;
    EXPECT_ERR(flashc_attn_fwd(NULL, &k, &v, &o, NULL, NULL), FLASHC_ERR_NULL_POINTER, "q");
    flashc_tensor bad = q;
    bad.data = NULL;
    EXPECT_ERR(flashc_attn_fwd(&bad, &k, &v, &o, NULL, NULL), FLASHC_ERR_NULL_POINTER, "q.data is NULL");
    bad = q;
    bad.ndim = 3;
    EXPECT_ERR(flashc_attn_fwd(&bad, &k, &v, &o, NULL, NULL), FLASHC_ERR_SHAPE, "q.ndim=3");
    bad = q;
    bad.dtype = 9;
    EXPECT_ERR(flashc_attn_fwd(&bad, &k, &v, &o, NULL, NULL), FLASHC_ERR_DTYPE, "q.dtype=9");
    bad = k;
    bad.dtype = FLASHC_F16;
    EXPECT_ERR(flashc_attn_fwd(&q, &bad, &v, &o, NULL, NULL), FLASHC_ERR_DTYPE,
               "q, k, v, o must share one dtype (got F32, F16, F32, F32)"); /* names, not codes */
    bad = t4(buf, FLASHC_F32, 1, 4, 12, 257);
    flashc_tensor ob = bad;
    flashc_tensor kb = t4(buf, FLASHC_F32, 1, 4, 4, 257);
    EXPECT_ERR(flashc_attn_fwd(&bad, &kb, &kb, &ob, NULL, NULL), FLASHC_ERR_INVALID_ARGUMENT, "1..256");
    bad = t4(buf, FLASHC_F32, 1, 4, 12, 0);
    memcpy(bad.strides, q.strides, sizeof q.strides); /* D = 0 would give zero strides */
    EXPECT_ERR(flashc_attn_fwd(&bad, &k, &v, &bad, NULL, NULL), FLASHC_ERR_INVALID_ARGUMENT, "1..256");
    bad = k;
    bad.shape[3] = 4;
    EXPECT_ERR(flashc_attn_fwd(&q, &bad, &v, &o, NULL, NULL), FLASHC_ERR_SHAPE, "k.shape[3]=4");
    bad = v;
    bad.shape[1] = 3;
    EXPECT_ERR(flashc_attn_fwd(&q, &k, &bad, &o, NULL, NULL), FLASHC_ERR_SHAPE, "v.shape[1]=3");
    bad = o;
    bad.shape[1] = 3;
    EXPECT_ERR(flashc_attn_fwd(&q, &k, &v, &bad, NULL, NULL), FLASHC_ERR_SHAPE, "o.shape[1]=3");
    bad = o;
    bad.strides[1] = 0;
    EXPECT_ERR(flashc_attn_fwd(&q, &k, &v, &bad, NULL, NULL), FLASHC_ERR_STRIDE, "o.strides[1]=0");
    bad = q;
    bad.shape[0] = -1;
    EXPECT_ERR(flashc_attn_fwd(&bad, &k, &v, &o, NULL, NULL), FLASHC_ERR_SHAPE, "negative");
    bad = q;
    bad.shape[0] = (int64_t)1 << 62;
    EXPECT_ERR(flashc_attn_fwd(&bad, &k, &v, &o, NULL, NULL), FLASHC_ERR_OVERFLOW, "overflow");
    bad = q;
    bad.strides[0] = (int64_t)1 << 62;
    bad.shape[0] = 3;
    EXPECT_ERR(flashc_attn_fwd(&bad, &k, &v, &o, NULL, NULL), FLASHC_ERR_OVERFLOW, "overflow");

    p = flashc_attn_params_default();
    p.struct_size = 8;
    EXPECT_ERR(flashc_attn_fwd(&q, &k, &v, &o, NULL, &p), FLASHC_ERR_PARAMS_SIZE, "struct_size=8");
    p = flashc_attn_params_default();
    p.window_left = -2;
    EXPECT_ERR(flashc_attn_fwd(&q, &k, &v, &o, NULL, &p), FLASHC_ERR_INVALID_ARGUMENT, "window_left=-2");
    p = flashc_attn_params_default();
    p.window_right = -5;
    EXPECT_ERR(flashc_attn_fwd(&q, &k, &v, &o, NULL, &p), FLASHC_ERR_INVALID_ARGUMENT, "window_right=-5");
    p = flashc_attn_params_default();
    p.causal = 1;
    p.window_right = 3;
    EXPECT_ERR(flashc_attn_fwd(&q, &k, &v, &o, NULL, &p), FLASHC_ERR_INVALID_ARGUMENT, "causal");
    p = flashc_attn_params_default();
    p.num_sink_tokens = -1;
    EXPECT_ERR(flashc_attn_fwd(&q, &k, &v, &o, NULL, &p), FLASHC_ERR_INVALID_ARGUMENT, "num_sink_tokens=-1");
    p = flashc_attn_params_default();
    p.softmax_scale = INFINITY;
    EXPECT_ERR(flashc_attn_fwd(&q, &k, &v, &o, NULL, &p), FLASHC_ERR_INVALID_ARGUMENT, "softmax_scale");
    p = flashc_attn_params_default();
    p.backend = 7;
    EXPECT_ERR(flashc_attn_fwd(&q, &k, &v, &o, NULL, &p), FLASHC_ERR_INVALID_ARGUMENT, "backend=7");

    const int64_t lshape[3] = {1, 12, 5};
    flashc_tensor lse = t_nd(buf + 3072, FLASHC_F32, 3, lshape);
    EXPECT_ERR(flashc_attn_fwd(&q, &k, &v, &o, &lse, NULL), FLASHC_ERR_SHAPE, "lse.shape[2]=5");
    lse.shape[2] = 4;
    lse.dtype = FLASHC_F64;
    EXPECT_ERR(flashc_attn_fwd(&q, &k, &v, &o, &lse, NULL), FLASHC_ERR_DTYPE,
               "lse.dtype=F64, expected F32 for F32 inputs");
    lse.dtype = FLASHC_F32;

    /* 0.2 fields: softcap, ALiBi slopes, sink tensors */
    p = flashc_attn_params_default();
    p.softcap = -1.0;
    EXPECT_ERR(flashc_attn_fwd(&q, &k, &v, &o, NULL, &p), FLASHC_ERR_INVALID_ARGUMENT, "params.softcap=-1");
    p.softcap = NAN;
    EXPECT_ERR(flashc_attn_fwd(&q, &k, &v, &o, NULL, &p), FLASHC_ERR_INVALID_ARGUMENT, "params.softcap");
    p.softcap = INFINITY;
    EXPECT_ERR(flashc_attn_fwd(&q, &k, &v, &o, NULL, &p), FLASHC_ERR_INVALID_ARGUMENT, "params.softcap");
    {
        static float hv[64];
        for (int i = 0; i < 64; ++i) hv[i] = 0.5f;
        const int64_t h12[1] = {12}, h13[1] = {13}, b2h12[2] = {2, 12}, h3d[3] = {1, 12, 1};
        flashc_tensor sl = t_nd(hv, FLASHC_F32, 1, h12);
        p = flashc_attn_params_default();
        p.alibi_slopes = &sl;
        CHECK(flashc_attn_fwd(&q, &k, &v, &o, NULL, &p) == FLASHC_OK, "valid [Hq] slopes: %s", flashc_last_error());
        hv[5] = NAN;
        EXPECT_ERR(flashc_attn_fwd(&q, &k, &v, &o, NULL, &p), FLASHC_ERR_INVALID_ARGUMENT,
                   "alibi_slopes[0, 5]=nan is not finite");
        hv[5] = 0.5f;
        sl = t_nd(hv, FLASHC_F32, 1, h13);
        EXPECT_ERR(flashc_attn_fwd(&q, &k, &v, &o, NULL, &p), FLASHC_ERR_SHAPE, "alibi_slopes.shape[0]=13 must equal Hq=12");
        sl = t_nd(hv, FLASHC_F32, 2, b2h12);
        EXPECT_ERR(flashc_attn_fwd(&q, &k, &v, &o, NULL, &p), FLASHC_ERR_SHAPE, "alibi_slopes.shape[0]=2 must equal B=1");
        sl = t_nd(hv, FLASHC_F32, 3, h3d);
        EXPECT_ERR(flashc_attn_fwd(&q, &k, &v, &o, NULL, &p), FLASHC_ERR_SHAPE, "alibi_slopes.ndim=3");
        sl = t_nd(hv, FLASHC_F16, 1, h12);
        EXPECT_ERR(flashc_attn_fwd(&q, &k, &v, &o, NULL, &p), FLASHC_ERR_DTYPE, "alibi_slopes.dtype=F16");
        sl = t_nd(hv, FLASHC_F64, 1, h12);
        EXPECT_ERR(flashc_attn_fwd(&q, &k, &v, &o, NULL, &p), FLASHC_ERR_DTYPE, "alibi_slopes.dtype=F64");
        sl = t_nd(NULL, FLASHC_F32, 1, h12);
        EXPECT_ERR(flashc_attn_fwd(&q, &k, &v, &o, NULL, &p), FLASHC_ERR_NULL_POINTER, "alibi_slopes");

        flashc_tensor sk = t_nd(hv, FLASHC_F32, 1, h12);
        p = flashc_attn_params_default();
        p.sinks = &sk;
        p.sink_logits = hv;
        EXPECT_ERR(flashc_attn_fwd(&q, &k, &v, &o, NULL, &p), FLASHC_ERR_INVALID_ARGUMENT, "give the sink logits once");
        p.sink_logits = NULL;
        sk = t_nd(hv, FLASHC_F32, 1, h13);
        EXPECT_ERR(flashc_attn_fwd(&q, &k, &v, &o, NULL, &p), FLASHC_ERR_SHAPE, "sinks.shape[0]=13 must equal Hq=12");
        sk = t_nd(hv, FLASHC_BF16, 1, h12);
        EXPECT_ERR(flashc_attn_fwd(&q, &k, &v, &o, NULL, &p), FLASHC_ERR_DTYPE, "sinks.dtype=BF16");
    }

    /* backward */
    float sinks[12] = {0};
    p = flashc_attn_params_default();
    p.sink_logits = sinks;
    EXPECT_ERR(flashc_attn_bwd(&q, &q, &k, &v, &o, &lse, &q, &k, &v, NULL, &p), FLASHC_ERR_NULL_POINTER, "dsinks");
    EXPECT_ERR(flashc_attn_bwd(&q, &q, &k, &v, &o, NULL, &q, &k, &v, NULL, NULL), FLASHC_ERR_NULL_POINTER, "lse");
    bad = k;
    bad.shape[1] = 2;
    EXPECT_ERR(flashc_attn_bwd(&q, &q, &k, &v, &o, &lse, &q, &bad, &v, NULL, NULL), FLASHC_ERR_SHAPE, "dk.shape[1]");
    bad = q;
    bad.dtype = FLASHC_BF16;
    EXPECT_ERR(flashc_attn_bwd(&bad, &q, &k, &v, &o, &lse, &q, &k, &v, NULL, NULL), FLASHC_ERR_DTYPE, "dout");
    {
        const int64_t h12[1] = {12}, h11[1] = {11};
        float dsk[12];
        flashc_tensor tsk = t_nd(sinks, FLASHC_F32, 1, h12), tdsk = t_nd(dsk, FLASHC_F32, 1, h12);
        p = flashc_attn_params_default();
        p.sinks = &tsk;
        EXPECT_ERR(flashc_attn_bwd(&q, &q, &k, &v, &o, &lse, &q, &k, &v, NULL, &p), FLASHC_ERR_NULL_POINTER, "dsinks");
        p.dsinks = &tdsk;
        EXPECT_ERR(flashc_attn_bwd(&q, &q, &k, &v, &o, &lse, &q, &k, &v, dsk, &p), FLASHC_ERR_INVALID_ARGUMENT,
                   "give the sink gradient once");
        tdsk = t_nd(dsk, FLASHC_F32, 1, h11);
        EXPECT_ERR(flashc_attn_bwd(&q, &q, &k, &v, &o, &lse, &q, &k, &v, NULL, &p), FLASHC_ERR_SHAPE,
                   "dsinks.shape[0]=11 must equal Hq=12");
        tdsk = t_nd(dsk, FLASHC_F64, 1, h12);
        EXPECT_ERR(flashc_attn_bwd(&q, &q, &k, &v, &o, &lse, &q, &k, &v, NULL, &p), FLASHC_ERR_DTYPE, "dsinks.dtype=F64");
        tdsk = t_nd(dsk, FLASHC_F32, 1, h12);
        tdsk.strides[0] = 0;
        EXPECT_ERR(flashc_attn_bwd(&q, &q, &k, &v, &o, &lse, &q, &k, &v, NULL, &p), FLASHC_ERR_STRIDE, "dsinks");
    }

    /* weighted sum */
    const int64_t xs[2] = {3, 4}, ws[1] = {4}, ys[1] = {3}, wbad[1] = {5};
    flashc_tensor x = t_nd(buf, FLASHC_F32, 2, xs), w = t_nd(buf, FLASHC_F32, 1, ws), y = t_nd(buf, FLASHC_F32, 1, ys);
    flashc_tensor w5 = t_nd(buf, FLASHC_F32, 1, wbad);
    EXPECT_ERR(flashc_weighted_sum(&x, &w5, &y, NULL), FLASHC_ERR_SHAPE, "w.shape[0]=5");
    EXPECT_ERR(flashc_weighted_sum(&x, &w, &x, NULL), FLASHC_ERR_SHAPE, "y.ndim=2");
    bad = w;
    bad.dtype = FLASHC_F64;
    EXPECT_ERR(flashc_weighted_sum(&x, &bad, &y, NULL), FLASHC_ERR_DTYPE, "w.dtype=F64 must equal x.dtype=F32");
    EXPECT_ERR(flashc_weighted_sum_bwd(&y, &x, &w, NULL, NULL, NULL), FLASHC_ERR_NULL_POINTER, "both NULL");
    flashc_exec_params ep = flashc_exec_params_default();
    ep.struct_size = 3;
    EXPECT_ERR(flashc_weighted_sum(&x, &w, &y, &ep), FLASHC_ERR_PARAMS_SIZE, "struct_size=3");

    /* the message is cleared by the next successful call */
    CHECK(flashc_weighted_sum(&x, &w, &y, NULL) == FLASHC_OK, "valid call failed: %s", flashc_last_error());
    CHECK(flashc_last_error()[0] == '\0', "message not cleared: %s", flashc_last_error());
}

/* ------------------------------------------------ issue 11: reliability */
/* Every tensor of these checks lives in a heap buffer of exactly its size,
 * so that the sanitizer build (FLASHC_SANITIZE, run by scripts/test) sees any
 * access past it. */

/* A dense [a, b, c, d] tensor of `dtype` in its own exact-size heap buffer,
 * filled with uniform values in [-amp, amp] (or NAN when amp is NAN). */
static flashc_tensor heap4(int dtype, int64_t a, int64_t b, int64_t c, int64_t d, double amp) {
    const size_t n = (size_t)(a * b * c * d), esz = flashc_dtype_size(dtype);
    void *p = malloc(n * esz > 0 ? n * esz : 1);
    for (size_t i = 0; i < n; ++i) {
        const double x = isnan(amp) ? NAN : amp * frand();
        if (dtype == FLASHC_F64) ((double *)p)[i] = x;
        else ((float *)p)[i] = (float)x; /* tests below use F32/F64 only */
    }
    return t4(p, dtype, a, b, c, d);
}
static flashc_tensor heap3(int dtype, int64_t a, int64_t b, int64_t c) {
    const int64_t sh[3] = {a, b, c};
    const size_t n = (size_t)(a * b * c) * flashc_dtype_size(dtype);
    return t_nd(malloc(n > 0 ? n : 1), dtype, 3, sh);
}
static double tget(const flashc_tensor *t, int64_t i) {
    return t->dtype == FLASHC_F64 ? ((const double *)t->data)[i] : (double)((const float *)t->data)[i];
}
static int64_t tnumel(const flashc_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; ++i) n *= t->shape[i];
    return n;
}
/* max |a − b| / (1 + |b|) over two same-shape dense tensors; NaN counts as huge. */
static double tdiff(const flashc_tensor *a, const flashc_tensor *b) {
    double e = 0.0;
    for (int64_t i = 0; i < tnumel(a); ++i) {
        const double x = tget(a, i), y = tget(b, i);
        if (x != y) e = fmax(e, isnan(x - y) ? INFINITY : fabs(x - y) / (1.0 + fabs(y)));
    }
    return e;
}

typedef struct attn_case {
    flashc_tensor q, k, v, o, lse, dout, dq, dk, dv;
} attn_case;

static attn_case attn_case_make(int dt, int64_t B, int64_t Sq, int64_t Sk, int64_t Hq, int64_t Hkv, int64_t D,
                                double amp) {
    attn_case c;
    c.q = heap4(dt, B, Sq, Hq, D, amp);
    c.k = heap4(dt, B, Sk, Hkv, D, amp);
    c.v = heap4(dt, B, Sk, Hkv, D, 1.0);
    c.dout = heap4(dt, B, Sq, Hq, D, 1.0);
    c.o = heap4(dt, B, Sq, Hq, D, NAN);
    c.dq = heap4(dt, B, Sq, Hq, D, NAN);
    c.dk = heap4(dt, B, Sk, Hkv, D, NAN);
    c.dv = heap4(dt, B, Sk, Hkv, D, NAN);
    c.lse = heap3(dt == FLASHC_F64 ? FLASHC_F64 : FLASHC_F32, B, Hq, Sq);
    return c;
}
static void attn_case_free(attn_case *c) {
    flashc_tensor *ts[] = {&c->q, &c->k, &c->v, &c->o, &c->lse, &c->dout, &c->dq, &c->dk, &c->dv};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; ++i) free(ts[i]->data);
}
static flashc_status attn_case_run(attn_case *c, const flashc_attn_params *p) {
    flashc_status s = flashc_attn_fwd(&c->q, &c->k, &c->v, &c->o, &c->lse, p);
    if (s != FLASHC_OK) return s;
    return flashc_attn_bwd(&c->dout, &c->q, &c->k, &c->v, &c->o, &c->lse, &c->dq, &c->dk, &c->dv, NULL, p);
}
/* Largest difference of o, lse, dq, dk, dv between two runs of one problem. */
static double attn_case_diff(const attn_case *a, const attn_case *b) {
    double e = tdiff(&a->o, &b->o);
    e = fmax(e, tdiff(&a->lse, &b->lse));
    e = fmax(e, tdiff(&a->dq, &b->dq));
    e = fmax(e, tdiff(&a->dk, &b->dk));
    return fmax(e, tdiff(&a->dv, &b->dv));
}
/* b gets a's inputs (same shapes). */
static void attn_case_copy_inputs(attn_case *b, const attn_case *a) {
    const size_t esz = flashc_dtype_size(a->q.dtype);
    memcpy(b->q.data, a->q.data, (size_t)tnumel(&a->q) * esz);
    memcpy(b->k.data, a->k.data, (size_t)tnumel(&a->k) * esz);
    memcpy(b->v.data, a->v.data, (size_t)tnumel(&a->v) * esz);
    memcpy(b->dout.data, a->dout.data, (size_t)tnumel(&a->dout) * esz);
}

static const char *const ISAS[] = {"scalar", "avx2", "avx512"};

/* #1: the two-pass backward read its L/Δ staging buffers a vector past the
 * end (Sq = 1, Sk = 8, D = 8 F32 was enough; an ASan report). Two-pass and
 * fused give the same gradients, on every ISA, for small odd shapes. */
static void check_twopass_small(void) {
    const int64_t shapes[][6] = {{1, 1, 8, 1, 1, 8}, {1, 3, 8, 2, 1, 8}, {2, 1, 17, 4, 2, 5}, {1, 33, 9, 1, 1, 16}};
    for (int is = 0; is < 3; ++is) {
        setenv("FLASHC_CPU_ISA", ISAS[is], 1);
        for (size_t t = 0; t < sizeof shapes / sizeof *shapes; ++t)
            for (int dt = 0; dt < 2; ++dt) {
                const int dtype = dt ? FLASHC_F64 : FLASHC_F32;
                const int64_t *s = shapes[t];
                attn_case a = attn_case_make(dtype, s[0], s[1], s[2], s[3], s[4], s[5], 1.0);
                attn_case b = attn_case_make(dtype, s[0], s[1], s[2], s[3], s[4], s[5], 1.0);
                attn_case_copy_inputs(&b, &a);
                flashc_attn_params p = flashc_attn_params_default();
                p.backend = FLASHC_BACKEND_CPU;
                p.causal = (int)(t & 1);
                CHECK(attn_case_run(&a, &p) == FLASHC_OK, "fused: %s", flashc_last_error());
                setenv("FLASHC_CPU_BWD", "twopass", 1);
                CHECK(attn_case_run(&b, &p) == FLASHC_OK, "twopass: %s", flashc_last_error());
                unsetenv("FLASHC_CPU_BWD");
                const double e = attn_case_diff(&a, &b);
                CHECK(e < (dt ? 1e-12 : 1e-5), "twopass vs fused (%s, shape %zu, dtype %d): %.3g", ISAS[is], t,
                      dtype, e);
                attn_case_free(&a);
                attn_case_free(&b);
            }
    }
    unsetenv("FLASHC_CPU_ISA");
}

/* #2: window sizes near INT64_MAX overflowed int64 (every row came back
 * O = 0, L = −inf). A window wider than the sequence is an open side: the
 * result must equal the unwindowed one, bit for bit, forward and backward. */
static void check_huge_windows(void) {
    int64_t big[] = {INT64_MAX, INT64_MAX - 1, INT64_MAX / 2, ((int64_t)1 << 62) + 3, 0 /* Sq + Sk */};
    /* Sq ≠ Sk too: with Sq > Sk, nvcc folded the window's lower bound into an
     * expression that wrapped for window_left near INT64_MAX (the CUDA dK/dV
     * kernel saw no rows); a host compiler may do the same one day. */
    const int64_t shapes[][2] = {{4, 4}, {9, 3}, {3, 9}};
    for (int sh = 0; sh < 3; ++sh)
    for (int dt = 0; dt < 2; ++dt) {
        const int dtype = dt ? FLASHC_F64 : FLASHC_F32;
        const int64_t Sq = shapes[sh][0], Sk = shapes[sh][1];
        big[4] = Sq + Sk; /* the smallest window that is open on both sides is max(Sq, Sk) − 1 */
        attn_case ref = attn_case_make(dtype, 1, Sq, Sk, 2, 1, 8, 1.0);
        flashc_attn_params p = flashc_attn_params_default();
        p.backend = FLASHC_BACKEND_CPU;
        CHECK(attn_case_run(&ref, &p) == FLASHC_OK, "unwindowed: %s", flashc_last_error());
        for (size_t l = 0; l < sizeof big / sizeof *big; ++l)
            for (size_t r = 0; r < sizeof big / sizeof *big; ++r)
                for (int sink = 0; sink < 2; ++sink) {
                    attn_case c = attn_case_make(dtype, 1, Sq, Sk, 2, 1, 8, 1.0);
                    attn_case_copy_inputs(&c, &ref);
                    p.window_left = big[l];
                    p.window_right = big[r];
                    p.num_sink_tokens = sink ? INT64_MAX : 0;
                    CHECK(attn_case_run(&c, &p) == FLASHC_OK, "window (%lld, %lld): %s", (long long)big[l],
                          (long long)big[r], flashc_last_error());
                    CHECK(attn_case_diff(&c, &ref) == 0.0,
                          "Sq %lld Sk %lld window (%lld, %lld) sinks %d differs from no window", (long long)Sq,
                          (long long)Sk, (long long)big[l], (long long)big[r], sink);
                    attn_case_free(&c);
                }
        attn_case_free(&ref);
    }
}

/* #4: |softmax_scale| > FLASHC_SOFTMAX_SCALE_MAX is refused (fwd and bwd,
 * every dtype); the bound itself is accepted and computed correctly (F64,
 * against scale·<q, k> computed here, with inputs small enough that the
 * logits stay moderate). */
static void check_softmax_scale_bound(void) {
    const double bad[] = {2 * FLASHC_SOFTMAX_SCALE_MAX, -2 * FLASHC_SOFTMAX_SCALE_MAX, 1e30, -1e30, 1e39, 1e300,
                          1.7e308};
    const int dts[] = {FLASHC_F32, FLASHC_F16, FLASHC_BF16, FLASHC_F64};
    for (int di = 0; di < 4; ++di) {
        const int dt = dts[di];
        attn_case c = attn_case_make(dt == FLASHC_F64 ? FLASHC_F64 : FLASHC_F32, 1, 3, 5, 2, 1, 4, 1.0);
        c.q.dtype = c.k.dtype = c.v.dtype = c.o.dtype = c.dout.dtype = c.dq.dtype = c.dk.dtype = c.dv.dtype = dt;
        flashc_attn_params p = flashc_attn_params_default();
        p.backend = FLASHC_BACKEND_CPU;
        for (size_t i = 0; i < sizeof bad / sizeof *bad; ++i) {
            p.softmax_scale = bad[i];
            EXPECT_ERR(flashc_attn_fwd(&c.q, &c.k, &c.v, &c.o, &c.lse, &p), FLASHC_ERR_INVALID_ARGUMENT,
                       "FLASHC_SOFTMAX_SCALE_MAX");
            EXPECT_ERR(flashc_attn_bwd(&c.dout, &c.q, &c.k, &c.v, &c.o, &c.lse, &c.dq, &c.dk, &c.dv, NULL, &p),
                       FLASHC_ERR_INVALID_ARGUMENT, "FLASHC_SOFTMAX_SCALE_MAX");
        }
        attn_case_free(&c);
    }
    /* At the bound, F64: q·k ≈ 1e-4 keeps the logits within ±~10. */
    enum { SQ = 3, SK = 5, D = 4 };
    attn_case c = attn_case_make(FLASHC_F64, 1, SQ, SK, 1, 1, D, 0.01);
    flashc_attn_params p = flashc_attn_params_default();
    p.backend = FLASHC_BACKEND_CPU;
    for (int sign = -1; sign <= 1; sign += 2) {
        p.softmax_scale = sign * FLASHC_SOFTMAX_SCALE_MAX;
        CHECK(attn_case_run(&c, &p) == FLASHC_OK, "scale %g: %s", p.softmax_scale, flashc_last_error());
        const double *q = c.q.data, *k = c.k.data, *v = c.v.data, *o = c.o.data, *lse = c.lse.data;
        const double *dq = c.dq.data, *dk = c.dk.data, *dout = c.dout.data;
        double err = 0.0, dqref[SQ][D] = {{0}}, dkref[SK][D] = {{0}};
        for (int i = 0; i < SQ; ++i) {
            double x[SK], m = -INFINITY, l = 0.0, oi[D] = {0}, dp[SK], delta = 0.0;
            for (int j = 0; j < SK; ++j) {
                double dot = 0.0;
                for (int d = 0; d < D; ++d) dot += q[i * D + d] * k[j * D + d];
                x[j] = p.softmax_scale * dot;
                m = fmax(m, x[j]);
            }
            for (int j = 0; j < SK; ++j) l += exp(x[j] - m);
            for (int j = 0; j < SK; ++j)
                for (int d = 0; d < D; ++d) oi[d] += exp(x[j] - m) / l * v[j * D + d];
            for (int d = 0; d < D; ++d) err = fmax(err, fabs(oi[d] - o[i * D + d]));
            err = fmax(err, fabs(m + log(l) - lse[i]) / (1.0 + fabs(lse[i])));
            for (int d = 0; d < D; ++d) delta += dout[i * D + d] * oi[d];
            for (int j = 0; j < SK; ++j) {
                dp[j] = 0.0;
                for (int d = 0; d < D; ++d) dp[j] += dout[i * D + d] * v[j * D + d];
                const double ds = exp(x[j] - m) / l * (dp[j] - delta) * p.softmax_scale;
                for (int d = 0; d < D; ++d) {
                    dqref[i][d] += ds * k[j * D + d];
                    dkref[j][d] += ds * q[i * D + d];
                }
            }
        }
        for (int i = 0; i < SQ; ++i)
            for (int d = 0; d < D; ++d) err = fmax(err, fabs(dqref[i][d] - dq[i * D + d]) / (1.0 + fabs(dqref[i][d])));
        for (int j = 0; j < SK; ++j)
            for (int d = 0; d < D; ++d) err = fmax(err, fabs(dkref[j][d] - dk[j * D + d]) / (1.0 + fabs(dkref[j][d])));
        CHECK(err < 1e-9, "scale %g: error %.3g against the F64 loop", p.softmax_scale, err);
    }
    attn_case_free(&c);
}

/* #5: offsets formed from the unchecked strides of empty inputs, span + 1
 * with span = INT64_MAX, memcpy from a NULL w of length 0 (UBSan reports,
 * harmless at -O2 so far). */
static void check_empty_and_extreme_strides(void) {
    /* span = INT64_MAX: the byte offset overflows; must be an error, not UB. */
    float *buf = malloc(16 * sizeof(float));
    flashc_tensor x = t4(buf, FLASHC_F32, 1, 2, 1, 1);
    x.strides[1] = INT64_MAX; /* span = INT64_MAX exactly: span + 1 overflows */
    flashc_tensor xw = t_nd(buf, FLASHC_F32, 2, (const int64_t[]){2, 1});
    xw.strides[0] = INT64_MAX;
    flashc_tensor w = t_nd(buf, FLASHC_F32, 1, (const int64_t[]){1});
    flashc_tensor y = t_nd(buf + 8, FLASHC_F32, 1, (const int64_t[]){2});
    EXPECT_ERR(flashc_weighted_sum(&xw, &w, &y, NULL), FLASHC_ERR_OVERFLOW, "overflows");
    flashc_tensor k = t4(buf, FLASHC_F32, 1, 2, 1, 1), o = t4(buf + 8, FLASHC_F32, 1, 2, 1, 1);
    EXPECT_ERR(flashc_attn_fwd(&x, &k, &k, &o, NULL, NULL), FLASHC_ERR_OVERFLOW, "overflows");
    free(buf);

    /* Weighted sum with D = 0: x [3, 0] and w [0] empty, NULL, wild strides;
     * y = 0. Backward: nothing to write. */
    float *yv = malloc(3 * sizeof(double)); /* room for y in every dtype */
    for (int i = 0; i < 3; ++i) yv[i] = NAN;
    flashc_tensor ex = t_nd(NULL, FLASHC_F32, 2, (const int64_t[]){3, 0});
    ex.strides[0] = INT64_MAX;
    ex.strides[1] = INT64_MAX - 7;
    flashc_tensor ew = t_nd(NULL, FLASHC_F32, 1, (const int64_t[]){0});
    ew.strides[0] = INT64_MAX;
    flashc_tensor ey = t_nd(yv, FLASHC_F32, 1, (const int64_t[]){3});
    for (int dt = 0; dt < 4; ++dt) {
        ex.dtype = ew.dtype = ey.dtype = dt;
        flashc_status s = flashc_weighted_sum(&ex, &ew, &ey, NULL);
        CHECK(s == FLASHC_OK, "weighted_sum D=0 dtype %d: %s", dt, flashc_last_error());
    }
    ey.dtype = ex.dtype = ew.dtype = FLASHC_F32;
    for (int i = 0; i < 3; ++i) yv[i] = NAN;
    CHECK(flashc_weighted_sum(&ex, &ew, &ey, NULL) == FLASHC_OK && yv[0] == 0 && yv[1] == 0 && yv[2] == 0,
          "weighted_sum D=0 must write y = 0");
    flashc_tensor edx = ex, edw = ew;
    CHECK(flashc_weighted_sum_bwd(&ey, &ex, &ew, &edx, &edw, NULL) == FLASHC_OK, "weighted_sum_bwd D=0: %s",
          flashc_last_error());
    free(yv);

    /* Attention with Sk = 0: k, v empty (NULL, wild strides); o = 0, lse = −inf. */
    attn_case c = attn_case_make(FLASHC_F32, 1, 3, 0, 2, 1, 8, 1.0);
    free(c.k.data), free(c.v.data);
    c.k.data = c.v.data = NULL;
    for (int i = 0; i < 4; ++i) c.k.strides[i] = c.v.strides[i] = INT64_MAX - i;
    flashc_attn_params p = flashc_attn_params_default();
    p.backend = FLASHC_BACKEND_CPU;
    flashc_status s = flashc_attn_fwd(&c.q, &c.k, &c.v, &c.o, &c.lse, &p);
    CHECK(s == FLASHC_OK, "Sk = 0: %s", flashc_last_error());
    int ok = 1;
    for (int64_t i = 0; i < tnumel(&c.o); ++i) ok &= tget(&c.o, i) == 0.0;
    for (int64_t i = 0; i < tnumel(&c.lse); ++i) ok &= tget(&c.lse, i) == -INFINITY;
    CHECK(ok, "Sk = 0: o must be 0 and lse -inf");
    s = flashc_attn_bwd(&c.dout, &c.q, &c.k, &c.v, &c.o, &c.lse, &c.dq, &c.dk, &c.dv, NULL, &p);
    CHECK(s == FLASHC_OK, "Sk = 0 bwd: %s", flashc_last_error());
    ok = 1;
    for (int64_t i = 0; i < tnumel(&c.dq); ++i) ok &= tget(&c.dq, i) == 0.0;
    CHECK(ok, "Sk = 0: dq must be 0");
    attn_case_free(&c);

    /* The empty-tensor check does not depend on the axis order: x [0, 2^62,
     * 2^62, 4], [2^62, 0, 2^62, 4], [2^62, 2^62, 0, 4] are all empty. */
    float wv[4] = {1, 2, 3, 4};
    flashc_tensor w4 = t_nd(wv, FLASHC_F32, 1, (const int64_t[]){4});
    for (int z = 0; z < 3; ++z) {
        int64_t sh[4] = {(int64_t)1 << 62, (int64_t)1 << 62, (int64_t)1 << 62, 4};
        sh[z] = 0;
        flashc_tensor tx = t_nd(NULL, FLASHC_F32, 0, sh), ty = t_nd(NULL, FLASHC_F32, 0, sh);
        tx.ndim = 4, ty.ndim = 3; /* (strides stay 0: t_nd's products would overflow) */
        memcpy(tx.shape, sh, sizeof sh), memcpy(ty.shape, sh, 3 * sizeof *sh);
        flashc_status st = flashc_weighted_sum(&tx, &w4, &ty, NULL);
        CHECK(st == FLASHC_OK, "empty x with the zero extent on axis %d: %s %s", z, flashc_status_string(st),
              flashc_last_error());
    }
}

/* #6: an empty backward (Sq = 0 or Sk = 0) with B or Hq = 2^40 looped over
 * every (b, h) row; it must return at once (and still zero dk, dv). */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static void check_empty_backward_fast(void) {
    const int64_t H = (int64_t)1 << 40;
    /* Sq = 0, Hq = 2^40, Hkv = 1: dk, dv [1, 4, 1, 8] must become 0. */
    flashc_tensor q = t4(NULL, FLASHC_F32, 1, 0, H, 8), lse = t_nd(NULL, FLASHC_F32, 3, (const int64_t[]){1, H, 0});
    flashc_tensor k = heap4(FLASHC_F32, 1, 4, 1, 8, 1.0), v = heap4(FLASHC_F32, 1, 4, 1, 8, 1.0);
    flashc_tensor dk = heap4(FLASHC_F32, 1, 4, 1, 8, NAN), dv = heap4(FLASHC_F32, 1, 4, 1, 8, NAN);
    flashc_attn_params p = flashc_attn_params_default();
    p.backend = FLASHC_BACKEND_CPU;
    double t0 = now_s();
    flashc_status s = flashc_attn_bwd(&q, &q, &k, &v, &q, &lse, &q, &dk, &dv, NULL, &p);
    double t = now_s() - t0;
    CHECK(s == FLASHC_OK, "Sq = 0, Hq = 2^40: %s", flashc_last_error());
    CHECK(t < 1.0, "Sq = 0, Hq = 2^40: %.2f s (must return at once)", t);
    int ok = 1;
    for (int i = 0; i < 32; ++i) ok &= ((float *)dk.data)[i] == 0.0f && ((float *)dv.data)[i] == 0.0f;
    CHECK(ok, "Sq = 0: dk, dv must be 0");
    /* B = 2^40, Sq = Sk = 0 (everything empty); and the forward. */
    flashc_tensor q2 = t4(NULL, FLASHC_F32, H, 0, 2, 8), k2 = t4(NULL, FLASHC_F32, H, 0, 1, 8);
    flashc_tensor l2 = t_nd(NULL, FLASHC_F32, 3, (const int64_t[]){H, 2, 0});
    t0 = now_s();
    s = flashc_attn_bwd(&q2, &q2, &k2, &k2, &q2, &l2, &q2, &k2, &k2, NULL, &p);
    CHECK(s == FLASHC_OK, "B = 2^40, Sq = Sk = 0 bwd: %s", flashc_last_error());
    s = flashc_attn_fwd(&q2, &k2, &k2, &q2, &l2, &p);
    CHECK(s == FLASHC_OK, "B = 2^40, Sq = Sk = 0 fwd: %s", flashc_last_error());
    t = now_s() - t0;
    CHECK(t < 1.0, "B = 2^40, Sq = Sk = 0: %.2f s (must return at once)", t);
    free(k.data), free(v.data), free(dk.data), free(dv.data);

    /* B = 0 (an empty batch), Sq = 3, Sk = 5, sink logits: fwd OK; bwd OK with
     * dsinks (stride 2, NaN before) = 0 and the odd elements untouched. */
    float sl[2] = {0.25f, -1.0f}, ds[4] = {NAN, 7.0f, NAN, 7.0f};
    flashc_tensor q0 = t4(NULL, FLASHC_F32, 0, 3, 2, 8), k0 = t4(NULL, FLASHC_F32, 0, 5, 1, 8);
    flashc_tensor l0 = t_nd(NULL, FLASHC_F32, 3, (const int64_t[]){0, 2, 3});
    flashc_tensor tsl = t_nd(sl, FLASHC_F32, 1, (const int64_t[]){2}), tds = t_nd(ds, FLASHC_F32, 1, (const int64_t[]){2});
    tds.strides[0] = 2;
    p.sinks = &tsl;
    p.dsinks = &tds;
    s = flashc_attn_fwd(&q0, &k0, &k0, &q0, &l0, &p);
    CHECK(s == FLASHC_OK, "B = 0 fwd: %s", flashc_last_error());
    s = flashc_attn_bwd(&q0, &q0, &k0, &k0, &q0, &l0, &q0, &k0, &k0, NULL, &p);
    CHECK(s == FLASHC_OK, "B = 0 bwd: %s", flashc_last_error());
    CHECK(ds[0] == 0.0f && ds[2] == 0.0f && ds[1] == 7.0f && ds[3] == 7.0f, "B = 0: dsinks %g %g %g %g (want 0 7 0 7)",
          ds[0], ds[1], ds[2], ds[3]);
}

/* Outputs that overlap themselves through non-zero strides are refused;
 * transposed, flipped and sliced outputs are not. */
static void check_output_overlap(void) {
    enum { S = 4, H = 2, D = 8 };
    float *q = malloc(S * H * D * sizeof(float)), *o = malloc(2 * S * H * D * sizeof(float));
    for (int i = 0; i < S * H * D; ++i) q[i] = (float)frand();
    flashc_tensor tq = t4(q, FLASHC_F32, 1, S, H, D), to = t4(o, FLASHC_F32, 1, S, H, D);
    flashc_attn_params p = flashc_attn_params_default();
    p.backend = FLASHC_BACKEND_CPU;
    flashc_tensor bad = to;
    bad.strides[1] = D; /* rows overlap the heads of the previous row */
    EXPECT_ERR(flashc_attn_fwd(&tq, &tq, &tq, &bad, NULL, &p), FLASHC_ERR_STRIDE, "overlaps itself");
    bad = to;
    bad.strides[3] = 2; /* d overlaps the next head */
    EXPECT_ERR(flashc_attn_fwd(&tq, &tq, &tq, &bad, NULL, &p), FLASHC_ERR_STRIDE, "overlaps itself");
    flashc_tensor lse = t_nd(o, FLASHC_F32, 3, (const int64_t[]){1, H, S});
    lse.strides[1] = 1; /* h and s both stride 1 */
    EXPECT_ERR(flashc_attn_fwd(&tq, &tq, &tq, &to, &lse, &p), FLASHC_ERR_STRIDE, "lse.strides");
    flashc_tensor dq = to;
    dq.strides[2] = 3;
    EXPECT_ERR(flashc_attn_bwd(&tq, &tq, &tq, &tq, &tq, &lse, &dq, &tq, &tq, NULL, &p), FLASHC_ERR_STRIDE,
               "overlaps itself");
    float xv[3] = {1, 2, 3}, wv[3] = {1, 1, 1}, yv[4];
    flashc_tensor w = t_nd(wv, FLASHC_F32, 1, (const int64_t[]){3});
    flashc_tensor y = t_nd(yv, FLASHC_F32, 2, (const int64_t[]){2, 2});
    flashc_tensor x = t_nd(xv, FLASHC_F32, 3, (const int64_t[]){2, 2, 3});
    x.strides[0] = x.strides[1] = 0; /* inputs may broadcast */
    y.strides[0] = 1;
    y.strides[1] = 1;
    EXPECT_ERR(flashc_weighted_sum(&x, &w, &y, NULL), FLASHC_ERR_STRIDE, "y.strides");
    /* Fine: o as [B, H, S, D] in memory, with the S axis flipped. */
    flashc_tensor good = to;
    good.strides[2] = S * D;
    good.strides[1] = -D;
    good.data = o + (S - 1) * D;
    CHECK(flashc_attn_fwd(&tq, &tq, &tq, &good, NULL, &p) == FLASHC_OK, "flipped, transposed o: %s",
          flashc_last_error());
    free(q);
    free(o);
}

/* #7: the OpenMP runtime exits the process when it cannot create a thread.
 * In a child process with OMP_NUM_THREADS=64 and an address-space limit
 * that cannot hold 63 thread stacks, the calls must still return (with a
 * smaller team) and be right. The child is this program, re-executed. */
#if defined(__SANITIZE_ADDRESS__)
#define FC_TEST_HAVE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FC_TEST_HAVE_ASAN 1
#endif
#endif
static int omp_child(void) {
    /* Address space now + 200 MiB: 63 stacks of 8 MiB do not fit. */
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    if (!f || fscanf(f, "%lu", &pages) != 1) return 3;
    fclose(f);
    struct rlimit rl = {(rlim_t)pages * 4096 + (200ul << 20), RLIM_INFINITY};
    if (setrlimit(RLIMIT_AS, &rl) != 0) return 4;
    attn_case a = attn_case_make(FLASHC_F32, 2, 130, 70, 8, 2, 16, 1.0);
    attn_case b = attn_case_make(FLASHC_F32, 2, 130, 70, 8, 2, 16, 1.0);
    attn_case_copy_inputs(&b, &a);
    flashc_attn_params p = flashc_attn_params_default();
    p.backend = FLASHC_BACKEND_CPU;
    if (attn_case_run(&a, &p) != FLASHC_OK) return 5;
    setenv("FLASHC_CPU_ISA", "scalar", 1);
    if (attn_case_run(&b, &p) != FLASHC_OK) return 6;
    if (!(attn_case_diff(&a, &b) < 1e-4)) return 7;
    float *xv = malloc(4096 * 64 * sizeof(float)), *yv = malloc(4096 * sizeof(float));
    for (int i = 0; i < 4096 * 64; ++i) xv[i] = 1.0f;
    flashc_tensor x = t_nd(xv, FLASHC_F32, 2, (const int64_t[]){4096, 64});
    flashc_tensor w = t_nd(xv, FLASHC_F32, 1, (const int64_t[]){64}), y = t_nd(yv, FLASHC_F32, 1, (const int64_t[]){4096});
    if (flashc_weighted_sum(&x, &w, &y, NULL) != FLASHC_OK || yv[4095] != 64.0f) return 8;
    return 0;
}
static void check_omp_thread_limit(const char *self) {
#ifdef FC_TEST_HAVE_ASAN
    (void)self;
    printf("test_capi: OpenMP address-space check skipped (ASan reserves the address space)\n");
#else
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "env -u OMP_STACKSIZE -u GOMP_STACKSIZE OMP_NUM_THREADS=64 '%s' --omp-child", self);
    const int rc = system(cmd);
    CHECK(rc == 0, "OpenMP child under an address-space limit: exit status %d (the runtime exits with 1 when "
                   "it cannot create a thread)", rc);
#endif
}

/* A FLASHC_* knob set to a value it does not accept fails every compute call
 * with FLASHC_ERR_INVALID_ARGUMENT naming the variable and the accepted values
 * (flashc.h, "Environment"); unset and empty mean auto. */
static void check_knob_values(void) {
    static float buf[4096];
    flashc_tensor q = t4(buf, FLASHC_F32, 1, 4, 2, 8), k = q, v = q, o = t4(buf + 1024, FLASHC_F32, 1, 4, 2, 8);
    const int64_t xs[2] = {3, 4}, ws[1] = {4}, ys[1] = {3};
    flashc_tensor x = t_nd(buf, FLASHC_F32, 2, xs), w = t_nd(buf, FLASHC_F32, 1, ws);
    flashc_tensor y = t_nd(buf + 2048, FLASHC_F32, 1, ys);
    static const char *const bad[][3] = {
        {"FLASHC_CPU_ISA", "avx3", "expected scalar, avx2, avx512"},
        {"FLASHC_CPU_BF16", "on", "expected 0, 1"},
        {"FLASHC_CPU_DECODE_ROWS", "x", "expected a non-negative integer"},
        {"FLASHC_CPU_BWD", "fast", "expected twopass"},
        {"FLASHC_CUDA_KERNEL", "wgmma", "expected generic, mma"},
        {"FLASHC_WSUM_VARIANT", "3", "expected 0, 1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; ++i) {
        char want[128];
        snprintf(want, sizeof want, "%s='%s'", bad[i][0], bad[i][1]);
        setenv(bad[i][0], bad[i][1], 1);
        EXPECT_ERR(flashc_attn_fwd(&q, &k, &v, &o, NULL, NULL), FLASHC_ERR_INVALID_ARGUMENT, want);
        CHECK(strstr(flashc_last_error(), bad[i][2]) != NULL, "%s", flashc_last_error());
        EXPECT_ERR(flashc_weighted_sum(&x, &w, &y, NULL), FLASHC_ERR_INVALID_ARGUMENT, want);
        setenv(bad[i][0], "", 1);
        CHECK(flashc_attn_fwd(&q, &k, &v, &o, NULL, NULL) == FLASHC_OK, "%s empty: %s", bad[i][0], flashc_last_error());
        unsetenv(bad[i][0]);
    }
}

/* The CUDA-unavailable reason says "CUDA backend unavailable: " once, and
 * "CUDA module not built" when no module file is there (a CPU-only build). */
static void check_cuda_reason(void) {
    if (flashc_backend_available(FLASHC_BACKEND_CUDA)) return;
    const char *why = flashc_last_error();
    const char *pre = "CUDA backend unavailable: ";
    CHECK(strncmp(why, pre, strlen(pre)) == 0 && !strstr(why + strlen(pre), "unavailable"), "reason '%s'", why);
    Dl_info info;
    char mod[4096];
    if (getenv("FLASHC_CUDA_MODULE") || !dladdr((void *)&flashc_version_string, &info) || !info.dli_fname) return;
    snprintf(mod, sizeof mod, "%s", info.dli_fname);
    char *slash = strrchr(mod, '/');
    snprintf(slash ? slash + 1 : mod, sizeof mod - (size_t)(slash ? slash + 1 - mod : 0), "libflashc_cuda.so");
    if (access(mod, F_OK) == 0) return;
    CHECK(strstr(why, "CUDA module not built (FLASHC_CUDA=OFF, or nvcc missing at build time)") != NULL,
          "reason '%s'", why);
}

/* ------------------------------------------- issue 9: ragged batches, KV cache */
/* Every ragged sequence is attended exactly as the dense B = 1 call with its
 * own lengths: on the CPU the same kernel runs, so the results must be equal
 * bit for bit to per-sequence dense calls (forward and backward), on every
 * ISA, whether the sequences run one after another or in parallel. */

/* F32, F64 and BF16 (rounded toward zero: the tests compare bits, not values). */
static void rset(int dt, void *p, int64_t i, double x) {
    if (dt == FLASHC_F64) ((double *)p)[i] = x;
    else if (dt == FLASHC_F32) ((float *)p)[i] = (float)x;
    else {
        const float f = (float)x;
        uint32_t u;
        memcpy(&u, &f, 4);
        ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
    }
}
static double rget(int dt, const void *p, int64_t i) {
    if (dt == FLASHC_F64) return ((const double *)p)[i];
    if (dt == FLASHC_F32) return (double)((const float *)p)[i];
    const uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return (double)f;
}
/* n reals of dt in a heap buffer of exactly that size: uniform in [-amp, amp], or `amp` itself when fill = 0. */
static void *rbuf(int dt, int64_t n, double amp, int fill) {
    void *p = malloc(n > 0 ? (size_t)n * flashc_dtype_size(dt) : 1);
    for (int64_t i = 0; i < n; ++i) rset(dt, p, i, fill ? amp * frand() : amp);
    return p;
}
static int same_reals(int dt, const void *a, const void *b, int64_t n) {
    return n == 0 || memcmp(a, b, (size_t)n * flashc_dtype_size(dt)) == 0;
}
/* n reals all equal to x (bit for bit for 0, or NaN for NaN). */
static int all_equal(int dt, const void *p, int64_t n, double x) {
    for (int64_t i = 0; i < n; ++i) {
        const double y = rget(dt, p, i);
        if (isnan(x) ? !isnan(y) : (y != x || signbit(y) != signbit(x))) return 0;
    }
    return 1;
}
static flashc_tensor i32_1d(int32_t *p, int64_t n) {
    const int64_t sh[1] = {n};
    return t_nd(p, FLASHC_I32, 1, sh);
}

/* The options a ragged test applies (to the ragged call and to each dense one). */
typedef struct rag_opts {
    int causal, sinks, alibi;
    int64_t wl, wr, nsink;
    double softcap;
} rag_opts;

static const rag_opts RAG_OPTS[] = {
    {0, 0, 0, -1, -1, 0, 0.0},
    {1, 1, 1, 6, -1, 2, 0.0},  /* causal, window, sink tokens, sink logits, [B, Hq] ALiBi */
    {0, 1, 0, 3, 2, 0, 1.5},   /* two-sided window, softcap */
};

static void rag_params(flashc_attn_params *p, const rag_opts *op) {
    *p = flashc_attn_params_default();
    p->backend = FLASHC_BACKEND_CPU;
    p->causal = op->causal;
    p->window_left = op->wl;
    p->window_right = op->wr;
    p->num_sink_tokens = op->nsink;
    p->softcap = op->softcap;
}

/* Varlen: sequences with query/key lengths lq/lk packed after pre rows and
 * before post rows (rows outside every sequence), forward and backward,
 * against per-sequence dense calls. */
static void check_varlen_case(int dt, int nseq, const int32_t *lq, const int32_t *lk, int64_t pre, int64_t post,
                              int64_t Hq, int64_t Hkv, int64_t D, const rag_opts *op, const char *what) {
    const double SENT = 4096.0; /* rows the forward must not write (exact in every dtype) */
    int32_t *cuq = malloc((size_t)(nseq + 1) * 4), *cuk = malloc((size_t)(nseq + 1) * 4);
    cuq[0] = (int32_t)pre, cuk[0] = (int32_t)(pre + 1);
    for (int b = 0; b < nseq; ++b) cuq[b + 1] = cuq[b] + lq[b], cuk[b + 1] = cuk[b] + lk[b];
    const int64_t Tq = cuq[nseq] + post, Tk = cuk[nseq] + post + 2, QR = Hq * D, KR = Hkv * D;
    const int ldt = dt == FLASHC_F64 ? FLASHC_F64 : FLASHC_F32;
    void *q = rbuf(dt, Tq * QR, 1.0, 1), *k = rbuf(dt, Tk * KR, 1.0, 1), *v = rbuf(dt, Tk * KR, 1.0, 1);
    void *dout = rbuf(dt, Tq * QR, 1.0, 1), *o = rbuf(dt, Tq * QR, SENT, 0), *lse = rbuf(ldt, Hq * Tq, SENT, 0);
    void *dq = rbuf(dt, Tq * QR, NAN, 0), *dk = rbuf(dt, Tk * KR, NAN, 0), *dv = rbuf(dt, Tk * KR, NAN, 0);
    void *sinks = rbuf(ldt, Hq, 1.0, 1), *ds = rbuf(ldt, Hq, NAN, 0), *slopes = rbuf(ldt, nseq * Hq, 0.0, 0);
    for (int64_t i = 0; i < nseq * Hq; ++i) rset(ldt, slopes, i, 0.05 + 0.4 * fabs(frand()));
    const int64_t qs[3] = {Tq, Hq, D}, ks[3] = {Tk, Hkv, D}, ls[2] = {Hq, Tq}, hs[1] = {Hq}, as[2] = {nseq, Hq};
    flashc_tensor tq = t_nd(q, dt, 3, qs), tk = t_nd(k, dt, 3, ks), tv = t_nd(v, dt, 3, ks), to = t_nd(o, dt, 3, qs);
    flashc_tensor tdo = t_nd(dout, dt, 3, qs), tdq = t_nd(dq, dt, 3, qs), tdk = t_nd(dk, dt, 3, ks);
    flashc_tensor tdv = t_nd(dv, dt, 3, ks), tl = t_nd(lse, ldt, 2, ls);
    flashc_tensor tsk = t_nd(sinks, ldt, 1, hs), tds = t_nd(ds, ldt, 1, hs), tal = t_nd(slopes, ldt, 2, as);
    flashc_tensor tcq = i32_1d(cuq, nseq + 1), tck = i32_1d(cuk, nseq + 1);
    flashc_varlen sv = flashc_varlen_default();
    sv.cu_seqlens_q = &tcq;
    sv.cu_seqlens_k = &tck;
    flashc_attn_params p;
    rag_params(&p, op);
    if (op->sinks) p.sinks = &tsk, p.dsinks = &tds;
    if (op->alibi) p.alibi_slopes = &tal;
    flashc_status s = flashc_attn_varlen_fwd(&tq, &tk, &tv, &sv, &to, &tl, &p);
    CHECK(s == FLASHC_OK, "%s: varlen fwd: %s %s", what, flashc_status_string(s), flashc_last_error());
    s = flashc_attn_varlen_bwd(&tdo, &tq, &tk, &tv, &to, &tl, &sv, &tdq, &tdk, &tdv, &p);
    CHECK(s == FLASHC_OK, "%s: varlen bwd: %s %s", what, flashc_status_string(s), flashc_last_error());

    int ok_o = 1, ok_l = 1, ok_g = 1;
    double dsum[64] = {0};
    for (int b = 0; b < nseq; ++b) {
        const int64_t Sq = lq[b], Sk = lk[b];
        flashc_tensor bq = t4((char *)q + cuq[b] * QR * (int64_t)flashc_dtype_size(dt), dt, 1, Sq, Hq, D);
        flashc_tensor bdo = t4((char *)dout + cuq[b] * QR * (int64_t)flashc_dtype_size(dt), dt, 1, Sq, Hq, D);
        flashc_tensor bk = t4((char *)k + cuk[b] * KR * (int64_t)flashc_dtype_size(dt), dt, 1, Sk, Hkv, D);
        flashc_tensor bv = t4((char *)v + cuk[b] * KR * (int64_t)flashc_dtype_size(dt), dt, 1, Sk, Hkv, D);
        flashc_tensor bo = t4(rbuf(dt, Sq * QR, NAN, 0), dt, 1, Sq, Hq, D);
        flashc_tensor bdq = t4(rbuf(dt, Sq * QR, NAN, 0), dt, 1, Sq, Hq, D);
        flashc_tensor bdk = t4(rbuf(dt, Sk * KR, NAN, 0), dt, 1, Sk, Hkv, D);
        flashc_tensor bdv = t4(rbuf(dt, Sk * KR, NAN, 0), dt, 1, Sk, Hkv, D);
        const int64_t bls[3] = {1, Hq, Sq}, bas[2] = {1, Hq};
        flashc_tensor bl = t_nd(rbuf(ldt, Hq * Sq, NAN, 0), ldt, 3, bls);
        flashc_tensor bds = t_nd(rbuf(ldt, Hq, NAN, 0), ldt, 1, hs);
        flashc_tensor bal = t_nd((char *)slopes + b * Hq * (int64_t)flashc_dtype_size(ldt), ldt, 2, bas);
        flashc_attn_params pb;
        rag_params(&pb, op);
        if (op->sinks) pb.sinks = &tsk, pb.dsinks = &bds;
        if (op->alibi) pb.alibi_slopes = &bal;
        s = flashc_attn_fwd(&bq, &bk, &bv, &bo, &bl, &pb);
        CHECK(s == FLASHC_OK, "%s: dense fwd of sequence %d: %s", what, b, flashc_last_error());
        s = flashc_attn_bwd(&bdo, &bq, &bk, &bv, &bo, &bl, &bdq, &bdk, &bdv, NULL, &pb);
        CHECK(s == FLASHC_OK, "%s: dense bwd of sequence %d: %s", what, b, flashc_last_error());
        ok_o &= same_reals(dt, (char *)o + cuq[b] * QR * (int64_t)flashc_dtype_size(dt), bo.data, Sq * QR);
        for (int64_t h = 0; h < Hq; ++h)
            ok_l &= same_reals(ldt, (char *)lse + (h * Tq + cuq[b]) * (int64_t)flashc_dtype_size(ldt),
                               (char *)bl.data + h * Sq * (int64_t)flashc_dtype_size(ldt), Sq);
        ok_g &= same_reals(dt, (char *)dq + cuq[b] * QR * (int64_t)flashc_dtype_size(dt), bdq.data, Sq * QR);
        ok_g &= same_reals(dt, (char *)dk + cuk[b] * KR * (int64_t)flashc_dtype_size(dt), bdk.data, Sk * KR);
        ok_g &= same_reals(dt, (char *)dv + cuk[b] * KR * (int64_t)flashc_dtype_size(dt), bdv.data, Sk * KR);
        if (op->sinks)
            for (int64_t h = 0; h < Hq; ++h) dsum[h] += rget(ldt, bds.data, h);
        free(bo.data), free(bdq.data), free(bdk.data), free(bdv.data), free(bl.data), free(bds.data);
    }
    CHECK(ok_o && ok_l, "%s: varlen forward differs from the per-sequence dense calls (o %d, lse %d)", what, ok_o, ok_l);
    CHECK(ok_g, "%s: varlen backward differs from the per-sequence dense calls", what);
    /* rows outside every sequence: o, lse untouched; dq, dk, dv zero */
    int out_ok = all_equal(dt, o, cuq[0] * QR, SENT) && all_equal(dt, (char *)o + cuq[nseq] * QR * (int64_t)flashc_dtype_size(dt), (Tq - cuq[nseq]) * QR, SENT);
    for (int64_t h = 0; h < Hq; ++h)
        out_ok &= all_equal(ldt, (char *)lse + h * Tq * (int64_t)flashc_dtype_size(ldt), cuq[0], SENT) &&
                  all_equal(ldt, (char *)lse + (h * Tq + cuq[nseq]) * (int64_t)flashc_dtype_size(ldt), Tq - cuq[nseq], SENT);
    CHECK(out_ok, "%s: the forward wrote rows outside every sequence", what);
    const size_t e = flashc_dtype_size(dt);
    int zero_ok = all_equal(dt, dq, cuq[0] * QR, 0.0) && all_equal(dt, (char *)dq + cuq[nseq] * QR * e, (Tq - cuq[nseq]) * QR, 0.0) &&
                  all_equal(dt, dk, cuk[0] * KR, 0.0) && all_equal(dt, (char *)dk + cuk[nseq] * KR * e, (Tk - cuk[nseq]) * KR, 0.0) &&
                  all_equal(dt, dv, cuk[0] * KR, 0.0) && all_equal(dt, (char *)dv + cuk[nseq] * KR * e, (Tk - cuk[nseq]) * KR, 0.0);
    CHECK(zero_ok, "%s: dq/dk/dv rows outside every sequence must be 0", what);
    if (op->sinks) {
        int ds_ok = 1;
        for (int64_t h = 0; h < Hq; ++h) ds_ok &= rget(ldt, ds, h) == (ldt == FLASHC_F64 ? dsum[h] : (double)(float)dsum[h]);
        CHECK(ds_ok, "%s: d(sink logits) must be the per-sequence gradients summed in sequence order", what);
    }
    void *bufs[] = {q, k, v, dout, o, lse, dq, dk, dv, sinks, ds, slopes, cuq, cuk};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; ++i) free(bufs[i]);
}

static void check_varlen_values(void) {
    /* lengths: empty sequences, Sq > Sk, Sq < Sk, decode-sized, one dominant sequence (sequences run one after
     * another) and many similar ones (in parallel when there are threads) */
    static const int32_t lq1[] = {3, 0, 17, 1, 0}, lk1[] = {5, 4, 13, 9, 0};
    static const int32_t lq2[] = {70, 2, 1}, lk2[] = {90, 3, 0};
    int32_t lq3[40], lk3[40];
    for (int b = 0; b < 40; ++b) lq3[b] = (int32_t)(b * 7 % 6), lk3[b] = (int32_t)(1 + b * 5 % 9);
    for (int is = 0; is < 3; ++is) {
        setenv("FLASHC_CPU_ISA", ISAS[is], 1);
        for (int dtc = 0; dtc < (is == 2 ? 3 : 2); ++dtc) { /* BF16 (a slow scalar path) on the best ISA only */
            const int dt = dtc == 2 ? FLASHC_BF16 : dtc ? FLASHC_F64 : FLASHC_F32;
            for (size_t o = 0; o < sizeof RAG_OPTS / sizeof *RAG_OPTS; ++o) {
                char what[128];
                snprintf(what, sizeof what, "varlen %s dtype %d opts %zu set 1", ISAS[is], dt, o);
                check_varlen_case(dt, 5, lq1, lk1, 2, 3, 4, 2, 8, &RAG_OPTS[o], what);
                snprintf(what, sizeof what, "varlen %s dtype %d opts %zu set 2", ISAS[is], dt, o);
                check_varlen_case(dt, 3, lq2, lk2, 0, 0, 2, 1, 5, &RAG_OPTS[o], what);
                snprintf(what, sizeof what, "varlen %s dtype %d opts %zu set 3", ISAS[is], dt, o);
                check_varlen_case(dt, 40, lq3, lk3, 1, 1, 4, 4, 16, &RAG_OPTS[o], what);
            }
        }
    }
    unsetenv("FLASHC_CPU_ISA");
}

/* KV cache: B sequences with lens[b] cached tokens, Sk_new appended, Sn
 * queries; a contiguous cache [Bc, Sc, Hkv, D] (rows permuted through
 * cache_batch_idx when idx) or pages of ps rows (ps > 0; shuffled ids when
 * shuffle, else consecutive). Every cache slot a sequence does not use holds
 * NaN. Against the dense call on each sequence's keys (cached, then
 * appended), and the cache afterwards against the expected one. */
static void check_kvcache_case(int dt, int64_t B, const int32_t *lens, int64_t Sn, int64_t Sk_new, int64_t ps,
                               int idx, int shuffle, const rag_opts *op, const char *what) {
    enum { SC = 24, HQ = 4, HKV = 2, D = 8 };
    const int64_t KR = HKV * D, QR = HQ * D;
    const int ldt = dt == FLASHC_F64 ? FLASHC_F64 : FLASHC_F32;
    const size_t e = flashc_dtype_size(dt), le = flashc_dtype_size(ldt);
    const int64_t max_pages = ps ? (SC + ps - 1) / ps + 1 : 0, P = ps ? B * max_pages + 3 : 0;
    const int64_t Bc = ps ? P : (idx ? B + 1 : B), rows = ps ? ps : SC;
    int32_t seqlens[8], bidx[8], *bt = malloc((size_t)(B * (max_pages ? max_pages : 1)) * 4);
    for (int64_t b = 0; b < B; ++b) seqlens[b] = lens[b], bidx[b] = (int32_t)((b + 2) % (B + 1));
    /* page ids: a permutation of [0, P) (shuffled) or b·max_pages + p */
    int32_t *perm = malloc((size_t)(P ? P : 1) * 4);
    for (int64_t i = 0; i < P; ++i) perm[i] = (int32_t)i;
    for (int64_t i = P - 1; shuffle && i > 0; --i) {
        const int64_t j = rand() % (i + 1);
        const int32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (int64_t b = 0; b < B; ++b)
        for (int64_t p = 0; p < max_pages; ++p) bt[b * max_pages + p] = perm[b * max_pages + p];
    /* element offset of (sequence b, position t, head 0, dim 0) in the cache */
#define SLOT(b, t) (ps ? ((int64_t)bt[(b) * max_pages + (t) / ps] * ps + (t) % ps) * KR \
                       : (((idx ? bidx[b] : (b)) * SC + (t)) * KR))
    void *kc = rbuf(dt, Bc * rows * KR, NAN, 0), *vc = rbuf(dt, Bc * rows * KR, NAN, 0);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < lens[b]; ++t)
            for (int64_t x = 0; x < KR; ++x) rset(dt, kc, SLOT(b, t) + x, frand()), rset(dt, vc, SLOT(b, t) + x, frand());
    void *kn = rbuf(dt, B * Sk_new * KR, 1.0, 1), *vn = rbuf(dt, B * Sk_new * KR, 1.0, 1);
    /* the expected cache: the appended rows in place */
    void *kx = malloc((size_t)(Bc * rows * KR) * e), *vx = malloc((size_t)(Bc * rows * KR) * e);
    memcpy(kx, kc, (size_t)(Bc * rows * KR) * e), memcpy(vx, vc, (size_t)(Bc * rows * KR) * e);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < Sk_new; ++t) {
            memcpy((char *)kx + SLOT(b, lens[b] + t) * e, (char *)kn + (b * Sk_new + t) * KR * e, (size_t)KR * e);
            memcpy((char *)vx + SLOT(b, lens[b] + t) * e, (char *)vn + (b * Sk_new + t) * KR * e, (size_t)KR * e);
        }
    void *q = rbuf(dt, B * Sn * QR, 1.0, 1), *o = rbuf(dt, B * Sn * QR, NAN, 0), *lse = rbuf(ldt, B * HQ * Sn, NAN, 0);
    void *sinks = rbuf(ldt, HQ, 1.0, 1), *slopes = rbuf(ldt, B * HQ, 0.3, 0);
    flashc_tensor tq = t4(q, dt, B, Sn, HQ, D), to = t4(o, dt, B, Sn, HQ, D);
    flashc_tensor tkc = t4(kc, dt, Bc, rows, HKV, D), tvc = t4(vc, dt, Bc, rows, HKV, D);
    flashc_tensor tkn = t4(kn, dt, B, Sk_new, HKV, D), tvn = t4(vn, dt, B, Sk_new, HKV, D);
    const int64_t ls[3] = {B, HQ, Sn}, hs[1] = {HQ}, as[2] = {B, HQ}, bts[2] = {B, max_pages};
    flashc_tensor tl = t_nd(lse, ldt, 3, ls), tsk = t_nd(sinks, ldt, 1, hs), tal = t_nd(slopes, ldt, 2, as);
    flashc_tensor tsl = i32_1d(seqlens, B), tbi = i32_1d(bidx, B), tbt = t_nd(bt, FLASHC_I32, 2, bts);
    flashc_kvcache c = flashc_kvcache_default();
    c.k_cache = &tkc, c.v_cache = &tvc, c.cache_seqlens = &tsl;
    if (Sk_new > 0 || Sn % 2) c.k_new = &tkn, c.v_new = &tvn; /* Sk_new = 0: NULL, or empty k_new / v_new */
    if (idx) c.cache_batch_idx = &tbi;
    if (ps) c.block_table = &tbt;
    flashc_attn_params p;
    rag_params(&p, op);
    if (op->sinks) p.sinks = &tsk;
    if (op->alibi) p.alibi_slopes = &tal;
    flashc_status s = flashc_attn_kvcache_fwd(&tq, &c, &to, &tl, &p);
    CHECK(s == FLASHC_OK, "%s: kvcache fwd: %s %s", what, flashc_status_string(s), flashc_last_error());
    /* (the NaN slots compare by their bits) */
    CHECK(memcmp(kc, kx, (size_t)(Bc * rows * KR) * e) == 0 && memcmp(vc, vx, (size_t)(Bc * rows * KR) * e) == 0,
          "%s: the cache after the append differs from the expected one", what);
    int ok = 1;
    for (int64_t b = 0; b < B; ++b) {
        const int64_t Sk = lens[b] + Sk_new;
        void *keys = rbuf(dt, Sk * KR, 0.0, 0), *vals = rbuf(dt, Sk * KR, 0.0, 0);
        for (int64_t t = 0; t < Sk; ++t) {
            memcpy((char *)keys + t * KR * e, (char *)kx + SLOT(b, t) * e, (size_t)KR * e);
            memcpy((char *)vals + t * KR * e, (char *)vx + SLOT(b, t) * e, (size_t)KR * e);
        }
        flashc_tensor bq = t4((char *)q + b * Sn * QR * e, dt, 1, Sn, HQ, D), bk = t4(keys, dt, 1, Sk, HKV, D);
        flashc_tensor bv = t4(vals, dt, 1, Sk, HKV, D), bo = t4(rbuf(dt, Sn * QR, NAN, 0), dt, 1, Sn, HQ, D);
        const int64_t bls[3] = {1, HQ, Sn}, bas[2] = {1, HQ};
        flashc_tensor bl = t_nd(rbuf(ldt, HQ * Sn, NAN, 0), ldt, 3, bls);
        flashc_tensor bal = t_nd((char *)slopes + b * HQ * le, ldt, 2, bas);
        flashc_attn_params pb;
        rag_params(&pb, op);
        if (op->sinks) pb.sinks = &tsk;
        if (op->alibi) pb.alibi_slopes = &bal;
        s = flashc_attn_fwd(&bq, &bk, &bv, &bo, &bl, &pb);
        CHECK(s == FLASHC_OK, "%s: dense fwd of sequence %lld: %s", what, (long long)b, flashc_last_error());
        ok &= same_reals(dt, (char *)o + b * Sn * QR * e, bo.data, Sn * QR);
        ok &= same_reals(ldt, (char *)lse + b * HQ * Sn * le, bl.data, HQ * Sn);
        free(keys), free(vals), free(bo.data), free(bl.data);
    }
    CHECK(ok, "%s: the KV-cache forward differs from the dense call on each sequence's keys", what);
#undef SLOT
    void *bufs[] = {bt, perm, kc, vc, kn, vn, kx, vx, q, o, lse, sinks, slopes};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; ++i) free(bufs[i]);
}

static void check_kvcache_values(void) {
    static const int32_t lens1[] = {5, 0, 19}, lens2[] = {9, 7, 8, 9};
    static const int64_t pss[] = {0, 1, 3, 16};
    for (int is = 0; is < 3; ++is) {
        setenv("FLASHC_CPU_ISA", ISAS[is], 1);
        for (int dtc = 0; dtc < (is == 2 ? 3 : 2); ++dtc) /* BF16 on the best ISA only */
            for (size_t pi = 0; pi < sizeof pss / sizeof *pss; ++pi)
                for (int var = 0; var < 2; ++var) /* non-paged: cache_batch_idx; paged: shuffled pages */
                    for (int64_t Sn = 1; Sn <= 9; Sn += 3)
                        for (int64_t Sk_new = 0; Sk_new <= 2; Sk_new += 2)
                            for (size_t o = 0; o < 2; ++o) {
                                const int dt = dtc == 2 ? FLASHC_BF16 : dtc ? FLASHC_F64 : FLASHC_F32;
                                const int set = (int)(Sn + Sk_new) % 2;
                                char what[160];
                                snprintf(what, sizeof what, "kvcache %s dtype %d page_size %lld %s Sn %lld Sk_new %lld opts %zu",
                                         ISAS[is], dt, (long long)pss[pi], var ? (pss[pi] ? "shuffled" : "idx") : "plain",
                                         (long long)Sn, (long long)Sk_new, o);
                                check_kvcache_case(dt, set ? 4 : 3, set ? lens2 : lens1, Sn, Sk_new, pss[pi],
                                                   !pss[pi] && var, var, &RAG_OPTS[o], what);
                            }
    }
    unsetenv("FLASHC_CPU_ISA");
}

/* Struct defaults, FLASHC_I32 refused on every float tensor, and every bad
 * input of the ragged entry points with its status and a message naming it. */
static void check_ragged_errors(void) {
    flashc_varlen dv0 = flashc_varlen_default();
    CHECK(dv0.struct_size == sizeof(flashc_varlen) && !dv0.cu_seqlens_q && !dv0.cu_seqlens_k && dv0.max_seqlen_q == 0 &&
              dv0.max_seqlen_k == 0, "flashc_varlen_default");
    flashc_kvcache kc0 = flashc_kvcache_default();
    CHECK(kc0.struct_size == sizeof(flashc_kvcache) && !kc0.k_cache && !kc0.v_cache && !kc0.cache_seqlens &&
              !kc0.k_new && !kc0.v_new && !kc0.cache_batch_idx && !kc0.block_table, "flashc_kvcache_default");
    CHECK(flashc_dtype_size(FLASHC_I32) == 4, "flashc_dtype_size(FLASHC_I32)");

    static float buf[1 << 14];
    static int32_t ibuf[64];
    /* dense: I32 on any float tensor */
    {
        flashc_tensor q = t4(buf, FLASHC_F32, 1, 4, 2, 8), o = t4(buf + 4096, FLASHC_F32, 1, 4, 2, 8), bad;
        flashc_tensor lse = t_nd(buf + 8192, FLASHC_F32, 3, (const int64_t[]){1, 2, 4});
        flashc_tensor h2 = t_nd(buf + 9000, FLASHC_F32, 1, (const int64_t[]){2});
        bad = q, bad.dtype = FLASHC_I32;
        EXPECT_ERR(flashc_attn_fwd(&bad, &bad, &bad, &o, NULL, NULL), FLASHC_ERR_DTYPE, "q.dtype=I32");
        flashc_tensor o32 = o;
        o32.dtype = FLASHC_I32;
        EXPECT_ERR(flashc_attn_fwd(&bad, &bad, &bad, &o32, NULL, NULL), FLASHC_ERR_DTYPE, "q.dtype=I32");
        EXPECT_ERR(flashc_attn_fwd(&q, &bad, &q, &o, NULL, NULL), FLASHC_ERR_DTYPE, "k.dtype=I32");
        EXPECT_ERR(flashc_attn_fwd(&q, &q, &q, &o32, NULL, NULL), FLASHC_ERR_DTYPE, "o.dtype=I32");
        bad = lse, bad.dtype = FLASHC_I32;
        EXPECT_ERR(flashc_attn_fwd(&q, &q, &q, &o, &bad, NULL), FLASHC_ERR_DTYPE, "lse.dtype=I32");
        flashc_attn_params p = flashc_attn_params_default();
        bad = h2, bad.dtype = FLASHC_I32;
        p.sinks = &bad;
        EXPECT_ERR(flashc_attn_fwd(&q, &q, &q, &o, NULL, &p), FLASHC_ERR_DTYPE, "sinks.dtype=I32");
        p = flashc_attn_params_default();
        p.alibi_slopes = &bad;
        EXPECT_ERR(flashc_attn_fwd(&q, &q, &q, &o, NULL, &p), FLASHC_ERR_DTYPE, "alibi_slopes.dtype=I32");
        p = flashc_attn_params_default();
        p.sinks = &h2;
        p.dsinks = &bad;
        EXPECT_ERR(flashc_attn_bwd(&q, &q, &q, &q, &q, &lse, &o, &o, &o, NULL, &p), FLASHC_ERR_DTYPE, "dsinks.dtype=I32");
        bad = o, bad.dtype = FLASHC_I32;
        EXPECT_ERR(flashc_attn_bwd(&q, &q, &q, &q, &q, &lse, &bad, &o, &o, NULL, NULL), FLASHC_ERR_DTYPE, "I32");
        const int64_t xs[2] = {3, 4}, ws[1] = {4}, ys[1] = {3};
        flashc_tensor x = t_nd(buf, FLASHC_I32, 2, xs), w = t_nd(buf, FLASHC_I32, 1, ws), y = t_nd(buf + 64, FLASHC_I32, 1, ys);
        EXPECT_ERR(flashc_weighted_sum(&x, &w, &y, NULL), FLASHC_ERR_DTYPE, "x.dtype=I32");
        EXPECT_ERR(flashc_weighted_sum_bwd(&y, &x, &w, &x, NULL, NULL), FLASHC_ERR_DTYPE, "x.dtype=I32");
        x.dtype = 5;
        EXPECT_ERR(flashc_weighted_sum(&x, &w, &y, NULL), FLASHC_ERR_DTYPE, "4=I32");
    }

    /* varlen: q [6, 4, 8], k, v [7, 2, 8], two sequences */
    float *q = buf, *k = buf + 1024, *v = buf + 2048, *o = buf + 3072, *lse = buf + 4096;
    float *dq = buf + 5120, *dk = buf + 6144, *dv = buf + 7168;
    for (int i = 0; i < 8192; ++i) buf[i] = (float)frand();
    int32_t *cuq = ibuf, *cuk = ibuf + 8;
    cuq[0] = 0, cuq[1] = 2, cuq[2] = 6, cuk[0] = 0, cuk[1] = 3, cuk[2] = 7;
    flashc_tensor tq = t_nd(q, FLASHC_F32, 3, (const int64_t[]){6, 4, 8}), tk = t_nd(k, FLASHC_F32, 3, (const int64_t[]){7, 2, 8});
    flashc_tensor tv = t_nd(v, FLASHC_F32, 3, (const int64_t[]){7, 2, 8}), to = t_nd(o, FLASHC_F32, 3, (const int64_t[]){6, 4, 8});
    flashc_tensor tl = t_nd(lse, FLASHC_F32, 2, (const int64_t[]){4, 6});
    flashc_tensor tdq = t_nd(dq, FLASHC_F32, 3, (const int64_t[]){6, 4, 8}), tdk = t_nd(dk, FLASHC_F32, 3, (const int64_t[]){7, 2, 8});
    flashc_tensor tdv = t_nd(dv, FLASHC_F32, 3, (const int64_t[]){7, 2, 8});
    flashc_tensor tcq = i32_1d(cuq, 3), tck = i32_1d(cuk, 3), bad;
    flashc_varlen sv = flashc_varlen_default(), sb;
    sv.cu_seqlens_q = &tcq, sv.cu_seqlens_k = &tck;
    flashc_attn_params p = flashc_attn_params_default();
    p.backend = FLASHC_BACKEND_CPU;
    CHECK(flashc_attn_varlen_fwd(&tq, &tk, &tv, &sv, &to, &tl, &p) == FLASHC_OK, "valid varlen: %s", flashc_last_error());
    CHECK(flashc_attn_varlen_bwd(&to, &tq, &tk, &tv, &to, &tl, &sv, &tdq, &tdk, &tdv, &p) == FLASHC_OK,
          "valid varlen bwd: %s", flashc_last_error());
#define VFWD(seqs) flashc_attn_varlen_fwd(&tq, &tk, &tv, (seqs), &to, &tl, &p)
    EXPECT_ERR(VFWD(NULL), FLASHC_ERR_NULL_POINTER, "seqs is NULL");
    sb = sv, sb.struct_size = 8;
    EXPECT_ERR(VFWD(&sb), FLASHC_ERR_PARAMS_SIZE, "seqs.struct_size=8");
    sb = sv, sb.cu_seqlens_q = NULL;
    EXPECT_ERR(VFWD(&sb), FLASHC_ERR_NULL_POINTER, "cu_seqlens_q");
    bad = tck, bad.dtype = FLASHC_F32;
    sb = sv, sb.cu_seqlens_k = &bad;
    EXPECT_ERR(VFWD(&sb), FLASHC_ERR_DTYPE, "cu_seqlens_k.dtype=F32, expected I32");
    bad = t_nd(cuq, FLASHC_I32, 2, (const int64_t[]){1, 3});
    sb = sv, sb.cu_seqlens_q = &bad;
    EXPECT_ERR(VFWD(&sb), FLASHC_ERR_SHAPE, "cu_seqlens_q.ndim=2");
    bad = i32_1d(cuq, 1);
    sb = sv, sb.cu_seqlens_q = &bad, sb.cu_seqlens_k = &bad;
    EXPECT_ERR(VFWD(&sb), FLASHC_ERR_SHAPE, "cu_seqlens_q.shape[0]=1");
    bad = i32_1d(cuk, 2);
    sb = sv, sb.cu_seqlens_k = &bad;
    EXPECT_ERR(VFWD(&sb), FLASHC_ERR_SHAPE, "cu_seqlens_k.shape[0]=2 must equal cu_seqlens_q.shape[0]=3");
    sb = sv, sb.max_seqlen_k = -1;
    EXPECT_ERR(VFWD(&sb), FLASHC_ERR_INVALID_ARGUMENT, "seqs.max_seqlen_k=-1");
    sb = sv, sb.max_seqlen_q = 3;
    EXPECT_ERR(VFWD(&sb), FLASHC_ERR_INVALID_ARGUMENT, "sequence 1 has 4 rows");
    sb = sv, sb.max_seqlen_q = 4, sb.max_seqlen_k = 4;
    CHECK(VFWD(&sb) == FLASHC_OK, "exact max_seqlen: %s", flashc_last_error());
    cuq[1] = 5, cuq[2] = 4;
    EXPECT_ERR(VFWD(&sv), FLASHC_ERR_INVALID_ARGUMENT, "cu_seqlens_q[2]=4 < cu_seqlens_q[1]=5: cu_seqlens must be non-decreasing");
    cuq[1] = 2, cuq[2] = 6, cuk[0] = -1;
    EXPECT_ERR(VFWD(&sv), FLASHC_ERR_INVALID_ARGUMENT, "cu_seqlens_k[0]=-1 is negative");
    cuk[0] = 0, cuk[2] = 8;
    EXPECT_ERR(VFWD(&sv), FLASHC_ERR_INVALID_ARGUMENT, "cu_seqlens_k[2]=8 exceeds k.shape[0]=7");
    cuk[2] = 7;
    bad = t_nd(q, FLASHC_F32, 4, (const int64_t[]){1, 6, 4, 8});
    EXPECT_ERR(flashc_attn_varlen_fwd(&bad, &tk, &tv, &sv, &to, &tl, &p), FLASHC_ERR_SHAPE, "q.ndim=4, expected 3");
    bad = tq, bad.dtype = FLASHC_I32;
    EXPECT_ERR(flashc_attn_varlen_fwd(&bad, &tk, &tv, &sv, &to, &tl, &p), FLASHC_ERR_DTYPE, "q.dtype=I32");
    bad = t_nd(k, FLASHC_F32, 3, (const int64_t[]){7, 3, 8});
    EXPECT_ERR(flashc_attn_varlen_fwd(&tq, &bad, &bad, &sv, &to, &tl, &p), FLASHC_ERR_SHAPE,
               "q.shape[1]=4 is not a multiple of k.shape[1]=3");
    bad = t_nd(v, FLASHC_F32, 3, (const int64_t[]){6, 2, 8});
    EXPECT_ERR(flashc_attn_varlen_fwd(&tq, &tk, &bad, &sv, &to, &tl, &p), FLASHC_ERR_SHAPE, "v.shape[0]=6 (T)");
    bad = t_nd(lse, FLASHC_F32, 2, (const int64_t[]){4, 5});
    EXPECT_ERR(flashc_attn_varlen_fwd(&tq, &tk, &tv, &sv, &to, &bad, &p), FLASHC_ERR_SHAPE, "lse.shape[1]=5 must equal Tq=6");
    bad = t_nd(lse, FLASHC_F32, 3, (const int64_t[]){1, 4, 6});
    EXPECT_ERR(flashc_attn_varlen_fwd(&tq, &tk, &tv, &sv, &to, &bad, &p), FLASHC_ERR_SHAPE, "lse.ndim=3, expected 2");
    bad = to, bad.strides[0] = 8;
    EXPECT_ERR(flashc_attn_varlen_fwd(&tq, &tk, &tv, &sv, &bad, &tl, &p), FLASHC_ERR_STRIDE, "o.strides");
    {
        float sl[8] = {0.1f, 0.2f, 0.3f, 0.4f, 0.1f, 0.2f, 0.3f, 0.4f}, sk[4] = {0}, dsk[4];
        flashc_tensor ta = t_nd(sl, FLASHC_F32, 2, (const int64_t[]){2, 4});
        p.alibi_slopes = &ta;
        CHECK(VFWD(&sv) == FLASHC_OK, "[B, Hq] slopes with B = the sequences: %s", flashc_last_error());
        ta = t_nd(sl, FLASHC_F32, 2, (const int64_t[]){1, 4});
        EXPECT_ERR(VFWD(&sv), FLASHC_ERR_SHAPE, "alibi_slopes.shape[0]=1 must equal B=2");
        p.alibi_slopes = NULL;
        flashc_tensor tsk = t_nd(sk, FLASHC_F32, 1, (const int64_t[]){4}), tdsk = t_nd(dsk, FLASHC_F32, 1, (const int64_t[]){4});
        p.sinks = &tsk;
        EXPECT_ERR(flashc_attn_varlen_bwd(&to, &tq, &tk, &tv, &to, &tl, &sv, &tdq, &tdk, &tdv, &p), FLASHC_ERR_NULL_POINTER,
                   "params.dsinks is not");
        p.dsinks = &tdsk;
        CHECK(flashc_attn_varlen_bwd(&to, &tq, &tk, &tv, &to, &tl, &sv, &tdq, &tdk, &tdv, &p) == FLASHC_OK,
              "varlen bwd with sinks: %s", flashc_last_error());
        p.sinks = p.dsinks = NULL;
    }
    EXPECT_ERR(flashc_attn_varlen_bwd(&to, &tq, &tk, &tv, &to, NULL, &sv, &tdq, &tdk, &tdv, &p), FLASHC_ERR_NULL_POINTER, "lse is NULL");
    EXPECT_ERR(flashc_attn_varlen_bwd(&to, &tq, &tk, &tv, &to, &tl, &sv, &tdq, &tdq, &tdv, &p), FLASHC_ERR_SHAPE, "dk.shape[0]=6 (T)");
    EXPECT_ERR(flashc_attn_varlen_bwd(&to, &tq, &tk, &tv, &to, &tl, NULL, &tdq, &tdk, &tdv, &p), FLASHC_ERR_NULL_POINTER, "seqs");
    cuk[1] = 9;
    EXPECT_ERR(flashc_attn_varlen_bwd(&to, &tq, &tk, &tv, &to, &tl, &sv, &tdq, &tdk, &tdv, &p), FLASHC_ERR_INVALID_ARGUMENT,
               "cu_seqlens_k[1]=9 exceeds k.shape[0]=7");
    cuk[1] = 3;
    p.struct_size = 12;
    EXPECT_ERR(VFWD(&sv), FLASHC_ERR_PARAMS_SIZE, "params.struct_size=12");
    p = flashc_attn_params_default();
    p.backend = FLASHC_BACKEND_CPU;
    p.window_left = -3;
    EXPECT_ERR(VFWD(&sv), FLASHC_ERR_INVALID_ARGUMENT, "params.window_left=-3");
    p.window_left = -1;
#undef VFWD

    /* KV cache: q [2, 1, 4, 8], cache [2, 6, 2, 8], lengths 3 and 5 */
    float *kc = buf + 8192, *vc = buf + 9216, *kn = buf + 10240, *vn = buf + 10496;
    int32_t *sl = ibuf + 16, *bi = ibuf + 24, *bt = ibuf + 32;
    sl[0] = 3, sl[1] = 5, bi[0] = 1, bi[1] = 0;
    flashc_tensor kq = t4(q, FLASHC_F32, 2, 1, 4, 8), ko = t4(o, FLASHC_F32, 2, 1, 4, 8);
    flashc_tensor tkc = t4(kc, FLASHC_F32, 2, 6, 2, 8), tvc = t4(vc, FLASHC_F32, 2, 6, 2, 8);
    flashc_tensor tkn = t4(kn, FLASHC_F32, 2, 1, 2, 8), tvn = t4(vn, FLASHC_F32, 2, 1, 2, 8);
    flashc_tensor kl = t_nd(lse, FLASHC_F32, 3, (const int64_t[]){2, 4, 1}), tsl = i32_1d(sl, 2), tbi = i32_1d(bi, 2);
    flashc_kvcache c = flashc_kvcache_default(), cb;
    c.k_cache = &tkc, c.v_cache = &tvc, c.cache_seqlens = &tsl;
#define KFWD(cc) flashc_attn_kvcache_fwd(&kq, (cc), &ko, &kl, &p)
    CHECK(KFWD(&c) == FLASHC_OK, "valid kvcache: %s", flashc_last_error());
    cb = c, cb.k_new = &tkn, cb.v_new = &tvn;
    CHECK(KFWD(&cb) == FLASHC_OK, "valid kvcache with k_new: %s", flashc_last_error());
    EXPECT_ERR(KFWD(NULL), FLASHC_ERR_NULL_POINTER, "cache is NULL");
    cb = c, cb.struct_size = 4;
    EXPECT_ERR(KFWD(&cb), FLASHC_ERR_PARAMS_SIZE, "cache.struct_size=4");
    cb = c, cb.k_new = &tkn;
    EXPECT_ERR(KFWD(&cb), FLASHC_ERR_NULL_POINTER, "cache.k_new is set but cache.v_new is NULL");
    cb = c, cb.cache_seqlens = NULL;
    EXPECT_ERR(KFWD(&cb), FLASHC_ERR_NULL_POINTER, "cache_seqlens");
    cb = c, cb.k_cache = NULL;
    EXPECT_ERR(KFWD(&cb), FLASHC_ERR_NULL_POINTER, "k_cache");
    bad = tsl, bad.dtype = FLASHC_F32;
    cb = c, cb.cache_seqlens = &bad;
    EXPECT_ERR(KFWD(&cb), FLASHC_ERR_DTYPE, "cache_seqlens.dtype=F32, expected I32");
    bad = i32_1d(sl, 3);
    cb = c, cb.cache_seqlens = &bad;
    EXPECT_ERR(KFWD(&cb), FLASHC_ERR_SHAPE, "cache_seqlens.shape[0]=3 must equal q.shape[0]=2");
    sl[1] = -1;
    EXPECT_ERR(KFWD(&c), FLASHC_ERR_INVALID_ARGUMENT, "cache_seqlens[1]=-1 is negative");
    sl[1] = 7;
    EXPECT_ERR(KFWD(&c), FLASHC_ERR_INVALID_ARGUMENT, "cache_seqlens[1]=7 + Sk_new=0 exceeds the cache length k_cache.shape[1]=6");
    sl[1] = 6;
    cb = c, cb.k_new = &tkn, cb.v_new = &tvn;
    EXPECT_ERR(KFWD(&cb), FLASHC_ERR_INVALID_ARGUMENT, "cache_seqlens[1]=6 + Sk_new=1 exceeds");
    sl[1] = 5;
    bad = t4(kn, FLASHC_F32, 2, 1, 1, 8);
    cb = c, cb.k_new = &bad, cb.v_new = &bad;
    EXPECT_ERR(KFWD(&cb), FLASHC_ERR_SHAPE, "k_new.shape[2]=1 must equal Hkv=2");
    bad = t4(kn, FLASHC_F32, 2, 7, 2, 8);
    cb = c, cb.k_new = &bad, cb.v_new = &bad;
    EXPECT_ERR(KFWD(&cb), FLASHC_ERR_SHAPE, "k_new.shape[1]=7 (Sk_new) exceeds the cache capacity 6");
    bad = tkc, bad.strides[1] = 8; /* positions overlap the next position's head 0 */
    cb = c, cb.k_cache = &bad, cb.v_cache = &bad, cb.k_new = &tkn, cb.v_new = &tvn;
    EXPECT_ERR(KFWD(&cb), FLASHC_ERR_STRIDE, "k_cache.strides");
    bad = tkc, bad.strides[0] = 0; /* a broadcast cache is fine as long as nothing is appended */
    cb = c, cb.k_cache = &bad, cb.v_cache = &bad;
    CHECK(KFWD(&cb) == FLASHC_OK, "broadcast cache, no append: %s", flashc_last_error());
    cb.k_new = &tkn, cb.v_new = &tvn;
    EXPECT_ERR(KFWD(&cb), FLASHC_ERR_STRIDE, "k_cache.strides[0]=0");
    bad = tkc, bad.dtype = FLASHC_I32;
    cb = c, cb.k_cache = &bad, cb.v_cache = &bad;
    EXPECT_ERR(KFWD(&cb), FLASHC_ERR_DTYPE, "k_cache.dtype=I32");
    bad = t4(kc, FLASHC_F32, 3, 6, 2, 8);
    cb = c, cb.k_cache = &bad, cb.v_cache = &bad;
    EXPECT_ERR(KFWD(&cb), FLASHC_ERR_SHAPE, "k_cache.shape[0]=3 must equal q.shape[0]=2 (B) without cache_batch_idx");
    cb.cache_batch_idx = &tbi;
    CHECK(KFWD(&cb) == FLASHC_OK, "cache_batch_idx: %s", flashc_last_error());
    bi[1] = 3;
    EXPECT_ERR(KFWD(&cb), FLASHC_ERR_INVALID_ARGUMENT, "cache_batch_idx[1]=3 is outside [0, 3)");
    bi[1] = 0;
    bad = kq, bad.dtype = FLASHC_I32;
    EXPECT_ERR(flashc_attn_kvcache_fwd(&bad, &c, &ko, &kl, &p), FLASHC_ERR_DTYPE, "q.dtype=I32");
    bad = t_nd(lse, FLASHC_F32, 3, (const int64_t[]){2, 4, 2});
    EXPECT_ERR(flashc_attn_kvcache_fwd(&kq, &c, &ko, &bad, &p), FLASHC_ERR_SHAPE, "lse.shape[2]=2 must equal Sn=1");
    /* paged: 4 pages of 3 rows, max_pages 2 */
    flashc_tensor pk = t4(kc, FLASHC_F32, 4, 3, 2, 8), pv = t4(vc, FLASHC_F32, 4, 3, 2, 8);
    flashc_tensor tbt = t_nd(bt, FLASHC_I32, 2, (const int64_t[]){2, 2});
    bt[0] = 3, bt[1] = 99 /* never read: sequence 0 has 3 keys */, bt[2] = 0, bt[3] = 1;
    flashc_kvcache pc = flashc_kvcache_default(), pb;
    pc.k_cache = &pk, pc.v_cache = &pv, pc.cache_seqlens = &tsl, pc.block_table = &tbt;
    CHECK(KFWD(&pc) == FLASHC_OK, "paged: %s", flashc_last_error());
    bt[3] = 4;
    EXPECT_ERR(KFWD(&pc), FLASHC_ERR_INVALID_ARGUMENT, "block_table[1, 1]=4 is outside [0, 4)");
    bt[3] = -2;
    EXPECT_ERR(KFWD(&pc), FLASHC_ERR_INVALID_ARGUMENT, "block_table[1, 1]=-2 is outside [0, 4)");
    bt[3] = 1, bt[1] = 2; /* with k_new, sequence 0 has 4 keys: two pages */
    pb = pc, pb.k_new = &tkn, pb.v_new = &tvn;
    sl[1] = 6;
    EXPECT_ERR(KFWD(&pb), FLASHC_ERR_INVALID_ARGUMENT, "the block table is too short");
    sl[1] = 5;
    CHECK(KFWD(&pb) == FLASHC_OK, "paged with k_new: %s", flashc_last_error());
    pb = pc, pb.cache_batch_idx = &tbi;
    EXPECT_ERR(KFWD(&pb), FLASHC_ERR_INVALID_ARGUMENT, "cache_batch_idx and cache.block_table are both set");
    bad = t_nd(bt, FLASHC_I32, 2, (const int64_t[]){2, 0});
    pb = pc, pb.block_table = &bad;
    EXPECT_ERR(KFWD(&pb), FLASHC_ERR_SHAPE, "block_table.shape[1]=0");
    bad = t_nd(bt, FLASHC_I32, 2, (const int64_t[]){1, 2});
    pb = pc, pb.block_table = &bad;
    EXPECT_ERR(KFWD(&pb), FLASHC_ERR_SHAPE, "block_table.shape[0]=1 must equal q.shape[0]=2");
    bad = t_nd(bt, FLASHC_I32, 1, (const int64_t[]){4});
    pb = pc, pb.block_table = &bad;
    EXPECT_ERR(KFWD(&pb), FLASHC_ERR_SHAPE, "block_table.ndim=1");
#undef KFWD
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--omp-child") == 0) return omp_child();
    srand(1234);
    CHECK(strcmp(flashc_version_string(), FLASHC_VERSION_STRING) == 0, "version string %s", flashc_version_string());
    CHECK(flashc_version_number() == FLASHC_VERSION_NUMBER, "version number");
    CHECK(strcmp(flashc_status_string(FLASHC_ERR_SHAPE), "FLASHC_ERR_SHAPE") == 0, "status string");
    CHECK(strcmp(flashc_status_string(999), "FLASHC_ERR_UNKNOWN") == 0, "unknown status string");
    CHECK(flashc_attn_params_size() == sizeof(flashc_attn_params), "params size");
    CHECK(flashc_attn_params_default().struct_size == sizeof(flashc_attn_params), "params default size");
    CHECK(flashc_backend_available(FLASHC_BACKEND_CPU) == 1, "cpu available");
    int cuda = flashc_backend_available(FLASHC_BACKEND_CUDA);
    if (!cuda) {
        CHECK(strlen(flashc_last_error()) > 0, "cuda unavailable without a reason");
        int n = 7;
        EXPECT_ERR(flashc_cuda_device_count(&n), FLASHC_ERR_BACKEND_UNAVAILABLE, "CUDA backend unavailable");
        CHECK(n == 0, "device count not zeroed");
    }
    CHECK(flashc_cuda_free(NULL) == FLASHC_OK, "free(NULL)");
    check_error_paths();
    check_attention_values();
    check_params_versions();
    check_score_modifier_values();
    check_weighted_sum_values();
    check_twopass_small();
    check_huge_windows();
    check_softmax_scale_bound();
    check_empty_and_extreme_strides();
    check_empty_backward_fast();
    check_output_overlap();
    check_ragged_errors();
    check_varlen_values();
    check_kvcache_values();
    check_knob_values();
    check_cuda_reason();
    check_omp_thread_limit(argv[0]);
    printf("test_capi: %d checks, %d failed (cpu isa %s, cuda %s)\n", checks, failures, flashc_cpu_isa(),
           cuda ? "available" : "unavailable");
    return failures ? 1 : 0;
}
