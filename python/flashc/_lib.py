"""Raw ctypes bindings of include/flashc.h, one declaration per C symbol.

This layer mirrors the C ABI 1:1 and adds nothing: no exceptions, no array
handling. The friendly layer (flashc._core) builds on it. Each binding is
preceded by its C prototype; argtypes and restype are always set so ctypes
never guesses (a guessed `int` restype truncates pointers on x86-64).

The struct mirrors are the classic place for silent drift between C and
Python, so at import the size of each struct mirror is checked against the
size the library reports (flashc_*_params_size(), or the struct_size that
flashc_varlen_default() / flashc_kvcache_default() fill in); a mismatch is an
ImportError, not a corrupted call. The ragged-batch functions (issue 9) are
None when the loaded library predates them; flashc._core then says so.

Library search order:
  1. $FLASHC_LIBRARY (a path to libflashc.so),
  2. libflashc.so next to this file (an installed package: `pip install .`
     puts the library, and the CUDA module beside it, in flashc/),
  3. <repo>/build/lib/libflashc.so, relative to this package
     (python/flashc/../../build/lib: the source tree after scripts/demo),
  4. ctypes.util.find_library("flashc").
"""

import ctypes
import ctypes.util
import os
import struct

# ----------------------------------------------------------------- loading

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO_BUILD_LIB = os.path.normpath(os.path.join(_HERE, "..", "..", "build", "lib"))


def _candidates():
    env = os.environ.get("FLASHC_LIBRARY")
    if env:
        # An explicit override is authoritative: never fall back silently.
        return [env], True
    names = []
    for d in (_HERE, _REPO_BUILD_LIB):
        for fname in ("libflashc.so", "libflashc.so.0", "libflashc.dylib"):
            path = os.path.join(d, fname)
            if os.path.exists(path):
                names.append(path)
    found = ctypes.util.find_library("flashc")
    if found:
        names.append(found)
    return names, False


def _load():
    names, explicit = _candidates()
    errors = []
    for name in names:
        try:
            return ctypes.CDLL(name), name
        except OSError as e:
            errors.append("%s: %s" % (name, e))
            if explicit:
                break
    where = "$FLASHC_LIBRARY=%r" % os.environ.get("FLASHC_LIBRARY") if explicit else (
        "%s, %s and the system library path" % (_HERE, _REPO_BUILD_LIB))
    detail = ("; ".join(errors)) if errors else "not found"
    raise ImportError(
        "flashc: cannot load libflashc (looked in %s): %s. Install the package "
        "with `pip install .`, or build the library with `cmake -S . -B build && "
        "cmake --build build`, or set FLASHC_LIBRARY to the path of libflashc.so."
        % (where, detail))


lib, library_path = _load()

# ------------------------------------------------------------------- enums
# Values are pinned in flashc.h (append-only).

FLASHC_OK = 0
FLASHC_ERR_INVALID_ARGUMENT = 1
FLASHC_ERR_NULL_POINTER = 2
FLASHC_ERR_SHAPE = 3
FLASHC_ERR_DTYPE = 4
FLASHC_ERR_STRIDE = 5
FLASHC_ERR_OVERFLOW = 6
FLASHC_ERR_UNSUPPORTED = 7
FLASHC_ERR_BACKEND_UNAVAILABLE = 8
FLASHC_ERR_OUT_OF_MEMORY = 9
FLASHC_ERR_CUDA = 10
FLASHC_ERR_PARAMS_SIZE = 11
FLASHC_ERR_DEVICE_MISMATCH = 12
FLASHC_ERR_INTERNAL = 13

FLASHC_F32 = 0
FLASHC_F16 = 1
FLASHC_BF16 = 2
FLASHC_F64 = 3
FLASHC_I32 = 4  # index tensors only (cu_seqlens, cache_seqlens, block_table, ...)

FLASHC_BACKEND_AUTO = 0
FLASHC_BACKEND_CPU = 1
FLASHC_BACKEND_CUDA = 2

FLASHC_MEMCPY_HOST_TO_DEVICE = 1
FLASHC_MEMCPY_DEVICE_TO_HOST = 2
FLASHC_MEMCPY_DEVICE_TO_DEVICE = 3

FLASHC_MAX_DIMS = 8

# ----------------------------------------------------------------- structs

# typedef struct flashc_tensor {
#     void *data;
#     int32_t dtype;
#     int32_t ndim;
#     int64_t shape[FLASHC_MAX_DIMS];
#     int64_t strides[FLASHC_MAX_DIMS];   /* in ELEMENTS */
# } flashc_tensor;
class flashc_tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.c_int64 * FLASHC_MAX_DIMS),
        ("strides", ctypes.c_int64 * FLASHC_MAX_DIMS),
    ]


# typedef struct flashc_attn_params {
#     uint32_t struct_size;
#     int32_t backend;
#     double softmax_scale;
#     int32_t causal;
#     int32_t deterministic;
#     int64_t window_left;
#     int64_t window_right;
#     int64_t num_sink_tokens;
#     const void *sink_logits;            /* 0.1 field; the binding uses sinks */
#     void *stream;
#     double softcap;                     /* appended in 0.2 */
#     const flashc_tensor *alibi_slopes;
#     const flashc_tensor *sinks;
#     const flashc_tensor *dsinks;
# } flashc_attn_params;
class flashc_attn_params(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("backend", ctypes.c_int32),
        ("softmax_scale", ctypes.c_double),
        ("causal", ctypes.c_int32),
        ("deterministic", ctypes.c_int32),
        ("window_left", ctypes.c_int64),
        ("window_right", ctypes.c_int64),
        ("num_sink_tokens", ctypes.c_int64),
        ("sink_logits", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
        ("softcap", ctypes.c_double),
        ("alibi_slopes", ctypes.POINTER(flashc_tensor)),
        ("sinks", ctypes.POINTER(flashc_tensor)),
        ("dsinks", ctypes.POINTER(flashc_tensor)),
    ]


# typedef struct flashc_exec_params {
#     uint32_t struct_size;
#     int32_t backend;
#     void *stream;
# } flashc_exec_params;
class flashc_exec_params(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("backend", ctypes.c_int32),
        ("stream", ctypes.c_void_p),
    ]


# typedef struct flashc_varlen {
#     uint32_t struct_size;
#     const flashc_tensor *cu_seqlens_q;  /* int32 [B + 1] */
#     const flashc_tensor *cu_seqlens_k;  /* int32 [B + 1] */
#     int64_t max_seqlen_q;               /* 0 = unknown */
#     int64_t max_seqlen_k;
# } flashc_varlen;
class flashc_varlen(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("cu_seqlens_q", ctypes.POINTER(flashc_tensor)),
        ("cu_seqlens_k", ctypes.POINTER(flashc_tensor)),
        ("max_seqlen_q", ctypes.c_int64),
        ("max_seqlen_k", ctypes.c_int64),
    ]


# typedef struct flashc_kvcache {
#     uint32_t struct_size;
#     const flashc_tensor *k_cache;          /* [Bc, Sc, Hkv, D] or pages [P, page_size, Hkv, D] */
#     const flashc_tensor *v_cache;
#     const flashc_tensor *cache_seqlens;    /* int32 [B] */
#     const flashc_tensor *k_new;            /* NULL or [B, Sk_new, Hkv, D] */
#     const flashc_tensor *v_new;
#     const flashc_tensor *cache_batch_idx;  /* NULL or int32 [B] */
#     const flashc_tensor *block_table;      /* NULL or int32 [B, max_pages] */
# } flashc_kvcache;
class flashc_kvcache(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("k_cache", ctypes.POINTER(flashc_tensor)),
        ("v_cache", ctypes.POINTER(flashc_tensor)),
        ("cache_seqlens", ctypes.POINTER(flashc_tensor)),
        ("k_new", ctypes.POINTER(flashc_tensor)),
        ("v_new", ctypes.POINTER(flashc_tensor)),
        ("cache_batch_idx", ctypes.POINTER(flashc_tensor)),
        ("block_table", ctypes.POINTER(flashc_tensor)),
    ]


# Tensor arguments are passed as c_void_p: either ctypes.byref() of a
# flashc_tensor or the bytes of one (tensor_struct.pack(...): flashc.torch's
# per-call descriptors, one struct.pack instead of a ctypes structure and
# its field assignments — a decode step builds five of them). The C side
# reads them as const flashc_tensor *; the bytes are never written.
_tensor_p = ctypes.c_void_p
# flashc_tensor's layout: data, dtype, ndim, shape[FLASHC_MAX_DIMS], strides[FLASHC_MAX_DIMS].
tensor_struct = struct.Struct("@Pii%dq%dq" % (FLASHC_MAX_DIMS, FLASHC_MAX_DIMS))
if tensor_struct.size != ctypes.sizeof(flashc_tensor):
    raise ImportError("flashc: flashc_tensor packs to %d bytes, its ctypes mirror has %d"
                      % (tensor_struct.size, ctypes.sizeof(flashc_tensor)))
_varlen_p = ctypes.POINTER(flashc_varlen)
_kvcache_p = ctypes.POINTER(flashc_kvcache)
_attn_params_p = ctypes.POINTER(flashc_attn_params)
_exec_params_p = ctypes.POINTER(flashc_exec_params)
_c_int_p = ctypes.POINTER(ctypes.c_int)
_c_void_pp = ctypes.POINTER(ctypes.c_void_p)


def _bind(name, restype, argtypes):
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = argtypes
    return fn


# --------------------------------------------------------- status, version

# const char *flashc_status_string(int status);
flashc_status_string = _bind("flashc_status_string", ctypes.c_char_p, [ctypes.c_int])

# const char *flashc_last_error(void);
flashc_last_error = _bind("flashc_last_error", ctypes.c_char_p, [])

# const char *flashc_version_string(void);
flashc_version_string = _bind("flashc_version_string", ctypes.c_char_p, [])

# int flashc_version_number(void);
flashc_version_number = _bind("flashc_version_number", ctypes.c_int, [])

# ---------------------------------------------------------- dtype, backend

# size_t flashc_dtype_size(int dtype);
flashc_dtype_size = _bind("flashc_dtype_size", ctypes.c_size_t, [ctypes.c_int])

# int flashc_backend_available(int backend);
flashc_backend_available = _bind("flashc_backend_available", ctypes.c_int, [ctypes.c_int])

# const char *flashc_cpu_isa(void);
flashc_cpu_isa = _bind("flashc_cpu_isa", ctypes.c_char_p, [])

# const char *flashc_cpu_features(void);
flashc_cpu_features = _bind("flashc_cpu_features", ctypes.c_char_p, [])

# ------------------------------------------------------------------ params

# flashc_attn_params flashc_attn_params_default(void);
flashc_attn_params_default = _bind("flashc_attn_params_default", flashc_attn_params, [])

# size_t flashc_attn_params_size(void);
flashc_attn_params_size = _bind("flashc_attn_params_size", ctypes.c_size_t, [])

# flashc_exec_params flashc_exec_params_default(void);
flashc_exec_params_default = _bind("flashc_exec_params_default", flashc_exec_params, [])

# size_t flashc_exec_params_size(void);
flashc_exec_params_size = _bind("flashc_exec_params_size", ctypes.c_size_t, [])

# --------------------------------------------------------------- attention

# flashc_status flashc_attn_fwd(const flashc_tensor *q, const flashc_tensor *k,
#                               const flashc_tensor *v, const flashc_tensor *o,
#                               const flashc_tensor *lse,
#                               const flashc_attn_params *params);
flashc_attn_fwd = _bind("flashc_attn_fwd", ctypes.c_int,
                        [_tensor_p, _tensor_p, _tensor_p, _tensor_p, _tensor_p,
                         _attn_params_p])

# flashc_status flashc_attn_bwd(const flashc_tensor *dout, const flashc_tensor *q,
#                               const flashc_tensor *k, const flashc_tensor *v,
#                               const flashc_tensor *o, const flashc_tensor *lse,
#                               const flashc_tensor *dq, const flashc_tensor *dk,
#                               const flashc_tensor *dv, void *dsinks,
#                               const flashc_attn_params *params);
flashc_attn_bwd = _bind("flashc_attn_bwd", ctypes.c_int,
                        [_tensor_p, _tensor_p, _tensor_p, _tensor_p, _tensor_p, _tensor_p,
                         _tensor_p, _tensor_p, _tensor_p, ctypes.c_void_p, _attn_params_p])

# ------------------------------------------- ragged batches and KV caches
# Bound only when the library has them (a library built before issue 9 lacks
# them): callers get None and the friendly layer says so.


def _bind_optional(name, restype, argtypes):
    return _bind(name, restype, argtypes) if hasattr(lib, name) else None


# flashc_varlen flashc_varlen_default(void);
flashc_varlen_default = _bind_optional("flashc_varlen_default", flashc_varlen, [])

# flashc_status flashc_attn_varlen_fwd(const flashc_tensor *q, const flashc_tensor *k,
#                                      const flashc_tensor *v, const flashc_varlen *seqs,
#                                      const flashc_tensor *o, const flashc_tensor *lse,
#                                      const flashc_attn_params *params);
flashc_attn_varlen_fwd = _bind_optional(
    "flashc_attn_varlen_fwd", ctypes.c_int,
    [_tensor_p, _tensor_p, _tensor_p, _varlen_p, _tensor_p, _tensor_p, _attn_params_p])

# flashc_status flashc_attn_varlen_bwd(const flashc_tensor *dout, const flashc_tensor *q,
#                                      const flashc_tensor *k, const flashc_tensor *v,
#                                      const flashc_tensor *o, const flashc_tensor *lse,
#                                      const flashc_varlen *seqs, const flashc_tensor *dq,
#                                      const flashc_tensor *dk, const flashc_tensor *dv,
#                                      const flashc_attn_params *params);
flashc_attn_varlen_bwd = _bind_optional(
    "flashc_attn_varlen_bwd", ctypes.c_int,
    [_tensor_p, _tensor_p, _tensor_p, _tensor_p, _tensor_p, _tensor_p, _varlen_p,
     _tensor_p, _tensor_p, _tensor_p, _attn_params_p])

# flashc_kvcache flashc_kvcache_default(void);
flashc_kvcache_default = _bind_optional("flashc_kvcache_default", flashc_kvcache, [])

# flashc_status flashc_attn_kvcache_fwd(const flashc_tensor *q, const flashc_kvcache *cache,
#                                       const flashc_tensor *o, const flashc_tensor *lse,
#                                       const flashc_attn_params *params);
flashc_attn_kvcache_fwd = _bind_optional(
    "flashc_attn_kvcache_fwd", ctypes.c_int,
    [_tensor_p, _kvcache_p, _tensor_p, _tensor_p, _attn_params_p])

# -------------------------------------------------------- weighted row-sum

# flashc_status flashc_weighted_sum(const flashc_tensor *x, const flashc_tensor *w,
#                                   const flashc_tensor *y,
#                                   const flashc_exec_params *params);
flashc_weighted_sum = _bind("flashc_weighted_sum", ctypes.c_int,
                            [_tensor_p, _tensor_p, _tensor_p, _exec_params_p])

# flashc_status flashc_weighted_sum_bwd(const flashc_tensor *dy, const flashc_tensor *x,
#                                       const flashc_tensor *w, const flashc_tensor *dx,
#                                       const flashc_tensor *dw,
#                                       const flashc_exec_params *params);
flashc_weighted_sum_bwd = _bind("flashc_weighted_sum_bwd", ctypes.c_int,
                                [_tensor_p, _tensor_p, _tensor_p, _tensor_p, _tensor_p,
                                 _exec_params_p])

# ------------------------------------------------------ CUDA device memory

# flashc_status flashc_cuda_device_count(int *count);
flashc_cuda_device_count = _bind("flashc_cuda_device_count", ctypes.c_int, [_c_int_p])

# flashc_status flashc_cuda_device_name(int device, char *buf, size_t len);
flashc_cuda_device_name = _bind("flashc_cuda_device_name", ctypes.c_int,
                                [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t])

# flashc_status flashc_cuda_set_device(int device);
flashc_cuda_set_device = _bind("flashc_cuda_set_device", ctypes.c_int, [ctypes.c_int])

# flashc_status flashc_cuda_malloc(void **ptr, size_t bytes);
flashc_cuda_malloc = _bind("flashc_cuda_malloc", ctypes.c_int, [_c_void_pp, ctypes.c_size_t])

# flashc_status flashc_cuda_free(void *ptr);
flashc_cuda_free = _bind("flashc_cuda_free", ctypes.c_int, [ctypes.c_void_p])

# flashc_status flashc_cuda_memcpy(void *dst, const void *src, size_t bytes, int kind);
flashc_cuda_memcpy = _bind("flashc_cuda_memcpy", ctypes.c_int,
                           [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int])

# flashc_status flashc_cuda_synchronize(void);
flashc_cuda_synchronize = _bind("flashc_cuda_synchronize", ctypes.c_int, [])

# flashc_status flashc_pointer_is_device(const void *ptr, int *is_device);
flashc_pointer_is_device = _bind("flashc_pointer_is_device", ctypes.c_int,
                                 [ctypes.c_void_p, _c_int_p])

# ------------------------------------------------------ struct-size guard


def _check_struct_sizes():
    checks = [
        ("flashc_attn_params", flashc_attn_params, flashc_attn_params_size()),
        ("flashc_exec_params", flashc_exec_params, flashc_exec_params_size()),
    ]
    # No *_size() function for these two: their *_default() reports
    # struct_size = sizeof as the library was compiled.
    for name, mirror, default in (("flashc_varlen", flashc_varlen, flashc_varlen_default),
                                  ("flashc_kvcache", flashc_kvcache, flashc_kvcache_default)):
        if default is not None:
            checks.append((name, mirror, default().struct_size))
    for name, mirror, c_size in checks:
        if ctypes.sizeof(mirror) != c_size:
            raise ImportError(
                "flashc: the Python mirror of %s is %d bytes but %s reports %d: "
                "the bindings and the library are out of sync (rebuild, or update "
                "python/flashc/_lib.py)" % (name, ctypes.sizeof(mirror), library_path, c_size))


_check_struct_sizes()


def attn_params_default():
    """flashc_attn_params_default() with struct_size set to this mirror's size."""
    p = flashc_attn_params_default()
    p.struct_size = ctypes.sizeof(flashc_attn_params)
    return p


def varlen_default():
    """flashc_varlen_default() with struct_size set to this mirror's size."""
    s = flashc_varlen_default()
    s.struct_size = ctypes.sizeof(flashc_varlen)
    return s


def kvcache_default():
    """flashc_kvcache_default() with struct_size set to this mirror's size."""
    s = flashc_kvcache_default()
    s.struct_size = ctypes.sizeof(flashc_kvcache)
    return s


def exec_params_default():
    """flashc_exec_params_default() with struct_size set to this mirror's size."""
    p = flashc_exec_params_default()
    p.struct_size = ctypes.sizeof(flashc_exec_params)
    return p
