"""The widgets respond in a real browser: JupyterLab driven by headless Chromium.

Starts JupyterLab on 127.0.0.1 (a free port, a random token) with every Jupyter,
IPython, matplotlib and settings folder pointed into a throw-away directory (nothing
is written to the user's home; the "Jupyter news" toast is switched off by a settings
override), opens notebooks/01_dense_attention_and_memory.ipynb (the score-memory
explorer's home since notebook 04 refers to it) in Debian's /usr/bin/chromium
through Playwright (never `playwright install`), runs all cells, waits for the
score-memory explorer, presses ArrowRight on its Tq slider handle and asserts that
the readout changes from exactly

    M_score per head: 33,554,432 B = 32 MiB       (4,096 x 4,096 x 2 B)
to  M_score per head: 134,217,728 B = 128 MiB     (8,192 x 8,192 x 2 B)

A screenshot is saved under test-artifacts/ (git-ignored). The server is stopped by
its process group in a `finally` block. Without /usr/bin/chromium the test is skipped
with the reason, except under CI=true, where it fails (FLASHCOURSE_CHROMIUM=PATH points
the test at another Chromium binary).
"""

from __future__ import annotations

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

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "notebooks/01_dense_attention_and_memory.ipynb"
CHROMIUM = Path(os.environ.get("FLASHCOURSE_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync",
                 "--disable-dev-shm-usage"]
ARTIFACTS = ROOT / "test-artifacts"
BEFORE = "M_score per head: 33,554,432 B = 32 MiB"           # 4096 * 4096 * 2
AFTER = "M_score per head: 134,217,728 B = 128 MiB"          # 8192 * 8192 * 2
TIMEOUT_MS = 90_000

pytestmark = pytest.mark.browser


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
        "@jupyterlab/docmanager-extension:plugin": {"autosave": False}}))
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
           "--ServerApp.port_retries=0", "--LabApp.news_url=None"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    log = scratch / "jupyterlab.log"
    with open(log, "wb") as log_file:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log_file,
                                stderr=subprocess.STDOUT, start_new_session=True)
    lab = Lab(proc, port, token, log)
    try:
        deadline = time.monotonic() + startup_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with code {proc.returncode} "
                                   f"before it was ready\n{lab.log_tail()}")
            try:
                lab.api("/api/status")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"JupyterLab not ready after {startup_s} s\n"
                                       f"{lab.log_tail()}") from None
                time.sleep(0.25)
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


@contextmanager
def chromium_page(width: int = 1400, height: int = 1000):
    """A headless Chromium page (Debian's binary, driven by Playwright)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                    args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.set_default_timeout(TIMEOUT_MS)
            yield page
        finally:
            browser.close()


def open_and_run_all(page, lab: Lab, notebook: str = NOTEBOOK) -> None:
    """Open `notebook`, wait for an idle kernel, and run all cells from the Run menu."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page.goto(lab.url(notebook))
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell")
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']")
    # the kernel is connected and idle (status bar: "Python 3 (ipykernel) | Idle")
    page.locator(".jp-StatusBar-TextItem", has_text="| Idle").first.wait_for()
    page.locator(".lm-MenuBar-item", has_text="Run").first.click()
    item = page.locator(".lm-Menu-item[data-command='runmenu:run-all']")
    item.wait_for()
    page.wait_for_function(
        "() => { const e = document.querySelector(\".lm-Menu-item[data-command="
        "'runmenu:run-all']\"); return e && !e.classList.contains('lm-mod-disabled'); }")
    item.click()
    # If the session lost its kernel, JupyterLab asks which one to start: take the default.
    dialog = page.locator(".jp-Dialog .jp-Dialog-button.jp-mod-accept")
    try:
        dialog.wait_for(timeout=1500)
        dialog.click()
    except PlaywrightTimeout:
        pass


def test_score_memory_slider_moves_the_readout(tmp_path):
    _require(CHROMIUM.exists(), f"Debian's chromium is not installed at {CHROMIUM} "
             "(apt-get install chromium); the real-browser widget test is skipped")
    try:
        import playwright  # noqa: F401
    except ImportError:
        _require(False, "the playwright Python package is not installed "
                        "(pip install -r requirements-dev.txt)")
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "browser_failure.png").unlink(missing_ok=True)     # from an earlier run
    shot = ARTIFACTS / "browser_score_memory.png"
    stored = (ROOT / NOTEBOOK).read_bytes()
    started = time.monotonic()
    with jupyter_lab(ROOT, tmp_path) as lab:
        with chromium_page() as page:
            try:
                open_and_run_all(page, lab)
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

