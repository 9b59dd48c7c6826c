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

import pytest

from flashcourse.configs import launch_problem
from flashcourse.limits import H200_LIMITS, get_preset
from flashcourse.results import load_sweep, recorded_regs
from flashcourse.widgets import tuning as T


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
    # the marks follow the other choices; the chosen values stay
    ex.controls["threads"].value = 2048
    assert _message(ex).startswith("Cannot launch: threads = 2,048")
    assert all("threads per block: 2,048 > 1,024" in x for x in _labels(ex, "tm").values())
    assert ex.controls["threads"].value == 2048 and ex.controls["tm"].value == 4
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


