"""Notebook 16's figures draw what the model and the shard maps give, and stay readable."""

import numpy as np
import pytest

from flashcourse.distributed.shards import causal_pairs
from flashcourse.plots import context_parallel as P
from flashcourse.plots.style import MAX_WIDTH_IN, MIN_FONT_PT, smallest_font_pt, width_in


def _readable(fig):
    assert width_in(fig) <= MAX_WIDTH_IN + 1e-9
    assert smallest_font_pt(fig) >= MIN_FONT_PT
    import matplotlib.pyplot as plt
    plt.close(fig)


@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
def test_step_grid_counts_the_pairs_of_each_step(layout):
    n, world = 37, 3
    pairs = causal_pairs(n, world, layout)
    for r in range(world):
        grid = P.step_grid(n, world, r, layout)
        for s in range(world):
            assert int((grid == s).sum()) == pairs[r, s]


def test_figures_are_readable():
    _readable(P.plot_who_computes(32, 4))
    _readable(P.plot_step_work(32, 4))
    fig = P.plot_step_times({"fast": 450e9, "slow": 64e9}, flops_per_s=989e12)
    lines = fig.axes[0].get_lines()
    compute = lines[0].get_ydata()
    assert np.all(np.diff(np.log(compute)) > 0)          # compute grows with the block
    _readable(fig)
    with pytest.raises(ValueError, match="at least one"):
        P.plot_step_times({}, flops_per_s=1e12)
