#!/usr/bin/env python3
"""Per-kernel GPU time of one flashc forward+backward (torch.profiler), for the
shapes given as D:S[:causal[:nondet[:W[:Hkv[:Hq[:softcap[:sinks]]]]]]]] (16k tokens, width
2048, bf16; nondet = 1: the unordered dQ, deterministic=False; W > 0: causal sliding
window of W keys, window=(W - 1, 0); Hkv: GQA; Hq: other than 2048 / D;
softcap > 0: that softcap; sinks = 1: a sink logit per head, with its gradient), e.g.
    python3 benchmarks/prof_bwd_kernels.py 128:4096 64:4096 128:4096:1 256:4096:0:1
    python3 benchmarks/prof_bwd_kernels.py 128:16384:1:0:1024:8:32   # issue 8's SWA row
    python3 benchmarks/prof_bwd_kernels.py 128:4096:0:0:0:16:16:30   # softcap 30
    python3 benchmarks/prof_bwd_kernels.py 64:8192:1:0:128:8:64:0:1  # GPT-OSS-like
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
        W = int(parts[4]) if len(parts) > 4 else 0
        B, H = 16384 // S, int(parts[6]) if len(parts) > 6 else 2048 // D
        Hkv = int(parts[5]) if len(parts) > 5 else H
        kw = dict(causal=True, window=(W - 1, 0)) if W > 0 else dict(causal=causal)
        if len(parts) > 7 and float(parts[7]) > 0:
            kw["softcap"] = float(parts[7])
        if len(parts) > 8 and parts[8] == "1":
            kw["sinks"] = torch.randn(H, device="cuda", dtype=torch.float32, requires_grad=True)
        q = torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k, v = (torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                for _ in range(2))
        do = torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16)
        def step():  # grads set to None first: no accumulation kernel of torch's in the figures
            q.grad = k.grad = v.grad = None
            ft.attention(q, k, v, deterministic=det, **kw).backward(do)
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        n = 5
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                step()
            torch.cuda.synchronize()
        i = torch.arange(S, dtype=torch.float64)
        pairs = float(torch.clamp(i + 1, max=W).sum()) if W > 0 else S * S * (0.5 if causal else 1.0)
        flops = 4.0 * B * H * pairs * D
        print("D=%d S=%d causal=%d det=%d W=%d Hkv=%d softcap=%g  (fwd %.3g GFLOP of visible pairs)"
              % (D, S, causal, det, W, Hkv, kw.get("softcap", 0.0), flops / 1e9))
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
