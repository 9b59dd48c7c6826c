"""Tiled forward and backward with a block mask, a score_mod, sinks and GQA, in numpy.

The loops of `flashcourse.tiled` (FlashAttention-2's forward, the backward with
recomputation), driven by a `BlockMask` instead of the causal rule:

    forward, per (b, h, query block i):
      for each key block j in full_kv_indices[b, h, i]:    no mask_mod call
      for each key block j in kv_indices[b, h, i]:         mask_mod on each pair
          S = score_mod(scale Q_i K_j^T), -inf where hidden  (Br, Bc)
          online softmax: m, l, acc as in flashcourse.tiled
      empty key blocks are never visited (K_j, V_j not read)
      the sink joins at the end: m' = max(m, sink), l' = l e^(m - m') + e^(sink - m'),
      acc e^(m - m'); O_i = acc / l', lse_i = m' + log l'

    backward, per (b, kv head, key block j) (dK_j, dV_j stay on chip):
      for each query head of the group, each query block i of q_indices /
      full_q_indices[b, h, j]: P = exp(S - lse), dS = P (dP - D),
      dS_raw = dS * score_mod_grad(S_raw); dQ_i += scale dS_raw K_j,
      dK_j += scale dS_raw^T Q_i, dV_j += P^T dO_i
      dsink_h = -sum_i exp(sink_h - lse_i) D_i,  D_i = dO_i . O_i

The tiles are the block mask's (Br, Bc) = block_mask.block_size. Without a block mask
every tile is full (`block_mask.full_block_mask`, tiles block_q x block_k). A dict passed
as `stats` receives "tiles" (score tiles formed) and "mask_evaluations" (pairs mask_mod
was called on), so skipping can be checked. Rows with nothing visible: o = 0 and
lse = -inf (lse = sink with a sink), as in `variants.reference`.
"""

from __future__ import annotations

import numpy as np

from .._checks import check_block
from ..tiled import _blocks, _safe_exp_diff
from .block_mask import check_block_mask, full_block_mask
from .inputs import Problem, check_grad_inputs, check_inputs, check_result
from .mods import mask_tile, resolve_grad, score_tile

DEFAULT_BLOCK_Q = 64
DEFAULT_BLOCK_K = 64


def prepare(q, k, v, block_mask, score_mod, sinks, scale, block_q, block_k):
    """(Problem, BlockMask) for a variants call: the block mask checked against the
    inputs, or an all-full one of block_q x block_k tiles when there is none."""
    mask_mod = None if block_mask is None else getattr(block_mask, "mask_mod", None)
    p = check_inputs(q, k, v, mask_mod=mask_mod, score_mod=score_mod, sinks=sinks,
                     scale=scale)
    return p, resolve_block_mask(block_mask, p.batch, p.heads, p.tq, p.tk, block_q,
                                 block_k)


def resolve_block_mask(block_mask, batch: int, heads: int, t_query: int, t_key: int,
                       block_q, block_k):
    """The BlockMask a call runs with: `block_mask` checked against inputs of `batch`
    entries, `heads` query heads and (Tq, Tk) (block_q, block_k must then be None or its
    tiles), or without one every tile full, block_q x block_k (default 64 x 64)."""
    if block_mask is None:
        br = check_block(DEFAULT_BLOCK_Q if block_q is None else block_q, "block_q")
        bc = check_block(DEFAULT_BLOCK_K if block_k is None else block_k, "block_k")
        return full_block_mask(t_query, t_key, br, bc)
    bm = check_block_mask(block_mask, batch, heads, t_query, t_key)
    for given, have, name in ((block_q, bm.block_size[0], "block_q"),
                              (block_k, bm.block_size[1], "block_k")):
        if given is not None and given != have:
            raise ValueError(f"{name} = {given} differs from the block mask's tiles "
                             f"{bm.block_size}: leave it out (the block mask sets the tiles)")
    return bm


def new_counts(stats) -> dict:
    """Zeroed counts of tiles formed and mask evaluations; `stats` (a dict, or None) is
    where the caller wants them copied at the end (TypeError for anything else)."""
    if stats is not None and not isinstance(stats, dict):
        raise TypeError(f"stats must be a dict (filled with counts) or None, "
                        f"got {type(stats).__name__}")
    return {"tiles": 0, "mask_evaluations": 0}


def tile_scores(p: Problem, bm, b, h, q_i, k_j, q0, q1, k0, k1, partial, counts, acc_t):
    """(S_raw, S): S_raw = scale Q_i K_j^T and S = score_mod(S_raw) with -inf where the
    mask hides a pair (mask_mod called on a partial tile only), in acc_t (Br, Bc)."""
    counts["tiles"] += 1
    with np.errstate(over="ignore", invalid="ignore"):
        s_raw = (p.scale * (q_i @ k_j.T)).astype(acc_t)                 # (Br, Bc)
    qi, ki = np.arange(q0, q1), np.arange(k0, k1)
    s = s_raw
    if p.score_mod is not None:
        s = score_tile(p.score_mod, s_raw, b, h, qi, ki).astype(acc_t)
    if partial:
        counts["mask_evaluations"] += (q1 - q0) * (k1 - k0)
        s = np.where(mask_tile(bm.mask_mod, b, h, qi, ki), s, -np.inf).astype(acc_t)
    return s_raw, s


def _visits(partial, full):
    """(j, is_partial) pairs: the full key blocks, then the partial ones."""
    return [(int(j), False) for j in full] + [(int(j), True) for j in partial]


def forward(q, k, v, *, block_mask=None, score_mod=None, sinks=None, scale=None,
            block_q: int | None = None, block_k: int | None = None, stats=None):
    """(o, lse): o (B, Hq, Tq, d) in q's dtype, lse (B, Hq, Tq) float32 (float64 for
    float64 input). q (B, Hq, Tq, d); k, v (B, Hkv, Tk, d), Hq a multiple of Hkv;
    block_mask from `create_block_mask` (None: no mask); score_mod as in `mods`;
    sinks (Hq,) or None; scale default 1/sqrt(d)."""
    p, bm = prepare(q, k, v, block_mask, score_mod, sinks, scale, block_q, block_k)
    counts = new_counts(stats)
    acc_t = p.acc_dtype
    br, bc = bm.block_size
    o = np.empty(p.q.shape, p.q.dtype)                                  # (B, Hq, Tq, d)
    lse = np.empty(p.q.shape[:3], acc_t)                                # (B, Hq, Tq)
    for b in range(p.batch):
        for h in range(p.heads):
            kh = h // p.group
            for i, q0, q1 in _blocks(p.tq, br):
                q_i = p.q[b, h, q0:q1].astype(acc_t)                    # (Br, d)
                m = np.full(q1 - q0, -np.inf, acc_t)                    # (Br,)
                l = np.zeros(q1 - q0, acc_t)                            # (Br,)
                acc = np.zeros((q1 - q0, p.d), acc_t)                   # (Br, d)
                for j, partial in _visits(*bm.key_blocks(b, h, i)):
                    k0, k1 = j * bc, min((j + 1) * bc, p.tk)
                    k_j = p.k[b, kh, k0:k1].astype(acc_t)               # (Bc, d)
                    v_j = p.v[b, kh, k0:k1].astype(acc_t)               # (Bc, d)
                    _, s = tile_scores(p, bm, b, h, q_i, k_j, q0, q1, k0, k1, partial,
                                       counts, acc_t)
                    m_new = np.maximum(m, s.max(axis=1))                # (Br,)
                    pt = _safe_exp_diff(s, m_new[:, None])              # (Br, Bc)
                    alpha = _safe_exp_diff(m, m_new)                    # (Br,)
                    l = alpha * l + pt.sum(axis=1)
                    acc = alpha[:, None] * acc + pt @ v_j
                    m = m_new
                if p.sinks is not None:                                 # one more logit
                    sink = acc_t.type(p.sinks[h])
                    m_new = np.maximum(m, sink)
                    alpha = _safe_exp_diff(m, m_new)
                    l = alpha * l + np.exp(sink - m_new)
                    acc = alpha[:, None] * acc
                    m = m_new
                seen = l > 0
                o[b, h, q0:q1] = np.where(seen[:, None],
                                          acc / np.where(seen, l, 1)[:, None], 0)
                with np.errstate(divide="ignore"):
                    lse[b, h, q0:q1] = np.where(seen, m + np.log(np.where(seen, l, 1)),
                                                -np.inf)
    if stats is not None:
        stats.update(counts)
    check_result(o, lse)
    return o, lse


def backward(q, k, v, o, lse, do, *, block_mask=None, score_mod=None, score_mod_grad=None,
             sinks=None, scale=None, block_q: int | None = None, block_k: int | None = None,
             stats=None):
    """(dq, dk, dv, dsinks): shaped like q, k, v in their dtype, dsinks (Hq,) float64 or
    None. o, lse: the forward's for the same arguments; do (B, Hq, Tq, d) = dL/do.
    score_mod_grad: d score_mod / d score (None: the one attached to the built-in)."""
    p, bm = prepare(q, k, v, block_mask, score_mod, sinks, scale, block_q, block_k)
    o, lse, do = check_grad_inputs(p, o, lse, do)
    grad = resolve_grad(score_mod, score_mod_grad)
    counts = new_counts(stats)
    acc_t = p.acc_dtype
    br, bc = bm.block_size
    delta, lse_safe = backward_prologue(p, o, lse, do, acc_t)           # (B, Hq, Tq) each
    dq = np.zeros(p.q.shape, acc_t)
    dk = np.zeros(p.k.shape, acc_t)
    dv = np.zeros(p.v.shape, acc_t)
    for b in range(p.batch):
        for kh in range(p.kv_heads):
            for j, k0, k1 in _blocks(p.tk, bc):
                k_j = p.k[b, kh, k0:k1].astype(acc_t)                   # (Bc, d)
                v_j = p.v[b, kh, k0:k1].astype(acc_t)                   # (Bc, d)
                dk_j = np.zeros((k1 - k0, p.d), acc_t)                  # (Bc, d) on chip
                dv_j = np.zeros((k1 - k0, p.d), acc_t)
                for h in range(kh * p.group, (kh + 1) * p.group):       # the GQA group
                    for i, partial in _visits(*bm.query_blocks(b, h, j)):
                        q0, q1 = i * br, min((i + 1) * br, p.tq)
                        q_i = p.q[b, h, q0:q1].astype(acc_t)            # (Br, d)
                        do_i = do[b, h, q0:q1].astype(acc_t)            # (Br, d)
                        s_raw, s = tile_scores(p, bm, b, h, q_i, k_j, q0, q1, k0, k1,
                                               partial, counts, acc_t)
                        pt = np.exp(s - lse_safe[b, h, q0:q1, None])    # (Br, Bc)
                        dv_j += pt.T @ do_i
                        ds = pt * (do_i @ v_j.T - delta[b, h, q0:q1, None])
                        if grad is not None:
                            g = score_tile(grad, s_raw, b, h, np.arange(q0, q1),
                                           np.arange(k0, k1), "score_mod_grad")
                            ds = np.where(pt > 0, ds * g, 0).astype(acc_t)
                        dq[b, h, q0:q1] += p.scale * (ds @ k_j)
                        dk_j += p.scale * (ds.T @ q_i)
                dk[b, kh, k0:k1] = dk_j
                dv[b, kh, k0:k1] = dv_j
    if stats is not None:
        stats.update(counts)
    return finish_grads(p, (dq, dk, dv), sink_grad(p, lse_safe, delta))


def backward_prologue(p: Problem, o, lse, do, acc_t):
    """(D, lse_safe): D = rowsum(dO * O) (B, Hq, Tq) and lse with -inf (an empty row)
    replaced by +inf, so that exp(S - lse) = 0 there, never NaN."""
    delta = (do.astype(acc_t) * o.astype(acc_t)).sum(axis=-1)           # (B, Hq, Tq)
    lse_a = lse.astype(acc_t)
    return delta, np.where(np.isneginf(lse_a), np.inf, lse_a)


def sink_grad(p: Problem, lse_safe, delta):
    """dsinks (Hq,) float64: -sum over b, i of exp(sink_h - lse_i) D_i; None without."""
    if p.sinks is None:
        return None
    p_sink = np.exp(p.sinks[None, :, None] - lse_safe.astype(np.float64))  # (B, Hq, Tq)
    return -(p_sink * delta).sum(axis=(0, 2))


def finish_grads(p: Problem, grads, dsinks):
    """(dq, dk, dv, dsinks), the first three in the input dtype; ValueError if one is
    not finite."""
    grads = tuple(g.astype(p.q.dtype) for g in grads)
    for g, name in zip(grads, ("dq", "dk", "dv")):
        if not np.isfinite(g).all():
            raise ValueError(f"{name} is not finite: the gradients overflow {g.dtype} "
                             f"(score_mod_grad returned NaN/inf, or the inputs are too large)")
    return (*grads, dsinks)
