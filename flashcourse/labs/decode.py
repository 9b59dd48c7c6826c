"""Checker for the exercise of notebook 11: the combine step of Flash-Decoding.

The learner writes

    combine(o_parts, lse_parts) -> (o, lse)
        o_parts   (S, R, d)  each split's normalised output for R query rows
        lse_parts (S, R)     each split's log-sum-exp (natural log; -inf: empty split)

        m   = max_s lse_s
        w_s = exp(lse_s - m)
        lse = m + log(sum_s w_s)
        o   = sum_s w_s o_s / sum_s w_s

and a row whose splits are all empty must come out as o = 0, lse = -inf (no NaN).
The partial states come from real splits of random attention problems
(`flashcourse.decode.split_kv_forward(..., return_parts=True)`), so a combine that
passes reproduces exact attention.
"""

from __future__ import annotations

import numpy as np

from .. import decode as np_decode
from ._harness import Case, Result, as_pair, not_pair, run_checks

HINT_RETURN = "Return a tuple (o, lse): o of shape (R, d), lse of shape (R,)."
HINT_SHAPE = ("Your o or lse has the wrong shape (the line above gives it): o is (R, d) and "
              "lse (R,), one number per row. Reduce over the splits, axis 0, and keep no "
              "extra axis.")
HINT_MEAN = ("Each split must count in proportion to its softmax mass: weight o_s by "
             "w_s = exp(lse_s - m), not equally (a plain mean treats a split of 10 keys like "
             "one of 1,000, and ignores how large their scores are).")
HINT_NORMALISE = ("The weighted sum is not normalised: o_s are already divided by their own "
                  "sums, so divide sum_s w_s o_s by sum_s w_s.")
HINT_LSE = ("lse is wrong while o is right: lse = m + log(sum_s exp(lse_s - m)), the "
            "log-sum-exp of the splits' lse values, not their max or their sum; a row whose "
            "splits are all empty keeps lse = -inf.")
HINT_OVERFLOW = ("exp overflowed: subtract the largest lse first, w_s = exp(lse_s - m) "
                 "with m = max_s lse_s, so every exponent is <= 0.")
HINT_EMPTY = ("Empty splits: lse_s = -inf gives w_s = 0, fine, but when every split of a row "
              "is empty, m = -inf and lse_s - m = -inf - (-inf) = NaN. Use m_safe = 0 where "
              "m = -inf, and return o = 0, lse = -inf for that row.")
HINT_GENERIC = ("Compare with the formulas in the docstring: m = max_s lse_s, "
                "w_s = exp(lse_s - m), o = sum w_s o_s / sum w_s, lse = m + log sum w_s.")

_RTOL, _ATOL = 1e-10, 1e-12


def _parts(seed, b, hq, hkv, tq, tk, d, num_splits, block_k, causal=False, shift=0.0):
    """(o_parts (S, R, d), lse_parts (S, R)) of a real split, and the exact (o, lse)."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((b, hq, tq, d)) * 1.5
    k = rng.standard_normal((b, hkv, tk, d)) * 1.5
    v = rng.standard_normal((b, hkv, tk, d))
    o, lse, (o_parts, lse_parts, _) = np_decode.split_kv_forward(
        q, k, v, num_splits=num_splits, block_k=block_k, causal=causal, return_parts=True)
    s = o_parts.shape[0]
    rows = b * hq * tq
    lse_parts = lse_parts.reshape(s, rows) + shift
    return (o_parts.reshape(s, rows, d), lse_parts,
            (o.reshape(rows, d), lse.reshape(rows) + shift))


def _has_nan(yours, expected):
    return any(np.isnan(np.asarray(y, float)).any() for y in yours) and not any(
        np.isnan(np.asarray(e, float)).any() for e in expected)


def _has_inf_o(yours, _expected):
    return not np.isfinite(np.asarray(yours[0], float)).all()


def _close(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    return a.shape == b.shape and np.allclose(a, b, rtol=1e-7, atol=1e-10, equal_nan=True)


def _o_matches(candidate):
    def predicate(yours, _expected):
        return _close(yours[0], candidate)
    return predicate


def _wrong_shape(yours, expected):
    return any(np.shape(y) != np.shape(e) for y, e in zip(yours, expected))


def _only_lse_wrong(yours, expected):
    return _close(yours[0], expected[0]) and not _close(yours[1], expected[1])


def _mean(o_parts):
    return o_parts.mean(axis=0)


def _unnormalised(o_parts, lse_parts):
    m = lse_parts.max(axis=0)
    return (np.exp(lse_parts - m)[..., None] * o_parts).sum(axis=0)


def check_combine(combine, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Check the learner's `combine(o_parts, lse_parts) -> (o, lse)`.

    Cases: two splits; seven uneven splits of a GQA problem (Tk not a multiple of the
    split); a split past the end of the keys (empty: lse = -inf) among real ones; scores
    shifted by +800 (exp overflows without the max); causal rows with no visible key
    (every split empty).
    """
    cases_data = {
        "two splits, 4 rows": _parts(1, 1, 4, 4, 1, 200, 16, 2, 64),
        "seven uneven splits (GQA, Tk = 1000)": _parts(2, 2, 8, 2, 1, 1000, 32, 7, 64),
        "an empty split among real ones": _parts(3, 1, 4, 1, 1, 300, 8, 4, 64),
        "lse around +800 (large scores)": _parts(4, 1, 4, 4, 1, 300, 16, 3, 64, shift=800.0),
        "causal rows with no visible key": _parts(5, 1, 2, 1, 6, 4, 8, 3, 1, causal=True),
    }

    def runner(key):
        o_parts, lse_parts, expected = cases_data[key]

        def run(fn):
            with np.errstate(all="ignore"):
                yours = as_pair(fn(o_parts.copy(), lse_parts.copy()))
            return yours, expected
        return run

    cases = []
    for key, (o_parts, lse_parts, _) in cases_data.items():
        with np.errstate(all="ignore"):
            mean, unnorm = _mean(o_parts), _unnormalised(o_parts, lse_parts)
        nan_hint = HINT_EMPTY if "empty" in key or "no visible" in key else HINT_OVERFLOW
        diag = [(not_pair, HINT_RETURN), (_wrong_shape, HINT_SHAPE), (_has_nan, nan_hint),
                (_has_inf_o, HINT_OVERFLOW),
                (_o_matches(mean), HINT_MEAN), (_o_matches(unnorm), HINT_NORMALISE),
                (_only_lse_wrong, HINT_LSE)]
        hint = HINT_OVERFLOW if "800" in key else (
            HINT_EMPTY if ("empty" in key or "no visible" in key) else HINT_GENERIC)
        cases.append(Case(key, runner(key), hint, diag, rtol=_RTOL, atol=_ATOL,
                          names=("o", "lse")))
    return run_checks("combine(o_parts, lse_parts)", combine, cases, verbose=verbose,
                      hint_level=hint_level)


def reference_combine(o_parts, lse_parts):
    """The solution (the course's `flashcourse.decode.combine`)."""
    return np_decode.combine(o_parts, lse_parts)
