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
    ("0x200", H.HINT_STRING),        # review round 20 b: a string got HINT_SCALAR
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


def test_hint_level_two_reaches_the_harness_own_hints():
    """A wrong shape, None, float32 rounding and a one-level diagnosis got the same text at
    level 2 in every lab (review round 18 b): the case's second level (or, for float32, the
    harness's own) is added."""
    def case(diagnoses=()):
        return H.Case("c", lambda fn: (fn(), np.zeros(2)), "generic", list(diagnoses),
                      hint2="the part's steps")
    for fn, one_hint, more in [(lambda: np.ones(3), H.HINT_SHAPE, "the part's steps"),
                               (lambda: None, H.HINT_NONE, "the part's steps"),
                               (lambda: np.full(2, 1e-9, np.float32), H.HINT_PRECISION,
                                H.HINT_PRECISION_2)]:
        c = case()
        c.rtol, c.atol = 1e-12, 0.0
        one = H.run_checks("c", fn, [c], verbose=False)
        two = H.run_checks("c", fn, [c], verbose=False, hint_level=2)
        assert one.hint == one_hint and two.hint == f"{one_hint}{H.MORE}{more}"
    single = case([(lambda y, e: True, "level one")])
    two = H.run_checks("c", lambda: np.ones(2), [single], verbose=False, hint_level=2)
    assert two.hint == f"level one{H.MORE}the part's steps"


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


def _assert_times_out_in_a_thread(name, fn):
    """`fn` checked with a 0.5 s limit from a worker thread (where no signal reaches): the
    check ends within 5 s with HINT_TIMEOUT; `name` labels the failure."""
    import threading

    out = {}
    t = threading.Thread(target=lambda: out.__setitem__("r", H.run_checks(
        name, fn, [_case(np.zeros(3), time_limit_s=0.5)], verbose=False)))
    start = time.monotonic()
    t.start()
    t.join(10)
    assert not t.is_alive() and time.monotonic() - start < 5, name
    assert out["r"].hint == H.HINT_TIMEOUT, name


def test_the_time_limit_holds_off_the_main_thread():
    def spin_python():
        x = 0
        while True:                      # pure Python: the asynchronous timeout lands here
            try:
                x += 1
            except Exception:
                pass

    for name, fn in (("sleep", _spin_swallowing), ("python", spin_python)):
        _assert_times_out_in_a_thread(name, fn)


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


class _SlowArray:
    def __array__(self, *a, **k):
        time.sleep(60)
        return np.zeros(3)


class _ExitingArray:
    def __array__(self, *a, **k):
        import sys
        sys.exit(2)


def test_a_result_whose_conversion_sleeps_hits_the_time_limit(capsys):
    start = time.monotonic()
    result = H.run_checks("slow", lambda: _SlowArray(), [_case(np.zeros(3), time_limit_s=0.5)])
    assert time.monotonic() - start < 5
    out = capsys.readouterr().out
    assert not result and "FAILED" in out and "within 0.5 s" in result.detail
    assert result.detail.startswith(f"{H.TIMEOUT_LINE}: reading your result")
    assert result.hint == H.HINT_SLOW_RESULT


def test_sys_exit_while_converting_the_result_is_a_failed_line(capsys):
    result = H.run_checks("exit", lambda: _ExitingArray(), [_case(np.zeros(3))])
    out = capsys.readouterr()
    assert not result and result.hint == H.HINT_EXIT and "sys.exit(2)" in result.detail
    assert "FAILED" in out.out and "Traceback" not in out.out + out.err


def test_sys_exit_inside_a_pair_conversion_is_a_failed_line():
    case = H.Case("pair", lambda fn: (H.as_pair(fn()), (np.zeros(2), np.zeros(2))), "generic")
    result = H.run_checks("pair", lambda: (np.zeros(2), _ExitingArray()), [case],
                          verbose=False)
    assert not result and result.hint == H.HINT_EXIT


def test_a_sleeping_function_off_the_main_thread_ends_on_time():
    """No signal reaches another thread: the limit holds through a worker thread (issue 50)."""
    def sleepy():
        time.sleep(60)
        return np.zeros(3)
    _assert_times_out_in_a_thread("sleep", sleepy)


def test_results_off_the_main_thread_are_checked_as_usual():
    import threading

    out = {}
    t = threading.Thread(target=lambda: out.update(
        ok=H.run_checks("ok", lambda: np.zeros(3), [_case(np.zeros(3))], verbose=False),
        bad=H.run_checks("bad", lambda: np.ones(3), [_case(np.zeros(3))], verbose=False),
        todo=H.run_checks("todo", _todo, [_case(np.zeros(3))], verbose=False)))
    t.start()
    t.join(30)
    assert out["ok"].passed and out["bad"].hint == "generic hint" and out["todo"].todo

    def strict():                            # the caller's np.errstate reaches the function
        with np.errstate(all="raise"):
            out["raised"] = H.run_checks("log", lambda: np.log(np.zeros(3)),
                                         [_case(np.zeros(3))], verbose=False)
    t = threading.Thread(target=strict)
    t.start()
    t.join(30)
    assert "FloatingPointError" in out["raised"].detail


def _todo():
    raise NotImplementedError


@pytest.mark.parametrize("value,hint", [
    (np.ones(3, bool), H.HINT_DTYPE),
    (np.array([1.0, None, 2.0], dtype=object), H.HINT_DTYPE),
    (np.array(["1", "2", "3"]), H.HINT_DTYPE),
    (np.zeros(3, complex), H.HINT_COMPLEX),
])
def test_results_that_are_not_real_numbers_are_rejected_in_pairs_too(value, hint):
    """as_pair (lab 02, the decode lab) used to read complex as real and True as 1."""
    case = H.Case("pair", lambda fn: (H.as_pair(fn()), (np.zeros(3), np.zeros(3))), "generic")
    result = H.run_checks("pair", lambda: (np.zeros(3), value), [case], verbose=False)
    assert not result and result.hint == hint
    result = H.run_checks("one", lambda: value, [_case(np.zeros(3))], verbose=False)
    assert not result and result.hint == hint


def test_integer_results_are_still_read_as_numbers():
    result = H.run_checks("int", lambda: np.zeros(3, int), [_case(np.zeros(3))], verbose=False)
    assert result.passed


@pytest.mark.parametrize("dtype,hint", [(complex, H.HINT_COMPLEX), (bool, H.HINT_DTYPE)])
def test_lab_checkers_that_convert_results_reject_complex_and_bool(dtype, hint):
    from flashcourse.labs import decode, online_softmax
    from labtools import functions_of, lab_path
    lab = functions_of(lab_path("lab02_online_softmax"))

    def convert(fn):
        return lambda *a: tuple(np.asarray(x).astype(dtype) for x in fn(*a))
    for check, fn in ((online_softmax.check_online_update, lab["online_update"]),
                      (online_softmax.check_merge_states, lab["merge_states"]),
                      (decode.check_combine, decode.reference_combine)):
        assert check(fn, verbose=False).passed
        with np.errstate(all="ignore"):
            result = check(convert(fn), verbose=False)
        assert not result.passed and result.hint == hint, (check.__name__, result)


def test_held_memory_leaves_out_what_printing_builds(capsys):
    big = np.random.default_rng(0).random((4096, 3))

    def debug_print():
        print(big.tolist(), f"{big}", list(map(float, range(30_000))))
        return np.ones(1000)                                # 8 kB of arrays
    with H._captured_output():
        _, peak = A.held_memory(debug_print)
    assert 8000 <= peak < 100_000

    def held_then_printed():
        s = np.ones((64, 4096))                             # 2 MiB held across the print
        print(big.tolist())
        return float(s.sum())
    with H._captured_output():
        _, peak = A.held_memory(held_then_printed)
    assert peak > 0.95 * 64 * 4096 * 8
    import builtins
    assert builtins.print is print


def test_watched_rows_give_plain_arrays_to_the_learner():
    k = A.WatchedRows.wrap(np.arange(30.0).reshape(10, 3))
    out = np.empty((10, 3))
    np.multiply(k, 2.0, out=out)
    made = [np.zeros_like(k), np.empty_like(k), np.full_like(k, 1.0), np.ones_like(k),
            k[2:4], k * 2, -k, k @ np.ones(3), k.dot(np.ones(3)), k.T, k.sum(axis=0),
            np.where(k > 0, k, 0), np.copy(k), out]
    assert all(type(x) is np.ndarray for x in made)
    assert k.rows_read() == 2
    assert repr(k) == repr(k.view(np.ndarray)) and str(k) == str(k.view(np.ndarray))
    assert f"{k}" == f"{k.view(np.ndarray)}" and k.rows_read() == 2
    mine = k.copy()                          # a copy the learner writes into is theirs
    mine[0:5] += 1.0
    np.add.at(k.astype(float), [0], 1.0)
    assert k.rows_read() == 2


def test_the_largest_difference_never_points_at_a_nan_both_sides_share():
    """NaN in both arrays at the same place counts as equal (allclose's equal_nan): the
    detail line names a real difference, never "yours nan, expected nan"."""
    from flashcourse.labs._harness import _close
    expected = np.array([[np.nan, 1.0], [2.0, 3.0]])
    yours = np.array([[np.nan, 1.0], [2.0, 3.5]])
    ok, why, _ = _close(yours, expected, 1e-6, 1e-8)
    assert not ok and "(1, 1)" in why and "nan" not in why.lower(), why


def test_the_pass_line_counts_one_case_in_the_singular(capsys):
    """'All checks passed (1 cases).' read wrong (lab 12 part 2 has one case; review round
    16 b)."""
    from flashcourse.labs import _harness as H
    one = H.Case("one", lambda f: (f(), 1.0), "hint", rtol=0, atol=0)
    assert H.run_checks("f()", lambda: 1.0, [one])
    assert "All checks passed (1 case)." in capsys.readouterr().out
    assert H.run_checks("f()", lambda: 1.0, [one, one])
    assert "All checks passed (2 cases)." in capsys.readouterr().out
