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
C cannot see (host/device placement, NumPy byte strides, and the values of
host arrays that are copied to the device, which C does not read there: the
ALiBi slopes, and the index arrays of ragged batches and KV caches, checked
with the library's own messages).

Index arrays (cu_seqlens, cache_seqlens, block_table, cache_batch_idx) are
int32: host arrays and lists of other integer dtypes are converted, torch
tensors with torch; host index arrays in a device call are copied to the
device (they do not count as mixing host and device memory). KV caches that
a call appends to are written in place wherever they live; NumPy caches with
backend="cuda" are copied back after the call.

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
                      bfloat16 as _bfloat16, dtype_code, index_code, index_host,
                      is_float_dtype, lse_code as _lse_code, np_dtype)
from ._errors import FlashcError, check as _check, fail as _fail

__all__ = [
    "FlashcError", "attention", "attention_backward", "attention_varlen",
    "attention_varlen_backward", "attention_with_kvcache", "weighted_sum",
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
    ['avx512_bf16'] (the BF16 forward on vdpbf16ps) or ['amx_bf16'] (on AMX
    tiles); FLASHC_CPU_BF16=0 turns both off, FLASHC_CPU_AMX=0 the AMX one,
    read at every call."""
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
        self.shape = tuple(map(int, shape))
        self.strides = tuple(map(int, strides))  # in elements
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
    if type(obj) is np.ndarray:  # the common case first: no attribute probing
        return False
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


def _view_of(obj, name, writable=False, index=False):
    """A _View of obj without copying it (except a NumPy input whose byte
    strides are not a multiple of its itemsize, which is copied). index: an
    index array (int32 only) instead of a data array (flashc's float types)."""
    code_of = index_code if index else dtype_code
    if type(obj) is np.ndarray:  # the common host case: straight to the NumPy path below
        return _ndarray_view(obj, name, writable, code_of)
    if isinstance(obj, cuda.DeviceArray):
        code = code_of(obj.dtype, name)
        es = _elem_strides(obj.strides, obj.itemsize)
        return _View(obj.ptr, obj.shape, es, code, True, obj)
    if _is_torch(obj):
        tname = str(obj.dtype)[len("torch."):]
        code = _DTYPE_NAMES.get(tname) if not index else (
            _lib.FLASHC_I32 if tname == "int32" else None)
        if code is None and index:
            _fail(_lib.FLASHC_ERR_DTYPE, "%s has dtype torch.%s; index arrays must be int32"
                  % (name, tname))
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
        code = _CAI_TYPES.get(typestr) if not index else (
            _lib.FLASHC_I32 if typestr == "<i4" else None)
        if code is None and index:
            _fail(_lib.FLASHC_ERR_DTYPE, "%s has typestr %r; index arrays must be int32 ('<i4')"
                  % (name, cai["typestr"]))
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

    return _ndarray_view(obj if isinstance(obj, np.ndarray) else np.asarray(obj), name, writable, code_of)


def _native(arr, name, writable):
    """arr in native byte order, which is what the library reads: an input
    in the other order is converted (a copy, by value), an array the call
    writes is an error."""
    if arr.dtype.isnative:
        return arr
    if writable:
        _fail(_lib.FLASHC_ERR_DTYPE, "%s has non-native byte order (dtype %s); arrays flashc "
              "writes must be native-endian" % (name, arr.dtype.str))
    return arr.astype(arr.dtype.newbyteorder("="))


def _ndarray_view(arr, name, writable, code_of):
    """_view_of for a NumPy array (in native byte order: _native)."""
    arr = _native(arr, name, writable)
    code = code_of(arr.dtype, name)
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
        self._inout = []       # staged arrays updated in place: (device_array, host array)
        self._keep = []        # index views made here (copies): alive until the call is over
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
            obj = cuda.to_device(arr)  # by value: device arrays are native-endian
        return _view_of(obj, name)

    def inout(self, obj, name):
        """An input the call also writes in place (the KV caches with
        k_new/v_new). Staged: copied to the device and, after the call, back
        into the caller's host array (finish())."""
        obj = self._conv(obj)
        if not self.staged:
            view = _view_of(obj, name, writable=True)
            self._outs.append(view)
            return view
        arr = _native(np.asarray(obj), name, True)  # a torch CPU tensor: a view of its memory
        dtype_code(arr.dtype, name)
        if not arr.flags.writeable:
            _fail(_lib.FLASHC_ERR_INVALID_ARGUMENT, "%s is a read-only array (it is updated "
                  "in place)" % name)
        d = cuda.to_device(arr)
        self._inout.append((d, arr))
        return _view_of(d, name, writable=True)

    def index(self, obj, name):
        """(view, host): an index array (cu_seqlens, cache_seqlens, block_table,
        cache_batch_idx) as an int32 view where the call runs, and its values
        as a NumPy int32 array when they are on the host (else None).
        Host arrays and lists of another integer dtype are converted (a
        copy), torch tensors with torch; host arrays for a device call are
        copied to the device. Device arrays must be int32 already. The
        call keeps the view (and any copy it made) alive."""
        view, host = self._index(self._conv(obj), name)
        self._keep.append(view)
        return view, host

    def _index(self, obj, name):
        if _is_torch(obj):
            if str(obj.dtype) != "torch.int32":
                if obj.is_floating_point() or obj.is_complex() or str(obj.dtype) == "torch.bool":
                    _fail(_lib.FLASHC_ERR_DTYPE, "%s has dtype %s; index arrays must be "
                          "integers (int32; other integer dtypes are converted)"
                          % (name, obj.dtype))
                import torch  # present: obj is a torch tensor
                obj = obj.detach().to(dtype=torch.int32)
            if obj.is_cuda:
                return _view_of(obj, name, index=True), None
            obj = obj.detach().numpy()
        elif _is_device_obj(obj):
            return _view_of(obj, name, index=True), None
        host = index_host(obj, name)
        if not self.on_device:
            return _view_of(host, name, index=True), host
        arr = cuda.to_device(host)
        # The copy ran on the legacy stream (cudaMemcpy from pageable memory may
        # return before its DMA lands): order the call's stream after it.
        cuda._stream_wait(self.stream, 1)
        return _view_of(arr, name, index=True), host

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
                _native(out, name, True)
                if out.shape != tuple(shape):
                    _fail(_lib.FLASHC_ERR_SHAPE, "%s.shape=%s, expected %s"
                          % (name, out.shape, tuple(shape)))
                if dtype_code(out.dtype, name) != code:
                    _fail(_lib.FLASHC_ERR_DTYPE, "%s has dtype %s, expected %s"
                          % (name, out.dtype.name, _CODE_NAMES[code]))
                if not out.flags.writeable:
                    _fail(_lib.FLASHC_ERR_INVALID_ARGUMENT, "%s is a read-only array" % name)
            # A given out= starts on the device with its current contents:
            # what the call does not write (rows outside every sequence of a
            # ragged call) comes back unchanged.
            # (np.array, not np.ascontiguousarray: that makes a 0-d out 1-d.)
            d = cuda.empty(shape, np_dtype(code)) if out is None else cuda.to_device(np.array(out, order="C"))
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
            for d, host in self._inout:
                np.copyto(host, d.numpy())
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
    """An int (or NumPy integer) that fits int64 (the ABI's fields; ctypes
    would wrap a larger one silently); a float, bool or string, or a value
    outside int64, is FlashcError (FLASHC_ERR_INVALID_ARGUMENT, a
    ValueError), like every other bad value."""
    if isinstance(x, bool) or not hasattr(x, "__index__"):
        _fail(_lib.FLASHC_ERR_INVALID_ARGUMENT, "%s must be an integer, got %r" % (what, x))
    v = int(x.__index__())
    if not -(1 << 63) <= v < (1 << 63):
        _fail(_lib.FLASHC_ERR_INVALID_ARGUMENT, "%s=%d does not fit int64" % (what, v))
    return v


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


# Built params of recent calls without tensors attached, as bytes: a decode
# step pays every microsecond of this builder, and a loop calls it with the
# same options every time. Bounded. Cached only for values whose type fixes
# how they are converted (ints where ints are required, int/float/None
# elsewhere), so that a value the builder rejects (a float or bool
# sink_tokens, say) is never served from the cache.
_PARAMS_CACHE = {}
_PARAMS_CACHE_MAX = 256


def _params_key(backend, causal, softmax_scale, window, sink_tokens, softcap, deterministic):
    if type(backend) is not int or type(sink_tokens) is not int:
        return None
    if type(window) in (tuple, list):
        if len(window) != 2:
            return None
        wl, wr = window
        if not ((wl is None or type(wl) is int) and (wr is None or type(wr) is int)):
            return None
        window = (wl, wr)
    elif window is not None:
        return None
    for x in (softmax_scale, softcap):
        if x is not None and type(x) is not int and type(x) is not float:
            return None
    return (backend, 1 if causal else 0, softmax_scale, window, sink_tokens, softcap,
            1 if deterministic else 0)


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
    key = None
    if sinks is None and alibi_slopes is None and dsinks is None:
        key = _params_key(backend, causal, softmax_scale, window, sink_tokens, softcap, deterministic)
        raw = _PARAMS_CACHE.get(key) if key is not None else None
        if raw is not None:
            p = _lib.flashc_attn_params.from_buffer_copy(raw)
            p.stream = stream
            return p
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
    if key is not None and len(_PARAMS_CACHE) < _PARAMS_CACHE_MAX:
        _PARAMS_CACHE[key] = bytes(p)  # (stream not set yet: NULL in the cached copy)
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


def _modifiers(call, code, sinks, alibi_slopes):
    """(fcode, sinks view, slopes view): the float type of lse / sinks /
    slopes for inputs of `code`, and the per-head vectors where the call runs."""
    fcode = _lse_code(code)
    sv = call.head_vector(sinks, "sinks", fcode) if sinks is not None else None
    av = (call.head_vector(alibi_slopes, "alibi_slopes", fcode, finite=True)
          if alibi_slopes is not None else None)
    return fcode, sv, av


def _params(call, mask, sv, av, dsv=None, deterministic=True):
    """attn_params of a call: mask holds causal, softmax_scale, window,
    sink_tokens and softcap as the caller gave them."""
    return attn_params(call.backend, sinks=_tensor_of(sv), alibi_slopes=_tensor_of(av),
                       dsinks=_tensor_of(dsv), stream=call.stream, deterministic=deterministic,
                       **mask)


def _fwd_result(call, ov, lv, return_lse):
    call.finish()
    o = call.result(ov)
    if return_lse:
        return o, (call.result(lv) if lv is not None else None)
    return o


def _bwd_outputs(call, outs, qv, kv, vv, sinks, fcode, n_heads):
    """(dq, dk, dv, dsinks or None) output views of a backward."""
    dsv = call.output(outs[3], (n_heads,), fcode, "dsinks") if sinks is not None else None
    return (call.output(outs[0], qv.shape, qv.code, "dq"),
            call.output(outs[1], kv.shape, kv.code, "dk"),
            call.output(outs[2], vv.shape, vv.code, "dv"), dsv)


def _bwd_result(call, dqv, dkv, dvv, dsv):
    call.finish()
    res = (call.result(dqv), call.result(dkv), call.result(dvv))
    return res + (call.result(dsv),) if dsv is not None else res


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
    fcode, sv, av = _modifiers(call, qv.code, sinks, alibi_slopes)
    ov = call.output(o_out, qv.shape, qv.code, "out")
    lv = None
    if (return_lse or lse_out is not None) and len(qv.shape) == 4:
        B, Sq, Hq, _ = qv.shape
        lv = call.output(lse_out, (B, Hq, Sq), fcode, "lse")
    p = _params(call, dict(causal=causal, softmax_scale=softmax_scale, window=window,
                           sink_tokens=sink_tokens, softcap=softcap), sv, av)
    _check(_lib.flashc_attn_fwd(ctypes.byref(qv.tensor()), ctypes.byref(kv.tensor()),
                                ctypes.byref(vv.tensor()), ctypes.byref(ov.tensor()),
                                _tensor_or_null(lv), ctypes.byref(p)))
    return _fwd_result(call, ov, lv, return_lse)


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
    deterministic=False lets the CUDA backend add dq's partial sums in any
    order (faster; the last bits may then differ from run to run).
    """
    outs = _split_out(out, 4 if sinks is not None else 3, "attention_backward") + (None,)
    call = _Call(backend, {"do": do, "q": q, "k": k, "v": v, "o": o, "lse": lse, "sinks": sinks,
                           "alibi_slopes": alibi_slopes},
                 {"dq": outs[0], "dk": outs[1], "dv": outs[2], "dsinks": outs[3]}, stream)
    dov = call.input(do, "do")
    qv, kv, vv = call.input(q, "q"), call.input(k, "k"), call.input(v, "v")
    ov, lv = call.input(o, "o"), call.input(lse, "lse")
    fcode, sv, av = _modifiers(call, qv.code, sinks, alibi_slopes)
    dqv, dkv, dvv, dsv = _bwd_outputs(call, outs, qv, kv, vv, sinks, fcode,
                                      qv.shape[2] if len(qv.shape) == 4 else 1)
    p = _params(call, dict(causal=causal, softmax_scale=softmax_scale, window=window,
                           sink_tokens=sink_tokens, softcap=softcap), sv, av, dsv, deterministic)
    _check(_lib.flashc_attn_bwd(ctypes.byref(dov.tensor()), ctypes.byref(qv.tensor()),
                                ctypes.byref(kv.tensor()), ctypes.byref(vv.tensor()),
                                ctypes.byref(ov.tensor()), ctypes.byref(lv.tensor()),
                                ctypes.byref(dqv.tensor()), ctypes.byref(dkv.tensor()),
                                ctypes.byref(dvv.tensor()), None, ctypes.byref(p)))
    return _bwd_result(call, dqv, dkv, dvv, dsv)


# ------------------------------------------- ragged batches and KV caches

def _ragged_fn(fn, name):
    if fn is None:
        _fail(_lib.FLASHC_ERR_UNSUPPORTED, "%s has no %s: the library predates ragged batches "
              "and KV caches; rebuild it" % (_lib.library_path, name))
    return fn


def _device_indices(**arrays):
    """The index arrays that live on the device: they take part in placement
    (a device index array in a host call is an error); host ones do not (they
    are copied to the device for a device call)."""
    return {n: a for n, a in arrays.items() if a is not None and _is_device_obj(a)}


def _max_seqlen(host, given, total, which, check):
    """max_seqlen_<which> of a varlen call: `given` (an int), or for None
    the longest sequence of host cu_seqlens `host` (NumPy), 0 when they are
    device memory (the library finds it). check: validate the host values
    here, as they go to the device (the library checks those of a CPU call
    itself, and does not inspect device memory). total: Tq or Tk."""
    name = "cu_seqlens_" + which
    longest = None
    if host is not None and host.ndim == 1 and host.shape[0] >= 2:  # else the library says
        c = host.astype(np.int64)
        if check:
            if c[0] < 0:
                _fail(_lib.FLASHC_ERR_INVALID_ARGUMENT, "%s[0]=%d is negative" % (name, c[0]))
            down = np.flatnonzero(c[1:] < c[:-1])
            if down.size:
                b = int(down[0])
                _fail(_lib.FLASHC_ERR_INVALID_ARGUMENT, "%s[%d]=%d < %s[%d]=%d: cu_seqlens must "
                      "be non-decreasing" % (name, b + 1, c[b + 1], name, b, c[b]))
            if c[-1] > total:
                _fail(_lib.FLASHC_ERR_INVALID_ARGUMENT, "%s[%d]=%d exceeds %s.shape[0]=%d (the "
                      "packed rows)" % (name, c.shape[0] - 1, c[-1], which, total))
        lens = c[1:] - c[:-1]
        longest = max(int(lens.max()), 0)
    if given is None:
        return longest or 0
    m = _int_arg(given, "max_seqlen_" + which)
    if check and longest is not None and 0 < m < longest:
        b = int(np.flatnonzero(lens > m)[0])
        _fail(_lib.FLASHC_ERR_INVALID_ARGUMENT, "sequence %d has %d rows (%s[%d] - %s[%d]), more "
              "than seqs.max_seqlen_%s=%d" % (b, lens[b], name, b + 1, name, b, which, m))
    return m


def _varlen_seqs(call, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, qv, kv):
    """The flashc_varlen of a call (it keeps its tensors alive)."""
    seqs = _lib.varlen_default()
    for which, cu, given, view in (("q", cu_seqlens_q, max_seqlen_q, qv),
                                   ("k", cu_seqlens_k, max_seqlen_k, kv)):
        cv, host = call.index(cu, "cu_seqlens_" + which)
        setattr(seqs, "cu_seqlens_" + which, ctypes.pointer(cv.tensor()))
        setattr(seqs, "max_seqlen_" + which,
                _max_seqlen(host, given, view.shape[0] if view.shape else 0, which,
                            call.on_device))
    return seqs


_VARLEN_DOC = """
    Packed variable-length batch (flashc.h, "Ragged batches and KV caches"):
      q [Tq, Hq, D], k and v [Tk, Hkv, D]: the B sequences' rows packed
        along axis 0; sequence b owns query rows cu_seqlens_q[b] ..
        cu_seqlens_q[b+1] - 1 and keys cu_seqlens_k[b] .. cu_seqlens_k[b+1] - 1.
      cu_seqlens_q, cu_seqlens_k: [B + 1] non-decreasing int32 index arrays
        (NumPy arrays or lists of another integer dtype are converted; torch
        tensors too; other device arrays must be int32). Host arrays for a
        device call are checked and copied to the device.
      max_seqlen_q, max_seqlen_k: >= the longest sequence; None = computed
        from host cu_seqlens, or 0 (the library finds it, which on CUDA
        costs a synchronising copy) for device ones.
      Every keyword below applies per sequence, exactly as flashc.attention
      with B = 1 and that sequence's lengths (masks and ALiBi bottom-right
      aligned per sequence; [B, Hq] slopes are per sequence). Rows of o and
      lse outside every sequence are not written: they keep what out= held
      (a new array holds unspecified values there).
"""

_KVCACHE_DOC = """
    KV cache (flashc.h, "Ragged batches and KV caches"), forward only:
      q [B, Sn, Hq, D]: Sn new query tokens per sequence (decode: 1).
      k_cache, v_cache [Bc, Sc, Hkv, D], one cache row per sequence; with
        block_table, the pages [num_pages, page_size, Hkv, D].
      cache_seqlens: int32 [B] (or one int for every sequence): tokens
        already in each sequence's cache. Not advanced by the call.
      k_new, v_new: None or [B, Sk_new, Hkv, D], written into the caches IN
        PLACE at positions cache_seqlens[b] .. cache_seqlens[b] + Sk_new - 1
        before attending (both or neither). The caches must then be
        writable: NumPy caches of a CPU call and device caches are updated
        where they are; NumPy caches with backend="cuda" are copied to the
        device and copied back into the NumPy arrays after the call (whole
        caches, each call: keep a serving cache on the device instead).
      cache_batch_idx: None or int32 [B]: sequence b uses cache row
        cache_batch_idx[b] (not with block_table).
      block_table: None or int32 [B, max_pages]: position t of sequence b is
        row t % page_size of page block_table[b, t // page_size].
      Sequence b attends to its keys 0 .. cache_seqlens[b] + Sk_new - 1 (they
      must fit the cache); cache positions past them are never read.
      Index arrays are converted and placed as in attention_varlen. Every
      keyword below applies per sequence, as flashc.attention with B = 1,
      Sq = Sn and Sk = cache_seqlens[b] + Sk_new would.
"""


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None,
                     *, causal=False, softmax_scale=None, window=(-1, -1), sink_tokens=0,
                     sinks=None, softcap=None, alibi_slopes=None, return_lse=False,
                     backend="auto", out=None, stream=None):
    """Attention over a packed batch of sequences of different lengths.

    Returns o [Tq, Hq, D] with q's dtype, or (o, lse) with lse [Hq, Tq]
    (FlashAttention's varlen layout; float32, float64 for float64 inputs)
    when return_lse. out= is o, or a pair (o, lse).
    """
    fn = _ragged_fn(_lib.flashc_attn_varlen_fwd, "flashc_attn_varlen_fwd")
    o_out, lse_out = _split_out(out, 2, "attention_varlen")
    call = _Call(backend, dict({"q": q, "k": k, "v": v, "sinks": sinks,
                                "alibi_slopes": alibi_slopes},
                               **_device_indices(cu_seqlens_q=cu_seqlens_q,
                                                 cu_seqlens_k=cu_seqlens_k)),
                 {"out": o_out, "lse": lse_out}, stream)
    qv, kv, vv = call.input(q, "q"), call.input(k, "k"), call.input(v, "v")
    seqs = _varlen_seqs(call, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, qv, kv)
    fcode, sv, av = _modifiers(call, qv.code, sinks, alibi_slopes)
    ov = call.output(o_out, qv.shape, qv.code, "out")
    lv = None
    if (return_lse or lse_out is not None) and len(qv.shape) == 3:
        Tq, Hq, _ = qv.shape
        lv = call.output(lse_out, (Hq, Tq), fcode, "lse")
    p = _params(call, dict(causal=causal, softmax_scale=softmax_scale, window=window,
                           sink_tokens=sink_tokens, softcap=softcap), sv, av)
    _check(fn(ctypes.byref(qv.tensor()), ctypes.byref(kv.tensor()), ctypes.byref(vv.tensor()),
              ctypes.byref(seqs), ctypes.byref(ov.tensor()), _tensor_or_null(lv),
              ctypes.byref(p)))
    return _fwd_result(call, ov, lv, return_lse)


attention_varlen.__doc__ += _VARLEN_DOC + _ATTN_DOC


def attention_varlen_backward(do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k,
                              max_seqlen_q=None, max_seqlen_k=None, *, causal=False,
                              softmax_scale=None, window=(-1, -1), sink_tokens=0, sinks=None,
                              softcap=None, alibi_slopes=None, backend="auto", out=None,
                              stream=None, deterministic=True):
    """Gradients of attention_varlen() by recomputation from lse [Hq, Tq]:
    call it with the sequences and keyword arguments of the forward call
    that produced o and lse.

    Returns (dq, dk, dv), or (dq, dk, dv, dsinks) when sinks is given
    (dsinks [Hq], summed over the sequences, overwritten), as
    attention_backward. Rows of dq, dk, dv outside every sequence are zero.
    out= may be a tuple of those arrays (any strides).
    """
    fn = _ragged_fn(_lib.flashc_attn_varlen_bwd, "flashc_attn_varlen_bwd")
    outs = _split_out(out, 4 if sinks is not None else 3, "attention_varlen_backward") + (None,)
    call = _Call(backend, dict({"do": do, "q": q, "k": k, "v": v, "o": o, "lse": lse,
                                "sinks": sinks, "alibi_slopes": alibi_slopes},
                               **_device_indices(cu_seqlens_q=cu_seqlens_q,
                                                 cu_seqlens_k=cu_seqlens_k)),
                 {"dq": outs[0], "dk": outs[1], "dv": outs[2], "dsinks": outs[3]}, stream)
    dov = call.input(do, "do")
    qv, kv, vv = call.input(q, "q"), call.input(k, "k"), call.input(v, "v")
    ov, lv = call.input(o, "o"), call.input(lse, "lse")
    seqs = _varlen_seqs(call, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, qv, kv)
    fcode, sv, av = _modifiers(call, qv.code, sinks, alibi_slopes)
    dqv, dkv, dvv, dsv = _bwd_outputs(call, outs, qv, kv, vv, sinks, fcode,
                                      qv.shape[1] if len(qv.shape) == 3 else 1)
    p = _params(call, dict(causal=causal, softmax_scale=softmax_scale, window=window,
                           sink_tokens=sink_tokens, softcap=softcap), sv, av, dsv, deterministic)
    _check(fn(ctypes.byref(dov.tensor()), ctypes.byref(qv.tensor()), ctypes.byref(kv.tensor()),
              ctypes.byref(vv.tensor()), ctypes.byref(ov.tensor()), ctypes.byref(lv.tensor()),
              ctypes.byref(seqs), ctypes.byref(dqv.tensor()), ctypes.byref(dkv.tensor()),
              ctypes.byref(dvv.tensor()), ctypes.byref(p)))
    return _bwd_result(call, dqv, dkv, dvv, dsv)


attention_varlen_backward.__doc__ += _VARLEN_DOC


def _check_kvcache_host(seqlens, batch_idx, table, B, s_new, kshape, table_shape=None):
    """Host values of the KV-cache index arrays that go to the device (the
    library checks those of a CPU call itself): lengths that fit the cache,
    cache rows and page ids in range. Wrong shapes are left to the library.
    table: the block table's host values, or None (no block table, or one
    in device memory: then table_shape is its shape, for the capacity)."""
    if len(kshape) != 4 or seqlens is None or seqlens.shape != (B,):
        return
    if table is None and table_shape is not None:
        # A paged cache whose block table is on the device: check the lengths
        # against its capacity only (the page ids are not visible here).
        if len(table_shape) != 2 or table_shape[0] != B:
            return
        sk = seqlens.astype(np.int64) + s_new
        over = np.flatnonzero((seqlens < 0) | (sk > table_shape[1] * kshape[1]))
        if over.size:
            b = int(over[0])
            _fail(_lib.FLASHC_ERR_INVALID_ARGUMENT, "cache_seqlens[%d]=%d + Sk_new=%d does not fit %d "
                  "pages of %d (block_table.shape[1]=%d)" % (b, seqlens[b], s_new, table_shape[1],
                                                             kshape[1], table_shape[1]))
        return
    lens = seqlens.astype(np.int64)
    neg = np.flatnonzero(lens < 0)
    if neg.size:
        _fail(_lib.FLASHC_ERR_INVALID_ARGUMENT, "cache_seqlens[%d]=%d is negative"
              % (neg[0], lens[neg[0]]))
    sk = lens + s_new
    rows = kshape[1]                                     # Sc, or page_size
    if table is not None:
        if table.ndim != 2 or table.shape[0] != B:
            return
        over = np.flatnonzero(sk > table.shape[1] * rows)
        if over.size:
            b = int(over[0])
            _fail(_lib.FLASHC_ERR_INVALID_ARGUMENT, "cache_seqlens[%d]=%d + Sk_new=%d keys need %d "
                  "pages of %d, but block_table.shape[1]=%d: the block table is too short"
                  % (b, lens[b], s_new, -(-sk[b] // rows), rows, table.shape[1]))
    else:
        over = np.flatnonzero(sk > rows)
        if over.size:
            b = int(over[0])
            _fail(_lib.FLASHC_ERR_INVALID_ARGUMENT, "cache_seqlens[%d]=%d + Sk_new=%d exceeds the "
                  "cache length k_cache.shape[1]=%d" % (b, lens[b], s_new, rows))
    if batch_idx is not None and batch_idx.shape == (B,):
        bad = np.flatnonzero((batch_idx < 0) | (batch_idx >= kshape[0]))
        if bad.size:
            b = int(bad[0])
            _fail(_lib.FLASHC_ERR_INVALID_ARGUMENT, "cache_batch_idx[%d]=%d is outside [0, %d) "
                  "(k_cache.shape[0])" % (b, batch_idx[b], kshape[0]))
    if table is not None:
        for b in range(B):
            need = -(-int(sk[b]) // rows)                # pages sequence b reads
            used = table[b, :need]
            bad = np.flatnonzero((used < 0) | (used >= kshape[0]))
            if bad.size:
                i = int(bad[0])
                _fail(_lib.FLASHC_ERR_INVALID_ARGUMENT, "block_table[%d, %d]=%d is outside [0, %d) "
                      "(k_cache.shape[0], the pages)" % (b, i, used[i], kshape[0]))


def attention_with_kvcache(q, k_cache, v_cache, k_new=None, v_new=None, *, cache_seqlens,
                           block_table=None, cache_batch_idx=None, causal=False,
                           softmax_scale=None, window=(-1, -1), sink_tokens=0, sinks=None,
                           softcap=None, alibi_slopes=None, return_lse=False, backend="auto",
                           out=None, stream=None):
    """Attention of new query tokens against a KV cache (contiguous or paged),
    after appending k_new / v_new to it in place (flash_attn_with_kvcache).

    Returns o [B, Sn, Hq, D] with q's dtype, or (o, lse) with lse
    [B, Hq, Sn] when return_lse. out= is o, or a pair (o, lse).
    """
    fn = _ragged_fn(_lib.flashc_attn_kvcache_fwd, "flashc_attn_kvcache_fwd")
    o_out, lse_out = _split_out(out, 2, "attention_with_kvcache")
    append = k_new is not None or v_new is not None
    caches = {"k_cache": k_cache, "v_cache": v_cache}
    inputs = dict({"q": q, "k_new": k_new, "v_new": v_new, "sinks": sinks,
                   "alibi_slopes": alibi_slopes},
                  **_device_indices(cache_seqlens=cache_seqlens, block_table=block_table,
                                    cache_batch_idx=cache_batch_idx))
    if not append:
        inputs.update(caches)
    # Appending writes the caches: they are outputs then (writable, and a
    # DLPack cache must come with the right to write).
    call = _Call(backend, inputs,
                 dict({"out": o_out, "lse": lse_out}, **(caches if append else {})), stream)
    qv = call.input(q, "q")
    if isinstance(cache_seqlens, (int, np.integer)) and not isinstance(cache_seqlens, bool):
        cache_seqlens = np.full(qv.shape[0] if qv.shape else 1, cache_seqlens, np.int64)
    get = call.inout if append else call.input
    kcv, vcv = get(k_cache, "k_cache"), get(v_cache, "v_cache")
    knv = call.input(k_new, "k_new") if k_new is not None else None
    vnv = call.input(v_new, "v_new") if v_new is not None else None
    cache = _lib.kvcache_default()
    cache.k_cache, cache.v_cache = ctypes.pointer(kcv.tensor()), ctypes.pointer(vcv.tensor())
    if knv is not None:
        cache.k_new = ctypes.pointer(knv.tensor())
    if vnv is not None:
        cache.v_new = ctypes.pointer(vnv.tensor())
    hosts = {}
    for name, obj in (("cache_seqlens", cache_seqlens), ("cache_batch_idx", cache_batch_idx),
                      ("block_table", block_table)):
        hosts[name] = None
        if obj is not None:
            iv, hosts[name] = call.index(obj, name)
            setattr(cache, name, ctypes.pointer(iv.tensor()))
    if call.on_device and len(qv.shape) == 4:
        s_new = knv.shape[1] if knv is not None and len(knv.shape) == 4 else 0
        _check_kvcache_host(hosts["cache_seqlens"], hosts["cache_batch_idx"],
                            hosts["block_table"], qv.shape[0], s_new, kcv.shape,
                            tuple(cache.block_table.contents.shape[:2]) if block_table is not None else None)
    fcode, sv, av = _modifiers(call, qv.code, sinks, alibi_slopes)
    ov = call.output(o_out, qv.shape, qv.code, "out")
    lv = None
    if (return_lse or lse_out is not None) and len(qv.shape) == 4:
        B, Sn, Hq, _ = qv.shape
        lv = call.output(lse_out, (B, Hq, Sn), fcode, "lse")
    p = _params(call, dict(causal=causal, softmax_scale=softmax_scale, window=window,
                           sink_tokens=sink_tokens, softcap=softcap), sv, av)
    _check(fn(ctypes.byref(qv.tensor()), ctypes.byref(cache), ctypes.byref(ov.tensor()),
              _tensor_or_null(lv), ctypes.byref(p)))
    return _fwd_result(call, ov, lv, return_lse)


attention_with_kvcache.__doc__ += _KVCACHE_DOC + _ATTN_DOC


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

