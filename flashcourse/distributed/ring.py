"""Ring attention: each rank keeps its queries, the K/V blocks travel round the ring.

World ranks hold the sequence cut by a layout (`shards.zigzag_shards`: rank r holds
chunks r and 2 world - 1 - r, which balances causal work; or `contiguous_shards`). At
step s = 0 .. world - 1 rank r holds the K/V block of rank r - s; it starts sending
that block on to rank r + 1 (and receiving the next one from r - 1, `comm.ring_pass`),
then, while the block travels, attends its queries to the block it has, chunk pair by
chunk pair:

    key chunk before the query chunk   every pair visible: no mask
    the same chunk                     causal, square (Tq = Tk)
    key chunk after the query chunk    hidden: skipped

and merges the pair's partial (o, lse) into its running state (`merge.merge_sigmoid`).

The backward (as ring-flash-attention does it) keeps q, o, lse, do (the forward's global
o and lse) at home; K/V travel again, and each block's dk, dv accumulators travel with it
(one step behind, so their transfer too overlaps the next step's compute): after the
last step one more hop brings every rank's dk, dv home. dq sums locally. The kernel's
backward computes D = rowsum(do o) from the global o and do, so its share of dq, dk, dv
is exact.
"""

from __future__ import annotations

from . import comm
from .kernels import check_qkv_shards, check_saved, get_kernel, require_torch
from .merge import merge_sigmoid
from .shards import LAYOUTS, chunk_ids, pair_kind

__all__ = ["ring_forward", "ring_backward"]


def _check_layout(layout):
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {sorted(LAYOUTS)}, got {layout!r}")
    return layout


def _scale(scale, d):
    return d ** -0.5 if scale is None else float(scale)


def _pairs(q_chunks, k_chunks, causal):
    """(q slice, k slice, causal) for every visible pair of local chunks; the slices
    index the local rows of the query block and of the key block."""
    if not causal:
        yield slice(None), slice(None), False
        return
    q0 = 0
    for qc, q_len in q_chunks:
        k0 = 0
        for kc, k_len in k_chunks:
            kind = pair_kind(qc, kc)
            if kind != "hidden":
                yield slice(q0, q0 + q_len), slice(k0, k0 + k_len), kind == "diagonal"
            k0 += k_len
        q0 += q_len


def _chunks(rank, world, layout, shards):
    return list(zip(chunk_ids(rank, world, layout),
                    (stop - start for start, stop in shards[rank])))


def ring_forward(q, k, v, *, causal: bool = False, scale: float | None = None,
                 layout: str = "zigzag", kernel="numpy", group=None):
    """This rank's (o, lse) of attention over the whole sequence.

    q, k, v: this rank's shard (B, H, T_local, d) of the sequence cut by `layout`
        (`shards.shard(x, shards.layout_shards(n, world, layout)[rank])`), contiguous
        float32/float64 CPU tensors for the CPU kernels.
    causal: the global causal mask (Tq = Tk = n, so bottom-right = top-left).
    scale: default 1 / sqrt(d). kernel: "numpy", "numba" or an object (`kernels`).
    Returns o (B, H, T_local, d) in the accumulator dtype (float64 for float64 input,
    else float32) and lse (B, H, T_local), natural log.
    """
    torch = require_torch()
    q, k, v = check_qkv_shards(q, k, v)
    layout, kern = _check_layout(layout), get_kernel(kernel)
    scale = _scale(scale, q.shape[-1])
    rank, world = comm.group_rank_world(group)
    shards = comm.agree_on_shapes(q, layout, group)
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    o = torch.zeros(q.shape, dtype=acc, device=q.device)
    lse = torch.full(q.shape[:-1], float("-inf"), dtype=acc, device=q.device)
    q_chunks = _chunks(rank, world, layout, shards)
    k_cur, v_cur = k, v
    for step in range(world):
        src = (rank - step) % world
        if step < world - 1:                   # start moving the block on: overlaps compute
            nxt_len = sum(b - a for a, b in shards[(src - 1) % world])
            shape = k.shape[:-2] + (nxt_len, k.shape[-1])
            (k_nxt, v_nxt), handles = comm.ring_pass([k_cur, v_cur], [shape, shape], group)
        for qs, ks, diag in _pairs(q_chunks, _chunks(src, world, layout, shards), causal):
            o_b, lse_b = kern.forward(q[..., qs, :].contiguous(), k_cur[..., ks, :].contiguous(),
                                      v_cur[..., ks, :].contiguous(), causal=diag, scale=scale)
            o[..., qs, :], lse[..., qs] = merge_sigmoid(o[..., qs, :], lse[..., qs],
                                                        o_b.to(acc), lse_b.to(acc))
        if step < world - 1:
            comm.wait_all(handles)
            k_cur, v_cur = k_nxt, v_nxt
    return o, lse


def ring_backward(q, k, v, o, lse, do, *, causal: bool = False, scale: float | None = None,
                  layout: str = "zigzag", kernel="numpy", group=None):
    """This rank's (dq, dk, dv), shaped like its q, k, v, in q's dtype.

    q, k, v, causal, scale, layout, kernel: as for `ring_forward`; o, lse: its outputs
    on this rank (o cast to q's dtype); do: dL/do for this rank's rows, like q.
    """
    torch = require_torch()
    q, k, v = check_qkv_shards(q, k, v)
    o, lse, do = check_saved(q, o, lse, do)
    layout, kern = _check_layout(layout), get_kernel(kernel)
    scale = _scale(scale, q.shape[-1])
    rank, world = comm.group_rank_world(group)
    shards = comm.agree_on_shapes(q, layout, group)
    q_chunks = _chunks(rank, world, layout, shards)
    length = [sum(b - a for a, b in r) for r in shards]
    dq = torch.zeros_like(q)
    k_cur, v_cur = k, v
    dkv_in, dkv_handles = None, []
    for step in range(world):
        src = (rank - step) % world
        nxt_shape = k.shape[:-2] + (length[(src - 1) % world], k.shape[-1])
        if step < world - 1:
            (k_nxt, v_nxt), handles = comm.ring_pass([k_cur, v_cur], [nxt_shape] * 2, group)
        dk_part, dv_part = torch.zeros_like(k_cur), torch.zeros_like(v_cur)
        for qs, ks, diag in _pairs(q_chunks, _chunks(src, world, layout, shards), causal):
            dq_b, dk_b, dv_b = kern.backward(
                q[..., qs, :].contiguous(), k_cur[..., ks, :].contiguous(),
                v_cur[..., ks, :].contiguous(), o[..., qs, :].contiguous(),
                lse[..., qs].contiguous(), do[..., qs, :].contiguous(), causal=diag, scale=scale)
            dq[..., qs, :] += dq_b
            dk_part[..., ks, :] += dk_b
            dv_part[..., ks, :] += dv_b
        comm.wait_all(dkv_handles)               # the accumulators of this block so far
        if dkv_in is not None:
            dk_part += dkv_in[0]
            dv_part += dkv_in[1]
        # send this block's dk, dv on with it (tags 2, 3: apart from k, v); the last
        # send brings every block home to its own rank
        if world == 1:
            dkv_in, dkv_handles = (dk_part, dv_part), []
        else:
            dkv_in, dkv_handles = comm.ring_pass([dk_part, dv_part], [nxt_shape] * 2, group,
                                                 tag=2)
        if step < world - 1:
            comm.wait_all(handles)
            k_cur, v_cur = k_nxt, v_nxt
    comm.wait_all(dkv_handles)
    return dq, dkv_in[0], dkv_in[1]
