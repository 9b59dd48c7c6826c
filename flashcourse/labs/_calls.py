"""What a lab checker is handed: the learner's function (or, for a checker of several parts,
a tuple, list or dict of functions), not the result of calling it."""

from __future__ import annotations

HINT_NOT_CALLABLE = ("The checker takes your function itself and calls it on its own inputs: "
                     "write check_...(my_function), the name without parentheses, not the "
                     "result of a call such as check_...(my_function(4)).")


def not_a_function(fn) -> str:
    """'' when `fn` is a function or holds one; else one line naming what it is."""
    parts = fn.values() if isinstance(fn, dict) else fn if isinstance(fn, (tuple, list)) else ()
    if callable(fn) or any(callable(p) for p in parts):
        return ""
    return f"got {type(fn).__name__}, not a function"
