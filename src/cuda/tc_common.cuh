/*
 * tc_common.cuh — private helpers of the tensor-core attention kernels
 * (attn_fwd_tc.cu, attn_bwd_tc.cu): PTX wrappers for cp.async, ldmatrix and
 * mma.sync m16n8k16 (sm_80+), the m16n8k8 tf32 products of the F32
 * forward (3xTF32, below), per-dtype packing, and the error helper.
 *
 * Fragment layouts of mma.m16n8k16 (g = lane / 4, t = lane % 4), as the PTX
 * ISA defines them and as every kernel here relies on:
 *   A 16x16 (row): a0a1 = (g, 2t..2t+1)  a2a3 = (g+8, 2t..)  a4a5 = (g, 2t+8..)
 *                  a6a7 = (g+8, 2t+8..)
 *   B 16x8  (col): b0b1 = (k 2t..2t+1, n g)  b2b3 = (k 2t+8.., n g)
 *   C 16x8       : c0c1 = (g, 2t..2t+1)  c2c3 = (g+8, 2t..2t+1)
 * so the C fragments of two adjacent n8 tiles of S are exactly the A fragment
 * of one k16 chunk of P (no shuffles between QK^T and PV).
 */
#ifndef FLASHC_TC_COMMON_CUH
#define FLASHC_TC_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "attn_score.cuh"
#include "fc_cuda.cuh"

namespace fctc {

/* ------------------------------------------------------------ dtype ops */
template <typename T> struct Ops;

template <> struct Ops<__half> {
    /* (lo, hi) -> one 32-bit register, lo in the low half (lower column). */
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __half2 h = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&h);
    }
    static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0,
                                               uint32_t b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
            "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static constexpr uint32_t EXP = 0x7C00u; /* exponent bits of one half: all set = Inf/NaN */
    static constexpr uint32_t QNAN = 0x7E00u;
    static __device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
    static __device__ __forceinline__ __half from_f(float x) { return __float2half_rn(x); }
};

template <> struct Ops<__nv_bfloat16> {
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&h);
    }
    static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0,
                                               uint32_t b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
            "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static constexpr uint32_t EXP = 0x7F80u;
    static constexpr uint32_t QNAN = 0x7FC0u;
    static __device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
    static __device__ __forceinline__ __nv_bfloat16 from_f(float x) {
        return __float2bfloat16_rn(x);
    }
};

/* float: the F32 forward on the tensor cores (3xTF32, below) stages its
 * tiles and O as fp32. */
template <> struct Ops<float> {
    static __device__ __forceinline__ float to_f(float x) { return x; }
    static __device__ __forceinline__ float from_f(float x) { return x; }
};

/* Non-finite halves of a register of two 16-bit values (em = Ops<T>::EXP):
 * bit 0 the low half (the lower k or column), bit 1 the high one. */
__device__ __forceinline__ uint32_t nonfinite2(uint32_t x, uint32_t em) {
    return ((x & em) == em ? 1u : 0u) | (((x >> 16) & em) == em ? 2u : 0u);
}
/* ... and the register with those halves replaced by +0. */
__device__ __forceinline__ uint32_t zero_nonfinite2(uint32_t x, uint32_t em) {
    const uint32_t b = nonfinite2(x, em);
    return x & ~((b & 1u ? 0x0000FFFFu : 0u) | (b & 2u ? 0xFFFF0000u : 0u));
}

/* --------------------------------------------------------------- PTX */
__device__ __forceinline__ uint32_t smem_u32(const void *p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/* 16-byte async copy global -> shared; when !pred nothing is read and the 16
 * bytes are zero-filled (src-size 0), so padding rows/columns cost no branch.
 * PF = 128: with the L2::128B prefetch hint (the memory-bound decode kernel:
 * whole 128-byte lines requested at once, +3.5 % bandwidth on the H200). */
template <int PF = 0>
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, bool pred) {
    static_assert(PF == 0 || PF == 128, "prefetch size");
    const int n = pred ? 16 : 0;
    if constexpr (PF == 128)
        asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
    else
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2,
                                        uint32_t &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t &r0, uint32_t &r1,
                                          uint32_t &r2, uint32_t &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

/* ------------------------------------------------------------ 3xTF32
 * fp32 products on the tf32 tensor cores (mma.sync m16n8k8, sm_80+), as
 * CUTLASS's "fast fp32" and torch's memory-efficient kernel do: x = hi + lo,
 * both tf32 (10-bit mantissas; tf32_split), a·b ≈ lo_a·hi_b + hi_a·lo_b +
 * hi_a·hi_b (the dropped lo_a·lo_b is ~2^-22 of a·b, the truncation of lo
 * 2^-21 at most), accumulated in fp32. Fragment layouts of m16n8k8 .tf32 (g = lane / 4,
 * t = lane % 4): A a0 = (g, t), a1 = (g+8, t), a2 = (g, t+4), a3 = (g+8, t+4);
 * B b0 = (k t, n g), b1 = (k t+4, n g); C as m16n8k16's. An ldmatrix of
 * 8 rows × 16 bytes gives thread (g, t) word t of row g: the A and B
 * fragments of fp32 rows in smem (row-major Q and K) with ldsm_x4. */
/* x = hi + lo as the products take them (CUTLASS's "fast fp32" split):
 * hi is x rounded to tf32 by integer operations (half an ulp added to the
 * magnitude, the 13 low bits cleared: cvt.rna's rounding, nearest with ties
 * away from zero); lo = x − hi (exact) goes in as fp32 bits, which the
 * tensor core truncates to tf32 (lo's error 2^-21 of x at most, against
 * 2^-22 rounded: errors measured the same to two digits). cvt.rna runs on
 * Hopper's conversion pipe, a few per clock, and the split is a third of
 * the F32 kernels' instructions: H100, flashc.torch, same run: forward D=64
 * 4k 60.5 TFLOP/s (cvt 51.4), D=128 4k 55.5 (48.8); backward alone 33–37
 * (23–27). A cvt-free variant that kept lo rounded and let NaN through hi
 * by a select spilled (264 bytes in the HD-128 dK/dV kernel) and gained a
 * quarter as much.
 * NaN: the integer add may turn a NaN x into −0 (a mantissa of 0x7FF000 or
 * more carries into the sign: CUDA's canonical 0x7FFFFFFF) or Inf (payload
 * in the low bits only), but lo = x − hi is then NaN (0x7FFFFFFF, still NaN
 * once truncated) and lo·hi' enters every product x takes part in: a NaN a
 * row sees stays NaN (tests/test_cuda.py, _poisoned_forward's encodings).
 * Inf: hi = Inf, lo = NaN, as cvt.rna gave. */
__device__ __forceinline__ void tf32_split(float x, uint32_t &hi, uint32_t &lo) {
    hi = (__float_as_uint(x) + 0x1000u) & 0xFFFFE000u;
    lo = __float_as_uint(x - __uint_as_float(hi));
}
__device__ __forceinline__ void mma_tf32(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* c += a·b in 3xTF32 (the small terms first), accumulated in c. The tensor
 * cores round an accumulation toward zero: in an accumulator whose running
 * sum keeps its sign over a long loop (O over thousands of keys) that bias
 * grows with the loop (rel-L2 3e-5 at 4k keys, H100), so such a caller
 * passes a zeroed fragment for a short stretch (16 keys of P·V) and adds it
 * in fp32. */
__device__ __forceinline__ void mma_3xtf32(float c[4], const uint32_t (&ah)[4], const uint32_t (&al)[4], uint32_t bh0,
                                           uint32_t bh1, uint32_t bl0, uint32_t bl1) {
    mma_tf32(c, al, bh0, bh1);
    mma_tf32(c, ah, bl0, bl1);
    mma_tf32(c, ah, bh0, bh1);
}
/* ... the two small terms into their own accumulator cs, the big one into
 * cb (the caller adds cs to cb at the end): the big sum takes a third of
 * the accumulations, so a third of the truncation bias, and the small sum's
 * truncations are 2^-11 of its size; two independent chains besides. */
__device__ __forceinline__ void mma_3xtf32(float cb[4], float cs[4], const uint32_t (&ah)[4], const uint32_t (&al)[4],
                                           uint32_t bh0, uint32_t bh1, uint32_t bl0, uint32_t bl1) {
    mma_tf32(cs, al, bh0, bh1);
    mma_tf32(cs, ah, bl0, bl1);
    mma_tf32(cb, ah, bh0, bh1);
}

__device__ __forceinline__ float exp2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* Loads rows [row0, row0 + R) of a [*, D] slice into smem rows of pitch
 * HD + EPC (EPC = 16 / sizeof(T) elements: 8 of 2 bytes, 4 floats),
 * zero-filling rows ≥ nrows and columns ≥ D up to HD, by NT threads
 * (tid < NT): tile row r (row row0 + r of the slice) starts at base + off(r),
 * unit d stride (off(r) may be asked for any r < R; only rows < nrows are
 * read). vec (16-byte aligned rows, D % 8 == 0): cp.async, to be waited for
 * by the caller; else plain loads, visible after the same barrier that
 * follows the cp.async wait. PF: cp_async16's prefetch hint. */
template <typename T, int HD, int R, int NT, int PF = 0, class Off>
__device__ __forceinline__ void load_rows_at(T *s, const T *base, Off off, int row0, int nrows, int D, bool vec,
                                             int tid) {
    constexpr int EPC = 16 / (int)sizeof(T), CPR = HD / EPC, LD = HD + EPC; /* 16-byte chunks per row; smem pitch */
    if (vec) {
#pragma unroll
        for (int idx = tid; idx < R * CPR; idx += NT) {
            const int r = idx / CPR, c = idx % CPR;
            const bool ok = (row0 + r < nrows) && (c * EPC < D);
            const T *src = ok ? base + off(r) + c * EPC : base;
            cp_async16<PF>(smem_u32(s + r * LD + c * EPC), src, ok);
        }
    } else {
        for (int idx = tid; idx < R * CPR; idx += NT) {
            const int r = idx / CPR, c = idx % CPR;
            const bool rok = row0 + r < nrows;
            const T *src = base + off(r);
#pragma unroll
            for (int e = 0; e < EPC; ++e) {
                const int d = c * EPC + e;
                s[r * LD + d] = (rok && d < D) ? src[d] : Ops<T>::from_f(0.f);
            }
        }
    }
}
/* ... rows of a strided slice: row i at g + i·rs. */
template <typename T, int HD, int R, int NT>
__device__ __forceinline__ void load_rows(T *s, const T *g, int64_t rs, int row0, int nrows, int D, bool vec,
                                          int tid) {
    load_rows_at<T, HD, R, NT>(s, g, [=](int r) { return (int64_t)(row0 + r) * rs; }, row0, nrows, D, vec, tid);
}
/* ... the key rows [row0, row0 + R) of a ragged problem's tile (row0 a
 * multiple of R) through the key-row table of attn_ragged.cuh (fcc_key_rows):
 * contiguous tiles (per_tile): row r at base + tbl[0] + r·rs; else row r at
 * base + tbl[r]. */
template <typename T, int HD, int R, int NT>
__device__ __forceinline__ void load_key_rows(T *s, const T *base, const int64_t *tbl, int64_t rs, bool per_tile,
                                              int row0, int nrows, int D, bool vec, int tid) {
    if (per_tile) {
        const int64_t t0 = tbl[0];
        load_rows_at<T, HD, R, NT>(s, base, [=](int r) { return t0 + (int64_t)r * rs; }, row0, nrows, D, vec, tid);
    } else {
        load_rows_at<T, HD, R, NT>(s, base, [=](int r) { return tbl[r]; }, row0, nrows, D, vec, tid);
    }
}

/* tanh for the softcap of the F16/BF16 kernels: the hardware tanh.approx
 * (attn_score.cuh, fcc_tanh_fast is the score step's flavour of it). */
__device__ __forceinline__ float tanh_approx(float x) { return fcc_tanh_approx(x); }

} // namespace fctc

#endif /* FLASHC_TC_COMMON_CUH */
