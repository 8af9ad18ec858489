/*
 * selftest.cpp — drives libflashc_cuda.so through its fc_cuda_module table
 * (dlopen, exactly as the core does) and compares every kernel with a
 * float64 CPU reference written here, on inputs rounded to the tested dtype.
 *
 *   flashc_cuda_selftest            all cases (about a minute on an H100)
 *   flashc_cuda_selftest --small    a few small cases (compute-sanitizer)
 *   flashc_cuda_selftest --bench    also time weighted_sum vs a device copy
 *                                   and the generic attention forward
 *   flashc_cuda_selftest --bench-wsum   the weighted_sum timings alone (no tests)
 * Module path: $FLASHC_CUDA_MODULE, else the one built next to this program.
 * Exit 0 = all passed, 1 = a failure, 77 = no usable GPU (skipped).
 * Every output is poisoned (NaN bytes) before a call, so an unwritten
 * element fails; the backward is run twice and must be bit-identical.
 */
#include "flashc_internal.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <vector>

static const fc_cuda_module *M;
static int g_fail = 0, g_pass = 0;

#define CK(call)                                                                      \
    do {                                                                              \
        flashc_status s_ = (call);                                                    \
        if (s_ != FLASHC_OK) {                                                        \
            fprintf(stderr, "%s:%d: %s -> %d: %s\n", __FILE__, __LINE__, #call, (int)s_, \
                    M->last_error());                                                 \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

/* ------------------------------------------------------------ dtypes */
static size_t dsize(int dt) { return dt == FLASHC_F64 ? 8 : dt == FLASHC_F32 ? 4 : 2; }
static const char *dname(int dt) {
    return dt == FLASHC_F64 ? "f64" : dt == FLASHC_F32 ? "f32" : dt == FLASHC_F16 ? "f16" : "bf16";
}
/* Rounds v to dt and stores it at p (host bytes). Returns the rounded value. */
static double put(int dt, void *p, double v) {
    switch (dt) {
    case FLASHC_F64: *(double *)p = v; return v;
    case FLASHC_F32: *(float *)p = (float)v; return (float)v;
    case FLASHC_F16: { uint16_t h = fc_f32_to_f16((float)v); *(uint16_t *)p = h; return fc_f16_to_f32(h); }
    default: { uint16_t h = fc_f32_to_bf16((float)v); *(uint16_t *)p = h; return fc_bf16_to_f32(h); }
    }
}
static double get(int dt, const void *p) {
    switch (dt) {
    case FLASHC_F64: return *(const double *)p;
    case FLASHC_F32: return *(const float *)p;
    case FLASHC_F16: return fc_f16_to_f32(*(const uint16_t *)p);
    default: return fc_bf16_to_f32(*(const uint16_t *)p);
    }
}

/* A strided device tensor: logical shape + strides (elements), a physical
 * buffer, and `base` = offset of logical element 0 inside it. */
struct Tensor {
    int dt = 0, nd = 0;
    int64_t shape[8] = {0}, str[8] = {0};
    int64_t phys = 0, base = 0; /* physical element count, offset of element 0 */
    void *dev = nullptr;
    std::vector<unsigned char> host; /* physical bytes */
    void *ptr() const { return (char *)dev + base * dsize(dt); }
    int64_t off(const int64_t *idx) const {
        int64_t o = base;
        for (int k = 0; k < nd; ++k) o += idx[k] * str[k];
        return o;
    }
};

/* Lays out a tensor: `perm` lists axes from outermost to innermost in memory;
 * `flip` reverses an axis (negative stride); `bcast` gives an axis stride 0
 * (stored extent 1); `pad` adds unused elements after the innermost axis. */
static Tensor make_tensor(int dt, int nd, const int64_t *shape, const int *perm, int flip = -1,
                          int bcast = -1, int pad = 0) {
    Tensor t;
    t.dt = dt;
    t.nd = nd;
    int64_t s = 1;
    for (int q = nd - 1; q >= 0; --q) {
        const int ax = perm[q];
        t.shape[ax] = shape[ax];
        const int64_t ext = ax == bcast ? 1 : shape[ax];
        t.str[ax] = ax == bcast ? 0 : s;
        s *= std::max<int64_t>(ext, 1) + (q == nd - 1 ? pad : 0);
    }
    t.phys = s;
    if (flip >= 0 && flip != bcast && shape[flip] > 0) {
        t.base += (shape[flip] - 1) * t.str[flip];
        t.str[flip] = -t.str[flip];
    }
    t.host.assign((size_t)t.phys * dsize(dt), 0xff); /* NaN poison */
    CK(M->malloc_(&t.dev, std::max<size_t>(t.host.size(), 1)));
    return t;
}
static void free_tensor(Tensor &t) { M->free_(t.dev); t.dev = nullptr; }
static void upload(Tensor &t) { CK(M->memcpy_(t.dev, t.host.data(), t.host.size(), FLASHC_MEMCPY_HOST_TO_DEVICE)); }
static void download(Tensor &t) { CK(M->memcpy_(t.host.data(), t.dev, t.host.size(), FLASHC_MEMCPY_DEVICE_TO_HOST)); }
static void poison(Tensor &t) { std::fill(t.host.begin(), t.host.end(), 0xff); upload(t); }
static double at(const Tensor &t, const int64_t *idx) { return get(t.dt, &t.host[t.off(idx) * dsize(t.dt)]); }

/* Fills every logical element with a random value (rounded to dtype);
 * returns the rounded values in logical row-major order. */
static std::vector<double> fill_random(Tensor &t, std::mt19937_64 &rng, double scale = 1.0) {
    int64_t n = 1;
    for (int k = 0; k < t.nd; ++k) n *= t.shape[k];
    std::vector<double> out((size_t)n);
    std::normal_distribution<double> nd(0.0, scale);
    int64_t idx[8];
    for (int64_t e = 0; e < n; ++e) {
        int64_t r = e;
        for (int k = t.nd - 1; k >= 0; --k) { idx[k] = r % t.shape[k]; r /= t.shape[k]; }
        const double v = nd(rng);
        /* with broadcast axes several logical elements share one physical: last write wins,
         * so re-read after the loop */
        put(t.dt, &t.host[t.off(idx) * dsize(t.dt)], v);
    }
    for (int64_t e = 0; e < n; ++e) {
        int64_t r = e;
        for (int k = t.nd - 1; k >= 0; --k) { idx[k] = r % t.shape[k]; r /= t.shape[k]; }
        out[e] = at(t, idx);
    }
    upload(t);
    return out;
}
static std::vector<double> read_logical(Tensor &t) {
    download(t);
    int64_t n = 1;
    for (int k = 0; k < t.nd; ++k) n *= t.shape[k];
    std::vector<double> out((size_t)n);
    int64_t idx[8];
    for (int64_t e = 0; e < n; ++e) {
        int64_t r = e;
        for (int k = t.nd - 1; k >= 0; --k) { idx[k] = r % t.shape[k]; r /= t.shape[k]; }
        out[e] = at(t, idx);
    }
    return out;
}

static double rel_err(const std::vector<double> &a, const std::vector<double> &ref, bool *nan) {
    double num = 0, den = 0;
    *nan = false;
    for (size_t i = 0; i < a.size(); ++i) {
        if (std::isnan(a[i]) || std::isinf(a[i])) { *nan = true; continue; }
        num += (a[i] - ref[i]) * (a[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void report(const std::string &name, const char *what, double err, double tol, bool nan) {
    const bool ok = !nan && err <= tol;
    if (ok) ++g_pass;
    else ++g_fail;
    if (!ok || getenv("SELFTEST_VERBOSE"))
        printf("%s %-60s %-6s err=%.3e tol=%.1e%s\n", ok ? "ok  " : "FAIL", name.c_str(), what, err, tol,
               nan ? " (NaN/inf/unwritten)" : "");
}

/* --------------------------------------------------------- attention */
struct AttnCase {
    int dt;
    int64_t B, Sq, Sk, Hq, Hkv, D;
    int causal;
    int64_t wl, wr, nsink;
    bool sinklog, lse_null, bhsd, flip, bcast;
};

static double attn_tol(int dt, bool bwd) {
    switch (dt) {
    case FLASHC_F64: return 1e-10;
    case FLASHC_F32: return bwd ? 2e-5 : 1e-5;
    case FLASHC_F16: return bwd ? 1e-2 : 5e-3;
    default: return bwd ? 5e-2 : 3e-2;
    }
}

/* mode "generic" forces the SIMT kernels; "auto" lets the dispatcher try
 * the tensor-core kernels first. */
static void run_attn(const AttnCase &c, std::mt19937_64 &rng, const char *mode) {
    setenv("FLASHC_CUDA_KERNEL", mode, 1);
    char nm[200];
    snprintf(nm, sizeof nm, "attn[%s] %s B%lld Sq%lld Sk%lld H%lld/%lld D%lld c%d w(%lld,%lld) ns%lld%s%s%s%s%s",
             mode, dname(c.dt), (long long)c.B, (long long)c.Sq, (long long)c.Sk, (long long)c.Hq,
             (long long)c.Hkv, (long long)c.D, c.causal, (long long)c.wl, (long long)c.wr,
             (long long)c.nsink, c.sinklog ? " sl" : "", c.lse_null ? " nolse" : "",
             c.bhsd ? " bhsd" : "", c.flip ? " flip" : "", c.bcast ? " bcast" : "");
    const std::string name = nm;
    const int dt = c.dt;
    const int perm_bshd[4] = {0, 1, 2, 3}, perm_bhsd[4] = {0, 2, 1, 3};
    const int *perm = c.bhsd ? perm_bhsd : perm_bshd;
    const int64_t qs[4] = {c.B, c.Sq, c.Hq, c.D}, ks[4] = {c.B, c.Sk, c.Hkv, c.D};
    Tensor q = make_tensor(dt, 4, qs, perm, c.flip ? 1 : -1);
    Tensor k = make_tensor(dt, 4, ks, perm, -1, c.bcast ? 0 : -1);
    Tensor v = make_tensor(dt, 4, ks, perm_bshd, c.flip ? 3 : -1, -1, 3);
    Tensor o = make_tensor(dt, 4, qs, perm);
    const int ldt = dt == FLASHC_F64 ? FLASHC_F64 : FLASHC_F32;
    const int64_t ls[3] = {c.B, c.Hq, c.Sq};
    const int lperm[3] = {0, 1, 2};
    Tensor lse = make_tensor(ldt, 3, ls, lperm);
    Tensor sl;
    std::vector<double> sinks;
    if (c.sinklog) {
        const int64_t ss[1] = {c.Hq};
        const int sp[1] = {0};
        sl = make_tensor(ldt, 1, ss, sp);
        sinks = fill_random(sl, rng, 1.0);
    }
    auto Q = fill_random(q, rng), K = fill_random(k, rng), V = fill_random(v, rng);

    fc_attn a;
    memset(&a, 0, sizeof a);
    a.dtype = dt;
    a.B = c.B; a.Sq = c.Sq; a.Sk = c.Sk; a.Hq = c.Hq; a.Hkv = c.Hkv; a.D = c.D;
    a.q = q.ptr(); a.k = k.ptr(); a.v = v.ptr(); a.o = o.ptr();
    a.lse = c.lse_null ? nullptr : lse.ptr();
    memcpy(a.sq, q.str, 32); memcpy(a.sk, k.str, 32); memcpy(a.sv, v.str, 32); memcpy(a.so, o.str, 32);
    memcpy(a.slse, lse.str, 24);
    a.scale = 1.0 / sqrt((double)c.D);
    a.wl = c.wl;
    a.wr = c.causal ? 0 : c.wr;
    a.n_sink = c.nsink;
    a.sink_logits = c.sinklog ? sl.ptr() : nullptr;
    a.ssink = 1;
    a.sdsink = 1;
    a.deterministic = 1;

    /* reference forward (float64) */
    const int64_t G = c.Hq / c.Hkv;
    auto QI = [&](int64_t b, int64_t i, int64_t h, int64_t d) { return ((b * c.Sq + i) * c.Hq + h) * c.D + d; };
    auto KI = [&](int64_t b, int64_t j, int64_t h, int64_t d) { return ((b * c.Sk + j) * c.Hkv + h) * c.D + d; };
    std::vector<double> Oref(Q.size(), 0.0), Lref((size_t)(c.B * c.Hq * c.Sq));
    std::vector<double> x((size_t)std::max<int64_t>(c.Sk, 1));
    for (int64_t b = 0; b < c.B; ++b)
        for (int64_t h = 0; h < c.Hq; ++h)
            for (int64_t i = 0; i < c.Sq; ++i) {
                int64_t se, lo, hi;
                { const fc_mask mk = fc_attn_mask(&a); fc_visible_keys(&mk, i, &se, &lo, &hi); }
                double m = -INFINITY;
                for (int64_t j = 0; j < c.Sk; ++j) {
                    if (!(j < se || (j >= lo && j < hi))) { x[j] = -INFINITY; continue; }
                    double s = 0;
                    for (int64_t d = 0; d < c.D; ++d) s += Q[QI(b, i, h, d)] * K[KI(b, j, h / G, d)];
                    x[j] = s * a.scale;
                    m = std::max(m, x[j]);
                }
                if (c.sinklog) m = std::max(m, sinks[h]);
                double l = 0;
                if (m > -INFINITY) {
                    for (int64_t j = 0; j < c.Sk; ++j) l += exp(x[j] - m);
                    if (c.sinklog) l += exp(sinks[h] - m);
                }
                for (int64_t d = 0; d < c.D; ++d) {
                    double acc = 0;
                    if (l > 0)
                        for (int64_t j = 0; j < c.Sk; ++j)
                            if (x[j] > -INFINITY) acc += exp(x[j] - m) * V[KI(b, j, h / G, d)];
                    Oref[QI(b, i, h, d)] = l > 0 ? acc / l : 0.0;
                }
                Lref[(b * c.Hq + h) * c.Sq + i] = l > 0 ? m + log(l) : -INFINITY;
            }

    poison(o);
    poison(lse);
    CK(M->attn_fwd(&a));
    CK(M->synchronize());
    auto Og = read_logical(o);
    bool nan;
    report(name, "O", rel_err(Og, Oref, &nan), attn_tol(dt, false), nan);
    if (!c.lse_null) {
        auto Lg = read_logical(lse);
        double maxe = 0;
        bool bad = false;
        for (size_t r = 0; r < Lg.size(); ++r) {
            if (std::isinf(Lref[r]) || std::isinf(Lg[r])) { bad |= Lg[r] != Lref[r]; continue; }
            if (std::isnan(Lg[r])) { bad = true; continue; }
            maxe = std::max(maxe, fabs(Lg[r] - Lref[r]));
        }
        report(name, "LSE", maxe, dt == FLASHC_F64 ? 1e-10 : 1e-4, bad);
    }

    /* backward, on the forward's own o and lse (lse recomputed when NULL) */
    if (c.lse_null) return;
    auto Lg = read_logical(lse);
    Tensor dO = make_tensor(dt, 4, qs, perm_bshd, -1, -1, 1);
    auto DO = fill_random(dO, rng);
    Tensor dq = make_tensor(dt, 4, qs, perm), dk = make_tensor(dt, 4, ks, perm_bshd),
           dv = make_tensor(dt, 4, ks, perm, c.flip ? 2 : -1);
    Tensor ds;
    if (c.sinklog) {
        const int64_t ss[1] = {c.Hq};
        const int sp[1] = {0};
        ds = make_tensor(ldt, 1, ss, sp);
    }
    a.dout = dO.ptr(); memcpy(a.sdo, dO.str, 32);
    a.dq = dq.ptr(); a.dk = dk.ptr(); a.dv = dv.ptr();
    memcpy(a.sdq, dq.str, 32); memcpy(a.sdk, dk.str, 32); memcpy(a.sdv, dv.str, 32);
    a.dsinks = c.sinklog ? ds.ptr() : nullptr;

    std::vector<double> dQr(Q.size(), 0.0), dKr(K.size(), 0.0), dVr(V.size(), 0.0), dSr(c.Hq, 0.0);
    std::vector<double> P((size_t)std::max<int64_t>(c.Sk, 1)), dP(P.size());
    for (int64_t b = 0; b < c.B; ++b)
        for (int64_t h = 0; h < c.Hq; ++h)
            for (int64_t i = 0; i < c.Sq; ++i) {
                int64_t se, lo, hi;
                { const fc_mask mk = fc_attn_mask(&a); fc_visible_keys(&mk, i, &se, &lo, &hi); }
                const double L = Lg[(b * c.Hq + h) * c.Sq + i];
                double Dl = 0;
                for (int64_t d = 0; d < c.D; ++d) Dl += DO[QI(b, i, h, d)] * Og[QI(b, i, h, d)];
                if (c.sinklog && L > -INFINITY) dSr[h] -= exp(sinks[h] - L) * Dl;
                for (int64_t j = 0; j < c.Sk; ++j) {
                    if (!(j < se || (j >= lo && j < hi))) continue;
                    double s = 0, dp = 0;
                    for (int64_t d = 0; d < c.D; ++d) {
                        s += Q[QI(b, i, h, d)] * K[KI(b, j, h / G, d)];
                        dp += DO[QI(b, i, h, d)] * V[KI(b, j, h / G, d)];
                    }
                    const double p = exp(s * a.scale - L), dsv = p * (dp - Dl);
                    for (int64_t d = 0; d < c.D; ++d) {
                        dVr[KI(b, j, h / G, d)] += p * DO[QI(b, i, h, d)];
                        dKr[KI(b, j, h / G, d)] += a.scale * dsv * Q[QI(b, i, h, d)];
                        dQr[QI(b, i, h, d)] += a.scale * dsv * K[KI(b, j, h / G, d)];
                    }
                }
            }
    /* The reference used k/v values as seen logically; with a broadcast k the
     * batches alias one physical row, so dK is per logical element: compare
     * logical (what flashc.h specifies: dk has k's shape). */
    std::vector<unsigned char> first_dq;
    for (int rep = 0; rep < 2; ++rep) {
        poison(dq); poison(dk); poison(dv);
        if (c.sinklog) poison(ds);
        CK(M->attn_bwd(&a));
        CK(M->synchronize());
        if (rep == 0) {
            auto g1 = read_logical(dq), g2 = read_logical(dk), g3 = read_logical(dv);
            report(name, "dQ", rel_err(g1, dQr, &nan), attn_tol(dt, true), nan);
            report(name, "dK", rel_err(g2, dKr, &nan), attn_tol(dt, true), nan);
            report(name, "dV", rel_err(g3, dVr, &nan), attn_tol(dt, true), nan);
            if (c.sinklog) {
                auto g4 = read_logical(ds);
                report(name, "dsinks", rel_err(g4, dSr, &nan), dt == FLASHC_F64 ? 1e-9 : 1e-3, nan);
            }
            first_dq = dq.host;
            first_dq.insert(first_dq.end(), dk.host.begin(), dk.host.end());
            first_dq.insert(first_dq.end(), dv.host.begin(), dv.host.end());
        } else {
            download(dq); download(dk); download(dv);
            std::vector<unsigned char> again = dq.host;
            again.insert(again.end(), dk.host.begin(), dk.host.end());
            again.insert(again.end(), dv.host.begin(), dv.host.end());
            report(name, "determ", again == first_dq ? 0.0 : 1.0, 0.0, false);
        }
    }
    free_tensor(q); free_tensor(k); free_tensor(v); free_tensor(o); free_tensor(lse);
    free_tensor(dO); free_tensor(dq); free_tensor(dk); free_tensor(dv);
    if (c.sinklog) { free_tensor(sl); free_tensor(ds); }
}

/* --------------------------------------------------- weighted row-sum */
struct WsCase {
    int dt;
    int nd;
    int64_t shape[4];
    int perm[4];
    int flip;      /* axis with a negative stride, or -1 */
    int pad;       /* extra elements after the innermost axis */
    int wstride;   /* w stored with this stride */
};

static void run_wsum(const WsCase &c, std::mt19937_64 &rng) {
    char nm[160];
    int n = snprintf(nm, sizeof nm, "wsum %s [", dname(c.dt));
    for (int k = 0; k < c.nd; ++k) n += snprintf(nm + n, sizeof nm - n, "%s%lld", k ? "," : "", (long long)c.shape[k]);
    n += snprintf(nm + n, sizeof nm - n, "] perm");
    for (int k = 0; k < c.nd; ++k) n += snprintf(nm + n, sizeof nm - n, "%d", c.perm[k]);
    snprintf(nm + n, sizeof nm - n, " flip%d pad%d ws%d", c.flip, c.pad, c.wstride);
    const std::string name = nm;
    const int dt = c.dt;
    Tensor x = make_tensor(dt, c.nd, c.shape, c.perm, c.flip, -1, c.pad);
    const int64_t D = c.shape[c.nd - 1];
    const int64_t wsh[1] = {D};
    const int p1[1] = {0};
    Tensor w = make_tensor(dt, 1, wsh, p1, -1, -1, 0);
    if (c.wstride > 1) { /* re-lay w with a stride */
        free_tensor(w);
        const int64_t w2[2] = {D, (int64_t)c.wstride};
        const int p2[2] = {0, 1};
        w = make_tensor(dt, 2, w2, p2);
        w.nd = 1;
        w.str[0] = c.wstride;
    }
    const int onds = c.nd - 1;
    int64_t ysh[4];
    int yperm[4];
    for (int k = 0; k < onds; ++k) { ysh[k] = c.shape[k]; yperm[k] = k; }
    Tensor y = make_tensor(dt, onds, ysh, yperm);
    if (onds == 0) { y.nd = 0; }
    auto X = fill_random(x, rng), W = fill_random(w, rng);
    int64_t R = 1;
    for (int k = 0; k < onds; ++k) R *= c.shape[k];

    fc_wsum p;
    memset(&p, 0, sizeof p);
    p.dtype = dt;
    p.nouter = onds;
    for (int k = 0; k < onds; ++k) { p.outer_shape[k] = c.shape[k]; p.x_ostr[k] = x.str[k]; p.y_ostr[k] = y.str[k]; }
    p.R = R;
    p.D = D;
    p.x = x.ptr(); p.x_dstr = x.str[c.nd - 1];
    p.w = w.ptr(); p.w_str = w.str[0];
    p.y = y.ptr();

    const double ueps = dt == FLASHC_F64 ? 1.1e-16 : dt == FLASHC_F32 ? 6e-8 : dt == FLASHC_F16 ? 4.9e-4 : 3.9e-3;
    const double aeps = dt == FLASHC_F64 ? 1.1e-16 : 6e-8;
    const double tiny_abs = dt == FLASHC_F16 ? 6e-8 : 0.0; /* f16 subnormal spacing 2^-24 */
    poison(y);
    CK(M->weighted_sum(&p));
    CK(M->synchronize());
    auto Yg = read_logical(y);
    double worst = 0;
    bool nan = false;
    for (int64_t r = 0; r < R; ++r) {
        double ref = 0, mag = 0;
        for (int64_t d = 0; d < D; ++d) { ref += X[r * D + d] * W[d]; mag += fabs(X[r * D + d] * W[d]); }
        if (std::isnan(Yg[r])) { nan = true; continue; }
        const double bound = 2 * ueps * fabs(ref) + 4 * sqrt((double)D + 1) * aeps * mag + tiny_abs + 1e-300;
        worst = std::max(worst, fabs(Yg[r] - ref) / bound);
    }
    report(name, "y", worst, 1.0, nan);

    /* backward */
    Tensor dy = make_tensor(dt, onds, ysh, yperm);
    if (onds == 0) dy.nd = 0;
    auto DY = fill_random(dy, rng);
    Tensor dx = make_tensor(dt, c.nd, c.shape, c.perm);
    Tensor dw = make_tensor(dt, 1, wsh, p1);
    p.y = nullptr;
    p.dy = dy.ptr();
    for (int k = 0; k < onds; ++k) { p.dy_ostr[k] = dy.str[k]; p.dx_ostr[k] = dx.str[k]; }
    p.dx = dx.ptr(); p.dx_dstr = dx.str[c.nd - 1];
    p.dw = dw.ptr(); p.dw_str = 1;
    std::vector<unsigned char> first;
    for (int rep = 0; rep < 2; ++rep) {
        poison(dx); poison(dw);
        CK(M->weighted_sum_bwd(&p));
        CK(M->synchronize());
        auto DX = read_logical(dx), DW = read_logical(dw);
        if (rep == 1) { report(name, "determ", dw.host == first ? 0.0 : 1.0, 0.0, false); break; }
        first = dw.host;
        double wx = 0, ww = 0;
        bool n1 = false, n2 = false;
        for (int64_t r = 0; r < R; ++r)
            for (int64_t d = 0; d < D; ++d) {
                const double ref = DY[r] * W[d], g = DX[r * D + d];
                if (std::isnan(g)) { n1 = true; continue; }
                wx = std::max(wx, fabs(g - ref) / (2 * ueps * fabs(ref) + tiny_abs + 1e-300));
            }
        for (int64_t d = 0; d < D; ++d) {
            double ref = 0, mag = 0;
            for (int64_t r = 0; r < R; ++r) { ref += DY[r] * X[r * D + d]; mag += fabs(DY[r] * X[r * D + d]); }
            if (std::isnan(DW[d])) { n2 = true; continue; }
            ww = std::max(ww, fabs(DW[d] - ref) / (2 * ueps * fabs(ref) + 4 * sqrt((double)R + 1) * aeps * mag + tiny_abs + 1e-300));
        }
        report(name, "dx", wx, 1.0, n1);
        report(name, "dw", ww, 1.0, n2);
    }
    free_tensor(x); free_tensor(w); free_tensor(y); free_tensor(dy); free_tensor(dx); free_tensor(dw);
}

/* ------------------------------------------------------------- bench */
static double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
template <class F> static double median_time(F f, int batch = 10, int reps = 7) {
    f(); CK(M->synchronize());
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
        const double t0 = now_s();
        for (int i = 0; i < batch; ++i) f();
        CK(M->synchronize());
        t.push_back((now_s() - t0) / batch);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

static bool g_wsum_only = false; /* --bench-wsum: the weighted-sum timings alone */
static void bench(FILE *json) {
    /* device copy ceiling: 1 GiB D2D, bytes read + written */
    const size_t bytes = (size_t)1 << 30;
    void *a, *b;
    CK(M->malloc_(&a, bytes));
    CK(M->malloc_(&b, bytes));
    {   /* random-ish fill so nothing runs on zeros */
        std::vector<uint32_t> h(bytes / 4);
        std::mt19937 r(1);
        /* every 16-bit half is 0x3c00 | 10 random bits: finite as f16, bf16,
         * f32 and f64 (never zero, never NaN) */
        for (auto &v : h) v = ((0x3c00u | (r() & 0x3ffu)) << 16) | 0x3c00u | (r() & 0x3ffu);
        CK(M->memcpy_(a, h.data(), bytes, FLASHC_MEMCPY_HOST_TO_DEVICE));
        CK(M->memcpy_(b, h.data(), bytes, FLASHC_MEMCPY_HOST_TO_DEVICE));
    }
    const double tc = median_time([&] { CK(M->memcpy_(b, a, bytes, FLASHC_MEMCPY_DEVICE_TO_DEVICE)); });
    const double copy_gbs = 2.0 * bytes / tc / 1e9;
    printf("BENCH device copy 1 GiB: %.1f GB/s\n", copy_gbs);
    fprintf(json, "{\"copy_gbs\": %.1f, \"wsum\": [", copy_gbs);
    struct { int dt; int64_t R, D; } shapes[] = {
        {FLASHC_F32, 65536, 4096}, {FLASHC_BF16, 65536, 8192}, {FLASHC_F16, 131072, 4096},
        {FLASHC_F32, 16 << 20, 16}, {FLASHC_F32, 4, 64 << 20}, {FLASHC_F64, 32768, 4096},
        {FLASHC_F32, 1 << 20, 128}, {FLASHC_BF16, 1 << 20, 128}, {FLASHC_BF16, 16 << 20, 16}};
    void *c; /* dx */
    CK(M->malloc_(&c, bytes));
    bool firstj = true;
    for (auto &s : shapes) {
        fc_wsum p;
        memset(&p, 0, sizeof p);
        p.dtype = s.dt; p.nouter = 1; p.outer_shape[0] = s.R; p.R = s.R; p.D = s.D;
        const size_t es = dsize(s.dt);
        if ((size_t)(s.R * s.D) * es > bytes) continue;
        p.x = a; p.x_ostr[0] = s.D; p.x_dstr = 1;
        p.w = b; p.w_str = 1;
        p.y = (char *)b + (size_t)s.D * es; p.y_ostr[0] = 1;
        const double t = median_time([&] { CK(M->weighted_sum(&p)); });
        const double gbs = ((double)(s.R * s.D + s.D + s.R) * es) / t / 1e9;
        fc_wsum q = p;
        q.y = nullptr; q.dy = p.y; q.dy_ostr[0] = 1; q.dw = (char *)b + (size_t)(s.D + s.R) * es; q.dw_str = 1;
        const double tb = median_time([&] { CK(M->weighted_sum_bwd(&q)); }, 5, 5);
        const double gbsb = ((double)(s.R * s.D + s.D + 2 * s.R) * es) / tb / 1e9;
        fc_wsum q2 = q; /* dx only: reads dy, w; writes dx */
        q2.dw = nullptr; q2.dx = c; q2.dx_ostr[0] = s.D; q2.dx_dstr = 1;
        const double tx = median_time([&] { CK(M->weighted_sum_bwd(&q2)); }, 5, 5);
        const double gbsx = ((double)(s.R * s.D + s.D + s.R) * es) / tx / 1e9;
        printf("BENCH wsum %-4s R=%-9lld D=%-9lld fwd %7.1f GB/s (%.0f%% of copy)  bwd(dw) %7.1f GB/s (%.0f%%)  bwd(dx) %7.1f GB/s (%.0f%%)\n",
               dname(s.dt), (long long)s.R, (long long)s.D, gbs, 100 * gbs / copy_gbs, gbsb,
               100 * gbsb / copy_gbs, gbsx, 100 * gbsx / copy_gbs);
        fprintf(json, "%s{\"dtype\": \"%s\", \"R\": %lld, \"D\": %lld, \"fwd_gbs\": %.1f, \"dw_gbs\": %.1f, \"dx_gbs\": %.1f}",
                firstj ? "" : ", ", dname(s.dt), (long long)s.R, (long long)s.D, gbs, gbsb, gbsx);
        firstj = false;
    }
    M->free_(c);
    if (g_wsum_only) {
        fprintf(json, "]}\n");
        M->free_(a);
        M->free_(b);
        return;
    }
    fprintf(json, "], \"attn_generic\": [");
    setenv("FLASHC_CUDA_KERNEL", "generic", 1);
    /* generic attention: bf16/f32, B·S = 16k tokens, Hq·D = 2048 */
    struct { int dt; int64_t S, D; int causal; } at[] = {
        {FLASHC_BF16, 2048, 128, 0}, {FLASHC_BF16, 2048, 128, 1}, {FLASHC_F32, 2048, 64, 0}, {FLASHC_BF16, 4096, 64, 1}};
    firstj = true;
    for (auto &s : at) {
        const int64_t B = 16384 / s.S, H = 2048 / s.D;
        const size_t es = dsize(s.dt), n = (size_t)(B * s.S * H * s.D);
        if (4 * n * es + (size_t)(B * H * s.S) * 4 > 2 * bytes) continue;
        fc_attn x;
        memset(&x, 0, sizeof x);
        x.dtype = s.dt; x.B = B; x.Sq = x.Sk = s.S; x.Hq = x.Hkv = H; x.D = s.D;
        const int64_t st[4] = {s.S * H * s.D, H * s.D, s.D, 1};
        x.q = a; x.k = (char *)a + n * es; x.v = b; x.o = (char *)b + n * es;
        x.lse = (char *)a + 2 * n * es;
        memcpy(x.sq, st, 32); memcpy(x.sk, st, 32); memcpy(x.sv, st, 32); memcpy(x.so, st, 32);
        x.slse[0] = H * s.S; x.slse[1] = s.S; x.slse[2] = 1;
        x.scale = 1 / sqrt((double)s.D); x.wl = -1; x.wr = s.causal ? 0 : -1; x.deterministic = 1;
        const double t = median_time([&] { CK(M->attn_fwd(&x)); }, 3, 3);
        const double fl = 4.0 * B * H * s.S * s.S * s.D * (s.causal ? 0.5 : 1.0);
        printf("BENCH attn_fwd %-4s S=%-5lld D=%-3lld causal=%d  %.2f ms  %.1f TFLOP/s\n", dname(s.dt),
               (long long)s.S, (long long)s.D, s.causal, t * 1e3, fl / t / 1e12);
        fprintf(json, "%s{\"dtype\": \"%s\", \"S\": %lld, \"D\": %lld, \"causal\": %d, \"ms\": %.3f, \"tflops\": %.2f}",
                firstj ? "" : ", ", dname(s.dt), (long long)s.S, (long long)s.D, s.causal, t * 1e3, fl / t / 1e12);
        firstj = false;
    }
    fprintf(json, "]}\n");
    M->free_(a);
    M->free_(b);
}

/* -------------------------------------------------------------- main */
int main(int argc, char **argv) {
    bool small = false, tiny = false, do_bench = false;
    const char *json_path = "selftest-bench.json";
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--small")) small = true;
        else if (!strcmp(argv[i], "--tiny")) tiny = small = true; /* racecheck: f32 + bf16, one case each */
        else if (!strcmp(argv[i], "--bench")) do_bench = true;
        else if (!strcmp(argv[i], "--bench-wsum")) do_bench = g_wsum_only = true; /* no tests */
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
    }
    const char *path = getenv("FLASHC_CUDA_MODULE");
#ifdef FLASHC_CUDA_MODULE_PATH
    if (!path) path = FLASHC_CUDA_MODULE_PATH;
#endif
    if (!path) path = "libflashc_cuda.so";
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) { printf("SKIP: dlopen %s: %s\n", path, dlerror()); return 77; }
    auto init = (fc_cuda_module_init_fn)dlsym(h, FC_CUDA_MODULE_INIT_SYMBOL);
    if (!init) { printf("FAIL: no %s in %s\n", FC_CUDA_MODULE_INIT_SYMBOL, path); return 1; }
    M = init();
    if (M->api_version != FC_CUDA_MODULE_API_VERSION || M->struct_size != sizeof(fc_cuda_module)) {
        printf("FAIL: module api %u size %u\n", M->api_version, M->struct_size);
        return 1;
    }
    if (M->probe() != FLASHC_OK) { printf("SKIP: %s\n", M->last_error()); return 77; }
    char dn[128];
    CK(M->device_name(0, dn, sizeof dn));
    printf("device: %s\n", dn);
    if (g_wsum_only) {
        FILE *j = fopen(json_path, "w");
        if (j) { bench(j); fclose(j); }
        return 0;
    }

    /* helpers: NULL free, pointer kinds, errors */
    {
        CK(M->free_(nullptr));
        int isdev = -1, x = 0;
        void *p;
        CK(M->malloc_(&p, 256));
        CK(M->pointer_is_device(p, &isdev));
        report("helpers", "isdev", isdev == 1 ? 0 : 1, 0, false);
        CK(M->pointer_is_device(&x, &isdev));
        report("helpers", "ishost", isdev == 0 ? 0 : 1, 0, false);
        void *huge;
        if (!small && !tiny) { /* compute-sanitizer reports the planned OOM as an error */
            const flashc_status s = M->malloc_(&huge, (size_t)1 << 50);
            report("helpers", "oom", s == FLASHC_ERR_OUT_OF_MEMORY && strstr(M->last_error(), "cudaMalloc") ? 0 : 1, 0, false);
        }
        CK(M->malloc_(&huge, 16)); /* the failed allocation left no sticky error */
        CK(M->free_(huge));
        CK(M->free_(p));
        /* fc_visible_keys (attn_mask.h) invariants on a sweep */
        int bad = 0;
        fc_attn a;
        memset(&a, 0, sizeof a);
        for (int64_t sq : {1, 7, 33}) for (int64_t sk : {0, 5, 40}) for (int64_t wl : {-1, 0, 3}) for (int64_t wr : {-1, 0, 2})
            for (int64_t ns : {0, 2}) for (int64_t i = 0; i < sq; ++i) {
                a.Sq = sq; a.Sk = sk; a.wl = wl; a.wr = wr; a.n_sink = ns;
                int64_t s, l, hh;
                { const fc_mask mk = fc_attn_mask(&a); fc_visible_keys(&mk, i, &s, &l, &hh); }
                bad += !(0 <= s && s <= l && l <= hh && hh <= sk);
            }
        report("helpers", "visrange", bad, 0, false);
    }

    std::mt19937_64 rng(12345);
    const int dts[4] = {FLASHC_F32, FLASHC_F16, FLASHC_BF16, FLASHC_F64};
    std::vector<AttnCase> ac;
    /* dt, B, Sq, Sk, Hq, Hkv, D, causal, wl, wr, nsink, sinklog, lse_null, bhsd, flip, bcast */
    for (int dt : dts) {
        if (tiny) {
            if (dt == FLASHC_F32 || dt == FLASHC_BF16)
                ac.push_back({dt, 1, 40, 72, 2, 1, 64, 1, -1, -1, 2, true, false, false, false, false});
            continue;
        }
        ac.push_back({dt, 2, 77, 77, 4, 2, 64, 0, -1, -1, 0, false, false, false, false, false});
        ac.push_back({dt, 2, 50, 40, 4, 2, 24, 1, -1, -1, 0, true, false, false, true, false});
        ac.push_back({dt, 1, 100, 130, 4, 1, 128, 1, -1, -1, 0, false, false, true, false, false});
        if (small) continue;
        ac.push_back({dt, 2, 130, 70, 6, 3, 40, 1, -1, -1, 0, true, false, false, true, false});
        ac.push_back({dt, 1, 150, 150, 2, 2, 256, 1, 20, -1, 3, false, false, false, false, false});
        ac.push_back({dt, 2, 64, 200, 2, 1, 7, 0, 16, 5, 4, true, false, true, false, true});
        ac.push_back({dt, 1, 1, 300, 8, 2, 96, 1, -1, -1, 0, false, false, false, false, false});
        ac.push_back({dt, 1, 90, 0, 2, 2, 32, 0, -1, -1, 0, true, false, false, false, false});
        ac.push_back({dt, 1, 0, 50, 2, 2, 32, 0, -1, -1, 0, true, false, false, false, false});
        ac.push_back({dt, 3, 50, 50, 2, 2, 200, 0, 0, 0, 0, false, true, false, false, false});
        ac.push_back({dt, 1, 120, 40, 3, 3, 1, 1, -1, -1, 0, true, false, false, true, false}); /* top rows masked */
    }
    if (!small) {
        /* a grid over 65535 blocks */
        ac.push_back({FLASHC_BF16, 512, 20, 16, 160, 32, 8, 0, -1, -1, 0, false, false, false, false, false});
        ac.push_back({FLASHC_F32, 1, 700, 900, 2, 1, 64, 1, 100, -1, 8, true, false, false, false, false});
        ac.push_back({FLASHC_F16, 1, 513, 513, 1, 1, 160, 0, 64, 64, 0, false, false, true, true, false});
    }
    for (auto &c : ac) {
        run_attn(c, rng, "generic");
        if (c.dt == FLASHC_F16 || c.dt == FLASHC_BF16) run_attn(c, rng, "auto");
    }

    std::vector<WsCase> wc;
    for (int dt : dts) {
        if (tiny && dt != FLASHC_F32 && dt != FLASHC_BF16) continue;
        wc.push_back({dt, 2, {333, 1000}, {0, 1}, -1, 0, 1});
        if (tiny) continue;
        wc.push_back({dt, 2, {64, 13}, {0, 1}, -1, 0, 1});
        if (small) continue;
        wc.push_back({dt, 2, {257, 300}, {1, 0}, -1, 0, 1});          /* transposed */
        wc.push_back({dt, 3, {5, 7, 129}, {1, 0, 2}, 2, 3, 2});       /* permuted outer, flipped D, w stride 2 */
        wc.push_back({dt, 1, {4099}, {0}, -1, 0, 1});                 /* 1-D x, 0-D y */
        wc.push_back({dt, 2, {3, 70001}, {0, 1}, -1, 1, 1});          /* split-D path */
        wc.push_back({dt, 2, {20000, 3}, {0, 1}, -1, 0, 1});
        wc.push_back({dt, 3, {4, 0, 8}, {0, 1, 2}, -1, 0, 1});        /* R = 0 */
        wc.push_back({dt, 2, {6, 0}, {0, 1}, -1, 0, 1});              /* D = 0 */
        /* contiguous fast paths (weighted_sum.cu): short rows of every
         * lane width, w in registers, long rows split along D, dw with
         * row chunks and with few rows */
        wc.push_back({dt, 2, {1001, 16}, {0, 1}, -1, 0, 1});
        wc.push_back({dt, 2, {777, 128}, {0, 1}, -1, 0, 1});
        wc.push_back({dt, 2, {300, 264}, {0, 1}, -1, 0, 1});
        wc.push_back({dt, 2, {3000, 512}, {0, 1}, -1, 0, 1});
        wc.push_back({dt, 2, {97, 8}, {0, 1}, -1, 0, 1});
        wc.push_back({dt, 2, {5, 40000}, {0, 1}, -1, 0, 1});
        wc.push_back({dt, 2, {20, 8192}, {0, 1}, -1, 0, 1});
        wc.push_back({dt, 3, {9, 300, 64}, {0, 1, 2}, -1, 0, 1});
    }
    for (auto &c : wc) run_wsum(c, rng);

    printf("selftest: %d passed, %d failed\n", g_pass, g_fail);
    if (do_bench) {
        FILE *j = fopen(json_path, "w");
        if (j) { bench(j); fclose(j); }
    }
    return g_fail ? 1 : 0;
}
