"""The score-memory explorer: M_score = Tq x Tk x s bytes per head, against a GPU's memories.

    from flashcourse.widgets.score_memory import score_memory_explorer
    score_memory_explorer(t_query=4096, dtype="fp16", gpu="H200")    # last line of a cell

The numbers come from `flashcourse.widgets.readouts.score_memory_readout` and
`score_memory_curve` (pure, tested). Lengths go from 1 to 2**40 positions on the slider
and in the boxes alike; typed lengths need not be powers of two ('3000', '3e9').
"""

from __future__ import annotations

from ..gpus import GPUS
from ..memory import format_bytes
from .readouts import (DEFAULT_GPU, DTYPES, MAX_COUNT, MAX_LOG2_LENGTH, score_memory_curve,
                        score_memory_readout)
from ._base import (CountBox, Explorer, LengthControl, auto_width, byte_ticks, check_choice,
                    check_flag, classed, gpu_menu, html_box, length_ticks, lines_html, row)


class ScoreMemoryExplorer(Explorer):
    """The score-memory explorer (a VBox). Controls are in `.controls`."""

    css_class = "fc-score-memory"

    def __init__(self, t_query=4096, t_key=4096, dtype="fp16", batch=1, heads=1,
                 causal=False, gpu=DEFAULT_GPU, tied=True):
        import ipywidgets as w

        check_choice(dtype, "dtype", DTYPES)
        check_choice(gpu, "gpu", list(GPUS))
        check_flag(causal, "causal")
        check_flag(tied, "tied")
        self.tq = LengthControl("Tq (query positions)", t_query, "t_query",
                                "Tq (query positions)", MAX_LOG2_LENGTH, "fc-slider-tq")
        self.tk = LengthControl("Tk (key positions)", t_key, "t_key", "Tk (key positions)",
                                MAX_LOG2_LENGTH, "fc-slider-tk")
        auto = auto_width()
        self.tied = w.Checkbox(value=tied, description="Tk = Tq", **auto)
        self.dtype = w.Dropdown(options=list(DTYPES), value=dtype, description="score dtype",
                                **auto)
        self.batch = CountBox("batch B", batch, "batch", "batch", 1, MAX_COUNT)
        self.heads = CountBox("heads H", heads, "heads", "heads", 1, MAX_COUNT)
        self.causal = w.Checkbox(value=causal, description="causal", **auto)
        self.gpu = gpu_menu(gpu)
        self.controls = {"t_query": self.tq.text, "t_key": self.tk.text,
                         "t_query_slider": self.tq.slider, "t_key_slider": self.tk.slider,
                         "tied": self.tied, "dtype": self.dtype, "batch": self.batch.text,
                         "heads": self.heads.text, "causal": self.causal, "gpu": self.gpu}
        self.headline = classed(w.Label(value=""), "fc-score-readout")
        self.details = html_box("fc-score-details")
        self._copying = False
        super().__init__(
            "<b>Score-matrix memory</b>: M_score = Tq &times; Tk &times; s bytes per head "
            "and request",
            [self.tq.box, row(self.tk.box, self.tied),
             row(self.dtype, self.batch.text, self.heads.text, self.causal, self.gpu)],
            w.VBox([self.headline, self.details]), plot_px=(560, 420),
            plot_class="fc-score-plot")
        self.tq.observe(self._on_tq)
        self.tied.observe(self._on_tied, names="value")
        self.watch(self.tk, self.dtype, self.batch, self.heads, self.causal, self.gpu)
        self._on_tied(None)

    def _on_tq(self, _change):
        if self.tied.value:                         # copy Tq into Tk, then one refresh
            self._copying = True
            try:
                self.tk.text.value = self.tq.text.value
            finally:
                self._copying = False
        self.refresh()

    def _on_tied(self, _change):
        self.tk.set_disabled(self.tied.value)
        self._on_tq(None)

    def refresh(self, _change=None):
        if not self._copying:
            super().refresh()

    def clear(self):
        super().clear()
        self.headline.value = "M_score per head: (invalid setting)"
        self.details.value = ""

    def update(self):
        args = (self.tq.value, self.tk.value, self.dtype.value, self.batch.value,
                self.heads.value)
        r = score_memory_readout(*args, self.causal.value, self.gpu.value)
        curve = score_memory_curve(*args, self.tied.value, self.gpu.value)
        self.readout = r
        self.headline.value = r.headline
        self.details.value = lines_html(r.lines[1:])
        self.draw(lambda fig: _paint(fig, r, curve))


def _paint(fig, r, c):
    """M_score against length (log-log), the GPU's memories as lines, the setting as a dot."""
    ax = fig.add_subplot()
    bh = r.batch * r.heads
    ax.loglog(c.x, c.per_head, base=2, color="C0", label="one head")
    if bh > 1:
        ax.loglog(c.x, c.batch, base=2, color="C1", label=f"batch (B x H = {bh:,})")
    colours = {"on-chip memory per SM": "C2", "L2 cache": "C4", "device memory": "C3"}
    for label, cap, n_fit, which in c.limits:
        col = colours[label]
        text = f"{label} {format_bytes(cap).split(' = ')[-1]}"
        whose = "one head" if which == "per_head" else "the batch"
        text += (f": {whose} fits up to {n_fit:,}" if n_fit is not None
                 else f": {whose} never fits")
        ax.axhline(cap, color=col, lw=1, ls="--", label=text)
        if n_fit is not None:
            ax.axvline(n_fit, color=col, lw=0.8, ls=":")
    x_now = float(c.current_x)
    ax.plot([x_now], [float(c.current_per_head)], "o", color="C0", ms=7, zorder=5)
    if bh > 1:
        ax.plot([x_now], [float(c.current_batch)], "o", color="C1", ms=7, zorder=5)
    ax.annotate(f"now: {format_bytes(c.current_per_head).split(' = ')[-1]} per head",
                (x_now, float(c.current_per_head)), textcoords="offset points",
                xytext=(-10, 8), ha="right", fontsize=9, color="C0",
                bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="none", alpha=0.8))
    ax.set_xlabel("sequence length N = Tq = Tk (positions)" if c.tied
                  else f"key length Tk (positions), Tq = {r.t_query:,} fixed", fontsize=9)
    ax.set_ylabel(f"M_score (bytes, {r.dtype})", fontsize=9)
    x_hi = float(c.x[-1])                       # >= 2 x the current length: the dot shows
    y_hi = max(float(c.batch[-1]), float(r.gpu.memory_bytes), float(c.current_batch)) * 64
    ax.set_xlim(1, x_hi)
    ax.set_ylim(1, y_hi)
    length_ticks(ax.xaxis, x_hi)
    byte_ticks(ax.yaxis, y_hi)
    ax.tick_params(labelsize=9)
    ax.grid(True, which="major", alpha=0.3)
    fig.legend(loc="outside lower center", ncol=1, fontsize=9, frameon=False)  # off the data


def score_memory_explorer(**kwargs) -> ScoreMemoryExplorer:
    """Widget: M_score per head and per batch against a GPU's memories, with a plot.

    Keyword arguments set the starting values (t_query, t_key, dtype, batch, heads,
    causal, gpu, tied); a value of the wrong type raises a ValueError naming it. Returns
    the widget: put it last in a cell to show it (it is shown once).
    """
    return ScoreMemoryExplorer(**kwargs)
