/*
 * test_attn_tc.cu — stand-alone harness of the mma.sync attention forward
 * (src/cuda/attn_fwd_tc.cu), for use before/alongside the full module and
 * the pytest suite. Not built by CMake. The parameter struct comes from the
 * module's own fcc_attn_make (attn_dispatch.cu); the other kernels'
 * entries are stubbed below. Build (from the repo root):
 *
 *   nvcc -O3 -std=c++17 -DFC_TC_EXPERIMENTS -gencode arch=compute_90,code=sm_90 \
 *        -Iinclude -Isrc -Isrc/cuda tests/cuda_harness/test_attn_tc.cu \
 *        src/cuda/attn_fwd_tc.cu src/cuda/attn_dispatch.cu -o test_attn_tc
 *   ./test_attn_tc check      # sweep vs a float64 CPU reference
 *   ./test_attn_tc perf       # TFLOP/s on the standard shapes (PERF.md)
 *
 * check: fresh random inputs per case; outputs (and the gaps between strided
 * rows) poisoned with NaN first; every logical element must be written and
 * finite, every gap left untouched; O by relative L2 error, L by abs error.
 * The float64 reference writes the score pipeline of flashc.h out itself
 * (scale, softcap, ALiBi), independently of src/common/attn_score.h.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "flashc_internal.h"
#include "attn_params.cuh"

/* -------- the module's error helpers (module.cu), minimal copies here -------- */
static thread_local char g_msg[1024];
flashc_status fcc_error(flashc_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_msg, sizeof g_msg, fmt, ap);
    va_end(ap);
    return st;
}
flashc_status fcc_cuda_error(cudaError_t e, const char *file, int line, const char *what) {
    return fcc_error(FLASHC_ERR_CUDA, "%s:%d: %s: %s", file, line, what, cudaGetErrorString(e));
}
flashc_status fcc_set_smem(const void *kernel, size_t bytes, const char *name) {
    if (bytes <= 48 * 1024) return FLASHC_OK;
    FCC_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    return FLASHC_OK;
}
namespace fctc { flashc_status fc_tc_fwd_variant(const fcc_attn &p, int v); }

/* attn_dispatch.cu's references to the other kernels (not linked here). */
bool fcc_fwd_wgmma_supports(const fcc_attn &) { return false; }
bool fcc_bwd_mma_supports(const fcc_attn &) { return false; }
flashc_status fcc_fwd_wgmma_run(const fcc_attn &) { return FLASHC_ERR_UNSUPPORTED; }
flashc_status fcc_fwd_generic_run(const fcc_attn &) { return FLASHC_ERR_UNSUPPORTED; }
flashc_status fcc_bwd_mma_run(const fcc_attn &) { return FLASHC_ERR_UNSUPPORTED; }
flashc_status fcc_bwd_generic_run(const fcc_attn &) { return FLASHC_ERR_UNSUPPORTED; }

/* The mma.sync forward on a (variant < 0: the module's tile shapes). */
static flashc_status tc_fwd(const fc_attn &a, int variant) {
    if (a.Sq == 0) return FLASHC_OK;
    fcc_attn p;
    const flashc_status st = fcc_attn_make(&a, false, &p);
    if (st != FLASHC_OK) return st;
    if (!fcc_fwd_mma_supports(p)) return fcc_error(FLASHC_ERR_UNSUPPORTED, "mma.sync forward: case not supported");
    return variant < 0 ? fcc_fwd_mma_run(p) : fctc::fc_tc_fwd_variant(p, variant);
}

#define CK(x)                                                                       \
    do {                                                                            \
        cudaError_t e_ = (x);                                                       \
        if (e_ != cudaSuccess) {                                                    \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(2);                                                                \
        }                                                                           \
    } while (0)

static uint16_t f2h(int dt, float x) {
    if (dt == FLASHC_BF16) {
        __nv_bfloat16 b = __float2bfloat16_rn(x);
        return *reinterpret_cast<uint16_t *>(&b);
    }
    __half h = __float2half_rn(x);
    return *reinterpret_cast<uint16_t *>(&h);
}
static float h2f(int dt, uint16_t u) {
    if (dt == FLASHC_BF16) return fc_bf16_to_f32(u);
    __half h = *reinterpret_cast<__half *>(&u);
    return __half2float(h);
}
static bool is_nan16(int dt, uint16_t u) { return std::isnan(h2f(dt, u)); }

struct Case {
    int dt;
    int64_t B, Sq, Sk, Hq, Hkv, D;
    int causal;
    int64_t wl, wr, nsink;
    int sinklog;
    int layout; /* 0 BSHD, 1 BHSD, 2 padded head pitch, 3 odd pitch (no 16B path), 4 K/V batch-broadcast */
    float amp;
    const char *name;
    float softcap = 0.f; /* 0 = off */
    int alibi = 0;       /* 0 off, 1 slopes [Hq], 2 slopes [B, Hq] */
    int negscale = 0;    /* softmax scale −1/√D */
};

/* A strided 4-D tensor [B, S, H, D] on host and device. */
struct T4 {
    int64_t shape[4], str[4], n;
    std::vector<uint16_t> h;
    void *d = nullptr;
};
static void make_layout(T4 &t, int64_t B, int64_t S, int64_t H, int64_t D, int layout, bool bcast_b) {
    t.shape[0] = B; t.shape[1] = S; t.shape[2] = H; t.shape[3] = D;
    int64_t P = D;
    if (layout == 2) P = ((D + 7) / 8) * 8 + 8;
    if (layout == 3) P = D + 3;
    if (layout == 1) { t.str[3] = 1; t.str[1] = P; t.str[2] = S * P; t.str[0] = H * S * P; }
    else { t.str[3] = 1; t.str[2] = P; t.str[1] = H * P; t.str[0] = S * H * P; }
    if (bcast_b) t.str[0] = 0;
    t.n = 1;
    for (int i = 0; i < 4; ++i) t.n += (t.shape[i] - 1) * t.str[i];
    if (S == 0) t.n = 1;
}
static int64_t off(const T4 &t, int64_t b, int64_t s, int64_t h, int64_t d) {
    return b * t.str[0] + s * t.str[1] + h * t.str[2] + d * t.str[3];
}

static std::mt19937_64 rng(12345);

static bool run_case(const Case &c, int variant, double *err_o, double *err_l) {
    const int dt = c.dt;
    T4 q, k, v, o;
    make_layout(q, c.B, c.Sq, c.Hq, c.D, c.layout == 4 ? 0 : c.layout, false);
    make_layout(k, c.B, c.Sk, c.Hkv, c.D, c.layout == 4 ? 0 : c.layout, c.layout == 4);
    make_layout(v, c.B, c.Sk, c.Hkv, c.D, c.layout == 4 ? 0 : c.layout, c.layout == 4);
    make_layout(o, c.B, c.Sq, c.Hq, c.D, c.layout == 4 ? 0 : c.layout, false);
    std::uniform_real_distribution<float> U(-c.amp, c.amp);
    for (T4 *t : {&q, &k, &v}) {
        t->h.resize(t->n);
        for (auto &x : t->h) x = f2h(dt, U(rng));
    }
    o.h.assign(o.n, 0xFFFF);
    /* lse [B, Hq, Sq]; layout 1 stores it as [B, Sq, Hq] */
    int64_t sl[3];
    if (c.layout == 1) { sl[0] = c.Sq * c.Hq; sl[1] = 1; sl[2] = c.Hq; }
    else { sl[0] = c.Hq * c.Sq; sl[1] = c.Sq; sl[2] = 1; }
    const int64_t nl = std::max<int64_t>(1, c.B * c.Hq * c.Sq);
    std::vector<float> lse(nl, NAN);
    std::vector<float> sinks(c.Hq);
    for (auto &s : sinks) s = std::uniform_real_distribution<float>(-2.f, 3.f)(rng);
    /* ALiBi slopes, [B, Hq] (stride 0 on b for [Hq]); sink logits strided by 2. */
    std::vector<float> slopes(c.B * c.Hq);
    for (auto &s : slopes) s = std::uniform_real_distribution<float>(0.f, 0.5f)(rng);
    std::vector<float> sinks2(2 * c.Hq);
    for (int64_t h = 0; h < c.Hq; ++h) sinks2[2 * h] = sinks[h];

    for (T4 *t : {&q, &k, &v, &o}) {
        CK(cudaMalloc(&t->d, t->n * 2 + 16));
        CK(cudaMemcpy(t->d, t->h.data(), t->n * 2, cudaMemcpyHostToDevice));
    }
    float *dl, *ds, *dal;
    CK(cudaMalloc(&dl, nl * 4));
    CK(cudaMalloc(&ds, 2 * c.Hq * 4));
    CK(cudaMalloc(&dal, c.B * c.Hq * 4));
    CK(cudaMemcpy(dl, lse.data(), nl * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(ds, sinks2.data(), 2 * c.Hq * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dal, slopes.data(), c.B * c.Hq * 4, cudaMemcpyHostToDevice));

    fc_attn a;
    memset(&a, 0, sizeof a);
    a.dtype = dt;
    a.B = c.B; a.Sq = c.Sq; a.Sk = c.Sk; a.Hq = c.Hq; a.Hkv = c.Hkv; a.D = c.D;
    a.q = q.d; a.k = k.d; a.v = v.d; a.o = o.d; a.lse = dl;
    memcpy(a.sq, q.str, 32); memcpy(a.sk, k.str, 32); memcpy(a.sv, v.str, 32); memcpy(a.so, o.str, 32);
    memcpy(a.slse, sl, 24);
    a.scale = (c.negscale ? -1.0 : 1.0) / sqrt((double)c.D);
    a.wl = c.wl;
    a.wr = c.causal ? 0 : c.wr;
    a.n_sink = c.nsink;
    a.sink_logits = c.sinklog ? ds : nullptr;
    a.ssink = 2;
    a.softcap = c.softcap;
    a.alibi = c.alibi ? dal : nullptr;
    a.salibi[0] = c.alibi == 2 ? c.Hq : 0;
    a.salibi[1] = 1;
    a.deterministic = 1;
    const fc_mask mask = fc_attn_mask(&a);
    flashc_status st = tc_fwd(a, variant);
    if (st != FLASHC_OK) {
        printf("  status %d: %s\n", (int)st, g_msg);
        return false;
    }
    CK(cudaDeviceSynchronize());
    CK(cudaGetLastError());
    CK(cudaMemcpy(o.h.data(), o.d, o.n * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(lse.data(), dl, nl * 4, cudaMemcpyDeviceToHost));

    /* float64 reference from the rounded inputs */
    std::vector<char> logical(o.n, 0);
    double num = 0, den = 0, lerr = 0;
    bool ok = true;
    int64_t nbad = 0;
    std::vector<double> x(std::max<int64_t>(1, c.Sk)), acc(c.D);
    for (int64_t b = 0; b < c.B; ++b)
        for (int64_t h = 0; h < c.Hq; ++h) {
            const int64_t hk = h / (c.Hq / c.Hkv);
            for (int64_t i = 0; i < c.Sq; ++i) {
                double m = -INFINITY;
                auto vis = [&](int64_t j) { return fc_visible(&mask, i, j) != 0; };
                const double slope = c.alibi == 2 ? slopes[b * c.Hq + h] : c.alibi == 1 ? slopes[h] : 0.0;
                for (int64_t j = 0; j < c.Sk; ++j) {
                    if (!vis(j)) continue;
                    double s = 0;
                    for (int64_t d = 0; d < c.D; ++d)
                        s += (double)h2f(dt, q.h[off(q, b, i, h, d)]) * h2f(dt, k.h[off(k, b, j, hk, d)]);
                    /* flashc.h, "Scores": scale, softcap, ALiBi (bottom-right aligned). */
                    s *= a.scale;
                    if (c.softcap > 0) s = c.softcap * tanh(s / c.softcap);
                    s -= slope * fabs((double)(i + c.Sk - c.Sq - j));
                    x[j] = s;
                    m = std::max(m, x[j]);
                }
                const double sk = c.sinklog ? sinks[h] : -INFINITY;
                const double mm = std::max(m, sk);
                double l = 0;
                std::fill(acc.begin(), acc.end(), 0.0);
                if (mm != -INFINITY) {
                    for (int64_t j = 0; j < c.Sk; ++j) {
                        if (!vis(j)) continue;
                        const double p = exp(x[j] - mm);
                        l += p;
                        for (int64_t d = 0; d < c.D; ++d) acc[d] += p * h2f(dt, v.h[off(v, b, j, hk, d)]);
                    }
                    if (c.sinklog) l += exp(sk - mm);
                }
                const double L = (mm == -INFINITY) ? -INFINITY : mm + log(l);
                for (int64_t d = 0; d < c.D; ++d) {
                    const double r = l > 0 ? acc[d] / l : 0.0;
                    const int64_t oo = off(o, b, i, h, d);
                    logical[oo] = 1;
                    const uint16_t u = o.h[oo];
                    if (is_nan16(dt, u)) { ok = false; ++nbad; continue; }
                    const double e = h2f(dt, u) - r;
                    num += e * e;
                    den += r * r;
                }
                const float got = lse[b * sl[0] + h * sl[1] + i * sl[2]];
                if (L == -INFINITY) {
                    if (!(got == -INFINITY)) { ok = false; ++nbad; }
                } else if (!std::isfinite(got)) {
                    ok = false; ++nbad;
                } else {
                    lerr = std::max(lerr, fabs(got - L) / std::max(1.0, fabs(L)));
                }
            }
        }
    int64_t touched = 0;
    for (int64_t i = 0; i < o.n; ++i)
        if (!logical[i] && o.h[i] != 0xFFFF) ++touched;
    if (touched) { ok = false; printf("  %lld gap elements written\n", (long long)touched); }
    if (nbad) printf("  %lld NaN/unwritten or wrong-inf elements\n", (long long)nbad);
    *err_o = den > 0 ? sqrt(num / den) : sqrt(num);
    *err_l = lerr;
    const double tol_o = dt == FLASHC_BF16 ? 1e-2 : 2.5e-3;
    if (!(*err_o <= tol_o) || !(*err_l <= 2e-3)) ok = false;
    for (T4 *t : {&q, &k, &v, &o}) cudaFree(t->d);
    cudaFree(dl);
    cudaFree(ds);
    cudaFree(dal);
    return ok;
}

static int check(int variant) {
    std::vector<Case> cs;
    const int64_t Ds[] = {1, 40, 59, 64, 80, 128, 200, 256};
    for (int dt : {FLASHC_BF16, FLASHC_F16}) {
        int idx = 0;
        for (int64_t D : Ds) {
            ++idx;
            /* plain, causal with Sq != Sk, GQA, layouts cycling */
            cs.push_back({dt, 2, 77, 131, 4, 2, D, 0, -1, -1, 0, 0, idx % 5, 1.f, "plain GQA"});
            cs.push_back({dt, 1, 150, 150, 2, 1, D, 1, -1, -1, 0, 0, (idx + 1) % 5, 1.5f, "causal"});
            cs.push_back({dt, 2, 1, 300, 4, 1, D, 1, -1, -1, 0, 1, (idx + 2) % 5, 1.f, "decode Sq=1 MQA sinklog"});
            cs.push_back({dt, 1, 200, 70, 3, 3, D, 1, -1, -1, 0, idx & 1, (idx + 3) % 5, 1.f, "causal Sq>Sk (masked rows)"});
            cs.push_back({dt, 1, 300, 300, 2, 2, D, 0, 16, 8, 4, 1, (idx + 4) % 5, 2.f, "window(16,8)+4 sinks+sinklog"});
        }
        cs.push_back({dt, 1, 513, 513, 4, 2, 64, 1, 32, -1, 3, 1, 0, 1.f, "causal SWA 32 + 3 sinks + sinklog"});
        cs.push_back({dt, 2, 100, 260, 2, 1, 128, 0, -1, 5, 0, 0, 1, 1.f, "right window only"});
        cs.push_back({dt, 2, 37, 0, 2, 1, 64, 0, -1, -1, 0, 1, 0, 1.f, "Sk=0 sinklog"});
        cs.push_back({dt, 2, 37, 0, 2, 1, 64, 0, -1, -1, 0, 0, 0, 1.f, "Sk=0"});
        cs.push_back({dt, 1, 1024, 1024, 2, 2, 128, 1, -1, -1, 0, 0, 0, 1.f, "causal 1k"});
        cs.push_back({dt, 1, 1000, 1000, 2, 1, 64, 0, -1, -1, 0, 0, 0, 4.f, "large logits"});
        cs.push_back({dt, 1, 2000, 2000, 1, 1, 64, 1, 10, -1, 0, 0, 2, 1.f, "causal SWA 10 (tile skipping)"});
        cs.push_back({dt, 1, 400, 400, 2, 2, 96, 0, 5, 3, 100, 1, 3, 1.f, "100 sinks, window (5,3)"});
        cs.push_back({dt, 1, 64, 64, 2, 2, 32, 0, 0, 0, 0, 0, 0, 1.f, "window (0,0): diagonal only"});
        cs.push_back({dt, 64, 16, 16, 1100, 1100, 32, 0, -1, -1, 0, 0, 0, 1.f, "B*H = 70400 blocks"});
        cs.push_back({dt, 3, 129, 257, 8, 2, 160, 1, 40, -1, 2, 1, 4, 1.f, "D=160 bcast K/V causal SWA"});
        cs.push_back({dt, 2, 65, 65, 2, 2, 224, 0, -1, -1, 0, 0, 2, 1.f, "D=224 padded"});
        /* score modifiers (the MOD instantiations) */
        for (int64_t D : {40, 64, 128, 256}) {
            cs.push_back({dt, 2, 150, 150, 4, 2, D, 1, -1, -1, 0, 0, 0, 3.f, "causal softcap 5", 5.f});
            cs.push_back({dt, 2, 77, 131, 4, 2, D, 0, -1, -1, 0, 1, 1, 1.f, "ALiBi [Hq] Sq<Sk sinklog", 0.f, 1});
            cs.push_back({dt, 2, 200, 70, 3, 3, D, 1, -1, -1, 0, 0, 3, 2.f, "causal Sq>Sk softcap+ALiBi [B,Hq]", 8.f, 2});
            cs.push_back({dt, 1, 300, 300, 2, 2, D, 0, 16, 8, 4, 1, 4, 2.f, "window+sinks+sinklog softcap+ALiBi", 3.f, 2});
            cs.push_back({dt, 1, 129, 257, 2, 1, D, 0, -1, -1, 0, 0, 0, 1.f, "negative scale (modifier path)", 0.f, 0, 1});
        }
    }
    int fails = 0;
    for (const Case &c : cs) {
        if (variant >= 0 && c.D > 128) continue; /* variants exist for HD 64 / 128 only */
        double eo, el;
        const bool ok = run_case(c, variant, &eo, &el);
        printf("%s %-4s B=%lld Sq=%lld Sk=%lld Hq=%lld Hkv=%lld D=%lld c=%d w=(%lld,%lld) sink=%lld sl=%d lay=%d | "
               "errO %.2e errL %.2e  %s\n",
               ok ? "ok  " : "FAIL", c.dt == FLASHC_BF16 ? "bf16" : "f16", (long long)c.B, (long long)c.Sq,
               (long long)c.Sk, (long long)c.Hq, (long long)c.Hkv, (long long)c.D, c.causal, (long long)c.wl,
               (long long)c.wr, (long long)c.nsink, c.sinklog, c.layout, eo, el, c.name);
        fails += !ok;
    }
    printf("check variant %d: %d / %zu failed\n", variant, fails, cs.size());
    return fails;
}

/* Median ms of `reps` launches. */
static double time_fwd(fc_attn &a, int variant, int reps) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; ++i)
        if (tc_fwd(a, variant) != FLASHC_OK) {
            printf("launch failed: %s\n", g_msg);
            return NAN;
        }
    std::vector<float> ts;
    for (int r = 0; r < reps; ++r) {
        CK(cudaEventRecord(e0));
        tc_fwd(a, variant);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        ts.push_back(ms);
    }
    CK(cudaGetLastError());
    std::sort(ts.begin(), ts.end());
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return ts[ts.size() / 2];
}

static void perf(const char *json) {
    FILE *jf = json ? fopen(json, "w") : nullptr;
    if (jf) fprintf(jf, "[\n");
    bool first = true;
    const int64_t tokens = 16384, width = 2048;
    void *q, *k, *v, *o;
    float *l;
    const size_t n = (size_t)tokens * width;
    CK(cudaMalloc(&q, n * 2)); CK(cudaMalloc(&k, n * 2)); CK(cudaMalloc(&v, n * 2)); CK(cudaMalloc(&o, n * 2));
    CK(cudaMalloc(&l, tokens * (width / 64) * 4));
    float *slopes; /* ALiBi slopes [H] (H ≤ width / 32) */
    CK(cudaMalloc(&slopes, (width / 32) * 4));
    {
        std::vector<float> hs(width / 32);
        for (size_t i = 0; i < hs.size(); ++i) hs[i] = exp2f(-8.f * (float)(i + 1) / (float)hs.size());
        CK(cudaMemcpy(slopes, hs.data(), hs.size() * 4, cudaMemcpyHostToDevice));
    }
    {
        std::vector<uint16_t> hbuf(n);
        std::uniform_real_distribution<float> U(-1.f, 1.f);
        for (void *p : {q, k, v}) {
            for (auto &x : hbuf) x = f2h(FLASHC_BF16, U(rng));
            CK(cudaMemcpy(p, hbuf.data(), n * 2, cudaMemcpyHostToDevice));
        }
    }
    auto one = [&](int dt, int64_t S, int64_t D, int causal, int variant, float softcap = 0.f, int alibi = 0) {
        const int64_t B = tokens / S, H = width / D;
        fc_attn a;
        memset(&a, 0, sizeof a);
        a.dtype = dt; a.B = B; a.Sq = S; a.Sk = S; a.Hq = H; a.Hkv = H; a.D = D;
        a.q = q; a.k = k; a.v = v; a.o = o; a.lse = l;
        int64_t st[4] = {S * H * D, H * D, D, 1};
        memcpy(a.sq, st, 32); memcpy(a.sk, st, 32); memcpy(a.sv, st, 32); memcpy(a.so, st, 32);
        a.slse[0] = H * S; a.slse[1] = S; a.slse[2] = 1;
        a.scale = 1.0 / sqrt((double)D);
        a.wl = -1; a.wr = causal ? 0 : -1;
        a.softcap = softcap;
        a.alibi = alibi ? slopes : nullptr;
        a.salibi[0] = 0; a.salibi[1] = 1;
        const double ms = time_fwd(a, variant, 30);
        const double fl = 4.0 * B * H * S * S * D / (causal ? 2 : 1);
        const double tf = fl / (ms * 1e-3) / 1e12;
        printf("fwd %-4s S=%5lld D=%3lld causal=%d variant=%2d softcap=%g alibi=%d : %8.3f ms %7.1f TFLOP/s\n",
               dt == FLASHC_BF16 ? "bf16" : "f16", (long long)S, (long long)D, causal, variant, softcap, alibi, ms, tf);
        if (jf) {
            fprintf(jf, "%s{\"op\":\"fwd\",\"dtype\":\"%s\",\"S\":%lld,\"D\":%lld,\"causal\":%d,\"variant\":%d,\"softcap\":%g,\"alibi\":%d,\"ms\":%.5f,\"tflops\":%.2f}",
                    first ? "" : ",\n", dt == FLASHC_BF16 ? "bf16" : "f16", (long long)S, (long long)D, causal, variant, softcap, alibi, ms, tf);
            first = false;
        }
    };
    /* tile-shape variants first (bf16, 4k) */
    for (int D : {64, 128})
        for (int c : {0, 1})
            for (int vv = 0; vv <= 6; ++vv) one(FLASHC_BF16, 4096, D, c, vv);
    const int64_t Ss[] = {512, 1024, 2048, 4096, 8192, 16384};
    for (int dt : {FLASHC_BF16, FLASHC_F16})
        for (int D : {64, 128})
            for (int c : {0, 1})
                for (int64_t S : Ss) {
                    if (dt == FLASHC_F16 && S != 4096) continue;
                    one(dt, S, D, c, -1);
                }
    one(FLASHC_BF16, 4096, 256, 0, -1);
    one(FLASHC_BF16, 4096, 256, 1, -1);
    /* score modifiers next to the plain rows above (target: softcap ≤ 10 % slower) */
    for (int D : {64, 128})
        for (int c : {0, 1}) {
            one(FLASHC_BF16, 4096, D, c, -1, 30.f, 0);
            one(FLASHC_BF16, 4096, D, c, -1, 0.f, 1);
            one(FLASHC_BF16, 4096, D, c, -1, 30.f, 1);
        }
    if (jf) { fprintf(jf, "\n]\n"); fclose(jf); }
    cudaFree(q); cudaFree(k); cudaFree(v); cudaFree(o); cudaFree(l); cudaFree(slopes);
}

int main(int argc, char **argv) {
    const std::string mode = argc > 1 ? argv[1] : "check";
    if (mode == "check") {
        return check(-1) ? 1 : 0;
    }
    if (mode == "checkv") return check(atoi(argv[2])) ? 1 : 0;
    if (mode == "perf") { perf(argc > 2 ? argv[2] : nullptr); return 0; }
    fprintf(stderr, "usage: %s check|checkv N|perf [json]\n", argv[0]);
    return 2;
}
