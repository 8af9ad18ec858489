#!/usr/bin/env python3
"""What the softcap costs the CPU forward (issue 7: "with softcap on, the
forward costs <= 10 % more ... same for the CPU benchmark"): flashc.attention
with softcap=30 next to the same call without it, per dtype / D / causal.

    python3 benchmarks/bench_softcap_cpu.py [--threads N] [--heads H] [--seq S]
                                            [--reps R] [--bwd]

B = 1, H heads (default 4), S = 2048 (forward) / 1024 (--bwd: the backward,
flashc.attention_backward from the forward's o and lse). Each time is the best
of R calls; plain and softcap run twice, interleaved (plain, softcap, plain,
softcap), and the best of each pair is kept, so that a slow stretch of the
machine does not land on one side only. bfloat16 runs the BF16 paths (AMX
tiles where the CPU has them). Compare two libraries by running this script
with FLASHC_LIBRARY pointing at each, alternately.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))


def best_ms(f, reps):
    f()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=0, help="OMP threads (0: as the environment says)")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=0, help="S (default 2048, 1024 with --bwd)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--softcap", type=float, default=30.0)
    ap.add_argument("--bwd", action="store_true", help="the backward instead of the forward")
    a = ap.parse_args()
    if a.threads:
        os.environ["OMP_NUM_THREADS"] = str(a.threads)
    import flashc
    import flashc._dtypes as fd

    S = a.seq or (1024 if a.bwd else 2048)
    rng = np.random.default_rng(0)
    print("# flashc %s, %s, OMP_NUM_THREADS=%s, B=1 H=%d S=%d, softcap %g, %s" % (
        flashc.__version__ if hasattr(flashc, "__version__") else "?", os.environ.get("FLASHC_LIBRARY", "default library"),
        os.environ.get("OMP_NUM_THREADS", "all"), a.heads, S, a.softcap, "backward" if a.bwd else "forward"))
    for dt in ("float32", "bfloat16"):
        for D, causal in ((64, False), (128, False), (128, True)):
            mk = lambda: rng.standard_normal((1, S, a.heads, D)).astype(np.float32)
            q, k, v, do = mk(), mk(), mk(), mk()
            if dt == "bfloat16":
                q, k, v, do = (x.astype(fd.bfloat16()) for x in (q, k, v, do))

            def call(**kw):
                if not a.bwd:
                    return lambda: flashc.attention(q, k, v, causal=causal, **kw)
                o, lse = flashc.attention(q, k, v, causal=causal, return_lse=True, **kw)
                return lambda: flashc.attention_backward(do, q, k, v, o, lse, causal=causal, **kw)

            fp, fs = call(), call(softcap=a.softcap)
            t = [best_ms(f, a.reps) for f in (fp, fs, fp, fs)]
            p, s = min(t[0], t[2]), min(t[1], t[3])
            print("%-8s D%-3d causal=%d  plain %8.2f ms  softcap %8.2f ms  cost %+6.1f%%" % (
                dt, D, causal, p, s, (s / p - 1) * 100), flush=True)


if __name__ == "__main__":
    main()
