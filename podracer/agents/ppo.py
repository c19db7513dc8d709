"""Proximal Policy Optimization (clipped surrogate) on batched tensor envs, in one file.

Paper: Schulman, Wolski, Dhariwal, Radford, Klimov, "Proximal Policy Optimization Algorithms",
2017, arXiv:1707.06347. Advantages: Schulman et al., "High-Dimensional Continuous Control Using
Generalized Advantage Estimation", 2016, arXiv:1506.02438. Implementation details follow Huang
et al., "The 37 Implementation Details of PPO" (ICLR blog track, 2022). Batched, GPU-resident
rollouts follow ElegantRL-Podracer (Liu et al. 2021, arXiv:2112.05923).

Key equations (t indexes the T steps of a rollout, each over N sub-envs)::

    ratio      r_t(θ) = π_θ(a_t | s_t) / π_θold(a_t | s_t)
    policy     L^CLIP = -E[ min(r_t Â_t, clip(r_t, 1 - ε, 1 + ε) Â_t) ]
    TD error   δ_t = r_t + γ (1 - terminated_t) V(s'_t) - V(s_t)
    GAE        Â_t = δ_t + γ λ (1 - done_t) Â_{t+1},      done_t = terminated_t or truncated_t
    returns    R_t = Â_t + V(s_t)
    value      L^V = ½ E[ (V_θ - R)² ]      or, with clip_vloss (ppo2's pessimistic clip):
               L^V = ½ E[ max((V_θ - R)², (V_old + clip(V_θ - V_old, -ε, ε) - R)²) ]
    entropy    L^H = -E[ H(π_θ(· | s_t)) ]
    total      L = L^CLIP + c₁ L^V + c₂ L^H

``s'_t`` is the observation that followed ``s_t`` in the *same* episode: ``info["final_obs"]``
from the env (the dense tensor equals the next ``obs`` wherever the sub-env did not end). So a
truncated step (time limit) still bootstraps with ``γ V(final_obs)``, a terminated step does not,
and either way the advantage recursion stops at the episode boundary.

Our deviations from the paper, and why:

- N sub-envs step together; one rollout is T steps of all of them, a batch of T·N. By default
  T adapts to N so that a rollout holds about 2048 env steps (T = max(⌈2048 / N⌉, 16)): the
  paper's T = 2048 with one env, 32 steps with 64 sub-envs, 16 with 512 or more. A fixed
  ``num_steps`` = T overrides it. Minibatches are set by count (``num_minibatches``, 32 as in the
  paper), so the paper's Mujoco setting (one env, T = 2048, minibatch 64) is the default with
  ``num_envs=1``.
- Time limits bootstrap (above); the paper's code treats them as terminations.
- Values V(s_t) and V(s'_t) are computed after the rollout in one batched pass, not per step:
  the rollout loop then only runs the actor.
- Observations are standardised by a running mean/std that is frozen during a rollout and
  updated once at its end from the raw observations, so the update sees the very inputs the
  policy acted on (its first ratio is 1 up to float rounding).
- Rewards are divided by the running std of the discounted return (Engstrom et al. 2020,
  arXiv:2005.12729; gymnasium's ``NormalizeReward``), with the running return reset at every
  episode end (terminated or truncated) and when a training run starts (``begin_training``:
  the env was just reset, so a loaded agent must not continue another run's episodes).
- Box actions: a Gaussian with a state-independent log-std over the unit box [-1, 1]^d, rescaled
  to the Box bounds. The env gets the sample clipped to the bounds (as baselines, CleanRL and SB3
  do); the buffer keeps the unclipped sample and its log-prob, so the ratio is exact. We do not
  tanh-squash: that would need the log-det-Jacobian correction in every log-prob, and clipping
  is what the PPO baselines we compare against do. Unbounded Box dimensions pass through
  unscaled. Deterministic actions are the clipped mean. Discrete actions: a categorical on
  logits; deterministic actions are its argmax.
- The value loss may be clipped as in ppo2 (``clip_vloss``, on by default like ppo2; our presets
  turn it off, see ``PRESETS``).
- Advantages are standardised per minibatch; gradients are clipped to a global norm. With
  ``anneal_lr`` the learning rate decays linearly to 0 over the run: ``podracer.train`` calls
  ``begin_training(total_steps)``, which sets the window [global_step, global_step + total_steps]
  (CleanRL's ``anneal_lr``, from the Python API and the CLI alike). ``anneal_steps`` instead
  fixes the horizon in absolute env steps (α reaches 0 at ``global_step == anneal_steps``).
- Separate actor and critic MLPs, orthogonal init (policy head gain 0.01, value head 1).
- All randomness (action sampling, minibatch order) comes from the agent's own
  ``torch.Generator``, seeded from torch's global RNG at construction (``make_agent(seed=...)``),
  and saved with the agent: two pods in one process never share a random stream, and a loaded
  agent continues exactly as the saved one would have.
"""

from __future__ import annotations

import copy
import math
import warnings
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from podracer.agents.common import (AgentBase, Preset, RunningMeanStd, mlp, preset_config, require_space,
                                    restore_generator)

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "silu": nn.SiLU}


# ---------------------------------------------------------------------------- config
@dataclass
class PPOConfig:
    """PPO hyperparameters. Defaults are the paper's Mujoco settings (Schulman et al. 2017,
    Table 3) plus the implementation details of baselines' ``ppo2``, except for the rollout
    length: T = ``num_steps`` defaults to ``None``, which sizes each rollout to about 2048 env
    steps whatever the sub-env count (T = max(⌈2048 / num_envs⌉, 16); see ``rollout_steps``).
    Why: the paper's T = 2048 per env is one env's rollout; with 64 sub-envs it becomes 131,072
    env steps per update, and PPO then did not leave the random-policy return on Pendulum in
    300k steps (few updates, each on stale data). With the adaptive T and 32 minibatches (64-256
    samples each), PPO with these defaults on 64 sub-envs reaches about -180 on Pendulum and the
    500 cap on CartPole within 300k env steps. ``num_steps=2048`` gives the paper's setting
    explicitly. ``PRESETS`` below holds settings tuned per task for many batched sub-envs."""

    num_steps: int | None = None  # T: rollout length per sub-env, 8-2048; None = max(⌈2048 / num_envs⌉, 16)
    # Not mutable: epochs and minibatches set a generation's compute; a tournament's pods share a
    # budget of generations, so cheaper mutants would claim most of them (measured, issue 12).
    num_minibatches: int = 32  # minibatches per epoch, 1-64 (paper: 2048 / 32 = 64 samples with one env)
    update_epochs: int = 10  # K: passes over each rollout, 1-20
    # γ: discount factor, 0.9-0.999; λ: GAE bias/variance trade-off, 0.8-1.0. Both mutate on 1 - x,
    # the inverse horizon (see podracer.tournament.selection).
    gamma: float = field(default=0.99, metadata={"mutable": (0.9, 0.999), "mutable_scale": "one_minus"})
    gae_lambda: float = field(default=0.95, metadata={"mutable": (0.8, 0.99), "mutable_scale": "one_minus"})
    learning_rate: float = field(default=3e-4, metadata={"mutable": (1e-5, 1e-2)})  # α: Adam step size, 1e-5-1e-2
    anneal_lr: bool = False  # α decays linearly to 0 over each training run (window set by begin_training)
    anneal_steps: int = 0  # absolute horizon: α reaches 0 at this global_step; 0 = off; overrides anneal_lr
    clip_eps: float = field(default=0.2, metadata={"mutable": (0.05, 0.4)})  # ε: ratio clip, 0.1-0.3
    clip_vloss: bool = True  # clip value updates to ±ε around V_old (ppo2), else plain squared error
    vf_coef: float = 0.5  # c₁: value-loss weight, 0.25-1
    ent_coef: float = field(default=0.0, metadata={"mutable": (0.0, 0.01)})  # c₂: entropy bonus, 0-0.01
    max_grad_norm: float = 0.5  # global gradient-norm clip, 0.5-10
    target_kl: float | None = None  # stop the epochs early once approx KL exceeds this, 0.01-0.05; None = never
    norm_adv: bool = True  # standardise Â per minibatch
    norm_obs: bool = True  # standardise observations by running mean/std
    norm_reward: bool = True  # divide rewards by the running std of the discounted return
    hidden_sizes: tuple[int, ...] = (64, 64)  # actor and critic MLP widths, (32,)-(256, 256)
    activation: str = "tanh"  # hidden activation: tanh, relu, elu, silu
    log_std_init: float = 0.0  # initial log σ of the Gaussian in the unit action box, -2-0.5
    adam_eps: float = 1e-5  # Adam ε (baselines' value, not torch's 1e-8)

    def __post_init__(self) -> None:
        self.hidden_sizes = tuple(int(h) for h in self.hidden_sizes)  # a list from a checkpoint or YAML is fine
        checks = [
            (self.num_steps is None or self.num_steps >= 1,
             f"num_steps must be >= 1 or None (sized to the sub-env count), got {self.num_steps}"),
            (self.num_minibatches >= 1, f"num_minibatches must be >= 1, got {self.num_minibatches}"),
            (self.update_epochs >= 1, f"update_epochs must be >= 1, got {self.update_epochs}"),
            (0.0 <= self.gamma <= 1.0, f"gamma must be in [0, 1], got {self.gamma}"),
            (0.0 <= self.gae_lambda <= 1.0, f"gae_lambda must be in [0, 1], got {self.gae_lambda}"),
            (self.learning_rate > 0, f"learning_rate must be positive, got {self.learning_rate}"),
            (self.anneal_steps >= 0, f"anneal_steps must be >= 0 (0 = no annealing), got {self.anneal_steps}"),
            (self.clip_eps > 0, f"clip_eps must be positive, got {self.clip_eps}"),
            (self.vf_coef >= 0, f"vf_coef must be >= 0, got {self.vf_coef}"),
            (self.ent_coef >= 0, f"ent_coef must be >= 0, got {self.ent_coef}"),
            (self.max_grad_norm > 0, f"max_grad_norm must be positive, got {self.max_grad_norm}"),
            (self.target_kl is None or self.target_kl > 0, f"target_kl must be positive or None, got {self.target_kl}"),
            (len(self.hidden_sizes) >= 1 and min(self.hidden_sizes) >= 1,
             f"hidden_sizes must be one or more positive widths, got {self.hidden_sizes}"),
            (self.activation in ACTIVATIONS,
             f"activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ValueError(msg)

    def rollout_steps(self, num_envs: int) -> int:
        """T, steps per sub-env in one rollout: ``num_steps``, or by default about 2048 env steps
        in all (the paper's one-env rollout), at least 16 per sub-env for GAE to look ahead."""
        if self.num_steps is not None:
            return self.num_steps
        return max(math.ceil(2048 / num_envs), 16)

    def batch_size(self, num_envs: int) -> int:
        """Samples per rollout: T * N."""
        return self.rollout_steps(num_envs) * num_envs

    def minibatch_size(self, num_envs: int) -> int:
        """Samples per gradient step: T * N // num_minibatches (the remainder is dropped each epoch)."""
        return max(self.batch_size(num_envs) // self.num_minibatches, 1)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "PPOConfig":
        """The tuned config for ``name`` (a key of ``PRESETS``), with ``overrides`` on top."""
        return preset_config(cls, "PPO", PRESETS, name, overrides)



# HalfCheetah-v5 (tuned here, one torch thread, envpool): 16 sub-envs, rollouts of 128 x 16 = 2,048
# steps, 8 minibatches of 256, 5 epochs, an unclipped value loss and a narrower initial policy
# (log σ = -1 in the unit box). Deterministic eval return (4 episodes) after 153,600 env steps,
# ~11 s on one core; random policy about -300: seeds 0-4: 3823, 2945, 3212, 2956, 3530 (log σ = 0
# and the value clip: -10, 964, 853; log σ = -0.5: 282-1165; -1.5: 2533-3230). After 77,824
# steps: 1211-2066. A short budget on a 2-core CPU, not a converged policy (RL Zoo trains 1M).
HALFCHEETAH = Preset(num_envs=16, total_steps=153_600, config=dict(
    num_steps=128, num_minibatches=8, update_epochs=5, clip_vloss=False, log_std_init=-1.0))

# RL Zoo's PPO for the MuJoCo v4 tasks (hyperparams/ppo.yml), in our names: one env, so n_steps
# is num_steps and batch_size sets num_minibatches = n_steps / batch_size; n_epochs is
# update_epochs, clip_range clip_eps; SB3 clips no value loss (clip_vloss=False); ``normalize``
# (VecNormalize, obs and reward) is our default norm_obs and norm_reward. Not translated: SB3's
# ``ortho_init=False`` (ours always initialises orthogonally). SB3's log_std_init is in action
# units; ours is in the unit box, so Humanoid's -2 (actions in [-0.4, 0.4]) becomes
# -2 - ln 0.4 = -1.08. Ant has no tuned entry: SB3's defaults (which our defaults are, with one env).
_ZOO_NET = dict(hidden_sizes=(256, 256), activation="relu", log_std_init=-2.0)
RL_ZOO_MUJOCO: dict[str, Preset] = {
    "ant": Preset(num_envs=1, total_steps=1_000_000, config=dict(
        num_steps=2048, num_minibatches=32, update_epochs=10, learning_rate=3e-4, gamma=0.99, gae_lambda=0.95,
        clip_eps=0.2, ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5, clip_vloss=False)),
    "hopper": Preset(num_envs=1, total_steps=1_000_000, config=dict(
        num_steps=512, num_minibatches=16, update_epochs=5, learning_rate=9.80828e-05, gamma=0.999, gae_lambda=0.99,
        clip_eps=0.2, ent_coef=0.00229519, vf_coef=0.835671, max_grad_norm=0.7, clip_vloss=False, **_ZOO_NET)),
    "walker2d": Preset(num_envs=1, total_steps=1_000_000, config=dict(
        num_steps=512, num_minibatches=16, update_epochs=20, learning_rate=5.05041e-05, gamma=0.99, gae_lambda=0.95,
        clip_eps=0.1, ent_coef=0.000585045, vf_coef=0.871923, max_grad_norm=1.0, clip_vloss=False)),
    "humanoid": Preset(num_envs=1, total_steps=10_000_000, config=dict(
        num_steps=512, num_minibatches=2, update_epochs=5, learning_rate=3.56987e-05, gamma=0.95, gae_lambda=0.9,
        clip_eps=0.3, ent_coef=0.00238306, vf_coef=0.431892, max_grad_norm=2.0, clip_vloss=False,
        **{**_ZOO_NET, "log_std_init": -1.08})),
}


# Tuned on this project's tensor envs on a 2-core CPU, one torch thread (sweeps over sub-env count,
# minibatches, epochs, learning rate, activation, γ, λ, initial σ; 5-8 seeds each, measured in env
# steps and gradient steps to the target, which do not depend on machine load). What mattered:
# short rollouts (T = 16) so that updates come often, minibatches of ~500-1000 samples (a gradient
# step costs about the same from 256 to 1024 rows), an unclipped value loss (with normalised
# rewards, ppo2's value clip limits the critic to ±ε per update and slows the first updates
# several-fold), and for Pendulum ReLU hidden units (tanh: 2-5x more env steps) and γ = 0.95.
PRESETS: dict[str, Preset] = {
    # Pendulum-v1: eval return >= -250 after ~21k env steps (median of 8 seeds; ~0.8 s on one
    # core), about -170 on 64 fresh episodes after the 150k steps. Few sub-envs (96, so an
    # update every 1,536 steps; 512 needed ~74k steps), 512-row minibatches, a wide initial σ
    # (log σ = 0.25: 20-30% fewer steps than -0.5), α annealed over the run and the epochs cut at
    # an approximate KL of 0.025: without both, these small batches drift after solving (final
    # return on 64 episodes, worst of 8 seeds: -643 constant α, -363 annealed, -240 with the KL cut;
    # median steps to -250: 20k without the cut, 21.5k with it, 24k with a cut at 0.015-0.02).
    "pendulum": Preset(num_envs=96, total_steps=150_528, config=dict(  # 98 rollouts of 16 x 96
        num_steps=16, num_minibatches=3, update_epochs=10, gamma=0.95, gae_lambda=0.95, learning_rate=3e-3,
        anneal_lr=True, target_kl=0.025, clip_eps=0.2, clip_vloss=False, ent_coef=0.0, max_grad_norm=0.5,
        activation="relu", log_std_init=0.25, hidden_sizes=(64, 64))),
    # CartPole-v1: eval return > 475 after ~57k env steps (median of 8 seeds, ~1 s on one core).
    # Once every episode reaches the 500-step limit, the standardised advantages are mostly noise
    # and a policy trained on at α = 3e-3 may drift: α anneals to 0 over the run (``anneal_lr``:
    # over ``total_steps`` of ``podracer.train`` or ``podracer train --steps``), and stopping at
    # the target (``target_return=475``) is best.
    "cartpole": Preset(num_envs=512, total_steps=204_800, config=dict(  # 25 rollouts of 16 x 512
        num_steps=16, num_minibatches=8, update_epochs=5, gamma=0.99, gae_lambda=0.95, learning_rate=3e-3,
        anneal_lr=True, clip_eps=0.2, clip_vloss=False, ent_coef=0.0, max_grad_norm=0.5, activation="tanh",
        hidden_sizes=(64, 64))),
    # MuJoCo locomotion (``locomotion.make_env``, gymnasium v5 tasks). HalfCheetah is tuned and
    # verified here (tests/test_locomotion.py); the other four are RL Zoo's settings, NOT run here:
    # untuned starting points.
    "halfcheetah": HALFCHEETAH,
    **RL_ZOO_MUJOCO,
}


# ---------------------------------------------------------------------------- networks
class ActorCritic(nn.Module):
    """Separate actor and critic MLPs. The actor outputs Gaussian means in the unit action box
    (plus one state-independent log-std per action dim) or categorical logits."""

    def __init__(self, obs_dim: int, act_dim: int, discrete: bool, config: PPOConfig):
        super().__init__()
        act = ACTIVATIONS[config.activation]
        self.discrete = discrete
        self.critic = mlp(obs_dim, config.hidden_sizes, 1, act, out_gain=1.0)
        # Gain 0.01 on the policy head: near-equal logits / zero means at the start, so the
        # first rollouts explore evenly (Andrychowicz et al. 2021, arXiv:2006.05990).
        self.actor = mlp(obs_dim, config.hidden_sizes, act_dim, act, out_gain=0.01)
        if not discrete:
            self.log_std = nn.Parameter(torch.full((act_dim,), float(config.log_std_init)))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """V(s): (B, obs_dim) -> (B,)."""
        return self.critic(obs).squeeze(-1)

    def distribution(self, obs: torch.Tensor) -> torch.distributions.Distribution:
        """π(· | s) for (B, obs_dim): Normal with (B, act_dim) parameters, or Categorical (B, n)."""
        out = self.actor(obs)
        if self.discrete:
            return torch.distributions.Categorical(logits=out, validate_args=False)
        return torch.distributions.Normal(out, self.log_std.exp().expand_as(out), validate_args=False)

    def log_prob_entropy(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """log π(a | s) and H(π(· | s)), each (B,) (summed over action dims for a Gaussian)."""
        dist = self.distribution(obs)
        if self.discrete:
            return dist.log_prob(actions), dist.entropy()
        return dist.log_prob(actions).sum(-1), dist.entropy().sum(-1)


# ---------------------------------------------------------------------------- rollout storage
class RolloutBuffer:
    """Preallocated on-device tensors for one rollout of T steps of N sub-envs. Observations are
    stored raw: the policy saw them normalised with statistics frozen for the rollout, so
    normalising the whole batch afterwards reproduces exactly what it saw."""

    def __init__(self, num_steps: int, num_envs: int, obs_dim: int, action_shape: tuple[int, ...],
                 action_dtype: torch.dtype, device: torch.device):
        T, N = num_steps, num_envs
        self.num_steps, self.num_envs = T, N
        z = dict(device=device)
        self.obs = torch.zeros(T, N, obs_dim, **z)  # (T, N, obs_dim) raw s_t
        self.next_obs = torch.zeros(T, N, obs_dim, **z)  # (T, N, obs_dim) raw s'_t = info["final_obs"]
        # (T, N, act_dim) unclipped unit-box Gaussian sample, or (T, N) int64 category
        self.actions = torch.zeros(T, N, *action_shape, dtype=action_dtype, **z)
        self.logprobs = torch.zeros(T, N, **z)  # (T, N) log π_old(a_t | s_t)
        self.rewards = torch.zeros(T, N, **z)  # (T, N) raw env rewards
        self.terminated = torch.zeros(T, N, dtype=torch.bool, **z)  # (T, N)
        self.truncated = torch.zeros(T, N, dtype=torch.bool, **z)  # (T, N)


# ---------------------------------------------------------------------------- reward scaling and advantages
def discounted_returns(rewards: torch.Tensor, dones: torch.Tensor, running: torch.Tensor,
                       gamma: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The running discounted return G_t = γ G_{t-1} + r_t of each sub-env, restarted after every
    episode end: the quantity whose std scales the rewards (Engstrom et al. 2020; gymnasium's
    ``NormalizeReward``). ``rewards``, ``dones`` (T, N); ``running`` (N,) is G before the rollout.
    Returns ``(G, running)``: the (T, N) returns and the (N,) G to carry into the next rollout."""
    returns = torch.empty_like(rewards)  # (T, N)
    g = running  # (N,)
    for t in range(rewards.shape[0]):
        g = gamma * g + rewards[t]
        returns[t] = g
        g = torch.where(dones[t], torch.zeros_like(g), g)  # the next reward starts a new episode
    return returns, g


def compute_gae(rewards: torch.Tensor, values: torch.Tensor, next_values: torch.Tensor, terminated: torch.Tensor,
                truncated: torch.Tensor, gamma: float, gae_lambda: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation (Schulman et al. 2016, eq. 16) with episode boundaries.

    All inputs are (T, N); ``next_values`` is V(s'_t), the value of the observation that followed
    s_t in its episode (``final_obs`` at a boundary). A terminated step has no future, so its
    bootstrap is dropped; a truncated one keeps ``γ V(s'_t)``. Both stop the λ-recursion, since
    Â_{t+1} belongs to the next episode. Returns ``(advantages, returns)``, each (T, N).
    """
    not_terminated = (~terminated).to(values.dtype)
    not_done = (~(terminated | truncated)).to(values.dtype)
    deltas = rewards + gamma * not_terminated * next_values - values  # δ_t
    advantages = torch.zeros_like(values)
    running = torch.zeros_like(values[0])  # Â_{t+1}
    for t in reversed(range(values.shape[0])):
        running = deltas[t] + gamma * gae_lambda * not_done[t] * running  # Â_t = δ_t + γλ(1 - done_t) Â_{t+1}
        advantages[t] = running
    return advantages, advantages + values  # R_t = Â_t + V(s_t): the value target


# ---------------------------------------------------------------------------- losses
def policy_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                clip_eps: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate L^CLIP (paper eq. 7), negated for minimisation. Inputs (B,)."""
    log_ratio = logprobs - old_logprobs
    ratio = log_ratio.exp()  # r_t(θ)
    surrogate = torch.min(ratio * advantages, ratio.clamp(1 - clip_eps, 1 + clip_eps) * advantages)
    loss = -surrogate.mean()
    with torch.no_grad():
        # KL(old || new) estimated by E[(r - 1) - log r] (Schulman's "approximating KL" note): unbiased, >= 0.
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clipfrac = ((ratio - 1).abs() > clip_eps).float().mean()
    return loss, {"loss/actor": loss.detach(), "charts/approx_kl": approx_kl, "charts/clipfrac": clipfrac}


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
               clip_eps: float | None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """½ squared error to the GAE returns; with ``clip_eps``, the pessimistic max with the error of
    a value update clipped to ±ε around V_old (baselines' ppo2). Inputs (B,)."""
    loss_unclipped = (values - returns) ** 2
    if clip_eps is None:
        loss = 0.5 * loss_unclipped.mean()
    else:
        values_clipped = old_values + (values - old_values).clamp(-clip_eps, clip_eps)
        loss = 0.5 * torch.max(loss_unclipped, (values_clipped - returns) ** 2).mean()
    return loss, {"loss/critic": loss.detach()}


def entropy_loss(entropy: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """L^H = -E[H]: minimising it (with weight c₂ >= 0) rewards exploration. Input (B,)."""
    loss = -entropy.mean()
    return loss, {"loss/entropy": loss.detach()}


# ---------------------------------------------------------------------------- update
class Batch(NamedTuple):
    """One rollout flattened to B = T * N samples, everything the update needs."""

    obs: torch.Tensor  # (B, obs_dim) normalised
    actions: torch.Tensor  # (B, act_dim) or (B,)
    logprobs: torch.Tensor  # (B,)
    values: torch.Tensor  # (B,) V_old(s_t)
    advantages: torch.Tensor  # (B,)
    returns: torch.Tensor  # (B,)


def ppo_update(model: ActorCritic, optimizer: torch.optim.Optimizer, batch: Batch, config: PPOConfig,
               generator: torch.Generator) -> dict[str, torch.Tensor]:
    """``update_epochs`` passes over ``batch`` in ``num_minibatches`` shuffled minibatches, one Adam
    step each. Returns the last epoch's mean of each loss's info (tensors: no host sync here,
    except once per epoch when ``target_kl`` is set)."""
    B = batch.obs.shape[0]
    mb_size = max(B // config.num_minibatches, 1)
    value_clip = config.clip_eps if config.clip_vloss else None
    for epoch in range(config.update_epochs):
        perm = torch.randperm(B, generator=generator, device=batch.obs.device)
        infos: list[dict[str, torch.Tensor]] = []
        for start in range(0, B - mb_size + 1, mb_size):
            mb = perm[start:start + mb_size]
            mb_adv = batch.advantages[mb]
            if config.norm_adv:
                mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
            mb_obs = batch.obs[mb]
            logprobs, entropy = model.log_prob_entropy(mb_obs, batch.actions[mb])
            pg_loss, pg_info = policy_loss(logprobs, batch.logprobs[mb], mb_adv, config.clip_eps)
            v_loss, v_info = value_loss(model.value(mb_obs), batch.values[mb], batch.returns[mb], value_clip)
            ent_loss, ent_info = entropy_loss(entropy)
            loss = pg_loss + config.vf_coef * v_loss + config.ent_coef * ent_loss

            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm, foreach=True)
            optimizer.step()
            infos.append({**pg_info, **v_info, **ent_info})
        info = {k: torch.stack([i[k] for i in infos]).mean() for k in infos[0]}
        if config.target_kl is not None and info["charts/approx_kl"].item() > config.target_kl:
            break
    return info


# ---------------------------------------------------------------------------- agent
class PPO(AgentBase):
    """PPO for Box (Gaussian) or Discrete (categorical) actions. See the module docstring."""

    name: ClassVar[str] = "ppo"
    config_cls: ClassVar[type] = PPOConfig
    presets: ClassVar[dict[str, Preset]] = PRESETS
    config: PPOConfig

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: PPOConfig | dict | None = None,
                 device: str | torch.device = "cpu"):
        super().__init__(observation_space, action_space, config, device)
        require_space("PPO", action_space, (gym.spaces.Box, gym.spaces.Discrete),
                      "flatten other spaces with a gymnasium wrapper first")
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        if self.discrete:
            act_dim, self.action_shape, self.action_dtype = int(action_space.n), (), torch.int64
        else:
            act_dim = int(np.prod(action_space.shape))
            self.action_shape, self.action_dtype = (act_dim,), torch.float32
            low = torch.as_tensor(action_space.low, dtype=torch.float32, device=self.device).reshape(-1)
            high = torch.as_tensor(action_space.high, dtype=torch.float32, device=self.device).reshape(-1)
            bounded = torch.isfinite(low) & torch.isfinite(high)
            # env action = clamp(bias + scale * u, low, high): the unit box maps onto bounded dims
            # (clamping there is clipping u to [-1, 1]); unbounded dims pass u through.
            self.action_scale = torch.where(bounded, (high - low) / 2, torch.ones_like(low))
            self.action_bias = torch.where(bounded, (high + low) / 2, torch.zeros_like(low))
            self.action_low, self.action_high = low, high
        self.model = ActorCritic(self.obs_dim, act_dim, self.discrete, self.config).to(self.device)
        # Fused Adam (one kernel for all parameters) takes ~10% off a small-MLP update on the CPU;
        # torch < 2.4 has it for CUDA only, so fall back to the multi-tensor path there.
        adam = dict(lr=self.config.learning_rate, eps=self.config.adam_eps)
        try:
            self.optimizer = torch.optim.Adam(self.model.parameters(), fused=True, **adam)
        except RuntimeError:
            self.optimizer = torch.optim.Adam(self.model.parameters(), foreach=True, **adam)
        self.obs_rms = RunningMeanStd((self.obs_dim,)).to(self.device)
        self.return_rms = RunningMeanStd(()).to(self.device)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(int(torch.randint(0, 2**62, (1,)).item()))  # from the global seed
        self.global_step = 0  # env steps trained on, summed over sub-envs (drives lr annealing)
        self.buffer: RolloutBuffer | None = None  # allocated at the first train_step, from obs.shape[0]
        self.discounted_return: torch.Tensor | None = None  # (N,) running discounted return for reward scaling
        self.anneal_window: tuple[int, int] | None = None  # [start, end) global steps of anneal_lr's decay
        self._warned_no_window = False

    # -- acting
    def _normalize_obs(self, obs: torch.Tensor) -> torch.Tensor:
        obs = obs.reshape(obs.shape[0], -1).to(torch.float32)
        return self.obs_rms.normalize(obs) if self.config.norm_obs else obs

    def _sample(self, norm_obs: torch.Tensor, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Raw actions (unit-box Gaussian sample or category) and their log-probs (N,)."""
        dist = self.model.distribution(norm_obs)
        if self.discrete:
            actions = dist.probs.argmax(-1) if deterministic else \
                torch.multinomial(dist.probs, 1, generator=self.generator).squeeze(-1)
            return actions, dist.log_prob(actions)
        if deterministic:
            actions = dist.mean
        else:
            noise = torch.randn(dist.mean.shape, generator=self.generator, device=self.device)
            actions = dist.mean + dist.stddev * noise
        return actions, dist.log_prob(actions).sum(-1)

    def _to_env(self, actions: torch.Tensor) -> torch.Tensor:
        """Raw actions -> the env's action space: clipped and rescaled to the Box bounds."""
        if self.discrete:
            return actions + int(self.action_space.start)
        env_actions = (self.action_bias + self.action_scale * actions).clamp(self.action_low, self.action_high)
        return env_actions.reshape(actions.shape[0], *self.action_space.shape)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """Actions for ``obs`` (N, obs_dim), ready for ``env.step``: the Gaussian mean (clipped) or
        the most likely category when ``deterministic``, else a sample."""
        actions, _ = self._sample(self._normalize_obs(obs), deterministic)
        return self._to_env(actions)

    # -- training
    def begin_training(self, total_steps: int) -> None:
        """Start a run of ``total_steps`` env steps on a freshly reset env (``podracer.train`` calls
        this right after ``env.reset()``). The running discounted return restarts at 0, as
        ``VecNormalize`` does on reset: the last run's episodes do not continue into this one's
        scaled rewards. With ``anneal_lr``, α decays to 0 over [global_step, global_step + total_steps]."""
        if self.discounted_return is not None:  # a new tensor: a state_dict taken earlier may share the old one
            self.discounted_return = torch.zeros_like(self.discounted_return)
        if self.config.anneal_lr:
            self.anneal_window = (self.global_step, self.global_step + int(total_steps))
        self._apply_lr()

    def steps_per_train_step(self, num_envs: int) -> int:
        """Env steps one ``train_step`` collects on ``num_envs`` sub-envs: T * N."""
        return self.config.batch_size(num_envs)

    def _current_lr(self) -> float:
        """α, decayed linearly to 0 at ``anneal_steps`` when that is set, else over the run's window
        when ``anneal_lr`` is (see ``begin_training``), else constant."""
        cfg = self.config
        if cfg.anneal_steps:
            return cfg.learning_rate * max(1.0 - self.global_step / cfg.anneal_steps, 0.0)
        if cfg.anneal_lr and self.anneal_window is not None:
            start, end = self.anneal_window
            return cfg.learning_rate * max(1.0 - (self.global_step - start) / max(end - start, 1), 0.0)
        return cfg.learning_rate

    def _apply_lr(self) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = self._current_lr()

    def _start_rollout(self, num_envs: int) -> None:
        """Storage for ``num_envs`` sub-envs (allocated at the first rollout, or when N changes) and
        α for this update."""
        cfg = self.config
        if cfg.norm_adv and cfg.minibatch_size(num_envs) < 2:
            # One sample has no standard deviation: the standardised advantage would be NaN, and
            # so would every weight after the first update.
            raise ValueError(f"PPO minibatches would hold {cfg.minibatch_size(num_envs)} sample (num_steps "
                             f"{cfg.rollout_steps(num_envs)} x num_envs {num_envs} = {cfg.batch_size(num_envs)} "
                             f"samples in num_minibatches={cfg.num_minibatches}); use num_minibatches <= "
                             f"{max(cfg.batch_size(num_envs) // 2, 1)}, or more num_steps or sub-envs")
        if self.buffer is None or self.buffer.num_envs != num_envs:
            self.buffer = RolloutBuffer(cfg.rollout_steps(num_envs), num_envs, self.obs_dim, self.action_shape,
                                        self.action_dtype, self.device)
        if self.discounted_return is None or self.discounted_return.shape[0] != num_envs:
            self.discounted_return = torch.zeros(num_envs, device=self.device)  # (N,)
        if cfg.anneal_lr and not cfg.anneal_steps and self.anneal_window is None and not self._warned_no_window:
            warnings.warn("PPO anneal_lr=True, but begin_training(total_steps) was not called, so α stays constant; "
                          "call agent.begin_training(total_steps) before a hand-written training loop "
                          "(podracer.train does), or set anneal_steps", UserWarning, stacklevel=3)
            self._warned_no_window = True
        self._apply_lr()

    @torch.no_grad()
    def _collect(self, env: Any, obs: torch.Tensor) -> torch.Tensor:
        """Fill the buffer with T steps from ``obs``, acting on observations normalised with the
        frozen ``obs_rms``; return the observation to start from next."""
        buf = self.buffer
        for t in range(buf.num_steps):
            buf.obs[t] = obs.reshape(buf.num_envs, -1)
            actions, logprobs = self._sample(self._normalize_obs(obs), deterministic=False)
            obs, rewards, terminated, truncated, info = env.step(self._to_env(actions))
            buf.actions[t] = actions
            buf.logprobs[t] = logprobs
            buf.rewards[t] = rewards
            buf.terminated[t] = terminated
            buf.truncated[t] = truncated
            buf.next_obs[t] = info["final_obs"].reshape(buf.num_envs, -1)  # dense: equals obs where not ended
        return obs

    def train_step(self, env: Any, obs: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """One rollout of T steps from ``obs`` and its ``update_epochs`` of minibatch updates.
        Returns the next observation and the metrics (see ``podracer.agents.common``)."""
        cfg = self.config
        if obs.device != self.device:
            raise ValueError(f"expected obs on the agent's device {self.device}, got {obs.device}; "
                             f"build the agent with device=env.device")
        N = obs.shape[0]
        self._start_rollout(N)
        buf, T = self.buffer, self.buffer.num_steps

        # 1. Rollout: T steps of the current policy on all N sub-envs.
        obs = self._collect(env, obs)

        with torch.no_grad():
            # 2. V(s_t) and V(s'_t) in one pass, on observations normalised exactly as the policy saw them.
            b_obs = self._normalize_obs(buf.obs.reshape(T * N, -1))  # (T*N, obs_dim)
            b_next_obs = self._normalize_obs(buf.next_obs.reshape(T * N, -1))  # (T*N, obs_dim)
            both = self.model.value(torch.cat([b_obs, b_next_obs]))  # (2*T*N,)
            values, next_values = both[:T * N].reshape(T, N), both[T * N:].reshape(T, N)
            # 3. Reward scaling: r_t / std(G), G the running discounted return of each sub-env.
            rewards = buf.rewards  # (T, N)
            if cfg.norm_reward:
                returns_g, self.discounted_return = discounted_returns(
                    buf.rewards, buf.terminated | buf.truncated, self.discounted_return, cfg.gamma)
                self.return_rms.update(returns_g)
                rewards = buf.rewards / torch.sqrt(self.return_rms.var + 1e-8)
            # 4. Only now do the observation statistics move on: frozen within a rollout.
            if cfg.norm_obs:
                self.obs_rms.update(buf.obs.reshape(T * N, -1))
            # 5. GAE, bootstrapping truncated steps from V(final_obs) (see compute_gae).
            advantages, returns = compute_gae(rewards, values, next_values, buf.terminated, buf.truncated,
                                              cfg.gamma, cfg.gae_lambda)
            batch = Batch(obs=b_obs, actions=buf.actions.reshape(T * N, *self.action_shape),
                          logprobs=buf.logprobs.reshape(-1), values=values.reshape(-1),
                          advantages=advantages.reshape(-1), returns=returns.reshape(-1))

        # 6. update_epochs passes of shuffled minibatch updates.
        info = ppo_update(self.model, self.optimizer, batch, cfg, self.generator)
        self.global_step += T * N

        # 7. Metrics, with one host sync.
        with torch.no_grad():
            # Fraction of the return variance the critic explains before the update: 1 is perfect.
            var_returns = batch.returns.var()
            info["charts/explained_variance"] = 1 - (batch.returns - batch.values).var() / var_returns.clamp_min(1e-8)
        metrics = {k: float(v) for k, v in zip(info, torch.stack(list(info.values())).tolist())}
        metrics["env_steps"] = float(T * N)
        metrics["charts/learning_rate"] = self.optimizer.param_groups[0]["lr"]
        if not self.discrete:
            metrics["charts/action_std"] = self.model.log_std.exp().mean().item()
        return obs, metrics

    # -- hyperparameters and persistence
    def set_hparams(self, **hparams: Any) -> None:
        """Change mutable config fields (learning rate, γ, λ, ε, c₂) of a live agent;
        the learning rate goes straight into the optimizer (annealed if annealing is on)."""
        super().set_hparams(**hparams)
        self._apply_lr()

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "obs_rms": self.obs_rms.state_dict(),
            "return_rms": self.return_rms.state_dict(),
            "generator": self.generator.get_state(),
            "generator_device": self.device.type,
            "global_step": self.global_step,
            "discounted_return": self.discounted_return,
            "anneal_window": None if self.anneal_window is None else list(self.anneal_window),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` wrote, on any device: a generator state saved on another
        device type (a CUDA state does not fit a CPU generator) reseeds deterministically."""
        self.model.load_state_dict(state["model"])
        # A copy: torch's loader keeps the given moment tensors, which would tie this agent's Adam
        # state to the caller's (to another live agent's, for ``b.load_state_dict(a.state_dict())``).
        self.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
        self.obs_rms.load_state_dict(state["obs_rms"])
        self.return_rms.load_state_dict(state["return_rms"])
        restore_generator(self.generator, state["generator"], state.get("generator_device"))
        self.global_step = int(state["global_step"])
        ret = state["discounted_return"]
        self.discounted_return = None if ret is None else ret.to(self.device, copy=True)
        window = state.get("anneal_window")  # absent before 1.0
        self.anneal_window = None if window is None else (int(window[0]), int(window[1]))
        self.buffer = None
        self._apply_lr()


__all__ = ["PPO", "PPOConfig", "PRESETS", "Preset", "ActorCritic", "RolloutBuffer", "Batch", "compute_gae",
           "discounted_returns", "policy_loss", "value_loss", "entropy_loss", "ppo_update"]
