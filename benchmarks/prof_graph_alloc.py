#!/usr/bin/env python3
"""What graph memory nodes cost a CUDA graph replay (issue 9: the split
decode's partials come from the stream-ordered pool inside a capture, which
records an allocation and a free node around its two kernels).

Replays, back to back and one at a time on an idle GPU, graphs of two small
kernels (torch element-wise ops) with and without a cudaMallocAsync /
cudaFreeAsync pair captured around them, and prints the µs a replay.

    python3 benchmarks/prof_graph_alloc.py
"""
import ctypes
import statistics
import time

import torch


def cudart():
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            pass
    raise SystemExit("libcudart not found")


def main():
    torch.cuda.init()
    rt = cudart()
    x = torch.zeros(1024, device="cuda")
    y = torch.zeros(1024, device="cuda")
    s = torch.cuda.Stream()
    graphs = {}
    for name, alloc in (("kernels", False), ("kernels+alloc/free", True)):
        g = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        with torch.cuda.graph(g, stream=s):
            st = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
            p = ctypes.c_void_p()
            if alloc:
                e = rt.cudaMallocAsync(ctypes.byref(p), ctypes.c_size_t(1 << 20), st)
                assert e == 0, e
            x.add_(1)
            y.add_(x)
            if alloc:
                e = rt.cudaFreeAsync(p, st)
                assert e == 0, e
        graphs[name] = g
    for rnd in range(2):
        for name, g in graphs.items():
            for _ in range(50):
                g.replay()
            torch.cuda.synchronize()
            n = 2000
            t0 = time.perf_counter()
            for _ in range(n):
                g.replay()
            torch.cuda.synchronize()
            piped = (time.perf_counter() - t0) / n * 1e6
            ev = []
            for _ in range(300):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                a.record()
                g.replay()
                b.record()
                b.synchronize()
                ev.append(a.elapsed_time(b) * 1e3)
            print("round %d  %-20s back to back %6.2f us   one at a time (events) median %6.2f us" % (
                rnd, name, piped, statistics.median(ev)), flush=True)


if __name__ == "__main__":
    main()
