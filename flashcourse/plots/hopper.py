"""Pictures and tables for the Hopper path (wgmma): swizzled shared-memory layouts, the
course's kernel layout, and its recorded measurements.

    plot_swizzle(swizzle, chunk)   one atom of 8 rows, each 16-byte chunk coloured by the
                                   bank group it lands in, without and with the swizzle;
                                   the 8 chunks that one column read touches outlined
    plot_kernel_layout(rows, d, keys)  where the course's kernel puts each 16-byte chunk of
                                   a K-major tile (Q, K_j) and of the MN-major V_j: the
                                   byte offset's 128-byte core matrix, drawn over the tile
    variant_rows(doc)              (d, warpgroups, Bc, serial, overlap TFLOP/s, registers)
    bench_rows(doc)                the public call beside PyTorch flash, cuDNN, mma.sync
    plot_bench(doc)                those TFLOP/s as grouped bars, the fp16 peak drawn
    plot_schedule(n, bh, ...)      when each SM finishes its blocks (`cuda.hopper.tail_split`):
                                   causal head after head against longest first, and the
                                   last wave whole against split along the keys

The layouts come from the numpy model `flashcourse.cuda.hopper.wgmma_layouts`.
"""

from __future__ import annotations

import numpy as np

from ..cuda.hopper import wgmma_layouts as W
from .style import MIN_FONT_PT as FONT
from .style import legend_under_panels
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


def plot_kernel_layout(rows: int = 16, d: int = 32, keys: int = 16):
    """Two tiles as the Hopper kernel stores them (no swizzle): a K-major tile of `rows` x d
    (Q or K_j) and V_j of `keys` x d, MN-major. Each cell is one 16-byte chunk (8 values of
    one row); its number is the 128-byte core matrix it lands in (offset // 128), so the
    8 rows x 16 bytes of each core matrix are contiguous."""
    for name, v in (("rows", rows), ("d", d), ("keys", keys)):
        if v <= 0 or v % 8:
            raise ValueError(f"{name} must be a positive multiple of 8, got {v}")
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(7.8, 4.2), layout="constrained")
    cmap = plt.get_cmap("tab20")
    for ax, (n, title, off) in zip(axes, (
            (rows, f"Q or K_j, K-major ({rows} x {d})\nLBO 128 B, SBO {16 * d} B",
             lambda r, c: W.interleaved_kmajor(r, 8 * c, d)),
            (keys, f"V_j, MN-major ({keys} x {d})\nLBO 128 B, SBO {16 * keys} B",
             lambda r, c: W.interleaved_mnmajor(r, 8 * c, keys)))):
        r, c = np.meshgrid(np.arange(n), np.arange(d // 8), indexing="ij")
        core = off(r, c) // 128
        ax.imshow(core % 20, cmap=cmap, aspect="auto", vmin=0, vmax=19)
        for (i, j), val in np.ndenumerate(core):
            ax.text(j, i, str(int(val)), ha="center", va="center", fontsize=FONT)
        ax.set_xticks(range(d // 8), [f"{8 * j}-{8 * j + 7}" for j in range(d // 8)])
        ax.set_xlabel("columns of d (one 16-byte chunk each)")
        ax.set_ylabel("row (query or key)")
        ax.tick_params(labelsize=FONT)
        ax.set_title(title, fontsize=10)
    fig.suptitle("Each cell: a 16-byte copy; its number: the core matrix\n(128 contiguous "
                 "bytes) it lands in", fontsize=10.5)
    return fig


def variant_rows(doc: dict) -> list[list]:
    """Rows (d, warpgroups, Br, Bc, version 1 serial TFLOP/s, version 2 overlap TFLOP/s,
    registers serial / overlap) from the recorded run's bare-kernel variants."""
    by = {}
    for v in doc.get("variants", []):
        by.setdefault((v["d"], v["warpgroups"], v["block_k"]), {})[v["pipeline"]] = v
    out = []
    for (d, wg, bk), pv in sorted(by.items()):
        s, o = pv.get("serial"), pv.get("overlap")
        out.append([d, wg, 64 * wg, bk, round(s["tflops"], 1) if s else "-",
                    round(o["tflops"], 1) if o else "-",
                    f"{s['regs'] if s else '-'} / {o['regs'] if o else '-'}"
                    + (f" (+{o['local_bytes']} B spilled)" if o and o["local_bytes"] else "")])
    return out


def bench_rows(doc: dict) -> list[list]:
    """Rows (d, causal, N, hopper fp16, hopper bf16, course mma.sync fp16, PyTorch flash
    fp16, cuDNN fp16, hopper / flash fp16, hopper / flash bf16, hopper / cuDNN) TFLOP/s."""
    out = []
    for r in sorted(doc.get("bench", []), key=lambda r: (r["d"], r["causal"], r["n"])):
        out.append([r["d"], "on" if r["causal"] else "off", r["n"],
                    round(r["hopper_fp16_tflops"], 1), round(r["hopper_bf16_tflops"], 1),
                    round(r["tensor_core_fp16_tflops"], 1),
                    round(r["torch_flash_fp16_tflops"], 1), round(r["cudnn_fp16_tflops"], 1),
                    round(r["fp16_ratio"], 2), round(r["bf16_ratio"], 2),
                    round(r["fp16_vs_cudnn"], 2)])
    return out


def plot_bench(doc: dict, peak_flops: float | None = None):
    """Grouped bars per (d, causal, N): the course's Hopper kernel, its mma.sync kernel,
    PyTorch flash (FlashAttention-2) and cuDNN, fp16, TFLOP/s; a dashed line at the peak,
    with room above it for its label, and the legend under the axes (inside, it covered
    the line)."""
    rows = bench_rows(doc)
    if not rows:
        raise ValueError("the recorded run has no bench rows to plot")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.2, 4.6), layout="constrained")
    series = (("course hopper (wgmma)", 3), ("course tensor_core (mma.sync)", 5),
              ("PyTorch flash (FA2)", 6), ("cuDNN", 7))
    x = np.arange(len(rows))
    width = 0.2
    for i, (label, col) in enumerate(series):
        ax.bar(x + (i - 1.5) * width, [r[col] for r in rows], width, label=label)
    if peak_flops:
        ax.axhline(peak_flops / 1e12, ls="--", color="grey", lw=1)
        ax.text(len(rows) - 0.5, peak_flops / 1e12, "dense fp16 peak", ha="right",
                va="bottom", fontsize=FONT, color="grey")
        ax.set_ylim(0, 1.1 * peak_flops / 1e12)
    ax.set_xticks(x, [f"d={r[0]}\n{'causal' if r[1] == 'on' else 'full'}\nN={r[2] // 1024}k"
                      for r in rows])
    ax.tick_params(labelsize=FONT)
    ax.set_ylabel("TFLOP/s (fp16, B x H = 32)")
    legend_under_panels(fig, ncol=4, fontsize=FONT)
    ax.set_title("Forward through the public call, one H200 run (benchmarks/results/"
                 "h200_hopper.json)", fontsize=10)
    return fig


def plot_schedule(n: int = 4096, bh: int = 32, block_q: int = 192, block_k: int = 80,
                  sms: int = 132):
    """Two panels of the SMs' finish times, sorted (a GPU's block scheduler as observed: each
    block, in launch order, to the first free SM): causal (a block's cost = the key blocks
    it sees), each head's blocks longest first head after head, against longest first over
    all heads; non-causal, the blocks whole against the last wave split (`tail_split.plan`).
    The dashed line is the work spread evenly: the area above a curve and below the longest
    is idle SM time."""
    from ..cuda.hopper import tail_split as T
    plt = _plt()
    nqb, kb = -(-n // block_q), -(-n // block_k)

    def cost(qb):                    # key blocks query block qb sees (bottom-right mask)
        return -(-min(qb * block_q + block_q, n) // block_k)

    causal = {label: T.list_schedule([cost(T.unit(u, nqb, bh, True, order)[1])
                                      for u in range(nqb * bh)], sms) / kb
              for label, order in (("head after head", "head-major"),
                                   ("longest first", "lpt"))}
    sp = T.plan(nqb * bh, kb, sms)
    pieces = [(b - a) / kb for _, a, b in T.block_work(sp, kb)]
    full = {"whole blocks": T.list_schedule([1.0] * (nqb * bh), sms),
            f"last wave split in {sp.splits}": T.list_schedule(pieces, sms)}
    fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.8), layout="constrained")
    for ax, (title, runs, work) in zip(axes, (
            ("causal", causal, bh * sum(cost(qb) for qb in range(nqb)) / kb / sms),
            ("non-causal", full, nqb * bh / sms))):
        for label, t in runs.items():
            ax.plot(np.arange(sms), np.sort(t)[::-1], label=f"{label}: ends at {t.max():.2f}")
        ax.axhline(work, ls="--", color="grey", lw=1)
        ax.text(sms - 1, work, "work / SMs", ha="right", va="bottom", fontsize=FONT,
                color="grey")
        ax.set_xlabel("SM (sorted by when it finishes)")
        ax.set_ylabel("time (block-times)")
        ax.set_title(f"{title}: N = {n}, Br = {block_q}, Bc = {block_k}", fontsize=9)
        ax.legend(fontsize=FONT, loc="lower left")
        ax.tick_params(labelsize=FONT)
    fig.suptitle(f"When each of {sms} SMs finishes (B x H = {bh}, one block per SM)",
                 fontsize=10)
    return fig
