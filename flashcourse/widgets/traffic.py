"""The traffic explorer: outer-memory bytes of dense (Algorithm 0) against tiled attention.

    from flashcourse.widgets.traffic import traffic_explorer
    traffic_explorer()                       # last line of a cell

The numbers come from `flashcourse.widgets.readouts.traffic_readout` (pure, tested): bytes read
and written, FLOPs, arithmetic intensity, a roofline lower bound on time, and whether
the tile fits the on-chip budget. The button "paper's Br, Bc for this budget" uses
`flashcourse.widgets.readouts.paper_tile_that_fits`: the paper's rule sizes only the Q, K, V, O
tiles, while this explorer's footprint also counts the score tile and the fp32
accumulator, so the button takes the largest tile of the paper's shape that fits, and
says so.
"""

from __future__ import annotations

import numpy as np

from ..gpus import GPUS
from ..memory import format_bytes
from ..printing import compare
from .readouts import (DEFAULT_GPU, DTYPES, MAX_BLOCK, MAX_HEAD_DIM, MAX_LOG2_LENGTH,
                        paper_tile_that_fits, traffic_readout)
from ._base import (LABEL_STYLE, LOOP_ORDERS, CountBox, Explorer, LengthControl, auto_width,
                    byte_ticks, check_choice, check_flag, check_int_arg, gpu_menu, html_box,
                    lines_html, message_html, one_line, row)


class TrafficExplorer(Explorer):
    """The traffic explorer (a VBox). Controls are in `.controls`."""

    css_class = "fc-traffic"
    blanked = ("details",)

    def __init__(self, t=4096, head_dim=64, block_q=64, block_k=64, budget_kib=100,
                 dtype="fp16", loop_order="fa2", causal=False, gpu=DEFAULT_GPU):
        import ipywidgets as w

        check_int_arg(budget_kib, "budget_kib", 4, 512)
        check_choice(dtype, "dtype", DTYPES)
        check_choice(loop_order, "loop_order", LOOP_ORDERS)
        check_flag(causal, "causal")
        check_choice(gpu, "gpu", list(GPUS))
        self.t = LengthControl("T = Tq = Tk", t, "t", "T (sequence length)", MAX_LOG2_LENGTH,
                               "fc-slider-t")
        self.head_dim = CountBox("d (head dim)", head_dim, "head_dim", "d (head dimension)",
                                 1, MAX_HEAD_DIM, width="150px")
        self.block_q = CountBox("block_q (Br)", block_q, "block_q", "block_q (Br)", 1,
                                MAX_BLOCK, width="160px")
        self.block_k = CountBox("block_k (Bc)", block_k, "block_k", "block_k (Bc)", 1,
                                MAX_BLOCK, width="160px")
        self.budget = w.IntSlider(value=budget_kib, min=4, max=512, step=4,
                                  description="on-chip budget (KiB)", continuous_update=False,
                                  style=LABEL_STYLE, layout=w.Layout(width="400px"))
        self.budget.add_class("fc-slider-budget")
        self.paper = w.Button(description="paper's Br, Bc for this budget",
                              tooltip="the paper's tile shape (Br = min(Bc, d)), the largest "
                                      "whose whole footprint fits the budget",
                              layout=w.Layout(width="auto"))
        auto = auto_width()
        self.dtype = w.Dropdown(options=list(DTYPES), value=dtype, description="dtype", **auto)
        self.loop_order = w.Dropdown(options=LOOP_ORDERS, value=loop_order,
                                     description="loop order", **auto)
        self.causal = w.Checkbox(value=causal, description="causal", **auto)
        self.gpu = gpu_menu(gpu)
        self.controls = {"t": self.t.text, "t_slider": self.t.slider,
                         "head_dim": self.head_dim.text, "block_q": self.block_q.text,
                         "block_k": self.block_k.text, "budget_kib": self.budget,
                         "dtype": self.dtype, "loop_order": self.loop_order,
                         "causal": self.causal, "gpu": self.gpu}
        self.note = html_box("fc-note")              # what the paper button chose, and why
        self.details = html_box("fc-traffic-readout")
        self._setting = False
        super().__init__(
            "<b>Outer-memory traffic</b> of one head: dense (Algorithm 0) against tiled",
            [self.t.box,
             row(self.head_dim.text, self.block_q.text, self.block_k.text, self.dtype),
             row(self.budget, self.paper),
             row(self.loop_order, self.causal, self.gpu),
             self.note],
            self.details, plot_px=(520, 240), plot_class="fc-traffic-plot")
        self.watch(self.t, self.head_dim, self.block_q, self.block_k, self.budget,
                   self.dtype, self.loop_order, self.causal, self.gpu)
        for c in (self.t, self.head_dim, self.block_q, self.block_k):   # typed: note is stale
            c.observe(self._forget_note)
        self.budget.observe(self._forget_note, names="value")
        self.dtype.observe(self._forget_note, names="value")
        self.paper.on_click(self.use_paper_blocks)
        self.refresh()

    def _forget_note(self, _change=None):
        if not self._setting:
            self.note.value = ""

    def use_paper_blocks(self, _button=None):
        """Set Br, Bc to the paper's tile shape that fits the budget (see the module doc)."""
        try:
            br, bc, pbr, pbc = paper_tile_that_fits(self.budget.value * 1024,
                                                    self.head_dim.value, self.dtype.value,
                                                    self.t.value)
        except Exception as exc:  # noqa: BLE001 - a message, never a traceback
            self.message.value = message_html(one_line(exc))
            return
        self._setting = True
        try:
            self.block_q.text.value, self.block_k.text.value = f"{br:,}", f"{bc:,}"
        finally:
            self._setting = False
        d = self.head_dim.value
        if (br, bc) == (pbr, pbc):
            text = (f"Paper's rule for a {self.budget.value} KiB budget: Bc = ceil(M / 4d) = "
                    f"{pbc:,}, Br = min(Bc, d) = {pbr:,} (M = budget / e elements, d = {d}).")
        else:
            text = (f"Paper's rule for a {self.budget.value} KiB budget: Bc = ceil(M / 4d) = "
                    f"{pbc:,}, Br = min(Bc, d) = {pbr:,}. That rule counts only the Q, K, V "
                    f"and O tiles; the footprint here also counts the Br x Bc fp32 score tile, "
                    f"the fp32 accumulator and m, l. So the button chose Br = {br:,}, "
                    f"Bc = {bc:,}: the largest tile of the paper's shape (Br = min(Bc, d), "
                    f"at most T) whose whole footprint fits.")
        self.note.value = f'<div style="color:#1f4e79;white-space:normal">{text}</div>'
        self.refresh()

    def refresh(self, _change=None):
        if not self._setting:                       # the paper button sets two boxes: one
            super().refresh()                       # refresh after both

    def update(self):
        r = traffic_readout(self.t.value, self.head_dim.value, self.block_q.value,
                            self.block_k.value, self.budget.value * 1024, self.dtype.value,
                            self.loop_order.value, self.causal.value, self.gpu.value)
        self.readout = r
        self.warning.value = "".join(message_html(x, "warning") for x in r.warnings)
        self.details.value = lines_html(r.lines)
        order = self.loop_order.value
        self.draw(lambda fig: _paint(fig, r, order))


def _paint(fig, r, order):
    """Bytes read and written by dense and tiled (log scale, exact values as labels)."""
    ax = fig.add_subplot()
    names = ["dense\n(Algorithm 0)", f"tiled\n({order})"]
    reads = [float(r.dense.read_bytes), float(r.tiled.read_bytes)]
    writes = [float(r.dense.write_bytes), float(r.tiled.write_bytes)]
    y = np.arange(2)
    ax.barh(y - 0.2, reads, height=0.38, color="C0", label="read")
    ax.barh(y + 0.2, writes, height=0.38, color="C1", label="written")
    for yy, val in list(zip(y - 0.2, reads)) + list(zip(y + 0.2, writes)):
        ax.text(val, yy, " " + format_bytes(int(val)).split(" = ")[-1], va="center",
                fontsize=9)
    if not r.fits_budget:
        ax.text(0.99, 0.5, "tile does not fit\nthe on-chip budget", transform=ax.transAxes,
                ha="right", va="center", color="#b00020", fontsize=9)
    ax.set_yticks(y, names)
    ax.invert_yaxis()
    ax.set_xscale("log", base=2)
    lo, hi = min(reads + writes) / 8, max(reads + writes) * 16
    ax.set_xlim(lo, hi)
    byte_ticks(ax.xaxis, hi, lo, step_log2=2)
    ax.set_xlabel("bytes moved to/from outer memory (log scale)", fontsize=9)
    ax.tick_params(labelsize=9)
    tiled_vs_dense = compare(r.tiled.total_bytes, r.dense.total_bytes, digits=2)
    ax.set_title(f"tiled moves {tiled_vs_dense}"
                 + (" than dense" if "x" in tiled_vs_dense else " as dense")
                 + f"; both {r.flops:.3g} FLOP", fontsize=9)
    ax.legend(loc="lower right", fontsize=9)


def traffic_explorer(**kwargs) -> TrafficExplorer:
    """Widget: dense against tiled traffic, FLOPs, intensity, roofline time, tile fit.

    Keyword arguments set the starting values (t, head_dim, block_q, block_k, budget_kib,
    dtype, loop_order, causal, gpu); a value of the wrong type raises a ValueError naming
    it. Returns the widget: put it last in a cell to show it (it is shown once).
    """
    return TrafficExplorer(**kwargs)
