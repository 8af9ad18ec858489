#!/usr/bin/env python3
"""GPU time of the decode steps (issue 9) for the CUDA module in
FLASHC_CUDA_MODULE, SDPA cuDNN's beside it: torch.profiler over N calls of
flashc.torch.attention and of SDPA (bf16, Hq 32, Hkv 8, D 128, one query
token unless B:Sk:Sq says otherwise): the call's GPU span (first kernel
start to last kernel end, each call on an idle GPU: prof_decode_trace.py),
the main kernel's µs and its read rate (K + V bytes / its time). (Summed
kernel durations would overcount: flashc's combine kernel is launched as a
programmatic dependent and its duration includes its wait.)

    python3 benchmarks/prof_decode_kernels.py [B:Sk[:Sq] ...] [--no-cudnn] [--kvcache]

--kvcache: every kernel of the dense call, of attention_with_kvcache on a
contiguous cache appending the last token, and on a paged cache (page 16,
shuffled pages), as bench_serving.py calls them.
--paged: the paged decode kernel's µs and read rate for page sizes 16..256,
pages in order and shuffled, beside the dense kernel (what bounds it:
box size vs the scattered pages).

Kernel times only (no host cost: prof_call_decode.py splits that out).
"""
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import flashc.torch as ft  # noqa: E402
from prof_call_decode import kernels  # noqa: E402  (µs per call of each kernel, torch.profiler)
from prof_decode_trace import gpu_span  # noqa: E402  (one call's first kernel start to last end)


def kvcache_rows(B, Sk, Sq):
    from bench_serving import paged_kv
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, Sq, 32, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Sk, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    kc, vc = k.clone(), v.clone()
    kn, vn = k[:, -Sq:].clone(), v[:, -Sq:].clone()
    lens = torch.full((B,), Sk - Sq, dtype=torch.int32, device="cuda")
    full = torch.full((B,), Sk, dtype=torch.int32, device="cuda")
    kp, vp, table = paged_kv(torch, k, v, 16, g)
    runs = [("dense", lambda: ft.attention(q, k, v)),
            ("cache", lambda: ft.attention_with_kvcache(q, kc, vc, kn, vn, cache_seqlens=lens)),
            ("paged", lambda: ft.attention_with_kvcache(q, kp, vp, cache_seqlens=full, block_table=table))]
    with torch.no_grad():
        for name, fn in runs:
            print("B=%-3d Sk=%-6d Sq=%-2d %s: span %7.1f us" % (B, Sk, Sq, name, gpu_span(fn)), flush=True)
            for us, key in kernels(fn):
                print("    %8.1f us  %s" % (us, key), flush=True)


def paged_rows(B, Sk):
    """The paged decode kernel beside the dense one; pages the tile does not
    divide (16, 48, 80) also on the cp.async kernel (FLASHC_CUDA_KERNEL=mma,
    read at every call) in the same process. Sk is cut to whole pages."""
    q = torch.randn(B, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Sk, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))

    def main_us(fn):
        ks = sorted((e for e in kernels(fn) if "combine" not in e[1]), key=lambda e: -e[0])
        return ks[0][0]

    def row(what, page, us, nbytes):
        print("B=%-3d Sk=%-6d %-8s %-22s %7.1f us  %.2f TB/s" % (B, Sk, page, what, us, nbytes / us / 1e6),
              flush=True)

    with torch.no_grad():
        row("dense", "", main_us(lambda: ft.attention(q, k, v)), 2 * k.numel() * k.element_size())
        for page in (16, 32, 48, 64, 80, 256):
            npb = Sk // page
            Skp = npb * page
            nbytes = 2 * B * Skp * 8 * 128 * k.element_size()
            full = torch.full((B,), Skp, dtype=torch.int32, device="cuda")
            for shuffled in (False, True):
                order = torch.randperm(B * npb, device="cuda") if shuffled else torch.arange(B * npb, device="cuda")
                table = order.view(B, npb).to(torch.int32)
                kp, vp = (torch.empty(B * npb, page, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
                kp[order] = k[:, :Skp].reshape(B * npb, page, 8, 128)
                vp[order] = v[:, :Skp].reshape(B * npb, page, 8, 128)
                fn = lambda: ft.attention_with_kvcache(q, kp, vp, cache_seqlens=full, block_table=table)  # noqa: E731
                order_s = "shuffled" if shuffled else "in order"
                row(order_s, "page %d" % page, main_us(fn), nbytes)
                if page % 32:
                    os.environ["FLASHC_CUDA_KERNEL"] = "mma"
                    try:
                        row(order_s + " cp.async", "page %d" % page, main_us(fn), nbytes)
                    finally:
                        del os.environ["FLASHC_CUDA_KERNEL"]


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    cudnn = "--no-cudnn" not in sys.argv
    if "--paged" in sys.argv:
        for spec in args or ["16:8192", "4:65536"]:
            f = [int(x) for x in spec.split(":")]
            paged_rows(f[0], f[1])
        return
    if "--kvcache" in sys.argv:
        for spec in args or ["1:8192", "16:8192"]:
            f = [int(x) for x in spec.split(":")]
            kvcache_rows(f[0], f[1], f[2] if len(f) > 2 else 1)
        return
    for spec in args or ["1:8192", "16:8192", "64:4096", "4:65536"]:
        f = [int(x) for x in spec.split(":")]
        B, Sk, Sq = f[0], f[1], (f[2] if len(f) > 2 else 1)
        q = torch.randn(B, Sq, 32, 128, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(B, Sk, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        kv_bytes = 2 * k.numel() * k.element_size()
        runs = [("flashc", lambda: ft.attention(q, k, v))]
        if cudnn:
            def sdpa():
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                          enable_gqa=True)
            runs.append(("cudnn", sdpa))
        line = "B=%-3d Sk=%-6d Sq=%-2d" % (B, Sk, Sq)
        with torch.no_grad():
            for name, fn in runs:
                ks = sorted((e for e in kernels(fn) if not any(w in e[1] for w in ("combine", "reduction"))),
                            key=lambda e: -e[0])
                main_us = ks[0][0] if ks else float("nan")
                line += " | %s %7.1f us (main %7.1f, %.2f TB/s)" % (name, gpu_span(fn), main_us,
                                                                      kv_bytes / main_us / 1e6)
        print(line, flush=True)


if __name__ == "__main__":
    main()
