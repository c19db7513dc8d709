"""Batched-tensor environments: the protocol, tensor Pendulum and CartPole, the gymnasium adapter."""

from __future__ import annotations

from typing import Any

import torch

from podracer.envs.base import AUTORESET_MODE, TensorVecEnv, check_actions, resolve_device
from podracer.envs.cartpole import CartPoleVecEnv
from podracer.envs.checker import EnvProtocolError, check_env
from podracer.envs.gym_adapter import GymVecEnvAdapter, make_gym_env
from podracer.envs.pendulum import PendulumVecEnv
from podracer.envs.wrappers import RecordEpisodeStatistics

TENSOR_ENVS = {"pendulum": PendulumVecEnv, "cartpole": CartPoleVecEnv}


def make_env(name: str, num_envs: int = 1, device: str | torch.device = "cpu", **kwargs: Any):
    """A tensor env by short name ("pendulum", "cartpole"), a MuJoCo task by short name
    ("HalfCheetah", "Ant", "Hopper", "Walker2d", "Humanoid": ``locomotion.make_env``), else any
    registered gymnasium id ("Pendulum-v1", "HalfCheetah-v5") through the adapter."""
    key = name.lower()
    if key in TENSOR_ENVS:
        return TENSOR_ENVS[key](num_envs=num_envs, device=device, **kwargs)
    try:
        import locomotion  # only here: podracer does not import locomotion at import time (DESIGN.md)
    except ImportError:  # podracer installed without the locomotion package
        locomotion = None
    if locomotion is not None and key in locomotion.TASKS:
        return locomotion.make_env(name, num_envs, device=device, **kwargs)
    import gymnasium as gym

    if name not in gym.registry:
        tasks = sorted(t.name for t in locomotion.TASKS.values()) if locomotion is not None else []
        raise ValueError(
            f"unknown env {name!r}: use one of {sorted(TENSOR_ENVS)}, a locomotion task {tasks}, or a registered "
            f"gymnasium id such as 'Pendulum-v1'"
        )
    return make_gym_env(name, num_envs=num_envs, device=device, **kwargs)


__all__ = [
    "AUTORESET_MODE", "CartPoleVecEnv", "EnvProtocolError", "GymVecEnvAdapter", "PendulumVecEnv",
    "RecordEpisodeStatistics", "TENSOR_ENVS", "TensorVecEnv", "check_actions", "check_env", "make_env",
    "make_gym_env", "resolve_device",
]
