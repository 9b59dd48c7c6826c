"""The paged-pool explorer: requests of chosen lengths in one pool of pages (notebook 11b).

    from flashcourse.widgets.paged_pool import paged_pool_explorer
    paged_pool_explorer()                    # last line of a cell

Controls: the requests' lengths (text, separated by commas), the page size (a slider over
`paged_cache.PAGE_SIZES`), the longest length a contiguous allocation must reserve
(max_len), a prompt prefix shared by every request, and the pool's size in token slots.
`pool_readout` (pure, tested) fills a `paged_cache.PagedKVCache` as a server would: the
first request writes the prefix, the others `fork` it (its whole pages shared, the partly
filled last one copied on write when they append), then each appends the rest of its
tokens. The picture shows the pool page by page, coloured by owner (shared pages dark,
free ones light, the empty end of each last page pale), and each request against a
contiguous allocation of max_len slots; the readout counts the wasted slots of both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .. import paged_cache as pc
from ..memory import format_bytes
from ..plots.paged import draw_contiguous, draw_pool
from ._base import (LABEL_STYLE, CountBox, Explorer, check_choice, check_int_arg, describe,
                    html_box, lines_html, parse_whole, row)

MAX_REQUESTS = 12
MAX_TOKENS = 65536                    # the largest max_len, and the largest pool
TABLE_ENTRY_BYTES = 4                 # int32 block-table entries


def parse_lengths(text) -> list:
    """'700, 130, 1500' -> [700, 130, 1500]: 1 to MAX_REQUESTS whole numbers separated by
    commas (or spaces); ValueError naming `lengths` for anything else."""
    if not isinstance(text, str):
        raise ValueError(f"lengths must be a text of whole numbers separated by commas, "
                         f"such as '700, 130, 1500', got {describe(text)}")
    parts = [p for p in re.split(r"[,;\s]+", text.strip()) if p]
    if not parts:
        raise ValueError("lengths must hold at least one request length, got an empty text")
    if len(parts) > MAX_REQUESTS:
        raise ValueError(f"lengths must hold at most {MAX_REQUESTS} requests, got "
                         f"{len(parts)}")
    return [parse_whole(p, "lengths (each request's tokens)", 1, MAX_TOKENS) for p in parts]


@dataclass(frozen=True)
class PoolReadout:
    """One setting of the explorer: the filled cache, its usage and the lines shown."""

    lengths: tuple
    prefix: int
    cache: pc.PagedKVCache
    usage: pc.SlotUsage
    owner: np.ndarray
    fill: np.ndarray
    lines: tuple


def fill_pool(lengths, page_size, max_len, prefix, num_pages) -> pc.PagedKVCache:
    """A PagedKVCache (one KV head, d = 1) holding requests of `lengths`: request 0 writes
    the first `prefix` tokens and the others fork them; then the requests grow together,
    as in decoding, each appending up to a page of tokens per round (so their pages
    interleave in the pool; a fork's first append copies the shared last page).
    MemoryError when the pool runs out. The sizes as `pool_readout` takes them (lengths a
    list of whole numbers >= 0); an error naming the argument otherwise."""
    page_size = pc.check_page_size(page_size)
    if not isinstance(lengths, (list, tuple)) or not lengths:
        raise TypeError(f"lengths must be a non-empty list of whole numbers, got {lengths!r}")
    lengths = [check_int_arg(n, "lengths", 0, MAX_TOKENS) for n in lengths]
    max_len = check_int_arg(max_len, "max_len", max(lengths), MAX_TOKENS)
    prefix = check_int_arg(prefix, "prefix", 0, max_len)
    num_pages = check_int_arg(num_pages, "num_pages", 1, MAX_TOKENS)
    b = len(lengths)
    cache = pc.PagedKVCache(num_pages, 1, page_size, 1, b, pc.pages_for(max_len, page_size),
                            dtype=np.float32)
    if prefix:
        cache.append(0, *(np.zeros((1, prefix, 1), np.float32),) * 2)
        for s in range(1, b):
            cache.fork(0, s)
    while True:
        grew = False
        for s, n in enumerate(lengths):
            have = int(cache.seq_lens[s])
            step = min(n - have, page_size - have % page_size)   # up to the page's end
            if step > 0:
                cache.append(s, *(np.zeros((1, step, 1), np.float32),) * 2)
                grew = True
        if not grew:
            return cache


def pool_readout(lengths="700, 130, 1500, 45, 320", page_size=16, max_len=2048, prefix=0,
                 pool_tokens=4096) -> PoolReadout:
    """The pool after the requests of `lengths` (a text, see `parse_lengths`) arrived,
    pages of `page_size` tokens, `pool_tokens` slots in all (whole pages), the first
    `prefix` tokens shared; compared with a contiguous allocation of max_len slots per
    request."""
    lens = parse_lengths(lengths)
    page_size = check_choice(page_size, "page_size", list(pc.PAGE_SIZES))
    max_len = check_int_arg(max_len, "max_len", 1, MAX_TOKENS)
    prefix = check_int_arg(prefix, "prefix", 0, MAX_TOKENS)
    pool_tokens = check_int_arg(pool_tokens, "pool_tokens", page_size, MAX_TOKENS)
    if max(lens) > max_len:
        raise ValueError(f"max_len must be at least the longest request ({max(lens):,} "
                         f"tokens), got {max_len:,}")
    if prefix > min(lens):
        raise ValueError(f"prefix must be at most the shortest request ({min(lens):,} "
                         f"tokens): every request starts with it, got {prefix:,}")
    num_pages = pool_tokens // page_size
    try:
        cache = fill_pool(lens, page_size, max_len, prefix, num_pages)
    except MemoryError:
        raise ValueError(
            f"pool_tokens must hold every request: {pool_tokens:,} slots make {num_pages} "
            f"pages of {page_size}, and these requests need more (the pool is full)"
        ) from None
    u = pc.slot_usage(cache.block_table, cache.seq_lens, page_size, num_pages, max_len)
    owner, fill = pc.page_map(cache.block_table, cache.seq_lens, page_size, num_pages)
    fits = pool_tokens // max_len
    lines = [
        f"{u.requests} requests, {u.tokens:,} tokens (lengths {', '.join(map(str, lens))})",
        f"contiguous, max_len = {max_len:,} slots each: {u.contiguous_slots:,} slots "
        f"reserved, {u.contiguous_wasted:,} never written "
        f"({u.contiguous_wasted / u.contiguous_slots:.0%}); a pool of {pool_tokens:,} "
        f"slots holds {fits} such request{'s' if fits != 1 else ''}",
        f"paged, pages of {page_size}: {u.pages} pages = {u.paged_slots:,} slots, "
        f"{u.paged_wasted:,} empty at the ends of last pages "
        f"({u.paged_wasted / u.paged_slots:.1%}; at most {page_size - 1} per request)",
        f"pool: {u.pages} of {num_pages} pages in use, {len(cache.free)} free",
        f"block tables: {u.requests} x {cache.block_table.shape[1]} entries x "
        f"{TABLE_ENTRY_BYTES} B = {format_bytes(cache.block_table.nbytes)}",
    ]
    if prefix:
        copied = (f" (its last page, {prefix % page_size} of {page_size} slots filled, is "
                  f"copied on a request's first write)" if prefix % page_size else "")
        lines.insert(3, f"shared prefix of {prefix:,} tokens: {u.shared_pages} pages held "
                        f"once for {u.requests} requests, {u.shared_saving:,} slots not "
                        f"repeated{copied}")
    return PoolReadout(tuple(lens), prefix, cache, u, owner, fill, tuple(lines))


class PagedPoolExplorer(Explorer):
    """The paged-pool explorer (a VBox). Controls are in `.controls`."""

    css_class = "fc-paged-pool"
    blanked = ("details",)

    def __init__(self, lengths="700, 130, 1500, 45, 320", page_size=16, max_len=2048,
                 prefix=0, pool_tokens=4096):
        import ipywidgets as w

        pool_readout(lengths, page_size, max_len, prefix, pool_tokens)   # check them all
        self.lengths = w.Text(value=lengths, description="lengths (tokens)",
                              continuous_update=False, style=LABEL_STYLE,
                              layout=w.Layout(width="380px"))
        self.page_size = w.SelectionSlider(
            options=list(pc.PAGE_SIZES), value=page_size, description="page size",
            continuous_update=False, style=LABEL_STYLE, layout=w.Layout(width="300px"))
        self.page_size.add_class("fc-slider-page")
        self.max_len = CountBox("max_len", max_len, "max_len", "max_len", lo=1,
                                hi=MAX_TOKENS)
        self.prefix = CountBox("shared prefix", prefix, "prefix", "prefix", lo=0,
                               hi=MAX_TOKENS)
        self.pool_tokens = CountBox("pool (slots)", pool_tokens, "pool_tokens", "pool_tokens",
                                    lo=16, hi=MAX_TOKENS)
        self.controls = {"lengths": self.lengths, "page_size": self.page_size,
                         "max_len": self.max_len, "prefix": self.prefix,
                         "pool_tokens": self.pool_tokens}
        self.details = html_box("fc-paged-pool-readout")
        super().__init__(
            "<b>A paged KV cache</b>: requests in one pool of pages, against a contiguous "
            "allocation of max_len slots each",
            [row(self.lengths, self.page_size),
             row(self.max_len.text, self.prefix.text, self.pool_tokens.text)],
            self.details, plot_px=(760, 430), plot_class="fc-paged-pool-plot",
            side_by_side=False)
        self.watch(self.lengths, self.page_size, self.max_len, self.prefix, self.pool_tokens)
        self.refresh()

    def update(self):
        r = pool_readout(self.lengths.value, self.page_size.value, self.max_len.value,
                         self.prefix.value, self.pool_tokens.value)
        self.draw(lambda fig: _paint(fig, r))
        self.readout = r
        self.details.value = lines_html(r.lines)


def _paint(fig, r: PoolReadout):
    """The pool (top) and the requests against max_len (bottom)."""
    top, bottom = fig.subplots(2, 1, gridspec_kw={"height_ratios": [3, 2]})
    ps = r.cache.page_size
    draw_pool(top, r.owner, r.fill, ps)
    draw_contiguous(bottom, r.lengths, r.usage.max_len, ps)
    u = r.usage
    fig.suptitle(f"pages of {ps}: {u.paged_wasted:,} slots wasted; contiguous: "
                 f"{u.contiguous_wasted:,}", fontsize=10)


def paged_pool_explorer(**kwargs) -> PagedPoolExplorer:
    """Widget: requests in a pool of pages, their block tables' pages and the wasted slots.

    Keyword arguments set the starting values (lengths as a text, page_size, max_len,
    prefix, pool_tokens); a value that is not on offer raises a ValueError naming it.
    Returns the widget without displaying it: put the call last in a cell.
    """
    return PagedPoolExplorer(**kwargs)
