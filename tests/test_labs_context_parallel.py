"""Lab 16 (context parallelism: the merge, the zigzag shard map, the ring's work table): the
solutions pass, the stubs say "not implemented", and each typical mistake (an edit of the
solution) gets its own hint: the correction's sign flipped, lse not updated, exponentials
of lse that overflow, no guard for a side that saw no key, chunks r and w - 1 - r, a chunk
edge off by one, the remainder dropped, the ring turning the wrong way, and the others the
checkers replay."""

import numpy as np

from flashcourse.distributed.merge import merge_sigmoid
from flashcourse.distributed.shards import causal_pairs, layout_shards, zigzag_shards
from flashcourse.labs import context_parallel as L
from labtools import assert_hint, hint_leaks_test, lab_path, lab_tests, mistakes_test

LAB = lab_path("lab16_context_parallelism")
CHECKS = [(L.check_ring_merge, "ring_merge"), (L.check_zigzag_ranges, "zigzag_ranges"),
          (L.check_ring_work, "ring_work")]

lab, test_solutions_pass, test_stubs_report_not_implemented = lab_tests(LAB, CHECKS)

_O = "    o = o_a - w_b[..., None] * (o_a - o_b)                              # (..., d)"
_LSE = ("    lse = np.where(a_empty, lse_b, np.where(b_empty, lse_a, lse_a - logsigmoid(-diff)))")
_BODY_START = ("    a_empty, b_empty = np.isneginf(lse_a), np.isneginf(lse_b)"
               "           # rows with no key")
_NAIVE = ("    ea, eb = np.exp(lse_a), np.exp(lse_b)\n"
          "    return ((ea[..., None] * o_a + eb[..., None] * o_b) / (ea + eb)[..., None], "
          "np.log(ea + eb))\n")
_UNGUARDED = ("    return (o_a - sigmoid(lse_b - lse_a)[..., None] * (o_a - o_b), "
              "lse_a - logsigmoid(lse_a - lse_b))\n")
_SIZES = "    sizes = [base + (1 if c < extra else 0) for c in range(chunks)]"
_BOUNDS = "    bounds = [(int(starts[c]), int(starts[c + 1])) for c in range(chunks)]"
_RET = "    return [[bounds[r], bounds[chunks - 1 - r]] for r in range(world)]"
_PAIRS = "(keys[None, :] <= positions[r][:, None]).sum()"

#: function: [(solution text, the mistake that replaces it, the hint it must get), ...]
MISTAKES = {
    "ring_merge": [
        (_O, _O.replace("o_a - w_b", "o_a + w_b"), (L.HINT_SIGN,)),            # sign flip
        ("    return o, lse\n", "    return o, lse_a\n", (L.HINT_NO_LSE,)),   # lse not updated
        (_LSE, "    lse = np.maximum(lse_a, lse_b)", (L.HINT_LSE_MAX,)),
        (_LSE, "    lse = lse_a + lse_b", (L.HINT_LSE_SUM,)),
        (_LSE, _LSE.replace("lse_a - logsigmoid", "lse_a + logsigmoid"), (L.HINT_LSE_SIGN,)),
        ("sigmoid(diff)))", "sigmoid(-diff)))", (L.HINT_SWAPPED,)),           # weights swapped
        (_O, "    o = (o_a + o_b) / 2", (L.HINT_AVERAGE,)),
        (_LSE, _LSE.replace("logsigmoid(-diff)", "logsigmoid(diff)"), (L.HINT_LSE_DIFF,)),
        (_BODY_START, _NAIVE + _BODY_START, (L.HINT_OVERFLOW_EXP,)),            # naive exp
        (_BODY_START, _UNGUARDED + _BODY_START, (L.HINT_EMPTY,)),               # no -inf guard
        ("np.where(a_empty, 1.0, sigmoid(diff))", "np.where(a_empty, 0.0, sigmoid(diff))",
         (L.HINT_EMPTY,)),                               # lse_a = -inf keeps a's o (no NaN)
        ("np.where(a_empty, lse_b,", "np.where(a_empty, lse_a,", (L.HINT_EMPTY,)),
        (_O, _O.replace("w_b[..., None]", "w_b"), (L.HINT_WEIGHT_AXIS,)),  # weight (...) * (..., d)
    ],
    "zigzag_ranges": [
        (_RET, _RET.replace("chunks - 1 - r", "world - 1 - r"), (L.HINT_MIRROR_W,)),
        (_RET, _RET.replace("chunks - 1 - r", "r + world"), (L.HINT_R_PLUS_W,)),
        (_BOUNDS, _BOUNDS.replace("int(starts[c + 1]))", "int(starts[c + 1]) - 1)"),
         (L.HINT_EDGE,)),                                                       # off by one
        (_BOUNDS, _BOUNDS.replace("int(starts[c + 1]))", "int(starts[c + 1]) + 1)"),
         (L.HINT_EDGE,)),
        (_SIZES, "    sizes = [base for c in range(chunks)]",                   # remainder dropped
         (L.HINT_DROPPED.format(n=37, c=6, rest=1),)),
        (_SIZES, "    sizes = [base] * (chunks - 1) + [base + extra]", (L.HINT_REST_LAST,)),
        (_SIZES, "    sizes = [base + extra] + [base] * (chunks - 1)", (L.HINT_REST_LAST,)),
        (_SIZES, "    sizes = [(c + 1) * n // chunks - c * n // chunks for c in range(chunks)]",
         (L.HINT_REST_LAST,)),                                       # edges c n // (2 world)
        (_SIZES, "    size = -(-n // chunks)\n"
                 "    sizes = [max(0, min(size, n - c * size)) for c in range(chunks)]",
         (L.HINT_CEIL,)),
        (_RET, "    return [[bounds[chunks - 1 - r], bounds[r]] for r in range(world)]",
         (L.HINT_ORDER,)),
        (_RET, "    return [[(r * n // world, (r + 1) * n // world)] for r in range(world)]",
         (L.HINT_CONTIGUOUS,)),
    ],
    "ring_work": [
        ("(r - s) % world]", "(r + s) % world]", (L.HINT_DIRECTION,)),
        (_PAIRS, _PAIRS.replace("<=", "<"), (L.HINT_STRICT,)),
        (_PAIRS, "keys.size * positions[r].size", (L.HINT_NO_MASK,)),
        ("    return work\n", "    return work.T\n", (L.HINT_TRANSPOSED,)),
        ("(r - s) % world]", "s]", (L.HINT_ABSOLUTE,)),
    ],
}

test_mistake_gets_its_hint = mistakes_test(LAB, CHECKS, MISTAKES, id_width=40)


def test_mistakes_the_brief_names_are_replayed():
    """Sign flip, lse not updated, naive exp overflowing, chunks r and w - 1 - r, off-by-one
    chunk boundaries, the remainder dropped."""
    hints = {h[0] for edits in MISTAKES.values() for _, _, h in edits}
    for needed in (L.HINT_SIGN, L.HINT_NO_LSE, L.HINT_OVERFLOW_EXP, L.HINT_EMPTY,
                   L.HINT_MIRROR_W, L.HINT_EDGE, L.HINT_DROPPED.format(n=37, c=6, rest=1)):
        assert needed in hints


def test_the_course_functions_pass_and_agree_with_the_checkers():
    """The library's merge and shard map pass the lab's checkers (one rule, one home)."""
    assert L.check_ring_merge(merge_sigmoid, verbose=False).passed
    assert L.check_zigzag_ranges(zigzag_shards, verbose=False).passed
    assert L.check_ring_work(lambda lay: causal_pairs(sum(b - a for r in lay for a, b in r),
                                                      len(lay), "zigzag" if len(lay[0]) == 2
                                                      else "contiguous"),
                             verbose=False).passed


def test_merge_checker_does_not_need_its_own_arrays():
    """The learner gets copies: a function that writes into its inputs still passes, and a
    merge written with logaddexp (another right form) passes too."""
    def in_place(o_a, lse_a, o_b, lse_b):
        o, lse = merge_sigmoid(o_a, lse_a, o_b, lse_b)
        o_a[...] = 0.0
        return o, lse

    def by_logaddexp(o_a, lse_a, o_b, lse_b):
        lse = np.logaddexp(lse_a, lse_b)
        safe = np.where(np.isneginf(lse), 0.0, lse)
        w_a = np.where(np.isneginf(lse_a), 0.0, np.exp(np.where(np.isneginf(lse_a), 0.0,
                                                                lse_a) - safe))
        return w_a[..., None] * o_a + (1 - w_a)[..., None] * o_b, lse
    assert L.check_ring_merge(in_place, verbose=False).passed
    assert L.check_ring_merge(by_logaddexp, verbose=False).passed


def test_zigzag_checker_names_a_list_of_indices():
    """Positions instead of (start, stop) ranges: the shape hint, not a pass."""
    def indices(n, world):
        return [np.concatenate([np.arange(a, b) for a, b in r]) for r in zigzag_shards(n, world)]
    result = assert_hint(L.check_zigzag_ranges, indices, L.HINT_INDICES)
    assert not result.todo


def test_work_table_cases_hold_both_layouts():
    names = {c[2] for c in L.WORK_CASES}
    assert names == {"contiguous", "zigzag"}
    assert all(len(layout_shards(n, w, lay)) == w for n, w, lay in L.WORK_CASES)


def test_half_block_claim_is_made_for_equal_chunks_only():
    """Every zigzag step after the first costs each rank the same pairs when 2w divides n,
    not otherwise: lab 16's summary and notebook 16 say so."""
    import json
    from pathlib import Path
    assert len(set(causal_pairs(32, 4, "zigzag")[:, 1:].ravel())) == 1
    assert len(set(causal_pairs(37, 3, "zigzag")[:, 1:].ravel())) > 1
    root = Path(__file__).resolve().parents[1]
    for path in (LAB, root / "notebooks" / "16_context_parallelism.ipynb"):
        cells = json.loads(Path(path).read_text())["cells"]
        text = " ".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        text = " ".join(text.split())
        i = text.index("every step after the first")
        assert "divides" in text[i - 80:i], path


def test_an_lse_left_at_minus_inf_is_reported_where_it_is_wrong(capsys):
    """A merge whose lse stays -inf where a saw no key but b did: the report points at that
    row (not at a row where both are -inf), and the checker's own arithmetic on -inf prints
    no warning under 'Your function printed'."""
    def keeps_a_lse(o_a, lse_a, o_b, lse_b):
        o, lse = merge_sigmoid(o_a, lse_a, o_b, lse_b)
        return o, np.where(np.isneginf(lse_a), lse_a, lse)
    result = L.check_ring_merge(keeps_a_lse)
    out = capsys.readouterr().out
    assert not result.passed and result.hint == L.HINT_EMPTY
    assert "yours -inf, expected -inf" not in out and "printed" not in out


def _zigzag_from(bounds_of):
    """A zigzag map whose chunk c is bounds_of(n, 2 world)[c], paired r with 2w - 1 - r."""
    def fn(n, world):
        b = bounds_of(n, 2 * world)
        return [[b[r], b[2 * world - 1 - r]] for r in range(world)]
    return fn


def _right_bounds(n, chunks):
    return [tuple(int(x) for x in (p[0], p[-1] + 1)) for p in np.array_split(np.arange(n), chunks)]


def test_zigzag_range_objects_are_named():
    """range(start, stop) objects (or slices) are not (start, stop) pairs: numpy reads a range
    as its positions, which looked like an edge off by one."""
    as_ranges = _zigzag_from(lambda n, c: [range(*b) for b in _right_bounds(n, c)])
    as_slices = _zigzag_from(lambda n, c: [slice(*b) for b in _right_bounds(n, c)])
    for fn in (as_ranges, as_slices):
        assert_hint(L.check_zigzag_ranges, fn, L.HINT_RANGE_OBJECTS)
    assert_hint(L.check_zigzag_ranges,
                lambda n, w: dict(enumerate(_zigzag_from(_right_bounds)(n, w))),
                L.HINT_NOT_A_LIST)


def test_zigzag_start_length_pairs_are_named():
    assert_hint(L.check_zigzag_ranges,
                _zigzag_from(lambda n, c: [(a, z - a) for a, z in _right_bounds(n, c)]),
                L.HINT_START_LENGTH)


def test_zigzag_longer_chunks_spread_elsewhere_are_named():
    """Edges round(c n / 2w) or ceil(c n / 2w) tile every position with chunks that differ by
    at most one, but not with the first n % 2w chunks the longer ones."""
    def edges(rule):
        def bounds(n, chunks):
            e = [rule(c * n, chunks) for c in range(chunks + 1)]
            return [(e[c], e[c + 1]) for c in range(chunks)]
        return bounds
    for rule in (lambda a, b: round(a / b), lambda a, b: -(-a // b)):
        assert_hint(L.check_zigzag_ranges, _zigzag_from(edges(rule)), L.HINT_SPREAD)


def _work_with(compare, local=False):
    def fn(layout):
        pos = [np.concatenate([np.arange(a, b) for a, b in r]) for r in layout]
        world = len(layout)
        out = np.zeros((world, world), dtype=np.int64)
        for r in range(world):
            for s in range(world):
                q, k = pos[r], pos[(r - s) % world]
                if local:
                    q, k = np.arange(q.size), np.arange(k.size)
                out[r, s] = compare(k[None, :], q[:, None]).sum()
        return out
    return fn


def test_work_with_local_indices_or_later_keys_is_named():
    assert_hint(L.check_ring_work, _work_with(np.less_equal, local=True), L.HINT_LOCAL)
    assert_hint(L.check_ring_work, _work_with(np.greater_equal), L.HINT_KEY_AFTER)
    assert L.check_ring_work(_work_with(np.less_equal), verbose=False).passed


test_no_hint_contains_a_solution_line = hint_leaks_test(L.ALL_HINTS, LAB)


def test_hint_level_two_adds_an_explicit_nudge():
    """The lab promises a more explicit hint with hint_level=2: every checker gives one, for
    a named mistake and for an unnamed one."""
    from flashcourse import exercises_distributed as X

    def mirror_w(n, world):
        b = zigzag_shards(n, world)
        return [[b[r][0], b[world - 1 - r][0]] for r in range(world)]
    wrong = [(L.check_ring_merge, lambda oa, la, ob, lb: (oa, la), L.MERGE_STEPS),
             (L.check_ring_merge, lambda oa, la, ob, lb: ((oa + ob) / 2, la), L.MERGE_STEPS),
             (L.check_zigzag_ranges, mirror_w, L.ZIGZAG_STEPS),
             (L.check_ring_work, lambda layout: np.ones((len(layout),) * 2), L.WORK_STEPS),
             (X.check_ring_break_even, lambda f, b, e, h, hkv: f * e / (2 * b), X.EVEN_STEPS),
             (X.check_comm_bytes, lambda *a: 1.0, X.BYTES_STEPS)]
    for check, fn, steps in wrong:
        one = check(fn, verbose=False)
        two = check(fn, verbose=False, hint_level=2)
        assert not two.passed and two.hint == f"{one.hint}\n  More explicitly: {steps}"
