"""The batched-tensor environment protocol, and a small base class that implements its checks.

An env here is ``num_envs`` copies of one task stepped together as torch tensors on
``env.device``. Names follow gymnasium's vector API so users recognise them:

- ``num_envs``, ``device``, ``single_observation_space``, ``single_action_space``
  (gymnasium spaces), ``metadata["autoreset_mode"] == "same_step"``.
- Optional ``task``: the name of the task when Podracer has presets for it (``"pendulum"``,
  ``"stock_trading"``); ``make_agent`` then picks the preset by itself. ``None`` otherwise.
- ``reset(seed=None) -> (obs, info)``; ``obs`` is ``(num_envs, obs_dim)``.
- ``step(actions) -> (obs, rewards, terminated, truncated, info)``; ``rewards`` float,
  ``terminated`` and ``truncated`` bool, each ``(num_envs,)``.

Same-step autoreset: when sub-env i ends (terminated or truncated), the ``obs[i]`` returned by
that very step is already the first observation of its next episode. The true last observation
is in ``info["final_obs"]``, a *dense* ``(num_envs, obs_dim)`` tensor (gymnasium uses an object
array; dense is what a GPU wants), with the boolean mask ``info["_final_obs"]`` ``(num_envs,)``.
Rows where the mask is False hold the same values as ``obs``, so ``final_obs`` can be used as
"the next observation" for every env. Learners bootstrap truncated (not terminated) steps with
``gamma * V(final_obs)``.

Actions are checked once per step: shape, dtype, device and finiteness. A bad action raises a
``ValueError`` naming the expected and received values, and leaves the env state untouched.
"""

from __future__ import annotations

import numbers
from typing import Any

import gymnasium as gym
import numpy as np
import torch

AUTORESET_MODE = "same_step"


def check_actions(actions: Any, num_envs: int, space: gym.Space, device: torch.device) -> None:
    """Raise ``ValueError`` unless ``actions`` is a valid batch of actions for ``space``.

    Box spaces expect a floating tensor ``(num_envs, *space.shape)``; Discrete spaces expect an
    integer tensor ``(num_envs,)``. Values must be finite (Box) or in range (Discrete).
    """
    if not isinstance(actions, torch.Tensor):
        raise ValueError(
            f"expected actions as a torch.Tensor on {device}, got {type(actions).__name__}; "
            f"convert with torch.as_tensor(actions, device=env.device)"
        )
    if isinstance(space, gym.spaces.Discrete):
        expected_shape: tuple[int, ...] = (num_envs,)
        if actions.dtype.is_floating_point or actions.dtype == torch.bool:
            raise ValueError(
                f"expected integer actions (torch.int64) for a Discrete({space.n}) space, "
                f"got dtype {actions.dtype}"
            )
    else:
        expected_shape = (num_envs, *space.shape)
        if not actions.dtype.is_floating_point:
            raise ValueError(
                f"expected floating actions (torch.float32) for a Box space, got dtype {actions.dtype}"
            )
    if tuple(actions.shape) != expected_shape:
        raise ValueError(f"expected actions of shape {expected_shape}, got {tuple(actions.shape)}")
    if actions.device != device:
        raise ValueError(
            f"expected actions on device {device}, got {actions.device}; move them with "
            f".to(env.device)"
        )
    if isinstance(space, gym.spaces.Discrete):
        # One host sync per step; the price of a clear error instead of an index crash.
        if bool(((actions < space.start) | (actions >= space.start + space.n)).any()):
            raise ValueError(
                f"expected actions in [{space.start}, {space.start + space.n - 1}] for "
                f"Discrete({space.n}), got values {actions.min().item()}..{actions.max().item()}"
            )
    # Finiteness from one sum first (NaN and inf propagate into it): ~20x cheaper than an
    # elementwise isfinite on a 4096 x 20 batch. A sum can overflow from finite values, so an
    # infinite sum falls back to the elementwise test before it is called an error.
    elif not bool(torch.isfinite(actions.sum())) and not bool(torch.isfinite(actions).all()):
        bad = (~torch.isfinite(actions)).reshape(num_envs, -1).any(dim=1).nonzero().flatten()
        raise ValueError(
            f"expected finite actions, got NaN or inf in sub-envs {bad[:8].tolist()}"
            f"{' ...' if len(bad) > 8 else ''}"
        )


def parse_device(device: str | torch.device) -> torch.device:
    """``torch.device(device)``, but a name torch does not know (``"gpu"``) is a ValueError with the
    names to use, not torch's list of every backend it was built to know. The name alone: whether
    this machine has the device is ``resolve_device``'s question."""
    try:
        return torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"unknown device {device!r}: use 'cpu', 'cuda' (the current GPU) or 'cuda:N', "
                         f"or 'mps' on Apple silicon") from None


def resolve_device(device: str | torch.device) -> torch.device:
    """``"cuda"`` -> ``cuda:<current index>`` so that comparing with a tensor's device (always
    indexed) works; other devices unchanged. ValueError for a device this machine does not have."""
    device = parse_device(device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {str(device)!r} asked for, but this torch ({torch.__version__}) sees no CUDA GPU "
                             f"(torch.cuda.is_available() is False); use device='cpu', or on a GPU machine install a "
                             f"CUDA build of torch")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        elif device.index >= torch.cuda.device_count():
            raise ValueError(f"device {str(device)!r} asked for, but only {torch.cuda.device_count()} CUDA device(s) "
                             f"are visible")
    return device


class TensorVecEnv:
    """Shared plumbing for envs written as tensor code: device, spaces, seeding, action checks.

    Subclasses set ``single_observation_space`` and ``single_action_space`` and implement
    ``reset`` and ``step``. Randomness comes from ``self.rng``, a ``torch.Generator`` on the
    env's device: ``reset(seed)`` reseeds it, so a whole batch is reproducible from one seed.
    """

    metadata: dict[str, Any] = {"autoreset_mode": AUTORESET_MODE}
    task: str | None = None  # the task name Podracer has presets for ("pendulum"); make_agent picks them
    single_observation_space: gym.Space
    single_action_space: gym.Space

    def __init__(self, num_envs: int, device: str | torch.device = "cpu", validate_actions: bool = True):
        if isinstance(num_envs, bool) or not isinstance(num_envs, numbers.Integral) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive whole number, got {num_envs!r}")
        self.num_envs = int(num_envs)  # numpy integers are fine
        self.device = resolve_device(device)
        self.validate_actions = validate_actions
        self.rng = torch.Generator(device=self.device)
        self.rng.seed()

    def _seed(self, seed: int | None) -> None:
        if seed is not None:
            if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
                raise ValueError(f"seed must be a whole number or None, got {seed!r}")
            self.rng.manual_seed(int(seed))

    def _uniform(self, low: float, high: float, shape: tuple[int, ...]) -> torch.Tensor:
        u = torch.rand(shape, generator=self.rng, device=self.device, dtype=torch.float32)
        return low + (high - low) * u

    def _check(self, actions: torch.Tensor) -> None:
        if self.validate_actions:
            check_actions(actions, self.num_envs, self.single_action_space, self.device)

    def stagger_time_limits(self) -> torch.Tensor | None:
        """Start each sub-env's time-limit counter at a random step in ``[0, max_episode_steps)``.

        Call right after ``reset``. Sub-envs reset together also truncate together, so without
        this every rollout of a short-rollout learner (PPO's 16 steps) comes from one phase of
        the episode in all sub-envs, and the value targets at truncation are correlated across
        the batch; legged_gym randomises the initial episode length for the same reason. Only
        the counter moves: the state is the reset's, so each sub-env's first episode is shorter.
        The training loop calls this (``podracer.train(..., stagger_time_limits=True)``);
        evaluation never does, so evaluation episodes stay full length from step 0.

        Works for any subclass with an ``elapsed`` counter tensor ``(num_envs,)`` and a
        ``max_episode_steps`` limit (Pendulum, CartPole). The offsets come from ``self.rng``, so
        they are reproducible from ``reset(seed)``. Returns the offsets ``(num_envs,)``, or None
        (nothing done) for an env without those two attributes.
        """
        elapsed, limit = getattr(self, "elapsed", None), getattr(self, "max_episode_steps", None)
        if not isinstance(elapsed, torch.Tensor) or limit is None:
            return None
        offsets = torch.randint(0, int(limit), (self.num_envs,), generator=self.rng, device=self.device)
        self.elapsed = offsets.to(elapsed.dtype, copy=True)  # a copy: step and reset change elapsed in place
        return offsets

    @property
    def obs_dim(self) -> int:
        return int(np.prod(self.single_observation_space.shape))

    def close(self) -> None:
        """Nothing to release for pure tensor envs; here for gymnasium compatibility."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_envs={self.num_envs}, device={self.device})"
