"""`python -m flashcourse.plots.readme DIR` writes every course figure as a non-trivial PNG."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from flashcourse.plots import readme as figures
from flashcourse.plots.tiles import tile_order

ROOT = Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_figure_script_writes_pngs(tmp_path):
    r = subprocess.run([sys.executable, "-m", "flashcourse.plots.readme", str(tmp_path / "out")],
                       capture_output=True, text=True, cwd=ROOT, timeout=120,
                       env={"MPLBACKEND": "Agg", "PATH": "/usr/bin:/bin",
                            "HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    import matplotlib.image as mpimg
    for name in figures.FIGURES:
        path = tmp_path / "out" / f"{name}.png"
        assert path.exists(), f"{name}.png not written"
        data = path.read_bytes()
        assert data[:8] == PNG_MAGIC
        assert 20_000 < len(data) < 200_000, f"{name}.png is {len(data):,} B"
        img = mpimg.imread(path)
        assert img.shape[0] > 400 and img.shape[1] > 700
        # more than a blank canvas: many distinct colours, a real share of non-white pixels
        rgb = (img[..., :3] * 255).astype(np.uint8).reshape(-1, 3)
        assert len(np.unique(rgb, axis=0)) > 50
        assert (rgb.min(axis=1) < 200).mean() > 0.02
        assert name in r.stdout


def test_tile_order_replays_the_loop():
    order, skipped = tile_order(21, 29, 8, 6, causal=True, loop_order="fa2")
    # fa2 walks rows of tiles; fa1 walks columns; the same tiles are skipped
    assert [t for t, _ in sorted(order.items(), key=lambda kv: kv[1])][:3] == \
        [(0, 0), (0, 1), (0, 2)]
    order1, skipped1 = tile_order(21, 29, 8, 6, causal=True, loop_order="fa1")
    assert [t for t, _ in sorted(order1.items(), key=lambda kv: kv[1])][:3] == \
        [(0, 0), (1, 0), (2, 0)]
    assert skipped == skipped1 == {(0, 3), (0, 4), (1, 4)}
    assert set(order) == set(order1) and len(order) == 15 - 3


def test_committed_figures_exist_and_are_small():
    for name in figures.FIGURES:
        path = ROOT / "figures" / f"{name}.png"
        if not path.exists():
            pytest.fail(f"figures/{name}.png is missing: run `make figures`")
        assert path.stat().st_size < 200_000
