"""Checkers for lab 02: the per-tile step of the FlashAttention-2 loop.

The learner writes three functions (one head, float64, shapes in paper notation):

    causal_tile_mask(q0, q1, k0, k1, t_query, t_key) -> (q1-q0, k1-k0) bool
        True where query i (q0 <= i < q1) may attend key j (k0 <= j < k1), with
        the bottom-right alignment of FlashAttention 2.1+: j <= i + Tk - Tq.

    tile_step(q_i, k_j, v_j, mask, m, l, acc, scale) -> (m, l, acc)
        q_i (Br, d), k_j (Bc, d), v_j (Bc, d), mask (Br, Bc) bool,
        m (Br,) running max, l (Br,) running sum, acc (Br, d) unnormalised output.
            S   = scale * q_i k_j^T, -inf where mask is False       (Br, Bc)
            m'  = max(m, rowmax(S))                                   (Br,)
            P   = exp(S - m')                                         (Br, Bc)
            l'  = exp(m - m') l + rowsum(P)                           (Br,)
            acc'= exp(m - m') acc + P v_j                             (Br, d)

    finalize(m, l, acc) -> (o, lse)
        o = acc / l (Br, d) and lse = m + log(l) (Br,); a row with l = 0 (no
        visible key) gives o = 0 and lse = -inf.

`run_forward` is the FlashAttention-2 loop (outer over query blocks, inner over
key blocks) into which the checker plugs those functions; it skips every tile
the causal mask hides entirely. Checkers print "All checks passed" or the first
failing case with a hint naming the mistake, and return a `Result`.
"""

from __future__ import annotations

import math

import numpy as np

from .. import reference
from ..geometry import visible_mask
from ._harness import Case, Result, run_checks

# -- hints (tests assert on these exact strings) ------------------------------
HINT_TOP_LEFT = ("Mask alignment: this is the top-left mask (j <= i). The course aligns the "
                 "causal mask bottom-right, as FlashAttention 2.1+: query i sees key j iff "
                 "j <= i + (Tk - Tq), so the last query sees every key.")
HINT_OFF_BY_ONE = ("Off by one on the diagonal: a query sees its own position, so the test is "
                   "j <= i + (Tk - Tq), with <= (not <), and no extra +1.")
HINT_LOCAL_INDEX = ("Use global positions: row r of the tile is query q0 + r and column c is "
                    "key k0 + c; compare those, not the tile-local r and c.")
HINT_RAGGED = ("Ragged tiles: the last tile may be smaller than the block. Build the mask "
               "from the actual ranges, shape (q1 - q0, k1 - k0).")
HINT_INVERTED = "The mask is inverted: True must mean 'visible' (j <= i + Tk - Tq)."
HINT_MAX = ("Wrong running max: m_new = max(m, rowmax(S)) combines the old max with this "
            "tile's; the tile's max alone forgets the earlier tiles.")
HINT_RESCALE = ("Missing rescale: when the max grows, multiply both l and acc by "
                "alpha = exp(m_old - m_new) before adding this tile's P and P @ v_j.")
HINT_SCALE = "Apply the `scale` argument: S = scale * q_i @ k_j.T (do not assume 1/sqrt(d) or 1)."
HINT_MASK_IGNORED = ("The mask is not applied: set S to -inf where mask is False before the "
                     "row max, so masked keys get weight exp(-inf) = 0.")
HINT_NEG_INF = ("-inf handling: a row that has seen no visible key keeps m = -inf, and "
                "exp(-inf - -inf) is NaN. Subtract a finite stand-in "
                "(m_safe = np.where(m_new == -np.inf, 0.0, m_new)) so such a row stays "
                "(m, l, acc) = (-inf, 0, 0).")
HINT_DIVIDE = "Forgot to divide by l: the output is o = acc / l[:, None] (acc is unnormalised)."
HINT_LSE = "lse is the logsumexp of the row: lse = m + log(l), not log(l) alone."
HINT_EMPTY = ("A row with no visible key has l = 0: return o = 0 and lse = -inf for it "
              "(guard the division and the log), never NaN.")
HINT_RETURN = "Return a tuple of arrays with the shapes in the docstring."
HINT_FORWARD = ("The full loop disagrees with dense attention. Make the three smaller checks "
                "pass first; then look for state that leaks between query blocks.")

_RTOL, _ATOL = 1e-9, 1e-12      # float64 throughout: only rounding differs


# -- the FlashAttention-2 loop the checker runs --------------------------------

def run_forward(q, k, v, tile_step, finalize, causal_tile_mask=None, *, block_q: int,
                block_k: int, causal: bool, scale: float | None = None):
    """O (Tq, d) and lse (Tq,) of one head from the learner's step, in the FA2 order.

    Args:
        q: (Tq, d); k, v: (Tk, d), float64.
        tile_step, finalize: the learner's functions (see the module docstring).
        causal_tile_mask: the learner's mask function; None uses the course's own.
        block_q: Br, query rows per tile; block_k: Bc, key columns per tile.
        causal: bottom-right aligned causal mask; fully hidden tiles are skipped.
        scale: default 1/sqrt(d).
    """
    tq, d = q.shape
    tk = k.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    o = np.zeros((tq, d))                                       # (Tq, d)
    lse = np.zeros(tq)                                          # (Tq,)
    for q0 in range(0, tq, block_q):
        q1 = min(q0 + block_q, tq)
        m = np.full(q1 - q0, -np.inf)                           # (Br,)
        l = np.zeros(q1 - q0)                                   # (Br,)
        acc = np.zeros((q1 - q0, d))                            # (Br, d)
        for k0 in range(0, tk, block_k):
            k1 = min(k0 + block_k, tk)
            if causal:
                mask_fn = causal_tile_mask or _mask_reference
                mask = np.asarray(mask_fn(q0, q1, k0, k1, tq, tk), dtype=bool)
                if mask.shape != (q1 - q0, k1 - k0):
                    raise ValueError(f"causal_tile_mask returned shape {mask.shape} for the "
                                     f"tile rows [{q0}, {q1}) x cols [{k0}, {k1}), expected "
                                     f"{(q1 - q0, k1 - k0)}")
                if not mask.any():                              # hidden tile: skip it
                    continue
            else:
                mask = np.ones((q1 - q0, k1 - k0), dtype=bool)
            out = tile_step(q[q0:q1], k[k0:k1], v[k0:k1], mask, m, l, acc, scale)
            m, l, acc = (np.asarray(x, dtype=np.float64) for x in out)
        o_i, lse_i = finalize(m, l, acc)
        o[q0:q1], lse[q0:q1] = o_i, lse_i
    return o, lse


# -- the spec, and typical mistakes simulated on the same inputs -----------------

def _mask_reference(q0, q1, k0, k1, tq, tk):
    return visible_mask(tq, tk, True, q0, q1, k0, k1)


def _safe(m):
    return np.where(np.isneginf(m), 0.0, m)


def _step(q_i, k_j, v_j, mask, m, l, acc, scale, *, rescale_l=True, rescale_acc=True,
          keep_old_max=True, use_mask=True):
    s = scale * (q_i @ k_j.T)                                   # (Br, Bc)
    if use_mask:
        s = np.where(mask, s, -np.inf)
    m_tile = s.max(axis=1)                                      # (Br,)
    m_new = np.maximum(m, m_tile) if keep_old_max else m_tile
    with np.errstate(over="ignore", invalid="ignore"):
        p = np.exp(s - _safe(m_new)[:, None])                   # (Br, Bc)
        alpha = np.exp(m - _safe(m_new))                        # (Br,)
    l_new = (alpha * l if rescale_l else l) + p.sum(axis=1)
    acc_new = (alpha[:, None] * acc if rescale_acc else acc) + p @ v_j
    return m_new, l_new, acc_new


def _finalize(m, l, acc):
    seen = l > 0
    o = np.where(seen[:, None], acc / np.where(seen, l, 1.0)[:, None], 0.0)
    with np.errstate(divide="ignore"):
        lse = np.where(seen, m + np.log(np.where(seen, l, 1.0)), -np.inf)
    return o, lse


def _as_tuple(out, n):
    if isinstance(out, list):
        out = tuple(out)
    if isinstance(out, tuple) and len(out) == n:
        return tuple(np.asarray(o, dtype=np.float64) for o in out)
    return out


def _matches(candidate):
    def predicate(yours, _expected):
        if not isinstance(yours, tuple) or len(yours) != len(candidate):
            return False
        return all(np.shape(y) == np.shape(c) and
                   np.allclose(y, c, rtol=1e-7, atol=1e-12, equal_nan=True)
                   for y, c in zip(yours, candidate, strict=True))
    return predicate


def _matches_array(candidate):
    def predicate(yours, _expected):
        y = np.asarray(yours)
        return y.shape == candidate.shape and np.array_equal(y.astype(bool), candidate)
    return predicate


def _shape_differs(yours, expected):
    return np.shape(yours) != np.shape(expected)


def _has_nan(yours, _expected):
    parts = yours if isinstance(yours, tuple) else (yours,)
    return any(np.isnan(np.asarray(p, dtype=np.float64)).any() for p in parts)


def _not_tuple(n):
    return lambda yours, _expected: not (isinstance(yours, tuple) and len(yours) == n)


# -- checker 1: the causal mask of one tile --------------------------------------

#: (q0, q1, k0, k1, Tq, Tk) tiles: square, ragged, Tq < Tk, Tq > Tk.
MASK_TILES = [
    ("diagonal tile, Tq = Tk = 10", (4, 8, 4, 8, 10, 10)),
    ("ragged last tile, Tq = Tk = 10", (8, 10, 8, 10, 10, 10)),
    ("Tq = 10 < Tk = 16 (offset +6)", (4, 8, 6, 11, 10, 16)),
    ("Tq = 15 > Tk = 9 (offset -6, some rows see nothing)", (4, 9, 0, 5, 15, 9)),
    ("ragged corner, Tq = 7, Tk = 9", (6, 7, 5, 9, 7, 9)),
]


def check_causal_tile_mask(causal_tile_mask, *, verbose: bool = True) -> Result:
    """Check `causal_tile_mask(q0, q1, k0, k1, t_query, t_key)` on five tiles."""
    cases = []
    for name, (q0, q1, k0, k1, tq, tk) in MASK_TILES:
        i = np.arange(q0, q1)[:, None]                          # global query positions
        j = np.arange(k0, k1)[None, :]                          # global key positions
        off = tk - tq
        expected = j <= i + off                                 # (q1-q0, k1-k0)
        r = np.arange(q1 - q0)[:, None]
        c = np.arange(k1 - k0)[None, :]
        diagnoses = [
            (_shape_differs, HINT_RAGGED),
            (_matches_array(j <= i), HINT_TOP_LEFT),
            (_matches_array(j < i + off), HINT_OFF_BY_ONE),
            (_matches_array(j <= i + off + 1), HINT_OFF_BY_ONE),
            (_matches_array(c <= r + off), HINT_LOCAL_INDEX),
            (_matches_array(c <= r), HINT_LOCAL_INDEX),
            (_matches_array(~expected), HINT_INVERTED),
        ]

        def run(fn, args=(q0, q1, k0, k1, tq, tk), expected=expected):
            return np.asarray(fn(*args)), expected

        cases.append(Case(f"{name}: rows [{q0},{q1}) x cols [{k0},{k1})", run,
                          "Query i sees key j iff j <= i + (Tk - Tq).", diagnoses,
                          rtol=0, atol=0))
    return run_checks("causal_tile_mask(q0, q1, k0, k1, t_query, t_key)", causal_tile_mask,
                      cases, verbose=verbose)


# -- checker 2: one tile step ------------------------------------------------------

def _step_inputs(seed, br, bc, d, *, state="empty", boost=0.0, masked_rows=(), causal=False):
    rng = np.random.default_rng(seed)
    q_i = rng.standard_normal((br, d))                          # (Br, d)
    k_j = rng.standard_normal((bc, d)) * (1.0 + boost)          # (Bc, d)
    v_j = rng.standard_normal((bc, d))                          # (Bc, d)
    mask = np.ones((br, bc), dtype=bool)
    if causal:
        mask = np.arange(bc)[None, :] <= np.arange(br)[:, None] + 1
    for r in masked_rows:
        mask[r] = False
    if state == "empty":
        m, l, acc = np.full(br, -np.inf), np.zeros(br), np.zeros((br, d))
    else:                                                       # a state from an earlier tile
        m = rng.normal(0.0, 0.5, br)
        l = rng.uniform(1.0, 4.0, br)
        acc = rng.standard_normal((br, d)) * l[:, None]
        for r in masked_rows:                                   # still empty for those rows
            m[r], l[r], acc[r] = -np.inf, 0.0, 0.0
    return q_i, k_j, v_j, mask, m, l, acc


def check_tile_step(tile_step, *, verbose: bool = True) -> Result:
    """Check `tile_step(q_i, k_j, v_j, mask, m, l, acc, scale) -> (m, l, acc)`.

    Cases: the first tile (empty state); a later tile whose scores raise the max
    (the rescale matters); a partial causal tile with a fully masked row whose
    state is still empty; a ragged 3 x 2 tile with d = 1. The scale is 0.37
    everywhere, on purpose not 1/sqrt(d).
    """
    scale = 0.37
    specs = [
        ("first tile: empty state, Br = 5, Bc = 7, d = 3",
         dict(seed=10, br=5, bc=7, d=3)),
        ("later tile whose scores raise the max: Br = 6, Bc = 4, d = 5",
         dict(seed=11, br=6, bc=4, d=5, state="earlier", boost=3.0)),
        ("partial causal tile, row 0 fully masked and still empty",
         dict(seed=12, br=4, bc=6, d=3, state="earlier", masked_rows=(0,), causal=True)),
        ("ragged tile: Br = 3, Bc = 2, d = 1",
         dict(seed=13, br=3, bc=2, d=1, state="earlier", boost=2.0)),
    ]
    cases = []
    for name, spec in specs:
        args = _step_inputs(**spec)
        q_i, k_j, v_j, mask, m, l, acc = args
        d = q_i.shape[1]
        with np.errstate(all="ignore"):
            expected = _step(*args, scale)
            wrong = [
                (_step(*args, scale, rescale_acc=False), HINT_RESCALE),
                (_step(*args, scale, rescale_l=False), HINT_RESCALE),
                (_step(*args, scale, rescale_l=False, rescale_acc=False), HINT_RESCALE),
                (_step(*args, scale, keep_old_max=False), HINT_MAX),
                (_step(*args, 1.0 / math.sqrt(d)), HINT_SCALE),
                (_step(*args, 1.0), HINT_SCALE),
                (_step(*args, scale, use_mask=False), HINT_MASK_IGNORED),
            ]
        diagnoses = [(_not_tuple(3), HINT_RETURN), (_has_nan, HINT_NEG_INF)]
        diagnoses += [(_matches(w), hint) for w, hint in wrong]

        def run(fn, args=args, expected=expected):
            copies = tuple(a.copy() for a in args)
            return _as_tuple(fn(*copies, scale), 3), expected

        cases.append(Case(name, run, "Compare your step with the update rules in the "
                          "docstring, one line at a time.", diagnoses,
                          rtol=_RTOL, atol=_ATOL))
    return run_checks("tile_step(q_i, k_j, v_j, mask, m, l, acc, scale)", tile_step, cases,
                      verbose=verbose)


# -- checker 3: the final normalisation ----------------------------------------------

def check_finalize(finalize, *, verbose: bool = True) -> Result:
    """Check `finalize(m, l, acc) -> (o, lse)`, including rows with no visible key."""
    rng = np.random.default_rng(20)
    m = rng.normal(0.0, 2.0, 6)                                 # (Br,)
    l = rng.uniform(1.0, 9.0, 6)                                # (Br,)
    acc = rng.standard_normal((6, 4)) * l[:, None]              # (Br, d)
    m_e, l_e, acc_e = m.copy(), l.copy(), acc.copy()
    m_e[[1, 4]], l_e[[1, 4]], acc_e[[1, 4]] = -np.inf, 0.0, 0.0  # two empty rows

    def case(m, l, acc):
        expected = _finalize(m, l, acc)
        with np.errstate(all="ignore"):
            no_divide = (acc, expected[1])
            no_m = (expected[0], np.log(l))
        diagnoses = [(_not_tuple(2), HINT_RETURN), (_has_nan, HINT_EMPTY),
                     (_matches(no_divide), HINT_DIVIDE), (_matches(no_m), HINT_LSE)]

        def run(fn):
            return _as_tuple(fn(m.copy(), l.copy(), acc.copy()), 2), expected
        return run, diagnoses

    run1, diag1 = case(m, l, acc)
    run2, diag2 = case(m_e, l_e, acc_e)
    cases = [
        Case("six rows, every row saw keys", run1, "o = acc / l[:, None]; lse = m + log(l).",
             diag1, rtol=_RTOL, atol=_ATOL),
        Case("rows 1 and 4 saw no key (m = -inf, l = 0)", run2, HINT_EMPTY, diag2,
             rtol=_RTOL, atol=_ATOL),
    ]
    return run_checks("finalize(m, l, acc)", finalize, cases, verbose=verbose)


# -- checker 4: everything in the loop, against dense attention -----------------------

#: (name, Tq, Tk, d, Br, Bc, causal, spread): ragged, causal, Tq != Tk, extreme scores.
FORWARD_CASES = [
    ("non-causal, Tq = 37, Tk = 29, d = 5, Br = 8, Bc = 6", 37, 29, 5, 8, 6, False, 1.0),
    ("causal, Tq = 23 < Tk = 40, d = 4, Br = 7, Bc = 9", 23, 40, 4, 7, 9, True, 1.0),
    ("causal, Tq = 40 > Tk = 23 (rows with no key), Br = 6, Bc = 5", 40, 23, 4, 6, 5, True, 1.0),
    ("causal 1 x 1 tiles, Tq = Tk = 9, d = 2", 9, 9, 2, 1, 1, True, 1.0),
    ("blocks larger than T, causal, Tq = 13, Tk = 11, d = 3", 13, 11, 3, 64, 64, True, 1.0),
    ("extreme scores (|S| ~ 1e4), causal, Tq = 17, Tk = 21, d = 3", 17, 21, 3, 4, 8, True, 60.0),
]


def _dense_top_left(q, k, v, scale):
    tq, tk = q.shape[0], k.shape[0]
    s = scale * (q @ k.T)
    s = np.where(np.arange(tk)[None, :] <= np.arange(tq)[:, None], s, -np.inf)
    m = _safe(s.max(axis=1))
    p = np.exp(s - m[:, None])
    l = p.sum(axis=1)
    return _finalize(m, l, p @ v)


def check_tiled_forward(tile_step, finalize, causal_tile_mask, *,
                        verbose: bool = True) -> Result:
    """Plug the three functions into `run_forward` and compare with dense attention.

    Six cases (see FORWARD_CASES): lengths that are not multiples of the tile,
    Tq != Tk both ways, causal rows with no visible key, 1 x 1 tiles, blocks
    larger than the sequence, and scores of order 1e4.
    """
    cases = []
    for n, (name, tq, tk, d, br, bc, causal, spread) in enumerate(FORWARD_CASES):
        rng = np.random.default_rng(30 + n)
        q = rng.standard_normal((tq, d)) * spread               # (Tq, d)
        k = rng.standard_normal((tk, d)) * spread               # (Tk, d)
        v = rng.standard_normal((tk, d))                        # (Tk, d)
        expected = reference.attention(q, k, v, causal=causal)
        diagnoses = [(_not_tuple(2), HINT_RETURN), (_has_nan, HINT_NEG_INF)]
        if causal:
            top_left = _dense_top_left(q, k, v, 1.0 / math.sqrt(d))
            diagnoses.append((_matches(top_left), HINT_TOP_LEFT))

        def run(both, q=q, k=k, v=v, br=br, bc=bc, causal=causal, expected=expected):
            step, fin, mask = both
            out = run_forward(q, k, v, step, fin, mask, block_q=br, block_k=bc, causal=causal)
            return _as_tuple(out, 2), expected

        cases.append(Case(name, run, HINT_FORWARD, diagnoses, rtol=_RTOL, atol=_ATOL))
    return run_checks("the tiled forward built from your three functions",
                      (tile_step, finalize, causal_tile_mask), cases, verbose=verbose)
