"""Pictures for notebook 09: what each backward keeps in memory, moves, and computes.

Pure functions give the numbers (tested); `plot_backward_costs` draws them on log
axes; the explorer `flashcourse.widgets.backward.backward_explorer` adds a slider over
the sequence length N (= Tq = Tk) and menus for d, the element size and the tile.

All numbers are for one head of one request (multiply by B x H for a batch):

    kept for the backward   `flashcourse.memory.saved_for_backward_bytes`
                            standard: Q, K, V, O + P (N x N x s)
                            tiled:    Q, K, V, O + lse (N x 4 B)
    backward traffic        `flashcourse.traffic.backward_traffic` (bytes through HBM)
    backward FLOPs          `flashcourse.traffic.backward_flops`
                            standard 8 N^2 d; tiled (recompute S) 10 N^2 d
"""

from __future__ import annotations

import numpy as np

from .._checks import check_block
from ..memory import format_bytes, saved_for_backward_bytes
from ..printing import compare
from ..traffic import backward_flops, backward_traffic
from .style import FULL_WIDTH_IN, legend_under_panels
from .style import plt as _plt

METHODS = ("standard", "tiled")


def backward_costs(n: int, head_dim: int = 64, *, bytes_per_element: int = 2,
                   bytes_per_score: int = 2, block: int = 64, causal: bool = False) -> dict:
    """{method: {"kept": bytes, "traffic": bytes, "flops": FLOP}} for N = Tq = Tk (one head)."""
    n = check_block(n, "n")
    out = {}
    for method in METHODS:
        out[method] = {
            "kept": saved_for_backward_bytes(n, n, head_dim, method=method,
                                             bytes_per_element=bytes_per_element,
                                             bytes_per_score=bytes_per_score, causal=causal),
            "traffic": backward_traffic(n, n, head_dim, method=method, block_q=block,
                                        block_k=block, causal=causal,
                                        bytes_per_element=bytes_per_element,
                                        bytes_per_score=bytes_per_score).total_bytes,
            "flops": backward_flops(n, n, head_dim, causal=causal,
                                    recompute=(method == "tiled")),
        }
    return out


def backward_curves(ns, head_dim: int = 64, **kwargs) -> dict:
    """Arrays over the lengths `ns`: {method: {"kept"|"traffic"|"flops": np.ndarray}}."""
    ns = [check_block(int(n), "n") for n in ns]
    rows = [backward_costs(n, head_dim, **kwargs) for n in ns]
    return {m: {key: np.array([r[m][key] for r in rows], dtype=np.float64)
                for key in ("kept", "traffic", "flops")} for m in METHODS}


def summary_lines(n: int, head_dim: int = 64, **kwargs) -> list[str]:
    """Plain-text comparison at one length N (what the widget prints under the plot)."""
    c = backward_costs(n, head_dim, **kwargs)
    s, t = c["standard"], c["tiled"]
    return [
        f"N = {n:,}, d = {head_dim}, one head:",
        f"  kept for the backward: standard {format_bytes(s['kept'])}, "
        f"tiled {format_bytes(t['kept'])}  (tiled: {compare(t['kept'], s['kept'])})",
        f"  backward traffic:      standard {format_bytes(s['traffic'])}, "
        f"tiled {format_bytes(t['traffic'])}  (tiled: {compare(t['traffic'], s['traffic'])})",
        f"  backward FLOPs:        standard {s['flops']:.3g}, tiled {t['flops']:.3g}  "
        f"(recomputing S costs {t['flops'] / s['flops'] - 1:.0%} more)",
    ]


def plot_backward_costs(n: int = 4096, head_dim: int = 64, *, n_min: int = 256,
                        n_max: int = 131072, fig=None, **kwargs):
    """Three log-log panels over N (kept bytes, traffic bytes, FLOPs); a marker at `n`;
    the legend beside the last panel (off the data). `fig`: draw on this figure."""
    ns = np.unique(np.geomspace(n_min, n_max, 25).astype(int))
    curves = backward_curves(ns, head_dim, **kwargs)
    here = backward_costs(n, head_dim, **kwargs)
    if fig is None:
        fig = _plt().figure(figsize=(FULL_WIDTH_IN, 3.4), layout="constrained")
    axes = fig.subplots(1, 3)
    titles = {"kept": "kept for the backward\n(bytes)",
              "traffic": "backward HBM traffic\n(bytes)", "flops": "backward FLOPs"}
    styles = {"standard": dict(color="#b35900", label="standard\n(stores P)"),
              "tiled": dict(color="#1f6feb", label="tiled\n(recomputes P\nfrom lse)")}
    for ax, key in zip(axes, ("kept", "traffic", "flops")):
        for m in METHODS:
            ax.loglog(ns, curves[m][key], **styles[m])
            ax.plot([n], [here[m][key]], "o", color=styles[m]["color"])
        ax.axvline(n, color="grey", lw=0.8, ls=":")
        ax.set_title(titles[key], fontsize=10)
        ax.set_xlabel("N = Tq = Tk")
        ax.grid(alpha=0.3, which="both")
    axes[2].legend(loc="center left", bbox_to_anchor=(1.04, 0.5), frameon=False,
                   labelspacing=1.0, title=f"dots: N = {n:,}", title_fontsize=9)
    fig.suptitle(f"Backward pass, one head, d = {head_dim}", fontsize=11)
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------
# Recorded GPU measurements (benchmarks/results/h200_backward.json)
# ---------------------------------------------------------------------------

def results_path():
    """Where benchmarks/gpu_backward.py's recorded H200 results live in the repository."""
    from ..results import RESULTS_DIR
    return RESULTS_DIR / "h200_backward.json"


def load_recorded(path=None):
    """The recorded backward benchmark (validated against its schema), or None when there
    is none yet; a broken file raises flashcourse.results.ResultsError."""
    from ..results import load
    return load(results_path() if path is None else path, "gpu_backward")


def backward_rows(res, *, n: int = 4096, d: int = 64, causal: bool = False) -> list:
    """[(impl, ms, TFLOP/s)] measured at one (N, d, causal), fastest first."""
    rows = [(r["impl"], r["ms"], r["tflops"]) for r in (res or {}).get("bench", [])
            if "ms" in r and r["n"] == n and r["d"] == d and r["causal"] == causal]
    return sorted(rows, key=lambda x: x[1])


#: each implementation of benchmarks/gpu_backward.py in the course's words
IMPL_WORDS = {"fast": "course fast: dQ by atomic adds",
              "fast_two_pass": "course fast_two_pass: dQ in a second pass",
              "torch_efficient_fp32": "PyTorch memory-efficient fp32 (3xTF32, tensor cores)",
              "torch_math_fp32": "PyTorch math fp32 (TF32 off)"}
#: Implementations on other hardware than the fp32 multiply-add units, drawn dashed: PyTorch's
#: memory-efficient kernel runs fp32 as 3xTF32 on the tensor cores on sm_80+
#: (`OpMultiplyAddFastF32` in its mem_eff_attention/gemm_kernel_utils.h).
OTHER_UNITS = {"torch_efficient_fp32"}


def plot_backward_recorded(res, *, d: int = 64, fig=None):
    """TFLOP/s against N for every implementation (default tiles), non-causal and causal
    side by side on one scale, the legend under the panels. `fig`: draw on this figure
    (it is given a constrained layout)."""
    rows = [r for r in res.get("bench", []) if "ms" in r and r.get("config") is None
            and r["d"] == d]
    if fig is None:
        fig = _plt().figure(figsize=(FULL_WIDTH_IN, 4.2), layout="constrained")
    else:
        fig.set_layout_engine("constrained")
    axes = fig.subplots(1, 2, sharey=True)
    impls = sorted({r["impl"] for r in rows}, key=lambda i: (i not in IMPL_WORDS, i))
    for ax, causal in zip(axes, (False, True)):
        for k, impl in enumerate(impls):
            pts = sorted((r["n"], r["tflops"]) for r in rows
                         if r["impl"] == impl and r["causal"] == causal)
            if pts:
                ax.plot(*zip(*pts), marker="o", color=f"C{k}",
                        ls="-" if impl.startswith("fast") else
                        ("--" if impl in OTHER_UNITS else ":"),
                        label=IMPL_WORDS.get(impl, impl))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("N = Tq = Tk (positions)")
        bh = sorted({r["bh"] for r in rows if "bh" in r})
        ax.set_title(f"d = {d}, B x H = {', '.join(map(str, bh)) or '?'}, "
                     f"{'causal' if causal else 'non-causal'}", fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("TFLOP/s\n(backward = 2.5 x forward FLOPs)")
    if rows:
        legend_under_panels(fig, ncol=2)
    return fig
