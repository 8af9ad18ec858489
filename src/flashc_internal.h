/*
 * flashc_internal.h — what the core (the .c files in src/) hands to the backends
 * (src/cpu/, src/cuda/) after validating a call. Plain C, so that the CUDA
 * module (C++) includes it too. Not installed; not part of the ABI.
 *
 * The core validates everything (shapes, dtypes, strides, overflow, window
 * values) and folds the user's params into the normalised problem below, so
 * backends trust their input and only check what they alone know (e.g. a
 * CUDA launch limit).
 */
#ifndef FLASHC_INTERNAL_H
#define FLASHC_INTERNAL_H

#include "flashc.h"

/* The attention definition (masking, score pipeline, row finish) lives in
 * src/common/; every kernel of both backends calls it. */
#include "common/fc_defs.h"
#include "common/attn_mask.h"
#include "common/attn_score.h"
#include "common/attn_softmax.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#  define FC_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#  define FC_PRINTF(a, b)
#endif

/* Records `status` and a printf-style message as this thread's last error;
 * returns status so that `return fc_set_error(...)` reads naturally. */
flashc_status fc_set_error(flashc_status status, const char *fmt, ...) FC_PRINTF(2, 3);
void fc_clear_error(void);

/* ------------------------------------------------------------ attention */
/* Axis order of every 4-D stride array below: (batch, seq, head, dim), in
 * elements. lse strides are (batch, head, seq). */
typedef struct fc_attn {
    int32_t dtype;                 /* flashc_dtype of q, k, v, o (and grads) */
    int64_t B, Sq, Sk, Hq, Hkv, D; /* Sq, Sk ≥ 0; the rest ≥ 1; D ≤ 256 */
    const void *q, *k, *v;
    void *o;                       /* fwd: written; bwd: read */
    void *lse;                     /* fwd: may be NULL; bwd: read. f32 (f64 for F64) */
    int64_t sq[4], sk[4], sv[4], so[4];
    int64_t slse[3];
    double scale;                  /* resolved: never 0 */
    int64_t wl, wr;                /* resolved window; causal folded into wr = 0; −1 open */
    int64_t n_sink;                /* sink tokens, ≥ 0 */
    const void *sink_logits;       /* NULL or [Hq], f32 (f64 for F64), element h at h·ssink */
    int64_t ssink;
    double softcap;                /* 0 = off, else > 0 (attn_score.h) */
    const void *alibi;             /* NULL or slopes, f32 (f64 for F64): (b, h) at b·salibi[0] + h·salibi[1] */
    int64_t salibi[2];             /* salibi[0] = 0 for [Hq] slopes */
    int32_t deterministic;
    void *stream;
    /* backward only (NULL / unused in the forward) */
    const void *dout;
    int64_t sdo[4];
    void *dq, *dk, *dv;
    int64_t sdq[4], sdk[4], sdv[4];
    void *dsinks;                  /* NULL unless sink_logits; [Hq], dtype of sink_logits, h at h·sdsink */
    int64_t sdsink;
    /* ---- ragged batches (flashc_attn_varlen_*, flashc_attn_kvcache_fwd; flashc.h "Ragged
     * batches and KV caches"). All NULL/0 for a dense call. When any is set, Sq and Sk
     * are upper bounds (varlen: the longest sequence; KV cache: Sk = the cache's
     * capacity per sequence, Sc or max_pages·page_size) and fc_attn_seq() gives sequence b's lengths and row origins. Index arrays
     * are int32 in the backend's memory, element x at x·stride. */
    const int32_t *cu_q;           /* [B+1] or NULL: sequence b's query rows are rows cu_q[b] + i along
                                      axis 1 of q/o/dout/dq (axis 2 of lse); their batch strides are 0 */
    int64_t scu_q;
    const int32_t *cu_k;           /* [B+1] or NULL: its keys are rows cu_k[b] + j along axis 1 of k/v/dk/dv
                                      (batch strides 0) */
    int64_t scu_k;
    const int32_t *seqlen_k;       /* [B] or NULL (KV cache): Sk_b = seqlen_k[b] + seqlen_k_add */
    int64_t sseqlen_k, seqlen_k_add;
    const int32_t *kv_batch;       /* [B] or NULL: k/v batch index of sequence b (cache_batch_idx) */
    int64_t skv_batch;
    const int32_t *block_table;    /* [B, max_pages] or NULL (paged): key j of sequence b is row
                                      j % page_size (axis 1) of page block_table[b, j / page_size]
                                      (axis 0) of k/v */
    int64_t sbt[2], max_pages, page_size;
    int64_t Tq, Tk;                /* extents of the packed axis (cu_q / cu_k): the clamps of fc_attn_seq */
    int64_t Bk;                    /* extent of k/v axis 0 (cache rows or pages) */
    /* KV append (flashc_attn_kvcache_fwd): k_new/v_new [B, S_new, Hkv, D] are copied into the
     * cache at key positions seqlen_k[b] .. + S_new − 1 of each sequence before attending
     * (seqlen_k_add = S_new). NULL when none. */
    const void *k_new, *v_new;
    int64_t skn[4], svn[4], S_new;
} fc_attn;

/* One sequence of a (possibly ragged) batch: its lengths and where its rows
 * start. Dense problems: Sq, Sk of the problem, q_row = k_row = 0, qb = kb = b. */
typedef struct fc_seq {
    int64_t Sq, Sk;   /* this sequence's query rows and keys */
    int64_t qb;       /* batch index into q/o/lse/dout/dq (0 when cu_q) */
    int64_t q_row;    /* its first query row along axis 1 (cu_q[b], else 0) */
    int64_t kb;       /* batch index into k/v (cache row, 0 when cu_k or paged) */
    int64_t k_row;    /* its first key row along axis 1 (cu_k[b], else 0) */
} fc_seq;

static inline FC_HOST_DEVICE int fc_attn_is_ragged(const fc_attn *a) {
    return a->cu_q || a->cu_k || a->seqlen_k || a->block_table || a->kv_batch;
}

static inline FC_HOST_DEVICE int64_t fc_clamp64(int64_t x, int64_t lo, int64_t hi) {
    return x < lo ? lo : x > hi ? hi : x;
}

/* Sequence b (0 ≤ b < B). Every index read from the arrays is clamped to
 * the tensors' extents, so that unchecked device arrays never lead out of
 * bounds (the core has already validated host arrays exactly). */
static inline FC_HOST_DEVICE fc_seq fc_attn_seq(const fc_attn *a, int64_t b) {
    fc_seq s;
    if (a->cu_q) {
        const int64_t r0 = fc_clamp64(a->cu_q[b * a->scu_q], 0, a->Tq);
        const int64_t r1 = fc_clamp64(a->cu_q[(b + 1) * a->scu_q], r0, a->Tq);
        s.qb = 0;
        s.q_row = r0;
        s.Sq = fc_clamp64(r1 - r0, 0, a->Sq);
    } else {
        s.qb = b;
        s.q_row = 0;
        s.Sq = a->Sq;
    }
    if (a->cu_k) {
        const int64_t r0 = fc_clamp64(a->cu_k[b * a->scu_k], 0, a->Tk);
        const int64_t r1 = fc_clamp64(a->cu_k[(b + 1) * a->scu_k], r0, a->Tk);
        s.kb = 0;
        s.k_row = r0;
        s.Sk = fc_clamp64(r1 - r0, 0, a->Sk);
    } else {
        s.kb = a->block_table ? 0 : a->kv_batch ? fc_clamp64(a->kv_batch[b * a->skv_batch], 0, a->Bk - 1) : b;
        s.k_row = 0;
        s.Sk = a->seqlen_k ? fc_clamp64((int64_t)a->seqlen_k[b * a->sseqlen_k] + a->seqlen_k_add, 0, a->Sk)
                           : a->Sk;
    }
    return s;
}

/* The pool page (axis 0 of the paged k/v) holding page pi of sequence b:
 * block_table[b, pi], clamped to [0, Bk). A host table's entries are
 * validated before any kernel runs (attention_ragged.c); a device table's
 * are not read on the host, so a bad entry reads a valid page (a wrong
 * result, never an out-of-bounds read). Every kernel's page lookup. */
static inline FC_HOST_DEVICE int64_t fc_attn_page(const fc_attn *a, int64_t b, int64_t pi) {
    return fc_clamp64(a->block_table[b * a->sbt[0] + pi * a->sbt[1]], 0, a->Bk - 1);
}

/* Element offset of key row j (< s->Sk) of sequence b, head hk, dim 0, in a
 * k/v-shaped tensor with strides st (paged: through the block table, page
 * ids clamped to [0, Bk): fc_attn_page). */
static inline FC_HOST_DEVICE int64_t fc_attn_key_offset(const fc_attn *a, const fc_seq *s, int64_t b,
                                                        const int64_t st[4], int64_t j, int64_t hk) {
    if (a->block_table) {
        /* j / page_size in 32 bits where both fit (always, in practice): a
         * 64-bit division is a long instruction sequence on a GPU. */
        const int64_t ps = a->page_size;
        const int64_t pi = ((uint64_t)j | (uint64_t)ps) <= 0xFFFFFFFFu ? (int64_t)((uint32_t)j / (uint32_t)ps) : j / ps;
        const int64_t pg = fc_attn_page(a, b, pi);
        return pg * st[0] + (j - pi * ps) * st[1] + hk * st[2];
    }
    return s->kb * st[0] + (s->k_row + j) * st[1] + hk * st[2];
}

/* Element offset of query row i of sequence s, head h, dim 0, in a q-shaped
 * tensor with strides st; lse: fc_attn_lse_offset. */
static inline FC_HOST_DEVICE int64_t fc_attn_row_offset(const fc_seq *s, const int64_t st[4], int64_t i, int64_t h) {
    return s->qb * st[0] + (s->q_row + i) * st[1] + h * st[2];
}
static inline FC_HOST_DEVICE int64_t fc_attn_lse_offset(const fc_seq *s, const int64_t st[3], int64_t h, int64_t i) {
    return s->qb * st[0] + h * st[1] + (s->q_row + i) * st[2];
}

/* The masking part of sequence s (its own lengths: bottom-right aligned per sequence). */
static inline FC_HOST_DEVICE fc_mask fc_seq_mask(const fc_attn *a, const fc_seq *s) {
    fc_mask m;
    m.Sq = s->Sq;
    m.Sk = s->Sk;
    m.wl = a->wl;
    m.wr = a->wr;
    m.n_sink = a->n_sink;
    return m;
}

/* The masking and score parts of a problem, as the seam (src/common/) takes them. */
static inline FC_HOST_DEVICE fc_mask fc_attn_mask(const fc_attn *a) {
    fc_mask m;
    m.Sq = a->Sq;
    m.Sk = a->Sk;
    m.wl = a->wl;
    m.wr = a->wr;
    m.n_sink = a->n_sink;
    return m;
}
static inline FC_HOST_DEVICE fc_score_params fc_attn_score(const fc_attn *a) {
    fc_score_params p;
    p.scale = a->scale;
    p.softcap = a->softcap;
    p.alibi = a->alibi;
    p.alibi_sb = a->salibi[0];
    p.alibi_sh = a->salibi[1];
    p.alibi_f64 = a->dtype == FLASHC_F64;
    p.offset = a->Sk - a->Sq;
    return p;
}
/* The score part of sequence s (ALiBi offset = its Sk − Sq). */
static inline FC_HOST_DEVICE fc_score_params fc_seq_score(const fc_attn *a, const fc_seq *s) {
    fc_score_params p = fc_attn_score(a);
    p.offset = s->Sk - s->Sq;
    return p;
}
/* The sink logit of head h (0 when there is none). */
static inline FC_HOST_DEVICE double fc_attn_sink(const fc_attn *a, int64_t h) {
    if (!a->sink_logits) return 0.0;
    return a->dtype == FLASHC_F64 ? ((const double *)a->sink_logits)[h * a->ssink]
                                  : (double)((const float *)a->sink_logits)[h * a->ssink];
}

/* ------------------------------------------------------ weighted row-sum */
/* x is viewed as [R, D] where the R rows are the outer multi-index over
 * outer_shape[0..nouter) (row-major), so each row's offset is
 * Σ_k idx_k · *_ostr[k]. Unused tensors are NULL. */
typedef struct fc_wsum {
    int32_t dtype;
    int32_t nouter;                       /* 0..FLASHC_MAX_DIMS-1 */
    int64_t outer_shape[FLASHC_MAX_DIMS];
    int64_t R, D;                         /* R = Π outer_shape (≥ 0); D ≥ 0 */
    const void *x;  int64_t x_ostr[FLASHC_MAX_DIMS], x_dstr;
    const void *w;  int64_t w_str;
    void *y;        int64_t y_ostr[FLASHC_MAX_DIMS];  /* fwd output */
    const void *dy; int64_t dy_ostr[FLASHC_MAX_DIMS]; /* bwd input */
    void *dx;       int64_t dx_ostr[FLASHC_MAX_DIMS], dx_dstr; /* bwd, may be NULL */
    void *dw;       int64_t dw_str;                   /* bwd, may be NULL */
    void *stream;
} fc_wsum;

/* Offset (in elements) of row r given per-outer-axis strides. */
static inline int64_t fc_wsum_row_offset(const fc_wsum *p, const int64_t *ostr, int64_t r) {
    int64_t off = 0;
    for (int k = p->nouter - 1; k >= 0; --k) {
        const int64_t n = p->outer_shape[k];
        off += (r % n) * ostr[k];
        r /= n;
    }
    return off;
}

/* --------------------------------------------------------- CPU backend */
/* Dense and ragged problems alike (ragged: one dense B = 1 call per sequence,
 * src/cpu/attn_ragged.c). */
flashc_status fc_cpu_attn_fwd(const fc_attn *a);
flashc_status fc_cpu_attn_bwd(const fc_attn *a);
flashc_status fc_cpu_weighted_sum(const fc_wsum *p);
flashc_status fc_cpu_weighted_sum_bwd(const fc_wsum *p);

/* 0 = scalar, 1 = avx2 (+fma), 2 = avx512 (F). Chosen once (thread-safe),
 * honouring FLASHC_CPU_ISA. */
enum { FC_ISA_SCALAR = 0, FC_ISA_AVX2 = 1, FC_ISA_AVX512 = 2 };
int fc_cpu_isa_level(void);
/* 1 when the AVX-512 level is in use and the CPU has AVX512_BF16
 * (vdpbf16ps), unless FLASHC_CPU_BF16=0 (read at every call). */
int fc_cpu_has_avx512bf16(void);
int fc_cpu_has_amx(void); /* the AMX-BF16 forward is usable (isa.c; FLASHC_CPU_AMX, FLASHC_CPU_BF16) */

/* fp16/bf16 <-> f32 conversion, exact (round-to-nearest-even on the way down). */
static inline float fc_bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } c;
    c.u = (uint32_t)h << 16;
    return c.f;
}
static inline uint16_t fc_f32_to_bf16(float f) {
    union { uint32_t u; float f; } c;
    c.f = f;
    if ((c.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((c.u >> 16) | 0x40u); /* NaN stays NaN */
    c.u += 0x7fffu + ((c.u >> 16) & 1u);
    return (uint16_t)(c.u >> 16);
}
float fc_f16_to_f32(uint16_t h);
uint16_t fc_f32_to_f16(float f);

/* ------------------------------------------------------- CUDA module ABI */
/* The CUDA backend lives in libflashc_cuda.so. The core dlopen()s it on
 * first use and calls flashc_cuda_module_init(), which returns this table.
 * The core refuses a table whose api_version differs from its own. On a
 * non-OK status, module->last_error() holds the module's thread-local
 * message, which the core copies into its own. */
#define FC_CUDA_MODULE_API_VERSION 4 /* 4: fc_attn's ragged-batch fields */
#define FC_CUDA_MODULE_INIT_SYMBOL "flashc_cuda_module_init"

typedef struct fc_cuda_module {
    uint32_t api_version; /* FC_CUDA_MODULE_API_VERSION */
    uint32_t struct_size; /* sizeof(fc_cuda_module) */
    const char *(*last_error)(void);
    /* Probes the driver and the devices; non-OK when no usable GPU. */
    flashc_status (*probe)(void);
    flashc_status (*attn_fwd)(const fc_attn *a);
    flashc_status (*attn_bwd)(const fc_attn *a);
    flashc_status (*weighted_sum)(const fc_wsum *p);
    flashc_status (*weighted_sum_bwd)(const fc_wsum *p);
    flashc_status (*device_count)(int *count);
    flashc_status (*device_name)(int device, char *buf, size_t len);
    flashc_status (*set_device)(int device);
    flashc_status (*malloc_)(void **ptr, size_t bytes);
    flashc_status (*free_)(void *ptr);
    flashc_status (*memcpy_)(void *dst, const void *src, size_t bytes, int kind);
    flashc_status (*synchronize)(void);
    flashc_status (*pointer_is_device)(const void *ptr, int *is_device);
    /* API 3: order later work on `stream` after the work already on `producer`
     * (flashc_cuda_stream_wait). */
    flashc_status (*stream_wait)(void *stream, void *producer);
} fc_cuda_module;

typedef const fc_cuda_module *(*fc_cuda_module_init_fn)(void);

#ifdef __cplusplus
}
#endif
#endif /* FLASHC_INTERNAL_H */
