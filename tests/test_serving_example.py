"""examples/serving.py runs: a greedy generation loop (prefill with
attention_varlen, decode on a paged KV cache) whose tokens equal those of the
same model run naively in NumPy (and, on a GPU machine, the GPU's)."""

import os
import subprocess
import sys

import pytest

_EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples",
                        "serving.py")


@pytest.mark.parametrize("backends", ["cpu", pytest.param("cpu,cuda", marks=pytest.mark.cuda)])
def test_serving_example(backends):
    r = subprocess.run([sys.executable, _EXAMPLE, "--steps", "6", "--backends", backends],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    last = r.stdout.strip().splitlines()[-1]
    want = "PASS: cpu = cuda = numpy" if "cuda" in backends else "PASS: cpu = numpy"
    assert last.startswith(want), r.stdout
