"""Notebook 16 runs top to bottom without PyTorch (the course's laptop path has none): its
last section says so in a sentence instead of starting processes.

PyTorch is hidden from the notebook's kernel by a `sitecustomize` module on its PYTHONPATH
whose import finder refuses `torch`, as a Python without it would."""

import os
from pathlib import Path

import pytest

from test_notebooks import check_outputs, execute

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "16_context_parallelism.ipynb"
NO_TORCH = '''
import sys


class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None


sys.meta_path.insert(0, _NoTorch())
'''


@pytest.mark.notebook
@pytest.mark.slow
def test_notebook_16_runs_without_torch(tmp_path, monkeypatch):
    (tmp_path / "sitecustomize.py").write_text(NO_TORCH)
    path = os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")])
    monkeypatch.setenv("PYTHONPATH", path.rstrip(os.pathsep))
    text = check_outputs(NOTEBOOK, execute(NOTEBOOK), None)
    assert "PyTorch is not installed" in text
    assert "gloo processes:" not in text
