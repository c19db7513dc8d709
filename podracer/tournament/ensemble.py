"""A policy that combines several agents, and how to choose and weigh them.

``Ensemble(agents, combine=...)`` is used anywhere a policy is: ``ensemble(obs)``,
``ensemble.act(obs, deterministic=True)``, ``podracer.evaluate(ensemble, env)``, a domain's backtest.
How the members' actions are combined (``COMBINE``):

- ``"auto"`` (default): the mean action for Box spaces, the majority vote for Discrete ones;
- ``"mean"`` (Box), ``"median"`` (Box: per action dimension, the continuous analogue of a vote),
  ``"vote"`` (Discrete: majority, ties to the smallest action);
- ``"weighted"``: the weighted mean (Box) or weighted vote (Discrete) with ``weights``, for
  example ``score_weights`` of the members' validation scores.

Which members (``Tournament.ensemble(k, select=...)``): ``"top"``, the ``k`` best by score, or
``"diverse"``, a greedy choice (``select_diverse``) that starts from the best and adds the candidate
with the best score less ``penalty`` times its mean similarity to the members chosen so far. The
similarity is the correlation of their validation returns (``returns_similarity``) when the board
kept them, else how alike their deterministic actions are on a batch of observations
(``action_similarity``). Nothing here knows a domain: returns are plain arrays.
"""

from __future__ import annotations

from typing import Any, Sequence

import gymnasium as gym
import numpy as np
import pandas as pd
import torch

COMBINE = ("auto", "mean", "median", "vote", "weighted")
SELECT = ("top", "diverse")
DIVERSITY = ("auto", "returns", "actions")
WEIGHTING = ("softmax", "positive")
_BOX_ONLY, _DISCRETE_ONLY = ("mean", "median"), ("vote",)


def check_choice(what: str, value: Any, valid: Sequence[str]) -> str:
    """``value`` if it is one of ``valid``, else a ValueError listing them."""
    if value not in valid:
        raise ValueError(f"unknown {what} {value!r}; valid: {', '.join(map(repr, valid))}")
    return value


class Ensemble:
    """Several agents as one policy, deterministic by default: the mean action (Box) or the majority
    vote (Discrete) unless ``combine`` says otherwise (see ``COMBINE``). ``weights`` (one per agent,
    non-negative, normalised to sum to 1) are required by ``combine="weighted"`` and used only by it.
    ``entries`` optionally names the board entries the agents came from.
    ``Tournament.ensemble(k)`` builds one from the board."""

    def __init__(self, agents: Sequence[Any], combine: str = "auto", weights: Sequence[float] | None = None,
                 entries: Sequence[int] | None = None):
        if not agents:
            raise ValueError("an ensemble needs at least one agent; is the leaderboard empty?")
        self.agents = list(agents)
        self.action_space = self.agents[0].action_space
        self.observation_space = self.agents[0].observation_space
        self.device = self.agents[0].device
        for a in self.agents[1:]:
            if a.action_space != self.action_space:
                raise ValueError(f"ensemble members disagree on the action space: {a.action_space} vs "
                                 f"{self.action_space}")
        if not isinstance(self.action_space, (gym.spaces.Box, gym.spaces.Discrete)):
            raise ValueError(f"ensembles combine Box (mean) or Discrete (vote) actions, got {self.action_space}")
        self.combine = _check_combine(combine, self.action_space)
        self.weights = None if weights is None else _check_weights(weights, len(self.agents))
        if self.combine == "weighted" and self.weights is None:
            raise ValueError("combine='weighted' needs weights (one per agent), e.g. score_weights(scores)")
        self.entries = None if entries is None else [int(e) for e in entries]

    def __len__(self) -> int:
        return len(self.agents)

    def __repr__(self) -> str:
        return f"Ensemble({len(self)} x {type(self.agents[0]).__name__}, combine={self.combine!r})"

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        actions = torch.stack([a.act(obs, deterministic=deterministic) for a in self.agents])  # (K, N, ...)
        discrete = isinstance(self.action_space, gym.spaces.Discrete)
        if self.combine == "weighted":
            w = torch.as_tensor(self.weights, dtype=torch.float32, device=actions.device)
            if discrete:  # the action with the most weight behind it; a tie goes to the smallest
                votes = torch.nn.functional.one_hot(actions.long(), int(self.action_space.n)).float()
                return (w.view(-1, 1, 1) * votes).sum(0).argmax(-1).to(actions.dtype)
            # A convex combination of in-bounds actions is in bounds.
            return (w.view(-1, *([1] * (actions.dim() - 1))) * actions).sum(0)
        if discrete:
            # Majority vote per row; a tie goes to the smallest action (torch.mode's rule).
            return torch.mode(actions, dim=0).values
        if self.combine == "median":
            return actions.median(dim=0).values  # with an even K, the lower of the two middle actions
        # Each member's action is already within the bounds, so their mean is too.
        return actions.mean(dim=0)

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        return self.act(obs, deterministic=True)


def _check_combine(combine: str, space: gym.Space) -> str:
    check_choice("combine", combine, COMBINE)
    if isinstance(space, gym.spaces.Discrete) and combine in _BOX_ONLY:
        raise ValueError(f"combine={combine!r} averages continuous actions, but the members' actions are "
                         f"Discrete ({space}); use 'vote' (or 'auto') or 'weighted'")
    if isinstance(space, gym.spaces.Box) and combine in _DISCRETE_ONLY:
        raise ValueError(f"combine='vote' counts Discrete actions, but the members' actions are continuous "
                         f"({space}); use 'median' (the per-dimension analogue), 'mean' or 'weighted'")
    return combine


def _check_weights(weights: Sequence[float], n: int) -> np.ndarray:
    w = np.asarray(weights, dtype=float).reshape(-1)
    if len(w) != n:
        raise ValueError(f"got {len(w)} weights for {n} agents; give one weight per agent")
    if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError(f"weights must be finite, non-negative and not all zero, got {w.tolist()}")
    return w / w.sum()


def score_weights(scores: Sequence[float], method: str = "softmax", temperature: float = 1.0) -> np.ndarray:
    """Weights (summing to 1, ordered like ``scores``) that grow with the members' scores.

    ``"softmax"``: exp(s / (temperature * sd)) normalised, ``sd`` the scores' standard deviation, so
    the temperature is in units of their spread and any score scale (a Sharpe ratio of 1, an episode
    return of -200) weighs alike; equal scores give equal weights, a larger temperature flatter ones.
    ``"positive"``: proportional to max(score, 0), so a member that scored no better than nothing
    gets no weight (an error when none scored above 0). A score of -inf (a diverged member) gets 0.
    """
    check_choice("weighting", method, WEIGHTING)
    s = np.asarray(scores, dtype=float).reshape(-1)
    if len(s) == 0 or np.isnan(s).any():
        raise ValueError(f"score_weights needs one non-NaN score per member, got {s.tolist()}")
    finite = np.isfinite(s)
    if not finite.any():
        raise ValueError("no member has a finite score, so none can be weighted by it")
    if method == "positive":
        w = np.where(finite, np.clip(s, 0.0, None), 0.0)
        if w.sum() <= 0:
            raise ValueError(f"weighting='positive' needs a score above 0, got {s.tolist()}; use 'softmax'")
        return w / w.sum()
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    sd = s[finite].std()
    z = np.where(finite, (s - s[finite].max()) / (temperature * sd if sd > 0 else 1.0), -np.inf)
    w = np.exp(z)
    return w / w.sum()


def returns_similarity(returns: Any) -> np.ndarray:
    """The (n, n) Pearson correlation of n candidates' per-period returns (``returns`` is periods x n,
    NaN allowed: pairwise complete periods). A pair without one (a constant series) counts as 0."""
    r = np.asarray(returns, dtype=float)
    if r.ndim != 2 or r.shape[0] < 3:
        raise ValueError(f"returns must be a periods x candidates array with at least 3 periods, got shape {r.shape}")
    sim = pd.DataFrame(r).corr().to_numpy()  # pairwise complete periods
    sim = np.nan_to_num(sim, nan=0.0)
    np.fill_diagonal(sim, 1.0)
    return sim


@torch.no_grad()
def action_similarity(agents: Sequence[Any], obs: torch.Tensor) -> np.ndarray:
    """How alike the agents' deterministic actions are on ``obs`` (a batch for ``agent.act``): (n, n)
    values in [0, 1], 1 on the diagonal and 0 for the most different pair.

    Disagreement is the mean squared difference of the actions in units of the action range (Box;
    the actions' own spread where a bound is infinite) or the share of observations where the actions
    differ (Discrete); similarity is 1 - disagreement / the largest disagreement of any pair. Actions
    are what every agent exposes, so this works for any agent (the contests' KL divergence would need
    each agent's action distribution, which not every agent has).
    """
    if not len(agents):
        raise ValueError("action_similarity needs at least one agent")
    actions = torch.stack([a.act(obs, deterministic=True) for a in agents]).float()  # (n, N, ...)
    n = len(agents)
    flat = actions.reshape(n, actions.shape[1], -1)
    space = agents[0].action_space
    if isinstance(space, gym.spaces.Discrete):
        dis = (flat[:, None] != flat[None]).float().mean(dim=(2, 3))
    else:
        low, high = (torch.as_tensor(b, dtype=torch.float32, device=flat.device).reshape(-1) for b in
                     (space.low, space.high))
        span = high - low
        spread = flat.reshape(-1, flat.shape[-1]).std(0).clamp_min(1e-12)
        scale = torch.where(torch.isfinite(span) & (span > 0), span, spread)
        scaled = flat / scale
        dis = ((scaled[:, None] - scaled[None]) ** 2).mean(dim=(2, 3))
    dis = dis.cpu().numpy()
    top = dis.max()
    sim = 1.0 - dis / top if top > 0 else np.ones_like(dis)
    np.fill_diagonal(sim, 1.0)
    return sim


def select_diverse(scores: Sequence[float], similarity: Any, k: int, penalty: float = 1.0) -> list[int]:
    """Indices of ``k`` candidates chosen greedily for score and diversity, in the order chosen.

    The first is the best score. Each next one maximises z_j - penalty * mean_i sim[i, j] over the
    members i chosen so far, z the scores standardised over the candidates (so ``penalty`` is in
    units of the scores' spread, whatever their scale); ties go to the earlier candidate. ``penalty=0``
    is the top ``k`` by score; a larger penalty trades more score for less similarity.
    """
    s = np.asarray(scores, dtype=float).reshape(-1)
    sim = np.asarray(similarity, dtype=float)
    n = len(s)
    if sim.shape != (n, n):
        raise ValueError(f"similarity must be {n} x {n} for {n} scores, got shape {sim.shape}")
    if np.isnan(s).any():
        raise ValueError(f"scores must not be NaN, got {s.tolist()}")
    if not (isinstance(k, (int, np.integer)) and k >= 1):
        raise ValueError(f"k must be a positive integer, got {k!r}")
    if not (np.isfinite(penalty) and penalty >= 0):
        raise ValueError(f"penalty must be a finite number >= 0, got {penalty!r}")
    finite = np.isfinite(s)
    sd = s[finite].std() if finite.any() else 0.0
    z = np.where(finite, (s - (s[finite].mean() if finite.any() else 0.0)) / (sd if sd > 0 else 1.0), -np.inf)
    chosen = [int(np.argmax(z))]
    while len(chosen) < min(k, n):
        objective = z - penalty * sim[chosen].mean(axis=0)
        remaining = [j for j in range(n) if j not in chosen]
        chosen.append(max(remaining, key=lambda j: (objective[j], -j)))  # ties: the earlier candidate
    return chosen
