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
    # 1500 + "#", "T", "x", "###", "Try", "it", "guess", plain prose at 150 a minute: 10.05;
    # 7 cells + 7 code lines / 15; one exercise 10; 2 questions: 29.5 -> 30 min
    assert est.words == 1500 + 7 and est.maths_words == 0 and est.code_lines == 7
    assert est.minutes == 30


def test_maths_dense_prose_lab_lines_and_one_count_per_exercise(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# T\n\n**Estimated time:** 5 minutes.\n\nx"),
                nbformat.v4.new_markdown_cell("$$a = b$$ " + " ".join(["w"] * 199)),
                nbformat.v4.new_markdown_cell("**Predict, then check.** guess"),
                nbformat.v4.new_code_cell('exercises.check("03-second-tile", m=None)'),
                nbformat.v4.new_code_cell("def f():\n    ### BEGIN SOLUTION\n    a = 1\n"
                                          "    return a\n    ### END SOLUTION"),
                nbformat.v4.new_markdown_cell("## Going further\nmore"),
                nbformat.v4.new_code_cell("    ### BEGIN SOLUTION\n    b = 2\n"
                                          "    ### END SOLUTION")]
    path = tmp_path / "lab99_t.ipynb"
    nbformat.write(nb, path)
    est = notebook_time.estimate(path)
    assert est.maths_words == 3 + 199               # the cell with display maths, at 100 a minute
    assert est.exercises == 1                       # the "Predict" lead and its check: once
    assert (est.solution_lines, est.optional_lines) == (2, 1)
    assert "going-further parts" in est.sentence() and "+ 5 going further" in est.readme_note()


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


def test_a_case_study_has_its_own_readme_row():
    """Notebook 10b's row is found by its own number, not by notebook 10's."""
    readme = ("| 10 | [notebooks/10_t.ipynb](notebooks/10_t.ipynb) | core |\n"
              "| 10b | [notebooks/10b_t.ipynb](notebooks/10b_t.ipynb) | case studies |\n")
    row = notebook_time._readme_row(Path("notebooks/10b_t.ipynb")).search(readme)
    assert row and "case studies" in row.group(0)
    assert "core" in notebook_time._readme_row(Path("notebooks/10_t.ipynb")).search(readme)[0]
