"""The checkers of notebook 14's exercises (flashcourse/exercises_variants.py): the solutions
pass, written the usual way or an unusual one, stubs are reported as not implemented, and
every typical mistake fails with its own hint."""

import numpy as np
import pytest

from flashcourse import exercises_variants as ex
from flashcourse.labs import _harness


def _prefix(rule):
    """A learner's prefix_lm_mask built from a rule of (q_idx + off, kv_idx, prefix, q_idx)."""
    def prefix_lm_mask(prefix, t_query, t_key):
        off = t_key - t_query

        def mask_mod(b, h, q_idx, kv_idx):
            return rule(q_idx + off, kv_idx, prefix, q_idx)
        return mask_mod
    return prefix_lm_mask


def test_the_prefix_solution_passes_and_unusual_right_ones_too():
    assert ex.check_prefix_lm(ex.reference_prefix_lm_mask, verbose=False)
    # the prompt as a square (its queries see it both ways), then causal: the same pairs
    square = _prefix(lambda i, j, p, q: ((i < p) & (j < p)) | (j <= i))
    assert ex.check_prefix_lm(square, verbose=False)
    # a key is seen when it is at most max(i + off, prefix - 1)
    assert ex.check_prefix_lm(_prefix(lambda i, j, p, q: j <= np.maximum(i, p - 1)),
                              verbose=False)

    def scalar_version(prefix, t_query, t_key):           # if/or: called pair by pair
        def mask_mod(b, h, q_idx, kv_idx):
            if kv_idx < prefix or kv_idx <= q_idx + t_key - t_query:
                return True
            return False
        return mask_mod
    assert ex.check_prefix_lm(scalar_version, verbose=False)


def test_a_prefix_stub_is_not_implemented_yet():
    def prefix_lm_mask(prefix, t_query, t_key):
        def mask_mod(b, h, q_idx, kv_idx):
            raise NotImplementedError("write it")
        return mask_mod
    assert ex.check_prefix_lm(prefix_lm_mask, verbose=False).todo


@pytest.mark.parametrize("rule,hint", [
    (lambda i, j, p, q: (j <= p) | (j <= i), ex.HINT_PREFIX_LONG),
    (lambda i, j, p, q: (j < p - 1) | (j <= i), ex.HINT_PREFIX_SHORT),
    (lambda i, j, p, q: j < p, ex.HINT_PREFIX_ONLY),
    (lambda i, j, p, q: (j < p) & (j <= i), ex.HINT_PREFIX_AND),
    (lambda i, j, p, q: (j < p) | (i >= p), ex.HINT_NOT_CAUSAL_ENDED),
    (lambda i, j, p, q: j <= i, ex.HINT_NO_PREFIX),
    (lambda i, j, p, q: (i < p) | (j <= i), ex.HINT_PREFIX_BY_QUERY),
    (lambda i, j, p, q: (j < p) | (j < i), ex.HINT_NOT_ITSELF),
    (lambda i, j, p, q: (j < p) | (j >= i), ex.HINT_CAUSAL_FORWARD),
    (lambda i, j, p, q: (j < p) | (j <= q), ex.HINT_PREFIX_ALIGN),          # no offset
    (lambda i, j, p, q: (j < p + i - q) | (j <= i), ex.HINT_PREFIX_SHIFTED),
    (lambda i, j, p, q: (j < p) | (j <= i + 2), ex.HINT_PREFIX),            # unrecognised
    # off = t_query - t_key: at Tq = 14 < Tk = 31 no query sees a key past the prompt, and it
    # was told "the causal part is missing" (review round 11 b, M4)
    (lambda i, j, p, q: (j < p) | (j <= 2 * q - i), ex.HINT_PREFIX_OFF_SIGN),
], ids=["edge-long", "edge-short", "prefix-only", "and", "not-causal-ended", "no-prefix",
        "by-query", "not-itself", "forward", "top-left", "prefix-shifted", "generic",
        "offset-sign"])
def test_each_prefix_mistake_gets_its_hint(rule, hint):
    result = ex.check_prefix_lm(_prefix(rule), verbose=False)
    assert not result and result.hint == hint


def test_the_alignment_mistakes_pass_the_first_case_and_fail_a_later_one():
    for rule in (lambda i, j, p, q: (j < p) | (j <= q),
                 lambda i, j, p, q: (j < p + i - q) | (j <= i)):
        result = ex.check_prefix_lm(_prefix(rule), verbose=False)
        assert not result and result.case != ex.PREFIX_CASES[0][0]


def test_a_mask_that_returns_numbers_or_nothing_is_named():
    result = ex.check_prefix_lm(_prefix(lambda i, j, p, q: ((j < p) | (j <= i)) * 1),
                                verbose=False)
    assert not result and "must return a bool" in result.detail
    result = ex.check_prefix_lm(lambda prefix, t_query, t_key: None, verbose=False)
    assert not result and "returned None" in result.detail


def test_a_mask_with_state_fails_the_forward_case_only():
    calls = []

    def prefix_lm_mask(prefix, t_query, t_key):
        calls.append(1)
        inner = ex.reference_prefix_lm_mask(prefix, t_query, t_key)
        if len(calls) <= len(ex.PREFIX_CASES):
            return inner
        return ex.reference_prefix_lm_mask(prefix + 3, t_query, t_key)
    result = ex.check_prefix_lm(prefix_lm_mask, verbose=False)
    assert not result and result.hint == ex.HINT_PREFIX_FORWARD


def _scale(score, grad):
    def head_scale_mods(tau):
        return ((lambda s, b, h, i, j: score(s, tau, b, h, i, j)),
                (lambda s, b, h, i, j: grad(s, tau, b, h, i, j)))
    return head_scale_mods


RIGHT_SCORE = (lambda s, t, b, h, i, j: t[h] * s)
RIGHT_GRAD = (lambda s, t, b, h, i, j: t[h] + 0.0 * s)


def test_the_scale_solution_passes_and_unusual_right_ones_too():
    assert ex.check_head_scale(ex.reference_head_scale_mods, verbose=False)
    # the derivative as a plain number (broadcast over the tile), the score via np.multiply
    assert ex.check_head_scale(_scale(lambda s, t, b, h, i, j: np.multiply(s, t[h]),
                                      lambda s, t, b, h, i, j: float(t[h])), verbose=False)
    # the factors copied into a list first; the derivative as a full tile
    def head_scale_mods(tau):
        factors = [float(x) for x in tau]

        def score_mod(score, b, h, q_idx, kv_idx):
            return score * factors[h]

        def score_mod_grad(score, b, h, q_idx, kv_idx):
            return np.full_like(score, factors[h])
        return score_mod, score_mod_grad
    assert ex.check_head_scale(head_scale_mods, verbose=False)


def test_a_scale_stub_is_not_implemented_yet():
    def head_scale_mods(tau):
        def score_mod(score, b, h, q_idx, kv_idx):
            raise NotImplementedError("write it")
        return score_mod, score_mod
    assert ex.check_head_scale(head_scale_mods, verbose=False).todo


@pytest.mark.parametrize("score,grad,hint", [
    (lambda s, t, b, h, i, j: s / t[h], RIGHT_GRAD, ex.HINT_DIVIDE),
    (lambda s, t, b, h, i, j: t[i] * s, RIGHT_GRAD, ex.HINT_BY_QUERY),
    (lambda s, t, b, h, i, j: t[j] * s, RIGHT_GRAD, ex.HINT_BY_KEY),
    (lambda s, t, b, h, i, j: t[0] * s, RIGHT_GRAD, ex.HINT_ONE_FACTOR),
    (lambda s, t, b, h, i, j: t[b] * s, RIGHT_GRAD, ex.HINT_ONE_FACTOR),
    (lambda s, t, b, h, i, j: s + t[h], RIGHT_GRAD, ex.HINT_ADDED),
    (RIGHT_SCORE, lambda s, t, b, h, i, j: t[h] * s, ex.HINT_GRAD_IS_SCORE),
    (RIGHT_SCORE, lambda s, t, b, h, i, j: 1.0 + 0 * s, ex.HINT_GRAD_ONE),
    (RIGHT_SCORE, lambda s, t, b, h, i, j: s, ex.HINT_GRAD_WRT_TAU),
    (RIGHT_SCORE, lambda s, t, b, h, i, j: 1 / t[h] + 0 * s, ex.HINT_GRAD_INVERSE),
    (RIGHT_SCORE, lambda s, t, b, h, i, j: t[i] + 0 * s, ex.HINT_BY_QUERY),
    (RIGHT_SCORE, lambda s, t, b, h, i, j: t[j] + 0 * s, ex.HINT_BY_KEY),
    (RIGHT_SCORE, lambda s, t, b, h, i, j: t[0] + 0 * s, ex.HINT_ONE_FACTOR),
    (RIGHT_SCORE, lambda s, t, b, h, i, j: 2 * t[h] + 0 * s, ex.HINT_SCALE),  # unrecognised
], ids=["divide", "by-query", "by-key", "first-head", "by-batch", "added", "grad-is-score",
        "grad-one", "grad-wrt-tau", "grad-inverse", "grad-by-query", "grad-by-key",
        "grad-first-head", "generic"])
def test_each_scale_mistake_gets_its_hint(score, grad, hint):
    result = ex.check_head_scale(_scale(score, grad), verbose=False)
    assert not result and result.hint == hint


def test_the_batch_mistake_is_caught_where_the_batch_entry_is_not_0():
    # tau[b] with b = 0 is tau[0] (case 1); with b = 1 it is tau[1] (case 3): both named
    grad_ok = _scale(lambda s, t, b, h, i, j: t[b] * s if b else t[h] * s, RIGHT_GRAD)
    result = ex.check_head_scale(grad_ok, verbose=False)
    assert not result and result.case == ex.SCALE_CASES[2][0]
    assert result.hint == ex.HINT_ONE_FACTOR


def test_scale_must_return_a_pair_of_functions():
    result = ex.check_head_scale(lambda tau: (lambda s, b, h, i, j: s), verbose=False)
    assert not result and "not a pair" in result.detail
    result = ex.check_head_scale(lambda tau: ((lambda s: s), (lambda s: s)), verbose=False)
    assert not result and "must take exactly 5 arguments" in result.detail


def test_a_pair_with_state_fails_the_backward_case_only():
    calls = []

    def head_scale_mods(tau):
        calls.append(1)
        if len(calls) <= len(ex.SCALE_CASES):
            return ex.reference_head_scale_mods(tau)
        return ex.reference_head_scale_mods(tau[::-1].copy())
    result = ex.check_head_scale(head_scale_mods, verbose=False)
    assert not result and result.hint == ex.HINT_SCALE_BACKWARD


def test_every_hint_is_a_distinct_sentence_and_a_pass_is_printed(capsys):
    hints = [v for k, v in vars(ex).items() if k.startswith("HINT_")]
    assert len(hints) == len(set(hints))
    assert all(h.endswith(".") for h in hints)
    assert ex.check_head_scale(ex.reference_head_scale_mods)
    assert _harness.PASS_LINE in capsys.readouterr().out
