#!/usr/bin/env python3
"""Where the backward's time goes (issue 8: the window rows run the backward
at ~330 TFLOP/s against ~460 on dense 4k rows): the backward's counterpart of
prof_fwd_tiles.py. The dK/dV kernel runs one CTA per key block, walking the
query tiles that see it, so a fixed grid of key blocks (B x Hkv x Sk/128,
non-causal, Sk fixed) against Sq = 128 .. 8192 gives
time = per-CTA cost + query tiles x per-tile cost. The backward alone is timed
(torch.autograd.grad on a retained graph, forward outside the timer) for
flashc (flashc.torch, deterministic) and SDPA cuDNN, bf16, event-timed
medians; prints µs per call and the least-squares line a + b * (query tiles
of 64 rows) over Sq >= 512, also per wave of CTAs at one CTA an SM.

    python3 benchmarks/prof_bwd_tiles.py [D] [Sk] [B] [Hq] [Hkv]
    python3 benchmarks/prof_bwd_tiles.py --window W [D] [B] [Hq] [Hkv]

--window W: instead of the fit, the issue's window rows at S = 16k / B
(causal, window (W - 1, 0), GQA) against the dense non-causal and causal rows of
the same S, backward TFLOP/s of useful work, flashc beside cuDNN (which has no
window: its dense figures only).
"""
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import flashc.torch as ft  # noqa: E402
from prof_fwd_tiles import fit, timed  # noqa: E402


def bwd_time(f, inputs, g, n=20):
    o = f()
    return timed(lambda: torch.autograd.grad(o, inputs, g, retain_graph=True), n=n)


def make(B, S, h, D):
    return torch.randn(B, S, h, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)


def sdpa(qt, kt, vt, causal, gqa):
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=gqa)


def tiles_fit(D, Sk, B, Hq, Hkv):
    k, v = make(B, Sk, Hkv, D), make(B, Sk, Hkv, D)
    ctas = B * Hkv * ((Sk + 127) // 128)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print("D=%d Sk=%d B=%d Hq=%d Hkv=%d: %d key blocks of 128 (%.2f waves of %d SMs at one CTA an SM)"
          % (D, Sk, B, Hq, Hkv, ctas, ctas / sms, sms))
    rows = {"flashc": [], "cudnn": []}
    tiles = []
    for Sq in (128, 256, 512, 1024, 2048, 4096, 8192):
        q = make(B, Sq, Hq, D)
        do = torch.randn(B, Sq, Hq, D, device="cuda", dtype=torch.bfloat16)
        qt, kt, vt = (x.detach().transpose(1, 2).requires_grad_() for x in (q, k, v))
        tf = bwd_time(lambda: ft.attention(q, k, v), (q, k, v), do)
        try:
            tc = bwd_time(lambda: sdpa(qt, kt, vt, False, Hq != Hkv), (qt, kt, vt), do.transpose(1, 2))
        except RuntimeError as e:  # no cuDNN for this shape
            print("  cudnn: %s" % str(e).splitlines()[0][:100])
            tc = float("nan")
        fl = 2.5 * 4.0 * B * Hq * Sq * Sk * D
        print("Sq=%-5d  flashc %8.1f us %6.1f TFLOP/s   cudnn %8.1f us %6.1f TFLOP/s   ratio %.2f"
              % (Sq, tf, fl / tf / 1e6, tc, fl / tc / 1e6, tc / tf), flush=True)
        tiles.append(Sq / 64)
        rows["flashc"].append(tf)
        rows["cudnn"].append(tc)
    w = ctas / sms
    for name, ys in rows.items():
        if any(y != y for y in ys[2:]):
            continue
        a0, b0 = fit(tiles[2:], ys[2:])  # Sq >= 512
        print("%-8s time = %.1f + %.2f x tiles us (Sq >= 512, tiles of 64 rows x %d heads a kv head); a wave: %.2f + %.3f x tiles us"
              % (name, a0, b0, Hq // Hkv, a0 / w, b0 / w))


def window_rows(W, D, B, Hq, Hkv):
    S = 16384 // B
    i = torch.arange(S, dtype=torch.float64)
    pairs = {"dense": float(S) * S, "causal": float((i + 1).sum()), "window": float(torch.clamp(i + 1, max=W).sum())}
    q, k, v = make(B, S, Hq, D), make(B, S, Hkv, D), make(B, S, Hkv, D)
    do = torch.randn(B, S, Hq, D, device="cuda", dtype=torch.bfloat16)
    qt, kt, vt = (x.detach().transpose(1, 2).requires_grad_() for x in (q, k, v))
    print("backward, bf16 D=%d S=%d B=%d GQA %d/%d, TFLOP/s of useful work (2.5 x 4 D per visible pair)"
          % (D, S, B, Hq, Hkv))
    for name, kw, causal in (("dense", {}, False), ("causal", dict(causal=True), True),
                             ("window W=%d" % W, dict(causal=True, window=(W - 1, 0)), None)):
        fl = 2.5 * 4.0 * B * Hq * D * pairs[name.split()[0]]
        tf = bwd_time(lambda: ft.attention(q, k, v, **kw), (q, k, v), do)
        line = "%-14s flashc %8.1f us %6.1f TFLOP/s" % (name, tf, fl / tf / 1e6)
        if causal is not None:
            tc = bwd_time(lambda: sdpa(qt, kt, vt, causal, Hq != Hkv), (qt, kt, vt), do.transpose(1, 2))
            line += "   cudnn %8.1f us %6.1f TFLOP/s" % (tc, fl / tc / 1e6)
        print(line, flush=True)
    # Where the window's time goes: the same window with the unordered dQ
    # (deterministic=False: the ordering's wait), and the band without masks —
    # non-causal, Sk = S, Sq = W + 128 (every key block then walks the tiles
    # a window block walks, ~(W + 128) / 64 a head, none masked): the window
    # row's time against it is the masks' cost (edge tiles, P/dS selection)
    # plus the dQ ordering; the band's TFLOP/s counts every pair it computes.
    fw = 2.5 * 4.0 * B * Hq * D * pairs["window"]
    tf = bwd_time(lambda: ft.attention(q, k, v, causal=True, window=(W - 1, 0), deterministic=False),
                  (q, k, v), do)
    print("%-14s flashc %8.1f us %6.1f TFLOP/s" % ("window atomic", tf, fw / tf / 1e6), flush=True)
    for Sb in (W, W + 128):
        qb = make(B, Sb, Hq, D)
        dob = torch.randn(B, Sb, Hq, D, device="cuda", dtype=torch.bfloat16)
        for det in (True, False):
            tf = bwd_time(lambda: ft.attention(qb, k, v, deterministic=det), (qb, k, v), dob)
            fb = 2.5 * 4.0 * B * Hq * D * Sb * S
            print("%-14s flashc %8.1f us %6.1f TFLOP/s computed, %6.1f of the window's useful work"
                  % ("band Sq=%d%s" % (Sb, "" if det else " at"), tf, fb / tf / 1e6, fw / tf / 1e6), flush=True)


def main():
    args = sys.argv[1:]
    if args[:1] == ["--window"]:
        a = [int(x) for x in args[1:]]
        W = a[0] if a else 1024
        D, B, Hq, Hkv = (a[1:] + [128, 1, 32, 8][len(a[1:]):])[:4]
        window_rows(W, D, B, Hq, Hkv)
        return
    a = [int(x) for x in args]
    D = a[0] if len(a) > 0 else 128
    Sk = a[1] if len(a) > 1 else 1024
    B = a[2] if len(a) > 2 else 16
    Hq = a[3] if len(a) > 3 else 2048 // D
    Hkv = a[4] if len(a) > 4 else Hq
    tiles_fit(D, Sk, B, Hq, Hkv)


if __name__ == "__main__":
    main()
