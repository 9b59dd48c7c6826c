"""What a lab checker is handed: the learner's function or kernel (or, for a checker of several
parts, a tuple, list or dict of them), not the result of calling it."""

from __future__ import annotations

HINT_NOT_CALLABLE = ("The checker takes your function itself and calls it on its own inputs: "
                     "write check_...(my_function), the name without parentheses, not the "
                     "result of a call such as check_...(my_function(4)).")

#: data a function returns (never a function or a kernel launched as kernel[grid, block])
_DATA = (list, tuple, dict, str, bytes, int, float, complex, bool, type(None))


def _is_data(x) -> bool:
    return isinstance(x, _DATA) or type(x).__module__.split(".")[0] == "numpy"


def not_a_function(fn) -> str:
    """'' when `fn` is a function or a kernel, or holds only such parts; else one line
    naming what it is (a part that is data, such as None, in a tuple of parts too)."""
    parts = list(fn.values()) if isinstance(fn, dict) else \
        list(fn) if isinstance(fn, (tuple, list)) else []
    if any(callable(p) for p in parts):
        data = [p for p in parts if not callable(p) and _is_data(p)]
        return f"a part of your {type(fn).__name__} is {type(data[0]).__name__}, not a " \
               f"function" if data else ""
    if callable(fn):
        return ""
    return f"got {type(fn).__name__}, not a function" if _is_data(fn) else ""
