"""Helpers for the lab tests: run a lab's function cells, mutate a solution, count lines.

Wrong implementations are made from the solution itself by replacing one line
(`mutate`), so each test shows exactly which mistake it plays and the checker
must name that mistake.
"""

from __future__ import annotations

import linecache
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "labs" / "solutions"
sys.path.insert(0, str(ROOT / "tools"))
import make_labs  # noqa: E402

BEGIN = re.compile(r"^\s*### BEGIN SOLUTION")
END = re.compile(r"^\s*### END SOLUTION")


def lab_path(name: str) -> Path:
    return SOLUTIONS / f"{name}.ipynb"


def cells_of(path: Path, *, student: bool = False) -> list[str]:
    nb = make_labs.student_version(path) if student else nbformat.read(path, as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "code"]


def _is_definition(src: str) -> bool:
    body = src.lstrip()
    return body.startswith(("import", "from", "def ", "@"))


def functions_of(path: Path, *, student: bool = False, replace=()) -> dict:
    """Execute the import and definition cells of a lab; `replace` = [(old, new), ...] edits
    the source first (each `old` must occur)."""
    namespace: dict = {}
    for n, src in enumerate(cells_of(path, student=student)):
        if not _is_definition(src):
            continue
        for old, new in replace:
            if old in src:
                src = src.replace(old, new)
        # registered in linecache so that inspect.getsource works, as it does in Jupyter
        name = f"<{path.stem}{'-student' if student else ''}-cell{n}-{hash(src)}>"
        linecache.cache[name] = (len(src), None, src.splitlines(True), name)
        exec(compile(src, name, "exec"), namespace)  # noqa: S102
    return namespace


def mutate(path: Path, name: str, old: str, new: str):
    """The solution's function `name` with the text `old` replaced by `new` (must occur)."""
    sources = [s for s in cells_of(path) if f"def {name}(" in s]
    assert sources and old in sources[0], (name, old)
    return functions_of(path, replace=[(old, new)])[name]


def solution_lines(path: Path) -> list[str]:
    """The stripped lines between the solution markers (comments removed, blanks skipped)."""
    out, inside = [], False
    for src in cells_of(path):
        for line in src.splitlines():
            if BEGIN.match(line):
                inside = True
                continue
            if END.match(line):
                inside = False
                continue
            if inside:
                code = line.split("#")[0].strip()
                if code:
                    out.append(code)
    return out


def hint_leaks(hints, path: Path, min_len: int = 12) -> list[str]:
    """Solution lines (at least min_len characters) that appear inside any hint text."""
    texts = []
    for h in hints:
        texts.extend(h if isinstance(h, tuple) else (h,))
    squeeze = [re.sub(r"\s+", "", t) for t in texts]
    leaks = []
    for line in solution_lines(path):
        flat = re.sub(r"\s+", "", line)
        if len(flat) >= min_len and any(flat in t for t in squeeze):
            leaks.append(line)
    return leaks


def assert_stubs_not_implemented(results, out: str) -> None:
    """Every checker result of a student stub says "Not implemented yet", none passes, and
    the printed report (`out`, from capsys) says so once per check."""
    assert all(r.todo and not r.passed for r in results)
    assert out.count("Not implemented yet") == len(results)
    assert "All checks passed" not in out
