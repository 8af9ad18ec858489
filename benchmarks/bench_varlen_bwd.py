#!/usr/bin/env python3
"""Packed variable-length training (issue 9's varlen backward): forward and
forward+backward TFLOP/s of flashc.torch.attention_varlen with autograd, next
to what a user without varlen runs — torch SDPA (cuDNN and FlashAttention-2
backends) on the batch padded to its longest sequence — and next to flashc's
own mma.sync kernels on the same packed batch (FLASHC_CUDA_KERNEL=mma, read
at every call: the path varlen took on Hopper before the wgmma backward took
packed sequences). All in one process, bf16.

    python3 benchmarks/bench_varlen_bwd.py [--reps N] [--json PATH]

FLOPs (useful work): forward Σ_b 4·Hq·D·Sq_b·Sk_b (halved when causal),
forward+backward 3.5 × forward, the backward alone 2.5 ×. Timing: CUDA events
around the call (forward: no_grad; forward+backward: out = f(...);
out.backward(do)), median of --reps after warm-up; "bwd" = fb − f medians.
Fresh random inputs.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import flashc.torch as ft  # noqa: E402
from bench_bwd_gpu import timed as bench  # noqa: E402  (CUDA events, median, ms)

G = torch.Generator().manual_seed(0)
LONG8 = [4096, 2048, 1024, 900, 512, 300, 128, 64]
# name, lengths, Hq, Hkv, D, causal
ROWS = [
    ("8 prompts 64..4096 D=128 causal", LONG8, 16, 16, 128, True),
    ("8 prompts 64..4096 D=128", LONG8, 16, 16, 128, False),
    ("8 prompts 64..4096 D=64 causal", LONG8, 32, 32, 64, True),
    ("4 docs of 4096 GQA 32/8 D=128 causal", [4096] * 4, 32, 8, 128, True),
    ("64 docs 128..1024 D=128 causal", None, 16, 16, 128, True),
]


def try_ms(f):
    try:
        return f()
    except RuntimeError:
        return float("nan")


def row(name, lens, Hq, Hkv, D, causal, reps):
    dev, dt = "cuda", torch.bfloat16
    if lens is None:
        lens = torch.randint(128, 1025, (64,), generator=G).tolist()
    B, T, Smax = len(lens), sum(lens), max(lens)
    cu = torch.tensor([0] + list(__import__("itertools").accumulate(lens)), dtype=torch.int32, device=dev)
    mk = lambda h: torch.randn(T, h, D, generator=G).to(dt).to(dev).requires_grad_()  # noqa: E731
    q, k, v = mk(Hq), mk(Hkv), mk(Hkv)
    do = torch.randn(T, Hq, D, generator=G).to(dt).to(dev)
    fl = sum(4 * Hq * D * s * s for s in lens) * (0.5 if causal else 1.0)

    def f_fwd():
        with torch.no_grad():
            ft.attention_varlen(q, k, v, cu, cu, Smax, Smax, causal=causal)

    def f_fb():
        ft.attention_varlen(q, k, v, cu, cu, Smax, Smax, causal=causal).backward(do)

    res = {}
    res["flashc_f"] = bench(f_fwd, reps)
    res["flashc_fb"] = bench(f_fb, reps)
    os.environ["FLASHC_CUDA_KERNEL"] = "mma"
    try:
        res["mma_f"] = bench(f_fwd, reps)
        res["mma_fb"] = bench(f_fb, reps)
    finally:
        del os.environ["FLASHC_CUDA_KERNEL"]
    # padded [B, H, Smax, D] (zeros past each length; causal masks align top-left here,
    # which for Sq = Sk is the same mask)
    qp, kp, vp = (torch.zeros(B, h, Smax, D, dtype=dt, device=dev) for h in (Hq, Hkv, Hkv))
    for b, s in enumerate(lens):
        o0 = int(cu[b])
        for xp, x in ((qp, q), (kp, k), (vp, v)):
            xp[b, :, :s] = x.detach()[o0:o0 + s].transpose(0, 1)
    for xp in (qp, kp, vp):
        xp.requires_grad_()
    dop = torch.randn(B, Hq, Smax, D, generator=G).to(dt).to(dev)
    gqa = Hq != Hkv

    def pad(backend, bwd):
        def f():
            if bwd:
                F.scaled_dot_product_attention(qp, kp, vp, is_causal=causal, enable_gqa=gqa).backward(dop)
            else:
                with torch.no_grad():
                    F.scaled_dot_product_attention(qp, kp, vp, is_causal=causal, enable_gqa=gqa)
        with sdpa_kernel(backend):
            return bench(f, reps)

    for nm, be in (("fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        res[nm + "_f"] = try_ms(lambda: pad(be, False))
        res[nm + "_fb"] = try_ms(lambda: pad(be, True))
    tf = {key: (fl * (1.0 if key.endswith("_f") else 3.5)) / (ms * 1e-3) / 1e12 for key, ms in res.items()}
    bwd = {m: 2.5 * fl / ((res[m + "_fb"] - res[m + "_f"]) * 1e-3) / 1e12 for m in ("flashc", "mma", "fa2", "cudnn")}
    print("%-40s fwd %6.1f (mma %6.1f, cuDNN %6.1f, FA2 %6.1f) | fwd+bwd %6.1f (mma %6.1f, cuDNN %6.1f, FA2 %6.1f)"
          " | bwd %6.1f (mma %6.1f, cuDNN %6.1f)" % (
              name, tf["flashc_f"], tf["mma_f"], tf["cudnn_f"], tf["fa2_f"], tf["flashc_fb"], tf["mma_fb"],
              tf["cudnn_fb"], tf["fa2_fb"], bwd["flashc"], bwd["mma"], bwd["cudnn"]), flush=True)
    return dict(name=name, lens=lens, Hq=Hq, Hkv=Hkv, D=D, causal=causal, dtype="bf16", ms=res, tflops=tf,
                bwd_tflops=bwd)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json")
    args = ap.parse_args()
    print("device: %s, torch %s; TFLOP/s of useful work; padded peers on [B, H, max S, D]"
          % (torch.cuda.get_device_name(), torch.__version__), flush=True)
    out = [row(*r, args.reps) for r in ROWS]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
