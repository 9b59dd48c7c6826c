"""The tiled, IO-aware forward and backward passes of FlashAttention, written in numpy.

The full (Tq, Tk) score matrix is never formed: at any moment at most one
(Br, Bc) score tile exists. Per query row we keep running softmax statistics

    m  running max of the scores seen so far          (Br,)
    l  running sum of exp(score - m)                  (Br,)
    acc  unnormalised output sum_j exp(s_j - m) v_j    (Br, d)

and rescale l and acc by exp(m_old - m_new) whenever a new tile raises the max.
At the end O = acc / l and lse = m + log(l). This is exact attention: the same
mathematics as `flashcourse.reference.attention`, with a different rounding order.

Any reference point m gives the same O and lse (it cancels in acc / l), as long as
exp(s - m) neither overflows nor underflows to nothing. The lazy rescale
(`rescale_threshold`, FlashAttention-4's trick, in the course's Hopper kernel) uses that:
a row keeps its old max until a score passes it by more than `rescale_threshold` in
log2 units, so P <= 2^threshold and most blocks rescale nothing (`rescale_counts`).

Names follow the papers: Br = block_q (query rows per tile), Bc = block_k (key
columns per tile), Tr = ceil(Tq / Br) query blocks, Tc = ceil(Tk / Bc) key blocks.

Two loop orders:
    "fa2" (FlashAttention-2): outer loop over query blocks i, inner over key
          blocks j. Q_i, m, l, acc stay on chip for the whole inner loop; each
          visible (i, j) pair loads K_j and V_j. O_i and lse_i are written once.
    "fa1" (FlashAttention, Algorithm 1): outer loop over key blocks j, inner over
          query blocks i. K_j, V_j are loaded once; O_i, l_i, m_i live in outer
          memory and are read, updated and written back for every visible pair.

The backward (`backward`, notebook 09) recomputes each score tile from Q, K and the
forward's lse instead of storing P.

Pass a `flashcourse.counter.TrafficCounter` as `counter=` to count every load and
store from outer memory; the numerical result is identical either way. Without one
the loops call a do-nothing counter (`flashcourse.counter.NullCounter`).
"""

from __future__ import annotations

import numpy as np

from ._checks import check_block, check_loop_order, flatten_heads
from ._guards import forward_result, gradients_finite, lse_rowsums, o_rowsums
from .counter import check_counter
from .formats import check_format, round_to
from .geometry import tile_visibility, visible_mask


def _blocks(t: int, b: int):
    """Yield (index, start, stop) for blocks of size b over range(t); the last may be ragged."""
    for idx, start in enumerate(range(0, t, b)):
        yield idx, start, min(start + b, t)


def _score_tile(q_i, k_j, scale, q0, q1, k0, k1, tq, tk, causal, status):
    """S_ij = scale * Q_i K_j^T, with -inf where the causal mask hides a pair."""
    with np.errstate(over="ignore", invalid="ignore"):          # overflow: see _guards
        s = scale * (q_i @ k_j.T)                               # (Br, Bc)
    if status == "partial":
        s = np.where(visible_mask(tq, tk, causal, q0, q1, k0, k1), s, -np.inf)
    return s


def _running_max(m, tile_max, t=0.0):
    """The new running max: max(m, tile_max); with t > 0 (the lazy rescale, t in the
    scores' own units) m is kept while that max is at most m + t."""
    m_new = np.maximum(m, tile_max)
    return np.where(m_new <= m + t, m, m_new).astype(m_new.dtype) if t else m_new


def _safe_exp_diff(a, b):
    """exp(a - b) where -inf - -inf is taken as exp(-inf) = 0 (nothing visible yet)."""
    with np.errstate(invalid="ignore"):
        diff = a - b
    return np.exp(np.where(np.isnan(diff), -np.inf, diff))


def forward(q, k, v, *, block_q: int = 64, block_k: int = 64, causal: bool = False,
            scale: float | None = None, loop_order: str = "fa2", counter=None,
            allow_nonfinite: bool = False, p_format: str | None = None,
            rescale_threshold: float = 0.0):
    """Tiled exact attention.

    Args:
        q: (..., Tq, d) float16/32/64; k, v: (..., Tk, d), same leading dims and dtype.
        block_q: Br, query rows per tile (>= 1; need not divide Tq).
        block_k: Bc, key columns per tile (>= 1; need not divide Tk).
        causal: bottom-right aligned mask (query i sees key j iff j <= i + Tk - Tq);
            tiles that the mask hides entirely are skipped, never formed.
        scale: score scale, default 1/sqrt(d).
        loop_order: "fa2" (outer loop over query blocks) or "fa1" (over key blocks).
        counter: optional TrafficCounter that counts outer-memory bytes.
        allow_nonfinite: accept NaN/inf inputs. A row that sees a NaN or inf (in its
            q row or in a k, v row it sees) gets o = NaN and lse = NaN; other rows
            are computed as usual.
        p_format: None, or "fp16" / "bf16" / "fp32" / "fp64": round each probability
            tile P to that format before the P V product, as tensor-core kernels do
            (l is still summed from the unrounded P). See `flashcourse.formats`.
        rescale_threshold: 0 (every raised max rescales, as in the papers), or the lazy
            rescale's threshold t in log2 units, 0 <= t <= 64 (loop_order "fa2" only):
            a row keeps its running max m until a tile's max passes m + t ln 2, so
            P <= 2^t. The Hopper kernel uses t = 8 (`constants.RESCALE_THRESHOLD`).
            For a head whose |v| is so large that 2^t Tk max|v| would overflow the
            accumulator, t is lowered to what fits (`lazy_room`; 0: every raised max
            rescales), so the lazy rescale never turns a finite result into an overflow.

    Returns:
        o:   (..., Tq, d) in the input dtype.
        lse: (..., Tq) natural-log logsumexp per row, float32 (float64 for float64
             input); -inf (and o = 0) for a row with no visible key, and only then.

    Raises:
        ValueError when a row with finite inputs that sees keys gets a non-finite
        result: the scores scale * q.k overflow the compute type (float32 for
        float16/32 input: |S| > 3.4e38). See `flashcourse._guards.forward_result`.
    """
    x = flatten_heads(q, k, v, causal=causal, scale=scale, allow_nonfinite=allow_nonfinite)
    br = check_block(block_q, "block_q")
    bc = check_block(block_k, "block_k")
    loop_order = check_loop_order(loop_order)
    lazy_t = check_rescale_threshold(rescale_threshold) * np.log(2.0)
    if lazy_t and loop_order != "fa2":
        raise ValueError(f"rescale_threshold applies to loop_order='fa2' only, got "
                         f"rescale_threshold={rescale_threshold!r} with loop_order='fa1'")
    counter = check_counter(counter)
    counter.bind(x.dtype.itemsize)
    if p_format is None:
        round_p = None
    else:
        fmt = check_format(p_format, "p_format")
        round_p = lambda p: round_to(p, fmt).astype(x.acc_dtype)   # noqa: E731
    o = np.empty(x.q.shape, dtype=x.dtype)                      # (BH, Tq, d)
    lse = np.empty((x.bh, x.tq), dtype=x.acc_dtype)             # (BH, Tq)
    one_head = _forward_fa2 if loop_order == "fa2" else _forward_fa1
    for h in range(x.bh):
        extra = {"lazy_t": lazy_room(x.v[h], lazy_t, x.acc_dtype)} if lazy_t else {}
        o[h], lse[h] = one_head(x.q[h], x.k[h], x.v[h], br, bc, x.causal, x.scale,
                                x.acc_dtype, counter, h, round_p, **extra)
    return forward_result(q, k, v, x.unflatten(o), x.unflatten(lse), x.causal,
                          compute=x.acc_dtype.name, allow_nonfinite=allow_nonfinite,
                          scale=x.scale)


def _forward_fa2(q, k, v, br, bc, causal, scale, acc_t, counter, h, round_p=None,
                 lazy_t=0.0):
    """One head, outer loop over query blocks (FlashAttention-2 order); lazy_t > 0: the
    lazy rescale, threshold lazy_t in natural-log units."""
    tq, d = q.shape
    tk = k.shape[0]
    o = np.empty((tq, d), dtype=q.dtype)                        # outer memory
    lse = np.empty(tq, dtype=acc_t)                             # outer memory
    for i, q0, q1 in _blocks(tq, br):
        # Step 1 -- partition: load the query tile Q_i (Br, d) onto the chip.
        q_i = q[q0:q1].astype(acc_t)
        counter.read("Q", (q1 - q0) * d, head=h, rows=(q0, q1), tile=(i, None))
        m = np.full(q1 - q0, -np.inf, dtype=acc_t)              # (Br,) running max
        l = np.zeros(q1 - q0, dtype=acc_t)                      # (Br,) running sum
        acc = np.zeros((q1 - q0, d), dtype=acc_t)               # (Br, d) unnormalised O_i
        for j, k0, k1 in _blocks(tk, bc):
            status = tile_visibility(q0, q1, k0, k1, tq, tk, causal)
            if status == "hidden":                              # causal tile skipping
                counter.skip((i, j), head=h)
                continue
            k_j = k[k0:k1].astype(acc_t)                        # (Bc, d)
            v_j = v[k0:k1].astype(acc_t)                        # (Bc, d)
            counter.read("K", (k1 - k0) * d, head=h, rows=(k0, k1), tile=(i, j))
            counter.read("V", (k1 - k0) * d, head=h, rows=(k0, k1), tile=(i, j))
            counter.compute((i, j), head=h)
            # Step 2 -- one score block and the running statistics.
            s = _score_tile(q_i, k_j, scale, q0, q1, k0, k1, tq, tk, causal, status)
            m_new = _running_max(m, s.max(axis=1), lazy_t)      # (Br,)
            p = _safe_exp_diff(s, m_new[:, None])               # (Br, Bc)
            alpha = _safe_exp_diff(m, m_new)                    # (Br,) rescale factor
            # Step 3 -- rescale what we had, then add this tile's contribution.
            l = alpha * l + p.sum(axis=1)
            p_mm = p if round_p is None else round_p(p)         # (Br, Bc) as the MMA sees it
            with np.errstate(over="ignore", invalid="ignore"):  # a huge v: see _guards
                acc = alpha[:, None] * acc + p_mm @ v_j         # (Br, d)
            m = m_new
            # Step 4 -- discard: s and p go out of scope; nothing is written.
        seen = l > 0
        o[q0:q1] = np.where(seen[:, None], acc / np.where(seen, l, 1)[:, None], 0)
        with np.errstate(divide="ignore"):
            lse[q0:q1] = np.where(seen, m + np.log(np.where(seen, l, 1)), -np.inf)
        counter.write("O", (q1 - q0) * d, head=h, rows=(q0, q1), tile=(i, None))
        counter.write("lse", q1 - q0, kind="stat", head=h, rows=(q0, q1),
                      tile=(i, None))
    return o, lse


#: the largest lazy-rescale threshold accepted (log2 units): P <= 2^64 still fits float32
MAX_RESCALE_THRESHOLD = 64.0


def lazy_room(v, lazy_t: float, acc_t) -> float:
    """The lazy threshold lazy_t (natural-log units) for one head, lowered where P V could
    overflow the accumulator: with P = exp(s - m) <= e^t, |acc_i| <= e^t sum_j |v_j|
    <= e^t Tk max|v|, which must stay below acc_t's largest value (with a factor 2 for
    rounding). v: (Tk, d), the head's values; NaN/inf entries (allow_nonfinite) are left
    out: their rows are NaN anyway. 0 where even every-block rescaling has no room (then
    a row whose weighted sum overflows is refused by `_guards.forward_result`, as without
    the lazy rescale)."""
    a = np.abs(v)
    top = float(np.max(a, where=np.isfinite(a), initial=0.0))
    if top == 0.0:
        return lazy_t
    room = np.log(float(np.finfo(acc_t).max)) - np.log(2.0 * v.shape[0]) - np.log(top)
    return float(min(lazy_t, max(room, 0.0)))


def check_rescale_threshold(t) -> float:
    """`rescale_threshold` as a float in [0, MAX_RESCALE_THRESHOLD] (ValueError naming it)."""
    import numbers
    if isinstance(t, (bool, np.bool_)) or not isinstance(t, numbers.Real) \
            or not 0 <= float(t) <= MAX_RESCALE_THRESHOLD:
        raise ValueError(f"rescale_threshold must be a number from 0 to "
                         f"{MAX_RESCALE_THRESHOLD:g} (log2 units), got {t!r}")
    return float(t)


def rescale_counts(q, k, *, block_k: int = 64, rescale_threshold: float = 0.0,
                   causal: bool = False, scale: float | None = None) -> dict:
    """How often the online softmax rescales, row by row, key block after key block.

    q (..., Tq, d), k (..., Tk, d) as for `forward`. Returns a dict: "blocks" (visible
    (row, key block) pairs after each row's first visible block), "rescales" (those that
    changed the row's running max, so that O had to be multiplied by alpha != 1),
    "max_p_log2" (log2 of the largest P = 2^(s - m) formed: 0 with every-block rescaling,
    at most the threshold with the lazy one). Scores in log2 units, as the kernels form them.
    """
    x = flatten_heads(q, k, k, causal=causal, scale=scale)
    bc = check_block(block_k, "block_k")
    t = check_rescale_threshold(rescale_threshold)
    blocks = rescales = 0
    max_p = -np.inf
    for h in range(x.bh):
        s = x.scale * (x.q[h].astype(np.float64) @ x.k[h].astype(np.float64).T) / np.log(2.0)
        s = np.where(visible_mask(x.tq, x.tk, x.causal, 0, x.tq, 0, x.tk), s, -np.inf)
        m = np.full(x.tq, -np.inf)
        for _, k0, k1 in _blocks(x.tk, bc):
            tile_max = s[:, k0:k1].max(axis=1)
            seen = np.isfinite(m) & np.isfinite(tile_max)
            m_new = _running_max(m, tile_max, t)
            blocks += int(seen.sum())
            rescales += int((seen & (m_new != m)).sum())
            m = m_new
            ok = np.isfinite(m)
            if ok.any():
                max_p = max(max_p, float(np.max(tile_max[ok] - m[ok])))
    return {"blocks": blocks, "rescales": rescales, "max_p_log2": max_p}


def _forward_fa1(q, k, v, br, bc, causal, scale, acc_t, counter, h, round_p=None):
    """One head, outer loop over key blocks (FlashAttention Algorithm 1).

    O, l, m live in outer memory and are read-modify-written per visible pair.
    As in the paper, O_i is kept normalised after every update:
        O_i <- (l_i e^{m_i - m_new} O_i + e^{m~ - m_new} P~ V_j) / l_new
    """
    tq, d = q.shape
    tk = k.shape[0]
    o_hbm = np.zeros((tq, d), dtype=acc_t)                      # outer memory
    l_hbm = np.zeros(tq, dtype=acc_t)
    m_hbm = np.full(tq, -np.inf, dtype=acc_t)
    counter.write("O", tq * d, head=h, rows=(0, tq))  # initialise O, l, m
    counter.write("l", tq, kind="stat", head=h, rows=(0, tq))
    counter.write("m", tq, kind="stat", head=h, rows=(0, tq))
    for j, k0, k1 in _blocks(tk, bc):
        k_j = k[k0:k1].astype(acc_t)                            # (Bc, d), loaded once
        v_j = v[k0:k1].astype(acc_t)
        counter.read("K", (k1 - k0) * d, head=h, rows=(k0, k1), tile=(None, j))
        counter.read("V", (k1 - k0) * d, head=h, rows=(k0, k1), tile=(None, j))
        for i, q0, q1 in _blocks(tq, br):
            status = tile_visibility(q0, q1, k0, k1, tq, tk, causal)
            if status == "hidden":
                counter.skip((i, j), head=h)
                continue
            rows = q1 - q0
            q_i = q[q0:q1].astype(acc_t)
            o_i, l_i, m_i = o_hbm[q0:q1], l_hbm[q0:q1], m_hbm[q0:q1]
            for name, n, kind in (("Q", rows * d, "element"), ("O", rows * d, "element"),
                                  ("l", rows, "stat"), ("m", rows, "stat")):
                counter.read(name, n, kind=kind, head=h, rows=(q0, q1), tile=(i, j))
            counter.compute((i, j), head=h)
            s = _score_tile(q_i, k_j, scale, q0, q1, k0, k1, tq, tk, causal, status)
            m_tile = s.max(axis=1)                              # (Br,)  m~_ij
            p = _safe_exp_diff(s, m_tile[:, None])              # (Br, Bc) P~_ij
            l_tile = p.sum(axis=1)                              # (Br,)  l~_ij
            m_new = np.maximum(m_i, m_tile)
            a_old = _safe_exp_diff(m_i, m_new)
            a_tile = _safe_exp_diff(m_tile, m_new)
            l_new = a_old * l_i + a_tile * l_tile
            l_div = np.where(l_new > 0, l_new, 1)
            p_mm = p if round_p is None else round_p(p)         # (Br, Bc) as the MMA sees it
            with np.errstate(over="ignore", invalid="ignore"):  # a huge v: see _guards
                o_hbm[q0:q1] = ((l_i * a_old)[:, None] * o_i
                                + a_tile[:, None] * (p_mm @ v_j)) / l_div[:, None]
            l_hbm[q0:q1] = l_new
            m_hbm[q0:q1] = m_new
            counter.write("O", rows * d, head=h, rows=(q0, q1), tile=(i, j))
            counter.write("l", rows, kind="stat", head=h, rows=(q0, q1), tile=(i, j))
            counter.write("m", rows, kind="stat", head=h, rows=(q0, q1), tile=(i, j))
    seen = l_hbm > 0
    with np.errstate(divide="ignore"):
        lse = np.where(seen, m_hbm + np.log(np.where(seen, l_hbm, 1)), -np.inf)
    return o_hbm.astype(q.dtype), lse.astype(acc_t)


# ---------------------------------------------------------------------------
# The backward pass with recomputation (notebook 09)
# ---------------------------------------------------------------------------

def backward(q, k, v, o, lse, do, *, block_q: int = 64, block_k: int = 64,
             causal: bool = False, scale: float | None = None, counter=None,
             partial_keys: bool = False):
    """FlashAttention-2's backward pass: gradients from O and lse, P recomputed per tile.

    The forward kept only O (Tq, d) and lse (Tq,) -- not P (Tq, Tk). Here

        D_i  = rowsum(dO_i * O_i) = sum_j P_ij dP_ij        (Tq,)  once, up front
        for each key block j (outer loop; dK_j, dV_j stay on chip):
          for each visible query block i (inner loop):
            S_ij  = scale Q_i K_j^T                          (Br, Bc)  recomputed
            P_ij  = exp(S_ij - lse_i)                        (Br, Bc)  exact, no max/sum
            dV_j += P_ij^T dO_i                              (Bc, d)
            dP_ij = dO_i V_j^T                               (Br, Bc)
            dS_ij = P_ij * (dP_ij - D_i)                     (Br, Bc)
            dQ_i += scale dS_ij K_j                          (Br, d)   in outer memory
            dK_j += scale dS_ij^T Q_i                        (Bc, d)
          write dK_j, dV_j once

    At most one (Br, Bc) score tile (with its P, dP, dS) exists at a time. A row
    with lse = -inf (no visible key) gets P = 0, hence zero gradients. Tiles the
    causal mask hides entirely are skipped.

    Args:
        q, k, v: as for `forward`.
        o: (..., Tq, d) the forward's output, q's dtype.
        lse: (..., Tq) the forward's logsumexp (natural log; -inf for empty rows).
        do: (..., Tq, d) gradient of the loss with respect to o, q's dtype.
        block_q, block_k: Br, Bc (>= 1; need not divide Tq, Tk).
        causal, scale: as for `forward` (they must match the forward's).
        counter: optional TrafficCounter. It records K_j, V_j loads, per visible
            tile the loads of Q_i, dO_i (elements), lse_i, D_i (statistics) and
            the read-modify-write of dQ_i (elements), dK/dV writes, and the
            compute/skip events; the pre-pass (read O, dO; write D; zero dQ) too.
            Its totals equal `flashcourse.traffic.backward_traffic(...,
            method="tiled")` when the dQ accumulator has the element size.
        partial_keys: k, v are a part of each row's keys, o and lse the forward's over
            all of them (a ring attention step, `flashcourse.distributed.ring`): the
            gradients are this part's share (dq to be summed over the parts), and the
            two row-sum checks below, which need all the keys, are skipped.

    Returns:
        (dq, dk, dv) in the input dtype, shaped like q, k, v. Accumulation is in
        float32 (float64 for float64 input).

    Raises:
        ValueError "lse does not match the inputs" when a recomputed row of P does
        not sum to 1 (within `flashcourse._guards.lse_tolerance`: 1e-3 plus rounding
        terms in float32, 1e-9 plus rounding terms in float64), or lse = -inf for a
        row that sees keys: lse must be the forward's for the same q, k, causal, scale.
        ValueError "the gradients overflow float32" (float64 for float64 input) when
        dq, dk or dv is not finite, "do not fit float16" for float16 input whose
        float32 gradients pass 65504 (`_guards.gradients_finite`).
        ValueError "o does not match the inputs" when o is not the forward's output:
        each recomputed row of dS = P (dP - D) is summed beside P's, which gives
        do_i . (P V - o)_i, and `_guards.o_rowsums` compares it with 0.
        The same checks, in the same order and words, as `flashcourse.cuda.backward`.
    """
    x = flatten_heads(q, k, v, causal=causal, scale=scale, o=o, lse=lse, do=do)
    br = check_block(block_q, "block_q")
    bc = check_block(block_k, "block_k")
    counter = check_counter(counter)
    counter.bind(x.dtype.itemsize)
    dq = np.empty(x.q.shape, dtype=x.acc_dtype)                 # (BH, Tq, d)
    dk = np.empty(x.k.shape, dtype=x.acc_dtype)                 # (BH, Tk, d)
    dv = np.empty(x.v.shape, dtype=x.acc_dtype)                 # (BH, Tk, d)
    psum = np.zeros((x.bh, x.tq), dtype=x.acc_dtype)            # (BH, Tq) sum_j P_ij
    dsum = np.zeros((x.bh, x.tq), dtype=x.acc_dtype)            # (BH, Tq) sum_j dS_ij
    # an overflow of the compute type gives inf/NaN here; the checks below name it
    with np.errstate(over="ignore", invalid="ignore"):
        for h in range(x.bh):
            dq[h], dk[h], dv[h] = _backward_one_head(
                x.q[h], x.k[h], x.v[h], x.o[h], x.lse[h], x.do[h], br, bc, x.causal,
                x.scale, x.acc_dtype, counter, h, psum[h], dsum[h])
    compute = x.acc_dtype.name
    if not partial_keys:
        lse_rowsums(x.unflatten(psum), q, k, lse, x.causal, x.scale, compute)
    with np.errstate(over="ignore"):            # float16 overflow: gradients_finite names it
        grads = [(g, g.astype(x.dtype, copy=False)) for g in (dq, dk, dv)]
    gradients_finite(grads, compute)
    if not partial_keys:
        o_rowsums(dsum, x.q, x.k, x.v, x.o, x.lse, x.do, x.causal, x.scale, compute)
    return tuple(x.unflatten(out) for _, out in grads)


def _backward_one_head(q, k, v, o, lse, do, br, bc, causal, scale, acc_t, counter, h,
                       psum, dsum):
    """One head of `backward`: outer loop over key blocks, inner over query blocks.
    Adds each recomputed row sum of P into psum (Tq,) and of dS into dsum (Tq,), for the
    lse and o checks. Returns dq, dk, dv in acc_t (the caller casts them)."""
    tq, d = q.shape
    tk = k.shape[0]
    # Pre-pass: D = rowsum(dO * O), one number per query row (replaces sum_k P_ik dP_ik).
    delta = (do.astype(acc_t) * o.astype(acc_t)).sum(axis=1)           # (Tq,)
    lse_a = lse.astype(acc_t)
    # lse = -inf marks an empty row: use +inf there so that exp(S - lse) = 0, never NaN.
    lse_safe = np.where(np.isneginf(lse_a), np.inf, lse_a)             # (Tq,)
    counter.read("O", tq * d, head=h, rows=(0, tq))
    counter.read("dO", tq * d, head=h, rows=(0, tq))
    counter.write("D", tq, kind="stat", head=h, rows=(0, tq))
    counter.write("dQ", tq * d, head=h, rows=(0, tq))             # dQ = 0 (accumulator)
    dq = np.zeros((tq, d), dtype=acc_t)                                 # outer memory
    dk = np.empty((tk, d), dtype=acc_t)
    dv = np.empty((tk, d), dtype=acc_t)
    for j, k0, k1 in _blocks(tk, bc):
        k_j = k[k0:k1].astype(acc_t)                                    # (Bc, d) on chip
        v_j = v[k0:k1].astype(acc_t)                                    # (Bc, d)
        dk_j = np.zeros((k1 - k0, d), dtype=acc_t)                      # (Bc, d) on chip
        dv_j = np.zeros((k1 - k0, d), dtype=acc_t)                      # (Bc, d)
        counter.read("K", (k1 - k0) * d, head=h, rows=(k0, k1), tile=(None, j))
        counter.read("V", (k1 - k0) * d, head=h, rows=(k0, k1), tile=(None, j))
        for i, q0, q1 in _blocks(tq, br):
            status = tile_visibility(q0, q1, k0, k1, tq, tk, causal)
            if status == "hidden":                                      # causal skipping
                counter.skip((i, j), head=h)
                continue
            rows = q1 - q0
            q_i = q[q0:q1].astype(acc_t)                                # (Br, d)
            do_i = do[q0:q1].astype(acc_t)                              # (Br, d)
            counter.read("Q", rows * d, head=h, rows=(q0, q1), tile=(i, j))
            counter.read("dO", rows * d, head=h, rows=(q0, q1), tile=(i, j))
            counter.read("lse", rows, kind="stat", head=h, rows=(q0, q1), tile=(i, j))
            counter.read("D", rows, kind="stat", head=h, rows=(q0, q1), tile=(i, j))
            counter.read("dQ", rows * d, head=h, rows=(q0, q1), tile=(i, j))
            counter.compute((i, j), head=h)
            s = _score_tile(q_i, k_j, scale, q0, q1, k0, k1, tq, tk, causal, status)
            p = np.exp(s - lse_safe[q0:q1, None])                       # (Br, Bc) recomputed P
            psum[q0:q1] += p.sum(axis=1)                                # (Br,) lse check
            dv_j += p.T @ do_i                                          # (Bc, d)
            dp = do_i @ v_j.T                                           # (Br, Bc)
            ds = p * (dp - delta[q0:q1, None])                          # (Br, Bc)
            dsum[q0:q1] += ds.sum(axis=1)                               # (Br,) o check
            dq[q0:q1] += scale * (ds @ k_j)                             # (Br, d) read+write
            dk_j += scale * (ds.T @ q_i)                                # (Bc, d)
            counter.write("dQ", rows * d, head=h, rows=(q0, q1), tile=(i, j))
            # s, p, dp, ds are discarded here: one score tile at a time.
        dk[k0:k1] = dk_j
        dv[k0:k1] = dv_j
        counter.write("dK", (k1 - k0) * d, head=h, rows=(k0, k1), tile=(None, j))
        counter.write("dV", (k1 - k0) * d, head=h, rows=(k0, k1), tile=(None, j))
    return dq, dk, dv
