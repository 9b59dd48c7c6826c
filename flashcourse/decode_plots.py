"""Pictures for notebook 11 (Flash-Decoding): SMs busy, key splits, the merge tree.

    draw_sms(blocks, sms, ax)              which SMs get a thread block in the first wave
    draw_splits(bounds, t_key, block_k, ax)  the key axis cut into splits of whole blocks
    draw_merge_tree(levels, ax)            partial states merged pairwise, level by level
"""

from __future__ import annotations

import math

import numpy as np


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
                    va="center", fontsize=7)
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
            ax.scatter([xs[depth][i]], [y], s=500, color="C0" if depth else "C2", zorder=3)
            ax.text(xs[depth][i], y, f"{val:.2f}" if np.isfinite(val) else "-inf",
                    ha="center", va="center", fontsize=7, color="w", zorder=4)
            if depth:
                kids = [2 * i, 2 * i + 1] if 2 * i + 1 < len(levels[depth - 1]) else [2 * i]
                for kid in kids:
                    ax.plot([xs[depth - 1][kid], xs[depth][i]], [y + 1, y], color="0.5",
                            zorder=1)
    ax.set_ylim(-0.6, n_levels - 0.4)
    ax.set_xlim(0, 1)
    ax.axis("off")
    ax.set_title("merge tree: each node shows lse of one query row "
                 "(leaves: the splits, root: the whole row)", fontsize=9)
