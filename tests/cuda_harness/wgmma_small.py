"""A few small forward calls through the default CUDA dispatch (the wgmma
kernel on compute capability 9.0), for compute-sanitizer runs:
    compute-sanitizer --tool racecheck python3 tests/cuda_harness/wgmma_small.py
Exits 1 if a result is off the float64 reference."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import flashc  # noqa: E402
import flashc.cuda as fcuda  # noqa: E402

rng = np.random.default_rng(0)
bad = 0
for D, dt, Sq, Sk, kw in ((128, np.float16, 200, 300, dict(causal=True)),
                          (64, np.float16, 130, 260, dict(window=(40, 8), sink_tokens=2)),
                          (128, np.float16, 300, 77, dict(causal=True))):
    q = rng.standard_normal((1, Sq, 2, D)).astype(dt)
    k = rng.standard_normal((1, Sk, 1, D)).astype(dt)
    v = rng.standard_normal((1, Sk, 1, D)).astype(dt)
    o, lse = flashc.attention(fcuda.to_device(q), fcuda.to_device(k), fcuda.to_device(v),
                              return_lse=True, **kw)
    f = np.float64
    ro = flashc.attention(q.astype(f), k.astype(f), v.astype(f), backend="cpu", **kw)
    err = float(np.abs(o.numpy().astype(f) - ro).max())
    print("D=%d Sq=%d Sk=%d %s: max err %.3g" % (D, Sq, Sk, kw, err))
    bad += not (err < 1e-2)
sys.exit(1 if bad else 0)
