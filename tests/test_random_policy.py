"""podracer.RandomPolicy: uniform actions inside the env's action space, on its device, seeded by its
own generator, usable wherever a policy is."""

from __future__ import annotations

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

import podracer
from podracer.envs import CartPoleVecEnv, PendulumVecEnv

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _fake_env(space: gym.Space, num_envs: int = 4, device: str = "cpu") -> SimpleNamespace:
    return SimpleNamespace(single_action_space=space, num_envs=num_envs, device=torch.device(device))


@pytest.mark.parametrize("device", DEVICES)
def test_box_actions_are_in_bounds_with_the_env_shape_dtype_and_device(device):
    env = PendulumVecEnv(num_envs=64, device=device)
    obs, _ = env.reset(seed=0)
    actions = podracer.RandomPolicy(env, seed=0)(obs)
    assert actions.shape == (64, 1) and actions.dtype == torch.float32 and actions.device == env.device
    assert bool(((actions >= -2.0) & (actions <= 2.0)).all())
    env.step(actions)  # the env's own action check accepts them


def test_box_bounds_per_dimension_and_uniform():
    space = gym.spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([1.0, 5.0], np.float32))
    actions = podracer.RandomPolicy(_fake_env(space), seed=0)(torch.zeros(20_000, 3))
    assert actions.shape == (20_000, 2)
    assert bool((actions[:, 0] >= -1).all() and (actions[:, 0] <= 1).all())
    assert bool((actions[:, 1] >= 0).all() and (actions[:, 1] <= 5).all())
    torch.testing.assert_close(actions.mean(0), torch.tensor([0.0, 2.5]), atol=0.05, rtol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_discrete_actions_cover_the_space(device):
    env = CartPoleVecEnv(num_envs=256, device=device)
    obs, _ = env.reset(seed=0)
    actions = podracer.RandomPolicy(env, seed=0)(obs)
    assert actions.shape == (256,) and actions.dtype == torch.int64 and actions.device == env.device
    assert set(actions.tolist()) == {0, 1}
    env.step(actions)
    shifted = podracer.RandomPolicy(_fake_env(gym.spaces.Discrete(3, start=-1)), seed=0)(torch.zeros(1000, 2))
    assert set(shifted.tolist()) == {-1, 0, 1}


def test_one_action_per_row_of_obs():
    policy = podracer.RandomPolicy(PendulumVecEnv(num_envs=8), seed=0)
    assert policy(torch.zeros(3, 3)).shape == (3, 1)  # an evaluation copy with fewer sub-envs
    assert policy(None).shape == (8, 1)  # no batch to read: the env's num_envs


def test_seeded_draws_repeat_and_leave_torch_global_state_alone():
    env = PendulumVecEnv(num_envs=16)
    obs = torch.zeros(16, 3)
    before = torch.random.get_rng_state()
    a, b, c = (podracer.RandomPolicy(env, seed=s) for s in (7, 7, 8))
    first = a(obs)
    torch.testing.assert_close(first, b(obs), rtol=0, atol=0)
    assert not torch.equal(first, c(obs))
    assert not torch.equal(first, a(obs))  # the stream moves on
    a.seed(7)
    torch.testing.assert_close(a(obs), first, rtol=0, atol=0)
    assert torch.equal(torch.random.get_rng_state(), before)


def test_works_with_evaluate_and_is_worse_than_nothing_on_pendulum():
    env = PendulumVecEnv(num_envs=8)
    first = podracer.evaluate(podracer.RandomPolicy(env, seed=0), env, seed=1)
    again = podracer.evaluate(podracer.RandomPolicy(env, seed=0), env, seed=1)
    assert first == again and first["eval/episodes"] == 8.0
    assert -2_000 < first["eval/return_mean"] < -500  # a random pendulum swings about, far from upright
    cartpole = CartPoleVecEnv(num_envs=8)
    assert podracer.evaluate(podracer.RandomPolicy(cartpole, seed=0), cartpole, seed=1)["eval/return_mean"] < 100


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="bounded action box"):
        podracer.RandomPolicy(_fake_env(gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)))
    with pytest.raises(TypeError, match="Box and Discrete"):
        podracer.RandomPolicy(_fake_env(gym.spaces.MultiBinary(3)))
    with pytest.raises(TypeError, match="batched env"):
        podracer.RandomPolicy(gym.make("Pendulum-v1"))
