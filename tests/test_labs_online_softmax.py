"""Lab 02 (online softmax): the checker accepts the solution and catches the typical mistakes.

The solutions are taken from the solution notebooks themselves (their function
cells are executed here), and the stubs from the generated student version, so
what is tested is exactly what learners get. Each wrong implementation below is
a mistake learners make; the test asserts that the checker rejects it with the
hint that names that mistake (Result.hint), not merely that it fails.
"""

import numpy as np
import pytest

from flashcourse.labs import online_softmax as L1
from labtools import assert_hint, functions_of, hint_leaks_test, lab_fixture, lab_path, mutate

LAB = lab_path("lab02_online_softmax")


lab = lab_fixture(LAB)


def _safe(m):
    return np.where(m == -np.inf, 0.0, m)


# ---------------------------------------------------------------------------
# Lab 01: online softmax
# ---------------------------------------------------------------------------

def test_lab02_solutions_pass(lab):
    assert L1.check_online_update(lab["online_update"], verbose=False).passed
    assert L1.check_merge_states(lab["merge_states"], verbose=False).passed


def test_lab02_stubs_report_not_implemented(capsys):
    ns = functions_of(LAB, student=True)
    for check, name in ((L1.check_online_update, "online_update"),
                        (L1.check_merge_states, "merge_states")):
        result = check(ns[name])
        assert not result.passed and result.todo
    out = capsys.readouterr().out
    assert out.count("Not implemented yet") == 2
    assert "All checks passed" not in out


def test_lab02_solution_matches_reference_module(lab):
    """The notebook's rule agrees with flashcourse.reference.online_update, element by element."""
    from flashcourse import reference
    rng = np.random.default_rng(0)
    x = rng.normal(0, 5, 50)
    state = reference.EMPTY_STATE
    m, l = np.array([-np.inf]), np.array([0.0])
    for xi in x:
        state = reference.online_update(state, float(xi))
        m, l = lab["online_update"](m, l, np.array([xi]))
    # float64, same formula, same order: agreement to 1e-12 relative
    assert m[0] == state.m and abs(l[0] - state.l) <= 1e-12 * state.l


def _update_no_rescale(m, l, x):
    m_new = np.maximum(m, x)
    return m_new, l + np.exp(x - _safe(m_new))


def _update_no_guard(m, l, x):
    m_new = np.maximum(m, x)
    return m_new, l * np.exp(m - m_new) + np.exp(x - m_new)


def _update_exp_apart(m, l, x):
    """round 18 (mutants): exp of the max and of x taken apart (inf / inf for x = 1e4) got
    HINT_NEG_INF, the -inf - (-inf) of an empty state."""
    m_new = np.maximum(m, x)
    m_safe = _safe(m_new)
    return m_new, l * np.exp(m) / np.exp(m_safe) + np.exp(x) / np.exp(m_safe)


def _update_forgets_old_max(m, l, x):
    m_new = np.where(x == -np.inf, m, x)        # "the newest score is the max"
    return m_new, l * np.exp(m - _safe(m_new)) + np.exp(x - _safe(m_new))


def _update_inverted(m, l, x):
    m_new = np.maximum(m, x)
    old = np.where(m == -np.inf, m_new, m)
    return m_new, l * np.exp(m_new - old) + np.exp(x - _safe(m_new))


def _update_unshifted(m, l, x):
    return np.maximum(m, x), l + np.exp(x)


def _merge_no_rescale(m_a, l_a, m_b, l_b):
    return np.maximum(m_a, m_b), l_a + l_b


def _merge_no_guard(m_a, l_a, m_b, l_b):
    m = np.maximum(m_a, m_b)
    return m, l_a * np.exp(m_a - m) + l_b * np.exp(m_b - m)


def _merge_min(m_a, l_a, m_b, l_b):
    m = np.minimum(m_a, m_b)
    return m, l_a * np.exp(m_a - _safe(m)) + l_b * np.exp(m_b - _safe(m))


def _merge_inverted(m_a, l_a, m_b, l_b):
    m = np.maximum(m_a, m_b)
    return m, l_a * np.exp(m - m_a) + l_b * np.exp(m - m_b)


def _update_new_term_old_max(m, l, x):      # review round 5 ac, M1
    m_new = np.maximum(m, x)
    return m_new, l * np.exp(m - _safe(m_new)) + np.exp(x - m)


def _update_python_max(m, l, x):            # raises: the case's own hint must be generic
    m_new = max(m, x)
    return m_new, l * np.exp(m - _safe(m_new)) + np.exp(x - _safe(m_new))


def _update_swapped(m, l, x):
    m_new = np.maximum(m, x)
    return l * np.exp(m - _safe(m_new)) + np.exp(x - _safe(m_new)), m_new


def _merge_swapped(m_a, l_a, m_b, l_b):
    m = np.maximum(m_a, m_b)
    return l_a * np.exp(m_a - _safe(m)) + l_b * np.exp(m_b - _safe(m)), m


def _merge_python_max(m_a, l_a, m_b, l_b):
    m = max(m_a, m_b)
    return m, l_a * np.exp(m_a - _safe(m)) + l_b * np.exp(m_b - _safe(m))


def _update_standin_from_old_max(m, l, x):  # review round 14, M1: exp(x - 0) overflows
    m_new = np.maximum(m, x)
    m_safe = np.where(m == -np.inf, 0.0, m_new)
    return m_new, l * np.exp(m - m_safe) + np.exp(x - m_safe)


def _update_standin_from_x(m, l, x):        # review round 14, M1: no NaN, l off by exp(m)
    m_new = np.maximum(m, x)
    m_safe = np.where(x == -np.inf, 0.0, m_new)
    return m_new, l * np.exp(m - m_safe) + np.exp(x - m_safe)


def _merge_standin_from_a(m_a, l_a, m_b, l_b):  # review round 14, M1
    m = np.maximum(m_a, m_b)
    m_safe = np.where(m_a == -np.inf, 0.0, m)
    return m, l_a * np.exp(m_a - m_safe) + l_b * np.exp(m_b - m_safe)


def _merge_standin_from_b(m_a, l_a, m_b, l_b):  # review round 14, M7: passed (no case had
    m = np.maximum(m_a, m_b)                     # piece b empty and piece a not)
    m_safe = np.where(m_b == -np.inf, 0.0, m)
    return m, l_a * np.exp(m_a - m_safe) + l_b * np.exp(m_b - m_safe)


def test_rescale_hint_names_a_max_written_over_the_old_one():
    """Review round 14, M4: the max written into m before the factor (out=m): the factor is
    exp(0) = 1, the replayed missing rescale exactly, though the code multiplies by it."""
    def update(m, l, x):
        np.maximum(m, x, out=m)
        m_safe = _safe(m)
        return m, l * np.exp(m - m_safe) + np.exp(x - m_safe)
    result = L1.check_online_update(update, verbose=False)
    assert result.hint == L1.HINT_RESCALE and "exp(0) = 1" in result.hint


#: (checker, a wrong update or merge, the hint it must get)
WRONG = [(L1.check_online_update, wrong, hint) for wrong, hint in (
    (_update_no_rescale, L1.HINT_RESCALE), (_update_no_guard, L1.HINT_NEG_INF),
    (_update_forgets_old_max, L1.HINT_MAX), (_update_inverted, L1.HINT_DIRECTION),
    (_update_unshifted, L1.HINT_SHIFT), (_update_new_term_old_max, L1.HINT_SHIFT_OLD),
    (_update_python_max, L1.HINT_ELEMENTWISE), (_update_swapped, L1.HINT_ORDER),
    (_update_standin_from_old_max, L1.HINT_STANDIN),
    (_update_standin_from_x, L1.HINT_STANDIN), (_update_exp_apart, L1.HINT_OVERFLOW))] + [
    (L1.check_merge_states, wrong, hint) for wrong, hint in (
        (_merge_no_rescale, L1.HINT_RESCALE), (_merge_no_guard, L1.HINT_NEG_INF),
        (_merge_min, L1.HINT_MAX), (_merge_inverted, L1.HINT_DIRECTION),
        (_merge_swapped, L1.HINT_ORDER), (_merge_python_max, L1.HINT_ELEMENTWISE),
        (_merge_standin_from_a, L1.HINT_STANDIN), (_merge_standin_from_b, L1.HINT_STANDIN))]


@pytest.mark.parametrize("check, wrong, hint", WRONG,
                         ids=[f"{c.__name__}-{w.__name__}" for c, w, _ in WRONG])
def test_lab02_wrong_functions_get_their_hint(check, wrong, hint):
    assert_hint(check, wrong, hint, todo=True)


def _update_returns_standin(m, l, x):
    m_new = np.maximum(m, x)
    m_safe = _safe(m_new)
    return m_safe, l * np.exp(m - m_safe) + np.exp(x - m_safe)


def _merge_returns_standin(m_a, l_a, m_b, l_b):
    m_safe = _safe(np.maximum(m_a, m_b))
    return m_safe, l_a * np.exp(m_a - m_safe) + l_b * np.exp(m_b - m_safe)


@pytest.mark.parametrize("check, wrong", [(L1.check_online_update, _update_returns_standin),
                                          (L1.check_merge_states, _merge_returns_standin)])
def test_a_returned_standin_is_named_not_a_wrong_max(check, wrong):
    """Review round 16 a, M: the stand-in returned as the max got HINT_MAX ("the larger of
    the old max and the new element"), which the learner's max is."""
    assert_hint(check, wrong, L1.HINT_MAX_STANDIN)


def test_a_float32_merge_gets_the_float32_hint_not_a_wrong_max():
    """Review round 16 a, M: a merge returning float32 got HINT_MAX (its max, right to float32
    rounding, failed the max test at rtol 1e-12); it now gets the harness's float32 hint."""
    def merge32(*args):
        m, l = _merge_returns_standin(*args)
        m = np.where(np.isneginf(np.maximum(args[0], args[2])), -np.inf, m)
        return m.astype(np.float32), l.astype(np.float32)
    with np.errstate(all="ignore"):
        result = L1.check_merge_states(merge32, verbose=False)
    assert not result.passed and "float32" in result.hint


def test_lab02_failure_prints_yours_and_expected(capsys):
    with np.errstate(all="ignore"):
        L1.check_online_update(_update_no_rescale)
    out = capsys.readouterr().out
    assert "FAILED" in out and "yours" in out and "expected" in out and "Hint:" in out


def test_lab02_crash_is_reported_not_raised():
    def crashes(m, l, x):
        return m[5], l                           # IndexError on some inputs
    result = L1.check_online_update(crashes, verbose=False)
    assert not result.passed and "IndexError" in result.detail


# -- going further, hint levels, no solution line in a hint ----------------------------------


def test_stream_softmax_solution_passes_and_stub_is_reported(lab):
    assert L1.check_stream_softmax(lab["stream_softmax"], lab["merge_states"],
                                   verbose=False).passed
    student = functions_of(LAB, student=True)
    assert L1.check_stream_softmax(student["stream_softmax"], lab["merge_states"],
                                   verbose=False).todo


@pytest.mark.parametrize("old,new,hint", [
    ("p = np.exp(x[:, c0:c0 + chunk] - m_safe)", "p = np.exp(x[:, c0:c0 + chunk])",
     L1.HINT_SOFTMAX_SHIFT),
    ("np.where(l[:, None] > 0, p / l_safe, 0.0)", "p / l[:, None]", L1.HINT_SOFTMAX_MASKED),
    ("        m, l = merge_states(m, l, m_c, l_c)\n", "        m, l = m_c, l_c\n",
     L1.HINT_SOFTMAX),
    ("        p = np.exp(x[:, c0:c0 + chunk] - m_safe)                # (R, chunk)\n"
     "        out[:, c0:c0 + chunk] = np.where(l[:, None] > 0, p / l_safe, 0.0)\n",
     "        p = np.exp(x - m_safe)                                 # the whole x at once\n"
     "        out = np.where(l[:, None] > 0, p / l_safe, 0.0)\n", L1.HINT_STREAM_CHUNKS),
    # review round 14 (m): the last, shorter chunk left out of one pass (generic before)
    ("for c0 in range(0, n, chunk):                               # pass 1",
     "for c0 in range(0, n - chunk, chunk):                       # pass 1",
     L1.HINT_STREAM_LAST_CHUNK),
    ("for c0 in range(0, n, chunk):                               # pass 2",
     "for c0 in range(0, n // chunk * chunk, chunk):              # pass 2",
     L1.HINT_STREAM_LAST_CHUNK),
    # review round 16 a (m): a fully masked chunk's sum taken without the stand-in (NaN
    # through the merge; rows then 0 or NaN) got HINT_SOFTMAX
    ("l_c = np.exp(part - np.where(np.isneginf(m_c), 0.0, m_c)[:, None]).sum(axis=1)",
     "l_c = np.exp(part - m_c[:, None]).sum(axis=1)", L1.HINT_STREAM_CHUNK_STANDIN),
    # round 18 (mutants): the row state started at m = 0 passed (no row far below 0)
    ("m, l = np.full(rows, -np.inf), np.zeros(rows)", "m, l = np.zeros(rows), np.zeros(rows)",
     L1.HINT_STREAM_INIT),
    # round 18 (mutants): each got HINT_SOFTMAX
    ("        m, l = merge_states(m, l, m_c, l_c)\n", "        merge_states(m, l, m_c, l_c)\n",
     L1.HINT_STREAM_STATE),
    ("out = np.zeros((rows, n))", "out = np.zeros((rows, n), dtype=int)", L1.HINT_STREAM_INT),
    ("p = np.exp(x[:, c0:c0 + chunk] - m_safe)",
     "p = np.exp(x[:, c0:c0 + chunk] - np.where(np.isneginf(m_c), 0.0, m_c)[:, None])",
     L1.HINT_SOFTMAX_SHIFT),
    # review round 20 a (m): the same slip in both passes (one loop written twice) got
    # the generic HINT_SOFTMAX
    ("for c0 in range(0, n, chunk):", "for c0 in range(0, n - chunk + 1, chunk):",
     L1.HINT_STREAM_LAST_CHUNK),
    # review round 20 a (M): range(0, n - 1, chunk) in pass 1 drops a last chunk of one
    # column; no case had one, and it passed
    ("for c0 in range(0, n, chunk):                               # pass 1",
     "for c0 in range(0, n - 1, chunk):                           # pass 1",
     L1.HINT_STREAM_LAST_CHUNK),
], ids=["shift", "masked", "merge", "whole-x", "pass1-last-chunk", "pass2-last-chunk",
        "chunk-standin", "state-from-zero", "merge-dropped", "int-output", "last-chunk-max",
        "both-last-chunk", "one-column-chunk"])
def test_stream_softmax_mistakes_get_their_hint(lab, old, new, hint):
    fn = mutate(LAB, "stream_softmax", old, new)
    assert_hint(L1.check_stream_softmax, fn, hint, lab["merge_states"])


def test_hint_level_two_adds_the_explicit_hint():
    def no_rescale(m, l, x):
        m_new = np.maximum(m, x)
        return m_new, l + np.exp(x - _safe(m_new))
    result = L1.check_online_update(no_rescale, verbose=False, hint_level=2)
    assert L1.HINT_RESCALE in result.hint and L1.LEVEL2[L1.HINT_RESCALE] in result.hint


test_no_hint_contains_a_solution_line = hint_leaks_test(L1.ALL_HINTS, LAB)
