"""The tile pictures of notebook 03 (and the README).

    plot_tile_schedule     the score matrix as tiles, numbered in loop order, causal tiles
                           that are skipped greyed out (replayed from the counter)
    plot_warp_partition    split-K (FlashAttention) against split-Q (FlashAttention-2)
    plot_causal_alignment  top-left against bottom-right causal masks when Tq != Tk
"""

from __future__ import annotations

import numpy as np

from ..counter import TrafficCounter
from ..geometry import causal_mask
from ..memory import binary_size
from .style import WARP_COLOURS, plt as _plt


def tile_order(t_query: int, t_key: int, block_q: int, block_k: int, *, causal: bool,
               loop_order: str):
    """Replay flashcourse.tiled.forward with a counter: {(i, j): step} and the skipped tiles."""
    from .. import tiled
    rng = np.random.default_rng(0)
    q = rng.standard_normal((t_query, 1))
    k = rng.standard_normal((t_key, 1))
    c = TrafficCounter()
    tiled.forward(q, k, k, block_q=block_q, block_k=block_k, causal=causal,
                  loop_order=loop_order, counter=c)
    order, skipped = {}, set()
    for ev in c.events:
        if ev.op == "compute":
            order[ev.tile] = len(order) + 1
        elif ev.op == "skip":
            skipped.add(ev.tile)
    return order, skipped


def plot_tile_schedule(t_query: int = 21, t_key: int = 29, block_q: int = 8, block_k: int = 6):
    """Two panels (fa2, fa1): the causal score matrix as tiles, numbered in loop order."""
    plt = _plt()
    from matplotlib.patches import Patch, Rectangle

    from ..geometry import tile_visibility
    fig, axes = plt.subplots(1, 2, figsize=(8.6, 5.1))
    titles = {"fa2": "fa2: outer loop over query blocks i",
              "fa1": "fa1: outer loop over key blocks j"}
    for ax, order_name in zip(axes, ("fa2", "fa1"), strict=True):
        order, skipped = tile_order(t_query, t_key, block_q, block_k, causal=True,
                                    loop_order=order_name)
        for (i, j) in list(order) + list(skipped):
            q0, k0 = i * block_q, j * block_k
            q1, k1 = min(q0 + block_q, t_query), min(k0 + block_k, t_key)
            status = tile_visibility(q0, q1, k0, k1, t_query, t_key, True)
            face = {"full": "#cfe3f7", "partial": "#fde2b8", "hidden": "#e6e6e6"}[status]
            ax.add_patch(Rectangle((k0, q0), k1 - k0, q1 - q0, facecolor=face,
                                   edgecolor="#333333", lw=1.2,
                                   hatch="///" if status == "hidden" else None))
            label = "skip" if (i, j) in skipped else str(order[(i, j)])
            ax.text((k0 + k1) / 2, (q0 + q1) / 2, label, ha="center", va="center",
                    fontsize=11 if label != "skip" else 9,
                    color="#222222" if label != "skip" else "#555555",
                    fontweight="bold" if label != "skip" else "normal",
                    bbox=dict(fc="white", ec="none", pad=1.5, alpha=0.85))
        # causal boundary, a staircase: row i sees key positions j <= i + Tk - Tq
        off = t_key - t_query
        xs, ys = [], []
        for row in range(t_query):
            edge = min(max(row + off + 1, 0), t_key)
            xs += [edge, edge]
            ys += [row, row + 1]
        ax.plot(xs, ys, color="#b22222", lw=1.5)
        ax.set_xlim(0, t_key)
        ax.set_ylim(t_query, 0)
        ax.set_aspect("equal")
        ax.set_xticks(sorted(set(range(0, t_key, block_k)) | {t_key}))
        ax.set_yticks(sorted(set(range(0, t_query, block_q)) | {t_query}))
        ax.set_xlabel(f"key position j (Bc = {block_k};\nthe last block is ragged)")
        ax.set_ylabel(f"query position i (Br = {block_q})")
        ax.set_title(titles[order_name], fontsize=11)
    handles = [Patch(facecolor="#cfe3f7", edgecolor="#333333", label="fully visible tile"),
               Patch(facecolor="#fde2b8", edgecolor="#333333",
                     label="partly visible: masked inside"),
               Patch(facecolor="#e6e6e6", edgecolor="#333333", hatch="///",
                     label="hidden by the causal mask: skipped"),
               plt.Line2D([], [], color="#b22222",
                          label="causal boundary: query i sees keys j <= i + Tk - Tq")]
    fig.legend(handles=handles, loc="lower center", ncol=2, fontsize=9, frameon=False)
    fig.suptitle(f"Tile schedule of the causal score matrix, Tq = {t_query}, Tk = {t_key}:\n"
                 "the numbers give the order in which tiles are formed", fontsize=11.5)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    return fig




def plot_warp_partition(warps: int = 4, block_q: int = 64, block_k: int = 64,
                        head_dim: int = 64):
    """Inside one thread block: which warp computes what, for one (Br, Bc) tile.

    split-K (FlashAttention): Q_i shared, K_j and V_j split into column slices, one per
    warp; each warp's P V is a partial (Br, d) output that must be added up across warps
    through shared memory. split-Q (FlashAttention-2): Q_i split into row slices; K_j, V_j
    shared; each warp owns whole rows of S, P and O: no exchange.
    """
    from matplotlib.patches import Rectangle

    from ..fa2_work import warp_exchange_bytes
    plt = _plt()
    if not 1 <= warps <= len(WARP_COLOURS):
        raise ValueError(f"warps must be between 1 and {len(WARP_COLOURS)}, got {warps}")
    fig, axes = plt.subplots(1, 2, figsize=(8.6, 4.6))
    grey = "#d9d9d9"
    for ax, scheme in zip(axes, ("split-K", "split-Q"), strict=True):
        # geometry (arbitrary units): Q (Br x d) at left, K^T (d x Bc) above S (Br x Bc),
        # V (Bc x d) right of S, O (Br x d) at far right
        qx, sx, vx, ox = 0.0, 2.4, 5.2, 7.9
        h, wq, ws = 2.0, 1.6, 2.0
        ky = h + 0.4
        for w in range(warps):
            c = WARP_COLOURS[w]
            if scheme == "split-K":
                # K^T columns and V rows split; S columns split
                ax.add_patch(Rectangle((sx + w * ws / warps, ky), ws / warps, 1.4, fc=c,
                                       ec="white"))
                ax.add_patch(Rectangle((sx + w * ws / warps, 0), ws / warps, h, fc=c,
                                       ec="white", alpha=0.8))
                ax.add_patch(Rectangle((vx, h - (w + 1) * h / warps), wq, h / warps, fc=c,
                                       ec="white"))
                ax.add_patch(Rectangle((ox + 0.12 * w, -0.12 * w), wq, h, fc=c,
                                       ec="white", alpha=0.55))
            else:
                ax.add_patch(Rectangle((qx, h - (w + 1) * h / warps), wq, h / warps, fc=c,
                                       ec="white"))
                ax.add_patch(Rectangle((sx, h - (w + 1) * h / warps), ws, h / warps, fc=c,
                                       ec="white", alpha=0.8))
                ax.add_patch(Rectangle((ox, h - (w + 1) * h / warps), wq, h / warps, fc=c,
                                       ec="white"))
        if scheme == "split-K":
            ax.add_patch(Rectangle((qx, 0), wq, h, fc=grey, ec="#888888"))
            ax.text(qx + wq / 2, h / 2, "Q_i\nread by\nall warps", ha="center", va="center",
                    fontsize=9)
            ax.text(ox + wq / 2 + 0.2, -0.75, f"{warps} partial O_i,\nadded up through\n"
                    "shared memory", ha="center", va="top", fontsize=9, color="#c44e52")
            nbytes = warp_exchange_bytes(block_q, head_dim, warps, "split-K")
            title = (f"split-K (FlashAttention):\nK_j, V_j split across {warps} warps\n"
                     f"per tile: {binary_size(nbytes)} of partial outputs and\nrow "
                     "statistics written, synchronised,\nread back and added")
        else:
            ax.add_patch(Rectangle((sx, ky), ws, 1.4, fc=grey, ec="#888888"))
            ax.add_patch(Rectangle((vx, 0), wq, h, fc=grey, ec="#888888"))
            ax.text(sx + ws / 2, ky + 0.7, "K_j^T\nread by\nall warps", ha="center",
                    va="center", fontsize=9)
            ax.text(vx + wq / 2, h / 2, "V_j\nread by\nall warps", ha="center", va="center",
                    fontsize=9)
            ax.text(ox + wq / 2, -0.75, "each warp writes\nits own rows of O_i", ha="center",
                    va="top", fontsize=9, color="#55a868")
            title = (f"split-Q (FlashAttention-2):\nQ_i split across {warps} warps\n"
                     "per tile: nothing to exchange\nbetween warps (0 B)\n ")
        for xy, text in (((qx + wq / 2, h + 0.15), f"Q_i\n{block_q} x {head_dim}"),
                         ((sx + ws / 2, ky + 1.55), f"K_j^T  {head_dim} x {block_k}"),
                         ((sx + ws / 2, -0.15), f"S = Q_i K_j^T -> P\n{block_q} x {block_k}"),
                         ((vx + wq / 2, h + 0.15), f"V_j\n{block_k} x {head_dim}"),
                         ((ox + wq / 2, h + 0.15), f"O_i\n{block_q} x {head_dim}")):
            ax.text(*xy, text, ha="center", va="bottom" if xy[1] > 0 else "top", fontsize=9)
        ax.text(sx - 0.4, h / 2, "x", ha="center", va="center", fontsize=13)
        ax.text(vx - 0.4, h / 2, "x", ha="center", va="center", fontsize=13)
        ax.text(ox - 0.5, h / 2, "=", ha="center", va="center", fontsize=13)
        ax.set_xlim(-0.3, 10.1)
        ax.set_ylim(-1.9, 4.3)
        ax.set_aspect("equal")
        ax.axis("off")
        ax.set_title(title, fontsize=10)
    handles = [Rectangle((0, 0), 1, 1, fc=WARP_COLOURS[w], label=f"warp {w}")
               for w in range(warps)]
    handles.append(Rectangle((0, 0), 1, 1, fc=grey, ec="#888888", label="shared by all warps"))
    fig.legend(handles=handles, loc="lower center", ncol=warps + 1, fontsize=9,
               frameon=False)
    fig.suptitle(f"One thread block, one tile (Br = {block_q}, Bc = {block_k}, d = {head_dim}):"
                 " which warp computes what", fontsize=11)
    fig.tight_layout(rect=(0, 0.06, 1, 0.94))
    return fig


def plot_causal_alignment(shapes=((4, 7), (7, 4))):
    """Causal masks for each (Tq, Tk) in `shapes`: top-left aligned (PyTorch's
    is_causal=True) beside bottom-right aligned (this course, FlashAttention 2.1+).
    A visible pair is dark; rows that see no key are marked."""
    plt = _plt()
    fig, axes = plt.subplots(len(shapes), 2, figsize=(8.6, 3.9 * len(shapes)),
                             squeeze=False)
    for row, (tq, tk) in enumerate(shapes):
        for col, align in enumerate(("top-left", "bottom-right")):
            ax = axes[row, col]
            mask = causal_mask(tq, tk, align=align)                   # (Tq, Tk)
            ax.imshow(mask, cmap="Blues", vmin=-0.4, vmax=1.2)
            empty = [i for i in range(tq) if not mask[i].any()]
            for i in empty:
                ax.text(tk - 0.5, i, "  no key", va="center", fontsize=9, color="#c44e52",
                        clip_on=False)
            ax.set_xticks(range(tk))
            ax.set_yticks(range(tq))
            ax.set_xticks(np.arange(-0.5, tk), minor=True)
            ax.set_yticks(np.arange(-0.5, tq), minor=True)
            ax.grid(which="minor", color="white", lw=1.5)
            ax.tick_params(which="minor", length=0)
            xlabel = "key position j"
            if empty:                    # what an empty row gives, said once under the mask
                rows = (f"row {empty[0]} sees" if len(empty) == 1
                        else f"rows {empty[0]}-{empty[-1]} see")
                xlabel += f"\n({rows} no key: o = 0, lse = -inf)"
            ax.set_xlabel(xlabel)
            ax.set_ylabel("query position i")
            sign = "+" if tk >= tq else "-"
            rule = ("j <= i" if align == "top-left"
                    else f"j <= i + Tk - Tq = i {sign} {abs(tk - tq)}")
            who = ("PyTorch SDPA is_causal=True" if align == "top-left"
                   else "this course, FlashAttention >= 2.1")
            ax.set_title(f"{align}, Tq = {tq}, Tk = {tk}\n{rule}  ({who})", fontsize=9.5)
    fig.suptitle("Two ways to align a causal mask when Tq != Tk (they agree when Tq = Tk)",
                 fontsize=11)
    fig.tight_layout()
    return fig
