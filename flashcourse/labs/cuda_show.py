"""GPU-Puzzles-style tallies for lab 06: each thread's memory accesses, yours vs expected.

Shared-memory reads and register writes of the learner's micro_tile_scores are counted
while it runs one thread at a time as plain Python (the code the simulator runs); the
whole lab kernel's global reads and writes are counted on the simulator, whose threads
are Python threads that know their threadIdx.
"""

from __future__ import annotations

import math
import types

import numpy as np

from ..cuda.common._launch import simulator_lock
from ..geometry import ceil_div
from ..gpu import using_simulator
from .cuda_lab_kernel import (BC, BR, CT, NT, RT, TD, TM, TN, D, _device,
                              all_key_blocks, make_lab_kernel)
from .kernel_source import py_func


class Tally(np.ndarray):
    """An array that counts element reads and writes (for show() and the reuse check)."""

    def __array_finalize__(self, obj):
        self.reads = getattr(obj, "reads", 0)
        self.writes = getattr(obj, "writes", 0)

    def __getitem__(self, index):
        self.reads += 1
        return np.ndarray.__getitem__(self, index)

    def __setitem__(self, index, value):
        self.writes += 1
        np.ndarray.__setitem__(self, index, value)


def _tally(array):
    t = np.array(array, dtype=np.float32).view(Tally)
    t.reads = t.writes = 0
    return t


def _as_python(fn):
    """The learner's device function as plain Python (its float32 constants work as-is)."""
    inner = py_func(fn)
    if not isinstance(inner, types.FunctionType):
        raise TypeError("expected a device function written with @cuda.jit(device=True)")
    return inner


def tally_scores(fn, seed=0):
    """Per thread: (qs reads, ks reads, s writes), the learner's s, and the expected s."""
    rng = np.random.default_rng(seed)
    qs = rng.standard_normal((D, BR)).astype(np.float32)        # (D, BR)
    ks = rng.standard_normal((BC, D)).astype(np.float32)        # (BC, D)
    py = _as_python(fn)
    counts, yours, expected = {}, {}, {}
    for tid in range(NT):
        tx, ty = tid % CT, tid // CT
        tq_, tk_ = _tally(qs), _tally(ks)
        s = _tally(np.full(TM * TN, 7.0))                       # stale values from "last tile"
        py(tq_, tk_, s, np.zeros(TM, np.float32), np.zeros(TN, np.float32), ty, tx)
        counts[(ty, tx)] = (tq_.reads, tk_.reads, s.writes)
        yours[(ty, tx)] = np.asarray(s, np.float64).copy()
        rows = ty + RT * np.arange(TM)
        cols = tx + CT * np.arange(TN)
        expected[(ty, tx)] = (qs[:, rows].T.astype(np.float64) @ ks[cols].T.astype(np.float64)
                              ).reshape(-1)
    return counts, yours, expected


EXPECTED_COUNTS = (D * TM, D * TN)      # per thread: reads of qs, reads of ks (from registers)


_ACTIVE_TALLY: dict = {}                # (block, thread, 'read'|'write') -> count, while tallying


class GlobalTally(np.ndarray):
    """A global-memory array that counts, per simulated thread, its element reads and writes
    (the simulator runs each GPU thread as a Python thread that knows its threadIdx; it may
    hand the kernel a copy of the array, so the counts go to one module-level table)."""

    def _count(self, what):
        import threading
        thread = threading.current_thread()
        idx = getattr(thread, "threadIdx", None)
        if idx is not None:
            key = (int(thread.blockIdx.x), int(idx.x), what)
            _ACTIVE_TALLY[key] = _ACTIVE_TALLY.get(key, 0) + 1

    def __getitem__(self, index):
        self._count("read")
        return np.ndarray.__getitem__(self, index)

    def __setitem__(self, index, value):
        self._count("write")
        np.ndarray.__setitem__(self, index, value)


def tally_global(parts, t_key: int = 2 * BC):
    """Per thread of one block: global (reads, writes), counted while the lab kernel runs on
    the simulator with Tq = BR, Tk = t_key, d = D; and the expected counts. None on a GPU."""
    if not using_simulator():
        return None
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(shape).astype(np.float32).view(GlobalTally)
              for shape in ((1, BR, D), (1, t_key, D), (1, t_key, D), (1, BR, D), (1, BR))]
    visits = np.zeros((1, 1), np.int32)
    kern = make_lab_kernel(*(_device(f) for f in parts), all_key_blocks)
    with simulator_lock():         # one simulated kernel at a time (cuda/common/_launch.py)
        _ACTIVE_TALLY.clear()
        try:
            kern[(1, 1), NT](*arrays, visits, np.int32(BR), np.int32(t_key), np.int32(D),
                             np.float32(1.0 / math.sqrt(D)), np.int32(0),
                             np.int32(t_key - BR), np.int32(0))
            counts = dict(_ACTIVE_TALLY)
        finally:
            _ACTIVE_TALLY.clear()
    tiles = ceil_div(t_key, BC)
    out = {}
    for tid in range(NT):
        reads = counts.get((0, tid, "read"), 0)
        writes = counts.get((0, tid, "write"), 0)
        want_reads = BR * D // NT + tiles * 2 * (BC * D // NT)
        want_writes = TM * TD + (TM if tid % CT == 0 else 0)
        out[tid] = (reads, writes, want_reads, want_writes)
    return out


def show(micro_tile_scores, parts=None) -> None:
    """GPU-Puzzles style: each thread's memory traffic, yours vs expected.

    Shared-memory reads and register writes of your micro_tile_scores are counted while it
    runs one thread at a time as plain Python (the code the simulator runs). With `parts`
    (all four functions) the whole lab kernel also runs on the simulator with global arrays
    that count each thread's reads and writes (two key tiles).
    """
    try:
        counts, yours, expected = tally_scores(micro_tile_scores)
    except NotImplementedError:
        print("Not implemented yet: fill in micro_tile_scores first.")
        return
    print(f"one block: {NT} threads = {RT} row groups x {CT} column groups; "
          f"micro-tile {TM} x {TN}; D = {D}.")
    print("Shared memory, one key tile:")
    print(f"{'thread (ty, tx)':>16} | {'shared reads Q':>14} | {'shared reads K':>14} | "
          f"{'s writes':>8} | {'values':>6}")
    for (ty, tx), (rq, rk, ws) in counts.items():
        ok = np.allclose(yours[(ty, tx)], expected[(ty, tx)], rtol=1e-5, atol=1e-5)
        flag = "" if (rq, rk) == EXPECTED_COUNTS and ok else "   <-- differs"
        print(f"{f'({ty}, {tx})':>16} | {rq:>14} | {rk:>14} | {ws:>8} | "
              f"{'ok' if ok else 'WRONG':>6}{flag}")
    print(f"{'expected':>16} | {EXPECTED_COUNTS[0]:>14} | {EXPECTED_COUNTS[1]:>14} | "
          f"{'>= ' + str(TM * TN):>8} |")
    if parts is None:
        return
    try:
        table = tally_global(parts)
    except NotImplementedError:
        print("Global memory: fill in all four parts to run the kernel.")
        return
    if table is None:
        print("Global memory: counted on the simulator only (this machine has a GPU).")
        return
    print(f"\nGlobal memory, the whole kernel (Tq = {BR}, Tk = {2 * BC}: two key tiles), "
          "counted on the simulator:")
    print(f"{'thread':>7} | {'reads':>5} (expected) | {'writes':>6} (expected)")
    for tid, (r, w, want_r, want_w) in table.items():
        flag = "" if (r, w) == (want_r, want_w) else "   <-- differs"
        print(f"{tid:>7} | {r:>5} ({want_r:>8}) | {w:>6} ({want_w:>8}){flag}")
