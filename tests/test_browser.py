"""The whole course in a real browser: JupyterLab driven by headless Chromium.

Starts JupyterLab on 127.0.0.1 (a free port, a random token) with every Jupyter,
IPython, matplotlib and settings folder pointed into a throw-away directory (nothing
is written to the user's home or the repository: checkpoints go there too; the
"Jupyter news" toast, autosave and notebook windowing are switched off by a settings
override), and drives Debian's /usr/bin/chromium through Playwright (never
`playwright install`). One server and one browser per test module (per xdist worker).

test_course_page_in_the_browser, for every notebook and lab found on disk
(notebooks/*.ipynb, labs/*.ipynb, labs/solutions/*.ipynb; nothing hard-coded):
  - open it, Run All from the Run menu, wait until every non-empty code cell has run;
  - no error output (a traceback, or an "...Error:" line) and no
    "Error displaying widget" anywhere on the page;
  - every displayed widget with a control: move one control (a slider one step by
    keyboard, another dropdown option, a radio choice plus its Check button, a
    toggle, a checkbox or a number box) and check that the rest of the widget (its
    text, its plot image) changes within WIDGET_WAIT_MS;
  - the notebook file on disk is unchanged.
test_score_memory_slider_moves_the_readout keeps one exact check: the score-memory
explorer's Tq slider (in the notebook that calls it at Tq = 4096) takes the readout
from exactly

    M_score per head: 33,554,432 B = 32 MiB       (4,096 x 4,096 x 2 B)
to  M_score per head: 134,217,728 B = 128 MiB     (8,192 x 8,192 x 2 B)

Screenshots go under test-artifacts/ (git-ignored). Servers are stopped by process
group in a `finally` block. Without /usr/bin/chromium the tests are skipped with the
reason, except under CI=true, where they fail (FLASHCOURSE_CHROMIUM=PATH points the
tests at another Chromium binary).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers import wait_until_ready

ROOT = Path(__file__).resolve().parents[1]
#: The exact check below runs on the notebook that shows the score-memory explorer at
#: Tq = 4096 (found by its call, so that moving or renaming notebooks does not break it).
EXPLORER_CALL = "score_memory_explorer(t_query=4096"
NOTEBOOK = next((str(p.relative_to(ROOT)) for p in sorted(ROOT.glob("notebooks/*.ipynb"))
                 if EXPLORER_CALL in p.read_text()), None)
CHROMIUM = Path(os.environ.get("FLASHCOURSE_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync",
                 "--disable-dev-shm-usage"]
ARTIFACTS = ROOT / "test-artifacts"
BEFORE = "M_score per head: 33,554,432 B = 32 MiB"           # 4096 * 4096 * 2
AFTER = "M_score per head: 134,217,728 B = 128 MiB"          # 8192 * 8192 * 2
TIMEOUT_MS = 90_000
#: Run All of one notebook (the slowest, the CUDA simulator ones, take ~20-60 s on 2 cores).
RUN_ALL_MS = 300_000
#: How long a widget may take to redraw after a control moved.
WIDGET_WAIT_MS = 30_000
PAGES = sorted(ROOT.glob("notebooks/*.ipynb")) + sorted(ROOT.glob("labs/*.ipynb")) \
    + sorted(ROOT.glob("labs/solutions/*.ipynb"))

#: The browser tests in two xdist groups (make test: --dist loadgroup), each run by one
#: worker with its own JupyterLab and Chromium: in one group they kept one worker busy
#: ~12 min, longer than the rest of the suite on the other. At most two JupyterLabs run
#: at a time on the 2 cores, no more load than one beside a simulator test. The pages
#: alternate (in PAGES order) between the groups; the other browser tests (the exact
#: check below, tests/test_browser_widgets.py, tests/test_browser_quiz.py) join the
#: second, which holds the lighter half of the pages.
BROWSER_GROUPS = ("browser", "browser-2")
pytestmark = [pytest.mark.browser]


def _require(condition: bool, reason: str) -> None:
    """Skip with `reason`, or fail under CI=true, where the browser test must run."""
    if condition:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: the browser test must run)")
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no server log)"


class Lab:
    """A running JupyterLab server: url, token, log file, process."""

    def __init__(self, proc, port, token, log):
        self.proc, self.port, self.token, self.log = proc, port, token, log
        self.base = f"http://127.0.0.1:{port}"

    def api(self, path: str, method: str = "GET"):
        req = urllib.request.Request(f"{self.base}{path}", method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read()
        return json.loads(body) if body else None

    def url(self, notebook: str) -> str:
        return f"{self.base}/lab/tree/{notebook}?reset&token={self.token}"

    def log_tail(self) -> str:
        return f"--- JupyterLab log (last lines) ---\n{_tail(self.log)}"


@contextmanager
def jupyter_lab(root: Path, scratch: Path, startup_s: float = 60):
    """Start JupyterLab for `root` with all state under `scratch`; stop it on exit."""
    jupyter = Path(sys.executable).parent / "jupyter"
    home = scratch / "home"
    dirs = {name: scratch / name for name in
            ("config", "data", "runtime", "lab-settings", "user-settings", "workspaces",
             "ipython", "mpl")}
    for d in [home, *dirs.values()]:
        d.mkdir(parents=True, exist_ok=True)
    # No "get notified about Jupyter news?" toast, no update check (it would cover the
    # screenshots and try to reach the network), and no autosave (the executed notebook,
    # with its outputs, must never be written back into the repository).
    (dirs["lab-settings"] / "overrides.json").write_text(json.dumps({
        "@jupyterlab/apputils-extension:notification": {"fetchNews": "false",
                                                        "checkForUpdates": False},
        "@jupyterlab/docmanager-extension:plugin": {"autosave": False},
        # every cell stays in the page (no virtual scrolling), so all can be inspected
        "@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"}}))
    env = dict(os.environ)
    env.update(HOME=str(home), JUPYTER_CONFIG_DIR=str(dirs["config"]),
               JUPYTER_DATA_DIR=str(dirs["data"]), JUPYTER_RUNTIME_DIR=str(dirs["runtime"]),
               JUPYTERLAB_SETTINGS_DIR=str(dirs["user-settings"]),
               JUPYTERLAB_WORKSPACES_DIR=str(dirs["workspaces"]),
               IPYTHONDIR=str(dirs["ipython"]), MPLCONFIGDIR=str(dirs["mpl"]),
               XDG_CACHE_HOME=str(home / ".cache"), XDG_CONFIG_HOME=str(home / ".config"),
               PATH=f"{jupyter.parent}{os.pathsep}{env.get('PATH', '')}",
               JUPYTER_PLATFORM_DIRS="1")
    env.pop("MPLBACKEND", None)              # the kernel uses the inline backend, as for learners
    env.pop("JUPYTER_TOKEN", None)
    port, token = _free_port(), secrets.token_hex(16)
    cmd = [str(jupyter), "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
           f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
           f"--LabApp.app_settings_dir={dirs['lab-settings']}",
           "--ServerApp.port_retries=0", "--LabApp.news_url=None",
           # checkpoints (written when a notebook is opened) go to the scratch folder,
           # never into the repository (.ipynb_checkpoints/ would be read as notebooks)
           f"--FileCheckpoints.checkpoint_dir={scratch / 'checkpoints'}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    log = scratch / "jupyterlab.log"
    with open(log, "wb") as log_file:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log_file,
                                stderr=subprocess.STDOUT, start_new_session=True)
    lab = Lab(proc, port, token, log)
    try:
        wait_until_ready(proc, lambda: lab.api("/api/status"), "JupyterLab", startup_s,
                         lab.log_tail, 0.25)
        yield lab
    finally:
        try:                                  # shut kernels down cleanly first
            for kernel in lab.api("/api/kernels") or []:
                lab.api(f"/api/kernels/{kernel['id']}", method="DELETE")
        except Exception:  # noqa: BLE001 - best effort; the process group goes next
            pass
        _stop(proc)


def _stop(proc: subprocess.Popen, grace_s: float = 10) -> None:
    """SIGTERM the server's process group (it is its own session leader), then SIGKILL."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=grace_s)
    except ProcessLookupError:
        pass


#: A found kernel-choice dialog (shown when the session lost its kernel), or a run under
#: way; and the same or a finished run. Polled every POLL_MS, not every animation frame:
#: each poll walks every cell, and the kernel needs the 2 cores more than the page does.
DIALOG = ".jp-Dialog .jp-Dialog-button.jp-mod-accept"
STARTED_JS = (f"() => !!document.querySelector('{DIALOG}') || (s => s.busy > 0 || "
              "s.done > 0 || s.todo === 0)(window.fcRunState())")
FINISHED_JS = (f"() => !!document.querySelector('{DIALOG}') || (s => s.busy === 0 && "
               "(s.todo === 0 || window.fcErrors().length > 0))(window.fcRunState())")
POLL_MS = 100


def _accept_kernel_dialog(page) -> bool:
    """If JupyterLab asks which kernel to start (the session lost its own), take the
    default; True if it asked."""
    dialog = page.locator(DIALOG)
    if not dialog.count():
        return False
    dialog.first.click()
    page.locator(".jp-Dialog").first.wait_for(state="detached")
    return True


def open_and_run_all(page, lab: Lab, notebook: str) -> None:
    """Open `notebook`, wait for an idle kernel, run all cells from the Run menu, and wait
    until the run has started (answering the kernel dialog if one comes first)."""
    page.goto(lab.url(notebook))
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell")
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']")
    # the kernel is connected and idle (status bar: "Python 3 (ipykernel) | Idle")
    page.locator(".jp-StatusBar-TextItem", has_text="| Idle").first.wait_for()
    page.evaluate(PAGE_JS)
    page.locator(".lm-MenuBar-item", has_text="Run").first.click()
    item = page.locator(".lm-Menu-item[data-command='runmenu:run-all']")
    item.wait_for()
    page.wait_for_function(
        "() => { const e = document.querySelector(\".lm-Menu-item[data-command="
        "'runmenu:run-all']\"); return e && !e.classList.contains('lm-mod-disabled'); }")
    item.click()
    # event-driven: no fixed wait for a dialog that almost never comes
    page.wait_for_function(STARTED_JS, polling=POLL_MS)
    if _accept_kernel_dialog(page):
        page.wait_for_function(STARTED_JS, polling=POLL_MS)


def _require_browser() -> None:
    _require(CHROMIUM.exists(), f"Debian's chromium is not installed at {CHROMIUM} "
             "(apt-get install chromium); the real-browser tests are skipped")
    try:
        import playwright  # noqa: F401
    except ImportError:
        _require(False, "the playwright Python package is not installed "
                        "(pip install -r requirements-dev.txt)")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """One JupyterLab server for the module (per xdist worker)."""
    _require_browser()
    with jupyter_lab(ROOT, tmp_path_factory.mktemp("jupyterlab")) as server:
        yield server


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for the module, as one browser context: its pages share the
    HTTP cache, so JupyterLab's scripts are fetched once, not once per page (pages loaded
    ~15% faster so, here); each test opens its own page."""
    _require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                     args=CHROMIUM_ARGS)
        try:
            context = chromium.new_context()
            yield context
        finally:
            chromium.close()


@contextmanager
def notebook_page(browser, lab: Lab, notebook: str, width: int = 1400, height: int = 1000):
    """A fresh page of the `browser` context; on exit its kernel is shut down (the session
    deleted)."""
    page = browser.new_page()
    page.set_viewport_size({"width": width, "height": height})
    page.set_default_timeout(TIMEOUT_MS)
    try:
        yield page
    finally:
        page.close()
        try:
            for session in lab.api("/api/sessions") or []:
                if session.get("path") == notebook:
                    lab.api(f"/api/sessions/{session['id']}", method="DELETE")
        except Exception:  # noqa: BLE001 - best effort: the server stops at module end
            pass


# --- every notebook and lab ---------------------------------------------------------

#: JavaScript helpers, defined in the page once: the run state of the notebook, error
#: outputs, top-level widgets, and a widget's "readout" signature (its text and images
#: without its controls, so that a control's own value display does not count).
PAGE_JS = r"""
() => {
  const controls = '.widget-slider, .widget-hslider, .widget-vslider, .widget-dropdown, '
    + '.widget-radio, .widget-checkbox, .widget-toggle-buttons, .widget-text, '
    + '.widget-inline-hbox:has(input), .widget-button, .widget-toggle-button, .widget-play';
  window.fcRunState = () => {
    const cells = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell')];
    let busy = 0, done = 0, todo = 0, firstTodo = -1;
    cells.forEach((c, i) => {
      const src = (c.querySelector('.cm-content') || {}).textContent || '';
      const prompt = (c.querySelector('.jp-InputPrompt') || {}).textContent || '';
      if (prompt.includes('[*]')) busy++;
      else if (/\[\d+\]/.test(prompt)) done++;
      else if (src.trim() !== '') { todo++; if (firstTodo < 0) firstTodo = i; }
    });
    return {cells: cells.length, busy, done, todo, firstTodo};
  };
  window.fcErrors = () => {
    const found = [];
    const cells = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell')];
    cells.forEach((c, i) => {
      c.querySelectorAll('.jp-OutputArea-output').forEach(o => {
        const t = o.innerText || '';
        const mime = o.getAttribute('data-mime-type') || '';
        if (/Traceback \(most recent call last\)|^\s*\w*(Error|Exception)[:\s]/m.test(t)
            && (mime.includes('stderr') || /Traceback|Error/.test(t)))
          found.push(`code cell ${i}: ${t.slice(0, 1500)}`);
      });
    });
    if (document.body.innerText.includes('Error displaying widget'))
      found.push('"Error displaying widget" on the page');
    return found;
  };
  window.fcWidgets = () => {
    const roots = [...document.querySelectorAll('.jp-OutputArea-output')]
      .map(o => o.querySelector(':scope > .jupyter-widgets, :scope .jupyter-widgets'))
      .filter(w => w && !w.parentElement.closest('.jupyter-widgets'));
    roots.forEach((w, i) => w.setAttribute('data-fc-widget', String(i)));
    return roots.length;
  };
  window.fcSignature = (i) => {
    const root = document.querySelector(`[data-fc-widget="${i}"]`);
    if (!root) return '';
    const clone = root.cloneNode(true);
    clone.querySelectorAll(controls).forEach(e => e.remove());
    const imgs = [...root.querySelectorAll('img')].map(e => e.src.length + ':' + e.src.slice(-400));
    const svgs = [...root.querySelectorAll('svg')].map(e => e.outerHTML.length);
    return clone.textContent + '|' + imgs.join(',') + '|' + svgs.join(',');
  };
  window.fcShrunkImages = (least) => {
    const found = [];
    const cells = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell')];
    cells.forEach((c, i) => {
      // matplotlib figures only: an explorer's picture is a widget image drawn at 2x and
      // sized by CSS on purpose (tests/test_plots.py holds its width and fonts)
      c.querySelectorAll('.jp-OutputArea-output img:not(.widget-image)').forEach(img => {
        const w = img.naturalWidth, shown = img.clientWidth;
        if (w > 0 && shown < least * w)
          found.push(`code cell ${i}: a ${w} px wide figure shown at ${shown} px `
                     + `(${(100 * shown / w).toFixed(0)}%)`);
      });
    });
    return found;
  };
  return true;
}
"""
#: the window width at which every figure must be shown at (nearly) its own size, and the
#: least share of its pixel width it may be shown at (text then stays >= 9 pt on screen,
#: since every figure's text is >= 9.5 pt: tests/test_notebooks.py measures it)
FIGURE_WINDOW_PX, FIGURE_LEAST_SHARE = 1280, 0.95


def run_all_and_wait(page, lab: Lab, notebook: str) -> dict:
    """Open, Run All, wait until nothing runs and every non-empty code cell ran (or
    an error stopped the run). Returns the final run state."""
    open_and_run_all(page, lab, notebook)
    page.wait_for_function(FINISHED_JS, timeout=RUN_ALL_MS, polling=POLL_MS)
    while _accept_kernel_dialog(page):
        page.wait_for_function(FINISHED_JS, timeout=RUN_ALL_MS, polling=POLL_MS)
    page.locator(".jp-StatusBar-TextItem", has_text="| Idle").first.wait_for()
    return page.evaluate("window.fcRunState()")


def _move_control(page, root) -> str | None:
    """Move one control of widget `root`; return what was moved (None: no control)."""
    radio = root.locator(".widget-radio input[type=radio]")
    if radio.count():
        radio.nth(min(1, radio.count() - 1)).check()
        button = root.locator("button.widget-button")
        if button.count():
            button.first.click()
        return "a radio choice and its button"
    handle = root.locator(".widget-slider .noUi-handle, .widget-hslider .noUi-handle")
    if handle.count():
        h = handle.first
        h.scroll_into_view_if_needed()
        value = root.locator(".widget-readout").first
        before = value.text_content() if value.count() else None
        h.focus()
        h.press("ArrowRight")
        if value.count() and value.text_content() == before:     # at its maximum
            h.press("ArrowLeft")
            h.press("ArrowLeft")
        return "a slider, one step"
    select = root.locator(".widget-dropdown select")
    if select.count():
        sel = select.first
        options = sel.locator("option")
        n = options.count()
        current = sel.evaluate("e => e.selectedIndex")
        sel.select_option(index=(current + 1) % n)
        return "a dropdown, the next option"
    for selector, what in ((".widget-toggle-buttons button:not(.mod-active)", "a toggle button"),
                           (".widget-checkbox input[type=checkbox]", "a checkbox")):
        found = root.locator(selector)
        if found.count():
            found.first.click()
            return what
    number = root.locator(".widget-text input[type=number]")
    if number.count():
        n = number.first
        value = float(n.input_value() or 0)
        n.fill(str(int(value) + 1 if value == int(value) else value * 1.5))
        n.press("Enter")
        return "a number box"
    return None


def check_widgets(page) -> list:
    """Move one control of every top-level widget; return the ones whose readout did
    not change (as messages) and a record of what was moved."""
    problems, moved = [], []
    count = page.evaluate("window.fcWidgets()")
    for i in range(count):
        root = page.locator(f"[data-fc-widget='{i}']")
        root.scroll_into_view_if_needed()
        page.evaluate("(i) => { window.fcBefore = window.fcSignature(i); }", i)
        what = _move_control(page, root)
        if what is None:
            continue
        try:
            page.wait_for_function("(i) => window.fcSignature(i) !== window.fcBefore",
                                   arg=i, timeout=WIDGET_WAIT_MS, polling=POLL_MS)
            moved.append(f"widget {i}: {what}")
        except Exception:  # noqa: BLE001 - reported below with the widget's text
            text = (root.text_content() or "")[:300]
            problems.append(f"widget {i}: moved {what}, but its readout did not change "
                            f"within {WIDGET_WAIT_MS / 1000:.0f} s; its text: {text!r}")
    return problems, moved


def save_figure_shots(page, stem: str) -> int:
    """Each figure the page shows, for review: test-artifacts/figures/STEM_K.png (the PNG
    the browser draws, decoded from its data URL: no screenshot, no wait for layout; the
    test checks separately that no figure is shown shrunk)."""
    out = ARTIFACTS / "figures"
    out.mkdir(parents=True, exist_ok=True)
    sources = page.evaluate("() => [...document.querySelectorAll("
                            "'.jp-Notebook .jp-OutputArea-output img')].map(e => e.src)")
    for k, src in enumerate(sources):
        head, _, data = src.partition(",")
        if head.startswith("data:image/png;base64"):
            (out / f"{stem}_{k:02d}.png").write_bytes(base64.b64decode(data))
    return len(sources)


@pytest.mark.parametrize("path", [
    pytest.param(p, id=str(p.relative_to(ROOT)),
                 marks=pytest.mark.xdist_group(BROWSER_GROUPS[i % 2]))
    for i, p in enumerate(PAGES)])
def test_course_page_in_the_browser(path, lab, browser):
    notebook = str(path.relative_to(ROOT))
    stored = path.read_bytes()
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / f"browser_{path.stem}.png"
    started = time.monotonic()
    with notebook_page(browser, lab, notebook, width=FIGURE_WINDOW_PX) as page:
        try:
            state = run_all_and_wait(page, lab, notebook)
            errors = page.evaluate("window.fcErrors()")
            assert not errors, "error output after Run All:\n" + "\n".join(errors)
            assert state["todo"] == 0, f"code cell {state['firstTodo']} never ran: {state}"
            save_figure_shots(page, path.stem)
            shrunk = page.evaluate("(least) => window.fcShrunkImages(least)",
                                   FIGURE_LEAST_SHARE)
            assert not shrunk, (f"figures shrunk at a {FIGURE_WINDOW_PX} px window (their "
                                "text gets small):\n" + "\n".join(shrunk))
            ran_s = time.monotonic() - started
            problems, moved = check_widgets(page)
            errors = page.evaluate("window.fcErrors()")
            assert not errors, "error output after moving widgets:\n" + "\n".join(errors)
            assert not problems, "\n".join(problems)
        except Exception as exc:
            page.screenshot(path=str(shot), full_page=True)
            raise AssertionError(f"{notebook} in the browser: {type(exc).__name__}: {exc}\n"
                                 f"(screenshot: {shot})\n{lab.log_tail()}") from exc
    assert path.read_bytes() == stored, f"{notebook} was modified by the browser"
    assert not (path.parent / ".ipynb_checkpoints").exists(), "checkpoints written beside it"
    print(f"{notebook}: {state['done']} cells ran in {ran_s:.1f} s; {len(moved)} widgets "
          f"moved ({'; '.join(moved)}); {time.monotonic() - started:.1f} s in all")


# --- one exact check ----------------------------------------------------------------

@pytest.mark.xdist_group(BROWSER_GROUPS[1])
def test_score_memory_slider_moves_the_readout(lab, browser):
    assert NOTEBOOK, f"no notebook calls {EXPLORER_CALL}...)"
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "browser_failure.png").unlink(missing_ok=True)     # from an earlier run
    shot = ARTIFACTS / "browser_score_memory.png"
    stored = (ROOT / NOTEBOOK).read_bytes()
    started = time.monotonic()
    with notebook_page(browser, lab, NOTEBOOK) as page:
        try:
            open_and_run_all(page, lab, NOTEBOOK)
            explorer = page.locator(".fc-score-memory").first
            readout = explorer.locator(".fc-score-readout")
            readout.wait_for()
            readout.scroll_into_view_if_needed()
            page.wait_for_function(
                "(want) => { const e = document.querySelector("
                "'.fc-score-memory .fc-score-readout'); return e && "
                "e.textContent.trim() === want; }", arg=BEFORE)
            plot_src = "() => { const i = document.querySelector('.fc-score-memory img'); " \
                       "return i ? i.src : ''; }"
            src_before = page.evaluate(plot_src)
            handle = explorer.locator(".fc-slider-tq .noUi-handle")
            handle.focus()
            handle.press("ArrowRight")
            page.wait_for_function(
                "(want) => { const e = document.querySelector("
                "'.fc-score-memory .fc-score-readout'); return e && "
                "e.textContent.trim() === want; }", arg=AFTER)
            assert readout.text_content().strip() == AFTER
            slider_value = explorer.locator(".fc-slider-tq .widget-readout")
            assert slider_value.text_content().strip() == "8,192"
            # the plot arrives after the label: wait until it is redrawn
            page.wait_for_function(
                f"(before) => ({plot_src})() !== before", arg=src_before)
            explorer.screenshot(path=str(shot))
        except Exception as exc:
            page.screenshot(path=str(ARTIFACTS / "browser_failure.png"), full_page=True)
            raise AssertionError(
                f"browser test failed: {type(exc).__name__}: {exc}\n"
                f"(screenshot: {ARTIFACTS / 'browser_failure.png'})\n"
                f"{lab.log_tail()}") from exc
    assert (ROOT / NOTEBOOK).read_bytes() == stored, f"{NOTEBOOK} was modified by the browser"
    assert shot.stat().st_size > 10_000, "the screenshot looks empty"
    print(f"browser test took {time.monotonic() - started:.1f} s; screenshot {shot}")

