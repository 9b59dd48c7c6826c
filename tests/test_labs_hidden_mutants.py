"""Issue 49's hidden-mutant bar: every lab checker against typical wrong solutions and unusual
right ones (the cases: hidden_mutants_numpy.py, hidden_mutants_cuda.py).

Each wrong case must fail with the hint meant for it, each right case must pass, and over all
labs at least 95% of the wrong cases get their hint and none passes. Cases still missed are
listed in KNOWN_MISSES (still caught; one that gets its hint must leave the list)."""

import pytest

from hidden_mutants import Tally, all_cases, run

CASES, CHECKS = all_cases()

#: ids of wrong cases caught with a generic or misleading hint, not yet fixed (38 of 222 on
#: branch h-mutants, 2 on h-hints, none since the lab 05 hints of 2026-12-07;
#: `python tests/hidden_mutants.py` prints the hint each one gets)
KNOWN_MISSES: set[str] = set()

_outcomes: dict = {}


def _outcome(m):
    if m.id not in _outcomes:
        _outcomes[m.id] = run(m, CHECKS[m.lab])
    return _outcomes[m.id]


def test_case_ids_are_unique():
    ids = [m.id for m in CASES]
    assert len(ids) == len(set(ids))
    assert KNOWN_MISSES <= set(ids)


def test_enough_cases_per_lab():
    labs = {m.lab for m in CASES}
    assert len(labs) == 13
    for lab in labs:
        assert sum(m.wrong for m in CASES if m.lab == lab) >= 6, lab
        assert sum(not m.wrong for m in CASES if m.lab == lab) >= 2, lab


@pytest.mark.parametrize("m", CASES, ids=lambda m: m.id)
def test_case(m):
    o = _outcome(m)
    if m.id in KNOWN_MISSES:
        assert not o.as_meant, "now caught with its hint: take it out of KNOWN_MISSES"
        assert not o.passed and not o.crashed, "a known miss must still be caught"
        pytest.xfail("a known miss: caught, but with a generic or misleading hint")
    assert not o.crashed, o.crashed
    if m.wrong:
        assert not o.passed, "a wrong solution passed"
        assert m.hint.lower() in o.hint.lower(), o.hint
    else:
        assert o.passed, o.hint


def _total() -> Tally:
    total = Tally()
    for m in CASES:
        total.add(_outcome(m))
    return total


def test_no_wrong_passes_no_right_rejected():
    total = _total()
    assert total.slipped == 0 and total.rejected == 0 and total.crashed == 0


def test_the_hint_bar():
    """>= 95% of the wrong cases fail with the hint meant for them."""
    total = _total()
    assert total.meant >= 0.95 * total.wrong, total.row("all")
