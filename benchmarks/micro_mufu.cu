/*
 * micro_mufu.cu — throughput of the special-function unit (MUFU) on this GPU
 * for the operations a softcap softmax needs, scalar and packed:
 *   tanh.approx.{f32, f16x2, bf16x2}, ex2.approx.{f32, f16x2, ftz.bf16x2}
 * and, for scale, an FFMA chain. Results per SM per clock (one result of a
 * packed op counts 2). The question (issue 7): does a packed f16x2 / bf16x2
 * op give two results for one MUFU slot, or is it issued as two?
 *
 *   nvcc -O3 -arch=sm_90a -o micro_mufu benchmarks/micro_mufu.cu && ./micro_mufu
 *
 * Each thread runs NCH independent chains (enough in flight to cover the
 * unit's latency); the inputs are kept in a range where the op neither
 * saturates to a constant nor overflows (x ← op(x)·a + b), so the compiler
 * cannot fold the loop. Timing: clock64() per block around the loop, the
 * median block's cycles; results / (cycles · blocks on an SM).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <vector>

constexpr int NCH = 8, ITERS = 4096, THREADS = 512;

enum Op { TANH_F32, TANH_F16X2, TANH_BF16X2, EX2_F32, EX2_F16X2, EX2_BF16X2, FFMA_F32, TANH_EX2_F32, NOPS };
static const char *names[NOPS] = {"tanh.approx.f32", "tanh.approx.f16x2", "tanh.approx.bf16x2", "ex2.approx.f32",
                                  "ex2.approx.f16x2", "ex2.approx.ftz.bf16x2", "fma.rn.f32 (scale)",
                                  "tanh.f32 + ex2.f32 pairs"};
static const int per_op[NOPS] = {1, 2, 2, 1, 2, 2, 1, 2}; /* results a lane an op (pairs: 2 MUFU ops) */

template <int OP> __global__ void kern(float *out, long long *cyc, float a, float b) {
    uint32_t x[NCH];
#pragma unroll
    for (int c = 0; c < NCH; ++c) {
        const float f = 0.01f * (threadIdx.x + c);
        if (OP == TANH_F16X2 || OP == EX2_F16X2) {
            __half2 h = __floats2half2_rn(f, -f);
            x[c] = *reinterpret_cast<uint32_t *>(&h);
        } else if (OP == TANH_BF16X2 || OP == EX2_BF16X2) {
            __nv_bfloat162 h = __floats2bfloat162_rn(f, -f);
            x[c] = *reinterpret_cast<uint32_t *>(&h);
        } else {
            x[c] = __float_as_uint(f);
        }
    }
    uint32_t ab2 = 0, bb2 = 0;
    {
        __half2 ha = __floats2half2_rn(a, a), hb = __floats2half2_rn(b, b);
        __nv_bfloat162 ba = __floats2bfloat162_rn(a, a), bbb = __floats2bfloat162_rn(b, b);
        if (OP == TANH_BF16X2 || OP == EX2_BF16X2) {
            ab2 = *reinterpret_cast<uint32_t *>(&ba);
            bb2 = *reinterpret_cast<uint32_t *>(&bbb);
        } else {
            ab2 = *reinterpret_cast<uint32_t *>(&ha);
            bb2 = *reinterpret_cast<uint32_t *>(&hb);
        }
    }
    __syncthreads();
    const long long t0 = clock64();
    for (int it = 0; it < ITERS; ++it) {
#pragma unroll
        for (int c = 0; c < NCH; ++c) {
            uint32_t y;
            if (OP == TANH_F32) asm volatile("tanh.approx.f32 %0, %1;" : "=r"(y) : "r"(x[c]));
            if (OP == TANH_F16X2) asm volatile("tanh.approx.f16x2 %0, %1;" : "=r"(y) : "r"(x[c]));
            if (OP == TANH_BF16X2) asm volatile("tanh.approx.bf16x2 %0, %1;" : "=r"(y) : "r"(x[c]));
            if (OP == EX2_F32) asm volatile("ex2.approx.f32 %0, %1;" : "=r"(y) : "r"(x[c]));
            if (OP == EX2_F16X2) asm volatile("ex2.approx.f16x2 %0, %1;" : "=r"(y) : "r"(x[c]));
            if (OP == EX2_BF16X2) asm volatile("ex2.approx.ftz.bf16x2 %0, %1;" : "=r"(y) : "r"(x[c]));
            if (OP == FFMA_F32) asm volatile("fma.rn.f32 %0, %1, %2, %3;" : "=r"(y) : "r"(x[c]), "f"(a), "f"(b));
            if (OP == TANH_EX2_F32) {
                uint32_t t;
                asm volatile("tanh.approx.f32 %0, %1;" : "=r"(t) : "r"(x[c]));
                asm volatile("ex2.approx.f32 %0, %1;" : "=r"(y) : "r"(t));
            }
            /* keep x in range: x ← y·a + b (packed ops: packed fma) */
            if (OP == TANH_F16X2 || OP == EX2_F16X2)
                asm volatile("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(x[c]) : "r"(y), "r"(ab2), "r"(bb2));
            else if (OP == TANH_BF16X2 || OP == EX2_BF16X2)
                asm volatile("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(x[c]) : "r"(y), "r"(ab2), "r"(bb2));
            else if (OP == FFMA_F32)
                x[c] = y;
            else
                asm volatile("fma.rn.f32 %0, %1, %2, %3;" : "=r"(x[c]) : "r"(y), "f"(a), "f"(b));
        }
    }
    const long long t1 = clock64();
    float s = 0.f;
#pragma unroll
    for (int c = 0; c < NCH; ++c) s += __uint_as_float(x[c]);
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
    if (threadIdx.x == 0) cyc[blockIdx.x] = t1 - t0;
}

template <int OP> static double run(int sms, int per_sm) {
    const int blocks = sms * per_sm;
    float *out;
    long long *cyc;
    cudaMalloc(&out, sizeof(float) * blocks * THREADS);
    cudaMalloc(&cyc, sizeof(long long) * blocks);
    kern<OP><<<blocks, THREADS>>>(out, cyc, 0.5f, 0.25f); /* warm-up */
    kern<OP><<<blocks, THREADS>>>(out, cyc, 0.5f, 0.25f);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        printf("%s: %s\n", names[OP], cudaGetErrorString(e));
        exit(1);
    }
    std::vector<long long> c(blocks);
    cudaMemcpy(c.data(), cyc, sizeof(long long) * blocks, cudaMemcpyDeviceToHost);
    std::sort(c.begin(), c.end());
    cudaFree(out);
    cudaFree(cyc);
    /* blocks run per_sm at once on each SM: per SM and clock, per_sm blocks' results in one block's cycles */
    const double results = (double)per_sm * THREADS * NCH * ITERS * per_op[OP];
    return results / (double)c[blocks / 2];
}

int main() {
    int dev = 0, sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    cudaDeviceProp pr;
    cudaGetDeviceProperties(&pr, dev);
    printf("%s, %d SMs; results per SM per clock (median block), %d threads x %d chains a block\n", pr.name, sms,
           THREADS, NCH);
    const int per_sm = 2; /* 1024 threads an SM */
    double r[NOPS];
    r[TANH_F32] = run<TANH_F32>(sms, per_sm);
    r[TANH_F16X2] = run<TANH_F16X2>(sms, per_sm);
    r[TANH_BF16X2] = run<TANH_BF16X2>(sms, per_sm);
    r[EX2_F32] = run<EX2_F32>(sms, per_sm);
    r[EX2_F16X2] = run<EX2_F16X2>(sms, per_sm);
    r[EX2_BF16X2] = run<EX2_BF16X2>(sms, per_sm);
    r[FFMA_F32] = run<FFMA_F32>(sms, per_sm);
    r[TANH_EX2_F32] = run<TANH_EX2_F32>(sms, per_sm);
    for (int o = 0; o < NOPS; ++o) printf("  %-26s %7.2f results/clk/SM\n", names[o], r[o]);
    printf("(each MUFU loop also issues one fma a chain step: the FFMA row is its ceiling)\n");
    return 0;
}
