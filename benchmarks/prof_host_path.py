#!/usr/bin/env python3
"""One decode call's host path, stage by stage (issue 9): flashc.torch.attention
on an idle GPU (synchronised before each call, as an event-timed call runs),
with the timestamps the library and module take when built with
FLASHC_HOST_PROF (src/common/host_prof.h) on one clock with Python's
perf_counter_ns. Medians over N calls, µs from the Python call's start.
Without the marks (a normal build) only the totals and the Python pieces print.

    python3 benchmarks/prof_host_path.py [B:Sk ...]
    python3 benchmarks/prof_host_path.py --kvcache [B:Sk ...]   (attention_with_kvcache's path)
"""
import ctypes
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import bench_bwd_gpu as _bwd  # noqa: E402  (timed: CUDA events around one call, median ms)
from prof_call_decode import decode_problem  # noqa: E402
import flashc.torch as ft  # noqa: E402
from flashc import _lib  # noqa: E402
from flashc.torch import _desc, _like, _params_ref, _placement  # noqa: E402

N = int(os.environ.get("N", "2000"))


def marks_of(lib, name):
    fn = getattr(lib, name, None)
    if fn is None:
        return None
    fn.restype = ctypes.POINTER(ctypes.c_uint64)
    fn.argtypes = []
    return fn  # the thread-local array's address: read after each call


CORE = [("entry", 0), ("knobs", 4), ("validate", 1), ("backend", 2)]
MOD = [("module: make", 1), ("plan", 2), ("tensor maps", 3), ("scratch", 4), ("set_smem", 5),
       ("launch 1", 6), ("launch 2", 7), ("free", 8)]


def timeline(fn, core, mod):
    rows = {}
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    for _ in range(N):
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        fn()
        t1 = time.perf_counter_ns()
        rows.setdefault("return to Python", []).append(t1 - t0)
        if core is None:
            continue
        c = core()
        m = mod() if mod is not None else None
        prev = t0
        for name, i in CORE:
            rows.setdefault(name, []).append(c[i] - prev)
            prev = c[i]
        if m is not None and m[8] >= c[2]:
            rows.setdefault("to module", []).append(m[0] - prev)
            prev = m[0]
            for name, i in MOD:
                rows.setdefault(name, []).append(m[i] - prev)
                prev = m[i]
        rows.setdefault("back to core", []).append(c[3] - prev)
        rows.setdefault("back to Python", []).append(t1 - c[3])
        if m is not None:
            rows.setdefault("first launch done", []).append(m[6] - t0)
    return {k: statistics.median(v) / 1e3 for k, v in rows.items()}


def loop_us(fn, n=20000):
    for _ in range(100):
        fn()
    best = 1e9
    for _ in range(3):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter_ns() - t0) / n / 1e3)
    return best


def kvcache_pieces(B, Sk):
    """attention_with_kvcache (contiguous cache appending one token; paged)
    against the dense call: CPU a call on an idle GPU, events, and the
    Python pieces of the cache path."""
    from bench_serving import paged_kv
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Sk, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    kc, vc = k.clone(), v.clone()
    kn, vn = k[:, -1:].clone(), v[:, -1:].clone()
    lens = torch.full((B,), Sk - 1, dtype=torch.int32, device="cuda")
    full = torch.full((B,), Sk, dtype=torch.int32, device="cuda")
    kp, vp, table = paged_kv(torch, k, v, 16, g)
    print("\nKV cache, B=%d Sk=%d" % (B, Sk))
    with torch.no_grad():
        for name, fn in (("dense", lambda: ft.attention(q, k, v)),
                         ("cache + append", lambda: ft.attention_with_kvcache(q, kc, vc, kn, vn, cache_seqlens=lens)),
                         ("cache", lambda: ft.attention_with_kvcache(q, kc, vc, cache_seqlens=full)),
                         ("paged", lambda: ft.attention_with_kvcache(q, kp, vp, cache_seqlens=full,
                                                                     block_table=table))):
            ev = _bwd.timed(fn, 200) * 1e3
            tl = timeline(fn, None, None)
            print("  %-20s event %6.1f us   CPU a call (idle GPU) %6.1f us" % (name, ev, tl["return to Python"]))
        I32 = _lib.FLASHC_I32
        print("  Python pieces (loop, us a call):")
        for name, fn in (("_placement of 5", lambda: _placement((q, kc, vc, kn, vn))),
                         ("_index(lens)", lambda: ft._index(lens, q, "cache_seqlens")),
                         ("_check_kvcache_host", lambda: ft._check_kvcache_host(None, None, None, B, 1,
                                                                                tuple(kc.shape), None)),
                         ("_kvcache", lambda: ft._kvcache(((kc, "k_cache", None), (vc, "v_cache", None),
                                                           (lens, "cache_seqlens", I32), (kn, "k_new", None),
                                                           (vn, "v_new", None), (None, "cache_batch_idx", I32),
                                                           (None, "block_table", I32)))),
                         ("is_inference + increment_version x2",
                          lambda: [ft._increment_version(c) for c in (kc, vc) if not c.is_inference()])):
            print("      %-44s %6.2f" % (name, loop_us(fn, 5000)))


def main():
    if "--kvcache" in sys.argv:
        for spec in [a for a in sys.argv[1:] if not a.startswith("--")] or ["1:8192", "16:8192"]:
            kvcache_pieces(*(int(x) for x in spec.split(":")))
        return
    specs = sys.argv[1:] or ["1:8192", "16:8192"]
    core = marks_of(_lib.lib, "flashc_host_prof_marks")
    mpath = os.environ.get("FLASHC_CUDA_MODULE") or os.path.join(os.path.dirname(_lib.lib._name), "libflashc_cuda.so")
    print("device: %s, torch %s, marks: %s" % (torch.cuda.get_device_name(), torch.__version__,
                                               "yes" if core else "no (not a FLASHC_HOST_PROF build)"))
    for spec in specs:
        B, Sk = (int(x) for x in spec.split(":"))
        q, k, v, qt, kt, vt, o, (tq, tk, tv, to), (be, st) = decode_problem(B, Sk)
        OPTS = (False, None, (-1, -1), 0, None, True)
        rp = _params_ref(be, st, OPTS)
        raw = _lib.lib["flashc_attn_fwd"]  # no argtypes: ctypes' own conversions
        raw.restype = ctypes.c_int
        ft.attention(q, k, v)  # loads the module
        mod = None
        if core is not None:
            mlib = ctypes.CDLL(mpath)
            mod = marks_of(mlib, "flashc_cuda_host_prof_marks")

        def fl():
            ft.attention(q, k, v)

        def c_entry():
            _lib.flashc_attn_fwd(tq, tk, tv, to, None, rp)

        def cudnn():
            F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)

        print("\nB=%d Sk=%d" % (B, Sk))
        with torch.no_grad(), sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            for name, fn in (("flashc.torch", fl), ("C entry (prebuilt)", c_entry), ("SDPA cuDNN", cudnn)):
                ev = _bwd.timed(fn, 200) * 1e3
                tl = timeline(fn, core if fn is not cudnn else None, mod if fn is not cudnn else None)
                print("  %-20s event %6.1f us   CPU a call (idle GPU) %6.1f us" % (name, ev, tl["return to Python"]))
                if fn is fl and core is not None:
                    t = 0.0
                    for key in [n for n, _ in CORE] + ["to module"] + [n for n, _ in MOD] + ["back to core",
                                                                                             "back to Python"]:
                        if key in tl:
                            t += tl[key]
                            print("      %-18s %6.2f us  (at %6.2f)" % (key, tl[key], t))
                    print("      first launch returned at %.2f us" % tl.get("first launch done", float("nan")))
            print("  Python pieces (loop, us a call):")
            grad = torch.is_grad_enabled
            for name, fn in (("checks (grad, requires_grad x3, compiling)",
                              lambda: (grad() and (q.requires_grad or k.requires_grad or v.requires_grad))
                              or ft._is_compiling()),
                             ("_placement", lambda: _placement((q, k, v))),
                             ("_params_ref", lambda: _params_ref(be, st, OPTS)),
                             ("_like(q)", lambda: _like(q)),
                             ("_desc x4", lambda: (_desc(q, "q"), _desc(k, "k"), _desc(v, "v"), _desc(o, "o"))),
                             ("ctypes no-op (version)", lambda: _lib.flashc_version_number()),
                             ("6-argument call returning an error, argtypes",
                              lambda: _lib.flashc_attn_fwd(None, tk, tv, to, None, rp)),
                             ("the same without argtypes", lambda: raw(None, tk, tv, to, None, rp)),
                             ("q.device x3", lambda: (q.device, k.device, v.device)),
                             ("q.get_device x3", lambda: (q.get_device(), k.get_device(), v.get_device())),
                             ("q.data_ptr x4", lambda: (q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr())),
                             ("q.shape+stride x4", lambda: (q.shape, q.stride(), k.shape, k.stride(), v.shape,
                                                            v.stride(), o.shape, o.stride())),
                             ("torch.empty_like(q)", lambda: torch.empty_like(q)),
                             ("q.new_empty(q.shape)", lambda: q.new_empty(q.shape)),
                             ("torch.empty(shape, dtype, device)",
                              lambda: torch.empty(q.shape, dtype=q.dtype, device=q.device))):
                print("      %-44s %6.2f" % (name, loop_us(fn, 5000)))


if __name__ == "__main__":
    main()
