"""Rooflines: attainable FLOP/s against arithmetic intensity (FLOP per byte moved).

    plot_attention_roofline  dense and tiled attention on one GPU's roofline (notebook 04)
    plot_decode_roofline     the measured decode points on the H200's roofline (notebook 11)
"""

from __future__ import annotations

import numpy as np

from ..gpus import get_gpu
from .style import legend_below
from .style import plt as _plt


def roofline_points(n: int = 4096, head_dim: int = 64, bytes_per_element: int = 2,
                    tiles=((64, 64), (128, 64))) -> dict:
    """{label: (FLOPs, bytes)} for dense attention (Algorithm 0) and the tiled fa2 forward
    with each (Br, Bc) in `tiles`, one head, Tq = Tk = n."""
    from ..traffic import attention_flops, dense_traffic, tiled_traffic
    flops = attention_flops(n, n, head_dim)
    e = bytes_per_element
    out = {"dense (Algorithm 0)": (flops, dense_traffic(n, n, head_dim, bytes_per_element=e,
                                                         bytes_per_score=e).total_bytes)}
    for br, bc in tiles:
        out[f"tiled fa2, Br = {br}, Bc = {bc}"] = (
            flops, tiled_traffic(n, n, head_dim, br, bc, bytes_per_element=e).total_bytes)
    return out


def plot_attention_roofline(gpu: str = "H200", n: int = 4096, head_dim: int = 64):
    """Attainable FLOP/s = min(peak, intensity x bandwidth) for the fp16 tensor cores and
    the fp32 units, with dense and tiled attention (fp16) placed on it by their
    arithmetic intensity (FLOPs per byte of outer-memory traffic)."""
    plt = _plt()
    g = get_gpu(gpu)
    bw = g.bandwidth_bytes_per_s
    ai = np.logspace(-1, 4, 400)                                      # FLOP/byte
    fig, ax = plt.subplots(figsize=(8.6, 5.0))
    for peak, label, colour in ((g.fp16_tensor_flops_per_s, "fp16 tensor-core peak", "C0"),
                                (g.fp32_flops_per_s, "fp32 (non-matmul) peak", "C7")):
        ax.plot(ai, np.minimum(peak, ai * bw), color=colour, lw=2)
        # the roof named on its flat part, right-aligned, clear of the points on the slope
        ax.text(ai[-1], peak * 1.25, f"{label}: {peak / 1e12:.0f} TFLOP/s", ha="right",
                va="bottom", fontsize=9.5, color=colour)
        ax.axvline(peak / bw, color=colour, ls=":", lw=1)
        ax.text(peak / bw * 1.08, peak * 0.55, f"balance\n{peak / bw:.0f} FLOP/B",
                fontsize=9, color=colour, va="top")
    markers = ("s", "o", "^", "D")
    for (label, (flops, nbytes)), mk in zip(roofline_points(n, head_dim).items(), markers):
        x = flops / nbytes
        y = min(g.fp16_tensor_flops_per_s, x * bw)
        ax.plot([x], [y], mk, ms=10, mec="black", ls="none",
                label=f"{label}: {x:.0f} FLOP/B, at most {y / 1e12:.0f} TFLOP/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs per byte of HBM traffic)")
    ax.set_ylabel("attainable FLOP/s (upper bound)")
    ax.set_ylim(1e11, 3e15)
    ax.grid(alpha=0.3, which="both")
    ax.set_title(f"Roofline of an {g.name} ({bw / 1e12:.1f} TB/s HBM): attention forward, "
                 f"N = {n:,}, d = {head_dim}, fp16, one head", fontsize=10.5)
    legend_below(ax)
    fig.tight_layout()
    return fig


def plot_decode_roofline(rows, *, copy_bytes_per_s: float, peak_flops_per_s: float, ax=None):
    """The roofline of one GPU with the measured decode points.

    x: arithmetic intensity (FLOP per byte of K/V read); y: achieved FLOP/s
    (4 B Hq Tq Tk d FLOPs over the time). The roof is min(peak, bandwidth x intensity) with
    the measured copy rate as the bandwidth. Points: ours and PyTorch (fp16) at the largest
    Tk for each B x Hkv and group size.
    """
    plt = _plt()
    if ax is None:
        ax = plt.figure(figsize=(7.6, 4.8), layout="tight").subplots()
    x = np.geomspace(0.1, 1e4, 200)
    ax.plot(x, np.minimum(peak_flops_per_s, copy_bytes_per_s * x), "k-", lw=1.2,
            label="roof: min(peak, copy bandwidth x intensity)")
    tk_max = max(r["tk"] for r in rows)
    styles = {("ours", 1): ("C0", "o"), ("ours", 8): ("C0", "s"),
              ("torch_flash", 1): ("C1", "o"), ("torch_flash", 8): ("C1", "s")}
    names = {"ours": "ours", "torch_flash": "PyTorch flash"}
    for (impl, g), (colour, marker) in styles.items():
        pts = [r for r in rows if r["impl"] == impl and r["group"] == g and r["tk"] == tk_max
               and r["kv_dtype"] == "float16" and "ms" in r]
        if not pts:
            continue
        flops = [4 * r["b"] * r["hq"] * r["tq"] * r["tk"] * r["d"] for r in pts]
        inten = [f / r["kv_bytes"] for f, r in zip(flops, pts)]
        perf = [f / (r["ms"] * 1e-3) for f, r in zip(flops, pts)]
        ax.scatter(inten, perf, color=colour, marker=marker, zorder=3,
                   label=f"{names[impl]}, fp16, G = {g} (B x Hkv = "
                         f"{', '.join(str(r['bhkv']) for r in pts)})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of K and V)")
    ax.set_ylabel("FLOP/s")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(f"Decoding on the roofline (Tk = {tk_max:,})")
    legend_below(ax, ncol=2)                    # off the points, which sit near the roof
    return ax
