"""Pictures for the Hopper path (wgmma): swizzled shared-memory layouts.

    plot_swizzle(swizzle, chunk)   one atom of 8 rows, each 16-byte chunk coloured by the
                                   bank group it lands in, without and with the swizzle;
                                   the 8 chunks that one column read touches outlined

The layouts come from the numpy model `flashcourse.cuda.wgmma_layouts`.
"""

from __future__ import annotations

import numpy as np

from ..cuda import wgmma_layouts as W
from .style import MIN_FONT_PT as FONT
from .style import plt as _plt


def _draw_atom(ax, groups, read, title, cmap):
    from matplotlib.patches import Rectangle
    rows, cols = groups.shape
    for r in range(rows):
        for c in range(cols):
            ax.add_patch(Rectangle((c, r), 1, 1, facecolor=cmap(int(groups[r, c])),
                                   alpha=0.55, edgecolor="white", lw=0.8))
            ax.text(c + 0.5, r + 0.5, str(int(groups[r, c])), ha="center", va="center",
                    fontsize=FONT)
    for r, c in read:
        ax.add_patch(Rectangle((c + 0.05, r + 0.05), 0.9, 0.9, fill=False, edgecolor="black",
                               lw=2, zorder=3))
    ax.set_xlim(0, cols)
    ax.set_ylim(rows, 0)
    ax.set_xticks(np.arange(cols) + 0.5, [str(c) for c in range(cols)])
    ax.set_yticks(np.arange(rows) + 0.5, [str(r) for r in range(rows)])
    ax.tick_params(length=0, labelsize=FONT)
    ax.set_xlabel("16-byte chunk of the row (logical: 8 fp16 of K)")
    ax.set_ylabel("row of the atom")
    ax.set_title(title, fontsize=10)


def plot_swizzle(swizzle: int = 128, chunk: int = 2):
    """Where each logical 16-byte chunk of one swizzle atom lands, as its bank group
    (0-7: which 4 of the 32 banks), without and with the `swizzle`-byte XOR; outlined:
    logical chunk `chunk` of all 8 rows, which 8 threads of a core-matrix load read."""
    if swizzle not in (32, 64, 128):
        raise ValueError(f"swizzle must be 32, 64 or 128 (bytes per row), got {swizzle!r}")
    cols = swizzle // W.CHUNK
    if not 0 <= chunk < cols:
        raise ValueError(f"chunk must be in 0..{cols - 1} for {swizzle}-byte rows, got {chunk}")
    plt = _plt()
    r, c = np.meshgrid(np.arange(W.ATOM_ROWS), np.arange(cols), indexing="ij")
    plain = W.bank_group(r * swizzle + c * W.CHUNK)
    swz = W.bank_group(W.swizzle_offset(r * swizzle + c * W.CHUNK, swizzle))
    read = [(row, chunk) for row in range(W.ATOM_ROWS)]
    fig, axes = plt.subplots(1, 2, figsize=(8.6, 4.4), layout="constrained")
    cmap = plt.get_cmap("tab10")
    n_plain = W.conflict_degree(W.column_read(None, chunk, swizzle))
    n_swz = W.conflict_degree(W.column_read(swizzle, chunk))
    art = "an" if n_plain == 8 else "a"
    _draw_atom(axes[0], plain, read, f"no swizzle: the outlined column\nis {art} "
               f"{n_plain}-way bank conflict", cmap)
    _draw_atom(axes[1], swz, read, f"{swizzle}-byte swizzle: {n_swz}-way\n(8 different bank "
               "groups)" if n_swz == 1 else f"{swizzle}-byte swizzle: {n_swz}-way", cmap)
    fig.suptitle(f"One {W.ATOM_ROWS} x {swizzle}-byte atom; each cell: the bank group "
                 "(of 8) its 16 bytes land in", fontsize=10.5)
    return fig
