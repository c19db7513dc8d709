"""The benchmark scripts keep running: each at its smallest size, in this process (its ``main``),
on every device torch sees, so a GPU-only code path is exercised as far as a CPU allows. They
measure nothing here: no timed asserts, only that they run and their own checks hold (the
backtest's agreement with ``finance.buy_and_hold``; the FinRL comparison's shared evaluation, its
FinRL side only where ``make .venv/finrl-src`` put FinRL's env file; the learner bound's row for
every agent)."""

import importlib.util
import math
import os
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def script(name: str):
    """A benchmark script as a module (they are scripts, not an importable API)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def _restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("name", ["gpu", "backtest_throughput", "ppo_pendulum"])
def test_a_device_torch_does_not_know_is_a_usage_error(name, capsys):
    """Found by probing: ``gpu.py --device cuda`` on a machine without one ended in torch's
    AssertionError, ``--device gpu`` in its list of every backend."""
    with pytest.raises(SystemExit) as exit_:
        script(name).main(["--device", "gpu"])
    assert exit_.value.code == 2 and "argument --device: unknown device 'gpu'" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_gpu_script_runs_tiny(device, capsys):
    script("gpu").main(["--device", device, "--tiny", "--skip-warp"])
    out = capsys.readouterr().out
    for part in ("## 1.", "## 2.", "## 3.", "## 4. MuJoCo Warp: SKIPPED"):
        assert part in out


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_backtest_throughput_runs_tiny(device):
    results = script("backtest_throughput").main(["--sizes", "3", "--repeats", "1", "--device", device,
                                                  "--skip-vectorbt"])
    assert set(results) == {3}


@pytest.mark.slow
def test_vs_finrl_tiny_runs(monkeypatch):
    monkeypatch.setenv("FINRL_ENV_FILE", os.environ.get("FINRL_ENV_FILE", ""))  # the script may set it: undone after
    results = script("vs_finrl").main(["--tiny"])
    assert {"podracer"} <= set(results)


@pytest.mark.slow
def test_learner_bound_tiny_runs(capsys):
    bench = script("learner_bound")
    results = bench.main(["--tiny"])
    out = capsys.readouterr().out
    assert set(results) == set(bench.CASES)  # every agent's update and its bare arithmetic were built and run
    for name, r in results.items():
        for key in ("agent_per_s", "bare_per_s", "agent_of_bare", "matmul_share"):
            assert math.isfinite(r[key]) and r[key] > 0, (name, key, r[key])
    lines = out.splitlines()
    for name in bench.CASES:  # one table row each, with the networks it measured
        assert any(line.startswith(f"{name} ") and "batch" in line for line in lines), name
    assert "load average before" in out and "Load average after" in out


def test_tournament_vs_single_builds_the_planted_arms(capsys):
    """``--tasks planted``: the arms' market holds the planted signal, its eval env is scored by the
    trading default (the windowed fitness), the truth comes from a fresh sample; no training here."""
    from finance import demo
    from finance.planted import PLANTED_STRENGTHS, SIGNAL_FEATURE
    from podracer.tournament.fitness import EvalReturn, make_fitness, resolve_auto

    bench = script("tournament_vs_single")
    market, fresh = bench.planted_markets("moderate")
    assert market.ic == fresh.ic == PLANTED_STRENGTHS["moderate"]
    assert list(market.features["train"].columns.get_level_values(0).unique()) == [SIGNAL_FEATURE]
    assert len(fresh.expected_return["test"]) > 2_500  # 12 fresh years, not the arms' test years
    day = market.close["test"].index[0]
    assert (market.close["test"].loc[day] != fresh.close["test"].loc[day]).all()  # another draw of the market
    env, valid = demo.train_env(market), demo.eval_env(market)
    assert env.num_envs == demo.PRESET.num_envs and valid.num_envs == 1
    assert not isinstance(make_fitness(resolve_auto("auto", lambda: valid), valid), EvalReturn)
    with pytest.raises(SystemExit):  # both share one trials table: refused before any training
        bench.main(["--tasks", "stocks", "planted", "--seeds", "2"])
    assert "stocks or planted, not both" in capsys.readouterr().err
