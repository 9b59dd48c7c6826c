"""The backward explorer: what the standard and the tiled backward keep, move and compute.

    from flashcourse.widgets.backward import backward_explorer
    backward_explorer()                      # last line of a cell (shown once)

A slider over log2 N (N = Tq = Tk) and menus for d, the element size and the tile
Br = Bc; three log-log panels (`flashcourse.plots.backward.plot_backward_costs`, drawn
on the explorer's own figure) and the numbers at N (`plots.backward.summary_lines`).
Fast changes of several controls are serialised by the base explorer: the plot always
ends at the last setting, and no redraw starts while another one runs.
"""

from __future__ import annotations

from ..plots.backward import plot_backward_costs, summary_lines
from ._base import (LABEL_STYLE, Explorer, byte_ticks, check_int_arg, classed, count_ticks,
                    html_box, length_ticks, lines_html, menu, row)

HEAD_DIMS = (32, 64, 128)
ELEMENTS = (("fp16/bf16 (2 B)", 2), ("fp32 (4 B)", 4))
BLOCKS = (32, 64, 128, 256)
LOG2_N = (9, 17)                   # N from 512 to 131,072 positions


class BackwardExplorer(Explorer):
    """The backward explorer (a VBox). Controls are in `.controls`."""

    css_class = "fc-backward"
    blanked = ("summary",)

    def __init__(self, head_dim=64, log2_n=12, bytes_per_element=2, block=64):
        import ipywidgets as w

        self.log2_n = w.IntSlider(value=check_int_arg(log2_n, "log2_n", *LOG2_N),
                                  min=LOG2_N[0], max=LOG2_N[1], description="log2 N",
                                  continuous_update=False, style=LABEL_STYLE,
                                  layout=w.Layout(width="320px"))
        classed(self.log2_n, "fc-slider-log2n")
        self.head_dim = menu(HEAD_DIMS, head_dim, "head_dim", "d")
        self.element = menu(ELEMENTS, bytes_per_element, "bytes_per_element", "element")
        self.block = menu(BLOCKS, block, "block", "Br = Bc")
        self.controls = {"log2_n": self.log2_n, "head_dim": self.head_dim,
                         "element": self.element, "block": self.block}
        self.summary = html_box("fc-backward-readout")
        self.lines = []
        super().__init__(
            "<b>Backward pass</b>, one head: the standard backward (stores P) against the "
            "tiled one (recomputes P from lse)",
            [row(self.log2_n, self.head_dim, self.element, self.block)],
            self.summary, plot_px=(840, 300), plot_class="fc-backward-plot",
            side_by_side=False, layout=None)
        self.watch(self.log2_n, self.head_dim, self.element, self.block)
        self.refresh()

    def update(self):
        n, d = 2 ** self.log2_n.value, self.head_dim.value
        kw = dict(bytes_per_element=self.element.value, bytes_per_score=self.element.value,
                  block=self.block.value)
        lines = summary_lines(n, d, **kw)
        self.draw(lambda fig: _paint(fig, n, d, kw))
        self.lines = lines                  # the numbers change with the plot, not before it
        self.summary.value = lines_html(lines)


def _paint(fig, n, d, kw):
    plot_backward_costs(n, d, fig=fig, **kw)
    axes = fig.axes
    for ax in axes:                          # plain-text tick labels: no mathtext to parse
        length_ticks(ax.xaxis, 131072, 256)
        ax.tick_params(labelsize=9)
        ax.title.set_fontsize(9)
        ax.xaxis.label.set_fontsize(9)
    for ax in axes[:2]:
        lo, hi = ax.get_ylim()
        byte_ticks(ax.yaxis, hi, lo, step_log2=2)
    count_ticks(axes[2].yaxis, " FLOP")
    fig.tight_layout()


def backward_explorer(**kwargs) -> BackwardExplorer:
    """Widget: kept bytes, backward traffic and FLOPs of both backwards against N.

    Keyword arguments set the starting values (head_dim, log2_n, bytes_per_element,
    block); a value that is not on offer raises a ValueError naming it. Returns the
    widget without displaying it: put the call last in a cell (it is shown once).
    """
    return BackwardExplorer(**kwargs)
