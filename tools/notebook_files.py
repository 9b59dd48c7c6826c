"""Store every notebook and lab as Jupyter itself saves it, so that opening one in JupyterLab
does not mark it unsaved.

Why a committed notebook opened as "unsaved" (closing it asked to save, and saving rewrote a
course file): when its kernel starts, JupyterLab writes the kernel's description into the
notebook's metadata, `kernelspec` (name, display name, language) and `language_info` (the
kernel's kernel_info reply), and any difference from what the file holds marks the document
changed (JupyterLab 4.6, `NotebookPanel._updateSpec` and `_updateLanguage`, through
`setMetadata`, which skips only equal values; jupyter/notebook#2123 describes the same with
the Python version). The files said `"display_name": "Python 3"` where ipykernel's kernel says
"Python 3 (ipykernel)", and `language_info` held only the language's name.

So every notebook in notebooks/, labs/ and labs/solutions/ carries the metadata ipykernel
reports, in the layout Jupyter's save writes (`nbformat.write`: JSON indented by one space,
sorted keys, non-ASCII characters kept, a final newline):

    python tools/notebook_files.py            # rewrite the files that differ
    python tools/notebook_files.py --check    # exit 1, naming the files that differ

`language_info.version` is the Python the course is tested and was walked through on
(COURSE_PYTHON, of runtime.txt's 3.11). A learner whose Python is another release still sees
a notebook marked changed once its kernel starts, since JupyterLab records the running
version: saving it then changes only that line. tools/make_labs.py writes the student labs
through `jupyter_text`; tests/test_notebook_files.py checks every file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
#: the Python release of the course's reference environment (tests, the browser walk)
COURSE_PYTHON = "3.11.7"
#: what ipykernel's "python3" kernel reports (ipykernel 6.31 and 7.4 alike), apart from
#: the running Python's version
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
LANGUAGE_INFO = {"codemirror_mode": {"name": "ipython", "version": 3}, "file_extension": ".py",
                 "mimetype": "text/x-python", "name": "python", "nbconvert_exporter": "python",
                 "pygments_lexer": "ipython3", "version": COURSE_PYTHON}


def course_files() -> list[Path]:
    """Every notebook and lab of the course."""
    return (sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "labs").glob("*.ipynb"))
            + sorted((ROOT / "labs" / "solutions").glob("*.ipynb")))


def jupyter_text(nb) -> str:
    """The file Jupyter would save for `nb` (an nbformat v4 notebook, changed in place) once
    an ipykernel kernel has started on it: the course's kernel metadata, nbformat's layout."""
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["language_info"] = {k: (dict(v) if isinstance(v, dict) else v)
                                    for k, v in LANGUAGE_INFO.items()}
    return nbformat.writes(nb) + "\n"


def differing(paths) -> list[Path]:
    """The files among `paths` that are not byte for byte what `jupyter_text` makes."""
    return [p for p in paths if p.read_text(encoding="utf-8")
            != jupyter_text(nbformat.read(p, as_version=4))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check, write nothing")
    args = ap.parse_args(argv)
    stale = differing(course_files())
    if args.check:
        if stale:
            print("Not stored as Jupyter saves them (run `python tools/notebook_files.py`):",
                  *[str(p.relative_to(ROOT)) for p in stale])
        return 1 if stale else 0
    for path in stale:
        path.write_text(jupyter_text(nbformat.read(path, as_version=4)), encoding="utf-8")
    print(f"Rewrote {len(stale)} notebook(s).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
