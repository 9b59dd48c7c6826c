"""The all-gather design (PyTorch's context_parallel style): gather K/V, attend locally.

Each rank holds its shard of q, k, v (any layout: `shards.layout_shards`). The forward
all-gathers every rank's K and V (`comm.all_gather_seq`), puts the sequence back in
order (`shards.unshard`) and attends its own query chunks to it: a query chunk at global
rows [a, b) under the causal mask needs only K[:b], with the bottom-right mask (query i
of the chunk sees key j iff j <= i + a). No merge is needed: every row sees all its keys
in one kernel call. Memory per rank: the whole K and V (n positions), against the ring's
one block; communication: one collective, not overlapped with compute.

The backward gathers K, V again, computes dq and this rank's share of the full dk, dv,
sums the shares of every rank (all_reduce) and keeps its own rows (gloo has no
reduce_scatter; NCCL's would send a world-th of the data).
"""

from __future__ import annotations

from . import comm
from .kernels import check_qkv_shards, check_saved, get_kernel, require_torch
from .shards import LAYOUTS, shard, unshard

__all__ = ["gather_forward", "gather_backward"]


def _setup(q, k, v, layout, kernel, scale, group):
    q, k, v = check_qkv_shards(q, k, v)
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {sorted(LAYOUTS)}, got {layout!r}")
    kern = get_kernel(kernel)
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    rank, _ = comm.group_rank_world(group)
    shards = comm.agree_on_shapes(q, layout, group)
    lengths = [sum(b - a for a, b in r) for r in shards]
    k_full = unshard(comm.all_gather_seq(k, lengths, group), shards).contiguous()
    v_full = unshard(comm.all_gather_seq(v, lengths, group), shards).contiguous()
    return q, kern, scale, rank, shards, k_full, v_full


def _blocks(ranges, n, causal):
    """(local slice, key stop, causal) per query chunk: keys [0, stop)."""
    if not causal:
        yield slice(None), n, False
        return
    offset = 0
    for a, b in ranges:
        yield slice(offset, offset + b - a), b, True
        offset += b - a


def gather_forward(q, k, v, *, causal: bool = False, scale: float | None = None,
                   layout: str = "zigzag", kernel="numpy", group=None):
    """This rank's (o, lse); arguments and results as `ring.ring_forward`'s (o and lse
    in the kernel's dtypes: q's dtype for o)."""
    torch = require_torch()
    q, kern, scale, rank, shards, k_full, v_full = _setup(q, k, v, layout, kernel, scale,
                                                          group)
    n = k_full.shape[-2]
    o, lse = torch.empty_like(q), None
    for qs, stop, masked in _blocks(shards[rank], n, causal):
        o_b, lse_b = kern.forward(q[..., qs, :].contiguous(), k_full[..., :stop, :].contiguous(),
                                  v_full[..., :stop, :].contiguous(), causal=masked, scale=scale)
        if lse is None:
            lse = torch.empty(q.shape[:-1], dtype=lse_b.dtype, device=q.device)
        o[..., qs, :], lse[..., qs] = o_b, lse_b
    return o, lse


def gather_backward(q, k, v, o, lse, do, *, causal: bool = False, scale: float | None = None,
                    layout: str = "zigzag", kernel="numpy", group=None):
    """This rank's (dq, dk, dv), as `ring.ring_backward`'s."""
    torch = require_torch()
    q, kern, scale, rank, shards, k_full, v_full = _setup(q, k, v, layout, kernel, scale,
                                                          group)
    o, lse, do = check_saved(q, o, lse, do)
    n = k_full.shape[-2]
    dq = torch.empty_like(q)
    dk_full, dv_full = torch.zeros_like(k_full), torch.zeros_like(v_full)
    for qs, stop, masked in _blocks(shards[rank], n, causal):
        dq_b, dk_b, dv_b = kern.backward(
            q[..., qs, :].contiguous(), k_full[..., :stop, :].contiguous(),
            v_full[..., :stop, :].contiguous(), o[..., qs, :].contiguous(),
            lse[..., qs].contiguous(), do[..., qs, :].contiguous(), causal=masked, scale=scale)
        dq[..., qs, :] = dq_b
        dk_full[..., :stop, :] += dk_b
        dv_full[..., :stop, :] += dv_b
    torch.distributed.all_reduce(dk_full, group=group)
    torch.distributed.all_reduce(dv_full, group=group)
    return dq, shard(dk_full, shards[rank]), shard(dv_full, shards[rank])
