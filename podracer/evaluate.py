"""Deterministic evaluation of any policy on a protocol env."""

from __future__ import annotations

from typing import Any, Callable

import torch


def as_policy(policy: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """An agent (deterministic ``act``) or any callable ``obs -> actions``."""
    if hasattr(policy, "act"):
        return lambda obs: policy.act(obs, deterministic=True)
    if callable(policy):
        return policy
    raise TypeError(f"expected an agent with .act or a callable obs -> actions, got {type(policy).__name__}")


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
