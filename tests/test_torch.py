"""flashc.torch: autograd through flashc_attn_fwd/bwd and the weighted sum.

Skips cleanly where torch is absent (the development machine); run on the
GPU test machine, which has PyTorch. Every test runs on "cpu" and, when
torch sees a GPU and flashc reports the cuda backend, on "cuda".
"""

import os
import subprocess
import sys

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
