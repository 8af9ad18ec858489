"""flashc's torch operators for torch.compile (issue 10): the attention
forward/backward and the weighted sum registered with torch.library.custom_op,
with fake (meta) implementations and autograd, so that Dynamo treats a flashc
call as one opaque node — `torch.compile(fullgraph=True)` of a model that
calls flashc.torch.attention traces without graph breaks, on CPU and CUDA
tensors.

flashc.torch routes to these operators only while torch is compiling
(torch.compiler.is_compiling()); eager calls keep the lighter
autograd.Function path (a custom op's dispatch costs ~10 µs a call). Both
call the same C functions through the same helpers of flashc.torch, so the
results are bit-identical.

Imported by flashc.torch (never by `import flashc`); a torch without
torch.library.custom_op (< 2.4) has no operators: flashc.torch then works
eagerly and Dynamo graph-breaks around it, as before.
"""

from typing import List, Optional, Sequence

import torch

from ._core import _window_pair

AVAILABLE = hasattr(torch, "library") and hasattr(torch.library, "custom_op") and hasattr(
    torch.library, "register_autograd")


def _lse_dtype(q):
    return torch.float64 if q.dtype == torch.float64 else torch.float32


def register(ft):
    """Defines the operators over the helpers of module ft (flashc.torch).
    Returns (attention_op, weighted_sum_op) or (None, None)."""
    if not AVAILABLE:
        return None, None

    def kw_of(causal, softmax_scale, window_left, window_right, sink_tokens, softcap, deterministic):
        return dict(causal=bool(causal), softmax_scale=softmax_scale if softmax_scale else None,
                    window=(int(window_left), int(window_right)), sink_tokens=int(sink_tokens),
                    softcap=softcap if softcap else None, deterministic=bool(deterministic))

    # ------------------------------------------------------------ attention
    @torch.library.custom_op("flashc::attention_fwd", mutates_args=())
    def attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sinks: Optional[torch.Tensor],
                      alibi_slopes: Optional[torch.Tensor], causal: bool, softmax_scale: float,
                      window_left: int, window_right: int, sink_tokens: int,
                      softcap: float, deterministic: bool) -> List[torch.Tensor]:
        kw = kw_of(causal, softmax_scale, window_left, window_right, sink_tokens, softcap, deterministic)
        o, lse = ft._attn_fwd(q, k, v, sinks, alibi_slopes, ft._opts(kw), True)
        return [o, lse]

    @attention_fwd.register_fake
    def _(q, k, v, sinks, alibi_slopes, causal, softmax_scale, window_left, window_right, sink_tokens,
          softcap, deterministic):
        return [q.new_empty(q.shape), q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=_lse_dtype(q))]

    @torch.library.custom_op("flashc::attention_bwd", mutates_args=())
    def attention_bwd(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                      lse: torch.Tensor, sinks: Optional[torch.Tensor], alibi_slopes: Optional[torch.Tensor],
                      causal: bool, softmax_scale: float, window_left: int, window_right: int,
                      sink_tokens: int, softcap: float, deterministic: bool) -> List[torch.Tensor]:
        kw = kw_of(causal, softmax_scale, window_left, window_right, sink_tokens, softcap, deterministic)
        dq, dk, dv, ds = ft._attn_bwd(do, q, k, v, o, lse, sinks, alibi_slopes, kw)
        if ds is None:
            ds = q.new_empty((0,), dtype=_lse_dtype(q))
        return [dq, dk, dv, ds]

    @attention_bwd.register_fake
    def _(do, q, k, v, o, lse, sinks, alibi_slopes, causal, softmax_scale, window_left, window_right,
          sink_tokens, softcap, deterministic):
        ds = sinks.new_empty(sinks.shape) if sinks is not None else q.new_empty((0,), dtype=_lse_dtype(q))
        return [q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), ds]

    def attn_setup(ctx, inputs, output):
        q, k, v, sinks, alibi = inputs[:5]
        ctx.args = inputs[5:]
        ctx.save_for_backward(q, k, v, output[0], output[1], sinks, alibi)

    def attn_backward(ctx, grads):
        do = grads[0]
        q, k, v, o, lse, sinks, alibi = ctx.saved_tensors
        if do.dtype != q.dtype:
            do = do.to(q.dtype)
        dq, dk, dv, ds = torch.ops.flashc.attention_bwd(do.contiguous(), q, k, v, o, lse, sinks, alibi,
                                                        *ctx.args)
        return dq, dk, dv, (ds if sinks is not None else None), None, None, None, None, None, None, None, None

    torch.library.register_autograd("flashc::attention_fwd", attn_backward, setup_context=attn_setup)

    # --------------------------------------------------------- weighted sum
    @torch.library.custom_op("flashc::weighted_sum", mutates_args=())
    def weighted_sum(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return ft._wsum_fwd(x, w)

    @weighted_sum.register_fake
    def _(x, w):
        return x.new_empty(x.shape[:-1])

    @torch.library.custom_op("flashc::weighted_sum_bwd", mutates_args=())
    def weighted_sum_bwd(dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> List[torch.Tensor]:
        dx, dw = ft._wsum_bwd(dy, x, w, True, True)
        return [dx, dw]

    @weighted_sum_bwd.register_fake
    def _(dy, x, w):
        return [x.new_empty(x.shape), w.new_empty(w.shape)]

    def wsum_setup(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def wsum_backward(ctx, dy):
        x, w = ctx.saved_tensors
        if dy.dtype != x.dtype:
            dy = dy.to(x.dtype)
        dx, dw = torch.ops.flashc.weighted_sum_bwd(dy, x, w)
        return dx, dw

    torch.library.register_autograd("flashc::weighted_sum", wsum_backward, setup_context=wsum_setup)

    def attention_compiled(q, k, v, sinks, alibi_slopes, kw):
        """flashc.torch.attention under torch.compile: the operator."""
        def vec(x, name):  # float tensors keep their graph edge (sinks get a gradient)
            if torch.is_tensor(x) and x.is_floating_point():
                return x.to(device=q.device, dtype=_lse_dtype(q))
            return ft._head_vector(x, q, name)

        wl, wr = _window_pair(kw["window"])
        o, _ = torch.ops.flashc.attention_fwd(q, k, v, vec(sinks, "sinks"), vec(alibi_slopes, "alibi_slopes"),
                                              kw["causal"], float(kw["softmax_scale"] or 0.0), int(wl), int(wr),
                                              kw["sink_tokens"], float(kw["softcap"] or 0.0),
                                              bool(kw.get("deterministic", True)))
        return o

    return attention_compiled, torch.ops.flashc.weighted_sum
