"""The times stated in the notebooks and the README map are the tool's estimates."""

from pathlib import Path

import nbformat
import pytest

from helpers import ROOT, assert_tool_check_passes, tool

notebook_time = tool("notebook_time")


def test_stamped_notebooks_and_readme_match_their_estimates():
    assert_tool_check_passes("notebook_time")
    stamped = [p for p in sorted((ROOT / "notebooks").glob("*.ipynb"))
               if notebook_time.stamped(p)]
    assert len(stamped) >= 5                             # 00-04 at least


def _notebook(tmp_path, words: int, code: int, extra_md: str = "") -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# T\n\n**Estimated time:** 5 minutes.\n\nx"),
                nbformat.v4.new_markdown_cell(" ".join(["word"] * words) + extra_md)]
    nb.cells += [nbformat.v4.new_code_cell(f"x = {i}") for i in range(code)]
    nb.cells.append(nbformat.v4.new_code_cell("show_quiz([Question('a'), Question('b')])"))
    path = tmp_path / "99_t.ipynb"
    nbformat.write(nb, path)
    return path


def test_estimate_counts_and_rounds(tmp_path):
    path = _notebook(tmp_path, 1500, 6, "\n\n### Try it\nguess")
    est = notebook_time.estimate(path)
    assert (est.code_cells, est.exercises, est.questions, est.widgets) == (7, 1, 2, 0)
    # 1500 + "#", "T", "x", "###", "Try", "it", "guess": 10.05 + 7 + 5 + 2 = 24.05 -> 25 min
    assert est.words == 1500 + 7 and est.minutes == 25


def test_stamp_is_a_fixed_point(tmp_path):
    path = _notebook(tmp_path, 300, 2)
    est = notebook_time.estimate(path)
    assert notebook_time._stamp_notebook(path, est)
    assert notebook_time.stamped(path)
    assert notebook_time.estimate(path) == est            # the stamp is not counted
    assert not notebook_time._stamp_notebook(path, est)   # nothing left to change
    nb = nbformat.read(path, as_version=4)
    assert "about 10 minutes" in nb.cells[0].source


def test_missing_sentence_is_an_error(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# no time here")]
    path = tmp_path / "98_x.ipynb"
    nbformat.write(nb, path)
    with pytest.raises(ValueError, match="Estimated time"):
        notebook_time._stamp_notebook(path, notebook_time.estimate(path))


def test_quizzes_kept_in_the_package_are_counted(tmp_path):
    """A quiz cell `quizzes.show("03")` counts the questions of flashcourse/quizzes/nb03.toml;
    an AVOIDED_OBJECT on an import line is not a question."""
    from flashcourse import quizzes

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# T\n\n**Estimated time:** 5 minutes."),
                nbformat.v4.new_code_cell("from flashcourse.quiz import AVOIDED_OBJECT"),
                nbformat.v4.new_code_cell('from flashcourse import quizzes\n\nquizzes.show("03")')]
    path = tmp_path / "98_t.ipynb"
    nbformat.write(nb, path)
    assert notebook_time.estimate(path).questions == len(quizzes.get("03"))
    assert notebook_time.bank_questions("lab04") == len(quizzes.get("lab04"))
    nb03 = ROOT / "flashcourse" / "quizzes" / "nb03.toml"          # counted another way
    assert notebook_time.bank_questions("03") == nb03.read_text().count("[[question]]")
    with pytest.raises(ValueError, match=r"quizzes.show\('99'\): no quiz for notebook '99'"):
        notebook_time.bank_questions("99")
