#!/usr/bin/env python3
"""Forward TFLOP/s of flashc's Hopper wgmma kernel (default dispatch on
compute capability 9.0) next to flashc's mma.sync kernel
(FLASHC_CUDA_KERNEL=mma), FA2 and cuDNN (torch SDPA), measured in the same
run on the PERF.md shapes (bf16 and fp16, 16k tokens, B = 16384/S,
Hq = 2048/D). Reuses bench_gpu.py's timing and flashc call helpers.

    python3 benchmarks/bench_fwd_hopper.py [--full] [--json PATH] [--dims 64,128] [--seqs S,...] [--no-mma]
"""
import argparse
import importlib.util
import json
import os

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("bench_gpu", os.path.join(HERE, "bench_gpu.py"))
bg = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bg)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--full", action="store_true", help="fp16 too, S in {512 .. 16k}")
    ap.add_argument("--json")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--dims", default="64,128", help="head dims, comma-separated (Hq = 2048 // D)")
    ap.add_argument("--seqs", default=None, help="sequence lengths, comma-separated")
    ap.add_argument("--no-mma", action="store_true", help="skip the mma.sync kernel's column")
    args = ap.parse_args()
    L, why = bg.load_flashc()
    if L is None:
        raise SystemExit("flashc unavailable: " + why)
    stream = torch.cuda.current_stream().cuda_stream
    Ss = [512, 1024, 2048, 4096, 8192, 16384] if args.full else [1024, 4096, 16384]
    if args.seqs:
        Ss = [int(x) for x in args.seqs.split(",")]
    dts = [torch.bfloat16, torch.float16] if args.full else [torch.bfloat16]
    rows = []
    print("%-8s %3s %6s %5s | %7s %7s %7s %7s | %5s %5s | %s" % (
        "dtype", "D", "causal", "S", "wgmma", "mma", "fa2", "cudnn", "/fa2", "/cdnn", "rel-L2 vs fa2"))
    for dt in dts:
        for D in (int(x) for x in args.dims.split(",")):
            for causal in (False, True):
                for S in Ss:
                    B, H = 16384 // S, 2048 // D
                    q, k, v = (torch.empty(B, S, H, D, device="cuda", dtype=dt).uniform_(-1, 1)
                               for _ in range(3))
                    o = torch.empty_like(q)
                    lse = torch.empty(B, H, S, device="cuda", dtype=torch.float32)
                    fl = 4.0 * B * H * S * S * D / (2 if causal else 1)
                    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
                    r = {"dtype": str(dt).split(".")[-1], "D": D, "causal": causal, "S": S}
                    r["mma"] = float("nan")
                    for name, kern in (("wgmma", None),) + (() if args.no_mma else (("mma", "mma"),)):
                        if kern:
                            os.environ["FLASHC_CUDA_KERNEL"] = kern
                        else:
                            os.environ.pop("FLASHC_CUDA_KERNEL", None)
                        r[name] = bg.tflops(fl, bg.bench(
                            lambda: bg.flashc_attn(L, q, k, v, o, lse, causal, stream), args.reps))
                        if name == "wgmma":
                            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                                ref = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
                            ref = ref.transpose(1, 2).float()
                            r["rel_l2"] = ((o.float() - ref).norm() / ref.norm()).item()
                    os.environ.pop("FLASHC_CUDA_KERNEL", None)
                    for name, be in (("fa2", SDPBackend.FLASH_ATTENTION),
                                     ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                        try:
                            with sdpa_kernel(be):
                                r[name] = bg.tflops(fl, bg.bench(lambda: F.scaled_dot_product_attention(
                                    qt, kt, vt, is_causal=causal), args.reps))
                        except Exception:
                            r[name] = float("nan")
                    rows.append(r)
                    print("%-8s %3d %6d %5d | %7.1f %7.1f %7.1f %7.1f | %5.2f %5.2f | %.2e" % (
                        r["dtype"], D, causal, S, r["wgmma"], r["mma"], r["fa2"], r["cudnn"],
                        r["wgmma"] / r["fa2"], r["wgmma"] / r["cudnn"], r["rel_l2"]), flush=True)
                    del q, k, v, o
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
