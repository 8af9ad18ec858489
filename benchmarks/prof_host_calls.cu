/*
 * prof_host_calls.cu — what a small CUDA attention call costs on the CPU
 * (issue 9: a decode step's time before the GPU starts). Times, per call,
 * the CUDA runtime calls the C entry makes and flashc_attn_fwd itself on a
 * tiny decode problem (GPU work ≪ CPU work, so back-to-back calls measure
 * the CPU side), with the backend named and AUTO.
 *
 *   nvcc -O2 -std=c++17 -Iinclude benchmarks/prof_host_calls.cu -o /tmp/phc \
 *        -L<dir of libflashc.so> -lflashc -lcuda && /tmp/phc
 */
#include <chrono>
#include <cstdio>
#include <cuda.h>
#include <cuda_runtime.h>

#include "flashc.h"

struct Big {
    char b[1024];
};
__global__ void k_small(int x) {
    if (x == 12345) printf("x\n");
}
__global__ void k_big(const __grid_constant__ Big p) {
    if (p.b[0] == 123) printf("x\n");
}

template <class F> static double per_call_us(F &&f, int n = 2000) {
    for (int i = 0; i < 50; ++i) f();
    cudaDeviceSynchronize();
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < n; ++i) f();
        const auto t1 = std::chrono::steady_clock::now();
        cudaDeviceSynchronize();
        const double us = std::chrono::duration<double, std::micro>(t1 - t0).count() / n;
        best = us < best ? us : best;
    }
    return best;
}

static flashc_tensor tens(void *p, int64_t a, int64_t b, int64_t c, int64_t d) {
    flashc_tensor t = {};
    t.data = p;
    t.dtype = FLASHC_BF16;
    t.ndim = 4;
    const int64_t s[4] = {a, b, c, d};
    int64_t st = 1;
    for (int i = 3; i >= 0; --i) {
        t.shape[i] = s[i];
        t.strides[i] = st;
        st *= s[i];
    }
    return t;
}

int main() {
    void *d = nullptr;
    cudaMalloc(&d, 1 << 20);
    cudaStream_t st;
    cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    cudaPointerAttributes at;
    printf("cudaPointerGetAttributes      %7.2f us\n", per_call_us([&] { cudaPointerGetAttributes(&at, d); }));
    int dev;
    printf("cudaGetDevice                 %7.2f us\n", per_call_us([&] { cudaGetDevice(&dev); }));
    printf("cudaGetLastError              %7.2f us\n", per_call_us([&] { (void)cudaGetLastError(); }));
    cudaMemPool_t pool;
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPoolCreate(&pool, &props);
    uint64_t keep = 1ull << 30;
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    printf("mallocFromPoolAsync+freeAsync %7.2f us\n", per_call_us([&] {
               void *p;
               cudaMallocFromPoolAsync(&p, 1 << 20, pool, st);
               cudaFreeAsync(p, st);
           }, 500));
    printf("launch, 4-byte param          %7.2f us\n", per_call_us([&] { k_small<<<1, 32, 0, st>>>(1); }, 500));
    Big big = {};
    printf("launch, 1 KB grid_constant    %7.2f us\n", per_call_us([&] { k_big<<<1, 32, 0, st>>>(big); }, 500));
    /* The same 1 KB launch through the driver (a CUfunction looked up once),
     * as cuDNN launches; and one launch from an idle GPU (synchronised first). */
    cudaFunction_t fbig = nullptr;
    cudaGetFuncBySymbol(&fbig, (const void *)k_big);
    void *bargs[] = {&big};
    printf("cuLaunchKernel, 1 KB          %7.2f us\n", per_call_us([&] {
               cuLaunchKernel((CUfunction)fbig, 1, 1, 1, 32, 1, 1, 0, (CUstream)st, bargs, nullptr);
           }, 500));
    cudaLaunchConfig_t lc = {};
    lc.gridDim = dim3(1);
    lc.blockDim = dim3(32);
    lc.stream = st;
    printf("cudaLaunchKernelEx, 1 KB      %7.2f us\n",
           per_call_us([&] { cudaLaunchKernelEx(&lc, k_big, big); }, 500));
    for (int drv = 0; drv < 2; ++drv) {
        double best = 1e30, sum = 0;
        for (int r = 0; r < 200; ++r) {
            cudaStreamSynchronize(st);
            const auto t0 = std::chrono::steady_clock::now();
            if (drv) cuLaunchKernel((CUfunction)fbig, 1, 1, 1, 32, 1, 1, 0, (CUstream)st, bargs, nullptr);
            else k_big<<<1, 32, 0, st>>>(big);
            const auto t1 = std::chrono::steady_clock::now();
            const double us = std::chrono::duration<double, std::micro>(t1 - t0).count();
            best = us < best ? us : best;
            sum += us;
        }
        printf("%s from an idle GPU  best %5.2f mean %5.2f us\n", drv ? "cuLaunchKernel" : "<<<>>> launch   ", best,
               sum / 200);
    }
    printf("cudaFuncSetAttribute          %7.2f us\n", per_call_us([&] {
               cudaFuncSetAttribute((const void *)k_big, cudaFuncAttributeMaxDynamicSharedMemorySize, 1024);
           }));

    /* flashc_attn_fwd: decode step B = 1, Hq 32, Hkv 8, D 128; Sk = 64 (one
     * split: no scratch, no combine) and 8192 (split-KV + combine). */
    for (int Sk : {64, 8192}) {
        const int B = 1, Hq = 32, Hkv = 8, D = 128;
        void *q, *k, *v, *o, *lse;
        cudaMalloc(&q, B * Hq * D * 2);
        cudaMalloc(&k, (size_t)B * Sk * Hkv * D * 2);
        cudaMalloc(&v, (size_t)B * Sk * Hkv * D * 2);
        cudaMalloc(&o, B * Hq * D * 2);
        cudaMalloc(&lse, B * Hq * 4);
        cudaMemset(q, 0, B * Hq * D * 2);
        cudaMemset(k, 0, (size_t)B * Sk * Hkv * D * 2);
        cudaMemset(v, 0, (size_t)B * Sk * Hkv * D * 2);
        flashc_tensor tq = tens(q, B, 1, Hq, D), tk = tens(k, B, Sk, Hkv, D), tv = tens(v, B, Sk, Hkv, D),
                      to = tens(o, B, 1, Hq, D);
        flashc_tensor tl = {};
        tl.data = lse;
        tl.dtype = FLASHC_F32;
        tl.ndim = 3;
        tl.shape[0] = B, tl.shape[1] = Hq, tl.shape[2] = 1;
        tl.strides[0] = Hq, tl.strides[1] = 1, tl.strides[2] = 1;
        for (int be : {FLASHC_BACKEND_CUDA, FLASHC_BACKEND_AUTO}) {
            flashc_attn_params pr = flashc_attn_params_default();
            pr.backend = be;
            pr.stream = st;
            const int s0 = flashc_attn_fwd(&tq, &tk, &tv, &to, nullptr, &pr);
            if (s0 != 0) printf("flashc_attn_fwd: %s\n", flashc_last_error());
            const char *bn = be == FLASHC_BACKEND_CUDA ? "CUDA" : "AUTO";
            printf("flashc_attn_fwd Sk=%-5d %s     %7.2f us CPU per call (no lse)\n", Sk, bn,
                   per_call_us([&] { flashc_attn_fwd(&tq, &tk, &tv, &to, nullptr, &pr); }, 500));
            printf("flashc_attn_fwd Sk=%-5d %s     %7.2f us CPU per call (lse)\n", Sk, bn,
                   per_call_us([&] { flashc_attn_fwd(&tq, &tk, &tv, &to, &tl, &pr); }, 500));
        }
        /* The GPU side of one call (events around 200 back-to-back calls). */
        flashc_attn_params pr = flashc_attn_params_default();
        pr.backend = FLASHC_BACKEND_CUDA;
        pr.stream = st;
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0);
        cudaEventCreate(&e1);
        cudaEventRecord(e0, st);
        for (int i = 0; i < 200; ++i) flashc_attn_fwd(&tq, &tk, &tv, &to, nullptr, &pr);
        cudaEventRecord(e1, st);
        cudaEventSynchronize(e1);
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        printf("flashc_attn_fwd Sk=%-5d GPU stream time per call %7.2f us (200 back to back)\n", Sk, ms * 1e3 / 200);
        /* One call from an idle GPU: host time to return, and events around it. */
        cudaStreamSynchronize(st);
        double best = 1e30, bev = 1e30;
        for (int r = 0; r < 50; ++r) {
            cudaEventRecord(e0, st);
            const auto t0 = std::chrono::steady_clock::now();
            flashc_attn_fwd(&tq, &tk, &tv, &to, nullptr, &pr);
            const auto t1 = std::chrono::steady_clock::now();
            cudaEventRecord(e1, st);
            cudaEventSynchronize(e1);
            cudaEventElapsedTime(&ms, e0, e1);
            const double us = std::chrono::duration<double, std::micro>(t1 - t0).count();
            best = us < best ? us : best;
            bev = ms * 1e3 < bev ? ms * 1e3 : bev;
        }
        printf("flashc_attn_fwd Sk=%-5d idle GPU: call returns after %7.2f us, events %7.2f us (best of 50)\n", Sk,
               best, bev);
        cudaFree(q), cudaFree(k), cudaFree(v), cudaFree(o), cudaFree(lse);
    }
    return 0;
}
