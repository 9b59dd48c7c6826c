"""The paged-pool explorer of notebook 11b, the counts behind it (`paged_cache.page_map`,
`slot_usage`) and the pictures of the pool, the block tables and the work list's schedule.

Counts checked by hand on small cases and against the cache's own state (every page in
use exactly once in the tables or on the free list); extreme settings (one token, one
page per request, the largest pool, a prefix as long as a request, a pool that is too
small) give a readout or one message, never an exception.
"""

import html
import re

import numpy as np
import pytest

from flashcourse import paged_cache as pc
from flashcourse.cuda.decoding import paged
from flashcourse.widgets.paged_pool import (MAX_REQUESTS, MAX_TOKENS, PagedPoolExplorer,
                                            fill_pool, paged_pool_explorer, parse_lengths,
                                            pool_readout)


def _message(ex) -> str:
    return html.unescape(re.sub("<[^>]+>", "", ex.message.value)).strip()


# ---------------------------------------------------------------------------- the counts
def test_slot_usage_by_hand():
    """Lengths 20, 16, 1 in pages of 16: 2 + 1 + 1 = 4 pages = 64 slots for 37 tokens,
    27 empty (12 + 0 + 15); a contiguous 64-slot buffer each: 192 reserved, 155 unused."""
    r = pool_readout("20, 16, 1", 16, 64, 0, 256)
    u = r.usage
    assert (u.tokens, u.stored, u.pages, u.paged_slots, u.paged_wasted) == (37, 37, 4, 64, 27)
    assert (u.contiguous_slots, u.contiguous_wasted, u.shared_pages) == (192, 155, 0)
    assert sorted(r.fill[r.owner != pc.FREE].tolist()) == [1, 4, 16, 16]


def test_shared_prefix_by_hand():
    """A prefix of 40 tokens (pages of 16: 2 full pages + 8 tokens) shared by 3 requests
    of 50: the 2 full pages are held once; each fork copies the third page on its first
    write. Pages: 2 shared + 3 x 2 own (the third and the fourth) = 8."""
    r = pool_readout("50, 50, 50", 16, 64, 40, 256)
    u = r.usage
    assert u.shared_pages == 2 and u.pages == 8
    assert u.shared_saving == 2 * 32 and u.stored == 150 - 64
    assert (r.owner == pc.SHARED).sum() == 2
    assert "copied on a request's first write" in " ".join(r.lines)
    # every sequence still reads its own 50 tokens, the prefix first
    for s in range(3):
        k, _ = r.cache.gather(s)
        assert k.shape == (1, 50, 1)


def test_page_map_agrees_with_the_cache_state():
    rng = np.random.default_rng(4)
    for _ in range(20):
        lens = rng.integers(1, 300, rng.integers(1, MAX_REQUESTS + 1)).tolist()
        ps = int(rng.choice(pc.PAGE_SIZES))
        prefix = int(rng.integers(0, min(lens) + 1))
        r = pool_readout(", ".join(map(str, lens)), ps, 512, prefix, 65536)
        c = r.cache
        used = np.flatnonzero(r.owner != pc.FREE)
        assert sorted(set(used.tolist()) | set(c.free)) == list(range(c.refs.size))
        assert not set(used.tolist()) & set(c.free)
        assert np.array_equal(r.owner == pc.SHARED, c.refs > 1)
        assert r.usage.stored == r.fill.sum() <= r.usage.tokens == sum(lens)
        assert 0 <= r.usage.paged_wasted <= len(lens) * (ps - 1)


def test_requests_grow_together_so_their_pages_interleave():
    c = fill_pool([64, 64], 16, 64, 0, 8)
    assert c.block_table[0, :4].tolist() == [0, 2, 4, 6]
    assert c.block_table[1, :4].tolist() == [1, 3, 5, 7]


@pytest.mark.parametrize("args", [
    ("1", 16, 1, 0, 16),                       # one token, one page, the smallest pool
    ("65536", 256, MAX_TOKENS, 0, MAX_TOKENS),  # the largest request fills the pool
    ("30, 30", 16, 64, 30, 64),                # prefix as long as every request
    (", ".join(["3"] * MAX_REQUESTS), 256, 3, 3, 256),
])
def test_extreme_settings_give_a_readout(args):
    r = pool_readout(*args)
    assert len(r.lines) >= 5 and r.usage.pages <= r.cache.refs.size


@pytest.mark.parametrize("args,name", [
    (("",), "lengths"), (("7, x",), "lengths"), (("0",), "lengths"),
    ((", ".join(["1"] * (MAX_REQUESTS + 1)),), "lengths"), ((700,), "lengths"),
    (("100", 48), "page_size"), (("100", 16, 50), "max_len"),
    (("100, 20", 16, 128, 21), "prefix"), (("100", 16, 128, 0, 8), "pool_tokens"),
    (("1000, 1000", 16, 1024, 0, 1024), "pool_tokens"),       # the pool runs out
])
def test_invalid_settings_are_one_error_naming_them(args, name):
    with pytest.raises(ValueError, match=f"^{name}"):
        pool_readout(*args)


def test_parse_lengths():
    assert parse_lengths(" 700,130 ;1500  45") == [700, 130, 1500, 45]
    with pytest.raises(ValueError, match="^lengths"):
        parse_lengths(["700"])


# ---------------------------------------------------------------------------- the widget
def test_explorer_readout_plot_and_messages():
    ex = paged_pool_explorer()
    assert "fc-paged-pool" in ex._dom_classes and _message(ex) == "" and ex.errors == 0
    assert ex.readout.lines == pool_readout().lines
    assert "never written" in ex.details.value and "ends of last pages" in ex.details.value
    ex.controls["page_size"].value = 256
    assert ex.readout.cache.page_size == 256 and _message(ex) == ""
    ex.controls["lengths"].value = "5000, 5000"                    # more than max_len
    assert _message(ex).startswith("Cannot show this setting: max_len must be at least")
    assert ex.details.value == "" and ex.image.layout.display == "none"
    ex.controls["lengths"].value = "300, 200"
    assert _message(ex) == "" and ex.image.layout.display is None
    ex.controls["prefix"].text.value = "250"                       # longer than request 1
    assert "prefix must be at most the shortest request" in _message(ex)
    ex.controls["prefix"].text.value = "100"
    assert _message(ex) == "" and ex.readout.usage.shared_pages == 0   # 100 < 256: a copy
    ex.controls["prefix"].text.value = "lots"
    assert "prefix must be a whole number" in _message(ex) and ex.prefix.value == 100
    ex.controls["pool_tokens"].text.value = "256"                   # one page of 256
    assert _message(ex).startswith("Cannot show this setting: pool_tokens must hold")


@pytest.mark.parametrize("kwargs,name", [
    ({"lengths": [700]}, "lengths"), ({"lengths": "x"}, "lengths"),
    ({"page_size": 8}, "page_size"), ({"max_len": 0}, "max_len"),
    ({"prefix": -1}, "prefix"), ({"prefix": 2.5}, "prefix"),
    ({"pool_tokens": 2 ** 40}, "pool_tokens"), ({"pool_tokens": "4096"}, "pool_tokens"),
])
def test_constructor_refuses_values_not_on_offer(kwargs, name):
    with pytest.raises(ValueError, match=f"^{name}"):
        PagedPoolExplorer(**kwargs)


# ---------------------------------------------------------------------------- the pictures
def _readable(fig):
    from flashcourse.plots import style
    assert style.width_in(fig) <= style.MAX_WIDTH_IN
    assert style.smallest_text(fig)[0] >= style.MIN_FONT_PT


def test_explorer_picture_is_readable_and_shows_every_page():
    from flashcourse.plots import paged as PP
    from flashcourse.plots import style
    ex = paged_pool_explorer(prefix=40)
    assert ex._plot_px[0] <= style.MAX_WIDTH_IN * 100
    assert style.smallest_text(ex._fig)[0] >= style.MIN_FONT_PT
    img, cols = PP.pool_image(ex.readout.owner, ex.readout.fill, 16)
    assert img.shape[1] == cols * PP.SUB and img.shape[0] * cols >= ex.readout.owner.size
    shared = PP._rgb(PP.SHARED_COLOUR)
    first = int(np.flatnonzero(ex.readout.owner == pc.SHARED)[0])
    r, c = divmod(first, cols)
    assert np.allclose(img[r, c * PP.SUB], shared)                # a shared page is grey


def test_notebook_pictures_are_readable_and_check_their_arguments():
    import matplotlib.pyplot as plt

    from flashcourse.plots import paged as PP
    c = fill_pool([40, 40, 9], 16, 64, 20, 16)
    fig, axes = plt.subplots(2, 1, figsize=(8, 4.5))
    try:
        PP.draw_block_tables(axes[0], c.block_table, c.seq_lens, 16, c.refs)
        PP.draw_contiguous(axes[1], [40, 40, 9], 64, 16)
        fig.tight_layout()
        _readable(fig)
    finally:
        plt.close(fig)
    lens = [3000, 9000, 1200, 20000, 500]
    sched = paged.simulated_schedule(np.array(lens), 64, 400, 8, 1, 1, 8)
    fig, axes = plt.subplots(2, 1, figsize=(7, 5))
    try:
        PP.draw_schedule(axes[0], sched, 4, 2)
        PP.draw_busy_slots(axes[1], [sched], ["target 8"], 8)
        fig.tight_layout()
        _readable(fig)
    finally:
        plt.close(fig)
    fig, ax = plt.subplots()
    try:
        with pytest.raises(ValueError, match="^owner and fill"):
            PP.draw_pool(ax, [0, 1], [3], 16)
        with pytest.raises(ValueError, match="^schedule must"):
            PP.draw_schedule(ax, [], 4, 2)
        with pytest.raises(ValueError, match="^schedules and labels"):
            PP.draw_busy_slots(ax, [sched], [], 8)
        with pytest.raises(ValueError, match="^lengths must"):
            PP.draw_contiguous(ax, [], 64, 16)
    finally:
        plt.close(fig)


def test_busy_slots_counts_the_blocks_running():
    from flashcourse.plots.paged import busy_slots
    sched = [(0, 0, 10, 0), (1, 0, 4, 1), (1, 4, 6, 1)]
    assert busy_slots(sched, [0, 3, 4, 5, 6, 9, 10]).tolist() == [2, 2, 2, 2, 1, 1, 0]
