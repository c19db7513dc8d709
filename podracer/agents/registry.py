"""Names -> agent classes, and ``make_agent``, which builds one for an env.

``make_agent("sac", env)`` builds SAC from the env's single spaces and device. The one resolver,
``resolve_agent``, takes a registry name, an ``"module:Class"`` import path or a class; the
checkpoint writer, ``load`` and the tournament all use it (and ``agent_name`` for the way back).
Entries are import paths, so importing the registry does not import every algorithm.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch

from podracer.envs.base import resolve_device
from podracer.logs import announce
from podracer.presets import Preset, find_preset, get_preset

# name -> (module:Class, action space, paper). The README's agent table is built from this.
AGENTS: dict[str, tuple[str, str, str]] = {
    "ppo": ("podracer.agents.ppo:PPO", "Box, Discrete", "Schulman et al. 2017, arXiv:1707.06347"),
    "sac": ("podracer.agents.sac:SAC", "Box", "Haarnoja et al. 2018, arXiv:1812.05905"),
    "td3": ("podracer.agents.td3:TD3", "Box", "Fujimoto et al. 2018, arXiv:1802.09477"),
    "ddpg": ("podracer.agents.ddpg:DDPG", "Box", "Lillicrap et al. 2015, arXiv:1509.02971"),
    "dqn": ("podracer.agents.dqn:DQN", "Discrete", "Mnih et al. 2015, doi:10.1038/nature14236"),
    "double_dqn": ("podracer.agents.dqn:DoubleDQN", "Discrete", "van Hasselt et al. 2016, arXiv:1509.06461"),
    "d3qn": ("podracer.agents.dqn:D3QN", "Discrete", "Wang et al. 2016, arXiv:1511.06581"),
}


def import_path(path: str) -> Any:
    """The object named by ``"package.module:Qual.name"``."""
    module, _, qualname = path.partition(":")
    if not module or not qualname:
        raise ValueError(f"expected an import path 'package.module:Name', got {path!r}")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def resolve_agent(agent: str | type) -> type:
    """The agent class for a registry name (``"ppo"``), an ``"module:Class"`` path, or a class.
    Anything that is not an agent class (a subclass of ``AgentBase``) is refused."""
    from podracer.agents.common import AgentBase

    if isinstance(agent, str):
        key = agent.lower()
        if ":" in agent:
            cls = import_path(agent)
        elif key in AGENTS:
            cls = import_path(AGENTS[key][0])
        else:
            raise ValueError(f"unknown agent {agent!r}; available: {sorted(AGENTS)}, or an import path "
                             f"'package.module:Class' of your own AgentBase subclass")
    else:
        cls = agent
    if not (isinstance(cls, type) and issubclass(cls, AgentBase)):
        raise TypeError(f"{agent!r} is not an agent class (a subclass of podracer.AgentBase)")
    return cls


def get_agent_class(name: str) -> type:
    """Same as ``resolve_agent`` (kept: the 0.1 name)."""
    return resolve_agent(name)


def agent_name(agent: str | type) -> str:
    """The name stored for ``agent`` in checkpoints and tournament files: its registry name, else
    ``"module:Class"``. A class the pod processes or a later ``load`` could not import (defined in
    a notebook cell or a function) is an error that says how to fix it."""
    if isinstance(agent, str):
        cls = resolve_agent(agent)  # fail now, with the resolver's message
        if ":" not in agent:
            return agent.lower()
    else:
        cls = resolve_agent(agent)
    path = f"{cls.__module__}:{cls.__qualname__}"
    for name, (target, *_rest) in AGENTS.items():
        if target == path:
            return name
    if cls.__module__ == "__main__" or "<locals>" in cls.__qualname__:
        raise ValueError(f"agent class {cls.__qualname__} must be importable by name to be saved or run in pods: "
                         f"define it in a .py module (not a notebook cell or a function)")
    return path


def make_agent(agent: str | type, env: Any, device: str | torch.device | None = None, seed: int | None = None,
               preset: str | None = "auto", verbose: bool = True, **config: Any) -> Any:
    """Build an agent for ``env`` from its single spaces, on its device.

    - ``preset="auto"``: when ``env.task`` names a task with a preset for this agent (the envs
      Podracer ships: ``make_env("pendulum")``, ``make_env("cartpole")``, the stock env), use it
      and say so (logger ``"podracer"``; ``verbose=False`` keeps quiet). ``preset="pendulum"``
      picks one by name; ``preset=None`` uses the config's defaults. ``agent.preset`` holds the
      ``Preset`` used (its ``num_envs`` and ``total_steps`` too), or None.
    - Keyword arguments override config fields (on top of the preset); an unknown one is an error
      that lists the valid fields.
    - ``seed`` seeds this agent only (initial weights and the agent's own generator); torch's
      global random state is left as it was.
    """
    from podracer.agents.common import make_config

    cls = resolve_agent(agent)
    name = agent_name(cls) if isinstance(agent, type) else agent_name(agent)
    missing = [a for a in ("num_envs", "single_observation_space", "single_action_space", "device")
               if not hasattr(env, a)]
    if missing:
        raise TypeError(f"make_agent needs a batched env (podracer.make_env, podracer.make_gym_env or your own "
                        f"protocol env); got {type(env).__name__} without {missing}. For a gymnasium id use "
                        f"podracer.make_env('Pendulum-v1', num_envs=8)")
    task = getattr(env, "task", None)
    chosen: Preset | None = None
    if preset == "auto":
        chosen = find_preset(cls, task)
        if chosen is not None and verbose:
            _announce(name, task, chosen, env.num_envs, config)
    elif preset is not None:
        chosen = get_preset(cls, preset)
        if verbose:
            _announce(name, preset, chosen, env.num_envs, config)
    cfg = make_config(cls.config_cls, {**(chosen.config if chosen else {}), **config})
    device = resolve_device(device or env.device)
    if seed is None:
        new = cls(env.single_observation_space, env.single_action_space, cfg, device=device)
    else:
        devices = [torch.device(device).index or 0] if torch.device(device).type == "cuda" else []
        with torch.random.fork_rng(devices=devices):  # seed this agent, restore the global state after
            torch.manual_seed(seed)
            new = cls(env.single_observation_space, env.single_action_space, cfg, device=device)
    new.preset = chosen
    return new


def _announce(agent: str, task: str, preset: Preset, num_envs: int, overrides: dict[str, Any]) -> None:
    changed = sorted(k for k, v in overrides.items() if preset.config.get(k, object()) != v)
    extra = f", with your overrides {changed}" if changed else ""
    envs = "" if num_envs == preset.num_envs else f" (tuned with num_envs={preset.num_envs}; this env has {num_envs})"
    announce(f"podracer: {agent} uses preset {task!r}{extra}{envs}; budget {preset.total_steps:,} env steps. "
             f"preset=None for plain defaults")
