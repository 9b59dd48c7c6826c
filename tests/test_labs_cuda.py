"""Lab 04: the checker accepts the solution and names the typical mistakes.

The solution is taken from the solution notebook itself and the stub from the
generated student version (their cells are executed here, with the source
registered in linecache so that the checker can read it, as it can in Jupyter).
Each wrong device function below is a mistake learners make; the test asserts
the checker rejects it with the hint that names that mistake. Runs on Numba's
CUDA simulator without a GPU (about a second in all).
"""

import linecache
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

from flashcourse import reference
from flashcourse.labs import cuda_kernel as L4
from flashcourse.constants import F0, NEG_INF

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import make_labs  # noqa: E402

LAB04 = ROOT / "labs" / "solutions" / "lab04_cuda_kernel.ipynb"


def functions_of(path: Path, *, student: bool) -> dict:
    """Execute the import and function cells of a lab (solution or student version)."""
    import nbformat

    nb = make_labs.student_version(path) if student else nbformat.read(path, as_version=4)
    namespace: dict = {}
    for n, cell in enumerate(nb.cells):
        src = cell.source.lstrip()
        if cell.cell_type != "code" or not src.startswith(("import", "from", "def ", "@")):
            continue
        name = f"<{path.stem}{'-student' if student else ''}-cell{n}>"
        linecache.cache[name] = (len(cell.source), None, cell.source.splitlines(True), name)
        exec(compile(cell.source, name, "exec"), namespace)  # noqa: S102
    return namespace


@pytest.fixture(scope="module")
def solution():
    return functions_of(LAB04, student=False)["tile_update"]


# -- typical mistakes (each differs from the solution in one place) -----------

@cuda.jit(device=True)
def no_rescale(s, acc, row, k0, tk, off, causal, m, l):
    for j in range(s.shape[0]):
        col = k0 + j
        if col >= tk or (causal != 0 and col > row + off):
            s[j] = NEG_INF
    m_new = m
    for j in range(s.shape[0]):
        m_new = max(m_new, s[j])
    m_safe = m_new if m_new != NEG_INF else F0
    l_new = l                                    # forgot alpha on l and on acc
    for j in range(s.shape[0]):
        s[j] = math.exp(s[j] - m_safe)
        l_new += s[j]
    return m_new, l_new


@cuda.jit(device=True)
def tile_max_only(s, acc, row, k0, tk, off, causal, m, l):
    for j in range(s.shape[0]):
        col = k0 + j
        if col >= tk or (causal != 0 and col > row + off):
            s[j] = NEG_INF
    m_new = NEG_INF                              # forgot the running max m
    for j in range(s.shape[0]):
        m_new = max(m_new, s[j])
    m_safe = m_new if m_new != NEG_INF else F0
    alpha = math.exp(m - m_safe)
    for x in range(acc.shape[0]):
        acc[x] *= alpha
    l_new = alpha * l
    for j in range(s.shape[0]):
        s[j] = math.exp(s[j] - m_safe)
        l_new += s[j]
    return m_new, l_new


@cuda.jit(device=True)
def top_left_mask(s, acc, row, k0, tk, off, causal, m, l):
    for j in range(s.shape[0]):
        col = k0 + j
        if col >= tk or (causal != 0 and col > row):  # top-left instead of bottom-right
            s[j] = NEG_INF
    m_new = m
    for j in range(s.shape[0]):
        m_new = max(m_new, s[j])
    m_safe = m_new if m_new != NEG_INF else F0
    alpha = math.exp(m - m_safe)
    for x in range(acc.shape[0]):
        acc[x] *= alpha
    l_new = alpha * l
    for j in range(s.shape[0]):
        s[j] = math.exp(s[j] - m_safe)
        l_new += s[j]
    return m_new, l_new


@cuda.jit(device=True)
def no_ragged_mask(s, acc, row, k0, tk, off, causal, m, l):
    for j in range(s.shape[0]):
        col = k0 + j
        if causal != 0 and col > row + off:     # forgot col >= tk
            s[j] = NEG_INF
    m_new = m
    for j in range(s.shape[0]):
        m_new = max(m_new, s[j])
    m_safe = m_new if m_new != NEG_INF else F0
    alpha = math.exp(m - m_safe)
    for x in range(acc.shape[0]):
        acc[x] *= alpha
    l_new = alpha * l
    for j in range(s.shape[0]):
        s[j] = math.exp(s[j] - m_safe)
        l_new += s[j]
    return m_new, l_new


@cuda.jit(device=True)
def float64_literal(s, acc, row, k0, tk, off, causal, m, l):
    for j in range(s.shape[0]):
        col = k0 + j
        if col >= tk or (causal != 0 and col > row + off):
            s[j] = NEG_INF
    m_new = m
    for j in range(s.shape[0]):
        m_new = max(m_new, s[j])
    m_safe = m_new if m_new != NEG_INF else 0.0  # a float64 literal
    alpha = math.exp(m - m_safe)
    for x in range(acc.shape[0]):
        acc[x] *= alpha
    l_new = alpha * l
    for j in range(s.shape[0]):
        s[j] = math.exp(s[j] - m_safe)
        l_new += s[j]
    return m_new, l_new


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
    (no_rescale, L4.HINT_RESCALE),
    (tile_max_only, L4.HINT_MAX),
    (top_left_mask, L4.HINT_MASK_ALIGN),
    (no_ragged_mask, L4.HINT_MASK_RAGGED),
    (float64_literal, L4.HINT_FLOAT64),
])
def test_wrong_versions_fail_with_their_hint(wrong, hint):
    result = L4.check_tile_update(wrong, verbose=False)
    assert not result.passed and not result.todo
    assert result.hint == hint


def test_float64_literals_are_found():
    assert L4.float64_literals(float64_literal) == ["0.0"]
    assert L4.float64_literals(no_rescale) == []


def test_lab_kernel_rejects_large_d(solution):
    x = np.zeros((2, L4.DMAX + 1), np.float32)
    with pytest.raises(ValueError, match="d <="):
        L4.lab_forward(solution, x, x, x)
