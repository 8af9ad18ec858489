#!/usr/bin/env python3
"""Greedy generation with a tiny transformer, served the way an inference
engine serves it: a ragged prefill, then decode steps on a paged KV cache.

    python examples/serving.py [--steps 16] [--backends cpu,cuda] [--seed 0]

The model (random weights, NumPy float32): vocabulary 97, d_model 64, 2
layers, 4 query heads sharing 2 KV heads (GQA), head dim 16, learned
positions, RMSNorm, a ReLU MLP. A batch of prompts of
different lengths is served in two phases:

  prefill  all prompt tokens packed into one [T, H, D] batch, attended with
           flashc.attention_varlen (causal per sequence, cu_seqlens from the
           prompt lengths); their K/V written into the page pool;
  decode   one token per sequence and step: flashc.attention_with_kvcache
           appends the token's K/V in place into the paged cache (page_size
           16; pages handed out from a shuffled free list as a sequence
           grows; block table [B, max_pages], -1 where no page is mapped)
           and attends over the cache.

It runs on the CPU backend and, when flashc.backend_available("cuda"), on
the GPU as well (the page pool lives on the device as flashc.cuda
DeviceArrays and is updated there; the matmuls of this toy stay in NumPy),
and checks every backend's tokens against each other and against the same
model run naively (no cache: each step recomputes every sequence from
scratch with NumPy's materialised float64 softmax). Prints the tokens and
one verdict line; exits 1 on a mismatch.
"""

import argparse
import math
import os
import sys
import time

import numpy as np

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(_ROOT, "python"))

import flashc  # noqa: E402

VOCAB, D_MODEL, LAYERS, HQ, HKV, HEAD_DIM, MAX_POS, PAGE = 97, 64, 2, 4, 2, 16, 256, 16
PROMPT_LENS = (5, 17, 1, 33, 12)


# ------------------------------------------------------------------ model


class Model:
    """Random weights, scaled so that activations stay O(1)."""

    def __init__(self, rng):
        def w(*shape):
            return (rng.standard_normal(shape) / math.sqrt(shape[0])).astype(np.float32)

        self.emb = rng.standard_normal((VOCAB, D_MODEL)).astype(np.float32)
        self.pos = (0.5 * rng.standard_normal((MAX_POS, D_MODEL))).astype(np.float32)
        self.head = w(D_MODEL, VOCAB)
        self.layers = [dict(wq=w(D_MODEL, HQ * HEAD_DIM), wk=w(D_MODEL, HKV * HEAD_DIM),
                            wv=w(D_MODEL, HKV * HEAD_DIM), wo=w(HQ * HEAD_DIM, D_MODEL),
                            w1=w(D_MODEL, 4 * D_MODEL), w2=w(4 * D_MODEL, D_MODEL))
                       for _ in range(LAYERS)]

    def embed(self, tokens, positions):
        return self.emb[tokens] + self.pos[positions]

    @staticmethod
    def norm(x):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6)

    def qkv(self, layer, x):
        """x [..., d_model] -> q [..., HQ, HEAD_DIM], k, v [..., HKV, HEAD_DIM]."""
        h = self.norm(x)
        p = self.layers[layer]
        lead = x.shape[:-1]
        return ((h @ p["wq"]).reshape(lead + (HQ, HEAD_DIM)),
                (h @ p["wk"]).reshape(lead + (HKV, HEAD_DIM)),
                (h @ p["wv"]).reshape(lead + (HKV, HEAD_DIM)))

    def finish_layer(self, layer, x, attn):
        """The residual after attention (attn [..., HQ, HEAD_DIM]) and the MLP."""
        p = self.layers[layer]
        x = x + attn.reshape(x.shape[:-1] + (HQ * HEAD_DIM,)) @ p["wo"]
        return x + np.maximum(self.norm(x) @ p["w1"], 0) @ p["w2"]

    def logits(self, x):
        return self.norm(x) @ self.head


# ------------------------------------------------------- paged KV cache


class PagedCache:
    """Per layer a K and a V page pool [num_pages, PAGE, HKV, HEAD_DIM]; a
    shuffled free list; block_table [B, max_pages] int32, -1 = no page."""

    def __init__(self, B, max_tokens, rng):
        self.max_pages = -(-max_tokens // PAGE)
        num_pages = B * self.max_pages
        shape = (num_pages, PAGE, HKV, HEAD_DIM)
        # NaN in every slot no token owns: flashc never reads past a sequence's length.
        self.k = [np.full(shape, np.nan, np.float32) for _ in range(LAYERS)]
        self.v = [np.full(shape, np.nan, np.float32) for _ in range(LAYERS)]
        self.free = list(rng.permutation(num_pages))
        self.table = np.full((B, self.max_pages), -1, np.int32)
        self.pages = np.zeros(B, np.int64)

    def reserve(self, b, n_tokens):
        """Map pages so that sequence b can hold n_tokens."""
        while self.pages[b] * PAGE < n_tokens:
            self.table[b, self.pages[b]] = self.free.pop()
            self.pages[b] += 1

    def write(self, layer, b, k, v):
        """Sequence b's first len(k) tokens (prefill), on the host pools."""
        t = np.arange(k.shape[0])
        page, row = self.table[b, t // PAGE], t % PAGE
        self.k[layer][page, row] = k
        self.v[layer][page, row] = v


# ---------------------------------------------------------------- serving


class Host:
    name = "cpu"

    @staticmethod
    def put(a):
        return a

    @staticmethod
    def get(a):
        return a


class Gpu:
    name = "cuda"

    @staticmethod
    def put(a):
        return flashc.cuda.to_device(np.ascontiguousarray(a))

    @staticmethod
    def get(a):
        return a.numpy()


def serve(model, prompts, steps, dev, rng):
    """Greedy decode of `steps` tokens per prompt; returns [B, steps] tokens."""
    B = len(prompts)
    lens = np.array([len(p) for p in prompts], np.int32)
    cache = PagedCache(B, int(lens.max()) + steps, rng)

    # Prefill: every prompt token at once, packed; cu_seqlens from the lengths.
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    x = model.embed(np.concatenate(prompts), np.concatenate([np.arange(n) for n in lens]))
    for b in range(B):
        cache.reserve(b, lens[b])
    for layer in range(LAYERS):
        q, k, v = model.qkv(layer, x)                               # [T, H, D]
        for b in range(B):
            cache.write(layer, b, k[cu[b]:cu[b + 1]], v[cu[b]:cu[b + 1]])
        o = flashc.attention_varlen(dev.put(q), dev.put(k), dev.put(v), dev.put(cu),
                                    dev.put(cu), int(lens.max()), int(lens.max()), causal=True)
        x = model.finish_layer(layer, x, dev.get(o))
    nxt = np.argmax(model.logits(x[cu[1:] - 1]), axis=-1)
    out = [nxt]

    # Decode: the page pools move to the device once; each step appends in place.
    kc = [dev.put(a) for a in cache.k]
    vc = [dev.put(a) for a in cache.v]
    for _ in range(steps - 1):
        for b in range(B):
            cache.reserve(b, lens[b] + 1)
        x = model.embed(nxt, lens)[:, None]                         # [B, 1, d_model]
        for layer in range(LAYERS):
            q, k, v = model.qkv(layer, x)                           # [B, 1, H, D]
            # cache_seqlens / block_table: host arrays, copied for a device call.
            o = flashc.attention_with_kvcache(dev.put(q), kc[layer], vc[layer], dev.put(k),
                                              dev.put(v), cache_seqlens=lens,
                                              block_table=cache.table, causal=True)
            x = model.finish_layer(layer, x, dev.get(o))
        nxt = np.argmax(model.logits(x[:, 0]), axis=-1)
        out.append(nxt)
        lens = lens + 1
    return np.stack(out, axis=1)


def naive_attention(q, k, v):
    """Causal GQA softmax attention of one sequence, materialised, float64:
    q [S, HQ, D], k, v [S, HKV, D] -> [S, HQ, D] float32."""
    g = HQ // HKV
    q, k, v = q.astype(np.float64), k.astype(np.float64), v.astype(np.float64)
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    x = np.einsum("ihd,jhd->hij", q, k) / math.sqrt(HEAD_DIM)
    S = q.shape[0]
    x = np.where(np.tril(np.ones((S, S), bool)), x, -np.inf)
    p = np.exp(x - x.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("hij,jhd->ihd", p, v).astype(np.float32)


def generate_naive(model, prompts, steps):
    """The same model without a cache: every step recomputes each sequence."""
    seqs = [list(p) for p in prompts]
    out = []
    for _ in range(steps):
        step = []
        for s in seqs:
            x = model.embed(np.array(s), np.arange(len(s)))
            for layer in range(LAYERS):
                q, k, v = model.qkv(layer, x)
                x = model.finish_layer(layer, x, naive_attention(q, k, v))
            step.append(int(np.argmax(model.logits(x[-1]))))
        for s, t in zip(seqs, step):
            s.append(t)
        out.append(step)
    return np.array(out).T


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=16, help="tokens to generate per prompt")
    ap.add_argument("--backends", default="cpu,cuda",
                    help="comma-separated; cuda is skipped (and said so) where unavailable")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    model = Model(rng)
    prompts = [rng.integers(0, VOCAB, n) for n in PROMPT_LENS]
    devs = []
    for name in args.backends.split(","):
        if name == "cpu":
            devs.append(Host)
        elif name == "cuda":
            ok, why = flashc.backend_available("cuda")
            if ok:
                devs.append(Gpu)
            else:
                print("cuda: skipped (%s)" % why)
        else:
            ap.error("unknown backend %r" % name)

    results = {}
    for dev in devs:
        t0 = time.perf_counter()
        results[dev.name] = serve(model, prompts, args.steps, dev, np.random.default_rng(1))
        print("%-5s served %d prompts x %d tokens in %.1f ms" % (
            dev.name, len(prompts), args.steps, 1e3 * (time.perf_counter() - t0)))
    results["numpy"] = generate_naive(model, prompts, args.steps)

    names = list(results)
    for b, p in enumerate(prompts):
        print("prompt %d (%2d tokens) %s" % (b, len(p), " ".join(str(t) for t in p[-6:])))
        for n in names:
            print("  %-5s -> %s" % (n, " ".join("%2d" % t for t in results[n][b])))
    bad = [n for n in names if not np.array_equal(results[n], results["numpy"])]
    if bad:
        print("FAIL: %s tokens differ from the naive NumPy run" % ", ".join(bad))
        return 1
    print("PASS: %s produce the same %d x %d tokens (prefill with attention_varlen, decode "
          "on a paged KV cache)" % (" = ".join(names), len(prompts), args.steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
