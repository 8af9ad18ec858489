#!/usr/bin/env python3
"""Where the host time of one decode call goes, on one timeline (issue 9).

    python3 benchmarks/prof_decode_trace.py [--trace DIR] [B:Sk ...]

Each call runs as bench_decode_gpu.py times it (CUDA events around one call
on an idle GPU, synchronised), under torch.profiler with CPU and CUDA
activities: the CUDA runtime/driver calls of every library in the process
(flashc's module included), the kernels, and three annotations — the call
("call"), flashc's C entry ("c_entry", a wrapper around
_lib.flashc_attn_fwd) and the event pair. Printed per case, medians over
the calls, µs from the start of the call: when the C entry starts and ends,
each CUDA API call (start and duration), each kernel's start and end on the
GPU. The profiler adds its own cost to every API call (~1 µs): read the
offsets against each other and against cuDNN's in the same run, not as
absolute figures. --trace DIR writes each case's Chrome trace (.json.xz).
"""
import argparse
import json
import lzma
import os
import statistics
import sys
import tempfile

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile, record_function

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import flashc.torch as ft  # noqa: E402
from flashc import _lib  # noqa: E402

_C_ENTRY = _lib.flashc_attn_fwd


def _wrapped_entry(*args):
    with record_function("c_entry"):
        return _C_ENTRY(*args)


def profile_calls(fn, n):
    """The Chrome trace (a dict) of n calls of fn(), each annotated "call" and
    synchronised (the GPU idle before each), CPU and CUDA activities."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with record_function("call"):
                a.record()
                fn()
                b.record()
            torch.cuda.synchronize()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    prof.export_chrome_trace(path)
    with open(path) as f:
        tr = json.load(f)
    os.unlink(path)
    return tr


def call_rows(tr):
    """(number of calls, {label: [(start µs from the call's start, duration µs)]}):
    the C entry, each CUDA API call, each kernel launched within the call, and
    the call's GPU span (first kernel start to last kernel end)."""
    ev = [e for e in tr.get("traceEvents", []) if e.get("ph") == "X"]
    # (the profiler also draws each annotation on the GPU timeline: cat gpu_user_annotation)
    calls = sorted((e for e in ev if e.get("name") == "call" and e.get("cat") == "user_annotation"),
                   key=lambda e: e["ts"])
    entries = [e for e in ev if e.get("name") == "c_entry" and e.get("cat") == "user_annotation"]
    api = [e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    kern = [e for e in ev if e.get("cat") == "kernel"]
    by_corr = {}
    for e in api:
        c = e.get("args", {}).get("correlation")
        if c is not None:
            by_corr[c] = e
    rows = {}

    def add(label, t0, e):
        rows.setdefault(label, []).append((e["ts"] - t0, e.get("dur", 0.0)))

    for c in calls:
        t0, t1 = c["ts"], c["ts"] + c["dur"]
        add("call (python)", t0, c)
        for e in entries:
            if t0 <= e["ts"] <= t1:
                add("c_entry", t0, e)
        seen = {}
        for e in sorted((e for e in api if t0 <= e["ts"] <= t1), key=lambda e: e["ts"]):
            k = e["name"]
            seen[k] = seen.get(k, 0) + 1
            add("api %s #%d" % (k, seen[k]), t0, e)
        ks, mine = {}, []
        for e in sorted(kern, key=lambda e: e["ts"]):
            launch = by_corr.get(e.get("args", {}).get("correlation"))
            if launch is not None and t0 <= launch["ts"] <= t1:
                k = e["name"][:60]
                ks[k] = ks.get(k, 0) + 1
                add("gpu %s #%d" % (k, ks[k]), t0, e)
                mine.append(e)
        if mine:  # the call's GPU time: first kernel start to last kernel end
            g0 = min(e["ts"] for e in mine)
            g1 = max(e["ts"] + e.get("dur", 0.0) for e in mine)
            add(SPAN, t0, {"ts": g0, "dur": g1 - g0})
    return len(calls), rows


SPAN = "gpu span (first kernel start to last end)"


def gpu_span(fn, n=20):
    """Median µs of one call's GPU span (first kernel start to last kernel
    end; with the combine kernel launched as a programmatic dependent, its
    own duration includes its wait, so kernel durations do not add up)."""
    _, rows = call_rows(profile_calls(fn, n))
    xs = rows.get(SPAN, [])
    return statistics.median(d for _, d in xs) if xs else float("nan")


def run_case(name, fn, n, trace_dir):
    tr = profile_calls(fn, n)
    if trace_dir:
        with lzma.open(os.path.join(trace_dir, name.replace(" ", "_") + ".json.xz"), "wt") as f:
            json.dump(tr, f)
    ncalls, rows = call_rows(tr)
    print("\n== %s (%d calls; µs from the call's start, medians: start  duration  end)" % (name, ncalls))
    order = sorted(rows.items(), key=lambda kv: statistics.median(x[0] for x in kv[1]))
    for label, xs in order:
        s = statistics.median(x[0] for x in xs)
        d = statistics.median(x[1] for x in xs)
        print("  %8.1f %8.1f %8.1f  %s%s" % (s, d, s + d, label[:100], "" if len(xs) == ncalls else
                                          "  (%d of %d calls)" % (len(xs), ncalls)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", help="directory for the Chrome traces (.json.xz)")
    ap.add_argument("-n", type=int, default=30)
    ap.add_argument("shapes", nargs="*", default=["1:8192", "16:8192"])
    a = ap.parse_args()
    print("device: %s, torch %s" % (torch.cuda.get_device_name(), torch.__version__))
    _lib.flashc_attn_fwd = _wrapped_entry  # flashc.torch looks the binding up at each call
    for spec in a.shapes:
        B, Sk = (int(x) for x in spec.split(":"))
        q = torch.randn(B, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(B, Sk, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        with torch.no_grad():
            run_case("flashc B=%d Sk=%d" % (B, Sk), lambda: ft.attention(q, k, v), a.n, a.trace)
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):  # outside the call, as bench_decode_gpu.py
                run_case("cudnn B=%d Sk=%d" % (B, Sk),
                         lambda: F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True), a.n, a.trace)
    _lib.flashc_attn_fwd = _C_ENTRY


if __name__ == "__main__":
    main()
