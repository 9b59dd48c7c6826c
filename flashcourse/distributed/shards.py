"""Which rows each rank holds in context parallelism, and how much causal work it gets.

Pure numpy (no PyTorch): the notebook plots these on a laptop without torch.

The sequence of n positions is cut into chunks (`chunk_bounds`, the first n % parts
chunks one position longer, as `numpy.array_split` cuts). Two layouts:

    contiguous_shards(n, world)   rank r holds chunk r of `world` chunks
    zigzag_shards(n, world)       rank r holds chunks r and 2 world - 1 - r of 2 world
                                  chunks: under a causal mask every rank gets about the
                                  same work (an early chunk sees few keys, its partner
                                  at the end sees many)

A layout is a list, one entry per rank, of that rank's global (start, stop) ranges in
order. `shard(x, ranges)` takes a rank's rows out of a full array, `unshard(parts,
layout)` puts every rank's rows back. `causal_pairs(n, world, layout)` counts the
visible (query, key) pairs each rank computes at each ring step.
"""

from __future__ import annotations

import numpy as np

from .._checks import check_bool

__all__ = ["LAYOUTS", "chunk_bounds", "contiguous_shards", "zigzag_shards", "layout_shards",
           "rank_indices", "shard", "unshard", "causal_pairs", "ring_source", "chunk_ids",
           "pair_kind", "step_pairs"]

#: The two ways of cutting the sequence: name -> number of chunks per rank.
LAYOUTS = {"contiguous": 1, "zigzag": 2}


def _check_int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def chunk_bounds(n: int, parts: int) -> list:
    """[(start, stop), ...]: n positions cut into `parts` chunks, the first n % parts one
    longer than the rest (numpy.array_split's cut). ValueError when n < parts (a chunk
    would be empty)."""
    n = _check_int(n, "n", 1)
    parts = _check_int(parts, "parts", 1)
    if n < parts:
        raise ValueError(f"n (the sequence length) must be at least the number of chunks "
                         f"({parts}), got n={n}")
    base, extra = divmod(n, parts)
    bounds, start = [], 0
    for c in range(parts):
        stop = start + base + (1 if c < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def contiguous_shards(n: int, world: int) -> list:
    """Rank r holds chunk r of `world` chunks: [[(start, stop)], ...] (one range each)."""
    world = _check_int(world, "world", 1)
    return [[b] for b in chunk_bounds(n, world)]


def zigzag_shards(n: int, world: int) -> list:
    """Rank r holds chunks r and 2 world - 1 - r of 2 world chunks: [[(a0, b0), (a1, b1)],
    ...], the early chunk first. ValueError when n < 2 world."""
    world = _check_int(world, "world", 1)
    bounds = chunk_bounds(n, 2 * world)
    return [[bounds[r], bounds[2 * world - 1 - r]] for r in range(world)]


def layout_shards(n: int, world: int, layout: str = "zigzag") -> list:
    """`zigzag_shards` or `contiguous_shards` by name (ValueError naming `layout`)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {sorted(LAYOUTS)}, got {layout!r}")
    return (zigzag_shards if layout == "zigzag" else contiguous_shards)(n, world)


def rank_indices(ranges) -> np.ndarray:
    """The global positions of one rank's ranges, in the order it holds them (int64)."""
    return np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in ranges])


def shard(x, ranges, axis: int = -2):
    """One rank's rows of a full array x (sequence along `axis`, default -2 of
    (..., T, d)): its ranges concatenated in order. numpy arrays or torch tensors; axis
    an int within x's dimensions (an error naming x or axis otherwise)."""
    if not isinstance(x, np.ndarray) and type(x).__module__.split(".")[0] != "torch":
        raise TypeError(f"x must be a numpy array or a torch tensor, got {type(x).__name__}")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) \
            or not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis must be an int in [-{x.ndim}, {x.ndim}), got {axis!r}")
    ax = axis % x.ndim
    for a, b in ranges:
        if not 0 <= a < b <= x.shape[ax]:
            raise ValueError(f"ranges must lie within the {x.shape[ax]} rows of x along axis "
                             f"{axis}, got ({a}, {b})")
    pieces = [x[(slice(None),) * ax + (slice(a, b),)] for a, b in ranges]
    if isinstance(x, np.ndarray):
        return np.concatenate(pieces, axis=ax)
    import torch                                   # a torch tensor: torch is installed
    return torch.cat(pieces, dim=ax)


def unshard(parts, layout, axis: int = -2):
    """The full array from every rank's rows: parts[r] holds layout[r]'s ranges in
    order (as `shard` gives them). numpy arrays or torch tensors."""
    if len(parts) != len(layout):
        raise ValueError(f"parts has {len(parts)} entries but layout has {len(layout)} ranks")
    first = parts[0]
    ax = axis % first.ndim
    pieces = []
    for part, ranges in zip(parts, layout):
        offset = 0
        for a, b in ranges:
            pieces.append((a, part[(slice(None),) * ax + (slice(offset, offset + b - a),)]))
            offset += b - a
        if offset != part.shape[ax]:
            raise ValueError(f"a part has {part.shape[ax]} rows along axis {axis}, its "
                             f"ranges {ranges} hold {offset}")
    pieces = [p for _, p in sorted(pieces, key=lambda item: item[0])]
    if isinstance(first, np.ndarray):
        return np.concatenate(pieces, axis=ax)
    import torch
    return torch.cat(pieces, dim=ax)


def _check_rank(rank, world: int) -> int:
    """`rank` as an int in [0, world), else an error naming rank."""
    rank = _check_int(rank, "rank", 0)
    if rank >= world:
        raise ValueError(f"rank must be below world = {world} (ranks 0 .. {world - 1}), "
                         f"got {rank}")
    return rank


def ring_source(rank: int, step: int, world: int) -> int:
    """The rank whose K/V block `rank` holds at ring step `step` (blocks move to
    rank + 1 each step, so at step s rank r has the block of rank r - s). Whole numbers,
    world >= 1, 0 <= rank < world, step >= 0: an error naming the argument otherwise."""
    world = _check_int(world, "world", 1)
    rank = _check_rank(rank, world)
    return (rank - _check_int(step, "step", 0)) % world


def chunk_ids(rank: int, world: int, layout: str = "zigzag") -> list:
    """The global chunk numbers `rank` holds, in order: [rank] (contiguous, `world`
    chunks) or [rank, 2 world - 1 - rank] (zigzag, 2 world chunks). world >= 1 and
    0 <= rank < world (an error naming them otherwise)."""
    world = _check_int(world, "world", 1)
    rank = _check_rank(rank, world)
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {sorted(LAYOUTS)}, got {layout!r}")
    return [rank] if layout == "contiguous" else [rank, 2 * world - 1 - rank]


def pair_kind(q_chunk: int, k_chunk: int, causal: bool = True) -> str:
    """How a query chunk sees a key chunk under the causal mask (chunks in sequence
    order): "full" (key chunk earlier: no mask; every pair without causal), "diagonal"
    (the same chunk: causal, square) or "hidden" (key chunk later: skipped). Chunk
    numbers are whole numbers >= 0, causal a bool (an error naming them otherwise)."""
    q_chunk, k_chunk = _check_int(q_chunk, "q_chunk", 0), _check_int(k_chunk, "k_chunk", 0)
    if not check_bool(causal, "causal") or k_chunk < q_chunk:
        return "full"
    return "diagonal" if k_chunk == q_chunk else "hidden"


def step_pairs(rank: int, step: int, world: int, layout: str = "zigzag",
               causal: bool = True) -> list:
    """[(q chunk, k chunk, kind), ...]: every pair of a query chunk of `rank` and a key
    chunk of the block it holds at ring `step` (that of `ring_source(rank, step, world)`),
    with its `pair_kind`. Ring attention computes the "full" and "diagonal" ones."""
    src = ring_source(rank, step, world)
    return [(qc, kc, pair_kind(qc, kc, causal)) for qc in chunk_ids(rank, world, layout)
            for kc in chunk_ids(src, world, layout)]


def _visible(q_ranges, k_ranges) -> int:
    """Visible (query, key) pairs, causal (key j <= query i), between two range lists."""
    total = 0
    for qa, qb in q_ranges:
        for ka, kb in k_ranges:
            i = np.arange(qa, qb, dtype=np.int64)  # query i sees keys ka .. min(kb - 1, i)
            total += int(np.clip(np.minimum(kb, i + 1) - ka, 0, None).sum())
    return total


def causal_pairs(n: int, world: int, layout: str = "zigzag", causal: bool = True) -> np.ndarray:
    """(world, world) int64: entry [r, s] = the (query, key) pairs rank r computes at
    ring step s (its queries against the K/V block of rank `ring_source(r, s, world)`),
    under the causal mask (causal=False: every pair). Row sums are each rank's total
    work; the ring's time is set by the largest entry of each column (every rank waits
    for the slowest before the next block moves on)."""
    shards = layout_shards(n, world, layout)
    out = np.zeros((world, world), dtype=np.int64)
    for r in range(world):
        for s in range(world):
            src = shards[ring_source(r, s, world)]
            if causal:
                out[r, s] = _visible(shards[r], src)
            else:
                out[r, s] = (sum(b - a for a, b in shards[r])
                             * sum(b - a for a, b in src))
    return out
