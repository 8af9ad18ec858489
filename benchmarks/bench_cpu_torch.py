#!/usr/bin/env python3
"""CPU attention: flashc next to torch's CPU scaled_dot_product_attention with
the same thread count, measured in the same run (torch is the peer a user
would pick on a machine that has it; it is not needed by flashc).

    python3 benchmarks/bench_cpu_torch.py [--threads N] [--seq 4096] [--bwd] [--json PATH]

FLOPs as PERF.md counts them: forward 4·B·H·S²·D, halved when causal.
--bwd: the backward instead (2.5 × the forward's FLOPs): flashc.attention_backward
from the forward's o and lse, next to torch's autograd backward of SDPA (the
forward it saves its state in is run outside the timed region).
Layout [B, S, H, D] for flashc, the same memory viewed as [B, H, S, D] for torch.
Median of --reps timed calls after one warm-up.
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--bwd", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    import numpy as np
    import torch
    import torch.nn.functional as F
    import flashc

    torch.set_num_threads(a.threads)
    B, S, H, D = 1, a.seq, a.heads, a.dim
    rows = []
    print(f"CPU attention {'backward' if a.bwd else 'forward'}, B={B} S={S} H={H} D={D}, {a.threads} threads, "
          f"isa={flashc.cpu_isa()} {flashc.cpu_features()}")
    print(f"{'dtype':6} {'causal':6} {'flashc ms':>10} {'GFLOP/s':>8} {'torch ms':>9} {'GFLOP/s':>8} {'ratio':>6}")
    for dt in ("float32", "bfloat16"):
        for causal in (False, True):
            g = torch.Generator().manual_seed(0)
            q, k, v = (torch.randn(B, S, H, D, generator=g).to(getattr(torch, dt)) for _ in range(3))
            flops = 4 * B * H * S * S * D / (2 if causal else 1) * (2.5 if a.bwd else 1)

            def bench(fn):
                fn()
                ts = []
                for _ in range(a.reps):
                    t = time.perf_counter()
                    fn()
                    ts.append(time.perf_counter() - t)
                return sorted(ts)[len(ts) // 2]

            if dt == "float32":
                qn, kn, vn = q.numpy(), k.numpy(), v.numpy()
            else:
                import ml_dtypes
                qn, kn, vn = (x.view(torch.int16).numpy().view(ml_dtypes.bfloat16) for x in (q, k, v))
            qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
            if a.bwd:
                don = (qn * 0.5).astype(qn.dtype)  # a fixed, non-zero upstream gradient
                o_n, lse_n = flashc.attention(qn, kn, vn, causal=causal, backend="cpu", return_lse=True)
                t_fc = bench(lambda: flashc.attention_backward(don, qn, kn, vn, o_n, lse_n, causal=causal,
                                                               backend="cpu"))
                ql, kl, vl = (x.detach().clone().requires_grad_() for x in (qt, kt, vt))
                do_t = (qt * 0.5).detach()

                def th_bwd():
                    ql.grad = kl.grad = vl.grad = None
                    out = F.scaled_dot_product_attention(ql, kl, vl, is_causal=causal)
                    t = time.perf_counter()
                    out.backward(do_t)
                    return time.perf_counter() - t

                th_bwd()
                t_th = sorted(th_bwd() for _ in range(a.reps))[a.reps // 2]
                dq_fc = flashc.attention_backward(don, qn, kn, vn, o_n, lse_n, causal=causal, backend="cpu")[0]
                th_bwd()
                dq_th = ql.grad.transpose(1, 2).float().numpy()
                err = float(np.linalg.norm(dq_fc.astype(np.float32) - dq_th) / np.linalg.norm(dq_th))
            else:
                t_fc = bench(lambda: flashc.attention(qn, kn, vn, causal=causal, backend="cpu"))
                t_th = bench(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal))
                # same function: compare once
                o_fc = flashc.attention(qn, kn, vn, causal=causal, backend="cpu").astype(np.float32)
                o_th = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal).transpose(1, 2).float().numpy()
                err = float(np.linalg.norm(o_fc - o_th) / np.linalg.norm(o_th))
            r = dict(dtype=dt, causal=causal, flashc_ms=t_fc * 1e3, flashc_gflops=flops / t_fc / 1e9,
                     torch_ms=t_th * 1e3, torch_gflops=flops / t_th / 1e9, rel_diff=err)
            rows.append(r)
            print(f"{dt:6.6} {str(causal):6} {r['flashc_ms']:10.1f} {r['flashc_gflops']:8.0f} "
                  f"{r['torch_ms']:9.1f} {r['torch_gflops']:8.0f} {r['flashc_gflops'] / r['torch_gflops']:6.2f}"
                  f"  (rel diff {err:.1e})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(B=B, S=S, H=H, D=D, threads=a.threads, isa=flashc.cpu_isa(),
                           features=flashc.cpu_features(), bwd=a.bwd, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
