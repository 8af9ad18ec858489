#!/usr/bin/env python3
"""Where the forward's time goes at short rows (issue 8/standard shapes: the
1k rows run at ~0.7x cuDNN, the 4k rows at ~0.93x): a fixed grid of query
blocks (B x Hq x Sq/128 CTAs, non-causal) against Sk = 128 .. 8192 keys, so
that time = per-CTA cost + tiles x per-tile cost. Prints µs per call and a
least-squares line a + b * (key tiles of 128) for flashc (flashc.torch) and
SDPA cuDNN, bf16, event-timed medians.

    python3 benchmarks/prof_fwd_tiles.py [D] [Sq] [B] [Hq] [--opad]

--opad: instead of cuDNN, flashc (C ABI through flashc.attention) writing o
into a contiguous tensor and into a view of a wider buffer at a 4-byte
offset, interleaved: the wgmma forward's epilogue by TMA stores against its
fallback, 4-byte stores from registers (same process, same module).
"""
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__file__), "..", "python"))
import flashc.torch as ft  # noqa: E402


def timed(fn, n=30):
    for _ in range(3):
        fn()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(n):
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1) * 1e3)
    return statistics.median(ts)


def fit(xs, ys):
    mx, my = statistics.mean(xs), statistics.mean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def main():
    opad = "--opad" in sys.argv
    a = [int(x) for x in sys.argv[1:] if x != "--opad"]
    D = a[0] if len(a) > 0 else 128
    Sq = a[1] if len(a) > 1 else 1024
    B = a[2] if len(a) > 2 else 16
    H = a[3] if len(a) > 3 else 2048 // D
    dt = torch.bfloat16
    q = torch.randn(B, Sq, H, D, device="cuda", dtype=dt)
    ctas = B * H * ((Sq + 127) // 128)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print("D=%d Sq=%d B=%d Hq=%d: %d query blocks of 128 (%.2f waves of %d SMs at one CTA an SM)"
          % (D, Sq, B, H, ctas, ctas / sms, sms))
    rows = {"flashc": [], "cudnn": []} if not opad else {"o by TMA": [], "o from registers": []}
    tiles = []
    for Sk in (128, 256, 512, 1024, 2048, 4096, 8192):
        k, v = (torch.randn(B, Sk, H, D, device="cuda", dtype=dt) for _ in range(2))
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        with torch.no_grad():
            if opad:
                import flashc
                oc = torch.empty_like(q)
                op = torch.empty(B, Sq, H, D + 2, device="cuda", dtype=dt)[..., 2:]
                tf, tc = [], []
                for _ in range(3):  # interleaved rounds
                    tf.append(timed(lambda: flashc.attention(q, k, v, out=oc), n=10))
                    tc.append(timed(lambda: flashc.attention(q, k, v, out=op), n=10))
                tf, tc = statistics.median(tf), statistics.median(tc)
                assert torch.equal(oc, op), "the two epilogues differ"
            else:
                tf = timed(lambda: ft.attention(q, k, v))
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    tc = timed(lambda: F.scaled_dot_product_attention(qt, kt, vt))
        fl = 4.0 * B * H * Sq * Sk * D
        print("Sk=%-5d  %s %8.1f us %6.1f TFLOP/s   %s %8.1f us %6.1f TFLOP/s   ratio %.2f"
              % (Sk, "tma" if opad else "flashc", tf, fl / tf / 1e6, "regs" if opad else "cudnn", tc,
                 fl / tc / 1e6, tc / tf), flush=True)
        tiles.append(Sk / 128)
        names = list(rows)
        rows[names[0]].append(tf)
        rows[names[1]].append(tc)
    for name, ys in rows.items():
        w = ctas / sms  # waves
        a0, b0 = fit(tiles[2:], ys[2:])  # Sk >= 512
        print("%-16s time = %.1f + %.2f x tiles us (Sk >= 512); a wave: %.2f + %.3f x tiles us"
              % (name, a0, b0, a0 / w, b0 / w))


if __name__ == "__main__":
    main()
