"""Every notebook and lab runs top to bottom on a fresh kernel, and is stored clean.

Student labs run too: their stubs raise NotImplementedError, which the lab
checkers catch and report as "not implemented yet", so a fresh student notebook
executes without error. Solution notebooks must print the checkers' pass line.

Each notebook runs once per test run, as a learner runs it: Run All in JupyterLab in
headless Chromium (tests/browserlab.py, which also checks the page: no error shown,
figures at full size, every widget answers a moved control), and its outputs, read from
JupyterLab's notebook model, get the checks below (no printed line over MAX_LINE
characters, every figure readable, the pass line or the stubs' message). Without
Chromium (outside CI, where the browser tests are skipped) nbclient runs it instead and
the same output checks are made.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import browserlab
import nbformat
import pytest
from nbclient import NotebookClient

from flashcourse.plots.style import AUDIT_ENV, MAX_WIDTH_IN, MIN_FONT_PT

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(ROOT.glob("notebooks/*.ipynb"))
STUDENT_LABS = sorted(ROOT.glob("labs/*.ipynb"))
SOLUTIONS = sorted(ROOT.glob("labs/solutions/*.ipynb"))
ALL = NOTEBOOKS + STUDENT_LABS + SOLUTIONS
PASS_LINE = "All checks passed"
MAX_LINE = 100   # characters: a longer printed line wraps mid-number in JupyterLab at 1400 px
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def _ids(paths):
    return [str(p.relative_to(ROOT)) for p in paths]


def execute(path: Path, timeout: int = 240, audit: Path | None = None):
    """Run `path` on a fresh kernel; `audit`: a file where every figure is measured
    (flashcourse.plots.style.install_audit)."""
    nb = nbformat.read(path, as_version=4)
    env_backup = dict(os.environ)
    os.environ["MPLBACKEND"] = "Agg"
    if audit is not None:
        os.environ[AUDIT_ENV] = str(audit)
    # the kernel must choose GPU or simulator itself, as a learner's kernel does:
    # do not let it inherit the choice that conftest made for this process
    os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
    try:
        NotebookClient(nb, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}).execute()
    finally:
        os.environ.clear()
        os.environ.update(env_backup)
    return nb


def _joined(text) -> str:
    """A notebook's multiline string: one string, or a list of lines as stored."""
    return "".join(text) if isinstance(text, list) else text


def text_outputs(nb) -> str:
    parts = []
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                parts.append(_joined(out.get("text", "")))
            elif "data" in out:
                parts.append(_joined(out["data"].get("text/plain", "")))
                parts.append(_joined(out["data"].get("text/html", "")))
    return "\n".join(parts)


def long_lines(nb) -> list[str]:
    """Printed lines longer than MAX_LINE: stream text and text/plain results (not widget reprs)."""
    found = []
    for i, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                text = _joined(out.get("text", ""))
            elif out.get("output_type") == "execute_result":
                data = out.get("data", {})
                text = "" if WIDGET_MIME in data else _joined(data.get("text/plain", ""))
            else:
                continue
            for n, line in enumerate(text.splitlines(), 1):
                if len(line) > MAX_LINE:
                    found.append(f"cell {i}, line {n} ({len(line)} characters): {line[:80]}...")
    return found


def assert_short_lines(path: Path, nb) -> None:
    long = long_lines(nb)
    assert not long, (f"{path.name} prints lines over {MAX_LINE} characters "
                      "(wrap them, or print one fact per line):\n" + "\n".join(long))


WARNING_LINE = re.compile(r"^\S*:\d+: (\w+Warning): ", re.M)


def printed_warnings(nb) -> list[str]:
    """Python warnings a notebook printed (numpy's RuntimeWarning, a DeprecationWarning...):
    a learner reads them as something gone wrong, so the course prints none."""
    return [f"cell {i}: {m.group(1)}: {line.strip()[:90]}"
            for i, cell in enumerate(nb["cells"])
            for out in cell.get("outputs", []) if out.get("output_type") == "stream"
            for m in WARNING_LINE.finditer(_joined(out.get("text", "")))
            for line in [_joined(out.get("text", ""))[m.start():].splitlines()[0]]]


def test_printed_warnings_are_found():
    """The warning check itself: numpy's overflow warning on stderr is found, a printed
    sentence that mentions a warning is not."""
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("")
    cell.outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="a RuntimeWarning: is text\n"),
        nbformat.v4.new_output("stream", name="stderr", text=(
            "/x/flashcourse/labs/tensor_core_parts.py:316: RuntimeWarning: overflow "
            "encountered in exp\n  alpha = np.exp(m_old - m_use)\n"))]
    nb.cells = [cell]
    found = printed_warnings(nb)
    assert len(found) == 1 and "RuntimeWarning" in found[0], found


def test_long_lines_are_found():
    """The width check itself: it flags a long stream line, skips widget reprs."""
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="ok\n" + "x" * 101),
                    nbformat.v4.new_output("execute_result", data={
                        "text/plain": "VBox(" + "y" * 200 + ")", WIDGET_MIME: {}}),
                    nbformat.v4.new_output("execute_result", data={"text/plain": "z" * 100})]
    nb.cells = [cell]
    assert long_lines(nb) == [f"cell 0, line 2 (101 characters): {'x' * 80}..."]


AUDIT_SCRIPT = """
import os
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
from flashcourse.plots.style import install_audit
assert install_audit(os.environ["AUDIT_FILE"])
ip.run_cell("import matplotlib.pyplot as plt\\nfrom IPython.display import display\\n"
            "fig = plt.figure(figsize=(12, 2))\\n"
            "fig.add_subplot().set_title('shown', fontsize=6)\\n"
            "display(fig)\\nplt.close(fig)")
ip.run_cell("g = plt.figure(figsize=(3, 2))\\ng.text(0.5, 0.5, 'left open', fontsize=12)")
ip.run_cell("display(g)")
"""


def test_figure_audit_measures_shown_and_open_figures(tmp_path):
    """The figure audit of the notebook runs (flashcourse.plots.style.install_audit), in an
    IPython shell of its own: a figure shown and closed within its cell (as JupyterLab's
    inline backend does) and one left open after its cell (Agg) are each measured once,
    naming the notebook the kernel belongs to; the check names the one too wide and too
    small."""
    audit = tmp_path / "figures.jsonl"
    env = dict(os.environ, AUDIT_FILE=str(audit), JPY_SESSION_NAME="/course/nb.ipynb",
               MPLBACKEND="Agg")
    env.pop(AUDIT_ENV, None)
    run = subprocess.run([sys.executable, "-c", AUDIT_SCRIPT], env=env, cwd=ROOT,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    figures = audited_figures(audit, Path("/course/nb.ipynb"))
    assert [f["text"] for f in figures] == ["shown", "left open"], figures
    assert audited_figures(audit, Path("/course/other.ipynb")) == []
    bad = unreadable_figures(audit, Path("/course/nb.ipynb"))
    assert len(bad) == 2 and "in wide" in bad[0] and "text of 6 pt ('shown')" in bad[1], bad


def test_course_has_notebooks():
    assert NOTEBOOKS, "no notebooks found"
    assert len(STUDENT_LABS) == len(SOLUTIONS), "every lab needs a solution"


@pytest.mark.parametrize("path", ALL, ids=_ids(ALL))
def test_stored_without_outputs(path):
    nb = json.loads(path.read_text())
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            assert not cell.get("outputs"), f"cell {i} of {path.name} has stored outputs"
            assert cell.get("execution_count") is None, f"cell {i} has an execution count"


def audited_figures(audit: Path, notebook: Path | None = None) -> list[dict]:
    """The figures measured into an audit file; with `notebook`, only the lines that name
    it (kernels of one JupyterLab share the file)."""
    if not audit.exists():
        return []
    figures = [json.loads(line) for line in audit.read_text().splitlines()]
    if notebook is None:
        return figures
    return [f for f in figures
            if "notebook" in f and Path(f["notebook"]).resolve() == notebook.resolve()]


def shown_figures(nb) -> int:
    """How many matplotlib figures an executed notebook shows: PNG outputs whose text form
    is matplotlib's '<Figure size ...>' (the inline backend; Agg shows none)."""
    return sum(1 for cell in nb["cells"] for out in cell.get("outputs", [])
               if "image/png" in out.get("data", {})
               and _joined(out["data"].get("text/plain", "")).startswith("<Figure size"))


def unreadable_figures(audit: Path, notebook: Path | None = None) -> list[str]:
    """Figures of an audit file wider than JupyterLab shows unshrunk at 1280 px, or with
    text under MIN_FONT_PT; with `notebook`, only the lines that name it."""
    bad = []
    for fig in audited_figures(audit, notebook):
        if fig["width_in"] > MAX_WIDTH_IN + 1e-9:
            bad.append(f"cell [{fig['cell']}]: {fig['width_in']:.2f} in wide (at most "
                       f"{MAX_WIDTH_IN} in: JupyterLab shrinks it at 1280 px)")
        if fig["min_font_pt"] < MIN_FONT_PT - 1e-9:
            bad.append(f"cell [{fig['cell']}]: text of {fig['min_font_pt']:g} pt "
                       f"({fig['text']!r}), under {MIN_FONT_PT:g} pt")
    return bad


def error_outputs(nb) -> list[str]:
    """Error outputs (a raised exception) of an executed notebook, one line each."""
    return [f"cell {i}: {out.get('ename')}: {out.get('evalue')}"
            for i, cell in enumerate(nb.get("cells", []))
            for out in cell.get("outputs", []) if out.get("output_type") == "error"]


def check_outputs(path: Path, nb, audit: Path | None, notebook: Path | None = None) -> str:
    """The output checks of an executed notebook: no error output, no printed line too
    long, every figure in the `audit` file readable (only those naming `notebook`, if
    given); returns its text output."""
    errors = error_outputs(nb)
    assert not errors, f"{path.name} raised:\n" + "\n".join(errors)
    warned = printed_warnings(nb)
    assert not warned, f"{path.name} prints Python warnings:\n" + "\n".join(warned)
    assert_short_lines(path, nb)
    if audit is not None:
        measured, shown = len(audited_figures(audit, notebook)), shown_figures(nb)
        assert measured >= shown, (f"{path.name} shows {shown} figures but only {measured} "
                                   "were measured (flashcourse.plots.style.install_audit)")
        bad = unreadable_figures(audit, notebook)
        assert not bad, f"{path.name} draws figures that are hard to read:\n" + "\n".join(bad)
    return text_outputs(nb)


def run_checked(path: Path, tmp: Path | None = None) -> str:
    """Execute `path` with nbclient, check that no printed line is too long and that every
    figure is readable (with a folder `tmp` for the figure audit), and return its text
    output."""
    audit = None if tmp is None else tmp / "figures.jsonl"
    return check_outputs(path, execute(path, audit=audit), audit)


#: what the output of each kind of notebook must say: (must contain, must not contain)
EXPECTED = {"notebook": ((), ()),
            "solution": ((PASS_LINE,), ("FAILED",)),          # every checker passes
            "student": (("not implemented yet",), (PASS_LINE,))}  # stubs are reported, not run
RUNS = ([("notebook", p) for p in NOTEBOOKS] + [("solution", p) for p in SOLUTIONS]
        + [("student", p) for p in STUDENT_LABS])


def _run_param(kind: str, path: Path):
    rel = str(path.relative_to(ROOT))
    return pytest.param(kind, path, id=rel,
                        marks=pytest.mark.xdist_group(browserlab.browser_group(rel)))


@pytest.mark.notebook
@pytest.mark.browser
@pytest.mark.parametrize("kind,path", [_run_param(kind, p) for kind, p in RUNS])
def test_runs_top_to_bottom(kind, path, tmp_path, request):
    """A notebook runs (once: in JupyterLab in the browser, with the page's checks, or
    with nbclient where there is no Chromium outside CI) and its figures are readable; a
    lab solution reports its checkers' pass line; a student lab reports its stubs as not
    implemented yet."""
    missing = browserlab.browser_missing()
    if missing and os.environ.get("CI", "").lower() != "true":
        text = run_checked(path, tmp_path)          # no browser here: nbclient runs it
    else:
        lab, browser = request.getfixturevalue("lab"), request.getfixturevalue("browser")
        notebook = str(path.relative_to(ROOT))
        with browserlab.notebook_page(browser, lab, notebook,
                                      width=browserlab.FIGURE_WINDOW_PX) as page:
            executed = browserlab.check_course_page(page, lab, path)
        text = check_outputs(path, executed, lab.audit, path)
    must, must_not = EXPECTED[kind]
    lower = text.lower()
    for phrase in must:
        assert phrase.lower() in lower, f"{path.name}: output lacks {phrase!r}"
    for phrase in must_not:
        assert phrase not in text, f"{path.name}: output says {phrase!r}"


def test_course_map_lists_every_notebook_and_lab():
    """README and notebook 00 name every notebook and lab, and every name they link exists."""
    import re

    readme = (ROOT / "README.md").read_text()
    start = (ROOT / "notebooks" / "00_start_here.ipynb").read_text()
    for path in NOTEBOOKS + STUDENT_LABS:
        rel = str(path.relative_to(ROOT))
        assert rel in readme, f"README's course map does not list {rel}"
        if path.name != "00_start_here.ipynb":
            assert path.stem in start, f"notebook 00's course map does not list {path.stem}"
    for link in re.findall(r"\]\(((?:notebooks|labs)/[^)]+\.ipynb)\)", readme):
        assert (ROOT / link).exists(), f"README links to a missing file: {link}"


@pytest.mark.parametrize("path", ALL, ids=_ids(ALL))
def test_flashcourse_is_imported_before_numba(path):
    """flashcourse picks GPU or simulator; that is only possible before numba.cuda loads."""
    import re

    nb = json.loads(path.read_text())
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    first_numba = re.search(r"^(from numba|import numba)", code, re.M)
    first_fc = re.search(r"^(import flashcourse|from flashcourse)", code, re.M)
    if first_numba:
        assert first_fc and first_fc.start() < first_numba.start(), \
            f"{path.name} imports numba before flashcourse"
