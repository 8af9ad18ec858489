#!/usr/bin/env python3
"""float32 attention on the GPU: flashc next to torch SDPA, measured in the same run.

    python3 benchmarks/bench_f32_gpu.py [--json PATH] [--reps N] [--no-bwd] [--dims 64,128] [--seqs 1024,4096]

Shapes (../shared/PERF.md: 16k tokens, width 2048): S in {1k, 4k}, D in {64, 128} (defaults;
--dims 96,192,256 for the other head dims),
causal and not, float32. flashc through flashc.torch.attention (the entry a user
calls); SDPA with torch's own backend choice for float32 (the memory-efficient
kernel: tensor cores with 3xTF32, i.e. float32 accuracy) — also forced with
sdpa_kernel(EFFICIENT_ATTENTION) so the row says which kernel it is. Accuracy
next to speed: relative L2 error of each against a float64 SDPA (math backend) on
the same inputs (gradients: the largest of dq/dk/dv's, head 0 of batch 0). TFLOP/s: forward 4·B·H·S²·D (halved when causal), backward
2.5× forward. Timing: bench_gpu.bench (CUDA events, median).
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
sys.path.insert(0, HERE)
import bench_gpu  # noqa: E402


def rel(a, b):
    return float((a.double() - b).norm() / b.norm())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--no-bwd", action="store_true")
    ap.add_argument("--dims", default="64,128", help="head dims, comma-separated")
    ap.add_argument("--seqs", default="1024,4096", help="sequence lengths, comma-separated")
    args = ap.parse_args()
    import flashc.torch as ft
    torch.manual_seed(0)
    print("device: %s, torch %s, allow_tf32 (matmul) = %s" % (
        torch.cuda.get_device_name(), torch.__version__, torch.backends.cuda.matmul.allow_tf32), flush=True)
    rows = []
    for D in (int(x) for x in args.dims.split(",")):
        for S in (int(x) for x in args.seqs.split(",")):
            for causal in (False, True):
                B, H = 16384 // S, 2048 // D
                q, k, v = (torch.randn(B, S, H, D, device="cuda") for _ in range(3))
                do = torch.randn(B, S, H, D, device="cuda")
                qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))  # SDPA's [B, H, S, D] views
                flops = 4.0 * B * H * S * S * D / (2 if causal else 1)
                r = {"D": D, "S": S, "causal": causal}
                ref = F.scaled_dot_product_attention(qt[:1].double(), kt[:1].double(), vt[:1].double(),
                                                     is_causal=causal)
                cands = {
                    "flashc": lambda: ft.attention(q, k, v, causal=causal),
                    "sdpa": lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal),
                }
                line = "f32 D=%3d S=%5d %-6s |" % (D, S, "causal" if causal else "")
                for name, fn in cands.items():
                    with torch.no_grad():
                        o = fn()
                        o4 = o if name == "flashc" else o.transpose(1, 2)
                        r[name + "_err"] = rel(o4[:1].transpose(1, 2), ref)
                        ms = bench_gpu.bench(fn, args.reps)
                    r[name + "_fwd"] = flops / (ms * 1e-3) / 1e12
                    line += " fwd %s %6.1f (err %.1e)" % (name, r[name + "_fwd"], r[name + "_err"])
                try:  # the forced kernel may refuse a head dim: say so in the row
                    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION), torch.no_grad():
                        ms = bench_gpu.bench(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal),
                                             args.reps)
                    r["efficient_fwd"] = flops / (ms * 1e-3) / 1e12
                    line += " | efficient %6.1f" % r["efficient_fwd"]
                except RuntimeError:
                    r["efficient_fwd"] = None
                    line += " | efficient  n/a"
                if not args.no_bwd:
                    # float64 gradients of head 0 of batch 0 (SDPA's math backend)
                    q1, k1, v1 = (x[:1, :, :1].double().requires_grad_() for x in (q, k, v))
                    o1 = F.scaled_dot_product_attention(q1.transpose(1, 2), k1.transpose(1, 2), v1.transpose(1, 2),
                                                        is_causal=causal)
                    o1.transpose(1, 2).backward(do[:1, :, :1].double())
                    grad_ref = (q1.grad, k1.grad, v1.grad)
                    for name in ("flashc", "sdpa"):
                        qq, kk, vv = (x.detach().clone().requires_grad_() for x in (q, k, v))

                        def step(name=name, qq=qq, kk=kk, vv=vv):
                            if name == "flashc":
                                o = ft.attention(qq, kk, vv, causal=causal)
                            else:
                                o = F.scaled_dot_product_attention(qq.transpose(1, 2), kk.transpose(1, 2),
                                                                   vv.transpose(1, 2), is_causal=causal)
                                o = o.transpose(1, 2)
                            o.backward(do)
                        ms = bench_gpu.bench(step, max(5, args.reps // 2))
                        r[name + "_fb"] = 3.5 * flops / (ms * 1e-3) / 1e12
                        # gradient error: one fresh call, head 0 of batch 0 against float64
                        for x in (qq, kk, vv):
                            x.grad = None
                        step()
                        r[name + "_gerr"] = max(rel(x.grad[:1, :, :1], gr)
                                                for x, gr in zip((qq, kk, vv), grad_ref))
                    line += " | fwd+bwd flashc %6.1f sdpa %6.1f (grad err %.1e / %.1e)" % (
                        r["flashc_fb"], r["sdpa_fb"], r["flashc_gerr"], r["sdpa_gerr"])
                print(line, flush=True)
                rows.append(r)
                del q, k, v, do, qt, kt, vt
                torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
