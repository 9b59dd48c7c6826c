"""Two mistakes in how a learner's function is handed over or called, named for every lab
(review round 21 a): a checker given a result instead of a function (check(f(...)), or a name
that holds None), and a call whose arguments do not fit a function's parameters. Before, both
got the case's own hint, which names a mistake in the arithmetic the learner did not make."""

from __future__ import annotations

import numbers
import re

import numpy as np

HINT_NOT_FUNCTION = (
    "A checker takes your function itself: write its name without parentheses or arguments, "
    "e.g. check_flash_forward(flash_forward), not check_flash_forward(flash_forward(q, k, v, "
    "...)), which hands over what the function returned (None while it has no return yet).")
HINT_SIGNATURE = (
    "A call's arguments do not fit the parameters of the function it calls (the error above "
    "names that function and what is missing or extra). If it is your function, keep its "
    "parameters as the lab's `def` line gives them, in that order; if it is a numpy "
    "function, check the arguments you pass it.")

_SIGNATURE = re.compile(r"\(\) (takes .* positional arguments? but \d+ (were|was) given|"
                        r"missing \d+ required (positional|keyword-only) arguments?|"
                        r"got an unexpected keyword argument)")


def _describe(x) -> str | None:
    """What `x` is, if it is a result rather than a function; None for anything else."""
    if x is None:
        return "None"
    if isinstance(x, np.ndarray):
        return f"a numpy array of shape {x.shape}"
    if isinstance(x, (numbers.Number, np.generic)):
        return f"a number ({x!r})"
    if isinstance(x, (str, bytes)):
        return "text (a string)"
    return None


def passed_a_result(fn) -> str | None:
    """The FAILED line when `fn` (a function, or a tuple or dict of functions) is or holds a
    result instead: None, an array, a number, a string."""
    parts = list(fn.values()) if isinstance(fn, dict) else \
        list(fn) if isinstance(fn, (tuple, list)) else [fn]
    if isinstance(fn, (tuple, list)) and parts and all(_describe(p) for p in parts):
        return f"the checker was given a {type(fn).__name__} of {len(parts)} results, " \
               "not a function"
    for kind in map(_describe, parts):
        if kind is not None:
            return f"the checker was given {kind}, not a function"
    return None


def signature_hint(exc) -> str | None:
    """HINT_SIGNATURE for a TypeError raised by a call with the wrong arguments."""
    return HINT_SIGNATURE if isinstance(exc, TypeError) and _SIGNATURE.search(str(exc)) \
        else None
