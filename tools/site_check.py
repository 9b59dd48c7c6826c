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
- maths that MathJax did not typeset, and a Python traceback in the page text.

Exit status 0 when nothing is wrong. `tests/test_site.py` calls `check_site`.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlparse

ROOT = Path(__file__).resolve().parents[1]
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


_PAGE_SCRIPT = """() => {
  const imgs = [...document.images].map(i => ({src: i.currentSrc || i.src,
                                               ok: i.complete && i.naturalWidth > 0}));
  const links = [...document.querySelectorAll('a[href]')].map(a => a.href);
  const ids = [...document.querySelectorAll('[id]')].map(e => e.id);
  const rawMath = [...document.querySelectorAll('.math')].filter(
      e => !e.querySelector('mjx-container')).length;
  const main = document.querySelector('main') || document.body;
  const outputs = document.querySelectorAll('.cell_output').length;
  return {imgs, links, ids, rawMath, outputs, text: main.innerText};
}"""


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


def check_site(site: Path, *, executed: bool = False,
               timeout_ms: int = 60_000) -> dict[str, list[str]]:
    """Problems found on each page of `site` ({page: [problem, ...]}, empty when clean);
    `executed`: every notebook page must also show cell outputs."""
    from playwright.sync_api import sync_playwright

    site = site.resolve()
    pages = pages_of(site)
    if not pages:
        return {"(site)": [f"no HTML pages under {site}"]}
    problems: dict[str, list[str]] = {}
    ids_cache: dict[Path, set] = {}
    with serve(site) as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                     args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
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
                if info["rawMath"]:
                    out.append(f"{info['rawMath']} maths elements not typeset")
                if executed and rel.startswith("notebooks/") and not info["outputs"]:
                    out.append("a notebook page without executed outputs")
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
            browser.close()
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
