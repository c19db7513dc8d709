"""The off-policy base class: what SAC, TD3, DDPG and DQN share, so each of their files holds
only its config, networks, losses, ``update(batch)`` and ``act``.

``OffPolicyAgent`` owns, for all four:

- construction: the action space check (Box bounds or Discrete), then the subclass's networks
  (``build_model``) and one Adam over its named parameter groups (``param_groups``), then the
  agent's ``torch.Generator`` and the replay buffer, both seeded from torch's global RNG after the
  weights, so ``make_agent(..., seed=s)`` fixes all of them;
- collection (``train_step``): ``config.num_steps`` vector steps, each stored with
  ``info["final_obs"]`` as the next observation (a timeout bootstraps from the true last
  observation, a termination does not), each followed by the gradient updates it is owed
  (``updates_per_step`` per transition, fractions carried over);
- warm-up: uniform random actions (``explore``) while the buffer has collected fewer than
  ``learning_starts`` transitions, and no update until it has ``max(learning_starts, batch_size)``;
- state: ``state_dict`` / ``load_state_dict`` (model, optimizer, generator, counters, optionally
  the buffer; checkpoints from podracer 0.1 included) and ``set_hparams``, which pushes learning
  rates into the optimizer's param groups;
- the 0.1 attribute names ``nets``, ``optim``, ``rng``, ``env_steps`` (``podracer.deprecation``).

Our deviations from the papers, the same for SAC, TD3, DDPG and DQN (each agent's docstring
lists only its own and points here):

- Only ``terminated`` stops the bootstrap; at a timeout the target uses the true last
  observation ``info["final_obs"]`` (the replay buffer stores it as ``next_obs``).
- Many sub-envs step together; ``updates_per_step`` gradient updates are done per env
  transition (summed over sub-envs), interleaved with the vector steps of a ``train_step``.
- Warm-up and updates are gated on the replay buffer, not on the step count: uniform random
  actions until it has collected ``learning_starts`` transitions, no update until it holds
  ``max(learning_starts, batch_size)``. So a loaded agent whose checkpoint had no buffer
  (``save_buffer=False``, the default, and every tournament generation) refills it before it
  learns again, instead of sampling its first batches from a handful of transitions.
- One fused update (SAC, TD3, DDPG): the critics', the actor's (and SAC's temperature's) losses
  are summed, one backward pass and one Adam step with a named parameter group each (each with
  its own learning rate). The actor's loss sees the critics' parameters detached, so each loss
  moves only its own parameters and each gradient equals the one a separate backward pass gives;
  the actor's gradient comes from the critics before (not after) this update's critic step.
  Fewer, larger kernels: this is what makes small networks fast on a CPU. tests/test_offpolicy.py
  checks one update against two plain optimizers stepped on the same batch.
- The presets, tuned for speed on batched envs, are data: ``podracer/presets/<agent>.yaml``
  (``podracer.get_preset``).

Also here: ``DeterministicPolicyAgent``, the acting DDPG and TD3 share, and as plain functions the
TD target and the critic's regression loss, the same for all four algorithms.
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar

import gymnasium as gym
import torch
from torch import nn

from podracer.agents.common import (AgentBase, ActionBounds, action_bounds, check_config, make_adam, require_space,
                                    restore_generator)
from podracer.agents.replay import Batch, ReplayBuffer
from podracer.deprecation import deprecated_alias, renamed_keys


def check_offpolicy_config(cfg: Any, **kinds: tuple[str, ...]) -> None:
    """``common.check_config`` for an off-policy config: the fields every one has (discount,
    target rate, replay and collection sizes) plus the agent's own, given by kind."""
    merged = {**kinds, "unit_excl_zero": ("gamma", "tau", *kinds.get("unit_excl_zero", ())),
              "positive": (*kinds.get("positive", ()), "updates_per_step"),
              "at_least_one": (*kinds.get("at_least_one", ()), "batch_size", "buffer_size", "num_steps"),
              "non_negative": (*kinds.get("non_negative", ()), "learning_starts")}
    check_config(cfg, **merged)


# ---------------------------------------------------------------------------- shared maths
def td_target(rewards: torch.Tensor, terminated: torch.Tensor, next_values: torch.Tensor,
              gamma: float) -> torch.Tensor:
    """y = r + gamma * (1 - terminated) * V(s'): a timeout (truncated, not terminated) bootstraps.
    (V(s') zeroed where terminated: the same numbers as the product, in one op instead of three.)"""
    return rewards + gamma * next_values.masked_fill(terminated, 0.0)


def critic_loss(q: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """mean_B (Q(s, a) - y)^2, summed over a critic ensemble's members: ``q`` is (B,) or (K, B)."""
    loss = (q - targets).pow(2).mean(dim=-1).sum()
    return loss, {"loss/critic": loss.detach(), "charts/q_mean": q.detach().mean()}


# ---------------------------------------------------------------------------- base class
class OffPolicyAgent(AgentBase):
    """Replay, warm-up, collection, generator, state and learning rates of an off-policy agent.

    A subclass sets ``name``, ``config_cls`` (with the fields ``gamma``, ``tau``, ``hidden_sizes``,
    ``batch_size``, ``buffer_size``, ``learning_starts``, ``updates_per_step``, ``num_steps``,
    ``save_buffer``) and ``action_space_type``, and writes:

    - ``build_model()``: everything it learns, one ``nn.Module`` (Box agents read ``self.bounds``
      and ``self.act_dim``, Discrete ones ``self.num_actions``);
    - ``param_groups()``: Adam's groups; a group named ``"actor"`` gets ``config.actor_lr`` (and
      ``set_hparams`` keeps it so), an unnamed one ``config.learning_rate``. The default is the
      actor-critic pair, ``model.actor`` and ``model.critic`` (DDPG, TD3; SAC adds its temperature);
    - ``update(batch)``: one gradient update on a replay minibatch, returning detached loss
      tensors by metric name; ``self.updates`` already counts it (delayed steps read it);
    - ``act(obs, deterministic)``, and ``explore`` if warm-up and exploration differ from the Box
      default (DQN's ε-greedy).
    """

    action_space_type: ClassVar[type[gym.Space]] = gym.spaces.Box  # or gym.spaces.Discrete
    # The 0.1 attribute names (and checkpoint keys) still work, with the warning of podracer.deprecation.
    nets = deprecated_alias("model")
    optim = deprecated_alias("optimizer")
    rng = deprecated_alias("generator")
    env_steps = deprecated_alias("global_step")

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: Any = None,
                 device: str | torch.device = "cpu"):
        super().__init__(observation_space, action_space, config, device)
        if self.action_space_type is gym.spaces.Box:
            self.bounds: ActionBounds = action_bounds(type(self).__name__, action_space)
            self.act_dim = int(self.bounds.low.numel())
            self.action_low, self.action_high = self.bounds.low.to(self.device), self.bounds.high.to(self.device)
            stored_action: tuple[tuple[int, ...], torch.dtype] = ((self.act_dim,), torch.float32)
        else:
            require_space(type(self).__name__, action_space, (gym.spaces.Discrete,),
                          "for Box (continuous) actions use 'sac', 'td3', 'ddpg' or 'ppo'")
            self.num_actions = int(action_space.n)
            self.action_start = int(action_space.start)  # env actions are start + index
            stored_action = ((), torch.long)
        self.model = self.build_model().to(self.device)
        self.optimizer = make_adam(self.param_groups())
        # Both seeds from torch's global RNG, drawn after the weights' initialisation.
        seeds = torch.randint(0, 2**62, (2,)).tolist()
        self.generator = torch.Generator(device=self.device)  # exploration and update noise
        self.generator.manual_seed(seeds[0])
        self.buffer = ReplayBuffer(self.config.buffer_size, self.obs_dim, *stored_action, self.device, seed=seeds[1])
        self.global_step = 0  # env transitions collected so far, summed over sub-envs (across runs)
        self.updates = 0  # gradient updates done so far
        self._owed_updates = 0.0  # fractional updates carried between vector steps

    # -- what each algorithm writes
    def build_model(self) -> nn.Module:
        raise NotImplementedError

    def param_groups(self) -> list[dict[str, Any]]:
        """Two named groups, actor and critic, in one Adam: the fused kernel steps both in one call."""
        m, cfg = self.model, self.config
        return [{"name": "actor", "params": m.actor.parameters(), "lr": cfg.actor_lr},
                {"name": "critic", "params": m.critic.parameters(), "lr": cfg.critic_lr}]

    def update(self, batch: Batch) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def extra_metrics(self) -> dict[str, float]:
        """Metrics of the collection itself (DQN's ε), listed after ``charts/updates``."""
        return {}

    # -- collection
    def explore(self, obs: torch.Tensor, warmup: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Actions for one collection step: (for ``env.step``, as stored in the replay buffer).
        Box default: uniform in [low, high] from the agent's generator during warm-up, then the
        exploring policy ``act(obs)``."""
        n = obs.shape[0]
        if warmup:
            u = torch.rand(n, self.act_dim, generator=self.generator, device=self.device)
            actions = (self.action_low + (self.action_high - self.action_low) * u).reshape(n, *self.action_space.shape)
        else:
            actions = self.act(obs)
        return actions, actions.reshape(n, -1)

    def train_step(self, env: Any, obs: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """``num_steps`` vector steps (random actions during warm-up), each followed by the
        gradient updates it is owed; the loss metrics are means over this call's updates."""
        cfg, n = self.config, env.num_envs
        updates_from = max(cfg.learning_starts, cfg.batch_size)
        # Per key, the updates' loss tensors (TD3 reports its actor loss on delayed updates only),
        # averaged once at the end: no torch op per metric per update.
        infos: dict[str, list[torch.Tensor]] = {}
        num_updates = 0
        for _ in range(cfg.num_steps):
            env_actions, stored_actions = self.explore(obs, self.buffer.num_added < cfg.learning_starts)
            next_obs, rewards, terminated, _truncated, info = env.step(env_actions)
            # final_obs, not next_obs: at a timeout next_obs is already the reset observation.
            self.buffer.add(obs, stored_actions, rewards, info["final_obs"], terminated)
            obs = next_obs
            self.global_step += n
            if self.buffer.num_added < updates_from:
                continue
            self._owed_updates += n * cfg.updates_per_step
            while self._owed_updates >= 1.0:
                self._owed_updates -= 1.0
                self.updates += 1
                for k, v in self.update(self.buffer.sample(cfg.batch_size)).items():
                    infos.setdefault(k, []).append(v)
                num_updates += 1
        metrics = {"env_steps": float(cfg.num_steps * n), "charts/updates": float(num_updates),
                   **self.extra_metrics()}
        if infos:  # one host sync per call, not per update
            means = torch.stack([torch.stack(v).mean() for v in infos.values()]).tolist()
            metrics.update(zip(infos, means))
        return obs, metrics

    # -- persistence and hyperparameters
    def state_dict(self, include_buffer: bool | None = None) -> dict[str, Any]:
        """Model, optimizer, generator (with its device type) and step counters, plus the replay
        buffer when ``include_buffer`` (default ``config.save_buffer``)."""
        state: dict[str, Any] = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "generator_device": self.device.type,
            "global_step": self.global_step, "updates": self.updates, "owed_updates": self._owed_updates,
        }
        if self.config.save_buffer if include_buffer is None else include_buffer:
            state["buffer"] = self.buffer.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` wrote, saved on any device, or by podracer 0.1 (keys
        ``nets``, ``optim``, ``rng``, ``env_steps``). The buffer is restored only if the checkpoint
        has one; without it the agent warms up again (see the module docstring)."""
        state = renamed_keys(state, OffPolicyAgent)
        self.model.load_state_dict(state["model"])
        # A copy: torch's loader keeps the given moment tensors, which would tie this agent's Adam
        # state to the caller's (to another live agent's, for ``b.load_state_dict(a.state_dict())``).
        self.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
        # None for a 0.1 checkpoint: restore_generator then tells the device type by the state's size.
        restore_generator(self.generator, state["generator"], state.get("generator_device"))
        self.global_step, self.updates = int(state["global_step"]), int(state["updates"])
        self._owed_updates = float(state["owed_updates"])
        if "buffer" in state:
            self.buffer.load_state_dict(state["buffer"])

    def set_hparams(self, **hparams: Any) -> None:
        """Change mutable config fields; each param group's ``lr`` becomes ``config.<name>_lr``
        (``config.learning_rate`` for an unnamed group), so a tournament's perturbed learning
        rates reach the live optimizer (no rebuild: Adam's moments are kept)."""
        super().set_hparams(**hparams)
        for group in self.optimizer.param_groups:
            group["lr"] = getattr(self.config, f"{group['name']}_lr" if "name" in group else "learning_rate")


class DeterministicPolicyAgent(OffPolicyAgent):
    """An off-policy agent whose ``model.actor`` is a ``common.DeterministicActor``: DDPG and TD3.
    They act alike, so that lives here once."""

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """mu(s), or with Gaussian exploration noise of scale ``exploration_noise`` (x the Box scale)."""
        obs = self.check_obs(obs).reshape(obs.shape[0], -1)
        actor = self.model.actor
        actions = actor(obs) if deterministic else actor.noisy(obs, self.config.exploration_noise, self.generator)
        return actions.reshape(obs.shape[0], *self.action_space.shape)
