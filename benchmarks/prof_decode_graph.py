#!/usr/bin/env python3
"""What a decode step captured in a CUDA graph holds (issue 9: the B=1 graph
replay behind cuDNN's): the captured graph's nodes by type, and the replay's
µs one at a time (event-timed, idle GPU between replays) and back to back,
flashc beside SDPA cuDNN, for the shapes given (B:Sk, Hq 32, Hkv 8, D 128).

    python3 benchmarks/prof_decode_graph.py [B:Sk ...]
"""
import ctypes
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import flashc.torch as ft
from prof_graph_alloc import cudart  # the CUDA runtime torch loaded (exits without one)

TYPES = {0: "kernel", 1: "memcpy", 2: "memset", 3: "host", 4: "graph", 5: "empty", 6: "wait_event",
         7: "event_record", 10: "mem_alloc", 11: "mem_free", 13: "conditional"}


def node_types(rt, g):
    graph = ctypes.c_void_p(g.raw_cuda_graph())
    n = ctypes.c_size_t(0)
    rt.cudaGraphGetNodes(graph, None, ctypes.byref(n))
    nodes = (ctypes.c_void_p * n.value)()
    rt.cudaGraphGetNodes(graph, nodes, ctypes.byref(n))
    out = []
    for i in range(n.value):
        t = ctypes.c_int(-1)
        rt.cudaGraphNodeGetType(ctypes.c_void_p(nodes[i]), ctypes.byref(t))
        out.append(TYPES.get(t.value, str(t.value)))
    return out


def capture(fn):
    st = torch.cuda.Stream()
    st.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(st):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(st)
    g = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(g):
        fn()
    g.instantiate()
    torch.cuda.synchronize()
    return g


def times(g, n=300):
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    one = []
    for _ in range(n):
        torch.cuda.synchronize()
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        one.append(e0.elapsed_time(e1) * 1e3)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        g.replay()
    torch.cuda.synchronize()
    return statistics.median(one), (time.perf_counter() - t0) / n * 1e6


def main():
    rt = cudart()
    shapes = [tuple(int(x) for x in s.split(":")) for s in sys.argv[1:]] or [(1, 8192), (16, 8192)]
    dt = torch.bfloat16
    for B, Sk in shapes:
        q = torch.randn(B, 1, 32, 128, device="cuda", dtype=dt)
        k, v = (torch.randn(B, Sk, 8, 128, device="cuda", dtype=dt) for _ in range(2))
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with torch.no_grad():
            gf = capture(lambda: ft.attention(q, k, v))
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                gc = capture(lambda: F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True))
            for name, g in (("flashc", gf), ("cudnn", gc)):
                nt = node_types(rt, g)
                for r in range(2):
                    one, b2b = times(g)
                    print("B=%-3d Sk=%-6d %-7s nodes %-40s round %d  one at a time %6.1f us  back to back %6.1f us"
                          % (B, Sk, name, ",".join(nt), r, one, b2b), flush=True)


if __name__ == "__main__":
    main()
