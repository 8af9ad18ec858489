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

Built directly on the raw binding flashc._lib (one flashc_tensor per torch
tensor, no copies of inputs).
"""

import ctypes

import torch
from torch.autograd.function import once_differentiable

from . import _lib
from ._core import FlashcError

__all__ = ["attention", "weighted_sum"]

_CODES = {torch.float32: _lib.FLASHC_F32, torch.float16: _lib.FLASHC_F16,
          torch.bfloat16: _lib.FLASHC_BF16, torch.float64: _lib.FLASHC_F64}


# ------------------------------------------------------------------ helpers


def _check(status):
    if status != _lib.FLASHC_OK:
        msg = _lib.flashc_last_error()
        raise FlashcError(status, msg.decode("utf-8", "replace") if msg else "")


def _code(t, name):
    code = _CODES.get(t.dtype)
    if code is None:
        raise FlashcError(_lib.FLASHC_ERR_DTYPE, "%s has dtype %s; flashc supports float32, "
                          "float16, bfloat16 and float64" % (name, t.dtype))
    return code


def _tensor(t, name):
    """A flashc_tensor describing torch tensor t (strides in elements)."""
    if t.dim() > _lib.FLASHC_MAX_DIMS:
        raise FlashcError(_lib.FLASHC_ERR_SHAPE, "%s has %d dimensions; flashc tensors have at "
                          "most %d" % (name, t.dim(), _lib.FLASHC_MAX_DIMS))
    x = _lib.flashc_tensor()
    x.data = t.data_ptr() or None
    x.dtype = _code(t, name)
    x.ndim = t.dim()
    for i, (n, s) in enumerate(zip(t.shape, t.stride())):
        x.shape[i] = int(n)
        x.strides[i] = int(s)
    return x


def _placement(tensors):
    """(backend code, stream handle) for tensors that must share one device."""
    devs = {t.device for t in tensors if t is not None}
    if len(devs) > 1:
        raise FlashcError(_lib.FLASHC_ERR_DEVICE_MISMATCH,
                          "tensors are on different devices: %s" % sorted(str(d) for d in devs))
    dev = devs.pop()
    if dev.type == "cuda":
        return _lib.FLASHC_BACKEND_CUDA, torch.cuda.current_stream(dev).cuda_stream or None
    if dev.type != "cpu":
        raise FlashcError(_lib.FLASHC_ERR_UNSUPPORTED, "flashc runs on cpu and cuda tensors, "
                          "not %s" % dev.type)
    return _lib.FLASHC_BACKEND_CPU, None


def _ref(x):
    return ctypes.byref(x) if x is not None else None


# ---------------------------------------------------------------- attention


def _attn_params(backend, stream, causal, softmax_scale, window, sink_tokens, sinks):
    p = _lib.attn_params_default()
    p.backend = backend
    p.softmax_scale = 0.0 if softmax_scale is None else float(softmax_scale)
    if softmax_scale is not None and p.softmax_scale == 0.0:
        raise FlashcError(_lib.FLASHC_ERR_INVALID_ARGUMENT,
                          "softmax_scale=0 is not allowed (None means 1/sqrt(D))")
    p.causal = 1 if causal else 0
    p.deterministic = 1
    p.window_left = -1 if window[0] is None else int(window[0])
    p.window_right = -1 if window[1] is None else int(window[1])
    p.num_sink_tokens = int(sink_tokens)
    p.sink_logits = sinks.data_ptr() if sinks is not None else None
    p.stream = stream
    return p


def _sinks_for(sinks, q):
    """sink logits as the library reads them: [Hq] contiguous, float32 (float64
    for float64 q), on q's device."""
    if sinks is None:
        return None
    want = torch.float64 if q.dtype == torch.float64 else torch.float32
    s = sinks.detach().to(device=q.device, dtype=want).contiguous()
    if q.dim() == 4 and s.shape != (q.shape[2],):
        raise FlashcError(_lib.FLASHC_ERR_SHAPE, "sinks.shape=%s, expected (%d,)"
                          % (tuple(s.shape), q.shape[2]))
    return s


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sinks, causal, softmax_scale, window, sink_tokens):
        q, k, v = q.detach(), k.detach(), v.detach()
        s = _sinks_for(sinks, q)
        backend, stream = _placement((q, k, v))
        o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        lse = None
        if q.dim() == 4:  # else the library reports the shape error
            lse = torch.empty((q.shape[0], q.shape[2], q.shape[1]),
                              dtype=torch.float64 if q.dtype == torch.float64 else torch.float32,
                              device=q.device)
        p = _attn_params(backend, stream, causal, softmax_scale, window, sink_tokens, s)
        _check(_lib.flashc_attn_fwd(_ref(_tensor(q, "q")), _ref(_tensor(k, "k")),
                                    _ref(_tensor(v, "v")), _ref(_tensor(o, "o")),
                                    _ref(_tensor(lse, "lse")) if lse is not None else None,
                                    _ref(p)))
        ctx.save_for_backward(q, k, v, o, lse, s)
        ctx.args = (causal, softmax_scale, window, sink_tokens)
        ctx.sinks_like = (sinks.dtype, sinks.device) if sinks is not None else None
        return o

    @staticmethod
    @once_differentiable
    def backward(ctx, do):
        q, k, v, o, lse, s = ctx.saved_tensors
        causal, softmax_scale, window, sink_tokens = ctx.args
        backend, stream = _placement((q, k, v, do))
        if do.dtype != q.dtype:
            do = do.to(q.dtype)
        dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
        dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
        ds = torch.empty_like(s) if s is not None else None
        p = _attn_params(backend, stream, causal, softmax_scale, window, sink_tokens, s)
        _check(_lib.flashc_attn_bwd(_ref(_tensor(do, "dout")), _ref(_tensor(q, "q")),
                                    _ref(_tensor(k, "k")), _ref(_tensor(v, "v")),
                                    _ref(_tensor(o, "o")), _ref(_tensor(lse, "lse")),
                                    _ref(_tensor(dq, "dq")), _ref(_tensor(dk, "dk")),
                                    _ref(_tensor(dv, "dv")),
                                    ds.data_ptr() if ds is not None else None, _ref(p)))
        if ds is not None:
            ds = ds.to(dtype=ctx.sinks_like[0], device=ctx.sinks_like[1])
        return dq, dk, dv, ds, None, None, None, None


def attention(q, k, v, causal=False, softmax_scale=None, window=(-1, -1), sink_tokens=0,
              sinks=None):
    """o = attention(q, k, v) with gradients for q, k, v and sinks.

    q [B, Sq, Hq, D], k and v [B, Sk, Hkv, D] (Hq % Hkv == 0: GQA/MQA), one
    dtype of float32/float16/bfloat16/float64, any strides, all on one
    device (cpu or cuda). causal: bottom-right aligned. window=(left, right),
    -1 = unbounded. sink_tokens: keys [0, N) always visible (StreamingLLM).
    sinks: optional [Hq] per-head sink logits (GPT-OSS): an extra logit in
    every softmax denominator, with no value. Returns o [B, Sq, Hq, D].
    """
    try:
        wl, wr = window
    except (TypeError, ValueError):
        raise TypeError("window must be a pair (left, right), -1 meaning unbounded; got %r"
                        % (window,)) from None
    return _Attention.apply(q, k, v, sinks, bool(causal), softmax_scale, (wl, wr),
                            int(sink_tokens))


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

