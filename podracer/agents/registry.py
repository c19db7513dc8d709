"""Names -> agent classes. ``make_agent("sac", env)`` builds one from an env's spaces.

Entries are import paths, so importing the registry does not import every algorithm.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch

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


def get_agent_class(name: str) -> type:
    key = name.lower()
    if key not in AGENTS:
        raise ValueError(f"unknown agent {name!r}; available: {sorted(AGENTS)}")
    module, cls = AGENTS[key][0].split(":")
    return getattr(importlib.import_module(module), cls)


def make_agent(agent: str | type, env: Any, device: str | torch.device | None = None, seed: int | None = None,
               **config: Any) -> Any:
    """Build an agent for ``env`` (its single spaces and device). Keyword arguments override
    config fields; an unknown one is an error that lists the valid fields. ``seed`` seeds torch
    before the networks are initialised."""
    from podracer.agents.common import make_config

    if seed is not None:
        torch.manual_seed(seed)
    cls = get_agent_class(agent) if isinstance(agent, str) else agent
    cfg = make_config(cls.config_cls, config)
    return cls(env.single_observation_space, env.single_action_space, cfg, device=device or env.device)
