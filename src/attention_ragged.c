/* flashc_attn_varlen_fwd / _bwd and flashc_attn_kvcache_fwd: validate the
 * call and map the packed or cached layout onto fc_attn's ragged fields
 * (flashc_internal.h; semantics: flashc.h, "Ragged batches and KV caches").
 * Options, lse, gradients, backend resolution and the run are shared with
 * the dense entry points (attention.c, through core.h).
 *
 * Mapping: a packed [T, H, D] tensor is the 4-D (batch, seq, head, dim) view
 * with a 0 batch stride and T rows (lse [Hq, Tq]: (0, head, seq)); B comes
 * from cu_seqlens (B + 1 entries) or cache_seqlens (B). Sq, Sk are upper
 * bounds: varlen the longest sequences (max_seqlen, else found), capped at
 * Tq / Tk; KV cache Sq = Sn and Sk = the capacity per sequence (Sc, or
 * max_pages·page_size with page_size = k_cache.shape[1] when paged).
 *
 * Index values: on the CPU backend (host memory) every entry is checked here
 * before anything runs; on CUDA they are device memory and are not read,
 * except the cu_seqlens when a max_seqlen is 0 (unknown): then they are
 * copied to the host once (ordered after params.stream) to find it. */
#include "core.h"

#include <stdlib.h>
#include <string.h>

FLASHC_API flashc_varlen flashc_varlen_default(void) {
    flashc_varlen s;
    memset(&s, 0, sizeof s);
    s.struct_size = (uint32_t)sizeof s;
    return s;
}

FLASHC_API flashc_kvcache flashc_kvcache_default(void) {
    flashc_kvcache c;
    memset(&c, 0, sizeof c);
    c.struct_size = (uint32_t)sizeof c;
    return c;
}

static const char *const VARLEN_LSE_AXES[2] = {"Hq", "Tq"};
static const char *const KV_LSE_AXES[3] = {"B", "Hq", "Sn"};

/* ------------------------------------------------------------------ varlen */
static flashc_status read_varlen(const flashc_varlen *user, flashc_varlen *v) {
    FC_RETURN_IF(!user, FLASHC_ERR_NULL_POINTER, "seqs is NULL: the sequences (cu_seqlens_q, cu_seqlens_k) are required");
    FC_RETURN_IF(user->struct_size != sizeof(flashc_varlen), FLASHC_ERR_PARAMS_SIZE,
                 "seqs.struct_size=%u, this library's flashc_varlen is %zu bytes; initialise with "
                 "flashc_varlen_default()",
                 user->struct_size, sizeof(flashc_varlen));
    memcpy(v, user, sizeof *v);
    FC_RETURN_IF(v->max_seqlen_q < 0, FLASHC_ERR_INVALID_ARGUMENT,
                 "seqs.max_seqlen_q=%lld must be >= 0 (0 = unknown)", (long long)v->max_seqlen_q);
    FC_RETURN_IF(v->max_seqlen_k < 0, FLASHC_ERR_INVALID_ARGUMENT,
                 "seqs.max_seqlen_k=%lld must be >= 0 (0 = unknown)", (long long)v->max_seqlen_k);
    return FLASHC_OK;
}

/* q [Tq, Hq, D], k, v [Tk, Hkv, D], o like q, the cu_seqlens and params →
 * everything of *a except lse, the gradients and Sq, Sk (varlen_lengths). */
static flashc_status build_varlen(const flashc_tensor *q, const flashc_tensor *k, const flashc_tensor *v,
                                  const flashc_varlen *seqs, const flashc_tensor *o, int o_is_output,
                                  const flashc_attn_params *user, fc_attn *a, flashc_attn_params *p,
                                  flashc_varlen *sv) {
    memset(a, 0, sizeof *a);
    FC_TRY(fc_check_knobs());
    FC_TRY(fc_attn_read_params(user, p));
    FC_TRY(read_varlen(seqs, sv));
    FC_TRY(fc_attn_check_qkvo(q, k, v, o, 3, o_is_output, a));
    FC_TRY(fc_attn_heads(a, q, 1, k, "k", 1));
    FC_TRY(fc_expect_shape(v, "v", k, "k", FC_AXES3));
    FC_TRY(fc_expect_shape(o, "o", q, "q", FC_AXES3));
    a->Tq = q->shape[0];
    a->Tk = k->shape[0];
    a->Bk = 1;
    fc_attn_bind_qkvo(a, q, k, v, o);

    FC_TRY(fc_check_index_tensor(sv->cu_seqlens_q, "cu_seqlens_q", 1));
    FC_TRY(fc_check_index_tensor(sv->cu_seqlens_k, "cu_seqlens_k", 1));
    const int64_t nq = sv->cu_seqlens_q->shape[0], nk = sv->cu_seqlens_k->shape[0];
    FC_RETURN_IF(nq < 2, FLASHC_ERR_SHAPE, "cu_seqlens_q.shape[0]=%lld: cu_seqlens are [B + 1] with B >= 1",
                 (long long)nq);
    FC_RETURN_IF(nk != nq, FLASHC_ERR_SHAPE, "cu_seqlens_k.shape[0]=%lld must equal cu_seqlens_q.shape[0]=%lld (B + 1)",
                 (long long)nk, (long long)nq);
    a->B = nq - 1;
    a->cu_q = (const int32_t *)sv->cu_seqlens_q->data;
    a->scu_q = sv->cu_seqlens_q->strides[0];
    a->cu_k = (const int32_t *)sv->cu_seqlens_k->data;
    a->scu_k = sv->cu_seqlens_k->strides[0];
    return fc_attn_options(p, a);
}

/* Host cu_seqlens (CPU backend), checked exactly: cu[0] ≥ 0, non-decreasing,
 * cu[B] ≤ T, each length ≤ max_given when given; *longest = the longest. */
static flashc_status check_cu(const int32_t *cu, int64_t st, int64_t B, int64_t T, const char *name,
                              const char *tname, int64_t max_given, const char *max_name, int64_t *longest) {
    int64_t prev = cu[0], m = 0;
    FC_RETURN_IF(prev < 0, FLASHC_ERR_INVALID_ARGUMENT, "%s[0]=%lld is negative", name, (long long)prev);
    FC_RETURN_IF(prev > T, FLASHC_ERR_INVALID_ARGUMENT, "%s[0]=%lld exceeds %s.shape[0]=%lld (the packed rows)", name,
                 (long long)prev, tname, (long long)T);
    for (int64_t b = 0; b < B; ++b) {
        const int64_t x = cu[(b + 1) * st];
        FC_RETURN_IF(x < prev, FLASHC_ERR_INVALID_ARGUMENT,
                     "%s[%lld]=%lld < %s[%lld]=%lld: cu_seqlens must be non-decreasing", name, (long long)(b + 1),
                     (long long)x, name, (long long)b, (long long)prev);
        FC_RETURN_IF(x > T, FLASHC_ERR_INVALID_ARGUMENT, "%s[%lld]=%lld exceeds %s.shape[0]=%lld (the packed rows)",
                     name, (long long)(b + 1), (long long)x, tname, (long long)T);
        FC_RETURN_IF(max_given && x - prev > max_given, FLASHC_ERR_INVALID_ARGUMENT,
                     "sequence %lld has %lld rows (%s[%lld] - %s[%lld]), more than seqs.%s=%lld", (long long)b,
                     (long long)(x - prev), name, (long long)(b + 1), name, (long long)b, max_name,
                     (long long)max_given);
        if (x - prev > m) m = x - prev;
        prev = x;
    }
    *longest = m;
    return FLASHC_OK;
}

/* Device cu_seqlens (CUDA), max_seqlen unknown: one synchronous copy to the
 * host after the work already on the call's stream; the longest sequence as
 * fc_attn_seq will see it (entries clamped to [0, T]). */
static flashc_status device_longest(const int32_t *cu, int64_t st, int64_t B, int64_t T, void *stream,
                                    int64_t *longest) {
    const fc_cuda_module *m = fc_cuda();
    if (!m) return FLASHC_ERR_BACKEND_UNAVAILABLE;
    const int64_t first = st < 0 ? B * st : 0, n = B * (st < 0 ? -st : st) + 1; /* the span, in elements */
    int32_t *h = (int32_t *)malloc((size_t)n * sizeof *h);
    FC_RETURN_IF(!h, FLASHC_ERR_OUT_OF_MEMORY, "cu_seqlens: %lld bytes of host memory to find the longest sequence",
                 (long long)(n * 4));
    flashc_status s = fc_cuda_status(m, m->stream_wait(NULL, stream));
    if (s == FLASHC_OK)
        s = fc_cuda_status(m, m->memcpy_(h, cu + first, (size_t)n * sizeof *h, FLASHC_MEMCPY_DEVICE_TO_HOST));
    int64_t mx = 0;
    for (int64_t b = 0; s == FLASHC_OK && b < B; ++b) {
        const int64_t r0 = fc_clamp64(h[b * st - first], 0, T);
        const int64_t r1 = fc_clamp64(h[(b + 1) * st - first], r0, T);
        if (r1 - r0 > mx) mx = r1 - r0;
    }
    free(h);
    *longest = mx;
    return s;
}

/* a->Sq, a->Sk from the sequences (after backend resolution: the CPU checks
 * the host values, CUDA reads them only when a max_seqlen is unknown). */
static flashc_status varlen_lengths(fc_attn *a, const flashc_varlen *sv, int backend) {
    int64_t mq = sv->max_seqlen_q, mk = sv->max_seqlen_k, lq, lk;
    if (backend == FLASHC_BACKEND_CPU) {
        FC_TRY(check_cu(a->cu_q, a->scu_q, a->B, a->Tq, "cu_seqlens_q", "q", mq, "max_seqlen_q", &lq));
        FC_TRY(check_cu(a->cu_k, a->scu_k, a->B, a->Tk, "cu_seqlens_k", "k", mk, "max_seqlen_k", &lk));
        if (!mq) mq = lq;
        if (!mk) mk = lk;
    } else {
        if (!mq) FC_TRY(device_longest(a->cu_q, a->scu_q, a->B, a->Tq, a->stream, &mq));
        if (!mk) FC_TRY(device_longest(a->cu_k, a->scu_k, a->B, a->Tk, a->stream, &mk));
    }
    a->Sq = mq < a->Tq ? mq : a->Tq; /* no sequence is longer than its packed tensor */
    a->Sk = mk < a->Tk ? mk : a->Tk;
    return FLASHC_OK;
}

FLASHC_API flashc_status flashc_attn_varlen_fwd(const flashc_tensor *q, const flashc_tensor *k, const flashc_tensor *v,
                                                const flashc_varlen *seqs, const flashc_tensor *o,
                                                const flashc_tensor *lse, const flashc_attn_params *params) {
    fc_clear_error();
    fc_attn a;
    flashc_attn_params p;
    flashc_varlen sv;
    FC_TRY(build_varlen(q, k, v, seqs, o, 1, params, &a, &p, &sv));
    if (lse) {
        const int64_t want[2] = {a.Hq, a.Tq};
        FC_TRY(fc_attn_lse(lse, &a, 2, want, VARLEN_LSE_AXES, "[Hq, Tq]", 1));
    }
    const fc_attn_index ix = {sv.cu_seqlens_q, sv.cu_seqlens_k, NULL, NULL, NULL};
    FC_TRY(fc_attn_check_disjoint_fwd(&a, o, lse, q, k, v, NULL, NULL, 0, &ix, &p));
    int backend;
    FC_TRY(fc_attn_resolve(&a, p.backend, &backend));
    FC_TRY(varlen_lengths(&a, &sv, backend));
    return fc_attn_run(backend, 0, &a);
}

FLASHC_API flashc_status flashc_attn_varlen_bwd(const flashc_tensor *dout, const flashc_tensor *q,
                                                const flashc_tensor *k, const flashc_tensor *v, const flashc_tensor *o,
                                                const flashc_tensor *lse, const flashc_varlen *seqs,
                                                const flashc_tensor *dq, const flashc_tensor *dk,
                                                const flashc_tensor *dv, const flashc_attn_params *params) {
    fc_clear_error();
    fc_attn a;
    flashc_attn_params p;
    flashc_varlen sv;
    FC_TRY(build_varlen(q, k, v, seqs, o, 0, params, &a, &p, &sv));
    FC_RETURN_IF(!lse, FLASHC_ERR_NULL_POINTER, "lse is NULL: the backward recomputes P from the forward's lse");
    const int64_t want[2] = {a.Hq, a.Tq};
    FC_TRY(fc_attn_lse(lse, &a, 2, want, VARLEN_LSE_AXES, "[Hq, Tq]", 0));
    FC_TRY(fc_attn_grads(&a, &p, dout, q, k, v, dq, dk, dv, NULL, 0, FC_AXES3));
    const fc_attn_index ix = {sv.cu_seqlens_q, sv.cu_seqlens_k, NULL, NULL, NULL};
    FC_TRY(fc_attn_check_disjoint_bwd(&a, dq, dk, dv, dout, q, k, v, o, lse, &ix, &p));
    int backend;
    FC_TRY(fc_attn_resolve(&a, p.backend, &backend));
    FC_TRY(varlen_lengths(&a, &sv, backend));
    return fc_attn_run(backend, 1, &a);
}

/* ---------------------------------------------------------------- KV cache */
static flashc_status read_kvcache(const flashc_kvcache *user, flashc_kvcache *c) {
    FC_RETURN_IF(!user, FLASHC_ERR_NULL_POINTER, "cache is NULL: k_cache, v_cache and cache_seqlens are required");
    FC_RETURN_IF(user->struct_size != sizeof(flashc_kvcache), FLASHC_ERR_PARAMS_SIZE,
                 "cache.struct_size=%u, this library's flashc_kvcache is %zu bytes; initialise with "
                 "flashc_kvcache_default()",
                 user->struct_size, sizeof(flashc_kvcache));
    memcpy(c, user, sizeof *c);
    return FLASHC_OK;
}

/* Host index values (CPU backend), checked exactly: cache_seqlens ≥ 0 and
 * cache_seqlens + Sk_new within the capacity (block table long enough),
 * cache_batch_idx in [0, Bc), the page ids of every page a sequence uses in
 * [0, P). */
static flashc_status check_cache_values(const fc_attn *a) {
    for (int64_t b = 0; b < a->B; ++b) {
        const int64_t L = a->seqlen_k[b * a->sseqlen_k];
        FC_RETURN_IF(L < 0, FLASHC_ERR_INVALID_ARGUMENT, "cache_seqlens[%lld]=%lld is negative", (long long)b,
                     (long long)L);
        const int64_t Sk = L + a->S_new, np = a->block_table ? Sk / a->page_size + (Sk % a->page_size != 0) : 0;
        if (a->block_table)
            FC_RETURN_IF(L > a->Sk - a->S_new, FLASHC_ERR_INVALID_ARGUMENT,
                         "cache_seqlens[%lld]=%lld + Sk_new=%lld keys need %lld pages of %lld, but "
                         "block_table.shape[1]=%lld: the block table is too short",
                         (long long)b, (long long)L, (long long)a->S_new, (long long)np, (long long)a->page_size,
                         (long long)a->max_pages);
        else
            FC_RETURN_IF(L > a->Sk - a->S_new, FLASHC_ERR_INVALID_ARGUMENT,
                         "cache_seqlens[%lld]=%lld + Sk_new=%lld exceeds the cache length k_cache.shape[1]=%lld",
                         (long long)b, (long long)L, (long long)a->S_new, (long long)a->Sk);
        if (a->kv_batch) {
            const int64_t c = a->kv_batch[b * a->skv_batch];
            FC_RETURN_IF(c < 0 || c >= a->Bk, FLASHC_ERR_INVALID_ARGUMENT,
                         "cache_batch_idx[%lld]=%lld is outside [0, %lld) (k_cache.shape[0])", (long long)b,
                         (long long)c, (long long)a->Bk);
        }
        if (a->block_table) {
            for (int64_t pg = 0; pg < np; ++pg) {
                const int64_t id = a->block_table[b * a->sbt[0] + pg * a->sbt[1]];
                FC_RETURN_IF(id < 0 || id >= a->Bk, FLASHC_ERR_INVALID_ARGUMENT,
                             "block_table[%lld, %lld]=%lld is outside [0, %lld) (k_cache.shape[0], the pages)",
                             (long long)b, (long long)pg, (long long)id, (long long)a->Bk);
            }
        }
    }
    return FLASHC_OK;
}

/* The cache's tensors and index tensors → a (a->dtype and a->B already set). */
static flashc_status build_cache(const flashc_kvcache *c, fc_attn *a) {
    const flashc_tensor *kc = c->k_cache, *vc = c->v_cache;
    /* k_new / v_new first: whether the cache is written (an output) depends on them. */
    FC_RETURN_IF(!c->k_new != !c->v_new, FLASHC_ERR_NULL_POINTER,
                 "cache.%s is set but cache.%s is NULL: give k_new and v_new both or neither",
                 c->k_new ? "k_new" : "v_new", c->k_new ? "v_new" : "k_new");
    if (c->k_new) {
        FC_TRY(fc_check_float_tensor(c->k_new, "k_new", 4, 0, "attention"));
        FC_TRY(fc_check_float_tensor(c->v_new, "v_new", 4, 0, "attention"));
    }
    const int64_t Sk_new = c->k_new ? c->k_new->shape[1] : 0;
    FC_TRY(fc_check_float_tensor(kc, "k_cache", 4, Sk_new > 0, "attention"));
    FC_TRY(fc_check_float_tensor(vc, "v_cache", 4, Sk_new > 0, "attention"));
    FC_RETURN_IF(kc->dtype != a->dtype || vc->dtype != a->dtype, FLASHC_ERR_DTYPE,
                 "k_cache, v_cache must have q's dtype %s (got %s, %s)", fc_dtype_name(a->dtype),
                 fc_dtype_name(kc->dtype), fc_dtype_name(vc->dtype));
    FC_TRY(fc_expect_shape(vc, "v_cache", kc, "k_cache", FC_AXES4));
    if (c->k_new) {
        FC_RETURN_IF(c->k_new->dtype != a->dtype || c->v_new->dtype != a->dtype, FLASHC_ERR_DTYPE,
                     "k_new, v_new must have q's dtype %s (got %s, %s)", fc_dtype_name(a->dtype),
                     fc_dtype_name(c->k_new->dtype), fc_dtype_name(c->v_new->dtype));
        const int64_t want[4] = {a->B, Sk_new, kc->shape[2], kc->shape[3]};
        static const char *const ax[4] = {"B", "Sk_new", "Hkv", "D"};
        static const int axes[3] = {0, 2, 3}; /* (axis 1 is Sk_new itself) */
        for (int x = 0; x < 3; ++x) {
            const int i = axes[x];
            FC_RETURN_IF(c->k_new->shape[i] != want[i], FLASHC_ERR_SHAPE,
                         "k_new.shape[%d]=%lld must equal %s=%lld (k_new is [B, Sk_new, Hkv, D])", i,
                         (long long)c->k_new->shape[i], ax[i], (long long)want[i]);
        }
        FC_TRY(fc_expect_shape(c->v_new, "v_new", c->k_new, "k_new", ax));
    }

    FC_TRY(fc_check_index_tensor(c->cache_seqlens, "cache_seqlens", 1));
    FC_RETURN_IF(c->cache_seqlens->shape[0] != a->B, FLASHC_ERR_SHAPE,
                 "cache_seqlens.shape[0]=%lld must equal q.shape[0]=%lld (B)", (long long)c->cache_seqlens->shape[0],
                 (long long)a->B);
    FC_RETURN_IF(c->cache_batch_idx && c->block_table, FLASHC_ERR_INVALID_ARGUMENT,
                 "cache.cache_batch_idx and cache.block_table are both set: a paged cache is addressed through "
                 "the block table alone");
    a->Bk = kc->shape[0];
    int64_t cap;
    if (c->block_table) {
        const flashc_tensor *bt = c->block_table;
        FC_TRY(fc_check_index_tensor(bt, "block_table", 2));
        FC_RETURN_IF(bt->shape[0] != a->B, FLASHC_ERR_SHAPE, "block_table.shape[0]=%lld must equal q.shape[0]=%lld (B)",
                     (long long)bt->shape[0], (long long)a->B);
        FC_RETURN_IF(bt->shape[1] < 1, FLASHC_ERR_SHAPE,
                     "block_table.shape[1]=%lld (max_pages) must be >= 1", (long long)bt->shape[1]);
        FC_RETURN_IF(a->Bk < 1, FLASHC_ERR_SHAPE, "k_cache.shape[0]=%lld: a paged cache needs at least one page",
                     (long long)a->Bk);
        FC_RETURN_IF(kc->shape[1] < 1, FLASHC_ERR_SHAPE, "k_cache.shape[1]=%lld (page_size) must be >= 1",
                     (long long)kc->shape[1]);
        a->block_table = (const int32_t *)bt->data;
        a->sbt[0] = bt->strides[0];
        a->sbt[1] = bt->strides[1];
        a->max_pages = bt->shape[1];
        a->page_size = kc->shape[1];
        FC_RETURN_IF(__builtin_mul_overflow(a->max_pages, a->page_size, &cap), FLASHC_ERR_OVERFLOW,
                     "block_table.shape[1]=%lld pages of k_cache.shape[1]=%lld rows: the capacity overflows int64",
                     (long long)a->max_pages, (long long)a->page_size);
    } else {
        cap = kc->shape[1];
        if (c->cache_batch_idx) {
            FC_TRY(fc_check_index_tensor(c->cache_batch_idx, "cache_batch_idx", 1));
            FC_RETURN_IF(c->cache_batch_idx->shape[0] != a->B, FLASHC_ERR_SHAPE,
                         "cache_batch_idx.shape[0]=%lld must equal q.shape[0]=%lld (B)",
                         (long long)c->cache_batch_idx->shape[0], (long long)a->B);
            FC_RETURN_IF(a->Bk < 1, FLASHC_ERR_SHAPE, "k_cache.shape[0]=%lld: cache_batch_idx needs a cache row",
                         (long long)a->Bk);
            a->kv_batch = (const int32_t *)c->cache_batch_idx->data;
            a->skv_batch = c->cache_batch_idx->strides[0];
        } else {
            FC_RETURN_IF(a->Bk != a->B, FLASHC_ERR_SHAPE,
                         "k_cache.shape[0]=%lld must equal q.shape[0]=%lld (B) without cache_batch_idx or "
                         "block_table",
                         (long long)a->Bk, (long long)a->B);
        }
    }
    FC_RETURN_IF(Sk_new > cap, FLASHC_ERR_SHAPE, "k_new.shape[1]=%lld (Sk_new) exceeds the cache capacity %lld",
                 (long long)Sk_new, (long long)cap);
    /* Sk_b = cache_seqlens[b] + Sk_new must not overflow, whatever the (int32) lengths. */
    FC_RETURN_IF(cap > INT64_MAX - INT32_MAX, FLASHC_ERR_OVERFLOW, "the cache capacity %lld overflows int64 with "
                 "cache_seqlens added", (long long)cap);
    a->Sk = cap;
    a->k = kc->data;
    a->v = vc->data;
    fc_attn_strides(a->sk, 4, kc);
    fc_attn_strides(a->sv, 4, vc);
    a->seqlen_k = (const int32_t *)c->cache_seqlens->data;
    a->sseqlen_k = c->cache_seqlens->strides[0];
    a->seqlen_k_add = Sk_new;
    a->S_new = Sk_new;
    if (Sk_new > 0) {
        a->k_new = c->k_new->data;
        a->v_new = c->v_new->data;
        fc_attn_strides(a->skn, 4, c->k_new);
        fc_attn_strides(a->svn, 4, c->v_new);
    }
    return FLASHC_OK;
}

FLASHC_API flashc_status flashc_attn_kvcache_fwd(const flashc_tensor *q, const flashc_kvcache *cache,
                                                 const flashc_tensor *o, const flashc_tensor *lse,
                                                 const flashc_attn_params *params) {
    fc_clear_error();
    fc_attn a;
    flashc_attn_params p;
    flashc_kvcache c;
    memset(&a, 0, sizeof a);
    FC_TRY(fc_check_knobs());
    FC_TRY(fc_attn_read_params(params, &p));
    FC_TRY(read_kvcache(cache, &c));
    FC_TRY(fc_check_float_tensor(q, "q", 4, 0, "attention"));
    FC_TRY(fc_check_float_tensor(o, "o", 4, 1, "attention"));
    FC_RETURN_IF(o->dtype != q->dtype, FLASHC_ERR_DTYPE, "o.dtype=%s must equal q.dtype=%s", fc_dtype_name(o->dtype),
                 fc_dtype_name(q->dtype));
    a.dtype = q->dtype;
    a.B = q->shape[0];
    a.Sq = q->shape[1];
    FC_TRY(fc_expect_shape(o, "o", q, "q", FC_AXES4));
    FC_TRY(build_cache(&c, &a));
    FC_TRY(fc_attn_heads(&a, q, 2, c.k_cache, "k_cache", 2));
    a.q = q->data;
    a.o = o->data;
    fc_attn_strides(a.sq, 4, q);
    fc_attn_strides(a.so, 4, o);
    FC_TRY(fc_attn_options(&p, &a));
    if (lse) {
        const int64_t want[3] = {a.B, a.Hq, a.Sq};
        FC_TRY(fc_attn_lse(lse, &a, 3, want, KV_LSE_AXES, "[B, Hq, Sn]", 1));
    }
    const fc_attn_index ix = {NULL, NULL, c.cache_seqlens, c.block_table, c.cache_batch_idx};
    FC_TRY(fc_attn_check_disjoint_fwd(&a, o, lse, q, c.k_cache, c.v_cache, c.k_new, c.v_new, 1, &ix, &p));
    int backend;
    FC_TRY(fc_attn_resolve(&a, p.backend, &backend));
    if (backend == FLASHC_BACKEND_CPU) FC_TRY(check_cache_values(&a));
    return fc_attn_run(backend, 0, &a);
}
