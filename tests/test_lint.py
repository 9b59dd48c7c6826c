"""The code, tests, tools, benchmarks and notebooks pass ruff (rules in pyproject.toml)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_is_clean():
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed (it comes with requirements-dev.txt)")
    r = subprocess.run([ruff, "check", "--no-cache", "."], cwd=ROOT, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
