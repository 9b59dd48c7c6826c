"""Lab 04: the checker accepts the solution and names the typical mistakes.

The solution is taken from the solution notebook itself and the stub from the
generated student version (their cells are executed here, with the source
registered in linecache so that the checker can read it, as it can in Jupyter).
Each entry of MISTAKES is the solution with one place changed, a mistake learners make;
the test asserts
the checker rejects it with the hint that names that mistake. Runs on Numba's
CUDA simulator without a GPU (about a second in all).
"""

import inspect
import linecache
import math

import numpy as np
import pytest
from numba import cuda

from flashcourse import reference
from flashcourse.labs import cuda_kernel as L4
from flashcourse.constants import F0, NEG_INF

from helpers import ROOT
from helpers import lab_functions as functions_of

LAB04 = ROOT / "labs" / "solutions" / "lab04_cuda_kernel.ipynb"


@pytest.fixture(scope="module")
def solution():
    return functions_of(LAB04, student=False)["tile_update"]


# -- typical mistakes: the solution with one place changed ----------------------

MISTAKES = {  # name: (what the solution says, what the mistake says)
    "no_rescale": ("    alpha = math.exp(m - m_safe)\n",
                   "    alpha = F1                   # forgot alpha on l and on acc\n"),
    "tile_max_only": ("    m_new = m\n",
                      "    m_new = NEG_INF              # forgot the running max m\n"),
    "top_left_mask": ("col > row + off", "col > row"),       # top-left instead of bottom-right
    "no_ragged_mask": ("if col >= tk or (causal != 0 and col > row + off)",
                       "if causal != 0 and col > row + off"),     # forgot col >= tk
    "float64_literal": ("else F0", "else 0.0"),                  # a float64 literal
}


@pytest.fixture(scope="module")
def mistakes(solution):
    """Each mistake compiled as a device function, its source readable by the checker."""
    src = inspect.getsource(solution.py_func)
    out = {}
    for name, (right, wrong) in MISTAKES.items():
        assert right in src, f"the solution no longer says {right!r}"
        code = src.replace(right, wrong, 1).replace("def tile_update(", f"def {name}(", 1)
        filename = f"<mistake-{name}>"
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        namespace = {"cuda": cuda, "math": math, "F0": F0, "F1": np.float32(1.0),
                     "NEG_INF": NEG_INF}
        exec(compile(code, filename, "exec"), namespace)  # noqa: S102
        out[name] = namespace[name]
    return out


def test_solution_passes(solution, capsys):
    assert L4.check_tile_update(solution).passed
    assert "All checks passed" in capsys.readouterr().out


def test_solution_matches_reference_directly(solution):
    """fp32 kernel vs float64 reference, relative error <= 1e-5, including empty causal rows."""
    rng = np.random.default_rng(9)
    q = rng.standard_normal((2, 7, 5)).astype(np.float32)
    k = rng.standard_normal((2, 10, 5)).astype(np.float32)
    v = rng.standard_normal((2, 10, 5)).astype(np.float32)
    for causal in (False, True):
        o, lse = L4.lab_forward(solution, q, k, v, causal=causal)
        o_ref, lse_ref = reference.attention(q, k, v, causal=causal)
        err = np.linalg.norm(o - o_ref) / np.linalg.norm(o_ref)
        assert err <= 1e-5
        assert np.allclose(lse, lse_ref, rtol=1e-5)


def test_stub_reports_not_implemented(capsys):
    stub = functions_of(LAB04, student=True)["tile_update"]
    result = L4.check_tile_update(stub)
    assert result.todo and not result.passed
    assert "not implemented yet" in capsys.readouterr().out.lower()


@pytest.mark.parametrize("wrong,hint", [
    ("no_rescale", L4.HINT_RESCALE),
    ("tile_max_only", L4.HINT_MAX),
    ("top_left_mask", L4.HINT_MASK_ALIGN),
    ("no_ragged_mask", L4.HINT_MASK_RAGGED),
    ("float64_literal", L4.HINT_FLOAT64),
])
def test_wrong_versions_fail_with_their_hint(mistakes, wrong, hint):
    result = L4.check_tile_update(mistakes[wrong], verbose=False)
    assert not result.passed and not result.todo
    assert result.hint == hint


def test_float64_literals_are_found(mistakes):
    assert L4.float64_literals(mistakes["float64_literal"]) == ["0.0"]
    assert L4.float64_literals(mistakes["no_rescale"]) == []


def test_lab_kernel_rejects_large_d(solution):
    x = np.zeros((2, L4.DMAX + 1), np.float32)
    with pytest.raises(ValueError, match="d <="):
        L4.lab_forward(solution, x, x, x)
