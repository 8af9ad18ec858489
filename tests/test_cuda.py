"""The CUDA backend through flashc.cuda (DeviceArray, interchange protocols)
and device-resident calls, cross-checked against the float64 reference and
flashc's own CPU float64 result. Every test skips cleanly without a GPU.

(NumPy inputs with backend="cuda" — copy in, run, copy out — are exercised
by every case of test_attention.py / test_weighted_sum.py through their
`backend` fixture.)
"""

import ctypes

import numpy as np
import pytest

import flashc
import flashc.cuda as fcuda
from flashc import _lib
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
    visible_mask,
    weighted_sum_backward_reference,
    weighted_sum_reference,
)

pytestmark = pytest.mark.cuda


def rand(rng, shape, dtype):
    return rng.standard_normal(shape).astype(np_dtype(dtype))


class CAIOnly:
    """An object that exports nothing but __cuda_array_interface__ (like cupy)."""

    def __init__(self, dev):
        self._dev = dev  # keeps the memory alive
        self.__cuda_array_interface__ = dev.__cuda_array_interface__


# ------------------------------------------------------------ device info


def test_device_info():
    assert fcuda.is_available() and fcuda.unavailable_reason() == ""
    n = fcuda.device_count()
    assert n >= 1
    for i in range(n):
        assert fcuda.device_name(i)
    fcuda.set_device(0)
    fcuda.synchronize()


# ---------------------------------------------------------- DeviceArray


@pytest.mark.parametrize("dtype", DTYPES)
def test_roundtrip(rng, dtype):
    x = rand(rng, (3, 5, 7), dtype)
    d = fcuda.to_device(x)
    assert d.shape == x.shape and d.dtype == x.dtype and d.strides == x.strides
    assert d.nbytes == x.nbytes and d.ptr != 0 and d.is_c_contiguous
    y = d.numpy()
    assert y.dtype == x.dtype and y.tobytes() == x.tobytes()


def test_to_device_of_strided_host_array(rng):
    x = rand(rng, (6, 8, 10), "float32")[::2, :, ::-3]
    d = fcuda.to_device(x)
    assert d.is_c_contiguous and np.array_equal(d.numpy(), x)


def test_views(rng):
    x = rand(rng, (4, 6, 5, 8), "float32")
    d = fcuda.to_device(x)
    for idx in [(slice(None), slice(1, None, 2)), (1,), (Ellipsis, slice(None, None, -1)),
                (slice(3, 0, -2), 2, slice(None), slice(1, 7, 3)), (slice(2, 2),)]:
        assert np.array_equal(d[idx].numpy(), x[idx]), idx
    t = d.transpose(0, 2, 1, 3)
    assert t.shape == (4, 5, 6, 8) and np.array_equal(t.numpy(), x.transpose(0, 2, 1, 3))
    assert np.array_equal(d.T.numpy(), x.T)
    c = d[:, ::2].copy()
    assert c.is_c_contiguous and np.array_equal(c.numpy(), x[:, ::2])


def test_empty_and_zeros():
    e = fcuda.empty((3, 0, 2), np.float16)
    assert e.shape == (3, 0, 2) and e.numpy().shape == (3, 0, 2) and e.ptr != 0
    z = fcuda.zeros((5, 4), np_dtype("bfloat16"))
    assert z.dtype.name == "bfloat16" and not np.asarray(z.numpy(), np.float32).any()


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_batch_zero_device(dtype):
    # B = 0 on device arrays: nothing launched over an empty grid; the
    # backward writes dsinks = 0 over a poisoned device buffer; a KV-cache
    # call with k_new appends nothing.
    f = np_dtype(dtype)
    q, k = np.zeros((0, 3, 4, 64), f), np.zeros((0, 9, 2, 64), f)
    s = np.array([0.5, -1.0, 2.0, 0.0], lse_dtype(dtype))
    D = fcuda.to_device
    o, lse = flashc.attention(D(q), D(k), D(k), return_lse=True, sinks=D(s), causal=True)
    assert o.shape == q.shape and lse.shape == (0, 4, 3)
    ds = D(np.full(4, np.nan, lse_dtype(dtype)))
    outs = (D(q), D(k), D(k), ds)
    flashc.attention_backward(D(q), D(q), D(k), D(k), o, lse, sinks=D(s), out=outs)
    assert not ds.numpy().any()
    kc = D(np.zeros((0, 6, 2, 64), f))
    o = flashc.attention_with_kvcache(D(q[:, :1]), kc, kc, D(k[:, :1]), D(k[:, :1]),
                                      cache_seqlens=D(np.zeros(0, np.int32)))
    assert o.shape == (0, 1, 4, 64)
    fcuda.synchronize()


def test_free_many():
    # Allocation and free through __del__: no leak over many iterations.
    for _ in range(200):
        d = fcuda.empty((1 << 20,), np.float32)  # 4 MiB each
        del d
    fcuda.synchronize()


@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_array_interface(rng, dtype):
    x = rand(rng, (2, 3, 4), dtype)
    d = fcuda.to_device(x)
    cai = d.__cuda_array_interface__
    assert cai["version"] == 3 and cai["shape"] == (2, 3, 4)
    assert cai["data"] == (d.ptr, False) and cai["strides"] is None
    assert cai["typestr"] == {"float32": "<f4", "float16": "<f2", "float64": "<f8",
                              "bfloat16": "<V2"}[dtype]
    v = d[:, ::2, 1:]
    cv = v.__cuda_array_interface__
    assert cv["strides"] == v.strides and cv["data"][0] == v.ptr == d.ptr + x.strides[2]


def test_dlpack(rng):
    x = rand(rng, (2, 3, 4), "bfloat16")
    d = fcuda.to_device(x)
    assert d.__dlpack_device__() == (2, 0)
    n_live = len(fcuda._dl_live)
    cap = d.__dlpack__()
    assert len(fcuda._dl_live) == n_live + 1
    dev, code, bits, shape, strides, data = fcuda._dlpack_capsule_info(cap)
    assert dev == (2, 0) and (code, bits) == (4, 16) and shape == (2, 3, 4)
    assert strides == (12, 4, 1) and data == d.ptr
    del cap  # unconsumed: the capsule's destructor releases it
    assert len(fcuda._dl_live) == n_live
    v = fcuda.to_device(rand(rng, (5, 6), "float32")).T
    dev, code, bits, shape, strides, data = fcuda._dlpack_capsule_info(v.__dlpack__())
    assert (code, bits, shape, strides) == (2, 32, (6, 5), (1, 6))


def test_dlpack_torch(rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    x = rand(rng, (4, 5), "float32")
    d = fcuda.to_device(x)
    t = torch.from_dlpack(d)
    assert t.is_cuda and tuple(t.shape) == (4, 5)
    assert np.array_equal(t.cpu().numpy(), x)
    # The torch tensor keeps the memory alive after the DeviceArray is gone.
    del d
    assert np.array_equal(t.cpu().numpy(), x)


# -------------------------------------------------------- attention on device


def _check_device_attention(rng, B, Sq, Sk, Hq, Hkv, D, dtype, layout="contig", **mask):
    dt = np_dtype(dtype)
    q, k, v = (rand(rng, s, dtype) for s in ((B, Sq, Hq, D), (B, Sk, Hkv, D), (B, Sk, Hkv, D)))
    sinks = None
    if mask.pop("use_sinks", False):
        sinks = (rng.standard_normal(Hq) * 2).astype(lse_dtype(dtype))
    kw = dict(mask, sinks=sinks)
    ro, rl = attention_reference(q, k, v, **kw)
    no, nl = attention_naive(q, k, v, dtype, **kw)

    def dev(a):
        if layout == "bhsd":  # device memory [B, H, S, D], passed as a view
            return fcuda.to_device(np.ascontiguousarray(a.transpose(0, 2, 1, 3))).transpose(
                0, 2, 1, 3)
        if layout == "cai":
            return CAIOnly(fcuda.to_device(a))
        return fcuda.to_device(a)

    dsinks = fcuda.to_device(sinks) if sinks is not None else None
    o, lse = flashc.attention(dev(q), dev(k), dev(v), return_lse=True,
                              **dict(kw, sinks=dsinks))
    assert isinstance(o, fcuda.DeviceArray) and isinstance(lse, fcuda.DeviceArray)
    o_h, lse_h = o.numpy(), lse.numpy()
    assert o_h.dtype == dt and lse_h.dtype == lse_dtype(dtype)
    assert_close(o_h, ro, no, dtype, "o")
    assert_close(lse_h, rl, nl, lse_dtype(dtype).__name__, "lse")
    # Cross-check with flashc's CPU F64 on identical inputs.
    f = np.float64
    co, cl = flashc.attention(q.astype(f), k.astype(f), v.astype(f), return_lse=True,
                              backend="cpu",
                              **dict(kw, sinks=None if sinks is None else sinks.astype(f)))
    assert_close(o_h, co, no, dtype, "o vs CPU F64")
    return o_h


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["contig", "bhsd", "cai"])
@pytest.mark.parametrize("mask", [dict(), dict(causal=True), dict(window=(7, 3), sink_tokens=2),
                                  dict(causal=True, use_sinks=True)],
                         ids=["full", "causal", "window-sinktok", "causal-sinks"])
def test_attention_device(rng, dtype, layout, mask):
    _check_device_attention(rng, 2, 77, 130, 8, 2, 64, dtype, layout, **mask)


@pytest.mark.parametrize("D", [1, 8, 40, 59, 64, 80, 96, 128, 200, 256])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_attention_device_head_dims(rng, D, dtype):
    _check_device_attention(rng, 1, 129, 200, 4, 1, D, dtype, causal=True)


def test_attention_device_out_and_stream(rng):
    q, k, v = (rand(rng, s, "float16") for s in ((1, 33, 4, 32), (1, 40, 2, 32), (1, 40, 2, 32)))
    dq, dk, dv = (fcuda.to_device(a) for a in (q, k, v))
    out = fcuda.empty(q.shape, np.float16)
    lse = fcuda.empty((1, 4, 33), np.float32)
    o, l = flashc.attention(dq, dk, dv, out=(out, lse), return_lse=True, stream=0)
    assert o is out and l is lse
    fcuda.synchronize()
    ref = flashc.attention(q, k, v, backend="cpu")
    assert max_abs_err(o.numpy(), ref) < 1e-2


def test_attention_torch_stream(rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    q = torch.randn(1, 64, 4, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 80, 2, 64, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, 80, 2, 64, device="cuda", dtype=torch.bfloat16)
    s = torch.cuda.Stream()
    out = torch.empty_like(q)
    with torch.cuda.stream(s):
        o = flashc.attention(q, k, v, causal=True, out=out, stream=s)
    s.synchronize()
    assert o is out
    f = lambda t: t.float().cpu().numpy().astype(np.float64)  # noqa: E731
    ro, _ = attention_reference(f(q), f(k), f(v), causal=True)
    assert max_abs_err(f(o), ro) < 3e-2


def test_attention_backward_device(rng):
    q, k, v = (rand(rng, s, "float64") for s in ((2, 21, 4, 16), (2, 30, 2, 16), (2, 30, 2, 16)))
    do = rand(rng, q.shape, "float64")
    sinks = rng.standard_normal(4)
    kw = dict(causal=True, window=(9, -1), sink_tokens=1)
    D = fcuda.to_device
    o, lse = flashc.attention(D(q), D(k), D(v), return_lse=True, sinks=D(sinks), **kw)
    grads = flashc.attention_backward(D(do), D(q), D(k), D(v), o, lse, sinks=D(sinks), **kw)
    ref = attention_backward_reference(do, q, k, v, sinks=sinks, **kw)
    for g, r in zip(grads, ref):
        assert isinstance(g, fcuda.DeviceArray)
        assert max_abs_err(g.numpy(), r) <= 1e-9 * max(1.0, np.abs(r).max())


def test_attention_backward_device_nondeterministic(rng):
    q, k, v = (rand(rng, s, "float32") for s in ((1, 130, 4, 64), (1, 150, 4, 64),
                                                 (1, 150, 4, 64)))
    do = rand(rng, q.shape, "float32")
    D = fcuda.to_device
    o, lse = flashc.attention(D(q), D(k), D(v), return_lse=True)
    g1 = flashc.attention_backward(D(do), D(q), D(k), D(v), o, lse, deterministic=True)
    g2 = flashc.attention_backward(D(do), D(q), D(k), D(v), o, lse, deterministic=False)
    g3 = flashc.attention_backward(D(do), D(q), D(k), D(v), o, lse, deterministic=True)
    for a, b, c in zip(g1, g2, g3):
        assert a.numpy().tobytes() == c.numpy().tobytes()
        assert max_abs_err(a.numpy(), b.numpy()) < 1e-4


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
@pytest.mark.parametrize("window", [(2**63 - 1, -1), (2**63 - 2, 2**62 + 1), (-1, 2**63 - 1),
                                    (2**63 - 1, 2**63 - 3)])
@pytest.mark.parametrize("Sq,Sk", [(37, 9), (9, 37), (1, 300), (130, 70)])
def test_huge_windows_device(rng, dtype, window, Sq, Sk):
    """A window wider than the sequence is an open side, up to INT64_MAX, on
    every CUDA path, forward and backward (nvcc once folded the window's
    lower bound into an expression that wrapped: Sq > Sk with window_left
    near INT64_MAX gave dK/dV as if no row saw the keys)."""
    D = 16 if dtype != "float16" else 64
    q, k, v = (rand(rng, s, dtype) for s in ((2, Sq, 6, D), (2, Sk, 2, D), (2, Sk, 2, D)))
    do = rand(rng, q.shape, dtype)
    T = fcuda.to_device
    res = {}
    for w in (window, (-1, -1)):
        o, lse = flashc.attention(T(q), T(k), T(v), return_lse=True, window=w)
        g = flashc.attention_backward(T(do), T(q), T(k), T(v), o, lse, window=w)
        res[w] = [x.numpy().astype(np.float64) for x in (o, lse) + tuple(g)]
    tol = {"float64": 1e-12, "float32": 1e-5, "float16": 2e-3}[dtype]
    for name, a, b in zip(("o", "lse", "dq", "dk", "dv"), res[window], res[(-1, -1)]):
        assert np.isfinite(a).all(), name
        assert max_abs_err(a, b) <= tol * max(1.0, np.abs(b).max()), name


# ------------------------------------------------------------ mixing, errors


def test_mixing_host_and_device_python(rng):
    q = rand(rng, (1, 4, 2, 8), "float32")
    with pytest.raises(flashc.FlashcError) as ei:
        flashc.attention(fcuda.to_device(q), q, q)
    assert ei.value.status == _lib.FLASHC_ERR_DEVICE_MISMATCH


def test_mixing_host_and_device_raw(rng):
    """The library itself refuses mixed pointers (AUTO and CUDA backends)."""
    q = rand(rng, (1, 4, 2, 8), "float32")
    dq = fcuda.to_device(q)
    o = fcuda.empty(q.shape, np.float32)

    def t(ptr):
        x = _lib.flashc_tensor()
        x.data, x.dtype, x.ndim = ptr, 0, 4
        for i in range(4):
            x.shape[i] = q.shape[i]
            x.strides[i] = q.strides[i] // 4
        return x

    for backend in (_lib.FLASHC_BACKEND_AUTO, _lib.FLASHC_BACKEND_CUDA):
        p = _lib.attn_params_default()
        p.backend = backend
        st = _lib.flashc_attn_fwd(ctypes.byref(t(dq.ptr)), ctypes.byref(t(q.ctypes.data)),
                                  ctypes.byref(t(dq.ptr)), ctypes.byref(t(o.ptr)), None,
                                  ctypes.byref(p))
        assert st == _lib.FLASHC_ERR_DEVICE_MISMATCH, _lib.flashc_last_error()


def test_device_arrays_with_backend_cpu(rng):
    d = fcuda.to_device(rand(rng, (1, 4, 2, 8), "float32"))
    with pytest.raises(flashc.FlashcError) as ei:
        flashc.attention(d, d, d, backend="cpu")
    assert ei.value.status == _lib.FLASHC_ERR_DEVICE_MISMATCH


def test_device_sinks_wrong_dtype(rng):
    d = fcuda.to_device(rand(rng, (1, 4, 2, 8), "float32"))
    with pytest.raises(flashc.FlashcError) as ei:
        flashc.attention(d, d, d, sinks=fcuda.to_device(np.zeros(2, np.float64)))
    assert ei.value.status == _lib.FLASHC_ERR_DTYPE


def test_pointer_is_device(rng):
    d = fcuda.empty((4,), np.float32)
    h = np.zeros(4, np.float32)
    flag = ctypes.c_int(-1)
    assert _lib.flashc_pointer_is_device(d.ptr, ctypes.byref(flag)) == 0 and flag.value == 1
    assert _lib.flashc_pointer_is_device(h.ctypes.data, ctypes.byref(flag)) == 0
    assert flag.value == 0


# ---------------------------------------------------------- weighted sum


@pytest.mark.parametrize("dtype", DTYPES)
def test_weighted_sum_device(rng, dtype):
    x = rand(rng, (37, 5, 129), dtype)
    w = rand(rng, (129,), dtype)
    dy = rand(rng, (37, 5), dtype)
    c = np.float64 if dtype == "float64" else np.float32
    dx_ = fcuda.to_device(x)
    y = flashc.weighted_sum(dx_, fcuda.to_device(w))
    assert isinstance(y, fcuda.DeviceArray)
    ny = weighted_sum_reference(x, w, compute=c).astype(np_dtype(dtype))
    assert_close(y.numpy(), weighted_sum_reference(x, w), ny, dtype, "y")
    gx, gw = flashc.weighted_sum_backward(fcuda.to_device(dy), dx_[:, :, :],
                                          fcuda.to_device(w))
    rdx, rdw = weighted_sum_backward_reference(dy, x, w)
    ndx, ndw = (a.astype(np_dtype(dtype)) for a in weighted_sum_backward_reference(dy, x, w, c))
    assert_close(gx.numpy(), rdx, ndx, dtype, "dx")
    assert_close(gw.numpy(), rdw, ndw, dtype, "dw")


def test_weighted_sum_device_strided(rng):
    x = rand(rng, (64, 300), "float32")
    w = rand(rng, (300,), "float32")
    d = fcuda.to_device(np.ascontiguousarray(x.T)).T  # last axis strided
    y = flashc.weighted_sum(d[::-1], fcuda.to_device(w))
    assert max_abs_err(y.numpy(), weighted_sum_reference(x[::-1], w)) < 1e-3


def test_weighted_sum_deterministic_dw(rng):
    x = fcuda.to_device(rand(rng, (200000, 64), "float32"))
    w = fcuda.to_device(rand(rng, (64,), "float32"))
    dy = fcuda.to_device(rand(rng, (200000,), "float32"))
    a = flashc.weighted_sum_backward(dy, x, w, need_dx=False)[1].numpy()
    b = flashc.weighted_sum_backward(dy, x, w, need_dx=False)[1].numpy()
    assert a.tobytes() == b.tobytes()


# -------------------------------------------------------------- stress


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_stress_long_sequence(rng, dtype):
    """S = 16k, checked on a sample of query rows against float64."""
    B, S, Hq, Hkv, D = 1, 16384, 2, 1, 64
    q, k, v = (rand(rng, s, dtype) for s in ((B, S, Hq, D), (B, S, Hkv, D), (B, S, Hkv, D)))
    rows = np.concatenate([[0, 1, 2], rng.choice(S, 40, replace=False), [S - 2, S - 1]])
    o = flashc.attention(fcuda.to_device(q), fcuda.to_device(k), fcuda.to_device(v),
                         causal=True).numpy()
    ro, _ = attention_reference(q, k, v, causal=True, rows=rows)
    no, _ = attention_naive(q, k, v, dtype, causal=True, rows=rows)
    assert_close(o[:, rows], ro, no, dtype, "o rows")


# The F32 forward on the tensor cores (attn_fwd_tc.cu: 3xTF32 on mma.sync
# m16n8k8, every padded head dim, dense and ragged): float32 accuracy — the
# same tolerance as the naive float32 implementation and as the generic SIMT
# kernel (FLASHC_CUDA_KERNEL=generic, whose error is printed beside).
_F32_CASES = {
    "d64": (2, 200, 230, 4, 2, 64, dict()),
    "d128-causal": (1, 300, 300, 4, 4, 128, dict(causal=True)),
    "d33-window-sinktok": (2, 150, 170, 6, 2, 33, dict(causal=True, window=(40, 0), sink_tokens=3)),
    "d80-sinks": (1, 130, 90, 4, 1, 80, dict(use_sinks=True)),
    "d96-softcap-alibi": (1, 160, 200, 4, 2, 96, dict(causal=True, softcap=8.0, alibi=True)),
    "d128-sq-gt-sk": (1, 200, 70, 2, 2, 128, dict(causal=True)),
    "d192": (1, 100, 120, 2, 1, 192, dict(window=(30, 10))),
    "d256-softcap": (1, 70, 140, 2, 2, 256, dict(softcap=20.0, softmax_scale=0.05)),
    "d17-neg-scale": (1, 64, 64, 2, 2, 17, dict(softmax_scale=-0.3)),
}


def _f32_case(rng, case):
    """q, k, v (float32) and the keywords of a _F32_CASES-shaped case, its
    use_sinks / alibi turned into sink logits / ALiBi slopes; with dkw, the
    keywords with those arrays on the device."""
    B, Sq, Sk, Hq, Hkv, D, kw = case
    kw = dict(kw)
    use_sinks, alibi = kw.pop("use_sinks", False), kw.pop("alibi", False)
    q, k, v = (rand(rng, s, "float32") for s in ((B, Sq, Hq, D), (B, Sk, Hkv, D), (B, Sk, Hkv, D)))
    if use_sinks:
        kw["sinks"] = (rng.standard_normal(Hq) * 2).astype(np.float32)
    if alibi:
        kw["alibi_slopes"] = (2.0 ** (-8.0 * (np.arange(Hq) + 1) / Hq)).astype(np.float32)
    dkw = {n: fcuda.to_device(x) if n in ("sinks", "alibi_slopes") else x for n, x in kw.items()}
    return q, k, v, kw, dkw


@pytest.mark.parametrize("name", list(_F32_CASES))
def test_f32_tensor_core_forward(rng, monkeypatch, name):
    q, k, v, kw, dkw = _f32_case(rng, _F32_CASES[name])
    ro, rl = attention_reference(q, k, v, **kw)
    no, nl = attention_naive(q, k, v, "float32", **kw)
    dq, dk, dv = (fcuda.to_device(x) for x in (q, k, v))
    o, lse = flashc.attention(dq, dk, dv, return_lse=True, **dkw)
    monkeypatch.setenv("FLASHC_CUDA_KERNEL", "generic")
    og, _ = flashc.attention(dq, dk, dv, return_lse=True, **dkw)
    eg = max_abs_err(og.numpy(), ro)
    e, tol = assert_close(o.numpy(), ro, no, "float32", "o (generic kernel's error %.3g)" % eg)
    assert_close(lse.numpy(), rl, nl, "float32", "lse")
    assert e <= max(4.0 * eg, tol / 3), "o error %.3g, generic kernel %.3g" % (e, eg)


@pytest.mark.parametrize("page", [0, 16])
def test_f32_tensor_core_ragged(rng, page):
    """The F32 forward's ragged instances: a KV cache (contiguous or paged,
    rows appended in place) with ragged lengths, float32 accuracy per
    sequence."""
    B, Hq, Hkv, D, Sc, Sn = 3, 4, 2, 64, 96, 20
    lens = np.array([50, 0, 76], np.int32)
    kc, vc = (rand(rng, (B, Sc, Hkv, D), "float32") for _ in range(2))
    q = rand(rng, (B, Sn, Hq, D), "float32")
    kn, vn = (rand(rng, (B, Sn, Hkv, D), "float32") for _ in range(2))
    args = dict(cache_seqlens=fcuda.to_device(lens), causal=True)
    if page:
        npg = Sc // page
        perm = rng.permutation(B * npg).astype(np.int32)
        table = perm.reshape(B, npg)
        pk, pv = np.empty((B * npg, page, Hkv, D), np.float32), np.empty((B * npg, page, Hkv, D), np.float32)
        for b in range(B):
            for i in range(npg):
                pk[table[b, i]] = kc[b, i * page:(i + 1) * page]
                pv[table[b, i]] = vc[b, i * page:(i + 1) * page]
        ck, cv = fcuda.to_device(pk), fcuda.to_device(pv)
        args["block_table"] = fcuda.to_device(table)
    else:
        ck, cv = fcuda.to_device(kc), fcuda.to_device(vc)
    o = flashc.attention_with_kvcache(fcuda.to_device(q), ck, cv, fcuda.to_device(kn), fcuda.to_device(vn),
                                      **args).numpy()
    for b in range(B):
        L = int(lens[b])
        kb = np.concatenate([kc[b:b + 1, :L], kn[b:b + 1]], axis=1)
        vb = np.concatenate([vc[b:b + 1, :L], vn[b:b + 1]], axis=1)
        ro, _ = attention_reference(q[b:b + 1], kb, vb, causal=True)
        no, _ = attention_naive(q[b:b + 1], kb, vb, "float32", causal=True)
        assert_close(o[b:b + 1], ro, no, "float32", "o of sequence %d" % b)


# The F32 backward on the tensor cores (attn_bwd_tc.cu: 3xTF32 on mma.sync
# m16n8k8 at padded head dims ≤ 128, dense and ragged; D > 128 keeps the
# generic kernel): every gradient within the naive float32 backward's
# tolerance and within a small factor of the generic SIMT kernel's error.
_F32_BWD_CASES = {n: c for n, c in _F32_CASES.items() if not n.startswith(("d192", "d256"))}
_F32_BWD_CASES.update({
    "d128-gqa-softcap-window": (2, 100, 140, 8, 2, 128, dict(softcap=20.0, window=(50, 20), use_sinks=True)),
    "d192-generic": (1, 40, 50, 2, 1, 192, dict(causal=True)),
})


@pytest.mark.parametrize("name", list(_F32_BWD_CASES))
def test_f32_tensor_core_backward(rng, monkeypatch, name):
    q, k, v, kw, dkw = _f32_case(rng, _F32_BWD_CASES[name])
    do = rand(rng, q.shape, "float32")
    T = fcuda.to_device
    dq_, dk_, dv_, ddo = (T(x) for x in (q, k, v, do))
    o, lse = flashc.attention(dq_, dk_, dv_, return_lse=True, **dkw)
    g1 = [g.numpy() for g in flashc.attention_backward(ddo, dq_, dk_, dv_, o, lse, **dkw)]
    g2 = [g.numpy() for g in flashc.attention_backward(ddo, dq_, dk_, dv_, o, lse, **dkw)]
    for a, b in zip(g1, g2):
        assert a.tobytes() == b.tobytes(), "two runs differ"
    monkeypatch.setenv("FLASHC_CUDA_KERNEL", "generic")
    gg = [g.numpy() for g in flashc.attention_backward(ddo, dq_, dk_, dv_, o, lse, **dkw)]
    ref = attention_backward_reference(do, q, k, v, **kw)
    naive = attention_backward_naive(do, q, k, v, o.numpy(), lse.numpy(), "float32", **kw)
    for what, g, r, n, ge in zip(("dq", "dk", "dv", "dsinks"), g1, ref, naive, gg):
        eg = max_abs_err(ge, r)
        e, tol = assert_close(g, r, n, "float32", "%s (generic kernel's error %.3g)" % (what, eg))
        assert e <= max(4.0 * eg, tol / 3), "%s error %.3g, generic kernel %.3g" % (what, e, eg)


def test_f32_tensor_core_backward_long(rng, monkeypatch):
    """4096 rows and keys with dO and V of one sign on average (dV, dK and dQ
    sum thousands of terms that do not cancel): the tensor cores round an
    accumulation toward zero, so gradients summed in one accumulator drift
    (tc_common.cuh, mma_3xtf32); rel-L2 against float64 within 2x the generic
    SIMT kernel's."""
    B, S, H, D = 1, 4096, 1, 128
    q, k = (rand(rng, (B, S, H, D), "float32") for _ in range(2))
    v = rand(rng, (B, S, H, D), "float32") + np.float32(0.5)
    do = rand(rng, (B, S, H, D), "float32") + np.float32(0.5)
    T = fcuda.to_device
    dq_, dk_, dv_, ddo = (T(x) for x in (q, k, v, do))
    o, lse = flashc.attention(dq_, dk_, dv_, return_lse=True)
    g = [x.numpy() for x in flashc.attention_backward(ddo, dq_, dk_, dv_, o, lse)]
    monkeypatch.setenv("FLASHC_CUDA_KERNEL", "generic")
    gg = [x.numpy() for x in flashc.attention_backward(ddo, dq_, dk_, dv_, o, lse)]
    ref = attention_backward_reference(do, q, k, v)
    rl2 = lambda a, r: float(np.linalg.norm(a.astype(np.float64) - r) / np.linalg.norm(r))  # noqa: E731
    for what, a, b, r in zip(("dq", "dk", "dv"), g, gg, ref):
        e, eg = rl2(a, r), rl2(b, r)
        assert e <= max(2.0 * eg, 2e-6), "%s rel-L2 %.3g, generic kernel %.3g" % (what, e, eg)


@pytest.mark.slow
@pytest.mark.parametrize("B,Hq,Hkv", [(1, 70000, 70000), (70000, 1, 1), (300, 256, 64)],
                         ids=["heads>65535", "batch>65535", "BH-large"])
def test_stress_many_heads(rng, B, Hq, Hkv):
    """B·H beyond 65535 (a grid dimension limit) with short sequences."""
    Sq, Sk, D = 3, 17, 8
    q, k, v = (rand(rng, s, "float16") for s in ((B, Sq, Hq, D), (B, Sk, Hkv, D),
                                                 (B, Sk, Hkv, D)))
    o, lse = flashc.attention(fcuda.to_device(q), fcuda.to_device(k), fcuda.to_device(v),
                              causal=True, return_lse=True)
    ro, rl = attention_reference(q, k, v, causal=True)
    no, nl = attention_naive(q, k, v, "float16", causal=True)
    assert_close(o.numpy(), ro, no, "float16", "o")
    assert_close(lse.numpy(), rl, nl, "float32", "lse")


@pytest.mark.slow
def test_stress_many_query_blocks(rng):
    """Sq large enough for > 65535 query blocks of 64 in one grid dimension
    (decode-like: Sk small)."""
    B, Sq, Sk, H, D = 1, 65536 * 64 + 100, 8, 1, 8
    q = rand(rng, (B, Sq, H, D), "bfloat16")
    k = rand(rng, (B, Sk, H, D), "bfloat16")
    v = rand(rng, (B, Sk, H, D), "bfloat16")
    o = flashc.attention(fcuda.to_device(q), fcuda.to_device(k), fcuda.to_device(v)).numpy()
    rows = np.concatenate([[0, 1], rng.choice(Sq, 64, replace=False), [Sq - 1]])
    ro, _ = attention_reference(q, k, v, rows=rows)
    no, _ = attention_naive(q, k, v, "bfloat16", rows=rows)
    assert_close(o[:, rows], ro, no, "bfloat16", "o rows")


@pytest.mark.slow
def test_stress_weighted_sum_many_rows(rng):
    x = rand(rng, (5_000_000, 8), "float32")
    w = rand(rng, (8,), "float32")
    y = flashc.weighted_sum(fcuda.to_device(x), fcuda.to_device(w)).numpy()
    ny = weighted_sum_reference(x, w, compute=np.float32).astype(np.float32)
    assert_close(y, weighted_sum_reference(x, w), ny, "float32", "y")


# ====================================================================
# Tensor-core backward (src/cuda/attn_bwd_tc.cu): F16/BF16, D ≤ 256.
# Appended by the CUDA-backward work; the rest of this file is not touched.
# Each case: poisoned (NaN) device outputs, relative L2 error of dq/dk/dv
# (and dsinks) against the float64 backward of the same rounded inputs,
# the generic CUDA backward (FLASHC_CUDA_KERNEL=generic) on the same inputs,
# and bit-identical results of two deterministic runs.
# ====================================================================

_TC_BWD_TOL = {"bfloat16": 2.5e-2, "float16": 6e-3}


def _rel_l2(a, r):
    a = np.asarray(a, np.float64)
    r = np.asarray(r, np.float64)
    return float(np.linalg.norm(a - r) / max(np.linalg.norm(r), 1e-30))


def _tc_bwd_case(rng, B, Sq, Sk, Hq, Hkv, D, dtype, layout="contig", deterministic=True, gpad=False, **kw):
    import os
    dt = np_dtype(dtype)
    q, k, v, do = (rand(rng, s, dtype) for s in ((B, Sq, Hq, D), (B, Sk, Hkv, D),
                                                 (B, Sk, Hkv, D), (B, Sq, Hq, D)))
    sinks = None
    if kw.pop("use_sinks", False):
        sinks = (rng.standard_normal(Hq) * 2).astype(np.float32)

    def dev(a):
        if layout == "bhsd":
            return fcuda.to_device(np.ascontiguousarray(a.transpose(0, 2, 1, 3))).transpose(
                0, 2, 1, 3)
        return fcuda.to_device(a)

    def poisoned(shape):
        if gpad:  # inside a wider buffer at a 4-byte offset: no TMA store of dK / dV
            return fcuda.to_device(np.full(shape[:-1] + (shape[-1] + 2,), np.nan, dt))[..., 2:]
        return dev(np.full(shape, np.nan, dt))

    ds = fcuda.to_device(sinks) if sinks is not None else None
    dq_, dk_, dv_, ddo = dev(q), dev(k), dev(v), dev(do)
    o, lse = flashc.attention(dq_, dk_, dv_, return_lse=True, sinks=ds, **kw)

    def run(det, generic=False):
        outs = (poisoned(q.shape), poisoned(k.shape), poisoned(v.shape))
        if sinks is not None:
            outs += (fcuda.to_device(np.full(Hq, np.nan, np.float32)),)
        old = os.environ.get("FLASHC_CUDA_KERNEL")
        if generic:
            os.environ["FLASHC_CUDA_KERNEL"] = "generic"
        try:
            g = flashc.attention_backward(ddo, dq_, dk_, dv_, o, lse, sinks=ds, out=outs,
                                          deterministic=det, **kw)
        finally:
            if generic:
                if old is None:
                    os.environ.pop("FLASHC_CUDA_KERNEL", None)
                else:
                    os.environ["FLASHC_CUDA_KERNEL"] = old
        return [x.numpy() for x in g]

    got = run(deterministic)
    gen = run(True, generic=True)
    f = np.float64
    ref = attention_backward_reference(do.astype(f), q.astype(f), k.astype(f), v.astype(f),
                                       sinks=None if sinks is None else sinks.astype(f), **kw)
    tol = _TC_BWD_TOL[dtype]
    errs = {}
    for name, a, g, r in zip(("dq", "dk", "dv", "dsinks"), got, gen, ref):
        assert np.isfinite(a).all(), "%s: unwritten (NaN) or non-finite elements" % name
        e, eg = _rel_l2(a, r), _rel_l2(g, r)
        errs[name] = (e, eg)
        # within tol of float64, and not much worse than the generic kernel
        assert e < max(tol, 3.0 * eg), "%s rel-L2 %.3g (generic %.3g) tol %.3g" % (name, e, eg, tol)
    if deterministic:
        again = run(True)
        for name, a, b in zip(("dq", "dk", "dv", "dsinks"), got, again):
            assert a.tobytes() == b.tobytes(), "%s differs between two deterministic runs" % name
    print("tc-bwd %s B%d Sq%d Sk%d H%d/%d D%d %s %s det=%d: %s" % (
        dtype, B, Sq, Sk, Hq, Hkv, D, layout, kw, deterministic,
        " ".join("%s %.2e (gen %.2e)" % (n, e, g) for n, (e, g) in errs.items())))
    return errs


_TC_BWD_CASES = {
    "causal-gqa": (2, 77, 130, 8, 2, dict(causal=True)),
    "full-mqa": (1, 90, 70, 8, 1, dict()),
    "window-sinktok": (2, 150, 170, 8, 2, dict(window=(33, 5), sink_tokens=3)),
    "causal-sinks": (1, 130, 130, 4, 2, dict(causal=True, use_sinks=True)),
    "decode-sq1": (3, 1, 300, 4, 1, dict(causal=True)),
    "sq-gt-sk-masked-rows": (1, 200, 60, 4, 2, dict(causal=True, use_sinks=True)),
    "window-only": (1, 257, 257, 2, 2, dict(window=(20, 20))),
    "causal-window-sinktok-sinks": (1, 300, 280, 4, 1, dict(causal=True, window=(64, -1),
                                                           sink_tokens=5, use_sinks=True)),
}


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("D", [40, 64, 80, 128])
@pytest.mark.parametrize("name", list(_TC_BWD_CASES))
def test_tc_backward_sweep(rng, name, D, dtype):
    B, Sq, Sk, Hq, Hkv, kw = _TC_BWD_CASES[name]
    _tc_bwd_case(rng, B, Sq, Sk, Hq, Hkv, D, dtype, **dict(kw))


@pytest.mark.parametrize("D", [8, 32, 59, 96, 100])
def test_tc_backward_head_dims(rng, D):
    _tc_bwd_case(rng, 1, 129, 200, 4, 2, D, "bfloat16", causal=True)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", ["causal-gqa", "window-sinktok", "causal-sinks"])
def test_tc_backward_strided(rng, name, dtype):
    B, Sq, Sk, Hq, Hkv, kw = _TC_BWD_CASES[name]
    _tc_bwd_case(rng, B, Sq, Sk, Hq, Hkv, 64, dtype, layout="bhsd", **dict(kw))


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("name", ["causal-gqa", "window-sinktok", "sq-gt-sk-masked-rows"])
def test_tc_backward_atomic(rng, name, D):
    B, Sq, Sk, Hq, Hkv, kw = _TC_BWD_CASES[name]
    _tc_bwd_case(rng, B, Sq, Sk, Hq, Hkv, D, "bfloat16", deterministic=False, **dict(kw))


# Sink tokens under a sliding window: every row sees key block 0, which the
# Hopper backward splits over several CTAs (Split in attn_bwd_wgmma.cu:
# partial dK/dV added in chunk order; dQ still one addition per block).
@pytest.mark.parametrize("det", [True, False])
@pytest.mark.parametrize("D", [64, 128, 256])
def test_backward_split_sink_block(rng, D, det):
    _tc_bwd_case(rng, 1, 1100, 1200, 4, 2, D, "bfloat16", deterministic=det, window=(64, 0),
                 sink_tokens=4)
    _tc_bwd_case(rng, 2, 700, 700, 4, 1, D, "float16", deterministic=det, causal=True,
                 window=(50, -1), sink_tokens=3, use_sinks=True)


# Backward grids of several waves (the Hopper dK/dV kernel's CTAs outnumber
# the SMs: 512 / 256 CTAs here): in the deterministic mode the dQ convert is
# launched as its programmatic dependent, starts once the last wave has, and
# converts each dQ tile once its count of additions is complete
# (bwd_dq_convert_tiles); no sink tokens, so no Split (which takes the
# convert after the kernel).
@pytest.mark.parametrize("D,Hkv,kw", [(64, 16, dict(causal=True)),
                                      (128, 8, dict(causal=True, window=(200, 0), use_sinks=True))],
                         ids=["causal-d64", "window-sinks-gqa-d128"])
def test_backward_several_waves(rng, D, Hkv, kw):
    _tc_bwd_case(rng, 4, 1024, 1024, 16, Hkv, D, "bfloat16", **dict(kw))


@pytest.mark.parametrize("causal", [False, True])
def test_tc_backward_larger(rng, causal):
    _tc_bwd_case(rng, 1, 1000, 1000, 4, 2, 128, "bfloat16", causal=causal)
    _tc_bwd_case(rng, 1, 1000, 1000, 4, 2, 128, "bfloat16", deterministic=False, causal=causal)


@pytest.mark.parametrize("kw", [dict(causal=True), dict(window=(300, 40), sink_tokens=4,
                                                         use_sinks=True)],
                         ids=["causal", "window-sinktok-sinks"])
def test_tc_backward_atomic_long(rng, kw):
    # deterministic=False takes the atomic-dQ kernel only at HD <= 64, Sk >= 2048
    _tc_bwd_case(rng, 1, 2100, 2200, 2, 1, 64, "bfloat16", deterministic=False, **kw)


# Wide heads (128 < D <= 256): the default kernel (on compute capability 9.0
# the wgmma backward at HD = 256, 64-key blocks) and the mma.sync kernels
# with two column slices per row group (attn_bwd_tc.cu, padded to 192 /
# 256), every case of the sweep.
_WIDE_KERNELS = pytest.mark.parametrize("kernel", [None, "mma"], ids=["default", "mma"])


@_WIDE_KERNELS
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("D", [192, 256])
@pytest.mark.parametrize("name", list(_TC_BWD_CASES))
def test_tc_backward_wide(rng, monkeypatch, name, D, dtype, kernel):
    if kernel:
        monkeypatch.setenv("FLASHC_CUDA_KERNEL", kernel)
    B, Sq, Sk, Hq, Hkv, kw = _TC_BWD_CASES[name]
    _tc_bwd_case(rng, B, Sq, Sk, Hq, Hkv, D, dtype, **dict(kw))


@_WIDE_KERNELS
@pytest.mark.parametrize("D", [136, 160, 200, 250])
def test_tc_backward_wide_head_dims(rng, monkeypatch, D, kernel):
    if kernel:
        monkeypatch.setenv("FLASHC_CUDA_KERNEL", kernel)
    _tc_bwd_case(rng, 1, 129, 200, 4, 2, D, "bfloat16", causal=True)
    _tc_bwd_case(rng, 1, 129, 200, 4, 2, D, "float16", layout="bhsd", window=(40, 3))


@_WIDE_KERNELS
@pytest.mark.parametrize("causal", [False, True])
def test_tc_backward_wide_larger(rng, monkeypatch, causal, kernel):
    if kernel:
        monkeypatch.setenv("FLASHC_CUDA_KERNEL", kernel)
    _tc_bwd_case(rng, 2, 700, 760, 4, 2, 256, "bfloat16", causal=causal)
    _tc_bwd_case(rng, 1, 700, 760, 4, 2, 256, "bfloat16", deterministic=False, causal=causal)


@pytest.mark.parametrize("kernel", [None, "mma", "generic"])
@pytest.mark.parametrize("D", [64, 128, 192, 256])
def test_backward_one_key_dv_rounded_once(rng, kernel, D):
    # One key, no mask: P = 1 on every row, so dV = sum_i dO_i. FlashAttention's
    # test suite (test_flash_attn_splitkv, Sq 339, Sk 1, D 192, fp16) asks for
    # no more error than a same-dtype implementation, which rounds the fp32 sum
    # once: every path must be within half an fp16 ulp of the exact sum.
    import os
    Sq, H = 339, 2
    q, do = (rand(rng, (1, Sq, H, D), "float16") for _ in range(2))
    k, v = (rand(rng, (1, 1, H, D), "float16") for _ in range(2))
    old = os.environ.get("FLASHC_CUDA_KERNEL")
    if kernel is not None:
        os.environ["FLASHC_CUDA_KERNEL"] = kernel
    try:
        dq_, dk_, dv_, ddo = (fcuda.to_device(x) for x in (q, k, v, do))
        o, lse = flashc.attention(dq_, dk_, dv_, return_lse=True)
        g = flashc.attention_backward(ddo, dq_, dk_, dv_, o, lse)
        dv = g[2].numpy().astype(np.float64)
    finally:
        if old is None:
            os.environ.pop("FLASHC_CUDA_KERNEL", None)
        else:
            os.environ["FLASHC_CUDA_KERNEL"] = old
    ref = do.astype(np.float64).sum(axis=1, keepdims=True)
    half_ulp = np.spacing(np.abs(ref).astype(np.float16)).astype(np.float64) / 2
    err = np.abs(dv - ref)
    assert (err <= half_ulp * 1.01 + 1e-6).all(), "dV off by %.3g ulp (max)" % float(
        (err / (2 * half_ulp)).max())

# ====================================================================
# Hopper wgmma forward (src/cuda/attn_fwd_wgmma.cu): F16/BF16, D ∈ {64, 128}.
# Appended by the Hopper-forward work; the rest of this file is not touched.
# Each case runs the default dispatch (the wgmma kernel on compute capability
# 9.0, the mma.sync kernel elsewhere) and FLASHC_CUDA_KERNEL=mma (mma.sync
# forced) on the same inputs, each into NaN-poisoned o and lse, against the
# float64 reference: o within the naive same-precision error (assert_close)
# and by relative L2; lse on every row (−inf / s_h rows exactly); every
# element written.
# ====================================================================

_WG_FWD_TOL = {"bfloat16": 1e-2, "float16": 2e-3}  # rel-L2 of o vs float64


def _device_cc():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_capability()


def _wg_fwd_run(q, k, v, sinks, kernel=None, layout="contig", **kw):
    import os

    def dev(a):
        if layout == "bhsd":
            return fcuda.to_device(np.ascontiguousarray(a.transpose(0, 2, 1, 3))).transpose(
                0, 2, 1, 3)
        return fcuda.to_device(a)

    B, Sq, Hq, D = q.shape
    if layout == "opad":  # o inside a wider buffer at a 4-byte offset: no TMA store
        o = fcuda.to_device(np.full((B, Sq, Hq, D + 2), np.nan, q.dtype))[..., 2:]
        layout = "contig"
    else:
        o = dev(np.full(q.shape, np.nan, q.dtype))
    lse = fcuda.to_device(np.full((B, Hq, Sq), np.nan, np.float32))
    ds = fcuda.to_device(sinks) if sinks is not None else None
    old = os.environ.get("FLASHC_CUDA_KERNEL")
    if kernel is not None:
        os.environ["FLASHC_CUDA_KERNEL"] = kernel
    try:
        flashc.attention(dev(q), dev(k), dev(v), out=(o, lse), return_lse=True, sinks=ds, **kw)
    finally:
        if kernel is not None:
            if old is None:
                os.environ.pop("FLASHC_CUDA_KERNEL", None)
            else:
                os.environ["FLASHC_CUDA_KERNEL"] = old
    return o.numpy(), lse.numpy()


def _wg_fwd_case(rng, B, Sq, Sk, Hq, Hkv, D, dtype, layout="contig", rows=None, **kw):
    q, k, v = (rand(rng, s, dtype) for s in ((B, Sq, Hq, D), (B, Sk, Hkv, D), (B, Sk, Hkv, D)))
    sinks = None
    if kw.pop("use_sinks", False):
        sinks = (rng.standard_normal(Hq) * 2).astype(np.float32)
    f = np.float64
    rkw = dict(kw, sinks=None if sinks is None else sinks.astype(f), rows=rows)
    ro, rl = attention_reference(q.astype(f), k.astype(f), v.astype(f), **rkw)
    no, _ = attention_naive(q, k, v, dtype, **rkw)
    sel = slice(None) if rows is None else np.asarray(rows)
    res = {}
    for name, kernel in (("default", None), ("mma", "mma")):
        o, lse = _wg_fwd_run(q, k, v, sinks, kernel, layout, **kw)
        assert not np.isnan(o).any(), "%s: o has unwritten (NaN) elements" % name
        assert not np.isnan(lse).any(), "%s: lse has unwritten (NaN) elements" % name
        o, lse = o[:, sel], lse[:, :, sel]
        assert_close(o, ro, no, dtype, "%s o" % name)
        e = _rel_l2(o, ro)
        assert e < _WG_FWD_TOL[dtype], "%s o rel-L2 %.3g" % (name, e)
        fin = np.isfinite(rl)
        assert (np.isfinite(lse) == fin).all() and (lse[~fin] == rl[~fin]).all(), \
            "%s lse: -inf rows differ" % name
        el = float(np.abs(lse[fin] - rl[fin]).max()) if fin.any() else 0.0
        assert el < 2e-3 * max(1.0, float(np.abs(rl[fin]).max()) if fin.any() else 1.0), \
            "%s lse max err %.3g" % (name, el)
        res[name] = (e, el, o)
    print("wg-fwd %s B%d Sq%d Sk%d H%d/%d D%d %s %s: o rel-L2 %.2e (mma %.2e) lse %.1e (mma %.1e)"
          % (dtype, B, Sq, Sk, Hq, Hkv, D, layout, kw, res["default"][0], res["mma"][0],
             res["default"][1], res["mma"][1]))
    return res


_WG_FWD_CASES = {
    "full-gqa-128": (2, 128, 128, 8, 2, dict()),
    "causal-77": (2, 77, 77, 8, 2, dict(causal=True)),
    "decode-sq1": (3, 1, 1000, 8, 2, dict(causal=True)),
    "sq1-sinks": (2, 1, 77, 8, 2, dict(use_sinks=True)),
    "sq-lt-sk": (1, 77, 1000, 8, 2, dict()),
    "causal-1000": (1, 1000, 1000, 8, 2, dict(causal=True)),
    "window-sinktok": (1, 1000, 1100, 8, 2, dict(window=(200, 30), sink_tokens=5)),
    "window-only": (1, 1000, 1000, 4, 4, dict(window=(64, 64))),
    "causal-window-sinktok-sinks": (1, 1000, 1000, 4, 2, dict(causal=True, window=(128, -1),
                                                              sink_tokens=3, use_sinks=True)),
    "masked-rows": (1, 300, 77, 4, 1, dict(causal=True)),
    "masked-rows-sinks": (1, 1000, 77, 4, 2, dict(causal=True, use_sinks=True)),
    "masked-rows-window": (2, 300, 100, 4, 2, dict(window=(10, 5))),
}


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("name", list(_WG_FWD_CASES))
def test_wgmma_forward_sweep(rng, name, D, dtype):
    B, Sq, Sk, Hq, Hkv, kw = _WG_FWD_CASES[name]
    _wg_fwd_case(rng, B, Sq, Sk, Hq, Hkv, D, dtype, **dict(kw))


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("name", ["causal-1000", "window-sinktok", "masked-rows-sinks"])
def test_wgmma_forward_strided(rng, name, D):
    B, Sq, Sk, Hq, Hkv, kw = _WG_FWD_CASES[name]
    _wg_fwd_case(rng, B, Sq, Sk, Hq, Hkv, D, "bfloat16", layout="bhsd", **dict(kw))


@pytest.mark.parametrize("D", [64, 96, 128, 256])
@pytest.mark.parametrize("name", ["causal-77", "window-sinktok", "masked-rows-sinks"])
def test_wgmma_forward_out_unaligned(rng, name, D):
    # o's base 4 bytes past 16-byte alignment, rows D + 2 elements apart: the
    # epilogue's TMA store cannot address it; O goes out from registers.
    B, Sq, Sk, Hq, Hkv, kw = _WG_FWD_CASES[name]
    _wg_fwd_case(rng, B, Sq, Sk, Hq, Hkv, D, "bfloat16", layout="opad", **dict(kw))


@pytest.mark.parametrize("D,dtype", [(64, "bfloat16"), (128, "bfloat16"), (128, "float16")])
@pytest.mark.parametrize("causal", [False, True])
def test_wgmma_forward_4096(rng, D, dtype, causal):
    # checks a sample of rows (the reference materialises [B, H, rows, Sk])
    rows = np.unique(np.concatenate([np.arange(0, 4096, 97), np.arange(3968, 4096)]))
    _wg_fwd_case(rng, 1, 4096, 4096, 4, 2, D, dtype, rows=rows, causal=causal)


# Head dims the wgmma forward pads (by the tensor maps' zero fill), runs at
# a product width below the tiles' (80, 96: WgTraits::DV) or with 64-key
# tiles (HD = 192, 256): every case of the sweep at D = 80, 96, 192 and 256,
# others at a few more D (D % 8 == 0 takes wgmma; 100 stays on mma.sync;
# 72 and 88 run at widths 80 and 96 with zero-filled columns).
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("D", [80, 96, 192, 256])
@pytest.mark.parametrize("name", list(_WG_FWD_CASES))
def test_wgmma_forward_padded_and_wide(rng, name, D, dtype):
    B, Sq, Sk, Hq, Hkv, kw = _WG_FWD_CASES[name]
    _wg_fwd_case(rng, B, Sq, Sk, Hq, Hkv, D, dtype, **dict(kw))


@pytest.mark.parametrize("D", [8, 40, 72, 80, 88, 112, 136, 192, 200, 248, 100])
def test_wgmma_forward_head_dims(rng, D):
    _wg_fwd_case(rng, 1, 300, 333, 4, 2, D, "bfloat16", causal=True)
    _wg_fwd_case(rng, 1, 130, 200, 4, 2, D, "float16", layout="bhsd", window=(40, 3), sink_tokens=2)


def test_wgmma_forward_wide_4096(rng):
    rows = np.unique(np.concatenate([np.arange(0, 4096, 97), np.arange(3968, 4096)]))
    _wg_fwd_case(rng, 1, 4096, 4096, 2, 1, 256, "bfloat16", rows=rows, causal=True)


# 176-key tiles (attn_fwd_wgmma.cu, wg_wide: D in (64, 128], every row sees
# every key, Sk >= 4096): the last tile partly past Sk (Sk % 176 = 48, 129,
# 0, 72, 52, 175), Sq != Sk with a partial query block, GQA, sink logits,
# narrower D at their own product width; the modifier instances (softcap alone
# runs the fixed-max one, "both" the general one) on every kernel family.
@pytest.mark.parametrize("D,dtype,Sk,kw", [
    (128, "bfloat16", 4096, dict()),
    (128, "float16", 4177, dict(use_sinks=True)),
    (96, "bfloat16", 4400, dict()),
    (80, "float16", 5000, dict(use_sinks=True)),
    (72, "bfloat16", 4100, dict()),
    (128, "bfloat16", 4271, dict()),
])
def test_wgmma_forward_176_key_tiles(rng, D, dtype, Sk, kw):
    _wg_fwd_case(rng, 2, 200, Sk, 4, 2, D, dtype, **kw)


# Grids of several waves of query blocks (300-600 blocks against 132 SMs on
# the H100/H200; the sweep above stays within one wave): blocks with no
# visible key (masked rows), scrubbed tiles, sink logits, the fixed-max
# softcap instance, padded outputs (no TMA store), 176-key tiles and HD 256.
# (Written for a persistent forward, where a CTA runs several blocks in turn;
# measured and dropped in the twenty-fifth session, benchmarks/NOTES.md.)
_WG_WAVES = {
    "causal-gqa": (1, 640, 640, 64, 8, dict(causal=True)),
    "masked-rows-sinks": (1, 700, 200, 64, 16, dict(causal=True, use_sinks=True)),
    "window-sinktok": (2, 600, 650, 40, 8, dict(window=(100, 20), sink_tokens=3)),
    "dense": (3, 300, 260, 48, 48, dict()),
    "softcap-causal": (1, 640, 640, 64, 8, dict(causal=True, softcap=20.0)),
    "wide-176": (1, 384, 4100, 48, 8, dict()),  # D 128: 176-key tiles
}


@pytest.mark.parametrize("D,dtype", [(64, "bfloat16"), (128, "float16"), (128, "bfloat16"), (256, "bfloat16")])
@pytest.mark.parametrize("name", list(_WG_WAVES))
def test_wgmma_forward_several_waves(rng, name, D, dtype):
    B, Sq, Sk, Hq, Hkv, kw = _WG_WAVES[name]
    if D == 256 and name in ("window-sinktok", "dense"):
        pytest.skip("HD 256: two shapes suffice (reference time)")
    if name == "wide-176" and (D != 128 or dtype != "bfloat16"):
        pytest.skip("the 176-key instance: D 128 once (reference time)")
    _wg_fwd_case(rng, B, Sq, Sk, Hq, Hkv, D, dtype, **dict(kw))


@pytest.mark.parametrize("D", [64, 128])
def test_wgmma_forward_several_waves_padded_out(rng, D):
    B, Sq, Sk, Hq, Hkv, kw = _WG_WAVES["window-sinktok"]
    _wg_fwd_case(rng, B, Sq, Sk, Hq, Hkv, D, "bfloat16", layout="opad", **dict(kw))


def _poisoned_forward(q, k, v, bad, **kw):
    """flashc.attention on device copies of NumPy q, k, v, and of k, v with
    NaN / +Inf / -Inf in the keys `bad` (kw as flashc.attention takes them):
    (o, lse, o_poisoned, lse_poisoned) as device arrays, then the poisoned
    k and v as NumPy arrays."""
    D = q.shape[-1]
    pattern = np.array([np.nan, np.inf, -np.inf])[np.arange(D) % 3].astype(q.dtype)
    kp, vp = k.copy(), v.copy()
    kp[:, bad] = pattern
    vp[:, bad] = pattern
    if q.dtype == np.float32:
        # Other NaN encodings, each alone in a bad key's row (the rest of it
        # finite): CUDA's canonical 0x7FFFFFFF, a payload in the low bits
        # only, a negative one — a tf32 rounding by integer operations turns
        # the first into -0 and the second into Inf unless it lets NaN through.
        idx = np.flatnonzero(bad)
        for n, bits in enumerate((0x7FFFFFFF, 0x7F800001, 0xFFFFFFFF)):
            if n + 1 < len(idx):
                j, x = idx[n + 1], np.array([bits], np.uint32).view(np.float32)[0]
                kp[:, j], vp[:, j] = k[:, j], v[:, j]
                kp[:, j, :, n % D] = x
                vp[:, j, :, (n + 1) % D] = x
    D_ = fcuda.to_device
    o, lse = flashc.attention(D_(q), D_(k), D_(v), return_lse=True, **kw)
    op, lp = flashc.attention(D_(q), D_(kp), D_(vp), return_lse=True, **kw)
    return o, lse, op, lp, kp, vp


@pytest.mark.parametrize("D", [64, 128])
def test_wgmma_forward_several_waves_masked_keys_robust(rng, D):
    """NaN/Inf in keys and values a row cannot see leave its o and lse
    bit-identical, over 240-380 query blocks of a window (several waves)."""
    B, Sq, Sk, Hq, Hkv = 1, 900, 900, 48, 8
    mask = dict(causal=True, window=(70, 0))
    q, k, v = (rand(rng, s, "bfloat16") for s in ((B, Sq, Hq, D), (B, Sk, Hkv, D), (B, Sk, Hkv, D)))
    bad = (np.arange(Sk) >= 150) & (np.arange(Sk) < 170)
    clean = ~visible_mask(Sq, Sk, **mask)[:, bad].any(axis=1)
    assert clean.any() and (~clean).any()
    on, ln, opn, lpn = (x.numpy() for x in _poisoned_forward(q, k, v, bad, **mask)[:4])
    assert opn[:, clean].tobytes() == on[:, clean].tobytes(), "o changed"
    assert lpn[:, :, clean].tobytes() == ln[:, :, clean].tobytes(), "lse changed"
    assert not np.isfinite(opn[:, ~clean].astype(np.float32)).all(axis=-1).any(), "a row seeing a bad value is finite"
    ro, _ = attention_reference(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), **mask)
    assert _rel_l2(on, ro) < _WG_FWD_TOL["bfloat16"]


@pytest.mark.parametrize("mods", ["softcap", "both"])
@pytest.mark.parametrize("D,dtype", [(128, "bfloat16"), (96, "float16")])
def test_score_mods_forward_176_key_tiles(rng, monkeypatch, mods, D, dtype):
    _mods_fwd_case(rng, monkeypatch, 1, 150, 4200, 4, 2, D, dtype, _MOD_SETS[mods], dict(use_sinks=True))


def test_wgmma_forward_176_key_tiles_taken(rng, monkeypatch):
    # The plan takes the 176-key instance where it applies, and the 128-key
    # one below 4096 keys and under a 200 KB shared-memory cap (kernel names
    # the CUDA profiler records: WgTraits<128, 2, 128, 176>).
    cc = _device_cc()
    if cc != (9, 0):
        pytest.skip("wgmma forward runs on compute capability 9.0 only (this device: %s)" % (cc,))
    import torch
    from torch.profiler import ProfilerActivity, profile

    def names(Sk, cap=None):
        if cap:
            monkeypatch.setenv("FLASHC_CUDA_SMEM_LIMIT", cap)
        else:
            monkeypatch.delenv("FLASHC_CUDA_SMEM_LIMIT", raising=False)
        q, k, v = (rand(rng, s, "bfloat16") for s in ((1, 256, 4, 128), (1, Sk, 2, 128), (1, Sk, 2, 128)))
        _wg_fwd_run(q, k, v, None)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            _wg_fwd_run(q, k, v, None)
            torch.cuda.synchronize()
        return [e.key for e in prof.key_averages() if e.device_time_total > 0 and "attn_fwd_wgmma" in e.key]
    wide = names(4096)
    assert wide and all("176" in n for n in wide), wide
    for n in (names(4000), names(4096, cap="200000")):
        assert n and not any("176" in x for x in n), n


@pytest.mark.parametrize("D", [64, 128, 96, 256])
def test_wgmma_forward_is_a_different_kernel(rng, D):
    # On compute capability 9.0 the default path must be the wgmma kernel:
    # the kernel names the CUDA profiler records (at HD = 256 both kernels
    # use 64-key tiles and can agree to the bit, so bits cannot tell).
    cc = _device_cc()
    if cc != (9, 0):
        pytest.skip("wgmma forward runs on compute capability 9.0 only (this device: %s)" % (cc,))
    import torch
    from torch.profiler import ProfilerActivity, profile
    q, k, v = (rand(rng, s, "bfloat16") for s in ((1, 512, 4, D), (1, 512, 4, D), (1, 512, 4, D)))

    def kernels(kernel):
        _wg_fwd_run(q, k, v, None, kernel)  # warm-up: module load, smem attributes
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            a, _ = _wg_fwd_run(q, k, v, None, kernel)
            torch.cuda.synchronize()
        return a, {e.key for e in prof.key_averages() if e.device_time_total > 0}
    a, names = kernels(None)
    b, names_mma = kernels("mma")
    assert any("attn_fwd_wgmma_kernel" in n for n in names), sorted(names)
    assert not any("attn_fwd_wgmma_kernel" in n for n in names_mma), sorted(names_mma)
    assert _rel_l2(a, b) < 1e-2

# ====================================================================
# Score modifiers (softcap, ALiBi slopes) on CUDA, forward and backward, on
# every kernel family: FLASHC_CUDA_KERNEL=generic (SIMT), =mma (mma.sync
# forward, tensor-core backward) and the default (the wgmma forward on
# compute capability 9.0). Device-resident inputs, slopes and sinks;
# NaN-poisoned outputs; each result against the float64 reference (within
# the naive same-precision error for the forward, by relative L2 for the
# backward) and cross-checked with flashc's CPU float64 result on the same
# inputs. D = 64 and 128 reach the fast kernels; 40, 96, 256 the others.
# ====================================================================

_KERNELS = [None, "mma", "generic"]

_MOD_SETS = {
    "softcap": dict(softcap=2.5),
    "alibi_h": dict(alibi="h"),
    "alibi_bh": dict(alibi="bh"),
    "both": dict(softcap=4.0, alibi="bh", softmax_scale=0.2),
}

_MOD_MASKS = [
    dict(causal=True),
    dict(),
    dict(window=(40, 8), sink_tokens=2),
    dict(causal=True, use_sinks=True),
]


def _slopes(rng, B, Hq, kind, dtype):
    if kind == "h":
        return (2.0 ** (-8.0 * np.arange(1, Hq + 1) / Hq)).astype(dtype)
    s = rng.uniform(0.0, 0.25, (B, Hq)).astype(dtype)
    s[-1, 0] = -0.05
    return s


def _mods_inputs(rng, B, Sq, Sk, Hq, Hkv, D, dtype, mods, mask):
    q, k, v = (rand(rng, s, dtype) for s in ((B, Sq, Hq, D), (B, Sk, Hkv, D), (B, Sk, Hkv, D)))
    kw = dict(mask)
    mods = dict(mods)
    alibi = mods.pop("alibi", None)
    kw.update(mods)
    if alibi:
        kw["alibi_slopes"] = _slopes(rng, B, Hq, alibi, lse_dtype(dtype))
    if kw.pop("use_sinks", False):
        kw["sinks"] = (rng.standard_normal(Hq) * 2).astype(lse_dtype(dtype))
    return q, k, v, kw


def _on_device(kw):
    """kw with slopes and sinks as DeviceArrays ([B, Hq] slopes transposed
    in device memory: any strides)."""
    out = dict(kw)
    for name in ("alibi_slopes", "sinks"):
        a = kw.get(name)
        if a is None:
            continue
        if a.ndim == 2:
            out[name] = fcuda.to_device(np.ascontiguousarray(a.T)).T
        else:
            out[name] = fcuda.to_device(a)
    return out


def _cpu_f64(q, k, v, kw):
    f = np.float64
    kw64 = {n: (a.astype(f) if isinstance(a, np.ndarray) else a) for n, a in kw.items()}
    return flashc.attention(q.astype(f), k.astype(f), v.astype(f), return_lse=True,
                            backend="cpu", **kw64)


def _mods_fwd_case(rng, monkeypatch, B, Sq, Sk, Hq, Hkv, D, dtype, mods, mask):
    q, k, v, kw = _mods_inputs(rng, B, Sq, Sk, Hq, Hkv, D, dtype, mods, mask)
    ro, rl = attention_reference(q, k, v, **kw)
    no, nl = attention_naive(q, k, v, dtype, **kw)
    co, cl = _cpu_f64(q, k, v, kw)
    dkw = _on_device(kw)
    dq_, dk_, dv_ = (fcuda.to_device(a) for a in (q, k, v))
    for kernel in _KERNELS:
        if kernel is None:
            monkeypatch.delenv("FLASHC_CUDA_KERNEL", raising=False)
        else:
            monkeypatch.setenv("FLASHC_CUDA_KERNEL", kernel)
        o = fcuda.to_device(np.full(q.shape, np.nan, q.dtype))
        lse = fcuda.to_device(np.full((B, Hq, Sq), np.nan, lse_dtype(dtype)))
        flashc.attention(dq_, dk_, dv_, out=(o, lse), return_lse=True, **dkw)
        o, lse = o.numpy(), lse.numpy()
        what = "%s kernel" % (kernel or "default")
        assert not np.isnan(np.asarray(o, np.float64)).any(), what + ": NaN in o"
        assert not np.isnan(lse).any(), what + ": NaN in lse"
        assert_close(o, ro, no, dtype, what + " o")
        assert_close(lse, rl, nl, lse_dtype(dtype).__name__, what + " lse")
        assert_close(o, co, no, dtype, what + " o vs CPU F64")
        assert_close(lse, cl, nl, lse_dtype(dtype).__name__, what + " lse vs CPU F64")
    monkeypatch.delenv("FLASHC_CUDA_KERNEL", raising=False)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("D", [64, 128, 40, 96, 256])
@pytest.mark.parametrize("mods", list(_MOD_SETS))
def test_score_mods_forward(rng, monkeypatch, mods, D, dtype):
    i = list(_MOD_SETS).index(mods) + [64, 128, 40, 96, 256].index(D)
    mask = _MOD_MASKS[i % len(_MOD_MASKS)]
    _mods_fwd_case(rng, monkeypatch, 2, 77, 130, 8, 2, D, dtype, _MOD_SETS[mods], mask)


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("mask", _MOD_MASKS, ids=["causal", "full", "window-sinktok", "causal-sinks"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_score_mods_forward_fast_kernels(rng, monkeypatch, dtype, mask, D):
    # Multi-tile shapes (Sq != Sk, masked rows at Sq > Sk) on the fast kernels.
    _mods_fwd_case(rng, monkeypatch, 1, 300, 1000, 8, 2, D, dtype, _MOD_SETS["both"], mask)
    _mods_fwd_case(rng, monkeypatch, 1, 300, 100, 4, 1, D, dtype, _MOD_SETS["softcap"], mask)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("mods", ["softcap", "both"])
def test_score_mods_decode(rng, monkeypatch, mods, dtype):
    _mods_fwd_case(rng, monkeypatch, 3, 1, 1000, 8, 2, 128, dtype, _MOD_SETS[mods],
                   dict(causal=True, window=(300, 0), sink_tokens=4, use_sinks=True))


_MOD_BWD_TOL = {"bfloat16": 2.5e-2, "float16": 6e-3, "float32": 2e-5, "float64": 1e-10}


def _mods_bwd_case(rng, monkeypatch, B, Sq, Sk, Hq, Hkv, D, dtype, mods, mask):
    q, k, v, kw = _mods_inputs(rng, B, Sq, Sk, Hq, Hkv, D, dtype, mods, mask)
    do = rand(rng, q.shape, dtype)
    f = np.float64
    kw64 = {n: (a.astype(f) if isinstance(a, np.ndarray) else a) for n, a in kw.items()}
    ref = attention_backward_reference(do, q, k, v, **kw64)
    dkw = _on_device(kw)
    dq_, dk_, dv_, ddo = (fcuda.to_device(a) for a in (q, k, v, do))
    errs = {}
    for kernel in ("generic", "mma", None):
        if kernel is None:
            monkeypatch.delenv("FLASHC_CUDA_KERNEL", raising=False)
        else:
            monkeypatch.setenv("FLASHC_CUDA_KERNEL", kernel)
        o, lse = flashc.attention(dq_, dk_, dv_, return_lse=True, **dkw)
        outs = tuple(fcuda.to_device(np.full(a.shape, np.nan, a.dtype)) for a in (q, k, v))
        if "sinks" in kw:
            outs += (fcuda.to_device(np.full(Hq, np.nan, lse_dtype(dtype))),)
        g = [x.numpy() for x in flashc.attention_backward(ddo, dq_, dk_, dv_, o, lse, out=outs,
                                                          **dkw)]
        what = "%s kernel" % (kernel or "default")
        e = {}
        for name, a, r in zip(("dq", "dk", "dv", "dsinks"), g, ref):
            assert np.isfinite(np.asarray(a, np.float64)).all(), "%s %s: NaN/unwritten" % (what,
                                                                                        name)
            e[name] = _rel_l2(a, r)
        if dtype in ("float32", "float64"):
            naive = attention_backward_naive(do, q, k, v, o.numpy(), lse.numpy(), dtype, **kw)
            for name, a, r, n in zip(("dq", "dk", "dv", "dsinks"), g, ref, naive):
                if r is not None:
                    assert_close(a, r, n, dtype, "%s %s" % (what, name), factor=4.0)
        errs[kernel or "default"] = e
    tol = _MOD_BWD_TOL[dtype]
    for kernel, e in errs.items():
        for name, x in e.items():
            assert x < max(tol, 3.0 * errs["generic"][name]), \
                "%s %s rel-L2 %.3g (generic %.3g) tol %.3g" % (kernel, name, x,
                                                               errs["generic"][name], tol)
    monkeypatch.delenv("FLASHC_CUDA_KERNEL", raising=False)
    print("mods-bwd %s D%d %s %s: %s" % (dtype, D, mods, mask, errs))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("D", [64, 128, 40, 96, 256])
@pytest.mark.parametrize("mods", list(_MOD_SETS))
def test_score_mods_backward(rng, monkeypatch, mods, D, dtype):
    i = list(_MOD_SETS).index(mods) + 2 * [64, 128, 40, 96, 256].index(D)
    mask = _MOD_MASKS[i % len(_MOD_MASKS)]
    _mods_bwd_case(rng, monkeypatch, 2, 77, 130, 8, 2, D, dtype, _MOD_SETS[mods], mask)


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_score_mods_backward_larger(rng, monkeypatch, dtype, D):
    _mods_bwd_case(rng, monkeypatch, 1, 300, 280, 4, 1, D, dtype, _MOD_SETS["both"],
                   dict(causal=True, window=(64, -1), sink_tokens=5, use_sinks=True))
    _mods_bwd_case(rng, monkeypatch, 1, 200, 60, 4, 2, D, dtype, _MOD_SETS["softcap"],
                   dict(causal=True, use_sinks=True))  # rows with no visible key


# "sinks-split": sink tokens under a window, 900 rows: every row sees key
# block 0, which the Hopper backward splits over several CTAs (Split in
# attn_bwd_wgmma.cu); the bad keys lie in that block, past the sink keys.
_ROBUST_SHAPES = {"window": ((1, 200, 260, 4, 2), dict(causal=True, window=(70, 0)), (150, 170)),
                  "sinks-split": ((1, 900, 900, 4, 2), dict(causal=True, window=(40, 0), sink_tokens=4),
                                  (60, 70))}


@pytest.mark.parametrize("kernel", _KERNELS, ids=["default", "mma", "generic"])
@pytest.mark.parametrize("mods", ["plain", "softcap", "both"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("shape", list(_ROBUST_SHAPES))
def test_score_mods_masked_keys_robust(rng, monkeypatch, shape, kernel, mods, dtype, D):
    """NaN/Inf in keys and values a row cannot see leave that row's o, lse
    and dq, and the clean keys' dk/dv, bit-identical (each kernel; bf16 at
    D 64/128 by default: the Hopper wgmma forward)."""
    if kernel:
        monkeypatch.setenv("FLASHC_CUDA_KERNEL", kernel)
    else:
        monkeypatch.delenv("FLASHC_CUDA_KERNEL", raising=False)
    (B, Sq, Sk, Hq, Hkv), mask, (b0, b1) = _ROBUST_SHAPES[shape]
    q, k, v, kw = _mods_inputs(rng, B, Sq, Sk, Hq, Hkv, D, dtype,
                               _MOD_SETS.get(mods, {}), mask)
    bad = (np.arange(Sk) >= b0) & (np.arange(Sk) < b1)
    vis = visible_mask(Sq, Sk, **mask)
    clean = ~vis[:, bad].any(axis=1)
    assert clean.any() and bad.any()
    dkw = _on_device(kw)
    do = fcuda.to_device(rand(rng, q.shape, dtype))
    D_ = fcuda.to_device
    o, lse, op, lp, kp, vp = _poisoned_forward(q, k, v, bad, **dkw)
    on, ln, opn, lpn = o.numpy(), lse.numpy(), op.numpy(), lp.numpy()
    assert opn[:, clean].tobytes() == on[:, clean].tobytes(), "o changed"
    assert lpn[:, :, clean].tobytes() == ln[:, :, clean].tobytes(), "lse changed"
    # Bad values alone (keys clean): the rows that see one are not finite
    # (no kernel may quietly read them as 0), the others keep their bits.
    ov = flashc.attention(D_(q), D_(k), D_(vp), **dkw).numpy()
    assert ov[:, clean].tobytes() == on[:, clean].tobytes(), "o changed (bad values only)"
    assert not np.isfinite(ov[:, ~clean].astype(np.float32)).all(axis=-1).any(), "a row seeing a bad value is finite"
    # Bad keys alone: a NaN or infinite score a row sees is not dropped as a masked one.
    ok, lk = (x.numpy() for x in flashc.attention(D_(q), D_(kp), D_(v), return_lse=True, **dkw))
    assert ok[:, clean].tobytes() == on[:, clean].tobytes(), "o changed (bad keys only)"
    assert not np.isfinite(ok[:, ~clean].astype(np.float32)).all(axis=-1).any(), "a row seeing a bad key is finite"
    assert np.isnan(lk[:, :, ~clean]).all(), "a row seeing a bad key has a non-NaN lse"
    g = [x.numpy() for x in flashc.attention_backward(do, D_(q), D_(k), D_(v), o, lse, **dkw)]
    gp = [x.numpy() for x in flashc.attention_backward(do, D_(q), D_(kp), D_(vp), o, lse,
                                                       **dkw)]
    assert gp[0][:, clean].tobytes() == g[0][:, clean].tobytes(), "dq changed"
    assert gp[1][:, ~bad].tobytes() == g[1][:, ~bad].tobytes(), "dk changed"
    assert gp[2][:, ~bad].tobytes() == g[2][:, ~bad].tobytes(), "dv changed"
    # ... and the rows that see a bad key, and the bad keys some row sees,
    # get non-finite gradients (no kernel quietly reads the bad K as 0).
    f32 = np.float32
    assert not np.isfinite(gp[0][:, ~clean].astype(f32)).all(axis=-1).any(), "a row seeing a bad key has finite dq"
    seen = bad & vis.any(axis=0)
    for name, x in (("dk", gp[1]), ("dv", gp[2])):
        assert not np.isfinite(x[:, seen].astype(f32)).all(axis=-1).any(), "a seen bad key has finite " + name


def test_score_mods_device_slopes_wrong_dtype(rng):
    d = fcuda.to_device(rand(rng, (1, 4, 2, 8), "float32"))
    for bad in (np.zeros(2, np.float64), np.zeros(2, np.float16)):
        with pytest.raises(flashc.FlashcError) as ei:
            flashc.attention(d, d, d, alibi_slopes=fcuda.to_device(bad))
        assert ei.value.status == _lib.FLASHC_ERR_DTYPE and "alibi_slopes" in ei.value.message


def test_score_mods_device_slopes_wrong_shape(rng):
    d = fcuda.to_device(rand(rng, (1, 4, 2, 8), "float32"))
    with pytest.raises(flashc.FlashcError) as ei:
        flashc.attention(d, d, d, alibi_slopes=fcuda.to_device(np.zeros(3, np.float32)))
    assert ei.value.status == _lib.FLASHC_ERR_SHAPE
    assert "alibi_slopes.shape[0]=3 must equal Hq=2" in ei.value.message


def test_score_mods_staged_nan_slopes(rng):
    # NumPy slopes copied to the device are checked on the host (the CUDA
    # backend does not inspect device memory).
    q = rand(rng, (1, 4, 2, 8), "float32")
    with pytest.raises(flashc.FlashcError) as ei:
        flashc.attention(q, q, q, alibi_slopes=np.array([0.5, np.nan], np.float32),
                         backend="cuda")
    assert ei.value.status == _lib.FLASHC_ERR_INVALID_ARGUMENT
    assert "is not finite" in ei.value.message


def test_score_mods_softcap_invalid_on_cuda(rng):
    d = fcuda.to_device(rand(rng, (1, 4, 2, 8), "float32"))
    with pytest.raises(flashc.FlashcError) as ei:
        flashc.attention(d, d, d, softcap=-2.0)
    assert ei.value.status == _lib.FLASHC_ERR_INVALID_ARGUMENT

# ====================================================================
# Hopper wgmma backward (src/cuda/attn_bwd_wgmma.cu): F16/BF16, D ≤ 256 with
# D % 8 == 0 and 16-byte aligned rows. On compute capability 9.0 the default
# dispatch of every _tc_bwd_case above runs it (elsewhere the mma.sync
# kernels); these cases add what only it has: several key blocks of 128 and
# query tiles of 64 per CTA (both rings wrap), GQA groups looped inside the
# dK/dV CTA, a row segment that ends inside the problem (its tile's rows
# past the end are zeroed by the producer), D padded to 64/128, f16 and
# bf16, each against float64, the generic kernel, and itself (bit-identical).
# ====================================================================

_WG_BWD_CASES = {
    "causal-gqa4": (1, 700, 700, 8, 2, dict(causal=True)),
    "full-sq-ne-sk": (2, 333, 517, 4, 4, dict()),
    "window-sinktok-sinks": (1, 650, 900, 8, 2, dict(window=(100, 0), sink_tokens=4,
                                                     use_sinks=True)),
    "causal-sq-gt-sk": (1, 600, 260, 4, 1, dict(causal=True, use_sinks=True)),
    "window-both-sides": (2, 520, 520, 4, 2, dict(window=(70, 90))),
    "full-few-rows": (1, 100, 517, 4, 2, dict()),
}


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("D", [32, 64, 96, 128, 160, 192, 200, 256])
@pytest.mark.parametrize("name", list(_WG_BWD_CASES))
def test_wgmma_backward_cases(rng, name, D, dtype):
    B, Sq, Sk, Hq, Hkv, kw = _WG_BWD_CASES[name]
    _tc_bwd_case(rng, B, Sq, Sk, Hq, Hkv, D, dtype, **dict(kw))


@pytest.mark.parametrize("D", [64, 96, 128])
@pytest.mark.parametrize("name", ["causal-gqa4", "window-sinktok-sinks", "full-few-rows"])
def test_wgmma_backward_grads_unaligned(rng, name, D):
    # dq, dk, dv 4 bytes past 16-byte alignment, rows D + 2 elements apart:
    # the dK/dV epilogue's TMA stores cannot address them (registers instead).
    B, Sq, Sk, Hq, Hkv, kw = _WG_BWD_CASES[name]
    _tc_bwd_case(rng, B, Sq, Sk, Hq, Hkv, D, "bfloat16", gpad=True, **dict(kw))


@pytest.mark.parametrize("D", [64, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_wgmma_backward_many_key_blocks(rng, causal, D):
    """More key blocks of one head than SMs (17000 keys: 133 blocks of 128,
    266 of 64 at D = 256): the deterministic dQ order falls back to
    increasing key blocks (each block waits only on blocks launched before
    it); still exact, and bit-identical across runs."""
    _tc_bwd_case(rng, 1, 150, 17000, 2, 1, D, "bfloat16", causal=causal)


@pytest.mark.parametrize("D", [128, 160, 192, 200, 256])
def test_wgmma_backward_is_the_default(rng, D):
    # On compute capability 9.0 the default backward is the wgmma kernel up
    # to D = 256 (the HD = 192 / 256 one with 64-key blocks past 128): the
    # kernel names the CUDA profiler records.
    cc = _device_cc()
    if cc != (9, 0):
        pytest.skip("wgmma backward runs on compute capability 9.0 only (this device: %s)" % (cc,))
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile
    q, k, v, do = (rand(rng, (1, 300, 4, D), "bfloat16") for _ in range(4))
    _dense_fwd_bwd(q, k, v, do, None, dict(causal=True))  # warm-up
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        _dense_fwd_bwd(q, k, v, do, None, dict(causal=True))
        torch.cuda.synchronize()
    names = {e.key for e in prof.key_averages() if e.device_time_total > 0}
    want = "bwd_wide_wgmma_kernel" if D > 128 else "bwd_dkdv_wgmma_kernel"
    assert any(want in n for n in names), sorted(names)


_UNSEEN_CASES = {
    # Sq > Sk with causal / window masks: the first rows see no key. (The
    # ordered dQ adds in decreasing key-block order there, ORD_DOWN, and a
    # tile's first addition is a copy into the unzeroed buffer.)
    "causal": (1, 700, 300, 4, 4, dict(causal=True)),
    "causal-gqa-sinks": (2, 520, 200, 8, 2, dict(causal=True, use_sinks=True)),
    "window": (1, 700, 300, 4, 2, dict(causal=True, window=(100, 0))),
    "window-open-right": (1, 600, 330, 4, 4, dict(window=(60, 5))),
}


@pytest.mark.parametrize("det", [True, False], ids=["ordered", "unordered"])
@pytest.mark.parametrize("D", [64, 96, 128, 192, 256])
@pytest.mark.parametrize("case", list(_UNSEEN_CASES))
def test_backward_unseen_rows_with_poisoned_scratch(rng, monkeypatch, case, D, det):
    """The backward's scratch (the fp32 dQ accumulator, L, Δ) filled with NaN
    bytes before the kernels run (FLASHC_CUDA_POISON_SCRATCH=1): rows that see
    no key come out exactly 0 without reading the accumulator (no key block
    visits their dQ tiles, which are never written under the ordered dQ's
    copy-first), every other element is finite and matches the float64
    reference — on the default (wgmma on Hopper) and the mma.sync kernels."""
    B, Sq, Sk, Hq, Hkv, kw = _UNSEEN_CASES[case]
    kw = dict(kw)
    use_sinks = kw.pop("use_sinks", False)
    q, k, v, do = (rand(rng, s, "bfloat16") for s in ((B, Sq, Hq, D), (B, Sk, Hkv, D),
                                                    (B, Sk, Hkv, D), (B, Sq, Hq, D)))
    sinks = (rng.standard_normal(Hq) * 2).astype(np.float32) if use_sinks else None
    unseen = ~visible_mask(Sq, Sk, **{n: kw[n] for n in ("causal", "window") if n in kw}).any(axis=1)
    assert unseen.sum() >= 128, "the case should hold whole unseen dQ tiles"
    f = np.float64
    ref = attention_backward_reference(do.astype(f), q.astype(f), k.astype(f), v.astype(f),
                                       sinks=None if sinks is None else sinks.astype(f), **kw)
    T = fcuda.to_device
    ds = T(sinks) if sinks is not None else None
    monkeypatch.setenv("FLASHC_CUDA_POISON_SCRATCH", "1")
    for kernel in (None, "mma"):
        if kernel:
            monkeypatch.setenv("FLASHC_CUDA_KERNEL", kernel)
        o, lse = flashc.attention(T(q), T(k), T(v), return_lse=True, sinks=ds, **kw)
        outs = tuple(T(np.full(a.shape, np.nan, a.dtype)) for a in (q, k, v))
        if sinks is not None:
            outs += (T(np.full(Hq, np.nan, np.float32)),)
        g = [x.numpy() for x in flashc.attention_backward(T(do), T(q), T(k), T(v), o, lse,
                                                           sinks=ds, out=outs, deterministic=det,
                                                           **kw)]
        what = "%s kernel" % (kernel or "default")
        for name, a, r in zip(("dq", "dk", "dv", "dsinks"), g, ref):
            a = np.asarray(a, np.float64)
            assert np.isfinite(a).all(), "%s %s: NaN (poisoned scratch read, or unwritten)" % (
                what, name)
            e = _rel_l2(a, r)
            assert e < _TC_BWD_TOL["bfloat16"], "%s %s rel-L2 %.3g" % (what, name, e)
        assert not np.asarray(g[0], np.float64)[:, unseen].any(), \
            "%s: dq of rows that see no key is not 0" % what
    monkeypatch.delenv("FLASHC_CUDA_KERNEL", raising=False)


def test_weighted_sum_backward_with_poisoned_scratch(rng, monkeypatch):
    """The weighted sum's backward reduces dw through per-block partials in
    scratch: with the scratch poisoned the result is bit-identical to the
    call without (every partial is written before it is read). That the
    knob does poison is shown by a module whose dQ conversion reads unseen
    rows (benchmarks/NOTES.md, twenty-first session): the test above fails
    on it."""
    x = rand(rng, (257, 300), "float32")
    w = rand(rng, (300,), "float32")
    dy = rand(rng, (257,), "float32")
    T = fcuda.to_device
    base = [a.numpy() for a in flashc.weighted_sum_backward(T(dy), T(x), T(w))]
    monkeypatch.setenv("FLASHC_CUDA_POISON_SCRATCH", "1")
    pois = [a.numpy() for a in flashc.weighted_sum_backward(T(dy), T(x), T(w))]
    for a, b in zip(base, pois):
        assert a.tobytes() == b.tobytes()


# ====================================================================
# Shared-memory limits (issue 8): FLASHC_CUDA_SMEM_LIMIT makes every plan
# choose as on a GPU with less shared memory per block — 99 KB (sm_86/89:
# the tensor-core backward single-buffered at D = 128, the generic kernels'
# small tiles) and 48 KB (the generic kernels stream Q/K/V/dO through
# shared memory in chunks of head dims). Every dtype, head dims up to 256,
# masks, GQA, sink tokens and logits, ragged and paged problems: no call
# fails, and each result is as close to the float64 reference as the run
# without a limit (or, for the ragged calls, as close to the CPU backend's).
_SMEM_LIMITS = {"99KB": 101376, "48KB": 49152}
_SMEM_TOL = {"bfloat16": 2.5e-2, "float16": 6e-3, "float32": 2e-5, "float64": 1e-12}


def _dense_fwd_bwd(q, k, v, do, sinks, kw):
    D = fcuda.to_device
    ds = D(sinks) if sinks is not None else None
    dq_, dk_, dv_, ddo = D(q), D(k), D(v), D(do)
    o, lse = flashc.attention(dq_, dk_, dv_, return_lse=True, sinks=ds, **kw)
    g = flashc.attention_backward(ddo, dq_, dk_, dv_, o, lse, sinks=ds, **kw)
    return [o.numpy(), lse.numpy()] + [x.numpy() for x in g]


@pytest.mark.parametrize("limit", list(_SMEM_LIMITS))
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "float64"])
@pytest.mark.parametrize("D", [64, 96, 128, 200, 256])
@pytest.mark.parametrize("case", ["causal-gqa-sinks", "window-sinktok"])
def test_smem_limit_dense(rng, monkeypatch, limit, dtype, D, case):
    B, Sq, Sk, Hq, Hkv = 2, 150, 170, 4, 2
    kw = dict(causal=True) if case == "causal-gqa-sinks" else dict(window=(60, 7), sink_tokens=3)
    q, k, v, do = (rand(rng, s, dtype) for s in ((B, Sq, Hq, D), (B, Sk, Hkv, D),
                                                 (B, Sk, Hkv, D), (B, Sq, Hq, D)))
    sinks = (rng.standard_normal(Hq) * 2).astype(lse_dtype(dtype)) if "sinks" in case else None
    f = np.float64
    ro, rl = attention_reference(q.astype(f), k.astype(f), v.astype(f),
                                 sinks=None if sinks is None else sinks.astype(f), **kw)
    rg = attention_backward_reference(do.astype(f), q.astype(f), k.astype(f), v.astype(f),
                                      sinks=None if sinks is None else sinks.astype(f), **kw)
    ref = [ro, rl] + [r for r in rg if r is not None]
    base = _dense_fwd_bwd(q, k, v, do, sinks, kw)
    monkeypatch.setenv("FLASHC_CUDA_SMEM_LIMIT", str(_SMEM_LIMITS[limit]))
    got = _dense_fwd_bwd(q, k, v, do, sinks, kw)
    for name, a, b, r in zip(("o", "lse", "dq", "dk", "dv", "dsinks"), got, base, ref):
        fin = np.isfinite(r)
        assert (np.isfinite(a) == fin).all(), "%s: non-finite where the reference is finite" % name
        e, eb = _rel_l2(a[fin], r[fin]), _rel_l2(b[fin], r[fin])
        assert e <= max(_SMEM_TOL[dtype], 3.0 * eb), "%s rel-L2 %.3g (no limit %.3g)" % (name, e, eb)


def _paged(rng, B, lens, page, Hkv, D, dtype):
    need = [(n + page - 1) // page for n in lens]
    P = sum(need) + 3
    perm = rng.permutation(P)
    table = np.full((B, max(need)), 0, np.int32)
    kc = rand(rng, (P, page, Hkv, D), dtype)
    vc = rand(rng, (P, page, Hkv, D), dtype)
    used = 0
    for b in range(B):
        table[b, :need[b]] = perm[used:used + need[b]]
        used += need[b]
    return kc, vc, table


@pytest.mark.parametrize("limit", list(_SMEM_LIMITS))
@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "float64"])
@pytest.mark.parametrize("D", [128, 256])
def test_smem_limit_ragged(rng, monkeypatch, limit, dtype, D):
    Hq, Hkv = 4, 2
    lq, lk = [37, 0, 90], [50, 64, 120]
    cq = np.concatenate([[0], np.cumsum(lq)]).astype(np.int32)
    ck = np.concatenate([[0], np.cumsum(lk)]).astype(np.int32)
    q, do = rand(rng, (cq[-1], Hq, D), dtype), rand(rng, (cq[-1], Hq, D), dtype)
    k, v = rand(rng, (ck[-1], Hkv, D), dtype), rand(rng, (ck[-1], Hkv, D), dtype)
    kw = dict(causal=True, sink_tokens=2)
    lens = [19, 70, 33]
    kc, vc, table = _paged(rng, 3, lens, 16, Hkv, D, dtype)
    qk = rand(rng, (3, 4, Hq, D), dtype)

    def run(backend):
        o, lse = flashc.attention_varlen(q, k, v, cq, ck, return_lse=True, backend=backend, **kw)
        g = flashc.attention_varlen_backward(do, q, k, v, o, lse, cq, ck, backend=backend, **kw)
        ok = flashc.attention_with_kvcache(qk, kc, vc, cache_seqlens=np.array(lens, np.int32),
                                           block_table=table, backend=backend, causal=True)
        return [np.asarray(x) for x in (o, lse) + tuple(g) + (ok,)]
    cpu = run("cpu")
    monkeypatch.setenv("FLASHC_CUDA_SMEM_LIMIT", str(_SMEM_LIMITS[limit]))
    got = run("cuda")
    for name, a, r in zip(("o", "lse", "dq", "dk", "dv", "kvcache o"), got, cpu):
        fin = np.isfinite(r)
        assert (np.isfinite(a) == fin).all(), "%s: non-finite where the CPU result is finite" % name
        e = _rel_l2(a[fin], r[fin])
        assert e <= _SMEM_TOL[dtype], "%s rel-L2 vs CPU %.3g" % (name, e)


@pytest.mark.parametrize("limit,D,dtype", [(101376, 128, "bfloat16"), (166912, 256, "bfloat16"),
                                           (101376, 96, "float32"), (101376, 128, "float32")],
                         ids=["99KB-D128", "163KB-D256", "99KB-D96-float32", "99KB-D128-float32"])
def test_smem_limit_picks_tensor_cores(rng, monkeypatch, limit, D, dtype):
    # A 99 KB GPU (sm_86/89) must still run the bf16 D = 128 backward on
    # tensor cores, and an A100 (163 KB) the D = 256 one (the single-buffered
    # instances), not the generic kernels; the float32 backward (3xTF32) at
    # D = 96 and 128 too (single-buffered: 75 KB, and at D = 128 exactly the
    # 99 KB with L and Δ kept in the Q tile's row pad).
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile
    q, k, v, do = (rand(rng, (1, 256, 4, D), dtype) for _ in range(4))
    monkeypatch.setenv("FLASHC_CUDA_SMEM_LIMIT", str(limit))
    monkeypatch.setenv("FLASHC_CUDA_KERNEL", "mma")
    _dense_fwd_bwd(q, k, v, do, None, dict(causal=True))  # warm-up
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        _dense_fwd_bwd(q, k, v, do, None, dict(causal=True))
        torch.cuda.synchronize()
    names = {e.key for e in prof.key_averages() if e.device_time_total > 0}
    assert any("bwd_dkdv_kernel" in n and "fcc_bwd_dkdv_kernel" not in n for n in names), sorted(names)
    assert any("bwd_dq_kernel" in n and "fcc_bwd_dq_kernel" not in n for n in names), sorted(names)
    assert not any("fcc_bwd_dkdv_kernel" in n or "fcc_bwd_dq_kernel" in n for n in names), sorted(names)
    assert any("attn_fwd_tc_kernel" in n for n in names), sorted(names)
    assert not any("fcc_attn_fwd_kernel" in n for n in names), sorted(names)



def test_non_native_byte_order_staged_and_device(rng):
    # Big-endian host arrays are read by value on the device path too: staged
    # (backend="cuda") and through flashc.cuda.to_device (device arrays are
    # native-endian); a big-endian out= is an error.
    q, k, v = (rand(rng, (2, 5, 4, 16), "float32") for _ in range(3))
    want = flashc.attention(q, k, v, causal=True, backend="cuda")
    got = flashc.attention(q.astype(">f4"), k, v.astype(">f4"), causal=True, backend="cuda")
    np.testing.assert_array_equal(got, want)
    d = fcuda.to_device(q.astype(">f4"))
    assert d.dtype.isnative
    got = flashc.attention(d, fcuda.to_device(k), fcuda.to_device(v), causal=True)
    np.testing.assert_array_equal(got.numpy(), want)
    with pytest.raises(flashc.FlashcError, match="byte order"):
        flashc.attention(q, k, v, backend="cuda", out=np.empty(q.shape, dtype=">f4"))
