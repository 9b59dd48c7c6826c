"""Pictures of the CUDA kernels: where each tile lives and which way the data flows.

Two diagrams, each a function that returns a matplotlib Figure (nothing is
measured: the sizes come from the kernel's own configuration):

    plot_flash_dataflow(config)     notebook 06: global memory -> shared memory ->
                                    registers in the fast forward kernel
                                    (`flashcourse.cuda.cuda_core.flash`), steps 1-6, with the
                                    bytes each level holds for one block / one thread
    plot_backward_key_major(...)    notebook 09: the backward's key-major tile loop:
                                    K_j, V_j and the dK_j, dV_j accumulators of one
                                    key block stay on chip while the inner loop walks
                                    the query blocks; every visible tile adds into a
                                    row block dQ_i in global memory with atomic adds

    from flashcourse.plots.kernels import plot_flash_dataflow
    fig = plot_flash_dataflow()          # in a notebook: plt.show()
"""

from __future__ import annotations

from .._checks import check_block, check_causal
from ..geometry import tile_visibility
from .style import MIN_FONT_PT as FONT
from .style import plt as _plt

BYTES_FP32 = 4                      # every tile of the course's CUDA kernels is fp32

_LEVEL_COLOURS = {"global": "#f3e0c8", "shared": "#d7e8f5", "registers": "#dcefd6"}
_STEP_COLOUR = "#b22222"



def _kib(nbytes: int) -> str:
    return f"{nbytes / 1024:.1f} KiB"


def _box(ax, x, y, w, h, title, detail, face):
    """A rounded box centred at (x, y), inches: a bold title above its detail lines."""
    from matplotlib.patches import FancyBboxPatch
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02",
                                facecolor=face, edgecolor="#333333", lw=1.2, zorder=2))
    ax.text(x, y + h / 2 - 0.17, title, ha="center", va="center", fontsize=10.5,
            fontweight="bold", zorder=3)
    ax.text(x, y + h / 2 - 0.32, detail, ha="center", va="top", fontsize=FONT,
            linespacing=1.15, zorder=3)


def _arrow(ax, start, end, step=None, *, rad=0.0, label_at=0.5, offset=(0.0, 0.0)):
    """An arrow from start to end, with its step number in a red circle (when given)."""
    from matplotlib.patches import FancyArrowPatch
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=14, lw=1.6,
                                 color=_STEP_COLOUR, connectionstyle=f"arc3,rad={rad}",
                                 shrinkA=2, shrinkB=2, zorder=4))
    if step is None:
        return
    x = start[0] + (end[0] - start[0]) * label_at + offset[0]
    y = start[1] + (end[1] - start[1]) * label_at + offset[1]
    ax.text(x, y, str(step), ha="center", va="center", fontsize=9.5, color="white",
            fontweight="bold", zorder=5,
            bbox=dict(boxstyle="circle,pad=0.25", fc=_STEP_COLOUR, ec="none"))


def plot_flash_dataflow(config=None):
    """Global -> shared -> register data flow of `flashcourse.cuda.cuda_core.flash`, steps 1-6.

    `config` is a `flashcourse.cuda.cuda_core.flash.FlashConfig` (default: Br = 128, Bc = 64,
    256 threads, TM = 8, d = 64, the configuration notebook 06 draws). Shared-memory
    bytes are the kernel's own (`config.shared_bytes`, padded strides included);
    register counts are the float32 values one thread keeps live. Drawn in inches
    (the axes fill the figure), `style.MAX_WIDTH_IN` wide at most.
    """
    from ..cuda.cuda_core.flash import FlashConfig
    if config is None:
        config = FlashConfig(128, 64, 256, 8, head_dim=64, shuffle=True)
    if not isinstance(config, FlashConfig):
        raise TypeError(f"config must be a flashcourse.cuda.cuda_core.flash.FlashConfig, "
                        f"got {type(config).__name__}")
    c = config
    br, bc, d, tm, tn, td = c.block_q, c.block_k, c.head_dim, c.tm, c.tn, c.td
    q_off, k_off, v_off, p_off, _, _ = c.offsets()
    qt_bytes = BYTES_FP32 * (k_off - q_off)                   # (d, Br + pad)
    ks_bytes = BYTES_FP32 * (v_off - k_off)                   # (Bc, d + pad)
    vs_bytes = BYTES_FP32 * (p_off - v_off)                   # (Bc, d)
    ps_bytes = BYTES_FP32 * br * c.p_stride                   # (Br, Bc + pad)
    kb = max(tn, td)                                          # K (TN) / V (TD) staging
    reg_values = tm + kb + tm * tn + tm * td + 2 * tm         # qa, kb, s, acc, m, l

    plt = _plt()
    from matplotlib.patches import Rectangle
    width, bottom, height = 9.3, 0.3, 7.6                     # the axes' units (~inches)
    shrink = 8.6 / width                       # shown at 8.6 in: fits the output area
    fig = plt.figure(figsize=(width * shrink, (height - bottom) * shrink))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(bottom, height)
    ax.axis("off")

    g, s_, r = 6.2, 4.4, 2.75                                 # band centres (inches)
    bands = [   # (level, y centre, band height, name, what it is)
        ("global", g, 1.3, "global memory\n(HBM, off chip)",
         "all heads; read\nand written by\nevery block"),
        ("shared", s_, 1.6, "shared memory\nof one block",
         f"{c.shared_bytes:,} B\n= {_kib(c.shared_bytes)}\n(the kernel's\nlayout)"),
        ("registers", r, 1.3, "registers of\none thread",
         f"{reg_values} float32\nvalues\n({c.threads} threads\nper block)"),
    ]
    for level, y, bh, name, what in bands:
        ax.add_patch(Rectangle((0.05, y - bh / 2), width - 0.1, bh,
                               facecolor=_LEVEL_COLOURS[level], edgecolor="none", alpha=0.45,
                               zorder=0))
        ax.text(0.15, y + bh / 2 - 0.1, name, ha="left", va="top", fontsize=10,
                fontweight="bold", linespacing=1.1)
        ax.text(0.15, y + bh / 2 - 0.55, what, ha="left", va="top", fontsize=FONT,
                color="#333333", linespacing=1.1)

    w, h, hs = 1.0, 0.8, 1.15                                 # box width, heights
    X = {k: 2.15 + 1.32 * i for i, k in enumerate(("Q", "K", "P", "V", "O", "lse"))}
    face = _LEVEL_COLOURS
    for key, title, detail in (("Q", "Q", "(Tq, d)"), ("K", "K", "(Tk, d)"),
                               ("V", "V", "(Tk, d)"), ("O", "O", "(Tq, d)"),
                               ("lse", "lse", "(Tq,)")):
        _box(ax, X[key], g, w, h, title, detail, face["global"])
    for key, title, shape, dims, nbytes in (
            ("Q", "Qt", "(d, Br)", (d, br), qt_bytes), ("K", "Ks", "(Bc, d)", (bc, d), ks_bytes),
            ("P", "Ps", "(Br, Bc)", (br, bc), ps_bytes),
            ("V", "Vs", "(Bc, d)", (bc, d), vs_bytes)):
        _box(ax, X[key], s_, w, hs, title,
             f"{shape}\n= {dims[0]} x {dims[1]}\n{_kib(nbytes)}", face["shared"])
    for key, title, detail in (
            ("Q", "qa", f"TM = {tm}\nvalues"), ("K", "kb", f"max(TN, TD)\n= {kb} values"),
            ("P", "s", f"TM x TN\n= {tm} x {tn}"), ("O", "acc", f"TM x TD\n= {tm} x {td}"),
            ("lse", "m, l", f"TM = {tm}\neach")):
        _box(ax, X[key], r, w, h, title, detail, face["registers"])

    top = h / 2
    sh = hs / 2
    _arrow(ax, (X["Q"], g - top), (X["Q"], s_ + sh), 1)                       # Q_i -> Qt
    _arrow(ax, (X["K"], g - top), (X["K"], s_ + sh), 2)                       # K_j -> Ks
    _arrow(ax, (X["V"], g - top), (X["V"], s_ + sh), 2)                       # V_j -> Vs
    _arrow(ax, (X["Q"], s_ - sh), (X["Q"], r + top), 3)                       # Qt -> qa
    _arrow(ax, (X["K"], s_ - sh), (X["K"], r + top), 3)                       # Ks -> kb
    _arrow(ax, (X["K"] + w / 2, r), (X["P"] - w / 2, r))                      # kb -> s
    _arrow(ax, (X["Q"], r - top), (X["P"] - 0.25, r - top), 3, rad=0.3,
           offset=(0, -0.34))                                                 # qa -> s
    _arrow(ax, (X["P"] + 0.25, r - top), (X["lse"], r - top), 4, rad=0.25,
           offset=(0, -0.45))                                                 # s -> m, l
    _arrow(ax, (X["P"], r + top), (X["P"], s_ - sh), 5)                       # s (P) -> Ps
    _arrow(ax, (X["P"] + 0.3, s_ - sh), (X["O"] - 0.3, r + top), 5,
           label_at=0.4)                                                      # Ps -> acc
    _arrow(ax, (X["V"], s_ - sh), (X["O"] - 0.05, r + top), 5, label_at=0.55)  # Vs -> acc
    _arrow(ax, (X["O"], r + top), (X["O"], g - top), 6)                       # acc -> O
    _arrow(ax, (X["lse"], r + top), (X["lse"], g - top), 6)                   # m, l -> lse

    steps = [
        "1  Q_i -> Qt once per block (scaled by scale * log2 e), coalesced",
        "2  for each key block j: K_j -> Ks, V_j -> Vs, coalesced; then a barrier",
        f"3  S micro-tile: per step of d, a thread loads TM + TN = {tm + tn} values "
        f"(qa, kb) and does TM x TN = {tm} x {tn} = {tm * tn} multiply-adds",
        "4  online softmax: row max over the row's threads (warp shuffle), "
        "P = exp2(S - m), rescale l and acc",
        "5  P -> Ps (each thread needs whole rows of P), then acc += P V_j "
        "from Ps and Vs",
        "6  after the last key block: O_i = acc / l and lse written once",
    ]
    ax.text(0.15, 1.5, "\n".join(steps), ha="left", va="top", fontsize=FONT,
            color="#222222", linespacing=1.45)
    ax.text(width / 2, height - 0.1,
            "Data flow of the fast forward kernel (flashcourse.cuda.cuda_core.flash)\n"
            f"Br = {br}, Bc = {bc}, d = {d}, {c.threads} threads = RT {c.rt} x CT {c.ct}",
            ha="center", va="top", fontsize=11)
    return fig


def plot_backward_key_major(t_query: int = 37, t_key: int = 45, block_q: int = 8,
                            block_k: int = 8, column: int = 2, *, causal: bool = True):
    """The backward's key-major loop, drawn for one key block `column` = j.

    The score matrix as (Br, Bc) tiles; column j's K_j, V_j (above) and dK_j, dV_j
    (below) stay on chip in one thread block; its inner loop visits the query
    blocks i top to bottom (numbers; tiles hidden by the causal mask are skipped);
    each visited tile adds scale * dS K_j into the row block dQ_i, in global memory,
    with atomic adds (arrows), because other key blocks add into the same rows.
    """
    tq, tk = check_block(t_query, "t_query"), check_block(t_key, "t_key")
    br, bc = check_block(block_q, "block_q"), check_block(block_k, "block_k")
    causal = check_causal(causal)
    tr, tc = -(-tq // br), -(-tk // bc)
    if isinstance(column, bool) or not isinstance(column, int) or not 0 <= column < tc:
        raise ValueError(f"column must be a key-block index in [0, {tc - 1}] for "
                         f"t_key = {tk}, block_k = {bc}, got {column!r}")

    plt = _plt()
    from matplotlib.patches import FancyArrowPatch, Patch, Rectangle
    fig, ax = plt.subplots(figsize=(11, 7.4))
    j = column
    k0, k1 = j * bc, min((j + 1) * bc, tk)
    status = {}
    for i in range(tr):
        for jj in range(tc):
            q0, q1 = i * br, min((i + 1) * br, tq)
            c0, c1 = jj * bc, min((jj + 1) * bc, tk)
            status[i, jj] = tile_visibility(q0, q1, c0, c1, tq, tk, causal)
    visited = [i for i in range(tr) if status[i, j] != "hidden"]

    # the score matrix, tile by tile; column j drawn on top
    for (i, jj), st in status.items():
        q0, q1 = i * br, min((i + 1) * br, tq)
        c0, c1 = jj * bc, min((jj + 1) * bc, tk)
        mine = jj == j
        face = ("#e6e6e6" if st == "hidden" else
                ("#9ec9ee" if mine else "#eef4fa"))
        ax.add_patch(Rectangle((c0, q0), c1 - c0, q1 - q0, facecolor=face,
                               edgecolor="#333333" if mine else "#999999",
                               lw=1.6 if mine else 0.8,
                               hatch="///" if st == "hidden" else None, zorder=1))
        if mine:
            label = "skip" if st == "hidden" else str(visited.index(i) + 1)
            ax.text((c0 + c1) / 2, (q0 + q1) / 2, label, ha="center", va="center",
                    fontsize=10 if label != "skip" else FONT,
                    fontweight="bold" if label != "skip" else "normal", zorder=3)
    # the chip: one thread block holds column j's K_j, V_j and dK_j, dV_j
    pad = 0.4 * bc
    top_y, bot_y = -2.6 * br / 8 - 3.2, tq + 3.2
    ax.add_patch(Rectangle((k0 - pad, top_y - 0.6), (k1 - k0) + 2 * pad,
                           bot_y + 4.4 - top_y, fill=False, ls="--", lw=1.5,
                           edgecolor="#2a6f2a", zorder=2))
    ax.add_patch(Rectangle((k0, top_y), k1 - k0, 3.2, facecolor="#dcefd6",
                           edgecolor="#333333", zorder=2))
    ax.text((k0 + k1) / 2, top_y + 1.6, "K_j, V_j", ha="center", va="center", fontsize=9.5,
            fontweight="bold", zorder=3)
    ax.add_patch(Rectangle((k0, bot_y), k1 - k0, 3.2, facecolor="#dcefd6",
                           edgecolor="#333333", zorder=2))
    ax.text((k0 + k1) / 2, bot_y + 1.6, "dK_j, dV_j", ha="center", va="center",
            fontsize=9.5, fontweight="bold", zorder=3)
    ax.text((k0 + k1) / 2, bot_y + 4.6,
            "on chip (dashed): one thread block;\ndK_j, dV_j written once, at the end",
            ha="center", va="top", fontsize=FONT, color="#2a6f2a")
    # the inner loop: down the column
    ax.add_patch(FancyArrowPatch((k0 - pad * 0.55, visited[0] * br if visited else 0),
                                 (k0 - pad * 0.55, tq), arrowstyle="-|>",
                                 mutation_scale=14, lw=1.6, color="#2a6f2a", zorder=4))
    ax.text(k0 - pad, top_y - 1.2, "inner loop: query blocks i, top to bottom",
            ha="left", va="bottom", fontsize=FONT, color="#2a6f2a")

    # dQ in global memory: one row block per query block, atomic adds from column j
    xq0 = tk + 0.35 * tk
    wq = max(4.0, 0.18 * tk)
    for i in range(tr):
        q0, q1 = i * br, min((i + 1) * br, tq)
        hit = i in visited
        ax.add_patch(Rectangle((xq0, q0), wq, q1 - q0,
                               facecolor="#f7c9c4" if hit else "#f3e0c8",
                               edgecolor="#333333", lw=1.0, zorder=2))
        ax.text(xq0 + wq / 2, (q0 + q1) / 2, f"dQ_{i}", ha="center", va="center",
                fontsize=9, zorder=3)
        if hit:
            ax.add_patch(FancyArrowPatch((k1, (q0 + q1) / 2), (xq0, (q0 + q1) / 2),
                                         arrowstyle="-|>", mutation_scale=12, lw=1.3,
                                         color=_STEP_COLOUR, zorder=4))
    ax.text(xq0 + wq / 2, -1.2, "dQ in global memory\n(fp32, zeroed first)", ha="center",
            va="bottom", fontsize=9)
    ax.text((k1 + xq0) / 2, tq + 1.0, "atomic adds:\nscale * dS K_j", ha="center", va="top",
            fontsize=FONT, color=_STEP_COLOUR)

    ax.set_xlim(min(-2.0, k0 - 1.3 * pad), xq0 + wq + 2)
    ax.set_ylim(bot_y + 8.0, top_y - 3.0)
    ax.set_aspect("equal")
    ax.set_xticks(sorted(set(range(0, tk, bc)) | {tk}))
    ax.set_yticks(sorted(set(range(0, tq, br)) | {tq}))
    ax.tick_params(labelsize=FONT)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.set_xlabel(f"key position (Bc = {bc}); column j = {j} is the key block drawn",
                  fontsize=9.5)
    ax.set_ylabel(f"query position (Br = {br})", fontsize=9.5)
    handles = [Patch(facecolor="#9ec9ee", edgecolor="#333333",
                     label=f"tiles of key block j = {j}: visited in the order shown"),
               Patch(facecolor="#eef4fa", edgecolor="#999999",
                     label="other key blocks: other thread blocks, at the same time"),
               Patch(facecolor="#e6e6e6", edgecolor="#999999", hatch="///",
                     label="hidden by the causal mask: skipped"),
               Patch(facecolor="#f7c9c4", edgecolor="#333333",
                     label=f"dQ rows that key block {j} adds into")]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=2,
              fontsize=FONT, frameon=False)
    ax.set_title(f"Backward, key-major loop: Tq = {tq}, Tk = {tk}, "
                 f"{'causal' if causal else 'not causal'}; one thread block per key block",
                 fontsize=11.5)
    fig.tight_layout()
    return fig
