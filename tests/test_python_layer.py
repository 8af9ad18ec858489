"""The shape of the Python package (python/flashc): no import cycles, one
params builder shared by the NumPy layer and flashc.torch, and the builder's
reading of each argument (the C library validates the values)."""

import ast
import ctypes
import os

import numpy as np
import pytest

import flashc
from flashc import _core, _lib

_PKG = os.path.dirname(os.path.abspath(flashc.__file__))


def _imports(path):
    """Sibling modules a module imports anywhere in it (lazy imports too)."""
    tree = ast.parse(open(path).read())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(node.module.split(".")[0])
            else:
                out.update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[1] for a in node.names
                       if a.name.startswith("flashc."))
    return out


def test_no_import_cycles():
    mods = {f[:-3]: _imports(os.path.join(_PKG, f)) for f in os.listdir(_PKG)
            if f.endswith(".py") and f != "__init__.py"}
    state = {}

    def visit(m, stack):
        if state.get(m) == "done":
            return
        assert state.get(m) != "open", "import cycle: %s" % " -> ".join(stack + [m])
        state[m] = "open"
        for dep in sorted(mods.get(m, ())):
            if dep in mods:
                visit(dep, stack + [m])
        state[m] = "done"

    for m in sorted(mods):
        visit(m, [])
    assert "_core" not in mods["cuda"] and "cuda" in mods["_core"]


def test_one_params_builder():
    """Only _core builds a flashc_attn_params; flashc.torch calls its builder."""
    for f in os.listdir(_PKG):
        if f.endswith(".py") and f not in ("_core.py", "_lib.py"):
            src = open(os.path.join(_PKG, f)).read()
            assert "attn_params_default" not in src and "sink_logits" not in src, f
    torch_src = open(os.path.join(_PKG, "torch.py")).read()
    assert "attn_params(" in torch_src


def _tensor(a):
    t = _lib.flashc_tensor()
    t.data = a.ctypes.data
    t.dtype = _lib.FLASHC_F32
    t.ndim = a.ndim
    for i in range(a.ndim):
        t.shape[i] = a.shape[i]
        t.strides[i] = a.strides[i] // a.itemsize
    return t


def test_params_builder_fields():
    s = np.zeros(4, np.float32)
    ts, ta, td = _tensor(s), _tensor(s), _tensor(s)
    p = _core.attn_params(_lib.FLASHC_BACKEND_CPU, causal=True, softmax_scale=None,
                          window=(None, 3), sink_tokens=2, softcap=None, sinks=ts,
                          alibi_slopes=ta, dsinks=td, stream=None, deterministic=False)
    assert p.struct_size == ctypes.sizeof(_lib.flashc_attn_params)
    assert (p.backend, p.causal, p.deterministic) == (_lib.FLASHC_BACKEND_CPU, 1, 0)
    assert (p.softmax_scale, p.softcap) == (0.0, 0.0)   # None: the C defaults
    assert (p.window_left, p.window_right, p.num_sink_tokens) == (-1, 3, 2)
    assert not p.sink_logits and not p.stream              # the 0.1 fields stay NULL
    for field, t in (("sinks", ts), ("alibi_slopes", ta), ("dsinks", td)):
        assert ctypes.addressof(getattr(p, field).contents) == ctypes.addressof(t)
    p = _core.attn_params(_lib.FLASHC_BACKEND_AUTO, softmax_scale=0, softcap=0)
    assert (p.softmax_scale, p.softcap) == (0.0, 0.0)
    assert not p.sinks and not p.alibi_slopes and not p.dsinks
    p = _core.attn_params(_lib.FLASHC_BACKEND_AUTO, softmax_scale=0.5, softcap=30)
    assert (p.softmax_scale, p.softcap) == (0.5, 30.0)


def test_params_builder_cache():
    # Repeated calls come from a cache of built structs: the same bytes as a
    # fresh build, this call's stream, and never a cached answer for a value
    # the builder rejects.
    def build(cached, **kw):
        old = _core._PARAMS_CACHE_MAX
        if not cached:
            _core._PARAMS_CACHE.clear()
            _core._PARAMS_CACHE_MAX = 0
        try:
            return _core.attn_params(_lib.FLASHC_BACKEND_CUDA, **kw)
        finally:
            _core._PARAMS_CACHE_MAX = old
    for kw in (dict(), dict(causal=True, window=[7, 0], sink_tokens=2, softcap=5),
               dict(softmax_scale=0.25, window=(None, 3), deterministic=False)):
        build(True, stream=1, **kw)                      # fills the cache
        a, b = build(True, stream=77, **kw), build(False, stream=77, **kw)
        assert a.stream == 77 and bytes(a) == bytes(b), kw
    build(True, sink_tokens=1, window=(1, 0))
    for bad in (dict(sink_tokens=True), dict(sink_tokens=1.0), dict(window=(1.0, 0)),
                dict(window=(True, 0))):
        with pytest.raises(flashc.FlashcError):
            build(True, **bad)


def test_params_builder_keeps_tensors_alive():
    import gc
    p = _core.attn_params(_lib.FLASHC_BACKEND_AUTO, sinks=_tensor(np.arange(4, dtype=np.float32)))
    gc.collect()
    assert p.sinks.contents.ndim == 1 and p.sinks.contents.shape[0] == 4


def test_params_builder_bad_window():
    # FlashcError (a ValueError), not TypeError (issue 10).
    with pytest.raises(flashc.FlashcError, match="window"):
        _core.attn_params(_lib.FLASHC_BACKEND_AUTO, window=3)


def test_non_native_byte_order():
    """A big-endian NumPy input is read by value (converted, as NumPy would
    compute with it), never reinterpreted as native bytes; a big-endian output
    or in-place cache is an error. Index arrays (cu_seqlens) likewise."""
    rng = np.random.default_rng(11)
    q, k, v = (rng.standard_normal((2, 5, 4, 16)).astype(np.float32) for _ in range(3))
    want = flashc.attention(q, k, v, causal=True)
    got = flashc.attention(q.astype(">f4"), k.astype(">f4"), v, causal=True)
    np.testing.assert_array_equal(got, want)
    with pytest.raises(flashc.FlashcError, match="byte order"):
        flashc.attention(q, k, v, out=np.empty(q.shape, dtype=">f4"))
    # varlen with big-endian cu_seqlens: the same result as native int32
    qv, kv, vv = q.reshape(10, 4, 16), k.reshape(10, 4, 16), v.reshape(10, 4, 16)
    cu = np.array([0, 3, 10], dtype=np.int32)
    want = flashc.attention_varlen(qv, kv, vv, cu, cu)
    got = flashc.attention_varlen(qv, kv, vv, cu.astype(">i4"), cu.astype(">i4"))
    np.testing.assert_array_equal(got, want)
