"""Soft Actor-Critic (SAC) with twin critics and automatic entropy tuning.

Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications", arXiv:1812.05905.

Key equations (B a minibatch from the replay buffer, a' ~ pi(.|s') freshly sampled):
- soft TD target:  y = r + gamma * (1 - terminated) * (min_k Q'_k(s', a') - alpha * log pi(a'|s'))
- critic loss:     sum_k mean_B (Q_k(s, a) - y)^2              (k = 1, 2: clipped double-Q)
- actor loss:      mean_B (alpha * log pi(a~|s) - min_k Q_k(s, a~)),  a~ = reparameterised sample
- alpha loss:      -mean_B log(alpha) * (log pi(a~|s) + H_target),    H_target = -act_dim
- targets:         theta' <- tau * theta + (1 - tau) * theta'  after every update
The policy is a tanh-squashed Gaussian scaled to the Box bounds, a = c + s * tanh(u), with the
change-of-variables correction log pi(a) = log N(u) - sum log(s * (1 - tanh(u)^2)).

Deviations shared by every off-policy agent: ``offpolicy.py``'s docstring. SAC's own:
- The two critics are one ensemble network (batched matmuls), not two modules: same maths,
  half the kernel launches.
- The log-std is squashed into [-5, 2] with a tanh (as CleanRL) rather than hard-clipped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from podracer.agents.common import ActionBounds, QEnsemble, mlp, soft_update, target_net
from podracer.agents.offpolicy import OffPolicyAgent, check_offpolicy_config, critic_loss, td_target
from podracer.agents.replay import Batch

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


# ---------------------------------------------------------------------------- config
@dataclass
class SACConfig:
    gamma: float = 0.99  # γ, discount; 0.9-0.999
    tau: float = field(default=0.005, metadata={"mutable": (0.001, 0.05)})  # τ, target Polyak rate; 0.001-0.05
    actor_lr: float = field(default=3e-4, metadata={"mutable": (1e-5, 3e-3)})  # policy Adam step; 1e-5-3e-3
    critic_lr: float = field(default=3e-4, metadata={"mutable": (1e-5, 3e-3)})  # Q Adam step; 1e-5-3e-3
    alpha_lr: float = 3e-4  # temperature Adam step; 1e-5-3e-3
    alpha: float = field(default=0.2, metadata={"mutable": (0.01, 1.0)})  # α, initial (or fixed) temperature; 0-1
    autotune: bool = True  # learn α towards the target entropy (paper v2)
    target_entropy: float | None = None  # H_target; None means -act_dim (paper)
    hidden_sizes: tuple[int, ...] = (256, 256)  # hidden layer sizes of actor and critics
    batch_size: int = 256  # B, transitions per update; 64-1024
    buffer_size: int = 1_000_000  # replay capacity in transitions; >= batch_size
    learning_starts: int = 5_000  # uniform random transitions in the buffer before updates
    updates_per_step: float = 1.0  # gradient updates per env transition (summed over sub-envs); 0.01-4
    num_steps: int = 50  # T, vector steps per train_step call
    save_buffer: bool = False  # include the replay buffer in state_dict / checkpoints

    def __post_init__(self) -> None:
        check_offpolicy_config(self, positive=("actor_lr", "critic_lr", "alpha_lr"))
        if self.alpha < 0 or (self.autotune and self.alpha == 0):
            raise ValueError(f"alpha must be >= 0 (> 0 with autotune), got {self.alpha}")


# ---------------------------------------------------------------------------- networks
class SquashedGaussianActor(nn.Module):
    """pi(a|s): Gaussian in pre-tanh space, squashed by tanh and scaled to [low, high]."""

    def __init__(self, obs_dim: int, hidden_sizes: tuple[int, ...], bounds: ActionBounds):
        super().__init__()
        self.net = mlp(obs_dim, hidden_sizes, 2 * bounds.low.numel(), activation=nn.ReLU, orthogonal=False)
        self.register_buffer("action_scale", bounds.scale.clone())  # s
        self.register_buffer("action_bias", bounds.bias.clone())  # c

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.net(obs).chunk(2, dim=-1)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(log_std) + 1)
        return mean, log_std

    def deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        mean, _ = self(obs)
        return self.action_bias + self.action_scale * torch.tanh(mean)

    def sample(self, obs: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised sample and its log-probability: (B, act_dim), (B,)."""
        mean, log_std = self(obs)
        noise = torch.randn(mean.shape, generator=generator, device=mean.device)
        u = mean + log_std.exp() * noise
        # log N(u; mean, std), written out so the noise comes from our generator.
        logprob = (-0.5 * noise.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        # tanh correction, stable form: log(1 - tanh(u)^2) = 2 * (log 2 - u - softplus(-2u)).
        logprob = logprob - (2 * (math.log(2) - u - nn.functional.softplus(-2 * u))).sum(-1)
        logprob = logprob - torch.log(self.action_scale).sum()
        return self.action_bias + self.action_scale * torch.tanh(u), logprob


class SACModel(nn.Module):
    """Everything SAC learns, in one module so it moves and saves together."""

    def __init__(self, obs_dim: int, cfg: SACConfig, bounds: ActionBounds):
        super().__init__()
        act_dim = bounds.low.numel()
        self.actor = SquashedGaussianActor(obs_dim, cfg.hidden_sizes, bounds)
        self.critic = QEnsemble(obs_dim, act_dim, cfg.hidden_sizes)
        self.critic_target = target_net(QEnsemble(obs_dim, act_dim, cfg.hidden_sizes), self.critic)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(cfg.alpha) if cfg.alpha > 0 else -math.inf))


# ---------------------------------------------------------------------------- losses
@torch.no_grad()
def soft_value(model: SACModel, next_obs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """V(s') = min_k Q'_k(s', a') - alpha * log pi(a'|s'), a' ~ pi(.|s'): (B,)."""
    next_actions, next_logprob = model.actor.sample(next_obs, generator)
    q_next = model.critic_target(next_obs, next_actions).min(dim=0).values
    return q_next - model.log_alpha.exp() * next_logprob


def actor_loss(model: SACModel, obs: torch.Tensor, actions: torch.Tensor, logprob: torch.Tensor
               ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """mean_B (alpha * log pi(a~|s) - min_k Q_k(s, a~)) for reparameterised ``actions`` a~ and their
    ``logprob``; the critics' parameters are detached (only the actor learns from it)."""
    q = model.critic(obs, actions, detach_params=True).min(dim=0).values
    loss = (model.log_alpha.exp().detach() * logprob - q).mean()
    return loss, {"loss/actor": loss.detach(), "charts/entropy": -logprob.detach().mean()}


def alpha_loss(log_alpha: torch.Tensor, logprob: torch.Tensor, target_entropy: float
               ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """-mean_B log(alpha) * (log pi(a~|s) + H_target); ``logprob`` is detached (only alpha learns)."""
    loss = -(log_alpha * (logprob.detach() + target_entropy)).mean()
    return loss, {"loss/alpha": loss.detach()}


# ---------------------------------------------------------------------------- agent
class SAC(OffPolicyAgent):
    """SAC for Box action spaces. See the module docstring for the algorithm; replay, warm-up,
    collection and state come from ``OffPolicyAgent``."""

    name: ClassVar[str] = "sac"
    config_cls: ClassVar[type] = SACConfig
    config: SACConfig
    model: SACModel

    def build_model(self) -> SACModel:
        cfg = self.config
        fixed = torch.nonzero(self.bounds.scale == 0).flatten().tolist()
        if fixed:
            # log π holds -log((high - low) / 2) per dimension (the squashing's Jacobian): +inf on a
            # dimension with low == high, and every loss, α and weight NaN after the first update.
            raise ValueError(f"SAC needs low < high on every action dimension; dimension(s) {fixed} of "
                             f"{self.action_space} are fixed (low == high). Drop them from the action space with a "
                             f"wrapper, or use 'td3', 'ddpg' or 'ppo', which take such a space")
        self.target_entropy = float(-self.act_dim if cfg.target_entropy is None else cfg.target_entropy)
        return SACModel(self.obs_dim, cfg, self.bounds)

    def param_groups(self) -> list[dict[str, Any]]:
        """Actor, critic and temperature: three named groups in one Adam."""
        alpha = {"name": "alpha", "params": [self.model.log_alpha], "lr": self.config.alpha_lr}
        return [*super().param_groups(), alpha]

    def update(self, batch: Batch) -> dict[str, torch.Tensor]:
        """One gradient step on critics, actor and (with autotune) temperature, then the targets."""
        m, cfg = self.model, self.config
        targets = td_target(batch.rewards, batch.terminated, soft_value(m, batch.next_obs, self.generator), cfg.gamma)
        loss, info = critic_loss(m.critic(batch.obs, batch.actions), targets)
        actions, logprob = m.actor.sample(batch.obs, self.generator)  # a~, reparameterised: (B, act_dim), (B,)
        loss_pi, info_pi = actor_loss(m, batch.obs, actions, logprob)
        loss = loss + loss_pi
        info.update(info_pi)
        if cfg.autotune:
            loss_alpha, info_alpha = alpha_loss(m.log_alpha, logprob, self.target_entropy)
            loss = loss + loss_alpha
            info.update(info_alpha)
        # Disjoint parameters per loss (see the module docstring), so one backward gives each its own gradient.
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        soft_update(m.critic_target, m.critic, cfg.tau)
        info["charts/alpha"] = m.log_alpha.detach().exp()
        return info

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        obs = self.check_obs(obs).reshape(obs.shape[0], -1)
        if deterministic:
            actions = self.model.actor.deterministic(obs)
        else:
            actions, _ = self.model.actor.sample(obs, self.generator)
        return actions.reshape(obs.shape[0], *self.action_space.shape)

    def set_hparams(self, **hparams: Any) -> None:
        super().set_hparams(**hparams)
        if "alpha" in hparams:  # restart the temperature there (autotune keeps adapting it)
            with torch.no_grad():
                self.model.log_alpha.fill_(math.log(self.config.alpha))
