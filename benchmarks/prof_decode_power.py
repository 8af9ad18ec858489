#!/usr/bin/env python3
"""Decode steps run back to back for seconds at a time, as a server runs
them, with the SM clock and board power they run at (issue 9's decode rows).

Why: under Nsight Compute's locked clocks flashc's and cuDNN's B = 16
kernels take the same time at the same DRAM throughput (88.3 %), while a
burst of 20 calls on a cool GPU (prof_decode_kernels.py) puts flashc 1-2 %
behind. Run for seconds, the board reaches its power limit (~700 W on the
H200) and each kernel runs at the clock that power allows: this measures
that steady state.

Each candidate (flashc.torch.attention, SDPA cuDNN, SDPA FlashAttention-2,
a device copy of as many bytes) runs calls back to back for --seconds,
candidates in turn, the order rotated and reversed from round to round
(--rounds); nvidia-smi samples clocks.sm and power.draw every 50 ms. Per
candidate: median µs a call over its phases (CUDA events over the phase /
calls; the GPU is never idle, so the host's cost is hidden wherever the
kernel is longer), TB/s (K + V + Q + O bytes / time), mean SM clock and
power of its phases (samples after each phase's first 0.3 s).

    python3 benchmarks/prof_decode_power.py [B:Sk ...] [--seconds S] [--rounds R] [--json PATH]
"""
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import flashc.torch as ft  # noqa: E402


def arg(name, default):
    return type(default)(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def smi_rows(text):
    rows = []
    for line in text.splitlines():
        f = [x.strip() for x in line.split(",")]
        try:
            whole, frac = f[0].split(".")
            ts = time.mktime(time.strptime(whole, "%Y/%m/%d %H:%M:%S")) + float("0." + frac)
            rows.append((ts, float(f[1]), float(f[2])))
        except (ValueError, IndexError):
            pass
    return rows


def shape(B, Sk, secs, rounds):
    q = torch.randn(B, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Sk, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    nbytes = 2 * (q.numel() + 2 * k.numel() + q.numel())  # q + k + v read, o written
    src = torch.empty(nbytes // 4, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)

    def sdpa(backend):
        def fn():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                      enable_gqa=True)
        return fn
    cands = {"flashc": lambda: ft.attention(q, k, v), "cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
             "fa2": sdpa(SDPBackend.FLASH_ATTENTION), "copy": lambda: dst.copy_(src)}
    with torch.no_grad():
        for name in list(cands):
            try:
                cands[name]()
            except RuntimeError as e:
                print("  %s refused: %s" % (name, str(e).splitlines()[0][:100]))
                del cands[name]
        torch.cuda.synchronize()
        names = list(cands)
        smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw",
                                "--format=csv,noheader,nounits", "-lms", "50"], stdout=subprocess.PIPE, text=True)
        phases = []
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in (order if r % 2 == 0 else order[::-1]):
                fn = cands[name]
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                t0, n = time.time(), 0
                e0.record()
                while time.time() - t0 < secs:
                    for _ in range(50):
                        fn()
                    n += 50
                    torch.cuda.synchronize()
                e1.record()
                torch.cuda.synchronize()
                phases.append((name, t0 + 0.3, time.time(), e0.elapsed_time(e1) * 1e3 / n))
        time.sleep(0.1)
        smi.terminate()
        rows = smi_rows(smi.stdout.read())
    out = {"B": B, "Sk": Sk, "bytes": nbytes}
    line = "B=%-3d Sk=%-6d |" % (B, Sk)
    for name in names:
        us = statistics.median(p[3] for p in phases if p[0] == name)
        s = [r for p in phases if p[0] == name for r in rows if p[1] <= r[0] <= p[2]]
        mhz = sum(r[1] for r in s) / len(s) if s else float("nan")
        watts = sum(r[2] for r in s) / len(s) if s else float("nan")
        out[name] = {"us": us, "tbs": nbytes / us / 1e6, "sm_mhz": mhz, "watts": watts,
                     "phases_us": [p[3] for p in phases if p[0] == name]}
        line += " %s %7.1f us %4.2f TB/s %4.0f MHz %3.0f W |" % (name, us, nbytes / us / 1e6, mhz, watts)
    if "flashc" in out and "cudnn" in out:
        line += " flashc/cudnn %.3f" % (out["cudnn"]["us"] / out["flashc"]["us"])
    print(line, flush=True)
    return out


def main():
    specs = [a for a in sys.argv[1:] if ":" in a] or ["1:8192", "16:8192", "64:4096", "4:65536"]
    secs, rounds = arg("--seconds", 2.0), arg("--rounds", 4)
    print("back to back, %g s a phase, %d rounds (µs: median of phases; clock/power: mean)" % (secs, rounds))
    res = [shape(*(int(x) for x in s.split(":")), secs, rounds) for s in specs]
    if "--json" in sys.argv:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": res},
                  open(arg("--json", ""), "w"), indent=1)


if __name__ == "__main__":
    main()
