"""Lab 10b (the FA2 backward of one key block on m16n8k16 fragments): solutions pass, stubs
report "not implemented", each typical mistake gets its hint from its part check and the
whole kernel names the failing part, unusual correct variants pass, a part that does not
compile says so, no hint holds a solution line. Runs on the simulator through the numpy
twins of mma.sync (flashcourse/cuda/ptx/mma.py)."""

import numpy as np
import pytest

from flashcourse.labs import tensor_core_backward_lab as L
from flashcourse.labs import tensor_core_backward_parts as P
from flashcourse.labs._harness import HINT_COMPILE
from flashcourse.labs.cuda_kernel import HINT_FLOAT64
from flashcourse.labs.tile_sizes import own_sizes_hint
from labtools import (IMPORT_FLOAT32, assert_hint, assert_stubs_not_implemented, cells_of,
                      correct_variants_test, edited, functions_of, hint_leaks_test,
                      idle_part_test, kernel_error_test, lab_fixture, lab_path, loop_over,
                      part_mistakes_tests, parts_picker)

LAB = lab_path("lab10b_tensor_core_backward")
lab = lab_fixture(LAB)

CHECK = {"row_delta": P.check_row_delta, "transposed_scores": P.check_transposed_scores,
         "ds_tile": P.check_ds_tile, "grad_tile": P.check_grad_tile,
         "store_grads": P.check_store_grads}
parts_of = parts_picker(L.PARTS)


def test_solutions_pass(lab):
    for part, check in CHECK.items():
        assert check(lab[part], verbose=False).passed, part
    assert P.check_ds_tile(lab["ds_tile_exp2"], verbose=False).passed
    assert P.check_kernel(parts_of(lab), verbose=False).passed


def test_stubs_report_not_implemented(capsys):
    st = functions_of(LAB, student=True)
    results = [check(st[part]) for part, check in CHECK.items()]
    results += [P.check_kernel(parts_of(st)), P.check_ds_tile(st["ds_tile_exp2"])]
    assert_stubs_not_implemented(results, capsys.readouterr().out)


def test_the_float64_backward_is_what_the_kernel_cases_expect(lab):
    """The kernel's error on every case is far inside its tolerance (the fp16 rounding of P
    and dS), and a dK without its scale is far outside it: the tolerance can fail."""
    from flashcourse import reference
    assert {c[-1] for c in L.KERNEL_CASES} == {L.TILES, L.WIDE}
    for name, seed, tq, tk, d, causal, tiles in L.KERNEL_CASES:
        q, k, v, o, lse, do = L.kernel_inputs(seed, tq, tk, d, causal)
        dk, dv = L.lab_backward(parts_of(lab), q, k, v, o, lse, do, causal=causal, tiles=tiles)
        _, dk_ref, dv_ref = reference.attention_backward(q, k, v, do, causal=causal)
        assert np.abs(dk - dk_ref).max() < L._KERNEL_TOL / 3, name
        assert np.abs(dv - dv_ref).max() < L._KERNEL_TOL / 3, name
        assert np.abs(dk / np.float32(1 / np.sqrt(d)) - dk_ref).max() > 10 * L._KERNEL_TOL


def test_models_without_a_mistake_are_the_dense_products():
    """The lane-by-lane models gathered into tiles are the plain products: S^T = K Q^T,
    dV = P^T dO with the C map (so a mistake replayed in them is one of that kernel)."""
    from flashcourse.cuda.ptx import mma
    from flashcourse.labs.tensor_core_parts import q_fragment  # noqa: F401
    rng = np.random.default_rng(0)
    k, v, q, do = (mma.round_fp16(rng.standard_normal((16, 16))).astype(np.float32)
                   for _ in range(4))
    zeros = np.zeros((32, L.S_ACC), np.float32)
    s, dp = P.scores_model(k, v, q, do, zeros, zeros)
    for frags, want in ((s, k @ q.T), (dp, v @ do.T)):
        tile = np.concatenate([mma.from_fragments(frags[:, 4 * n:4 * n + 4], "c_m16n8")
                               for n in range(L.NS)], axis=1)
        np.testing.assert_allclose(tile, want, rtol=1e-5, atol=1e-5)
    x = rng.random((32, L.S_ACC)).astype(np.float32)
    xt = np.concatenate([mma.from_fragments(x[:, 4 * n:4 * n + 4], "c_m16n8")
                         for n in range(L.NS)], axis=1)                   # X^T (16, 16)
    acc = P.grad_model(x, do, np.ascontiguousarray(do.T), np.zeros((32, L.O_ACC), np.float32))
    got = np.concatenate([mma.from_fragments(acc[:, 4 * n:4 * n + 4], "c_m16n8")
                          for n in range(L.NO)], axis=1)
    np.testing.assert_allclose(got, mma.round_fp16(xt) @ do, rtol=1e-5, atol=1e-5)


def test_models_at_the_wide_tiles_are_the_dense_products():
    """At WIDE (D = 48, BR = 32) too: S^T = K Q^T over KT = 3 k16 steps from the A words
    (a_words), dK += X^T Y over KQ = 2 k16 steps into NO = 6 n8 tiles."""
    from flashcourse.cuda.ptx import mma
    z = L.WIDE.sizes
    rng = np.random.default_rng(1)
    k, v = (mma.round_fp16(rng.standard_normal((16, z["D"]))).astype(np.float32)
            for _ in range(2))
    q, do = (mma.round_fp16(rng.standard_normal((z["BR"], z["D"]))).astype(np.float32)
             for _ in range(2))
    zeros = np.zeros((32, z["S_ACC"]), np.float32)
    s, dp = P.scores_model(k, v, q, do, zeros, zeros, tiles=L.WIDE)
    for frags, want in ((s, k @ q.T), (dp, v @ do.T)):
        tile = np.concatenate([mma.from_fragments(frags[:, 4 * n:4 * n + 4], "c_m16n8")
                               for n in range(z["NS"])], axis=1)
        np.testing.assert_allclose(tile, want, rtol=1e-5, atol=1e-5)
    assert P.a_words(k).shape == (32, z["KA_WORDS"])
    x = rng.random((32, z["S_ACC"])).astype(np.float32)
    xt = np.concatenate([mma.from_fragments(x[:, 4 * n:4 * n + 4], "c_m16n8")
                         for n in range(z["NS"])], axis=1)                # X^T (16, 32)
    acc = P.grad_model(x, do, np.ascontiguousarray(do.T), np.zeros((32, z["O_ACC"]), np.float32),
                       tiles=L.WIDE)
    got = np.concatenate([mma.from_fragments(acc[:, 4 * n:4 * n + 4], "c_m16n8")
                          for n in range(z["NO"])], axis=1)
    np.testing.assert_allclose(got, mma.round_fp16(xt) @ do, rtol=1e-5, atol=1e-5)


#: (part, [(old, new), ...], hint, also through check_kernel)
PART_MISTAKES = {
    "delta-axis": ("row_delta", [("x += o[row, c] * do[row, c]",
                                  "x += o[c, row] * do[c, row]")], P.HINT_DELTA_AXIS, True),
    "delta-product": ("row_delta", [("    x = F0\n    for c in range(d):\n"
                                     "        x += o[row, c] * do[row, c]\n    return x\n",
                                     "    x = F0\n    y = F0\n    for c in range(d):\n"
                                     "        x += o[row, c]\n        y += do[row, c]\n"
                                     "    return x * y\n")], P.HINT_DELTA_PRODUCT, False),
    "delta-float64": ("row_delta", [("x = F0", "x = 0.0")], HINT_FLOAT64, False),
    "s-no-reset": ("transposed_scores", [("        s[x] = F0\n        dp[x] = F0\n",
                                          "        pass\n")], P.HINT_S_RESET, True),
    # only n8 tile 0 reset: no replay matches; the generic hint names the reset (round 10 b)
    "s-reset-partial": ("transposed_scores", [("    for x in range(4 * NS):\n",
                                               "    for x in range(4):\n")], P.HINT_SCORES,
                        False),
    "s-offsets": ("transposed_scores", [("load_b(qs, 8 * n, 16 * kk, w[0], b)",
                                         "load_b(qs, 16 * kk, 8 * n, w[0], b)"),
                                        ("load_b(dos, 8 * n, 16 * kk, w[0], b)",
                                         "load_b(dos, 16 * kk, 8 * n, w[0], b)")],
                  P.HINT_S_OFFSETS, False),
    "s-ci": ("transposed_scores", [("mma(ka, 4 * kk, b, s, 4 * n, scr, w)",
                                    "mma(ka, 4 * kk, b, s, n, scr, w)"),
                                   ("mma(va, 4 * kk, b, dp, 4 * n, scr, w)",
                                    "mma(va, 4 * kk, b, dp, n, scr, w)")], P.HINT_CI, True),
    "s-pairs": ("transposed_scores", [("mma(ka, 4 * kk, b, s,", "mma(va, 4 * kk, b, s,"),
                                      ("mma(va, 4 * kk, b, dp,", "mma(ka, 4 * kk, b, dp,")],
                P.HINT_S_PAIRS, True),
    "ds-base2": ("ds_tile", [("p = math.exp(s[4 * n + i] * scale - lt[col])",
                              "p = math.exp2(s[4 * n + i] * scale * LOG2E_F - lt[col])")],
                 P.HINT_DS_BASE2, True),
    "ds-no-scale": ("ds_tile", [("math.exp(s[4 * n + i] * scale - lt[col])",
                                 "math.exp(s[4 * n + i] - lt[col])")], P.HINT_DS_SCALE, True),
    # lse scaled with S: the generic HINT_DS (review round 15, m9)
    "ds-lse-scaled": ("ds_tile", [("p = math.exp(s[4 * n + i] * scale - lt[col])",
                                   "p = math.exp((s[4 * n + i] - lt[col]) * scale)")],
                      P.HINT_DS_LSE_SCALED, False),
    "ds-row": ("ds_tile", [("            col = 8 * n + 2 * t + (i % 2)\n",
                            "            col = lane // 4 + 8 * (i // 2)\n")], P.HINT_DS_ROW,
               True),
    "ds-no-p": ("ds_tile", [("dp[4 * n + i] = p * (dp[4 * n + i] - dl[col])",
                             "dp[4 * n + i] = dp[4 * n + i] - dl[col]")], P.HINT_DS_NO_P, True),
    "ds-sign": ("ds_tile", [("p * (dp[4 * n + i] - dl[col])", "p * (dl[col] - dp[4 * n + i])")],
                P.HINT_DS_SIGN, True),
    "ds-not-stored": ("ds_tile", [("            s[4 * n + i] = p\n", "")], P.HINT_DS_STORE, True),
    "ds-scaled": ("ds_tile", [("p * (dp[4 * n + i] - dl[col])",
                               "p * (dp[4 * n + i] - dl[col]) * scale")], P.HINT_DS_SCALED,
                  True),
    "grad-transpose": ("grad_tile", [("load_b(yt, 8 * n, 16 * kp, w[0], b)",
                                      "load_b(ys, 8 * n, 16 * kp, w[0], b)")], P.HINT_GRAD_T,
                       True),
    "grad-order": ("grad_tile", [("        pa[1] = pack(x[j0 + 2], x[j0 + 3])\n"
                                  "        pa[2] = pack(x[j0 + 4], x[j0 + 5])",
                                  "        pa[1] = pack(x[j0 + 4], x[j0 + 5])\n"
                                  "        pa[2] = pack(x[j0 + 2], x[j0 + 3])")],
                   P.HINT_GRAD_ORDER, True),
    "grad-pairs": ("grad_tile", [(f"pack(x[j0 + {2 * i}], x[j0 + {2 * i + 1}])".replace(
        "j0 + 0", "j0"), f"pack(x[j0 + {2 * i + 1}], x[j0 + {2 * i}])".replace("j0 + 0", "j0"))
        for i in range(4)], P.HINT_GRAD_ORDER, False),
    "grad-offsets": ("grad_tile", [("load_b(yt, 8 * n, 16 * kp, w[0], b)",
                                    "load_b(yt, 16 * kp, 8 * n, w[0], b)")],
                     P.HINT_GRAD_OFFSETS, False),
    "grad-ci": ("grad_tile", [("mma(pa, 0, b, acc, 4 * n, scr, w)",
                               "mma(pa, 0, b, acc, n, scr, w)")], P.HINT_CI, True),
    "grad-overwrite": ("grad_tile", [("    for kp in range(KQ):\n",
                                      "    for j in range(4 * NO):\n        acc[j] = F0\n"
                                      "    for kp in range(KQ):\n")], P.HINT_GRAD_ADD, True),
    "store-no-scale": ("store_grads", [("dk[key, col] = dka[4 * n + i] * scale",
                                        "dk[key, col] = dka[4 * n + i]")], P.HINT_STORE_SCALE,
                       True),
    "store-scale-dv": ("store_grads", [("dv[key, col] = dva[4 * n + i]",
                                        "dv[key, col] = dva[4 * n + i] * scale")],
                       P.HINT_STORE_SCALE_DV, True),
    # the scale on dV instead of dK: the generic hint said "lands in the wrong place"
    "store-scale-moved": ("store_grads", [
        ("                dk[key, col] = dka[4 * n + i] * scale\n"
         "                dv[key, col] = dva[4 * n + i]",
         "                dk[key, col] = dka[4 * n + i]\n"
         "                dv[key, col] = dva[4 * n + i] * scale")], P.HINT_STORE_SCALE_MOVED, True),
    "store-rows": ("store_grads", [("key = k0 + g + 8 * (i // 2)", "key = k0 + g")],
                   P.HINT_STORE_ROWS, True),
    "store-tile": ("store_grads", [("col = 8 * n + 2 * t + (i % 2)", "col = 2 * t + (i % 2)")],
                   P.HINT_STORE_TILE, True),
    "store-swap": ("store_grads", [("                dk[key, col] = dka[4 * n + i] * scale\n"
                                    "                dv[key, col] = dva[4 * n + i]",
                                    "                dk[key, col] = dva[4 * n + i] * scale\n"
                                    "                dv[key, col] = dka[4 * n + i]")],
                   P.HINT_STORE_SWAP, False),
    "s-no-reset-dp": ("transposed_scores", [("        s[x] = F0\n        dp[x] = F0\n",
                                             "        s[x] = F0\n")], P.HINT_S_RESET_ONE,
                      False),
    "s-no-reset-s": ("transposed_scores", [("        s[x] = F0\n        dp[x] = F0\n",
                                            "        dp[x] = F0\n")], P.HINT_S_RESET_ONE,
                     False),
    # exp of scale S alone over exp of lse: right at the small case's scores, inf / inf (GPU)
    # or OverflowError (simulator) near 800 (review round 11 b, M2; passed before)
    "ds-overflow": ("ds_tile", [("p = math.exp(s[4 * n + i] * scale - lt[col])",
                                 "p = math.exp(s[4 * n + i] * scale) / math.exp(lt[col])")],
                    P.HINT_DS_OVERFLOW, False),
    "ds-overflow-product": ("ds_tile", [("p = math.exp(s[4 * n + i] * scale - lt[col])",
                                         "p = math.exp(s[4 * n + i] * scale) "
                                         "* math.exp(-lt[col])")],
                            P.HINT_DS_OVERFLOW, False),
    # a loop over the wrong size of another pair (KQ or KT = 1 for NS or NO = 2): the first n8
    # tile only, at the lab's tiles; the generic hint said nothing of the loop (round 17 b)
    "ds-kq-for-ns": ("ds_tile", [loop_over("n", "NS", "KQ")], P.HINT_DS_ONE_TILE, False),
    "grad-kt-for-no": ("grad_tile", [loop_over("n", "NO", "KT")], P.HINT_GRAD_ONE_TILE, False),
    "store-kt-for-no": ("store_grads", [loop_over("n", "NO", "KT")], P.HINT_STORE_ONE_TILE, False),
    "ds-base2-raw": ("ds_tile", [("p = math.exp(s[4 * n + i] * scale - lt[col])",
                                  "p = math.exp2(s[4 * n + i] * scale - lt[col])")],
                     P.HINT_DS_BASE2_RAW, False),
}

#: right at D = BR = 16 (kk = kp = 0, NS = NO = 2), so caught only at WIDE (D = 48, BR = 32;
#: review round 15, found not fixed): the size or offset each reads, and fixed loop counts
WIDE_MISTAKES = {
    "s-kq-for-kt": ("transposed_scores", [loop_over("kk", "KT", "KQ")], P.HINT_S_KQ, True),
    "s-a-words-2kk": ("transposed_scores", [("mma(ka, 4 * kk,", "mma(ka, 2 * kk,"),
                                            ("mma(va, 4 * kk,", "mma(va, 2 * kk,")],
                      P.HINT_S_A_WORDS, False),
    "grad-j0-4kp": ("grad_tile", [("j0 = 8 * kp", "j0 = 4 * kp")], P.HINT_GRAD_J0, True),
    "grad-k0-8kp": ("grad_tile", [("load_b(yt, 8 * n, 16 * kp, w[0], b)",
                                   "load_b(yt, 8 * n, 8 * kp, w[0], b)")], P.HINT_GRAD_KP,
                    False),
    "grad-ns-for-no": ("grad_tile", [loop_over("n", "NO", "NS")], P.HINT_GRAD_NO, False),
    "store-ns-for-no": ("store_grads", [loop_over("n", "NO", "NS")], P.HINT_STORE_NO, True),
    # fixed counts, right only at D = BR = 16
    "s-literal-kt": ("transposed_scores", [loop_over("kk", "KT", 1)], P.HINT_LITERAL, False),
    "ds-literal-ns": ("ds_tile", [loop_over("n", "NS", 2)], P.HINT_LITERAL, False),
    "grad-literal-kq": ("grad_tile", [loop_over("kp", "KQ", 1)], P.HINT_LITERAL, False),
    "grad-literal-no": ("grad_tile", [loop_over("n", "NO", 2)], P.HINT_LITERAL, False),
    "store-literal-no": ("store_grads", [loop_over("n", "NO", 2)], P.HINT_LITERAL, False),
    # a loop over NO where NS is right runs past s at WIDE (NO = 6 > NS = 4): the wide hint
    "ds-no-for-ns": ("ds_tile", [loop_over("n", "NS", "NO")], P.HINT_WIDE_DS, False),
    # review round 17 b: past an array's end at WIDE (an IndexError on the simulator) or an
    # offset of step 1, each gets its part's own wide hint; the general one told grad_tile
    # "word 4 kk of an A fragment", which mma(pa, 4 * kp, ...) follows (pa is one step's)
    "s-no-for-ns": ("transposed_scores", [loop_over("n", "NS", "NO")], P.HINT_WIDE_SCORES, False),
    "s-k0-8kk": ("transposed_scores", [("load_b(qs, 8 * n, 16 * kk, w[0], b)",
                                        "load_b(qs, 8 * n, 8 * kk, w[0], b)"),
                                       ("load_b(dos, 8 * n, 16 * kk, w[0], b)",
                                        "load_b(dos, 8 * n, 8 * kk, w[0], b)")],
                 P.HINT_WIDE_SCORES, False),
    "grad-pa-4kp": ("grad_tile", [("mma(pa, 0, b, acc, 4 * n, scr, w)",
                                   "mma(pa, 4 * kp, b, acc, 4 * n, scr, w)")],
                    P.HINT_WIDE_GRAD, False),
    "grad-kt-for-kq": ("grad_tile", [loop_over("kp", "KQ", "KT")], P.HINT_WIDE_GRAD, False),
}


@pytest.mark.parametrize("key", sorted(WIDE_MISTAKES))
def test_wide_mistakes_pass_the_lab_tiles_and_get_their_hint_at_the_wide_ones(key):
    """Each passes every case at D = BR = 16 and fails the WIDE one with its hint."""
    part, edits, hint, _ = WIDE_MISTAKES[key]
    result = assert_hint(CHECK[part], edited(LAB, part, edits), hint[0])
    assert "wider tiles" in result.case and str(L.WIDE) in result.case

_BASE2_IMPORT = ("from numba import cuda\n",
                 "from numba import cuda\nfrom flashcourse.constants import LOG2E_F\n")


#: one mistake of each part through the whole kernel: it names the part check that fails
KERNEL_KEYS = ["delta-axis", "s-pairs", "ds-base2", "grad-transpose", "store-no-scale"]
KERNEL_HINT = {"row_delta": P.HINT_KERNEL_DELTA, "transposed_scores": P.HINT_KERNEL_SCORES,
               "ds_tile": P.HINT_KERNEL_DS, "grad_tile": P.HINT_KERNEL_GRAD,
               "store_grads": P.HINT_KERNEL_STORE}
test_part_mistakes_get_their_hint, test_kernel_names_the_failing_part = part_mistakes_tests(
    LAB, P, parts_of, CHECK, PART_MISTAKES, KERNEL_KEYS, kernel_hint=KERNEL_HINT,
    also={"ds-base2": [_BASE2_IMPORT]})


def test_the_kernel_check_catches_a_slip_of_the_lab_tiles(lab):
    """Right at D = BR = 16, so only the kernel's WIDE case shows it, and the kernel check
    names the part check that fails (which then names the slip)."""
    part, edits, _, _ = WIDE_MISTAKES["grad-j0-4kp"]
    result = assert_hint(P.check_kernel, parts_of(lab, **{part: edited(LAB, part, edits)}),
                         P.HINT_KERNEL_GRAD[0])
    assert "wider tiles" in result.case


# a grad_tile that returns at once when yt is not the part check's 32 (96 at WIDE) rows
test_kernel_says_when_every_part_check_passes = idle_part_test(
    LAB, P, parts_of, "grad_tile", "    for kp in range(KQ):\n",
    "yt.shape[0] != 32 and yt.shape[0] != 96")
test_kernel_that_raises_points_to_the_part_checks = kernel_error_test(
    LAB, P, parts_of, "store_grads", [("if key < tk and col < d:", "if col < d:")],
    "on a GPU a write past dk returns no error")


COMPILE_ERRORS = {
    # an array size computed inside the part: the simulator runs it, a GPU refuses it
    "array-size": ("grad_tile", [("    for kp in range(KQ):\n",
                                  "    tmp = cuda.local.array(4 * NO, float32)\n"
                                  "    for kp in range(KQ):\n")]),
    # a typing error: Numba cannot add a string to a float
    "typing": ("ds_tile", [("p = math.exp(s[4 * n + i] * scale - lt[col])",
                            "p = math.exp(s[4 * n + i] * scale - lt[col]) + 'x'")]),
}


@pytest.mark.parametrize("key", sorted(COMPILE_ERRORS))
def test_a_part_that_does_not_compile_says_so(lab, key):
    from flashcourse.gpu import using_simulator
    part, edits = COMPILE_ERRORS[key]
    ns = functions_of(LAB, replace=[IMPORT_FLOAT32] + edits)
    with np.errstate(all="ignore"):
        part_result = CHECK[part](ns[part], verbose=False)
        kernel_result = P.check_kernel(parts_of(lab, **{part: ns[part]}), verbose=False)
    assert not part_result.passed and not kernel_result.passed
    if key == "array-size" or not using_simulator():
        assert part_result.hint == HINT_COMPILE and kernel_result.hint == HINT_COMPILE
    else:     # the simulator compiles nothing: it runs Python, which raises at that line
        assert "TypeError" in part_result.detail and "TypeError" in kernel_result.detail


#: unusual but correct: other loop orders, one helper reused, float32(...) constants, exp2
CORRECT_VARIANTS = {
    "row_delta": [("    x = F0\n    for c in range(d):\n        x += o[row, c] * do[row, c]\n",
                   "    x = float32(0.0)\n    c = 0\n    while c < d:\n"
                   "        x = x + do[row, c] * o[row, c]\n        c += 1\n")],
    "transposed_scores": [
        ("    for n in range(NS):\n        for kk in range(KT):\n",
         "    for kk in range(KT):\n        for n in range(NS):\n"),
    ],
    "ds_tile": [
        ("            dp[4 * n + i] = p * (dp[4 * n + i] - dl[col])\n"
         "            s[4 * n + i] = p\n",
         "            s[4 * n + i] = p\n"
         "            dp[4 * n + i] = s[4 * n + i] * dp[4 * n + i] - s[4 * n + i] * dl[col]\n"),
    ],
    "grad_tile": [
        ("        pa[0] = pack(x[j0], x[j0 + 1])\n        pa[1] = pack(x[j0 + 2], x[j0 + 3])\n"
         "        pa[2] = pack(x[j0 + 4], x[j0 + 5])\n        pa[3] = pack(x[j0 + 6], x[j0 + 7])\n",
         "        for q in range(4):\n"
         "            pa[q] = pack(x[j0 + 2 * q], x[j0 + 2 * q + 1])\n"),
    ],
    "store_grads": [
        ("    for n in range(NO):\n        for i in range(4):\n",
         "    for i in range(4):\n        for n in range(NO):\n"),
        ("            if key < tk and col < d:\n",
         "            if key >= tk or col >= d:\n                continue\n            if True:\n"),
    ],
}


#: sizes written from D and BR (right at every tile configuration): they follow WIDE too
CORRECT_VARIANTS["sizes from D and BR"] = [
    loop_over("kk", "KT", "D // 16"),
    ("    for x in range(4 * NS):\n", "    for x in range(BR // 2):\n"),
    loop_over("kp", "KQ", "BR // 16"),
    loop_over("n", "NO", "D // 8")]
test_unusual_correct_variants_pass = correct_variants_test(LAB, P, parts_of, CHECK,
                                                           CORRECT_VARIANTS)


def test_at_tiles_replaces_the_sizes_and_keeps_the_rest():
    """at_tiles: the function itself at TILES; at WIDE a new one reading WIDE's sizes, and
    the skeleton's device functions it calls (mask_transposed) rebound too; the library's
    (mma, load_b) and a learner's own global of another value left as they are."""
    from flashcourse.labs.kernel_source import py_func
    from flashcourse.labs.tensor_core_lab import mma

    glob = {"KT": 1, "NS": 2, "NO": 2, "KQ": 1, "D": 16, "BR": 5, "mma": mma}
    exec("def fn():\n    return KT + NS + NO + KQ + D + BR + (1 if mma is not None else 0)\n",
         glob)
    fn = glob["fn"]
    assert L.at_tiles(fn, L.TILES) is fn and fn() == 1 + 2 + 2 + 1 + 16 + 5 + 1
    wide = L.at_tiles(fn, L.WIDE)
    assert wide is not fn and wide() == 3 + 4 + 6 + 2 + 48 + 5 + 1    # BR = 5: not the lab's
    assert wide.__globals__["mma"] is mma and L.at_tiles(fn, L.WIDE) is wide
    inner = py_func(L.at_tiles(L.mask_transposed, L.WIDE))
    assert inner.__globals__["NS"] == 4 and py_func(L.mask_transposed).__globals__["NS"] == 2
    assert L.at_tiles(L.load_b, L.WIDE) is L.load_b
    assert L.at_tiles(mma, L.WIDE) is mma


def test_log2e_folded_into_both_terms_is_a_correct_ds_tile():
    """exp2(scale s log2 e - lse log2 e), as FA2's kernels do: right, within the large-score
    case's looser tolerance."""
    fn = edited(LAB, "ds_tile", [("p = math.exp(s[4 * n + i] * scale - lt[col])",
                                  "p = math.exp2(s[4 * n + i] * scale * LOG2E_F "
                                  "- lt[col] * LOG2E_F)")], also=[_BASE2_IMPORT])
    assert P.check_ds_tile(fn, verbose=False).passed


def test_a_non_finite_large_score_result_names_the_overflow():
    """On a GPU the overflow is inf / inf = NaN, not the simulator's OverflowError."""
    assert P._overflowed((np.zeros(2), np.array([np.nan])), None)
    assert not P._overflowed((np.zeros(2), np.ones(3)), None)


def test_exp2_with_lse_in_base_2_is_a_correct_ds_tile(lab):
    """The going-further part is ds_tile by exp2: a correct variant, where the same call
    with lse left in base e is the base-2 mistake."""
    assert P.check_kernel(parts_of(lab, ds_tile=lab["ds_tile_exp2"]), verbose=False).passed


def test_student_lab_blanks_every_part():
    student = "\n".join(c for c in cells_of(LAB, student=True))
    for part in L.PARTS + ("ds_tile_exp2",):
        body = student.split(f"def {part}(")[1].split("\n\n\n")[0]
        assert 'raise NotImplementedError("FILL ME IN")' in body, part
        assert "mma(" not in body and "math.exp" not in body and "pack(" not in body, part


def test_timing_is_gpu_only(lab):
    from flashcourse.gpu import using_simulator
    if using_simulator():
        assert L.time_against_course(parts_of(lab)) is None


def test_array_sizes_are_names_fixed_before_compiling():
    """Every cuda.local.array / cuda.shared.array of the skeleton and of the solution has a
    size the GPU compiler accepts (a number or a name fixed outside the kernel): the
    simulator would run the others."""
    import ast
    import inspect
    from flashcourse.labs.kernel_source import unfixed_array_sizes
    src = inspect.getsource(L) + inspect.getsource(P)
    assert src.count(".array(") >= 20 and unfixed_array_sizes(ast.parse(src)) == []
    assert all(unfixed_array_sizes(ast.parse(c)) == [] for c in cells_of(LAB))
    planted = "def k():\n    n = 4\n    a = cuda.local.array(4 * n, float32)\n"
    assert unfixed_array_sizes(ast.parse(planted)) == ["cuda.local.array(4 * n, ...)"]


test_no_hint_contains_a_solution_line = hint_leaks_test(P.ALL_HINTS, LAB)


def test_the_generic_scores_hint_names_the_reset():
    """Review round 10 b, m1: a transposed_scores that resets only part of s and dp gets the
    generic HINT_SCORES, which must name the reset among the steps."""
    assert "reset to F0" in P.HINT_SCORES[0]


def test_a_size_of_the_learners_own_is_named_at_the_wide_tiles():
    """NK = D // 16 computed in the learner's cell is 1 when the cell runs and stays 1 when
    the check rebuilds the part at WIDE: the hint names NK and says to use the lab's KT."""
    fn = edited(LAB, "transposed_scores", [loop_over("kk", "KT", "NK")],
                also=[("@cuda.jit(device=True)\ndef transposed_scores(",
                       "NK = D // 16\n\n\n@cuda.jit(device=True)\ndef transposed_scores(")])
    result = assert_hint(CHECK["transposed_scores"], fn,
                         own_sizes_hint([("NK", 1)], L.WIDE)[0])
    assert "wider tiles" in result.case
