"""Deterministic evaluation of any policy on a protocol env, and the random policy to beat."""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
import numpy as np
import torch


def as_policy(policy: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """An agent (deterministic ``act``) or any callable ``obs -> actions``."""
    if hasattr(policy, "act"):
        return lambda obs: policy.act(obs, deterministic=True)
    if callable(policy):
        return policy
    raise TypeError(f"expected an agent with .act or a callable obs -> actions, got {type(policy).__name__}")


class RandomPolicy:
    """Uniform random actions from ``env.single_action_space``: the baseline a learnt policy must beat.

    A callable ``obs -> actions``, so it goes wherever a policy does (``podracer.evaluate``, a
    backtest, a renderer). It draws one action per row of ``obs`` (a batch of any size: an
    evaluation copy of the env with fewer sub-envs works too) on the env's device, from its own
    ``torch.Generator`` seeded with ``seed``, so its draws are reproducible and leave torch's
    global random state alone. Box spaces (bounded, floating): ``low + (high - low) * U[0, 1)``;
    Discrete: integers in ``[start, start + n)``.
    """

    def __init__(self, env: Any, seed: int | None = 0):
        space = getattr(env, "single_action_space", None)
        if space is None or not hasattr(env, "device"):
            raise TypeError(f"RandomPolicy needs a batched env with single_action_space and device "
                            f"(podracer.make_env), got {type(env).__name__}")
        self.space, self.device = space, torch.device(env.device)
        self.num_envs = int(getattr(env, "num_envs", 1))
        if isinstance(space, gym.spaces.Box):
            if not np.issubdtype(space.dtype, np.floating):
                raise TypeError(f"RandomPolicy supports floating Box action spaces, got dtype {space.dtype}")
            if not (np.isfinite(space.low).all() and np.isfinite(space.high).all()):
                raise ValueError(f"a uniform random policy needs a bounded action box, got {space}; clip the "
                                 f"actions to the range your env really accepts and write that range into the space")
            dtype = torch.float64 if space.dtype == np.float64 else torch.float32
            self.low = torch.as_tensor(space.low, dtype=dtype, device=self.device)
            self.high = torch.as_tensor(space.high, dtype=dtype, device=self.device)
        elif not isinstance(space, gym.spaces.Discrete):
            raise TypeError(f"RandomPolicy supports Box and Discrete action spaces, got {type(space).__name__}")
        self.generator = torch.Generator(device=self.device)
        self.seed(seed)

    def seed(self, seed: int | None) -> None:
        """Restart the draws from ``seed`` (``None``: a non-reproducible seed)."""
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(seed)

    def __call__(self, obs: Any) -> torch.Tensor:
        n = obs.shape[0] if isinstance(obs, torch.Tensor) else self.num_envs
        if isinstance(self.space, gym.spaces.Discrete):
            start = int(self.space.start)
            return torch.randint(start, start + int(self.space.n), (n,), generator=self.generator, device=self.device)
        u = torch.rand((n, *self.low.shape), generator=self.generator, dtype=self.low.dtype, device=self.device)
        return self.low + (self.high - self.low) * u

    def __repr__(self) -> str:
        return f"RandomPolicy({self.space}, device={self.device})"


@torch.no_grad()
def evaluate(policy: Any, env: Any, seed: int | None = 0, max_steps: int = 100_000) -> dict[str, float]:
    """Run each sub-env's first episode with the deterministic policy.

    Returns ``{"eval/return_mean", "eval/return_std", "eval/length_mean", "eval/episodes"}``;
    with ``num_envs`` sub-envs that is ``num_envs`` episodes, all started from ``reset(seed)``.
    """
    act = as_policy(policy)
    obs, _ = env.reset(seed=seed)
    n = env.num_envs
    running = torch.zeros(n, device=env.device)
    lengths = torch.zeros(n, device=env.device)
    finished = torch.zeros(n, dtype=torch.bool, device=env.device)
    returns = torch.zeros(n, device=env.device)
    final_len = torch.zeros(n, device=env.device)
    for _ in range(max_steps):
        obs, rewards, terminated, truncated, _ = env.step(act(obs))
        running += rewards * ~finished
        lengths += (~finished).float()
        done = (terminated | truncated) & ~finished
        returns = torch.where(done, running, returns)
        final_len = torch.where(done, lengths, final_len)
        finished |= done
        if bool(finished.all()):
            break
    else:
        raise RuntimeError(f"evaluation did not finish {n} episodes within {max_steps} steps")
    return {
        "eval/return_mean": returns.mean().item(),
        "eval/return_std": returns.std(unbiased=False).item(),
        "eval/length_mean": final_len.mean().item(),
        "eval/episodes": float(n),
    }
