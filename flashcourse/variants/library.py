"""The built-in variants: each a few lines of Python returning a mask_mod or a score_mod.

Masks, mask_mod(b, h, q_idx, kv_idx) -> bool (True: the query sees the key):

    causal            kv_idx <= q_idx + off; off = Tk - Tq (align="bottom-right", this
                      course and FlashAttention 2.1+) or 0 (align="top-left", PyTorch's
                      is_causal=True); `flashcourse.geometry.causal_mask` draws both
    sliding_window    causal and at most `window` keys back: 0 <= (q_idx + off) - kv_idx
                      <= window, so a row sees window + 1 keys (FlashAttention's
                      window_size=(window, 0)); symmetric=True: |(q_idx + off) - kv_idx|
                      <= window, 2 window + 1 keys (window_size=(window, window))
    document          packed sequences: the query and the key belong to the same
                      document, documents given by cu_seqlens = [0, end_1, ..., T]
    prefix_lm         every query sees the first `prefix` keys, and the rest causally
    random_block_sparse  a random pattern of (block_q, block_k) blocks, each visible
                      with probability `density` (tiles of that size are full or empty)

Scores, score_mod(score, b, h, q_idx, kv_idx) -> score, each with its derivative
attached (`mods.with_grad`), for the backward:

    alibi             score + slopes[h] (kv_idx - q_idx)         (d/dscore = 1)
    softcap           cap tanh(score / cap)                      (d/dscore = 1 - tanh^2)

Attention sinks and grouped-query attention are not functions of one score: sinks are
the `sinks` argument of every variants forward and backward (one logit per query head
that joins each row's softmax sum and adds no value), GQA is k and v with fewer heads.

A mask that needs the lengths (bottom-right alignment, documents) records them in the
attribute `seq_lengths`, and one that indexes per-head data records `num_heads`:
`mods.check_fits` compares them with the inputs, so a mask built for other lengths is a
clear error, not an index past the end of an array.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .._checks import check_block, check_choice, check_whole
from ..geometry import CAUSAL_ALIGNMENTS, causal_offset
from .mods import with_grad


def _offset(align, t_query, t_key) -> int:
    check_choice(align, "align", CAUSAL_ALIGNMENTS)
    if align == "top-left":
        return 0
    if t_query is None or t_key is None:
        raise ValueError("align='bottom-right' needs t_query and t_key (the offset is "
                         "Tk - Tq); pass them, or align='top-left'")
    return causal_offset(check_block(t_query, "t_query"), check_block(t_key, "t_key"))


def _lengths(fn, t_query, t_key):
    if t_query is not None and t_key is not None:
        fn.seq_lengths = (int(t_query), int(t_key))
    return fn


def causal(t_query: int | None = None, t_key: int | None = None, *,
           align: str = "bottom-right"):
    """The causal mask: query i sees key j iff j <= i + off (off = Tk - Tq, or 0 for
    align='top-left')."""
    off = _offset(align, t_query, t_key)

    def causal_mask(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + off
    return _lengths(causal_mask, t_query, t_key)


def sliding_window(window: int, t_query: int | None = None, t_key: int | None = None, *,
                   align: str = "bottom-right", symmetric: bool = False):
    """Local attention: a query sees itself and the `window` keys before it (symmetric:
    and the `window` keys after it too). window >= 0 positions."""
    w = check_whole(window, "window", meaning="keys seen before the query's own position")
    off = _offset(align, t_query, t_key)
    if symmetric:
        def symmetric_window(b, h, q_idx, kv_idx):
            dist = q_idx + off - kv_idx
            return (dist <= w) & (dist >= -w)
        return _lengths(symmetric_window, t_query, t_key)

    def left_window(b, h, q_idx, kv_idx):
        dist = q_idx + off - kv_idx
        return (dist >= 0) & (dist <= w)
    return _lengths(left_window, t_query, t_key)


def check_cu_seqlens(cu_seqlens, name: str = "cu_seqlens", total: int | None = None):
    """cu_seqlens as an int64 array [0, end_1, ..., T], strictly increasing (ValueError
    naming `name` otherwise); `total`: the T it must end at."""
    a = np.asarray(cu_seqlens)
    if a.ndim != 1 or a.size < 2 or a.dtype.kind not in "iu":
        raise ValueError(f"{name} must be a 1-D integer array [0, end_1, ..., T] of at least "
                         f"2 entries, got dtype {a.dtype} and shape {a.shape}")
    a = a.astype(np.int64)
    if a[0] != 0 or np.any(np.diff(a) <= 0):
        raise ValueError(f"{name} must start at 0 and be strictly increasing (each document "
                         f"has at least one position), got {a.tolist()[:8]}"
                         f"{' ...' if a.size > 8 else ''}")
    if total is not None and a[-1] != total:
        raise ValueError(f"{name} must end at the sequence length T = {total}, "
                         f"got {int(a[-1])}")
    return a


def document_ids(cu_seqlens) -> np.ndarray:
    """(T,) int64: the document of each position, from cu_seqlens [0, ..., T]."""
    a = check_cu_seqlens(cu_seqlens)
    return np.repeat(np.arange(a.size - 1), np.diff(a))


def document(cu_seqlens, cu_seqlens_k=None):
    """Packed sequences: query i sees key j iff they belong to the same document.
    cu_seqlens: [0, end_1, ..., Tq] (also the keys' unless cu_seqlens_k is given,
    [0, ..., Tk], with as many documents). Combine with `causal` (mods.and_masks) for
    causal attention inside each document."""
    q_doc = document_ids(cu_seqlens)
    kv_doc = q_doc if cu_seqlens_k is None else document_ids(cu_seqlens_k)
    if q_doc[-1] != kv_doc[-1]:
        raise ValueError(f"cu_seqlens_k must hold as many documents as cu_seqlens, got "
                         f"{int(kv_doc[-1]) + 1} and {int(q_doc[-1]) + 1}")

    def document_mask(b, h, q_idx, kv_idx):
        return q_doc[q_idx] == kv_doc[kv_idx]
    document_mask.seq_lengths = (q_doc.size, kv_doc.size)
    return document_mask


def prefix_lm(prefix: int, t_query: int | None = None, t_key: int | None = None, *,
              align: str = "bottom-right"):
    """Prefix-LM: every query sees the first `prefix` keys (a bidirectional prefix, the
    prompt), and the other keys causally."""
    n = check_whole(prefix, "prefix", meaning="keys every query sees")
    off = _offset(align, t_query, t_key)

    def prefix_lm_mask(b, h, q_idx, kv_idx):
        return (kv_idx < n) | (kv_idx <= q_idx + off)
    return _lengths(prefix_lm_mask, t_query, t_key)


#: The most blocks `random_block_sparse` draws (a (Tr, Tc) boolean table).
MAX_RANDOM_BLOCKS = 1 << 26


def random_block_sparse(t_query: int, t_key: int, block_q: int, block_k: int, *,
                        density: float = 0.5, seed: int = 0):
    """Each (block_q, block_k) block of the (Tq, Tk) grid is visible with probability
    `density` (0..1), drawn once from `seed` (a whole number >= 0). At most
    MAX_RANDOM_BLOCKS = 2**26 blocks: an error naming t_query and t_key beyond."""
    tq, tk, br, bc = (check_block(x, n) for x, n in ((t_query, "t_query"),
                      (t_key, "t_key"), (block_q, "block_q"), (block_k, "block_k")))
    if isinstance(density, bool) or not isinstance(density, numbers.Real) \
            or not 0.0 <= density <= 1.0:
        raise ValueError(f"density must be a number from 0 to 1, got {density!r}")
    seed = check_whole(seed, "seed")
    if -(-tq // br) * -(-tk // bc) > MAX_RANDOM_BLOCKS:
        raise ValueError(f"t_query and t_key cut into block_q x block_k blocks give "
                         f"{-(-tq // br) * -(-tk // bc):,} blocks, more than the "
                         f"{MAX_RANDOM_BLOCKS:,} drawn here: use larger blocks or shorter "
                         f"sequences")
    rng = np.random.default_rng(seed)
    blocks = rng.random((-(-tq // br), -(-tk // bc))) < density          # (Tr, Tc)

    def block_sparse_mask(b, h, q_idx, kv_idx):
        return blocks[q_idx // br, kv_idx // bc]
    block_sparse_mask.seq_lengths = (tq, tk)
    return block_sparse_mask


# ---------------------------------------------------------------------------
# score_mods
# ---------------------------------------------------------------------------

#: The most heads `alibi_slopes` makes slopes for.
MAX_ALIBI_HEADS = 1 << 16


def alibi_slopes(num_heads: int) -> np.ndarray:
    """(H,) float64 ALiBi slopes (Press et al. 2022): for H a power of two the geometric
    sequence 2^(-8/H), 2^(-16/H), ..., 2^-8; otherwise those of the power of two below H,
    then every other slope of twice that power (the authors' code). num_heads: a whole
    number from 1 to MAX_ALIBI_HEADS = 65,536 (an error naming it otherwise)."""
    n = check_block(num_heads, "num_heads")
    if n > MAX_ALIBI_HEADS:
        raise ValueError(f"num_heads must be at most {MAX_ALIBI_HEADS:,}, got {n:,}")

    def power_of_two(p):
        start = 2.0 ** (-8.0 / p)
        return [start ** (i + 1) for i in range(p)]
    p = 2 ** int(math.floor(math.log2(n)))
    slopes = power_of_two(p) + power_of_two(2 * p)[0::2][: n - p]
    return np.array(slopes, dtype=np.float64)


def alibi(slopes):
    """ALiBi: score + slopes[h] (kv_idx - q_idx), a penalty linear in the distance
    (for causal pairs kv_idx <= q_idx, with positive slopes, the bias is <= 0)."""
    m = np.asarray(slopes, dtype=np.float64)
    if m.ndim != 1 or m.size == 0 or not np.isfinite(m).all():
        raise ValueError(f"slopes must be a 1-D finite array with one slope per query head, "
                         f"got shape {m.shape}")

    def alibi_score(score, b, h, q_idx, kv_idx):
        return score + m[h] * (kv_idx - q_idx)

    def alibi_grad(score, b, h, q_idx, kv_idx):
        return 1.0 + 0.0 * score
    alibi_score.num_heads = m.size
    return with_grad(alibi_score, alibi_grad)


def softcap(cap: float):
    """Tanh soft-capping (Gemma 2, Grok): cap tanh(score / cap), every score squeezed into
    (-cap, cap) before the softmax. cap > 0.

    The cap (and the 1 of the derivative) are float32 constants: a compiled kernel then
    computes score / cap and tanh in the scores' own float32, where a Python float (a
    float64 to Numba) would promote them to float64. On float64 scores (the reference)
    numpy promotes the constants instead, so the reference stays float64; cap is rounded
    to float32 once, the same value on every path."""
    if isinstance(cap, bool) or not isinstance(cap, numbers.Real) or not (
            math.isfinite(cap) and 0 < cap <= np.finfo(np.float32).max):
        raise ValueError(f"cap must be a finite number > 0 (at most float32's largest, "
                         f"3.4e38), got {cap!r}")
    c = np.float32(cap)
    one = np.float32(1.0)

    def softcap_score(score, b, h, q_idx, kv_idx):
        return c * np.tanh(score / c)

    def softcap_grad(score, b, h, q_idx, kv_idx):
        t = np.tanh(score / c)
        return one - t * t
    return with_grad(softcap_score, softcap_grad)
