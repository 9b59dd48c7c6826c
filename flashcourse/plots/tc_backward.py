"""The backward pass on tensor cores (notebook 10, section 6; its measurements in notebook
10b): its products, its B loads, its roundings and the recorded H200 run.

    PRODUCTS                the five products of one (query block i, key block j) pair as
                            the key-major kernel runs them: (M, N, K), operands, B load
    pack_rows(tile)         a uint16 tile stored row-major as 32-bit words (shared memory)
    lanes_matching(...)     how many lanes get their m16n8k16 B fragments from one load
    b_load(rows_are)        "ld_b" or "ld_bt", whichever the numpy models say is right
    plot_b_trans()          a 16 x 8 (k, n) B tile stored with k along the rows: which lane
                            gets which element from ldmatrix.trans and from plain ldmatrix
    rounding_model(...)     the float64 backward with the fp16 kernel's roundings, by choice
    error_text(grads, ref)  the relative errors of dQ, dK, dV on one line
    check_lines(doc)        the recorded checks, one line each
    variant_table(doc)      the recorded tile variants, v1 beside v2 (html_table rows)
    bench_table(doc)        TFLOP/s per shape: ours, PyTorch's, the ratios (html_table rows)
    plot_bench(doc)         the same as bars
    profile_metrics(text)   the Nsight Compute numbers of a recorded profile (name -> value)
    bar_lines(bars, bar)    per d: the fp16 and bf16 ratio spans (four decimals) and the
                            points below `bar`

The kernels are in `flashcourse/cuda/gradients/tc_backward_kernels.py` (version 1) and
`tc_backward_kernels_async.py` (version 2), the ldmatrix models in `cuda/ptx/smem_ops.py`.
"""

from __future__ import annotations

import numpy as np

from ..cuda.ptx import mma, smem_ops
from ..cuda.gradients.tc_backward import default_tiles
from ..geometry import visible_mask
from ..gpus import get_gpu
from ..limits import get_preset, occupancy
from ..timing import rel_err
from ..traffic import backward_flops
from .style import FULL_WIDTH_IN, legend_under_panels
from .style import MIN_FONT_PT as FONT
from .style import plt as _plt

_REGS = "rows of the warp's 16 keys, in registers, loaded once"
_ACC = "accumulators, rounded to 16 bits (C layout = A layout)"
_SUMMED = {"d": "d", "Br": "queries", "Bc": "keys"}


def _product(key, maths, kernel, mnk, a, b, b_rows):
    """One row of PRODUCTS; b: the tile whose row-major copy in shared memory is the B
    operand (read transposed when b_rows is "n")."""
    bt = f"{b}^T" if b_rows == "n" else b
    return {"key": key, "maths": maths, "kernel": kernel, "mnk": mnk, "A": a,
            "B": f"{bt} (k = {_SUMMED[mnk[2]]}): {b} row-major in shared memory",
            "b_rows": b_rows}


#: The five products of one tile pair in the key-major kernel (its header lists them).
#: mnk: the product's (M, N, K) for the whole thread block (each warp does 16 of the M
#: rows); b_rows: what the rows of the B operand's shared-memory copy run over, "n" (the
#: product's output columns) or "k" (the summed dimension); the B load follows from it.
PRODUCTS = (
    _product("s", "S = Q_i K_j^T", "S^T = K_j Q_i^T", ("Bc", "Br", "d"), f"K_j {_REGS}",
             "Q_i", "n"),
    _product("dp", "dP = dO_i V_j^T", "dP^T = V_j dO_i^T", ("Bc", "Br", "d"), f"V_j {_REGS}",
             "dO_i", "n"),
    _product("dv", "dV_j += P^T dO_i", "dV_j += P^T dO_i", ("Bc", "d", "Br"),
             f"P^T: the S^T {_ACC}", "dO_i", "k"),
    _product("dk", "dK_j += dS^T Q_i", "dK_j += dS^T Q_i", ("Bc", "d", "Br"),
             f"dS^T: the dP^T {_ACC}", "Q_i", "k"),
    _product("dq", "dQ_i += dS K_j", "dQ_i += dS K_j (atomics)", ("Br", "d", "Bc"),
             "dS (rows = queries): dS^T in 16 bits in shared memory, by ldmatrix.trans", "K_j",
             "k"),
)

#: the loads of `flashcourse.cuda.ptx.smem_ops` by name, and their numpy models
LOADS = {"ld_b": smem_ops.ld_b_model, "ld_bt": smem_ops.ld_bt_model}
#: what an element of a (16, 16) uint16 tile must be to decode where a load put it
_INDEX_TILE = np.arange(256, dtype=np.uint16).reshape(16, 16)          # value = 16 row + col


def pack_rows(tile, pad_words: int = 4) -> tuple[np.ndarray, int]:
    """A (rows, cols) tile of 16-bit values stored row-major as 32-bit words, two
    neighbouring columns per word (the lower column in the low half), each row padded by
    `pad_words` words as the kernels pad them. Returns (words (rows * stride,) uint32,
    stride in words)."""
    tile = np.asarray(tile).astype(np.uint16)
    rows, cols = tile.shape
    if cols % 2:
        raise ValueError(f"tile must have an even number of columns, got {cols}")
    words = tile[:, 0::2].astype(np.uint32) | (tile[:, 1::2].astype(np.uint32) << 16)
    stride = cols // 2 + pad_words
    out = np.zeros((rows, stride), np.uint32)                            # (rows, stride)
    out[:, :cols // 2] = words
    return out.reshape(-1), stride


def b_tiles(stored: np.ndarray, rows_are: str) -> tuple[np.ndarray, np.ndarray]:
    """The two 16 x 8 (k, n) B tiles of an m16n8k16 product held in a 16 x 16 tile as
    stored in shared memory: rows_are "k" (stored = B) or "n" (stored = B^T)."""
    if rows_are == "k":
        return stored[:, :8], stored[:, 8:]
    if rows_are == "n":
        return stored[:8].T, stored[8:].T
    raise ValueError(f"rows_are must be 'k' or 'n', got {rows_are!r}")


def lanes_matching(load: str, rows_are: str, seed: int = 0) -> int:
    """How many of the 32 lanes receive exactly their mma B registers (b0 b1, b2 b3 of two
    n8 tiles) when the warp runs `load` ("ld_b": ldmatrix.x4, "ld_bt": ldmatrix.x4.trans)
    on a random 16 x 16 tile of 16-bit values stored with its rows running over
    `rows_are` ("k" or "n")."""
    if load not in LOADS:
        raise ValueError(f"load must be one of {sorted(LOADS)}, got {load!r}")
    stored = np.random.default_rng(seed).integers(0, 2 ** 16, (16, 16)).astype(np.uint16)
    words, stride = pack_rows(stored)
    t0, t1 = b_tiles(stored, rows_are)
    return sum(LOADS[load](words, 0, stride, lane)
               == smem_ops.b_fragment_of(t0, lane) + smem_ops.b_fragment_of(t1, lane)
               for lane in range(mma.WARP))


def b_load(rows_are: str) -> str:
    """The ldmatrix form that delivers the B fragments from a copy whose rows run over
    `rows_are`: the one for which all 32 lanes match (computed, not looked up)."""
    right = [name for name in LOADS if lanes_matching(name, rows_are) == mma.WARP]
    if len(right) != 1:
        raise AssertionError(f"rows over {rows_are}: loads that match {right}")
    return right[0]


def _received(load: str) -> dict:
    """{(row, col) of the stored 16 x 8 tile: (lane, i)}: where `load` puts each element
    of the first n8 tile (registers 0 and 1, halves low/high = elements 2r, 2r + 1)."""
    words, stride = pack_rows(_INDEX_TILE)
    got = {}
    for lane in range(mma.WARP):
        regs = LOADS[load](words, 0, stride, lane)
        for r in range(2):
            for half in range(2):
                value = (int(regs[r]) >> (16 * half)) & 0xFFFF
                got[(value // 16, value % 16)] = (lane, 2 * r + half)
    return got


def _draw_b_tile(ax, got, title, lane_highlight, cmap):
    from matplotlib.patches import Rectangle
    for (row, col), (lane, i) in got.items():
        if col >= 8:
            continue
        ax.add_patch(Rectangle((col, row), 1, 1, facecolor=cmap(lane // 4),
                               alpha=0.35 + 0.15 * (lane % 4), edgecolor="white", lw=0.5))
        if lane == lane_highlight:
            ax.add_patch(Rectangle((col + 0.04, row + 0.04), 0.92, 0.92, fill=False,
                                   edgecolor="black", lw=2, zorder=2))
        ax.text(col + 0.5, row + 0.5, f"{lane}\nb{i}", ha="center", va="center",
                fontsize=FONT, linespacing=0.95, zorder=3)
    for x in (0, 2, 4, 6, 8):                     # 32-bit word boundaries: two n per word
        ax.axvline(x, color="black", lw=1.6, zorder=4)
    ax.set_xlim(0, 8)
    ax.set_ylim(16, 0)
    ax.set_xticks(np.arange(8) + 0.5, [str(c) for c in range(8)])
    ax.set_yticks(np.arange(16) + 0.5, [str(r) for r in range(16)])
    ax.tick_params(length=0, labelsize=FONT)
    ax.set_xlabel("column n (d)")
    ax.set_ylabel("row k (query)")
    ax.set_title(title, fontsize=10)


def plot_b_trans(lane_highlight: int | None = 5):
    """A 16 x 8 (k, n) B tile of dV += P^T dO (k = queries, n = d) stored row-major, as
    Q_i and dO_i are: each cell names the lane that receives it and as which element b_i.
    Left: ldmatrix.trans (the mma's B fragment map); right: plain ldmatrix of the same
    memory. Both are decoded from the numpy models of `smem_ops`."""
    plt = _plt()
    cell, width, height = 0.3, 8.6, 5.9                        # inches
    fig = plt.figure(figsize=(width, height))
    cmap = plt.get_cmap("tab10")

    def place(x):
        return fig.add_axes((x / width, 0.75 / height, 8 * cell / width, 16 * cell / height))

    _draw_b_tile(place(0.55), _received("ld_bt"), "ldmatrix.trans:\nthe mma B fragment",
                 lane_highlight, cmap)
    plain = place(3.55)
    _draw_b_tile(plain, _received("ld_b"), "plain ldmatrix:\nnot the B fragment",
                 lane_highlight, cmap)
    plain.text(4, 12, "rows 8-15 go to\nregister 2: the next\nn8 tile's b0, b1.\n"
               "This tile's b2, b3\ncome from its\ncolumns 8-15.", ha="center", va="center",
               fontsize=FONT, linespacing=1.3, zorder=5,
               bbox=dict(fc="white", ec="grey", lw=0.5, pad=3))
    key = ("One 16 x 8 tile of dO_i, stored\n"
           "row-major in shared memory:\n"
           "row = query (k of dV += P^T dO),\n"
           "two neighbouring d per 32-bit\n"
           "word (thick lines).\n\n"
           "Each cell: the lane that receives\n"
           "it, and as which element b_i.\n"
           "Colour: the lane's group g.\n\n"
           "The mma wants b0, b1 of a lane\n"
           "in one register: rows 2t and\n"
           "2t + 1 of column g, two words.\n"
           ".trans gathers them; plain\n"
           "ldmatrix hands out row g instead.")
    if lane_highlight is not None:
        key += f"\n\nLane {lane_highlight} is outlined."
    fig.text(6.3 / width, (0.75 + 16 * cell) / height, key, ha="left", va="top",
             fontsize=FONT, linespacing=1.3)
    return fig


# --------------------------------------------------------------------------------------
# what the fp16 kernel rounds, modelled in float64
# --------------------------------------------------------------------------------------

#: the roundings of the fp16 tensor-core backward (names for `rounding_model`)
ROUNDINGS = ("P and dS to fp16 (the mma A operands)", "D from the fp16 o of the forward",
             "dQ, dK, dV returned as fp16")


def rounding_model(q, k, v, do, o16, *, causal: bool = False, roundings=ROUNDINGS):
    """(dq, dk, dv) in float64 with only the named roundings of the fp16 kernel (ROUNDINGS):
    P rounded before dV = P^T dO and dS before dK = scale dS^T Q, dQ = scale dS K; D =
    rowsum(dO o O) from the forward's stored fp16 `o16` instead of the exact O; the
    gradients rounded to fp16 at the end. Everything else exact. q, do, o16 (..., Tq, d),
    k, v (..., Tk, d): the fp16 inputs the kernel got."""
    unknown = set(roundings) - set(ROUNDINGS)
    if unknown:
        raise ValueError(f"roundings must be among {ROUNDINGS}, got {sorted(unknown)}")
    q, k, v, do = (np.asarray(x, np.float64) for x in (q, k, v, do))
    r16 = mma.round_fp16
    scale = 1.0 / np.sqrt(q.shape[-1])
    s = scale * (q @ np.swapaxes(k, -1, -2))                            # (..., Tq, Tk)
    s = np.where(visible_mask(q.shape[-2], k.shape[-2], causal), s, -np.inf)
    m = np.max(s, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)                # a row that sees no key: P = 0
    p = np.exp(s - m)
    p = p / np.maximum(p.sum(axis=-1, keepdims=True), np.finfo(float).tiny)
    o = np.asarray(o16, np.float64) if ROUNDINGS[1] in roundings else p @ v   # (..., Tq, d)
    delta = np.sum(do * o, axis=-1, keepdims=True)                      # (..., Tq, 1)
    ds = p * (do @ np.swapaxes(v, -1, -2) - delta)                      # (..., Tq, Tk)
    if ROUNDINGS[0] in roundings:
        p, ds = (r16(x).astype(np.float64) for x in (p, ds))
    grads = (scale * ds @ k, scale * np.swapaxes(ds, -1, -2) @ q,
             np.swapaxes(p, -1, -2) @ do)
    if ROUNDINGS[2] in roundings:
        grads = tuple(r16(g).astype(np.float64) for g in grads)
    return grads


def error_text(grads, ref) -> str:
    """'dQ 3.1e-04  dK ...': the relative errors of (dq, dk, dv) against (dq, dk, dv)."""
    return "  ".join(f"{name} {rel_err(g, r):.1e}" for name, g, r in zip(("dQ", "dK", "dV"),
                                                                      grads, ref))


# --------------------------------------------------------------------------------------
# the recorded H200 run (benchmarks/gpu_tc_backward.py -> h200_tc_backward.json)
# --------------------------------------------------------------------------------------

#: the contenders of the bench table, as the notebook names them
BENCH_LABELS = {
    "ours_fp16_raw": "ours fp16 raw", "ours_fp16_public": "ours fp16 public",
    "ours_fp16_det_raw": "ours fp16 deterministic raw",
    "torch_flash_fp16": "PyTorch flash fp16", "torch_cudnn_fp16": "PyTorch cuDNN fp16",
    "torch_efficient_fp32": "PyTorch efficient fp32",
}


def check_lines(doc: dict) -> list[str]:
    """The recorded gradient checks in a few lines: how many passed, the worst error of
    each precision among the calls that returned, the shapes that failed."""
    checks = doc.get("checks")
    if not checks:
        return ["no gradient checks recorded"]
    rows = checks["rows"]
    ok = sum(r["ok"] for r in rows)
    lines = [f"gradient checks: {ok} of {len(rows)} passed (rule: {checks['rule']})"]
    for prec in sorted({r["precision"] for r in rows}):
        errs = [e for r in rows if r["precision"] == prec for e in r["err"]
                if e is not None and np.isfinite(e)]
        if errs:
            lines.append(f"  {prec}: worst relative error {max(errs):.1e} over "
                         f"{sum(r['precision'] == prec for r in rows)} calls")
    failed = sorted({(r["tq"], r["tk"], r["d"]) for r in rows if not r["ok"]})
    if failed:
        lines.append("  FAILED at (Tq, Tk, d): " + ", ".join(map(str, failed))
                     + " (an error of nan: the call raised)")
    return lines


def _version(tiles: dict) -> str:
    return "v2 async" if tiles.get("pipeline", "async") == "async" else "v1 plain"


def warps_per_sm(row: dict, gpu: str = "H200") -> int:
    """Resident warps per SM of a recorded variant (its registers and shared memory)."""
    t = row["tiles"]
    return occupancy(32 * t["warps"], row["shared_bytes"], get_preset(gpu),
                     regs_per_thread=row["regs"]).warps_per_sm


VARIANT_HEADER = ["d", "version", "warps", "Br", "Bc", "K, V in registers", "registers",
                  "spilled B", "shared KiB", "warps/SM", "ms", "TFLOP/s", "default"]


def variant_table(doc: dict) -> list[list]:
    """The recorded tile variants (N = 4096, non-causal, fp16, raw time), by d and speed:
    rows for `html_table(VARIANT_HEADER, ...)`."""
    rows = [r for r in doc.get("variants", []) if "tflops" in r]
    out = []
    for r in sorted(rows, key=lambda r: (r["d"], -r["tflops"])):
        t = r["tiles"]
        out.append([r["d"], _version(t), t["warps"], t["block_q"], 16 * t["warps"],
                    "yes" if t["kv_regs"] else "no", r["regs"], r.get("local_bytes", 0),
                    round(r["shared_bytes"] / 1024, 1), warps_per_sm(r),
                    round(r["ms"], 2), round(r["tflops"], 1),
                    "yes" if is_default(r) else ""])
    return out


def is_default(row: dict) -> bool:
    """Whether a recorded variant has the tiles a GPU call uses when it names none."""
    return row["tiles"] == default_tiles(row["d"], simulator=False)


def version_pairs(doc: dict) -> list[tuple[dict, dict]]:
    """(v1 row, v2 row) of the recorded variants timed with the same tiles."""
    rows = [r for r in doc.get("variants", []) if "tflops" in r]

    def same(t):
        return (t["warps"], t["block_q"], t["kv_regs"], t["q_block_k"])
    return [(a, b) for a in rows for b in rows if a["d"] == b["d"]
            and _version(a["tiles"]) == "v1 plain" and _version(b["tiles"]) == "v2 async"
            and same(a["tiles"]) == same(b["tiles"])]


BENCH_HEADER = ["N", "d", "causal"] + list(BENCH_LABELS.values()) + [
    "raw / flash", "public / flash"]


def bench_table(doc: dict) -> list[list]:
    """TFLOP/s (the 10 N^2 d convention) per recorded shape: rows for
    `html_table(BENCH_HEADER, ...)`; a contender that did not run shows '-'."""
    out = []
    for r in sorted(doc.get("bench", []), key=lambda r: (r["d"], r["causal"], r["n"])):
        tf = r["tflops"]
        cells = [round(tf[k], 1) if k in tf else "-" for k in BENCH_LABELS]
        flash = tf.get("torch_flash_fp16")
        ratios = [round(tf[k] / flash, 2) if flash and k in tf else "-"
                  for k in ("ours_fp16_raw", "ours_fp16_public")]
        out.append([r["n"], r["d"], "yes" if r["causal"] else "no"] + cells + ratios)
    return out


def plot_bench(doc: dict):
    """TFLOP/s of every contender per recorded shape, as grouped bars; the legend under
    the axes. Hatched: PyTorch's kernels."""
    plt = _plt()
    rows = sorted(doc.get("bench", []), key=lambda r: (r["d"], r["causal"], r["n"]))
    fig, ax = plt.subplots(figsize=(FULL_WIDTH_IN, 4.6), layout="constrained")
    names = list(BENCH_LABELS)
    width = 0.8 / len(names)
    x = np.arange(len(rows))
    for j, name in enumerate(names):
        y = [r["tflops"].get(name, np.nan) for r in rows]
        ax.bar(x + (j - (len(names) - 1) / 2) * width, y, width, label=BENCH_LABELS[name],
               color=f"C{j}", hatch="//" if name.startswith("torch") else None,
               edgecolor="white", lw=0.5)
    # one fact per line: on one line "N=4096, d=128" ran into its neighbours' labels
    ax.set_xticks(x, [f"N={r['n']}\nd={r['d']}\n{'causal' if r['causal'] else 'non-causal'}"
                      for r in rows])
    ax.tick_params(axis="x", labelsize=FONT)
    ax.set_ylabel("TFLOP/s (10 N^2 d per head)")
    peak = get_gpu("H200").fp16_tensor_flops_per_s / 1e12
    ax.set_title(f"Backward, B x H = {doc.get('bh', '?')}, on "
                 f"{doc['environment'].get('gpu', '?')} (fp16 tensor-core peak: "
                 f"{peak:.0f} TFLOP/s)", fontsize=10.5)
    ax.grid(axis="y", alpha=0.3)
    legend_under_panels(fig, ncol=3)
    return fig


def _span(values, fmt: str) -> str:
    lo, hi = min(values), max(values)
    return format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else \
        f"{format(lo, fmt)} to {format(hi, fmt)}"


def gap_lines(doc: dict, exp_per_s: float, gpu: str = "H200") -> list[str]:
    """The numbers behind the notebook's account of the gap to PyTorch's kernels, one
    line each, over the recorded shapes: ours / flash; what the public call adds; what
    determinism costs; the exponentials' time per score against the products' at the
    tensor-core peak (`exp_per_s`: exponentials per second); the default tiles'
    registers, spills and resident warps (as of the run's date: the defaults of that day);
    the bytes of dS through shared memory."""
    rows = [r for r in doc.get("bench", []) if "torch_flash_fp16" in r["tflops"]]
    lines = []
    if rows:
        for k in ("ours_fp16_raw", "ours_fp16_public"):
            ratios = [r["tflops"][k] / r["tflops"]["torch_flash_fp16"] for r in rows
                      if k in r["tflops"]]
            if ratios:
                lines.append(f"{BENCH_LABELS[k]} / PyTorch flash fp16: {_span(ratios, '.2f')}")
        for prec in ("fp16", "bf16"):
            extra = [r[f"ours_{prec}_public"] - r[f"ours_{prec}_raw"] for r in rows
                     if f"ours_{prec}_public" in r and f"ours_{prec}_raw" in r]
            if extra:
                lines.append(f"public call minus raw time, {prec}: {_span(extra, '.2f')} ms")
        det = [r["ours_fp16_det_raw"] / r["ours_fp16_raw"] for r in rows
               if "ours_fp16_det_raw" in r and "ours_fp16_raw" in r]
        if det:
            more = backward_flops(1, 1, 1, dq_mode="two_pass") / backward_flops(1, 1, 1)
            lines.append(f"deterministic / atomic time: {_span(det, '.2f')}x, for {more:g}x "
                         "the FLOPs")
    peak = get_gpu(gpu).fp16_tensor_flops_per_s
    for d in sorted({r["d"] for r in doc.get("bench", [])}):
        backward, forward = peak / (10 * d * exp_per_s), peak / (4 * d * exp_per_s)
        lines.append(f"d = {d}: exp / mma time per score at peak: backward {backward:.2f}, "
                     f"forward {forward:.2f}")
    for r in doc.get("variants", []):
        if "tflops" in r and is_default(r):
            t = r["tiles"]
            ds_kib = t["block_q"] * 16 * t["warps"] * 2 / 1024      # Br Bc, 16-bit dS^T
            when = str(doc.get("environment", {}).get("date", ""))[:10]   # the sweep's day
            lines.append(f"default tiles{' of ' + when if when else ''}, d = {r['d']}: "
                         f"{r['regs']} registers per thread, "
                         f"{r.get('local_bytes', 0)} B spilled, {warps_per_sm(r, gpu)} warps "
                         "per SM;")
            lines.append(f"  dS in 16 bits through shared memory: Br x Bc x 2 B = {ds_kib:g} "
                         "KiB per query block, stored and read")
    return lines


#: (label, Nsight Compute metric name) of the backward's recorded profile, in print order
PROFILE_METRICS = (
    ("kernel time (ms)", "Duration"),
    ("issue slots busy (%)", "Issue Slots Busy"),
    ("eligible warps per scheduler per cycle", "Eligible Warps Per Scheduler"),
    ("active warps per scheduler", "Active Warps Per Scheduler"),
    ("cycles between two issues of a warp", "Warp Cycles Per Issued Instruction"),
    ("tensor pipe, SM busy (%)", "SM Busy"),
    ("L1/TEX (shared memory, local memory) throughput (%)", "L1/TEX Cache Throughput"),
    ("local-memory (spill) requests", "Local Memory Spilling Requests"),
    ("registers per thread", "Registers Per Thread"),
)


def profile_metrics(text: str) -> dict:
    """{metric name: value} for the rows of Nsight Compute's section tables in `text`
    (a name, a unit or none, a number; the first row of each name)."""
    import re
    names = [name for _, name in PROFILE_METRICS]
    out = {}
    for line in text.splitlines():
        for name in names:
            m = re.match(r"\s+" + re.escape(name) + r"\s+(?:\S+\s+)?([\d,.]+)\s*$", line)
            if m and name not in out:
                out[name] = float(m.group(1).replace(",", ""))
    return out


def bar_lines(bars: dict, bar: float = 0.6) -> list[str]:
    """Per head dim of a gpu_bars run's "backward" rows: ours / PyTorch flash for fp16 and
    bf16 (bit arrays) to four decimals, and how many points fall below `bar`."""
    lines = []
    for d in sorted({r["d"] for r in bars["backward"]}):
        rows = [r for r in bars["backward"] if r["d"] == d]
        parts = []
        for name in ("fp16", "bf16"):
            rs = [r[f"{name}_ratio"] for r in rows]
            low = sum(x < bar for x in rs)
            parts.append(f"{name} {min(rs):.4f}-{max(rs):.4f}x ({low} of {len(rs)} below "
                         f"{bar}x)")
        lines.append(f"d = {d}: " + "; ".join(parts))
    return lines


def kernel_breakdown(text: str) -> dict:
    """{(variant, precision): (main kernel us, the other kernels' us)} per call from an A/B
    log's torch.profiler blocks (benchmarks/results/h200_bwd_ab7_log.txt): a header line
    "kernels VARIANT PRECISION ... per call (us):", then one line per kernel ending in its
    microseconds and "xCOUNT". The main kernel is the longest; the others are the pre-pass
    and the casts."""
    import re
    out, key, rows = {}, None, []
    for line in text.splitlines() + ["kernels end"]:
        head = re.match(r"kernels (\S+) (\S+) .*per call \(us\):\s*$", line)
        if head or line == "kernels end":
            if key and rows:
                out[key] = (max(rows), sum(rows) - max(rows))
            key, rows = (head.groups() if head else None), []
            continue
        m = re.match(r"\s+.*\s([\d.]+)\s+x(\d+)\s*$", line)
        if key and m:
            rows.append(float(m.group(1)))
        elif key and rows:                     # the block ended
            out[key] = (max(rows), sum(rows) - max(rows))
            key, rows = None, []
    return out
