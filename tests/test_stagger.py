"""Staggered time limits (issue 38): training starts each sub-env's time-limit counter at a random
step so that truncations spread over time; evaluation keeps whole episodes from step 0, and the
first, shortened episodes stay out of training's episode statistics."""

from __future__ import annotations

import pytest
import torch

import podracer
from podracer.envs import CartPoleVecEnv, PendulumVecEnv, RecordEpisodeStatistics, TensorVecEnv


@pytest.mark.parametrize("make,limit", [(PendulumVecEnv, 200), (CartPoleVecEnv, 500)], ids=["pendulum", "cartpole"])
def test_offsets_are_spread_over_the_time_limit_and_seeded(make, limit):
    env = make(512)
    obs, _ = env.reset(seed=0)
    state = env.state.clone()
    offsets = env.stagger_time_limits()
    assert offsets.shape == (512,) and torch.equal(env.elapsed, offsets)
    assert 0 <= int(offsets.min()) and int(offsets.max()) < limit
    # Spread over the whole limit: every quarter of it holds about a quarter of the sub-envs.
    quarters = torch.bincount(offsets * 4 // limit, minlength=4)
    assert (quarters > 512 / 4 * 0.7).all(), quarters.tolist()
    assert torch.equal(env.state, state), "staggering moves the counters only, not the reset state"
    env.reset(seed=0)
    assert torch.equal(env.stagger_time_limits(), offsets)
    env.reset(seed=1)
    assert not torch.equal(env.stagger_time_limits(), offsets)


def test_staggered_pendulum_truncates_each_sub_env_after_its_remaining_steps_then_every_200():
    env = PendulumVecEnv(64)
    env.reset(seed=3)
    offsets = env.stagger_time_limits()
    ends = [[] for _ in range(64)]
    for t in range(1, 401):
        _, _, term, trunc, _ = env.step(torch.zeros(64, 1))
        assert not term.any()
        for i in trunc.nonzero().flatten().tolist():
            ends[i].append(t)
    for i, offset in enumerate(offsets.tolist()):
        assert ends[i] == [200 - offset, 400 - offset] if offset else ends[i] == [200, 400]
    # Never all together: at most a few sub-envs truncate on any one step.
    assert max(sum(t in e for e in ends) for t in range(1, 401)) <= 4


def test_env_without_a_time_limit_counter_is_left_alone():
    class NoCounter(TensorVecEnv):
        pass

    assert NoCounter(4).stagger_time_limits() is None
    assert RecordEpisodeStatistics(NoCounter(4)).stagger_time_limits() is None


def test_partial_first_episodes_stay_out_of_the_episode_statistics():
    env = RecordEpisodeStatistics(PendulumVecEnv(32))
    env.reset(seed=0)
    offsets = env.stagger_time_limits()
    for _ in range(400):
        env.step(torch.zeros(32, 1))
    returns, lengths = env.pop_finished()
    # Each sub-env finished one shortened episode (left out) and one whole one; those started at
    # step 0 finished two whole ones.
    assert (lengths == 200).all() and len(lengths) == 32 + int((offsets == 0).sum())
    assert torch.isfinite(returns).all()


def test_a_staggered_episode_that_terminates_before_its_limit_is_recorded():
    env = RecordEpisodeStatistics(CartPoleVecEnv(64))
    env.reset(seed=0)
    offsets = env.stagger_time_limits()
    terminated_first = torch.zeros(64, dtype=torch.bool)
    truncated_first = torch.zeros(64, dtype=torch.bool)
    for _ in range(40):  # always pushing left: the pole falls within ~10 steps
        _, _, term, trunc, _ = env.step(torch.zeros(64, dtype=torch.long))
        fresh = ~(terminated_first | truncated_first)
        truncated_first |= fresh & trunc & ~term
        terminated_first |= fresh & term
    returns, lengths = env.pop_finished()
    assert truncated_first.sum() == int((offsets > 490).sum() - (terminated_first & (offsets > 490)).sum())
    assert len(lengths) >= int(terminated_first.sum()) and (lengths < 40).all()


def test_training_staggers_and_evaluation_keeps_whole_episodes_from_step_0():
    env, eval_env = PendulumVecEnv(16, max_episode_steps=40), PendulumVecEnv(4)  # short episodes: a cheap test
    agent = podracer.make_agent("ppo", env, seed=0, verbose=False, preset=None, num_steps=16, num_minibatches=1,
                                update_epochs=1, hidden_sizes=(8,))
    rows = list(podracer.iterate_training(agent, env, 16 * 16 * 6, eval_env=eval_env, eval_every=16 * 16 * 3,
                                          seed=0))
    assert len(set(env.elapsed.tolist())) > 8, "the training env's counters are spread"
    assert [r["eval/length_mean"] for r in rows if "eval/return_mean" in r] == [200, 200]
    assert bool((eval_env.elapsed == eval_env.elapsed[0]).all()), "the eval env was never staggered"
    lengths = [r["charts/episodic_length"] for r in rows if "charts/episodic_length" in r]
    assert lengths and all(n == 40 for n in lengths), "partial episodes stayed out of the training statistics"
    # Off on request: every sub-env at the same step.
    env = PendulumVecEnv(16)
    agent = podracer.make_agent("ppo", env, seed=0, verbose=False, preset=None, num_steps=16, num_minibatches=1,
                                update_epochs=1, hidden_sizes=(8,))
    next(podracer.iterate_training(agent, env, 256, seed=0, stagger_time_limits=False))
    assert env.elapsed.tolist() == [16] * 16


def test_staggered_training_is_deterministic_under_a_seed():
    def run() -> list[float]:
        podracer.seed_everything(0)
        env = PendulumVecEnv(8, max_episode_steps=40)
        agent = podracer.make_agent("ppo", env, seed=0, verbose=False, preset=None, num_steps=16,
                                    num_minibatches=1, update_epochs=1, hidden_sizes=(8,))
        _, history = podracer.train(agent, env, 8 * 16 * 8, seed=0, progress=False)
        return history["charts/episodic_return"].dropna().tolist()

    first = run()
    assert first and first == run()
