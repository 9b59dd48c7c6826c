"""Block masks: which (query block, key block) tiles a mask_mod leaves full, partial or empty.

A tile of Br query rows by Bc keys (block_q, block_k) is

    empty    no pair visible: the kernels skip it (no K/V load, no score)
    full     every pair visible: the kernels compute it without calling mask_mod
    partial  some pairs visible: the kernels call mask_mod on each of its pairs

`create_block_mask` finds out by evaluating mask_mod once on every pair, one row of
tiles at a time (vectorised numpy, `mods.mask_tile`), and stores the answer as PyTorch
FlexAttention's BlockMask does, per query block i (rows of a (Tr, Tc) grid):

    kv_num_blocks[b, h, i]          number of partial key blocks       (B', H', Tr) int32
    kv_indices[b, h, i, :]          their indices, ascending, first    (B', H', Tr, Tc)
    full_kv_num_blocks, full_kv_indices   the same for full key blocks

and per key block j, the transpose, for the backward (its outer loop runs over keys):
q_num_blocks, q_indices, full_q_num_blocks, full_q_indices ((B', H', Tc), (B', H', Tc,
Tr)). Entries of an index row past its count are the other blocks in ascending order (as
FlexAttention's argsort leaves them): in range, never to be read as visible. B' is 1
(the mask is the same for every batch entry: pass B=None) or B, H' likewise.

One difference from FlexAttention: a ragged last block (Tq or Tk not a multiple of the
block) counts as full when every pair that exists is visible (FlexAttention pads it
with hidden pairs, so it is partial there); the kernels bound their loops by Tq, Tk.

A cache keyed by the mask_mod's `mods.fingerprint` (its code and the contents of the
arrays it closes over), the lengths and the block sizes returns the same BlockMask
instead of building it again: `cache_info()` counts hits and misses. Each BlockMask
reports its `nbytes` (index arrays) and `build_seconds`.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from .._checks import check_block
from ..geometry import ceil_div
from .mods import check_fits, check_mod, fingerprint, mask_tile

EMPTY, PARTIAL, FULL = 0, 1, 2
#: FlexAttention's default block size (positions), both axes
DEFAULT_BLOCK = 128


@dataclass(frozen=True, eq=False)
class BlockMask:
    """The tiles of a mask (module docstring); arrays int32, built by `create_block_mask`."""

    seq_lengths: tuple              # (Tq, Tk) positions
    block_size: tuple               # (Br, Bc) positions
    kv_num_blocks: np.ndarray       # (B', H', Tr) partial key blocks per query block
    kv_indices: np.ndarray          # (B', H', Tr, Tc)
    full_kv_num_blocks: np.ndarray  # (B', H', Tr) full key blocks per query block
    full_kv_indices: np.ndarray     # (B', H', Tr, Tc)
    q_num_blocks: np.ndarray        # (B', H', Tc) partial query blocks per key block
    q_indices: np.ndarray           # (B', H', Tc, Tr)
    full_q_num_blocks: np.ndarray   # (B', H', Tc)
    full_q_indices: np.ndarray      # (B', H', Tc, Tr)
    mask_mod: object                # the function (None: every tile full, no mask)
    visible_pairs: int              # pairs the mask lets through, summed over B', H'
    mask_evaluations: int           # pairs mask_mod was called on to build this
    build_seconds: float            # wall time of the build

    @property
    def shape(self) -> tuple:
        """(B', H', Tq, Tk)."""
        return (*self.kv_num_blocks.shape[:2], *self.seq_lengths)

    @property
    def nbytes(self) -> int:
        """Bytes of the eight index arrays (what a kernel reads besides Q, K, V)."""
        return sum(a.nbytes for a in (self.kv_num_blocks, self.kv_indices,
                                      self.full_kv_num_blocks, self.full_kv_indices,
                                      self.q_num_blocks, self.q_indices,
                                      self.full_q_num_blocks, self.full_q_indices))

    def states(self) -> np.ndarray:
        """(B', H', Tr, Tc) int8: EMPTY 0, PARTIAL 1 or FULL 2 for every tile."""
        out = np.zeros(self.kv_indices.shape, np.int8)
        for num, idx, state in ((self.kv_num_blocks, self.kv_indices, PARTIAL),
                                (self.full_kv_num_blocks, self.full_kv_indices, FULL)):
            used = np.arange(idx.shape[-1]) < num[..., None]               # (B', H', Tr, Tc)
            out[_scatter(idx, used)] = state
        return out

    def tiles(self) -> dict:
        """Counts of full, partial and empty tiles over (B', H', Tr, Tc), and all of them."""
        full = int(self.full_kv_num_blocks.sum())
        partial = int(self.kv_num_blocks.sum())
        total = int(np.prod(self.kv_indices.shape))
        return {"full": full, "partial": partial, "empty": total - full - partial,
                "total": total}

    def key_blocks(self, b: int, h: int, i: int):
        """(partial, full) key-block indices of query block i for batch b, query head h
        (broadcast over B', H' of size 1)."""
        b, h = self._bh(b, h)
        n_p, n_f = self.kv_num_blocks[b, h, i], self.full_kv_num_blocks[b, h, i]
        return self.kv_indices[b, h, i, :n_p], self.full_kv_indices[b, h, i, :n_f]

    def query_blocks(self, b: int, h: int, j: int):
        """(partial, full) query-block indices of key block j (the backward's order)."""
        b, h = self._bh(b, h)
        n_p, n_f = self.q_num_blocks[b, h, j], self.full_q_num_blocks[b, h, j]
        return self.q_indices[b, h, j, :n_p], self.full_q_indices[b, h, j, :n_f]

    def _bh(self, b, h):
        bb, hh = self.kv_num_blocks.shape[:2]
        return (b if bb > 1 else 0), (h if hh > 1 else 0)

    def describe(self) -> str:
        """Two short lines: lengths and tiles by kind; bytes and build time."""
        t = self.tiles()
        (tq, tk), (br, bc) = self.seq_lengths, self.block_size
        return (f"BlockMask (Tq, Tk) = ({tq}, {tk}), tiles {br} x {bc}: {t['full']} full, "
                f"{t['partial']} partial, {t['empty']} empty of {t['total']}\n"
                f"  {self.nbytes:,} bytes of lists; built in {self.build_seconds * 1e3:.1f} ms")

    def to_string(self, b: int = 0, h: int = 0) -> str:
        """The tile grid of one (batch, head) as text: '#' full, '+' partial, '.' empty."""
        b, h = self._bh(b, h)
        return "\n".join("".join(".+#"[s] for s in row) for row in self.states()[b, h])


def _scatter(idx, used):
    """(..., Tc) bool: True at the columns named by the used entries of idx (each row of
    idx is a permutation, so every column receives exactly one value)."""
    out = np.zeros(idx.shape, bool)
    np.put_along_axis(out, idx.astype(np.intp), used, axis=-1)
    return out


def _ordered(dense) -> tuple:
    """(count, indices) of a (..., R, C) bool grid: the True columns first, ascending."""
    count = dense.sum(axis=-1).astype(np.int32)
    order = np.argsort(~dense, axis=-1, kind="stable").astype(np.int32)
    return count, order


def from_states(states, seq_lengths, block_size, mask_mod, visible_pairs: int,
                mask_evaluations: int = 0, build_seconds: float = 0.0) -> BlockMask:
    """A BlockMask from a (B', H', Tr, Tc) grid of EMPTY/PARTIAL/FULL."""
    states = np.asarray(states)
    if states.ndim != 4:
        raise ValueError(f"states must be a (B', H', Tr, Tc) grid, got shape {states.shape}")
    partial, full = states == PARTIAL, states == FULL
    t = np.swapaxes
    return BlockMask(tuple(seq_lengths), tuple(block_size), *_ordered(partial),
                     *_ordered(full), *_ordered(t(partial, -1, -2)), *_ordered(t(full, -1, -2)),
                     mask_mod, int(visible_pairs), int(mask_evaluations),
                     float(build_seconds))


#: The largest block and the most tiles a BlockMask is built with (a (Tr, Tc) int8 table).
MAX_BLOCK = 1 << 20
MAX_TILES = 1 << 26


def tile_grid(tq: int, tk: int, br: int, bc: int) -> tuple:
    """(Tr, Tc) of checked sizes; a ValueError naming block_q / block_k above MAX_BLOCK, or
    t_query and t_key when the grid has more than MAX_TILES tiles."""
    for name, b in (("block_q", br), ("block_k", bc)):
        if b > MAX_BLOCK:
            raise ValueError(f"{name} must be at most {MAX_BLOCK:,}, got {b:,}")
    tr, tc = ceil_div(tq, br), ceil_div(tk, bc)
    if tr * tc > MAX_TILES:
        raise ValueError(f"t_query = {tq:,} and t_key = {tk:,} in {br} x {bc} tiles give "
                         f"{tr * tc:,} tiles, more than the {MAX_TILES:,} a BlockMask holds "
                         f"here: use larger blocks or shorter sequences")
    return tr, tc


def full_block_mask(t_query: int, t_key: int, block_q: int, block_k: int) -> BlockMask:
    """Every tile full (no mask): what the kernels use when given no mask_mod. Whole
    numbers >= 1 within `tile_grid`'s limits (an error naming the argument otherwise)."""
    t_query, t_key = check_block(t_query, "t_query"), check_block(t_key, "t_key")
    block_q, block_k = check_block(block_q, "block_q"), check_block(block_k, "block_k")
    tr, tc = tile_grid(t_query, t_key, block_q, block_k)
    return from_states(np.full((1, 1, tr, tc), FULL, np.int8), (t_query, t_key),
                       (block_q, block_k), None, t_query * t_key)


def _count(value, name):
    return 1 if value is None else check_block(value, name)


def _build(mask_mod, nb, nh, tq, tk, br, bc):
    """The (B', H', Tr, Tc) states and the visible-pair count, one row of tiles at a time."""
    tr, tc = ceil_div(tq, br), ceil_div(tk, bc)
    states = np.empty((nb, nh, tr, tc), np.int8)
    widths = np.minimum(bc, tk - np.arange(tc) * bc)                   # (Tc,) keys per block
    kv = np.arange(tk)
    visible = 0
    for b in range(nb):
        for h in range(nh):
            for i in range(tr):
                q0, q1 = i * br, min((i + 1) * br, tq)
                m = mask_tile(mask_mod, b, h, np.arange(q0, q1), kv)    # (rows, Tk)
                cols = m.sum(axis=0)                                    # (Tk,) per key
                padded = np.zeros(tc * bc, np.int64)
                padded[:tk] = cols
                count = padded.reshape(tc, bc).sum(axis=1)              # (Tc,) per tile
                area = (q1 - q0) * widths
                states[b, h, i] = np.where(count == 0, EMPTY,
                                           np.where(count == area, FULL, PARTIAL))
                visible += int(count.sum())
    return states, visible


_CACHE: OrderedDict = OrderedDict()
#: block masks the cache keeps (least recently used dropped first)
CACHE_SIZE = 32
_STATS = {"hits": 0, "misses": 0}


def create_block_mask(mask_mod, B: int | None, H: int | None, t_query: int, t_key: int,
                      block_q: int = DEFAULT_BLOCK, block_k: int = DEFAULT_BLOCK, *,
                      cache: bool = True) -> BlockMask:
    """The BlockMask of `mask_mod` for B batch entries and H query heads (None: the mask
    does not depend on b (or h), built once for b = 0 (h = 0) and used for all; the
    kernels still call mask_mod with the true b, h on partial tiles), Tq x Tk positions,
    tiles of block_q x block_k. Evaluates mask_mod on all B' H' Tq Tk pairs, in numpy;
    cache=True returns a cached BlockMask for the same function contents and sizes."""
    if mask_mod is None:
        raise TypeError("mask_mod must be a function mask_mod(b, h, q_idx, kv_idx), got None "
                        "(for no mask, give the kernels block_mask=None, or use "
                        "full_block_mask)")
    check_mod(mask_mod, "mask_mod", 4)
    nb, nh = _count(B, "B"), _count(H, "H")
    tq, tk = check_block(t_query, "t_query"), check_block(t_key, "t_key")
    br, bc = check_block(block_q, "block_q"), check_block(block_k, "block_k")
    tile_grid(tq, tk, br, bc)
    check_fits(mask_mod, "mask_mod", tq, tk, getattr(mask_mod, "num_heads", None) or nh)
    key = (fingerprint(mask_mod), nb, nh, tq, tk, br, bc)
    if cache and key in _CACHE:
        _STATS["hits"] += 1
        _CACHE.move_to_end(key)
        return _CACHE[key]
    _STATS["misses"] += 1
    start = time.perf_counter()
    states, visible = _build(mask_mod, nb, nh, tq, tk, br, bc)
    bm = from_states(states, (tq, tk), (br, bc), mask_mod, visible,
                     mask_evaluations=nb * nh * tq * tk,
                     build_seconds=time.perf_counter() - start)
    if cache:
        _CACHE[key] = bm
        while len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)
    return bm


def cache_info() -> dict:
    """Block-mask cache: hits, misses, entries and the bytes they hold."""
    return {**_STATS, "entries": len(_CACHE),
            "nbytes": sum(bm.nbytes for bm in _CACHE.values())}


def clear_cache() -> None:
    """Forget every cached block mask and reset the counts."""
    _CACHE.clear()
    _STATS.update(hits=0, misses=0)


def check_block_mask(block_mask, batch: int, heads: int, t_query: int, t_key: int):
    """`block_mask` if it fits inputs of `batch` entries, `heads` query heads and (Tq, Tk)
    (ValueError naming what differs); TypeError if it is not a BlockMask."""
    if not isinstance(block_mask, BlockMask):
        raise TypeError(f"block_mask must be a flashcourse.variants.block_mask.BlockMask "
                        f"(from create_block_mask), got {type(block_mask).__name__}")
    if tuple(block_mask.seq_lengths) != (t_query, t_key):
        raise ValueError(f"block_mask was built for (Tq, Tk) = {block_mask.seq_lengths}, the "
                         f"inputs have ({t_query}, {t_key})")
    nb, nh = block_mask.kv_num_blocks.shape[:2]
    if nb not in (1, batch) or nh not in (1, heads):
        raise ValueError(f"block_mask has (B', H') = ({nb}, {nh}); the inputs need B' in "
                         f"(1, {batch}) and H' in (1, {heads}) (query heads)")
    return block_mask
