"""Printed text that fits a JupyterLab output area: lines under 100 characters.

A line longer than about 100 characters wraps mid-number in JupyterLab at 1400 px,
so everything the course prints for the learner goes through `wrap_lines` (or
`say`, which prints it). tests/test_notebooks.py checks every printed line.
`compare(ours, theirs)` words a ratio the way every readout prints it ('2.0x less').
"""

from __future__ import annotations

import math
import numbers
import textwrap

import numpy as np

from ._checks import check_block, check_whole

LINE_WIDTH = 96   # characters; the notebook test allows 100


def wrap_lines(text, width: int = LINE_WIDTH) -> str:
    """Wrap each line of `text` longer than `width` at spaces; keep its indent (+4 after).

    Short lines are left exactly as they are (aligned tables keep their spacing). width:
    a whole number >= 1 (an error naming it otherwise).
    """
    width = check_block(width, "width")
    out = []
    for line in str(text).splitlines():
        if len(line) <= width:
            out.append(line)
            continue
        indent = " " * (len(line) - len(line.lstrip()))
        out.append(textwrap.fill(line, width, subsequent_indent=indent + "    ",
                                 break_long_words=False, break_on_hyphens=False))
    return "\n".join(out)


def say(*parts, sep: str = " ") -> None:
    """`print`, with every line wrapped by `wrap_lines`; sep a string."""
    if not isinstance(sep, str):
        raise TypeError(f"sep must be a string, got {sep!r} ({type(sep).__name__})")
    print(wrap_lines(sep.join(str(p) for p in parts)))


def compare(ours: float, theirs: float, *, fewer: str = "less", more: str = "more",
            digits: int = 1) -> str:
    """How `ours` compares with `theirs`, always as a factor >= 1: '2.0x less' when
    ours = theirs / 2, '1.7x more' when ours = 1.7 theirs, 'the same' when equal.

    Ratios below 1 are never printed ('0.6x less' reads as a saving): the word flips.

    >>> compare(50, 100), compare(170, 100), compare(3, 3)
    ('2.0x less', '1.7x more', 'the same')

    ours and theirs are amounts: finite real numbers >= 0; digits a whole number >= 0.
    Anything else is an error naming it (a negative amount read as 'none', NaN as 'nanx').
    """
    for name, x in (("ours", ours), ("theirs", theirs)):
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real):
            raise TypeError(f"{name} must be a real number, got {x!r} ({type(x).__name__})")
        if not (math.isfinite(x) and x >= 0):
            raise ValueError(f"{name} must be a finite amount >= 0, got {x}")
    digits = check_whole(digits, "digits")
    if ours == theirs:
        return "the same"
    if ours < theirs:
        return f"{theirs / ours:,.{digits}f}x {fewer}" if ours > 0 else f"none ({fewer})"
    return f"{ours / theirs:,.{digits}f}x {more}" if theirs > 0 else "more (from none)"
