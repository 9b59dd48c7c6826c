"""Wide tables for notebooks: HTML that wraps long cells instead of long printed lines.

A printed line over ~100 characters wraps mid-number in a notebook of ordinary
width ("10 / 24"); an HTML table wraps inside its cells instead.

    from flashcourse.plots.tables import html_table
    display(html_table(["N", "ms"], [[1024, 1.5], [2048, 5.9]], caption="timings"))
"""

from __future__ import annotations

from html import escape


def html_table(header, rows, *, caption: str | None = None, align_right=None):
    """An IPython HTML object: a table with `header` (strings) and `rows` (lists of cells).

    Cells are shown with str() and escaped; every row must have len(header) cells.
    `align_right` is a set of column indices drawn right-aligned (default: the
    columns whose cells are all numbers).
    """
    from IPython.display import HTML
    header = [str(h) for h in header]
    rows = [list(r) for r in rows]
    for n, r in enumerate(rows):
        if len(r) != len(header):
            raise ValueError(f"rows[{n}] must have {len(header)} cells (one per header "
                             f"column), got {len(r)}")
    if align_right is None:
        align_right = {j for j in range(len(header))
                       if rows and all(isinstance(r[j], (int, float)) for r in rows)}
    style = "padding:2px 8px; border-bottom:1px solid #ddd; vertical-align:top"

    def td(j, v, tag="td"):
        side = "right" if j in align_right else "left"
        return f'<{tag} style="{style}; text-align:{side}">{escape(str(v))}</{tag}>'

    parts = ['<table style="border-collapse:collapse; font-size:90%">']
    if caption:
        parts.append(f'<caption style="text-align:left">{escape(caption)}</caption>')
    parts.append("<tr>" + "".join(td(j, h, "th") for j, h in enumerate(header)) + "</tr>")
    for r in rows:
        parts.append("<tr>" + "".join(td(j, v) for j, v in enumerate(r)) + "</tr>")
    parts.append("</table>")
    return HTML("".join(parts))
