"""The block-mask explorer of notebook 14 and the numbers behind it (`variants.cost`).

Counts checked by hand on small cases, against the tiled forward's own counts, at the
extremes of every control (N = 1 and 16,384, window 0 and past N, one document and one per
position, prefix 0 and past N, tiles larger than N), and invalid settings as one message,
never an exception.
"""

import html
import re
import time

import numpy as np
import pytest

from flashcourse.variants import block_mask as BM
from flashcourse.variants import library, tiled
from flashcourse.variants.cost import tile_cost
from flashcourse.widgets.variants import (MASKS, MAX_LOG2_N, VariantsExplorer, document_bounds,
                                          variants_explorer, variants_readout)


def _message(ex) -> str:
    return html.unescape(re.sub("<[^>]+>", "", ex.message.value)).strip()


# ---------------------------------------------------------------------------- the numbers
def test_causal_costs_by_hand():
    """N = 256, tiles 64: 4 x 4 tiles, 6 full, 4 partial (diagonal), 6 empty."""
    c = variants_readout("causal", 256, 0, 64, 128).cost
    assert (c.tiles_full, c.tiles_partial, c.tiles_empty) == (6, 4, 6)
    assert c.visible_pairs == 256 * 257 // 2
    assert c.pairs_computed == 10 * 64 * 64
    assert c.kv_bytes == 10 * 2 * 64 * 128 * 2                   # 10 tiles x K_j, V_j fp16
    assert c.kv_bytes_dense == 16 * 2 * 64 * 128 * 2
    assert c.predicted_time_ratio == pytest.approx(10 / 16)
    assert c.skipped_fraction == pytest.approx(6 / 16)


def test_ragged_tiles_count_only_existing_pairs_and_keys():
    """N = 100, tiles 32: the last block holds 4 rows and 4 keys."""
    bm = BM.create_block_mask(library.causal(100, 100), None, None, 100, 100, 32, 32)
    c = tile_cost(bm, 16, 4)
    states = bm.states()[0, 0]
    sizes = np.array([32, 32, 32, 4])
    touched = states != BM.EMPTY
    assert c.pairs_computed == int((np.outer(sizes, sizes) * touched).sum())
    assert c.kv_bytes == int(2 * 16 * 4 * (touched * sizes[None, :]).sum())
    assert c.kv_bytes_dense == 2 * 16 * 4 * 4 * 100
    assert c.visible_pairs == 100 * 101 // 2 <= c.pairs_computed <= c.pairs_total


def test_tiles_touched_are_the_tiles_the_forward_forms():
    n = 70
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((1, 1, n, 4)) for _ in range(3))
    for mask in MASKS:
        r = variants_readout(mask, n, 9 if mask != "documents" else 5, 32, 64)
        stats = {}
        tiled.forward(q, k, v, block_mask=r.block_mask, stats=stats)
        assert stats["tiles"] == r.cost.tiles_touched, mask
        assert stats["mask_evaluations"] <= r.cost.tiles_partial * 32 * 32, mask


def test_sliding_window_skips_more_than_causal_and_the_model_follows_the_tiles():
    causal = variants_readout("causal", 4096, 0, 128).cost
    window = variants_readout("sliding window", 4096, 256, 128).cost
    assert window.skipped_fraction > causal.skipped_fraction > 0.45
    assert window.kv_bytes < causal.kv_bytes < causal.kv_bytes_dense
    for c in (causal, window):
        assert c.predicted_time_ratio == c.tiles_touched / c.tiles_total
        assert c.visible_fraction <= c.pairs_computed / c.pairs_total


@pytest.mark.parametrize("mask,n,parameter,block", [
    ("causal", 1, 0, 32),                       # one position
    ("sliding window", 1000, 0, 32),            # each query sees only itself
    ("sliding window", 300, 10 ** 6, 256),      # window past N: plain causal, one ragged tile
    ("documents", 500, 1, 64),                  # one document: plain causal
    ("documents", 64, 64, 32),                  # one document per position: the diagonal
    ("prefix-LM", 200, 0, 32),                  # no prefix: plain causal
    ("prefix-LM", 200, 5000, 32),               # prefix past N: every pair visible
    ("causal", 2 ** MAX_LOG2_N, 0, 32),         # the largest length, smallest tiles
])
def test_extreme_settings_give_a_readout(mask, n, parameter, block):
    r = variants_readout(mask, n, parameter, block)
    c = r.cost
    assert c.tiles_total == (-(-n // block)) ** 2 and len(r.lines) == 6
    assert 0 <= c.skipped_fraction < 1 and 0 < c.visible_pairs <= c.pairs_total
    if mask == "prefix-LM" and parameter >= n:
        assert c.visible_pairs == n * n and c.tiles_empty == 0
    if mask == "documents" and parameter == n:
        assert c.visible_pairs == n


def test_extremes_match_the_plain_causal_mask():
    causal = variants_readout("causal", 300, 0, 64).cost
    for mask, p in (("sliding window", 10 ** 6), ("documents", 1), ("prefix-LM", 0)):
        assert variants_readout(mask, 300, p, 64).cost == causal, mask


@pytest.mark.parametrize("args,name", [
    (("diagonal", 64, 1, 32), "mask"), (("documents", 10, 11, 32), "documents"),
    (("causal", 0, 0, 32), "N"), (("causal", 2 ** 15, 0, 32), "N"),
    (("sliding window", 64, -1, 32), "window"), (("prefix-LM", 64, 2.5, 32), "prefix"),
    (("causal", 64, 0, 0), "block"), (("causal", "64", 0, 32), "N"),
])
def test_invalid_settings_are_one_error_naming_them(args, name):
    with pytest.raises(ValueError, match=f"^{name} must"):
        variants_readout(*args)


def test_document_bounds_are_seeded_and_valid():
    a, b = document_bounds(1000, 7), document_bounds(1000, 7)
    assert np.array_equal(a, b) and a[0] == 0 and a[-1] == 1000 and a.size == 8
    assert np.all(np.diff(a) > 0)
    assert np.array_equal(document_bounds(5, 5), np.arange(6))


# ---------------------------------------------------------------------------- the widget
def test_explorer_readout_plot_and_controls():
    ex = variants_explorer()
    assert "fc-variants" in ex._dom_classes and _message(ex) == "" and ex.errors == 0
    assert ex.readout.lines == variants_readout("sliding window", 4096, 512, 128, 128).lines
    assert "skipped" in ex.details.value and "model" in ex.details.value
    assert ex.window.text.layout.display is None                   # the window box shows
    assert ex.documents.text.layout.display == "none"
    ex.controls["mask"].value = "documents"
    assert ex.documents.text.layout.display is None and ex.window.text.layout.display == "none"
    assert ex.readout.mask == "documents" and _message(ex) == ""
    ex.controls["block"].value = 32
    assert ex.readout.cost.tiles_total == 128 * 128


def test_explorer_invalid_entries_are_messages_never_exceptions():
    ex = variants_explorer(mask="documents", n=1000, documents=10)
    ex.documents.text.value = "5000"                               # more documents than N
    assert _message(ex).startswith("Cannot show this setting: documents must be at most N")
    assert ex.details.value == "" and ex.image.layout.display == "none"
    ex.documents.text.value = "many"                               # not a number
    assert "documents must be a whole number" in _message(ex)
    assert ex.documents.value == 5000                              # the box went back
    ex.documents.text.value = "12"
    assert _message(ex) == "" and ex.image.layout.display is None
    ex.length.text.value = "99999"                                 # past the slider's end
    assert "N must be at most 16,384" in _message(ex) and ex.length.value == 1000
    ex.controls["mask"].value = "sliding window"
    ex.window.text.value = "-3"
    assert "window must be at least 0" in _message(ex) and ex.window.value == 512


@pytest.mark.parametrize("kwargs,name", [
    ({"mask": "full"}, "mask"), ({"n": 0}, "n"), ({"n": 2 ** 15}, "n"), ({"block": 48}, "block"),
    ({"window": -1}, "window"), ({"documents": "4"}, "documents"), ({"head_dim": 96}, "head_dim"),
])
def test_constructor_refuses_values_not_on_offer(kwargs, name):
    with pytest.raises(ValueError, match=f"^{name} must"):
        VariantsExplorer(**kwargs)


def _one_look_at_every_pair_s(n: int) -> float:
    """Seconds this machine takes to compare every pair of n positions once, in tiles of
    128 rows (the least any block-mask builder does): the yardstick of the test below."""
    start = time.perf_counter()
    idx = np.arange(n)
    for q0 in range(0, n, 128):
        (idx[None, :] <= idx[q0:q0 + 128, None]).sum(axis=0)
    return time.perf_counter() - start


@pytest.mark.slow
def test_every_mask_answers_at_16k_in_a_few_looks_at_every_pair():
    """The explorer answers at N = 16,384 (the brief: within a second on a laptop, where
    one look at every pair takes ~0.1 s). Timed against this machine's own yardstick, so
    that a loaded test machine does not fail it and a builder that loops over pairs in
    Python, or redraws per tile, does."""
    ex = variants_explorer(block=32)
    for mask in MASKS:
        BM.clear_cache()
        ex.controls["mask"].value = mask
        yardstick = _one_look_at_every_pair_s(2 ** MAX_LOG2_N)
        start = time.perf_counter()
        ex.length.set(2 ** MAX_LOG2_N)
        took = time.perf_counter() - start
        assert _message(ex) == "" and ex.readout.n == 2 ** MAX_LOG2_N, mask
        assert took < 15 * yardstick + 1.0, f"{mask}: {took:.2f} s, yardstick {yardstick:.2f} s"
        ex.length.set(1024)


# ---------------------------------------------------------------------------- the pictures
def test_the_mask_figure_is_readable_and_checks_its_arguments():
    import matplotlib.pyplot as plt

    from flashcourse.plots import style
    from flashcourse.plots.variants import draw_block_states, plot_masks
    fig = plot_masks([("causal", library.causal(24, 24)),
                      ("window", library.sliding_window(4, 24, 24)),
                      ("prefix", library.prefix_lm(5, 24, 24)),
                      ("documents", library.document([0, 7, 24])),
                      ("fifth panel", library.causal(24, 24))], 24, 24, 8, 8)
    try:
        assert style.width_in(fig) <= style.MAX_WIDTH_IN
        assert style.smallest_text(fig)[0] >= style.MIN_FONT_PT
        assert sum(ax.get_visible() for ax in fig.axes) == 5       # 2 rows of 4, 3 hidden
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="^panels must"):
        plot_masks([], 4, 4)
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match="^states must"):
        draw_block_states(ax, np.zeros((1, 2, 2)))
    plt.close(fig)
