/*
 * Attention backward on the CPU, by recomputation from L (FlashAttention-2
 * style): the Sq×Sk matrices are only ever held one BR×BC tile at a time.
 *
 * Forward, per row i (flashc.h):  x_ij = scale·<q_i, k_j>,
 *   P_ij = exp(x_ij − L_i) (visible j only),  O_i = Σ_j P_ij v_j.
 * Backward, with Δ_i = <dO_i, O_i>:
 *   dV_j  = Σ_i P_ij dO_i                     (O_i is linear in v_j)
 *   dP_ij = <dO_i, v_j>
 *   dx_ij = P_ij (dP_ij − Δ_i)                (softmax Jacobian; Σ_j P_ij dP_ij
 *                                              = <dO_i, O_i> = Δ_i, also with a
 *                                              sink logit, which has no value)
 *   dQ_i  = scale Σ_j dx_ij k_j,   dK_j = scale Σ_i dx_ij q_i
 *   d s_h = Σ_i <dO_i, ∂O_i/∂s_h> = −Σ_i exp(s_h − L_i) Δ_i
 *           (∂L_i/∂s_h = exp(s_h − L_i), so ∂P_ij/∂s_h = −P_ij exp(s_h − L_i)).
 * Rows with L_i = −inf have no visible key: they contribute nothing.
 *
 * Work split (no atomics, nothing depends on the thread count):
 *   pass 0: Δ and L for every (b, h, i), staged in the working precision;
 *           d sinks summed per head in (b, i) order.
 *   fused mode (the default, 5 tile GEMMs): one task per (b, kv head, chunk
 *           of key blocks); per key block dK, dV over the group's query heads
 *           and visible query blocks in order, and dQ += dS K into the chunk's
 *           own fp32 partial buffer; then dQ = Σ_chunk partials in chunk order.
 *           The chunk count is a function of the shape (≈16 tasks), never of
 *           the thread count.
 *   two-pass mode (when the partials would exceed 1 GiB, or
 *           FLASHC_CPU_BWD=twopass): pass 1 = one task per (b, kv head, key
 *           block) for dK, dV; pass 2 = one task per (b, q head, query block)
 *           for dQ, recomputing S and dP (7 tile GEMMs) but with no partials.
 * Every task owns the rows it writes and sums each element in a fixed order,
 * so the result is bit-identical across runs and thread counts.
 *
 * BF16 with AVX512-BF16 (fc_cpu_has_avx512bf16(), ctx.bf): the same tiles
 * and order, with the tile GEMMs on vdpbf16ps (attn_bwd_avx512bf16.c) as
 * FlashAttention's backward: S, dP from the bf16 inputs (exact products),
 * P and dS' rounded to bf16 for dV, dK, dQ; fp32 sums throughout.
 */
#include "attn_bwd.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

enum { BR = FC_BWD_BR, BC = FC_BWD_BC };

static const fc_bwd_kern *pick_kernels(int dtype) {
    if (dtype == FLASHC_F64) return &fc_bwd_scalar_f64;
    switch (fc_cpu_isa_level()) {
    case FC_ISA_AVX512: return &fc_bwd_avx512_f32;
    case FC_ISA_AVX2: return &fc_bwd_avx2_f32;
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
    int64_t G, Dp, nqb, nkb;
    const void *L, *delta; /* [B, Hq, Sq] in the working precision */
    int64_t nchunk;        /* fused mode: key blocks split into this many chunks */
    void *dqp;             /* fused mode: dQ partials [nchunk, B, Hq, Sq, Dp]; else NULL */
    int bf;                /* BF16 on vdpbf16ps (fc_bwd_bf16_*): bf16 operands, fp32 sums */
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
    fc_visible_range(c->a, i, se, lo, hi);
}

/* ---------------------------------------------------------------- bf16 */
/* One pass-1 tile on vdpbf16ps, as FlashAttention's backward on GPUs:
 * S = Q Kᵀ and dP = dO Vᵀ from the bf16 inputs (exact products), P and dS'
 * rounded to bf16 (nearest even) for dV += Pᵀ dO, dK += dS'ᵀ Q and
 * dQ += dS' K; every sum in fp32. In: x[0], x[1] = Kᵀ, Vᵀ as dim pairs
 * [Dp/2×BC], x[2] = K as key pairs [BC/2×Dp] (when dq is given); Q, dO rows
 * [nr×Dp] as bf16 rows in x[3], x[4] and as pairs of rows in x[5], x[6]
 * when packed, else (packed = 0) as fp32 copies in w->r1, w->r2. */
static void pass1_tile_bf16(const bwd_ctx *c, bwd_scratch *w, int nr, int nc, const void *L,
                            const void *delta, char *dq, int packed) {
    const fc_attn *a = c->a;
    const int D = (int)a->D, Dp = (int)c->Dp;
    const int D2 = (D + 1) / 2, R2 = (nr + 1) / 2, C2 = (nc + 1) / 2;
    uint16_t *qb = w->x[3], *ob = w->x[4], *dsb = w->x[9];
    uint32_t *qp = w->x[5], *op = w->x[6], *pp = w->x[7], *dsp = w->x[8];
    if (!packed) {
        fc_bwd_bf16_cvt_rows(w->r1, Dp, nr, Dp, qb, Dp); /* Q, dO rows: pairs of dims */
        fc_bwd_bf16_cvt_rows(w->r2, Dp, nr, Dp, ob, Dp);
        fc_bwd_bf16_pair_rows(w->r1, Dp, nr, Dp, qp, Dp); /* Q, dO: pairs of query rows */
        fc_bwd_bf16_pair_rows(w->r2, Dp, nr, Dp, op, Dp);
    }
    fc_bwd_bf16_gemm(nr, BC, D2, (const uint32_t *)qb, Dp / 2, 1, w->x[0], BC, w->s, BC, 0);
    fc_bwd_bf16_gemm(nr, BC, D2, (const uint32_t *)ob, Dp / 2, 1, w->x[1], BC, w->dp, BC, 0);
    c->kk->ew_q(nr, BC, w->s, w->dp, BC, L, delta, a->scale, w->se, w->lo, w->hi);
    fc_bwd_bf16_pair_rows(w->s, BC, nr, BC, pp, BC);   /* Pᵀ, dS'ᵀ: pairs of query rows */
    fc_bwd_bf16_pair_rows(w->dp, BC, nr, BC, dsp, BC);
    fc_bwd_bf16_gemm(nc, Dp, R2, dsp, 1, BC, qp, Dp, w->acc1, Dp, 1); /* dK += dS'ᵀ Q */
    fc_bwd_bf16_gemm(nc, Dp, R2, pp, 1, BC, op, Dp, w->acc2, Dp, 1);  /* dV += Pᵀ dO  */
    if (dq) { /* dQ += dS' K; columns ≥ nc of dS' are 0 (P = 0 there) */
        fc_bwd_bf16_cvt_rows(w->dp, BC, nr, BC, dsb, BC);
        fc_bwd_bf16_gemm(nr, Dp, C2, (const uint32_t *)dsb, BC / 2, 1, w->x[2], Dp, (float *)dq, Dp, 1);
    }
}

/* ---------------------------------------------------------------- pass 1 */
/* dK, dV rows [j0, j0+nc) of kv head hk, batch b:
 *   for each query head h of the group, each visible query block i0:
 *     S = Q Kᵀ, dP = dO Vᵀ  → P, dS'   (tile [nr×BC], rows = queries)
 *     dV += Pᵀ dO, dK += dS'ᵀ Q
 *     and when dqp is given (fused mode): dqp[h] rows i0.. += dS' K     */
static void pass1_task(const bwd_ctx *c, bwd_scratch *w, int64_t b, int64_t hk, int64_t kb,
                       char *dqp) {
    const fc_attn *a = c->a;
    const fc_bwd_kern *kk = c->kk;
    const int D = (int)a->D, Dp = (int)c->Dp;
    const int64_t j0 = kb * BC;
    const int nc = (int)(a->Sk - j0 < BC ? a->Sk - j0 : BC);
    const int dt = a->dtype;

    const int64_t koff = b * a->sk[0] + j0 * a->sk[1] + hk * a->sk[2];
    const int64_t voff = b * a->sv[0] + j0 * a->sv[1] + hk * a->sv[2];
    int have_k = 0;
    memset(w->acc1, 0, (size_t)BC * Dp * c->esz);
    memset(w->acc2, 0, (size_t)BC * Dp * c->esz);

    for (int64_t g = 0; g < c->G; ++g) {
        const int64_t h = hk * c->G + g;
        const int64_t lrow = (b * a->Hq + h) * a->Sq; /* index of (b, h, 0) in L, Δ */
        for (int64_t qb = 0; qb < c->nqb; ++qb) {
            const int64_t i0 = qb * BR;
            const int nr = (int)(a->Sq - i0 < BR ? a->Sq - i0 : BR);
            /* Block-level reject: lo, hi, sink_end are nondecreasing in i. */
            int64_t se0, lo0, hi0, se1, lo1, hi1;
            fc_visible_range(a, i0, &se0, &lo0, &hi0);
            fc_visible_range(a, i0 + nr - 1, &se1, &lo1, &hi1);
            const int win = lo0 < j0 + nc && hi1 > j0 && lo0 < hi1;
            if (!win && se1 <= j0) continue;

            int any = 0;
            for (int r = 0; r < nr; ++r) {
                int64_t se, lo, hi;
                row_range(c, lrow + i0 + r, i0 + r, &se, &lo, &hi);
                w->se[r] = (int32_t)clamp64(se - j0, 0, nc);
                w->lo[r] = (int32_t)clamp64(lo - j0, 0, nc);
                w->hi[r] = (int32_t)clamp64(hi - j0, 0, nc);
                any |= w->se[r] > 0 || w->lo[r] < w->hi[r];
            }
            if (!any) continue;

            if (!have_k) { /* Kᵀ, Vᵀ [D×BC], zero beyond nc; packed once per task */
                kk->pack(dt, (const char *)a->k + koff * (int64_t)flashc_dtype_size(dt),
                         a->sk[3], a->sk[1], D, nc, BC, w->t1, BC);
                kk->pack(dt, (const char *)a->v + voff * (int64_t)flashc_dtype_size(dt),
                         a->sv[3], a->sv[1], D, nc, BC, w->t2, BC);
                if (dqp)
                    kk->pack(dt, (const char *)a->k + koff * (int64_t)flashc_dtype_size(dt),
                             a->sk[1], a->sk[3], nc, D, Dp, w->kr, Dp);
                if (c->bf) { /* Kᵀ, Vᵀ as pairs of dims; K as pairs of keys (for dQ) */
                    fc_bwd_bf16_pair_rows(w->t1, BC, D, BC, w->x[0], BC);
                    fc_bwd_bf16_pair_rows(w->t2, BC, D, BC, w->x[1], BC);
                    if (dqp) fc_bwd_bf16_pair_rows(w->kr, Dp, nc, Dp, w->x[2], Dp);
                }
                have_k = 1;
            }
            const int64_t qoff = b * a->sq[0] + i0 * a->sq[1] + h * a->sq[2];
            const int64_t ooff = b * a->sdo[0] + i0 * a->sdo[1] + h * a->sdo[2];
            const size_t ds = flashc_dtype_size(dt);
            if (c->bf && a->sq[3] == 1 && a->sdo[3] == 1) { /* bf16 rows straight in */
                fc_bwd_bf16_pack_both((const uint16_t *)a->q + qoff, a->sq[1], nr, D, Dp,
                                      w->x[3], Dp, w->x[5], Dp);
                fc_bwd_bf16_pack_both((const uint16_t *)a->dout + ooff, a->sdo[1], nr, D, Dp,
                                      w->x[4], Dp, w->x[6], Dp);
                pass1_tile_bf16(c, w, nr, nc, BUF(c->L, lrow + i0), BUF(c->delta, lrow + i0),
                                dqp ? dqp + (size_t)((g * a->Sq + i0) * Dp) * c->esz : NULL, 1);
                continue;
            }
            kk->pack(dt, (const char *)a->q + qoff * (int64_t)ds, a->sq[1], a->sq[3], nr, D, Dp,
                     w->r1, Dp);
            kk->pack(dt, (const char *)a->dout + ooff * (int64_t)ds, a->sdo[1], a->sdo[3], nr,
                     D, Dp, w->r2, Dp);

            if (c->bf) {
                pass1_tile_bf16(c, w, nr, nc, BUF(c->L, lrow + i0), BUF(c->delta, lrow + i0),
                                dqp ? dqp + (size_t)((g * a->Sq + i0) * Dp) * c->esz : NULL, 0);
                continue;
            }
            kk->gemm(nr, BC, D, w->r1, Dp, 1, w->t1, BC, w->s, BC, 0);  /* S  = Q Kᵀ  */
            kk->gemm(nr, BC, D, w->r2, Dp, 1, w->t2, BC, w->dp, BC, 0); /* dP = dO Vᵀ */
            kk->ew_q(nr, BC, w->s, w->dp, BC, BUF(c->L, lrow + i0), BUF(c->delta, lrow + i0),
                     a->scale, w->se, w->lo, w->hi);
            kk->gemm(nc, Dp, nr, w->dp, 1, BC, w->r1, Dp, w->acc1, Dp, 1); /* dK += dS'ᵀ Q */
            kk->gemm(nc, Dp, nr, w->s, 1, BC, w->r2, Dp, w->acc2, Dp, 1);  /* dV += Pᵀ dO  */
            if (dqp)                                                       /* dQ += dS' K  */
                kk->gemm(nr, Dp, nc, w->dp, BC, 1, w->kr, Dp,
                         dqp + (size_t)((g * a->Sq + i0) * Dp) * c->esz, Dp, 1);
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
/* dQ rows [i0, i0+nr) of query head h, batch b: for each visible key block,
 *   Sᵀ = K Qᵀ, dPᵀ = V dOᵀ → Pᵀ, dS'ᵀ   (tile [nc×BR], rows = keys)
 *   dQ += dS' K                            */
static void pass2_task(const bwd_ctx *c, bwd_scratch *w, int64_t b, int64_t h, int64_t qb) {
    const fc_attn *a = c->a;
    const fc_bwd_kern *kk = c->kk;
    const int D = (int)a->D, Dp = (int)c->Dp;
    const int dt = a->dtype;
    const size_t ds = flashc_dtype_size(dt);
    const int64_t i0 = qb * BR;
    const int nr = (int)(a->Sq - i0 < BR ? a->Sq - i0 : BR);
    const int np = (nr + FC_BWD_NPAD - 1) / FC_BWD_NPAD * FC_BWD_NPAD;
    const int64_t hk = h / c->G;
    const int64_t lrow = (b * a->Hq + h) * a->Sq + i0;

    int64_t se_max = 0, lo_min = a->Sk, hi_max = 0;
    for (int r = 0; r < nr; ++r) {
        row_range(c, lrow + r, i0 + r, &w->ase[r], &w->alo[r], &w->ahi[r]);
        if (w->ase[r] > se_max) se_max = w->ase[r];
        if (w->alo[r] < w->ahi[r]) {
            if (w->alo[r] < lo_min) lo_min = w->alo[r];
            if (w->ahi[r] > hi_max) hi_max = w->ahi[r];
        }
    }
    memset(w->acc1, 0, (size_t)BR * Dp * c->esz);

    int have_q = 0;
    for (int64_t kb = 0; kb < c->nkb; ++kb) {
        const int64_t j0 = kb * BC;
        const int nc = (int)(a->Sk - j0 < BC ? a->Sk - j0 : BC);
        if (!(j0 < se_max || (j0 < hi_max && j0 + nc > lo_min))) continue;
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
        if (!any) continue;

        if (!have_q) { /* Qᵀ, dOᵀ [D×BR], zero beyond nr; once per task */
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
            have_q = 1;
        }
        const int64_t koff = b * a->sk[0] + j0 * a->sk[1] + hk * a->sk[2];
        const int64_t voff = b * a->sv[0] + j0 * a->sv[1] + hk * a->sv[2];
        kk->pack(dt, (const char *)a->k + koff * (int64_t)ds, a->sk[1], a->sk[3], nc, D, Dp,
                 w->r1, Dp);
        kk->pack(dt, (const char *)a->v + voff * (int64_t)ds, a->sv[1], a->sv[3], nc, D, Dp,
                 w->r2, Dp);

        if (c->bf) { /* as pass1_tile_bf16: exact S, dP; dS' rounded to bf16 for dQ */
            const int D2 = (D + 1) / 2, C2 = (nc + 1) / 2;
            uint16_t *kb = w->x[3], *vb = w->x[4];
            uint32_t *kp = w->x[5], *dsp = w->x[6];
            fc_bwd_bf16_cvt_rows(w->r1, Dp, nc, Dp, kb, Dp);
            fc_bwd_bf16_cvt_rows(w->r2, Dp, nc, Dp, vb, Dp);
            fc_bwd_bf16_pair_rows(w->r1, Dp, nc, Dp, kp, Dp);
            fc_bwd_bf16_gemm(nc, np, D2, (const uint32_t *)kb, Dp / 2, 1, w->x[0], BR, w->s, BR, 0);
            fc_bwd_bf16_gemm(nc, np, D2, (const uint32_t *)vb, Dp / 2, 1, w->x[1], BR, w->dp, BR, 0);
            kk->ew_k(nc, np, w->s, w->dp, BR, BUF(c->L, lrow), BUF(c->delta, lrow), a->scale,
                     w->se, w->lo, w->hi);
            fc_bwd_bf16_pair_rows(w->dp, BR, nc, np, dsp, BR);
            fc_bwd_bf16_gemm(nr, Dp, C2, dsp, 1, BR, kp, Dp, w->acc1, Dp, 1);
            continue;
        }
        kk->gemm(nc, np, D, w->r1, Dp, 1, w->t1, BR, w->s, BR, 0);  /* Sᵀ  = K Qᵀ  */
        kk->gemm(nc, np, D, w->r2, Dp, 1, w->t2, BR, w->dp, BR, 0); /* dPᵀ = V dOᵀ */
        kk->ew_k(nc, np, w->s, w->dp, BR, BUF(c->L, lrow), BUF(c->delta, lrow), a->scale,
                 w->se, w->lo, w->hi);
        kk->gemm(nr, Dp, nc, w->dp, 1, BR, w->r1, Dp, w->acc1, Dp, 1); /* dQ += dS' K */
    }
    const int64_t dqo = b * a->sdq[0] + i0 * a->sdq[1] + h * a->sdq[2];
    store_tile(c->esz, dt, w->acc1, Dp, nr, D, (char *)a->dq + dqo * (int64_t)ds, a->sdq[1],
               a->sdq[3]);
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
/* Δ_i = Σ_d dO_id O_id (fp32 sums, F64 for F64) and L_i, per (b, h, i). */
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
            if (c->esz == 8) {
                double s = 0.0;
                for (int64_t d = 0; d < a->D; ++d)
                    s += ld_elem(dt, a->dout, od + d * a->sdo[3]) * ld_elem(dt, a->o, oo + d * a->so[3]);
                ((double *)delta)[idx] = s;
                ((double *)L)[idx] = lv;
            } else {
                float s = 0.0f;
                for (int64_t d = 0; d < a->D; ++d)
                    s += (float)ld_elem(dt, a->dout, od + d * a->sdo[3]) *
                         (float)ld_elem(dt, a->o, oo + d * a->so[3]);
                ((float *)delta)[idx] = s;
                ((float *)L)[idx] = (float)lv;
            }
        }
    }
}

/* d s_h = −Σ_{b,i} exp(s_h − L_i) Δ_i, summed in (b, i) order in double. */
static void sink_grad(const bwd_ctx *c) {
    const fc_attn *a = c->a;
#pragma omp parallel for schedule(static)
    for (int64_t h = 0; h < a->Hq; ++h) {
        const double s = a->dtype == FLASHC_F64 ? ((const double *)a->sink_logits)[h]
                                                : (double)((const float *)a->sink_logits)[h];
        double acc = 0.0;
        for (int64_t b = 0; b < a->B; ++b)
            for (int64_t i = 0; i < a->Sq; ++i) {
                const int64_t idx = (b * a->Hq + h) * a->Sq + i;
                const double l = rd_real(c->esz, c->L, idx);
                if (l == -INFINITY) continue;
                acc += exp(s - l) * rd_real(c->esz, c->delta, idx);
            }
        if (a->dtype == FLASHC_F64) ((double *)a->dsinks)[h] = -acc;
        else ((float *)a->dsinks)[h] = (float)-acc;
    }
}

/* ---------------------------------------------------------------- driver */
flashc_status fc_cpu_attn_bwd(const fc_attn *a) {
    bwd_ctx ctx;
    bwd_ctx *c = &ctx;
    c->a = a;
    c->kk = pick_kernels(a->dtype);
    c->esz = c->kk->esz;
    c->bf = a->dtype == FLASHC_BF16 && c->kk == &fc_bwd_avx512_f32 && fc_cpu_has_avx512bf16();
    c->G = a->Hq / a->Hkv;
    c->Dp = (a->D + FC_BWD_NPAD - 1) / FC_BWD_NPAD * FC_BWD_NPAD;
    c->nqb = (a->Sq + BR - 1) / BR;
    c->nkb = (a->Sk + BC - 1) / BC;

    const size_t nrows = (size_t)(a->B * a->Hq * a->Sq);
    void *L = malloc(nrows * c->esz + 1), *delta = malloc(nrows * c->esz + 1);
    const int nthr = omp_get_max_threads() > 0 ? omp_get_max_threads() : 1;
    const size_t per = scratch_bytes(c);
    char *scratch = aligned_alloc(64, per * (size_t)nthr);
    if (!L || !delta || !scratch) {
        free(L);
        free(delta);
        free(scratch);
        return fc_set_error(FLASHC_ERR_OUT_OF_MEMORY,
                            "attention backward: cannot allocate %zu bytes of scratch",
                            2 * nrows * c->esz + per * (size_t)nthr);
    }
    c->L = L;
    c->delta = delta;

    /* Fused mode (5 tile GEMMs instead of 7) when the dQ partials fit in
     * FUSED_MAX_BYTES. The chunk count depends on the shape only — never on
     * the thread count — so the summation order, and the result, is fixed. */
    enum { FUSED_TASKS = 16 };
    const double FUSED_MAX_BYTES = 1024.0 * 1024 * 1024;
    int64_t nch = (FUSED_TASKS + a->B * a->Hkv - 1) / (a->B * a->Hkv);
    if (nch > c->nkb) nch = c->nkb;
    if (nch < 1) nch = 1;
    c->nchunk = nch;
    c->dqp = NULL;
    const char *force = getenv("FLASHC_CPU_BWD"); /* "twopass" forces it (tests, benchmarks) */
    if (!(force && !strcmp(force, "twopass")) && c->nkb > 0 && (double)nch * (double)nrows * (double)c->Dp * (double)c->esz <= FUSED_MAX_BYTES)
        c->dqp = malloc((size_t)nch * nrows * (size_t)c->Dp * c->esz); /* NULL: two-pass mode */

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
