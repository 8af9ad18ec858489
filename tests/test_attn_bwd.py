"""Attention backward (flashc_attn_bwd) on the CPU backend.

- float64: central finite differences of loss = Σ dO∘O through flashc's own
  forward (so the backward is the true gradient of what the forward
  computes), and the analytic float64 reference of tests/reference.py;
- fp32 / fp16 / bf16: against the float64 backward, with tolerances measured
  on a naive materialised backward in the same precision;
- determinism: identical bytes across runs, OMP_NUM_THREADS=1 and 2, and
  both work splits (fused, FLASHC_CPU_BWD=twopass);
- every output element written (outputs poisoned with NaN), any strides,
  bad inputs.
The runner sets FLASHC_CPU_ISA; these tests run under whichever ISA is set.
"""

import hashlib
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import flashc
from flashc import _lib
from reference import (
    assert_close,
    attention_backward_reference,
    attention_reference,
    np_dtype,
    visible_mask,
)

# name: (B, Sq, Sk, Hq, Hkv, D, kwargs)
VARIANTS = {
    "plain_sq_ne_sk": (2, 7, 11, 2, 2, 5, {}),
    "causal": (1, 9, 9, 2, 1, 6, {"causal": True}),
    "causal_masked_rows": (1, 10, 6, 2, 2, 4, {"causal": True}),
    "gqa": (1, 6, 8, 6, 2, 4, {}),
    "window": (1, 12, 10, 2, 1, 5, {"window": (3, 2)}),
    "sink_tokens": (1, 11, 13, 2, 1, 4, {"window": (2, 0), "sink_tokens": 3}),
    "sink_logits": (2, 5, 7, 4, 2, 4, {"sinks": True}),
    "sink_logits_masked_rows": (1, 8, 3, 2, 1, 4, {"causal": True, "sinks": True}),
    "everything": (2, 9, 12, 4, 2, 6,
                   {"window": (4, 1), "sink_tokens": 2, "sinks": True, "softmax_scale": 0.7}),
    "decode_mqa": (2, 1, 9, 4, 1, 8, {"causal": True, "sinks": True}),
}


def make(rng, B, Sq, Sk, Hq, Hkv, D, kw, dtype=np.float64):
    q = rng.standard_normal((B, Sq, Hq, D))
    k = rng.standard_normal((B, Sk, Hkv, D))
    v = rng.standard_normal((B, Sk, Hkv, D))
    do = rng.standard_normal((B, Sq, Hq, D))
    kw = dict(kw)
    if kw.get("sinks") is True:
        kw["sinks"] = rng.standard_normal(Hq)
    cast = lambda a: a.astype(dtype)  # noqa: E731
    if kw.get("sinks") is not None:
        kw["sinks"] = kw["sinks"].astype(np.float64 if dtype == np.float64 else np.float32)
    return cast(q), cast(k), cast(v), cast(do), kw


def grads(do, q, k, v, kw, out=None):
    o, lse = flashc.attention(q, k, v, return_lse=True, **kw)
    g = flashc.attention_backward(do, q, k, v, o, lse, out=out, **kw)
    return (tuple(g) + (None,))[:4]


def loss(do, q, k, v, kw):
    return float(np.sum(do * flashc.attention(q, k, v, **kw)))


# ------------------------------------------------------ float64 gradients


@pytest.mark.parametrize("name", list(VARIANTS))
def test_finite_differences_f64(name, rng):
    B, Sq, Sk, Hq, Hkv, D, kw = VARIANTS[name]
    q, k, v, do, kw = make(rng, B, Sq, Sk, Hq, Hkv, D, kw)
    dq, dk, dv, ds = grads(do, q, k, v, kw)
    params = {"q": (q, dq), "k": (k, dk), "v": (v, dv)}
    if "sinks" in kw:
        params["sinks"] = (kw["sinks"], ds)
    gmax = max(float(np.abs(g).max()) for _, g in params.values())
    eps = 1e-6

    def f_at(which, x):
        args = {"q": q, "k": k, "v": v}
        kw2 = dict(kw)
        if which == "sinks":
            kw2["sinks"] = x
        else:
            args[which] = x
        return loss(do, args["q"], args["k"], args["v"], kw2)

    # Every coordinate at once along a random direction ...
    dirs = {n: rng.standard_normal(x.shape) for n, (x, _) in params.items()}
    kp, km = dict(kw), dict(kw)
    xs_p = {n: x + eps * dirs[n] for n, (x, _) in params.items()}
    xs_m = {n: x - eps * dirs[n] for n, (x, _) in params.items()}
    if "sinks" in kw:
        kp["sinks"], km["sinks"] = xs_p["sinks"], xs_m["sinks"]
    fd = (loss(do, xs_p["q"], xs_p["k"], xs_p["v"], kp)
          - loss(do, xs_m["q"], xs_m["k"], xs_m["v"], km)) / (2 * eps)
    an = sum(float(np.sum(g * dirs[n])) for n, (_, g) in params.items())
    scale = sum(float(np.abs(g * dirs[n]).sum()) for n, (_, g) in params.items())
    assert abs(fd - an) <= 1e-7 * max(scale, 1.0), (fd, an)

    # ... and a few single coordinates of each tensor.
    for n, (x, g) in params.items():
        flat = x.reshape(-1)
        for idx in rng.choice(flat.size, size=min(6, flat.size), replace=False):
            xp, xm = flat.copy(), flat.copy()
            xp[idx] += eps
            xm[idx] -= eps
            num = (f_at(n, xp.reshape(x.shape)) - f_at(n, xm.reshape(x.shape))) / (2 * eps)
            assert abs(num - g.reshape(-1)[idx]) <= 1e-7 * max(gmax, 1.0), (n, idx, num,
                                                                            g.reshape(-1)[idx])


BIG = {
    "causal_gqa": (2, 130, 130, 4, 2, 40, {"causal": True}),
    "window_sinks_odd_d": (1, 150, 170, 3, 1, 72, {"window": (40, 7), "sink_tokens": 3,
                                                    "sinks": True}),
    "sq_gt_sk_causal": (1, 200, 70, 2, 1, 33, {"causal": True}),
    "d256": (1, 70, 90, 2, 2, 256, {}),
}


@pytest.mark.parametrize("name", list(BIG))
def test_matches_reference_f64(name, rng):
    """Multi-tile shapes (tiles are 64×64) against the materialised float64
    backward of tests/reference.py."""
    B, Sq, Sk, Hq, Hkv, D, kw = BIG[name]
    q, k, v, do, kw = make(rng, B, Sq, Sk, Hq, Hkv, D, kw)
    ours = grads(do, q, k, v, kw)
    ref = attention_backward_reference(do, q, k, v, **kw)
    for what, a, b in zip(("dq", "dk", "dv", "dsinks"), ours, ref):
        if b is None:
            continue
        err = float(np.abs(a - b).max())
        assert err <= 1e-12 * max(1.0, float(np.abs(b).max())), (what, err)


def test_fully_masked_rows_and_unseen_keys_are_zero(rng):
    # causal with Sq > Sk: the first Sq - Sk query rows see nothing; with a
    # window some keys are seen by no query. Outputs are poisoned first.
    B, Sq, Sk, Hq, Hkv, D = 1, 90, 40, 2, 1, 16
    q, k, v, do, kw = make(rng, B, Sq, Sk, Hq, Hkv, D, {"causal": True, "window": (5, 0)})
    k = np.concatenate([k, rng.standard_normal((B, 30, Hkv, D))], axis=1)  # Sk = 70
    v = np.concatenate([v, rng.standard_normal((B, 30, Hkv, D))], axis=1)
    outs = tuple(np.full(a.shape, np.nan) for a in (q, k, v))
    dq, dk, dv, _ = grads(do, q, k, v, kw, out=outs)
    mask = visible_mask(Sq, 70, causal=True, window=(5, 0))
    assert not np.isnan(dq).any() and not np.isnan(dk).any() and not np.isnan(dv).any()
    assert np.all(dq[:, ~mask.any(1)] == 0)
    assert np.all(dk[:, ~mask.any(0)] == 0) and np.all(dv[:, ~mask.any(0)] == 0)
    ref = attention_backward_reference(do, q, k, v, **kw)
    for a, b in zip((dq, dk, dv), ref):
        assert np.abs(a - b).max() <= 1e-12 * max(1.0, np.abs(b).max())


def test_empty_sequences(rng):
    q, k, v, do, kw = make(rng, 1, 5, 0, 2, 1, 4, {"sinks": True})
    dq, dk, dv, ds = grads(do, q, k, v, kw)
    assert dq.shape == q.shape and np.all(dq == 0) and np.all(ds == 0)
    q, k, v, do, kw = make(rng, 1, 0, 5, 2, 1, 4, {"sinks": True})
    dq, dk, dv, ds = grads(do, q, k, v, kw)
    assert np.all(dk == 0) and np.all(dv == 0) and np.all(ds == 0)


# ------------------------------------------------------------ any strides


def _strided(a, rng, kind):
    """The same logical [B, S, H, D] values under another memory layout."""
    if kind == "bhsd":
        return np.ascontiguousarray(a.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    if kind == "padded_reversed":
        B, S, H, D = a.shape
        buf = np.full((B, S, H, D + 3), np.nan, a.dtype)
        buf[..., :D] = a[:, ::-1]
        return buf[:, ::-1, :, :D]
    raise ValueError(kind)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_any_strides(dtype, rng):
    dt = np_dtype(dtype)
    B, Sq, Sk, Hq, Hkv, D, kw = 2, 70, 80, 4, 2, 24, {"causal": True, "sinks": True}
    q, k, v, do, kw = make(rng, B, Sq, Sk, Hq, Hkv, D, kw, dt)
    base = grads(do, q, k, v, kw)
    o, lse = flashc.attention(q, k, v, return_lse=True, **kw)
    lse_t = np.ascontiguousarray(lse.transpose(0, 2, 1)).transpose(0, 2, 1)  # (b, h, s) strided
    ins = [_strided(a, rng, kind) for a, kind in
           zip((do, q, k, v, o), ("bhsd", "padded_reversed", "bhsd", "padded_reversed", "bhsd"))]
    outs = (_strided(np.zeros_like(q), rng, "padded_reversed"), _strided(np.zeros_like(k), rng, "bhsd"),
            _strided(np.zeros_like(v), rng, "padded_reversed"), np.zeros(Hq, kw["sinks"].dtype))
    for a in outs[:3]:
        a[...] = np.nan
    got = flashc.attention_backward(*ins, lse_t, out=outs, **kw)
    for a, b in zip(got, base):
        np.testing.assert_array_equal(a, b)  # same tiles, same order: same bits


# ------------------------------------------------------ lower precisions


def naive_backward(do, q, k, v, o, lse, dtype_name, *, causal=False, softmax_scale=None,
                   window=(-1, -1), sink_tokens=0, sinks=None):
    """The materialised backward in float32 from the same (rounded) inputs
    flashc gets, outputs rounded to the dtype: what a naive same-precision
    implementation achieves."""
    f = np.float32
    do, q, k, v, o = (np.asarray(a).astype(f) for a in (do, q, k, v, o))
    B, Sq, Hq, D = q.shape
    _, Sk, Hkv, _ = k.shape
    g = Hq // Hkv
    scale = f(1.0 / math.sqrt(D) if softmax_scale is None else softmax_scale)
    qt, dot, ot = (a.transpose(0, 2, 1, 3) for a in (q, do, o))
    kt = np.repeat(k, g, axis=2).transpose(0, 2, 1, 3)
    vt = np.repeat(v, g, axis=2).transpose(0, 2, 1, 3)
    mask = visible_mask(Sq, Sk, causal=causal, window=window, sink_tokens=sink_tokens)
    lse = np.asarray(lse, f)
    with np.errstate(invalid="ignore", over="ignore"):
        lse_safe = np.where(np.isfinite(lse), lse, f(0))
        p = np.where(mask, np.exp(np.matmul(qt, kt.transpose(0, 1, 3, 2)) * scale
                                  - lse_safe[..., None]), f(0))
    delta = np.sum(dot * ot, axis=-1)
    dv = np.matmul(p.transpose(0, 1, 3, 2), dot)
    ds = p * (np.matmul(dot, vt.transpose(0, 1, 3, 2)) - delta[..., None])
    dq = np.matmul(ds, kt) * scale
    dk = np.matmul(ds.transpose(0, 1, 3, 2), qt) * scale
    dk = dk.reshape(B, Hkv, g, Sk, D).sum(axis=2)
    dv = dv.reshape(B, Hkv, g, Sk, D).sum(axis=2)
    dt = np_dtype(dtype_name)
    res = [a.transpose(0, 2, 1, 3).astype(dt) for a in (dq, dk, dv)]
    if sinks is not None:
        with np.errstate(over="ignore"):
            res.append(-np.sum(np.exp(np.asarray(sinks, f).reshape(1, Hq, 1) - lse) * delta,
                               axis=(0, 2)))
    return res


LOWP = {
    "causal_gqa": (2, 100, 100, 4, 2, 40, {"causal": True}),
    "window_sinks": (1, 130, 150, 2, 1, 64, {"window": (50, 3), "sink_tokens": 4,
                                              "sinks": True}),
}


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("name", list(LOWP))
def test_low_precision_vs_f64(dtype, name, rng):
    dt = np_dtype(dtype)
    B, Sq, Sk, Hq, Hkv, D, kw = LOWP[name]
    q, k, v, do, kw = make(rng, B, Sq, Sk, Hq, Hkv, D, kw, dt)
    o, lse = flashc.attention(q, k, v, return_lse=True, **kw)
    outs = tuple(np.full(a.shape, np.nan, dt) for a in (q, k, v))
    if "sinks" in kw:
        outs += (np.full(Hq, np.nan, np.float32),)
    ours = flashc.attention_backward(do, q, k, v, o, lse, out=outs, **kw)
    # The float64 truth for these (rounded) inputs.
    kw64 = dict(kw)
    if "sinks" in kw:
        kw64["sinks"] = kw["sinks"].astype(np.float64)
    ref = attention_backward_reference(*(a.astype(np.float64) for a in (do, q, k, v)), **kw64)
    naive = naive_backward(do, q, k, v, o, lse, dtype, **kw)
    for what, a, r, n in zip(("dq", "dk", "dv", "dsinks"), ours, ref, naive):
        assert a.dtype == (np.float32 if what == "dsinks" else dt)
        assert_close(a, r, n, "float32" if what == "dsinks" else dtype, what, factor=4.0)


# ----------------------------------------------------------- determinism

_DET_SCRIPT = r"""
import hashlib, sys
import numpy as np
import flashc
rng = np.random.default_rng(7)
h = hashlib.sha256()
for dt, kw in ((np.float32, {"causal": True}), (np.float32, {"window": (70, 20), "sink_tokens": 3}),
               (np.float16, {"causal": True})):
    q = rng.standard_normal((2, 200, 4, 48)).astype(dt)
    k = rng.standard_normal((2, 230, 2, 48)).astype(dt)
    v = rng.standard_normal((2, 230, 2, 48)).astype(dt)
    do = rng.standard_normal((2, 200, 4, 48)).astype(dt)
    s = rng.standard_normal(4).astype(np.float32)
    o, lse = flashc.attention(q, k, v, return_lse=True, sinks=s, **kw)
    for _ in range(2):
        for g in flashc.attention_backward(do, q, k, v, o, lse, sinks=s, **kw):
            h.update(np.ascontiguousarray(g).tobytes())
print(h.hexdigest())
"""


def _digest(threads, mode=None):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    env.pop("FLASHC_CPU_BWD", None)
    if mode:
        env["FLASHC_CPU_BWD"] = mode
    here = os.path.dirname(os.path.abspath(__file__))
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(os.path.dirname(here), "python"),
                                         env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-c", _DET_SCRIPT], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


@pytest.mark.parametrize("mode", [None, "twopass"])
def test_deterministic_across_thread_counts(mode):
    assert _digest(1, mode) == _digest(2, mode)


def test_deterministic_in_process(rng):
    q, k, v, do, kw = make(rng, 2, 150, 150, 4, 1, 32, {"causal": True}, np.float32)
    a = grads(do, q, k, v, kw)
    b = grads(do, q, k, v, kw)
    for x, y in zip(a[:3], b[:3]):
        assert hashlib.sha256(x.tobytes()).digest() == hashlib.sha256(y.tobytes()).digest()


# ------------------------------------------------------------ bad inputs


def _setup(dtype=np.float32, sinks=False):
    rng = np.random.default_rng(1)
    q, k, v, do, kw = make(rng, 1, 6, 7, 4, 2, 8, {"sinks": True} if sinks else {}, dtype)
    o, lse = flashc.attention(q, k, v, return_lse=True, **kw)
    return q, k, v, do, o, lse, kw


def _raises(status, fn, *args, match=None, **kw):
    with pytest.raises(flashc.FlashcError) as ei:
        fn(*args, **kw)
    assert ei.value.status == status, (ei.value.status_name, ei.value.message)
    assert ei.value.message
    if match:
        assert match in ei.value.message, ei.value.message


def test_bad_lse_shape():
    q, k, v, do, o, lse, kw = _setup()
    _raises(_lib.FLASHC_ERR_SHAPE, flashc.attention_backward, do, q, k, v, o,
            lse.transpose(0, 2, 1).copy(), match="lse")


def test_bad_lse_dtype():
    q, k, v, do, o, lse, kw = _setup()
    _raises(_lib.FLASHC_ERR_DTYPE, flashc.attention_backward, do, q, k, v, o,
            lse.astype(np.float64), match="lse")


def test_bad_dout_dtype():
    q, k, v, do, o, lse, kw = _setup()
    _raises(_lib.FLASHC_ERR_DTYPE, flashc.attention_backward, do.astype(np.float64), q, k, v,
            o, lse)


def test_bad_o_shape():
    q, k, v, do, o, lse, kw = _setup()
    _raises(_lib.FLASHC_ERR_SHAPE, flashc.attention_backward, do, q, k, v, o[:, :, :2], lse)


def test_bad_dk_shape():
    q, k, v, do, o, lse, kw = _setup()
    _raises(_lib.FLASHC_ERR_SHAPE, flashc.attention_backward, do, q, k, v, o, lse,
            out=(None, np.empty(q.shape, np.float32), None))


def test_bad_dsinks_dtype():
    q, k, v, do, o, lse, kw = _setup(sinks=True)
    _raises(_lib.FLASHC_ERR_DTYPE, flashc.attention_backward, do, q, k, v, o, lse,
            out=(None, None, None, np.empty(4, np.float64)), **kw)


def test_missing_dsinks_buffer_raw():
    """sink_logits given but dsinks NULL, through the raw C ABI."""
    q, k, v, do, o, lse, kw = _setup(sinks=True)
    sinks = np.ascontiguousarray(kw["sinks"])

    def t(a):
        x = _lib.flashc_tensor()
        x.data = a.ctypes.data
        x.dtype = {np.float32: _lib.FLASHC_F32, np.float64: _lib.FLASHC_F64}[a.dtype.type]
        x.ndim = a.ndim
        for i in range(a.ndim):
            x.shape[i] = a.shape[i]
            x.strides[i] = a.strides[i] // a.itemsize
        return x

    g = [np.empty_like(a) for a in (q, k, v)]
    p = _lib.attn_params_default()
    p.sink_logits = sinks.ctypes.data
    ts = [t(a) for a in (do, q, k, v, o, lse, *g)]
    st = _lib.flashc_attn_bwd(*(ctypes_byref(x) for x in ts), None, ctypes_byref(p))
    assert st == _lib.FLASHC_ERR_NULL_POINTER
    assert "dsinks" in _lib.flashc_last_error().decode()


def ctypes_byref(x):
    import ctypes

    return ctypes.byref(x)


def test_window_causal_conflict():
    q, k, v, do, o, lse, kw = _setup()
    _raises(_lib.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention_backward, do, q, k, v, o, lse,
            causal=True, window=(-1, 2))


# ------------------------------- AVX512-BF16 backward (BF16 on vdpbf16ps)
# BF16 inputs on a CPU with AVX512-BF16 (FLASHC_CPU_BF16=1) take the bf16
# product path (src/cpu/attn_bwd_avx512bf16.c): S and dP from the bf16
# inputs, P and dS rounded to bf16 before dV, dK, dQ, fp32 sums.
# FLASHC_CPU_BF16=0 is the fp32 path. Both must be within the naive
# same-precision tolerance of float64, and they must differ (so the fast path
# really ran).

BF16_FAST = {
    "causal": (1, 130, 130, 2, 2, 64, {"causal": True}),
    "gqa": (2, 100, 120, 4, 1, 40, {}),
    "window_sinks_odd_d": (1, 150, 170, 3, 1, 33, {"window": (40, 7), "sink_tokens": 3,
                                                    "sinks": True}),
    "d128_causal_gqa": (1, 140, 131, 4, 2, 128, {"causal": True}),
    "odd_everything": (1, 67, 71, 2, 1, 31, {"sinks": True, "softmax_scale": 0.3}),
}


def _bf16_fast_available():
    return flashc.cpu_isa() == "avx512" and "avx512_bf16" in flashc.cpu_features()


# amx: on an AMX machine FLASHC_CPU_BF16=1 runs the tile products on AMX
# (feature amx_bf16); FLASHC_CPU_AMX=0 keeps them on vdpbf16ps. Both run here.
@pytest.mark.parametrize("amx", ["1", "0"])
@pytest.mark.parametrize("mode", [None, "twopass"])
@pytest.mark.parametrize("name", list(BF16_FAST))
def test_bf16_fast_path_vs_fp32_path(name, mode, amx, rng, monkeypatch):
    monkeypatch.setenv("FLASHC_CPU_BF16", "1")
    monkeypatch.setenv("FLASHC_CPU_AMX", amx)
    if amx == "1" and "amx_bf16" not in flashc.cpu_features():
        pytest.skip("no AMX-BF16 here (isa %s, features %s)" % (flashc.cpu_isa(), flashc.cpu_features()))
    if amx == "0" and not _bf16_fast_available():
        pytest.skip("no AVX512-BF16 path here (isa %s, features %s)"
                    % (flashc.cpu_isa(), flashc.cpu_features()))
    if mode:
        monkeypatch.setenv("FLASHC_CPU_BWD", mode)
    else:
        monkeypatch.delenv("FLASHC_CPU_BWD", raising=False)
    dt = np_dtype("bfloat16")
    B, Sq, Sk, Hq, Hkv, D, kw = BF16_FAST[name]
    q, k, v, do, kw = make(rng, B, Sq, Sk, Hq, Hkv, D, kw, dt)
    o, lse = flashc.attention(q, k, v, return_lse=True, **kw)
    fast = flashc.attention_backward(do, q, k, v, o, lse, **kw)
    monkeypatch.setenv("FLASHC_CPU_BF16", "0")
    slow = flashc.attention_backward(do, q, k, v, o, lse, **kw)
    kw64 = dict(kw)
    if "sinks" in kw:
        kw64["sinks"] = kw["sinks"].astype(np.float64)
    ref = attention_backward_reference(*(a.astype(np.float64) for a in (do, q, k, v)), **kw64)
    naive = naive_backward(do, q, k, v, o, lse, "bfloat16", **kw)
    differ = False
    for what, f, s, r, n in zip(("dq", "dk", "dv", "dsinks"), fast, slow, ref, naive):
        if r is None:
            continue
        tdt = "float32" if what == "dsinks" else "bfloat16"
        assert f.dtype == s.dtype
        assert_close(f, r, n, tdt, "fast " + what, factor=4.0)
        assert_close(s, r, n, tdt, "fp32 " + what, factor=4.0)
        if what != "dsinks":  # d sinks comes from Δ and L only: the same on both paths
            differ |= not np.array_equal(f, s)
    assert differ, "FLASHC_CPU_BF16=1 gave the fp32 path's bits: fast path not taken"


_BF16_DET_SCRIPT = r"""
import hashlib
import numpy as np
import flashc
from reference import np_dtype
dt = np_dtype("bfloat16")
rng = np.random.default_rng(11)
h = hashlib.sha256()
for kw in ({"causal": True}, {"window": (70, 20), "sink_tokens": 3}):
    q = rng.standard_normal((2, 200, 4, 48)).astype(dt)
    k = rng.standard_normal((2, 230, 2, 48)).astype(dt)
    v = rng.standard_normal((2, 230, 2, 48)).astype(dt)
    do = rng.standard_normal((2, 200, 4, 48)).astype(dt)
    s = rng.standard_normal(4).astype(np.float32)
    o, lse = flashc.attention(q, k, v, return_lse=True, sinks=s, **kw)
    for g in flashc.attention_backward(do, q, k, v, o, lse, sinks=s, **kw):
        h.update(np.ascontiguousarray(g).tobytes())
print(h.hexdigest())
"""


@pytest.mark.parametrize("mode", [None, "twopass"])
def test_bf16_fast_path_deterministic_across_thread_counts(mode, monkeypatch):
    monkeypatch.setenv("FLASHC_CPU_BF16", "1")
    if not _bf16_fast_available():
        pytest.skip("no AVX512-BF16 path here")
    here = os.path.dirname(os.path.abspath(__file__))
    digests = []
    for threads in (1, 2):
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), FLASHC_CPU_BF16="1")
        env.pop("FLASHC_CPU_BWD", None)
        if mode:
            env["FLASHC_CPU_BWD"] = mode
        env["PYTHONPATH"] = os.pathsep.join([os.path.join(os.path.dirname(here), "python"), here,
                                             env.get("PYTHONPATH", "")])
        r = subprocess.run([sys.executable, "-c", _BF16_DET_SCRIPT], env=env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        digests.append(r.stdout.strip())
    assert digests[0] == digests[1]

@pytest.mark.parametrize("D", [31, 48, 128])
def test_bf16_fast_path_any_strides(D, rng, monkeypatch):
    """Unit-stride bf16 rows are packed straight from memory, others through
    the fp32 packs: the same bf16 operands, so the same bits."""
    monkeypatch.setenv("FLASHC_CPU_BF16", "1")
    if not _bf16_fast_available():
        pytest.skip("no AVX512-BF16 path here")
    dt = np_dtype("bfloat16")
    B, Sq, Sk, Hq, Hkv, kw = 2, 71, 83, 4, 2, {"causal": True, "sinks": True}
    q, k, v, do, kw = make(rng, B, Sq, Sk, Hq, Hkv, D, kw, dt)
    o, lse = flashc.attention(q, k, v, return_lse=True, **kw)
    base = flashc.attention_backward(do, q, k, v, o, lse, **kw)
    def d_stride2(x):  # d-stride 2: the fp32-pack route
        buf = np.full(x.shape[:3] + (2 * x.shape[3],), np.nan, x.dtype)
        buf[..., ::2] = x
        return buf[..., ::2]

    for layout in (("padded_reversed", "bhsd"), ("d2", "d2"), ("bhsd", "d2"), ("d2", "bhsd")):
        ins = [d_stride2(x) if kind == "d2" else _strided(x, rng, kind)
               for x, kind in zip((do, q, k, v, o), layout + ("padded_reversed", "bhsd", "bhsd"))]
        got = flashc.attention_backward(*ins, lse, **kw)
        for x, y in zip(got, base):
            np.testing.assert_array_equal(x, y)
# ----------------------------- end of AVX512-BF16 backward (fast path)
