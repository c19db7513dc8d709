"""Deep Deterministic Policy Gradient (DDPG): Q-learning with a deterministic actor.

Lillicrap et al. 2015, "Continuous control with deep reinforcement learning", arXiv:1509.02971.

Key equations (B a minibatch from the replay buffer, s the scale (high - low) / 2 of the Box):
- TD target:     y = r + gamma * (1 - terminated) * Q'(s', mu'(s'))
- critic loss:   mean_B (Q(s, a) - y)^2
- actor loss:    -mean_B Q(s, mu(s))   (the deterministic policy gradient, Silver et al. 2014)
- targets:       theta' <- tau * theta + (1 - tau) * theta'  after every update
- exploration:   a = clip(mu(s) + N(0, (sigma_explore s)^2), low, high)

Our deviations and choices:
- Gaussian exploration noise instead of Ornstein-Uhlenbeck and no L2 weight decay on the
  critic, as the re-tuned DDPG baseline of Fujimoto et al. 2018; ReLU and default PyTorch init.
- Only ``terminated`` stops the bootstrap; at a timeout the target uses the true last
  observation ``info["final_obs"]`` (stored by the replay buffer as ``next_obs``).
- Many sub-envs step together; ``updates_per_step`` gradient updates per env transition
  (summed over sub-envs) are interleaved with the vector steps of a ``train_step``.
- Warm-up (uniform random actions) lasts until the replay buffer has collected
  ``learning_starts`` transitions, and updates wait until it has ``max(learning_starts,
  batch_size)``: counted in the buffer, not in env steps, so an agent loaded without its
  buffer refills it before it learns again (``offpolicy.collect_and_update``).
- Critic and actor step together: their losses are summed, one backward pass and one Adam
  step (two parameter groups with their own learning rates). The actor's loss sees the
  critic's parameters detached, so each loss moves only its own parameters and the gradients
  equal the separate ones; the actor's gradient comes from the critic before (not after) this
  update's critic step. Fewer, larger kernels: this is what makes small networks fast on a CPU.
- ``PRESETS`` holds per-task settings tuned for speed on batched envs (see there).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from podracer.agents.common import AgentBase, Preset, deprecated_alias, mlp, preset_config, soft_update
from podracer.agents.offpolicy import (box_bounds, check_config, collect_and_update, explore_box, init_replay,
                                         load_offpolicy_state, offpolicy_state, push_learning_rates)
from podracer.agents.replay import Batch


# ---------------------------------------------------------------------------- config
@dataclass
class DDPGConfig:
    gamma: float = 0.99  # γ, discount; 0.9-0.999
    tau: float = field(default=0.001, metadata={"mutable": (0.0005, 0.05)})  # τ, target Polyak rate; 0.0005-0.05
    actor_lr: float = field(default=1e-4, metadata={"mutable": (1e-5, 3e-3)})  # policy Adam step; 1e-5-3e-3
    critic_lr: float = field(default=1e-3, metadata={"mutable": (1e-5, 3e-3)})  # Q Adam step; 1e-5-3e-3
    exploration_noise: float = field(default=0.1, metadata={"mutable": (0.02, 0.5)})  # σ_explore (x scale); 0-0.5
    hidden_sizes: tuple[int, ...] = (400, 300)  # hidden layer sizes of actor and critic
    batch_size: int = 64  # B, transitions per update; 64-1024
    buffer_size: int = 1_000_000  # replay capacity in transitions; >= batch_size
    learning_starts: int = 10_000  # uniform random transitions in the buffer before updates
    updates_per_step: float = 1.0  # gradient updates per env transition (summed over sub-envs); 0.01-4
    num_steps: int = 50  # T, vector steps per train_step call
    save_buffer: bool = False  # include the replay buffer in state_dict / checkpoints

    aliases: ClassVar[dict[str, str]] = {"hidden": "hidden_sizes"}  # 0.1 names

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "DDPGConfig":
        """The tuned config for ``name`` (a key of ``PRESETS``), with ``overrides`` on top."""
        return preset_config(cls, "DDPG", PRESETS, name, overrides)

    def __post_init__(self) -> None:
        check_config(self, positive=("actor_lr", "critic_lr"), non_negative=("exploration_noise",))


# Tuned on this project's tensor envs (2-core CPU, one torch thread): smaller networks, larger
# learning rates than the paper, two updates per transition on small batches. Use as
# ``make_agent("ddpg", PendulumVecEnv(p.num_envs), **p.config)``; tests/test_offpolicy.py checks it
# reaches > -250 and benchmarks/offpolicy_pendulum.py times it against Stable-Baselines3.
PRESETS: dict[str, Preset] = {
    "pendulum": Preset(num_envs=8, total_steps=10_000, config=dict(
        hidden_sizes=(64, 64), actor_lr=1e-3, critic_lr=1e-3, tau=0.005, batch_size=128, updates_per_step=2.0,
        learning_starts=400, num_steps=25, buffer_size=100_000)),
}


# ---------------------------------------------------------------------------- networks
class Critic(nn.Module):
    """Q(s, a), an MLP on the concatenated input: returns (B,)."""

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: tuple[int, ...]):
        super().__init__()
        dims = [obs_dim + act_dim, *hidden_sizes, 1]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))

    def forward(self, obs: torch.Tensor, actions: torch.Tensor, detach_params: bool = False) -> torch.Tensor:
        """``detach_params``: gradients flow to the inputs only (the actor's loss), never to Q's weights."""
        x = torch.cat([obs, actions], dim=-1)
        for i, layer in enumerate(self.layers):
            w, b = (layer.weight.detach(), layer.bias.detach()) if detach_params else (layer.weight, layer.bias)
            x = nn.functional.linear(x, w, b)
            if i < len(self.layers) - 1:
                x = torch.relu(x)
        return x.squeeze(-1)


class DeterministicActor(nn.Module):
    """mu(s) = c + s * tanh(net(s)): always inside the Box bounds [c - s, c + s]."""

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: tuple[int, ...], low: np.ndarray, high: np.ndarray):
        super().__init__()
        self.net = mlp(obs_dim, hidden_sizes, act_dim, activation=nn.ReLU, orthogonal=False)
        low_t, high_t = torch.as_tensor(low, dtype=torch.float32), torch.as_tensor(high, dtype=torch.float32)
        self.register_buffer("action_scale", (high_t - low_t) / 2)  # s
        self.register_buffer("action_bias", (high_t + low_t) / 2)  # c

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.action_bias + self.action_scale * torch.tanh(self.net(obs))


class DDPGModel(nn.Module):
    """Everything DDPG learns, in one module so it moves and saves together."""

    def __init__(self, obs_dim: int, act_dim: int, cfg: DDPGConfig, low: np.ndarray, high: np.ndarray):
        super().__init__()
        self.actor = DeterministicActor(obs_dim, act_dim, cfg.hidden_sizes, low, high)
        self.actor_target = DeterministicActor(obs_dim, act_dim, cfg.hidden_sizes, low, high)
        self.critic = Critic(obs_dim, act_dim, cfg.hidden_sizes)
        self.critic_target = Critic(obs_dim, act_dim, cfg.hidden_sizes)
        self.actor_target.load_state_dict(self.actor.state_dict())
        self.critic_target.load_state_dict(self.critic.state_dict())
        self.actor_target.requires_grad_(False)
        self.critic_target.requires_grad_(False)


# ---------------------------------------------------------------------------- losses
def td_target(rewards: torch.Tensor, terminated: torch.Tensor, next_values: torch.Tensor,
              gamma: float) -> torch.Tensor:
    """y = r + gamma * (1 - terminated) * V(s'): a timeout (truncated, not terminated) bootstraps."""
    return rewards + gamma * (~terminated).to(rewards.dtype) * next_values


@torch.no_grad()
def target_value(model: DDPGModel, next_obs: torch.Tensor) -> torch.Tensor:
    """V(s') = Q'(s', mu'(s')) with the target networks: (B,)."""
    return model.critic_target(next_obs, model.actor_target(next_obs))


def critic_loss(critic: Critic, batch: Batch, targets: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    q = critic(batch.obs, batch.actions)  # (B,)
    loss = (q - targets).pow(2).mean()
    return loss, {"loss/critic": loss.detach(), "charts/q_mean": q.detach().mean()}


def actor_loss(model: DDPGModel, obs: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """-mean Q(s, mu(s)): the deterministic policy gradient."""
    loss = -model.critic(obs, model.actor(obs), detach_params=True).mean()
    return loss, {"loss/actor": loss.detach()}


# ---------------------------------------------------------------------------- update
def update(model: DDPGModel, optimizer: torch.optim.Optimizer, batch: Batch,
           cfg: DDPGConfig) -> dict[str, torch.Tensor]:
    """One critic and actor step (one backward, see the module docstring), then both targets."""
    targets = td_target(batch.rewards, batch.terminated, target_value(model, batch.next_obs), cfg.gamma)
    loss, info = critic_loss(model.critic, batch, targets)
    loss_pi, info_pi = actor_loss(model, batch.obs)
    info.update(info_pi)
    optimizer.zero_grad(set_to_none=True)
    (loss + loss_pi).backward()
    optimizer.step()
    soft_update(model.actor_target, model.actor, cfg.tau)
    soft_update(model.critic_target, model.critic, cfg.tau)
    return info


# ---------------------------------------------------------------------------- agent
def make_optimizer(model: DDPGModel, cfg: DDPGConfig, device: torch.device) -> torch.optim.Adam:
    """One Adam over two named parameter groups; the fused kernel does the step in one launch."""
    groups = [{"name": "actor", "params": list(model.actor.parameters()), "lr": cfg.actor_lr},
              {"name": "critic", "params": list(model.critic.parameters()), "lr": cfg.critic_lr}]
    return torch.optim.Adam(groups, fused=device.type in ("cpu", "cuda"))


class DDPG(AgentBase):
    """DDPG for Box action spaces. See the module docstring for the algorithm."""

    name: ClassVar[str] = "ddpg"
    config_cls: ClassVar[type] = DDPGConfig
    presets: ClassVar[dict[str, Preset]] = PRESETS
    config: DDPGConfig
    # The 0.1 attribute names still work until 1.2, with a FutureWarning.
    nets = deprecated_alias("model")
    optim = deprecated_alias("optimizer")
    rng = deprecated_alias("generator")
    env_steps = deprecated_alias("global_step")

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: DDPGConfig | dict | None = None,
                 device: str | torch.device = "cpu"):
        super().__init__(observation_space, action_space, config, device)
        low, high = box_bounds("DDPG", action_space)
        cfg = self.config
        self.act_dim = int(low.size)
        self.model = DDPGModel(self.obs_dim, self.act_dim, cfg, low, high).to(self.device)
        self.optimizer = make_optimizer(self.model, cfg, self.device)
        init_replay(self, (self.act_dim,), torch.float32)
        self.low = torch.as_tensor(low, device=self.device)
        self.high = torch.as_tensor(high, device=self.device)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        obs = obs.reshape(obs.shape[0], -1)
        actions = self.model.actor(obs)
        if not deterministic:
            noise = torch.randn(actions.shape, generator=self.generator, device=self.device)
            actions = actions + noise * self.config.exploration_noise * self.model.actor.action_scale
            actions = torch.maximum(torch.minimum(actions, self.high), self.low)
        return actions.reshape(obs.shape[0], *self.action_space.shape)

    def train_step(self, env: Any, obs: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """``num_steps`` vector steps (uniform random actions during warm-up), each followed by
        the gradient updates it is owed (``updates_per_step`` per transition)."""
        cfg = self.config
        return collect_and_update(self, env, obs, functools.partial(explore_box, self),
                                  lambda batch: update(self.model, self.optimizer, batch, cfg))

    # -- persistence and hyperparameters
    def state_dict(self, include_buffer: bool | None = None) -> dict[str, Any]:
        return offpolicy_state(self, include_buffer)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_offpolicy_state(self, state)

    def set_hparams(self, **hparams: Any) -> None:
        super().set_hparams(**hparams)
        push_learning_rates(self.optimizer, self.config)
