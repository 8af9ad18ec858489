#!/usr/bin/env python3
"""Serving shapes (issue 9): decode against a KV cache, chunked prefill and
packed variable-length prefill, flashc next to the peers a serving engineer
would use instead, measured in the same run.

    python3 benchmarks/bench_serving.py [--gpu] [--cpu] [--quick] [--threads N] [--cpu-dtype all|f32|bf16] [--json PATH]

GPU (torch CUDA tensors, bf16, Hq = 32, Hkv = 8, D = 128):
  decode   one query token per sequence against Sk cached keys per sequence:
           flashc.torch.attention (dense [B, 1, Hq, D] q, [B, Sk, Hkv, D] K/V),
           flashc.torch.attention_with_kvcache on a contiguous cache with one
           appended token, and on a paged cache (page_size 16, shuffled pages),
           next to torch SDPA under the FlashAttention-2 and cuDNN backends
           (GQA through enable_gqa). µs and GB/s, bytes = K + V of the visible
           keys + q + o, next to a device-to-device copy measured in the run.
  varlen   a batch of prompts of mixed lengths, causal: flashc.torch.attention_varlen
           (packed, forward and forward+backward) next to SDPA on the batch padded
           to the longest prompt (what a user without varlen does). TFLOP/s of the
           useful work (Σ_b 2·Hq·D·S_b², causal) for both.
CPU (torch CPU tensors, same thread count for both; fp32 and bf16, Hq = 32,
Hkv = 8, D = 128): decode (1 token) and chunks of 4, 16 and 64 query tokens
(speculative decoding, chunked prefill) against a cache of Sk keys per
sequence (B = 1 and 4, Sk = 4k and 16k), flashc.torch.attention_with_kvcache
on the contiguous cache and on a paged one (page_size 16, shuffled pages)
next to torch's CPU SDPA on the contiguous cache (the chunk attends to every
cached key in all three).

Timing: GPU CUDA events around each call, median of >= 20 repeats after
warm-up; CPU perf_counter median. Inputs: fresh random values, never zeros.
"""
import argparse
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", action="store_true", help="GPU rows only (default: both when available)")
    ap.add_argument("--cpu", action="store_true", help="CPU rows only")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cpu-dtype", choices=("all", "f32", "bf16"), default="all", help="CPU rows of this dtype")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--json")
    return ap.parse_args()


def cpu_bench(fn, reps):
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    ts.sort()
    return ts[len(ts) // 2] * 1e3


def try_ms(fn):
    try:
        return fn()
    except Exception as e:  # a peer that does not take the shape
        print("   (peer failed: %s)" % str(e).splitlines()[0][:120])
        return float("nan")


def paged_kv(torch, k, v, page, gen):
    """k, v [B, S, H, D] -> pages [B*npb + 3, page, H, D] each, in shuffled order, and the block table."""
    B, S, H, D = k.shape
    npb = (S + page - 1) // page
    total = B * npb + 3
    table = torch.randperm(total, generator=gen)[: B * npb].to(torch.int32).view(B, npb).to(k.device)
    out = []
    for x in (k, v):
        pages = torch.randn(total, page, H, D, generator=gen).to(x.dtype).to(x.device)
        xp = torch.nn.functional.pad(x, (0, 0, 0, 0, 0, npb * page - S)).reshape(B * npb, page, H, D)
        pages[table.long().view(-1)] = xp
        out.append(pages)
    return out[0], out[1], table


# ------------------------------------------------------------------------ GPU


def gpu_rows(quick, reps):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import flashc.torch as ft
    sys.path.insert(0, HERE)
    from bench_gpu import bench  # the shared CUDA-event timer (median of reps after warm-up)

    dev = "cuda"
    dt = torch.bfloat16
    g = torch.Generator().manual_seed(0)
    rows = []
    # device copy bandwidth (read + write bytes / time)
    x = torch.empty(1 << 29, dtype=torch.uint8, device=dev)
    y = torch.empty_like(x)
    copy_ms = bench(lambda: y.copy_(x), reps)
    copy_gbs = 2 * x.numel() / (copy_ms * 1e-3) / 1e9
    del x, y
    print("GPU: %s, device copy %.0f GB/s" % (torch.cuda.get_device_name(), copy_gbs))
    Hq, Hkv, D = 32, 8, 128
    shapes = [(1, 8192), (16, 8192), (64, 4096), (4, 65536)]
    if quick:
        shapes = shapes[:2]
    print("%-22s %10s %10s %10s %10s %10s %10s" % ("decode bf16", "dense us", "cache us", "paged us",
                                                     "FA2 us", "cuDNN us", "flashc GB/s"))
    for B, Sk in shapes:
        q = torch.randn(B, 1, Hq, D, generator=g).to(dt).to(dev)
        k = torch.randn(B, Sk, Hkv, D, generator=g).to(dt).to(dev)
        v = torch.randn(B, Sk, Hkv, D, generator=g).to(dt).to(dev)
        nbytes = 2 * B * Sk * Hkv * D * 2 + 2 * B * Hq * D * 2
        dense = bench(lambda: ft.attention(q, k, v), reps)
        # cache of capacity Sk holding Sk - 1 tokens; the call appends one
        kc, vc = k.clone(), v.clone()
        kn, vn = k[:, -1:].clone(), v[:, -1:].clone()
        seqlens = torch.full((B,), Sk - 1, dtype=torch.int32, device=dev)
        cache = bench(lambda: ft.attention_with_kvcache(q, kc, vc, kn, vn, cache_seqlens=seqlens), reps)
        kp, vp, table = paged_kv(torch, k, v, 16, g)
        full = torch.full((B,), Sk, dtype=torch.int32, device=dev)
        pag = bench(lambda: ft.attention_with_kvcache(q, kp, vp, cache_seqlens=full, block_table=table),
                        reps)
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

        def sdpa(backend):
            # The backend context outside the timed call (inside, it costs ~19 µs
            # a call: benchmarks/NOTES.md, fifteenth session), as bench_decode_gpu.py.
            with sdpa_kernel(backend):
                return bench(lambda: F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True), reps)

        fa2 = try_ms(lambda: sdpa(SDPBackend.FLASH_ATTENTION))
        cud = try_ms(lambda: sdpa(SDPBackend.CUDNN_ATTENTION))
        gbs = nbytes / (min(dense, cache) * 1e-3) / 1e9
        name = "B=%d Sk=%dk" % (B, Sk // 1024)
        print("%-22s %10.1f %10.1f %10.1f %10.1f %10.1f %10.0f" % (name, dense * 1e3, cache * 1e3, pag * 1e3,
                                                                   fa2 * 1e3, cud * 1e3, gbs))
        rows.append(dict(kind="decode", device="gpu", B=B, Sk=Sk, Hq=Hq, Hkv=Hkv, D=D, dtype="bf16",
                         dense_us=dense * 1e3, cache_us=cache * 1e3, paged_us=pag * 1e3, fa2_us=fa2 * 1e3,
                         cudnn_us=cud * 1e3, bytes=nbytes, copy_gbs=copy_gbs,
                         dense_gbs=nbytes / (dense * 1e-3) / 1e9, cache_gbs=nbytes / (cache * 1e-3) / 1e9,
                         paged_gbs=nbytes / (pag * 1e-3) / 1e9, cudnn_gbs=nbytes / (cud * 1e-3) / 1e9))
        del q, k, v, kc, vc, kp, vp

    # varlen prefill: mixed prompt lengths, causal, Hq = Hkv = 16, D = 128
    H = 16
    lens = [4096, 3000, 2048, 1800, 1024, 1024, 900, 700, 512, 400, 300, 200, 128, 100, 64, 17]
    if quick:
        lens = lens[::2]
    B, T, Smax = len(lens), sum(lens), max(lens)
    cu = torch.tensor([0] + list(__import__("itertools").accumulate(lens)), dtype=torch.int32, device=dev)
    q = torch.randn(T, H, D, generator=g).to(dt).to(dev).requires_grad_()
    k = torch.randn(T, H, D, generator=g).to(dt).to(dev).requires_grad_()
    v = torch.randn(T, H, D, generator=g).to(dt).to(dev).requires_grad_()
    do = torch.randn(T, H, D, generator=g).to(dt).to(dev)
    flops = sum(2 * H * D * s * s for s in lens)  # causal: half of 4·H·D·S²
    # padded: [B, H, Smax, D]
    qp, kp, vp = (torch.zeros(B, H, Smax, D, dtype=dt, device=dev) for _ in range(3))
    for b, s in enumerate(lens):
        o0 = int(cu[b])
        qp[b, :, :s] = q.detach()[o0:o0 + s].transpose(0, 1)
        kp[b, :, :s] = k.detach()[o0:o0 + s].transpose(0, 1)
        vp[b, :, :s] = v.detach()[o0:o0 + s].transpose(0, 1)
    qp.requires_grad_(); kp.requires_grad_(); vp.requires_grad_()
    dop = torch.randn_like(qp)

    def fl_f():
        with torch.no_grad():
            return ft.attention_varlen(q, k, v, cu, cu, Smax, Smax, causal=True)

    def fl_fb():
        o = ft.attention_varlen(q, k, v, cu, cu, Smax, Smax, causal=True)
        o.backward(do)

    def pad(backend, bwd):
        def f():
            if bwd:
                F.scaled_dot_product_attention(qp, kp, vp, is_causal=True).backward(dop)
            else:
                with torch.no_grad():
                    F.scaled_dot_product_attention(qp, kp, vp, is_causal=True)
        with sdpa_kernel(backend):  # (outside the timed call)
            return bench(f, reps)

    res = {}
    res["flashc_f"] = bench(fl_f, reps)
    res["flashc_fb"] = bench(fl_fb, reps)
    for nm, be in (("fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        res[nm + "_f"] = try_ms(lambda: pad(be, False))
        res[nm + "_fb"] = try_ms(lambda: pad(be, True))
    print("varlen prefill, %d prompts %d..%d tokens (T=%d), H=%d D=%d causal bf16 — useful TFLOP/s:"
          % (B, min(lens), Smax, T, H, D))
    for pas, mul in (("f", 1.0), ("fb", 3.5)):
        print("  %-3s flashc varlen %6.1f (%7.2f ms)   padded SDPA FA2 %6.1f   padded cuDNN %6.1f" % (
            pas, mul * flops / (res["flashc_" + pas] * 1e-3) / 1e12, res["flashc_" + pas],
            mul * flops / (res["fa2_" + pas] * 1e-3) / 1e12, mul * flops / (res["cudnn_" + pas] * 1e-3) / 1e12))
    rows.append(dict(kind="varlen", device="gpu", lens=lens, H=H, D=D, dtype="bf16", causal=True,
                     flops_fwd=flops, **{k_ + "_ms": v_ for k_, v_ in res.items()}))
    return rows


# ------------------------------------------------------------------------ CPU


def cpu_rows(quick, threads, reps, which="all"):
    os.environ["OMP_NUM_THREADS"] = str(threads)
    import torch
    import torch.nn.functional as F
    import flashc
    import flashc.torch as ft

    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(1)
    rows = []
    Hq, Hkv, D = 32, 8, 128
    print("CPU: %d threads, isa=%s %s" % (threads, flashc.cpu_isa(), flashc.cpu_features()))
    print("%-28s %10s %10s %10s %7s" % ("cache attention", "flashc ms", "paged ms", "torch ms", "ratio"))
    shapes = [(B, Sk, Sn) for Sn in (1, 4, 16, 64) for B in (1, 4) for Sk in (4096, 16384)]
    if quick:
        shapes = [(1, 4096, 1), (1, 4096, 16)]
    dts = {"all": (torch.float32, torch.bfloat16), "f32": (torch.float32,), "bf16": (torch.bfloat16,)}[which]
    for dt in dts:
        for B, Sk, Sn in shapes:
            q = torch.randn(B, Sn, Hq, D, generator=g).to(dt)
            k = torch.randn(B, Sk, Hkv, D, generator=g).to(dt)
            v = torch.randn(B, Sk, Hkv, D, generator=g).to(dt)
            seqlens = torch.full((B,), Sk, dtype=torch.int32)
            n = reps if B * Sk * max(Sn, 4) <= 4 * 4096 * 16 else max(3, reps // 2)
            fl = cpu_bench(lambda: ft.attention_with_kvcache(q, k, v, cache_seqlens=seqlens), n)
            kp, vp, table = paged_kv(torch, k, v, 16, g)
            pg = cpu_bench(lambda: ft.attention_with_kvcache(q, kp, vp, cache_seqlens=seqlens, block_table=table), n)
            del kp, vp
            qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            th = try_ms(lambda: cpu_bench(lambda: F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True), n))
            name = "%s B=%d Sk=%dk Sn=%d" % ("f32" if dt == torch.float32 else "bf16", B, Sk // 1024, Sn)
            print("%-28s %10.3f %10.3f %10.3f %6.2fx" % (name, fl, pg, th, th / fl), flush=True)
            rows.append(dict(kind="cache", device="cpu", threads=threads, dtype=str(dt).split(".")[1], B=B, Sk=Sk,
                             Sn=Sn, Hq=Hq, Hkv=Hkv, D=D, flashc_ms=fl, paged_ms=pg, torch_ms=th))
    return rows


def main():
    a = parse_args()
    rows = []
    want_gpu = a.gpu or not a.cpu
    want_cpu = a.cpu or not a.gpu
    if want_gpu:
        try:
            import torch
            ok = torch.cuda.is_available()
        except ImportError:
            ok = False
        if ok:
            rows += gpu_rows(a.quick, a.reps)
        else:
            print("GPU rows skipped: no torch CUDA")
    if want_cpu:
        rows += cpu_rows(a.quick, a.threads, max(3, a.reps // 6), a.cpu_dtype)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
