/*
 * selftest.cpp — drives libflashc_cuda.so through its fc_cuda_module table
 * (dlopen, exactly as the core does) and compares every kernel with a
 * float64 CPU reference written here, on inputs rounded to the tested dtype.
 *
 *   flashc_cuda_selftest            all cases (about a minute on an H100)
 *   flashc_cuda_selftest --small    a few small cases (compute-sanitizer),
 *                                   ragged batches and KV caches included
 *   flashc_cuda_selftest --tiny     fewer still (racecheck)
 *   flashc_cuda_selftest --sanitize --small plus shapes that take the
 *                                   tensor-core, wgmma, split-KV decode and
 *                                   ragged kernels through partial tiles,
 *                                   masks, modifiers and GQA (run_sanitize:
 *                                   memcheck, initcheck); with --tiny: --tiny
 *                                   plus those at racecheck's scale
 *   flashc_cuda_selftest --bench    also time weighted_sum vs a device copy,
 *                                   the generic attention forward and the
 *                                   split-KV decode (issue 9's shapes) vs a copy
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
static bool g_one_run = false; /* racecheck's scale (run_sanitize): no second, bit-identical run */

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

/* report() of rel_err(got, ref): the NaN flag is read after rel_err set it
 * (as arguments of one call, their order would be unspecified). */
static void report_rel(const std::string &name, const char *what, const std::vector<double> &got,
                       const std::vector<double> &ref, double tol) {
    bool nan = false;
    const double err = rel_err(got, ref, &nan);
    report(name, what, err, tol, nan);
}

/* A device copy of an int32 host array (index tensors). */
static int32_t *dev_i32(const std::vector<int32_t> &h) {
    void *p;
    CK(M->malloc_(&p, std::max<size_t>(h.size() * 4, 4)));
    if (!h.empty()) CK(M->memcpy_(p, h.data(), h.size() * 4, FLASHC_MEMCPY_HOST_TO_DEVICE));
    return (int32_t *)p;
}
/* NaN (0xff bytes) over logical elements [i0, i1) of axis 1 at index `row` of axis 0 of a 4-D tensor. */
static void poison_rows(Tensor &t, int64_t row, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
        for (int64_t h = 0; h < t.shape[2]; ++h)
            for (int64_t d = 0; d < t.shape[3]; ++d) {
                const int64_t idx[4] = {row, i, h, d};
                memset(&t.host[t.off(idx) * dsize(t.dt)], 0xff, dsize(t.dt));
            }
}

/* --------------------------------------------------------- attention */
/* The float64 reference of one sequence (below, with the ragged tests):
 * the options of a sequence; slopes: its [Hq] ALiBi slopes or NULL; sinks
 * [Hq] or NULL. */
struct RefSeq {
    double scale, softcap;
    int64_t wl, wr, nsink, Hq, Hkv, D;
    const double *sinks, *slopes;
};
static void ref_seq_fwd(const RefSeq &r, int64_t Sq, int64_t Sk, const double *Q, const double *K, const double *V,
                        double *O, double *L);
static void ref_seq_bwd(const RefSeq &r, int64_t Sq, int64_t Sk, const double *Q, const double *K, const double *V,
                        const double *dO, const double *O, const double *L, double *dQ, double *dK, double *dV,
                        double *dS);
static double lse_err(const std::vector<double> &Lg, const std::vector<double> &Lr, bool *bad);

struct AttnCase {
    int dt;
    int64_t B, Sq, Sk, Hq, Hkv, D;
    int causal;
    int64_t wl, wr, nsink;
    bool sinklog, lse_null, bhsd, flip, bcast;
    double softcap = 0;  /* > 0: softcap */
    bool alibi = false;  /* [B, Hq] ALiBi slopes */
    int det = 1;         /* params.deterministic (0: the atomic dQ path where it applies) */
    bool vpad = true;    /* v rows padded by 3, dout's by 1 (false: 16-byte rows everywhere: the wgmma
                          * forward, the vectorised loads of the mma.sync kernels) */
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
 * the tensor-core kernels first; "mma" skips the wgmma forward (mma.sync,
 * then generic). bwd = false: the forward alone. */
static void run_attn(const AttnCase &c, std::mt19937_64 &rng, const char *mode, bool bwd = true) {
    setenv("FLASHC_CUDA_KERNEL", mode, 1);
    char nm[240];
    snprintf(nm, sizeof nm, "attn[%s] %s B%lld Sq%lld Sk%lld H%lld/%lld D%lld c%d w(%lld,%lld) ns%lld%s%s%s%s%s%s%s%s%s",
             mode, dname(c.dt), (long long)c.B, (long long)c.Sq, (long long)c.Sk, (long long)c.Hq,
             (long long)c.Hkv, (long long)c.D, c.causal, (long long)c.wl, (long long)c.wr,
             (long long)c.nsink, c.sinklog ? " sl" : "", c.lse_null ? " nolse" : "",
             c.bhsd ? " bhsd" : "", c.flip ? " flip" : "", c.bcast ? " bcast" : "", c.softcap > 0 ? " cap" : "",
             c.alibi ? " alibi" : "", c.det ? "" : " nondet", c.vpad ? "" : " vdense");
    const std::string name = nm;
    const int dt = c.dt;
    const int perm_bshd[4] = {0, 1, 2, 3}, perm_bhsd[4] = {0, 2, 1, 3};
    const int *perm = c.bhsd ? perm_bhsd : perm_bshd;
    const int64_t qs[4] = {c.B, c.Sq, c.Hq, c.D}, ks[4] = {c.B, c.Sk, c.Hkv, c.D};
    Tensor q = make_tensor(dt, 4, qs, perm, c.flip ? 1 : -1);
    Tensor k = make_tensor(dt, 4, ks, perm, -1, c.bcast ? 0 : -1);
    Tensor v = make_tensor(dt, 4, ks, perm_bshd, c.flip ? 3 : -1, -1, c.vpad ? 3 : 0);
    Tensor o = make_tensor(dt, 4, qs, perm);
    const int ldt = dt == FLASHC_F64 ? FLASHC_F64 : FLASHC_F32;
    const int64_t ls[3] = {c.B, c.Hq, c.Sq};
    const int lperm[3] = {0, 1, 2};
    Tensor lse = make_tensor(ldt, 3, ls, lperm);
    Tensor sl, al;
    std::vector<double> sinks, slopes;
    if (c.sinklog) {
        const int64_t ss[1] = {c.Hq};
        const int sp[1] = {0};
        sl = make_tensor(ldt, 1, ss, sp);
        sinks = fill_random(sl, rng, 1.0);
    }
    auto Q = fill_random(q, rng), K = fill_random(k, rng), V = fill_random(v, rng);
    if (c.alibi) { /* [B, Hq] slopes */
        const int64_t as[2] = {c.B, c.Hq};
        const int ap[2] = {0, 1};
        al = make_tensor(ldt, 2, as, ap);
        slopes.resize(c.B * c.Hq);
        std::uniform_real_distribution<double> u(0.0, 0.1);
        for (int64_t e = 0; e < c.B * c.Hq; ++e) slopes[e] = put(ldt, &al.host[e * dsize(ldt)], u(rng));
        upload(al);
    }

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
    a.softcap = c.softcap;
    a.alibi = c.alibi ? al.ptr() : nullptr;
    a.salibi[0] = c.Hq;
    a.salibi[1] = 1;
    a.deterministic = c.det;

    /* float64 reference, per batch entry (ref_seq_fwd; Q, K, V, O are [B][S][H][D], L [B][Hq][Sq]) */
    const int64_t nq = c.Sq * c.Hq * c.D, nk = c.Sk * c.Hkv * c.D, nl = c.Hq * c.Sq;
    auto refseq = [&](int64_t b) {
        return RefSeq{a.scale, c.softcap, a.wl, a.wr, a.n_sink, c.Hq, c.Hkv, c.D, c.sinklog ? sinks.data() : nullptr,
                      c.alibi ? &slopes[b * c.Hq] : nullptr};
    };
    std::vector<double> Oref(Q.size(), 0.0), Lref((size_t)(c.B * nl));
    for (int64_t b = 0; b < c.B; ++b)
        ref_seq_fwd(refseq(b), c.Sq, c.Sk, Q.data() + b * nq, K.data() + b * nk, V.data() + b * nk,
                    Oref.data() + b * nq, Lref.data() + b * nl);

    poison(o);
    poison(lse);
    CK(M->attn_fwd(&a));
    CK(M->synchronize());
    auto Og = read_logical(o);
    const double cap_tol = c.softcap > 0 && (dt == FLASHC_F16 || dt == FLASHC_BF16) ? 2e-3 : 0.0; /* tanh.approx */
    report_rel(name, "O", Og, Oref, attn_tol(dt, false) + cap_tol);
    if (!c.lse_null) {
        bool bad;
        const double le = lse_err(read_logical(lse), Lref, &bad);
        report(name, "LSE", le, (dt == FLASHC_F64 ? 1e-10 : 1e-4) + (cap_tol > 0 ? c.softcap * 1e-3 : 0.0), bad);
    }

    /* backward, on the forward's own o and lse (lse recomputed when NULL) */
    auto free_fwd = [&] {
        free_tensor(q); free_tensor(k); free_tensor(v); free_tensor(o); free_tensor(lse);
        if (c.sinklog) free_tensor(sl);
        if (c.alibi) free_tensor(al);
    };
    if (c.lse_null || !bwd) { free_fwd(); return; }
    auto Lg = read_logical(lse);
    Tensor dO = make_tensor(dt, 4, qs, perm_bshd, -1, -1, c.vpad ? 1 : 0); /* (vpad false: 16-byte rows throughout) */
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

    /* The reference uses k/v values as seen logically; with a broadcast k the
     * batches alias one physical row, so dK is per logical element: compare
     * logical (what flashc.h specifies: dk has k's shape). */
    std::vector<double> dQr(Q.size(), 0.0), dKr(K.size(), 0.0), dVr(V.size(), 0.0), dSr(c.Hq, 0.0);
    for (int64_t b = 0; b < c.B; ++b)
        ref_seq_bwd(refseq(b), c.Sq, c.Sk, Q.data() + b * nq, K.data() + b * nk, V.data() + b * nk,
                    DO.data() + b * nq, Og.data() + b * nq, Lg.data() + b * nl, dQr.data() + b * nq,
                    dKr.data() + b * nk, dVr.data() + b * nk, dSr.data());
    std::vector<unsigned char> first_dq;
    for (int rep = 0; rep < (c.det && !g_one_run ? 2 : 1); ++rep) { /* deterministic: a second run, bit-identical */
        poison(dq); poison(dk); poison(dv);
        if (c.sinklog) poison(ds);
        CK(M->attn_bwd(&a));
        CK(M->synchronize());
        if (rep == 0) {
            auto g1 = read_logical(dq), g2 = read_logical(dk), g3 = read_logical(dv);
            const double tb = attn_tol(dt, true) + (cap_tol > 0 ? 5e-3 : 0.0);
            report_rel(name, "dQ", g1, dQr, tb);
            report_rel(name, "dK", g2, dKr, tb);
            report_rel(name, "dV", g3, dVr, tb);
            if (c.sinklog) {
                auto g4 = read_logical(ds);
                report_rel(name, "dsinks", g4, dSr, dt == FLASHC_F64 ? 1e-9 : 1e-3);
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
    free_fwd();
    free_tensor(dO); free_tensor(dq); free_tensor(dk); free_tensor(dv);
    if (c.sinklog) free_tensor(ds);
}

/* ------------------------------------ ragged batches (attn_ragged.cuh) */
/* Packed varlen batches (forward and backward) and KV caches (contiguous,
 * cache_batch_idx, paged; with an in-place append), as hand-built ragged
 * fc_attn problems (flashc_internal.h) through the module table, under
 * "generic" and (F16/BF16) "auto". The reference of each sequence is the
 * dense float64 reference of that sequence alone (ref_seq_fwd / _bwd);
 * head-major k, dv and padded rows where D is odd.
 * Every row and key that belongs to no sequence is NaN (packed gap rows,
 * cache positions past a sequence's length, unused cache rows and pages,
 * block-table entries past a sequence's pages are garbage): a kernel that
 * reads one fails. Rows of o / lse outside every sequence must stay
 * unwritten; those of dq / dk / dv must be zeros; the cache must hold exactly
 * the old keys plus the appended ones. */
enum { RAG_VARLEN = 0, RAG_CACHE = 1, RAG_CBI = 2, RAG_PAGED = 3 };
struct RagCase {
    int dt, kind;
    std::vector<int64_t> sq, sk; /* varlen: lengths; caches: sq = {Sn}, sk = cache_seqlens */
    int64_t Hq, Hkv, D;
    int causal;
    int64_t wl, wr, nsink;
    bool sinklog;
    double softcap;
    bool alibi;
    int64_t page, snew; /* paged: page size; caches: appended tokens per sequence */
    int det;            /* params.deterministic (0: the atomic dQ path where it applies) */
    int64_t extra_q;    /* varlen: max_seqlen_q passed this much above the longest */
};

/* x_ij (natural units, −inf where masked) and g = ∂x/∂(scale·qk) of one
 * sequence (Sq rows, Sk keys) for head h, row i, into x[Sk], g[Sk]. */
static void ref_logits(const RefSeq &r, int64_t Sq, int64_t Sk, const double *Q, const double *K, int64_t h,
                       int64_t i, double *x, double *g) {
    const fc_mask mk = {Sq, Sk, r.wl, r.wr, r.nsink};
    int64_t se, lo, hi;
    fc_visible_keys(&mk, i, &se, &lo, &hi);
    const int64_t G = r.Hq / r.Hkv;
    for (int64_t j = 0; j < Sk; ++j) {
        x[j] = -INFINITY;
        g[j] = 0;
        if (!(j < se || (j >= lo && j < hi))) continue;
        double s = 0;
        for (int64_t d = 0; d < r.D; ++d) s += Q[(i * r.Hq + h) * r.D + d] * K[(j * r.Hkv + h / G) * r.D + d];
        s *= r.scale;
        g[j] = 1;
        if (r.softcap > 0) {
            const double t = tanh(s / r.softcap);
            s = r.softcap * t;
            g[j] = 1 - t * t;
        }
        if (r.slopes) s -= r.slopes[h] * fabs((double)(i + Sk - Sq - j));
        x[j] = s;
    }
}
/* Q, O [Sq][Hq][D], K, V [Sk][Hkv][D]; L [Hq][Sq]. */
static void ref_seq_fwd(const RefSeq &r, int64_t Sq, int64_t Sk, const double *Q, const double *K, const double *V,
                        double *O, double *L) {
    std::vector<double> x((size_t)std::max<int64_t>(Sk, 1)), g(x.size());
    const int64_t G = r.Hq / r.Hkv;
    for (int64_t h = 0; h < r.Hq; ++h)
        for (int64_t i = 0; i < Sq; ++i) {
            ref_logits(r, Sq, Sk, Q, K, h, i, x.data(), g.data());
            double m = r.sinks ? r.sinks[h] : -INFINITY;
            for (int64_t j = 0; j < Sk; ++j) m = std::max(m, x[j]);
            double l = 0;
            std::vector<double> acc((size_t)r.D, 0.0);
            if (m > -INFINITY) {
                for (int64_t j = 0; j < Sk; ++j) {
                    if (x[j] == -INFINITY) continue;
                    const double p = exp(x[j] - m);
                    l += p;
                    for (int64_t d = 0; d < r.D; ++d) acc[d] += p * V[(j * r.Hkv + h / G) * r.D + d];
                }
                if (r.sinks) l += exp(r.sinks[h] - m);
            }
            const bool any = m > -INFINITY && l > 0;
            for (int64_t d = 0; d < r.D; ++d) O[(i * r.Hq + h) * r.D + d] = any ? acc[d] / l : 0.0;
            L[h * Sq + i] = any ? m + log(l) : -INFINITY;
        }
}
/* The backward on the given O, L (the forward's, as the module got them):
 * dQ = , dK, dV, dS [Hq] += (dS summed over sequences). */
static void ref_seq_bwd(const RefSeq &r, int64_t Sq, int64_t Sk, const double *Q, const double *K, const double *V,
                        const double *dO, const double *O, const double *L, double *dQ, double *dK, double *dV,
                        double *dS) {
    std::vector<double> x((size_t)std::max<int64_t>(Sk, 1)), g(x.size());
    const int64_t G = r.Hq / r.Hkv, D = r.D;
    for (int64_t h = 0; h < r.Hq; ++h)
        for (int64_t i = 0; i < Sq; ++i) {
            const double Li = L[h * Sq + i];
            const double *dOi = &dO[(i * r.Hq + h) * D], *Qi = &Q[(i * r.Hq + h) * D];
            double Dl = 0;
            for (int64_t d = 0; d < D; ++d) Dl += dOi[d] * O[(i * r.Hq + h) * D + d];
            if (r.sinks && Li > -INFINITY) dS[h] -= exp(r.sinks[h] - Li) * Dl;
            ref_logits(r, Sq, Sk, Q, K, h, i, x.data(), g.data());
            for (int64_t j = 0; j < Sk; ++j) {
                if (x[j] == -INFINITY) continue;
                const double *Kj = &K[(j * r.Hkv + h / G) * D], *Vj = &V[(j * r.Hkv + h / G) * D];
                double dp = 0;
                for (int64_t d = 0; d < D; ++d) dp += dOi[d] * Vj[d];
                const double p = exp(x[j] - Li), ds = p * (dp - Dl) * g[j];
                for (int64_t d = 0; d < D; ++d) {
                    dV[(j * r.Hkv + h / G) * D + d] += p * dOi[d];
                    dK[(j * r.Hkv + h / G) * D + d] += r.scale * ds * Qi[d];
                    dQ[(i * r.Hq + h) * D + d] += r.scale * ds * Kj[d];
                }
            }
        }
}

/* Rows [t0, t1) (axis 1) × heads × D of a 4-D tensor at axis-0 index a0, as doubles [t][h][d]. */
static std::vector<double> rows_of(const Tensor &t, int64_t a0, int64_t t0, int64_t t1) {
    std::vector<double> out;
    out.reserve((size_t)((t1 - t0) * t.shape[2] * t.shape[3]));
    for (int64_t i = t0; i < t1; ++i)
        for (int64_t h = 0; h < t.shape[2]; ++h)
            for (int64_t d = 0; d < t.shape[3]; ++d) {
                const int64_t idx[4] = {a0, i, h, d};
                out.push_back(at(t, idx));
            }
    return out;
}
/* Are the bytes of rows [t0, t1) × every head of a 4-D tensor (axis-0 index a0) all 0xff (unwritten)? */
static bool rows_poisoned(const Tensor &t, int64_t a0, int64_t t0, int64_t t1) {
    for (int64_t i = t0; i < t1; ++i)
        for (int64_t h = 0; h < t.shape[2]; ++h)
            for (int64_t d = 0; d < t.shape[3]; ++d) {
                const int64_t idx[4] = {a0, i, h, d};
                const unsigned char *p = &t.host[t.off(idx) * dsize(t.dt)];
                for (size_t e = 0; e < dsize(t.dt); ++e)
                    if (p[e] != 0xff) return false;
            }
    return true;
}
/* Max |L − Lref| over finite pairs; bad when an infinity differs or a NaN appears. */
static double lse_err(const std::vector<double> &Lg, const std::vector<double> &Lr, bool *bad) {
    double maxe = 0;
    *bad = false;
    for (size_t r = 0; r < Lg.size(); ++r) {
        if (std::isinf(Lr[r]) || std::isinf(Lg[r])) { *bad |= Lg[r] != Lr[r]; continue; }
        if (std::isnan(Lg[r])) { *bad = true; continue; }
        maxe = std::max(maxe, fabs(Lg[r] - Lr[r]));
    }
    return maxe;
}

static void run_ragged(const RagCase &c, std::mt19937_64 &rng, const char *mode) {
    static const char *kinds[] = {"varlen", "kvcache", "kvcache+cbi", "paged"};
    std::string lens;
    for (size_t b = 0; b < c.sk.size(); ++b)
        lens += (b ? "," : "") + std::to_string(c.kind == RAG_VARLEN ? c.sq[b] : c.sq[0]) + "/" + std::to_string(c.sk[b]);
    char nm[300];
    snprintf(nm, sizeof nm, "ragged[%s] %s%s %s H%lld/%lld D%lld [%s] new%lld c%d w(%lld,%lld) ns%lld%s%s%s%s",
             mode, kinds[c.kind], c.kind == RAG_PAGED ? std::to_string(c.page).c_str() : "", dname(c.dt),
             (long long)c.Hq, (long long)c.Hkv, (long long)c.D, lens.c_str(), (long long)c.snew, c.causal,
             (long long)c.wl, (long long)c.wr, (long long)c.nsink, c.sinklog ? " sl" : "", c.softcap > 0 ? " cap" : "",
             c.alibi ? " alibi" : "", c.det ? "" : " nondet");
    const std::string name = nm;
    setenv("FLASHC_CUDA_KERNEL", mode, 1);
    const int dt = c.dt, ldt = dt == FLASHC_F64 ? FLASHC_F64 : FLASHC_F32;
    const int64_t B = (int64_t)c.sk.size(), Hq = c.Hq, Hkv = c.Hkv, D = c.D;
    const bool vl = c.kind == RAG_VARLEN;
    const int perm[4] = {0, 1, 2, 3}, perm_h[4] = {0, 2, 1, 3};
    const int64_t lead = 2, trail = 3; /* varlen: packed rows before the first and after the last sequence */

    /* Sequence lengths and where their rows live. */
    std::vector<int64_t> sq(B), sk(B); /* sk: the keys attended (cache: after the append) */
    std::vector<int32_t> cuq(B + 1), cuk(B + 1), lens32(B);
    cuq[0] = cuk[0] = (int32_t)lead;
    for (int64_t b = 0; b < B; ++b) {
        sq[b] = vl ? c.sq[b] : c.sq[0];
        sk[b] = c.sk[b] + (vl ? 0 : c.snew);
        lens32[b] = (int32_t)c.sk[b];
        cuq[b + 1] = cuq[b] + (int32_t)sq[b];
        cuk[b + 1] = cuk[b] + (int32_t)sk[b];
    }
    const int64_t Sq = *std::max_element(sq.begin(), sq.end()) + (vl ? c.extra_q : 0);
    const int64_t Skmax = *std::max_element(sk.begin(), sk.end());
    const int64_t Tq = cuq[B] + trail, Tk = cuk[B] + trail;

    /* q, o, lse: packed [1, Tq, Hq, D] / [1, Hq, Tq], or [B, Sn, Hq, D] / [B, Hq, Sn] */
    const int64_t qs[4] = {vl ? 1 : B, vl ? Tq : Sq, Hq, D}, ls[3] = {qs[0], Hq, qs[1]};
    const int lperm[3] = {0, 1, 2};
    Tensor q = make_tensor(dt, 4, qs, perm), o = make_tensor(dt, 4, qs, perm);
    Tensor lse = make_tensor(ldt, 3, ls, lperm);
    fill_random(q, rng);
    /* The row of sequence b's query i along (axis 0, axis 1). */
    auto qrow = [&](int64_t b, int64_t i, int64_t &a0, int64_t &a1) { a0 = vl ? 0 : b; a1 = vl ? cuq[b] + i : i; };

    /* k, v: packed [1, Tk, Hkv, D] (varlen, k head-major when D is odd);
     * cache rows [Bc, Sc, Hkv, D]; pages [P, page, Hkv, D]. */
    std::vector<int32_t> cbi, bt;
    int64_t ks[4] = {1, Tk, Hkv, D}, Bk = 1, maxp = 0, cap = 0;
    const int64_t ps = c.page;
    if (c.kind == RAG_CACHE || c.kind == RAG_CBI) {
        cap = Skmax + 3;
        Bk = c.kind == RAG_CBI ? B + 2 : B;
        ks[0] = Bk;
        ks[1] = cap;
        if (c.kind == RAG_CBI) {
            cbi.resize(Bk);
            for (int64_t i = 0; i < Bk; ++i) cbi[i] = (int32_t)i;
            std::shuffle(cbi.begin(), cbi.end(), rng);
            cbi.resize(B);
        }
    } else if (c.kind == RAG_PAGED) {
        maxp = (Skmax + ps - 1) / ps + 1; /* one more entry than the longest needs: garbage */
        cap = maxp * ps;
        int64_t P = 2; /* two unused pages */
        for (int64_t b = 0; b < B; ++b) P += (sk[b] + ps - 1) / ps;
        std::vector<int32_t> ids(P);
        for (int64_t i = 0; i < P; ++i) ids[i] = (int32_t)i;
        std::shuffle(ids.begin(), ids.end(), rng);
        bt.assign(B * maxp, 0);
        int64_t next = 0;
        for (int64_t b = 0; b < B; ++b)
            for (int64_t pg = 0; pg < maxp; ++pg)
                bt[b * maxp + pg] = pg < (sk[b] + ps - 1) / ps ? ids[next++] : (pg % 2 ? -7 : 1 << 30); /* never read */
        Bk = ks[0] = P;
        ks[1] = ps;
    }
    /* odd D (the plain-load paths anyway): k head-major, v rows padded */
    const bool odd = D % 2 == 1;
    Tensor k = make_tensor(dt, 4, ks, odd ? perm_h : perm), v = make_tensor(dt, 4, ks, perm, -1, -1, odd ? 3 : 0);
    /* Where key j of sequence b lives (axis 0, axis 1). */
    auto key_at = [&](int64_t b, int64_t j, int64_t &a0, int64_t &a1) {
        switch (c.kind) {
        case RAG_VARLEN: a0 = 0; a1 = cuk[b] + j; break;
        case RAG_CBI: a0 = cbi[b]; a1 = j; break;
        case RAG_PAGED: a0 = bt[b * maxp + j / ps]; a1 = j % ps; break;
        default: a0 = b; a1 = j;
        }
    };
    /* Random keys where a sequence's (old) keys live, NaN everywhere else. */
    std::normal_distribution<double> nd(0.0, 1.0);
    for (Tensor *t : {&k, &v}) {
        for (int64_t b = 0; b < B; ++b)
            for (int64_t j = 0; j < (vl ? sk[b] : c.sk[b]); ++j)
                for (int64_t hk = 0; hk < Hkv; ++hk)
                    for (int64_t d = 0; d < D; ++d) {
                        int64_t a0, a1;
                        key_at(b, j, a0, a1);
                        const int64_t idx[4] = {a0, a1, hk, d};
                        put(dt, &t->host[t->off(idx) * dsize(dt)], nd(rng));
                    }
        upload(*t);
    }
    if (vl) { /* packed query gap rows: NaN */
        poison_rows(q, 0, 0, lead);
        poison_rows(q, 0, cuq[B], Tq);
        upload(q);
    }
    const std::vector<unsigned char> k0 = k.host, v0 = v.host; /* the cache before the append */
    Tensor kn, vn;
    if (c.snew > 0 && !vl) {
        const int64_t ns[4] = {B, c.snew, Hkv, D};
        kn = make_tensor(dt, 4, ns, perm);
        vn = make_tensor(dt, 4, ns, perm_h);
        fill_random(kn, rng);
        fill_random(vn, rng);
    }

    Tensor sl, al;
    std::vector<double> sinks, slopes;
    const int sp1[1] = {0};
    if (c.sinklog) {
        const int64_t ss[1] = {Hq};
        sl = make_tensor(ldt, 1, ss, sp1);
        sinks = fill_random(sl, rng, 2.0);
    }
    if (c.alibi) {
        const int64_t as[2] = {B, Hq};
        const int ap[2] = {0, 1};
        al = make_tensor(ldt, 2, as, ap);
        slopes.resize(B * Hq);
        std::uniform_real_distribution<double> u(0.0, 0.1);
        for (int64_t e = 0; e < B * Hq; ++e) slopes[e] = put(ldt, &al.host[e * dsize(ldt)], u(rng));
        upload(al);
    }

    fc_attn a;
    memset(&a, 0, sizeof a);
    a.dtype = dt;
    a.B = B; a.Sq = Sq; a.Sk = vl ? Skmax : cap; a.Hq = Hq; a.Hkv = Hkv; a.D = D;
    a.q = q.ptr(); a.k = k.ptr(); a.v = v.ptr(); a.o = o.ptr(); a.lse = lse.ptr();
    memcpy(a.sq, q.str, 32); memcpy(a.sk, k.str, 32); memcpy(a.sv, v.str, 32); memcpy(a.so, o.str, 32);
    memcpy(a.slse, lse.str, 24);
    a.scale = 1.0 / sqrt((double)D);
    a.wl = c.wl;
    a.wr = c.causal ? 0 : c.wr;
    a.n_sink = c.nsink;
    a.sink_logits = c.sinklog ? sl.ptr() : nullptr;
    a.ssink = 1;
    a.sdsink = 1;
    a.softcap = c.softcap;
    a.alibi = c.alibi ? al.ptr() : nullptr;
    a.salibi[0] = Hq;
    a.salibi[1] = 1;
    a.deterministic = c.det;
    a.Bk = Bk;
    std::vector<int32_t *> idx_dev;
    auto dev = [&](const std::vector<int32_t> &h) { idx_dev.push_back(dev_i32(h)); return idx_dev.back(); };
    if (vl) {
        a.cu_q = dev(cuq);
        a.cu_k = dev(cuk);
        a.scu_q = a.scu_k = 1;
        a.Tq = Tq;
        a.Tk = Tk;
        a.sq[0] = a.so[0] = a.sk[0] = a.sv[0] = a.slse[0] = 0; /* packed: batch strides 0 */
    } else {
        a.seqlen_k = dev(lens32);
        a.sseqlen_k = 1;
        a.seqlen_k_add = c.snew;
        if (c.kind == RAG_CBI) {
            a.kv_batch = dev(cbi);
            a.skv_batch = 1;
        }
        if (c.kind == RAG_PAGED) {
            a.block_table = dev(bt);
            a.sbt[0] = maxp;
            a.sbt[1] = 1;
            a.max_pages = maxp;
            a.page_size = ps;
        }
        if (c.snew > 0) {
            a.k_new = kn.ptr();
            a.v_new = vn.ptr();
            memcpy(a.skn, kn.str, 32);
            memcpy(a.svn, vn.str, 32);
            a.S_new = c.snew;
        }
    }

    /* Each sequence alone, as doubles: Q [Sq_b][Hq][D], K/V [Sk_b][Hkv][D]. */
    std::vector<std::vector<double>> Qs(B), Ks(B), Vs(B);
    for (int64_t b = 0; b < B; ++b) {
        int64_t a0, a1;
        qrow(b, 0, a0, a1);
        Qs[b] = rows_of(q, a0, a1, a1 + sq[b]);
        for (int64_t j = 0; j < sk[b]; ++j)
            for (int64_t hk = 0; hk < Hkv; ++hk)
                for (int64_t d = 0; d < D; ++d) {
                    double kv[2];
                    if (!vl && j >= c.sk[b]) { /* appended */
                        const int64_t idx[4] = {b, j - c.sk[b], hk, d};
                        kv[0] = at(kn, idx);
                        kv[1] = at(vn, idx);
                    } else {
                        key_at(b, j, a0, a1);
                        const int64_t idx[4] = {a0, a1, hk, d};
                        kv[0] = at(k, idx);
                        kv[1] = at(v, idx);
                    }
                    Ks[b].push_back(kv[0]);
                    Vs[b].push_back(kv[1]);
                }
    }
    auto refseq = [&](int64_t b) {
        return RefSeq{a.scale, c.softcap, a.wl, a.wr, a.n_sink, Hq, Hkv, D, c.sinklog ? sinks.data() : nullptr,
                      c.alibi ? &slopes[b * Hq] : nullptr};
    };

    /* ---- forward */
    poison(o);
    poison(lse);
    CK(M->attn_fwd(&a));
    CK(M->synchronize());
    download(o);
    download(lse);
    std::vector<double> Og, Or, Lg, Lr;
    std::vector<std::vector<double>> Ogs(B), Lgs(B);
    for (int64_t b = 0; b < B; ++b) {
        std::vector<double> O((size_t)(sq[b] * Hq * D)), L((size_t)(sq[b] * Hq));
        ref_seq_fwd(refseq(b), sq[b], sk[b], Qs[b].data(), Ks[b].data(), Vs[b].data(), O.data(), L.data());
        int64_t a0, a1;
        qrow(b, 0, a0, a1);
        Ogs[b] = rows_of(o, a0, a1, a1 + sq[b]);
        Og.insert(Og.end(), Ogs[b].begin(), Ogs[b].end());
        Or.insert(Or.end(), O.begin(), O.end());
        Lgs[b].resize((size_t)(Hq * sq[b]));
        for (int64_t h = 0; h < Hq; ++h)
            for (int64_t i = 0; i < sq[b]; ++i) {
                const int64_t idx[3] = {a0, h, a1 + i};
                Lgs[b][h * sq[b] + i] = at(lse, idx);
            }
        Lg.insert(Lg.end(), Lgs[b].begin(), Lgs[b].end());
        Lr.insert(Lr.end(), L.begin(), L.end());
    }
    const double cap_tol = c.softcap > 0 && dt != FLASHC_F32 && dt != FLASHC_F64 ? 2e-3 : 0.0; /* tanh.approx */
    report_rel(name, "O", Og, Or, attn_tol(dt, false) + cap_tol);
    bool bad;
    const double le = lse_err(Lg, Lr, &bad);
    report(name, "LSE", le, (dt == FLASHC_F64 ? 1e-10 : 1e-4) + (cap_tol > 0 ? c.softcap * 1e-3 : 0.0), bad);
    if (vl) { /* o and lse rows of no sequence: unwritten */
        bool untouched = rows_poisoned(o, 0, 0, lead) && rows_poisoned(o, 0, cuq[B], Tq);
        for (int64_t h = 0; h < Hq; ++h)
            for (int64_t t = 0; t < Tq; ++t) {
                if (t >= lead && t < cuq[B]) continue;
                const int64_t idx[3] = {0, h, t};
                untouched = untouched && std::isnan(at(lse, idx));
            }
        report(name, "gaps", untouched ? 0.0 : 1.0, 0.0, false);
    } else if (c.snew > 0) { /* the cache: old keys unchanged, the new ones appended, nothing else written */
        std::vector<unsigned char> kw = k0, vw = v0;
        for (int64_t b = 0; b < B; ++b)
            for (int64_t t = 0; t < c.snew; ++t)
                for (int64_t hk = 0; hk < Hkv; ++hk)
                    for (int64_t d = 0; d < D; ++d) {
                        int64_t a0, a1;
                        key_at(b, c.sk[b] + t, a0, a1);
                        const int64_t ci[4] = {a0, a1, hk, d}, ni[4] = {b, t, hk, d};
                        memcpy(&kw[k.off(ci) * dsize(dt)], &kn.host[kn.off(ni) * dsize(dt)], dsize(dt));
                        memcpy(&vw[v.off(ci) * dsize(dt)], &vn.host[vn.off(ni) * dsize(dt)], dsize(dt));
                    }
        download(k);
        download(v);
        report(name, "append", k.host == kw && v.host == vw ? 0.0 : 1.0, 0.0, false);
    }

    /* ---- backward (varlen), on the forward's own o and lse */
    if (vl) {
        Tensor dO = make_tensor(dt, 4, qs, perm, -1, -1, odd ? 1 : 0);
        fill_random(dO, rng);
        poison_rows(dO, 0, 0, lead);
        poison_rows(dO, 0, cuq[B], Tq);
        upload(dO);
        Tensor dq = make_tensor(dt, 4, qs, perm), dk = make_tensor(dt, 4, ks, perm), dv = make_tensor(dt, 4, ks, perm_h);
        Tensor ds;
        if (c.sinklog) {
            const int64_t ss[1] = {Hq};
            ds = make_tensor(ldt, 1, ss, sp1);
        }
        a.dout = dO.ptr(); memcpy(a.sdo, dO.str, 32);
        a.dq = dq.ptr(); a.dk = dk.ptr(); a.dv = dv.ptr();
        memcpy(a.sdq, dq.str, 32); memcpy(a.sdk, dk.str, 32); memcpy(a.sdv, dv.str, 32);
        a.sdo[0] = a.sdq[0] = a.sdk[0] = a.sdv[0] = 0;
        a.dsinks = c.sinklog ? ds.ptr() : nullptr;
        /* references over every packed row: zeros outside the sequences */
        std::vector<double> dQr((size_t)(Tq * Hq * D), 0.0), dKr((size_t)(Tk * Hkv * D), 0.0), dVr(dKr.size(), 0.0),
            dSr((size_t)Hq, 0.0);
        for (int64_t b = 0; b < B; ++b) {
            const std::vector<double> dOb = rows_of(dO, 0, cuq[b], cuq[b] + sq[b]);
            ref_seq_bwd(refseq(b), sq[b], sk[b], Qs[b].data(), Ks[b].data(), Vs[b].data(), dOb.data(),
                        Ogs[b].data(), Lgs[b].data(), &dQr[cuq[b] * Hq * D], &dKr[cuk[b] * Hkv * D],
                        &dVr[cuk[b] * Hkv * D], dSr.data());
        }
        std::vector<unsigned char> first;
        for (int rep = 0; rep < (c.det && !g_one_run ? 2 : 1); ++rep) {
            poison(dq); poison(dk); poison(dv);
            if (c.sinklog) poison(ds);
            CK(M->attn_bwd(&a));
            CK(M->synchronize());
            auto g1 = read_logical(dq), g2 = read_logical(dk), g3 = read_logical(dv);
            std::vector<unsigned char> all = dq.host;
            all.insert(all.end(), dk.host.begin(), dk.host.end());
            all.insert(all.end(), dv.host.begin(), dv.host.end());
            if (rep == 1) { report(name, "determ", all == first ? 0.0 : 1.0, 0.0, false); break; }
            first = all;
            const double tb = attn_tol(dt, true) + (cap_tol > 0 ? 5e-3 : 0.0);
            report_rel(name, "dQ", g1, dQr, tb);
            report_rel(name, "dK", g2, dKr, tb);
            report_rel(name, "dV", g3, dVr, tb);
            if (c.sinklog) report_rel(name, "dsinks", read_logical(ds), dSr, dt == FLASHC_F64 ? 1e-9 : 1e-3);
        }
        free_tensor(dO); free_tensor(dq); free_tensor(dk); free_tensor(dv);
        if (c.sinklog) free_tensor(ds);
    }
    free_tensor(q); free_tensor(o); free_tensor(lse); free_tensor(k); free_tensor(v);
    if (c.snew > 0 && !vl) { free_tensor(kn); free_tensor(vn); }
    if (c.sinklog) free_tensor(sl);
    if (c.alibi) free_tensor(al);
    for (int32_t *p : idx_dev) M->free_(p);
}

/* Index arrays out of range (the CUDA module does not inspect them, flashc.h):
 * decreasing and out-of-range cu_seqlens, a too small max_seqlen, cache
 * lengths past the capacity and negative, page ids and cache rows out of
 * range. The results are unspecified; the calls must succeed and never
 * touch memory outside the tensors (compute-sanitizer memcheck, --small). */
static void run_ragged_clamps(std::mt19937_64 &rng, const char *mode) {
    setenv("FLASHC_CUDA_KERNEL", mode, 1);
    const std::string name = std::string("ragged[") + mode + "] clamps";
    const int dt = FLASHC_BF16, perm[4] = {0, 1, 2, 3}, lperm[3] = {0, 1, 2};
    const int64_t B = 4, Hq = 4, Hkv = 2, D = 64, T = 50;
    const int64_t qs[4] = {1, T, Hq, D}, ks[4] = {1, T, Hkv, D}, ls[3] = {1, Hq, T};
    Tensor q = make_tensor(dt, 4, qs, perm), k = make_tensor(dt, 4, ks, perm), v = make_tensor(dt, 4, ks, perm);
    Tensor o = make_tensor(dt, 4, qs, perm), lse = make_tensor(FLASHC_F32, 3, ls, lperm);
    Tensor dO = make_tensor(dt, 4, qs, perm), dq = make_tensor(dt, 4, qs, perm), dk = make_tensor(dt, 4, ks, perm),
           dv = make_tensor(dt, 4, ks, perm);
    for (Tensor *t : {&q, &k, &v, &dO}) fill_random(*t, rng);
    for (Tensor *t : {&o, &lse, &dq, &dk, &dv}) poison(*t); /* defined bytes (initcheck): the bwd reads o, lse */
    std::vector<int32_t *> idx_dev;
    auto dev = [&](const std::vector<int32_t> &h) { idx_dev.push_back(dev_i32(h)); return idx_dev.back(); };
    fc_attn a;
    memset(&a, 0, sizeof a);
    a.dtype = dt;
    a.B = B; a.Sq = 16; a.Sk = 16; a.Hq = Hq; a.Hkv = Hkv; a.D = D;
    a.q = q.ptr(); a.k = k.ptr(); a.v = v.ptr(); a.o = o.ptr(); a.lse = lse.ptr();
    memcpy(a.sq, q.str, 32); memcpy(a.sk, k.str, 32); memcpy(a.sv, v.str, 32); memcpy(a.so, o.str, 32);
    memcpy(a.slse, lse.str, 24);
    a.sq[0] = a.sk[0] = a.sv[0] = a.so[0] = a.slse[0] = 0;
    a.scale = 0.125; a.wl = -1; a.wr = 0; a.deterministic = 1;
    a.cu_q = dev({40, 10, -5, 1000, 30});
    a.cu_k = dev({3, 60, 20, 20, -1});
    a.scu_q = a.scu_k = 1;
    a.Tq = a.Tk = T;
    a.Bk = 1;
    flashc_status s1 = M->attn_fwd(&a);
    if (s1 == FLASHC_OK) s1 = M->synchronize();
    a.dout = dO.ptr(); a.dq = dq.ptr(); a.dk = dk.ptr(); a.dv = dv.ptr();
    memcpy(a.sdo, dO.str, 32); memcpy(a.sdq, dq.str, 32); memcpy(a.sdk, dk.str, 32); memcpy(a.sdv, dv.str, 32);
    a.sdo[0] = a.sdq[0] = a.sdk[0] = a.sdv[0] = 0;
    flashc_status s2 = M->attn_bwd(&a);
    if (s2 == FLASHC_OK) s2 = M->synchronize();
    /* paged KV cache [P = 3, page 16] with an append, then cache rows with cache_batch_idx */
    const int64_t cs[4] = {3, 16, Hkv, D}, qs2[4] = {B, 20, Hq, D}, ns[4] = {B, 2, Hkv, D}, ls2[3] = {B, Hq, 20};
    Tensor kc = make_tensor(dt, 4, cs, perm), vc = make_tensor(dt, 4, cs, perm), q2 = make_tensor(dt, 4, qs2, perm),
           o2 = make_tensor(dt, 4, qs2, perm), l2 = make_tensor(FLASHC_F32, 3, ls2, lperm),
           kn = make_tensor(dt, 4, ns, perm), vn = make_tensor(dt, 4, ns, perm);
    for (Tensor *t : {&kc, &vc, &q2, &kn, &vn}) fill_random(*t, rng);
    for (Tensor *t : {&o2, &l2}) poison(*t);
    fc_attn c;
    memset(&c, 0, sizeof c);
    c.dtype = dt;
    c.B = B; c.Sq = 20; c.Hq = Hq; c.Hkv = Hkv; c.D = D;
    c.q = q2.ptr(); c.k = kc.ptr(); c.v = vc.ptr(); c.o = o2.ptr(); c.lse = l2.ptr();
    memcpy(c.sq, q2.str, 32); memcpy(c.sk, kc.str, 32); memcpy(c.sv, vc.str, 32); memcpy(c.so, o2.str, 32);
    memcpy(c.slse, l2.str, 24);
    c.scale = 0.125; c.wl = -1; c.wr = -1; c.deterministic = 1;
    c.seqlen_k = dev({5, 1 << 30, -40, 47});
    c.sseqlen_k = 1;
    c.k_new = kn.ptr(); c.v_new = vn.ptr();
    memcpy(c.skn, kn.str, 32); memcpy(c.svn, vn.str, 32);
    c.S_new = c.seqlen_k_add = 2;
    c.block_table = dev({0, 9, 2, -3, 1 << 30, 1, 2, 2, 0, 1, 2, 7});
    c.sbt[0] = 3; c.sbt[1] = 1;
    c.max_pages = 3; c.page_size = 16;
    c.Sk = 48;
    c.Bk = 3;
    flashc_status s3 = M->attn_fwd(&c);
    if (s3 == FLASHC_OK) s3 = M->synchronize();
    c.block_table = nullptr; c.max_pages = c.page_size = 0; c.sbt[0] = c.sbt[1] = 0;
    c.kv_batch = dev({2, -1, 7, 0});
    c.skv_batch = 1;
    c.Sk = 16; /* cache rows [3, 16] */
    flashc_status s4 = M->attn_fwd(&c);
    if (s4 == FLASHC_OK) s4 = M->synchronize();
    report(name, "status", s1 == FLASHC_OK && s2 == FLASHC_OK && s3 == FLASHC_OK && s4 == FLASHC_OK ? 0.0 : 1.0, 0.0,
           false);
    for (Tensor *t : {&q, &k, &v, &o, &lse, &dO, &dq, &dk, &dv, &kc, &vc, &q2, &o2, &l2, &kn, &vn}) free_tensor(*t);
    for (int32_t *p : idx_dev) M->free_(p);
}

/* The ragged cases. Query lengths past 64 rows per sequence keep the
 * split-KV decode kernel out ("auto" then runs the mma.sync kernels);
 * decode-sized cases run it. small: a few small ones (compute-sanitizer). */
static std::vector<RagCase> ragged_cases(bool small) {
    std::vector<RagCase> v;
    /* dt, kind, sq, sk, Hq, Hkv, D, causal, wl, wr, nsink, sinklog, softcap, alibi, page, snew, det, extra_q */
    v.push_back({FLASHC_F16, RAG_VARLEN, {0, 1, 70, 33}, {5, 1, 90, 0}, 4, 2, 64, 1, -1, -1, 0, true, 0, false, 0, 0, 1, 0});
    v.push_back({FLASHC_BF16, RAG_PAGED, {1}, {0, 37, 16, 5}, 4, 2, 128, 1, -1, -1, 0, false, 0, true, 16, 1, 1, 0});
    v.push_back({FLASHC_BF16, RAG_PAGED, {70}, {3, 0, 100}, 4, 1, 64, 1, 40, -1, 2, true, 0, false, 1, 70, 1, 0});
    v.push_back({FLASHC_F32, RAG_CBI, {3}, {7, 0, 20}, 4, 2, 40, 0, -1, -1, 0, false, 5.0, true, 0, 2, 1, 0});
    if (small) return v;
    v.push_back({FLASHC_BF16, RAG_VARLEN, {1, 130, 0, 77, 65}, {1, 150, 9, 77, 0}, 4, 2, 128, 0, 32, 0, 2, false, 0, true, 0, 0, 1, 0});
    v.push_back({FLASHC_F16, RAG_VARLEN, {100, 66, 3}, {80, 200, 3}, 6, 3, 40, 0, -1, -1, 0, true, 4.0, false, 0, 0, 1, 0});
    v.push_back({FLASHC_F32, RAG_VARLEN, {0, 50, 1, 90}, {10, 70, 1, 60}, 4, 1, 64, 1, -1, -1, 3, true, 0, true, 0, 0, 1, 5});
    v.push_back({FLASHC_F64, RAG_VARLEN, {20, 0, 9}, {30, 4, 9}, 2, 2, 7, 1, 4, 2, 1, true, 2.0, true, 0, 0, 1, 0});
    v.push_back({FLASHC_BF16, RAG_VARLEN, {100, 3}, {2100, 7}, 2, 1, 64, 1, -1, -1, 0, false, 0, false, 0, 0, 0, 0}); /* atomic dQ */
    v.push_back({FLASHC_F16, RAG_VARLEN, {80, 80}, {300, 80}, 8, 2, 128, 1, -1, -1, 0, true, 0, true, 0, 0, 1, 3});
    v.push_back({FLASHC_BF16, RAG_CACHE, {70}, {0, 5, 200, 64}, 8, 2, 128, 1, -1, -1, 0, false, 0, false, 0, 70, 1, 0});
    v.push_back({FLASHC_F16, RAG_CBI, {1}, {0, 300, 64, 1}, 8, 2, 64, 0, -1, -1, 0, true, 0, true, 0, 1, 1, 0});
    v.push_back({FLASHC_F16, RAG_CBI, {66}, {10, 130}, 4, 4, 128, 1, 50, 0, 4, false, 0, false, 0, 66, 1, 0});
    v.push_back({FLASHC_F16, RAG_PAGED, {70}, {0, 45, 160, 17}, 8, 2, 128, 1, 64, -1, 0, false, 0, false, 16, 70, 1, 0});
    v.push_back({FLASHC_BF16, RAG_PAGED, {3}, {1, 70, 33}, 4, 2, 64, 0, -1, -1, 0, true, 3.0, false, 1, 2, 1, 0});
    v.push_back({FLASHC_BF16, RAG_PAGED, {80}, {0, 100, 129}, 4, 2, 40, 1, -1, -1, 0, false, 0, true, 64, 0, 1, 0});
    v.push_back({FLASHC_F16, RAG_PAGED, {65}, {20, 150}, 4, 2, 64, 1, -1, -1, 1, true, 0, false, 64, 65, 1, 0});
    v.push_back({FLASHC_F32, RAG_PAGED, {5}, {11, 0, 60}, 4, 2, 64, 1, -1, -1, 0, true, 0, false, 16, 5, 1, 0});
    return v;
}

/* ------------------------------- split-KV decode (attn_decode.cu, attn_decode_tma.cu) */
/* Few query rows per kv head through the module's plan (kern "auto": the
 * decode kernel where it applies, its TMA form on cc 9.0; "mma": the cp.async
 * form), dense batches here: one query token and short
 * chunks, keys 1 … 70000 (non-multiples of the 16-key tile, one split to
 * many), every mask option, sink logits, softcap, ALiBi, a negative scale,
 * odd head dims; each against the float64 reference of the ragged tests
 * (ref_seq_fwd, per batch entry) and bit-identical on a second run (the
 * splits are merged in a fixed order). The KV cache, paged (page sizes 16,
 * 32, 256 and 1, 5: one page lookup per tile or per key) and varlen decode
 * cases run through run_ragged (decode_ragged_cases). */
struct DecCase {
    int dt;
    int64_t B, Sq, Sk, Hq, Hkv, D;
    int causal;
    int64_t wl, wr, nsink;
    bool sinklog;
    double softcap;
    bool alibi, lse_null, negscale; /* negscale: softmax scale −1/√D */
};

static void run_decode(const DecCase &c, std::mt19937_64 &rng, const char *kern) {
    char nm[240];
    snprintf(nm, sizeof nm, "decode[%s] %s B%lld Sq%lld Sk%lld H%lld/%lld D%lld c%d w(%lld,%lld) ns%lld%s%s%s%s%s",
             kern, dname(c.dt), (long long)c.B, (long long)c.Sq, (long long)c.Sk, (long long)c.Hq, (long long)c.Hkv,
             (long long)c.D, c.causal, (long long)c.wl, (long long)c.wr, (long long)c.nsink, c.sinklog ? " sl" : "",
             c.softcap > 0 ? " cap" : "", c.alibi ? " alibi" : "", c.lse_null ? " nolse" : "",
             c.negscale ? " neg" : "");
    const std::string name = nm;
    setenv("FLASHC_CUDA_KERNEL", kern, 1);
    const int dt = c.dt, ldt = FLASHC_F32;
    const int64_t B = c.B, Hq = c.Hq, Hkv = c.Hkv, D = c.D;
    const int perm[4] = {0, 1, 2, 3}, lperm[3] = {0, 1, 2}, sp1[1] = {0};
    const int64_t qs[4] = {B, c.Sq, Hq, D}, ks[4] = {B, c.Sk, Hkv, D}, ls[3] = {B, Hq, c.Sq};
    Tensor q = make_tensor(dt, 4, qs, perm), o = make_tensor(dt, 4, qs, perm);
    Tensor k = make_tensor(dt, 4, ks, perm), v = make_tensor(dt, 4, ks, perm);
    Tensor lse = make_tensor(ldt, 3, ls, lperm);
    fill_random(q, rng);
    fill_random(k, rng);
    fill_random(v, rng);
    Tensor sl, al;
    std::vector<double> sinks, slopes;
    if (c.sinklog) {
        const int64_t ss[1] = {Hq};
        sl = make_tensor(ldt, 1, ss, sp1);
        sinks = fill_random(sl, rng, 2.0);
    }
    if (c.alibi) { /* [B, Hq] slopes */
        const int64_t as[2] = {B, Hq};
        const int ap[2] = {0, 1};
        al = make_tensor(ldt, 2, as, ap);
        slopes.resize(B * Hq);
        std::uniform_real_distribution<double> u(0.0, 0.05);
        for (int64_t e = 0; e < B * Hq; ++e) slopes[e] = put(ldt, &al.host[e * 4], u(rng));
        upload(al);
    }

    fc_attn a;
    memset(&a, 0, sizeof a);
    a.dtype = dt;
    a.B = B; a.Sq = c.Sq; a.Sk = c.Sk; a.Hq = Hq; a.Hkv = Hkv; a.D = D;
    a.q = q.ptr(); a.k = k.ptr(); a.v = v.ptr(); a.o = o.ptr();
    a.lse = c.lse_null ? nullptr : lse.ptr();
    memcpy(a.sq, q.str, 32); memcpy(a.sk, k.str, 32); memcpy(a.sv, v.str, 32); memcpy(a.so, o.str, 32);
    memcpy(a.slse, lse.str, 24);
    a.scale = (c.negscale ? -1.0 : 1.0) / sqrt((double)D);
    a.wl = c.wl;
    a.wr = c.causal ? 0 : c.wr;
    a.n_sink = c.nsink;
    a.sink_logits = c.sinklog ? sl.ptr() : nullptr;
    a.ssink = 1;
    a.softcap = c.softcap;
    a.alibi = c.alibi ? al.ptr() : nullptr;
    a.salibi[0] = Hq;
    a.salibi[1] = 1;
    a.deterministic = 1;

    /* float64 reference per batch entry: O [B][Sq][Hq][D], L [B][Hq][Sq] (the tensors' logical orders) */
    std::vector<double> Or, Lr;
    for (int64_t b = 0; b < B; ++b) {
        const std::vector<double> Q = rows_of(q, b, 0, c.Sq), K = rows_of(k, b, 0, c.Sk), V = rows_of(v, b, 0, c.Sk);
        std::vector<double> O(Q.size()), L((size_t)(Hq * c.Sq));
        const RefSeq r = {a.scale, c.softcap, a.wl, a.wr, a.n_sink, Hq, Hkv, D, c.sinklog ? sinks.data() : nullptr,
                          c.alibi ? &slopes[b * Hq] : nullptr};
        ref_seq_fwd(r, c.Sq, c.Sk, Q.data(), K.data(), V.data(), O.data(), L.data());
        Or.insert(Or.end(), O.begin(), O.end());
        Lr.insert(Lr.end(), L.begin(), L.end());
    }

    std::vector<unsigned char> o1, l1;
    for (int rep = 0; rep < (g_one_run ? 1 : 2); ++rep) {
        poison(o);
        poison(lse);
        CK(M->attn_fwd(&a));
        CK(M->synchronize());
        if (rep == 1) {
            download(o);
            download(lse);
            report(name, "determ", o.host == o1 && lse.host == l1 ? 0.0 : 1.0, 0.0, false);
            break;
        }
        const double cap_tol = c.softcap > 0 ? 2e-3 : 0.0; /* tanh.approx */
        report_rel(name, "O", read_logical(o), Or, attn_tol(dt, false) + cap_tol);
        if (!c.lse_null) {
            bool bad;
            const double le = lse_err(read_logical(lse), Lr, &bad);
            report(name, "LSE", le, 1e-4 + (cap_tol > 0 ? c.softcap * 1e-3 : 0.0), bad);
        } else {
            download(lse);
        }
        o1 = o.host;
        l1 = lse.host;
    }
    free_tensor(q); free_tensor(o); free_tensor(lse); free_tensor(k); free_tensor(v);
    if (c.sinklog) free_tensor(sl);
    if (c.alibi) free_tensor(al);
}

/* The dense decode cases: Sq ∈ {1, 4, 16} × G ∈ {1, 4, 8} over key counts
 * 1 … 70000 with the mask options and score modifiers taken in turn, D 128
 * mostly (64, 256 in turn). small: a subset that still splits the keys
 * (compute-sanitizer). */
static std::vector<DecCase> decode_cases(bool small) {
    std::vector<DecCase> v;
    /* dt, B, Sq, Sk, Hq, Hkv, D, causal, wl, wr, nsink, sinklog, softcap, alibi, lse_null, negscale */
    if (small) {
        v.push_back({FLASHC_BF16, 2, 1, 300, 8, 2, 128, 1, -1, -1, 0, true, 0, false, false, false});
        v.push_back({FLASHC_F16, 1, 4, 333, 8, 1, 64, 1, 40, -1, 2, false, 3.0, true, false, false});
        return v;
    }
    const int64_t sks[] = {1, 17, 100, 1000, 4097, 70000};
    struct Mk { int causal; int64_t wl, wr, ns; } masks[] = {
        {0, -1, -1, 0}, {1, -1, -1, 0}, {0, 64, 0, 0}, {0, 100, 8, 4}, {1, -1, -1, 3}, {0, 300, -1, 2}};
    int n = 0;
    for (int dt : {FLASHC_BF16, FLASHC_F16})
        for (int64_t Sq : {1, 4, 16})
            for (int64_t G : {1, 4, 8})
                for (int64_t Sk : sks) {
                    if (Sk == 70000 && Sq * G > 8) continue; /* the float64 reference's time */
                    if (Sk == 4097 && Sq * G > 32) continue;
                    const Mk &m = masks[n % 6];
                    const int mods = (n / 2) % 5; /* none, sink logits, softcap, ALiBi, all */
                    const int64_t D = (n % 7 == 3) ? 64 : (n % 11 == 5) ? 256 : 128;
                    const int64_t B = Sk >= 4097 ? 1 : 2, Hkv = Sk >= 4097 ? 1 : 2;
                    v.push_back({dt, B, Sq, Sk, G * Hkv, Hkv, D, m.causal, m.wl, m.wr, m.ns, mods == 1 || mods == 4,
                                 mods == 2 || mods == 4 ? 3.0 : 0.0, mods == 3 || mods == 4, n % 5 == 2, false});
                    ++n;
                }
    /* odd head dims (D % 8 ≠ 0: the plain-load path; D 100 padded to 128), a negative scale */
    v.push_back({FLASHC_BF16, 2, 1, 500, 8, 2, 7, 0, -1, -1, 0, true, 0, false, false, false});
    v.push_back({FLASHC_F16, 1, 3, 700, 12, 4, 100, 1, -1, -1, 0, false, 0, true, false, false});
    v.push_back({FLASHC_F16, 2, 1, 900, 4, 1, 128, 0, -1, -1, 0, false, 0, false, false, true});
    /* a 64-token chunk on few heads (row blocks) */
    v.push_back({FLASHC_BF16, 1, 64, 3000, 8, 2, 128, 1, -1, -1, 0, true, 0, false, false, false});
    /* the serving shape at memory bandwidth (B·Hkv = 128 CTAs, one split, every ring stage in
     * flight): a ring race that let a warp overtake a tile not yet landed faulted only here */
    v.push_back({FLASHC_BF16, 16, 1, 8192, 32, 8, 128, 0, -1, -1, 0, false, 0, false, false, false});
    return v;
}

/* Decode on the ragged layouts (run_ragged, forward through "auto"): the
 * issue's serving shape (Hq 32, Hkv 8) on 16-key pages with a one-token
 * append, pages of 32 and 256, pages of 5 and 1 (a lookup per key row), a
 * KV cache with cache_batch_idx and a window, a chunk of 8 tokens at G = 8
 * (64 rows), varlen decode rows; sequences of length 0 among them. */
static std::vector<RagCase> decode_ragged_cases(bool small) {
    std::vector<RagCase> v;
    /* dt, kind, sq, sk, Hq, Hkv, D, causal, wl, wr, nsink, sinklog, softcap, alibi, page, snew, det, extra_q */
    v.push_back({FLASHC_BF16, RAG_PAGED, {1}, {700, 0, 333}, 8, 2, 128, 1, -1, -1, 0, true, 0, false, 16, 1, 1, 0});
    v.push_back({FLASHC_F16, RAG_PAGED, {1}, {300, 41}, 4, 2, 64, 0, -1, -1, 0, false, 0, false, 5, 0, 1, 0});
    if (small) return v;
    v.push_back({FLASHC_BF16, RAG_PAGED, {1}, {3000, 0, 1777, 15, 333}, 32, 8, 128, 1, -1, -1, 0, true, 0, false, 16, 1, 1, 0});
    v.push_back({FLASHC_F16, RAG_PAGED, {1}, {2000, 5, 999}, 8, 2, 128, 1, -1, -1, 0, false, 3.0, false, 32, 1, 1, 0});
    v.push_back({FLASHC_BF16, RAG_PAGED, {4}, {1500, 0, 700}, 8, 2, 64, 1, -1, -1, 0, false, 3.0, true, 256, 4, 1, 0});
    v.push_back({FLASHC_F16, RAG_PAGED, {1}, {900, 300}, 4, 2, 128, 0, -1, -1, 2, true, 0, false, 5, 0, 1, 0});
    v.push_back({FLASHC_BF16, RAG_PAGED, {16}, {1000, 64}, 8, 2, 128, 1, -1, -1, 0, false, 0, false, 1, 16, 1, 0});
    v.push_back({FLASHC_BF16, RAG_CBI, {1}, {4000, 10, 2500}, 16, 2, 128, 0, 300, 0, 4, true, 0, true, 0, 1, 1, 0});
    v.push_back({FLASHC_F16, RAG_CACHE, {8}, {3000, 100}, 16, 2, 128, 1, -1, -1, 0, true, 0, false, 0, 8, 1, 0});
    v.push_back({FLASHC_BF16, RAG_VARLEN, {1, 16, 0, 4}, {5000, 300, 7, 0}, 8, 2, 128, 1, -1, -1, 0, true, 0, false, 0, 0, 1, 0});
    return v;
}

/* ------------------------------------------ --sanitize (compute-sanitizer) */
/* On top of --small: shapes that take every fast attention kernel through
 * partial tiles (S not a multiple of 64 or 128), masks (causal with
 * Sq ≠ Sk, sliding windows, fully masked rows and whole masked CTAs, sink
 * tokens, sink logits), score modifiers (softcap, ALiBi, a negative scale),
 * GQA and MQA, F16 and BF16, head dims 64, 96, 128, 192, 256, forward and
 * backward; the kernel each case reaches on an H100 (cc 9.0, 132 SMs:
 * fcc_plan_fwd/_bwd in attn_dispatch.cu and the kernels' supports()) is
 * noted beside it. race (--sanitize --tiny, for racecheck, whose cost grows
 * with every shared-memory access, and races live inside one CTA): one
 * batch entry and one K/V head (the same group size), no generic runs, no
 * second (determinism) run. */
static void run_sanitize(std::mt19937_64 &rng, bool race) {
    const int BF = FLASHC_BF16, F = FLASHC_F16, F32 = FLASHC_F32;
    g_one_run = race;
    /* dt, B, Sq, Sk, Hq, Hkv, D, causal, wl, wr, nsink, sinklog, lse_null, bhsd, flip, bcast,
     * softcap, alibi, det, vpad; then whether "auto" runs the wgmma forward (then "mma" runs the
     * mma.sync forward and backward on the same case). "auto" runs forward + backward; the
     * backward is the wgmma kernel (attn_bwd_wgmma.cu) on cc 9.0 wherever the tc bwd is noted
     * and D % 8 == 0 with TMA-able strides (the atomic-dQ case: its atomic variant). */
    struct Dense { AttnCase c; bool wgmma; };
    const Dense dense[] = {
        /* wgmma fwd (plain) / mma fwd HD64 / tc bwd: 77 rows (one partial 128-row CTA), 200 keys, causal Sq < Sk */
        {{BF, 2, 77, 200, 4, 2, 64, 1, -1, -1, 0, true, false, false, false, false, 0.0, false, 1, false}, true},
        /* wgmma fwd (modifiers) / mma HD128 / tc bwd: BHSD, MQA, window (50, 20) with Sq > Sk: rows
         * 0..182 see nothing (whole masked CTAs), sink tokens, ALiBi */
        {{F, 1, 333, 130, 4, 1, 128, 0, 50, 20, 3, false, false, true, false, false, 0.0, true, 1, false}, true},
        /* wgmma fwd (modifiers) / mma HD128 / tc bwd: causal Sq < Sk, softcap, sink logits */
        {{BF, 1, 200, 333, 4, 2, 128, 1, -1, -1, 0, true, false, false, false, false, 5.0, false, 1, false}, true},
        /* wgmma fwd (modifiers) / mma HD64 / tc bwd: sliding window (16, 0), Sq > Sk (rows 0..52 get
         * only the sink logit), sink tokens, softcap, ALiBi */
        {{F, 2, 130, 77, 2, 2, 64, 0, 16, 0, 2, true, false, false, false, false, 3.0, true, 1, false}, true},
        /* D 96: wgmma fwd HD128 (zero-padded by the maps) / mma fwd HD96 (64-row CTAs, 100 = 64 + 36)
         * / wgmma bwd HD128 (padded) */
        {{BF, 1, 100, 150, 4, 2, 96, 1, -1, -1, 2, false, false, false, false, false, 0.0, false, 1, false}, true},
        /* D 256: wgmma fwd HD256 (64-key tiles, modifiers) / mma fwd HD256 / wgmma bwd HD256 (64-key
         * blocks; "mma": tc bwd HD256, two column slices per row group) */
        {{F, 1, 77, 90, 2, 1, 256, 0, -1, -1, 0, false, false, false, false, false, 0.0, true, 1, false}, true},
        /* D 192: wgmma fwd HD192 (64-key tiles) / mma fwd HD192 (modifiers) / wgmma bwd HD192 (64-key
         * blocks, n64 + n32 column pieces; "mma": tc bwd HD192, two column slices): causal window 40, sink tokens and logits, softcap */
        {{BF, 1, 130, 200, 4, 2, 192, 1, 40, -1, 2, true, false, false, false, false, 4.0, false, 1, false}, true},
        /* wgmma fwd / mma HD64 / tc bwd with the atomic dQ (deterministic 0, HD 64, Sk ≥ 2048),
         * causal + window 256 */
        {{BF, 1, 100, 2100, 2, 1, 64, 1, 256, -1, 0, false, false, false, false, false, 0.0, false, 0, false}, true},
        /* split-KV decode fwd (Sq ≤ 64, B·Hq < 132 SMs; 80 rows per kv head: MT 2) / tc bwd HD128 */
        {{F, 2, 40, 333, 4, 2, 128, 1, 100, -1, 2, true, false, false, false, false, 0.0, false, 1, false}, false},
        /* wgmma bwd with key block 0 split over 4 CTAs (sink tokens under a window: every row sees
         * it; Split in attn_bwd_wgmma.cu) / tc bwd: 600 rows, causal window 30, 2 sink tokens */
        {{BF, 1, 600, 600, 2, 1, 64, 1, 30, 0, 2, false, false, false, false, false, 0.0, false, 1, false}, true},
        /* the same at HD 256 (64-key blocks: block 0 split over 7 CTAs) */
        {{BF, 1, 600, 600, 2, 1, 256, 1, 30, 0, 2, false, false, false, false, false, 0.0, false, 1, false}, true},
        /* wgmma bwd HD256 with the unordered dQ (deterministic 0), D 200 (padded to 256), softcap, sink
         * logits, Sq < Sk / tc bwd HD256 */
        {{F, 1, 200, 333, 4, 2, 200, 0, -1, -1, 0, true, false, false, false, false, 5.0, false, 0, false}, true},
        /* wgmma fwd with 176-key tiles (every row sees every key, Sk ≥ 4096; wg_wide): the last
         * tile partly past Sk; softcap alone with sink logits (the fixed-max instance), and D 96
         * plain / tc bwd */
        {{BF, 1, 70, 4100, 4, 2, 128, 0, -1, -1, 0, true, false, false, false, false, 5.0, false, 1, false}, true},
        {{F, 1, 70, 4177, 2, 1, 96, 0, -1, -1, 0, false, false, false, false, false, 0.0, false, 1, false}, true},
        /* F32 (3xTF32 tensor cores): mma fwd HD64 / tc bwd HD64 (32-row and 32-key tiles): causal
         * Sq < Sk, sink logits, partial tiles */
        {{F32, 2, 77, 200, 4, 2, 64, 1, -1, -1, 0, true, false, false, false, false, 0.0, false, 1, false}, false},
        /* F32 mma fwd HD128 / tc bwd HD128 (single-buffered): MQA, window (16, 0) with Sq > Sk (rows
         * 0..52 get only the sink logit), sink tokens, softcap (accurate tanh), ALiBi */
        {{F32, 1, 130, 77, 4, 1, 128, 0, 16, 0, 2, true, false, false, false, false, 3.0, true, 1, false}, false},
        /* F32 D 40 (HD64, zero-padded columns), BHSD, causal with Sq > Sk, sink tokens */
        {{F32, 1, 100, 70, 2, 1, 40, 1, -1, -1, 3, false, false, true, false, false, 0.0, false, 1, false}, false},
        /* mma fwd HD64 where wgmma refuses (a broadcast k: batch stride 0, no TMA map) / tc bwd;
         * 65 rows and 129 keys: one past a tile */
        {{BF, 2, 65, 129, 4, 2, 64, 0, -1, -1, 0, false, false, false, false, true, 0.0, false, 1, false}, false},
    };
    for (const Dense &d : dense) {
        AttnCase c = d.c;
        if (race) {
            c.Hq /= c.Hkv;
            c.Hkv = 1;
            if (!c.bcast) c.B = 1; /* (a broadcast k keeps B = 2: with B = 1 wgmma would take it) */
        }
        run_attn(c, rng, "auto");
        if (d.wgmma) run_attn(c, rng, "mma", !race);
        if (!race) run_attn(c, rng, "generic");
    }
    /* split-KV decode, dense (run_decode, forward, twice): dt, B, Sq, Sk, Hq, Hkv, D, causal,
     * wl, wr, nsink, sinklog, softcap, alibi, lse_null, negscale */
    const DecCase dec[] = {
        /* HD256, many splits over 1999 keys (window (700, 3)), sink tokens and logits, negative scale */
        {F, 2, 3, 1999, 8, 2, 256, 0, 700, 3, 2, true, 0.0, false, false, true},
        /* HD128, 64 rows per kv head (MT 2), causal, softcap, ALiBi, lse NULL */
        {BF, 1, 16, 777, 8, 2, 128, 1, -1, -1, 0, false, 2.0, true, true, false},
        /* the TMA kernel on cc 9.0 (MT 1, HD ≤ 128): HD128 G 4, splits over a window (300, −1) with
         * sink tokens and logits, keys not a multiple of the 32-key tile; HD64 (D 40), softcap and ALiBi */
        {BF, 1, 1, 1001, 8, 2, 128, 1, 300, -1, 3, true, 0.0, false, false, false},
        {F, 1, 2, 333, 8, 2, 40, 0, -1, -1, 0, false, 3.0, true, false, false},
    };
    /* "auto" (the TMA kernel on cc 9.0 where it applies), then "mma" (the cp.async kernel) */
    for (const DecCase &c : dec) {
        run_decode(c, rng, "auto");
        if (!race) run_decode(c, rng, "mma");
    }
    /* ragged ("auto", then "generic" unless race): dt, kind, sq, sk, Hq, Hkv, D, causal, wl, wr,
     * nsink, sinklog, softcap, alibi, page, snew, det, extra_q */
    const std::vector<RagCase> rag = {
        /* varlen: mma fwd (ragged, modifiers) / tc bwd (ragged; on cc 9.0 the wgmma fwd and the
         * wgmma bwd's packed-sequence instances) + gap zeros: 77, 0, 130 rows, window (40, 0), sink
         * tokens and logits, softcap, ALiBi */
        {F, RAG_VARLEN, {77, 0, 130}, {200, 5, 130}, 4, 2, 128, 0, 40, 0, 2, true, 4.0, true, 0, 0, 1, 0},
        /* varlen F32: mma fwd (ragged, 3xTF32) / tc bwd HD128 F32 (ragged) */
        {F32, RAG_VARLEN, {77, 0, 40}, {90, 5, 130}, 4, 2, 128, 1, -1, -1, 2, true, 2.0, true, 0, 0, 1, 0},
        /* varlen, D 256: mma fwd (ragged) / tc bwd HD256 (ragged, two column slices), causal, sink
         * logits, ALiBi */
        {F, RAG_VARLEN, {77, 0, 65}, {100, 5, 130}, 4, 2, 256, 1, -1, -1, 0, true, 0.0, true, 0, 0, 1, 0},
        /* varlen: mma fwd / tc bwd with the atomic dQ (longest key sequence 2100), causal + window 256 */
        {BF, RAG_VARLEN, {100, 3}, {2100, 7}, 2, 1, 64, 1, 256, -1, 0, false, 0.0, false, 0, 0, 0, 0},
        /* KV cache rows: append of 77 tokens, mma fwd (ragged), causal */
        {BF, RAG_CACHE, {77}, {0, 130, 200}, 4, 2, 64, 1, -1, -1, 0, false, 0.0, false, 0, 77, 1, 0},
        /* paged (16-key pages): append of 5, split-KV decode (ragged, modifiers), MQA */
        {F, RAG_PAGED, {5}, {333, 77}, 4, 1, 128, 1, -1, -1, 0, true, 3.0, true, 16, 5, 1, 0},
        /* cache_batch_idx: append of 70, mma fwd (ragged), window (50, 0), sink tokens */
        {BF, RAG_CBI, {70}, {10, 130}, 4, 2, 64, 1, 50, 0, 4, false, 0.0, false, 0, 70, 1, 0},
    };
    for (const RagCase &c : rag) {
        run_ragged(c, rng, "auto");
        if (!race) run_ragged(c, rng, "generic");
    }
    /* GPUs with less shared memory per block (FLASHC_CUDA_SMEM_LIMIT): at 99 KB the tc backward
     * single-buffered (HD 128 BF16; F32 HD 96 and 128, the latter's L/Δ in the Q rows' pad; ragged
     * F32 HD 128 the generic kernel: its key-row tables are 1 KB past the limit), the mma fwd's
     * small tiles (ragged HD 256) and the generic kernels' small tiles; at 48 KB the generic
     * kernels streaming head-dim chunks (F32 D 256, F64 D 200, BF16 backward at D 192) and the mma
     * fwd's small tiles at HD 128. */
    const int F64 = FLASHC_F64;
    const AttnCase lim_dense[] = {
        {BF, 1, 77, 130, 4, 2, 128, 1, -1, -1, 2, true, false, false, false, false, 3.0, false, 1, false},
        {F32, 1, 50, 70, 2, 1, 256, 0, 30, 5, 2, true, false, false, false, false, 0.0, true, 1, false},
        {F32, 1, 77, 130, 4, 2, 128, 1, -1, -1, 2, true, false, false, false, false, 2.0, false, 1, false},
        {F32, 1, 70, 90, 2, 1, 96, 0, 30, 5, 1, false, false, false, false, false, 0.0, true, 1, false},
        {F64, 1, 40, 45, 2, 2, 200, 1, -1, -1, 0, true, false, false, false, false, 0.0, false, 1, false},
        {BF, 1, 33, 70, 2, 1, 192, 0, 20, 20, 1, false, false, false, false, false, 0.0, false, 1, false},
    };
    const RagCase lim_rag[] = {
        {F, RAG_VARLEN, {37, 0, 65}, {50, 5, 100}, 2, 1, 256, 1, -1, -1, 0, true, 0.0, false, 0, 0, 1, 0},
        {F32, RAG_VARLEN, {37, 0, 65}, {50, 5, 100}, 2, 1, 128, 1, -1, -1, 0, true, 0.0, false, 0, 0, 1, 0},
    };
    for (const char *lim : {"101376", "49152"}) {
        setenv("FLASHC_CUDA_SMEM_LIMIT", lim, 1);
        for (const AttnCase &c : lim_dense) run_attn(c, rng, "auto");
        for (const RagCase &c : lim_rag) run_ragged(c, rng, "auto");
    }
    unsetenv("FLASHC_CUDA_SMEM_LIMIT");
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

/* The decode shapes of issue 9 (bf16, Hq 32, Hkv 8, D 128, one query token
 * per sequence) through the plan, next to a device copy moving as many bytes
 * (bytes = K + V read + Q read + O written; the copy reads and writes half of
 * that each). Rows of JSON into `json` (no brackets). */
static void bench_decode(FILE *json, void *fill, size_t fill_bytes) {
    setenv("FLASHC_CUDA_KERNEL", "auto", 1);
    struct { int64_t B, Sk; } shapes[] = {{1, 8192}, {16, 8192}, {64, 4096}, {4, 65536}};
    const int64_t Hq = 32, Hkv = 8, D = 128, es = 2;
    bool firstj = true;
    for (auto &s : shapes) {
        const size_t kvb = (size_t)(s.B * s.Sk * Hkv * D * es), qb = (size_t)(s.B * Hq * D * es);
        void *k, *v, *q, *o, *lse, *dst;
        CK(M->malloc_(&k, kvb));
        CK(M->malloc_(&v, kvb));
        CK(M->malloc_(&q, qb));
        CK(M->malloc_(&o, qb));
        CK(M->malloc_(&lse, (size_t)(s.B * Hq) * 4));
        for (void *p : {k, v, q})
            for (size_t off = 0, n = p == q ? qb : kvb; off < n; off += fill_bytes)
                CK(M->memcpy_((char *)p + off, fill, std::min(fill_bytes, n - off), FLASHC_MEMCPY_DEVICE_TO_DEVICE));
        const double bytes = 2.0 * kvb + 2.0 * qb;
        fc_attn x;
        memset(&x, 0, sizeof x);
        x.dtype = FLASHC_BF16; x.B = s.B; x.Sq = 1; x.Sk = s.Sk; x.Hq = Hq; x.Hkv = Hkv; x.D = D;
        x.q = q; x.k = k; x.v = v; x.o = o; x.lse = lse;
        const int64_t sq[4] = {Hq * D, Hq * D, D, 1}, sk[4] = {s.Sk * Hkv * D, Hkv * D, D, 1};
        memcpy(x.sq, sq, 32); memcpy(x.so, sq, 32); memcpy(x.sk, sk, 32); memcpy(x.sv, sk, 32);
        x.slse[0] = Hq; x.slse[1] = 1; x.slse[2] = 1;
        x.scale = 1 / sqrt((double)D); x.wl = -1; x.wr = -1; x.deterministic = 1;
        const double t = median_time([&] { CK(M->attn_fwd(&x)); }, 20, 9);
        const size_t half = (size_t)(bytes / 2) & ~(size_t)255;
        CK(M->malloc_(&dst, half));
        const double tc = median_time([&] { CK(M->memcpy_(dst, k, std::min(half, kvb), FLASHC_MEMCPY_DEVICE_TO_DEVICE));
                                            if (half > kvb) CK(M->memcpy_((char *)dst + kvb, v, half - kvb, FLASHC_MEMCPY_DEVICE_TO_DEVICE)); },
                                      20, 9);
        const double gbs = bytes / t / 1e9, cgbs = 2.0 * half / tc / 1e9;
        printf("BENCH decode bf16 B=%-3lld Sk=%-6lld Hq=%lld Hkv=%lld D=%lld  %8.1f us %7.1f GB/s | copy %8.1f us %7.1f GB/s | %.0f%% of copy\n",
               (long long)s.B, (long long)s.Sk, (long long)Hq, (long long)Hkv, (long long)D, t * 1e6, gbs, tc * 1e6,
               cgbs, 100 * gbs / cgbs);
        fprintf(json, "%s{\"B\": %lld, \"Sk\": %lld, \"Hq\": %lld, \"Hkv\": %lld, \"D\": %lld, \"bytes\": %.0f, "
                      "\"us\": %.2f, \"gbs\": %.1f, \"copy_us\": %.2f, \"copy_gbs\": %.1f}",
                firstj ? "" : ", ", (long long)s.B, (long long)s.Sk, (long long)Hq, (long long)Hkv, (long long)D,
                bytes, t * 1e6, gbs, tc * 1e6, cgbs);
        firstj = false;
        for (void *p : {k, v, q, o, lse, dst}) M->free_(p);
    }
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
    fprintf(json, "], \"decode\": [");
    bench_decode(json, a, bytes);
    fprintf(json, "]}\n");
    M->free_(a);
    M->free_(b);
}

/* -------------------------------------------------------------- main */
int main(int argc, char **argv) {
    bool small = false, tiny = false, do_bench = false, sanitize = false;
    const char *json_path = "selftest-bench.json";
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--small")) small = true;
        else if (!strcmp(argv[i], "--tiny")) tiny = small = true; /* racecheck: f32 + bf16, one case each */
        else if (!strcmp(argv[i], "--sanitize")) sanitize = small = true; /* + run_sanitize (at --tiny's scale with it) */
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
    /* decode: "auto" runs the TMA kernel on cc 9.0 (attn_decode_tma.cu), "mma" the cp.async one */
    if (!tiny) {
        for (auto &c : decode_cases(small))
            for (const char *k : {"auto", "mma"}) run_decode(c, rng, k);
        for (auto &c : decode_ragged_cases(small))
            for (const char *k : {"auto", "mma"}) run_ragged(c, rng, k);
    } else {
        run_decode(decode_cases(true)[0], rng, "auto");
        run_ragged(decode_ragged_cases(true)[0], rng, "auto");
    }
    { /* ragged batches (attn_ragged.cuh); --tiny: two of them on the mma.sync kernels (racecheck) */
        const std::vector<RagCase> rc = ragged_cases(small);
        for (size_t i = 0; i < rc.size(); ++i) {
            const RagCase &c = rc[i];
            const bool half = c.dt == FLASHC_F16 || c.dt == FLASHC_BF16;
            if (tiny && !(half && (i == 0 || i == 2))) continue;
            if (!tiny) run_ragged(c, rng, "generic");
            if (half) run_ragged(c, rng, "auto");
        }
        if (!tiny) {
            run_ragged_clamps(rng, "generic");
            run_ragged_clamps(rng, "auto");
        }
    }
    if (sanitize) run_sanitize(rng, tiny);

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
