"""The head-parallel design (DeepSpeed-Ulysses): trade sequence shards for head shards.

Each rank holds its sequence shard of q, k, v with all H heads (B, H, T_local, d). One
all_to_all (`comm.all_to_all_seq`) sends rank j heads [j H/P, (j + 1) H/P) of this
rank's rows; after it every rank holds H/P heads of the whole sequence (put back in
order with `shards.unshard`) and runs ordinary full attention on them, causal or not;
a second all_to_all brings the output back to sequence shards. The backward does the
same with q, k, v, o, lse, do in and dq, dk, dv out. Needs H divisible by the world
size P; communication: a few all_to_all of the activations, none per key block.
"""

from __future__ import annotations

from . import comm
from .kernels import check_qkv_shards, check_saved, get_kernel, require_torch
from .shards import LAYOUTS, shard, unshard

__all__ = ["ulysses_forward", "ulysses_backward"]


class _HeadSwap:
    """The two all_to_all of Ulysses for one set of shards."""

    def __init__(self, q, layout, group):
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {sorted(LAYOUTS)}, got {layout!r}")
        self.rank, self.world = comm.group_rank_world(group)
        heads = q.shape[1]
        if heads % self.world:
            raise ValueError(f"q has H={heads} heads, which the world size {self.world} does "
                             f"not divide: Ulysses gives each rank H / world heads "
                             f"(choose H divisible by the world size, or use ring or "
                             f"all-gather attention)")
        self.group, self.hp = group, heads // self.world
        self.shards = comm.agree_on_shapes(q, layout, group)
        self.lengths = [sum(b - a for a, b in r) for r in self.shards]
        self.longest = max(self.lengths)

    def to_heads(self, x):
        """(B, H, T_local, ...) sequence shard -> (B, H/P, n, ...) head shard."""
        flat = x if x.dim() == 4 else x.unsqueeze(-1)
        send = [flat[:, j * self.hp:(j + 1) * self.hp] for j in range(self.world)]
        got = comm.all_to_all_seq(send, self.lengths, self.longest, self.group)
        full = unshard(got, self.shards).contiguous()
        return full if x.dim() == 4 else full.squeeze(-1)

    def to_sequence(self, x):
        """(B, H/P, n, ...) head shard -> (B, H, T_local, ...) sequence shard."""
        torch = require_torch()
        flat = x if x.dim() == 4 else x.unsqueeze(-1)
        send = [shard(flat, ranges) for ranges in self.shards]
        mine = self.lengths[self.rank]
        got = comm.all_to_all_seq(send, [mine] * self.world, self.longest, self.group)
        out = torch.cat(got, dim=1).contiguous()
        return out if x.dim() == 4 else out.squeeze(-1)


def ulysses_forward(q, k, v, *, causal: bool = False, scale: float | None = None,
                    layout: str = "zigzag", kernel="numpy", group=None):
    """This rank's (o, lse), as `ring.ring_forward`'s; ValueError when the world size
    does not divide H (q.shape[1])."""
    q, k, v = check_qkv_shards(q, k, v)
    kern = get_kernel(kernel)
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    swap = _HeadSwap(q, layout, group)
    o, lse = kern.forward(swap.to_heads(q), swap.to_heads(k), swap.to_heads(v),
                          causal=causal, scale=scale)
    return swap.to_sequence(o.contiguous()), swap.to_sequence(lse.contiguous())


def ulysses_backward(q, k, v, o, lse, do, *, causal: bool = False, scale: float | None = None,
                     layout: str = "zigzag", kernel="numpy", group=None):
    """This rank's (dq, dk, dv), as `ring.ring_backward`'s."""
    q, k, v = check_qkv_shards(q, k, v)
    o, lse, do = check_saved(q, o, lse, do)
    kern = get_kernel(kernel)
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    swap = _HeadSwap(q, layout, group)
    grads = kern.backward(*(swap.to_heads(x) for x in (q, k, v, o)), swap.to_heads(lse),
                          swap.to_heads(do), causal=causal, scale=scale)
    return tuple(swap.to_sequence(g.contiguous()) for g in grads)
