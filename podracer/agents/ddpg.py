"""Deep Deterministic Policy Gradient (DDPG): Q-learning with a deterministic actor.

Lillicrap et al. 2015, "Continuous control with deep reinforcement learning", arXiv:1509.02971.

Key equations (B a minibatch from the replay buffer, s the scale (high - low) / 2 of the Box):
- TD target:     y = r + gamma * (1 - terminated) * Q'(s', mu'(s'))
- critic loss:   mean_B (Q(s, a) - y)^2
- actor loss:    -mean_B Q(s, mu(s))   (the deterministic policy gradient, Silver et al. 2014)
- targets:       theta' <- tau * theta + (1 - tau) * theta'  after every update
- exploration:   a = clip(mu(s) + N(0, (sigma_explore s)^2), low, high)

Deviations shared by every off-policy agent: ``offpolicy.py``'s docstring. DDPG's own:
- The actor, ``common.DeterministicActor``, and its Gaussian exploration are TD3's too; the
  critic is one plain MLP (``Critic``), not TD3's twin-critic ensemble.
- Gaussian exploration noise instead of Ornstein-Uhlenbeck and no L2 weight decay on the
  critic, as the re-tuned DDPG baseline of Fujimoto et al. 2018; ReLU and default PyTorch init.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import nn

from podracer.agents.common import ActionBounds, DeterministicActor, soft_update, target_net
from podracer.agents.offpolicy import (DeterministicPolicyAgent, check_offpolicy_config, critic_loss,
                                       td_target)
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

    def __post_init__(self) -> None:
        check_offpolicy_config(self, positive=("actor_lr", "critic_lr"), non_negative=("exploration_noise",))


# ---------------------------------------------------------------------------- networks
class Critic(nn.Module):
    """One Q(s, a), an MLP on the concatenated input: returns (B,). A plain network, not a
    one-member ``QEnsemble``: the ensemble's batched matmul buys nothing for one critic, and this
    keeps DDPG's PyTorch-default initialisation and its checkpoints' weight layout."""

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


class DDPGModel(nn.Module):
    """Everything DDPG learns, in one module so it moves and saves together."""

    def __init__(self, obs_dim: int, cfg: DDPGConfig, bounds: ActionBounds):
        super().__init__()
        act_dim = bounds.low.numel()
        self.actor = DeterministicActor(obs_dim, cfg.hidden_sizes, bounds)
        self.actor_target = target_net(DeterministicActor(obs_dim, cfg.hidden_sizes, bounds), self.actor)
        self.critic = Critic(obs_dim, act_dim, cfg.hidden_sizes)
        self.critic_target = target_net(Critic(obs_dim, act_dim, cfg.hidden_sizes), self.critic)


# ---------------------------------------------------------------------------- losses
@torch.no_grad()
def target_value(model: DDPGModel, next_obs: torch.Tensor) -> torch.Tensor:
    """V(s') = Q'(s', mu'(s')) with the target networks: (B,)."""
    return model.critic_target(next_obs, model.actor_target(next_obs))


def actor_loss(model: DDPGModel, obs: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """-mean Q(s, mu(s)): the deterministic policy gradient."""
    loss = -model.critic(obs, model.actor(obs), detach_params=True).mean()
    return loss, {"loss/actor": loss.detach()}


# ---------------------------------------------------------------------------- agent
class DDPG(DeterministicPolicyAgent):
    """DDPG for Box action spaces. See the module docstring for the algorithm; replay, warm-up,
    collection, state and the actor and critic parameter groups come from ``OffPolicyAgent``,
    acting from ``DeterministicPolicyAgent``."""

    name: ClassVar[str] = "ddpg"
    config_cls: ClassVar[type] = DDPGConfig
    config: DDPGConfig
    model: DDPGModel

    def build_model(self) -> DDPGModel:
        return DDPGModel(self.obs_dim, self.config, self.bounds)

    def update(self, batch: Batch) -> dict[str, torch.Tensor]:
        """One critic and actor step (one backward, see the module docstring), then both targets."""
        m, cfg = self.model, self.config
        targets = td_target(batch.rewards, batch.terminated, target_value(m, batch.next_obs), cfg.gamma)
        loss, info = critic_loss(m.critic(batch.obs, batch.actions), targets)  # (B,) Q values
        loss_pi, info_pi = actor_loss(m, batch.obs)
        info.update(info_pi)
        self.optimizer.zero_grad(set_to_none=True)
        (loss + loss_pi).backward()
        self.optimizer.step()
        soft_update(m.actor_target, m.actor, cfg.tau)
        soft_update(m.critic_target, m.critic, cfg.tau)
        return info
