"""The one small module every agent shares: networks (MLP builder, Q ensemble, deterministic
actor), running normaliser, soft update, config checks, Adam, action bounds, space
(de)serialisation, and the thin base class that gives each agent save/load, with the table of
agent names it saves and loads by (each agent class enters it when defined: ``register_agent``).

The algorithm never lives here: each agent file reads top to bottom on its own. PPO and the
off-policy agents validate their configs (``check_config``), build Adam (``make_adam``) and name
their Box bounds (``action_bounds``: ``low``, ``high``, ``scale``, ``bias``) with the same helpers.

The agent interface (what ``podracer.train``, the tournament and notebooks rely on):

- ``Agent(observation_space, action_space, config=None, device="cpu")`` — gymnasium spaces of
  ONE sub-env (``env.single_observation_space``, ``env.single_action_space``).
- ``act(obs, deterministic=False) -> actions`` — ``obs`` ``(N, obs_dim)`` on ``device`` (checked by
  ``check_obs``); returns actions in the env's action space, ready for ``env.step``.
- ``train_step(env, obs) -> (obs, metrics)`` — collect from the env starting at ``obs`` and
  update once (PPO: one rollout and its epochs; off-policy: a chunk of steps with their
  gradient updates). ``metrics`` is a flat dict of floats with namespaced keys
  (``loss/actor``, ``loss/critic``, ...) and always ``"env_steps"``: env steps taken in this call,
  summed over sub-envs.
- ``state_dict()`` / ``load_state_dict(state)`` — tensors and plain Python values only, so
  ``torch.load(..., weights_only=True)`` reads it back: weights, optimizer, normalisers.
- ``save(path)`` / ``Agent.load(path, device=None)`` — the above plus config and spaces.
- Hyperparameters a tournament may perturb are config fields declared with
  ``field(default=..., metadata={"mutable": (low, high)})``; ``set_hparams(**kw)`` applies
  them to a live agent (for example to the optimizer's learning rate).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import math
import numbers
from pathlib import Path
from typing import Any, ClassVar, NamedTuple, Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from podracer import checkpoints, deprecation
from podracer.deprecation import renamed_fields, renamed_keys
from podracer.envs.base import resolve_device
from podracer.plugins import load_domains


# ---------------------------------------------------------------------------- networks
def layer_init(layer: nn.Linear, gain: float = float(np.sqrt(2)), bias: float = 0.0) -> nn.Linear:
    """Orthogonal weights, constant bias: the PPO implementation-details default."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.constant_(layer.bias, bias)
    return layer


def mlp(in_dim: int, hidden: Sequence[int], out_dim: int, activation: type[nn.Module] = nn.Tanh,
        out_gain: float = 1.0, orthogonal: bool = True) -> nn.Sequential:
    """in_dim -> hidden... -> out_dim; ``activation`` between layers, none after the last."""
    dims = [in_dim, *hidden]
    layers: list[nn.Module] = []
    for a, b in zip(dims[:-1], dims[1:]):
        lin = nn.Linear(a, b)
        layers += [layer_init(lin) if orthogonal else lin, activation()]
    last = nn.Linear(dims[-1], out_dim)
    layers.append(layer_init(last, gain=out_gain) if orthogonal else last)
    return nn.Sequential(*layers)


@torch.no_grad()
def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """Polyak averaging: theta_target <- tau * theta + (1 - tau) * theta_target.

    One ``_foreach_lerp_`` call for all parameters rather than a Python loop of ``lerp_``: on small
    networks each torch call from Python costs more than its arithmetic (the same kernel, so the
    same numbers)."""
    torch._foreach_lerp_(list(target.parameters()), list(source.parameters()), tau)


class EnsembleLinear(nn.Module):
    """K independent linear layers, applied by ``QEnsemble`` as one batched matmul."""

    def __init__(self, k: int, in_dim: int, out_dim: int):
        super().__init__()
        bound = 1.0 / math.sqrt(in_dim)  # nn.Linear's default init, per member
        self.weight = nn.Parameter(torch.empty(k, in_dim, out_dim).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(k, 1, out_dim).uniform_(-bound, bound))



class QEnsemble(nn.Module):
    """``num_critics`` independent Q(s, a) MLPs evaluated together: returns (K, B)."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...], num_critics: int = 2):
        super().__init__()
        self.num_critics = num_critics
        dims = [obs_dim + act_dim, *hidden, 1]
        self.layers = nn.ModuleList(EnsembleLinear(num_critics, a, b) for a, b in zip(dims[:-1], dims[1:]))

    def forward(self, obs: torch.Tensor, actions: torch.Tensor, detach_params: bool = False) -> torch.Tensor:
        """``detach_params``: gradients flow to the inputs only (the actor's loss), never to Q's weights."""
        x = torch.cat([obs, actions], dim=-1).expand(self.num_critics, -1, -1)  # (K, B, obs_dim + act_dim)
        for i, layer in enumerate(self.layers):
            w, b = (layer.weight.detach(), layer.bias.detach()) if detach_params else (layer.weight, layer.bias)
            x = torch.baddbmm(b, x, w)
            if i < len(self.layers) - 1:
                x = torch.relu(x)
        return x.squeeze(-1)  # (K, B)


class DeterministicActor(nn.Module):
    """mu(s) = c + s * tanh(net(s)), always inside the Box [c - s, c + s]: DDPG's and TD3's actor
    (ReLU MLP, PyTorch's default init). ``bounds`` from ``action_bounds``."""

    def __init__(self, obs_dim: int, hidden_sizes: tuple[int, ...], bounds: "ActionBounds"):
        super().__init__()
        self.net = mlp(obs_dim, hidden_sizes, bounds.low.numel(), activation=nn.ReLU, orthogonal=False)
        self.register_buffer("action_scale", bounds.scale.clone())  # s
        self.register_buffer("action_bias", bounds.bias.clone())  # c
        # The clip of ``noisy``; not saved (checkpoints hold scale and bias only, as before 1.1).
        self.register_buffer("action_low", bounds.low.clone(), persistent=False)
        self.register_buffer("action_high", bounds.high.clone(), persistent=False)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.action_bias + self.action_scale * torch.tanh(self.net(obs))

    def noisy(self, obs: torch.Tensor, sigma: float, generator: torch.Generator) -> torch.Tensor:
        """The exploring action clip(mu(s) + N(0, (sigma s)^2), low, high), noise from ``generator``."""
        actions = self(obs)
        noise = torch.randn(actions.shape, generator=generator, device=actions.device)
        actions = actions + noise * sigma * self.action_scale
        return actions.clamp(self.action_low, self.action_high)


def target_net(net: nn.Module, source: nn.Module) -> nn.Module:
    """``net``, a fresh twin of ``source``, made its target network: ``source``'s weights, no
    gradients. Built rather than deep-copied, so the twin's initialisation draws from torch's
    global RNG as it always has, and a seed gives the same weights as in earlier versions."""
    net.load_state_dict(source.state_dict())
    return net.requires_grad_(False)


class RunningMeanStd(nn.Module):
    """Running mean and variance (parallel algorithm of Chan et al.) as buffers, so they travel
    with ``state_dict``. ``normalize`` clips to ``[-clip, clip]`` after standardising."""

    def __init__(self, shape: tuple[int, ...] = (), epsilon: float = 1e-4, clip: float = 10.0):
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape))
        self.register_buffer("var", torch.ones(shape))
        self.register_buffer("count", torch.tensor(epsilon))
        self.clip = clip

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        x = x.reshape(-1, *self.mean.shape).to(self.mean.dtype)
        batch_mean, batch_count = x.mean(0), x.shape[0]
        # Two passes, written out: torch's var(0) over the rows of a (B, obs_dim) batch is about 6x
        # slower on a CPU (a strided reduction), 5% of a PPO iteration on the stock task.
        batch_var = (x - batch_mean).square().mean(0)
        delta = batch_mean - self.mean
        total = self.count + batch_count
        self.mean += delta * batch_count / total
        m2 = self.var * self.count + batch_var * batch_count + delta**2 * self.count * batch_count / total
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        return ((x - self.mean) / torch.sqrt(self.var + 1e-8)).clamp(-self.clip, self.clip)


# ---------------------------------------------------------------------------- configs
def make_config(cls: type, overrides: dict[str, Any] | None = None, base: Any = None,
                warn_renamed: bool = True) -> Any:
    """Build config ``cls`` from ``base`` (or defaults) plus ``overrides``; an unknown key is an
    error that lists the valid ones, never silently ignored.

    A renamed field keeps its old name until its removal version: the old key is mapped to the new
    one with the ``FutureWarning`` of ``podracer.deprecation`` (the table's rows
    ``"<Config>.<old>"``). ``warn_renamed=False`` for a caller that reports the old names itself
    (a checkpoint: ``AgentBase.from_checkpoint``).
    """
    overrides = dict(overrides or {})
    for old, row in renamed_fields(cls).items():
        if old in overrides:
            if row.new_short in overrides:
                raise ValueError(f"{cls.__name__}: give {row.new_short!r} only ({old!r} is its deprecated name)")
            if warn_renamed:
                deprecation.warn(row.old, stacklevel=3)
            overrides[row.new_short] = overrides.pop(old)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise ValueError(f"unknown {cls.__name__} field(s) {unknown}; valid fields: {sorted(names)}")
    if base is not None:
        return dataclasses.replace(base, **overrides)
    return cls(**overrides)


def restore_generator(generator: torch.Generator, state: torch.Tensor, saved_device_type: str | None) -> None:
    """Load a ``torch.Generator`` state saved on any device into ``generator``.

    A generator's state only fits a generator of the same device type (a CUDA state is 16 bytes,
    a CPU one 5056), so a checkpoint saved on a GPU could not load on a CPU. Across device types
    the generator is reseeded from a hash of the saved bytes instead: deterministic (the same
    checkpoint always continues with the same stream), though not the stream the other device had.
    """
    state = state.detach().cpu().to(torch.uint8)
    same_type = saved_device_type in (None, generator.device.type)
    if same_type:
        try:
            generator.set_state(state)
            return
        except RuntimeError:  # wrong size: saved by another device type without saying so
            pass
    digest = hashlib.sha256(state.numpy().tobytes()).digest()
    generator.manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))


def mutable_bounds(config: Any) -> dict[str, tuple[float, float]]:
    """``{field: (low, high)}`` for the config fields declared mutable (tournament PBT)."""
    return {f.name: tuple(f.metadata["mutable"]) for f in dataclasses.fields(config) if "mutable" in f.metadata}


def declared_number(f: dataclasses.Field) -> tuple[str | None, bool]:
    """``(kind, optional)`` for a dataclass field annotated ``int``, ``float``, ``int | None`` or
    ``float | None``: kind is ``"int"`` or ``"float"``, optional whether None is allowed; ``(None,
    False)`` for any other annotation. One reader for every config that checks its numbers."""
    text = f.type.__name__ if isinstance(f.type, type) else str(f.type)  # text with `from __future__ import ...`
    kind, _, rest = text.replace(" ", "").partition("|")
    return (kind, rest == "None") if kind in ("int", "float") and rest in ("", "None") else (None, False)


# Kinds of numeric config field, the test each value must pass and the error's wording.
CHECKS: dict[str, tuple[Any, str]] = {
    "positive": (lambda v: v > 0, "must be positive"),
    "non_negative": (lambda v: v >= 0, "must be >= 0"),
    "at_least_one": (lambda v: v >= 1, "must be >= 1"),
    "unit_interval": (lambda v: 0.0 <= v <= 1.0, "must be in [0, 1]"),
    "unit_excl_zero": (lambda v: 0.0 < v <= 1.0, "must be in (0, 1]"),
}


def check_config(cfg: Any, optional: tuple[str, ...] = (), **kinds: tuple[str, ...]) -> None:
    """Validate a config in ``__post_init__``: each field named under a kind of ``CHECKS``
    (``positive=("learning_rate",)``) must pass its test, else a ``ValueError`` names the field,
    the rule and the value; a field in ``optional`` may also be None. ``hidden_sizes``, when the
    config has it, becomes a tuple of ints (a list from YAML or a checkpoint is fine) and must be
    non-empty and positive. Shared so every agent's config fails with the same clear messages."""
    for kind, names in kinds.items():
        test, rule = CHECKS[kind]
        for name in names:
            value = getattr(cfg, name)
            if name in optional and value is None:
                continue
            if not test(value):
                raise ValueError(f"{name} {rule}{' or None' if name in optional else ''}, got {value}")
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        # A float field given a whole number (gae_lambda=1, YAML's "ent_coef: 0") holds a float: a
        # tournament mutates an int as a count (1 rounded into (0.8, 0.99) became 0, 0 never moved).
        if declared_number(f)[0] == "float" and isinstance(value, numbers.Real) and not isinstance(value, bool):
            setattr(cfg, f.name, float(value))
    if hasattr(cfg, "hidden_sizes"):
        cfg.hidden_sizes = tuple(int(h) for h in cfg.hidden_sizes)
        if not cfg.hidden_sizes or min(cfg.hidden_sizes) < 1:
            raise ValueError(f"hidden_sizes must be a non-empty tuple of positive sizes, got {cfg.hidden_sizes}")


def make_adam(params: Any, lr: float = 1e-3, eps: float = 1e-8) -> torch.optim.Adam:
    """Adam over ``params`` (tensors, or param-group dicts such as ``{"name": "actor", "params":
    ..., "lr": ...}``). Fused (one kernel for every parameter: ~10% off a small-MLP update on the
    CPU) where torch has the kernel for the parameters' device, else the multi-tensor path."""
    params = [dict(p, params=list(p["params"])) if isinstance(p, dict) else p for p in params]
    try:
        return torch.optim.Adam(params, lr=lr, eps=eps, fused=True)
    except RuntimeError:  # no fused kernel for this device (torch < 2.4 on the CPU, MPS, ...)
        return torch.optim.Adam(params, lr=lr, eps=eps, foreach=True)


# ---------------------------------------------------------------------------- spaces
def space_to_dict(space: gym.Space) -> dict[str, Any]:
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.Box):
        return {"type": "Box", "low": np.asarray(space.low).tolist(), "high": np.asarray(space.high).tolist(),
                "shape": list(space.shape)}
    raise ValueError(f"unsupported space {space}; agents take Box or Discrete spaces")


def space_from_dict(d: dict[str, Any]) -> gym.Space:
    if d["type"] == "Discrete":
        return gym.spaces.Discrete(d["n"], start=d["start"])
    return gym.spaces.Box(np.asarray(d["low"], np.float32), np.asarray(d["high"], np.float32),
                          shape=tuple(d["shape"]), dtype=np.float32)


def require_space(agent: str, space: gym.Space, kinds: tuple[type, ...], hint: str) -> None:
    """Clear error for an agent handed the wrong kind of action space."""
    if not isinstance(space, kinds):
        wanted = " or ".join(k.__name__ for k in kinds)
        raise ValueError(f"{agent} needs a {wanted} action space, got {space}; {hint}")


class ActionBounds(NamedTuple):
    """A Box action space, flat (act_dim,) float32 tensors on the CPU: an action in the unit box
    u in [-1, 1]^d maps to ``bias + scale * u`` in [low, high]."""

    low: torch.Tensor
    high: torch.Tensor
    scale: torch.Tensor  # (high - low) / 2; 1 on an unbounded dimension
    bias: torch.Tensor  # (high + low) / 2; 0 on an unbounded dimension


def action_bounds(agent: str, space: gym.Space, finite: bool = True) -> ActionBounds:
    """The bounds of the Box ``space``, for ``agent`` (named in errors). ``finite``: every bound
    must be finite (DDPG, TD3 and SAC squash actions into them); without it (PPO) an unbounded
    dimension gets scale 1 and bias 0 and passes through."""
    require_space(agent, space, (gym.spaces.Box,), "for Discrete actions use 'dqn', 'double_dqn', 'd3qn' or 'ppo'")
    low = torch.as_tensor(np.asarray(space.low, np.float32)).reshape(-1)
    high = torch.as_tensor(np.asarray(space.high, np.float32)).reshape(-1)
    bounded = torch.isfinite(low) & torch.isfinite(high)
    if finite and not bool(bounded.all()):
        raise ValueError(f"{agent} squashes actions into the Box bounds, which must be finite; got {space}. "
                         f"Rescale the env's actions to a bounded Box")
    scale = torch.where(bounded, (high - low) / 2, torch.ones_like(low))
    bias = torch.where(bounded, (high + low) / 2, torch.zeros_like(low))
    return ActionBounds(low, high, scale, bias)


# ---------------------------------------------------------------------------- the agent registry
# Registry name -> agent class. Every AgentBase subclass that declares its own ``name`` is entered
# here when its class statement runs (``AgentBase.__init_subclass__``), ours and a domain's alike;
# ``register_agent`` enters one under another name. ``resolve_agent`` and ``agent_name`` read it,
# so save, load and the tournament know the same names whatever was imported first.
_AGENT_CLASSES: dict[str, type] = {}


def register_agent(cls: type, name: str | None = None) -> type:
    """Make ``resolve_agent(name)`` (default ``cls.name``) return the agent class ``cls``; returns
    ``cls``. A subclass of ``AgentBase`` that sets its own ``name`` is registered when defined, so
    this is for a class registered under another name. Registering a name twice is an error unless
    it is the same class, or the same ``module:Class`` defined again (a re-run notebook cell, a reload)."""
    if not (isinstance(cls, type) and issubclass(cls, AgentBase)):
        raise TypeError(f"{cls!r} is not an agent class (a subclass of podracer.AgentBase)")
    key = (name if name is not None else cls.__dict__.get("name", "")).lower()
    if not key or ":" in key:
        raise ValueError(f"an agent's registry name must be non-empty without ':', got {key!r} for {cls.__qualname__}")
    old = _AGENT_CLASSES.get(key)
    if old is not None and (old.__module__, old.__qualname__) != (cls.__module__, cls.__qualname__):
        raise ValueError(f"agent name {key!r} is already registered to {old.__module__}:{old.__qualname__}; "
                         f"give {cls.__qualname__} another name")
    _AGENT_CLASSES[key] = cls
    return cls


def registered_agents() -> dict[str, type]:
    """Registry name -> agent class, for every agent defined so far (the installed domains' agents
    appear once their package is imported; a lookup that misses imports them)."""
    return dict(_AGENT_CLASSES)


def import_path(path: str) -> Any:
    """The object named by ``"package.module:Qual.name"``."""
    module, _, qualname = path.partition(":")
    if not module or not qualname:
        raise ValueError(f"expected an import path 'package.module:Name', got {path!r}")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def resolve_agent(agent: str | type) -> type:
    """The agent class for a registry name (``"ppo"``), an ``"module:Class"`` path, or a class.
    A name not registered yet imports the installed domains once (``podracer.plugins``) and looks
    again. Anything that is not an agent class (a subclass of ``AgentBase``) is refused."""
    if isinstance(agent, str):
        if ":" in agent:
            cls = import_path(agent)
        else:
            if agent.lower() not in _AGENT_CLASSES:
                load_domains()  # a domain's agent registers when its package is imported
            if agent.lower() not in _AGENT_CLASSES:
                raise ValueError(f"unknown agent {agent!r}; available: {sorted(_AGENT_CLASSES)}, or an import path "
                                 f"'package.module:Class' of your own AgentBase subclass")
            cls = _AGENT_CLASSES[agent.lower()]
    else:
        cls = agent
    if not (isinstance(cls, type) and issubclass(cls, AgentBase)):
        raise TypeError(f"{agent!r} is not an agent class (a subclass of podracer.AgentBase)")
    return cls


def agent_name(agent: str | type) -> str:
    """The name stored for ``agent`` in checkpoints and tournament files: its registry name, else
    ``"module:Class"``. A class the pod processes or a later ``load`` could not import (defined in
    a notebook cell or a function) is an error that says how to fix it."""
    cls = resolve_agent(agent)  # fail now, with the resolver's message
    if isinstance(agent, str) and ":" not in agent:
        return agent.lower()
    names = [name for name, registered in _AGENT_CLASSES.items() if registered is cls]
    if names:
        own = str(cls.__dict__.get("name", "")).lower()
        return own if own in names else names[0]
    if cls.__module__ == "__main__" or "<locals>" in cls.__qualname__:
        raise ValueError(f"agent class {cls.__qualname__} must be importable by name to be saved or run in pods: "
                         f"define it in a .py module (not a notebook cell or a function)")
    return f"{cls.__module__}:{cls.__qualname__}"


# ---------------------------------------------------------------------------- base class
class AgentBase:
    """Construction, config handling and save/load shared by all agents. PPO subclasses it
    directly; the off-policy agents through ``offpolicy.OffPolicyAgent``, which owns their replay
    collection and state."""

    name: ClassVar[str] = ""  # the registry name; a subclass that sets its own is registered when defined
    config_cls: ClassVar[type] = object

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("name"):  # its own name, not one inherited (a subclass of SAC is not "sac")
            register_agent(cls)

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: Any = None,
                 device: str | torch.device = "cpu"):
        if config is None:
            config = self.config_cls()
        elif isinstance(config, dict):
            config = make_config(self.config_cls, config)
        elif not isinstance(config, self.config_cls):
            raise TypeError(f"config must be a {self.config_cls.__name__} or dict, got {type(config).__name__}")
        self.config = config
        self.observation_space = observation_space
        self.action_space = action_space
        self.device = resolve_device(device)
        self.obs_dim = int(np.prod(observation_space.shape))
        self.preset: Any = None  # the podracer.Preset make_agent built it from, if any

    # -- interface the subclass fills in
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        raise NotImplementedError

    def check_obs(self, obs: Any) -> torch.Tensor:
        """``obs`` as ``act`` takes it: a batch ``(N, *observation shape)`` (or ``(N, obs_dim)``) on the
        agent's device, as float32 (a NumPy array or a float64 tensor is converted: the networks'
        dtype, else a dtype error from inside a matmul). Anything else is refused with what was
        expected: broadcast into the networks, a single ``(obs_dim,)`` observation would come back as
        actions for ``obs_dim`` envs, and a wrong width as a shape error from inside a matmul."""
        if isinstance(obs, np.ndarray):
            obs = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
        elif not isinstance(obs, torch.Tensor):
            raise TypeError(f"{type(self).__name__}.act takes a batch of observations as a torch.Tensor (or a NumPy "
                            f"array), got {type(obs).__name__}")
        shape = tuple(self.observation_space.shape)
        if obs.ndim == 0 or (tuple(obs.shape[1:]) != shape and tuple(obs.shape[1:]) != (self.obs_dim,)):
            one = " (one observation? add the batch dimension: obs[None])" if tuple(obs.shape) == shape else ""
            raise ValueError(f"{type(self).__name__}.act expected a batch of observations of shape (N, "
                             f"{', '.join(map(str, shape)) or self.obs_dim}), got {tuple(obs.shape)}{one}; the agent "
                             f"was built for observation space {self.observation_space}")
        if obs.device != self.device:
            raise ValueError(f"{type(self).__name__}.act got observations on {obs.device}, the agent is on "
                             f"{self.device}: pass obs.to(agent.device), or build the agent with device=env.device")
        return obs if obs.dtype == torch.float32 else obs.float()

    def train_step(self, env: Any, obs: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def load_state_dict(self, state: dict[str, Any]) -> None:
        raise NotImplementedError

    def begin_training(self, total_steps: int) -> None:
        """Called by ``podracer.iterate_training`` right after it resets the env, before the first
        ``train_step`` of a run of ``total_steps`` env steps. Agents that keep per-episode running
        state (PPO's discounted return for reward scaling) or plan over the run length (PPO's
        ``anneal_lr``) override it; the default does nothing."""

    def steps_per_train_step(self, num_envs: int) -> int:
        """Env steps (summed over sub-envs) one ``train_step`` collects on ``num_envs`` sub-envs:
        ``train`` warns when a run's ``total_steps`` is not a multiple of it."""
        return int(self.config.num_steps) * int(num_envs)

    def set_hparams(self, **hparams: Any) -> None:
        """Change config fields of a live agent; subclasses extend it to push values into
        optimizers. Only fields declared mutable are accepted."""
        bounds = mutable_bounds(self.config)
        bad = sorted(set(hparams) - set(bounds))
        if bad:
            raise ValueError(f"{bad} not mutable for {type(self).__name__}; mutable: {sorted(bounds)}")
        self.config = dataclasses.replace(self.config, **hparams)

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        """An agent is a policy: deterministic action for ``obs`` (for backtests and evaluation)."""
        return self.act(obs, deterministic=True)

    # -- persistence
    def checkpoint(self) -> dict[str, Any]:
        return {
            "agent": agent_name(type(self)),  # registry name, else "module:Class"
            "config": dataclasses.asdict(self.config),
            "observation_space": space_to_dict(self.observation_space),
            "action_space": space_to_dict(self.action_space),
            "state": self.state_dict(),
        }

    def save(self, path: str | Path) -> Path:
        """Write the checkpoint atomically (``podracer.checkpoints.write``: a crash never leaves a
        half-written file at ``path``). Returns ``path``."""
        path = Path(path)
        checkpoints.write(self.checkpoint(), path)
        return path

    @classmethod
    def from_checkpoint(cls, ckpt: dict[str, Any], device: str | torch.device | None = None) -> "AgentBase":
        agent_cls = resolve_agent(ckpt["agent"]) if cls is AgentBase else cls
        # Written before a rename: it loads (one warning naming the old keys), not a config error.
        config = make_config(agent_cls.config_cls, renamed_keys(ckpt["config"], agent_cls.config_cls),
                             warn_renamed=False)
        agent = agent_cls(space_from_dict(ckpt["observation_space"]), space_from_dict(ckpt["action_space"]),
                          config, device=device or "cpu")
        agent.load_state_dict(ckpt["state"])
        return agent

    @classmethod
    def load(cls, path: str | Path, device: str | torch.device | None = None) -> "AgentBase":
        """The agent saved at ``path``, on ``device`` (default CPU) whatever device it was saved on.
        Read with ``weights_only=True``: a checkpoint never unpickles arbitrary objects."""
        device = resolve_device(device or "cpu")  # a clear error for a GPU this machine does not have
        ckpt = checkpoints.read(path, device=device)
        return cls.from_checkpoint(ckpt, device)
