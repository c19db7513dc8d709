"""The trading tournaments' fitness: the validation split backtested once, cut into windows, scored.

``WindowedFitness(scheme, score)`` is a ``podracer.tournament`` fitness (``fitness(agent, eval_env,
seed) -> FitnessResult``). It backtests the agent deterministically over the eval env's split
(``finance.backtest``: one account from the first day to the last), cuts the daily returns into
the validation windows of ``scheme`` and scores each with ``score`` (``finance.select_on``),
annualised like the backtest's metrics (``annualize=True``: a Sharpe ratio times the square root of
the bars per year, a mean return times the bars per year; the PSR and DSR are probabilities). The
entry's score is the mean over windows, ``score_std`` the spread across them, and the board keeps
the per-window scores and the daily returns: pods compare entries on the same windows (a paired
noise estimate) and the board's PBO and deflated Sharpe need no re-run
(``finance.trial_returns_from_leaderboard(board)``).

``finance`` registers it as ``"windowed"`` and makes it the default of its trading tasks
(``finance.presets``: ``fitness="auto"``, the ``TournamentConfig`` default, means
``DEFAULT_FITNESS`` for an eval env of task ``stock_trading`` or ``portfolio``); the mean eval
return stays available as ``fitness="return"``. ``docs/results/selection_power.md`` says why
windows and the Sharpe ratio, and why 4 windows on a validation split as short as the demo's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from podracer.tournament.fitness import FitnessResult
from finance.validation import SCORES, CombinatorialPurged, ConsecutiveWindows, SingleSplit, select_on

SCHEMES = {"windows": ConsecutiveWindows, "single": SingleSplit, "cpcv": CombinatorialPurged}
"""The validation schemes a ``WindowedFitness`` may cut the validation returns by, by name."""

# The trading tasks' fitness (fitness="auto"): the validation split cut into 4 equal consecutive
# windows (the demo's 2017-2018: half a year each), each scored by its annualised Sharpe ratio.
# Cutting one split adds no held-out data, so the count barely moves the pick; 4 gives the exploit
# rule's paired standard error 3 degrees of freedom, where 2 windows separate a leader that is
# not better 3x as often at exploit_margin=2 (docs/results/selection_power.md, "How many windows").
DEFAULT_FITNESS = {"name": "windowed", "scheme": "windows", "n_windows": 4, "score": "sharpe"}
"""What ``fitness="auto"`` means for the ``stock_trading`` and ``portfolio`` tasks."""

_ANNUAL_POWER = {"mean": 1.0, "sharpe": 0.5, "sharpe_lcb": 0.5}  # score x bars_per_year ** power; PSR, DSR: none


class WindowedFitness:
    """Score an agent on consecutive validation windows of its eval env's split (module doc).

    Args:
        scheme: ``"windows"`` (``ConsecutiveWindows``), ``"single"`` (``SingleSplit``) or
            ``"cpcv"`` (``CombinatorialPurged``: every group scored, groups averaged).
        score: one of ``finance.SCORES`` (``"sharpe"``: the Sharpe ratio of each window).
        annualize: scale each window's score to a year of the backtest's bars (module doc), as every
            Sharpe ratio the reports show is; ``False``: per-period, as ``finance.select_on`` gives it.
        **settings: the scheme's own (``n_windows``, ``window_size``; ``test_size``; ``n_groups``,
            ``n_test_groups``, ...). ``window_size=None`` (``"windows"``) and ``test_size=None``
            (``"single"``) fit the split: its days cut into ``n_windows`` equal windows, or all of them.
    """

    def __init__(self, scheme: str = "windows", score: str = "sharpe", annualize: bool = True, **settings: Any):
        if scheme not in SCHEMES:
            raise ValueError(f"unknown scheme {scheme!r}; use one of {sorted(SCHEMES)}")
        if score not in SCORES:
            raise ValueError(f"unknown score {score!r}; use one of {SCORES}")
        if not isinstance(annualize, bool):
            raise ValueError(f"annualize must be True or False, got {annualize!r}")
        self.scheme, self.score, self.annualize, self.settings = scheme, score, annualize, dict(settings)
        try:
            self.scheme_for(10**6)  # bad settings fail here, not after a generation of training
        except TypeError as e:
            raise ValueError(f"scheme {scheme!r} does not take {sorted(settings)} ({e})") from None

    def scheme_for(self, n_obs: int) -> Any:
        """The scheme over ``n_obs`` validation days, ``None`` sizes filled in from ``n_obs``."""
        settings = dict(self.settings)
        if self.scheme == "windows" and settings.get("window_size") is None:
            n_windows = settings.setdefault("n_windows", 4)
            # each window needs a day before it to have been trained on (ConsecutiveWindows)
            settings["window_size"] = (n_obs - 1) // n_windows if isinstance(n_windows, int) and n_windows > 0 else 0
        if self.scheme == "single" and settings.get("test_size") is None:
            settings["test_size"] = n_obs - 1
        scheme = SCHEMES[self.scheme](**settings)
        scheme.splits(max(n_obs, 2))  # its own checks: too few days, bad counts
        return scheme

    def __call__(self, agent: Any, eval_env: Any, seed: int | None = None) -> FitnessResult:
        """Backtest ``agent`` on ``eval_env``'s split and score it on the scheme's windows (``seed``
        is unused: the backtest is deterministic from the split's first day)."""
        from finance.backtest import backtest  # torch and the envs: only when scoring
        from finance.env import StockTradingVecEnv
        from finance.portfolio_env import PortfolioVecEnv

        if not isinstance(eval_env, (StockTradingVecEnv, PortfolioVecEnv)):
            raise TypeError(f"the windowed fitness backtests a trading env (finance.StockTradingVecEnv or "
                            f"PortfolioVecEnv), got {type(eval_env).__name__}: use fitness=None (the mean eval "
                            f"return) for other envs")
        result = backtest(agent, eval_env, name="fitness", baselines=False)
        returns = result.returns().fillna(0.0)
        try:
            scheme = self.scheme_for(len(returns))
        except ValueError as e:
            raise ValueError(f"the validation split has {len(returns)} daily returns, too few for {self!r}: {e}; "
                             f"use fewer or smaller windows, or a longer validation split") from None
        selection = select_on(returns.to_frame("agent"), scheme, self.score)
        scale = float(result.bars_per_year) ** _ANNUAL_POWER.get(self.score, 0.0) if self.annualize else 1.0
        windows = selection.window_scores[:, 0] * scale
        spread = float(windows.std(ddof=1)) if len(windows) > 1 else None
        return FitnessResult(float(selection.scores[0] * scale), spread, tuple(float(w) for w in windows),
                             tuple(float(r) for r in np.asarray(returns, dtype=np.float64)))

    def __repr__(self) -> str:
        settings = "".join(f", {k}={v!r}" for k, v in self.settings.items())
        annual = "" if self.annualize else ", annualize=False"
        return f"WindowedFitness(scheme={self.scheme!r}, score={self.score!r}{annual}{settings})"

    def describe(self, n_obs: int | None = None) -> str:
        """The score's units in words, for a report's or a plot's label: e.g. "annualised Sharpe
        ratio, mean of 4 consecutive windows of 125 days" (their length given ``n_obs`` returns)."""
        what = {"mean": "mean return", "sharpe": "Sharpe ratio", "sharpe_lcb": "95% lower bound of the Sharpe ratio",
                "psr": "probabilistic Sharpe ratio", "dsr": "deflated Sharpe ratio"}[self.score]
        if self.annualize and self.score in _ANNUAL_POWER:
            what = f"annualised {what}" if self.score != "mean" else "annualised mean return"
        if self.scheme == "windows":
            k = self.settings.get("n_windows", ConsecutiveWindows.n_windows)
            size = self.settings.get("window_size") or (self.scheme_for(n_obs).window_size if n_obs else None)
            return f"{what}, mean of {k} consecutive windows" + (f" of {size} days" if size else "")
        if self.scheme == "single":
            return f"{what} over the validation split"
        return f"{what}, mean over CPCV groups"
