"""flashc.torch: torch.autograd functions over flashc (imported on demand:
`import flashc` never imports torch; `import flashc.torch` does).

    import torch, flashc.torch
    q = torch.randn(2, 1024, 8, 64, requires_grad=True)    # [B, Sq, Hq, D]
    k = torch.randn(2, 1024, 2, 64, requires_grad=True)    # [B, Sk, Hkv, D]
    v = torch.randn(2, 1024, 2, 64, requires_grad=True)
    o = flashc.torch.attention(q, k, v, causal=True)       # [B, Sq, Hq, D]
    o.sum().backward()

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

import torch
from torch.autograd.function import once_differentiable

from . import _lib
from ._core import attn_params
from ._errors import FlashcError, check as _check

__all__ = ["attention", "weighted_sum"]

_CODES = {torch.float32: _lib.FLASHC_F32, torch.float16: _lib.FLASHC_F16,
          torch.bfloat16: _lib.FLASHC_BF16, torch.float64: _lib.FLASHC_F64}


# ------------------------------------------------------------------ helpers


def _code(t, name):
    code = _CODES.get(t.dtype)
    if code is None:
        raise FlashcError(_lib.FLASHC_ERR_DTYPE, "%s has dtype %s; flashc supports float32, "
                          "float16, bfloat16 and float64" % (name, t.dtype))
    return code


def _tensor(t, name):
    """A flashc_tensor describing torch tensor t (strides in elements).
    Per call cost matters (the user pays it on every step): slice
    assignment into the ctypes arrays, no per-element loop."""
    nd = t.dim()
    if nd > _lib.FLASHC_MAX_DIMS:
        raise FlashcError(_lib.FLASHC_ERR_SHAPE, "%s has %d dimensions; flashc tensors have at "
                          "most %d" % (name, nd, _lib.FLASHC_MAX_DIMS))
    x = _lib.flashc_tensor()
    x.data = t.data_ptr() or None
    x.dtype = _code(t, name)
    x.ndim = nd
    x.shape[:nd] = t.shape
    x.strides[:nd] = t.stride()
    return x


# torch's current stream as a raw cudaStream_t without building a Stream
# object (torch.cuda.current_stream costs ~15 us a call); the public call
# where this private one is missing.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _placement(tensors):
    """(backend code, stream handle) for tensors that must share one device."""
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
    if dev.type == "cuda":
        idx = dev.index if dev.index is not None else torch.cuda.current_device()
        stream = _raw_stream(idx) if _raw_stream is not None else torch.cuda.current_stream(dev).cuda_stream
        return _lib.FLASHC_BACKEND_CUDA, stream or None
    if dev.type != "cpu":
        raise FlashcError(_lib.FLASHC_ERR_UNSUPPORTED, "flashc runs on cpu and cuda tensors, "
                          "not %s" % dev.type)
    return _lib.FLASHC_BACKEND_CPU, None


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


def _attn_fwd(q, k, v, sinks, alibi_slopes, kw, want_lse):
    """o (and lse, or None) of one forward; sinks / slopes as _head_vector
    made them. lse is skipped (NULL) when want_lse is false."""
    backend, stream = _placement((q, k, v))
    o = q.new_empty(q.shape)
    lse = None
    if want_lse and q.dim() == 4:  # else the library reports the shape error
        lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]),
                          dtype=torch.float64 if q.dtype == torch.float64 else torch.float32)
    p = attn_params(backend, stream=stream,
                    sinks=_tensor(sinks, "sinks") if sinks is not None else None,
                    alibi_slopes=_tensor(alibi_slopes, "alibi_slopes") if alibi_slopes is not None else None,
                    **kw)
    _check(_lib.flashc_attn_fwd(_ref(_tensor(q, "q")), _ref(_tensor(k, "k")),
                                _ref(_tensor(v, "v")), _ref(_tensor(o, "o")),
                                _ref(_tensor(lse, "lse")) if lse is not None else None,
                                _ref(p)))
    return o, lse


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sinks, alibi_slopes, kw):
        q, k, v = q.detach(), k.detach(), v.detach()
        s = _head_vector(sinks, q, "sinks")
        a = _head_vector(alibi_slopes, q, "alibi_slopes")
        o, lse = _attn_fwd(q, k, v, s, a, kw, True)
        ctx.save_for_backward(q, k, v, o, lse, s, a)
        ctx.kw = kw
        ctx.sinks_like = (sinks.dtype, sinks.device) if torch.is_tensor(sinks) else None
        return o

    @staticmethod
    @once_differentiable
    def backward(ctx, do):
        q, k, v, o, lse, s, a = ctx.saved_tensors
        backend, stream = _placement((q, k, v, do))
        if do.dtype != q.dtype:
            do = do.to(q.dtype)
        dq, dk, dv = q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)
        ds = s.new_empty(s.shape) if s is not None else None
        p = attn_params(backend, stream=stream,
                        sinks=_tensor(s, "sinks") if s is not None else None,
                        alibi_slopes=_tensor(a, "alibi_slopes") if a is not None else None,
                        dsinks=_tensor(ds, "dsinks") if ds is not None else None, **ctx.kw)
        _check(_lib.flashc_attn_bwd(_ref(_tensor(do, "dout")), _ref(_tensor(q, "q")),
                                    _ref(_tensor(k, "k")), _ref(_tensor(v, "v")),
                                    _ref(_tensor(o, "o")), _ref(_tensor(lse, "lse")),
                                    _ref(_tensor(dq, "dq")), _ref(_tensor(dk, "dk")),
                                    _ref(_tensor(dv, "dv")), None, _ref(p)))
        if ctx.sinks_like is None:
            ds = None  # sinks given as a list: nothing to differentiate
        elif ds is not None:
            ds = ds.to(dtype=ctx.sinks_like[0], device=ctx.sinks_like[1])
        # The ALiBi slopes are constants: no gradient (flashc.h, Backward).
        return dq, dk, dv, ds, None, None


def attention(q, k, v, causal=False, softmax_scale=None, window=(-1, -1), sink_tokens=0,
              sinks=None, softcap=None, alibi_slopes=None):
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
    Order of operations (flashc.h): scale, softcap, ALiBi, mask, softmax
    with the sink logit.
    """
    kw = dict(causal=bool(causal), softmax_scale=softmax_scale, window=window,
              sink_tokens=int(sink_tokens), softcap=softcap)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad or (
            torch.is_tensor(sinks) and sinks.requires_grad)):
        return _Attention.apply(q, k, v, sinks, alibi_slopes, kw)
    # Nothing to differentiate (inference, torch.no_grad): no autograd node,
    # no logsumexp — the same kernel, less per-call cost.
    return _attn_fwd(q.detach(), k.detach(), v.detach(), _head_vector(sinks, q, "sinks"),
                     _head_vector(alibi_slopes, q, "alibi_slopes"), kw, False)[0]


# ------------------------------------------------------------ weighted sum


class _WeightedSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        x, w = x.detach(), w.detach()
        backend, stream = _placement((x, w))
        y = torch.empty(x.shape[:-1], dtype=x.dtype, device=x.device)
        p = _lib.exec_params_default()
        p.backend = backend
        p.stream = stream
        _check(_lib.flashc_weighted_sum(_ref(_tensor(x, "x")), _ref(_tensor(w, "w")),
                                        _ref(_tensor(y, "y")), _ref(p)))
        ctx.save_for_backward(x, w)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        backend, stream = _placement((x, w, dy))
        if dy.dtype != x.dtype:
            dy = dy.to(x.dtype)
        need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dx = torch.empty(x.shape, dtype=x.dtype, device=x.device) if need_dx else None
        dw = torch.empty(w.shape, dtype=w.dtype, device=w.device) if need_dw else None
        p = _lib.exec_params_default()
        p.backend = backend
        p.stream = stream
        _check(_lib.flashc_weighted_sum_bwd(_ref(_tensor(dy, "dy")), _ref(_tensor(x, "x")),
                                            _ref(_tensor(w, "w")),
                                            _ref(_tensor(dx, "dx")) if dx is not None else None,
                                            _ref(_tensor(dw, "dw")) if dw is not None else None,
                                            _ref(p)))
        return dx, dw


def weighted_sum(x, w):
    """y[...] = Σ_d x[..., d] · w[d], differentiable in x and w.
    x [..., D] (any strides), w [D], same dtype and device; y = x.shape[:-1]."""
    return _WeightedSum.apply(x, w)

