"""The tile-schedule explorer: the Tq x Tk score matrix as tiles, replayed step by step.

    from flashcourse.widgets.tile_schedule import tile_schedule
    tile_schedule()                          # last line of a cell

A real `flashcourse.tiled.forward` run on small random inputs is replayed
(`flashcourse.widgets.readouts.schedule_steps`, pure and tested): the step slider (with Play)
counts from 1, as the text does ("Step 1 of 12"); each step shows which tile is formed
or skipped and which blocks are loaded or stored, with the bytes moved so far. Blocks
larger than the sequence (Br > Tq, Bc > Tk) are one ragged block, as in lab 03.

Play: the figure of a setting is built once and a step only recolours it (about a
quarter of a full redraw), and step changes are drawn in the background, coalesced
(`Explorer.watch_fast`): when Play ticks faster than a draw, the steps in between are
skipped rather than queued, and the picture (its title) and the readout are set from
the same step, one right after the other.
"""

from __future__ import annotations

import numpy as np

from ..memory import format_bytes
from .readouts import (MAX_SCHEDULE_LENGTH, _block_edges, describe_step, ragged_blocks_note,
                       schedule_steps)
from ..traffic import tiled_traffic
from ._base import (LABEL_STYLE, LOOP_ORDERS, Explorer, auto_width, check_flag, check_int_arg,
                    classed, html_box, lines_html, menu, row)

MAX_SCHEDULE_BLOCK = 128          # Br, Bc and d sliders end here


class TileSchedule(Explorer):
    """The tile-schedule explorer (a VBox). Controls are in `.controls`."""

    css_class = "fc-schedule"

    def __init__(self, t_query=96, t_key=80, head_dim=16, block_q=32, block_k=32,
                 causal=True, loop_order="fa2", interval_ms=600):
        import ipywidgets as w

        def slider(desc, name, value, lo, hi, cls):
            s = w.IntSlider(value=check_int_arg(value, name, lo, hi), min=lo, max=hi,
                            description=desc, continuous_update=False, style=LABEL_STYLE,
                            layout=w.Layout(width="260px"))
            s.add_class(cls)
            return s

        self.tq = slider("Tq", "t_query", t_query, 1, MAX_SCHEDULE_LENGTH,
                         "fc-slider-sched-tq")
        self.tk = slider("Tk", "t_key", t_key, 1, MAX_SCHEDULE_LENGTH, "fc-slider-sched-tk")
        self.head_dim = slider("d", "head_dim", head_dim, 1, MAX_SCHEDULE_BLOCK,
                               "fc-slider-sched-d")
        self.block_q = slider("block_q (Br)", "block_q", block_q, 1, MAX_SCHEDULE_BLOCK,
                              "fc-slider-sched-br")
        self.block_k = slider("block_k (Bc)", "block_k", block_k, 1, MAX_SCHEDULE_BLOCK,
                              "fc-slider-sched-bc")
        interval_ms = check_int_arg(interval_ms, "interval_ms", 50, 10_000)
        auto = auto_width()
        self.causal = w.Checkbox(value=check_flag(causal, "causal"), description="causal",
                                 **auto)
        self.loop_order = menu(LOOP_ORDERS, loop_order, "loop_order", "loop order")
        # steps count from 1, like the text "Step 1 of 12"
        self.play = w.Play(value=1, min=1, max=2, step=1, interval=interval_ms,
                           description="play")
        self.step = w.IntSlider(value=1, min=1, max=2, description="step",
                                style=LABEL_STYLE, layout=w.Layout(width="480px"))
        classed(self.step, "fc-slider-step")
        w.jslink((self.play, "value"), (self.step, "value"))
        self.controls = {"t_query": self.tq, "t_key": self.tk, "head_dim": self.head_dim,
                         "block_q": self.block_q, "block_k": self.block_k,
                         "causal": self.causal, "loop_order": self.loop_order,
                         "step": self.step, "play": self.play}
        self.status = html_box("fc-schedule-readout")
        self.steps = []
        self._config = None
        self._picture = None               # the figure of the current setting
        self.shown_step = None             # the step the picture and readout show
        super().__init__(
            "<b>Tile schedule</b>: a real tiled forward, replayed step by step "
            "(fp16 byte counts: 2 B per element, 4 B per statistic)",
            [row(self.tq, self.tk, self.head_dim),
             row(self.block_q, self.block_k, self.causal, self.loop_order),
             w.HBox([self.play, self.step])],
            self.status, plot_px=(560, 360), plot_class="fc-schedule-plot")
        self.watch(self.tq, self.tk, self.head_dim, self.block_q, self.block_k, self.causal,
                   self.loop_order)
        self.watch_fast(self.step)         # Play: coalesced, drawn in the background
        self.refresh()

    def clear(self):
        super().clear()
        self.status.value = ""
        self.steps = []
        self._picture = None               # it may be half built: build it afresh

    def update(self):
        config = (self.tq.value, self.tk.value, self.head_dim.value, self.block_q.value,
                  self.block_k.value, self.causal.value, self.loop_order.value)
        if config != self._config or not self.steps:
            self.steps, self._config = [], None
            self.steps = schedule_steps(*config)
            self._config = config
            n = len(self.steps)
            # widen first, then clamp the value (a max below the value would clamp it early)
            for s in (self.step, self.play):
                s.max = max(n, 2)
                s.value = min(s.value, n)
            self._dirty = False            # our own slider changes: this round shows them
        k = min(self.step.value, len(self.steps))                 # 1-based step number
        self._show_step(k)

    def _show_step(self, k):
        """Picture and readout of step k, from one state, set one right after the other
        (the picture first: its title never trails the text)."""
        steps, config = self.steps, self._config
        st = steps[k - 1]
        tq, tk, d, br, bc, causal, order = config
        final = steps[-1]
        model = tiled_traffic(tq, tk, d, br, bc, causal=causal, loop_order=order)
        lines = [describe_step(st, len(steps)),
                 f"Moved so far: read {format_bytes(st.read_bytes)}, written "
                 f"{format_bytes(st.write_bytes)}, total {format_bytes(st.total_bytes)}.",
                 f"Whole run ({len(steps)} steps): {format_bytes(final.total_bytes)}; "
                 f"the IO model tiled_traffic gives {format_bytes(model.total_bytes)}."]
        ragged = ragged_blocks_note(tq, tk, br, bc)
        if ragged:
            lines.append(ragged)

        def paint(fig):
            picture = self._picture
            if picture is None or picture.config != config:
                picture = self._picture = _SchedulePicture(fig, steps, config)
            picture.show(k)

        png = self.render(paint, clear=False)
        self.image.value = png
        self.status.value = lines_html(lines)
        self.shown_step = k


def _keep_layout(fig) -> None:
    """No layout engine from now on: the axes stay where the last layout put them (and
    savefig skips the extra draw it makes for an engine, even a placeholder one)."""
    import matplotlib as mpl

    if fig.get_layout_engine() is not None:
        with mpl.rc_context({"figure.autolayout": False,
                             "figure.constrained_layout.use": False}):
            fig.set_layout_engine(None)


def step_title(order: str, k: int, n: int, total_bytes: int) -> str:
    """The picture's title for step k of n (the readout's first line says the same)."""
    return f"{order}: step {k} of {n}, {total_bytes:,} B moved so far"


class _SchedulePicture:
    """The figure of one setting: built once, then each step only recolours the tiles,
    redraws the Q/O and K/V strips' spans and retitles; the layout is computed at the
    first draw (constrained) and then kept, so a step costs one plain render."""

    COLOURS = ["#ffffff", "#9ecae1", "#d9d9d9", "#fd8d3c"]   # not yet, done, skipped, now

    def __init__(self, fig, steps, config):
        from matplotlib.colors import ListedColormap
        from matplotlib.patches import Patch

        self.fig, self.steps, self.config = fig, steps, config
        tq, tk, d, br, bc, causal, order = config
        self.qe, self.ke = _block_edges(tq, br), _block_edges(tk, bc)
        n_r, n_c = len(self.qe) - 1, len(self.ke) - 1
        fig.clear()
        fig.set_layout_engine("constrained")
        self._laid_out = False
        gs = fig.add_gridspec(2, 2, width_ratios=[1, 12], height_ratios=[1, 10])
        ax = self.ax = fig.add_subplot(gs[1, 1])
        axq = self.axq = fig.add_subplot(gs[1, 0], sharey=ax)
        axk = self.axk = fig.add_subplot(gs[0, 1], sharex=ax)
        self.mesh = ax.pcolormesh(self.ke, self.qe, np.zeros((n_r, n_c)),  # (Tr, Tc)
                                  cmap=ListedColormap(self.COLOURS), vmin=-0.5, vmax=3.5,
                                  edgecolors="#555555", linewidth=0.6)
        if causal:  # the mask boundary: query i sees key j iff j <= i + Tk - Tq
            rows = np.repeat(np.arange(tq + 1), 2)[1:-1]                  # staircase
            cols = np.clip(np.repeat(np.arange(tq) + tk - tq + 1, 2), 0, tk)
            ax.plot(cols, rows, color="#b00020", lw=1.2)
        self.label_skips = n_r * n_c <= 256
        ax.set_xlim(0, tk)
        ax.set_ylim(tq, 0)
        ax.set_xlabel("key position (Tk)", fontsize=9)
        ax.tick_params(labelleft=False, labelsize=9)
        for e in self.qe:
            axq.axhline(e, color="#555555", lw=0.6)
        for e in self.ke:
            axk.axvline(e, color="#555555", lw=0.6)
        axq.set_xticks([])
        axq.set_ylabel("query position (Tq)", fontsize=9)
        axq.tick_params(labelsize=9)
        axq.set_title("Q/O", fontsize=9)
        axk.set_yticks([])
        axk.set_ylabel("K,V", fontsize=9, rotation=0, ha="right", va="center")
        axk.tick_params(labelbottom=False)
        handles = [Patch(color=c, label=t) for c, t in (
            ("#fd8d3c", "on chip, loaded this step"),
            ("#fdd0a2", "block on chip (loaded before)"), ("#9ecae1", "tile done"),
            ("#d9d9d9", "skipped (causal mask)"), ("#31a354", "block stored"))]
        fig.legend(handles=handles, loc="outside lower center", ncol=2, fontsize=9,
                   frameon=False)
        self.title = fig.suptitle("", fontsize=9)
        self._step_artists = []

    def show(self, k):
        """Set the figure to step k (1-based)."""
        if self._laid_out:                 # the first draw placed everything: keep it
            _keep_layout(self.fig)         # (no layout pass, no extra draw per step)
        self._laid_out = True
        for a in self._step_artists:
            a.remove()
        self._step_artists = []
        steps, ax = self.steps, self.ax
        state = np.zeros(self.mesh.get_array().shape)   # (Tr, Tc): see COLOURS
        for st in steps[:k]:
            if st.kind == "tile":
                state[st.tile] = 1
            elif st.kind == "skip":
                state[st.tile] = 2
        cur = steps[k - 1]
        if cur.kind in ("tile", "skip"):
            state[cur.tile] = 3 if cur.kind == "tile" else 2
        self.mesh.set_array(state)
        qe, ke = self.qe, self.ke
        if self.label_skips:
            for i, j in zip(*np.nonzero(state == 2)):
                self._step_artists.append(ax.text(
                    (ke[j] + ke[j + 1]) / 2, (qe[i] + qe[i + 1]) / 2, "skip", ha="center",
                    va="center", fontsize=9, color="#555555"))

        def strip(axis, edges, tensors, vertical, block):
            resident = [] if block is None else [(edges[block], edges[block + 1])]
            loaded = [(a, b) for t, a, b, _ in cur.reads if t in tensors]
            stored = [(a, b) for t, a, b, _ in cur.writes if t in tensors]
            for spans, colour in ((resident, "#fdd0a2"), (loaded, "#fd8d3c"),
                                  (stored, "#31a354")):
                for a, b in spans:
                    self._step_artists.append(
                        (axis.axhspan if vertical else axis.axvspan)(a, b, color=colour,
                                                                     zorder=0.5))

        on_chip = cur.kind == "tile"
        strip(self.axq, qe, ("Q", "O", "lse", "l", "m"), True,
              cur.tile[0] if on_chip else None)
        strip(self.axk, ke, ("K", "V"), False, cur.tile[1] if on_chip else None)
        order = self.config[-1]
        self.title.set_text(step_title(order, k, len(steps), cur.total_bytes))


def tile_schedule(**kwargs) -> TileSchedule:
    """Widget: the score matrix as tiles; a step slider with Play replays a real run.

    Keyword arguments set the starting values (t_query, t_key, head_dim, block_q,
    block_k, causal, loop_order, interval_ms); a value of the wrong type or range raises
    a ValueError naming it. Returns the widget: put it last in a cell to show it.
    """
    return TileSchedule(**kwargs)
