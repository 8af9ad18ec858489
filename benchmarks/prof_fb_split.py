#!/usr/bin/env python3
"""Forward and backward separately (ms, TFLOP/s) for flashc.torch, SDPA FA2
and SDPA cuDNN on the issue-8 rows named on the command line (substring of
the row name in bench_bwd_gpu.ROWS): where a forward+backward gap comes from.

    python3 benchmarks/prof_fb_split.py "D=64 S=4k causal" "D=192 S=4k causal"
"""
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import flashc.torch as ft  # noqa: E402
from bench_bwd_gpu import ROWS, timed  # noqa: E402


def main():
    want = sys.argv[1:] or ["D=64 S=4k causal"]
    for name, D, S, Hq, Hkv, causal in ROWS:
        if not any(w == name for w in want):
            continue
        B = 16384 // S
        flop = 4.0 * B * Hq * S * S * D / (2 if causal else 1)
        mk = lambda h: torch.randn(B, S, h, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        q, k, v = mk(Hq), mk(Hkv), mk(Hkv)
        do = torch.randn(B, S, Hq, D, device="cuda", dtype=torch.bfloat16)
        qt, kt, vt = (x.detach().transpose(1, 2).requires_grad_() for x in (q, k, v))
        dot = do.transpose(1, 2)
        print(name)
        calls = [("flashc", lambda: ft.attention(q, k, v, causal=causal), do)]
        for lab, be in (("FA2", SDPBackend.FLASH_ATTENTION), ("cuDNN", SDPBackend.CUDNN_ATTENTION)):
            def f(be=be):
                with sdpa_kernel(be):
                    return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=Hq != Hkv)
            calls.append((lab, f, dot))
        for lab, f, g in calls:
            try:
                with torch.no_grad():
                    tf = timed(f, 10)
                o = f()
                tb = timed(lambda: torch.autograd.grad(o, (q, k, v) if lab == "flashc" else (qt, kt, vt), g,
                                                       retain_graph=True), 10)
                print("  %-7s fwd %7.3f ms %6.1f TF/s   bwd %7.3f ms %6.1f TF/s   sum %7.3f ms" % (
                    lab, tf, flop / tf / 1e9, tb, 2.5 * flop / tb / 1e9, tf + tb))
            except Exception as e:
                print("  %-7s error %s" % (lab, str(e).splitlines()[0][:100]))


if __name__ == "__main__":
    main()
