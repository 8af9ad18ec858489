"""flashc.attention against the float64 materialised reference (tests/reference.py).

Every case runs on every backend (the `backend` fixture; CUDA skips cleanly
without a GPU, and on CUDA each case is also checked against flashc's own
CPU float64 result on identical inputs). Errors are bounded relative to what
a naive implementation in the same precision achieves (reference.tolerance).

The sweep is a combinatorial subset, not the full product: each shape meets
several masks, dtypes and layouts by rotation, and each feature also has a
focused test of its own.
"""

import threading
import time

import numpy as np
import pytest

import flashc
from reference import (
    DTYPES,
    assert_close,
    attention_backward_reference,
    attention_naive,
    attention_reference,
    lse_dtype,
    max_abs_err,
    np_dtype,
    tolerance,
    visible_mask,
)

# ------------------------------------------------------------------ helpers

LAYOUTS = ["contig", "bhsd", "sliced", "negative"]


def with_layout(a, layout):
    """The same logical [B, S, H, D] values under other strides."""
    if layout == "contig":
        return np.ascontiguousarray(a)
    if layout == "bhsd":  # stored [B, H, S, D], viewed as [B, S, H, D]
        return np.ascontiguousarray(a.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    if layout == "sliced":  # every other row of a padded buffer; NaN elsewhere
        B, S, H, D = a.shape
        big = np.full((B, 2 * S, H + 1, D + 3), np.nan, a.dtype)
        view = big[:, ::2, 1:, 2:D + 2]
        view[...] = a
        return view
    if layout == "negative":  # negative strides on B, S and D
        return np.ascontiguousarray(a[::-1, ::-1, :, ::-1])[::-1, ::-1, :, ::-1]
    raise ValueError(layout)


def make_inputs(rng, B, Sq, Sk, Hq, Hkv, D, dtype, use_sinks=False):
    dt = np_dtype(dtype)
    q = rng.standard_normal((B, Sq, Hq, D)).astype(dt)
    k = rng.standard_normal((B, Sk, Hkv, D)).astype(dt)
    v = rng.standard_normal((B, Sk, Hkv, D)).astype(dt)
    sinks = None
    if use_sinks:
        sinks = (rng.standard_normal(Hq) * 2.0).astype(lse_dtype(dtype))
    return q, k, v, sinks


def check_attention(backend, rng, B, Sq, Sk, Hq, Hkv, D, dtype, causal=False, window=(-1, -1),
                    sink_tokens=0, use_sinks=False, layout="contig", softmax_scale=None,
                    out_layout=None):
    q, k, v, sinks = make_inputs(rng, B, Sq, Sk, Hq, Hkv, D, dtype, use_sinks)
    kw = dict(causal=causal, window=window, sink_tokens=sink_tokens, sinks=sinks,
              softmax_scale=softmax_scale)
    ro, rl = attention_reference(q, k, v, **kw)
    no, nl = attention_naive(q, k, v, dtype, **kw)

    out = None
    if out_layout is not None:  # poisoned, possibly strided outputs
        o_buf = with_layout(np.full((B, Sq, Hq, D), np.nan, np_dtype(dtype)), out_layout)
        l_buf = np.full((B, Hq, Sq), np.nan, lse_dtype(dtype))
        out = (o_buf, l_buf)
    o, lse = flashc.attention(with_layout(q, layout), with_layout(k, layout),
                              with_layout(v, layout), return_lse=True, backend=backend,
                              out=out, **kw)
    if out is not None:
        assert o is out[0] and lse is out[1]
    assert o.shape == (B, Sq, Hq, D) and o.dtype == np_dtype(dtype)
    assert lse.shape == (B, Hq, Sq) and lse.dtype == lse_dtype(dtype)
    assert not np.isnan(np.asarray(o, np.float64)).any(), "NaN in o"
    assert not np.isnan(lse).any(), "NaN in lse"

    assert_close(o, ro, no, dtype, "o")
    assert_close(lse, rl, nl, lse_dtype(dtype).__name__, "lse")

    # Rows with no visible key: O = 0 and L = -inf (or s_h) exactly.
    empty = ~visible_mask(Sq, Sk, causal=causal, window=window,
                          sink_tokens=sink_tokens).any(axis=1)
    if empty.any():
        assert np.all(np.asarray(o, np.float64)[:, empty] == 0)
        le = lse[:, :, empty]
        if sinks is None:
            assert np.all(np.isneginf(le))
        else:
            np.testing.assert_allclose(le, np.broadcast_to(sinks[None, :, None], le.shape),
                                       rtol=1e-6)

    if backend == "cuda":
        # Cross-check against flashc's CPU result in float64 on the same inputs.
        f = np.float64
        co, cl = flashc.attention(q.astype(f), k.astype(f), v.astype(f), return_lse=True,
                                  backend="cpu", **dict(kw, sinks=None if sinks is None
                                                        else sinks.astype(f)))
        assert_close(o, co, no, dtype, "o vs CPU F64")
        assert_close(lse, cl, nl, lse_dtype(dtype).__name__, "lse vs CPU F64")
    return o, lse


# -------------------------------------------------------- combinatorial sweep

# (B, Sq, Sk, Hq, Hkv, D)
SHAPES = [
    (1, 1, 1, 1, 1, 1),
    (2, 7, 7, 8, 2, 8),
    (1, 113, 255, 8, 1, 40),
    (2, 128, 128, 12, 4, 59),
    (1, 255, 113, 8, 2, 64),     # Sq > Sk: causal rows before the diagonal see nothing
    (1, 1, 1000, 8, 2, 128),     # decode
    (1, 1000, 1000, 1, 1, 80),
    (3, 33, 77, 4, 4, 200),
    (1, 64, 300, 2, 1, 256),
    (2, 17, 5, 12, 4, 1),
    (1, 129, 129, 8, 8, 96),
    (1, 7, 1000, 8, 1, 64),
    (1, 1000, 1000, 8, 2, 64),
    (1, 513, 1000, 12, 4, 128),
]

MASKS = [
    dict(),
    dict(causal=True),
    dict(window=(0, 0)),
    dict(window=(5, -1)),
    dict(window=(-1, 3)),
    dict(window=(16, 16)),
    dict(causal=True, window=(8, -1)),
    dict(causal=True, window=(16, 0), sink_tokens=4),
    dict(use_sinks=True),
    dict(causal=True, use_sinks=True),
    dict(window=(3, 2), sink_tokens=2, use_sinks=True),
    dict(sink_tokens=3, window=(0, -1)),
    dict(causal=True, window=(0, 0), sink_tokens=1),
]


def _mask_id(m):
    if not m:
        return "full"
    parts = []
    if m.get("causal"):
        parts.append("causal")
    if "window" in m:
        parts.append("w%d_%d" % m["window"])
    if m.get("sink_tokens"):
        parts.append("n%d" % m["sink_tokens"])
    if m.get("use_sinks"):
        parts.append("sinks")
    return "-".join(parts)


def _sweep():
    cases = []
    for i, shape in enumerate(SHAPES):
        for j in range(4):
            mask = MASKS[(3 * i + 5 * j) % len(MASKS)]
            dtype = DTYPES[(i + j) % 4]
            layout = LAYOUTS[(i + 3 * j + i // 4) % 4]
            cid = "B%d-Sq%d-Sk%d-H%d_%d-D%d-%s-%s-%s" % (shape + (_mask_id(mask), dtype, layout))
            cases.append(pytest.param(shape, mask, dtype, layout, id=cid))
    return cases


@pytest.mark.parametrize("shape,mask,dtype,layout", _sweep())
def test_sweep(backend, rng, shape, mask, dtype, layout):
    check_attention(backend, rng, *shape, dtype=dtype, layout=layout, **mask)


# --------------------------------------------------------- focused sweeps


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask", MASKS, ids=_mask_id)
@pytest.mark.parametrize("shape", [(2, 45, 70, 8, 2, 40), (1, 70, 45, 4, 1, 24)],
                         ids=["Sq<Sk", "Sq>Sk"])
def test_masks(backend, rng, shape, mask, dtype):
    check_attention(backend, rng, *shape, dtype=dtype, **mask)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("D", [1, 8, 40, 59, 64, 80, 128, 200, 256])
def test_head_dims(backend, rng, D, dtype):
    check_attention(backend, rng, 1, 37, 61, 4, 2, D, dtype, causal=D % 2 == 0)


@pytest.mark.parametrize("Hq,Hkv", [(1, 1), (8, 2), (8, 1), (12, 4)])
@pytest.mark.parametrize("causal", [False, True])
def test_gqa(backend, rng, Hq, Hkv, causal):
    check_attention(backend, rng, 2, 50, 80, Hq, Hkv, 32, "float32", causal=causal,
                    layout="bhsd")


@pytest.mark.parametrize("Sq,Sk", [(1, 1000), (1000, 1), (7, 113), (113, 7), (128, 255),
                                   (255, 128), (1000, 1000)])
@pytest.mark.parametrize("mask", [dict(), dict(causal=True), dict(window=(40, 10))],
                         ids=_mask_id)
def test_seq_lengths(backend, rng, Sq, Sk, mask):
    check_attention(backend, rng, 1, Sq, Sk, 2, 1, 32, "float32", **mask)


@pytest.mark.parametrize("B", [1, 2, 5])
def test_batch(backend, rng, B):
    check_attention(backend, rng, B, 31, 47, 4, 2, 16, "float32", causal=True,
                    layout="negative")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("Sq,Sk", [(0, 5), (5, 0), (0, 0)])
@pytest.mark.parametrize("use_sinks", [False, True], ids=["nosinks", "sinks"])
def test_empty_sequences(backend, rng, Sq, Sk, dtype, use_sinks):
    # Sk = 0: every row sees nothing -> O = 0, L = -inf (or s_h).
    check_attention(backend, rng, 2, Sq, Sk, 4, 2, 8, dtype, use_sinks=use_sinks)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("use_sinks", [False, True], ids=["nosinks", "sinks"])
@pytest.mark.parametrize("mask", [dict(causal=True), dict(window=(0, 0)),
                                  dict(window=(2, -1), causal=True, sink_tokens=1)],
                         ids=_mask_id)
def test_fully_masked_rows(backend, rng, dtype, use_sinks, mask):
    # Sq = 40 > Sk = 10: offset = -30, so the first rows have no visible key
    # (check_attention asserts O = 0 and L = -inf / s_h on exactly those rows).
    empty = ~visible_mask(40, 10, causal=mask.get("causal", False),
                          window=mask.get("window", (-1, -1)),
                          sink_tokens=mask.get("sink_tokens", 0)).any(axis=1)
    assert empty.any()
    check_attention(backend, rng, 1, 40, 10, 4, 2, 16, dtype, use_sinks=use_sinks, **mask)


@pytest.mark.parametrize("out_layout", ["contig", "bhsd", "sliced", "negative"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_poisoned_out(backend, rng, out_layout, dtype):
    # out= filled with NaN: every element of o and lse must be written.
    check_attention(backend, rng, 2, 65, 90, 6, 3, 24, dtype, causal=True,
                    out_layout=out_layout, use_sinks=True)


@pytest.mark.parametrize("softmax_scale", [0.05, 0.3, 2.0])
def test_softmax_scale(backend, rng, softmax_scale):
    check_attention(backend, rng, 1, 20, 30, 2, 2, 16, "float32", softmax_scale=softmax_scale)


def test_decode_long(backend, rng):
    check_attention(backend, rng, 4, 1, 4096, 8, 1, 64, "bfloat16", causal=True,
                    window=(256, 0), sink_tokens=4, use_sinks=True)


# ------------------------------------------------------------ API behaviour


def test_return_lse_false_same_o(backend, rng):
    q, k, v, _ = make_inputs(rng, 1, 19, 23, 4, 2, 8, "float32")
    o1 = flashc.attention(q, k, v, causal=True, backend=backend)
    o2, _ = flashc.attention(q, k, v, causal=True, backend=backend, return_lse=True)
    assert isinstance(o1, np.ndarray) and np.array_equal(o1, o2)


def test_out_single_array(backend, rng):
    q, k, v, _ = make_inputs(rng, 1, 9, 11, 2, 2, 8, "float32")
    out = np.full(q.shape, np.nan, np.float32)
    o = flashc.attention(q, k, v, out=out, backend=backend)
    assert o is out and np.isfinite(out).all()


def test_inputs_read_only_and_unchanged(backend, rng):
    q, k, v, sinks = make_inputs(rng, 1, 9, 11, 2, 1, 8, "float32", use_sinks=True)
    copies = [a.copy() for a in (q, k, v, sinks)]
    for a in (q, k, v, sinks):
        a.flags.writeable = False
    flashc.attention(q, k, v, sinks=sinks, causal=True, backend=backend)
    for a, c in zip((q, k, v, sinks), copies):
        assert np.array_equal(a, c)


def test_sinks_as_list(backend, rng):
    q, k, v, _ = make_inputs(rng, 1, 5, 6, 2, 2, 4, "float32")
    s = [0.5, -1.0]
    o1 = flashc.attention(q, k, v, sinks=s, backend=backend)
    o2 = flashc.attention(q, k, v, sinks=np.array(s, np.float32), backend=backend)
    assert np.array_equal(o1, o2)


def test_deterministic_repeat(backend, rng):
    q, k, v, sinks = make_inputs(rng, 2, 200, 300, 8, 2, 64, "float32", use_sinks=True)
    a = flashc.attention(q, k, v, causal=True, sinks=sinks, backend=backend)
    b = flashc.attention(q, k, v, causal=True, sinks=sinks, backend=backend)
    assert a.tobytes() == b.tobytes()


def test_concurrent_threads(backend, rng):
    """Calls from many threads at once (the GIL is released in the call) give
    the same bytes as the same calls made one after another."""
    cases = [make_inputs(rng, 1, 64 + 7 * i, 96, 4, 2, 32, "float32") for i in range(8)]
    serial = [flashc.attention(q, k, v, causal=True, backend=backend) for q, k, v, _ in cases]
    results = [None] * len(cases)
    errors = []
    barrier = threading.Barrier(len(cases))

    def work(i):
        try:
            q, k, v, _ = cases[i]
            barrier.wait()
            for _ in range(3):
                results[i] = flashc.attention(q, k, v, causal=True, backend=backend)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for s, r in zip(serial, results):
        assert s.tobytes() == r.tobytes()


def test_gil_released(rng):
    """A long CPU call must not hold the GIL: a Python thread keeps running.

    The call is grown until it lasts >= 30 ms, so the check means the same on
    a 2-core laptop and a 16-core server (a 1 ms ticker then gets ~30 ticks
    if the GIL is free during the call, ~0 if it is held)."""
    for S in (1500, 3000, 6000, 12000):
        q, k, v, _ = make_inputs(rng, 1, S, S, 8, 8, 64, "float32")
        ticks = []
        stop = threading.Event()

        def ticker():
            while not stop.is_set():
                ticks.append(time.perf_counter())
                stop.wait(0.001)

        span = []

        def call():
            t0 = time.perf_counter()
            flashc.attention(q, k, v, backend="cpu")
            span.extend((t0, time.perf_counter()))

        t = threading.Thread(target=ticker)
        c = threading.Thread(target=call)
        t.start()
        c.start()
        c.join()
        stop.set()
        t.join()
        t0, t1 = span
        if t1 - t0 >= 0.03:
            break
    during = sum(1 for x in ticks if t0 < x < t1)
    assert during >= 3, f"{during} ticks during a {1e3 * (t1 - t0):.0f} ms call: the GIL was held"


# ------------------------------------------------------- backward wrapper


@pytest.mark.parametrize("use_sinks", [False, True], ids=["nosinks", "sinks"])
def test_attention_backward_wrapper_f64(backend, rng, use_sinks):
    """flashc.attention_backward end to end in float64 (the backward kernels
    have their own suite in test_attn_bwd.py; this checks the binding)."""
    q, k, v, sinks = make_inputs(rng, 2, 13, 17, 4, 2, 8, "float64", use_sinks)
    do = rng.standard_normal(q.shape)
    kw = dict(causal=True, window=(6, -1), sink_tokens=2, sinks=sinks)
    o, lse = flashc.attention(q, k, v, return_lse=True, backend=backend, **kw)
    grads = flashc.attention_backward(with_layout(do, "bhsd"), q, k, v, o, lse,
                                      backend=backend, **kw)
    assert len(grads) == (4 if use_sinks else 3)
    ref = attention_backward_reference(do, q, k, v, **kw)
    for name, g, r in zip(("dq", "dk", "dv", "dsinks"), grads, ref):
        assert g.shape == r.shape and g.dtype == np.float64, name
        assert max_abs_err(g, r) <= 1e-10 * max(1.0, np.abs(r).max()), name


def test_attention_backward_out(backend, rng):
    q, k, v, sinks = make_inputs(rng, 1, 9, 12, 4, 2, 8, "float32", use_sinks=True)
    do = rng.standard_normal(q.shape).astype(np.float32)
    o, lse = flashc.attention(q, k, v, return_lse=True, sinks=sinks, backend=backend)
    outs = tuple(np.full(a.shape, np.nan, a.dtype) for a in (q, k, v, sinks))
    grads = flashc.attention_backward(do, q, k, v, o, lse, sinks=sinks, out=outs,
                                      backend=backend)
    for g, out in zip(grads, outs):
        assert g is out and np.isfinite(out).all()


# ===================================================== CPU decode path (Sq small)
# The SIMD CPU forward takes a keys-on-lanes path when a (b, kv head) has at
# most FLASHC_CPU_DECODE_ROWS query rows Sq·G (default 16 on AVX-512, 8 on
# AVX2; the scalar and F64 paths ignore it), and splits long
# key ranges across threads (split-K partials merged in a fixed order). These
# cases are all small-Sq shapes; every mask / dtype / layout meets each
# (Sq, Sk, heads) by rotation. Sk = 4097 with few (b, kv head) pairs takes
# the split-K merge; Sk = 1 and 100 a single partial chunk.

_DEC_MASKS = [
    dict(),
    dict(causal=True),
    dict(causal=True, window=(37, 0)),
    dict(window=(50, 20), sink_tokens=3),
    dict(causal=True, window=(64, 0), sink_tokens=4, use_sinks=True),
    dict(use_sinks=True),
    dict(window=(0, 0)),                 # one key per row (none when Sq > Sk)
]
_DEC_HEADS = [(4, 4), (8, 2), (6, 1)]    # MHA, GQA, MQA


def _decode_cases():
    out, n = [], 0
    for Sq in (1, 3):
        for Sk in (1, 100, 4097):
            for heads in _DEC_HEADS:
                for k in range(3):
                    mask = _DEC_MASKS[(n + k) % len(_DEC_MASKS)]
                    dtype = DTYPES[(n + k) % len(DTYPES)]
                    layout = LAYOUTS[(n + 2 * k) % len(LAYOUTS)]
                    D = (64, 128, 40, 17)[(n + k) % 4]
                    cid = "Sq%d-Sk%d-H%d_%d-D%d-%s-%s-%s" % (Sq, Sk, heads[0], heads[1], D,
                                                            _mask_id(mask), dtype, layout)
                    out.append(pytest.param(Sq, Sk, heads, D, mask, dtype, layout, id=cid))
                n += 1
    return out


@pytest.mark.parametrize("Sq,Sk,heads,D,mask,dtype,layout", _decode_cases())
def test_decode_sweep(backend, rng, monkeypatch, Sq, Sk, heads, D, mask, dtype, layout):
    # Forced onto the decode path whatever the ISA's default threshold.
    monkeypatch.setenv("FLASHC_CPU_DECODE_ROWS", "64")
    Hq, Hkv = heads
    check_attention(backend, rng, 2 if Sk < 4097 else 1, Sq, Sk, Hq, Hkv, D, dtype,
                    layout=layout, **mask)


@pytest.mark.parametrize("rows", ["0", "1", "16", "64"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_decode_path_threshold(backend, rng, monkeypatch, rows, dtype):
    # The same small-Sq problems with the decode path forced off / on for
    # every row count: both paths must match the reference.
    monkeypatch.setenv("FLASHC_CPU_DECODE_ROWS", rows)
    check_attention(backend, rng, 1, 4, 777, 8, 2, 128, dtype, causal=True, window=(300, 0),
                    sink_tokens=2, use_sinks=True)
    check_attention(backend, rng, 3, 1, 2100, 4, 4, 64, dtype, layout="bhsd")
    check_attention(backend, rng, 1, 2, 5000, 32, 2, 96, dtype, window=(-1, 0))


def test_decode_split_deterministic(backend, rng):
    # Split-K (B·Hkv = 1, 9000 keys → several splits): repeated calls give
    # identical bytes.
    q, k, v, sinks = make_inputs(rng, 1, 1, 9000, 4, 1, 128, "float32", use_sinks=True)
    o1, l1 = flashc.attention(q, k, v, sinks=sinks, return_lse=True, backend=backend)
    o2, l2 = flashc.attention(q, k, v, sinks=sinks, return_lse=True, backend=backend)
    assert o1.tobytes() == o2.tobytes() and l1.tobytes() == l2.tobytes()


_DEC_DET_SCRIPT = """
import hashlib
import numpy as np
import flashc
rng = np.random.default_rng(3)
h = hashlib.sha256()
for B, Sq, Sk, Hq, Hkv, D, dt in ((1, 1, 9000, 8, 1, 128, np.float32),
                                  (1, 3, 5000, 8, 2, 64, np.float32),
                                  (2, 1, 4097, 4, 4, 40, np.float16)):
    q = rng.standard_normal((B, Sq, Hq, D)).astype(dt)
    k = rng.standard_normal((B, Sk, Hkv, D)).astype(dt)
    v = rng.standard_normal((B, Sk, Hkv, D)).astype(dt)
    s = rng.standard_normal(Hq).astype(np.float32)
    o, lse = flashc.attention(q, k, v, return_lse=True, window=(3000, 0), sink_tokens=4, sinks=s,
                              backend="cpu")
    h.update(o.tobytes())
    h.update(lse.tobytes())
print(h.hexdigest())
"""


def test_decode_split_deterministic_across_thread_counts():
    # The split count is a function of the shape, never of the threads.
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    digests = []
    for threads in (1, 2, 3):
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        env["PYTHONPATH"] = os.pathsep.join([os.path.join(os.path.dirname(here), "python"),
                                             env.get("PYTHONPATH", "")])
        r = subprocess.run([sys.executable, "-c", _DEC_DET_SCRIPT], env=env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        digests.append(r.stdout.strip())
    assert digests[0] == digests[1] == digests[2]


@pytest.mark.parametrize("D", [1, 8, 40, 59, 64, 80, 128, 200, 256])
@pytest.mark.parametrize("dtype", DTYPES)
def test_decode_head_dims(backend, rng, monkeypatch, D, dtype):
    # Every head dim on the decode path: in-place fp32 K/V (D a multiple of
    # the vector width / of 4 vectors) and converted, zero-padded rows.
    monkeypatch.setenv("FLASHC_CPU_DECODE_ROWS", "64")
    check_attention(backend, rng, 2, 2, 613, 4, 2, D, dtype, causal=D % 2 == 0)
    check_attention(backend, rng, 1, 1, 1500, 3, 1, D, dtype, window=(700, 0), sink_tokens=2,
                    use_sinks=True)


# ------------------------------------------- CPU BF16 fast path (AVX512-BF16)
# On a CPU with AVX512_BF16 the BF16 forward runs on vdpbf16ps: bf16
# products with fp32 accumulation, the softmax in fp32, P rounded to bf16
# before P·V (flashc.h, Precision). FLASHC_CPU_BF16=0 (read at every call)
# forces the fp32-conversion path, =1 the fast path wherever the CPU has it. Each case runs both on identical inputs:
# each must meet the float64 reference within the usual bound, and they must
# differ (else the fast path was not taken) by no more than that bound.

def _bf16_fast_available():
    return flashc.cpu_isa() == "avx512" and "avx512_bf16" in flashc.cpu_features()


# (B, Sq, Sk, Hq, Hkv, D), mask, layout
_BF16_CASES = [
    ((1, 200, 300, 4, 2, 40), dict(causal=True), "contig"),
    ((2, 130, 130, 2, 2, 64), dict(), "bhsd"),
    ((1, 257, 257, 4, 1, 128), dict(causal=True, window=(100, 0), sink_tokens=3), "contig"),
    ((1, 100, 333, 2, 1, 256), dict(use_sinks=True), "sliced"),
    ((1, 129, 129, 3, 3, 33), dict(causal=True), "negative"),
    ((1, 64, 200, 8, 8, 1), dict(window=(20, 20)), "contig"),
    ((1, 77, 1000, 6, 2, 96), dict(causal=True, window=(64, 0), sink_tokens=4, use_sinks=True),
     "contig"),
    ((2, 300, 100, 4, 2, 64), dict(causal=True), "contig"),   # rows with no visible key
    ((1, 1, 999, 8, 2, 128), dict(causal=True), "contig"),    # decode, forced onto the path
    ((1, 3, 2000, 16, 1, 80), dict(window=(500, 0)), "bhsd"),  # decode-sized MQA, forced
]


@pytest.mark.parametrize("shape,mask,layout", [
    pytest.param(s, m, l, id="%s-%s-%s" % ("_".join(map(str, s)), _mask_id(m), l))
    for s, m, l in _BF16_CASES])
def test_cpu_bf16_fast_path(rng, monkeypatch, shape, mask, layout):
    monkeypatch.setenv("FLASHC_CPU_BF16", "1")  # on wherever the CPU has it
    if not _bf16_fast_available():
        pytest.skip("no AVX512-BF16 path here (isa %s, features %s)"
                    % (flashc.cpu_isa(), flashc.cpu_features()))
    # Decode-sized problems take the fp32 decode path by default; 0 sends
    # them through the row-block path, where the BF16 kernels are.
    monkeypatch.setenv("FLASHC_CPU_DECODE_ROWS", "0")
    seed = int(rng.integers(2 ** 31))
    fast, fast_lse = check_attention("cpu", np.random.default_rng(seed), *shape, "bfloat16",
                                     layout=layout, **mask)
    monkeypatch.setenv("FLASHC_CPU_BF16", "0")
    assert flashc.cpu_features() == []
    slow, slow_lse = check_attention("cpu", np.random.default_rng(seed), *shape, "bfloat16",
                                     layout=layout, **mask)
    assert not np.array_equal(fast, slow), "the BF16 fast path gave the fp32 path's bytes"
    _paths_agree(seed, shape, mask, (fast, fast_lse), (slow, slow_lse), "fast")


def _paths_agree(seed, shape, mask, fast, slow, name):
    """Two CPU BF16 paths' (o, lse) on the inputs of seed differ by no more
    than the naive same-precision bound of the float64 reference."""
    q, k, v, sinks = make_inputs(np.random.default_rng(seed), *shape, "bfloat16",
                                 mask.get("use_sinks", False))
    kw = {key: val for key, val in mask.items() if key != "use_sinks"}
    ro, rl = attention_reference(q, k, v, sinks=sinks, **kw)
    no, nl = attention_naive(q, k, v, "bfloat16", sinks=sinks, **kw)
    for what, a, b, ref, naive, dt in (("o", fast[0], slow[0], ro, no, "bfloat16"),
                                       ("lse", fast[1], slow[1], rl, nl, "float32")):
        tol = tolerance(ref, naive, dt)
        err = max_abs_err(a, b)
        assert err <= tol, "%s: %s vs fp32 path differ by %.3g > %.3g" % (what, name, err, tol)


# ------------------------------------------------ CPU BF16 on AMX tiles
# Where the CPU has AMX-BF16 (and the OS lets the process use it) the BF16
# forward runs both products on the tile unit (flashc.h, Environment:
# FLASHC_CPU_AMX). The same cases: the AMX path and the fp32-conversion path
# each within the naive bound of the float64 reference, and different bytes
# (else AMX was not taken); the vdpbf16ps path (FLASHC_CPU_AMX=0,
# FLASHC_CPU_BF16=1) is checked against the reference too.

def _amx_available():
    return flashc.cpu_isa() == "avx512" and "amx_bf16" in flashc.cpu_features()


@pytest.mark.parametrize("shape,mask,layout", [
    pytest.param(s, m, l, id="%s-%s-%s" % ("_".join(map(str, s)), _mask_id(m), l))
    for s, m, l in _BF16_CASES])
def test_cpu_bf16_amx_path(rng, monkeypatch, shape, mask, layout):
    monkeypatch.delenv("FLASHC_CPU_BF16", raising=False)
    monkeypatch.delenv("FLASHC_CPU_AMX", raising=False)  # on by default where the CPU has it
    if not _amx_available():
        pytest.skip("no AMX-BF16 path here (isa %s, features %s)"
                    % (flashc.cpu_isa(), flashc.cpu_features()))
    monkeypatch.setenv("FLASHC_CPU_DECODE_ROWS", "0")  # decode-sized shapes onto the row-block path
    seed = int(rng.integers(2 ** 31))
    amx, amx_lse = check_attention("cpu", np.random.default_rng(seed), *shape, "bfloat16",
                                   layout=layout, **mask)
    monkeypatch.setenv("FLASHC_CPU_AMX", "0")
    assert "amx_bf16" not in flashc.cpu_features()
    monkeypatch.setenv("FLASHC_CPU_BF16", "1")
    if "avx512_bf16" in flashc.cpu_features():  # the vdpbf16ps path, against the reference
        check_attention("cpu", np.random.default_rng(seed), *shape, "bfloat16", layout=layout, **mask)
    monkeypatch.setenv("FLASHC_CPU_BF16", "0")
    assert flashc.cpu_features() == []
    slow, slow_lse = check_attention("cpu", np.random.default_rng(seed), *shape, "bfloat16",
                                     layout=layout, **mask)
    assert not np.array_equal(amx, slow), "the AMX path gave the fp32 path's bytes"
    _paths_agree(seed, shape, mask, (amx, amx_lse), (slow, slow_lse), "AMX")


def test_cpu_amx_knob_validated(monkeypatch):
    """FLASHC_CPU_AMX accepts 0 and 1 only: another value is an error naming it."""
    monkeypatch.setenv("FLASHC_CPU_AMX", "yes")
    q = np.ones((1, 4, 1, 8), np.float32)
    with pytest.raises(flashc.FlashcError, match="FLASHC_CPU_AMX"):
        flashc.attention(q, q, q)
