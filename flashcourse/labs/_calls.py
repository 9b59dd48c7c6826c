"""What a lab checker is handed and how it calls it: the learner's function or kernel (or, for a
checker of several parts, a tuple, list or dict of them), not the result of calling it; and a
call whose arguments do not fit the function's parameters. Before, both got the case's own
hint, which names a mistake in the arithmetic the learner did not make (review rounds 21, 21 a
and 21 b each found one of these)."""

from __future__ import annotations

import re

HINT_NOT_CALLABLE = ("The checker takes your function itself and calls it on its own inputs: "
                     "write check_...(my_function), the name without parentheses, not the "
                     "result of a call such as check_...(my_function(4)).")

HINT_SIGNATURE = (
    "A call's arguments do not fit the parameters of the function it calls (the error above "
    "names that function and what is missing or extra). If it is your function, keep its "
    "parameters as the lab's `def` line gives them, in that order; if it is a numpy "
    "function, check the arguments you pass it.")

_SIGNATURE = re.compile(r"\(\) (takes .* positional arguments? but \d+ (were|was) given|"
                        r"missing \d+ required (positional|keyword-only) arguments?|"
                        r"got an unexpected keyword argument)")

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


def signature_hint(exc) -> str | None:
    """HINT_SIGNATURE for a TypeError raised by a call with the wrong arguments."""
    return HINT_SIGNATURE if isinstance(exc, TypeError) and _SIGNATURE.search(str(exc)) \
        else None
