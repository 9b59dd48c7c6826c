"""The lab checkers' common harness: time limit, results of the wrong kind, hint levels."""

import time

import numpy as np
import pytest

from flashcourse.labs import _algorithm as A
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


def _spin_swallowing():
    """A learner's loop whose `except Exception:` would swallow an ordinary timeout."""
    while True:
        try:
            time.sleep(0.01)
        except Exception:
            pass


def test_the_time_limit_cannot_be_swallowed_by_except_exception():
    start = time.monotonic()
    result = H.run_checks("swallow", _spin_swallowing, [_case(np.zeros(3), time_limit_s=0.5)],
                          verbose=False)
    assert time.monotonic() - start < 5
    assert not result and result.hint == H.HINT_TIMEOUT


def test_the_time_limit_holds_off_the_main_thread():
    import threading

    out = {}

    def spin_python():
        x = 0
        while True:                      # pure Python: the asynchronous timeout lands here
            try:
                x += 1
            except Exception:
                pass

    for name, fn in (("sleep", _spin_swallowing), ("python", spin_python)):
        t = threading.Thread(target=lambda fn=fn, name=name: out.__setitem__(name, H.run_checks(
            "thread", fn, [_case(np.zeros(3), time_limit_s=0.5)], verbose=False)))
        start = time.monotonic()
        t.start()
        t.join(10)
        assert not t.is_alive() and time.monotonic() - start < 5
        assert out[name].hint == H.HINT_TIMEOUT


def test_sys_exit_in_the_learners_function_is_a_failed_line(capsys):
    import sys
    result = H.run_checks("exit", lambda: sys.exit(3), [_case(np.zeros(3))])
    out = capsys.readouterr().out
    assert not result and result.hint == H.HINT_EXIT and "FAILED" in out and "sys.exit(3)" in out


def test_keyboard_interrupt_still_interrupts():
    def interrupt():
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        H.run_checks("stop", interrupt, [_case(np.zeros(3))], verbose=False)


def test_a_result_whose_array_conversion_raises_is_a_failed_line(capsys):
    class Broken:
        def __array__(self, *a, **k):
            raise RuntimeError("no array for you")
    result = H.run_checks("broken", lambda: Broken(), [_case(np.zeros(3))])
    out = capsys.readouterr().out
    assert not result and "FAILED" in out and "no array for you" in result.detail
    assert result.hint == H.HINT_UNREADABLE


def test_printed_output_is_capped(capsys):
    def chatty():
        for _ in range(100_000):
            print("x" * 50)
        return np.zeros(3)
    result = H.run_checks("chatty", chatty, [_case(np.zeros(3))])
    out = capsys.readouterr().out
    assert result.passed and len(out) < H.PRINT_CAP + 1000
    assert "output capped" in out and f"{100_000 * 51 - H.PRINT_CAP:,}" in out


def test_held_memory_sees_numpy_buffers():
    _, peak = A.held_memory(lambda: np.ones((512, 512)).sum())
    assert 2_000_000 < peak < 2_300_000


def test_watched_rows_counts_through_copies_and_whole_views():
    k = A.WatchedRows.wrap(np.zeros((10, 3)))
    k.astype(np.float64)[2:5]
    k[:][0:4]
    k.copy()[7]
    assert k.rows_read() == 3 + 4 + 1
    assert not A.WatchedRows.wrap(np.zeros((4, 2))).counted()
    plain_view = np.asarray(A.WatchedRows.wrap(np.zeros((4, 2))))
    assert type(plain_view) is np.ndarray
