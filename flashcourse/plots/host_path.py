"""What a user's call costs (notebook 11): host time and wall time per call of the public
`cuda.decode` / `cuda.forward` through the checked path, the cached fast path and a CUDA
graph, beside PyTorch's SDPA, from benchmarks/results/h200_host_path.json.
"""

from __future__ import annotations

from .style import FULL_WIDTH_IN, legend_under_panels
from .style import MIN_FONT_PT as FONT
from .style import plt as _plt

#: (label, selector) of the problems shown: decode at G = 1, Tq = 1, d = 128, fp16, and the
#: tensor-core forward at N = 1,024, d = 64, B x H = 32.
PROBLEMS = (
    ("decode B·Hkv=1\nTk=16k", "decode", dict(hkv=1, tk=16384, group=1, tq=1)),
    ("decode B·Hkv=8\nTk=64k", "decode", dict(hkv=8, b=1, tk=65536, group=1, tq=1)),
    ("decode B·Hkv=32\nTk=128k", "decode", dict(b=4, tk=131072, group=1, tq=1)),
    ("forward fp16\nN=1024", "forward", dict(kernel="tensor_core", n=1024, causal=False)),
)
#: (key in a row, legend label, colour) of the bars.
SERIES = (("ours_checked_path", "ours, checked path (before)", "0.6"),
          ("ours", "ours, cached plan", "C0"),
          ("ours_graph", "ours, CUDA graph", "C2"),
          ("torch_flash", "PyTorch SDPA flash", "C1"))


def call_rows(doc: dict) -> list:
    """(label, row) of each of PROBLEMS found in the record."""
    out = []
    for label, kind, sel in PROBLEMS:
        for r in doc.get(kind, []):
            if all(r.get(k) == v for k, v in sel.items()):
                out.append((label, r))
                break
    return out


def plot_call_times(doc: dict):
    """Two panels: host time per call (the Python and driver work before a call returns)
    and wall time per call (what a loop of calls takes), log-scaled microseconds."""
    plt = _plt()
    rows = call_rows(doc)
    fig, axes = plt.subplots(1, 2, figsize=(FULL_WIDTH_IN, 3.6), sharey=True,
                             layout="constrained")
    width = 0.2
    for ax, metric, title in ((axes[0], "host_us", "host time per call (µs)"),
                              (axes[1], "wall_us", "wall time per call (µs)")):
        for s, (key, label, colour) in enumerate(SERIES):
            ys, xs = [], []
            for i, (_, r) in enumerate(rows):
                if key in r:
                    ys.append(i + (s - 1.5) * width)
                    xs.append(r[key][metric])
            ax.barh(ys, xs, height=width, color=colour, label=label)
            for y, x in zip(ys, xs):
                ax.text(x * 1.05, y, f"{x:,.0f}", va="center", fontsize=FONT)
        ax.set_xscale("log")
        ax.set_xlim(1, 8000)
        ax.set_title(title, fontsize=FONT + 1)
        ax.tick_params(labelsize=FONT)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(rows)), [label for label, _ in rows])
    axes[0].invert_yaxis()
    legend_under_panels(fig, ncol=2)
    return fig
