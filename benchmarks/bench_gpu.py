#!/usr/bin/env python3
"""GPU benchmark of flashc next to its peers, measured in the same run.

    python3 benchmarks/bench_gpu.py [--quick] [--json PATH] [--no-flashc]

Attention (../shared/PERF.md shapes: 16k tokens, B = 16384/S, Hq = 2048/D,
S in {512, 1k, 2k, 4k, 8k, 16k}, D in {64, 128}, causal and not, bf16 and
fp16): flashc forward and forward+backward TFLOP/s next to torch SDPA under
sdpa_kernel(FLASH_ATTENTION) (FlashAttention-2) and sdpa_kernel(CUDNN_ATTENTION).
FLOPs: forward 4·B·Hq·S²·D (halved when causal), backward 2.5 × forward.
Weighted row-sum: GB/s of flashc_weighted_sum (bytes of x + w + y) next to a
device-to-device copy (bytes read + written) and `x @ w`.

Timing: CUDA events around each call, median of >= 20 repeats after warm-up,
on torch's current stream (flashc is given that stream). Inputs: fresh
uniform random values, never zeros; every tensor is > L2 at the large sizes.

flashc is called through the raw C ABI (python/flashc/_lib.py, ctypes) with
the tensors' data_ptr()s and strides, so the benchmark needs only torch and
libflashc.so (+ libflashc_cuda.so); without them the flashc columns read n/a.
"""
import argparse
import importlib.util
import json
import math
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# ------------------------------------------------------------------ flashc


def load_flashc():
    """The raw ctypes module python/flashc/_lib.py, or (None, reason)."""
    path = os.path.join(REPO, "python", "flashc", "_lib.py")
    try:
        spec = importlib.util.spec_from_file_location("flashc_raw_lib", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    except Exception as e:  # ImportError when libflashc.so is not built
        return None, str(e)
    if not mod.flashc_backend_available(mod.FLASHC_BACKEND_CUDA):
        return None, mod.flashc_last_error().decode()  # "CUDA backend unavailable: <why>"
    return mod, ""


_DT = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.float64: 3}


def ftensor(L, t):
    """flashc_tensor describing torch tensor t (strides in elements)."""
    ft = L.flashc_tensor()
    ft.data = t.data_ptr()
    ft.dtype = _DT[t.dtype]
    ft.ndim = t.dim()
    for i in range(t.dim()):
        ft.shape[i] = t.shape[i]
        ft.strides[i] = t.stride(i)
    return ft


def check(L, st, what):
    if st != 0:
        raise RuntimeError("%s: %s: %s" % (what, L.flashc_status_string(st).decode(),
                                          L.flashc_last_error().decode()))


def flashc_attn(L, q, k, v, o, lse, causal, stream):
    p = L.attn_params_default() if hasattr(L, "attn_params_default") else L.flashc_attn_params_default()
    p.backend = L.FLASHC_BACKEND_CUDA
    p.causal = 1 if causal else 0
    p.stream = stream
    tq, tk, tv, to, tl = (ftensor(L, x) for x in (q, k, v, o, lse))
    ct = __import__("ctypes")
    check(L, L.flashc_attn_fwd(ct.byref(tq), ct.byref(tk), ct.byref(tv), ct.byref(to),
                               ct.byref(tl), ct.byref(p)), "flashc_attn_fwd")


BWD_DETERMINISTIC = 1  # the ABI's default; --bwd-nondeterministic measures deterministic = 0


def flashc_attn_bwd(L, do, q, k, v, o, lse, dq, dk, dv, causal, stream):
    p = L.attn_params_default() if hasattr(L, "attn_params_default") else L.flashc_attn_params_default()
    p.backend = L.FLASHC_BACKEND_CUDA
    p.causal = 1 if causal else 0
    p.deterministic = BWD_DETERMINISTIC
    p.stream = stream
    ct = __import__("ctypes")
    ts = [ftensor(L, x) for x in (do, q, k, v, o, lse, dq, dk, dv)]
    check(L, L.flashc_attn_bwd(*[ct.byref(x) for x in ts], None, ct.byref(p)), "flashc_attn_bwd")


# ------------------------------------------------------------------ timing


def bench(fn, reps=30, warmup=5):
    """Median milliseconds of fn() over reps CUDA-event-timed calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    s = torch.cuda.current_stream()
    for _ in range(reps):
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record(s)
        fn()
        e1.record(s)
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
    times.sort()
    return times[len(times) // 2]


def tflops(flop, ms):
    return flop / (ms * 1e-3) / 1e12 if ms and ms == ms else float("nan")


# --------------------------------------------------------------- attention


def attn_rows(L, quick, reps, bwd=True):
    rows = []
    Ss = [1024, 4096, 16384] if quick else [512, 1024, 2048, 4096, 8192, 16384]
    dts = [torch.bfloat16] if quick else [torch.bfloat16, torch.float16]
    stream = torch.cuda.current_stream().cuda_stream
    for dt in dts:
        for D in (64, 128):
            for causal in (False, True):
                for S in Ss:
                    B, H = 16384 // S, 2048 // D
                    # flashc layout [B, S, H, D]; SDPA wants [B, H, S, D]: same memory, transposed view
                    q, k, v = (torch.empty(B, S, H, D, device="cuda", dtype=dt).uniform_(-1, 1)
                               for _ in range(3))
                    do = torch.empty_like(q).uniform_(-1, 1)
                    fl = 4.0 * B * H * S * S * D / (2 if causal else 1)
                    r = {"dtype": str(dt).split(".")[-1], "S": S, "D": D, "B": B, "H": H,
                         "causal": causal, "fwd_flop": fl}
                    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
                    for name, be in (("fa2", SDPBackend.FLASH_ATTENTION),
                                     ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                        try:
                            with sdpa_kernel(be):
                                r[name + "_fwd_ms"] = bench(lambda: F.scaled_dot_product_attention(
                                    qt, kt, vt, is_causal=causal), reps)
                                qg, kg, vg = (x.detach().requires_grad_() for x in (qt, kt, vt))
                                dot = do.transpose(1, 2)

                                def fb():
                                    out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
                                    out.backward(dot)
                                if bwd:
                                    r[name + "_fb_ms"] = bench(fb, max(reps // 2, 20))
                        except Exception as e:
                            r[name + "_error"] = str(e).splitlines()[0][:120]
                    if L is not None:
                        o = torch.empty_like(q)
                        lse = torch.empty(B, H, S, device="cuda", dtype=torch.float32)
                        try:
                            r["flashc_fwd_ms"] = bench(lambda: flashc_attn(L, q, k, v, o, lse, causal, stream), reps)
                            # reference check against SDPA (math on the same inputs)
                            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                                ref = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal).transpose(1, 2)
                            r["flashc_vs_fa2_rel_l2"] = ((o.float() - ref.float()).norm() / ref.float().norm()).item()
                            dq, dk, dv = (torch.empty_like(x) for x in (q, k, v))

                            def fcb():
                                flashc_attn(L, q, k, v, o, lse, causal, stream)
                                flashc_attn_bwd(L, do, q, k, v, o, lse, dq, dk, dv, causal, stream)
                            if bwd:
                                r["flashc_fb_ms"] = bench(fcb, max(reps // 2, 20))
                        except Exception as e:
                            r["flashc_error"] = str(e)[:200]
                    for key in ("flashc", "fa2", "cudnn"):
                        r[key + "_fwd_tflops"] = tflops(fl, r.get(key + "_fwd_ms"))
                        r[key + "_fb_tflops"] = tflops(3.5 * fl, r.get(key + "_fb_ms"))
                    rows.append(r)
                    print("%-8s D=%3d causal=%d S=%5d | fwd TFLOP/s flashc %6.1f  fa2 %6.1f  cudnn %6.1f"
                          " | fwd+bwd flashc %6.1f  fa2 %6.1f  cudnn %6.1f%s" % (
                              r["dtype"], D, causal, S, r["flashc_fwd_tflops"], r["fa2_fwd_tflops"],
                              r["cudnn_fwd_tflops"], r["flashc_fb_tflops"], r["fa2_fb_tflops"],
                              r["cudnn_fb_tflops"],
                              ("  [%s]" % r["flashc_error"]) if "flashc_error" in r else ""),
                          flush=True)
                    del q, k, v, do
    return rows


# ------------------------------------------------------------ weighted sum


def wsum_rows(L, quick, reps):
    rows = []
    shapes = [(1 << 20, 128)] if quick else [(1 << 20, 128), (1 << 16, 4096), (1 << 22, 64)]
    stream = torch.cuda.current_stream().cuda_stream
    for dt in (torch.float32, torch.bfloat16):
        for R, D in shapes:
            x = torch.empty(R, D, device="cuda", dtype=dt).uniform_(-1, 1)
            w = torch.empty(D, device="cuda", dtype=dt).uniform_(-1, 1)
            y = torch.empty(R, device="cuda", dtype=dt)
            nbytes = (x.numel() + w.numel() + y.numel()) * x.element_size()
            dst = torch.empty_like(x)
            r = {"dtype": str(dt).split(".")[-1], "R": R, "D": D, "bytes": nbytes}
            ms = bench(lambda: dst.copy_(x), reps)
            r["copy_gbs"] = 2 * x.numel() * x.element_size() / (ms * 1e-3) / 1e9
            ms = bench(lambda: torch.matmul(x, w, out=y), reps)
            r["matmul_gbs"] = nbytes / (ms * 1e-3) / 1e9
            r["flashc_gbs"] = float("nan")
            if L is not None:
                ct = __import__("ctypes")
                p = L.exec_params_default() if hasattr(L, "exec_params_default") else L.flashc_exec_params_default()
                p.backend = L.FLASHC_BACKEND_CUDA
                p.stream = stream
                tx, tw, ty = (ftensor(L, t) for t in (x, w, y))
                try:
                    ms = bench(lambda: check(L, L.flashc_weighted_sum(ct.byref(tx), ct.byref(tw), ct.byref(ty),
                                                                     ct.byref(p)), "flashc_weighted_sum"), reps)
                    r["flashc_gbs"] = nbytes / (ms * 1e-3) / 1e9
                except Exception as e:
                    r["flashc_error"] = str(e)[:200]
            rows.append(r)
            print("wsum %-8s R=%8d D=%5d | GB/s flashc %7.1f  x@w %7.1f  copy %7.1f" % (
                r["dtype"], R, D, r["flashc_gbs"], r["matmul_gbs"], r["copy_gbs"]), flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="bf16, S in {1k, 4k, 16k}, one wsum shape")
    ap.add_argument("--json", help="write all results to this file")
    ap.add_argument("--no-flashc", action="store_true", help="peers only")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--skip-wsum", action="store_true")
    ap.add_argument("--no-bwd", action="store_true", help="forward timings only")
    ap.add_argument("--bwd-nondeterministic", action="store_true",
                    help="flashc backward with deterministic = 0 (default: 1, the ABI default)")
    a = ap.parse_args()
    global BWD_DETERMINISTIC
    BWD_DETERMINISTIC = 0 if a.bwd_nondeterministic else 1
    torch.manual_seed(0)
    L, why = (None, "--no-flashc") if a.no_flashc else load_flashc()
    print("device: %s, torch %s, flashc: %s, flashc backward deterministic=%d" % (
        torch.cuda.get_device_name(), torch.__version__, "loaded" if L else "n/a (%s)" % why,
        BWD_DETERMINISTIC), flush=True)
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "bwd_deterministic": BWD_DETERMINISTIC,
           "attention": attn_rows(L, a.quick, a.reps, not a.no_bwd)}
    if not a.skip_wsum:
        res["weighted_sum"] = wsum_rows(L, a.quick, a.reps)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
