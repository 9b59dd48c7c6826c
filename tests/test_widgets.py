"""The widgets' pure readout functions (exact numbers), and the explorers in Python.

The readouts are checked against numbers derived by hand from the formulas in
flashcourse.memory / flashcourse.traffic (exact integers: no tolerance), and the
tile-schedule replay against an independent count of tiles and the IO model.
The explorers (flashcourse.widgets.*) are built and driven by setting `.value` on their
controls (no browser; tests/test_notebooks.py drives them in JupyterLab): every invalid
setting gives a one-line message and never raises, redraws are serialised, values of
any size are either shown correctly or refused with a message.
"""

import math
import re
import struct
import threading

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from flashcourse.printing import compare
from flashcourse.widgets import readouts as W
from flashcourse.geometry import tile_visibility
from flashcourse.gpus import GPUS
from flashcourse.memory import BYTES_PER_SCORE
from flashcourse.traffic import paper_block_sizes, tiled_traffic

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------------------
# Score memory
# ---------------------------------------------------------------------------

def test_lesson_example_32_mib():
    r = W.score_memory_readout(4096, 4096, "fp16")
    assert r.per_head_bytes == 33_554_432
    assert r.headline == "M_score per head: 33,554,432 B = 32 MiB"
    assert r.total_bytes == 33_554_432


def test_batch_heads_causal_and_gpu_verdicts():
    r = W.score_memory_readout(4096, 4096, "fp16", 2, 8, True, "H100 SXM")
    assert r.total_bytes == 16 * 33_554_432 == 536_870_912
    assert "536,870,912 B = 512 MiB" in r.lines[1]
    # causal square: 4096 * 4097 / 2 visible pairs, 2 bytes each
    assert r.causal_bytes == 4096 * 4097 // 2 * 2 == 16_781_312
    assert "8,390,656 of the 16,777,216 pairs" in r.lines[2]
    # H100: 228 KiB per SM (too small), 50 MiB L2 (fits), 80 GiB device (fits)
    assert (r.fits_on_chip, r.fits_l2, r.fits_device) == (False, True, True)
    assert "233,472 B = 228 KiB" in r.lines[3] and "does NOT fit (144x too large)" in r.lines[3]
    assert r.lines[4].endswith("one head's matrix fits")
    assert "the batch's matrices fit (0.62% of it)" in r.lines[5]


def test_million_token_fp32_overflows_device_memory():
    r = W.score_memory_readout(2**20, 2**20, "fp32", gpu="H200")
    assert r.per_head_bytes == 2**40 * 4
    assert r.headline == "M_score per head: 4,398,046,511,104 B = 4 TiB"
    assert not r.fits_device
    assert "do NOT fit (29x too large)" in r.lines[-1]        # 4 TiB / 141 GiB = 29.05


@pytest.mark.parametrize("dtype", list(BYTES_PER_SCORE))
def test_every_dtype(dtype):
    r = W.score_memory_readout(1000, 3, dtype)
    assert r.per_head_bytes == 3000 * BYTES_PER_SCORE[dtype]


@pytest.mark.parametrize("kwargs,word", [
    (dict(t_query=0, t_key=4), "Tq"),
    (dict(t_query=4, t_key=-3), "Tk"),
    (dict(t_query=4.5, t_key=4), "Tq"),
    (dict(t_query=4, t_key=4, dtype="int8"), "dtype"),
    (dict(t_query=4, t_key=4, batch=0), "batch"),
    (dict(t_query=4, t_key=4, heads=0), "heads"),
    (dict(t_query=4, t_key=4, causal="yes"), "causal"),
    (dict(t_query=4, t_key=4, gpu="V100"), "gpu"),
])
def test_score_readout_rejects_bad_settings(kwargs, word):
    with pytest.raises(ValueError, match=word):
        W.score_memory_readout(**kwargs)


@given(st.sampled_from(list(GPUS)), st.sampled_from(list(BYTES_PER_SCORE)),
       st.integers(1, 64), st.booleans(), st.integers(1, 5000))
def test_curve_limits_are_the_largest_fitting_lengths(gpu, dtype, bh, tied, tq):
    c = W.score_memory_curve(tq, 4096, dtype, bh, 1, tied, gpu)
    s = BYTES_PER_SCORE[dtype]
    for _label, cap, n, which in c.limits:
        per_unit = s * (bh if which == "batch" else 1) * (1 if tied else tq)
        power = 2 if tied else 1
        if n is None:
            assert per_unit > cap
        else:
            assert per_unit * n ** power <= cap < per_unit * (n + 1) ** power


def test_curve_passes_through_the_current_point():
    c = W.score_memory_curve(3000, 3000, "bf16", 4, 2, True, "T4")
    assert c.current_x == 3000 and c.current_per_head == 3000 * 3000 * 2
    assert c.current_batch == 8 * c.current_per_head
    assert c.x[-1] >= 2**20 and (c.per_head == c.x * c.x * 2).all()
    u = W.score_memory_curve(3000, 5000, "fp32", 1, 1, False, "T4")
    assert u.current_x == 5000 and (u.per_head == 3000 * u.x * 4).all()


# ---------------------------------------------------------------------------
# Traffic
# ---------------------------------------------------------------------------

def test_traffic_worked_example_by_hand():
    # N = 4096, d = 64, fp16 (e = s = 2), Br = Bc = 64, fa2, non-causal.
    n, d, e = 4096, 64, 2
    r = W.traffic_readout(n, d, 64, 64, 100 * 1024, "fp16", "fa2", False, "A100 80GB")
    dense_reads = 3 * n * d * e + 2 * n * n * e                 # Q, K, V; S, P
    dense_writes = 2 * n * n * e + n * d * e                    # S, P; O
    assert (r.dense.read_bytes, r.dense.write_bytes) == (dense_reads, dense_writes)
    assert r.dense.total_bytes == 136_314_880
    tr = n // 64
    assert r.tiled.read_bytes == n * d * e + 2 * tr * n * d * e == 67_633_152
    assert r.tiled.write_bytes == n * d * e + 4 * n == 540_672
    assert r.ratio == pytest.approx(136_314_880 / 68_173_824, rel=1e-15)
    assert r.flops == 4 * n * n * d                             # identical for both
    assert r.intensity_dense == pytest.approx(r.flops / 136_314_880, rel=1e-15)
    # A100 80GB: 2,039 GB/s and 312 TFLOP/s fp16: memory-bound, bytes / bandwidth
    assert r.time_dense_s == pytest.approx(136_314_880 / 2039e9, rel=1e-12)
    assert r.time_tiled_s == pytest.approx(68_173_824 / 2039e9, rel=1e-12)
    # footprint 64*64*2 + 2*64*64*2 + 64*64*4 + 64*64*4 + 2*64*4 = 57,856 B; 164 KiB / it = 2
    assert r.footprint_bytes == 57_856 and r.fits_budget and r.blocks_per_sm == 2
    assert r.warnings == ()
    assert r.lines[2] == "Tiled moves 2.00x less than dense"
    assert r.lines[3] == "FLOPs (the same for dense and tiled): 4,294,967,296 FLOP (4.29 GFLOP)"


def test_fp32_uses_the_fp32_peak():
    r = W.traffic_readout(64, 64, 64, 64, 200 * 1024, "fp32", gpu="H100 SXM")
    assert r.peak_flops_per_s == GPUS["H100 SXM"].fp32_flops_per_s
    assert W.traffic_readout(64, 64, 64, 64, 200 * 1024, "bf16",
                             gpu="H100 SXM").peak_flops_per_s == 989e12


def test_oversized_tile_warns_and_cuts_residency():
    r = W.traffic_readout(4096, 128, 128, 256, 100 * 1024, "fp16", "fa2", False, "A100 80GB")
    foot = 128 * 128 * 2 + 2 * 256 * 128 * 2 + 128 * 256 * 4 + 128 * 128 * 4 + 2 * 128 * 4
    assert r.footprint_bytes == foot == 361_472
    assert not r.fits_budget and r.blocks_per_sm == 0
    assert any("no longer fits the scratchpad" in x for x in r.warnings)
    assert any("cut residency" in x for x in r.warnings)
    # fits the budget but only one block per SM: still warned about residency
    r = W.traffic_readout(4096, 64, 128, 128, 160 * 1024, gpu="A100 80GB")
    assert r.fits_budget and r.blocks_per_sm == 1
    assert [("cut residency" in x) for x in r.warnings] == [True]


def test_budget_above_the_per_block_limit_warns():
    r = W.traffic_readout(1024, 64, 16, 16, 100 * 1024, gpu="T4")
    assert any("more than one thread block may use on T4" in x for x in r.warnings)


def test_causal_fa1_matches_the_model():
    r = W.traffic_readout(1000, 24, 48, 80, 64 * 1024, "fp32", "fa1", True, "H200")
    assert r.tiled == tiled_traffic(1000, 1000, 24, 48, 80, causal=True, loop_order="fa1",
                                    bytes_per_element=4)
    assert r.flops == 4 * 24 * (1000 * 1001 // 2)
    assert r.lines[3].startswith("FLOPs of the visible pairs")


@pytest.mark.parametrize("args,word", [
    ((0, 64, 64, 64, 1024), "T"),
    ((128, 0, 64, 64, 1024), "d"),
    ((128, 64, 0, 64, 1024), "block_q"),
    ((128, 64, 64, 2 ** 17, 1024), "block_k"),
    ((2 ** 41, 64, 64, 64, 1024), "T"),
    ((128, 64, 64, 64, 0), "budget"),
    ((128, 64, 64, 64, 1024, "fp4"), "dtype"),
    ((128, 64, 64, 64, 1024, "fp16", "fa3"), "loop order"),
    ((128, 64, 64, 64, 1024, "fp16", "fa2", False, "B200"), "gpu"),
])
def test_traffic_readout_rejects_bad_settings(args, word):
    with pytest.raises(ValueError, match=word):
        W.traffic_readout(*args)


# ---------------------------------------------------------------------------
# Tile schedule
# ---------------------------------------------------------------------------

@given(st.integers(1, 90), st.integers(1, 90), st.integers(1, 9), st.integers(1, 40),
       st.integers(1, 40), st.booleans(), st.sampled_from(["fa1", "fa2"]))
def test_schedule_replays_every_tile_and_matches_the_model(tq, tk, d, br, bc, causal, order):
    # Br > Tq and Bc > Tk included: one ragged block
    tr, tc = math.ceil(tq / br), math.ceil(tk / bc)
    assume(tr * tc <= W.MAX_SCHEDULE_TILES)
    steps = W.schedule_steps(tq, tk, d, br, bc, causal, order)
    tiles = [s for s in steps if s.kind in ("tile", "skip")]
    # every tile exactly once, in the loop order
    expected = ([(i, j) for i in range(tr) for j in range(tc)] if order == "fa2"
                else [(i, j) for j in range(tc) for i in range(tr)])
    assert [s.tile for s in tiles] == expected
    for s in tiles:
        i, j = s.tile
        hidden = tile_visibility(i * br, min((i + 1) * br, tq), j * bc,
                                 min((j + 1) * bc, tk), tq, tk, causal) == "hidden"
        assert (s.kind == "skip") == hidden
        if s.kind == "skip":  # nothing stored; only the loop's own block loads issued
            allowed = ("Q",) if order == "fa2" else ("K", "V")
            assert all(t in allowed for t, *_ in s.reads) and not s.writes
    stores = [s for s in steps if s.kind == "store"]
    assert len(stores) == (tr if order == "fa2" else 0)
    assert [s.kind for s in steps].count("init") == (1 if order == "fa1" else 0)
    # cumulative bytes: monotone, and the last step equals the IO model to the byte
    totals = [s.total_bytes for s in steps]
    assert totals == sorted(totals) and [s.index for s in steps] == list(range(len(steps)))
    model = tiled_traffic(tq, tk, d, br, bc, causal=causal, loop_order=order)
    assert (steps[-1].read_bytes, steps[-1].write_bytes) == (model.read_bytes,
                                                             model.write_bytes)


def test_schedule_fa2_first_steps_by_hand():
    # Tq = 96, Tk = 80, d = 16, Br = Bc = 32, causal: Q_0 sees only K_0.
    steps = W.schedule_steps(96, 80, 16, 32, 32, True, "fa2")
    e = 2
    assert steps[0].kind == "tile" and steps[0].tile == (0, 0)
    assert steps[0].reads == (("Q", 0, 32, 32 * 16 * e), ("K", 0, 32, 32 * 16 * e),
                              ("V", 0, 32, 32 * 16 * e))
    assert [s.kind for s in steps[1:4]] == ["skip", "skip", "store"]
    assert steps[3].writes == (("O", 0, 32, 32 * 16 * e), ("lse", 0, 32, 32 * 4))
    assert steps[3].total_bytes == 3 * 1024 + 1024 + 128
    assert W.describe_step(steps[1], len(steps)) == (
        "Step 2 of 12: tile (0,1) skipped: the causal mask hides all of it.")


@pytest.mark.parametrize("args,word", [
    ((257, 16, 8, 8, 8), "Tq"),
    ((16, 0, 8, 8, 8), "Tk"),
    ((16, 16, 8, 0, 8), "block_q"),
    ((16, 16, 0, 8, 8), "d"),
    ((256, 256, 8, 4, 4), "too many"),
    ((16, 16, 8, 8, 8, False, "fa3"), "loop order"),
])
def test_schedule_rejects_bad_settings(args, word):
    with pytest.raises(ValueError, match=word):
        W.schedule_steps(*args)


def test_format_helpers():
    assert W.format_seconds(1.5e-5) == "15 us"
    assert W.format_seconds(2.0) == "2 s"
    assert W.format_flops(4_294_967_296) == "4,294,967,296 FLOP (4.29 GFLOP)"
    assert W.format_flops(12) == "12 FLOP"


def test_block_larger_than_t_is_one_ragged_block():
    """The traffic slider's first stop is T = 1: valid with the default 64 x 64 tile."""
    r = W.traffic_readout(1, 64, 64, 64, 100 * 1024)
    assert r.tiled == tiled_traffic(1, 1, 64, 64, 64)
    assert "Br = 64 > T = 1: one ragged block of 1 row" in r.lines[2]


def test_compare_flips_the_word_below_one():
    assert compare(50, 100) == "2.0x less" and compare(170, 100) == "1.7x more"
    assert compare(1, 1) == "the same" and compare(1, 3, digits=2) == "3.00x less"
    for a, b in ((1, 7), (7, 1), (2.5, 2.4), (2.4, 2.5)):
        text = compare(a, b)
        assert float(text.split("x")[0]) >= 1.0, text


def test_backward_summary_says_more_when_tiled_moves_more():
    # N = 512, d = 64, Br = Bc = 32, fp16: the tiled backward moves 1.69x the bytes
    from flashcourse.plots.backward import backward_costs, summary_lines

    c = backward_costs(512, 64, block=32)
    assert c["tiled"]["traffic"] > c["standard"]["traffic"]
    lines = summary_lines(512, 64, block=32)
    assert lines[2].endswith("(tiled: 1.7x more)"), lines[2]
    assert "0." not in lines[2].split("(")[-1]
    assert summary_lines(4096, 64)[1].endswith("(tiled: 16.9x less)")


def test_paper_tile_fits_its_own_budget_at_every_budget():
    """The button's tile fits the footprint the explorer counts, at 4 .. 512 KiB."""
    from flashcourse.traffic import tile_footprint_bytes

    for dtype, e in (("fp16", 2), ("fp32", 4)):
        for d in (32, 64, 128):
            for kib in range(4, 513, 4):
                br, bc, pbr, pbc = W.paper_tile_that_fits(kib * 1024, d, dtype)
                assert (pbr, pbc) == paper_block_sizes(kib * 1024, d, e)
                assert br == min(bc, d) and bc <= pbc
                assert tile_footprint_bytes(br, bc, d, bytes_per_element=e) <= kib * 1024
                if bc < pbc:          # the largest of the paper's shape: one more row fails
                    assert tile_footprint_bytes(min(bc + 1, d), bc + 1, d,
                                                bytes_per_element=e) > kib * 1024
    assert W.paper_tile_that_fits(64 * 1024, 64, "fp16", t=50) == (50, 50, 64, 128)
    with pytest.raises(ValueError, match="not even a 1 x 1 tile"):
        W.paper_tile_that_fits(4 * 1024, 4096, "fp32")


def test_curve_at_huge_lengths_is_exact_and_positive():
    """Tq = 3e9 overflowed int64 (negative bytes); Tq = 2**70 raised TypeError."""
    c = W.score_memory_curve(3 * 10 ** 9, 3 * 10 ** 9, "fp16", 1, 1, True, "H200")
    assert c.x[-1] >= 6e9 and np.all(c.per_head > 0) and np.all(np.diff(c.per_head) > 0)
    assert c.current_per_head == 18 * 10 ** 18                  # exact Python int
    with pytest.raises(ValueError, match="at most 1,099,511,627,776"):
        W.score_memory_curve(2 ** 70, 1, "fp16")


# ---------------------------------------------------------------------------
# The explorers, driven from Python
# ---------------------------------------------------------------------------

from flashcourse.widgets import _base as B  # noqa: E402
from flashcourse.widgets.backward import backward_explorer  # noqa: E402
from flashcourse.widgets.kv_cache import kv_cache_explorer  # noqa: E402
from flashcourse.widgets.paged_pool import paged_pool_explorer  # noqa: E402
from flashcourse.widgets.score_memory import score_memory_explorer  # noqa: E402
from flashcourse.widgets.tile_schedule import tile_schedule  # noqa: E402
from flashcourse.widgets.traffic import traffic_explorer  # noqa: E402
from flashcourse.widgets.tuning import tuning_explorer  # noqa: E402
from flashcourse.widgets.variants import variants_explorer  # noqa: E402

EXPLORERS = (score_memory_explorer, traffic_explorer, tile_schedule, backward_explorer,
             kv_cache_explorer, lambda: tuning_explorer(measure=False), variants_explorer,
             paged_pool_explorer)


def _png_size(data: bytes):
    assert bytes(data).startswith(PNG_MAGIC)
    return struct.unpack(">II", bytes(data)[16:24])                # IHDR width, height


def _message(ex) -> str:
    """The explorer's message as plain text (one line), '' when none."""
    import html
    import re
    return html.unescape(re.sub("<[^>]+>", "", ex.message.value)).strip()


@pytest.mark.parametrize("make", EXPLORERS)
def test_every_explorer_is_built_once_and_not_displayed(make, monkeypatch):
    """the backward explorer displayed its box and returned it (08 showed it twice)."""
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *a, **k: shown.append(a))
    ex = make()
    assert shown == [] and _message(ex) == "" and ex.errors == 0
    assert isinstance(ex, B.Explorer) and ex.css_class in ex._dom_classes


@pytest.mark.parametrize("make", EXPLORERS[:5] + EXPLORERS[6:])   # those with a plot
def test_plot_rendered_at_twice_its_displayed_size(make):
    """The PNG has 2x the pixels of the CSS width it is shown at: sharp, never stretched."""
    ex = make()
    width_px = int(ex.image.layout.width.removesuffix("px"))
    assert ex.image.layout.max_width == "100%" and ex.image.layout.height == "auto"
    assert width_px <= 900                                       # fits a 1280 px screen
    w, h = _png_size(ex.image.value)
    assert (w, h) == (2 * width_px, 2 * ex._plot_px[1])


def test_score_explorer_reacts_and_shows_messages():
    ex = score_memory_explorer()
    c = ex.controls
    assert ex.headline.value == "M_score per head: 33,554,432 B = 32 MiB"
    first_png = ex.image.value
    c["t_query_slider"].value = 8192                             # one step right
    assert c["t_query"].value == "8,192" and c["t_key"].value == "8,192"
    assert ex.headline.value == "M_score per head: 134,217,728 B = 128 MiB"
    assert ex.image.value != first_png
    c["t_query"].value = "3000"                                  # free entry
    assert c["t_query_slider"].value == 2048
    assert ex.headline.value == f"M_score per head: {3000 * 3000 * 2:,} B = 17.17 MiB"
    c["tied"].value = False
    c["t_key"].value = "1,000"
    assert ex.readout.per_head_bytes == 3000 * 1000 * 2
    c["t_query"].value = "0"                       # invalid: back to 3,000, a message, no raise
    assert _message(ex) == ("Cannot show this setting: Tq (query positions) must be at least 1, "
                            "got 0. The box shows 3,000 again (the last valid value).")
    assert c["t_query"].value == "3,000" and c["t_query_slider"].value == 2048
    assert ex.readout.per_head_bytes == 3000 * 1000 * 2 and ex.image.layout.display is None
    c["t_query"].value = "4096"
    assert _message(ex) == "" and ex.image.layout.display is None
    c["dtype"].value = "fp8"
    c["batch"].value = "4"
    c["heads"].value = "32"
    assert ex.readout.total_bytes == 4096 * 1000 * 128
    c["causal"].value = True
    assert "Causal" in ex.details.value
    c["gpu"].value = "T4"
    assert "T4 device memory" in ex.details.value


@pytest.mark.parametrize("text,word", [("0", "at least 1, got 0"), ("-3", "at least 1, got -3"),
                                       ("2.5", "whole number"), ("many", "whole number"),
                                       (f"{2 ** 20 + 1}", "at most 1,048,576")])
def test_batch_box_rejects_with_a_message(text, word):
    """The batch box (a clamping BoundedIntText) accepted 0 and turned -3 into 0 without a
    word. Now the box goes back to its last valid value and the message says why."""
    ex = score_memory_explorer(batch=2)
    ex.controls["batch"].value = text
    assert ex.controls["batch"].value == "2" and ex.readout.batch == 2     # one value shown
    assert word in _message(ex) and "batch" in _message(ex)
    assert _message(ex).endswith("The box shows 2 again (the last valid value).")


@pytest.mark.parametrize("typed,shown", [
    ("3e9", "M_score per head: 18,000,000,000,000,000,000 B = 15.61 EiB"),
    ("1000000000", "M_score per head: 2,000,000,000,000,000,000 B = 1.73 EiB"),
    (f"{2 ** 40}", f"M_score per head: {2 ** 81:,} B = 2,097,152 EiB"),
])
def test_score_explorer_at_huge_lengths_plots_the_typed_value(typed, shown):
    ex = score_memory_explorer()
    ex.controls["t_query"].value = typed
    n = B.parse_whole(typed, "n")
    assert _message(ex) == "" and ex.headline.value == shown
    assert ex.controls["t_query_slider"].value == 2 ** int(math.log2(n))   # slider follows
    ax = ex._fig.axes[0]
    assert ax.get_xlim()[1] >= n                                 # the dot is on the chart
    curve, dot = ax.get_lines()[0], [x for x in ax.get_lines() if x.get_marker() == "o"][0]
    y = np.asarray(curve.get_ydata(), dtype=float)
    assert curve.get_label() == "one head" and np.all(y > 0) and np.all(np.diff(y) > 0)
    assert float(dot.get_xdata()[0]) == n and float(dot.get_ydata()[0]) == float(n * n * 2)
    assert ax.get_ylim()[1] > n * n * 2


@pytest.mark.parametrize("typed,word", [(f"{2 ** 70}", "at most 1,099,511,627,776"),
                                        ("1e400", "is too large: a number of about 401"),
                                        ("4096.5", "whole number")])
def test_score_explorer_refuses_huge_lengths_with_a_message(typed, word):
    ex = score_memory_explorer()
    ex.controls["t_query"].value = typed
    assert word in _message(ex) and ex.errors == 1


def test_traffic_explorer_reacts_and_shows_messages():
    ex = traffic_explorer()
    c = ex.controls
    assert "Tiled moves 2.00x less than dense" in ex.details.value and ex.warning.value == ""
    c["block_q"].value = "256"
    c["block_k"].value = "256"
    assert _message(ex) == "" and "no longer fits the scratchpad" in ex.warning.value
    c["budget_kib"].value = 64
    ex.paper.click()
    br, bc, pbr, pbc = W.paper_tile_that_fits(64 * 1024, 64, "fp16", 4096)
    assert (pbr, pbc) == paper_block_sizes(64 * 1024, 64, 2) == (64, 128)
    assert (c["block_q"].value, c["block_k"].value) == (f"{br:,}", f"{bc:,}") == ("64", "79")
    assert ex.readout.fits_budget and ex.readout.tiled == tiled_traffic(4096, 4096, 64, br, bc)
    assert "So the button chose Br = 64, Bc = 79" in ex.note.value
    c["t"].value = "50"                                          # paper's Bc = 128 > T
    assert ex.note.value == ""                                   # the note was about T = 4096
    ex.paper.click()
    assert (c["block_q"].value, c["block_k"].value) == ("50", "50")
    assert _message(ex) == ""
    c["t"].value = "4096"
    ex.paper.click()
    for name, value in (("loop_order", "fa1"), ("causal", True), ("dtype", "fp32"),
                        ("gpu", "H200"), ("t", "1000"), ("head_dim", "80")):
        c[name].value = value
        assert _message(ex) == "", name
    assert ex.readout.tiled == tiled_traffic(1000, 1000, 80, 64, 79, causal=True,
                                             loop_order="fa1", bytes_per_element=4)
    c["t"].value = "0"
    assert "T (sequence length) must be at least 1" in _message(ex)
    c["t"].value = "4096"
    c["head_dim"].value = "-1"
    assert "d (head dimension)" in _message(ex)
    c["head_dim"].value = "64"
    assert _message(ex) == "" and bytes(ex.image.value).startswith(PNG_MAGIC)


@pytest.mark.parametrize("kib", [4, 16, 100, 164, 512])
def test_paper_button_tile_fits_in_the_explorer(kib):
    """04's button picked a tile the explorer then said does not fit, at every budget."""
    ex = traffic_explorer(budget_kib=kib)
    ex.paper.click()
    assert ex.readout.fits_budget
    assert "no longer fits" not in ex.warning.value and "Paper's rule" in ex.note.value


def test_paper_rule_typed_by_hand_explains_the_overshoot():
    ex = traffic_explorer(block_q=64, block_k=200, budget_kib=100)     # the paper's tile
    assert not ex.readout.fits_budget
    assert "sizes only the Q, K, V and O tiles" in ex.warning.value


def test_traffic_explorer_home_key_gives_a_valid_setting():
    """The slider's first stop (Home key) is T = 1: it gave an error with Br = Bc = 64."""
    ex = traffic_explorer()
    ex.controls["t_slider"].value = ex.controls["t_slider"].options[0][1]
    assert ex.controls["t"].value == "1" and _message(ex) == ""
    assert ex.readout.tiled == tiled_traffic(1, 1, 64, 64, 64)


@pytest.mark.parametrize("causal", [False, True])
def test_traffic_explorer_at_a_trillion_positions(causal):
    """T = 1e12 raised OverflowError / MemoryError from matplotlib (and, causal, from the
    model's arrays of T / Br blocks). Checked against the formulas with Python integers."""
    ex = traffic_explorer(causal=causal)
    ex.controls["t"].value = "1e12"
    t, d, e, b = 10 ** 12, 64, 2, 64
    assert _message(ex) == "" and _png_size(ex.image.value)[0] > 0
    assert ex.readout.dense.total_bytes == (3 * t * d * e + 2 * t * t * e) + (
        2 * t * t * e + t * d * e)
    tr = t // b                       # 15,625,000,000 query blocks; Br = Bc: block i sees i + 1
    key_rows = b * tr * (tr + 1) // 2 if causal else tr * t
    assert ex.readout.tiled.read_bytes == t * d * e + 2 * key_rows * d * e
    assert ex.readout.tiled.write_bytes == t * d * e + 4 * t
    ex.controls["t"].value = f"{2 ** 70}"
    assert "at most 1,099,511,627,776" in _message(ex)


def test_any_error_of_a_setting_is_a_one_line_message(monkeypatch):
    """Not only ValueError: an OverflowError from drawing is shown, not raised."""
    ex = traffic_explorer()
    import flashcourse.widgets.traffic as TM

    def boom(*_a, **_k):
        raise OverflowError("cannot convert float infinity to integer\nsecond line")

    monkeypatch.setattr(TM, "_paint", boom)
    ex.controls["t"].value = "8192"
    assert _message(ex) == ("Cannot show this setting: OverflowError: cannot convert float "
                            "infinity to integer")
    assert ex.image.layout.display == "none" and ex.details.value == ""
    monkeypatch.undo()
    ex.controls["t"].value = "4096"
    assert _message(ex) == "" and ex.image.layout.display is None


@pytest.mark.parametrize("make,kwargs,name", [
    (score_memory_explorer, dict(t_query="4096"), "t_query"),
    (score_memory_explorer, dict(batch=2.0), "batch"),
    (score_memory_explorer, dict(dtype="int8"), "dtype"),
    (traffic_explorer, dict(t="4096"), "t"),
    (traffic_explorer, dict(block_q="64"), "block_q"),
    (traffic_explorer, dict(budget_kib="100"), "budget_kib"),
    (tile_schedule, dict(t_query="96"), "t_query"),
    (tile_schedule, dict(block_k=500), "block_k"),
    (backward_explorer, dict(head_dim="64"), "head_dim"),
    (backward_explorer, dict(log2_n=30), "log2_n"),
    (tuning_explorer, dict(seq_len="4096"), "seq_len"),
])
def test_a_string_size_gives_a_clear_error_naming_it(make, kwargs, name):
    """A string size failed inside ipywidgets (TraitError); now a ValueError naming it."""
    with pytest.raises(ValueError, match=f"^{name} must be"):
        make(**kwargs)


def test_tile_schedule_steps_count_from_one():
    ex = tile_schedule()
    c = ex.controls
    n = len(ex.steps)
    assert c["step"].value == c["step"].min == c["play"].min == 1 == c["play"].value
    assert c["step"].max == n == c["play"].max == 12
    assert "Step 1 of 12" in ex.status.value and ex._fig._suptitle.get_text().startswith(
        "fa2: step 1 of 12")
    first = ex.image.value
    c["step"].value = 6                                          # drawn in the background
    assert ex.settle()
    assert ex.status.value.count("Step 6 of 12") == 1
    assert "total 9,344 B = 9.12 KiB" in ex.status.value
    assert ex.image.value != first
    c["step"].value = 12
    assert ex.settle() and "Step 12 of 12" in ex.status.value
    c["loop_order"].value = "fa1"
    assert len(ex.steps) == 10 and c["step"].max == 10 and c["step"].value == 10
    assert "Step 10 of 10" in ex.status.value
    assert ex.steps[-1].total_bytes == tiled_traffic(96, 80, 16, 32, 32, causal=True,
                                                     loop_order="fa1").total_bytes
    c["block_q"].value = 1
    c["block_k"].value = 1                                       # 96 x 80 tiles: too many
    assert "too many" in _message(ex)
    assert ex.image.layout.display == "none" and ex.status.value == ""
    c["step"].value = 3                                          # no crash while invalid
    assert ex.settle() and "too many" in _message(ex)
    c["block_q"].value = 16
    c["block_k"].value = 16
    assert _message(ex) == "" and len(ex.steps) > 10
    assert ex.image.layout.display is None and "Step 3 of" in ex.status.value


def test_backward_explorer_readout_and_messages():
    ex = backward_explorer()
    assert ex.lines[0] == "N = 4,096, d = 64, one head:"
    assert "(tiled: 16.9x less)" in ex.summary.value
    ex.controls["log2_n"].value = 9
    ex.controls["block"].value = 32
    assert "(tiled: 1.7x more)" in ex.summary.value             # was '(0.6x less)'
    texts = [t.get_text() for ax in ex._fig.axes for t in ax.get_yticklabels()]
    assert not any("$" in t for t in texts)                      # no mathtext to parse


def test_fast_changes_from_many_threads_never_give_a_traceback():
    """08: log2 N = 17 then d = 128 and Br = Bc = 256 changed quickly gave a ~7,500 px
    matplotlib traceback. Changes now arrive from 6 threads at once while redraws run;
    afterwards there is no message, and the plot and readout show the last setting."""
    ex = backward_explorer()
    c = ex.controls
    settings = [("log2_n", 17), ("head_dim", 128), ("block", 256), ("element", 4),
                ("log2_n", 10), ("head_dim", 32)]
    barrier = threading.Barrier(len(settings))
    errors = []

    def change(name, value):
        try:
            barrier.wait()
            for _ in range(2):
                c[name].value = value
                ex.refresh()
        except Exception as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    threads = [threading.Thread(target=change, args=s) for s in settings]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and ex.errors == 0 and _message(ex) == ""
    ex.refresh()                                                 # settle: the last values
    n, d = 2 ** c["log2_n"].value, c["head_dim"].value
    assert ex.lines[0] == f"N = {n:,}, d = {d}, one head:"
    assert ex._fig._suptitle.get_text() == f"Backward pass, one head, d = {d}"


def test_a_change_during_a_redraw_is_drawn_after_it(monkeypatch):
    """A refresh requested while one runs is not started inside it: it runs next."""
    ex = backward_explorer()
    import flashcourse.widgets.backward as BM

    depth, calls, real = [0], [], BM._paint

    def paint(fig, n, d, kw):
        depth[0] += 1
        calls.append((n, d))
        try:
            if len(calls) == 1:
                ex.controls["head_dim"].value = 128     # arrives mid-draw
            assert depth[0] == 1, "a redraw started inside another"
            real(fig, n, d, kw)
        finally:
            depth[0] -= 1

    monkeypatch.setattr(BM, "_paint", paint)
    ex.controls["log2_n"].value = 17
    assert calls == [(2 ** 17, 64), (2 ** 17, 128)]
    assert _message(ex) == "" and ex.lines[0] == "N = 131,072, d = 128, one head:"


def test_tuning_explorer_messages_and_labels():
    ex = tuning_explorer(measure=False)
    c = ex.controls
    assert "occupancy" in ex.report.value and _message(ex) == ""
    assert c["tm"].description == "tm (query rows per thread)"
    assert all(x.style.description_width == "initial" for x in c.values())   # not cut off
    c["threads"].value = 2048
    msg = _message(ex)
    assert msg.startswith("Cannot launch: threads = 2,048: a CUDA thread block holds at most "
                          "1,024 threads"), msg
    assert "column groups" not in msg and ex.report.value == ""
    c["threads"].value = 256
    c["tm"].value = 16                                           # does not divide the layout
    assert _message(ex).startswith("Cannot launch:")
    c["tm"].value = 4
    assert _message(ex) == "" and "occupancy" in ex.report.value


def test_tuning_explorer_says_untimed_not_failed():
    """A configuration the recorded sweep skipped read 'failed (time budget spent)'."""
    from flashcourse.results import load_sweep, recorded_row

    doc = load_sweep()
    if doc is None:
        pytest.skip("no recorded sweep in benchmarks/results/")
    rec = recorded_row(64, 4096, 128, 64, 256, 4, doc)
    assert rec is not None and rec.get("status") == "skipped"
    ex = tuning_explorer(head_dim=64, seq_len=4096, block_q=128, block_k=64, threads=256,
                         tm=4, measure=False)
    assert "not timed in the recorded sweep" in ex.report.value
    assert "failed" not in ex.report.value


def test_parse_whole():
    assert [B.parse_whole(x, "n") for x in ("4096", "4,096", " 4_096 ", "3e9", "2**20")] == [
        4096, 4096, 4096, 3 * 10 ** 9, 2 ** 20]
    for bad in ("", "x", "1.5", "inf", "nan"):
        with pytest.raises(ValueError, match="n must be a whole number"):
            B.parse_whole(bad, "n")
    for huge in ("1e400", "2**99999"):                  # whole numbers, but far too large
        with pytest.raises(ValueError, match="n must be at least 1, with at most 30 digits; "
                                             f"'{re.escape(huge)}' is too large"):
            B.parse_whole(huge, "n")
    with pytest.raises(ValueError, match="at most 10"):
        B.parse_whole("11", "n", 1, 10)


_TYPED = st.one_of(st.integers(-10, 2 ** 45).map(str), st.text(max_size=12),
                   st.floats(allow_nan=True, allow_infinity=True).map(repr),
                   st.sampled_from(["1e12", "2**70", "1,024", "0x10", "-0", "1e-3", " "]))


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(st.data())
def test_any_typed_value_gives_a_readout_or_one_message(data):
    """Whatever a learner types into any box, the explorer shows numbers, with one message
    when the entry was refused (the box then shows its last valid value again)."""
    ex = _EXPLORER_CACHE.get("score") or _EXPLORER_CACHE.setdefault(
        "score", score_memory_explorer(tied=False))
    tr = _EXPLORER_CACHE.get("traffic") or _EXPLORER_CACHE.setdefault(
        "traffic", traffic_explorer())
    defaults = {ex: {"t_query": "4,096", "t_key": "4,096", "batch": "1", "heads": "1"},
                tr: {"t": "4,096", "head_dim": "64", "block_q": "64", "block_k": "64"}}
    for explorer, names in ((ex, ("t_query", "t_key", "batch", "heads")),
                            (tr, ("t", "head_dim", "block_q", "block_k"))):
        name = data.draw(st.sampled_from(names))
        typed = data.draw(_TYPED)
        explorer.controls[name].value = typed
        msg = _message(explorer)
        assert "\n" not in msg and len(msg) < 400
        # taken, or refused with a message and the box back at a valid value: either way
        # the box holds a number and the plot shows it
        refused = explorer.controls[name].value != typed
        assert (msg != "") == refused and B.parse_whole(explorer.controls[name].value, name)
        assert explorer.image.layout.display is None
        assert bytes(explorer.image.value).startswith(PNG_MAGIC)
        explorer.controls[name].value = defaults[explorer][name]   # valid for the next one
        explorer.refresh()                            # (a refused entry's message stays
        assert _message(explorer) == ""               # until the next change)


_EXPLORER_CACHE = {}


@given(st.sampled_from([8, 16, 32, 64, 128, 256]), st.sampled_from([8, 16, 32, 64, 128, 256]),
       st.sampled_from([32, 64, 128, 256, 512, 1024, 2048]), st.sampled_from([1, 2, 4, 8, 16]),
       st.sampled_from([32, 64, 96, 128, 256]), st.sampled_from([1024, 4096, 16384]))
@settings(max_examples=60, deadline=None)
def test_every_tuning_setting_gives_a_report_or_a_launch_message(bq, bk, th, tm, d, n):
    ex = _EXPLORER_CACHE.get("tuning") or _EXPLORER_CACHE.setdefault(
        "tuning", tuning_explorer(measure=False))
    for name, value in (("block_q", bq), ("block_k", bk), ("threads", th), ("tm", tm),
                        ("head_dim", d), ("seq_len", n)):
        ex.controls[name].value = value
    msg = _message(ex)
    assert (msg.startswith("Cannot launch:") and ex.report.value == "") or (
        msg == "" and "occupancy" in ex.report.value), msg


def test_kv_cache_explorer_readout_plot_and_messages():
    from flashcourse.kv_cache import kv_cache_readout

    ex = kv_cache_explorer()
    assert "fc-kv-cache" in ex._dom_classes and _message(ex) == ""
    assert "per token of context" in ex.details.value
    assert ex.readout == kv_cache_readout("Llama-3-8B", 1, 2 ** 13, "fp16", "H200")
    assert _png_size(ex.image.value) == (2 * 640, 2 * 150)
    ex.controls["model"].value = "Llama-3-70B"
    ex.controls["batch"].value = 256
    ex.controls["log2_t_key"].value = 20                       # ~82 PiB: far past the GPU
    assert _message(ex) == "" and not ex.readout.fits
    assert ex.readout.cache_bytes == 256 * 80 * 2 * 2 ** 20 * 8 * 128 * 2
    with pytest.raises(ValueError, match="^log2_t_key must be"):
        kv_cache_explorer(log2_t_key="13")


@pytest.mark.parametrize("make", EXPLORERS)
def test_static_site_shows_a_still_picture(make, monkeypatch):
    """tools/build_site.py sets FLASHCOURSE_STATIC_SITE=1: no kernel, so plain HTML."""
    ex = make()
    live = ex._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in live
    monkeypatch.setenv("FLASHCOURSE_STATIC_SITE", "1")
    bundle = ex._repr_mimebundle_()
    assert set(bundle) == {"text/html", "text/plain"}
    page = bundle["text/html"]
    assert page.startswith(f'<div class="{ex.css_class}">') and "Settings: " in page
    assert "Run the notebook in JupyterLab" in page
    assert ('<img src="data:image/png;base64,' in page) == (ex.image is not None)
    assert "<script" not in page and "Traceback" not in page
