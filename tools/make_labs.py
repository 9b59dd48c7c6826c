"""Generate the student labs (labs/*.ipynb) from the solution notebooks (labs/solutions/).

One source of truth: a solution notebook marks each solution region in a code cell

        ### BEGIN SOLUTION (roughly 3 lines)
        m_new = max(m, x)
        ...
        ### END SOLUTION

and the student version replaces the region, at the same indentation, with

        # FILL ME IN (roughly 3 lines)
        raise NotImplementedError("FILL ME IN")

Markdown cells may hold `<!-- BEGIN SOLUTION -->...<!-- END SOLUTION -->` spans,
which are dropped from the student version. Outputs and execution counts are
cleared in both. Each lab is written as Jupyter saves it, with the course's kernel
metadata (`notebook_files.jupyter_text`), so JupyterLab does not open it as unsaved.
Usage:

    python tools/make_labs.py           # write labs/*.ipynb
    python tools/make_labs.py --check   # exit 1 if any student lab is out of date
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat
from notebook_files import jupyter_text

ROOT = Path(__file__).resolve().parents[1]
BEGIN = re.compile(r"^(?P<indent>\s*)### BEGIN SOLUTION(?P<note>.*)$")
END = re.compile(r"^\s*### END SOLUTION\s*$")
MD_SOLUTION = re.compile(r"<!-- BEGIN SOLUTION -->.*?<!-- END SOLUTION -->", re.S)


def strip_code(source: str, where: str) -> str:
    out, inside = [], False
    for n, line in enumerate(source.splitlines(), 1):
        begin = BEGIN.match(line)
        if begin:
            if inside:
                raise ValueError(f"{where}, line {n}: nested BEGIN SOLUTION")
            inside = True
            indent = begin.group("indent")
            note = begin.group("note").strip()
            out.append(f"{indent}# FILL ME IN {note}".rstrip())
            out.append(f'{indent}raise NotImplementedError("FILL ME IN")')
            continue
        if END.match(line):
            if not inside:
                raise ValueError(f"{where}, line {n}: END SOLUTION without BEGIN")
            inside = False
            continue
        if not inside:
            out.append(line)
    if inside:
        raise ValueError(f"{where}: BEGIN SOLUTION without END")
    return "\n".join(out)


def student_version(solution: Path):
    nb = nbformat.read(solution, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            cell.source = strip_code(cell.source, f"{solution.name} cell {i}")
            cell.outputs = []
            cell.execution_count = None
        elif cell.cell_type == "markdown":
            cell.source = MD_SOLUTION.sub("", cell.source)
        cell.metadata.pop("execution", None)
    nb.metadata.pop("widgets", None)
    return nb


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check, write nothing")
    args = parser.parse_args(argv)
    stale = []
    for solution in sorted((ROOT / "labs" / "solutions").glob("*.ipynb")):
        target = ROOT / "labs" / solution.name
        text = jupyter_text(student_version(solution))
        current = target.read_text() if target.exists() else None
        if current != text:
            stale.append(target)
            if not args.check:
                target.write_text(text)
    if args.check and stale:
        print("Out of date (run `make labs`):", *[str(p.relative_to(ROOT)) for p in stale])
        return 1
    if not args.check:
        print(f"Wrote {len(stale)} student lab(s).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
