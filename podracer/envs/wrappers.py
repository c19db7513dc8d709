"""Episode bookkeeping around any protocol env, kept out of the agents."""

from __future__ import annotations

from typing import Any

import torch


class RecordEpisodeStatistics:
    """Track each sub-env's running return and length; collect the finished episodes.

    Wraps any protocol env and forwards every other attribute to it. ``pop_finished()`` returns
    the returns and lengths of the episodes finished since the last call, as tensors; the train
    loop reads them for ``charts/episodic_return`` whatever the agent.
    """

    def __init__(self, env: Any):
        self.env = env
        self._returns = torch.zeros(env.num_envs, device=env.device)  # (N,)
        self._lengths = torch.zeros(env.num_envs, dtype=torch.long, device=env.device)  # (N,)
        self._finished_returns: list[torch.Tensor] = []
        self._finished_lengths: list[torch.Tensor] = []
        self._partial = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)  # (N,) started part-way

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def reset(self, seed: int | None = None, options: dict | None = None):
        self._returns.zero_()
        self._lengths.zero_()
        self._partial.zero_()
        return self.env.reset(seed=seed, options=options)

    def stagger_time_limits(self) -> torch.Tensor | None:
        """The env's ``stagger_time_limits`` (``TensorVecEnv.stagger_time_limits``; None, nothing
        done, for an env without it). The sub-envs it started part-way through their time limit
        are marked, and their first episode is left out of ``pop_finished`` when that shortened
        limit ends it: a partial episode's return is not comparable with a whole one's."""
        stagger = getattr(self.env, "stagger_time_limits", None)
        offsets = stagger() if stagger is not None else None
        if offsets is not None:
            self._partial = offsets > 0
        return offsets

    def step(self, actions: torch.Tensor):
        obs, rewards, terminated, truncated, info = self.env.step(actions)
        self._returns += rewards
        self._lengths += 1
        done = terminated | truncated
        # A staggered sub-env's first episode cut by its shortened time limit is not recorded; one
        # that terminated first is a whole episode (the limit never bound).
        record = done & ~(self._partial & truncated)
        self._partial = self._partial & ~done
        # Kept on device and unmasked (NaN / -1 where not recorded): no host sync on the hot path.
        self._finished_returns.append(torch.where(record, self._returns, torch.nan))
        self._finished_lengths.append(torch.where(record, self._lengths, -1))
        self._returns = torch.where(done, torch.zeros_like(self._returns), self._returns)
        self._lengths = torch.where(done, torch.zeros_like(self._lengths), self._lengths)
        return obs, rewards, terminated, truncated, info

    def pop_finished(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(returns, lengths) of episodes finished since the last call."""
        device = self._returns.device
        if not self._finished_returns:
            return torch.zeros(0, device=device), torch.zeros(0, dtype=torch.long, device=device)
        returns, lengths = torch.cat(self._finished_returns), torch.cat(self._finished_lengths)
        keep = lengths >= 0
        returns, lengths = returns[keep], lengths[keep]
        self._finished_returns.clear()
        self._finished_lengths.clear()
        return returns, lengths
