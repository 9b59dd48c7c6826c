"""Shared test set-up.

Importing flashcourse first lets it choose the CUDA simulator when there is no
GPU (it must happen before Numba is imported anywhere in the process).
"""

import os

os.environ.setdefault("MPLBACKEND", "Agg")

import flashcourse  # noqa: E402,F401  (selects GPU or simulator before numba loads)
import numpy as np  # noqa: E402
import pytest  # noqa: E402
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


@pytest.fixture
def thread_rows_prepass():
    """The tensor-core backward's D pre-pass with one thread per row (PREPASS =
    "thread_rows") instead of the default one warp per row (warp shuffles): on Numba's
    simulator the default launches 32 blocks of 128 threads per head whatever Tq is (rows
    padded to LD_ROWS = 128, 4 rows per block), 70-90% of a small backward's time
    (measured, 2026-12-06); one thread per row is one block of 128 and no shuffle. The
    layouts give the same L bit for bit and D to float32 rounding
    (test_tc_backward.py::test_prepass_layouts_agree). For the tests of kernels 1 and 2
    (variants compared, accuracy, inputs and errors); the default pre-pass still runs end
    to end in the tests without this fixture (the fp16, bf16-from-float32, bf16-bits and
    3xTF32 D kernels each in at least one, and tests/test_cuda_head_dims_sim.py)."""
    from helpers import build_flags

    from flashcourse.cuda.gradients import tc_backward_passes as passes
    with build_flags(passes, passes.pass_kernels.cache_clear, PREPASS="thread_rows"):
        yield
