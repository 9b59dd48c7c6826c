"""host_plans: the public calls' fast path for device arrays (plans cached per shape).

Why this exists (measured on an H200 before the plans existed,
benchmarks/results/h200_host_probe_log.txt): a `cuda.decode` call on device arrays spent
~1 ms of Python before its two kernels (~80 us of GPU work) were queued: input checks,
the split heuristic, four `cuda.device_array` allocations (~23 us each), reshapes (~5 us
each, every one a new array object), and numba-cuda's kernel dispatch (37-56 us per
launch: it types every argument and repacks every array). PyTorch's whole SDPA call costs
~43 us of host time. After: benchmarks/results/h200_host_path.json (NOTES_host_path.md).

What it does: the first call with a given set of shapes, dtypes, layouts and options
runs the full, checked path while `_launch.launch` records every kernel launch it
makes. From that record this module builds a `Plan`: one `PackedLaunch` per kernel
(arguments packed once, `packed_launch.py`), which arguments are the inputs (q, k, v),
which the outputs (o, lse), and the workspaces (the decode's partial states), kept and
reused. A later call with the same key only reads the arrays' device addresses, takes
output buffers from a small pool, points the packed arguments at them and queues the
kernels: tens of microseconds.

What a cached call still checks: the key holds every input's type, shape, dtype, strides
and 16-byte alignment, whether inputs alias each other, and every option, so a call that
differs in any of them takes the checked path again (and fails there if it is wrong).
check=True always takes the checked path. What it skips: nothing that depends on the
values (device-array results are only checked on request, as before).

When a plan is not built: on the simulator; with FLASHCOURSE_PACKED_LAUNCH=0; when the
checked path converted an input or an output through a copy (then its kernels do not
read the caller's arrays, e.g. tensor_core with float32 input and precision="bf16"); or
when numba-cuda's private launch objects have moved (`PackedLaunchError`, said once).

Output buffers (`OutputPool`): each call returns new arrays, as before; their memory comes
from a pool and goes back to it when the last view of an array is garbage-collected, so
repeated calls do not pay for cuMemAlloc. Reuse is ordered on the legacy default stream,
where the course's kernels run (as PyTorch's caching allocator orders it on its stream):
work queued on another stream that reads an output must finish before that output is
dropped.

One GPU per process: a plan belongs to the CUDA context it was built in, and the key does
not hold the device (reading it costs more than the rest of a replay). A program that switches
between GPUs should set FLASHCOURSE_PACKED_LAUNCH=0.

CUDA graphs (`capture`): a plan can also be recorded once into a CUDA graph and replayed
with one driver call, into fixed output arrays (decode is the classic case).
"""

from __future__ import annotations

import contextlib
import functools
import threading
import warnings

import numpy as np

from .packed_launch import PackedLaunch, PackedLaunchError, available

#: Plans kept (least recently built dropped first): shapes change rarely in practice.
MAX_PLANS = 64
#: Free output buffers kept per size.
MAX_FREE_PER_SIZE = 8

_local = threading.local()
_PLANS: dict = {}
_UNPLANNABLE: set = set()
_LOCK = threading.Lock()
_warned = False


# ---------------------------------------------------------------------------------------
# Recording the checked path's launches (`_launch.launch` calls `record`)
# ---------------------------------------------------------------------------------------

def record(dispatcher, grid, threads, shared_bytes, args) -> None:
    """Called by `_launch.launch` after each launch: kept when a recording is on."""
    rec = getattr(_local, "launches", None)
    if rec is not None:
        rec.append((dispatcher, grid, threads, shared_bytes, args))


@contextlib.contextmanager
def _recording():
    prev = getattr(_local, "launches", None)
    _local.launches = launches = []
    try:
        yield launches
    finally:
        _local.launches = prev


# ---------------------------------------------------------------------------------------
# Keys
# ---------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _device_array_class():
    """numba's DeviceNDArray class, or None on the simulator (whose module has none)."""
    try:
        from numba.cuda.cudadrv.devicearray import DeviceNDArray
    except ImportError:
        return None
    return DeviceNDArray


def _interface(a):
    """(ptr, key part) of a device array, or None for anything else (numpy, lists).
    A Numba device array's fields are read directly (its __cuda_array_interface__
    builds a new dict on every read: ~3 us each, three per call)."""
    cls = _device_array_class()
    if cls is not None and type(a) is cls:
        ptr = int(a.device_ctypes_pointer.value or 0)
        return ptr, (cls, a.shape, a.dtype.str, a.strides, ptr % 16)
    if isinstance(a, np.ndarray):
        return None
    try:
        cai = a.__cuda_array_interface__
    except AttributeError:
        return None
    ptr = int(cai["data"][0])
    return ptr, (type(a), tuple(cai["shape"]), cai["typestr"], cai.get("strides"), ptr % 16)


def plan_key(entry: str, arrays, settings):
    """The cache key of a call, with the arrays' device addresses; None when some array
    is not a device array or a setting is not hashable (then the checked path runs)."""
    parts, ptrs = [], []
    for a in arrays:
        got = _interface(a)
        if got is None:
            return None, None
        ptrs.append(got[0])
        parts.append(got[1])
    alias = tuple(ptrs.index(p) for p in ptrs)        # which inputs share an address
    key = (entry, tuple(parts), alias, settings)
    try:
        hash(key)
    except TypeError:
        return None, None
    return key, ptrs


# ---------------------------------------------------------------------------------------
# Output buffers
# ---------------------------------------------------------------------------------------

class OutputPool:
    """Device buffers handed out as new arrays and taken back when the arrays die."""

    def __init__(self):
        self._free: dict = {}
        self._lent: dict = {}            # device address -> its allocation, while lent
        self._lock = threading.Lock()

    def _give_back(self, nbytes, addr):
        with self._lock:
            raw = self._lent.pop(addr, None)
            free = self._free.setdefault(nbytes, [])
            if raw is not None and len(free) < MAX_FREE_PER_SIZE:
                free.append(raw)

    def array(self, ctx, shape, strides, dtype, nbytes, template=None):
        """A new DeviceNDArray of `shape`/`dtype` whose memory comes from the pool
        (`template`: an array of that shape and dtype to copy the fields of, which costs a
        third of building one; `Plan` checks the copy against a built array once)."""
        with self._lock:
            free = self._free.get(nbytes)
            raw = free.pop() if free else None
        if raw is None:
            raw = ctx.memalloc(nbytes)
        mem = _pooled_pointer_class()(ctx, raw, nbytes, self)
        with self._lock:               # the pool, not the pointer, keeps the allocation:
            self._lent[mem._back[2]] = raw      # never garbage with it (see below)
        if template is not None:
            new = object.__new__(type(template))
            new.__dict__.update(template.__dict__)
            new.gpu_data = mem
            return new
        from numba.cuda.cudadrv.devicearray import DeviceNDArray
        return DeviceNDArray(shape, strides, dtype, gpu_data=mem)

    def empty(self, shape, dtype):
        """A new C-contiguous device array of `shape`/`dtype` from the pool (current context)."""
        from numba.cuda.cudadrv import devices
        shape, dt = tuple(int(n) for n in shape), np.dtype(dtype)
        strides, step = [], dt.itemsize
        for n in reversed(shape):
            strides.append(step)
            step *= n
        return self.array(devices.get_context(), shape, tuple(reversed(strides)), dt, step)


POOL = OutputPool()


def pooled_empty(shape, dtype):
    """A device array from `POOL` (its memory goes back to the pool when the array dies:
    no cudaMalloc/cudaFree, which would synchronise, per call); a plain device array under
    the simulator."""
    from ...gpu import using_simulator
    if using_simulator():
        from numba import cuda
        return cuda.device_array(tuple(int(n) for n in shape), dtype)
    return POOL.empty(shape, dtype)


@functools.lru_cache(maxsize=None)
def _pooled_pointer_class():
    """numba-cuda's MemoryPointer whose buffer goes back to its pool when the pointer
    dies (`__del__`: a third of the cost of the `weakref.finalize` a finalizer= makes).

    It holds only the address, not the allocation (`raw`, an OwnedPointer whose own
    weakref finaliser frees the memory): the pool keeps `raw` while it is lent. Were the
    pointer to hold it, both could die together as cyclic garbage, where CPython runs
    weakref callbacks (raw's free) before `__del__` (the give-back), and the pool would
    take back freed memory."""
    from numba.cuda.cudadrv import driver

    class PooledPointer(driver.MemoryPointer):
        def __init__(self, ctx, raw, nbytes, pool):
            super().__init__(ctx, raw.device_pointer, nbytes)
            self._back = (pool, nbytes, int(raw.device_ctypes_pointer.value or 0))

        def __del__(self):
            with contextlib.suppress(Exception):     # (interpreter shutdown)
                pool, nbytes, addr = self._back
                pool._give_back(nbytes, addr)
    return PooledPointer


# ---------------------------------------------------------------------------------------
# Plans
# ---------------------------------------------------------------------------------------

def _array_args(args):
    from .packed_launch import device_pointer
    out = []
    for i, a in enumerate(args):
        if hasattr(a, "__cuda_array_interface__") or hasattr(a, "device_ctypes_pointer"):
            out.append((i, device_pointer(a)))
    return out


class Plan:
    """The launches of one checked call, packed, with which arguments are inputs and
    outputs. `replay(ptrs)` runs them on new inputs (device addresses) into new outputs."""

    def __init__(self, launches, in_ptrs, result):
        from numba.cuda.cudadrv import devices
        out_ptrs = []
        self.outputs = []                   # (shape, strides, dtype, nbytes) per output
        for r in result:
            out_ptrs.append(int(r.device_ctypes_pointer.value or 0))
            self.outputs.append((tuple(r.shape), tuple(r.strides), r.dtype,
                                 int(r.alloc_size)))
        self._templates = [self._template(r, o) for r, o in zip(result, self.outputs)]
        self.launches = []
        self.slots = []                     # (launch, arg index, "in"/"out", number)
        keep, seen_in, seen_out = [], set(), set()
        for li, (disp, grid, threads, shared, args) in enumerate(launches):
            self.launches.append(PackedLaunch(disp, args, grid, threads, shared))
            for ai, ptr in _array_args(args):
                if ptr in in_ptrs:
                    n = in_ptrs.index(ptr)
                    self.slots.append((li, ai, 0, n))
                    seen_in.add(n)
                elif ptr in out_ptrs:
                    n = out_ptrs.index(ptr)
                    self.slots.append((li, ai, 1, n))
                    seen_out.add(n)
                else:
                    keep.append(args[ai])   # a workspace: reused by every replay
        self.complete = (seen_in == set(range(len(in_ptrs)))
                         and seen_out == set(range(len(out_ptrs))) and bool(launches))
        self._keep = keep
        self._ctx = devices.get_context()
        self._lock = threading.Lock()

    @staticmethod
    def _template(result, spec):
        """The fields of a result array (without its memory) to copy for new outputs, if
        such a copy equals an array built by the constructor (else None: build each)."""
        from numba.cuda.cudadrv.devicearray import DeviceNDArray
        if type(result) is not DeviceNDArray:
            return None
        try:
            made = DeviceNDArray(*spec[:3], gpu_data=result.gpu_data)
            copy = object.__new__(DeviceNDArray)
            copy.__dict__.update(result.__dict__)
            copy.gpu_data = result.gpu_data
            same = (copy.__cuda_array_interface__ == made.__cuda_array_interface__
                    and copy.__dict__.keys() == made.__dict__.keys()
                    and copy.size == made.size and copy.alloc_size == made.alloc_size)
        except Exception:
            return None
        if not same:
            return None
        copy.gpu_data = None               # a template only: holds no device memory
        return copy

    def replay(self, in_ptrs, stream: int = 0, outs=None):
        """Queue the kernels on `in_ptrs` (device addresses of the inputs); returns the
        outputs (new pool arrays, or `outs`)."""
        if outs is None:
            ctx = self._ctx
            outs = tuple(POOL.array(ctx, *o, template=t)
                         for o, t in zip(self.outputs, self._templates))
        out_ptrs = [_pointer(o) for o in outs]
        with self._lock:
            launches = self.launches
            for li, ai, kind, n in self.slots:
                launches[li].set_pointer(ai, in_ptrs[n] if kind == 0 else out_ptrs[n])
            for lc in launches:
                lc.launch(stream)
        return outs


def _pointer(a) -> int:
    """The device address of an output: a Numba device array, or a tensor with data_ptr()
    (PyTorch's, whose outputs `flashcourse.torch_ops` allocates itself)."""
    ptr = getattr(a, "device_ctypes_pointer", None)
    if ptr is not None:
        return int(ptr.value or 0)
    return int(a.data_ptr())


def enabled() -> bool:
    return available()


def build_plan(in_ptrs, slow):
    """(result, plan): `slow()` (a checked call, returning a tuple of device arrays) run
    while its launches are recorded, and the `Plan` that replays them on inputs at new
    addresses (`in_ptrs`: the device addresses of the inputs of this call), or None where
    no complete plan can be built (then every call of its key takes the checked path)."""
    global _warned
    with _recording() as launches:
        result = slow()
    try:
        plan = Plan(launches, in_ptrs, result)
    except PackedLaunchError as exc:
        if not _warned:
            warnings.warn(f"flashcourse: the fast launch path is off ({exc})", stacklevel=3)
            _warned = True
        plan = None
    return result, (plan if plan is not None and plan.complete else None)


def cached_call(entry: str, arrays, settings, slow):
    """`slow()` (the checked path, returning a tuple of device arrays) or, when a plan for
    this key exists, its replay. Builds the plan on the first call of a key."""
    if not enabled():
        return slow()
    key, ptrs = plan_key(entry, arrays, settings)
    if key is None:
        return slow()
    plan = _PLANS.get(key)
    if plan is not None:
        return plan.replay(ptrs)
    if key in _UNPLANNABLE:
        return slow()
    result, plan = build_plan(ptrs, slow)
    with _LOCK:
        if plan is None:
            _UNPLANNABLE.add(key)
        else:
            if len(_PLANS) >= MAX_PLANS:
                _PLANS.pop(next(iter(_PLANS)))
            _PLANS[key] = plan
    return result


def clear() -> None:
    """Forget every plan (and the keys found unplannable)."""
    with _LOCK:
        _PLANS.clear()
        _UNPLANNABLE.clear()


# ---------------------------------------------------------------------------------------
# CUDA graphs
# ---------------------------------------------------------------------------------------

class CapturedCall:
    """A plan's launches recorded once into a CUDA graph, on fixed inputs and outputs.

    `replay()` queues the whole graph with one driver call (cuGraphLaunch) on its own
    stream (a blocking stream: ordered after earlier work on the legacy default stream
    and before later work there) and returns the fixed outputs. Write new values into the
    same input arrays between replays (the graph holds their addresses), as with
    PyTorch's CUDA graphs."""

    def __init__(self, plan: Plan, in_ptrs, arrays):
        from cuda.bindings import driver as drv
        from numba import cuda
        self._drv = drv
        self._arrays = arrays                          # the inputs: kept alive
        self.outputs = tuple(POOL.array(plan._ctx, *o) for o in plan.outputs)
        self._stream = cuda.stream()
        handle = self._stream.handle
        self._sh = int(getattr(handle, "value", handle) or 0)
        cuda.synchronize()
        err, = drv.cuStreamBeginCapture(
            self._sh, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        _ok(err, "cuStreamBeginCapture")
        try:
            plan.replay(in_ptrs, stream=self._sh, outs=self.outputs)
        finally:
            err, graph = drv.cuStreamEndCapture(self._sh)
        _ok(err, "cuStreamEndCapture")
        err, self._exec = drv.cuGraphInstantiate(graph, 0)
        _ok(err, "cuGraphInstantiate")
        self._graph = graph
        self._launch = drv.cuGraphLaunch

    def replay(self):
        err, = self._launch(self._exec, self._sh)
        if int(err) != 0:
            _ok(err, "cuGraphLaunch")
        return self.outputs

    def __del__(self):
        drv = getattr(self, "_drv", None)
        if drv is not None:
            with contextlib.suppress(Exception):
                drv.cuGraphExecDestroy(self._exec)
                drv.cuGraphDestroy(self._graph)


def _ok(err, what):
    if int(err) != 0:
        raise RuntimeError(f"{what} failed with {err!r}")


def capture(entry: str, fn, arrays, settings) -> CapturedCall:
    """Run `fn()` once (building the plan), then record its plan into a CUDA graph."""
    from ...gpu import using_simulator
    if using_simulator():
        raise RuntimeError("CUDA graphs need a GPU: the simulator has no driver to record "
                           "launches into a graph; call the function itself instead")
    if not enabled():
        raise RuntimeError("CUDA graphs use the packed launches, which "
                           "FLASHCOURSE_PACKED_LAUNCH=0 turns off")
    fn()
    key, ptrs = plan_key(entry, arrays, settings)
    plan = None if key is None else _PLANS.get(key)
    if plan is None:
        raise ValueError("this call cannot be captured: its inputs are not device arrays "
                         "its kernels read directly (numpy inputs, or a precision that "
                         "converts them through a copy)")
    return CapturedCall(plan, ptrs, arrays)
