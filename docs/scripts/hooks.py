"""MkDocs hooks (mkdocs.yml `hooks:`): the parts of the nav that follow the files, and MathJax served
from the site itself.

- A nav entry that is a folder (``results/``, ``course/``, ``reference/``) lists every page in it,
  ``index.md`` first, then by name: new lessons, result pages and API pages appear without editing
  mkdocs.yml. Runs after mkdocs-gen-files has added the generated pages.
- The lessons' equations are typeset by MathJax 2.7, copied from the `jupyter-server-mathjax` package
  into ``assets/mathjax/`` (mkdocs-jupyter points there instead of a CDN): no page needs the network.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import jupyter_server_mathjax


def _folder(folder: str, pages: list[str]) -> list[str]:
    inside = sorted((p for p in pages if p.startswith(folder)), key=lambda p: (not p.endswith("/index.md"), p))
    if not inside:
        raise ValueError(f"mkdocs.yml: the nav folder {folder!r} holds no page")
    return inside


def _expand(nav, pages: list[str]):
    """The nav with each folder entry replaced by the pages under that folder, in place of the entry."""
    if isinstance(nav, list):
        items = []
        for item in nav:
            items += _folder(item, pages) if isinstance(item, str) and item.endswith("/") else [_expand(item, pages)]
        return items
    if isinstance(nav, dict):
        return {title: _expand(value, pages) for title, value in nav.items()}
    return nav


def on_files(files, config):
    pages = [f.src_uri for f in files.documentation_pages()]
    config.nav = _expand(config.nav, pages)
    return files


def on_post_build(config):
    source = Path(jupyter_server_mathjax.__file__).parent / "static"
    target = Path(config.site_dir) / "assets" / "mathjax"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)
    # The package ships MathJax's STIX-Web fonts only (MathJax 2 asks for its TeX fonts by default), as
    # the Jupyter notebook configures it; mkdocs.yml's custom_mathjax_url loads this file last. The blank
    # font MathJax measures with is a local() one: its url('about:blank') is an error in Chromium's console.
    (target / "config" / "podracer.js").write_text(
        'MathJax.Hub.Config({"HTML-CSS": {availableFonts: [], preferredFont: null, imageFont: null, '
        'webFont: "STIX-Web", styles: {"@font-face": {"font-family": "MathJax_Blank", src: "local(\'MathJax_Blank\')"}}}});\n'
        'MathJax.Ajax.loadComplete("[MathJax]/config/podracer.js");\n')
