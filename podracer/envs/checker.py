"""Run any env, ours or a user's, through the batched-tensor protocol and report what breaks."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch


class EnvProtocolError(AssertionError):
    """An env does not follow the batched-tensor protocol; the message says which rule."""


def _require(cond: bool, msg: str) -> None:
    if not cond:
        raise EnvProtocolError(msg)


def _random_actions(env: Any, gen: torch.Generator) -> torch.Tensor:
    space, n, dev = env.single_action_space, env.num_envs, env.device
    if isinstance(space, gym.spaces.Discrete):
        return torch.randint(space.start, space.start + space.n, (n,), generator=gen).to(dev)
    low = torch.as_tensor(space.low, dtype=torch.float32)
    high = torch.as_tensor(space.high, dtype=torch.float32)
    low, high = low.clamp(min=-1e3), high.clamp(max=1e3)
    return (low + (high - low) * torch.rand((n, *space.shape), generator=gen)).to(dev)


def _check_batch(name: str, x: Any, shape: tuple[int, ...], device: torch.device, dtype: torch.dtype | None = None) -> None:
    _require(isinstance(x, torch.Tensor), f"{name} must be a torch.Tensor, got {type(x).__name__}")
    _require(tuple(x.shape) == shape, f"{name} must have shape {shape}, got {tuple(x.shape)}")
    _require(x.device == device, f"{name} must be on {device}, got {x.device}")
    if dtype is not None:
        _require(x.dtype == dtype, f"{name} must have dtype {dtype}, got {x.dtype}")


def check_env(env: Any, num_steps: int = 300, seed: int = 0) -> None:
    """Raise ``EnvProtocolError`` if ``env`` breaks the protocol (see ``podracer.envs.base``).

    Checks attributes and spaces, reset and step shapes, dtypes and devices, same-step autoreset
    with a dense ``final_obs``, seeding, and that a wrong action shape raises ``ValueError``
    without changing the env. Runs ``num_steps`` random steps.
    """
    for attr in ("num_envs", "device", "single_observation_space", "single_action_space", "metadata"):
        _require(hasattr(env, attr), f"env has no attribute {attr!r}")
    _require(env.metadata.get("autoreset_mode") in ("same_step", gym.vector.AutoresetMode.SAME_STEP),
             f"metadata['autoreset_mode'] must be 'same_step', got {env.metadata.get('autoreset_mode')!r}")
    _require(isinstance(env.single_observation_space, gym.spaces.Box), "single_observation_space must be a gymnasium Box")
    _require(isinstance(env.single_action_space, (gym.spaces.Box, gym.spaces.Discrete)),
             "single_action_space must be a gymnasium Box or Discrete")
    n, dev = env.num_envs, torch.device(env.device)
    obs_dim = int(torch.tensor(env.single_observation_space.shape).prod())

    obs, info = env.reset(seed=seed)
    _check_batch("reset obs", obs, (n, obs_dim), dev, torch.float32)
    _require(isinstance(info, dict), "reset info must be a dict")
    obs_again, _ = env.reset(seed=seed)
    _require(torch.equal(obs, obs_again), "reset(seed=s) twice must give the same observations")

    gen = torch.Generator().manual_seed(seed)
    bad = _random_actions(env, gen)[:1] if n > 1 else _random_actions(env, gen).unsqueeze(0)
    try:
        env.step(bad)
    except ValueError:
        pass
    else:
        raise EnvProtocolError(f"step with actions of shape {tuple(bad.shape)} must raise ValueError")

    saw_done = False
    for _ in range(num_steps):
        obs, rewards, terminated, truncated, info = env.step(_random_actions(env, gen))
        _check_batch("step obs", obs, (n, obs_dim), dev, torch.float32)
        _check_batch("rewards", rewards, (n,), dev, torch.float32)
        _check_batch("terminated", terminated, (n,), dev, torch.bool)
        _check_batch("truncated", truncated, (n,), dev, torch.bool)
        _require("final_obs" in info and "_final_obs" in info, "step info must hold 'final_obs' and '_final_obs'")
        _check_batch("info['final_obs']", info["final_obs"], (n, obs_dim), dev, torch.float32)
        _check_batch("info['_final_obs']", info["_final_obs"], (n,), dev, torch.bool)
        done = terminated | truncated
        _require(torch.equal(info["_final_obs"], done), "info['_final_obs'] must equal terminated | truncated")
        _require(bool(torch.isfinite(obs).all()) and bool(torch.isfinite(rewards).all()),
                 "observations and rewards must be finite")
        _require(torch.equal(info["final_obs"][~done], obs[~done]),
                 "info['final_obs'] must equal obs where the sub-env did not end")
        saw_done = saw_done or bool(done.any())
    _require(saw_done, f"no sub-env ended in {num_steps} random steps; pass a larger num_steps")
