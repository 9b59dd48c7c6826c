"""One style for every figure of the course (the gallery's practice: a small style module).

Sizes are chosen for where a figure is shown: JupyterLab's output area at a 1280 px wide
window is about 1,000 px, and the inline backend draws at 100 dpi with a tight bounding
box, so a figure of at most `MAX_WIDTH_IN` inches is shown at its own size (never shrunk),
and a font of `MIN_FONT_PT` points is that many points on the screen. `smallest_font_pt`
reports a figure's smallest visible text, which the tests hold to `MIN_FONT_PT`.
"""

from __future__ import annotations

#: inches; at the inline backend's 100 dpi, 890 px: shown at >= 95% of its width in
#: JupyterLab's output area at a 1280 px window (848 px with the file browser open)
MAX_WIDTH_IN = 8.9
#: points; no text of a figure is smaller
MIN_FONT_PT = 9.0
#: one colour per quantity, shared by every figure that shows it
COLOURS = {"fp32": "#1f77b4", "fp16": "#d62728", "fp8": "#2ca02c",
           "dense": "#d62728", "fa2": "#1f77b4", "fa1": "#9467bd", "flops": "#444444"}
#: one colour per warp (or per column) in the diagrams that tell them apart
WARP_COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860",
                "#da8bc3", "#8c8c8c")
#: the course's matplotlib settings, applied by `plt()`
RC = {"font.size": 10, "axes.titlesize": 10.5, "axes.labelsize": 10, "xtick.labelsize": 9.5,
      "ytick.labelsize": 9.5, "legend.fontsize": 9, "figure.titlesize": 11,
      "legend.frameon": False}


def plt():
    """matplotlib.pyplot with the course's style (imported lazily: `import flashcourse`
    does not load matplotlib)."""
    import matplotlib
    import matplotlib.pyplot as pyplot
    matplotlib.rcParams.update(RC)
    return pyplot


def smallest_font_pt(fig) -> float:
    """The smallest font size (points) of the visible, non-empty text in `fig`."""
    from matplotlib.text import Text
    fig.canvas.draw()
    sizes = [t.get_fontsize() for t in fig.findobj(Text)
             if t.get_visible() and t.get_text().strip() and _shown(t)]
    return min(sizes, default=float("inf"))


def _shown(text) -> bool:
    """Whether a Text artist is drawn: visible itself and inside a visible axes/figure."""
    artist = text
    while artist is not None:
        if not artist.get_visible():
            return False
        artist = getattr(artist, "axes", None) if artist is not text.axes else None
    return True


def width_in(fig) -> float:
    """The width (inches) of the figure as the inline backend shows it: its tight bounding
    box (which takes in a legend or label outside the axes) plus 0.1 in of padding on each
    side; at 100 dpi, its width in pixels / 100."""
    fig.canvas.draw()
    tight = fig.get_tightbbox(fig.canvas.get_renderer())
    return float(tight.width) + 0.2


def smallest_text(fig) -> tuple[float, str]:
    """(size in points, the text) of the smallest visible, non-empty text in `fig`."""
    from matplotlib.text import Text
    fig.canvas.draw()
    found = [(t.get_fontsize(), t.get_text().strip()[:40]) for t in fig.findobj(Text)
             if t.get_visible() and t.get_text().strip() and _shown(t)]
    return min(found, default=(float("inf"), ""))


#: set to a file path, every figure a notebook's cells show or leave open is measured (when
#: shown, or after the cell) and one JSON line per figure appended there, with the notebook's
#: path when a Jupyter server started the kernel (tests/test_notebooks.py reads it)
AUDIT_ENV = "FLASHCOURSE_FIGURE_AUDIT"


def install_audit(path) -> bool:
    """Measure every figure of this IPython kernel (width in inches, smallest text) into the
    JSON-lines file `path`, once per figure: when it is displayed (the inline backend of
    JupyterLab shows a figure and closes it, mid-cell on `plt.show()`), and after each cell
    for those still open (a non-interactive backend, Agg, shows nothing). Each line names
    the notebook (`notebook`: the path a Jupyter server gives the kernel, JPY_SESSION_NAME)
    when there is one, so kernels of one server can share the file. False outside IPython."""
    import json
    import os
    import sys
    import weakref
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    if ip is None:
        return False
    seen = weakref.WeakSet()
    notebook = os.environ.get("JPY_SESSION_NAME")

    def measure(fig):
        if fig in seen:
            return
        seen.add(fig)
        size, text = smallest_text(fig)
        record = {"cell": ip.execution_count, "width_in": width_in(fig), "min_font_pt": size,
                  "text": text}
        if notebook:
            record["notebook"] = notebook
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")

    def audit(*_):
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is None:
            return
        for num in pyplot.get_fignums():
            measure(pyplot.figure(num))

    formatter = ip.display_formatter
    format_plain = formatter.format

    def format_measured(obj, *args, **kwargs):
        figure = sys.modules.get("matplotlib.figure")
        if figure is not None and isinstance(obj, figure.Figure):
            measure(obj)
        return format_plain(obj, *args, **kwargs)

    formatter.format = format_measured            # display(fig), plt.show() inline, fig as a result
    ip.events.register("post_execute", audit)
    return True


def legend_below(ax, *, ncol: int = 1, gap_pt: float = 6, **kwargs):
    """A legend centred under `ax`, below its tick labels and x label (off the data, the
    gallery's practice); `kwargs` go to `ax.legend` (handles, labels, fontsize, ...). It is
    part of the axes' tight bounding box, so `tight_layout` and `width_in` count it."""
    from matplotlib.transforms import ScaledTranslation
    fig = ax.figure
    fig.canvas.draw()
    below = ax.xaxis.get_tightbbox(fig.canvas.get_renderer())     # ticks and label, pixels
    drop_in = (ax.bbox.y0 - below.y0) / fig.dpi + gap_pt / 72 if below is not None else 0.3
    shift = ScaledTranslation(0, -drop_in, fig.dpi_scale_trans)
    return ax.legend(loc="upper center", bbox_to_anchor=(0.5, 0), ncol=ncol,
                     bbox_transform=ax.transAxes + shift, **kwargs)


# --- shared helpers of the multi-panel figures (notebooks 06-11) ---------------------

#: inches: the figure width of a figure that spans the output area (a constrained layout
#: fills it; `width_in` adds the inline backend's padding: at most MAX_WIDTH_IN)
FULL_WIDTH_IN = 8.6


def legend_under_panels(fig, handles=None, labels=None, *, ncol: int = 3, **kwargs):
    """One legend for every panel of `fig`, under the panels (off the data). `fig` must
    use layout="constrained", which makes room for it; the handles default to those of
    the first axes."""
    if handles is None:
        handles, labels = fig.axes[0].get_legend_handles_labels()
    return fig.legend(handles, labels, loc="outside lower center", ncol=ncol,
                      frameon=False, **kwargs)


def shared_norm(*grids):
    """One colour scale (a matplotlib Normalize) for panels that show the same quantity:
    from the smallest to the largest finite value of all `grids` (so a colour means one
    value in every panel)."""
    import numpy as np
    from matplotlib.colors import Normalize
    values = np.concatenate([np.asarray(g, dtype=float).ravel() for g in grids])
    values = values[np.isfinite(values)]
    if values.size == 0:
        return Normalize(0.0, 1.0)
    return Normalize(float(values.min()), float(values.max()))


def text_colour(cmap, norm, value) -> str:
    """"k" or "w": the text colour that reads on the cell colour `cmap(norm(value))`."""
    r, g, b, _ = cmap(norm(value))
    return "k" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "w"
