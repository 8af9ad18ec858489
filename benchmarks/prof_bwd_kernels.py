#!/usr/bin/env python3
"""Per-kernel GPU time of one flashc forward+backward (torch.profiler), for the
shapes given as D:S[:causal[:nondet]] (16k tokens, width 2048, bf16; nondet =
1: the unordered dQ, deterministic=False), e.g.
    python3 benchmarks/prof_bwd_kernels.py 128:4096 64:4096 128:4096:1 256:4096:0:1
Prints each kernel's mean time per call; needs torch with CUDA."""
import sys
import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__file__), "..", "python"))
import flashc.torch as ft  # noqa: E402


def main():
    for spec in sys.argv[1:] or ["128:4096", "64:4096"]:
        parts = spec.split(":")
        D, S = int(parts[0]), int(parts[1])
        causal = len(parts) > 2 and parts[2] == "1"
        det = not (len(parts) > 3 and parts[3] == "1")
        B, H = 16384 // S, 2048 // D
        q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        do = torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16)
        for _ in range(3):
            ft.attention(q, k, v, causal=causal, deterministic=det).backward(do)
        torch.cuda.synchronize()
        n = 5
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                ft.attention(q, k, v, causal=causal, deterministic=det).backward(do)
            torch.cuda.synchronize()
        flops = 4.0 * B * H * S * S * D * (0.5 if causal else 1.0)
        print("D=%d S=%d causal=%d det=%d  (fwd %.3g GFLOP)" % (D, S, causal, det, flops / 1e9))
        tot = 0.0
        for e in sorted(prof.key_averages(), key=lambda e: -e.device_time_total):
            if e.device_time_total <= 0:
                continue
            us = e.device_time_total / n
            tot += us
            print("  %9.1f us  %s" % (us, e.key[:110]))
        print("  %9.1f us  total; fwd+bwd %.1f TFLOP/s (kernels only)" % (tot, 3.5 * flops / tot / 1e6))


if __name__ == "__main__":
    main()
