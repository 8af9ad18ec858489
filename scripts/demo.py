#!/usr/bin/env python3
"""flashc demo: attention on random data with every available backend, next to NumPy (and torch).

    python scripts/demo.py [--B 2] [--S 1024] [--Hq 8] [--Hkv 2] [--D 64] [--no-causal]

For fp32 and bf16 (plus fp16/f64 with --all-dtypes) it runs flashc.attention
on each backend (cpu; cuda when a GPU is usable) and, on the same inputs,
the attention users already have: NumPy (materialised softmax, BLAS matmuls)
in float64 (the reference every result is checked against) and in the
inputs' dtype (float32 math for fp16/bf16, which NumPy has no fast matmul
for), and torch's scaled_dot_product_attention on the CPU when torch is
installed. It prints a table of implementation, dtype, time (ms, best of
--repeat), GFLOP/s (the problem's useful FLOPs for every row, so rows compare) and max
relative error against the float64 reference, then flashc's speed-up over
each peer. Exits 1 if a flashc check fails. Needs numpy and ml_dtypes; finds
the library in build/lib (or $FLASHC_LIBRARY).
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


def numpy_attention(q, k, v, causal, dtype=np.float64):
    """Softmax attention in NumPy, materialised, computed in `dtype`;
    q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D] -> [B, Sq, Hq, D] in `dtype`."""
    q, k, v = (a.astype(dtype) for a in (q, k, v))
    B, Sq, Hq, D = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    g = Hq // Hkv
    out = np.empty((B, Sq, Hq, D), dtype)
    i = np.arange(Sq)[:, None]
    j = np.arange(Sk)[None, :]
    mask = (j <= i + (Sk - Sq)) if causal else np.ones((Sq, Sk), bool)
    scale = dtype(1.0 / math.sqrt(D))
    for h in range(Hq):  # one head at a time keeps memory at B·Sq·Sk
        x = np.matmul(q[:, :, h], k[:, :, h // g].transpose(0, 2, 1)) * scale  # [B, Sq, Sk]
        x = np.where(mask, x, -np.inf)
        m = x.max(axis=-1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0)
        p = np.exp(x - m)
        l = p.sum(axis=-1, keepdims=True)
        out[:, :, h] = np.matmul(p, v[:, :, h // g]) / np.where(l > 0, l, 1)
    return out


def torch_attention(q, k, v, causal):
    """torch.nn.functional.scaled_dot_product_attention on the CPU, in the
    inputs' dtype; None when torch is not installed."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    tdt = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
           "float64": torch.float64}[q.dtype.name]
    g = q.shape[2] // k.shape[2]

    def t(a, rep=1):  # [B, S, H, D] -> [B, H, S, D]
        x = torch.from_numpy(a.astype(np.float32)).to(tdt).transpose(1, 2)
        return x.repeat_interleave(rep, dim=1) if rep > 1 else x

    tq, tk, tv = t(q), t(k, g), t(v, g)  # KV heads repeated once, outside the timing

    def call():
        with torch.no_grad():
            return F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
    return call, torch.__version__


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
    """(output as NumPy, best time) of flashc on `backend`."""
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
    ap.add_argument("--no-torch", action="store_true", help="leave torch out even when installed")
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

    header = "%-22s %-9s %10s %9s %10s  %s" % (
        "implementation", "dtype", "time (ms)", "GFLOP/s", "rel err", "check")
    print(header)
    print("-" * len(header))
    row = "%-22s %-9s %10.2f %9.1f %10.2e  %s"
    failed = []
    speedups = []  # (dtype, peer, flashc cpu time / peer time)
    for dtype in dtypes:
        dt = np_dtype(dtype)
        q, k, v = (a.astype(dt) for a in (q64, k64, v64))
        # The float64 reference from the rounded inputs: every result is checked against it.
        t0 = time.perf_counter()
        ref = numpy_attention(q, k, v, causal)
        t_ref = time.perf_counter() - t0
        tol = TOLERANCE[dtype]
        results, times = {}, {}
        for backend in backends:
            try:
                o, t = run_backend(backend, q, k, v, causal, args.repeat)
            except flashc.FlashcError as e:
                print("%-22s %-9s  FAILED: %s" % ("flashc " + backend, dtype, e))
                failed.append((backend, dtype, str(e)))
                continue
            results[backend], times[backend] = o, t
            err = rel_err(o, ref)
            cross_err = 0.0
            if backend != backends[0] and backends[0] in results:
                cross_err = rel_err(o, np.asarray(results[backends[0]], np.float64))
            good = err <= tol and cross_err <= 2 * tol
            if not good:
                failed.append((backend, dtype, "rel err %.3g (vs %s %.3g) > %.3g"
                               % (err, backends[0], cross_err, tol)))
            print(row % ("flashc " + backend, dtype, t * 1e3, flops / t / 1e9, err,
                         "ok" if good else "FAIL (tol %.0e)" % tol))
        # Peers on the same inputs: checked against the same reference, never failing the demo.
        peers = [("numpy float64", t_ref, ref)]
        if dtype != "float64":
            math_dt = np.float32 if dtype in ("float32", "float16", "bfloat16") else np.float64
            o = numpy_attention(q, k, v, causal, math_dt)
            t = timed(lambda: numpy_attention(q, k, v, causal, math_dt), max(1, args.repeat - 1))
            peers.append(("numpy float32" + (" math" if dtype != "float32" else ""), t, o))
        tor = torch_attention(q, k, v, causal) if not args.no_torch else None
        if tor is not None:
            call, tver = tor
            o = call().float().transpose(1, 2).numpy()
            peers.append(("torch %s sdpa" % tver.split("+")[0], timed(call, args.repeat), o))
        for name, t, o in peers:
            print(row % (name, dtype, t * 1e3, flops / t / 1e9, rel_err(o, ref), "(peer)"))
            if "cpu" in times:
                speedups.append((dtype, name, t / times["cpu"]))
    print()
    if speedups:
        print("flashc cpu speed-up over each peer (same inputs, same machine): "
              + ", ".join("%s %s %.1fx" % (d, n, x) for d, n, x in speedups))
    if failed:
        for b, d, why in failed:
            print("FAILED: %s %s: %s" % (b, d, why))
        return 1
    print("all checks passed (max relative error vs the float64 NumPy reference within tolerance)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
