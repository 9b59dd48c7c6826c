"""Causal self-attention for the GPT, with a swappable inner attention.

`CausalSelfAttention` projects x (B, T, C) to queries, keys and values, splits them into
H heads of hd = C / H features, runs the inner attention on (B, H, T, hd) arrays, merges
the heads and projects back. The inner attention is one of `ATTENTIONS`:

    "dense"  standard attention: S = scale Q K^T and P = softmax(S), both (T, T) per
             head; the forward keeps P for the backward (dV = P^T dO, dP = dO V^T,
             dS = P * (dP - rowsum(P * dP)), dQ = scale dS K, dK = scale dS^T Q).
    "tiled"  the course's FlashAttention: `flashcourse.tiled.forward` (tiles of
             block_q x block_k, online softmax) keeps O and lse, T numbers per head;
             `flashcourse.tiled.backward` rebuilds each tile of P from lse.

Both are exact attention, so the GPT computes the same function with either; only the
rounding order differs (notebook 13 trains the two side by side). Each inner attention
adds the seconds its forward and backward take to `seconds` (perf_counter, host time).
"""

from __future__ import annotations

import math
import time

import numpy as np

from .. import tiled
from .._checks import check_block, check_choice
from ..geometry import visible_mask
from .layers import INIT_STD, Layer, Linear


class DenseAttention(Layer):
    """Standard attention on (B, H, T, hd) arrays with the causal mask; keeps P (B, H, T, T)."""

    name = "dense"

    def __init__(self):
        super().__init__()
        self.seconds = {"forward": 0.0, "backward": 0.0}

    def forward(self, q, k, v):
        t0 = time.perf_counter()
        tq, tk, hd = q.shape[-2], k.shape[-2], q.shape[-1]
        scale = 1.0 / math.sqrt(hd)
        s = scale * (q @ np.swapaxes(k, -1, -2))                       # (B, H, T, T)
        s = np.where(visible_mask(tq, tk, True), s, -np.inf)
        e = np.exp(s - s.max(axis=-1, keepdims=True))                  # 0 where masked
        p = e / e.sum(axis=-1, keepdims=True)                          # (B, H, T, T)
        o = p @ v                                                      # (B, H, T, hd)
        self.saved = {"q": q, "k": k, "v": v, "P": p}
        self.seconds["forward"] += time.perf_counter() - t0
        return o

    def backward(self, do):
        t0 = time.perf_counter()
        q, k, v, p = (self.saved[n] for n in ("q", "k", "v", "P"))
        scale = 1.0 / math.sqrt(q.shape[-1])
        dv = np.swapaxes(p, -1, -2) @ do                               # (B, H, T, hd)
        dp = do @ np.swapaxes(v, -1, -2)                               # (B, H, T, T)
        ds = p * (dp - (p * dp).sum(axis=-1, keepdims=True))           # (B, H, T, T)
        dq = scale * (ds @ k)                                          # (B, H, T, hd)
        dk = scale * (np.swapaxes(ds, -1, -2) @ q)                     # (B, H, T, hd)
        self.seconds["backward"] += time.perf_counter() - t0
        return dq, dk, dv


class TiledAttention(Layer):
    """The course's tiled forward and backward (`flashcourse.tiled`), causal; keeps O and lse."""

    name = "tiled"

    def __init__(self, block_q: int = 32, block_k: int = 32):
        super().__init__()
        self.block_q = check_block(block_q, "block_q")
        self.block_k = check_block(block_k, "block_k")
        self.seconds = {"forward": 0.0, "backward": 0.0}

    def forward(self, q, k, v):
        t0 = time.perf_counter()
        o, lse = tiled.forward(q, k, v, causal=True, block_q=self.block_q,
                               block_k=self.block_k)                   # (B, H, T, hd), (B, H, T)
        self.saved = {"q": q, "k": k, "v": v, "O": o, "lse": lse}
        self.seconds["forward"] += time.perf_counter() - t0
        return o

    def backward(self, do):
        t0 = time.perf_counter()
        s = self.saved
        grads = tiled.backward(s["q"], s["k"], s["v"], s["O"], s["lse"], do, causal=True,
                               block_q=self.block_q, block_k=self.block_k)
        self.seconds["backward"] += time.perf_counter() - t0
        return grads


#: the inner attentions a GPT can use, by name
ATTENTIONS = {"dense": DenseAttention, "tiled": TiledAttention}


def make_attention(name: str, block_q: int = 32, block_k: int = 32) -> Layer:
    """The inner attention called `name` (one of `ATTENTIONS`)."""
    name = check_choice(name, "attention", ATTENTIONS)
    return TiledAttention(block_q, block_k) if name == "tiled" else DenseAttention()


class CausalSelfAttention(Layer):
    """x (B, T, C) -> qkv = x W_qkv + b (B, T, 3C) -> H heads -> attention -> merge -> x W_o + b.

    `inner`: the attention on heads (`make_attention`); `proj_std`: the output
    projection's initial spread (GPT-2 scales it by 1/sqrt(2 n_layer)).
    """

    def __init__(self, c: int, n_head: int, inner: Layer, rng, dtype,
                 proj_std: float = INIT_STD):
        super().__init__()
        if c % n_head:
            raise ValueError(f"n_embd must be a multiple of n_head, got n_embd={c}, "
                             f"n_head={n_head}")
        self.n_head = n_head
        self.qkv = Linear(c, 3 * c, rng, dtype)
        self.inner = inner
        self.proj = Linear(c, c, rng, dtype, std=proj_std)

    def layers(self):
        return [self.qkv, self.inner, self.proj]

    def _split(self, x):                          # (B, T, C) -> (B, H, T, hd), contiguous
        b, t, c = x.shape
        return np.ascontiguousarray(x.reshape(b, t, self.n_head, c // self.n_head)
                                    .transpose(0, 2, 1, 3))

    def _merge(self, x):                          # (B, H, T, hd) -> (B, T, C)
        b, h, t, hd = x.shape
        return x.transpose(0, 2, 1, 3).reshape(b, t, h * hd)

    def forward(self, x):
        qkv = self.qkv.forward(x)                                      # (B, T, 3C)
        q, k, v = (self._split(a) for a in np.split(qkv, 3, axis=-1))  # 3 x (B, H, T, hd)
        o = self.inner.forward(q, k, v)                                # (B, H, T, hd)
        return self.proj.forward(self._merge(o))                       # (B, T, C)

    def backward(self, dy):
        do = self._split(self.proj.backward(dy))                       # (B, H, T, hd)
        dq, dk, dv = self.inner.backward(do)
        dqkv = np.concatenate([self._merge(g) for g in (dq, dk, dv)], axis=-1)  # (B, T, 3C)
        return self.qkv.backward(dqkv)
