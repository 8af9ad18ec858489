"""CUDA device memory from pure ctypes, through the ABI's device helpers only.

No torch, cupy or cudart in Python: allocation, copies and synchronisation go
through flashc_cuda_* in libflashc (which forwards to the CUDA module).

    import flashc, flashc.cuda as fcuda
    q = fcuda.to_device(q_host)           # DeviceArray, contiguous copy
    o = flashc.attention(q, k, v)         # runs on the GPU, o is a DeviceArray
    o.numpy()                             # copies back

DeviceArray follows NumPy's conventions: `strides` are in BYTES, `dtype` is a
NumPy dtype (bfloat16 through ml_dtypes). It exports
`__cuda_array_interface__` (version 3; bfloat16 as typestr '<V2') and DLPack
(`__dlpack__` / `__dlpack_device__`), so torch.from_dlpack / cupy can wrap it
without a copy. A DeviceArray created by to_device/empty owns its memory and
frees it (flashc_cuda_free) when the last view of it is gone.

Streams: a DeviceArray remembers the stream that last wrote it (`stream`:
None for the synchronous helpers here, else the cudaStream_t of the flashc
call that wrote it, 1 meaning the legacy default stream). It is exported as
the `stream` of __cuda_array_interface__, a later flashc call on another
stream waits for it (an event, not a host sync), and numpy()/copy() wait for
it before copying on the legacy stream.
"""

import ctypes
import threading

import numpy as np

from . import _lib
from ._dtypes import array_code, bfloat16 as _bfloat16
from ._errors import FlashcError, check as _check, fail as _fail

__all__ = ["DeviceArray", "to_device", "empty", "zeros", "synchronize", "device_count",
           "device_name", "set_device", "is_available", "unavailable_reason"]

# ------------------------------------------------------------------ device


def is_available():
    """True when the CUDA backend can run here (module, driver and a GPU)."""
    return bool(_lib.flashc_backend_available(_lib.FLASHC_BACKEND_CUDA))


def unavailable_reason():
    """The library's message saying why CUDA is unavailable ('' if it is)."""
    if _lib.flashc_backend_available(_lib.FLASHC_BACKEND_CUDA):
        return ""
    return (_lib.flashc_last_error() or b"").decode("utf-8", "replace")


def device_count():
    """Number of CUDA devices; 0 when the backend is unavailable."""
    n = ctypes.c_int(0)
    st = _lib.flashc_cuda_device_count(ctypes.byref(n))
    if st == _lib.FLASHC_ERR_BACKEND_UNAVAILABLE:
        return 0
    _check(st)
    return n.value


def device_name(i=0):
    buf = ctypes.create_string_buffer(256)
    _check(_lib.flashc_cuda_device_name(int(i), buf, len(buf)))
    return buf.value.decode("utf-8", "replace")


_tls = threading.local()


def set_device(i):
    """Make device i current for the calling thread (as cudaSetDevice)."""
    _check(_lib.flashc_cuda_set_device(int(i)))
    _tls.device = int(i)


def _current_device():
    return getattr(_tls, "device", 0)


def synchronize():
    """Wait for all work on the current device (cudaDeviceSynchronize)."""
    _check(_lib.flashc_cuda_synchronize())


# flashc_status flashc_cuda_stream_wait(void *stream, void *producer);
# Bound here, on first use, so that a library built before it still imports.
_stream_wait_fn = None


def _stream_wait(stream, producer):
    """Order later work on `stream` after the work already on `producer`
    (cudaStream_t ints; None or 1 = legacy default, 2 = per-thread default).
    Asynchronous for the host; a no-op when they are the same stream."""
    global _stream_wait_fn
    if (stream or 1) == (producer or 1):
        return
    if _stream_wait_fn is None:
        try:
            _stream_wait_fn = _lib._bind("flashc_cuda_stream_wait", ctypes.c_int,
                                         [ctypes.c_void_p, ctypes.c_void_p])
        except AttributeError:
            _fail(_lib.FLASHC_ERR_UNSUPPORTED, "%s has no flashc_cuda_stream_wait: rebuild "
                  "libflashc" % _lib.library_path)
    _check(_stream_wait_fn(stream or None, producer or None))


# ----------------------------------------------------------------- memory

class _Allocation:
    """One flashc_cuda_malloc block; freed when garbage collected."""
    __slots__ = ("ptr", "nbytes", "device", "stream", "_free")

    def __init__(self, nbytes):
        self.ptr = None
        p = ctypes.c_void_p()
        # Never ask for 0 bytes: cudaMalloc(0) may return NULL, and a NULL
        # data pointer is FLASHC_ERR_NULL_POINTER even for empty tensors.
        _check(_lib.flashc_cuda_malloc(ctypes.byref(p), max(int(nbytes), 16)))
        self.ptr = p.value
        self.nbytes = int(nbytes)
        self.device = _current_device()
        self.stream = None  # the stream that last wrote it; None: nothing pending
        self._free = _lib.flashc_cuda_free  # kept: module globals may be gone at exit

    def __del__(self):
        ptr, self.ptr = getattr(self, "ptr", None), None
        if ptr:
            try:
                self._free(ptr)
            except Exception:  # interpreter shutdown
                pass


def _contiguous_strides(shape, itemsize):
    strides, acc = [], itemsize
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(int(n), 1)
    return tuple(reversed(strides))


def _np_dtype(dtype):
    """The dtype of a DeviceArray: native byte order always (what the library
    reads; host copies in and out convert by value)."""
    if isinstance(dtype, str) and dtype == "bfloat16":
        return _bfloat16()
    d = np.dtype(dtype)
    return d if d.isnative else d.newbyteorder("=")


class DeviceArray:
    """A strided view of CUDA device memory (shape, dtype, byte strides)."""

    def __init__(self, shape, dtype, strides=None, *, _alloc=None, _offset=0):
        self.dtype = _np_dtype(dtype)
        array_code(self.dtype, "DeviceArray")  # only flashc's dtypes (int32: index arrays)
        self.shape = tuple(int(n) for n in shape)
        if any(n < 0 for n in self.shape):
            raise ValueError("negative extent in shape %s" % (self.shape,))
        self.itemsize = self.dtype.itemsize
        self.strides = (_contiguous_strides(self.shape, self.itemsize) if strides is None
                        else tuple(int(s) for s in strides))
        if len(self.strides) != len(self.shape):
            raise ValueError("strides %s do not match shape %s" % (self.strides, self.shape))
        if _alloc is None:
            _alloc = _Allocation(self.size * self.itemsize)
        self._alloc = _alloc
        self._offset = int(_offset)  # bytes from the allocation's start

    # -- properties
    @property
    def ptr(self):
        """Device address of element (0, ..., 0)."""
        return self._alloc.ptr + self._offset

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self):
        return self.size * self.itemsize

    @property
    def device(self):
        return self._alloc.device

    @property
    def stream(self):
        """cudaStream_t (int) of the flashc call that last wrote the memory
        (1 = legacy default), or None when no work on it is pending."""
        return self._alloc.stream

    def _legacy_after_writer(self):
        # Copies here run on the legacy stream (cudaMemcpy); a writer on a
        # non-blocking stream is not ordered before it by itself.
        if self._alloc.stream not in (None, 1):
            _stream_wait(None, self._alloc.stream)

    @property
    def is_c_contiguous(self):
        if self.size <= 1:
            return True
        expect = _contiguous_strides(self.shape, self.itemsize)
        return all(n == 1 or s == e for n, s, e in zip(self.shape, self.strides, expect))

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d DeviceArray")
        return self.shape[0]

    def __repr__(self):
        return "DeviceArray(shape=%s, dtype=%s, strides=%s, ptr=0x%x)" % (
            self.shape, self.dtype.name, self.strides, self.ptr)

    # -- views (no copies)
    def _byte_span(self):
        """(lo, hi): byte offsets, relative to ptr, of the memory the view touches."""
        if self.size == 0:
            return 0, 0
        lo = hi = 0
        for n, s in zip(self.shape, self.strides):
            if s > 0:
                hi += (n - 1) * s
            else:
                lo += (n - 1) * s
        return lo, hi + self.itemsize

    def transpose(self, *axes):
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        if not axes:
            axes = tuple(reversed(range(self.ndim)))
        if sorted(axes) != list(range(self.ndim)):
            raise ValueError("axes %s are not a permutation of %d axes" % (axes, self.ndim))
        return DeviceArray([self.shape[a] for a in axes], self.dtype,
                           [self.strides[a] for a in axes], _alloc=self._alloc,
                           _offset=self._offset)

    @property
    def T(self):
        return self.transpose()

    def __getitem__(self, index):
        """Basic indexing (ints, slices with any step, Ellipsis): a view."""
        if not isinstance(index, tuple):
            index = (index,)
        if any(i is Ellipsis for i in index):
            k = index.index(Ellipsis)
            fill = self.ndim - (len(index) - 1)
            index = index[:k] + (slice(None),) * fill + index[k + 1:]
        if len(index) > self.ndim:
            raise IndexError("too many indices for a %d-d DeviceArray" % self.ndim)
        index = index + (slice(None),) * (self.ndim - len(index))
        shape, strides, off = [], [], self._offset
        for i, n, s in zip(index, self.shape, self.strides):
            if isinstance(i, slice):
                start, stop, step = i.indices(n)
                m = len(range(start, stop, step))
                if m > 0:
                    off += start * s
                shape.append(m)
                strides.append(s * step)
            else:
                i = int(i)
                if i < 0:
                    i += n
                if not 0 <= i < n:
                    raise IndexError("index %d out of range for extent %d" % (i, n))
                off += i * s
        return DeviceArray(shape, self.dtype, strides, _alloc=self._alloc, _offset=off)

    # -- copies
    def numpy(self):
        """A C-contiguous NumPy copy (synchronous; waits for the legacy stream)."""
        out = np.empty(self.shape, self.dtype)
        if self.size == 0:
            return out
        lo, hi = self._byte_span()
        self._legacy_after_writer()
        if self.is_c_contiguous:
            _check(_lib.flashc_cuda_memcpy(out.ctypes.data, self.ptr, self.nbytes,
                                           _lib.FLASHC_MEMCPY_DEVICE_TO_HOST))
            return out
        # Copy the span the view covers, then gather on the host.
        buf = np.empty(hi - lo, np.uint8)
        _check(_lib.flashc_cuda_memcpy(buf.ctypes.data, self.ptr + lo, hi - lo,
                                       _lib.FLASHC_MEMCPY_DEVICE_TO_HOST))
        view = np.lib.stride_tricks.as_strided(
            buf[-lo:].view(np.uint8), shape=self.shape + (self.itemsize,),
            strides=self.strides + (1,))
        out.view(np.uint8).reshape(self.shape + (self.itemsize,))[...] = view
        return out

    def copy_from_host(self, arr):
        """Overwrite this (C-contiguous) array with the host array arr."""
        # np.require, not ascontiguousarray: the latter turns 0-d into 1-d.
        arr = np.require(np.asarray(arr, dtype=self.dtype), requirements="C")
        if arr.shape != self.shape:
            raise ValueError("shape %s does not match %s" % (arr.shape, self.shape))
        if not self.is_c_contiguous:
            raise ValueError("copy_from_host needs a C-contiguous DeviceArray")
        if self.nbytes:
            self._legacy_after_writer()  # a pending writer on another stream
            _check(_lib.flashc_cuda_memcpy(self.ptr, arr.ctypes.data, self.nbytes,
                                           _lib.FLASHC_MEMCPY_HOST_TO_DEVICE))
        return self

    def copy(self):
        """A C-contiguous device copy."""
        if self.is_c_contiguous:
            out = empty(self.shape, self.dtype)
            if self.nbytes:
                self._legacy_after_writer()
                _check(_lib.flashc_cuda_memcpy(out.ptr, self.ptr, self.nbytes,
                                               _lib.FLASHC_MEMCPY_DEVICE_TO_DEVICE))
            return out
        return to_device(self.numpy())

    # -- interchange
    @property
    def __cuda_array_interface__(self):
        typestr = "<V2" if self.dtype.name == "bfloat16" else self.dtype.str
        return {
            "version": 3,
            "shape": self.shape,
            "typestr": typestr,
            "descr": [("", typestr)],
            "data": (self.ptr if self.size else 0, False),
            "strides": None if self.is_c_contiguous else self.strides,
            # The stream that last wrote it (legacy default unless a flashc
            # call ran on another one).
            "stream": self._alloc.stream or 1,
        }

    def __dlpack_device__(self):
        return (_DL_CUDA, self.device)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError("DeviceArray lives on %s, not %s"
                              % (self.__dlpack_device__(), tuple(dl_device)))
        if copy:
            raise BufferError("DeviceArray.__dlpack__ does not copy")
        if stream != -1:
            # DLPack: the consumer's stream (None = legacy default) must see
            # the work pending on ours.
            _stream_wait(stream or 1, self._alloc.stream or 1)
        return _to_dlpack_capsule(self)


# ----------------------------------------------------------------- factories


def empty(shape, dtype=np.float32):
    """An uninitialised C-contiguous DeviceArray."""
    if isinstance(shape, int):
        shape = (shape,)
    return DeviceArray(shape, dtype)


def zeros(shape, dtype=np.float32):
    if isinstance(shape, int):
        shape = (shape,)
    d = DeviceArray(shape, dtype)
    return d.copy_from_host(np.zeros(d.shape, d.dtype))


def to_device(arr):
    """A C-contiguous device copy of a host array (any strides)."""
    if isinstance(arr, DeviceArray):
        return arr.copy()
    arr = np.require(np.asarray(arr), requirements="C")  # keeps 0-d arrays 0-d
    array_code(arr.dtype, "array")
    return DeviceArray(arr.shape, arr.dtype).copy_from_host(arr)


# -------------------------------------------------------------------- DLPack
# Unversioned DLPack (capsule name "dltensor"), the form every consumer reads.

_DL_CPU, _DL_CUDA = 1, 2
_DL_INT, _DL_FLOAT, _DL_BFLOAT = 0, 2, 4


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_DLDeleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                             ("deleter", _DLDeleter)]

# Exported tensors alive in a consumer: address of the DLManagedTensor ->
# (the struct, shape/strides arrays, the DeviceArray keeping memory alive).
_dl_live = {}
_dl_lock = threading.Lock()


def _dl_release(managed_ptr):
    addr = ctypes.cast(managed_ptr, ctypes.c_void_p).value
    with _dl_lock:
        _dl_live.pop(addr, None)


_dl_deleter = _DLDeleter(_dl_release)

# Private prototypes (PYFUNCTYPE keeps the GIL; never mutate the shared
# ctypes.pythonapi entries). The destructor takes the capsule as a raw
# pointer: turning a dying object into a py_object would resurrect it.
_PyCapsule_New = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p,
                                   ctypes.c_void_p)(("PyCapsule_New", ctypes.pythonapi))
_PyCapsule_IsValid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi))
_PyCapsule_GetPointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))

_CapsuleDestructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _capsule_destructor(capsule):
    # A consumer renames the capsule to "used_dltensor" and owns the deleter;
    # an unconsumed capsule still named "dltensor" is ours to release.
    if _PyCapsule_IsValid(capsule, b"dltensor"):
        ptr = _PyCapsule_GetPointer(capsule, b"dltensor")
        with _dl_lock:
            _dl_live.pop(ptr, None)


_capsule_destructor_c = _CapsuleDestructor(_capsule_destructor)


def _to_dlpack_capsule(arr):
    code = {"bfloat16": _DL_BFLOAT, "int32": _DL_INT}.get(arr.dtype.name, _DL_FLOAT)
    nd = arr.ndim
    shape = (ctypes.c_int64 * max(nd, 1))(*arr.shape)
    strides = (ctypes.c_int64 * max(nd, 1))(*[s // arr.itemsize for s in arr.strides])
    m = _DLManagedTensor()
    m.dl_tensor.data = arr.ptr
    m.dl_tensor.device = _DLDevice(_DL_CUDA, arr.device)
    m.dl_tensor.ndim = nd
    m.dl_tensor.dtype = _DLDataType(code, arr.itemsize * 8, 1)
    m.dl_tensor.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    m.dl_tensor.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
    m.dl_tensor.byte_offset = 0
    m.manager_ctx = None
    m.deleter = _dl_deleter
    addr = ctypes.addressof(m)
    with _dl_lock:
        _dl_live[addr] = (m, shape, strides, arr)
    return _PyCapsule_New(addr, b"dltensor",
                          ctypes.cast(_capsule_destructor_c, ctypes.c_void_p))


def _dlpack_capsule_info(capsule):
    """(device, dtype code, bits, shape, strides in elements, data) of an
    unconsumed DLPack capsule; for tests."""
    ptr = _PyCapsule_GetPointer(id(capsule), b"dltensor")
    m = _DLManagedTensor.from_address(ptr)
    t = m.dl_tensor
    nd = t.ndim
    return ((t.device.device_type, t.device.device_id), t.dtype.code, t.dtype.bits,
            tuple(t.shape[i] for i in range(nd)), tuple(t.strides[i] for i in range(nd)),
            t.data)


_ = FlashcError, _fail  # re-exported for callers of flashc.cuda
