"""NumPy dtype <-> flashc_dtype (imports only _lib and _errors).

bfloat16 arrays come from ml_dtypes (imported on first use). int32
(FLASHC_I32) is the dtype of index tensors only (cu_seqlens, cache_seqlens,
block_table, cache_batch_idx): dtype_code() refuses it for data arrays,
index_code() / index_host() take it.
"""

import numpy as np

from . import _lib
from ._errors import fail

__all__ = ["DTYPE_NAMES", "CODE_NAMES", "bfloat16", "np_dtype", "dtype_code", "is_float_dtype",
           "lse_code", "array_code", "index_code", "index_host"]

DTYPE_NAMES = {"float32": _lib.FLASHC_F32, "float16": _lib.FLASHC_F16,
               "bfloat16": _lib.FLASHC_BF16, "float64": _lib.FLASHC_F64}
CODE_NAMES = {v: k for k, v in DTYPE_NAMES.items()}
CODE_NAMES[_lib.FLASHC_I32] = "int32"


def bfloat16():
    try:
        import ml_dtypes
    except ImportError as e:  # pragma: no cover - ml_dtypes is a listed dependency
        raise ImportError("flashc: bfloat16 arrays need the ml_dtypes package "
                          "(pip install ml_dtypes)") from e
    return np.dtype(ml_dtypes.bfloat16)


def np_dtype(code):
    """NumPy dtype of a flashc_dtype value (bfloat16 through ml_dtypes)."""
    if code == _lib.FLASHC_BF16:
        return bfloat16()
    return np.dtype(CODE_NAMES[code])


_CODE_OF_DTYPE = {}  # np.dtype -> flashc_dtype, filled by dtype_code (supported dtypes only)


def dtype_code(dtype, name="array"):
    """flashc_dtype of a NumPy dtype (or dtype name); FlashcError otherwise."""
    code = _CODE_OF_DTYPE.get(dtype) if isinstance(dtype, np.dtype) else None
    if code is not None:
        return code
    try:
        key = np.dtype(dtype).name
    except TypeError:
        key = str(dtype)
    code = DTYPE_NAMES.get(key)
    if code is None:
        fail(_lib.FLASHC_ERR_DTYPE, "%s has dtype %s; flashc supports float32, float16, "
             "bfloat16 and float64" % (name, key))
    if isinstance(dtype, np.dtype):
        _CODE_OF_DTYPE[dtype] = code
    return code


def is_float_dtype(dtype):
    """A real floating dtype (bfloat16 included; ml_dtypes gives it kind 'V')."""
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or dtype.name == "bfloat16"


def lse_code(code):
    """The float type of lse, sink logits and ALiBi slopes for inputs of `code`:
    F64 for F64 inputs, else F32."""
    return _lib.FLASHC_F64 if code == _lib.FLASHC_F64 else _lib.FLASHC_F32


def array_code(dtype, name="array"):
    """flashc_dtype of a data (float) or index (int32) dtype: what a
    flashc.cuda.DeviceArray may hold."""
    try:
        if np.dtype(dtype) == np.int32:
            return _lib.FLASHC_I32
    except TypeError:
        pass
    return dtype_code(dtype, name)


def index_code(dtype, name="index array"):
    """FLASHC_I32 for an int32 dtype (NumPy dtype or name); FlashcError
    (FLASHC_ERR_DTYPE) otherwise."""
    try:
        key = np.dtype(dtype).name
    except TypeError:
        key = str(dtype)
    if key != "int32":
        fail(_lib.FLASHC_ERR_DTYPE, "%s has dtype %s; index arrays must be int32" % (name, key))
    return _lib.FLASHC_I32


def index_host(obj, name="index array"):
    """A host index array (NumPy array, list, scalar sequence) as NumPy
    int32: int32 arrays as they are (any strides); other integer dtypes are
    converted (a copy; values must fit int32); anything else is FlashcError."""
    arr = obj if isinstance(obj, np.ndarray) else np.asarray(obj)
    if arr.dtype == np.int32:
        return arr
    if arr.dtype.kind not in "iu":
        fail(_lib.FLASHC_ERR_DTYPE, "%s has dtype %s; index arrays must be integers (int32; "
             "other integer dtypes are converted)" % (name, arr.dtype.name))
    if arr.size:
        lo, hi = int(arr.min()), int(arr.max())
        info = np.iinfo(np.int32)
        if lo < info.min or hi > info.max:
            fail(_lib.FLASHC_ERR_INVALID_ARGUMENT, "%s holds %d, which does not fit int32"
                 % (name, hi if hi > info.max else lo))
    return arr.astype(np.int32)
