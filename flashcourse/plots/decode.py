"""The Flash-Decoding pictures of notebook 11: the SMs a grid fills, the key splits,
the merge tree of the combine, and the measured K/V bandwidth.
"""

from __future__ import annotations

import math

import numpy as np

from .style import FULL_WIDTH_IN, legend_under_panels
from .style import MIN_FONT_PT as FONT
from .style import plt as _plt


def draw_sms(blocks: int, sms: int, ax, *, title: str | None = None, cols: int = 22):
    """One square per SM, filled when the launch gives it at least one block."""
    import matplotlib.patches as mpatches
    rows = math.ceil(sms / cols)
    busy = min(blocks, sms)
    for i in range(sms):
        r, c = divmod(i, cols)
        colour = "C0" if i < busy else "0.9"
        ax.add_patch(mpatches.Rectangle((c, rows - 1 - r), 0.9, 0.9, color=colour))
    ax.set_xlim(-0.2, cols)
    ax.set_ylim(-0.2, rows)
    ax.set_aspect("equal")
    ax.axis("off")
    waves = blocks / sms
    ax.set_title(title or f"{blocks:,} blocks on {sms} SMs: {busy} busy "
                 f"({100 * busy / sms:.0f}%), {waves:.2f} waves", fontsize=9)


def draw_splits(bounds, t_key: int, block_k: int, ax):
    """The Tk keys as a bar, one colour per split, thin lines at key-block edges."""
    for s, (k0, k1) in enumerate(bounds):
        if k1 > k0:
            ax.barh(0, k1 - k0, left=k0, height=0.6, color=f"C{s % 10}", alpha=0.8)
            ax.text((k0 + k1) / 2, 0, f"split {s}\nkeys {k0}..{k1 - 1}", ha="center",
                    va="center", fontsize=9.5, zorder=3,
                    bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="none", alpha=0.85))
    for edge in range(0, t_key + 1, block_k):
        ax.axvline(edge, color="k", lw=0.4, alpha=0.5)
    empty = [s for s, (k0, k1) in enumerate(bounds) if k1 == k0]
    ax.set_xlim(0, t_key)
    ax.set_yticks([])
    ax.set_xlabel(f"key position (Tk = {t_key}; thin lines every block_k = {block_k} keys)"
                  + (f"; empty splits: {empty}" if empty else ""))


def draw_merge_tree(levels, ax, *, row: int = 0):
    """The lse of one query row at every node of a pairwise merge tree (`merge_tree`)."""
    n_levels = len(levels)
    xs = [np.linspace(0, 1, len(lv) + 2)[1:-1] for lv in levels]
    for depth, level in enumerate(levels):
        y = n_levels - 1 - depth
        for i, (_o, lse) in enumerate(level):
            val = float(np.asarray(lse).reshape(-1)[row])
            ax.scatter([xs[depth][i]], [y], s=1000, color="C0" if depth else "C2", zorder=3)
            ax.text(xs[depth][i], y, f"{val:.2f}" if np.isfinite(val) else "-inf",
                    ha="center", va="center", fontsize=FONT, color="w", zorder=4)
            if depth:
                kids = [2 * i, 2 * i + 1] if 2 * i + 1 < len(levels[depth - 1]) else [2 * i]
                for kid in kids:
                    ax.plot([xs[depth - 1][kid], xs[depth][i]], [y + 1, y], color="0.5",
                            zorder=1)
    ax.set_ylim(-0.5, n_levels - 0.5)
    ax.set_xlim(0, 1)
    ax.axis("off")
    ax.set_title("merge tree: each node shows lse of one query row "
                 "(leaves: the splits, root: the whole row)", fontsize=10)


IMPL_STYLE = {
    "ours/float16": ("Flash-Decoding (ours), fp16 K/V", "C0", "-o"),
    "ours/float32": ("Flash-Decoding (ours), fp32 K/V", "C0", "--s"),
    "torch_flash/float16": ("PyTorch SDPA flash, fp16", "C1", "-o"),
    "torch_efficient/float32": ("PyTorch SDPA efficient, fp32", "C1", "--s"),
    "fa2_order_fp32/float32": ("course FA2-order kernel, fp32", "C3", ":^"),
}


def plot_bandwidth(rows, *, group=None, fig=None):
    """Achieved K/V read bandwidth (GB/s) against Tk, one panel per B x Hkv on one y scale,
    with the copy rate (read + write) of the same bytes dashed and one legend under the
    panels. `rows` is the 'bench' list of the recorded JSON; group: only that GQA group
    size (None: group 1). `fig`: draw on this figure (it is given a constrained layout)."""
    group = 1 if group is None else group
    rows = [r for r in rows if r.get("group") == group and "ms" in r
            and r["ms"] == r["ms"]]
    bhkvs = sorted({r["bhkv"] for r in rows})
    if fig is None:
        fig = _plt().figure(figsize=(FULL_WIDTH_IN, 4.4), layout="constrained")
    else:
        fig.set_layout_engine("constrained")
    axes = fig.subplots(1, max(1, len(bhkvs)), sharey=True, squeeze=False)[0]
    for ax, bhkv in zip(axes, bhkvs):
        sel = [r for r in rows if r["bhkv"] == bhkv]
        for key, (label, colour, style) in IMPL_STYLE.items():
            impl, dt = key.split("/")
            pts = sorted((r["tk"], r["gbs"]) for r in sel
                         if r["impl"] == impl and r["kv_dtype"] == dt)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, color=colour,
                        label=label, ms=4)
        cp = sorted({(r["tk"], r["copy_gbs"]) for r in sel if r["kv_dtype"] == "float16"})
        if cp:
            ax.plot([p[0] for p in cp], [p[1] for p in cp], "--", color="k", lw=1,
                    label="device copy (read + write)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("Tk (keys in the cache)")
        ax.set_title(f"B x Hkv = {bhkv}, G = {group}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("K/V bytes read / time (GB/s)")
    labelled = max(axes, key=lambda a: len(a.get_legend_handles_labels()[1]))
    if labelled.get_legend_handles_labels()[1]:
        legend_under_panels(fig, *labelled.get_legend_handles_labels(), ncol=2)
    return fig
