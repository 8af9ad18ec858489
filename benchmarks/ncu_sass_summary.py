#!/usr/bin/env python3
"""Summary of an Nsight Compute SASS source page (scripts/gpu-s10 step ncub:
ncub-sass.csv.xz, from `ncu --import R --page source --csv --print-source sass`).

    python3 benchmarks/ncu_sass_summary.py ncub-sass.csv.xz [--per N] [--top K]

--per N: executions of a once-a-tile instruction (e.g. tiles x consumer
warps; default: the most common execution count): instructions whose count
is within [N, 8N) are counted as the per-tile loop, others as prologue,
epilogue or spin loops (counts far above N). Prints the loop's instruction
mix per tile, its stall reasons, and the K lines with the most samples."""
import argparse
import collections
import csv
import io
import lzma
import re


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--per", type=int, default=0)
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    raw = lzma.open(a.csv, "rt").read() if a.csv.endswith(".xz") else open(a.csv).read()
    rows = list(csv.reader(io.StringIO(raw)))
    hdr = next(r for r in rows if "Source" in r and "Address" in r)
    data = [r for r in rows[rows.index(hdr) + 1:] if len(r) == len(hdr) and r[0] != "Address"]
    ix = {h: i for i, h in enumerate(hdr)}
    ex = lambda r: int(r[ix["Instructions Executed"]] or 0)
    smp = lambda r: int(r[ix["Warp Stall Sampling (All Samples)"]] or 0)
    stalls = [h for h in hdr if h.startswith("stall_") and "(N" not in h and "Not" not in h]
    per = a.per or collections.Counter(ex(r) for r in data if ex(r) > 0).most_common(1)[0][0]
    loop = [r for r in data if per <= ex(r) < 8 * per]
    tot = sum(smp(r) for r in data)
    ls = sum(smp(r) for r in loop)
    mix = collections.Counter()
    for r in loop:
        op = re.sub(r"^@!?U?P\w+\s+", "", r[ix["Source"]].strip()).split()[0]
        mix[op] += ex(r) / per
    print("samples: all %d, per-tile loop %d (%.0f %%); loop instructions a tile %.0f (per = %d)"
          % (tot, ls, 100.0 * ls / max(tot, 1), sum(mix.values()), per))
    print("mix:", ", ".join("%s %.0f" % kv for kv in mix.most_common(24)))
    reasons = collections.Counter()
    for r in loop:
        for h in stalls:
            reasons[h[6:]] += int(r[ix[h]] or 0)
    print("loop stalls:", ", ".join("%s %d" % kv for kv in reasons.most_common(10)))
    print("top lines (index, executions/per, samples, main reasons):")
    for i, r in sorted(enumerate(data), key=lambda t: -smp(t[1]))[:a.top]:
        why = " ".join("%s=%s" % (h[6:], r[ix[h]]) for h in stalls if int(r[ix[h]] or 0) > max(50, smp(r) // 4))
        print("%5d %8.2f %7d  %-60s %s" % (i, ex(r) / per, smp(r), r[ix["Source"]].strip()[:60], why))


if __name__ == "__main__":
    main()
