"""The online-softmax pictures of notebook 02.

    plot_online_softmax   a row streamed in: m, l AND the accumulator being rescaled
    plot_merge_tree       the same row merged in two groupings: the same root state
"""

from __future__ import annotations

import numpy as np

from ..reference import EMPTY_STATE, merge_states, online_softmax_stats
from .style import WARP_COLOURS, plt as _plt


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
    fig, (top, mid, bot) = plt.subplots(3, 1, figsize=(8.6, 8.4), sharex=True,
                                        gridspec_kw={"height_ratios": [1, 0.8, 1.7]})
    idx = np.arange(1, n + 1)
    # bars from the bottom of the axis (not from 0), each with its value: a score of 0
    # (or below) is still a visible bar
    base = min(0.0, float(np.min(x))) - 0.6
    top.bar(idx, np.asarray(x) - base, bottom=base, color="#cccccc", edgecolor="#999999",
            label="score x_n")
    for k, xk in enumerate(x):
        top.text(k + 1, xk + 0.12, f"{xk:g}", ha="center", va="bottom", fontsize=9,
                 color="#555555")
    top.step(idx, [s["m"] for s in steps], where="mid", color="C3", lw=2,
             label="running max m_n")
    top.set_ylim(base, float(np.max(x)) + 1.0)
    top.set_ylabel("score")
    top.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    mid.plot(idx, [s["l"] for s in steps], "o-", color="C0", label="running sum l_n")
    for k, s in enumerate(steps):
        if 0 < s["alpha"] < 1:
            mid.annotate(f"alpha = {s['alpha']:.2f}", (k + 1, s["l"]), xytext=(6, -14),
                         textcoords="offset points", fontsize=9, color="C3")
    mid.set_ylabel("l")
    mid.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    offsets = np.linspace(-0.25, 0.25, d)
    side = 0.07                      # the rescale arrow sits this far left of the add arrow
    for c in range(d):
        colour = WARP_COLOURS[c]
        xs = idx + offsets[c]
        bot.plot(xs, [s["acc"][c] for s in steps], "-", color=colour, lw=0.8, alpha=0.5)
        bot.plot(xs, [s["acc"][c] for s in steps], "o", color=colour, ms=6, zorder=3,
                 label=f"acc[{c}] after")
        for k, s in enumerate(steps):
            before = s["acc_before"][c]
            scaled = s["alpha"] * before
            if 0 < s["alpha"] < 1:                 # the rescale: acc * alpha, towards 0
                xr = xs[k] - side
                bot.plot([xr], [before], "o", mfc="white", mec=colour, ms=6, zorder=3)
                bot.annotate("", xy=(xr, scaled), xytext=(xr, before),
                             arrowprops=dict(arrowstyle="->", color="C3", lw=1.4,
                                             shrinkA=3, shrinkB=0))
                bot.plot([xr, xs[k]], [scaled, scaled], ":", color="#888888", lw=0.9)
            bot.annotate("", xy=(xs[k], s["acc"][c]), xytext=(xs[k], scaled),
                         arrowprops=dict(arrowstyle="->", color="#888888", lw=0.9,
                                         shrinkA=0, shrinkB=3))
    for k, s in enumerate(steps):
        if 0 < s["alpha"] < 1:
            bot.axvspan(k + 0.6, k + 1.4, color="C3", alpha=0.07)
    bot.plot([], [], "o", mfc="white", mec="#555555", label="acc before")
    bot.plot([], [], color="C3", label="rescale:\nacc x alpha")
    bot.plot([], [], color="#888888", label="add e^(x - m) v")
    bot.axhline(0, color="black", lw=0.6)
    bot.set_ylabel("acc = sum e^(x - m) v")
    bot.set_xlabel("element n of the row (shaded: the max grew, so acc was multiplied\n"
                   "by alpha < 1 before the new term was added)")
    bot.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    bot.set_xticks(idx)
    last = steps[-1]
    p = np.exp(np.asarray(x) - np.max(x))
    exact = p @ np.asarray(v) / p.sum()
    err = float(np.abs(last["acc"] / last["l"] - exact).max())
    fig.suptitle("Online softmax with an output: the state (m, l, acc) as scores stream in;\n"
                 f"acc / l at the end matches softmax(x) V to {err:.1e}", fontsize=11)
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
    fig, axes = plt.subplots(1, 2, figsize=(8.6, 5.0))
    box = dict(boxstyle="round,pad=0.3", fc="white", ec="#333333")
    leaf_y, mid_y, top_y = 0.12, 0.5, 0.86
    leaf_x = (0.11, 0.37, 0.63, 0.89)

    def node(ax, xy, st, label, colour="#333333"):
        return ax.text(*xy, f"{label}\n{_state_text(st)}", ha="center", va="center",
                       fontsize=9, bbox={**box, "ec": colour})

    def edge(ax, child, parent):
        """An arrow from box to box, clipped at both boxes' edges (never over their text)."""
        ax.figure.canvas.draw()                        # the boxes' patches get their size
        ax.annotate("", xy=(0.5, 0.5), xycoords=parent, xytext=(0.5, 0.5), textcoords=child,
                    arrowprops=dict(arrowstyle="->", color="#777777", shrinkA=2, shrinkB=2,
                                    patchA=child.get_bbox_patch(),
                                    patchB=parent.get_bbox_patch()))

    # left: (a + b) + (c + d), a balanced tree
    ax = axes[0]
    ab, cd = merge_states(a, b), merge_states(c, d)
    root = merge_states(ab, cd)
    leaves = [node(ax, (leaf_x[k], leaf_y), st, f"{names[k]}: {len(pieces[k])} scores")
              for k, st in enumerate((a, b, c, d))]
    n_ab = node(ax, (0.25, mid_y), ab, "a + b")
    n_cd = node(ax, (0.75, mid_y), cd, "c + d")
    n_root = node(ax, (0.5, top_y), root, "(a + b) + (c + d)", "C3")
    for child, parent in ((leaves[0], n_ab), (leaves[1], n_ab), (leaves[2], n_cd),
                          (leaves[3], n_cd), (n_ab, n_root), (n_cd, n_root)):
        edge(ax, child, parent)
    ax.set_title("merged as a balanced tree\n(parallel workers)", fontsize=10)
    # right: ((d + c) + b) + a, a chain in reverse order
    ax = axes[1]
    dc = merge_states(d, c)
    dcb = merge_states(dc, b)
    root2 = merge_states(dcb, a)
    leaves = [node(ax, (leaf_x[k], leaf_y), st, f"{names[k]}: {len(pieces[k])} scores")
              for k, st in enumerate((a, b, c, d))]
    n_dc = node(ax, (0.75, 0.37), dc, "d + c")
    n_dcb = node(ax, (0.55, 0.62), dcb, "(d + c) + b")
    n_root2 = node(ax, (0.3, top_y), root2, "((d + c) + b) + a", "C3")
    for child, parent in ((leaves[3], n_dc), (leaves[2], n_dc), (n_dc, n_dcb),
                          (leaves[1], n_dcb), (n_dcb, n_root2), (leaves[0], n_root2)):
        edge(ax, child, parent)
    ax.set_title("merged right to left, one piece at a time\n(a sequential loop)",
                 fontsize=10)
    for ax in axes:
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.axis("off")
    lse_gap = max(abs(root.m + np.log(root.l) - whole.m - np.log(whole.l)),
                  abs(root2.m + np.log(root2.l) - whole.m - np.log(whole.l)))
    fig.suptitle(f"Merging (m, l) states is associative and commutative: both roots equal\n"
                 f"the whole row's state (m = {whole.m:.2f}, l = {whole.l:.3f}); "
                 f"lse differs by {lse_gap:.1e}", fontsize=10.5)
    fig.tight_layout()
    return fig
