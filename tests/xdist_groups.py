"""pytest-xdist's `--dist loadgroup` under pytest 9.2: the group names put back into the node ids.

pytest-xdist 3.8 tells its scheduler a test's group (the `xdist_group` mark) by appending
"@group" to the test's node id on the worker, through `item._nodeid`. pytest 9.2 keeps node
ids structured (`item._id`) and no longer reads that field: the suffix is lost, and every
test is scheduled on its own, its group ignored, without an error (pytest-xdist issue
#1386; a fix is proposed in its pull request #1388). So the browser tests were spread over
both workers, each with its own JupyterLab, and tests that share a page could not.
`name_groups` writes the same suffix where pytest 9.2 reads it; it does nothing outside a
loadgroup worker, or where the suffix is there already (an older pytest, a fixed xdist).
tests/test_tooling.py checks that two tests of one group run on one worker.
"""

from __future__ import annotations


def name_groups(config, items) -> None:
    """Append "@group" to the node id of every test with an xdist_group mark, as
    pytest-xdist does for the loadgroup scheduler (call from pytest_collection_modifyitems)."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        names = {str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                 for mark in item.iter_markers("xdist_group")}
        nodeid = item.nodeid
        if not names or nodeid.rfind("@") > nodeid.rfind("]"):
            continue
        from _pytest.nodeid import NodeId      # pytest 9.2's structured node ids

        item._id = NodeId.parse(f"{nodeid}@{'_'.join(sorted(names))}")
