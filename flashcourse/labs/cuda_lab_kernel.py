"""The lab kernel of lab 06: a miniature of `flashcourse.cuda.cuda_core.flash` with four slots.

A block of NT = 8 threads computes BR = 4 query rows against key tiles of BC = 8 keys.
Thread `tid` is column group tx = tid % CT and row group ty = tid // CT (CT = 4, RT = 2);
it owns a TM x TN = 2 x 2 micro-tile of scores (rows ty + RT*i, key columns tx + CT*j)
and a TM x TD = 2 x 2 micro-tile of the output (columns tx + CT*j of the D = 8 padded
head dimension). `make_lab_kernel` plugs the learner's micro_tile_scores, row_max,
row_sum and online_update (and optionally key_blocks) into the skeleton; the checkers
are in `flashcourse.labs.cuda_kernel`, the access tallies in `flashcourse.labs.cuda_show`.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import cuda, float32

from ..constants import F0, NEG_INF
from ..cuda.common._device import shfl_xor as _common_shfl_xor
from ..cuda.common._launch import simulator_lock
from ..geometry import ceil_div
from .kernel_source import kernel_guard

BR = 4                      # query rows per block
BC = 8                      # keys per tile
CT = 4                      # threads sharing a row (column groups)
RT = 2                      # row groups
NT = CT * RT                # threads per block
TM = BR // RT               # micro-tile rows per thread
TN = BC // CT               # micro-tile key columns per thread
D = 8                       # padded head dimension (d <= D)
TD = D // CT                # output columns per thread
# Array sizes are names fixed before a kernel is compiled: the GPU compiler rejects a size
# computed inside the kernel (TM * TD there), which the simulator accepts.
TMTD = TM * TD              # a thread's output accumulators
TMTN = TM * TN              # a thread's scores
# -- shuffles: real on a GPU, through shared memory on the simulator ------------------------

#: The exchange step of a butterfly, shfl_xor(x, offset, scratch, tid): a warp shuffle on a
#: GPU, shared memory on the simulator (which has no shuffles). All threads of the block must
#: call it together. The lab's name for the course's one (flashcourse/cuda/common/_device.py).
shfl_xor = _common_shfl_xor


@cuda.jit(device=True)
def all_key_blocks(q0, tq, tk, causal, off):
    """Key tiles a query block visits without causal skipping: all of them."""
    return (tk + BC - 1) // BC


# -- the lab kernel -----------------------------------------------------------------------

def _device(fn):
    if hasattr(fn, "py_func") or type(fn).__name__ == "FakeCUDAKernel":
        return fn
    return cuda.jit(device=True)(fn)


@lru_cache(maxsize=None)
def make_lab_kernel(scores, rmax, rsum, update, key_blocks):
    """The lab kernel with the learner's four parts (and a key_blocks rule) plugged in."""

    def lab_kernel(q, k, v, o, lse, visits, tq, tk, d, scale, causal, off, kv_start):
        qs = cuda.shared.array((D, BR), float32)        # Q_i transposed, pre-scaled
        ks = cuda.shared.array((BC, D), float32)        # K_j
        vs = cuda.shared.array((BC, D), float32)        # V_j
        ps = cuda.shared.array((BR, BC), float32)       # P of this tile
        scratch = cuda.shared.array(NT, float32)        # shuffle exchange (simulator)
        tid = cuda.threadIdx.x
        tx = tid % CT
        ty = tid // CT
        h = cuda.blockIdx.y
        q0 = cuda.blockIdx.x * BR
        for e in range(tid, BR * D, NT):                # global reads: Q_i, once
            r = e // D
            c = e % D
            val = F0
            if q0 + r < tq and c < d:
                val = q[h, q0 + r, c] * scale
            qs[c, r] = val
        acc = cuda.local.array(TMTD, float32)           # (TM, TD) unnormalised O
        m = cuda.local.array(TM, float32)               # running row max
        lp = cuda.local.array(TM, float32)              # this thread's part of the row sum
        s = cuda.local.array(TMTN, float32)             # (TM, TN) scores -> probabilities
        qa = cuda.local.array(TM, float32)
        kb = cuda.local.array(TN, float32)
        for x in range(TM * TD):
            acc[x] = F0
        for i in range(TM):
            m[i] = NEG_INF
            lp[i] = F0
        n_kb = key_blocks(q0, tq, tk, causal, off)
        if tid == 0:
            visits[h, cuda.blockIdx.x] = n_kb
        for jb in range(n_kb):
            k0 = jb * BC
            cuda.syncthreads()                          # done with the previous K, V, P
            for e in range(tid, BC * D, NT):            # global reads: K_j, V_j
                r = e // D
                c = e % D
                kv = F0
                vv = F0
                if k0 + r < tk and c < d:
                    kv = k[h, k0 + r, c]
                    vv = v[h, k0 + r, c]
                ks[r, c] = kv
                vs[r, c] = vv
            cuda.syncthreads()
            scores(qs, ks, s, qa, kb, ty, tx)           # YOUR register micro-tile product
            for i in range(TM):                         # ragged, left padding, causal
                row = q0 + ty + RT * i
                for j in range(TN):
                    col = k0 + tx + CT * j
                    if col >= tk or col < kv_start or (causal != 0 and col > row + off):
                        s[i * TN + j] = NEG_INF
            for i in range(TM):
                mx = s[i * TN]
                for j in range(1, TN):
                    mx = max(mx, s[i * TN + j])
                mx = rmax(mx, scratch, tid)             # YOUR row max across threads
                update(s, acc, m, lp, i, mx)            # YOUR online update
            for i in range(TM):
                for j in range(TN):
                    ps[ty + RT * i, tx + CT * j] = s[i * TN + j]
            cuda.syncthreads()
            for c in range(BC):                         # acc += P V_j
                for i in range(TM):
                    pv = ps[ty + RT * i, c]
                    for j in range(TD):
                        acc[i * TD + j] += pv * vs[c, tx + CT * j]
        for i in range(TM):                             # epilogue
            row = q0 + ty + RT * i
            lt = rsum(lp[i], scratch, tid)              # YOUR row sum across threads
            if row < tq:
                if lt > F0:
                    for j in range(TD):
                        col = tx + CT * j
                        if col < d:
                            o[h, row, col] = acc[i * TD + j] / lt
                    if tx == 0:
                        lse[h, row] = m[i] + math.log(lt)
                else:
                    for j in range(TD):
                        col = tx + CT * j
                        if col < d:
                            o[h, row, col] = F0
                    if tx == 0:
                        lse[h, row] = NEG_INF

    return cuda.jit(lab_kernel)


def lab_forward(parts, q, k, v, *, causal=False, kv_start=0, key_blocks=None):
    """(o, lse, visits) of q (Tq, d), k, v (Tk, d) with the lab kernel and your parts.

    parts: (micro_tile_scores, row_max, row_sum, online_update); key_blocks: your going-
    further rule, or None for "every key tile". Keys before kv_start are padding (masked).
    visits (blocks,) is the number of key tiles each query block visited.
    """
    names = ("micro_tile_scores", "row_max", "row_sum", "online_update")
    for fn, name in zip(parts, names):
        kernel_guard(fn, name)
    if key_blocks is not None:
        kernel_guard(key_blocks, "key_blocks")
    q, k, v = (np.asarray(x, np.float32) for x in (q, k, v))
    tq, d = q.shape
    tk = k.shape[0]
    if d > D:
        raise ValueError(f"the lab kernel takes d <= {D}, got d={d}")
    n_qb = ceil_div(tq, BR)
    qd, kd, vd = (cuda.to_device(np.ascontiguousarray(x[None])) for x in (q, k, v))
    o = cuda.to_device(np.full((1, tq, d), np.nan, np.float32))     # poisoned
    lse = cuda.to_device(np.full((1, tq), np.nan, np.float32))
    visits = cuda.to_device(np.zeros((1, n_qb), np.int32))
    kern = make_lab_kernel(*(_device(f) for f in parts),
                           _device(key_blocks) if key_blocks is not None else all_key_blocks)
    with simulator_lock():         # one simulated kernel at a time (cuda/common/_launch.py)
        kern[(n_qb, 1), NT](qd, kd, vd, o, lse, visits, np.int32(tq), np.int32(tk),
                            np.int32(d), np.float32(1.0 / math.sqrt(d)),
                            np.int32(1 if causal else 0), np.int32(tk - tq),
                            np.int32(kv_start))
    return o.copy_to_host()[0], lse.copy_to_host()[0], visits.copy_to_host()[0]
