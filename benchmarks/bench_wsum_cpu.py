"""CPU weighted row-sum throughput (GB/s) next to numpy peers in the same run.

    OMP_NUM_THREADS=2 FLASHC_CPU_ISA=avx512 .venv/bin/python benchmarks/bench_wsum_cpu.py [--json out.json]

fwd bytes = x read (+ w, y); bwd bytes = x read + dx write (+ dy, w, dw);
"bwd" allocates dx/dw each call (first-touch page faults included, as a
caller without out= sees it), "bwd_out" writes into preallocated out=.
Peers: numpy copy of x (read + write, so 2·|x| bytes) and x @ w in fp32/f64
(numpy BLAS; for bf16/f16 x@w runs on the f32 copy and is listed for scale)."""
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import flashc  # noqa: E402
from reference import np_dtype  # noqa: E402

CASES = [("float32", 65536, 1024), ("float32", 1 << 20, 64), ("bfloat16", 65536, 1024),
         ("float16", 65536, 1024), ("float64", 65536, 1024), ("bfloat16", 1 << 20, 64),
         ("float64", 1 << 20, 64)]


def meds(fs, n=15):
    """Median time of each f, the calls interleaved round-robin so that a
    shared machine's slow moments hit every column alike."""
    for f in fs:
        f()
    ts = [[] for _ in fs]
    for _ in range(n):
        for f, t in zip(fs, ts):
            t0 = time.perf_counter()
            f()
            t.append(time.perf_counter() - t0)
    return [float(np.median(t)) for t in ts]


def main():
    rng = np.random.default_rng(0)
    rows = []
    print("%-9s %8s %5s | %7s %7s %7s %7s %7s" % ("dtype", "R", "D", "fwd", "x@w", "copy", "bwd", "bwd_out")) 
    for dtype, R, D in CASES:
        dt = np_dtype(dtype)
        x = rng.standard_normal((R, D), dtype=np.float32).astype(dt)
        w = rng.standard_normal(D).astype(dt)
        dy = rng.standard_normal(R).astype(dt)
        y = np.empty(R, dt)
        c = np.empty_like(x)
        e = x.itemsize
        xb = R * D * e
        x32 = x if dtype in ("float32", "float64") else x.astype(np.float32)
        w32 = w if dtype in ("float32", "float64") else w.astype(np.float32)
        y32 = np.empty(R, x32.dtype)
        dxo, dwo = np.empty_like(x), np.empty_like(w)
        # Three groups: the allocating bwd (page faults, munmap) slowed
        # whatever ran next to it, so bwd_out is timed beside a copy only.
        t_fwd, t_mv, t_cp = meds([
            lambda: flashc.weighted_sum(x, w, backend="cpu", out=y),
            lambda: np.matmul(x32, w32, out=y32),
            lambda: np.copyto(c, x)])
        t_bwdo, _ = meds([
            lambda: flashc.weighted_sum_backward(dy, x, w, backend="cpu", out=(dxo, dwo)),
            lambda: np.copyto(c, x)])
        (t_bwd,) = meds([lambda: flashc.weighted_sum_backward(dy, x, w, backend="cpu")], 7)
        r = dict(dtype=dtype, R=R, D=D,
                 fwd=xb / t_fwd / 1e9, xw=R * D * x32.itemsize / t_mv / 1e9,
                 copy=2 * xb / t_cp / 1e9, bwd=2 * xb / t_bwd / 1e9,
                 bwd_out=2 * xb / t_bwdo / 1e9)
        rows.append(r)
        print("%-9s %8d %5d | %7.1f %7.1f %7.1f %7.1f %7.1f" % (dtype, R, D, r["fwd"], r["xw"], r["copy"], r["bwd"],
                                                               r["bwd_out"]))
    if "--json" in sys.argv:
        with open(sys.argv[sys.argv.index("--json") + 1], "w") as f:
            json.dump(dict(threads=os.environ.get("OMP_NUM_THREADS"),
                           isa=os.environ.get("FLASHC_CPU_ISA"), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
