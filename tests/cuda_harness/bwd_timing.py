#!/usr/bin/env python3
"""Timings of the tensor-core backward alone (deterministic vs atomic dQ) and
of the generic backward, bf16, PERF.md shapes (16k tokens, width 2048).
    python3 tests/cuda_harness/bwd_timing.py [S ...]
Backward FLOPs = 2.5 x forward (4·B·H·S²·D, halved when causal)."""
import ctypes as ct
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks"))
import bench_gpu as bg  # noqa: E402


def bwd(L, do, q, k, v, o, lse, dq, dk, dv, causal, det, stream):
    p = L.attn_params_default()
    p.backend = L.FLASHC_BACKEND_CUDA
    p.causal = 1 if causal else 0
    p.deterministic = det
    p.stream = stream
    ts = [bg.ftensor(L, x) for x in (do, q, k, v, o, lse, dq, dk, dv)]
    bg.check(L, L.flashc_attn_bwd(*[ct.byref(x) for x in ts], None, ct.byref(p)), "bwd")


def main():
    L, why = bg.load_flashc()
    assert L, why
    stream = torch.cuda.current_stream().cuda_stream
    Ss = [int(x) for x in sys.argv[1:]] or [1024, 4096]
    for D in (64, 128):
        for causal in (False, True):
            for S in Ss:
                B, H = 16384 // S, 2048 // D
                q, k, v, do = (torch.empty(B, S, H, D, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1)
                               for _ in range(4))
                o = torch.empty_like(q)
                lse = torch.empty(B, H, S, device="cuda", dtype=torch.float32)
                bg.flashc_attn(L, q, k, v, o, lse, causal, stream)
                dq, dk, dv = (torch.empty_like(x) for x in (q, k, v))
                fl = 2.5 * 4.0 * B * H * S * S * D / (2 if causal else 1)
                res = {}
                for name, det, gen in (("det", 1, False), ("atomic", 0, False), ("generic", 1, True)):
                    if gen and S > 2048:
                        continue
                    if gen:
                        os.environ["FLASHC_CUDA_KERNEL"] = "generic"
                    ms = bg.bench(lambda: bwd(L, do, q, k, v, o, lse, dq, dk, dv, causal, det, stream), 10, 2)
                    os.environ.pop("FLASHC_CUDA_KERNEL", None)
                    res[name] = bg.tflops(fl, ms)
                print("bwd bf16 D=%3d causal=%d S=%5d | TFLOP/s det %6.1f atomic %6.1f generic %6.1f" % (
                    D, causal, S, res["det"], res["atomic"], res.get("generic", float("nan"))), flush=True)


if __name__ == "__main__":
    main()
