"""A small time model of one ring step: does the K/V transfer hide behind the compute?

At each of the world - 1 steps that move data, every rank computes attention of its
queries against the K/V block it holds while it sends that block on and receives the
next one. With overlap, a step takes max(compute, transfer); the transfer is hidden when
compute >= transfer. Units: seconds, FLOP/s, bytes/s (pure python, no torch).

    block compute  = 4 pairs d (B H) FLOPs / flops_per_s        (forward: 2 matmuls of
                     2 FLOPs per multiply-add; `pairs` from `shards.causal_pairs`)
    block transfer = 2 (n / world) d (B H) element_bytes / link_bytes_per_s
                     (one K block and one V block)

The slowest rank sets each step (all ranks wait for their next block), so the step's
compute is the column maximum of `causal_pairs`. Without causal masking every step is
the same; then the ring hides the link when the per-rank sequence n / world is at least
flops_per_s element_bytes / (2 link_bytes_per_s) positions (independent of d).
"""

from __future__ import annotations

import numpy as np

from .shards import causal_pairs

__all__ = ["ring_step_times", "min_hidden_shard"]


def ring_step_times(n: int, d: int, world: int, *, heads: int = 1, batch: int = 1,
                    element_bytes: int = 2, flops_per_s: float = 400e12,
                    link_bytes_per_s: float = 100e9, causal: bool = True,
                    layout: str = "zigzag") -> dict:
    """Per ring step (world steps; the last moves nothing):

    compute_s (world,)  the slowest rank's block compute time, seconds
    link_s    (world,)  the K/V block transfer time, seconds (0 at the last step)
    step_s    (world,)  max(compute_s, link_s): the step's time with overlap
    hidden    (world,)  bool, the transfer hides behind the compute (compute_s >= link_s)
    total_s             the forward's time, sum of step_s
    serial_s            the same without overlap (compute + transfer each step)
    """
    for name, value in (("d", d), ("heads", heads), ("batch", batch),
                        ("element_bytes", element_bytes)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    for name, value in (("flops_per_s", flops_per_s), ("link_bytes_per_s", link_bytes_per_s)):
        if not (isinstance(value, (int, float, np.floating)) and value > 0):
            raise ValueError(f"{name} must be a positive number, got {value!r}")
    pairs = causal_pairs(n, world, layout, causal=causal)          # (world ranks, world steps)
    bh = batch * heads
    compute = 4.0 * pairs.max(axis=0) * d * bh / flops_per_s
    link = np.full(world, 2.0 * (n / world) * d * bh * element_bytes / link_bytes_per_s)
    link[-1] = 0.0                                                  # nothing left to move
    step = np.maximum(compute, link)
    return {"compute_s": compute, "link_s": link, "step_s": step,
            "hidden": compute >= link, "total_s": float(step.sum()),
            "serial_s": float((compute + link).sum())}


def min_hidden_shard(*, element_bytes: int = 2, flops_per_s: float = 400e12,
                     link_bytes_per_s: float = 100e9) -> float:
    """Positions per rank (n / world) above which a non-causal ring step hides its
    transfer: 4 s^2 d / F >= 2 s d e / W  <=>  s >= F e / (2 W). ValueError naming an
    argument that is not positive."""
    for name, value in (("element_bytes", element_bytes), ("flops_per_s", flops_per_s),
                        ("link_bytes_per_s", link_bytes_per_s)):
        if isinstance(value, bool) or not (isinstance(value, (int, float, np.integer,
                                                               np.floating)) and value > 0):
            raise ValueError(f"{name} must be a positive number, got {value!r}")
    return flops_per_s * element_bytes / (2.0 * link_bytes_per_s)
