"""Every teaching diagram draws (returns a Figure with content) and its data is right."""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from flashcourse.plots import memory, roofline, softmax, style, tiles, traffic  # noqa: E402
from flashcourse.gpus import GPUS  # noqa: E402


#: the teaching diagrams of notebooks 01-04 at their default arguments
PLOTS = {"memory_hierarchy": memory.plot_memory_hierarchy,
         "online_softmax": softmax.plot_online_softmax, "merge_tree": softmax.plot_merge_tree,
         "warp_partition": tiles.plot_warp_partition,
         "causal_alignment": tiles.plot_causal_alignment,
         "roofline": roofline.plot_attention_roofline}


@pytest.mark.parametrize("name", sorted(PLOTS))
def test_each_diagram_returns_a_figure(name):
    import matplotlib.pyplot as plt
    fig = PLOTS[name]()
    assert isinstance(fig, Figure)
    assert fig.axes and any(ax.patches or ax.lines or ax.images or ax.texts
                            for ax in fig.axes)
    fig.canvas.draw()                                   # layout and text render without error
    plt.close(fig)


def test_online_softmax_trace_rescales_the_accumulator():
    x = np.array([1.0, 3.0, 2.0])
    v = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    steps = softmax.online_softmax_trace(x, v)
    assert steps[0]["alpha"] == 0.0
    assert steps[1]["alpha"] == pytest.approx(np.exp(1.0 - 3.0))   # the max grew
    np.testing.assert_allclose(steps[1]["acc"], np.exp(-2.0) * v[0] + v[1], rtol=1e-15)
    assert steps[2]["alpha"] == 1.0
    p = np.exp(x - 3.0)
    np.testing.assert_allclose(steps[-1]["acc"] / steps[-1]["l"], p @ v / p.sum(), rtol=1e-14)
    with pytest.raises(ValueError, match="x must be finite"):
        softmax.online_softmax_trace([1.0, np.inf], v[:2])


def test_memory_levels_and_roofline_points_come_from_the_library():
    levels = memory.memory_levels("A100 80GB")
    assert [lv["name"].split()[0] for lv in levels] == ["registers", "shared", "L2", "HBM"]
    assert levels[1]["bandwidth"] == pytest.approx(19.5e12, rel=0.01)  # FA paper: 19 TB/s
    assert levels[3]["total_bytes"] == GPUS["A100 80GB"].memory_bytes
    pts = roofline.roofline_points(4096, 64)
    flops = {f for f, _ in pts.values()}
    assert flops == {4 * 4096 * 4096 * 64}                            # the same FLOPs for all
    assert pts["dense (Algorithm 0)"][1] > pts["tiled fa2, Br = 64, Bc = 64"][1]


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="warps"):
        tiles.plot_warp_partition(warps=9)
    with pytest.raises(ValueError, match="cuts"):
        softmax.plot_merge_tree(cuts=(2, 4))
    with pytest.raises(ValueError, match="gpu"):
        memory.plot_memory_hierarchy("V100")


def _decode_roofline():
    """plot_decode_roofline with the recorded H200 results, as notebook 11 calls it."""
    from flashcourse import decode_io
    rec = decode_io.load_results()
    ax = roofline.plot_decode_roofline(rec["bench"], copy_bytes_per_s=decode_io.copy_bandwidth(rec),
                                       peak_flops_per_s=GPUS["H200"].fp16_tensor_flops_per_s)
    return ax.figure


#: every plot function of plots.memory, softmax, tiles, traffic and roofline, at its
#: defaults (the decode roofline, which needs results, with the recorded ones)
READABLE_PART_A = {**PLOTS, "score_memory": memory.plot_score_memory,
                   "tile_schedule": tiles.plot_tile_schedule,
                   "traffic_vs_length": traffic.plot_traffic_vs_length,
                   "traffic_vs_budget": traffic.plot_traffic_vs_budget,
                   "decode_roofline": _decode_roofline}


@pytest.mark.parametrize("name", sorted(READABLE_PART_A))
def test_readable_part_a(name):
    """At its defaults each figure fits JupyterLab's output area at 1280 px unshrunk
    (as the inline backend shows it) and has no text under MIN_FONT_PT (issue 26)."""
    import matplotlib.pyplot as plt
    fig = READABLE_PART_A[name]()
    try:
        width = style.width_in(fig)
        size, text = style.smallest_text(fig)
        assert width <= style.MAX_WIDTH_IN, f"{name}: {width:.2f} in wide"
        assert size >= style.MIN_FONT_PT, f"{name}: {text!r} at {size:g} pt"
    finally:
        plt.close(fig)


def _recorded(load):
    doc = load()
    if doc is None:
        pytest.skip("no recorded results in benchmarks/results/")
    return doc


def _on_axes(draw, figsize):
    """A drawing helper that draws into an axes, on a figure of the notebook's size."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=figsize)
    draw(ax)
    return fig


def _part_b():
    """The library figures of notebooks 06-11 (kernels, measured, backward, tensor_cores,
    tc_backward, decode, tuning, bench), each at its defaults with the recorded results it
    needs."""
    import json

    from flashcourse import decode, decode_io, results
    from flashcourse.plots import (backward, bench, host_path, kernels, measured, tc_backward,
                                   tensor_cores, tuning)
    from flashcourse.plots import decode as dp

    def forward_rows():
        return json.loads((results.RESULTS_DIR / "h200_forward.json").read_text())["bench"]

    def tree(ax):
        q, k, v = (np.random.default_rng(0).standard_normal(s) for s in
                   ((1, 4, 1, 16), (1, 2, 300, 16), (1, 2, 300, 16)))
        _, _, (o6, l6, _) = decode.split_kv_forward(q, k, v, num_splits=6, block_k=32,
                                                    return_parts=True)
        dp.draw_merge_tree(decode.merge_tree(o6, l6)[2], ax)

    return {
        "kernels.plot_flash_dataflow": kernels.plot_flash_dataflow,
        "kernels.plot_backward_key_major": kernels.plot_backward_key_major,
        "measured.plot_traffic_bars":
            lambda: measured.plot_traffic_bars(_recorded(results.load_traffic)).figure,
        "measured.plot_traffic_comparison":
            lambda: measured.plot_traffic_comparison(_recorded(results.load_traffic)),
        "measured.plot_dram_vs_kv":
            lambda: measured.plot_dram_vs_kv(_recorded(results.load_traffic)).figure,
        "backward.plot_backward_costs": backward.plot_backward_costs,
        "backward.plot_backward_recorded":
            lambda: backward.plot_backward_recorded(_recorded(backward.load_recorded)),
        "tensor_cores.plot_fragments": tensor_cores.plot_fragments,
        "tc_backward.plot_b_trans": tc_backward.plot_b_trans,
        "tc_backward.plot_bench": lambda: tc_backward.plot_bench(
            _recorded(results.load_tc_backward)),
        "host_path.plot_call_times": lambda: host_path.plot_call_times(
            _recorded(results.load_host_path)),
        "tensor_cores.plot_tensor_core_recorded(d=64)": lambda: tensor_cores.
            plot_tensor_core_recorded(_recorded(results.load_tensor_core), d=64),
        "tensor_cores.plot_tensor_core_recorded(d=128)": lambda: tensor_cores.
            plot_tensor_core_recorded(_recorded(results.load_tensor_core), d=128),
        "decode.plot_bandwidth":
            lambda: dp.plot_bandwidth(_recorded(decode_io.load_results)["bench"]),
        "decode.draw_sms": lambda: _on_axes(lambda ax: dp.draw_sms(8, 132, ax), (10, 2.6)),
        "decode.draw_splits": lambda: _on_axes(
            lambda ax: dp.draw_splits(decode.split_bounds(300, 64, 4), 300, 64, ax), (10, 1.6)),
        "decode.draw_merge_tree": lambda: _on_axes(tree, (9, 3)),
        "tuning.plot_heatmap": lambda: tuning.plot_heatmap(
            _recorded(results.load_sweep)["rows"], 64, 4096).figure,
        "tuning.plot_sweep_heatmaps":
            lambda: tuning.plot_sweep_heatmaps(_recorded(results.load_sweep)),
        "bench.tflops_grid": lambda: bench.tflops_grid(
            forward_rows(), sorted({r["kernel"] for r in forward_rows()}), (64, 128),
            lambda name: "o-")[0],
    }


PART_B = sorted(_part_b())


@pytest.mark.parametrize("name", PART_B)
def test_readable_part_b(name):
    """Each library figure of notebooks 06-11 is shown unshrunk in JupyterLab at 1280 px
    (at most MAX_WIDTH_IN as the inline backend shows it) with no text under MIN_FONT_PT."""
    import matplotlib.pyplot as plt

    from flashcourse.plots.style import MAX_WIDTH_IN, MIN_FONT_PT, smallest_text, width_in
    fig = _part_b()[name]()
    try:
        assert width_in(fig) <= MAX_WIDTH_IN, f"{name}: {width_in(fig):.2f} in wide"
        size, text = smallest_text(fig)
        assert size >= MIN_FONT_PT, f"{name}: text {text!r} at {size} pt"
    finally:
        plt.close(fig)


def _explorers():
    from flashcourse.widgets import (backward, kv_cache, paged_pool, score_memory,
                                     tile_schedule, traffic, variants)
    return {"backward": backward.backward_explorer, "kv_cache": kv_cache.kv_cache_explorer,
            "paged_pool": paged_pool.paged_pool_explorer,
            "score_memory": score_memory.score_memory_explorer,
            "tile_schedule": tile_schedule.tile_schedule, "traffic": traffic.traffic_explorer,
            "variants": variants.variants_explorer}


@pytest.mark.parametrize("name", sorted(_explorers()))
def test_readable_explorer_plots(name):
    """An explorer's picture (a widget image drawn at 2x and shown at its own width in CSS
    pixels) fits JupyterLab's output area at 1280 px and has no text under MIN_FONT_PT at
    its default setting."""
    explorer = _explorers()[name]()
    width_px = explorer._plot_px[0]
    assert width_px <= style.MAX_WIDTH_IN * 100, f"{name}: {width_px} px wide"
    size, text = style.smallest_text(explorer._fig)
    assert size >= style.MIN_FONT_PT, f"{name}: {text!r} at {size:g} pt"


def test_timing_spread_rings_unresolved_points():
    """Notebook 05's live timing plot: a band per version, rings exactly where the repeats
    do not resolve an order (versions overlapping at one N; a version's own rise to the
    next N), the dotted fixed-cost line, readable at the course's sizes."""
    import matplotlib.pyplot as plt
    from flashcourse.plots import timings as TP
    from flashcourse.timing import describe_unresolved, spread, unresolved
    sizes = [256, 512, 1024]
    runs = {"fast": [[0.30, 0.90, 0.35], [1.0, 1.1, 1.05], [4.0, 4.1, 4.2]],
            "slow": [[0.50, 0.55, 0.60], [2.0, 2.1, 2.2], [8.0, 8.5, 9.0]]}
    assert spread(runs["fast"][0]) == (0.30, 0.35, 0.90)
    found = unresolved(sizes, runs)
    assert [(f["n"], f["kind"], f["names"]) for f in found] == [
        (256, "versions", ("fast", "slow"))]                  # 0.3..0.9 overlaps 0.5..0.6
    runs["slow"][0] = [0.5, 2.5, 0.6]                          # slower at 256 than at 512?
    found = unresolved(sizes, runs)
    assert (256, "growth", ("slow",)) in [(f["n"], f["kind"], f["names"]) for f in found]
    assert TP.flagged_points(sizes, runs) == {("fast", 256), ("slow", 256)}
    lines = describe_unresolved(sizes, runs)
    assert len(lines) == 1
    assert lines[0].startswith("N = 256: order not resolved among all 2 versions")
    assert "rise to N = 512 not resolved: slow" in lines[0]
    assert describe_unresolved([256], {"a": [[1.0]], "b": [[2.0]]}) == []
    chained = {"a": [[1.0, 2.0]], "b": [[1.9, 3.0]], "c": [[2.9, 4.0]], "d": [[9.0]]}
    assert describe_unresolved([256], chained) == ["N = 256: order not resolved among a, b, c"]
    with pytest.raises(ValueError, match="3 sizes"):
        unresolved(sizes, {"a": [[1.0]]})
    fig = TP.plot_timing_spread(sizes, runs, overhead_ms=0.2, colours={"fast": "C1"})
    ax = fig.axes[0]
    assert len(ax.collections) == 2                            # one band per version
    rings = [ln for ln in ax.lines if ln.get_marker() == "o" and ln.get_linestyle() == "None"]
    assert sum(len(ln.get_xdata()) for ln in rings) == 2
    assert any(ln.get_linestyle() == ":" for ln in ax.lines)   # the fixed-cost line
    assert style.width_in(fig) <= style.MAX_WIDTH_IN
    assert style.smallest_font_pt(fig) >= style.MIN_FONT_PT
    plt.close(fig)


def test_loss_curves_draw_both_runs_and_their_difference():
    import matplotlib.pyplot as plt
    from flashcourse.plots import training
    fig = training.plot_loss_curves({"tiled": [3.0, 2.5, 2.0], "dense": [3.0, 2.5, 2.0 + 1e-15]})
    top, bottom = fig.axes
    assert len(top.lines) == 2 and len(bottom.lines) >= 1
    np.testing.assert_allclose(bottom.lines[0].get_ydata(), [1e-17, 1e-17, 1e-15 / 2.0],
                               rtol=0.2)
    assert style.width_in(fig) <= style.MAX_WIDTH_IN
    plt.close(fig)


def test_packed_block_mask_draws_every_tile_in_its_state():
    import matplotlib.pyplot as plt
    from flashcourse.model import attention
    from flashcourse.plots import training
    from flashcourse.variants import block_mask
    cu, t = np.array([0, 5, 6, 13]), 13
    bm = block_mask.create_block_mask(attention.packed_mask(cu, t), None, None, t, t, 4, 3)
    states = bm.states()[0, 0]                                 # (4, 5) tiles
    fig = training.plot_packed_block_mask(attention.packed_visible(cu, t), states,
                                          bm.block_size, cu)
    left, right = fig.axes
    faces = [p.get_facecolor() for p in right.patches]
    assert len(faces) == states.size
    from matplotlib.colors import to_rgba
    assert faces == [to_rgba(training.TILE_FACES[s]) for s in states.ravel()]
    assert left.get_title() == f"visible pairs: {bm.visible_pairs} of {t * t}"
    assert style.width_in(fig) <= style.MAX_WIDTH_IN
    assert style.smallest_font_pt(fig) >= style.MIN_FONT_PT
    plt.close(fig)
