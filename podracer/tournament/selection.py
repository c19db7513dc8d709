"""Who a pod starts from, and how its hyperparameters change: tournament selection and PBT.

Selection (exploit) draws a parent from the top ``top_k`` entries of the board, either uniformly
(``"topk"``) or with probability ``softmax(z / temperature)`` over the standardised scores
``z = (score - mean) / std`` of those entries (``"softmax"``), so better entries are drawn more
often but the runner-up keeps a chance. Standardising makes ``temperature`` mean the same thing
whatever the reward scale.

Mutation (explore) follows Population Based Training (Jaderberg et al. 2017, arXiv:1711.09846):
each mutable hyperparameter is multiplied by a factor drawn from ``factors`` (0.8 or 1.25), or,
with probability ``resample_prob``, redrawn from its declared bounds (log-uniform when both bounds
are positive, uniform otherwise). Results are clipped to the declared bounds; integer fields stay
integers.
"""

from __future__ import annotations

import math
import random
from typing import Any, Sequence

import numpy as np

from podracer.tournament.leaderboard import Entry

SELECTIONS = ("softmax", "topk")


def select_parent(entries: Sequence[Entry], rng: random.Random, method: str = "softmax", top_k: int = 5,
                  temperature: float = 1.0) -> Entry:
    """Draw one parent among the best ``top_k`` of ``entries`` (which need not be sorted)."""
    if not entries:
        raise ValueError("cannot select a parent from an empty leaderboard")
    if method not in SELECTIONS:
        raise ValueError(f"unknown selection {method!r}; use one of {SELECTIONS}")
    pool = sorted(entries, key=lambda e: (-e.score, e.id))[:top_k]
    if method == "topk" or len(pool) == 1:
        return rng.choice(pool)
    scores = np.array([e.score for e in pool], dtype=np.float64)
    finite = scores[np.isfinite(scores)]
    scores = np.where(np.isfinite(scores), scores, finite.min() - 1.0 if finite.size else 0.0)  # diverged: last
    z = (scores - scores.mean()) / (scores.std() + 1e-8)
    logits = z / max(temperature, 1e-8)
    p = np.exp(logits - logits.max())
    return rng.choices(pool, weights=(p / p.sum()).tolist())[0]


def mutate(hparams: dict[str, Any], bounds: dict[str, tuple[float, float]], rng: random.Random,
           factors: Sequence[float] = (0.8, 1.25), resample_prob: float = 0.1
           ) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """Perturb every hyperparameter in ``bounds``; return ``(new_hparams, changes)`` where
    ``changes`` maps each changed name to ``[old, new]`` (the lineage diff)."""
    new, changes = dict(hparams), {}
    for name, (low, high) in bounds.items():
        old = hparams[name]
        if rng.random() < resample_prob:
            if low > 0:
                value = math.exp(rng.uniform(math.log(low), math.log(high)))
            else:
                value = rng.uniform(low, high)
        else:
            value = old * rng.choice(list(factors))
        value = min(max(float(f"{value:.6g}"), low), high)  # 6 significant digits: readable in the board
        if isinstance(old, int) and not isinstance(old, bool):
            # round, then clip again: rounding could step just outside a fractional bound
            value = int(min(max(round(value), math.ceil(low)), math.floor(high)))
        if value != old:
            new[name] = value
            changes[name] = [old, value]
    return new, changes
