"""Check a built course website in a real browser: `python tools/site_check.py [SITE_DIR]`.

Serves SITE_DIR (default `_build/site`) from a loopback HTTP server (127.0.0.1, a free
port, stopped by its PID), opens every page in Debian's headless Chromium through
Playwright, and reports, per page:

- requests that failed or answered >= 400, and any request that leaves the loopback
  server (the site must work offline: no CDN);
- console errors;
- images that did not load (naturalWidth 0);
- internal links to a page or file that does not exist, or to an anchor that is not on
  the target page;
- maths that MathJax did not typeset, and a Python traceback in the page text;
- figures: for each notebook page whose notebook the build executed (the executed
  notebooks are in `<SITE_DIR>-src/`, see tools/build_site.py), per code cell, the
  figures (picture outputs) the executed notebook has against the images that cell's
  container shows on the page, loaded; a notebook executed with another matplotlib
  backend than Jupyter's inline one (which emits no figures) is a problem too. With
  --executed, every notebook page must come from an executed notebook.
- layout, at a desktop window (VIEWPORT): a page that scrolls sideways, and a figure
  shown at less than FIGURE_MIN_SHARE of its own width (squeezed by the theme's columns).

Exit status 0 when nothing is wrong. `tests/test_site.py` calls `check_site`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlparse

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

import build_site  # noqa: E402  (where the build stages, tags and executes the notebooks)

CHROMIUM = Path(os.environ.get("FLASHCOURSE_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync",
                 "--disable-dev-shm-usage"]
SKIP_PAGES = {"genindex.html", "search.html"}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serve(folder: Path):
    """A static HTTP server on 127.0.0.1 for `folder`; yields its base URL."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
         "--directory", str(folder)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}/"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(base, timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError(f"the HTTP server for {folder} did not start")
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def pages_of(site: Path) -> list[str]:
    return sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html")
                  if p.name not in SKIP_PAGES and "_static" not in p.parts
                  and "_sources" not in p.parts)


#: The browser window the pages are checked in, and the least share of its own width a
#: figure may be shown at there (site/_static/course.css gives figures the room).
VIEWPORT = {"width": 1400, "height": 1000}
FIGURE_MIN_SHARE = 0.95

_PAGE_SCRIPT = """() => {
  const imgs = [...document.images].map(i => ({src: i.currentSrc || i.src,
                                               ok: i.complete && i.naturalWidth > 0}));
  const links = [...document.querySelectorAll('a[href]')].map(a => a.href);
  const ids = [...document.querySelectorAll('[id]')].map(e => e.id);
  const rawMath = [...document.querySelectorAll('.math')].filter(
      e => !e.querySelector('mjx-container')).length;
  const main = document.querySelector('main') || document.body;
  const outputs = document.querySelectorAll('.cell_output').length;
  const d = document.documentElement;
  const sideways = d.scrollWidth - d.clientWidth;
  // figures (picture outputs of a cell, not a widget's still picture) shown narrower
  // than they are: [shown px, natural px]
  const narrow = [...document.querySelectorAll('.cell_output img')].filter(
      i => !i.closest('.output.text_html') && i.naturalWidth > 0
           && i.clientWidth < FIGURE_MIN_SHARE * i.naturalWidth).map(
      i => [i.clientWidth, i.naturalWidth]);
  return {imgs, links, ids, rawMath, outputs, text: main.innerText, sideways, narrow};
}""".replace("FIGURE_MIN_SHARE", repr(FIGURE_MIN_SHARE))

# Per tagged cell container: the images among its outputs that are pictures of their own
# (not an <img> inside an HTML output, such as a widget's still picture), and how many
# of them loaded.
_CELLS_SCRIPT = """(prefix) => {
  const cells = {};
  for (const c of document.querySelectorAll('div.cell')) {
    const tag = [...c.classList].find(k => k.startsWith(prefix));
    if (!tag) continue;
    const imgs = [...c.querySelectorAll('.cell_output img')].filter(
        i => !i.closest('.output.text_html'));
    cells[tag.slice(prefix.length)] = {
      shown: imgs.length,
      loaded: imgs.filter(i => i.complete && i.naturalWidth > 0).length};
  }
  return cells;
}"""


def executed_notebook(site: Path, rel: str) -> dict | None:
    """The executed notebook behind page `rel` of `site` (None if the build did not
    execute it: then its page shows no outputs)."""
    path = build_site.stage_dir(site) / Path(rel).with_suffix(".ipynb")
    if not path.exists():
        return None
    nb = json.loads(path.read_text(encoding="utf-8"))
    return nb if build_site.META_KEY in nb.get("metadata", {}) else None


def figure_cells(nb: dict) -> list[tuple[int, dict, int]]:
    """(index in the repository's notebook, cell, figures) for each code cell of an
    executed staged notebook (the index leaves out the header the build inserts)."""
    cells = [c for c in nb["cells"] if c.get("id") != "site-header"]
    return [(i, c, build_site.figures_of(c)) for i, c in enumerate(cells)
            if c["cell_type"] == "code"]


def _cell_name(i: int, cell: dict) -> str:
    source = cell.get("source", "")
    source = "".join(source) if isinstance(source, list) else source
    first = next((line.strip() for line in source.splitlines() if line.strip()), "")
    first = re.sub(r"\s+#.*$", "", first)                # its code, not its comment
    first = first if len(first) <= 60 else first[:57] + "..."
    return f'cell {i} (id "{cell.get("id")}": {first})'


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def figure_problems(nb: dict, shown: dict) -> list[str]:
    """What is wrong with the figures of a page: its executed notebook `nb` against
    `shown` ({cell id: {"shown": images, "loaded": loaded images}}, from the page)."""
    backend = nb["metadata"][build_site.META_KEY].get("matplotlib_backend", "")
    if backend not in build_site.INLINE_NAMES:
        return [f"the notebook was executed with matplotlib backend {backend!r}, not Jupyter's "
                f"inline one: its figures were never emitted (rebuild it with "
                f"tools/build_site.py)"]
    out = []
    for i, cell, figures in figure_cells(nb):
        page = shown.get(cell.get("id"))
        if page is None:
            if figures:
                out.append(f"{_cell_name(i, cell)}: the notebook made "
                           f"{_plural(figures, 'figure')}, the page has no such cell")
            continue
        if page["loaded"] != figures or page["shown"] != figures:
            lost = page["shown"] - page["loaded"]
            out.append(f"{_cell_name(i, cell)}: the notebook made "
                       f"{_plural(figures, 'figure')}, the page shows {page['loaded']}"
                       + (f" (and {_plural(lost, 'image')} that did not load)" if lost else ""))
    return out


def _target_file(site: Path, base: str, url: str) -> tuple[Path | None, str]:
    """The file a same-site URL points to (None for external URLs) and its anchor."""
    url, frag = urldefrag(url)
    if not url.startswith(base):
        return None, frag
    rel = unquote(urlparse(url).path).lstrip("/")
    path = site / rel
    if rel == "" or path.is_dir():
        path = path / "index.html"
    return path, frag


@contextmanager
def _chromium(context=None):
    """A Playwright browser context: `context` itself, or Debian's chromium launched for
    the block (one Playwright per process: a caller that runs one already passes its own)."""
    if context is not None:
        yield context
        return
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                     args=CHROMIUM_ARGS)
        try:
            yield browser.new_context()
        finally:
            browser.close()


def check_site(site: Path, *, executed: bool = False, only: list[str] | None = None,
               timeout_ms: int = 60_000, context=None) -> dict[str, list[str]]:
    """Problems found on each page of `site` ({page: [problem, ...]}, empty when clean);
    `executed`: every notebook page must also show cell outputs, and come from an
    executed notebook; `only`: check just these pages (paths relative to `site`);
    `context`: a Playwright browser context to open the page in (None: chromium is
    launched for the check)."""
    site = site.resolve()
    pages = pages_of(site) if only is None else list(only)
    if not pages:
        return {"(site)": [f"no HTML pages under {site}"]}
    problems: dict[str, list[str]] = {}
    ids_cache: dict[Path, set] = {}
    with serve(site) as base, _chromium(context) as chromium:
        page = chromium.new_page()
        try:
            page.set_viewport_size(VIEWPORT)
            found: list[str] = []
            page.on("console", lambda m: found.append(f"console {m.type}: {m.text}")
                    if m.type == "error" else None)
            page.on("requestfailed", lambda r: found.append(
                f"request failed: {r.url} ({r.failure})"))
            page.on("response", lambda r: found.append(f"HTTP {r.status}: {r.url}")
                    if r.status >= 400 else None)
            page.on("request", lambda r: None if r.url.startswith((base, "data:", "blob:"))
                    else found.append(f"request leaves the site: {r.url}"))
            for rel in pages:
                found.clear()
                page.goto(base + rel, wait_until="networkidle", timeout=timeout_ms)
                if page.evaluate("() => !!window.MathJax"):
                    page.wait_for_function(
                        "() => !window.MathJax.startup || !window.MathJax.startup.promise "
                        "|| window.MathJax.startup.document", timeout=timeout_ms)
                    page.evaluate("() => window.MathJax.startup.promise")
                info = page.evaluate(_PAGE_SCRIPT)
                out = list(found)
                out += [f"image did not load: {i['src']}" for i in info["imgs"] if not i["ok"]]
                if info["sideways"] > 0:
                    out.append(f"the page scrolls sideways by {info['sideways']} px in a "
                               f"{VIEWPORT['width']} px window")
                out += [f"a figure {w} px wide is shown {shown} px wide "
                        f"({100 * shown / w:.0f}%)" for shown, w in info["narrow"]]
                if info["rawMath"]:
                    out.append(f"{info['rawMath']} maths elements not typeset")
                if executed and rel.startswith("notebooks/") and not info["outputs"]:
                    out.append("a notebook page without executed outputs")
                nb = executed_notebook(site, rel) if rel.startswith("notebooks/") else None
                if nb is not None:
                    out += figure_problems(nb, page.evaluate(_CELLS_SCRIPT,
                                                             "tag_" + build_site.CELL_TAG))
                elif executed and rel.startswith("notebooks/"):
                    out.append(f"no executed notebook behind this page in "
                               f"{build_site.stage_dir(site)}: its figures cannot be checked")
                if "Traceback (most recent call last)" in info["text"]:
                    out.append("a Python traceback is on the page")
                for url in sorted(set(info["links"])):
                    target, frag = _target_file(site, base, url)
                    if target is None:
                        continue
                    if not target.exists():
                        out.append(f"broken link: {url}")
                    elif frag and target.suffix == ".html":
                        if target not in ids_cache:
                            ids_cache[target] = set(page.evaluate(
                                "async (u) => { const t = await (await fetch(u)).text();"
                                " const d = new DOMParser().parseFromString(t, 'text/html');"
                                " return [...d.querySelectorAll('[id]')].map(e => e.id); }",
                                urldefrag(url)[0]))
                        if unquote(frag) not in ids_cache[target]:
                            out.append(f"broken anchor: {url}")
                if out:
                    problems[rel] = out
        finally:
            page.close()
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("site", nargs="?", type=Path, default=ROOT / "_build" / "site")
    ap.add_argument("--executed", action="store_true",
                    help="also require executed outputs on every notebook page")
    args = ap.parse_args(argv)
    if not (args.site / "index.html").exists():
        print(f"no site at {args.site}: build it with `make site`", file=sys.stderr)
        return 2
    problems = check_site(args.site, executed=args.executed)
    n = len(pages_of(args.site))
    for page, items in problems.items():
        print(page)
        for item in items:
            print("   ", item)
    print(f"{n} pages checked, {len(problems)} with problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
