"""Checkers for lab 05: the per-tile step of FlashAttention's backward pass.

The learner writes three functions (one head, float64, paper notation):

    compute_delta(do, o) -> (Tq,)
        D_i = rowsum(dO_i * O_i) = sum_c dO[i, c] O[i, c]; it replaces the row sum
        sum_j P_ij dP_ij of the softmax Jacobian.

    recompute_p(q_i, k_j, mask, lse_i, scale) -> (Br, Bc)
        P_ij = exp(scale q_i k_j^T - lse_i): the probabilities, recomputed exactly
        from the forward's logsumexp; 0 where mask is False and in rows whose
        lse is -inf (no visible key).

    tile_ds(p, do_i, v_j, delta_i) -> (Br, Bc)
        dP = dO_i V_j^T and dS = P * (dP - D_i[:, None]).

`run_backward` is the FlashAttention-2 backward loop (outer over key blocks, inner
over query blocks) into which the checker plugs those functions; it forms
dV_j += P^T dO_i, dQ_i += scale dS K_j, dK_j += scale dS^T Q_i itself.
"""

from __future__ import annotations

import math

import numpy as np

from .. import reference
from ..geometry import tile_visibility, visible_mask
from ._harness import Case, Result, run_checks

# -- hints (tests assert on these exact strings) ------------------------------
HINT_DELTA_O = ("D uses both tensors: D_i = sum_c dO[i, c] * O[i, c], the dot product of "
                "row i of dO with row i of O (not O with itself, not dO with itself).")
HINT_DELTA_AXIS = ("Sum over the head dimension (axis=1, the d columns), giving one number "
                   "per query row: shape (Tq,).")
HINT_FORGOT_D = ("You forgot to subtract D: the softmax Jacobian gives "
                 "dS = P * (dP - D[:, None]), not P * dP. D_i = sum_j P_ij dP_ij is the "
                 "'everything else in the row' term of the Jacobian.")
HINT_O_FOR_DO = ("dP comes from the output GRADIENT: dP = dO_i @ V_j.T. Using the output O "
                 "itself (O_i @ V_j.T) gives the wrong dP.")
HINT_NO_P = ("Multiply by P: dS = P * (dP - D[:, None]) elementwise; (dP - D) alone is the "
             "gradient with respect to P, not to S.")
HINT_D_SIGN = "Subtract D, do not add it: dS = P * (dP - D[:, None])."
HINT_NO_LSE = ("P must be normalised: subtract the row's logsumexp, P = exp(S - lse[:, None]). "
               "exp(S) alone is the unnormalised weight (its rows do not sum to 1).")
HINT_TILE_MAX = ("Use the forward's lse, not this tile's max: exp(S - rowmax(S)) is "
                 "normalised to this tile only. lse_i = m_i + log(l_i) already holds the "
                 "whole row's max AND sum, so P = exp(S - lse) is exact with no second pass.")
HINT_SCALE = "Apply the `scale` argument: S = scale * q_i @ k_j.T, as in the forward."
HINT_MASK = ("Masked entries must be exactly 0: set S to -inf where mask is False before "
             "the exp (exp(-inf) = 0), so hidden keys get no probability and no gradient.")
HINT_EMPTY_ROW = ("A row with lse = -inf saw no key in the forward: its P must be 0, not "
                  "NaN or inf. Use a stand-in (e.g. +inf) for lse in those rows, or "
                  "np.where(np.isneginf(lse), ...), so that exp(S - lse) = 0 there.")
HINT_RETURN = "Return a numpy array with the shape in the docstring."
HINT_FULL = ("The full backward disagrees with the reference. Make the three smaller checks "
             "pass first.")

_RTOL, _ATOL = 1e-9, 1e-12      # float64 throughout: only rounding differs


# -- the spec ------------------------------------------------------------------------

def _delta(do, o):
    return (do * o).sum(axis=1)


def _p(q_i, k_j, mask, lse_i, scale):
    s = np.where(mask, scale * (q_i @ k_j.T), -np.inf)         # (Br, Bc)
    lse_safe = np.where(np.isneginf(lse_i), np.inf, lse_i)      # empty rows -> P = 0
    return np.exp(s - lse_safe[:, None])


def _ds(p, do_i, v_j, delta_i):
    return p * (do_i @ v_j.T - delta_i[:, None])


def run_backward(q, k, v, o, lse, do, compute_delta, recompute_p, tile_ds, *,
                 block_q: int, block_k: int, causal: bool, scale: float | None = None):
    """(dq, dk, dv) of one head from the learner's three functions, FA2 backward order."""
    tq, d = q.shape
    tk = k.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    delta = np.asarray(compute_delta(do, o), dtype=np.float64)  # (Tq,)
    if delta.shape != (tq,):
        raise ValueError(f"compute_delta returned shape {delta.shape}, expected {(tq,)}")
    dq = np.zeros((tq, d))
    dk = np.zeros((tk, d))
    dv = np.zeros((tk, d))
    for k0 in range(0, tk, block_k):
        k1 = min(k0 + block_k, tk)
        for q0 in range(0, tq, block_q):
            q1 = min(q0 + block_q, tq)
            if tile_visibility(q0, q1, k0, k1, tq, tk, causal) == "hidden":
                continue
            mask = visible_mask(tq, tk, causal, q0, q1, k0, k1)
            p = np.asarray(recompute_p(q[q0:q1], k[k0:k1], mask, lse[q0:q1], scale))
            ds = np.asarray(tile_ds(p, do[q0:q1], v[k0:k1], delta[q0:q1]))
            dv[k0:k1] += p.T @ do[q0:q1]
            dq[q0:q1] += scale * (ds @ k[k0:k1])
            dk[k0:k1] += scale * (ds.T @ q[q0:q1])
    return dq, dk, dv


# -- helpers for diagnoses -------------------------------------------------------------

def _matches(candidate):
    def predicate(yours, _expected):
        y = np.asarray(yours, dtype=np.float64)
        c = np.asarray(candidate, dtype=np.float64)
        return y.shape == c.shape and np.allclose(y, c, rtol=1e-7, atol=1e-12, equal_nan=True)
    return predicate


def _bad_shape(yours, expected):
    return np.shape(yours) != np.shape(expected)


def _nonfinite(yours, _expected):
    return not np.isfinite(np.asarray(yours, dtype=np.float64)).all()


def _masked_nonzero(mask):
    def predicate(yours, _expected):
        y = np.asarray(yours, dtype=np.float64)
        return y.shape == mask.shape and bool(np.any(y[~mask] != 0))
    return predicate


def _tile(seed, br, bc, d):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((br, d))
    k = rng.standard_normal((bc, d))
    v = rng.standard_normal((bc, d))
    do = rng.standard_normal((br, d))
    return q, k, v, do


# -- checker 1: D -----------------------------------------------------------------------

def check_compute_delta(compute_delta, *, verbose: bool = True) -> Result:
    """Check `compute_delta(do, o) -> (Tq,)` on two shapes."""
    cases = []
    for name, (tq, d, seed) in (("Tq = 6, d = 4", (6, 4, 1)), ("Tq = 5, d = 5", (5, 5, 2))):
        rng = np.random.default_rng(seed)
        do = rng.standard_normal((tq, d))
        o = rng.standard_normal((tq, d))
        expected = _delta(do, o)
        diagnoses = [(_matches((do * o).sum(axis=0)), HINT_DELTA_AXIS),
                     (_bad_shape, HINT_DELTA_AXIS),
                     (_matches((o * o).sum(axis=1)), HINT_DELTA_O),
                     (_matches((do * do).sum(axis=1)), HINT_DELTA_O)]

        def run(fn, do=do, o=o, expected=expected):
            return np.asarray(fn(do.copy(), o.copy()), dtype=np.float64), expected
        cases.append(Case(name, run, "D_i = sum_c dO[i, c] * O[i, c].", diagnoses,
                          rtol=_RTOL, atol=_ATOL))
    return run_checks("compute_delta(do, o)", compute_delta, cases, verbose=verbose)


# -- checker 2: P recomputed from lse ------------------------------------------------------

def check_recompute_p(recompute_p, *, verbose: bool = True) -> Result:
    """Check `recompute_p(q_i, k_j, mask, lse_i, scale)` against the forward's P.

    Cases: a full tile; a tile with a causal mask; a tile with a row that saw no key
    (lse = -inf, mask all False). lse comes from the whole row (several tiles), so a
    tile-local softmax is caught. scale = 0.37 on purpose.
    """
    scale = 0.37
    cases = []
    specs = [("full tile, Br = 4, Bc = 5, d = 3", 40, 4, 5, 3, "full"),
             ("partial causal tile, Br = 5, Bc = 6, d = 4", 41, 5, 6, 4, "causal"),
             ("row 0 saw no key (lse = -inf), Br = 4, Bc = 3, d = 2", 42, 4, 3, 2, "empty")]
    for name, seed, br, bc, d, kind in specs:
        q, k, _, _ = _tile(seed, br, bc, d)
        rng = np.random.default_rng(seed + 100)
        k_rest = rng.standard_normal((7, d))                    # keys of other tiles
        mask = np.ones((br, bc), dtype=bool)
        if kind == "causal":
            mask = np.arange(bc)[None, :] <= np.arange(br)[:, None] + 1
        if kind == "empty":
            mask[0] = False
        s_all = np.concatenate([np.where(mask, scale * (q @ k.T), -np.inf),
                                scale * (q @ k_rest.T)], axis=1)
        if kind == "empty":
            s_all[0] = -np.inf
        lse = reference.logsumexp(s_all)                        # (Br,) whole-row lse
        expected = _p(q, k, mask, lse, scale)
        s = np.where(mask, scale * (q @ k.T), -np.inf)
        s_nomask = scale * (q @ k.T)
        with np.errstate(all="ignore"):
            tile_max = np.exp(s - np.where(np.isfinite(s.max(1)), s.max(1), 0)[:, None])
            wrong = [
                (np.exp(s), HINT_NO_LSE),
                (tile_max, HINT_TILE_MAX),
                (tile_max / tile_max.sum(1, keepdims=True), HINT_TILE_MAX),
                (_p(q, k, mask, lse, 1.0), HINT_SCALE),
                (_p(q, k, mask, lse, 1.0 / math.sqrt(d)), HINT_SCALE),
                (np.exp(s_nomask - np.where(np.isneginf(lse), np.inf, lse)[:, None]),
                 HINT_MASK),
            ]
        diagnoses = [(_bad_shape, HINT_RETURN), (_nonfinite, HINT_EMPTY_ROW)]
        diagnoses += [(_matches(w), hint) for w, hint in wrong]
        diagnoses.append((_masked_nonzero(mask), HINT_MASK))

        def run(fn, args=(q, k, mask, lse), expected=expected):
            with np.errstate(all="ignore"):
                out = fn(*(a.copy() for a in args), scale)
            return np.asarray(out, dtype=np.float64), expected
        cases.append(Case(name, run, "P = exp(scale * q_i @ k_j.T - lse[:, None]), 0 where "
                          "masked.", diagnoses, rtol=_RTOL, atol=_ATOL))
    return run_checks("recompute_p(q_i, k_j, mask, lse_i, scale)", recompute_p, cases,
                      verbose=verbose)


# -- checker 3: dS ------------------------------------------------------------------------

def check_tile_ds(tile_ds, *, verbose: bool = True) -> Result:
    """Check `tile_ds(p, do_i, v_j, delta_i) -> dS (Br, Bc)`.

    The inputs come from a real attention problem (P from the forward, D = rowsum(dO*O)),
    so that a version that used O in place of dO can be recognised.
    """
    cases = []
    for name, (tq, tk, d, seed) in (("Br = 5, Bc = 4, d = 3", (5, 4, 3, 50)),
                                    ("Br = 3, Bc = 7, d = 2", (3, 7, 2, 51))):
        rng = np.random.default_rng(seed)
        q, k, v = (rng.standard_normal((t, d)) for t in (tq, tk, tk))
        do = rng.standard_normal((tq, d))
        o, lse = reference.attention(q, k, v)
        p = np.exp(reference.scores(q, k) - lse[:, None])       # (Br, Bc), a whole row here
        delta = _delta(do, o)
        expected = _ds(p, do, v, delta)
        wrong = [(p * (do @ v.T), HINT_FORGOT_D),
                 (p * (o @ v.T - delta[:, None]), HINT_O_FOR_DO),
                 (p * (o @ v.T), HINT_O_FOR_DO),
                 (do @ v.T - delta[:, None], HINT_NO_P),
                 (p * (do @ v.T + delta[:, None]), HINT_D_SIGN)]
        diagnoses = [(_bad_shape, HINT_RETURN)] + [(_matches(w), h) for w, h in wrong]

        def run(fn, args=(p, do, v, delta), expected=expected):
            out = fn(*(a.copy() for a in args))
            return np.asarray(out, dtype=np.float64), expected
        cases.append(Case(name, run, "dS = P * (dO_i @ V_j.T - D[:, None]).", diagnoses,
                          rtol=_RTOL, atol=_ATOL))
    return run_checks("tile_ds(p, do_i, v_j, delta_i)", tile_ds, cases, verbose=verbose)


# -- checker 4: the whole backward ----------------------------------------------------------

#: (name, Tq, Tk, d, Br, Bc, causal)
BACKWARD_CASES = [
    ("non-causal, Tq = 13, Tk = 11, d = 3, Br = 4, Bc = 5", 13, 11, 3, 4, 5, False),
    ("causal, Tq = 9 < Tk = 14, d = 4, Br = 3, Bc = 4", 9, 14, 4, 3, 4, True),
    ("causal, Tq = 15 > Tk = 8 (rows with no key), Br = 4, Bc = 3", 15, 8, 2, 4, 3, True),
]


def check_backward(compute_delta, recompute_p, tile_ds, *, verbose: bool = True) -> Result:
    """Plug the three functions into `run_backward`; compare with attention_backward."""
    cases = []
    for n, (name, tq, tk, d, br, bc, causal) in enumerate(BACKWARD_CASES):
        rng = np.random.default_rng(60 + n)
        q, k, v = (rng.standard_normal((t, d)) for t in (tq, tk, tk))
        do = rng.standard_normal((tq, d))
        o, lse = reference.attention(q, k, v, causal=causal)
        expected = reference.attention_backward(q, k, v, do, causal=causal)

        def run(fns, args=(q, k, v, o, lse, do), br=br, bc=bc, causal=causal,
                expected=expected):
            with np.errstate(all="ignore"):
                out = run_backward(*args, *fns, block_q=br, block_k=bc, causal=causal)
            return tuple(out), expected
        cases.append(Case(name, run, HINT_FULL, [], rtol=_RTOL, atol=_ATOL))
    return run_checks("the tiled backward built from your three functions",
                      (compute_delta, recompute_p, tile_ds), cases, verbose=verbose)
