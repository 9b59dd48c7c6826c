"""Trace every memory access of a kernel on Numba's CUDA simulator, per thread, for lab 05.

lab 06's `cuda_show` counts each thread's reads and writes of global arrays; this module
keeps the same idea (arrays that count what the simulated threads do to them) and records
more, so that the puzzle checkers can check the algorithm and not only the numbers:

    which element:   every access of a global or shared array, as (array, element offset)
    when:            the number of `cuda.syncthreads()` the thread had passed (its epoch)
    in which order:  each thread's accesses in program order

From that record (`Trace`) come, per thread, the counts of global and shared reads and
writes (the `show()` tables); **races** (a shared element written by one thread and
touched by another between the same two barriers: a missing `syncthreads`, found whatever
order the simulator happened to run the threads in); **bank conflicts** (the k-th shared
access of the 32 lanes of a warp is one warp instruction: lanes that hit the same one of
the 32 four-byte banks at different words are served one after another); and **memory
sectors** (the k-th global access of a warp touches some 32-byte sectors: 4 for 32
neighbouring floats, 32 for 32 floats a row apart: coalesced vs strided).

Tracing runs only on the simulator (`tracing()` patches its shared-memory allocator and
its barrier while a traced kernel runs, under `simulator_lock`). A read past the end of an
array raises IndexError in the simulated thread, as numpy does (on a GPU it would read
whatever lies there).
"""

from __future__ import annotations

import sys
import threading
from collections import defaultdict
from contextlib import contextmanager

import numpy as np

from ..cuda._launch import simulator_lock

WARP = 32
BANKS = 32          # shared memory: 32 banks of 4 bytes
SECTOR_BYTES = 32   # global memory is moved in 32-byte sectors

_ALLOC_LOCK = threading.Lock()
_ACTIVE: dict | None = None      # thread key -> list of events, while a traced kernel runs


def _thread_key():
    thread = threading.current_thread()
    idx = getattr(thread, "threadIdx", None)
    if idx is None:
        return None
    b = thread.blockIdx
    return (int(b.x), int(b.y), int(b.z)), (int(idx.x), int(idx.y), int(idx.z))


def _offset(array, index):
    """Element offset of an integer index (tuple) into `array`, or None for slices.
    Raises IndexError for an index outside the array (negative ones too)."""
    idx = index if isinstance(index, tuple) else (index,)
    if len(idx) != array.ndim or not all(isinstance(i, (int, np.integer)) for i in idx):
        return None
    for i, n in zip(idx, array.shape):
        if not 0 <= int(i) < n:
            raise IndexError(f"index {tuple(int(j) for j in idx)} is outside "
                             f"{array.array_name} of shape {array.shape}")
    return int(np.ravel_multi_index(tuple(int(i) for i in idx), array.shape))


class TracedArray(np.ndarray):
    """An array whose element reads and writes by simulated threads are recorded.

    The name is a class attribute (the simulator copies kernel arguments with
    `.view(type=...)`, which keeps the class but not instance attributes): make one with
    `traced(array, name)`."""

    array_name = "?"
    space = "global"

    def _record(self, kind, index):
        off = _offset(self, index)
        if _ACTIVE is None or off is None:
            return
        key = _thread_key()
        if key is not None:
            epoch = getattr(threading.current_thread(), "_trace_epoch", 0)
            _ACTIVE.setdefault(key, []).append(
                (self.space, kind, self.array_name, off, self.itemsize, epoch))

    def __getitem__(self, index):
        self._record("read", index)
        return np.ndarray.__getitem__(self, index)

    def __setitem__(self, index, value):
        self._record("write", index)
        np.ndarray.__setitem__(self, index, value)


_CLASSES: dict = {}


def traced(array, name: str, space: str = "global") -> TracedArray:
    """`array` (copied) as a TracedArray named `name`."""
    cls = _CLASSES.get((name, space))
    if cls is None:
        cls = type(f"Traced_{name}", (TracedArray,), {"array_name": name, "space": space})
        _CLASSES[(name, space)] = cls
    return np.array(array, copy=True).view(cls)


@contextmanager
def tracing():
    """Record the accesses of simulated kernels launched inside; yields the Trace.

    Patches the simulator's `cuda.shared.array` (allocations are named by the line that
    makes them, "shared line N"; float ones start as NaN so that an element nobody
    loaded shows up) and `cuda.syncthreads` (counts each thread's barriers)."""
    global _ACTIVE
    from numba.cuda.simulator import kernel as sim_kernel
    from numba.cuda.simulator import kernelapi
    trace = Trace()
    with simulator_lock():
        old_array = kernelapi.FakeCUDAShared.array
        old_sync = sim_kernel.BlockThread.syncthreads

        def shared_array(self, shape, dtype, alignment=None):
            frame = sys._getframe(1)
            where = (frame.f_code.co_filename, frame.f_lineno)
            with _ALLOC_LOCK:      # the first threads of a block arrive together: one array
                res = self._allocations.get(where)
                if res is None:
                    if hasattr(dtype, "key") or not isinstance(dtype, (type, np.dtype)):
                        from numba.np import numpy_support
                        dtype = numpy_support.as_dtype(dtype)
                    res = np.empty(shape, dtype)
                    if res.dtype.kind == "f":
                        res.fill(np.nan)
                    self._allocations[where] = res
            return res.view(_shared_class(f"shared line {where[1]}"))

        def syncthreads(self):
            self._trace_epoch = getattr(self, "_trace_epoch", 0) + 1
            return old_sync(self)

        kernelapi.FakeCUDAShared.array = shared_array
        sim_kernel.BlockThread.syncthreads = syncthreads
        _ACTIVE = trace.events
        try:
            yield trace
        finally:
            _ACTIVE = None
            kernelapi.FakeCUDAShared.array = old_array
            sim_kernel.BlockThread.syncthreads = old_sync


def _shared_class(name):
    return traced(np.zeros(1), name, "shared").__class__


class Trace:
    """What the threads of one traced launch did: `events[(block, thread)]` is a list of
    (space, kind, array, element offset, item bytes, epoch), in that thread's order."""

    def __init__(self):
        self.events: dict = {}

    def threads(self):
        return sorted(self.events)

    def counts(self, key) -> dict:
        """{'global read': n, 'global write': n, 'shared read': n, 'shared write': n}."""
        out = {f"{s} {k}": 0 for s in ("global", "shared") for k in ("read", "write")}
        for space, kind, *_ in self.events.get(key, ()):
            out[f"{space} {kind}"] += 1
        return out

    def total(self, what: str, array: str | None = None) -> int:
        space, kind = what.split()
        return sum(1 for ev in self.events.values() for s, k, a, *_ in ev
                   if s == space and k == kind and (array is None or a == array))

    def max_per_thread(self, what: str, array: str | None = None) -> int:
        space, kind = what.split()
        return max((sum(1 for s, k, a, *_ in ev if s == space and k == kind
                        and (array is None or a == array))
                    for ev in self.events.values()), default=0)

    def written_by(self, array: str) -> dict:
        """element offset -> list of thread keys that wrote it (global array `array`)."""
        out = defaultdict(list)
        for key, ev in self.events.items():
            for s, k, a, off, *_ in ev:
                if s == "global" and k == "write" and a == array:
                    out[off].append(key)
        return out

    def races(self) -> list:
        """Shared elements written by one thread and read or written by another between
        the same two barriers: [(block, array, offset, epoch), ...] (a missing syncthreads)."""
        cells = defaultdict(lambda: (set(), set()))      # -> (writers, all touching)
        for (block, thread), ev in self.events.items():
            for s, k, a, off, _, epoch in ev:
                if s != "shared":
                    continue
                writers, touching = cells[(block, a, off, epoch)]
                touching.add(thread)
                if k == "write":
                    writers.add(thread)
        return [cell for cell, (w, t) in cells.items() if w and len(t) > 1]

    def _warp_slots(self, space):
        """{(block, warp, array, kind, k): [(array, byte address, item bytes), ...]}: the k-th
        read (or write) of one array by each lane of a warp is one warp instruction (exact
        for code without divergence; an extra access by a few lanes forms its own group)."""
        slots = defaultdict(list)
        for (block, thread), ev in self.events.items():
            warp = self._linear(block, thread) // WARP
            seen = defaultdict(int)
            for s, kind, a, off, size, _ in ev:
                if s != space:
                    continue
                k = seen[(a, kind)]
                seen[(a, kind)] += 1
                slots[(block, warp, a, kind, k)].append((a, off * size, size))
        return slots

    block_dim = (1, 1, 1)  # of the launch, set by the launcher: warps are linear thread ids

    def _linear(self, block, thread):
        bx, by, _ = self.block_dim
        return thread[0] + bx * (thread[1] + by * thread[2])

    def bank_conflicts(self) -> tuple[int, int]:
        """(extra shared-memory wavefronts over all warp instructions, worst n-way).
        A warp instruction whose lanes hit one bank at n different words costs n - 1
        extra; lanes reading the same word share it (a broadcast)."""
        extra, worst = 0, 1
        for accesses in self._warp_slots("shared").values():
            banks = defaultdict(set)
            for a, byte, size in accesses:
                for w in range(max(1, size // 4)):
                    word = byte // 4 + w
                    banks[word % BANKS].add((a, word))
            ways = max(len(words) for words in banks.values())
            extra += ways - 1
            worst = max(worst, ways)
        return extra, worst

    def sectors(self) -> tuple[int, int]:
        """(32-byte sectors the warps' global accesses touch, the fewest they could touch:
        one per 32 bytes of distinct data in each warp instruction)."""
        touched = ideal = 0
        for accesses in self._warp_slots("global").values():
            secs = {(a, byte // SECTOR_BYTES) for a, byte, _ in accesses}
            data = len({(a, byte) for a, byte, _ in accesses}) * accesses[0][2]
            touched += len(secs)
            ideal += -(-data // SECTOR_BYTES)
        return touched, ideal
