"""CartPole-v1 as batched tensor code: same dynamics, reward, termination and 500-step limit as gymnasium.

Observation (x, x_dot, theta, theta_dot); actions 0 (push left) or 1 (push right); reward 1 per
step including the step on which the pole falls. Terminated when |x| > 2.4 or |theta| > 12 deg.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from podracer.envs.base import TensorVecEnv


class CartPoleVecEnv(TensorVecEnv):
    task = "cartpole"  # make_agent picks the agents' "cartpole" presets
    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    total_mass = masscart + masspole
    polemass_length = masspole * length
    theta_threshold_radians = 12 * 2 * math.pi / 360
    x_threshold = 2.4

    def __init__(self, num_envs: int = 1, device: str | torch.device = "cpu", max_episode_steps: int = 500,
                 validate_actions: bool = True):
        super().__init__(num_envs, device, validate_actions)
        self.max_episode_steps = max_episode_steps
        high = np.array([self.x_threshold * 2, np.inf, self.theta_threshold_radians * 2, np.inf], dtype=np.float32)
        self.single_observation_space = gym.spaces.Box(-high, high, dtype=np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.state = torch.zeros(num_envs, 4, device=self.device)  # (N, 4)
        self.elapsed = torch.zeros(num_envs, dtype=torch.long, device=self.device)  # (N,)

    def _sample_state(self) -> torch.Tensor:
        return self._uniform(-0.05, 0.05, (self.num_envs, 4))

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[torch.Tensor, dict[str, Any]]:
        self._seed(seed)
        self.state = self._sample_state()
        self.elapsed.zero_()
        return self.state.clone(), {}

    def dynamics(self, state: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One Euler step of gymnasium's CartPole-v1: returns (next_state, terminated)."""
        x, x_dot, theta, theta_dot = state.unbind(dim=1)
        force = torch.where(actions == 1, self.force_mag, -self.force_mag).to(state.dtype)
        costheta, sintheta = torch.cos(theta), torch.sin(theta)
        temp = (force + self.polemass_length * theta_dot**2 * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * costheta**2 / self.total_mass)
        )
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        x, x_dot = x + self.tau * x_dot, x_dot + self.tau * xacc
        theta, theta_dot = theta + self.tau * theta_dot, theta_dot + self.tau * thetaacc
        terminated = (x.abs() > self.x_threshold) | (theta.abs() > self.theta_threshold_radians)
        return torch.stack([x, x_dot, theta, theta_dot], dim=1), terminated

    def step(self, actions: torch.Tensor):
        self._check(actions)
        next_state, terminated = self.dynamics(self.state, actions)
        rewards = torch.ones(self.num_envs, device=self.device)
        self.elapsed += 1
        truncated = self.elapsed >= self.max_episode_steps  # as gymnasium's TimeLimit: may coincide with terminated
        done = terminated | truncated
        self.state = torch.where(done[:, None], self._sample_state(), next_state)
        self.elapsed = torch.where(done, torch.zeros_like(self.elapsed), self.elapsed)
        return self.state.clone(), rewards, terminated, truncated, {"final_obs": next_state, "_final_obs": done}
