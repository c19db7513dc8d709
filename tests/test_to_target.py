"""Env steps and seconds to a target return: one run (train_to_target), several seeds
(seeds_to_target) and their summary, on tensor CartPole and Pendulum with small budgets."""

from __future__ import annotations

import math

import pytest

import podracer
from podracer.envs import PendulumVecEnv

TINY_PPO = dict(num_steps=8, num_minibatches=2, update_epochs=2, hidden_sizes=(16,))


def test_ppo_reaches_an_easy_cartpole_target_and_the_numbers_match_its_history():
    # 65,536 steps: the cartpole preset's α is 1e-3 since issue 38 (seed 0 reaches 100 after ~45k).
    summary = podracer.seeds_to_target("ppo", "cartpole", target=100.0, seeds=[0, 1], total_steps=65_536,
                                       eval_every=2_048)
    assert summary.reached == 2 and [r.seed for r in summary.runs] == [0, 1]
    for run in summary.runs:
        evals = run.history.dropna(subset=["eval/return_mean"])
        first = evals[evals["eval/return_mean"] >= 100.0].iloc[0]
        assert run.reached and run.steps == int(first["global_step"]) and run.seconds == first["time/train_s"]
        assert run.steps < 65_536 and run.env_steps == run.steps  # training stopped at the target
        assert run.final_return >= 100.0 and run.seconds > 0
    row = summary.row()
    steps = sorted(r.steps for r in summary.runs)
    assert (row["agent"], row["task"], row["seeds"], row["reached"]) == ("ppo", "cartpole", 2, 2)
    assert row["steps_median"] == pytest.approx(sum(steps) / 2) and row["steps_mean"] == row["steps_median"]
    assert row["steps_std"] >= 0 and row["seconds_median"] > 0
    frame = summary.to_frame()
    assert list(frame.index) == [0, 1] and frame["reached"].all()


def test_seeds_to_target_is_reproducible_in_env_steps():
    runs = [podracer.seeds_to_target("ppo", "cartpole", 100.0, seeds=[3], total_steps=32_768, eval_every=2_048)
            for _ in range(2)]
    assert runs[0].runs[0].steps == runs[1].runs[0].steps
    assert runs[0].runs[0].final_return == runs[1].runs[0].final_return


def test_a_target_out_of_reach_is_none_and_nan_in_the_summary():
    env = PendulumVecEnv(num_envs=8)
    agent = podracer.make_agent("ppo", env, seed=0, verbose=False, **TINY_PPO)
    run = podracer.train_to_target(agent, env, PendulumVecEnv(num_envs=2), target=0.0, total_steps=256,
                                   eval_every=128, seed=0)
    assert not run.reached and run.steps is None and run.seconds is None
    assert run.env_steps == 256 and math.isfinite(run.final_return) and run.final_return < 0
    row = podracer.TargetSummary("ppo", "pendulum", 0.0, [run]).row()
    assert row["reached"] == 0 and math.isnan(row["steps_median"]) and math.isnan(row["seconds_mean"])
    assert row["env_steps"] == 256


@pytest.mark.parametrize("target", [float("nan"), float("inf"), True, "-250", None])
def test_a_bad_target_is_refused(target):
    env = PendulumVecEnv(num_envs=2)
    with pytest.raises(ValueError, match="target must be a finite return"):
        podracer.train_to_target(podracer.make_agent("ppo", env, verbose=False), env, env, target)


def test_bad_inputs_name_the_fix():
    env = PendulumVecEnv(num_envs=2)
    agent = podracer.make_agent("ppo", env, verbose=False, **TINY_PPO)
    with pytest.raises(ValueError, match="needs an eval_env"):
        podracer.train_to_target(agent, env, None, -250.0)
    with pytest.raises(ValueError, match="eval_every must be a positive"):
        podracer.train_to_target(agent, env, env, -250.0, total_steps=64, eval_every=0)
    with pytest.raises(ValueError, match="non-empty list"):
        podracer.seeds_to_target("ppo", "pendulum", -250.0, seeds=[])
    with pytest.raises(ValueError, match="repeat a seed"):
        podracer.seeds_to_target("ppo", "pendulum", -250.0, seeds=[0, 0])
    with pytest.raises(ValueError, match="no preset for 'Pendulum-v1': give num_envs and total_steps"):
        podracer.seeds_to_target("ppo", "Pendulum-v1", -250.0, seeds=[0])
    with pytest.raises(ValueError, match="unknown agent"):
        podracer.seeds_to_target("nope", "pendulum", -250.0, seeds=[0])
