"""Lab 04 (traffic): the solution passes, the stub is reported as not implemented, and typical
wrong formulas fail with the hint that names the mistake. Comparisons in the checker are exact."""

import numpy as np
import pytest

from flashcourse.labs import traffic as lab
from flashcourse.traffic import tiled_traffic


def solution(Tq, Tk, d, Br, Bc, e):
    Tr = -(-Tq // Br)
    return Tq * d * e + 2 * Tr * Tk * d * e, Tq * d * e + 4 * Tq


def solution_causal(Tq, Tk, d, Br, Bc, e):
    t = tiled_traffic(Tq, Tk, d, Br, Bc, causal=True, bytes_per_element=e)
    return t.read_bytes, t.write_bytes


def stub(*args):
    raise NotImplementedError("FILL ME IN")


def test_solution_passes(capsys):
    assert lab.check_fa2_traffic(solution).passed
    assert lab.check_fa2_traffic_causal(solution_causal).passed
    out = capsys.readouterr().out
    assert out.count("All checks passed") == 2 and "FAILED" not in out


def test_numpy_ints_and_lists_are_accepted():
    as_list = lambda *a: [np.int64(x) for x in solution(*a)]
    assert lab.check_fa2_traffic(as_list, verbose=False).passed


def test_stub_reports_not_implemented(capsys):
    for check in (lab.check_fa2_traffic, lab.check_fa2_traffic_causal):
        r = check(stub)
        assert not r.passed and r.todo
    lab.compare_with_counter(stub, 5, 7, 3, 2, 4, 2)
    out = capsys.readouterr().out
    assert out.count("Not implemented yet") == 3 and "FAILED" not in out


@pytest.mark.parametrize("wrong, hint", [
    (lab.wrong_no_ragged, lab.HINT_RAGGED),
    (lab.wrong_k_only, lab.HINT_V),
    (lab.wrong_kv_once, lab.HINT_ONCE),
    (lab.wrong_no_lse, lab.HINT_LSE),
    (lambda Tq, Tk, d, Br, Bc, e: (Tq * d * e + 2 * (Tq // Br) * Tk * d * e, Tq * d * e + 4 * Tq),
     lab.HINT_FLOOR),
    (lambda Tq, Tk, d, Br, Bc, e: (solution(Tq, Tk, d, Br, Bc, e)[0], Tq * d * e + e * Tq),
     lab.HINT_LSE_SIZE),
    (lambda Tq, Tk, d, Br, Bc, e: (solution(Tq, Tk, d, Br, Bc, e)[0] + 2 * Tq * Tk * 2,
                                   solution(Tq, Tk, d, Br, Bc, e)[1]), lab.HINT_SCORES),
    (lambda *a: solution(*a)[0], lab.HINT_RETURN),
    # review round 6 ac, M7: K and V per query row got HINT_SCORES (the extra bytes are a
    # multiple of Tq Tk in the first case)
    (lambda Tq, Tk, d, Br, Bc, e: (Tq * d * e + 2 * Tq * Tk * d * e, Tq * d * e + 4 * Tq),
     lab.HINT_PER_ROW),
    (lambda Tq, Tk, d, Br, Bc, e: (2 * Tk * d * e + -(-Tk // Bc) * Tq * d * e,
                                   solution(Tq, Tk, d, Br, Bc, e)[1]), lab.HINT_SWAPPED),
    # review round 16 a: Tr from Bc or from Tk, and m and l written as in FA1, got the
    # generic hint
    (lambda Tq, Tk, d, Br, Bc, e: solution(Tq, Tk, d, Bc, Bc, e), lab.HINT_TR_SIZES),
    (lambda Tq, Tk, d, Br, Bc, e: (Tq * d * e + 2 * -(-Tk // Br) * Tk * d * e,
                                   solution(Tq, Tk, d, Br, Bc, e)[1]), lab.HINT_TR_SIZES),
    (lambda Tq, Tk, d, Br, Bc, e: (solution(Tq, Tk, d, Br, Bc, e)[0], Tq * d * e + 8 * Tq),
     lab.HINT_LSE_ONE),
    # review round 17 a (m): the right pair returned as (writes, reads) got the generic hint
    (lambda Tq, Tk, d, Br, Bc, e: solution(Tq, Tk, d, Br, Bc, e)[::-1], lab.HINT_PAIR_SWAPPED),
    # round 18 (mutants): Tr as floor + 1, and Tr left a fraction, got the generic hint
    (lambda Tq, Tk, d, Br, Bc, e: (Tq * d * e + 2 * (Tq // Br + 1) * Tk * d * e,
                                   Tq * d * e + 4 * Tq), lab.HINT_PLUS_ONE),
    (lambda Tq, Tk, d, Br, Bc, e: (Tq * d * e + 2 * (Tq / Br) * Tk * d * e,
                                   Tq * d * e + 4 * Tq), lab.HINT_FRACTION),
])
def test_wrong_formulas_fail_with_matching_hint(capsys, wrong, hint):
    r = lab.check_fa2_traffic(wrong)
    assert not r.passed and not r.todo
    assert r.hint == hint
    out = capsys.readouterr().out
    # the checker wraps long lines: compare with runs of whitespace collapsed
    assert "FAILED" in out and " ".join(hint.split()) in " ".join(out.split())
    assert "All checks passed" not in out


@pytest.mark.parametrize("wrong, hint", [
    (solution, lab.HINT_CAUSAL_NONE),
    (lambda *a: (lab.causal_reads_full_tiles_only(*a), solution(*a)[1]), lab.HINT_CAUSAL_PARTIAL),
    (lambda *a: (lab.causal_reads_top_left(*a), solution(*a)[1]), lab.HINT_CAUSAL_ALIGN),
    (lambda Tq, Tk, d, Br, Bc, e: (solution_causal(Tq, Tk, d, Br, Bc, e)[0], Tq * d * e),
     lab.HINT_LSE),
    # review round 12: K without V, and lse at e bytes, got only the generic causal hint
    (lambda Tq, Tk, d, Br, Bc, e: ((solution_causal(Tq, Tk, d, Br, Bc, e)[0] + Tq * d * e) // 2,
                                   Tq * d * e + 4 * Tq), lab.HINT_V),
    (lambda Tq, Tk, d, Br, Bc, e: (solution_causal(Tq, Tk, d, Br, Bc, e)[0],
                                   Tq * d * e + e * Tq), lab.HINT_LSE_SIZE),
])
def test_wrong_causal_formulas_fail_with_matching_hint(wrong, hint):
    r = lab.check_fa2_traffic_causal(wrong, verbose=False)
    assert not r.passed and r.hint == hint


def test_counter_traffic_is_the_model():
    for cfg in [(50, 37, 7, 16, 10, 2), (5, 91, 3, 8, 32, 8), (7, 13, 5, 1, 4, 1)]:
        for causal in (False, True):
            t = tiled_traffic(*cfg[:5], causal=causal, bytes_per_element=cfg[5])
            assert lab.counter_traffic(*cfg, causal=causal) == (t.read_bytes, t.write_bytes)


# -- part 4: the backward's bytes (taken from the solution notebook itself) -------------------

from labtools import functions_of, hint_leaks_test, lab_path, mutate  # noqa: E402

LAB = lab_path("lab04_traffic")


def test_backward_solution_passes_and_stub_is_reported():
    assert lab.check_backward_traffic(functions_of(LAB)["my_backward_traffic"],
                                      verbose=False).passed
    student = functions_of(LAB, student=True)
    assert lab.check_backward_traffic(student["my_backward_traffic"], verbose=False).todo


def test_backward_model_equals_the_counter():
    from flashcourse.traffic import backward_traffic
    for tq, tk, d, br, bc, e in ((50, 37, 7, 16, 10, 2), (9, 40, 3, 4, 6, 8)):
        model = backward_traffic(tq, tk, d, block_q=br, block_k=bc, bytes_per_element=e,
                                 bytes_per_accumulator=e)
        assert lab.backward_counter_traffic(tq, tk, d, br, bc, e) == (model.read_bytes,
                                                                        model.write_bytes)


#: solution lines that several of the mistakes below replace
_TC = "Tc = -(-Tk // Bc)"


@pytest.mark.parametrize("old,new,hint", [
    ("3 * Tq * d * e", "2 * Tq * d * e", lab.HINT_BWD_DQ),       # dQ_i not read per tile...
    ("2 * 4 * Tq", "2 * e * Tq", lab.HINT_BWD_STAT),
    ("write_bytes = 4 * Tq + Tq * d * e + 2 * Tk * d * e",
     "write_bytes = 4 * Tq + Tq * d * e", lab.HINT_BWD_DKDV),
    (_TC, "Tc = Tk // Bc", lab.HINT_BWD_FLOOR),
    # review round 12: both got HINT_BWD_STAT (at e = 2 and d = 8 the same bytes)
    ("2 * 4 * Tq)", "4 * Tq)", lab.HINT_BWD_STAT_TILE),
    ("read_bytes = 2 * Tq * d * e + 2 * Tk", "read_bytes = Tq * d * e + 2 * Tk", lab.HINT_BWD_D),
    # review round 16 a: Tc = ceil(Tk / Br) got HINT_BWD_FLOOR (ceil(37 / 16) = floor(37 / 10)
    # in the old second case); Tc = ceil(Tq / Bc) got the generic hint
    (_TC, "Tc = -(-Tk // Br)", lab.HINT_BWD_TC_SIZES),
    (_TC, "Tc = -(-Tq // Bc)", lab.HINT_BWD_TC_SIZES),
    # round 18 (mutants): floor + 1 got the generic hint
    (_TC, "Tc = Tk // Bc + 1", lab.HINT_PLUS_ONE),
], ids=["dq", "stat", "dkdv", "floor", "one-stat", "no-o", "tc-br", "tc-tq", "plus-one"])
def test_backward_mistakes_get_their_hint(old, new, hint):
    fn = mutate(LAB, "my_backward_traffic", old, new)
    if hint is lab.HINT_BWD_DQ:                                  # ... nor written per tile
        inner = fn

        def fn(Tq, Tk, d, Br, Bc, e):
            r, w = inner(Tq, Tk, d, Br, Bc, e)
            return r, w - (-(-Tk // Bc)) * Tq * d * e
    result = lab.check_backward_traffic(fn, verbose=False)
    assert not result.passed and result.hint == hint


def test_backward_q_read_once_is_named():
    def once(Tq, Tk, d, Br, Bc, e):
        r, w = functions_of(LAB)["my_backward_traffic"](Tq, Tk, d, Br, Bc, e)
        tc = -(-Tk // Bc)
        return r - tc * 2 * Tq * d * e + 2 * Tq * d * e, w
    assert lab.check_backward_traffic(once, verbose=False).hint == lab.HINT_BWD_ONCE


test_no_hint_contains_a_solution_line = hint_leaks_test(lab.ALL_HINTS, LAB)


def test_hint_level_two_adds_an_explicit_nudge():
    """Review round 18 c: the lab promises a more explicit hint with `hint_level=2`, and every
    mistake of the three checkers got the level-1 text again."""
    wrongs = [(lab.check_fa2_traffic, w) for w in (lab.wrong_no_ragged, lab.wrong_k_only,
                                                   lab.wrong_kv_once, lab.wrong_no_lse)]
    wrongs.append((lab.check_fa2_traffic_causal, solution))
    wrongs.append((lab.check_backward_traffic,
                   mutate(LAB, "my_backward_traffic", "Tc = -(-Tk // Bc)", "Tc = Tk // Bc")))
    wrongs.append((lab.check_backward_traffic,
                   mutate(LAB, "my_backward_traffic", "2 * 4 * Tq", "2 * e * Tq")))
    for check, fn in wrongs:
        one, two = check(fn, verbose=False), check(fn, verbose=False, hint_level=2)
        assert not two.passed and two.hint.startswith(one.hint + "\n  More explicitly: ")
        assert "Step by step" in two.hint
