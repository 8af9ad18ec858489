#!/usr/bin/env python3
"""CPU attention forward and backward: flashc (fp32) next to a NumPy/BLAS
implementation that materialises S = QKᵀ, measured in the same run on the
same machine.

    python benchmarks/bench_attn_cpu.py                  # threads = all cores
    python benchmarks/bench_attn_cpu.py --threads 1,2 --json out.json
    python benchmarks/bench_attn_cpu.py --quick          # S ≤ 2k, one rep
    python benchmarks/bench_attn_cpu.py --no-bwd         # forward only

FLOPs as PERF.md counts them: 4·B·H·Sq·Sk·D, halved when causal; for the
sliding-window series the useful work 4·B·H·D·Σ_i (visible keys of row i).
The NumPy peer computes the same thing (masked softmax in fp32) with BLAS
matmuls per head; its cost does not shrink with a window, flashc's does.
The backward (flashc.attention_backward, from the forward's o and lse) runs
over the same S/D/causal grid, FLOPs = 2.5 × the forward's; its NumPy peer
recomputes P = softmax(S) with the masks and forms dV = Pᵀ dO, dP = dO Vᵀ,
dS = P∘(dP − rowsum(dO∘O)), dQ = scale·dS K, dK = scale·dSᵀ Q per head with
BLAS matmuls. Both are checked against each other on a small shape first.
Also printed: one BLAS GEMM (2048³, fp32) with the same threads, the rate
ceiling. Thread counts are fixed when the libraries load, so each count in
--threads runs in its own process (this script, re-executed).
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", default=str(os.cpu_count() or 1),
                   help="comma-separated thread counts (default: all cores)")
    p.add_argument("--sizes", default="512,1024,2048,4096,8192", help="sequence lengths S")
    p.add_argument("--dims", default="64,128", help="head dims D")
    p.add_argument("--heads", type=int, default=4, help="heads H (B = 1)")
    p.add_argument("--window-seq", type=int, default=4096, help="S of the sliding-window series")
    p.add_argument("--windows", default="128,512,2048", help="window sizes W (causal, left = W)")
    p.add_argument("--reps", type=int, default=3,
                   help="timed repeats: the table shows the median, the JSON also the minimum")
    p.add_argument("--no-numpy", action="store_true", help="skip the NumPy peer")
    p.add_argument("--no-bwd", action="store_true", help="skip the backward table")
    p.add_argument("--quick", action="store_true", help="S ≤ 2k, window S = 2k, one rep")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--_child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.quick:
        a.sizes = ",".join(s for s in a.sizes.split(",") if int(s) <= 2048)
        a.window_seq = min(a.window_seq, 2048)
        a.reps = 1
    return a


def numpy_mask(np, S, causal, window):
    """Additive (S, S) fp32 mask (0 visible, −inf not), or None when all visible."""
    if not (causal or window >= 0):
        return None
    i = np.arange(S)[:, None]
    j = np.arange(S)[None, :]
    vis = j <= i if causal else np.ones((S, S), bool)
    if window >= 0:
        vis &= j >= i - window
    return np.where(vis, np.float32(0), np.float32(-np.inf))


def numpy_attention(np, q, k, v, scale, causal, window):
    """o = softmax(scale·QKᵀ + mask)·V per head, S materialised (fp32)."""
    B, S, H, D = q.shape
    o = np.empty_like(q)
    mask = numpy_mask(np, S, causal, window)
    for b in range(B):
        for h in range(H):
            s = q[b, :, h, :] @ k[b, :, h, :].T
            s *= np.float32(scale)
            if mask is not None:
                s += mask
            s -= s.max(axis=1, keepdims=True)
            np.exp(s, out=s)
            l = s.sum(axis=1, keepdims=True)
            o[b, :, h, :] = (s @ v[b, :, h, :]) / l
    return o


def numpy_attention_backward(np, do, q, k, v, o, scale, causal, window):
    """(dq, dk, dv) of numpy_attention, P recomputed and materialised (fp32).
    q, k, v, o, do are [B, S, H, D]; every row has a visible key (the diagonal)."""
    B, S, H, D = q.shape
    dq, dk, dv = np.empty_like(q), np.empty_like(k), np.empty_like(v)
    mask = numpy_mask(np, S, causal, window)
    sc = np.float32(scale)
    for b in range(B):
        for h in range(H):
            qh, kh, vh = q[b, :, h, :], k[b, :, h, :], v[b, :, h, :]
            doh, oh = do[b, :, h, :], o[b, :, h, :]
            # forward: P = softmax(scale·Q Kᵀ + mask), O = P V
            p = qh @ kh.T
            p *= sc
            if mask is not None:
                p += mask
            p -= p.max(axis=1, keepdims=True)
            np.exp(p, out=p)
            p /= p.sum(axis=1, keepdims=True)
            dv[b, :, h, :] = p.T @ doh                          # dV = Pᵀ dO
            delta = np.einsum("id,id->i", doh, oh)[:, None]     # Δ = rowsum(dO∘O)
            ds = doh @ vh.T                                     # dP = dO Vᵀ
            ds -= delta
            ds *= p                                             # dS = P∘(dP − Δ)
            ds *= sc
            dq[b, :, h, :] = ds @ kh                            # dQ = scale·dS K
            dk[b, :, h, :] = ds.T @ qh                          # dK = scale·dSᵀ Q
    return dq, dk, dv


def check_backward(np, flashc, rng):
    """The NumPy backward and flashc's agree (fp32) on a small shape."""
    B, S, H, D = 1, 77, 2, 40
    for causal, window in ((False, -1), (True, -1), (True, 9)):
        q, k, v, do = (rng.standard_normal((B, S, H, D), dtype=np.float32) for _ in range(4))
        win = (window, 0) if window >= 0 else ((-1, 0) if causal else (-1, -1))
        o, lse = flashc.attention(q, k, v, causal=causal, window=win, return_lse=True,
                                  backend="cpu")
        got = flashc.attention_backward(do, q, k, v, o, lse, causal=causal, window=win,
                                        backend="cpu")
        ref = numpy_attention_backward(np, do, q, k, v, o, 1.0 / np.sqrt(D), causal, window)
        for name, g, r in zip(("dq", "dk", "dv"), got, ref):
            err = float(np.max(np.abs(g - r)) / np.max(np.abs(r)))
            assert err < 1e-4, f"backward {name} causal={causal} window={window}: rel err {err:.2e}"


def useful_flops(B, H, S, D, causal, window):
    keys = 0
    for i in range(S):
        hi = i + 1 if causal else S
        lo = max(0, i - window) if window >= 0 else 0
        keys += hi - lo
    return 4.0 * B * H * D * keys


def timeit(fn, reps):
    fn()  # warm-up (page faults, thread pool start)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2], ts[0]


def run_child(a):
    import numpy as np
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
    import flashc

    threads = int(os.environ.get("OMP_NUM_THREADS", "0"))
    rng = np.random.default_rng(0)
    rows = []
    bwd_rows = []

    def case(S, D, causal, window, series):
        B, H = 1, a.heads
        q = rng.standard_normal((B, S, H, D), dtype=np.float32)
        k = rng.standard_normal((B, S, H, D), dtype=np.float32)
        v = rng.standard_normal((B, S, H, D), dtype=np.float32)
        scale = 1.0 / np.sqrt(D)
        win = (window, 0) if window >= 0 else ((-1, 0) if causal else (-1, -1))
        out = np.empty_like(q)
        f = useful_flops(B, H, S, D, causal, window)
        t, tmin = timeit(lambda: flashc.attention(q, k, v, causal=causal, window=win, out=out,
                                                  backend="cpu"), a.reps)
        row = {"series": series, "B": B, "H": H, "S": S, "D": D, "causal": causal,
               "window": window, "flops": f, "flashc_s": t, "flashc_min_s": tmin,
               "flashc_gflops": f / t * 1e-9}
        if not a.no_numpy:
            tn, tnmin = timeit(lambda: numpy_attention(np, q, k, v, scale, causal, window), a.reps)
            row.update(numpy_s=tn, numpy_min_s=tnmin, numpy_gflops=f / tn * 1e-9, speedup=tn / t)
            ref = numpy_attention(np, q, k, v, scale, causal, window)
            row["max_abs_diff"] = float(np.max(np.abs(ref - out)))
        rows.append(row)
        print_row(row)
        sys.stdout.flush()

    def bwd_case(S, D, causal):
        B, H = 1, a.heads
        q, k, v, do = (rng.standard_normal((B, S, H, D), dtype=np.float32) for _ in range(4))
        scale = 1.0 / np.sqrt(D)
        win = (-1, 0) if causal else (-1, -1)
        o, lse = flashc.attention(q, k, v, causal=causal, window=win, return_lse=True,
                                  backend="cpu")
        grads = tuple(np.empty_like(x) for x in (q, k, v))
        f = 2.5 * useful_flops(B, H, S, D, causal, -1)
        t, tmin = timeit(lambda: flashc.attention_backward(do, q, k, v, o, lse, causal=causal,
                                                           window=win, out=grads,
                                                           backend="cpu"), a.reps)
        row = {"series": "bwd", "B": B, "H": H, "S": S, "D": D, "causal": causal,
               "window": -1, "flops": f, "flashc_s": t, "flashc_min_s": tmin,
               "flashc_gflops": f / t * 1e-9}
        if not a.no_numpy:
            ref = []
            tn, tnmin = timeit(lambda: ref.append(numpy_attention_backward(
                np, do, q, k, v, o, scale, causal, -1)), a.reps)
            row.update(numpy_s=tn, numpy_min_s=tnmin, numpy_gflops=f / tn * 1e-9, speedup=tn / t)
            row["max_abs_diff"] = float(max(np.max(np.abs(r - g))
                                            for r, g in zip(ref[-1], grads)))
        bwd_rows.append(row)
        print_row(row)
        sys.stdout.flush()

    print(f"# threads={threads} isa={flashc.cpu_isa()} numpy={np.__version__} "
          f"cpu={platform.processor() or platform.machine()}")
    n = 2048
    x = rng.standard_normal((n, n), dtype=np.float32)
    tg = timeit(lambda: x @ x, max(a.reps, 3))[0]
    gemm = 2.0 * n ** 3 / tg * 1e-9
    print(f"# BLAS GEMM {n}^3 fp32: {gemm:.1f} GFLOP/s (the rate ceiling)")
    print_header()
    for S in [int(s) for s in a.sizes.split(",") if s]:
        for D in [int(d) for d in a.dims.split(",") if d]:
            for causal in (False, True):
                case(S, D, causal, -1, "size")
    for W in [int(w) for w in a.windows.split(",") if w]:
        for D in [int(d) for d in a.dims.split(",") if d]:
            case(a.window_seq, D, True, W, "window")
    if not a.no_bwd:
        if not a.no_numpy:
            check_backward(np, flashc, rng)
        print("# backward: flashc.attention_backward vs NumPy materialised backward, "
              "FLOPs = 2.5 x forward")
        print_header()
        for S in [int(s) for s in a.sizes.split(",") if s]:
            for D in [int(d) for d in a.dims.split(",") if d]:
                for causal in (False, True):
                    bwd_case(S, D, causal)
    return {"threads": threads, "isa": flashc.cpu_isa(), "numpy": np.__version__,
            "gemm_gflops": gemm, "rows": rows, "bwd_rows": bwd_rows}


def print_header():
    print(f"{'series':>6} {'S':>5} {'D':>4} {'causal':>6} {'W':>5} | {'flashc ms':>9} "
          f"{'GFLOP/s':>8} | {'numpy ms':>9} {'GFLOP/s':>8} | {'speedup':>7}")


def print_row(r):
    np_part = (f"{r['numpy_s'] * 1e3:9.2f} {r['numpy_gflops']:8.1f} | {r['speedup']:6.1f}x"
               if "numpy_s" in r else f"{'-':>9} {'-':>8} | {'-':>7}")
    print(f"{r['series']:>6} {r['S']:5d} {r['D']:4d} {str(r['causal']):>6} {r['window']:5d} | "
          f"{r['flashc_s'] * 1e3:9.2f} {r['flashc_gflops']:8.1f} | {np_part}")


def main():
    a = parse_args()
    if a._child:
        res = run_child(a)
        print("@@JSON " + json.dumps(res))
        return
    results = []
    for t in [int(x) for x in a.threads.split(",") if x]:
        env = dict(os.environ)
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(t)
        argv = [sys.executable, os.path.abspath(__file__), "--_child", "--sizes", a.sizes,
                "--dims", a.dims, "--heads", str(a.heads), "--window-seq", str(a.window_seq),
                "--windows", a.windows, "--reps", str(a.reps)] + (["--no-numpy"] if a.no_numpy else []) \
            + (["--no-bwd"] if a.no_bwd else [])
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
        for line in proc.stdout:
            if line.startswith("@@JSON "):
                results.append(json.loads(line[7:]))
            else:
                print(line, end="", flush=True)
        if proc.wait():
            sys.exit(proc.returncode)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"benchmark": "attn_fwd_cpu", "machine": platform.node(),
                       "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
