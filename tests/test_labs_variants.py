"""The checkers of notebook 14's exercises: the solutions pass, stubs are reported as not
implemented, and every typical mistake fails with its own hint."""

import numpy as np
import pytest

from flashcourse.labs import variants as lab


def _window(rule):
    """A learner's sliding_window_mask built from a rule of (dist = q_idx - kv_idx, window)."""
    def sliding_window_mask(window):
        def mask_mod(b, h, q_idx, kv_idx):
            return rule(q_idx - kv_idx, window)
        return mask_mod
    return sliding_window_mask


def test_the_window_solution_passes_also_written_with_if():
    assert lab.check_sliding_window(lab.reference_sliding_window_mask, verbose=False)

    def scalar_version(window):                  # if/and: numpy calls it pair by pair
        def mask_mod(b, h, q_idx, kv_idx):
            if 0 <= q_idx - kv_idx and q_idx - kv_idx <= window:
                return True
            return False
        return mask_mod
    assert lab.check_sliding_window(scalar_version, verbose=False)


def test_a_window_stub_is_not_implemented_yet():
    def sliding_window_mask(window):
        def mask_mod(b, h, q_idx, kv_idx):
            raise NotImplementedError("write it")
        return mask_mod
    assert lab.check_sliding_window(sliding_window_mask, verbose=False).todo


@pytest.mark.parametrize("rule,hint", [
    (lambda d, w: (d >= 0) & (d < w), lab.HINT_SHORT),
    (lambda d, w: (d >= 0) & (d <= w + 1), lab.HINT_LONG),
    (lambda d, w: (d >= -w) & (d <= w), lab.HINT_SYMMETRIC),
    (lambda d, w: d <= w, lab.HINT_FUTURE),
    (lambda d, w: (d <= 0) & (d >= -w), lab.HINT_DIRECTION),
    (lambda d, w: d >= 0, lab.HINT_NO_WINDOW),
    (lambda d, w: (d >= 1) & (d <= w), lab.HINT_WINDOW),          # the query itself left out
], ids=["short", "long", "symmetric", "future", "direction", "no-window", "no-self"])
def test_each_window_mistake_gets_its_hint(rule, hint):
    result = lab.check_sliding_window(_window(rule), verbose=False)
    assert not result and result.hint == hint


def test_a_mask_that_returns_numbers_is_named():
    result = lab.check_sliding_window(_window(lambda d, w: ((d >= 0) & (d <= w)) * 1),
                                      verbose=False)
    assert not result and "must return a bool" in result.detail


def _softcap(score, grad):
    def softcap_mods(cap):
        return ((lambda s, b, h, i, j: score(s, cap)), (lambda s, b, h, i, j: grad(s, cap)))
    return softcap_mods


RIGHT_SCORE = (lambda s, c: c * np.tanh(s / c))
RIGHT_GRAD = (lambda s, c: 1 - np.tanh(s / c) ** 2)


def test_the_softcap_solution_passes():
    assert lab.check_softcap(lab.reference_softcap_mods, verbose=False)
    assert lab.check_softcap(_softcap(RIGHT_SCORE, RIGHT_GRAD), verbose=False)


def test_a_softcap_stub_is_not_implemented_yet():
    def softcap_mods(cap):
        def score_mod(score, b, h, q_idx, kv_idx):
            raise NotImplementedError("write it")
        return score_mod, score_mod
    assert lab.check_softcap(softcap_mods, verbose=False).todo


@pytest.mark.parametrize("score,grad,hint", [
    (lambda s, c: c * np.tanh(s), RIGHT_GRAD, lab.HINT_NO_DIVIDE),
    (lambda s, c: np.tanh(s / c), RIGHT_GRAD, lab.HINT_NO_MULTIPLY),
    (lambda s, c: np.clip(s, -c, c), RIGHT_GRAD, lab.HINT_CLIP),
    (RIGHT_SCORE, lambda s, c: 1 - np.tanh(s) ** 2, lab.HINT_GRAD_INNER),
    (RIGHT_SCORE, lambda s, c: c * (1 - np.tanh(s / c) ** 2), lab.HINT_GRAD_CHAIN),
    (RIGHT_SCORE, lambda s, c: (1 - np.tanh(s / c) ** 2) / c, lab.HINT_GRAD_CHAIN),
    (RIGHT_SCORE, lambda s, c: 1 - (c * np.tanh(s / c)) ** 2, lab.HINT_GRAD_OUTPUT),
    (RIGHT_SCORE, lambda s, c: 1.0 + 0 * s, lab.HINT_GRAD_ONE),
], ids=["tanh-of-score", "not-multiplied", "hard-clip", "grad-inner", "grad-times-cap",
        "grad-over-cap", "grad-of-output", "grad-one"])
def test_each_softcap_mistake_gets_its_hint(score, grad, hint):
    result = lab.check_softcap(_softcap(score, grad), verbose=False)
    assert not result and result.hint == hint


def test_softcap_must_return_a_pair_of_functions():
    result = lab.check_softcap(lambda cap: (lambda s, b, h, i, j: s), verbose=False)
    assert not result and "not a pair" in result.detail
    result = lab.check_softcap(lambda cap: ((lambda s: s), (lambda s: s)), verbose=False)
    assert not result and "must take exactly 5 arguments" in result.detail
