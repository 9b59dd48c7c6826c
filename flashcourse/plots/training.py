"""Notebook 13's figure: the training loss of the GPT with the course's tiled attention and
with dense attention, step by step, on one axis, and their relative difference below it."""

from __future__ import annotations

import numpy as np

from .style import COLOURS, FULL_WIDTH_IN
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
