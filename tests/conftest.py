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

settings.register_profile(
    "course", deadline=None, max_examples=60,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "course"))


def rel_err(x, ref) -> float:
    """||x - ref|| / ||ref|| in float64 (0 when both are 0)."""
    x = np.asarray(x, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    denom = np.linalg.norm(ref)
    num = np.linalg.norm(x - ref)
    return float(num / denom) if denom > 0 else float(num)


@pytest.fixture
def rng():
    return np.random.default_rng(12345)
