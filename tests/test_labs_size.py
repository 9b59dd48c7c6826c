"""The labs ask the learner to write the algorithm: count the lines between the solution markers.

Done-when numbers of issue 11: the tiled forward, the CUDA kernel and the backward labs each ask
for at least 25 lines of the learner's code; all labs together at least 130. Blank lines and
comment-only lines are not counted. Each lab also has a checked "going further" part.
"""

import nbformat
import pytest

from labtools import SOLUTIONS, lab_path, solution_lines

CORE = ["lab03_tiled_forward", "lab06_cuda_kernel", "lab09_backward"]
#: issue 21: the CUDA puzzle ladder (>= 10 graded puzzles) and the tensor-core lab (>= 30 lines)
AT_LEAST = {"lab05_cuda_puzzles": 30, "lab10_tensor_cores": 30, "lab10b_tensor_core_backward": 30}


def learner_lines(name: str) -> int:
    return len(solution_lines(lab_path(name)))


@pytest.mark.parametrize("name", CORE)
def test_core_labs_ask_for_at_least_25_lines(name):
    assert learner_lines(name) >= 25, (name, learner_lines(name))


def test_all_labs_ask_for_at_least_130_lines():
    counts = {p.stem: learner_lines(p.stem) for p in sorted(SOLUTIONS.glob("*.ipynb"))}
    assert len(counts) == 13 and sum(counts.values()) >= 130, counts


@pytest.mark.parametrize("name", sorted(AT_LEAST))
def test_issue_21_labs_ask_for_enough_lines(name):
    assert learner_lines(name) >= AT_LEAST[name], (name, learner_lines(name))


@pytest.mark.parametrize("path", sorted(SOLUTIONS.glob("*.ipynb")), ids=lambda p: p.stem)
def test_every_lab_has_a_checked_going_further_part(path):
    if path.stem == "lab02_online_softmax":
        pytest.skip("lab 02 is the short warm-up; its merge_states part plays that role")
    cells = nbformat.read(path, as_version=4).cells
    heads = [i for i, c in enumerate(cells)
             if c.cell_type == "markdown" and "Going further (checked)" in c.source]
    assert heads, path.stem
    after = "\n".join(c.source for c in cells[heads[0]:] if c.cell_type == "code")
    assert "check_" in after or ".check(" in after      # lab 05: puzzle(...).check(kernel)
