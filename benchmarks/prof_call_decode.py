#!/usr/bin/env python3
"""Where a decode call's time goes (issue 9): flashc.torch.attention on the
decode shapes of bench_decode_gpu.py (bf16, Hq 32, Hkv 8, D 128, one query
token), split into the GPU kernels (torch.profiler), the C entry with
prebuilt descriptors, and the Python layer's parts; SDPA cuDNN alongside.

    python3 benchmarks/prof_call_decode.py [B:Sk ...]

Two timings per call: "event" = CUDA events around one call, synchronised
(what bench_decode_gpu.py reports: an idle GPU waits for the CPU's launch
work), "pipelined" = mean over back-to-back calls (CPU cost per call when
it exceeds the GPU's).
"""
import ctypes
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import bench_bwd_gpu as _bwd  # noqa: E402  (timed: CUDA events around one call, median)
import bench_call_overhead as _overhead  # noqa: E402  (per_call: back-to-back calls, mean)
import flashc.torch as ft  # noqa: E402
from flashc import _lib  # noqa: E402
from flashc._core import attn_params  # noqa: E402
from flashc.torch import _desc, _placement  # noqa: E402


def pipelined(fn):
    return _overhead.per_call(fn, n=500, warmup=20)


def event(fn):
    return _bwd.timed(fn, 50) * 1e3  # median ms of synchronised event pairs -> µs


def kernels(fn, n=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    out = []
    for e in sorted(prof.key_averages(), key=lambda e: -e.device_time_total):
        if e.device_time_total > 0:
            out.append((e.device_time_total / n, e.key[:90]))
    return out


def decode_problem(B, Sk):
    """A decode step's tensors (bf16, one query token, Hq 32, Hkv 8, D 128):
    q, k, v, their SDPA-layout views qt, kt, vt, an output o, the four
    descriptors (flashc.torch's bytes) and (backend, stream)."""
    q = torch.randn(B, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Sk, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    o = torch.empty_like(q)
    descs = _desc(q, "q"), _desc(k, "k"), _desc(v, "v"), _desc(o, "o")
    return q, k, v, qt, kt, vt, o, descs, _placement((q, k, v))


def main():
    specs = sys.argv[1:] or ["1:8192", "16:8192"]
    print("device: %s, torch %s" % (torch.cuda.get_device_name(), torch.__version__))
    for spec in specs:
        B, Sk = (int(x) for x in spec.split(":"))
        q, k, v, qt, kt, vt, o, (tq, tk, tv, to), (be, st) = decode_problem(B, Sk)
        p = attn_params(be, stream=st)
        pc = attn_params(_lib.FLASHC_BACKEND_CUDA, stream=st)
        rq, rk, rv, ro = tq, tk, tv, to  # (bytes: passed as they are)
        rp, rpc = ctypes.byref(p), ctypes.byref(pc)

        def fl():
            ft.attention(q, k, v)

        def c_entry():
            _lib.flashc_attn_fwd(rq, rk, rv, ro, None, rp)

        def c_entry_cuda():
            _lib.flashc_attn_fwd(rq, rk, rv, ro, None, rpc)

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)

        print("\nB=%d Sk=%d" % (B, Sk))
        with torch.no_grad():
            rows = [("flashc.torch.attention", fl), ("C entry, prebuilt (AUTO)", c_entry),
                    ("C entry, prebuilt (CUDA)", c_entry_cuda), ("SDPA cuDNN", cudnn)]
            for name, fn in rows:
                print("  %-28s event %7.1f us   pipelined %7.1f us" % (name, event(fn), pipelined(fn)))
            for name, fn in (("_placement", lambda: _placement((q, k, v))),
                             ("4 x _desc", lambda: [_desc(x, "x") for x in (q, k, v, o)]),
                             ("new_empty(o)", lambda: q.new_empty(q.shape)),
                             ("attn_params", lambda: attn_params(be, stream=st)),
                             ("ctypes no-op (version)", lambda: _lib.flashc_version_number())):
                print("  %-28s pipelined %7.1f us" % (name, pipelined(fn)))
            for label, fn in (("flashc", fl), ("cudnn", cudnn)):
                for us, key in kernels(fn):
                    print("  kernel[%s] %8.1f us  %s" % (label, us, key))


if __name__ == "__main__":
    main()
