"""Who a pod starts from, and how its hyperparameters change: tournament selection and PBT.

Selection (exploit) draws a parent from the top ``top_k`` entries of the board, either uniformly
(``"topk"``) or with probability ``softmax(z / temperature)`` over the standardised scores
``z = (score - mean) / std`` of those entries (``"softmax"``), so better entries are drawn more
often but the runner-up keeps a chance. Standardising makes ``temperature`` mean the same thing
whatever the reward scale. Entries whose score is not a number (NaN, ±inf: a diverged run) are
drawn only when no entry has a finite score.

Only the front of each lineage is drawn: an entry with a child on the board that scored higher
has been superseded (that child starts from its weights and has trained longer), so it is left
out. In PBT (Jaderberg et al. 2017, sec. 3) the population is each worker's latest model: an
old checkpoint is never exploited again. Without this rule a pod could restart from an entry
that one of its children had already beaten (softmax over a top 5 that still holds the previous
generation allows it; benchmarks/tournament_vs_single.py counted up to 1 such restart in 12
generations), redoing a generation of training: at a fixed budget of env steps that shortens
the lineages. The best entry is never superseded (a better child would rank above it), so the
pool is never empty.

A pod whose own latest entry is among the best ``keep_top`` of that front skips selection and
mutation and trains on from it unchanged (``Pod.leading``; the ``explore_prob`` share of
generations that start from a fresh agent apply to it too): PBT's truncation selection, where
only members that lag behind copy a better one and perturb it. Without it every generation
re-draws and perturbs, and on Pendulum (benchmarks/tournament_vs_single.py) the hyperparameters
then drift away from a good setting faster than selection on noisy scores brings them back. A pod
also trains on when the best entry beats its own by no more than ``exploit_margin`` standard
errors of the difference (Welch, from the entries' ``score_std`` over the eval env's episodes):
PBT's t-test criterion. Early on, when every entry scores near the random policy, copying the
leader follows luck; on Pendulum it made 2 of 8 runs converge on a slow lineage.

Mutation (explore) follows Population Based Training (Jaderberg et al. 2017, arXiv:1711.09846):
each mutable hyperparameter is multiplied by a factor drawn from ``factors`` (0.8 or 1.25), or,
with probability ``resample_prob``, redrawn from its declared bounds (log-uniform when both bounds
are positive, uniform otherwise). Results are clipped to the declared bounds; integer fields stay
integers and move by at least one when perturbed (x1.25 of 1 or 2 would round back to itself).

A field may declare another scale with ``metadata={"mutable": (low, high), "mutable_scale": s}``:
``"log"`` (the default when ``low > 0``), ``"linear"`` (the default otherwise: a value of 0 stays
0 unless redrawn) or ``"one_minus"`` for settings just below 1 such as γ and λ: the factor and the
log-uniform redraw apply to ``1 - x`` (the inverse of the effective horizon ``1 / (1 - γ)``), so
γ = 0.99 moves to 0.992 or 0.9875, where x1.25 would have clipped it to the upper bound.
"""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Any, Sequence

import numpy as np

from podracer.agents.common import mutable_bounds
from podracer.tournament.leaderboard import Entry

SELECTIONS = ("softmax", "topk")
SCALES = ("log", "linear", "one_minus")


def select_parent(entries: Sequence[Entry], rng: random.Random, method: str = "softmax", top_k: int = 5,
                  temperature: float = 1.0) -> Entry:
    """Draw one parent among the best ``top_k`` of ``entries`` (which need not be sorted), superseded
    ones left out (see the module docstring)."""
    if not entries:
        raise ValueError("cannot select a parent from an empty leaderboard")
    if method not in SELECTIONS:
        raise ValueError(f"unknown selection {method!r}; use one of {SELECTIONS}")
    candidates = superseded_removed(entries)
    # A diverged entry (score NaN or ±inf: the board stores NaN as -inf) is no parent while any entry
    # scored a number: its weights are likely NaN too, and a placeholder score would flatten the softmax.
    finite = [e for e in candidates if math.isfinite(e.score)]
    pool = sorted(finite or candidates, key=lambda e: (-e.score if finite else 0.0, e.id))[:top_k]
    if method == "topk" or len(pool) == 1 or not finite:
        return rng.choice(pool)
    scores = np.array([e.score for e in pool], dtype=np.float64)
    z = (scores - scores.mean()) / (scores.std() + 1e-8)
    logits = z / max(temperature, 1e-8)
    p = np.exp(logits - logits.max())
    return rng.choices(pool, weights=(p / p.sum()).tolist())[0]


def superseded_removed(entries: Sequence[Entry]) -> list[Entry]:
    """``entries`` without those that have a child among ``entries`` with a higher score."""
    score = {e.id: e.score for e in entries}
    beaten = {e.parent_id for e in entries if e.parent_id in score and e.score > score[e.parent_id]}
    return [e for e in entries if e.id not in beaten]


def mutation_scales(config: Any) -> dict[str, str]:
    """``{field: scale}`` for the mutable fields of the dataclass ``config`` that declare a
    ``"mutable_scale"`` (the others follow their bounds, see ``mutate``)."""
    scales = {f.name: f.metadata["mutable_scale"] for f in dataclasses.fields(config)
              if "mutable" in f.metadata and "mutable_scale" in f.metadata}
    bad = {k: v for k, v in scales.items() if v not in SCALES}
    if bad:
        raise ValueError(f"unknown mutable_scale {bad} in {type(config).__name__}; use one of {SCALES}")
    bounds = mutable_bounds(config)
    not_positive = {k: bounds[k] for k, v in scales.items() if v == "log" and not bounds[k][0] > 0}
    if not_positive:  # else a redraw fails with "math domain error", at random during a run
        raise ValueError(f"mutable_scale 'log' needs bounds above 0, got {not_positive} in {type(config).__name__}; "
                         f"use 'linear' for a range that starts at 0")
    return scales


def mutate(hparams: dict[str, Any], bounds: dict[str, tuple[float, float]], rng: random.Random,
           factors: Sequence[float] = (0.8, 1.25), resample_prob: float = 0.1, scales: dict[str, str] | None = None
           ) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """Perturb every hyperparameter in ``bounds``; return ``(new_hparams, changes)`` where
    ``changes`` maps each changed name to ``[old, new]`` (the lineage diff). ``scales`` names the
    fields not on their default scale (``mutation_scales``). ``factors=()``: no perturbation, each
    hyperparameter is only redrawn with ``resample_prob`` (a fresh population's exploration)."""
    new, changes = dict(hparams), {}
    for name, (low, high) in bounds.items():
        old = hparams[name]
        scale = (scales or {}).get(name, "log" if low > 0 else "linear")
        if scale not in SCALES:
            raise ValueError(f"unknown scale {scale!r} for {name}; use one of {SCALES}")
        if scale == "one_minus" and not 0 <= low < high < 1:
            raise ValueError(f"{name}: the one_minus scale needs bounds 0 <= low < high < 1, got ({low}, {high})")
        resampled = rng.random() < resample_prob
        if resampled:
            value = redraw(low, high, scale, rng)
        elif not factors:  # redraws only: the others stay exactly as they are
            continue
        else:
            factor = rng.choice(list(factors))
            value = 1.0 - (1.0 - old) * factor if scale == "one_minus" else old * factor
        value = min(max(float(f"{value:.6g}"), low), high)  # 6 significant digits: readable in the board
        if isinstance(old, int) and not isinstance(old, bool):
            rounded = round(value)
            if not resampled and rounded == old and value != old:  # a perturbation always moves an integer
                rounded = old + (1 if value > old else -1)
            # clip again: rounding could step just outside a fractional bound
            value = int(min(max(rounded, math.ceil(low)), math.floor(high)))
        if value != old:
            new[name] = value
            changes[name] = [old, value]
    return new, changes


def redraw(low: float, high: float, scale: str, rng: random.Random) -> float:
    """A fresh value in ``[low, high]``: log-uniform on ``x`` (``"log"``) or on ``1 - x``
    (``"one_minus"``), else uniform."""
    if scale == "log":
        return math.exp(rng.uniform(math.log(low), math.log(high)))
    if scale == "one_minus":
        return 1.0 - math.exp(rng.uniform(math.log(1.0 - high), math.log(1.0 - low)))
    return rng.uniform(low, high)
