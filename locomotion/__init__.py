"""Podracer locomotion: MuJoCo tasks (Ant, HalfCheetah, Hopper, Walker2d, Humanoid; gymnasium v5
definitions) in the batched-tensor protocol, so agents, ``podracer.train`` and the tournament work
unchanged::

    env = locomotion.make_env("HalfCheetah", 64)              # backend "auto": the best installed, logged
    env = locomotion.make_env("Ant", 64, backend="gymnasium", seed=0, normalize_obs=True)

Backends: ``envpool`` (C++ MuJoCo on the CPU; its next-step autoreset converted to same-step),
``gymnasium`` (gymnasium's own v5 envs in a vector env) and ``warp`` (MuJoCo Warp: all sub-envs as
worlds of one batched simulation, on the GPU; CPU works, slowly). Needs
``pip install "podracer-rl[locomotion]"`` (``[warp]`` for warp); a missing package is an error that
says so.
``isaaclab`` and ``isaacgym`` adapt NVIDIA's simulators (Ant and Humanoid; their own task
definitions, not v5, so returns do not compare); they need NVIDIA's packages and GPU, and only
their conversion to the protocol is tested here, against fakes.
"""

from locomotion.envpool_backend import EnvpoolVecEnv, envpool_available
from locomotion.gymnasium_backend import GymnasiumVecEnv, gymnasium_env, make_gymnasium_env
from locomotion.isaacgym_backend import IsaacGymVecEnv, isaacgym_available
from locomotion.isaaclab_backend import IsaacLabVecEnv, isaaclab_available
from locomotion.make import BACKENDS, choose_backend, make_env
from locomotion.normalize import NormalizeObservation
from locomotion.optional import INSTALL_HINT
from locomotion.render import gl_backend, render_rollout, save_gif, show_frames
from locomotion.tasks import TASKS, Task, get_task, is_task
from locomotion.warp_backend import WarpVecEnv, warp_available

__all__ = [
    "BACKENDS", "EnvpoolVecEnv", "GymnasiumVecEnv", "INSTALL_HINT", "IsaacGymVecEnv", "IsaacLabVecEnv",
    "NormalizeObservation", "TASKS", "Task", "choose_backend", "envpool_available", "get_task", "gl_backend",
    "is_task", "render_rollout", "save_gif", "show_frames",
    "isaacgym_available", "isaaclab_available", "make_env", "gymnasium_env", "make_gymnasium_env", "WarpVecEnv", "warp_available",
]


def _register() -> None:
    """Plug into podracer: ``podracer.make_env("HalfCheetah")`` for every task, the agent presets of
    ``locomotion/presets.yaml``, and ``make_env`` as an env factory a stored tournament may name.
    Runs on import; podracer imports this package by itself when a lookup needs it (the
    ``podracer.domains`` entry point in ``pyproject.toml``)."""
    import functools
    from pathlib import Path

    import podracer
    from podracer.tournament import register_factory

    for task in TASKS.values():
        podracer.register_env(task.name, functools.partial(make_env, task.name))
    podracer.register_presets(Path(__file__).with_name("presets.yaml"))
    register_factory(make_env)
    register_factory("locomotion:make_env")  # the name a store written by hand may use


_register()
