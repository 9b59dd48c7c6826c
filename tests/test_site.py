"""The course website builds offline and every page is sound in a real browser.

Builds the site quickly (one notebook executed, FIGURE_NOTEBOOK, which makes figures:
`make site` executes them all, which takes minutes) into a temporary folder with
tools/build_site.py, serves it on 127.0.0.1 and opens every page in Debian's headless
chromium (tools/site_check.py): no broken internal link or anchor, every image loads,
maths typeset, no console error, no request leaving the loopback server, and every
figure of the executed notebook shown in its cell, at full width, and no page wider than
the window. Then one figure is taken off a page, another's file deleted, a third squeezed
and the page made wider than the window: the check must name the page, each cell and the
overflow. Skipped
without chromium or Sphinx (Python 3.10), except under CI=true where chromium must be
there. The quick site is built once per test run, also under pytest-xdist.
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import build_site  # noqa: E402
import site_check  # noqa: E402

#: The notebook the quick site executes: quick to run (seconds), and it makes figures.
FIGURE_NOTEBOOK = "notebooks/02_online_softmax.ipynb"


def _require_tools():
    if importlib.util.find_spec("sphinx") is None:
        pytest.skip("Sphinx is not installed (the website needs Python 3.11+ and "
                    "requirements-site.txt)")
    if not site_check.CHROMIUM.exists():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{site_check.CHROMIUM} missing (CI=true: the site test must run)")
        pytest.skip(f"{site_check.CHROMIUM} not found")


def test_every_notebook_and_lab_is_a_page():
    pages = build_site.course_pages()
    assert any(p.startswith("notebooks/") for p in pages)
    assert any(p.startswith("labs/") for p in pages)
    assert not any("solutions" in p for p in pages), "the site shows labs as learners get them"
    toc = build_site.landing_page(pages)
    for p in pages:
        assert p.removesuffix(".ipynb") in toc


@pytest.fixture(scope="session")
def quick_site(tmp_path_factory) -> Path:
    """The site with only FIGURE_NOTEBOOK executed, built once per test run: under
    pytest-xdist the workers share it (a file lock; the first one builds)."""
    _require_tools()
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    base = tmp_path_factory.getbasetemp()
    folder = base.parent / f"quick-site-{run}" if run else base / "quick-site"
    folder.mkdir(exist_ok=True)
    out = folder / "site"
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)             # released when the file closes
        if not (folder / "built").exists():
            build_site.build(out, execute=FIGURE_NOTEBOOK)
            (folder / "built").touch()
    return out


def _page(path: str) -> str:
    return path.replace(".ipynb", ".html")


#: both tests that read the quick site on one worker (make test: --dist loadgroup): the
#: second reads the site the first built, where on another worker it waited for the build
SITE_GROUP = pytest.mark.xdist_group("site")


@pytest.mark.browser
@pytest.mark.slow
@SITE_GROUP
def test_site_builds_and_every_page_is_sound(quick_site, browser):
    out = quick_site
    pages = site_check.pages_of(out)
    assert "index.html" in pages
    for p in build_site.course_pages():
        assert p.replace(".ipynb", ".html") in pages, f"{p} has no page"
    nb = site_check.executed_notebook(out, _page(FIGURE_NOTEBOOK))
    assert nb is not None, f"the quick site did not execute {FIGURE_NOTEBOOK}"
    figures = [f for _, _, f in site_check.figure_cells(nb)]
    assert sum(f > 0 for f in figures) >= 2, (
        f"{FIGURE_NOTEBOOK} made figures in {sum(f > 0 for f in figures)} cells: the quick "
        "site must cover figure cells (choose another FIGURE_NOTEBOOK)")
    download = json.loads((out / "_sources" / FIGURE_NOTEBOOK).read_text(encoding="utf-8"))
    assert not any(c.get("outputs") for c in download["cells"]), (
        "the .ipynb a page offers for download must be stored without outputs")
    problems = site_check.check_site(out, context=browser)   # the run's chromium
    assert not problems, "\n".join(f"{page}: {item}" for page, items in problems.items()
                                   for item in items)


@pytest.mark.browser
@pytest.mark.slow
@SITE_GROUP
def test_check_names_a_missing_figure(quick_site, tmp_path, browser):
    """Take one figure's <img> off the page, delete another figure's file, squeeze a third
    and make the page scroll sideways: the check names the page, each cell and the
    overflow."""
    for name in ("site", "site-src"):
        shutil.copytree(quick_site.with_name(name), tmp_path / name)
    site, page = tmp_path / "site", _page(FIGURE_NOTEBOOK)
    nb = site_check.executed_notebook(site, page)
    first, second, third = [c["id"] for _, c, f in site_check.figure_cells(nb) if f][:3]
    html_file = site / page
    text = html_file.read_text(encoding="utf-8")
    imgs = []
    for cell_id in (first, second, third):
        start = text.index(f"tag_{build_site.CELL_TAG}{cell_id} ")
        imgs.append(re.compile(r"<img [^>]*>").search(text, start))
    src = re.search(r'src="\.\./([^"]+)"', imgs[1].group()).group(1)
    (site / src).unlink()                                  # the second figure's file
    a, b = imgs[0].span()
    c = imgs[2].start() + len("<img ")
    text = (text[:a] + text[b:c]                                  # the first figure's <img>
            + 'style="width:120px" ' + text[c:])                  # the third figure squeezed
    text = text.replace("</body>", '<div style="width:4000px">wide</div></body>', 1)
    html_file.write_text(text, encoding="utf-8")

    problems = site_check.check_site(site, only=[page], context=browser)
    found = "\n".join(problems.get(page, []))
    assert f'id "{first}"' in found and "the page shows 0" in found, found
    assert f'id "{second}"' in found and "did not load" in found, found
    assert "scrolls sideways" in found, found
    assert "is shown 120 px wide" in found, found


def _executed(cells, backend=build_site.INLINE_BACKEND) -> dict:
    return {"cells": cells, "metadata": {build_site.META_KEY: {"matplotlib_backend": backend}}}


def _code(cell_id, *outputs):
    return {"cell_type": "code", "id": cell_id, "source": f"plot_{cell_id}()  # a figure\n",
            "outputs": [{"output_type": "display_data", "data": d} for d in outputs]}


PNG = {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure size 640x480 with 1 Axes>"}


def test_figure_problems_per_cell():
    """Without a browser: the executed notebook's figures per cell against the page's."""
    nb = _executed([{"cell_type": "markdown", "id": "site-header", "source": ""},
                    {"cell_type": "markdown", "id": "intro", "source": "# Title"},
                    _code("a", PNG), _code("b", {"text/plain": "3"}), _code("c", PNG, PNG)])
    shown = {"a": {"shown": 1, "loaded": 1}, "b": {"shown": 0, "loaded": 0},
             "c": {"shown": 2, "loaded": 2}}
    assert site_check.figure_problems(nb, shown) == []
    shown["c"] = {"shown": 2, "loaded": 1}
    assert site_check.figure_problems(nb, shown) == [
        'cell 3 (id "c": plot_c()): the notebook made 2 figures, the page shows 1 '
        "(and 1 image that did not load)"]
    del shown["a"]
    assert "the page has no such cell" in site_check.figure_problems(nb, shown)[0]
    shown = {"a": {"shown": 0, "loaded": 0}, "c": {"shown": 3, "loaded": 3}}
    assert [p.split(":")[0] for p in site_check.figure_problems(nb, shown)] == [
        'cell 1 (id "a"', 'cell 3 (id "c"']


def test_figure_check_refuses_a_notebook_run_without_the_inline_backend():
    """Under MPLBACKEND=Agg a notebook emits no figures, so its page and its executed
    notebook agree on zero: the check must not accept that run."""
    nb = _executed([_code("a")], backend="agg")
    problems = site_check.figure_problems(nb, {"a": {"shown": 0, "loaded": 0}})
    assert len(problems) == 1 and "'agg'" in problems[0], problems


def test_staged_code_cells_are_tagged(tmp_path):
    """Every staged code cell carries its tag: the page's handle on its outputs."""
    path = FIGURE_NOTEBOOK
    build_site.stage_notebook(ROOT / path, tmp_path / path, path)
    nb = json.loads((tmp_path / path).read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code and all(build_site.CELL_TAG + c["id"] in c["metadata"]["tags"] for c in code)
