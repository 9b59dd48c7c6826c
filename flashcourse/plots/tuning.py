"""The tuning sweep's heatmaps (notebook 07; `benchmarks/tune_sweep.py` saves them).

    cell_status(rows, d, N, rejected)   why a (Br, Bc) cell has no speed: "too big",
                                        "failed" or "not timed"
    plot_heatmap(rows, d, N, ax=...)    TFLOP/s over (Br, Bc) at one (d, N), the best
                                        thread count per cell
    plot_sweep_heatmaps(doc)            one panel per (d, N) of the recorded sweep, on one
                                        colour scale with one colour bar, the empty cells
                                        explained under the panels

The numbers are `flashcourse.sweep.heatmap_grid`'s (the recorded rows of
`benchmarks/results/h200_tuning_sweep.json`, `flashcourse.results.load_sweep`).
"""

from __future__ import annotations

import numpy as np

from ..sweep import heatmap_grid
from .style import FULL_WIDTH_IN, shared_norm, text_colour
from .style import plt as _plt

#: the colour of a cell with no speed (NaN)
EMPTY = "0.93"
#: why a cell has no speed, in words (the figure's note)
WHY = {"too big": "the tile needs more shared memory than one block may have "
                  "(it cannot launch)",
       "failed": "it launched but failed its check",
       "not timed": "this tile was not timed at this N"}


def _cmap():
    import matplotlib
    return matplotlib.colormaps["viridis"].with_extremes(bad=EMPTY)


def cell_status(rows, head_dim: int, seq_len: int, rejected=()) -> list:
    """For each cell of `heatmap_grid(rows, head_dim, seq_len)`: "ok" (timed), "too big"
    (every thread count of that tile was refused for its shared memory: `rejected` is the
    sweep document's `rejected[str(d)]` list), "failed" (timed rows that errored) or
    "not timed" (nothing at this N: the sweep's later phases time only the fastest tiles)."""
    bqs, bks, grid, _ = heatmap_grid(rows, head_dim, seq_len)
    refused = {tuple(r["config"][:2]) for r in rejected}
    out = []
    for i, bq in enumerate(bqs):
        line = []
        for j, bk in enumerate(bks):
            mine = [r for r in rows if (r["head_dim"], r["seq_len"], r["block_q"],
                                        r["block_k"]) == (head_dim, seq_len, bq, bk)]
            if np.isfinite(grid[i, j]):
                line.append("ok")
            elif any(r["status"] == "error" for r in mine):
                line.append("failed")
            elif (bq, bk) in refused:
                line.append("too big")
            else:
                line.append("not timed")
        out.append(line)
    return out


def plot_heatmap(rows, head_dim: int, seq_len: int, ax=None, title: str | None = None, *,
                 norm=None, rejected=(), colorbar: bool = True):
    """Heatmap of TFLOP/s over (block_q, block_k), the best thread count per cell; a cell
    without a speed says why (`cell_status`). `norm`: the colour scale (a matplotlib
    Normalize), to share one scale across panels; default: this panel's range."""
    bqs, bks, grid, thr = heatmap_grid(rows, head_dim, seq_len)
    status = cell_status(rows, head_dim, seq_len, rejected)
    if ax is None:
        _, ax = _plt().subplots(figsize=(4.8, 3.9), layout="constrained")
    norm = shared_norm(grid) if norm is None else norm
    cmap = _cmap()
    im = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, norm=norm, origin="lower")
    ax.set_xticks(range(len(bks)), [str(b) for b in bks])
    ax.set_yticks(range(len(bqs)), [str(b) for b in bqs])
    ax.set_xlabel("block_k = Bc (keys per tile)")
    ax.set_ylabel("block_q = Br\n(queries per tile)")
    for i in range(len(bqs)):
        for j in range(len(bks)):
            if status[i][j] != "ok":
                ax.text(j, i, status[i][j], ha="center", va="center", fontsize=9.5,
                        color="0.35", style="italic")
            else:
                ax.text(j, i, f"{grid[i, j]:.1f}\n{thr[i, j]} thr.", ha="center",
                        va="center", fontsize=9.5,
                        color=text_colour(cmap, norm, grid[i, j]))
    ax.set_title(title or f"TFLOP/s, d = {head_dim}, N = {seq_len}", fontsize=10.5)
    if colorbar:
        ax.figure.colorbar(im, ax=ax, label="TFLOP/s")
    return ax


def plot_sweep_heatmaps(doc: dict, path=None):
    """One heatmap per (head_dim, seq_len) of the sweep document, rows d, columns N, all
    on one colour scale (one colour bar: a colour means the same TFLOP/s in every panel);
    a note under the panels says what the cells show and why some are empty. Saves the
    figure to `path` when given."""
    rows = doc["rows"]
    dims = sorted({r["head_dim"] for r in rows})
    seqs = sorted({r["seq_len"] for r in rows})
    rejected = doc.get("rejected", {})
    norm = shared_norm(*(heatmap_grid(rows, d, n)[2] for d in dims for n in seqs))
    fig, axes = _plt().subplots(len(dims), len(seqs), squeeze=False, layout="constrained",
                                figsize=(FULL_WIDTH_IN, 3.3 * len(dims) + 1.3))
    seen = set()
    for i, d in enumerate(dims):
        for j, n in enumerate(seqs):
            plot_heatmap(rows, d, n, ax=axes[i][j], norm=norm, colorbar=False,
                         rejected=rejected.get(str(d), ()), title=f"d = {d}, N = {n}")
            if j:
                axes[i][j].set_ylabel("")                     # the row's first panel says it
            seen |= {s for line in cell_status(rows, d, n, rejected.get(str(d), ()))
                     for s in line}
    fig.colorbar(axes[0][0].images[0], ax=axes, label="TFLOP/s (one scale for all panels)",
                 shrink=0.8)
    env, problem = doc.get("environment", {}), doc.get("problem", {})
    fig.suptitle(f"{env.get('gpu', 'GPU')}: flash forward, fp32, B x H = "
                 f"{problem.get('batch_heads', '?')}\neach cell: the best TFLOP/s over "
                 "the thread counts, and that count", fontsize=10.5)
    notes = [f"{s}: {WHY[s]}" for s in WHY if s in seen]
    if "not timed" in seen and len(seqs) > 1:
        notes[-1] += (f" (after N = {seqs[0]}, the sweep timed only the fastest tiles "
                      "and the default)")
    if notes:
        fig.supxlabel("\n".join(notes), fontsize=9.5, x=0.02, ha="left", color="0.25")
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig
