"""Pictures of attention variants (notebook 14): masks pair by pair, and block masks by tile.

    plot_masks(panels, t_query, t_key, block_q=None, block_k=None)
        one panel per (title, mask_mod): visible pairs dark, the tile grid drawn over them
    draw_block_states(ax, states, title="")
        a (Tr, Tc) grid of EMPTY / PARTIAL / FULL tiles (`BlockMask.states()[b, h]`), with
        a legend; the block-mask explorer draws with it too
"""

from __future__ import annotations

import numpy as np

from ..variants.mods import mask_tile
from .style import plt

#: colours of EMPTY, PARTIAL, FULL tiles
STATE_COLOURS = ("#eeeeee", "#f28e2b", "#4e79a7")


def _grid(ax, t_query, t_key, block_q, block_k):
    for y in np.arange(block_q, t_query, block_q) - 0.5:
        ax.axhline(y, color="C3", lw=0.8)
    for x in np.arange(block_k, t_key, block_k) - 0.5:
        ax.axvline(x, color="C3", lw=0.8)


def plot_masks(panels, t_query: int, t_key: int, block_q: int | None = None,
               block_k: int | None = None, *, columns: int = 4):
    """A figure of masks: `panels` is a list of (title, mask_mod), each evaluated on every
    (query, key) pair of Tq x Tk (b = h = 0); tiles of block_q x block_k drawn in red."""
    panels = list(panels)
    if not panels:
        raise ValueError("panels must hold at least one (title, mask_mod)")
    cols = min(columns, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt().subplots(rows, cols, figsize=(2.2 * cols, 2.3 * rows), squeeze=False)
    qi, ki = np.arange(t_query), np.arange(t_key)
    for ax, (title, mask_mod) in zip(axes.flat, panels):
        m = mask_tile(mask_mod, 0, 0, qi, ki)                          # (Tq, Tk)
        ax.imshow(m, cmap="Blues", vmin=0, vmax=1.4, interpolation="nearest")
        if block_q and block_k:
            _grid(ax, t_query, t_key, block_q, block_k)
        ax.set_title(title, fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_xlabel("key j", fontsize=9)
        ax.set_ylabel("query i", fontsize=9)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig


def draw_block_states(ax, states, title: str = "") -> None:
    """A (Tr, Tc) grid of tile states (0 empty, 1 partial, 2 full) on `ax`, with a legend."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    states = np.asarray(states)
    if states.ndim != 2:
        raise ValueError(f"states must be a (Tr, Tc) grid, got shape {states.shape}")
    ax.imshow(states, cmap=ListedColormap(STATE_COLOURS), vmin=0, vmax=2,
              interpolation="nearest", aspect="equal")
    tr, tc = states.shape
    ax.set_xlabel(f"key block j (of {tc})", fontsize=9)
    ax.set_ylabel(f"query block i (of {tr})", fontsize=9)
    ax.tick_params(labelsize=9)
    ax.legend(handles=[Patch(color=c, label=s) for c, s in
                       zip(STATE_COLOURS[::-1], ("full", "partial", "empty"))],
              fontsize=9, loc="upper right", frameon=True)
    if title:
        ax.set_title(title, fontsize=9)
