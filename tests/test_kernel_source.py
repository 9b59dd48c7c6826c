"""Array sizes the GPU compiler can fix: every kernel of the course (package, notebooks, lab
solutions) allocates local and shared arrays with sizes fixed before compiling, and the
labs' checkers tell a learner who computes one inside a kernel (which only the simulator
accepts) with the compile hint, not a generic one."""

import ast
import json

import numpy as np
import pytest

from flashcourse.labs import _harness as H
from flashcourse.labs.kernel_source import array_sizes_not_fixed, unfixed_array_sizes
from helpers import ROOT

SOURCES = sorted((ROOT / "flashcourse").rglob("*.py"))
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted(
    (ROOT / "labs" / "solutions").glob("*.ipynb"))


def _code(path):
    if path.suffix == ".py":
        return path.read_text()
    cells = json.loads(path.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code"
                     and not "".join(c["source"]).lstrip().startswith(("%", "!")))


@pytest.mark.parametrize("path", SOURCES + NOTEBOOKS, ids=lambda p: p.name)
def test_every_array_size_is_fixed_before_compiling(path):
    assert unfixed_array_sizes(ast.parse(_code(path))) == []


def test_the_scan_finds_what_the_compiler_refuses():
    src = '''
TPB = 32
def outer(flag):
    N = 4 if flag else 8            # a closure value: fixed when the kernel is built
    def kernel(a, n):
        ok1 = cuda.shared.array(TPB, float32)
        ok2 = cuda.local.array((N, TPB), float32)
        ok3 = cuda.local.array(shape=4, dtype=float32)
        ok4 = cuda.shared.array(TPB if SIM else 1, float32)
        bad1 = cuda.shared.array(TPB + 1, float32)
        bad2 = cuda.local.array(n, float32)
        m = 3
        bad3 = cuda.local.array((m, 2), float32)
    return kernel
'''
    assert sorted(unfixed_array_sizes(ast.parse(src))) == [
        "cuda.local.array((m, 2), ...)", "cuda.local.array(n, ...)",
        "cuda.shared.array(TPB + 1, ...)"]


def test_unreadable_source_gives_no_verdict():
    fn = eval("lambda: 0")      # noqa: S307  (no source file behind it)
    assert array_sizes_not_fixed(fn) == []


def test_a_numba_compile_error_gets_the_compile_hint():
    from numba.core.errors import TypingError

    def run(fn):
        raise TypingError("No implementation of function Function(<function local.array>) "
                          "found for signature:\n >>> array(int64, class(float32))")
    result = H.run_checks("a kernel", lambda: None, [H.Case("one launch", run, "generic")],
                          verbose=False)
    assert not result.passed and result.hint == H.HINT_COMPILE
    assert result.detail.startswith("the kernel does not compile: No implementation")
    assert "array(int64, class(float32))" in result.detail


def test_other_crashes_keep_the_case_hint():
    def run(fn):
        raise IndexError("index 9 is out of bounds")
    result = H.run_checks("a kernel", lambda: None, [H.Case("one", run, "generic")],
                          verbose=False)
    assert not result.passed and result.hint == "generic"
    assert np.isscalar(len(result.detail))
