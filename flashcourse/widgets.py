"""Three interactive views of memory and traffic (ipywidgets + matplotlib).

    score_memory_explorer()  M_score = Tq x Tk x s per head and per batch, against a GPU's
                             on-chip memory per SM, L2 cache and device memory
    traffic_explorer()       outer-memory bytes of dense (Algorithm 0) and tiled attention,
                             FLOPs, arithmetic intensity, a roofline lower bound on time, and
                             whether the tile fits the on-chip budget
    tile_schedule()          the Tq x Tk score matrix as tiles; a step slider (with Play)
                             replays a real `flashcourse.tiled.forward` run, tile by tile

Each widget is a thin view. The numbers come from the pure functions of
`flashcourse.readouts` (re-exported here), tested without a browser:

    score_memory_readout(t_query, t_key, dtype, batch, heads, causal, gpu)
    score_memory_curve(t_query, t_key, dtype, batch, heads, tied, gpu)
    traffic_readout(t, head_dim, block_q, block_k, budget_bytes, dtype, loop_order, causal, gpu)
    schedule_steps(t_query, t_key, head_dim, block_q, block_k, causal, loop_order)

They raise ValueError (a message that names the setting) for settings that make no
sense; the widgets catch it and show the message instead of a traceback. Byte counts
are printed exactly, with thousands separators, and in binary units
(`flashcourse.memory.format_bytes`: 33,554,432 B = 32 MiB).

Each widget carries a CSS class (`fc-score-memory`, `fc-traffic`, `fc-schedule`;
readouts `fc-...-readout`, messages `fc-message`) so a browser test can find it.
Plots are drawn with matplotlib's object API (no pyplot state) into PNG bytes shown by
one `ipywidgets.Image`, so a redraw replaces one image and works with any backend.
"""

from __future__ import annotations

import html
import io
import math

import ipywidgets as w
import numpy as np

from .gpus import GPUS
from .memory import format_bytes
from .readouts import (DEFAULT_GPU, DTYPES, MAX_LOG2_LENGTH, MAX_SCHEDULE_LENGTH,  # noqa: F401
                       MAX_SCHEDULE_TILES, ScheduleStep, ScoreMemoryCurve, ScoreMemoryReadout,
                       TrafficReadout, _block_edges, _dtype_bytes, _positive_int,
                       describe_step, format_flops, format_seconds, schedule_steps,
                       score_memory_curve, score_memory_readout, traffic_readout)
from .traffic import paper_block_sizes, tiled_traffic

# ----------------------------------------------------------------------------------------
# Views
# ----------------------------------------------------------------------------------------

_LABEL_STYLE = {"description_width": "initial"}


def _figure(width, height):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _message_html(text: str, level: str = "error") -> str:
    if not text:
        return ""
    colour = {"error": "#b00020", "warning": "#8a5300"}[level]
    icon = {"error": "Cannot show this setting:", "warning": "Warning:"}[level]
    return (f'<div style="color:{colour};border-left:4px solid {colour};padding:2px 8px;'
            f'margin:4px 0;white-space:normal;line-height:1.45"><b>{icon}</b> '
            f'{html.escape(text)}</div>')


def _lines_html(lines) -> str:
    body = "".join(f"<div>{html.escape(x)}</div>" for x in lines)
    return f'<div style="line-height:1.45;margin:2px 0">{body}</div>'


_LOOP_ORDERS = [("fa2: outer loop over query blocks", "fa2"),
                ("fa1: outer loop over key blocks", "fa1")]


def _show(widget, flag: bool) -> None:
    widget.layout.display = None if flag else "none"


def _length_ticks(axis, hi) -> None:
    """Ticks at 1, 16, 256, 4K, 64K, 1M, ... positions (every 4th power of two)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    def label(x, _pos):
        x = int(round(x))
        for unit, size in (("M", 2 ** 20), ("K", 2 ** 10)):
            if x >= size and x % size == 0:
                return f"{x // size}{unit}"
        return f"{x}"

    axis.set_major_locator(FixedLocator([2.0 ** p for p in range(0, int(math.log2(hi)) + 1, 4)]))
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(FuncFormatter(label))


def _byte_ticks(axis, hi, lo=1.0, step_log2=10) -> None:
    """Ticks at every `step_log2`-th power of two in [lo, hi], labelled '1 MiB', '4 MiB'."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    from .memory import binary_size

    powers = range(0, int(math.log2(hi)) + 1, step_log2)
    axis.set_major_locator(FixedLocator([2.0 ** p for p in powers if lo <= 2.0 ** p <= hi]))
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(FuncFormatter(lambda x, _pos: binary_size(int(x))))


class _LengthControl:
    """A log-scale slider over powers of two plus a free-entry box, kept in sync.

    The box holds the value (any whole number; 0 or negative gives a message in the
    widget); the slider jumps between powers of two 1 .. 2**max_log2, so one arrow key
    press doubles or halves the length.
    """

    def __init__(self, description, value, max_log2=MAX_LOG2_LENGTH, slider_class=""):
        self.powers = [2 ** p for p in range(max_log2 + 1)]
        below = [p for p in self.powers if p <= value]
        start = below[-1] if below else 1
        self.slider = w.SelectionSlider(
            options=[(f"{p:,}", p) for p in self.powers], value=start,
            description=description, continuous_update=False, style=_LABEL_STYLE,
            layout=w.Layout(width="430px"))
        if slider_class:
            self.slider.add_class(slider_class)
        self.text = w.IntText(value=value, layout=w.Layout(width="110px"))
        self.box = w.HBox([self.slider, self.text])
        self._syncing = False
        self.slider.observe(self._from_slider, names="value")
        self.text.observe(self._from_text, names="value")

    def _from_slider(self, change):
        if not self._syncing:
            self._syncing = True
            try:
                self.text.value = change["new"]
            finally:
                self._syncing = False

    def _from_text(self, change):
        """Move the slider to the largest power of two <= the typed length."""
        below = [p for p in self.powers if p <= change["new"]]
        if not self._syncing and below:
            self._syncing = True
            try:
                self.slider.value = below[-1]
            finally:
                self._syncing = False

    @property
    def value(self):
        return self.text.value

    @value.setter
    def value(self, v):
        self.text.value = v

    def observe(self, fn):
        self.text.observe(fn, names="value")

    def set_disabled(self, flag):
        self.slider.disabled = flag
        self.text.disabled = flag


class ScoreMemoryExplorer(w.VBox):
    """The score-memory explorer widget (a VBox). Controls are in `.controls`."""

    def __init__(self, t_query=4096, t_key=4096, dtype="fp16", batch=1, heads=1,
                 causal=False, gpu=DEFAULT_GPU, tied=True):
        self.tq = _LengthControl("Tq (query positions)", t_query, slider_class="fc-slider-tq")
        self.tk = _LengthControl("Tk (key positions)", t_key, slider_class="fc-slider-tk")
        self.tied = w.Checkbox(value=tied, description="Tk = Tq", style=_LABEL_STYLE,
                               layout=w.Layout(width="auto"))
        dd = dict(style=_LABEL_STYLE, layout=w.Layout(width="auto"))
        self.dtype = w.Dropdown(options=list(DTYPES), value=dtype,
                                description="score dtype", **dd)
        self.batch = w.BoundedIntText(value=batch, min=0, max=1_000_000, description="batch B",
                                      style=_LABEL_STYLE, layout=w.Layout(width="170px"))
        self.heads = w.BoundedIntText(value=heads, min=0, max=1_000_000,
                                      description="heads H", style=_LABEL_STYLE,
                                      layout=w.Layout(width="170px"))
        self.causal = w.Checkbox(value=causal, description="causal", style=_LABEL_STYLE,
                                 layout=w.Layout(width="auto"))
        self.gpu = w.Dropdown(options=list(GPUS), value=gpu, description="GPU",
                              style=_LABEL_STYLE, layout=w.Layout(width="auto",
                                                                  margin="2px 2px 2px 24px"))
        self.controls = {"t_query": self.tq.text, "t_key": self.tk.text,
                         "t_query_slider": self.tq.slider, "t_key_slider": self.tk.slider,
                         "tied": self.tied, "dtype": self.dtype, "batch": self.batch,
                         "heads": self.heads, "causal": self.causal, "gpu": self.gpu}
        self.headline = w.Label(value="")
        self.headline.add_class("fc-score-readout")
        self.details = w.HTML(value="")
        self.details.add_class("fc-score-details")
        self.message = w.HTML(value="")
        self.message.add_class("fc-message")
        self.image = w.Image(format="png", layout=w.Layout(max_width="100%", height="auto"))
        self.image.add_class("fc-score-plot")
        self._fig = _figure(8.0, 3.8)
        self._busy = False
        self.readout = None
        super().__init__([
            w.HTML("<b>Score-matrix memory</b>: M_score = Tq &times; Tk &times; s bytes "
                   "per head and request"),
            self.tq.box, w.HBox([self.tk.box, self.tied]),
            w.HBox([self.dtype, self.batch, self.heads, self.causal, self.gpu],
                   layout=w.Layout(flex_flow="row wrap")),
            self.message, self.headline, self.details, self.image])
        self.add_class("fc-score-memory")
        self.tq.observe(self._on_tq)
        for c in (self.tk.text, self.dtype, self.batch, self.heads, self.causal, self.gpu):
            c.observe(self._refresh, names="value")
        self.tied.observe(self._on_tied, names="value")
        self._on_tied(None)

    def _on_tq(self, _change):
        if self.tied.value:
            self._busy = True
            try:
                self.tk.value = self.tq.value
            finally:
                self._busy = False
        self._refresh()

    def _on_tied(self, _change):
        self.tk.set_disabled(self.tied.value)
        self._on_tq(None)

    def _refresh(self, _change=None):
        if self._busy:
            return
        args = (self.tq.value, self.tk.value, self.dtype.value, self.batch.value,
                self.heads.value)
        try:
            r = score_memory_readout(*args, self.causal.value, self.gpu.value)
            curve = score_memory_curve(*args, self.tied.value, self.gpu.value)
        except ValueError as exc:
            self.message.value = _message_html(str(exc))
            self.headline.value = "M_score per head: (invalid setting)"
            self.details.value = ""
            _show(self.image, False)
            return
        self.readout = r
        self.message.value = ""
        _show(self.image, True)
        self.headline.value = r.headline
        self.details.value = _lines_html(r.lines[1:])
        self._draw(r, curve)

    def _draw(self, r, c):
        fig = self._fig
        fig.clear()
        ax = fig.add_subplot()
        ax.loglog(c.x, c.per_head, base=2, color="C0", label="one head")
        if r.batch * r.heads > 1:
            ax.loglog(c.x, c.batch, base=2, color="C1",
                      label=f"batch (B x H = {r.batch * r.heads:,})")
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
        ax.plot([c.current_x], [c.current_per_head], "o", color="C0", ms=7, zorder=5)
        if r.batch * r.heads > 1:
            ax.plot([c.current_x], [c.current_batch], "o", color="C1", ms=7, zorder=5)
        ax.annotate(f"now: {format_bytes(c.current_per_head).split(' = ')[-1]} per head",
                    (c.current_x, c.current_per_head), textcoords="offset points",
                    xytext=(-10, 8), ha="right", fontsize=9, color="C0",
                    bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="none", alpha=0.8))
        ax.set_xlabel("sequence length N = Tq = Tk (positions)" if c.tied
                      else f"key length Tk (positions), Tq = {r.t_query:,} fixed")
        ax.set_ylabel(f"M_score (bytes, {r.dtype})")
        ax.set_xlim(1, c.x[-1])
        ax.set_ylim(1, max(c.batch[-1], r.gpu.memory_bytes) * 64)
        _length_ticks(ax.xaxis, c.x[-1])
        _byte_ticks(ax.yaxis, ax.get_ylim()[1])
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
        self.image.value = _png(fig)


def score_memory_explorer(**kwargs) -> ScoreMemoryExplorer:
    """Widget: M_score per head and per batch against a GPU's memories, with a plot.

    Keyword arguments set the starting values (t_query, t_key, dtype, batch, heads,
    causal, gpu, tied). Returns the widget; put it last in a cell to show it.
    """
    return ScoreMemoryExplorer(**kwargs)


class TrafficExplorer(w.VBox):
    """The traffic explorer widget (a VBox). Controls are in `.controls`."""

    def __init__(self, t=4096, head_dim=64, block_q=64, block_k=64, budget_kib=100,
                 dtype="fp16", loop_order="fa2", causal=False, gpu=DEFAULT_GPU):
        self.t = _LengthControl("T = Tq = Tk", t, slider_class="fc-slider-t")
        narrow = dict(style=_LABEL_STYLE, layout=w.Layout(width="190px"))
        self.head_dim = w.IntText(value=head_dim, description="d (head dim)", **narrow)
        self.block_q = w.IntText(value=block_q, description="block_q (Br)", **narrow)
        self.block_k = w.IntText(value=block_k, description="block_k (Bc)", **narrow)
        self.budget = w.IntSlider(value=budget_kib, min=4, max=512, step=4,
                                  description="on-chip budget (KiB)", continuous_update=False,
                                  style=_LABEL_STYLE, layout=w.Layout(width="430px"))
        self.budget.add_class("fc-slider-budget")
        self.paper = w.Button(description="paper's Br, Bc for this budget",
                              layout=w.Layout(width="auto"))
        auto = dict(style=_LABEL_STYLE, layout=w.Layout(width="auto"))
        self.dtype = w.Dropdown(options=list(DTYPES), value=dtype, description="dtype", **auto)
        self.loop_order = w.Dropdown(options=_LOOP_ORDERS, value=loop_order,
                                     description="loop order", **auto)
        self.causal = w.Checkbox(value=causal, description="causal", **auto)
        self.gpu = w.Dropdown(options=list(GPUS), value=gpu, description="GPU",
                              style=_LABEL_STYLE, layout=w.Layout(width="auto",
                                                                  margin="2px 2px 2px 24px"))
        self.controls = {"t": self.t.text, "t_slider": self.t.slider, "head_dim": self.head_dim,
                         "block_q": self.block_q, "block_k": self.block_k,
                         "budget_kib": self.budget, "dtype": self.dtype,
                         "loop_order": self.loop_order, "causal": self.causal, "gpu": self.gpu}
        self.message = w.HTML(value="")
        self.message.add_class("fc-message")
        self.warning = w.HTML(value="")
        self.warning.add_class("fc-warning")
        self.details = w.HTML(value="")
        self.details.add_class("fc-traffic-readout")
        self.image = w.Image(format="png", layout=w.Layout(max_width="100%", height="auto"))
        self.image.add_class("fc-traffic-plot")
        self._fig = _figure(8.0, 2.9)
        self.readout = None
        super().__init__([
            w.HTML("<b>Outer-memory traffic</b> of one head: dense (Algorithm 0) "
                   "against tiled"),
            self.t.box,
            w.HBox([self.head_dim, self.block_q, self.block_k],
                   layout=w.Layout(flex_flow="row wrap")),
            w.HBox([self.budget, self.paper], layout=w.Layout(flex_flow="row wrap")),
            w.HBox([self.dtype, self.loop_order, self.causal, self.gpu],
                   layout=w.Layout(flex_flow="row wrap")),
            self.message, self.warning, self.details, self.image])
        self.add_class("fc-traffic")
        self.t.observe(self._refresh)
        for c in (self.head_dim, self.block_q, self.block_k, self.budget, self.dtype,
                  self.loop_order, self.causal, self.gpu):
            c.observe(self._refresh, names="value")
        self.paper.on_click(self._use_paper_blocks)
        self._busy = False
        self._refresh()

    def _use_paper_blocks(self, _button=None):
        try:
            e = _dtype_bytes(self.dtype.value)
            d = _positive_int(self.head_dim.value, "d (head dimension)")
            t = _positive_int(self.t.value, "T (sequence length)")
            br, bc = paper_block_sizes(self.budget.value * 1024, d, e)
            br, bc = min(br, t), min(bc, t)           # a block never needs more than T rows
        except ValueError as exc:
            self.message.value = _message_html(str(exc))
            return
        self._busy = True
        try:
            self.block_q.value, self.block_k.value = int(br), int(bc)
        finally:
            self._busy = False
        self._refresh()

    def _refresh(self, _change=None):
        if self._busy:
            return
        try:
            r = traffic_readout(self.t.value, self.head_dim.value, self.block_q.value,
                                self.block_k.value, self.budget.value * 1024, self.dtype.value,
                                self.loop_order.value, self.causal.value, self.gpu.value)
        except ValueError as exc:
            self.message.value = _message_html(str(exc))
            self.warning.value = ""
            self.details.value = ""
            _show(self.image, False)
            return
        self.readout = r
        self.message.value = ""
        _show(self.image, True)
        self.warning.value = "".join(_message_html(x, "warning") for x in r.warnings)
        self.details.value = _lines_html(r.lines)
        self._draw(r)

    def _draw(self, r):
        fig = self._fig
        fig.clear()
        ax = fig.add_subplot()
        names = ["dense\n(Algorithm 0)", f"tiled\n({self.loop_order.value})"]
        reads = [r.dense.read_bytes, r.tiled.read_bytes]
        writes = [r.dense.write_bytes, r.tiled.write_bytes]
        y = np.arange(2)
        ax.barh(y - 0.2, reads, height=0.38, color="C0", label="read")
        ax.barh(y + 0.2, writes, height=0.38, color="C1", label="written")
        for yy, val in list(zip(y - 0.2, reads)) + list(zip(y + 0.2, writes)):
            ax.text(val, yy, " " + format_bytes(val).split(" = ")[-1], va="center", fontsize=8)
        if not r.fits_budget:
            ax.text(0.99, 0.5, "tile does not fit\nthe on-chip budget", transform=ax.transAxes,
                    ha="right", va="center", color="#b00020", fontsize=9)
        ax.set_yticks(y, names)
        ax.invert_yaxis()
        ax.set_xscale("log", base=2)
        ax.set_xlim(min(reads + writes) / 8, max(reads + writes) * 16)
        _byte_ticks(ax.xaxis, ax.get_xlim()[1], ax.get_xlim()[0], step_log2=2)
        ax.set_xlabel("bytes moved to/from outer memory (log scale)")
        ax.set_title(f"dense / tiled = {r.ratio:,.2f}x; same {r.flops:,} FLOP", fontsize=10)
        ax.legend(loc="lower right", fontsize=8)
        self.image.value = _png(fig)


def traffic_explorer(**kwargs) -> TrafficExplorer:
    """Widget: dense against tiled traffic, FLOPs, intensity, roofline time, tile fit.

    Keyword arguments set the starting values (t, head_dim, block_q, block_k, budget_kib,
    dtype, loop_order, causal, gpu). Returns the widget.
    """
    return TrafficExplorer(**kwargs)


class TileSchedule(w.VBox):
    """The tile-schedule widget (a VBox). Controls are in `.controls`."""

    def __init__(self, t_query=96, t_key=80, head_dim=16, block_q=32, block_k=32,
                 causal=True, loop_order="fa2", interval_ms=600):
        def slider(desc, value, lo, hi, cls):
            s = w.IntSlider(value=value, min=lo, max=hi, description=desc,
                            continuous_update=False, style=_LABEL_STYLE,
                            layout=w.Layout(width="300px"))
            s.add_class(cls)
            return s

        self.tq = slider("Tq", t_query, 1, MAX_SCHEDULE_LENGTH, "fc-slider-sched-tq")
        self.tk = slider("Tk", t_key, 1, MAX_SCHEDULE_LENGTH, "fc-slider-sched-tk")
        self.head_dim = slider("d", head_dim, 1, 128, "fc-slider-sched-d")
        self.block_q = slider("block_q (Br)", block_q, 1, 128, "fc-slider-sched-br")
        self.block_k = slider("block_k (Bc)", block_k, 1, 128, "fc-slider-sched-bc")
        self.causal = w.Checkbox(value=causal, description="causal", style=_LABEL_STYLE,
                                 layout=w.Layout(width="auto"))
        self.loop_order = w.Dropdown(options=_LOOP_ORDERS, value=loop_order,
                                     description="loop order", style=_LABEL_STYLE,
                                     layout=w.Layout(width="auto"))
        self.play = w.Play(value=0, min=0, max=1, step=1, interval=interval_ms,
                           description="play")
        self.step = w.IntSlider(value=0, min=0, max=1, description="step",
                                style=_LABEL_STYLE, layout=w.Layout(width="520px"))
        self.step.add_class("fc-slider-step")
        w.jslink((self.play, "value"), (self.step, "value"))
        self.controls = {"t_query": self.tq, "t_key": self.tk, "head_dim": self.head_dim,
                         "block_q": self.block_q, "block_k": self.block_k,
                         "causal": self.causal, "loop_order": self.loop_order,
                         "step": self.step, "play": self.play}
        self.message = w.HTML(value="")
        self.message.add_class("fc-message")
        self.status = w.HTML(value="")
        self.status.add_class("fc-schedule-readout")
        self.image = w.Image(format="png", layout=w.Layout(max_width="100%", height="auto"))
        self.image.add_class("fc-schedule-plot")
        self._fig = _figure(8.0, 4.6)
        self.steps = []
        self._config = None
        super().__init__([
            w.HTML("<b>Tile schedule</b>: a real tiled forward, replayed step by step "
                   "(fp16 byte counts: 2 B per element, 4 B per statistic)"),
            w.HBox([self.tq, self.tk, self.head_dim], layout=w.Layout(flex_flow="row wrap")),
            w.HBox([self.block_q, self.block_k, self.causal, self.loop_order],
                   layout=w.Layout(flex_flow="row wrap")),
            w.HBox([self.play, self.step]),
            self.message, self.status, self.image])
        self.add_class("fc-schedule")
        for c in (self.tq, self.tk, self.head_dim, self.block_q, self.block_k, self.causal,
                  self.loop_order):
            c.observe(self._rebuild, names="value")
        self.step.observe(self._show_step, names="value")
        self._rebuild()

    def _rebuild(self, _change=None):
        config = (self.tq.value, self.tk.value, self.head_dim.value, self.block_q.value,
                  self.block_k.value, self.causal.value, self.loop_order.value)
        try:
            steps = schedule_steps(*config)
        except ValueError as exc:
            self.message.value = _message_html(str(exc))
            self.status.value = ""
            self.steps = []
            _show(self.image, False)
            return
        self.message.value = ""
        _show(self.image, True)
        self.steps, self._config = steps, config
        last = len(steps) - 1
        self.step.value = min(self.step.value, last)
        self.play.value = min(self.play.value, last)
        self.step.max = self.play.max = last
        self._show_step()

    def _show_step(self, _change=None):
        if not self.steps:
            return
        k = min(self.step.value, len(self.steps) - 1)
        st = self.steps[k]
        tq, tk, d, br, bc, causal, order = self._config
        final = self.steps[-1]
        model = tiled_traffic(tq, tk, d, br, bc, causal=causal, loop_order=order)
        lines = [describe_step(st, len(self.steps)),
                 f"Moved so far: read {format_bytes(st.read_bytes)}, written "
                 f"{format_bytes(st.write_bytes)}, total {format_bytes(st.total_bytes)}.",
                 f"Whole run ({len(self.steps)} steps): {format_bytes(final.total_bytes)}; "
                 f"the IO model tiled_traffic gives {format_bytes(model.total_bytes)}."]
        self.status.value = _lines_html(lines)
        self._draw(k)

    def _draw(self, k):
        from matplotlib.colors import ListedColormap

        tq, tk, d, br, bc, causal, order = self._config
        qe, ke = _block_edges(tq, br), _block_edges(tk, bc)
        n_r, n_c = len(qe) - 1, len(ke) - 1
        # 0 not yet, 1 done, 2 skipped, 3 current
        state = np.zeros((n_r, n_c))
        for st in self.steps[:k + 1]:
            i, j = st.tile
            if st.kind == "tile":
                state[i, j] = 1
            elif st.kind == "skip":
                state[i, j] = 2
        cur = self.steps[k]
        if cur.kind in ("tile", "skip"):
            state[cur.tile] = 3 if cur.kind == "tile" else 2
        cmap = ListedColormap(["#ffffff", "#9ecae1", "#d9d9d9", "#fd8d3c"])

        fig = self._fig
        fig.clear()
        gs = fig.add_gridspec(2, 2, width_ratios=[1, 12], height_ratios=[1, 10])
        ax = fig.add_subplot(gs[1, 1])
        axq = fig.add_subplot(gs[1, 0], sharey=ax)
        axk = fig.add_subplot(gs[0, 1], sharex=ax)
        ax.pcolormesh(ke, qe, state, cmap=cmap, vmin=-0.5, vmax=3.5, edgecolors="#555555",
                      linewidth=0.6)
        if causal:  # the mask boundary: query i sees key j iff j <= i + Tk - Tq
            rows = np.repeat(np.arange(tq + 1), 2)[1:-1]               # staircase
            cols = np.clip(np.repeat(np.arange(tq) + tk - tq + 1, 2), 0, tk)
            ax.plot(cols, rows, color="#b00020", lw=1.2)
        for i in range(n_r):
            for j in range(n_c):
                if state[i, j] == 2 and n_r * n_c <= 256:
                    ax.text((ke[j] + ke[j + 1]) / 2, (qe[i] + qe[i + 1]) / 2, "skip",
                            ha="center", va="center", fontsize=7, color="#555555")
        ax.set_xlim(0, tk)
        ax.set_ylim(tq, 0)
        ax.set_xlabel("key position (Tk)")
        ax.tick_params(labelleft=False)

        def strip(axis, edges, tensors, vertical, block):
            resident = [] if block is None else [(edges[block], edges[block + 1])]
            loaded = [(a, b) for t, a, b, _ in cur.reads if t in tensors]
            stored = [(a, b) for t, a, b, _ in cur.writes if t in tensors]
            for spans, colour in ((resident, "#fdd0a2"), (loaded, "#fd8d3c"),
                                  (stored, "#31a354")):
                for a, b in spans:
                    if vertical:
                        axis.axhspan(a, b, color=colour)
                    else:
                        axis.axvspan(a, b, color=colour)
            for e in edges:
                (axis.axhline if vertical else axis.axvline)(e, color="#555555", lw=0.6)

        on_chip = cur.kind == "tile"
        strip(axq, qe, ("Q", "O", "lse", "l", "m"), True, cur.tile[0] if on_chip else None)
        axq.set_xticks([])
        axq.set_ylabel("query position (Tq)")
        axq.set_title("Q/O", fontsize=8)
        strip(axk, ke, ("K", "V"), False, cur.tile[1] if on_chip else None)
        axk.set_yticks([])
        axk.set_ylabel("K,V", fontsize=8, rotation=0, ha="right", va="center")
        axk.tick_params(labelbottom=False)
        from matplotlib.patches import Patch

        handles = [Patch(color=c, label=t) for c, t in (
            ("#fd8d3c", "tile on chip / block loaded this step"),
            ("#fdd0a2", "block on chip (loaded before)"), ("#9ecae1", "tile done"),
            ("#d9d9d9", "skipped (causal mask)"), ("#31a354", "block stored"))]
        fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=8,
                   frameon=False)
        fig.suptitle(f"{order}: step {k + 1} of {len(self.steps)}, "
                     f"{cur.total_bytes:,} B moved so far", fontsize=10)
        self.image.value = _png(fig)


def tile_schedule(**kwargs) -> TileSchedule:
    """Widget: the score matrix as tiles; a step slider with Play replays a real run.

    Keyword arguments set the starting values (t_query, t_key, head_dim, block_q,
    block_k, causal, loop_order, interval_ms). Returns the widget.
    """
    return TileSchedule(**kwargs)
