"""A faster way for Numba's CUDA simulator to run the threads of one block.

The simulator runs each CUDA thread of a block as a Python thread. Numba-cuda 0.30's
`BlockManager.run` then waits for them by polling in a loop: the launching thread keeps
asking every thread whether it has reached `syncthreads`, and it takes its share of
Python's global interpreter lock while the simulated threads compute. On the course's
tensor-core kernels that loop took more than half of the run time.

This module gives the block a barrier that waits instead: a thread that reaches
`syncthreads` counts itself in and sleeps on a condition variable; the last one of the
block's live threads wakes them all; a thread that ends leaves the count (so the others
are released when everyone still running has arrived, as in the original); the launching
thread sleeps until the last thread ends or one raises. What a kernel computes, the
barrier rules, and the error a failing thread gives (its `tid=[...] ctaid=[...]` prefix)
are the original's; only the waiting changed. `syncthreads_count/and/or` go through the
same `syncthreads`, and the labs' tracing (`flashcourse.labs.cuda_trace`) wraps it as
before.

It also gives the simulator what it lacks for warp-level and Hopper code (the Hopper
twins of `cuda/ptx/wgmma.py` build on these): the warp functions `shfl_sync`,
`shfl_xor_sync`, `shfl_up_sync`, `shfl_down_sync`, `any_sync`, `all_sync`, `ballot_sync`
and `syncwarp` on the kernel's `cuda` module (the lanes named in the mask meet, swap their
values and go on: `warp_exchange`), named barriers (`named_barrier`: `bar.sync` /
`bar.arrive` with a thread count) and a per-block dictionary for twins that keep state
(`block_state`, under the block's lock). A thread that ends leaves its warp, so the
others are not kept waiting for it.

`install()` (called by `import flashcourse` when the simulator is on) patches
`numba.cuda.simulator.kernel` when it is imported, or at once if it already is; it checks
first that the simulator is the one this was written for (the classes and the attributes
it uses) and leaves a different one alone. FLASHCOURSE_STOCK_SIMULATOR=1 turns it off.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
import threading

_MODULE = "numba.cuda.simulator.kernel"
#: how often the launching thread wakes while it waits (seconds): so that an interrupt,
#: a signal or an asynchronous exception (the labs' time limit) reaches it promptly
_POLL_S = 0.05


def _fits(kernel) -> bool:
    """Whether `kernel` (the simulator's module) is the one this scheduler replaces parts of."""
    bt, bm = getattr(kernel, "BlockThread", None), getattr(kernel, "BlockManager", None)
    if bt is None or bm is None:
        return False
    needed = (callable(getattr(bt, "syncthreads", None)), callable(getattr(bm, "run", None)),
              issubclass(bt, threading.Thread))
    try:
        probe = bm(lambda: None, (1, 1, 1), (1, 1, 1), False)
    except TypeError:
        return False
    return all(needed) and all(hasattr(probe, a) for a in ("_f", "_block_dim", "_debug"))


def _patch(kernel) -> bool:
    """Replace BlockThread.syncthreads, BlockThread.run and BlockManager.run; True if done."""
    if getattr(kernel, "_flashcourse_scheduler", False):
        return True
    if not _fits(kernel):
        return False
    import numpy as np

    BlockThread = kernel.BlockThread

    def syncthreads(self):
        if self.abort:
            raise RuntimeError("abort flag set on syncthreads call")
        block = self._manager
        with block._cv:
            generation = block._generation
            block._arrived += 1
            if block._arrived == block._live:          # the last one in: release all
                block._arrived = 0
                block._generation += 1
                block._cv.notify_all()
            else:
                while generation == block._generation and not self.abort:
                    block._cv.wait()
        if self.abort:
            raise RuntimeError("abort flag set on syncthreads clear")

    def run_thread(self):
        try:
            threading.Thread.run(self)
        except Exception as e:  # noqa: BLE001 - reported by the block, as the original does
            tid, ctaid = "tid=%s" % list(self.threadIdx), "ctaid=%s" % list(self.blockIdx)
            msg = "%s %s" % (tid, ctaid) if str(e) == "" else "%s %s: %s" % (tid, ctaid, e)
            self.exception = (type(e)(msg), sys.exc_info()[2])
        finally:
            block = self._manager
            with block._cv:
                block._live -= 1
                block._warps[self.thread_id // 32].leave(self.thread_id % 32)
                for bar in block._named.values():
                    bar.leave()
                if self.exception is not None and block._failed is None:
                    block._failed = self
                if block._live and block._arrived == block._live:   # the rest all wait
                    block._arrived = 0
                    block._generation += 1
                block._cv.notify_all()

    def run_block(self, grid_point, *args):
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._generation, self._arrived, self._failed = 0, 0, None
        n = int(np.prod(self._block_dim))
        self._warps = [_Room(self._lock, range(32 * w, min(n, 32 * w + 32)))
                       for w in range(-(-n // 32))]
        self._named, self._state = {}, {}
        threads = []
        for block_point in np.ndindex(*self._block_dim):
            def target():
                self._f(*args)
            threads.append(BlockThread(target, self, grid_point, block_point, self._debug))
        self._live = len(threads)
        try:
            for t in threads:
                t.start()
            with self._cv:
                while self._live and self._failed is None:
                    self._cv.wait(_POLL_S)
                failed = self._failed
        except BaseException:          # an interrupt or the labs' time limit
            _abort(self, threads)
            raise
        if failed is not None:
            # stop the others at their next barrier; do not join (as the original)
            _abort(self, threads)
            raise failed.exception[0].with_traceback(failed.exception[1])
        for t in threads:
            t.join()

    def _abort(block, threads):
        with block._cv:
            for t in threads:
                t.abort = True
            block._generation += 1
            block._cv.notify_all()
            for room in list(block._warps) + list(block._named.values()):
                room.cv.notify_all()

    BlockThread.syncthreads = syncthreads
    BlockThread.run = run_thread
    kernel.BlockManager.run = run_block
    _add_warp_functions()
    kernel._flashcourse_scheduler = True
    return True


# ---------------------------------------------------------------------------------------
# Warps, named barriers and per-block state for the simulator (module docstring)
# ---------------------------------------------------------------------------------------

FULL_MASK = 0xFFFFFFFF


class _Room:
    """Where the live lanes of one warp meet: each call of `warp_exchange` puts one value
    per lane; when every lane of the mask that is still running has put its value, all of
    them get the table of values and go on."""

    def __init__(self, lock, lanes):
        self.cv = threading.Condition(lock)
        self.present = sum(1 << (i % 32) for i in lanes)      # lanes still running
        self.slots, self.snapshot, self.mask = {}, {}, 0
        self.generation = 0

    def _complete(self):
        return self.mask and (self.present & self.mask) == self.arrived_mask()

    def arrived_mask(self):
        return sum(1 << lane for lane in self.slots)

    def release(self):
        self.snapshot, self.slots, self.mask = self.slots, {}, 0
        self.generation += 1
        self.cv.notify_all()

    def leave(self, lane):
        self.present &= ~(1 << lane)
        if self._complete():
            self.release()


class _NamedBarrier:
    """bar.sync / bar.arrive id, count: released when `count` threads have arrived."""

    def __init__(self, lock, count):
        self.cv = threading.Condition(lock)
        self.count, self.arrived, self.generation = count, 0, 0

    def arrive(self):
        self.arrived += 1
        if self.arrived >= self.count:
            self.arrived = 0
            self.generation += 1
            self.cv.notify_all()

    def leave(self):
        pass                      # a bar.sync count names threads, not the live ones


def current_thread():
    """The simulated CUDA thread running this code (RuntimeError outside a kernel)."""
    t = threading.current_thread()
    if not hasattr(t, "_manager") or not hasattr(t._manager, "_warps"):
        raise RuntimeError("this runs only inside a kernel on Numba's CUDA simulator with "
                           "flashcourse's scheduler installed (import flashcourse first)")
    return t


def _wait(thread, cv, done):
    while not done() and not thread.abort:
        cv.wait(_POLL_S)
    if thread.abort:
        raise RuntimeError("abort flag set while waiting for other threads")


def warp_exchange(value, mask: int = FULL_MASK) -> dict:
    """{lane: value} of the lanes in `mask` of this thread's warp (the lanes that have
    ended are left out), once all of them have called with their own values."""
    t = current_thread()
    block = t._manager
    lane = t.thread_id % 32
    room = block._warps[t.thread_id // 32]
    with block._lock:
        generation = room.generation
        mine = room.slots               # this exchange's table (a later one gets a new one)
        mine[lane] = value
        room.mask |= int(mask) & FULL_MASK
        if room._complete():
            room.release()
        else:
            _wait(t, room.cv, lambda: room.generation != generation)
        return mine


def named_barrier(bar_id: int, count: int, wait: bool = True) -> None:
    """bar.sync bar_id, count (wait=True) or bar.arrive (wait=False): `count` threads of
    the block, counted as they arrive, release the barrier."""
    bar_id, count = int(bar_id), int(count)
    if not 0 <= bar_id < 16:
        raise ValueError(f"a named barrier's id must be 0..15 (bar.sync), got {bar_id}")
    if count <= 0 or count % 32:
        raise ValueError(f"a named barrier's thread count must be a positive multiple of "
                         f"32 (whole warps; bar.sync), got {count}")
    t = current_thread()
    block = t._manager
    with block._lock:
        bar = block._named.get(bar_id)
        if bar is None:
            bar = block._named[bar_id] = _NamedBarrier(block._lock, count)
        elif bar.arrived == 0:
            bar.count = count           # a new phase may count other threads
        elif bar.count != count:
            raise RuntimeError(f"named barrier {bar_id}: {count} threads named while "
                               f"{bar.arrived} of {bar.count} have arrived (every thread "
                               f"of one phase must name the same count)")
        generation = bar.generation
        bar.arrive()
        if wait:
            _wait(t, bar.cv, lambda: bar.generation != generation)


def block_state(name: str, factory):
    """(state, lock): a per-block object made by factory() on first use, and the block's
    lock to hold while using it (the twins' mbarriers and shared addresses)."""
    t = current_thread()
    block = t._manager
    with block._lock:
        if name not in block._state:
            block._state[name] = factory()
        return block._state[name], block._lock


def _lane() -> int:
    return current_thread().thread_id % 32


def _add_warp_functions():
    """The warp functions of numba.cuda, on the simulator's kernel-side `cuda` module, and
    `cuda.shared.array(..., alignment=)` accepted."""
    import numpy as np
    from numba.cuda.simulator import kernelapi

    def shfl_sync(self, mask, value, src_lane):
        vals = warp_exchange(value, mask)
        return vals.get(int(src_lane) % 32, value)

    def shfl_xor_sync(self, mask, value, lane_mask):
        vals = warp_exchange(value, mask)
        src = _lane() ^ int(lane_mask)          # past lane 31: its own value (shfl.bfly)
        return vals.get(src, value) if src < 32 else value

    def shfl_up_sync(self, mask, value, delta):
        vals = warp_exchange(value, mask)
        src = _lane() - int(delta)
        return vals.get(src, value) if src >= 0 else value

    def shfl_down_sync(self, mask, value, delta):
        vals = warp_exchange(value, mask)
        src = _lane() + int(delta)
        return vals.get(src, value) if src < 32 else value

    def ballot_sync(self, mask, predicate):
        vals = warp_exchange(bool(predicate), mask)
        return sum(1 << lane for lane, p in vals.items() if p and (int(mask) >> lane) & 1)

    def any_sync(self, mask, predicate):
        return ballot_sync(self, mask, predicate) != 0

    def all_sync(self, mask, predicate):
        vals = warp_exchange(bool(predicate), mask)
        return all(p for lane, p in vals.items() if (int(mask) >> lane) & 1)

    def syncwarp(self, mask=FULL_MASK):
        warp_exchange(None, mask)

    if not getattr(kernelapi.FakeCUDAShared.array, "_flashcourse", False):
        from numba.core import types
        from numba.np import numpy_support

        def array(self, shape, dtype, alignment=None):
            # the simulator's own, with `alignment` accepted: the twins' shared addresses
            # are offsets from 0 of arrays placed on 1024-byte boundaries (smem_ops.
            # sim_shared_address), so any power of two up to 1024 holds. A static array
            # is known by the file and line that ask for it, as in the original (whose
            # frame count this function must keep: no wrapper around it)
            if alignment is not None and (alignment & (alignment - 1) or alignment > 1024):
                raise ValueError(f"alignment must be a power of two up to 1024, got "
                                 f"{alignment}")
            if isinstance(dtype, types.Type):
                dtype = numpy_support.as_dtype(dtype)
            if shape == 0:
                count = self._dynshared_size // dtype.itemsize
                return np.frombuffer(self._dynshared.data, dtype=dtype, count=count)
            frame = sys._getframe(1)
            caller = (frame.f_code.co_filename, frame.f_lineno)
            res = self._allocations.get(caller)
            if res is None:
                res = self._allocations[caller] = np.empty(shape, dtype)
            return res
        array._flashcourse = True
        kernelapi.FakeCUDAShared.array = array

    for name, fn in (("shfl_sync", shfl_sync), ("shfl_xor_sync", shfl_xor_sync),
                     ("shfl_up_sync", shfl_up_sync), ("shfl_down_sync", shfl_down_sync),
                     ("ballot_sync", ballot_sync), ("any_sync", any_sync),
                     ("all_sync", all_sync), ("syncwarp", syncwarp)):
        if not hasattr(kernelapi.FakeCUDAModule, name):
            setattr(kernelapi.FakeCUDAModule, name, fn)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when the simulator's kernel module is imported, wraps its
    loader so that the module is patched right after it has run."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != _MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


def install() -> None:
    """Use the waiting barrier in Numba's CUDA simulator (now, or when it is imported)."""
    if os.environ.get("FLASHCOURSE_STOCK_SIMULATOR", "") not in ("", "0"):
        return
    module = sys.modules.get(_MODULE)
    if module is not None:
        _patch(module)
    elif not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


def installed() -> bool:
    """True when the simulator is imported and runs with this scheduler."""
    module = sys.modules.get(_MODULE)
    return bool(module is not None and getattr(module, "_flashcourse_scheduler", False))
