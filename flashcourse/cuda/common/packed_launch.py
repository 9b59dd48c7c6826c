"""packed_launch: a kernel launch whose arguments are packed once, then replayed cheaply.

Why: numba-cuda's `kernel[grid, block](*args)` is convenient and slow. Every call it
types each argument (to pick the compiled overload), turns every array into the ~9
values Numba passes for it (meminfo, parent, size, itemsize, data, shape..., strides...)
and hands them to `cuda.core.launch`, which packs them again. For a decode call's two
launches (13 and 6 arguments) that is 56 + 37 us of Python for kernels that take ~80 us
on the GPU (benchmarks/results/h200_host_probe_log.txt, measured on an H200).

What this does instead: the first launch goes through Numba as usual (it compiles,
opts in to large shared memory, checks). `PackedLaunch` then takes the compiled
kernel, writes every argument once into ctypes storage laid out exactly as Numba's
`_Kernel._prepare_args` lays it out, and keeps an array of pointers to them
(`void **kernelParams`). A later call changes only what changed (the data pointers
of the arrays: a new q, a new output) and calls the driver's `cuLaunchKernel`
through cuda-bindings: a few microseconds.

Private route: it relies on numba-cuda's compiled-kernel objects (`dispatcher.compile`,
`_Kernel.argument_types`, `_codelibrary.get_cufunc().handle`) and on Numba's array
argument layout. If those move, building a PackedLaunch raises `PackedLaunchError`
saying what moved; the callers then fall back to Numba's own launch (slow, right),
and `FLASHCOURSE_PACKED_LAUNCH=0` turns the packed route off altogether. The tests on
a GPU (benchmarks/gpu_host_path.py --check) compare every packed launch with Numba's
launch of the same arguments, bit for bit.

Not on the simulator: there kernels are Python functions; `available()` is False.
"""

from __future__ import annotations

import ctypes
import os

from ...gpu import using_simulator


class PackedLaunchError(RuntimeError):
    """numba-cuda's private kernel objects or argument layout are not what we expect."""


def available() -> bool:
    """True on a GPU unless FLASHCOURSE_PACKED_LAUNCH=0."""
    return (not using_simulator()
            and os.environ.get("FLASHCOURSE_PACKED_LAUNCH", "1").strip() not in ("0", ""))


def _driver():
    from cuda.bindings import driver
    return driver


def _check(result, what: str) -> None:
    err = result[0] if isinstance(result, tuple) else result
    if int(err) != 0:
        drv = _driver()
        name = drv.cuGetErrorName(err)[1]
        raise RuntimeError(f"{what} failed: {name.decode() if name else int(err)}")


def device_pointer(a) -> int:
    """The device address of a Numba device array or any CUDA-array-interface object."""
    ptr = getattr(a, "device_ctypes_pointer", None)
    if ptr is not None:
        return int(ptr.value or 0)
    return int(a.__cuda_array_interface__["data"][0])


class PackedLaunch:
    """One kernel launch, its arguments packed in ctypes storage for cuLaunchKernel.

    dispatcher: a `numba.cuda.jit` kernel; args: the arguments of a launch that has
    already run through Numba (so the overload is compiled and any opt-in done);
    grid, block: launch shape (ints or tuples); shared_bytes: dynamic shared memory.

    `set_pointer(i, ptr)` points array argument i at another device address (an array of
    the same dtype, shape and strides as at packing: the caller's plan is keyed on them);
    `launch(stream)` queues the kernel (default: the legacy default stream).
    """

    def __init__(self, dispatcher, args, grid, block, shared_bytes: int = 0):
        from numba.cuda.cudadrv.devicearray import DeviceNDArray
        try:
            argtypes = tuple(dispatcher.typeof_pyval(a) for a in args)
            kernel = dispatcher.compile(argtypes)
            handle = kernel._codelibrary.get_cufunc().handle
            types = kernel.argument_types
        except AttributeError as exc:
            raise PackedLaunchError(
                f"numba-cuda's compiled-kernel objects have changed ({exc}); the packed "
                "launch route (flashcourse/cuda/common/packed_launch.py) needs updating. Set "
                "FLASHCOURSE_PACKED_LAUNCH=0 to use Numba's own launch.") from exc
        from numba.cuda import types as nbtypes
        self._storage = []                 # ctypes values; kernelParams points at them
        self._data_slot = {}               # argument index -> its data-pointer c_void_p
        for i, (ty, a) in enumerate(zip(types, args)):
            if isinstance(ty, nbtypes.Array):
                if not isinstance(a, DeviceNDArray):
                    raise PackedLaunchError(f"argument {i}: only Numba device arrays are "
                                            f"packed, got {type(a).__name__}")
                shape = tuple(int(n) for n in a.shape)
                strides = tuple(int(s) for s in a.strides)
                fields = [ctypes.c_void_p(0), ctypes.c_void_p(0),          # meminfo, parent
                          ctypes.c_int64(int(a.size)), ctypes.c_int64(a.dtype.itemsize),
                          ctypes.c_void_p(device_pointer(a))]
                fields += [ctypes.c_int64(n) for n in shape]
                fields += [ctypes.c_int64(s) for s in strides]
                self._data_slot[i] = fields[4]
                self._storage += fields
            elif isinstance(ty, nbtypes.Integer):
                self._storage.append(getattr(ctypes, f"c_{ty}")(int(a)))
            elif ty == nbtypes.float32:
                self._storage.append(ctypes.c_float(float(a)))
            elif ty == nbtypes.float64:
                self._storage.append(ctypes.c_double(float(a)))
            else:
                raise PackedLaunchError(f"argument {i} has type {ty}, which the packed "
                                        "launch does not pack (arrays, ints, floats only)")
        self._match_numba(kernel, args)
        n = len(self._storage)
        self._params = (ctypes.c_void_p * n)(*[ctypes.addressof(s) for s in self._storage])
        self._params_addr = ctypes.addressof(self._params)
        drv = _driver()
        try:
            err, func = drv.cuKernelGetFunction(handle)
            _check(err, "cuKernelGetFunction")
        except TypeError:                  # already a CUfunction
            func = handle
        self._func = func
        g = tuple(grid) if isinstance(grid, tuple) else (int(grid),)
        b = tuple(block) if isinstance(block, tuple) else (int(block),)
        g, b = g + (1,) * (3 - len(g)), b + (1,) * (3 - len(b))
        self._dims = tuple(int(x) for x in g + b)
        self._shared = int(shared_bytes)
        self._launch = drv.cuLaunchKernel
        self.kernel = kernel

    def _match_numba(self, kernel, args) -> None:
        """Compare the packed values with the list Numba itself would pass for `args`
        (`_Kernel._prepare_args`): same count, same values, else PackedLaunchError."""
        theirs, retr = [], []
        try:
            for ty, a in zip(kernel.argument_types, args):
                kernel._prepare_args(ty, a, 0, retr, theirs)
        except (AttributeError, TypeError) as exc:
            raise PackedLaunchError(f"numba-cuda's argument preparation moved ({exc})") from exc
        ours = [s.value or 0 for s in self._storage]
        theirs = [getattr(t, "value", t) for t in theirs]
        theirs = [int(t) if isinstance(t, (bool, int)) else t for t in theirs]
        if len(ours) != len(theirs) or any(
                (float(a) != float(b)) for a, b in zip(ours, theirs)):
            raise PackedLaunchError(
                f"{kernel}: the packed arguments ({len(ours)} values) differ from those "
                f"numba-cuda prepares ({len(theirs)}): {ours[:80]} vs {theirs[:80]}")

    def set_pointer(self, index: int, ptr: int) -> None:
        """Point array argument `index` at device address `ptr`."""
        self._data_slot[index].value = ptr

    def launch(self, stream: int = 0) -> None:
        gx, gy, gz, bx, by, bz = self._dims
        err = self._launch(self._func, gx, gy, gz, bx, by, bz, self._shared, stream,
                           self._params_addr, 0)
        if int(err[0]) != 0:
            _check(err, f"cuLaunchKernel({self.kernel})")


def stream_handle(stream) -> int:
    """The driver handle of a Numba stream (0, None or the default stream: 0)."""
    if stream is None or (isinstance(stream, int) and stream == 0):
        return 0
    h = stream.handle
    return int(getattr(h, "value", h) or 0)


def _layout(args) -> tuple:
    """What a packed launch depends on besides the data pointers: each array's type, shape,
    strides and dtype, each scalar's type and value."""
    out = []
    for a in args:
        if hasattr(a, "device_ctypes_pointer") or hasattr(a, "__cuda_array_interface__"):
            out.append((type(a), tuple(a.shape), tuple(a.strides), a.dtype.str))
        else:
            out.append((type(a), a))
    return tuple(out)


class LaunchCache:
    """Packed launches kept per kernel and argument layout, for a host path that launches
    the same kernels again and again on new arrays of the same shapes (a decode step).

    `launch(...)`: the first call of a layout goes through Numba (`slow()`: it compiles
    and opts in to large shared memory), and its arguments are packed; later calls of
    the same layout set the data pointers of this call's arrays and call cuLaunchKernel.
    Where packing is refused (`PackedLaunchError`: an argument that is not a Numba
    device array, say) or off (`available()`), every call goes through Numba."""

    def __init__(self):
        import threading
        self._packed = {}
        self._lock = threading.Lock()

    def launch(self, kernel, grid, block, shared_bytes, args, stream, slow) -> None:
        if not available():
            slow()
            return
        key = (id(kernel), grid, block, shared_bytes, _layout(args))
        entry = self._packed.get(key)
        if entry is None:
            slow()
            try:
                packed = PackedLaunch(kernel, args, grid, block, shared_bytes)
            except PackedLaunchError:
                packed = None
            self._packed[key] = (kernel, packed)     # the kernel kept alive: id stays unique
            return
        packed = entry[1]
        if packed is None:
            slow()
            return
        with self._lock:
            for i in packed._data_slot:
                packed.set_pointer(i, device_pointer(args[i]))
            packed.launch(stream_handle(stream))
