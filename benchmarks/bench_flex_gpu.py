#!/usr/bin/env python3
"""Sliding-window and attention-sink shapes of issue 8 against FlexAttention
(torch.compile'd flex_attention with a block mask: what a user picks for
masks SDPA has no kernel for), forward and forward+backward, in one process.

    python3 benchmarks/bench_flex_gpu.py [--reps N] [--json PATH] [--only TEXT]...

Rows (bf16, D 128, GQA 32/8, B·S = 16k tokens): causal sliding window of
W keys (row i sees i − W < j ≤ i), the same plus 4 sink tokens (keys 0..3
visible to every row that is past them: StreamingLLM, flashc.h's
semantics; rel-L2 of the two outputs is printed), and a GPT-OSS-like row
(GQA 64/8, D 64, W = 128, a learned sink logit per head: flashc's `sinks=`;
Flex has no sink term, so its output is rescaled by sigmoid(lse − sink),
the same function, through Flex's differentiable lse). flashc: flashc.torch.attention(causal=True,
window=(W − 1, 0), sink_tokens=...) with autograd (deterministic backward);
Flex: flex_attention(q, k, v, block_mask, enable_gqa=True) compiled once
per row. TFLOP/s of useful work: 4·D per visible (row, key) pair forward,
3.5× that forward+backward. Timing: CUDA events, median of --reps after
warm-up (bench_bwd_gpu.timed).
"""
import argparse
import importlib.util
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import flashc.torch as ft  # noqa: E402

spec = importlib.util.spec_from_file_location("bench_bwd_gpu", os.path.join(HERE, "bench_bwd_gpu.py"))
bb = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bb)

# name, S, W, sink tokens, (Hq, Hkv, D), sink logits
ROWS = [
    ("SWA W=1024 GQA 32/8 S=16k", 16384, 1024, 0, (32, 8, 128), False),
    ("SWA W=1024 + 4 sinks GQA 32/8 S=16k", 16384, 1024, 4, (32, 8, 128), False),
    ("SWA W=4096 GQA 32/8 S=16k", 16384, 4096, 0, (32, 8, 128), False),
    ("GPT-OSS-like W=128 + sink logits, GQA 64/8 D=64 S=8k", 8192, 128, 0, (64, 8, 64), True),
]


def flex_with_lse(flex, qt, kt, vt, bm):
    """Flex's output and its (differentiable) logsumexp, natural log."""
    try:
        from torch.nn.attention.flex_attention import AuxRequest
        o, aux = flex(qt, kt, vt, block_mask=bm, enable_gqa=True, return_aux=AuxRequest(lse=True))
        return o, aux.lse
    except ImportError:
        return flex(qt, kt, vt, block_mask=bm, enable_gqa=True, return_lse=True)


def visible_pairs(S, W, ns):
    i = torch.arange(S, dtype=torch.float64)
    n = torch.clamp(i + 1, max=W)  # the window
    lo = i - W + 1                  # first window key (may be < 0)
    extra = torch.clamp(torch.clamp(lo, min=0), max=ns)  # sink keys below the window
    return float((n + extra).sum())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--json")
    ap.add_argument("--only", action="append", help="run the rows whose name contains TEXT")
    args = ap.parse_args()
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    flex = torch.compile(flex_attention, dynamic=False)
    torch.manual_seed(0)
    print("device: %s, torch %s" % (torch.cuda.get_device_name(), torch.__version__), flush=True)
    out = []
    for name, S, W, ns, (Hq, Hkv, D), use_sinks in ROWS:
        if args.only and not any(t in name for t in args.only):
            continue
        B = 16384 // S
        dt = torch.bfloat16
        q = torch.randn(B, S, Hq, D, device="cuda", dtype=dt, requires_grad=True)
        k = torch.randn(B, S, Hkv, D, device="cuda", dtype=dt, requires_grad=True)
        v = torch.randn(B, S, Hkv, D, device="cuda", dtype=dt, requires_grad=True)
        do = torch.randn(B, S, Hq, D, device="cuda", dtype=dt)
        qt, kt, vt = (x.detach().transpose(1, 2).contiguous().requires_grad_() for x in (q, k, v))
        dot = do.transpose(1, 2).contiguous()
        sinks = (torch.randn(Hq, device="cuda", dtype=torch.float32) + 2.0).requires_grad_() if use_sinks else None
        sinks_t = sinks.detach().clone().requires_grad_() if use_sinks else None
        kw = dict(sinks=sinks) if use_sinks else {}

        def mask_mod(b, h, qi, kj):  # flashc.h: sink keys follow the causal bound
            m = (qi >= kj) & (qi - kj < W)
            return (m | ((kj < ns) & (qi >= kj))) if ns else m
        bm = create_block_mask(mask_mod, None, None, S, S, device="cuda")
        fl_fwd = 4.0 * B * Hq * D * visible_pairs(S, W, ns)

        def fc_call():
            return ft.attention(q, k, v, causal=True, window=(W - 1, 0), sink_tokens=ns, **kw)

        def fx_call():
            if not use_sinks:
                return flex(qt, kt, vt, block_mask=bm, enable_gqa=True)
            o, lse = flex_with_lse(flex, qt, kt, vt, bm)  # o [B, Hq, S, D], lse [B, Hq, S]
            return o * torch.sigmoid(lse - sinks_t[None, :, None]).unsqueeze(-1).to(o.dtype)

        def fc_f():
            with torch.no_grad():
                fc_call()

        def fc_fb():
            q.grad = k.grad = v.grad = None
            if use_sinks:
                sinks.grad = None
            fc_call().backward(do)

        def fx_f():
            with torch.no_grad():
                fx_call()

        def fx_fb():
            qt.grad = kt.grad = vt.grad = None
            if use_sinks:
                sinks_t.grad = None
            fx_call().backward(dot)

        # same numbers: flashc's o against Flex's on this row
        with torch.no_grad():
            o1 = fc_call().float()
            o2 = fx_call().transpose(1, 2).float()
        row = {"name": name, "B": B, "S": S, "W": W, "sink_tokens": ns, "sink_logits": use_sinks,
               "Hq": Hq, "Hkv": Hkv, "D": D,
               "rel_l2_vs_flex": float((o1 - o2).norm() / o2.norm())}
        for label, fn, fl in (("flashc_fwd", fc_f, fl_fwd), ("flex_fwd", fx_f, fl_fwd),
                              ("flashc_fb", fc_fb, 3.5 * fl_fwd), ("flex_fb", fx_fb, 3.5 * fl_fwd)):
            try:
                row[label] = fl / bb.timed(fn, args.reps) / 1e9
            except Exception as e:
                row[label] = None
                row[label + "_why"] = (str(e).splitlines() or [type(e).__name__])[0][:100]
        out.append(row)
        r = lambda a, b: "%.2f" % (row[a] / row[b]) if row[a] and row[b] else "n/a"
        f = lambda x: "%6.1f" % row[x] if row[x] is not None else "   n/a"
        print("%-54s fwd flashc %s flex %s (%sx) | fwd+bwd flashc %s flex %s (%sx) | rel-L2 %.1e" % (
            name, f("flashc_fwd"), f("flex_fwd"), r("flashc_fwd", "flex_fwd"), f("flashc_fb"),
            f("flex_fb"), r("flashc_fb", "flex_fb"), row["rel_l2_vs_flex"]), flush=True)
        del q, k, v, do, qt, kt, vt, dot, sinks, sinks_t
        torch.cuda.empty_cache()
    if args.json:
        bb.write_json(args.json, out)


if __name__ == "__main__":
    main()
