"""Review round 21 a (REVIEW_2026-12-08_round21_a.md): each test failed before its fix."""

import numpy as np
import pytest

from flashcourse import exercises
from flashcourse.labs.backward import check_flash_backward
from flashcourse.labs.online_softmax import check_online_update, check_stream_softmax
from flashcourse.labs.tiled_forward import check_flash_forward
from flashcourse.labs.traffic import check_fa2_traffic


# -- M1: a checker handed a result (check(f(...)), or a name holding None) ------------------

@pytest.mark.parametrize("check, given", [
    (check_online_update, None),
    (check_online_update, (np.zeros(3), np.ones(3))),       # check(online_update(m, l, x))
    (check_flash_forward, (np.zeros((4, 2)), np.zeros(4))),
    (check_fa2_traffic, (1024, 512)),
    (check_flash_backward, np.zeros((4, 2))),
], ids=["ou-None", "ou-tuple", "ff-tuple", "fa2-ints", "bwd-array"])
def test_a_result_for_a_function_is_named(check, given):
    r = check(given, verbose=False)
    assert not r.passed
    assert "function itself" in r.hint and "without parentheses" in r.hint, r.hint
    assert "not a function" in r.detail


def test_a_result_for_one_of_two_functions_is_named():
    r = check_stream_softmax(None, lambda *a: a, verbose=False)
    assert not r.passed and "function itself" in r.hint, r.hint


# -- M2: a function whose parameters do not fit the call ------------------------------------

def _two_args(m, l):
    return m, l


@pytest.mark.parametrize("check, fn", [
    (check_online_update, _two_args),
    (check_flash_forward, lambda q, k, v, causal, scale: (q, q[:, 0])),
    (check_flash_forward, lambda q, k, v, causal, scale, *, block_q, block_k: (q, q[:, 0])),
], ids=["ou-two", "ff-five", "ff-keyword-only"])
def test_arguments_that_do_not_fit_are_named(check, fn):
    r = check(fn, verbose=False)
    assert not r.passed
    assert "do not fit the parameters" in r.hint, r.hint


# -- m: exercise slips named (each got "not what the rule gives" or another reading) --------

def _why(name, part, value, **rest):
    ok, lines = exercises.grade(name, **{part: value}, **rest)
    line = next(x for x in lines if x.startswith(part + ":"))
    assert "not quite" in line, line
    return line


def test_alpha_given_as_its_exponent_is_named():
    assert "exponent" in _why("03-second-tile", "alpha", -0.5)


@pytest.mark.parametrize("part, value", [("tiles_full", 4096), ("tiles_causal", 2080)])
def test_key_tiles_as_wide_as_query_blocks_are_named(part, value):
    assert "Bc = 64" in _why("06-causal-tiles", part, value)


def test_twice_the_saved_p_names_both_readings():
    line = _why("09-saved-bytes", "p_bytes", 2 * 4 * 16 * 8192 ** 2 * 2)
    assert "2 bytes per probability" in line and "only P" in line


@pytest.mark.parametrize("name, answers", [
    ("06-causal-tiles", {"tiles_full": 8192, "tiles_causal": 4160}),
    ("03-second-tile", {"m": 3, "l": 2.2101, "alpha": 0.6065}),
])
def test_right_answers_still_pass(name, answers):
    assert exercises.grade(name, **answers)[0]


# -- M3: lab 04, O read once per key block named as scores ----------------------------------

def _fa2_right(tq, tk, d, br, bc, e):
    return tq * d * e + -(-tq // br) * 2 * tk * d * e, tq * d * e + 4 * tq


@pytest.mark.parametrize("which", ["reads", "writes"])
def test_o_once_per_key_block_is_not_called_scores(which):
    def counted(tq, tk, d, br, bc, e):
        r, w = _fa2_right(tq, tk, d, br, bc, e)
        extra = -(-tk // bc) * tq * d * e
        return (r + extra, w) if which == "reads" else (r, w + extra)
    r = check_fa2_traffic(counted, verbose=False)
    assert not r.passed and "once per key block" in r.hint, r.hint


def test_q_once_per_key_block_is_named():
    r = check_fa2_traffic(lambda *a: (_fa2_right(*a)[0] + (-(-a[1] // a[4]) - 1) * a[0] * a[2]
                                      * a[5], _fa2_right(*a)[1]), verbose=False)
    assert not r.passed and "Q_i re-read" in r.hint, r.hint


def test_scores_counted_still_named():
    r = check_fa2_traffic(lambda *a: (_fa2_right(*a)[0] + 4 * a[0] * a[1], _fa2_right(*a)[1]),
                          verbose=False)
    assert not r.passed and "No score leaves the chip" in r.hint, r.hint


# -- m: byte printing names a NaN or inf argument ----------------------------------------------

@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_byte_printers_name_a_nonfinite_argument(value):
    from flashcourse.memory import binary_size, format_bytes
    for fn in (format_bytes, binary_size):
        with pytest.raises(ValueError, match="n_bytes must be a finite number"):
            fn(value)


# -- M6: lab 03, rows that see no key with the wrong lse or o -------------------------------

def _forward_then(edit):
    from flashcourse import tiled

    def fn(q, k, v, causal, scale, block_q, block_k):
        o, lse = tiled.forward(q, k, v, causal=causal, scale=scale, block_q=block_q,
                               block_k=block_k)
        o, lse = np.array(o, np.float64), np.array(lse, np.float64)
        edit(o, lse, np.isneginf(lse))
        return o, lse
    return fn


def test_lse_zero_for_empty_rows_is_not_called_a_finite_mask():
    def lse_zero(o, lse, empty):
        lse[empty] = 0.0
    r = check_flash_forward(_forward_then(lse_zero), verbose=False)
    assert not r.passed and "lse is not -inf" in r.hint, r.hint


def test_o_filled_in_empty_rows_is_named():
    def o_ones(o, lse, empty):
        o[empty] = 1.0
    r = check_flash_forward(_forward_then(o_ones), verbose=False)
    assert not r.passed and "must come out with o = 0" in r.hint, r.hint


# -- m: merge_partials, an empty row's lse and exchanged weights ------------------------------

def _merge_right(o_a, lse_a, o_b, lse_b):
    lse = np.logaddexp(lse_a, lse_b)
    use = np.where(np.isneginf(lse), 0.0, lse)
    return np.exp(lse_a - use)[:, None] * o_a + np.exp(lse_b - use)[:, None] * o_b, lse


def test_merge_empty_rows_lse_and_swapped_weights_are_named():
    from flashcourse.labs.tiled_merge import check_merge_partials
    assert check_merge_partials(_merge_right, verbose=False).passed

    def lse_zero(*a):
        o, lse = _merge_right(*a)
        return o, np.where(np.isneginf(lse), 0.0, lse)

    def swapped(o_a, lse_a, o_b, lse_b):
        lse = np.logaddexp(lse_a, lse_b)
        use = np.where(np.isneginf(lse), 0.0, lse)
        return np.exp(lse_b - use)[:, None] * o_a + np.exp(lse_a - use)[:, None] * o_b, lse
    assert "merged lse is not -inf" in check_merge_partials(lse_zero, verbose=False).hint
    assert "weights are exchanged" in check_merge_partials(swapped, verbose=False).hint
