"""The communication the distributed designs use, kept apart from the attention.

    agree_on_shapes(q, layout, group)   every rank's (B, H, T_local, d) and dtype, checked
                                        to fit one sequence cut by `layout`; each rank's
                                        global ranges
    ring_pass(tensors, shapes, group)   isend each tensor to rank + 1, irecv the block of
                                        rank - 1 into new tensors; returns at once (the
                                        caller computes meanwhile, then `wait_all`)
    all_gather_seq(x, lengths, group)   every rank's x (sequence lengths may differ)
    all_to_all_seq(send, lengths, longest, group) send[j] to rank j, receive one tensor from each

All on torch.distributed (gloo on the CPU, NCCL on GPUs). gloo's all_gather and
all_to_all want equal sizes, so ragged sequence shards are padded to the longest along
the sequence axis (-2) and trimmed after.
"""

from __future__ import annotations

from .kernels import require_torch
from .shards import layout_shards

__all__ = ["group_rank_world", "agree_on_shapes", "ring_pass", "wait_all",
           "all_gather_seq", "all_to_all_seq"]

_DTYPES = ("float32", "float64", "float16", "bfloat16")


def group_rank_world(group=None):
    """(rank, world size) in `group` (default: the whole world); RuntimeError when
    torch.distributed is not initialised."""
    torch = require_torch()
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("torch.distributed is not initialised: call this inside "
                           "flashcourse.distributed.launch.run(world_size, fn, ...) or "
                           "after torch.distributed.init_process_group")
    return dist.get_rank(group), dist.get_world_size(group)


def agree_on_shapes(q, layout: str, group=None) -> list:
    """Every rank's ranges [[(start, stop), ...], ...] of the sequence cut by `layout`,
    after checking (on every rank alike, so that all raise together) that all ranks
    hold (B, H, T_local, d) of one B, H, d and dtype and that the T_local fit the layout."""
    torch = require_torch()
    rank, world = group_rank_world(group)
    mine = torch.tensor(list(q.shape) + [_DTYPES.index(str(q.dtype).split(".")[-1])],
                        dtype=torch.int64, device=q.device)   # NCCL: a GPU tensor
    every = [torch.empty_like(mine) for _ in range(world)]
    torch.distributed.all_gather(every, mine, group=group)
    every = [tuple(int(x) for x in t) for t in every]
    b, h, _, d, dt = every[0]
    for r, (b_r, h_r, _, d_r, dt_r) in enumerate(every):
        if (b_r, h_r, d_r, dt_r) != (b, h, d, dt):
            raise ValueError(f"q must have one B, H, d and dtype on every rank: rank 0 has "
                             f"(B, H, d) = {(b, h, d)} {_DTYPES[dt]}, rank {r} has "
                             f"{(b_r, h_r, d_r)} {_DTYPES[dt_r]}")
    lengths = [e[2] for e in every]
    n = sum(lengths)
    shards = layout_shards(n, world, layout)
    want = [sum(stop - start for start, stop in ranges) for ranges in shards]
    if lengths != want:
        raise ValueError(f"q's T_local per rank {lengths} do not fit the {layout} layout of "
                         f"n={n} positions over {world} ranks, which holds {want} "
                         f"(shard with flashcourse.distributed.shards.shard(x, "
                         f"layout_shards(n, world, {layout!r})[rank]))")
    return shards


def ring_pass(tensors, shapes, group=None, tag: int = 0):
    """Send each tensor to rank + 1 and receive, from rank - 1, tensors of `shapes`
    (same dtypes). Returns (received, handles) at once; `wait_all(handles)` before
    reading `received` or changing `tensors`. Tags tag, tag + 1, ... keep the tensors
    (and concurrent passes with other tags) apart."""
    torch = require_torch()
    dist = torch.distributed
    rank, world = group_rank_world(group)
    nxt, prev = (rank + 1) % world, (rank - 1) % world
    if group is not None:
        nxt, prev = (dist.get_global_rank(group, r) for r in (nxt, prev))
    handles, received = [], []
    for i, (x, shape) in enumerate(zip(tensors, shapes)):
        buf = torch.empty(shape, dtype=x.dtype, device=x.device)
        handles.append(dist.isend(x, nxt, group=group, tag=tag + i))
        handles.append(dist.irecv(buf, prev, group=group, tag=tag + i))
        received.append(buf)
    return received, handles


def wait_all(handles) -> None:
    for handle in handles:
        handle.wait()


def _pad_seq(x, length):
    torch = require_torch()
    if x.shape[-2] == length:
        return x.contiguous()
    pad = torch.zeros(x.shape[:-2] + (length - x.shape[-2], x.shape[-1]),
                      dtype=x.dtype, device=x.device)
    return torch.cat([x, pad], dim=-2).contiguous()


def all_gather_seq(x, lengths, group=None) -> list:
    """[x of rank 0, x of rank 1, ...]: x (..., T_local, d), T_local = lengths[rank]."""
    torch = require_torch()
    longest = max(lengths)
    padded = _pad_seq(x, longest)
    out = [torch.empty_like(padded) for _ in lengths]
    torch.distributed.all_gather(out, padded, group=group)
    return [o[..., :t, :] for o, t in zip(out, lengths)]


def all_to_all_seq(send, lengths, longest: int, group=None) -> list:
    """send[j] (..., T_j', d) goes to rank j; returns [from rank 0, from rank 1, ...],
    the one from rank i (..., lengths[i], d). All send[j] have one shape but for -2;
    `longest` (every rank alike) >= every T along -2: each is padded to it."""
    torch = require_torch()
    padded = [_pad_seq(s, longest) for s in send]
    out = [torch.empty_like(padded[0]) for _ in lengths]
    torch.distributed.all_to_all(out, padded, group=group)
    return [o[..., :t, :] for o, t in zip(out, lengths)]
