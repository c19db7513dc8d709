"""The agent registry: names -> agent classes, presets per (agent, task), ``make_agent`` and
``load_agent``.

The top of the agents package: it imports the algorithm files, they never import it. Each class
says its registry name (``PPO.name == "ppo"``) and registers itself under it when defined
(``AgentBase.__init_subclass__`` in ``common.py``), as a domain's agent does; ``AGENTS`` describes
the agents Podracer ships.

``resolve_agent`` takes a registry name, a ``"module:Class"`` import path or a class; the
checkpoint writer, ``load_agent`` and the tournament all use it (``agent_name`` goes the other
way). Both live in ``common.py`` beside the base class, so ``AgentBase.load`` needs nothing else.

Presets are data, as RL Zoo keeps its hyperparameters: YAML files of the form
``agent -> task -> {num_envs, total_steps, provenance, config}``. The core's are in
``podracer/presets/``; a domain registers its file when imported (``register_presets(path)``).
The evidence behind each preset is on ``docs/results/presets.md``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import torch
import yaml

from podracer import deprecation
from podracer.agents.common import (AgentBase, agent_name, import_path, make_config, register_agent,
                                    registered_agents, resolve_agent)
from podracer.agents.ddpg import DDPG
from podracer.agents.dqn import D3QN, DQN, DoubleDQN
from podracer.agents.ppo import PPO
from podracer.agents.sac import SAC
from podracer.agents.td3 import TD3
from podracer.checkpoints import read as read_checkpoint
from podracer.envs.base import resolve_device
from podracer.logs import announce
from podracer.plugins import load_domains

# ---------------------------------------------------------------------------- agents
_CLASSES: tuple[type[AgentBase], ...] = (PPO, SAC, TD3, DDPG, DQN, DoubleDQN, D3QN)
_PAPERS = {
    "ppo": ("Box, Discrete", "Schulman et al. 2017, arXiv:1707.06347"),
    "sac": ("Box", "Haarnoja et al. 2018, arXiv:1812.05905"),
    "td3": ("Box", "Fujimoto et al. 2018, arXiv:1802.09477"),
    "ddpg": ("Box", "Lillicrap et al. 2015, arXiv:1509.02971"),
    "dqn": ("Discrete", "Mnih et al. 2015, doi:10.1038/nature14236"),
    "double_dqn": ("Discrete", "van Hasselt et al. 2016, arXiv:1509.06461"),
    "d3qn": ("Discrete", "Wang et al. 2016, arXiv:1511.06581"),
}
# name -> (module:Class, action spaces, paper). The README's agent table is built from this.
AGENTS: dict[str, tuple[str, str, str]] = {
    cls.name: (f"{cls.__module__}:{cls.__qualname__}", *_PAPERS[cls.name]) for cls in _CLASSES
}
"""The agent registry: name -> (``module:Class``, the action spaces it takes, its paper)."""
# The 0.1 name of resolve_agent; it warns from 1.2 on (podracer.get_agent_class already did).
get_agent_class = deprecation.renamed_function("podracer.agents.get_agent_class", resolve_agent)


def load_agent(path: str | Path, device: str | torch.device | None = None) -> AgentBase:
    """The agent saved at ``path`` (by ``agent.save``, ``podracer train`` or a tournament), on
    ``device`` (default CPU, whatever device it was saved on). Its class comes from the
    checkpoint: a registry name or ``"module:Class"``, through ``resolve_agent``. Missing,
    truncated or altered files raise ``CheckpointError``."""
    device = resolve_device(device or "cpu")  # a clear error for a GPU this machine does not have
    ckpt = read_checkpoint(path, device=device)
    return resolve_agent(ckpt["agent"]).from_checkpoint(ckpt, device)


# ---------------------------------------------------------------------------- presets
class Preset(NamedTuple):
    """Settings tuned for one task: the sub-env count and training length they were tuned with,
    the config overrides, and where they come from (one line; the evidence is on
    ``docs/results/presets.md``)."""

    num_envs: int
    total_steps: int
    config: dict[str, Any]
    provenance: str = ""


CORE_PRESETS = Path(__file__).resolve().parent.parent / "presets"  # podracer/presets/*.yaml
_PRESETS: dict[tuple[str, str], Preset] = {}  # (agent name, task) -> Preset
_core_loaded = False


def register_preset(agent: str, task: str, preset: Preset) -> None:
    """Make ``preset`` the one ``make_agent(agent, env)`` picks for envs with ``env.task == task``.
    ``agent`` is a registry name (``"ppo"``) or ``"module:Class"``."""
    if not isinstance(preset, Preset):
        raise TypeError(f"preset must be a podracer.Preset(num_envs, total_steps, config), got {type(preset).__name__}")
    _PRESETS[(agent_name(agent), task.lower())] = preset


def register_presets(path: str | Path) -> list[tuple[str, str]]:
    """Register every preset of a YAML file ``agent -> task -> {num_envs, total_steps, provenance,
    config}`` (a domain package calls this on import). Returns the (agent, task) pairs. A malformed
    entry is an error naming the file, the entry and what is wrong."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ValueError(f"cannot read presets file {path}: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping agent -> task -> preset, got {type(data).__name__}")
    added = []
    for agent, tasks in data.items():
        config_cls = resolve_agent(agent).config_cls
        for task, entry in (tasks or {}).items():
            where = f"{path}: {agent}.{task}"
            preset = _preset_from_entry(entry, where)
            try:  # a typo or a bad value fails here, naming the file, not later in make_agent
                make_config(config_cls, preset.config)
            except (TypeError, ValueError) as e:
                raise ValueError(f"{where}: {e}") from None
            register_preset(agent, str(task), preset)
            added.append((agent_name(agent), str(task).lower()))
    return added


def _preset_from_entry(entry: Any, where: str) -> Preset:
    keys = {"num_envs", "total_steps", "config", "provenance"}
    if not isinstance(entry, dict) or not {"num_envs", "total_steps", "config"} <= set(entry) or set(entry) - keys:
        raise ValueError(f"{where}: expected the keys num_envs, total_steps, config and optionally provenance, "
                         f"got {sorted(entry) if isinstance(entry, dict) else entry!r}")
    # YAML has no tuples: a list (hidden_sizes: [64, 64]) becomes the tuple the configs hold.
    config = {k: tuple(v) if isinstance(v, list) else v for k, v in (entry["config"] or {}).items()}
    text = sorted(k for k, v in config.items() if isinstance(v, str) and _looks_numeric(v))
    if text:  # YAML 1.1 reads 3e-4 (no decimal point) as a string
        raise ValueError(f"{where}: {text} read as text; write floats with a decimal point (3.0e-4, not 3e-4)")
    return Preset(int(entry["num_envs"]), int(entry["total_steps"]), config, str(entry.get("provenance", "")))


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _table(load_all: bool = False) -> dict[tuple[str, str], Preset]:
    """The registered presets, the core's files read on first use; ``load_all`` imports the
    installed domains first (which register theirs)."""
    global _core_loaded
    if not _core_loaded:
        _core_loaded = True
        for file in sorted(CORE_PRESETS.glob("*.yaml")):
            register_presets(file)
    if load_all:
        load_domains()
    return _PRESETS


def find_preset(agent: str | type, task: str | None) -> Preset | None:
    """The preset for ``agent`` on ``task``, or None when there is none (or no task)."""
    if task is None:
        return None
    key = (agent_name(agent), task.lower())
    return _table().get(key) or _table(load_all=True).get(key)


def get_preset(agent: str | type, task: str) -> Preset:
    """The preset for ``agent`` on ``task``; an unknown one is an error listing what exists."""
    found = find_preset(agent, task)
    if found is None:
        name = agent_name(agent)
        have = sorted(t for a, t in _table(load_all=True) if a == name)
        raise ValueError(f"no {name} preset {task!r}; {name} has {have or 'none'} "
                         f"(podracer.presets() lists every agent's)")
    return found


def presets(agent: str | type | None = None) -> Any:
    """A table of the presets (a pandas DataFrame): one row per (agent, task) with ``num_envs``,
    ``total_steps``, the ``config`` overrides and their ``provenance``. The installed domains'
    presets are included (each registers its file when imported)."""
    import pandas as pd  # only here: the table is for people, training does not need pandas

    name = agent_name(agent) if agent is not None else None
    rows = [{"agent": a, "task": t, "num_envs": p.num_envs, "total_steps": p.total_steps, "config": dict(p.config),
             "provenance": p.provenance}
            for (a, t), p in sorted(_table(load_all=True).items()) if name is None or a == name]
    return pd.DataFrame(rows, columns=["agent", "task", "num_envs", "total_steps", "config", "provenance"])


# ---------------------------------------------------------------------------- make_agent
def make_agent(agent: str | type, env: Any, device: str | torch.device | None = None, seed: int | None = None,
               preset: str | None = "auto", verbose: bool = True, **config: Any) -> Any:
    """Build an agent for ``env`` from its single spaces, on its device.

    - ``preset="auto"``: when ``env.task`` names a task with a preset for this agent (the envs
      Podracer's packages register: ``make_env("pendulum")``, ``make_env("cartpole")``, the
      domains' envs), use it and say so (logger ``"podracer"``; ``verbose=False`` keeps quiet).
      ``preset="pendulum"`` picks one by name; ``preset=None`` uses the config's defaults.
      ``agent.preset`` holds the ``Preset`` used (its ``num_envs`` and ``total_steps`` too), or None.
    - Keyword arguments override config fields (on top of the preset); an unknown one is an error
      that lists the valid fields.
    - ``seed`` seeds this agent only (initial weights and the agent's own generator); torch's
      global random state is left as it was.
    """
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


__all__ = ["AGENTS", "Preset", "agent_name", "find_preset", "get_agent_class", "get_preset", "import_path",
           "load_agent", "make_agent", "presets", "register_agent", "register_preset", "register_presets",
           "registered_agents", "resolve_agent"]
