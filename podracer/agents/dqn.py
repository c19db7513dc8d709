"""Deep Q-Network (DQN) and its Double and Dueling variants, as options of one file.

- DQN: Mnih et al. 2015, "Human-level control through deep reinforcement learning",
  doi:10.1038/nature14236.
- Double DQN: van Hasselt, Guez and Silver 2016, arXiv:1509.06461 (``double=True``).
- Dueling networks: Wang et al. 2016, arXiv:1511.06581 (``dueling=True``); with ``double`` it is
  the "D3QN" (dueling double DQN) of the ElegantRL zoo.

Key equations (B a minibatch from the replay buffer, theta' the target network):
- DQN target:        y = r + gamma * (1 - terminated) * max_a' Q'(s', a')
- Double DQN target: y = r + gamma * (1 - terminated) * Q'(s', argmax_a' Q(s', a'))
- dueling head:      Q(s, a) = V(s) + A(s, a) - mean_a A(s, a)
- loss:              mean_B (Q(s, a) - y)^2
- target network:    theta' <- tau * theta + (1 - tau) * theta' every ``target_update_every``
                     updates (tau = 1: the paper's periodic hard copy)
- exploration:       epsilon-greedy, epsilon decays linearly from ``start_e`` to ``end_e``
                     over ``exploration_steps`` env steps

Our deviations and choices:
- Vector observations and an MLP, Adam instead of RMSProp; defaults from CleanRL's
  classic-control ``dqn.py`` where the Atari paper has no counterpart.
- Squared error, not the paper's Huber (error clipping): with frequent target updates and rare
  terminal transitions (~4% on CartPole), the clipped gradient could not pull the terminal
  values down and Q diverged in our runs; the squared error stayed bounded.
- Only ``terminated`` stops the bootstrap; at a timeout the target uses the true last
  observation ``info["final_obs"]`` (stored by the replay buffer as ``next_obs``).
- Many sub-envs step together; ``updates_per_step`` gradient updates per env transition
  (summed over sub-envs) are interleaved with the vector steps of a ``train_step``.
- Warm-up (uniform random actions) lasts until the replay buffer has collected
  ``learning_starts`` transitions, and updates wait until it has ``max(learning_starts,
  batch_size)``: counted in the buffer, not in env steps, so an agent loaded without its
  buffer refills it before it learns again (``offpolicy.collect_and_update``).
- The registry's "double_dqn" and "d3qn" are this agent with other config defaults
  (``DoubleDQN``, ``D3QN`` below); checkpoints record which.
- ``PRESETS`` holds per-task settings tuned for speed on batched envs (see there).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym
import torch
from torch import nn

from podracer.agents.common import (AgentBase, Preset, deprecated_alias, mlp, preset_config, require_space,
                                    soft_update)
from podracer.agents.offpolicy import (check_config, collect_and_update, init_replay,
                                         load_offpolicy_state, offpolicy_state, push_learning_rates)
from podracer.agents.replay import Batch


# ---------------------------------------------------------------------------- config
@dataclass
class DQNConfig:
    gamma: float = 0.99  # γ, discount; 0.9-0.999
    learning_rate: float = field(default=2.5e-4, metadata={"mutable": (1e-5, 3e-3)})  # α, Adam step; 1e-5-3e-3
    double: bool = False  # Double DQN target: argmax from the online net, value from the target net
    dueling: bool = False  # dueling head: Q = V + A - mean A
    hidden_sizes: tuple[int, ...] = (120, 84)  # hidden layer sizes of the Q network
    batch_size: int = 128  # B, transitions per update; 32-1024
    buffer_size: int = 10_000  # replay capacity in transitions; >= batch_size
    learning_starts: int = 10_000  # uniform random transitions in the buffer before updates
    updates_per_step: float = 0.1  # gradient updates per env transition (summed over sub-envs); 0.01-4
    num_steps: int = 50  # T, vector steps per train_step call
    target_update_every: int = 500  # updates between target-network updates; 1-10000
    tau: float = field(default=1.0, metadata={"mutable": (0.001, 1.0)})  # τ, target Polyak rate (1: hard copy)
    start_e: float = 1.0  # ε at the start of training; 0-1
    end_e: float = field(default=0.05, metadata={"mutable": (0.0, 0.2)})  # final ε; 0-0.2
    exploration_steps: int = 250_000  # env steps (all sub-envs) over which ε decays linearly
    save_buffer: bool = False  # include the replay buffer in state_dict / checkpoints

    aliases: ClassVar[dict[str, str]] = {"hidden": "hidden_sizes", "lr": "learning_rate"}  # 0.1 names

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "DQNConfig":
        """The tuned config for ``name`` (a key of ``PRESETS``), with ``overrides`` on top."""
        return preset_config(cls, "DQN", PRESETS, name, overrides)

    def __post_init__(self) -> None:
        check_config(self, positive=("learning_rate",), at_least_one=("target_update_every", "exploration_steps"),
                     unit_interval=("start_e", "end_e"))


@dataclass
class DoubleDQNConfig(DQNConfig):
    double: bool = True


@dataclass
class D3QNConfig(DQNConfig):
    double: bool = True
    dueling: bool = True


# Tuned on this project's tensor envs (2-core CPU, one torch thread): many sub-envs, large batches,
# a fast-moving target network. ``make_agent(name, CartPoleVecEnv(p.num_envs), **p.config)`` for
# any of "dqn", "double_dqn", "d3qn"; tests/test_offpolicy.py checks each reaches > 400.
PRESETS: dict[str, Preset] = {
    "cartpole": Preset(num_envs=16, total_steps=60_000, config=dict(
        hidden_sizes=(128, 128), learning_rate=1e-3, batch_size=128, updates_per_step=0.5, learning_starts=1_000,
        num_steps=16, target_update_every=100, exploration_steps=8_000, end_e=0.04, buffer_size=100_000)),
}


# ---------------------------------------------------------------------------- networks
class QNetwork(nn.Module):
    """Q(s, .) for all actions at once: (B, obs_dim) -> (B, num_actions); optionally dueling."""

    def __init__(self, obs_dim: int, num_actions: int, hidden_sizes: tuple[int, ...], dueling: bool):
        super().__init__()
        self.dueling = dueling
        if dueling:  # shared trunk, then V(s) and A(s, .) heads
            self.trunk = mlp(obs_dim, hidden_sizes[:-1], hidden_sizes[-1], activation=nn.ReLU, orthogonal=False)
            self.value = nn.Linear(hidden_sizes[-1], 1)
            self.advantage = nn.Linear(hidden_sizes[-1], num_actions)
        else:
            self.net = mlp(obs_dim, hidden_sizes, num_actions, activation=nn.ReLU, orthogonal=False)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if not self.dueling:
            return self.net(obs)
        h = torch.relu(self.trunk(obs))
        adv = self.advantage(h)
        # Wang et al. eq. (9): subtracting the mean makes V and A identifiable.
        return self.value(h) + adv - adv.mean(dim=-1, keepdim=True)


class DQNModel(nn.Module):
    """Online and target Q networks, in one module so they move and save together."""

    def __init__(self, obs_dim: int, num_actions: int, cfg: DQNConfig):
        super().__init__()
        self.q = QNetwork(obs_dim, num_actions, cfg.hidden_sizes, cfg.dueling)
        self.q_target = QNetwork(obs_dim, num_actions, cfg.hidden_sizes, cfg.dueling)
        self.q_target.load_state_dict(self.q.state_dict())
        self.q_target.requires_grad_(False)


# ---------------------------------------------------------------------------- losses
def td_target(rewards: torch.Tensor, terminated: torch.Tensor, next_values: torch.Tensor,
              gamma: float) -> torch.Tensor:
    """y = r + gamma * (1 - terminated) * V(s'): a timeout (truncated, not terminated) bootstraps."""
    return rewards + gamma * (~terminated).to(rewards.dtype) * next_values


@torch.no_grad()
def target_value(model: DQNModel, next_obs: torch.Tensor, double: bool) -> torch.Tensor:
    """V(s') = max_a Q'(s', a) (DQN) or Q'(s', argmax_a Q(s', a)) (Double DQN): (B,)."""
    q_next = model.q_target(next_obs)  # (B, num_actions)
    if not double:
        return q_next.max(dim=-1).values
    best = model.q(next_obs).argmax(dim=-1, keepdim=True)  # (B, 1): chosen by the online net
    return q_next.gather(-1, best).squeeze(-1)


def critic_loss(q: QNetwork, batch: Batch, targets: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """mean_B (Q(s, a) - y)^2, logged as ``loss/critic`` like every other agent's value loss."""
    q_taken = q(batch.obs).gather(-1, batch.actions.unsqueeze(-1)).squeeze(-1)  # (B,)
    loss = (q_taken - targets).pow(2).mean()
    return loss, {"loss/critic": loss.detach(), "charts/q_mean": q_taken.detach().mean()}


# ---------------------------------------------------------------------------- update
def update(model: DQNModel, optimizer: torch.optim.Optimizer, batch: Batch, cfg: DQNConfig,
           update_target: bool) -> dict[str, torch.Tensor]:
    """One gradient step on the online network; with ``update_target`` also the target network."""
    targets = td_target(batch.rewards, batch.terminated, target_value(model, batch.next_obs, cfg.double), cfg.gamma)
    loss, info = critic_loss(model.q, batch, targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if update_target:
        soft_update(model.q_target, model.q, cfg.tau)
    return info


# ---------------------------------------------------------------------------- agent
class DQN(AgentBase):
    """DQN for Discrete action spaces; ``double`` and ``dueling`` config flags select the variants."""

    name: ClassVar[str] = "dqn"
    config_cls: ClassVar[type] = DQNConfig
    presets: ClassVar[dict[str, Preset]] = PRESETS
    config: DQNConfig
    # The 0.1 attribute names still work until 1.2, with a FutureWarning.
    nets = deprecated_alias("model")
    optim = deprecated_alias("optimizer")
    rng = deprecated_alias("generator")
    env_steps = deprecated_alias("global_step")

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: DQNConfig | dict | None = None,
                 device: str | torch.device = "cpu"):
        super().__init__(observation_space, action_space, config, device)
        require_space(type(self).__name__, action_space, (gym.spaces.Discrete,),
                      "for Box (continuous) actions use 'sac', 'td3', 'ddpg' or 'ppo'")
        cfg = self.config
        self.num_actions = int(action_space.n)
        self.action_start = int(action_space.start)  # env actions are start + index
        self.model = DQNModel(self.obs_dim, self.num_actions, cfg).to(self.device)
        self.optimizer = torch.optim.Adam(self.model.q.parameters(), lr=cfg.learning_rate,
                                          fused=self.device.type in ("cpu", "cuda"))
        init_replay(self, (), torch.long)

    @property
    def epsilon(self) -> float:
        """ε for the current env step: linear decay from start_e to end_e."""
        cfg = self.config
        frac = min(1.0, self.global_step / cfg.exploration_steps)
        return cfg.start_e + frac * (cfg.end_e - cfg.start_e)

    @torch.no_grad()
    def _greedy_or_random(self, obs: torch.Tensor, epsilon: float) -> torch.Tensor:
        """Action indices (N,): greedy, replaced by a uniform one with probability ε."""
        n = obs.shape[0]
        greedy = self.model.q(obs.reshape(n, -1)).argmax(dim=-1)
        if epsilon <= 0.0:
            return greedy
        uniform = torch.randint(0, self.num_actions, (n,), generator=self.generator, device=self.device)
        explore = torch.rand(n, generator=self.generator, device=self.device) < epsilon
        return torch.where(explore, uniform, greedy)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        eps = 0.0 if deterministic else self.epsilon
        return self._greedy_or_random(obs, eps) + self.action_start

    def _explore(self, obs: torch.Tensor, warmup: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Uniform random (ε = 1) during warm-up, then ε-greedy; the buffer stores the indices."""
        indices = self._greedy_or_random(obs, 1.0 if warmup else self.epsilon)
        return indices + self.action_start, indices

    def train_step(self, env: Any, obs: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """``num_steps`` vector steps (uniform random actions during warm-up, then ε-greedy), each
        followed by the gradient updates it is owed (``updates_per_step`` per transition)."""
        cfg = self.config
        return collect_and_update(self, env, obs, self._explore,
                                  lambda batch: update(self.model, self.optimizer, batch, cfg,
                                                       self.updates % cfg.target_update_every == 0),
                                  extra_metrics=lambda: {"charts/epsilon": self.epsilon})

    # -- persistence and hyperparameters
    def state_dict(self, include_buffer: bool | None = None) -> dict[str, Any]:
        return offpolicy_state(self, include_buffer)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_offpolicy_state(self, state)

    def set_hparams(self, **hparams: Any) -> None:
        super().set_hparams(**hparams)
        push_learning_rates(self.optimizer, self.config)  # one unnamed group: config.learning_rate


class DoubleDQN(DQN):
    """Double DQN: ``DQN`` with ``double=True`` by default (registry name "double_dqn")."""

    name = "double_dqn"
    config_cls = DoubleDQNConfig


class D3QN(DQN):
    """Dueling Double DQN: ``DQN`` with ``double=True, dueling=True`` (registry name "d3qn")."""

    name = "d3qn"
    config_cls = D3QNConfig
