"""What a block mask saves: visible pairs against tiles touched, K/V bytes, a time model.

A tiled kernel driven by a `BlockMask` forms every full and every partial tile and skips
the empty ones. Three counts say what that costs, per (batch entry, head) of the mask:

    visible pairs     pairs the mask lets through: the work attention needs
    pairs computed    pairs of every touched tile (full + partial): the work done; the
                      difference is hidden pairs computed and thrown away (-inf)
    K/V bytes         K_j and V_j read once per touched tile: 2 x (keys in block j) x d x e
                      bytes each (e bytes per element), against every tile for dense

and one model: the time of the forward is proportional to the tiles touched, each costing
the same, the empty ones nothing, so time / dense time = touched tiles / all tiles. It is
a model, not a measurement: it ignores that a partial tile also calls mask_mod on each of
its pairs, that a short row of tiles may leave a GPU's SMs idle, and fixed costs per call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._checks import check_block
from .block_mask import EMPTY, FULL, PARTIAL, BlockMask


@dataclass(frozen=True)
class TileCost:
    """The costs of one block mask (module docstring); counts over its (B', H')."""

    seq_lengths: tuple           # (Tq, Tk) positions
    block_size: tuple            # (Br, Bc) positions
    head_dim: int                # d
    bytes_per_element: int       # e
    tiles_full: int
    tiles_partial: int
    tiles_empty: int
    pairs_total: int             # B' H' Tq Tk
    visible_pairs: int
    pairs_computed: int          # pairs of the touched tiles
    kv_bytes: int                # K/V bytes read by the touched tiles
    kv_bytes_dense: int          # ... by every tile (no mask)

    @property
    def tiles_total(self) -> int:
        return self.tiles_full + self.tiles_partial + self.tiles_empty

    @property
    def tiles_touched(self) -> int:
        return self.tiles_full + self.tiles_partial

    @property
    def skipped_fraction(self) -> float:
        """Share of the tiles never formed (empty)."""
        return self.tiles_empty / self.tiles_total

    @property
    def visible_fraction(self) -> float:
        """Share of all pairs the mask lets through: the least work possible."""
        return self.visible_pairs / self.pairs_total

    @property
    def predicted_time_ratio(self) -> float:
        """The model's time against dense attention: touched tiles / all tiles."""
        return self.tiles_touched / self.tiles_total


def tile_cost(block_mask: BlockMask, head_dim: int, bytes_per_element: int = 2) -> TileCost:
    """The `TileCost` of `block_mask` for head dim d = `head_dim` and `bytes_per_element`
    bytes per K/V element (2: fp16/bf16). head_dim at most 65,536 and bytes_per_element at
    most 8 (whole numbers >= 1; an error naming them otherwise)."""
    if not isinstance(block_mask, BlockMask):
        raise TypeError(f"block_mask must be a BlockMask (from create_block_mask), got "
                        f"{type(block_mask).__name__}")
    d = check_block(head_dim, "head_dim")
    e = check_block(bytes_per_element, "bytes_per_element")
    for name, x, most in (("head_dim", d, 1 << 16), ("bytes_per_element", e, 8)):
        if x > most:
            raise ValueError(f"{name} must be at most {most:,}, got {x:,}")
    (tq, tk), (br, bc) = block_mask.seq_lengths, block_mask.block_size
    states = block_mask.states()                                  # (B', H', Tr, Tc)
    tr, tc = states.shape[-2:]
    heights = np.minimum(br, tq - np.arange(tr) * br).astype(np.int64)   # (Tr,) rows
    widths = np.minimum(bc, tk - np.arange(tc) * bc).astype(np.int64)    # (Tc,) keys
    touched = (states != EMPTY).reshape(-1, tr, tc)               # (B'H', Tr, Tc)
    per_col = touched.sum(axis=(0, 1)).astype(np.int64)           # (Tc,) touched tiles
    pairs = int(np.einsum("ntc,t,c->", touched.astype(np.int64), heights, widths))
    copies = touched.shape[0]                                     # B' H'
    return TileCost(
        seq_lengths=(tq, tk), block_size=(br, bc), head_dim=d, bytes_per_element=e,
        tiles_full=int((states == FULL).sum()), tiles_partial=int((states == PARTIAL).sum()),
        tiles_empty=int((states == EMPTY).sum()), pairs_total=copies * tq * tk,
        visible_pairs=block_mask.visible_pairs, pairs_computed=pairs,
        kv_bytes=int(2 * d * e * (per_col * widths).sum()),
        kv_bytes_dense=int(2 * d * e * copies * tr * tk))
