"""Run one design of context parallelism on local gloo processes from full arrays, and put
the ranks' rows back together: notebook 16's demonstration on a laptop CPU.

    results = run_designs(("ring", "allgather", "ulysses"), q, k, v, world=2, causal=True,
                          layout="zigzag")                # {design: (o, lse)}

q, k, v: numpy (B, H, n, d). Every rank takes its shard by the layout
(`shards.layout_shards`), runs `ring.ring_forward`, `gather.gather_forward` or
`ulysses.ulysses_forward` on it (`launch.run` spawns the processes), and returns its rows;
`run_designs` reassembles them (`shards.unshard`) into the (o, lse) one process would
compute, to be compared with `flashcourse.reference.attention`. Needs PyTorch (the
ImportError says how to install it).
"""

from __future__ import annotations

import numpy as np

from .shards import layout_shards, shard, unshard

__all__ = ["DESIGN_FORWARDS", "rank_forward", "run_designs"]

#: design -> (module of flashcourse.distributed, its forward)
DESIGN_FORWARDS = {"ring": ("ring", "ring_forward"), "allgather": ("gather", "gather_forward"),
                   "ulysses": ("ulysses", "ulysses_forward")}


def _forward(design: str):
    if design not in DESIGN_FORWARDS:
        raise ValueError(f"design must be one of {sorted(DESIGN_FORWARDS)}, got {design!r}")
    from . import gather, ring, ulysses
    module = {"ring": ring, "gather": gather, "ulysses": ulysses}[DESIGN_FORWARDS[design][0]]
    return getattr(module, DESIGN_FORWARDS[design][1])


def rank_forward(rank: int, world: int, designs, q, k, v, causal: bool, layout: str) -> dict:
    """What one rank runs (in its own process, by `launch.run`): its shard of the full numpy
    q, k, v through each design's forward; {design: (o, lse)}, its rows, numpy float64."""
    from .kernels import require_torch
    torch = require_torch("notebook 16's demonstration")
    ranges = layout_shards(q.shape[-2], world, layout)[rank]

    def part(x):
        return torch.from_numpy(np.ascontiguousarray(shard(np.asarray(x), ranges)))
    out = {}
    for design in designs:
        o, lse = _forward(design)(part(q), part(k), part(v), causal=causal, layout=layout)
        out[design] = (o.double().numpy(), lse.double().numpy())
    return out


def run_designs(designs, q, k, v, *, world: int = 2, causal: bool = True,
                layout: str = "zigzag", timeout_s: float = 120.0) -> dict:
    """{design: (o (B, H, n, d), lse (B, H, n))}: each of `designs` run on the same `world`
    gloo processes (started once), the ranks' rows put back in sequence order."""
    designs = tuple(designs)
    for design in designs:
        _forward(design)                                  # a bad name fails here, not in a rank
    from .launch import run
    parts = run(world, rank_forward, designs, q, k, v, causal, layout, timeout_s=timeout_s)
    lay = layout_shards(q.shape[-2], world, layout)
    return {design: (unshard([p[design][0] for p in parts], lay),
                     unshard([p[design][1][..., None] for p in parts], lay)[..., 0])
            for design in designs}
