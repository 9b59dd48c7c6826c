"""Checkers for the exercises of notebook 14: a mask_mod and a score_mod with its derivative.

Exercise 1, a sliding window. The learner writes

    sliding_window_mask(window) -> mask_mod(b, h, q_idx, kv_idx)

for Tq = Tk (no offset): query i sees key j iff 0 <= i - j <= window, itself and the
`window` keys before it, window + 1 keys in all (FlashAttention's window_size=(window, 0)).
It is compared, pair by pair, with `variants.library.sliding_window(window,
align="top-left")` on whole tiles of indices (`variants.mods.mask_tile`, so it must work
on arrays: comparisons and & | ~, no `if`/`and`), then used by the tiled forward with a
block mask and compared with the float64 reference.

Exercise 2, tanh soft-capping. The learner writes

    softcap_mods(cap) -> (score_mod, score_mod_grad)
        score_mod(score, ...)      = cap tanh(score / cap)
        score_mod_grad(score, ...) = d score_mod / d score = 1 - tanh(score / cap)^2

compared with `variants.library.softcap(cap)` on scores far inside and far outside
(-cap, cap), then run through `variants.reference_backward` (dq, dk, dv).

Each typical mistake is replayed on the case's inputs and named by its own hint
(`_harness.mistake_diagnoses`).
"""

from __future__ import annotations

import numpy as np

from ..variants import library, reference, tiled
from ..variants.block_mask import create_block_mask
from ..variants.mods import check_mod, mask_tile, score_tile
from ._harness import Case, Result, mistake_diagnoses, run_checks

# -- exercise 1: the sliding window ---------------------------------------------------------

HINT_WINDOW = ("Compare with the rule: query i sees key j iff 0 <= i - j <= window. Return "
               "booleans for whole arrays: q_idx is a column (rows, 1) and kv_idx a row "
               "(1, cols); combine comparisons with & (not `and`).")
HINT_SHORT = ("Off by one, short: each query sees only `window` keys. The window counts the "
              "keys *before* the query; the query itself is seen too, so i - j <= window "
              "(window + 1 keys), not i - j < window.")
HINT_LONG = ("Off by one, long: each query sees window + 2 keys. The rule is i - j <= window, "
             "not i - j <= window + 1.")
HINT_FUTURE = ("Your mask lets queries see keys after them (j > i): the window also needs "
               "the causal side, i - j >= 0.")
HINT_SYMMETRIC = ("Your window reaches `window` keys on both sides (|i - j| <= window): that "
                  "is the symmetric window. This one is causal: 0 <= i - j <= window.")
HINT_DIRECTION = ("The window points the wrong way: your query sees itself and the keys "
                  "*after* it (0 <= j - i <= window). Use i - j, the distance back.")
HINT_NO_WINDOW = ("Your mask is plain causal: the far end of the window is missing, "
                  "i - j <= window.")
HINT_FORWARD = ("The mask is right pair by pair, but the tiled forward with its block mask "
                "does not match the reference: make the function depend only on its "
                "arguments and on `window` (no other state).")


def _window_rule(window: int, mistake: str | None):
    """The mask of the rule, or of one typical mistake (a plain function of the indices)."""
    def rule(q, k):
        dist = q - k
        return {None: (dist >= 0) & (dist <= window),
                "short": (dist >= 0) & (dist < window),
                "long": (dist >= 0) & (dist <= window + 1),
                "future": dist <= window,
                "symmetric": (dist <= window) & (dist >= -window),
                "direction": (-dist >= 0) & (-dist <= window),
                "no window": dist >= 0}[mistake]
    return rule


WINDOW_MISTAKES = [("short", (HINT_SHORT,)), ("long", (HINT_LONG,)),
                   ("symmetric", (HINT_SYMMETRIC,)), ("future", (HINT_FUTURE,)),
                   ("direction", (HINT_DIRECTION,)), ("no window", (HINT_NO_WINDOW,))]

#: (name, N = Tq = Tk, window)
WINDOW_CASES = [
    ("N = 37, window = 5", 37, 5),
    ("N = 16, window = 0 (each query sees only itself)", 16, 0),
    ("N = 23, window = 1", 23, 1),
    ("N = 12, window = 30 (longer than N: plain causal)", 12, 30),
]


def _first_difference(yours, expected) -> str:
    i, j = (int(x[0]) for x in np.nonzero(yours != expected))
    return (f"query {i}, key {j}: yours {bool(yours[i, j])}, expected {bool(expected[i, j])} "
            f"({int((yours != expected).sum())} pairs differ)")


def _same_mask(yours, expected):
    yours = np.asarray(yours)
    if yours.shape != expected.shape:
        return False, f"shape {yours.shape}, expected {expected.shape}"
    if yours.dtype != np.bool_:
        return False, f"dtype {yours.dtype}, expected booleans"
    if np.array_equal(yours, expected):
        return True, ""
    return False, _first_difference(yours, expected)


def _window_case(name, n, window):
    idx = np.arange(n)
    expected = mask_tile(library.sliding_window(window, align="top-left"), 0, 0, idx, idx)

    def run(fn):
        mask_mod = check_mod(fn(window), "sliding_window_mask(window)", 4)
        return mask_tile(mask_mod, 0, 0, idx, idx), expected

    def close(a, b):
        return np.array_equal(np.asarray(a), np.asarray(b))

    diagnoses = mistake_diagnoses(
        lambda m: _window_rule(window, m)(idx[:, None], idx[None, :]), WINDOW_MISTAKES, close)
    return Case(name, run, HINT_WINDOW, diagnoses, compare=_same_mask)


def _window_forward_case():
    """The learner's mask drives the tiled forward (block mask of 4 x 4 tiles)."""
    n, window = 29, 6
    rng = np.random.default_rng(14)
    q, k, v = (rng.standard_normal((1, 2, n, 8)) for _ in range(3))          # (B, H, T, d)
    o_ref, _ = reference.reference(q, k, v, mask_mod=library.sliding_window(
        window, align="top-left"))

    def run(fn):
        bm = create_block_mask(fn(window), None, None, n, n, 4, 4, cache=False)
        o, _ = tiled.forward(q, k, v, block_mask=bm)
        return o, o_ref
    name = "tiled forward with your mask (N = 29, window = 6, tiles 4 x 4) vs reference"
    return Case(name, run, HINT_FORWARD, rtol=1e-10, atol=1e-12, names=("o",))


def check_sliding_window(sliding_window_mask, *, verbose: bool = True,
                         hint_level: int = 1) -> Result:
    """Check the learner's `sliding_window_mask(window) -> mask_mod` (module docstring)."""
    cases = [_window_case(*c) for c in WINDOW_CASES] + [_window_forward_case()]
    return run_checks("sliding_window_mask(window)", sliding_window_mask, cases,
                      verbose=verbose, hint_level=hint_level)


def reference_sliding_window_mask(window):
    """The solution."""
    def mask_mod(b, h, q_idx, kv_idx):
        dist = q_idx - kv_idx
        return (dist >= 0) & (dist <= window)
    return mask_mod


# -- exercise 2: soft-capping and its derivative ------------------------------------------

HINT_SOFTCAP = ("Compare with the formulas: score_mod = cap * tanh(score / cap) and "
                "score_mod_grad = 1 - tanh(score / cap)**2, elementwise with np.tanh.")
HINT_NO_DIVIDE = ("The cap is applied to the wrong quantity: you took tanh(score), so every "
                  "score above ~3 becomes cap whatever it was. Divide first: "
                  "cap * tanh(score / cap), which is ~score for |score| << cap.")
HINT_NO_MULTIPLY = ("Your scores lie in (-1, 1): tanh(score / cap) must be multiplied back "
                    "by cap, so that they lie in (-cap, cap) and small scores are unchanged.")
HINT_CLIP = ("That is a hard clip, min(max(score, -cap), cap): its derivative is 0 past the "
             "cap, so no gradient flows there. Soft-capping is smooth: cap * tanh(score / cap).")
HINT_GRAD_INNER = ("The derivative uses tanh(score), the wrong quantity: the chain rule gives "
                   "1 - tanh(score / cap)**2.")
HINT_GRAD_CHAIN = ("The chain-rule factors are off: d/ds [cap tanh(s / cap)] = cap * (1 / cap) "
                   "* (1 - tanh(s / cap)**2), and the cap cancels.")
HINT_GRAD_OUTPUT = ("You wrote 1 - out**2 with out = cap * tanh(score / cap): the derivative "
                    "is 1 - (out / cap)**2 = 1 - tanh(score / cap)**2.")
HINT_GRAD_ONE = ("score_mod_grad returns 1, the derivative of the identity (as for ALiBi): "
                 "soft-capping flattens large scores, its derivative is 1 - tanh(score / "
                 "cap)**2 < 1.")
HINT_SOFTCAP_RETURN = ("softcap_mods(cap) must return a pair (score_mod, score_mod_grad) of "
                       "functions of (score, b, h, q_idx, kv_idx).")
HINT_BACKWARD = ("score_mod and its derivative each match alone, but the backward does not: "
                 "make both depend only on their arguments and on `cap`.")

SOFTCAP_MISTAKES = {
    "score": [("no divide", (HINT_NO_DIVIDE,)), ("no multiply", (HINT_NO_MULTIPLY,)),
              ("clip", (HINT_CLIP,))],
    "grad": [("inner", (HINT_GRAD_INNER,)), ("times cap", (HINT_GRAD_CHAIN,)),
             ("over cap", (HINT_GRAD_CHAIN,)), ("output", (HINT_GRAD_OUTPUT,)),
             ("one", (HINT_GRAD_ONE,))],
}


def _softcap_value(s, cap, part, mistake):
    t = np.tanh(s / cap)
    if part == "score":
        return {None: cap * t, "no divide": cap * np.tanh(s), "no multiply": t,
                "clip": np.clip(s, -cap, cap)}[mistake]
    return {None: 1 - t * t, "inner": 1 - np.tanh(s) ** 2, "times cap": cap * (1 - t * t),
            "over cap": (1 - t * t) / cap, "output": 1 - (cap * t) ** 2,
            "one": np.ones_like(s)}[mistake]


def _pair(fn, cap):
    out = fn(cap)
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise TypeError(f"softcap_mods({cap:g}) returned {type(out).__name__}, not a pair "
                        f"(score_mod, score_mod_grad)")
    return (check_mod(out[0], "score_mod", 5), check_mod(out[1], "score_mod_grad", 5))


#: (name, cap, spread of the scores, which function)
SOFTCAP_CASES = [
    ("score_mod, cap = 20, scores from about -60 to 60", 20.0, 20.0, "score"),
    ("score_mod_grad, cap = 20, the same scores", 20.0, 20.0, "grad"),
    ("score_mod, cap = 2.5, small and large scores", 2.5, 4.0, "score"),
    ("score_mod_grad, cap = 2.5, small and large scores", 2.5, 4.0, "grad"),
]


def _softcap_case(name, cap, spread, part):
    rng = np.random.default_rng(int(cap * 10) + len(part))
    s = rng.standard_normal((7, 9)) * spread                                # (Tq, Tk)
    qi, ki = np.arange(7), np.arange(9)
    expected = _softcap_value(s, cap, part, None)

    def run(fn):
        mods = _pair(fn, cap)
        fn_part = mods[0] if part == "score" else mods[1]
        label = "score_mod" if part == "score" else "score_mod_grad"
        return score_tile(fn_part, s.copy(), 0, 0, qi, ki, label), expected

    def close(a, b):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        return a.shape == b.shape and np.allclose(a, b, rtol=1e-9, atol=1e-12)

    diagnoses = mistake_diagnoses(lambda m: _softcap_value(s, cap, part, m),
                                  SOFTCAP_MISTAKES[part], close)
    return Case(name, run, HINT_SOFTCAP, diagnoses, rtol=1e-10, atol=1e-12)


def _softcap_backward_case():
    cap, n = 3.0, 13
    rng = np.random.default_rng(41)
    q, k, v, do = (rng.standard_normal((1, 2, n, 4)) * 2 for _ in range(4))
    mask = library.causal(align="top-left")
    expected = reference.reference_backward(q, k, v, do, mask_mod=mask,
                                            score_mod=library.softcap(cap))[:3]

    def run(fn):
        score_mod, grad = _pair(fn, cap)
        out = reference.reference_backward(q, k, v, do, mask_mod=mask, score_mod=score_mod,
                                           score_mod_grad=grad)
        return out[:3], expected
    return Case("reference backward (dq, dk, dv) with your pair, cap = 3, causal", run,
                HINT_BACKWARD, rtol=1e-9, atol=1e-12, names=("dq", "dk", "dv"))


def check_softcap(softcap_mods, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Check the learner's `softcap_mods(cap) -> (score_mod, score_mod_grad)`."""
    cases = [_softcap_case(*c) for c in SOFTCAP_CASES] + [_softcap_backward_case()]
    return run_checks("softcap_mods(cap)", softcap_mods, cases, verbose=verbose,
                      hint_level=hint_level)


def reference_softcap_mods(cap):
    """The solution."""
    def score_mod(score, b, h, q_idx, kv_idx):
        return cap * np.tanh(score / cap)

    def score_mod_grad(score, b, h, q_idx, kv_idx):
        t = np.tanh(score / cap)
        return 1 - t * t
    return score_mod, score_mod_grad
