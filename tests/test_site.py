"""The documentation site (mkdocs.yml): built strict as `make site` builds it, then read in a real
browser. One build, shared by the module (conftest.py keeps this file's tests on one worker).

The cheap checks (no `slow` mark) run the build's own gate, docs/scripts/gen_pages.py: every name in
``__all__`` of podracer, finance and locomotion has a docstring, and no docstring documents an argument
its signature does not take. The browser test drives the system Chromium, as
tests/test_notebook_browser.py does, against the site served on 127.0.0.1; every request that leaves
the machine is refused and counted, so a page that needs the network fails it.
"""

from __future__ import annotations

import functools
import http.server
import importlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SHOTS = ROOT / "runs" / "browser"  # where the browser tests leave their screenshots


def _gen_pages():
    spec = importlib.util.spec_from_file_location("gen_pages", ROOT / "docs" / "scripts" / "gen_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _gen_pages()


@pytest.mark.parametrize("package", GEN.PACKAGES)
def test_every_public_name_has_a_docstring(package):
    module = importlib.import_module(package)
    names = [name for name, _, _ in GEN.public_objects(package)]
    assert names == list(module.__all__), "griffe (what the site renders) reads another __all__ than Python"
    assert GEN.undocumented(package) == []
    assert GEN.unknown_params(package) == []


def test_the_gate_finds_what_it_is_for(tmp_path, monkeypatch):
    """A package with an undocumented constant and class, and an Args entry naming no argument."""
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "__init__.py").write_text(
        '__all__ = ["LIMIT", "Bare", "f", "g"]\nLIMIT = 3\n\n'
        'class Bare:\n    pass\n\n'
        'def f(a, b):\n    """Adds.\n\n    Args:\n        a, b: the two.\n        c: not taken.\n    """\n\n'
        'def g(start, end):\n    """Spans.\n\n    Args:\n        start, end: the two ends.\n    """\n')
    monkeypatch.setattr(GEN, "ROOT", tmp_path)
    assert GEN.undocumented("toy") == ["toy.LIMIT (toy.LIMIT)", "toy.Bare (toy.Bare)"]
    assert GEN.unknown_params("toy") == ["toy.f: c"]


def test_the_build_is_strict_and_offline():
    config = (ROOT / "mkdocs.yml").read_text()
    assert re.search(r"^strict: true", config, flags=re.M)
    assert re.search(r"^  font: false", config, flags=re.M), "Material loads Google Fonts unless font: false"
    for check in ("omitted_files", "absolute_links", "unrecognized_links", "anchors"):
        assert re.search(rf"^  {check}: warn", config, flags=re.M), f"validation.{check} must be a warning"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """`make site`'s build (strict), into a folder of its own."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true", "SITE_EXECUTE": "false"}
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=600)
    problems = [line for line in res.stderr.splitlines() if not line.startswith("INFO")]
    assert res.returncode == 0, "mkdocs build --strict failed:\n" + "\n".join(problems)[-6000:]
    return out


@pytest.mark.slow
def test_site_has_every_page_and_every_public_name(site):
    for page in ("index.html", "architecture.html", "course/index.html", "course/GLOSSARY.html", "changelog.html",
                 "search/search_index.json", "assets/mathjax/MathJax.js"):
        assert (site / page).is_file(), page
    lessons = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert lessons and sorted(p.stem for p in (site / "course").glob("[0-9][0-9]_*.html")) == lessons
    for package in GEN.PACKAGES:
        html = (site / "reference" / f"{package}.html").read_text()
        for name, identifier, _ in GEN.public_objects(package):
            assert f'id="{identifier}"' in html, f"{identifier} has no section on reference/{package}.html"
    # No page loads anything from another host (fonts, scripts, MathJax, badges).
    for page in site.rglob("*.html"):
        external = re.findall(r'<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)="((?:https?:)?//[^"]+)"',
                              page.read_text())
        assert external == [], f"{page.relative_to(site)} loads {external}"


@pytest.fixture(scope="module")
def served(site):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on this machine: apt-get install chromium (as root; "
                                             ".ci/run does it), or put any chromium on PATH")
def test_site_in_a_browser(served):
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    outside: list[str] = []

    def only_local(route):
        if urlparse(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    lesson = next(path.stem for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
                  if "$$" in path.read_text())  # the first lesson with a displayed equation
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.route("**/*", only_local)
            page.on("pageerror", lambda e: errors.append(f"{page.url}: {e}"))
            page.on("console", lambda m: errors.append(f"{page.url}: {m.text}") if m.type == "error" else None)

            page.goto(f"{served}/index.html")
            assert "Podracer" in page.title()
            assert "make demo" in page.locator("article").inner_text()

            # Search: lunr in a worker, over the index built into the site.
            # Material reads the query on a keyup, or once when its worker has built the index (its
            # placeholder says "Initializing search" until then). `fill()` sends no keyup, so it only
            # worked when the index came after it: a race, lost in a fresh-clone run (2026-12-08).
            # Wait for the index, then type key by key; both waits are limits on a hang, not timings.
            page.locator("label.md-search__icon, .md-search__input").first.click()
            page.wait_for_function(
                "() => !document.querySelector('.md-search-result__meta').textContent.includes('Initializing')",
                timeout=180_000)
            page.locator(".md-search__input").press_sequentially("backtest")
            hits = page.locator(".md-search-result__item a")
            hits.first.wait_for(timeout=60_000)
            links = [hits.nth(i).get_attribute("href") for i in range(hits.count())]
            assert any("reference/finance.html" in link for link in links), links

            # An API page: the function's signature and its docstring.
            page.goto(f"{served}/reference/finance.html")
            section = page.locator('[id="finance.backtest.backtest"]')
            section.wait_for(timeout=10_000)
            text = page.locator("article").inner_text()
            assert "backtest(" in text and "walk_forward" in text and len(text) > 5_000

            # A lesson: its cells, and its equations typeset by the site's own MathJax.
            page.goto(f"{served}/course/{lesson}.html")
            page.locator(".jp-Cell").first.wait_for(timeout=10_000)
            assert page.locator(".jp-Cell").count() > 10
            assert len(page.locator("article").inner_text()) > 2_000
            page.wait_for_function("() => window.MathJax && document.querySelector('.MathJax, .MathJax_Display')",
                                   timeout=30_000)
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / "site_lesson.png"))
        finally:
            browser.close()
    assert errors == [], errors
    assert outside == [], f"pages asked for other hosts: {outside}"
