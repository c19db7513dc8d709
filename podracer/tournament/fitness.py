"""A tournament's fitness: the score a pod gives each generation's agent, pluggable by name.

A fitness is a callable ``fitness(agent, eval_env, seed) -> FitnessResult``: the score the board
ranks by, the spread ``score_std`` of the units that score averages (episodes, validation
windows), and optionally per-window scores and the per-period returns they came from. The core
knows one, ``"return"`` (the mean return of the deterministic policy over the eval env's
episodes, ``podracer.evaluate``); a domain registers its own with ``register_fitness`` and may
make it the default of its tasks, as ``finance`` does for ``stock_trading`` (``WindowedFitness``:
the validation split cut into consecutive windows, each scored by its Sharpe ratio).

``TournamentConfig.fitness`` names one: ``None`` (the mean eval return), ``"auto"`` (the eval env's
task's registered default, else the mean eval return), a registered name, or a mapping
``{"name": ..., **settings}`` whose settings go to the registered factory. A store's
tournament.yaml can name only registered fitnesses, never an import path: no code is run that
the installed packages did not register.

A tournament resolves ``"auto"`` once, when its store is created (``resolve_auto``), and its
tournament.yaml keeps the result: a run resumed after a release changes a task's default goes on
scoring as it began, and every entry of one board is in the same units. A tournament.yaml that
still says ``"auto"`` was written before tasks had defaults, when it meant the mean eval return
(``saved_fitness``).

Per-window scores are what make the board's noise estimate paired: two agents scored on the same
windows differ by the mean of their per-window differences, with the standard error of that mean
(``paired_difference``). ``Pod.leading`` exploits a leader only when that difference survives it.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from typing import Any, Callable, Iterable, Sequence

from podracer.evaluate import evaluate
from podracer.plugins import load_domains

__all__ = ["FITNESS_DEFAULT", "FitnessResult", "EvalReturn", "check_fitness", "fitness_for_task", "make_fitness",
           "paired_difference", "register_fitness", "registered_fitnesses", "resolve_auto", "saved_fitness"]

FITNESS_DEFAULT = "return"  # the core's fitness: the mean return over the eval env's episodes


@dataclasses.dataclass(frozen=True)
class FitnessResult:
    """One agent's fitness: ``score`` (higher is better), ``score_std`` (the spread of the units
    ``score`` is the mean of: episodes, or windows), ``window_scores`` (one score per validation
    window, in time order, when the fitness has windows) and ``returns`` (the per-period returns
    they were computed from, when cheap to keep: the board stores both)."""

    score: float
    score_std: float | None = None
    window_scores: tuple[float, ...] | None = None
    returns: tuple[float, ...] | None = None


class EvalReturn:
    """The core's fitness: the deterministic policy's mean return over the eval env's episodes,
    all started from ``reset(seed)`` (``podracer.evaluate``); ``score_std`` is their spread."""

    def __call__(self, agent: Any, eval_env: Any, seed: int | None = None) -> FitnessResult:
        result = evaluate(agent, eval_env, seed=seed)
        return FitnessResult(float(result["eval/return_mean"]), float(result["eval/return_std"]))

    def __repr__(self) -> str:
        return "EvalReturn()"


Fitness = Callable[..., FitnessResult]
_FITNESSES: dict[str, Callable[..., Fitness]] = {FITNESS_DEFAULT: EvalReturn}
_TASK_DEFAULTS: dict[str, dict[str, Any]] = {}


def register_fitness(name: str, factory: Callable[..., Fitness], tasks: Iterable[str] = (),
                     **defaults: Any) -> None:
    """Make ``factory(**settings)`` (returning a ``fitness(agent, eval_env, seed) -> FitnessResult``)
    available as ``TournamentConfig(fitness={"name": name, **settings})``. ``tasks``: env tasks
    (``env.task``) whose ``fitness="auto"`` means this one, with the settings ``defaults``."""
    if not isinstance(name, str) or not name or not callable(factory):
        raise ValueError(f"register_fitness needs a name and a callable factory, got {name!r} and {factory!r}")
    _FITNESSES[name] = factory
    for task in tasks:
        _TASK_DEFAULTS[task] = {"name": name, **defaults}


def registered_fitnesses() -> list[str]:
    """The names ``TournamentConfig.fitness`` may use (the installed domains' included)."""
    load_domains()
    return sorted(_FITNESSES)


def fitness_for_task(task: str | None) -> dict[str, Any]:
    """The fitness ``"auto"`` means for an env of ``task``: its registered default, else ``"return"``."""
    if task is not None and task not in _TASK_DEFAULTS:
        load_domains()
    return dict(_TASK_DEFAULTS.get(task, {"name": FITNESS_DEFAULT})) if task is not None else {"name": FITNESS_DEFAULT}


def check_fitness(spec: Any) -> str | dict[str, Any] | None:
    """``spec`` as a ``TournamentConfig`` stores it (``None``, ``"auto"`` or ``{"name": ..., **settings}``),
    after building it once so that a bad name or setting fails now, with the fix, not in every pod."""
    if spec is None or spec == "auto":
        return spec
    if isinstance(spec, str):
        spec = {"name": spec}
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise ValueError(f"fitness must be None, 'auto', a registered name or a mapping {{'name': ..., **settings}}, "
                         f"got {spec!r}; e.g. fitness={{'name': 'windowed', 'n_windows': 4, 'score': 'sharpe'}}")
    spec = dict(spec)
    _build(dict(spec))
    return spec


def resolve_auto(spec: str | dict[str, Any] | None, make_eval_env: Callable[[], Any]) -> str | dict[str, Any] | None:
    """``spec`` with ``"auto"`` replaced by what it means for the task of the env ``make_eval_env()``
    builds (built once, here, only for ``"auto"``): ``{"name": ..., **settings}``. Other specs as given."""
    if spec != "auto":
        return spec
    env = make_eval_env()
    try:
        return fitness_for_task(getattr(env, "task", None))
    finally:
        close = getattr(env, "close", None)
        if callable(close):
            close()


def saved_fitness(spec: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    """The fitness a store's tournament.yaml ran with: ``"auto"`` there was written before tasks had
    defaults (tournaments now resolve it when created), when it meant the mean eval return."""
    return None if spec == "auto" else spec


def make_fitness(spec: str | dict[str, Any] | None, eval_env: Any = None) -> Fitness:
    """The fitness callable ``spec`` names (``"auto"``: the default of ``eval_env.task``)."""
    if spec is None:
        spec = {"name": FITNESS_DEFAULT}
    elif spec == "auto":
        spec = fitness_for_task(getattr(eval_env, "task", None))
    elif isinstance(spec, str):
        spec = {"name": spec}
    return _build(dict(spec))


def _build(spec: dict[str, Any]) -> Fitness:
    name = spec.pop("name")
    if name not in _FITNESSES:
        load_domains()  # a domain's fitness is registered when the domain is imported
    if name not in _FITNESSES:
        raise ValueError(f"unknown fitness {name!r}; registered: {sorted(_FITNESSES)} (a domain adds its own with "
                         f"podracer.tournament.register_fitness when imported)")
    factory = _FITNESSES[name]
    try:
        inspect.signature(factory).bind(**spec)
    except TypeError as e:
        raise ValueError(f"fitness {name!r} does not take the settings {sorted(spec)} ({e}); its settings: "
                         f"{_settings(factory)}") from None
    except ValueError:  # a builtin without a signature: let the call say
        pass
    try:
        return factory(**spec)
    except (TypeError, ValueError) as e:
        raise ValueError(f"fitness {name!r} with settings {spec}: {e}") from None


def _settings(factory: Callable[..., Any]) -> str:
    try:
        params = inspect.signature(factory).parameters.values()
    except ValueError:
        return "(unknown)"
    return ", ".join(f"{p.name}={p.default!r}" if p.default is not p.empty else p.name for p in params) or "none"


def paired_difference(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """Mean per-window difference ``a - b`` and its standard error from the paired differences
    (NaN with one window: no noise estimate). The windows must be the same, in the same order."""
    if len(a) != len(b) or not a:
        raise ValueError(f"paired windows must match: got {len(a)} and {len(b)} window scores")
    d = [x - y for x, y in zip(a, b)]
    mean = sum(d) / len(d)
    if len(d) < 2:
        return mean, math.nan
    var = sum((x - mean) ** 2 for x in d) / (len(d) - 1)
    return mean, math.sqrt(var / len(d))
