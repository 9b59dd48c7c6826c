"""Tooling that must not fail silently (issue 14, item 9): the Makefile's Python check,
`make lab` on a taken port, and pytest-timeout."""

import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAKE = shutil.which("make")
needs_make = pytest.mark.skipif(MAKE is None, reason="make is not installed")


def make(*args, env=None):
    return subprocess.run([MAKE, "-s", "-C", str(ROOT), *args], capture_output=True,
                          text=True, timeout=60, env=env)


def old_python(tmp_path) -> Path:
    """An executable that runs this Python but reports version 3.9."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sys\nsys.version_info = (3, 9, 18, 'final', 0)\n")
    fake = tmp_path / "venv" / "bin" / "python"
    fake.parent.mkdir(parents=True)
    fake.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} \"$@\"\n")
    fake.chmod(0o755)
    return fake


@needs_make
def test_python_check_refuses_an_old_python_even_with_optimisation(tmp_path):
    fake = old_python(tmp_path)
    env = dict(os.environ, PYTHONOPTIMIZE="2")       # would strip an `assert`
    r = make("check-python", f"PYTHON={fake}", f"VENV={tmp_path / 'none'}", env=env)
    assert r.returncode != 0 and "Python 3.10 or newer is needed, found 3.9" in r.stderr


@needs_make
def test_python_check_runs_when_the_venv_exists(tmp_path):
    """A .venv made by an older Python is caught although $(PYTHON) itself is new."""
    fake = old_python(tmp_path)
    r = make("check-python", f"PYTHON={sys.executable}", f"VENV={fake.parent.parent}")
    assert r.returncode != 0 and "found 3.9" in r.stderr
    ok = make("check-python", f"PYTHON={sys.executable}", f"VENV={tmp_path / 'none'}")
    assert ok.returncode == 0, ok.stderr
    for target in ("lab", "test", "setup", "setup-dev"):      # each runs the check first
        dry = make("-n", target, f"PYTHON={sys.executable}", f"VENV={fake.parent.parent}")
        assert f"{fake} -c 'import sys; v = sys.version_info" in dry.stdout.splitlines()[0]


@needs_make
def test_make_lab_stops_with_a_message_when_the_port_is_taken():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = make("port-free", f"PORT={port}", f"PYTHON={sys.executable}")
        assert r.returncode != 0
        assert f"Port {port} on 127.0.0.1 is already in use" in r.stderr
        assert f"make lab PORT={port + 1}" in r.stderr
    assert make("port-free", f"PORT={port}", f"PYTHON={sys.executable}").returncode == 0
    lab = (ROOT / "Makefile").read_text().split("\nlab:")[1].split("\n\n")[0]
    assert "port-free" in lab.splitlines()[0] and "--ServerApp.port_retries=0" in lab


def test_pytest_timeout_is_configured(request):
    assert float(request.config.getini("timeout")) >= 60
    slow = [item for item in request.session.items
            if item.get_closest_marker("notebook") or item.get_closest_marker("browser")]
    for item in slow:
        assert item.get_closest_marker("timeout").args[0] >= 900, item.nodeid


def test_a_hung_test_fails_instead_of_hanging(tmp_path):
    (tmp_path / "test_hang.py").write_text(textwrap.dedent("""
        import time
        def test_hang():
            time.sleep(120)
    """))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-p", "no:xdist", "-o", "timeout=2", "test_hang.py"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "Timeout" in r.stdout + r.stderr


GROUPED_TESTS = """
import os
import pytest


def _ran(name):
    with open(name + ".ran", "w") as out:
        out.write(os.environ["PYTEST_XDIST_WORKER"])


@pytest.mark.xdist_group("together")
def test_first(request):
    _ran("first")
    assert request.node.nodeid.endswith("@together")


@pytest.mark.xdist_group("together")
def test_second():
    _ran("second")


@pytest.mark.parametrize("i", range(4))
def test_alone(i):
    pass
"""


def test_loadgroup_runs_a_group_on_one_worker(tmp_path):
    """make test's `--dist loadgroup` keeps the tests of one xdist group on one worker (the
    browser tests share JupyterLab pages so): with the group suffix lost (pytest 9.2,
    tests/xdist_groups.py) the two grouped tests, first in the queue, go one to each."""
    (tmp_path / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / 'tests')!r})\n"
        "import xdist_groups\n\n\ndef pytest_collection_modifyitems(config, items):\n"
        "    xdist_groups.name_groups(config, items)\n")
    (tmp_path / "test_grouped.py").write_text(GROUPED_TESTS)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-n", "2", "--dist", "loadgroup", "test_grouped.py"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    workers = {(tmp_path / f"{name}.ran").read_text() for name in ("first", "second")}
    assert len(workers) == 1, f"one group ran on {sorted(workers)}"
