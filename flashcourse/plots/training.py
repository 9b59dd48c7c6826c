"""Notebook 13's figures.

    plot_loss_curves         the training loss of the GPT with the course's tiled attention
                             and with dense attention, step by step, and their relative
                             difference below it
    plot_packed_block_mask   one packed row: the document mask's visible pairs, and its
                             tiles as full, partial or empty (skipped)
"""

from __future__ import annotations

import numpy as np

from .style import COLOURS, FULL_WIDTH_IN, legend_under_panels
from .style import plt as _plt

#: the words for each attention in the legend
WORDS = {"tiled": "course's tiled attention (keeps lse)", "dense": "dense attention (keeps P)"}


def plot_loss_curves(losses: dict, *, fig=None):
    """losses: {"tiled": [...], "dense": [...]} per-step losses (nats per token) of two runs
    with one seed. Top: both curves (the tiled one drawn over the dense one, dashed); bottom:
    |tiled - dense| / dense per step, on a log scale (0 is drawn at 1e-17)."""
    if fig is None:
        fig = _plt().figure(figsize=(FULL_WIDTH_IN, 4.6), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(2, 1))
    for name, ls, lw in (("dense", "-", 3.0), ("tiled", "--", 1.4)):
        if name in losses:
            loss = np.asarray(losses[name], dtype=np.float64)
            top.plot(np.arange(len(loss)), loss, ls=ls, lw=lw, color=COLOURS.get(
                "fa2" if name == "tiled" else "dense"), label=WORDS[name])
    top.set_ylabel("training loss\n(nats per character)")
    top.grid(alpha=0.3)
    top.legend(loc="upper right")
    if "tiled" in losses and "dense" in losses:
        t = np.asarray(losses["tiled"], dtype=np.float64)
        d = np.asarray(losses["dense"], dtype=np.float64)
        diff = np.maximum(np.abs(t - d) / np.abs(d), 1e-17)
        bottom.semilogy(np.arange(len(d)), diff, color=COLOURS["flops"], lw=1.2)
        bottom.axhline(1e-10, color="#888888", ls=":", lw=1)
        bottom.text(0, 1e-10, " 1e-10 (the target)", va="bottom", fontsize=9)
    bottom.set_ylabel("|tiled - dense|\n/ dense")
    bottom.set_xlabel("training step")
    bottom.grid(alpha=0.3)
    return fig


#: face colours of the tile states (EMPTY 0, PARTIAL 1, FULL 2, as `variants.block_mask`)
TILE_FACES = ("#e6e6e6", "#fde2b8", "#cfe3f7")
TILE_WORDS = ("empty: skipped", "partial: mask evaluated", "full: no mask")


def plot_packed_block_mask(visible, states, block_size, cu_seqlens, *, fig=None):
    """One packed row. visible: (T, T) bool, the pairs a query (row) may see; states:
    (Tr, Tc) tile states (EMPTY 0, PARTIAL 1, FULL 2: `BlockMask.states()[0, 0]`);
    block_size (Br, Bc) positions; cu_seqlens [0, ..., T] (document boundaries drawn as
    lines). Left: the visible pairs; right: the tiles, coloured by state."""
    visible = np.asarray(visible, dtype=bool)
    states = np.asarray(states)
    t_q, t_k = visible.shape
    br, bc = block_size
    plt = _plt()
    from matplotlib.patches import Patch, Rectangle
    if fig is None:
        fig = plt.figure(figsize=(FULL_WIDTH_IN, 4.6), layout="constrained")
    left, right = fig.subplots(1, 2, sharey=True)
    left.imshow(visible, cmap="Blues", vmin=-0.3, vmax=1.2, interpolation="nearest",
                extent=(0, t_k, t_q, 0))
    left.set_title(f"visible pairs: {int(visible.sum()):,} of {t_q * t_k:,}")
    for i in range(states.shape[0]):
        for j in range(states.shape[1]):
            q0, k0 = i * br, j * bc
            right.add_patch(Rectangle((k0, q0), min(bc, t_k - k0), min(br, t_q - q0),
                                      facecolor=TILE_FACES[states[i, j]],
                                      edgecolor="#333333", lw=0.8))
    counts = [int((states == s).sum()) for s in range(3)]
    right.set_title(f"tiles of {br} x {bc}: {counts[2]} full, {counts[1]} partial, "
                    f"{counts[0]} empty")
    for ax in (left, right):
        for e in np.asarray(cu_seqlens)[1:-1]:
            ax.axhline(e, color=COLOURS["dense"], lw=1.0)
            ax.axvline(e, color=COLOURS["dense"], lw=1.0)
        ax.set_xlim(0, t_k)
        ax.set_ylim(t_q, 0)
        ax.set_aspect("equal")
        ax.set_xlabel("key position")
    left.set_ylabel("query position")
    handles = [Patch(facecolor=f, edgecolor="#333333", label=w)
               for f, w in zip(TILE_FACES, TILE_WORDS)]
    handles.append(plt.Line2D([], [], color=COLOURS["dense"], lw=1.0,
                              label="document boundary"))
    legend_under_panels(fig, handles, [h.get_label() for h in handles], ncol=4)
    return fig
