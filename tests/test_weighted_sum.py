"""flashc.weighted_sum / weighted_sum_backward against float64 references,
with tolerances relative to a naive same-precision implementation."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import flashc
from reference import (
    DTYPES,
    assert_close,
    np_dtype,
    weighted_sum_backward_reference,
    weighted_sum_reference,
)


def naive_fwd(x, w, dtype):
    """Naive: accumulate in fp32 (F64 for F64), round to the dtype."""
    c = np.float64 if dtype == "float64" else np.float32
    return weighted_sum_reference(x, w, compute=c).astype(np_dtype(dtype))


def naive_bwd(dy, x, w, dtype):
    c = np.float64 if dtype == "float64" else np.float32
    dx, dw = weighted_sum_backward_reference(dy, x, w, compute=c)
    return dx.astype(np_dtype(dtype)), dw.astype(np_dtype(dtype))


def strided(a, kind):
    """The same values under other strides."""
    if kind == "contig":
        return np.ascontiguousarray(a)
    if kind == "transposed":  # last axis not contiguous
        return np.ascontiguousarray(a.T).T
    if kind == "sliced":
        big = np.full(tuple(2 * n + 1 for n in a.shape), np.nan, a.dtype)
        view = big[tuple(slice(1, 1 + 2 * n, 2) for n in a.shape)]
        view[...] = a
        return view
    if kind == "negative":
        rev = tuple(slice(None, None, -1) for _ in a.shape)
        return np.ascontiguousarray(a[rev])[rev]
    raise ValueError(kind)


SHAPES = [(5,), (1, 1), (3, 7), (4, 5, 33), (2, 3, 4, 129), (1000, 64), (17, 300), (2, 2, 2, 2, 2, 2, 2, 9)]
KINDS = ["contig", "transposed", "sliced", "negative"]


def _cases():
    out = []
    for i, shape in enumerate(SHAPES):
        for j, dtype in enumerate(DTYPES):
            kind = KINDS[(i + j) % 4]
            out.append(pytest.param(shape, dtype, kind,
                                    id="%s-%s-%s" % ("x".join(map(str, shape)), dtype, kind)))
    return out


@pytest.mark.parametrize("shape,dtype,kind", _cases())
def test_forward(backend, rng, shape, dtype, kind):
    dt = np_dtype(dtype)
    x = rng.standard_normal(shape).astype(dt)
    w = rng.standard_normal(shape[-1]).astype(dt)
    out = np.full(shape[:-1], np.nan, dt)  # poisoned: every element must be written
    y = flashc.weighted_sum(strided(x, kind), strided(w, kind), backend=backend, out=out)
    assert y is out and y.shape == shape[:-1] and y.dtype == dt
    assert_close(y, weighted_sum_reference(x, w), naive_fwd(x, w, dtype), dtype, "y")


@pytest.mark.parametrize("shape,dtype,kind", _cases())
def test_backward(backend, rng, shape, dtype, kind):
    dt = np_dtype(dtype)
    x = rng.standard_normal(shape).astype(dt)
    w = rng.standard_normal(shape[-1]).astype(dt)
    dy = rng.standard_normal(shape[:-1]).astype(dt)
    dx_out = strided(np.full(shape, np.nan, dt), kind)
    dx, dw = flashc.weighted_sum_backward(np.asarray(strided(dy, kind)) if dy.ndim else dy,
                                          strided(x, kind), strided(w, kind), backend=backend,
                                          out=(dx_out, None))
    assert dx is dx_out and dx.dtype == dt and dw.dtype == dt and dw.shape == w.shape
    rdx, rdw = weighted_sum_backward_reference(dy, x, w)
    ndx, ndw = naive_bwd(dy, x, w, dtype)
    assert_close(dx, rdx, ndx, dtype, "dx")
    assert_close(dw, rdw, ndw, dtype, "dw")


def test_forward_1d_gives_scalar(backend, rng):
    x = rng.standard_normal(37)
    w = rng.standard_normal(37)
    y = flashc.weighted_sum(x, w, backend=backend)
    assert isinstance(y, np.ndarray) and y.shape == () and y.dtype == np.float64
    assert abs(float(y) - float(x @ w)) <= 1e-12 * np.abs(x).sum() * np.abs(w).max()


def test_backward_1d(backend, rng):
    x = rng.standard_normal(9).astype(np.float32)
    w = rng.standard_normal(9).astype(np.float32)
    dy = np.array(1.5, np.float32)
    dx, dw = flashc.weighted_sum_backward(dy, x, w, backend=backend)
    np.testing.assert_allclose(dx, 1.5 * w, rtol=1e-6)
    np.testing.assert_allclose(dw, 1.5 * x, rtol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast_inputs(backend, rng, dtype):
    """Zero strides on inputs (np.broadcast_to) are accepted and read correctly."""
    dt = np_dtype(dtype)
    row = rng.standard_normal(48).astype(dt)
    x = np.broadcast_to(row, (6, 5, 48))               # strides (0, 0, itemsize)
    w = np.broadcast_to(np.asarray(0.25, dt), (48,))   # stride 0
    y = flashc.weighted_sum(x, w, backend=backend)
    assert_close(y, weighted_sum_reference(x, w), naive_fwd(x, w, dtype), dtype, "y")
    dy = np.broadcast_to(np.asarray(2.0, dt), (6, 5))
    dx, dw = flashc.weighted_sum_backward(dy, x, w, backend=backend)
    rdx, rdw = weighted_sum_backward_reference(dy, x, w)
    ndx, ndw = naive_bwd(dy, x, w, dtype)
    assert_close(dx, rdx, ndx, dtype, "dx")
    assert_close(dw, rdw, ndw, dtype, "dw")


@pytest.mark.parametrize("shape", [(0, 5), (4, 0), (3, 0, 7), (0,)])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_empty_dims(backend, rng, shape, dtype):
    dt = np_dtype(dtype)
    x = np.zeros(shape, dt)
    w = rng.standard_normal(shape[-1]).astype(dt)
    y = flashc.weighted_sum(x, w, backend=backend)
    assert y.shape == shape[:-1]
    np.testing.assert_array_equal(np.asarray(y, np.float64), weighted_sum_reference(x, w))
    dy = np.ones(shape[:-1], dt)
    dx, dw = flashc.weighted_sum_backward(dy, x, w, backend=backend)
    assert dx.shape == shape and dw.shape == w.shape
    # D = 0 -> empty dx; R = 0 -> dw = 0 (a sum over nothing).
    np.testing.assert_array_equal(np.asarray(dw, np.float64), 0.0)


@pytest.mark.parametrize("need", [(True, False), (False, True)], ids=["dx-only", "dw-only"])
def test_backward_skip_output(backend, rng, need):
    x = rng.standard_normal((8, 16)).astype(np.float32)
    w = rng.standard_normal(16).astype(np.float32)
    dy = rng.standard_normal(8).astype(np.float32)
    dx, dw = flashc.weighted_sum_backward(dy, x, w, backend=backend, need_dx=need[0],
                                          need_dw=need[1])
    assert (dx is None) != need[0] and (dw is None) != need[1]
    rdx, rdw = weighted_sum_backward_reference(dy, x, w)
    if dx is not None:
        np.testing.assert_allclose(dx, rdx, rtol=1e-5, atol=1e-6)
    if dw is not None:
        np.testing.assert_allclose(dw, rdw, rtol=1e-4, atol=1e-5)


def test_large_rows(backend, rng):
    # Many rows: several partial-buffer blocks in the dw reduction.
    x = rng.standard_normal((50000, 40)).astype(np.float32)
    w = rng.standard_normal(40).astype(np.float32)
    dy = rng.standard_normal(50000).astype(np.float32)
    y = flashc.weighted_sum(x, w, backend=backend)
    assert_close(y, weighted_sum_reference(x, w), naive_fwd(x, w, "float32"), "float32", "y")
    dx, dw = flashc.weighted_sum_backward(dy, x, w, backend=backend)
    rdx, rdw = weighted_sum_backward_reference(dy, x, w)
    ndx, ndw = naive_bwd(dy, x, w, "float32")
    assert_close(dw, rdw, ndw, "float32", "dw")


_DETERMINISM_SCRIPT = textwrap.dedent("""
    import sys, hashlib
    import numpy as np
    import flashc
    rng = np.random.default_rng(7)
    h = hashlib.sha256()
    for dtype in ("float32", "float64"):
        x = rng.standard_normal((3001, 77)).astype(dtype)
        w = rng.standard_normal(77).astype(dtype)
        dy = rng.standard_normal(3001).astype(dtype)
        for _ in range(3):
            dx, dw = flashc.weighted_sum_backward(dy, x, w, backend=sys.argv[1])
            h.update(dw.tobytes())
    print(h.hexdigest())
""")


@pytest.mark.slow
def test_dw_deterministic_across_thread_counts(backend):
    """dw is reduced in a fixed order: bit-identical for 1, 2 and 3 threads
    (each in a fresh process so OMP_NUM_THREADS takes effect)."""
    python_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                              "python")
    digests = set()
    for n in ("1", "2", "3"):
        env = dict(os.environ, OMP_NUM_THREADS=n,
                   PYTHONPATH=python_dir + os.pathsep + os.environ.get("PYTHONPATH", ""))
        r = subprocess.run([sys.executable, "-c", _DETERMINISM_SCRIPT, backend], env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        digests.add(r.stdout.strip())
    assert len(digests) == 1
