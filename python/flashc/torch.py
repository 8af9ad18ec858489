"""flashc.torch: torch.autograd functions over flashc (imported on demand:
`import flashc` never imports torch; `import flashc.torch` does).

    import torch, flashc.torch
    q = torch.randn(2, 1024, 8, 64, requires_grad=True)    # [B, Sq, Hq, D]
    k = torch.randn(2, 1024, 2, 64, requires_grad=True)    # [B, Sk, Hkv, D]
    v = torch.randn(2, 1024, 2, 64, requires_grad=True)
    o = flashc.torch.attention(q, k, v, causal=True)       # [B, Sq, Hq, D]
    o.sum().backward()

Ragged batches and KV caches (flashc.h, "Ragged batches and KV caches"):
attention_varlen (packed sequences, with gradients) and
attention_with_kvcache (inference: no gradient; caches updated in place).

Layout and semantics are those of include/flashc.h (note the [B, S, H, D]
axis order, not SDPA's [B, H, S, D]; any strides are accepted, so
x.transpose(1, 2) of an SDPA-layout tensor costs nothing).

The forward saves q, k, v, o and the logsumexp L [B, Hq, Sq] — never the
attention matrix; the backward recomputes it from L (flashc_attn_bwd).
CPU tensors run on the CPU backend; CUDA tensors are passed by data_ptr()
to the CUDA backend on torch.cuda.current_stream(). Double backward is not
supported.

Built on the raw binding flashc._lib (one flashc_tensor per torch tensor, no
copies of inputs) and the params builder the NumPy layer uses
(flashc._core.attn_params), so that both read every argument the same way.
"""

import ctypes
import struct
import sys

import torch
from torch.autograd.function import once_differentiable

from . import _lib
from ._core import _check_kvcache_host, _max_seqlen, _params_key, _ragged_fn, attn_params
from ._errors import FlashcError, check as _check

__all__ = ["attention", "attention_varlen", "attention_with_kvcache", "weighted_sum"]

_CODES = {torch.float32: _lib.FLASHC_F32, torch.float16: _lib.FLASHC_F16,
          torch.bfloat16: _lib.FLASHC_BF16, torch.float64: _lib.FLASHC_F64}


# ------------------------------------------------------------------ helpers


def _code(t, name):
    code = _CODES.get(t.dtype)
    if code is None:
        raise FlashcError(_lib.FLASHC_ERR_DTYPE, "%s has dtype %s; flashc supports float32, "
                          "float16, bfloat16 and float64" % (name, t.dtype))
    return code


# One packer a rank: flashc_tensor's bytes with the unused shape / stride
# slots as pad bytes (zeros), so that a call passes ndim + 2·ndim values and
# no padding arguments.
_STRUCTS = tuple(
    struct.Struct("@Pii%dq%dx%dq%dx" % (n, 8 * (_lib.FLASHC_MAX_DIMS - n), n, 8 * (_lib.FLASHC_MAX_DIMS - n)))
    for n in range(_lib.FLASHC_MAX_DIMS + 1))
if any(x.size != _lib.tensor_struct.size for x in _STRUCTS):
    raise ImportError("flashc.torch: a rank's flashc_tensor packing differs from _lib.tensor_struct")
_PACKS = tuple(x.pack for x in _STRUCTS)
_PACKS_INTO = tuple(x.pack_into for x in _STRUCTS)
# (the pointer is a descriptor's first field: _out_like's splice)
_PTR = struct.Struct("@P").pack
_PTR_SIZE = struct.calcsize("@P")


def _desc(t, name, code=None, into=None, off=0):
    """The flashc_tensor describing torch tensor t (strides in elements) as
    its bytes (_lib's tensor_struct), for a tensor passed straight to a
    flashc function; code: its flashc_dtype when known (FLASHC_I32 for index
    tensors). The per-call path: one struct.pack (~1 µs less a tensor than
    a ctypes structure filled field by field). into: a writable buffer to
    pack the bytes into at offset off instead (returns None)."""
    shape = t.shape
    nd = len(shape)
    if nd > _lib.FLASHC_MAX_DIMS:
        raise FlashcError(_lib.FLASHC_ERR_SHAPE, "%s has %d dimensions; flashc tensors have at "
                          "most %d" % (name, nd, _lib.FLASHC_MAX_DIMS))
    if code is None:
        code = _CODES.get(t.dtype)
        if code is None:
            code = _code(t, name)  # raises
    if into is not None:
        return _PACKS_INTO[nd](into, off, t.data_ptr(), code, nd, *shape, *t.stride())
    return _PACKS[nd](t.data_ptr(), code, nd, *shape, *t.stride())


def _tensor(t, name, code=None):
    """_desc as a ctypes flashc_tensor, for the descriptions other structs
    point to (sinks, slopes, cache fields, cu_seqlens)."""
    return _lib.flashc_tensor.from_buffer_copy(_desc(t, name, code))


# The per-call entries without argtypes: their arguments are descriptor
# bytes, None or byref objects, which ctypes passes as pointers by itself
# (~0.7 µs a call less than the argtypes conversions, measured on the H200's
# host). The bindings in _lib keep their argtypes for every other caller.
def _raw(name):
    if not hasattr(_lib.lib, name):
        return None
    fn = _lib.lib[name]  # a new function object: _lib's binding is untouched
    fn.restype = ctypes.c_int
    return fn


_attn_fwd_c = _raw("flashc_attn_fwd")
_attn_kvcache_fwd_c = _raw("flashc_attn_kvcache_fwd")

# torch's current stream as a raw cudaStream_t without building a Stream
# object (torch.cuda.current_stream costs ~15 us a call); the public call
# where this private one is missing.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _placement(tensors):
    """(backend code, stream handle) for tensors that must share one device
    (None entries skipped)."""
    idx = None
    for t in tensors:  # the common case first: CUDA tensors of one device
        if t is not None:
            if not t.is_cuda:
                return _placement_any(tensors)
            i = t.get_device()
            if idx is None:
                idx = i
            elif i != idx:
                return _placement_any(tensors)
    if idx is None:
        return _placement_any(tensors)
    stream = _raw_stream(idx) if _raw_stream is not None else torch.cuda.current_stream(idx).cuda_stream
    return _lib.FLASHC_BACKEND_CUDA, stream or None


def _placement_any(tensors):
    dev = None
    for t in tensors:
        if t is None:
            continue
        d = t.device
        if dev is None:
            dev = d
        elif d != dev:
            devs = {str(x.device) for x in tensors if x is not None}
            raise FlashcError(_lib.FLASHC_ERR_DEVICE_MISMATCH,
                              "tensors are on different devices: %s" % sorted(devs))
    if dev is None:
        raise FlashcError(_lib.FLASHC_ERR_NULL_POINTER, "no tensor given")
    if dev.type == "cuda":
        idx = dev.index if dev.index is not None else torch.cuda.current_device()
        stream = _raw_stream(idx) if _raw_stream is not None else torch.cuda.current_stream(dev).cuda_stream
        return _lib.FLASHC_BACKEND_CUDA, stream or None
    if dev.type != "cpu":
        raise FlashcError(_lib.FLASHC_ERR_UNSUPPORTED, "flashc runs on cpu and cuda tensors, "
                          "not %s" % dev.type)
    return _lib.FLASHC_BACKEND_CPU, None


def _like(t):
    """A new contiguous tensor of t's shape, dtype and device (empty_like
    where t is contiguous: half the CPU time of new_empty(shape))."""
    return torch.empty_like(t) if t.is_contiguous() else t.new_empty(t.shape)


def _out_like(q, qd):
    """(o, o's descriptor bytes): o = _like(q), and where q is contiguous o
    has q's shape, strides and dtype, so its descriptor is q's (qd) with o's
    pointer — one struct pack fewer a call (B = 1 decode, measured in one
    process by benchmarks/prof_host_ab.py: −0.4 µs event-timed, −0.9 µs a
    pipelined call)."""
    if q.is_contiguous():
        o = torch.empty_like(q)
        return o, _PTR(o.data_ptr()) + qd[_PTR_SIZE:]
    o = q.new_empty(q.shape)
    return o, _desc(o, "o")


def _ref(x):
    return ctypes.byref(x) if x is not None else None


# ---------------------------------------------------------------- attention


def _head_vector(x, q, name):
    """sinks / alibi_slopes as the library reads them: q's float type
    (float64 for float64 q, else float32) on q's device, any strides (the
    library checks the shape). A float tensor of another precision, or a
    list, is converted; the result is detached (gradients are handled by
    _Attention)."""
    if x is None:
        return None
    want = torch.float64 if q.dtype == torch.float64 else torch.float32
    if not torch.is_tensor(x):
        return torch.as_tensor(x, dtype=want, device=q.device)
    if not x.is_floating_point():
        raise FlashcError(_lib.FLASHC_ERR_DTYPE, "%s has dtype %s; it must be %s (other float "
                          "dtypes are converted)" % (name, x.dtype, want))
    return x.detach().to(device=q.device, dtype=want)


_PARAMS = {}
_PARAMS_MAX = 256


def _params_ref(backend, stream, opts):
    """byref(params) of a call without sink logits or slopes: built once per
    (backend, stream, options) and shared (the library only reads it), or
    None where an option is not a plain Python value (no cache: the caller
    builds one). opts: (causal, softmax_scale, window, sink_tokens, softcap,
    deterministic) as the user passed them."""
    key = (backend, stream, opts)
    try:
        rp = _PARAMS.get(key)
    except TypeError:  # an unhashable option (a window list): no cache
        return None
    if rp is None:
        causal, softmax_scale, window, sink_tokens, softcap, deterministic = opts
        # Only plain values are keys: a tensor hashes by identity, so an
        # entry keyed by one could later answer for another of a new value.
        if _params_key(backend, causal, softmax_scale, window, sink_tokens, softcap, deterministic) is None:
            return None
        p = attn_params(backend, stream=stream, causal=bool(causal), softmax_scale=softmax_scale, window=window,
                        sink_tokens=sink_tokens, softcap=softcap, deterministic=bool(deterministic))
        if len(_PARAMS) >= _PARAMS_MAX:
            _PARAMS.clear()
        rp = _PARAMS[key] = ctypes.byref(p)  # (the byref object keeps p alive)
    return rp


def _fwd_params_ref(backend, stream, opts, sinks, alibi_slopes):
    """byref(params) of a forward: _params_ref's shared one where it has
    one, else built for this call (sinks / slopes as _head_vector made them)."""
    rp = _params_ref(backend, stream, opts) if sinks is None and alibi_slopes is None else None
    if rp is not None:
        return rp
    causal, softmax_scale, window, sink_tokens, softcap, deterministic = opts
    return ctypes.byref(attn_params(
        backend, stream=stream, causal=bool(causal), softmax_scale=softmax_scale, window=window,
        sink_tokens=int(sink_tokens), softcap=softcap, deterministic=bool(deterministic),
        sinks=_tensor(sinks, "sinks") if sinks is not None else None,
        alibi_slopes=_tensor(alibi_slopes, "alibi_slopes") if alibi_slopes is not None else None))


def _opts(kw):
    """The options tuple of _params_ref from the kw dict that _Attention and
    the compiled operator carry."""
    return (kw["causal"], kw["softmax_scale"], kw["window"], kw["sink_tokens"], kw["softcap"],
            kw.get("deterministic", True))


def _attn_fwd(q, k, v, sinks, alibi_slopes, opts, want_lse):
    """o (and lse, or None) of one forward; sinks / slopes as _head_vector
    made them; opts as _params_ref takes them. lse is skipped (NULL) when
    want_lse is false. The one forward body of every torch path (inference,
    autograd, the compiled operator)."""
    backend, stream = _placement((q, k, v))
    rp = _fwd_params_ref(backend, stream, opts, sinks, alibi_slopes)
    qd = _desc(q, "q")
    o, od = _out_like(q, qd)
    lse = None
    if want_lse and q.dim() == 4:  # else the library reports the shape error
        lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]),
                          dtype=torch.float64 if q.dtype == torch.float64 else torch.float32)
    _check(_attn_fwd_c(qd, _desc(k, "k"), _desc(v, "v"), od,
                       _desc(lse, "lse") if lse is not None else None, rp))
    return o, lse


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sinks, alibi_slopes, kw):
        q, k, v = q.detach(), k.detach(), v.detach()
        s = _head_vector(sinks, q, "sinks")
        a = _head_vector(alibi_slopes, q, "alibi_slopes")
        o, lse = _attn_fwd(q, k, v, s, a, _opts(kw), True)
        ctx.save_for_backward(q, k, v, o, lse, s, a)
        ctx.kw = kw
        ctx.sinks_like = (sinks.dtype, sinks.device) if torch.is_tensor(sinks) else None
        return o

    @staticmethod
    @once_differentiable
    def backward(ctx, do):
        q, k, v, o, lse, s, a = ctx.saved_tensors
        dq, dk, dv, ds = _attn_bwd(do, q, k, v, o, lse, s, a, ctx.kw)
        if ctx.sinks_like is None:
            ds = None  # sinks given as a list: nothing to differentiate
        elif ds is not None:
            ds = ds.to(dtype=ctx.sinks_like[0], device=ctx.sinks_like[1])
        # The ALiBi slopes are constants: no gradient (flashc.h, Backward).
        return dq, dk, dv, ds, None, None


def _attn_bwd(do, q, k, v, o, lse, s, a, kw):
    """(dq, dk, dv, dsinks or None) of one backward; s / a as _head_vector made them."""
    backend, stream = _placement((q, k, v, do))
    if do.dtype != q.dtype:
        do = do.to(q.dtype)
    dq, dk, dv = _like(q), _like(k), _like(v)
    ds = s.new_empty(s.shape) if s is not None else None
    p = attn_params(backend, stream=stream,
                    sinks=_tensor(s, "sinks") if s is not None else None,
                    alibi_slopes=_tensor(a, "alibi_slopes") if a is not None else None,
                    dsinks=_tensor(ds, "dsinks") if ds is not None else None, **kw)
    _check(_lib.flashc_attn_bwd(_desc(do, "dout"), _desc(q, "q"),
                                _desc(k, "k"), _desc(v, "v"),
                                _desc(o, "o"), _desc(lse, "lse"),
                                _desc(dq, "dq"), _desc(dk, "dk"),
                                _desc(dv, "dv"), None, _ref(p)))
    return dq, dk, dv, ds


def attention(q, k, v, causal=False, softmax_scale=None, window=(-1, -1), sink_tokens=0,
              sinks=None, softcap=None, alibi_slopes=None, deterministic=True):
    """o = attention(q, k, v) with gradients for q, k, v and sinks.

    q [B, Sq, Hq, D], k and v [B, Sk, Hkv, D] (Hq % Hkv == 0: GQA/MQA), one
    dtype of float32/float16/bfloat16/float64, any strides, all on one
    device (cpu or cuda). Returns o [B, Sq, Hq, D].
      softmax_scale: None or 0 = 1/sqrt(D).
      softcap: None or 0 = off; c > 0: the scaled logit becomes c·tanh(x/c)
        (Gemma-2); the gradient flows through it (1 − tanh²).
      alibi_slopes: None, or [Hq] / [B, Hq] slopes (any float dtype, converted
        to float32 — float64 for float64 q — on q's device): the logit gets
        −slope·|i + Sk − Sq − j| after the softcap. No gradient (constants).
        Finite: checked for CPU tensors; CUDA memory is not inspected.
      causal: bottom-right aligned. window=(left, right), -1 = unbounded.
      sink_tokens: keys [0, N) always visible (StreamingLLM).
      sinks: optional [Hq] per-head sink logits (GPT-OSS): an extra logit in
        every softmax denominator, with no value; differentiable.
      deterministic: the backward's gradients bit-identical across runs (the
        default); False lets the CUDA backend add dq in whatever order its
        blocks finish (float atomics or unordered bulk adds: last bits vary).
    Order of operations (flashc.h): scale, softcap, ALiBi, mask, softmax
    with the sink logit.
    """
    if sinks is None and alibi_slopes is None and not (torch.is_grad_enabled() and (
            q.requires_grad or k.requires_grad or v.requires_grad)) and not (
            _compiled_attention is not None and _is_compiling()):
        # The inference call (a decode step): straight to the forward body, no
        # intermediate dict or autograd node — the Python layer is most of a
        # small call's host time (benchmarks/NOTES.md, sixteenth session).
        return _attn_fwd(q, k, v, None, None, (causal, softmax_scale, window, sink_tokens, softcap, deterministic),
                         False)[0]
    kw = dict(causal=bool(causal), softmax_scale=softmax_scale, window=window,
              sink_tokens=int(sink_tokens), softcap=softcap, deterministic=bool(deterministic))
    if _compiled_attention is not None and _is_compiling():
        # torch.compile: one opaque operator (flashc::attention_fwd) with a
        # fake implementation and autograd, no graph break (_torch_ops.py).
        return _compiled_attention(q, k, v, sinks, alibi_slopes, kw)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad or (
            torch.is_tensor(sinks) and sinks.requires_grad)):
        return _Attention.apply(q, k, v, sinks, alibi_slopes, kw)
    # Nothing to differentiate, with sink logits or slopes: no autograd node,
    # no logsumexp (no detach either: only the storage is read, and nothing
    # here records a graph).
    return _attn_fwd(q, k, v, _head_vector(sinks, q, "sinks"), _head_vector(alibi_slopes, q, "alibi_slopes"),
                     (causal, softmax_scale, window, sink_tokens, softcap, deterministic), False)[0]


# ------------------------------------------------------------ weighted sum


def _wsum_fwd(x, w):
    backend, stream = _placement((x, w))
    y = torch.empty(x.shape[:-1], dtype=x.dtype, device=x.device)
    p = _lib.exec_params_default()
    p.backend = backend
    p.stream = stream
    _check(_lib.flashc_weighted_sum(_desc(x, "x"), _desc(w, "w"),
                                    _desc(y, "y"), _ref(p)))
    return y


def _wsum_bwd(dy, x, w, need_dx, need_dw):
    backend, stream = _placement((x, w, dy))
    if dy.dtype != x.dtype:
        dy = dy.to(x.dtype)
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device) if need_dx else None
    dw = torch.empty(w.shape, dtype=w.dtype, device=w.device) if need_dw else None
    p = _lib.exec_params_default()
    p.backend = backend
    p.stream = stream
    _check(_lib.flashc_weighted_sum_bwd(_desc(dy, "dy"), _desc(x, "x"),
                                        _desc(w, "w"),
                                        _desc(dx, "dx") if dx is not None else None,
                                        _desc(dw, "dw") if dw is not None else None,
                                        _ref(p)))
    return dx, dw


class _WeightedSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        x, w = x.detach(), w.detach()
        ctx.save_for_backward(x, w)
        return _wsum_fwd(x, w)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        return _wsum_bwd(dy, x, w, ctx.needs_input_grad[0], ctx.needs_input_grad[1])


def weighted_sum(x, w):
    """y[...] = Σ_d x[..., d] · w[d], differentiable in x and w.
    x [..., D] (any strides), w [D], same dtype and device; y = x.shape[:-1]."""
    if _compiled_weighted_sum is not None and _is_compiling():
        return _compiled_weighted_sum(x, w)
    return _WeightedSum.apply(x, w)


# ------------------------------------------------ ragged batches, KV caches


def _index(x, q, name):
    """(tensor, host): an index argument as an int32 tensor on q's device,
    and its values as a NumPy array when they were on the host (a CPU
    tensor, a list or a NumPy array), else None. Integer tensors of another
    dtype are converted; a CPU index tensor for CUDA q is copied to the
    device after its values are checked (the library does not inspect
    device memory)."""
    if x is None:
        return None, None
    if torch.is_tensor(x) and x.is_cuda and x.dtype == torch.int32 and x.device == q.device:
        return x, None  # (the decode step's case: nothing to convert or check here)
    if not torch.is_tensor(x):
        x = torch.as_tensor(x)
    if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        raise FlashcError(_lib.FLASHC_ERR_DTYPE, "%s has dtype %s; index arrays must be integers "
                          "(int32; other integer dtypes are converted)" % (name, x.dtype))
    x = x.detach()
    host = None
    if x.device.type == "cpu":
        host = x.numpy()
        if x.dtype != torch.int32:
            info = torch.iinfo(torch.int32)
            if x.numel() and (int(x.min()) < info.min or int(x.max()) > info.max):
                raise FlashcError(_lib.FLASHC_ERR_INVALID_ARGUMENT, "%s holds values that do "
                                  "not fit int32" % name)
    return x.to(device=q.device, dtype=torch.int32), host


def _varlen_seqs(q, k, cu_q, cu_k, max_q, max_k):
    """The flashc_varlen of a call: cu_q, cu_k as _index made them;
    max_seqlen None -> the longest sequence of host cu_seqlens, else 0 (the
    library finds it). Host values for CUDA tensors are checked here."""
    seqs = _lib.varlen_default()
    for which, (t, host), given, x in (("q", cu_q, max_q, q), ("k", cu_k, max_k, k)):
        setattr(seqs, "cu_seqlens_" + which, ctypes.pointer(_tensor(t, "", _lib.FLASHC_I32)))
        setattr(seqs, "max_seqlen_" + which,
                _max_seqlen(host, given, x.shape[0] if x.dim() else 0, which, x.is_cuda))
    return seqs


def _varlen_fwd(q, k, v, cu_q, cu_k, max_q, max_k, sinks, alibi_slopes, kw, want_lse):
    """(o, lse [Hq, Tq] or None, the flashc_varlen used) of one varlen forward."""
    fn = _ragged_fn(_lib.flashc_attn_varlen_fwd, "flashc_attn_varlen_fwd")
    backend, stream = _placement((q, k, v))
    seqs = _varlen_seqs(q, k, cu_q, cu_k, max_q, max_k)
    o = _like(q)
    lse = None
    if want_lse and q.dim() == 3:  # else the library reports the shape error
        lse = q.new_empty((q.shape[1], q.shape[0]),
                          dtype=torch.float64 if q.dtype == torch.float64 else torch.float32)
    p = attn_params(backend, stream=stream,
                    sinks=_tensor(sinks, "sinks") if sinks is not None else None,
                    alibi_slopes=(_tensor(alibi_slopes, "alibi_slopes")
                                  if alibi_slopes is not None else None), **kw)
    _check(fn(_desc(q, "q"), _desc(k, "k"), _desc(v, "v"), _ref(seqs),
              _desc(o, "o"), _desc(lse, "lse") if lse is not None else None,
              _ref(p)))
    return o, lse, seqs


class _AttentionVarlen(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sinks, alibi_slopes, cu_q, cu_k, lens, kw):
        # cu_q, cu_k: (int32 tensor on q's device, host values or None), as _index
        # made them; lens: (max_seqlen_q, max_seqlen_k) as the caller gave them.
        q, k, v = q.detach(), k.detach(), v.detach()
        s = _head_vector(sinks, q, "sinks")
        a = _head_vector(alibi_slopes, q, "alibi_slopes")
        o, lse, seqs = _varlen_fwd(q, k, v, cu_q, cu_k, lens[0], lens[1], s, a, kw, True)
        ctx.save_for_backward(q, k, v, o, lse, s, a, cu_q[0], cu_k[0])
        ctx.kw = kw
        # The backward reuses the lengths the forward used (its cu_seqlens are
        # device copies then: no second scan, no synchronising read).
        ctx.lens = (seqs.max_seqlen_q, seqs.max_seqlen_k)
        ctx.sinks_like = (sinks.dtype, sinks.device) if torch.is_tensor(sinks) else None
        return o

    @staticmethod
    @once_differentiable
    def backward(ctx, do):
        q, k, v, o, lse, s, a, cu_q, cu_k = ctx.saved_tensors
        fn = _ragged_fn(_lib.flashc_attn_varlen_bwd, "flashc_attn_varlen_bwd")
        backend, stream = _placement((q, k, v, do))
        if do.dtype != q.dtype:
            do = do.to(q.dtype)
        # Values were checked in the forward; the device copies are reused.
        seqs = _varlen_seqs(q, k, (cu_q, None), (cu_k, None), *ctx.lens)
        dq, dk, dv = _like(q), _like(k), _like(v)
        ds = s.new_empty(s.shape) if s is not None else None
        p = attn_params(backend, stream=stream,
                        sinks=_tensor(s, "sinks") if s is not None else None,
                        alibi_slopes=_tensor(a, "alibi_slopes") if a is not None else None,
                        dsinks=_tensor(ds, "dsinks") if ds is not None else None, **ctx.kw)
        _check(fn(_desc(do, "dout"), _desc(q, "q"), _desc(k, "k"),
                  _desc(v, "v"), _desc(o, "o"), _desc(lse, "lse"),
                  _ref(seqs), _desc(dq, "dq"), _desc(dk, "dk"),
                  _desc(dv, "dv"), _ref(p)))
        if ctx.sinks_like is None:
            ds = None
        elif ds is not None:
            ds = ds.to(dtype=ctx.sinks_like[0], device=ctx.sinks_like[1])
        return dq, dk, dv, ds, None, None, None, None, None


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None,
                     causal=False, softmax_scale=None, window=(-1, -1), sink_tokens=0,
                     sinks=None, softcap=None, alibi_slopes=None, deterministic=True):
    """o = attention over a packed batch of sequences, with gradients for q,
    k, v and sinks (flashc_attn_varlen_bwd).

    q [Tq, Hq, D], k and v [Tk, Hkv, D]: the sequences' rows packed along
    axis 0; cu_seqlens_q, cu_seqlens_k [B + 1] (int32; other integer dtypes,
    lists and CPU tensors are converted and moved to q's device; host values
    are checked); max_seqlen_*: None = computed from host cu_seqlens, else
    0 (the library finds it). Returns o [Tq, Hq, D]. Every keyword means
    what it means for attention(), per sequence (bottom-right aligned per
    sequence; [B, Hq] ALiBi slopes are per sequence), deterministic too.
    Rows of o outside every sequence are unspecified; their gradients are
    zero.
    """
    kw = dict(causal=bool(causal), softmax_scale=softmax_scale, window=window,
              sink_tokens=int(sink_tokens), softcap=softcap, deterministic=bool(deterministic))
    cu_q = _index(cu_seqlens_q, q, "cu_seqlens_q")
    cu_k = _index(cu_seqlens_k, q, "cu_seqlens_k")
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad or (
            torch.is_tensor(sinks) and sinks.requires_grad)):
        return _AttentionVarlen.apply(q, k, v, sinks, alibi_slopes, cu_q, cu_k,
                                      (max_seqlen_q, max_seqlen_k), kw)
    return _varlen_fwd(q, k, v, cu_q, cu_k, max_seqlen_q,
                       max_seqlen_k, _head_vector(sinks, q, "sinks"),
                       _head_vector(alibi_slopes, q, "alibi_slopes"), kw, False)[0]


_increment_version = getattr(getattr(torch.autograd, "graph", None), "increment_version", None)


# flashc_kvcache: struct_size, then its seven descriptor pointers (NULL = absent).
_KVCACHE = struct.Struct("@I7P")
if _KVCACHE.size != ctypes.sizeof(_lib.flashc_kvcache):
    raise ImportError("flashc.torch: flashc_kvcache packs to %d bytes, its ctypes mirror has %d"
                      % (_KVCACHE.size, ctypes.sizeof(_lib.flashc_kvcache)))
_DESC_SIZE = _lib.tensor_struct.size


# One buffer a call: the flashc_kvcache, then the descriptors its fields point
# to (64-bit words: the struct's pointers stay aligned).
_KV_WORDS = (_KVCACHE.size + 7 * _DESC_SIZE + 7) // 8
_KvBuf = ctypes.c_uint64 * _KV_WORDS


def _kvcache(fields):
    """byref of a flashc_kvcache whose fields — (tensor or None, name, dtype
    code or None), in the struct's order — point to descriptors packed after
    it in the same buffer (the byref object keeps the buffer alive). One
    buffer and a pack a tensor instead of a ctypes structure and pointer
    per tensor."""
    buf = _KvBuf()
    base = ctypes.addressof(buf)
    ptrs = []
    off = _KVCACHE.size
    for t, name, code in fields:
        if t is None:
            ptrs.append(0)
            continue
        _desc(t, name, code, buf, off)  # (a slice assignment would copy byte by byte: ~8 µs)
        ptrs.append(base + off)
        off += _DESC_SIZE
    _KVCACHE.pack_into(buf, 0, _KVCACHE.size, *ptrs)
    return ctypes.byref(buf)


def attention_with_kvcache(q, k_cache, v_cache, k_new=None, v_new=None, *, cache_seqlens,
                           block_table=None, cache_batch_idx=None, causal=False,
                           softmax_scale=None, window=(-1, -1), sink_tokens=0, sinks=None,
                           softcap=None, alibi_slopes=None):
    """o = attention of q [B, Sn, Hq, D] against a KV cache, after writing
    k_new / v_new [B, Sk_new, Hkv, D] (optional, both or neither) into
    k_cache / v_cache in place at positions cache_seqlens[b] ... (the caller
    advances cache_seqlens). Inference only: o carries no gradient.

    k_cache, v_cache [Bc, Sc, Hkv, D], or with block_table [B, max_pages]
    the pages [num_pages, page_size, Hkv, D]. cache_seqlens [B] (or an int),
    cache_batch_idx [B], block_table: int32 (converted like the cu_seqlens of
    attention_varlen; host values are checked). Every keyword means what it
    means for attention(), per sequence with Sk = cache_seqlens[b] + Sk_new.
    Returns o [B, Sn, Hq, D].
    """
    fn = _ragged_fn(_attn_kvcache_fwd_c, "flashc_attn_kvcache_fwd")
    backend, stream = _placement((q, k_cache, v_cache, k_new, v_new))
    if isinstance(cache_seqlens, int):
        cache_seqlens = [cache_seqlens] * (q.shape[0] if q.dim() else 1)
    lens, hl = _index(cache_seqlens, q, "cache_seqlens")
    bidx, hb = _index(cache_batch_idx, q, "cache_batch_idx")
    table, ht = _index(block_table, q, "block_table")
    if q.is_cuda and q.dim() == 4:
        s_new = k_new.shape[1] if k_new is not None and k_new.dim() == 4 else 0
        _check_kvcache_host(hl, hb, ht, q.shape[0], s_new, tuple(k_cache.shape),
                            tuple(table.shape) if table is not None else None)
    I32 = _lib.FLASHC_I32
    cache = _kvcache(((k_cache, "k_cache", None), (v_cache, "v_cache", None), (lens, "cache_seqlens", I32),
                             (k_new, "k_new", None), (v_new, "v_new", None), (bidx, "cache_batch_idx", I32),
                             (table, "block_table", I32)))
    qd = _desc(q, "q")
    o, od = _out_like(q, qd)
    opts = (causal, softmax_scale, window, sink_tokens, softcap, True)
    rp = _fwd_params_ref(backend, stream, opts, _head_vector(sinks, q, "sinks"),
                         _head_vector(alibi_slopes, q, "alibi_slopes"))
    _check(fn(qd, cache, od, None, rp))
    if (k_new is not None or v_new is not None) and _increment_version is not None:
        # Written through raw pointers: tell autograd the caches changed
        # (inference tensors have no version counter).
        for c in (k_cache, v_cache):
            if not c.is_inference():
                _increment_version(c)
    return o


# ------------------------------------------------------- torch.compile ops

_is_compiling_fn = getattr(getattr(torch, "compiler", None), "is_compiling", None)


def _is_compiling():
    return bool(_is_compiling_fn()) if _is_compiling_fn is not None else False


# flashc::attention_fwd/_bwd and flashc::weighted_sum(_bwd) as torch.library
# custom ops (None on a torch without torch.library.custom_op).
from . import _torch_ops  # noqa: E402

_compiled_attention, _compiled_weighted_sum = _torch_ops.register(sys.modules[__name__])
