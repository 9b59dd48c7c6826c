"""Shared plumbing of the CUDA kernels: input preparation, device limits, launches.

Nothing here is attention maths. It holds what every kernel module needs:

- `simulator_note()`: says once that kernels run on Numba's CUDA simulator.
- `device_limits()`: threads per block, shared memory per block (default and
  opt-in), registers per block, of the current device (fixed H100/H200-like
  numbers under the simulator, so that the same configurations are rejected there).
- `check_launch(...)`: rejects a configuration that cannot launch, with an error
  that names the limit and both amounts, before anything is compiled.
- `launch(...)`: launches a kernel with dynamic shared memory, raising the
  kernel's dynamic shared-memory cap above 48 KB when needed (Numba has no public
  API for it; we use the driver call through Numba's private objects and fail with
  a clear message if they move).
- `prepare(...)`: validates q, k, v (numpy or device arrays) and flattens the batch
  dimensions, (..., T, d) -> (B*H, T, d).
"""

from __future__ import annotations

import math
import sys

import numpy as np

from .. import gpu as _gpu
from .._checks import (accumulator_dtype, check_causal, check_qkv, check_scale)

SIMULATOR_MESSAGE = ("no CUDA GPU found: running kernels on Numba's CUDA simulator "
                     "(slow; tiny sizes only)")
_said = False

#: Limits assumed under the simulator (those of an H100/H200, compute capability 9.0).
SIM_LIMITS = {"threads": 1024, "shared_default": 48 * 1024,
              "shared_optin": 227 * 1024, "registers": 65536, "warp": 32}


def using_simulator() -> bool:
    return _gpu.using_simulator()


def simulator_note() -> None:
    """Print, once per process, that kernels run on the simulator; fail clearly when
    neither a GPU nor the simulator is available (numba.cuda imported too early)."""
    global _said
    _gpu.check_cuda_target()
    if using_simulator() and not _said:
        print(SIMULATOR_MESSAGE, file=sys.stdout)
        _said = True


def device_limits() -> dict:
    """Per-block limits of the current device: threads, shared bytes, registers."""
    if using_simulator():
        return dict(SIM_LIMITS)
    from numba import cuda
    dev = cuda.get_current_device()
    return {"threads": int(dev.MAX_THREADS_PER_BLOCK),
            "shared_default": int(dev.MAX_SHARED_MEMORY_PER_BLOCK),
            "shared_optin": int(dev.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
            "registers": int(dev.MAX_REGISTERS_PER_BLOCK),
            "warp": int(dev.WARP_SIZE)}


def check_launch(name: str, threads: int, shared_bytes: int) -> None:
    """Raise ValueError if `threads` or `shared_bytes` exceed the device's per-block limits."""
    lim = device_limits()
    if threads > lim["threads"]:
        raise ValueError(
            f"{name}: threads={threads} per block exceeds the device limit of "
            f"{lim['threads']} threads per block")
    if shared_bytes > lim["shared_optin"]:
        raise ValueError(
            f"{name}: needs {shared_bytes:,} B of shared memory per block, more than the "
            f"device limit of {lim['shared_optin']:,} B per block; use smaller "
            f"block_q/block_k")


def check_registers(name: str, kernel, threads: int) -> None:
    """After compiling on a GPU: registers x threads must fit in one block's register file."""
    if using_simulator():
        return
    regs = int(kernel.regs_per_thread)
    lim = device_limits()["registers"]
    if regs * threads > lim:
        raise ValueError(
            f"{name}: {regs} registers/thread x {threads} threads = {regs * threads:,} "
            f"registers per block, more than the device limit of {lim:,}; use fewer threads")


_optin_done: dict = {}


def _raise_shared_cap(dispatcher, signature, nbytes: int) -> None:
    """Let `dispatcher` (compiled for `signature`) use `nbytes` > 48 KB of dynamic shared memory."""
    key = (id(dispatcher), signature)
    if _optin_done.get(key, 0) >= nbytes:
        return
    try:
        from numba.cuda.cudadrv.driver import binding, driver
        kern = dispatcher.compile(signature)
        func = kern._codelibrary.get_cufunc()
        attr = binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        driver.cuKernelSetAttribute(attr, nbytes, func.handle, func.device.id)
    except Exception as exc:  # private API: say what failed instead of a bare launch error
        raise RuntimeError(
            f"could not raise the kernel's dynamic shared-memory limit to {nbytes:,} B "
            f"(Numba's private driver API may have changed: {exc!r}); use smaller "
            f"block_q/block_k so the kernel needs at most 48 KB") from exc
    _optin_done[key] = nbytes


def launch(dispatcher, signature, grid, threads, shared_bytes, args) -> None:
    """Launch with `shared_bytes` of dynamic shared memory (opt-in above 48 KB on a GPU)."""
    if not using_simulator() and shared_bytes > 48 * 1024:
        _raise_shared_cap(dispatcher, signature, shared_bytes)
    dispatcher[grid, threads, 0, shared_bytes](*args)


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


def prepare(q, k, v, causal, scale, allow_nonfinite):
    """Validate and flatten inputs.

    Returns (qf, kf, vf, lead, tq, tk, d, scale, causal, on_device, out_dtype, lse_dtype)
    where qf (BH, Tq, d), kf, vf (BH, Tk, d) are float32 C-contiguous device arrays.
    numpy input of float16/float64 is converted to float32 (all kernels compute in
    float32); device input must already be float32 and C-contiguous.
    """
    from numba import cuda
    causal = check_causal(causal)
    on_device = is_device_array(q) or is_device_array(k) or is_device_array(v)
    if on_device:
        shapes = {}
        for name, x in (("q", q), ("k", k), ("v", v)):
            if not is_device_array(x):
                raise TypeError(f"{name} must be a device array like q, got {type(x).__name__}")
            if np.dtype(x.dtype) != np.float32:
                raise TypeError(f"{name} on the device must be float32, got {x.dtype}")
            shp = tuple(int(n) for n in x.shape)
            if len(shp) < 2 or 0 in shp:
                raise ValueError(f"{name} must have shape (..., T, d) with no empty axis, "
                                 f"got {shp}")
            shapes[name] = shp
        qs, ks, vs = shapes["q"], shapes["k"], shapes["v"]
        if not (len(qs) == len(ks) == len(vs)) or qs[:-2] != ks[:-2] or ks != vs \
                or qs[-1] != ks[-1]:
            raise ValueError(f"q (..., Tq, d), k and v (..., Tk, d) shapes do not match: "
                             f"q {qs}, k {ks}, v {vs}")
        lead = qs[:-2]
        tq, d = qs[-2], qs[-1]
        tk = ks[-2]
        bh = int(np.prod(lead)) if lead else 1
        qf, kf, vf = (x.reshape(bh, n, d) for x, n in ((q, tq), (k, tk), (v, tk)))
        out_dtype, lse_dtype = np.dtype(np.float32), np.dtype(np.float32)
    else:
        q, k, v = check_qkv(q, k, v, allow_nonfinite=allow_nonfinite)
        lead = q.shape[:-2]
        tq, tk, d = q.shape[-2], k.shape[-2], q.shape[-1]
        bh = int(np.prod(lead)) if lead else 1
        qf, kf, vf = (cuda.to_device(np.ascontiguousarray(x.reshape(bh, -1, d), np.float32))
                      for x in (q, k, v))
        out_dtype, lse_dtype = q.dtype, accumulator_dtype(q.dtype)
    scale = check_scale(scale, d)
    return qf, kf, vf, lead, tq, tk, d, scale, causal, on_device, out_dtype, lse_dtype


def finish(o, lse, lead, tq, d, on_device, out_dtype, lse_dtype):
    """Reshape (BH, Tq, d)/(BH, Tq) results back to (..., Tq, d)/(..., Tq)."""
    if on_device:
        return o.reshape(*lead, tq, d), lse.reshape(*lead, tq)
    o_h = o.copy_to_host().astype(out_dtype, copy=False)
    lse_h = lse.copy_to_host().astype(lse_dtype, copy=False)
    return o_h.reshape(*lead, tq, d), lse_h.reshape(*lead, tq)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


LOG2E = 1.0 / math.log(2.0)
LN2 = math.log(2.0)
