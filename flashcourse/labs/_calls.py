"""What a lab checker is handed: the learner's function or kernel (or, for a checker of several
parts, a tuple, list or dict of them), not the result of calling it."""

from __future__ import annotations

HINT_NOT_CALLABLE = ("The checker takes your function itself and calls it on its own inputs: "
                     "write check_...(my_function), the name without parentheses, not the "
                     "result of a call such as check_...(my_function(4)).")

#: data a function returns (never a function or a kernel launched as kernel[grid, block])
_DATA = (list, tuple, dict, str, bytes, int, float, complex, bool, type(None))


def not_a_function(fn) -> str:
    """'' when `fn` is a function, a kernel or holds one; else one line naming what it is."""
    parts = fn.values() if isinstance(fn, dict) else fn if isinstance(fn, (tuple, list)) else ()
    if callable(fn) or any(callable(p) for p in parts):
        return ""
    data = isinstance(fn, _DATA) or type(fn).__module__.split(".")[0] == "numpy"
    return f"got {type(fn).__name__}, not a function" if data else ""
