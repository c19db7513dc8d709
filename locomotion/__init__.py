"""Podracer locomotion: MuJoCo tasks (Ant, HalfCheetah, Hopper, Walker2d, Humanoid; gymnasium v5
definitions) in the batched-tensor protocol, so agents, ``podracer.train`` and the tournament work
unchanged::

    env = locomotion.make_env("HalfCheetah", 64)              # backend "auto": envpool, else gymnasium
    env = locomotion.make_env("Ant", 64, backend="gymnasium", seed=0, normalize_obs=True)

Backends: ``envpool`` (C++ MuJoCo on the CPU; its next-step autoreset converted to same-step) and
``gymnasium`` (gymnasium's own v5 envs in a vector env). Needs
``pip install "podracer-rl[locomotion]"``; a missing package is an error that says so.
"""

from locomotion.envpool_backend import EnvpoolVecEnv, envpool_available
from locomotion.gymnasium_backend import GymnasiumVecEnv, make_gymnasium_env
from locomotion.make import BACKENDS, choose_backend, make_env
from locomotion.normalize import NormalizeObservation
from locomotion.optional import INSTALL_HINT
from locomotion.tasks import TASKS, Task, get_task, is_task

__all__ = [
    "BACKENDS", "EnvpoolVecEnv", "GymnasiumVecEnv", "INSTALL_HINT", "NormalizeObservation", "TASKS", "Task",
    "choose_backend", "envpool_available", "get_task", "is_task", "make_env", "make_gymnasium_env",
]
