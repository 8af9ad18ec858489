#!/usr/bin/env python3
"""Two versions of flashc's torch layer side by side in one process (issue 9's
per-call rows). A host-path change worth ~1 µs a call is below the spread
between benchmark processes on the GPU host (±5 µs between two runs of the
same code, benchmarks/NOTES.md, twenty-sixth session), so the A/B runs both
versions in one process, their calls interleaved, and reports the paired
difference round by round.

    python3 benchmarks/prof_host_ab.py A.py B.py [B:Sk ...] [--rounds 9] [--n 500] [--cudnn]

A.py and B.py are copies of python/flashc/torch.py (e.g. `git show
HEAD:python/flashc/torch.py > /tmp/a.py`). Both are loaded as submodules of
the one flashc package of this process (same library, same CUDA module, same
registered torch ops), and flashc.torch.attention of each is called on the
decode shapes of bench_decode_gpu.py (bf16, Hq 32, Hkv 8, D 128, one query
token) under no_grad, as a decode step calls it. Per round and version:
"event" = the median of CUDA events around one call on an idle GPU (the
issue's latency), "pipelined" = the mean over back-to-back calls (the host's
cost a call where it exceeds the GPU's). The rounds alternate A B B A, so a
drift of the host favours neither. --cudnn: SDPA's cuDNN kernel on the same
tensors as a third candidate C in the same rounds (A B C, then C B A), and
B − C paired the same way: the issue's latency row, peer and flashc in one
process.
"""
import argparse
import importlib.util
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import bench_bwd_gpu as _bwd  # noqa: E402  (timed: CUDA events around one call, median)
import bench_call_overhead as _overhead  # noqa: E402  (per_call: back-to-back calls, mean)
import flashc.torch  # noqa: E402,F401  (the package, its library and its torch ops: loaded once)


def load(path, name):
    """The torch layer at `path` as module flashc.<name> (its relative imports
    resolve to this process's flashc package)."""
    full = "flashc." + name
    spec = importlib.util.spec_from_file_location(full, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[full] = mod
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a", help="version A of python/flashc/torch.py")
    ap.add_argument("b", help="version B")
    ap.add_argument("shapes", nargs="*", default=["1:8192", "16:8192"], help="B:Sk decode shapes")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--n", type=int, default=500, help="back-to-back calls a pipelined measurement")
    ap.add_argument("--cudnn", action="store_true", help="SDPA cuDNN as candidate C")
    args = ap.parse_args()
    mods = {"A": load(args.a, "_ab_a"), "B": load(args.b, "_ab_b")}
    print("device: %s, torch %s" % (torch.cuda.get_device_name(), torch.__version__))
    for spec in args.shapes:
        B, Sk = (int(x) for x in spec.split(":"))
        q = torch.randn(B, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(B, Sk, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))  # [B, H, S, D] views, as bench_decode_gpu.py
        with torch.no_grad():
            fns = {m: (lambda mod=mod: mod.attention(q, k, v)) for m, mod in mods.items()}
            if not torch.equal(fns["A"](), fns["B"]()):
                print("B=%d Sk=%d: A and B give different outputs" % (B, Sk))
            names = ("A", "B")
            if args.cudnn:
                fns["C"] = lambda: F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
                names = ("A", "B", "C")
            ev = {m: [] for m in names}
            pl = {m: [] for m in names}
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                for r in range(args.rounds):
                    for m in names if r % 2 == 0 else names[::-1]:
                        ev[m].append(_bwd.timed(fns[m], 50) * 1e3)
                        pl[m].append(_overhead.per_call(fns[m], n=args.n, warmup=20))
        print("B=%d Sk=%d (%d rounds; us a call, median over rounds; differences paired by round)" % (
            B, Sk, args.rounds))
        for what, d in (("event", ev), ("pipelined", pl)):
            med = lambda x, y: statistics.median(b - a for a, b in zip(d[x], d[y]))  # noqa: E731
            line = "  %-10s A %7.2f  B %7.2f  B - A %+6.2f  (A spread %.2f - %.2f)" % (
                what, statistics.median(d["A"]), statistics.median(d["B"]), med("A", "B"), min(d["A"]), max(d["A"]))
            if "C" in d:
                line += "  | cuDNN C %7.2f  B - C %+6.2f" % (statistics.median(d["C"]), med("C", "B"))
            print(line)


if __name__ == "__main__":
    main()
