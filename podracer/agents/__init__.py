"""Single-file agents and the registry that names them.

The algorithm modules are imported on first use: ``podracer.agents.ppo`` works after
``import podracer`` without importing every algorithm up front.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import torch

from podracer.agents.common import AgentBase, RunningMeanStd, mlp, mutable_bounds, soft_update
from podracer.agents.registry import AGENTS, agent_name, get_agent_class, make_agent, resolve_agent

_MODULES = ("ppo", "sac", "td3", "ddpg", "dqn", "offpolicy", "replay")


def load_agent(path: str | Path, device: str | torch.device | None = None) -> AgentBase:
    """The agent saved at ``path`` (by ``agent.save``, ``podracer train`` or a tournament), on
    ``device`` (default CPU, whatever device it was saved on). Its class comes from the
    checkpoint: a registry name or ``"module:Class"``, through ``resolve_agent``."""
    return AgentBase.load(path, device=device)


def __getattr__(name: str) -> ModuleType:
    if name in _MODULES:
        return importlib.import_module(f"podracer.agents.{name}")
    raise AttributeError(f"module 'podracer.agents' has no attribute {name!r}")


__all__ = ["AGENTS", "AgentBase", "RunningMeanStd", "agent_name", "get_agent_class", "load_agent", "make_agent",
           "mlp", "mutable_bounds", "resolve_agent", "soft_update"]
