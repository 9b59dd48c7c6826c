"""A small GPT in numpy (the shape of nanoGPT's `model.py`), trained with the course's attention.

    idx (B, T) -> wte[idx] + wpe[pos]                     (B, T, C)
                  pos = 0..T-1, or with packed documents 0..n-1 in each document
    n_layer x Block: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))
    ln_f -> head (C -> V, no bias)                        logits (B, T, V)
    loss = cross_entropy(logits, next characters)         nats per token

`GPT.backward()` walks the same layers in reverse, each layer's written-out backward
(`model.layers`, `model.attention`). `train` runs AdamW steps on random windows of the
text (or, given documents, on packed rows of whole documents) and records, per step, the
loss and the seconds of the whole step and of attention.

Packed rows (`forward(idx, targets, cu_seqlens)`): each document attends only to itself
(the document mask, `model.attention`), and its positions restart at 0, so a document
is computed exactly as if it were alone in a row of its own: its output does not depend
on the other documents, nor on where in the row it sits. (A document never sees another
document's positions, but without the restart its position ids would depend on the
lengths of the documents before it, and the model would learn position ids it never
meets when it generates from a fresh prompt.)
Unlike GPT-2, the output head is its own matrix, not tied to wte (one layer, one gradient).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from .._checks import check_block, check_choice
from .adamw import AdamW, clip_grad_norm
from .attention import ATTENTIONS, CausalSelfAttention, check_packed, make_attention
from .layers import INIT_STD, Embedding, LayerNorm, Layer, Linear, MLP, cross_entropy
from .text import get_batch, get_packed_batch

DTYPES = ("float64", "float32")


@dataclass(frozen=True)
class GPTConfig:
    """vocab_size V; block_size T (the longest context); n_layer blocks; n_head heads of
    n_embd / n_head features; attention: "tiled", "dense" or "variants"
    (`model.attention`); block_q, block_k: the tiled attentions' tile; dtype: "float64"
    or "float32"."""

    vocab_size: int
    block_size: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    attention: str = "tiled"
    block_q: int = 32
    block_k: int = 32
    dtype: str = "float64"

    def __post_init__(self):
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            check_block(getattr(self, name), name)
        check_choice(self.attention, "attention", ATTENTIONS)
        check_choice(self.dtype, "dtype", DTYPES)
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd must be a multiple of n_head, got n_embd="
                             f"{self.n_embd}, n_head={self.n_head}")


class Block(Layer):
    """x + attn(ln_1(x)), then + mlp(ln_2(x)): a pre-norm transformer block."""

    def __init__(self, cfg: GPTConfig, rng, dtype):
        super().__init__()
        proj_std = INIT_STD / math.sqrt(2 * cfg.n_layer)
        self.ln_1 = LayerNorm(cfg.n_embd, dtype)
        self.attn = CausalSelfAttention(cfg.n_embd, cfg.n_head,
                                        make_attention(cfg.attention, cfg.block_q, cfg.block_k),
                                        rng, dtype, proj_std)
        self.ln_2 = LayerNorm(cfg.n_embd, dtype)
        self.mlp = MLP(cfg.n_embd, rng, dtype, proj_std)

    def layers(self):
        return [self.ln_1, self.attn, self.ln_2, self.mlp]

    def forward(self, x, cu_seqlens=None):
        x = x + self.attn.forward(self.ln_1.forward(x), cu_seqlens)
        return x + self.mlp.forward(self.ln_2.forward(x))

    def backward(self, dy):
        dx = dy + self.ln_2.backward(self.mlp.backward(dy))
        return dx + self.ln_1.backward(self.attn.backward(dx))


def leaves(layer) -> list:
    """Every layer with no sublayers under `layer`, in forward order."""
    subs = layer.layers() if hasattr(layer, "layers") else []
    return [leaf for s in subs for leaf in leaves(s)] if subs else [layer]


class GPT(Layer):
    """The model; `seed` fixes the initial weights (two GPTs with one seed start equal)."""

    def __init__(self, cfg: GPTConfig, seed: int = 0):
        super().__init__()
        self.cfg = cfg
        dtype = np.dtype(cfg.dtype)
        rng = np.random.default_rng(seed)
        self.wte = Embedding(cfg.vocab_size, cfg.n_embd, rng, dtype)
        self.wpe = Embedding(cfg.block_size, cfg.n_embd, rng, dtype)
        self.blocks = [Block(cfg, rng, dtype) for _ in range(cfg.n_layer)]
        self.ln_f = LayerNorm(cfg.n_embd, dtype)
        self.head = Linear(cfg.n_embd, cfg.vocab_size, rng, dtype, bias=False)

    def layers(self):
        return [self.wte, self.wpe, *self.blocks, self.ln_f, self.head]

    def parameters(self) -> list:
        """(name, parameter, gradient) for every parameter, in forward order."""
        return [(f"{i}.{type(leaf).__name__}.{n}", p, leaf.grads[n])
                for i, leaf in enumerate(leaves(self)) for n, p in leaf.params.items()]

    def n_params(self) -> int:
        return sum(p.size for _, p, _ in self.parameters())

    def attention_layers(self) -> list:
        return [b.attn.inner for b in self.blocks]

    def zero_grad(self) -> None:
        for leaf in leaves(self):
            leaf.zero_grad()

    def forward(self, idx, targets=None, cu_seqlens=None):
        """logits (B, T, V) and, given targets (B, T), the mean loss (else None).
        cu_seqlens: None (each row one sequence), or packed rows: a list of B arrays
        [0, end_1, ..., T] (`text.get_packed_batch`); needs attention "dense" or
        "variants"."""
        idx = np.asarray(idx)
        if idx.ndim != 2 or not np.issubdtype(idx.dtype, np.integer):
            raise ValueError(f"idx must be (B, T) integer token ids, got shape {idx.shape} "
                             f"dtype {idx.dtype}")
        b, t = idx.shape
        if t > self.cfg.block_size:
            raise ValueError(f"idx has T = {t} positions, more than block_size = "
                             f"{self.cfg.block_size}")
        if cu_seqlens is not None:
            cu_seqlens = check_packed(cu_seqlens, b, t)
            if self.cfg.attention == "tiled":
                raise ValueError("packed rows (cu_seqlens) need attention='variants' or "
                                 "'dense'; 'tiled' is causal only")
        pos = document_positions(cu_seqlens, t)                             # (T,) or (B, T)
        x = self.wte.forward(idx) + self.wpe.forward(pos)                   # (B, T, C)
        for block in self.blocks:
            x = block.forward(x, cu_seqlens)
        logits = self.head.forward(self.ln_f.forward(x))                   # (B, T, V)
        if targets is None:
            self.saved = {}
            return logits, None
        loss, dlogits = cross_entropy(logits.reshape(b * t, -1), np.asarray(targets).ravel())
        self.saved = {"dlogits": dlogits.reshape(logits.shape)}
        return logits, loss

    def backward(self):
        """Gradients of the last forward's loss, added into every layer's `grads`."""
        if "dlogits" not in self.saved:
            raise RuntimeError("backward() needs a forward with targets first")
        dx = self.ln_f.backward(self.head.backward(self.saved["dlogits"]))
        for block in reversed(self.blocks):
            dx = block.backward(dx)
        pos = self.wpe.saved["idx"]
        self.wpe.backward(dx.sum(axis=0) if pos.ndim == 1 else dx)
        self.wte.backward(dx)

    def saved_bytes(self) -> dict:
        """Bytes kept for the backward by the last forward: {"attention": the inner
        attentions' (q, k, v and P, or q, k, v, O and lse), "other": every other layer's}."""
        inner = {id(a) for a in self.attention_layers()}
        parts = {"attention": 0, "other": 0}
        for leaf in leaves(self):
            parts["attention" if id(leaf) in inner else "other"] += leaf.saved_bytes()
        return parts


@dataclass
class History:
    """Per step: loss (nats per token), seconds of the whole step and of the attention
    forward + backward (host time, `time.perf_counter`)."""

    loss: list
    step_s: list
    attention_s: list


def document_positions(cu_seqlens, t: int) -> np.ndarray:
    """Position ids: (T,) 0..T-1 without documents; (B, T) with cu_seqlens (a checked
    list of B arrays), restarting at 0 where each document starts."""
    if cu_seqlens is None:
        return np.arange(t)
    return np.stack([np.arange(t) - np.repeat(c[:-1], np.diff(c)) for c in cu_seqlens])


def train(model: GPT, ids=None, *, steps: int, batch: int = 16, lr: float = 3e-3,
          seed: int = 1, clip: float = 1.0, weight_decay: float = 0.1,
          log_every: int = 0, documents=None) -> History:
    """AdamW on `steps` random batches of `ids` (windows of the model's block_size), or,
    given `documents` instead (a list of 1-D id arrays), of packed rows
    (`text.get_packed_batch`); `seed` fixes the batches, so two models trained with one
    seed see the same text."""
    steps = check_block(steps, "steps")
    if (ids is None) == (documents is None):
        raise ValueError("train needs either ids (random windows of one text) or "
                         "documents= (packed rows), not both and not neither")
    rng = np.random.default_rng(seed)
    opt = AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    hist = History([], [], [])
    for step in range(steps):
        t0 = time.perf_counter()
        att0 = _attention_seconds(model)
        if documents is None:
            x, y = get_batch(ids, batch, model.cfg.block_size, rng)
            cu = None
        else:
            x, y, cu = get_packed_batch(documents, batch, model.cfg.block_size, rng)
        model.zero_grad()
        _, loss = model.forward(x, y, cu)
        model.backward()
        clip_grad_norm([g for _, _, g in opt.params], clip)
        opt.step()
        hist.loss.append(loss)
        hist.step_s.append(time.perf_counter() - t0)
        hist.attention_s.append(_attention_seconds(model) - att0)
        if log_every and (step % log_every == 0 or step == steps - 1):
            print(f"step {step:4d}  loss {loss:.4f}  {hist.step_s[-1] * 1e3:6.1f} ms")
    return hist


def _attention_seconds(model: GPT) -> float:
    return sum(sum(a.seconds.values()) for a in model.attention_layers())


def generate(model: GPT, prompt_ids, n_new: int, *, seed: int = 0,
             temperature: float = 1.0) -> np.ndarray:
    """Extend prompt_ids (1-D) by n_new ids sampled one at a time from the model's
    next-character distribution (softmax(logits / temperature)); the context is the last
    block_size ids."""
    if not temperature > 0:
        raise ValueError(f"temperature must be positive, got {temperature!r}")
    rng = np.random.default_rng(seed)
    ids = list(np.asarray(prompt_ids, dtype=np.int64))
    if not ids:
        raise ValueError("prompt_ids must hold at least one token id")
    for _ in range(n_new):
        ctx = np.array(ids[-model.cfg.block_size:])[None]                   # (1, T)
        logits, _ = model.forward(ctx)
        z = logits[0, -1].astype(np.float64) / temperature                  # (V,)
        p = np.exp(z - z.max())
        ids.append(int(rng.choice(len(p), p=p / p.sum())))
    return np.array(ids)
