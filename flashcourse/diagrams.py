"""Teaching diagrams for notebooks 01-04, drawn from the library's own numbers.

    plot_memory_hierarchy    01  registers, shared memory, L2, HBM: capacity and bandwidth
    plot_online_softmax      02  a row streamed in: m, l AND the accumulator being rescaled
    plot_merge_tree          02  the same row merged in two groupings: the same root state
    plot_warp_partition      03  split-K (FlashAttention) against split-Q (FlashAttention-2)
    plot_causal_alignment    03  top-left against bottom-right causal masks when Tq != Tk
    plot_roofline            04  dense and tiled attention placed on the GPU's roofline

Each function returns a matplotlib Figure (the notebook shows it; tests check it draws).
Numbers come from `flashcourse.gpus`, `flashcourse.reference`, `flashcourse.traffic` and
`flashcourse.fa2_work`; nothing is typed in by hand.
"""

from __future__ import annotations

import numpy as np

from .geometry import causal_mask
from .gpus import get_gpu
from .memory import binary_size
from .reference import EMPTY_STATE, merge_states, online_softmax_stats

WARP_COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860",
                "#da8bc3", "#8c8c8c")


def _plt():
    import matplotlib.pyplot as plt
    return plt


def _rate(x: float | None, unit: str) -> str:
    if x is None:
        return "not published"
    return f"{x / 1e12:.1f} T{unit}"


# ---------------------------------------------------------------------------
# 01: the memory hierarchy
# ---------------------------------------------------------------------------

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
    fig, ax = plt.subplots(figsize=(11, 4.6))
    colours = ("#8172b3", "#55a868", "#4c72b0", "#c44e52")
    n = len(levels)
    for row, (lev, colour) in enumerate(zip(levels, colours, strict=True)):
        top, bottom = n - row, n - row - 1                     # y of the band
        half_top, half_bottom = 0.9 + 0.55 * row, 0.9 + 0.55 * (row + 1)
        ax.add_patch(Polygon([(-half_bottom, bottom + 0.04), (half_bottom, bottom + 0.04),
                              (half_top, top - 0.04), (-half_top, top - 0.04)],
                             closed=True, facecolor=colour, alpha=0.85, edgecolor="white"))
        ax.text(0, bottom + 0.5, lev["name"].replace(" (", "\n("), ha="center", va="center",
                color="white", fontsize=10, fontweight="bold")
        size = binary_size(lev["total_bytes"])
        if lev["per_sm_bytes"] is not None:
            size += f" in all ({binary_size(lev['per_sm_bytes'])} per SM)"
        bw = "bandwidth: " + _rate(lev["bandwidth"], "B/s")
        if lev["name"].startswith("shared") and lev["bandwidth"] is not None:
            bw += " (derived*)"
        ax.text(3.3, bottom + 0.62, f"{size};  {bw}", va="center", fontsize=10)
        ax.text(3.3, bottom + 0.28, lev["note"], va="center", fontsize=9, color="#444444")
    ax.annotate("", xy=(-3.4, 0.1), xytext=(-3.4, n - 0.1),
                arrowprops=dict(arrowstyle="->", color="#555555"))
    ax.text(-3.55, n / 2, "larger, slower,\nfurther from the\narithmetic units",
            ha="right", va="center", fontsize=9, color="#555555")
    ax.text(3.3, -0.25, "* 32 banks x 4 B = 128 B per clock per SM, x SMs x clock "
            "(CUDA Programming Guide; flashcourse.gpus)", fontsize=8, color="#666666")
    ax.set_xlim(-5.3, 10.6)
    ax.set_ylim(-0.4, n + 0.05)
    ax.axis("off")
    g = get_gpu(gpu)
    ax.set_title(f"The memories of an {g.name} ({g.sms} SMs): the tiled kernel keeps its "
                 "working set in shared memory and registers", fontsize=11)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------
# 02: the online softmax, with the accumulator; the merge tree
# ---------------------------------------------------------------------------

def online_softmax_trace(x, v) -> list[dict]:
    """Stream the scores x (n,) with values v (n, d): the state after each element.

    Each step: m, l, acc (d,) after the update, acc_before (d,) the previous acc, alpha
    the rescale factor e^(m_old - m_new) (0 at the first step, where acc was empty).
    """
    x = np.asarray(x, dtype=np.float64)                       # (n,)
    v = np.asarray(v, dtype=np.float64)                       # (n, d)
    if x.ndim != 1 or v.ndim != 2 or v.shape[0] != x.shape[0] or not np.isfinite(x).all():
        raise ValueError(f"x must be finite (n,) and v (n, d) with the same n, got "
                         f"{x.shape} and {v.shape}")
    m, l, acc = -np.inf, 0.0, np.zeros(v.shape[1])
    steps = []
    for xi, vi in zip(x, v, strict=True):
        m_new = max(m, xi)
        alpha = 0.0 if m == -np.inf else float(np.exp(m - m_new))
        p = float(np.exp(xi - m_new))
        acc_new = alpha * acc + p * vi                         # (d,)
        steps.append({"m": m_new, "l": alpha * l + p, "acc": acc_new, "acc_before": acc,
                      "alpha": alpha})
        m, l, acc = m_new, alpha * l + p, acc_new
    return steps


def plot_online_softmax(x=None, v=None):
    """Scores streaming in; the running max; and the accumulator acc = sum e^(x - m) v
    at each step, drawn next to its value before the step, so the rescaling by
    alpha = e^(m - m') is visible. The last panel: acc / l against softmax(x) v."""
    plt = _plt()
    if x is None:
        x = np.array([0.5, 2.0, 1.0, 3.5, 0.0, 4.5, 2.5])
    if v is None:
        v = np.array([[1.0, 0.2, -0.5], [0.4, 1.0, 0.3], [-0.6, 0.5, 1.0], [0.9, -0.4, 0.6],
                      [0.2, 0.8, -0.9], [0.5, 0.6, 0.7], [-0.3, -0.8, 0.4]])
    steps = online_softmax_trace(x, v)
    n, d = len(steps), np.asarray(v).shape[1]
    fig, (top, mid, bot) = plt.subplots(3, 1, figsize=(12, 7.6), sharex=True,
                                        gridspec_kw={"height_ratios": [1, 0.8, 1.6]})
    idx = np.arange(1, n + 1)
    top.bar(idx, x, color="#cccccc", label="score x_n")
    top.step(idx, [s["m"] for s in steps], where="mid", color="C3", lw=2,
             label="running max m_n")
    top.set_ylabel("score")
    top.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=9)
    mid.plot(idx, [s["l"] for s in steps], "o-", color="C0", label="running sum l_n")
    for k, s in enumerate(steps):
        if 0 < s["alpha"] < 1:
            mid.annotate(f"alpha = {s['alpha']:.2f}", (k + 1, s["l"]), xytext=(6, -14),
                         textcoords="offset points", fontsize=8.5, color="C3")
    mid.set_ylabel("l")
    mid.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=9)
    offsets = np.linspace(-0.25, 0.25, d)
    for c in range(d):
        colour = WARP_COLOURS[c]
        xs = idx + offsets[c]
        bot.plot(xs, [s["acc"][c] for s in steps], "-", color=colour, lw=0.8, alpha=0.5)
        bot.plot(xs, [s["acc"][c] for s in steps], "o", color=colour, ms=6,
                 label=f"acc[{c}] after the step")
        for k, s in enumerate(steps):
            before = s["acc_before"][c]
            scaled = s["alpha"] * before
            if 0 < s["alpha"] < 1:                 # the rescale: acc * alpha, towards 0
                bot.plot([xs[k]], [before], "o", mfc="white", mec=colour, ms=6)
                bot.annotate("", xy=(xs[k], scaled), xytext=(xs[k], before),
                             arrowprops=dict(arrowstyle="->", color="C3", lw=1.4))
            bot.annotate("", xy=(xs[k], s["acc"][c]), xytext=(xs[k], scaled),
                         arrowprops=dict(arrowstyle="->", color="#888888", lw=0.9))
    for k, s in enumerate(steps):
        if 0 < s["alpha"] < 1:
            bot.axvspan(k + 0.6, k + 1.4, color="C3", alpha=0.07)
    bot.plot([], [], "o", mfc="white", mec="#555555", label="acc before the step")
    bot.plot([], [], color="C3", label="rescale: acc x alpha")
    bot.plot([], [], color="#888888", label="add e^(x - m) v")
    bot.axhline(0, color="black", lw=0.6)
    bot.set_ylabel("acc = sum e^(x - m) v")
    bot.set_xlabel("element n of the row (shaded: the max grew, so acc was multiplied by "
                   "alpha < 1 before the new term was added)")
    bot.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=9)
    bot.set_xticks(idx)
    last = steps[-1]
    p = np.exp(np.asarray(x) - np.max(x))
    exact = p @ np.asarray(v) / p.sum()
    err = float(np.abs(last["acc"] / last["l"] - exact).max())
    fig.suptitle("Online softmax with an output: the state (m, l, acc) as scores stream in;"
                 f"  acc / l at the end matches softmax(x) V to {err:.1e}", fontsize=11)
    fig.tight_layout()
    return fig


def _state_text(st) -> str:
    if st.m == -np.inf:
        return "empty"
    return f"m = {st.m:.2f}\nl = {st.l:.3f}"


def plot_merge_tree(x=None, cuts=(3, 5, 9)):
    """One row of scores cut into four pieces at `cuts`, merged in two different groupings
    ((a + b) + (c + d) on the left, ((d + c) + b) + a on the right): every node shows its
    (m, l); both roots equal the state of the whole row."""
    plt = _plt()
    if x is None:
        x = np.array([0.3, 1.2, -0.4, 2.6, 0.8, 1.9, -1.1, 3.4, 0.1, 2.2, 1.5, -0.2])
    x = np.asarray(x, dtype=np.float64)
    pieces = np.split(x, list(cuts))
    if len(pieces) != 4:
        raise ValueError(f"cuts must cut x into 4 pieces, got {len(pieces)}")
    a, b, c, d = (online_softmax_stats(p) if p.size else EMPTY_STATE for p in pieces)
    names = "abcd"
    whole = online_softmax_stats(x)
    fig, axes = plt.subplots(1, 2, figsize=(11.5, 4.8))
    box = dict(boxstyle="round,pad=0.35", fc="white", ec="#333333")
    leaf_y, mid_y, top_y = 0.12, 0.5, 0.86
    leaf_x = (0.12, 0.37, 0.63, 0.88)

    def node(ax, xy, st, label, colour="#333333"):
        ax.text(*xy, f"{label}\n{_state_text(st)}", ha="center", va="center", fontsize=9,
                bbox={**box, "ec": colour})

    def edge(ax, p0, p1):
        ax.annotate("", xy=p1, xytext=p0, arrowprops=dict(arrowstyle="->", color="#777777",
                                                          shrinkA=22, shrinkB=22))

    # left: (a + b) + (c + d), a balanced tree
    ax = axes[0]
    ab, cd = merge_states(a, b), merge_states(c, d)
    root = merge_states(ab, cd)
    for k, st in enumerate((a, b, c, d)):
        node(ax, (leaf_x[k], leaf_y), st, f"{names[k]}: {len(pieces[k])} scores")
    node(ax, (0.25, mid_y), ab, "a + b")
    node(ax, (0.75, mid_y), cd, "c + d")
    node(ax, (0.5, top_y), root, "(a + b) + (c + d)", "C3")
    for p0, p1 in (((leaf_x[0], leaf_y), (0.25, mid_y)), ((leaf_x[1], leaf_y), (0.25, mid_y)),
                   ((leaf_x[2], leaf_y), (0.75, mid_y)), ((leaf_x[3], leaf_y), (0.75, mid_y)),
                   ((0.25, mid_y), (0.5, top_y)), ((0.75, mid_y), (0.5, top_y))):
        edge(ax, p0, p1)
    ax.set_title("merged as a balanced tree (parallel workers)", fontsize=10)
    # right: ((d + c) + b) + a, a chain in reverse order
    ax = axes[1]
    dc = merge_states(d, c)
    dcb = merge_states(dc, b)
    root2 = merge_states(dcb, a)
    for k, st in enumerate((a, b, c, d)):
        node(ax, (leaf_x[k], leaf_y), st, f"{names[k]}: {len(pieces[k])} scores")
    node(ax, (0.75, 0.37), dc, "d + c")
    node(ax, (0.55, 0.62), dcb, "(d + c) + b")
    node(ax, (0.3, top_y), root2, "((d + c) + b) + a", "C3")
    for p0, p1 in (((leaf_x[3], leaf_y), (0.75, 0.37)), ((leaf_x[2], leaf_y), (0.75, 0.37)),
                   ((0.75, 0.37), (0.55, 0.62)), ((leaf_x[1], leaf_y), (0.55, 0.62)),
                   ((0.55, 0.62), (0.3, top_y)), ((leaf_x[0], leaf_y), (0.3, top_y))):
        edge(ax, p0, p1)
    ax.set_title("merged right to left, one piece at a time (a sequential loop)",
                 fontsize=10)
    for ax in axes:
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.axis("off")
    lse_gap = max(abs(root.m + np.log(root.l) - whole.m - np.log(whole.l)),
                  abs(root2.m + np.log(root2.l) - whole.m - np.log(whole.l)))
    fig.suptitle(f"Merging (m, l) states is associative and commutative: both roots equal "
                 f"the whole row's state (m = {whole.m:.2f}, l = {whole.l:.3f}); "
                 f"lse differs by {lse_gap:.1e}", fontsize=10.5)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------
# 03: split-K against split-Q; causal alignment
# ---------------------------------------------------------------------------

def plot_warp_partition(warps: int = 4, block_q: int = 64, block_k: int = 64,
                        head_dim: int = 64):
    """Inside one thread block: which warp computes what, for one (Br, Bc) tile.

    split-K (FlashAttention): Q_i shared, K_j and V_j split into column slices, one per
    warp; each warp's P V is a partial (Br, d) output that must be added up across warps
    through shared memory. split-Q (FlashAttention-2): Q_i split into row slices; K_j, V_j
    shared; each warp owns whole rows of S, P and O: no exchange.
    """
    from matplotlib.patches import Rectangle

    from .fa2_work import warp_exchange_bytes
    plt = _plt()
    if not 1 <= warps <= len(WARP_COLOURS):
        raise ValueError(f"warps must be between 1 and {len(WARP_COLOURS)}, got {warps}")
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.6))
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
            title = (f"split-K (FlashAttention): K_j, V_j split across {warps} warps\n"
                     f"per tile: {binary_size(nbytes)} of partial outputs and row\n"
                     "statistics written, synchronised, read back and added")
        else:
            ax.add_patch(Rectangle((sx, ky), ws, 1.4, fc=grey, ec="#888888"))
            ax.add_patch(Rectangle((vx, 0), wq, h, fc=grey, ec="#888888"))
            ax.text(sx + ws / 2, ky + 0.7, "K_j^T\nread by all warps", ha="center",
                    va="center", fontsize=9)
            ax.text(vx + wq / 2, h / 2, "V_j\nread by\nall warps", ha="center", va="center",
                    fontsize=9)
            ax.text(ox + wq / 2, -0.75, "each warp writes\nits own rows of O_i", ha="center",
                    va="top", fontsize=9, color="#55a868")
            title = (f"split-Q (FlashAttention-2): Q_i split across {warps} warps\n"
                     "per tile: nothing to exchange between warps (0 B)\n ")
        for xy, text in (((qx + wq / 2, h + 0.15), f"Q_i ({block_q} x {head_dim})"),
                         ((sx + ws / 2, ky + 1.55), f"K_j^T ({head_dim} x {block_k})"),
                         ((sx + ws / 2, -0.15), f"S = Q_i K_j^T -> P ({block_q} x {block_k})"),
                         ((vx + wq / 2, h + 0.15), f"V_j ({block_k} x {head_dim})"),
                         ((ox + wq / 2, h + 0.15), f"O_i ({block_q} x {head_dim})")):
            ax.text(*xy, text, ha="center", va="bottom" if xy[1] > 0 else "top", fontsize=8.5)
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
                 " which warp computes what", fontsize=11.5)
    fig.tight_layout(rect=(0, 0.06, 1, 0.95))
    return fig


def plot_causal_alignment(shapes=((4, 7), (7, 4))):
    """Causal masks for each (Tq, Tk) in `shapes`: top-left aligned (PyTorch's
    is_causal=True) beside bottom-right aligned (this course, FlashAttention 2.1+).
    A visible pair is dark; rows that see no key are marked."""
    plt = _plt()
    fig, axes = plt.subplots(len(shapes), 2, figsize=(10, 3.5 * len(shapes)),
                             squeeze=False)
    for row, (tq, tk) in enumerate(shapes):
        for col, align in enumerate(("top-left", "bottom-right")):
            ax = axes[row, col]
            mask = causal_mask(tq, tk, align=align)                   # (Tq, Tk)
            ax.imshow(mask, cmap="Blues", vmin=-0.4, vmax=1.2)
            for i in range(tq):
                if not mask[i].any():
                    ax.text(tk - 0.5, i, "  sees no key: o = 0, lse = -inf", va="center",
                            fontsize=8, color="#c44e52", clip_on=False)
            ax.set_xticks(range(tk))
            ax.set_yticks(range(tq))
            ax.set_xticks(np.arange(-0.5, tk), minor=True)
            ax.set_yticks(np.arange(-0.5, tq), minor=True)
            ax.grid(which="minor", color="white", lw=1.5)
            ax.tick_params(which="minor", length=0)
            ax.set_xlabel("key position j")
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


# ---------------------------------------------------------------------------
# 04: the roofline
# ---------------------------------------------------------------------------

def roofline_points(n: int = 4096, head_dim: int = 64, bytes_per_element: int = 2,
                    tiles=((64, 64), (128, 64))) -> dict:
    """{label: (FLOPs, bytes)} for dense attention (Algorithm 0) and the tiled fa2 forward
    with each (Br, Bc) in `tiles`, one head, Tq = Tk = n."""
    from .traffic import attention_flops, dense_traffic, tiled_traffic
    flops = attention_flops(n, n, head_dim)
    e = bytes_per_element
    out = {"dense (Algorithm 0)": (flops, dense_traffic(n, n, head_dim, bytes_per_element=e,
                                                         bytes_per_score=e).total_bytes)}
    for br, bc in tiles:
        out[f"tiled fa2, Br = {br}, Bc = {bc}"] = (
            flops, tiled_traffic(n, n, head_dim, br, bc, bytes_per_element=e).total_bytes)
    return out


def plot_roofline(gpu: str = "H200", n: int = 4096, head_dim: int = 64):
    """Attainable FLOP/s = min(peak, intensity x bandwidth) for the fp16 tensor cores and
    the fp32 units, with dense and tiled attention (fp16) placed on it by their
    arithmetic intensity (FLOPs per byte of outer-memory traffic)."""
    plt = _plt()
    g = get_gpu(gpu)
    bw = g.bandwidth_bytes_per_s
    ai = np.logspace(-1, 4, 400)                                      # FLOP/byte
    fig, ax = plt.subplots(figsize=(9.5, 5.2))
    for peak, label, colour in ((g.fp16_tensor_flops_per_s, "fp16 tensor-core peak", "C0"),
                                (g.fp32_flops_per_s, "fp32 (non-matmul) peak", "C7")):
        ax.plot(ai, np.minimum(peak, ai * bw), color=colour, lw=2,
                label=f"{label} {peak / 1e12:.0f} TFLOP/s")
        ax.axvline(peak / bw, color=colour, ls=":", lw=1)
        ax.text(peak / bw * 1.08, peak * 0.55, f"balance\n{peak / bw:.0f} FLOP/B",
                fontsize=8, color=colour)
    markers = ("s", "o", "^", "D")
    for (label, (flops, nbytes)), mk in zip(roofline_points(n, head_dim).items(), markers):
        x = flops / nbytes
        y = min(g.fp16_tensor_flops_per_s, x * bw)
        ax.plot([x], [y], mk, ms=10, mec="black",
                label=f"{label}: {x:.0f} FLOP/B, at most {y / 1e12:.0f} TFLOP/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs per byte of HBM traffic)")
    ax.set_ylabel("attainable FLOP/s (upper bound)")
    ax.set_ylim(1e11, 3e15)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8.5, loc="upper left")
    ax.set_title(f"Roofline of an {g.name} ({bw / 1e12:.1f} TB/s HBM): attention forward, "
                 f"N = {n:,}, d = {head_dim}, fp16, one head", fontsize=10.5)
    fig.tight_layout()
    return fig


PLOTS = {"memory_hierarchy": plot_memory_hierarchy, "online_softmax": plot_online_softmax,
         "merge_tree": plot_merge_tree, "warp_partition": plot_warp_partition,
         "causal_alignment": plot_causal_alignment, "roofline": plot_roofline}

__all__ = ["PLOTS", "memory_levels", "online_softmax_trace", "roofline_points",
           "plot_memory_hierarchy", "plot_online_softmax", "plot_merge_tree",
           "plot_warp_partition", "plot_causal_alignment", "plot_roofline"]
