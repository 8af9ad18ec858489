/*
 * attn_ragged.cuh — what the attention kernels need to run ragged problems
 * (flashc.h, "Ragged batches and KV caches"; fc_attn's ragged fields in
 * flashc_internal.h): varlen batches, KV caches with per-sequence lengths,
 * cache_batch_idx and paged caches.
 *
 * Every kernel that may receive a ragged problem has a template flag RAG.
 * RAG = false is the dense instantiation, the code of before: it never reads
 * an index array. RAG = true: the batch axis of the grid runs over the B
 * sequences, the other axes over the bounds (Sq = the longest query
 * sequence, Sk = the longest key sequence or the cache's capacity), and a
 * block first takes its sequence's view:
 *   s = fcc_seq_of<RAG>(a, b)          (fc_attn_seq: lengths, row origins)
 *   fc_seq_mask / fc_seq_score         (per-sequence bottom-right alignment)
 * and returns at once when its query (key) block lies past s.Sq (s.Sk).
 * Query rows are contiguous within a sequence (fc_attn_row_offset of row 0,
 * then the row stride); key rows may not be (paged caches: a tile spans
 * pages), so RAG kernels load K/V tiles through a table of key-row offsets
 * in shared memory, filled per tile by fcc_key_rows (fc_attn_key_offset:
 * one lookup per row, any page_size; one per tile where the tile's keys are
 * contiguous: no block table, or page_size a multiple of the tile) and read
 * by the tile loaders. Rows past s.Sk are never read (the loaders zero-fill
 * them), so garbage past a cache length has no effect.
 *
 * The backward's per-row buffers (L, Δ and the fp32 dQ of the atomic path)
 * are laid out like a contiguous lse [nb, Hq, nq] (fcc_rowbuf): dense
 * [B, Hq, Sq]; packed queries (cu_q) [1, Hq, Tq], one row per packed row.
 */
#ifndef FC_ATTN_RAGGED_CUH
#define FC_ATTN_RAGGED_CUH

#include "attn_params.cuh"

/* Sequence b's view. The dense instantiation's is the problem itself (the
 * fc_seq of a dense problem, flashc_internal.h), with no loads. */
template <bool RAG> __device__ __forceinline__ fc_seq fcc_seq_of(const fc_attn &a, int64_t b) {
    if constexpr (RAG) {
        return fc_attn_seq(&a, b);
    } else {
        fc_seq s;
        s.Sq = a.Sq;
        s.Sk = a.Sk;
        s.qb = b;
        s.q_row = 0;
        s.kb = b;
        s.k_row = 0;
        return s;
    }
}

/* The mask and score parts a block of sequence s uses: its own under RAG,
 * else the problem's (p.mask, p.score, by reference: the dense code reads
 * them from the kernel parameter as before). Usage:
 *   fcc_seq_parts<RAG> sp(p, s);  const fc_mask &mask = sp.mask(p); */
template <bool RAG> struct fcc_seq_parts {
    fc_mask m;
    fc_score_params sc;
    __device__ __forceinline__ fcc_seq_parts(const fcc_attn &p, const fc_seq &s) {
        if constexpr (RAG) {
            m = fc_seq_mask(&p.a, &s);
            sc = fc_seq_score(&p.a, &s);
        }
    }
    __device__ __forceinline__ const fc_mask &mask(const fcc_attn &p) const { return RAG ? m : p.mask; }
    __device__ __forceinline__ const fc_score_params &score(const fcc_attn &p) const { return RAG ? sc : p.score; }
};

/* Are the keys [j0, j0 + R) of a tile, j0 a multiple of R, contiguous in
 * memory (key j0 + r at fc_attn_key_offset(j0) + r·st[1])? Always without a
 * block table; paged, when R divides page_size (the tile lies in one page). */
__host__ __device__ __forceinline__ bool fcc_tile_contig(const fc_attn &a, int R) {
    return !a.block_table || a.page_size % R == 0;
}

/* The key-row table of a tile of R keys from j0 of sequence s (batch entry
 * b), kv head hk, in a tensor of strides st: per_tile (fcc_tile_contig):
 * tbl[0] = the element offset (fc_attn_key_offset) of key j0, the rest
 * follow at the row stride; else tbl[r] = that of key j0 + r, r < R. Keys
 * ≥ s.Sk get 0 (never read: the loaders zero-fill those rows). By threads
 * tid = 0..NT−1 of the block; the loaders may read tbl after the next
 * barrier. */
template <int R, int NT>
__device__ __forceinline__ void fcc_key_rows(int64_t *tbl, const fc_attn &a, const fc_seq &s, int64_t b,
                                             const int64_t st[4], int64_t hk, int64_t j0, bool per_tile, int tid) {
    for (int r = tid; r < (per_tile ? 1 : R); r += NT)
        tbl[r] = j0 + r < s.Sk ? fc_attn_key_offset(&a, &s, b, st, j0 + r, hk) : 0;
}
/* ... the K and the V table of one tile at once (k strides a.sk, v strides a.sv). */
template <int R, int NT>
__device__ __forceinline__ void fcc_kv_rows(int64_t *tk, int64_t *tv, const fc_attn &a, const fc_seq &s, int64_t b,
                                            int64_t hk, int64_t j0, bool per_tile, int tid) {
    const int n = per_tile ? 1 : R;
    for (int x = tid; x < 2 * n; x += NT) {
        const bool isv = x >= n;
        const int r = isv ? x - n : x;
        int64_t off = 0;
        if (j0 + r < s.Sk) /* two calls, not one on a selected stride array: that would copy both to the stack */
            off = isv ? fc_attn_key_offset(&a, &s, b, a.sv, j0 + r, hk) : fc_attn_key_offset(&a, &s, b, a.sk, j0 + r, hk);
        (isv ? tv : tk)[r] = off;
    }
}

/* The backward's row buffers: [nb, Hq, nq] rows, contiguous. */
struct fcc_rowbuf {
    int64_t nb, nq;
};
__host__ __device__ __forceinline__ fcc_rowbuf fcc_rowbuf_of(const fc_attn &a) {
    return a.cu_q ? fcc_rowbuf{1, a.Tq} : fcc_rowbuf{a.B, a.Sq};
}
/* The buffer row of query row i of sequence s, head h (an lse offset with
 * the buffer's strides). */
__device__ __forceinline__ int64_t fcc_rowbuf_row(const fc_attn &a, const fc_seq &s, int64_t h, int64_t i) {
    const int64_t nq = fcc_rowbuf_of(a).nq;
    const int64_t st[3] = {a.Hq * nq, nq, 1};
    return fc_attn_lse_offset(&s, st, h, i);
}
/* ... in a kernel instantiated for both: RAG through fcc_rowbuf_row, the
 * dense instantiation by its closed form [B, Hq, Sq] (batch entry b; no
 * loads of the ragged fields). */
template <bool RAG>
__device__ __forceinline__ int64_t fcc_rowbuf_at(const fc_attn &a, const fc_seq &s, int64_t b, int64_t h, int64_t i) {
    if constexpr (RAG)
        return fcc_rowbuf_row(a, s, h, i);
    else
        return (b * a.Hq + h) * a.Sq + i;
}

/* attn_ragged.cu, on p.a.stream. KV append (flashc_attn_kvcache_fwd with
 * k_new/v_new): k_new[b, t], v_new[b, t] into the cache at key position
 * seqlen_k[b] + t of sequence b (fc_attn_key_offset), positions outside the
 * cache skipped. Run before the attention, which then sees them
 * (seqlen_k_add = S_new). */
flashc_status fcc_kv_append_run(const fc_attn *a);
/* The condition fcc_kv_append_run launches its kernel under. */
bool fcc_kv_append_launches(const fc_attn *a);
/* Backward of a packed batch: zeros into the rows of dq (cu_q) and dk, dv
 * (cu_k) outside every sequence. */
flashc_status fcc_bwd_ragged_gaps_run(const fcc_attn &p);

#endif /* FC_ATTN_RAGGED_CUH */
