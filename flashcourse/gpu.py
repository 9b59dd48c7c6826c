"""Decide, before Numba is imported, whether CUDA kernels run on a GPU or the simulator.

Numba reads NUMBA_ENABLE_CUDASIM once, when it is first imported. So
`import flashcourse` (which imports this module first) asks the CUDA driver
directly, through ctypes, whether a GPU is present; if not, it switches on
Numba's CUDA simulator, which runs kernels as Python threads on the CPU: slow,
but it lets every learner run and check the CUDA kernels of notebook 06.

It also points Numba's on-disk cache at a writable folder when the package
folder is read-only (a system-wide or container install).
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import tempfile
from pathlib import Path


@functools.lru_cache(maxsize=None)
def driver_has_gpu() -> bool:
    """True if the NVIDIA driver library loads and reports at least one device."""
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        try:
            if lib.cuInit(0) != 0:
                return False
            count = ctypes.c_int(0)
            return lib.cuDeviceGetCount(ctypes.byref(count)) == 0 and count.value > 0
        except AttributeError:
            return False
    return False


def select_cuda_target() -> None:
    """Turn on the CUDA simulator when there is no GPU, if it is not too late.

    Too late means numba.cuda is already imported (it chose its target then); a plain
    `import numba` before flashcourse is fine: Numba's configuration is re-read.
    """
    if "NUMBA_ENABLE_CUDASIM" in os.environ or "numba.cuda" in sys.modules:
        return
    if not driver_has_gpu():
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        if "numba" in sys.modules:
            from numba.core import config
            config.reload_config()


def quiet_small_grids() -> None:
    """Turn off Numba's warning that a launch of fewer than 128 blocks under-uses a GPU.

    On a real GPU Numba prints a NumbaPerformanceWarning for every such launch; the
    course's demonstrations and lab checks launch small grids on purpose, so a notebook
    would fill with warnings that are not the learner's. Left as it is when the learner
    sets NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS themselves.
    """
    if "NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS" in os.environ:
        return
    os.environ["NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS"] = "0"   # read when numba.cuda loads
    if "numba.cuda" in sys.modules:                          # already loaded: its setting
        try:
            from numba.cuda.core import config
            config.CUDA_LOW_OCCUPANCY_WARNINGS = 0
        except (ImportError, AttributeError):
            pass


def using_simulator() -> bool:
    """True when Numba's CUDA target is the simulator (set before numba was imported)."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


NO_TARGET_MESSAGE = (
    "No CUDA GPU is visible and Numba's CUDA simulator is off: numba.cuda was imported "
    "before flashcourse, so flashcourse could not switch the simulator on. Restart the "
    "kernel and run `import flashcourse` before `from numba import cuda` (or set the "
    "environment variable NUMBA_ENABLE_CUDASIM=1 before starting Python).")


def check_cuda_target() -> None:
    """Raise RuntimeError with NO_TARGET_MESSAGE when CUDA kernels could not run at all."""
    if not using_simulator() and not driver_has_gpu():
        raise RuntimeError(NO_TARGET_MESSAGE)


def select_cache_dir() -> None:
    """Use a private, writable NUMBA_CACHE_DIR when the package folder is read-only."""
    if "NUMBA_CACHE_DIR" in os.environ:
        return
    package_dir = Path(__file__).resolve().parent
    if os.access(package_dir, os.W_OK):
        return
    os.environ["NUMBA_CACHE_DIR"] = str(choose_cache_dir())


def choose_cache_dir() -> Path:
    """A cache folder only the current user can write to.

    Numba's cache index is a pickle: whoever can write the folder can run code in
    every process that loads it. So a folder is accepted only if it is a real
    directory (not a symlink) owned by the current user and not writable by group
    or others; a missing one is created with mode 0700. Tried in order:
    $XDG_CACHE_HOME (or ~/.cache)/flashcourse-numba, then
    $TMPDIR/flashcourse-numba-<uid>; if neither qualifies (e.g. another user
    pre-created it with mode 777), a fresh private temporary folder.
    """
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    for candidate in (base / "flashcourse-numba",
                      Path(tempfile.gettempdir()) / f"flashcourse-numba-{uid}"):
        if private_dir(candidate):
            return candidate
    return Path(tempfile.mkdtemp(prefix="flashcourse-numba-"))     # mode 0700, ours


def private_dir(path: Path) -> bool:
    """Create `path` (mode 0700) if missing; True if it is a directory that only the
    current user can write to: owned by them, no group/other write bit, no symlink."""
    import stat
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.lstat()
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode):                      # a symlink or a file
        return False
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return False
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return False
    return os.access(path, os.W_OK | os.X_OK)
