"""A policy that combines several agents: the mean action for Box spaces, a majority vote for
Discrete ones. It is used anywhere a policy is: ``ensemble(obs)``, ``ensemble.act(obs,
deterministic=True)``, ``podracer.evaluate(ensemble, env)``, a domain's backtest.
"""

from __future__ import annotations

from typing import Any, Sequence

import gymnasium as gym
import torch


class Ensemble:
    """Several agents as one policy: the mean action (Box) or the majority vote (Discrete), deterministic
    by default. ``Tournament.ensemble(k)`` builds one from the board's best ``k`` entries."""

    def __init__(self, agents: Sequence[Any]):
        if not agents:
            raise ValueError("an ensemble needs at least one agent; is the leaderboard empty?")
        self.agents = list(agents)
        self.action_space = self.agents[0].action_space
        self.observation_space = self.agents[0].observation_space
        self.device = self.agents[0].device
        for a in self.agents[1:]:
            if a.action_space != self.action_space:
                raise ValueError(f"ensemble members disagree on the action space: {a.action_space} vs "
                                 f"{self.action_space}")
        if not isinstance(self.action_space, (gym.spaces.Box, gym.spaces.Discrete)):
            raise ValueError(f"ensembles combine Box (mean) or Discrete (vote) actions, got {self.action_space}")

    def __len__(self) -> int:
        return len(self.agents)

    def __repr__(self) -> str:
        return f"Ensemble({len(self)} x {type(self.agents[0]).__name__})"

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        actions = torch.stack([a.act(obs, deterministic=deterministic) for a in self.agents])  # (K, N, ...)
        if isinstance(self.action_space, gym.spaces.Discrete):
            # Majority vote per row; a tie goes to the smallest action (torch.mode's rule).
            return torch.mode(actions, dim=0).values
        # Each member's action is already within the bounds, so their mean is too.
        return actions.mean(dim=0)

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        return self.act(obs, deterministic=True)
