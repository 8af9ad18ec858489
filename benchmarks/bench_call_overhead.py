#!/usr/bin/env python3
"""Per-call cost of flashc.torch.attention on the GPU, next to SDPA's, on a
problem too small for the kernel to matter (B=1, S=128, H=1, D=64, bf16):
what every training step pays per attention call on top of the kernel.
Pipelined calls (no sync between them), mean µs per call; forward alone
(no_grad) and forward+backward; and the parts of flashc's forward measured
alone (the C entry with prebuilt descriptors, descriptor building, stream
lookup, output allocation).

    python3 benchmarks/bench_call_overhead.py [--json PATH]
"""
import argparse
import ctypes
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))


def per_call(fn, n=2000, warmup=50):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    import flashc.torch as ft
    from flashc import _lib
    from flashc._core import attn_params
    from flashc.torch import _placement, _tensor

    q, k, v = (torch.randn(1, 128, 1, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    o, lse = torch.empty_like(q), torch.empty(1, 1, 128, device="cuda")
    dq, do = [x.clone().requires_grad_() for x in (q, k, v)], torch.randn_like(q)
    ds = [x.clone().requires_grad_() for x in (qt, kt, vt)]
    tq, to, tl = _tensor(q, "q"), _tensor(o, "o"), _tensor(lse, "lse")
    be, st = _placement((q,))
    p = attn_params(be, stream=st)
    res = {}
    with torch.no_grad():
        res["flashc fwd"] = per_call(lambda: ft.attention(q, k, v))
        res["sdpa fwd"] = per_call(lambda: F.scaled_dot_product_attention(qt, kt, vt))
        res["  C entry, prebuilt descriptors"] = per_call(lambda: _lib.flashc_attn_fwd(
            ctypes.byref(tq), ctypes.byref(tq), ctypes.byref(tq), ctypes.byref(to), ctypes.byref(tl),
            ctypes.byref(p)))
        res["  one _tensor descriptor"] = per_call(lambda: _tensor(q, "q"))
        res["  _placement (device, stream)"] = per_call(lambda: _placement((q, k, v)))
        res["  attn_params"] = per_call(lambda: attn_params(be, stream=st))
        res["  output allocation (o, lse)"] = per_call(lambda: (q.new_empty(q.shape), q.new_empty(
            (1, 1, 128), dtype=torch.float32)))
    res["flashc fwd+bwd"] = per_call(lambda: torch.autograd.backward(ft.attention(*dq), do), n=1000)
    res["sdpa fwd+bwd"] = per_call(lambda: torch.autograd.backward(
        F.scaled_dot_product_attention(*ds), do.transpose(1, 2)), n=1000)
    for name, us in res.items():
        print("%-34s %8.1f us" % (name, us))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "us_per_call": res},
                      fh, indent=1)


if __name__ == "__main__":
    main()
