"""Pictures and measurements for notebook 10 (tensor cores).

    plot_fragments()              which lane holds which element of the m16n8k16 A, B and
                                  C/D tiles (the PTX ISA's fragment maps, drawn)
    p_rounding_error(...)         what rounding P to 16 bits before P V costs (numpy)
    product_errors(...)           1xTF32, 3xTF32, fp32 and fp16 products against float64
    tensor_core_rows(doc, n, d)      the recorded H200 comparison at one point, fastest first
    plot_tensor_core_recorded(doc, d)  TFLOP/s against N, the hardware limits as lines
    ab_step_rows(ab)              version 2's instruction-count step: before/after per tile
    bars_forward_rows(bars)       the public forward beside PyTorch flash (gpu_bars.py)
    bars_backward_rows(bars)      the public backward beside PyTorch flash
    bars_error_rows(bars)         errors against float64, ours beside PyTorch flash
    bars_tf32_rows(bars, labels)  the public 3xTF32 forward beside PyTorch efficient fp32
    bars_tf32_error_rows(bars)    3xTF32's max relative error of o, ours beside PyTorch
    tf32_version_rows(doc)        3xTF32 version 1 against version 2's best tile, per d
    ncu_summary(path)             a recorded Nsight Compute report: instructions per mma, ...
    tf32_split_rows(doc)          the 3xTF32 split A/B: speed and error per split
    ratio_span(rows, col)         "lo-hi" of one ratio column
"""

from __future__ import annotations

import re

import numpy as np

from ..cuda.ptx import mma
from ..gpus import get_gpu
from ..results import read_text
from .style import FULL_WIDTH_IN, legend_under_panels
from .style import MIN_FONT_PT as FONT
from .style import plt as _plt

#: How the notebook names each contender of benchmarks/gpu_tensor_core.py.
LABELS = {
    "tc_fp16": "course: tensor cores fp16", "tc_bf16": "course: tensor cores bf16",
    "tc_3xtf32": "course: tensor cores 3xTF32 (fp32)", "flash_fp32": "course: FFMA flash fp32",
    "torch_flash_fp16": "PyTorch flash fp16", "torch_flash_bf16": "PyTorch flash bf16",
    "torch_cudnn_fp16": "PyTorch cuDNN fp16", "torch_cudnn_bf16": "PyTorch cuDNN bf16",
    "torch_efficient_fp32": "PyTorch efficient fp32 (3xTF32)",
    "torch_math_fp32": "PyTorch math fp32 (no TF32)",
}



def _draw_fragment(ax, name, title, xlabel, ylabel, lane_highlight, cmap):
    """One tile: each cell labelled with the lane that holds it and the element index."""
    from matplotlib.patches import Rectangle
    fmap, shape, n = mma.FRAGMENTS[name]
    rows, cols = shape
    for lane in range(mma.WARP):
        for i in range(n):
            r, c = fmap(lane, i)
            mine = lane == lane_highlight
            ax.add_patch(Rectangle((c, r), 1, 1, facecolor=cmap(lane // 4),
                                   alpha=0.35 + 0.15 * (lane % 4), edgecolor="white",
                                   lw=0.5, zorder=1))
            if mine:                                          # opaque outline, on top
                ax.add_patch(Rectangle((c + 0.04, r + 0.04), 0.92, 0.92, fill=False,
                                       edgecolor="black", lw=2, zorder=2))
            ax.text(c + 0.5, r + 0.5, f"{lane}\n{i}", ha="center", va="center",
                    fontsize=FONT, linespacing=0.95, zorder=3)
    ax.set_xlim(0, cols)
    ax.set_ylim(rows, 0)
    ax.set_xticks(np.arange(cols) + 0.5, [str(c) for c in range(cols)])
    ax.set_yticks(np.arange(rows) + 0.5, [str(r) for r in range(rows)])
    ax.tick_params(length=0, labelsize=FONT)
    ax.set_title(title, fontsize=10.5)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)


def plot_fragments(lane_highlight: int | None = 5):
    """Three tiles, each cell labelled with the lane that holds it (top) and the element
    index (bottom); colour = the lane's group g = lane // 4. `lane_highlight` is outlined
    in black. The operands A and B on the first row, the accumulator C / D and the key on
    the second (one row of three would be too narrow for 9-pt cell labels)."""
    plt = _plt()
    cell, width, height = 0.3, 9.3, 11.5                      # inches
    fig = plt.figure(figsize=(width, height))

    def place(x, y, cols, rows=16):                           # an axes of `cols` x `rows` cells
        return fig.add_axes((x / width, y / height, cols * cell / width, rows * cell / height))

    cmap = plt.get_cmap("tab10")
    row1, row2 = 6.25, 0.6                                    # bottom of each row of tiles
    _draw_fragment(place(0.75, row1, 16), "a_m16n8k16", "A (16 x 16): a0..a7 per lane",
                   "column k", "row m", lane_highlight, cmap)
    _draw_fragment(place(6.35, row1, 8), "b_m16n8k16", "B (16 x 8, k x n): b0..b3",
                   "column n", "row k", lane_highlight, cmap)
    _draw_fragment(place(0.75, row2, 8), "c_m16n8", "C / D (16 x 8): c0..c3",
                   "column n", "row m", lane_highlight, cmap)
    key = ("mma.sync m16n8k16, D = A B + C:\n"
           "each cell shows the lane of the warp\n"
           "that holds it (top) and the index of\n"
           "the element in that lane's registers\n"
           "(bottom: a0..a7, b0..b3, c0..c3).\n\n"
           "Colour: the lane's group g = lane // 4\n"
           "(the shade: t = lane % 4).")
    if lane_highlight is not None:
        key += (f"\n\nLane {lane_highlight} (g = {lane_highlight // 4}, "
                f"t = {lane_highlight % 4}) is outlined\nin black in all three tiles.")
    fig.text(3.75 / width, (row2 + 16 * cell) / height, key, ha="left", va="top",
             fontsize=10.5, linespacing=1.35)
    return fig


def p_rounding_error(n: int = 512, d: int = 64, precision: str = "fp16", seed: int = 0,
                     scale_q: float = 1.0) -> dict:
    """Relative error of O when P = exp(S - m) is rounded to 16 bits before P V, as the
    tensor-core kernel does, against the float64 attention of the same (rounded) inputs.

    Returns {"inputs_only": error from rounding q, k, v alone (against float64 on the
    unrounded inputs), "p_rounded": error added by rounding P (against float64 on the
    rounded inputs), "n", "d", "precision"}. Sum l stays unrounded, as in the kernel."""
    rng = np.random.default_rng(seed)
    r = mma.ROUNDERS[precision]
    q = rng.standard_normal((n, d)) * scale_q
    k, v = rng.standard_normal((n, d)), rng.standard_normal((n, d))

    def attend(q_, k_, v_, round_p):
        s = (q_ @ k_.T) / np.sqrt(d)                            # (n, n) scores
        p = np.exp(s - s.max(axis=1, keepdims=True))            # (n, n), <= 1
        l = p.sum(axis=1, keepdims=True)                        # (n, 1), from unrounded P
        if round_p:
            p = r(p).astype(np.float64)
        return (p @ v_) / l                                     # (n, d)

    qr, kr, vr = (r(x).astype(np.float64) for x in (q, k, v))
    exact = attend(q, k, v, False)
    exact_r = attend(qr, kr, vr, False)

    def rel(x, ref):
        return float(np.linalg.norm(x - ref) / np.linalg.norm(ref))
    return {"inputs_only": rel(exact_r, exact), "p_rounded": rel(attend(qr, kr, vr, True),
                                                                   exact_r),
            "n": n, "d": d, "precision": precision}


def _fp32_accumulate(pairs, k: int, chunk: int) -> np.ndarray:
    """sum over k of the products of each (a, b) in `pairs`, accumulated as a tensor core
    does: each chunk of `chunk` k-steps summed exactly, then added to a float32
    accumulator (rounded after every add), the pairs in the order given."""
    m, n = pairs[0][0].shape[0], pairs[0][1].shape[1]
    acc = np.zeros((m, n), np.float32)                          # (m, n) fp32 registers
    for k0 in range(0, k, chunk):
        for a, b in pairs:
            part = a[:, k0:k0 + chunk].astype(np.float64) @ b[k0:k0 + chunk].astype(np.float64)
            acc = (acc.astype(np.float64) + part).astype(np.float32)
    return acc


def product_errors(m: int = 64, k: int = 512, n: int = 64, seed: int = 0) -> dict:
    """max |A B - exact| / (|A| |B|) for each way to multiply float32 matrices, with the
    sums kept in float32 as the hardware keeps them: "fp16", "bf16" (inputs rounded,
    m16n8k16: chunks of 16), "tf32" (1 pass, m16n8k8: chunks of 8), "3xtf32"
    (small*big + big*small + big*big per chunk of 8, the kernel's order) and "fp32 FFMA"
    (one fused multiply-add per k, as a CUDA-core kernel). The denominator is the size
    of the terms summed, so the numbers compare rounding, not cancellation."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float32)          # (m, k)
    b = rng.standard_normal((k, n)).astype(np.float32)          # (k, n)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    size = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    ab, as_ = mma.split_tf32(a)
    bb, bs = mma.split_tf32(b)
    got = {"fp16": _fp32_accumulate([(mma.round_fp16(a), mma.round_fp16(b))], k, 16),
           "bf16": _fp32_accumulate([(mma.round_bf16(a), mma.round_bf16(b))], k, 16),
           "tf32": _fp32_accumulate([(ab, bb)], k, 8),
           "3xtf32": _fp32_accumulate([(as_, bb), (ab, bs), (ab, bb)], k, 8),
           "fp32 FFMA": _fp32_accumulate([(a, b)], k, 1)}
    return {p: float(np.max(np.abs(x.astype(np.float64) - exact) / size))
            for p, x in got.items()}


def tensor_core_rows(doc: dict, n: int = 4096, d: int = 64, causal: bool = False) -> list:
    """Bench rows of the recorded document at one point, fastest first."""
    rows = [r for r in doc.get("bench", []) if r["n"] == n and r["d"] == d
            and r["causal"] == causal and "tflops" in r]
    return sorted(rows, key=lambda r: -r["tflops"])


def hardware_limits(gpu: str = "H200") -> dict:
    """Datasheet peaks (TFLOP/s): dense fp16 tensor cores, tf32 (half of fp16 on Hopper),
    fp32 FFMA on CUDA cores."""
    g = get_gpu(gpu)
    return {"fp16 tensor (dense)": g.fp16_tensor_flops_per_s / 1e12,
            "tf32 tensor (dense)": g.fp16_tensor_flops_per_s / 2e12,
            "fp32 FFMA": g.fp32_flops_per_s / 1e12}


def plot_tensor_core_recorded(doc: dict, d: int = 64, gpu: str = "H200"):
    """TFLOP/s against N for every contender, non-causal and causal, on one log scale;
    the hardware limits as lines, labelled at the left edge above the lines (clear of
    the data, which starts at the smallest N), the legend under the panels."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(FULL_WIDTH_IN, 6.2), sharey=True,
                             layout="constrained")
    lim = hardware_limits(gpu)
    ns = sorted({r["n"] for r in doc.get("bench", []) if r["d"] == d and "tflops" in r})
    for ax, causal in zip(axes, (False, True)):
        for k, (name, label) in enumerate(LABELS.items()):
            pts = sorted((r["n"], r["tflops"]) for r in doc.get("bench", [])
                         if r["kernel"] == name and r["d"] == d and r["causal"] == causal
                         and "tflops" in r)
            if pts:
                x, y = zip(*pts)
                own = name.startswith(("tc_", "flash_"))
                ax.plot(x, y, "o-" if own else "s:", label=label, color=f"C{k}", ms=4,
                        lw=2 if own else 1.2)
        for (what, v), ls in zip(lim.items(), ("--", "-.", ":")):
            ax.axhline(v, color="grey", ls=ls, lw=1)
            ax.annotate(f"{what}: {v:.0f}", (0, v), xycoords=("axes fraction", "data"),
                        xytext=(4, 2), textcoords="offset points", va="bottom",
                        fontsize=FONT, color="dimgrey",
                        bbox=dict(fc="white", ec="none", alpha=0.8, pad=0.5))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        if ns:
            ax.set_xlim(ns[0] / 2 ** 1.3, ns[-1] * 2 ** 0.3)  # room on the left for the labels
        ax.set_xlabel("N = Tq = Tk (positions)")
        ax.set_title(f"d = {d}, {'causal' if causal else 'non-causal'}, "
                     f"B x H = {doc.get('bh', '?')}")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("TFLOP/s (log scale)")
    handles, labels = axes[0].get_legend_handles_labels()
    legend_under_panels(fig, handles, labels, ncol=2)
    fig.suptitle(f"Recorded on {doc['env'].get('gpu', '?')} "
                 f"({str(doc['env'].get('date_utc', ''))[:10]}); "
                 "solid: this course, dotted: PyTorch SDPA", fontsize=10.5)
    return fig


def ab_step_rows(ab: dict) -> list[list]:
    """Rows (d, warps, Bc, m_tiles, TFLOP/s before, after, gain) of the recorded A/B of
    benchmarks/results/h200_tensor_core_v2_ab.json: the median of its two repeats each."""
    by: dict = {}
    for r in ab.get("ab", []):
        key = (r["d"], r["warps"], r["block_k"], r["m_tiles"])
        by.setdefault(key, {}).setdefault(r["version"], []).append(r["tflops"])
    rows = []
    for (d, w, bk, mt), v in by.items():
        if "before" in v and "after" in v:
            b, a = float(np.median(v["before"])), float(np.median(v["after"]))
            rows.append([d, w, bk, mt, round(b, 1), round(a, 1), f"{a / b:.2f}x"])
    return rows


def bars_forward_rows(bars: dict) -> list[list]:
    """Rows (d, causal, N, ours fp16, PyTorch flash fp16, ratio, ours bf16 from float32,
    PyTorch flash bf16, ratio, ours bf16 from bf16 bits, ratio) in TFLOP/s, from
    benchmarks/results/h200_bars.json (the last two "-" in a run that did not time bits)."""
    out = []
    for r in bars.get("forward", []):
        row = [r["d"], "on" if r["causal"] else "off", r["n"],
               round(r["ours_fp16_tflops"], 1), round(r["torch_flash_fp16_tflops"], 1),
               round(r["fp16_ratio"], 2), round(r["ours_bf16_f32_tflops"], 1),
               round(r["torch_flash_bf16_tflops"], 1),
               round(r["bf16_f32_ratio_vs_flash_bf16"], 2)]
        bits = "ours_bf16_bits_tflops" in r
        row += ([round(r["ours_bf16_bits_tflops"], 1), round(r["bf16_ratio"], 2)] if bits
                else ["-", "-"])
        out.append(row)
    return out


def bars_backward_rows(bars: dict) -> list[list]:
    """Rows (d, causal, N, ours fp16, PyTorch flash fp16, ratio, ours bf16 bits, PyTorch
    flash bf16, ratio) in TFLOP/s ("-" where a run did not time bf16)."""
    out = []
    for r in bars.get("backward", []):
        row = [r["d"], "on" if r["causal"] else "off", r["n"], round(r["ours_fp16_tflops"], 1),
               round(r["torch_flash_fp16_tflops"], 1), round(r["fp16_ratio"], 2)]
        if "ours_bf16_bits_tflops" in r:
            row += [round(r["ours_bf16_bits_tflops"], 1), round(r["torch_flash_bf16_tflops"], 1),
                    round(r["bf16_ratio"], 2)]
        else:
            row += ["-", "-", "-"]
        out.append(row)
    return out


def bars_tf32_rows(bars: dict, labels: dict | None = None) -> list[list]:
    """Rows (d, causal, N, ours 3xTF32, PyTorch efficient fp32, ratio) in TFLOP/s, from the
    "tf32" part of a gpu_bars.py run (none in a run without it). labels: the variant to
    show per head dim (a --tf32-configs label such as "async:4:64"), else "default"."""
    out = []
    for r in bars.get("tf32", []):
        if r.get("kind") != "speed":
            continue
        lab = (labels or {}).get(r["d"], "default")
        out.append([r["d"], "on" if r["causal"] else "off", r["n"],
                    round(r[f"ours_3xtf32_{lab}_tflops"], 1),
                    round(r["torch_efficient_fp32_tflops"], 1), round(r[f"ratio_{lab}"], 2)])
    return out


#: the tile sweep with the adopted split (results/h200_bars_tf32_tiles.json): the variant of
#: each head dim that is the default now (its "default" column is the old default's tiles)
TF32_TILES_DEFAULTS = {64: "async:4:64", 128: "default"}


#: the version-3 A/B (results/h200_bars_tf32_planes.json): the tiles of each head dim that
#: are the default now; its "default" column is version 2's old defaults
TF32_PLANES_DEFAULTS = {64: "planes:8:64", 128: "planes:8:32"}


def tf32_planes_rows(doc: dict) -> list[list]:
    """Rows (d, causal, N, version 2 / PyTorch, version 3 TFLOP/s, PyTorch efficient fp32
    TFLOP/s, version 3 / PyTorch) of the version-3 A/B, at the default tiles of each."""
    out = []
    for r in doc.get("tf32", []):
        if r.get("kind") != "speed":
            continue
        lab = TF32_PLANES_DEFAULTS[r["d"]]
        out.append([r["d"], "on" if r["causal"] else "off", r["n"],
                    round(r["ratio_default"], 2), round(r[f"ours_3xtf32_{lab}_tflops"], 1),
                    round(r["torch_efficient_fp32_tflops"], 1), round(r[f"ratio_{lab}"], 2)])
    return out


def bars_tf32_error_rows(bars: dict) -> list[list]:
    """Rows (Tq, Tk, d, causal, ours, PyTorch efficient): max |o - o64| / max |o64|."""
    out = []
    for r in bars.get("tf32", []):
        if r.get("kind") != "error":
            continue
        theirs = f"{r['torch_efficient']:.2e}"
        if r["causal"] and r["tq"] > r["tk"] and "torch_rows_with_keys" not in r:
            theirs += " (the first Tq - Tk rows see no key: PyTorch's o there is not 0)"
        out.append([r["tq"], r["tk"], r["d"], "on" if r["causal"] else "off",
                    f"{r['ours_default']:.2e}", theirs])
    return out


def bars_tf32_backward_rows(bars: dict) -> tuple[list[list], list[list]]:
    """(speed rows (d, causal, N, ours 3xTF32, PyTorch efficient fp32, ratio) in TFLOP/s,
    error rows (Tq, Tk, d, causal, ours dq / dk / dv, PyTorch's)) of the "tf32_backward"
    part of a gpu_bars.py run; two empty lists in a run without it."""
    speed, errs = [], []
    for r in bars.get("tf32_backward", []):
        if r.get("kind") == "speed":
            speed.append([r["d"], "on" if r["causal"] else "off", r["n"],
                          round(r["ours_3xtf32_tflops"], 1),
                          round(r["torch_efficient_fp32_tflops"], 1), round(r["ratio"], 2)])
        elif r.get("kind") == "error":
            errs.append([r["tq"], r["tk"], r["d"], "on" if r["causal"] else "off"]
                        + [" / ".join(f"{r[f'{who}_{x}']:.1e}" for x in ("dq", "dk", "dv"))
                           for who in ("ours", "torch")])
    return speed, errs


def tf32_version_rows(doc: dict) -> list[list]:
    """Rows (d, version, warps, Bc, registers, local bytes, TFLOP/s, / version 1) of the
    3xTF32 variant sweep (h200_tensor_core_v2_tf32_variants.json): version 1's variant
    and version 2's fastest, per head dim."""
    out = []
    for d in sorted({r["d"] for r in doc.get("variants", [])}):
        rows = [r for r in doc["variants"] if r["d"] == d and r["precision"] == "3xtf32"
                and "ms" in r]
        v1 = [r for r in rows if r["config"].get("pipeline", "plain") == "plain"]
        v2 = [r for r in rows if r["config"].get("pipeline") == "async"]
        if not v1 or not v2:
            continue
        base = max(v1, key=lambda r: r["tflops"])
        for name, r in (("1", base), ("2", max(v2, key=lambda r: r["tflops"]))):
            c = r["config"]
            out.append([d, name, c["warps"], c["block_k"], r["regs"], r["local_bytes"],
                        round(r["tflops"], 1), round(r["tflops"] / base["tflops"], 2)])
    return out


def bars_error_rows(bars: dict) -> list[list]:
    """Rows (d, causal, then ours / PyTorch for o, dq, dk, dv) of relative errors."""
    return [[r["d"], "on" if r["causal"] else "off"]
            + [f"{r['ours_' + x]:.1e} / {r['torch_' + x]:.1e}" for x in ("o", "dq", "dk", "dv")]
            for r in bars.get("errors", [])]


def ncu_summary(path, n: int = 4096, d: int = 128, bh: int = 32) -> dict | None:
    """The numbers notebook 10 reads from a recorded Nsight Compute text report of the
    3xTF32 forward (results/h200_tf32_ncu_d*_log.txt; None if the file is missing):
    warp instructions, issue-slot use, the busiest pipe, registers, and the mma count
    of the run's shape (S = Q K^T and P V, three m16n8k8 tf32 mma of 2048 FLOPs each).
    A file that is not a text file (a folder, a FIFO, binary) raises ResultsError naming it
    (flashcourse.results.read_text)."""
    text = read_text(path)
    if text is None:
        return None

    def num(label):
        m = re.search(rf"{label}\s+\S+\s+([\d,.]+)", text)
        return float(m.group(1).replace(",", "")) if m else None
    pipe = re.search(r"(\w+) is the highest-utilized pipeline \(([\d.]+)%\)", text)
    mma = 2 * 3 * 2 * bh * n * n * d / 2048
    instr = num("Executed Instructions")
    return {"instructions": instr, "issue_busy_pct": num("Issue Slots Busy"),
            "pipe": pipe.group(1) if pipe else None,
            "pipe_pct": float(pipe.group(2)) if pipe else None,
            "registers": num("Registers Per Thread"),
            "warps_per_scheduler": num("Active Warps Per Scheduler"),
            "mma": mma, "per_mma": instr / mma if instr else None}


#: the 3xTF32 splits of the A/B (results.TF32_SPLIT_FILE), as the notebook names them
SPLIT_NAMES = {"cvt": "cvt.rna.tf32 twice (before)",
               "trunc_rna": "big truncated, small rounded (CUTLASS)",
               "rna_trunc": "big rounded on the bits, small truncated (adopted)"}


def tf32_split_rows(doc: dict) -> list[list]:
    """Rows (split, d = 64 default ratio span, d = 128 default ratio span, error at Tq = 512,
    Tk = 16,384, worst error of the accuracy rows) of the split A/B; ratios to PyTorch's
    efficient fp32 in the same process."""
    out = []
    for split in doc["splits"]:
        rows = [r for r in doc["tf32"] if r["split"] == split]
        speed = [r for r in rows if r["kind"] == "speed"]
        errs = [r for r in rows if r["kind"] == "error"]
        span = {d: ratio_span([[r["ratio_default"]] for r in speed if r["d"] == d], 0)
                for d in (64, 128)}
        long_row = [r["ours_default"] for r in errs if (r["tq"], r["tk"]) == (512, 16384)]
        out.append([SPLIT_NAMES.get(split, split), span[64], span[128],
                    f"{long_row[0]:.2e}" if long_row else "-",
                    f"{max(r['ours_default'] for r in errs):.2e}"])
    return out


def ratio_span(rows: list[list], col: int) -> str:
    """'lo-hi' of column `col` of table rows (two decimals)."""
    vals = [r[col] for r in rows]
    return f"{min(vals):.2f}-{max(vals):.2f}" if vals else "-"
