"""The memory pictures: the GPU's memory hierarchy (notebook 01) and the score matrix's
size against sequence length next to it (README, notebook 01).

    plot_memory_hierarchy   registers, shared memory, L2, HBM: capacity and bandwidth
    plot_score_memory       M_score = Tq Tk s against N, fp32/fp16/fp8, with the H200's
                            on-chip memory per SM, L2 and device memory
"""

from __future__ import annotations

import numpy as np

from ..gpus import GPUS, get_gpu
from ..memory import BYTES_PER_SCORE, binary_size, format_bytes, score_matrix_bytes
from .style import COLOURS
from .style import plt as _plt


def _rate(x: float | None, unit: str) -> str:
    if x is None:
        return "not published"
    return f"{x / 1e12:.1f} T{unit}"


def memory_levels(gpu: str = "H200") -> list[dict]:
    """The four levels of `gpu`, fastest first: name, capacity (bytes, whole GPU and per
    SM), bandwidth (bytes/s, None where not published) and who manages it."""
    g = get_gpu(gpu)
    return [
        {"name": "registers", "total_bytes": g.registers_total_bytes,
         "per_sm_bytes": g.registers_per_sm_bytes, "bandwidth": None,
         "note": "private to a thread; read by the arithmetic units every cycle"},
        {"name": "shared memory (SRAM)", "total_bytes": g.smem_total_bytes,
         "per_sm_bytes": g.smem_per_sm_bytes, "bandwidth": g.smem_bandwidth_bytes_per_s,
         "note": "one per SM, managed by the kernel: FlashAttention's tiles live here"},
        {"name": "L2 cache", "total_bytes": g.l2_bytes, "per_sm_bytes": None,
         "bandwidth": g.l2_bandwidth_bytes_per_s,
         "note": "shared by all SMs, managed by the hardware"},
        {"name": "HBM (device memory)", "total_bytes": g.memory_bytes, "per_sm_bytes": None,
         "bandwidth": g.bandwidth_bytes_per_s,
         "note": "off the chip: Q, K, V, O and a dense kernel's S and P"},
    ]


def plot_memory_hierarchy(gpu: str = "H200"):
    """A pyramid of the GPU's memories (FlashAttention paper, Figure 1, left), labelled with
    capacity and bandwidth from `flashcourse.gpus`: small and fast at the top."""
    plt = _plt()
    from matplotlib.patches import Polygon
    levels = memory_levels(gpu)
    fig, ax = plt.subplots(figsize=(8.6, 5.2))
    colours = ("#8172b3", "#55a868", "#4c72b0", "#c44e52")
    n = len(levels)
    for row, (lev, colour) in enumerate(zip(levels, colours, strict=True)):
        top, bottom = n - row, n - row - 1                     # y of the band
        half_top, half_bottom = 0.75 + 0.45 * row, 0.75 + 0.45 * (row + 1)
        ax.add_patch(Polygon([(-half_bottom, bottom + 0.04), (half_bottom, bottom + 0.04),
                              (half_top, top - 0.04), (-half_top, top - 0.04)],
                             closed=True, facecolor=colour, alpha=0.85, edgecolor="white"))
        ax.text(0, bottom + 0.5, lev["name"].replace(" (", "\n("), ha="center", va="center",
                color="white", fontsize=10, fontweight="bold")
        size = binary_size(lev["total_bytes"])
        if lev["per_sm_bytes"] is not None:
            size += f" in all ({binary_size(lev['per_sm_bytes'])} per SM)"
        bw = "bandwidth " + _rate(lev["bandwidth"], "B/s")
        if lev["name"].startswith("shared") and lev["bandwidth"] is not None:
            bw += " (derived*)"
        # one fact per line: capacity; bandwidth; who manages it
        ax.text(2.9, bottom + 0.5, f"{size}\n{bw}", va="bottom", fontsize=10,
                linespacing=1.3)
        ax.text(2.9, bottom + 0.43, lev["note"], va="top", fontsize=9, color="#444444")
    ax.annotate("", xy=(-2.9, 0.1), xytext=(-2.9, n - 0.1),
                arrowprops=dict(arrowstyle="->", color="#555555"))
    ax.text(-3.05, n / 2, "larger, slower,\nfurther from the\narithmetic units",
            ha="right", va="center", fontsize=9, color="#555555")
    ax.text(2.9, -0.12, "* 32 banks x 4 B = 128 B per clock per SM, x SMs x clock\n"
            "   (CUDA Programming Guide; flashcourse.gpus)", fontsize=9, color="#666666",
            va="top")
    ax.set_xlim(-4.6, 9.0)
    ax.set_ylim(-0.6, n + 0.05)
    ax.axis("off")
    g = get_gpu(gpu)
    ax.set_title(f"The memories of an {g.name} ({g.sms} SMs): the tiled kernel keeps its\n"
                 "working set in shared memory and registers", fontsize=11)
    fig.tight_layout()
    return fig


def _binary_axis(axis, lo: float, hi: float, step: int = 1) -> None:
    """Ticks at powers of 1024 (every `step`-th power of 2 between), labelled '32 MiB'."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator
    p_lo, p_hi = int(np.floor(np.log2(lo))), int(np.ceil(np.log2(hi)))
    ticks = [2.0 ** p for p in range(p_lo, p_hi + 1) if p % step == 0]
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(FuncFormatter(lambda x, _: binary_size(x)))


def _pow2_axis(axis, values) -> None:
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator
    axis.set_major_locator(FixedLocator(list(values)))
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(FuncFormatter(
        lambda x, _: (f"{int(x) // 2**20}M" if x >= 2**20 and int(x) % 2**20 == 0 else
                      f"{int(x) // 1024}K" if x >= 1024 and int(x) % 1024 == 0 else f"{int(x)}")))


def plot_score_memory(gpu: str = "H200"):
    """M_score = T x T x s (one head, one request) for T = 256 .. 1M, log-log."""
    plt = _plt()
    g = GPUS[gpu]
    lengths = 2 ** np.arange(8, 21)                               # 256 .. 1,048,576
    fig, ax = plt.subplots(figsize=(8.2, 5.2))
    for fmt in ("fp32", "fp16", "fp8"):
        s = BYTES_PER_SCORE[fmt]
        ys = [score_matrix_bytes(int(t), int(t), s) for t in lengths]
        ax.plot(lengths, ys, "o-", ms=3.5, color=COLOURS[fmt], label=f"{fmt} scores (s = {s} B)")
    smem = binary_size(g.smem_per_sm_bytes)
    levels = [(g.smem_per_sm_bytes, f"on-chip shared memory per SM ({smem})"),
              (g.l2_bytes, f"L2 cache ({binary_size(g.l2_bytes)})"),
              (g.memory_bytes, f"device memory, HBM ({binary_size(g.memory_bytes)})")]
    for n, (y, text) in enumerate(levels):
        ax.axhline(y, color="#555555", lw=1, ls="--")
        x, ha = (lengths[-1], "right") if n == 0 else (lengths[0], "left")
        ax.text(x, y * 1.25, text, fontsize=9, color="#333333", va="bottom", ha=ha)
    ex = score_matrix_bytes(4096, 4096, 2)
    ax.plot([4096], [ex], "o", ms=9, mfc="none", mec="black", mew=1.5)
    ax.annotate(f"4,096 x 4,096 fp16:\n{format_bytes(ex)}", (4096, ex), xytext=(12000, 2 ** 20.5),
                fontsize=9, va="bottom", arrowprops=dict(arrowstyle="->", color="black"))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_ylim(2 ** 16, 2 ** 43)
    _binary_axis(ax.yaxis, 2 ** 16, 2 ** 43, step=5)
    _pow2_axis(ax.xaxis, lengths[::2])
    ax.set_xlabel("sequence length Tq = Tk (positions)")
    ax.set_ylabel("dense score matrix M_score (bytes)")
    ax.set_title(f"Score matrix of ONE head and request, against the {g.name}'s memories")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="upper left", fontsize=9, bbox_to_anchor=(0, 0.74))
    fig.tight_layout()
    return fig
