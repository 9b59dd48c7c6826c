"""Lab 06 (CUDA kernel parts): solutions pass, stubs report "not implemented", typical mistakes
get their own hint, no hint contains a line of the solution. Runs on Numba's CUDA simulator
without a GPU (tiny shapes: about a minute in all)."""

import numpy as np
import pytest

from flashcourse.labs import cuda_kernel as L
from flashcourse.labs import cuda_show as S
from labtools import (assert_hint, assert_stubs_not_implemented, edited, functions_of,
                      hint_leaks_test, joint_mistakes_test, lab_fixture, lab_path, mistakes_test,
                      mutate)

LAB = lab_path("lab06_cuda_kernel")
PARTS = ("micro_tile_scores", "row_max", "row_sum", "online_update")


lab = lab_fixture(LAB)


def parts(ns, **swap):
    """The kernel parts PARTS of the namespace `ns` in order (what check_kernel takes), those
    named in `swap` replaced."""
    return tuple(swap.get(p, ns[p]) for p in PARTS)


def test_parts_pass(lab):
    assert L.check_micro_tile_scores(lab["micro_tile_scores"], verbose=False).passed
    assert L.check_row_reductions(lab["row_max"], lab["row_sum"], verbose=False).passed
    assert L.check_online_update(lab["online_update"], verbose=False).passed


def test_kernel_and_going_further_pass(lab):
    assert L.check_kernel(*parts(lab), verbose=False).passed
    assert L.check_key_blocks(lab["key_blocks"], parts(lab), verbose=False).passed


def test_replay_without_mistakes_is_the_reference():
    """The numpy replay (used to name mistakes) is itself right, to float64 rounding."""
    from flashcourse import reference
    for name, seed, tq, tk, d, causal, kv_start, spread, grow in L.KERNEL_CASES:
        q, k, v = L._inputs(seed, tq, tk, d, spread, grow)
        want = L._expected(q, k, v, causal, kv_start)
        got = L.replay(q, k, v, causal=causal, kv_start=kv_start)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-9, atol=1e-12, err_msg=name)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-9, atol=1e-12, err_msg=name)
    assert reference is not None


def test_stubs_report_not_implemented(capsys):
    student = functions_of(LAB, student=True)
    stubs = parts(student)
    results = [L.check_micro_tile_scores(stubs[0]), L.check_row_reductions(*stubs[1:3]),
               L.check_online_update(stubs[3]), L.check_kernel(*stubs),
               L.check_key_blocks(student["key_blocks"], stubs)]
    assert_stubs_not_implemented(results, capsys.readouterr().out)
    S.show(stubs[0])
    assert "Not implemented yet" in capsys.readouterr().out


#: solution lines that several of the mistakes below replace
_KB = "kb[j] = ks[tx + CT * j, kk]"
_STANDIN = "m_use = m_new if m_new != NEG_INF else F0"
_ALPHA = "alpha = math.exp(m[i] - m_use)"
_P = "p = math.exp(s[i * TN + j] - m_use)"
_LP = "lp[i] = lp[i] * alpha + psum"
_NOT_CAUSAL = "    if causal == 0:\n        return n\n"
_BLOCKS = "return min(n, last // BC + 1)"
_LAST = "last = min(q0 + BR, tq) - 1 + off"

SCORE_MISTAKES = [
    ("    for x in range(TM * TN):\n        s[x] = F0\n", "", L.HINT_SCORES_ZERO),
    ("qa[i] = qs[kk, ty + RT * i]", "qa[i] = qs[kk, ty * TM + i]", L.HINT_SCORES_LAYOUT),
    ("s[i * TN + j] += qa[i] * kb[j]", "s[i * TN + j] += qs[kk, ty + RT * i] * kb[j]",
     L.HINT_REUSE),
    ("        s[x] = F0", "        s[x] = 0.0", L.HINT_FLOAT64),
    (_KB, "kb[j] = ks[kk, tx + CT * j]", L.HINT_SCORES_KS_T),
]


@pytest.mark.parametrize("old,new,hint", SCORE_MISTAKES, ids=lambda x: str(x)[:25])
def test_score_mistakes_get_their_hint(old, new, hint):
    fn = mutate(LAB, "micro_tile_scores", old, new)
    if hint is L.HINT_SCORES_LAYOUT:         # contiguous rows AND columns
        fn = functions_of(LAB, replace=[(old, new), (_KB,
                                                      "kb[j] = ks[tx * TN + j, kk]")])[
            "micro_tile_scores"]
    assert_hint(L.check_micro_tile_scores, fn, hint[0])


def test_show_flags_a_thread_without_reuse(capsys):
    fn = mutate(LAB, "micro_tile_scores", "s[i * TN + j] += qa[i] * kb[j]",
                "s[i * TN + j] += qs[kk, ty + RT * i] * kb[j]")
    S.show(fn)
    out = capsys.readouterr().out
    assert out.count("<-- differs") == L.NT and "expected" in out


REDUCE_MISTAKES = [
    ("        offset //= 2\n    return x\n    ### END SOLUTION\n\n\n@cuda.jit",
     "        offset = 0\n    return x\n    ### END SOLUTION\n\n\n@cuda.jit",
     L.HINT_REDUCE_STEPS),
    ("def row_max(x, scratch, tid):\n    \"\"\"Max of x over the CT threads of this thread's row "
     "(every thread gets it).\"\"\"\n    ### BEGIN SOLUTION (5 lines)\n    offset = CT // 2",
     "def row_max(x, scratch, tid):\n    \"\"\"Max of x over the CT threads of this thread's row "
     "(every thread gets it).\"\"\"\n    ### BEGIN SOLUTION (5 lines)\n    offset = CT",
     L.HINT_REDUCE_CROSS),
    ("x = max(x, shfl_xor(x, offset, scratch, tid))", "x += shfl_xor(x, offset, scratch, tid)",
     L.HINT_REDUCE_OP),
]


test_reduction_mistakes_get_their_hint = joint_mistakes_test(
    LAB, L.check_row_reductions, ("row_max", "row_sum"), REDUCE_MISTAKES,
    ids=["steps", "cross", "op"])


#: [(solution text, the mistake that replaces it, the hint it must get), ...]
UPDATE_MISTAKES = [
    (_STANDIN, "m_use = m_new", L.HINT_NEG_INF),
    # the stand-in in one exponential only (round 14 b's lead from lab 10)
    (_ALPHA, "alpha = math.exp(m[i] - m_new)", L.HINT_NEG_INF_ONE),
    (_P, "p = math.exp(s[i * TN + j] - m_new)", L.HINT_NEG_INF_ONE),
    (_ALPHA, "alpha = float32(1)", L.HINT_RESCALE),
    ("m_new = max(m[i], mx)", "m_new = mx", L.HINT_MAX),
    # review round 17 a (m): each got the generic HINT_UPDATE
    (_LP, "lp[i] = lp[i] + psum", L.HINT_RESCALE_HALF),
    ("acc[i * TD + j] *= alpha", "acc[i * TD + j] *= 1.0", L.HINT_RESCALE_HALF),
    (_ALPHA, "alpha = math.exp(m_use - m[i])", L.HINT_ALPHA_INVERTED),
    ("    m[i] = m_new\n", "", L.HINT_M_NOT_STORED),
    (_P, "p = math.exp(s[i * TN + j] - mx)", L.HINT_P_FROM_MX),
    (_LP, "lp[i] = (lp[i] + psum) * alpha", L.HINT_RESCALE_AFTER),
    (_P, "p = math.exp(s[i * TN + j])", L.HINT_SHIFT),
    (_P, "p = math.exp2(s[i * TN + j] - m_use)", L.HINT_EXP2),
    # review round 16 a, M: the stand-in tested on the tile's max mx passed every part case
    # (the kernel check failed it with "make the part checks pass first")
    (_STANDIN, "m_use = m_new if mx != NEG_INF else F0", L.HINT_STANDIN_WHICH),
]


def test_update_hints_name_the_slip_behind_them():
    """Review round 6 ac, M1-M3: three slips whose output is a replayed mistake's, though
    the learner's code has the step that mistake leaves out. Their hints must say so."""
    alpha_late = edited(LAB, "online_update", [(
        "alpha = math.exp(m[i] - m_use)                              # rescale factor, <= 1\n"
        "    m[i] = m_new", "m[i] = m_new\n    alpha = math.exp(m[i] - m_use)")])
    result = assert_hint(L.check_online_update, alpha_late, L.HINT_RESCALE[0])
    assert "exp(0)" in result.hint and "old max" in result.hint
    guard_old = mutate(LAB, "online_update", "m_use = m_new if m_new != NEG_INF else F0",
                       "m_use = m_new if m[i] != NEG_INF else F0")
    result = assert_hint(L.check_online_update, guard_old, L.HINT_SHIFT[0])
    assert "test m_new, not m[i]" in result.hint
    exp2_both = edited(LAB, "online_update", [
        (_P, "p = math.exp2(s[i * TN + j] - m_use)"),
        (_ALPHA, "alpha = math.exp2(m[i] - m_use)")])
    result = assert_hint(L.check_online_update, exp2_both, L.HINT_EXP2[0])
    assert "but exp for the rescale" not in result.hint and "alpha too" in result.hint


test_update_mistakes_get_their_hint = mistakes_test(
    LAB, ((L.check_online_update, "online_update"),), {"online_update": UPDATE_MISTAKES},
    id_width=25)


def test_kernel_names_a_missing_neg_inf_guard(lab):
    """Issue 14 item 7: a case whose first key tile is fully masked (left padding)."""
    update = mutate(LAB, "online_update", "m_use = m_new if m_new != NEG_INF else F0",
                    "m_use = m_new")
    result = L.check_kernel(*parts(lab, online_update=update), verbose=False)
    assert not result.passed and "left padding" in result.case
    assert result.hint == L.HINT_NEG_INF[0]


def test_kernel_names_an_overflowing_exp_not_a_missing_guard(lab):
    """Review round 7 ac, M4: p = exp(s - old max) is exp(+inf) on a row's first tile, and
    the NaN showed in the first case (nothing masked) with HINT_NEG_INF, which blames left
    padding; a NaN in a case with no empty row now gets HINT_OVERFLOW."""
    update = edited(LAB, "online_update", [
        ("alpha = math.exp(m[i] - m_use)                              # rescale factor, <= 1\n"
         "    m[i] = m_new", "m_old = m[i]\n    m[i] = m_new\n    alpha = math.exp(m_old - m_use)"),
        (_P, "p = math.exp(s[i * TN + j] - m_old)")])
    first, *rest = parts(lab, online_update=update)
    result = assert_hint(L.check_kernel, first, L.HINT_OVERFLOW[0], *rest)
    assert "one key tile" in result.case


def test_kernel_names_a_one_step_row_sum(lab):
    ns = functions_of(LAB, replace=[(
        "        x += shfl_xor(x, offset, scratch, tid)\n        offset //= 2",
        "        x += shfl_xor(x, offset, scratch, tid)\n        offset = 0")])
    result = L.check_kernel(*parts(lab, row_sum=ns["row_sum"]), verbose=False)
    assert not result.passed and result.hint == L.HINT_REDUCE_STEPS[0]


def test_key_blocks_without_skipping_is_named(lab):
    fn = mutate(LAB, "key_blocks", "    if causal == 0:\n        return n\n",
                "    if causal == 0 or causal == 1:\n        return n\n")
    result = L.check_key_blocks(fn, parts(lab), verbose=False)
    assert not result.passed and result.hint == L.HINT_SKIP_NONE[0]


test_no_hint_contains_a_solution_line = hint_leaks_test(L.ALL_HINTS, LAB)


def test_show_counts_global_accesses_on_the_simulator(lab, capsys):
    from flashcourse.gpu import using_simulator
    table = S.tally_global(parts(lab))
    if not using_simulator():
        assert table is None
        return
    assert len(table) == L.NT
    for tid, (reads, writes, want_reads, want_writes) in table.items():
        assert (reads, writes) == (want_reads, want_writes), tid
    S.show(lab["micro_tile_scores"], parts(lab))
    out = capsys.readouterr().out
    assert "Global memory" in out and "differs" not in out


#: key_blocks: [(solution text, the mistake that replaces it, the hint it must get), ...]
KEY_BLOCK_MISTAKES = [
    (_NOT_CAUSAL, "    return n\n", L.HINT_SKIP_NONE),
    (_BLOCKS, "return min(n, last // BC)", L.HINT_SKIP_OFF_BY_ONE),
    (_LAST, "last = min(q0 + BR, tq) - 1", L.HINT_SKIP_TOP_LEFT),
    ("n = (tk + BC - 1) // BC", "n = tk // BC", L.HINT_SKIP_FLOOR),
    ("    if last < 0:\n        return 0\n", "", L.HINT_SKIP_NEGATIVE),
    # passed before round 7 ac (M5): no block's last key started or ended a tile; the ceiling
    # got the generic HINT_SKIP until round 16 a (m), now HINT_SKIP_SHORT
    (_BLOCKS, "return min(n, (last + BC - 1) // BC)", L.HINT_SKIP_SHORT),
    # round 18 (mutants): generic HINT_SKIP until now
    (_LAST, "last = min(q0 + BR, tq) + off", L.HINT_SKIP_ONE_MORE),
    # review round 16 a (m): the block's first row in place of its last (generic before)
    (_LAST, "last = q0 + off", L.HINT_SKIP_SHORT),
    # round 18 (mutants): causal = 0 ignored (the causal count always) got HINT_SKIP
    (_NOT_CAUSAL, "", L.HINT_SKIP_NOT_CAUSAL),
]


@pytest.mark.parametrize("old,new,hint", KEY_BLOCK_MISTAKES,
                         ids=["no-skip", "off-by-one", "top-left", "floor", "negative",
                              "ceil-of-last", "last-plus-one", "first-row",
                              "causal-ignored"])
def test_key_blocks_mistakes_get_their_hint(lab, old, new, hint):
    assert_hint(L.check_key_blocks, mutate(LAB, "key_blocks", old, new), hint[0], parts(lab))


def test_kernel_catches_a_row_max_that_mixes_two_rows(lab):
    """The butterfly starting at offset CT passes the part check's hint HINT_REDUCE_CROSS,
    and in the kernel a row of scores near -60 next to one near +60 comes out empty."""
    ns = functions_of(LAB, replace=[(REDUCE_MISTAKES[1][0], REDUCE_MISTAKES[1][1])])
    result = L.check_kernel(*parts(lab, row_max=ns["row_max"]), verbose=False)
    assert not result.passed and result.hint == L.HINT_ROW_MIX[0]


def test_online_update_hint_is_not_circular():
    for hint in (L.HINT_UPDATE,):
        assert "check_online_update" not in " ".join(hint)


def test_replay_of_the_negative_case_is_the_reference():
    from flashcourse import reference
    q, k, v = L._negative_inputs()
    want = reference.attention(q, k, v)
    got = L.replay(q, k, v)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-9, atol=1e-12)
    s = q.astype(np.float64) @ k.T.astype(np.float64)
    assert (s < 0).all()


#: online updates that skip the rescale for a max of 0 or below: right on every positive
#: case, so check_kernel passed them before review round 12
SIGN_GATED = [
    (_ALPHA,
     "alpha = math.exp(m[i] - m_use) if m[i] > F0 else F0 + float32(1)", L.HINT_RESCALE_SIGN),
    ("    for j in range(TD):\n        acc[i * TD + j] *= alpha",
     "    if mx > F0:\n        for j in range(TD):\n            acc[i * TD + j] *= alpha",
     L.HINT_NEGATIVE),
]


@pytest.mark.parametrize("old,new,hint", SIGN_GATED, ids=["alpha", "acc"])
def test_kernel_catches_a_rescale_skipped_for_a_negative_max(lab, old, new, hint):
    update = mutate(LAB, "online_update", old, new)
    parts = (lab["micro_tile_scores"], lab["row_max"], lab["row_sum"], update)
    result = assert_hint(L.check_kernel, parts[0], hint[0], *parts[1:])
    assert result.case.startswith("negative scores")
    assert not L.check_online_update(update, verbose=False).passed


def test_an_update_that_takes_the_max_of_row_0_is_caught(lab):
    """Review round 12: m_new = max(m[0], mx) passed both checkers (an upper bound of the
    row's max is exact until exp underflows). The row-mix case now has rows 0 and 2 (one
    thread's micro-tile) of opposite signs, and the part check a row-1 case."""
    update = mutate(LAB, "online_update", "m_new = max(m[i], mx)", "m_new = max(m[0], mx)")
    parts = (lab["micro_tile_scores"], lab["row_max"], lab["row_sum"], update)
    assert_hint(L.check_kernel, parts[0], L.HINT_ROW_MIX_UPDATE[0], *parts[1:])
    assert_hint(L.check_online_update, update, L.HINT_UPDATE[0])


def test_part_4_text_counts_the_kernel_cases(monkeypatch):
    """The lab's part 4 says on how many inputs check_kernel runs the kernel: the number must
    follow KERNEL_CASES and the extra cases (a case was added without updating the text)."""
    import json
    import re

    seen = {}

    def capture(title, parts, cases, **kw):
        seen["cases"] = cases
        return None

    monkeypatch.setattr(L, "run_checks", capture)
    L.check_kernel(None, None, None, None, verbose=False)
    inputs = [c for c in seen["cases"] if c.name != "float32 constants only"]
    words = {5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine"}
    cells = json.loads(LAB.read_text(encoding="utf-8"))["cells"]
    text = next("".join(c["source"]) for c in cells
                if "The checker runs the lab kernel with your four parts" in "".join(c["source"]))
    said = re.search(r"your four parts on (\w+) tiny inputs", text)
    assert said and said.group(1) == words[len(inputs)], (said and said.group(1), len(inputs))
