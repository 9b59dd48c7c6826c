"""Checker for lab 14's going-further part: flex_forward, the tiled forward driven by a
block mask (see `flashcourse.labs.variants` for the lab's other parts and conventions).

    flex_forward(q, k, v, block_mask, mask_mod, score_mod, scale, block_q, block_k)
        -> (o, lse): per query block, the full key blocks without a mask_mod call, the
        partial ones with it, the empty ones never read; score_mod on scale Q_i K_j^T; the
        online softmax of lab 03.

Checked against the dense float64 reference with the same mask and score function, with a
watched mask_mod and score_mod that count which pairs were evaluated.
"""

from __future__ import annotations

import numpy as np

from ..variants import library
from ..variants.block_mask import EMPTY, PARTIAL, create_block_mask
from ..variants.mods import mask_tile, score_tile
from ..variants.reference import reference
from ._harness import Case, Result, parts_close, plain, run_checks
from .variants import watched

# -- going further: the forward driven by the block mask ------------------------------------

HINT_FORWARD = (
    "Your (o, lse) differ from the dense float64 attention with the same mask and score "
    "function. Per tile: S = score_mod(scale Q_i K_j^T); on a partial tile, -inf where the "
    "mask hides a pair; then the online softmax of lab 03 (m, l, acc).",
    "Check one query block with blocks larger than T first (one tile), then ragged tiles.")
HINT_FWD_MASK_ON_FULL = (
    "Your forward evaluates the mask on full tiles: the numbers are "
    "right, but the point of the full list is that those tiles need no mask_mod call at "
    "all. Call the mask only for the key blocks of kv_indices.",
    "Visit full blocks and partial blocks separately (or carry a flag per visit) and mask "
    "only when the tile is partial.")
HINT_FWD_EMPTY_VISITED = (
    "Your forward forms scores on empty tiles (key blocks in neither list): the kernel "
    "must skip them, reading neither K_j nor V_j.",
    "Loop over the listed key blocks only: full_kv_indices[i, :full_kv_num_blocks[i]] "
    "and kv_indices[i, :kv_num_blocks[i]].")
HINT_FWD_LOCAL = (
    "Your mask_mod or score_mod got positions counted inside the tile (rows 0 .. Br - 1 or "
    "columns 0 .. Bc - 1): every tile was evaluated as if it were in the first query block "
    "or the first key block. Both take the positions in the "
    "whole sequence, q_idx = q0 + r and kv_idx = k0 + c, as in FlexAttention (a mask or a "
    "score that depends on positions, like a window or ALiBi, needs them).",
    "The row positions of query block i start at q0 = i x block_q and those of key block j "
    "at k0 = j x block_k: hand mask_tile and score_tile those, not 0 .. Br - 1 and "
    "0 .. Bc - 1.")
HINT_FWD_PARTIAL_UNMASKED = (
    "Your forward does not apply the mask on partial tiles: hidden pairs of a partial "
    "tile are attended.",
    "On a partial tile, set S to -inf where mask_mod says False before the softmax step.")
HINT_FWD_AFTER_MAX = (
    "score_mod is applied after the running max is subtracted: the softcap then caps "
    "S - m instead of S. Apply score_mod to the scaled scores first; take the max of the "
    "MODIFIED scores.",
    "S = score_mod(scale Q_i K_j^T); m_new = max(m, rowmax(S)); P = exp(S - m_new).")
HINT_FWD_ON_PROBS = (
    "score_mod is applied to probabilities (after exp): it changes scores, before the "
    "softmax.",
    "Call score_mod on scale Q_i K_j^T, then mask, then the online softmax.")
HINT_FWD_FULL_ONLY = (
    "Your forward visits only one of the two lists: the full key blocks and the partial "
    "ones both hold visible pairs.",
    "Loop over full_kv_indices[i, :full_kv_num_blocks[i]] and kv_indices[i, "
    ":kv_num_blocks[i]].")
HINT_FWD_NOTHING = (
    "Every row of yours came out as a row that sees no key (o = 0, lse = -inf), though "
    "most rows see keys. Either no key block was visited (here every visible tile is "
    "partial, listed in kv_indices: a loop over the full list alone visits nothing), or "
    "your l became NaN, and NaN > 0 is False. A NaN comes from inf * 0: alpha = "
    "exp(m_old - m_new) is 0 on a row's first tile (m_old = -inf), while its inverse "
    "exp(m_new - m_old) is inf there.",
    "Print l after the first tile of one query block: it must be the row sums of P, above 0 "
    "in every row that sees a key. Then check that the loop visits both lists.")
HINT_FWD_RAGGED = (
    "Two arrays of one tile have different sizes (the error above names the shapes): "
    "the last key block (or query block) is shorter when T is not a multiple of the "
    "block. Its end is min((j + 1) block_k, Tk), and the key positions, the rows of K and "
    "V and the scores must all stop there.",
    "Compute k0 and k1 once per tile, with k1 clipped to Tk, and take the positions "
    "(np.arange(k0, k1)) and the slices of K and V from those two numbers.")
HINT_FWD_RESCALE = (
    "Missing rescale: when a tile raises a row's running max, the sum l and the accumulator "
    "acc were measured against the OLD max and must both be multiplied by exp(m_old - "
    "m_new) before this tile is added (lab 03's update rule). If your code multiplies by "
    "alpha, alpha is 1: exp(m - m_new) taken after m = m_new is exp(0). Take alpha while m "
    "still holds the old max.",
    "l = alpha l + rowsum(P) and acc = alpha acc + P V_j, with alpha = exp(m_old - m_new) "
    "computed before m = m_new.")
HINT_FWD_OVERFLOW = (
    "Your o or lse holds inf or NaN in a case whose scores are near 800: exp overflows "
    "float64 above about 709, so exp(S) (or S minus anything below the row's max) gives "
    "inf, and inf / inf is NaN. Subtract the running max before every exponential: P = "
    "exp(S - m_new), with m_new = max(m_old, rowmax(S)), so that no exponent is above 0.",
    "P = exp(S - m_new[:, None]) and alpha = exp(m_old - m_new), both <= 1; lse = m + "
    "log(l) adds the max back.")
HINT_FWD_RESCALE_ACC = (
    "Half a rescale: your sum l is brought to the new max but the accumulator acc is not. "
    "Both are sums against the same max; when it grows, both must be multiplied by "
    "exp(m_old - m_new) before this tile is added.",
    "acc = alpha[:, None] acc + P V_j, with the alpha that multiplies l.")
HINT_FWD_RESCALE_L = (
    "Half a rescale: your accumulator acc is brought to the new max but the sum l is not. "
    "Both are sums against the same max; when it grows, both must be multiplied by "
    "exp(m_old - m_new) before this tile is added.",
    "l = alpha l + rowsum(P), with the alpha that multiplies acc.")
HINT_FWD_NO_SCORE = (
    "Your forward never applies score_mod: the score change (here a softcap) acts on every "
    "visited tile's scores, S = score_mod(scale Q_i K_j^T), before the mask and the max.",
    "Pass each visited tile's scaled scores through score_tile(score_mod, ...) first.")
HINT_FWD_SCALE_AFTER = (
    "score_mod gets the unscaled scores: the scale multiplies Q_i K_j^T first, and score_mod "
    "acts on scale Q_i K_j^T (the softcap caps the scaled score).",
    "S = score_mod(scale Q_i K_j^T), not scale score_mod(Q_i K_j^T).")
HINT_FWD_STANDIN = (
    "NaN where a row has seen no key yet: its running max m_new is -inf, and exp(S - m_new) "
    "or exp(m_old - m_new) is exp(-inf + inf) = NaN. Subtract a finite stand-in (0) where "
    "m_new is -inf, as in lab 03.",
    "m_safe = 0 where m_new is -inf, else m_new; P = exp(S - m_safe), alpha = exp(m - m_safe).")
HINT_FWD_EMPTY_ROW = (
    "A row that sees no key at all (l = 0) gets NaN from acc / l: its output is 0 and its "
    "lse -inf, as in the dense reference.",
    "Divide only where l > 0: o = acc / l there, 0 elsewhere; lse = -inf where l = 0.")
HINT_FWD_FINITE = (
    "Your hidden pairs hold a large finite number (such as -1e30), not -inf: a row that "
    "sees no key of a tile then has that number as its max, every exp(s - m) is 1, and the "
    "hidden keys are averaged in. The dense reference gives such a row o = 0 and lse = -inf.",
    "Mask with -np.inf; the stand-in m_safe = 0 where m_new is -inf keeps the exponentials "
    "finite.")
HINT_FWD_LSE = (
    "Your o is right but lse is not: lse = m + log(l) for each row, the natural log of the "
    "row's sum of exp(S) with the running max added back; -inf for a row that sees no key.",
    "lse = m + np.log(l) where l > 0, else -inf.")

SCALE = 0.37


def _identity(score, b, h, q_idx, kv_idx):
    return score


#: (name, mask factory, softcap cap (None: no score change), Tq, Tk, d, Br, Bc, spread[,
#: big]): with `big`, column 0 of q and k is sqrt(big / SCALE), so that every score is big
#: plus a few units and an unshifted exp(S) overflows (a learner's exp(S) / exp(lse) is
#: exact in the other cases)
FORWARD_CASES = [
    ("sliding window 9 and softcap 2, ragged tiles, Tq = 37, Tk = 29",
     lambda tq, tk: library.sliding_window(9, tq, tk), 2.0, 37, 29, 5, 8, 6, 3.0),
    ("documents [0, 5, 17, 18, 40], softcap 1.5, Br = Bc = 8",
     lambda tq, tk: library.document([0, 5, 17, 18, 40]), 1.5, 40, 40, 4, 8, 8, 3.0),
    ("causal, Tq = 40 > Tk = 23 (rows with no key), no score change, Br = 6, Bc = 5",
     lambda tq, tk: library.causal(tq, tk), None, 40, 23, 3, 6, 5, 1.0),
    ("prefix-LM 7, softcap 0.8, Tq = 23 < Tk = 40, Br = 7, Bc = 9",
     lambda tq, tk: library.prefix_lm(7, tq, tk), 0.8, 23, 40, 4, 7, 9, 3.0),
    ("causal, scores near 800 (exp(S) overflows float64), Tq = Tk = 26, Br = 8, Bc = 6",
     lambda tq, tk: library.causal(tq, tk), None, 26, 26, 4, 8, 6, 2.0, 800.0),
    # a score change that reads the positions: q_idx, kv_idx counted inside a tile give other
    # values on every tile, not only where an empty tile is scored (review round 20 b)
    ("causal with ALiBi (slope 0.25), Tq = 30 < Tk = 33, Br = 8, Bc = 6",
     lambda tq, tk: library.causal(tq, tk), library.alibi([0.25]), 30, 33, 4, 8, 6, 2.0),
]


def replay_forward(q, k, v, bm, mask_mod, score_mod, scale, br, bc, mistake=None,
                   order="partial_first"):
    """The float64 tiled forward with a block mask (q (Tq, d), k, v (Tk, d); bm the four
    arrays), optionally with one typical mistake; (o, lse). `order` of the visits (partial
    first, "full_first", "by_key") matters only when a rescale is missing."""
    num_p, idx_p, num_f, idx_f = bm
    tq, d = q.shape
    tk = k.shape[0]
    o, lse = np.zeros((tq, d)), np.full(tq, -np.inf)
    with np.errstate(all="ignore"):
        for i in range(len(num_p)):
            q0, q1 = i * br, min((i + 1) * br, tq)
            qi = np.arange(q0, q1)
            m, l, acc = np.full(q1 - q0, -np.inf), np.zeros(q1 - q0), np.zeros((q1 - q0, d))
            visits = [] if mistake == "full_only" else [(j, True) for j in idx_p[i, :num_p[i]]]
            if mistake != "partial_only":
                full = [(j, False) for j in idx_f[i, :num_f[i]]]
                visits = full + visits if order == "full_first" else visits + full
            if order == "by_key":
                visits.sort()
            for j, partial in visits:
                k0, k1 = j * bc, min((j + 1) * bc, tk)
                ki = np.arange(k0, k1)
                s = scale * (q[q0:q1] @ k[k0:k1].T)
                if mistake == "scale_after":
                    s = scale * score_tile(score_mod, s / scale, 0, 0, qi, ki)
                elif mistake not in ("after_max", "on_probs", "no_score"):
                    s = score_tile(score_mod, s, 0, 0, qi, ki)
                if partial and mistake != "no_mask":
                    s = np.where(mask_tile(mask_mod, 0, 0, qi, ki), s,
                                 -1e30 if mistake == "finite_fill" else -np.inf)
                m_new = np.maximum(m, s.max(axis=1))
                m_safe = m_new if mistake == "no_standin" else np.where(np.isneginf(m_new),
                                                                           0.0, m_new)
                shifted = s - m_safe[:, None]
                if mistake == "after_max":
                    shifted = score_tile(score_mod, shifted, 0, 0, qi, ki)
                p = np.exp(shifted)
                if mistake == "on_probs":
                    p = score_tile(score_mod, p, 0, 0, qi, ki)
                    p = np.where(np.isneginf(s), 0.0, p)
                alpha = np.ones(len(m)) if mistake == "no_rescale" else np.exp(m - m_safe)
                l = (1.0 if mistake == "no_rescale_l" else alpha) * l + p.sum(axis=1)
                a_acc = 1.0 if mistake == "no_rescale_acc" else alpha[:, None]
                acc = a_acc * acc + p @ v[k0:k1]
                m = m_new
            seen = l > 0
            if mistake == "no_guard":
                seen = np.ones_like(seen)
                l = np.where(l > 0, l, 0.0)
            o[q0:q1] = np.where(seen[:, None], acc / np.where(seen, l, 1.0)[:, None], 0.0)
            lse[q0:q1] = np.where(seen, m + np.log(np.where(seen, l, 1.0)), -np.inf)
    return o, lse


FORWARD_MISTAKES = [("no_mask", HINT_FWD_PARTIAL_UNMASKED), ("after_max", HINT_FWD_AFTER_MAX),
                    ("on_probs", HINT_FWD_ON_PROBS), ("partial_only", HINT_FWD_FULL_ONLY),
                    ("full_only", HINT_FWD_FULL_ONLY),
                    ("no_score", HINT_FWD_NO_SCORE), ("scale_after", HINT_FWD_SCALE_AFTER),
                    ("no_standin", HINT_FWD_STANDIN), ("no_guard", HINT_FWD_EMPTY_ROW),
                    ("finite_fill", HINT_FWD_FINITE)]
#: a missing rescale shows whatever the order of the visits: replayed in each order
RESCALE_MISTAKES = [("no_rescale", HINT_FWD_RESCALE), ("no_rescale_acc", HINT_FWD_RESCALE_ACC),
                    ("no_rescale_l", HINT_FWD_RESCALE_L)]
VISIT_ORDERS = ("partial_first", "full_first", "by_key")


def _watch_score(score_mod, tq, tk):
    seen = np.zeros((tq, tk), np.int64)

    def watched_score(score, b, h, q_idx, kv_idx):
        qi, ki = np.broadcast_arrays(np.asarray(q_idx, np.int64), np.asarray(kv_idx, np.int64))
        inside = (qi >= 0) & (qi < tq) & (ki >= 0) & (ki < tk)
        np.add.at(seen, (qi[inside], ki[inside]), 1)
        return score_mod(score, b, h, q_idx, kv_idx)
    return watched_score, seen


def _close_pair(a, b):
    return parts_close(a, b, rtol=1e-7, atol=1e-9)


def _forward_case(n, name, make, cap, tq, tk, d, br, bc, spread, big=None):
    rng = np.random.default_rng(1450 + n)
    q = rng.standard_normal((tq, d)) * spread                           # (Tq, d)
    k = rng.standard_normal((tk, d)) * spread                           # (Tk, d)
    if big is not None:
        q[:, 0] = k[:, 0] = np.sqrt(big / SCALE)                        # scores ~ big
    v = rng.standard_normal((tk, d))                                    # (Tk, d)
    mask = make(tq, tk)
    score = _identity if cap is None else cap if callable(cap) else library.softcap(cap)
    bm = create_block_mask(mask, None, None, tq, tk, br, bc, cache=False)
    arrays = (bm.kv_num_blocks[0, 0], bm.kv_indices[0, 0], bm.full_kv_num_blocks[0, 0],
              bm.full_kv_indices[0, 0])
    states = bm.states()[0, 0]
    tile_of = np.kron(states, np.ones((br, bc), np.int8))[:tq, :tk]     # (Tq, Tk) per pair
    o, lse = reference(q[None, None], k[None, None], v[None, None], mask_mod=mask,
                       score_mod=score, scale=SCALE)
    want = (o[0, 0], lse[0, 0])
    diagnoses = []
    if big is not None:         # NaN or +inf where all is finite: an exponential overflowed
        diagnoses.append((lambda y, e: len(y) == 4 and y[0].shape == e[0].shape
                          and y[1].shape == e[1].shape and bool(
                              np.isnan(y[0]).any() or np.isposinf(y[0]).any()
                              or np.isnan(y[1]).any() or np.isposinf(y[1]).any()),
                          *HINT_FWD_OVERFLOW))
    first_rows, first_cols = np.zeros((tq, tk), bool), np.zeros((tq, tk), bool)
    first_rows[:br], first_cols[:, :bc] = True, True    # query block 0, key block 0

    def local(grid, active):    # every call in the first block of rows or of columns, some
        return any(not grid[~keep].any() and int(grid.max()) > 1    # pair twice, where a
                   and bool(active[~keep].any())                    # right forward goes on
                   for keep in (first_rows, first_cols))
    diagnoses.append((lambda y, e: len(y) == 4 and (local(y[2], tile_of == PARTIAL)
                                                    or local(y[3], tile_of != EMPTY)),
                      *HINT_FWD_LOCAL))

    def nothing(y, e):          # no row saw a key: nothing visited, or l NaN (NaN > 0)
        return (isinstance(y, tuple) and len(y) == 4 and y[0].shape == want[0].shape
                and y[1].shape == want[1].shape and bool(np.isneginf(y[1]).all())
                and bool((y[0] == 0).all()) and not bool(np.isneginf(want[1]).all()))
    diagnoses.append((nothing, *HINT_FWD_NOTHING))
    replays = [(mistake, "partial_first", hint) for mistake, hint in FORWARD_MISTAKES]
    replays += [(mistake, order, hint) for mistake, hint in RESCALE_MISTAKES
                for order in VISIT_ORDERS]
    for mistake, order, hint in replays:
        wrong = replay_forward(q, k, v, arrays, mask, score, SCALE, br, bc, mistake, order)
        if not _close_pair(wrong, want):
            diagnoses.append((lambda y, e, w=wrong: _close_pair(y[:2], w), *hint))

    def lse_only(y, e):             # o right, lse not: the log-sum-exp itself
        return (isinstance(y, tuple) and len(y) == 4 and y[0].shape == want[0].shape
                and y[1].shape == want[1].shape
                and bool(np.allclose(y[0], want[0], rtol=1e-7, atol=1e-9))
                and not np.allclose(y[1], want[1], rtol=1e-7, atol=1e-9, equal_nan=True))
    diagnoses.append((lse_only, *HINT_FWD_LSE))
    diagnoses += [(lambda y, e: _close_pair(y[:2], want) and bool(
                      (y[3][tile_of == EMPTY] > 0).any() or (y[2][tile_of == EMPTY] > 0).any()),
                   *HINT_FWD_EMPTY_VISITED),
                  (lambda y, e: _close_pair(y[:2], want) and bool(
                      (y[2][tile_of != PARTIAL] > 0).any()), *HINT_FWD_MASK_ON_FULL)]

    def run(fn):
        wmask, record = watched(mask, tq, tk)
        wscore, scored = _watch_score(score, tq, tk)
        out = fn(q.copy(), k.copy(), v.copy(), tuple(a.copy() for a in arrays), wmask, wscore,
                 SCALE, br, bc)
        if isinstance(out, list):
            out = tuple(out)
        if not (isinstance(out, tuple) and len(out) == 2):
            return plain(out), want
        o_y, lse_y = (np.asarray(x, np.float64) for x in plain(out))
        return (o_y, lse_y, record["grid"], scored), want

    def compare(yours, expected):
        if not (isinstance(yours, tuple) and len(yours) == 4):
            return False, "expected a pair (o, lse)"
        for label, y, e in (("o", yours[0], expected[0]), ("lse", yours[1], expected[1])):
            if y.shape != e.shape:
                return False, f"{label}: shape {y.shape}, expected {e.shape}"
            if not np.allclose(y, e, rtol=1e-9, atol=1e-11, equal_nan=True):
                bad = np.argwhere(~np.isclose(y, e, rtol=1e-9, atol=1e-11, equal_nan=True))
                return False, f"{label}: {len(bad)} values differ, first at {tuple(bad[0])}"
        grid, scored = yours[2], yours[3]
        off_partial = int(grid[tile_of != PARTIAL].sum())
        if off_partial:
            return False, (f"mask_mod was evaluated on {off_partial} pairs of full or empty "
                           "tiles")
        empty = int(scored[tile_of == EMPTY].sum())
        if empty:
            return False, f"score_mod was evaluated on {empty} pairs of empty tiles"
        return True, ""

    ragged = [((lambda exc: isinstance(exc, ValueError) and "could not be broadcast" in str(exc)),
               *HINT_FWD_RAGGED)]
    return Case(name, run, HINT_FORWARD[0], diagnoses, hint2=HINT_FORWARD[1], compare=compare,
                error_diagnoses=ragged)


def check_flex_forward(fn, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """`flex_forward(q, k, v, block_mask, mask_mod, score_mod, scale, block_q, block_k)`
    against the dense float64 reference on six masks and score changes (one with scores
    near 800, one with ALiBi); the mask may be evaluated on partial tiles only, and no score
    on an empty tile."""
    cases = [_forward_case(n, *c) for n, c in enumerate(FORWARD_CASES)]
    return run_checks("flex_forward(q, k, v, block_mask, mask_mod, score_mod, scale, block_q, "
                      "block_k)", fn, cases, verbose=verbose, hint_level=hint_level)


HINTS = [v for name, v in dict(globals()).items() if name.startswith("HINT_")]
