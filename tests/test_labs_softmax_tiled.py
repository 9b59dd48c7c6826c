"""Labs 01 and 02: the checkers accept the solutions and catch the typical mistakes.

The solutions are taken from the solution notebooks themselves (their function
cells are executed here), and the stubs from the generated student version, so
what is tested is exactly what learners get. Each wrong implementation below is
a mistake learners make; the test asserts that the checker rejects it with the
hint that names that mistake (Result.hint), not merely that it fails.
"""

import numpy as np
import pytest

from flashcourse.labs import online_softmax as L1
from flashcourse.labs import tiled_forward as L2

from helpers import ROOT
from helpers import lab_functions as functions_of

LAB01 = ROOT / "labs" / "solutions" / "lab01_online_softmax.ipynb"
LAB02 = ROOT / "labs" / "solutions" / "lab02_tiled_forward.ipynb"


@pytest.fixture(scope="module")
def lab01():
    return functions_of(LAB01, student=False)


@pytest.fixture(scope="module")
def lab02():
    return functions_of(LAB02, student=False)


def _safe(m):
    return np.where(m == -np.inf, 0.0, m)


# ---------------------------------------------------------------------------
# Lab 01: online softmax
# ---------------------------------------------------------------------------

def test_lab01_solutions_pass(lab01):
    assert L1.check_online_update(lab01["online_update"], verbose=False).passed
    assert L1.check_merge_states(lab01["merge_states"], verbose=False).passed


def test_lab01_stubs_report_not_implemented(capsys):
    ns = functions_of(LAB01, student=True)
    for check, name in ((L1.check_online_update, "online_update"),
                        (L1.check_merge_states, "merge_states")):
        result = check(ns[name])
        assert not result.passed and result.todo
    out = capsys.readouterr().out
    assert out.count("Not implemented yet") == 2
    assert "All checks passed" not in out


def test_lab01_solution_matches_reference_module(lab01):
    """The notebook's rule agrees with flashcourse.reference.online_update, element by element."""
    from flashcourse import reference
    rng = np.random.default_rng(0)
    x = rng.normal(0, 5, 50)
    state = reference.EMPTY_STATE
    m, l = np.array([-np.inf]), np.array([0.0])
    for xi in x:
        state = reference.online_update(state, float(xi))
        m, l = lab01["online_update"](m, l, np.array([xi]))
    # float64, same formula, same order: agreement to 1e-12 relative
    assert m[0] == state.m and abs(l[0] - state.l) <= 1e-12 * state.l


def _update_no_rescale(m, l, x):
    m_new = np.maximum(m, x)
    return m_new, l + np.exp(x - _safe(m_new))


def _update_no_guard(m, l, x):
    m_new = np.maximum(m, x)
    return m_new, l * np.exp(m - m_new) + np.exp(x - m_new)


def _update_forgets_old_max(m, l, x):
    m_new = np.where(x == -np.inf, m, x)        # "the newest score is the max"
    return m_new, l * np.exp(m - _safe(m_new)) + np.exp(x - _safe(m_new))


def _update_inverted(m, l, x):
    m_new = np.maximum(m, x)
    old = np.where(m == -np.inf, m_new, m)
    return m_new, l * np.exp(m_new - old) + np.exp(x - _safe(m_new))


def _update_unshifted(m, l, x):
    return np.maximum(m, x), l + np.exp(x)


@pytest.mark.parametrize("wrong, hint", [
    (_update_no_rescale, L1.HINT_RESCALE),
    (_update_no_guard, L1.HINT_NEG_INF),
    (_update_forgets_old_max, L1.HINT_MAX),
    (_update_inverted, L1.HINT_DIRECTION),
    (_update_unshifted, L1.HINT_SHIFT),
], ids=lambda p: getattr(p, "__name__", "hint"))
def test_lab01_wrong_updates_get_their_hint(wrong, hint):
    with np.errstate(all="ignore"):
        result = L1.check_online_update(wrong, verbose=False)
    assert not result.passed and not result.todo
    assert result.hint == hint


def _merge_no_rescale(m_a, l_a, m_b, l_b):
    return np.maximum(m_a, m_b), l_a + l_b


def _merge_no_guard(m_a, l_a, m_b, l_b):
    m = np.maximum(m_a, m_b)
    return m, l_a * np.exp(m_a - m) + l_b * np.exp(m_b - m)


def _merge_min(m_a, l_a, m_b, l_b):
    m = np.minimum(m_a, m_b)
    return m, l_a * np.exp(m_a - _safe(m)) + l_b * np.exp(m_b - _safe(m))


def _merge_inverted(m_a, l_a, m_b, l_b):
    m = np.maximum(m_a, m_b)
    return m, l_a * np.exp(m - m_a) + l_b * np.exp(m - m_b)


@pytest.mark.parametrize("wrong, hint", [
    (_merge_no_rescale, L1.HINT_RESCALE),
    (_merge_no_guard, L1.HINT_NEG_INF),
    (_merge_min, L1.HINT_MAX),
    (_merge_inverted, L1.HINT_DIRECTION),
], ids=lambda p: getattr(p, "__name__", "hint"))
def test_lab01_wrong_merges_get_their_hint(wrong, hint):
    with np.errstate(all="ignore"):
        result = L1.check_merge_states(wrong, verbose=False)
    assert not result.passed and not result.todo
    assert result.hint == hint


def test_lab01_failure_prints_yours_and_expected(capsys):
    with np.errstate(all="ignore"):
        L1.check_online_update(_update_no_rescale)
    out = capsys.readouterr().out
    assert "FAILED" in out and "yours" in out and "expected" in out and "Hint:" in out


def test_lab01_crash_is_reported_not_raised():
    def crashes(m, l, x):
        return m[5], l                           # IndexError on some inputs
    result = L1.check_online_update(crashes, verbose=False)
    assert not result.passed and "IndexError" in result.detail


# ---------------------------------------------------------------------------
# Lab 02: tiled forward
# ---------------------------------------------------------------------------

def test_lab02_solutions_pass(lab02):
    assert L2.check_causal_tile_mask(lab02["causal_tile_mask"], verbose=False).passed
    assert L2.check_tile_step(lab02["tile_step"], verbose=False).passed
    assert L2.check_finalize(lab02["finalize"], verbose=False).passed
    assert L2.check_tiled_forward(lab02["tile_step"], lab02["finalize"],
                                  lab02["causal_tile_mask"], verbose=False).passed


def test_lab02_stubs_report_not_implemented(capsys):
    ns = functions_of(LAB02, student=True)
    results = [L2.check_causal_tile_mask(ns["causal_tile_mask"]),
               L2.check_tile_step(ns["tile_step"]),
               L2.check_finalize(ns["finalize"]),
               L2.check_tiled_forward(ns["tile_step"], ns["finalize"], ns["causal_tile_mask"])]
    assert all(r.todo and not r.passed for r in results)
    out = capsys.readouterr().out
    assert out.count("Not implemented yet") == 4
    assert "All checks passed" not in out


def test_lab02_run_forward_matches_library_tiled_forward(lab02):
    """The checker's loop with the solution equals flashcourse.tiled.forward (float64, 1e-12)."""
    from flashcourse import tiled
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((t, 6)) for t in (45, 31, 31))
    for causal in (False, True):
        o, lse = L2.run_forward(q, k, v, lab02["tile_step"], lab02["finalize"],
                                lab02["causal_tile_mask"], block_q=8, block_k=5,
                                causal=causal)
        o_lib, lse_lib = tiled.forward(q, k, v, block_q=8, block_k=5, causal=causal)
        np.testing.assert_allclose(o, o_lib, rtol=1e-12, atol=1e-14)
        np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(lse_lib))
        fin = np.isfinite(lse_lib)
        np.testing.assert_allclose(lse[fin], lse_lib[fin], rtol=1e-12)


# -- wrong masks ---------------------------------------------------------------

def _mask_top_left(q0, q1, k0, k1, tq, tk):
    return np.arange(k0, k1)[None, :] <= np.arange(q0, q1)[:, None]


def _mask_strict(q0, q1, k0, k1, tq, tk):
    return np.arange(k0, k1)[None, :] < np.arange(q0, q1)[:, None] + (tk - tq)


def _mask_local(q0, q1, k0, k1, tq, tk):
    return np.arange(k1 - k0)[None, :] <= np.arange(q1 - q0)[:, None] + (tk - tq)


def _mask_fixed_block(q0, q1, k0, k1, tq, tk):
    block = 4                                   # assumes every tile is a full 4 x 4 block
    return np.arange(k0, k0 + block)[None, :] <= np.arange(q0, q0 + block)[:, None] + (tk - tq)


def _mask_inverted(q0, q1, k0, k1, tq, tk):
    return np.arange(k0, k1)[None, :] > np.arange(q0, q1)[:, None] + (tk - tq)


@pytest.mark.parametrize("wrong, hint", [
    (_mask_top_left, L2.HINT_TOP_LEFT),
    (_mask_strict, L2.HINT_OFF_BY_ONE),
    (_mask_local, L2.HINT_LOCAL_INDEX),
    (_mask_fixed_block, L2.HINT_RAGGED),
    (_mask_inverted, L2.HINT_INVERTED),
], ids=lambda p: getattr(p, "__name__", "hint"))
def test_lab02_wrong_masks_get_their_hint(wrong, hint):
    result = L2.check_causal_tile_mask(wrong, verbose=False)
    assert not result.passed and result.hint == hint


def test_lab02_top_left_mask_is_named_in_the_full_loop_too(lab02):
    result = L2.check_tiled_forward(lab02["tile_step"], lab02["finalize"], _mask_top_left,
                                    verbose=False)
    assert not result.passed and result.hint == L2.HINT_TOP_LEFT


# -- wrong steps -----------------------------------------------------------------

def _scores(q_i, k_j, mask, scale):
    return np.where(mask, scale * (q_i @ k_j.T), -np.inf)


def _step_no_rescale(q_i, k_j, v_j, mask, m, l, acc, scale):
    s = _scores(q_i, k_j, mask, scale)
    m_new = np.maximum(m, s.max(axis=1))
    p = np.exp(s - _safe(m_new)[:, None])
    return m_new, l + p.sum(axis=1), acc + p @ v_j


def _step_no_guard(q_i, k_j, v_j, mask, m, l, acc, scale):
    s = _scores(q_i, k_j, mask, scale)
    m_new = np.maximum(m, s.max(axis=1))
    p, alpha = np.exp(s - m_new[:, None]), np.exp(m - m_new)
    return m_new, alpha * l + p.sum(axis=1), alpha[:, None] * acc + p @ v_j


def _step_tile_max_only(q_i, k_j, v_j, mask, m, l, acc, scale):
    s = _scores(q_i, k_j, mask, scale)
    m_new = s.max(axis=1)
    p, alpha = np.exp(s - _safe(m_new)[:, None]), np.exp(m - _safe(m_new))
    return m_new, alpha * l + p.sum(axis=1), alpha[:, None] * acc + p @ v_j


def _step_default_scale(q_i, k_j, v_j, mask, m, l, acc, scale):
    s = _scores(q_i, k_j, mask, 1.0 / np.sqrt(q_i.shape[1]))
    m_new = np.maximum(m, s.max(axis=1))
    p, alpha = np.exp(s - _safe(m_new)[:, None]), np.exp(m - _safe(m_new))
    return m_new, alpha * l + p.sum(axis=1), alpha[:, None] * acc + p @ v_j


def _step_ignores_mask(q_i, k_j, v_j, mask, m, l, acc, scale):
    s = scale * (q_i @ k_j.T)
    m_new = np.maximum(m, s.max(axis=1))
    p, alpha = np.exp(s - m_new[:, None]), np.exp(m - m_new)
    return m_new, alpha * l + p.sum(axis=1), alpha[:, None] * acc + p @ v_j


@pytest.mark.parametrize("wrong, hint", [
    (_step_no_rescale, L2.HINT_RESCALE),
    (_step_no_guard, L2.HINT_NEG_INF),
    (_step_tile_max_only, L2.HINT_MAX),
    (_step_default_scale, L2.HINT_SCALE),
    (_step_ignores_mask, L2.HINT_MASK_IGNORED),
], ids=lambda p: getattr(p, "__name__", "hint"))
def test_lab02_wrong_steps_get_their_hint(wrong, hint):
    with np.errstate(all="ignore"):
        result = L2.check_tile_step(wrong, verbose=False)
    assert not result.passed and not result.todo
    assert result.hint == hint


def test_lab02_wrong_step_fails_the_full_loop(lab02):
    with np.errstate(all="ignore"):
        result = L2.check_tiled_forward(_step_no_rescale, lab02["finalize"],
                                        lab02["causal_tile_mask"], verbose=False)
    assert not result.passed


# -- wrong finalisations -------------------------------------------------------------

def _finalize_no_divide(m, l, acc):
    with np.errstate(divide="ignore"):
        return acc, np.where(l > 0, m + np.log(np.where(l > 0, l, 1)), -np.inf)


def _finalize_log_l_only(m, l, acc):
    safe = np.where(l > 0, l, 1)
    with np.errstate(divide="ignore"):
        return np.where((l > 0)[:, None], acc / safe[:, None], 0), np.log(l)


def _finalize_no_guard(m, l, acc):
    return acc / l[:, None], m + np.log(l)


@pytest.mark.parametrize("wrong, hint", [
    (_finalize_no_divide, L2.HINT_DIVIDE),
    (_finalize_log_l_only, L2.HINT_LSE),
    (_finalize_no_guard, L2.HINT_EMPTY),
], ids=lambda p: getattr(p, "__name__", "hint"))
def test_lab02_wrong_finalize_gets_its_hint(wrong, hint):
    with np.errstate(all="ignore"):
        result = L2.check_finalize(wrong, verbose=False)
    assert not result.passed and result.hint == hint
