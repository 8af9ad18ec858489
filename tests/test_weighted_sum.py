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


# ---------------------------------------------------------------------------
# CPU SIMD paths (src/cpu/weighted_sum_avx2.c, weighted_sum_avx512.c). They
# take unit-stride D axes; the whole file runs under FLASHC_CPU_ISA=scalar,
# avx2 and avx512, and the tests below also compare the ISAs directly.

ODD_D = [1, 3, 15, 17, 64, 1000, 1025]


@pytest.mark.parametrize("D", ODD_D)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["contig", "sliced"])
def test_simd_odd_d(rng, D, dtype, kind):
    # 3-D x with 2·7 rows: a 4-row group, a remainder, two outer axes.
    dt = np_dtype(dtype)
    shape = (2, 7, D)
    x = rng.standard_normal(shape).astype(dt)
    w = rng.standard_normal(D).astype(dt)
    dy = rng.standard_normal(shape[:-1]).astype(dt)
    y = flashc.weighted_sum(strided(x, kind), strided(w, kind), backend="cpu")
    assert_close(y, weighted_sum_reference(x, w), naive_fwd(x, w, dtype), dtype, "y")
    dx, dw = flashc.weighted_sum_backward(strided(dy, kind), strided(x, kind), strided(w, kind),
                                          backend="cpu")
    rdx, rdw = weighted_sum_backward_reference(dy, x, w)
    ndx, ndw = naive_bwd(dy, x, w, dtype)
    assert_close(dx, rdx, ndx, dtype, "dx")
    assert_close(dw, rdw, ndw, dtype, "dw")


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint16 if a.itemsize == 2 else
                                        np.uint32 if a.itemsize == 4 else np.uint64)


def _f32_to_bf16_bits(f):
    """flashc's fc_f32_to_bf16: round to nearest even, NaN -> top bits | 0x40."""
    u = np.asarray(f, np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, ((u >> 16) | 0x40) & 0xFFFF, r).astype(np.uint16)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("D", [17, 1000])
def test_simd_dx_rounding_exact(rng, dtype, D):
    """dx = dy·w is one fp32 product rounded once: bit-exact against numpy's
    round-to-nearest-even, through ties, subnormals, overflow and NaN."""
    dt = np_dtype(dtype)
    R = 9
    # Wide exponents so products land on f16 subnormals and overflow too.
    w32 = (rng.standard_normal(D) * np.exp2(rng.integers(-14, 10, D))).astype(np.float32)
    w32[:4] = [np.nan, np.inf, -np.inf, 0.0]
    w = w32.astype(dt)
    dy = (rng.standard_normal(R) * np.exp2(rng.integers(-12, 8, R))).astype(dt)
    x = rng.standard_normal((R, D)).astype(dt)
    dx, _ = flashc.weighted_sum_backward(dy, x, w, backend="cpu", need_dw=False)
    prod = dy.astype(np.float32)[:, None] * w.astype(np.float32)[None, :]
    if dtype == "bfloat16":
        expect = _f32_to_bf16_bits(prod)
    else:
        expect = prod.astype(np.float16).view(np.uint16)
        nan = np.isnan(prod)  # numpy's NaN payload may differ: compare NaN-ness there
        assert np.array_equal(np.isnan(dx.astype(np.float32)), nan)
        expect = np.where(nan, _bits(dx), expect)
    assert np.array_equal(_bits(dx), expect)


_ISA_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import flashc
    sys.path.insert(0, sys.argv[2])
    from reference import np_dtype
    rng = np.random.default_rng(11)
    out = {}
    for dtype in ("float32", "float16", "bfloat16", "float64"):
        for R, D in ((1001, 17), (37, 1025), (4099, 64), (5, 1)):
            dt = np_dtype(dtype)
            x = rng.standard_normal((R, D)).astype(dt)
            w = rng.standard_normal(D).astype(dt)
            dy = rng.standard_normal(R).astype(dt)
            y = flashc.weighted_sum(x, w, backend="cpu")
            dx, dw = flashc.weighted_sum_backward(dy, x, w, backend="cpu")
            k = "%s-%d-%d" % (dtype, R, D)
            out[k + "-y"] = np.asarray(y).astype(np.float64)
            out[k + "-dx"] = np.ascontiguousarray(dx).view(np.uint8)
            out[k + "-dw"] = np.asarray(dw).astype(np.float64)
    np.savez(sys.argv[1], **out)
""")


def _run_script(script, env_extra, *args):
    python_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python")
    env = dict(os.environ, PYTHONPATH=python_dir + os.pathsep + os.environ.get("PYTHONPATH", ""),
               **env_extra)
    r = subprocess.run([sys.executable, "-c", script] + list(args), env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.slow
def test_simd_matches_scalar_path(tmp_path):
    """Each ISA against FLASHC_CPU_ISA=scalar: dx bit-identical, y and dw
    within a few fp32 (f64) roundoffs of the row/column's magnitude."""
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    res = {}
    for isa in ("scalar", "avx2", "avx512"):
        f = str(tmp_path / (isa + ".npz"))
        _run_script(_ISA_SCRIPT, {"FLASHC_CPU_ISA": isa}, f, tests_dir)
        res[isa] = dict(np.load(f))
    for isa in ("avx2", "avx512"):
        for k, v in res["scalar"].items():
            o = res[isa][k]
            if k.endswith("-dx"):
                assert np.array_equal(o, v), (isa, k)
            else:
                # Both accumulate n terms of size ~1 in fp32 (f64) in different
                # orders; 16-bit outputs may then round one ulp apart.
                R, D = int(k.split("-")[1]), int(k.split("-")[2])
                n = D if k.endswith("-y") else R
                acc_eps = 2.0 ** -52 if k.startswith("float64") else 2.0 ** -23
                out_ulp = {"bfloat16": 2.0 ** -7, "float16": 2.0 ** -10}.get(k.split("-")[0], 0.0)
                vmax = np.abs(v).max()
                atol = out_ulp * vmax + n * acc_eps * (vmax + 4.0 * np.sqrt(n))
                np.testing.assert_allclose(o, v, rtol=0, atol=atol,
                                           err_msg="%s %s" % (isa, k))


_THREADS_SCRIPT = textwrap.dedent("""
    import sys, hashlib
    import numpy as np
    import flashc
    sys.path.insert(0, sys.argv[1])
    from reference import np_dtype
    rng = np.random.default_rng(5)
    h = hashlib.sha256()
    for dtype in ("bfloat16", "float16", "float32", "float64"):
        for R, D in ((1001, 17), (4099, 64), (130, 1025)):
            dt = np_dtype(dtype)
            x = rng.standard_normal((R, D)).astype(dt)
            w = rng.standard_normal(D).astype(dt)
            dy = rng.standard_normal(R).astype(dt)
            h.update(np.ascontiguousarray(flashc.weighted_sum(x, w, backend="cpu")).tobytes())
            dx, dw = flashc.weighted_sum_backward(dy, x, w, backend="cpu")
            h.update(dx.tobytes())
            h.update(dw.tobytes())
    print(h.hexdigest())
""")


@pytest.mark.slow
def test_simd_thread_count_invariant():
    """y, dx and dw bit-identical for 1, 2 and 3 threads, all dtypes, row
    counts that are not multiples of the 4-row groups or the thread count."""
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    digests = {_run_script(_THREADS_SCRIPT, {"OMP_NUM_THREADS": n}, tests_dir).strip()
               for n in ("1", "2", "3")}
    assert len(digests) == 1


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
def test_simd_large_dx_streaming(rng, dtype):
    """dx of ≥ 16 MiB takes the non-temporal store path (WS_NT_BYTES in
    weighted_sum_body.h): odd D so rows start at every alignment; dx must
    still be the exact rounded products, dw within tolerance."""
    dt = np_dtype(dtype)
    D = 1025
    R = (16 << 20) // (D * dt.itemsize) + 7
    x = rng.standard_normal((R, D), dtype=np.float32).astype(dt)
    w = rng.standard_normal(D).astype(dt)
    dy = rng.standard_normal(R).astype(dt)
    dx, dw = flashc.weighted_sum_backward(dy, x, w, backend="cpu")
    c = np.float64 if dtype == "float64" else np.float32
    prod = dy.astype(c)[:, None] * w.astype(c)[None, :]
    expect = _f32_to_bf16_bits(prod) if dtype == "bfloat16" else _bits(prod.astype(dt))
    assert np.array_equal(_bits(dx), expect)
    rdw = (dy.astype(np.float64)[:, None] * x.astype(np.float64)).sum(0)
    ndw = (dy.astype(c)[:, None] * x.astype(c)).sum(0).astype(dt)
    assert_close(dw, rdw, ndw, dtype, "dw")
