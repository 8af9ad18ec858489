"""Interop: __dlpack__ inputs (flashc._dlpack) and the stream entries of
__cuda_array_interface__ v3 / __cuda_stream__ (flashc._core's stream plan).

The host half runs everywhere: NumPy (>= 1.22) exports DLPack on the CPU,
wrapped in objects that expose ONLY __dlpack__ / __dlpack_device__ so that the
DLPack path is the one taken. The device half (marker `cuda`) uses
flashc.cuda.DeviceArray's own DLPack export and, where installed, CuPy, JAX
and torch.
"""

import ctypes
import gc
import sys

import numpy as np
import pytest

import flashc
import flashc.cuda as fcuda
from flashc import _core, _dlpack, _lib
from flashc._dtypes import bfloat16
from reference import max_abs_err


class DLPackOnly:
    """Exposes nothing but the DLPack protocol of the wrapped array."""

    def __init__(self, a):
        self._a = a
        self.calls = []

    def __dlpack__(self, **kw):
        self.calls.append(kw)
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


class DLPackOld(DLPackOnly):
    """A producer from before DLPack 1.0: no max_version, unversioned capsule."""

    def __dlpack__(self, stream=None):
        self.calls.append({"stream": stream})
        return self._a.__dlpack__(stream=stream)


class CAI:
    """A fake __cuda_array_interface__ object (never dereferenced here)."""

    def __init__(self, shape=(1, 4, 2, 8), typestr="<f4", **extra):
        self.__cuda_array_interface__ = dict(version=3, shape=shape, typestr=typestr,
                                             data=(0x10000, False), strides=None, **extra)


class StreamObj:
    def __init__(self, handle):
        self.handle_ = handle

    def __cuda_stream__(self):
        return (0, self.handle_)


def qkv(rng, dtype=np.float32, B=2, Sq=5, Sk=7, Hq=4, Hkv=2, D=8):
    q = rng.standard_normal((B, Sq, Hq, D)).astype(dtype)
    k = rng.standard_normal((B, Sk, Hkv, D)).astype(dtype)
    v = rng.standard_normal((B, Sk, Hkv, D)).astype(dtype)
    return q, k, v


def _capsule_name(cap):
    get = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(
        ("PyCapsule_GetName", ctypes.pythonapi))
    return get(cap)


# ---------------------------------------------------------- DLPack, host

@pytest.mark.parametrize("wrap", [DLPackOnly, DLPackOld])
def test_dlpack_host_attention(rng, wrap):
    q, k, v = qkv(rng)
    # k as the [B, H, S, D] -> [B, S, H, D] transpose (strided), v reversed
    # along the keys (negative strides): strides travel in elements.
    k = np.ascontiguousarray(k.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    v = np.ascontiguousarray(v[:, ::-1])[:, ::-1]
    assert not k.flags.c_contiguous and v.strides[1] < 0
    wq, wk, wv = wrap(q), wrap(k), wrap(v)
    refs = [sys.getrefcount(a) for a in (q, k, v)]
    o, lse = flashc.attention(wq, wk, wv, causal=True, return_lse=True)
    ro, rl = flashc.attention(q, k, v, causal=True, return_lse=True)
    assert np.array_equal(o, ro) and np.array_equal(lse, rl)
    # Host producers are asked with stream=None; DLPack 1.0 ones with max_version.
    assert wq.calls[0]["stream"] is None
    assert ("max_version" in wq.calls[0]) == (wrap is DLPackOnly)
    del o, lse
    gc.collect()
    # Every deleter ran: NumPy's export holds a reference until then.
    assert [sys.getrefcount(a) for a in (q, k, v)] == refs


def test_dlpack_capsule_renamed(rng):
    a = rng.standard_normal((3, 8)).astype(np.float32)
    seen = []

    class Spy(DLPackOnly):
        def __dlpack__(self, **kw):
            cap = super().__dlpack__(**kw)
            seen.append(cap)
            return cap

    class OldSpy(DLPackOld):
        def __dlpack__(self, stream=None):
            cap = super().__dlpack__(stream)
            seen.append(cap)
            return cap

    w = np.ones(8, np.float32)
    y = flashc.weighted_sum(Spy(a), OldSpy(w))
    assert np.array_equal(y, flashc.weighted_sum(a, w))
    assert [_capsule_name(c) for c in seen] == [b"used_dltensor_versioned", b"used_dltensor"]


def test_dlpack_host_out_and_head_vectors(rng):
    q, k, v = qkv(rng)
    sinks = rng.standard_normal(4).astype(np.float32)
    slopes = rng.random(4)  # float64: converted to float32 like a NumPy array
    ref = flashc.attention(q, k, v, sinks=sinks, alibi_slopes=slopes.astype(np.float32))
    out = np.empty_like(ref)
    wout = DLPackOnly(out)
    o = flashc.attention(DLPackOnly(q), k, v, sinks=DLPackOnly(sinks),
                         alibi_slopes=DLPackOnly(slopes), out=wout)
    assert o is wout and np.array_equal(out, ref)


def test_dlpack_host_backward_and_wsum_backward(rng):
    q, k, v = qkv(rng)
    o, lse = flashc.attention(q, k, v, return_lse=True)
    do = rng.standard_normal(o.shape).astype(np.float32)
    ref = flashc.attention_backward(do, q, k, v, o, lse)
    got = flashc.attention_backward(*(DLPackOnly(a) for a in (do, q, k, v, o, lse)))
    assert all(np.array_equal(a, b) for a, b in zip(got, ref))
    x = rng.standard_normal((3, 5, 8))[:, ::2].astype(np.float16)  # strided rows
    w = rng.standard_normal(8).astype(np.float16)
    dy = rng.standard_normal((3, 3)).astype(np.float16)
    ref = flashc.weighted_sum_backward(dy, x, w)
    got = flashc.weighted_sum_backward(DLPackOnly(dy), DLPackOnly(x), DLPackOnly(w))
    assert all(np.array_equal(a, b) for a, b in zip(got, ref))


def test_dlpack_readonly_and_unversioned_outputs_refused(rng):
    x = rng.standard_normal((3, 8)).astype(np.float32)
    w = np.ones(8, np.float32)
    ro = np.empty(3, np.float32)
    ro.flags.writeable = False
    with pytest.raises(flashc.FlashcError, match="read-only") as e:
        flashc.weighted_sum(x, w, out=DLPackOnly(ro))
    assert e.value.status == _lib.FLASHC_ERR_INVALID_ARGUMENT
    with pytest.raises(flashc.FlashcError, match="unversioned"):
        flashc.weighted_sum(x, w, out=DLPackOld(np.empty(3, np.float32)))
    # A read-only input is fine.
    xr = x.copy()
    xr.flags.writeable = False
    assert np.array_equal(flashc.weighted_sum(DLPackOnly(xr), w), flashc.weighted_sum(x, w))


def test_dlpack_dtype_and_device_errors(rng):
    a = np.arange(16, dtype=np.int32).reshape(2, 8)
    before = sys.getrefcount(a)
    with pytest.raises(flashc.FlashcError, match="DLPack dtype int32") as e:
        flashc.weighted_sum(DLPackOnly(a), np.ones(8, np.float32))
    assert e.value.status == _lib.FLASHC_ERR_DTYPE
    del e
    gc.collect()
    assert sys.getrefcount(a) == before  # consumed, then released on the error path

    class OnROCm(DLPackOnly):
        def __dlpack_device__(self):
            return (10, 0)

    r = OnROCm(np.ones((2, 8), np.float32))
    with pytest.raises(flashc.FlashcError, match="device type 10 \\(ROCM\\)") as e:
        flashc.weighted_sum(r, np.ones(8, np.float32))
    assert e.value.status == _lib.FLASHC_ERR_UNSUPPORTED and r.calls == []


class _DLManaged(ctypes.Structure):
    _fields_ = [("dl_tensor", _dlpack._DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


_deleted = []
_DELETER = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)(lambda p: _deleted.append(p))
_PyCapsule_New = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p,
                                   ctypes.c_void_p)(("PyCapsule_New", ctypes.pythonapi))


class RawProducer:
    """A hand-made DLPack producer (unversioned capsule): any dtype code,
    element strides or NULL strides, a byte_offset."""

    def __init__(self, buf, shape, code, bits, strides=None, byte_offset=0, device=(1, 0)):
        self.buf, self.device = buf, device
        nd = len(shape)
        self.shape = (ctypes.c_int64 * nd)(*shape)
        self.strides = (ctypes.c_int64 * nd)(*strides) if strides is not None else None
        m = self.m = _DLManaged()
        m.dl_tensor.data = buf.ctypes.data
        m.dl_tensor.device = _dlpack._DLDevice(*device)
        m.dl_tensor.ndim = nd
        m.dl_tensor.dtype = _dlpack._DLDataType(code, bits, 1)
        m.dl_tensor.shape = ctypes.cast(self.shape, ctypes.POINTER(ctypes.c_int64))
        if self.strides is not None:
            m.dl_tensor.strides = ctypes.cast(self.strides, ctypes.POINTER(ctypes.c_int64))
        m.dl_tensor.byte_offset = byte_offset
        m.deleter = ctypes.cast(_DELETER, ctypes.c_void_p).value

    def __dlpack__(self, stream=None):
        return _PyCapsule_New(ctypes.addressof(self.m), b"dltensor", None)

    def __dlpack_device__(self):
        return self.device


def test_dlpack_bfloat16_code_strides_and_offset(rng):
    x = rng.standard_normal((4, 6)).astype(bfloat16())
    w = rng.standard_normal(6).astype(bfloat16())
    ref = flashc.weighted_sum(x, w)
    _deleted.clear()
    # kDLBfloat = 4, 16 bits; NULL strides = compact row-major.
    px, pw = RawProducer(x, x.shape, 4, 16), RawProducer(w, w.shape, 4, 16)
    assert np.array_equal(flashc.weighted_sum(px, pw), ref)
    gc.collect()
    assert sorted(_deleted) == sorted([ctypes.addressof(px.m), ctypes.addressof(pw.m)])
    # Element strides (a transpose) and a byte offset (rows 1.. of a larger buffer).
    big = rng.standard_normal((7, 4)).astype(np.float32)
    xt = big[1:].T  # (4, 6), strides (1, 4) in elements
    p = RawProducer(big, (4, 6), 2, 32, strides=(1, 4), byte_offset=4 * 4)
    assert np.array_equal(flashc.weighted_sum(p, np.ones(6, np.float32)),
                          flashc.weighted_sum(xt, np.ones(6, np.float32)))
    with pytest.raises(flashc.FlashcError, match="DLPack dtype float8"):
        flashc.weighted_sum(RawProducer(big, (7, 4), 2, 8), np.ones(4, np.float32))


# ------------------------------------------------------------- streams

def test_stream_handle_protocols():
    assert _core._stream_handle(StreamObj(0x1234)) == 0x1234
    assert _core._stream_handle(StreamObj(0)) is None
    assert _core._stream_handle(7) == 7 and _core._stream_handle(0) is None


def test_producer_streams_from_cai():
    ps = _core._producer_streams
    assert ps(CAI()) == ()                       # v3 without 'stream', or v2
    assert ps(CAI(stream=None)) == ()            # None: no synchronisation needed
    assert ps(CAI(stream=1)) == (1,) and ps(CAI(stream=2)) == (2,)
    assert ps(CAI(stream=0xabc0)) == (0xabc0,)
    with pytest.raises(flashc.FlashcError, match="disallows"):
        ps(CAI(stream=0))
    with pytest.raises(flashc.FlashcError, match="int or None"):
        ps(CAI(stream="1"))
    both = CAI(stream=5)
    both.__cuda_stream__ = lambda: (0, 9)
    assert ps(both) == (9, 5)
    assert ps(np.zeros(3)) == ()


def test_stream_plan():
    plan = _core._stream_plan
    a, b, legacy = CAI(stream=0x100), CAI(stream=0x200), CAI(stream=1)
    # No stream=: the first producer's stream; the others are waited for.
    assert plan(None, [a, b, legacy]) == (0x100, [0x200, 1])
    assert plan(None, [legacy, a]) == (None, [0x100])   # legacy stays NULL
    assert plan(None, [CAI(), CAI()]) == (None, [])
    # stream= wins; every producer on another stream is waited for.
    assert plan(0x300, [a, b]) == (0x300, [0x100, 0x200])
    assert plan(0x100, [a, a]) == (0x100, [])
    assert plan(2, [legacy]) == (2, [1])


@pytest.mark.skipif(flashc.backend_available("cuda")[0], reason="checks the no-GPU refusal")
def test_device_inputs_without_cuda_refused():
    # Without the refusal, AUTO would resolve to the CPU backend and read the
    # (fake) device pointers.
    q = CAI(stream=0x100)
    with pytest.raises(flashc.FlashcError, match="device memory, but") as e:
        flashc.attention(q, q, q)
    assert e.value.status == _lib.FLASHC_ERR_BACKEND_UNAVAILABLE

    class DevDL(DLPackOnly):
        def __dlpack_device__(self):
            return (2, 0)

    d = DevDL(np.ones((2, 8), np.float32))
    with pytest.raises(flashc.FlashcError) as e:
        flashc.weighted_sum(d, d)
    assert e.value.status == _lib.FLASHC_ERR_BACKEND_UNAVAILABLE and d.calls == []


@pytest.mark.skipif(flashc.backend_available("cuda")[0], reason="checks the no-GPU status")
def test_stream_wait_abi_without_cuda():
    fn = _lib._bind("flashc_cuda_stream_wait", ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p])
    assert fn(None, 2) == _lib.FLASHC_ERR_BACKEND_UNAVAILABLE
    with pytest.raises(flashc.FlashcError):
        fcuda._stream_wait(None, 2)
    fcuda._stream_wait(None, 1)  # the same stream: nothing to do, nothing asked


# -------------------------------------------------------------- device

def _ref(q, k, v, **kw):
    return flashc.attention(*(a.astype(np.float64) for a in (q, k, v)), **kw)


class CAIView:
    """__cuda_array_interface__ of a DeviceArray with its stream replaced."""

    def __init__(self, dev, stream):
        self._dev = dev
        cai = dict(dev.__cuda_array_interface__)
        cai["stream"] = stream
        self.__cuda_array_interface__ = cai


@pytest.mark.cuda
def test_stream_wait_abi():
    for s, p in ((None, 2), (2, None), (1, None), (2, 2)):
        fcuda._stream_wait(s, p)
    assert _lib._bind("flashc_cuda_stream_wait", ctypes.c_int,
                      [ctypes.c_void_p, ctypes.c_void_p])(2, 1) == 0
    fcuda.synchronize()


@pytest.mark.cuda
def test_cai_stream_entry_orders_and_runs(rng, monkeypatch):
    q, k, v = qkv(rng)
    dq, dk, dv = (fcuda.to_device(a) for a in (q, k, v))
    waits = []
    real = fcuda._stream_wait
    monkeypatch.setattr(fcuda, "_stream_wait", lambda s, p: (waits.append((s, p)), real(s, p)))
    # q on the per-thread default stream (2), k on the legacy one (1):
    # flashc runs on 2 and waits for 1.
    o = flashc.attention(CAIView(dq, 2), CAIView(dk, 1), dv, causal=True)
    assert waits[0] == (2, 1) and o.stream == 2
    assert o.__cuda_array_interface__["stream"] == 2
    assert max_abs_err(o.numpy(), _ref(q, k, v, causal=True)) < 1e-3  # numpy() waits for 2
    # A later call on the legacy stream waits for o's stream.
    waits.clear()
    flashc.weighted_sum(o, fcuda.to_device(np.ones(8, np.float32)), stream=1)
    assert (None, 2) in waits


@pytest.mark.cuda
def test_dlpack_device_from_devicearray(rng):
    q, k, v = qkv(rng, dtype=bfloat16())
    dq, dv = fcuda.to_device(q), fcuda.to_device(v)
    dk = fcuda.to_device(np.ascontiguousarray(k.transpose(0, 2, 1, 3))).transpose(0, 2, 1, 3)
    live = len(fcuda._dl_live)
    wq = DLPackOnly(dq)
    o = flashc.attention(wq, DLPackOnly(dk), DLPackOnly(dv))  # dk strided
    assert isinstance(o, fcuda.DeviceArray) and wq.calls[0]["stream"] == 1
    ref = flashc.attention(dq, dk, dv)
    assert np.array_equal(o.numpy(), ref.numpy())
    gc.collect()
    assert len(fcuda._dl_live) == live  # our deleter ran for each import
    # out= through DLPack needs a writable (versioned) export: DeviceArray's is unversioned.
    with pytest.raises(flashc.FlashcError, match="unversioned"):
        flashc.attention(dq, dk, dv, out=DLPackOnly(fcuda.empty(q.shape, q.dtype)))


@pytest.mark.cuda
def test_dlpack_host_staged_to_cuda(rng):
    q, k, v = qkv(rng)
    o = flashc.attention(DLPackOnly(q), DLPackOnly(k), DLPackOnly(v), backend="cuda")
    assert isinstance(o, np.ndarray) and max_abs_err(o, _ref(q, k, v)) < 1e-3


@pytest.mark.cuda
def test_cupy_stream_and_dlpack(rng):
    cp = pytest.importorskip("cupy")
    q, k, v = qkv(rng, B=1, Sq=64, Sk=80, D=64)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        cq, ck, cv = (cp.asarray(a) for a in (q, k, v))
        o = flashc.attention(cq, ck, cv, causal=True)  # CAI 'stream' = s
        assert o.stream == s.ptr
        o2 = flashc.attention(DLPackOnly(cq), DLPackOnly(ck), DLPackOnly(cv), causal=True,
                              stream=s)
        on = cp.asarray(o)  # CuPy reads o's CAI 'stream'
        s.synchronize()
    ref = _ref(q, k, v, causal=True)
    assert max_abs_err(o.numpy(), ref) < 1e-3 and max_abs_err(o2.numpy(), ref) < 1e-3
    assert max_abs_err(cp.asnumpy(on), ref) < 1e-3
    out = cp.empty_like(cq)
    r = flashc.attention(cq, ck, cv, out=out, stream=s)
    s.synchronize()
    assert r is out and max_abs_err(cp.asnumpy(out), _ref(q, k, v)) < 1e-3


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_jax_inputs(rng, dtype):
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    try:
        gpu = jax.devices("gpu")[0]
    except RuntimeError:
        pytest.skip("jax without a GPU")
    nd = np.float32 if dtype == "float32" else bfloat16()
    q, k, v = qkv(rng, dtype=nd, B=1, Sq=64, Sk=80, D=64)
    jq, jk, jv = (jax.device_put(jnp.asarray(a), gpu) for a in (q, k, v))
    ref = _ref(q, k, v)
    tol = 1e-3 if dtype == "float32" else 3e-2
    o = flashc.attention(jq, jk, jv)  # CAI or DLPack, whichever jax exports
    assert max_abs_err(o.numpy().astype(np.float64), ref) < tol
    o = flashc.attention(DLPackOnly(jq), DLPackOnly(jk), DLPackOnly(jv))
    assert max_abs_err(o.numpy().astype(np.float64), ref) < tol
    back = jnp.from_dlpack(o)  # and back, through DeviceArray's export
    assert back.shape == q.shape


@pytest.mark.cuda
def test_torch_through_dlpack(rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    q, k, v = qkv(rng, B=1, Sq=64, Sk=80, D=64)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        tq, tv = (torch.from_numpy(a).cuda() for a in (q, v))
        tk = torch.from_numpy(k).cuda().transpose(1, 2).contiguous().transpose(1, 2)  # strided
        o = flashc.attention(DLPackOnly(tq), DLPackOnly(tk), DLPackOnly(tv),
                             stream=s)  # torch orders its copies before s
    assert o.stream == s.cuda_stream
    assert max_abs_err(o.numpy(), _ref(q, k, v)) < 1e-3
