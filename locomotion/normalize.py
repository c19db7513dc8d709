"""Observation normalisation around any protocol env: running mean and variance, standardised and
clipped observations (as gymnasium's ``NormalizeObservation``), ``final_obs`` included.

Agents that normalise inside (PPO's ``norm_obs``) do not need it. An evaluation env should use
the training env's statistics without updating them::

    eval_env = NormalizeObservation(make_env("Ant", 8), update=False)
    eval_env.obs_rms.load_state_dict(train_env.obs_rms.state_dict())
"""

from __future__ import annotations

from typing import Any

import torch

from podracer.agents import RunningMeanStd


class NormalizeObservation:
    """Wrap ``env``: observations become ``clip((obs - mean) / std, -clip, clip)``; the statistics
    (``obs_rms``, a module with ``state_dict``) update from every step's observations while
    ``update`` (not from ``reset``, so that ``reset(seed=s)`` is repeatable)."""

    def __init__(self, env: Any, update: bool = True, clip: float = 10.0):
        self.env = env
        self.update = update
        obs_dim = int(torch.tensor(env.single_observation_space.shape).prod())
        self.obs_rms = RunningMeanStd((obs_dim,), clip=clip).to(env.device)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def _normalize(self, obs: torch.Tensor) -> torch.Tensor:
        if self.update:
            self.obs_rms.update(obs)
        return self.obs_rms.normalize(obs)

    def reset(self, seed: int | None = None, options: dict | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        return self.obs_rms.normalize(obs), info  # no update: reset(seed=s) twice gives the same obs

    def step(self, actions: torch.Tensor):
        obs, rewards, terminated, truncated, info = self.env.step(actions)
        obs = self._normalize(obs)  # updates the statistics first, so final_obs uses the same ones
        info = {**info, "final_obs": self.obs_rms.normalize(info["final_obs"])}
        return obs, rewards, terminated, truncated, info

    def __repr__(self) -> str:
        return f"NormalizeObservation({self.env!r})"


__all__ = ["NormalizeObservation"]
