#!/bin/bash
# One device call for the tensor-core backward: (build if no library is
# given), the backward tests of tests/test_cuda.py (TC sweep vs float64 and
# the generic kernel, determinism), TC timings (det / atomic / generic), then
# benchmarks/bench_gpu.py --quick (fwd+bwd next to FA2 / cuDNN, same run).
# Usage (repo root, GPU machine): OUT=dir [LIB=path/libflashc.so] [STEPS="test time bench"] tests/cuda_harness/run_bwd_device.sh
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv 2>&1 | tail -1
export PYTHONPATH=python PYTHONUNBUFFERED=1 FLASHC_LIBRARY=${LIB:-build/lib/libflashc.so}
if [ ! -f "$FLASHC_LIBRARY" ]; then
  cmake -S . -B build -DFLASHC_CUDA=ON -DCMAKE_BUILD_TYPE=Release > $OUT/cmake.log 2>&1
  cmake --build build -j16 --target flashc flashc_cuda >> $OUT/cmake.log 2>&1 || { tail -30 $OUT/cmake.log; exit 1; }
fi
STEPS=${STEPS:-test time bench}
if [[ $STEPS == *test* ]]; then
  timeout ${TEST_TIMEOUT:-170} python3 -m pytest -q -s -p no:cacheprovider tests/test_cuda.py -k backward > $OUT/pytest.log 2>&1
  echo "pytest rc=$?"; grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)" $OUT/pytest.log | head -25
  python3 - $OUT/pytest.log <<'PY'
import re, sys, collections
worst = collections.defaultdict(float)
n = 0
for line in open(sys.argv[1]):
    if "tc-bwd" not in line:
        continue
    line = line[line.find("tc-bwd"):]
    n += 1
    dt = line.split()[1]
    for name, e, g in re.findall(r"(d\w+) ([0-9.e+-]+) \(gen ([0-9.e+-]+)\)", line):
        worst[(dt, name, "tc")] = max(worst[(dt, name, "tc")], float(e))
        worst[(dt, name, "gen")] = max(worst[(dt, name, "gen")], float(g))
print("tc-bwd cases:", n)
for k in sorted(worst):
    print("  worst rel-L2 vs f64 %-9s %-7s %-4s %.2e" % (k + (worst[k],)))
PY
fi
[[ $STEPS == *time* ]] && timeout ${TIME_TIMEOUT:-100} python3 tests/cuda_harness/bwd_timing.py ${TIME_S:-1024 4096} 2>&1 | tee $OUT/timing.log
[[ $STEPS == *bench* ]] && timeout ${BENCH_TIMEOUT:-200} python3 benchmarks/bench_gpu.py --quick --skip-wsum --reps 20 --json $OUT/bench.json > $OUT/bench.log 2>&1; echo "bench rc=$?"; cut -c1-140 $OUT/bench.log
exit 0
