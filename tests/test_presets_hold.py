"""Presets hold what they reach (issue 38): the first-reach / holding-target arithmetic the speed
benchmarks share, and PPO trained past its preset's budget staying within the margin of its target."""

from __future__ import annotations

import math

import pytest

import podracer
from podracer.holding import EvalLog, history_reach_and_hold, reach_and_hold, returns_at


def test_first_reach_and_holding_target_are_read_off_the_evaluations():
    steps, seconds = [10, 20, 30, 40, 50, 60], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    # Reached at 20, fell 100 below at 30, back at 40 and within a margin of 50 from there on.
    r = reach_and_hold(steps, seconds, [-400, -240, -350, -245, -280, -260], target=-250, margin=50)
    assert (r.first_steps, r.first_seconds) == (20, 2.0)
    assert (r.hold_steps, r.hold_seconds) == (40, 4.0)
    assert r.reached and not r.holds and r.min_after_reach == -350 and r.last_return == -260
    # Never more than the margin below after the first reach: it holds from the first reach.
    r = reach_and_hold(steps, seconds, [-400, -240, -299, -245, -280, -260], target=-250, margin=50)
    assert r.holds and r.hold_steps == r.first_steps == 20
    # The last evaluation fell out of the margin: no holding target, even though it was reached.
    r = reach_and_hold(steps, seconds, [-400, -240, -245, -245, -245, -301], target=-250, margin=50)
    assert r.reached and r.hold_steps is None and r.hold_seconds is None and not r.holds
    # Never reached: neither, and no minimum after reaching.
    r = reach_and_hold(steps[:2], seconds[:2], [-400, -300], target=-250, margin=50)
    assert not r.reached and r.hold_steps is None and math.isnan(r.min_after_reach)


def test_reach_and_hold_rejects_bad_input_with_a_clear_message():
    with pytest.raises(ValueError, match="margin must be >= 0"):
        reach_and_hold([1], [1.0], [0.0], target=0.0, margin=-1)
    with pytest.raises(ValueError, match="one entry per evaluation"):
        reach_and_hold([1, 2], [1.0], [0.0, 1.0], target=0.0, margin=1)
    with pytest.raises(ValueError, match="target must be a finite"):
        reach_and_hold([1], [1.0], [0.0], target=math.nan, margin=1)
    with pytest.raises(ValueError, match="hold_evals"):
        EvalLog(0.0, 1.0, hold_evals=-1)


def test_eval_log_is_done_once_the_target_held_for_the_asked_evaluations():
    log = EvalLog(target=100.0, margin=10.0, hold_evals=2)
    for i, value in enumerate([50, 100, 80, 95, 100, 92]):
        assert not log.done()
        log.add(steps=(i + 1) * 1000, seconds=float(i + 1), value=value)
    # 100 at 2k, then 80 (out of the margin); 95 at 4k is under the target; 100 at 5k, 92 at 6k: one after.
    assert not log.done() and log.result().first_steps == 2000 and log.result().hold_steps == 5000
    log.add(7000, 7.0, 105)
    assert log.done() and log.result().hold_seconds == 5.0


def test_history_reading_matches_the_train_history_and_budget_multiples():
    env = podracer.make_env("cartpole", num_envs=8)
    agent = podracer.make_agent("ppo", env, seed=0, verbose=False, num_steps=16, num_minibatches=2,
                                update_epochs=1, hidden_sizes=(16,))
    _, history = podracer.train(agent, env, 512, eval_env=podracer.make_env("cartpole", num_envs=2),
                                eval_every=128, seed=0, progress=False)
    evals = history.dropna(subset=["eval/return_mean"])
    r = history_reach_and_hold(history, target=float(evals["eval/return_mean"].max()), margin=0.0)
    assert r.reached and r.first_steps in evals["global_step"].astype(int).tolist()
    at = returns_at(history, 256, 2)
    assert at[1] == evals[evals["global_step"] >= 256]["eval/return_mean"].iloc[0]
    assert at[2] == evals["eval/return_mean"].iloc[-1]


def test_check_hold_trains_and_scores_on_the_given_env_factories(monkeypatch):
    """A task scored elsewhere than on make_env(task)'s episodes (finance's validation years): the
    factories get the scaled sub-env counts, and the evaluations are the given eval env's."""
    from podracer.agents import registry
    from podracer.holding import check_hold

    monkeypatch.setitem(registry._PRESETS, ("ppo", "tiny_hold_task"), podracer.Preset(
        4, 128, {"num_steps": 16, "num_minibatches": 2, "update_epochs": 1, "hidden_sizes": [16]}, "test"))
    built, scored = [], []

    def make_train_env(n):
        built.append(n)
        return podracer.make_env("cartpole", num_envs=n)

    def make_eval_env():
        scored.append(True)
        return podracer.make_env("cartpole", num_envs=1)

    check = check_hold("ppo", "tiny_hold_task", target=1.0, margin=0.0, seeds=[0], env_scales=(1.0, 0.5),
                       budget_factor=2, evals_per_budget=2, make_train_env=make_train_env, make_eval_env=make_eval_env)
    assert built == [4, 2] and len(scored) == 2
    assert [r.num_envs for r in check.runs] == [4, 2] and check.holds  # any CartPole episode returns >= 1
    assert all(r.returns_at[2] >= 1.0 for r in check.runs)


# ---------------------------------------------------------------------------- PPO past its budget
@pytest.fixture
def one_thread():
    """One torch thread: the results are deterministic for a fixed thread count."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# (task, seed, budgets trained, target, margin): the seed is one that fell after reaching its target
# with the 1.1 presets (pendulum seed 2: -254 at 50k, then -555 at 250k in issue 38; here -245 at 31k,
# then -406 and -647 at 61k and 121k; cartpole seed 0: 500 at 61k, then 221-393 from 82k to 370k).
# The current presets train with staggered time limits, podracer.train's default; the 1.1 pendulum
# preset trained so fails here too (-349, -386 and -297 from 151k to 212k), so the case checks the
# preset's settings, not only the staggering.
PAST_BUDGET = [("pendulum", 2, 2, -250.0, 50.0), ("cartpole", 0, 2, 475.0, 25.0)]


@pytest.mark.slow
@pytest.mark.parametrize("task,seed,budgets,target,margin", PAST_BUDGET, ids=[p[0] for p in PAST_BUDGET])
def test_ppo_preset_holds_its_target_past_the_budget(task, seed, budgets, target, margin, one_thread):
    """Issue 38: a user who trains on past the preset's budget keeps what the preset reached: every
    evaluation from the first reach on, through the budget and past it, is within ``margin`` of the
    target (the holding criterion, on one seed)."""
    preset = podracer.get_preset("ppo", task)
    podracer.seed_everything(seed)
    env = podracer.make_env(task, num_envs=preset.num_envs)
    agent = podracer.make_agent("ppo", env, seed=seed, verbose=False)
    _, history = podracer.train(agent, env, budgets * preset.total_steps, eval_env=podracer.make_env(task, num_envs=10),
                                eval_every=preset.total_steps // 5, seed=seed, progress=False)
    evals = history.dropna(subset=["eval/return_mean"])
    result = history_reach_and_hold(history, target, margin)
    past = evals[evals["global_step"] >= preset.total_steps]["eval/return_mean"]
    trace = evals["eval/return_mean"].round().astype(int).tolist()
    assert result.reached, f"PPO never reached {target} on {task}: evaluations {trace}"
    assert len(past) >= 5 and (past >= target - margin).all(), (
        f"PPO on {task} fell more than {margin} below {target} after its budget: evaluations {trace}")
    assert result.holds, f"PPO on {task} fell more than {margin} below {target} after reaching it: evaluations {trace}"
