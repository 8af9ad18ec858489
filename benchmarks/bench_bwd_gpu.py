#!/usr/bin/env python3
"""Forward+backward TFLOP/s of flashc next to its peers, in one process: the
rows of issue 8 (training shapes, bf16, 16k tokens: B = 16384 / S).

    python3 benchmarks/bench_bwd_gpu.py [--reps N] [--json PATH] [--only TEXT]...

flashc is called as a user calls it: flashc.torch.attention with autograd
(deterministic backward, the default). Peers: torch SDPA under
sdpa_kernel(FLASH_ATTENTION) (FlashAttention-2) and sdpa_kernel(CUDNN_ATTENTION),
with enable_gqa for grouped heads (n/a where a backend refuses the shape).
FLOPs (useful work): forward 4·B·Hq·S²·D (halved when causal), forward+backward
3.5 × forward. Timing: CUDA events around out = f(q, k, v); out.backward(do),
median of --reps after warm-up; fresh random inputs.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import flashc.torch as ft  # noqa: E402

# name, D, S, Hq, Hkv, causal
ROWS = [
    ("D=128 S=1k", 128, 1024, 16, 16, False),
    ("D=128 S=4k", 128, 4096, 16, 16, False),
    ("D=128 S=4k causal", 128, 4096, 16, 16, True),
    ("D=128 S=16k", 128, 16384, 16, 16, False),
    ("D=64 S=4k", 64, 4096, 32, 32, False),
    ("D=64 S=4k causal", 64, 4096, 32, 32, True),
    ("GQA 32/8 D=128 S=8k causal", 128, 8192, 32, 8, True),
    ("D=96 S=4k causal", 96, 4096, 21, 21, True),
    ("D=96 S=4k", 96, 4096, 21, 21, False),
    ("D=80 S=4k", 80, 4096, 25, 25, False),
    ("D=192 S=4k causal", 192, 4096, 10, 10, True),
    ("D=192 S=4k", 192, 4096, 10, 10, False),
    ("D=256 S=4k causal", 256, 4096, 8, 8, True),
    ("D=256 S=4k", 256, 4096, 8, 8, False),
]


def timed(fn, reps):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--json")
    ap.add_argument("--only", action="append", default=[],
                    help="run the rows whose name contains this text (repeatable)")
    args = ap.parse_args()
    torch.manual_seed(0)
    print("device: %s, torch %s" % (torch.cuda.get_device_name(), torch.__version__), flush=True)
    out = []
    for name, D, S, Hq, Hkv, causal in ROWS:
        if args.only and not any(o in name for o in args.only):
            continue
        B = 16384 // S
        dt = torch.bfloat16
        q = torch.randn(B, S, Hq, D, device="cuda", dtype=dt, requires_grad=True)
        k = torch.randn(B, S, Hkv, D, device="cuda", dtype=dt, requires_grad=True)
        v = torch.randn(B, S, Hkv, D, device="cuda", dtype=dt, requires_grad=True)
        do = torch.randn(B, S, Hq, D, device="cuda", dtype=dt)
        flops = 3.5 * 4.0 * B * Hq * S * S * D * (0.5 if causal else 1.0)

        def run_flashc():
            q.grad = k.grad = v.grad = None
            ft.attention(q, k, v, causal=causal).backward(do)

        qt, kt, vt = (x.detach().transpose(1, 2).contiguous().requires_grad_() for x in (q, k, v))
        dot = do.transpose(1, 2).contiguous()

        def sdpa(backend):
            def f():
                qt.grad = kt.grad = vt.grad = None
                with sdpa_kernel(backend):
                    o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=Hq != Hkv)
                o.backward(dot)
            return f

        row = {"name": name, "B": B, "S": S, "D": D, "Hq": Hq, "Hkv": Hkv, "causal": causal}
        for label, fn in (("flashc", run_flashc), ("fa2", sdpa(SDPBackend.FLASH_ATTENTION)),
                          ("cudnn", sdpa(SDPBackend.CUDNN_ATTENTION))):
            try:
                ms = timed(fn, args.reps)
                row[label] = flops / ms / 1e9
            except Exception as e:  # a backend that refuses the shape
                row[label] = None
                row[label + "_why"] = str(e).splitlines()[0][:80] if str(e) else type(e).__name__
        out.append(row)

        def f(x):
            return "%6.1f" % row[x] if row[x] is not None else "   n/a"
        ratio = lambda a, b: ("%.2f" % (row[a] / row[b])) if row[a] and row[b] else "n/a"
        print("%-28s flashc %s  fa2 %s  cudnn %s  | flashc/cudnn %s  flashc/fa2 %s" % (
            name, f("flashc"), f("fa2"), f("cudnn"), ratio("flashc", "cudnn"), ratio("flashc", "fa2")),
            flush=True)
        del q, k, v, do, qt, kt, vt, dot
        torch.cuda.empty_cache()
    if args.json:
        write_json(args.json, out)


def write_json(path, rows):
    """The rows with the device and torch version (shared by bench_flex_gpu.py)."""
    with open(path, "w") as fh:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, fh,
                  indent=1)


if __name__ == "__main__":
    main()
