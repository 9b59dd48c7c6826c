"""Flash-Decoding in numpy: one new query against a long KV cache, split over the keys.

The regime
    At inference a model generates one token at a time. Each new token brings Tq = 1
    query per head (a few with speculative decoding) that attends to the Tk keys and
    values of every earlier token, kept in the *KV cache*. Tk is in the thousands to
    hundreds of thousands. The FlashAttention-2 grid launches one thread block per
    (query block, head): B x H blocks here, far fewer than the GPU's SMs.

The idea (Dao, Haziza, Massa, Sizov, "Flash-Decoding for long-context inference", 2023)
    Cut the keys into `num_splits` contiguous splits. Each split runs the ordinary
    online-softmax loop over its own key tiles and returns a *partial state*:

        o_s   (B, Hq, Tq, d)   softmax(S restricted to the split) V, normalised
        lse_s (B, Hq, Tq)      log-sum-exp of the split's scores (natural log)

    The splits are independent, so B x Hkv x num_splits blocks can run at once. A
    small second step combines them with the merge rule of notebook 02
    (`flashcourse.reference.merge_states`): a split's state is (m, l) = (lse_s, 1)
    with its output o_s carried along, and merging two states gives

        lse = log(e^lse_a + e^lse_b)
        o   = e^(lse_a - lse) o_a + e^(lse_b - lse) o_b

    Merging is associative and commutative, so the states may be merged pairwise in
    a tree (`merge_tree`) or all at once (`combine`: lse = max + log sum e^(lse_s - max),
    the form the GPU's combine kernel uses); every order gives the same result up to
    rounding. An empty split (no key, or all its keys hidden by the causal mask) has
    lse_s = -inf and o_s = 0 and drops out of the merge.

Grouped-query attention (GQA)
    Hq query heads share Hkv key/value heads, G = Hq / Hkv query heads per group
    (Ainslie et al., 2023). Hq == Hkv is ordinary multi-head attention, Hkv == 1
    multi-query attention (Shazeer, 2019). Query head h reads KV head h // G. Any
    other ratio is an error, never a silent broadcast. Here every split handles all
    G x Tq query rows of its KV head together, so K and V are read once per group.

Shapes: q (B, Hq, Tq, d); k, v (B, Hkv, Tk, d); o (B, Hq, Tq, d); lse (B, Hq, Tq).
Causal masking is bottom-right aligned as everywhere in the course: query i sees key
j iff j <= i + Tk - Tq; a row with no visible key gives o = 0 and lse = -inf.

The number of splits
    `num_splits=None` picks it as FlashAttention-2 does (`num_splits_heuristic`,
    copied in logic from csrc/flash_attn/flash_api.cpp, v2.x): if the B x H x
    (query blocks) thread blocks already fill 80% of the SMs, one split; otherwise
    the smallest number of splits whose "wave efficiency" (blocks / SMs divided by
    its ceiling, so a partly empty last wave counts against it) reaches 85% of the
    best, never more than 128 splits, the SMs or the key blocks. FlashAttention
    passes twice the SM count (two of its 128-thread blocks fit on an SM);
    `choose_num_splits` takes that factor as `blocks_per_sm`.
"""

from __future__ import annotations

import math

import numpy as np

from ._checks import (accumulator_dtype, check_array, check_block, check_bool, check_causal,
                      check_not_subclass, check_scale, check_whole)
from ._guards import dense_memory_limit, forward_result
from .geometry import ceil_div, visible_mask

#: FlashAttention-2's cap on the number of splits (flash_api.cpp: num_splits <= 128).
MAX_SPLITS = 128
#: Streaming multiprocessors of the H200 (and H100 SXM): the default for the heuristic.
DEFAULT_SMS = 132


# ---------------------------------------------------------------------------------------
# Shapes and validation
# ---------------------------------------------------------------------------------------

def check_gqa(q, k, v, *, allow_nonfinite: bool = False):
    """Validate q (B, Hq, Tq, d), k and v (B, Hkv, Tk, d) for grouped-query attention.

    Returns (q, k, v, group) with group G = Hq // Hkv. Raises TypeError/ValueError that
    names the argument: not a float array, not 4-D, batch or d or dtype mismatch, k and
    v of different shapes, or Hq not a multiple of Hkv.
    """
    q = check_array(q, "q", allow_nonfinite=allow_nonfinite)
    k = check_array(k, "k", allow_nonfinite=allow_nonfinite)
    v = check_array(v, "v", allow_nonfinite=allow_nonfinite)
    for name, x, what in (("q", q, "(B, Hq, Tq, d)"), ("k", k, "(B, Hkv, Tk, d)"),
                          ("v", v, "(B, Hkv, Tk, d)")):
        if x.ndim != 4:
            raise ValueError(f"{name} must have 4 dimensions {what}, got shape {x.shape}")
    if k.shape != v.shape:
        raise ValueError(f"v must have the shape of k (B, Hkv, Tk, d), got k {k.shape} "
                         f"and v {v.shape}")
    if q.shape[0] != k.shape[0]:
        raise ValueError(f"q and k must have the same batch size B, got q B={q.shape[0]} "
                         f"and k B={k.shape[0]}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"head dim d of q and k must match, got q d={q.shape[-1]} and "
                         f"k d={k.shape[-1]}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must share one dtype, got q {q.dtype}, k {k.dtype}, "
                        f"v {v.dtype}")
    hq, hkv = q.shape[1], k.shape[1]
    if hq % hkv:
        raise ValueError(
            f"the query heads Hq = q.shape[1] = {hq} must be a multiple of the key/value "
            f"heads Hkv = k.shape[1] = {hkv} (grouped-query attention: each KV head serves "
            f"Hq / Hkv query heads); nothing is broadcast")
    return q, k, v, hq // hkv


def expand_kv(x: np.ndarray, group: int) -> np.ndarray:
    """(B, Hkv, Tk, d) -> (B, Hkv * group, Tk, d): KV head h copied to query heads
    h*group .. h*group + group - 1. A copy, for checking against the dense reference
    only: the decode paths never copy K or V. x: a float16/32/64 array of 4 dimensions
    (NaN/inf are copied as they are), group: a positive integer; else an error naming x
    or group (MemoryError for a copy larger than the dense reference's limit)."""
    x = check_array(x, "x", allow_nonfinite=True)
    if x.ndim != 4:
        raise ValueError(f"x must have 4 dimensions (B, Hkv, Tk, d), got shape {x.shape}")
    group = check_block(group, "group")
    if x.nbytes * group > dense_memory_limit():
        raise MemoryError(f"group = {group:,} copies of x ({x.nbytes:,} bytes) exceed the "
                          f"{dense_memory_limit():,} bytes allowed (half the memory; "
                          f"FLASHCOURSE_DENSE_MAX_BYTES changes it)")
    return np.repeat(x, group, axis=1)


# ---------------------------------------------------------------------------------------
# How many splits
# ---------------------------------------------------------------------------------------

def num_splits_heuristic(work_blocks: int, num_sms: int, num_n_blocks: int,
                         max_splits: int = MAX_SPLITS) -> int:
    """FlashAttention-2's rule for the number of key splits (flash_api.cpp, v2.x).

    Args:
        work_blocks: thread blocks without splitting, B x H x ceil(Tq / 64) in FA2.
        num_sms: the SMs to fill (FA2 passes 2 x SM count: 2 blocks fit on an SM).
        num_n_blocks: key blocks, ceil(Tk / block_n).
        max_splits: upper bound (128 in FA2).

    Rule: if work_blocks >= 0.8 num_sms, 1. Otherwise, for s = 1 .. min(max_splits,
    num_sms, num_n_blocks), the wave efficiency eff(s) = w / ceil(w) with
    w = work_blocks * s / num_sms; a split count is skipped when it gives the same
    blocks per split as s - 1 (it would leave a split empty). Return the smallest s
    with eff(s) >= 0.85 max eff.

    >>> num_splits_heuristic(8, 264, 512)     # B x H = 8, Tk = 65536, d = 128 on an H200
    29
    """
    work_blocks = check_block(work_blocks, "work_blocks")
    num_sms = check_block(num_sms, "num_sms")
    num_n_blocks = check_block(num_n_blocks, "num_n_blocks")
    max_splits = check_block(max_splits, "max_splits")
    if work_blocks >= 0.8 * num_sms:
        return 1
    max_splits = min(max_splits, num_sms, num_n_blocks)

    def eligible(s):
        return s == 1 or -(-num_n_blocks // s) != -(-num_n_blocks // (s - 1))

    eff = {}
    for s in range(1, max_splits + 1):
        if eligible(s):
            waves = work_blocks * s / num_sms
            eff[s] = waves / math.ceil(waves)
    best = max(eff.values())
    for s in range(1, max_splits + 1):
        if s in eff and eff[s] >= 0.85 * best:
            return s
    return 1


def choose_num_splits(batch_heads_kv: int, t_key: int, block_k: int, *, row_blocks: int = 1,
                      sms: int = DEFAULT_SMS, blocks_per_sm: int = 2,
                      max_splits: int = MAX_SPLITS) -> int:
    """Splits for B x Hkv KV heads of Tk keys cut into block_k tiles (FA2's heuristic).

    `row_blocks` thread blocks per KV head before splitting (1 when all G x Tq query
    rows of a group fit in one block); `blocks_per_sm` resident blocks per SM
    (FlashAttention-2 hard-codes 2 for its 128-thread blocks).
    """
    n_blocks = -(-check_block(t_key, "t_key") // check_block(block_k, "block_k"))
    return num_splits_heuristic(check_block(batch_heads_kv, "batch_heads_kv")
                                * check_block(row_blocks, "row_blocks"),
                                check_block(sms, "sms") * check_block(blocks_per_sm,
                                                                      "blocks_per_sm"),
                                n_blocks, max_splits)


def check_num_splits(num_splits, t_key: int, block_k: int) -> int:
    """`num_splits` as an int in [1, min(Tc, MAX_SPLITS)], Tc = ceil(Tk / block_k).

    Each split takes whole blocks of block_k keys, so at most Tc splits can hold a
    key; MAX_SPLITS (128) is FlashAttention-2's cap. TypeError for a non-integer,
    ValueError naming num_splits, Tc and how it is computed otherwise (checked before
    any work: 10**7 splits would otherwise run for a minute and fail in numpy).
    """
    ns = check_block(num_splits, "num_splits")
    tk, bk = check_block(t_key, "t_key"), check_block(block_k, "block_k")
    n_blocks = ceil_div(tk, bk)                              # Tc key blocks
    if ns > n_blocks:
        raise ValueError(
            f"num_splits = {ns:,} is more than the key blocks: Tc = ceil(Tk / block_k) = "
            f"ceil({tk:,} / {bk}) = {n_blocks:,}, and each split takes whole key blocks, "
            f"so at most {n_blocks:,} splits can hold a key. Pass num_splits <= "
            f"{min(n_blocks, MAX_SPLITS):,}, a smaller block_k, or None (the heuristic)")
    if ns > MAX_SPLITS:
        raise ValueError(
            f"num_splits = {ns:,} is more than MAX_SPLITS = {MAX_SPLITS} (FlashAttention-2's "
            f"cap; the combine step reads every split per row). Pass num_splits <= "
            f"{MAX_SPLITS}, or None (the heuristic)")
    return ns


def split_bounds(t_key: int, block_k: int, num_splits: int) -> list:
    """[(k0, k1), ...]: the key range of each split, as FlashAttention cuts it.

    Each split takes ceil(Tc / num_splits) whole key blocks of block_k keys
    (Tc = ceil(Tk / block_k)); the last non-empty split may be ragged, and splits past
    the end are empty (k0 == k1 == Tk: 4 splits of 5 blocks take 2, 2, 1 and 0 blocks).
    num_splits must be at most min(Tc, MAX_SPLITS) (`check_num_splits`).

    >>> split_bounds(300, 64, 3)
    [(0, 128), (128, 256), (256, 300)]
    """
    tk = check_block(t_key, "t_key")
    bk = check_block(block_k, "block_k")
    ns = check_num_splits(num_splits, tk, bk)
    n_blocks = ceil_div(tk, bk)                           # Tc key blocks
    per = -(-n_blocks // ns) * bk                          # keys per split
    return [(min(s * per, tk), min((s + 1) * per, tk)) for s in range(ns)]


# ---------------------------------------------------------------------------------------
# One split: the online softmax over its key tiles
# ---------------------------------------------------------------------------------------

def _exp_diff(a, b):
    """exp(a - b) with exp(-inf - (-inf)) taken as 0 (nothing visible yet)."""
    with np.errstate(invalid="ignore"):
        diff = a - b
    return np.exp(np.where(np.isnan(diff), -np.inf, diff))


def split_partial(q, k, v, k0: int, k1: int, *, block_k: int = 64, causal: bool = False,
                  scale: float | None = None):
    """The partial state (o_s, lse_s) of keys [k0, k1) for every query row.

    q (B, Hq, Tq, d); k, v (B, Hkv, Tk, d) as `check_gqa` takes them (an error naming
    q, k or v otherwise); 0 <= k0 <= k1 <= Tk (an error naming k0 or k1). The keys
    of the split are visited block_k at a time with the online softmax of notebook 03;
    all G x Tq query rows of a KV head are handled together, K and V are not copied.

    Returns o_s (B, Hq, Tq, d) and lse_s (B, Hq, Tq) in the accumulator dtype (float64
    for float64 input, else float32); an empty split gives o_s = 0, lse_s = -inf.
    """
    q, k, v, _ = check_gqa(q, k, v)
    tk = k.shape[2]
    k0 = check_whole(k0, "k0", meaning="the split's first key")
    k1 = check_whole(k1, "k1", least=k0, meaning="the key after the split's last, >= k0")
    if k1 > tk:
        raise ValueError(f"k1 must be at most Tk = k.shape[2] = {tk}, got {k1}")
    return _split_partial(q, k, v, k0, k1, block_k=check_block(block_k, "block_k"),
                          causal=causal, scale=scale)


def _split_partial(q, k, v, k0: int, k1: int, *, block_k: int, causal: bool, scale):
    """`split_partial` on inputs already checked."""
    b, hq, tq, d = q.shape
    hkv, tk = k.shape[1], k.shape[2]
    g = hq // hkv
    scale = check_scale(scale, d)
    causal = check_causal(causal)
    acc_t = accumulator_dtype(q.dtype)
    qg = q.reshape(b, hkv, g, tq, d).astype(acc_t)           # (B, Hkv, G, Tq, d)
    m = np.full((b, hkv, g, tq), -np.inf, acc_t)             # running max
    l = np.zeros((b, hkv, g, tq), acc_t)                     # running sum of exp(s - m)
    acc = np.zeros((b, hkv, g, tq, d), acc_t)                # unnormalised output
    for j0 in range(k0, k1, block_k):
        j1 = min(j0 + block_k, k1)
        kj = k[:, :, j0:j1].astype(acc_t)                    # (B, Hkv, Bc, d)
        vj = v[:, :, j0:j1].astype(acc_t)                    # (B, Hkv, Bc, d)
        s = scale * np.einsum("bhgqd,bhkd->bhgqk", qg, kj)   # (B, Hkv, G, Tq, Bc)
        if causal:
            s = np.where(visible_mask(tq, tk, True, 0, tq, j0, j1), s, -np.inf)
        m_new = np.maximum(m, s.max(axis=-1))                # (B, Hkv, G, Tq)
        alpha = _exp_diff(m, m_new)                          # rescale of the old state
        p = _exp_diff(s, m_new[..., None])                   # (B, Hkv, G, Tq, Bc)
        l = l * alpha + p.sum(axis=-1)
        acc = acc * alpha[..., None] + np.einsum("bhgqk,bhkd->bhgqd", p, vj)
        m = m_new
    empty = l == 0
    o = np.where(empty[..., None], 0, acc / np.where(empty, 1, l)[..., None])
    with np.errstate(divide="ignore"):
        lse = np.where(empty, -np.inf, m + np.log(np.where(empty, 1, l)))
    return (o.reshape(b, hq, tq, d).astype(acc_t, copy=False),
            lse.reshape(b, hq, tq).astype(acc_t, copy=False))


# ---------------------------------------------------------------------------------------
# The combine step: the merge of notebook 02, carried to outputs
# ---------------------------------------------------------------------------------------

def _check_values(x, name: str, *, lse: bool) -> np.ndarray:
    """A partial state's o or lse as a real array without NaN; o finite, lse < +inf (its
    -inf is an empty state). A NaN lse would otherwise weigh 0 and the row come out as
    o = 0, lse = -inf: a row that looks masked."""
    x = np.asarray(check_not_subclass(x, name))
    if x.dtype.kind not in "fiu":
        raise TypeError(f"{name} must hold real numbers (a float array), got dtype "
                        f"{x.dtype}")
    bad = np.isnan(x) | (x == np.inf) if lse else ~np.isfinite(x)
    if bad.any():
        what = "NaN or +inf (-inf, an empty state, is the only non-finite value allowed)" \
            if lse else "NaN or inf"
        raise ValueError(f"{name} contains {what}: merge the states of finite inputs")
    return x


def merge(o_a, lse_a, o_b, lse_b):
    """Merge two partial states of the same rows over disjoint key sets.

    The merge of `flashcourse.reference.merge_states` with each state written as
    (m, l) = (lse, 1) and its normalised output carried along:

        m   = max(lse_a, lse_b)
        w_a = e^(lse_a - m),  w_b = e^(lse_b - m)        (<= 1, one of them is 1)
        lse = m + log(w_a + w_b)
        o   = (w_a o_a + w_b o_b) / (w_a + w_b)

    o_a, o_b: (..., d) of one shape; lse_a, lse_b: (...) = o_a.shape[:-1]. Two empty
    states (-inf) give o = 0, lse = -inf. TypeError for values that are not real
    numbers, ValueError for shapes that do not fit (nothing is broadcast), a NaN or
    inf in o or a NaN or +inf in lse, each naming the argument.
    """
    o_a, lse_a, o_b, lse_b = (_check_values(x, n, lse=n.startswith("lse")) for x, n in
                              ((o_a, "o_a"), (lse_a, "lse_a"), (o_b, "o_b"), (lse_b, "lse_b")))
    if o_a.ndim < 1 or o_a.shape[-1] < 1:
        raise ValueError(f"o_a must have shape (..., d) with d >= 1, got {o_a.shape}")
    if o_b.shape != o_a.shape:
        raise ValueError(f"o_b must have the shape of o_a {o_a.shape}, got {o_b.shape}")
    for name, x in (("lse_a", lse_a), ("lse_b", lse_b)):
        if x.shape != o_a.shape[:-1]:
            raise ValueError(f"{name} must have shape o_a.shape[:-1] = {o_a.shape[:-1]} "
                             f"(one lse per row), got {x.shape}")
    m = np.maximum(lse_a, lse_b)
    w_a, w_b = _exp_diff(lse_a, m), _exp_diff(lse_b, m)
    total = w_a + w_b                                        # >= 1 unless both empty
    empty = total == 0
    safe = np.where(empty, 1, total)
    o = (w_a[..., None] * o_a + w_b[..., None] * o_b) / safe[..., None]
    with np.errstate(divide="ignore"):
        lse = np.where(empty, -np.inf, m + np.log(safe))
    return np.where(empty[..., None], 0, o), lse


def combine(o_parts, lse_parts):
    """All splits at once, as the GPU's combine kernel does.

    o_parts (S, ..., d), lse_parts (S, ...):
        m = max_s lse_s;  w_s = e^(lse_s - m);  lse = m + log sum_s w_s
        o = sum_s w_s o_s / sum_s w_s
    Equal to merging the S states pairwise in any order (up to rounding). ValueError
    naming o_parts or lse_parts for no split at all (S = 0), shapes that do not fit
    together, a NaN or inf in o_parts or a NaN or +inf in lse_parts; TypeError for
    values that are not real numbers.
    """
    return _combine(*check_parts(o_parts, lse_parts))


def _combine(o_parts, lse_parts):
    """`combine` on checked parts (NaN rows of allow_nonfinite inputs stay NaN)."""
    m = lse_parts.max(axis=0)                                # (...)
    w = _exp_diff(lse_parts, m)                              # (S, ...)
    total = w.sum(axis=0)
    empty = total == 0
    safe = np.where(empty, 1, total)
    o = (w[..., None] * o_parts).sum(axis=0) / safe[..., None]
    with np.errstate(divide="ignore"):
        lse = np.where(empty, -np.inf, m + np.log(safe))
    return np.where(empty[..., None], 0, o), lse


def check_parts(o_parts, lse_parts):
    """o_parts (S, ..., d) and lse_parts (S, ...) as numpy arrays, S >= 1 partial states of
    the same rows; else an error naming the argument (nothing is broadcast; a NaN or
    inf in o_parts, a NaN or +inf in lse_parts is a ValueError)."""
    o_parts = _check_values(o_parts, "o_parts", lse=False)
    lse_parts = _check_values(lse_parts, "lse_parts", lse=True)
    if o_parts.ndim < 2 or 0 in o_parts.shape:
        raise ValueError(f"o_parts must have shape (S, ..., d) with at least one partial "
                         f"state (S >= 1) and d >= 1, got shape {o_parts.shape}: pass the "
                         f"stacked outputs of the splits, e.g. np.stack(o_list)")
    if lse_parts.shape != o_parts.shape[:-1]:
        raise ValueError(f"lse_parts must have shape (S, ...) = o_parts.shape[:-1] = "
                         f"{o_parts.shape[:-1]} (one lse per split and row), got "
                         f"{lse_parts.shape}")
    return o_parts, lse_parts


def merge_tree(o_parts, lse_parts, merge_fn=merge):
    """Merge S partial states pairwise, level by level, as a binary tree.

    Returns (o, lse, levels): levels[0] is the list of the S input states, each next
    level merges neighbours (an odd one out moves up unchanged), and the last level
    holds the single result. `merge_fn(o_a, lse_a, o_b, lse_b)` does each merge.
    o_parts (S, ..., d) and lse_parts (S, ...) as `combine` takes them (`check_parts`).
    """
    o_parts, lse_parts = check_parts(o_parts, lse_parts)
    if not callable(merge_fn):
        raise TypeError(f"merge_fn must be a function merge_fn(o_a, lse_a, o_b, lse_b), "
                        f"got {merge_fn!r}")
    level = list(zip(o_parts, lse_parts))
    levels = [level]
    while len(level) > 1:
        nxt = [merge_fn(*level[i], *level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
        levels.append(level)
    return level[0][0], level[0][1], levels


# ---------------------------------------------------------------------------------------
# The whole forward
# ---------------------------------------------------------------------------------------

def split_kv_forward(q, k, v, *, num_splits: int | None = None, block_k: int = 64,
                     causal: bool = False, scale: float | None = None,
                     return_parts: bool = False, allow_nonfinite: bool = False):
    """Exact attention by Flash-Decoding: split the keys, run each split, combine.

    Args:
        q: (B, Hq, Tq, d) float16/32/64 queries (Tq = 1 for one decoding step).
        k, v: (B, Hkv, Tk, d) the KV cache, same dtype; Hq must be a multiple of Hkv.
        num_splits: number of key splits, 1 .. min(Tc, MAX_SPLITS = 128) with
            Tc = ceil(Tk / block_k) the key blocks (a ValueError naming num_splits
            otherwise: `check_num_splits`); None picks it with `choose_num_splits`
            for an H200 (132 SMs).
        block_k: keys per tile (Bc) inside a split, and the unit splits are cut in.
        causal: bottom-right aligned mask (query i sees key j iff j <= i + Tk - Tq).
        scale: score scale, default 1/sqrt(d).
        return_parts: also return the per-split states and bounds.
        allow_nonfinite: accept NaN/inf inputs; a row that sees one (in its q row or
            in a k, v row it sees) gets o = NaN and lse = NaN.

    Returns:
        o (B, Hq, Tq, d) in the input dtype and lse (B, Hq, Tq) float32 (float64 for
        float64 input); with return_parts, also (o_parts (S, B, Hq, Tq, d),
        lse_parts (S, B, Hq, Tq), bounds [(k0, k1), ...]).

    Raises:
        ValueError when a row with finite inputs that sees keys gets a non-finite
        result: the scores overflow the compute type (`flashcourse._guards`).
    """
    q, k, v, g = check_gqa(q, k, v, allow_nonfinite=allow_nonfinite)
    bk = check_block(block_k, "block_k")
    causal = check_causal(causal)
    return_parts = check_bool(return_parts, "return_parts")
    scale = check_scale(scale, q.shape[-1])
    b, hkv, tk = k.shape[0], k.shape[1], k.shape[2]
    if num_splits is None:
        num_splits = choose_num_splits(b * hkv, tk, bk)
    ns = check_num_splits(num_splits, tk, bk)
    bounds = split_bounds(tk, bk, ns)
    parts = [_split_partial(q, k, v, k0, k1, block_k=bk, causal=causal, scale=scale)
             for k0, k1 in bounds]
    o_parts = np.stack([p[0] for p in parts])                # (S, B, Hq, Tq, d)
    lse_parts = np.stack([p[1] for p in parts])              # (S, B, Hq, Tq)
    o, lse = _combine(o_parts, lse_parts)
    o = o.astype(q.dtype)
    lse = lse.astype(accumulator_dtype(q.dtype))
    o, lse = forward_result(q, k, v, o, lse, causal, compute=accumulator_dtype(q.dtype).name,
                            allow_nonfinite=allow_nonfinite, scale=scale, kv_group=g)
    if return_parts:
        return o, lse, (o_parts, lse_parts, bounds)
    return o, lse
