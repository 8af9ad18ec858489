/*
 * attn_ragged.c — ragged batches and KV caches on the CPU (flashc.h, "Ragged
 * batches and KV caches"; the problem's ragged fields: flashc_internal.h).
 *
 * Every sequence b is the dense B = 1 problem with its own lengths (Sq_b,
 * Sk_b): its q/o/lse/dout/dq rows, its keys and its ALiBi slopes are found
 * with fc_attn_seq, fc_attn_row_offset, fc_attn_key_offset and
 * fc_attn_lse_offset, and that sub-problem runs through fc_cpu_attn_fwd /
 * fc_cpu_attn_bwd. So every path (ISA, decode, BF16) and option applies
 * unchanged, and a sequence's result is bit-identical to the dense call on
 * its rows.
 *
 * KV cache: k_new / v_new are copied into the cache first — every sequence's
 * rows before any sequence attends; per kv head, sequences in b order, so a
 * cache slot that two sequences write holds the later one's row on every
 * run — then each sequence attends to its keys 0 .. Sk_b − 1. Paged: the
 * pages are read in place, never gathered. When the sequence's pages follow
 * one another in memory (always with one page) its sub-problem is dense
 * (strides of the pages); else it is a paged B = 1 problem that keeps its
 * row of the block table, and every forward path reads its K/V rows
 * through it (fc_kv_rows, attn_fwd.h), with the same arithmetic as on
 * dense rows: bit-identical to the dense call on the same keys.
 *
 * Backward (varlen): each sequence writes the dq/dk/dv rows of its own (the
 * sequences' rows are disjoint); rows outside every sequence are zeroed;
 * d(sink logits) is each sequence's partial [Hq], summed in b order.
 *
 * Threads: sequences run one after another, each on the whole OpenMP team,
 * unless there are at least as many non-empty sequences as threads and none
 * is heavier than a thread's share: then they run in parallel (heaviest
 * first, schedule(dynamic)), each on one thread. A sequence's arithmetic
 * never depends on its team, so both give the same bits.
 */
#include "attn_ragged.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parallel copies (append, zeroing) from this many elements on. */
#define FC_RAGGED_PAR_ELEMS ((int64_t)1 << 15)

/* p + off elements of esz bytes; p itself when off = 0 (an empty tensor's data may be NULL). */
static void *at(const void *p, int64_t off, size_t esz) {
    return off ? (void *)((const char *)p + off * (int64_t)esz) : (void *)p;
}

/* n elements from src (stride ss) to dst (stride ds), bit for bit. */
static void copy_elems(void *dst, int64_t ds, const void *src, int64_t ss, int64_t n, size_t esz) {
    if (ds == 1 && ss == 1) {
        memcpy(dst, src, (size_t)n * esz);
        return;
    }
    for (int64_t i = 0; i < n; ++i)
        memcpy((char *)dst + i * ds * (int64_t)esz, (const char *)src + i * ss * (int64_t)esz, esz);
}

/* Rows [r0, r1) (axis 1, batch 0) of a packed tensor with H heads = 0
 * (+0.0 is all-zero bits in every float dtype). */
static void zero_rows(void *t, const int64_t st[4], int64_t r0, int64_t r1, int64_t H, int64_t D, size_t esz) {
    static const char zero[8] = {0};
#pragma omp parallel for schedule(static) if ((r1 - r0) * H * D >= FC_RAGGED_PAR_ELEMS)
    for (int64_t r = r0; r < r1; ++r)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t d = 0; d < D; ++d)
                memcpy((char *)t + (r * st[1] + h * st[2] + d * st[3]) * (int64_t)esz, zero, esz);
}

/* KV append: k_new / v_new [B, S_new, Hkv, D] into the cache at key
 * positions seqlen_k[b] .. + S_new − 1 of each sequence (through the block
 * table when paged). One task per kv head, sequences in b order within it
 * (see the top: a slot written twice gets the later row, never a race). */
static void append_kv(const fc_attn *a) {
    if (!a->k_new || a->S_new == 0) return;
    const size_t esz = flashc_dtype_size(a->dtype);
#pragma omp parallel for schedule(static) if (a->B * a->S_new * a->Hkv * a->D >= FC_RAGGED_PAR_ELEMS)
    for (int64_t hk = 0; hk < a->Hkv; ++hk)
        for (int64_t b = 0; b < a->B; ++b) {
            const fc_seq s = fc_attn_seq(a, b);
            const int64_t j0 = s.Sk - a->S_new; /* = seqlen_k[b] (the core checked it fits) */
            for (int64_t t = 0; t < a->S_new; ++t) {
                const int64_t n = b * a->skn[0] + t * a->skn[1] + hk * a->skn[2];
                const int64_t m = b * a->svn[0] + t * a->svn[1] + hk * a->svn[2];
                copy_elems(at(a->k, fc_attn_key_offset(a, &s, b, a->sk, j0 + t, hk), esz), a->sk[3],
                           at(a->k_new, n, esz), a->skn[3], a->D, esz);
                copy_elems(at(a->v, fc_attn_key_offset(a, &s, b, a->sv, j0 + t, hk), esz), a->sv[3],
                           at(a->v_new, m, esz), a->svn[3], a->D, esz);
            }
        }
}

/* 1 when the pages holding sequence b's Sk_b keys follow one another in
 * memory (page ids p0, p0 + 1, …, and a page stride of page_size rows), so
 * that key j is at p0·sk[0] + j·sk[1]; always for one page. */
static int pages_in_place(const fc_attn *a, int64_t b, const fc_seq *s) {
    const int64_t np = s->Sk / a->page_size + (s->Sk % a->page_size != 0); /* (no overflow) */
    if (np <= 1) return 1;
    int64_t ks, vs;
    if (__builtin_mul_overflow(a->page_size, a->sk[1], &ks) || ks != a->sk[0] ||
        __builtin_mul_overflow(a->page_size, a->sv[1], &vs) || vs != a->sv[0])
        return 0;
    const int32_t *bt = a->block_table + b * a->sbt[0];
    for (int64_t p = 1; p < np; ++p)
        if ((int64_t)bt[p * a->sbt[1]] != (int64_t)bt[0] + p) return 0;
    return 1;
}

/* The B = 1 problem of sequence b (s = fc_attn_seq(a, b)): dense, or, for
 * pages that do not follow one another, paged with its row of the block
 * table (fc_kv_rows' addressing; the forward only: varlen has no pages). */
static fc_attn seq_problem(const fc_attn *a, int64_t b, const fc_seq *s) {
    const size_t esz = flashc_dtype_size(a->dtype), rsz = a->dtype == FLASHC_F64 ? 8 : 4;
    fc_attn t = *a;
    t.B = 1;
    t.Sq = s->Sq;
    t.Sk = s->Sk;
    t.q = at(a->q, fc_attn_row_offset(s, a->sq, 0, 0), esz);
    t.o = at(a->o, fc_attn_row_offset(s, a->so, 0, 0), esz);
    if (a->lse) t.lse = at(a->lse, fc_attn_lse_offset(s, a->slse, 0, 0), rsz);
    const int paged = a->block_table && !pages_in_place(a, b, s);
    if (!paged) { /* keys from row 0 on: packed rows, cache rows, or pages that follow one another */
        t.k = at(a->k, s->Sk ? fc_attn_key_offset(a, s, b, a->sk, 0, 0) : 0, esz);
        t.v = at(a->v, s->Sk ? fc_attn_key_offset(a, s, b, a->sv, 0, 0) : 0, esz);
    }
    if (a->alibi) { /* [B, Hq] slopes: sequence b's row; [Hq]: salibi[0] = 0 already */
        t.alibi = at(a->alibi, b * a->salibi[0], rsz);
        t.salibi[0] = 0;
    }
    if (a->dout) {
        t.dout = at(a->dout, fc_attn_row_offset(s, a->sdo, 0, 0), esz);
        t.dq = at(a->dq, fc_attn_row_offset(s, a->sdq, 0, 0), esz);
        t.dk = at(a->dk, s->Sk ? fc_attn_key_offset(a, s, b, a->sdk, 0, 0) : 0, esz);
        t.dv = at(a->dv, s->Sk ? fc_attn_key_offset(a, s, b, a->sdv, 0, 0) : 0, esz);
    }
    t.dsinks = NULL; /* the caller's per-sequence partial */
    /* dense from here on, but for a paged sequence's block table */
    t.cu_q = t.cu_k = t.seqlen_k = t.kv_batch = NULL;
    t.scu_q = t.scu_k = t.sseqlen_k = t.seqlen_k_add = t.skv_batch = 0;
    t.Tq = t.Tk = 0;
    if (paged) {
        t.block_table = a->block_table + b * a->sbt[0];
        t.sbt[0] = 0;
    } else {
        t.block_table = NULL;
        t.sbt[0] = t.sbt[1] = t.max_pages = t.page_size = 0;
        t.Bk = 0;
    }
    t.k_new = t.v_new = NULL;
    t.S_new = 0;
    return t;
}

typedef struct ragged_run {
    const fc_attn *a;
    int bwd;
    void *dsp; /* bwd with sink logits: per-sequence d(sink) partials [B, Hq], the sinks' real type */
} ragged_run;

/* Sequence b on the calling thread's team. */
static flashc_status run_seq(const ragged_run *r, int64_t b) {
    const fc_attn *a = r->a;
    const fc_seq s = fc_attn_seq(a, b);
    fc_attn t = seq_problem(a, b, &s);
    if (!r->bwd) return fc_cpu_attn_fwd_one(&t);
    if (r->dsp) {
        t.dsinks = at(r->dsp, b * a->Hq, a->dtype == FLASHC_F64 ? 8 : 4);
        t.sdsink = 1;
    }
    return fc_cpu_attn_bwd(&t);
}

typedef struct seq_item {
    int64_t b;
    double cost;
} seq_item;

static int item_cmp(const void *x, const void *y) { /* heaviest first, then b */
    const seq_item *p = (const seq_item *)x, *q = (const seq_item *)y;
    if (p->cost != q->cost) return p->cost > q->cost ? -1 : 1;
    return p->b < q->b ? -1 : p->b > q->b;
}

/* Every non-empty sequence (fwd: with query rows; bwd: with rows or keys,
 * whose gradients it writes), in sequence or in parallel (see the top). */
static flashc_status run_sequences(const ragged_run *r) {
    const fc_attn *a = r->a;
    seq_item *items = (seq_item *)malloc((size_t)a->B * sizeof *items);
    if (!items) return fc_set_error(FLASHC_ERR_OUT_OF_MEMORY, "attention: a list of %lld sequences", (long long)a->B);
    int64_t n = 0;
    double total = 0.0, heaviest = 0.0;
    for (int64_t b = 0; b < a->B; ++b) {
        const fc_seq s = fc_attn_seq(a, b);
        if (r->bwd ? s.Sq + s.Sk == 0 : s.Sq == 0) continue;
        const double cost = (double)s.Sq * (double)s.Sk + (double)(s.Sq + s.Sk);
        items[n++] = (seq_item){b, cost};
        total += cost;
        if (cost > heaviest) heaviest = cost;
    }
    const int nt = omp_get_max_threads();
    const int outer = nt > 1 && n >= nt && heaviest * nt <= total;
    flashc_status st = FLASHC_OK;
    if (!outer) {
        for (int64_t i = 0; i < n && st == FLASHC_OK; ++i) st = run_seq(r, items[i].b);
    } else {
        char msg[512] = "";
        qsort(items, (size_t)n, sizeof *items, item_cmp);
#pragma omp parallel num_threads(nt)
        {
            const int saved = omp_get_max_threads();
            omp_set_num_threads(1); /* each sequence on this thread alone */
#pragma omp for schedule(dynamic, 1)
            for (int64_t i = 0; i < n; ++i) {
                const flashc_status s = run_seq(r, items[i].b);
                if (s != FLASHC_OK) {
#pragma omp critical(fc_ragged_error)
                    if (st == FLASHC_OK) { /* the message is this worker thread's */
                        st = s;
                        snprintf(msg, sizeof msg, "%s", flashc_last_error());
                    }
                }
            }
            omp_set_num_threads(saved);
        }
        if (st != FLASHC_OK) fc_set_error(st, "%s", msg);
    }
    free(items);
    return st;
}

flashc_status fc_cpu_attn_ragged_fwd(const fc_attn *a) {
    append_kv(a);
    const ragged_run r = {a, 0, NULL};
    return run_sequences(&r);
}

flashc_status fc_cpu_attn_ragged_bwd(const fc_attn *a) {
    const size_t esz = flashc_dtype_size(a->dtype), rsz = a->dtype == FLASHC_F64 ? 8 : 4;
    ragged_run r = {a, 1, NULL};
    if (a->sink_logits && a->dsinks) {
        r.dsp = calloc((size_t)(a->B * a->Hq), rsz); /* sequences with no rows and no keys leave 0 */
        if (!r.dsp)
            return fc_set_error(FLASHC_ERR_OUT_OF_MEMORY, "attention backward: %lld x %lld d(sink) partials",
                                (long long)a->B, (long long)a->Hq);
    }
    const flashc_status st = run_sequences(&r);
    if (st != FLASHC_OK) {
        free(r.dsp);
        return st;
    }
    /* Rows outside every sequence: before the first and after the last
     * (cu_seqlens are non-decreasing, so there are no gaps between them). */
    if (a->cu_q) {
        const fc_seq s0 = fc_attn_seq(a, 0), sl = fc_attn_seq(a, a->B - 1);
        zero_rows(a->dq, a->sdq, 0, s0.q_row, a->Hq, a->D, esz);
        zero_rows(a->dq, a->sdq, sl.q_row + sl.Sq, a->Tq, a->Hq, a->D, esz);
    }
    if (a->cu_k) {
        const fc_seq s0 = fc_attn_seq(a, 0), sl = fc_attn_seq(a, a->B - 1);
        zero_rows(a->dk, a->sdk, 0, s0.k_row, a->Hkv, a->D, esz);
        zero_rows(a->dk, a->sdk, sl.k_row + sl.Sk, a->Tk, a->Hkv, a->D, esz);
        zero_rows(a->dv, a->sdv, 0, s0.k_row, a->Hkv, a->D, esz);
        zero_rows(a->dv, a->sdv, sl.k_row + sl.Sk, a->Tk, a->Hkv, a->D, esz);
    }
    if (r.dsp) { /* d s_h = Σ_b partial_b,h, in b order, in double */
        for (int64_t h = 0; h < a->Hq; ++h) {
            double acc = 0.0;
            for (int64_t b = 0; b < a->B; ++b)
                acc += rsz == 8 ? ((const double *)r.dsp)[b * a->Hq + h] : (double)((const float *)r.dsp)[b * a->Hq + h];
            if (rsz == 8) ((double *)a->dsinks)[h * a->sdsink] = acc;
            else ((float *)a->dsinks)[h * a->sdsink] = (float)acc;
        }
        free(r.dsp);
    }
    return FLASHC_OK;
}
