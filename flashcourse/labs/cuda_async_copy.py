"""Asynchronous copies (`cp.async`) for lab 05's puzzle 13, with a simulator twin that makes
their asynchrony visible.

On a GPU these are the course's inline-PTX wrappers (`flashcourse.cuda.ptx.smem_ops`, where
`cp.async` is written once):

    cp_async16(sm, sidx, g, gidx, nbytes)   cp.async.cg.shared.global: 16 bytes (4 float32)
                                            g[gidx : gidx + 4] -> sm[sidx : sidx + 4] of 1-D
                                            arrays, WITHOUT passing through registers and
                                            without waiting; nbytes < 16 reads only nbytes
                                            and fills the rest with zeros (nbytes = 0: 16
                                            zero bytes, no read at all: rows past the end)
    commit_group()                          cp.async.commit_group: the copies this thread
                                            issued since the last commit form a group
    wait_all()                              cp.async.wait_group 0: this thread waits until
                                            all its committed groups have landed

Numba's simulator runs a copy at once, so a kernel that reads the tile before waiting
would still work there. The twin here does what the hardware allows: a copy is only
*recorded* when issued, and lands (its global reads and shared writes happen, in the
waiting thread, after the barriers it has passed) when its thread waits for a group that
holds it. A copy that was never committed, or never waited for, never lands: its shared
floats keep the simulator's NaN. And it refuses what PTX refuses: `cp.async` of 16 bytes
needs both addresses 16-byte aligned (sidx and gidx multiples of 4 floats).

On the simulator each copy is noted on the access trace (`cuda_trace.note`): "cp.async
issued", "cp.async landed", "cp.async uncommitted at a wait".
"""

from __future__ import annotations

import threading

import numpy as np

from ..gpu import using_simulator
from .cuda_trace import note

FLOATS_PER_COPY = 4          # 16 bytes of float32

MISALIGNED = "not 16-byte aligned"


def _issue(sm, sidx, g, gidx, nbytes):
    """Record one copy in the simulated thread (it lands at a wait)."""
    sidx, gidx, nbytes = int(sidx), int(gidx), int(nbytes)
    if sidx % FLOATS_PER_COPY or gidx % FLOATS_PER_COPY:
        raise ValueError(f"cp.async of 16 bytes from g[{gidx}] to sm[{sidx}]: an address "
                         f"{MISALIGNED} (both indices must be multiples of 4 float32)")
    if not 0 <= nbytes <= 16 or nbytes % 4:
        raise ValueError(f"cp.async with nbytes = {nbytes}: expected 0, 4, 8, 12 or 16")
    thread = threading.current_thread()
    pending = getattr(thread, "_cp_pending", None)
    if pending is None:
        pending = thread._cp_pending = []
        thread._cp_committed = []
    pending.append((sm, sidx, g, gidx, nbytes))
    note("cp.async issued")


def _commit():
    thread = threading.current_thread()
    pending = getattr(thread, "_cp_pending", None)
    if pending:
        thread._cp_committed.append(list(pending))
        pending.clear()


def _wait_all():
    thread = threading.current_thread()
    if getattr(thread, "_cp_pending", None):
        note("cp.async uncommitted at a wait", len(thread._cp_pending))
    for group in getattr(thread, "_cp_committed", ()):
        for sm, sidx, g, gidx, nbytes in group:
            for i in range(FLOATS_PER_COPY):
                sm[sidx + i] = g[gidx + i] if 4 * i < nbytes else np.float32(0)
            note("cp.async landed")
    if getattr(thread, "_cp_committed", None):
        thread._cp_committed = []


def async_copy_ops():
    """(cp_async16, commit_group, wait_all) for kernels: the simulator twin (copies land at
    the wait) or the GPU's inline PTX."""
    from numba import cuda
    if using_simulator():
        return tuple(cuda.jit(device=True)(f) for f in (_issue, _commit, _wait_all))
    from ..cuda.ptx.smem_ops import intrinsics
    ins = intrinsics()
    return ins["cp_async16"], ins["commit"], ins["wait_all"]
