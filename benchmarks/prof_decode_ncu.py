#!/usr/bin/env python3
"""Decode kernels for Nsight Compute (issue 9): a few calls of
flashc.torch.attention and of SDPA cuDNN on the decode shapes of
bench_decode_gpu.py (bf16, Hq 32, Hkv 8, D 128, one query token).

    ncu --kernel-name regex:'attn_decode|fprop|lean_reduction' \
        python3 benchmarks/prof_decode_ncu.py [B:Sk ...]
"""
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import flashc.torch as ft  # noqa: E402


def main():
    specs = sys.argv[1:] or ["1:8192", "16:8192"]
    calls = int(os.environ.get("CALLS", "2"))
    for spec in specs:
        B, Sk = (int(x) for x in spec.split(":"))
        q = torch.randn(B, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(B, Sk, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        with torch.no_grad():
            for _ in range(calls):
                ft.attention(q, k, v)
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                for _ in range(calls):
                    F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                   enable_gqa=True)
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
