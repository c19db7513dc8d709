"""Choosing among candidates on held-out returns: validation schemes x scores.

A tournament, a sweep or a model search ends by picking one candidate from its validation
returns. How much that pick can be trusted depends on how the returns were held out (the scheme)
and what is computed from them (the score). ``benchmarks/selection_power.py`` measures both on
markets with planted skill (``finance.planted``).

Schemes cut ``n_obs`` rows (days) into splits, each a training set and one or more validation
windows:

- ``SingleSplit``: one window, the last ``test_size`` rows (what a tournament does today).
- ``ConsecutiveWindows``: the last ``n_windows * window_size`` rows as consecutive windows;
  each window's training set is every row before it (walk-forward, expanding).
- ``CombinatorialPurged``: combinatorial purged cross-validation (CPCV), López de Prado,
  *Advances in Financial Machine Learning* (2018), ch. 7.4 (purging and the embargo) and ch. 12.4
  (CPCV): the rows in ``n_groups`` consecutive groups, every choice of ``n_test_groups`` of them a
  split, tested on those groups and trained on the others. Training rows whose label spans
  (``label_horizon`` rows ahead) overlap a test group are purged, and ``embargo`` more rows after
  each test group are dropped, so a fit never sees the future of the rows it is scored on. Every
  group is tested ``n_test_groups * C(n_groups, n_test_groups) / n_groups`` times.

Training sets matter to candidates that are refitted per split (a recipe: hyperparameters); a
fixed, already-trained candidate has one return series and is scored on the windows only
(``select_on``). Windows of data it trained on are in-sample: score such candidates on held-out
rows only.

Scores, per window and candidate (``window_scores``; per-period, never annualised):

- ``"mean"``: the mean return (a tournament's episode return divided by its length);
- ``"sharpe"``: mean / std (ddof=1);
- ``"sharpe_lcb"``: the lower end of the one-sided ``confidence`` interval of the Sharpe ratio,
  SR - z sqrt((1 - γ3 SR + (γ4 - 1)/4 SR^2) / (n - 1)) (Mertens' standard error, as in the PSR);
- ``"psr"``: the probabilistic Sharpe ratio against 0 (``finance.probabilistic_sharpe_ratio``);
- ``"dsr"``: the deflated Sharpe ratio, the PSR against the expected best Sharpe ratio of
  ``num_trials`` skill-less trials with the candidates' spread (``finance.deflated_sharpe_ratio``).

``select`` turns the per-window scores into a ``Selection``: the score of each candidate is the
mean over windows (windows of one group averaged first), its standard error the spread across
windows (the scheme's own noise estimate), and the pick the highest score.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import numpy as np
import pandas as pd

from finance.data.checks import check_int
from finance.overfitting import expected_max_sharpe
from podracer.tournament.fitness import paired_difference

SCORES = ("mean", "sharpe", "sharpe_lcb", "psr", "dsr")
"""The scores a validation scheme can rank candidates by."""


# ---------------------------------------------------------------------------- schemes
@dataclass(frozen=True)
class Split:
    """One split of a scheme: rows to fit on, and validation windows (row indices, in time order)."""

    train: np.ndarray
    windows: tuple[np.ndarray, ...]
    groups: tuple[int, ...]  # each window's group: windows of one group are averaged before aggregating


class Scheme(Protocol):
    """A validation scheme: ``splits(n_obs)`` cuts ``n_obs`` rows into splits."""

    name: str

    def splits(self, n_obs: int) -> list[Split]: ...


def _purged_train(n_obs: int, tests: Sequence[np.ndarray], label_horizon: int, embargo: int,
                  before_only: bool = False) -> np.ndarray:
    """Rows not in ``tests``, less those within ``label_horizon`` rows before a test window (their
    labels reach into it) and within ``label_horizon + embargo`` rows after one (AFML 7.4)."""
    keep = np.ones(n_obs, dtype=bool)
    for rows in tests:
        lo, hi = int(rows[0]), int(rows[-1])
        keep[max(0, lo - label_horizon):hi + 1 + label_horizon + embargo] = False
        if before_only:
            keep[lo:] = False
    return np.flatnonzero(keep)


def _need(n_obs: int, rows: int, what: str) -> int:
    n_obs = check_int(n_obs, "n_obs", low=1)
    if n_obs < rows:
        raise ValueError(f"{what} needs at least {rows} rows, got n_obs={n_obs}; pass more data or smaller windows")
    return n_obs


@dataclass(frozen=True)
class SingleSplit:
    """One validation window, the last ``test_size`` rows; train on the rows before it (purged)."""

    test_size: int = 252
    label_horizon: int = 1
    name: str = "single"

    def splits(self, n_obs: int) -> list[Split]:
        n_obs = _need(n_obs, self.test_size + 1, f"SingleSplit(test_size={self.test_size})")
        test = np.arange(n_obs - self.test_size, n_obs)
        return [Split(_purged_train(n_obs, [test], self.label_horizon, 0, before_only=True), (test,), (0,))]


@dataclass(frozen=True)
class ConsecutiveWindows:
    """``n_windows`` consecutive windows of ``window_size`` rows at the end of the data; each
    trains on every row before it (walk-forward, expanding), purged by ``label_horizon``."""

    n_windows: int = 4
    window_size: int = 252
    label_horizon: int = 1
    name: str = "windows"

    def __post_init__(self) -> None:  # refused when built, not first when used; kept as plain ints
        object.__setattr__(self, "n_windows", check_int(self.n_windows, "n_windows", low=1))
        object.__setattr__(self, "window_size", check_int(self.window_size, "window_size", low=2))

    def splits(self, n_obs: int) -> list[Split]:
        k, w = self.n_windows, self.window_size
        n_obs = _need(n_obs, k * w + 1, f"ConsecutiveWindows({k} x {w})")
        out = []
        for j in range(k):
            test = np.arange(n_obs - (k - j) * w, n_obs - (k - j - 1) * w)
            out.append(Split(_purged_train(n_obs, [test], self.label_horizon, 0, before_only=True), (test,), (j,)))
        return out


@dataclass(frozen=True)
class CombinatorialPurged:
    """CPCV (AFML ch. 12.4): ``n_groups`` groups, each choice of ``n_test_groups`` a split; training
    rows purged by ``label_horizon`` around each test group and embargoed ``embargo`` rows after it."""

    n_groups: int = 6
    n_test_groups: int = 2
    label_horizon: int = 1
    embargo: int = 0
    name: str = "cpcv"

    @property
    def n_paths(self) -> int:
        """phi = (k / N) C(N, k): the backtest paths the splits assemble (AFML 12.4)."""
        return math.comb(self.n_groups, self.n_test_groups) * self.n_test_groups // self.n_groups

    def splits(self, n_obs: int) -> list[Split]:
        N, k = check_int(self.n_groups, "n_groups", low=2), check_int(self.n_test_groups, "n_test_groups", low=1)
        if k >= N:
            raise ValueError(f"n_test_groups must be below n_groups (something must be left to train on), got "
                             f"{k} of {N}")
        n_obs = _need(n_obs, 2 * N, f"CombinatorialPurged(n_groups={N})")
        groups = np.array_split(np.arange(n_obs), N)
        out = []
        for chosen in itertools.combinations(range(N), k):
            tests = [groups[g] for g in chosen]
            out.append(Split(_purged_train(n_obs, tests, self.label_horizon, self.embargo), tuple(tests), chosen))
        return out


# ---------------------------------------------------------------------------- scores
def _moments(r: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per column of (n, N) returns: Sharpe ratio (0 for a flat column), skewness, kurtosis, std."""
    std = r.std(axis=0, ddof=1)
    flat = ~(np.ptp(r, axis=0) > 0)  # exact: a constant column's std is round-off, not 0
    sr = np.where(flat, 0.0, r.mean(axis=0) / np.where(flat, 1.0, std))
    # The plain moment estimators of scipy.stats.skew and kurtosis(fisher=False), as the PSR uses;
    # written out because scipy's per-call overhead is 100x the arithmetic on a few hundred rows.
    d = r - r.mean(axis=0)
    m2 = np.where(flat, 1.0, (d**2).mean(axis=0))
    skew = np.where(flat, 0.0, (d**3).mean(axis=0) / m2**1.5)
    kurt = np.where(flat, 3.0, (d**4).mean(axis=0) / m2**2)
    return sr, skew, kurt, std


def _sharpe_se(sr: np.ndarray, skew: np.ndarray, kurt: np.ndarray, n: int) -> np.ndarray:
    """Mertens' standard error of the per-period Sharpe ratio, the PSR's denominator over sqrt(n - 1)."""
    var = np.maximum(1.0 - skew * sr + (kurt - 1.0) / 4.0 * sr**2, 1e-12)
    return np.sqrt(var / (n - 1))


def window_scores(returns: np.ndarray | pd.DataFrame, score: str = "sharpe", *, confidence: float = 0.95,
                  num_trials: int | None = None) -> np.ndarray:
    """One score per candidate of ``returns`` (n periods x N candidates) over one window.

    ``score`` is one of ``SCORES`` (module doc), higher is better. ``confidence`` sets the
    ``"sharpe_lcb"`` bound; ``num_trials`` is the N the ``"dsr"`` deflates for (default: the
    candidates' count; pass every trial run, e.g. the board's size). PSR and DSR agree with
    ``finance.probabilistic_sharpe_ratio`` and ``finance.deflated_sharpe_ratio``.
    """
    from scipy import stats  # on use: keeps `import finance` light
    if score not in SCORES:
        raise ValueError(f"unknown score {score!r}; choose from {SCORES}")
    r = np.asarray(returns, dtype=np.float64)
    if r.ndim == 1:
        r = r[:, None]
    if r.ndim != 2 or r.shape[0] < 3 or not np.isfinite(r).all():
        raise ValueError(f"returns must be a finite (periods x candidates) array with at least 3 periods, got shape "
                         f"{r.shape}{'' if np.isfinite(r).all() else ' with NaN'}; fill days without a position with 0")
    if score == "mean":
        return r.mean(axis=0)
    n = r.shape[0]
    sr, skew, kurt, _ = _moments(r)
    se = _sharpe_se(sr, skew, kurt, n)
    if score == "sharpe":
        return sr
    if score == "sharpe_lcb":
        if not 0.5 <= confidence < 1.0:
            raise ValueError(f"confidence must be in [0.5, 1) (0.95: a one-sided 95% bound), got {confidence}")
        return sr - stats.norm.ppf(confidence) * se
    benchmark = 0.0
    if score == "dsr":
        trials = r.shape[1] if num_trials is None else check_int(num_trials, "num_trials", low=1)
        spread = float(sr.std(ddof=1)) if r.shape[1] > 1 else 0.0
        benchmark = expected_max_sharpe(trials, spread)
    return stats.norm.cdf((sr - benchmark) / se)


# ---------------------------------------------------------------------------- selection
@dataclass(frozen=True)
class Selection:
    """The pick of one (scheme x score) selection and the evidence behind it.

    Attributes:
        pick: index of the chosen candidate (highest ``scores``; ties: the first).
        names: candidate names, in column order.
        scores: (N,) each candidate's score, the mean of ``window_scores`` over windows.
        window_scores: (W, N) per window (per group for CPCV), in time order of the groups.
        stderr: (N,) standard error of ``scores`` from their spread across windows; NaN with one window.
        score: the score's name.
    """

    pick: int
    names: tuple[str, ...]
    scores: np.ndarray
    window_scores: np.ndarray
    stderr: np.ndarray
    score: str

    @property
    def pick_name(self) -> str:
        return self.names[self.pick]

    def difference(self, a: int, b: int) -> tuple[float, float]:
        """Mean score difference of candidate ``a`` over ``b`` and its standard error from the paired
        per-window differences (NaN with one window: the scheme has no noise estimate)."""
        return paired_difference(self.window_scores[:, a].tolist(), self.window_scores[:, b].tolist())

    def separated(self, a: int, b: int, z: float = 2.0) -> bool:
        """Whether ``a`` beats ``b`` by more than ``z`` standard errors of the paired difference
        (False when the scheme has a single window and so no noise estimate)."""
        diff, se = self.difference(a, b)
        return bool(diff > z * se) if math.isfinite(se) else False

    def frame(self) -> pd.DataFrame:
        """Per-window scores as a DataFrame (windows x candidates), with ``score`` and ``stderr`` rows."""
        rows = pd.DataFrame(self.window_scores, columns=list(self.names))
        rows.index = [f"window {i}" for i in range(len(rows))]
        return pd.concat([rows, pd.DataFrame([self.scores, self.stderr], index=["score", "stderr"],
                                             columns=list(self.names))])


def select(windows: Sequence[np.ndarray | pd.DataFrame], score: str = "sharpe", groups: Sequence[int] | None = None,
           names: Sequence[str] | None = None, *, confidence: float = 0.95,
           num_trials: int | None = None) -> Selection:
    """Pick the candidate with the best mean ``score`` over validation ``windows``.

    Args:
        windows: per window, the candidates' returns (periods x N candidates, the same N columns).
        score: one of ``SCORES``.
        groups: a group id per window; windows of one group (CPCV tests each group in several
            splits) are averaged first, so each stretch of time counts once. Default: each window
            its own group.
        names: candidate names (default the DataFrame columns, else "0", "1", ...).
        confidence, num_trials: as in ``window_scores``.
    """
    if len(windows) == 0:
        raise ValueError("select needs at least one validation window of returns")
    if names is None:
        first = windows[0]
        names = [str(c) for c in first.columns] if isinstance(first, pd.DataFrame) else None
    per_window = np.stack([window_scores(w, score, confidence=confidence, num_trials=num_trials) for w in windows])
    N = per_window.shape[1]
    names = tuple(str(i) for i in range(N)) if names is None else tuple(names)
    if len(names) != N:
        raise ValueError(f"names has {len(names)} entries for {N} candidates")
    groups = list(range(len(windows))) if groups is None else list(groups)
    if len(groups) != len(windows):
        raise ValueError(f"groups has {len(groups)} ids for {len(windows)} windows; give one per window")
    ids = sorted(set(groups))
    by_group = np.stack([per_window[[i for i, g in enumerate(groups) if g == gid]].mean(axis=0) for gid in ids])
    scores = by_group.mean(axis=0)
    stderr = by_group.std(axis=0, ddof=1) / math.sqrt(len(ids)) if len(ids) > 1 else np.full(N, math.nan)
    return Selection(int(np.argmax(scores)), names, scores, by_group, stderr, score)


def select_on(returns: pd.DataFrame | np.ndarray, scheme: Any, score: str = "sharpe", **kwargs: Any) -> Selection:
    """``select`` for fixed candidates: ``returns`` (n_obs periods x N candidates) cut into the
    validation windows of ``scheme`` (a ``SingleSplit``, ``ConsecutiveWindows`` or
    ``CombinatorialPurged``); the training rows are not used. ``kwargs`` go to ``select``."""
    frame = returns if isinstance(returns, pd.DataFrame) else pd.DataFrame(np.asarray(returns, dtype=np.float64))
    if frame.ndim != 2:
        raise ValueError(f"returns must be (periods x candidates), got shape {np.shape(returns)}")
    values = frame.to_numpy(dtype=np.float64)
    windows, groups = [], []
    for split in scheme.splits(len(frame)):
        windows += [values[rows] for rows in split.windows]
        groups += list(split.groups)
    kwargs.setdefault("names", [str(c) for c in frame.columns])
    return select(windows, score, groups, **kwargs)
