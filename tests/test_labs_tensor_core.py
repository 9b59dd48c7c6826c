"""Lab 10 (the FA2 inner loop on m16n8k16 fragments): solutions pass, stubs report "not
implemented", each typical mistake gets its hint, no hint holds a solution line. Runs on the
simulator through the numpy twins of mma.sync (flashcourse/cuda/mma.py)."""

import numpy as np
import pytest

from flashcourse.labs import tensor_core_lab as L
from labtools import (assert_hint, assert_stubs_not_implemented, functions_of, hint_leaks_test,
                      lab_fixture, lab_path, mutate)

LAB = lab_path("lab10_tensor_cores")
lab = lab_fixture(LAB)


def parts_of(ns, **swap):
    return {n: swap.get(n, ns[n]) for n in L.PARTS}


def test_solutions_pass(lab):
    assert L.check_fragments(lab["load_a"], lab["load_b"], verbose=False).passed
    assert L.check_quad(lab["quad_max"], lab["quad_sum"], verbose=False).passed
    assert L.check_kernel(parts_of(lab), verbose=False).passed
    assert L.check_mask(lab["mask_tile"], verbose=False).passed


def test_stubs_report_not_implemented(capsys):
    st = functions_of(LAB, student=True)
    results = [L.check_fragments(st["load_a"], st["load_b"]),
               L.check_quad(st["quad_max"], st["quad_sum"]), L.check_kernel(parts_of(st)),
               L.check_mask(st["mask_tile"])]
    assert_stubs_not_implemented(results, capsys.readouterr().out)


def test_replay_is_close_to_the_reference():
    from flashcourse import reference
    for name, seed, tq, tk, d, causal, spread, grow in L.KERNEL_CASES:
        q, k, v = L._inputs(seed, tq, tk, d, spread, grow)
        o, lse = L.replay(q, k, v, causal=causal)
        o_ref, lse_ref = reference.attention(q, k, v, causal=causal)
        np.testing.assert_allclose(o, o_ref, atol=3e-2, err_msg=name)   # fp16 operands
        np.testing.assert_allclose(lse, lse_ref, atol=3e-2, err_msg=name)


def test_a_mistake_map_is_the_fragment_map_when_right():
    from flashcourse.cuda import mma
    assert L.mask_model(0, 0, 16, 0, 0).sum() == 0 and mma.index_table("a_m16n8k16").shape == (
        32, 8, 2)


FRAGMENT_MISTAKES = [
    ("load_a", "a[ai + w] = pack(tile[row, col], tile[row, col + 1])",
     "a[ai + w] = pack(tile[col, row], tile[col + 1, row])", L.HINT_A_T),
    ("load_a", "        row = r0 + g + 8 * (w % 2)\n        col = c0 + 2 * t + 8 * (w // 2)",
     "        row = r0 + g + 8 * (w // 2)\n        col = c0 + 2 * t + 8 * (w % 2)", L.HINT_A_WORDS),
    ("load_a", "        row = r0 + g + 8 * (w % 2)\n        col = c0 + 2 * t + 8 * (w // 2)",
     "        row = r0 + g\n        col = c0 + 2 * t", L.HINT_A_PLUS8),
    ("load_a", "pack(tile[row, col], tile[row, col + 1])",
     "pack(tile[row, col + 1], tile[row, col])", L.HINT_PAIR),
    ("load_b", "b[w] = pack(tile[n0 + g, kk], tile[n0 + g, kk + 1])",
     "b[w] = pack(tile[kk, n0 + g], tile[kk + 1, n0 + g])", L.HINT_B_T),
    ("load_b", "    g = lane // 4\n    t = lane % 4\n    for w in range(2):",
     "    g = lane % 4\n    t = lane // 4\n    for w in range(2):", L.HINT_B_GT),
    ("load_b", "kk = k0 + 2 * t + 8 * w", "kk = k0 + 2 * t", L.HINT_B_PLUS8),
]


@pytest.mark.parametrize("name,old,new,hint", FRAGMENT_MISTAKES,
                         ids=[f"{m[0]}-{n}" for n, m in enumerate(FRAGMENT_MISTAKES)])
def test_fragment_mistakes_get_their_hint(lab, name, old, new, hint):
    ns = functions_of(LAB, replace=[(old, new)])
    assert_hint(L.check_fragments, ns["load_a"], hint[0], ns["load_b"])


QUAD_MISTAKES = [
    ("    x = max(x, shfl_xor(x, 2, red, lane))\n", "", L.HINT_QUAD_STEP),
    ("    x = max(x, shfl_xor(x, 1, red, lane))\n    x = max(x, shfl_xor(x, 2, red, lane))",
     "    x = max(x, shfl_xor(x, 4, red, lane))\n    x = max(x, shfl_xor(x, 8, red, lane))",
     L.HINT_QUAD_CROSS),
    ("    x = max(x, shfl_xor(x, 1, red, lane))\n    x = max(x, shfl_xor(x, 2, red, lane))",
     "    x += shfl_xor(x, 1, red, lane)\n    x += shfl_xor(x, 2, red, lane)", L.HINT_QUAD_OP),
]


@pytest.mark.parametrize("old,new,hint", QUAD_MISTAKES, ids=["one-step", "cross", "op"])
def test_quad_mistakes_get_their_hint(old, new, hint):
    ns = functions_of(LAB, replace=[(old, new)])
    assert_hint(L.check_quad, ns["quad_max"], hint[0], ns["quad_sum"])


KERNEL_MISTAKES = [
    ("scores_tile", "    for x in range(4 * NS):\n        s[x] = F0\n", "", L.HINT_RESET),
    ("softmax_tile", "alpha = math.exp(m[hf] - m_use)", "alpha = math.exp(F0)", L.HINT_RESCALE),
    ("softmax_tile", "m_new = max(m[hf], x)", "m_new = x", L.HINT_TILE_MAX),
    ("pv_tile",
     "        pa[1] = pack(s[j0 + 2], s[j0 + 3])\n        pa[2] = pack(s[j0 + 4], s[j0 + 5])",
     "        pa[1] = pack(s[j0 + 4], s[j0 + 5])\n        pa[2] = pack(s[j0 + 2], s[j0 + 3])",
     L.HINT_P_ORDER),
]


@pytest.mark.parametrize("name,old,new,hint", KERNEL_MISTAKES,
                         ids=["no-reset", "no-rescale", "tile-max", "p-order"])
def test_kernel_mistakes_get_their_hint(lab, name, old, new, hint):
    ns = functions_of(LAB, replace=[(old, new)])
    assert_hint(L.check_kernel, parts_of(lab, **{name: ns[name]}), hint[0])


MASK_MISTAKES = [
    ("row = q0 + g + 8 * (i // 2)", "row = q0 + g", L.HINT_MASK_ROWS),
    ("col > row + off", "col > row", L.HINT_MASK_TOPLEFT),
    ("col >= tk", "col > tk", L.HINT_MASK_EDGE),
    ("col = k0 + 8 * n + 2 * t + (i % 2)", "col = k0 + 2 * t + (i % 2)", L.HINT_MASK_TILE),
]


@pytest.mark.parametrize("old,new,hint", MASK_MISTAKES, ids=["rows", "top-left", "edge", "tile"])
def test_mask_mistakes_get_their_hint(old, new, hint):
    assert_hint(L.check_mask, mutate(LAB, "mask_tile", old, new), hint[0])


def test_timing_is_gpu_only(lab):
    from flashcourse.gpu import using_simulator
    if using_simulator():
        assert L.time_against_course(parts_of(lab)) is None


test_no_hint_contains_a_solution_line = hint_leaks_test(L.ALL_HINTS, LAB)
