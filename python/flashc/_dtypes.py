"""NumPy dtype <-> flashc_dtype (imports only _lib and _errors).

bfloat16 arrays come from ml_dtypes (imported on first use).
"""

import numpy as np

from . import _lib
from ._errors import fail

__all__ = ["DTYPE_NAMES", "CODE_NAMES", "bfloat16", "np_dtype", "dtype_code", "is_float_dtype",
           "lse_code"]

DTYPE_NAMES = {"float32": _lib.FLASHC_F32, "float16": _lib.FLASHC_F16,
               "bfloat16": _lib.FLASHC_BF16, "float64": _lib.FLASHC_F64}
CODE_NAMES = {v: k for k, v in DTYPE_NAMES.items()}


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


def dtype_code(dtype, name="array"):
    """flashc_dtype of a NumPy dtype (or dtype name); FlashcError otherwise."""
    try:
        key = np.dtype(dtype).name
    except TypeError:
        key = str(dtype)
    code = DTYPE_NAMES.get(key)
    if code is None:
        fail(_lib.FLASHC_ERR_DTYPE, "%s has dtype %s; flashc supports float32, float16, "
             "bfloat16 and float64" % (name, key))
    return code


def is_float_dtype(dtype):
    """A real floating dtype (bfloat16 included; ml_dtypes gives it kind 'V')."""
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or dtype.name == "bfloat16"


def lse_code(code):
    """The float type of lse, sink logits and ALiBi slopes for inputs of `code`:
    F64 for F64 inputs, else F32."""
    return _lib.FLASHC_F64 if code == _lib.FLASHC_F64 else _lib.FLASHC_F32
