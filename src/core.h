/* core.h — helpers shared by the core's files (the .c files in src/). Private. */
#ifndef FLASHC_CORE_H
#define FLASHC_CORE_H

#include "flashc_internal.h"

/* zstd-style: record status and a message naming the failed condition. */
#define FC_RETURN_IF(cond, status, ...)                  \
    do {                                                 \
        if (cond) return fc_set_error((status), __VA_ARGS__); \
    } while (0)
#define FC_TRY(expr)                                     \
    do {                                                 \
        flashc_status fc_try_s_ = (expr);                \
        if (fc_try_s_ != FLASHC_OK) return fc_try_s_;    \
    } while (0)

/* Validates a tensor argument: non-NULL descriptor, known dtype, the
 * expected ndim (−1: any 0..FLASHC_MAX_DIMS), extents ≥ 0, element count and
 * element/byte offsets within int64, data non-NULL unless it is empty, and
 * for outputs no zero stride on an axis of extent > 1. `name` is used in
 * messages ("q", "lse", …). */
flashc_status fc_check_tensor(const flashc_tensor *t, const char *name, int ndim, int is_output);
/* fc_check_tensor, and a float dtype (F32, F16, BF16, F64; I32 is refused
 * with FLASHC_ERR_DTYPE): every data tensor of `op` ("attention", …). */
flashc_status fc_check_float_tensor(const flashc_tensor *t, const char *name, int ndim, int is_output,
                                    const char *op);
/* fc_check_tensor, and dtype I32: the index tensors (cu_seqlens, cache_seqlens, …). */
flashc_status fc_check_index_tensor(const flashc_tensor *t, const char *name, int ndim);
int64_t fc_numel(const flashc_tensor *t); /* after fc_check_tensor */
/* Tensors t[0..n) (validated; NULL skipped), the first nout of them written:
 * FLASHC_ERR_INVALID_ARGUMENT naming the pair where an output shares an
 * element with another tensor of the call (tensor.c: exact for the packed
 * layouts of one buffer, conservative otherwise). */
flashc_status fc_check_disjoint(const flashc_tensor *const *t, const char *const *names, int n, int nout);
/* "F32", "F16", "BF16", "F64", "I32" ("unknown" otherwise): messages name dtypes, never codes. */
const char *fc_dtype_name(int dtype);
/* FLASHC_ERR_INVALID_ARGUMENT naming the first FLASHC_* knob set to a value it
 * does not accept (common/knobs.h); every compute entry point calls it first. */
flashc_status fc_check_knobs(void);

/* The OpenMP team of a CPU call (flashc.h, "Threads"): begin bounds the
 * calling thread's team to what the address space can hold (the OpenMP
 * runtime exits the process when it cannot create a thread), end restores
 * the caller's setting. Bracket every CPU backend call with them. */
typedef struct fc_team {
    int saved, used;
} fc_team;
fc_team fc_cpu_team_begin(void);
void fc_cpu_team_end(fc_team t);

/* Backend resolution. `ptrs` are the data pointers of the call (NULL entries
 * and empty tensors skipped), names[i] names ptrs[i] in messages. On success
 * *backend is CPU or CUDA. */
flashc_status fc_resolve_backend(int requested, const void *const *ptrs, const char *const *names, int n,
                                 int *backend);

/* The CUDA module, loaded once; NULL with the error set when unavailable. */
const fc_cuda_module *fc_cuda(void);
/* Copies the module's message into ours when status != OK. */
flashc_status fc_cuda_status(const fc_cuda_module *m, flashc_status s);

/* ------------------------------------------------------------ attention
 * What every attention entry point shares (attention.c: dense;
 * attention_ragged.c: varlen and KV cache). Axis names for messages: */
extern const char *const FC_AXES4[4]; /* B, S, H, D */
extern const char *const FC_AXES3[3]; /* T, H, D (packed) */

/* The index tensors of a ragged or cached call, NULL where absent: read
 * while the outputs are written, so no output may overlap them. */
typedef struct fc_attn_index {
    const flashc_tensor *cu_q, *cu_k, *seqlens, *block_table, *batch_idx;
} fc_attn_index;
/* attention.c: no output shares memory with another tensor of the call
 * (flashc.h). cache: k, v are the KV cache (k_cache, v_cache), outputs too
 * when k_new has rows (appended in place). ix: NULL for dense calls. The
 * 0.1 sink pointers (a->sink_logits, a->dsinks without their params
 * tensors) are checked as [Hq] contiguous vectors. */
flashc_status fc_attn_check_disjoint_fwd(const fc_attn *a, const flashc_tensor *o, const flashc_tensor *lse,
                                         const flashc_tensor *q, const flashc_tensor *k, const flashc_tensor *v,
                                         const flashc_tensor *k_new, const flashc_tensor *v_new, int cache,
                                         const fc_attn_index *ix, const flashc_attn_params *p);
flashc_status fc_attn_check_disjoint_bwd(const fc_attn *a, const flashc_tensor *dq, const flashc_tensor *dk,
                                         const flashc_tensor *dv, const flashc_tensor *dout, const flashc_tensor *q,
                                         const flashc_tensor *k, const flashc_tensor *v, const flashc_tensor *o,
                                         const flashc_tensor *lse, const fc_attn_index *ix,
                                         const flashc_attn_params *p);
/* q, k, v, o: float tensors of ndim dims (o an output when o_is_output)
 * sharing one dtype, which goes to a->dtype. */
flashc_status fc_attn_check_qkvo(const flashc_tensor *q, const flashc_tensor *k, const flashc_tensor *v,
                                 const flashc_tensor *o, int ndim, int o_is_output, fc_attn *a);
/* params (NULL = defaults) → *p, checking struct_size (FLASHC_ERR_PARAMS_SIZE). */
flashc_status fc_attn_read_params(const flashc_attn_params *user, flashc_attn_params *p);
/* Hq, D from q.shape[qh], [qh + 1] and Hkv from k.shape[kh] into a, with the
 * checks every layout shares (≥ 1, D ≤ 256, same D, Hq % Hkv == 0). */
flashc_status fc_attn_heads(fc_attn *a, const flashc_tensor *q, int qh, const flashc_tensor *k, const char *kname,
                            int kh);
/* The options of p folded into a (a->dtype, B, Hq, D already set): scale,
 * causal / window, sink tokens, sink logits, softcap, ALiBi, deterministic,
 * stream. */
flashc_status fc_attn_options(const flashc_attn_params *p, fc_attn *a);
/* A per-head vector [Hq] (or [B, Hq] when allow_batch) of the problem's
 * real type (F32; F64 for F64 problems); str = its (batch, head) strides. */
flashc_status fc_attn_head_vector(const flashc_tensor *t, const char *name, const fc_attn *a, int allow_batch,
                                  int is_output, int64_t str[2]);
/* t's strides into dst[n] (n = 4: (batch, seq, head, dim); n = 3: lse's
 * (batch, head, seq)); a packed tensor (ndim n − 1) gets a 0 batch stride in
 * front; an empty tensor gets zeros. */
void fc_attn_strides(int64_t *dst, int n, const flashc_tensor *t);
/* q, k, v, o's data pointers and strides (fc_attn_strides, n = 4) into a. */
void fc_attn_bind_qkvo(fc_attn *a, const flashc_tensor *q, const flashc_tensor *k, const flashc_tensor *v,
                       const flashc_tensor *o);
/* t must have ref's ndim and shape (axes names the axes in messages). */
flashc_status fc_expect_shape(const flashc_tensor *t, const char *name, const flashc_tensor *ref, const char *like,
                              const char *const *axes);
/* lse (ndim 3, or 2 when packed) of shape want[] → a->lse, a->slse. */
flashc_status fc_attn_lse(const flashc_tensor *lse, fc_attn *a, int ndim, const int64_t *want,
                          const char *const *axes, const char *layout, int is_output);
/* The backward's tensors: dout like q, dq, dk, dv like q, k, v (q's dtype),
 * and the sink gradient (params.dsinks, or the 0.1 dsinks argument when
 * has_dsinks_arg) → a. */
flashc_status fc_attn_grads(fc_attn *a, const flashc_attn_params *p, const flashc_tensor *dout,
                            const flashc_tensor *q, const flashc_tensor *k, const flashc_tensor *v,
                            const flashc_tensor *dq, const flashc_tensor *dk, const flashc_tensor *dv, void *dsinks,
                            int has_dsinks_arg, const char *const *axes);
/* fc_resolve_backend over every pointer of the problem (index arrays included). */
flashc_status fc_attn_resolve(const fc_attn *a, int requested, int *backend);
/* Runs the problem: the CPU backend inside its OpenMP team (host ALiBi
 * slopes checked finite first), or the CUDA module. */
flashc_status fc_attn_run(int backend, int bwd, const fc_attn *a);

#endif
