"""The course website builds offline and every page is sound in a real browser.

Builds the site quickly (notebooks not executed: `make site` executes them, which takes
minutes) into a temporary folder with tools/build_site.py, serves it on 127.0.0.1 and
opens every page in Debian's headless chromium (tools/site_check.py): no broken internal
link or anchor, every image loads, maths typeset, no console error, no request leaving
the loopback server. Skipped without chromium or Sphinx (Python 3.10), except under
CI=true where chromium must be there.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import build_site  # noqa: E402
import site_check  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _require_tools():
    if importlib.util.find_spec("sphinx") is None:
        pytest.skip("Sphinx is not installed (the website needs Python 3.11+ and "
                    "requirements-site.txt)")
    if not site_check.CHROMIUM.exists():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{site_check.CHROMIUM} missing (CI=true: the site test must run)")
        pytest.skip(f"{site_check.CHROMIUM} not found")


def test_every_notebook_and_lab_is_a_page():
    pages = build_site.course_pages()
    assert any(p.startswith("notebooks/") for p in pages)
    assert any(p.startswith("labs/") for p in pages)
    assert not any("solutions" in p for p in pages), "the site shows labs as learners get them"
    toc = build_site.landing_page(pages)
    for p in pages:
        assert p.removesuffix(".ipynb") in toc


def test_site_builds_and_every_page_is_sound(tmp_path, monkeypatch):
    _require_tools()
    out = tmp_path / "site"
    monkeypatch.setattr(build_site, "BUILD", tmp_path / "build")
    build_site.build(out, execute=False)
    pages = site_check.pages_of(out)
    assert "index.html" in pages
    for p in build_site.course_pages():
        assert p.replace(".ipynb", ".html") in pages, f"{p} has no page"
    problems = site_check.check_site(out)
    assert not problems, "\n".join(f"{page}: {item}" for page, items in problems.items()
                                   for item in items)
