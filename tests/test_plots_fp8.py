"""Notebook 15's figures draw what they are given and stay readable."""

import numpy as np
import pytest

from flashcourse.plots import fp8 as P
from flashcourse.plots.style import MAX_WIDTH_IN, MIN_FONT_PT, smallest_font_pt, width_in


def _readable(fig):
    assert width_in(fig) <= MAX_WIDTH_IN + 1e-9
    assert smallest_font_pt(fig) >= MIN_FONT_PT
    import matplotlib.pyplot as plt
    plt.close(fig)


def test_number_lines_tick_every_value():
    fig = P.plot_number_lines()
    ax = fig.axes[0]
    ticks = sum(len(c.get_segments()) for c in ax.collections)
    assert ticks == 126                                  # e4m3: 0x01 ... 0x7E, positive finite
    _readable(fig)


def test_rotation_and_error_table():
    x = np.zeros(16)
    x[3] = 8.0
    _readable(P.plot_rotation(x, np.full(16, 2.0)))
    fig = P.plot_error_table({"small": {"a": 1e-3, "b": 1e-2}, "large": {"a": 2e-3, "b": 3e-2}})
    bars = [p.get_width() for p in fig.axes[0].patches]
    assert sorted(bars) == sorted([1e-3, 1e-2, 2e-3, 3e-2])
    _readable(fig)


def test_bad_arguments():
    with pytest.raises(ValueError, match="same length"):
        P.plot_rotation(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="at least one"):
        P.plot_error_table({})
