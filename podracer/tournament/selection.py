"""Who a pod starts from, and how its hyperparameters change: tournament selection and PBT.

Selection (exploit) draws a parent from the top ``top_k`` entries of the board, either uniformly
(``"topk"``) or with probability ``softmax(z / temperature)`` over the standardised scores
``z = (score - mean) / std`` of those entries (``"softmax"``), so better entries are drawn more
often but the runner-up keeps a chance. Standardising makes ``temperature`` mean the same thing
whatever the reward scale.

Only the front of each lineage is drawn: an entry with a child on the board that scored higher
has been superseded (that child starts from its weights and has trained longer), so it is left
out. In PBT (Jaderberg et al. 2017, sec. 3) the population is each worker's latest model: an
old checkpoint is never exploited again. Without this rule a pod could restart from an entry
that one of its children had already beaten (softmax over a top 5 that still holds the previous
generation allows it; benchmarks/tournament_vs_single.py counted up to 1 such restart in 12
generations), redoing a generation of training: at a fixed budget of env steps that shortens
the lineages. The best entry is never superseded (a better child would rank above it), so the
pool is never empty.

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
    """Draw one parent among the best ``top_k`` of ``entries`` (which need not be sorted), superseded
    ones left out (see the module docstring)."""
    if not entries:
        raise ValueError("cannot select a parent from an empty leaderboard")
    if method not in SELECTIONS:
        raise ValueError(f"unknown selection {method!r}; use one of {SELECTIONS}")
    pool = sorted(superseded_removed(entries), key=lambda e: (-e.score, e.id))[:top_k]
    if method == "topk" or len(pool) == 1:
        return rng.choice(pool)
    scores = np.array([e.score for e in pool], dtype=np.float64)
    finite = scores[np.isfinite(scores)]
    scores = np.where(np.isfinite(scores), scores, finite.min() - 1.0 if finite.size else 0.0)  # diverged: last
    z = (scores - scores.mean()) / (scores.std() + 1e-8)
    logits = z / max(temperature, 1e-8)
    p = np.exp(logits - logits.max())
    return rng.choices(pool, weights=(p / p.sum()).tolist())[0]


def superseded_removed(entries: Sequence[Entry]) -> list[Entry]:
    """``entries`` without those that have a child among ``entries`` with a higher score."""
    score = {e.id: e.score for e in entries}
    beaten = {e.parent_id for e in entries if e.parent_id in score and e.score > score[e.parent_id]}
    return [e for e in entries if e.id not in beaten]


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
