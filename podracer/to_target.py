"""Env steps and seconds to a target return: how sample efficiency and wall-clock speed are compared.

``train_to_target`` trains one agent with ``podracer.train`` until its deterministic evaluation
reaches ``target`` (or the budget ends) and reads both numbers off the first evaluation at or above
it: env steps (summed over sub-envs) and training seconds (evaluation excluded, so that a slow
evaluation does not count against the learner). One seed proves little: ``seeds_to_target`` runs
an agent's preset for a task over several seeds and summarises how many reached the target and
the median, mean and spread of the steps and seconds they needed.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from podracer.agents import get_preset, make_agent, resolve_agent
from podracer.envs import make_env
from podracer.train import seed_everything, train


@dataclass(frozen=True)
class ToTarget:
    """One run. ``steps`` and ``seconds`` are None when no evaluation reached ``target``."""

    target: float
    steps: int | None  # env steps at the first evaluation >= target
    seconds: float | None  # training seconds (evaluation excluded) at that evaluation
    final_return: float  # the last evaluation's mean return (the one at the target, when reached)
    env_steps: int  # env steps the run took: it stops at the target or at the end of its budget
    train_s: float  # training seconds the run took, evaluation excluded
    seed: int | None = None
    history: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False, compare=False)  # podracer.train's

    @property
    def reached(self) -> bool:
        return self.steps is not None


@dataclass(frozen=True)
class TargetSummary:
    """Runs of one agent on one task over seeds; statistics are over the seeds that reached the target."""

    agent: str
    task: str
    target: float
    runs: list[ToTarget] = field(repr=False)

    @property
    def reached(self) -> int:
        return sum(r.reached for r in self.runs)

    def to_frame(self) -> pd.DataFrame:
        """One row per seed (NaN where the target was not reached)."""
        return pd.DataFrame([{"seed": r.seed, "reached": r.reached, "steps": _nan(r.steps), "seconds": _nan(r.seconds),
                              "final_return": r.final_return, "env_steps": r.env_steps, "train_s": r.train_s}
                             for r in self.runs]).set_index("seed")

    def row(self) -> dict[str, Any]:
        """The summary as one table row: ``seeds``, ``reached``, ``steps_median`` / ``_mean`` /
        ``_std`` and the same for ``seconds`` (over the seeds that reached the target; NaN when
        none did; std NaN below two), ``final_return_mean`` / ``_std`` and the mean ``env_steps``
        and ``train_s`` of the runs (all seeds)."""
        frame = self.to_frame()
        out: dict[str, Any] = {"agent": self.agent, "task": self.task, "target": self.target,
                               "seeds": len(frame), "reached": self.reached}
        for column in ("steps", "seconds"):
            hit = frame[column].dropna()
            out[f"{column}_median"] = float(hit.median()) if len(hit) else math.nan
            out[f"{column}_mean"] = float(hit.mean()) if len(hit) else math.nan
            out[f"{column}_std"] = float(hit.std()) if len(hit) > 1 else math.nan
        out["final_return_mean"] = float(frame["final_return"].mean())
        out["final_return_std"] = float(frame["final_return"].std()) if len(frame) > 1 else math.nan
        out["env_steps"] = float(frame["env_steps"].mean())
        out["train_s"] = float(frame["train_s"].mean())
        return out


def train_to_target(agent: Any, env: Any, eval_env: Any, target: float, total_steps: int | None = None,
                    eval_every: int = 10_000, seed: int | None = None, progress: bool = False) -> ToTarget:
    """Train ``agent`` on ``env`` (``podracer.train``) until a deterministic evaluation on
    ``eval_env`` reaches ``target``, or ``total_steps`` run out (``None``: the preset's budget).

    Evaluations come every ``eval_every`` env steps, so the steps to target are known to within
    ``eval_every``: lower it for a finer count, at the cost of more evaluation (not counted in the
    seconds)."""
    target = _check_target(target)
    if eval_env is None:
        raise ValueError("train_to_target needs an eval_env: the target is checked on its deterministic evaluation, "
                         "e.g. podracer.make_env(task, num_envs=10)")
    if isinstance(eval_every, bool) or not isinstance(eval_every, numbers.Integral) or eval_every <= 0:
        raise ValueError(f"eval_every must be a positive whole number of env steps, got {eval_every!r}")
    _, history = train(agent, env, total_steps, eval_env=eval_env, eval_every=int(eval_every), seed=seed,
                       progress=progress, target_return=target)
    evals = history.dropna(subset=["eval/return_mean"])
    hit = evals[evals["eval/return_mean"] >= target]
    first = hit.iloc[0] if len(hit) else None
    last = history.iloc[-1]
    return ToTarget(target=target, steps=int(first["global_step"]) if first is not None else None,
                    seconds=float(first["time/train_s"]) if first is not None else None,
                    final_return=float(evals["eval/return_mean"].iloc[-1]), env_steps=int(last["global_step"]),
                    train_s=float(last["time/train_s"]), seed=seed, history=history)


def seeds_to_target(agent: str, task: str, target: float, seeds: Sequence[int] = (0, 1, 2),
                    total_steps: int | None = None, eval_every: int = 10_000, eval_envs: int = 10,
                    num_envs: int | None = None, device: str = "cpu", **config: Any) -> TargetSummary:
    """``train_to_target`` for agent ``agent`` with its preset for ``task``, once per seed.

    Each seed: ``seed_everything(seed)``, ``make_env(task, num_envs)`` (the preset's count by
    default), ``make_agent(agent, env, seed=seed)`` with the preset and ``config`` overrides, an
    evaluation env of ``eval_envs`` sub-envs (``eval_envs`` episodes from the same seed every
    time), and training seeded with ``seed``. ``total_steps=None``: the preset's budget."""
    target = _check_target(target)
    seeds = check_seeds(seeds)
    resolve_agent(agent)  # an unknown name is an error that lists the agents
    try:
        preset = get_preset(agent, task)
    except ValueError:  # no preset for this task
        preset = None
    if preset is None and (num_envs is None or total_steps is None):
        raise ValueError(f"{agent} has no preset for {task!r}: give num_envs and total_steps "
                         f"(podracer.presets() lists the presets)")
    runs = []
    for seed in seeds:
        seed_everything(int(seed))
        env = make_env(task, num_envs=preset.num_envs if num_envs is None else num_envs, device=device)
        learner = make_agent(agent, env, seed=int(seed), preset=None if preset is None else task, verbose=False,
                             **config)
        runs.append(train_to_target(learner, env, make_env(task, num_envs=eval_envs, device=device), target,
                                    total_steps, eval_every, seed=int(seed)))
    return TargetSummary(agent=agent, task=task, target=target, runs=runs)


def check_seeds(seeds: Sequence[int]) -> list[int]:
    """``seeds`` as a list of distinct whole numbers, or a ValueError naming what is wrong."""
    seeds = list(seeds)
    if not seeds or any(isinstance(s, bool) or not isinstance(s, numbers.Integral) for s in seeds):
        raise ValueError(f"seeds must be a non-empty list of whole numbers, e.g. [0, 1, 2], got {seeds!r}")
    if len(set(seeds)) < len(seeds):
        raise ValueError(f"seeds {seeds} repeat a seed: the same seed is the same run, not another sample")
    return [int(s) for s in seeds]


def _check_target(target: Any) -> float:
    if isinstance(target, bool) or not isinstance(target, numbers.Real) or not math.isfinite(target):
        raise ValueError(f"target must be a finite return, e.g. -250.0 for Pendulum, got {target!r}")
    return float(target)


def _nan(value: float | None) -> float:
    return np.nan if value is None else float(value)
