"""Lab 10 (the FA2 inner loop on m16n8k16 fragments): solutions pass, stubs report "not
implemented", each typical mistake gets its hint (from its part check and from the whole
kernel), unusual correct variants pass, no hint holds a solution line. Runs on the simulator
through the numpy twins of mma.sync (flashcourse/cuda/ptx/mma.py)."""

import numpy as np
import pytest

from flashcourse.labs import tensor_core_lab as L
from flashcourse.labs import tensor_core_parts as P
from flashcourse.labs import tensor_core_wide as W
from flashcourse.labs.cuda_kernel import HINT_FLOAT64
from flashcourse.labs.tile_sizes import own_sizes_hint
from labtools import (assert_hint, assert_stubs_not_implemented, correct_variants_test, edited,
                      functions_of, hint_leaks_test, idle_part_test, joint_mistakes_test,
                      kernel_error_test, lab_fixture, lab_path, loop_over, mistakes_test,
                      part_mistakes_tests, parts_picker)

LAB = lab_path("lab10_tensor_cores")
lab = lab_fixture(LAB)
parts_of = parts_picker(L.PARTS)


def test_solutions_pass(lab):
    assert L.check_fragments(lab["load_a"], lab["load_b"], verbose=False).passed
    assert L.check_quad(lab["quad_max"], lab["quad_sum"], verbose=False).passed
    assert P.check_scores_tile(lab["scores_tile"], verbose=False).passed
    assert P.check_softmax_tile(lab["softmax_tile"], verbose=False).passed
    assert P.check_pv_tile(lab["pv_tile"], verbose=False).passed
    assert P.check_kernel(parts_of(lab), verbose=False).passed
    assert L.check_mask(lab["mask_tile"], verbose=False).passed


def test_stubs_report_not_implemented(capsys):
    st = functions_of(LAB, student=True)
    results = [L.check_fragments(st["load_a"], st["load_b"]),
               L.check_quad(st["quad_max"], st["quad_sum"]),
               P.check_scores_tile(st["scores_tile"]), P.check_softmax_tile(st["softmax_tile"]),
               P.check_pv_tile(st["pv_tile"]), P.check_kernel(parts_of(st)),
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


def test_lane_by_lane_model_is_the_replay():
    """kernel_model (the part models composed, as the kernel runs them) is the row-by-row
    replay, so a mistake replayed in it is a mistake of that kernel."""
    for name, seed, tq, tk, d, causal, spread, grow in L.KERNEL_CASES:
        q, k, v = L._inputs(seed, tq, tk, d, spread, grow)
        for got, want in zip(P.kernel_model(q, k, v, causal=causal),
                             L.replay(q, k, v, causal=causal)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=name)


def test_a_mistake_map_is_the_fragment_map_when_right():
    from flashcourse.cuda.ptx import mma
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
    # ai ignored: right at ai = 0, the only offset the checker used (review rounds 10 b, 17 b)
    ("load_a", "a[ai + w] = pack(tile[row, col], tile[row, col + 1])",
     "a[w] = pack(tile[row, col], tile[row, col + 1])", L.HINT_A_AI),
]


test_fragment_mistakes_get_their_hint = joint_mistakes_test(
    LAB, L.check_fragments, ("load_a", "load_b"), [m[1:] for m in FRAGMENT_MISTAKES],
    ids=[f"{m[0]}-{n}" for n, m in enumerate(FRAGMENT_MISTAKES)])


QUAD_MISTAKES = [
    ("    x = max(x, shfl_xor(x, 2, red, lane))\n", "", L.HINT_QUAD_STEP),
    ("    x = max(x, shfl_xor(x, 1, red, lane))\n    x = max(x, shfl_xor(x, 2, red, lane))",
     "    x = max(x, shfl_xor(x, 4, red, lane))\n    x = max(x, shfl_xor(x, 8, red, lane))",
     L.HINT_QUAD_CROSS),
    ("    x = max(x, shfl_xor(x, 1, red, lane))\n    x = max(x, shfl_xor(x, 2, red, lane))",
     "    x += shfl_xor(x, 1, red, lane)\n    x += shfl_xor(x, 2, red, lane)", L.HINT_QUAD_OP),
]


test_quad_mistakes_get_their_hint = joint_mistakes_test(
    LAB, L.check_quad, ("quad_max", "quad_sum"), QUAD_MISTAKES, ids=["one-step", "cross", "op"])


SOFTMAX = "softmax_tile"
RESCALE_ACC = ("        for n in range(NO):\n            acc[4 * n + 2 * hf] *= alpha\n"
               "            acc[4 * n + 2 * hf + 1] *= alpha\n")
V_AS_K = ("            for x in range(2):\n"
          "                kk = 16 * kp + 2 * (w[0] % 4) + 8 * x\n"
          "                b[x] = pack(vt[kk, 8 * n + w[0] // 4], vt[kk + 1, 8 * n + w[0] // 4])\n")
PA_LINES = [(f"pa[{i}] = pack(s[j0 + {2 * i}], s[j0 + {2 * i + 1}])".replace("j0 + 0", "j0"),
             f"pa[{i}] = pack(s[j0 + {2 * i + 1}], s[j0 + {2 * i}])".replace("j0 + 0", "j0"))
            for i in range(4)]

#: (part, [(old, new), ...], hint, also through check_kernel)
PART_MISTAKES = {
    "no-reset": ("scores_tile", [("    for x in range(4 * NS):\n        s[x] = F0\n", "")],
                 P.HINT_RESET, True),
    "s-offsets": ("scores_tile", [("load_b(ks, 8 * n, 16 * kk, w[0], b)",
                                   "load_b(ks, 16 * kk, 8 * n, w[0], b)")], P.HINT_S_OFFSETS,
                  False),
    "s-ci": ("scores_tile", [("mma(qa, 4 * kk, b, s, 4 * n, scr, w)",
                              "mma(qa, 4 * kk, b, s, n, scr, w)")], P.HINT_CI, True),
    "kt-short": ("scores_tile", [("for kk in range(KT):\n            load_b(ks",
                                  "for kk in range(KT - 1):\n            load_b(ks")],
                 P.HINT_KT_SHORT, False),
    "exp2": (SOFTMAX, [("p = math.exp(s[4 * n + 2 * hf + c] - m_use)",
                        "p = math.exp2(s[4 * n + 2 * hf + c] - m_use)")], P.HINT_SOFTMAX_EXP2,
             False),
    "exp2-both": (SOFTMAX, [("p = math.exp(s[4 * n + 2 * hf + c] - m_use)",
                             "p = math.exp2(s[4 * n + 2 * hf + c] - m_use)"),
                            ("alpha = math.exp(m[hf] - m_use)",
                             "alpha = math.exp2(m[hf] - m_use)")], P.HINT_SOFTMAX_EXP2, True),
    "s-float64": ("scores_tile", [("s[x] = F0", "s[x] = 0.0")], HINT_FLOAT64, False),
    # only n8 tile 0 reset: no replay matches, and the generic hint names the reset (round 10 b)
    "s-reset-partial": ("scores_tile", [("    for x in range(4 * NS):\n        s[x] = F0\n",
                                         "    for x in range(4):\n        s[x] = F0\n")],
                        P.HINT_SCORES, False),
    "no-rescale": (SOFTMAX, [("alpha = math.exp(m[hf] - m_use)", "alpha = math.exp(F0)")],
                   P.HINT_RESCALE, True),
    # alpha taken after m[hf] holds the new max: exp(0) = 1, the output of no rescale at all
    # (review round 10 b, M1: the hint must name it, see the test below)
    "alpha-late": (SOFTMAX, [("        alpha = math.exp(m[hf] - m_use)\n        m[hf] = m_new\n",
                              "        m[hf] = m_new\n        alpha = math.exp(m[hf] - m_use)\n")],
                   P.HINT_RESCALE, True),
    "no-rescale-acc": (SOFTMAX, [(RESCALE_ACC, "")], P.HINT_RESCALE_ACC, True),
    "no-rescale-lp": (SOFTMAX, [("lp[hf] = lp[hf] * alpha + ps", "lp[hf] = lp[hf] + ps")],
                      P.HINT_RESCALE_LP, True),
    "no-quad-max": (SOFTMAX, [("        x = quad_max(x, red, lane)\n", "")], P.HINT_NO_QUAD_MAX,
                    True),
    "tile-max": (SOFTMAX, [("m_new = max(m[hf], x)", "m_new = x")], P.HINT_TILE_MAX, True),
    "index": (SOFTMAX, [("2 * hf", "hf")], P.HINT_ACC_INDEX, True),
    "index-acc": (SOFTMAX, [("acc[4 * n + 2 * hf", "acc[4 * n + hf")], P.HINT_ACC_INDEX, False),
    "no-standin": (SOFTMAX, [("m_use = m_new if m_new != NEG_INF else F0", "m_use = m_new")],
                   P.HINT_STANDIN, False),
    # the stand-in in one exponential only: NaN in the wholly masked row, and the generic hint
    # used to name exactly the learner's exp(m_old - m_new) or exp(S - m_new) (review round 14 b).
    # The kernel's output hides it (a row masked in its first tile sees no key at all, and the
    # epilogue writes 0 where the row sum is not > 0), as it hides no-standin
    "standin-alpha-only": (SOFTMAX, [("alpha = math.exp(m[hf] - m_use)",
                                      "alpha = math.exp(m[hf] - m_new)")], P.HINT_STANDIN, False),
    "standin-p-only": (SOFTMAX, [("p = math.exp(s[4 * n + 2 * hf + c] - m_use)",
                                  "p = math.exp(s[4 * n + 2 * hf + c] - m_new)")],
                       P.HINT_STANDIN, False),
    # exp of a score (or of the max) alone, then a quotient: right at the small cases' scores,
    # inf / inf (GPU) or OverflowError (simulator) at scores near 800 (review round 11 b, M1;
    # passed every case before)
    "p-overflow": (SOFTMAX, [("p = math.exp(s[4 * n + 2 * hf + c] - m_use)",
                              "p = math.exp(s[4 * n + 2 * hf + c]) / math.exp(m_use)")],
                   P.HINT_P_OVERFLOW, False),
    "alpha-overflow": (SOFTMAX, [("alpha = math.exp(m[hf] - m_use)",
                                  "alpha = math.exp(m[hf]) / math.exp(m_use)")],
                       P.HINT_P_OVERFLOW, False),
    "p-not-stored": (SOFTMAX, [("                s[4 * n + 2 * hf + c] = p\n", "")],
                     P.HINT_P_STORE, False),
    "lp-quad": (SOFTMAX, [("lp[hf] = lp[hf] * alpha + ps",
                           "lp[hf] = lp[hf] * alpha + quad_sum(ps, red, lane)")],
                P.HINT_LP_PARTIAL, False),
    "softmax-float64": (SOFTMAX, [("x = NEG_INF", "x = -math.inf")], HINT_FLOAT64, False),
    "p-order": ("pv_tile", [("        pa[1] = pack(s[j0 + 2], s[j0 + 3])\n"
                             "        pa[2] = pack(s[j0 + 4], s[j0 + 5])",
                             "        pa[1] = pack(s[j0 + 4], s[j0 + 5])\n"
                             "        pa[2] = pack(s[j0 + 2], s[j0 + 3])")], P.HINT_P_ORDER, True),
    "p-pairs": ("pv_tile", PA_LINES, P.HINT_P_ORDER, False),
    "v-as-k": ("pv_tile", [("            load_b(vt, 8 * n, 16 * kp, w[0], b)\n", V_AS_K)],
               P.HINT_PV_B, True),
    "pv-offsets": ("pv_tile", [("load_b(vt, 8 * n, 16 * kp, w[0], b)",
                                "load_b(vt, 16 * kp, 8 * n, w[0], b)")], P.HINT_PV_OFFSETS,
                   False),
    "pv-ci": ("pv_tile", [("mma(pa, 0, b, acc, 4 * n, scr, w)", "mma(pa, 0, b, acc, n, scr, w)")],
              P.HINT_CI, True),
    "pv-overwrite": ("pv_tile", [("    for kp in range(KP):\n",
                                  "    for x in range(4 * NO):\n        acc[x] = F0\n"
                                  "    for kp in range(KP):\n")], P.HINT_PV_ADD, False),
}
PART_CHECK = {"scores_tile": P.check_scores_tile, SOFTMAX: P.check_softmax_tile,
              "pv_tile": P.check_pv_tile}


# the whole kernel names a part's mistake from its output alone (kernel_model); no-standin
# makes NaN
test_part_mistakes_get_their_hint, test_kernel_mistakes_get_their_hint = part_mistakes_tests(
    LAB, P, parts_of, PART_CHECK, PART_MISTAKES,
    sorted(k for k, m in PART_MISTAKES.items() if m[3]))


def test_the_softmax_hints_subtract_the_stand_in_not_m_new():
    # a generic hint that says exp(S - m_new) endorses the learner's missing stand-in
    assert "P = exp(S - m_use)" in P.HINT_SOFTMAX[0]
    assert "P = exp(S - m_new)" not in P.HINT_SOFTMAX[0]
    assert "both exponentials" in P.HINT_STANDIN[0]


def test_the_rescale_hints_name_an_alpha_taken_after_the_max_moved():
    """Review round 10 b, M1: an alpha computed after m[hf] = m_new is exp(0) = 1, so a
    softmax_tile that does multiply lp and acc by alpha gets HINT_RESCALE ("Missing
    rescale"); the hint must say why its alpha is 1. The generic HINT_SCORES names the
    reset, the one step of the contract a partly reset s gets wrong (m1)."""
    assert "exp(0)" in P.HINT_RESCALE[0] and "before m[hf] = m_new" in P.HINT_RESCALE[1]
    assert "reset to F0" in P.HINT_SCORES[0]


def test_kernel_names_the_failing_part_check(lab):
    """A mistake no replay knows (S scaled twice): the first failing part check is named."""
    wrong = edited(LAB, "scores_tile", [("mma(qa, 4 * kk, b, s, 4 * n, scr, w)",
                                     "mma(qa, 4 * kk, b, s, 4 * n, scr, w)\n"
                                     "            mma(qa, 4 * kk, b, s, 4 * n, scr, w)")])
    assert_hint(P.check_kernel, parts_of(lab, scores_tile=wrong), P.HINT_KERNEL_SCORES[0])


B_PAIRS = ("b[w] = pack(tile[n0 + g, kk], tile[n0 + g, kk + 1])",
           "b[w] = pack(tile[n0 + g, kk + 1], tile[n0 + g, kk])")
A_PAIRS = ("pack(tile[row, col], tile[row, col + 1])", "pack(tile[row, col + 1], tile[row, col])")
B_T = ("b[w] = pack(tile[n0 + g, kk], tile[n0 + g, kk + 1])",
       "b[w] = pack(tile[kk, n0 + g], tile[kk + 1, n0 + g])")
QUAD_IDLE = ("    x = max(x, shfl_xor(x, 1, red, lane))\n    x = max(x, shfl_xor(x, 2, red, lane))",
             "    max(x, shfl_xor(x, 1, red, lane))\n    max(x, shfl_xor(x, 2, red, lane))")

#: a wrong helper under a right part: (edits, the check, the part it runs, the hint). A wrong
#: load_b or quad_max can give exactly a part mistake's output (load_b with its words' halves
#: swapped: pv_tile's P halves swapped; load_b transposed: V read like K; a quad_max that
#: reduces nothing: no quad max in softmax_tile), so the helper is named instead.
HELPER_MISTAKES = {
    "pv-load_b-pairs": ([B_PAIRS], P.check_pv_tile, "pv_tile", P.HINT_PV_LOAD_B),
    "pv-load_b-transposed": ([B_T], P.check_pv_tile, "pv_tile", P.HINT_PV_LOAD_B),
    "scores-load_b-pairs": ([B_PAIRS], P.check_scores_tile, "scores_tile",
                            P.HINT_SCORES_LOAD_B),
    "softmax-quad_max-idle": ([QUAD_IDLE], P.check_softmax_tile, "softmax_tile",
                              P.HINT_SOFTMAX_QUAD),
    "kernel-both-loads-pairs": ([A_PAIRS, B_PAIRS], P.check_kernel, None,
                                P.HINT_KERNEL_FRAGMENTS),
    "kernel-quad_max-idle": ([QUAD_IDLE], P.check_kernel, None, P.HINT_KERNEL_QUAD),
}


@pytest.mark.parametrize("key", sorted(HELPER_MISTAKES))
def test_a_wrong_helper_is_named_before_the_parts_mistakes(key):
    edits, check, part, hint = HELPER_MISTAKES[key]
    ns = functions_of(LAB, replace=edits)
    assert_hint(check, ns[part] if part else parts_of(ns), hint[0])


#: a scores_tile that writes its B load out inline (no call to load_b) and forgets the reset,
#: beside a wrong load_b: the part's own mistake is named, not the helper it does not call
INLINE_B_NO_RESET = ("    for x in range(4 * NS):\n        s[x] = F0\n    for n in range(NS):\n"
                     "        for kk in range(KT):\n"
                     "            load_b(ks, 8 * n, 16 * kk, w[0], b)\n",
                     "    for n in range(NS):\n        for kk in range(KT):\n"
                     "            g = w[0] // 4\n            t = w[0] % 4\n"
                     "            for wd in range(2):\n"
                     "                kx = 16 * kk + 2 * t + 8 * wd\n"
                     "                b[wd] = pack(ks[8 * n + g, kx], ks[8 * n + g, kx + 1])\n")


def test_a_part_that_does_not_call_the_helper_is_not_blamed_on_it():
    """Review round 8 b, m1: the helper is asked only when the part calls it by name."""
    ns = functions_of(LAB, replace=[B_T, INLINE_B_NO_RESET])
    assert not L.check_fragments(ns["load_a"], ns["load_b"], verbose=False).passed
    assert_hint(P.check_scores_tile, ns["scores_tile"], P.HINT_RESET[0])


# a pv_tile that returns at once when vt is not the part check's 32 rows (96 at WIDE)
test_kernel_says_when_every_part_check_passes = idle_part_test(
    LAB, P, parts_of, "pv_tile", "    for kp in range(KP):\n",
    "vt.shape[0] != 32 and vt.shape[0] != 96")
test_kernel_that_raises_points_to_the_part_checks = kernel_error_test(
    LAB, P, parts_of, *PART_MISTAKES["pv-offsets"][:2],
    "on a GPU a read past vt returns garbage instead of raising")


def test_direct_warp_shuffle_gets_its_hint():
    from flashcourse.gpu import using_simulator
    if not using_simulator():
        pytest.skip("a GPU runs cuda.shfl_xor_sync: nothing to flag there")
    edits = [("shfl_xor(x, 1, red, lane)", "cuda.shfl_xor_sync(0xFFFFFFFF, x, 1)"),
             ("shfl_xor(x, 2, red, lane)", "cuda.shfl_xor_sync(0xFFFFFFFF, x, 2)")]
    ns = functions_of(LAB, replace=edits)
    assert_hint(L.check_quad, ns["quad_max"], L.HINT_SHFL_SYNC[0], ns["quad_sum"])
    assert_hint(P.check_softmax_tile, ns["softmax_tile"], L.HINT_SHFL_SYNC[0])
    assert_hint(P.check_kernel, parts_of(ns), L.HINT_SHFL_SYNC[0])


def test_float64_literal_in_a_quad_gets_its_hint():
    ns = functions_of(LAB, replace=[("    return x\n", "    return x + 0.0\n")])
    assert_hint(L.check_quad, ns["quad_max"], HINT_FLOAT64[0], ns["quad_sum"])


#: unusual but correct: other loop orders, extra temporaries, float32(...) constants
CORRECT_VARIANTS = {
    "scores_tile": [
        ("    for n in range(NS):\n        for kk in range(KT):\n",
         "    for kk in range(KT):\n        for n in range(NS):\n"),
        ("    for x in range(4 * NS):\n        s[x] = F0\n",
         "    for n in range(NS):\n        for i in range(4):\n"
         "            s[4 * n + i] = float32(0.0)\n"),
    ],
    SOFTMAX: [
        ("        m_use = m_new if m_new != NEG_INF else F0\n",
         "        m_use = F0\n        if m_new > NEG_INF:\n            m_use = m_new\n"),
        (RESCALE_ACC, "        for n in range(NO):\n            for c in range(2):\n"
                      "                j = 4 * n + 2 * hf + c\n"
                      "                old = acc[j]\n                acc[j] = old * alpha\n"),
        ("        lp[hf] = lp[hf] * alpha + ps\n",
         "        scaled = lp[hf] * alpha\n        lp[hf] = scaled + ps\n"),
    ],
    "pv_tile": [
        ("        pa[0] = pack(s[j0], s[j0 + 1])\n        pa[1] = pack(s[j0 + 2], s[j0 + 3])\n"
         "        pa[2] = pack(s[j0 + 4], s[j0 + 5])\n        pa[3] = pack(s[j0 + 6], s[j0 + 7])\n",
         "        for q in range(4):\n"
         "            pa[q] = pack(s[j0 + 2 * q], s[j0 + 2 * q + 1])\n"),
    ],
}


test_unusual_correct_variants_pass = correct_variants_test(LAB, P, parts_of, PART_CHECK,
                                                           CORRECT_VARIANTS)
#: sizes written from D and BC (right at every tile configuration): they follow WIDE too
SIZES_FROM_D_BC = {"sizes": [
    loop_over("kk", "KT", "D // 16"),
    ("    for x in range(4 * NS):\n", "    for x in range(BC // 2):\n"),
    loop_over("kp", "KP", "BC // 16"),
    ("        for n in range(NO):\n            acc[", "        for n in range(D // 8):\n"
     "            acc[")]}
test_sizes_from_d_and_bc_pass = correct_variants_test(LAB, P, parts_of, PART_CHECK,
                                                      SIZES_FROM_D_BC)

#: right at D = BC = 16 (KT = KP = 1, NS = NO = 2), so caught only at WIDE (D = 48, BC = 32):
#: review rounds 10 b and 15 found them passing, round 17 b added the wide case
WIDE_MISTAKES = {
    "s-kp-for-kt": ("scores_tile", [loop_over("kk", "KT", "KP")], W.HINT_S_KP),
    "s-qa-words-kk": ("scores_tile", [("mma(qa, 4 * kk,", "mma(qa, kk,")], W.HINT_WIDE_SCORES),
    "s-qa-words-2kk": ("scores_tile", [("mma(qa, 4 * kk,", "mma(qa, 2 * kk,")],
                       W.HINT_S_QA_WORDS),
    "s-k0-8kk": ("scores_tile", [("load_b(ks, 8 * n, 16 * kk, w[0], b)",
                                  "load_b(ks, 8 * n, 8 * kk, w[0], b)")], W.HINT_S_K0),
    "s-no-for-ns": ("scores_tile", [loop_over("n", "NS", "NO")], W.HINT_WIDE_SCORES),
    "s-literal-kt": ("scores_tile", [loop_over("kk", "KT", 1)], W.HINT_LITERAL),
    "softmax-acc-ns": (SOFTMAX, [("        for n in range(NO):\n            acc[",
                                  "        for n in range(NS):\n            acc[")],
                       W.HINT_ACC_NS),
    "softmax-s-no": (SOFTMAX, [("        for n in range(NS):\n            for c in range(2):",
                                "        for n in range(NO):\n            for c in range(2):")],
                     W.HINT_WIDE_SOFTMAX),
    "softmax-literal": (SOFTMAX, [("        for n in range(NO):\n            acc[",
                                   "        for n in range(2):\n            acc[")],
                        W.HINT_LITERAL),
    "pv-j0-4kp": ("pv_tile", [("j0 = 8 * kp", "j0 = 4 * kp")], W.HINT_PV_J0),
    "pv-k0-8kp": ("pv_tile", [("load_b(vt, 8 * n, 16 * kp, w[0], b)",
                               "load_b(vt, 8 * n, 8 * kp, w[0], b)")], W.HINT_PV_KP8),
    "pv-k0-0": ("pv_tile", [("load_b(vt, 8 * n, 16 * kp, w[0], b)",
                             "load_b(vt, 8 * n, 0, w[0], b)")], W.HINT_WIDE_PV),
    "pv-ns-for-no": ("pv_tile", [loop_over("n", "NO", "NS")], W.HINT_PV_NS),
    "pv-kt-for-kp": ("pv_tile", [loop_over("kp", "KP", "KT")], W.HINT_WIDE_PV),
    "pv-pa-4kp": ("pv_tile", [("mma(pa, 0, b, acc, 4 * n, scr, w)",
                               "mma(pa, 4 * kp, b, acc, 4 * n, scr, w)")], W.HINT_WIDE_PV),
    "pv-literal-kp": ("pv_tile", [loop_over("kp", "KP", 1)], W.HINT_LITERAL),
}


@pytest.mark.parametrize("key", sorted(WIDE_MISTAKES))
def test_wide_mistakes_pass_the_lab_tiles_and_get_their_hint_at_the_wide_ones(key):
    """Each passes every case at D = BC = 16 and fails the WIDE one with its hint."""
    part, edits, hint = WIDE_MISTAKES[key]
    result = assert_hint(PART_CHECK[part], edited(LAB, part, edits), hint[0])
    assert "wider tiles" in result.case and str(L.WIDE) in result.case


def test_log2e_folded_into_the_scores_is_a_correct_softmax_tile():
    """exp2(s log2 e - m_use log2 e), as FA2's kernels do: right, within the large-score
    case's looser tolerance (a float32 exponent near 1,150 carries 1e-4 of rounding)."""
    fn = edited(LAB, SOFTMAX, [
        ("p = math.exp(s[4 * n + 2 * hf + c] - m_use)",
         "p = math.exp2(s[4 * n + 2 * hf + c] * LOG2E_F - m_use * LOG2E_F)"),
        ("alpha = math.exp(m[hf] - m_use)",
         "alpha = math.exp2(m[hf] * LOG2E_F - m_use * LOG2E_F)")],
        also=[("from numba import cuda\n",
               "from numba import cuda\nfrom flashcourse.constants import LOG2E_F\n")])
    assert P.check_softmax_tile(fn, verbose=False).passed


def test_a_non_finite_large_score_result_names_the_overflow():
    """On a GPU the overflow is inf / inf = NaN, not the simulator's OverflowError."""
    assert P._overflowed((np.zeros(2), np.array([1.0, np.nan])), None)
    assert P._overflowed((np.array([np.inf]),), None)
    assert not P._overflowed((np.zeros(2), np.ones(3)), None)


MASK_MISTAKES = [
    ("row = q0 + g + 8 * (i // 2)", "row = q0 + g", L.HINT_MASK_ROWS),
    ("col > row + off", "col > row", L.HINT_MASK_TOPLEFT),
    ("col >= tk", "col > tk", L.HINT_MASK_EDGE),
    ("col = k0 + 8 * n + 2 * t + (i % 2)", "col = k0 + 2 * t + (i % 2)", L.HINT_MASK_TILE),
    ("col > row + off", "col >= row + off", L.HINT_MASK_DIAGONAL),
    ("if col >= tk or (causal != 0 and col > row + off):",
     "if causal != 0 and col > row + off:", L.HINT_MASK_NO_TK),
    ("col = k0 + 8 * n + 2 * t + (i % 2)", "col = 8 * n + 2 * t + (i % 2)", L.HINT_MASK_K0),
    ("row = q0 + g + 8 * (i // 2)", "row = g + 8 * (i // 2)", L.HINT_MASK_Q0),
    # the offset subtracted: the generic HINT_MASK before (review round 16 b)
    ("col > row + off", "col > row - off", L.HINT_MASK_OFF_SIGN),
]


test_mask_mistakes_get_their_hint = mistakes_test(
    LAB, ((L.check_mask, "mask_tile"),), {"mask_tile": MASK_MISTAKES},
    ids=["rows", "top-left", "edge", "tile", "diagonal", "no-tk", "no-k0", "no-q0", "off-sign"])


def test_timing_is_gpu_only(lab):
    from flashcourse.gpu import using_simulator
    if using_simulator():
        assert L.time_against_course(parts_of(lab)) is None


test_no_hint_contains_a_solution_line = hint_leaks_test(L.ALL_HINTS + P.ALL_HINTS, LAB)


def test_a_size_of_the_learners_own_is_named_at_the_wide_tiles():
    """NK = D // 16 of the learner's own stays 1 at WIDE (D = 48): the hint names it."""
    fn = edited(LAB, "scores_tile", [loop_over("kk", "KT", "NK")],
                also=[("@cuda.jit(device=True)\ndef scores_tile(",
                       "NK = D // 16\n\n\n@cuda.jit(device=True)\ndef scores_tile(")])
    result = assert_hint(P.check_scores_tile, fn,
                         own_sizes_hint([("NK", 1)], L.WIDE)[0])
    assert "wider tiles" in result.case
