"""The measured-traffic pictures of notebook 08 (Nsight Compute counters against the IO
model).

    run_label(run)                     a recorded run in the course's words
                                       ("flash 64 x 64, N = 4k"), not its run id
    plot_traffic_bars(doc, mode, ax)   measured DRAM and L2 bytes beside the model, one
                                       row of bars per configuration, one cache mode
    plot_traffic_comparison(doc)       the same for both cache modes side by side
    plot_dram_vs_kv(doc, mode, ax)     the flash kernel's DRAM bytes against the size of K + V
"""

from __future__ import annotations

import numpy as np

from .style import FULL_WIDTH_IN, legend_under_panels
from .style import plt as _plt

#: each implementation of benchmarks/ncu_traffic.py in the course's words
IMPL_WORDS = {"dense": "course dense kernels", "textbook": "textbook kernel",
              "flash": "flash", "torch-math": "PyTorch math",
              "torch-efficient": "PyTorch memory-efficient"}
#: what each bar group shows: (key of the run, legend label, colour)
BARS = (("model_bytes", "two-level model (notebook 04)", "#999999"),
        ("dram_bytes", "measured DRAM", "#1f77b4"),
        ("l2_bytes", "measured L2", "#ff7f0e"))
#: the two ncu cache modes, in words
CACHE_WORDS = {"all": "caches flushed before each kernel (--cache-control all)",
               "none": "caches kept (--cache-control none)"}


def _length(n: int) -> str:
    return f"{n // 1024}k" if n % 1024 == 0 else f"{n:,}"


def run_label(run: dict) -> str:
    """A recorded run of the ncu study in words: implementation (with the flash kernel's
    tile Br x Bc), N, and the head count when it is not the study's 16."""
    impl = IMPL_WORDS.get(run["impl"], run["impl"])
    if run["impl"] == "flash":
        impl += f" {run['block_q']} x {run['block_k']}"
        if run["name"].endswith("tuned"):
            impl += " (tuned)"
    heads = "" if run.get("heads", 16) == 16 else \
        f", {run['heads']} head{'s' if run['heads'] != 1 else ''}"
    return f"{impl}, N = {_length(run['seq_len'])}{heads}"


def plot_traffic_bars(doc: dict, cache_control: str = "all", ax=None, *, labels: bool = True):
    """Measured DRAM and L2 bytes beside the model, one row of three bars per
    configuration, top to bottom in the study's order (log scale: the values span
    several orders of magnitude). `labels`: name the configurations on the y axis."""
    rows = [r for r in doc["runs"] if r["cache_control"] == cache_control]
    if ax is None:
        _, ax = _plt().subplots(figsize=(FULL_WIDTH_IN, 0.3 * len(rows) + 1.4),
                                layout="constrained")
    y = np.arange(len(rows))
    h = 0.27
    for k, (key, label, colour) in enumerate(BARS):
        ax.barh(y + (k - 1) * h, [max(r[key], 1) / 2**20 for r in rows], h, label=label,
                color=colour)
    ax.set_xscale("log")
    ax.set_yticks(y, [run_label(r) for r in rows] if labels else [])
    ax.set_ylim(len(rows) - 0.5, -0.5)                       # the first run on top
    ax.set_xlabel("MiB moved (all heads, log scale)")
    ax.set_title(CACHE_WORDS.get(cache_control, f"--cache-control {cache_control}"),
                 fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    return ax


def plot_traffic_comparison(doc: dict):
    """Both cache modes side by side (one row per configuration, shared), the legend
    under the panels."""
    n = len([r for r in doc["runs"] if r["cache_control"] == "all"])
    fig, axes = _plt().subplots(1, 2, figsize=(FULL_WIDTH_IN, 0.3 * n + 1.9), sharex=True,
                                layout="constrained")
    plot_traffic_bars(doc, "all", axes[0])
    plot_traffic_bars(doc, "none", axes[1], labels=False)
    axes[1].set_yticks(axes[0].get_yticks())
    axes[1].tick_params(axis="y", labelleft=False)
    axes[0].set_title("caches flushed (--cache-control all)", fontsize=10)
    gpu = doc.get("environment", {}).get("gpu", "GPU")
    fig.suptitle(f"Bytes moved: measured on the {gpu} (ncu) against the two-level model")
    legend_under_panels(fig, ncol=3)
    return fig


def plot_dram_vs_kv(doc: dict, cache_control: str = "all", ax=None):
    """Flash kernel (default tile): DRAM bytes, the two-level model and the L2-aware
    estimate against the size of K + V, with the L2 capacity marked: where K and V stop
    fitting, DRAM traffic rises toward the model. Colour: the head count; line style:
    measured (solid), model (dotted), estimate (dashed); the legend beside the axes."""
    rows = [r for r in doc["runs"] if r["cache_control"] == cache_control
            and r["impl"] == "flash" and (r.get("block_q"), r.get("block_k")) == (64, 64)
            and r.get("dram_ratio") is not None]
    rows.sort(key=lambda r: r["kv_bytes"])
    if ax is None:
        _, ax = _plt().subplots(figsize=(FULL_WIDTH_IN, 4.3), layout="constrained")
    for heads, marker, colour in ((16, "o", "#1f77b4"), (1, "s", "#d62728")):
        sel = [r for r in rows if r["heads"] == heads]
        what = f"{heads} head{'s' if heads != 1 else ''}"
        kv = [r["kv_bytes"] / 2**20 for r in sel]
        ax.plot(kv, [r["dram_bytes"] / 2**20 for r in sel], marker=marker, color=colour,
                label=f"measured DRAM, {what}")
        est = [r for r in sel if r.get("l2_aware_dram_bytes")]
        if est:
            ax.plot([r["kv_bytes"] / 2**20 for r in est],
                    [r["l2_aware_dram_bytes"] / 2**20 for r in est], marker=marker, ls="--",
                    color=colour, alpha=0.7, label=f"L2-aware estimate, {what}")
        ax.plot(kv, [r["model_bytes"] / 2**20 for r in sel], marker=marker, ls=":",
                color=colour, alpha=0.5, label=f"two-level model, {what}")
    l2 = doc["limits"]["l2_bytes"] / 2**20
    ax.axvline(l2, color="k", lw=0.8)
    ax.text(l2, 0.97, f" L2 = {l2:.0f} MiB", va="top", fontsize=9.5,
            transform=ax.get_xaxis_transform())
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("K + V of all heads (MiB)")
    ax.set_ylabel("MiB through DRAM")
    ax.set_title("Flash kernel (Br = Bc = 64): DRAM traffic against the size of K and V")
    ax.grid(alpha=0.3, which="both")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    return ax
