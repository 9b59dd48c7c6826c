"""The three designs of context parallelism side by side: bytes each rank sends, bytes it
holds for attention's inputs, and what limits the degree (notebook 16's comparison).

One forward of one attention layer, a sequence of n positions over `world` ranks, H query
heads and H_kv key/value heads of dimension d, e bytes per element (2 for fp16/bf16).
Every rank starts with n / world positions of Q, K and V (all heads).

    ring       world - 1 steps; each sends its current K and V block (n / world rows,
               H_kv heads) to the next rank while it computes with it:
                   sent = 2 (world - 1) (n / world) H_kv d e
                   held = Q shard + the K/V block in use + the one arriving
                        = (n / world) d e (H + 4 H_kv)
    allgather  all-gather K and V, then attend to the whole sequence (Llama 3's choice,
               PyTorch's context_parallel with the all-gather rotation): the same bytes
               reach each rank as in the ring, but all of K and V is held at once:
                   sent = 2 (world - 1) (n / world) H_kv d e
                   held = (n / world) H d e + 2 n H_kv d e
    ulysses    an all-to-all turns sequence shards into head shards (all n positions,
               H / world heads), attention runs per head, an all-to-all turns O back
               (DeepSpeed-Ulysses). A rank keeps 1 / world of what it holds and sends the
               rest: for Q and O, (n / world) (H / world) d e to each of world - 1 ranks;
               for K and V, kv_per_rank = H_kv / world heads (one whole head, replicated,
               when world > H_kv):
                   sent = (world - 1) (n / world) d e (2 H / world + 2 kv_per_rank)
                   held = n d e (H / world + 2 kv_per_rank)
               world must divide H (each rank owns whole heads): its degree is at most H.

Counts of elements times bytes; the time of a collective also depends on the links and
the algorithm of the library that runs it, which this model leaves out.
"""

from __future__ import annotations

import numpy as np

from .._checks import check_block

__all__ = ["DESIGNS", "comm_bytes_per_rank", "held_bytes_per_rank", "kv_heads_per_rank"]

#: the designs compared, in the order the notebook shows them
DESIGNS = ("ring", "allgather", "ulysses")


def _check(design, n, world, heads, kv_heads, d, element_bytes):
    if design not in DESIGNS:
        raise ValueError(f"design must be one of {DESIGNS}, got {design!r}")
    for name, value in (("n", n), ("world", world), ("heads", heads), ("kv_heads", kv_heads),
                        ("d", d), ("element_bytes", element_bytes)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if heads % kv_heads:
        raise ValueError(f"kv_heads ({kv_heads}) must divide heads ({heads})")
    if design == "ulysses" and heads % world:
        raise ValueError(f"Ulysses needs world ({world}) to divide heads ({heads}): each "
                         f"rank owns whole heads, so its degree is at most {heads}")


def kv_heads_per_rank(kv_heads: int, world: int) -> int:
    """K/V heads a rank holds after Ulysses' all-to-all: kv_heads / world, or one whole
    head (replicated) when world > kv_heads. ValueError when neither divides the other;
    both must be whole numbers >= 1 (an error naming them otherwise)."""
    kv_heads, world = check_block(kv_heads, "kv_heads"), check_block(world, "world")
    if kv_heads % world == 0:
        return kv_heads // world
    if world % kv_heads == 0:
        return 1
    raise ValueError(f"Ulysses needs world ({world}) and kv_heads ({kv_heads}) to divide one "
                     f"another")


def comm_bytes_per_rank(design: str, n: int, world: int, *, heads: int, kv_heads: int,
                        d: int, element_bytes: int = 2) -> float:
    """Bytes one rank sends in one forward (it receives as many): the module docstring's
    formulas. ValueError for a design or sizes it cannot run."""
    _check(design, n, world, heads, kv_heads, d, element_bytes)
    rows = n / world
    if design in ("ring", "allgather"):
        return 2.0 * (world - 1) * rows * kv_heads * d * element_bytes
    kv = kv_heads_per_rank(kv_heads, world)
    return (world - 1) * rows * d * element_bytes * (2 * heads / world + 2 * kv)


def held_bytes_per_rank(design: str, n: int, world: int, *, heads: int, kv_heads: int,
                        d: int, element_bytes: int = 2) -> float:
    """Bytes of attention's inputs (Q, K, V) one rank holds at once during the forward."""
    _check(design, n, world, heads, kv_heads, d, element_bytes)
    rows = n / world
    if design == "ring":
        return rows * d * element_bytes * (heads + 4 * kv_heads)
    if design == "allgather":
        return rows * heads * d * element_bytes + 2.0 * n * kv_heads * d * element_bytes
    kv = kv_heads_per_rank(kv_heads, world)
    return n * d * element_bytes * (heads / world + 2 * kv)
