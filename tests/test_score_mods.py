"""Score modifiers (flashc.h, "Scores"): softcap and ALiBi slopes.

Each alone and both together, meeting causal / GQA / windows / sink tokens /
sink logits / Sq != Sk / odd head dims / every dtype, forward and backward,
against the float64 reference of tests/reference.py (which writes the
pipeline once, in the header's order: scale, softcap, ALiBi bias, mask,
softmax with the sink logit). Tolerances are relative to a naive
implementation in the same precision (reference.tolerance); outputs are
poisoned with NaN so that every element must be written.

- forward: a combinatorial sweep (every backend via the `backend` fixture:
  on CUDA it runs the same cases against the same reference), every dtype
  per modifier, the CPU decode path (FLASHC_CPU_DECODE_ROWS) and the split-K
  decode, slopes of every layout ([Hq], [B, Hq], strided, negative and zero
  strides: the same bits as contiguous slopes);
- backward (CPU): float64 against the analytic reference and by central
  finite differences through flashc's own forward; fp32/fp16/bf16 against
  float64 within the naive backward's error;
- masked-key robustness: NaN/Inf in keys and values a row cannot see leave
  that row's output and gradients bit-identical, with and without modifiers.
The runner (scripts/test) repeats the file under every CPU ISA.
"""


import numpy as np
import pytest

import flashc
from reference import (
    DTYPES,
    assert_close,
    attention_backward_naive,
    attention_backward_reference,
    attention_naive,
    attention_reference,
    lse_dtype,
    max_abs_err,
    np_dtype,
    tolerance,
    visible_mask,
)

# ------------------------------------------------------------------ inputs

# Modifier settings. "alibi": the slopes' layout (see make_slopes).
MODS = {
    "softcap": dict(softcap=2.5),
    "softcap_saturated": dict(softcap=1.0, softmax_scale=1.0),   # tanh deep in saturation
    "alibi_h": dict(alibi="h"),
    "alibi_bh": dict(alibi="bh"),
    "both": dict(softcap=4.0, alibi="bh"),
    "both_h_scale": dict(softcap=30.0, alibi="h", softmax_scale=0.9),
}
MODS_BASIC = ["softcap", "alibi_h", "alibi_bh", "both"]


def make_slopes(rng, B, Hq, kind, dtype):
    """ALiBi slopes of one layout, values of `dtype` (float32; float64 for
    float64 inputs):
      h          [Hq] geometric 2^(-8(h+1)/Hq), the ALiBi paper's
      bh         [B, Hq] random in [0, 0.25), one negative slope
      h_strided  [Hq] every third element of a NaN-filled buffer
      h_neg      [Hq] with a negative stride
      bh_t       [B, Hq] column-major (strides (1, B))
      bh_bcast   [B, Hq] with a zero batch stride (one row for every batch)
      bh_strided [B, Hq] a slice of a NaN-filled [2B, 2Hq + 1] buffer
    """
    dt = np.dtype(dtype)
    if kind.startswith("h"):
        s = (2.0 ** (-8.0 * np.arange(1, Hq + 1) / Hq)).astype(dt)
    else:
        s = rng.uniform(0.0, 0.25, (B, Hq)).astype(dt)
        if s.size > 1:
            s[-1, 0] = -0.05  # any finite slope is valid (a negative one favours far keys)
    if kind in ("h", "bh"):
        return s
    if kind == "h_strided":
        buf = np.full(3 * Hq, np.nan, dt)
        buf[::3] = s
        return buf[::3]
    if kind == "h_neg":
        return np.ascontiguousarray(s[::-1])[::-1]
    if kind == "bh_t":
        return np.asfortranarray(s)
    if kind == "bh_bcast":
        return np.broadcast_to(s[0], (B, Hq))
    if kind == "bh_strided":
        buf = np.full((2 * B, 2 * Hq + 1), np.nan, dt)
        buf[::2, 1::2] = s
        return buf[::2, 1::2]
    raise ValueError(kind)


def make(rng, B, Sq, Sk, Hq, Hkv, D, dtype, mods=None, use_sinks=False, **mask):
    """q, k, v of `dtype` and the keyword arguments of the call."""
    dt = np_dtype(dtype)
    q = rng.standard_normal((B, Sq, Hq, D)).astype(dt)
    k = rng.standard_normal((B, Sk, Hkv, D)).astype(dt)
    v = rng.standard_normal((B, Sk, Hkv, D)).astype(dt)
    kw = dict(mask)
    mods = dict(mods or {})
    alibi = mods.pop("alibi", None)
    kw.update(mods)
    if alibi is not None:
        kw["alibi_slopes"] = make_slopes(rng, B, Hq, alibi, lse_dtype(dtype))
    if use_sinks:
        kw["sinks"] = (rng.standard_normal(Hq) * 2.0).astype(lse_dtype(dtype))
    return q, k, v, kw


def poisoned(shape, dtype):
    return np.full(shape, np.nan, np_dtype(dtype))


def _id(d):
    if not d:
        return "plain"
    parts = []
    for key, val in d.items():
        if key == "causal" and val:
            parts.append("causal")
        elif key == "window":
            parts.append("w%d_%d" % val)
        elif key == "sink_tokens":
            parts.append("n%d" % val)
        elif key == "use_sinks" and val:
            parts.append("sinks")
        elif key not in ("causal", "use_sinks"):
            parts.append("%s%s" % (key, val))
    return "-".join(parts)


# ----------------------------------------------------------------- forward


def check_forward(backend, rng, B, Sq, Sk, Hq, Hkv, D, dtype, mods, use_sinks=False, **mask):
    q, k, v, kw = make(rng, B, Sq, Sk, Hq, Hkv, D, dtype, mods, use_sinks, **mask)
    ro, rl = attention_reference(q, k, v, **kw)
    no, nl = attention_naive(q, k, v, dtype, **kw)
    out = (poisoned(q.shape, dtype), np.full((B, Hq, Sq), np.nan, lse_dtype(dtype)))
    o, lse = flashc.attention(q, k, v, return_lse=True, backend=backend, out=out, **kw)
    assert o is out[0] and lse is out[1]
    assert not np.isnan(np.asarray(o, np.float64)).any(), "NaN in o (unwritten or wrong)"
    assert not np.isnan(lse).any(), "NaN in lse (unwritten or wrong)"
    assert_close(o, ro, no, dtype, "o")
    cap = kw.get("softcap") or 0.0
    if backend == "cuda" and dtype in ("float16", "bfloat16") and cap:
        # The CUDA tensor-core kernels take tanh from the hardware approximation
        # (tanh.approx.f32, relative error < 2^-10.9), as FlashAttention does: the
        # logits, hence L, may move by up to softcap·2^-10.9 (o is within the dtype).
        tol = max(tolerance(rl, nl, lse_dtype(dtype).__name__), cap * 2.0 ** -10)
        err = max_abs_err(lse, rl)
        assert err <= tol, "lse: max |err| = %.3g exceeds %.3g (softcap %g, hardware tanh)" % (err, tol, cap)
    else:
        assert_close(lse, rl, nl, lse_dtype(dtype).__name__, "lse")
    # Rows with no visible key: O = 0 and L = -inf (or s_h) whatever the modifiers.
    empty = ~visible_mask(Sq, Sk, causal=mask.get("causal", False),
                          window=mask.get("window", (-1, -1)),
                          sink_tokens=mask.get("sink_tokens", 0)).any(axis=1)
    if empty.any():
        assert np.all(np.asarray(o, np.float64)[:, empty] == 0)
        le = lse[:, :, empty]
        if use_sinks:
            np.testing.assert_allclose(le, np.broadcast_to(kw["sinks"][None, :, None], le.shape),
                                       rtol=1e-6)
        else:
            assert np.all(np.isneginf(le))
    return q, k, v, kw, o, lse


# (B, Sq, Sk, Hq, Hkv, D)
SHAPES = [
    (2, 37, 61, 4, 2, 40),
    (1, 70, 45, 4, 1, 59),       # Sq > Sk: causal rows before the diagonal see nothing
    (1, 128, 128, 8, 2, 64),
    (2, 1, 300, 8, 2, 128),      # decode
    (1, 100, 333, 6, 3, 96),
    (3, 17, 5, 4, 4, 8),
    (1, 129, 150, 2, 1, 256),
    (2, 65, 65, 3, 1, 33),
]

MASKS = [
    dict(),
    dict(causal=True),
    dict(window=(7, 3)),
    dict(causal=True, window=(16, -1), sink_tokens=3),
    dict(use_sinks=True),
    dict(causal=True, use_sinks=True),
    dict(window=(5, 2), sink_tokens=2, use_sinks=True),
]


def _sweep():
    cases, names = [], list(MODS)
    for i, shape in enumerate(SHAPES):
        for j in range(3):
            mods = names[(2 * i + j) % len(names)]
            mask = MASKS[(3 * i + 2 * j) % len(MASKS)]
            dtype = DTYPES[(i + j) % 4]
            cid = "B%d-Sq%d-Sk%d-H%d_%d-D%d" % shape + "-%s-%s-%s" % (mods, _id(mask), dtype)
            cases.append(pytest.param(shape, mods, mask, dtype, id=cid))
    return cases


@pytest.mark.parametrize("shape,mods,mask,dtype", _sweep())
def test_forward_sweep(backend, rng, shape, mods, mask, dtype):
    check_forward(backend, rng, *shape, dtype, MODS[mods], **mask)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mods", list(MODS))
def test_forward_dtypes(backend, rng, mods, dtype):
    # causal + GQA + sink tokens + sink logits, Sq != Sk, odd D
    check_forward(backend, rng, 2, 45, 70, 6, 2, 59, dtype, MODS[mods], use_sinks=True,
                  causal=True, window=(30, 0), sink_tokens=2)


@pytest.mark.parametrize("rows", ["0", "64"])
@pytest.mark.parametrize("case", [
    (2, 1, 300, 8, 2, 64, dict(causal=True), "float32"),
    (1, 1, 1000, 4, 1, 128, dict(window=(200, 0), sink_tokens=4, use_sinks=True), "bfloat16"),
    (2, 3, 257, 8, 2, 40, dict(causal=True, use_sinks=True), "float16"),
    (1, 1, 4097, 4, 1, 64, dict(causal=True, window=(3000, 0)), "float32"),   # split-K
    (1, 2, 100, 6, 1, 59, dict(), "float64"),
], ids=["sq1-causal", "sq1-window-sinks", "sq3-f16", "sq1-splitk", "sq2-f64"])
@pytest.mark.parametrize("mods", ["softcap", "alibi_bh", "both"])
def test_forward_decode(backend, rng, monkeypatch, rows, case, mods):
    # FLASHC_CPU_DECODE_ROWS=64 forces the CPU decode (keys-on-lanes) path,
    # 0 the row-block path; CUDA ignores it.
    monkeypatch.setenv("FLASHC_CPU_DECODE_ROWS", rows)
    B, Sq, Sk, Hq, Hkv, D, mask, dtype = case
    check_forward(backend, rng, B, Sq, Sk, Hq, Hkv, D, dtype, MODS[mods], **mask)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_slope_layouts_same_bits(backend, rng, dtype):
    """Slopes of any strides give the same bits as the contiguous slopes of
    the same values ([Hq] and [B, Hq] separately)."""
    B, Sq, Sk, Hq, Hkv, D = 2, 40, 50, 4, 2, 24
    q, k, v, kw = make(rng, B, Sq, Sk, Hq, Hkv, D, dtype, dict(softcap=3.0), causal=True)
    for kinds in (("h", "h_strided", "h_neg"), ("bh", "bh_t", "bh_strided")):
        seed = int(rng.integers(2 ** 31))
        base = None
        for kind in kinds:
            s = make_slopes(np.random.default_rng(seed), B, Hq, kind, lse_dtype(dtype))
            o = flashc.attention(q, k, v, alibi_slopes=s, backend=backend, **kw)
            if base is None:
                base = o
                ro, _ = attention_reference(q, k, v, alibi_slopes=s, **kw)
                no, _ = attention_naive(q, k, v, dtype, alibi_slopes=s, **kw)
                assert_close(o, ro, no, dtype, "o (%s)" % kind)
            else:
                assert o.tobytes() == base.tobytes(), "slopes %s differ from %s" % (kind, kinds[0])
    # A zero batch stride is one row of slopes for every batch: the [Hq] result.
    s = make_slopes(rng, B, Hq, "bh", lse_dtype(dtype))
    o1 = flashc.attention(q, k, v, alibi_slopes=np.broadcast_to(s[0], (B, Hq)),
                          backend=backend, **kw)
    o2 = flashc.attention(q, k, v, alibi_slopes=np.ascontiguousarray(s[0]), backend=backend, **kw)
    ro, _ = attention_reference(q, k, v, alibi_slopes=np.broadcast_to(s[0], (B, Hq)), **kw)
    no, _ = attention_naive(q, k, v, dtype, alibi_slopes=s[0], **kw)
    assert_close(o1, ro, no, dtype, "o (zero batch stride)")
    assert_close(o2, ro, no, dtype, "o ([Hq])")


def test_per_batch_slopes_matter(backend, rng):
    """[B, Hq] slopes are read per batch: batch 1 with batch 0's slopes is
    a different result (so a kernel reading only row 0 fails)."""
    q, k, v, kw = make(rng, 2, 30, 40, 2, 1, 16, "float32", causal=True)
    s = np.array([[0.5, 0.1], [0.02, 0.7]], np.float32)
    o = flashc.attention(q, k, v, alibi_slopes=s, backend=backend, **kw)
    o0 = flashc.attention(q, k, v, alibi_slopes=np.ascontiguousarray(s[[0, 0]]),
                          backend=backend, **kw)
    ro, _ = attention_reference(q, k, v, alibi_slopes=s, **kw)
    assert max_abs_err(o, ro) < 1e-5
    assert max_abs_err(o[1], o0[1]) > 1e-3 and np.array_equal(o[0], o0[0])


def test_off_values(backend, rng):
    """softcap None / 0 and softmax_scale None / 0 are the same call (0 means
    "off" / "1/sqrt(D)", as in C)."""
    q, k, v, kw = make(rng, 1, 20, 30, 4, 2, 16, "float32", causal=True, use_sinks=True)
    base = flashc.attention(q, k, v, backend=backend, **kw)
    for extra in (dict(softcap=0), dict(softcap=0.0, softmax_scale=0), dict(softmax_scale=None),
                  dict(softmax_scale=0.25), dict(alibi_slopes=None)):
        o = flashc.attention(q, k, v, backend=backend, **dict(kw, **extra))
        assert o.tobytes() == base.tobytes(), extra  # D = 16: 1/sqrt(D) = 0.25


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("cap", [2.0, 30.0, 31.3, 50.0, 52.6, 53.0, 120.0])
def test_softcap_rows_far_below_cap(backend, rng, dtype, cap):
    """Every score of a row near -softcap (its true max far below the cap).
    Kernels may fix a row's running max from the start (attn_score.h,
    fc_score_max_bound_l2f, a softcap alone up to 52.7: the cap itself up to
    31.2, 90/log2(e) - cap above), so P = 2^(x - m) is as small as 2^-90
    here, or as large as 2^62: P, l and L must keep their precision (a kernel
    that fixed m too high for the cap ends with l subnormal or 0: o inf or 0).
    53 and 120 take the online max. Causal with Sq > Sk adds rows that see
    nothing (L = -inf)."""
    if backend == "cuda" and dtype == "float16" and cap > 30.0:
        # The tensor-core kernels' tanh.approx (2^-10.9) moves a logit by up to
        # cap·2^-10.9: more than the fp16 output's tolerance allows at these
        # caps (check_forward's sweep goes up to softcap 30).
        pytest.skip("hardware tanh: fp16 tolerance at softcap > 30")
    dt = np_dtype(dtype)
    B, Sq, Sk, Hq, Hkv, D = 1, 150, 140, 4, 2, 64
    # score(i, j) = q[i, 0]·k[j, 0]/8 in [-3, -2]·cap: tanh spread over
    # [-0.995, -0.964], the row max about -0.964·cap; the other dims of q
    # zero.
    q = np.zeros((B, Sq, Hq, D))
    q[..., 0] = 8.0
    k = rng.standard_normal((B, Sk, Hkv, D))
    k[..., 0] = -cap * rng.uniform(2.0, 3.0, (B, Sk, Hkv))
    q, k = q.astype(dt), k.astype(dt)
    v = rng.standard_normal((B, Sk, Hkv, D)).astype(dt)
    kw = dict(softcap=cap, causal=True)  # (no sink logit: it would take all the weight)
    o, lse = flashc.attention(q, k, v, return_lse=True, backend=backend, **kw)
    ro, rl = attention_reference(q, k, v, **kw)
    no, nl = attention_naive(q, k, v, dtype, **kw)
    assert_close(o, ro, no, dtype, "o")
    tol = tolerance(rl, nl, "float32")
    if backend == "cuda" and dtype != "float32":
        tol = max(tol, cap * 2.0 ** -10)  # the hardware tanh (check_forward)
    seen = np.isfinite(rl)
    assert np.array_equal(seen, np.isfinite(lse))
    err = np.abs(lse[seen] - rl[seen]).max()
    assert err <= tol, "lse: max |err| = %.3g exceeds %.3g" % (err, tol)


def test_huge_softcap_is_nearly_off(backend, rng):
    # c·tanh(x/c) = x (1 − x²/(3c²) + …): at c = 1e4 the difference is far
    # below the fp32 tolerance.
    q, k, v, kw = make(rng, 1, 33, 47, 4, 2, 40, "float32", causal=True)
    o = flashc.attention(q, k, v, softcap=1e4, backend=backend, **kw)
    ro, _ = attention_reference(q, k, v, **kw)
    no, _ = attention_naive(q, k, v, "float32", **kw)
    assert_close(o, ro, no, "float32", "o with softcap 1e4 vs no softcap")


def test_slope_dtype_conversion(rng):
    """Host slopes of another float dtype (and lists) are converted; the
    result equals the call with float32 slopes of the same values."""
    q, k, v, kw = make(rng, 1, 10, 12, 2, 1, 8, "float32", causal=True)
    s = np.array([0.25, 0.0625], np.float32)
    base = flashc.attention(q, k, v, alibi_slopes=s, **kw)
    for other in (s.astype(np.float64), s.astype(np.float16), [0.25, 0.0625]):
        o = flashc.attention(q, k, v, alibi_slopes=other, **kw)
        assert o.tobytes() == base.tobytes()
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    o64 = flashc.attention(q64, k64, v64, alibi_slopes=s, **kw)  # float32 -> float64
    ro, _ = attention_reference(q64, k64, v64, alibi_slopes=s, **kw)
    assert max_abs_err(o64, ro) < 1e-12


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_strided_sinks_and_dsinks(rng, dtype):
    """Sink logits and their gradient are [Hq] tensors of any stride
    (params.sinks / params.dsinks): a stride-3 view of a NaN-filled buffer
    and a negative stride give the values of the contiguous vector."""
    q, k, v, kw = make(rng, 2, 30, 40, 4, 2, 16, dtype, MODS["both"], use_sinks=True,
                       causal=True)
    do = rng.standard_normal(q.shape).astype(q.dtype)
    s = kw.pop("sinks")
    ro, rl = attention_reference(q, k, v, sinks=s, **kw)
    rg = attention_backward_reference(do, q, k, v, sinks=s, **kw)
    buf = np.full(3 * s.size, np.nan, s.dtype)
    buf[::3] = s
    for view in (buf[::3], np.ascontiguousarray(s[::-1])[::-1]):
        o, lse = flashc.attention(q, k, v, sinks=view, return_lse=True, **kw)
        dbuf = np.full(2 * s.size, np.nan, s.dtype)
        g = flashc.attention_backward(do, q, k, v, o, lse, sinks=view, **kw,
                                      out=(None, None, None, dbuf[::-2]))
        assert g[3].base is dbuf and np.isnan(dbuf[::2]).all(), "dsinks stride not honoured"
        tol = 1e-10 if dtype == "float64" else 1e-4
        assert max_abs_err(o, ro) < tol and max_abs_err(lse, rl) < tol
        assert max_abs_err(g[3], rg[3]) < tol * max(1.0, float(np.abs(rg[3]).max()))


# ---------------------------------------------------------------- backward


def grads(do, q, k, v, kw, backend="cpu", out=None):
    o, lse = flashc.attention(q, k, v, return_lse=True, backend=backend, **kw)
    g = flashc.attention_backward(do, q, k, v, o, lse, backend=backend, out=out, **kw)
    return o, lse, (tuple(g) + (None,))[:4]


# name: (B, Sq, Sk, Hq, Hkv, D, mods, mask)
BWD = {
    "softcap-causal-gqa": (2, 50, 70, 6, 2, 40, "softcap", dict(causal=True)),
    "softcap-saturated-window": (1, 70, 60, 4, 1, 59, "softcap_saturated", dict(window=(9, 4))),
    "alibi_h-causal-sinks": (1, 80, 80, 4, 2, 32, "alibi_h", dict(causal=True, use_sinks=True)),
    "alibi_bh-sqgtsk-masked-rows": (2, 70, 30, 4, 4, 24, "alibi_bh", dict(causal=True)),
    "both-window-sinktok-sinks": (1, 90, 110, 6, 3, 59,
                                  "both", dict(window=(20, 3), sink_tokens=3, use_sinks=True)),
    "both_h_scale-decode": (2, 1, 150, 8, 2, 64, "both_h_scale", dict(causal=True)),
}


def check_backward(rng, name, dtype):
    B, Sq, Sk, Hq, Hkv, D, mods, mask = BWD[name]
    q, k, v, kw = make(rng, B, Sq, Sk, Hq, Hkv, D, dtype, MODS[mods], **mask)
    do = rng.standard_normal(q.shape).astype(q.dtype)
    o, lse = flashc.attention(q, k, v, return_lse=True, **kw)
    # The naive backward below starts from this o and lse: they must be right
    # for its error to be a fair tolerance.
    ro, rl = attention_reference(q, k, v, **kw)
    no, nl = attention_naive(q, k, v, dtype, **kw)
    assert_close(o, ro, no, dtype, "forward o")
    assert_close(lse, rl, nl, lse_dtype(dtype).__name__, "forward lse")
    outs = (poisoned(q.shape, dtype), poisoned(k.shape, dtype), poisoned(v.shape, dtype))
    if "sinks" in kw:
        outs += (np.full(Hq, np.nan, lse_dtype(dtype)),)
    ours = flashc.attention_backward(do, q, k, v, o, lse, out=outs, **kw)
    assert len(ours) == len(outs) and all(a is b for a, b in zip(ours, outs))
    ref = attention_backward_reference(do, q, k, v, **kw)
    if dtype == "float64":
        for what, a, r in zip(("dq", "dk", "dv", "dsinks"), ours, ref):
            err = max_abs_err(a, r)
            assert err <= 1e-10 * max(1.0, float(np.abs(r).max())), (what, err)
        return
    naive = attention_backward_naive(do, q, k, v, o, lse, dtype, **kw)
    for what, a, r, n in zip(("dq", "dk", "dv", "dsinks"), ours, ref, naive):
        if r is None:
            continue
        assert a.dtype == (lse_dtype(dtype) if what == "dsinks" else np_dtype(dtype)), what
        assert_close(a, r, n, "float32" if what == "dsinks" else dtype, what, factor=4.0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(BWD))
def test_backward(rng, name, dtype):
    check_backward(rng, name, dtype)


@pytest.mark.parametrize("mode", [None, "twopass"])
def test_backward_twopass(rng, monkeypatch, mode):
    # Both CPU work splits (fused, key-major two-pass) apply the modifiers.
    if mode:
        monkeypatch.setenv("FLASHC_CPU_BWD", mode)
    else:
        monkeypatch.delenv("FLASHC_CPU_BWD", raising=False)
    check_backward(rng, "both-window-sinktok-sinks", "float32")
    check_backward(rng, "softcap-causal-gqa", "bfloat16")


# name: (B, Sq, Sk, Hq, Hkv, D, kwargs); float64, small enough for finite differences
FD = {
    "softcap": (1, 6, 8, 2, 1, 5, dict(softcap=1.5, softmax_scale=0.8)),
    "softcap_saturated_causal": (1, 7, 7, 2, 2, 4, dict(softcap=0.5, softmax_scale=2.0,
                                                       causal=True)),
    "alibi_bh_causal_sinks": (2, 5, 7, 4, 2, 4, dict(alibi="bh", causal=True, sinks=True)),
    "both_window_sinktok_gqa": (1, 9, 12, 4, 2, 6, dict(softcap=2.0, alibi="h", window=(4, 1),
                                                        sink_tokens=2, sinks=True)),
    "both_masked_rows": (1, 8, 3, 2, 1, 4, dict(softcap=1.0, alibi="bh", causal=True,
                                                sinks=True)),
    "both_decode": (2, 1, 9, 4, 1, 8, dict(softcap=3.0, alibi="bh", causal=True)),
}


@pytest.mark.parametrize("name", list(FD))
def test_finite_differences_f64(rng, name):
    """Central differences of loss = sum(dO * O) through flashc's own float64
    forward: the backward is the gradient of what the forward computes,
    softcap included (the slopes are constants)."""
    B, Sq, Sk, Hq, Hkv, D, kw = FD[name]
    kw = dict(kw)
    alibi = kw.pop("alibi", None)
    if alibi:
        kw["alibi_slopes"] = make_slopes(rng, B, Hq, alibi, np.float64)
    if kw.pop("sinks", False):
        kw["sinks"] = rng.standard_normal(Hq)
    q = rng.standard_normal((B, Sq, Hq, D))
    k = rng.standard_normal((B, Sk, Hkv, D))
    v = rng.standard_normal((B, Sk, Hkv, D))
    do = rng.standard_normal(q.shape)
    o, lse, (dq, dk, dv, ds) = grads(do, q, k, v, kw)
    # The forward differentiated here is the reference's (else the check
    # would only show that the backward matches some other forward).
    ro, rl = attention_reference(q, k, v, **kw)
    assert max_abs_err(o, ro) <= 1e-12 and max_abs_err(lse, rl) <= 1e-12
    params = {"q": (q, dq), "k": (k, dk), "v": (v, dv)}
    if "sinks" in kw:
        params["sinks"] = (kw["sinks"], ds)

    def loss(xs):
        kw2 = dict(kw)
        if "sinks" in xs:
            kw2["sinks"] = xs["sinks"]
        return float(np.sum(do * flashc.attention(xs["q"], xs["k"], xs["v"], **kw2)))

    base = {n: x for n, (x, _) in params.items()}
    eps = 1e-6
    dirs = {n: rng.standard_normal(x.shape) for n, x in base.items()}
    fd = (loss({n: x + eps * dirs[n] for n, x in base.items()})
          - loss({n: x - eps * dirs[n] for n, x in base.items()})) / (2 * eps)
    an = sum(float(np.sum(g * dirs[n])) for n, (_, g) in params.items())
    scale = sum(float(np.abs(g * dirs[n]).sum()) for n, (_, g) in params.items())
    assert abs(fd - an) <= 1e-7 * max(scale, 1.0), (fd, an)
    gmax = max(float(np.abs(g).max()) for _, g in params.values())
    for n, (x, g) in params.items():
        for idx in rng.choice(x.size, size=min(5, x.size), replace=False):
            xp, xm = x.copy().reshape(-1), x.copy().reshape(-1)
            xp[idx] += eps
            xm[idx] -= eps
            num = (loss(dict(base, **{n: xp.reshape(x.shape)}))
                   - loss(dict(base, **{n: xm.reshape(x.shape)}))) / (2 * eps)
            assert abs(num - g.reshape(-1)[idx]) <= 1e-7 * max(gmax, 1.0), (n, idx, num)


def test_backward_slope_layouts_same_bits(rng):
    B, Sq, Sk, Hq, Hkv, D = 2, 30, 40, 4, 2, 24
    q, k, v, kw = make(rng, B, Sq, Sk, Hq, Hkv, D, "float32", dict(softcap=3.0), causal=True)
    do = rng.standard_normal(q.shape).astype(np.float32)
    seed = int(rng.integers(2 ** 31))
    base = None
    for kind in ("bh", "bh_t", "bh_strided"):
        s = make_slopes(np.random.default_rng(seed), B, Hq, kind, np.float32)
        _, _, g = grads(do, q, k, v, dict(kw, alibi_slopes=s))
        if base is None:
            base = g
        else:
            for a, b in zip(g[:3], base[:3]):
                assert a.tobytes() == b.tobytes(), kind


# ------------------------------------------------- masked-key robustness

# name: (B, Sq, Sk, Hq, Hkv, D, mask, poisoned keys as a function of Sk)
ROBUST = {
    "causal": (1, 70, 70, 4, 2, 40, dict(causal=True), lambda j: j >= 45),
    "causal-sq-lt-sk": (2, 30, 90, 2, 1, 24, dict(causal=True), lambda j: j >= 75),
    "causal-sq-gt-sk": (1, 90, 40, 2, 2, 16, dict(causal=True), lambda j: j >= 20),
    "window": (1, 80, 100, 4, 1, 32, dict(window=(6, 3)), lambda j: (j >= 40) & (j < 52)),
    "window-sinktok": (1, 80, 100, 2, 1, 33, dict(causal=True, window=(6, 0), sink_tokens=3),
                       lambda j: (j >= 5) & (j < 60)),
    "decode-window": (2, 1, 700, 4, 1, 64, dict(window=(100, 0)), lambda j: j < 599),
    "decode-sq3-causal": (1, 3, 300, 8, 2, 128, dict(causal=True, use_sinks=True),
                          lambda j: j >= 298),
    # CUDA: the Hopper forward (D 64 / 128, bf16) and its decode kernels (Sq 1)
    "causal-d128": (1, 200, 260, 4, 2, 128, dict(causal=True), lambda j: (j >= 150) & (j < 170)),
    "decode-window-d64": (3, 2, 900, 8, 2, 64, dict(window=(300, 0), use_sinks=True),
                          lambda j: (j >= 590) & (j < 599)),  # row 0 sees key 598, row 1 not
    # rows that see bad keys only: a split of the keys whose every score of a row is NaN
    "decode-chunk-narrow": (1, 64, 900, 8, 2, 64, dict(window=(3, 0), use_sinks=True), lambda j: j >= 840),
}


def _poison(a, keys):
    """NaN, +Inf and -Inf on the poisoned keys (axis 1) of a [B, S, H, D] array."""
    a = a.copy()
    bad = a[:, keys]
    pattern = np.array([np.nan, np.inf, -np.inf], np.float64)
    bad[...] = pattern[np.arange(bad.shape[-1]) % 3].astype(a.dtype)
    a[:, keys] = bad
    return a


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64"])
@pytest.mark.parametrize("mods", ["plain", "softcap", "alibi_bh", "both"])
@pytest.mark.parametrize("name", list(ROBUST))
def test_masked_keys_robust(backend, rng, monkeypatch, request, name, mods, dtype):
    """NaN/Inf in keys and values that a row cannot see change nothing in
    that row: o and lse bit-identical; in the backward (fed the clean o and
    lse) dq of those rows, dk/dv of the clean keys and d sinks bit-identical."""
    monkeypatch.setenv("FLASHC_CPU_DECODE_ROWS", "64")
    B, Sq, Sk, Hq, Hkv, D, mask, bad_fn = ROBUST[name]
    mask = dict(mask)
    use_sinks = mask.pop("use_sinks", False)
    q, k, v, kw = make(rng, B, Sq, Sk, Hq, Hkv, D, dtype, MODS.get(mods), use_sinks, **mask)
    bad = bad_fn(np.arange(Sk))
    vis = visible_mask(Sq, Sk, **mask)
    clean_rows = ~vis[:, bad].any(axis=1)
    assert bad.any() and clean_rows.any() and vis[clean_rows].any()
    kp, vp = _poison(k, bad), _poison(v, bad)

    o, lse = flashc.attention(q, k, v, return_lse=True, backend=backend, **kw)
    op, lsep = flashc.attention(q, kp, vp, return_lse=True, backend=backend, **kw)
    assert op[:, clean_rows].tobytes() == o[:, clean_rows].tobytes(), "o changed"
    assert lsep[:, :, clean_rows].tobytes() == lse[:, :, clean_rows].tobytes(), "lse changed"
    # ... and a row that sees a bad key or value is not finite (flashc.h: no
    # path may drop a NaN score as a masked one, or read a bad value as 0),
    # bad keys and bad values each alone.
    f64 = np.float64
    seeing = ~clean_rows
    assert not np.isfinite(np.asarray(op, f64)[:, seeing]).all(axis=-1).any(), "a row seeing a bad key is finite"
    for what, kk, vv in (("key", kp, v), ("value", k, vp)):
        ob, lb = flashc.attention(q, kk, vv, return_lse=True, backend=backend, **kw)
        assert ob[:, clean_rows].tobytes() == o[:, clean_rows].tobytes(), "o changed (bad %ss only)" % what
        assert not np.isfinite(np.asarray(ob, f64)[:, seeing]).all(axis=-1).any(), "a row seeing a bad %s is finite" % what
        if what == "key":  # a NaN score: L is NaN too (a bad value with finite scores leaves L finite)
            assert np.isnan(lb[:, :, seeing]).all(), "a row seeing a bad key has a non-NaN lse"
    if backend != "cpu":
        return  # the CUDA backward's robustness (and its bad rows') is in test_cuda.py
    do = rng.standard_normal(q.shape).astype(q.dtype)
    g = flashc.attention_backward(do, q, k, v, o, lse, **kw)
    gp = flashc.attention_backward(do, q, kp, vp, o, lse, **kw)
    assert gp[0][:, clean_rows].tobytes() == g[0][:, clean_rows].tobytes(), "dq changed"
    assert gp[1][:, ~bad].tobytes() == g[1][:, ~bad].tobytes(), "dk of clean keys changed"
    assert gp[2][:, ~bad].tobytes() == g[2][:, ~bad].tobytes(), "dv of clean keys changed"
    if use_sinks:
        assert gp[3].tobytes() == g[3].tobytes(), "dsinks changed"
    # The rows that see a bad key, and the bad keys some row sees, get
    # non-finite gradients.
    assert not np.isfinite(np.asarray(gp[0], f64)[:, seeing]).all(axis=-1).any(), "a row seeing a bad key has finite dq"
    seen = bad & vis.any(axis=0)
    for what, a in (("dk", gp[1]), ("dv", gp[2])):
        assert not np.isfinite(np.asarray(a, f64)[:, seen]).all(axis=-1).any(), "a seen bad key has finite " + what
    # Keys no row sees get exactly zero gradients.
    unseen = ~vis.any(axis=0)
    for what, a in (("dk", gp[1]), ("dv", gp[2])):
        assert np.all(np.asarray(a, np.float64)[:, unseen] == 0), what


@pytest.mark.parametrize("kernel", ["auto", "mma"])
@pytest.mark.parametrize("D", [64, 128])
def test_bad_keys_filling_whole_splits(backend, rng, monkeypatch, kernel, D):
    """A decode step whose bad keys (NaN / ±Inf in K: NaN scores) fill whole
    key splits of the split-KV decode, the other splits clean: the row is
    not finite and its lse is NaN. A split that saw only NaN scores has a
    running max of −inf (the max drops NaN) and ℓ = NaN; stored as an empty
    partial, the combine would drop it and the row would end finite. The bad
    range [k0, Sk) or [0, k0) starts at every multiple of 16 keys, so that
    some k0 is a split boundary whatever the plan (split count, tile size,
    kernel); batch row 1 stays clean and must not change."""
    if backend == "cpu" and kernel != "auto":
        pytest.skip("FLASHC_CUDA_KERNEL: CUDA only")
    if kernel != "auto":
        monkeypatch.setenv("FLASHC_CUDA_KERNEL", kernel)  # the cp.async decode kernel
    B, Sk, Hq, Hkv = 2, 2048, 4, 1  # one (sequence, kv head) a CTA row: many splits
    q, k, v, kw = make(rng, B, 1, Sk, Hq, Hkv, D, "bfloat16")
    o, lse = flashc.attention(q, k, v, return_lse=True, backend=backend, **kw)
    assert np.isfinite(np.asarray(o, np.float64)).all()
    pattern = np.array([np.nan, np.inf, -np.inf])[np.arange(D) % 3].astype(k.dtype)
    for k0 in range(16, Sk, 16):
        for bad in (slice(k0, Sk), slice(0, k0)):
            kp = k.copy()
            kp[0, bad] = pattern
            op, lp = flashc.attention(q, kp, v, return_lse=True, backend=backend, **kw)
            where = "bad keys [%d, %d)" % (bad.start, bad.stop)
            assert not np.isfinite(np.asarray(op[0], np.float64)).all(axis=-1).any(), where + ": a finite row"
            assert np.isnan(lp[0]).all(), where + ": lse not NaN"
            assert op[1].tobytes() == o[1].tobytes() and lp[1].tobytes() == lse[1].tobytes(), where + ": row 1 changed"
