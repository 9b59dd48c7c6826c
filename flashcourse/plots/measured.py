"""The measured-traffic pictures of notebook 08 (Nsight Compute counters against the IO
model)."""

from __future__ import annotations

import numpy as np


def plot_traffic_bars(doc: dict, cache_control: str = "all", ax=None):
    """Measured DRAM and L2 bytes beside the model, one group of bars per configuration
    (log scale: the values span several orders of magnitude)."""
    import matplotlib.pyplot as plt
    rows = [r for r in doc["runs"] if r["cache_control"] == cache_control]
    if ax is None:
        _, ax = plt.subplots(figsize=(max(6, 0.55 * len(rows) + 2), 4))
    x = np.arange(len(rows))
    w = 0.27
    ax.bar(x - w, [r["model_bytes"] / 2**20 for r in rows], w, label="two-level model",
           color="#999999")
    ax.bar(x, [max(r["dram_bytes"], 1) / 2**20 for r in rows], w, label="measured DRAM",
           color="#1f77b4")
    ax.bar(x + w, [max(r["l2_bytes"], 1) / 2**20 for r in rows], w, label="measured L2",
           color="#ff7f0e")
    ax.set_yscale("log")
    ax.set_xticks(x, [r["name"] for r in rows], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("MiB moved (all heads)")
    ax.set_title(f"Measured vs model, ncu --cache-control {cache_control}")
    ax.legend(fontsize=8)
    ax.figure.tight_layout()
    return ax


def plot_dram_vs_kv(doc: dict, cache_control: str = "all", ax=None):
    """Flash kernel (default tile): DRAM bytes / model and / L2-aware estimate against
    the size of K + V, with the L2 capacity marked: where K and V stop fitting, DRAM
    traffic rises toward the model."""
    import matplotlib.pyplot as plt
    rows = [r for r in doc["runs"] if r["cache_control"] == cache_control
            and r["impl"] == "flash" and (r.get("block_q"), r.get("block_k")) == (64, 64)
            and r.get("dram_ratio") is not None]
    rows.sort(key=lambda r: r["kv_bytes"])
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    kv = [r["kv_bytes"] / 2**20 for r in rows]
    for heads, marker in ((16, "o"), (1, "s")):
        sel = [r for r in rows if r["heads"] == heads]
        ax.plot([r["kv_bytes"] / 2**20 for r in sel], [r["dram_bytes"] / 2**20 for r in sel],
                marker=marker, label=f"measured DRAM, {heads} head(s)")
        ax.plot([r["kv_bytes"] / 2**20 for r in sel], [r["model_bytes"] / 2**20 for r in sel],
                marker=marker, ls=":", color="#999999",
                label=f"two-level model, {heads} head(s)")
        est = [r for r in sel if r.get("l2_aware_dram_bytes")]
        if est:
            ax.plot([r["kv_bytes"] / 2**20 for r in est],
                    [r["l2_aware_dram_bytes"] / 2**20 for r in est], marker=marker, ls="--",
                    label=f"L2-aware estimate, {heads} head(s)")
    l2 = doc["limits"]["l2_bytes"] / 2**20
    ax.axvline(l2, color="k", lw=0.8)
    ax.text(l2, ax.get_ylim()[1] if kv else 1, f" L2 = {l2:.0f} MiB", va="top", fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("K + V of all heads (MiB)")
    ax.set_ylabel("MiB through DRAM")
    ax.set_title("Flash kernel (Br = Bc = 64): DRAM traffic vs K/V size")
    ax.legend(fontsize=7)
    ax.figure.tight_layout()
    return ax
