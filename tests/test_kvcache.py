"""KV caches: flashc.attention_with_kvcache, contiguous and paged (flashc.h,
"Ragged batches and KV caches").

Sequence b must be exactly the dense B = 1 problem of its Sn query tokens
against its cache positions 0 .. cache_seqlens[b] - 1 followed by k_new[b]:
the reference is tests/reference.py's dense float64 reference run sequence by
sequence on the caches as they were before the call (kvcache_reference).

- a sweep over contiguous caches (with cache_batch_idx) and paged caches of
  page sizes 1, 5, 16 and 256 (block tables permuted, garbage past each
  sequence's last page), decode (Sn = 1) and chunks (Sn > 1, Sn != Sk_new),
  empty caches and sequences with no key, every mask option and score
  modifier, GQA/MQA, odd D, every dtype, on every backend;
- NaN/Inf in every cache position a sequence does not own, in the positions
  that k_new overwrites, and in outputs before the call: results must not
  change, every output element must be written;
- k_new / v_new appended in place: the caches afterwards are byte for byte
  the caches before with exactly the appended positions replaced (NumPy
  caches with backend="cuda" are copied back);
- index arrays converted; bad input (lengths past the cache, page ids out of
  range, block tables too short, cache_batch_idx out of range, wrong dtypes,
  read-only caches) -> FlashcError naming the field;
- CUDA (skips without a GPU): device caches updated on the device, against
  the CPU backend; flashc.torch.attention_with_kvcache (skips without torch).
"""

import numpy as np
import pytest

import flashc
from flashc import _lib
from reference import (
    DTYPES,
    assert_close,
    kvcache_keys,
    kvcache_reference,
    lse_dtype,
    max_abs_err,
    np_dtype,
    tolerance,
)

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
    dict(causal=True, window=(16, -1), sink_tokens=3),
    dict(use_sinks=True),
    dict(causal=True, use_sinks=True),
    dict(window=(5, 2), sink_tokens=2, use_sinks=True),
    dict(window=(30, 0)),
]

# lens: cache_seqlens; Sn: query tokens; new: Sk_new (0 = no k_new/v_new);
# page: None = contiguous cache; idx: use cache_batch_idx (contiguous only).
CASES = {
    "decode": dict(lens=[37, 0, 1, 100], Sn=1, new=1),
    "decode_no_append": dict(lens=[37, 0, 1, 100], Sn=1, new=0),   # a sequence with no key
    "chunk_batch_idx": dict(lens=[20, 3, 0], Sn=5, new=5, idx=True),
    "sn_ne_new": dict(lens=[10, 20], Sn=2, new=5, idx=True),
    "more_q_than_keys": dict(lens=[0, 2], Sn=4, new=1),
    "page1": dict(lens=[9, 0, 4], Sn=1, new=1, page=1),
    "page5": dict(lens=[23, 7, 0, 11], Sn=3, new=3, page=5),
    "page16": dict(lens=[40, 16, 15, 1], Sn=1, new=1, page=16),
    "page16_chunk": dict(lens=[33, 0], Sn=16, new=16, page=16),
    "page16_no_append": dict(lens=[50, 17], Sn=4, new=0, page=16),
    "page256": dict(lens=[300, 10], Sn=2, new=2, page=256),
}

HEADS = [(4, 2, 40), (6, 1, 72), (4, 4, 96), (3, 1, 33), (8, 2, 64), (2, 1, 128)]


def _poison(a):
    a[...] = np.nan
    a.reshape(-1)[::3] = np.inf


def make(rng, Hq, Hkv, D, dtype, lens, Sn, new, page=None, idx=False, mods=None,
         use_sinks=False, runs=False, **mask):
    """(q, k_cache, v_cache, k_new, v_new, index keywords, call keywords).
    Every cache position that no sequence owns after the append, and the
    positions the append overwrites, hold NaN/Inf. Paged: shuffled pages,
    or with runs=True each sequence's pages consecutive in the pool (a
    serving engine's fresh allocation) except two swapped neighbours in
    the first sequence's, with a poisoned spare page between sequences."""
    dt = np_dtype(dtype)
    B = len(lens)
    lens = np.asarray(lens, np.int32)
    total = lens + new                                   # keys of each sequence after the append
    q = rng.standard_normal((B, Sn, Hq, D)).astype(dt)
    k_new = v_new = None
    if new:
        k_new = rng.standard_normal((B, new, Hkv, D)).astype(dt)
        v_new = rng.standard_normal((B, new, Hkv, D)).astype(dt)
    index = dict(cache_seqlens=lens)
    if page is None:
        Bc = B + (2 if idx else 0)
        Sc = int(total.max()) + 3
        kc = np.empty((Bc, Sc, Hkv, D), dt)
        vc = np.empty((Bc, Sc, Hkv, D), dt)
        _poison(kc)
        _poison(vc)
        rows = rng.permutation(Bc)[:B] if idx else np.arange(B)
        for b in range(B):
            kc[rows[b], :lens[b]] = rng.standard_normal((lens[b], Hkv, D))
            vc[rows[b], :lens[b]] = rng.standard_normal((lens[b], Hkv, D))
        if idx:
            index["cache_batch_idx"] = rows.astype(np.int32)
    else:
        need = -(-total // page)                        # pages per sequence
        P = int(need.sum()) + 3                          # + spare pages, never read
        max_pages = int(need.max()) + 2
        perm = rng.permutation(P)
        if runs:
            P = int(need.sum()) + B + 3
            perm = np.concatenate([np.arange(o, o + n) for o, n in zip(np.cumsum(need + 1) - need - 1, need)])
            if need[0] >= 4:
                perm[[1, 2]] = perm[[2, 1]]
        table = rng.integers(-(2 ** 31), 2 ** 31 - 1, (B, max_pages)).astype(np.int32)  # garbage
        kc = np.empty((P, page, Hkv, D), dt)
        vc = np.empty((P, page, Hkv, D), dt)
        _poison(kc)
        _poison(vc)
        used = 0
        for b in range(B):
            table[b, :need[b]] = perm[used:used + need[b]]
            used += need[b]
            t = np.arange(lens[b])
            kc[table[b, t // page], t % page] = rng.standard_normal((lens[b], Hkv, D))
            vc[table[b, t // page], t % page] = rng.standard_normal((lens[b], Hkv, D))
        index["block_table"] = table
    kw = dict(mask)
    mods = dict(mods or {})
    alibi = mods.pop("alibi", None)
    kw.update(mods)
    fdt = lse_dtype(dtype)
    if alibi == "h":
        kw["alibi_slopes"] = (2.0 ** (-8.0 * np.arange(1, Hq + 1) / Hq)).astype(fdt)
    elif alibi == "bh":
        s = rng.uniform(0.0, 0.25, (B, Hq)).astype(fdt)
        s[-1, 0] = -0.05
        kw["alibi_slopes"] = s
    if use_sinks:
        kw["sinks"] = (rng.standard_normal(Hq) * 2.0).astype(fdt)
    return q, kc, vc, k_new, v_new, index, kw


def appended(cache, new, index):
    """The cache as the append must leave it: `cache` with new[b] written at
    positions cache_seqlens[b] .. of sequence b."""
    out = cache.copy()
    if new is None:
        return out
    lens = index["cache_seqlens"]
    for b in range(new.shape[0]):
        t = np.arange(lens[b], lens[b] + new.shape[1])
        if "block_table" in index:
            page = cache.shape[1]
            out[index["block_table"][b, t // page], t % page] = new[b]
        else:
            row = index["cache_batch_idx"][b] if "cache_batch_idx" in index else b
            out[row, t] = new[b]
    return out


def same_bytes(a, b):
    return np.asarray(a).tobytes() == np.asarray(b).tobytes()


def check(backend, rng, heads, dtype, case, mods=None, use_sinks=False, _made=None, **mask):
    q, kc, vc, kn, vn, index, kw = _made or make(rng, *heads, dtype, **case, mods=mods,
                                                 use_sinks=use_sinks, **mask)
    ro, rl = kvcache_reference(q, kc, vc, index["cache_seqlens"], kn, vn,
                               cache_batch_idx=index.get("cache_batch_idx"),
                               block_table=index.get("block_table"), **kw)
    no, nl = kvcache_reference(q, kc, vc, index["cache_seqlens"], kn, vn, naive=dtype,
                               cache_batch_idx=index.get("cache_batch_idx"),
                               block_table=index.get("block_table"), **kw)
    want_k, want_v = appended(kc, kn, index), appended(vc, vn, index)
    B, Sn, Hq, _ = q.shape
    out = (np.full(q.shape, np.nan, q.dtype), np.full((B, Hq, Sn), np.nan, lse_dtype(dtype)))
    o, lse = flashc.attention_with_kvcache(q, kc, vc, kn, vn, return_lse=True, backend=backend,
                                           out=out, **index, **kw)
    assert o is out[0] and lse is out[1]
    assert same_bytes(kc, want_k) and same_bytes(vc, want_v), \
        "the caches are not the caches before with k_new/v_new appended"
    assert not np.isnan(np.asarray(o, np.float64)).any(), "NaN in o (unwritten or wrong)"
    assert not np.isnan(lse).any(), "NaN in lse"
    assert_close(o, ro, no, dtype, "o")
    cap = kw.get("softcap") or 0.0
    lname = lse_dtype(dtype).__name__
    if backend == "cuda" and dtype in ("float16", "bfloat16") and cap:
        tol = max(tolerance(rl, nl, lname), cap * 2.0 ** -10)  # hardware tanh (test_score_mods)
        assert max_abs_err(lse, rl) <= tol
    else:
        assert_close(lse, rl, nl, lname, "lse")
    return q, kc, vc, kn, vn, index, kw, o, lse


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
    for i, cname in enumerate(CASES):
        for j in range(2):
            heads = HEADS[(i + 3 * j) % len(HEADS)]
            mods = names[(i + 2 * j) % len(names)]
            mask = MASKS[(2 * i + 3 * j) % len(MASKS)]
            dtype = DTYPES[(i + j) % 4]
            cid = "%s-H%d_%d-D%d-%s-%s-%s" % ((cname,) + heads + (
                mods, mask_id(mask), dtype))
            cases.append(pytest.param(cname, heads, mods, mask, dtype, id=cid))
    return cases


@pytest.mark.parametrize("cname,heads,mods,mask,dtype", _sweep())
def test_sweep(backend, rng, cname, heads, mods, mask, dtype):
    check(backend, rng, heads, dtype, CASES[cname], MODS[mods], **mask)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cname", ["chunk_batch_idx", "page16", "page5"])
def test_dtypes(backend, rng, cname, dtype):
    check(backend, rng, (6, 2, 72), dtype, CASES[cname], MODS["both"], use_sinks=True,
          causal=True, window=(12, 0), sink_tokens=2)


def test_decode_loop(backend, rng):
    """Ten decode steps appending one token each into a paged cache: every
    step equals the dense attention over everything appended so far."""
    B, Hq, Hkv, D, page = 3, 4, 2, 32, 4
    prompt = np.array([5, 0, 9], np.int32)
    steps = 10
    need = -(-(prompt + steps) // page)
    table = np.full((B, int(need.max())), -1, np.int32)
    table[np.arange(table.shape[1])[None, :] < need[:, None]] = rng.permutation(int(need.sum()))
    kc = np.full((int(need.sum()), page, Hkv, D), np.nan, np.float32)
    vc = kc.copy()
    ks = [rng.standard_normal((prompt[b] + steps, Hkv, D)).astype(np.float32) for b in range(B)]
    vs = [rng.standard_normal((prompt[b] + steps, Hkv, D)).astype(np.float32) for b in range(B)]
    for b in range(B):
        t = np.arange(prompt[b])
        kc[table[b, t // page], t % page] = ks[b][:prompt[b]]
        vc[table[b, t // page], t % page] = vs[b][:prompt[b]]
    lens = prompt.copy()
    for step in range(steps):
        q = rng.standard_normal((B, 1, Hq, D)).astype(np.float32)
        kn = np.stack([ks[b][lens[b]][None] for b in range(B)])
        vn = np.stack([vs[b][lens[b]][None] for b in range(B)])
        o = flashc.attention_with_kvcache(q, kc, vc, kn, vn, cache_seqlens=lens,
                                          block_table=table, causal=True, backend=backend)
        for b in range(B):
            n = lens[b] + 1
            ref = flashc.attention(q[b:b + 1], ks[b][None, :n], vs[b][None, :n], causal=True,
                                   backend="cpu")
            assert max_abs_err(o[b:b + 1], ref) <= 1e-5, (step, b)
        lens += 1


def test_int_cache_seqlens_and_conversions(rng):
    """cache_seqlens as one int, index arrays as lists / int64 / strided int32:
    the same bits as int32 arrays."""
    case = dict(CASES["page5"], lens=[11, 11, 11, 11])
    q, kc, vc, kn, vn, index, kw = make(rng, 4, 2, 16, "float32", **case, causal=True)
    kc0, vc0 = kc.copy(), vc.copy()
    base = flashc.attention_with_kvcache(q, kc, vc, kn, vn, **index, **kw)
    bt = np.full((index["block_table"].shape[0], 2 * index["block_table"].shape[1]), -9, np.int32)
    bt[:, ::2] = index["block_table"]
    for variant in (dict(index, cache_seqlens=11),
                    dict(index, cache_seqlens=np.int64(11)),
                    dict(cache_seqlens=[11] * 4, block_table=index["block_table"].tolist()),
                    dict(cache_seqlens=index["cache_seqlens"].astype(np.int64),
                         block_table=index["block_table"].astype(np.int64)),
                    dict(index, block_table=bt[:, ::2])):
        kc[...], vc[...] = kc0, vc0
        o = flashc.attention_with_kvcache(q, kc, vc, kn, vn, **variant, **kw)
        assert same_bytes(o, base)
    with pytest.raises(flashc.FlashcError, match="cache_seqlens has dtype float64") as e:
        flashc.attention_with_kvcache(q, kc, vc, kn, vn, cache_seqlens=np.full(4, 11.0),
                                      block_table=index["block_table"])
    assert e.value.status == _lib.FLASHC_ERR_DTYPE
    with pytest.raises(TypeError):
        flashc.attention_with_kvcache(q, kc, vc, kn, vn)   # cache_seqlens is required


def test_read_only_cache(rng):
    """A read-only cache is fine without k_new; appending to it is an error
    (and writes nothing)."""
    q, kc, vc, kn, vn, index, kw = make(rng, 4, 2, 16, "float32", **CASES["decode"])
    kc.flags.writeable = False
    flashc.attention_with_kvcache(q, kc, vc, **index, **kw)
    before = vc.copy()
    with pytest.raises(flashc.FlashcError, match="k_cache is a read-only array"):
        flashc.attention_with_kvcache(q, kc, vc, kn, vn, **index, **kw)
    assert same_bytes(vc, before)


# --------------------------------------------------------------- bad input


def _bad_cases(rng):
    """(name, q, kc, vc, kn, vn, index, match) of one bad call each."""
    out = []
    q, kc, vc, kn, vn, index, _ = make(rng, 2, 1, 8, "float32", lens=[5, 9], Sn=1, new=1)
    Sc = kc.shape[1]
    out.append(("past_cache", q, kc, vc, kn, vn, dict(index, cache_seqlens=np.array(
        [5, Sc], np.int32)), "cache_seqlens"))
    out.append(("negative_length", q, kc, vc, kn, vn, dict(index, cache_seqlens=np.array(
        [5, -1], np.int32)), "cache_seqlens"))
    out.append(("batch_idx_range", q, kc, vc, kn, vn, dict(index, cache_batch_idx=np.array(
        [0, kc.shape[0]], np.int32)), "cache_batch_idx"))
    out.append(("k_new_alone", q, kc, vc, kn, None, index, "v_new"))
    out.append(("k_new_shape", q, kc, vc, kn[:1], vn[:1], index, "k_new"))
    q, kc, vc, kn, vn, index, _ = make(rng, 2, 1, 8, "float32", lens=[5, 9], Sn=1, new=1,
                                       page=4)
    bt = index["block_table"].copy()
    bt[1, 1] = kc.shape[0]                             # a page the sequence uses
    out.append(("page_id_range", q, kc, vc, kn, vn, dict(index, block_table=bt),
                "block_table"))
    bt = index["block_table"].copy()
    bt[0, 0] = -1
    out.append(("page_id_negative", q, kc, vc, kn, vn, dict(index, block_table=bt),
                "block_table"))
    out.append(("table_too_short", q, kc, vc, kn, vn,
                dict(index, block_table=np.ascontiguousarray(index["block_table"][:, :2])),
                "block_table|cache_seqlens"))
    out.append(("table_and_batch_idx", q, kc, vc, kn, vn,
                dict(index, cache_batch_idx=np.array([0, 1], np.int32)),
                "cache_batch_idx"))
    return out


def test_bad_input(backend, rng):
    # backend "cuda" with NumPy arrays: the index values are checked in Python
    # before the copy (the library does not inspect device memory).
    for name, q, kc, vc, kn, vn, index, match in _bad_cases(rng):
        before = (kc.copy(), vc.copy())
        with pytest.raises(flashc.FlashcError, match=match) as e:
            flashc.attention_with_kvcache(q, kc, vc, kn, vn, backend=backend, **index)
        assert e.value.status in (_lib.FLASHC_ERR_INVALID_ARGUMENT, _lib.FLASHC_ERR_SHAPE,
                                  _lib.FLASHC_ERR_NULL_POINTER), name
        assert same_bytes(kc, before[0]) and same_bytes(vc, before[1]), \
            "%s: the cache was written by a refused call" % name


def test_host_check_says_what_the_library_says(rng):
    """The index values of a device call are checked in Python when they come
    from the host (flashc._core._check_kvcache_host; the library does not
    inspect device memory): the same verdict and message as the library's own
    check of a CPU call."""
    from flashc._core import _check_kvcache_host
    n = 0
    for name, q, kc, vc, kn, vn, index, match in _bad_cases(rng):
        with pytest.raises(flashc.FlashcError) as e:
            flashc.attention_with_kvcache(q, kc, vc, kn, vn, backend="cpu", **index)
        if e.value.status != _lib.FLASHC_ERR_INVALID_ARGUMENT or "both set" in e.value.message:
            continue  # shapes and structure: the library checks them on every backend
        with pytest.raises(flashc.FlashcError) as p:
            _check_kvcache_host(index["cache_seqlens"], index.get("cache_batch_idx"),
                                index.get("block_table"), q.shape[0], kn.shape[1], kc.shape)
        assert (p.value.status, p.value.message) == (e.value.status, e.value.message), name
        n += 1
    assert n == 6
    for name, q, kc, vc, kn, vn, index, match in _bad_cases(rng)[:1]:
        ok = dict(index, cache_seqlens=index["cache_seqlens"] - 1)
        _check_kvcache_host(ok["cache_seqlens"], None, None, q.shape[0], kn.shape[1], kc.shape)


def test_bad_dtypes(rng):
    q, kc, vc, kn, vn, index, kw = make(rng, 2, 1, 8, "float32", **CASES["page5"])
    for change, match in ((dict(block_table=index["block_table"].astype(np.float32)),
                           "block_table has dtype float32"),
                          (dict(cache_seqlens=np.ones(4, bool)), "cache_seqlens has dtype bool")):
        with pytest.raises(flashc.FlashcError, match=match):
            flashc.attention_with_kvcache(q, kc, vc, kn, vn, **dict(index, **change))
    with pytest.raises(flashc.FlashcError, match="dtype"):
        flashc.attention_with_kvcache(q, kc, vc, kn.astype(np.float64), vn.astype(np.float64),
                                      **index)
    with pytest.raises(flashc.FlashcError, match="dtype"):
        flashc.attention_with_kvcache(q.astype(np.float16), kc, vc, kn, vn, **index)


# ------------------------------------------------ long caches, chunks, pages
# Caches long enough that the CPU cuts each sequence's keys into splits
# merged in a fixed order (decode rows: B·Hkv < 16 and >= 1024 keys; chunk
# rows: < 32 row blocks and >= 1024 keys), chunks of 2..64 query tokens
# (speculative decoding, chunked prefill) on the keys-on-lanes decode path
# and on the row-block path (Sn·G rows: both sides of the ISA's threshold),
# and pages of every size read in place through the block table.

LONG_MASKS = [dict(), dict(causal=True), dict(causal=True, window=(700, 0), sink_tokens=3)]


@pytest.mark.parametrize("Sn", [1, 2, 3, 4, 8, 16, 33, 64])
def test_long_chunks(backend, rng, Sn):
    dtype = ("float32", "bfloat16", "float16")[Sn % 3]
    mask = LONG_MASKS[Sn % 3]
    check(backend, rng, (8, 2, 64), dtype, dict(lens=[1900, 1200], Sn=Sn, new=Sn % 2 * Sn, page=None),
          use_sinks=Sn % 4 == 0, **mask)


@pytest.mark.parametrize("heads,dtype", [((8, 2, 64), "float16"), ((4, 2, 128), "bfloat16"),
                                         ((2, 1, 256), "bfloat16")], ids=["D64", "D128", "D256"])
@pytest.mark.parametrize("mask", [dict(), dict(causal=True), dict(causal=True, window=(150, 0), sink_tokens=3,
                                                                  use_sinks=True), dict(mods="both")],
                         ids=["plain", "causal", "window_sinks", "mods"])
@pytest.mark.parametrize("page", [None, 16, 32, 48, 80, 256])
def test_long_prefill_chunks(backend, rng, heads, dtype, mask, page):
    """Chunks of 200 query tokens against a KV cache (chunked prefill),
    appended in place: contiguous with cache_batch_idx, or paged (shuffled
    pages, garbage block-table entries past each sequence's pages); several
    128-row query blocks and key tiles a sequence (on Hopper the wgmma
    forward's cache path, every page size a multiple of 16: boxes of a
    whole tile, of a page, or of 16 rows where neither divides the other —
    48, and 80 except at D 256, whose tile it is), cache lengths that end
    inside a key tile, NaN/Inf in every cache slot no sequence owns."""
    mask = dict(mask)
    mods = MODS[mask.pop("mods", "none")]
    check(backend, rng, heads, dtype, dict(lens=[300, 0, 517], Sn=200, new=200, idx=page is None, page=page),
          mods, **mask)


@pytest.mark.parametrize("heads,dtype", [((8, 2, 64), "float16"), ((4, 2, 128), "bfloat16"),
                                         ((2, 1, 256), "bfloat16")], ids=["D64", "D128", "D256"])
@pytest.mark.parametrize("mask", [dict(), dict(causal=True, window=(150, 0), sink_tokens=3, use_sinks=True)],
                         ids=["plain", "window_sinks"])
@pytest.mark.parametrize("page", [16, 32, 64])
def test_long_prefill_chunks_page_runs(backend, rng, heads, dtype, mask, page):
    """As test_long_prefill_chunks with each sequence's pages consecutive
    in the pool (on Hopper the wgmma forward reads a key tile whose pages
    are consecutive as one box of several pages), two of the first
    sequence's pages swapped (its tiles there take a box a page), the
    poisoned spare page after each sequence inside the run of its last
    tile."""
    mask = dict(mask)
    check(backend, rng, heads, dtype, dict(lens=[300, 0, 517], Sn=200, new=200, page=page, runs=True), **mask)


@pytest.mark.parametrize("heads,dtype", [((8, 2, 64), "float16"), ((4, 2, 128), "bfloat16"),
                                         ((4, 1, 80), "float16"), ((2, 1, 256), "bfloat16")],
                         ids=["D64", "D128", "D80", "D256"])
@pytest.mark.parametrize("mask", [dict(), dict(causal=True, window=(700, 0), sink_tokens=3, use_sinks=True),
                                  dict(causal=True, mods="both")], ids=["plain", "window_sinks", "mods"])
@pytest.mark.parametrize("page", [16, 48, 80])
def test_long_paged_decode(backend, rng, heads, dtype, mask, page):
    """Decode steps (1 or 3 query tokens) against long paged caches whose
    page size the decode's 32-key tile does not divide (on Hopper the TMA
    decode reads those in boxes of 16 rows, two a tile, each from its own
    page: a tile straddles two pages at 48 and 80): shuffled pages, lengths
    ending inside a box, a sequence with no key, NaN/Inf in every slot no
    sequence owns, the token appended in place."""
    mask = dict(mask)
    mods = MODS[mask.pop("mods", "none")]
    Sn = 3 if page == 48 else 1
    check(backend, rng, heads, dtype, dict(lens=[1500, 0, 517, 40], Sn=Sn, new=Sn, page=page), mods, **mask)


@pytest.mark.parametrize("page", [1, 5, 16, 64, 256])
@pytest.mark.parametrize("Sn", [1, 4, 16])
def test_long_paged_same_bits_as_contiguous(backend, rng, page, Sn):
    """Shuffled pages, NaN/Inf in every slot no sequence owns: within the
    reference's tolerance, and bit for bit the call on a contiguous cache
    holding the same keys (the CPU reads pages in place, with the dense
    path's arithmetic)."""
    dtype = "float32" if page in (1, 16, 256) else "bfloat16"
    mask = LONG_MASKS[(page + Sn) % 3]
    q, kc, vc, kn, vn, index, kw = make(rng, 8, 2, 64, dtype, lens=[1800, 500], Sn=Sn, new=1, page=page,
                                        **mask)
    kc0, vc0 = kc.copy(), vc.copy()
    o, lse = check(backend, rng, (8, 2, 64), dtype, {}, _made=(q, kc, vc, kn, vn, index, kw))[7:]
    if backend != "cpu":
        return
    # the same keys in a contiguous cache [B, Sc, Hkv, D], NaN past each sequence's keys
    B, lens = q.shape[0], index["cache_seqlens"]
    Sc = int(lens.max()) + 1 + 5
    cc = [np.full((B, Sc) + kc.shape[2:], np.nan, kc.dtype) for _ in range(2)]
    for b in range(B):
        for c, pages in zip(cc, (kc0, vc0)):
            c[b, :lens[b]] = kvcache_keys(pages, b, int(lens[b]), block_table=index["block_table"])
    o2, lse2 = flashc.attention_with_kvcache(q, cc[0], cc[1], kn, vn, cache_seqlens=lens, return_lse=True,
                                             backend="cpu", **kw)
    assert same_bytes(o, o2) and same_bytes(lse, lse2), "paged and contiguous caches differ"


# ------------------------------------------------------------------- CUDA


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("cname", ["decode", "chunk_batch_idx", "page16", "page16_chunk",
                                   "page256", "page5"])
def test_cuda_device_caches_vs_cpu(rng, cname, dtype):
    """Device caches and device int32 index arrays: the caches are updated on
    the device exactly as on the CPU, and the outputs agree within the
    dtype's tolerance."""
    import flashc.cuda as fcuda
    D = fcuda.to_device
    q, kc, vc, kn, vn, index, kw = make(rng, 8, 2, 128, dtype, **CASES[cname], causal=True,
                                        use_sinks=True)
    dkc, dvc = D(kc), D(vc)
    dindex = {n: D(a) for n, a in index.items()}
    dkw = {n: (D(a) if isinstance(a, np.ndarray) else a) for n, a in kw.items()}
    ro, rl = kvcache_reference(q, kc, vc, index["cache_seqlens"], kn, vn,
                               cache_batch_idx=index.get("cache_batch_idx"),
                               block_table=index.get("block_table"), **kw)
    no, _ = kvcache_reference(q, kc, vc, index["cache_seqlens"], kn, vn, naive=dtype,
                              cache_batch_idx=index.get("cache_batch_idx"),
                              block_table=index.get("block_table"), **kw)
    co, cl = flashc.attention_with_kvcache(q, kc, vc, kn, vn, return_lse=True, backend="cpu",
                                           **index, **kw)
    go, gl = flashc.attention_with_kvcache(D(q), dkc, dvc, D(kn) if kn is not None else None,
                                           D(vn) if vn is not None else None, return_lse=True,
                                           **dindex, **dkw)
    assert same_bytes(dkc.numpy(), kc) and same_bytes(dvc.numpy(), vc)
    go = go.numpy()
    assert_close(go, ro, no, dtype, "cuda o")
    assert max_abs_err(go, co) <= 2 * tolerance(ro, no, dtype)
    assert max_abs_err(gl.numpy(), cl) <= 1e-2


@pytest.mark.cuda
def test_cuda_split_decode_long(rng):
    """Decode against long caches (the split-KV path): B = 2, Sk up to 20k."""
    import flashc.cuda as fcuda
    D = fcuda.to_device
    q, kc, vc, kn, vn, index, kw = make(rng, 8, 1, 64, "bfloat16", lens=[20000, 3000], Sn=1,
                                        new=1, page=16)
    ro, _ = kvcache_reference(q, kc, vc, index["cache_seqlens"], kn, vn,
                              block_table=index["block_table"])
    no, _ = kvcache_reference(q, kc, vc, index["cache_seqlens"], kn, vn, naive="bfloat16",
                              block_table=index["block_table"])
    o = flashc.attention_with_kvcache(D(q), D(kc), D(vc), D(kn), D(vn),
                                      **{n: D(a) for n, a in index.items()})
    assert_close(o.numpy(), ro, no, "bfloat16", "o")


# ------------------------------------------------------------------- torch


def test_torch_kvcache(backend, rng):
    torch = pytest.importorskip("torch")
    import flashc.torch as ft
    dev = "cuda" if backend == "cuda" else "cpu"
    q, kc, vc, kn, vn, index, kw = make(rng, 4, 2, 40, "float32", **CASES["page5"],
                                        mods=MODS["both"], use_sinks=True, causal=True)
    T = lambda a: torch.tensor(a, device=dev)  # noqa: E731
    tkc, tvc = T(kc), T(vc)
    targs = {n: (torch.tensor(a) if isinstance(a, np.ndarray) else a) for n, a in kw.items()}
    # Index tensors on the CPU (int64 cache_seqlens): converted and moved to q's device.
    o = ft.attention_with_kvcache(T(q), tkc, tvc, T(kn), T(vn),
                                  cache_seqlens=torch.tensor(index["cache_seqlens"],
                                                             dtype=torch.int64),
                                  block_table=T(index["block_table"]), **targs)
    o_np = flashc.attention_with_kvcache(q, kc, vc, kn, vn, **index, **kw)
    assert o.grad_fn is None
    assert max_abs_err(o.cpu().numpy(), o_np) <= (1e-5 if dev == "cpu" else 2e-3)
    assert same_bytes(tkc.cpu().numpy(), kc) and same_bytes(tvc.cpu().numpy(), vc)
    with pytest.raises(flashc.FlashcError, match="cache_seqlens has dtype"):
        ft.attention_with_kvcache(T(q), tkc, tvc, cache_seqlens=torch.ones(4),
                                  block_table=T(index["block_table"]))
