"""Standard attention as the FlashAttention paper's Algorithm 0: three passes through HBM.

    1. read Q, K from outer memory, compute S = scale * Q K^T,  write S   (Tq, Tk)
    2. read S, compute P = softmax(S) row by row,               write P   (Tq, Tk)
    3. read P, V, compute O = P V,                              write O   (Tq, d)

S and P are *materialised*: stored in outer memory in the input dtype (e bytes per
score by default), which is exactly the Tq x Tk intermediate that tiled attention
avoids. Arithmetic accumulates in float32 for float16/float32 inputs (float64 for
float64), like a GPU's tensor cores, but every pass rounds its result to the
storage dtype before the next pass reads it.

Pass a `flashcourse.counter.TrafficCounter` as `counter=` to count the bytes of
each pass; they equal `flashcourse.traffic.dense_traffic` per head, to the byte:

    reads  = (Tq + 2 Tk) d e + 2 Tq Tk s          writes = 2 Tq Tk s + Tq d e

The numerical result is identical with or without a counter.
"""

from __future__ import annotations

import numpy as np

from ._checks import flatten_heads
from ._guards import forward_result
from .counter import check_counter
from .geometry import visible_mask


def forward(q, k, v, *, causal: bool = False, scale: float | None = None, counter=None,
            allow_nonfinite: bool = False):
    """Dense attention through materialised S and P (Algorithm 0).

    Args:
        q: (..., Tq, d) float16/32/64; k, v: (..., Tk, d), same leading dims and dtype.
        causal: bottom-right aligned mask (query i sees key j iff j <= i + Tk - Tq).
            The full Tq x Tk rectangle is still stored, as a dense kernel does.
        scale: score scale, default 1/sqrt(d).
        counter: optional TrafficCounter; S and P are counted with kind "score"
            (s = counter.bytes_per_score, default e), Q/K/V/O with kind "element".
        allow_nonfinite: accept NaN/inf inputs. A row that sees a NaN or inf (in its
            q row or in a k, v row it sees) gets o = NaN and lse = NaN, and so does a
            row that a masked NaN/inf of v reaches through P V (0 * NaN = NaN).

    Returns:
        o:   (..., Tq, d) in the input dtype.
        lse: (..., Tq) natural-log logsumexp per row, float32 (float64 for float64
             input); -inf (and o = 0) for a row with no visible key. Algorithm 0
             does not store lse: it is a by-product of pass 2 (the row max m and
             sum l), returned for parity with the tiled forward and NOT counted.
             A kernel that also stored it for the backward pass would write 4 Tq
             more bytes per head.

    Raises:
        FloatingPointError: a finite score overflows the storage dtype (float16
            holds |S| <= 65504): Algorithm 0 cannot store it; use a wider dtype.
        ValueError: a row with finite inputs that sees keys got a non-finite result:
            the scores overflow the compute type (`flashcourse._guards`).
    """
    x = flatten_heads(q, k, v, causal=causal, scale=scale, allow_nonfinite=allow_nonfinite)
    counter = check_counter(counter)
    counter.bind(x.dtype.itemsize)
    mask = visible_mask(x.tq, x.tk, x.causal)                   # (Tq, Tk)
    o = np.empty(x.q.shape, dtype=x.dtype)                      # (BH, Tq, d)
    lse = np.empty((x.bh, x.tq), dtype=x.acc_dtype)             # (BH, Tq)
    for h in range(x.bh):
        o[h], lse[h] = _one_head(x.q[h], x.k[h], x.v[h], mask, x.scale, x.acc_dtype,
                                 counter, h)
    return forward_result(q, k, v, x.unflatten(o), x.unflatten(lse), x.causal,
                          compute=x.acc_dtype.name, allow_nonfinite=allow_nonfinite,
                          scale=x.scale)


def _one_head(q, k, v, mask, scale, acc_t, counter, h):
    tq, d = q.shape
    tk = k.shape[0]
    store_t = q.dtype                                           # S, P stored like the input

    # Pass 1: read Q, K; S = scale Q K^T; write S (Tq x Tk scores) to outer memory.
    counter.read("Q", tq * d, head=h, rows=(0, tq))
    counter.read("K", tk * d, head=h, rows=(0, tk))
    s = scale * (q.astype(acc_t) @ k.astype(acc_t).T)           # (Tq, Tk)
    s = np.where(mask, s, -np.inf)
    with np.errstate(over="ignore"):
        s_hbm = s.astype(store_t)                               # (Tq, Tk) materialised S
    overflow = np.isinf(s_hbm) & np.isfinite(s)
    if overflow.any():
        raise FloatingPointError(
            f"a score of magnitude {np.abs(s[overflow]).max():.4g} overflows {store_t} "
            f"storage of S (max {np.finfo(store_t).max:.4g}); the dense path stores S in "
            f"the input dtype: use float32 inputs or a smaller scale")
    counter.write("S", tq * tk, kind="score", head=h, rows=(0, tq))

    # Pass 2: read S; P = softmax(S) row by row; write P (Tq x Tk probabilities).
    counter.read("S", tq * tk, kind="score", head=h, rows=(0, tq))
    s = s_hbm.astype(acc_t)                                     # (Tq, Tk)
    m = s.max(axis=1)                                           # (Tq,) row max
    m_safe = np.where(np.isneginf(m), 0, m)                     # rows with no visible key
    p = np.exp(s - m_safe[:, None])                             # (Tq, Tk), 0 where masked
    l = p.sum(axis=1)                                           # (Tq,) row sum
    seen = l > 0
    p = p / np.where(seen, l, 1)[:, None]
    p_hbm = p.astype(store_t)                                   # (Tq, Tk) materialised P
    with np.errstate(divide="ignore"):
        lse = np.where(seen, m_safe + np.log(np.where(seen, l, 1)), -np.inf).astype(acc_t)
    counter.write("P", tq * tk, kind="score", head=h, rows=(0, tq))

    # Pass 3: read P, V; O = P V; write O.
    counter.read("P", tq * tk, kind="score", head=h, rows=(0, tq))
    counter.read("V", tk * d, head=h, rows=(0, tk))
    o = (p_hbm.astype(acc_t) @ v.astype(acc_t)).astype(store_t)   # (Tq, d)
    counter.write("O", tq * d, head=h, rows=(0, tq))
    return o, lse
