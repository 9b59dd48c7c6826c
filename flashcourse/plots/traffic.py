"""The traffic pictures of the IO model (README, notebooks 03-04).

    plot_traffic_vs_length  dense vs tiled outer-memory bytes against N, and the FLOPs
    plot_traffic_vs_budget  tiled bytes against the on-chip budget M (paper block sizes)
"""

from __future__ import annotations

import numpy as np

from ..gpus import GPUS
from ..memory import binary_size
from ..traffic import attention_flops, dense_traffic, paper_block_sizes, tiled_traffic
from .memory import _binary_axis, _pow2_axis
from .style import COLOURS, legend_below
from .style import plt as _plt


def plot_traffic_vs_length(head_dim: int = 64, e: int = 2):
    """Dense vs tiled outer-memory bytes (left) and FLOPs (right) against N, one head."""
    plt = _plt()
    lengths = 2 ** np.arange(9, 18)                               # 512 .. 131,072
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(8.6, 4.8),
                              gridspec_kw={"width_ratios": [3, 2]})
    series = [("dense (Algorithm 0, S and P in HBM)", COLOURS["dense"], "o-",
               lambda n: dense_traffic(n, n, head_dim, bytes_per_element=e, bytes_per_score=e)),
              ("tiled fa2, Br = Bc = 64", COLOURS["fa2"], "s--",
               lambda n: tiled_traffic(n, n, head_dim, 64, 64, bytes_per_element=e)),
              ("tiled fa2, Br = 128, Bc = 64", COLOURS["fa2"], "s-",
               lambda n: tiled_traffic(n, n, head_dim, 128, 64, bytes_per_element=e)),
              ("tiled fa2, Br = 128, causal", "#17becf", "^-",
               lambda n: tiled_traffic(n, n, head_dim, 128, 64, causal=True, bytes_per_element=e))]
    for label, colour, style, fn in series:
        ax.plot(lengths, [fn(int(n)).total_bytes for n in lengths], style, color=colour,
                ms=4, label=label)
    ax.plot(lengths, [2 * int(n) * head_dim * e * 2 for n in lengths], ":", color="#777777",
            label="Q, K, V, O once each (lower bound)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    _binary_axis(ax.yaxis, 2 ** 18, 2 ** 37, step=3)
    _pow2_axis(ax.xaxis, lengths[::2])
    ax.set_xlabel("sequence length N = Tq = Tk (positions)")
    ax.set_ylabel("bytes read + written, outer memory")
    ax.set_title(f"Outer-memory traffic per head (d = {head_dim}, fp16)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left")                 # the lines start low: the corner is empty

    flops = [attention_flops(int(n), int(n), head_dim) for n in lengths]
    ax2.plot(lengths, flops, "o-", color=COLOURS["dense"], ms=7, mfc="none", label="dense")
    ax2.plot(lengths, flops, "s--", color=COLOURS["fa2"], ms=3.5, label="tiled (any tile size)")
    ax2.plot(lengths, [attention_flops(int(n), int(n), head_dim, causal=True) for n in lengths],
             "^-", color="#17becf", ms=4, label="causal (visible pairs only)")
    ax2.set_xscale("log", base=2)
    ax2.set_yscale("log", base=10)
    _pow2_axis(ax2.xaxis, lengths[::2])
    ax2.set_xlabel("sequence length N (positions)")
    ax2.set_ylabel(r"FLOPs $= 4 N^2 d$ (FLOP)")
    ax2.set_title("Arithmetic: identical\nfor dense and tiled")
    ax2.grid(True, alpha=0.3)
    ax2.legend(loc="upper left")
    fig.tight_layout()
    return fig


def plot_traffic_vs_budget(n: int = 16384, head_dim: int = 64, e: int = 2, gpu: str = "H200"):
    """Tiled traffic with the paper's block sizes for budgets M = 4 KiB .. 1 MiB."""
    plt = _plt()
    g = GPUS[gpu]
    budgets = 2 ** np.arange(12, 21)                                # bytes
    fig, ax = plt.subplots(figsize=(8.2, 5.0))
    dense = dense_traffic(n, n, head_dim, bytes_per_element=e, bytes_per_score=e).total_bytes
    ax.axhline(dense, color=COLOURS["dense"], lw=1.5, label="dense (Algorithm 0)")
    for order in ("fa2", "fa1"):
        ys = [tiled_traffic(n, n, head_dim, *paper_block_sizes(int(m), head_dim, e),
                            loop_order=order, bytes_per_element=e).total_bytes for m in budgets]
        ax.plot(budgets, ys, "o-", ms=4, color=COLOURS[order], label=f"tiled {order}, paper Br, Bc")
    # Theorem 2 guide: N^2 d^2 / M elements, scaled to pass through the fa1 point at 16 KiB
    m_el = budgets / e
    guide = n * n * head_dim ** 2 / m_el * e
    ref = tiled_traffic(n, n, head_dim, *paper_block_sizes(2 ** 14, head_dim, e),
                        loop_order="fa1", bytes_per_element=e).total_bytes
    ax.plot(budgets, guide * ref / guide[2], ":", color="#555555",
            label=r"slope of $N^2 d^2 / M$ (Theorem 2)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    _binary_axis(ax.xaxis, budgets[0], budgets[-1])
    lo, hi = ax.get_ylim()
    _binary_axis(ax.yaxis, lo, hi)
    ax.set_ylim(lo, hi)
    ax.axvline(g.smem_per_block_optin_bytes, color="#555555", ls="--", lw=1)
    ax.text(g.smem_per_block_optin_bytes * 0.93, 2 ** 27,
            f"{g.name}: {binary_size(g.smem_per_block_optin_bytes)}\nshared memory\nper block",
            ha="right", va="center", fontsize=9, color="#333333")
    knee = 4 * head_dim * head_dim * e
    ax.axvline(knee, color=COLOURS["fa2"], ls=":", lw=1)
    ax.text(knee * 0.93, lo * 1.3, f"right of this line, fa2 keeps Br = d = {head_dim}\n"
            f"($M = 4d^2$ elements = {binary_size(knee)});\nK, V still re-read N / Br times",
            fontsize=9, color=COLOURS["fa2"], ha="right", va="bottom")
    ax.set_xlabel("on-chip budget M (bytes); Bc = ceil(M / 4d), Br = min(Bc, d) in elements")
    ax.set_ylabel("bytes read + written, outer memory")
    ax.set_title(f"Bigger tiles, less traffic: N = {n:,}, d = {head_dim}, fp16, one head")
    ax.grid(True, alpha=0.3)
    legend_below(ax, ncol=2)                    # off the lines and the marked budgets
    fig.tight_layout()
    return fig
