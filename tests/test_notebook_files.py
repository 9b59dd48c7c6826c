"""Every notebook and lab is stored as Jupyter saves it, so JupyterLab opens it unchanged.

JupyterLab writes the running kernel's `kernelspec` and `language_info` into a notebook's
metadata when the kernel starts, and marks the notebook unsaved if they differ; saving then
rewrites the file in nbformat's layout (tools/notebook_files.py says where in JupyterLab).
"""

import re
import unicodedata

import nbformat
import pytest
from ipykernel.ipkernel import IPythonKernel
from ipykernel.kernelspec import KERNEL_NAME, get_kernel_dict

from helpers import ROOT, assert_tool_check_passes, tool

notebook_files = tool("notebook_files")
FILES = notebook_files.course_files()
IDS = [str(p.relative_to(ROOT)) for p in FILES]


def test_every_notebook_and_lab_is_found():
    folders = {p.parent.relative_to(ROOT).as_posix() for p in FILES}
    assert folders == {"notebooks", "labs", "labs/solutions"}


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_stored_as_jupyter_saves_it(path):
    """Byte for byte what Jupyter's save writes after an ipykernel kernel started on it."""
    nb = nbformat.read(path, as_version=4)
    assert (nb.nbformat, nb.nbformat_minor) == (4, nbformat.current_nbformat_minor), path.name
    assert all("id" in cell for cell in nb.cells), f"{path.name}: a cell has no id"
    expected = nbformat.writes(nb) + "\n"                # what nbformat.write (the save) writes
    assert path.read_text(encoding="utf-8") == expected, (
        f"{path.name} is not in Jupyter's layout: run `python tools/notebook_files.py`")
    assert path.read_text(encoding="utf-8") == notebook_files.jupyter_text(nb), (
        f"{path.name}: kernel metadata differs: run `python tools/notebook_files.py`")


def test_the_stored_metadata_is_what_the_kernel_reports():
    """What JupyterLab would write on connecting: ipykernel's kernel spec and language_info
    (its version aside: that is the running Python's)."""
    spec = get_kernel_dict()
    assert notebook_files.KERNELSPEC == {"name": KERNEL_NAME, "display_name": spec["display_name"],
                                         "language": spec["language"]}
    reported = dict(IPythonKernel.language_info)
    stored = dict(notebook_files.LANGUAGE_INFO)
    assert reported.pop("version") and stored.pop("version")
    assert stored == reported
    runtime = (ROOT / "runtime.txt").read_text().strip().removeprefix("python-")
    assert notebook_files.COURSE_PYTHON.startswith(runtime + "."), (
        "COURSE_PYTHON should be a release of runtime.txt's Python")


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_no_control_characters_in_cells(path):
    """A string escape in a source (\\a of \\approx, \\b of \\beta, \\f of \\frac) leaves a
    control character that MathJax shows as text."""
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        bad = [c for c in cell.source if c not in "\n" and unicodedata.category(c) == "Cc"]
        assert not bad, f"{path.name} cell {i}: control characters {bad!r}"


def test_the_tool_check_passes():
    assert_tool_check_passes("notebook_files")


def test_jupyter_text_is_a_fixed_point(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# T\n\nnon-ASCII: · ≤ 2⁴⁰"),
                nbformat.v4.new_code_cell("x = 1")]
    text = notebook_files.jupyter_text(nb)
    assert text.endswith("}\n") and "≤ 2⁴⁰" in text and re.search(r'^ "cells"', text, re.M)
    path = tmp_path / "t.ipynb"
    path.write_text(text, encoding="utf-8")
    assert notebook_files.differing([path]) == []
