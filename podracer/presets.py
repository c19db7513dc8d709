"""Presets: per agent and task, the config that learns, with the sub-env count and step budget it
was tuned with. Like RL Zoo's hyperparameter files, each agent file keeps its own ``PRESETS``
dict keyed by task; other packages register theirs (``finance`` registers ``stock_trading`` when
it is imported). One lookup serves them all::

    podracer.presets()                       # a table: agent, task, num_envs, total_steps, config
    p = podracer.get_preset("ppo", "pendulum")
    env = podracer.make_env("pendulum", p.num_envs)
    agent = podracer.make_agent("ppo", env)  # picks p by itself (env.task == "pendulum") and says so
    podracer.train(agent, env)               # total_steps defaults to p.total_steps

A shipped env names its task in ``env.task``; ``make_agent`` looks up (agent, env.task).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import pandas as pd


class Preset(NamedTuple):
    """Settings tuned for one task: the sub-env count and training length they were tuned with,
    and the config overrides."""

    num_envs: int
    total_steps: int
    config: dict[str, Any]


# (agent name, task) -> Preset, for presets registered from outside the agent files.
_REGISTERED: dict[tuple[str, str], Preset] = {}


def register_preset(agent: str, task: str, preset: Preset) -> None:
    """Make ``preset`` the one ``make_agent(agent, env)`` picks for envs with ``env.task == task``.
    ``agent`` is a registry name (``"ppo"``) or ``"module:Class"``."""
    from podracer.agents.registry import agent_name

    if not isinstance(preset, Preset):
        raise TypeError(f"preset must be a podracer.Preset(num_envs, total_steps, config), got {type(preset).__name__}")
    _REGISTERED[(agent_name(agent), task.lower())] = preset


def _agent_presets(agent: str | type) -> tuple[str, dict[str, Preset]]:
    """(agent name, {task: Preset}) from the agent file's ``PRESETS`` plus registered ones."""
    from podracer.agents.registry import agent_name, resolve_agent

    name = agent_name(agent)
    table = dict(getattr(resolve_agent(agent), "presets", None) or {})
    table.update({task: p for (a, task), p in _REGISTERED.items() if a == name})
    return name, table


def find_preset(agent: str | type, task: str | None) -> Preset | None:
    """The preset for ``agent`` on ``task``, or None when there is none (or no task)."""
    if task is None:
        return None
    return _agent_presets(agent)[1].get(task.lower())


def get_preset(agent: str | type, task: str) -> Preset:
    """The preset for ``agent`` on ``task``; an unknown one is an error listing what exists."""
    name, table = _agent_presets(agent)
    if task.lower() not in table:
        raise ValueError(f"no {name} preset {task!r}; {name} has {sorted(table) or 'none'} "
                         f"(podracer.presets() lists every agent's)")
    return table[task.lower()]


def presets(agent: str | type | None = None) -> pd.DataFrame:
    """A table of the presets: one row per (agent, task) with ``num_envs``, ``total_steps`` and
    the ``config`` overrides. Presets of packages you have imported are included (``import
    finance`` adds ``stock_trading``)."""
    from podracer.agents.registry import AGENTS

    rows = []
    names = [agent] if agent is not None else list(AGENTS) + sorted({a for a, _ in _REGISTERED} - set(AGENTS))
    for a in names:
        name, table = _agent_presets(a)
        rows += [{"agent": name, "task": task, "num_envs": p.num_envs, "total_steps": p.total_steps,
                  "config": dict(p.config)} for task, p in sorted(table.items())]
    return pd.DataFrame(rows, columns=["agent", "task", "num_envs", "total_steps", "config"])


__all__ = ["Preset", "find_preset", "get_preset", "presets", "register_preset"]
