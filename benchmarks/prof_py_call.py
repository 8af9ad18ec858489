#!/usr/bin/env python3
"""CPU cost of the pieces of a flashc.torch call (issue 9: decode latency),
variants side by side: descriptor builders (a ctypes structure as flashc.torch
built it before 2026-11-27, struct.pack bytes as it does now), output
allocation, placement; then whole no-grad calls. Mean µs over back-to-back
calls. results/h200-2026-11-27-s9-py-call.txt has the run that chose the
packed bytes (its "prototype" rows: the bytes path before it was flashc.torch's)."""
import ctypes
import os
import struct
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import flashc.torch as ft  # noqa: E402
from flashc import _lib  # noqa: E402


def per_call(fn, n=20000):
    for _ in range(200):
        fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


_S = struct.Struct("=Qii8q8q")
_Z8 = (0,) * 8


def pack(t):
    nd = t.dim()
    sh = t.shape
    st = t.stride()
    return _S.pack(t.data_ptr(), _lib.FLASHC_BF16, nd, *sh, *_Z8[nd:], *st, *_Z8[nd:])


def pack2(t):
    sh = t.shape
    st = t.stride()
    nd = len(sh)
    return _S.pack(t.data_ptr(), _lib.FLASHC_BF16, nd, *sh, *_Z8[nd:], *st, *_Z8[nd:])


assert _S.size == ctypes.sizeof(_lib.flashc_tensor)


def main():
    q = torch.randn(1, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 8192, 8, 128, device="cuda", dtype=torch.bfloat16)
    rows = []
    rows.append(("_tensor (ctypes slices)", per_call(lambda: ft._tensor(k, "k"))))
    rows.append(("struct pack -> bytes", per_call(lambda: pack(k))))
    rows.append(("struct pack2 (len(shape))", per_call(lambda: pack2(k))))
    rows.append(("pack + from_buffer_copy", per_call(lambda: _lib.flashc_tensor.from_buffer_copy(pack(k)))))
    rows.append(("k.data_ptr()", per_call(lambda: k.data_ptr())))
    rows.append(("k.shape", per_call(lambda: k.shape)))
    rows.append(("k.stride()", per_call(lambda: k.stride())))
    rows.append(("k.dtype", per_call(lambda: k.dtype)))
    rows.append(("k.device", per_call(lambda: k.device)))
    rows.append(("k.is_cuda", per_call(lambda: k.is_cuda)))
    rows.append(("k.get_device()", per_call(lambda: k.get_device())))
    rows.append(("q.new_empty(q.shape)", per_call(lambda: q.new_empty(q.shape))))
    rows.append(("torch.empty_like(q)", per_call(lambda: torch.empty_like(q))))
    rows.append(("torch.empty(shape, dtype, device)", per_call(lambda: torch.empty(q.shape, dtype=q.dtype, device=q.device))))
    rows.append(("_placement((q,k,v))", per_call(lambda: ft._placement((q, k, k)))))
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        rows.append(("_cuda_getCurrentRawStream(0)", per_call(lambda: raw(0))))
    rows.append(("torch.is_grad_enabled()", per_call(torch.is_grad_enabled)))
    rows.append(("_desc (flashc.torch's packed bytes)", per_call(lambda: ft._desc(k, "k"))))
    with torch.no_grad():
        rows.append(("ft.attention (whole, no_grad, GPU work incl.)", per_call(lambda: ft.attention(q, k, k), 3000)))
        qs = torch.randn(1, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
        ks = torch.randn(1, 64, 8, 128, device="cuda", dtype=torch.bfloat16)
        rows.append(("ft.attention Sk=64 (one kernel)", per_call(lambda: ft.attention(qs, ks, ks), 3000)))
    torch.cuda.synchronize()
    for name, us in rows:
        print("  %-48s %7.2f us" % (name, us))


if __name__ == "__main__":
    main()
