"""Build the course website: `python tools/build_site.py [--out DIR] [--only GLOB] [--execute GLOB]`

1. Stage the pages into `_build/site-src/` (`<out>-src/`): README.md becomes the landing
   page (its course map links straight to the pages), the notebooks, the student labs
   (shown as the learner receives them, not executed) and `figures/`. Each page gets a
   short header saying where its notebook lives and how to run it, and each code cell a
   tag `site-cell-<cell id>` (a class on its container in the page), so that
   `tools/site_check.py` can find a cell's outputs on the page.
2. Execute the staged notebooks in place, one fresh kernel each, as Jupyter runs them for
   a learner: Jupyter's default inline matplotlib backend (set explicitly, so an
   MPLBACKEND in the caller's environment cannot hide the figures), working directory
   the notebook's folder. The backend the kernel ended with is recorded in the
   notebook's metadata (`flashcourse_site`); the check refuses any other.
3. Run Sphinx (configuration in `site/conf.py`) on the executed notebooks, which it
   renders as they are (it executes nothing itself), into `_build/site/` (or --out);
   the .ipynb a page offers for download is the staged one without outputs.

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
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "_build"

RUN_LOCALLY = (
    "To run it yourself: clone the course repository, run `make lab` in it (or follow the "
    "README's steps without make) and open `{path}` in JupyterLab. Widgets and quizzes are "
    "live there; on this page they are still pictures."
)
#: What ipykernel sets MPLBACKEND to when it is unset: figures are emitted as cell outputs.
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"
#: The names `matplotlib.get_backend()` gives that backend (matplotlib >= 3.9 says "inline").
INLINE_NAMES = (INLINE_BACKEND, "inline")
#: Metadata key of an executed staged notebook: {"matplotlib_backend": ..., "seconds": ...}.
META_KEY = "flashcourse_site"
#: Tag (and, on the page, class `tag_<tag>`) of each staged code cell: prefix + cell id.
CELL_TAG = "site-cell-"
#: Output MIME types that are a picture: each such output is one figure of its cell.
FIGURE_MIME = ("image/png", "image/svg+xml", "image/jpeg", "image/gif")
#: Run after the last cell, in the same kernel: which matplotlib backend did it use?
_BACKEND_PROBE = "import matplotlib\nprint(matplotlib.get_backend())"

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


def figures_of(cell: dict) -> int:
    """How many figures (picture outputs) an executed code cell shows."""
    return sum(1 for out in cell.get("outputs", [])
               if any(mime in out.get("data", {}) for mime in FIGURE_MIME))


def stage_dir(out: Path) -> Path:
    """Where the pages of the site in `out` are staged (and its notebooks executed)."""
    return out.with_name(out.name + "-src")


def stage_notebook(src: Path, dst: Path, path: str) -> None:
    nb = json.loads(src.read_text(encoding="utf-8"))
    cells = nb["cells"]
    for i, cell in enumerate(cells):              # nbformat 4.5 wants cell ids
        cell.setdefault("id", f"cell-{i}")
        if cell["cell_type"] == "code":           # the page's cell container gets this class
            cell.setdefault("metadata", {}).setdefault("tags", []).append(
                CELL_TAG + cell["id"])
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


@contextmanager
def _environ(env: dict):
    """os.environ replaced by `env` for the duration (the kernel client reads
    JUPYTER_RUNTIME_DIR from it; the kernel inherits all of it)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def execute_notebook(path: Path, timeout: int) -> dict:
    """Run the notebook at `path` top to bottom in a fresh kernel and store its outputs in
    it, with what the kernel's matplotlib backend was at the end (in the metadata under
    META_KEY, returned). The kernel inherits os.environ; the working directory is the
    notebook's folder. A cell that raises stops the build with its traceback."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    probe = nbformat.v4.new_code_cell(_BACKEND_PROBE)
    nb.cells.append(probe)
    t0 = time.perf_counter()
    try:
        NotebookClient(nb, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}).execute()
    finally:
        nb.cells.remove(probe)
    backend = "".join(o.get("text", "") for o in probe.outputs
                      if o.get("output_type") == "stream").strip()
    meta = {"matplotlib_backend": backend, "seconds": round(time.perf_counter() - t0, 1)}
    nb.metadata[META_KEY] = meta
    nbformat.write(nb, path)
    return meta


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


def build(out: Path, execute: bool | str = True, jobs: str = "1",
          only: str | None = None) -> float:
    """Stage, execute and render the site into `out`; the seconds it took.

    execute: True (every notebook), False (none: pages without outputs) or a glob of the
    notebooks to execute, e.g. "notebooks/02*" (the others are shown without outputs).
    """
    src = stage_dir(out)
    pages = stage(src, only)
    glob = "notebooks/*" if execute is True else (execute or None)
    run = [p for p in pages if glob and p.startswith("notebooks/") and fnmatch.fnmatch(p, glob)]
    env = dict(os.environ)
    env.update({"FLASHCOURSE_STATIC_SITE": "1", "MPLBACKEND": INLINE_BACKEND,
                # the notebooks import this checkout's package, wherever they run
                "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))})
    env.pop("NUMBA_ENABLE_CUDASIM", None)          # the kernels choose GPU or simulator
    scratch = Path(tempfile.mkdtemp(prefix="flashcourse-site-"))
    env.setdefault("JUPYTER_RUNTIME_DIR", str(scratch / "runtime"))
    env.setdefault("IPYTHONDIR", str(scratch / "ipython"))
    if out.exists():
        shutil.rmtree(out)
    timeout = int(os.environ.get("FLASHCOURSE_SITE_TIMEOUT", "600"))   # seconds per cell
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-j", jobs, "-c",
           str(ROOT / "site"), "-d", str(out.with_name(out.name + "-doctrees")),
           str(src), str(out)]
    try:
        with _environ(env):
            for path in run:
                meta = execute_notebook(src / path, timeout)
                nb = json.loads((src / path).read_text(encoding="utf-8"))
                figures = [figures_of(c) for c in nb["cells"]]
                print(f"executed {path} in {meta['seconds']:.0f} s: {sum(figures)} figures "
                      f"in {sum(1 for f in figures if f)} cells", flush=True)
        subprocess.run(cmd, check=True, env=env, cwd=ROOT)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    seconds = time.perf_counter() - t0
    restore_clean_sources(out, pages)
    prune_mathjax(out / "_static" / "mathjax")
    (out / ".nojekyll").touch()
    print(f"site: {len(pages)} pages + home in {out} ({seconds:.0f} s, "
          f"{len(run)} notebooks executed)")
    return seconds


def restore_clean_sources(out: Path, pages: list[str]) -> None:
    """The download button offers `_sources/<page>.ipynb`, which Sphinx copied from the
    executed staging: replace it with the notebook without outputs (with the page's
    header), the way notebooks are stored and the way a learner starts one."""
    for path in pages:
        copied = out / "_sources" / path
        if copied.exists():
            stage_notebook(ROOT / path, copied, path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=BUILD / "site", help="output folder")
    ap.add_argument("--no-execute", action="store_true",
                    help="do not execute the notebooks (fast; pages show no outputs)")
    ap.add_argument("--execute", metavar="GLOB", default="notebooks/*",
                    help='execute only the notebooks matching this glob (default: all), '
                         'e.g. "notebooks/02*"; the other pages show no outputs')
    ap.add_argument("-j", "--jobs", default="1", help="Sphinx parallel jobs (default 1)")
    ap.add_argument("--only", help='build only the pages matching this glob, e.g. "notebooks/01*"')
    args = ap.parse_args(argv)
    build(args.out.resolve(), execute=False if args.no_execute else args.execute,
          jobs=args.jobs, only=args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
