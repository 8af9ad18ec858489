#!/usr/bin/env python3
"""Launch shapes of the decode kernels, flashc's and SDPA cuDNN's (bf16, Hq
32, Hkv 8, D 128, one query token): grid, block, shared memory and
registers of every kernel a call runs, from a torch.profiler trace, so that
a difference in rate can be read against how each lays out its CTAs.

    python3 benchmarks/prof_decode_grid.py [B:Sk ...]
"""
import json
import os
import sys
import tempfile

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import flashc.torch as ft  # noqa: E402


def shapes(fn):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    path = os.path.join(tempfile.mkdtemp(), "t.json")
    prof.export_chrome_trace(path)
    out = []
    for e in json.load(open(path))["traceEvents"]:
        if e.get("cat") == "kernel":
            a = e.get("args", {})
            out.append("%7.1f us grid %-14s block %-12s smem %6s regs %4s  %s" % (
                e.get("dur", 0), a.get("grid"), a.get("block"), a.get("shared memory"),
                a.get("registers per thread"), e.get("name", "")[:70]))
    return out


def main():
    for spec in sys.argv[1:] or ["16:8192", "32:8192", "4:65536"]:
        B, Sk = (int(x) for x in spec.split(":"))
        q = torch.randn(B, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(B, Sk, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))

        def sdpa():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                      enable_gqa=True)
        with torch.no_grad():
            for name, fn in (("flashc", lambda: ft.attention(q, k, v)), ("cudnn", sdpa)):
                print("B=%d Sk=%d %s" % (B, Sk, name), flush=True)
                for line in shapes(fn):
                    print("   ", line, flush=True)


if __name__ == "__main__":
    main()
