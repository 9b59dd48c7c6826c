"""Puzzles 10 and 11 of lab 05 (split from cuda_puzzles.py, which re-exports them): the online
softmax on a row merged across a warp, and a one-block FlashAttention forward."""

from __future__ import annotations

import math

import numpy as np

from .cuda_puzzle_rules import (HINT_SYNC, Puzzle, PuzzleCase, Rule, _cdiv, _rng,
                                arrays_hold_at_most, no_races, reads_at_most)

# -- puzzle 10: online softmax on a row -------------------------------------------------------

HINT_SOFTMAX = ("out[r] = softmax(x[r]), one warp per row: each lane keeps a running (m, l) "
                "over its elements c = lane, lane + 32, ...; a butterfly merges the 32 pairs; "
                "then each lane writes exp(x - m) / l for its elements.",
                "Merge (m1, l1), (m2, l2): m = max(m1, m2), l = l1 exp(m1 - m) + l2 exp(m2 - m); "
                "with -inf as the start and a finite stand-in while m is still -inf.")
HINT_SM_RESCALE = ("Missing rescale in the running sum: when a lane's max grows, its l was "
                   "measured against the old max and must be multiplied by exp(m_old - m_new) "
                   "before adding the new term. If your code multiplies l by exp(m - m_use), "
                   "that factor is 1 when m was already set to the new max: exp(0). Take it "
                   "while m still holds the old max.",
                   "l = l * exp(m - m_new) + exp(x - m_new), and only then m = m_new.")
HINT_SM_MERGE = ("The butterfly adds the lanes' sums without rescaling both to the common max: "
                 "l1 and l2 are measured against different maxima m1 and m2, and each needs "
                 "its own factor (a factor on one of them only is half the merge).",
                 "l = l1 * exp(m1 - m) + l2 * exp(m2 - m) with m = max(m1, m2).")
HINT_SM_NAN = ("NaN in a row with masked (-inf) entries: a lane whose elements are all -inf "
               "has m = -inf, and exp(-inf - (-inf)) is NaN. Use a finite stand-in (0) for the "
               "subtraction while the max is still -inf.",
               "m_use = m_new if m_new != -inf else 0 before every exp(... - m_use).")
HINT_SM_LANES = ("Each lane keeps its own (m, l): the butterfly that merges the 32 lanes' "
                 "statistics into the row's is missing or never runs, so every lane normalises "
                 "its elements over its own elements only.",
                 "for offset 16, 8, 4, 2, 1: merge (m, l) with the partner lane's, read by "
                 "shfl_xor(..., offset, ...).")
HINT_SM_SHIFT = ("inf or NaN on a row of large values: exp(x) overflows float32 for x > 88. "
                 "Subtract the running max before every exponential. If you subtract m_use, "
                 "m_use is 0 at a lane's first element: the stand-in must replace the NEW max "
                 "only while it is still -inf, so test m_new, not the old m.",
                 "exp(x - m), never exp(x).")


HINT_SM_UNWRITTEN = (
    "Some elements of out were never written (NaN on the simulator): a row has cols "
    "elements, and when cols > 32 each lane owns several of them, c = lane, lane + 32, ... "
    "The last loop must write every element the lane owns, as the first loop reads them.",
    "Write out[r, c] for the same c as the first loop visits, not only c = lane.")
HINT_SM_INIT = (
    "Your running max starts at 0, not -inf: on a row whose entries all lie far below 0 (here "
    "about -1,000) it stays 0, every exp(x - 0) underflows to 0, l is 0 and out comes out "
    "0 / 0 = NaN. A lane starts empty, m = -inf and l = 0: its first element then becomes "
    "its max.",
    "Start each lane with m = NEG_INF and l = F0; the finite stand-in keeps exp defined.")


def spec_softmax(arrays, scalars):
    x = arrays["x"]
    m = x.max(axis=1, keepdims=True)
    p = np.exp(x - m)
    return {"out": p / p.sum(axis=1, keepdims=True)}


def _softmax_replay(x, mistake=None):
    rows, cols = x.shape
    out = np.zeros_like(x)
    with np.errstate(all="ignore"):
        for r in range(rows):
            m, l = np.full(32, 0.0 if mistake == "m_zero" else -np.inf), np.zeros(32)
            for lane in range(32):
                for c in range(lane, cols, 32):
                    v = x[r, c]
                    mn = max(m[lane], v)
                    mu = mn if (mn != -np.inf or mistake == "no_guard") else 0.0
                    ex = np.exp(v) if mistake == "no_shift" else np.exp(v - mu)
                    alpha = 1.0 if mistake == "no_rescale" else np.exp(m[lane] - mu)
                    l[lane] = l[lane] * alpha + ex
                    m[lane] = mn
            for off in () if mistake == "no_butterfly" else (16, 8, 4, 2, 1):
                p = np.arange(32) ^ off
                mn = np.maximum(m, m[p])
                mu = mn if mistake == "no_guard" else np.where(mn == -np.inf, 0.0, mn)
                if mistake == "merge":
                    l = l + l[p]
                elif mistake == "merge_own":         # only this lane's sum rescaled
                    l = l * np.exp(m - mu) + l[p]
                elif mistake == "merge_partner":     # only the partner's sum rescaled
                    l = l + l[p] * np.exp(m[p] - mu)
                elif mistake == "no_shift":
                    l = l + l[p]
                else:
                    l = l * np.exp(m - mu) + l[p] * np.exp(m[p] - mu)
                m = mn
            for c in range(cols):
                lane = c % 32
                e = np.exp(x[r, c]) if mistake == "no_shift" else np.exp(x[r, c] - m[lane])
                out[r, c] = e / l[lane]
    return out


def _sm_case(name, seed, rows=3, cols=70, shift=0.0):
    """Row 0 grows (a new max inside every lane), row 1 is large (exp(x) would overflow),
    row 2 is masked after 6 entries; with cols < 32 some lanes hold no element at all;
    `shift` added to every entry (round 18: -1,000 shows a max started at 0)."""
    rng = _rng(seed)
    x = rng.standard_normal((rows, cols))
    x[1] *= 40.0
    x[1, 5] = 200.0
    x[2, 6:] = -np.inf
    x[0] = np.sort(x[0])
    x += shift
    return PuzzleCase(name, {"x": x}, {"out": x.shape}, {"rows": rows, "cols": cols},
                      ("x", "out", "rows", "cols"), (rows,), (32,))


def _sm_nan(y, e):
    """NaN in the masked row only, the plain row right: a missing stand-in for -inf (a
    missing butterfly gives NaN there too, but a wrong plain row)."""
    return not y.error and bool(np.isnan(y.outputs["out"][2]).any()) and \
        np.allclose(y.outputs["out"][0], e["out"][0], rtol=1e-4, atol=1e-6)


def _sm_unwritten(y, e):
    """Elements of out that no thread wrote (round 18: they read as an overflow)."""
    return not y.error and y.trace is not None and \
        len(y.trace.written_by("out")) < np.size(e["out"])


def _sm_overflow(y, e):
    row = np.asarray(y.outputs["out"][1], np.float64)
    return not y.error and not np.isfinite(row).all() or (not y.error and np.allclose(row, 0))


# -- puzzle 11: a one-block FlashAttention forward --------------------------------------------

BR11, BC11, D11 = 16, 8, 4
HINT_FLASH = ("One block of 16 threads, thread r for query row r (r < tq): loop over key tiles "
              "of 8; the block loads K_j and V_j into shared memory (0 past tk); each thread "
              "scores its row against the tile's keys (masked past tk), updates its running "
              "max m, sum l and accumulator acc (online softmax), and finally writes acc / l.",
              "Per tile: barrier; cooperative load; barrier; per key c < BC with k0 + c < tk: "
              "s = scale q . k; the new max is the larger of m and s; alpha = exp(m - new max); "
              "p = exp(s - new max); l = l alpha + p; acc = acc alpha + p v.")
HINT_FLASH_MASK = ("The ragged last key tile is not masked: its padded keys (zeros) score 0 and "
                   "take part in the softmax. Skip (or give -inf to) keys k0 + c >= tk.",
                   "if k0 + c < tk: ... (only visible keys update m, l and acc).")
HINT_FLASH_RESCALE = ("Missing rescale: when the row max grows, l and acc were accumulated "
                      "against the old max and must be multiplied by exp(m_old - m_new). If "
                      "your code multiplies them by alpha, alpha is 1: exp(m - m_new) taken "
                      "after m was set to the new max is exp(0). Take alpha while m still "
                      "holds the old max.",
                      "alpha = exp(m - m_new), before m = m_new; l = l * alpha + p; acc[x] = "
                      "acc[x] * alpha + p * v[x].")
HINT_FLASH_OVERFLOW = ("inf or NaN in the output (with every local array set): an exponential "
                       "overflowed. Both exponents must be <= 0: p = exp(s - new max) and alpha "
                       "= exp(old max - new max), where the new max is the larger of the old "
                       "max and s (never s alone); at a row's first key the old max is -inf, "
                       "so alpha is 0, and the other way round it is exp(+inf).",
                       "Subtract the new max in p, and take alpha as exp(old - new), not "
                       "exp(new - old).")
HINT_FLASH_RESCALE_ACC = ("Half a rescale: your l is brought to the new max but acc is not. Both "
                          "were accumulated against the old max; when the row max grows, both "
                          "must be multiplied by exp(m_old - m_new).",
                          "acc[x] = acc[x] * alpha + p * v[x], with the alpha that multiplies "
                          "l.")
HINT_FLASH_RESCALE_L = ("Half a rescale: your acc is brought to the new max but l is not. Both "
                        "were accumulated against the old max; when the row max grows, both "
                        "must be multiplied by exp(m_old - m_new).",
                        "l = l * alpha + p, with the alpha that multiplies acc.")
HINT_FLASH_DIVIDE = ("The output is not normalised: acc holds the UNnormalised sum of p v, so "
                     "each row's o is acc / l, once, after the last key tile.",
                     "Divide each of the row's d accumulators by its l when you write o.")
HINT_FLASH_SCALE = ("The scores are missing `scale`: s = scale (q . k) (the puzzle passes "
                    "1 / sqrt(d)), before the max and the exponentials.",
                    "Multiply q's row (or each dot product) by scale.")
HINT_FLASH_STALE_MAX = (
    "Your running max is never stored: m keeps its starting value, so each key's new max is "
    "its own score, alpha = exp(-inf - s) = 0 wipes everything before it, and o comes out as "
    "the value of the last key alone. After each update the new max becomes the running max.",
    "Set m to m_new at the end of each key's update.")
HINT_FLASH_RAGGED = (
    "The last, shorter key tile is missing: when tk is not a multiple of 8, the loop over "
    "tiles must still start a tile at the last multiple of 8 below tk, and the guard "
    "k0 + c < tk masks that tile's padding.",
    "Let k0 run over every multiple of BC below tk, not only those of whole tiles.")
HINT_FLASH_ROW = ("A thread keeps a whole row of scores (the line above names the array and "
                  "its size): that is the plain softmax, which needs every score of the row "
                  "before the first exponential, so its memory grows with tk. The online "
                  "softmax is one pass: each thread keeps only its running m, l and acc (and "
                  "at most one tile of BC scores), rescaled when the max grows.",
                  "Per key of the tile: the new max, alpha = exp(old max - new max), "
                  "p = exp(s - new max); l and each acc[x] are multiplied by alpha before "
                  "adding p (and p v[x]). No array indexed by the key's position in the row.")
HINT_FLASH_GLOBAL = ("Right values, but the kernel reads K or V from global memory inside the "
                     "per-row loop: each tile should be read from global memory once per "
                     "block (into shared memory) and reused by all 16 rows.",
                     "Global reads of k: one per element of each tile, by the whole block.")


HINT_FLASH_INIT = (
    "Your running max starts at 0, not -inf: when every score of a row lies far below 0 "
    "(here about -1,000 and lower) it stays 0, every exp(s - 0) underflows to 0, l stays 0 "
    "and o = acc / l comes out 0 / 0 = NaN. The row starts empty, m = -inf and l = 0: its "
    "first score then becomes the max.",
    "Start m at NEG_INF and l at F0 before the loop over key tiles.")
HINT_FLASH_UNLOADED = (
    "A thread read an element of the K or V tile in shared memory that no thread of the "
    "block ever loaded (NaN on the simulator): the copy loop must cover all BC x D11 = 32 "
    "elements of each tile, shared among the block's 16 threads.",
    "Step the copy loop by the number of threads of the block, so that each element of the "
    "tile has one loader.")


def spec_flash(arrays, scalars):
    q, k, v = arrays["q"], arrays["k"], arrays["v"]
    s = q @ k.T * scalars["scale"]
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return {"o": p @ v / p.sum(axis=1, keepdims=True)}


def _flash_replay(mistake, by_tile=False):
    """The one-block forward in float64 with one mistake ('no_mask', 'no_rescale' (of l and
    acc), 'no_rescale_acc', 'no_rescale_l', 'no_scale', 'no_divide', 'm_zero', 'm_stale' (m
    never stored), 'k_ragged_drop' (whole tiles only)), updating the state key
    by key or, `by_tile`, once per tile of BC11 keys: a missing rescale gives a different
    result in each."""
    def replay(arrays, scalars):
        q, k, v = arrays["q"], arrays["k"], arrays["v"]
        tk, d = k.shape
        ntile = _cdiv(tk, BC11)
        kp = np.zeros((ntile * BC11, d))
        vp = np.zeros((ntile * BC11, d))
        kp[:tk], vp[:tk] = k, v
        keys = {"no_mask": ntile * BC11, "k_ragged_drop": tk // BC11 * BC11}.get(mistake, tk)
        step = BC11 if by_tile else 1
        scale = 1.0 if mistake == "no_scale" else scalars["scale"]
        o = np.zeros_like(q)
        for r in range(q.shape[0]):
            m, l, acc = 0.0 if mistake == "m_zero" else -np.inf, 0.0, np.zeros(d)
            for c in range(0, keys, step):
                c1 = min(c + step, keys)
                s = scale * (kp[c:c1] @ q[r])                        # (<= step,)
                mn = max(m, s.max())
                alpha = 1.0 if mistake == "no_rescale" else np.exp(m - mn)
                p = np.exp(s - mn)
                l = l * (1.0 if mistake == "no_rescale_l" else alpha) + p.sum()
                acc = acc * (1.0 if mistake == "no_rescale_acc" else alpha) + p @ vp[c:c1]
                m = m if mistake == "m_stale" else mn
            o[r] = acc if mistake == "no_divide" else acc / l
        return {"o": o}
    return replay


def _flash_case(name, tq, tk, d, seed, spread=1.0):
    rng = _rng(seed)
    q = rng.standard_normal((tq, d)) * spread
    k = rng.standard_normal((tk, d)) * spread
    k[-BC11:] += 0.8 * q.mean(axis=0)        # the max grows in the last tiles
    v = rng.standard_normal((tk, d))
    return PuzzleCase(name, {"q": q, "k": k, "v": v}, {"o": (tq, d)},
                      {"tq": tq, "tk": tk, "d": d, "scale": 1.0 / math.sqrt(d)},
                      ("q", "k", "v", "o", "tq", "tk", "d", "scale"), (1,), (BR11,))


def _flash_falling_case(name, tq, tk, seed):
    """Scores that alternate between about +200 and -200 from one key to the next (d = 2):
    an update that shifts by the latest score instead of the running max (m_new = s) takes
    alpha = exp(old - new) = exp(+400) and overflows (review round 17 a: it passed)."""
    rng = _rng(seed)
    q = np.abs(rng.standard_normal((tq, 2))) + 1.0
    k = np.zeros((tk, 2))
    k[:, 0] = 150.0 * (-1.0) ** np.arange(tk)
    k[:, 1] = rng.standard_normal(tk)
    v = rng.standard_normal((tk, 2))
    return PuzzleCase(name, {"q": q, "k": k, "v": v}, {"o": (tq, 2)},
                      {"tq": tq, "tk": tk, "d": 2, "scale": 1.0 / math.sqrt(2)},
                      ("q", "k", "v", "o", "tq", "tk", "d", "scale"), (1,), (BR11,))


def _flash_far_case(name, tq, tk, seed):
    """Every score far below 0: about -1,000 - 50 j for key j (d = 2), so each row's weight
    sits on key 0; a running max started at 0 underflows every exp (round 18: it passed)."""
    case = _flash_falling_case(name, tq, tk, seed)
    q, k = case.arrays["q"], case.arrays["k"]
    q[:, 0] = 1.0
    k[:, 0] = -(1000.0 + 50.0 * np.arange(tk)) * math.sqrt(2)
    return case


def _flash_overflow(y, e):
    """o not finite where it should be, and still not with the local arrays zeroed (so no
    accumulator was used unset): an exponential overflowed."""
    if y.error or "o" not in y.outputs:
        return False
    if y.trace is not None and (y.trace.unloaded_reads() or y.trace.races()):
        return False        # NaN read from shared memory: _flash_unloaded or the race rule
    bad = ~np.isfinite(np.asarray(y.outputs["o"], np.float64)) & np.isfinite(e["o"])
    if not bad.any():
        return False
    if y.relaunch is None:
        return True
    again = np.asarray(y.relaunch(0.0)["o"], np.float64)
    return bool((~np.isfinite(again[bad])).all())


def _flash_unloaded(y, e):
    """Shared elements read that no thread loaded, and no race (round 18: a copy loop that
    left part of the tile unloaded got the overflow hint)."""
    return (not y.error and y.trace is not None and bool(y.trace.unloaded_reads())
            and not y.trace.races())


def puzzle_softmax_rows() -> Puzzle:
    return Puzzle(10, "softmax_rows", "the online softmax on a row, merged across a warp",
           "softmax_rows(x, out, rows, cols): out[r] = softmax(x[r]); one block of 32 "
           "threads per row; x has -inf entries (masked) and large values, and cols may "
           "be below 32 (lanes with no element).", spec_softmax,
           [_sm_case("rows of 70: sorted, large (|x| ~ 100), masked after 6", 19),
            _sm_case("3 rows of 10: lanes 10..31 hold no element", 22, 3, 10),
            _sm_case("rows of 40, every entry far below 0 (about -1,000)", 25, 3, 40,
                     shift=-1000.0)],
           HINT_SOFTMAX,
           [(lambda a, s, m=m: {"out": _softmax_replay(a["x"], m)}, h) for m, h in
            (("no_rescale", HINT_SM_RESCALE), ("merge", HINT_SM_MERGE),
             ("merge_own", HINT_SM_MERGE), ("merge_partner", HINT_SM_MERGE),
             ("no_butterfly", HINT_SM_LANES))],
           [], expected=lambda c: {"global write": c.arrays["x"].size},
           first=[(_sm_unwritten, HINT_SM_UNWRITTEN), (_sm_nan, HINT_SM_NAN),
                  (_sm_overflow, HINT_SM_SHIFT)],
           first_mistakes=[(lambda a, s: {"out": _softmax_replay(a["x"], "m_zero")},
                            HINT_SM_INIT)])


def puzzle_flash_block() -> Puzzle:
    return Puzzle(11, "flash_block", "a one-block FlashAttention forward",
           "flash_block(q, k, v, o, tq, tk, d, scale): o = softmax(scale q k^T) v for "
           "tq <= 16, d <= 4 and any tk; one block of 16 threads (one per query row), key "
           "tiles of BC = 8 in shared memory, one pass (no thread keeps a row of scores).",
           spec_flash,
           [_flash_case("tq = 11, tk = 21, d = 3: ragged key tile, growing max", 11, 21, 3,
                        20),
            _flash_case("tq = 16, tk = 16, d = 4, large scores", 16, 16, 4, 21, 4.0),
            _flash_case("tq = 3, tk = 300, d = 2: a long row, 38 key tiles", 3,
                        300, 2, 23),
            _flash_falling_case("tq = 5, tk = 13, d = 2: scores alternating near +200 "
                                "and -200 from one key to the next", 5, 13, 24),
            _flash_far_case("tq = 4, tk = 10, d = 2: every score far below 0 (about -1,000 "
                            "and lower)", 4, 10, 26)],
           HINT_FLASH, [(_flash_replay("no_mask"), HINT_FLASH_MASK),
                        (_flash_replay("no_divide"), HINT_FLASH_DIVIDE),
                        (_flash_replay("no_scale"), HINT_FLASH_SCALE),
                        # round 18 (mutants): both got HINT_FLASH
                        (_flash_replay("m_stale"), HINT_FLASH_STALE_MAX),
                        (_flash_replay("k_ragged_drop"), HINT_FLASH_RAGGED)]
           + [(_flash_replay(m, by_tile), h) for by_tile in (False, True)
              for m, h in (("no_rescale", HINT_FLASH_RESCALE),
                           ("no_rescale_acc", HINT_FLASH_RESCALE_ACC),
                           ("no_rescale_l", HINT_FLASH_RESCALE_L))],
           [Rule(arrays_hold_at_most(max(BC11, D11), BR11 * BC11,
                                     "the online softmax (one tile of scores at a time)"),
                 HINT_FLASH_ROW),
            Rule(no_races, HINT_SYNC),
            Rule(reads_at_most("k", lambda c: _cdiv(c.scalars["tk"], BC11) * BC11 *
                               c.scalars["d"], "one read per element per tile"),
                 HINT_FLASH_GLOBAL)],
           expected=lambda c: {"global write": c.scalars["tq"] * c.scalars["d"]},
           first=[(_flash_overflow, HINT_FLASH_OVERFLOW),
                  (_flash_unloaded, HINT_FLASH_UNLOADED)],
           first_mistakes=[(_flash_replay("m_zero"), HINT_FLASH_INIT)])


HINTS = [v for k, v in dict(globals()).items() if k.startswith("HINT_") and k != "HINT_SYNC"]
