"""Plain functions shared by the off-policy agents (DDPG, TD3, SAC, DQN): the collection loop,
checkpoint state and learning-rate push.

Functions, not a base class: each agent subclasses ``AgentBase`` directly (one level of
inheritance, see STYLE.md) and its ``train_step`` stays a short visible call, while networks,
losses, ``update`` and ``act`` stay in the agent's own file. What the functions read and write on
the agent is spelled out once, as the ``OffPolicyAgent`` protocol below; ``init_replay`` creates
the replay part of it.

Warm-up and updates are gated on the agent's replay buffer, not on its step count: a loaded
agent whose checkpoint had no buffer (``save_buffer=False``, the default, and every tournament
generation) refills it with uniform random actions and does no update until it holds
``max(learning_starts, batch_size)`` transitions, instead of sampling its first batches from a
handful of transitions.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Protocol

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from podracer.agents.common import require_space, restore_generator
from podracer.agents.replay import Batch, ReplayBuffer


class OffPolicyAgent(Protocol):
    """What the functions below use on an agent (SAC, TD3, DDPG, DQN all have it)."""

    config: Any  # num_steps, learning_starts, updates_per_step, batch_size, buffer_size, save_buffer
    device: torch.device
    model: nn.Module  # everything learned
    optimizer: torch.optim.Optimizer
    generator: torch.Generator  # exploration and update noise; the buffer has its own
    buffer: ReplayBuffer
    global_step: int  # env steps collected by this agent, summed over sub-envs (across runs)
    updates: int  # gradient updates done so far
    _owed_updates: float  # fractional updates carried between vector steps


# Checkpoint keys written by podracer 0.1, and their 1.0 names.
OLD_STATE_KEYS = {"nets": "model", "optim": "optimizer", "rng": "generator", "env_steps": "global_step"}


def check_config(cfg: Any, positive: tuple[str, ...] = (), non_negative: tuple[str, ...] = (),
                 at_least_one: tuple[str, ...] = (), unit_interval: tuple[str, ...] = ()) -> None:
    """The ``__post_init__`` checks every off-policy config shares (gamma, tau, network sizes,
    replay sizes), plus the agent's own fields by kind. Why shared: the same replay fields appear
    in every off-policy config and must fail with the same clear messages."""
    cfg.hidden_sizes = tuple(int(h) for h in cfg.hidden_sizes)  # a list from a checkpoint or YAML is fine
    if not 0.0 < cfg.gamma <= 1.0:
        raise ValueError(f"gamma must be in (0, 1], got {cfg.gamma}")
    if not 0.0 < cfg.tau <= 1.0:
        raise ValueError(f"tau must be in (0, 1], got {cfg.tau}")
    for name in (*positive, "updates_per_step"):
        if getattr(cfg, name) <= 0:
            raise ValueError(f"{name} must be positive, got {getattr(cfg, name)}")
    for name in non_negative:
        if getattr(cfg, name) < 0:
            raise ValueError(f"{name} must be >= 0, got {getattr(cfg, name)}")
    for name in unit_interval:
        if not 0.0 <= getattr(cfg, name) <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {getattr(cfg, name)}")
    if not cfg.hidden_sizes or min(cfg.hidden_sizes) < 1:
        raise ValueError(f"hidden_sizes must be a non-empty tuple of positive sizes, got {cfg.hidden_sizes}")
    for name in (*at_least_one, "batch_size", "buffer_size", "num_steps"):
        if getattr(cfg, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(cfg, name)}")
    if cfg.learning_starts < 0:
        raise ValueError(f"learning_starts must be >= 0, got {cfg.learning_starts}")


def box_bounds(agent_name: str, action_space: gym.Space) -> tuple[np.ndarray, np.ndarray]:
    """Flat ``(low, high)`` of a Box action space. Why shared: DDPG, TD3 and SAC all squash
    actions into the bounds, so they need the same clear errors for a Discrete or unbounded space."""
    require_space(agent_name, action_space, (gym.spaces.Box,),
                  "for Discrete actions use 'dqn', 'double_dqn', 'd3qn' or 'ppo'")
    low, high = np.asarray(action_space.low, np.float32).ravel(), np.asarray(action_space.high, np.float32).ravel()
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        raise ValueError(f"{agent_name} squashes actions into the Box bounds, which must be finite; "
                         f"got {action_space}. Rescale the env's actions to a bounded Box")
    return low, high


def init_replay(agent: Any, action_shape: tuple[int, ...], action_dtype: torch.dtype) -> None:
    """Give ``agent`` its random generator, replay buffer and step counters.

    Why shared: every off-policy agent needs the same three, seeded the same way. Both seeds are
    drawn from torch's global RNG, so ``make_agent(..., seed=s)`` fixes them with the weights.
    """
    seeds = torch.randint(0, 2**62, (2,)).tolist()
    agent.generator = torch.Generator(device=agent.device)
    agent.generator.manual_seed(seeds[0])
    agent.buffer = ReplayBuffer(agent.config.buffer_size, agent.obs_dim, action_shape, action_dtype, agent.device,
                                seed=seeds[1])
    agent.global_step = 0  # env transitions collected so far, summed over sub-envs
    agent.updates = 0  # gradient updates done so far
    agent._owed_updates = 0.0  # fractional updates carried between vector steps


def explore_box(agent: Any, obs: torch.Tensor, warmup: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Actions for a Box agent's collection step: uniform in ``[agent.low, agent.high]`` during
    warm-up (from the agent's own generator), then its exploring policy ``agent.act(obs)``.
    Returns (actions for ``env.step``, the same actions flat for the replay buffer). Why shared:
    DDPG, TD3 and SAC explore the same way; only their ``act`` differs."""
    n = obs.shape[0]
    if warmup:
        u = torch.rand(n, agent.act_dim, generator=agent.generator, device=agent.device)
        actions = (agent.low + (agent.high - agent.low) * u).reshape(n, *agent.action_space.shape)
    else:
        actions = agent.act(obs)
    return actions, actions.reshape(n, -1)


# (obs, warmup) -> (actions for env.step, actions as stored in the replay buffer)
ChooseActions = Callable[[torch.Tensor, bool], tuple[torch.Tensor, torch.Tensor]]


def collect_and_update(agent: OffPolicyAgent, env: Any, obs: torch.Tensor, choose_actions: ChooseActions,
                       update_fn: Callable[[Batch], dict[str, torch.Tensor]],
                       extra_metrics: Callable[[], dict[str, float]] | None = None,
                       ) -> tuple[torch.Tensor, dict[str, float]]:
    """``config.num_steps`` vector steps, each followed by the gradient updates it is owed.

    Why shared: warm-up, storing ``info["final_obs"]``, the fractional-update bookkeeping and the
    single host sync were copied verbatim in four agents. What differs between them comes in as
    arguments: ``choose_actions(obs, warmup)`` (warm-up random actions, noise, ε-greedy) and
    ``update_fn(batch)``, called after ``agent.updates`` is incremented so that delayed steps
    (TD3's actor, DQN's target) can read it. ``extra_metrics()`` is called after the loop and its
    keys go right after ``env_steps`` and ``charts/updates``.

    Warm-up lasts while this buffer has collected fewer than ``learning_starts`` transitions;
    updates start once it has collected ``max(learning_starts, batch_size)``. Counting the
    buffer's transitions, not ``global_step``, makes a loaded agent with an empty buffer refill
    it before it learns again (see the module docstring).
    """
    cfg = agent.config
    n = env.num_envs
    updates_from = max(cfg.learning_starts, cfg.batch_size)
    sums: dict[str, torch.Tensor] = {}
    counts: dict[str, int] = {}  # per key: TD3 reports its actor loss on delayed updates only
    num_updates = 0
    for _ in range(cfg.num_steps):
        env_actions, stored_actions = choose_actions(obs, agent.buffer.num_added < cfg.learning_starts)
        next_obs, rewards, terminated, _truncated, info = env.step(env_actions)
        # final_obs, not next_obs: at a timeout next_obs is already the reset observation.
        agent.buffer.add(obs, stored_actions, rewards, info["final_obs"], terminated)
        obs = next_obs
        agent.global_step += n
        if agent.buffer.num_added < updates_from:
            continue
        agent._owed_updates += n * cfg.updates_per_step
        while agent._owed_updates >= 1.0:
            agent._owed_updates -= 1.0
            agent.updates += 1
            info_u = update_fn(agent.buffer.sample(cfg.batch_size))
            for k, v in info_u.items():
                sums[k] = sums[k] + v if k in sums else v
                counts[k] = counts.get(k, 0) + 1
            num_updates += 1
    metrics = {"env_steps": float(cfg.num_steps * n), "charts/updates": float(num_updates)}
    if extra_metrics is not None:
        metrics.update(extra_metrics())
    # One host sync per call, not per update.
    metrics.update({k: v.item() / counts[k] for k, v in sums.items()})
    return obs, metrics


def offpolicy_state(agent: OffPolicyAgent, include_buffer: bool | None = None) -> dict[str, Any]:
    """The agent's ``state_dict``: model, optimizer, generator (with its device type) and step
    counters, plus the replay buffer when ``include_buffer`` (default ``config.save_buffer``).
    Shared so that every off-policy checkpoint has the same keys and resumes the same way."""
    state: dict[str, Any] = {
        "model": agent.model.state_dict(),
        "optimizer": agent.optimizer.state_dict(),
        "generator": agent.generator.get_state(),
        "generator_device": agent.device.type,
        "global_step": agent.global_step, "updates": agent.updates, "owed_updates": agent._owed_updates,
    }
    if agent.config.save_buffer if include_buffer is None else include_buffer:
        state["buffer"] = agent.buffer.state_dict()
    return state


def load_offpolicy_state(agent: OffPolicyAgent, state: dict[str, Any]) -> None:
    """Inverse of ``offpolicy_state``, for a state saved on any device, and for the 0.1 keys
    (``nets``, ``optim``, ``rng``, ``env_steps``). The buffer is restored only if the checkpoint
    has one; without it the agent warms up again (see the module docstring)."""
    state = {OLD_STATE_KEYS.get(k, k): v for k, v in state.items()}
    agent.model.load_state_dict(state["model"])
    # A copy: torch's loader keeps the given moment tensors, which would tie this agent's Adam
    # state to the caller's (to another live agent's, for ``b.load_state_dict(a.state_dict())``).
    agent.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
    # None for a 0.1 checkpoint: restore_generator then tells the device type by the state's size.
    restore_generator(agent.generator, state["generator"], state.get("generator_device"))
    agent.global_step, agent.updates = int(state["global_step"]), int(state["updates"])
    agent._owed_updates = float(state["owed_updates"])
    if "buffer" in state:
        agent.buffer.load_state_dict(state["buffer"])


def push_learning_rates(optimizer: torch.optim.Optimizer, config: Any) -> None:
    """Set each param group's ``lr`` to ``config.<name>_lr`` (``config.learning_rate`` for an
    unnamed group) after ``set_hparams``, so a tournament's perturbed learning rates reach the
    live optimizer (no rebuild: Adam's moments are kept)."""
    for group in optimizer.param_groups:
        group["lr"] = getattr(config, f"{group['name']}_lr" if "name" in group else "learning_rate")
