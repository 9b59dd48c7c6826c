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
                if self.exception is not None and block._failed is None:
                    block._failed = self
                if block._live and block._arrived == block._live:   # the rest all wait
                    block._arrived = 0
                    block._generation += 1
                block._cv.notify_all()

    def run_block(self, grid_point, *args):
        self._cv = threading.Condition()
        self._generation, self._arrived, self._failed = 0, 0, None
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

    BlockThread.syncthreads = syncthreads
    BlockThread.run = run_thread
    kernel.BlockManager.run = run_block
    kernel._flashcourse_scheduler = True
    return True


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
