"""Start-up stays ``import torch`` plus a little: ``import podracer`` and the training loop never
import pandas or matplotlib, and every public name still imports (the tournament and the target
runs lazily, on first use). Checked in a fresh interpreter, by ``sys.modules``, not by the clock
(benchmarks/import_time.py times it)."""

import json
import subprocess
import sys

import podracer

SLOW = ("pandas", "matplotlib", "tqdm.auto", "scipy")

# The loop with a stand-in agent: a real one's first optimizer imports torch._dynamo (torch's own
# cost, about 1.5 s), which would make this the slowest test of the fast lane.
CHILD = f"""
import json, sys
import podracer, podracer.agents.ppo, podracer.agents.sac
from podracer.envs import PendulumVecEnv

class Agent:
    def train_step(self, env, obs):
        obs, *_ = env.step(obs[:, :1] * 0)
        return obs, {{"env_steps": env.num_envs}}

    def act(self, obs, deterministic=True):
        return obs[:, :1] * 0

env = PendulumVecEnv(2)
rows = list(podracer.iterate_training(Agent(), env, 4, eval_env=PendulumVecEnv(1), eval_every=2))
assert "eval/return_mean" in rows[-1]
after_training = sorted(m for m in {SLOW!r} if m in sys.modules)
from podracer import {", ".join(podracer.__all__)}
assert podracer.tournament.Tournament is Tournament and podracer.to_target.ToTarget is ToTarget
print(json.dumps({{"after_training": after_training, "dir": dir(podracer)}}))
"""


def test_training_imports_no_pandas_and_every_public_name_still_imports():
    run = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["after_training"] == []
    assert set(podracer.__all__) <= set(result["dir"])


def test_import_finance_leaves_scipy_for_the_statistics_that_use_it():
    """Every README block, lesson kernel and CLI run pays ``import finance``: scipy.stats (about a
    second of CPU) is imported by the functions that use it, not by the package."""
    child = "import sys, finance; print(sorted(m for m in ('scipy.stats', 'scipy.signal') if m in sys.modules))"
    run = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "[]"
