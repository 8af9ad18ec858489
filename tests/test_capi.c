/* C API checks run by ctest: version, status strings, params guards, and
 * every validation error path of the ABI, each with its status code and a
 * message naming the problem. Also a small end-to-end call of each op
 * against a naive reference, so the C entry points are exercised without
 * Python. Returns non-zero on the first failed check's count. */
#include "flashc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    flashc_tensor v = k, o = q;
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
    EXPECT_ERR(flashc_attn_fwd(&q, &bad, &v, &o, NULL, NULL), FLASHC_ERR_DTYPE, "share one dtype");
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
    flashc_tensor lse = t_nd(buf, FLASHC_F32, 3, lshape);
    EXPECT_ERR(flashc_attn_fwd(&q, &k, &v, &o, &lse, NULL), FLASHC_ERR_SHAPE, "lse.shape[2]=5");
    lse.shape[2] = 4;
    lse.dtype = FLASHC_F64;
    EXPECT_ERR(flashc_attn_fwd(&q, &k, &v, &o, &lse, NULL), FLASHC_ERR_DTYPE, "lse.dtype");
    lse.dtype = FLASHC_F32;

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

    /* weighted sum */
    const int64_t xs[2] = {3, 4}, ws[1] = {4}, ys[1] = {3}, wbad[1] = {5};
    flashc_tensor x = t_nd(buf, FLASHC_F32, 2, xs), w = t_nd(buf, FLASHC_F32, 1, ws), y = t_nd(buf, FLASHC_F32, 1, ys);
    flashc_tensor w5 = t_nd(buf, FLASHC_F32, 1, wbad);
    EXPECT_ERR(flashc_weighted_sum(&x, &w5, &y, NULL), FLASHC_ERR_SHAPE, "w.shape[0]=5");
    EXPECT_ERR(flashc_weighted_sum(&x, &w, &x, NULL), FLASHC_ERR_SHAPE, "y.ndim=2");
    bad = w;
    bad.dtype = FLASHC_F64;
    EXPECT_ERR(flashc_weighted_sum(&x, &bad, &y, NULL), FLASHC_ERR_DTYPE, "w.dtype");
    EXPECT_ERR(flashc_weighted_sum_bwd(&y, &x, &w, NULL, NULL, NULL), FLASHC_ERR_NULL_POINTER, "both NULL");
    flashc_exec_params ep = flashc_exec_params_default();
    ep.struct_size = 3;
    EXPECT_ERR(flashc_weighted_sum(&x, &w, &y, &ep), FLASHC_ERR_PARAMS_SIZE, "struct_size=3");

    /* the message is cleared by the next successful call */
    CHECK(flashc_weighted_sum(&x, &w, &y, NULL) == FLASHC_OK, "valid call failed: %s", flashc_last_error());
    CHECK(flashc_last_error()[0] == '\0', "message not cleared: %s", flashc_last_error());
}

int main(void) {
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
    check_weighted_sum_values();
    printf("test_capi: %d checks, %d failed (cpu isa %s, cuda %s)\n", checks, failures, flashc_cpu_isa(),
           cuda ? "available" : "unavailable");
    return failures ? 1 : 0;
}
