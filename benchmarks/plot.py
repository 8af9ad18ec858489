#!/usr/bin/env python3
"""Draw the benchmark JSON in benchmarks/results/ into PNGs beside it.

    python3 benchmarks/plot.py [--results DIR] [--out DIR]

Each figure is drawn from the newest file of its kind (date in the name, then
modification time); a kind with no file is skipped with a message:

  gpu-attention.png  flashc vs cuDNN and FlashAttention-2 (SDPA), TFLOP/s by
                     sequence length, forward and forward+backward, plus
                     flashc with softcap / ALiBi: h100-*mods*.json
                     (bench_mods_gpu.py; else h100-*base*.json)
  gpu-shapes.png     flashc vs cuDNN / FA2 by sequence length for each head
                     dim and mask: h100-*-gpu.json (bench_gpu.py)
  cpu-vs-torch.png   flashc's CPU backend vs torch's CPU SDPA, GFLOP/s:
                     *-cpu-vs-torch.json (bench_cpu_torch.py)
  wsum-gpu.png       weighted sum GB/s vs a device-to-device copy:
                     *selftest-bench*.json (flashc_cuda_selftest --bench),
                     else the weighted_sum rows of h100-*-gpu.json

Needs matplotlib (pip install matplotlib); flashc itself does not.
"""
import argparse
import glob
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PEERS = (("flashc", "flashc", "C0", "o"), ("cudnn", "cuDNN (SDPA)", "C1", "s"),
         ("fa2", "FlashAttention-2 (SDPA)", "C2", "^"))


def newest(results, pattern):
    """The newest file matching pattern: by the YYYY-MM-DD in its name, then mtime."""
    files = glob.glob(os.path.join(results, pattern))
    if not files:
        return None

    def key(f):
        m = re.search(r"(\d{4}-\d{2}-\d{2})", os.path.basename(f))
        return (m.group(1) if m else "", os.path.getmtime(f))
    return max(files, key=key)


def describe(path, data=None):
    """'<machine>, <date>' from the file name (and the device it names)."""
    name = os.path.basename(path)
    m = re.match(r"([a-z0-9]+)-(\d{4}-\d{2}-\d{2})", name)
    machine, date = (m.group(1), m.group(2)) if m else (name, "")
    dev = (data or {}).get("device")
    return "%s%s, %s" % (machine, " (%s)" % dev if dev else "", date)


def seq_label(s):
    return "%dk" % (s // 1024) if s % 1024 == 0 else str(s)


def seq_axis(ax, seqs):
    ax.set_xscale("log", base=2)
    ax.set_xticks(seqs)
    ax.set_xticklabels([seq_label(s) for s in seqs])
    ax.set_xlabel("sequence length (16k tokens per batch)")
    ax.grid(True, alpha=0.3)


def save(fig, out, name, source):
    fig.text(0.01, 0.005, "source: benchmarks/results/" + os.path.basename(source),
             fontsize=7, color="0.4")
    path = os.path.join(out, name)
    fig.savefig(path, dpi=110)
    print("wrote %s  (from %s)" % (os.path.relpath(path), os.path.basename(source)))


def plot_gpu_attention(plt, results, out):
    src = newest(results, "h100-*mods*.json") or newest(results, "h100-*base*.json")
    if not src:
        print("skip gpu-attention.png: no h100-*mods*.json or *base*.json in", results)
        return
    data = json.load(open(src))
    rows = [r for r in data["rows"] if not r["causal"]]
    # The head dim with the most non-causal sequence lengths (128 in bench_mods_gpu).
    D = max({r["D"] for r in rows}, key=lambda d: len({r["S"] for r in rows if r["D"] == d}))
    rows = [r for r in rows if r["D"] == D]
    seqs = sorted({r["S"] for r in rows})
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.3))
    for ax, pas in zip(axes, ("fwd", "fwd+bwd")):
        plain = {r["S"]: r for r in rows if r["pass"] == pas and r["mods"] == "plain"}
        for key, label, color, marker in PEERS:
            pts = [(s, plain[s][key]) for s in seqs if s in plain and plain[s].get(key)]
            if pts:
                ax.plot(*zip(*pts), marker=marker, color=color, label=label,
                        lw=2.2 if key == "flashc" else 1.4)
                if key == "flashc":
                    for s, y in pts:
                        ax.annotate("%.0f" % y, (s, y), textcoords="offset points",
                                    xytext=(0, 6), ha="center", fontsize=8, color=color)
        for mods, color in (("softcap", "C0"), ("alibi", "C4")):
            mr = {r["S"]: r["flashc"] for r in rows if r["pass"] == pas and r["mods"] == mods}
            if mr:
                s = sorted(mr)
                ax.plot(s, [mr[x] for x in s], ls="--", marker=".", color=color, alpha=0.8,
                        label="flashc, %s" % ("softcap 30" if mods == "softcap" else "ALiBi"))
        seq_axis(ax, seqs)
        ax.set_ylim(bottom=0)
        ax.set_title("forward" if pas == "fwd" else "forward + backward")
        ax.set_ylabel("TFLOP/s")
    axes[0].legend(fontsize=8, loc="lower right")
    fig.suptitle("Attention on the GPU: bf16, D=%d, width 2048, non-causal — %s (torch %s)"
                 % (D, describe(src, data), data.get("torch", "?")), fontsize=10)
    fig.tight_layout(rect=(0, 0.02, 1, 0.95))
    save(fig, out, "gpu-attention.png", src)


def plot_gpu_shapes(plt, results, out):
    src = newest(results, "h100-*-gpu.json")
    if not src:
        print("skip gpu-shapes.png: no h100-*-gpu.json in", results)
        return
    data = json.load(open(src))
    rows = data.get("attention", [])
    if not rows:
        print("skip gpu-shapes.png: %s has no attention rows" % os.path.basename(src))
        return
    dtype = rows[0]["dtype"]
    cases = sorted({(r["D"], r["causal"]) for r in rows if r["dtype"] == dtype})
    fig, axes = plt.subplots(2, len(cases), figsize=(3.3 * len(cases), 6.4), squeeze=False)
    for j, (D, causal) in enumerate(cases):
        sel = sorted((r for r in rows if (r["dtype"], r["D"], r["causal"]) == (dtype, D, causal)),
                     key=lambda r: r["S"])
        seqs = [r["S"] for r in sel]
        for i, (pas, what) in enumerate((("fwd", "forward"), ("fb", "forward + backward"))):
            ax = axes[i][j]
            for key, label, color, marker in PEERS:
                ys = [r.get("%s_%s_tflops" % (key, pas)) for r in sel]
                if all(y is not None for y in ys):
                    ax.plot(seqs, ys, marker=marker, color=color, label=label,
                            lw=2.2 if key == "flashc" else 1.4)
            seq_axis(ax, seqs)
            ax.set_ylim(bottom=0)
            ax.set_title("D=%d%s, %s" % (D, " causal" if causal else "", what), fontsize=9)
            if j == 0:
                ax.set_ylabel("TFLOP/s")
    axes[0][0].legend(fontsize=7, loc="lower right")
    fig.suptitle("Attention on the GPU by shape: %s — %s (torch %s)"
                 % (dtype, describe(src, data), data.get("torch", "?")), fontsize=10)
    fig.tight_layout(rect=(0, 0.02, 1, 0.95))
    save(fig, out, "gpu-shapes.png", src)


def plot_cpu_vs_torch(plt, results, out):
    src = newest(results, "*-cpu-vs-torch.json")
    if not src:
        print("skip cpu-vs-torch.png: no *-cpu-vs-torch.json in", results)
        return
    data = json.load(open(src))
    rows = data["rows"]
    labels = ["%s\n%s" % (r["dtype"], "causal" if r["causal"] else "non-causal") for r in rows]
    x = list(range(len(rows)))
    fig, ax = plt.subplots(figsize=(7, 4))
    w = 0.38
    for off, key, label, color in ((-w / 2, "flashc_gflops", "flashc", "C0"),
                                   (w / 2, "torch_gflops", "torch SDPA (CPU)", "C3")):
        bars = ax.bar([i + off for i in x], [r[key] for r in rows], w, label=label, color=color)
        for b in bars:
            ax.annotate("%.0f" % b.get_height(), (b.get_x() + b.get_width() / 2, b.get_height()),
                        textcoords="offset points", xytext=(0, 2), ha="center", fontsize=8)
    ax.set_xticks(x)
    ax.set_xticklabels(labels)
    ax.set_ylabel("GFLOP/s")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_title("CPU attention, B=%d S=%d H=%d D=%d, %d threads (%s) — %s"
                 % (data["B"], data["S"], data["H"], data["D"], data["threads"], data["isa"],
                    describe(src)), fontsize=9)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    save(fig, out, "cpu-vs-torch.png", src)


def plot_wsum(plt, results, out):
    src = newest(results, "*selftest-bench*.json")
    bars, title = None, None
    if src:
        data = json.load(open(src))
        copy = data["copy_gbs"]
        rows = data.get("wsum", [])
        bars = [("%s\nR=%d D=%d" % (r["dtype"], r["R"], r["D"]),
                 [("forward", r["fwd_gbs"], "C0"), ("backward dw", r["dw_gbs"], "C9"),
                  ("backward dx", r["dx_gbs"], "C4"), ("device copy", copy, "0.5")])
                for r in rows]
        title = "Weighted sum on the GPU (flashc_cuda_selftest --bench) — %s" % describe(src)
    else:
        src = newest(results, "h100-*-gpu.json")
        rows = json.load(open(src)).get("weighted_sum", []) if src else []
        if rows:
            data = json.load(open(src))
            bars = [("%s\nR=%d D=%d" % (r["dtype"], r["R"], r["D"]),
                     [("flashc forward", r["flashc_gbs"], "C0"),
                      ("torch x @ w", r["matmul_gbs"], "C3"),
                      ("device copy", r["copy_gbs"], "0.5")]) for r in rows]
            title = "Weighted sum on the GPU (bench_gpu.py) — %s" % describe(src, data)
    if not bars:
        print("skip wsum-gpu.png: no *selftest-bench*.json, and no h100-*-gpu.json with "
              "weighted_sum rows, in", results)
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    n = len(bars[0][1])
    w = 0.8 / n
    seen = set()
    for i, (_, series) in enumerate(bars):
        for k, (label, y, color) in enumerate(series):
            b = ax.bar(i - 0.4 + w * (k + 0.5), y, w, color=color,
                       label=label if label not in seen else None)
            seen.add(label)
            ax.annotate("%.0f" % y, (b[0].get_x() + w / 2, y), textcoords="offset points",
                        xytext=(0, 2), ha="center", fontsize=8)
    ax.set_xticks(range(len(bars)))
    ax.set_xticklabels([b[0] for b in bars])
    ax.set_ylabel("GB/s (bytes read + written)")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_title(title, fontsize=9)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    save(fig, out, "wsum-gpu.png", src)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", default=os.path.join(HERE, "results"),
                    help="where the JSON is (default: benchmarks/results)")
    ap.add_argument("--out", default=None, help="where the PNGs go (default: --results)")
    args = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot.py needs matplotlib: pip install matplotlib (flashc itself does not)")
    out = args.out or args.results
    os.makedirs(out, exist_ok=True)
    for fn in (plot_gpu_attention, plot_gpu_shapes, plot_cpu_vs_torch, plot_wsum):
        fn(plt, args.results, out)
        plt.close("all")


if __name__ == "__main__":
    main()
