"""The course in a real browser: JupyterLab driven by headless Chromium (the machinery the
browser tests share; the tests are in test_notebooks.py, test_browser_widgets.py and
test_browser_quiz.py).

Starts JupyterLab on 127.0.0.1 (a free port, a random token) with every Jupyter,
IPython, matplotlib and settings folder pointed into a throw-away directory (nothing
is written to the user's home or the repository: checkpoints go there too; the
"Jupyter news" toast, autosave and notebook windowing are switched off by a settings
override), and drives Debian's /usr/bin/chromium through Playwright (never
`playwright install`). One server for the repository and one browser per test run and
xdist worker (the `lab` and `browser` fixtures of tests/conftest.py); its kernels choose
GPU or simulator themselves, as a learner's do, and measure every figure they show
(flashcourse.plots.style.AUDIT_ENV).

check_course_page, the browser's part of every notebook's and lab's test
(tests/test_notebooks.py::test_runs_top_to_bottom, for everything found on disk):
  - open it, Run All from the Run menu, wait until every non-empty code cell has run;
  - the notebook as JupyterLab holds it, outputs included (window.jupyterapp), goes back
    to the notebook test for its output checks;
  - no error output (a traceback, or an "...Error:" line) and no
    "Error displaying widget" anywhere on the page;
  - no figure shown shrunk at a FIGURE_WINDOW_PX window;
  - every displayed widget with a control: move one control (a slider one step by
    keyboard, another dropdown option, a radio choice plus its Check button, a
    toggle, a checkbox or a number box) and check that the rest of the widget (its
    text, its plot image) changes within WIDGET_WAIT_MS;
  - the notebook file on disk is unchanged.
A page whose notebook passed keeps JupyterLab loaded, and the next notebook of the same
server opens in it (notebook_page; loading JupyterLab costs ~4 s of the 2 cores).
Each notebook runs once per test run: the explorers' tests (tests/test_browser_widgets.py)
run the notebooks they look at (EXPLORER_NOTEBOOKS) first and keep the page, and the
notebook's own test then checks that page (notebook_page, keep).

Screenshots go under test-artifacts/ (git-ignored). Servers are stopped by process
group in a `finally` block. Without /usr/bin/chromium the tests are skipped with the
reason, except under CI=true, where they fail (FLASHCOURSE_CHROMIUM=PATH points the
tests at another Chromium binary); the notebook test then runs notebooks with nbclient.
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

from helpers import require, wait_until_ready
from site_check import CHROMIUM, chromium_context  # noqa: F401  (the `browser` fixture's)

from flashcourse.plots.style import AUDIT_ENV

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
TIMEOUT_MS = 90_000
#: Run All of one notebook: a guard against a hung run, not a speed check (the slowest
#: notebooks, the GPT training and the CUDA simulator ones, take ~40-90 s on 2 cores)
RUN_ALL_MS = 600_000
#: How long a widget may take to redraw after a control moved.
WIDGET_WAIT_MS = 30_000
PAGES = sorted(ROOT.glob("notebooks/*.ipynb")) + sorted(ROOT.glob("labs/*.ipynb")) \
    + sorted(ROOT.glob("labs/solutions/*.ipynb"))
#: The notebooks the explorers' tests (tests/test_browser_widgets.py) run in the browser
#: and keep open for the notebook's own test.
EXPLORER_NOTEBOOKS = ("notebooks/01_dense_attention_and_memory.ipynb",
                      "notebooks/04_io_traffic_model.ipynb",
                      "notebooks/09_backward_recompute.ipynb")

#: The browser tests in two xdist groups (make test: --dist loadgroup), each run by one
#: worker with its own JupyterLab and Chromium: in one group they kept one worker busy
#: longer than the rest of the suite on the other. At most two JupyterLabs run at a time
#: on the 2 cores, no more load than one beside a simulator test. The explorers' tests and
#: their notebooks (which share pages), and the quiz test, are in the second group; the
#: other pages alternate (in PAGES order) between the groups, the first group first.
BROWSER_GROUPS = ("browser", "browser-2")


def browser_group(notebook: str) -> str:
    """The xdist group of the test of `notebook` (a path relative to the repository)."""
    if notebook in EXPLORER_NOTEBOOKS:
        return BROWSER_GROUPS[1]
    others = [str(p.relative_to(ROOT)) for p in PAGES
              if str(p.relative_to(ROOT)) not in EXPLORER_NOTEBOOKS]
    return BROWSER_GROUPS[others.index(notebook) % 2]


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

    def __init__(self, proc, port, token, log, audit=None):
        self.proc, self.port, self.token, self.log = proc, port, token, log
        self.audit = audit        # the kernels' figure measurements (AUDIT_ENV), or None
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


def write_one_cell_notebook(path: Path, source: str) -> None:
    """A notebook file at `path` with one code cell holding `source` (its id: the file's
    stem) and a python3 kernelspec, for a scratch JupyterLab (`jupyter_lab`)."""
    path.write_text(json.dumps({
        "cells": [{"cell_type": "code", "execution_count": None, "id": path.stem,
                   "metadata": {}, "outputs": [], "source": source}],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                    "name": "python3"}},
        "nbformat": 4, "nbformat_minor": 5}))


@contextmanager
def jupyter_lab(root: Path, scratch: Path, startup_s: float = 60, audit: Path | None = None):
    """Start JupyterLab for `root` with all state under `scratch`; stop it on exit. With
    `audit`, every kernel measures the figures it shows into that file (AUDIT_ENV)."""
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
    # the kernel chooses GPU or simulator itself, as a learner's kernel does: it must not
    # inherit the choice that conftest made for the test process
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    env.pop(AUDIT_ENV, None)
    if audit is not None:
        env[AUDIT_ENV] = str(audit)
    env.pop("JUPYTER_TOKEN", None)
    port, token = _free_port(), secrets.token_hex(16)
    cmd = [str(jupyter), "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
           f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
           f"--LabApp.app_settings_dir={dirs['lab-settings']}",
           "--ServerApp.port_retries=0", "--LabApp.news_url=None",
           # window.jupyterapp: the tests read the notebook's outputs from its model
           "--LabApp.expose_app_in_browser=True",
           # checkpoints (written when a notebook is opened) go to the scratch folder,
           # never into the repository (.ipynb_checkpoints/ would be read as notebooks)
           f"--FileCheckpoints.checkpoint_dir={scratch / 'checkpoints'}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    log = scratch / "jupyterlab.log"
    with open(log, "wb") as log_file:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log_file,
                                stderr=subprocess.STDOUT, start_new_session=True)
    lab = Lab(proc, port, token, log, audit)
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


#: Open `path` in the JupyterLab already loaded in the page (as a notebook, with the kernel
#: its metadata names, as opening its URL does)
OPEN_JS = """
async (path) => {
  await window.jupyterapp.commands.execute('docmanager:open', {path, factory: 'Notebook'});
  return true;
}
"""
#: Whether the notebook `path` has a kernel that is connected and idle
KERNEL_READY_JS = """
(path) => {
  const app = window.jupyterapp;
  const panel = app && Array.from(app.shell.widgets('main'))
    .find(w => w.context && w.context.path === path);
  const kernel = panel && panel.sessionContext.session && panel.sessionContext.session.kernel;
  return !!(kernel && kernel.status === 'idle' && kernel.connectionStatus === 'connected');
}
"""
#: Close everything in the main area without saving (autosave is off: the outputs are
#: never written back) and say whether nothing is left open
CLOSE_ALL_JS = """
() => {
  const app = window.jupyterapp;
  if (!app) return false;
  for (const w of Array.from(app.shell.widgets('main'))) {
    if (w.context) w.context.model.dirty = false;
    w.dispose();
  }
  return Array.from(app.shell.widgets('main')).length === 0
    && !document.querySelector('.jp-NotebookPanel');
}
"""


def open_and_run_all(page, lab: Lab, notebook: str) -> None:
    """Open `notebook` (in the JupyterLab the page has loaded already, if notebook_page
    gave a page that ran another notebook, else by its URL), wait for an idle kernel,
    run all cells from the Run menu, and wait until the run has started (answering the
    kernel dialog if one comes first)."""
    if _BOOTED.get(id(page)) == lab.base:
        page.evaluate(OPEN_JS, notebook)
    else:
        page.goto(lab.url(notebook))
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell")
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']")
    # the kernel is connected and idle (status bar: "Python 3 (ipykernel) | Idle")
    page.locator(".jp-StatusBar-TextItem", has_text="| Idle").first.wait_for()
    page.wait_for_function(KERNEL_READY_JS, arg=notebook, polling=POLL_MS)
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


def browser_missing() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    if not CHROMIUM.exists():
        return (f"Debian's chromium is not installed at {CHROMIUM} (apt-get install "
                "chromium); the real-browser tests are skipped")
    try:
        import playwright  # noqa: F401
    except ImportError:
        return ("the playwright Python package is not installed "
                "(pip install -r requirements-dev.txt)")
    return None


def require_browser() -> None:
    """Skip (or fail under CI=true) where the browser tests cannot run."""
    reason = browser_missing()
    require(reason is None, reason or "", "browser test")


@contextmanager
def course_lab(scratch: Path):
    """JupyterLab serving the repository, its kernels' figures measured into
    scratch/figures.jsonl (one line per figure, naming the notebook): the `lab` fixture
    (tests/conftest.py), one per test run and xdist worker."""
    with jupyter_lab(ROOT, scratch, audit=scratch / "figures.jsonl") as server:
        yield server


#: Course pages left open, after Run All, for the next test of the same notebook (per
#: worker): notebook -> page. The explorers' tests (tests/test_browser_widgets.py) keep
#: theirs, and the notebook's own test (tests/test_notebooks.py) then checks that page
#: instead of running the notebook a second time.
_KEPT: dict = {}
#: id() of the open pages whose notebook has run (Run All finished)
_RAN: set = set()
#: Pages with JupyterLab loaded and nothing open, per server (Lab.base), for the next
#: notebook: loading JupyterLab in a page took ~4 s of the 2 cores (measured 2026-12-07),
#: opening a notebook in it takes what the kernel's start takes
_IDLE: dict = {}
#: id() of a page -> the server (Lab.base) whose JupyterLab it has loaded
_BOOTED: dict = {}


@contextmanager
def notebook_page(browser, lab: Lab, notebook: str, width: int = 1400, height: int = 1000,
                  keep: bool = False):
    """A page of the `browser` context for `notebook` at width x height: the page an earlier
    test kept for it (as that test left it: widgets moved, notebook run), else a fresh one.
    On exit the page is kept for the next test of the notebook if `keep` and the block
    raised nothing; otherwise it is closed and its kernel shut down (the session deleted)."""
    page = _KEPT.pop(notebook, None)
    if page is None:
        idle = _IDLE.get(lab.base, [])
        page = idle.pop() if idle else browser.new_page()
        page.set_default_timeout(TIMEOUT_MS)
    page.set_viewport_size({"width": width, "height": height})
    kept, ok = False, False
    try:
        yield page
        kept, ok = keep, True
    finally:
        if kept:
            _KEPT[notebook] = page
        else:
            _RAN.discard(id(page))
            reuse = ok and _close_all(page)
            try:
                for session in lab.api("/api/sessions") or []:
                    if session.get("path") == notebook:
                        lab.api(f"/api/sessions/{session['id']}", method="DELETE")
            except Exception:  # noqa: BLE001 - best effort: the server stops at the end
                pass
            if reuse:                 # JupyterLab stays loaded, with nothing open
                _BOOTED[id(page)] = lab.base
                _IDLE.setdefault(lab.base, []).append(page)
            else:                     # a test that failed: its page goes
                _BOOTED.pop(id(page), None)
                page.close()


def _close_all(page) -> bool:
    """Close every document of the page's JupyterLab (unsaved); True if it has one loaded
    and nothing is open now."""
    try:
        return bool(page.evaluate(CLOSE_ALL_JS))
    except Exception:  # noqa: BLE001 - a page in a bad state is closed instead
        return False


def page_ran(page) -> bool:
    """Whether `page` (from notebook_page) has already run its notebook to the end."""
    return id(page) in _RAN


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
    an error stopped the run). Returns the final run state. A page that has run its
    notebook already (kept by an earlier test: notebook_page) is not run again: its
    state now is returned."""
    if page_ran(page):
        return page.evaluate("window.fcRunState()")
    open_and_run_all(page, lab, notebook)
    page.wait_for_function(FINISHED_JS, timeout=RUN_ALL_MS, polling=POLL_MS)
    while _accept_kernel_dialog(page):
        page.wait_for_function(FINISHED_JS, timeout=RUN_ALL_MS, polling=POLL_MS)
    page.locator(".jp-StatusBar-TextItem", has_text="| Idle").first.wait_for()
    _RAN.add(id(page))
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


#: the notebook's model as JupyterLab holds it (nbformat JSON, outputs included: the same
#: document nbclient would return), read through window.jupyterapp
NOTEBOOK_JSON_JS = """
(path) => {
  const app = window.jupyterapp;
  if (!app) return null;
  const panel = Array.from(app.shell.widgets('main'))
    .find(w => w.context && w.context.path === path);
  return panel ? panel.context.model.toJSON() : null;
}
"""


def check_course_page(page, lab: Lab, path: Path) -> dict:
    """The browser's part of a notebook's test (tests/test_notebooks.py runs it, once per
    notebook and lab): Run All in JupyterLab (or the page an earlier test ran and kept),
    then no error output, every code cell ran, no figure shown shrunk at a
    FIGURE_WINDOW_PX window, one control of every widget moved and its readout changed,
    no error after that, and the notebook file on disk unchanged. Returns the notebook
    as JupyterLab holds it after Run All (nbformat JSON with its outputs), for the
    output checks, taken before any widget moves."""
    notebook = str(path.relative_to(ROOT))
    stored = path.read_bytes()
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / f"browser_{path.stem}.png"
    started = time.monotonic()
    reused = page_ran(page)
    try:
        state = run_all_and_wait(page, lab, notebook)
        ran_s = time.monotonic() - started
        executed = page.evaluate(NOTEBOOK_JSON_JS, notebook)
        assert executed is not None, "JupyterLab's notebook model was not found"
        errors = page.evaluate("window.fcErrors()")
        assert not errors, "error output after Run All:\n" + "\n".join(errors)
        assert state["todo"] == 0, f"code cell {state['firstTodo']} never ran: {state}"
        save_figure_shots(page, path.stem)
        shrunk = page.evaluate("(least) => window.fcShrunkImages(least)", FIGURE_LEAST_SHARE)
        assert not shrunk, (f"figures shrunk at a {FIGURE_WINDOW_PX} px window (their "
                            "text gets small):\n" + "\n".join(shrunk))
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
    ran = "run by an earlier test, page reused" if reused else f"ran in {ran_s:.1f} s"
    print(f"{notebook}: {state['done']} cells {ran}; {len(moved)} widgets moved "
          f"({'; '.join(moved)}); {time.monotonic() - started:.1f} s in all")
    return executed
