"""Every ```python block in the README runs as written, each in a fresh interpreter, as a newcomer
would paste it. The blocks are sized to run in seconds (preset budgets with a target return, a
short finance run), so they run here exactly as printed."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.S | re.M)


def test_the_readme_has_python_blocks():
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_block_runs_in_a_fresh_interpreter(code, tmp_path):
    env = {**os.environ, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1", "PODRACER_SIZE": "smoke"}
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, f"README block failed:\n{code}\n--- stderr ---\n{res.stderr[-4000:]}"
