"""Packed variable-length batches: flashc.attention_varlen and its backward
(flashc.h, "Ragged batches and KV caches").

Each sequence must be exactly the dense B = 1 problem with its own lengths,
so the reference is tests/reference.py's dense float64 reference run
sequence by sequence (varlen_reference), and tolerances are those of the
dense tests (a naive same-precision implementation, per sequence).

- forward: a sweep over ragged length patterns (empty sequences, length 1,
  Sq != Sk per sequence, Sq > Sk), every mask option (causal, window, sink
  tokens, sink logits), the score modifiers (softcap, ALiBi [Hq] and
  [B, Hq]), GQA/MQA, odd D and every dtype, on every backend; outputs
  poisoned with NaN: rows inside a sequence must be written, rows outside
  every sequence must stay untouched; NaN/Inf in q/k/v rows outside every
  sequence must not matter;
- backward: the per-sequence float64 backward (dsinks summed over the
  sequences), the naive same-precision backward for fp32/fp16/bf16, and
  central finite differences of the float64 reference on small cases;
  rows of dq/dk/dv outside every sequence are zero;
- index arrays: int32 of any stride, other integer dtypes and lists
  converted, non-integers refused; max_seqlen given or found;
- bad input: FlashcError naming the field;
- CUDA (skips without a GPU): device arrays with device cu_seqlens against
  the CPU backend; flashc.torch.attention_varlen (skips without torch).
"""

import ctypes
import inspect

import numpy as np
import pytest

import flashc
from flashc import _lib
from reference import (
    DTYPES,
    assert_close,
    lse_dtype,
    max_abs_err,
    np_dtype,
    tolerance,
    varlen_backward_reference,
    varlen_reference,
)

# ------------------------------------------------------------------ inputs

MODS = {
    "none": {},
    "softcap": dict(softcap=2.5),
    "alibi_h": dict(alibi="h"),
    "alibi_bh": dict(alibi="bh"),
    "both": dict(softcap=4.0, alibi="bh", softmax_scale=0.8),
}

MASKS = [
    dict(),
    dict(causal=True),
    dict(window=(7, 3)),
    dict(causal=True, window=(16, -1), sink_tokens=3),
    dict(use_sinks=True),
    dict(causal=True, use_sinks=True),
    dict(window=(5, 2), sink_tokens=2, use_sinks=True),
]

# (lens_q, lens_k, pad): per-sequence lengths; pad = rows before / after the
# sequences in q and in k (front_q, back_q, front_k, back_k), poisoned.
LENGTHS = {
    "mixed": ([5, 0, 1, 17, 40], [9, 4, 1, 17, 33], (0, 0, 0, 0)),      # Sq > Sk in the last
    "decode": ([1, 1, 1, 1], [50, 0, 7, 129], (0, 0, 0, 0)),             # a sequence with no key
    "prefill": ([64, 100, 3], [64, 100, 3], (0, 0, 0, 0)),
    "chunks": ([16, 16, 0], [80, 49, 0], (3, 2, 0, 5)),                  # an empty last sequence
    "one_padded": ([70], [130], (4, 9, 11, 6)),
    "many": ([3, 0, 9, 1, 12, 2, 0, 7, 5, 1, 20, 4], [3, 6, 15, 1, 12, 30, 0, 7, 2, 9, 20, 4],
             (1, 1, 1, 1)),
}

# (Hq, Hkv, D)
HEADS = [(4, 2, 40), (6, 1, 72), (4, 4, 96), (3, 1, 33), (8, 2, 64), (2, 1, 128)]


def cu_of(lens, front):
    return (np.concatenate([[0], np.cumsum(lens)]) + front).astype(np.int32)


def make(rng, lens_q, lens_k, pad, Hq, Hkv, D, dtype, mods=None, use_sinks=False, **mask):
    """q, k, v of `dtype`, cu_seqlens_q / _k, and the call's keywords. Rows
    outside every sequence hold NaN and Inf."""
    dt = np_dtype(dtype)
    fq, bq, fk, bk = pad
    cu_q, cu_k = cu_of(lens_q, fq), cu_of(lens_k, fk)
    Tq, Tk = int(cu_q[-1]) + bq, int(cu_k[-1]) + bk
    q = rng.standard_normal((Tq, Hq, D)).astype(dt)
    k = rng.standard_normal((Tk, Hkv, D)).astype(dt)
    v = rng.standard_normal((Tk, Hkv, D)).astype(dt)
    for a, cu in ((q, cu_q), (k, cu_k), (v, cu_k)):
        a[:cu[0]] = np.nan
        a[cu[-1]:] = np.inf
    kw = dict(mask)
    mods = dict(mods or {})
    alibi = mods.pop("alibi", None)
    kw.update(mods)
    fdt = lse_dtype(dtype)
    if alibi == "h":
        kw["alibi_slopes"] = (2.0 ** (-8.0 * np.arange(1, Hq + 1) / Hq)).astype(fdt)
    elif alibi == "bh":
        s = rng.uniform(0.0, 0.25, (len(lens_q), Hq)).astype(fdt)
        s[-1, 0] = -0.05
        kw["alibi_slopes"] = s
    if use_sinks:
        kw["sinks"] = (rng.standard_normal(Hq) * 2.0).astype(fdt)
    return q, k, v, cu_q, cu_k, kw


def inside(cu, total):
    """Boolean [total]: rows that belong to a sequence."""
    m = np.zeros(total, bool)
    m[cu[0]:cu[-1]] = True
    return m


# ----------------------------------------------------------------- forward


def check_forward(backend, rng, lens_q, lens_k, pad, Hq, Hkv, D, dtype, mods=None,
                  use_sinks=False, **mask):
    q, k, v, cu_q, cu_k, kw = make(rng, lens_q, lens_k, pad, Hq, Hkv, D, dtype, mods,
                                   use_sinks, **mask)
    Tq = q.shape[0]
    ro, rl = varlen_reference(q, k, v, cu_q, cu_k, **kw)
    no, nl = varlen_reference(q, k, v, cu_q, cu_k, naive=dtype, **kw)
    out = (np.full(q.shape, np.nan, q.dtype), np.full((Hq, Tq), np.nan, lse_dtype(dtype)))
    o, lse = flashc.attention_varlen(q, k, v, cu_q, cu_k, return_lse=True, backend=backend,
                                     out=out, **kw)
    assert o is out[0] and lse is out[1]
    rows = inside(cu_q, Tq)
    o64 = np.asarray(o, np.float64)
    assert not np.isnan(o64[rows]).any(), "NaN in o inside a sequence (unwritten or wrong)"
    assert not np.isnan(lse[:, rows]).any(), "NaN in lse inside a sequence"
    assert np.isnan(o64[~rows]).all() and np.isnan(lse[:, ~rows]).all(), \
        "rows outside every sequence were written"
    assert_close(o64[rows], ro[rows], no[rows], dtype, "o")
    cap = kw.get("softcap") or 0.0
    lname = lse_dtype(dtype).__name__
    if backend == "cuda" and dtype in ("float16", "bfloat16") and cap:
        # Hardware tanh on the CUDA tensor-core kernels (see test_score_mods).
        tol = max(tolerance(rl[:, rows], nl[:, rows], lname), cap * 2.0 ** -10)
        assert max_abs_err(lse[:, rows], rl[:, rows]) <= tol
    else:
        assert_close(lse[:, rows], rl[:, rows], nl[:, rows], lname, "lse")
    return q, k, v, cu_q, cu_k, kw, o, lse


def mask_id(mask):
    parts = []
    for key, val in mask.items():
        if key == "window":
            parts.append("w%d_%d" % val)
        elif key == "sink_tokens":
            parts.append("n%d" % val)
        else:
            parts.append({"causal": "causal", "use_sinks": "sinks"}[key])
    return "-".join(parts) or "plain"


def _sweep():
    cases, names = [], list(MODS)
    for i, lname in enumerate(LENGTHS):
        for j in range(3):
            heads = HEADS[(i + 2 * j) % len(HEADS)]
            mods = names[(2 * i + j) % len(names)]
            mask = MASKS[(3 * i + 2 * j) % len(MASKS)]
            dtype = DTYPES[(i + j) % 4]
            cid = "%s-H%d_%d-D%d-%s-%s-%s" % ((lname,) + heads + (
                mods, mask_id(mask), dtype))
            cases.append(pytest.param(lname, heads, mods, mask, dtype, id=cid))
    return cases


@pytest.mark.parametrize("lname,heads,mods,mask,dtype", _sweep())
def test_forward_sweep(backend, rng, lname, heads, mods, mask, dtype):
    lens_q, lens_k, pad = LENGTHS[lname]
    check_forward(backend, rng, lens_q, lens_k, pad, *heads, dtype, MODS[mods], **mask)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mods", ["softcap", "alibi_h", "both"])
def test_forward_dtypes(backend, rng, mods, dtype):
    # causal + GQA + window + sink tokens + sink logits, ragged, odd D
    lens_q, lens_k, pad = LENGTHS["mixed"]
    check_forward(backend, rng, lens_q, lens_k, pad, 6, 2, 72, dtype, MODS[mods],
                  use_sinks=True, causal=True, window=(12, 0), sink_tokens=2)


def test_same_as_dense(backend, rng):
    """Sequences of equal lengths: the varlen call is the dense call on the
    same rows (the same definition, bottom-right aligned per sequence)."""
    B, Sq, Sk, Hq, Hkv, D = 3, 20, 33, 4, 2, 40
    q = rng.standard_normal((B, Sq, Hq, D)).astype(np.float32)
    k = rng.standard_normal((B, Sk, Hkv, D)).astype(np.float32)
    v = rng.standard_normal((B, Sk, Hkv, D)).astype(np.float32)
    kw = dict(causal=True, window=(9, 0), sink_tokens=1, softcap=5.0,
              alibi_slopes=rng.uniform(0, 0.2, (B, Hq)).astype(np.float32),
              sinks=rng.standard_normal(Hq).astype(np.float32))
    o, lse = flashc.attention(q, k, v, return_lse=True, backend=backend, **kw)
    ov, lv = flashc.attention_varlen(q.reshape(B * Sq, Hq, D), k.reshape(B * Sk, Hkv, D),
                                     v.reshape(B * Sk, Hkv, D), np.arange(B + 1) * Sq,
                                     np.arange(B + 1) * Sk, return_lse=True, backend=backend,
                                     **kw)
    assert max_abs_err(ov.reshape(o.shape), o) <= 2e-6
    assert max_abs_err(lv.reshape(Hq, B, Sq).transpose(1, 0, 2), lse) <= 2e-6


def test_strided_inputs(backend, rng):
    """q/k/v and o of any strides, cu_seqlens with a stride."""
    lens_q, lens_k, pad = LENGTHS["mixed"]
    q, k, v, cu_q, cu_k, kw = make(rng, lens_q, lens_k, pad, 4, 2, 40, "float32", causal=True)
    base = flashc.attention_varlen(q, k, v, cu_q, cu_k, backend=backend, **kw)
    qs = np.ascontiguousarray(q.transpose(1, 0, 2)).transpose(1, 0, 2)   # [H, T, D] storage
    ks = np.ascontiguousarray(k.transpose(2, 1, 0)).transpose(2, 1, 0)   # D-major
    vs = np.zeros((v.shape[0], v.shape[1], 2 * v.shape[2]), v.dtype)[:, :, ::2]
    vs[...] = v
    cbuf = np.full((2 * cu_q.size,), -7, np.int32)
    cbuf[::2] = cu_q
    out = np.full((q.shape[1], q.shape[0], q.shape[2]), np.nan, q.dtype).transpose(1, 0, 2)
    o = flashc.attention_varlen(qs, ks, vs, cbuf[::2], cu_k, backend=backend, out=out, **kw)
    rows = inside(cu_q, q.shape[0])
    assert o is out
    assert np.asarray(o)[rows].tobytes() == base[rows].tobytes()


def test_signature_matches_attention():
    """Every keyword of flashc.attention, with the same spelling and
    default (the backward: every keyword of attention_backward)."""
    def kw(fn):
        return {n: p.default for n, p in inspect.signature(fn).parameters.items()
                if p.kind == p.KEYWORD_ONLY}
    assert kw(flashc.attention_varlen) == kw(flashc.attention)
    assert kw(flashc.attention_varlen_backward) == kw(flashc.attention_backward)
    assert kw(flashc.attention_with_kvcache) == dict(
        kw(flashc.attention), cache_seqlens=inspect.Parameter.empty, block_table=None,
        cache_batch_idx=None)
    for name in ("attention_varlen", "attention_varlen_backward", "attention_with_kvcache"):
        assert name in flashc.__all__ and getattr(flashc, name) is getattr(flashc._core, name)


# ------------------------------------------------------------ index arrays


def test_struct_mirrors_and_int32():
    """The ctypes mirrors have the library's sizes; int32 (FLASHC_I32) is for
    index arrays only."""
    assert ctypes.sizeof(_lib.flashc_varlen) == _lib.flashc_varlen_default().struct_size
    assert ctypes.sizeof(_lib.flashc_kvcache) == _lib.flashc_kvcache_default().struct_size
    assert _lib.flashc_dtype_size(_lib.FLASHC_I32) == 4
    q = np.zeros((1, 2, 1, 4), np.int32)
    with pytest.raises(flashc.FlashcError, match="q has dtype int32") as e:
        flashc.attention(q, q, q)
    assert e.value.status == _lib.FLASHC_ERR_DTYPE


@pytest.mark.cuda
def test_cuda_int32_device_arrays():
    import flashc.cuda as fcuda
    h = np.arange(7, dtype=np.int32)[::2]
    d = fcuda.to_device(h)
    assert d.dtype == np.int32 and d.__cuda_array_interface__["typestr"] == "<i4"
    assert np.array_equal(d.numpy(), h) and np.array_equal(d[1:].numpy(), h[1:])
    with pytest.raises(flashc.FlashcError, match="q has dtype int32"):
        z = fcuda.to_device(np.zeros((1, 2, 1, 4), np.int32))
        flashc.attention(z, z, z)
    q = fcuda.to_device(np.zeros((4, 1, 8), np.float32))
    with pytest.raises(flashc.FlashcError, match="cu_seqlens_q has dtype float32; index arrays"):
        flashc.attention_varlen(q, q, q, fcuda.to_device(np.zeros(2, np.float32)), [0, 4])
    # Host cu_seqlens for device arrays: checked, then copied to the device.
    o = flashc.attention_varlen(q, q, q, [0, 4], np.array([0, 4], np.int64))
    assert o.numpy().shape == (4, 1, 8)
    with pytest.raises(flashc.FlashcError, match="cu_seqlens_k is device memory but q, k, v"):
        flashc.attention_varlen(np.zeros((4, 1, 8), np.float32), np.zeros((4, 1, 8), np.float32),
                                np.zeros((4, 1, 8), np.float32), [0, 4],
                                fcuda.to_device(np.array([0, 4], np.int32)))


def test_index_dtypes(rng):
    """Other integer dtypes and lists are converted to int32 (the same bits
    as int32); floats and bools are refused."""
    lens_q, lens_k, pad = LENGTHS["chunks"]
    q, k, v, cu_q, cu_k, kw = make(rng, lens_q, lens_k, pad, 4, 2, 16, "float32", causal=True)
    base = flashc.attention_varlen(q, k, v, cu_q, cu_k, **kw)
    rows = inside(cu_q, q.shape[0])
    for conv in (lambda c: c.astype(np.int64), lambda c: c.astype(np.uint16),
                 lambda c: c.tolist(), lambda c: tuple(int(x) for x in c)):
        o = flashc.attention_varlen(q, k, v, conv(cu_q), conv(cu_k), **kw)
        assert o[rows].tobytes() == base[rows].tobytes()
    for bad, what in ((cu_q.astype(np.float32), "float32"), (cu_q > 3, "bool")):
        with pytest.raises(flashc.FlashcError, match="cu_seqlens_q has dtype %s" % what) as e:
            flashc.attention_varlen(q, k, v, bad, cu_k, **kw)
        assert e.value.status == _lib.FLASHC_ERR_DTYPE
    with pytest.raises(flashc.FlashcError, match="cu_seqlens_k holds .* int32"):
        flashc.attention_varlen(q, k, v, cu_q, cu_k.astype(np.int64) + 2 ** 40, **kw)


def test_converted_index_arrays_live_through_the_call(rng):
    """Converted index arrays (copies) stay alive until the library has read
    them: here the sink logits' conversion, made after the cu_seqlens', asks
    NumPy for a buffer of the same size (Hq = B + 1 four-byte values), which
    NumPy's small-buffer cache would hand over if the copy had been freed."""
    lens_q, lens_k = [3, 5, 2], [4, 6, 1]
    q, k, v, cu_q, cu_k, kw = make(rng, lens_q, lens_k, (0, 0, 0, 0), 4, 2, 8, "float32",
                                   use_sinks=True, causal=True)
    base = flashc.attention_varlen(q, k, v, cu_q, cu_k, **kw)
    for _ in range(3):
        o = flashc.attention_varlen(q, k, v, cu_q.tolist(), cu_k.astype(np.int64),
                                    **dict(kw, sinks=kw["sinks"].astype(np.float64)))
        assert o.tobytes() == base.tobytes()


def test_max_seqlen(rng):
    """max_seqlen None (found from the host cu_seqlens), exact, larger, and 0
    (the library finds it) give the same bits; too small is an error."""
    lens_q, lens_k, pad = LENGTHS["mixed"]
    q, k, v, cu_q, cu_k, kw = make(rng, lens_q, lens_k, pad, 4, 2, 16, "float32",
                                   window=(5, 5), use_sinks=True)
    base = flashc.attention_varlen(q, k, v, cu_q, cu_k, **kw)
    for mq, mk in ((max(lens_q), max(lens_k)), (1000, 2000), (0, 0), (None, 0)):
        o = flashc.attention_varlen(q, k, v, cu_q, cu_k, mq, mk, **kw)
        assert o.tobytes() == base.tobytes(), (mq, mk)
    with pytest.raises(flashc.FlashcError, match="max_seqlen_q"):
        flashc.attention_varlen(q, k, v, cu_q, cu_k, max(lens_q) - 1, None, **kw)
    with pytest.raises(flashc.FlashcError, match="max_seqlen_k"):
        flashc.attention_varlen(q, k, v, cu_q, cu_k, None, 3, **kw)
    with pytest.raises(flashc.FlashcError, match="max_seqlen_q must be an integer"):
        flashc.attention_varlen(q, k, v, cu_q, cu_k, 2.5, None, **kw)


# ---------------------------------------------------------------- backward


BWD_CASES = {
    # name: (lengths, (Hq, Hkv, D), keywords)
    "plain": ("mixed", (4, 2, 40), dict()),
    "causal_sinks": ("mixed", (4, 1, 33), dict(causal=True, use_sinks=True)),
    "window_tokens": ("chunks", (6, 2, 24), dict(causal=True, window=(8, 0), sink_tokens=2)),
    "mods": ("decode", (4, 2, 16), dict(mods="both", use_sinks=True, window=(20, 1))),
    "alibi_h_padded": ("one_padded", (2, 1, 72), dict(mods="alibi_h", causal=True)),
    "many": ("many", (3, 3, 8), dict(mods="softcap", use_sinks=True, causal=True)),
}


def run_backward(backend, rng, lname, heads, dtype, kw):
    kw = dict(kw)
    mods = MODS[kw.pop("mods", "none")]
    lens_q, lens_k, pad = LENGTHS[lname]
    q, k, v, cu_q, cu_k, kw = make(rng, lens_q, lens_k, pad, *heads, dtype, mods, **kw)
    do = rng.standard_normal(q.shape).astype(q.dtype)
    do[~inside(cu_q, q.shape[0])] = np.nan  # rows outside every sequence are never read
    o, lse = flashc.attention_varlen(q, k, v, cu_q, cu_k, return_lse=True, backend=backend, **kw)
    n = 4 if "sinks" in kw else 3
    outs = tuple(np.full(a.shape, np.nan, a.dtype) for a in (q, k, v))
    if n == 4:
        outs += (np.full(kw["sinks"].shape, np.nan, kw["sinks"].dtype),)
    g = flashc.attention_varlen_backward(do, q, k, v, o, lse, cu_q, cu_k, backend=backend,
                                         out=outs, **kw)
    assert len(g) == n and all(a is b for a, b in zip(g, outs))
    return q, k, v, do, o, lse, cu_q, cu_k, kw, g


@pytest.mark.parametrize("name", list(BWD_CASES))
def test_backward_f64(backend, rng, name):
    lname, heads, kw = BWD_CASES[name]
    q, k, v, do, o, lse, cu_q, cu_k, kw, g = run_backward(backend, rng, lname, heads,
                                                          "float64", kw)
    ref = varlen_backward_reference(do, q, k, v, cu_q, cu_k, **kw)
    for what, a, r in zip(("dq", "dk", "dv", "dsinks"), g, ref):
        assert not np.isnan(a).any(), "%s: NaN (unwritten or wrong)" % what
        scale = max(1.0, float(np.abs(r).max()))
        assert max_abs_err(a, r) <= 1e-9 * scale, (what, max_abs_err(a, r))
    # Rows outside every sequence: zero gradients.
    for a, cu in ((g[0], cu_q), (g[1], cu_k), (g[2], cu_k)):
        assert np.all(a[~inside(cu, a.shape[0])] == 0)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("name", ["causal_sinks", "mods"])
def test_backward_dtypes(backend, rng, name, dtype):
    lname, heads, kw = BWD_CASES[name]
    q, k, v, do, o, lse, cu_q, cu_k, kw, g = run_backward(backend, rng, lname, heads, dtype, kw)
    ref = varlen_backward_reference(do, q, k, v, cu_q, cu_k, **kw)
    naive = varlen_backward_reference(do, q, k, v, cu_q, cu_k, o=o, lse=lse, naive=dtype, **kw)
    for what, a, r, nv in zip(("dq", "dk", "dv", "dsinks"), g, ref, naive):
        name_ = lse_dtype(dtype).__name__ if what == "dsinks" else dtype
        assert_close(a, r, nv, name_, what, factor=4.0)


def _fd_loss(do, q, k, v, cu_q, cu_k, kw):
    o, _ = varlen_reference(q, k, v, cu_q, cu_k, **kw)
    rows = inside(cu_q, q.shape[0])
    return float(np.sum(do[rows] * o[rows]))


@pytest.mark.parametrize("name", ["fd_causal_sinks", "fd_mods"])
def test_finite_differences(backend, rng, name):
    """flashc's float64 gradients are those of the float64 reference: central
    differences along a random direction and at single coordinates."""
    lens_q, lens_k = [3, 0, 5, 1], [4, 2, 5, 6]
    kw = dict(causal=True, use_sinks=True) if name == "fd_causal_sinks" else dict(
        mods=MODS["both"], use_sinks=True, window=(3, 1), sink_tokens=1)
    mods = kw.pop("mods", None)
    q, k, v, cu_q, cu_k, kw = make(rng, lens_q, lens_k, (1, 0, 0, 2), 4, 2, 6, "float64",
                                   mods, **kw)
    do = rng.standard_normal(q.shape)
    o, lse = flashc.attention_varlen(q, k, v, cu_q, cu_k, return_lse=True, backend=backend, **kw)
    dq, dk, dv, ds = flashc.attention_varlen_backward(do, q, k, v, o, lse, cu_q, cu_k,
                                                      backend=backend, **kw)
    params = {"q": (q, dq), "k": (k, dk), "v": (v, dv), "sinks": (kw["sinks"], ds)}
    clean = {n: np.nan_to_num(x, nan=0.0, posinf=0.0) for n, (x, _) in params.items()}

    def loss_at(**xs):
        a = dict(clean, **xs)
        return _fd_loss(np.nan_to_num(do), a["q"], a["k"], a["v"], cu_q, cu_k,
                        dict(kw, sinks=a["sinks"]))

    eps = 1e-6
    dirs = {n: rng.standard_normal(x.shape) for n, x in clean.items()}
    fd = (loss_at(**{n: clean[n] + eps * dirs[n] for n in clean})
          - loss_at(**{n: clean[n] - eps * dirs[n] for n in clean})) / (2 * eps)
    an = sum(float(np.sum(np.nan_to_num(g) * dirs[n])) for n, (_, g) in params.items())
    scale = sum(float(np.abs(np.nan_to_num(g) * dirs[n]).sum()) for n, (_, g) in params.items())
    assert abs(fd - an) <= 1e-7 * max(scale, 1.0), (fd, an)
    gmax = max(float(np.abs(g).max()) for _, g in params.values())
    for n, (_, g) in params.items():
        flat = clean[n].reshape(-1)
        for idx in rng.choice(flat.size, size=min(5, flat.size), replace=False):
            xp, xm = flat.copy(), flat.copy()
            xp[idx] += eps
            xm[idx] -= eps
            num = (loss_at(**{n: xp.reshape(clean[n].shape)})
                   - loss_at(**{n: xm.reshape(clean[n].shape)})) / (2 * eps)
            assert abs(num - g.reshape(-1)[idx]) <= 1e-7 * max(gmax, 1.0), (n, idx, num)


def test_dsinks_summed_over_sequences(rng):
    """d(sink logits) of a packed batch is the sum of the per-sequence
    (dense B = 1) gradients."""
    lens_q, lens_k, pad = LENGTHS["mixed"]
    q, k, v, cu_q, cu_k, kw = make(rng, lens_q, lens_k, pad, 4, 2, 16, "float64",
                                   use_sinks=True, causal=True)
    do = rng.standard_normal(q.shape)
    o, lse = flashc.attention_varlen(q, k, v, cu_q, cu_k, return_lse=True, **kw)
    ds = flashc.attention_varlen_backward(do, q, k, v, o, lse, cu_q, cu_k, **kw)[3]
    total = np.zeros_like(ds)
    for b in range(len(lens_q)):
        q0, q1, k0, k1 = cu_q[b], cu_q[b + 1], cu_k[b], cu_k[b + 1]
        ob, lb = flashc.attention(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1],
                                  return_lse=True, **kw)
        total += flashc.attention_backward(do[None, q0:q1], q[None, q0:q1], k[None, k0:k1],
                                           v[None, k0:k1], ob, lb, **kw)[3]
    assert max_abs_err(ds, total) <= 1e-12 * max(1.0, float(np.abs(total).max()))


# --------------------------------------------------------------- bad input


def _small(rng, dtype="float32"):
    return make(rng, [3, 4], [5, 2], (0, 0, 0, 0), 2, 1, 8, dtype)


BAD_CU = [
    ([0, 4, 3], [0, 5, 7], r"cu_seqlens_q\[2\]=3 < cu_seqlens_q\[1\]=4"),   # decreasing
    ([0, 3, 7], [0, 6, 5], r"cu_seqlens_k\[2\]=5"),                           # decreasing
    ([-1, 3, 7], [0, 5, 7], r"cu_seqlens_q\[0\]=-1"),                         # negative start
    ([0, 3, 8], [0, 5, 7], r"cu_seqlens_q\[2\]=8 exceeds q.shape\[0\]=7"),    # past the q rows
    ([0, 3, 7], [0, 5, 9], r"cu_seqlens_k\[2\]=9 exceeds k.shape\[0\]=7"),    # past the k rows
]


@pytest.mark.parametrize("cu_q,cu_k,match", BAD_CU,
                         ids=["q_decreasing", "k_decreasing", "q_negative", "q_past_end",
                              "k_past_end"])
def test_bad_cu_seqlens(backend, rng, cu_q, cu_k, match):
    # backend "cuda" with NumPy arrays: checked in Python before the copy.
    q, k, v, _, _, kw = _small(rng)
    with pytest.raises(flashc.FlashcError, match=match) as e:
        flashc.attention_varlen(q, k, v, np.array(cu_q), np.array(cu_k), backend=backend)
    assert e.value.status == _lib.FLASHC_ERR_INVALID_ARGUMENT
    o, lse = flashc.attention_varlen(q, k, v, [0, 3, 7], [0, 5, 7], return_lse=True)
    with pytest.raises(flashc.FlashcError, match=match):
        flashc.attention_varlen_backward(o, q, k, v, o, lse, np.array(cu_q), np.array(cu_k),
                                         backend=backend)


def test_host_check_says_what_the_library_says(rng):
    """Host cu_seqlens of a device call are checked in Python
    (flashc._core._max_seqlen; the library does not inspect device memory):
    the same verdict and message as the library's check of a CPU call."""
    from flashc._core import _max_seqlen
    q, k, v, _, _, kw = _small(rng)
    for cu_q, cu_k, _ in BAD_CU + [([0, 3, 7], [0, 5, 7], "max_seqlen_q")]:
        mq = 2 if cu_q == [0, 3, 7] else None
        with pytest.raises(flashc.FlashcError) as e:
            flashc.attention_varlen(q, k, v, np.array(cu_q), np.array(cu_k), mq)
        with pytest.raises(flashc.FlashcError) as p:
            _max_seqlen(np.array(cu_q, np.int32), mq, 7, "q", True)
            _max_seqlen(np.array(cu_k, np.int32), None, 7, "k", True)
        assert (p.value.status, p.value.message) == (e.value.status, e.value.message)
    assert _max_seqlen(np.array([2, 5, 5, 9], np.int32), None, 9, "q", True) == 4
    assert _max_seqlen(np.array([0, 0], np.int32), None, 0, "q", True) == 0


def test_bad_shapes_and_dtypes(rng):
    q, k, v, cu_q, cu_k, kw = _small(rng)
    cases = [
        (dict(cu_seqlens_k=cu_k[:-1]), r"cu_seqlens_k.shape\[0\]=2"),     # B + 1 differs
        (dict(cu_seqlens_q=cu_q[:1]), r"cu_seqlens_q.shape\[0\]=1"),      # B = 0
        (dict(cu_seqlens_q=cu_q.reshape(1, -1)), "cu_seqlens_q.ndim=2"),   # not 1-D
        (dict(q=q[None]), "q.ndim=4"),                                     # dense layout
        (dict(k=k.astype(np.float64)), "dtype"),
        (dict(v=v[:, :, :4]), r"v.shape\[2\]"),
    ]
    for change, match in cases:
        a = dict(q=q, k=k, v=v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
        a.update(change)
        with pytest.raises(flashc.FlashcError, match=match):
            flashc.attention_varlen(a["q"], a["k"], a["v"], a["cu_seqlens_q"],
                                    a["cu_seqlens_k"])
    o, lse = flashc.attention_varlen(q, k, v, cu_q, cu_k, return_lse=True)
    with pytest.raises(flashc.FlashcError, match="lse"):
        flashc.attention_varlen_backward(o, q, k, v, o, lse.T, cu_q, cu_k)
    with pytest.raises(flashc.FlashcError, match="cu_seqlens_q"):
        flashc.attention_varlen_backward(o, q, k, v, o, lse, np.array([0, 5, 3]), cu_k)


# ------------------------------------------------------------------- CUDA


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("mask", [dict(causal=True, use_sinks=True),
                                  dict(window=(9, 2), sink_tokens=2, mods="both")],
                         ids=["causal_sinks", "window_mods"])
def test_cuda_device_arrays_vs_cpu(rng, dtype, mask):
    """Device arrays and device int32 cu_seqlens (max_seqlen 0: the library
    finds it, and given) against the CPU backend on the same inputs."""
    import flashc.cuda as fcuda
    mask = dict(mask)
    mods = MODS[mask.pop("mods", "none")]
    lens_q, lens_k, pad = LENGTHS["many"]
    q, k, v, cu_q, cu_k, kw = make(rng, lens_q, lens_k, pad, 8, 2, 64, dtype, mods, **mask)
    D = fcuda.to_device
    dkw = {n: (D(a) if isinstance(a, np.ndarray) else a) for n, a in kw.items()}
    ro, rl = varlen_reference(q, k, v, cu_q, cu_k, **kw)
    no, nl = varlen_reference(q, k, v, cu_q, cu_k, naive=dtype, **kw)
    co, cl = flashc.attention_varlen(q, k, v, cu_q, cu_k, return_lse=True, backend="cpu", **kw)
    rows = inside(cu_q, q.shape[0])
    for mx in ((None, None), (max(lens_q), max(lens_k))):
        go, gl = flashc.attention_varlen(D(q), D(k), D(v), D(cu_q), D(cu_k), *mx,
                                         return_lse=True, **dkw)
        go, gl = go.numpy(), gl.numpy()
        assert_close(go[rows], ro[rows], no[rows], dtype, "cuda o")
        assert_close(co[rows], ro[rows], no[rows], dtype, "cpu o")
        assert max_abs_err(go[rows], co[rows]) <= 2 * tolerance(ro[rows], no[rows], dtype)
        assert max_abs_err(gl[:, rows], cl[:, rows]) <= 1e-2
    do = rng.standard_normal(q.shape).astype(q.dtype)
    gc = flashc.attention_varlen_backward(do, q, k, v, co, cl, cu_q, cu_k, backend="cpu", **kw)
    gg = flashc.attention_varlen_backward(D(do), D(q), D(k), D(v), D(co), D(cl), D(cu_q),
                                          D(cu_k), **dkw)
    ref = varlen_backward_reference(do, q, k, v, cu_q, cu_k, **kw)
    naive = varlen_backward_reference(do, q, k, v, cu_q, cu_k, o=co, lse=cl, naive=dtype, **kw)
    for what, a, b, r, nv in zip(("dq", "dk", "dv", "dsinks"), gg, gc, ref, naive):
        name_ = lse_dtype(dtype).__name__ if what == "dsinks" else dtype
        assert_close(a.numpy(), r, nv, name_, "cuda " + what, factor=4.0)


@pytest.mark.cuda
@pytest.mark.parametrize("D,dtype", [(64, "float16"), (128, "bfloat16"), (96, "bfloat16"), (256, "float16"),
                                     (128, "float32")])
@pytest.mark.parametrize("mask", [dict(), dict(causal=True), dict(window=(150, 20), sink_tokens=3, use_sinks=True),
                                  dict(causal=True, mods="both"), dict(mods="softcap")],
                         ids=["plain", "causal", "window_sinks", "causal_mods", "softcap"])
def test_cuda_long_sequences(rng, D, dtype, mask):
    """Sequences of several 128-row query blocks and key tiles (on Hopper the
    wgmma forward's packed-batch path; elsewhere mma.sync), lengths that end
    inside a tile. A tile at a sequence's end reads the next sequence's first
    keys: those hold NaN in k and Inf in v, and must not reach the sequence
    before (what a row cannot see never influences it). Rows whose own
    sequence makes them see a poisoned key are non-finite in the reference
    and must be here too."""
    import flashc.cuda as fcuda
    mask = dict(mask)
    mods = MODS[mask.pop("mods", "none")]
    lens_q = [300, 0, 517, 129, 64, 1]
    lens_k = [300, 7, 700, 129, 200, 70]
    q, k, v, cu_q, cu_k, kw = make(rng, lens_q, lens_k, (0, 0, 0, 0), 4, 2, D, dtype, mods, **mask)
    for b in (1, 3, 5):  # their first keys lie in the last tile of sequences 0, 2 and 4
        k[cu_k[b], 0, 3] = np.nan
        v[cu_k[b], 1, 5] = np.inf
    with np.errstate(invalid="ignore", over="ignore"):
        ro, rl = varlen_reference(q, k, v, cu_q, cu_k, **kw)
        no, nl = varlen_reference(q, k, v, cu_q, cu_k, naive=dtype, **kw)
    dv = fcuda.to_device
    dkw = {n: (dv(a) if isinstance(a, np.ndarray) else a) for n, a in kw.items()}
    go, gl = flashc.attention_varlen(dv(q), dv(k), dv(v), dv(cu_q), dv(cu_k), return_lse=True, **dkw)
    go, gl = go.numpy().astype(np.float64), gl.numpy()
    rows = inside(cu_q, q.shape[0])
    fin = rows & np.isfinite(ro).all(axis=(1, 2))
    clean = np.zeros_like(rows)
    for b in (0, 2, 4):
        clean[cu_q[b]:cu_q[b + 1]] = True
    assert fin[clean].all(), "the reference: sequences 0, 2, 4 see no poisoned key"
    assert_close(go[fin], ro[fin], no[fin], dtype, "o of rows that see no poisoned key")
    lname = lse_dtype(dtype).__name__
    cap = kw.get("softcap") or 0.0
    tol = max(tolerance(rl[:, fin], nl[:, fin], lname), cap * 2.0 ** -10)
    assert max_abs_err(gl[:, fin], rl[:, fin]) <= tol
    bad = rows & ~fin
    assert (~np.isfinite(go[bad])).any(axis=(1, 2)).all(), "a row that sees a NaN/Inf key came out finite"


@pytest.mark.cuda
@pytest.mark.parametrize("poison", [False, True], ids=["clean", "poisoned_neighbours"])
@pytest.mark.parametrize("D,dtype", [(64, "float16"), (128, "bfloat16"), (96, "bfloat16"), (72, "float16"),
                                     (256, "bfloat16"), (128, "float32"), (40, "float32")])
@pytest.mark.parametrize("mask", [dict(), dict(causal=True), dict(window=(150, 20), sink_tokens=3, use_sinks=True),
                                  dict(causal=True, mods="both", use_sinks=True), dict(mods="softcap")],
                         ids=["plain", "causal", "window_sinks", "causal_mods_sinks", "softcap"])
def test_cuda_long_sequences_backward(rng, D, dtype, mask, poison):
    """The backward of a packed batch whose sequences span several key blocks
    and query tiles, lengths ending inside them (on Hopper the wgmma backward
    with per-sequence tensor maps at D <= 128; elsewhere, and at D = 256,
    mma.sync), rows outside every sequence at both ends. Against the float64
    reference per sequence; deterministic by default (two runs bit-identical).
    poisoned_neighbours: the first key (NaN in k, Inf in v) and the first query
    row (NaN in q and dO) of the sequences that follow the clean ones 0, 2, 4
    lie in those sequences' last tiles; they must not reach them, and the keys
    of sequence 1 (no query rows) get zero gradients."""
    import flashc.cuda as fcuda
    mask = dict(mask)
    mods = MODS[mask.pop("mods", "none")]
    lens_q = [300, 0, 517, 129, 64, 1]
    lens_k = [300, 7, 700, 129, 200, 70]
    q, k, v, cu_q, cu_k, kw = make(rng, lens_q, lens_k, (2, 3, 1, 4), 4, 2, D, dtype, mods, **mask)
    do = rng.standard_normal(q.shape).astype(q.dtype)
    do[~inside(cu_q, q.shape[0])] = np.nan
    if poison:
        for b in (1, 3, 5):
            k[cu_k[b], 0, 3] = np.nan
            v[cu_k[b], 1, 5] = np.inf
        for b in (3, 5):  # (sequence 1 has no query rows)
            q[cu_q[b], 1, 2] = np.nan
            do[cu_q[b], 0, 7] = np.nan
    dv = fcuda.to_device
    dkw = {n: (dv(a) if isinstance(a, np.ndarray) else a) for n, a in kw.items()}
    with np.errstate(invalid="ignore", over="ignore"):
        o, lse = flashc.attention_varlen(q, k, v, cu_q, cu_k, return_lse=True, backend="cpu", **kw)
        ref = varlen_backward_reference(do, q, k, v, cu_q, cu_k, **kw)
        naive = varlen_backward_reference(do, q, k, v, cu_q, cu_k, o=o, lse=lse, naive=dtype, **kw)
    args = (dv(do), dv(q), dv(k), dv(v), dv(o), dv(lse), dv(cu_q), dv(cu_k))
    g1 = [a.numpy() for a in flashc.attention_varlen_backward(*args, **dkw)]
    g2 = [a.numpy() for a in flashc.attention_varlen_backward(*args, **dkw)]
    for what, a, b in zip(("dq", "dk", "dv", "dsinks"), g1, g2):
        assert np.array_equal(a, b, equal_nan=True), what + ": two deterministic runs differ"
    # deterministic=False: dq's partial sums in any order (the atomic path)
    g3 = [a.numpy() for a in flashc.attention_varlen_backward(*args, deterministic=False, **dkw)]
    qrows, krows = np.zeros(q.shape[0], bool), np.zeros(k.shape[0], bool)
    seqs = (0, 2, 4) if poison else range(len(lens_q))
    for b in seqs:
        qrows[cu_q[b]:cu_q[b + 1]] = True
    for b in ((0, 1, 2, 4) if poison else range(len(lens_k))):
        krows[cu_k[b]:cu_k[b + 1]] = True
    for what, i, rows in (("dq", 0, qrows), ("dk", 1, krows), ("dv", 2, krows)):
        for g, how in ((g1, ""), (g3, " (deterministic=False)")):
            assert_close(g[i][rows].astype(np.float64), ref[i][rows], naive[i][rows], dtype,
                         "cuda " + what + how, factor=4.0)
            outside = ~inside(cu_q if i == 0 else cu_k, g[i].shape[0])
            assert np.all(g[i][outside] == 0), what + how + ": rows outside every sequence must be 0"
    if poison:
        assert np.all(g1[1][cu_k[1]:cu_k[2]] == 0) and np.all(g1[2][cu_k[1]:cu_k[2]] == 0)
    elif "sinks" in kw:
        assert_close(g1[3], ref[3], naive[3], lse_dtype(dtype).__name__, "cuda dsinks", factor=4.0)


@pytest.mark.cuda
def test_cuda_rows_outside_untouched(rng):
    import flashc.cuda as fcuda
    lens_q, lens_k, pad = LENGTHS["chunks"]
    q, k, v, cu_q, cu_k, kw = make(rng, lens_q, lens_k, pad, 4, 2, 64, "float16", causal=True)
    D = fcuda.to_device
    out = D(np.full(q.shape, 7.0, q.dtype))
    flashc.attention_varlen(D(q), D(k), D(v), D(cu_q), D(cu_k), out=out, **kw)
    o = out.numpy()
    rows = inside(cu_q, q.shape[0])
    assert np.all(o[~rows] == 7.0) and np.isfinite(o[rows].astype(np.float32)).all()


# ------------------------------------------------------------------- torch


def test_torch_varlen_autograd(backend, rng):
    torch = pytest.importorskip("torch")
    import flashc.torch as ft
    dev = "cuda" if backend == "cuda" else "cpu"
    lens_q, lens_k, pad = LENGTHS["mixed"]
    q, k, v, cu_q, cu_k, kw = make(rng, lens_q, lens_k, pad, 4, 2, 40, "float32",
                                   MODS["both"], use_sinks=True, causal=True)
    rows = inside(cu_q, q.shape[0])
    krow = inside(cu_k, k.shape[0])
    q[~rows] = 0.0
    k[~krow] = 0.0
    v[~krow] = 0.0
    do = rng.standard_normal(q.shape).astype(np.float32)
    do[~rows] = 0.0
    o_np, lse_np = flashc.attention_varlen(q, k, v, cu_q, cu_k, return_lse=True, **kw)
    g_np = flashc.attention_varlen_backward(do, q, k, v, o_np, lse_np, cu_q, cu_k, **kw)
    T = lambda a: torch.tensor(a, device=dev, requires_grad=True)  # noqa: E731
    tq, tk, tv, ts = T(q), T(k), T(v), T(kw["sinks"])
    targs = dict(kw, sinks=ts, alibi_slopes=torch.tensor(kw["alibi_slopes"]))
    # cu_seqlens as CPU int64 tensors: converted and moved to q's device.
    o = ft.attention_varlen(tq, tk, tv, torch.tensor(cu_q, dtype=torch.int64),
                            torch.tensor(cu_k, dtype=torch.int64), **targs)
    (o * torch.tensor(do, device=dev)).sum().backward()
    tol = 1e-5 if dev == "cpu" else 2e-3
    assert max_abs_err(o.detach().cpu().numpy()[rows], o_np[rows]) <= tol
    for name, t, ref in (("dq", tq, g_np[0]), ("dk", tk, g_np[1]), ("dv", tv, g_np[2]),
                         ("dsinks", ts, g_np[3])):
        assert max_abs_err(t.grad.cpu().numpy(), ref) <= tol * max(1, np.abs(ref).max()), name
    # Without gradients: the same output, no autograd node.
    with torch.no_grad():
        o2 = ft.attention_varlen(tq, tk, tv, torch.tensor(cu_q, device=dev),
                                 torch.tensor(cu_k, device=dev), **targs)
    assert o2.grad_fn is None
    r = torch.from_numpy(rows)
    assert torch.equal(o2.cpu()[r], o.detach().cpu()[r])
    with pytest.raises(flashc.FlashcError, match="cu_seqlens_q has dtype"):
        ft.attention_varlen(tq, tk, tv, torch.tensor(cu_q, dtype=torch.float32),
                            torch.tensor(cu_k), **targs)


def test_torch_varlen_deterministic_keyword(backend, rng):
    """flashc.torch.attention_varlen(deterministic=): True (the default) gives
    bit-identical gradients twice, False the same up to float rounding."""
    torch = pytest.importorskip("torch")
    import flashc.torch as ft
    dev = "cuda" if backend == "cuda" else "cpu"
    lens_q, lens_k, pad = LENGTHS["mixed"]
    q, k, v, cu_q, cu_k, kw = make(rng, lens_q, lens_k, pad, 4, 2, 64, "float32", MODS["none"],
                                   use_sinks=False, causal=True)
    rows, krow = inside(cu_q, q.shape[0]), inside(cu_k, k.shape[0])
    q[~rows], k[~krow], v[~krow] = 0.0, 0.0, 0.0
    do = rng.standard_normal(q.shape).astype(np.float32)
    do[~rows] = 0.0
    do = torch.tensor(do, device=dev)
    cq, ck = torch.tensor(cu_q, device=dev), torch.tensor(cu_k, device=dev)

    def grads(det):
        tq, tk, tv = (torch.tensor(a, device=dev, requires_grad=True) for a in (q, k, v))
        ft.attention_varlen(tq, tk, tv, cq, ck, deterministic=det, **kw).backward(do)
        return [t.grad for t in (tq, tk, tv)]
    g1, g2, gn = grads(True), grads(True), grads(False)
    for a, b, c in zip(g1, g2, gn):
        assert torch.equal(a, b)
        torch.testing.assert_close(c, a, rtol=1e-5, atol=1e-5)
