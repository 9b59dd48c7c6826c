"""Student labs are generated from the solutions and kept in sync."""

import pytest

from helpers import assert_tool_check_passes, tool

make_labs = tool("make_labs")


def test_student_labs_are_in_sync():
    assert_tool_check_passes("make_labs")


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
