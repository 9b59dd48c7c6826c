"""The environment check of notebook 00: versions, GPU or simulator.

    from flashcourse.env import show
    show()          # prints a small table and what it means for the course

`report()` returns the same facts as a dict, for tests and for bug reports:

    python, platform       interpreter version and operating system
    numpy, numba, numba-cuda, matplotlib, jupyterlab, ipywidgets, flashcourse
                           installed versions (None when a package is missing)
    cuda_gpu               True if the NVIDIA driver reports at least one GPU
    simulator              True if Numba's CUDA target is the CPU simulator
                           (flashcourse switches it on at import when there is no GPU)

Versions are read from the installed package metadata, so `report()` imports
none of the heavy packages (and in particular never imports Numba itself).

`record()` is what every results file stores beside its numbers (benchmarks, the
tuning sweep, the traffic study): date, versions, the CPU as Numba sees it, the BLAS
libraries and their threads (threadpoolctl), and the GPU, driver and CUDA versions.
"""

from __future__ import annotations

import platform
import textwrap
from importlib import metadata

from . import gpu

#: Distribution names whose versions the course cares about, in display order.
PACKAGES = ("numpy", "numba", "numba-cuda", "matplotlib", "jupyterlab", "ipywidgets",
            "flashcourse")

#: Oldest Python the course supports.
MIN_PYTHON = (3, 10)


def package_version(name: str) -> str | None:
    """Installed version of distribution `name`, or None if it is not installed."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def report() -> dict:
    """Facts about this environment (see the module docstring for the keys)."""
    facts = {
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
    }
    for name in PACKAGES:
        facts[name] = package_version(name)
    facts["cuda_gpu"] = gpu.driver_has_gpu()
    facts["simulator"] = gpu.using_simulator()
    return facts


def advice(facts: dict) -> list[str]:
    """Plain-language notes about a `report()`: what works and what to fix."""
    notes = []
    py_ok = tuple(int(p) for p in facts["python"].split(".")[:2]) >= MIN_PYTHON
    if not py_ok:
        notes.append(f"Python {facts['python']} is too old: the course needs "
                     f"{MIN_PYTHON[0]}.{MIN_PYTHON[1]} or newer.")
    missing = [n for n in PACKAGES if facts.get(n) is None]
    if missing:
        notes.append("Missing packages: " + ", ".join(missing)
                     + ". Run `make lab` (or `pip install -r requirements.txt`).")
    numpy_version = facts.get("numpy")
    if numpy_version and tuple(int(p) for p in numpy_version.split(".")[:2]) >= (2, 5):
        notes.append(f"numpy {numpy_version}: numba-cuda 0.30 cannot compile kernels "
                     "with numpy 2.5 or newer; install the pinned requirements.txt.")
    if facts["cuda_gpu"] and facts["simulator"]:
        notes.append("A GPU is visible but the CUDA simulator is on "
                     "(NUMBA_ENABLE_CUDASIM is set): kernels will run slowly on the CPU.")
    elif facts["cuda_gpu"]:
        notes.append("An NVIDIA GPU is visible: notebook 06's kernels run on it. If they "
                     "fail to compile, install requirements-gpu.txt (the CUDA toolkit wheels).")
    elif facts["simulator"]:
        notes.append("No NVIDIA GPU: CUDA kernels run in Numba's simulator (correct but slow), "
                     "and the GPU notebooks plot the results recorded on an H200 (notebooks "
                     "11b, 13, 14 and 15: on an H100) in benchmarks/results/.")
    else:
        notes.append("No NVIDIA GPU and the simulator is off: import flashcourse before numba "
                     "(or set NUMBA_ENABLE_CUDASIM=1) to run the CUDA notebooks.")
    if not missing and py_ok:
        notes.append("Everything the CPU notebooks need is installed.")
    return notes


def show(facts: dict | None = None) -> dict:
    """Print the environment table and the advice; return the facts."""
    facts = report() if facts is None else facts
    width = max(len(k) for k in facts)
    for key, value in facts.items():
        if value is None:
            value = "NOT INSTALLED"
        elif value is True:
            value = "yes"
        elif value is False:
            value = "no"
        print(f"{key:<{width}}  {value}")
    print()
    for note in advice(facts):                      # wrapped: lines under 100 characters
        print(textwrap.fill(note, width=96, initial_indent="- ", subsequent_indent="  "))
    return facts


def record() -> dict:
    """The environment a measurement was made in, for results files (one recorder for all).

    date (UTC), python, numpy, numba, numba_cuda, torch (versions or None); cpu: name,
    count and features from Numba's system information; blas: the BLAS/OpenMP libraries
    loaded and their thread counts (threadpoolctl); gpu, driver (nvidia-smi), cuda
    (runtime) and cuda_driver_api (driver API) when a GPU is present, else None.
    """
    import datetime
    import subprocess

    import numpy as np
    from numba.misc.numba_sysinfo import get_sysinfo
    from threadpoolctl import threadpool_info

    info = get_sysinfo()
    env = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "python": platform.python_version(), "numpy": np.__version__,
           "numba": package_version("numba"), "numba_cuda": package_version("numba-cuda"),
           "torch": package_version("torch"),
           "cpu": {"name": info.get("CPU Name"), "count": info.get("CPU Count"),
                   "allowed": info.get("CPUs Allowed"), "features": info.get("CPU Features")},
           "blas": [{k: lib.get(k) for k in ("internal_api", "version", "num_threads",
                                             "threading_layer", "architecture")}
                    for lib in threadpool_info()],
           "gpu": None, "driver": None, "cuda": None, "cuda_driver_api": None}
    if gpu.using_simulator() or not gpu.driver_has_gpu():
        return env
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=20).stdout.strip().splitlines()
    except (OSError, subprocess.TimeoutExpired):  # no nvidia-smi: the name comes from Numba
        out = []
    if out:
        env["gpu"], env["driver"] = [p.strip() for p in out[0].split(",")][:2]
    from numba import cuda
    env["cuda"] = ".".join(map(str, cuda.runtime.get_version()))
    env["cuda_driver_api"] = ".".join(map(str, cuda.cudadrv.driver.driver.get_version()))
    if env["gpu"] is None:
        name = cuda.get_current_device().name
        env["gpu"] = name.decode() if isinstance(name, bytes) else str(name)
    return env
