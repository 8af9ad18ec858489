/*
 * Attention backward on the CPU, by recomputation from L (FlashAttention-2
 * style): the Sq×Sk matrices are only ever held one BR×BC tile at a time.
 *
 * Forward, per row i (flashc.h "Scores", attn_score.h):
 *   u_ij = <q_i, k_j>·qk_mul,  x_ij = fc_score(mod_bh, u_ij, tanh u_ij, i + Sk − Sq − j)
 *        (scale, softcap c·tanh(·/c), − slope·|dist|),
 *   P_ij = exp(x_ij − L_i) (visible j only),  O_i = Σ_j P_ij v_j.
 * Backward, with Δ_i = <dO_i, O_i>:
 *   dV_j  = Σ_i P_ij dO_i                     (O_i is linear in v_j)
 *   dP_ij = <dO_i, v_j>
 *   dx_ij = P_ij (dP_ij − Δ_i)                (softmax Jacobian; Σ_j P_ij dP_ij
 *                                              = <dO_i, O_i> = Δ_i, also with a
 *                                              sink logit, which has no value)
 *   dS'_ij = dx_ij · fc_score_dgrad(mod, t)   (1 − t² with softcap; ALiBi
 *                                              slopes are constants)
 *   dQ_i  = scale Σ_j dS'_ij k_j,   dK_j = scale Σ_i dS'_ij q_i
 *   d s_h = Σ_{b,i} fc_dsink_term(s_h, L_i, Δ_i) = −Σ exp(s_h − L_i) Δ_i
 *           (∂L_i/∂s_h = exp(s_h − L_i), so ∂P_ij/∂s_h = −P_ij exp(s_h − L_i)).
 * Rows with L_i = −inf have no visible key: they contribute nothing. An
 * invisible (i, j) contributes nothing either, also when q_i, k_j, v_j or
 * dO_i hold Inf/NaN: the microkernels select P, dS' to 0 there, and when
 * q, dO or k hold a non-finite value anywhere (ctx.guard_qo, guard_k; one
 * scan per call) the products with them skip invisible pairs (gemm_vis,
 * the same bits on the visible ones) instead of multiplying them by 0.
 *
 * Work split (no atomics, nothing depends on the thread count):
 *   pass 0: Δ and L for every (b, h, i), staged in the working precision
 *           (L in the microkernels' unit); d sinks summed per head in (b, i)
 *           order.
 *   fused mode (the default, 5 tile GEMMs): one task per (b, kv head, chunk
 *           of key blocks); per key block dK, dV over the group's query heads
 *           and the query blocks that see it (fc_key_block_rows) in order,
 *           and dQ += dS K into the chunk's own fp32 partial buffer; then
 *           dQ = Σ_chunk partials in chunk order. The chunk count is a
 *           function of the shape (≈16 tasks), never of the thread count.
 *   two-pass mode (when the partials would exceed 1 GiB, or
 *           FLASHC_CPU_BWD=twopass): pass 1 = one task per (b, kv head, key
 *           block) for dK, dV; pass 2 = one task per (b, q head, query block)
 *           for dQ over the key blocks it sees (fc_block_keysegs),
 *           recomputing S and dP (7 tile GEMMs) but with no partials.
 * Every task owns the rows it writes and sums each element in a fixed order,
 * so the result is bit-identical across runs and thread counts.
 *
 * BF16 with AVX512-BF16 (fc_cpu_has_avx512bf16(), ctx.bf): the same tiles
 * and order, with the tile GEMMs on vdpbf16ps (attn_bwd_avx512bf16.c) as
 * FlashAttention's backward: S, dP from the bf16 inputs (exact products),
 * P and dS' rounded to bf16 for dV, dK, dQ; fp32 sums throughout.
 */
#include "attn_bwd.h"
#include "attn_ragged.h"
#include "plan.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

enum { BR = FC_BWD_BR, BC = FC_BWD_BC };

/* The microkernel table of a path (plan.h: fc_plan_bwd chooses). */
static const fc_bwd_kern *path_kernels(fc_bwd_path path) {
    switch (path) {
    case FC_BWD_SCALAR_F64: return &fc_bwd_scalar_f64;
    case FC_BWD_AMX_BF16:   /* the AVX-512 table, its tile GEMMs on AMX tiles (ctx.bf, ctx.amx) */
    case FC_BWD_AVX512BF16: /* the AVX-512 table, its tile GEMMs on vdpbf16ps (ctx.bf) */
    case FC_BWD_AVX512: return &fc_bwd_avx512_f32;
    case FC_BWD_AVX2: return &fc_bwd_avx2_f32;
    default: return &fc_bwd_scalar_f32;
    }
}

static inline double ld_elem(int dtype, const void *p, int64_t off) {
    switch (dtype) {
    case FLASHC_F32: return ((const float *)p)[off];
    case FLASHC_F16: return fc_f16_to_f32(((const uint16_t *)p)[off]);
    case FLASHC_BF16: return fc_bf16_to_f32(((const uint16_t *)p)[off]);
    default: return ((const double *)p)[off];
    }
}

static inline void st_elem(int dtype, void *p, int64_t off, double v) {
    switch (dtype) {
    case FLASHC_F32: ((float *)p)[off] = (float)v; break;
    case FLASHC_F16: ((uint16_t *)p)[off] = fc_f32_to_f16((float)v); break;
    case FLASHC_BF16: ((uint16_t *)p)[off] = fc_f32_to_bf16((float)v); break;
    default: ((double *)p)[off] = v; break;
    }
}

static inline double rd_real(size_t esz, const void *p, ptrdiff_t i) {
    return esz == 8 ? ((const double *)p)[i] : (double)((const float *)p)[i];
}

static inline int64_t clamp64(int64_t x, int64_t lo, int64_t hi) {
    return x < lo ? lo : (x > hi ? hi : x);
}

/* dst[r*rs + c*cs] = src[r*ld + c] rounded to dtype, r < rows, c < cols. */
static void store_tile(size_t esz, int dtype, const void *src, ptrdiff_t ld, int rows,
                       int cols, void *dst, int64_t rs, int64_t cs) {
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c)
            st_elem(dtype, dst, r * rs + c * cs, rd_real(esz, src, (ptrdiff_t)r * ld + c));
}

typedef struct bwd_ctx {
    const fc_attn *a;
    const fc_bwd_kern *kk;
    size_t esz;
    fc_mask mask;          /* fc_attn_mask(a), once per call */
    fc_score_params sp;    /* fc_attn_score(a) */
    int64_t G, Dp, nqb, nkb;
    const void *L, *delta; /* [B, Hq, Sq] (+ FC_BWD_NPAD readable) in the working precision; L·unit */
    int64_t nchunk;        /* fused mode: key blocks split into this many chunks */
    void *dqp;             /* fused mode: dQ partials [nchunk, B, Hq, Sq, Dp]; else NULL */
    int bf;                /* BF16 on vdpbf16ps (fc_bwd_bf16_*): bf16 operands, fp32 sums */
    int amx;               /* with bf: the tile products on AMX (fc_bwd_amx_gemm) */
    int guard_qo, guard_k; /* q or dO / k hold Inf/NaN: the dK, dV / dQ products skip invisible pairs */
} bwd_ctx;

#define BUF(base, off_elems) ((void *)((char *)(base) + (size_t)(off_elems) * c->esz))

/* Per-thread scratch, in reals; each piece starts on a 64-byte boundary. */
typedef struct bwd_scratch {
    void *t1, *t2;      /* Kt, Vt [Dp×BC] (pass 1) | Qt, dOt [Dp×BR] (pass 2) */
    void *r1, *r2;      /* Q, dO [BR×Dp]  (pass 1) | K, V [BC×Dp]  (pass 2) */
    void *s, *dp;       /* [BR×BC] (pass 1) | [BC×BR] (pass 2) */
    void *acc1, *acc2;  /* dK, dV [BC×Dp] (pass 1) | dQ [BR×Dp] (pass 2) */
    void *kr;           /* K [BC×Dp] (pass 1 when it also makes dQ) */
    void *x[10];        /* bf mode: bf16 operands (see pass1_task / pass2_task) */
    int32_t *se, *lo, *hi;      /* tile-relative visibility, 64 entries */
    int64_t *ase, *alo, *ahi;   /* absolute visibility of the query block */
} bwd_scratch;

static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; }

static size_t scratch_bytes(const bwd_ctx *c) {
    const size_t big = round64((size_t)c->Dp * 64 * c->esz);
    const size_t sq = round64((size_t)BR * BC * c->esz);
    const size_t bfp = c->bf ? 10 * (big > sq ? big : sq) : 0;
    return 7 * big + 2 * sq + bfp + 3 * round64(64 * 4) + 3 * round64(64 * 8);
}

static void scratch_carve(const bwd_ctx *c, char *p, bwd_scratch *s) {
    const size_t big = round64((size_t)c->Dp * 64 * c->esz);
    const size_t sq = round64((size_t)BR * BC * c->esz);
    s->t1 = p; p += big;
    s->t2 = p; p += big;
    s->r1 = p; p += big;
    s->r2 = p; p += big;
    s->acc1 = p; p += big;
    s->acc2 = p; p += big;
    s->kr = p; p += big;
    s->s = p; p += sq;
    s->dp = p; p += sq;
    for (int i = 0; i < 10; ++i) {
        s->x[i] = p;
        if (c->bf) p += big > sq ? big : sq;
    }
    s->se = (int32_t *)p; p += round64(64 * 4);
    s->lo = (int32_t *)p; p += round64(64 * 4);
    s->hi = (int32_t *)p; p += round64(64 * 4);
    s->ase = (int64_t *)p; p += round64(64 * 8);
    s->alo = (int64_t *)p; p += round64(64 * 8);
    s->ahi = (int64_t *)p;
}

/* Visible keys of row i, empty when L_i = −inf (nothing visible in the forward). */
static inline void row_range(const bwd_ctx *c, int64_t lidx, int64_t i, int64_t *se,
                             int64_t *lo, int64_t *hi) {
    if (rd_real(c->esz, c->L, lidx) == -INFINITY) {
        *se = *lo = *hi = 0;
        return;
    }
    fc_visible_keys(&c->mask, i, se, lo, hi);
}

/* The score pipeline of (b, h) for the tile whose first query is i0 and
 * first key j0, in the microkernels' unit. */
static inline fc_bwd_score tile_score(const bwd_ctx *c, int64_t b, int64_t h, int64_t i0,
                                      int64_t j0) {
    fc_bwd_score sc;
    sc.mod = fc_score_mod_make(&c->sp, b, h, c->kk->unit);
    sc.scale = c->a->scale;
    sc.dist0 = (double)fc_alibi_dist(&c->sp, i0, j0);
    return sc;
}

/* ------------------------------------------------- guarded tile products */
/* An accumulating tile product (dK, dV: b = Q or dO rows, q_is_m = 0; dQ:
 * b = K rows, q_is_m = 1): the microkernel gemm, or gemm_vis on the tile's
 * visibility (w->se/lo/hi) when b may hold Inf/NaN (guard). */
static inline void tile_prod(const bwd_ctx *c, const bwd_scratch *w, int guard, int q_is_m, int M,
                             int N, int K, const void *a, ptrdiff_t ars, ptrdiff_t acs,
                             const void *b, ptrdiff_t ldb, void *cc, ptrdiff_t ldc) {
    if (!guard) c->kk->gemm(M, N, K, a, ars, acs, b, ldb, cc, ldc, 1);
    else c->kk->gemm_vis(M, N, K, a, ars, acs, b, ldb, cc, ldc, q_is_m, w->se, w->lo, w->hi);
}

/* A bf16-pair tile product: on AMX tiles (c->amx) or vdpbf16ps. */
static inline void bgemm(const bwd_ctx *c, int M, int N, int K2, const uint32_t *a, ptrdiff_t ars, ptrdiff_t acs,
                         const uint32_t *b, ptrdiff_t ldb, float *cc, ptrdiff_t ldc, int accumulate) {
    if (c->amx) fc_bwd_amx_gemm(M, N, K2, a, ars, acs, b, ldb, cc, ldc, accumulate);
    else fc_bwd_bf16_gemm(M, N, K2, a, ars, acs, b, ldb, cc, ldc, accumulate);
}

/* The same on bf16 pairs: K the real reduction length (K2 = ⌈K/2⌉ pairs). */
static inline void tile_prod_bf16(const bwd_ctx *c, const bwd_scratch *w, int guard, int q_is_m, int M, int N,
                                  int K, const uint32_t *a, ptrdiff_t ars, ptrdiff_t acs, const uint32_t *b,
                                  ptrdiff_t ldb, float *cc, ptrdiff_t ldc) {
    if (!guard) bgemm(c, M, N, (K + 1) / 2, a, ars, acs, b, ldb, cc, ldc, 1);
    else if (c->amx) fc_bwd_amx_gemm_vis(M, N, K, a, ars, acs, b, ldb, cc, ldc, q_is_m, w->se, w->lo, w->hi);
    else fc_bwd_bf16_gemm_vis(M, N, K, a, ars, acs, b, ldb, cc, ldc, q_is_m, w->se, w->lo, w->hi);
}

/* Is there an Inf or NaN in tensor [B, S, H, D] (strides st, elements)?
 * Exponent bits all ones; one read of the tensor (vectorisable for unit d
 * stride), against the backward's O(Sq·Sk·D) per head. */
#define NONFINITE_ROW(T, MASK)                                                               \
    do {                                                                                     \
        const T *u = (const T *)p + o;                                                       \
        if (ds == 1)                                                                         \
            for (int64_t d = 0; d < D; ++d) x |= (u[d] & (MASK)) == (MASK);                  \
        else                                                                                 \
            for (int64_t d = 0; d < D; ++d) x |= (u[d * ds] & (MASK)) == (MASK);             \
    } while (0)

static int has_nonfinite(int dtype, const void *p, const int64_t st[4], int64_t B, int64_t S,
                         int64_t H, int64_t D) {
    const int64_t ds = st[3];
    int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad)
    for (int64_t bs = 0; bs < B * S; ++bs) {
        const int64_t b = bs / S, s = bs % S;
        int x = 0;
        for (int64_t h = 0; h < H; ++h) {
            const int64_t o = b * st[0] + s * st[1] + h * st[2];
            switch (dtype) {
            case FLASHC_F32: NONFINITE_ROW(uint32_t, 0x7f800000u); break;
            case FLASHC_F64: NONFINITE_ROW(uint64_t, 0x7ff0000000000000ull); break;
            case FLASHC_F16: NONFINITE_ROW(uint16_t, 0x7c00u); break;
            default: NONFINITE_ROW(uint16_t, 0x7f80u); break; /* BF16 */
            }
        }
        bad |= x;
    }
    return bad;
}
#undef NONFINITE_ROW

/* ---------------------------------------------------------------- bf16 */
/* One pass-1 tile on vdpbf16ps, as FlashAttention's backward on GPUs:
 * S = Q Kᵀ and dP = dO Vᵀ from the bf16 inputs (exact products), P and dS'
 * rounded to bf16 (nearest even) for dV += Pᵀ dO, dK += dS'ᵀ Q and
 * dQ += dS' K; every sum in fp32. In: x[0], x[1] = Kᵀ, Vᵀ as dim pairs
 * [Dp/2×BC], x[2] = K as key pairs [BC/2×Dp] (when dq is given); Q, dO rows
 * [nr×Dp] as bf16 rows in x[3], x[4] and as pairs of rows in x[5], x[6]
 * when packed, else (packed = 0) as fp32 copies in w->r1, w->r2. */
static void pass1_tile_bf16(const bwd_ctx *c, bwd_scratch *w, int nr, int nc, const void *L,
                            const void *delta, const fc_bwd_score *sc, char *dq, int packed) {
    const fc_attn *a = c->a;
    const int D = (int)a->D, Dp = (int)c->Dp;
    const int D2 = (D + 1) / 2;
    uint16_t *qb = w->x[3], *ob = w->x[4], *dsb = w->x[9];
    uint32_t *qp = w->x[5], *op = w->x[6], *pp = w->x[7], *dsp = w->x[8];
    if (!packed) {
        fc_bwd_bf16_cvt_rows(w->r1, Dp, nr, Dp, qb, Dp); /* Q, dO rows: pairs of dims */
        fc_bwd_bf16_cvt_rows(w->r2, Dp, nr, Dp, ob, Dp);
        fc_bwd_bf16_pair_rows(w->r1, Dp, nr, Dp, qp, Dp); /* Q, dO: pairs of query rows */
        fc_bwd_bf16_pair_rows(w->r2, Dp, nr, Dp, op, Dp);
    }
    bgemm(c, nr, BC, D2, (const uint32_t *)qb, Dp / 2, 1, w->x[0], BC, w->s, BC, 0);
    bgemm(c, nr, BC, D2, (const uint32_t *)ob, Dp / 2, 1, w->x[1], BC, w->dp, BC, 0);
    c->kk->ew_q(nr, BC, w->s, w->dp, BC, L, delta, sc, w->se, w->lo, w->hi);
    fc_bwd_bf16_pair_rows(w->s, BC, nr, BC, pp, BC);   /* Pᵀ, dS'ᵀ: pairs of query rows */
    fc_bwd_bf16_pair_rows(w->dp, BC, nr, BC, dsp, BC);
    tile_prod_bf16(c, w, c->guard_qo, 0, nc, Dp, nr, dsp, 1, BC, qp, Dp, w->acc1, Dp); /* dK += dS'ᵀ Q */
    tile_prod_bf16(c, w, c->guard_qo, 0, nc, Dp, nr, pp, 1, BC, op, Dp, w->acc2, Dp);  /* dV += Pᵀ dO  */
    if (dq) { /* dQ += dS' K; columns ≥ nc of dS' are 0 (invisible) */
        fc_bwd_bf16_cvt_rows(w->dp, BC, nr, BC, dsb, BC);
        tile_prod_bf16(c, w, c->guard_k, 1, nr, Dp, nc, (const uint32_t *)dsb, BC / 2, 1, w->x[2], Dp,
                       (float *)dq, Dp);
    }
}

/* ---------------------------------------------------------------- pass 1 */
/* One (query head h, query block qb) × key block [j0, j0+nc) tile of pass 1:
 *   S = Q Kᵀ, dP = dO Vᵀ  → P, dS'   (tile [nr×BC], rows = queries)
 *   dV += Pᵀ dO, dK += dS'ᵀ Q
 *   and when dq is given (fused mode): dq rows i0.. += dS' K
 * Kᵀ, Vᵀ (and K) are packed on the task's first visible tile (*have_k). */
static void pass1_tile(const bwd_ctx *c, bwd_scratch *w, int64_t b, int64_t hk, int64_t h,
                       int64_t qb, int64_t j0, int nc, char *dq, int *have_k) {
    const fc_attn *a = c->a;
    const fc_bwd_kern *kk = c->kk;
    const int D = (int)a->D, Dp = (int)c->Dp, dt = a->dtype;
    const size_t ds = flashc_dtype_size(dt);
    const int64_t i0 = qb * BR;
    const int nr = (int)(a->Sq - i0 < BR ? a->Sq - i0 : BR);
    const int64_t lrow = (b * a->Hq + h) * a->Sq + i0; /* index of (b, h, i0) in L, Δ */

    int any = 0;
    for (int r = 0; r < nr; ++r) {
        int64_t se, lo, hi;
        row_range(c, lrow + r, i0 + r, &se, &lo, &hi);
        w->se[r] = (int32_t)clamp64(se - j0, 0, nc);
        w->lo[r] = (int32_t)clamp64(lo - j0, 0, nc);
        w->hi[r] = (int32_t)clamp64(hi - j0, 0, nc);
        any |= w->se[r] > 0 || w->lo[r] < w->hi[r];
    }
    if (!any) return;

    if (!*have_k) { /* Kᵀ, Vᵀ [D×BC], zero beyond nc; packed once per task */
        const char *kp = (const char *)a->k + (b * a->sk[0] + j0 * a->sk[1] + hk * a->sk[2]) * (int64_t)ds;
        const char *vp = (const char *)a->v + (b * a->sv[0] + j0 * a->sv[1] + hk * a->sv[2]) * (int64_t)ds;
        kk->pack(dt, kp, a->sk[3], a->sk[1], D, nc, BC, w->t1, BC);
        kk->pack(dt, vp, a->sv[3], a->sv[1], D, nc, BC, w->t2, BC);
        if (dq) kk->pack(dt, kp, a->sk[1], a->sk[3], nc, D, Dp, w->kr, Dp);
        if (c->bf) { /* Kᵀ, Vᵀ as pairs of dims; K as pairs of keys (for dQ) */
            fc_bwd_bf16_pair_rows(w->t1, BC, D, BC, w->x[0], BC);
            fc_bwd_bf16_pair_rows(w->t2, BC, D, BC, w->x[1], BC);
            if (dq) fc_bwd_bf16_pair_rows(w->kr, Dp, nc, Dp, w->x[2], Dp);
        }
        *have_k = 1;
    }
    const fc_bwd_score sc = tile_score(c, b, h, i0, j0);
    const char *qp = (const char *)a->q + (b * a->sq[0] + i0 * a->sq[1] + h * a->sq[2]) * (int64_t)ds;
    const char *op = (const char *)a->dout + (b * a->sdo[0] + i0 * a->sdo[1] + h * a->sdo[2]) * (int64_t)ds;
    if (c->bf && a->sq[3] == 1 && a->sdo[3] == 1) { /* bf16 rows straight in */
        fc_bwd_bf16_pack_both((const uint16_t *)qp, a->sq[1], nr, D, Dp, w->x[3], Dp, w->x[5], Dp);
        fc_bwd_bf16_pack_both((const uint16_t *)op, a->sdo[1], nr, D, Dp, w->x[4], Dp, w->x[6], Dp);
        pass1_tile_bf16(c, w, nr, nc, BUF(c->L, lrow), BUF(c->delta, lrow), &sc, dq, 1);
        return;
    }
    kk->pack(dt, qp, a->sq[1], a->sq[3], nr, D, Dp, w->r1, Dp);
    kk->pack(dt, op, a->sdo[1], a->sdo[3], nr, D, Dp, w->r2, Dp);
    if (c->bf) {
        pass1_tile_bf16(c, w, nr, nc, BUF(c->L, lrow), BUF(c->delta, lrow), &sc, dq, 0);
        return;
    }
    kk->gemm(nr, BC, D, w->r1, Dp, 1, w->t1, BC, w->s, BC, 0);  /* S  = Q Kᵀ  */
    kk->gemm(nr, BC, D, w->r2, Dp, 1, w->t2, BC, w->dp, BC, 0); /* dP = dO Vᵀ */
    kk->ew_q(nr, BC, w->s, w->dp, BC, BUF(c->L, lrow), BUF(c->delta, lrow), &sc, w->se, w->lo, w->hi);
    tile_prod(c, w, c->guard_qo, 0, nc, Dp, nr, w->dp, 1, BC, w->r1, Dp, w->acc1, Dp); /* dK += dS'ᵀ Q */
    tile_prod(c, w, c->guard_qo, 0, nc, Dp, nr, w->s, 1, BC, w->r2, Dp, w->acc2, Dp);  /* dV += Pᵀ dO  */
    if (dq) tile_prod(c, w, c->guard_k, 1, nr, Dp, nc, w->dp, BC, 1, w->kr, Dp, dq, Dp); /* dQ += dS' K */
}

/* dK, dV rows [j0, j0+nc) of kv head hk, batch b: for each query head h of
 * the group (in order), each query block that sees the key block (in
 * order), one pass1_tile; dqp (fused mode) = the chunk's dQ partials of the
 * group's heads [G, Sq, Dp], else NULL. */
static void pass1_task(const bwd_ctx *c, bwd_scratch *w, int64_t b, int64_t hk, int64_t kb,
                       char *dqp) {
    const fc_attn *a = c->a;
    const int D = (int)a->D, Dp = (int)c->Dp, dt = a->dtype;
    const int64_t j0 = kb * BC;
    const int nc = (int)(a->Sk - j0 < BC ? a->Sk - j0 : BC);
    int64_t r0[2], r1[2]; /* the query rows that see some key of the block */
    const int nseg = fc_key_block_rows(&c->mask, j0, j0 + nc, r0, r1);
    int have_k = 0;
    memset(w->acc1, 0, (size_t)BC * Dp * c->esz);
    memset(w->acc2, 0, (size_t)BC * Dp * c->esz);

    for (int64_t g = 0; g < c->G; ++g) {
        const int64_t h = hk * c->G + g;
        int64_t qb = 0; /* the next query block; the segments are sorted and disjoint */
        for (int sg = 0; sg < nseg; ++sg) {
            if (qb < r0[sg] / BR) qb = r0[sg] / BR;
            for (; qb * BR < r1[sg]; ++qb)
                pass1_tile(c, w, b, hk, h, qb, j0, nc,
                           dqp ? dqp + (size_t)((g * a->Sq + qb * BR) * Dp) * c->esz : NULL, &have_k);
        }
    }
    const size_t ds = flashc_dtype_size(dt);
    const int64_t dko = b * a->sdk[0] + j0 * a->sdk[1] + hk * a->sdk[2];
    const int64_t dvo = b * a->sdv[0] + j0 * a->sdv[1] + hk * a->sdv[2];
    store_tile(c->esz, dt, w->acc1, Dp, nc, D, (char *)a->dk + dko * (int64_t)ds, a->sdk[1],
               a->sdk[3]);
    store_tile(c->esz, dt, w->acc2, Dp, nc, D, (char *)a->dv + dvo * (int64_t)ds, a->sdv[1],
               a->sdv[3]);
}

/* ---------------------------------------------------------------- pass 2 */
/* One key block [j0, j0+nc) of pass2_task (w->ase/alo/ahi hold the query
 * block's rows, Qᵀ, dOᵀ packed on the first visible tile, *have_q):
 *   Sᵀ = K Qᵀ, dPᵀ = V dOᵀ → Pᵀ, dS'ᵀ   (tile [nc×BR], rows = keys)
 *   dQ += dS' K                            */
static void pass2_tile(const bwd_ctx *c, bwd_scratch *w, int64_t b, int64_t h, int64_t i0,
                       int nr, int64_t j0, int nc, int *have_q) {
    const fc_attn *a = c->a;
    const fc_bwd_kern *kk = c->kk;
    const int D = (int)a->D, Dp = (int)c->Dp, dt = a->dtype;
    const size_t ds = flashc_dtype_size(dt);
    const int np = (nr + FC_BWD_NPAD - 1) / FC_BWD_NPAD * FC_BWD_NPAD;
    const int64_t hk = h / c->G;
    const int64_t lrow = (b * a->Hq + h) * a->Sq + i0;

    int any = 0;
    for (int r = 0; r < np; ++r) {
        if (r < nr) {
            w->se[r] = (int32_t)clamp64(w->ase[r] - j0, 0, nc);
            w->lo[r] = (int32_t)clamp64(w->alo[r] - j0, 0, nc);
            w->hi[r] = (int32_t)clamp64(w->ahi[r] - j0, 0, nc);
            any |= w->se[r] > 0 || w->lo[r] < w->hi[r];
        } else {
            w->se[r] = w->lo[r] = w->hi[r] = 0;
        }
    }
    if (!any) return;

    if (!*have_q) { /* Qᵀ, dOᵀ [D×BR], zero beyond nr; once per task */
        const int64_t qoff = b * a->sq[0] + i0 * a->sq[1] + h * a->sq[2];
        const int64_t ooff = b * a->sdo[0] + i0 * a->sdo[1] + h * a->sdo[2];
        kk->pack(dt, (const char *)a->q + qoff * (int64_t)ds, a->sq[3], a->sq[1], D, nr, BR,
                 w->t1, BR);
        kk->pack(dt, (const char *)a->dout + ooff * (int64_t)ds, a->sdo[3], a->sdo[1], D,
                 nr, BR, w->t2, BR);
        if (c->bf) { /* Qᵀ, dOᵀ as pairs of dims */
            fc_bwd_bf16_pair_rows(w->t1, BR, D, BR, w->x[0], BR);
            fc_bwd_bf16_pair_rows(w->t2, BR, D, BR, w->x[1], BR);
        }
        *have_q = 1;
    }
    const int64_t koff = b * a->sk[0] + j0 * a->sk[1] + hk * a->sk[2];
    const int64_t voff = b * a->sv[0] + j0 * a->sv[1] + hk * a->sv[2];
    kk->pack(dt, (const char *)a->k + koff * (int64_t)ds, a->sk[1], a->sk[3], nc, D, Dp,
             w->r1, Dp);
    kk->pack(dt, (const char *)a->v + voff * (int64_t)ds, a->sv[1], a->sv[3], nc, D, Dp,
             w->r2, Dp);
    const fc_bwd_score sc = tile_score(c, b, h, i0, j0);

    if (c->bf) { /* as pass1_tile_bf16: exact S, dP; dS' rounded to bf16 for dQ */
        const int D2 = (D + 1) / 2;
        uint16_t *kb = w->x[3], *vb = w->x[4];
        uint32_t *kp = w->x[5], *dsp = w->x[6];
        fc_bwd_bf16_cvt_rows(w->r1, Dp, nc, Dp, kb, Dp);
        fc_bwd_bf16_cvt_rows(w->r2, Dp, nc, Dp, vb, Dp);
        bgemm(c, nc, np, D2, (const uint32_t *)kb, Dp / 2, 1, w->x[0], BR, w->s, BR, 0);
        bgemm(c, nc, np, D2, (const uint32_t *)vb, Dp / 2, 1, w->x[1], BR, w->dp, BR, 0);
        kk->ew_k(nc, np, w->s, w->dp, BR, BUF(c->L, lrow), BUF(c->delta, lrow), &sc, w->se,
                 w->lo, w->hi);
        fc_bwd_bf16_pair_rows(w->r1, Dp, nc, Dp, kp, Dp);
        fc_bwd_bf16_pair_rows(w->dp, BR, nc, np, dsp, BR);
        tile_prod_bf16(c, w, c->guard_k, 1, nr, Dp, nc, dsp, 1, BR, kp, Dp, w->acc1, Dp);
        return;
    }
    kk->gemm(nc, np, D, w->r1, Dp, 1, w->t1, BR, w->s, BR, 0);  /* Sᵀ  = K Qᵀ  */
    kk->gemm(nc, np, D, w->r2, Dp, 1, w->t2, BR, w->dp, BR, 0); /* dPᵀ = V dOᵀ */
    kk->ew_k(nc, np, w->s, w->dp, BR, BUF(c->L, lrow), BUF(c->delta, lrow), &sc, w->se, w->lo,
             w->hi);
    tile_prod(c, w, c->guard_k, 1, nr, Dp, nc, w->dp, 1, BR, w->r1, Dp, w->acc1, Dp); /* dQ += dS' K */
}

/* dQ rows [i0, i0+nr) of query head h, batch b: the key blocks that meet the
 * block's visible keys (fc_block_keysegs), in order. */
static void pass2_task(const bwd_ctx *c, bwd_scratch *w, int64_t b, int64_t h, int64_t qb) {
    const fc_attn *a = c->a;
    const int Dp = (int)c->Dp, dt = a->dtype;
    const int64_t i0 = qb * BR;
    const int nr = (int)(a->Sq - i0 < BR ? a->Sq - i0 : BR);
    const int64_t lrow = (b * a->Hq + h) * a->Sq + i0;

    for (int r = 0; r < nr; ++r) row_range(c, lrow + r, i0 + r, &w->ase[r], &w->alo[r], &w->ahi[r]);
    memset(w->acc1, 0, (size_t)BR * Dp * c->esz);
    fc_keysegs ks;
    fc_block_keysegs(&c->mask, i0, i0 + nr - 1, &ks);
    int have_q = 0;
    int64_t kb = 0; /* the next key block; the segments are sorted and disjoint */
    for (int sg = 0; sg < ks.n; ++sg) {
        if (kb < ks.s0[sg] / BC) kb = ks.s0[sg] / BC;
        for (; kb * BC < ks.s1[sg]; ++kb) {
            const int64_t j0 = kb * BC;
            pass2_tile(c, w, b, h, i0, nr, j0, (int)(a->Sk - j0 < BC ? a->Sk - j0 : BC), &have_q);
        }
    }
    const int64_t dqo = b * a->sdq[0] + i0 * a->sdq[1] + h * a->sdq[2];
    store_tile(c->esz, dt, w->acc1, Dp, nr, (int)a->D,
               (char *)a->dq + dqo * (int64_t)flashc_dtype_size(dt), a->sdq[1], a->sdq[3]);
}

/* ------------------------------------------------------------ fused mode */
/* One task per (b, kv head, chunk ch): key blocks ch, ch + nchunk, … (strided
 * so that causal chunks cost about the same), with the dQ contributions of
 * the group's query heads summed into the chunk's own partial buffer. */
static void fused_task(const bwd_ctx *c, bwd_scratch *w, int64_t b, int64_t hk, int64_t ch) {
    const fc_attn *a = c->a;
    const size_t rows = (size_t)(c->G * a->Sq * c->Dp);
    char *dqp = (char *)c->dqp +
                ((size_t)((ch * a->B + b) * a->Hq + hk * c->G) * a->Sq * c->Dp) * c->esz;
    memset(dqp, 0, rows * c->esz);
    for (int64_t kb = ch; kb < c->nkb; kb += c->nchunk) pass1_task(c, w, b, hk, kb, dqp);
}

/* dQ rows of (b, h, query block qb) = Σ_ch partials, in chunk order. */
static void reduce_task(const bwd_ctx *c, bwd_scratch *w, int64_t b, int64_t h, int64_t qb) {
    const fc_attn *a = c->a;
    const int Dp = (int)c->Dp, dt = a->dtype;
    const int64_t i0 = qb * BR;
    const int nr = (int)(a->Sq - i0 < BR ? a->Sq - i0 : BR);
    const size_t n = (size_t)nr * Dp, stride = (size_t)(a->B * a->Hq * a->Sq * Dp);
    const size_t base = (size_t)(((b * a->Hq + h) * a->Sq + i0) * Dp);
    if (c->esz == 8) {
        double *o = (double *)w->acc1;
        const double *p = (const double *)c->dqp + base;
        memcpy(o, p, n * 8);
        for (int64_t ch = 1; ch < c->nchunk; ++ch)
            for (size_t e = 0; e < n; ++e) o[e] += p[ch * stride + e];
    } else {
        float *o = (float *)w->acc1;
        const float *p = (const float *)c->dqp + base;
        memcpy(o, p, n * 4);
        for (int64_t ch = 1; ch < c->nchunk; ++ch)
            for (size_t e = 0; e < n; ++e) o[e] += p[ch * stride + e];
    }
    const int64_t dqo = b * a->sdq[0] + i0 * a->sdq[1] + h * a->sdq[2];
    store_tile(c->esz, dt, w->acc1, Dp, nr, (int)a->D,
               (char *)a->dq + dqo * (int64_t)flashc_dtype_size(dt), a->sdq[1], a->sdq[3]);
}

/* ---------------------------------------------------------------- pass 0 */
/* Δ_i = Σ_d dO_id O_id (fp32 sums, F64 for F64; 0 for a row with no visible
 * key, whose O is 0 by definition, whatever dO holds) and unit·L_i, per (b, h, i);
 * the FC_BWD_NPAD entries past the end are zeroed (ew_k reads whole vectors
 * of the last query block). */
static void stage_rows(const bwd_ctx *c, void *L, void *delta) {
    const fc_attn *a = c->a;
    const int dt = a->dtype, ldt = dt == FLASHC_F64 ? FLASHC_F64 : FLASHC_F32;
    const int64_t nbh = a->B * a->Hq;
#pragma omp parallel for schedule(static)
    for (int64_t bh = 0; bh < nbh; ++bh) {
        const int64_t b = bh / a->Hq, h = bh % a->Hq;
        for (int64_t i = 0; i < a->Sq; ++i) {
            const int64_t idx = bh * a->Sq + i;
            const int64_t oo = b * a->so[0] + i * a->so[1] + h * a->so[2];
            const int64_t od = b * a->sdo[0] + i * a->sdo[1] + h * a->sdo[2];
            const double lv = ld_elem(ldt, a->lse, b * a->slse[0] + h * a->slse[1] + i * a->slse[2]);
            int64_t se, lo, hi;
            fc_visible_keys(&c->mask, i, &se, &lo, &hi);
            const int64_t D = se > 0 || lo < hi ? a->D : 0; /* a row that sees nothing has O = 0, Δ = 0 */
            if (c->esz == 8) {
                double s = 0.0;
                for (int64_t d = 0; d < D; ++d)
                    s += ld_elem(dt, a->dout, od + d * a->sdo[3]) * ld_elem(dt, a->o, oo + d * a->so[3]);
                ((double *)delta)[idx] = s;
                ((double *)L)[idx] = lv * c->kk->unit;
            } else {
                float s = 0.0f;
                for (int64_t d = 0; d < D; ++d)
                    s += (float)ld_elem(dt, a->dout, od + d * a->sdo[3]) *
                         (float)ld_elem(dt, a->o, oo + d * a->so[3]);
                ((float *)delta)[idx] = s;
                ((float *)L)[idx] = (float)(lv * c->kk->unit);
            }
        }
    }
    const size_t n = (size_t)(nbh * a->Sq);
    memset((char *)L + n * c->esz, 0, FC_BWD_NPAD * c->esz);
    memset((char *)delta + n * c->esz, 0, FC_BWD_NPAD * c->esz);
}

/* d s_h = Σ_{b,i} fc_dsink_term(s_h, L_i, Δ_i), summed in (b, i) order in
 * double from the lse as given; written at h·sdsink in the sinks' dtype. */
static void sink_grad(const bwd_ctx *c) {
    const fc_attn *a = c->a;
    const int ldt = a->dtype == FLASHC_F64 ? FLASHC_F64 : FLASHC_F32;
#pragma omp parallel for schedule(static)
    for (int64_t h = 0; h < a->Hq; ++h) {
        const double s = fc_attn_sink(a, h);
        double acc = 0.0;
        for (int64_t b = 0; b < a->B; ++b)
            for (int64_t i = 0; i < a->Sq; ++i) {
                const double L = ld_elem(ldt, a->lse, b * a->slse[0] + h * a->slse[1] + i * a->slse[2]);
                acc += fc_dsink_term(s, L, rd_real(c->esz, c->delta, (b * a->Hq + h) * a->Sq + i));
            }
        if (a->dtype == FLASHC_F64) ((double *)a->dsinks)[h * a->sdsink] = acc;
        else ((float *)a->dsinks)[h * a->sdsink] = (float)acc;
    }
}

/* ---------------------------------------------------------------- driver */
/* t [B, S, H, D] (strides st) = 0. */
static void zero4(int dtype, void *t, const int64_t st[4], int64_t B, int64_t S, int64_t H, int64_t D) {
#pragma omp parallel for schedule(static)
    for (int64_t bs = 0; bs < B * S; ++bs)
        for (int64_t h = 0; h < H; ++h) {
            const int64_t o = (bs / S) * st[0] + (bs % S) * st[1] + h * st[2];
            for (int64_t d = 0; d < D; ++d) st_elem(dtype, t, o + d * st[3], 0.0);
        }
}

/* B = 0, Sq = 0 or Sk = 0: no (i, j) pair, so every gradient is 0 (Δ_i = 0
 * too: with Sk = 0 no row sees a key). Written directly, with no loop over
 * the B·Hq rows of an empty side. */
static flashc_status bwd_empty(const fc_attn *a) {
    if (a->Sk == 0) zero4(a->dtype, a->dq, a->sdq, a->B, a->Sq, a->Hq, a->D);
    if (a->Sq == 0) {
        zero4(a->dtype, a->dk, a->sdk, a->B, a->Sk, a->Hkv, a->D);
        zero4(a->dtype, a->dv, a->sdv, a->B, a->Sk, a->Hkv, a->D);
    }
    if (a->sink_logits && a->dsinks)
        for (int64_t h = 0; h < a->Hq; ++h) st_elem(a->dtype == FLASHC_F64 ? FLASHC_F64 : FLASHC_F32, a->dsinks,
                                                    h * a->sdsink, 0.0);
    return FLASHC_OK;
}

flashc_status fc_cpu_attn_bwd(const fc_attn *a) {
    if (fc_attn_is_ragged(a)) return fc_cpu_attn_ragged_bwd(a); /* per sequence, back through here */
    if (a->B == 0 || a->Sq == 0 || a->Sk == 0) return bwd_empty(a);
    bwd_ctx ctx;
    bwd_ctx *c = &ctx;
    c->a = a;
    const fc_cpu_env env = fc_cpu_env_read();
    const fc_bwd_plan plan = fc_plan_bwd(a, &env, BC, (a->D + FC_BWD_NPAD - 1) / FC_BWD_NPAD * FC_BWD_NPAD);
    c->kk = path_kernels(plan.path);
    c->esz = c->kk->esz;
    c->bf = plan.path == FC_BWD_AVX512BF16 || plan.path == FC_BWD_AMX_BF16;
    c->amx = plan.path == FC_BWD_AMX_BF16;
    c->mask = fc_attn_mask(a);
    c->sp = fc_attn_score(a);
    c->G = a->Hq / a->Hkv;
    c->Dp = (a->D + FC_BWD_NPAD - 1) / FC_BWD_NPAD * FC_BWD_NPAD;
    c->nqb = (a->Sq + BR - 1) / BR;
    c->nkb = (a->Sk + BC - 1) / BC;

    const size_t nrows = (size_t)(a->B * a->Hq * a->Sq);
    const size_t lbytes = (nrows + FC_BWD_NPAD) * c->esz; /* + one vector read past the end */
    void *L = malloc(lbytes), *delta = malloc(lbytes);
    const int nthr = omp_get_max_threads() > 0 ? omp_get_max_threads() : 1;
    const size_t per = scratch_bytes(c);
    char *scratch = (L && delta) ? aligned_alloc(64, per * (size_t)nthr) : NULL;
    if (!L || !delta || !scratch) {
        free(L);
        free(delta);
        free(scratch);
        if (!L || !delta)
            return fc_set_error(FLASHC_ERR_OUT_OF_MEMORY,
                                "attention backward: cannot allocate the %s staging buffer (%zu bytes)",
                                !L ? "L" : "Delta", lbytes);
        return fc_set_error(FLASHC_ERR_OUT_OF_MEMORY,
                            "attention backward: cannot allocate the per-thread scratch (%d x %zu bytes)", nthr,
                            per);
    }
    c->L = L;
    c->delta = delta;

    /* The schedule (fc_plan_bwd): fused when the dQ partials fit, with a
     * chunk count that depends on the shape only, so the result is fixed. */
    c->nchunk = plan.nchunk;
    c->dqp = NULL;
    if (plan.sched == FC_BWD_FUSED)
        c->dqp = malloc((size_t)c->nchunk * nrows * (size_t)c->Dp * c->esz); /* NULL: two-pass mode */

    /* An Inf/NaN in q or dO (the b of dK, dV) or in k (the b of dQ) would
     * reach invisible pairs through the products' zeros (0·NaN): those
     * products take gemm_vis. (v only enters dP, where ew selects.) */
    c->guard_qo = has_nonfinite(a->dtype, a->q, a->sq, a->B, a->Sq, a->Hq, a->D) ||
                  has_nonfinite(a->dtype, a->dout, a->sdo, a->B, a->Sq, a->Hq, a->D);
    c->guard_k = has_nonfinite(a->dtype, a->k, a->sk, a->B, a->Sk, a->Hkv, a->D);
    stage_rows(c, L, delta);
    if (a->sink_logits && a->dsinks) sink_grad(c);

    const int64_t t2 = a->B * a->Hq * c->nqb;
    if (c->dqp) {
        const int64_t t1 = a->B * a->Hkv * c->nchunk;
#pragma omp parallel num_threads(nthr)
        {
            bwd_scratch w;
            scratch_carve(c, scratch + per * (size_t)omp_get_thread_num(), &w);
#pragma omp for schedule(dynamic, 1)
            for (int64_t t = 0; t < t1; ++t) {
                const int64_t ch = t % c->nchunk, bh = t / c->nchunk;
                fused_task(c, &w, bh / a->Hkv, bh % a->Hkv, ch);
            }
#pragma omp for schedule(static)
            for (int64_t t = 0; t < t2; ++t) {
                const int64_t qb = t % c->nqb, bh = t / c->nqb;
                reduce_task(c, &w, bh / a->Hq, bh % a->Hq, qb);
            }
        }
        free(c->dqp);
    } else {
        const int64_t t1 = a->B * a->Hkv * c->nkb;
#pragma omp parallel num_threads(nthr)
        {
            bwd_scratch w;
            scratch_carve(c, scratch + per * (size_t)omp_get_thread_num(), &w);
#pragma omp for schedule(dynamic, 1)
            for (int64_t t = 0; t < t1 + t2; ++t) {
                if (t < t1) {
                    const int64_t kb = t % c->nkb, bh = t / c->nkb;
                    pass1_task(c, &w, bh / a->Hkv, bh % a->Hkv, kb, NULL);
                } else {
                    const int64_t u = t - t1, qb = u % c->nqb, bh = u / c->nqb;
                    pass2_task(c, &w, bh / a->Hq, bh % a->Hq, qb);
                }
            }
        }
    }
    free(L);
    free(delta);
    free(scratch);
    return FLASHC_OK;
}
