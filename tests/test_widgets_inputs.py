"""Wrong, negative and huge values given to the explorers (issue 50, item 7).

Constructor arguments: a value an explorer cannot take is a ValueError whose message
starts with the argument's name (the convention of every explorer,
tests/test_widgets.py::test_a_string_size_gives_a_clear_error_naming_it), never an
AttributeError, a numpy error or Python's 4,300-digit message. Boxes a learner types
into: a refused entry is one message naming the box and its range, the box goes back to
its last valid value, and nothing raises. No browser: the explorers are driven from Python.
"""

import html
import inspect
import re
import time

import numpy as np
import pytest

from flashcourse.limits import PRESETS
from flashcourse.widgets import _base as B
from flashcourse.widgets.backward import BackwardExplorer
from flashcourse.widgets.kv_cache import KVCacheExplorer
from flashcourse.widgets.score_memory import ScoreMemoryExplorer, score_memory_explorer
from flashcourse.widgets.tile_schedule import TileSchedule
from flashcourse.widgets.traffic import TrafficExplorer, traffic_explorer
from flashcourse.widgets.tuning import (MAX_CPU_SEQ_LEN, TuningExplorer, tuning_explorer,
                                        tuning_report)

HUGE = 9999 ** 4096                      # 16,384 digits: Python will not write it out
DEEP_ERRORS = ("Exceeds the limit", "int_max_str_digits", "truth value", "AttributeError",
               "negative dimensions", "Traceback")


def _message(ex) -> str:
    return html.unescape(re.sub("<[^>]+>", "", ex.message.value)).strip()


def _clear(text: str) -> bool:
    return "\n" not in text and len(text) < 400 and not any(x in text for x in DEEP_ERRORS)


# ---------------------------------------------------------------------------
# The tuning explorer's limits, measure and cpu_seq_len
# ---------------------------------------------------------------------------

def test_tuning_explorer_takes_a_gpu_name_as_limits():
    """limits="H200" showed "AttributeError: 'str' object has no attribute ..."."""
    ex = tuning_explorer(measure=False, limits="H200")
    assert _message(ex) == "" and ex.limits is PRESETS["H200"]
    assert "(limits: H200 (preset))" in ex.report.value and "occupancy" in ex.report.value
    t4 = tuning_explorer(measure=False, limits="T4", threads=1024, block_q=128, tm=8)
    assert "(limits: T4 (preset))" in t4.report.value or _message(t4).startswith(
        "Cannot launch:")


@pytest.mark.parametrize("limits", ["H300", "h200", 3, 2.5, True, ["H200"], {"name": "x"},
                                    pytest.param(HUGE, id="9999**4096"), np.array([1, 2])])
def test_tuning_explorer_refuses_other_limits_naming_them(limits):
    with pytest.raises(ValueError) as info:
        tuning_explorer(measure=False, limits=limits)
    text = str(info.value)
    assert text.startswith("limits must be a GPU name ('T4', ") and "'H200'" in text
    assert "DeviceLimits" in text and _clear(text)


def test_tuning_report_takes_the_same_limits():
    a = tuning_report(64, 64, 256, 4, 64, 4096, measure=False, limits="H100 SXM")
    b = tuning_report(64, 64, 256, 4, 64, 4096, measure=False, limits=PRESETS["H100 SXM"])
    assert a == b and "H100 SXM (preset)" in a
    with pytest.raises(ValueError, match="^limits must be a GPU name"):
        tuning_report(64, 64, 256, 4, 64, 4096, measure=False, limits="nope")


@pytest.mark.parametrize("value,words", [
    (-1, "between 1 and 2,048, got -1"), (0, "between 1 and 2,048, got 0"),
    (2.5, "a whole number (an int) between 1 and 2,048, got 2.5 (a float)"),
    ("256", "a whole number (an int) between 1 and 2,048, got '256' (a str)"),
    (None, "got None (a NoneType)"), (True, "got True (a bool)"),
    (MAX_CPU_SEQ_LEN + 1, "between 1 and 2,048, got 2,049"),
    (10 ** 30, "got a number of about 31 digits"),
    pytest.param(HUGE, "got a number of about 16,384 digits", id="9999**4096"),
])
def test_cpu_seq_len_is_checked_when_the_explorer_is_built(value, words):
    """cpu_seq_len=-1 put "timing failed: ValueError: negative dimensions are not allowed"
    (numpy's) in the report; a float a TypeError; 10**30 "Maximum allowed dimension"."""
    with pytest.raises(ValueError) as info:
        TuningExplorer(measure=True, cpu_seq_len=value)
    assert str(info.value).startswith("cpu_seq_len must be") and words in str(info.value)
    assert _clear(str(info.value))
    with pytest.raises(ValueError, match="^cpu_seq_len must be"):
        tuning_report(64, 64, 256, 4, 64, 4096, measure=True, cpu_seq_len=value,
                      limits="H200")


@pytest.mark.parametrize("value", ["no", 0, 1, None, 2.5])
def test_measure_must_be_a_bool(value):
    """measure="no" was taken as True (bool("no")): the explorer timed every setting."""
    with pytest.raises(ValueError, match="^measure must be True or False, got "):
        tuning_explorer(measure=value)


# ---------------------------------------------------------------------------
# Every explorer, every constructor argument
# ---------------------------------------------------------------------------

EXPLORER_CLASSES = (BackwardExplorer, KVCacheExplorer, ScoreMemoryExplorer, TileSchedule,
                    TrafficExplorer, TuningExplorer)
WRONG = (-1, 0, -(2 ** 70), 2.5, float("nan"), None, HUGE, -HUGE, "x", True, [64],
         np.array([1, 2]), np.array([64]))
VALID_ODDITIES = {("TuningExplorer", "limits")}     # None is its default: this GPU's
FLAGS = ("causal", "tied", "measure")                # True is a valid value of these


def _arguments(cls):
    return [p for p in inspect.signature(cls.__init__).parameters if p != "self"]


@pytest.mark.parametrize("cls", EXPLORER_CLASSES, ids=lambda c: c.__name__)
def test_every_constructor_argument_is_refused_with_its_name(cls):
    """A sweep: a huge int failed with Python's 4,300-digit message (a repr in the error
    message), an array with numpy's "truth value ... is ambiguous", limits with an
    AttributeError. Each is now a ValueError that starts with the argument's name."""
    for name in _arguments(cls):
        for value in WRONG:
            if (value is None and (cls.__name__, name) in VALID_ODDITIES) or (
                    value is True and name in FLAGS):
                continue
            kwargs = {name: value}
            if cls is TuningExplorer and name != "measure":
                kwargs["measure"] = False
            try:
                cls(**kwargs)
            except ValueError as exc:
                text = str(exc)
                assert text.startswith(f"{name} must be"), (name, value, text)
                assert _clear(text), (name, text)
            else:
                pytest.fail(f"{cls.__name__}({name}={B.describe(value)}) was accepted")


def test_describe_never_writes_a_huge_number():
    assert B.describe(HUGE) == "a number of about 16,384 digits"
    assert B.describe(-(10 ** 400)) == "a negative number of about 401 digits"
    assert B.describe(10 ** 30 - 1) == "999,999,999,999,999,999,999,999,999,999"
    from fractions import Fraction
    assert B.describe(Fraction(HUGE)) == "a Fraction too large to show (a Fraction)"
    assert B.describe("x" * 500).endswith("xxx' (a str)") and len(B.describe("x" * 500)) < 80


# ---------------------------------------------------------------------------
# Huge numbers typed into a box
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("typed,size", [
    ("9999**4096", "about 16,384 digits"), ("9" * 5000, "about 5,000 digits"),
    ("1e400", "about 401 digits"), ("2**" + "9" * 5000, "more than 10**15 digits"),
    ("1e99999999999999999999", "more than 10**15 digits"),
    ("9" * 100_000, "about 100,000 digits"),   # a pattern that splits the digits every way
])                                            # is quadratic: 0.2 s at 5,000, 80 s here
def test_parse_whole_refuses_huge_numbers_by_their_size_quickly(typed, size):
    """'9999**4096' gave Python's "Exceeds the limit (4300 digits) for integer string
    conversion"; '2**' + 5,000 nines would not be built at all. The time is this process's
    CPU time (a loaded machine stretches the wall clock), and the bound is loose: building
    the numbers would take minutes or never end, refusing them takes milliseconds."""
    start = time.process_time()
    with pytest.raises(ValueError) as info:
        B.parse_whole(typed, "Tq (query positions)", 1, 2 ** 40)
    assert time.process_time() - start < 2.0
    text = str(info.value)
    assert text.startswith("Tq (query positions) must be between 1 and 1,099,511,627,776; ")
    assert f"is too large: a number of {size}" in text and _clear(text)
    if "**" not in typed:                                     # no negative powers typed
        with pytest.raises(ValueError, match=f"is too small \\(negative\\): .*{re.escape(size)}"):
            B.parse_whole("-" + typed, "n", 1, 10)


def test_parse_whole_still_takes_the_forms_it_took():
    assert [B.parse_whole(x, "n", 1, None) for x in (
        "4096", "+4096", "4,096", "3e9", "1.5e3", "2**20", "2 ** 10", "1**99999", "7**0",
        "0" * 5000 + "5", "9" * 30)] == [
        4096, 4096, 4096, 3 * 10 ** 9, 1500, 2 ** 20, 1024, 1, 1, 5, 10 ** 30 - 1]
    with pytest.raises(ValueError, match="must be at most 10, got 1,180,591,620,717,411,"):
        B.parse_whole(str(2 ** 70), "n", 1, 10)
    with pytest.raises(ValueError, match="must be between 1 and 10; '2\\*\\*100' is too large: "
                                         "a number of about 31 digits"):
        B.parse_whole("2**100", "n", 1, 10)


HUGE_TYPED = ["9999**4096", "9" * 5000, "-" + "9" * 5000, "1e400", "2**99999"]


@pytest.mark.parametrize("typed", HUGE_TYPED)
def test_a_huge_number_typed_into_any_box_is_one_message(typed):
    """Every free-entry box of the score-memory and traffic explorers: the message names
    the box and its range and says the value is too large (or too small), the box shows
    its last valid value again, and the explorer still shows that setting. After the
    first form, a valid change and back clears the message (two redraws a box: once is
    enough to show it, the other forms leave the explorer in the same state)."""
    score = score_memory_explorer(tied=False)
    traffic = traffic_explorer()
    boxes = {score: {"t_query": ("Tq (query positions)", "4,096"),
                     "t_key": ("Tk (key positions)", "4,096"),
                     "batch": ("batch", "1"), "heads": ("heads", "1")},
             traffic: {"t": ("T (sequence length)", "4,096"),
                       "head_dim": ("d (head dimension)", "64"),
                       "block_q": ("block_q (Br)", "64"), "block_k": ("block_k (Bc)", "64")}}
    for ex, names in boxes.items():
        for name, (what, shown) in names.items():
            errors = ex.errors
            ex.controls[name].value = typed
            msg = _message(ex)
            assert msg.startswith(f"Cannot show this setting: {what} must be between 1 and ")
            assert ("too small (negative)" if typed[0] == "-" else "is too large") in msg
            assert msg.endswith(f"The box shows {shown} again (the last valid value).")
            assert _clear(msg) and ex.errors == errors + 1
            assert ex.controls[name].value == shown and ex.image.layout.display is None
            if typed != HUGE_TYPED[0]:
                continue
            ex.controls[name].value = shown.replace(",", "") + "0"    # a valid change: the
            ex.controls[name].value = shown                          # message goes
            assert _message(ex) == ""
