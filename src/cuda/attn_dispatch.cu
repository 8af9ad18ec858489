/*
 * attn_dispatch.cu — the module's attention entries: build the one parameter
 * struct (fcc_attn, attn_params.cuh) once, plan, run.
 *
 * Forward plan, in order of speed: the split-KV decode kernel for few query
 * rows per kv head (on compute capability 9.0 its TMA form attn_decode_tma.cu
 * where the tensor maps apply, else attn_decode.cu, sm_80+), the Hopper wgmma kernel (attn_fwd_wgmma.cu;
 * sm_90a code, only on compute capability 9.0), the mma.sync kernel
 * (attn_fwd_tc.cu, sm_80+), the generic SIMT kernel (every valid problem).
 * Backward: the Hopper wgmma kernels (attn_bwd_wgmma.cu, sm_90a), the
 * mma.sync kernels (attn_bwd_tc.cu, sm_80+), then generic.
 * FLASHC_CUDA_KERNEL (common/knobs.h, read at every call) forces a family:
 * "generic" = the generic kernels only; "mma" = skip the wgmma and TMA kernels.
 * Shared memory: every kernel's supports() (and the generic launchers'
 * shape choice) compares its need with fcc_device::smem_optin, the device's
 * opt-in limit capped by FLASHC_CUDA_SMEM_LIMIT: on GPUs with less (sm_86/89:
 * 99 KB) the plan takes the smaller instances (single-buffered tc backward,
 * small mma.sync forward tiles, the generic kernels' chunked shapes).
 * Ragged problems (attn_ragged.cuh) take the same plan: every kernel runs
 * them except the wgmma backward and the wgmma forward on paged caches
 * whose pages do not tile its key tiles (those fall to mma.sync); the KV
 * append and the backward's zero rows are passes of attn_ragged.cu around it.
 */
#include "attn_params.cuh"
#include "attn_ragged.cuh"
#include "common/knobs.h"
#include "common/host_prof.h"

#include <atomic>
#include <stdint.h>

#ifdef FLASHC_HOST_PROF
thread_local uint64_t fcc_prof_marks[FC_PROF_N];
extern "C" __attribute__((visibility("default"))) uint64_t *flashc_cuda_host_prof_marks(void) { return fcc_prof_marks; }
#endif

/* The device's opt-in limit, capped by FLASHC_CUDA_SMEM_LIMIT (common/knobs.h). */
static int smem_cap(int optin) {
    const long lim = fc_knob_cuda_smem_limit();
    return lim >= 0 && lim < optin ? (int)lim : optin;
}

flashc_status fcc_device_query(fcc_device *d) {
    static std::atomic<int> cache_cc[64], cache_sm[64], cache_smem[64]; /* 0 = not asked yet */
    int dev = 0;
    FCC_CHECK(cudaGetDevice(&dev));
    d->ordinal = dev;
    if (dev >= 0 && dev < 64 && cache_cc[dev].load(std::memory_order_relaxed) != 0) {
        d->cc = cache_cc[dev].load(std::memory_order_relaxed);
        d->sm_count = cache_sm[dev].load(std::memory_order_relaxed);
        d->smem_optin = smem_cap(cache_smem[dev].load(std::memory_order_relaxed));
        return FLASHC_OK;
    }
    int major = 0, minor = 0, sms = 0, smem = 0;
    FCC_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    FCC_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    FCC_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    FCC_CHECK(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    d->cc = 10 * major + minor;
    d->sm_count = sms;
    d->smem_optin = smem_cap(smem);
    if (dev >= 0 && dev < 64) {
        cache_sm[dev].store(sms, std::memory_order_relaxed);
        cache_smem[dev].store(smem, std::memory_order_relaxed);
        cache_cc[dev].store(d->cc, std::memory_order_relaxed); /* last: marks the entry valid */
    }
    return FLASHC_OK;
}

static bool aligned(const void *p, unsigned bytes) { return ((uintptr_t)p % bytes) == 0; }

flashc_status fcc_attn_make(const fc_attn *a, bool bwd, fcc_attn *p) {
    p->a = *a;
    p->mask = fc_attn_mask(a);
    p->score = fc_attn_score(a);
    const int64_t lim = (int64_t)1 << 30;
    p->fits_int32 = a->Sq < lim && a->Sk < lim && a->Hq < lim && a->B < lim && a->D < lim;
    p->Sq = (int)a->Sq;
    p->Sk = (int)a->Sk;
    p->Hq = (int)a->Hq;
    p->Hkv = (int)a->Hkv;
    p->D = (int)a->D;
    p->group = (int)(a->Hq / a->Hkv);
    p->bwd = bwd;

    /* The tensors a kernel reads row by row, and those it writes. */
    const void *in[5] = {a->q, a->k, a->v, bwd ? a->o : nullptr, bwd ? a->dout : nullptr};
    const int64_t *sin[5] = {a->sq, a->sk, a->sv, a->so, a->sdo};
    const void *out[3] = {bwd ? a->dq : a->o, bwd ? a->dk : nullptr, bwd ? a->dv : nullptr};
    const int64_t *sout[3] = {bwd ? a->sdq : a->so, a->sdk, a->sdv};
    const int nin = bwd ? 5 : 3, nout = bwd ? 3 : 1;

    bool contig = true;
    for (int i = 0; i < nin; ++i) contig = contig && (a->D == 1 || sin[i][3] == 1);
    for (int i = 0; i < nout; ++i) contig = contig && (a->D == 1 || sout[i][3] == 1);
    if (!bwd) contig = contig && (a->D == 1 || a->so[3] == 1);
    p->d_contig = contig;

    /* 16-byte rows of 2-byte elements: pointers 16-byte aligned, strides of
     * the batch/seq/head axes multiples of 8 elements, whole 8-element chunks. */
    bool vec = contig && a->D % 8 == 0;
    for (int i = 0; i < nin; ++i) {
        vec = vec && aligned(in[i], 16);
        for (int j = 0; j < 3; ++j) vec = vec && sin[i][j] % 8 == 0;
    }
    p->vec16 = vec;
    bool pairs = contig;
    for (int i = 0; i < nout; ++i) {
        pairs = pairs && aligned(out[i], 4);
        for (int j = 0; j < 3; ++j) pairs = pairs && sout[i][j] % 2 == 0;
    }
    p->out_pairs = pairs;
    bool ovec = contig && a->D % 8 == 0;
    for (int i = 0; i < nout; ++i) {
        ovec = ovec && aligned(out[i], 16);
        for (int j = 0; j < 3; ++j) ovec = ovec && sout[i][j] % 8 == 0;
    }
    p->out_vec16 = ovec;

    p->plain_score = fc_score_is_plain(&p->score) != 0;
    p->scale_pos = a->scale > 0.0;
    p->scale = (float)a->scale;
    p->sl2e = (float)(a->scale * FC_LOG2E);
    return fcc_device_query(&p->dev);
}

fcc_fwd_kernel fcc_plan_fwd(const fcc_attn &p, int forced) {
    if (forced == FC_KNOB_CUDA_GENERIC) return FCC_FWD_GENERIC;
    if (fcc_fwd_decode_supports(p)) { /* mma.sync kernels: "mma" keeps the cp.async one */
        if (forced != FC_KNOB_CUDA_MMA && p.dev.cc == 90 && fcc_fwd_decode_tma_supports(p)) return FCC_FWD_DECODE_TMA;
        return FCC_FWD_DECODE;
    }
    if (forced != FC_KNOB_CUDA_MMA && p.dev.cc == 90 && fcc_fwd_wgmma_supports(p)) return FCC_FWD_WGMMA;
    if (fcc_fwd_mma_supports(p)) return FCC_FWD_MMA;
    return FCC_FWD_GENERIC;
}

fcc_bwd_kernel fcc_plan_bwd(const fcc_attn &p, int forced) {
    if (forced == FC_KNOB_CUDA_GENERIC) return FCC_BWD_GENERIC;
    if (forced != FC_KNOB_CUDA_MMA && p.dev.cc == 90 && fcc_bwd_wgmma_supports(p)) return FCC_BWD_WGMMA;
    if (fcc_bwd_mma_supports(p)) return FCC_BWD_MMA;
    return FCC_BWD_GENERIC;
}

flashc_status fcc_attn_fwd(const fc_attn *a) {
    /* KV append first, on the stream: the attention below reads the cache. */
    if (a->k_new) FCC_TRY(fcc_kv_append_run(a));
    if (a->Sq == 0 || a->B == 0) return FLASHC_OK;
    FC_PROF_MARK(fcc_prof_marks, 0);
    fcc_attn p;
    FCC_TRY(fcc_attn_make(a, false, &p));
    FC_PROF_MARK(fcc_prof_marks, 1);
    const fcc_fwd_kernel kern = fcc_plan_fwd(p, fc_knob_cuda_kernel());
    FC_PROF_MARK(fcc_prof_marks, 2);
    switch (kern) {
    case FCC_FWD_DECODE: return fcc_fwd_decode_run(p);
    case FCC_FWD_DECODE_TMA: return fcc_fwd_decode_tma_run(p);
    case FCC_FWD_WGMMA: return fcc_fwd_wgmma_run(p);
    case FCC_FWD_MMA: return fcc_fwd_mma_run(p);
    default: return fcc_fwd_generic_run(p);
    }
}

flashc_status fcc_attn_bwd(const fc_attn *a) {
    fcc_attn p;
    FCC_TRY(fcc_attn_make(a, true, &p));
    if (a->B == 0) return fcc_bwd_dsinks_run(p, nullptr, nullptr); /* empty batch: dsinks = 0 (a sum over no rows) */
    if (fc_attn_is_ragged(a)) FCC_TRY(fcc_bwd_ragged_gaps_run(p)); /* zeros outside every sequence */
    switch (fcc_plan_bwd(p, fc_knob_cuda_kernel())) {
    case FCC_BWD_WGMMA: return fcc_bwd_wgmma_run(p);
    case FCC_BWD_MMA: return fcc_bwd_mma_run(p);
    default: return fcc_bwd_generic_run(p);
    }
}
