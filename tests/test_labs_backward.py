"""Lab 09 (backward): solutions pass, stubs report "not implemented", typical mistakes get their
own hint, and no hint contains a line of the solution."""

import numpy as np

import pytest

from flashcourse import reference
from flashcourse.labs import _harness as H
from flashcourse.labs import backward as L
from labtools import assert_hint, hint_leaks_test, lab_path, lab_tests, mistakes_test, mutate

LAB = lab_path("lab09_backward")


CHECKS = ((L.check_flash_backward, "flash_backward"),
          (L.check_flash_backward_dq, "flash_backward_dq"))
lab, test_solutions_pass, test_stubs_report_not_implemented = lab_tests(LAB, CHECKS)


def test_solution_matches_the_library_backward(lab):
    """Against flashcourse.tiled.backward (another implementation), rtol 1e-10."""
    from flashcourse import reference, tiled
    rng = np.random.default_rng(3)
    q, k, v, do = (rng.standard_normal(s) for s in ((29, 5), (41, 5), (41, 5), (29, 5)))
    o, lse = reference.attention(q, k, v, causal=True, scale=0.5)
    got = lab["flash_backward"](q, k, v, o, lse, do, True, 0.5, 8, 6)
    want = tiled.backward(q, k, v, o, lse, do, block_q=8, block_k=6, causal=True, scale=0.5)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


#: solution lines that several of the mistakes below replace
_P = "p = np.exp(s - lse_i[:, None])"
_DS = "ds = p * (dp - delta[q0:q1, None])"
_DQ = "dq[q0:q1] += scale * (ds @ k_j)"
_DV = "dv_j += p.T @ do_i"
_OFFSET = "offset = t_k - t_q "
_Q_START = "q_start = max(0, k0 - offset) // block_q * block_q"
_DELTA = "delta = (do * o).sum(axis=1)"
_RETURN = "    return dq, dk, dv"
_MASK = "s = np.where(cols <= rows + offset, s, -np.inf)"
_DK_DV_STORE = "dk[k0:k1], dv[k0:k1] = dk_j, dv_j"
_DELTA_I = "delta_i = (do_i * o[q0:q1]).sum(axis=1)"
_K_END = "k_end = max(0, min(t_k, q1 + offset)) if causal"
_DS_DQ_ONLY = "(p * (do_i @ v[k0:k1].T - delta_i[:, None]))"
_DQ_DQ_ONLY = "dq[q0:q1] += scale * ("

#: mistakes of the lines flash_backward and flash_backward_dq share, played in each
SHARED_MISTAKES = [
    ("lse_i = np.where(np.isneginf(lse[q0:q1]), np.inf, lse[q0:q1])", "lse_i = lse[q0:q1]",
     L.HINT_NEG_INF),
    # review round 5 ac, M3: inf / inf in the large-score case, where no row is empty
    (_P, "p = np.exp(s) / np.exp(lse_i[:, None])", L.HINT_P_OVERFLOW),
]
#: function: [(solution text, the mistake that replaces it, the hint it must get), ...]
MISTAKES = {"flash_backward": [
    (_DS, "ds = p * dp", L.HINT_FORGOT_D),
    ("dp = do_i @ v_j.T", "dp = o[q0:q1] @ v_j.T", L.HINT_DP_FROM_O),
    (_DQ, "dq[q0:q1] += ds @ k_j", L.HINT_SCALE_CHAIN),
    (_DV, "dv_j += p.T @ o[q0:q1]", L.HINT_DV),
    (_DQ, "dq[q0:q1] = scale * (ds @ k_j)", L.HINT_DQ_OVERWRITE),
    (_OFFSET, "offset = 0 ", L.HINT_TOP_LEFT),
    (_Q_START, "q_start = 0", L.HINT_NO_SKIP),
    (_Q_START,
     "q_start = max(0, k0 - offset + block_q) // block_q * block_q", L.HINT_SKIP_TOO_MUCH),
    (_DELTA, "delta = (do * do).sum(axis=1)", L.HINT_DELTA_DODO),
    ("k1 = min(k0 + block_k, t_k)", "k1 = min(k0 + block_k, t_k - 1)", L.HINT_RAGGED_OFF_BY_ONE),
    ("dq, dk, dv = np.zeros((t_q, d)),", "dq, dk, dv = np.zeros((t_q, d), np.float32),",
     (H.HINT_PRECISION,)),
    (_RETURN, "    return dq, dk.T, dv", (H.HINT_SHAPE,)),
    (_RETURN, "    return dk, dv, dq", (H.HINT_ORDER,)),   # review round 20 a
    (_P, "p = np.exp2(s - lse_i[:, None])", L.HINT_P_BASE2),
    (_P, "p = np.exp2(s * np.log2(np.e) - lse_i[:, None])", L.HINT_P_BASE2),
    (_P, "p = np.exp(s - lse_i[:, None] / np.log(2))", L.HINT_P_BASE2),
    (_MASK, "s = np.where(cols < rows + offset, s, -np.inf)", L.HINT_DIAGONAL),
    (_DK_DV_STORE, "dk[k0:k1], dv[k0:k1] = dv_j, dk_j", L.HINT_SWAP_DKDV),
    # round 18 (mutants): step 5 left out (dk, dv all zeros) got the generic HINT_BACKWARD
    (_DK_DV_STORE, "pass", L.HINT_NO_STORE),
    # round 18 (mutants): the stand-in +inf written into the caller's lse passed
    ("lse_i = np.where(np.isneginf(lse[q0:q1]), np.inf, lse[q0:q1])   # empty rows: P = 0",
     "lse[q0:q1][np.isneginf(lse[q0:q1])] = np.inf\n            lse_i = lse[q0:q1]",
     L.HINT_INPUTS_CHANGED),
    ("s = scale * (q_i @ k_j.T)", "s = q_i @ k_j.T", L.HINT_P_NO_SCALE),
    (_Q_START, "q_start = k0 // block_q * block_q", L.HINT_SKIP_NO_OFFSET),
    # review round 14: D from O * O or from the tile's own P * dP; the offset's sign
    (_DELTA, "delta = (o * o).sum(axis=1)", L.HINT_DELTA_O_O),
    (_DS, "ds = p * (dp - (p * dp).sum(axis=1, keepdims=True))", L.HINT_DELTA_TILE),
    (_OFFSET, "offset = t_q - t_k ", L.HINT_OFFSET_SIGN),
    (_MASK, "s = np.where(cols <= rows - offset, s, -np.inf)", L.HINT_OFFSET_SIGN),
    # review round 16 a: only one of dK_j, dV_j overwritten, and D subtracted outside the
    # product, got the generic HINT_BACKWARD
    ("dk_j += scale * (ds.T @ q_i)", "dk_j = scale * (ds.T @ q_i)", L.HINT_DKDV_OVERWRITE),
    (_DV, "dv_j = p.T @ do_i", L.HINT_DKDV_OVERWRITE),
    (_DS, "ds = p * dp - delta[q0:q1, None]", L.HINT_DS_ORDER),
    # review round 16 a (m): a block end not clipped crashes on a broadcast; both got
    # HINT_BACKWARD ("your gradients disagree")
    ("k1 = min(k0 + block_k, t_k)\n        k_j", "k1 = k0 + block_k\n        k_j",
     L.HINT_RAGGED_UNCLIPPED),
    ("q1 = min(q0 + block_q, t_q)\n            q_i, do_i",
     "q1 = q0 + block_q\n            q_i, do_i", L.HINT_RAGGED_Q_UNCLIPPED),
    *SHARED_MISTAKES,
    # review round 17 a (M): D summed over axis 0 crashed with HINT_RAGGED_Q_UNCLIPPED (the
    # ragged case has d = Tq % Br = 5)
    (_DELTA, "delta = (do * o).sum(axis=0)", L.HINT_D_AXIS),
], "flash_backward_dq": [
    # review round 17 a (M): the dQ pass's skipping was not checked (it passed); D over axis 0
    ("k_end = max(0, min(t_k, q1 + offset)) if causal else t_k", "k_end = t_k",
     L.HINT_DQ_NO_SKIP),
    (_DELTA_I, "delta_i = (do_i * o[q0:q1]).sum(axis=0)", L.HINT_D_AXIS),
    (_DELTA_I, "delta_i = (o[q0:q1] * o[q0:q1]).sum(axis=1)", L.HINT_DELTA_O_O),
    (_K_END, "k_end = max(0, min(t_k, q1)) if causal", L.HINT_DQ_K_END_NO_OFFSET),
    (_K_END, "k_end = max(0, min(t_k, q1 + offset - 1)) if causal", L.HINT_DQ_K_END_SHORT),
    (_K_END, "k_end = max(0, min(t_k, q0 + offset)) if causal", L.HINT_DQ_SKIP_TOO_MUCH),
    (_DS_DQ_ONLY, "(p * (do_i @ v[k0:k1].T))", L.HINT_FORGOT_D),
    (_DQ_DQ_ONLY, "dq[q0:q1] += (", L.HINT_SCALE_CHAIN),
    (_DQ_DQ_ONLY, "dq[q0:q1] = scale * (", L.HINT_DQ_OVERWRITE),
    (_DS_DQ_ONLY, "(p * (do_i @ v[k0:k1].T) - delta_i[:, None])", L.HINT_DS_ORDER),
    ("k1 = min(k0 + block_k, t_k)\n            s =", "k1 = k0 + block_k\n            s =",
     L.HINT_RAGGED_UNCLIPPED),
    ("q1 = min(q0 + block_q, t_q)\n        q_i", "q1 = q0 + block_q\n        q_i",
     L.HINT_RAGGED_Q_UNCLIPPED),
    *SHARED_MISTAKES,
]}
test_mistakes_get_their_hint = mistakes_test(LAB, CHECKS, MISTAKES)
test_no_hint_contains_a_solution_line = hint_leaks_test(L.ALL_HINTS, LAB)


def test_tile_softmax_is_named():
    def tile_softmax(q, k, v, o, lse, do, causal, scale, block_q, block_k):
        return L.replay(q, k, v, o, lse, do, causal, scale, block_q, block_k, "tile_softmax")
    result = L.check_flash_backward(tile_softmax, verbose=False)
    assert result.hint == L.HINT_TILE_SOFTMAX[0]



@pytest.mark.parametrize("mistake,hint", [("k_ragged_drop", L.HINT_RAGGED_DROP),
                                          ("q_ragged_drop", L.HINT_RAGGED_Q)])
def test_ragged_blocks_dropped_are_named(mistake, hint):
    def wrong(*args):
        return L.replay(*args, mistake)
    assert L.check_flash_backward(wrong, verbose=False).hint == hint[0]


def test_calling_the_dense_backward_fails_on_what_it_holds():
    def dense(q, k, v, o, lse, do, causal, scale, block_q, block_k):
        return reference.attention_backward(q, k, v, do, causal=causal, scale=scale)
    result = L.check_flash_backward(dense, verbose=False)
    assert not result.passed and result.hint == L.HINT_HELD[0]
    assert "largest temporary" in result.case


@pytest.mark.parametrize("convert", [lambda x: np.asarray(x), lambda x: x.astype(np.float64),
                                     lambda x: np.array(x, copy=True)],
                         ids=["asarray", "astype", "array"])
def test_a_correct_backward_that_converts_its_inputs_passes(lab, convert):
    fn = lab["flash_backward"]
    result = L.check_flash_backward(
        lambda *a: fn(*(convert(x) for x in a[:6]), *a[6:]), verbose=False)
    assert result.passed, (result.case, result.detail)


def test_no_skipping_is_caught_after_converting_the_inputs():
    fn = mutate(LAB, "flash_backward", "q_start = max(0, k0 - offset) // block_q * block_q",
                "q_start = 0")
    result = L.check_flash_backward(lambda *a: fn(*(np.asarray(x) for x in a[:6]), *a[6:]),
                                    verbose=False)
    assert result.hint == L.HINT_NO_SKIP[0] and "NaN" in result.case


def test_gradients_are_named_dq_dk_dv():
    fn = mutate(LAB, "flash_backward", "dv_j += p.T @ do_i", "dv_j += p.T @ o[q0:q1]")
    assert L.check_flash_backward(fn, verbose=False).detail.startswith("dv: ")


ZEROS = "dq, dk, dv = np.zeros((t_q, d)), np.zeros((t_k, d)), np.zeros((t_k, d))"
#: correct ways to allocate and accumulate the gradients that derive arrays from the
#: watched input q (issue 49: the watched subclass leaked into zeros_like and counted
#: writes to dq as loads of q)
ALLOCATIONS = {
    "zeros_like": [(ZEROS, "dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)")],
    "empty_like": [(ZEROS, "dq, dk, dv = np.empty_like(q), np.empty_like(k), np.empty_like(v)\n"
                           "    dq[:], dk[:], dv[:] = 0.0, 0.0, 0.0")],
    "full_like": [(ZEROS, "dq, dk, dv = np.full_like(q, 0.0), np.full_like(k, 0), 0 * v")],
    "ones_like": [(ZEROS, "dq, dk, dv = np.ones_like(q) - 1, np.ones_like(k) * 0, "
                          "np.zeros_like(v)")],
    "copy": [(ZEROS, "dq, dk, dv = q.copy(), k.copy(), v.copy()\n"
                     "    dq[:] = 0; dk[:] = 0; dv[:] = 0")],
    "add.at": [(ZEROS, "dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)"),
               (_DQ, "np.add.at(dq, np.arange(q0, q1), scale * (ds @ k_j))")],
    "out=": [(ZEROS, "dq, dk, dv = q * 0, np.zeros_like(k), np.zeros_like(v)"),
             (_DQ, "np.add(dq[q0:q1], scale * (ds @ k_j), out=dq[q0:q1])")],
}


@pytest.mark.parametrize("edits", list(ALLOCATIONS.values()), ids=list(ALLOCATIONS))
def test_gradients_allocated_from_the_inputs_pass(edits):
    from labtools import functions_of
    fn = functions_of(LAB, replace=edits)["flash_backward"]
    result = L.check_flash_backward(fn, verbose=False)
    assert result.passed, (result.case, result.detail)


def test_a_correct_backward_that_prints_passes():
    """Debug prints (lists, text) are not what the algorithm holds (issue 50)."""
    anchor = "    offset = t_k - t_q "
    fn = mutate(LAB, "flash_backward", anchor,
                "    print(k.tolist(), f'{q}', repr(q))\n    print(do)\n" + anchor)
    result = L.check_flash_backward(fn, verbose=False)
    assert result.passed, (result.case, result.detail)


def test_a_query_loop_started_at_the_first_row_that_sees_the_block_passes():
    """Review round 14, M3: q_start = max(0, k0 - offset), not floored to a block, loads
    only rows that see the key block (fewer than whole blocks) and gives the right
    gradients: it passes (it was told it skips query blocks that see the key block).
    Rounding q_start up still skips rows that do, and is still named."""
    fn = mutate(LAB, "flash_backward", "q_start = max(0, k0 - offset) // block_q * block_q",
                "q_start = max(0, k0 - offset)")
    assert L.check_flash_backward(fn, verbose=False).passed
    fn = mutate(LAB, "flash_backward", "q_start = max(0, k0 - offset) // block_q * block_q",
                "q_start = -(-max(0, k0 - offset) // block_q) * block_q")
    assert L.check_flash_backward(fn, verbose=False).hint == L.HINT_SKIP_TOO_MUCH[0]


def test_the_dq_pass_generic_hint_speaks_of_dq():
    """Review round 16 a (m): the dQ pass's unnamed mistakes got HINT_BACKWARD, which says
    "compare dV first": the pass computes no dV."""
    fn = mutate(LAB, "flash_backward_dq", "- delta_i[:, None])) @ k[k0:k1])",
                "- delta_i[:, None])) @ v[k0:k1])")
    result = assert_hint(L.check_flash_backward_dq, fn, L.HINT_BACKWARD_DQ[0])
    assert "dV" not in result.hint
