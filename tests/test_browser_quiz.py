"""Every quiz in a real browser: long options wrap and never overlap, at any window width.

Uses the Debian chromium fixture `browser` (tests/conftest.py, tests/browserlab.py;
skipped without /usr/bin/chromium, failing under CI=true). To stay cheap it runs no
course notebook: a one-cell notebook in a scratch folder shows every quiz file
(flashcourse/quizzes/*.toml, found on disk) with `show_quiz(load_questions(path))`, the
widget a notebook's `quizzes.show("NN")` displays. At window widths of 1024, 1280 and
1440 px (JupyterLab's default layout, file browser open), and at 1280 px with the file
browser closed, for every question:

- no two option boxes (the radio labels) overlap;
- each option's text lies inside its own box (no line runs past its bottom or right edge),
  and each box inside the notebook's output area;
- every option is shown (as many boxes as options);
- and the options still behave as radio buttons: a click on an option's text picks it,
  Tab and Space pick another, and Check grades it.

ipywidgets' RadioButtons give each label a fixed one-line height, so a long option used
to wrap onto the next one (notebooks 04 Q3, 05 Q5/Q6, 06 Q4 at 1280 and 1440 px);
flashcourse.quiz.QUIZ_CSS lets the labels grow.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from browserlab import (ARTIFACTS, BROWSER_GROUPS, ROOT, jupyter_lab, notebook_page,
                        run_all_and_wait)

from flashcourse.quiz import OPTIONS_CLASS, QUIZ_DIR, load_questions

# with the explorers' tests, on one worker (make test: --dist loadgroup; BROWSER_GROUPS in
# tests/browserlab.py says why two groups)
pytestmark = [pytest.mark.browser, pytest.mark.xdist_group(BROWSER_GROUPS[1])]

WIDTHS = (1024, 1280, 1440)
QUIZ_FILES = sorted(QUIZ_DIR.glob("*.toml"))
#: a difference of a fraction of a pixel is rounding, not an overlap
SLACK_PX = 0.5

#: For every question's options: each label's box, the box of its text (a Range over the
#: label's text nodes, one rectangle per line), its scroll sizes, and the output area's box.
GEOMETRY_JS = r"""
(cls) => {
  const rect = r => ({left: r.left, top: r.top, right: r.right, bottom: r.bottom});
  return [...document.querySelectorAll('.' + cls)].map((w, q) => {
    const area = w.closest('.jp-OutputArea-output') || w.parentElement;
    const labels = [...w.querySelectorAll('.widget-radio-box > label')];
    return {
      question: q,
      title: ((w.parentElement.querySelector('b') || {}).textContent || '').slice(0, 80),
      area: rect(area.getBoundingClientRect()),
      options: labels.map(l => {
        const range = document.createRange();
        range.selectNodeContents(l);
        const lines = [...range.getClientRects()].filter(r => r.width > 0 && r.height > 0);
        return {text: l.textContent.slice(0, 60), box: rect(l.getBoundingClientRect()),
                lines: lines.map(rect), scrollH: l.scrollHeight, clientH: l.clientHeight,
                scrollW: l.scrollWidth, clientW: l.clientWidth};
      }),
    };
  });
}
"""


def _overlap(a, b) -> bool:
    return (min(a["right"], b["right"]) - max(a["left"], b["left"]) > SLACK_PX
            and min(a["bottom"], b["bottom"]) - max(a["top"], b["top"]) > SLACK_PX)


def _inside(inner, outer) -> bool:
    return (inner["left"] >= outer["left"] - SLACK_PX and inner["top"] >= outer["top"] - SLACK_PX
            and inner["right"] <= outer["right"] + SLACK_PX
            and inner["bottom"] <= outer["bottom"] + SLACK_PX)


def layout_problems(questions: list, where: str) -> list[str]:
    """What is wrong with the options' geometry (GEOMETRY_JS's result), in words."""
    problems = []
    for q in questions:
        name = f"{where}, question {q['question'] + 1} ({q['title']!r})"
        opts = q["options"]
        for i, a in enumerate(opts):
            for b in opts[i + 1:]:
                if _overlap(a["box"], b["box"]):
                    problems.append(f"{name}: option {a['text']!r} overlaps {b['text']!r}")
            for line in a["lines"]:
                if not _inside(line, a["box"]):
                    problems.append(f"{name}: the text of {a['text']!r} runs out of its box "
                                    f"(a line at {line}, the box {a['box']})")
                    break
            if a["scrollH"] > a["clientH"] + 1 or a["scrollW"] > a["clientW"] + 1:
                problems.append(f"{name}: {a['text']!r} overflows its box (scroll "
                                f"{a['scrollW']}x{a['scrollH']}, box {a['clientW']}x"
                                f"{a['clientH']})")
            if not _inside(a["box"], q["area"]):
                problems.append(f"{name}: {a['text']!r} sticks out of the output area")
    return problems


@pytest.fixture(scope="module")
def quiz_lab(tmp_path_factory):
    """A JupyterLab on a scratch folder holding one notebook that shows every quiz file."""
    root = tmp_path_factory.mktemp("quizroot")
    source = ("from flashcourse.quiz import QUIZ_DIR, load_questions, show_quiz\n"
              "for path in sorted(QUIZ_DIR.glob('*.toml')):\n"
              "    show_quiz(load_questions(path))")
    (root / "quizzes.ipynb").write_text(json.dumps({
        "cells": [{"cell_type": "code", "execution_count": None, "id": "quizzes",
                   "metadata": {}, "outputs": [], "source": source}],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                    "name": "python3"}},
        "nbformat": 4, "nbformat_minor": 5}))
    # the kernel runs in the scratch folder: it must import this checkout's flashcourse
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [old])])
    try:
        with jupyter_lab(root, tmp_path_factory.mktemp("quizlab")) as server:
            yield server
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def _settled(page, cls: str) -> list:
    """GEOMETRY_JS once two looks 0.3 s apart agree (the layout has settled)."""
    before = None
    for _ in range(20):
        now = page.evaluate(GEOMETRY_JS, cls)
        if now == before:
            return now
        before = now
        time.sleep(0.3)
    return now


def test_quiz_options_wrap_without_overlapping(quiz_lab, browser):
    expected = [len(q.choices) for p in QUIZ_FILES for q in load_questions(p)]
    ARTIFACTS.mkdir(exist_ok=True)
    problems, seen = [], []
    with notebook_page(browser, quiz_lab, "quizzes.ipynb", WIDTHS[0], 900) as page:
        try:
            run_all_and_wait(page, quiz_lab, "quizzes.ipynb")
            page.wait_for_function(
                "([cls, n]) => document.querySelectorAll('.' + cls).length === n",
                arg=[OPTIONS_CLASS, len(expected)])
            layouts = [(f"{w} px", w, False) for w in WIDTHS] + [("1280 px, no file browser",
                                                                   1280, True)]
            for where, width, collapse in layouts:
                page.set_viewport_size({"width": width, "height": 900})
                if collapse:                         # View > Show Left Sidebar: off
                    page.keyboard.press("Control+b")
                questions = _settled(page, OPTIONS_CLASS)
                assert [len(q["options"]) for q in questions] == expected, where
                problems += layout_problems(questions, where)
                area = questions[0]["area"]
                seen.append(f"{where}: output area {area['right'] - area['left']:.0f} px wide")
                # for review: the question whose options wrap the most, as shown
                tallest = max(range(len(questions)), key=lambda k: sum(
                    o["box"]["bottom"] - o["box"]["top"] for o in questions[k]["options"]))
                shot = page.locator(f".{OPTIONS_CLASS}").nth(tallest).locator("xpath=..")
                shot.scroll_into_view_if_needed()
                slug = where.split(",")[0].replace(" ", "")
                shot.screenshot(path=str(ARTIFACTS / f"browser_quiz_{slug}"
                                         f"{'_nosidebar' if collapse else ''}.png"))
            # the options are still native radio buttons: a click on an option's (wrapped)
            # text picks it, Tab and Space pick another, and Check grades the pick
            first = page.locator(f".{OPTIONS_CLASS}").first
            first.scroll_into_view_if_needed()
            labels = first.locator(".widget-radio-box > label")
            labels.nth(1).click(position={"x": 60, "y": 5})
            assert labels.nth(1).locator("input").is_checked()
            # ipywidgets' radios carry no common name, so each is its own tab stop: Tab
            # reaches the next option and Space picks it (as before the CSS)
            labels.nth(1).locator("input").press("Tab")
            page.keyboard.press("Space")
            assert labels.nth(2).locator("input").is_checked()
            assert not labels.nth(1).locator("input").is_checked()
            box = first.locator("xpath=..")
            box.locator("button", has_text="Check").click()
            box.locator(".widget-html", has_text="Try again").or_(
                box.locator(".widget-html", has_text="Correct.")).first.wait_for()
        except Exception as exc:
            page.screenshot(path=str(ARTIFACTS / "browser_quiz_failure.png"))
            raise AssertionError(f"{type(exc).__name__}: {exc}\n{quiz_lab.log_tail()}") from exc
    assert not problems, f"{len(problems)} layout problems:\n" + "\n".join(problems[:40])
    print("; ".join(seen))


def test_layout_check_finds_an_overlap():
    """The geometry check itself: two stacked one-line boxes whose text spills over."""
    box = {"left": 0, "top": 0, "right": 100, "bottom": 20}
    spill = {"left": 0, "top": 0, "right": 100, "bottom": 40}
    below = {"left": 0, "top": 20, "right": 100, "bottom": 40}
    area = {"left": 0, "top": 0, "right": 200, "bottom": 200}
    good = [{"question": 0, "title": "t", "area": area, "options": [
        {"text": "a", "box": box, "lines": [box], "scrollH": 20, "clientH": 20,
         "scrollW": 100, "clientW": 100},
        {"text": "b", "box": below, "lines": [below], "scrollH": 20, "clientH": 20,
         "scrollW": 100, "clientW": 100}]}]
    assert layout_problems(good, "x") == []
    bad = json.loads(json.dumps(good))
    bad[0]["options"][0]["lines"] = [box, {**below}]              # a second line below its box
    bad[0]["options"][0]["scrollH"] = 40
    found = layout_problems(bad, "x")
    assert any("runs out of its box" in p for p in found)
    assert any("overflows its box" in p for p in found)
    bad[0]["options"][0]["box"] = spill                           # a box grown over the next
    assert any("overlaps" in p for p in layout_problems(bad, "x"))
