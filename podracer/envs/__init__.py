"""Batched-tensor environments: the protocol, tensor Pendulum and CartPole, the gymnasium adapter."""

from __future__ import annotations

from podracer.envs.base import AUTORESET_MODE, TensorVecEnv, check_actions, parse_device, resolve_device
from podracer.envs.cartpole import CartPoleVecEnv
from podracer.envs.checker import EnvProtocolError, check_env
from podracer.envs.gym_adapter import GymVecEnvAdapter, make_gym_env
from podracer.envs.pendulum import PendulumVecEnv
from podracer.envs.wrappers import RecordEpisodeStatistics

from podracer.envs.registry import EnvFactory, env_factory, make_env, register_env, registered_envs

# Stores (tournament.yaml) and pickles name make_env by its public path, which outlives the module
# that happens to define it (as numpy sets __module__ on its public functions).
make_env.__module__ = "podracer.envs"

# The tensor envs the core ships. Domains register theirs when imported (see podracer.plugins).
TENSOR_ENVS = {"pendulum": PendulumVecEnv, "cartpole": CartPoleVecEnv}
for _name, _cls in TENSOR_ENVS.items():
    register_env(_name, _cls)


__all__ = [
    "AUTORESET_MODE", "CartPoleVecEnv", "EnvFactory", "EnvProtocolError", "GymVecEnvAdapter", "PendulumVecEnv",
    "RecordEpisodeStatistics", "TENSOR_ENVS", "TensorVecEnv", "check_actions", "check_env", "env_factory",
    "make_env", "make_gym_env", "register_env", "registered_envs", "parse_device", "resolve_device",
]
