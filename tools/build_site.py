"""Build the course website: `python tools/build_site.py [--no-execute] [--out DIR]`.

1. Stage the pages into `_build/site-src/`: README.md becomes the landing page (its
   course map links straight to the pages), the notebooks (executed by Sphinx), the
   student labs (shown as the learner receives them, not executed) and `figures/`.
   Each page gets a short header saying where its notebook lives and how to run it.
2. Run Sphinx (configuration in `site/conf.py`) into `_build/site/` (or --out).

Nothing is downloaded: the theme and MathJax ship with their Python packages. While
the notebooks execute, FLASHCOURSE_STATIC_SITE=1 tells the widgets and quizzes to
show a still picture of their default state (and the quiz answers behind a reveal),
since a static page has no kernel to run them.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "_build"

RUN_LOCALLY = (
    "To run it yourself: clone the course repository, run `make lab` in it (or follow the "
    "README's steps without make) and open `{path}` in JupyterLab. Widgets and quizzes are "
    "live there; on this page they are still pictures."
)
LAB_NOTE = (
    "This is the lab as you receive it: the `# FILL ME IN` cells are yours to write and "
    "each checker cell tells you what is right or wrong. Open `{path}` in JupyterLab "
    "(`make lab`) to work on it; the worked solutions are in `labs/solutions/`."
)


def course_pages(only: str | None = None) -> list[str]:
    """Notebooks then student labs, in course order, as paths relative to the repo
    (`only`: a glob such as "notebooks/01*" to build just those pages)."""
    notebooks = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "notebooks").glob("*.ipynb"))
    labs = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "labs").glob("*.ipynb"))
    pages = notebooks + labs
    if only:
        pages = [p for p in pages if fnmatch.fnmatch(p, only)]
        if not pages:
            raise SystemExit(f"--only {only!r} matches no notebook or lab")
    return pages


def _header_cell(path: str) -> dict:
    text = (LAB_NOTE if path.startswith("labs/") else RUN_LOCALLY).format(path=path)
    return {"cell_type": "markdown", "id": "site-header", "metadata": {"tags": ["site-header"]},
            "source": f"```{{note}}\n{text}\n```\n"}


def stage_notebook(src: Path, dst: Path, path: str) -> None:
    nb = json.loads(src.read_text(encoding="utf-8"))
    cells = nb["cells"]
    for i, cell in enumerate(cells):              # nbformat 4.5 wants cell ids
        cell.setdefault("id", f"cell-{i}")
    # the header goes right after the title cell, so the page title stays the notebook's own
    at = 1 if cells and cells[0]["cell_type"] == "markdown" else 0
    cells.insert(at, _header_cell(path))
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(json.dumps(nb, indent=1), encoding="utf-8")


def landing_page(pages: list[str]) -> str:
    """README.md with a hidden table of contents, so the course map is the home page."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    text = re.sub(r"<!--.*?-->\n?", "", text, flags=re.S)
    notebooks = [p for p in pages if p.startswith("notebooks/")]
    labs = [p for p in pages if p.startswith("labs/")]
    toc = ["", "```{toctree}", ":hidden:", ":caption: Notebooks", ""]
    toc += [p.removesuffix(".ipynb") for p in notebooks]
    toc += ["```", "", "```{toctree}", ":hidden:", ":caption: Labs", ""]
    toc += [p.removesuffix(".ipynb") for p in labs]
    toc += ["```", "", "```{toctree}", ":hidden:", ":caption: About", "", "CONTRIBUTING", "```", ""]
    return text + "\n".join(toc)


def stage(src_dir: Path, only: str | None = None) -> list[str]:
    if src_dir.exists():
        shutil.rmtree(src_dir)
    src_dir.mkdir(parents=True)
    pages = course_pages(only)
    for path in pages:
        stage_notebook(ROOT / path, src_dir / path, path)
    shutil.copytree(ROOT / "figures", src_dir / "figures", ignore=shutil.ignore_patterns("*.md"))
    (src_dir / "index.md").write_text(landing_page(pages), encoding="utf-8")
    # files the README links to that are not pages (licence, contributing guide)
    for name in ("LICENSE", "CONTRIBUTING.md"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, src_dir / name)
    return pages


def prune_mathjax(folder: Path) -> None:
    """Keep the one MathJax bundle the pages load (tex-chtml.js) and the parts it loads
    on demand (fonts, TeX extensions, menu, accessibility); drop the other bundles."""
    if not folder.is_dir():
        return
    for f in folder.glob("*.js"):
        if f.name != "tex-chtml.js":
            f.unlink()
    shutil.rmtree(folder / "sre", ignore_errors=True)


def build(out: Path, execute: bool, jobs: str = "1", only: str | None = None) -> float:
    src = BUILD / "site-src"
    pages = stage(src, only)
    env = dict(os.environ)
    env.update({"FLASHCOURSE_SITE_EXECUTE": "force" if execute else "off",
                "FLASHCOURSE_STATIC_SITE": "1", "MPLBACKEND": "Agg",
                # the notebooks import this checkout's package, wherever Sphinx runs them
                "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))})
    env.pop("NUMBA_ENABLE_CUDASIM", None)          # the kernels choose GPU or simulator
    scratch = Path(tempfile.mkdtemp(prefix="flashcourse-site-"))
    env.setdefault("JUPYTER_RUNTIME_DIR", str(scratch / "runtime"))
    env.setdefault("IPYTHONDIR", str(scratch / "ipython"))
    if out.exists():
        shutil.rmtree(out)
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-j", jobs, "-c",
           str(ROOT / "site"), "-d", str(BUILD / "site-doctrees"), str(src), str(out)]
    try:
        subprocess.run(cmd, check=True, env=env, cwd=ROOT)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    seconds = time.perf_counter() - t0
    prune_mathjax(out / "_static" / "mathjax")
    (out / ".nojekyll").touch()
    print(f"site: {len(pages)} pages + home in {out} ({seconds:.0f} s, "
          f"{'executed' if execute else 'not executed'})")
    return seconds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=BUILD / "site", help="output folder")
    ap.add_argument("--no-execute", action="store_true",
                    help="do not execute the notebooks (fast; pages show no outputs)")
    ap.add_argument("-j", "--jobs", default="1", help="Sphinx parallel jobs (default 1)")
    ap.add_argument("--only", help='build only the pages matching this glob, e.g. "notebooks/01*"')
    args = ap.parse_args(argv)
    build(args.out.resolve(), execute=not args.no_execute, jobs=args.jobs, only=args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
