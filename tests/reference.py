"""Float64 NumPy references for flashc, written straight from flashc.h.

The attention reference materialises the full softmax with EXPLICIT masks
(visible_mask below is the only place the masking rules are written, and
it is written from the header's text, not from the library's code); the
score modifiers (softcap, ALiBi) are written once too, in `scores`, in
flashc.h's order: scale, softcap, ALiBi bias, mask, softmax with the sink. The same
function, run in float32 with P rounded to the input dtype, is the "naive
same-precision implementation" that tolerances are measured against.

Usable by every test file: `from reference import ...` (tests/ is on
sys.path under pytest).
"""

import math

import numpy as np

try:
    import ml_dtypes

    BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover
    BFLOAT16 = None

DTYPES = ["float32", "float16", "bfloat16", "float64"]

# Unit roundoff (half an ulp at 1.0) of each dtype.
UNIT_ROUNDOFF = {"float64": 2.0 ** -53, "float32": 2.0 ** -24, "float16": 2.0 ** -11,
                 "bfloat16": 2.0 ** -8}

# Absolute error floors, in units of the dtype's roundoff times the output
# scale: the naive implementation can be exact by luck (or, for float64,
# is the reference itself), so the bound never goes below this.
FLOOR_ULPS = {"float64": 2.0 ** 16, "float32": 64.0, "float16": 4.0, "bfloat16": 4.0}


def np_dtype(name):
    if name == "bfloat16":
        if BFLOAT16 is None:
            import pytest
            pytest.skip("bfloat16 needs ml_dtypes (not installed)")
        return BFLOAT16
    return np.dtype(name)


def dtype_name(dtype):
    return np.dtype(dtype).name


def compute_dtype(name):
    """Arithmetic precision flashc uses for a dtype: fp32, or F64 for F64."""
    return np.float64 if name == "float64" else np.float32


def lse_dtype(name):
    return np.float64 if name == "float64" else np.float32


# ------------------------------------------------------------------ masks


def visible_mask(Sq, Sk, *, causal=False, window=(-1, -1), sink_tokens=0, rows=None):
    """Boolean [Sq, Sk]: mask[i, j] is True when key j is visible to query i
    (only the query rows `rows` when given: [len(rows), Sk]).

    flashc.h, with offset = Sk - Sq and (L, R) = window, -1 = open:
      window: i + offset - L <= j <= i + offset + R
      causal: window (L, 0), bottom-right aligned
      sink tokens N: j < N visible whenever j <= i + offset + R
                     (R = 0 when causal; any j when R is open)
    """
    L, R = int(window[0]), int(window[1])
    if causal:
        assert R in (-1, 0), "causal requires window_right in {-1, 0}"
        R = 0
    i = (np.arange(Sq, dtype=np.int64) if rows is None else np.asarray(rows, np.int64))[:, None]
    j = np.arange(Sk, dtype=np.int64)[None, :]
    shape = (i.shape[0], Sk)
    offset = Sk - Sq
    right_ok = (j <= i + offset + R) if R >= 0 else np.ones(shape, bool)
    left_ok = (j >= i + offset - L) if L >= 0 else np.ones(shape, bool)
    mask = right_ok & left_ok
    if sink_tokens > 0:
        mask = mask | ((j < sink_tokens) & right_ok)
    return np.broadcast_to(mask, shape)


# ----------------------------------------------------------------- scores


def alibi_bias(slopes, B, Hq, Sq, Sk, rows=None, compute=np.float64):
    """The ALiBi term [B or 1, Hq, rows, Sk] that is SUBTRACTED from the
    logits: slope[b, h] · |i + Sk − Sq − j| (flashc.h; bottom-right aligned
    like the masks). slopes: [Hq] or [B, Hq]."""
    s = np.asarray(slopes).astype(compute)
    s = s.reshape(1, Hq, 1, 1) if s.ndim == 1 else s.reshape(B, Hq, 1, 1)
    i = (np.arange(Sq) if rows is None else np.asarray(rows)).astype(np.int64)[:, None]
    j = np.arange(Sk, dtype=np.int64)[None, :]
    dist = np.abs(i + (Sk - Sq) - j).astype(compute)
    return s * dist


def scores(q, k, *, softmax_scale=None, softcap=None, alibi_slopes=None, Sq=None, rows=None,
           compute=np.float64):
    """(x, t): the modified logits x [B, Hq, rows, Sk] before masking, and
    t = tanh(scale·<q, k>/softcap) (None without softcap) for the backward.

    q [B, rows, Hq, D] (already restricted to `rows`), k [B, Sk, Hkv, D];
    Sq: the full query length (for the ALiBi distance; default q's).
      x = scale · <q_i, k_j>
      x = softcap · tanh(x / softcap)         (softcap > 0)
      x = x − slope[b, h] · |i + Sk − Sq − j|  (alibi_slopes given)
    """
    q = np.asarray(q).astype(compute)
    k = np.asarray(k).astype(compute)
    B, R, Hq, D = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    Sq = R if Sq is None else Sq
    scale = 1.0 / math.sqrt(D) if softmax_scale in (None, 0) else float(softmax_scale)
    qt = q.transpose(0, 2, 1, 3)                                    # [B, Hq, R, D]
    kt = np.repeat(k, Hq // Hkv, axis=2).transpose(0, 2, 1, 3)      # [B, Hq, Sk, D]
    x = np.matmul(qt, kt.transpose(0, 1, 3, 2)) * compute(scale)    # [B, Hq, R, Sk]
    t = None
    if softcap:
        c = compute(softcap)
        with np.errstate(invalid="ignore"):
            t = np.tanh(x / c)
        x = c * t
    if alibi_slopes is not None:
        x = x - alibi_bias(alibi_slopes, B, Hq, Sq, Sk, rows, compute)
    return x, t


# -------------------------------------------------------------- attention


def attention_reference(q, k, v, *, causal=False, softmax_scale=None, window=(-1, -1),
                        sink_tokens=0, sinks=None, softcap=None, alibi_slopes=None,
                        compute=np.float64, p_dtype=None, out_dtype=None, rows=None):
    """(o [B, Sq, Hq, D], lse [B, Hq, Sq]) by the materialised softmax.

    softcap / alibi_slopes: the score modifiers of flashc.h (see `scores`).
    rows: compute only these query rows (o [B, len(rows), Hq, D]) — for
          sequences too long to materialise whole.
    compute: arithmetic dtype (float64 = the reference; float32 = naive).
    p_dtype: round the unnormalised P to this dtype before P·V (what
             FlashAttention does for fp16/bf16), None = no rounding.
    out_dtype: round o to this dtype at the end (None = compute).
    Rows with no visible key: o = 0, lse = -inf (or the sink logit s_h).
    """
    q = np.asarray(q).astype(compute)
    k = np.asarray(k).astype(compute)
    v = np.asarray(v).astype(compute)
    B, Sq, Hq, D = q.shape
    Bk, Sk, Hkv, Dk = k.shape
    assert (Bk, Dk) == (B, D) and v.shape == k.shape and Hq % Hkv == 0
    g = Hq // Hkv
    if rows is not None:
        q = q[:, np.asarray(rows)]

    # Query head h reads key/value head h // g (np.repeat repeats each head g times).
    vt = np.repeat(v, g, axis=2).transpose(0, 2, 1, 3)              # [B, Hq, Sk, D]
    x, _ = scores(q, k, softmax_scale=softmax_scale, softcap=softcap, alibi_slopes=alibi_slopes,
                  Sq=Sq, rows=rows, compute=compute)                # [B, Hq, Sq, Sk]
    mask = visible_mask(Sq, Sk, causal=causal, window=window, sink_tokens=sink_tokens, rows=rows)
    x = np.where(mask, x, compute(-np.inf))
    m = np.max(x, axis=-1, initial=-np.inf)                         # [B, Hq, Sq]
    if sinks is not None:
        s = np.asarray(sinks).astype(compute).reshape(1, Hq, 1)
        m = np.maximum(m, s)
    m_safe = np.where(np.isfinite(m), m, compute(0))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        p = np.exp(x - m_safe[..., None])                           # masked -> 0
        l = p.sum(axis=-1)
        if sinks is not None:
            l = l + np.exp(s - m_safe)
        lse = np.where(l > 0, m_safe + np.log(np.where(l > 0, l, 1)), -np.inf)
    if p_dtype is not None:
        p = p.astype(p_dtype).astype(compute)
    o = np.matmul(p, vt) / np.where(l > 0, l, 1)[..., None]         # [B, Hq, Sq, D]
    o = o.transpose(0, 2, 1, 3)
    if out_dtype is not None:
        o = o.astype(out_dtype)
    return np.ascontiguousarray(o), lse.astype(compute)


def attention_naive(q, k, v, dtype_name_, **kw):
    """The naive same-precision implementation: materialised softmax in the
    precision flashc computes in (fp32; F64 for F64), P rounded to the input
    dtype for fp16/bf16 (as FlashAttention does), o rounded to the dtype."""
    dt = np_dtype(dtype_name_)
    if dtype_name_ == "float64":
        return attention_reference(q, k, v, **kw)
    p_dtype = dt if dtype_name_ in ("float16", "bfloat16") else None
    return attention_reference(q, k, v, compute=np.float32, p_dtype=p_dtype, out_dtype=dt,
                               **kw)


def _backward(do, q, k, v, o, lse, *, causal, softmax_scale, window, sink_tokens, sinks,
              softcap, alibi_slopes, compute):
    """The materialised backward (flashc.h) from given o and lse, in `compute`."""
    f = compute
    do, q, k, v, o = (np.asarray(a).astype(f) for a in (do, q, k, v, o))
    B, Sq, Hq, D = q.shape
    _, Sk, Hkv, _ = k.shape
    g = Hq // Hkv
    scale = f(1.0 / math.sqrt(D) if softmax_scale in (None, 0) else softmax_scale)
    qt, dot, ot = (a.transpose(0, 2, 1, 3) for a in (q, do, o))
    kt = np.repeat(k, g, axis=2).transpose(0, 2, 1, 3)
    vt = np.repeat(v, g, axis=2).transpose(0, 2, 1, 3)
    mask = visible_mask(Sq, Sk, causal=causal, window=window, sink_tokens=sink_tokens)
    x, t = scores(q, k, softmax_scale=softmax_scale, softcap=softcap, alibi_slopes=alibi_slopes,
                  compute=f)
    lse = np.asarray(lse).astype(f)
    with np.errstate(invalid="ignore", over="ignore"):
        lse_safe = np.where(np.isfinite(lse), lse, f(0))
        p = np.where(mask, np.exp(x - lse_safe[..., None]), f(0))  # [B, Hq, Sq, Sk]
    delta = np.sum(dot * ot, axis=-1)                               # [B, Hq, Sq]
    dv = np.matmul(p.transpose(0, 1, 3, 2), dot)                    # [B, Hq, Sk, D]
    dp = np.matmul(dot, vt.transpose(0, 1, 3, 2))
    ds = p * (dp - delta[..., None])
    if t is not None:  # d(c·tanh(u/c))/du = 1 − tanh²; ALiBi adds a constant
        ds = np.where(mask, ds * (f(1) - t * t), f(0))
    dq = np.matmul(ds, kt) * scale
    dk = np.matmul(ds.transpose(0, 1, 3, 2), qt) * scale
    # GQA: sum over the query heads of each K/V head.
    dk = dk.reshape(B, Hkv, g, Sk, D).sum(axis=2)
    dv = dv.reshape(B, Hkv, g, Sk, D).sum(axis=2)
    dsinks = None
    if sinks is not None:
        s = np.asarray(sinks).astype(f).reshape(1, Hq, 1)
        with np.errstate(over="ignore", invalid="ignore"):
            psink = np.exp(s - lse)
        dsinks = -np.sum(psink * delta, axis=(0, 2))
    return (dq.transpose(0, 2, 1, 3), dk.transpose(0, 2, 1, 3), dv.transpose(0, 2, 1, 3),
            dsinks)


def attention_backward_reference(do, q, k, v, *, causal=False, softmax_scale=None,
                                 window=(-1, -1), sink_tokens=0, sinks=None, softcap=None,
                                 alibi_slopes=None):
    """Float64 (dq, dk, dv, dsinks or None) by differentiating the
    materialised softmax (flashc.h's backward formulas):
      dS = P ∘ (dP − Δ), times (1 − tanh²(scale·<q, k>/c)) with softcap c;
      dQ = scale · dS K, dK = scale · dSᵀ Q; the ALiBi slopes are constants."""
    kw = dict(causal=causal, softmax_scale=softmax_scale, window=window,
              sink_tokens=sink_tokens, sinks=sinks, softcap=softcap, alibi_slopes=alibi_slopes)
    f = np.float64
    do, q, k, v = (np.asarray(a).astype(f) for a in (do, q, k, v))
    o, lse = attention_reference(q, k, v, **kw)
    return _backward(do, q, k, v, o, lse, compute=f, **kw)


def attention_backward_naive(do, q, k, v, o, lse, dtype_name_, *, causal=False,
                             softmax_scale=None, window=(-1, -1), sink_tokens=0, sinks=None,
                             softcap=None, alibi_slopes=None):
    """The naive same-precision backward: the materialised backward in the
    precision flashc computes in (fp32; F64 for F64) from the o and lse that
    flashc's forward gave, gradients rounded to the dtype (dsinks stays in the
    sinks' float type)."""
    f = np.float64 if dtype_name_ == "float64" else np.float32
    dq, dk, dv, ds = _backward(do, q, k, v, o, lse, causal=causal, softmax_scale=softmax_scale,
                               window=window, sink_tokens=sink_tokens, sinks=sinks,
                               softcap=softcap, alibi_slopes=alibi_slopes, compute=f)
    dt = np_dtype(dtype_name_)
    return dq.astype(dt), dk.astype(dt), dv.astype(dt), ds


def attention_flops(B, Sq, Sk, Hq, D, causal=False, window=(-1, -1), sink_tokens=0):
    """Forward FLOPs actually needed: 4·D per visible (query, key) pair."""
    vis = int(visible_mask(Sq, Sk, causal=causal, window=window, sink_tokens=sink_tokens).sum())
    return 4.0 * B * Hq * D * vis


# ------------------------------------------------------- weighted row-sum


def weighted_sum_reference(x, w, compute=np.float64):
    """y[...] = sum_d x[..., d] w[d] (y is 0-d when x is 1-D)."""
    x = np.asarray(x).astype(compute)
    w = np.asarray(w).astype(compute)
    return np.asarray(np.tensordot(x, w, axes=([-1], [0])))


def weighted_sum_backward_reference(dy, x, w, compute=np.float64):
    """(dx, dw): dx[..., d] = dy[...] w[d]; dw[d] = sum_r dy[r] x[r, d]."""
    dy = np.asarray(dy).astype(compute)
    x = np.asarray(x).astype(compute)
    w = np.asarray(w).astype(compute)
    dx = dy[..., None] * w
    dw = np.tensordot(dy, x, axes=(list(range(dy.ndim)), list(range(dy.ndim))))
    return dx, np.asarray(dw)


# -------------------------------------------------------------- checking


def max_abs_err(a, b):
    """max |a - b| over elements, treating equal infinities as equal; inf if
    one side has a NaN or the infinities disagree."""
    a = np.asarray(a).astype(np.float64)
    b = np.asarray(b).astype(np.float64)
    if a.size == 0:
        return 0.0
    if np.isnan(a).any() or np.isnan(b).any():
        return math.inf
    both_inf = np.isinf(a) & np.isinf(b) & (np.sign(a) == np.sign(b))
    with np.errstate(invalid="ignore"):
        d = np.where(both_inf, 0.0, np.abs(a - b))
    return float(d.max())


def tolerance(ref, naive, dtype_name_, factor=3.0):
    """max(factor × the naive implementation's error, a floor of a few
    roundoffs of the output scale)."""
    ref = np.asarray(ref, np.float64)
    finite = ref[np.isfinite(ref)]
    scale = max(1.0, float(np.abs(finite).max())) if finite.size else 1.0
    floor = FLOOR_ULPS[dtype_name_] * UNIT_ROUNDOFF[dtype_name_] * scale
    return max(factor * max_abs_err(naive, ref), floor)


def assert_close(ours, ref, naive, dtype_name_, what="result", factor=3.0):
    """ours must be within tolerance(ref, naive) of ref (max abs error)."""
    tol = tolerance(ref, naive, dtype_name_, factor)
    err = max_abs_err(ours, ref)
    assert err <= tol, ("%s: max |err| = %.3g exceeds %.3g (naive %s error %.3g)"
                        % (what, err, tol, dtype_name_, max_abs_err(naive, ref)))
    return err, tol


# ------------------------------------------------ ragged batches, KV caches
# flashc.h: "each sequence is attended exactly as a dense call with B = 1 and
# its own lengths would be". The references below are exactly that: the dense
# references above, run sequence by sequence.


def seq_slopes(alibi_slopes, b):
    """Sequence b's ALiBi slopes as a dense B = 1 call takes them ([Hq] as
    they are, row b of [B, Hq])."""
    if alibi_slopes is None:
        return None
    s = np.asarray(alibi_slopes)
    return s if s.ndim == 1 else s[b:b + 1]


def _dense(q, k, v, naive, **kw):
    return attention_naive(q, k, v, naive, **kw) if naive else attention_reference(q, k, v, **kw)


def varlen_reference(q, k, v, cu_q, cu_k, *, alibi_slopes=None, naive=None, **kw):
    """(o [Tq, Hq, D], lse [Hq, Tq]) of a packed batch in float64: sequence b
    is the dense B = 1 problem q[cu_q[b]:cu_q[b+1]] against k, v[cu_k[b]:cu_k[b+1]]
    (attention_naive in dtype `naive` when given, else attention_reference).
    Rows outside every sequence are NaN (the library does not write them)."""
    Tq, Hq, D = q.shape
    o = np.full((Tq, Hq, D), np.nan)
    lse = np.full((Hq, Tq), np.nan)
    for b in range(len(cu_q) - 1):
        q0, q1, k0, k1 = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
        if q1 > q0:
            ob, lb = _dense(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], naive,
                            alibi_slopes=seq_slopes(alibi_slopes, b), **kw)
            o[q0:q1] = ob[0]
            lse[:, q0:q1] = lb[0]
    return o, lse


def varlen_backward_reference(do, q, k, v, cu_q, cu_k, *, alibi_slopes=None, sinks=None,
                              o=None, lse=None, naive=None, **kw):
    """(dq, dk, dv, dsinks or None) of a packed batch, sequence by sequence:
    attention_backward_reference (float64), or with naive=dtype name
    attention_backward_naive from the given o [Tq, Hq, D] and lse [Hq, Tq].
    dsinks is summed over the sequences; rows outside every sequence are 0."""
    dq, dk, dv = (np.zeros(a.shape) for a in (q, k, v))
    ds = None if sinks is None else np.zeros(np.shape(sinks))
    for b in range(len(cu_q) - 1):
        q0, q1, k0, k1 = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
        args = (do[None, q0:q1], q[None, q0:q1], k[None, k0:k1], v[None, k0:k1])
        kwb = dict(kw, sinks=sinks, alibi_slopes=seq_slopes(alibi_slopes, b))
        if naive:
            g = attention_backward_naive(*args, o[None, q0:q1], lse[None, :, q0:q1], naive, **kwb)
        else:
            g = attention_backward_reference(*args, **kwb)
        dq[q0:q1], dk[k0:k1], dv[k0:k1] = g[0][0], g[1][0], g[2][0]
        if ds is not None:
            ds += g[3]
    return dq, dk, dv, ds


def kvcache_keys(cache, b, n, cache_batch_idx=None, block_table=None):
    """Positions 0 .. n-1 of sequence b in a KV cache [Bc, Sc, Hkv, D] (row
    cache_batch_idx[b], else b) or in pages [P, page_size, Hkv, D] through
    block_table: [n, Hkv, D]."""
    if block_table is not None:
        t = np.arange(n)
        return cache[np.asarray(block_table)[b, t // cache.shape[1]], t % cache.shape[1]]
    return cache[b if cache_batch_idx is None else int(cache_batch_idx[b]), :n]


def kvcache_reference(q, k_cache, v_cache, cache_seqlens, k_new=None, v_new=None, *,
                      cache_batch_idx=None, block_table=None, alibi_slopes=None, naive=None,
                      **kw):
    """(o [B, Sn, Hq, D], lse [B, Hq, Sn]): sequence b is the dense B = 1
    problem of q[b] against its cache positions 0 .. cache_seqlens[b] - 1
    (the caches as they were BEFORE the call) followed by k_new[b], v_new[b]."""
    B, Sn, Hq, D = q.shape
    o = np.zeros((B, Sn, Hq, D))
    lse = np.zeros((B, Hq, Sn))
    for b in range(B):
        n = int(cache_seqlens[b])
        kb = kvcache_keys(k_cache, b, n, cache_batch_idx, block_table)
        vb = kvcache_keys(v_cache, b, n, cache_batch_idx, block_table)
        if k_new is not None:
            kb = np.concatenate([kb, k_new[b]])
            vb = np.concatenate([vb, v_new[b]])
        ob, lb = _dense(q[b:b + 1], kb[None], vb[None], naive,
                        alibi_slopes=seq_slopes(alibi_slopes, b), **kw)
        o[b], lse[b] = ob[0], lb[0]
    return o, lse
