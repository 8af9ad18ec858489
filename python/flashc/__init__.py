"""flashc: FlashAttention-style attention and a weighted row-sum, from a C
library through pure ctypes.

    import numpy as np, flashc
    q = np.random.randn(2, 1024, 8, 64).astype(np.float32)   # [B, Sq, Hq, D]
    k = np.random.randn(2, 1024, 2, 64).astype(np.float32)   # [B, Sk, Hkv, D]
    v = np.random.randn(2, 1024, 2, 64).astype(np.float32)
    o, lse = flashc.attention(q, k, v, causal=True, return_lse=True)

Layers: flashc._lib is the raw 1:1 binding of include/flashc.h; the
functions here (flashc._core) take NumPy arrays of any strides, DeviceArrays
(flashc.cuda) or any __cuda_array_interface__ object, and raise FlashcError
(a ValueError) with the library's message on failure. flashc.torch (imported
on demand) adds torch autograd functions.
"""

from . import _lib
from ._core import (
    FlashcError,
    attention,
    attention_backward,
    attention_flops,
    attention_varlen,
    attention_varlen_backward,
    attention_with_kvcache,
    backend_available,
    backends,
    cpu_isa,
    cpu_features,
    weighted_sum,
    weighted_sum_backward,
)
from . import cuda

__version__ = _lib.flashc_version_string().decode()
version_number = _lib.flashc_version_number()
library_path = _lib.library_path

__all__ = [
    "FlashcError", "attention", "attention_backward", "attention_flops", "attention_varlen",
    "attention_varlen_backward", "attention_with_kvcache", "backend_available", "backends",
    "cpu_isa", "cpu_features", "weighted_sum", "weighted_sum_backward", "cuda", "__version__",
]
