"""The explorers in a real browser, on a small screen and under fast hands.

Uses the JupyterLab + Debian chromium fixtures of tests/test_browser.py (skipped
without /usr/bin/chromium, failing under CI=true; tests/test_browser.py also moves one
control of every widget of every notebook):

- notebooks 01 and 04 at a 1280 x 720 viewport: each explorer (controls, message, readout
  and plot together) is at most as tall as the notebook's visible area and as wide as it,
  and its plot is shown at the CSS size it was rendered for (not stretched);
- notebook 09: the backward explorer is shown once; changing log2 N to 17, then d to
  128 and Br = Bc to 256 without waiting (the sequence that filled the widget with a
  matplotlib traceback) leaves no error output and a readout for the last setting.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import pytest

# the module-scoped fixtures `lab` (JupyterLab) and `browser` (chromium) come from there
from test_browser import (ARTIFACTS, ROOT, browser, lab, notebook_page,  # noqa: F401
                          run_all_and_wait)

pytestmark = pytest.mark.browser


@contextmanager
def _notebook_run_in_browser(server, chromium, notebook, name, width, height):
    """`notebook` run (Run All) in chromium at width x height; yields the page. A failure
    saves a screenshot and the server log; the stored notebook must stay untouched."""
    ARTIFACTS.mkdir(exist_ok=True)
    stored = (ROOT / notebook).read_bytes()
    with notebook_page(chromium, server, notebook, width, height) as page:
        try:
            run_all_and_wait(page, server, notebook)
            yield page
        except Exception as exc:
            page.screenshot(path=str(ARTIFACTS / f"{name}_failure.png"), full_page=False)
            raise AssertionError(f"browser test failed: {type(exc).__name__}: {exc}\n"
                                 f"(screenshot: {ARTIFACTS / (name + '_failure.png')})\n"
                                 f"{server.log_tail()}") from exc
    assert (ROOT / notebook).read_bytes() == stored, f"{notebook} was modified by the browser"


@pytest.mark.parametrize("notebook,classes", [
    ("notebooks/01_dense_attention_and_memory.ipynb", ("fc-score-memory",)),
    ("notebooks/04_io_traffic_model.ipynb", ("fc-traffic", "fc-schedule")),
])
def test_explorers_fit_a_1280x720_screen(lab, browser, notebook, classes):  # noqa: F811
    with _notebook_run_in_browser(lab, browser, notebook, "browser_1280x720", 1280,
                                  720) as page:
        last = classes[-1]
        page.wait_for_function(
            f"() => document.querySelectorAll('.{last} img').length > 0 && "
            f"document.querySelector('.{last} img').naturalWidth > 0")
        area = page.locator(".jp-NotebookPanel .jp-WindowedPanel-outer, "
                            ".jp-NotebookPanel .jp-Notebook").first.bounding_box()
        for cls in classes:
            box = page.locator(f".{cls}").first
            box.scroll_into_view_if_needed()
            time.sleep(0.3)
            bb = box.bounding_box()
            box.screenshot(path=str(ARTIFACTS / f"browser_1280x720_{cls}.png"))
            assert bb["height"] <= area["height"], (cls, bb, area)
            assert bb["width"] <= area["width"], (cls, bb, area)
            img = page.locator(f".{cls} img").first
            size = img.evaluate("i => [i.clientWidth, i.naturalWidth, i.clientHeight,"
                                " i.naturalHeight]")
            # rendered at 2x: natural = 2 x shown, up to rounding (never stretched)
            assert abs(size[1] - 2 * size[0]) <= 2 and abs(size[3] - 2 * size[2]) <= 2, \
                (cls, size)


def test_backward_explorer_survives_fast_changes(lab, browser):  # noqa: F811
    with _notebook_run_in_browser(lab, browser, "notebooks/09_backward_recompute.ipynb",
                                  "browser_backward", 1400, 1000) as page:
        explorer = page.locator(".fc-backward")
        explorer.first.locator(".fc-backward-readout").wait_for()
        page.wait_for_function(
            "() => { const e = document.querySelector('.fc-backward-readout'); "
            "return e && e.textContent.includes('N = 4,096, d = 64'); }")
        assert explorer.count() == 1, "the backward explorer is shown more than once"
        ex = explorer.first
        ex.scroll_into_view_if_needed()
        handle = ex.locator(".fc-slider-log2n .noUi-handle")
        handle.focus()
        handle.press("End")                                  # log2 N = 17
        selects = ex.locator("select")
        selects.nth(0).select_option(label="128")           # d, right away
        selects.nth(2).select_option(label="256")           # Br = Bc, right away
        page.wait_for_function(
            "() => { const e = document.querySelector('.fc-backward-readout'); "
            "return e && e.textContent.includes('N = 131,072, d = 128'); }")
        # the readout is set after the plot is drawn: both show the last setting now
        page.locator(".jp-StatusBar-TextItem", has_text="| Idle").first.wait_for()
        time.sleep(0.5)
        size = ex.locator("img").first.evaluate(
            "i => [i.clientWidth, i.naturalWidth, i.clientHeight, i.naturalHeight]")
        assert abs(size[1] - 2 * size[0]) <= 2 and abs(size[3] - 2 * size[2]) <= 2, size
        assert ex.bounding_box()["height"] <= 599    # the visible area at 1280 x 720
        text = ex.text_content()
        assert "Traceback" not in text and "Cannot show" not in text, text[:500]
        assert page.locator(".jp-OutputArea-output[data-mime-type="
                            "'application/vnd.jupyter.error']").count() == 0   # no traceback
        ex.screenshot(path=str(ARTIFACTS / "browser_backward.png"))
