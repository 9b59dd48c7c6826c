"""The lab checkers' common harness: time limit, results of the wrong kind, hint levels."""

import time

import numpy as np
import pytest

from flashcourse.labs import _harness as H


def _case(expected, **kw):
    return H.Case("one case", lambda fn: (fn(), expected), "generic hint",
                  [(lambda y, e: np.shape(y) != np.shape(e), "ragged tiles")], **kw)


def test_an_endless_loop_ends_with_a_time_limit_message(capsys):
    def spin():
        while True:
            time.sleep(0.01)
    start = time.monotonic()
    result = H.run_checks("spin", spin, [_case(np.zeros(3), time_limit_s=0.5)])
    assert time.monotonic() - start < 5
    out = capsys.readouterr().out
    assert "time limit 0.5 s per case" in out and H.TIMEOUT_LINE in out
    assert not result and result.hint == H.HINT_TIMEOUT


@pytest.mark.parametrize("value,hint", [
    (None, H.HINT_NONE),
    (3.0, H.HINT_SCALAR),
    (np.float64(3.0), H.HINT_SCALAR),
    (np.zeros(3) + 1j, H.HINT_COMPLEX),
    (1 + 2j, H.HINT_COMPLEX),
    (10**400, H.HINT_OVERFLOW),
    ([1.0, 10**400, 2.0], H.HINT_OVERFLOW),
])
def test_results_of_the_wrong_kind_get_a_specific_hint(value, hint):
    result = H.run_checks("kind", lambda: value, [_case(np.zeros(3))], verbose=False)
    assert not result and result.hint == hint


def test_wrong_kind_inside_a_tuple_is_named_too():
    case = H.Case("pair", lambda fn: (fn(), (np.zeros(2), np.zeros(2))), "generic")
    result = H.run_checks("pair", lambda: (np.zeros(2), None), [case], verbose=False)
    assert result.hint == H.HINT_NONE and "result [1]" in result.detail
    result = H.run_checks("pair", lambda: (np.zeros(2) + 0j, np.zeros(2)), [case],
                          verbose=False)
    assert result.hint == H.HINT_COMPLEX


def test_complex_with_zero_imaginary_part_is_still_rejected():
    result = H.run_checks("c", lambda: np.zeros(3, complex), [_case(np.zeros(3))],
                          verbose=False)
    assert not result and result.hint == H.HINT_COMPLEX


def test_hint_level_two_adds_the_explicit_hint():
    case = H.Case("c", lambda fn: (fn(), np.zeros(2)), "generic",
                  [(lambda y, e: True, "level one", "level two")])
    one = H.run_checks("c", lambda: np.ones(2), [case], verbose=False)
    two = H.run_checks("c", lambda: np.ones(2), [case], verbose=False, hint_level=2)
    assert one.hint == "level one"
    assert "level one" in two.hint and "level two" in two.hint
    with pytest.raises(ValueError, match="hint_level"):
        H.run_checks("c", lambda: np.ones(2), [case], hint_level=3)


def test_an_outer_alarm_survives_a_checker_run():
    """A per-test timeout (SIGALRM, as pytest-timeout's signal method) is given back."""
    import signal

    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *a: fired.append(1))
    signal.setitimer(signal.ITIMER_REAL, 0.6)
    try:
        H.run_checks("quick", lambda: np.zeros(3), [_case(np.zeros(3), time_limit_s=5)],
                     verbose=False)
        time.sleep(1.0)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert fired == [1]
