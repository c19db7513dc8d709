"""Every ```python block in the README, and in the site pages its examples moved to (RUN_PAGES), runs
as written, each in a fresh interpreter, as a newcomer would paste it. The blocks are sized to run in
seconds (preset budgets with a target return, a short finance run), so they run here exactly as
printed. The fast checks (no `slow` mark) make sure those runs cover every Python example of those
pages, that the Python on every other page of the site at least compiles (many are fragments:
`Tournament(..., backend="ray")` on a cluster), and that the names every page shows exist."""

import importlib
import importlib.util
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# The pages whose examples run: the README, and the site pages that hold what the README showed.
RUN_PAGES = [README] + [ROOT / "docs" / name for name in (
    "index.md", "guide.md", "stable_api.md", "finance.md", "tournament.md", "locomotion.md", "course.md",
    "results/demo.md", "benchmarks.md")]
# Every page a reader sees: the README and the site's Markdown.
ALL_PAGES = [README] + sorted((ROOT / "docs").rglob("*.md"))
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", flags=re.S | re.M)


def name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def python_blocks(page: Path) -> list[str]:
    return PYTHON_BLOCK.findall(page.read_text())


def _unique_blocks() -> list[tuple[Path, int, str]]:
    """(page, index, code) of each block to run; a block that repeats one already taken (the home page's
    taste is the README's) runs once."""
    seen, blocks = set(), []
    for page in RUN_PAGES:
        for i, code in enumerate(python_blocks(page)):
            if code not in seen:
                seen.add(code)
                blocks.append((page, i, code))
    return blocks


BLOCKS = _unique_blocks()


def fenced_blocks(text: str, where: str = "README.md") -> list[tuple[str, str]]:
    """(info string, body) of every fenced block, indented fences included, read line by line."""
    blocks, tag, body = [], None, []
    for line in text.splitlines(keepends=True):
        fence = re.match(r"\s*```\s*(\S*)\s*$", line)
        if fence and tag is None:
            tag, body = fence.group(1), []
        elif fence and not fence.group(1):
            blocks.append((tag, "".join(body)))
            tag = None
        elif tag is not None:
            body.append(line)
    assert tag is None, f"{where}: a ```{tag} block is never closed"
    return blocks


@pytest.mark.parametrize("page", RUN_PAGES, ids=name)
def test_every_python_example_is_a_block_the_run_test_runs(page):
    """The run test below is parametrised over BLOCKS (```python at the start of a line). Python
    under another tag (```py, ```pycon, no tag) or behind an indented fence would never run."""
    text = page.read_text()
    blocks = fenced_blocks(text, name(page))
    assert {tag for tag, _ in blocks} <= {"python", "bash", "text", "yaml", ""}, [tag for tag, _ in blocks]
    assert [body for tag, body in blocks if tag == "python"] == python_blocks(page), "a ```python block the run test misses"
    for tag, body in blocks:
        if tag != "python":
            assert not re.search(r"^\s*(import \w|from [\w.]+ import )", body, flags=re.M), (
                f"a ```{tag} block holds Python, which the run test skips: tag it ```python\n{body}")
    for i, code in enumerate(python_blocks(page)):
        compile(code, f"{name(page)} python block{i}", "exec")


def test_the_readme_is_a_front_door():
    """A newcomer reads it in five minutes: what it is, install, a taste, what it does, one table, links.
    The detail lives on the site's pages (RUN_PAGES), whose examples run too."""
    assert len(README.read_text().splitlines()) <= 250
    assert len(python_blocks(README)) >= 2


@pytest.mark.parametrize("page", ALL_PAGES, ids=name)
def test_python_on_every_page_compiles(page):
    """The other pages' blocks are often fragments that need a cluster or a bucket: they must still be
    Python (IPython's %magics and !commands aside)."""
    for i, code in enumerate(python_blocks(page)):
        code = re.sub(r"^(\s*)[%!].*$", r"\1pass", code, flags=re.M)
        compile(code, f"{name(page)} python block{i}", "exec")


@pytest.mark.parametrize("page", ALL_PAGES, ids=name)
def test_the_names_the_page_shows_exist(page):
    """``podracer.x``, ``finance.x`` and ``locomotion.x`` in a page's code (blocks and inline) are
    attributes of the package, modules in it, or entry-point groups pyproject.toml declares."""
    text = page.read_text()
    pyproject = (ROOT / "pyproject.toml").read_text()
    spans = python_blocks(page) + re.findall(r"`([^`\n]+)`", text)
    names = sorted({m for s in spans for m in re.findall(r"(?<![\w/.-])(podracer|finance|locomotion)\.([A-Za-z_]\w*)", s)})
    if page == README:
        assert len(names) >= 10, names
    missing = []
    for package, attribute in names:
        module = importlib.import_module(package)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # old names still resolve, with a warning
            found = hasattr(module, attribute)
        if (not found and importlib.util.find_spec(f"{package}.{attribute}") is None
                and f'[project.entry-points."{package}.{attribute}"]' not in pyproject):
            missing.append(f"{package}.{attribute}")
    assert missing == [], f"{name(page)} names {missing}, which do not exist"


@pytest.mark.slow
# A block that starts a Ray says so in its id: conftest.py runs it with the other Ray tests, one at a time.
@pytest.mark.parametrize("page, code", [(page, code) for page, _, code in BLOCKS],
                         ids=[("" if page == README else f"{page.stem}-") + f"block{i}" +
                              ("-ray" if 'backend="ray"' in code else "") for page, i, code in BLOCKS])
def test_readme_block_runs_in_a_fresh_interpreter(page, code, tmp_path):
    env = {**os.environ, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1", "PODRACER_SIZE": "smoke"}
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, f"{name(page)} block failed:\n{code}\n--- stderr ---\n{res.stderr[-4000:]}"
