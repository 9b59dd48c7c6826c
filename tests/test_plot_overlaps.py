"""Two recorded-results figures whose text ran together or covered data in the course walk:
notebook 10's backward bars (x labels) and notebook 12's Hopper bars (legend over the peak)."""

import pytest

from flashcourse import results
from flashcourse.gpus import get_gpu


def _recorded(load):
    doc = load()
    if doc is None:
        pytest.skip("no recorded results in benchmarks/results/")
    return doc


def _gaps_px(fig) -> list[float]:
    """Horizontal gaps (pixels) between neighbouring x tick labels of the first axes."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in fig.axes[0].get_xticklabels()
             if t.get_text()]
    return [b.x0 - a.x1 for a, b in zip(boxes, boxes[1:])]


def test_backward_bar_labels_do_not_run_together():
    import matplotlib.pyplot as plt
    from flashcourse.plots import tc_backward as TB
    fig = TB.plot_bench(_recorded(results.load_tc_backward))
    try:
        assert min(_gaps_px(fig)) >= 5, _gaps_px(fig)
    finally:
        plt.close(fig)


def test_hopper_legend_leaves_the_peak_line_and_its_label_clear():
    import matplotlib.pyplot as plt
    from flashcourse.plots import hopper as HP
    peak = get_gpu("H200").fp16_tensor_flops_per_s
    fig = HP.plot_bench(_recorded(results.load_hopper), peak)
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        ax = fig.axes[0]
        line = next(ln for ln in ax.get_lines() if ln.get_linestyle() == "--")
        label = next(t for t in ax.texts if "peak" in t.get_text()).get_window_extent(renderer)
        legends = [lg for lg in [ax.get_legend(), *fig.legends] if lg is not None]
        assert legends
        for legend in legends:
            box = legend.get_window_extent(renderer)
            assert not box.overlaps(line.get_window_extent(renderer)), "legend covers the peak"
            assert not box.overlaps(label), "legend covers the peak's label"
        assert label.y1 <= ax.get_window_extent(renderer).y1, "peak label above the axes"
        assert min(_gaps_px(fig)) >= 5
    finally:
        plt.close(fig)
