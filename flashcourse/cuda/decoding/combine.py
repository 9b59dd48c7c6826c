"""combine: the Flash-Decoding combine kernel, one thread block per query row, merging the
partial states (o_s normalised, lse_s) that the split kernels wrote:

    lse = m + log sum_s e^(lse_s - m),   o = sum_s w_s o_s / sum_s w_s,   w_s = e^(lse_s - m)

(m the largest lse_s; flashcourse.decode.combine is the numpy version). `combine_row` is one
row's merge as a device function, shared by the contiguous combine kernel here and the paged
one (`paged_kernels`); `decode_kernels` re-exports these names. `slot_merge` is the same merge
inside one split kernel's block, of the running states (m, l, unnormalised o) that its warps
or key slots left in shared memory.
"""

from __future__ import annotations

import math
from functools import lru_cache

from numba import cuda
from numba import uint64 as U

from ...constants import F0, NEG_INF
from ...geometry import ceil_div
from ..common._device import inlined


@inlined
def combine_row(o_part, lse_part, o, lse, s0, n_splits, prow, orow, d, tid, NT):
    """Merge the partial states o_part[s0 + s, prow], lse_part[s0 + s, prow] (s < n_splits)
    into o[orow], lse[orow]: lse = m + log sum e^(lse_s - m), o = sum w_s o_s / sum w_s.
    The block's NT threads loop over the columns; shared by the contiguous combine kernel
    and the paged one (`paged_kernels`)."""
    mx = NEG_INF
    for s in range(n_splits):
        mx = max(mx, lse_part[U(s0 + s), U(prow)])
    m_use = mx if mx != NEG_INF else F0
    total = F0
    for s in range(n_splits):
        total += math.exp(lse_part[U(s0 + s), U(prow)] - m_use)
    for c in range(tid, d, NT):
        at = F0
        for s in range(n_splits):
            w = math.exp(lse_part[U(s0 + s), U(prow)] - m_use)
            at += w * o_part[U(s0 + s), U(prow), U(c)]
        o[U(orow), U(c)] = at / total if total != F0 else F0     # NaN stays NaN
    if tid == 0:
        lse[U(orow)] = m_use + math.log(total) if total != F0 else NEG_INF


def slot_merge(simulator: bool, exp2, slots: int, rows: int, d_pad: int, offsets):
    """merge(sm, rr, c) -> (mx, lt, at): row rr's states of the `slots` warps (or key
    slots) of a split kernel's block, in float32 shared memory sm at offsets = (M, L, A):
    m (log2 units) at M + slot rows + rr, l at L + ..., unnormalised o at A + (slot rows +
    rr) d_pad + c; merged as the combine does: mx = the largest m (-inf: no slot saw a
    key), lt = sum l 2^(m - mx), at = sum o[c] 2^(m - mx) (mx = -inf taken as 0)."""
    jit = cuda.jit(device=True) if simulator else cuda.jit(device=True, forceinline=True)
    M_OFF, L_OFF, A_OFF = offsets
    EXP2, N, ROWS, D = exp2, slots, rows, d_pad

    @jit
    def merge(sm, rr, c):
        mx = NEG_INF
        for w in range(N):
            mx = max(mx, sm[U(M_OFF + w * ROWS + rr)])
        m_use = mx if mx != NEG_INF else F0
        lt = F0
        at = F0
        for w in range(N):
            wt = EXP2(sm[U(M_OFF + w * ROWS + rr)] - m_use)
            lt += sm[U(L_OFF + w * ROWS + rr)] * wt
            at += sm[U(A_OFF + (w * ROWS + rr) * D + c)] * wt
        return mx, lt, at

    return merge


@lru_cache(maxsize=None)
def make_combine_kernel(threads: int):
    """One block per query row; threads loop over the columns (`combine_row`). Arguments:
    o_part (S, rows, d), lse_part (S, rows), o (rows, d), lse (rows), S, d."""
    NT = threads

    def decode_combine(o_part, lse_part, o, lse, n_splits, d):
        row = cuda.blockIdx.x
        combine_row(o_part, lse_part, o, lse, 0, n_splits, row, row, d, cuda.threadIdx.x, NT)

    decode_combine.__name__ = f"decode_combine_t{NT}"
    return cuda.jit(decode_combine)


def combine_threads(d: int) -> int:
    """Threads of a combine block: d rounded up to a warp, at most 256."""
    return min(256, 32 * ceil_div(d, 32))
