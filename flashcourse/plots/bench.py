"""The benchmarks' shared figure: TFLOP/s against N, one panel per (d, causal).

Used by notebook 06 and by benchmarks/gpu_forward.py and benchmarks/gpu_tensor_core.py;
rows are their result rows (dicts with kernel, n, d, causal and, when timed, tflops).
"""

from __future__ import annotations

from .style import FULL_WIDTH_IN, legend_under_panels
from .style import plt as _plt


def tflops_grid(rows, names, dims, fmt, *, figsize=None, labels=None, ncol: int = 3,
                **plot_kw):
    """A figure of len(dims) x 2 panels (rows: head dimension d; columns: non-causal,
    causal) on one log-log scale, one line per kernel of `names` drawn with the format
    `fmt(name)` (and `plot_kw`), named in the legend by `labels[name]` (default: the
    name); one legend under the panels, in `ncol` columns. The figure has a constrained
    layout (which makes room for the legend: do not call tight_layout) and is
    `style.FULL_WIDTH_IN` wide unless `figsize` says otherwise. Returns (fig, axes); the
    caller adds a title and saves or shows it."""
    labels = labels or {}
    if figsize is None:
        figsize = (FULL_WIDTH_IN, 3.6 * len(dims) + 1.0)
    fig, axes = _plt().subplots(len(dims), 2, figsize=figsize, sharex=True, sharey=True,
                                squeeze=False, layout="constrained")
    for ai, d in enumerate(dims):
        for ci, causal in enumerate((False, True)):
            ax = axes[ai][ci]
            for name in names:
                pts = sorted((r["n"], r["tflops"]) for r in rows if r["kernel"] == name
                             and r["d"] == d and r["causal"] == causal and "tflops" in r)
                if pts:
                    x, y = zip(*pts)
                    ax.plot(x, y, fmt(name), label=labels.get(name, name), **plot_kw)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"d = {d}, {'causal' if causal else 'non-causal'}")
            if ai == len(dims) - 1:                 # shared x: named under the last row
                ax.set_xlabel("N = Tq = Tk (positions)")
            if ci == 0:
                ax.set_ylabel("TFLOP/s (log scale)")
            ax.grid(alpha=0.3)
    handles, texts = {}, {}
    for ax in axes.ravel():                         # every kernel once, in the order drawn
        for h, t in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(t, h)
            texts.setdefault(t, t)
    if handles:
        legend_under_panels(fig, list(handles.values()), list(texts), ncol=ncol)
    return fig, axes
