#!/usr/bin/env python3
"""GPU decode (one query token per sequence, and short chunks) of flashc next
to torch SDPA's FlashAttention-2 and cuDNN backends, measured in the same run.

    python3 benchmarks/bench_decode_gpu.py [--json PATH] [--reps N] [--chunks] [--no-flashc]

Shapes (issue 9): bf16, Hq = 32, Hkv = 8 (GQA), D = 128, q [B, 1, Hq, D],
k/v [B, Sk, Hkv, D], (B, Sk) in (1, 8k), (16, 8k), (64, 4k), (4, 64k);
--chunks adds 4- and 16-token chunks (q [B, n, Hq, D]) at B = 1 and 16,
Sk = 8k, without a mask on either side: SDPA's is_causal is top-left
aligned (a chunk's rows would see only its first keys), flashc's bottom-right;
unmasked, both read and compute the same.

bytes = K + V + Q read + O written; TB/s = bytes / time, next to a device
copy moving as many bytes (torch copy_ of bytes/2: read + write = bytes).
flashc: flashc.torch.attention(q, k, v) under torch.no_grad() — the Python
call included, as a user pays it. SDPA: F.scaled_dot_product_attention on the
[B, H, S, D] views of the same tensors (no copies) with enable_gqa=True
(torch ≥ 2.5); a backend that refuses it is reported as an error, never run
on expanded K/V (that would read Hq/Hkv times the bytes).

Timing (benchmarks/bench_gpu.py's conventions): CUDA events around each
call on torch's current stream (the GPU idle before it, so the host's work
until the first launch counts), median of --reps calls after warm-up. The
candidates of a shape are timed interleaved — one call of each in turn, --reps
rounds — so that the host's drift during the run (it moved cuDNN's B=1 call
between 38 and 110 µs from one run to the next) falls on all of them alike.
Also reported: "pipelined" µs, the mean over back-to-back calls without a
synchronisation (the per-call host cost when it exceeds the GPU's), and
"graph" µs: the call captured once in a CUDA graph and replayed (what a
serving engine that captures its decode step pays: GPU time and one graph
launch, no per-call host work), event-timed and interleaved the same way.
flashc's output is checked against SDPA FA2's (relative L2 error in the JSON).
"""
import argparse
import contextlib
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
sys.path.insert(0, HERE)
import bench_call_overhead  # noqa: E402  (per_call: back-to-back calls, mean)
import bench_gpu  # noqa: E402  (the shared CUDA-event timer)


def bench(fn, reps):
    """Median ms of fn() (bench_gpu.bench: CUDA events, median), 10 warm-up calls."""
    return bench_gpu.bench(fn, reps, warmup=10)


def bench_interleaved(fns, reps):
    """{name: median ms} of the calls fns[name] = (context, fn) timed as
    bench_gpu.bench does (CUDA events around one fn() inside context(),
    synchronised), one call of each in turn. context() (SDPA's backend
    choice) is entered outside the timed region."""
    s = torch.cuda.current_stream()
    for ctx, fn in fns.values():
        with ctx():
            for _ in range(10):
                fn()
    torch.cuda.synchronize()
    times = {k: [] for k in fns}
    for _ in range(reps):
        for k, (ctx, fn) in fns.items():
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with ctx():
                e0.record(s)
                fn()
                e1.record(s)
            e1.synchronize()
            times[k].append(e0.elapsed_time(e1))
    return {k: sorted(v)[len(v) // 2] for k, v in times.items()}


def graphed(ctx, fn):
    """fn captured in a CUDA graph (warmed up on a side stream, as torch
    requires), as (context, replay); None where capture fails."""
    try:
        with ctx():
            st = torch.cuda.Stream()
            st.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(st):
                for _ in range(3):
                    fn()
            torch.cuda.current_stream().wait_stream(st)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                fn()
        torch.cuda.synchronize()
        return (contextlib.nullcontext, g.replay)
    except Exception:
        return None


def pipelined_us(ctx, fn, n=200):
    """Mean µs a call over n back-to-back calls (one synchronisation at the end)."""
    with ctx():
        return bench_call_overhead.per_call(fn, n=n, warmup=10)


def load_flashc(disabled):
    if disabled:
        return None, "--no-flashc"
    try:
        import flashc
        import flashc.torch as ft
    except Exception as e:  # library not built / not found
        return None, str(e).splitlines()[0]
    if "cuda" not in flashc.backends():
        return None, "flashc CUDA backend unavailable"
    return ft, ""


def tbs(nbytes, ms):
    return nbytes / (ms * 1e-3) / 1e12 if ms and ms == ms else float("nan")


def run_shape(ft, B, Sq, Sk, Hq, Hkv, D, dt, reps, graphs=False):
    causal = False  # see the module docstring (chunks)
    q = torch.empty(B, Sq, Hq, D, device="cuda", dtype=dt).uniform_(-1, 1)
    k, v = (torch.empty(B, Sk, Hkv, D, device="cuda", dtype=dt).uniform_(-1, 1) for _ in range(2))
    esz = q.element_size()
    nbytes = (2 * k.numel() + 2 * q.numel()) * esz
    r = {"B": B, "Sq": Sq, "Sk": Sk, "Hq": Hq, "Hkv": Hkv, "D": D, "dtype": str(dt).split(".")[-1],
         "causal": causal, "bytes": nbytes}
    src = torch.empty(nbytes // 2 // esz, device="cuda", dtype=dt).uniform_(-1, 1)
    dst = torch.empty_like(src)
    r["copy_ms"] = bench(lambda: dst.copy_(src), reps)
    del src, dst
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))  # [B, H, S, D] views
    ref = None
    fns = {}

    def sdpa():
        return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=True)

    with torch.no_grad():
        for name, be in (("fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                with sdpa_kernel(be):
                    out = sdpa()
                if name == "fa2":
                    ref = out.transpose(1, 2).float()
                fns[name] = (lambda be=be: sdpa_kernel(be), sdpa)
            except Exception as e:
                r[name + "_error"] = str(e).splitlines()[0][:160]
        if ft is not None:
            try:
                f = lambda: ft.attention(q, k, v, causal=causal)
                out = f()
                if ref is not None:
                    r["flashc_vs_fa2_rel_l2"] = ((out.float() - ref).norm() / ref.norm()).item()
                fns["flashc"] = (contextlib.nullcontext, f)
            except Exception as e:
                r["flashc_error"] = str(e).splitlines()[0][:200]
        for name, ms in bench_interleaved(fns, reps).items():
            r[name + "_ms"] = ms
        for name, (ctx, f) in fns.items():
            r[name + "_pipelined_us"] = pipelined_us(ctx, f)
        if graphs:
            gfns = {}
            for name, (ctx, f) in fns.items():
                gf = graphed(ctx, f)
                if gf is None:
                    r[name + "_graph_error"] = "capture failed"
                else:
                    gfns[name] = gf
            for name, ms in bench_interleaved(gfns, reps).items():
                r[name + "_graph_us"] = ms * 1e3
    for key in ("flashc", "fa2", "cudnn", "copy"):
        ms = r.get(key + "_ms")
        r[key + "_us"] = ms * 1e3 if ms else float("nan")
        r[key + "_tbs"] = tbs(nbytes, ms)
    errs = "".join("  [%s: %s]" % (kk, r[kk + "_error"]) for kk in ("flashc", "fa2", "cudnn") if kk + "_error" in r)
    print("B=%-3d Sq=%-2d Sk=%-6d | us  flashc %7.1f  fa2 %7.1f  cudnn %7.1f  copy %7.1f"
          " | TB/s flashc %5.2f  fa2 %5.2f  cudnn %5.2f  copy %5.2f | flashc/copy %4.0f%%"
          " | pipelined us flashc %6.1f  fa2 %6.1f  cudnn %6.1f"
          " | graph us flashc %6.1f  fa2 %6.1f  cudnn %6.1f%s" % (
              B, Sq, Sk, r["flashc_us"], r["fa2_us"], r["cudnn_us"], r["copy_us"], r["flashc_tbs"], r["fa2_tbs"],
              r["cudnn_tbs"], r["copy_tbs"], 100 * r["flashc_tbs"] / r["copy_tbs"],
              *(r.get(k + "_pipelined_us", float("nan")) for k in ("flashc", "fa2", "cudnn")),
              *(r.get(k + "_graph_us", float("nan")) for k in ("flashc", "fa2", "cudnn")), errs), flush=True)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write all results to this file")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--chunks", action="store_true", help="also 4- and 16-token chunks")
    ap.add_argument("--no-flashc", action="store_true", help="peers only")
    ap.add_argument("--graphs", action="store_true", help="also each call captured in a CUDA graph and replayed")
    a = ap.parse_args()
    torch.manual_seed(0)
    ft, why = load_flashc(a.no_flashc)
    print("device: %s, torch %s, flashc: %s" % (torch.cuda.get_device_name(), torch.__version__,
                                                "loaded" if ft else "n/a (%s)" % why), flush=True)
    Hq, Hkv, D, dt = 32, 8, 128, torch.bfloat16
    shapes = [(1, 1, 8192), (16, 1, 8192), (64, 1, 4096), (4, 1, 65536)]
    if a.chunks:
        shapes += [(B, n, 8192) for n in (4, 16) for B in (1, 16)]
    rows = [run_shape(ft, B, Sq, Sk, Hq, Hkv, D, dt, a.reps, a.graphs) for B, Sq, Sk in shapes]
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "decode": rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
