"""The checkers of notebook 15's exercises (flashcourse/exercises_fp8.py): the solutions pass,
the stubs say "not implemented", and each typical mistake, written out as a learner would
write it, gets its own hint."""

import numpy as np
import pytest

from flashcourse import exercises_fp8 as X
from flashcourse.fp8.codes import round_to_fp8


def test_solutions_pass():
    assert X.check_round_e4m3(X.reference_round_e4m3, verbose=False).passed
    assert X.check_fp8_probabilities(X.reference_fp8_probabilities, verbose=False).passed


def test_stubs_are_reported_as_not_implemented(capsys):
    def stub(x):
        raise NotImplementedError("write it")
    for check in (X.check_round_e4m3, X.check_fp8_probabilities):
        r = check(stub)
        assert r.todo and not r.passed
    assert capsys.readouterr().out.count("Not implemented yet") == 2


def rounder(*, step_bits=3, ties="even", low=-6, flush=False, top=448.0, sign=True):
    def fn(x):
        x = np.asarray(x, np.float64)
        a = np.abs(x)
        e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
        if low is not None:
            e = np.maximum(e, low)
        step = 2.0 ** (e - step_bits)
        y = a / step
        r = {"even": np.rint(y), "up": np.floor(y + 0.5), "down": np.floor(y)}[ties] * step
        if flush:
            r = np.where(a < 2.0 ** -6, 0.0, r)
        if top is not None:
            r = np.minimum(r, top)
        return np.copysign(r, x) if sign else r
    return fn


@pytest.mark.parametrize("fn,hint", [
    (rounder(ties="up"), X.HINT_HALF_UP),
    (rounder(ties="down"), X.HINT_TRUNCATE),
    (rounder(step_bits=2), X.HINT_MANTISSA),
    (rounder(step_bits=4), X.HINT_MANTISSA),
    (rounder(low=None), X.HINT_NO_SUBNORMAL),
    (rounder(low=None, flush=True), X.HINT_FLUSH),
    (rounder(top=None), X.HINT_NO_SATURATION),
    (rounder(top=240.0), X.HINT_240),
    (rounder(sign=False), X.HINT_SIGN),
    (lambda x: np.asarray(x, np.float64), X.HINT_NOT_ROUNDED),
    (lambda x: np.asarray(x, np.float64) * 1.01, X.HINT_ROUND),      # none of the above
], ids=["half up", "truncate", "2 bits", "4 bits", "no subnormals", "flush", "no saturation",
        "240", "sign", "identity", "other"])
def test_rounding_mistakes_get_their_hint(fn, hint):
    with np.errstate(all="ignore"):
        r = X.check_round_e4m3(fn, verbose=False)
    assert not r.passed and r.hint == hint


def _p(lift=256.0, where="before", row_max=True, normalise=False, inside=0.0):
    def fn(s):
        m = s.max(axis=1, keepdims=True) if row_max else s.max()
        e = np.exp(s - m + inside)
        if normalise:
            e = e / e.sum(axis=1, keepdims=True)
        if where == "before":
            return round_to_fp8(e * lift)
        return round_to_fp8(e) * lift
    return fn


@pytest.mark.parametrize("fn,hint", [
    (_p(lift=1.0), X.HINT_P_NO_LIFT),
    (_p(where="after"), X.HINT_P_LIFT_AFTER),
    (_p(lift=1.0, inside=8.0), X.HINT_P_E8),
    (_p(row_max=False), X.HINT_P_GLOBAL_MAX),
    (_p(normalise=True), X.HINT_P_NORMALISED),
    (_p(lift=448.0), X.HINT_P_448),
    (_p(lift=128.0), X.HINT_P),
    # 8 subtracted from the exponent instead of from the row max (review round 17 b)
    (_p(lift=2.0 ** -8), X.HINT_P_SHRUNK),
], ids=["no lift", "after", "e^8", "global max", "normalised", "448", "2^7", "2^-8"])
def test_probability_mistakes_get_their_hint(fn, hint):
    r = X.check_fp8_probabilities(fn, verbose=False)
    assert not r.passed and r.hint == hint


def test_a_float32_solution_passes():
    def f32(s):
        s = np.asarray(s, np.float32)
        return round_to_fp8(np.float32(256) * np.exp(s - s.max(axis=1, keepdims=True)))
    assert X.check_fp8_probabilities(f32, verbose=False).passed


def test_hint_level_two_is_accepted():
    assert X.check_round_e4m3(X.reference_round_e4m3, verbose=False, hint_level=2).passed
