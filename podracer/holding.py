"""Does a preset hold what it reaches? Time to first reach a target, and time to a target that holds.

``podracer.to_target`` stops at the first evaluation at or above a target: the right number for a
race, the wrong one for a user who trains on (a notebook asked for more steps, a tournament pod runs
longer). Here training goes on past the budget and every evaluation counts:

- **first reach**: the first evaluation with return >= ``target``;
- **hold**: the first evaluation with return >= ``target`` after which *every* later evaluation
  stays >= ``target - margin`` (``None`` when the last evaluations fall below that);
- a run **holds** when both are the same evaluation: reached, then never more than ``margin``
  below the target until the end.

``reach_and_hold`` reads both off any list of evaluations (the speed benchmarks share it);
``check_hold`` applies the criterion presets are chosen on: train ``budget_factor`` (3) times the
preset's budget, on at least five seeds, at the preset's sub-env count and at half and double it.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import pandas as pd

from podracer.agents import get_preset, make_agent
from podracer.envs import make_env
from podracer.to_target import check_seeds
from podracer.train import seed_everything, train


@dataclass(frozen=True)
class ReachHold:
    """First reach and holding target of one run's evaluations. Steps and seconds are None when
    the run never reached the target (first) or did not keep it to the end (hold)."""

    target: float
    margin: float
    first_steps: int | None  # env steps at the first evaluation >= target
    first_seconds: float | None  # training seconds there
    hold_steps: int | None  # env steps at the first evaluation >= target that every later one stays within margin of
    hold_seconds: float | None
    min_after_reach: float  # the lowest evaluation from the first reach on (NaN when never reached)
    last_return: float  # the last evaluation

    @property
    def reached(self) -> bool:
        """At least one evaluation at or above the target."""
        return self.first_steps is not None

    @property
    def holds(self) -> bool:
        """Reached, and no evaluation after that more than ``margin`` below the target."""
        return self.reached and self.hold_steps == self.first_steps


def reach_and_hold(steps: Sequence[float], seconds: Sequence[float], returns: Sequence[float], target: float,
                   margin: float) -> ReachHold:
    """First reach and holding target of evaluations ``returns`` taken at ``steps`` env steps and
    ``seconds`` training seconds (three sequences of one length, in training order)."""
    target, margin = _finite("target", target), _finite("margin", margin)
    if margin < 0:
        raise ValueError(f"margin must be >= 0 (how far below the target an evaluation may fall), got {margin}")
    if not len(steps) == len(seconds) == len(returns):
        raise ValueError(f"steps, seconds and returns must have one entry per evaluation, got lengths "
                         f"{len(steps)}, {len(seconds)}, {len(returns)}")
    returns = [float(r) for r in returns]
    first = next((i for i, r in enumerate(returns) if r >= target), None)
    hold = None
    for i in reversed(range(len(returns))):  # walk back while the tail stays within the margin
        if returns[i] < target - margin:
            break
        if returns[i] >= target:
            hold = i
    return ReachHold(target=target, margin=margin,
                     first_steps=None if first is None else int(steps[first]),
                     first_seconds=None if first is None else float(seconds[first]),
                     hold_steps=None if hold is None else int(steps[hold]),
                     hold_seconds=None if hold is None else float(seconds[hold]),
                     min_after_reach=math.nan if first is None else min(returns[first:]),
                     last_return=returns[-1] if returns else math.nan)


@dataclass
class EvalLog:
    """A run's evaluations as they come, for a benchmark that times both numbers: ``done()`` once
    some evaluation >= ``target`` has been followed by ``hold_evals`` evaluations, none more than
    ``margin`` below the target (the run can stop there); ``result()`` is ``reach_and_hold``."""

    target: float
    margin: float
    hold_evals: int = 5  # evaluations after the holding one that must stay within the margin
    steps: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    returns: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if isinstance(self.hold_evals, bool) or not isinstance(self.hold_evals, numbers.Integral) or self.hold_evals < 0:
            raise ValueError(f"hold_evals must be a whole number >= 0, got {self.hold_evals!r}")

    def add(self, steps: int, seconds: float, value: float) -> None:
        """Record one evaluation: env steps and training seconds so far, and its return."""
        self.steps.append(int(steps))
        self.seconds.append(float(seconds))
        self.returns.append(float(value))

    def result(self) -> ReachHold:
        return reach_and_hold(self.steps, self.seconds, self.returns, self.target, self.margin)

    def done(self) -> bool:
        """The target was reached and has held for ``hold_evals`` evaluations since."""
        hold = self.result().hold_steps
        return hold is not None and len(self.steps) - 1 - self.steps.index(hold) >= self.hold_evals


def history_reach_and_hold(history: pd.DataFrame, target: float, margin: float) -> ReachHold:
    """``reach_and_hold`` on the evaluation rows of a ``podracer.train`` history."""
    evals = history.dropna(subset=["eval/return_mean"])
    return reach_and_hold(evals["global_step"].tolist(), evals["time/train_s"].tolist(),
                          evals["eval/return_mean"].tolist(), target, margin)


@dataclass(frozen=True)
class HoldRun:
    """One seed at one sub-env count, trained ``budget_factor`` times the budget."""

    seed: int
    num_envs: int
    result: ReachHold
    returns_at: dict[int, float]  # k -> return at the first evaluation at or past k budgets
    history: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False, compare=False)


@dataclass(frozen=True)
class HoldCheck:
    """The holding criterion over seeds and sub-env counts for one agent's preset on one task."""

    agent: str
    task: str
    target: float
    margin: float
    budget: int
    runs: list[HoldRun] = field(repr=False)

    @property
    def holds(self) -> bool:
        """Every run reached the target and stayed within the margin to the end."""
        return bool(self.runs) and all(r.result.holds for r in self.runs)

    def to_frame(self) -> pd.DataFrame:
        """One row per run."""
        return pd.DataFrame([{"num_envs": r.num_envs, "seed": r.seed, "reached": r.result.reached,
                              "holds": r.result.holds, "first_steps": r.result.first_steps,
                              "first_s": r.result.first_seconds, "hold_steps": r.result.hold_steps,
                              "hold_s": r.result.hold_seconds, "min_after_reach": r.result.min_after_reach,
                              **{f"return_{k}x": v for k, v in r.returns_at.items()}} for r in self.runs])

    def rows(self) -> list[dict[str, Any]]:
        """One summary row per sub-env count: runs that reached and held, the median steps and
        seconds to first reach and to the holding target (over the runs that got there; a run that
        never holds counts as not there), the median and worst return at each multiple of the
        budget, the worst evaluation after reaching."""
        frame, out = self.to_frame(), []
        for n, g in frame.groupby("num_envs", sort=False):
            row: dict[str, Any] = {"agent": self.agent, "task": self.task, "num_envs": int(n), "seeds": len(g),
                                   "target": self.target, "margin": self.margin, "budget": self.budget,
                                   "reached": int(g["reached"].sum()), "held": int(g["holds"].sum()),
                                   "holding": int(g["hold_steps"].notna().sum())}
            for col in ("first_steps", "first_s", "hold_steps", "hold_s"):
                row[col] = float(g[col].astype(float).median())
            for col in [c for c in g.columns if c.startswith("return_")]:
                row[f"{col}_median"], row[f"{col}_worst"] = float(g[col].median()), float(g[col].min())
            row["worst_after_reach"] = float(g["min_after_reach"].min())
            out.append(row)
        return out


def check_hold(agent: str, task: str, target: float, margin: float, seeds: Sequence[int] = range(5),
               env_scales: Sequence[float] = (1.0, 0.5, 2.0), budget_factor: int = 3, evals_per_budget: int = 10,
               eval_envs: int = 10, device: str = "cpu", stagger_time_limits: bool = True,
               make_train_env: Callable[[int], Any] | None = None, make_eval_env: Callable[[], Any] | None = None,
               **config: Any) -> HoldCheck:
    """Train ``agent`` with its preset for ``task`` for ``budget_factor`` times the preset's
    ``total_steps``, once per seed and sub-env count (the preset's ``num_envs`` times each of
    ``env_scales``), evaluating ``evals_per_budget`` times per budget (deterministic policy,
    ``eval_envs`` episodes from the same seed every time). ``config`` overrides preset fields;
    ``stagger_time_limits`` is ``podracer.train``'s (on, as users train; off to compare).
    ``make_train_env(num_envs)`` and ``make_eval_env()`` replace ``make_env(task, ...)`` for a
    preset whose target is scored elsewhere (finance: one account over the validation years)."""
    seeds = check_seeds(seeds)
    if isinstance(budget_factor, bool) or not isinstance(budget_factor, numbers.Integral) or budget_factor < 1:
        raise ValueError(f"budget_factor must be a whole number >= 1, got {budget_factor!r}")
    preset = get_preset(agent, task)
    budget = int(preset.total_steps)
    eval_every = max(budget // int(evals_per_budget), 1)
    runs = []
    for scale in env_scales:
        num_envs = max(int(round(preset.num_envs * scale)), 1)
        for seed in seeds:
            seed_everything(seed)
            env = make_env(task, num_envs=num_envs, device=device) if make_train_env is None else make_train_env(num_envs)
            eval_env = make_env(task, num_envs=eval_envs, device=device) if make_eval_env is None else make_eval_env()
            learner = make_agent(agent, env, seed=seed, preset=task, verbose=False, **config)
            _, history = train(learner, env, budget_factor * budget, eval_env=eval_env, eval_every=eval_every,
                               seed=seed, progress=False,
                               stagger_time_limits=stagger_time_limits)
            runs.append(HoldRun(seed=seed, num_envs=num_envs, result=history_reach_and_hold(history, target, margin),
                                returns_at=returns_at(history, budget, budget_factor), history=history))
    return HoldCheck(agent=agent, task=task, target=float(target), margin=float(margin), budget=budget, runs=runs)


def returns_at(history: pd.DataFrame, budget: int, budget_factor: int) -> dict[int, float]:
    """The evaluation return at the first evaluation at or past each of 1..``budget_factor``
    budgets (NaN when training stopped before that)."""
    evals = history.dropna(subset=["eval/return_mean"])
    start = float(history["global_step"].iloc[0] - history["env_steps"].iloc[0]) if "env_steps" in history else 0.0
    out = {}
    for k in range(1, budget_factor + 1):
        past = evals[evals["global_step"] - start >= k * budget - 1e-9]
        out[k] = float(past["eval/return_mean"].iloc[0]) if len(past) else math.nan
    return out


def _finite(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number of return units, got {value!r}")
    return float(value)


__all__ = ["ReachHold", "reach_and_hold", "EvalLog", "history_reach_and_hold", "HoldRun", "HoldCheck", "check_hold",
           "returns_at"]
