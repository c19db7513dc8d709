"""The batched-tensor env protocol: dynamics equal to gymnasium's, autoreset, checker, bad input."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from podracer.envs import (CartPoleVecEnv, EnvProtocolError, PendulumVecEnv, RecordEpisodeStatistics, check_env,
                           make_env, make_gym_env)


def test_pendulum_dynamics_match_gymnasium():
    rng = np.random.default_rng(0)
    n = 64
    states = np.stack([rng.uniform(-np.pi, np.pi, n), rng.uniform(-8, 8, n)], axis=1)
    actions = rng.uniform(-3, 3, (n, 1))  # beyond the bounds too: both must clip
    env = PendulumVecEnv(n)
    env.reset(seed=0)
    env.state = torch.tensor(states, dtype=torch.float32)
    obs, rew, term, trunc, _ = env.step(torch.tensor(actions, dtype=torch.float32))
    ref = gym.make("Pendulum-v1").unwrapped
    ref.reset(seed=0)
    for i in range(n):
        ref.state = states[i].copy()
        r_obs, r_rew, r_term, _, _ = ref.step(actions[i].astype(np.float32))
        np.testing.assert_allclose(obs[i].numpy(), r_obs, rtol=1e-4, atol=1e-4)
        assert rew[i].item() == pytest.approx(r_rew, rel=1e-4, abs=1e-4)
        assert bool(term[i]) == r_term
    assert not trunc.any()


def test_pendulum_truncates_at_200_with_final_obs():
    env = PendulumVecEnv(3)
    obs, _ = env.reset(seed=1)
    for t in range(200):
        obs, _, term, trunc, info = env.step(torch.zeros(3, 1))
        assert not term.any()
        if t < 199:
            assert not trunc.any()
            assert torch.equal(info["final_obs"], obs)
    assert trunc.all() and info["_final_obs"].all()
    # The returned obs is the reset observation, not the final one.
    assert not torch.allclose(info["final_obs"], obs)


def test_cartpole_dynamics_match_gymnasium():
    rng = np.random.default_rng(1)
    n = 128
    states = rng.uniform([-2.6, -2, -0.25, -2], [2.6, 2, 0.25, 2], (n, 4))
    actions = rng.integers(0, 2, n)
    env = CartPoleVecEnv(n)
    env.reset(seed=0)
    env.state = torch.tensor(states, dtype=torch.float32)
    _, rew, term, _, info = env.step(torch.tensor(actions))
    ref = gym.make("CartPole-v1").unwrapped
    ref.reset(seed=0)
    checked_terminal = 0
    for i in range(n):
        ref.state = states[i].copy()
        ref.steps_beyond_terminated = None
        r_obs, r_rew, r_term, _, _ = ref.step(int(actions[i]))
        np.testing.assert_allclose(info["final_obs"][i].numpy(), r_obs, rtol=1e-5, atol=1e-5)
        assert rew[i].item() == r_rew
        assert bool(term[i]) == r_term
        checked_terminal += r_term
    assert 0 < checked_terminal < n  # the sample covers both outcomes


def test_cartpole_episode_lengths_match_time_limit():
    env = RecordEpisodeStatistics(CartPoleVecEnv(4, max_episode_steps=20))
    obs, _ = env.reset(seed=0)
    # Balance-ish policy keeps the pole up for 20 steps: every episode is truncated at 20.
    for _ in range(40):
        obs, _, term, trunc, _ = env.step((obs[:, 2] + obs[:, 3] > 0).long())
    returns, lengths = env.pop_finished()
    assert len(returns) == 8 and (lengths == 20).all() and (returns == 20).all()


@pytest.mark.parametrize("make", [lambda: PendulumVecEnv(16), lambda: CartPoleVecEnv(16),
                                  lambda: make_gym_env("CartPole-v1", 3), lambda: make_env("Pendulum-v1", 2)])
def test_envs_pass_the_checker(make):
    check_env(make(), num_steps=450)


def test_reset_seed_reproducible_and_distinct():
    env = CartPoleVecEnv(8)
    a, _ = env.reset(seed=3)
    b, _ = env.reset(seed=3)
    c, _ = env.reset(seed=4)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert len(set(map(tuple, a.tolist()))) == 8  # sub-envs differ


def test_gym_adapter_dense_final_obs_and_seeding():
    env = make_gym_env("CartPole-v1", 2)
    obs, _ = env.reset(seed=5)
    ref = gym.make("CartPole-v1")
    r0, _ = ref.reset(seed=6)  # sub-env 1 is seeded with seed + 1
    np.testing.assert_allclose(obs[1].numpy(), r0)
    done_seen = False
    for _ in range(300):
        obs, _, term, trunc, info = env.step(torch.ones(2, dtype=torch.long))
        done = term | trunc
        assert info["final_obs"].shape == (2, 4)
        if done.any():
            done_seen = True
            assert not torch.equal(info["final_obs"][done], obs[done])
    assert done_seen


@pytest.mark.parametrize("bad, match", [
    (torch.zeros(4), r"expected actions of shape \(4, 1\), got \(4,\)"),
    (torch.zeros(3, 1), r"expected actions of shape \(4, 1\), got \(3, 1\)"),
    (torch.zeros(4, 1, dtype=torch.long), r"expected floating actions"),
    (torch.tensor([[0.0], [float("nan")], [0.0], [0.0]]), r"NaN or inf in sub-envs \[1\]"),
    (torch.tensor([[0.0], [0.0], [float("inf")], [0.0]]), r"NaN or inf in sub-envs \[2\]"),
    (np.zeros((4, 1), np.float32), r"expected actions as a torch.Tensor"),
])
def test_bad_box_actions_raise_and_leave_state(bad, match):
    env = PendulumVecEnv(4)
    env.reset(seed=0)
    before = env.state.clone(), env.elapsed.clone()
    with pytest.raises(ValueError, match=match):
        env.step(bad)
    assert torch.equal(env.state, before[0]) and torch.equal(env.elapsed, before[1])


@pytest.mark.parametrize("bad, match", [
    (torch.zeros(4), r"expected integer actions"),
    (torch.zeros(4, 1, dtype=torch.long), r"expected actions of shape \(4,\), got \(4, 1\)"),
    (torch.tensor([0, 1, 2, 0]), r"expected actions in \[0, 1\]"),
])
def test_bad_discrete_actions_raise(bad, match):
    env = CartPoleVecEnv(4)
    env.reset(seed=0)
    before = env.state.clone()
    with pytest.raises(ValueError, match=match):
        env.step(bad)
    assert torch.equal(env.state, before)


def test_wrong_device_is_named():
    env = PendulumVecEnv(2)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"expected actions on device cpu, got meta"):
        env.step(torch.zeros(2, 1, device="meta"))


def test_checker_catches_a_broken_env():
    class NoFinalObs(PendulumVecEnv):
        def step(self, actions):
            obs, r, te, tr, info = super().step(actions)
            return obs, r, te, tr, {}

    with pytest.raises(EnvProtocolError, match="final_obs"):
        check_env(NoFinalObs(2))


def test_make_env_unknown_name():
    with pytest.raises(ValueError, match="unknown env 'Pendulm'"):
        make_env("Pendulm")
