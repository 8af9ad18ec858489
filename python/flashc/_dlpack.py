"""Consuming DLPack: objects with __dlpack__ / __dlpack_device__ (CuPy, JAX,
torch, NumPy >= 1.22, ...) as flashc arguments, without a copy.

    arr = import_array(obj, "q", stream)

gives a NumPy array (DLPack device kDLCPU or kDLCUDAHost) or a
flashc.cuda.DeviceArray (kDLCUDA, kDLCUDAManaged) viewing the producer's
memory; the rest of the binding treats it like any array of its kind. The
producer's memory stays alive (its deleter is not called) until that array and
every view of it are gone, which is after the call that imported it.

Protocol (DLPack >= 0.8, the Python array API's from_dlpack):
  * __dlpack_device__() first: an unsupported device is refused before the
    producer does any work.
  * __dlpack__(stream=S, max_version=(1, 0)); producers that predate
    max_version get __dlpack__(stream=S). For CUDA, S is the stream the flashc
    call runs on (1 = legacy default): the producer orders its pending work on
    the data before S. For host memory S is None.
  * The capsule is "dltensor_versioned" (DLManagedTensorVersioned, 1.x) or
    "dltensor" (DLManagedTensor); once consumed it is renamed
    "used_dltensor_versioned" / "used_dltensor", so the producer's capsule
    destructor leaves the tensor to us, and we call its deleter exactly once.
  * Strides are in elements; NULL strides mean compact row-major. data +
    byte_offset is element (0, ..., 0).
An output (out=) must come as a versioned capsule without the READ_ONLY flag:
the unversioned protocol gives no right to write (JAX arrays are immutable).
"""

import ctypes

import numpy as np

from . import _lib, cuda
from ._dtypes import bfloat16
from ._errors import fail

__all__ = ["is_dlpack", "import_array"]

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13
_DEVICE_NAMES = {1: "CPU", 2: "CUDA", 3: "CUDAHost", 4: "OpenCL", 7: "Vulkan", 8: "Metal",
                 9: "VPI", 10: "ROCM", 11: "ROCMHost", 12: "ExtDev", 13: "CUDAManaged",
                 14: "OneAPI", 15: "WebGPU", 16: "Hexagon", 17: "MAIA"}
KDL_FLOAT, KDL_BFLOAT = 2, 4
_CODE_NAMES = {0: "int", 1: "uint", 2: "float", 3: "opaque handle", 4: "bfloat",
               5: "complex", 6: "bool"}
_READ_ONLY = 1 << 0  # DLPACK_FLAG_BITMASK_READ_ONLY


# DLDevice, DLDataType and DLTensor: the producer's definitions (cuda.py).
_DLDevice, _DLDataType, _DLTensor = cuda._DLDevice, cuda._DLDataType, cuda._DLTensor


# struct DLManagedTensor { DLTensor dl_tensor; void *manager_ctx;
#                          void (*deleter)(struct DLManagedTensor *); };
class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


# struct DLManagedTensorVersioned { DLPackVersion version; void *manager_ctx;
#     void (*deleter)(struct DLManagedTensorVersioned *); uint64_t flags; DLTensor dl_tensor; };
class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


# Private prototypes taking the capsule as its address (PYFUNCTYPE: the GIL
# is held, which PyCapsule_* need). The names passed to PyCapsule_SetName are
# module constants: the capsule keeps the pointer, not a copy.
_IsValid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi))
_GetPointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
_SetName = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_SetName", ctypes.pythonapi))
_NAME, _USED = b"dltensor", b"used_dltensor"
_NAME_V, _USED_V = b"dltensor_versioned", b"used_dltensor_versioned"
# Deleters get the managed tensor's address; the GIL stays held (producers'
# deleters take it themselves when they need it, which is re-entrant).
_Deleter = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)


class _Import:
    """Owns one consumed DLManagedTensor[Versioned]: calls its deleter once,
    when the last array viewing it is gone."""
    __slots__ = ("managed", "deleter", "ptr", "device", "nbytes", "stream", "_source")

    def __init__(self, managed, deleter, source):
        self.managed = managed      # address of the struct
        self.deleter = deleter      # address of its deleter, or None
        self.ptr = None             # the fields below make it a DeviceArray allocation
        self.device = 0
        self.nbytes = 0
        self.stream = None          # the producer already ordered its work (__dlpack__(stream))
        self._source = source       # the producer object, kept for the call

    def __del__(self):
        d, self.deleter = self.deleter, None
        if d:
            try:
                _Deleter(d)(self.managed)
            except Exception:  # interpreter shutdown
                pass


def is_dlpack(obj):
    """obj speaks DLPack (and is not an array flashc reads directly)."""
    return hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__")


def device_of(obj):
    """(DLPack device type, id) of obj, validated: CPU-like or CUDA-like."""
    dev = obj.__dlpack_device__()
    dtype, did = int(dev[0]), int(dev[1])
    if dtype not in (KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED):
        fail(_lib.FLASHC_ERR_UNSUPPORTED,
             "a DLPack argument lives on device type %d (%s); flashc takes CPU and CUDA "
             "memory" % (dtype, _DEVICE_NAMES.get(dtype, "unknown")))
    return dtype, did


def is_device(obj):
    """The DLPack object's memory is CUDA device (or managed) memory."""
    return device_of(obj)[0] in (KDL_CUDA, KDL_CUDA_MANAGED)


def _np_dtype(dt, name):
    if dt.lanes == 1 and dt.code == KDL_FLOAT and dt.bits in (16, 32, 64):
        return np.dtype("float%d" % dt.bits)
    if dt.lanes == 1 and dt.code == KDL_BFLOAT and dt.bits == 16:
        return bfloat16()
    fail(_lib.FLASHC_ERR_DTYPE, "%s has DLPack dtype %s%d%s; flashc supports float32, float16, "
         "bfloat16 and float64" % (name, _CODE_NAMES.get(dt.code, "code %d " % dt.code),
                                   dt.bits, "x%d" % dt.lanes if dt.lanes != 1 else ""))


def _capsule(obj, stream):
    try:
        return obj.__dlpack__(stream=stream, max_version=(1, 0))
    except TypeError:  # a producer older than DLPack 1.0's max_version
        return obj.__dlpack__(stream=stream)


def import_array(obj, name, stream=None, writable=False):
    """obj's memory as a NumPy array or a DeviceArray (see the module doc).
    stream: the cudaStream_t (int, None = legacy) the call runs on."""
    dev_type, dev_id = device_of(obj)
    on_device = dev_type in (KDL_CUDA, KDL_CUDA_MANAGED)
    # DLPack: None means "legacy default" on CUDA; host producers take None only.
    cap = _capsule(obj, (stream if stream else 1) if on_device else None)
    addr = id(cap)  # CPython: the object's address, what PyCapsule_* take
    if _IsValid(addr, _NAME_V):
        managed = _GetPointer(addr, _NAME_V)
        m = _DLManagedTensorVersioned.from_address(managed)
        if m.major != 1:
            # Do not rename: the producer's destructor still owns the tensor.
            fail(_lib.FLASHC_ERR_UNSUPPORTED, "%s is a DLPack %d.%d tensor; flashc reads 1.x"
                 % (name, m.major, m.minor))
        _SetName(addr, _USED_V)
        flags = m.flags
    elif _IsValid(addr, _NAME):
        managed = _GetPointer(addr, _NAME)
        m = _DLManagedTensor.from_address(managed)
        _SetName(addr, _USED)
        flags = None
    else:
        fail(_lib.FLASHC_ERR_INVALID_ARGUMENT, "%s.__dlpack__() did not return an unconsumed "
             "DLPack capsule (got %r)" % (name, cap))
    own = _Import(managed, m.deleter, obj)  # from here on the deleter runs whatever happens
    if writable and (flags is None or flags & _READ_ONLY):
        fail(_lib.FLASHC_ERR_INVALID_ARGUMENT, "%s must be writable, but its DLPack export is %s"
             % (name, "read-only" if flags is not None else
                "unversioned (DLPack < 1.0 gives no right to write)"))
    t = m.dl_tensor
    dtype = _np_dtype(t.dtype, name)
    nd = int(t.ndim)
    shape = tuple(int(t.shape[i]) for i in range(nd))
    if t.strides:
        estrides = tuple(int(t.strides[i]) for i in range(nd))
    else:
        acc, cs = 1, []
        for n in reversed(shape):
            cs.append(acc)
            acc *= max(n, 1)
        estrides = tuple(reversed(cs))
    ptr = (t.data or 0) + int(t.byte_offset)
    isz = dtype.itemsize
    if on_device:
        own.ptr, own.device = ptr, int(t.device.device_id)
        return cuda.DeviceArray(shape, dtype, tuple(s * isz for s in estrides), _alloc=own)
    return _host_array(ptr, shape, estrides, dtype, own, read_only=bool(flags and
                                                                       flags & _READ_ONLY))


def _host_array(ptr, shape, estrides, dtype, own, read_only):
    """A NumPy view of host memory at ptr (element strides, maybe negative)
    whose base keeps `own` alive."""
    if any(n == 0 for n in shape):
        return np.empty(shape, dtype)  # nothing is read or written
    lo = sum((n - 1) * s for n, s in zip(shape, estrides) if s < 0)
    hi = sum((n - 1) * s for n, s in zip(shape, estrides) if s > 0)
    isz = dtype.itemsize
    buf = (ctypes.c_char * ((hi - lo + 1) * isz)).from_address(ptr + lo * isz)
    buf._flashc_import = own  # the array's base is buf
    arr = np.ndarray(shape, dtype, buffer=buf, offset=-lo * isz,
                     strides=tuple(s * isz for s in estrides))
    if read_only:
        arr.flags.writeable = False
    return arr
