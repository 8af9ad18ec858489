/* flashc_attn_fwd / flashc_attn_bwd: validate the call, fold params into the
 * normalised problem (fc_attn), pick the backend, run it. The parts that
 * every attention entry point shares — params and options, lse, gradients,
 * backend resolution, the run — are the fc_attn_* functions declared in
 * core.h; attention_ragged.c (varlen, KV cache) uses them too. */
#include "core.h"
#include "common/host_prof.h"

#include <math.h>
#include <string.h>

#ifdef FLASHC_HOST_PROF
static _Thread_local uint64_t fc_prof_marks[FC_PROF_N];
FLASHC_API uint64_t *flashc_host_prof_marks(void) { return fc_prof_marks; }
#endif

const char *const FC_AXES4[4] = {"B", "S", "H", "D"};
const char *const FC_AXES3[3] = {"T", "H", "D"};

flashc_status fc_attn_read_params(const flashc_attn_params *user, flashc_attn_params *p) {
    *p = flashc_attn_params_default();
    if (!user) return FLASHC_OK;
    /* Sizes this library knows: 0.1 (up to `stream`) and the current one.
     * Fields a shorter struct lacks keep their defaults. */
    FC_RETURN_IF(user->struct_size != sizeof(flashc_attn_params) && user->struct_size != FLASHC_ATTN_PARAMS_SIZE_V1,
                 FLASHC_ERR_PARAMS_SIZE,
                 "params.struct_size=%u, this library's flashc_attn_params is %zu bytes (or %u for a 0.1 caller); "
                 "initialise with flashc_attn_params_default()",
                 user->struct_size, sizeof(flashc_attn_params), (unsigned)FLASHC_ATTN_PARAMS_SIZE_V1);
    memcpy(p, user, user->struct_size);
    p->struct_size = sizeof(flashc_attn_params);
    return FLASHC_OK;
}

flashc_status fc_attn_head_vector(const flashc_tensor *t, const char *name, const fc_attn *a, int allow_batch,
                                  int is_output, int64_t str[2]) {
    FC_RETURN_IF(!t, FLASHC_ERR_NULL_POINTER, "%s is NULL", name);
    FC_RETURN_IF(t->ndim != 1 && !(allow_batch && t->ndim == 2), FLASHC_ERR_SHAPE,
                 "%s.ndim=%d, expected %s", name, (int)t->ndim, allow_batch ? "1 ([Hq]) or 2 ([B, Hq])" : "1 ([Hq])");
    FC_TRY(fc_check_tensor(t, name, t->ndim, is_output));
    const int want = a->dtype == FLASHC_F64 ? FLASHC_F64 : FLASHC_F32;
    FC_RETURN_IF(t->dtype != want, FLASHC_ERR_DTYPE, "%s.dtype=%s, expected %s for %s inputs", name,
                 fc_dtype_name(t->dtype), fc_dtype_name(want), fc_dtype_name(a->dtype));
    const int hax = t->ndim - 1;
    FC_RETURN_IF(t->shape[hax] != a->Hq, FLASHC_ERR_SHAPE, "%s.shape[%d]=%lld must equal Hq=%lld", name, hax,
                 (long long)t->shape[hax], (long long)a->Hq);
    if (t->ndim == 2)
        FC_RETURN_IF(t->shape[0] != a->B, FLASHC_ERR_SHAPE, "%s.shape[0]=%lld must equal B=%lld ([B, Hq])", name,
                     (long long)t->shape[0], (long long)a->B);
    str[0] = t->ndim == 2 ? t->strides[0] : 0;
    str[1] = t->strides[hax];
    return FLASHC_OK;
}

/* On the CPU backend the slopes are host memory: they must be finite.
 * (On CUDA they are device memory and are not inspected.) */
static flashc_status check_alibi_finite(const fc_attn *a) {
    if (!a->alibi) return FLASHC_OK;
    const int64_t nb = a->salibi[0] != 0 ? a->B : 1;
    for (int64_t b = 0; b < nb; ++b)
        for (int64_t h = 0; h < a->Hq; ++h) {
            const int64_t o = b * a->salibi[0] + h * a->salibi[1];
            const double x = a->dtype == FLASHC_F64 ? ((const double *)a->alibi)[o]
                                                    : (double)((const float *)a->alibi)[o];
            FC_RETURN_IF(!isfinite(x), FLASHC_ERR_INVALID_ARGUMENT, "alibi_slopes[%lld, %lld]=%g is not finite",
                         (long long)b, (long long)h, x);
        }
    return FLASHC_OK;
}

/* An empty tensor's strides are never checked (nothing is read or written),
 * so the problem gets zeros instead: no kernel then forms an offset from
 * them, even for a row it skips. A packed tensor (one axis fewer) gets a 0
 * batch stride in front. */
void fc_attn_strides(int64_t *dst, int n, const flashc_tensor *t) {
    const int empty = fc_numel(t) == 0, lead = n - t->ndim;
    for (int i = 0; i < n; ++i) dst[i] = empty || i < lead ? 0 : t->strides[i - lead];
}

void fc_attn_bind_qkvo(fc_attn *a, const flashc_tensor *q, const flashc_tensor *k, const flashc_tensor *v,
                       const flashc_tensor *o) {
    a->q = q->data;
    a->k = k->data;
    a->v = v->data;
    a->o = o->data;
    fc_attn_strides(a->sq, 4, q);
    fc_attn_strides(a->sk, 4, k);
    fc_attn_strides(a->sv, 4, v);
    fc_attn_strides(a->so, 4, o);
}

flashc_status fc_expect_shape(const flashc_tensor *t, const char *name, const flashc_tensor *ref, const char *like,
                              const char *const *axes) {
    FC_RETURN_IF(t->ndim != ref->ndim, FLASHC_ERR_SHAPE, "%s.ndim=%d must equal %s.ndim=%d", name, (int)t->ndim,
                 like, (int)ref->ndim);
    for (int i = 0; i < ref->ndim; ++i)
        FC_RETURN_IF(t->shape[i] != ref->shape[i], FLASHC_ERR_SHAPE,
                     "%s.shape[%d]=%lld (%s) must equal %s's %lld", name, i, (long long)t->shape[i], axes[i],
                     like, (long long)ref->shape[i]);
    return FLASHC_OK;
}

flashc_status fc_attn_heads(fc_attn *a, const flashc_tensor *q, int qh, const flashc_tensor *k, const char *kname,
                            int kh) {
    a->Hq = q->shape[qh];
    a->D = q->shape[qh + 1];
    a->Hkv = k->shape[kh];
    FC_RETURN_IF(a->Hq < 1, FLASHC_ERR_SHAPE, "q.shape[%d]=%lld (Hq) must be >= 1", qh, (long long)a->Hq);
    FC_RETURN_IF(a->Hkv < 1, FLASHC_ERR_SHAPE, "%s.shape[%d]=%lld (Hkv) must be >= 1", kname, kh, (long long)a->Hkv);
    FC_RETURN_IF(a->D < 1 || a->D > 256, FLASHC_ERR_INVALID_ARGUMENT,
                 "q.shape[%d]=%lld (head dim D) must be in 1..256", qh + 1, (long long)a->D);
    FC_RETURN_IF(k->shape[kh + 1] != a->D, FLASHC_ERR_SHAPE, "%s.shape[%d]=%lld (D) must equal q.shape[%d]=%lld",
                 kname, kh + 1, (long long)k->shape[kh + 1], qh + 1, (long long)a->D);
    FC_RETURN_IF(a->Hq % a->Hkv != 0, FLASHC_ERR_SHAPE, "q.shape[%d]=%lld is not a multiple of %s.shape[%d]=%lld", qh,
                 (long long)a->Hq, kname, kh, (long long)a->Hkv);
    return FLASHC_OK;
}

flashc_status fc_attn_options(const flashc_attn_params *p, fc_attn *a) {
    FC_RETURN_IF(!isfinite(p->softmax_scale), FLASHC_ERR_INVALID_ARGUMENT, "params.softmax_scale=%g is not finite",
                 p->softmax_scale);
    /* flashc.h, "Scores": beyond the bound the logits' rounding in the
     * compute type exceeds 1 in the exponent, and the backward's recomputed
     * P = exp(x − L) is meaningless (at ~1e38 the scale overflows fp32). */
    FC_RETURN_IF(fabs(p->softmax_scale) > FLASHC_SOFTMAX_SCALE_MAX, FLASHC_ERR_INVALID_ARGUMENT,
                 "params.softmax_scale=%g: |softmax_scale| must be <= FLASHC_SOFTMAX_SCALE_MAX=%g (larger scales "
                 "overflow or lose the precision of the compute type)",
                 p->softmax_scale, FLASHC_SOFTMAX_SCALE_MAX);
    a->scale = p->softmax_scale != 0.0 ? p->softmax_scale : 1.0 / sqrt((double)a->D);
    FC_RETURN_IF(p->causal != 0 && p->causal != 1, FLASHC_ERR_INVALID_ARGUMENT, "params.causal=%d must be 0 or 1",
                 (int)p->causal);
    FC_RETURN_IF(p->window_left < -1, FLASHC_ERR_INVALID_ARGUMENT,
                 "params.window_left=%lld must be >= -1 (-1 = unbounded)", (long long)p->window_left);
    FC_RETURN_IF(p->window_right < -1, FLASHC_ERR_INVALID_ARGUMENT,
                 "params.window_right=%lld must be >= -1 (-1 = unbounded)", (long long)p->window_right);
    FC_RETURN_IF(p->causal && p->window_right > 0, FLASHC_ERR_INVALID_ARGUMENT,
                 "params.causal=1 with window_right=%lld: causal is window (L, 0), so window_right must be -1 or 0",
                 (long long)p->window_right);
    FC_RETURN_IF(p->num_sink_tokens < 0, FLASHC_ERR_INVALID_ARGUMENT, "params.num_sink_tokens=%lld must be >= 0",
                 (long long)p->num_sink_tokens);
    FC_RETURN_IF(p->deterministic != 0 && p->deterministic != 1, FLASHC_ERR_INVALID_ARGUMENT,
                 "params.deterministic=%d must be 0 or 1", (int)p->deterministic);
    a->wl = p->window_left;
    a->wr = p->causal ? 0 : p->window_right;
    a->n_sink = p->num_sink_tokens;

    /* Sink logits: the 0.2 tensor, or the 0.1 bare pointer ([Hq] contiguous). */
    FC_RETURN_IF(p->sinks && p->sink_logits, FLASHC_ERR_INVALID_ARGUMENT,
                 "params.sinks and params.sink_logits are both set: give the sink logits once");
    if (p->sinks) {
        int64_t str[2];
        FC_TRY(fc_attn_head_vector(p->sinks, "sinks", a, 0, 0, str));
        a->sink_logits = p->sinks->data;
        a->ssink = str[1];
    } else if (p->sink_logits) {
        a->sink_logits = p->sink_logits;
        a->ssink = 1;
    }

    FC_RETURN_IF(!isfinite(p->softcap) || p->softcap < 0.0, FLASHC_ERR_INVALID_ARGUMENT,
                 "params.softcap=%g must be finite and >= 0 (0 = off)", p->softcap);
    a->softcap = p->softcap;
    if (p->alibi_slopes) {
        FC_TRY(fc_attn_head_vector(p->alibi_slopes, "alibi_slopes", a, 1, 0, a->salibi));
        a->alibi = p->alibi_slopes->data;
        /* A [B, Hq] tensor with B = 1 and a zero batch stride reads as [Hq]: same slopes. */
    }
    a->deterministic = p->deterministic;
    a->stream = p->stream;
    return FLASHC_OK;
}

flashc_status fc_attn_lse(const flashc_tensor *lse, fc_attn *a, int ndim, const int64_t *want,
                          const char *const *axes, const char *layout, int is_output) {
    FC_TRY(fc_check_tensor(lse, "lse", ndim, is_output));
    const int dt = a->dtype == FLASHC_F64 ? FLASHC_F64 : FLASHC_F32;
    FC_RETURN_IF(lse->dtype != dt, FLASHC_ERR_DTYPE, "lse.dtype=%s, expected %s for %s inputs",
                 fc_dtype_name(lse->dtype), fc_dtype_name(dt), fc_dtype_name(a->dtype));
    for (int i = 0; i < ndim; ++i)
        FC_RETURN_IF(lse->shape[i] != want[i], FLASHC_ERR_SHAPE, "lse.shape[%d]=%lld must equal %s=%lld (lse is %s)",
                     i, (long long)lse->shape[i], axes[i], (long long)want[i], layout);
    a->lse = lse->data;
    fc_attn_strides(a->slse, 3, lse);
    return FLASHC_OK;
}

flashc_status fc_attn_grads(fc_attn *a, const flashc_attn_params *p, const flashc_tensor *dout,
                            const flashc_tensor *q, const flashc_tensor *k, const flashc_tensor *v,
                            const flashc_tensor *dq, const flashc_tensor *dk, const flashc_tensor *dv, void *dsinks,
                            int has_dsinks_arg, const char *const *axes) {
    const int nd = q->ndim;
    FC_TRY(fc_check_tensor(dout, "dout", nd, 0));
    FC_TRY(fc_check_tensor(dq, "dq", nd, 1));
    FC_TRY(fc_check_tensor(dk, "dk", nd, 1));
    FC_TRY(fc_check_tensor(dv, "dv", nd, 1));
    FC_RETURN_IF(dout->dtype != a->dtype || dq->dtype != a->dtype || dk->dtype != a->dtype || dv->dtype != a->dtype,
                 FLASHC_ERR_DTYPE, "dout, dq, dk, dv must have q's dtype %s (got %s, %s, %s, %s)",
                 fc_dtype_name(a->dtype), fc_dtype_name(dout->dtype), fc_dtype_name(dq->dtype),
                 fc_dtype_name(dk->dtype), fc_dtype_name(dv->dtype));
    FC_TRY(fc_expect_shape(dout, "dout", q, "q", axes));
    FC_TRY(fc_expect_shape(dq, "dq", q, "q", axes));
    FC_TRY(fc_expect_shape(dk, "dk", k, "k", axes));
    FC_TRY(fc_expect_shape(dv, "dv", v, "v", axes));
    FC_RETURN_IF(p->dsinks && dsinks, FLASHC_ERR_INVALID_ARGUMENT,
                 "params.dsinks and the dsinks argument are both set: give the sink gradient once");
    FC_RETURN_IF(a->sink_logits && !dsinks && !p->dsinks, FLASHC_ERR_NULL_POINTER,
                 has_dsinks_arg ? "the sink logits are set but neither params.dsinks nor the dsinks argument is: "
                                  "the backward writes d(sink logits) [Hq]"
                                : "the sink logits are set but params.dsinks is not: the backward writes "
                                  "d(sink logits) [Hq]");
    if (a->sink_logits && p->dsinks) {
        int64_t str[2];
        FC_TRY(fc_attn_head_vector(p->dsinks, "dsinks", a, 0, 1, str));
        dsinks = p->dsinks->data;
        a->sdsink = str[1];
    } else {
        a->sdsink = 1;
    }
    a->dout = dout->data;
    a->dq = dq->data;
    a->dk = dk->data;
    a->dv = dv->data;
    a->dsinks = a->sink_logits ? dsinks : NULL;
    fc_attn_strides(a->sdo, 4, dout);
    fc_attn_strides(a->sdq, 4, dq);
    fc_attn_strides(a->sdk, 4, dk);
    fc_attn_strides(a->sdv, 4, dv);
    return FLASHC_OK;
}

flashc_status fc_attn_resolve(const fc_attn *a, int requested, int *backend) {
    /* Every pointer of the problem, NULL where unused (skipped). */
    const void *const ptrs[] = {a->q,     a->k,     a->v,     a->o,        a->lse,         a->sink_logits,
                                a->alibi, a->dout,  a->dq,    a->dk,       a->dv,          a->dsinks,
                                a->cu_q,  a->cu_k,  a->seqlen_k, a->kv_batch, a->block_table, a->k_new,
                                a->v_new};
    static const char *const names[] = {"q",     "k",      "v",     "o",  "lse",   "sinks", "alibi_slopes",
                                        "dout",  "dq",     "dk",    "dv", "dsinks", "cu_seqlens_q",
                                        "cu_seqlens_k", "cache_seqlens", "cache_batch_idx", "block_table",
                                        "k_new", "v_new"};
    return fc_resolve_backend(requested, ptrs, names, (int)(sizeof ptrs / sizeof *ptrs), backend);
}

flashc_status fc_attn_run(int backend, int bwd, const fc_attn *a) {
    /* B = 0: an empty batch, nothing to read or write but the backward's
     * dsinks (0: a sum over no rows), which the backends' empty paths write. */
    if (a->B == 0 && !bwd) return FLASHC_OK;
    if (backend == FLASHC_BACKEND_CPU) {
        FC_TRY(check_alibi_finite(a));
        const fc_team t = fc_cpu_team_begin();
        const flashc_status s = bwd ? fc_cpu_attn_bwd(a) : fc_cpu_attn_fwd(a);
        fc_cpu_team_end(t);
        return s;
    }
    const fc_cuda_module *m = fc_cuda();
    if (!m) return FLASHC_ERR_BACKEND_UNAVAILABLE;
    return fc_cuda_status(m, bwd ? m->attn_bwd(a) : m->attn_fwd(a));
}

/* A 0.1 sink pointer (sink_logits, the dsinks argument) as the [Hq]
 * contiguous vector it is (the sinks' dtype), for the overlap check. */
static const flashc_tensor *legacy_vector(flashc_tensor *t, const void *ptr, const fc_attn *a) {
    if (!ptr) return NULL;
    memset(t, 0, sizeof *t);
    t->data = (void *)ptr;
    t->dtype = a->dtype == FLASHC_F64 ? FLASHC_F64 : FLASHC_F32;
    t->ndim = 1;
    t->shape[0] = a->Hq;
    t->strides[0] = 1;
    return t;
}

/* Appends the index tensors of ix (NULL: none) to the check's list. */
static int add_index(const flashc_tensor **t, const char **nm, int n, const fc_attn_index *ix) {
    if (!ix) return n;
    const flashc_tensor *const x[5] = {ix->cu_q, ix->cu_k, ix->seqlens, ix->block_table, ix->batch_idx};
    static const char *const xn[5] = {"cu_seqlens_q", "cu_seqlens_k", "cache_seqlens", "block_table",
                                      "cache_batch_idx"};
    for (int i = 0; i < 5; ++i) {
        t[n] = x[i];
        nm[n++] = xn[i];
    }
    return n;
}

/* No output of a call shares memory with another tensor of it
 * (fc_check_disjoint): o, lse (and the caches an append writes) against
 * q, k, v (or the caches and the appended rows), the sink logits, the ALiBi
 * slopes and the index tensors. */
flashc_status fc_attn_check_disjoint_fwd(const fc_attn *a, const flashc_tensor *o, const flashc_tensor *lse,
                                         const flashc_tensor *q, const flashc_tensor *k, const flashc_tensor *v,
                                         const flashc_tensor *k_new, const flashc_tensor *v_new, int cache,
                                         const fc_attn_index *ix, const flashc_attn_params *p) {
    flashc_tensor ls;
    const flashc_tensor *t[20];
    const char *nm[20];
    const int append = cache && k_new && fc_numel(k_new) > 0;
    int n = 0;
    t[n] = o, nm[n++] = "o";
    t[n] = lse, nm[n++] = "lse";
    if (append) t[n] = k, nm[n++] = "k_cache", t[n] = v, nm[n++] = "v_cache";
    const int nout = n;
    t[n] = q, nm[n++] = "q";
    if (!append) t[n] = k, nm[n++] = cache ? "k_cache" : "k", t[n] = v, nm[n++] = cache ? "v_cache" : "v";
    t[n] = k_new, nm[n++] = "k_new";
    t[n] = v_new, nm[n++] = "v_new";
    t[n] = p->sinks ? p->sinks : legacy_vector(&ls, p->sink_logits, a), nm[n++] = p->sinks ? "sinks" : "sink_logits";
    t[n] = p->alibi_slopes, nm[n++] = "alibi_slopes";
    n = add_index(t, nm, n, ix);
    return fc_check_disjoint(t, nm, n, nout);
}

/* dq, dk, dv and the sink logits' gradient against each other and every input. */
flashc_status fc_attn_check_disjoint_bwd(const fc_attn *a, const flashc_tensor *dq, const flashc_tensor *dk,
                                         const flashc_tensor *dv, const flashc_tensor *dout, const flashc_tensor *q,
                                         const flashc_tensor *k, const flashc_tensor *v, const flashc_tensor *o,
                                         const flashc_tensor *lse, const fc_attn_index *ix,
                                         const flashc_attn_params *p) {
    flashc_tensor ls, ld;
    const flashc_tensor *t[20] = {dq, dk, dv, p->dsinks ? p->dsinks : legacy_vector(&ld, a->dsinks, a),
                                  dout, q, k, v, o, lse,
                                  p->sinks ? p->sinks : legacy_vector(&ls, p->sink_logits, a), p->alibi_slopes};
    const char *nm[20] = {"dq", "dk", "dv", "dsinks", "dout", "q", "k", "v", "o", "lse",
                          p->sinks ? "sinks" : "sink_logits", "alibi_slopes"};
    const int n = add_index(t, nm, 12, ix);
    return fc_check_disjoint(t, nm, n, 4);
}

/* q, k, v, o as float tensors of ndim dims sharing one dtype (→ a->dtype). */
flashc_status fc_attn_check_qkvo(const flashc_tensor *q, const flashc_tensor *k, const flashc_tensor *v,
                                 const flashc_tensor *o, int ndim, int o_is_output, fc_attn *a) {
    FC_TRY(fc_check_float_tensor(q, "q", ndim, 0, "attention"));
    FC_TRY(fc_check_float_tensor(k, "k", ndim, 0, "attention"));
    FC_TRY(fc_check_float_tensor(v, "v", ndim, 0, "attention"));
    FC_TRY(fc_check_float_tensor(o, "o", ndim, o_is_output, "attention"));
    FC_RETURN_IF(k->dtype != q->dtype || v->dtype != q->dtype || o->dtype != q->dtype, FLASHC_ERR_DTYPE,
                 "q, k, v, o must share one dtype (got %s, %s, %s, %s)", fc_dtype_name(q->dtype),
                 fc_dtype_name(k->dtype), fc_dtype_name(v->dtype), fc_dtype_name(o->dtype));
    a->dtype = q->dtype;
    return FLASHC_OK;
}

/* Validates q, k, v, o ([B, S, H, D]) and params; fills everything of *a
 * except lse and the gradients. */
static flashc_status build_problem(const flashc_tensor *q, const flashc_tensor *k, const flashc_tensor *v,
                                   const flashc_tensor *o, int o_is_output, const flashc_attn_params *user,
                                   fc_attn *a, flashc_attn_params *p) {
    memset(a, 0, sizeof *a);
    FC_TRY(fc_check_knobs());
    FC_PROF_MARK(fc_prof_marks, 4);
    FC_TRY(fc_attn_read_params(user, p));
    FC_TRY(fc_attn_check_qkvo(q, k, v, o, 4, o_is_output, a));
    a->B = q->shape[0];
    a->Sq = q->shape[1];
    a->Sk = k->shape[1];
    FC_TRY(fc_attn_heads(a, q, 2, k, "k", 2));
    FC_RETURN_IF(k->shape[0] != a->B, FLASHC_ERR_SHAPE, "k.shape[0]=%lld (B) must equal q.shape[0]=%lld",
                 (long long)k->shape[0], (long long)a->B);
    FC_TRY(fc_expect_shape(v, "v", k, "k", FC_AXES4));
    FC_TRY(fc_expect_shape(o, "o", q, "q", FC_AXES4));
    fc_attn_bind_qkvo(a, q, k, v, o);
    return fc_attn_options(p, a);
}

static const char *const LSE_AXES[3] = {"B", "Hq", "Sq"};

FLASHC_API flashc_status flashc_attn_fwd(const flashc_tensor *q, const flashc_tensor *k, const flashc_tensor *v,
                                         const flashc_tensor *o, const flashc_tensor *lse,
                                         const flashc_attn_params *params) {
    FC_PROF_MARK(fc_prof_marks, 0);
    fc_clear_error();
    fc_attn a;
    flashc_attn_params p;
    FC_TRY(build_problem(q, k, v, o, 1, params, &a, &p));
    FC_PROF_MARK(fc_prof_marks, 1);
    if (lse) {
        const int64_t want[3] = {a.B, a.Hq, a.Sq};
        FC_TRY(fc_attn_lse(lse, &a, 3, want, LSE_AXES, "[B, Hq, Sq]", 1));
    }
    FC_TRY(fc_attn_check_disjoint_fwd(&a, o, lse, q, k, v, NULL, NULL, 0, NULL, &p));
    int backend;
    FC_TRY(fc_attn_resolve(&a, p.backend, &backend));
    FC_PROF_MARK(fc_prof_marks, 2);
    const flashc_status s = fc_attn_run(backend, 0, &a);
    FC_PROF_MARK(fc_prof_marks, 3);
    return s;
}

FLASHC_API flashc_status flashc_attn_bwd(const flashc_tensor *dout, const flashc_tensor *q, const flashc_tensor *k,
                                         const flashc_tensor *v, const flashc_tensor *o, const flashc_tensor *lse,
                                         const flashc_tensor *dq, const flashc_tensor *dk, const flashc_tensor *dv,
                                         void *dsinks, const flashc_attn_params *params) {
    fc_clear_error();
    fc_attn a;
    flashc_attn_params p;
    FC_TRY(build_problem(q, k, v, o, 0, params, &a, &p));
    FC_RETURN_IF(!lse, FLASHC_ERR_NULL_POINTER, "lse is NULL: the backward recomputes P from the forward's lse");
    const int64_t want[3] = {a.B, a.Hq, a.Sq};
    FC_TRY(fc_attn_lse(lse, &a, 3, want, LSE_AXES, "[B, Hq, Sq]", 0));
    FC_TRY(fc_attn_grads(&a, &p, dout, q, k, v, dq, dk, dv, dsinks, 1, FC_AXES4));
    FC_TRY(fc_attn_check_disjoint_bwd(&a, dq, dk, dv, dout, q, k, v, o, lse, NULL, &p));
    int backend;
    FC_TRY(fc_attn_resolve(&a, p.backend, &backend));
    return fc_attn_run(backend, 1, &a);
}
