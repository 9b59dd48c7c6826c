"""Lab 16's checkers: the merge of two partial attention states in the safe (sigmoid) form,
the zigzag shard map, and (going further) the causal work of every rank at every ring step
(`flashcourse.distributed` holds the course's versions).

The learner writes

    ring_merge(o_a, lse_a, o_b, lse_b) -> (o, lse)
        o (..., d), lse (...): the state of the union of two disjoint key sets, as
        o = o_a - sigmoid(lse_b - lse_a) (o_a - o_b), lse = lse_a - logsigmoid(lse_a - lse_b);
        a side that saw no key (lse = -inf, o = 0) leaves the other unchanged, never NaN
    zigzag_ranges(n, world) -> [[(start, stop), (start, stop)], ...]
        rank r holds chunks r and 2 world - 1 - r of 2 world chunks, the first n % (2 world)
        chunks one position longer (numpy.array_split's cut), the early chunk first
    ring_work(layout) -> (world, world) ints
        [r, s]: the visible (query, key) pairs, key <= query, of rank r's queries against
        the K/V block it holds at ring step s, the block of rank (r - s) mod world

Expected values come from attention itself (the merge: the state of the union, computed
directly in float64) and from `flashcourse.distributed.shards`. Each typical mistake is
replayed on the case's own inputs and named: the sign of the correction flipped, the
weights swapped, lse not updated (or updated with max, or summed, or with the difference
of o's weight), the exponentials taken without subtracting a max (overflow on large
scores) or of a large difference of the two lse (e^d / (1 + e^d), log of a sigmoid that
underflowed), no guard for an empty side (NaN); chunks r and world - 1 - r, chunk edges off
by one, the remainder dropped, given to the last or the first chunk or spread by edges
c n // (2 world), the late chunk listed first, (start, length) pairs, range objects, a
flat list of four numbers per rank, the longer chunks anywhere but first; the ring's
direction reversed, the diagonal key left out, no mask, the table transposed, local
indices compared instead of global positions, the keys after the query counted.
"""

from __future__ import annotations

import numpy as np

from ..distributed.shards import causal_pairs, layout_shards, zigzag_shards
from ._harness import Case, Result, ResultKindError, as_pair, broadcast_shapes, \
    mistake_diagnoses, real_array, run_checks, with_level2

# -- part 1: the merge ----------------------------------------------------------------------

HINT_MERGE = ("Compare with the rule: w_b = sigmoid(lse_b - lse_a) is b's share of the row's "
              "softmax mass; o = o_a - w_b (o_a - o_b) and lse = lse_a - logsigmoid(lse_a - "
              "lse_b). Where a side's lse is -inf, the result is the other side's state.")
HINT_SIGN = ("Your o moves away from o_b instead of toward it: the correction is "
             "o_a - w_b (o_a - o_b) (minus), which is w_a o_a + w_b o_b with w_a = 1 - w_b.")
HINT_SWAPPED = ("Your weights are swapped: the side with the larger lse must pull o toward "
                "itself. b's weight is sigmoid(lse_b - lse_a) = e^lse_b / (e^lse_a + e^lse_b).")
HINT_NO_LSE = ("Your lse is lse_a unchanged: the merged row has seen the keys of both sides, "
               "so its log-sum-exp grows: lse = lse_a - logsigmoid(lse_a - lse_b) "
               "(= log(e^lse_a + e^lse_b)).")
HINT_LSE_MAX = ("Your lse is max(lse_a, lse_b): the log of a sum is more than its largest "
                "term's log (two equal sides give max + log 2). Use lse_a - logsigmoid(lse_a "
                "- lse_b).")
HINT_LSE_SUM = ("Your lse is lse_a + lse_b: log-sum-exps combine as log(e^lse_a + e^lse_b), "
                "not by adding them. Use lse_a - logsigmoid(lse_a - lse_b).")
HINT_LSE_SIGN = ("Your lse got smaller than lse_a: logsigmoid is never positive, so "
                 "lse = lse_a - logsigmoid(lse_a - lse_b) (minus) can only grow.")
HINT_LSE_DIFF = ("Your lse uses the difference the other way round: o's weight takes "
                 "lse_b - lse_a, but the lse grows by -logsigmoid(lse_a - lse_b) (= log(1 + "
                 "e^(lse_b - lse_a))): lse = lse_a - logsigmoid(lse_a - lse_b).")
HINT_AVERAGE = ("Your o is the plain average of o_a and o_b: each side weighs as much as its "
                "softmax mass, e^lse. Weight b by sigmoid(lse_b - lse_a).")
HINT_UNNORMALISED = ("Your o is w_a o_a + w_b o_b with weights e^(lse - max) that do not add "
                     "up to 1: divide by their sum, or use the sigmoid form, whose weights "
                     "do.")
HINT_OVERFLOW_EXP = ("Your result holds NaN or inf where the scores are large (|lse| ~ 800): "
                     "e^800 overflows and e^-800 underflows to 0. Never exponentiate an lse "
                     "itself: sigmoid(lse_b - lse_a) and logsigmoid(...) take only the "
                     "difference (use the lab's `sigmoid` and `logsigmoid`).")
HINT_OVERFLOW_DIFF = ("Your result holds NaN or inf where the two sides' lse are far apart "
                      "(here about 1600): e^(lse_b - lse_a) overflows too, and np.log of a "
                      "sigmoid that underflowed to 0 is -inf. The lab's `sigmoid` and "
                      "`logsigmoid` never overflow: apply them to the difference directly.")
HINT_WEIGHT_AXIS = ("numpy could not combine a per-row number (shape (...), like lse) with a "
                    "per-row vector (shape (..., d), like o): b's weight has lse's shape. Give "
                    "it a last axis of length 1 (weight[..., None]) before multiplying it with "
                    "o_a - o_b.")
HINT_EMPTY = ("Your result is wrong only in rows where a side saw no key (its lse is -inf): "
              "there -inf - (-inf) gives NaN, and a row whose lse_a is -inf must become b's "
              "state (o_b, lse_b). Where lse_a is -inf take b's state, where lse_b is -inf "
              "keep a's (np.where, with np.isneginf), and compute the formula only elsewhere.")


MERGE_STEPS = ("Step by step: (1) mark the rows where a side saw no key, with np.isneginf on "
               "lse_a and on lse_b; (2) take the difference lse_b - lse_a with both values "
               "replaced by 0 in the marked rows, so that -inf never meets -inf; (3) b's "
               "weight is sigmoid of that difference, but 0 where b is empty and 1 where a "
               "is empty; (4) o moves from o_a toward o_b by that weight (give the weight a "
               "last axis of length 1 so that it spreads over d); (5) the merged lse is lse_a "
               "minus logsigmoid of minus that difference, and in a marked row the other "
               "side's lse.")


def sigmoid(x):
    """1 / (1 + e^-x) without overflow, elementwise (float64; +-inf give 1 and 0)."""
    return np.exp(-np.logaddexp(0.0, -np.asarray(x, np.float64)))


def logsigmoid(x):
    """log sigmoid(x) = -log(1 + e^-x) without overflow, elementwise (float64)."""
    return -np.logaddexp(0.0, -np.asarray(x, np.float64))


def partial_state(s, v, keys):
    """(o, lse) of score rows s (..., Tq, Tk) over the keys with keys[..., i, j] True, values
    v (..., Tk, d), in float64; a row with no key gets o = 0, lse = -inf."""
    s = np.where(keys, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m)                                          # masked keys give 0
    ell = p.sum(axis=-1)
    safe = np.where(ell > 0, ell, 1.0)
    o = (p @ v) / safe[..., None]
    with np.errstate(divide="ignore"):
        lse = np.where(ell > 0, m[..., 0] + np.log(safe), -np.inf)
    return o, lse


def _merge_mistake(o_a, lse_a, o_b, lse_b, mistake):
    """The merge with `mistake` (None: right), all in float64, with no warnings."""
    a_empty, b_empty = np.isneginf(lse_a), np.isneginf(lse_b)
    either = a_empty | b_empty
    diff = np.where(either, 0.0, lse_b) - np.where(either, 0.0, lse_a)
    w_b = np.where(b_empty, 0.0, np.where(a_empty, 1.0, sigmoid(diff)))
    o = o_a - w_b[..., None] * (o_a - o_b)
    lse = np.where(a_empty, lse_b, np.where(b_empty, lse_a, lse_a - logsigmoid(-diff)))
    with np.errstate(all="ignore"):
        if mistake == "sign":
            o = o_a + w_b[..., None] * (o_a - o_b)
        elif mistake == "swapped":
            o = o_a - (1.0 - w_b)[..., None] * (o_a - o_b)
        elif mistake == "no lse":
            lse = lse_a.copy()
        elif mistake == "lse max":
            lse = np.maximum(lse_a, lse_b)
        elif mistake == "lse sum":
            lse = lse_a + lse_b
        elif mistake == "lse sign":
            lse = np.where(a_empty, lse_b, np.where(b_empty, lse_a, lse_a + logsigmoid(-diff)))
        elif mistake == "lse diff":
            lse = np.where(a_empty, lse_b, np.where(b_empty, lse_a, lse_a - logsigmoid(diff)))
        elif mistake == "average":
            o = (o_a + o_b) / 2.0
        elif mistake == "unnormalised":
            m = np.maximum(lse_a, lse_b)
            o = (np.exp(lse_a - m)[..., None] * o_a + np.exp(lse_b - m)[..., None] * o_b)
        elif mistake == "naive exp":
            ea, eb = np.exp(lse_a), np.exp(lse_b)
            o = (ea[..., None] * o_a + eb[..., None] * o_b) / (ea + eb)[..., None]
            lse = np.log(ea + eb)
        elif mistake == "unguarded":
            o = o_a - sigmoid(lse_b - lse_a)[..., None] * (o_a - o_b)
            lse = lse_a - logsigmoid(lse_a - lse_b)
        elif mistake is not None:
            raise ValueError(mistake)
    return o, lse


MISTAKES_MERGE = [("sign", (HINT_SIGN,)), ("swapped", (HINT_SWAPPED,)),
                  ("no lse", (HINT_NO_LSE,)), ("lse max", (HINT_LSE_MAX,)),
                  ("lse sum", (HINT_LSE_SUM,)), ("lse sign", (HINT_LSE_SIGN,)),
                  ("lse diff", (HINT_LSE_DIFF,)),
                  ("average", (HINT_AVERAGE,)), ("unnormalised", (HINT_UNNORMALISED,))]


def _pair_close(yours, want, rtol=1e-9, atol=1e-12) -> bool:
    if not (isinstance(yours, tuple) and len(yours) == 2):
        return False
    try:
        y = [np.asarray(x, np.float64) for x in yours]
    except (TypeError, ValueError):
        return False
    return all(a.shape == b.shape and np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
               for a, b in zip(y, want))


def _state_of(yours, want):
    """Your (o, lse) as float64 arrays of the right state's shapes, or None."""
    try:
        o, lse = (np.asarray(x, np.float64) for x in yours)
    except (TypeError, ValueError):
        return None
    if o.shape != want[0].shape or lse.shape != want[1].shape:
        return None
    return o, lse


def _bad_rows(yours, want) -> np.ndarray | None:
    """Rows (of lse's shape) where yours holds NaN or inf that the right state does not."""
    state = _state_of(yours, want)
    if state is None:
        return None
    o, lse = state
    bad_o = ~np.isfinite(o).all(axis=-1)
    bad_lse = np.isnan(lse) | (np.isinf(lse) & ~np.isinf(want[1])) | (lse == np.inf)
    return bad_o | bad_lse


def _overflowed(large):
    def fired(yours, want):
        bad = _bad_rows(yours, want)
        return bad is not None and bool((bad & large).any())
    return fired


def _wrong_rows(yours, want) -> np.ndarray | None:
    """Rows (of lse's shape) where yours differs from the right state (NaN included)."""
    state = _state_of(yours, want)
    if state is None:
        return None
    o, lse = state
    o_ok = np.isclose(o, want[0], rtol=1e-9, atol=1e-12).all(axis=-1)
    lse_ok = np.isclose(lse, want[1], rtol=1e-9, atol=1e-12)    # -inf == -inf is close
    return ~(o_ok & lse_ok)


def _wrong_on_empty_only(empty):
    def fired(yours, want):
        wrong = _wrong_rows(yours, want)
        return wrong is not None and bool(wrong.any()) and not bool((wrong & ~empty).any())
    return fired


def _row_against_vector(exc) -> bool:
    """A broadcast error between a row statistic (...) and a row vector (..., d)."""
    shapes = broadcast_shapes(exc)
    return any(len(b) == len(a) + 1 and b[:-1] == a for a in shapes for b in shapes)


def _merge_case(name, s, v, in_a, in_b):
    """A case: the state over keys `in_a` merged with the state over `in_b` (boolean masks
    (..., Tq, Tk), disjoint) must be the state over both."""
    o_a, lse_a = partial_state(s, v, in_a)
    o_b, lse_b = partial_state(s, v, in_b)
    want = partial_state(s, v, in_a | in_b)
    args = (o_a, lse_a, o_b, lse_b)
    diagnoses = mistake_diagnoses(lambda m: _merge_mistake(*args, m), MISTAKES_MERGE,
                                  _pair_close, right=want)
    large = (np.abs(lse_a) > 300) | (np.abs(lse_b) > 300)
    empty = np.isneginf(lse_a) | np.isneginf(lse_b)
    if large.any():
        diagnoses.insert(0, (_overflowed(large), HINT_OVERFLOW_EXP))
    with np.errstate(invalid="ignore"):
        far = np.abs(lse_a - lse_b) > 700                       # -inf - (-inf) is not far
    if far.any():
        diagnoses.insert(0, (_overflowed(far), HINT_OVERFLOW_DIFF))
    if empty.any():
        diagnoses.insert(0, (_wrong_on_empty_only(empty), HINT_EMPTY))

    def run(fn):
        return as_pair(fn(*(x.copy() for x in args))), want
    return Case(name, run, HINT_MERGE, with_level2(diagnoses, MERGE_STEPS), rtol=1e-9, atol=1e-12,
                names=("o", "lse"), hint2=MERGE_STEPS,
                error_diagnoses=[(_row_against_vector, HINT_WEIGHT_AXIS, MERGE_STEPS)])


def _random_split(seed, lead, tq, tk, d, spread=2.0):
    """Random scores, keys split at random between a and b (each row sees both)."""
    rng = np.random.default_rng(seed)
    s = rng.standard_normal((*lead, tq, tk)) * spread
    v = rng.standard_normal((*lead, tk, d))
    in_a = rng.random(tk) < 0.4
    in_a[:2] = True, False                                     # neither side empty
    in_a = np.broadcast_to(in_a, (*lead, tq, tk))
    return s, v, in_a.copy(), ~in_a


def _causal_split(seed, tq, d):
    """Causal rows (query i sees keys j <= i); side a holds key 0 and keys 2 .. tq // 2 - 1,
    side b keys tq // 2 .. tq - 1, key 1 neither. Row 0 sees no key at all (both sides
    empty), rows 1 .. tq // 2 - 1 nothing of b, row 3 is given b's keys only (a empty),
    the later rows both."""
    rng = np.random.default_rng(seed)
    s = rng.standard_normal((tq, tq)) * 2.0
    v = rng.standard_normal((tq, d))
    i, j = np.arange(tq)[:, None], np.arange(tq)[None, :]
    visible = j <= i
    visible[0, :] = False                                      # a row with no key at all
    visible[3, :] = j[0] >= tq // 2                            # a row with b's keys only
    a_keys = (j == 0) | ((j >= 2) & (j < tq // 2))
    b_keys = j >= tq // 2
    return s, v, visible & a_keys, visible & b_keys


def _large_split(seed):
    """Scores of order 1000: lse_a, lse_b near +800 on even rows and -800 on odd rows,
    with differences of a few units between the two sides."""
    rng = np.random.default_rng(seed)
    s = rng.standard_normal((2, 6, 10)) * 3.0
    s[:, 0::2] += 800.0
    s[:, 1::2] -= 800.0
    v = rng.standard_normal((2, 10, 4))
    in_a = np.broadcast_to(np.arange(10) % 3 == 0, (2, 6, 10))
    return s, v, in_a.copy(), ~in_a


def _far_split(seed):
    """Scores of order 1000 on one side only: a's keys near +800 and b's near -800 on even
    rows, the reverse on odd rows, so that lse_b - lse_a is about -1600 or +1600."""
    rng = np.random.default_rng(seed)
    s = rng.standard_normal((2, 4, 9)) * 3.0
    in_a = np.broadcast_to(np.arange(9) % 2 == 0, (2, 4, 9)).copy()
    sign = np.where(np.arange(4) % 2 == 0, 1.0, -1.0)[None, :, None]    # (1, rows, 1)
    s += np.where(in_a, 800.0, -800.0) * sign
    v = rng.standard_normal((2, 9, 3))
    return s, v, in_a, ~in_a


MERGE_CASES = [
    ("2 heads x 7 rows, d = 5, 22 keys split at random between a and b",
     lambda: _random_split(1, (2,), 7, 22, 5)),
    ("2 heads x 6 rows, d = 4, scores of order 1000 (lse near +800 and -800)",
     lambda: _large_split(3)),
    ("2 heads x 4 rows, d = 3, a's scores near +800 and b's near -800, or the reverse "
     "(lse_b - lse_a about -1600 or +1600)", lambda: _far_split(5)),
    ("11 causal rows, d = 3: rows where a or b (or both) saw no key (lse = -inf)",
     lambda: _causal_split(2, 11, 3)),
    ("batch 3 x 2 heads x 1 row, d = 1, 5 keys", lambda: _random_split(4, (3, 2), 1, 5, 1)),
]


def check_ring_merge(ring_merge, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Check `ring_merge(o_a, lse_a, o_b, lse_b) -> (o, lse)` against the state of the union,
    computed directly (float64, rtol 1e-9)."""
    cases = [_merge_case(name, *make()) for name, make in MERGE_CASES]
    return run_checks("ring_merge(o_a, lse_a, o_b, lse_b)", ring_merge, cases,
                      verbose=verbose, hint_level=hint_level)


# -- part 2: the zigzag shard map -----------------------------------------------------------

HINT_ZIGZAG = ("Compare with the rule: cut n positions into 2 world chunks, the first "
               "n % (2 world) of them one position longer; rank r gets [(start, stop) of "
               "chunk r, (start, stop) of chunk 2 world - 1 - r], stop exclusive.")
HINT_MIRROR_W = ("Your second chunk is chunk world - 1 - r: the mirror is taken over all "
                 "2 world chunks, so rank r pairs chunk r with chunk 2 world - 1 - r (rank 0 "
                 "gets the first and the last chunk).")
HINT_R_PLUS_W = ("Your second chunk is chunk r + world: that gives rank 0 the two lightest "
                 "chunks of each half and the last rank the heaviest. Pair chunk r with its "
                 "mirror, chunk 2 world - 1 - r.")
HINT_CONTIGUOUS = ("You gave each rank one contiguous range (the contiguous layout): zigzag "
                   "cuts 2 world chunks and gives each rank two, [chunk r, chunk 2 world - 1 "
                   "- r].")
HINT_EDGE = ("A chunk's edge is off by one: chunk c covers positions start .. stop - 1 and "
             "is written (start, stop), stop exclusive as in Python's slices; the next chunk "
             "starts at this one's stop.")
HINT_DROPPED = ("The last positions belong to no rank: with n = {n} and 2 world = {c} chunks, "
                "n // (2 world) positions per chunk leave {rest} over. Give the first "
                "n % (2 world) chunks one more position each (numpy.array_split's rule).")
HINT_REST_LAST = ("Your chunks hold every position, but the leftover n % (2 world) positions "
                  "are not where the course's rule puts them (all in one chunk, or spread "
                  "from the end as edges c n // (2 world) spread them). The rule "
                  "(numpy.array_split's, and flashcourse.distributed.shards.chunk_bounds') "
                  "gives each of the first n % (2 world) chunks one position more.")
HINT_CEIL = ("Your chunks are ceil(n / (2 world)) long with a short last one: the course's "
             "rule gives the first n % (2 world) chunks one position more than the others "
             "(numpy.array_split's cut), so lengths differ by at most one.")
HINT_INDICES = ("You returned each rank's positions one by one: return its two ranges as "
                "(start, stop) pairs, [[(start, stop), (start, stop)], ...], stop exclusive.")
HINT_RANGE_OBJECTS = ("Your ranges are Python range (or slice) objects: they hold the right "
                      "idea, but later code unpacks each pair as `for a, b in ranges`, and a "
                      "range unpacks into its positions. Write each chunk as the tuple "
                      "(start, stop) of plain integers.")
HINT_NOT_A_LIST = ("Return a list with one entry per rank, in rank order (rank r's entry at "
                   "index r), each [(start, stop), (start, stop)]: not a dict or another "
                   "container.")
HINT_FLAT = ("Your four numbers per rank are right, but written as one flat list: give "
             "each rank its two chunks as two (start, stop) pairs, [[(a, b), (c, d)], ...], "
             "so that later code can write `for start, stop in ranges`.")
HINT_START_LENGTH = ("Your second number of each pair is the chunk's length: write (start, "
                     "stop), stop exclusive, where stop = start + length.")
HINT_SPREAD = ("Your chunks cover every position once and their lengths differ by at most "
               "one, but the longer chunks are not where the course's rule puts them: the "
               "first n % (2 world) chunks are the longer ones (numpy.array_split's cut), "
               "not chunks chosen by rounding c n / (2 world) or from the end.")
HINT_ORDER = ("Each rank's ranges are in the wrong order: list the early chunk (chunk r) "
              "first, then chunk 2 world - 1 - r, the order in which the rank holds its rows.")


ZIGZAG_STEPS = ("Step by step: (1) split n into 2 world chunk lengths with divmod: the "
                "quotient for every chunk, one more for each of the first (remainder) chunks; "
                "(2) a chunk starts where the one before it stops, the first at 0; (3) write "
                "chunk c as the tuple (its start, its start + its length); (4) rank r's entry "
                "is the list of chunk r and chunk 2 world - 1 - r, in that order.")


def _bounds(n, parts, rule):
    base, extra = divmod(n, parts)
    if rule == "dropped":
        sizes = [base] * parts
    elif rule == "rest last":
        sizes = [base] * (parts - 1) + [base + extra]
    elif rule == "rest first":
        sizes = [base + extra] + [base] * (parts - 1)
    elif rule == "floor":                                     # edges c n // parts
        sizes = [(c + 1) * n // parts - c * n // parts for c in range(parts)]
    elif rule == "ceil":
        size = -(-n // parts)
        sizes = [max(0, min(size, n - c * size)) for c in range(parts)]
    else:
        sizes = [base + (1 if c < extra else 0) for c in range(parts)]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    return [(int(a), int(a + s)) for a, s in zip(starts, sizes)]


def _zigzag_mistake(n, world, mistake):
    if mistake is None:
        return zigzag_shards(n, world)
    if mistake == "contiguous":
        return layout_shards(n, world, "contiguous")
    rule = mistake if mistake in ("dropped", "rest last", "rest first", "floor", "ceil") \
        else "split"
    b = _bounds(n, 2 * world, rule)
    if mistake == "edge short":
        b = [(a, z - 1) for a, z in b]
    elif mistake == "edge long":
        b = [(a, z + 1) for a, z in b]
    second = {"mirror w": lambda r: world - 1 - r,
              "r plus w": lambda r: r + world}.get(mistake, lambda r: 2 * world - 1 - r)
    out = [[b[r], b[second(r) % (2 * world)]] for r in range(world)]
    if mistake == "late first":
        out = [[y, x] for x, y in out]
    return out


def _holds(x, kinds) -> bool:
    """Whether the nested lists and tuples `x` hold an object of one of `kinds`."""
    if isinstance(x, kinds):
        return True
    return isinstance(x, (list, tuple)) and any(_holds(y, kinds) for y in x)


def _ranges_array(x):
    if x is None:                                   # a missing return: named as such
        return None
    if not isinstance(x, (list, tuple, np.ndarray)):
        raise ResultKindError(f"expected a list with one entry per rank, got a "
                              f"{type(x).__name__}", HINT_NOT_A_LIST)
    if _holds(x, (range, slice)):
        raise ResultKindError("your result holds range or slice objects where (start, stop) "
                              "pairs of integers are expected", HINT_RANGE_OBJECTS)
    return np.asarray(real_array(x), np.float64)


def _spread_elsewhere(n, world):
    """Yours tiles 0 .. n with 2 world chunks whose lengths differ by at most one, paired
    r with 2 world - 1 - r, but not with the first n % (2 world) chunks the longer ones."""
    def fired(yours, want):
        y = np.asarray(yours, np.float64)
        if y.shape != (world, 2, 2):
            return False
        chunks = [tuple(y[r, 0]) for r in range(world)] + \
                 [tuple(y[r, 1]) for r in reversed(range(world))]
        starts = np.array([a for a, _ in chunks])
        stops = np.array([z for _, z in chunks])
        sizes = stops - starts
        return bool(starts[0] == 0 and stops[-1] == n and np.array_equal(starts[1:], stops[:-1])
                    and sizes.min() >= n // (2 * world) and sizes.max() - sizes.min() <= 1
                    and not np.array_equal(y, want))
    return fired


def _same_ranges(yours, want) -> bool:
    try:
        y = np.asarray(yours, np.float64)
    except (TypeError, ValueError):
        return False
    w = np.asarray(want, np.float64)
    return y.shape == w.shape and np.array_equal(y, w)


def _zigzag_case(n, world):
    c = 2 * world
    mistakes = [("mirror w", (HINT_MIRROR_W,)), ("r plus w", (HINT_R_PLUS_W,)),
                ("contiguous", (HINT_CONTIGUOUS,)), ("edge short", (HINT_EDGE,)),
                ("edge long", (HINT_EDGE,)),
                ("dropped", (HINT_DROPPED.format(n=n, c=c, rest=n % c),)),
                ("rest last", (HINT_REST_LAST,)), ("rest first", (HINT_REST_LAST,)),
                ("floor", (HINT_REST_LAST,)), ("ceil", (HINT_CEIL,)),
                ("late first", (HINT_ORDER,))]
    replay = lambda m: np.asarray(_zigzag_mistake(n, world, m), np.float64)   # noqa: E731
    diagnoses = mistake_diagnoses(replay, mistakes, _same_ranges)
    flat = replay(None).reshape(world, 4)
    diagnoses.append(((lambda yours, _want: _same_ranges(yours, flat)), HINT_FLAT))
    diagnoses.append(((lambda yours, _want: np.ndim(yours) == 2 and len(yours) == world
                       and np.shape(yours)[1] != 2), HINT_INDICES))
    start_length = replay(None).copy()
    start_length[..., 1] -= start_length[..., 0]
    diagnoses.append(((lambda yours, _want: _same_ranges(yours, start_length)),
                      HINT_START_LENGTH))
    diagnoses.append((_spread_elsewhere(n, world), HINT_SPREAD))
    want = replay(None)
    rest = n % c
    name = f"n = {n}, world = {world}" + (
        f" ({rest} position{'s' if rest > 1 else ''} left over by {c} equal chunks)" if rest
        else f" ({c} chunks of {n // c})")

    def run(fn):
        return _ranges_array(fn(n, world)), want
    return Case(name, run, HINT_ZIGZAG, with_level2(diagnoses, ZIGZAG_STEPS), rtol=0.0, atol=0.0,
                hint2=ZIGZAG_STEPS)


ZIGZAG_CASES = [(16, 4), (37, 3), (23, 2), (8, 4), (100, 8), (9, 1)]


def check_zigzag_ranges(zigzag_ranges, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Check `zigzag_ranges(n, world)` against `flashcourse.distributed.shards.zigzag_shards`
    (the same ranges, exactly)."""
    cases = [_zigzag_case(n, w) for n, w in ZIGZAG_CASES]
    return run_checks("zigzag_ranges(n, world)", zigzag_ranges, cases, verbose=verbose,
                      hint_level=hint_level)


# -- going further: the causal work of every rank at every ring step ------------------------

HINT_WORK = ("Compare with the rule: entry [r, s] counts the pairs (query i of rank r, key j "
             "of rank (r - s) % world) with j <= i, over all of both ranks' ranges.")
HINT_DIRECTION = ("Your ring turns the wrong way: blocks move to rank + 1 each step, so at "
                  "step s rank r holds the block of rank (r - s) % world, not (r + s).")
HINT_STRICT = ("Your counts miss the diagonal: a query sees its own key (j <= i, not j < i).")
HINT_NO_MASK = ("Your counts ignore the causal mask: every rank computes all its pairs. Count "
                "only keys j <= query i.")
HINT_TRANSPOSED = ("Your table is transposed: rows are ranks and columns ring steps, entry "
                   "[r, s].")
HINT_LOCAL = ("You compared the rows' local indices (0, 1, ... inside each rank) instead of "
              "their global positions: the causal mask is about the sequence, key position j "
              "<= query position i, so use the positions the ranges cover.")
HINT_KEY_AFTER = ("Your counts take the keys at or after each query (j >= i): causal attention "
                  "lets a query see the keys up to itself, j <= i.")
HINT_ABSOLUTE = ("At step s you used the K/V of rank s for every rank: each rank holds a "
                 "different block, the one of rank (r - s) % world.")


WORK_STEPS = ("Step by step: (1) for each rank, the global positions its ranges cover (one "
              "np.arange per (start, stop), joined); (2) for rank r and step s, the keys are "
              "the positions of rank (r - s) % world; (3) compare every key with every query "
              "(a key row against a query column, by broadcasting) and count the pairs where "
              "the key is at most the query; (4) put that count at [r, s] of a (world, world) "
              "integer array.")


def _work(layout, mistake):
    world = len(layout)
    out = np.zeros((world, world), dtype=np.int64)
    for r in range(world):
        qi = np.concatenate([np.arange(a, b) for a, b in layout[r]])
        for s in range(world):
            src = {"direction": (r + s) % world, "absolute": s}.get(mistake, (r - s) % world)
            kj = np.concatenate([np.arange(a, b) for a, b in layout[src]])
            if mistake == "local":
                qi_, kj_ = np.arange(qi.size), np.arange(kj.size)
                out[r, s] = int((kj_[None, :] <= qi_[:, None]).sum())
            elif mistake == "key after":
                out[r, s] = int((kj[None, :] >= qi[:, None]).sum())
            elif mistake == "no mask":
                out[r, s] = qi.size * kj.size
            elif mistake == "strict":
                out[r, s] = int((kj[None, :] < qi[:, None]).sum())
            else:
                out[r, s] = int((kj[None, :] <= qi[:, None]).sum())
    return out.T if mistake == "transposed" else out


def _work_case(n, world, layout_name):
    layout = layout_shards(n, world, layout_name)
    want = causal_pairs(n, world, layout_name).astype(np.float64)
    mistakes = [("direction", (HINT_DIRECTION,)), ("strict", (HINT_STRICT,)),
                ("no mask", (HINT_NO_MASK,)), ("transposed", (HINT_TRANSPOSED,)),
                ("absolute", (HINT_ABSOLUTE,)), ("local", (HINT_LOCAL,)),
                ("key after", (HINT_KEY_AFTER,))]
    diagnoses = mistake_diagnoses(lambda m: _work(layout, m).astype(np.float64), mistakes,
                                  _same_ranges, right=want)

    def run(fn):
        return real_array(fn([list(map(tuple, r)) for r in layout])), want
    return Case(f"{layout_name}, n = {n}, world = {world}", run, HINT_WORK,
                with_level2(diagnoses, WORK_STEPS), rtol=0.0, atol=0.0, hint2=WORK_STEPS)


WORK_CASES = [(16, 4, "contiguous"), (16, 4, "zigzag"), (37, 3, "zigzag"), (11, 2, "contiguous")]


def check_ring_work(ring_work, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Check `ring_work(layout) -> (world, world)` against
    `flashcourse.distributed.shards.causal_pairs`."""
    cases = [_work_case(*c) for c in WORK_CASES]
    return run_checks("ring_work(layout)", ring_work, cases, verbose=verbose,
                      hint_level=hint_level)


ALL_HINTS = tuple(v for k, v in dict(globals()).items()
                  if k.startswith("HINT_") or k.endswith("_STEPS"))
