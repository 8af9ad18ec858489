/* Attention backward: AVX512-BF16 pieces for BF16 inputs (attn_bwd.h,
 * fc_bwd_bf16_*). Compiled with the AVX-512 flags plus -mavx512bf16
 * (CMakeLists.txt); used by attn_bwd.c only when fc_cpu_has_avx512bf16().
 *
 * vdpbf16ps adds, per fp32 lane, the two products of a pair of bf16 values
 * (exact in fp32) to the accumulator, so every operand is laid out with the
 * reduction axis in pairs (uint32 = low bf16 for the even k, high for the
 * odd k):
 *   cvt_rows:  a row-major fp32 matrix rounded to bf16 in place order — the
 *              pairs of a row are consecutive elements of the row (an operand
 *              whose reduction axis is the row axis);
 *   pair_rows: rows 2r, 2r+1 of a row-major fp32 matrix interleaved element
 *              by element (an operand whose reduction axis is the column
 *              axis); an odd last row is paired with zeros.
 * Rounding is to nearest even (vcvtne[2]ps2bf16); inputs that were bf16 to
 * begin with pass through unchanged. */
#include "attn_bwd.h"
#include "amx.h"
#include "simd_avx512.h" /* fp32 side; the bf16 pair operations have no counterpart elsewhere */

/* ------------------------------------------------------------------- gemm */
/* Register tile MR rows × NV vectors of 16 lanes: per pair step, NV loads of
 * b, MR 32-bit broadcasts of a, MR·NV vdpbf16ps. VIS (compile-time):
 * fc_bwd_bf16_gemm_vis, rows m0 + m of the product, K the real reduction
 * length: a pair step whose two members are invisible to a row is skipped,
 * one with a single invisible member has that member's half of b zeroed
 * (b may be Inf/NaN there; its a is 0). The small loops are unrolled before
 * GCC's scalar replacement, or the accumulators live on the stack (as
 * attn_bwd_simd_body.h's FN(mk)). */
FC_SI void mkbf(const int VIS, const int MR, const int NV, int K2, const uint32_t *a, ptrdiff_t ars,
                ptrdiff_t acs, const uint32_t *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int accumulate, int K,
                int q_is_m, int m0, const int32_t *se, const int32_t *lo, const int32_t *hi) {
    fc_vf acc[6][4];
#pragma GCC unroll 6
    for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v)
            acc[m][v] = accumulate ? fc_vf_load(c + m * ldc + 16 * v) : fc_vf_zero();
    for (int k = 0; k < K2; ++k) {
        __m512bh bv[4];
        const uint32_t *bk = b + (ptrdiff_t)k * ldb, *ak = a + (ptrdiff_t)k * acs;
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_loadu_si512(bk + 16 * v);
#pragma GCC unroll 6
        for (int m = 0; m < MR; ++m) {
            const __m512bh av = (__m512bh)_mm512_set1_epi32((int)ak[m * ars]);
            if (VIS) {
                int vis[2];
                for (int h = 0; h < 2; ++h) {
                    const int kk = 2 * k + h, q = q_is_m ? m0 + m : kk, key = q_is_m ? kk : m0 + m;
                    vis[h] = kk < K && FC_KEY_VISIBLE(se[q], lo[q], hi[q], key);
                }
                if (!vis[0] && !vis[1]) continue;
                if (!vis[0] || !vis[1]) { /* low half = even k */
                    const __m512i keep = _mm512_set1_epi32(vis[0] ? 0x0000ffff : (int)0xffff0000u);
#pragma GCC unroll 4
                    for (int v = 0; v < NV; ++v)
                        acc[m][v] = _mm512_dpbf16_ps(acc[m][v], av,
                                                     (__m512bh)_mm512_and_si512((__m512i)bv[v], keep));
                    continue;
                }
            }
#pragma GCC unroll 4
            for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_dpbf16_ps(acc[m][v], av, bv[v]);
        }
    }
#pragma GCC unroll 6
    for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) fc_vf_store(c + m * ldc + 16 * v, acc[m][v]);
}

#define MK_CASE(MR, NV)                                                                                  \
    case (MR) * 8 + (NV):                                                                                \
        mkbf(VIS, MR, NV, K2, am, ars, acs, b + n0, ldb, cm, ldc, accumulate, K, q_is_m, m0, se, lo, hi); \
        break;

FC_SI void bf16_gemm_body(const int VIS, int M, int N, int K2, const uint32_t *a, ptrdiff_t ars, ptrdiff_t acs,
                          const uint32_t *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int accumulate, int K,
                          int q_is_m, const int32_t *se, const int32_t *lo, const int32_t *hi) {
    for (int n0 = 0; n0 < N; n0 += 64) {
        const int nv = (N - n0 >= 64 ? 64 : N - n0) / 16;
        for (int m0 = 0; m0 < M; m0 += 6) {
            const uint32_t *am = a + (ptrdiff_t)m0 * ars;
            float *cm = c + (ptrdiff_t)m0 * ldc + n0;
            switch ((M - m0 >= 6 ? 6 : M - m0) * 8 + nv) {
            MK_CASE(1, 1) MK_CASE(1, 2) MK_CASE(1, 3) MK_CASE(1, 4)
            MK_CASE(2, 1) MK_CASE(2, 2) MK_CASE(2, 3) MK_CASE(2, 4)
            MK_CASE(3, 1) MK_CASE(3, 2) MK_CASE(3, 3) MK_CASE(3, 4)
            MK_CASE(4, 1) MK_CASE(4, 2) MK_CASE(4, 3) MK_CASE(4, 4)
            MK_CASE(5, 1) MK_CASE(5, 2) MK_CASE(5, 3) MK_CASE(5, 4)
            MK_CASE(6, 1) MK_CASE(6, 2) MK_CASE(6, 3) MK_CASE(6, 4)
            default: break;
            }
        }
    }
}
#undef MK_CASE

void fc_bwd_bf16_gemm(int M, int N, int K2, const uint32_t *a, ptrdiff_t ars, ptrdiff_t acs,
                      const uint32_t *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int accumulate) {
    bf16_gemm_body(0, M, N, K2, a, ars, acs, b, ldb, c, ldc, accumulate, 2 * K2, 0, NULL, NULL, NULL);
}

void fc_bwd_bf16_gemm_vis(int M, int N, int K, const uint32_t *a, ptrdiff_t ars, ptrdiff_t acs,
                          const uint32_t *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int q_is_m,
                          const int32_t *se, const int32_t *lo, const int32_t *hi) {
    bf16_gemm_body(1, M, N, (K + 1) / 2, a, ars, acs, b, ldb, c, ldc, 1, K, q_is_m, se, lo, hi);
}

/* -------------------------------------------------------------------- AMX */
#if defined(FLASHC_HAVE_AMX)
/* C tiles 0-3 (16 rows × up to 4 × 16 columns from n0), A tile 4, B tiles
 * 5-7 (the fourth column block reuses 5). at: the 16 rows' pairs, row
 * stride atb bytes. */
static inline void amx_block(int K2f, const uint32_t *at, ptrdiff_t atb, const uint32_t *b, ptrdiff_t ldb,
                             float *c, ptrdiff_t ldc, int nt, int accumulate) {
    const ptrdiff_t cb = ldc * 4, bb = ldb * 4;
    if (accumulate) {
        _tile_loadd(0, c, cb);
        if (nt > 1) _tile_loadd(1, c + 16, cb);
        if (nt > 2) _tile_loadd(2, c + 32, cb);
        if (nt > 3) _tile_loadd(3, c + 48, cb);
    } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    }
    for (int k0 = 0; k0 < K2f; k0 += 16) {
        const uint32_t *bk = b + (ptrdiff_t)k0 * ldb;
        _tile_loadd(4, at + k0, atb);
        _tile_loadd(5, bk, bb);
        _tile_dpbf16ps(0, 4, 5);
        if (nt > 1) {
            _tile_loadd(6, bk + 16, bb);
            _tile_dpbf16ps(1, 4, 6);
        }
        if (nt > 2) {
            _tile_loadd(7, bk + 32, bb);
            _tile_dpbf16ps(2, 4, 7);
        }
        if (nt > 3) {
            _tile_loadd(5, bk + 48, bb);
            _tile_dpbf16ps(3, 4, 5);
        }
    }
    _tile_stored(0, c, cb);
    if (nt > 1) _tile_stored(1, c + 16, cb);
    if (nt > 2) _tile_stored(2, c + 32, cb);
    if (nt > 3) _tile_stored(3, c + 48, cb);
}

void fc_bwd_amx_gemm(int M, int N, int K2, const uint32_t *a, ptrdiff_t ars, ptrdiff_t acs,
                     const uint32_t *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int accumulate) {
    enum { KMAX = 256 }; /* pairs: D ≤ 256 → 128, tiles of 64 rows or keys → 32 */
    const int M16 = M & ~15, K2f = K2 & ~15;
    if (M16 == 0 || K2f == 0 || K2f > KMAX) {
        fc_bwd_bf16_gemm(M, N, K2, a, ars, acs, b, ldb, c, ldc, accumulate);
        return;
    }
    uint32_t at[16 * KMAX] __attribute__((aligned(64))); /* A rows as pairs (acs ≠ 1) */
    fc_amx_config();
    for (int m0 = 0; m0 < M16; m0 += 16) {
        const uint32_t *ap;
        ptrdiff_t apb;
        if (acs == 1) { /* rows of pairs in place */
            ap = a + (ptrdiff_t)m0 * ars;
            apb = ars * 4;
        } else if (ars == 1) { /* pairs down the columns: 16 × 16 transposes */
            for (int k0 = 0; k0 < K2f; k0 += 16)
                fc_vf_transpose((const float *)(a + (ptrdiff_t)k0 * acs + m0), acs, (float *)(at + k0), KMAX);
            ap = at;
            apb = KMAX * 4;
        } else {
            for (int m = 0; m < 16; ++m)
                for (int k = 0; k < K2f; ++k) at[m * KMAX + k] = a[(ptrdiff_t)(m0 + m) * ars + (ptrdiff_t)k * acs];
            ap = at;
            apb = KMAX * 4;
        }
        for (int n0 = 0; n0 < N; n0 += 64) {
            const int nt = (N - n0 >= 64 ? 64 : N - n0) / 16;
            amx_block(K2f, ap, apb, b + n0, ldb, c + (ptrdiff_t)m0 * ldc + n0, ldc, nt, accumulate);
        }
    }
    _tile_release();
    if (K2f < K2) /* the last pairs of the whole row blocks */
        fc_bwd_bf16_gemm(M16, N, K2 - K2f, a + (ptrdiff_t)K2f * acs, ars, acs, b + (ptrdiff_t)K2f * ldb, ldb, c, ldc, 1);
    if (M16 < M) /* the last rows */
        fc_bwd_bf16_gemm(M - M16, N, K2, a + (ptrdiff_t)M16 * ars, ars, acs, b, ldb, c + (ptrdiff_t)M16 * ldc, ldc,
                         accumulate);
}
#else
void fc_bwd_amx_gemm(int M, int N, int K2, const uint32_t *a, ptrdiff_t ars, ptrdiff_t acs,
                     const uint32_t *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int accumulate) {
    fc_bwd_bf16_gemm(M, N, K2, a, ars, acs, b, ldb, c, ldc, accumulate);
}
#endif

void fc_bwd_amx_gemm_vis(int M, int N, int K, const uint32_t *a, ptrdiff_t ars, ptrdiff_t acs,
                         const uint32_t *b, ptrdiff_t ldb, float *c, ptrdiff_t ldc, int q_is_m,
                         const int32_t *se, const int32_t *lo, const int32_t *hi) {
    enum { BMAX = 32 * 256 }; /* pairs × columns: K ≤ 64 (a tile's rows or keys), N ≤ 256 */
    const int K2 = (K + 1) / 2;
    if ((int64_t)K2 * N > BMAX) { /* not reached by the backward's tiles */
        fc_bwd_bf16_gemm_vis(M, N, K, a, ars, acs, b, ldb, c, ldc, q_is_m, se, lo, hi);
        return;
    }
    /* b with its non-finite values scrubbed to +0: every visible and
     * invisible term with a finite b is the unguarded product's, and an
     * invisible term (a = 0 by selection) is 0·0 where a clean call has 0·b. */
    uint32_t bs[BMAX] __attribute__((aligned(64)));
    int bad = 0;
    for (int k = 0; k < K2; ++k)
        bad |= fc_bf16_scrub((uint16_t *)(bs + (ptrdiff_t)k * N), (const uint16_t *)(b + (ptrdiff_t)k * ldb), 2 * N);
    if (!bad) { /* nothing non-finite: the unguarded product (the same bits) */
        fc_bwd_amx_gemm(M, N, K2, a, ars, acs, b, ldb, c, ldc, 1);
        return;
    }
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized" /* bs: rows < K2 written above, all that is read */
    fc_bwd_amx_gemm(M, N, K2, a, ars, acs, bs, N, c, ldc, 1);
#pragma GCC diagnostic pop
    /* Then each non-finite b's terms for the rows that see it (gemm_vis's
     * rule: a visible term multiplies, whatever a is): Inf or NaN, whatever
     * the order. */
    for (int k = 0; k < K; ++k)
        for (int n = 0; n < N; ++n) {
            const uint16_t bv = ((const uint16_t *)(b + (ptrdiff_t)(k / 2) * ldb + n))[k & 1];
            if ((bv & 0x7f80) != 0x7f80) continue;
            const float bf = fc_bf16_to_f32(bv);
            for (int m = 0; m < M; ++m) {
                const int q = q_is_m ? m : k, key = q_is_m ? k : m;
                if (!FC_KEY_VISIBLE(se[q], lo[q], hi[q], key)) continue;
                const uint16_t av = ((const uint16_t *)(a + (ptrdiff_t)m * ars + (ptrdiff_t)(k / 2) * acs))[k & 1];
                c[(ptrdiff_t)m * ldc + n] += fc_bf16_to_f32(av) * bf;
            }
        }
}

/* ------------------------------------------------------------------ packs */
void fc_bwd_bf16_cvt_rows(const float *src, ptrdiff_t lds, int rows, int cols, uint16_t *dst,
                          ptrdiff_t ldd) {
    for (int r = 0; r < rows; ++r) {
        const float *s = src + (ptrdiff_t)r * lds;
        uint16_t *d = dst + (ptrdiff_t)r * ldd;
        int c = 0;
        for (; c + 32 <= cols; c += 32) {
            const __m512bh h = _mm512_cvtne2ps_pbh(fc_vf_load(s + c + 16), fc_vf_load(s + c));
            _mm512_storeu_si512(d + c, (__m512i)h);
        }
        for (; c < cols; c += 16)
            _mm256_storeu_si256((__m256i *)(d + c), (__m256i)_mm512_cvtneps_pbh(fc_vf_load(s + c)));
    }
}

void fc_bwd_bf16_pair_rows(const float *src, ptrdiff_t lds, int rows, int cols, uint32_t *dst,
                           ptrdiff_t ldd) {
    /* vcvtne2ps2bf16 puts row 2r's 16 values in the low half and row 2r+1's
     * in the high half; this interleaves them into pairs. */
    const __m512i ilv = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                         23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    for (int r = 0; r < rows; r += 2) {
        const float *s0 = src + (ptrdiff_t)r * lds, *s1 = s0 + lds;
        const int two = r + 1 < rows;
        uint32_t *d = dst + (ptrdiff_t)(r / 2) * ldd;
        for (int c = 0; c < cols; c += 16) {
            const __m512 x = fc_vf_load(s0 + c);
            const __m512 y = two ? fc_vf_load(s1 + c) : fc_vf_zero();
            const __m512i h = (__m512i)_mm512_cvtne2ps_pbh(y, x);
            _mm512_storeu_si512(d + c, _mm512_permutexvar_epi16(ilv, h));
        }
    }
}

/* Straight from bf16 rows with unit column stride (no fp32 round trip):
 * rows[r*ldr + c] = src[r*rs + c] and pairs[(r/2)*ldp + c] = (src[r][c],
 * src[r+1][c]) for c < cols, zero for cols ≤ c < cols_pad (a multiple of 16);
 * an odd last row is paired with zeros. */
void fc_bwd_bf16_pack_both(const uint16_t *src, int64_t rs, int rows, int cols, int cols_pad,
                           uint16_t *dst_rows, ptrdiff_t ldr, uint32_t *dst_pairs, ptrdiff_t ldp) {
    const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                        39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    for (int r = 0; r < rows; r += 2) {
        const int two = r + 1 < rows;
        const uint16_t *s0 = src + r * rs, *s1 = s0 + rs;
        uint16_t *d0 = dst_rows + (ptrdiff_t)r * ldr, *d1 = d0 + ldr;
        uint32_t *p = dst_pairs + (ptrdiff_t)(r / 2) * ldp;
        for (int c = 0; c < cols_pad; c += 32) {
            const int n = cols - c, w = cols_pad - c;
            const __mmask32 m = n >= 32 ? 0xffffffffu : n <= 0 ? 0u : (__mmask32)((1u << n) - 1u);
            const __mmask32 mw = w >= 32 ? 0xffffffffu : (__mmask32)((1u << w) - 1u);
            const __m512i x = _mm512_maskz_loadu_epi16(m, s0 + c);
            const __m512i y = two ? _mm512_maskz_loadu_epi16(m, s1 + c) : _mm512_setzero_si512();
            _mm512_mask_storeu_epi16(d0 + c, mw, x);
            if (two) _mm512_mask_storeu_epi16(d1 + c, mw, y);
            _mm512_storeu_si512(p + c, _mm512_permutex2var_epi16(x, lo, y));
            if (w > 16) _mm512_storeu_si512(p + c + 16, _mm512_permutex2var_epi16(x, hi, y));
        }
    }
}
