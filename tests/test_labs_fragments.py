"""The checker of notebook 10's exercise (the m16n8 accumulator map): the reference
answer passes, a stub reports "not implemented", and typical mistakes get their hint."""

import pytest

from flashcourse.labs import fragments as F


def test_solution_passes():
    assert F.check_c_map(F.c_map_solution, verbose=False)


def test_stub_reports_todo():
    def stub(lane, i):
        raise NotImplementedError("write c_map")
    res = F.check_c_map(stub, verbose=False)
    assert not res and res.todo


@pytest.mark.parametrize("wrong,hint", [
    (lambda lane, i: (lane // 4, 2 * (lane % 4) + i % 2), F.HINT_PLUS8),
    (lambda lane, i: (lane // 4 + 8 * (i // 2), lane % 4), F.HINT_COL),
    (lambda lane, i: (lane % 4, lane // 4), F.HINT_SWAPPED),
    (lambda lane, i: (lane, i), F.HINT_RANGE),
    # review round 14 b: the generic hint ("rows come from g, columns from t") before
    (lambda lane, i: (lane // 4 + 8 * (i % 2), 2 * (lane % 4) + i // 2), F.HINT_I_ROLES),
    # the range hint before, true but silent on why
    (lambda lane, i: (lane % 4 + 8 * (i // 2), 2 * (lane // 4) + i % 2), F.HINT_G_T),
    # review round 16 b: c2, c3 four rows below (the generic hint), and the A fragment's word
    # map used for C (HINT_RANGE, true but silent on the cause)
    (lambda lane, i: (lane // 4 + 4 * (i // 2), 2 * (lane % 4) + i % 2), F.HINT_PLUS8),
    (lambda lane, i: (lane // 4 + 8 * (i % 2), 2 * (lane % 4) + 8 * (i // 2)), F.HINT_A_MAP),
    # review round 18 b: lane / 4 passed (the map read its rows through int(), which cut
    # 0.25 to 0), and col = 2 t + i got the range hint, true but silent on the cause
    (lambda lane, i: (lane / 4 + 8 * (i // 2), 2 * (lane % 4) + i % 2), F.HINT_WHOLE),
    (lambda lane, i: (lane // 4 + 8 * (i // 2), 2 * (lane % 4) + i), F.HINT_COL_I),
])
def test_typical_mistakes_get_their_hint(wrong, hint):
    res = F.check_c_map(wrong, verbose=False)
    assert not res and res.hint == hint
