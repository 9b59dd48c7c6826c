"""Student labs are generated from the solutions and kept in sync."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import make_labs  # noqa: E402


def test_student_labs_are_in_sync():
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "make_labs.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_strip_code_replaces_region_at_indent():
    src = "def f(x):\n    ### BEGIN SOLUTION (roughly 1 line)\n    return x\n    ### END SOLUTION\n"
    out = make_labs.strip_code(src, "t")
    assert out == ('def f(x):\n    # FILL ME IN (roughly 1 line)\n'
                   '    raise NotImplementedError("FILL ME IN")')


@pytest.mark.parametrize("src", ["### BEGIN SOLUTION\nx\n", "x\n### END SOLUTION\n",
                                 "### BEGIN SOLUTION\n### BEGIN SOLUTION\n"])
def test_unbalanced_markers_are_errors(src):
    with pytest.raises(ValueError):
        make_labs.strip_code(src, "t")
