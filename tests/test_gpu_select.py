"""GPU-or-simulator selection in a fresh process, as a learner's kernel meets it."""

import os
import subprocess
import sys

import pytest

from flashcourse.gpu import NO_TARGET_MESSAGE, driver_has_gpu

pytestmark = pytest.mark.skipif(driver_has_gpu(), reason="a CUDA GPU is present")


def run(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=300)


def test_simulator_is_chosen_even_after_a_plain_numba_import():
    r = run("import numba, flashcourse, os; from numba import cuda; "
            "print(os.environ['NUMBA_ENABLE_CUDASIM'], cuda.is_available())")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1", "True"]


def test_too_late_gives_a_clear_error_not_a_driver_traceback():
    r = run("from numba import cuda\n"
            "import numpy as np, flashcourse.cuda as fc\n"
            "x = np.ones((4, 2), np.float32)\n"
            "try:\n    fc.forward(x, x, x)\n"
            "except RuntimeError as e:\n    print('RuntimeError:', e)\n")
    assert r.returncode == 0, r.stderr
    assert NO_TARGET_MESSAGE in r.stdout


@pytest.mark.parametrize("given,first", [(None, False), ("1", False), (None, True)])
def test_numbas_small_grid_warning_is_off_unless_the_learner_asks(given, first):
    """On a GPU Numba warns at every launch of under 128 blocks (the H100 run of the labs
    and notebooks printed it 74 times); the course's launches are small on purpose."""
    name = "NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS"
    env_line = "" if given is None else f"os.environ['{name}'] = '{given}'\n"
    numba_first = "from numba import cuda\n" if first else ""
    code = ("import os\n" + env_line + numba_first + "import flashcourse\n"
            "from numba.cuda.core import config\n"
            "print(os.environ['NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS'], "
            "config.CUDA_LOW_OCCUPANCY_WARNINGS)\n")
    r = run(code)
    assert r.returncode == 0, r.stderr
    want = given or "0"
    assert r.stdout.split() == [want, want]
