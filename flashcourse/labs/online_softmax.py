"""Checkers for lab 02 (follows notebook 02): the online softmax update and the merge of two states.

The learner writes, vectorised over R rows (each argument an array of shape (R,)):

    online_update(m, l, x) -> (m_new, l_new)
        m_new = max(m, x)
        l_new = l * exp(m - m_new) + exp(x - m_new)

    merge_states(m_a, l_a, m_b, l_b) -> (m, l)
        m = max(m_a, m_b)
        l = l_a * exp(m_a - m) + l_b * exp(m_b - m)

where m is the running maximum of a row (-inf before any element) and l the sum
of exp(x_i - m) over the elements seen so far (0 before any element). A -inf
element is a masked score: it must leave the state unchanged, and an all-masked
row must stay at (-inf, 0), never NaN.

Going further: stream_softmax(x, chunk, merge_states) -> (R, n) probabilities, in two
passes over chunks of `chunk` columns (statistics merged chunk by chunk, then the
probabilities), as a kernel that cannot hold a whole row would do it.

Each checker returns a `flashcourse.labs._harness.Result` and prints either
"All checks passed" or the first failing case with a hint naming the mistake.
"""

from __future__ import annotations

import numpy as np

from ._harness import TODO_LINE, Case, Result, as_pair, not_pair, real_array, run_checks

# -- hints (tests assert on these exact strings): level 1 names the mistake ----------
HINT_MAX = ("Wrong running max: the new max must be the larger of the old max and the new "
            "element (for a merge: of the two pieces' maxima).")
HINT_MAX_STANDIN = ("Your returned max is the finite stand-in where the row has seen nothing "
                    "visible: the state of an empty or fully masked row keeps m = -inf. The "
                    "stand-in is only for the subtraction inside the exponentials; return the "
                    "max itself.")
HINT_RESCALE = ("Missing rescale: when the max grows from m to m_new, every term already "
                "summed in l was measured against m; bring l to the new max before adding. "
                "If your code does multiply l by exp(m - m_new), the old max was overwritten "
                "first (m = np.maximum(m, x), or out=m): the factor is then exp(0) = 1.")
HINT_DIRECTION = ("The rescale factor points the wrong way: it must shrink the old sum when "
                  "the max grows, so it is at most 1.")
HINT_SHIFT = ("l must be measured relative to the max: the new term is the exponential of the "
              "element MINUS the new max. Without the shift exp overflows for large scores.")
HINT_NEG_INF = ("-inf handling: while the max is still -inf (nothing visible yet), subtracting "
                "it gives -inf - (-inf) = NaN. An empty or masked state must stay "
                "(m, l) = (-inf, 0).")
HINT_OVERFLOW = ("Overflow: some exp() saw a large positive argument. Every exponent must "
                 "be a difference with the new max, which is <= 0.")
HINT_BASE2 = ("Your exponentials are in base 2 (exp2): l is a sum of base-e exponentials, "
              "exp(x - m). Use np.exp, or multiply every exponent by log2(e) before exp2.")
HINT_RETURN = "Return a tuple (m_new, l_new) of two arrays with the shape of the inputs."
HINT_ORDER = ("Your two results come back swapped, the sum first and the max second: the "
              "contract returns the max first, then the sum, (m_new, l_new) or (m, l).")
HINT_UPDATE = ("Your l_new is wrong for a state that already holds elements: it must be the sum "
               "of exp(x_i - m_new) over every element seen, the old ones (summed in l against "
               "the old max m) and the new one.")
HINT_ELEMENTWISE = ("Your function raised the error above, typical of Python's max(a, b) on two "
                    "arrays (or np.max(a, b), whose second argument is an axis): neither "
                    "compares two arrays element by element. Each row needs its own max.")
HINT_SHIFT_OLD = ("The new term is measured against the OLD max, exp(x - m): every term of "
                  "l_new is measured against the NEW max, the new element's too.")
HINT_STANDIN = ("Your stand-in for a -inf max is tested on the wrong array: it is 0 where the "
                "new max is finite (the old max m, x or one piece's max is -inf there), so "
                "an exponent misses the shift. The stand-in is 0 only where the NEW max is "
                "-inf, and the new max itself everywhere else.")
HINT_MERGE = ("Merge both sides relative to the common max: each piece's sum is rescaled from "
              "its own max to the common one, then the two are added.")
HINT_SOFTMAX_SHIFT = ("Your probabilities overflow or do not sum to 1: pass 2 must subtract the "
                      "row's FINAL max and divide by its final sum from pass 1, in every chunk.")
HINT_STREAM_LAST_CHUNK = ("The last, shorter chunk is missing from pass 1, pass 2 or both: when "
                          "n is not a multiple of chunk, range(0, n, chunk) still starts a last "
                          "chunk, and x[:, c0:c0 + chunk] stops at n by itself.")
HINT_STREAM_CHUNK_STANDIN = ("A chunk whose every score is masked has max -inf, and its own sum "
                             "exp(part - m_c) is then exp(-inf - (-inf)) = NaN, which spreads "
                             "through the merge into the row's l: such a chunk's statistics "
                             "need the finite stand-in too, so that they are (-inf, 0).")
HINT_STREAM_INIT = ("Your row state starts at max 0, not -inf: a row whose scores all lie far "
                    "below 0 (here about -1,000) keeps m = 0, every exp(score - 0) underflows "
                    "to 0, its l is 0 and its probabilities come out 0. Start from the empty "
                    "state (m, l) = (-inf, 0): the merge then takes the first chunk's max.")
HINT_STREAM_STATE = ("Every probability is 0: the row state after pass 1 is still the empty "
                     "state (m, l) = (-inf, 0). merge_states returns the merged state; it does "
                     "not change its arguments, so keep what it returns at every chunk.")
HINT_STREAM_INT = ("Your result holds integers: an output array made with an integer dtype "
                   "rounds every probability below 1 down to 0. Keep the output float64 "
                   "(np.zeros gives float64 by default).")
HINT_SOFTMAX_MASKED = ("A fully masked row must give probabilities 0 (not NaN): its l is 0.")
HINT_SOFTMAX = ("Pass 1 folds each chunk's statistics into the row's state with your "
                "merge_states; pass 2 turns every score into exp(score - m) / l.")
HINT_STREAM_CHUNKS = ("The contract: x is touched only through slices of `chunk` columns, in "
                      "both passes (a kernel never holds the whole row). Your code computed on "
                      "a wider piece of x at once, e.g. pass 2 on the whole x.")

#: level 2: more explicit, still without the solution's code (check(..., hint_level=2))
LEVEL2 = {
    HINT_MAX: "Take the elementwise maximum of the two arrays.",
    HINT_MAX_STANDIN: "Return m_new (or m), not the stand-in built from it.",
    HINT_RESCALE: ("Multiply l by exp(m - m_new) (a number <= 1) before adding the new term; "
                   "keep the old max in its own name until then."),
    HINT_DIRECTION: "The exponent is old max minus new max, not the other way round.",
    HINT_SHIFT: "The new term is exp(x - m_new), where m_new is the updated max.",
    HINT_NEG_INF: ("Make a finite stand-in of the new max (0 where it is -inf) and subtract the "
                   "stand-in in every exponent: exp(-inf - 0) = 0 keeps the state empty."),
    HINT_OVERFLOW: "Subtract the (stand-in) new max inside every exp().",
    HINT_BASE2: "exp2(y) = exp(y ln 2): exp2 of an unscaled difference is a different number.",
    HINT_ORDER: "The max goes first in the returned tuple, the sum second.",
    HINT_UPDATE: ("Check the two terms one at a time: the old sum brought from m to m_new, and "
                  "the new element measured against m_new."),
    HINT_ELEMENTWISE: "numpy's elementwise maximum of two arrays is np.maximum.",
    HINT_SHIFT_OLD: "Compute m_new (and its stand-in) first, then use it in both exponents.",
    HINT_STANDIN: ("Build the stand-in from m_new alone: 0 where m_new is -inf, m_new "
                   "elsewhere (for a merge, from the common max alone)."),
    HINT_MERGE: "l = l_a times exp(m_a - m) plus l_b times exp(m_b - m), with the common max m.",
    HINT_SOFTMAX_SHIFT: "Finish pass 1 over all chunks before computing any probability.",
    HINT_STREAM_LAST_CHUNK: ("Loop c0 over range(0, n, chunk) in both passes, not over whole "
                             "chunks only (n // chunk of them)."),
    HINT_STREAM_CHUNK_STANDIN: ("Subtract 0 in place of a chunk's max where that max is "
                                "-inf, as online_update and merge_states do."),
    HINT_SOFTMAX_MASKED: "Divide only where l > 0; elsewhere the probabilities are 0.",
    HINT_STREAM_INIT: "m = np.full(rows, -np.inf) and l = np.zeros(rows) before pass 1.",
    HINT_STREAM_INT: "Make the output with np.zeros((rows, n)) or np.zeros_like(x, dtype=float).",
    HINT_STREAM_STATE: "Assign the merge's result back to the row state: m, l = merge(...).",
    HINT_SOFTMAX: "Compare one row with flashcourse.reference.softmax_safe.",
    HINT_STREAM_CHUNKS: ("Loop over c0 in range(0, n, chunk) in pass 2 as well, and write each "
                         "chunk's probabilities into its columns of the output."),
}


def _with_level2(cases):
    """Attach the level-2 text to every hint of every case, and to every case the crash of
    a max that is not elementwise."""
    for case in cases:
        case.hint2 = LEVEL2.get(case.hint, "")
        case.diagnoses = [(d[0], d[1], LEVEL2.get(d[1], "")) for d in case.diagnoses]
        case.error_diagnoses = [(_not_elementwise, HINT_ELEMENTWISE,
                                 LEVEL2[HINT_ELEMENTWISE])] + list(case.error_diagnoses)
    return cases


def _not_elementwise(exc) -> bool:
    """max(a, b) of two arrays, or np.max(a, b) (b read as an axis)."""
    text = str(exc)
    return ((isinstance(exc, ValueError) and "truth value of an array" in text)
            or (isinstance(exc, TypeError) and "integer scalar arrays" in text))


_RTOL, _ATOL = 1e-9, 1e-12     # float64 inputs; a few dozen roundings per row


# -- the expected statistics, computed directly from the data -----------------

def stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact (m, l) of each row of x (R, n), in float64; (-inf, 0) for all -inf rows."""
    x = np.asarray(x, dtype=np.float64)
    m = x.max(axis=-1)                                          # (R,)
    m_safe = np.where(np.isneginf(m), 0.0, m)
    l = np.exp(x - m_safe[:, None]).sum(axis=-1)                # (R,)
    return m, l


def fold(update, x: np.ndarray):
    """Stream the columns of x (R, n) through `update`, starting from the empty state."""
    rows = x.shape[0]
    state = (np.full(rows, -np.inf), np.zeros(rows))
    for col in range(x.shape[1]):
        state = as_pair(update(state[0].copy(), state[1].copy(), x[:, col].copy()))
        if not (isinstance(state, tuple) and len(state) == 2):
            raise TypeError("online_update must return a tuple (m_new, l_new)")
    return state


# -- typical mistakes, simulated on the same inputs ----------------------------

def _safe(m):
    return np.where(np.isneginf(m), 0.0, m)


def _update_no_rescale(m, l, x):
    m_new = np.maximum(m, x)
    return m_new, l + np.exp(x - _safe(m_new))


def _update_inverted(m, l, x):
    m_new = np.maximum(m, x)
    m_old = np.where(np.isneginf(m), m_new, m)                  # guard the empty state
    with np.errstate(over="ignore", invalid="ignore"):
        return m_new, l * np.exp(m_new - m_old) + np.exp(x - _safe(m_new))


def _update_base2(m, l, x):
    m_new = np.maximum(m, x)
    return m_new, l * np.exp2(m - _safe(m_new)) + np.exp2(x - _safe(m_new))


def _merge_base2(m_a, l_a, m_b, l_b):
    m = np.maximum(m_a, m_b)
    return m, l_a * np.exp2(m_a - _safe(m)) + l_b * np.exp2(m_b - _safe(m))


def _update_new_term_unshifted(m, l, x):
    m_new = np.maximum(m, x)
    return m_new, l * np.exp(m - _safe(m_new)) + np.exp(x)


def _update_new_term_old_max(m, l, x):
    m_new = np.maximum(m, x)
    with np.errstate(over="ignore", invalid="ignore"):
        return m_new, l * np.exp(m - _safe(m_new)) + np.exp(x - m)


def _update_standin_of(key):
    """The stand-in 0 where `key(m, x)` is -inf instead of where m_new is (round 14)."""
    def update(m, l, x):
        m_new = np.maximum(m, x)
        m_use = np.where(np.isneginf(key(m, x)), 0.0, m_new)
        with np.errstate(over="ignore", invalid="ignore"):
            return m_new, l * np.exp(m - m_use) + np.exp(x - m_use)
    return update


_update_standin_m = _update_standin_of(lambda m, x: m)
_update_standin_x = _update_standin_of(lambda m, x: x)


def _merge_standin_of(side):
    """The merge's stand-in 0 where one piece's max is -inf (`side` 0 or 1)."""
    def merge(m_a, l_a, m_b, l_b):
        m = np.maximum(m_a, m_b)
        m_use = np.where(np.isneginf((m_a, m_b)[side]), 0.0, m)
        with np.errstate(over="ignore", invalid="ignore"):
            return m, l_a * np.exp(m_a - m_use) + l_b * np.exp(m_b - m_use)
    return merge


def _update_no_shift(m, l, x):
    with np.errstate(over="ignore"):
        return np.maximum(m, x), l + np.exp(x)


def _merge_no_rescale(m_a, l_a, m_b, l_b):
    return np.maximum(m_a, m_b), l_a + l_b


def _merge_inverted(m_a, l_a, m_b, l_b):
    m = np.maximum(m_a, m_b)
    with np.errstate(over="ignore", invalid="ignore"):
        return m, l_a * np.exp(m - m_a) + l_b * np.exp(m - m_b)


def _close_to(wrong):
    """A diagnosis predicate: the learner's array is close to `wrong` (NaN where it has NaN)."""
    return lambda yours, _expected: np.allclose(yours, wrong, equal_nan=True)


def _matches(candidate):
    """A diagnosis predicate: the learner's output equals `candidate` (a pair)."""
    def predicate(yours, _expected):
        if not (isinstance(yours, tuple) and len(yours) == 2):
            return False
        return all(np.allclose(np.asarray(y, dtype=np.float64), c, rtol=1e-7, atol=1e-12,
                               equal_nan=True) for y, c in zip(yours, candidate, strict=True))
    return predicate


def _has_nan(yours, _expected):
    return isinstance(yours, tuple) and any(np.isnan(np.asarray(y, dtype=np.float64)).any()
                                            for y in yours)


def _has_posinf(yours, _expected):
    return isinstance(yours, tuple) and any(np.isposinf(np.asarray(y, dtype=np.float64)).any()
                                            for y in yours)


def _nan_at_large(yours, expected):
    """NaN only where the element is large (|x| > 700) and the rest right: exp of a score
    alone overflowed (inf / inf), not -inf - (-inf) (round 18: it got HINT_NEG_INF)."""
    try:
        m, l = (np.asarray(a, np.float64) for a in yours)
        want_m, want_l = (np.asarray(a, np.float64) for a in expected)
        bad = np.isnan(m) | np.isnan(l)
        large = np.abs(want_m) > 700.0
        return bool(bad.any() and not (bad & ~large).any()
                    and np.allclose(l[~large], want_l[~large]))
    except (TypeError, ValueError):
        return False


def _swapped(yours, expected):
    """The two results returned in the wrong order, (l, m)."""
    if not (isinstance(yours, tuple) and len(yours) == 2):
        return False
    return all(np.allclose(np.asarray(y, dtype=np.float64), e, rtol=1e-7, atol=1e-12,
                           equal_nan=True) for y, e in zip(yours, expected[::-1], strict=True))


def _m_wrong(yours, expected):
    """The max is wrong; a max right to float32's precision is not (the harness names a
    float32 result; review round 16 a: float32 results got HINT_MAX)."""
    if not (isinstance(yours, tuple) and len(yours) == 2):
        return False
    m = np.asarray(yours[0], dtype=np.float64)
    return m.shape == expected[0].shape and not np.allclose(m, expected[0], rtol=1e-6)


def _m_standin(yours, expected):
    """The max returned with its finite stand-in where it should be -inf (review round 16 a:
    it got HINT_MAX, which names a max the learner took right)."""
    if not (isinstance(yours, tuple) and len(yours) == 2):
        return False
    m, want = np.asarray(yours[0], dtype=np.float64), expected[0]
    empty = np.isneginf(want)
    return (m.shape == want.shape and empty.any() and np.isfinite(m[empty]).all()
            and np.allclose(m[~empty], want[~empty], rtol=1e-6))


# -- the inputs (fixed seeds: the same every time) ------------------------------

def _stream_inputs():
    rng = np.random.default_rng(1)
    x = rng.normal(0.0, 3.0, size=(6, 37))                      # (R, n) scores
    x[2] = np.sort(x[2])                                        # max rises at every step
    x[3] = np.sort(x[3])[::-1]                                  # max set by the first element
    return x


def _masked_inputs():
    rng = np.random.default_rng(2)
    x = rng.normal(0.0, 2.0, size=(5, 19))
    x[0, :7] = -np.inf                                          # masked prefix
    x[1, 4:9] = -np.inf                                         # masked middle
    x[2, :] = -np.inf                                           # fully masked row
    x[3, ::2] = -np.inf                                         # every other one masked
    return x


def check_online_update(online_update, *, verbose: bool = True,
        hint_level: int = 1) -> Result:
    """Check `online_update(m, l, x) -> (m_new, l_new)` on streams of scores.

    Cases: one element into the empty state; 37-element streams (random, rising,
    falling) over 6 rows; scores of +-1e4 (naive exp overflows); -inf (masked)
    elements including a fully masked row.
    """
    x_first = np.array([0.5, -2.0, 3.0, 1e4, -1e4])

    def first(fn):
        yours = as_pair(fn(np.full(5, -np.inf), np.zeros(5), x_first.copy()))
        return yours, (x_first, np.ones(5))

    def from_empty(update):
        with np.errstate(over="ignore", invalid="ignore"):
            return update(np.full(5, -np.inf), np.zeros(5), x_first)

    x_stream = _stream_inputs()
    x_big = _stream_inputs()[:, :11] * 3e3                      # |x| up to ~3e4
    x_mask = _masked_inputs()

    def streamed(x):
        return lambda fn: (fold(fn, x), stats(x))

    def wrong(update, x):
        with np.errstate(over="ignore", invalid="ignore"):
            return fold(update, x)

    m1, l1, x1 = np.array([1.0, 2.0, -1.0]), np.array([2.0, 1.5, 3.0]), np.array([3.0, 0.5, 2.0])

    def one_step(fn):            # a state that is not empty: no -inf anywhere
        yours = as_pair(fn(m1.copy(), l1.copy(), x1.copy()))
        return yours, (np.maximum(m1, x1), l1 * np.exp(m1 - np.maximum(m1, x1))
                       + np.exp(x1 - np.maximum(m1, x1)))

    def stepped(update):
        with np.errstate(over="ignore", invalid="ignore"):
            return update(m1, l1, x1)

    common = [(not_pair, HINT_RETURN), (_swapped, HINT_ORDER), (_has_nan, HINT_NEG_INF),
              (_m_standin, HINT_MAX_STANDIN), (_m_wrong, HINT_MAX)]
    cases = [
        Case("one element into the state (m, l) = ([1, 2, -1], [2, 1.5, 3])", one_step,
             HINT_UPDATE,
             [(not_pair, HINT_RETURN), (_swapped, HINT_ORDER), (_m_wrong, HINT_MAX),
              (_matches(stepped(_update_no_rescale)), HINT_RESCALE),
              (_matches(stepped(_update_new_term_old_max)), HINT_SHIFT_OLD),
              (_matches(stepped(_update_inverted)), HINT_DIRECTION),
              (_matches(stepped(_update_base2)), HINT_BASE2),
              (_matches(stepped(_update_no_shift)), HINT_SHIFT),
              (_matches(stepped(_update_new_term_unshifted)), HINT_SHIFT)],
             rtol=_RTOL, atol=_ATOL),
        Case("first element into the empty state (-inf, 0)", first,
             "From the empty state (m, l) = (-inf, 0) one element x gives (x, 1).",
             [(_nan_at_large, HINT_OVERFLOW)] + common
             + [(_matches(from_empty(_update_standin_m)), HINT_STANDIN),
                       (_has_posinf, HINT_SHIFT)], rtol=_RTOL, atol=_ATOL),
        Case("37 random scores per row, 6 rows (rising, falling, random)", streamed(x_stream),
             HINT_RESCALE,
             common + [(_matches(wrong(_update_no_rescale, x_stream)), HINT_RESCALE),
                       (_matches(wrong(_update_inverted, x_stream)), HINT_DIRECTION),
                       (_matches(wrong(_update_no_shift, x_stream)), HINT_SHIFT)],
             rtol=_RTOL, atol=_ATOL),
        Case("large scores (|x| up to 3e4): nothing may overflow", streamed(x_big),
             HINT_OVERFLOW,
             common + [(_has_posinf, HINT_OVERFLOW)], rtol=_RTOL, atol=_ATOL),
        Case("masked (-inf) scores, including a fully masked row", streamed(x_mask),
             HINT_NEG_INF,
             common + [(_matches(wrong(update, x_mask)), HINT_STANDIN)
                       for update in (_update_standin_m, _update_standin_x)],
             rtol=_RTOL, atol=_ATOL),
    ]
    return run_checks("online_update(m, l, x)", online_update, _with_level2(cases),
                      verbose=verbose, hint_level=hint_level)


def _split_states(x: np.ndarray, cuts: list[int]):
    """(m, l) of each piece of x's rows cut at the given columns."""
    edges = [0, *cuts, x.shape[1]]
    return [stats(x[:, a:b]) for a, b in zip(edges[:-1], edges[1:], strict=True)]


def check_merge_states(merge_states, *, verbose: bool = True,
        hint_level: int = 1) -> Result:
    """Check `merge_states(m_a, l_a, m_b, l_b) -> (m, l)`.

    Cases: two halves of random rows; one side empty (-inf, 0), then the other; both empty;
    five pieces merged in a scrambled tree order (merging is associative and
    commutative, so any order must give the whole row's statistics).
    """
    rng = np.random.default_rng(3)
    x = rng.normal(0.0, 4.0, size=(6, 41))                       # (R, n)
    x[1, 20:] += 15.0                                            # second half dominates
    x[2, :20] += 15.0                                            # first half dominates
    (ma, la), (mb, lb) = _split_states(x, [20])

    def halves(fn):
        return as_pair(fn(ma.copy(), la.copy(), mb.copy(), lb.copy())), stats(x)

    x_masked = _masked_inputs()
    (ea, fa), (eb, fb) = _split_states(x_masked, [7])           # row 0's left part is empty

    def with_empty(fn):
        return as_pair(fn(ea.copy(), fa.copy(), eb.copy(), fb.copy())), stats(x_masked)

    def other_side_empty(fn):        # the same pieces in the other order: b is now empty
        return as_pair(fn(eb.copy(), fb.copy(), ea.copy(), fa.copy())), stats(x_masked)

    def both_empty(fn):
        empty_m, empty_l = np.full(3, -np.inf), np.zeros(3)
        return (as_pair(fn(empty_m.copy(), empty_l.copy(), empty_m.copy(), empty_l.copy())),
                (empty_m, empty_l))

    def scrambled(fn):
        pieces = _split_states(x, [3, 11, 12, 30])               # 5 uneven pieces
        p31 = as_pair(fn(*pieces[3], *pieces[1]))
        p04 = as_pair(fn(*pieces[0], *pieces[4]))
        left = as_pair(fn(*p04, *pieces[2]))
        return as_pair(fn(*p31, *left)), stats(x)

    def wrong(merge, *args):
        with np.errstate(over="ignore", invalid="ignore"):
            return merge(*args)

    common = [(not_pair, HINT_RETURN), (_swapped, HINT_ORDER), (_has_nan, HINT_NEG_INF),
              (_m_standin, HINT_MAX_STANDIN), (_m_wrong, HINT_MAX)]
    cases = [
        Case("two halves of 6 random rows", halves, HINT_MERGE,
             common + [(_matches(wrong(_merge_no_rescale, ma, la, mb, lb)), HINT_RESCALE),
                       (_matches(wrong(_merge_inverted, ma, la, mb, lb)), HINT_DIRECTION),
                       (_matches(wrong(_merge_base2, ma, la, mb, lb)), HINT_BASE2)],
             rtol=_RTOL, atol=_ATOL),
        Case("one side empty (-inf, 0)", with_empty, HINT_NEG_INF,
             common + [(_matches(wrong(_merge_standin_of(side), ea, fa, eb, fb)), HINT_STANDIN)
                       for side in (0, 1)], rtol=_RTOL, atol=_ATOL),
        Case("the other side empty (the same pieces, passed in the other order)",
             other_side_empty, HINT_NEG_INF,
             common + [(_matches(wrong(_merge_standin_of(side), eb, fb, ea, fa)), HINT_STANDIN)
                       for side in (0, 1)], rtol=_RTOL, atol=_ATOL),
        Case("both sides empty", both_empty, HINT_NEG_INF, common, rtol=_RTOL, atol=_ATOL),
        Case("five uneven pieces merged in a scrambled order", scrambled, HINT_MERGE, common,
             rtol=_RTOL, atol=_ATOL),
    ]
    return run_checks("merge_states(m_a, l_a, m_b, l_b)", merge_states, _with_level2(cases),
                      verbose=verbose, hint_level=hint_level)


def show_stream(online_update, x=None) -> None:
    """Print the learner's running (m, l) for one short row, next to the exact values."""
    x = np.array([1.0, 3.0, 2.0, -np.inf, 7.0, 0.5]) if x is None else np.asarray(x, float)
    m, l = np.array([-np.inf]), np.array([0.0])
    print(f"{'step':>4} {'x':>6} {'m (yours)':>10} {'l (yours)':>11} {'m exact':>8} {'l exact':>9}")
    for n, xi in enumerate(x, 1):
        try:
            m, l = as_pair(online_update(m, l, np.array([xi])))
        except NotImplementedError:
            print(f"{TODO_LINE}: fill in online_update first.")
            return
        m_ref, l_ref = stats(x[None, :n])
        print(f"{n:>4} {xi:>6.2f} {float(m[0]):>10.4f} {float(l[0]):>11.6f} "
              f"{float(m_ref[0]):>8.4f} {float(l_ref[0]):>9.6f}")



# -- going further: softmax of a row that arrives in chunks -----------------------------------

#: numpy functions that read only an array's shape and dtype, never its values
_SHAPE_ONLY = {np.empty_like, np.zeros_like, np.ones_like, np.full_like, np.shape, np.ndim,
               np.size, np.result_type}


class _ColumnWatch(np.ndarray):
    """An input that logs the widest piece of it (in columns) that any numpy operation
    touched: slices `x[:, a:b]` are views that log nothing until they are computed with.
    `np.asarray(x)` gives a plain array that logs nothing; the checker's values still
    catch every wrong result, this only checks the contract's "through slices"."""

    def __array_finalize__(self, obj):
        self._widest = getattr(obj, "_widest", None)

    @classmethod
    def wrap(cls, array):
        watched = np.asarray(array).view(cls)
        watched._widest = [0]
        return watched

    def _log(self, args):
        for a in args:
            if isinstance(a, _ColumnWatch) and a._widest is not None and a.ndim >= 1:
                a._widest[0] = max(a._widest[0], a.shape[-1] if a.ndim > 1 else 1)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        self._log(inputs)
        inputs = tuple(np.asarray(a) if isinstance(a, _ColumnWatch) else a for a in inputs)
        out = kwargs.get("out")
        if out:
            kwargs["out"] = tuple(np.asarray(a) if isinstance(a, _ColumnWatch) else a
                                  for a in out)
        return getattr(ufunc, method)(*inputs, **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        if func in _SHAPE_ONLY:   # np.empty_like(x), np.shape(x)...: no value of x is read
            return func(*(np.asarray(a) if isinstance(a, _ColumnWatch) else a for a in args),
                        **kwargs)
        flat = list(args) + list(kwargs.values())
        flat += [a for x in args if isinstance(x, (list, tuple)) for a in x]
        self._log(flat)

        def plain(a):
            if isinstance(a, _ColumnWatch):
                return np.asarray(a)
            if isinstance(a, (list, tuple)):
                return type(a)(plain(b) for b in a)
            return a
        return func(*plain(args), **{k: plain(v) for k, v in kwargs.items()})


def check_stream_softmax(stream_softmax, merge_states, *, verbose: bool = True,
                         hint_level: int = 1) -> Result:
    """Check `stream_softmax(x, chunk, merge_states)` against the dense safe softmax."""
    rng = np.random.default_rng(4)
    big = rng.normal(0.0, 3e3, size=(3, 23))                   # naive exp overflows
    masked = _masked_inputs()                                   # includes a fully masked row

    def expected(x):
        m, l = stats(x)
        with np.errstate(invalid="ignore", divide="ignore"):
            p = np.exp(x - np.where(np.isneginf(m), 0.0, m)[:, None])
            return np.where(l[:, None] > 0, p / np.where(l > 0, l, 1.0)[:, None], 0.0)

    def per_chunk(x, chunk):                                    # a typical mistake
        out = np.zeros_like(x)
        with np.errstate(all="ignore"):
            for c0 in range(0, x.shape[1], chunk):
                part = x[:, c0:c0 + chunk]
                m, l = stats(part)
                out[:, c0:c0 + chunk] = np.exp(part - np.where(np.isneginf(m), 0, m)[:, None]) \
                    / l[:, None]
        return out

    def no_chunk_standin(x, chunk):      # a chunk's sum without the stand-in (round 16 a)
        m, l = np.full(x.shape[0], -np.inf), np.zeros(x.shape[0])
        with np.errstate(all="ignore"):
            for c0 in range(0, x.shape[1], chunk):
                part = x[:, c0:c0 + chunk]
                m_c = part.max(axis=1)
                l_c = np.exp(part - m_c[:, None]).sum(axis=1)
                m_new = np.maximum(m, m_c)
                l = l * np.exp(m - _safe(m_new)) + l_c * np.exp(m_c - _safe(m_new))
                m = m_new
            p = np.exp(x - _safe(m)[:, None])
            guarded = np.where(l[:, None] > 0, p / np.where(l > 0, l, 1.0)[:, None], 0.0)
            return guarded, p / l[:, None]           # pass 2 guarded by l > 0, or not

    cases = []
    for name, x, chunk in (("6 rows of 37 scores, chunks of 8", _stream_inputs(), 8),
                           ("large scores (|x| ~ 1e4), chunks of 5", big, 5),
                           ("masked scores and a fully masked row, chunks of 4", masked, 4),
                           # round 18 (mutants): a state started at m = 0 passed
                           # review round 20 a: chunks of 9 leave a last chunk of one
                           # column (37 = 4 x 9 + 1), which range(0, n - 1, chunk) drops
                           ("every score far below 0 (about -1,000), chunks of 9",
                            _stream_inputs() - 1000.0, 9)):
        wrong = per_chunk(x, chunk)
        with np.errstate(all="ignore"):
            m_all, l_all = stats(x)
            unshifted = np.exp(x) / l_all[:, None]              # pass 2 forgets the max
            undivided = expected(x) * l_all[:, None]            # pass 2 forgets to divide
            cut = x.shape[1] // chunk * chunk                   # whole chunks only
            m_cut, l_cut = stats(x[:, :cut])
            short_1 = np.where(l_cut[:, None] > 0, np.exp(x - _safe(m_cut)[:, None])
                               / np.where(l_cut > 0, l_cut, 1.0)[:, None], 0.0)
            short_2 = expected(x)
            short_2[:, cut:] = 0.0
            short_both = np.zeros_like(x)                     # review round 20 a: both passes
            short_both[:, :cut] = expected(x[:, :cut])
            chunk_nan = [w for w in no_chunk_standin(x, chunk)
                         if not np.allclose(w, expected(x), equal_nan=True)]
            m0 = np.maximum(m_all, 0.0)                         # the state started at m = 0
            l0 = np.exp(x - m0[:, None]).sum(axis=1)
            from_zero = np.where(l0[:, None] > 0, np.exp(x - m0[:, None])
                                 / np.where(l0 > 0, l0, 1.0)[:, None], 0.0)
            m_last = _safe(x[:, (x.shape[1] - 1) // chunk * chunk:].max(axis=1))
            last_max = np.where(l_all[:, None] > 0, np.exp(x - m_last[:, None])
                                / np.where(l_all > 0, l_all, 1.0)[:, None], 0.0)

        kind = [""]                        # the dtype kind of the learner's result

        def run(fns, x=x, chunk=chunk, kind=kind):
            f, merge = fns
            out = f(x.copy(), chunk, merge)
            kind[0] = getattr(out, "dtype", np.dtype(float)).kind
            return real_array(out), expected(x)

        # first: on the far-below case pass 2 without the max also gives 0 (exp(-1,000)),
        # but that slip fails the first case already
        diagnoses = [((lambda y, e, w=from_zero, x=x: not np.allclose(w, expected(x))
                       and np.allclose(y, w, equal_nan=True)), HINT_STREAM_INIT),
                     (_close_to(wrong), HINT_SOFTMAX_SHIFT),
                     (_close_to(unshifted), HINT_SOFTMAX_SHIFT),
                     # round 18 (mutants): pass 2 with the last chunk's max, and the merge's
                     # result dropped (every probability 0), got HINT_SOFTMAX
                     (_close_to(last_max), HINT_SOFTMAX_SHIFT),
                     ((lambda y, e, kind=kind: kind[0] in "iu"), HINT_STREAM_INT),
                     ((lambda y, e: not np.any(y) and np.any(e)), HINT_STREAM_STATE),
                     (_close_to(undivided), HINT_SOFTMAX_SHIFT),
                     (_close_to(short_1), HINT_STREAM_LAST_CHUNK),
                     (_close_to(short_2), HINT_STREAM_LAST_CHUNK),
                     ((lambda y, e, w=short_both, x=x, cut=cut: cut < x.shape[1]
                       and np.allclose(y, w, equal_nan=True)), HINT_STREAM_LAST_CHUNK),
                     ((lambda y, e, ws=chunk_nan: any(np.allclose(y, w, equal_nan=True)
                                                      for w in ws)), HINT_STREAM_CHUNK_STANDIN),
                     ((lambda y, e: bool(np.isnan(y).any())), HINT_SOFTMAX_MASKED),
                     ((lambda y, e: bool(np.isinf(y).any())), HINT_SOFTMAX_SHIFT)]
        cases.append(Case(name, run, HINT_SOFTMAX, diagnoses, rtol=_RTOL, atol=_ATOL))

    x_wide, chunk_wide = _stream_inputs(), 8

    def run_widest(fns):
        f, merge = fns
        watched = _ColumnWatch.wrap(x_wide.copy())
        with np.errstate(all="ignore"):
            f(watched, chunk_wide, merge)
        return np.float64(watched._widest[0]), np.float64(chunk_wide)

    def at_most(yours, expected):
        if float(yours) <= float(expected):
            return True, ""
        return False, (f"your code computed on {float(yours):.0f} columns of x at once; the "
                       f"contract allows slices of chunk = {float(expected):.0f} columns")

    cases.append(Case(f"x touched only through slices of chunk = {chunk_wide} columns",
                      run_widest, HINT_STREAM_CHUNKS, compare=at_most))
    return run_checks("stream_softmax(x, chunk, merge_states)", (stream_softmax, merge_states),
                      _with_level2(cases), verbose=verbose, hint_level=hint_level)


ALL_HINTS = ([v for k, v in dict(globals()).items() if k.startswith("HINT_")]
             + list(LEVEL2.values()))
