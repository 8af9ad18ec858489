#!/usr/bin/env python3
"""Score modifiers on the GPU: flashc through flashc.torch.attention (as a user
calls it), plain / softcap / ALiBi / both, forward and forward+backward, next
to the peers measured in the same process.

    python3 benchmarks/bench_mods_gpu.py [--quick] [--json PATH] [--label NAME]
                                         [--plain-only] [--no-flex]

Shapes (../shared/PERF.md): 16k tokens in total (B = 16384 / S), model width
2048 (Hq = 2048 / D), bf16. FLOPs: forward 4·B·Hq·Sq·Sk·D, halved when causal;
forward+backward 3.5 × forward (useful work).

Peers: SDPA cuDNN and SDPA flash (FlashAttention-2) for plain rows; FlexAttention
(torch.compile(flex_attention) with a score_mod) for softcap and ALiBi rows, the
kernel a user would pick for those today. Timing: CUDA events, median of the
repeats after warm-up, on torch's current stream.

--plain-only runs only the rows without modifiers: with it the script runs
against an older flashc (one without the softcap/alibi keywords), so that a
before/after pair can be taken in one GPU session (scripts/gpu-check does).
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(os.path.dirname(HERE), "python"))  # after PYTHONPATH: --label base may point elsewhere


def bench(fn, reps, warmup=5):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


def alibi_slopes(H):
    # The ALiBi paper's geometric slopes 2^(-8 h / H).
    return torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)], dtype=torch.float32, device="cuda")


def flex_peer(B, H, S, D, causal, softcap, alibi):
    """A callable running FlexAttention with the same modifiers, or None."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except Exception:
        return None
    slopes = alibi_slopes(H) if alibi else None

    def score_mod(score, b, h, q_idx, kv_idx):
        if softcap:
            score = softcap * torch.tanh(score / softcap)
        if alibi:
            score = score - slopes[h] * (q_idx - kv_idx).abs()
        return score

    block_mask = None
    if causal:
        block_mask = create_block_mask(lambda b, h, q, kv: q >= kv, None, None, S, S, device="cuda")
    fx = torch.compile(flex_attention, dynamic=False)
    return lambda q, k, v: fx(q, k, v, score_mod=score_mod, block_mask=block_mask)


def rows(quick, plain_only, softcap=30.0):
    shapes = [(128, 1024, False), (128, 4096, False), (128, 16384, False), (128, 4096, True), (64, 1024, True)]
    if quick:
        shapes = [(128, 1024, False), (128, 4096, False), (128, 4096, True)]
    mods = [("plain", 0.0, False)]
    if not plain_only:
        mods += [("softcap", softcap, False), ("alibi", 0.0, True), ("softcap+alibi", softcap, True)]
    for D, S, causal in shapes:
        for name, cap, alibi in mods:
            yield D, S, causal, name, cap, alibi


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--label", default="flashc")
    ap.add_argument("--plain-only", action="store_true")
    ap.add_argument("--no-flex", action="store_true")
    ap.add_argument("--no-bwd", action="store_true")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--softcap", type=float, default=30.0, help="the softcap rows' cap (default 30)")
    args = ap.parse_args()

    import flashc.torch as ft

    torch.manual_seed(0)
    dt = torch.bfloat16
    out = []
    print("%-8s %-5s %-6s %-14s %-4s %10s %10s %10s %10s" %
          ("label", "D", "S", "mods", "pass", "flashc", "cuDNN", "FA2", "Flex"))
    for D, S, causal, name, cap, alibi in rows(args.quick, args.plain_only, args.softcap):
        B, H = 16384 // S, 2048 // D
        flop = 4.0 * B * H * S * S * D / (2 if causal else 1)
        q = torch.randn(B, S, H, D, device="cuda", dtype=dt)
        k = torch.randn(B, S, H, D, device="cuda", dtype=dt)
        v = torch.randn(B, S, H, D, device="cuda", dtype=dt)
        kw = dict(causal=causal)
        if cap:
            kw["softcap"] = cap
        if alibi:
            kw["alibi_slopes"] = alibi_slopes(H)
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))  # SDPA / Flex layout [B, H, S, D]
        for bwd in ([False] if args.no_bwd else [False, True]):
            f = flop * (3.5 if bwd else 1.0)
            res = {"label": args.label, "D": D, "S": S, "B": B, "H": H, "causal": causal, "mods": name,
                   "pass": "fwd+bwd" if bwd else "fwd"}

            def timed(call):
                if not bwd:
                    with torch.no_grad():
                        return bench(lambda: call(q, k, v), args.reps)
                qq, kk, vv = (x.detach().requires_grad_() for x in (q, k, v))
                do = torch.randn_like(q)

                def step():
                    o = call(qq, kk, vv)
                    torch.autograd.backward(o, do)
                return bench(step, max(5, args.reps // 2))

            try:
                ms = timed(lambda a, b, c: ft.attention(a, b, c, **kw))
                res["flashc"] = f / ms / 1e9
            except Exception as e:  # noqa: BLE001
                res["flashc_error"] = str(e)[:200]
            if name == "plain":
                for peer, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION)):
                    try:
                        def sd(a, b, c, be=be):
                            with sdpa_kernel(be):
                                return F.scaled_dot_product_attention(
                                    a.transpose(1, 2), b.transpose(1, 2), c.transpose(1, 2),
                                    is_causal=causal).transpose(1, 2)
                        res[peer] = f / timed(sd) / 1e9
                    except Exception as e:  # noqa: BLE001
                        res[peer + "_error"] = str(e)[:200]
            elif not args.no_flex and S == 4096 and D == 128 and name != "softcap+alibi":
                # (each FlexAttention row costs a torch.compile: a few representative shapes)
                fx = flex_peer(B, H, S, D, causal, cap, alibi)
                if fx is not None:
                    try:
                        res["flex"] = f / timed(lambda a, b, c: fx(a.transpose(1, 2), b.transpose(1, 2),
                                                                   c.transpose(1, 2)).transpose(1, 2)) / 1e9
                    except Exception as e:  # noqa: BLE001
                        res["flex_error"] = str(e)[:200]
            out.append(res)

            def fmt(x):
                return "%10.1f" % res[x] if x in res else "%10s" % "-"
            print("%-8s %-5d %-6s %-14s %-4s %s %s %s %s" %
                  (args.label, D, "%dk%s" % (S // 1024, "c" if causal else ""), name,
                   "fb" if bwd else "f", fmt("flashc"), fmt("cudnn"), fmt("fa2"), fmt("flex")), flush=True)
            if "flashc_error" in res:
                print("   flashc error:", res["flashc_error"])
        del q, k, v
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": out}, fh,
                      indent=1)


if __name__ == "__main__":
    main()
