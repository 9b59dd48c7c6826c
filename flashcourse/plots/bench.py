"""The benchmark scripts' shared figure: TFLOP/s against N, one panel per (d, causal).

Used by benchmarks/gpu_forward.py and benchmarks/gpu_tensor_core.py; rows are their result
rows (dicts with kernel, n, d, causal and, when timed, tflops).
"""

from __future__ import annotations


def tflops_grid(rows, names, dims, fmt, *, figsize, **plot_kw):
    """A figure of len(dims) x 2 panels (rows: head dimension d; columns: non-causal,
    causal), log-log, one line per kernel of `names` drawn with the format `fmt(name)`
    (and `plot_kw`). Returns (fig, axes); the caller adds legend and title and saves."""
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(len(dims), 2, figsize=figsize, sharex=True, squeeze=False)
    for ai, d in enumerate(dims):
        for ci, causal in enumerate((False, True)):
            ax = axes[ai][ci]
            for name in names:
                pts = [(r["n"], r["tflops"]) for r in rows if r["kernel"] == name
                       and r["d"] == d and r["causal"] == causal and "tflops" in r]
                if pts:
                    x, y = zip(*pts)
                    ax.plot(x, y, fmt(name), label=name, **plot_kw)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"d = {d}, {'causal' if causal else 'non-causal'}")
            ax.set_xlabel("N = Tq = Tk (positions)")
            ax.set_ylabel("TFLOP/s (log scale)")
            ax.grid(alpha=0.3)
    return fig, axes
