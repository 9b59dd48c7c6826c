"""Printed text that fits a JupyterLab output area: lines under 100 characters.

A line longer than about 100 characters wraps mid-number in JupyterLab at 1400 px,
so everything the course prints for the learner goes through `wrap_lines` (or
`say`, which prints it). tests/test_notebooks.py checks every printed line.
"""

from __future__ import annotations

import textwrap

LINE_WIDTH = 96   # characters; the notebook test allows 100


def wrap_lines(text, width: int = LINE_WIDTH) -> str:
    """Wrap each line of `text` longer than `width` at spaces; keep its indent (+4 after).

    Short lines are left exactly as they are (aligned tables keep their spacing).
    """
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
    """`print`, with every line wrapped by `wrap_lines`."""
    print(wrap_lines(sep.join(str(p) for p in parts)))
