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
    "variants" the course's attention driven by a block mask (`flashcourse.variants.tiled`
             forward and backward): tiles the mask hides entirely are skipped, the
             mask is evaluated only on partly hidden tiles; keeps O and lse.

Packed training sequences: a row of T positions holds several documents, given by
cu_seqlens = [0, end_1, ..., T] per row (`text.get_packed_batch`). With documents, the
mask is the *document mask*, causal inside each document and nothing across documents
(`packed_mask`: `variants.library.causal` and `variants.library.document`). "dense"
applies it as a (T, T) boolean matrix per row (the reference); "variants" builds one
`BlockMask` per row (`variants.block_mask.create_block_mask`, cached) and skips the
empty tiles; "tiled" is causal only and refuses documents.

All are exact attention, so the GPT computes the same function with each; only the
rounding order differs (notebook 13 trains them side by side). Each inner attention
adds the seconds its forward and backward take to `seconds` (perf_counter, host time).
"""

from __future__ import annotations

import math
import time

import numpy as np

from .. import tiled
from .._checks import check_block, check_choice
from ..geometry import visible_mask
from ..variants import block_mask as vbm
from ..variants import library, mods
from ..variants import tiled as vtiled
from .layers import INIT_STD, Layer, Linear


def check_packed(cu_seqlens, batch: int, t: int) -> list:
    """cu_seqlens as a list of `batch` int64 arrays [0, end_1, ..., t], one per row
    (ValueError naming the row otherwise)."""
    if isinstance(cu_seqlens, np.ndarray) and cu_seqlens.ndim == 1:
        raise ValueError("cu_seqlens must be a list of one array [0, end_1, ..., T] per "
                         "row of the batch, got a single 1-D array: wrap it in a list")
    try:
        rows = list(cu_seqlens)
    except TypeError:
        raise ValueError(f"cu_seqlens must be a list of {batch} arrays [0, end_1, ..., "
                         f"{t}], one per row, got {type(cu_seqlens).__name__}") from None
    if len(rows) != batch:
        raise ValueError(f"cu_seqlens must hold one array per row of the batch: {batch} "
                         f"rows, got {len(rows)} arrays")
    return [library.check_cu_seqlens(c, f"cu_seqlens[{b}]", total=t)
            for b, c in enumerate(rows)]


def packed_mask(cu_seqlens_row, t: int):
    """The document mask of one packed row as a mask_mod: query i sees key j iff j <= i
    and both lie in the same document of cu_seqlens_row = [0, end_1, ..., t]."""
    cu = library.check_cu_seqlens(cu_seqlens_row, "cu_seqlens_row", total=t)
    return mods.and_masks(library.causal(t, t), library.document(cu))


def packed_visible(cu_seqlens_row, t: int) -> np.ndarray:
    """(T, T) bool: the document mask of one packed row as a matrix (True = visible)."""
    doc = library.document_ids(library.check_cu_seqlens(cu_seqlens_row, "cu_seqlens_row",
                                                        total=t))         # (T,)
    return visible_mask(t, t, True) & (doc[:, None] == doc[None, :])


class DenseAttention(Layer):
    """Standard attention on (B, H, T, hd) arrays with the causal mask (with cu_seqlens:
    the document mask of each row, `packed_visible`); keeps P (B, H, T, T)."""

    name = "dense"

    def __init__(self):
        super().__init__()
        self.seconds = {"forward": 0.0, "backward": 0.0}

    def forward(self, q, k, v, cu_seqlens=None):
        t0 = time.perf_counter()
        b, tq, tk, hd = q.shape[0], q.shape[-2], k.shape[-2], q.shape[-1]
        scale = 1.0 / math.sqrt(hd)
        s = scale * (q @ np.swapaxes(k, -1, -2))                       # (B, H, T, T)
        if cu_seqlens is None:
            visible = visible_mask(tq, tk, True)                       # (T, T)
        else:
            visible = np.stack([packed_visible(c, tq) for c in
                                check_packed(cu_seqlens, b, tq)])[:, None]  # (B, 1, T, T)
        s = np.where(visible, s, -np.inf)
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


class _TiledInner(Layer):
    """An inner attention that works in tiles of block_q x block_k (both checked here)."""

    def __init__(self, block_q: int = 32, block_k: int = 32):
        super().__init__()
        self.block_q = check_block(block_q, "block_q")
        self.block_k = check_block(block_k, "block_k")
        self.seconds = {"forward": 0.0, "backward": 0.0}


class TiledAttention(_TiledInner):
    """The course's tiled forward and backward (`flashcourse.tiled`), causal; keeps O and lse."""

    name = "tiled"

    def forward(self, q, k, v, cu_seqlens=None):
        if cu_seqlens is not None:
            raise ValueError("attention='tiled' is causal only and takes no cu_seqlens: "
                             "use attention='variants' (block mask) or 'dense' for packed "
                             "documents")
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


class VariantsAttention(_TiledInner):
    """The course's block-mask attention (`flashcourse.variants.tiled`), causal, or with
    cu_seqlens the document mask of each row; keeps O and lse. `tiles` counts the
    (block_q x block_k) score tiles formed, forward and backward together: the tiles a
    block mask marks empty are never formed."""

    name = "variants"

    def __init__(self, block_q: int = 32, block_k: int = 32):
        super().__init__(block_q, block_k)
        self.tiles = 0

    def block_masks(self, cu_seqlens, batch: int, t: int) -> list:
        """One BlockMask per row (None: a single causal one for every row); each is
        built once and then found in the block-mask cache."""
        if cu_seqlens is None:
            return [vbm.create_block_mask(library.causal(t, t), None, None, t, t,
                                          self.block_q, self.block_k)]
        return [vbm.create_block_mask(packed_mask(c, t), None, None, t, t, self.block_q,
                                      self.block_k) for c in check_packed(cu_seqlens, batch, t)]

    def _rows(self, bms, batch):
        """(row slice, block mask) pairs: the whole batch at once with one mask."""
        if len(bms) == 1:
            return [(slice(0, batch), bms[0])]
        return [(slice(b, b + 1), bm) for b, bm in enumerate(bms)]

    def forward(self, q, k, v, cu_seqlens=None):
        t0 = time.perf_counter()
        bms = self.block_masks(cu_seqlens, q.shape[0], q.shape[-2])
        o = np.empty_like(q)                                           # (B, H, T, hd)
        lse = np.empty(q.shape[:3], np.float64 if q.dtype == np.float64 else np.float32)
        for rows, bm in self._rows(bms, q.shape[0]):
            stats = {}
            o[rows], lse[rows] = vtiled.forward(q[rows], k[rows], v[rows], block_mask=bm,
                                                stats=stats)           # (b, H, T, hd), (b, H, T)
            self.tiles += stats["tiles"]
        self.saved = {"q": q, "k": k, "v": v, "O": o, "lse": lse, "block_masks": bms}
        self.seconds["forward"] += time.perf_counter() - t0
        return o

    def backward(self, do):
        t0 = time.perf_counter()
        s = self.saved
        dq, dk, dv = (np.empty_like(s[n]) for n in ("q", "k", "v"))
        for rows, bm in self._rows(s["block_masks"], do.shape[0]):
            stats = {}
            dq[rows], dk[rows], dv[rows], _ = vtiled.backward(
                s["q"][rows], s["k"][rows], s["v"][rows], s["O"][rows], s["lse"][rows],
                do[rows], block_mask=bm, stats=stats)
            self.tiles += stats["tiles"]
        self.seconds["backward"] += time.perf_counter() - t0
        return dq, dk, dv


#: the inner attentions a GPT can use, by name
ATTENTIONS = {"dense": DenseAttention, "tiled": TiledAttention, "variants": VariantsAttention}


def make_attention(name: str, block_q: int = 32, block_k: int = 32) -> Layer:
    """The inner attention called `name` (one of `ATTENTIONS`)."""
    name = check_choice(name, "attention", ATTENTIONS)
    return DenseAttention() if name == "dense" else ATTENTIONS[name](block_q, block_k)


class CausalSelfAttention(Layer):
    """x (B, T, C) -> qkv = x W_qkv + b (B, T, 3C) -> H heads -> attention -> merge -> x W_o + b.

    `inner`: the attention on heads (`make_attention`); `proj_std`: the output
    projection's initial spread (GPT-2 scales it by 1/sqrt(2 n_layer)). forward's
    cu_seqlens (one array per row, packed documents) goes to the inner attention.
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

    def forward(self, x, cu_seqlens=None):
        qkv = self.qkv.forward(x)                                      # (B, T, 3C)
        q, k, v = (self._split(a) for a in np.split(qkv, 3, axis=-1))  # 3 x (B, H, T, hd)
        o = self.inner.forward(q, k, v, cu_seqlens)                    # (B, H, T, hd)
        return self.proj.forward(self._merge(o))                       # (B, T, C)

    def backward(self, dy):
        do = self._split(self.proj.backward(dy))                       # (B, H, T, hd)
        dq, dk, dv = self.inner.backward(do)
        dqkv = np.concatenate([self._merge(g) for g in (dq, dk, dv)], axis=-1)  # (B, T, 3C)
        return self.qkv.backward(dqkv)
