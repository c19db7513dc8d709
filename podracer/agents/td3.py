"""Twin Delayed DDPG (TD3): a deterministic policy with three fixes to DDPG's overestimation.

Fujimoto, van Hoof and Meger 2018, "Addressing Function Approximation Error in Actor-Critic
Methods", arXiv:1802.09477 (defaults from the authors' updated code: 256-256, lr 3e-4).

Key equations (B a minibatch from the replay buffer, s the scale (high - low) / 2 of the Box):
- target policy smoothing: a' = clip(mu'(s') + clip(eps, -c s, c s), low, high),  eps ~ N(0, (sigma s)^2)
- clipped double-Q target: y = r + gamma * (1 - terminated) * min_{k=1,2} Q'_k(s', a')
- critic loss:             sum_k mean_B (Q_k(s, a) - y)^2
- delayed actor update:    every ``policy_delay`` critic updates, maximise mean_B Q_1(s, mu(s)),
                           then theta' <- tau * theta + (1 - tau) * theta' for actor and critics
- exploration:             a = clip(mu(s) + N(0, (sigma_explore s)^2), low, high)

Deviations shared by every off-policy agent: ``offpolicy.py``'s docstring. TD3's own:
- The two critics are one ensemble network (batched matmuls): same maths, fewer kernel launches.
- The actor and its exploration are DDPG's (``common.DeterministicActor``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import nn

from podracer.agents.common import ActionBounds, DeterministicActor, QEnsemble, soft_update, target_net
from podracer.agents.offpolicy import (DeterministicPolicyAgent, check_offpolicy_config, critic_loss,
                                       td_target)
from podracer.agents.replay import Batch


# ---------------------------------------------------------------------------- config
@dataclass
class TD3Config:
    gamma: float = 0.99  # γ, discount; 0.9-0.999
    tau: float = field(default=0.005, metadata={"mutable": (0.001, 0.05)})  # τ, target Polyak rate; 0.001-0.05
    actor_lr: float = field(default=3e-4, metadata={"mutable": (1e-5, 3e-3)})  # policy Adam step; 1e-5-3e-3
    critic_lr: float = field(default=3e-4, metadata={"mutable": (1e-5, 3e-3)})  # Q Adam step; 1e-5-3e-3
    exploration_noise: float = field(default=0.1, metadata={"mutable": (0.02, 0.5)})  # σ_explore (x scale); 0-0.5
    policy_noise: float = field(default=0.2, metadata={"mutable": (0.05, 0.5)})  # σ, target smoothing (x scale); 0-0.5
    noise_clip: float = 0.5  # c, clip of the smoothing noise (x scale); 0-1
    policy_delay: int = 2  # d, critic updates per actor (and target) update; 1-4
    hidden_sizes: tuple[int, ...] = (256, 256)  # hidden layer sizes of actor and critics
    batch_size: int = 256  # B, transitions per update; 64-1024
    buffer_size: int = 1_000_000  # replay capacity in transitions; >= batch_size
    learning_starts: int = 25_000  # uniform random transitions in the buffer before updates
    updates_per_step: float = 1.0  # gradient updates per env transition (summed over sub-envs); 0.01-4
    num_steps: int = 50  # T, vector steps per train_step call
    save_buffer: bool = False  # include the replay buffer in state_dict / checkpoints

    def __post_init__(self) -> None:
        check_offpolicy_config(self, positive=("actor_lr", "critic_lr"),
                               non_negative=("exploration_noise", "policy_noise", "noise_clip"),
                               at_least_one=("policy_delay",))


# ---------------------------------------------------------------------------- networks
class TD3Model(nn.Module):
    """Everything TD3 learns, in one module so it moves and saves together: DDPG's deterministic
    actor (``common.DeterministicActor``) and twin critics, each with its target."""

    def __init__(self, obs_dim: int, cfg: TD3Config, bounds: ActionBounds):
        super().__init__()
        act_dim = bounds.low.numel()
        self.actor = DeterministicActor(obs_dim, cfg.hidden_sizes, bounds)
        self.actor_target = target_net(DeterministicActor(obs_dim, cfg.hidden_sizes, bounds), self.actor)
        self.critic = QEnsemble(obs_dim, act_dim, cfg.hidden_sizes, num_critics=2)
        self.critic_target = target_net(QEnsemble(obs_dim, act_dim, cfg.hidden_sizes, num_critics=2), self.critic)


# ---------------------------------------------------------------------------- losses
@torch.no_grad()
def smoothed_target_value(model: TD3Model, next_obs: torch.Tensor, cfg: TD3Config,
                          generator: torch.Generator) -> torch.Tensor:
    """V(s') = min_k Q'_k(s', a') at the smoothed target action a' (Fujimoto et al. sec. 5.3): (B,)."""
    actor = model.actor_target
    actions = actor(next_obs)
    # clip(eps, -c s, c s) with eps ~ N(0, (sigma s)^2) is s * clip(N(0, sigma^2), -c, c): s > 0.
    noise = torch.randn(actions.shape, generator=generator, device=actions.device) * cfg.policy_noise
    actions = actions + noise.clamp(-cfg.noise_clip, cfg.noise_clip) * actor.action_scale
    actions = actions.clamp(actor.action_low, actor.action_high)
    return model.critic_target(next_obs, actions).min(dim=0).values


def actor_loss(model: TD3Model, obs: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """-mean Q_1(s, mu(s)): the deterministic policy gradient through the first critic only."""
    loss = -model.critic(obs, model.actor(obs), detach_params=True)[0].mean()
    return loss, {"loss/actor": loss.detach()}


# ---------------------------------------------------------------------------- agent
class TD3(DeterministicPolicyAgent):
    """TD3 for Box action spaces. See the module docstring for the algorithm; replay, warm-up,
    collection, state and the actor and critic parameter groups come from ``OffPolicyAgent``,
    acting from ``DeterministicPolicyAgent``."""

    name: ClassVar[str] = "td3"
    config_cls: ClassVar[type] = TD3Config
    config: TD3Config
    model: TD3Model

    def build_model(self) -> TD3Model:
        return TD3Model(self.obs_dim, self.config, self.bounds)

    def update(self, batch: Batch) -> dict[str, torch.Tensor]:
        """One critic step; every ``policy_delay``-th update also one actor step and the targets."""
        m, cfg = self.model, self.config
        update_actor = self.updates % cfg.policy_delay == 0
        targets = td_target(batch.rewards, batch.terminated,
                            smoothed_target_value(m, batch.next_obs, cfg, self.generator), cfg.gamma)
        loss, info = critic_loss(m.critic(batch.obs, batch.actions), targets)  # (K, B) Q values
        if update_actor:
            loss_pi, info_pi = actor_loss(m, batch.obs)
            loss = loss + loss_pi
            info.update(info_pi)
        # Disjoint parameters per loss (see the module docstring), so one backward gives each its own
        # gradient; without an actor loss the actor's .grad stays None and Adam skips it.
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        if update_actor:
            soft_update(m.actor_target, m.actor, cfg.tau)
            soft_update(m.critic_target, m.critic, cfg.tau)
        return info
