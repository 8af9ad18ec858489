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
  * NumPy arrays with backend="cuda"                -> copied to the device,
    run there, results copied back into NumPy arrays
Mixing host and device arrays in one call is FlashcError
(FLASHC_ERR_DEVICE_MISMATCH). Outputs are allocated C-contiguous where the
inputs live unless given through out=.
"""

import ctypes

import numpy as np

from . import _lib

__all__ = [
    "FlashcError", "attention", "attention_backward", "weighted_sum",
    "weighted_sum_backward", "backends", "backend_available", "cpu_isa", "cpu_features",
    "version",
]

# ------------------------------------------------------------------ errors


class FlashcError(ValueError):
    """A flashc call failed. `.status` is the flashc_status value,
    `.status_name` its name ("FLASHC_ERR_SHAPE"), `.message` the library's
    message (str(e) is "FLASHC_ERR_SHAPE: <message>")."""

    def __init__(self, status, message):
        self.status = int(status)
        self.status_name = _lib.flashc_status_string(self.status).decode()
        self.message = message
        super().__init__("%s: %s" % (self.status_name, message))


def _check(status):
    # The message is thread-local in the library; this runs on the calling
    # thread right after the call, so it is the call's own message.
    if status != _lib.FLASHC_OK:
        msg = _lib.flashc_last_error()
        raise FlashcError(status, msg.decode("utf-8", "replace") if msg else "")


def _fail(status, message):
    raise FlashcError(status, message)


# ------------------------------------------------------------------ dtypes

_DTYPE_NAMES = {"float32": _lib.FLASHC_F32, "float16": _lib.FLASHC_F16,
                "bfloat16": _lib.FLASHC_BF16, "float64": _lib.FLASHC_F64}
_CODE_NAMES = {v: k for k, v in _DTYPE_NAMES.items()}


def _bfloat16():
    try:
        import ml_dtypes
    except ImportError as e:  # pragma: no cover - ml_dtypes is a listed dependency
        raise ImportError("flashc: bfloat16 arrays need the ml_dtypes package "
                          "(pip install ml_dtypes)") from e
    return np.dtype(ml_dtypes.bfloat16)


def np_dtype(code):
    """NumPy dtype of a flashc_dtype value (bfloat16 through ml_dtypes)."""
    if code == _lib.FLASHC_BF16:
        return _bfloat16()
    return np.dtype(_CODE_NAMES[code])


def dtype_code(dtype, name="array"):
    """flashc_dtype of a NumPy dtype (or dtype name); FlashcError otherwise."""
    try:
        key = np.dtype(dtype).name
    except TypeError:
        key = str(dtype)
    code = _DTYPE_NAMES.get(key)
    if code is None:
        _fail(_lib.FLASHC_ERR_DTYPE, "%s has dtype %s; flashc supports float32, float16, "
              "bfloat16 and float64" % (name, key))
    return code


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
    for attr in ("cuda_stream", "ptr", "handle"):  # torch.cuda.Stream, cupy, others
        h = getattr(stream, attr, None)
        if isinstance(h, int):
            return h or None
    raise TypeError("stream must be an int (cudaStream_t) or a stream object with "
                    ".cuda_stream / .ptr, got %r" % (stream,))


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
    from . import cuda
    if isinstance(obj, cuda.DeviceArray):
        return True
    if _is_torch(obj):
        return bool(getattr(obj, "is_cuda", False))
    return hasattr(obj, "__cuda_array_interface__")


_CAI_TYPES = {"<f4": _lib.FLASHC_F32, "<f2": _lib.FLASHC_F16, "<f8": _lib.FLASHC_F64,
              "<V2": _lib.FLASHC_BF16}  # bf16 has no typestr of its own: '<V2'


def _view_of(obj, name, writable=False):
    """A _View of obj without copying it (except a NumPy input whose byte
    strides are not a multiple of its itemsize, which is copied)."""
    from . import cuda
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

    def __init__(self, backend, inputs, outs):
        # inputs / outs: {name: obj or None}
        self.backend = _backend_code(backend)
        where = {}
        for name, obj in list(inputs.items()) + list(outs.items()):
            if obj is not None:
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
                _fail(_lib.FLASHC_ERR_BACKEND_UNAVAILABLE, "backend 'cuda' is unavailable: " + msg)
        self.on_device = self.device or self.staged
        self._host_outs = []   # (device_array, user_out or None) pairs to copy back

    def input(self, obj, name):
        if self.staged:
            from . import cuda
            arr = np.asarray(obj)
            dtype_code(arr.dtype, name)
            obj = cuda.to_device(arr)
        return _view_of(obj, name)

    def small_input(self, obj, name, code, length):
        """sinks: [length] contiguous of dtype `code` (the library cannot see
        the length or dtype of a raw pointer, so they are checked here)."""
        want = np_dtype(code)
        if self.on_device and _is_device_obj(obj):
            v = _view_of(obj, name)
            if v.code != code:
                _fail(_lib.FLASHC_ERR_DTYPE, "%s has dtype %s; it must be %s"
                      % (name, _CODE_NAMES[v.code], want.name))
        else:
            arr = np.ascontiguousarray(np.asarray(obj), dtype=want)
            if self.on_device:
                from . import cuda
                arr = cuda.to_device(arr)
            v = _view_of(arr, name)
        if v.shape != (length,):
            _fail(_lib.FLASHC_ERR_SHAPE, "%s.shape=%s, expected (%d,)" % (name, v.shape, length))
        if length > 1 and v.strides[0] != 1:
            _fail(_lib.FLASHC_ERR_STRIDE, "%s must be contiguous (stride %d)" % (name, v.strides[0]))
        return v

    def output(self, out, shape, code, name):
        """A writable view for an output: `out` when given, else a new array."""
        if self.staged:
            from . import cuda
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
                from . import cuda
                out = cuda.empty(shape, np_dtype(code))
            else:
                out = np.empty(shape, np_dtype(code))
        return _view_of(out, name, writable=True)

    def result(self, view):
        """What the caller gets for an output view (after run())."""
        if self.staged:
            for d, user in self._host_outs:
                if d is view.obj:
                    h = d.numpy()
                    if user is None:
                        return h
                    np.copyto(user, h)
                    return user
        return view.obj

    def finish(self):
        if self.staged:
            from . import cuda
            cuda.synchronize()  # the user's stream may not be the legacy one


def _tensor_or_null(view):
    return ctypes.byref(view.tensor()) if view is not None else None


# --------------------------------------------------------------- attention

def _attn_params(call, causal, softmax_scale, window, sink_tokens, sinks_view, stream,
                 deterministic=True):
    p = _lib.attn_params_default()
    p.backend = call.backend
    p.softmax_scale = 0.0 if softmax_scale is None else float(softmax_scale)
    if softmax_scale is not None and p.softmax_scale == 0.0:
        _fail(_lib.FLASHC_ERR_INVALID_ARGUMENT, "softmax_scale=0 is not allowed "
              "(None means 1/sqrt(D))")
    p.causal = 1 if causal else 0
    p.deterministic = 1 if deterministic else 0
    try:
        wl, wr = window
    except (TypeError, ValueError):
        raise TypeError("window must be a pair (left, right), -1 meaning unbounded; got %r"
                        % (window,)) from None
    p.window_left = -1 if wl is None else int(wl)
    p.window_right = -1 if wr is None else int(wr)
    p.num_sink_tokens = int(sink_tokens)
    p.sink_logits = sinks_view.ptr if sinks_view is not None else None
    p.stream = _stream_handle(stream)
    return p


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


def attention(q, k, v, *, causal=False, softmax_scale=None, window=(-1, -1), sink_tokens=0,
              sinks=None, return_lse=False, backend="auto", out=None, stream=None):
    """Scaled dot-product attention, FlashAttention-style (see flashc.h).

    q [B, Sq, Hq, D], k and v [B, Sk, Hkv, D], any strides (a [B, H, S, D]
    array is passed as `x.transpose(0, 2, 1, 3)`). Returns o [B, Sq, Hq, D]
    with q's dtype, or (o, lse) with lse [B, Hq, Sq] float32 (float64 for
    float64 inputs) when return_lse. window=(left, right), -1 = unbounded;
    causal is bottom-right aligned; sink_tokens keys [0, N) stay visible
    outside the window; sinks is an optional per-head logit [Hq] (float32,
    float64 for float64 inputs). out= is o, or a pair (o, lse). stream is a
    cudaStream_t (int) or a stream object, used on the CUDA backend.
    """
    o_out, lse_out = _split_out(out, 2, "attention")
    call = _Call(backend, {"q": q, "k": k, "v": v, "sinks": sinks},
                 {"out": o_out, "lse": lse_out})
    qv, kv, vv = call.input(q, "q"), call.input(k, "k"), call.input(v, "v")
    sv = None
    if sinks is not None:
        sv = call.small_input(sinks, "sinks", _lse_code(qv.code), _head_count(qv, 2))
    ov = call.output(o_out, qv.shape, qv.code, "out")
    lv = None
    if (return_lse or lse_out is not None) and len(qv.shape) == 4:
        B, Sq, Hq, _ = qv.shape
        lv = call.output(lse_out, (B, Hq, Sq), _lse_code(qv.code), "lse")
    p = _attn_params(call, causal, softmax_scale, window, sink_tokens, sv, stream)
    st = _lib.flashc_attn_fwd(ctypes.byref(qv.tensor()), ctypes.byref(kv.tensor()),
                              ctypes.byref(vv.tensor()), ctypes.byref(ov.tensor()),
                              _tensor_or_null(lv), ctypes.byref(p))
    _check(st)
    call.finish()
    o = call.result(ov)
    if return_lse:
        return o, (call.result(lv) if lv is not None else None)
    return o


def _lse_code(code):
    return _lib.FLASHC_F64 if code == _lib.FLASHC_F64 else _lib.FLASHC_F32


def attention_backward(do, q, k, v, o, lse, *, causal=False, softmax_scale=None,
                       window=(-1, -1), sink_tokens=0, sinks=None, backend="auto", out=None,
                       stream=None, deterministic=True):
    """Gradients of attention() by recomputation from lse (same keyword
    arguments as the forward call that produced o and lse).

    Returns (dq, dk, dv), or (dq, dk, dv, dsinks) when sinks is given
    (dsinks [Hq], sinks' dtype). out= may be a tuple of those arrays.
    deterministic=False lets the CUDA backend use float atomics for dq.
    """
    n_out = 4 if sinks is not None else 3
    outs = _split_out(out, n_out, "attention_backward")
    call = _Call(backend, {"do": do, "q": q, "k": k, "v": v, "o": o, "lse": lse, "sinks": sinks},
                 {"dq": outs[0], "dk": outs[1], "dv": outs[2],
                  "dsinks": outs[3] if n_out == 4 else None})
    dov = call.input(do, "do")
    qv, kv, vv = call.input(q, "q"), call.input(k, "k"), call.input(v, "v")
    ov, lv = call.input(o, "o"), call.input(lse, "lse")
    sv = dsv = None
    if sinks is not None:
        hq = _head_count(qv, 2)
        sv = call.small_input(sinks, "sinks", _lse_code(qv.code), hq)
        if outs[3] is not None:
            dsv = call.output(outs[3], (hq,), sv.code, "dsinks")
            if dsv.shape != (hq,) or (hq > 1 and dsv.strides[0] != 1):
                _fail(_lib.FLASHC_ERR_SHAPE, "dsinks must be contiguous with shape (%d,), got %s"
                      % (hq, dsv.shape))
            if dsv.code != sv.code:
                _fail(_lib.FLASHC_ERR_DTYPE, "dsinks must have dtype %s" % _CODE_NAMES[sv.code])
        else:
            dsv = call.output(None, (hq,), sv.code, "dsinks")
    dqv = call.output(outs[0], qv.shape, qv.code, "dq")
    dkv = call.output(outs[1], kv.shape, kv.code, "dk")
    dvv = call.output(outs[2], vv.shape, vv.code, "dv")
    p = _attn_params(call, causal, softmax_scale, window, sink_tokens, sv, stream, deterministic)
    st = _lib.flashc_attn_bwd(ctypes.byref(dov.tensor()), ctypes.byref(qv.tensor()),
                              ctypes.byref(kv.tensor()), ctypes.byref(vv.tensor()),
                              ctypes.byref(ov.tensor()), ctypes.byref(lv.tensor()),
                              ctypes.byref(dqv.tensor()), ctypes.byref(dkv.tensor()),
                              ctypes.byref(dvv.tensor()),
                              dsv.ptr if dsv is not None else None, ctypes.byref(p))
    _check(st)
    call.finish()
    res = (call.result(dqv), call.result(dkv), call.result(dvv))
    if sinks is not None:
        res = res + (call.result(dsv),)
    return res


# -------------------------------------------------------- weighted row-sum

def _exec_params(call, stream):
    p = _lib.exec_params_default()
    p.backend = call.backend
    p.stream = _stream_handle(stream)
    return p


def weighted_sum(x, w, *, backend="auto", out=None, stream=None):
    """y[...] = sum_d x[..., d] * w[d]. x [..., D] any strides (zero strides
    too), w [D]; y has x.shape[:-1] (a 0-d array when x is 1-D)."""
    call = _Call(backend, {"x": x, "w": w}, {"out": out})
    xv, wv = call.input(x, "x"), call.input(w, "w")
    yv = call.output(out, xv.shape[:-1], xv.code, "out")
    p = _exec_params(call, stream)
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
    call = _Call(backend, {"dy": dy, "x": x, "w": w}, {"dx": dx_out, "dw": dw_out})
    dyv, xv, wv = call.input(dy, "dy"), call.input(x, "x"), call.input(w, "w")
    dxv = call.output(dx_out, xv.shape, xv.code, "dx") if need_dx else None
    dwv = call.output(dw_out, wv.shape, wv.code, "dw") if need_dw else None
    p = _exec_params(call, stream)
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

