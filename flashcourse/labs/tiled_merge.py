"""Checker 3 of lab 03 (going further): merge_partials(o_a, lse_a, o_b, lse_b) -> (o, lse),
the attention of the same queries over two disjoint key ranges combined into the attention
over their union (the Flash-Decoding combine). Split from tiled_forward.py, which re-exports
it; the shared helpers (inputs, scale, comparisons) are in _tiled_common.py."""

from __future__ import annotations

import numpy as np

from ..geometry import visible_mask
from ._harness import Case, Result, inputs_kept_case, plain, result_tuple, run_checks
from ._tiled_common import (_ATOL, _RTOL, SCALE, _close, _empty_lse_only, _has_nan, _inputs,
                            _safe)

HINT_MERGE_AVERAGE = (
    "A plain average of the two outputs ignores how much weight each key range carries.",
    "Weight each partial output by its share of the total softmax mass, exp(lse_part - "
    "lse_total).")
HINT_MERGE_LSE = (
    "The merged lse is not the log of the summed masses: the masses add, not the lse values.",
    "lse_total = logaddexp(lse_a, lse_b).")
HINT_MERGE_EMPTY = (
    "A part with no visible key has lse = -inf; your merge produced NaN for such rows.",
    "Where both parts are empty return o = 0, lse = -inf; logaddexp handles one -inf, and "
    "exp(-inf) = 0 weights an empty part.")
HINT_MERGE_BASE2 = (
    "Your weights are in base 2 (exp2) but lse is a natural log: the weight of a part is "
    "exp(lse_part - lse_total), base e.",
    "exp2(y) = exp(y ln 2); use np.exp here, as lse was made with np.log.")
HINT_MERGE_OVERFLOW = (
    "Your merge overflows for large lse values (inf or NaN where every input is finite): "
    "exp(lse) alone is past float64's range once lse > 709.",
    "Only differences go into exp: logaddexp(lse_a, lse_b), and weights exp(lse_part - lse).")
HINT_MERGE_STANDIN = (
    "Your merge is wrong where one part is empty (lse = -inf) and the other is not: the "
    "weights are exp(lse_part - lse_total), with a stand-in 0 only where the TOTAL lse is "
    "-inf (both parts empty). A stand-in tested on one part's lse is 0 where the total is "
    "finite, and that part's weight comes out exp(lse_part) instead of 1.",
    "Build the stand-in from the merged lse alone: 0 where it is -inf, itself elsewhere.")
HINT_MERGE_EMPTY_LSE = (
    "Rows that are empty in both parts come out with o = 0, as they should, but their merged "
    "lse is not -inf: logaddexp(-inf, -inf) = -inf, and an empty row keeps it. Return the "
    "merged lse itself, not its stand-in 0.",
    "The stand-in (0 where the merged lse is -inf) is for the weights' exponents only.")
HINT_MERGE_SWAPPED = (
    "Your weights are exchanged: part a's output gets part b's weight. Each part's weight is "
    "its own share of the total mass, exp(lse_a - lse) for o_a and exp(lse_b - lse) for o_b.",
    "o = exp(lse_a - lse) o_a + exp(lse_b - lse) o_b, row by row.")
HINT_MERGE = (
    "Your merge disagrees with attention over the union of the key ranges.",
    "Each part's o is normalised over its own keys; undo that with its mass exp(lse), add, "
    "renormalise.")


# -- checker 3 (going further): merge two partial results --------------------------------------

def check_merge_partials(fn, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Check `merge_partials(o_a, lse_a, o_b, lse_b) -> (o, lse)` against attention over the
    union of two key ranges; includes rows for which one or both ranges are fully masked."""
    cases = []
    for n, (name, tq, tk, split, causal, spread, swap) in enumerate([
            ("two halves, Tq = 5, Tk = 12", 5, 12, 6, False, 1.0, False),
            ("uneven split, large scores, Tq = 4, Tk = 9", 4, 9, 2, False, 15.0, False),
            ("causal, Tq = 8 > Tk = 6: rows with no key in one or both parts", 8, 6, 3, True,
             1.0, False),
            ("the causal parts passed later keys first: part a empty where part b is not",
             8, 6, 3, True, 1.0, True)]):
        q, k, v = _inputs(90 + n, tq, tk, 3, spread)
        mask = visible_mask(tq, tk, causal)                     # (Tq, Tk)
        s = SCALE * (q @ k.T)
        s = np.where(mask, s, -np.inf)

        def part(cols, s=s, v=v):
            sub = s[:, cols]                                    # (Tq, n)
            mx = _safe(sub.max(axis=1))
            with np.errstate(all="ignore"):
                p = np.exp(sub - mx[:, None])
                l = p.sum(axis=1)
                o = np.where(l[:, None] > 0, (p @ v[cols]) / np.where(l > 0, l, 1)[:, None], 0.0)
                lse = np.where(l > 0, mx + np.log(np.where(l > 0, l, 1)), -np.inf)
            return o, lse

        o_a, lse_a = part(np.arange(0, split))
        o_b, lse_b = part(np.arange(split, tk))
        if swap:                                                # merging commutes
            (o_a, lse_a), (o_b, lse_b) = (o_b, lse_b), (o_a, lse_a)
        expected = part(np.arange(tk))
        with np.errstate(all="ignore"):
            average = ((o_a + o_b) / 2, np.logaddexp(lse_a, lse_b))
            bad = lse_a + lse_b
            bad_use = np.where(np.isneginf(bad), 0.0, bad)
            add_lse = (np.exp(lse_a - bad_use)[:, None] * o_a
                       + np.exp(lse_b - bad_use)[:, None] * o_b, bad)
            lse_max = np.maximum(lse_a, lse_b)
            lse_use = np.where(np.isneginf(expected[1]), 0.0, expected[1])
            base2 = (np.exp2(lse_a - lse_use)[:, None] * o_a
                     + np.exp2(lse_b - lse_use)[:, None] * o_b, expected[1])
            standins = []                      # the stand-in 0 where one part is empty
            for key in (lse_a, lse_b):
                use = np.where(np.isneginf(key), 0.0, expected[1])
                standins.append((np.exp(lse_a - use)[:, None] * o_a
                                 + np.exp(lse_b - use)[:, None] * o_b, expected[1]))
        diagnoses = [(_has_nan, *HINT_MERGE_EMPTY),
                     ((lambda y, e, w=average: _close(y, w)), *HINT_MERGE_AVERAGE),
                     ((lambda y, e, w=add_lse: _close(y, w)), *HINT_MERGE_LSE),
                     ((lambda y, e, w=base2: _close(y, w)), *HINT_MERGE_BASE2),
                     ((lambda y, e, w=o_a + o_b: _close(plain(y)[:1], (w,))),
                      *HINT_MERGE_AVERAGE),
                     ((lambda y, e, w=lse_max: _close(plain(y)[1:], (w,))),
                      *HINT_MERGE_LSE)]
        diagnoses += [((lambda y, e, w=w: _close(y, w)), *HINT_MERGE_STANDIN)
                      for w in standins if not _close(w, expected)]
        # review round 21 a: both got HINT_MERGE
        with np.errstate(all="ignore"):
            swapped = (np.exp(lse_b - lse_use)[:, None] * o_a
                       + np.exp(lse_a - lse_use)[:, None] * o_b, expected[1])
        if not _close(swapped, expected):
            diagnoses.append(((lambda y, e, w=swapped: _close(y, w)), *HINT_MERGE_SWAPPED))
        diagnoses.append((_empty_lse_only, *HINT_MERGE_EMPTY_LSE))

        def run(f, a=(o_a, lse_a, o_b, lse_b), expected=expected):
            return result_tuple(f(*(x.copy() for x in a)), 2), expected

        cases.append(Case(name, run, HINT_MERGE[0], diagnoses, rtol=_RTOL, atol=_ATOL,
                          hint2=HINT_MERGE[1], names=("o", "lse")))
        if n == 0:   # the same parts with every lse 800 higher: o is unchanged
            big = (o_a, lse_a + 800.0, o_b, lse_b + 800.0)

            def run_big(f, a=big, expected=(expected[0], expected[1] + 800.0)):
                return result_tuple(f(*(x.copy() for x in a)), 2), expected

            def overflowed(yours, _expected):
                return any(not np.isfinite(np.asarray(p, np.float64)).all()
                           for p in plain(yours))

            cases.append(Case("large lse (about 800): exp(lse) overflows", run_big,
                              HINT_MERGE_OVERFLOW[0], [(overflowed, *HINT_MERGE_OVERFLOW)],
                              rtol=_RTOL, atol=_ATOL, hint2=HINT_MERGE_OVERFLOW[1],
                              names=("o", "lse")))
            kept = inputs_kept_case("inputs o_a, lse_a, o_b, lse_b left unchanged",
                                    (o_a, lse_a, o_b, lse_b), (),
                                    ("o_a", "lse_a", "o_b", "lse_b"))
    cases.append(kept)                  # round 18 (mutants): o_a scaled in place passed
    return run_checks("merge_partials(o_a, lse_a, o_b, lse_b)", fn, cases, verbose=verbose,
                      hint_level=hint_level)
