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

It also records **barriers**: the place of every `cuda.syncthreads()` each thread reached,
in order. Every thread of a block must reach the same barriers the same number of times (a
barrier inside an `if` that only some threads take is undefined behaviour on a GPU, often
a hang). The simulator cannot hang on one: its barrier lets the waiting threads go as soon
as every thread still running waits, whichever barrier each waits at, and a thread that
has finished no longer counts. So a divergent barrier is found afterwards, by comparing the
threads' lists (`Trace.divergent_barriers`). And it records the size of every local and
shared array a kernel allocates (`Trace.largest`), and which arrays were read through a
slice or a row view (`Trace.slice_reads`): an element of a view keeps its offset in the
whole array.

Tracing runs only on the simulator (`tracing()` patches its shared and local allocators
and its barrier while a traced kernel runs, under `simulator_lock`). A read past the end
of an array raises IndexError in the simulated thread, as numpy does (on a GPU it would
read whatever lies there).
"""

from __future__ import annotations

import os
import sys
import threading
from collections import defaultdict
from contextlib import contextmanager

import numpy as np

from ..cuda.common._launch import simulator_lock

WARP = 32
BANKS = 32          # shared memory: 32 banks of 4 bytes
SECTOR_BYTES = 32   # global memory is moved in 32-byte sectors

_ALLOC_LOCK = threading.Lock()
_ACTIVE: dict | None = None      # thread key -> list of events, while a traced kernel runs
_SLICES: dict = {}               # array -> elements read through slices, while tracing
_NOTES: dict | None = None       # what helpers of a lab note while tracing (`note`)
#: the simulator's atomics that take (array, index, ...): each is recorded as one event of
#: kind "atomic" (its own read and write inside are not recorded apart)
ATOMICS = ("add", "sub", "max", "min", "exch", "inc", "dec", "and_", "or_", "xor",
           "nanmax", "nanmin", "cas")


def note(key: str, n: int = 1) -> None:
    """Add `n` to the active trace's note `key` (a lab's simulator helper counting what
    the trace cannot see, e.g. the asynchronous copies it made); nothing when not tracing."""
    if _NOTES is not None:
        with _ALLOC_LOCK:
            _NOTES[key] = _NOTES.get(key, 0) + n


def _thread_key():
    thread = threading.current_thread()
    idx = getattr(thread, "threadIdx", None)
    if idx is None:
        return None
    b = thread.blockIdx
    return (int(b.x), int(b.y), int(b.z)), (int(idx.x), int(idx.y), int(idx.z))


def short(index) -> str:
    """A block or thread index as a learner writes it: 6 for (6, 0, 0), (6, 1) for (6, 1, 0)."""
    idx = tuple(index)
    while len(idx) > 1 and idx[-1] == 0:
        idx = idx[:-1]
    return str(idx[0]) if len(idx) == 1 else str(idx)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _offset(array, index):
    """Element offset of an integer index (tuple) into `array` (for a view, the offset in
    the whole array it was taken from), or None for slices. Raises IndexError for an index
    outside the array (negative ones too)."""
    idx = index if isinstance(index, tuple) else (index,)
    if len(idx) != array.ndim or not all(isinstance(i, (int, np.integer)) for i in idx):
        return None
    for i, n in zip(idx, array.shape):
        if not 0 <= int(i) < n:
            raise IndexError(f"index {tuple(int(j) for j in idx)} is outside "
                             f"{array.array_name} of shape {array.shape}")
    idx = tuple(int(i) for i in idx)
    grid = getattr(array, "_offsets", None)
    return int(grid[idx]) if grid is not None else int(np.ravel_multi_index(idx, array.shape))


class TracedArray(np.ndarray):
    """An array whose element reads and writes by simulated threads are recorded.

    The name is a class attribute (the simulator copies kernel arguments with
    `.view(type=...)`, which keeps the class but not instance attributes): make one with
    `traced(array, name)`."""

    array_name = "?"
    space = "global"

    def _record(self, kind, index):
        off = _offset(self, index)
        if _ACTIVE is None:
            return
        if kind != "atomic" and getattr(threading.current_thread(), "_trace_atomic", False):
            return                       # inside an atomic: recorded once, as the atomic
        key = _thread_key()
        if key is None:
            return
        if off is None:                  # a slice or a row: counted by elements, per array
            if kind == "read":
                n = np.ndarray.__getitem__(self._grid(), index).size
                with _ALLOC_LOCK:
                    _SLICES[self.array_name] = _SLICES.get(self.array_name, 0) + n
            return
        epoch = getattr(threading.current_thread(), "_trace_epoch", 0)
        _ACTIVE.setdefault(key, []).append(
            (self.space, kind, self.array_name, off, self.itemsize, epoch))

    def _grid(self):
        """Each element's offset in the whole array (a view keeps its parent's)."""
        grid = getattr(self, "_offsets", None)
        return np.arange(self.size).reshape(self.shape) if grid is None else grid

    def __getitem__(self, index):
        self._record("read", index)
        out = np.ndarray.__getitem__(self, index)
        if isinstance(out, TracedArray):     # a view (out[r], a[2:5]): keep the offsets
            out._offsets = np.ndarray.__getitem__(self._grid(), index)
        return out

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
def tracing(local_fill=np.nan):
    """Record the accesses of simulated kernels launched inside; yields the Trace.

    Patches the simulator's `cuda.shared.array` (allocations are named by the line that
    makes them, "shared line N"; float ones start as NaN so that an element nobody
    loaded shows up), `cuda.local.array` (its sizes; float ones start as NaN too, so that
    an accumulator never set to zero shows up; `local_fill` = 0 to tell that NaN from one the
    arithmetic makes), `cuda.syncthreads` (each thread's
    barriers: its epoch, and where each barrier it reached stands) and the atomics
    (`cuda.atomic.add` ...: one event of kind "atomic" each)."""
    global _ACTIVE, _SLICES, _NOTES
    from numba.cuda.simulator import kernel as sim_kernel
    from numba.cuda.simulator import kernelapi
    trace = Trace()
    simulator_dir = os.path.dirname(kernelapi.__file__)
    with simulator_lock():
        old_array = kernelapi.FakeCUDAShared.array
        old_local = kernelapi.FakeCUDALocal.array
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
                    trace.allocations[("shared", where[1])] = res.size
            return res.view(_shared_class(f"shared line {where[1]}"))

        def local_array(self, shape, dtype, alignment=None):
            res = old_local(self, shape, dtype, alignment)
            if res.dtype.kind == "f":      # an element used before it was set shows as NaN
                res.fill(local_fill)
            line = sys._getframe(1).f_lineno
            with _ALLOC_LOCK:
                key = ("local", line)
                trace.allocations[key] = max(trace.allocations.get(key, 0), res.size)
            return res

        def syncthreads(self):
            frame = sys._getframe(1)
            while frame is not None and frame.f_code.co_filename.startswith(simulator_dir):
                frame = frame.f_back        # the simulator's own frames: find the caller's
            site = (frame.f_code.co_name, frame.f_lineno) if frame is not None else ("?", 0)
            key = _thread_key()
            if key is not None:
                trace.barriers.setdefault(key, []).append(site)
            self._trace_epoch = getattr(self, "_trace_epoch", 0) + 1
            return old_sync(self)

        def atomic(old):
            def op(self, array, index, *args):
                thread = threading.current_thread()
                thread._trace_atomic = True
                try:
                    res = old(self, array, index, *args)
                finally:
                    thread._trace_atomic = False
                inner = getattr(array, "_ary", array)     # a kernel argument is wrapped
                if isinstance(inner, TracedArray):
                    inner._record("atomic", index)
                return res
            return op

        old_atomics = {name: getattr(kernelapi.FakeCUDAAtomic, name) for name in ATOMICS}
        for name, old in old_atomics.items():
            setattr(kernelapi.FakeCUDAAtomic, name, atomic(old))
        kernelapi.FakeCUDAShared.array = shared_array
        kernelapi.FakeCUDALocal.array = local_array
        sim_kernel.BlockThread.syncthreads = syncthreads
        _ACTIVE, _SLICES, _NOTES = trace.events, trace.slice_reads, trace.notes
        try:
            yield trace
        finally:
            _ACTIVE, _SLICES, _NOTES = None, {}, None
            for name, old in old_atomics.items():
                setattr(kernelapi.FakeCUDAAtomic, name, old)
            kernelapi.FakeCUDAShared.array = old_array
            kernelapi.FakeCUDALocal.array = old_local
            sim_kernel.BlockThread.syncthreads = old_sync


def _shared_class(name):
    return traced(np.zeros(1), name, "shared").__class__


class Trace:
    """What the threads of one traced launch did: `events[(block, thread)]` is a list of
    (space, kind, array, element offset, item bytes, epoch), in that thread's order."""

    def __init__(self):
        self.events: dict = {}
        self.barriers: dict = {}       # thread key -> [(function, line) of each barrier]
        self.allocations: dict = {}    # ("local" or "shared", line) -> elements
        self.slice_reads: dict = {}    # array -> elements read through slices or rows
        self.notes: dict = {}          # counts noted by a lab's helpers (`note`)

    def threads(self):
        return sorted(self.events)

    def counts(self, key) -> dict:
        """{'global read': n, 'global write': n, 'shared read': n, 'shared write': n,
        'global atomic': n, 'shared atomic': n}."""
        out = {f"{s} {k}": 0 for s in ("global", "shared") for k in ("read", "write", "atomic")}
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

    def reads_of(self, array: str) -> int:
        """Global reads of `array`: by element, plus the elements of slices read."""
        return self.total("global read", array) + self.slice_reads.get(array, 0)

    def max_reads_of_one_array(self) -> tuple[int, tuple | None, str]:
        """(n, thread, array): the most reads one thread made of one array (global or
        shared), e.g. a thread that loops over a whole block's elements alone."""
        best = (0, None, "")
        for key, ev in self.events.items():
            per = defaultdict(int)
            for _, k, a, *_ in ev:
                if k == "read":
                    per[a] += 1
            for a, n in per.items():
                if n > best[0]:
                    best = (n, key, a)
        return best

    def largest(self, space: str) -> tuple[int, int]:
        """(elements, line) of the largest "local" or "shared" array the kernel allocated."""
        sizes = [(n, line) for (sp, line), n in self.allocations.items() if sp == space]
        return max(sizes, default=(0, 0))

    def divergent_barriers(self) -> tuple[str, str]:
        """("", "") when every thread of each block reached the same barriers (the same
        syncthreads calls, in the same order), else (what differs, the function holding
        the first barrier that differs), e.g. ("in block (0, 0, 0), thread (40, 0, 0)
        reached 1 barrier and thread (0, 0, 0) 6 ...", "block_reduce")."""
        threads = list(np.ndindex(*self.block_dim))
        blocks = sorted({b for b, _ in self.events} | {b for b, _ in self.barriers})
        for block in blocks:
            seqs = {t: self.barriers.get((block, t), []) for t in threads}
            ref = max(threads, key=lambda t: len(seqs[t]))      # the first of the longest
            full = seqs[ref]
            for t in threads:
                mine = seqs[t]
                if mine == full:
                    continue
                n = next(i for i in range(len(full)) if i >= len(mine) or mine[i] != full[i])
                fn, line = full[n]
                who, other = f"thread {short(t)}", f"thread {short(ref)}"
                if len(mine) != len(full):
                    return (f"in block {short(block)}, {who} reached "
                            f"{_plural(len(mine), 'barrier')}, {other} reached {len(full)} "
                            f"(the first {who} missed: line {line} of {fn})"), fn
                return (f"in block {short(block)}, {who} and {other} reached different "
                        f"barriers (line {mine[n][1]} of {mine[n][0]} and line {line} of "
                        f"{fn})"), fn
        return "", ""

    def written_by(self, array: str) -> dict:
        """element offset -> list of thread keys that wrote it (global array `array`)."""
        out = defaultdict(list)
        for key, ev in self.events.items():
            for s, k, a, off, *_ in ev:
                if s == "global" and k == "write" and a == array:
                    out[off].append(key)
        return out

    def unloaded_reads(self) -> list:
        """Shared elements read that no thread of the block ever wrote (they hold whatever
        was there: NaN on the simulator): [(block, thread, array, offset), ...]."""
        written, reads = set(), []
        for (block, thread), ev in self.events.items():
            for s, k, a, off, *_ in ev:
                if s == "shared":
                    if k == "write":
                        written.add((block, a, off))
                    else:
                        reads.append((block, thread, a, off))
        return [r for r in reads if (r[0], r[2], r[3]) not in written]

    def races(self) -> list:
        """Shared elements written by one thread and read or written by another between
        the same two barriers, or updated by an atomic and read or written plainly by
        another thread between them: [(block, array, offset, epoch), ...] (a missing
        syncthreads). Atomics alone on one element do not race: that is what they are for."""
        cells = defaultdict(lambda: (set(), set(), set()))   # -> (writers, plain, atomic)
        for (block, thread), ev in self.events.items():
            for s, k, a, off, _, epoch in ev:
                if s != "shared":
                    continue
                writers, plain, atomic = cells[(block, a, off, epoch)]
                (atomic if k == "atomic" else plain).add(thread)
                if k == "write":
                    writers.add(thread)
        return [cell for cell, (w, p, at) in cells.items()
                if len(p | at) > 1 and (w or (p and at))]

    def overlapping_writes(self) -> list:
        """Shared elements that two or more threads wrote (plainly) between the same two
        barriers while no thread read or updated them there: overlapping shares of a copy
        or a zeroing, not a missing barrier. [(block, array, offset, epoch), ...], a subset
        of races()."""
        cells = defaultdict(lambda: (set(), set()))          # -> (writers, other accesses)
        for (block, thread), ev in self.events.items():
            for s, k, a, off, _, epoch in ev:
                if s == "shared":
                    writers, others = cells[(block, a, off, epoch)]
                    (writers if k == "write" else others).add(thread)
        return [cell for cell, (w, o) in cells.items() if len(w) > 1 and not o]

    def lost_updates(self) -> list:
        """Elements that two or more threads each read and then wrote with plain accesses
        (x[i] += 1: a read-modify-write that loses the updates of threads in between):
        shared ones between the same two barriers of a block, global ones anywhere
        [(space, array, offset, threads), ...]."""
        cells = defaultdict(lambda: defaultdict(set))        # cell -> thread -> kinds
        for (block, thread), ev in self.events.items():
            for s, k, a, off, _, epoch in ev:
                if k in ("read", "write"):
                    cell = (s, a, off) + ((block, epoch) if s == "shared" else ())
                    cells[cell][(block, thread)].add(k)
        out = []
        for cell, who in cells.items():
            rmw = [t for t, kinds in who.items() if kinds == {"read", "write"}]
            if len(rmw) > 1:
                out.append((cell[0], cell[1], cell[2], len(rmw)))
        return out

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
