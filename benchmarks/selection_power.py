"""Selection power: how often does a validation scheme x score pick the truly best candidate?

On real prices nobody knows which candidate is truly best, so a selection rule can only be judged
by one noisy test draw. On markets with planted skill (``finance.planted``) the truth is known:
daily returns are ``ic * z + sqrt(1 - ic^2) * eps`` with ``z`` a persistent signal, and a
candidate's true Sharpe ratio follows from the data-generating process. For each signal strength,
validation scheme and score (``finance.validation``) this reports, over independent replications:

- ``P(best)``: the share of replications in which the pick is the candidate with the highest true
  Sharpe ratio (95% Wilson interval);
- ``rho true`` / ``rho test``: Spearman's rank correlation of the validation scores with the true
  Sharpe ratios and with the realised test Sharpe ratios (mean over replications, 95% interval);
- ``pick - random``: the pick's true (annual) Sharpe ratio minus the mean over candidates, i.e. what
  selection adds over a random pick, and ``test gain``: the same on the realised test Sharpe ratios;
- ``regret``: the best candidate's true Sharpe ratio minus the pick's (0 when the pick is the best).

Candidates, ``--mode recipes`` (default, seconds a replication): 10 recipes, each an OLS fit of
next-day returns on the signal and J random noise features (J distinct per recipe, 0 to 48; two
recipes in ten on average leave the signal out), pooled over 10 stocks. A recipe's position in a
stock is its fitted linear score, scaled to unit norm. More noise features fit more noise: the true
Sharpe ratio ``ic b_z sqrt(S) / sqrt(1 + ic^2 b_z^2)`` (``finance.planted.signal_sharpe`` with
loading b_z, noise variance 1 - b_z^2) falls with J, so recipes differ in skill as agents
of different hyperparameters do, and the training noise of a refit is part of each candidate.
Every scheme refits each recipe on its own training rows (purged, embargoed) and scores it on its
validation windows; the truth is the true Sharpe ratio of the recipe refitted on the whole
development period (what would be deployed), and the test its realised Sharpe ratio on 4 fresh years.

``--mode ppo``: PPO agents (seeds and learning rates) trained on a planted market
(``finance.planted.planted_market``) in ``StockTradingVecEnv``; they are fixed once trained, so the
schemes score their returns on the held-out validation years only. The truth is each agent's
Sharpe ratio on 40 fresh years of the same market; the test is its Sharpe ratio on the test years.

Schemes over a development period of 5 years (1,260 days): ``single`` (train on 4 years, validate
on the last 1: the tournament today), ``windows`` (4 walk-forward years), ``kfold`` (purged 5-fold:
CPCV with one test group) and ``cpcv`` (6 groups, 2 test groups: 15 splits, 5 paths; purge 1 day,
embargo 5 days). Run: ``.venv/bin/python benchmarks/selection_power.py`` (``--reps 100`` by default; ``--mode ppo``).
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import signal as scipy_signal
from scipy import stats

from finance.planted import PLANTED_STRENGTHS
from finance.validation import SCORES, CombinatorialPurged, ConsecutiveWindows, SingleSplit, select, select_on

YEAR = 252
DEV_DAYS, TEST_DAYS = 5 * YEAR, 4 * YEAR
STOCKS, CANDIDATES, MAX_NOISE, PERSISTENCE = 10, 10, 48, 0.9
SCHEMES = {"single": SingleSplit(YEAR), "windows": ConsecutiveWindows(4, YEAR),
           "kfold": CombinatorialPurged(5, 1, label_horizon=1, embargo=5, name="kfold"),
           "cpcv": CombinatorialPurged(6, 2, label_horizon=1, embargo=5)}


# ---------------------------------------------------------------------------- recipes on planted data
@dataclass
class Panel:
    """One replication's data: features x (T, S, F), column 0 the signal; noise eps (T, S)."""

    x: np.ndarray
    eps: np.ndarray

    def returns(self, ic: float) -> np.ndarray:
        """y[t, i]: the return from t to t+1, ``ic z[t, i] + sqrt(1 - ic^2) eps[t, i]`` (unit variance)."""
        return ic * self.x[:, :, 0] + math.sqrt(1.0 - ic**2) * self.eps


def make_panel(rng: np.random.Generator) -> Panel:
    """Signal and noise features as stationary AR(1)s with unit variance, as in ``finance.planted``."""
    T = DEV_DAYS + TEST_DAYS
    u = rng.standard_normal((T, STOCKS, 1 + MAX_NOISE))
    u[1:] *= math.sqrt(1.0 - PERSISTENCE**2)
    x = scipy_signal.lfilter([1.0], [1.0, -PERSISTENCE], u, axis=0)
    return Panel(x, rng.standard_normal((T, STOCKS)))


def make_recipes(rng: np.random.Generator) -> list[np.ndarray]:
    """Feature columns of each recipe: the signal (column 0) or not, and J distinct random noise features."""
    recipes = []
    for j in rng.choice(MAX_NOISE + 1, CANDIDATES, replace=False):
        use_signal = j == 0 or rng.random() > 0.2
        noise = 1 + rng.choice(MAX_NOISE, j, replace=False)
        recipes.append(np.sort(np.r_[[0] if use_signal else [], noise].astype(int)))
    return recipes


class Fitter:
    """OLS fits on any set of training rows from cumulative sums of X'X and X'y over days."""

    def __init__(self, x: np.ndarray):
        self.x = x
        self.gram = np.concatenate([np.zeros((1,) + (x.shape[2],) * 2), np.cumsum(x.transpose(0, 2, 1) @ x, 0)])

    def target(self, y: np.ndarray) -> "Fitter":
        """Fit these returns from now on (the X'X sums do not depend on them)."""
        self.cross = np.concatenate([np.zeros((1, self.x.shape[2])), np.cumsum(np.einsum("tsf,ts->tf", self.x, y), 0)])
        return self

    def fit(self, rows: np.ndarray, recipes: list[np.ndarray]) -> np.ndarray:
        """(F, K) unit-norm coefficients of each recipe fitted on ``rows``."""
        breaks = np.flatnonzero(np.diff(rows) != 1)
        starts, ends = np.r_[rows[0], rows[breaks + 1]], np.r_[rows[breaks], rows[-1]] + 1
        gram = (self.gram[ends] - self.gram[starts]).sum(0)
        cross = (self.cross[ends] - self.cross[starts]).sum(0)
        beta = np.zeros((gram.shape[0], len(recipes)))
        for k, cols in enumerate(recipes):
            b = np.linalg.solve(gram[np.ix_(cols, cols)], cross[cols])
            beta[cols, k] = b / np.linalg.norm(b)
        return beta


def portfolio_returns(x: np.ndarray, y: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """(n, K) daily returns of each recipe: the mean over stocks of position x beta times the return."""
    return np.einsum("tsk,ts->tk", x @ beta, y) / x.shape[1]


def true_sharpe(ic: float, beta: np.ndarray) -> np.ndarray:
    """Annual true Sharpe ratio of unit-norm positions (``finance.planted.signal_sharpe``, loading beta_z)."""
    bz = beta[0]
    return ic * bz * math.sqrt(STOCKS) / np.sqrt(1.0 + (ic * bz) ** 2) * math.sqrt(YEAR)


def annual_sharpe(r: np.ndarray) -> np.ndarray:
    return r.mean(0) / r.std(0, ddof=1) * math.sqrt(YEAR)


def recipe_replication(seed: int, strengths: dict[str, float]) -> list[dict[str, Any]]:
    """Every (strength, scheme, score) pick of one replication, with the truth and the test."""
    rng = np.random.default_rng(seed)
    panel, recipes = make_panel(rng), make_recipes(rng)
    dev, test = slice(0, DEV_DAYS), slice(DEV_DAYS, DEV_DAYS + TEST_DAYS - 1)  # the last day has no next return
    rows, fitter = [], Fitter(panel.x[dev])
    for strength, ic in strengths.items():
        y = panel.returns(ic)
        fitter.target(y[dev])
        deployed = fitter.fit(np.arange(DEV_DAYS), recipes)
        truth = true_sharpe(ic, deployed)
        tested = annual_sharpe(portfolio_returns(panel.x[test], y[test], deployed))
        for scheme_name, scheme in SCHEMES.items():
            windows, groups = [], []
            for split in scheme.splits(DEV_DAYS):
                beta = fitter.fit(split.train, recipes)
                windows += [portfolio_returns(panel.x[w], y[w], beta) for w in split.windows]
                groups += list(split.groups)
            for score in SCORES:
                sel = select(windows, score, groups)
                rows.append(outcome(strength, scheme_name, score, sel.scores, sel.pick, truth, tested))
    return rows


def outcome(strength: str, scheme: str, score: str, scores: np.ndarray, pick: int, truth: np.ndarray,
            tested: np.ndarray) -> dict[str, Any]:
    """One pick's record: is it the truly best, rank correlations, its gain over a random pick."""
    no_truth = np.ptp(truth) < 1e-9  # ic = 0: every candidate's true Sharpe ratio is 0, none is best
    return {"strength": strength, "scheme": scheme, "score": score,
            "best": math.nan if no_truth else float(pick == int(np.argmax(truth))),
            "rho_true": math.nan if no_truth else stats.spearmanr(scores, truth)[0],
            "rho_test": stats.spearmanr(scores, tested)[0],
            "true_gain": float(truth[pick] - truth.mean()), "test_gain": float(tested[pick] - tested.mean()),
            "regret": float(truth.max() - truth[pick])}


# ---------------------------------------------------------------------------- fixed candidates, one split cut k ways
# A tournament's agents are fixed once trained and scored on one validation split: cutting that
# split into more windows adds no held-out data, only a noise estimate (the paired per-window
# difference, Pod.leading's exploit rule). ``--mode split`` asks how many windows it should be cut
# into: recipes fitted once on the 3 years before the split, scored on the last VALID_SPANS days
# cut into k equal consecutive windows (k = 1: the whole split, the mean eval return's arithmetic).
VALID_SPANS = {"2y": 2 * YEAR, "1y": YEAR}  # the demo's validation split, and tournament_vs_single's
SPLIT_WINDOWS = (1, 2, 4, 8)
MARGIN = 2.0  # TournamentConfig.exploit_margin: standard errors of the paired difference


def split_replication(seed: int, strengths: dict[str, float]) -> list[dict[str, Any]]:
    """Every (strength, span, k) pick of one replication, with the paired rule's errors."""
    rng = np.random.default_rng(seed)
    panel, recipes = make_panel(rng), make_recipes(rng)
    rows, fitter, test = [], Fitter(panel.x), slice(DEV_DAYS, DEV_DAYS + TEST_DAYS - 1)
    for strength, ic in strengths.items():
        y = panel.returns(ic)
        fitter.target(y)
        for span, days in VALID_SPANS.items():
            valid = np.arange(DEV_DAYS - days, DEV_DAYS)
            train = np.arange(DEV_DAYS - days - 3 * YEAR, DEV_DAYS - days - 1)  # purged: the last label is valid's
            beta = fitter.fit(train, recipes)
            truth = true_sharpe(ic, beta)
            tested = annual_sharpe(portfolio_returns(panel.x[test], y[test], beta))
            returns = portfolio_returns(panel.x[valid], y[valid], beta)
            for k in SPLIT_WINDOWS:
                sel = select_on(returns, ConsecutiveWindows(k, (days - 1) // k), "sharpe")
                row = outcome(strength, f"{span} / {k}", f"{(days - 1) // k}d", sel.scores, sel.pick, truth, tested)
                rows.append({**row, **paired_errors(sel, truth)})
    return rows


def paired_errors(sel: Any, truth: np.ndarray) -> dict[str, float]:
    """How the exploit rule's test (a beats b by more than MARGIN paired standard errors) errs over
    every ordered pair: ``false_sep``, the share of pairs with a truly no better than b that it
    separates (a pod copies a leader that is not better); ``power``, the share it separates of the
    pairs where a is truly better by more than 0.5 (annual Sharpe ratio)."""
    if len(sel.window_scores) < 2:
        return {"false_sep": math.nan, "power": math.nan}
    n, false, worse, hits, better = len(truth), 0, 0, 0, 0
    for a in range(n):
        for b in range(n):
            if a == b:
                continue
            sep = sel.separated(a, b, MARGIN)
            if truth[a] <= truth[b] + 1e-12:
                worse += 1
                false += sep
            elif truth[a] - truth[b] > 0.5:
                better += 1
                hits += sep
    return {"false_sep": false / worse if worse else math.nan, "power": hits / better if better else math.nan}


# ---------------------------------------------------------------------------- PPO agents on a planted market
def ppo_replication(seed: int, strengths: dict[str, float], agents: int, steps: int) -> list[dict[str, Any]]:
    """Train ``agents`` PPO agents on one planted market per strength; score their held-out returns.

    No drift (``annual_drift=0``): holding the market earns nothing, so skill is the signal's use.
    Agents differ in seed and learning rate (log-uniform in [10^-3.5, 10^-2])."""
    import torch

    import podracer
    from finance.backtest import backtest
    from finance.planted import planted_market

    torch.set_num_threads(1)
    common = dict(tickers=5, indicators=(), annual_drift=0.0)
    rows = []
    for strength, ic in strengths.items():
        market = planted_market(ic, seed=seed, train=("2001-01-01", "2005-12-31"), valid=("2006-01-01", "2010-12-31"),
                                test=("2011-01-01", "2014-12-31"), **common)
        fresh = planted_market(ic, seed=seed + 10_000, train=("2001-01-01", "2004-12-31"), valid=None,
                               test=("2005-01-01", "2016-12-31"), **common)  # 12 fresh years
        env = market.env("train", num_envs=64, episode_length=YEAR, random_start=True, seed=seed)
        valid, tested, truth = {}, [], []
        for k in range(agents):
            lr = float(10 ** np.random.default_rng([seed, k]).uniform(-3.5, -2.0))
            agent = podracer.make_agent("ppo", env, seed=seed * 100 + k, verbose=False, learning_rate=lr)
            podracer.train(agent, env, steps, progress=False)
            valid[f"ppo{k}"] = backtest(agent, market.env("valid"), baselines=False).returns()
            test_returns = backtest(agent, market.env("test"), baselines=False).returns().to_numpy()
            tested.append(float(annual_sharpe(test_returns)))
            truth.append(true_skill(backtest(agent, fresh.env("test"), baselines=False), fresh.expected_return["test"]))
        values = pd.DataFrame(valid).to_numpy()
        truth, tested = np.array(truth), np.array(tested)
        for scheme_name, scheme in SCHEMES.items():
            windows, groups = [], []
            for split in scheme.splits(len(values)):  # fixed agents: only the validation windows are used
                windows += [values[w] for w in split.windows]
                groups += list(split.groups)
            for score in SCORES:
                sel = select(windows, score, groups)
                rows.append(outcome(strength, scheme_name, score, sel.scores, sel.pick, truth, tested))
    return rows


def true_skill(result: Any, expected_return: pd.DataFrame, positions_on: str = "decision") -> float:
    """Annual Sharpe ratio of an agent's run with its P&L replaced by its conditional mean.

    A ``StockTradingVecEnv`` backtest under ``execution="next_close"`` records the weights decided
    on day t on day t (``positions_on="decision"``); they are held from close t+1 to t+2, and
    E[that return | day t] = E[expected_return[t+1] | day t], so the mean of
    ``weights[t] . expected_return[t+1]`` is the agent's expected daily return, with the
    unpredictable part of the returns (most of the noise of a realised Sharpe ratio) averaged out.
    A ``PortfolioVecEnv`` backtest records them on the fill day t+1 (``positions_on="fill"``), so
    ``weights[t+1] . expected_return[t+1]``: the same sum, one row later.
    Costs, known once the trades are, are subtracted as paid; the result is divided by the realised
    standard deviation of the returns."""
    if positions_on not in ("decision", "fill"):
        raise ValueError(f"positions_on must be 'decision' (StockTradingVecEnv backtests) or 'fill' "
                         f"(PortfolioVecEnv backtests), got {positions_on!r}")
    weights = result.weights()
    held = weights.shift(1) if positions_on == "decision" else weights  # the weights held from close t to t+1
    pnl = (held * expected_return.reindex(weights.index)).sum(axis=1)
    pnl -= result.costs / result.account_value  # a fraction of the account, paid at each day's close
    return float(pnl.iloc[2:].mean() / result.returns().std(ddof=1) * math.sqrt(YEAR))


# ---------------------------------------------------------------------------- the table
def wilson(successes: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion."""
    if n == 0:
        return math.nan, math.nan
    p = successes / n
    centre = (p + z**2 / (2 * n)) / (1 + z**2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / (1 + z**2 / n)
    return centre - half, centre + half


def summarise(records: pd.DataFrame) -> pd.DataFrame:
    """One row per (strength, scheme, score): the means and 95% intervals over replications."""
    out = []
    for (strength, scheme, score), g in records.groupby(["strength", "scheme", "score"], sort=False):
        row: dict[str, Any] = {"strength": strength, "scheme": scheme, "score": score}
        best = g["best"].dropna()
        lo, hi = wilson(best.sum(), len(best))
        row["P(best)"] = f"{best.mean():.2f} [{lo:.2f}, {hi:.2f}]" if len(best) else "n/a (no best)"
        for col, label in (("rho_true", "rho true"), ("rho_test", "rho test"), ("true_gain", "pick - random"),
                           ("test_gain", "test gain"), ("regret", "regret"), ("false_sep", "false sep"),
                           ("power", "power")):
            if col not in g:  # the paired rule's columns: --mode split only
                continue
            v = g[col].dropna()
            half = 1.96 * v.std(ddof=1) / math.sqrt(len(v)) if len(v) > 1 else math.nan
            row[label] = f"{v.mean():+.2f} ± {half:.2f}" if len(v) else "n/a"
        row["_p"] = best.mean() if len(best) else math.nan
        out.append(row)
    return pd.DataFrame(out)


def recommend(table: pd.DataFrame) -> str:
    """The (scheme, score) with the highest P(best) averaged over the strengths that have a truth,
    the runners-up, and per strength the single split's P(best) beside it and beside the best of any."""
    ranked = table.dropna(subset=["_p"]).groupby(["scheme", "score"])["_p"].mean().sort_values(ascending=False)
    scheme, score = ranked.index[0]
    lines = [f"recommended: scheme={scheme}, score={score} (mean P(best) over strengths {ranked.iloc[0]:.2f}; "
             f"single split with sharpe: {ranked.get(('single', 'sharpe'), math.nan):.2f}, "
             f"with mean: {ranked.get(('single', 'mean'), math.nan):.2f})",
             "  runners-up: " + ", ".join(f"{a}/{b} {p:.2f}" for (a, b), p in ranked.iloc[1:6].items())]
    single = table[(table.scheme == "single") & (table.score == "mean")].dropna(subset=["_p"])
    for _, row in single.iterrows():
        best = table[(table.strength == row.strength)].sort_values("_p", ascending=False).iloc[0]
        rec = table[(table.strength == row.strength) & (table.scheme == scheme) & (table.score == score)].iloc[0]
        lines.append(f"  {row.strength}: single/mean P(best) {row._p:.2f}, {scheme}/{score} {rec._p:.2f}, "
                     f"best of any ({best.scheme}/{best.score}) {best._p:.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", choices=("recipes", "ppo", "split"), default="recipes",
                        help="split: fixed candidates on one validation split cut into 1, 2, 4 or 8 windows")
    parser.add_argument("--reps", type=int, default=None, help="replications (recipes, split: 100; ppo: 2)")
    parser.add_argument("--strengths", default=None,
                        help=f"comma-separated names from {list(PLANTED_STRENGTHS)} (ppo default: moderate,easy)")
    parser.add_argument("--agents", type=int, default=8, help="ppo: agents per market")
    parser.add_argument("--steps", type=int, default=32_768, help="ppo: env steps per agent")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--csv", default=None, help="write the per-replication records here")
    args = parser.parse_args(argv)
    names = args.strengths.split(",") if args.strengths else (
        ["moderate", "easy"] if args.mode == "ppo" else list(PLANTED_STRENGTHS))
    unknown = [n for n in names if n not in PLANTED_STRENGTHS]
    if unknown:
        parser.error(f"unknown strengths {unknown}; choose from {list(PLANTED_STRENGTHS)}")
    strengths = {n: PLANTED_STRENGTHS[n] for n in names}
    reps = args.reps or (2 if args.mode == "ppo" else 100)
    start, records = time.perf_counter(), []
    for rep in range(reps):
        seed = args.seed * 1_000_003 + rep
        if args.mode == "ppo":
            records += ppo_replication(seed, strengths, args.agents, args.steps)
        else:
            records += (recipe_replication if args.mode == "recipes" else split_replication)(seed, strengths)
    frame = pd.DataFrame(records)
    if args.csv:
        frame.to_csv(args.csv, index=False)
    table = summarise(frame)
    with pd.option_context("display.width", 200, "display.max_rows", 500, "display.max_colwidth", 40):
        print(table.drop(columns="_p").to_string(index=False))
    if args.mode != "split":  # split compares window counts of one scheme and score
        print(recommend(table))
    print(f"{args.mode}: {reps} replications, {len(strengths)} strengths, {time.perf_counter() - start:.0f} s")
    return table


if __name__ == "__main__":
    main()
