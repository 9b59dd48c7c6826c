"""Shared test set-up.

Importing flashcourse first lets it choose the CUDA simulator when there is no
GPU (it must happen before Numba is imported anywhere in the process).
"""

import os

os.environ.setdefault("MPLBACKEND", "Agg")
# Under pytest-xdist (make test: -n 3 on 2 cores) each worker, and every kernel it starts
# (notebooks in JupyterLab or nbclient), gets its share of the cores for OpenBLAS: with a
# thread per core in every process, BLAS threads of a notebook kernel spin while the other
# worker holds a core. Measured on the 2-core machine with a busy loop on one core,
# notebook 13 (numpy training) ran 156 s (98 s of CPU) with OpenBLAS's default 2 threads
# and 21.5 s (14 s of CPU) with 1. Must be set before numpy is first imported. Numba's own
# threads (prange) are left as they are: the tests of the parallel kernels need them.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
if _WORKERS > 1:
    os.environ.setdefault("OPENBLAS_NUM_THREADS",
                          str(max(1, (os.cpu_count() or 1) // _WORKERS)))

import flashcourse  # noqa: E402,F401  (selects GPU or simulator before numba loads)
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import xdist_groups  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# "course" (the default, used by make test and CI) draws the same examples on every run,
# so a result never depends on luck; HYPOTHESIS_PROFILE=explore draws fresh ones each
# run (use it when changing an implementation, and keep any failure as an @example).
settings.register_profile(
    "course", deadline=None, max_examples=60, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "explore", deadline=None, max_examples=300,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "course"))


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


#: pytest-timeout for tests that execute notebooks or drive a browser (seconds); every
#: other test gets pyproject's `timeout` (600 s). An explicit timeout marker wins.
SLOW_TIMEOUT_S = 1200


def pytest_collection_modifyitems(config, items):
    for item in items:
        heavy = item.get_closest_marker("notebook") or item.get_closest_marker("browser")
        if heavy:
            item.add_marker(pytest.mark.slow)     # `make test-fast` (-m "not slow") skips it
        if heavy and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))
    xdist_groups.name_groups(config, items)      # --dist loadgroup's groups (pytest 9.2)
    # The slow tests first, in their order, then the rest: pytest-xdist hands out tests in
    # this order (make test: --dist loadgroup, after the browser groups, the largest), so
    # the workers end on the many short tests and finish together, instead of one
    # waiting while the other runs a simulator test of 10-20 s picked up last.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture
def gpu_prepass():
    """The tensor-core backward's D pre-pass in the layout a GPU runs (PREPASS =
    "warp_shfl": one warp per row, its sums added by warp shuffles) instead of the one
    the simulator gets by default ("thread_rows", one thread per row:
    `tc_backward_passes.prepass_layout`). On the simulator it launches 32 blocks of 128
    threads per head whatever Tq is (rows padded to LD_ROWS = 128, 4 rows per block),
    70-90% of a small backward's time (measured, 2026-12-06), so only the tests that
    must run the GPU's layout end to end take it: one per D kernel (fp16,
    bf16-from-float32, bf16 bits, 3xTF32) and the variants backward. The layouts give
    the same L bit for bit and D to float32 rounding
    (test_tc_backward.py::test_prepass_layouts_agree)."""
    from helpers import build_flags

    from flashcourse.cuda.gradients import tc_backward_passes as passes
    with build_flags(passes, passes.pass_kernels.cache_clear, PREPASS="warp_shfl"):
        yield


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    """One JupyterLab serving the repository for every browser test of the run (one per
    xdist worker), its kernels' figures measured (tests/browserlab.py)."""
    from browserlab import course_lab, require_browser
    require_browser()
    with course_lab(tmp_path_factory.mktemp("jupyterlab")) as server:
        yield server


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium (one browser context) for every browser test of the run (one
    per xdist worker; tests/browserlab.py)."""
    from browserlab import chromium_context, require_browser
    require_browser()
    with chromium_context() as context:
        yield context
