#!/usr/bin/env python3
"""The float32 backward alone: flashc (through flashc.torch, autograd) next to
SDPA's float32 kernel, in one process.

    python3 benchmarks/prof_f32_bwd.py [--reps N] [--shapes D:S:causal ...]

Times o.backward(do) on a retained graph (the forward is not in the figure);
TFLOP/s = 2.5 × the forward's 4·B·H·S²·D (halved when causal), 16k tokens and
width 2048 as bench_f32_gpu.py. Environment knobs (FLASHC_CUDA_SMEM_LIMIT,
FLASHC_CUDA_KERNEL) apply to the whole process: run it once per setting to
compare plans.
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
sys.path.insert(0, HERE)
import bench_gpu  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--shapes", nargs="*", default=["64:1024:0", "64:4096:0", "64:4096:1", "128:1024:0",
                                                     "128:4096:0", "128:4096:1"])
    args = ap.parse_args()
    import flashc.torch as ft
    torch.manual_seed(0)
    env = {k: v for k, v in os.environ.items() if k.startswith("FLASHC_CUDA_")}
    print("device: %s, knobs %s" % (torch.cuda.get_device_name(), env or "none"), flush=True)
    for sh in args.shapes:
        D, S, causal = (int(x) for x in sh.split(":"))
        causal = bool(causal)
        B, H = 16384 // S, 2048 // D
        q, k, v, do = (torch.randn(B, S, H, D, device="cuda") for _ in range(4))
        flops = 2.5 * 4.0 * B * H * S * S * D / (2 if causal else 1)
        line = "bwd f32 D=%3d S=%5d %-6s |" % (D, S, "causal" if causal else "")
        for name in ("flashc", "sdpa"):
            qq, kk, vv = (x.clone().requires_grad_() for x in (q, k, v))
            if name == "flashc":
                o = ft.attention(qq, kk, vv, causal=causal)
            else:
                o = F.scaled_dot_product_attention(qq.transpose(1, 2), kk.transpose(1, 2), vv.transpose(1, 2),
                                                   is_causal=causal).transpose(1, 2)
            ms = bench_gpu.bench(lambda: o.backward(do, retain_graph=True), args.reps)
            line += " %s %7.3f ms %6.1f TFLOP/s" % (name, ms, flops / (ms * 1e-3) / 1e12)
            del o, qq, kk, vv
        print(line, flush=True)
        del q, k, v, do
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
