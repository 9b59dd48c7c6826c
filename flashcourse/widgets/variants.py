"""The block-mask explorer: which tiles a mask leaves full, partial or empty, and what it saves.

    from flashcourse.widgets.variants import variants_explorer
    variants_explorer()                      # last line of a cell (notebook 14)

A menu of built-in masks (`flashcourse.variants.library`) with the one setting each has
(window, number of documents, prefix length), the length N = Tq = Tk (slider over powers
of two and a box for any length), the tile size Br = Bc and the head dim d. It builds the
block mask with `variants.block_mask.create_block_mask` (cached: a setting seen before
is instant) and shows its tiles, and `variants.cost.tile_cost`: tiles skipped, pairs
visible and computed, K/V bytes read, and the time model (touched tiles / all tiles).
The numbers come from `variants_readout` (pure, tested without a browser).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..memory import format_bytes
from ..plots.variants import draw_block_states
from ..variants import library
from ..variants.block_mask import BlockMask, create_block_mask
from ..variants.cost import TileCost, tile_cost
from ..variants.mods import and_masks
from ._base import (Explorer, CountBox, LengthControl, check_int_arg, html_box, lines_html,
                    menu, row, show)

MASKS = ("causal", "sliding window", "documents", "prefix-LM")
BLOCKS = (32, 64, 128, 256)
HEAD_DIMS = (64, 128)
BYTES_PER_ELEMENT = 2                 # fp16 / bf16 K and V
MAX_LOG2_N = 14                       # N up to 16,384 positions
MAX_PARAMETER = 2 ** 20               # window, documents, prefix: at most this
DOCUMENT_SEED = 0                     # the documents' random boundaries


def document_bounds(n: int, documents: int) -> np.ndarray:
    """cu_seqlens [0, ..., n] of `documents` packed documents of random lengths (seeded),
    each at least one position. ValueError if documents > n."""
    n = check_int_arg(n, "N", 1, 2 ** MAX_LOG2_N)
    k = check_int_arg(documents, "documents", 1, MAX_PARAMETER)
    if k > n:
        raise ValueError(f"documents must be at most N = {n:,} (each document has at least "
                         f"one position), got {k:,}")
    rng = np.random.default_rng(DOCUMENT_SEED)
    cuts = np.sort(rng.choice(np.arange(1, n), size=k - 1, replace=False))
    return np.concatenate([[0], cuts, [n]]).astype(np.int64)


def mask_for(mask: str, n: int, parameter: int):
    """The library's mask_mod for a menu entry, at N = Tq = Tk = n (ValueError for a
    setting it cannot take, naming it)."""
    if mask not in MASKS:
        raise ValueError(f"mask must be one of {', '.join(MASKS)}, got {mask!r}")
    if mask == "causal":
        return library.causal(n, n)
    if mask == "sliding window":
        return library.sliding_window(check_int_arg(parameter, "window", 0, MAX_PARAMETER),
                                      n, n)
    if mask == "prefix-LM":
        return library.prefix_lm(check_int_arg(parameter, "prefix", 0, MAX_PARAMETER), n, n)
    return and_masks(library.causal(n, n), library.document(document_bounds(n, parameter)))


@dataclass(frozen=True)
class VariantsReadout:
    """One setting of the explorer: its block mask, its costs and the lines shown."""

    mask: str
    n: int
    block: int
    block_mask: BlockMask
    cost: TileCost
    lines: tuple


def variants_readout(mask: str = "sliding window", n: int = 4096, parameter: int = 512,
                     block: int = 128, head_dim: int = 128) -> VariantsReadout:
    """The block mask and costs of a built-in mask at N = Tq = Tk = n with tiles
    block x block and head dim `head_dim` (one batch entry and head; fp16 K/V)."""
    n = check_int_arg(n, "N", 1, 2 ** MAX_LOG2_N)
    block = check_int_arg(block, "block", 1, 2 ** MAX_LOG2_N)
    head_dim = check_int_arg(head_dim, "head_dim", 1, 1024)
    bm = create_block_mask(mask_for(mask, n, parameter), None, None, n, n, block, block)
    c = tile_cost(bm, head_dim, BYTES_PER_ELEMENT)
    lines = (
        f"tiles of {block} x {block}: {c.tiles_full:,} full, {c.tiles_partial:,} partial, "
        f"{c.tiles_empty:,} empty of {c.tiles_total:,} ({c.skipped_fraction:.1%} skipped)",
        f"visible pairs: {c.visible_pairs:,} of {c.pairs_total:,} "
        f"({c.visible_fraction:.1%}); pairs computed in touched tiles: {c.pairs_computed:,}",
        f"K/V bytes read (d = {head_dim}, fp16): {format_bytes(c.kv_bytes)} against "
        f"{format_bytes(c.kv_bytes_dense)} for dense",
        f"predicted time (a model: proportional to the tiles touched): "
        f"{c.predicted_time_ratio:.3f} x dense",
        f"mask_mod evaluated on the partial tiles only: "
        f"{c.tiles_partial * block * block:,} pairs at most per forward",
        f"block mask: {bm.nbytes:,} bytes of indices, built in "
        f"{bm.build_seconds * 1e3:.0f} ms (cached for this setting)",
    )
    return VariantsReadout(mask, n, block, bm, c, lines)


class VariantsExplorer(Explorer):
    """The block-mask explorer (a VBox). Controls are in `.controls`."""

    css_class = "fc-variants"
    blanked = ("details",)

    def __init__(self, mask="sliding window", n=4096, window=512, documents=6, prefix=1024,
                 block=128, head_dim=128):
        self.mask = menu(list(MASKS), mask, "mask", "mask")
        self.length = LengthControl("N = Tq = Tk", n, "n", "N", MAX_LOG2_N,
                                    slider_class="fc-slider-n")
        self.window = CountBox("window (keys back)", window, "window", "window", lo=0,
                               hi=MAX_PARAMETER)
        self.documents = CountBox("documents", documents, "documents", "documents", lo=1,
                                  hi=MAX_PARAMETER)
        self.prefix = CountBox("prefix (keys)", prefix, "prefix", "prefix", lo=0,
                               hi=MAX_PARAMETER)
        self.block = menu(list(BLOCKS), block, "block", "Br = Bc")
        self.head_dim = menu(list(HEAD_DIMS), head_dim, "head_dim", "d")
        self.controls = {"mask": self.mask, "n": self.length, "window": self.window,
                         "documents": self.documents, "prefix": self.prefix,
                         "block": self.block, "head_dim": self.head_dim}
        self.details = html_box("fc-variants-readout")
        super().__init__(
            "<b>Block masks</b>: the tiles a mask leaves full (no mask_mod call), partial "
            "(mask_mod on each pair) or empty (skipped), and what skipping saves",
            [row(self.mask, self.window.text, self.documents.text, self.prefix.text),
             self.length.box, row(self.block, self.head_dim)],
            self.details, plot_px=(360, 340), plot_class="fc-variants-plot")
        self.watch(self.mask, self.length, self.window, self.documents, self.prefix,
                   self.block, self.head_dim)
        self.refresh()

    def parameter(self) -> int:
        """The value of the setting the chosen mask has (0 for causal)."""
        box = {"sliding window": self.window, "documents": self.documents,
               "prefix-LM": self.prefix}.get(self.mask.value)
        return 0 if box is None else box.value

    def update(self):
        for name, box in (("sliding window", self.window), ("documents", self.documents),
                          ("prefix-LM", self.prefix)):
            show(box.text, self.mask.value == name)
        r = variants_readout(self.mask.value, self.length.value, self.parameter(),
                             self.block.value, self.head_dim.value)
        self.draw(lambda fig: _paint(fig, r))
        self.readout = r
        self.details.value = lines_html(r.lines)


def _paint(fig, r: VariantsReadout):
    """The (Tr, Tc) tile grid of the block mask (`plots.variants.draw_block_states`)."""
    draw_block_states(fig.add_subplot(), r.block_mask.states()[0, 0])
    fig.suptitle(f"{r.mask}, N = {r.n:,}, tiles {r.block} x {r.block}: "
                 f"{r.cost.skipped_fraction:.0%} skipped", fontsize=9)


def variants_explorer(**kwargs) -> VariantsExplorer:
    """Widget: a built-in mask's block mask (full / partial / empty tiles) and its costs.

    Keyword arguments set the starting values (mask, n, window, documents, prefix, block,
    head_dim); a value that is not on offer raises a ValueError naming it. Returns the
    widget without displaying it: put the call last in a cell.
    """
    return VariantsExplorer(**kwargs)
