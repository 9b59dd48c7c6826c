"""The variants forward compiled for the CPU with Numba: one kernel for every mask.

`flashcourse.cpu.forward` (v3) with its tile loop driven by a block mask: the same
transposed tiles (S^T (Bc, Br), Q_i^T and acc^T (d, Br)), the same micro-kernels
(`cpu._scores_cols`, `cpu._pv_cols`, `cpu._row_max_cols`, `cpu._scale_cols`, the exp2
polynomial `cpu.exp2_row`), and per work item (b, h, query block i):

    for each full key block, then each partial one (never an empty one):
        S^T = (scale Q_i) K_j^T                 natural-log units
        S^T = score_mod(S^T, b, h, q, kv)       one call per pair, if there is one
        S^T = -inf where not mask_mod(...)      partial blocks only
        online softmax in exp2 form, acc^T += V_j^T P^T
    the sink, if any, joins each row's sum at the end (as in `variants.tiled`)

mask_mod and score_mod arrive as Numba first-class functions (`mods.compiled_mask`,
`mods.compiled_score`): the kernel is compiled once (and cached on disk) for every
mask, and calls them through a pointer. What that costs: an indirect call per pair
that LLVM cannot inline or vectorise, on every pair of a partial tile (mask) and on
every visible pair (score_mod); full tiles without a score_mod run at the speed of
`cpu.forward`. Bytes moved: K_j, V_j read once per visited tile; empty tiles read
nothing. GQA: query head h reads K/V head h // G directly, no copy.

Counts per work item (tiles formed, mask evaluations) come back through `stats`.

The backward (`backward`) is two plain loop kernels, the lesson's version rather than a
tuned one: `_kernel_dkdv`, one work item per (b, kv head, key block j), sums dK_j and
dV_j over the query blocks q_indices / full_q_indices list and over the GQA group, so
no two threads write the same rows; `_kernel_dq`, one work item per (b, h, query block
i), sums dQ_i over its key blocks. Each recomputes P and dS (`_add_tile_grads`, pair by
pair: `_pair_grad`), so the backward forms every visible tile twice: the price of having
no atomic adds on the CPU (FlashAttention-2's GPU backward adds dQ atomically instead).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..constants import LOG2E
from ..cpu import (FASTMATH, _int_like, _launch, _pv_cols, _row_max_cols, _scale_cols,
                   _scores_cols, exp2_row)
from .mods import compiled_mask, compiled_score
from .inputs import check_grad_inputs, check_result
from .mods import always_visible, resolve_grad, unchanged_score
from .tiled import backward_prologue, finish_grads, new_counts, prepare, sink_grad


@njit(cache=True)
def _listed(num, idx, full_num, full_idx, bi, hi, row, t):
    """(block, partial): the t-th block a block-mask row lists, its full blocks first,
    then its partial ones; n = full_num[bi, hi, row] + num[bi, hi, row] of them."""
    n_full = full_num[bi, hi, row]
    if t < n_full:
        return np.int64(full_idx[bi, hi, row, t]), False
    return np.int64(idx[bi, hi, row, t - n_full]), True


@njit(cache=True)
def _query_item(it, nqb, n_heads, group, nb_m, nh_m):
    """The ids of work item `it` = (b, h, query block i) of a query-major kernel:
    (head = b Hq + h, i, b, h, kvh = b Hkv + h // group: its key/value head, bi, hi: its
    row of the block mask, 0 where the mask has one batch or head for all)."""
    head = it // nqb
    b = head // n_heads
    h = head % n_heads
    kvh = b * (n_heads // group) + h // group
    return head, it % nqb, b, h, kvh, b if nb_m > 1 else 0, h if nh_m > 1 else 0


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def _kernel(q, k, v, o, lse, n_heads, group, br, bc, kv_num, kv_idx, full_num, full_idx,
            mask_fn, score_fn, has_score, sinks, has_sinks, scale, log2e, int_t, counts):
    """q (B Hq, Tq, d), k, v (B Hkv, Tk, d) in the accumulator dtype; block-mask arrays
    (B', H', Tr) and (B', H', Tr, Tc) int32; writes o (B Hq, Tq, d), lse (B Hq, Tq),
    counts (items, 2): tiles formed, mask evaluations."""
    bh, tq, d = q.shape
    tk = k.shape[1]
    nqb = (tq + br - 1) // br
    nb_m, nh_m = kv_num.shape[0], kv_num.shape[1]
    dt = q.dtype
    for item in prange(bh * nqb):
        it = np.int64(item)
        head, i_blk, b, h, kvh, bi, hi = _query_item(it, nqb, n_heads, group, nb_m, nh_m)
        q0 = i_blk * br
        rows = min(q0 + br, tq) - q0
        qt = np.empty((d, br), dt)                  # (d, Br)  scale Q_i^T
        st = np.empty((bc, br), dt)                 # (Bc, Br) S^T, then P^T
        acct = np.zeros((d, br), dt)                # (d, Br)  acc^T
        m = np.full(br, -np.inf, dt)                # (Br,) running max (natural log)
        l = np.zeros(br, dt)                        # (Br,) running sum
        m_use = np.empty(br, dt)
        alpha = np.empty(br, dt)
        tmp = np.empty(br, dt)
        bits = np.empty(br, int_t.dtype)
        for r in range(rows):
            for x in range(d):
                qt[x, r] = q[head, q0 + r, x] * scale
        for t in range(full_num[bi, hi, i_blk] + kv_num[bi, hi, i_blk]):
            j, partial = _listed(kv_num, kv_idx, full_num, full_idx, bi, hi, i_blk, t)
            k0 = j * bc
            cols = min(k0 + bc, tk) - k0
            _scores_cols(st, k[kvh], qt, k0, cols, rows)
            counts[it, 0] += 1
            if has_score:
                for c in range(cols):
                    for r in range(rows):
                        st[c, r] = score_fn(np.float64(st[c, r]), b, h, q0 + r, k0 + c)
            if partial:
                counts[it, 1] += cols * rows
                for c in range(cols):
                    for r in range(rows):
                        if not mask_fn(b, h, q0 + r, k0 + c):
                            st[c, r] = -np.inf
            _row_max_cols(m_use, m, st, cols, rows)
            for r in range(rows):
                alpha[r] = np.exp(m[r] - m_use[r]) if m[r] > -np.inf else 0
                m[r] = m_use[r]
                if m_use[r] == -np.inf:             # nothing visible yet: P = 0 below
                    m_use[r] = 0
                l[r] *= alpha[r]
            for c in range(cols):
                sc = st[c]
                for r in range(rows):
                    tmp[r] = (sc[r] - m_use[r]) * log2e
                exp2_row(tmp[:rows], sc[:rows], bits[:rows])
                for r in range(rows):               # hidden pairs: exactly 0, not 2^-126
                    if tmp[r] == -np.inf:
                        sc[r] = 0
                    l[r] += sc[r]
            _scale_cols(acct, alpha, rows)
            _pv_cols(acct, st, v[kvh], k0, cols, rows)
        if has_sinks:
            sink = dt.type(sinks[h])
            for r in range(rows):
                m_new = max(m[r], sink)
                a = np.exp(m[r] - m_new) if m[r] > -np.inf else 0
                l[r] = l[r] * a + np.exp(sink - m_new)
                for x in range(d):
                    acct[x, r] *= a
                m[r] = m_new
        for r in range(rows):
            if l[r] > 0:
                for x in range(d):
                    o[head, q0 + r, x] = acct[x, r] / l[r]
                lse[head, q0 + r] = m[r] + np.log(l[r])
            else:                                   # nothing visible: o = 0, lse = -inf
                for x in range(d):
                    o[head, q0 + r, x] = 0
                lse[head, q0 + r] = -np.inf


def forward(q, k, v, *, block_mask=None, score_mod=None, sinks=None, scale=None,
            block_q: int | None = None, block_k: int | None = None, stats=None):
    """(o, lse) as `variants.tiled.forward` (same arguments, same results within
    rounding), compiled: o (B, Hq, Tq, d) in q's dtype, lse (B, Hq, Tq) float32
    (float64 for float64 input). stats: a dict that receives "tiles" and
    "mask_evaluations"."""
    p, bm = prepare(q, k, v, block_mask, score_mod, sinks, scale, block_q, block_k)
    counts = new_counts(stats)
    acc_t = p.acc_dtype
    br, bc = bm.block_size
    qf = np.ascontiguousarray(p.q.reshape(-1, p.tq, p.d), dtype=acc_t)   # (B Hq, Tq, d)
    kf = np.ascontiguousarray(p.k.reshape(-1, p.tk, p.d), dtype=acc_t)   # (B Hkv, Tk, d)
    vf = np.ascontiguousarray(p.v.reshape(-1, p.tk, p.d), dtype=acc_t)
    o = np.empty(qf.shape, acc_t)
    lse = np.empty(qf.shape[:2], acc_t)
    items = qf.shape[0] * -(-p.tq // br)
    per_item = np.zeros((items, 2), np.int64)
    mask_fn = compiled_mask(bm.mask_mod if bm.mask_mod is not None else always_visible)
    score_fn = compiled_score(score_mod if score_mod is not None else unchanged_score)
    sinks_a = np.zeros(p.heads) if p.sinks is None else p.sinks
    _launch(_kernel, items, qf, kf, vf, o, lse, p.heads, p.group, br, bc,
            bm.kv_num_blocks, bm.kv_indices, bm.full_kv_num_blocks, bm.full_kv_indices,
            mask_fn, score_fn, score_mod is not None, sinks_a, p.sinks is not None,
            acc_t.type(p.scale), acc_t.type(LOG2E), _int_like(acc_t), per_item)
    counts["tiles"] = int(per_item[:, 0].sum())
    counts["mask_evaluations"] = int(per_item[:, 1].sum())
    if stats is not None:
        stats.update(counts)
    o = o.reshape(p.q.shape).astype(p.q.dtype, copy=False)
    lse = lse.reshape(p.q.shape[:3])
    check_result(o, lse)
    return o, lse


# ---------------------------------------------------------------------------
# backward: dK, dV per key block, then dQ per query block
# ---------------------------------------------------------------------------

@njit(fastmath=FASTMATH, cache=True)
def _pair_grad(q_r, k_c, v_c, do_r, lse_r, delta_r, scale, b, h, qi, ki, check_mask,
               mask_fn, score_fn, grad_fn, has_score):
    """(P, dS_raw) of one pair: P = exp(S - lse), dS_raw = P (dO.v - D) S'(S_raw);
    (0, 0) where the mask hides it (checked on partial tiles only)."""
    if check_mask and not mask_fn(b, h, qi, ki):
        return 0.0, 0.0
    s_raw = 0.0
    for x in range(q_r.shape[0]):
        s_raw += q_r[x] * k_c[x]
    s_raw *= scale
    s = score_fn(s_raw, b, h, qi, ki) if has_score else s_raw
    p = np.exp(s - lse_r)                          # lse_r = +inf for an empty row: 0
    if p == 0.0:
        return 0.0, 0.0
    dp = 0.0
    for x in range(do_r.shape[0]):
        dp += do_r[x] * v_c[x]
    ds = p * (dp - delta_r)
    if has_score:
        ds *= grad_fn(s_raw, b, h, qi, ki)
    return p, ds


@njit(fastmath=FASTMATH, cache=True)
def _add_tile_grads(dq, dk, dv, key_major, counts, q, k, v, do, lse, delta, head, kvh, q0,
                    rows, k0, cols, b, h, partial, mask_fn, score_fn, grad_fn, has_score,
                    scale):
    """P and dS of every pair of the tile of query rows q0.. and key rows k0..
    (`_pair_grad`, the mask checked on a partial tile only), added into the key rows of
    dK and dV (key_major) or into the query rows of dQ. Counts the tile and its mask
    evaluations in counts (2,)."""
    counts[0] += 1
    if partial:
        counts[1] += rows * cols
    d = q.shape[2]
    for r in range(rows):
        qi = q0 + r
        for c in range(cols):
            p, ds = _pair_grad(q[head, qi], k[kvh, k0 + c], v[kvh, k0 + c], do[head, qi],
                               lse[head, qi], delta[head, qi], scale, b, h, qi, k0 + c,
                               partial, mask_fn, score_fn, grad_fn, has_score)
            if p == 0.0:
                continue
            if key_major:                           # dV_j += P^T dO_i, dK_j += dS^T Q_i
                for x in range(d):
                    dv[kvh, k0 + c, x] += p * do[head, qi, x]
                    dk[kvh, k0 + c, x] += scale * ds * q[head, qi, x]
            else:                                   # dQ_i += dS K_j
                for x in range(d):
                    dq[head, qi, x] += scale * ds * k[kvh, k0 + c, x]


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def _kernel_dkdv(q, k, v, do, lse, delta, dq, dk, dv, n_heads, group, br, bc, q_num,
                 q_idx, full_num, full_idx, mask_fn, score_fn, grad_fn, has_score, scale,
                 counts):
    """One work item per (b, kv head, key block j): dK_j, dV_j (Bc, d) summed over the
    GQA group's query heads and the query blocks the block mask lists for j (dq is not
    written)."""
    bhq, tq, _ = q.shape
    bhk, tk, _ = k.shape
    nkb = (tk + bc - 1) // bc
    nb_m, nh_m = q_num.shape[0], q_num.shape[1]
    kv_heads = n_heads // group
    for item in prange(bhk * nkb):
        it = np.int64(item)
        kvh = it // nkb
        j = it % nkb
        b = kvh // kv_heads
        k0 = j * bc
        cols = min(k0 + bc, tk) - k0
        for g in range(group):
            h = (kvh % kv_heads) * group + g
            head = b * n_heads + h
            bi = b if nb_m > 1 else 0
            hi = h if nh_m > 1 else 0
            for t in range(full_num[bi, hi, j] + q_num[bi, hi, j]):
                i, partial = _listed(q_num, q_idx, full_num, full_idx, bi, hi, j, t)
                q0 = i * br
                rows = min(q0 + br, tq) - q0
                _add_tile_grads(dq, dk, dv, True, counts[it], q, k, v, do, lse, delta, head,
                                kvh, q0, rows, k0, cols, b, h, partial, mask_fn, score_fn,
                                grad_fn, has_score, scale)


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def _kernel_dq(q, k, v, do, lse, delta, dq, dk, dv, n_heads, group, br, bc, kv_num, kv_idx,
               full_num, full_idx, mask_fn, score_fn, grad_fn, has_score, scale, counts):
    """One work item per (b, h, query block i): dQ_i (Br, d) summed over the key blocks
    the block mask lists for i (dk, dv are not written)."""
    bhq, tq, _ = q.shape
    tk = k.shape[1]
    nqb = (tq + br - 1) // br
    nb_m, nh_m = kv_num.shape[0], kv_num.shape[1]
    for item in prange(bhq * nqb):
        it = np.int64(item)
        head, i, b, h, kvh, bi, hi = _query_item(it, nqb, n_heads, group, nb_m, nh_m)
        q0 = i * br
        rows = min(q0 + br, tq) - q0
        for t in range(full_num[bi, hi, i] + kv_num[bi, hi, i]):
            j, partial = _listed(kv_num, kv_idx, full_num, full_idx, bi, hi, i, t)
            k0 = j * bc
            cols = min(k0 + bc, tk) - k0
            _add_tile_grads(dq, dk, dv, False, counts[it], q, k, v, do, lse, delta, head, kvh,
                            q0, rows, k0, cols, b, h, partial, mask_fn, score_fn, grad_fn,
                            has_score, scale)


def backward(q, k, v, o, lse, do, *, block_mask=None, score_mod=None, score_mod_grad=None,
             sinks=None, scale=None, block_q: int | None = None, block_k: int | None = None,
             stats=None):
    """(dq, dk, dv, dsinks) as `variants.tiled.backward` (same arguments, same results
    within rounding), compiled; float64 arithmetic inside the pair loops. stats: "tiles"
    and "mask_evaluations" of both kernels together (every visible tile twice)."""
    p, bm = prepare(q, k, v, block_mask, score_mod, sinks, scale, block_q, block_k)
    o, lse, do = check_grad_inputs(p, o, lse, do)
    grad = resolve_grad(score_mod, score_mod_grad)
    counts = new_counts(stats)
    delta, lse_safe = backward_prologue(p, o, lse, do, np.dtype(np.float64))
    br, bc = bm.block_size

    def flat(x, t):                                                      # (B H, T, d)
        return np.ascontiguousarray(x.reshape(-1, t, p.d), dtype=np.float64)
    qf, dof = flat(p.q, p.tq), flat(do, p.tq)
    kf, vf = flat(p.k, p.tk), flat(p.v, p.tk)
    lse_f = np.ascontiguousarray(lse_safe.reshape(-1, p.tq))
    delta_f = np.ascontiguousarray(delta.reshape(-1, p.tq))
    dq, dk, dv = np.zeros(qf.shape), np.zeros(kf.shape), np.zeros(vf.shape)
    fns = (compiled_mask(bm.mask_mod if bm.mask_mod is not None else always_visible),
           compiled_score(score_mod if score_mod is not None else unchanged_score),
           compiled_score(grad if grad is not None else unchanged_score, "score_mod_grad"),
           score_mod is not None, float(p.scale))
    items_kv = kf.shape[0] * -(-p.tk // bc)
    items_q = qf.shape[0] * -(-p.tq // br)
    per_kv = np.zeros((items_kv, 2), np.int64)
    per_q = np.zeros((items_q, 2), np.int64)
    _launch(_kernel_dkdv, items_kv, qf, kf, vf, dof, lse_f, delta_f, dq, dk, dv, p.heads,
            p.group, br, bc, bm.q_num_blocks, bm.q_indices, bm.full_q_num_blocks,
            bm.full_q_indices, *fns, per_kv)
    _launch(_kernel_dq, items_q, qf, kf, vf, dof, lse_f, delta_f, dq, dk, dv, p.heads,
            p.group, br, bc, bm.kv_num_blocks, bm.kv_indices, bm.full_kv_num_blocks,
            bm.full_kv_indices, *fns, per_q)
    counts["tiles"] = int(per_kv[:, 0].sum() + per_q[:, 0].sum())
    counts["mask_evaluations"] = int(per_kv[:, 1].sum() + per_q[:, 1].sum())
    if stats is not None:
        stats.update(counts)
    grads = (dq.reshape(p.q.shape), dk.reshape(p.k.shape), dv.reshape(p.v.shape))
    return finish_grads(p, grads, sink_grad(p, lse_safe, delta))
