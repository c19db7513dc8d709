"""``locomotion.make_env``: a MuJoCo task on the backend asked for, or the best one installed."""

from __future__ import annotations

import numbers
from typing import Any

import torch

from locomotion.envpool_backend import EnvpoolVecEnv, envpool_available
from locomotion.gymnasium_backend import gymnasium_env
from locomotion.isaacgym_backend import isaacgym_available, isaacgym_definitions, make_isaacgym_env
from locomotion.isaaclab_backend import isaaclab_available, isaaclab_definitions, make_isaaclab_env
from locomotion.normalize import NormalizeObservation
from locomotion.tasks import Task, get_task
from podracer.envs import parse_device
from podracer.logs import announce

BACKENDS = ("warp", "isaaclab", "isaacgym", "envpool", "gymnasium")  # "auto" tries them in this order
"""The simulator backends ``make_env(backend=...)`` takes besides ``"auto"``."""
NOT_V5 = {"isaaclab": isaaclab_definitions, "isaacgym": isaacgym_definitions}  # their tasks are their own


def _warp_available(device: torch.device) -> bool:
    """MuJoCo Warp for ``"auto"``: on a GPU only (on the CPU, envpool is faster)."""
    if device.type != "cuda":
        return False
    try:
        from locomotion.warp_backend import warp_available
    except ImportError:  # not in this checkout
        return False
    return warp_available()


def choose_backend(backend: str, task: Task, device: str | torch.device = "cpu") -> str:
    """``backend`` checked, or for ``"auto"`` the first of: warp (installed, and ``device`` is a
    GPU), isaaclab, isaacgym (importable, and they have ``task``: Ant or Humanoid; not v5
    definitions), envpool (installed with the v5 tasks), gymnasium."""
    if backend == "auto":
        if _warp_available(choose_device(device)):
            return "warp"
        if isaaclab_available(task):
            return "isaaclab"
        if isaacgym_available(task):
            return "isaacgym"
        return "envpool" if envpool_available(task) else "gymnasium"
    if backend not in BACKENDS:
        raise ValueError(f"unknown locomotion backend {backend!r}; valid backends: {['auto', *BACKENDS]}")
    return backend


def choose_device(device: str | torch.device) -> torch.device:
    """``"auto"``: the GPU when torch sees one, else the CPU; any other name as it is (a ValueError
    for one torch does not know)."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return parse_device(device)


def make_env(task: str, num_envs: int, device: str | torch.device = "auto", backend: str = "auto",
             seed: int | None = None, normalize_obs: bool = False, max_episode_steps: int | None = None,
             verbose: bool = True, **task_kwargs: Any) -> Any:
    """``num_envs`` copies of a MuJoCo task (Ant, HalfCheetah, Hopper, Walker2d, Humanoid; gymnasium
    v5 definitions) as a batched-tensor env on ``device``.

    - ``backend``: ``"envpool"`` (C++, fast), ``"gymnasium"`` (the reference), ``"warp"``
      (MuJoCo Warp, on the GPU), ``"isaaclab"`` or ``"isaacgym"`` (NVIDIA's simulators; Ant and
      Humanoid only, and *their own* tasks, not gymnasium v5: returns do not compare), or
      ``"auto"``: warp on a GPU when installed, else Isaac Lab / Isaac Gym when importable and
      the task is theirs, else envpool, else gymnasium. The choice is logged (logger
      ``"podracer"``, ``verbose=False`` keeps quiet; it says when the task definition is not
      v5's) and kept in ``env.backend``.
    - ``seed``: sub-env i is seeded with seed + i at the first ``reset()``; ``None`` is random.
    - ``normalize_obs``: wrap in ``NormalizeObservation`` (running mean and std).
    - ``max_episode_steps``: the time limit (default 1000, gymnasium's); reaching it is reported
      as ``truncated``, with the last observation in ``info["final_obs"]``.
    - ``task_kwargs``: the v5 task's options, passed to the backend (``reset_noise_scale=0.0``).

    ``env.task`` is the lower-case task name (``"halfcheetah"``), which presets are keyed by.
    """
    spec = get_task(task)
    if isinstance(num_envs, bool) or not isinstance(num_envs, numbers.Integral) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive whole number, got {num_envs!r}")
    if max_episode_steps is not None and (isinstance(max_episode_steps, bool)
                                          or not isinstance(max_episode_steps, numbers.Integral) or max_episode_steps < 1):
        raise ValueError(f"max_episode_steps must be a positive whole number or None (1000), got {max_episode_steps!r}")
    device = choose_device(device)
    chosen = choose_backend(backend, spec, device)
    if chosen == "envpool":
        env: Any = EnvpoolVecEnv(spec, int(num_envs), device=device, seed=seed, max_episode_steps=max_episode_steps,
                                 **task_kwargs)
    elif chosen == "warp":
        from locomotion.warp_backend import WarpVecEnv  # imported only when asked for: it needs warp

        env = WarpVecEnv(spec, int(num_envs), device=device, seed=seed, max_episode_steps=max_episode_steps,
                         **task_kwargs)
    elif chosen == "isaaclab":
        env = make_isaaclab_env(spec, int(num_envs), device=device, seed=seed, max_episode_steps=max_episode_steps,
                                **task_kwargs)
    elif chosen == "isaacgym":
        env = make_isaacgym_env(spec, int(num_envs), device=device, seed=seed, max_episode_steps=max_episode_steps,
                                **task_kwargs)
    else:
        env = gymnasium_env(spec, int(num_envs), device=device, seed=seed, max_episode_steps=max_episode_steps,
                                 **task_kwargs)
    if backend == "auto" and verbose:
        _announce(spec, chosen, env.device)
    return NormalizeObservation(env) if normalize_obs else env


_WHY = {"warp": "MuJoCo Warp is installed and the device is a GPU", "isaaclab": "Isaac Lab is installed",
        "isaacgym": "Isaac Gym is installed and was imported before torch", "envpool": "installed",
        "gymnasium": "envpool is not installed (or lacks the v5 tasks)"}


def _announce(task: Task, backend: str, device: torch.device) -> None:
    note = f"; NOTE: {NOT_V5[backend](task)}; backend='gymnasium' for the v5 task" if backend in NOT_V5 else ""
    announce(f"locomotion: {task.name} runs on backend {backend!r} ({_WHY[backend]}), device {device}; "
             f"backend= one of {list(BACKENDS)} to choose{note}")


__all__ = ["BACKENDS", "NOT_V5", "choose_backend", "choose_device", "make_env"]
