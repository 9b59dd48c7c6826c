"""flashcourse.sim_scheduler: the CUDA simulator's waiting barrier keeps the simulator's
rules (what a kernel computes, barriers, early exits, errors, the labs' time limit) and
is what the simulator runs with in this test process."""

import threading
import time

import numpy as np
import pytest
from numba import cuda  # a kernel's `cuda` must be a module global (the simulator swaps it)

from flashcourse import sim_scheduler
from flashcourse.gpu import using_simulator

pytestmark = pytest.mark.skipif(not using_simulator(), reason="the scheduler is the simulator's")


def test_installed_in_the_simulator():
    assert sim_scheduler.installed()


def test_a_shared_memory_tree_sum_with_a_barrier_per_step():
    @cuda.jit
    def tree_sum(x, out):
        sm = cuda.shared.array(64, np.float64)
        t = cuda.threadIdx.x
        sm[t] = x[cuda.blockIdx.x * 64 + t]
        cuda.syncthreads()
        step = 32
        while step > 0:
            if t < step:
                sm[t] += sm[t + step]
            cuda.syncthreads()
            step //= 2
        if t == 0:
            out[cuda.blockIdx.x] = sm[0]

    x = np.random.default_rng(0).standard_normal(3 * 64)
    out = np.zeros(3)
    tree_sum[3, 64](x, out)
    np.testing.assert_allclose(out, x.reshape(3, 64).sum(axis=1), rtol=1e-12)


def test_threads_that_return_early_release_the_rest_at_the_barrier():
    """As in the original scheduler, a barrier waits for the threads still running: the
    ones that returned before it are not waited for."""
    @cuda.jit
    def early(out):
        t = cuda.threadIdx.x
        if t >= 20:
            return
        out[t] = 1
        cuda.syncthreads()
        out[t] += 1
        cuda.syncthreads()
        out[t] += 1

    out = np.zeros(32, np.int64)
    early[1, 32](out)
    assert out[:20].tolist() == [3] * 20 and not out[20:].any()


def test_syncthreads_count_and_or():
    @cuda.jit
    def votes(out):
        t = cuda.threadIdx.x
        out[0] = cuda.syncthreads_count(t % 3 == 0)
        out[1] = cuda.syncthreads_and(t < 100)
        out[2] = cuda.syncthreads_or(t == 5)

    out = np.zeros(3, np.int64)
    votes[1, 40](out)
    assert out.tolist() == [14, 1, 1]


def test_a_failing_thread_names_itself_and_stops_the_launch():
    @cuda.jit
    def fails(out):
        t = cuda.threadIdx.x
        cuda.syncthreads()
        if t == 7 and cuda.blockIdx.x == 1:
            out[10 ** 6] = 1.0          # past the end
        cuda.syncthreads()
        out[t] = 1.0

    with pytest.raises(IndexError, match=r"tid=\[7, 0, 0\] ctaid=\[1, 0, 0\]"):
        fails[2, 16](np.zeros(16))


def test_a_block_that_never_finishes_is_stopped_by_an_exception_in_the_launching_thread():
    """The labs' time limit raises in the launching thread (by an alarm or asynchronously);
    the waiting launcher must see it within a fraction of a second, and the simulated
    threads that wait at a barrier are released (aborted), not left waiting forever."""
    stop = threading.Event()

    @cuda.jit
    def spins(out):
        if cuda.threadIdx.x == 0:
            while not stop.is_set():        # a thread that never reaches the barrier
                time.sleep(0.01)
        cuda.syncthreads()
        out[cuda.threadIdx.x] = 1.0

    class Limit(Exception):
        pass

    import ctypes
    caught, before = [], threading.active_count()

    def launch():
        try:
            spins[1, 8](np.zeros(8))
        except Limit:
            caught.append(time.monotonic())

    worker = threading.Thread(target=launch)
    worker.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(worker.ident),
                                               ctypes.py_object(Limit))
    worker.join(5)
    assert caught and caught[0] - t0 < 1.0, "the launcher did not see the exception"
    stop.set()                                # let the spinning thread end
    deadline = time.monotonic() + 5
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert threading.active_count() <= before, "simulated threads were left waiting"
