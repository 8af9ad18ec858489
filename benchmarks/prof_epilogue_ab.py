#!/usr/bin/env python3
"""The wgmma kernels' epilogues, TMA stores against 4-byte stores from
registers, in one process with one module: flashc.attention (forward) and
flashc.attention_backward writing o (dk, dv) into contiguous tensors (TMA
stores) and into views of wider buffers at a 4-byte offset (the fallback
the kernels take where TMA cannot address the output; dq contiguous in
both: another kernel writes it).
Interleaved rounds, event-timed medians, bf16, 16k tokens, width 2048.

    python3 benchmarks/prof_epilogue_ab.py [D:S[:causal] ...]
"""
import statistics
import sys

import torch

sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__file__), "..", "python"))
import flashc  # noqa: E402
from prof_fwd_tiles import timed  # noqa: E402  (event-timed median µs of a call)


def padded(shape, dt):
    return torch.empty(*shape[:-1], shape[-1] + 2, device="cuda", dtype=dt)[..., 2:]


def main():
    specs = sys.argv[1:] or ["128:1024", "128:1024:1", "128:4096", "64:1024", "96:1024"]
    dt = torch.bfloat16
    for spec in specs:
        parts = [int(x) for x in spec.split(":")]
        D, S = parts[0], parts[1]
        causal = len(parts) > 2 and parts[2] == 1
        B, H = 16384 // S, 2048 // D
        q, k, v, do = (torch.randn(B, S, H, D, device="cuda", dtype=dt) for _ in range(4))
        o, lse = flashc.attention(q, k, v, causal=causal, return_lse=True)
        fl = 4.0 * B * H * S * S * D * (0.5 if causal else 1.0)
        oc, op = torch.empty_like(q), padded(q.shape, dt)
        gc = tuple(torch.empty_like(x) for x in (q, k, v))
        gp = (torch.empty_like(q), padded(k.shape, dt), padded(v.shape, dt))  # dq alike: its own kernel
        res = {"fwd tma": [], "fwd regs": [], "bwd tma": [], "bwd regs": []}
        for _ in range(3):
            res["fwd tma"].append(timed(lambda: flashc.attention(q, k, v, causal=causal, out=oc), n=10))
            res["fwd regs"].append(timed(lambda: flashc.attention(q, k, v, causal=causal, out=op), n=10))
            res["bwd tma"].append(timed(lambda: flashc.attention_backward(do, q, k, v, o, lse, causal=causal, out=gc), n=10))
            res["bwd regs"].append(timed(lambda: flashc.attention_backward(do, q, k, v, o, lse, causal=causal, out=gp), n=10))
        assert torch.equal(oc, op) and all(torch.equal(a, b) for a, b in zip(gc, gp)), "the epilogues differ"
        m = {kk: statistics.median(vv) for kk, vv in res.items()}
        print("D=%-3d S=%-5d causal=%d | fwd tma %7.1f us (%5.1f TFLOP/s) regs %7.1f (%5.1f) x%.3f | "
              "bwd tma %7.1f us (%5.1f) regs %7.1f (%5.1f) x%.3f"
              % (D, S, causal, m["fwd tma"], fl / m["fwd tma"] / 1e6, m["fwd regs"], fl / m["fwd regs"] / 1e6,
                 m["fwd regs"] / m["fwd tma"], m["bwd tma"], 2.5 * fl / m["bwd tma"] / 1e6, m["bwd regs"],
                 2.5 * fl / m["bwd regs"] / 1e6, m["bwd regs"] / m["bwd tma"]), flush=True)


if __name__ == "__main__":
    main()
