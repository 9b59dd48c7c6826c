"""Shared plumbing of the CUDA kernels: input preparation, the shared-memory opt-in, launches.

Nothing here is attention maths. It holds what every kernel module needs:

- `simulator_note()`: says once that kernels run on Numba's CUDA simulator.
- `prepare(...)` / `prepare_backward(...)`: validate q, k, v (and o, lse, do), numpy
  or device arrays, and flatten the batch dimensions, (..., T, d) -> (B*H, T, d), with
  the checks a launch needs (C-contiguous device arrays, B*H within the grid's y limit).
- `set_max_dynamic_shared_bytes(...)`: the opt-in beyond 48 KiB of dynamic shared
  memory (Numba has no public call for it; this uses its private driver objects and
  raises SharedMemoryOptInError, saying what moved, if they change).
- `launch(...)`: launches a kernel with dynamic shared memory, opting in when needed.
- `check_registers(...)`: after compiling, registers x threads must fit one block.
- `serialised` / `simulator_lock()`: under the simulator, one kernel call at a time.

Every `launch` is also offered to `host_plans.record`, which keeps it while the public
fast path records a checked call to build its plan (`host_plans.py`).

Threads: Numba's CUDA simulator runs one kernel at a time per process (it swaps the
`cuda` module's globals while a kernel runs; a second thread's launch fails with
"concurrent simulated kernel not supported"). Under the simulator `launch` and the
public entries `cuda.forward`, `cuda.backward`, `cuda.decode` (decorated with
`serialised`) hold one re-entrant lock, so calls from several threads run one after
another and each gets its right result. On a GPU nothing is serialised (numba-cuda
launches from several host threads share the device; not tested by the course).

Launch limits (threads, shared memory per block) are checked by
`flashcourse.limits.check_launch` against `flashcourse.limits.current_limits()`.
"""

from __future__ import annotations

import functools
import sys
import threading
from contextlib import nullcontext

import numpy as np

from ... import gpu as _gpu
from ..._checks import (Heads, accumulator_dtype, check_backward_shapes, check_bool,
                       check_causal, check_qkv_shapes, check_scale, flatten_heads)
from ...gpu import using_simulator
from ...limits import current_limits
from . import host_plans

SIMULATOR_MESSAGE = ("no CUDA GPU found: running kernels on Numba's CUDA simulator "
                     "(slow; tiny sizes only)")
_said = False

#: The largest grid y dimension: kernels put B*H there (CUDA's limit, 2**16 - 1).
MAX_GRID_Y = 65535


def simulator_note() -> None:
    """Print, once per process, that kernels run on the simulator; fail clearly when
    neither a GPU nor the simulator is available (numba.cuda imported too early)."""
    global _said
    _gpu.check_cuda_target()
    if using_simulator() and not _said:
        print(SIMULATOR_MESSAGE, file=sys.stdout)
        _said = True


#: Held around simulated kernel calls (re-entrant: a public entry holds it, and the
#: launches inside it take it again).
_SIMULATOR_LOCK = threading.RLock()


def simulator_lock():
    """A context manager: the simulator's lock when kernels run on the simulator (one
    simulated kernel at a time per process), else a no-op."""
    return _SIMULATOR_LOCK if using_simulator() else nullcontext()


def serialised(fn):
    """Decorator: under the simulator, `fn` runs holding the simulator's lock, so two
    threads calling it take turns instead of breaking the simulator (see the module
    docstring); on a GPU `fn` runs as it is."""
    @functools.wraps(fn)
    def run_serialised(*args, **kwargs):
        with simulator_lock():
            return fn(*args, **kwargs)
    return run_serialised


def check_registers(name: str, kernel, threads: int) -> None:
    """After compiling on a GPU: registers x threads must fit in one block's register file."""
    if using_simulator():
        return
    regs = int(kernel.regs_per_thread)
    lim = current_limits().max_regs_per_block
    if regs * threads > lim:
        raise ValueError(
            f"{name}: {regs} registers/thread x {threads} threads = {regs * threads:,} "
            f"registers per block, more than the device limit of {lim:,}; use fewer threads")


# ---------------------------------------------------------------------------
# Opt-in to more than 48 KiB of dynamic shared memory (numba-cuda private API)
# ---------------------------------------------------------------------------

class WarpThreads:
    """Mixin of the kernel configurations that count warps (the frozen dataclasses
    `TCConfig`, `TCBConfig`, `DecodeConfig`, `DecodeTCConfig`): threads = 32 per warp."""

    @property
    def threads(self):
        return 32 * self.warps


class SharedMemoryOptInError(RuntimeError):
    """Raised when the private numba-cuda route to the opt-in attribute has moved."""


_optin_done: dict = {}


def set_max_dynamic_shared_bytes(dispatcher, signature, nbytes: int) -> None:
    """Let `dispatcher`'s compiled overload for `signature` use `nbytes` of dynamic
    shared memory (Hopper allows up to 227 KiB per block, but only after this call).

    numba-cuda has no public call for it: this compiles the overload, takes its
    CUfunction and calls cuKernelSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES). If that
    private route moves, it raises SharedMemoryOptInError saying so.
    """
    nbytes = int(nbytes)
    if nbytes <= 48 * 1024:
        return
    key = (id(dispatcher), tuple(signature))
    if _optin_done.get(key, 0) >= nbytes:
        return
    try:
        from numba.cuda.cudadrv.driver import binding, driver
        kern = dispatcher.compile(tuple(signature))
        func = kern._codelibrary.get_cufunc()
        attr = binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        driver.cuKernelSetAttribute(attr, nbytes, func.handle, func.device.id)
    except (AttributeError, ImportError, TypeError) as exc:  # the private route moved
        raise SharedMemoryOptInError(
            f"could not raise the kernel's dynamic shared memory to {nbytes:,} bytes: "
            f"numba-cuda's private API (dispatcher.compile()._codelibrary.get_cufunc(), "
            f"driver.cuKernelSetAttribute) has changed ({type(exc).__name__}: {exc}). "
            "Use tiles that need at most 49,152 bytes, or update "
            "flashcourse.cuda.common._launch.set_max_dynamic_shared_bytes.") from exc
    _optin_done[key] = nbytes


def launch(dispatcher, signature, grid, threads, shared_bytes, args) -> None:
    """Launch with `shared_bytes` of dynamic shared memory (opt-in above 48 KB on a GPU)."""
    if not using_simulator():
        set_max_dynamic_shared_bytes(dispatcher, signature, shared_bytes)
    with simulator_lock():             # one simulated kernel at a time (module docstring)
        dispatcher[grid, threads, 0, shared_bytes](*args)
    host_plans.record(dispatcher, grid, threads, shared_bytes, args)


# ---------------------------------------------------------------------------
# Inputs: numpy or device arrays -> flattened float32 device arrays
# ---------------------------------------------------------------------------

def flat(a):
    """A C-contiguous device array as a 1-D view of the same memory (for the kernels that
    index it with one unsigned index: `smem_ops.cp16`, `smem_ops.red_add`)."""
    return a.reshape(int(a.size))


def is_device_array(x) -> bool:
    """True for a Numba device array (or any object with the CUDA array interface)."""
    if isinstance(x, np.ndarray):
        return False
    if hasattr(x, "__cuda_array_interface__"):
        return True
    from numba import cuda
    if using_simulator():
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
        return isinstance(x, FakeCUDAArray)
    return cuda.is_cuda_array(x)


def as_device_array(name: str, x, dtypes):
    """`x` as a Numba device array (any object with the CUDA array interface is viewed
    as one, without a copy), after checking its dtype and layout."""
    if not is_device_array(x):
        raise TypeError(f"{name} must be a device array like q, got {type(x).__name__}")
    if not hasattr(x, "is_c_contiguous"):
        from numba import cuda
        x = cuda.as_cuda_array(x)
    if np.dtype(x.dtype) not in dtypes:
        raise TypeError(f"{name} on the device must have dtype "
                        f"{' or '.join(str(np.dtype(t)) for t in dtypes)}, got {x.dtype}")
    if not x.is_c_contiguous():
        x = c_strided_view(x)
        if x is None:
            raise ValueError(f"{name} on the device must be C-contiguous (e.g. made by "
                             "cuda.to_device(np.ascontiguousarray(...))), got a strided view")
    return x


def c_strided_view(x):
    """`x` viewed with C-order strides when only its dimensions of size 1 break them, else
    None. NumPy's `a[None]` and PyTorch's `unsqueeze` give a size-1 dimension any stride
    (NumPy and PyTorch still call the array contiguous, so `np.ascontiguousarray` keeps it);
    Numba's device arrays call it strided. No element moves: the view is the same memory."""
    shape, item = tuple(int(n) for n in x.shape), np.dtype(x.dtype).itemsize
    want, step = [], item
    for n in reversed(shape):
        want.append(step)
        step *= n
    want = tuple(reversed(want))
    if any(n != 1 and s != w for n, s, w in zip(shape, x.strides, want)):
        return None
    from numba.cuda.cudadrv.devicearray import DeviceNDArray
    return DeviceNDArray(shape, want, x.dtype, stream=x.stream, gpu_data=x.gpu_data)


def _shape(x) -> tuple:
    return tuple(int(n) for n in x.shape)


def _check_grid(bh: int) -> None:
    if bh > MAX_GRID_Y:
        raise ValueError(f"batch x heads = {bh:,} exceeds the CUDA grid's y limit of "
                         f"{MAX_GRID_Y:,} (the kernels launch one block row per head); "
                         "split the batch into chunks")


def prepare(q, k, v, causal, scale, allow_nonfinite, *, dtypes=(np.float32,),
            convert_to=np.float32):
    """Validate and flatten forward inputs for a kernel.

    Returns (x, on_device, out_dtype, lse_dtype): x is a `flashcourse._checks.Heads`
    whose q (BH, Tq, d), k, v (BH, Tk, d) are C-contiguous device arrays. numpy input
    is copied to the device as `convert_to` (None keeps its dtype: a kernel that
    computes in the input precision); device input must already have one of `dtypes`
    and be C-contiguous. Results of numpy input come back in its dtype.
    """
    from numba import cuda
    if any(is_device_array(a) for a in (q, k, v)):
        causal = check_causal(causal)
        check_bool(allow_nonfinite, "allow_nonfinite")
        q, k, v = (as_device_array(n, a, dtypes) for n, a in (("q", q), ("k", k), ("v", v)))
        qs, ks, vs = _shape(q), _shape(k), _shape(v)
        for name, shp in (("q", qs), ("k", ks), ("v", vs)):
            if len(shp) < 2 or 0 in shp:
                raise ValueError(f"{name} must have shape (..., T, d) with no empty axis, "
                                 f"got {shp}")
        check_qkv_shapes(qs, ks, vs)
        lead, (tq, d), tk = qs[:-2], qs[-2:], ks[-2]
        bh = int(np.prod(lead)) if lead else 1
        _check_grid(bh)
        if len({np.dtype(a.dtype) for a in (q, k, v)}) != 1:
            raise TypeError(f"q, k and v must share one dtype, got q {q.dtype}, "
                            f"k {k.dtype}, v {v.dtype}")
        dtype = np.dtype(q.dtype)
        x = Heads(q.reshape(bh, tq, d), k.reshape(bh, tk, d), v.reshape(bh, tk, d),
                  lead, tq, tk, d, check_scale(scale, d), causal, dtype)
        return x, True, dtype, accumulator_dtype(dtype)
    h = flatten_heads(q, k, v, causal=causal, scale=scale, allow_nonfinite=allow_nonfinite)
    _check_grid(h.bh)
    dt = h.dtype if convert_to is None else np.dtype(convert_to)
    qf, kf, vf = (cuda.to_device(np.ascontiguousarray(a, dt)) for a in (h.q, h.k, h.v))
    x = Heads(qf, kf, vf, h.lead, h.tq, h.tk, h.d, h.scale, h.causal, dt)
    return x, False, h.dtype, h.acc_dtype


def prepare_backward(q, k, v, o, lse, do, causal, scale, *, dtypes=(np.float32,),
                     convert_to=np.float32):
    """Validate and flatten backward inputs (numpy or device arrays).

    Returns (x, on_device, out_dtype): x is a `Heads` with q, o, do (BH, Tq, d),
    k, v (BH, Tk, d) as C-contiguous device arrays of one dtype (one of `dtypes`) and
    lse (BH, Tq) float32. numpy input is copied as `convert_to` (None: float16 stays
    float16, other floats become float32).
    """
    from numba import cuda
    arrays = {"q": q, "k": k, "v": v, "o": o, "lse": lse, "do": do}
    if any(is_device_array(a) for a in arrays.values()):
        arrays = {n: as_device_array(n, a, (np.float32,) if n == "lse" else dtypes)
                  for n, a in arrays.items()}
        q, k, v, o, lse, do = arrays.values()
        for name in ("k", "v", "o", "do"):
            if np.dtype(arrays[name].dtype) != np.dtype(q.dtype):
                raise TypeError(f"{name} must have q's dtype {q.dtype} on the device, got "
                                f"{arrays[name].dtype}")
        shapes = {n: _shape(a) for n, a in arrays.items()}
        for name in ("q", "k", "v", "o", "do"):
            if len(shapes[name]) < 2 or 0 in shapes[name]:
                raise ValueError(f"{name} must have shape (..., T, d) with no empty axis, "
                                 f"got {shapes[name]}")
        check_qkv_shapes(shapes["q"], shapes["k"], shapes["v"])
        check_backward_shapes(shapes["q"], shapes["o"], shapes["lse"], shapes["do"])
        qs, tk = shapes["q"], shapes["k"][-2]
        lead, (tq, d) = qs[:-2], qs[-2:]
        bh = int(np.prod(lead)) if lead else 1
        _check_grid(bh)
        dt = np.dtype(q.dtype)
        x = Heads(q.reshape(bh, tq, d), k.reshape(bh, tk, d), v.reshape(bh, tk, d), lead,
                  tq, tk, d, check_scale(scale, d), check_causal(causal),
                  dt, o=o.reshape(bh, tq, d), lse=lse.reshape(bh, tq),
                  do=do.reshape(bh, tq, d))
        return x, True, dt
    h = flatten_heads(q, k, v, causal=causal, scale=scale, o=o, lse=lse, do=do)
    _check_grid(h.bh)
    work = np.dtype(np.float32)
    if convert_to is None and np.dtype(h.dtype) == np.float16:
        work = np.dtype(np.float16)
    elif convert_to is not None:
        work = np.dtype(convert_to)
    if work not in [np.dtype(t) for t in dtypes]:
        raise TypeError(f"this backward kernel takes "
                        f"{' or '.join(str(np.dtype(t)) for t in dtypes)} inputs, got "
                        f"{np.dtype(h.dtype)}")

    def dev(name, a, as_type=work):
        with np.errstate(over="ignore"):
            a32 = np.ascontiguousarray(a, as_type)
        lost = np.isfinite(a) & ~np.isfinite(a32)        # float64 values beyond float32
        if lost.any():
            raise ValueError(
                f"{name} has values beyond float32's range (|{name}| up to "
                f"{float(np.abs(a[lost]).max()):.3g}; float32 holds at most "
                f"{float(np.finfo(np.float32).max):.3g}), and the CUDA backward computes in "
                f"float32: scale the inputs down or use flashcourse.tiled.backward with "
                f"float64 inputs")
        return cuda.to_device(a32)

    x = Heads(dev("q", h.q), dev("k", h.k), dev("v", h.v), h.lead, h.tq, h.tk, h.d, h.scale,
              h.causal, work, o=dev("o", h.o), lse=dev("lse", h.lse, np.float32),
              do=dev("do", h.do))
    return x, False, h.dtype


def finish(x: Heads, results, on_device: bool, dtypes):
    """(BH, T, ...) device results -> (..., T, ...): left on the device for device input,
    else copied to the host as `dtypes` (one per result)."""
    if on_device:
        return tuple(x.unflatten(r) for r in results)
    return tuple(x.unflatten(r.copy_to_host().astype(t, copy=False))
                 for r, t in zip(results, dtypes))

