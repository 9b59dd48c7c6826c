"""The figures of the README and figures/ (run `make figures`).

    python -m flashcourse.plots.readme DIR      # writes the PNGs below into DIR

    score_memory.png       M_score = Tq Tk s against sequence length (plots.memory)
    traffic_vs_length.png  dense vs tiled outer-memory bytes against N (plots.traffic)
    traffic_vs_budget.png  tiled bytes against the on-chip budget M (plots.traffic)
    tile_schedule.png      the score matrix as tiles in loop order (plots.tiles)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .memory import plot_score_memory
from .style import plt as _plt
from .tiles import plot_tile_schedule
from .traffic import plot_traffic_vs_budget, plot_traffic_vs_length

DPI = 110


FIGURES = ("score_memory", "traffic_vs_length", "traffic_vs_budget", "tile_schedule")


PLOTS = {"score_memory": plot_score_memory, "traffic_vs_length": plot_traffic_vs_length,
         "traffic_vs_budget": plot_traffic_vs_budget, "tile_schedule": plot_tile_schedule}


def write_all(out_dir, dpi: int = DPI) -> list[Path]:
    """Write every figure as DIR/<name>.png; return the paths."""
    plt = _plt()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in FIGURES:
        fig = PLOTS[name]()
        path = out / f"{name}.png"
        fig.savefig(path, dpi=dpi, metadata={"Software": None})
        plt.close(fig)
        paths.append(path)
    return paths


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Regenerate the course's figures (PNG).")
    parser.add_argument("out_dir", help="folder to write the PNGs into (created if missing)")
    parser.add_argument("--dpi", type=int, default=DPI, help=f"resolution (default {DPI})")
    args = parser.parse_args(argv)
    import matplotlib
    matplotlib.use("Agg")                 # files only: no window, no display needed
    for path in write_all(args.out_dir, dpi=args.dpi):
        print(f"wrote {path} ({path.stat().st_size:,} B)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
