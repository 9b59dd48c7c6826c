"""Notebook 16's figures: who computes what at each ring step (contiguous against zigzag
shards under a causal mask), the work of every rank at every step, and a ring step's
compute time against its link time."""

from __future__ import annotations

import numpy as np

from ..distributed.model import min_hidden_shard, ring_step_times
from ..distributed.shards import causal_pairs, layout_shards, rank_indices, ring_source
from .style import WARP_COLOURS, plt


def step_grid(n: int, world: int, rank: int, layout: str = "zigzag") -> np.ndarray:
    """(rows of `rank`, n) float: for each query the rank holds (in global order) and each
    key position, the ring step at which that key's block reaches the rank and the pair is
    computed; NaN where the causal mask hides the pair (key after query)."""
    shards = layout_shards(n, world, layout)
    q = np.sort(rank_indices(shards[rank]))
    step_of_key = np.empty(n)
    for s in range(world):
        step_of_key[rank_indices(shards[ring_source(rank, s, world)])] = s
    grid = np.broadcast_to(step_of_key, (q.size, n)).copy()
    grid[np.arange(n)[None, :] > q[:, None]] = np.nan
    return grid


def plot_who_computes(n: int, world: int, layouts=("contiguous", "zigzag")):
    """One row per layout, one panel per rank: the rank's query rows (top to bottom, in
    sequence order) against all n keys, each computed pair coloured by its ring step;
    white where the causal mask hides it."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    colours = [WARP_COLOURS[s % len(WARP_COLOURS)] for s in range(world)]
    cmap = ListedColormap(colours).with_extremes(bad="white")
    fig, axes = plt().subplots(len(layouts), world, figsize=(8.6, 1.9 * len(layouts) + 0.9),
                               squeeze=False)
    for row, layout in zip(axes, layouts):
        shards = layout_shards(n, world, layout)
        pairs = causal_pairs(n, world, layout)
        for r, ax in enumerate(row):
            grid = step_grid(n, world, r, layout)
            q = np.sort(rank_indices(shards[r]))
            ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=-0.5, vmax=world - 0.5,
                      aspect="auto", interpolation="nearest",
                      extent=(-0.5, n - 0.5, q.size - 0.5, -0.5))
            ax.set_title(f"rank {r}: {pairs[r].sum()} pairs", fontsize=9.5)
            ax.set_xticks([0, n - 1])
            ticks = sorted({0, q.size - 1} | ({q.size // 2} if layout == "zigzag" else set()))
            ax.set_yticks(ticks, [str(q[t]) for t in ticks])
            ax.tick_params(labelsize=9)
        row[0].set_ylabel(f"{layout}\nquery position", fontsize=9.5)
    for ax in axes[-1]:
        ax.set_xlabel("key position", fontsize=9.5)
    handles = [Patch(color=c, label=f"step {s}") for s, c in enumerate(colours)]
    fig.legend(handles=handles, loc="lower center", ncol=world, fontsize=9,
               bbox_to_anchor=(0.5, 0.0))
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig


def plot_step_work(n: int, world: int, layouts=("contiguous", "zigzag")):
    """One panel per layout: the (query, key) pairs each rank computes at each ring step
    (a bar per rank); the dashed line is the slowest rank, which sets the step's time."""
    fig, axes = plt().subplots(1, len(layouts), figsize=(8.6, 2.9), sharey=True,
                               squeeze=False)
    width = 0.8 / world
    for ax, layout in zip(axes[0], layouts):
        pairs = causal_pairs(n, world, layout)                 # (ranks, steps)
        steps = np.arange(world)
        for r in range(world):
            ax.bar(steps - 0.4 + (r + 0.5) * width, pairs[r], width=width,
                   color=WARP_COLOURS[r % len(WARP_COLOURS)], label=f"rank {r}")
        slowest = pairs.max(axis=0)
        ax.step(np.r_[steps - 0.5, world - 0.5], np.r_[slowest, slowest[-1]], where="post",
                color="#444444", ls="--", lw=1.2)
        ideal = pairs.sum() / world
        ax.set_title(f"{layout}: slowest-rank total {slowest.sum()}, ideal {ideal:.0f}",
                     fontsize=9.5)
        ax.set_xticks(steps)
        ax.set_xlabel("ring step")
    axes[0, 0].set_ylabel("pairs computed")
    axes[0, -1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=9)
    fig.tight_layout()
    return fig


def plot_step_times(links: dict, *, flops_per_s: float, d: int = 128, heads: int = 1,
                    element_bytes: int = 2, shards=None):
    """A ring step's compute time (non-causal, `flops_per_s`) and its K/V transfer time over
    each link of `links` ({name: bytes/s}) against the positions per rank; the break-even
    of each link (`model.min_hidden_shard`) is marked. Times from `model.ring_step_times`."""
    if not links:
        raise ValueError("links must name at least one link: {name: bytes per second}")
    shards = np.unique(np.geomspace(128, 262144, 25).astype(int)) if shards is None else shards
    world = 2
    compute, link = [], {name: [] for name in links}
    for c in shards:
        for name, bw in links.items():
            t = ring_step_times(int(c) * world, d, world, heads=heads,
                                element_bytes=element_bytes, flops_per_s=flops_per_s,
                                link_bytes_per_s=bw, causal=False)
            link[name].append(t["link_s"][0])
        compute.append(t["compute_s"][0])
    fig, ax = plt().subplots(figsize=(8.2, 3.4))
    ax.loglog(shards, np.array(compute) * 1e6, color="#444444", lw=2,
              label="compute of one step")
    for i, (name, times) in enumerate(link.items()):
        colour = WARP_COLOURS[i % len(WARP_COLOURS)]
        ax.loglog(shards, np.array(times) * 1e6, color=colour, lw=1.6, ls="--",
                  label=f"K/V transfer, {name}")
        c0 = min_hidden_shard(element_bytes=element_bytes, flops_per_s=flops_per_s,
                              link_bytes_per_s=links[name])
        ax.axvline(c0, color=colour, lw=0.8, ls=":")
        ax.annotate(f"{c0:,.0f}", (c0, ax.get_ylim()[0]), xytext=(3, 4),
                    textcoords="offset points", color=colour, fontsize=9)
    ax.set_xlabel("positions per rank, n / world")
    ax.set_ylabel("time per ring step (µs)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=9)
    fig.tight_layout()
    return fig
