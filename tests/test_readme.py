"""Every ```python block in the README runs as written, each in a fresh interpreter, as a newcomer
would paste it. The blocks are sized to run in seconds (preset budgets with a target return, a
short finance run), so they run here exactly as printed. The fast checks (no `slow` mark) make
sure those runs cover every Python example and that the names the README shows exist."""

import importlib
import importlib.util
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
TEXT = README.read_text()
BLOCKS = re.findall(r"^```python\n(.*?)^```", TEXT, flags=re.S | re.M)


def fenced_blocks(text: str) -> list[tuple[str, str]]:
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
    assert tag is None, f"README.md: a ```{tag} block is never closed"
    return blocks


def test_every_python_example_is_a_block_the_run_test_runs():
    """The run test below is parametrised over BLOCKS (```python at the start of a line). Python
    under another tag (```py, ```pycon, no tag) or behind an indented fence would never run."""
    blocks = fenced_blocks(TEXT)
    assert {tag for tag, _ in blocks} <= {"python", "bash", ""}, [tag for tag, _ in blocks]
    assert [body for tag, body in blocks if tag == "python"] == BLOCKS, "a ```python block the run test misses"
    assert len(BLOCKS) >= 3
    for tag, body in blocks:
        if tag != "python":
            assert not re.search(r"^\s*(import \w|from [\w.]+ import )", body, flags=re.M), (
                f"a ```{tag} block holds Python, which the run test skips: tag it ```python\n{body}")
    for i, code in enumerate(BLOCKS):
        compile(code, f"README.md python block{i}", "exec")


def test_the_names_the_readme_shows_exist():
    """``podracer.x``, ``finance.x`` and ``locomotion.x`` in the README's code (blocks and inline)
    are attributes of the package, modules in it, or entry-point groups pyproject.toml declares."""
    pyproject = (README.parent / "pyproject.toml").read_text()
    spans = BLOCKS + re.findall(r"`([^`\n]+)`", TEXT)
    names = sorted({m for s in spans for m in re.findall(r"(?<![\w/.-])(podracer|finance|locomotion)\.([A-Za-z_]\w*)", s)})
    assert len(names) >= 10, names
    missing = []
    for package, name in names:
        module = importlib.import_module(package)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # old names still resolve, with a warning
            found = hasattr(module, name)
        if (not found and importlib.util.find_spec(f"{package}.{name}") is None
                and f'[project.entry-points."{package}.{name}"]' not in pyproject):
            missing.append(f"{package}.{name}")
    assert missing == [], f"README.md names {missing}, which do not exist"


@pytest.mark.slow
# A block that starts a Ray says so in its id: conftest.py runs it with the other Ray tests, one at a time.
@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" + ("-ray" if 'backend="ray"' in block else "")
                                              for i, block in enumerate(BLOCKS)])
def test_readme_block_runs_in_a_fresh_interpreter(code, tmp_path):
    env = {**os.environ, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1", "PODRACER_SIZE": "smoke"}
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, f"README block failed:\n{code}\n--- stderr ---\n{res.stderr[-4000:]}"
