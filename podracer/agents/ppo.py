"""Proximal Policy Optimization (clipped surrogate) on batched tensor envs, in one file.

Schulman et al. 2017, "Proximal Policy Optimization Algorithms", arXiv:1707.06347; advantages:
Schulman et al. 2016, "High-Dimensional Continuous Control Using Generalized Advantage
Estimation", arXiv:1506.02438; implementation details: Huang et al. 2022, "The 37 Implementation
Details of PPO"; batched, device-resident rollouts: ElegantRL-Podracer, arXiv:2112.05923.

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

``s'_t`` = ``info["final_obs"]``: a truncated step bootstraps with ``γ V(final_obs)``, a
terminated one does not, and both stop the advantage recursion.

Where this departs from the paper (rollout length adapted to the sub-env count, bootstrapped time
limits, frozen observation statistics, reward scaling, clipped unsquashed Gaussian, lr annealing to
a floor, the agent's own random stream), each with its reason: ``docs/ppo.md``.
"""

from __future__ import annotations

import copy
import math
import warnings
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

import gymnasium as gym
import torch
from torch import nn

from podracer.agents.common import (AgentBase, RunningMeanStd, action_bounds, check_config, make_adam, mlp,
                                    require_space, restore_generator)
from podracer.deprecation import deprecated_alias, module_getattr

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "silu": nn.SiLU}
LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))  # log √(2π), as torch.distributions.Normal writes it


# ---------------------------------------------------------------------------- config
@dataclass
class PPOConfig:
    """PPO hyperparameters: the paper's Mujoco settings (Table 3) and ppo2's details, except that
    T = ``num_steps`` defaults to about 2048 env steps per rollout whatever the sub-env count
    (``docs/ppo.md`` says why). ``podracer.get_preset("ppo", task)`` gives per-task settings."""

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
    anneal_lr: bool = False  # α decays linearly to its floor over each training run (window set by begin_training)
    anneal_steps: int = 0  # absolute horizon: α reaches its floor at this global_step; 0 = off; overrides anneal_lr
    # α's floor as a fraction of learning_rate, 0-1: annealing ends there and α stays there after the
    # window, so that training on past the budget neither stops learning nor restarts at full α.
    anneal_floor: float = 0.0
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
        check_config(self, optional=("num_steps", "target_kl"), unit_interval=("gamma", "gae_lambda", "anneal_floor"),
                     positive=("learning_rate", "clip_eps", "max_grad_norm", "target_kl"),
                     non_negative=("anneal_steps", "vf_coef", "ent_coef"),
                     at_least_one=("num_steps", "num_minibatches", "update_epochs"))
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}")

    def rollout_steps(self, num_envs: int) -> int:
        """T, steps per sub-env in one rollout: ``num_steps``, or by default about 2048 env steps
        in all (the paper's one-env rollout), at least 16 per sub-env for GAE to look ahead."""
        return self.num_steps if self.num_steps is not None else max(math.ceil(2048 / num_envs), 16)

    def rollout_size(self, num_envs: int) -> int:
        """Samples per rollout: T * N."""
        return self.rollout_steps(num_envs) * num_envs

    # "batch_size" is the minibatch in SB3's PPO and our off-policy agents (minibatch_size here).
    batch_size = deprecated_alias("rollout_size")

    def minibatch_size(self, num_envs: int) -> int:
        """Samples per gradient step: T * N // num_minibatches (the remainder is dropped each epoch)."""
        return max(self.rollout_size(num_envs) // self.num_minibatches, 1)


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

    def categorical(self, obs: torch.Tensor) -> torch.distributions.Categorical:
        """π(· | s) for Discrete actions: a categorical on the actor's (B, n) logits."""
        return torch.distributions.Categorical(logits=self.actor(obs), validate_args=False)

    def gaussian(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """π(· | s) for Box actions: the Gaussian's mean and σ = exp(log_std), each (B, act_dim), σ
        state-independent and expanded over the batch."""
        mean = self.actor(obs)
        return mean, self.log_std.exp().expand_as(mean)

    def log_prob_entropy(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """log π(a | s) and H(π(· | s)), each (B,) (summed over action dims for a Gaussian)."""
        if self.discrete:
            dist = self.categorical(obs)
            return dist.log_prob(actions), dist.entropy()
        mean, std = self.gaussian(obs)
        entropy = 0.5 + 0.5 * math.log(2 * math.pi) + torch.log(std)  # Normal.entropy
        return gaussian_log_prob(mean, std, actions), entropy.sum(-1)


def gaussian_log_prob(mean: torch.Tensor, std: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """log N(a; mean, σ) summed over action dims: (B, act_dim) inputs -> (B,). The one Gaussian
    log-probability of PPO (acting and the update alike): ``torch.distributions.Normal.log_prob``'s
    expression, term by term in its order, so the same numbers and gradients to the bit without a
    distribution object at every step."""
    return (-((actions - mean) ** 2) / (2 * std**2) - std.log() - LOG_SQRT_2PI).sum(-1)


# ---------------------------------------------------------------------------- rollout storage
class RolloutBuffer:
    """Preallocated on-device tensors for one rollout of T steps of N sub-envs. Observations are
    stored raw: the policy saw them normalised with statistics frozen for the rollout, so
    normalising the whole batch afterwards reproduces exactly what it saw."""

    def __init__(self, num_steps: int, num_envs: int, obs_dim: int, action_shape: tuple[int, ...],
                 action_dtype: torch.dtype, device: torch.device):
        self.num_steps, self.num_envs = T, N = num_steps, num_envs
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
    """L^H = -E[H]: minimising it (with weight c₂ >= 0) rewards exploration. Input (B,). Logged as
    ``charts/entropy``, +E[H], the policy's entropy as SAC logs it."""
    loss = -entropy.mean()
    return loss, {"charts/entropy": -loss.detach()}


# ---------------------------------------------------------------------------- update
class Rollout(NamedTuple):
    """One rollout flattened to B = T * N samples, everything the update needs (not to be confused
    with ``replay.Batch``, a minibatch of stored transitions)."""

    obs: torch.Tensor  # (B, obs_dim) normalised
    actions: torch.Tensor  # (B, act_dim) or (B,)
    logprobs: torch.Tensor  # (B,)
    values: torch.Tensor  # (B,) V_old(s_t)
    advantages: torch.Tensor  # (B,)
    returns: torch.Tensor  # (B,)


def ppo_update(model: ActorCritic, optimizer: torch.optim.Optimizer, rollout: Rollout, config: PPOConfig,
               generator: torch.Generator) -> dict[str, torch.Tensor]:
    """``update_epochs`` passes over ``rollout`` in ``num_minibatches`` shuffled minibatches, one Adam
    step each. Returns the last epoch's mean of each loss's info (tensors: no host sync here,
    except once per epoch when ``target_kl`` is set)."""
    B = rollout.obs.shape[0]
    mb_size = max(B // config.num_minibatches, 1)
    value_clip = config.clip_eps if config.clip_vloss else None
    for epoch in range(config.update_epochs):
        perm = torch.randperm(B, generator=generator, device=rollout.obs.device)
        infos: list[dict[str, torch.Tensor]] = []
        for start in range(0, B - mb_size + 1, mb_size):
            # The minibatch's rows of every rollout tensor (index_select: the same rows as rollout.x[mb],
            # gathered several times faster on a CPU).
            mb_obs, mb_actions, mb_logprobs, mb_values, mb_adv, mb_returns = (
                x.index_select(0, perm[start:start + mb_size]) for x in rollout)
            if config.norm_adv:
                mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
            logprobs, entropy = model.log_prob_entropy(mb_obs, mb_actions)
            pg_loss, pg_info = policy_loss(logprobs, mb_logprobs, mb_adv, config.clip_eps)
            v_loss, v_info = value_loss(model.value(mb_obs), mb_values, mb_returns, value_clip)
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
            # env action = clamp(bias + scale * u, low, high): the unit box maps onto bounded dims
            # (clamping there is clipping u to [-1, 1]); unbounded dims pass u through.
            bounds = action_bounds("PPO", action_space, finite=False)
            act_dim = int(bounds.low.numel())
            self.action_shape, self.action_dtype = (act_dim,), torch.float32
            self.action_low, self.action_high, self.action_scale, self.action_bias = (
                x.to(self.device) for x in bounds)
        self.model = ActorCritic(self.obs_dim, act_dim, self.discrete, self.config).to(self.device)
        self.optimizer = make_adam(self.model.parameters(), lr=self.config.learning_rate, eps=self.config.adam_eps)
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
        if self.discrete:
            dist = self.model.categorical(norm_obs)
            actions = dist.probs.argmax(-1) if deterministic else \
                torch.multinomial(dist.probs, 1, generator=self.generator).squeeze(-1)
            return actions, dist.log_prob(actions)
        mean, std = self.model.gaussian(norm_obs)
        actions = mean if deterministic else \
            mean + std * torch.randn(mean.shape, generator=self.generator, device=self.device)
        return actions, gaussian_log_prob(mean, std, actions)

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
        actions, _ = self._sample(self._normalize_obs(self.check_obs(obs)), deterministic)
        return self._to_env(actions)

    # -- training
    def begin_training(self, total_steps: int) -> None:
        """Start a run of ``total_steps`` env steps on a freshly reset env (``podracer.train`` calls
        this right after ``env.reset()``). The running discounted return restarts at 0, as
        ``VecNormalize`` does on reset: the last run's episodes do not continue into this one's
        scaled rewards. With ``anneal_lr``, α decays to its floor over [global_step, global_step + total_steps]."""
        if self.discounted_return is not None:  # a new tensor: a state_dict taken earlier may share the old one
            self.discounted_return = torch.zeros_like(self.discounted_return)
        if self.config.anneal_lr:
            self.anneal_window = (self.global_step, self.global_step + int(total_steps))
        self._apply_lr()

    def steps_per_train_step(self, num_envs: int) -> int:
        """Env steps one ``train_step`` collects on ``num_envs`` sub-envs: T * N."""
        return self.config.rollout_size(num_envs)

    def _current_lr(self) -> float:
        """α, decayed linearly to ``anneal_floor`` x α at ``anneal_steps`` when that is set, else over
        the run's window when ``anneal_lr`` is (see ``begin_training``), else constant; the floor
        holds after the horizon."""
        cfg = self.config
        if cfg.anneal_steps:
            frac = max(1.0 - self.global_step / cfg.anneal_steps, 0.0)
        elif cfg.anneal_lr and self.anneal_window is not None:
            start, end = self.anneal_window
            frac = max(1.0 - (self.global_step - start) / max(end - start, 1), 0.0)
        else:
            return cfg.learning_rate
        return cfg.learning_rate * (cfg.anneal_floor + (1.0 - cfg.anneal_floor) * frac)

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
                             f"{cfg.rollout_steps(num_envs)} x num_envs {num_envs} = {cfg.rollout_size(num_envs)} "
                             f"samples in num_minibatches={cfg.num_minibatches}); use num_minibatches <= "
                             f"{max(cfg.rollout_size(num_envs) // 2, 1)}, or more num_steps or sub-envs")
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
            rollout = Rollout(obs=b_obs, actions=buf.actions.reshape(T * N, *self.action_shape),
                              logprobs=buf.logprobs.reshape(-1), values=values.reshape(-1),
                              advantages=advantages.reshape(-1), returns=returns.reshape(-1))

        # 6. update_epochs passes of shuffled minibatch updates.
        info = ppo_update(self.model, self.optimizer, rollout, cfg, self.generator)
        self.global_step += T * N

        # 7. Metrics, with one host sync.
        with torch.no_grad():
            # Fraction of the return variance the critic explains before the update: 1 is perfect.
            info["charts/explained_variance"] = (
                1 - (rollout.returns - rollout.values).var() / rollout.returns.var().clamp_min(1e-8))
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
        window = None if self.anneal_window is None else list(self.anneal_window)
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "obs_rms": self.obs_rms.state_dict(), "return_rms": self.return_rms.state_dict(),
                "generator": self.generator.get_state(), "generator_device": self.device.type,
                "global_step": self.global_step, "discounted_return": self.discounted_return, "anneal_window": window}

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


__getattr__ = module_getattr(__name__)  # ``Batch``, the name of ``Rollout`` before 1.1 (podracer.deprecation)


__all__ = ["PPO", "PPOConfig", "ActorCritic", "RolloutBuffer", "Rollout", "compute_gae", "gaussian_log_prob",
           "discounted_returns", "policy_loss", "value_loss", "entropy_loss", "ppo_update"]
