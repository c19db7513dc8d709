"""Pendulum-v1 as batched tensor code: same dynamics, reward and 200-step time limit as gymnasium.

State (theta, theta_dot); observation (cos theta, sin theta, theta_dot); action torque in [-2, 2].
Reward -(angle^2 + 0.1 * theta_dot^2 + 0.001 * u^2). Never terminates; truncated at step 200.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from podracer.envs.base import TensorVecEnv


def angle_normalize(x: torch.Tensor) -> torch.Tensor:
    return ((x + math.pi) % (2 * math.pi)) - math.pi


class PendulumVecEnv(TensorVecEnv):
    task = "pendulum"  # make_agent picks the agents' "pendulum" presets
    max_speed, max_torque, dt, g, m, l = 8.0, 2.0, 0.05, 10.0, 1.0, 1.0

    def __init__(self, num_envs: int = 1, device: str | torch.device = "cpu", max_episode_steps: int = 200,
                 g: float = 10.0, validate_actions: bool = True):
        super().__init__(num_envs, device, validate_actions)
        self.g = g
        self.max_episode_steps = max_episode_steps
        high = np.array([1.0, 1.0, self.max_speed], dtype=np.float32)
        self.single_observation_space = gym.spaces.Box(-high, high, dtype=np.float32)
        self.single_action_space = gym.spaces.Box(-self.max_torque, self.max_torque, shape=(1,), dtype=np.float32)
        self.state = torch.zeros(num_envs, 2, device=self.device)  # (N, 2): theta, theta_dot
        self.elapsed = torch.zeros(num_envs, dtype=torch.long, device=self.device)  # (N,)

    def _obs(self, state: torch.Tensor) -> torch.Tensor:
        th, thdot = state[:, 0], state[:, 1]
        return torch.stack([torch.cos(th), torch.sin(th), thdot], dim=1)

    def _sample_state(self) -> torch.Tensor:
        high = torch.tensor([math.pi, 1.0], device=self.device)
        return (2 * torch.rand(self.num_envs, 2, generator=self.rng, device=self.device) - 1) * high

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[torch.Tensor, dict[str, Any]]:
        self._seed(seed)
        self.state = self._sample_state()
        self.elapsed.zero_()
        return self._obs(self.state), {}

    def dynamics(self, state: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of gymnasium's Pendulum-v1 for a batch: returns (next_state, reward)."""
        th, thdot = state[:, 0], state[:, 1]
        u = u.clamp(-self.max_torque, self.max_torque)
        costs = angle_normalize(th) ** 2 + 0.1 * thdot**2 + 0.001 * u**2
        newthdot = thdot + (3 * self.g / (2 * self.l) * torch.sin(th) + 3.0 / (self.m * self.l**2) * u) * self.dt
        newthdot = newthdot.clamp(-self.max_speed, self.max_speed)
        newth = th + newthdot * self.dt
        return torch.stack([newth, newthdot], dim=1), -costs

    def step(self, actions: torch.Tensor):
        self._check(actions)
        next_state, rewards = self.dynamics(self.state, actions[:, 0].to(self.state.dtype))
        self.elapsed += 1
        terminated = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        truncated = self.elapsed >= self.max_episode_steps
        final_obs = self._obs(next_state)
        # Same-step autoreset without a host sync: draw fresh states for all, keep where done.
        self.state = torch.where(truncated[:, None], self._sample_state(), next_state)
        self.elapsed = torch.where(truncated, torch.zeros_like(self.elapsed), self.elapsed)
        obs = torch.where(truncated[:, None], self._obs(self.state), final_obs)
        return obs, rewards, terminated, truncated, {"final_obs": final_obs, "_final_obs": truncated}
