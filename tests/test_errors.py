"""Every error path of the ABI, one test per bad input, through Python.

Status codes are the contract (flashc.h pins them); message text is only
checked where flashc.h documents it (the Hq % Hkv example) or where it must
name the offending argument. NULL pointers and raw struct values go through
the raw layer (flashc._lib); the rest through the friendly functions.
"""

import ctypes
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import flashc
from flashc import _lib

# ----------------------------------------------------------------- helpers


def tensor(arr=None, dtype=None, shape=None, strides=None, data=None):
    """A flashc_tensor from a NumPy array (or from explicit fields)."""
    t = _lib.flashc_tensor()
    if arr is not None:
        t.data = arr.__array_interface__["data"][0]
        t.dtype = {np.float32: 0, np.float16: 1, np.float64: 3}[arr.dtype.type]
        shape = arr.shape if shape is None else shape
        strides = [s // arr.itemsize for s in arr.strides] if strides is None else strides
    if data is not None:
        t.data = data
    if dtype is not None:
        t.dtype = dtype
    t.ndim = len(shape)
    for i, n in enumerate(shape):
        t.shape[i] = n
        t.strides[i] = strides[i]
    return t


def ref(t):
    return ctypes.byref(t) if t is not None else None


def last_error():
    return _lib.flashc_last_error().decode()


def qkv(B=1, Sq=4, Sk=5, Hq=4, Hkv=2, D=8, dtype=np.float32):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((B, Sq, Hq, D)).astype(dtype)
    k = rng.standard_normal((B, Sk, Hkv, D)).astype(dtype)
    v = rng.standard_normal((B, Sk, Hkv, D)).astype(dtype)
    return q, k, v


def raw_fwd(q, k, v, o, lse=None, params=None):
    return _lib.flashc_attn_fwd(ref(q), ref(k), ref(v), ref(o), ref(lse), ref(params))


def expect(status, fn, *args, match=None, **kw):
    with pytest.raises(flashc.FlashcError) as ei:
        fn(*args, **kw)
    e = ei.value
    assert e.status == status, "got %s: %s" % (e.status_name, e.message)
    assert e.message, "empty error message"
    if match is not None:
        assert match in e.message, e.message
    return e


def writable_zero_stride(shape, dtype, axis):
    base = np.zeros(shape, dtype)
    strides = list(base.strides)
    strides[axis] = 0
    return np.lib.stride_tricks.as_strided(base, shape=shape, strides=strides, writeable=True)


S = _lib  # status constants

# ------------------------------------------------------- status, version


def test_status_strings():
    names = ["FLASHC_OK", "FLASHC_ERR_INVALID_ARGUMENT", "FLASHC_ERR_NULL_POINTER",
             "FLASHC_ERR_SHAPE", "FLASHC_ERR_DTYPE", "FLASHC_ERR_STRIDE", "FLASHC_ERR_OVERFLOW",
             "FLASHC_ERR_UNSUPPORTED", "FLASHC_ERR_BACKEND_UNAVAILABLE",
             "FLASHC_ERR_OUT_OF_MEMORY", "FLASHC_ERR_CUDA", "FLASHC_ERR_PARAMS_SIZE",
             "FLASHC_ERR_DEVICE_MISMATCH", "FLASHC_ERR_INTERNAL"]
    for i, n in enumerate(names):
        assert _lib.flashc_status_string(i).decode() == n
        assert getattr(_lib, n) == i
    assert _lib.flashc_status_string(99).decode() == "FLASHC_ERR_UNKNOWN"
    assert _lib.flashc_status_string(-1).decode() == "FLASHC_ERR_UNKNOWN"


def test_version():
    assert flashc.__version__ == _lib.flashc_version_string().decode()
    major, minor, patch = (int(x) for x in flashc.__version__.split("."))
    assert _lib.flashc_version_number() == major * 10000 + minor * 100 + patch


def test_dtype_size():
    assert [_lib.flashc_dtype_size(d) for d in range(5)] == [4, 2, 2, 8, 4]  # FLASHC_I32 = 4
    assert _lib.flashc_dtype_size(5) == 0 and _lib.flashc_dtype_size(-1) == 0


def test_flashc_error_is_value_error():
    q, k, v = qkv(Hq=12, Hkv=5)
    e = expect(S.FLASHC_ERR_SHAPE, flashc.attention, q, k, v)
    assert isinstance(e, ValueError)
    assert e.status_name == "FLASHC_ERR_SHAPE" and str(e).startswith("FLASHC_ERR_SHAPE: ")


def test_struct_size_guard(monkeypatch):
    """The import-time guard turns a drifted struct mirror into ImportError."""
    _lib._check_struct_sizes()
    monkeypatch.setattr(_lib, "flashc_attn_params_size", lambda: 4096)
    with pytest.raises(ImportError, match="flashc_attn_params"):
        _lib._check_struct_sizes()


def test_struct_sizes_match_library():
    assert ctypes.sizeof(_lib.flashc_attn_params) == _lib.flashc_attn_params_size()
    assert ctypes.sizeof(_lib.flashc_exec_params) == _lib.flashc_exec_params_size()
    p = _lib.flashc_attn_params_default()
    assert p.struct_size == ctypes.sizeof(_lib.flashc_attn_params)
    assert (p.backend, p.softmax_scale, p.causal, p.deterministic) == (0, 0.0, 0, 1)
    assert (p.window_left, p.window_right, p.num_sink_tokens) == (-1, -1, 0)
    assert not p.sink_logits and not p.stream
    e = _lib.flashc_exec_params_default()
    assert e.struct_size == ctypes.sizeof(_lib.flashc_exec_params) and e.backend == 0


# ----------------------------------------------------------- null pointers


def _fwd_tensors():
    q, k, v = qkv()
    o = np.empty_like(q)
    return [q, k, v, o], [tensor(a) for a in (q, k, v, o)]


@pytest.mark.parametrize("which", ["q", "k", "v", "o"])
def test_null_descriptor_fwd(which):
    keep, ts = _fwd_tensors()
    ts[["q", "k", "v", "o"].index(which)] = None
    assert raw_fwd(*ts) == S.FLASHC_ERR_NULL_POINTER
    assert which in last_error()


@pytest.mark.parametrize("which", ["q", "k", "v", "o"])
def test_null_data_fwd(which):
    keep, ts = _fwd_tensors()
    ts[["q", "k", "v", "o"].index(which)].data = None
    assert raw_fwd(*ts) == S.FLASHC_ERR_NULL_POINTER
    assert which in last_error()


def test_null_params_means_defaults():
    keep, ts = _fwd_tensors()
    assert raw_fwd(*ts, params=None) == S.FLASHC_OK
    o_default = keep[3].copy()
    assert np.array_equal(o_default, flashc.attention(*keep[:3]))


def test_null_data_allowed_when_empty():
    q, k, v = qkv(Sq=0)
    o = np.empty_like(q)
    cs = (32, 32, 8, 1)  # contiguous strides of [1, 0, 4, 8]
    ts = [tensor(q, strides=cs), tensor(k), tensor(v), tensor(o, strides=cs)]
    ts[0].data = None
    ts[3].data = None
    assert raw_fwd(*ts) == S.FLASHC_OK


def test_empty_output_with_zero_strides_ok():
    """NumPy gives empty arrays all-zero strides; an output with no elements
    cannot alias, so zero strides on it are not FLASHC_ERR_STRIDE."""
    q, k, v = qkv(Sq=0)
    o = np.empty_like(q)
    assert o.size == 0
    ts = [tensor(q, strides=(0, 0, 0, 0)), tensor(k), tensor(v), tensor(o, strides=(0, 0, 0, 0))]
    assert raw_fwd(*ts) == S.FLASHC_OK, last_error()


def test_bwd_null_lse():
    q, k, v = qkv()
    o = np.empty_like(q)
    g = [np.empty_like(a) for a in (q, k, v)]
    st = _lib.flashc_attn_bwd(ref(tensor(q)), ref(tensor(q)), ref(tensor(k)), ref(tensor(v)),
                              ref(tensor(o)), None, ref(tensor(g[0])), ref(tensor(g[1])),
                              ref(tensor(g[2])), None, None)
    assert st == S.FLASHC_ERR_NULL_POINTER and "lse" in last_error()


@pytest.mark.parametrize("which", ["dq", "dk", "dv"])
def test_bwd_null_grad(which):
    q, k, v = qkv()
    o, lse = flashc.attention(q, k, v, return_lse=True)
    g = [tensor(np.empty_like(a)) for a in (q, k, v)]
    keep = g[:]
    g[["dq", "dk", "dv"].index(which)] = None
    st = _lib.flashc_attn_bwd(ref(tensor(q)), ref(tensor(q)), ref(tensor(k)), ref(tensor(v)),
                              ref(tensor(o)), ref(tensor(lse)), ref(g[0]), ref(g[1]), ref(g[2]),
                              None, None)
    assert st == S.FLASHC_ERR_NULL_POINTER and which in last_error()
    del keep


def test_bwd_sinks_without_dsinks():
    q, k, v = qkv()
    sinks = np.zeros(4, np.float32)
    o, lse = flashc.attention(q, k, v, return_lse=True, sinks=sinks)
    g = [np.empty_like(a) for a in (q, k, v)]
    p = _lib.attn_params_default()
    p.sink_logits = sinks.ctypes.data
    st = _lib.flashc_attn_bwd(ref(tensor(q)), ref(tensor(q)), ref(tensor(k)), ref(tensor(v)),
                              ref(tensor(o)), ref(tensor(lse)), ref(tensor(g[0])),
                              ref(tensor(g[1])), ref(tensor(g[2])), None, ref(p))
    assert st == S.FLASHC_ERR_NULL_POINTER and "dsinks" in last_error()


@pytest.mark.parametrize("which", ["x", "w", "y"])
def test_wsum_null(which):
    x = np.ones((3, 4), np.float32)
    w = np.ones(4, np.float32)
    y = np.empty(3, np.float32)
    ts = {n: tensor(a) for n, a in (("x", x), ("w", w), ("y", y))}
    ts[which] = None
    st = _lib.flashc_weighted_sum(ref(ts["x"]), ref(ts["w"]), ref(ts["y"]), None)
    assert st == S.FLASHC_ERR_NULL_POINTER and which in last_error()


def test_wsum_bwd_both_outputs_null():
    x = np.ones((3, 4), np.float32)
    w = np.ones(4, np.float32)
    dy = np.ones(3, np.float32)
    st = _lib.flashc_weighted_sum_bwd(ref(tensor(dy)), ref(tensor(x)), ref(tensor(w)), None,
                                      None, None)
    assert st == S.FLASHC_ERR_NULL_POINTER


# ------------------------------------------------------------------ shapes


def test_q_ndim_wrong():
    q, k, v = qkv()
    expect(S.FLASHC_ERR_SHAPE, flashc.attention, q[0], k, v, match="q")


def test_k_ndim_wrong():
    q, k, v = qkv()
    expect(S.FLASHC_ERR_SHAPE, flashc.attention, q, k[..., None], v, match="k")


def test_batch_mismatch():
    q, k, v = qkv(B=2)
    expect(S.FLASHC_ERR_SHAPE, flashc.attention, q, k[:1], v[:1])


def test_head_dim_mismatch():
    q, k, v = qkv()
    expect(S.FLASHC_ERR_SHAPE, flashc.attention, q, k[..., :4], v[..., :4])


def test_k_v_shape_mismatch():
    q, k, v = qkv()
    expect(S.FLASHC_ERR_SHAPE, flashc.attention, q, k, v[:, :3])


def test_out_shape_mismatch():
    q, k, v = qkv()
    expect(S.FLASHC_ERR_SHAPE, flashc.attention, q, k, v,
           out=np.empty((1, 4, 4, 7), np.float32))


def test_hq_not_multiple_of_hkv():
    q, k, v = qkv(Hq=12, Hkv=5)
    expect(S.FLASHC_ERR_SHAPE, flashc.attention, q, k, v,
           match="q.shape[2]=12 is not a multiple of k.shape[2]=5")


def test_batch_zero_is_empty():
    # B = 0 is an empty problem like Sq = 0 or Sk = 0 (flashc.h, "Layout"):
    # empty outputs; the backward's dsinks are 0 (a sum over no rows), written
    # over a poisoned buffer; still validated (heads, shapes).
    q, k, v = qkv(B=0)
    s = np.array([0.5, -1.0, 2.0, 0.0], np.float32)
    o, lse = flashc.attention(q, k, v, return_lse=True, causal=True, sinks=s)
    assert o.shape == q.shape and lse.shape == (0, 4, 4)
    outs = (np.empty_like(q), np.empty_like(k), np.empty_like(v), np.full(4, np.nan, np.float32))
    g = flashc.attention_backward(q, q, k, v, o, lse, sinks=s, out=outs)
    assert g[3] is outs[3] and not g[3].any()
    expect(S.FLASHC_ERR_SHAPE, flashc.attention, *qkv(B=0, Hq=12, Hkv=5))
    o = flashc.attention_with_kvcache(q[:, :1], np.zeros((0, 6, 2, 8), np.float32),
                                      np.zeros((0, 6, 2, 8), np.float32), k[:, :1], v[:, :1],
                                      cache_seqlens=np.zeros(0, np.int32))
    assert o.shape == (0, 1, 4, 8)


def test_heads_zero():
    q, k, v = qkv(Hq=0, Hkv=0)
    expect(S.FLASHC_ERR_SHAPE, flashc.attention, q, k, v)


def test_head_dim_zero():
    q, k, v = qkv(D=0)
    expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention, q, k, v, match="D")


def test_head_dim_257():
    q, k, v = qkv(D=257)
    expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention, q, k, v, match="256")


def test_negative_extent():
    keep, ts = _fwd_tensors()
    ts[1].shape[1] = -5
    assert raw_fwd(*ts) == S.FLASHC_ERR_SHAPE and "negative" in last_error()


def test_ndim_over_max():
    keep, ts = _fwd_tensors()
    ts[0].ndim = 9
    assert raw_fwd(*ts) == S.FLASHC_ERR_SHAPE


def test_lse_wrong_shape():
    q, k, v = qkv()
    expect(S.FLASHC_ERR_SHAPE, flashc.attention, q, k, v, return_lse=True,
           out=(None, np.empty((1, 4, 5), np.float32)), match="lse")


def test_lse_wrong_ndim():
    q, k, v = qkv()
    expect(S.FLASHC_ERR_SHAPE, flashc.attention, q, k, v, return_lse=True,
           out=(None, np.empty((1, 4, 4, 1), np.float32)), match="lse")


def test_lse_wrong_dtype():
    q, k, v = qkv()
    expect(S.FLASHC_ERR_DTYPE, flashc.attention, q, k, v, return_lse=True,
           out=(None, np.empty((1, 4, 4), np.float64)),
           match="lse.dtype=F64, expected F32 for F32 inputs")


def test_lse_f32_for_f64_inputs():
    q, k, v = qkv(dtype=np.float64)
    expect(S.FLASHC_ERR_DTYPE, flashc.attention, q, k, v, return_lse=True,
           out=(None, np.empty((1, 4, 4), np.float32)),
           match="lse.dtype=F32, expected F64 for F64 inputs")


def test_bwd_lse_wrong_shape():
    q, k, v = qkv()
    o, lse = flashc.attention(q, k, v, return_lse=True)
    expect(S.FLASHC_ERR_SHAPE, flashc.attention_backward, q, q, k, v, o, lse[:, :2])


def test_bwd_dout_shape_mismatch():
    q, k, v = qkv()
    o, lse = flashc.attention(q, k, v, return_lse=True)
    expect(S.FLASHC_ERR_SHAPE, flashc.attention_backward, q[:, :3], q, k, v, o, lse)


def test_bwd_grad_dtype_mismatch():
    q, k, v = qkv()
    o, lse = flashc.attention(q, k, v, return_lse=True)
    expect(S.FLASHC_ERR_DTYPE, flashc.attention_backward, q, q, k, v, o, lse,
           out=(np.empty(q.shape, np.float64), None, None),
           match="must have q's dtype F32 (got F32, F64, F32, F32)")


def test_sinks_wrong_length():
    q, k, v = qkv()
    expect(S.FLASHC_ERR_SHAPE, flashc.attention, q, k, v, sinks=np.zeros(3, np.float32),
           match="sinks")


# ------------------------------------------------------------------ dtypes


def test_dtype_mismatch():
    # Messages name dtypes, never their codes (issue 10).
    q, k, v = qkv()
    expect(S.FLASHC_ERR_DTYPE, flashc.attention, q, k.astype(np.float16), v,
           match="q, k, v, o must share one dtype (got F32, F16, F32, F32)")


def test_out_dtype_mismatch():
    q, k, v = qkv()
    expect(S.FLASHC_ERR_DTYPE, flashc.attention, q, k, v, out=np.empty(q.shape, np.float64),
           match="(got F32, F32, F32, F64)")


def test_unknown_dtype_raw():
    keep, ts = _fwd_tensors()
    for t in ts:
        t.dtype = 7
    assert raw_fwd(*ts) == S.FLASHC_ERR_DTYPE


def test_unsupported_numpy_dtype():
    q, k, v = qkv()
    expect(S.FLASHC_ERR_DTYPE, flashc.attention, q.astype(np.int32), k, v, match="int32")


# ---------------------------------------------------------------- params


def test_window_left_below_minus_one():
    q, k, v = qkv()
    expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention, q, k, v, window=(-2, -1),
           match="window_left")


def test_window_right_below_minus_one():
    q, k, v = qkv()
    expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention, q, k, v, window=(-1, -7),
           match="window_right")


@pytest.mark.parametrize("window", [16, (16,), (1, 2, 3), "16", (1.5, 0), ("a", 0), (True, 0)])
def test_window_bad_value_is_flashc_error(window):
    # window=16 (not a pair) and other bad values: FlashcError (a ValueError), not TypeError.
    q, k, v = qkv()
    e = expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention, q, k, v, window=window,
               match="window")
    assert isinstance(e, ValueError)


def test_window_bad_value_backward():
    q, k, v = qkv()
    o, lse = flashc.attention(q, k, v, return_lse=True)
    expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention_backward, q, q, k, v, o, lse,
           window=16, match="window must be a pair")


def test_window_accepts_none_and_numpy_ints():
    q, k, v = qkv()
    a = flashc.attention(q, k, v, window=(np.int64(2), None))
    b = flashc.attention(q, k, v, window=(2, -1))
    assert np.array_equal(a, b)
    assert np.array_equal(flashc.attention(q, k, v, window=None), flashc.attention(q, k, v))


def test_sink_tokens_not_int():
    q, k, v = qkv()
    expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention, q, k, v, sink_tokens=1.5,
           match="sink_tokens")


@pytest.mark.parametrize("kw", [dict(window=(2 ** 64 + 1, 0)), dict(window=(-1, 2 ** 64)),
                                dict(window=(2 ** 63, 0)), dict(window=(-(2 ** 63) - 1, 0)),
                                dict(causal=True, window=(0, 0), sink_tokens=2 ** 64 + 3)])
def test_integers_past_int64_are_errors(kw):
    # ctypes would wrap them modulo 2^64 into a different, valid-looking mask.
    q, k, v = qkv()
    expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention, q, k, v, match="does not fit int64", **kw)


def test_max_seqlen_past_int64_is_an_error():
    q, k, v = qkv(B=1)
    cu = np.array([0, 4], np.int32)
    expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention_varlen, q[0], k[0, :4], v[0, :4], cu, cu,
           max_seqlen_q=2 ** 64 + 2, match="does not fit int64")


def test_outputs_sharing_memory_are_errors():
    # An output aliasing an input (or another output) would be read after
    # it is written: a clear error, never a silently wrong result.
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((1, 40, 2, 8)).astype(np.float32) for _ in range(3))
    for name in ("q", "k", "v"):
        a = dict(q=q.copy(), k=k.copy(), v=v.copy())
        expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention, a["q"], a["k"], a["v"], out=a[name],
               match="o and %s share memory" % name)
    b = q.copy()  # an overlapping shifted view, and a flipped one
    expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention, b[:, :39], k[:, :39], v[:, :39], out=b[:, 1:],
           match="share memory")
    expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention, b, k, v, out=b[:, ::-1], match="share memory")
    o, lse = flashc.attention(q, k, v, causal=True, return_lse=True)
    do = rng.standard_normal(q.shape).astype(np.float32)
    z = np.zeros_like
    d = z(k)
    expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention_backward, do, q, k, v, o, lse, causal=True,
           out=(z(q), d, d), match="dk and dv share memory")
    a = do.copy()
    expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention_backward, a, q, k, v, o, lse, causal=True,
           out=(a, z(k), z(v)), match="dq and dout share memory")
    a = k.copy()
    expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention_backward, do, q, a, v, o, lse, causal=True,
           out=(z(q), a, z(v)), match="dk and k share memory")
    # the KV cache: o must not be the cache
    kc, vc = (rng.standard_normal((1, 64, 2, 8)).astype(np.float32) for _ in range(2))
    lens = np.array([40], np.int32)
    expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention_with_kvcache, q[:, :1], kc, vc,
           cache_seqlens=lens, out=kc[:, :1], match="o and k_cache share memory")


def test_index_tensors_and_appended_caches_sharing_memory_are_errors():
    # The index tensors are read while the outputs are written, and an
    # append writes the caches: an index living inside a cache the call
    # writes could be rewritten mid-call (a length turned to -1 wrote in
    # front of k_cache, found by a helper's sweep), so it is refused.
    rng = np.random.default_rng(5)
    H, Sc, D = 2, 6, 8
    q = rng.standard_normal((1, 1, H, D)).astype(np.float32)
    kn, vn = (rng.standard_normal((1, 2, H, D)).astype(np.float32) for _ in range(2))
    kc, vc = (rng.standard_normal((1, Sc, H, D)).astype(np.float32) for _ in range(2))
    lens_in_kc = kc[0, 0, 0, :1].view(np.int32)
    lens_in_kc[0] = 0
    expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention_with_kvcache, q, kc, vc, kn, vn,
           cache_seqlens=lens_in_kc, match="k_cache and cache_seqlens share memory")
    expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention_with_kvcache, q, kc, kc, kn, vn,
           cache_seqlens=np.array([0], np.int32), match="k_cache and v_cache share memory")
    # without an append the caches are inputs: an index inside one is only read
    lens_in_kc[0] = 3
    o = flashc.attention_with_kvcache(q, kc, vc, cache_seqlens=lens_in_kc)
    ref = flashc.attention(q, kc[:, :3], vc[:, :3])
    assert np.allclose(o, ref, rtol=1e-5, atol=1e-6)
    # a paged cache's block table inside the v pages that an append writes
    pages = rng.standard_normal((4, 16, H, D)).astype(np.float32)
    vpages = pages.copy()
    bt = vpages[3, 0, 0, :2].view(np.int32)
    bt[:] = [0, 1]
    expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention_with_kvcache, q, pages, vpages, kn, vn,
           cache_seqlens=np.array([5], np.int32), block_table=bt.reshape(1, 2),
           match="v_cache and block_table share memory")
    # varlen: o over cu_seqlens_q
    qv, kv, vv = (rng.standard_normal((10, H, D)).astype(np.float32) for _ in range(3))
    out = np.zeros_like(qv)
    cu = out.reshape(-1)[:2].view(np.int32)
    cu[:] = [0, 10]
    expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention_varlen, qv, kv, vv, cu, np.array([0, 10], np.int32),
           out=out, match="o and cu_seqlens_q share memory")


def test_legacy_sink_pointers_sharing_memory_are_errors():
    # The 0.1 ABI's bare sink_logits pointer and dsinks argument are [Hq]
    # contiguous vectors, checked like params.sinks / params.dsinks.
    from flashc._core import _view_of
    T = lambda a: ctypes.byref(_view_of(a, "x", writable=True).tensor())  # noqa: E731
    rng = np.random.default_rng(6)
    q, k, v = (rng.standard_normal((1, 64, 4, 8)).astype(np.float32) for _ in range(3))
    o, lse = np.zeros_like(q), np.zeros((1, 4, 64), np.float32)
    o.reshape(-1)[:4] = s = np.float32([1, 2, 3, 4])
    p = _lib.attn_params_default()
    p.sink_logits = o.ctypes.data  # the sink logits inside the output o
    assert _lib.flashc_attn_fwd(T(q), T(k), T(v), T(o), T(lse), ctypes.byref(p)) == S.FLASHC_ERR_INVALID_ARGUMENT
    assert "o and sink_logits share memory" in _lib.flashc_last_error().decode()
    o, lse = flashc.attention(q, k, v, sinks=s, return_lse=True)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    p = _lib.attn_params_default()
    p.sink_logits = s.ctypes.data
    st = _lib.flashc_attn_bwd(T(q), T(q), T(k), T(v), T(o), T(lse), T(dq), T(dk), T(dv),
                              dq.ctypes.data_as(ctypes.c_void_p), ctypes.byref(p))
    assert st == S.FLASHC_ERR_INVALID_ARGUMENT
    assert "dq and dsinks share memory" in _lib.flashc_last_error().decode()
    ds = np.zeros(4, np.float32)
    assert _lib.flashc_attn_bwd(T(q), T(q), T(k), T(v), T(o), T(lse), T(dq), T(dk), T(dv),
                                ds.ctypes.data_as(ctypes.c_void_p), ctypes.byref(p)) == 0
    assert np.allclose(ds, flashc.attention_backward(q, q, k, v, o, lse, sinks=s)[3], rtol=1e-5, atol=1e-6)


def test_packed_buffer_slices_are_not_overlap():
    # q, k, v, o as slices of one [B, S, 4, H, D] buffer share no element.
    rng = np.random.default_rng(4)
    buf = rng.standard_normal((2, 30, 4, 3, 8)).astype(np.float32)
    q, k, v, o = (buf[:, :, i] for i in range(4))
    ref = flashc.attention(q.copy(), k.copy(), v.copy(), causal=True)
    res = flashc.attention(q, k, v, causal=True, out=o)
    assert np.shares_memory(res, buf) and np.array_equal(res, ref)
    half = rng.standard_normal((2, 30, 6, 8)).astype(np.float32)  # q heads 0..2, o heads 3..5
    ref = flashc.attention(half[:, :, :3].copy(), k.copy(), v.copy())
    assert np.array_equal(flashc.attention(half[:, :, :3], k, v, out=half[:, :, 3:]), ref)


def test_causal_with_window_right():
    q, k, v = qkv()
    expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention, q, k, v, causal=True, window=(4, 2))


def test_negative_sink_tokens():
    q, k, v = qkv()
    expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention, q, k, v, sink_tokens=-1,
           match="num_sink_tokens")


def test_softmax_scale_not_finite():
    q, k, v = qkv()
    expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention, q, k, v, softmax_scale=float("nan"))


def test_causal_not_bool_raw():
    keep, ts = _fwd_tensors()
    p = _lib.attn_params_default()
    p.causal = 2
    assert raw_fwd(*ts, params=p) == S.FLASHC_ERR_INVALID_ARGUMENT


def test_unknown_backend_raw():
    keep, ts = _fwd_tensors()
    p = _lib.attn_params_default()
    p.backend = 9
    assert raw_fwd(*ts, params=p) == S.FLASHC_ERR_INVALID_ARGUMENT


def test_unknown_backend_name():
    q, k, v = qkv()
    expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention, q, k, v, backend="tpu")


@pytest.mark.parametrize("delta", [-8, -1, 1, 8])
def test_attn_params_struct_size_wrong(delta):
    keep, ts = _fwd_tensors()
    p = _lib.attn_params_default()
    p.struct_size = ctypes.sizeof(p) + delta
    assert raw_fwd(*ts, params=p) == S.FLASHC_ERR_PARAMS_SIZE
    assert "struct_size" in last_error()


def test_exec_params_struct_size_wrong():
    x = np.ones((3, 4), np.float32)
    w = np.ones(4, np.float32)
    y = np.empty(3, np.float32)
    p = _lib.exec_params_default()
    p.struct_size = 3
    st = _lib.flashc_weighted_sum(ref(tensor(x)), ref(tensor(w)), ref(tensor(y)), ref(p))
    assert st == S.FLASHC_ERR_PARAMS_SIZE


# ----------------------------------------------------------------- strides


def test_output_zero_stride():
    q, k, v = qkv()
    out = writable_zero_stride(q.shape, np.float32, axis=1)
    expect(S.FLASHC_ERR_STRIDE, flashc.attention, q, k, v, out=out)


def test_lse_zero_stride():
    q, k, v = qkv()
    lse = writable_zero_stride((1, 4, 4), np.float32, axis=2)
    expect(S.FLASHC_ERR_STRIDE, flashc.attention, q, k, v, return_lse=True, out=(None, lse))


def test_grad_zero_stride():
    q, k, v = qkv()
    o, lse = flashc.attention(q, k, v, return_lse=True)
    dk = writable_zero_stride(k.shape, np.float32, axis=2)
    expect(S.FLASHC_ERR_STRIDE, flashc.attention_backward, q, q, k, v, o, lse,
           out=(None, dk, None))


def test_wsum_output_zero_stride():
    x = np.ones((3, 4), np.float32)
    w = np.ones(4, np.float32)
    expect(S.FLASHC_ERR_STRIDE, flashc.weighted_sum, x, w,
           out=writable_zero_stride((3,), np.float32, axis=0))


def test_output_zero_stride_on_extent_one_ok():
    q, k, v = qkv()
    out = writable_zero_stride(q.shape, np.float32, axis=0)  # B = 1: no aliasing
    flashc.attention(q, k, v, out=out)


def test_output_misaligned_byte_stride():
    # Byte strides that are not a multiple of the itemsize cannot be written
    # as element strides: an output like that is refused (inputs are copied).
    q, k, v = qkv()
    buf = np.zeros(4 * q.nbytes, np.uint8)
    st = list(q.strides)
    st[1] += 2
    bad = np.ndarray(q.shape, np.float32, buffer=buf, offset=0, strides=st)
    expect(S.FLASHC_ERR_STRIDE, flashc.attention, q, k, v, out=bad)
    # The same strides on an input work (copied).
    bad[...] = q
    np.testing.assert_array_equal(flashc.attention(bad, k, v), flashc.attention(q, k, v))


def test_read_only_output():
    q, k, v = qkv()
    out = np.empty_like(q)
    out.flags.writeable = False
    expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention, q, k, v, out=out)


# ---------------------------------------------------------------- overflow


def test_overflow_element_count():
    keep, ts = _fwd_tensors()
    ts[0].shape[1] = 2 ** 40
    ts[0].shape[3] = 2 ** 30
    assert raw_fwd(*ts) == S.FLASHC_ERR_OVERFLOW


def test_overflow_offset():
    keep, ts = _fwd_tensors()
    ts[1].strides[1] = 2 ** 62
    assert raw_fwd(*ts) == S.FLASHC_ERR_OVERFLOW


def test_overflow_byte_offset():
    keep, ts = _fwd_tensors()
    ts[2].strides[1] = 2 ** 61  # element offset fits; bytes (x4) do not
    assert raw_fwd(*ts) == S.FLASHC_ERR_OVERFLOW


def test_overflow_wsum():
    x = np.ones((3, 4), np.float32)
    w = np.ones(4, np.float32)
    y = np.empty(3, np.float32)
    tx = tensor(x)
    tx.shape[0] = 2 ** 62
    tx.strides[0] = 4
    ty = tensor(y)
    ty.shape[0] = 2 ** 62
    st = _lib.flashc_weighted_sum(ref(tx), ref(tensor(w)), ref(ty), None)
    assert st == S.FLASHC_ERR_OVERFLOW


# ----------------------------------------------------------- weighted sum


def test_wsum_x_0d():
    expect(S.FLASHC_ERR_SHAPE, flashc.weighted_sum, np.float32(1.0), np.ones(1, np.float32))


def test_wsum_w_length_mismatch():
    expect(S.FLASHC_ERR_SHAPE, flashc.weighted_sum, np.ones((3, 4), np.float32),
           np.ones(5, np.float32))


def test_wsum_w_ndim():
    expect(S.FLASHC_ERR_SHAPE, flashc.weighted_sum, np.ones((3, 4), np.float32),
           np.ones((1, 4), np.float32))


def test_wsum_dtype_mismatch():
    expect(S.FLASHC_ERR_DTYPE, flashc.weighted_sum, np.ones((3, 4), np.float32),
           np.ones(4, np.float64), match="w.dtype=F64 must equal x.dtype=F32")


def test_wsum_out_dtype_mismatch():
    expect(S.FLASHC_ERR_DTYPE, flashc.weighted_sum, np.ones((3, 4), np.float32),
           np.ones(4, np.float32), out=np.empty(3, np.float16),
           match="y.dtype=F16 must equal x.dtype=F32")


def test_wsum_y_shape():
    expect(S.FLASHC_ERR_SHAPE, flashc.weighted_sum, np.ones((3, 4), np.float32),
           np.ones(4, np.float32), out=np.empty(4, np.float32))


def test_wsum_too_many_dims():
    x = np.ones((1,) * 9 + (4,), np.float32)
    expect(S.FLASHC_ERR_SHAPE, flashc.weighted_sum, x, np.ones(4, np.float32))


def test_wsum_bwd_dy_shape():
    expect(S.FLASHC_ERR_SHAPE, flashc.weighted_sum_backward, np.ones(4, np.float32),
           np.ones((3, 4), np.float32), np.ones(4, np.float32))


def test_wsum_bwd_dw_shape():
    expect(S.FLASHC_ERR_SHAPE, flashc.weighted_sum_backward, np.ones(3, np.float32),
           np.ones((3, 4), np.float32), np.ones(4, np.float32),
           out=(None, np.empty(5, np.float32)))


def test_wsum_bwd_dtype():
    expect(S.FLASHC_ERR_DTYPE, flashc.weighted_sum_backward, np.ones(3, np.float16),
           np.ones((3, 4), np.float32), np.ones(4, np.float32))


# ---------------------------------------------------------------- backends


def test_backend_cuda_unavailable_raw():
    if flashc.backend_available("cuda")[0]:
        pytest.skip("CUDA is available here")
    keep, ts = _fwd_tensors()
    p = _lib.attn_params_default()
    p.backend = _lib.FLASHC_BACKEND_CUDA
    assert raw_fwd(*ts, params=p) == S.FLASHC_ERR_BACKEND_UNAVAILABLE
    assert last_error()


def test_backend_cuda_unavailable():
    if flashc.backend_available("cuda")[0]:
        pytest.skip("CUDA is available here")
    q, k, v = qkv()
    e = expect(S.FLASHC_ERR_BACKEND_UNAVAILABLE, flashc.attention, q, k, v, backend="cuda")
    assert "cuda" in e.message.lower()
    assert _lib.flashc_backend_available(_lib.FLASHC_BACKEND_CUDA) == 0
    assert last_error()  # says why


def test_backend_cuda_unavailable_wsum_raw():
    if flashc.backend_available("cuda")[0]:
        pytest.skip("CUDA is available here")
    x = np.ones((3, 4), np.float32)
    w = np.ones(4, np.float32)
    y = np.empty(3, np.float32)
    p = _lib.exec_params_default()
    p.backend = _lib.FLASHC_BACKEND_CUDA
    st = _lib.flashc_weighted_sum(ref(tensor(x)), ref(tensor(w)), ref(tensor(y)), ref(p))
    assert st == S.FLASHC_ERR_BACKEND_UNAVAILABLE


def test_cuda_helpers_unavailable():
    if flashc.backend_available("cuda")[0]:
        pytest.skip("CUDA is available here")
    n = ctypes.c_int(-1)
    assert _lib.flashc_cuda_device_count(ctypes.byref(n)) == S.FLASHC_ERR_BACKEND_UNAVAILABLE
    p = ctypes.c_void_p()
    assert _lib.flashc_cuda_malloc(ctypes.byref(p), 16) == S.FLASHC_ERR_BACKEND_UNAVAILABLE
    assert flashc.cuda.device_count() == 0 and not flashc.cuda.is_available()
    with pytest.raises(flashc.FlashcError) as ei:
        flashc.cuda.empty((4,), np.float32)
    assert ei.value.status == S.FLASHC_ERR_BACKEND_UNAVAILABLE


def test_pointer_is_device_host():
    a = np.ones(4, np.float32)
    d = ctypes.c_int(-1)
    assert _lib.flashc_pointer_is_device(a.ctypes.data, ctypes.byref(d)) in (
        S.FLASHC_OK, S.FLASHC_ERR_BACKEND_UNAVAILABLE)
    if not flashc.backend_available("cuda")[0]:
        assert d.value in (0, -1)


def test_backend_available_unknown():
    assert _lib.flashc_backend_available(42) == 0
    assert _lib.flashc_backend_available(_lib.FLASHC_BACKEND_CPU) == 1
    assert _lib.flashc_backend_available(_lib.FLASHC_BACKEND_AUTO) == 1


# ------------------------------------------------------------ thread-local


def test_last_error_is_thread_local():
    """Two threads fail with different messages at the same time (the GIL is
    released inside each call); each must read back its own message."""
    n_iter = 500
    failures = []
    barrier = threading.Barrier(2)

    def work(hq, hkv):
        q, k, v = qkv(Hq=hq, Hkv=hkv)
        o = np.empty_like(q)
        ts = [tensor(a) for a in (q, k, v, o)]
        want = "q.shape[2]=%d is not a multiple of k.shape[2]=%d" % (hq, hkv)
        barrier.wait()
        for _ in range(n_iter):
            st = raw_fwd(*ts)
            msg = _lib.flashc_last_error().decode()
            if st != S.FLASHC_ERR_SHAPE or want not in msg:
                failures.append((hq, hkv, st, msg))
                return

    threads = [threading.Thread(target=work, args=a) for a in ((12, 5), (9, 4))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[:3]


def test_last_error_not_clobbered_by_other_thread_success():
    q, k, v = qkv(Hq=12, Hkv=5)
    o = np.empty_like(q)
    ts = [tensor(a) for a in (q, k, v, o)]
    assert raw_fwd(*ts) == S.FLASHC_ERR_SHAPE
    good = qkv()
    t = threading.Thread(target=lambda: flashc.attention(*good))
    t.start()
    t.join()
    assert "is not a multiple of" in last_error()


# ------------------------------------------- score modifiers, sinks (0.2)
# Values are validated in C; the FlashcError carries the library's message.


def slopes_for(q, shape=None, dtype=None):
    Hq = q.shape[2]
    return np.full(shape or (Hq,), 0.5, dtype or np.float32)


@pytest.mark.parametrize("softcap", [-1.0, -1e-30, float("nan"), float("inf"), -float("inf")])
def test_softcap_invalid(softcap):
    q, k, v = qkv()
    expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention, q, k, v, softcap=softcap,
           match="params.softcap")
    o, lse = flashc.attention(q, k, v, return_lse=True)
    expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention_backward, q, q, k, v, o, lse,
           softcap=softcap, match="params.softcap")


def test_softcap_not_a_number_type():
    q, k, v = qkv()
    with pytest.raises((TypeError, ValueError)):
        flashc.attention(q, k, v, softcap="big")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("batched", [False, True], ids=["Hq", "B_Hq"])
def test_alibi_slopes_not_finite_cpu(bad, batched):
    q, k, v = qkv(B=2)
    s = slopes_for(q, (2, q.shape[2]) if batched else None)
    s[(1, 2) if batched else 2] = bad
    e = expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention, q, k, v, alibi_slopes=s,
               backend="cpu", match="alibi_slopes[")
    assert "is not finite" in e.message
    assert ("[1, 2]" if batched else "[0, 2]") in e.message
    o, lse = flashc.attention(q, k, v, return_lse=True)
    expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention_backward, q, q, k, v, o, lse,
           alibi_slopes=s, match="is not finite")


def test_alibi_slopes_nan_outside_the_view_is_fine():
    # Only the elements the strides reach are read: NaN between them is not an error.
    q, k, v = qkv()
    buf = np.full(2 * q.shape[2], np.nan, np.float32)
    buf[::2] = 0.25
    o = flashc.attention(q, k, v, alibi_slopes=buf[::2])
    np.testing.assert_array_equal(o, flashc.attention(q, k, v, alibi_slopes=buf[::2].copy()))


@pytest.mark.parametrize("shape,match", [
    ((5,), "alibi_slopes.shape[0]=5 must equal Hq=4"),             # [Hq + 1]
    ((3,), "alibi_slopes.shape[0]=3 must equal Hq=4"),
    ((3, 4), "alibi_slopes.shape[0]=3 must equal B=2"),            # [B + 1, Hq]
    ((2, 5), "alibi_slopes.shape[1]=5 must equal Hq=4"),
    ((2, 4, 1), "alibi_slopes.ndim=3"),                            # 3-D
    ((), "alibi_slopes.ndim=0"),
])
def test_alibi_slopes_wrong_shape(shape, match):
    q, k, v = qkv(B=2)
    expect(S.FLASHC_ERR_SHAPE, flashc.attention, q, k, v, alibi_slopes=np.zeros(shape, np.float32),
           match=match)
    o, lse = flashc.attention(q, k, v, return_lse=True)
    expect(S.FLASHC_ERR_SHAPE, flashc.attention_backward, q, q, k, v, o, lse,
           alibi_slopes=np.zeros(shape, np.float32), match=match)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.bool_, np.complex64])
def test_alibi_slopes_non_float_dtype(dtype):
    # Host float arrays are converted; anything else is refused in Python.
    q, k, v = qkv()
    expect(S.FLASHC_ERR_DTYPE, flashc.attention, q, k, v,
           alibi_slopes=np.ones(q.shape[2], dtype), match="alibi_slopes has dtype")


@pytest.mark.parametrize("qdtype,sdtype,match", [
    (np.float32, 1, "alibi_slopes.dtype=F16, expected F32 for F32 inputs"),
    (np.float32, 3, "alibi_slopes.dtype=F64, expected F32 for F32 inputs"),
    (np.float64, 0, "alibi_slopes.dtype=F32, expected F64 for F64 inputs"),
    (np.float16, 1, "alibi_slopes.dtype=F16, expected F32 for F16 inputs"),
    (np.float32, 9, "alibi_slopes.dtype=9"),
])
def test_alibi_slopes_wrong_dtype_raw(qdtype, sdtype, match):
    """The library checks the dtype of a slopes tensor (the Python layer
    converts host arrays, so this goes through the raw ABI)."""
    q, k, v = qkv(dtype=qdtype)
    o = np.empty_like(q)
    s = np.zeros(8, np.float64)  # room for any dtype's 4 elements
    ts = tensor(s, dtype=sdtype, shape=(q.shape[2],), strides=(1,))
    p = _lib.attn_params_default()
    p.alibi_slopes = ctypes.pointer(ts)
    assert raw_fwd(*(tensor(a) for a in (q, k, v, o)), params=p) == S.FLASHC_ERR_DTYPE
    assert match in last_error(), last_error()


def test_alibi_slopes_null_data_raw():
    keep, ts = _fwd_tensors()
    s = tensor(np.zeros(4, np.float32))
    s.data = None
    p = _lib.attn_params_default()
    p.alibi_slopes = ctypes.pointer(s)
    assert raw_fwd(*ts, params=p) == S.FLASHC_ERR_NULL_POINTER
    assert "alibi_slopes" in last_error()


@pytest.mark.parametrize("shape,status,match", [
    ((3,), "SHAPE", "sinks.shape[0]=3 must equal Hq=4"),
    ((4, 1), "SHAPE", "sinks.ndim=2"),
    ((1, 4), "SHAPE", "sinks.ndim=2"),
])
def test_sinks_wrong_shape(shape, status, match):
    q, k, v = qkv()
    expect(getattr(S, "FLASHC_ERR_" + status), flashc.attention, q, k, v,
           sinks=np.zeros(shape, np.float32), match=match)


def test_sinks_non_float_dtype():
    q, k, v = qkv()
    expect(S.FLASHC_ERR_DTYPE, flashc.attention, q, k, v, sinks=np.zeros(4, np.int32),
           match="sinks has dtype int32")


def _sink_tensor_call(sinks_t=None, dsinks_t=None, legacy_sinks=None, legacy_dsinks=None,
                      bwd=False):
    q, k, v = qkv()
    s = np.zeros(4, np.float32)
    o, lse = flashc.attention(q, k, v, return_lse=True, sinks=s)
    g = [np.empty_like(a) for a in (q, k, v)]
    p = _lib.attn_params_default()
    if sinks_t is not None:
        p.sinks = ctypes.pointer(sinks_t)
    if dsinks_t is not None:
        p.dsinks = ctypes.pointer(dsinks_t)
    if legacy_sinks is not None:
        p.sink_logits = legacy_sinks.ctypes.data
    if not bwd:
        return raw_fwd(tensor(q), tensor(k), tensor(v), tensor(np.empty_like(q)), params=p)
    return _lib.flashc_attn_bwd(ref(tensor(q)), ref(tensor(q)), ref(tensor(k)), ref(tensor(v)),
                                ref(tensor(o)), ref(tensor(lse)), ref(tensor(g[0])),
                                ref(tensor(g[1])), ref(tensor(g[2])),
                                legacy_dsinks.ctypes.data if legacy_dsinks is not None else None,
                                ref(p))


def test_sinks_given_twice_raw():
    s = np.zeros(4, np.float32)
    st = _sink_tensor_call(sinks_t=tensor(s), legacy_sinks=s)
    assert st == S.FLASHC_ERR_INVALID_ARGUMENT and "give the sink logits once" in last_error()


def test_dsinks_given_twice_raw():
    s, ds = np.zeros(4, np.float32), np.zeros(4, np.float32)
    st = _sink_tensor_call(sinks_t=tensor(s), dsinks_t=tensor(ds), legacy_dsinks=ds, bwd=True)
    assert st == S.FLASHC_ERR_INVALID_ARGUMENT and "give the sink gradient once" in last_error()


@pytest.mark.parametrize("which", ["sinks", "dsinks"])
@pytest.mark.parametrize("bad,status,match", [
    (dict(dtype=1), "DTYPE", ".dtype=F16, expected F32"),
    (dict(dtype=3), "DTYPE", ".dtype=F64, expected F32"),
    (dict(shape=(5,), strides=(1,)), "SHAPE", ".shape[0]=5 must equal Hq=4"),
    (dict(shape=(1, 4), strides=(4, 1)), "SHAPE", ".ndim=2, expected 1"),
    (dict(data=0), "NULL_POINTER", ".data is NULL"),
])
def test_sink_tensors_invalid_raw(which, bad, status, match):
    s, ds = np.zeros(8, np.float64), np.zeros(8, np.float64)  # room for any dtype
    good = lambda a: tensor(a[:4].view(np.float32)[:4])  # noqa: E731  [4] float32
    st_, dst_ = good(s), good(ds)
    t = st_ if which == "sinks" else dst_
    if "data" in bad:
        t.data = None
    if "dtype" in bad:
        t.dtype = bad["dtype"]
    if "shape" in bad:
        t.ndim = len(bad["shape"])
        for i, (n, st) in enumerate(zip(bad["shape"], bad["strides"])):
            t.shape[i] = n
            t.strides[i] = st
    rc = _sink_tensor_call(sinks_t=st_, dsinks_t=dst_, bwd=True)
    assert rc == getattr(S, "FLASHC_ERR_" + status), (last_error(), rc)
    assert which + match in last_error(), last_error()
    if which == "sinks":  # the forward checks the sinks the same way
        assert _sink_tensor_call(sinks_t=st_) == getattr(S, "FLASHC_ERR_" + status)


def test_dsinks_zero_stride_raw():
    s, ds = np.zeros(4, np.float32), np.zeros(4, np.float32)
    t = tensor(ds)
    t.strides[0] = 0
    assert _sink_tensor_call(sinks_t=tensor(s), dsinks_t=t, bwd=True) == S.FLASHC_ERR_STRIDE
    assert "dsinks" in last_error()


def test_dsinks_out_wrong_shape_and_dtype():
    q, k, v = qkv()
    s = np.zeros(4, np.float32)
    o, lse = flashc.attention(q, k, v, return_lse=True, sinks=s)
    expect(S.FLASHC_ERR_SHAPE, flashc.attention_backward, q, q, k, v, o, lse, sinks=s,
           out=(None, None, None, np.empty(5, np.float32)), match="dsinks.shape[0]=5")
    expect(S.FLASHC_ERR_DTYPE, flashc.attention_backward, q, q, k, v, o, lse, sinks=s,
           out=(None, None, None, np.empty(4, np.float64)), match="dsinks.dtype=F64")
    # (strided sinks and dsinks are valid: tests/test_score_mods.py)


def test_legacy_sink_pointer_still_works_raw():
    """A caller of the 0.1 fields (sink_logits pointer, dsinks argument) gets
    the results of the 0.2 tensors."""
    q, k, v = qkv(dtype=np.float64)
    rng = np.random.default_rng(5)
    s = rng.standard_normal(4)
    do = rng.standard_normal(q.shape)
    o, lse = flashc.attention(q, k, v, return_lse=True, sinks=s, causal=True)
    g = flashc.attention_backward(do, q, k, v, o, lse, sinks=s, causal=True)
    o1 = np.empty_like(q)
    lse1 = np.empty_like(lse)
    p = _lib.attn_params_default()
    p.causal = 1
    p.sink_logits = s.ctypes.data
    assert raw_fwd(tensor(q), tensor(k), tensor(v), tensor(o1), tensor(lse1), params=p) == 0
    assert o1.tobytes() == o.tobytes() and lse1.tobytes() == lse.tobytes()
    g1 = [np.empty_like(a) for a in (q, k, v)]
    ds1 = np.empty(4)
    st = _lib.flashc_attn_bwd(ref(tensor(do)), ref(tensor(q)), ref(tensor(k)), ref(tensor(v)),
                              ref(tensor(o)), ref(tensor(lse)), *(ref(tensor(a)) for a in g1),
                              ds1.ctypes.data, ref(p))
    assert st == 0, last_error()
    for a, b in zip(g1 + [ds1], g):
        assert a.tobytes() == b.tobytes()


def test_softmax_scale_zero_means_default():
    # 0 means 1/sqrt(D), in C and in Python (it was an error in Python in 0.1).
    q, k, v = qkv()
    np.testing.assert_array_equal(flashc.attention(q, k, v, softmax_scale=0),
                                  flashc.attention(q, k, v))


def test_params_v1_size_ignores_new_fields_raw():
    """struct_size = FLASHC_ATTN_PARAMS_SIZE_V1 (offsetof softcap): the 0.2
    fields are not read, whatever they hold."""
    keep, ts = _fwd_tensors()
    base = np.empty_like(keep[3])
    p = _lib.attn_params_default()
    p.causal = 1
    assert raw_fwd(*ts[:3], tensor(base), params=p) == 0
    p.struct_size = _lib.flashc_attn_params.softcap.offset
    p.softcap = -5.0                       # invalid if it were read
    junk = tensor(np.zeros(3, np.float16))
    p.alibi_slopes = ctypes.pointer(junk)  # wrong shape and dtype if it were read
    p.sinks = ctypes.pointer(junk)
    assert raw_fwd(*ts, params=p) == 0, last_error()
    assert keep[3].tobytes() == base.tobytes()


def test_params_new_fields_default():
    p = _lib.flashc_attn_params_default()
    assert p.softcap == 0.0
    assert not p.alibi_slopes and not p.sinks and not p.dsinks
    assert _lib.flashc_attn_params.softcap.offset == 64  # FLASHC_ATTN_PARAMS_SIZE_V1 on LP64


# ------------------------------------------- softmax_scale bound (issue 11)
# flashc.h: |softmax_scale| <= FLASHC_SOFTMAX_SCALE_MAX = 2^16, else
# FLASHC_ERR_INVALID_ARGUMENT (at 1e30 the backward's recomputed P was NaN,
# at 1e39 the fp32 scale itself overflowed). At the bound the results are
# right, forward and backward, in every dtype.
SCALE_MAX = 65536.0
SCALE_DTYPES = ["float32", "float16", "bfloat16", "float64"]


@pytest.mark.parametrize("dtype", SCALE_DTYPES)
@pytest.mark.parametrize("scale", [2 * SCALE_MAX, -2 * SCALE_MAX, 1e30, 1e39, 1e300, 1.7e308])
def test_softmax_scale_above_bound(dtype, scale):
    from reference import np_dtype
    q, k, v = (a.astype(np_dtype(dtype)) for a in qkv(dtype=np.float64))
    expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention, q, k, v, softmax_scale=scale,
           match="FLASHC_SOFTMAX_SCALE_MAX")
    o, lse = flashc.attention(q, k, v, return_lse=True)
    expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention_backward, q, q, k, v, o, lse,
           softmax_scale=scale, match="FLASHC_SOFTMAX_SCALE_MAX")


@pytest.mark.parametrize("dtype", SCALE_DTYPES)
@pytest.mark.parametrize("sign", [1, -1])
def test_softmax_scale_at_bound(dtype, sign, rng):
    """Inputs with q·k ~ 1e-4, so that the logits at scale 2^16 are moderate."""
    from reference import (attention_backward_reference, attention_reference, np_dtype)
    B, Sq, Sk, Hq, Hkv, D = 1, 5, 7, 2, 1, 8
    q = (rng.standard_normal((B, Sq, Hq, D)) * 4e-3).astype(np_dtype(dtype))
    k = (rng.standard_normal((B, Sk, Hkv, D)) * 4e-3).astype(np_dtype(dtype))
    v = rng.standard_normal((B, Sk, Hkv, D)).astype(np_dtype(dtype))
    do = rng.standard_normal((B, Sq, Hq, D)).astype(np_dtype(dtype))
    scale = sign * SCALE_MAX
    o, lse = flashc.attention(q, k, v, softmax_scale=scale, causal=True, return_lse=True)
    f = [np.asarray(a, np.float64) for a in (q, k, v, do)]
    ro, rl = attention_reference(*f[:3], softmax_scale=scale, causal=True)[:2]
    tol = {"float64": 1e-9, "float32": 1e-4, "float16": 1e-2, "bfloat16": 4e-2}[dtype]
    assert np.all(np.isfinite(np.asarray(o, np.float64))) and np.all(np.isfinite(lse))
    assert np.abs(np.asarray(o, np.float64) - ro).max() <= tol * 2
    assert np.abs(np.asarray(lse, np.float64) - rl).max() <= tol * (1 + np.abs(rl).max())
    g = flashc.attention_backward(do, q, k, v, o, lse, softmax_scale=scale, causal=True)
    rg = attention_backward_reference(f[3], *f[:3], softmax_scale=scale, causal=True)
    for a, r in zip(g[:3], rg[:3]):
        a = np.asarray(a, np.float64)
        assert np.all(np.isfinite(a))
        assert np.abs(a - r).max() <= 4 * tol * (1 + np.abs(r).max())


# ------------------------------------------------- environment knobs (issue 10)
# A FLASHC_* knob with a closed set of values set to anything else is an error
# of every compute call, naming the variable and the accepted values
# (flashc.h, "Environment"), never a silent "auto".

BAD_KNOBS = [
    ("FLASHC_CPU_ISA", "avx3", "scalar, avx2, avx512"),
    ("FLASHC_CPU_ISA", "AVX2", "scalar, avx2, avx512"),
    ("FLASHC_CPU_BF16", "yes", "0, 1"),
    ("FLASHC_CPU_DECODE_ROWS", "many", "a non-negative integer"),
    ("FLASHC_CPU_DECODE_ROWS", "-3", "a non-negative integer"),
    ("FLASHC_CPU_BWD", "twopas", "twopass"),
    ("FLASHC_CUDA_KERNEL", "wgmma", "generic, mma"),
    ("FLASHC_CUDA_SMEM_LIMIT", "99k", "a non-negative integer (bytes)"),
    ("FLASHC_CUDA_SMEM_LIMIT", "-1", "a non-negative integer (bytes)"),
    ("FLASHC_WSUM_VARIANT", "2", "0, 1"),
    ("FLASHC_CUDA_POISON_SCRATCH", "on", "0, 1"),
]


@pytest.mark.parametrize("var,value,accepted", BAD_KNOBS)
def test_unknown_knob_value_attention(monkeypatch, var, value, accepted):
    q, k, v = qkv()
    monkeypatch.setenv(var, value)
    e = expect(S.FLASHC_ERR_INVALID_ARGUMENT, flashc.attention, q, k, v)
    assert "%s='%s'" % (var, value) in e.message and accepted in e.message, e.message


@pytest.mark.parametrize("var,value,accepted", BAD_KNOBS[:1] + BAD_KNOBS[-1:])
def test_unknown_knob_value_other_ops(monkeypatch, var, value, accepted):
    q, k, v = qkv()
    o, lse = flashc.attention(q, k, v, return_lse=True)
    x, w = np.ones((3, 4), np.float32), np.ones(4, np.float32)
    monkeypatch.setenv(var, value)
    for fn, args in ((flashc.attention_backward, (q, q, k, v, o, lse)),
                     (flashc.weighted_sum, (x, w)),
                     (flashc.weighted_sum_backward, (np.ones(3, np.float32), x, w))):
        e = expect(S.FLASHC_ERR_INVALID_ARGUMENT, fn, *args, match=var)
        assert accepted in e.message


@pytest.mark.parametrize("var,value", [("FLASHC_CPU_ISA", "scalar"), ("FLASHC_CPU_ISA", ""),
                                       ("FLASHC_CPU_BF16", "0"), ("FLASHC_CPU_DECODE_ROWS", "999"),
                                       ("FLASHC_CPU_BWD", "twopass"), ("FLASHC_CUDA_KERNEL", "mma"),
                                       ("FLASHC_CUDA_SMEM_LIMIT", "49152"), ("FLASHC_WSUM_VARIANT", "1")])
def test_known_knob_values_accepted(monkeypatch, var, value):
    q, k, v = qkv()
    monkeypatch.setenv(var, value)
    flashc.attention(q, k, v)
    flashc.weighted_sum(np.ones((3, 4), np.float32), np.ones(4, np.float32))


def test_unknown_knob_value_raw(monkeypatch):
    keep, ts = _fwd_tensors()
    monkeypatch.setenv("FLASHC_CPU_ISA", "sse4")
    assert raw_fwd(*ts) == S.FLASHC_ERR_INVALID_ARGUMENT
    assert "FLASHC_CPU_ISA='sse4'" in last_error()
    monkeypatch.delenv("FLASHC_CPU_ISA")
    assert raw_fwd(*ts) == S.FLASHC_OK


# ---------------------------------------- CUDA-unavailable reasons (issue 10)
# The loader reads the module once per process: each case runs in a child.

_REASON = """
import flashc
print(flashc.backend_available("cuda")[1])
try:
    flashc.attention(*[__import__("numpy").ones((1, 2, 1, 4), "float32")] * 3, backend="cuda")
except flashc.FlashcError as e:
    print(str(e))
"""


def _child_reason(**env_over):
    env = dict(os.environ, **env_over)
    here = os.path.dirname(os.path.abspath(__file__))
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(os.path.dirname(here), "python"),
                                         env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-c", _REASON], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()


def _module_path():
    return os.path.join(os.path.dirname(flashc.library_path), "libflashc_cuda.so")


def test_cuda_reason_said_once():
    # "CUDA backend unavailable: " is the library's prefix, once: neither the
    # friendly layer nor the test harness's skip reason adds it again.
    if flashc.backend_available("cuda")[0]:
        pytest.skip("CUDA is available here")
    why = flashc.backend_available("cuda")[1]
    assert why.startswith("CUDA backend unavailable: ") and why.count("unavailable") == 1, why
    q, k, v = qkv()
    e = expect(S.FLASHC_ERR_BACKEND_UNAVAILABLE, flashc.attention, q, k, v, backend="cuda")
    assert str(e).count("unavailable") == 1, str(e)
    assert e.message == why


def test_cuda_reason_module_not_built():
    if os.path.exists(_module_path()) or os.environ.get("FLASHC_CUDA_MODULE"):
        pytest.skip("the CUDA module is built next to libflashc")
    why = flashc.backend_available("cuda")[1]
    assert ("CUDA backend unavailable: CUDA module not built (FLASHC_CUDA=OFF, or nvcc missing "
            "at build time)") in why, why
    assert "cannot open shared object" not in why


def test_cuda_reason_module_path_missing(tmp_path):
    missing = str(tmp_path / "libflashc_cuda.so")
    why, err = _child_reason(FLASHC_CUDA_MODULE=missing)
    assert why == "CUDA backend unavailable: FLASHC_CUDA_MODULE=%s: no such file" % missing, why
    assert err == "FLASHC_ERR_BACKEND_UNAVAILABLE: " + why


def test_cuda_reason_module_unloadable(tmp_path):
    bogus = tmp_path / "libflashc_cuda.so"
    bogus.write_text("not an ELF file")
    why, err = _child_reason(FLASHC_CUDA_MODULE=str(bogus))
    assert why.startswith("CUDA backend unavailable: cannot load the module (") and str(bogus) in why
    assert err.count("unavailable") == 1


def test_cuda_reason_no_driver():
    # A built module on a machine without libcuda.so.1 says "no CUDA driver",
    # not cudart's "CUDA driver version is insufficient".
    if not os.path.exists(_module_path()):
        pytest.skip("the CUDA module is not built")
    try:
        ctypes.CDLL("libcuda.so.1")
        pytest.skip("a CUDA driver (libcuda.so.1) is installed here")
    except OSError:
        pass
    why = flashc.backend_available("cuda")[1]
    assert why.startswith("CUDA backend unavailable: no CUDA driver (libcuda.so.1 not found"), why
    assert "insufficient" not in why
