"""A class on a real JupyterHub: three learners at once run notebook 01, measured.

Starts JupyterHub (pinned in requirements-dev.txt) with the committed configuration,
tools/class_hub/jupyterhub_config.py, exactly as README "For instructors" says to:
configurable-http-proxy from npm (tools/class_hub/install_proxy.py, pinned by
tools/class_hub/npm/package-lock.json, installed once under the venv), the shared-password
authenticator, SimpleLocalProcessSpawner with each learner's home in a throw-away folder
(mode 0700), everything on 127.0.0.1. Then, for three learners at the same time (threads):

  - log in through the hub's REST API (a token for the user name and password), start the
    learner's server through it and wait until the hub says it is ready;
  - open the course with the README's nbgitpuller link, as a browser would (the hub's login
    form, the link through /hub/user-redirect/, the hub's OAuth into the learner's server,
    the git-pull page, then the event stream its script reads), from a git repository made
    of this checkout's working tree (so uncommitted edits are what is tested);
  - open notebooks/01_dense_attention_and_memory.ipynb from the learner's copy, start a
    kernel for it (the sessions API, as JupyterLab does) and run every code cell through the
    kernel websocket, all three learners together; every cell must finish without error;
  - measure the kernel's peak resident memory (VmHWM in /proc/PID/status, the kernel found
    by its own PID), its CPU time, the wall time of the run, and the server's memory.

Also checked: every process of the class (hub, proxy, servers, kernels) listens on loopback
only; no token means 403; one learner's token opens no other learner's server; a cell that
raises stops the run with that cell's error (so the check above can fail); and stopping the
hub by its PID stops everything it started (each server, the proxy, every kernel), which the
fixture's finalizer also kills by PID if anything is left, whatever the test's outcome.

The measurements are printed (`pytest -s`) and written to test-artifacts/class_hub.json;
README "For instructors" quotes them. Skipped, with the reason, when npm is missing or its
registry cannot be reached; the Python packages missing is a skip too, except under
CI=true, where it fails.
"""

from __future__ import annotations

import concurrent.futures
import html
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from http.cookiejar import CookieJar
from pathlib import Path

import pytest
from helpers import TOOLS, require, wait_until_ready

ROOT = Path(__file__).resolve().parents[1]
CONFIG = TOOLS / "class_hub" / "jupyterhub_config.py"
NOTEBOOK = "notebooks/01_dense_attention_and_memory.ipynb"
LEARNERS = ("ada", "grace", "alan")
ARTIFACTS = ROOT / "test-artifacts"
HTTP_S = 30           # one HTTP request, one websocket read
HUB_START_S = 120     # the hub answering its API (the proxy started)
SPAWN_S = 240         # a learner's server ready, three starting at once on 2 busy cores
PULL_S = 120          # nbgitpuller's clone
NOTEBOOK_S = 400      # all cells of notebook 01, three kernels at once
STOP_S = 60           # the hub stopping its servers and proxy after SIGTERM
CLASS_S = 660         # all three learners, login to last cell (pytest's timeout: 900 s)

pytestmark = [pytest.mark.notebook, pytest.mark.slow, pytest.mark.timeout(900)]


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _tail(path: Path, n: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


# --- processes, from /proc ----------------------------------------------------------

def _stat(pid: int) -> tuple[int, int, float] | None:
    """(parent PID, start time in clock ticks, CPU seconds used) of `pid`, None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:                    # the process has exited
        return None
    fields = text[text.rindex(")") + 2:].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[1]), int(fields[19]), (int(fields[11]) + int(fields[12])) / ticks


def _status_mib(pid: int, key: str) -> float:
    """A `kB` line of /proc/PID/status (VmRSS, VmHWM) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(f"{key} not in /proc/{pid}/status")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
    except OSError:                    # the process has exited
        return "?"


def _descendants(root: int) -> dict[int, int]:
    """Every process below `root`: PID -> start time (to tell a reused PID apart)."""
    parent = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            st = _stat(int(entry.name))
            if st:
                parent[int(entry.name)] = st
    found, todo = {}, [root]
    while todo:
        p = todo.pop()
        for pid, (ppid, start, _) in parent.items():
            if ppid == p and pid not in found:
                found[pid] = start
                todo.append(pid)
    return found


def _alive(pid: int, start: int) -> bool:
    """Whether `pid` (started at `start`) still runs: a zombie (exited, not yet reaped by
    its parent, which may be a slow init once the hub has gone) does not."""
    st = _stat(pid)
    if st is None or st[1] != start:
        return False
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rindex(")") + 2:].split()[0] not in ("Z", "X")


def _listening(pid: int) -> list[str]:
    """The addresses `pid` listens on (TCP, IPv4 and IPv6), as 'ip:port'."""
    inodes = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:            # the descriptor closed meanwhile
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:                    # the process has exited
        return []
    found = []
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        try:
            lines = Path(f"/proc/net/{table}").read_text().splitlines()[1:]
        except OSError:                # no IPv6 on this machine
            continue
        for line in lines:
            cols = line.split()
            local, state, inode = cols[1], cols[3], cols[9]
            if state != "0A" or inode not in inodes:           # 0A: LISTEN
                continue
            hexaddr, hexport = local.split(":")
            raw = bytes.fromhex(hexaddr)
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            found.append(f"{socket.inet_ntop(family, raw)}:{int(hexport, 16)}")
    return found


def _is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address.rsplit(":", 1)[0])
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or bool(mapped and mapped.is_loopback)


# --- the hub --------------------------------------------------------------------------

class Hub:
    """A running JupyterHub: its process, URL, log, and every process it started."""

    def __init__(self, proc, port, log, state, password):
        self.proc, self.port, self.log, self.state = proc, port, log, state
        self.password = password
        self.base = f"http://127.0.0.1:{port}"
        self.tracked: dict[int, int] = {}
        self.repo: Path | None = None       # the course's git repository (nbgitpuller's repo)
        self.scratch: Path | None = None    # the throw-away folder that holds everything
        self._stop_report: list[str] | None = None

    def track(self) -> dict[int, int]:
        """Remember every process now below the hub (kernels included)."""
        if self.proc.poll() is None:
            self.tracked.update(_descendants(self.proc.pid))
        return self.tracked

    def api(self, path, token=None, method="GET", body=None):
        headers = {"Authorization": f"token {token}"} if token else {}
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers=headers)
        with urllib.request.urlopen(req, timeout=HTTP_S) as r:
            text = r.read()
        return json.loads(text) if text else None

    def log_tail(self) -> str:
        return f"--- JupyterHub log (last lines) ---\n{_tail(self.log)}"

    def stop(self) -> list[str]:
        """SIGTERM the hub by PID (it stops its servers and the proxy), wait, then
        SIGTERM and SIGKILL by PID whatever it left running. Returns what was left."""
        if self._stop_report is not None:
            return self._stop_report
        self.track()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=STOP_S)
        left = {pid: start for pid, start in self.tracked.items() if _alive(pid, start)}
        report = [f"{pid} {_cmdline(pid)}" for pid in left]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid, start in left.items():
                if _alive(pid, start):
                    os.kill(pid, sig)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and any(_alive(*p) for p in left.items()):
                time.sleep(0.2)
        self._stop_report = report
        return report


def _course_repository(scratch: Path) -> Path:
    """A git repository of this checkout's working tree, at .../flashcourse (the name the
    README's nbgitpuller link gives the learner's folder)."""
    repo = scratch / "course-source" / "flashcourse"
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], check=True,
                           capture_output=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():              # a tracked file deleted in the working tree is skipped
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, repo / name)
    git = ["git", "-C", str(repo), "-c", "user.name=course", "-c", "user.email=course@localhost"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "the course, as checked out"], check=True)
    return repo


def _proxy_dest() -> Path:
    """Where configurable-http-proxy is installed once: the venv, else test-artifacts/."""
    prefix = Path(sys.prefix)
    return (prefix if os.access(prefix, os.W_OK) else ARTIFACTS) / "class-hub-proxy"


@pytest.fixture(scope="module")
def class_hub(tmp_path_factory):
    """JupyterHub with the committed config on 127.0.0.1, state in a 0700 throw-away folder;
    stopped by PID (hub, then anything it left) when the module ends, pass or fail."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the class-hub test reads /proc (Linux)")
    for module in ("jupyterhub", "nbgitpuller", "websocket"):
        try:
            __import__(module)
        except ImportError:
            require(False, f"the {module} Python package is not installed "
                           "(pip install -r requirements-dev.txt)", "class-hub test")
    require(shutil.which("git") is not None, "git is not installed (nbgitpuller needs it)",
            "class-hub test")
    sys.path.insert(0, str(TOOLS / "class_hub"))
    try:
        import install_proxy
    finally:
        sys.path.remove(str(TOOLS / "class_hub"))
    try:
        chp = install_proxy.ensure_proxy(_proxy_dest())
    except install_proxy.ProxyUnavailable as exc:
        pytest.skip(f"JupyterHub's proxy cannot be installed from npm: {exc}")

    scratch = tmp_path_factory.mktemp("class_hub")
    scratch.chmod(0o700)
    state, hub_home = scratch / "hub", scratch / "hub-home"
    hub_home.mkdir(mode=0o700)
    repo = _course_repository(scratch)
    port, api_port, hub_port = _free_ports(3)
    password = secrets.token_urlsafe(12)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JUPYTER", "CONFIGPROXY", "CLASS_HUB", "MPLBACKEND",
                                "NUMBA_ENABLE_CUDASIM"))}
    bin_dir = Path(sys.executable).parent
    env.update(
        HOME=str(hub_home), XDG_CACHE_HOME=str(hub_home / ".cache"),
        XDG_CONFIG_HOME=str(hub_home / ".config"),
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        # the learners' kernels import this checkout's package (the venv may hold another)
        PYTHONPATH=str(ROOT),
        CLASS_HUB_PASSWORD=password, CLASS_HUB_DIR=str(state),
        CLASS_HUB_LEARNERS=",".join(LEARNERS), CLASS_HUB_PORT=str(port),
        CLASS_HUB_API_PORT=str(api_port), CLASS_HUB_HUB_PORT=str(hub_port),
        CLASS_HUB_PROXY=str(chp))
    log = scratch / "jupyterhub.log"
    cmd = [str(bin_dir / "jupyterhub"), "-f", str(CONFIG)]
    with open(log, "wb") as log_file:
        proc = subprocess.Popen(cmd, cwd=scratch, env=env, stdout=log_file,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    hub = Hub(proc, port, log, state, password)
    hub.repo, hub.scratch = repo, scratch
    try:
        wait_until_ready(proc, lambda: hub.api("/hub/api/"), "JupyterHub", HUB_START_S,
                         hub.log_tail, 0.5)
        yield hub
    finally:
        hub.stop()


# --- one learner ------------------------------------------------------------------------

class CellError(AssertionError):
    """A code cell ended with an error (its index, the exception name and message)."""


class Kernel:
    """A kernel of a learner's server, driven through its websocket (Jupyter's JSON
    messages; binary frames, only ever comm messages with buffers, are skipped)."""

    def __init__(self, hub: Hub, user: str, token: str, kernel_id: str):
        import websocket

        self.session = uuid.uuid4().hex
        url = (f"ws://127.0.0.1:{hub.port}/user/{user}/api/kernels/{kernel_id}/channels"
               f"?session_id={self.session}")
        self.ws = websocket.create_connection(url, header=[f"Authorization: token {token}"],
                                              timeout=HTTP_S)
        self.timeout_exc = websocket.WebSocketTimeoutException

    def close(self):
        self.ws.close()

    def request(self, msg_type: str, content: dict, timeout_s: float):
        """Send a shell request; return (its reply's content, the iopub messages it
        caused) once the reply and the kernel's "idle" for it have both arrived."""
        msg_id = uuid.uuid4().hex
        self.ws.send(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": msg_type, "username": "learner",
                       "session": self.session, "version": "5.3",
                       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
            "parent_header": {}, "metadata": {}, "content": content, "channel": "shell",
            "buffers": []}))
        reply, iopub, idle = None, [], False
        deadline = time.monotonic() + timeout_s
        while reply is None or not idle:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{msg_type} got no {'reply' if reply is None else 'idle'} "
                                   f"within {timeout_s:.0f} s")
            try:
                frame = self.ws.recv()
            except self.timeout_exc:   # nothing for HTTP_S seconds: look at the deadline
                continue
            if not isinstance(frame, str):
                continue
            msg = json.loads(frame)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if msg["channel"] == "shell":
                reply = msg["content"]
            elif msg["channel"] == "iopub":
                iopub.append(msg)
                idle |= (msg["msg_type"] == "status"
                         and msg["content"]["execution_state"] == "idle")
        return reply, iopub

    def wait_ready(self, timeout_s: float = 90) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.request("kernel_info_request", {}, timeout_s=10)
                return
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise

    def expression(self, expr: str):
        reply, _ = self.request("execute_request", {
            "code": "", "silent": True, "store_history": False, "allow_stdin": False,
            "user_expressions": {"x": expr}}, timeout_s=HTTP_S)
        return reply["user_expressions"]["x"]["data"]["text/plain"]

    def run_cells(self, sources: list[str], deadline: float) -> int:
        """Run each source in order, as Run All does; raise CellError at the first error.
        Returns how many ran."""
        for i, code in enumerate(sources):
            reply, iopub = self.request("execute_request", {
                "code": code, "silent": False, "store_history": True,
                "user_expressions": {}, "allow_stdin": False, "stop_on_error": True},
                timeout_s=max(1.0, deadline - time.monotonic()))
            errors = [m["content"] for m in iopub if m["msg_type"] == "error"]
            if reply["status"] != "ok" or errors:
                err = errors[0] if errors else reply
                tb = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(err.get("traceback", [])))
                raise CellError(f"code cell {i} raised {err.get('ename')}: "
                                f"{err.get('evalue')}\n{tb[-3000:]}")
        return len(sources)


def _browser(hub: Hub, user: str):
    """A cookie-keeping opener that has logged in with the hub's login form."""
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
    with opener.open(f"{hub.base}/hub/login", timeout=HTTP_S) as r:
        page = r.read().decode()
    xsrf = html.unescape(re.search(r'name="_xsrf" value="([^"]+)"', page).group(1))
    form = urllib.parse.urlencode({"username": user, "password": hub.password,
                                   "_xsrf": xsrf}).encode()
    with opener.open(f"{hub.base}/hub/login", data=form, timeout=HTTP_S) as r:
        # through the hub's OAuth into the learner's own (running) server
        assert urllib.parse.urlparse(r.url).path.startswith(f"/user/{user}/"), r.url
    return opener


def _pull_with_link(hub: Hub, user: str) -> str:
    """Follow the README's nbgitpuller link as a browser would; returns the page it ends on."""
    opener = _browser(hub, user)
    link = (f"{hub.base}/hub/user-redirect/git-pull?" + urllib.parse.urlencode({
        "repo": hub.repo.as_uri(), "branch": "main",
        "urlpath": "lab/tree/flashcourse/notebooks/00_start_here.ipynb"}))
    with opener.open(link, timeout=HTTP_S) as r:
        assert urllib.parse.urlparse(r.url).path == f"/user/{user}/git-pull", r.url
        page = r.read().decode()
    data = {k: urllib.parse.unquote(v) for k, v in re.findall(r'data-([a-z-]+)="([^"]*)"', page)}
    # what the page's script asks for (nbgitpuller's static/js: GitSync.start)
    query = {"_xsrf": data["xsrf"], "repo": data["repo"], "targetpath": data["targetpath"]}
    query.update({k: data[k] for k in ("depth", "branch", "backup") if k in data})
    assert data["targetpath"] == "flashcourse", data
    events = []
    deadline = time.monotonic() + PULL_S
    with opener.open(f"{hub.base}{data['base-url']}git-pull/api?"
                     + urllib.parse.urlencode(query), timeout=HTTP_S) as stream:
        for raw in stream:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nbgitpuller did not finish within {PULL_S} s")
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            event = json.loads(line[5:])
            events.append(event)
            if event.get("phase") == "error":
                raise AssertionError(f"nbgitpuller failed: {event.get('message')}\n"
                                     f"{event.get('output', '')[-2000:]}")
            if event.get("phase") == "finished":
                break
    assert events and events[-1].get("phase") == "finished", events
    landing = f"{hub.base}{data['base-url']}{data['path']}"
    with opener.open(landing, timeout=HTTP_S) as r:
        assert r.status == 200
    return data["path"]


def _learner(hub: Hub, user: str, start_together: threading.Barrier) -> dict:
    """One learner's lesson, from logging in to the notebook's last cell, timed."""
    t0 = time.monotonic()
    token = hub.api(f"/hub/api/users/{user}/tokens", method="POST", body={
        "auth": {"username": user, "password": hub.password}, "note": "class-hub test",
        "expires_in": 3600})["token"]
    login_s = time.monotonic() - t0

    t0 = time.monotonic()
    hub.api(f"/hub/api/users/{user}/server", token=token, method="POST")
    deadline = time.monotonic() + SPAWN_S
    while not (hub.api(f"/hub/api/users/{user}", token=token)["servers"]
               .get("", {}).get("ready")):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{user}'s server not ready after {SPAWN_S} s")
        time.sleep(0.5)
    spawn_s = time.monotonic() - t0

    t0 = time.monotonic()
    landing = _pull_with_link(hub, user)
    pull_s = time.monotonic() - t0

    server = f"/user/{user}/api"
    nb = hub.api(f"{server}/contents/flashcourse/{NOTEBOOK}?content=1", token=token)["content"]
    here = json.loads((ROOT / NOTEBOOK).read_text())
    sources = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
               for c in nb["cells"] if c["cell_type"] == "code"]
    assert sources == ["".join(c["source"]) for c in here["cells"]
                       if c["cell_type"] == "code"], "the learner's copy is not this checkout's"
    sources = [s for s in sources if s.strip()]
    session = hub.api(f"{server}/sessions", token=token, method="POST", body={
        "path": f"flashcourse/{NOTEBOOK}", "type": "notebook", "name": "",
        "kernel": {"name": "python3"}})
    kernel = Kernel(hub, user, token, session["kernel"]["id"])
    try:
        kernel.wait_ready()
        pid = int(kernel.expression("__import__('os').getpid()"))
        cwd = kernel.expression("__import__('os').getcwd()").strip("'\"")
        start_together.wait(timeout=SPAWN_S + PULL_S)
        started = time.monotonic()
        cells = kernel.run_cells(sources, deadline=started + NOTEBOOK_S)
        finished = time.monotonic()
        hub.track()
        kernel_peak = _status_mib(pid, "VmHWM")
        kernel_cpu = _stat(pid)[2]
        server_pid = _stat(pid)[0]
        result = dict(
            learner=user, login_s=login_s, spawn_s=spawn_s, pull_s=pull_s,
            cells=cells, run_s=finished - started, started=started, finished=finished,
            kernel_pid=pid, kernel_peak_mib=kernel_peak, kernel_cpu_s=kernel_cpu,
            kernel_cwd=cwd, server_pid=server_pid,
            server_rss_mib=_status_mib(server_pid, "VmRSS"),
            server_peak_mib=_status_mib(server_pid, "VmHWM"), landing=landing)
        # the check above can fail: an error stops the run at its cell
        try:
            kernel.run_cells(["x = 1", "1 / 0", "never = 1"], deadline=time.monotonic() + 60)
            result["error_caught"] = None
        except CellError as exc:
            result["error_caught"] = str(exc)
        result["never_ran"] = kernel.expression("'never' in globals()")
    finally:
        kernel.close()
    result["token"] = token
    return result


def _status(url: str, token: str | None = None) -> int:
    req = urllib.request.Request(url, headers={"Authorization": f"token {token}"} if token
                                 else {})
    try:
        with urllib.request.urlopen(req, timeout=HTTP_S) as r:
            return r.status
    except urllib.error.HTTPError as err:
        return err.code


def _print_table(rows: list[dict], extra: dict) -> None:
    print(f"\n{'learner':8s} {'login s':>7s} {'spawn s':>7s} {'pull s':>6s} {'cells':>5s} "
          f"{'run s':>6s} {'kernel CPU s':>12s} {'kernel peak MiB':>15s} {'server MiB':>10s}")
    for r in rows:
        print(f"{r['learner']:8s} {r['login_s']:7.1f} {r['spawn_s']:7.1f} {r['pull_s']:6.1f} "
              f"{r['cells']:5d} {r['run_s']:6.1f} {r['kernel_cpu_s']:12.1f} "
              f"{r['kernel_peak_mib']:15.0f} {r['server_rss_mib']:10.0f}")
    print(", ".join(f"{k} {v:.0f}" if isinstance(v, float) else f"{k} {v}"
                    for k, v in extra.items()))


def test_three_learners_run_notebook_01_on_jupyterhub(class_hub):
    hub = class_hub
    began = time.monotonic()
    barrier = threading.Barrier(len(LEARNERS))
    rows, failures = [], []
    pool = concurrent.futures.ThreadPoolExecutor(len(LEARNERS))
    try:
        futures = {pool.submit(_learner, hub, user, barrier): user for user in LEARNERS}
        for future in concurrent.futures.as_completed(futures, timeout=CLASS_S):
            try:
                rows.append(future.result())
            except Exception as exc:  # noqa: BLE001 - every learner's failure is reported
                barrier.abort()        # the others stop waiting for this one
                failures.append(f"{futures[future]}: {type(exc).__name__}: {exc}")
    except concurrent.futures.TimeoutError:
        barrier.abort()
        hub.stop()
        pytest.fail(f"the learners did not finish within {CLASS_S} s (done: "
                    f"{[r['learner'] for r in rows]}, failed: {failures})\n{hub.log_tail()}")
    except BaseException:
        # interrupted (pytest's timeout): stop the class now, so that the learners' threads,
        # waiting on its sockets, end at once instead of at their own deadlines
        barrier.abort()
        hub.stop()
        raise
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    hub.track()
    real = [f for f in failures if "BrokenBarrierError" not in f] or failures
    assert not failures, "\n".join(real) + "\n" + hub.log_tail()
    rows.sort(key=lambda r: LEARNERS.index(r["learner"]))

    # each learner: their own server (a child of the hub) and kernel (a child of that server),
    # working in their own pulled copy of the course
    hub_pid = hub.proc.pid
    homes = hub.state / "home"
    for r in rows:
        assert _stat(r["server_pid"])[0] == hub_pid, r
        assert r["kernel_cwd"] == str(homes / r["learner"] / "flashcourse" / "notebooks"), r
        assert r["landing"] == "lab/tree/flashcourse/notebooks/00_start_here.ipynb", r
        assert r["error_caught"] and "code cell 1 raised ZeroDivisionError" in r[
            "error_caught"], f"a failing cell was not reported: {r['error_caught']}"
        assert r["never_ran"] == "False", "cells after a failing one ran"
    assert len({r["server_pid"] for r in rows}) == len({r["kernel_pid"] for r in rows}) == 3
    # only the hub's user can read the class's folders (state, tokens, the learners' work)
    for folder in [hub.scratch, hub.state, homes] + [homes / user for user in LEARNERS]:
        assert folder.stat().st_mode & 0o077 == 0, f"{folder} is open to others"
    # the three notebooks ran at the same time
    assert max(r["started"] for r in rows) < min(r["finished"] for r in rows)

    # loopback only: the hub, the proxy, each server and each kernel
    wide = {f"{pid} {_cmdline(pid)[:60]}": [a for a in _listening(pid) if not _is_loopback(a)]
            for pid in hub.track() | {hub_pid: 0}}
    assert not any(wide.values()), {k: v for k, v in wide.items() if v}
    assert any(_listening(pid) for pid in hub.tracked), "no listening socket found in /proc"
    # authentication on: no token, or another learner's token, opens no learner's server
    for i, r in enumerate(rows):
        other = rows[(i + 1) % len(rows)]
        url = f"{hub.base}/user/{r['learner']}/api/contents/flashcourse"
        assert _status(url) == 403
        assert _status(url, other["token"]) == 403
        assert _status(url, r["token"]) == 200

    # the learners stop their servers; then the hub is stopped by PID and leaves nothing
    for r in rows:
        hub.api(f"/hub/api/users/{r['learner']}/server", token=r["token"], method="DELETE")
    deadline = time.monotonic() + STOP_S
    while any(_stat(r["server_pid"]) for r in rows) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not [r["learner"] for r in rows if _stat(r["server_pid"])], "servers still running"
    # a server shuts its kernels down as it stops, but a kernel may exit a moment after its
    # server: wait for them too (bounded), so that what the hub's stop finds is a real leak
    kernels = {pid: st for pid, st in hub.tracked.items() if "ipykernel" in _cmdline(pid)}
    while any(_alive(*p) for p in kernels.items()) and time.monotonic() < deadline + STOP_S:
        time.sleep(0.5)
    assert not [pid for pid, st in kernels.items() if _alive(pid, st)], \
        f"kernels still running {STOP_S} s after their servers stopped"
    proxy_pid = int((hub.state / "jupyterhub-proxy.pid").read_text())
    assert proxy_pid in hub.tracked
    extra = {"hub MiB": _status_mib(hub_pid, "VmRSS"),
             "proxy MiB": _status_mib(proxy_pid, "VmRSS")}
    left = hub.stop()
    assert not left, f"stopping the hub left these running (killed by PID): {left}"
    assert not _stat(proxy_pid), "the proxy is still running"

    extra["test s"] = time.monotonic() - began
    _print_table(rows, extra)
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "class_hub.json").write_text(json.dumps({
        "measured": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(),
        "notebook": NOTEBOOK, "extra": extra,
        "learners": [{k: v for k, v in r.items() if k not in ("token", "error_caught")}
                     for r in rows]}, indent=1) + "\n")
