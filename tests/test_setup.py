"""The learner's set-up: pins, security of `make lab`, and that it really serves the course."""

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_numpy_pinned_for_numba_cuda():
    req = (ROOT / "requirements.txt").read_text()
    assert re.search(r"^numpy==2\.4\.\d+ ; python_version >= \"3.11\"", req, re.M)
    for name in ("matplotlib", "jupyterlab", "ipywidgets", "numba", "numba-cuda"):
        assert re.search(rf"^{name}==\S+", req, re.M), f"{name} is not pinned"
    assert re.search(r"^-e \.$", req, re.M), "requirements.txt must install the package"
    assert "numba-cuda[cu1" in (ROOT / "requirements-gpu.txt").read_text()


def test_no_command_disables_the_token_or_binds_everywhere():
    bad = re.compile(r"(token\s*=\s*['\"]{2}|--ip=0\.0\.0\.0|--ip=\*|disable_check_xsrf|"
                     r"IdentityProvider\.token=''|--NotebookApp\.token=)")
    files = [ROOT / "Makefile", ROOT / ".ci" / "run", ROOT / "README.md"]
    files += list((ROOT / "tests").glob("*.py")) + list((ROOT / "flashcourse").rglob("*.py"))
    for f in files:
        if f.exists() and f.name != "test_setup.py":
            assert not bad.search(f.read_text()), f"{f} disables the token or binds widely"
    make = (ROOT / "Makefile").read_text()
    assert "--ip=127.0.0.1" in make


def test_readme_says_what_make_lab_serves_and_opens():
    """README said `make lab` starts JupyterLab "on notebooks/"; it serves the repository
    root and opens notebook 00. The README's words are checked against the Makefile."""
    make = (ROOT / "Makefile").read_text()
    recipe = make.split("\nlab:", 1)[1].split("\n\n", 1)[0]
    root = re.search(r"--ServerApp\.root_dir=\"?([^\s\"]+)", recipe).group(1)
    start = re.search(r"--LabApp\.default_url=/lab/tree/(\S+)", recipe).group(1)
    assert root == "$(CURDIR)" and (ROOT / start).exists(), (root, start)
    readme = (ROOT / "README.md").read_text()
    assert "on notebooks/" not in readme
    line = next(x for x in readme.splitlines() if x.startswith("make lab "))
    assert "notebook 00" in line, line
    assert "`make lab` serves the repository root" in readme
    assert f"http://127.0.0.1:8888/lab/tree/{start}?token=" in readme


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=2.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read()


@pytest.mark.slow
def test_make_lab_serves_the_notebooks_with_a_token(tmp_path):
    port, token = free_port(), secrets.token_hex(16)
    env = dict(os.environ, HOME=str(tmp_path), JUPYTER_TOKEN=token,
               JUPYTER_CONFIG_DIR=str(tmp_path / "cfg"), JUPYTER_DATA_DIR=str(tmp_path / "data"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "rt"), PYTHON=sys.executable)
    proc = subprocess.Popen(["make", "-s", "lab", f"PORT={port}"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:
            try:
                status, _ = get(f"{base}/api/status?token={token}")
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                if proc.poll() is not None or time.time() > deadline:
                    out = proc.stdout.read().decode(errors="replace") if proc.poll() else ""
                    pytest.fail(f"make lab did not start serving: {out[-2000:]}")
                time.sleep(0.5)
        assert status == 200
        # without the token the API refuses
        with pytest.raises(urllib.error.HTTPError) as err:
            get(f"{base}/api/contents/notebooks")
        assert err.value.code == 403
        status, body = get(f"{base}/api/contents/notebooks?token={token}")
        names = {item["name"] for item in json.loads(body)["content"]}
        assert "00_start_here.ipynb" in names
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
