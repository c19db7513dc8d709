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

Deviations shared by every off-policy agent: ``offpolicy.py``'s docstring. DQN's own:
- Vector observations and an MLP, Adam instead of RMSProp; defaults from CleanRL's
  classic-control ``dqn.py`` where the Atari paper has no counterpart.
- Squared error, not the paper's Huber (error clipping): with frequent target updates and rare
  terminal transitions (~4% on CartPole), the clipped gradient could not pull the terminal
  values down and Q diverged in our runs; the squared error stayed bounded.
- The registry's "double_dqn" and "d3qn" are this agent with other config defaults
  (``DoubleDQN``, ``D3QN`` below); checkpoints record which.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym
import torch
from torch import nn

from podracer.agents.common import mlp, soft_update, target_net
from podracer.agents.offpolicy import OffPolicyAgent, check_offpolicy_config, critic_loss, td_target
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

    def __post_init__(self) -> None:
        check_offpolicy_config(self, positive=("learning_rate",), unit_interval=("start_e", "end_e"),
                               at_least_one=("target_update_every", "exploration_steps"))


@dataclass
class DoubleDQNConfig(DQNConfig):
    double: bool = True


@dataclass
class D3QNConfig(DQNConfig):
    double: bool = True
    dueling: bool = True


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
        self.q_target = target_net(QNetwork(obs_dim, num_actions, cfg.hidden_sizes, cfg.dueling), self.q)


# ---------------------------------------------------------------------------- losses
@torch.no_grad()
def target_value(model: DQNModel, next_obs: torch.Tensor, double: bool) -> torch.Tensor:
    """V(s') = max_a Q'(s', a) (DQN) or Q'(s', argmax_a Q(s', a)) (Double DQN): (B,)."""
    q_next = model.q_target(next_obs)  # (B, num_actions)
    if not double:
        return q_next.max(dim=-1).values
    best = model.q(next_obs).argmax(dim=-1, keepdim=True)  # (B, 1): chosen by the online net
    return q_next.gather(-1, best).squeeze(-1)


# ---------------------------------------------------------------------------- agent
class DQN(OffPolicyAgent):
    """DQN for Discrete action spaces; ``double`` and ``dueling`` config flags select the variants.
    Replay, warm-up, collection and state come from ``OffPolicyAgent``."""

    name: ClassVar[str] = "dqn"
    config_cls: ClassVar[type] = DQNConfig
    action_space_type: ClassVar[type[gym.Space]] = gym.spaces.Discrete
    config: DQNConfig
    model: DQNModel

    def build_model(self) -> DQNModel:
        return DQNModel(self.obs_dim, self.num_actions, self.config)

    def param_groups(self) -> list[dict[str, Any]]:
        """One unnamed group: its learning rate is ``config.learning_rate``."""
        return [{"params": self.model.q.parameters(), "lr": self.config.learning_rate}]

    def update(self, batch: Batch) -> dict[str, torch.Tensor]:
        """One gradient step on the online network; every ``target_update_every``-th update also
        moves the target network towards it (tau = 1: a hard copy)."""
        m, cfg = self.model, self.config
        targets = td_target(batch.rewards, batch.terminated, target_value(m, batch.next_obs, cfg.double), cfg.gamma)
        q_taken = m.q(batch.obs).gather(-1, batch.actions.unsqueeze(-1)).squeeze(-1)  # (B,) Q(s, a)
        loss, info = critic_loss(q_taken, targets)  # logged as loss/critic like every agent's value loss
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        if self.updates % cfg.target_update_every == 0:
            soft_update(m.q_target, m.q, cfg.tau)
        return info

    # -- acting: ε-greedy
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
        return self._greedy_or_random(self.check_obs(obs), eps) + self.action_start

    def explore(self, obs: torch.Tensor, warmup: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Uniform random (ε = 1) during warm-up, then ε-greedy; the buffer stores the indices."""
        indices = self._greedy_or_random(obs, 1.0 if warmup else self.epsilon)
        return indices + self.action_start, indices

    def extra_metrics(self) -> dict[str, float]:
        return {"charts/epsilon": self.epsilon}


class DoubleDQN(DQN):
    """Double DQN: ``DQN`` with ``double=True`` by default (registry name "double_dqn")."""

    name = "double_dqn"
    config_cls = DoubleDQNConfig


class D3QN(DQN):
    """Dueling Double DQN: ``DQN`` with ``double=True, dueling=True`` (registry name "d3qn")."""

    name = "d3qn"
    config_cls = D3QNConfig
