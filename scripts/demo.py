#!/usr/bin/env python3
"""flashc demo: attention on random data with every available backend.

    python scripts/demo.py [--B 2] [--S 1024] [--Hq 8] [--Hkv 2] [--D 64] [--no-causal]

For fp32 and bf16 (plus fp16/f64 with --all-dtypes) it runs flashc.attention
on each backend (cpu; cuda when a GPU is usable), checks every result against
a float64 reference computed with NumPy (materialised softmax, explicit mask)
and against the other backends, and prints a table of backend, dtype, time
(ms, best of --repeat), GFLOP/s and max relative error. Exits 1 if a check
fails. Needs numpy and ml_dtypes; finds the library in build/lib (or
$FLASHC_LIBRARY).
"""

import argparse
import math
import os
import sys
import time

import numpy as np

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(_ROOT, "python"))

import flashc  # noqa: E402

# Max relative error (max |err| / max |ref|) allowed per dtype: a few units
# of the dtype's roundoff (bf16 rounds P before P·V on the GPU).
TOLERANCE = {"float64": 1e-10, "float32": 2e-5, "float16": 2e-3, "bfloat16": 1e-2}


def np_dtype(name):
    if name == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def reference(q, k, v, causal):
    """Float64 attention, materialised; q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D]."""
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    B, Sq, Hq, D = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    g = Hq // Hkv
    out = np.empty((B, Sq, Hq, D))
    i = np.arange(Sq)[:, None]
    j = np.arange(Sk)[None, :]
    mask = (j <= i + (Sk - Sq)) if causal else np.ones((Sq, Sk), bool)
    for h in range(Hq):  # one head at a time keeps memory at B·Sq·Sk
        x = np.einsum("bqd,bkd->bqk", q[:, :, h], k[:, :, h // g]) / math.sqrt(D)
        x = np.where(mask, x, -np.inf)
        m = x.max(axis=-1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0)
        p = np.exp(x - m)
        l = p.sum(axis=-1, keepdims=True)
        out[:, :, h] = np.einsum("bqk,bkd->bqd", p, v[:, :, h // g]) / np.where(l > 0, l, 1)
    return out


def rel_err(a, ref):
    a = np.asarray(a, np.float64)
    if not np.isfinite(a).all():
        return math.inf
    return float(np.abs(a - ref).max() / max(np.abs(ref).max(), 1e-30))


def timed(fn, repeat):
    fn()  # warm-up (thread pool, CUDA module load)
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def run_backend(backend, q, k, v, causal, repeat):
    if backend == "cpu":
        call = lambda: flashc.attention(q, k, v, causal=causal, backend="cpu")  # noqa: E731
        return call(), timed(call, repeat)
    # CUDA: time the device-resident call (inputs copied once), not the copies.
    from flashc import cuda
    dq, dk, dv = (cuda.to_device(a) for a in (q, k, v))
    out = cuda.empty(q.shape, q.dtype)

    def call():
        flashc.attention(dq, dk, dv, causal=causal, out=out)
        cuda.synchronize()
        return out

    t = timed(call, repeat)
    return out.numpy(), t


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--B", type=int, default=2)
    ap.add_argument("--S", type=int, default=1024)
    ap.add_argument("--Hq", type=int, default=8)
    ap.add_argument("--Hkv", type=int, default=2)
    ap.add_argument("--D", type=int, default=64)
    ap.add_argument("--no-causal", action="store_true")
    ap.add_argument("--all-dtypes", action="store_true", help="also float16 and float64")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    causal = not args.no_causal
    B, S, Hq, Hkv, D = args.B, args.S, args.Hq, args.Hkv, args.D
    dtypes = ["float32", "bfloat16"] + (["float16", "float64"] if args.all_dtypes else [])

    backends = flashc.backends()
    ok_cuda, why = flashc.backend_available("cuda")
    print("flashc %s  (%s)" % (flashc.__version__, flashc.library_path))
    print("cpu isa: %s   OMP_NUM_THREADS=%s   backends: %s%s"
          % (flashc.cpu_isa(), os.environ.get("OMP_NUM_THREADS", "(default)"),
             ", ".join(backends), "" if ok_cuda else "   (cuda: %s)" % why))
    if ok_cuda:
        print("gpu: %s" % flashc.cuda.device_name(0))
    print("attention: B=%d Sq=Sk=%d Hq=%d Hkv=%d D=%d %s\n"
          % (B, S, Hq, Hkv, D, "causal" if causal else "non-causal"))

    flops = flashc.attention_flops(B, S, S, Hq, D, causal=causal)
    rng = np.random.default_rng(args.seed)
    q64 = rng.standard_normal((B, S, Hq, D))
    k64 = rng.standard_normal((B, S, Hkv, D))
    v64 = rng.standard_normal((B, S, Hkv, D))

    header = "%-8s %-9s %10s %10s %12s %14s  %s" % (
        "backend", "dtype", "time (ms)", "GFLOP/s", "rel err", "vs other bknd", "check")
    print(header)
    print("-" * len(header))
    failed = []
    for dtype in dtypes:
        dt = np_dtype(dtype)
        q, k, v = (a.astype(dt) for a in (q64, k64, v64))
        ref = reference(q, k, v, causal)  # from the rounded inputs
        tol = TOLERANCE[dtype]
        results = {}
        for backend in backends:
            try:
                o, t = run_backend(backend, q, k, v, causal, args.repeat)
            except flashc.FlashcError as e:
                print("%-8s %-9s  FAILED: %s" % (backend, dtype, e))
                failed.append((backend, dtype, str(e)))
                continue
            results[backend] = o
            err = rel_err(o, ref)
            cross = ""
            cross_err = 0.0
            if backend != backends[0] and backends[0] in results:
                cross_err = rel_err(o, np.asarray(results[backends[0]], np.float64))
                cross = "%.2e" % cross_err
            good = err <= tol and cross_err <= 2 * tol
            if not good:
                failed.append((backend, dtype, "rel err %.3g (cross %.3g) > %.3g"
                               % (err, cross_err, tol)))
            print("%-8s %-9s %10.2f %10.1f %12.2e %14s  %s"
                  % (backend, dtype, t * 1e3, flops / t / 1e9, err, cross or "-",
                     "ok" if good else "FAIL (tol %.0e)" % tol))
    print()
    if failed:
        for b, d, why in failed:
            print("FAILED: %s %s: %s" % (b, d, why))
        return 1
    print("all checks passed (max relative error vs float64 reference within tolerance)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
