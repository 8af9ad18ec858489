#!/usr/bin/env python3
"""Chunked prefill against a KV cache on the GPU (issue 9): a chunk of Sn new
tokens a sequence appended to a cache already holding L tokens, and attended
causally (bottom-right) against all L + Sn keys, through
flashc.torch.attention_with_kvcache as a server calls it — contiguous cache,
and paged caches of several page sizes (shuffled pages, and each sequence's
pages consecutive in the pool as a fresh allocation gives). Beside it, in the
same process: the same call on the mma.sync kernels (FLASHC_CUDA_KERNEL=mma,
the path ragged problems took before the wgmma forward ran them), flashc's
dense forward of the same [B, Sn] × [B, L + Sn] problem (no cache: the
ceiling), and SDPA cuDNN on that dense problem with an explicit bottom-right
causal mask where it accepts one.

    python3 benchmarks/bench_prefill_cache.py [--B 4] [--Sn 1024] [--L 3072] [--json F]

Useful TFLOP/s: 4·Hq·D·(visible query-key pairs). bf16, Hq 32, Hkv 8, D 128.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import flashc.torch as ft  # noqa: E402
from bench_bwd_gpu import timed  # noqa: E402  (CUDA events, median, ms)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--B", type=int, default=4)
    ap.add_argument("--Sn", type=int, default=1024)
    ap.add_argument("--L", type=int, default=3072)
    ap.add_argument("--pages", default="16,64,256")
    ap.add_argument("--order", default="shuffled,inorder",
                    help="page orders: shuffled (random block tables), inorder (each sequence's pages consecutive)")
    ap.add_argument("--json")
    args = ap.parse_args()
    B, Sn, L, Hq, Hkv, D = args.B, args.Sn, args.L, 32, 8, 128
    Sk = L + Sn
    dt, dev = torch.bfloat16, "cuda"
    g = torch.Generator(device=dev).manual_seed(0)
    q = torch.randn(B, Sn, Hq, D, device=dev, dtype=dt, generator=g)
    kn, vn = (torch.randn(B, Sn, Hkv, D, device=dev, dtype=dt, generator=g) for _ in range(2))
    kd, vd = (torch.randn(B, Sk, Hkv, D, device=dev, dtype=dt, generator=g) for _ in range(2))
    lens = torch.full((B,), L, dtype=torch.int32, device=dev)
    pairs = B * (Sn * L + Sn * (Sn + 1) // 2)
    tf = lambda ms: 4.0 * Hq * D * pairs / (ms * 1e-3) / 1e12  # noqa: E731
    rows = {}

    def run(name, fn):
        try:
            ms = timed(fn, 30)
            rows[name] = {"ms": ms, "tflops": tf(ms)}
        except Exception as e:  # a peer that refuses the shape
            rows[name] = {"error": str(e).splitlines()[0][:120]}

    with torch.no_grad():
        # contiguous cache: the append rewrites positions L .. L+Sn-1 each call (same values)
        kc, vc = kd.clone(), vd.clone()
        cont = lambda: ft.attention_with_kvcache(q, kc, vc, kn, vn, cache_seqlens=lens, causal=True)  # noqa: E731
        run("flashc contiguous", cont)
        for ps in (int(x) for x in args.pages.split(",")):
            npg = (Sk + ps - 1) // ps
            kp, vp = (torch.zeros(B * npg, ps, Hkv, D, device=dev, dtype=dt) for _ in range(2))
            for order in args.order.split(","):
                perm = (torch.randperm(B * npg, generator=torch.Generator().manual_seed(ps)) if order == "shuffled"
                        else torch.arange(B * npg)).to(dev)
                table = perm.view(B, npg).to(torch.int32)
                run("flashc paged %d%s" % (ps, "" if order == "shuffled" else ", in order"),
                    lambda kp=kp, vp=vp, table=table: ft.attention_with_kvcache(
                        q, kp, vp, kn, vn, cache_seqlens=lens, block_table=table, causal=True))
        os.environ["FLASHC_CUDA_KERNEL"] = "mma"
        run("flashc contiguous, mma.sync", cont)
        del os.environ["FLASHC_CUDA_KERNEL"]
        run("flashc dense forward (no cache)", lambda: ft.attention(q, kd, vd, causal=True))
        qt, kt, vt = (x.transpose(1, 2) for x in (q, kd, vd))
        mask = torch.ones(Sn, Sk, dtype=torch.bool, device=dev).tril(diagonal=L)  # bottom-right causal
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            run("SDPA cuDNN dense, bool mask", lambda: F.scaled_dot_product_attention(
                qt, kt, vt, attn_mask=mask, enable_gqa=True))
        with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
            run("SDPA mem-efficient dense, bool mask", lambda: F.scaled_dot_product_attention(
                qt, kt, vt, attn_mask=mask, enable_gqa=True))
    print("chunked prefill: B=%d, %d new tokens after %d cached, Hq %d Hkv %d D %d causal bf16 (%s)" % (
        B, Sn, L, Hq, Hkv, D, torch.cuda.get_device_name()))
    for name, r in rows.items():
        if "error" in r:
            print("  %-38s  refused: %s" % (name, r["error"]))
        else:
            print("  %-38s %8.3f ms  %6.1f TFLOP/s" % (name, r["ms"], r["tflops"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"B": B, "Sn": Sn, "L": L, "Hq": Hq, "Hkv": Hkv, "D": D, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
