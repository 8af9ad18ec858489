"""flashc.torch: autograd through flashc_attn_fwd/bwd and the weighted sum.

Skips cleanly where torch is absent (the development machine); run on the
GPU test machine, which has PyTorch. Every test runs on "cpu" and, when
torch sees a GPU and flashc reports the cuda backend, on "cuda".
"""

import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import flashc  # noqa: E402
import flashc.torch as ft  # noqa: E402


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def device(request):
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    return request.param


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(1234)


def randn(*shape, dtype=torch.float64, device="cpu", grad=True):
    return torch.randn(*shape, dtype=dtype, device=device).requires_grad_(grad)


def test_import_flashc_does_not_import_torch():
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(os.path.dirname(here), "python"),
                                         env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-c",
                        "import sys, flashc; assert 'torch' not in sys.modules, 'torch imported'"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


# --------------------------------------------------------------- gradcheck

GRADCHECK = {
    "causal_gqa": ((1, 5, 6, 4, 2, 3), dict(causal=True)),
    "window_sinktok_sinks": ((2, 6, 7, 2, 1, 4), dict(window=(2, 1), sink_tokens=2, sinks=True)),
    "causal_masked_rows_sinks": ((1, 6, 3, 2, 2, 3), dict(causal=True, sinks=True,
                                                           softmax_scale=0.8)),
}


@pytest.mark.parametrize("name", list(GRADCHECK))
def test_gradcheck_attention(name, device):
    (B, Sq, Sk, Hq, Hkv, D), kw = GRADCHECK[name]
    kw = dict(kw)
    q = randn(B, Sq, Hq, D, device=device)
    k = randn(B, Sk, Hkv, D, device=device)
    v = randn(B, Sk, Hkv, D, device=device)
    inputs = [q, k, v]
    if kw.pop("sinks", False):
        inputs.append(randn(Hq, device=device))

    def f(q, k, v, s=None):
        return ft.attention(q, k, v, sinks=s, **kw)

    assert torch.autograd.gradcheck(f, tuple(inputs), eps=1e-6, atol=1e-7, rtol=1e-6)


def test_gradcheck_weighted_sum(device):
    x = randn(3, 4, 5, device=device)
    w = randn(5, device=device)
    assert torch.autograd.gradcheck(ft.weighted_sum, (x, w), eps=1e-6, atol=1e-8, rtol=1e-6)
    # a strided x and only one input needing a gradient
    xt = randn(5, 4, 3, device=device).transpose(0, 2)
    w2 = randn(5, device=device, grad=False)
    assert torch.autograd.gradcheck(ft.weighted_sum, (xt, w2), eps=1e-6, atol=1e-8, rtol=1e-6)


def test_weighted_sum_matches_matmul(device):
    x = randn(7, 33, dtype=torch.float32, device=device)
    w = randn(33, dtype=torch.float32, device=device)
    y = ft.weighted_sum(x, w)
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    y2 = x2 @ w2
    torch.testing.assert_close(y, y2, rtol=1e-5, atol=1e-5)
    dy = torch.randn_like(y)
    y.backward(dy)
    y2.backward(dy)
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w.grad, w2.grad, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------- vs torch's SDPA


def _run(fn, inputs, do):
    """(out, grads of every input) for out = fn(*inputs) and dL/dout = do."""
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    out = fn(*leaves)
    out.backward(do)
    return out.detach(), [t.grad for t in leaves]


def _tol(dtype):
    return {torch.float64: (1e-10, 1e-10), torch.float32: (2e-4, 2e-4)}[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", ["causal", "gqa", "gqa_causal_noncontiguous"])
def test_matches_sdpa(case, dtype, device):
    B, S, D = 2, 77, 40
    Hq, Hkv = (4, 4) if case == "causal" else (6, 2)
    causal = case != "gqa"
    q = randn(B, S, Hq, D, dtype=dtype, device=device, grad=False)
    k = randn(B, S, Hkv, D, dtype=dtype, device=device, grad=False)
    v = randn(B, S, Hkv, D, dtype=dtype, device=device, grad=False)
    if case == "gqa_causal_noncontiguous":  # [B, H, S, D] storage seen as [B, S, H, D]
        q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
    do = torch.randn(B, S, Hq, D, dtype=dtype, device=device)
    g = Hq // Hkv

    def ours(q, k, v):
        return ft.attention(q, k, v, causal=causal)

    def sdpa(q, k, v):
        # SDPA is [B, H, S, D]; GQA by repeating each K/V head g times
        # (query head h reads K/V head h // g, as in flashc).
        kk = k.repeat_interleave(g, dim=2)
        vv = v.repeat_interleave(g, dim=2)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), kk.transpose(1, 2),
                                           vv.transpose(1, 2), is_causal=causal)
        return o.transpose(1, 2)

    o1, g1 = _run(ours, (q, k, v), do)
    o2, g2 = _run(sdpa, (q, k, v), do)
    rtol, atol = _tol(dtype)
    torch.testing.assert_close(o1, o2, rtol=rtol, atol=atol)
    for name, a, b in zip("qkv", g1, g2):
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol, msg=lambda m: "d%s: %s" % (name, m))


def test_matches_sdpa_low_precision(device):
    if device != "cuda":
        pytest.skip("fp16/bf16 SDPA comparison is for the GPU")
    for dtype in (torch.float16, torch.bfloat16):
        q, k, v = (torch.randn(2, 256, 4, 64, dtype=dtype, device=device) for _ in range(3))
        do = torch.randn_like(q)
        o1, g1 = _run(lambda q, k, v: ft.attention(q, k, v, causal=True), (q, k, v), do)
        ref = [t.double() for t in (q, k, v)]
        o2, g2 = _run(lambda q, k, v: F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
            is_causal=True).transpose(1, 2), ref, do.double())
        tol = 2e-2 if dtype == torch.float16 else 6e-2
        torch.testing.assert_close(o1.double(), o2, rtol=tol, atol=tol)
        for a, b in zip(g1, g2):
            torch.testing.assert_close(a.double(), b, rtol=tol, atol=tol * 4)


# ------------------------------------------- GPT-OSS sinks written in torch


def gpt_oss_attention(q, k, v, sinks, causal=True):
    """The GPT-OSS formulation: append the per-head sink logit as an extra
    column of the scores, softmax, drop that column."""
    B, Sq, Hq, D = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    g = Hq // Hkv
    kk, vv = k.repeat_interleave(g, dim=2), v.repeat_interleave(g, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, kk) / D ** 0.5
    if causal:  # bottom-right aligned
        i = torch.arange(Sq, device=q.device)[:, None]
        j = torch.arange(Sk, device=q.device)[None, :]
        s = s.masked_fill(j > i + (Sk - Sq), float("-inf"))
    col = sinks.view(1, Hq, 1, 1).expand(B, Hq, Sq, 1).to(s.dtype)
    p = torch.softmax(torch.cat([s, col], dim=-1), dim=-1)[..., :-1]
    return torch.einsum("bhqk,bkhd->bqhd", p, vv)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(2, 50, 50, 4, 2, 32), (1, 70, 30, 2, 1, 16)],
                         ids=["gqa", "masked_rows"])
def test_matches_gpt_oss_sinks(shape, dtype, device):
    B, Sq, Sk, Hq, Hkv, D = shape
    q = torch.randn(B, Sq, Hq, D, dtype=dtype, device=device)
    k = torch.randn(B, Sk, Hkv, D, dtype=dtype, device=device)
    v = torch.randn(B, Sk, Hkv, D, dtype=dtype, device=device)
    sinks = torch.randn(Hq, dtype=dtype, device=device)
    do = torch.randn(B, Sq, Hq, D, dtype=dtype, device=device)
    o1, g1 = _run(lambda q, k, v, s: ft.attention(q, k, v, causal=True, sinks=s),
                  (q, k, v, sinks), do)
    o2, g2 = _run(lambda q, k, v, s: gpt_oss_attention(q, k, v, s), (q, k, v, sinks), do)
    rtol, atol = _tol(dtype)
    torch.testing.assert_close(o1, o2, rtol=rtol, atol=atol)
    for name, a, b in zip(("dq", "dk", "dv", "dsinks"), g1, g2):
        assert a.dtype == b.dtype, name
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol * 10 if name == "dsinks" else atol,
                                   msg=lambda m: "%s: %s" % (name, m))


def test_no_grad_path_matches_autograd_path(device):
    """Inference (no_grad / no input needing grad) skips the autograd node and
    the logsumexp; the output must be the autograd path's, bit for bit."""
    dt = torch.float32
    q, k, v = (randn(2, 37, 4, 16, dtype=dt, device=device) for _ in range(3))
    sinks = torch.randn(4, device=device, requires_grad=True)
    kw = dict(causal=True, sinks=sinks, softcap=20.0)
    o_grad = ft.attention(q, k, v, **kw)
    assert o_grad.grad_fn is not None
    with torch.no_grad():
        o_ng = ft.attention(q, k, v, **kw)
    o_plain = ft.attention(q.detach(), k.detach(), v.detach(), **dict(kw, sinks=sinks.detach()))
    for o in (o_ng, o_plain):
        assert o.grad_fn is None and not o.requires_grad
        assert torch.equal(o, o_grad.detach())


@pytest.mark.parametrize("compiled", [False, True])
def test_deterministic_keyword(device, compiled):
    """deterministic=False (unordered dq additions on CUDA) gives the same
    gradients up to float rounding, with and without torch.compile;
    deterministic=True (the default) gives bit-identical gradients twice."""
    if compiled and (not hasattr(torch, "compile") or not hasattr(torch.library, "custom_op")):
        pytest.skip("torch.compile with torch.library.custom_op needs torch >= 2.4")
    dt = torch.float32 if device == "cpu" else torch.bfloat16
    q, k, v = (randn(2, 300, 4, 64, dtype=dt, device=device) for _ in range(3))
    do = randn(2, 300, 4, 64, dtype=dt, device=device)

    def grads(det):
        f = lambda q, k, v: ft.attention(q, k, v, causal=True, deterministic=det)  # noqa: E731
        if compiled:
            import torch._dynamo
            torch._dynamo.reset()
            f = torch.compile(f, fullgraph=True, backend=_compile_backend())
        qq, kk, vv = (x.detach().requires_grad_() for x in (q, k, v))
        f(qq, kk, vv).backward(do)
        return [x.grad for x in (qq, kk, vv)]
    g1, g2, gn = grads(True), grads(True), grads(False)
    tol = dict(rtol=1e-5, atol=1e-5) if dt == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    for a, b, c in zip(g1, g2, gn):
        assert torch.equal(a, b)
        torch.testing.assert_close(c.float(), a.float(), **tol)


# ---------------------------------------------------------------- errors


def test_errors_are_flashc_errors():
    q = torch.randn(1, 4, 3, 8)
    k = torch.randn(1, 4, 2, 8)  # 3 % 2 != 0
    with pytest.raises(flashc.FlashcError):
        ft.attention(q, k, k)
    with pytest.raises(flashc.FlashcError):
        ft.attention(q, q.to(torch.float64), q)
    with pytest.raises(flashc.FlashcError):
        ft.attention(q, q, q, sinks=torch.zeros(2))


# ------------------------------------------------ softcap and ALiBi slopes


def torch_reference(q, k, v, causal=False, window=(-1, -1), sink_tokens=0, sinks=None,
                    softcap=None, alibi_slopes=None, softmax_scale=None):
    """flashc.h's score pipeline in float64 torch math, differentiable by
    torch itself: scale, softcap, ALiBi bias −slope·|i + Sk − Sq − j|, the
    masks (bottom-right aligned), softmax with the sink logit as an extra
    column."""
    q, k, v = q.double(), k.double(), v.double()
    B, Sq, Hq, D = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    g = Hq // Hkv
    kk, vv = k.repeat_interleave(g, dim=2), v.repeat_interleave(g, dim=2)
    scale = D ** -0.5 if not softmax_scale else softmax_scale
    s = torch.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(Sq, device=q.device)[:, None]
    j = torch.arange(Sk, device=q.device)[None, :]
    off = Sk - Sq
    if alibi_slopes is not None:
        sl = alibi_slopes.detach().double()
        sl = sl.view(1, Hq, 1, 1) if sl.dim() == 1 else sl.view(B, Hq, 1, 1)
        s = s - sl * (i + off - j).abs().double()
    L, R = window
    if causal:
        R = 0
    vis = torch.ones(Sq, Sk, dtype=torch.bool, device=q.device)
    right = (j <= i + off + R) if R >= 0 else vis
    if L >= 0:
        vis = vis & (j >= i + off - L)
    vis = vis & right
    if sink_tokens:
        vis = vis | ((j < sink_tokens) & right)
    s = s.masked_fill(~vis, float("-inf"))
    if sinks is not None:
        col = sinks.double().view(1, Hq, 1, 1).expand(B, Hq, Sq, 1)
        s = torch.cat([s, col], dim=-1)
    p = torch.softmax(s, dim=-1)
    p = torch.nan_to_num(p, nan=0.0)  # rows with nothing visible and no sink
    if sinks is not None:
        p = p[..., :-1]
    return torch.einsum("bhqk,bkhd->bqhd", p, vv)


def _slopes_t(B, Hq, batched, device):
    if batched:
        s = torch.rand(B, Hq, dtype=torch.float64, device=device) * 0.25
        s[-1, 0] = -0.05
        return s
    return 2.0 ** (-8.0 * torch.arange(1, Hq + 1, dtype=torch.float64, device=device) / Hq)


MODS_T = {
    "softcap": dict(softcap=2.0),
    "alibi_h": dict(alibi=False),
    "alibi_bh": dict(alibi=True),
    "both": dict(softcap=3.0, alibi=True, softmax_scale=0.3),
}


@pytest.mark.parametrize("mods", list(MODS_T))
def test_gradcheck_score_mods(mods, device):
    """torch.autograd.gradcheck (float64 finite differences) through softcap
    and ALiBi, with sinks, GQA, a window and sink tokens."""
    B, Sq, Sk, Hq, Hkv, D = 2, 5, 7, 4, 2, 3
    kw = dict(MODS_T[mods])
    alibi = kw.pop("alibi", None)
    slopes = _slopes_t(B, Hq, alibi, device) if alibi is not None else None
    q = randn(B, Sq, Hq, D, device=device)
    k = randn(B, Sk, Hkv, D, device=device)
    v = randn(B, Sk, Hkv, D, device=device)
    s = randn(Hq, device=device)

    def f(q, k, v, s):
        return ft.attention(q, k, v, sinks=s, alibi_slopes=slopes, window=(3, 1), sink_tokens=1,
                            **kw)

    assert torch.autograd.gradcheck(f, (q, k, v, s), eps=1e-6, atol=1e-7, rtol=1e-6)


_MOD_TOL = {torch.float64: (1e-10, 1e-10), torch.float32: (2e-4, 2e-4),
            torch.float16: (2e-2, 2e-2), torch.bfloat16: (6e-2, 6e-2)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16],
                         ids=["f32", "f64", "f16", "bf16"])
@pytest.mark.parametrize("mods", list(MODS_T))
@pytest.mark.parametrize("case", ["causal_gqa_sinks", "window_sinktok_sq_gt_sk"])
def test_score_mods_match_torch_math(case, mods, dtype, device):
    """flashc.torch.attention with softcap / ALiBi against the float64 torch
    math reference, output and gradients (q, k, v, sinks); the slopes get no
    gradient."""
    if device == "cpu" and dtype in (torch.float16, torch.bfloat16):
        pytest.skip("fp16/bf16 are compared on the GPU")
    if case == "causal_gqa_sinks":
        B, Sq, Sk, Hq, Hkv, D, mask = 2, 77, 90, 6, 2, 64, dict(causal=True)
    else:
        B, Sq, Sk, Hq, Hkv, D, mask = 1, 90, 60, 4, 1, 40, dict(window=(20, 5), sink_tokens=3)
    kw = dict(MODS_T[mods])
    alibi = kw.pop("alibi", None)
    slopes = None
    if alibi is not None:
        slopes = _slopes_t(B, Hq, alibi, device).to(torch.float32).requires_grad_()
    q, k, v = (torch.randn(B, S, H, D, device=device).to(dtype)
               for S, H in ((Sq, Hq), (Sk, Hkv), (Sk, Hkv)))
    sinks = torch.randn(Hq, device=device).to(torch.float64 if dtype == torch.float64
                                              else torch.float32)
    do = torch.randn(B, Sq, Hq, D, device=device).to(dtype)
    o1, g1 = _run(lambda q, k, v, s: ft.attention(q, k, v, sinks=s, alibi_slopes=slopes,
                                                  **mask, **kw), (q, k, v, sinks), do)
    o2, g2 = _run(lambda q, k, v, s: torch_reference(q, k, v, sinks=s, alibi_slopes=slopes,
                                                     **mask, **kw),
                  [t.double() for t in (q, k, v, sinks)], do.double())
    rtol, atol = _MOD_TOL[dtype]
    torch.testing.assert_close(o1.double(), o2, rtol=rtol, atol=atol)
    for name, a, b in zip(("dq", "dk", "dv", "dsinks"), g1, g2):
        scale = 4 if dtype in (torch.float16, torch.bfloat16) else 1
        if name == "dsinks":
            scale *= 10
        torch.testing.assert_close(a.double(), b, rtol=rtol, atol=atol * scale,
                                   msg=lambda m: "%s: %s" % (name, m))
    if slopes is not None:
        assert slopes.grad is None  # constants


def test_score_mods_slope_conversion(device):
    """Slopes of another float dtype (and lists) are converted with torch, on
    q's device; the same bits as float32 slopes."""
    q = torch.randn(2, 9, 4, 16, device=device)
    s = torch.tensor([0.5, 0.25, 0.125, 0.0625], device=device)
    base = ft.attention(q, q, q, causal=True, alibi_slopes=s)
    for other in (s.double(), s.half(), s.cpu(), [0.5, 0.25, 0.125, 0.0625]):
        torch.testing.assert_close(ft.attention(q, q, q, causal=True, alibi_slopes=other), base,
                                   rtol=0, atol=0)
    # The NumPy-layer entry point takes torch tensors too (its result is a
    # NumPy array for CPU tensors, a flashc.cuda.DeviceArray for CUDA ones).
    def host(x):
        return x.detach().cpu().numpy() if torch.is_tensor(x) else np.asarray(
            x.numpy() if hasattr(x, "numpy") else x)

    np_base = host(flashc.attention(q, q, q, causal=True, alibi_slopes=s))
    np.testing.assert_array_equal(
        host(flashc.attention(q, q, q, causal=True, alibi_slopes=s.half())), np_base)
    np.testing.assert_array_equal(np_base, host(base))


def test_score_mods_errors(device):
    q = torch.randn(1, 4, 2, 8, device=device)
    with pytest.raises(flashc.FlashcError) as ei:
        ft.attention(q, q, q, softcap=-1.0)
    assert "softcap" in ei.value.message
    with pytest.raises(flashc.FlashcError) as ei:
        ft.attention(q, q, q, alibi_slopes=torch.zeros(3, device=device))
    assert "alibi_slopes.shape[0]=3" in ei.value.message
    with pytest.raises(flashc.FlashcError) as ei:
        ft.attention(q, q, q, alibi_slopes=torch.zeros(2, dtype=torch.int32, device=device))
    assert "alibi_slopes" in ei.value.message
    if device == "cpu":  # CUDA memory is not inspected
        with pytest.raises(flashc.FlashcError) as ei:
            ft.attention(q, q, q, alibi_slopes=torch.tensor([0.5, float("nan")]))
        assert "is not finite" in ei.value.message


def test_batch_zero(device):
    # An empty batch through autograd: empty outputs and gradients, the sink
    # logits' gradient 0 (a sum over no rows), on every backend.
    q = torch.randn(0, 5, 4, 16, device=device, requires_grad=True)
    k, v = (torch.randn(0, 7, 2, 16, device=device, requires_grad=True) for _ in range(2))
    s = torch.randn(4, device=device, requires_grad=True)
    o = ft.attention(q, k, v, causal=True, sinks=s)
    assert o.shape == q.shape
    o.sum().backward()
    assert q.grad.shape == q.shape and k.grad.shape == k.shape and v.grad.shape == v.shape
    assert torch.equal(s.grad, torch.zeros_like(s))


def test_softmax_scale_zero_is_default(device):
    q = torch.randn(1, 6, 2, 16, device=device)
    torch.testing.assert_close(ft.attention(q, q, q, softmax_scale=0), ft.attention(q, q, q),
                               rtol=0, atol=0)


# ------------------------------------------------------- torch.compile (issue 10)

def _compile_backend():
    # aot_eager traces with Dynamo and runs AOT autograd over the fake
    # implementations without needing a C++ toolchain for Inductor.
    return os.environ.get("FLASHC_TEST_COMPILE_BACKEND", "aot_eager")


@pytest.mark.skipif(not hasattr(torch, "compile") or not hasattr(torch.library, "custom_op"),
                    reason="torch.compile with torch.library.custom_op needs torch >= 2.4")
@pytest.mark.parametrize("opts", [dict(causal=True), dict(window=(5, 0), sink_tokens=2),
                                  dict(sinks=True, softcap=3.0)])
def test_compile_fullgraph_attention(device, opts):
    import torch._dynamo
    torch._dynamo.reset()
    dt = torch.float32 if device == "cpu" else torch.bfloat16
    B, S, Hq, Hkv, D = 2, 37, 4, 2, 32
    q = randn(B, S, Hq, D, dtype=dt, device=device)
    k = randn(B, S, Hkv, D, dtype=dt, device=device)
    v = randn(B, S, Hkv, D, dtype=dt, device=device)
    opts = dict(opts)
    sinks = randn(Hq, dtype=torch.float32, device=device) if opts.pop("sinks", False) else None

    def f(q, k, v, sinks):
        o = ft.attention(q, k, v, sinks=sinks, **opts)
        return o.float() * 1.5  # elementwise: bit-identical however the compiler fuses it

    cf = torch.compile(f, fullgraph=True, backend=_compile_backend())
    ys = cf(q, k, v, sinks)
    ye = f(q, k, v, sinks)
    torch.testing.assert_close(ys, ye, rtol=0, atol=0)  # the same kernels: bit-identical
    gy = torch.randn_like(ye)
    ins = [t for t in (q, k, v, sinks) if t is not None]
    gs = torch.autograd.grad(ys, ins, gy)
    ge = torch.autograd.grad(ye, ins, gy)
    for a, b in zip(gs, ge):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.skipif(not hasattr(torch, "compile") or not hasattr(torch.library, "custom_op"),
                    reason="torch.compile with torch.library.custom_op needs torch >= 2.4")
def test_compile_fullgraph_weighted_sum(device):
    import torch._dynamo
    torch._dynamo.reset()
    x = randn(5, 7, 33, dtype=torch.float32, device=device)
    w = randn(33, dtype=torch.float32, device=device)

    def f(x, w):
        return ft.weighted_sum(x * 2.0, w) * 3.0

    cf = torch.compile(f, fullgraph=True, backend=_compile_backend())
    ys, ye = cf(x, w), f(x, w)
    torch.testing.assert_close(ys, ye, rtol=0, atol=0)
    gs = torch.autograd.grad(ys.sum(), (x, w))
    ge = torch.autograd.grad(ye.sum(), (x, w))
    for a, b in zip(gs, ge):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


# ------------------------------------------------------- CUDA graph capture


@pytest.mark.cuda
@pytest.mark.parametrize("Sk", [64, 8192])  # one kernel; split keys + the combine
def test_cuda_graph_capture_decode(Sk):
    """A decode step captured in a CUDA graph replays like the eager call,
    and follows new data copied into the captured inputs (issue 9: serving
    loops capture their steps). Sk = 8192 takes the split-KV kernel, its
    scratch from the module's pool and the combine kernel."""
    if not torch.cuda.is_available() or "cuda" not in flashc.backends():
        pytest.skip("no CUDA device / backend")
    dt = torch.bfloat16
    q = torch.randn(2, 1, 8, 128, device="cuda", dtype=dt)
    k, v = (torch.randn(2, Sk, 2, 128, device="cuda", dtype=dt) for _ in range(2))
    with torch.no_grad():
        eager = ft.attention(q, k, v)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm-up off the default stream, as torch recommends
            ft.attention(q, k, v)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = ft.attention(q, k, v)
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, eager)
        q2 = torch.randn_like(q)
        k[:, Sk // 2:] = torch.randn_like(k[:, Sk // 2:])
        q.copy_(q2)
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, ft.attention(q, k, v))
        assert not torch.equal(out, eager)


@pytest.mark.cuda
@pytest.mark.parametrize("kw", [dict(causal=True), dict(window=(200, 0), sink_tokens=4)],
                         ids=["causal", "window-sinktok"])
def test_cuda_graph_capture_backward(kw):
    """A training step's attention, forward and backward, captured in a CUDA
    graph replays like the eager call, bit for bit (the backward is
    deterministic by default), and follows new data copied into the captured
    inputs. On Hopper the backward launches its dQ conversion as a
    programmatic dependent of the dK/dV kernel (under its last wave): the
    graph keeps that edge."""
    if not torch.cuda.is_available() or "cuda" not in flashc.backends():
        pytest.skip("no CUDA device / backend")
    gen = torch.Generator(device="cuda").manual_seed(5)
    dt = torch.bfloat16
    q = torch.randn(2, 1000, 8, 128, device="cuda", dtype=dt, generator=gen).requires_grad_(True)
    k, v = (torch.randn(2, 1000, 2, 128, device="cuda", dtype=dt, generator=gen).requires_grad_(True)
            for _ in range(2))
    do = torch.randn(2, 1000, 8, 128, device="cuda", dtype=dt, generator=gen)

    def step():
        for t in (q, k, v):
            t.grad = None
        out = ft.attention(q, k, v, **kw)
        out.backward(do)
        return out

    eager = [t.detach().clone() for t in (step(), q.grad, k.grad, v.grad)]
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up off the default stream, as torch recommends
        step()
    torch.cuda.current_stream().wait_stream(s)
    for t in (q, k, v):
        t.grad = None
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = ft.attention(q, k, v, **kw)
        out.backward(do)
    g.replay()
    torch.cuda.synchronize()
    for a, b in zip((out, q.grad, k.grad, v.grad), eager):
        assert torch.equal(a, b)
    with torch.no_grad():
        k.copy_(torch.randn(k.shape, device="cuda", dtype=dt, generator=gen))
        do.copy_(torch.randn(do.shape, device="cuda", dtype=dt, generator=gen))
    g.replay()
    torch.cuda.synchronize()
    got = [t.detach().clone() for t in (out, q.grad, k.grad, v.grad)]
    want = [t.detach().clone() for t in (step(), q.grad, k.grad, v.grad)]
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    assert not torch.equal(got[1], eager[1])


@pytest.mark.cuda
def test_cuda_graphs_decode_concurrent_and_destroyed():
    """Split-KV decodes captured in CUDA graphs (their partial results from
    the pool's allocation nodes: flashc.h, "Streams"): graphs alive at once,
    replayed concurrently on two streams, each give their eager result; a graph
    destroyed right after its replays were queued does not disturb them nor a
    graph captured and replayed at once beside them."""
    if not torch.cuda.is_available() or "cuda" not in flashc.backends():
        pytest.skip("no CUDA device / backend")
    gen = torch.Generator(device="cuda").manual_seed(11)
    dt = torch.bfloat16

    def inputs():
        q = torch.randn(1, 1, 32, 128, device="cuda", dtype=dt, generator=gen)
        k, v = (torch.randn(1, 8192, 8, 128, device="cuda", dtype=dt, generator=gen) for _ in range(2))
        return q, k, v

    def capture(q, k, v):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            ft.attention(q, k, v)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = ft.attention(q, k, v)
        return g, out

    with torch.no_grad():
        cases = []
        for _ in range(3):
            q, k, v = inputs()
            eager = ft.attention(q, k, v)
            g, out = capture(q, k, v)
            cases.append([g, out, eager, (q, k, v)])
        streams = [torch.cuda.Stream(), torch.cuda.Stream()]
        for rep in range(4):
            for i, c in enumerate(cases):
                streams[i % 2].wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(streams[i % 2]):
                    c[0].replay()
        torch.cuda.synchronize()
        for c in cases:
            assert torch.equal(c[1], c[2])
        # destroy a graph right after queueing replays of it (~1 ms of work),
        # capture another at once (no synchronisation: capture_begin on a
        # side stream) and replay it on a second stream
        q, k, v = cases[0][3]
        kk, vv = (torch.randn(1, 65536, 8, 128, device="cuda", dtype=dt, generator=gen) for _ in range(2))
        glong, olong = capture(q, kk, vv)
        elong = ft.attention(q, kk, vv)
        q2, k2, v2 = inputs()
        e2 = ft.attention(q2, k2, v2)
        torch.cuda.synchronize()
        with torch.cuda.stream(streams[0]):
            for _ in range(20):
                glong.replay()
        glong.reset()
        del glong
        g2 = torch.cuda.CUDAGraph()
        with torch.cuda.stream(streams[1]):
            g2.capture_begin()
            o2 = ft.attention(q2, k2, v2)
            g2.capture_end()
            g2.replay()
        torch.cuda.synchronize()
        assert torch.equal(olong, elong)
        assert torch.equal(o2, e2)


@pytest.mark.cuda
def test_decode_scratch_reused_in_flight():
    """Split-KV decode calls queued back to back, on one stream and on two,
    each give the result of the same call run alone. Their partial results
    live in a buffer the module keeps per stream (flashc.h, "Streams"): reused
    by the next call and grown for a larger one while earlier kernels may
    still run, ordered only by the stream — a reuse that broke that order
    would mix one call's partials into another's output."""
    if not torch.cuda.is_available() or "cuda" not in flashc.backends():
        pytest.skip("no CUDA device / backend")
    g = torch.Generator(device="cuda").manual_seed(7)
    dt = torch.bfloat16
    cases = []
    for B, Sk, Hkv in [(1, 8192, 8), (1, 1024, 8), (2, 16384, 4), (1, 65536, 8), (1, 4096, 2), (3, 2048, 1)]:
        q = torch.randn(B, 1, 4 * Hkv, 128, device="cuda", dtype=dt, generator=g)
        k, v = (torch.randn(B, Sk, Hkv, 128, device="cuda", dtype=dt, generator=g) for _ in range(2))
        cases.append((q, k, v))
    with torch.no_grad():
        refs = []
        for c in cases:
            refs.append(ft.attention(*c))
            torch.cuda.synchronize()
        streams = [torch.cuda.Stream(), torch.cuda.Stream()]
        for s in streams:
            s.wait_stream(torch.cuda.current_stream())
        outs = []
        for rep in range(3):
            for i, c in enumerate(cases):
                s = torch.cuda.current_stream() if rep == 0 else streams[i % 2]
                with torch.cuda.stream(s):
                    outs.append((i, ft.attention(*c)))
        torch.cuda.synchronize()
    for i, o in outs:
        assert torch.equal(o, refs[i]), "case %d differs from its call run alone" % i


@pytest.mark.cuda
@pytest.mark.parametrize("paged", [False, True])
def test_cuda_graph_capture_kvcache_append(paged):
    """A KV-cache decode step that appends its token (the append kernel, then
    the split-KV kernel launched as its programmatic dependent, then the
    combine) captured in a CUDA graph: each replay appends at the current
    cache_seqlens and attends like the eager step on a copy of the cache."""
    if not torch.cuda.is_available() or "cuda" not in flashc.backends():
        pytest.skip("no CUDA device / backend")
    dt = torch.bfloat16
    B, Sc, Hkv, G, D, page = 2, 8192, 2, 4, 128, 16
    g = torch.Generator(device="cuda").manual_seed(3)
    kc, vc = (torch.randn(B, Sc, Hkv, D, device="cuda", dtype=dt, generator=g) for _ in range(2))
    lens = torch.tensor([5000, 7001], dtype=torch.int32, device="cuda")
    q = torch.randn(B, 1, Hkv * G, D, device="cuda", dtype=dt, generator=g)
    kn, vn = (torch.randn(B, 1, Hkv, D, device="cuda", dtype=dt, generator=g) for _ in range(2))
    table = None
    if paged:  # pages in order b·(Sc/page) + i, stored shuffled
        npb = Sc // page
        perm = torch.randperm(B * npb, device="cuda", generator=g)
        table = perm.view(B, npb).to(torch.int32)
        kp, vp = (torch.empty(B * npb, page, Hkv, D, device="cuda", dtype=dt) for _ in range(2))
        kp[perm.long()] = kc.reshape(B * npb, page, Hkv, D)
        vp[perm.long()] = vc.reshape(B * npb, page, Hkv, D)
        kc, vc = kp, vp

    def step(kcache, vcache):
        return ft.attention_with_kvcache(q, kcache, vcache, kn, vn, cache_seqlens=lens, block_table=table)

    with torch.no_grad():
        k0, v0 = kc.clone(), vc.clone()
        eager = step(k0, v0)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm-up off the default stream
            step(kc.clone(), vc.clone())
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = step(kc, vc)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, eager)
        assert torch.equal(kc, k0) and torch.equal(vc, v0)  # the token appended in place, as eagerly
        lens += 1  # the next step: one more cached key, a new token at the new end
        kn.copy_(torch.randn_like(kn))
        q.copy_(torch.randn_like(q))
        k1, v1 = kc.clone(), vc.clone()
        expect = step(k1, v1)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, expect)
        assert torch.equal(kc, k1) and torch.equal(vc, v1)
