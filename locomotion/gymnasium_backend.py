"""Backend ``"gymnasium"``: gymnasium's own MuJoCo v5 tasks in a vector env, through Podracer's
gymnasium adapter (same-step autoreset, dense ``final_obs``).

The reference definitions, and the fallback when envpool is missing. Slower than envpool: one
Python MuJoCo env per sub-env, stepped in turn (``vectorization_mode="async"`` runs them in
subprocesses instead).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch

from locomotion.optional import import_optional
from locomotion.tasks import Task
from podracer.deprecation import renamed_function
from podracer.envs import GymVecEnvAdapter
from podracer.envs.gym_adapter import same_step_vector_env


class GymnasiumVecEnv(GymVecEnvAdapter):
    """The gymnasium adapter, plus the task name and the seed given at construction.

    ``seed`` given here applies to the first ``reset()`` (sub-env i gets seed + i), so
    ``make_env(..., seed=s).reset()`` equals ``reset(seed=s)``, as with envpool.
    """

    backend = "gymnasium"

    def __init__(self, vec_env: gym.vector.VectorEnv, task: Task, device: str | torch.device = "cpu",
                 seed: int | None = None, max_episode_steps: int | None = None, validate_actions: bool = True):
        super().__init__(vec_env, device=device, validate_actions=validate_actions)
        self.task = task.key  # make_agent picks presets by this name
        self.max_episode_steps = int(max_episode_steps or task.max_episode_steps)
        self._first_seed = seed

    def reset(self, seed: int | None = None, options: dict | None = None):
        if seed is None:
            seed = self._first_seed
        self._first_seed = None
        return super().reset(seed=seed, options=options)


def gymnasium_env(task: Task, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None,
                  max_episode_steps: int | None = None, vectorization_mode: str = "sync",
                  **task_kwargs: Any) -> GymnasiumVecEnv:
    """``task`` as gymnasium's v5 env in a same-step-autoreset vector env, in the tensor protocol
    (the core's ``same_step_vector_env``, as ``podracer.make_gym_env`` builds it, plus the task's
    name, seed and time limit). ``task_kwargs`` are the v5 env's options (``reset_noise_scale=0.0``, ...)."""
    import_optional("mujoco", "gymnasium")
    steps = int(max_episode_steps or task.max_episode_steps)
    vec = same_step_vector_env(task.gym_id, num_envs, vectorization_mode, max_episode_steps=steps, **task_kwargs)
    return GymnasiumVecEnv(vec, task, device=device, seed=seed, max_episode_steps=steps)


# The 1.0 name of gymnasium_env (deprecated: it read like a second podracer.make_gym_env).
make_gymnasium_env = renamed_function("locomotion.make_gymnasium_env", gymnasium_env)
"""Deprecated (renamed in 1.1, removed in 1.3): the old name of ``gymnasium_env``; calling it warns."""


__all__ = ["GymnasiumVecEnv", "gymnasium_env", "make_gymnasium_env"]
