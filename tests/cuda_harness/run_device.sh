#!/bin/bash
# One device call: SASS census, correctness sweep (module tiles + tile variants),
# timings of flashc's TC forward, then the torch peers in the same run.
# Usage (repo root, on the GPU machine): tests/cuda_harness/run_device.sh OUTDIR [BIN]
OUT=${1:-/tmp/out}; BIN=${2:-.tcbuild/test_attn_tc}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv 2>&1 | tail -1
cuobjdump -sass $BIN > /tmp/sass.txt 2>&1
echo "SASS census:"; grep -oE "\b(HMMA\.[0-9A-Z.]*|LDSM[.A-Z0-9]*|LDGSTS[.A-Z0-9]*|LDL|STL|MUFU\.EX2)\b" /tmp/sass.txt | sort | uniq -c
timeout 200 $BIN check > $OUT/check.log 2>&1; echo "check rc=$?"; grep -E "FAIL|failed|status" $OUT/check.log | head -30
for v in ${VARIANTS:-1 2 3 4 5 6}; do timeout 60 $BIN checkv $v > /tmp/cv.log 2>&1; echo "checkv $v rc=$? $(tail -1 /tmp/cv.log)"; cat /tmp/cv.log >> $OUT/checkv.log; done
timeout 150 $BIN perf $OUT/perf.json > $OUT/perf.log 2>&1; echo "perf rc=$?"; cat $OUT/perf.log
PYTHONUNBUFFERED=1 timeout ${PEER_TIMEOUT:-200} python3 benchmarks/bench_gpu.py ${BENCH_ARGS:---no-flashc --skip-wsum} --reps 20 --json $OUT/peers.json > $OUT/peers.log 2>&1; echo "peers rc=$?"; cut -c1-95 $OUT/peers.log
