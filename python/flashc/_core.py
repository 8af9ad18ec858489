"""The friendly layer: NumPy / device arrays in, arrays out, errors as exceptions.

Every public function here turns its arguments into flashc_tensor
descriptions (pointer, dtype, shape, strides in elements) without copying
them, calls one function of the raw layer (flashc._lib) with the GIL released
(ctypes.CDLL releases it), and turns a non-OK status into FlashcError with the
library's own thread-local message.

Where the arrays live decides where the call runs:
  * NumPy arrays (any strides)                      -> host memory
  * flashc.cuda.DeviceArray, objects exporting
    __cuda_array_interface__, torch CUDA tensors    -> device memory
  * objects exporting only __dlpack__ (JAX, ...)   -> host or device memory, as
    __dlpack_device__ says (flashc._dlpack)
  * NumPy arrays with backend="cuda"                -> copied to the device,
    run there, results copied back into NumPy arrays
Mixing host and device arrays in one call is FlashcError
(FLASHC_ERR_DEVICE_MISMATCH). Outputs are allocated C-contiguous where the
inputs live unless given through out=.

Validation is the library's: shapes, dtypes, strides and parameter values are
checked in C and its message becomes the FlashcError. Python checks only what
C cannot see (host/device placement, NumPy byte strides, and the ALiBi slopes
of NumPy arrays that are copied to the device, which C does not read).

Streams (device calls): flashc runs on `stream=` when given, else on the
stream the inputs were produced on (the first of: __cuda_array_interface__ v3
"stream", obj.__cuda_stream__(), the stream of the flashc call that wrote a
DeviceArray), else on the legacy default stream. Every other producer stream
is waited for with an event (flashc_cuda_stream_wait), never by blocking the
host; DLPack producers are asked to order their work before that stream.
DeviceArray outputs remember it (DeviceArray.stream).

Module graph (no cycles): _lib <- _errors <- _dtypes <- cuda <- _dlpack <- _core;
flashc.torch imports _core for the one params builder, attn_params().
"""

import ctypes

import numpy as np

from . import _dlpack, _lib, cuda
from ._dtypes import (CODE_NAMES as _CODE_NAMES, DTYPE_NAMES as _DTYPE_NAMES,
                      bfloat16 as _bfloat16, dtype_code, is_float_dtype, lse_code as _lse_code,
                      np_dtype)
from ._errors import FlashcError, check as _check, fail as _fail

__all__ = [
    "FlashcError", "attention", "attention_backward", "weighted_sum",
    "weighted_sum_backward", "backends", "backend_available", "cpu_isa", "cpu_features",
    "version", "attn_params",
]

# FlashcError, _check and _fail live in _errors, the dtype helpers in _dtypes
# (so that cuda.py needs neither this module nor a lazy import); they are
# re-exported here for callers of the 0.1 module layout.
_ = _bfloat16, dtype_code, np_dtype, FlashcError

# --------------------------------------------------------- backends, misc

_BACKENDS = {"auto": _lib.FLASHC_BACKEND_AUTO, "cpu": _lib.FLASHC_BACKEND_CPU,
             "cuda": _lib.FLASHC_BACKEND_CUDA}


def _backend_code(backend):
    if isinstance(backend, int) and backend in _BACKENDS.values():
        return backend
    code = _BACKENDS.get(str(backend).lower())
    if code is None:
        _fail(_lib.FLASHC_ERR_INVALID_ARGUMENT,
              "unknown backend %r; expected one of 'auto', 'cpu', 'cuda'" % (backend,))
    return code


def backend_available(backend):
    """(available, reason): reason is the library's message when unavailable."""
    ok = bool(_lib.flashc_backend_available(_backend_code(backend)))
    return ok, ("" if ok else (_lib.flashc_last_error() or b"").decode("utf-8", "replace"))


def backends():
    """Names of the backends that can run here: always 'cpu', plus 'cuda'
    when the CUDA module, a driver and a device are present."""
    names = ["cpu"]
    if _lib.flashc_backend_available(_lib.FLASHC_BACKEND_CUDA):
        names.append("cuda")
    return names


def cpu_isa():
    """The CPU SIMD path in use: 'scalar', 'avx2' or 'avx512'."""
    return _lib.flashc_cpu_isa().decode()


def cpu_features():
    """Optional extensions the CPU paths use on top of cpu_isa(), e.g.
    ['avx512_bf16'] (the BF16 forward on vdpbf16ps); FLASHC_CPU_BF16=0 turns
    it off, read at every call."""
    return _lib.flashc_cpu_features().decode().split()


def version():
    return _lib.flashc_version_string().decode()


def _stream_handle(stream):
    """An int cudaStream_t from None / an int / a torch or cupy stream."""
    if stream is None:
        return None
    if isinstance(stream, int):
        return stream or None
    if hasattr(stream, "__cuda_stream__"):  # the CUDA stream protocol: (version, handle)
        return int(stream.__cuda_stream__()[1]) or None
    for attr in ("cuda_stream", "ptr", "handle"):  # torch.cuda.Stream, cupy, others
        h = getattr(stream, attr, None)
        if isinstance(h, int):
            return h or None
    raise TypeError("stream must be an int (cudaStream_t) or a stream object with "
                    "__cuda_stream__, .cuda_stream or .ptr, got %r" % (stream,))


def _producer_streams(obj):
    """The streams whose pending work on obj must come before flashc's, as
    cudaStream_t ints (1 = legacy default, 2 = per-thread default); () when
    no ordering is needed. torch tensors: the caller's stream= (flashc.torch
    passes torch's current stream)."""
    if isinstance(obj, cuda.DeviceArray):
        return (obj.stream,) if obj.stream is not None else ()
    out = []
    if hasattr(obj, "__cuda_stream__"):
        out.append(int(obj.__cuda_stream__()[1]) or 1)
    if not isinstance(obj, np.ndarray) and not _is_torch(obj):
        cai = getattr(obj, "__cuda_array_interface__", None)
        s = cai.get("stream") if isinstance(cai, dict) else None  # absent before v3
        if s is not None:
            if isinstance(s, bool) or not isinstance(s, int):
                _fail(_lib.FLASHC_ERR_INVALID_ARGUMENT, "__cuda_array_interface__ 'stream' "
                      "must be an int or None, got %r" % (s,))
            if s == 0:
                _fail(_lib.FLASHC_ERR_INVALID_ARGUMENT, "__cuda_array_interface__ 'stream' is 0, "
                      "which the protocol disallows (1 = legacy default, 2 = per-thread "
                      "default stream)")
            out.append(s)
    return tuple(out)


def _stream_plan(stream, objs):
    """(run, waits): the stream a device call runs on (None = legacy default)
    and the producer streams it must wait for. run is `stream` (a handle from
    _stream_handle) when given, else the first producer stream of objs."""
    producers = []
    for o in objs:
        for p in _producer_streams(o):
            if p not in producers:
                producers.append(p)
    run = stream if stream is not None else (producers[0] if producers else None)
    if run == 1:
        run = None  # the same stream; keeps params.stream NULL as before
    return run, [p for p in producers if p != (run or 1)]


# ------------------------------------------------------------ tensor views

class _View:
    """One array argument as the library sees it."""
    __slots__ = ("ptr", "shape", "strides", "code", "device", "obj")

    def __init__(self, ptr, shape, strides, code, device, obj):
        self.ptr = ptr              # address of element (0, ..., 0)
        self.shape = tuple(int(s) for s in shape)
        self.strides = tuple(int(s) for s in strides)  # in elements
        if 0 in self.shape:
            # Nothing is read or written; NumPy gives empty arrays all-zero
            # strides, which would read as aliasing on an output.
            acc, cs = 1, []
            for n in reversed(self.shape):
                cs.append(acc)
                acc *= max(n, 1)
            self.strides = tuple(reversed(cs))
        self.code = code
        self.device = device
        self.obj = obj              # keeps the memory alive for the call

    def tensor(self):
        t = _lib.flashc_tensor()
        t.data = self.ptr or None
        t.dtype = self.code
        if len(self.shape) > _lib.FLASHC_MAX_DIMS:
            _fail(_lib.FLASHC_ERR_SHAPE, "%d dimensions; flashc tensors have at most %d"
                  % (len(self.shape), _lib.FLASHC_MAX_DIMS))
        t.ndim = len(self.shape)
        for i, (n, s) in enumerate(zip(self.shape, self.strides)):
            t.shape[i] = n
            t.strides[i] = s
        return t


def _elem_strides(byte_strides, itemsize):
    """Byte strides -> element strides; None when one is not a multiple."""
    out = []
    for s in byte_strides:
        if s % itemsize:
            return None
        out.append(s // itemsize)
    return out


def _is_torch(obj):
    dt = getattr(obj, "dtype", None)
    return (callable(getattr(obj, "data_ptr", None)) and callable(getattr(obj, "stride", None))
            and str(dt).startswith("torch."))


def _is_device_obj(obj):
    if isinstance(obj, cuda.DeviceArray):
        return True
    if _is_torch(obj):
        return bool(getattr(obj, "is_cuda", False))
    if hasattr(obj, "__cuda_array_interface__"):
        return True
    return _is_dlpack_only(obj) and _dlpack.is_device(obj)


def _is_dlpack_only(obj):
    """An array flashc reads through DLPack: none of the direct paths fits."""
    return (not isinstance(obj, (np.ndarray, cuda.DeviceArray)) and not _is_torch(obj)
            and not hasattr(obj, "__cuda_array_interface__") and _dlpack.is_dlpack(obj))


_CAI_TYPES = {"<f4": _lib.FLASHC_F32, "<f2": _lib.FLASHC_F16, "<f8": _lib.FLASHC_F64,
              "<V2": _lib.FLASHC_BF16}  # bf16 has no typestr of its own: '<V2'


def _view_of(obj, name, writable=False):
    """A _View of obj without copying it (except a NumPy input whose byte
    strides are not a multiple of its itemsize, which is copied)."""
    if isinstance(obj, cuda.DeviceArray):
        code = dtype_code(obj.dtype, name)
        es = _elem_strides(obj.strides, obj.itemsize)
        return _View(obj.ptr, obj.shape, es, code, True, obj)
    if _is_torch(obj):
        tname = str(obj.dtype)[len("torch."):]
        code = _DTYPE_NAMES.get(tname)
        if code is None:
            _fail(_lib.FLASHC_ERR_DTYPE, "%s has dtype torch.%s; flashc supports float32, "
                  "float16, bfloat16 and float64" % (name, tname))
        return _View(obj.data_ptr(), tuple(obj.shape), tuple(obj.stride()), code,
                     bool(getattr(obj, "is_cuda", False)), obj)
    if not isinstance(obj, np.ndarray) and hasattr(obj, "__cuda_array_interface__"):
        cai = obj.__cuda_array_interface__
        typestr = cai["typestr"]
        if typestr[0] == "=" or typestr[0] == "|":
            typestr = "<" + typestr[1:]
        code = _CAI_TYPES.get(typestr)
        if code is None:
            _fail(_lib.FLASHC_ERR_DTYPE, "%s has typestr %r; flashc supports float32, "
                  "float16, bfloat16 ('<V2') and float64" % (name, cai["typestr"]))
        shape = tuple(cai["shape"])
        itemsize = int(typestr[2:])
        if cai.get("strides") is None:
            es, acc = [], 1
            for n in reversed(shape):
                es.append(acc)
                acc *= n
            es = es[::-1]
        else:
            es = _elem_strides(cai["strides"], itemsize)
            if es is None:
                _fail(_lib.FLASHC_ERR_STRIDE, "%s has byte strides %s that are not a multiple "
                      "of its itemsize %d" % (name, tuple(cai["strides"]), itemsize))
        if writable and cai["data"][1]:
            _fail(_lib.FLASHC_ERR_INVALID_ARGUMENT, "%s is read-only" % name)
        return _View(int(cai["data"][0]), shape, es, code, True, obj)
    if _is_dlpack_only(obj):
        return _view_of(_dlpack.import_array(obj, name, writable=writable), name, writable)

    arr = obj if isinstance(obj, np.ndarray) else np.asarray(obj)
    code = dtype_code(arr.dtype, name)
    if writable and not arr.flags.writeable:
        _fail(_lib.FLASHC_ERR_INVALID_ARGUMENT, "%s is a read-only array" % name)
    es = _elem_strides(arr.strides, arr.itemsize)
    if es is None:
        if writable:
            _fail(_lib.FLASHC_ERR_STRIDE, "%s has byte strides %s that are not a multiple of "
                  "its itemsize %d" % (name, arr.strides, arr.itemsize))
        arr = np.ascontiguousarray(arr)  # the only copy an input ever gets
        es = [s // arr.itemsize for s in arr.strides]
    return _View(arr.__array_interface__["data"][0], arr.shape, es, code, False, arr)


class _Call:
    """Places one call: decides host / device / staged (NumPy + backend="cuda"),
    makes the input views and allocates the outputs where they belong."""

    def __init__(self, backend, inputs, outs, stream=None):
        # inputs / outs: {name: obj or None}; stream: the stream= argument
        self.backend = _backend_code(backend)
        where = {}
        named = [(n, o) for n, o in list(inputs.items()) + list(outs.items()) if o is not None]
        for name, obj in named:
            where[name] = _is_device_obj(obj)
        dev = [n for n, d in where.items() if d]
        host = [n for n, d in where.items() if not d]
        if dev and host:
            _fail(_lib.FLASHC_ERR_DEVICE_MISMATCH,
                  "%s %s device memory but %s %s host memory; pass all arrays on one side "
                  "(NumPy arrays with backend='cuda' are copied to the device for you)"
                  % (", ".join(dev), "is" if len(dev) == 1 else "are",
                     ", ".join(host), "is" if len(host) == 1 else "are"))
        self.device = bool(dev)
        if self.device and self.backend == _lib.FLASHC_BACKEND_CPU:
            # The CPU backend would dereference device pointers on the host.
            _fail(_lib.FLASHC_ERR_DEVICE_MISMATCH,
                  "backend 'cpu' needs host arrays, but %s %s device memory"
                  % (", ".join(dev), "is" if len(dev) == 1 else "are"))
        self.staged = not self.device and self.backend == _lib.FLASHC_BACKEND_CUDA
        if self.staged:
            # Raise the library's own "unavailable" message before copying.
            if not _lib.flashc_backend_available(_lib.FLASHC_BACKEND_CUDA):
                msg = (_lib.flashc_last_error() or b"").decode("utf-8", "replace")
                _fail(_lib.FLASHC_ERR_BACKEND_UNAVAILABLE, msg)  # "CUDA backend unavailable: <why>"
        if self.device and not _lib.flashc_backend_available(_lib.FLASHC_BACKEND_CUDA):
            # Else AUTO resolves to the CPU backend, which would read device pointers.
            msg = (_lib.flashc_last_error() or b"").decode("utf-8", "replace")
            _fail(_lib.FLASHC_ERR_BACKEND_UNAVAILABLE, "%s %s device memory, but %s"
                  % (", ".join(dev), "is" if len(dev) == 1 else "are", msg))
        self.on_device = self.device or self.staged
        self._host_outs = []   # (device_array, user_out or None) pairs to copy back
        self._outs = []        # output views, marked with the stream after the call
        self.stream = _stream_handle(stream)
        if self.device:
            self.stream, waits = _stream_plan(self.stream, [o for _, o in named])
            for p in waits:
                cuda._stream_wait(self.stream, p)
        # DLPack arguments, consumed once (for the call's stream), by id:
        # id -> (the caller's object, the NumPy array or DeviceArray viewing it).
        self._imports = {}
        for name, obj in named:
            if id(obj) not in self._imports and _is_dlpack_only(obj):
                self._imports[id(obj)] = (obj, _dlpack.import_array(
                    obj, name, self.stream if self.device else None, writable=name in outs))

    def _conv(self, obj):
        """obj, or the array viewing it when it came through DLPack."""
        imp = self._imports.get(id(obj)) if self._imports else None
        return imp[1] if imp is not None else obj

    def _orig(self, arr):
        """The caller's object for an array _conv made, else arr."""
        for obj, conv in self._imports.values():
            if conv is arr:
                return obj
        return arr

    def input(self, obj, name):
        obj = self._conv(obj)
        if self.staged:
            arr = np.asarray(obj)
            dtype_code(arr.dtype, name)
            obj = cuda.to_device(arr)
        return _view_of(obj, name)

    def head_vector(self, obj, name, code, finite=False):
        """sinks / alibi_slopes: a per-head vector of float type `code` (F32;
        F64 for F64 inputs), any shape and strides (the library checks them:
        [Hq], or [B, Hq] for the slopes). Host arrays of another float dtype
        and lists are converted, torch tensors are converted with torch; other
        device arrays are passed as they are (the library rejects a wrong
        dtype). finite: reject non-finite host values that are copied to the
        device (the library reads them on the CPU backend only)."""
        want = np_dtype(code)
        obj = self._conv(obj)
        if _is_torch(obj):
            obj = _torch_to(obj, want.name, name)
            if not self.staged:
                return _view_of(obj, name)
            obj = obj.detach().numpy()
        elif _is_device_obj(obj):
            return _view_of(obj, name)
        if isinstance(obj, np.ndarray):
            if not is_float_dtype(obj.dtype):
                _fail(_lib.FLASHC_ERR_DTYPE, "%s has dtype %s; it must be %s (other float "
                      "dtypes are converted)" % (name, obj.dtype.name, want.name))
            arr = obj if obj.dtype == want else obj.astype(want)
        else:
            arr = np.asarray(obj, dtype=want)
        if self.staged:
            if finite and not np.isfinite(arr).all():
                bad = np.argwhere(~np.isfinite(arr))[0]
                _fail(_lib.FLASHC_ERR_INVALID_ARGUMENT, "%s[%s]=%g is not finite"
                      % (name, ", ".join(str(int(i)) for i in bad), arr[tuple(bad)]))
            arr = cuda.to_device(arr)
        return _view_of(arr, name)

    def output(self, out, shape, code, name):
        """A writable view for an output: `out` when given, else a new array."""
        out = self._conv(out)
        if self.staged:
            if out is not None:
                if not isinstance(out, np.ndarray):
                    _fail(_lib.FLASHC_ERR_DEVICE_MISMATCH, "%s must be a NumPy array" % name)
                if out.shape != tuple(shape):
                    _fail(_lib.FLASHC_ERR_SHAPE, "%s.shape=%s, expected %s"
                          % (name, out.shape, tuple(shape)))
                if dtype_code(out.dtype, name) != code:
                    _fail(_lib.FLASHC_ERR_DTYPE, "%s has dtype %s, expected %s"
                          % (name, out.dtype.name, _CODE_NAMES[code]))
                if not out.flags.writeable:
                    _fail(_lib.FLASHC_ERR_INVALID_ARGUMENT, "%s is a read-only array" % name)
            d = cuda.empty(shape, np_dtype(code))
            self._host_outs.append((d, out))
            return _view_of(d, name, writable=True)
        if out is None:
            if self.device:
                out = cuda.empty(shape, np_dtype(code))
            else:
                out = np.empty(shape, np_dtype(code))
        view = _view_of(out, name, writable=True)
        self._outs.append(view)
        return view

    def result(self, view):
        """What the caller gets for an output view (after run())."""
        if self.staged:
            for d, user in self._host_outs:
                if d is view.obj:
                    h = d.numpy()
                    if user is None:
                        return h
                    np.copyto(user, h)
                    return self._orig(user)
        return self._orig(view.obj)

    def finish(self):
        if self.staged:
            cuda.synchronize()  # the user's stream may not be the legacy one
        elif self.device:
            for v in self._outs:  # written on self.stream: later users order after it
                if isinstance(v.obj, cuda.DeviceArray):
                    v.obj._alloc.stream = self.stream or 1


def _tensor_or_null(view):
    return ctypes.byref(view.tensor()) if view is not None else None


def _torch_to(t, dtype_name, name):
    """torch tensor t as torch.<dtype_name> (same device); a float tensor of
    another precision is converted, anything else is FlashcError."""
    if str(t.dtype) == "torch." + dtype_name:
        return t
    if not t.is_floating_point():
        _fail(_lib.FLASHC_ERR_DTYPE, "%s has dtype %s; it must be torch.%s (other float "
              "dtypes are converted)" % (name, t.dtype, dtype_name))
    import torch  # present: t is a torch tensor
    return t.detach().to(dtype=getattr(torch, dtype_name))


# --------------------------------------------------------------- attention

def _int_arg(x, what):
    """An int (or NumPy integer); a float, bool or string is FlashcError
    (FLASHC_ERR_INVALID_ARGUMENT, a ValueError), like every other bad value."""
    if isinstance(x, bool) or not hasattr(x, "__index__"):
        _fail(_lib.FLASHC_ERR_INVALID_ARGUMENT, "%s must be an integer, got %r" % (what, x))
    return int(x.__index__())


def _window_pair(window):
    """(left, right) of window=: a pair of integers, -1 or None = unbounded.
    The library checks the values themselves (>= -1, causal with right <= 0)."""
    if window is None:
        return -1, -1
    try:
        wl, wr = window
    except (TypeError, ValueError):
        _fail(_lib.FLASHC_ERR_INVALID_ARGUMENT,
              "window must be a pair (left, right), -1 or None meaning unbounded; got %r "
              "(for a sliding window of n keys to the left, window=(n, 0))" % (window,))
    return tuple(-1 if w is None else _int_arg(w, "window %s" % side)
                 for w, side in ((wl, "left"), (wr, "right")))


def attn_params(backend, *, causal=False, softmax_scale=None, window=(-1, -1), sink_tokens=0,
                softcap=None, sinks=None, alibi_slopes=None, dsinks=None, stream=None,
                deterministic=True):
    """The flashc_attn_params of one call: the one builder of every binding
    (flashc.attention, flashc.attention_backward, flashc.torch).

    backend: a flashc_backend code. stream: a cudaStream_t as an int, or None.
    sinks, alibi_slopes, dsinks: flashc_tensor descriptions or None (the
    returned struct holds pointers to them and keeps them alive).
    softmax_scale: None or 0 -> 1/sqrt(D), as in C. softcap: None or 0 -> off.
    window: (left, right), -1 or None = unbounded. Values go to the library
    as given; it validates them (negative softcap, NaN scale, ...)."""
    p = _lib.attn_params_default()
    p.backend = backend
    p.softmax_scale = 0.0 if softmax_scale is None else float(softmax_scale)
    p.causal = 1 if causal else 0
    p.deterministic = 1 if deterministic else 0
    wl, wr = _window_pair(window)
    p.window_left = wl
    p.window_right = wr
    p.num_sink_tokens = _int_arg(sink_tokens, "sink_tokens")
    p.softcap = 0.0 if softcap is None else float(softcap)
    # The 0.1 fields stay NULL: sink logits and their gradient travel as tensors.
    p.sinks = ctypes.pointer(sinks) if sinks is not None else None
    p.alibi_slopes = ctypes.pointer(alibi_slopes) if alibi_slopes is not None else None
    p.dsinks = ctypes.pointer(dsinks) if dsinks is not None else None
    p.stream = stream
    return p


def _tensor_of(view):
    return view.tensor() if view is not None else None


def _split_out(out, n, what):
    if out is None:
        return (None,) * n
    if isinstance(out, (tuple, list)):
        if len(out) > n:
            raise TypeError("out= for %s takes at most %d arrays" % (what, n))
        return tuple(out) + (None,) * (n - len(out))
    return (out,) + (None,) * (n - 1)


def _head_count(view, axis):
    return view.shape[axis] if len(view.shape) == 4 else 1


_ATTN_DOC = """
    Arguments (flashc.h, "Attention", has the exact semantics):
      q [B, Sq, Hq, D], k and v [B, Sk, Hkv, D]: one dtype of float32,
        float16, bfloat16, float64; any strides (a [B, H, S, D] array is
        passed as `x.transpose(0, 2, 1, 3)`); Hq % Hkv == 0 (GQA/MQA).
      softmax_scale: the logit is softmax_scale * <q_i, k_j>; None or 0 means
        1/sqrt(D) (the C default).
      softcap: None or 0 = off; c > 0 caps the scaled logit to c * tanh(x / c)
        (Gemma-2); finite and >= 0.
      alibi_slopes: None = off; [Hq] or [B, Hq] slopes, float32 (float64 for
        float64 inputs), any strides: the logit gets -slope * |i + Sk - Sq - j|
        after the softcap (bottom-right aligned like the masks). Host arrays
        of another float dtype and torch tensors are converted; other device
        arrays must have the right dtype. They must be finite: checked on the
        CPU backend and for NumPy arrays sent to the device; device memory is
        not inspected.
      causal: bottom-right aligned (row i sees j <= i + Sk - Sq).
      window=(left, right), -1 = unbounded; sink_tokens: keys [0, N) stay
        visible outside the window.
      sinks: None, or [Hq] per-head sink logits (GPT-OSS; float32, float64 for
        float64 inputs, converted like the slopes, any stride): one extra
        logit in every softmax denominator.
      backend: "auto" (where the arrays live), "cpu" or "cuda" (NumPy arrays
        are then copied to the device and back). stream: a cudaStream_t (int)
        or a stream object (__cuda_stream__, .cuda_stream, .ptr), used on the
        CUDA backend; None = the stream the device inputs were produced on
        (__cuda_array_interface__ v3 "stream", __cuda_stream__), else the
        legacy default stream. Inputs from other streams are waited for.
      Arrays: NumPy, flashc.cuda.DeviceArray, torch tensors,
        __cuda_array_interface__ objects (CuPy, Numba) and __dlpack__ objects
        (JAX, ...; host or CUDA memory).
    Order of operations: scale, softcap, ALiBi, mask, softmax with sink.
"""


def attention(q, k, v, *, causal=False, softmax_scale=None, window=(-1, -1), sink_tokens=0,
              sinks=None, softcap=None, alibi_slopes=None, return_lse=False, backend="auto",
              out=None, stream=None):
    """Scaled dot-product attention, FlashAttention-style.

    Returns o [B, Sq, Hq, D] with q's dtype, or (o, lse) with lse
    [B, Hq, Sq] float32 (float64 for float64 inputs; natural log) when
    return_lse. out= is o, or a pair (o, lse).
    """
    o_out, lse_out = _split_out(out, 2, "attention")
    call = _Call(backend, {"q": q, "k": k, "v": v, "sinks": sinks,
                           "alibi_slopes": alibi_slopes},
                 {"out": o_out, "lse": lse_out}, stream)
    qv, kv, vv = call.input(q, "q"), call.input(k, "k"), call.input(v, "v")
    fcode = _lse_code(qv.code)
    sv = call.head_vector(sinks, "sinks", fcode) if sinks is not None else None
    av = (call.head_vector(alibi_slopes, "alibi_slopes", fcode, finite=True)
          if alibi_slopes is not None else None)
    ov = call.output(o_out, qv.shape, qv.code, "out")
    lv = None
    if (return_lse or lse_out is not None) and len(qv.shape) == 4:
        B, Sq, Hq, _ = qv.shape
        lv = call.output(lse_out, (B, Hq, Sq), fcode, "lse")
    p = attn_params(call.backend, causal=causal, softmax_scale=softmax_scale, window=window,
                    sink_tokens=sink_tokens, softcap=softcap, sinks=_tensor_of(sv),
                    alibi_slopes=_tensor_of(av), stream=call.stream)
    st = _lib.flashc_attn_fwd(ctypes.byref(qv.tensor()), ctypes.byref(kv.tensor()),
                              ctypes.byref(vv.tensor()), ctypes.byref(ov.tensor()),
                              _tensor_or_null(lv), ctypes.byref(p))
    _check(st)
    call.finish()
    o = call.result(ov)
    if return_lse:
        return o, (call.result(lv) if lv is not None else None)
    return o


attention.__doc__ += _ATTN_DOC


def attention_backward(do, q, k, v, o, lse, *, causal=False, softmax_scale=None,
                       window=(-1, -1), sink_tokens=0, sinks=None, softcap=None,
                       alibi_slopes=None, backend="auto", out=None, stream=None,
                       deterministic=True):
    """Gradients of attention() by recomputation from lse: call it with the
    keyword arguments of the forward call that produced o and lse.

    Returns (dq, dk, dv), or (dq, dk, dv, dsinks) when sinks is given
    (dsinks [Hq], the sinks' float type, overwritten). The softcap's
    derivative (1 - tanh^2) is applied; the ALiBi slopes are constants and
    get no gradient. out= may be a tuple of those arrays (any strides).
    deterministic=False lets the CUDA backend use float atomics for dq.
    """
    n_out = 4 if sinks is not None else 3
    outs = _split_out(out, n_out, "attention_backward")
    call = _Call(backend, {"do": do, "q": q, "k": k, "v": v, "o": o, "lse": lse, "sinks": sinks,
                           "alibi_slopes": alibi_slopes},
                 {"dq": outs[0], "dk": outs[1], "dv": outs[2],
                  "dsinks": outs[3] if n_out == 4 else None}, stream)
    dov = call.input(do, "do")
    qv, kv, vv = call.input(q, "q"), call.input(k, "k"), call.input(v, "v")
    ov, lv = call.input(o, "o"), call.input(lse, "lse")
    fcode = _lse_code(qv.code)
    sv = dsv = None
    if sinks is not None:
        sv = call.head_vector(sinks, "sinks", fcode)
        dsv = call.output(outs[3], (_head_count(qv, 2),), fcode, "dsinks")
    av = (call.head_vector(alibi_slopes, "alibi_slopes", fcode, finite=True)
          if alibi_slopes is not None else None)
    dqv = call.output(outs[0], qv.shape, qv.code, "dq")
    dkv = call.output(outs[1], kv.shape, kv.code, "dk")
    dvv = call.output(outs[2], vv.shape, vv.code, "dv")
    p = attn_params(call.backend, causal=causal, softmax_scale=softmax_scale, window=window,
                    sink_tokens=sink_tokens, softcap=softcap, sinks=_tensor_of(sv),
                    alibi_slopes=_tensor_of(av), dsinks=_tensor_of(dsv),
                    stream=call.stream, deterministic=deterministic)
    st = _lib.flashc_attn_bwd(ctypes.byref(dov.tensor()), ctypes.byref(qv.tensor()),
                              ctypes.byref(kv.tensor()), ctypes.byref(vv.tensor()),
                              ctypes.byref(ov.tensor()), ctypes.byref(lv.tensor()),
                              ctypes.byref(dqv.tensor()), ctypes.byref(dkv.tensor()),
                              ctypes.byref(dvv.tensor()), None, ctypes.byref(p))
    _check(st)
    call.finish()
    res = (call.result(dqv), call.result(dkv), call.result(dvv))
    if sinks is not None:
        res = res + (call.result(dsv),)
    return res


# -------------------------------------------------------- weighted row-sum

def _exec_params(call):
    p = _lib.exec_params_default()
    p.backend = call.backend
    p.stream = call.stream
    return p


def weighted_sum(x, w, *, backend="auto", out=None, stream=None):
    """y[...] = sum_d x[..., d] * w[d]. x [..., D] any strides (zero strides
    too), w [D]; y has x.shape[:-1] (a 0-d array when x is 1-D)."""
    call = _Call(backend, {"x": x, "w": w}, {"out": out}, stream)
    xv, wv = call.input(x, "x"), call.input(w, "w")
    yv = call.output(out, xv.shape[:-1], xv.code, "out")
    p = _exec_params(call)
    _check(_lib.flashc_weighted_sum(ctypes.byref(xv.tensor()), ctypes.byref(wv.tensor()),
                                    ctypes.byref(yv.tensor()), ctypes.byref(p)))
    call.finish()
    return call.result(yv)


def weighted_sum_backward(dy, x, w, *, backend="auto", out=None, stream=None, need_dx=True,
                          need_dw=True):
    """(dx, dw) of weighted_sum: dx[..., d] = dy[...] * w[d],
    dw[d] = sum over rows of dy * x. need_dx / need_dw = False skips that
    output (returned as None). out= may be a pair (dx, dw)."""
    dx_out, dw_out = _split_out(out, 2, "weighted_sum_backward")
    if not need_dx and not need_dw:
        raise ValueError("weighted_sum_backward: need_dx and need_dw cannot both be False")
    call = _Call(backend, {"dy": dy, "x": x, "w": w}, {"dx": dx_out, "dw": dw_out}, stream)
    dyv, xv, wv = call.input(dy, "dy"), call.input(x, "x"), call.input(w, "w")
    dxv = call.output(dx_out, xv.shape, xv.code, "dx") if need_dx else None
    dwv = call.output(dw_out, wv.shape, wv.code, "dw") if need_dw else None
    p = _exec_params(call)
    _check(_lib.flashc_weighted_sum_bwd(ctypes.byref(dyv.tensor()), ctypes.byref(xv.tensor()),
                                        ctypes.byref(wv.tensor()), _tensor_or_null(dxv),
                                        _tensor_or_null(dwv), ctypes.byref(p)))
    call.finish()
    return (call.result(dxv) if dxv is not None else None,
            call.result(dwv) if dwv is not None else None)


def attention_flops(B, Sq, Sk, Hq, D, causal=False):
    """Forward FLOPs counted as 4·B·Hq·Sq·Sk·D (halved when causal and Sq = Sk),
    the convention of FlashAttention's benchmarks."""
    f = 4.0 * B * Hq * Sq * Sk * D
    return f / 2 if causal and Sq == Sk else f

