"""Lab 05 (backward): the checkers accept the solution, report stubs, and name each mistake.

The solution functions are executed from the solution notebook itself and the stubs
from the generated student version, so what is tested is what learners get. Each
wrong implementation is a typical mistake; the test asserts the checker rejects it
with the hint that names that mistake (Result.hint), not merely that it fails.
"""

import numpy as np
import pytest

from flashcourse import reference
from flashcourse.labs import backward as L5

from helpers import ROOT
from helpers import lab_functions as functions_of

LAB05 = ROOT / "labs" / "solutions" / "lab05_backward.ipynb"


@pytest.fixture(scope="module")
def sol():
    return functions_of(LAB05, student=False)


def test_solution_passes(sol):
    assert L5.check_compute_delta(sol["compute_delta"], verbose=False).passed
    assert L5.check_recompute_p(sol["recompute_p"], verbose=False).passed
    assert L5.check_tile_ds(sol["tile_ds"], verbose=False).passed
    assert L5.check_backward(sol["compute_delta"], sol["recompute_p"], sol["tile_ds"],
                             verbose=False).passed


def test_solution_run_backward_matches_reference(sol):
    # the loop itself is right: plugged with the solution it equals the float64 reference
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((t, 3)) for t in (10, 7, 7))
    do = rng.standard_normal((10, 3))
    o, lse = reference.attention(q, k, v, causal=True)
    got = L5.run_backward(q, k, v, o, lse, do, sol["compute_delta"], sol["recompute_p"],
                          sol["tile_ds"], block_q=3, block_k=2, causal=True)
    ref = reference.attention_backward(q, k, v, do, causal=True)
    for g, r in zip(got, ref):
        assert np.allclose(g, r, rtol=1e-10, atol=1e-13)


def test_stubs_report_not_implemented(capsys):
    ns = functions_of(LAB05, student=True)
    results = [L5.check_compute_delta(ns["compute_delta"]),
               L5.check_recompute_p(ns["recompute_p"]),
               L5.check_tile_ds(ns["tile_ds"]),
               L5.check_backward(ns["compute_delta"], ns["recompute_p"], ns["tile_ds"])]
    assert all(r.todo and not r.passed for r in results)
    out = capsys.readouterr().out
    assert out.count("Not implemented yet") == 4 and "All checks passed" not in out


# --- wrong versions of tile_ds -------------------------------------------------------

@pytest.mark.parametrize("wrong,hint", [
    (lambda p, do, v, delta: p * (do @ v.T), L5.HINT_FORGOT_D),
    (lambda p, do, v, delta: do @ v.T - delta[:, None], L5.HINT_NO_P),
    (lambda p, do, v, delta: p * (do @ v.T + delta[:, None]), L5.HINT_D_SIGN),
])
def test_tile_ds_mistakes(wrong, hint):
    r = L5.check_tile_ds(wrong, verbose=False)
    assert not r.passed and r.hint == hint


def test_tile_ds_used_o_instead_of_do():
    # the learner's function only sees do_i; a "used O" bug is simulated by recomputing O
    # from p and v_j (p is a whole row here, so p @ v_j is O_i)
    def wrong(p, do_i, v_j, delta_i):
        o_i = p @ v_j
        return p * (o_i @ v_j.T - delta_i[:, None])
    r = L5.check_tile_ds(wrong, verbose=False)
    assert not r.passed and r.hint == L5.HINT_O_FOR_DO


# --- wrong versions of recompute_p -----------------------------------------------------

def _p_tile_max(q_i, k_j, mask, lse_i, scale):
    s = np.where(mask, scale * (q_i @ k_j.T), -np.inf)
    m = s.max(axis=1)
    return np.exp(s - np.where(np.isfinite(m), m, 0.0)[:, None])


def _p_no_lse(q_i, k_j, mask, lse_i, scale):
    return np.exp(np.where(mask, scale * (q_i @ k_j.T), -np.inf))


def _p_no_mask(q_i, k_j, mask, lse_i, scale):
    return np.exp(scale * (q_i @ k_j.T) - np.where(np.isneginf(lse_i), np.inf, lse_i)[:, None])


def _p_nan_rows(q_i, k_j, mask, lse_i, scale):
    return np.exp(np.where(mask, scale * (q_i @ k_j.T), -np.inf) - lse_i[:, None])


def _p_ignores_scale(q_i, k_j, mask, lse_i, scale):
    return np.exp(np.where(mask, q_i @ k_j.T, -np.inf)
                  - np.where(np.isneginf(lse_i), np.inf, lse_i)[:, None])


@pytest.mark.parametrize("wrong,hint", [
    (_p_tile_max, L5.HINT_TILE_MAX),
    (_p_no_lse, L5.HINT_NO_LSE),
    (_p_no_mask, L5.HINT_MASK),
    (_p_nan_rows, L5.HINT_EMPTY_ROW),
    (_p_ignores_scale, L5.HINT_SCALE),
])
def test_recompute_p_mistakes(wrong, hint):
    r = L5.check_recompute_p(wrong, verbose=False)
    assert not r.passed and r.hint == hint


@pytest.mark.parametrize("wrong,hint", [
    (lambda do, o: (o * o).sum(axis=1), L5.HINT_DELTA_O),
    (lambda do, o: (do * o).sum(axis=0), L5.HINT_DELTA_AXIS),
])
def test_compute_delta_mistakes(wrong, hint):
    r = L5.check_compute_delta(wrong, verbose=False)
    assert not r.passed and r.hint == hint


def test_full_check_catches_a_wrong_piece(sol):
    r = L5.check_backward(sol["compute_delta"], _p_tile_max, sol["tile_ds"], verbose=False)
    assert not r.passed and r.hint == L5.HINT_FULL
