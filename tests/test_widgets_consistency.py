"""Issue 26's browser walk (1280 / 1440 px): each widget shows one truth at a time.

- notebook 04's tile schedule refused Br > Tq and Bc > Tk although its sliders offer them:
  a block larger than its length is one ragged block (as in lab 03 and `tiled.forward`);
- during Play its plot title trailed the readout by seconds ('step 11 of 12, 16,640 B'
  beside 'Step 12 of 12 ... 17,792 B'): steps are now drawn in the background, coalesced,
  and the picture and the readout come from one state; the PNG carries the title it
  shows, so the test compares what was drawn with what was written;
- notebook 07's tuning menus offered combinations of which 62% cannot launch: each option
  that cannot launch with the other choices is marked '(cannot launch: why)' before it is
  picked, the reason from `flashcourse.configs.launch_problem` (limits.check_launch);
- notebook 01's slider said 1 while its box said 0 after an invalid entry: a refused entry
  puts the box back to its last valid value, so box, slider and readout agree, and the
  message says what was refused.

No browser here (tests/test_browser_widgets.py drives Play in JupyterLab).
"""

import html
import itertools
import re
import struct
import time

import pytest

from flashcourse.configs import launch_problem
from flashcourse.limits import H200_LIMITS, get_preset
from flashcourse.results import load_sweep, recorded_regs
from flashcourse.traffic import tiled_traffic
from flashcourse.widgets import readouts as W
from flashcourse.widgets import tuning as T
from flashcourse.widgets.score_memory import score_memory_explorer
from flashcourse.widgets.tile_schedule import tile_schedule
from flashcourse.widgets.traffic import traffic_explorer


def _message(ex) -> str:
    return html.unescape(re.sub("<[^>]+>", "", ex.message.value)).strip()


def png_title(data) -> str | None:
    """The "Title" text chunk of a PNG (the explorers write the figure's title there)."""
    data, i = bytes(data), 8
    while i + 8 <= len(data):
        (n,), kind = struct.unpack(">I", data[i:i + 4]), data[i + 4:i + 8]
        if kind == b"tEXt":
            key, _, text = data[i + 8:i + 8 + n].partition(b"\0")
            if key == b"Title":
                return text.decode("latin-1")
        i += 12 + n
    return None


# ---------------------------------------------------------------------------
# Tile schedule: blocks larger than T
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("tq,tk,br,bc,causal,order", [
    (20, 80, 32, 32, True, "fa2"),          # Br > Tq: one query block, three key blocks
    (96, 5, 32, 128, True, "fa1"),          # Bc > Tk, Tq > Tk: most rows see no key
    (1, 1, 128, 128, False, "fa2"),         # the sliders' ends: one 1 x 1 tile
    (7, 9, 128, 128, True, "fa1"),
])
def test_schedule_takes_blocks_larger_than_the_sequence(tq, tk, br, bc, causal, order):
    steps = W.schedule_steps(tq, tk, 4, br, bc, causal, order)
    tr, tc = -(-tq // br), -(-tk // bc)
    tiles = [s for s in steps if s.kind in ("tile", "skip")]
    assert len(tiles) == tr * tc
    model = tiled_traffic(tq, tk, 4, br, bc, causal=causal, loop_order=order)
    assert (steps[-1].read_bytes, steps[-1].write_bytes) == (model.read_bytes,
                                                             model.write_bytes)
    if br > tq:      # the one query block loads the Tq real rows, not Br
        assert all(b == tq for t, a, b, _ in (r for s in steps for r in s.reads) if t == "Q")


def test_schedule_explorer_shows_the_single_ragged_block():
    """The Br slider's end (128) with Tq = 96 said 'choose Br <= Tq'."""
    ex = tile_schedule()                                  # Tq = 96, Tk = 80, Br = Bc = 32
    ex.controls["block_q"].value = 128
    assert _message(ex) == "" and ex.errors == 0
    assert ex._picture.mesh.get_array().shape == (1, 3)   # one row of tiles: Tr = 1
    assert "Br = 128 &gt; Tq = 96: one ragged query block of 96 rows." in ex.status.value
    ex.controls["block_k"].value = 128
    assert _message(ex) == "" and ex._picture.mesh.get_array().shape == (1, 1)
    assert len(ex.steps) == 2 and ex.controls["step"].max == 2     # the tile, the store
    assert "one ragged key block of 80 rows" in ex.status.value
    assert ex.steps[-1].total_bytes == tiled_traffic(96, 80, 16, 128, 128,
                                                     causal=True).total_bytes
    assert W.ragged_blocks_note(96, 80, 32, 32) == ""


# ---------------------------------------------------------------------------
# Tile schedule: Play
# ---------------------------------------------------------------------------

def _step_of_readout(status_html: str):
    text = html.unescape(re.sub("<[^>]+>", " ", status_html))
    k, n = re.search(r"Step (\d+) of (\d+):", text).groups()
    total = re.search(r"total ([\d,]+) B", text).group(1)
    return int(k), int(n), int(total.replace(",", ""))


def _step_of_title(title: str):
    k, n, total = re.fullmatch(r"fa[12]: step (\d+) of (\d+), ([\d,]+) B moved so far",
                               title).groups()
    return int(k), int(n), int(total.replace(",", ""))


def test_play_title_and_readout_show_one_step_and_keep_up():
    """Steps arrive like Play's ticks (here 5x faster than one draw, as on a busy 2-core
    machine) while earlier ones are drawn. Every time the readout changes, the picture
    beside it (the title written into its PNG) shows the same step and bytes; the steps
    in between are skipped, not queued, so the display is at most about one draw behind
    Play when the last tick arrives. (Before: each tick was drawn in turn, the readout
    set a whole draw before its picture, and the lag grew by a draw minus a tick per step.)
    """
    ex = tile_schedule(block_q=16, block_k=16, causal=False)       # 6 x 5 tiles: 36 steps
    n = len(ex.steps)
    shown = []
    ex.status.observe(lambda change: shown.append((png_title(ex.image.value),
                                                   change["new"])), names="value")
    started = time.perf_counter()
    ex.controls["step"].value = 2
    assert ex.settle()
    draw_s = time.perf_counter() - started                        # one step's draw, here
    tick_s = draw_s / 5
    shown.clear()
    started = time.perf_counter()
    for k in range(3, n + 1):                                     # Play's ticks
        ex.controls["step"].value = k
        time.sleep(tick_s)
    due = started + (n - 2) * tick_s                              # when Play reached n
    assert ex.settle(60)
    behind_s = time.perf_counter() - due
    assert shown, "nothing was drawn"
    for title, status in shown:
        assert title is not None and _step_of_title(title) == _step_of_readout(status), (
            title, status)
    assert _step_of_title(shown[-1][0])[:2] == (n, n) and ex.shown_step == n
    assert _step_of_readout(ex.status.value)[0] == n
    assert png_title(ex.image.value) == ex._fig.get_suptitle()
    assert len(shown) <= n // 2, f"{len(shown)} of {n - 2} ticks drawn: not coalesced"
    assert behind_s < 3 * draw_s + 1.0, (behind_s, draw_s)
    assert _message(ex) == "" and ex.errors == 0


def test_a_step_recolours_the_figure_a_new_setting_builds_one():
    """A step recolours the figure built for the setting (same axes objects, no layout
    pass); a new setting builds a new one."""
    ex = tile_schedule()
    axes = list(ex._fig.axes)
    ex.controls["step"].value = 5
    assert ex.settle() and ex._fig.axes == axes and ex._fig.get_layout_engine() is None
    assert png_title(ex.image.value) == "fa2: step 5 of 12, 7,296 B moved so far"
    ex.controls["loop_order"].value = "fa1"
    assert ex._fig.axes != axes and len(ex._fig.axes) == 3
    assert png_title(ex.image.value).startswith("fa1: step 5 of 10, ")
    assert "Step 5 of 10" in ex.status.value


# ---------------------------------------------------------------------------
# Tuning menus: options that cannot launch are marked before they are picked
# ---------------------------------------------------------------------------

def _labels(ex, name):
    return {v: label for label, v in ex.controls[name].options}


def test_tuning_menus_mark_what_cannot_launch():
    ex = T.tuning_explorer(measure=False)                 # Br = Bc = 64, 256 threads, tm 4
    threads = _labels(ex, "threads")
    assert threads[2048] == "2048 (cannot launch: threads per block: 2,048 > 1,024)"
    assert threads[256] == "256" and threads[1024].startswith("1024 (cannot launch: ")
    assert _labels(ex, "tm")[16].startswith("16 (cannot launch: ")
    assert _message(ex) == "" and "occupancy" in ex.report.value
    # the marks follow the other choices; the chosen values stay. With 2,048 threads no
    # tm (nor Br, Bc, d) can launch: only the menu that holds the fix is marked
    ex.controls["threads"].value = 2048
    assert _message(ex).startswith("Cannot launch: threads = 2,048")
    assert ex.controls["threads"].value == 2048 and ex.controls["tm"].value == 4
    assert ex.controls["threads"].label.startswith("2048 (cannot launch: ")
    for name in ("block_q", "block_k", "tm", "head_dim"):
        assert not any("cannot" in x for x in _labels(ex, name).values()), name
    assert [v for v, x in _labels(ex, "threads").items() if "cannot" not in x] == [
        32, 64, 128, 256, 512]
    ex.controls["threads"].value = 128
    assert _message(ex) == "" and _labels(ex, "tm")[4] == "4"
    assert ex.controls["tm"].value == 4 and ex.controls["block_q"].value == 64
    # every menu offers at least one option that launches with the others
    for name in T.MARKED:
        assert any("cannot launch" not in x for x in _labels(ex, name).values()), name
    # a mark is made before the pick: picking an unmarked option gives a report
    for v, label in _labels(ex, "block_k").items():
        ex.controls["block_k"].value = v
        assert ("cannot launch" in label) == _message(ex).startswith("Cannot launch:"), v
    ex.controls["block_k"].value = 64
    assert _message(ex) == ""


def test_tuning_relabel_is_one_refresh_and_keeps_the_value():
    ex = T.tuning_explorer(measure=False)
    updates = []
    real = ex.update
    ex.update = lambda: (updates.append(1), real())[1]
    ex.controls["threads"].value = 512                    # relabels the other menus
    assert len(updates) == 1 and ex.controls["threads"].value == 512
    assert ex.controls["threads"].label == "512"


@pytest.mark.parametrize("limits", [H200_LIMITS, get_preset("T4")])
def test_a_mark_appears_exactly_where_the_report_refuses(limits):
    """Over every Br, Bc, threads, tm at d = 64 and 256 (and N = 4096): the option is
    marked iff the report refuses the setting, with the registers the sweep recorded."""
    doc = load_sweep()
    refused = 0
    grid = list(itertools.product(T.BLOCKS, T.BLOCKS, T.THREADS, T.TMS, (64, 256)))
    for bq, bk, th, tm, d in grid:
        regs = recorded_regs(d, bq, bk, th, tm, doc) if doc else None
        why = launch_problem(bq, bk, th, tm, d, limits, regs_per_thread=regs)
        try:
            T.tuning_report(bq, bk, th, tm, d, 4096, limits=limits, measure=False, doc=doc)
        except ValueError:
            assert why, (bq, bk, th, tm, d)
            refused += 1
            continue
        assert why is None, (bq, bk, th, tm, d, why)
    if limits is H200_LIMITS:                       # the 62%: why marks are needed
        assert 0.55 < refused / len(grid) < 0.7, refused / len(grid)


def test_launch_problem_names_the_limit_in_a_few_words():
    assert launch_problem(64, 64, 2048, 4, 64, H200_LIMITS) == \
        "threads per block: 2,048 > 1,024"
    assert launch_problem(64, 64, 256, 16, 64, H200_LIMITS) == \
        "threads/(block_q/tm) = 64 column groups must be a power of two <= 32"
    why = launch_problem(256, 256, 256, 8, 256, H200_LIMITS)
    assert re.fullmatch(r"shared memory per block \(opt-in\): [\d,]+ > 232,448 bytes", why)
    assert launch_problem(64, 64, 256, 4, 64, H200_LIMITS, regs_per_thread=300) == \
        "registers per thread: 300 > 255"
    assert launch_problem(64, 64, 256, 4, 64, H200_LIMITS) is None


# ---------------------------------------------------------------------------
# Free-entry boxes: one value everywhere after an invalid entry
# ---------------------------------------------------------------------------

def test_score_box_and_slider_agree_after_an_invalid_entry():
    """Notebook 01: Home (Tq = 1), then 0 typed: the slider said 1, the box 0."""
    ex = score_memory_explorer(t_query=4096, dtype="fp16", gpu="H200")
    c = ex.controls
    c["t_query_slider"].value = 1                                 # Home key
    assert c["t_query"].value == "1" and ex.headline.value.endswith(": 2 B")
    for typed, why in (("0", "must be at least 1, got 0"),
                       ("abc", "must be a whole number, got 'abc'"),
                       ("1.5", "must be a whole number, got '1.5'"),
                       (f"{2 ** 41}", f"must be at most 1,099,511,627,776, got {2 ** 41:,}")):
        c["t_query"].value = typed
        assert c["t_query"].value == "1" and c["t_query_slider"].value == 1, typed
        assert c["t_key"].value == "1"                           # tied: Tk = Tq = 1
        assert ex.readout.t_query == 1 and ex.headline.value.endswith(": 2 B"), typed
        assert ex.image.layout.display is None                    # the plot of Tq = 1
        assert _message(ex) == (f"Cannot show this setting: Tq (query positions) {why}. "
                                "The box shows 1 again (the last valid value).")
    c["dtype"].value = "fp32"                                     # the next change: gone
    assert _message(ex) == "" and ex.headline.value.endswith(": 4 B")
    c["t_query"].value = "3,000"                                  # a valid entry is taken
    assert c["t_query_slider"].value == 2048 and ex.readout.t_query == 3000
    assert _message(ex) == ""


def test_traffic_boxes_go_back_to_the_last_valid_value():
    ex = traffic_explorer()
    c = ex.controls
    c["t"].value = "1000"
    c["t"].value = "-5"
    assert c["t"].value == "1,000" and c["t_slider"].value == 512
    assert ex.readout.tiled == tiled_traffic(1000, 1000, 64, 64, 64)
    assert "T (sequence length) must be at least 1, got -5" in _message(ex)
    c["head_dim"].value = "0"
    assert c["head_dim"].value == "64" and "d (head dimension)" in _message(ex)
    assert "T (sequence length)" not in _message(ex)              # said once, not again
    c["block_q"].value = "96"
    assert _message(ex) == "" and ex.readout.tiled == tiled_traffic(1000, 1000, 64, 96, 64)


@pytest.mark.parametrize("make,kwargs,words", [
    (score_memory_explorer, dict(t_query=0), "t_query must be between 1 and"),
    (score_memory_explorer, dict(t_key=2 ** 41), "t_key must be between 1 and"),
    (score_memory_explorer, dict(batch=0), "batch must be between 1 and"),
    (traffic_explorer, dict(t=0), "t must be between 1 and"),
    (traffic_explorer, dict(head_dim=5000), "head_dim must be between 1 and 4,096"),
])
def test_a_starting_value_out_of_range_is_a_clear_error(make, kwargs, words):
    """A box started at 0 showed 0 beside a slider at 1: refused, naming the argument."""
    with pytest.raises(ValueError, match=f"^{words}"):
        make(**kwargs)
