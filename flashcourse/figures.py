"""The course's figures, drawn from flashcourse itself (run `make figures`).

    python -m flashcourse.figures DIR      # writes the PNGs below into DIR

    score_memory.png       M_score = Tq Tk s against sequence length, fp32/fp16/fp8, with
                           the H200's on-chip memory per SM, L2 and device memory
    traffic_vs_length.png  dense vs tiled outer-memory bytes against N (d = 64, fp16),
                           and the FLOPs, which tiling leaves unchanged
    traffic_vs_budget.png  tiled bytes against the on-chip budget M (paper block sizes)
    tile_schedule.png      the score matrix as tiles, numbered in loop order, causal
                           tiles that are skipped greyed out (replayed from the counter)

Each `plot_*` function returns a matplotlib Figure, so a notebook can show one too.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from .counter import TrafficCounter
from .gpus import GPUS
from .memory import BYTES_PER_SCORE, binary_size, format_bytes, score_matrix_bytes
from .traffic import attention_flops, dense_traffic, paper_block_sizes, tiled_traffic

DPI = 110
FIGURES = ("score_memory", "traffic_vs_length", "traffic_vs_budget", "tile_schedule")
COLOURS = {"fp32": "#1f77b4", "fp16": "#d62728", "fp8": "#2ca02c",
           "dense": "#d62728", "fa2": "#1f77b4", "fa1": "#9467bd", "flops": "#444444"}


def _plt():
    import matplotlib.pyplot as plt
    return plt


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


# ---------------------------------------------------------------------------
# 1. Score-matrix memory against sequence length
# ---------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------
# 2. Traffic and FLOPs against sequence length
# ---------------------------------------------------------------------------

def plot_traffic_vs_length(head_dim: int = 64, e: int = 2):
    """Dense vs tiled outer-memory bytes (left) and FLOPs (right) against N, one head."""
    plt = _plt()
    lengths = 2 ** np.arange(9, 18)                               # 512 .. 131,072
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.6), gridspec_kw={"width_ratios": [3, 2]})
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
    ax.legend(fontsize=8.5, loc="upper left")

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
    ax2.set_title("Arithmetic: identical for dense and tiled")
    ax2.grid(True, alpha=0.3)
    ax2.legend(fontsize=8.5, loc="upper left")
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------
# 3. Traffic against the on-chip budget
# ---------------------------------------------------------------------------

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
            ha="right", va="center", fontsize=8.5, color="#333333")
    knee = 4 * head_dim * head_dim * e
    ax.axvline(knee, color=COLOURS["fa2"], ls=":", lw=1)
    ax.text(knee * 0.93, lo * 1.3, f"right of this line, fa2 keeps Br = d = {head_dim}\n"
            f"($M = 4d^2$ elements = {binary_size(knee)});\nK, V still re-read N / Br times",
            fontsize=8.5, color=COLOURS["fa2"], ha="right", va="bottom")
    ax.set_xlabel("on-chip budget M (bytes); Bc = ceil(M / 4d), Br = min(Bc, d) in elements")
    ax.set_ylabel("bytes read + written, outer memory")
    ax.set_title(f"Bigger tiles, less traffic: N = {n:,}, d = {head_dim}, fp16, one head")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8.5, loc="upper right")
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------
# 4. The tile schedule
# ---------------------------------------------------------------------------

def tile_order(t_query: int, t_key: int, block_q: int, block_k: int, *, causal: bool,
               loop_order: str):
    """Replay flashcourse.tiled.forward with a counter: {(i, j): step} and the skipped tiles."""
    from . import tiled
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
    from .geometry import tile_visibility
    fig, axes = plt.subplots(1, 2, figsize=(10.5, 5.4))
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
        ax.set_xlabel(f"key position j (Bc = {block_k}; the last block is ragged)")
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
    fig.suptitle(f"Tile schedule of the causal score matrix, Tq = {t_query}, Tk = {t_key}: "
                 "the numbers give the order in which tiles are formed", fontsize=11.5)
    fig.tight_layout(rect=(0, 0.1, 1, 0.97))
    return fig


PLOTS = {"score_memory": plot_score_memory, "traffic_vs_length": plot_traffic_vs_length,
         "traffic_vs_budget": plot_traffic_vs_budget, "tile_schedule": plot_tile_schedule}


def write_all(out_dir, dpi: int = DPI) -> list[Path]:
    """Write every figure as DIR/<name>.png; return the paths."""
    plt = _plt()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in FIGURES:
        fig = PLOTS[name]()
        path = out / f"{name}.png"
        fig.savefig(path, dpi=dpi, metadata={"Software": None})
        plt.close(fig)
        paths.append(path)
    return paths


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Regenerate the course's figures (PNG).")
    parser.add_argument("out_dir", help="folder to write the PNGs into (created if missing)")
    parser.add_argument("--dpi", type=int, default=DPI, help=f"resolution (default {DPI})")
    args = parser.parse_args(argv)
    import matplotlib
    matplotlib.use("Agg")                 # files only: no window, no display needed
    for path in write_all(args.out_dir, dpi=args.dpi):
        print(f"wrote {path} ({path.stat().st_size:,} B)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
