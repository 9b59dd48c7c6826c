"""Live timings with their spread (notebook 05): how much of a timing plot is noise.

`plot_timing_spread` draws, for each version, the median time at each size (a line), the
range of all its repeats (a band, min..max) and a ring around every point whose order
the repeats do not resolve (`flashcourse.timing.unresolved`: its range overlaps another
version's at that size, or its own range at the next size although the work grows). An
optional dotted line is the time of a call that does almost no work: below about ten
times that line a timing measures the call's fixed cost (thread wake-up, argument
checks, allocation) more than the kernel.
"""

from __future__ import annotations

from ..timing import spread, unresolved
from .style import plt as _plt

#: the ring around a point whose order is not resolved
RING = dict(marker="o", ms=14, mfc="none", mec="black", mew=1.2, ls="none")


def flagged_points(sizes, runs: dict) -> set:
    """{(version, size)} of the points `unresolved` finds (either kind)."""
    out = set()
    for f in unresolved(sizes, runs):
        for name in f["names"]:
            out.add((name, f["n"]))
    return out


def plot_timing_spread(sizes, runs: dict, *, colours: dict | None = None,
                       overhead_ms: float | None = None, ax=None,
                       xlabel: str = "sequence length N (positions)",
                       title: str = "This machine, this run"):
    """Median (line) and min..max of the repeats (band) per version against size, on
    log-log axes, with rings on the unresolved points and, given `overhead_ms`, a dotted
    line at the time of a call with almost no work. runs: {version: [[ms of each repeat]
    at each size]}; colours: {version: colour}. Returns the Figure (legend beside the
    axes, the whole figure under 8.9 in wide)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter, LogLocator

    plt = _plt()
    sizes = list(sizes)
    if ax is None:
        fig, ax = plt.subplots(figsize=(5.6, 4.0), layout="constrained")
    else:
        fig = ax.figure
    colours = colours or {}
    flagged = flagged_points(sizes, runs)
    repeats = min(len(t) for per_size in runs.values() for t in per_size)
    for i, (name, per_size) in enumerate(runs.items()):
        lo, med, hi = zip(*(spread(t) for t in per_size))
        colour = colours.get(name, f"C{i}")
        ax.fill_between(sizes, lo, hi, color=colour, alpha=0.2, lw=0)
        ax.plot(sizes, med, "o-", color=colour, label=name)
        rings = [(n, m) for n, m in zip(sizes, med) if (name, n) in flagged]
        if rings:
            ax.plot(*zip(*rings), **RING)
    handles, labels = ax.get_legend_handles_labels()
    handles.append(Patch(color="0.5", alpha=0.3, lw=0))
    labels.append(f"band: fastest to slowest\nof {repeats} repeats")
    if flagged:
        handles.append(Line2D([], [], **RING))
        labels.append("ring: not resolved (range\noverlaps another version's\n"
                      "or its own at the next N)")
    if overhead_ms is not None:
        line = ax.axhline(overhead_ms, ls=":", color="0.35", lw=1.5)
        handles.append(line)
        labels.append("a call with almost no\nwork: fixed cost")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [f"{n:,}" for n in sizes])
    ax.tick_params(axis="x", which="minor", bottom=False)
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1, 2, 5)))   # 0.1, 0.2, 0.5, 1 ...
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda y, _: ""))
    ax.set_xlabel(xlabel)
    ax.set_ylabel("time per call (ms): median, and range")
    ax.set_title(title)
    ax.grid(alpha=0.3, which="major")
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    return fig
