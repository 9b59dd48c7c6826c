"""Notebook 15's figures: the values e4m3 and e5m2 can hold, an outlier row before and after
the Hadamard rotation, and the error of each FP8 scheme against fp16."""

from __future__ import annotations

import numpy as np

from ..fp8.codes import fp8_format, value_table
from .style import COLOURS, plt


def plot_number_lines(formats=("e4m3", "e5m2")):
    """One row per format: a tick at every positive finite value on a log2 axis, subnormals
    in grey, the largest value marked."""
    formats = [fp8_format(f) for f in formats]
    fig, axes = plt().subplots(len(formats), 1, figsize=(8.6, 1.25 * len(formats) + 0.3),
                               squeeze=False)
    for ax, f in zip(axes[:, 0], formats):
        t = value_table(f)
        v = np.unique(t[np.isfinite(t) & (t > 0)])
        sub = v < f.min_normal
        ax.vlines(np.log2(v[sub]), 0, 1, color="#999999", lw=1.0, label="subnormal")
        ax.vlines(np.log2(v[~sub]), 0, 1, color=COLOURS["fp8"], lw=1.0, label="normal")
        ax.annotate(f"{f.max_finite:g}", (np.log2(f.max_finite), 1.0), xytext=(2, 2),
                    textcoords="offset points", fontsize=9)
        ax.set_yticks([])
        ax.set_ylim(0, 1.45)
        ax.set_xlim(-17.5, 16.5)
        ax.set_ylabel(f.name, rotation=0, ha="right", va="center")
        ax.set_xticks(range(-16, 17, 2))
    axes[-1, 0].set_xlabel("log2 of the value (every positive finite value of the format)")
    axes[0, 0].legend(loc="upper left", ncol=2, fontsize=9)
    fig.tight_layout()
    return fig


def plot_rotation(x, rotated):
    """|x| of one row before and after the rotation, coordinate by coordinate."""
    x, rotated = np.abs(np.asarray(x, np.float64)), np.abs(np.asarray(rotated, np.float64))
    if x.shape != rotated.shape or x.ndim != 1:
        raise ValueError("x and rotated must be 1-D arrays of the same length")
    fig, ax = plt().subplots(figsize=(8.6, 2.6))
    i = np.arange(x.size)
    ax.bar(i - 0.2, x, width=0.4, color="#c44e52", label=f"|x|, max {x.max():.1f}")
    ax.bar(i + 0.2, rotated, width=0.4, color="#4c72b0",
           label=f"|x H|, max {rotated.max():.1f}")
    ax.set_xlabel("coordinate c of the row (of d)")
    ax.set_ylabel("magnitude")
    ax.legend(loc="upper right")
    fig.tight_layout()
    return fig


def plot_error_table(tables: dict):
    """Horizontal bars of RMSE (log axis): `tables` maps a size label to {scheme: RMSE}
    (flashcourse.fp8.attention.error_table), one colour per size."""
    if not tables:
        raise ValueError("tables must hold at least one {scheme: RMSE}")
    labels = list(next(iter(tables.values())))
    fig, ax = plt().subplots(figsize=(8.6, 0.45 * len(labels) * len(tables) + 1.0))
    height = 0.8 / len(tables)
    colours = ("#4c72b0", "#dd8452", "#55a868", "#8172b3")
    for n, (size, table) in enumerate(tables.items()):
        y = np.arange(len(labels)) + n * height
        ax.barh(y, [table[lab] for lab in labels], height=height, color=colours[n % 4],
                label=size)
    ax.set_yticks(np.arange(len(labels)) + height * (len(tables) - 1) / 2, labels)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("RMSE of O against float64 (log scale)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    return fig
