"""``locomotion.make_env``: a MuJoCo task on the backend asked for, or the best one installed."""

from __future__ import annotations

import numbers
from typing import Any

import torch

from locomotion.envpool_backend import EnvpoolVecEnv, envpool_available
from locomotion.gymnasium_backend import make_gymnasium_env
from locomotion.normalize import NormalizeObservation
from locomotion.tasks import Task, get_task
from podracer.logs import announce

BACKENDS = ("envpool", "gymnasium")  # "auto" picks the first that is installed and has the v5 tasks


def choose_backend(backend: str, task: Task) -> str:
    """``backend`` checked, or for ``"auto"`` envpool when it is installed with the v5 tasks, else
    gymnasium."""
    if backend == "auto":
        return "envpool" if envpool_available(task) else "gymnasium"
    if backend not in BACKENDS:
        raise ValueError(f"unknown locomotion backend {backend!r}; valid backends: {['auto', *BACKENDS]}")
    return backend


def choose_device(device: str | torch.device) -> torch.device:
    """``"auto"``: the GPU when torch sees one, else the CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def make_env(task: str, num_envs: int, device: str | torch.device = "auto", backend: str = "auto",
             seed: int | None = None, normalize_obs: bool = False, max_episode_steps: int | None = None,
             verbose: bool = True, **task_kwargs: Any) -> Any:
    """``num_envs`` copies of a MuJoCo task (Ant, HalfCheetah, Hopper, Walker2d, Humanoid; gymnasium
    v5 definitions) as a batched-tensor env on ``device``.

    - ``backend``: ``"envpool"`` (C++, fast), ``"gymnasium"`` (the reference), or ``"auto"``:
      envpool when installed, else gymnasium; the choice is logged (logger ``"podracer"``,
      ``verbose=False`` keeps quiet) and kept in ``env.backend``.
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
    chosen = choose_backend(backend, spec)
    device = choose_device(device)
    if chosen == "envpool":
        env: Any = EnvpoolVecEnv(spec, int(num_envs), device=device, seed=seed, max_episode_steps=max_episode_steps,
                                 **task_kwargs)
    else:
        env = make_gymnasium_env(spec, int(num_envs), device=device, seed=seed, max_episode_steps=max_episode_steps,
                                 **task_kwargs)
    if backend == "auto" and verbose:
        _announce(spec, chosen, env.device)
    return NormalizeObservation(env) if normalize_obs else env


def _announce(task: Task, backend: str, device: torch.device) -> None:
    why = "installed" if backend == "envpool" else "envpool is not installed (or lacks the v5 tasks)"
    announce(f"locomotion: {task.name} runs on backend {backend!r} ({why}), device {device}; "
             f"backend='envpool' or 'gymnasium' to choose")


__all__ = ["BACKENDS", "choose_backend", "choose_device", "make_env"]
