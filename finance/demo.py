"""The finance job behind ``make demo``: offline, on the bundled sample of real prices.

1. ``prepare_market``: 20 US stocks, indicators and turbulence, scaler fitted on 2005-2016;
   validation 2017-2018; test 2019-2022.
2. A tournament of PPO pods trains on the training years (one-year episodes from random days)
   and scores each generation on the validation years: the annualised Sharpe ratio averaged over
   4 consecutive half-year windows of 2017-2018 (``finance.DEFAULT_FITNESS``, the trading tasks'
   ``fitness="auto"``; docs/results/selection_power.md says why).
3. The best agent and the top-k ensemble are backtested on the test years beside equal-weight
   buy-and-hold, the S&P 500 and the minimum-variance portfolio, with the same costs; every
   Sharpe ratio gets a block-bootstrap confidence interval, and every strategy its excess return,
   information ratio, beta and alpha against equal weight.
4. Is any strategy distinguishable from equal weight: the Sharpe-difference test of each
   (Ledoit-Wolf HAC, Jobson-Korkie-Memmel) and Hansen's SPA test of the best of them.
5. Single-pod PPO with several seeds gives the spread of the test metrics.
6. How much was luck: the PSR and deflated Sharpe ratio of the tournament's pick given every
   entry it was picked from (and given the effective number of independent entries), and the
   probability of backtest overfitting (PBO) of picking the best entry or seed.
7. Walk-forward: the single-pod recipe retrained before each test year on the years before it
   only, beside the baselines refitted the same way, mean ± std over the seeds.

Writes ``runs/demo/report.md``, ``runs/demo/equity.png``, ``runs/demo/leaderboard.csv`` and prints
where they are. ``PODRACER_SIZE=full`` trains longer. Run: ``python -m finance.demo``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pandas as pd
import torch

import podracer
from podracer.tournament.fitness import EvalReturn, make_fitness
from finance.backtest import BacktestResult, backtest, compare, min_variance_weights
from finance.data import load_benchmark, load_prices
from finance.env import DEFAULT_EXECUTION
from finance.market import MarketData, prepare_market
from finance.overfitting import (SharpeInterval, bootstrap_sharpe_ci, deflated_sharpe_ratio, effective_trials,
                                 expected_max_sharpe, probabilistic_sharpe_ratio, probability_of_backtest_overfitting,
                                 trial_returns_from_leaderboard)
from finance.statistics import SPAResult, sharpe_difference_test, spa_test
from finance.walk_forward import RebalancePolicy, WalkForwardResult, walk_forward

# The agent settings are the library's "stock_trading" preset (finance/presets.py): its config,
# its sub-env count, and its step budget as the full-size single-pod run. The demo adds only sizes.
PRESET = podracer.get_preset("ppo", "stock_trading")
SIZES = {  # generation_steps, generations, single-pod steps, single-pod steps per walk-forward window
    "smoke": dict(generation_steps=16_384, generations=3, single_steps=65_536, walk_forward_steps=8_192),
    "full": dict(generation_steps=65_536, generations=6, single_steps=PRESET.total_steps,
                 walk_forward_steps=PRESET.total_steps // 2),  # half: 4 windows x seeds must fit in ~2 minutes
}
EPISODE_DAYS = 252  # one trading year per training episode
# Torch threads while the demo runs: small networks train fastest on one (two threads were 4x
# slower on a busy 2-core machine), and the numbers then do not depend on the machine's cores.
THREADS = 1

# Sharpe intervals: stationary block bootstrap, mean block n^(1/3) days (10 for the test years).
CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2_000
# Against equal weight (docs/statistics.md): the table's benchmark-relative columns, each strategy's
# Sharpe-difference test and the SPA test of the best of them (1,000 bootstrap resamples: p to about ±0.015).
COMPARISON_BASELINE = "equal_weight"
RELATIVE_COLUMNS = ("excess_return", "information_ratio", "beta", "alpha")
SPA_RESAMPLES = 1_000
SIGNIFICANCE = 0.05

# PBO: CSCV blocks of about three months (60 trading days), at most 16 (the paper's S): 16 on the
# test years, 8 on the validation years.
PBO_BLOCK_DAYS = 60

# Walk-forward over the test years: each year's agent trains on the 8 years before it (rolling),
# the last 2 of them held out to pick the checkpoint, as the single pod picks on 2017-2018.
WALK_FORWARD_TEST = ("2019-01-01", "2022-12-31")
WALK_FORWARD_TRAIN_DAYS = 8 * 252
WALK_FORWARD_VALID_DAYS = 2 * 252
WALK_FORWARD_TEST_WINDOW = "1Y"
WALK_FORWARD_WARMUP = 252  # bars before the first training window: warm indicators and turbulence


# ---------------------------------------------------------------------------- training
def train_env(market: MarketData, num_envs: int = PRESET.num_envs) -> Any:
    """Training accounts: one-year episodes from random days of the training years."""
    return market.env("train", num_envs, random_start=True, episode_length=EPISODE_DAYS, dtype=torch.float32)


def eval_env(market: MarketData, split: str = "valid") -> Any:
    """One deterministic account over the whole split, backtested to score each entry (``score_units``)."""
    return market.env(split, 1, dtype=torch.float32)


def run_tournament(market: MarketData, store: Path, pods: int, generation_steps: int, generations: int,
                   seed: int = 0, backend: str = "local", address: str | None = None) -> podracer.Tournament:
    # The market travels inside the partials: pickled to each pod (a Ray worker on another node
    # too), so no node needs the price files.
    tournament = podracer.Tournament(functools.partial(train_env, market), functools.partial(eval_env, market),
                                     agent="ppo", pods=pods, generation_steps=generation_steps,
                                     generations=generations, store=store, agent_config=dict(PRESET.config),
                                     seed=seed, threads_per_pod=1, backend=backend, address=address)
    tournament.run(progress="auto")
    return tournament


def score_units(tournament: podracer.Tournament, market: MarketData) -> str:
    """The board's ``score`` in words: the tournament's fitness over the validation years."""
    fitness = make_fitness(tournament.config.fitness)
    years = f"{market.close['valid'].index[0].year}-{market.close['valid'].index[-1].year}"
    if isinstance(fitness, EvalReturn):
        return f"% return over {years}"
    return f"{fitness.describe(len(market.close['valid']))}, {years}"


def single_pod(market: MarketData, steps: int, seed: int, verbose: bool = True) -> Any:
    """One PPO agent trained alone; the evaluation with the best validation score is kept."""
    env = train_env(market)
    agent = podracer.make_agent("ppo", env, seed=seed, verbose=verbose)  # task "stock_trading": the preset above
    best_score, best_state = -float("inf"), None
    for row in podracer.iterate_training(agent, env, steps, eval_env=eval_env(market), eval_every=steps // 8,
                                         seed=seed):
        if row.get("eval/return_mean", -float("inf")) > best_score:
            best_score, best_state = row["eval/return_mean"], agent.checkpoint()
    return type(agent).from_checkpoint(best_state)


# ---------------------------------------------------------------------------- Sharpe intervals
def sharpe_ci(result: BacktestResult) -> SharpeInterval:
    """The annualised Sharpe ratio's block-bootstrap interval (seeded: the same run, the same interval)."""
    return bootstrap_sharpe_ci(result.returns(), CONFIDENCE, BOOTSTRAP_RESAMPLES,
                               periods_per_year=result.bars_per_year)


def with_sharpe_ci(table: pd.DataFrame, results: list[BacktestResult]) -> pd.DataFrame:
    """``compare``'s table with ``sharpe_ci_low`` / ``sharpe_ci_high`` beside ``sharpe``."""
    by_name: dict[str, BacktestResult] = {}
    for r in results:
        for item in (r, *r.baselines.values()):
            by_name.setdefault(item.name, item)
    ci = pd.DataFrame([sharpe_ci(by_name[name]) for name in table.index], index=table.index)
    out = table.copy()
    at = out.columns.get_loc("sharpe") + 1
    out.insert(at, "sharpe_ci_high", ci["high"])
    out.insert(at, "sharpe_ci_low", ci["low"])
    return out


def with_relative_columns(table: pd.DataFrame, results: list[BacktestResult],
                          baseline: str = COMPARISON_BASELINE) -> pd.DataFrame:
    """The table with ``RELATIVE_COLUMNS`` against the first result's ``baseline``, after the rest."""
    relative = compare(*results, benchmark=baseline).loc[table.index, list(RELATIVE_COLUMNS)]
    return table.join(relative)


# ---------------------------------------------------------------------------- against equal weight
def comparison_table(results: list[BacktestResult], baseline: str = COMPARISON_BASELINE,
                     seed: int = 0) -> tuple[pd.DataFrame, SPAResult]:
    """Every strategy of ``results`` (and their baselines) against the first result's ``baseline``:
    the annual Sharpe ratios and their difference, the Ledoit-Wolf (HAC) and Jobson-Korkie-Memmel
    p-values of H0: same Sharpe ratio, the annual mean excess return; and the SPA test of the best."""
    base = results[0].baselines[baseline]
    others: dict[str, BacktestResult] = {}
    for r in results:
        for item in (r, *r.baselines.values()):
            if item.name != base.name:
                others.setdefault(item.name, item)
    bench, ppy = base.returns(), base.bars_per_year
    rows = {}
    for name, item in others.items():
        hac = sharpe_difference_test(item.returns(), bench, "hac", periods_per_year=ppy)
        jk = sharpe_difference_test(item.returns(), bench, "memmel", periods_per_year=ppy)
        rows[name] = {"sharpe": hac.sharpe_a, f"sharpe {base.name}": hac.sharpe_b, "difference": hac.difference,
                      "p (Ledoit-Wolf HAC)": hac.p_value, "p (Jobson-Korkie-Memmel)": jk.p_value,
                      "mean excess return (annual)": float((item.returns() - bench).mean() * ppy)}
    strategies = pd.DataFrame({name: item.returns() for name, item in others.items()})
    strategies = strategies.loc[:, (strategies.sub(bench, axis=0) != 0).any()]  # one equal to the baseline: not tested
    spa = spa_test(strategies, bench, reps=SPA_RESAMPLES, seed=seed)
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("strategy"), spa


def comparison_verdict(table: pd.DataFrame, spa: SPAResult, baseline: str = COMPARISON_BASELINE) -> str:
    """One paragraph, in words: is any strategy distinguishable from the baseline, and is the best better?"""
    p, diff = table["p (Ledoit-Wolf HAC)"], table["difference"]
    above = list(table.index[(p < SIGNIFICANCE) & (diff > 0)])
    below = list(table.index[(p < SIGNIFICANCE) & (diff < 0)])
    level = f"{SIGNIFICANCE:.0%} (two-sided, each test alone, before correcting for {len(p)} tests)"
    if above or below:
        parts = [f"{', '.join(names)} {side}" for names, side in ((above, "above"), (below, "below")) if names]
        single = (f"Sharpe ratio different from {baseline}'s at {level}: {'; '.join(parts)} it; the other "
                  f"{len(p) - len(above) - len(below)} are not distinguishable from it.")
    else:
        single = (f"No strategy's Sharpe ratio is distinguishable from {baseline}'s at {level}: the smallest p-value "
                  f"is {p.min():.3f} ({p.idxmin()}).")
    if spa.superior:
        conclusion = (f"StepM finds {', '.join(spa.superior)} better than {baseline}: **distinguishable from "
                      f"{baseline}**")
    else:
        conclusion = (f"StepM finds none better: **no strategy is shown better than {baseline}** over the test "
                      "years")
    return (f"{single} The best by mean return against {baseline}, {spa.best}, corrected for the search over "
            f"{len(spa.mean_excess)} strategies: Hansen's SPA p = {spa.pvalue:.3f}, White's Reality Check p = "
            f"{spa.reality_check_pvalue:.3f} ({spa.reps:,} stationary bootstrap resamples, mean block "
            f"{spa.block_length} day{'s' if spa.block_length != 1 else ''}). {conclusion}.")


def seed_table(results: list[BacktestResult]) -> pd.DataFrame:
    """Mean, spread and range of every metric over seeds."""
    table = pd.DataFrame([r.metrics() for r in results])
    return pd.DataFrame({"mean": table.mean(), "std": table.std(ddof=1), "min": table.min(), "max": table.max()})


def mean_std(values: pd.Series, fmt: str = "{:.3f}") -> str:
    """``mean ± std`` over seeds (ddof=1), or the value alone for one seed."""
    if len(values) < 2:
        return fmt.format(values.mean())
    return f"{fmt.format(values.mean())} ± {fmt.format(values.std(ddof=1))}"


# ---------------------------------------------------------------------------- overfitting guards
def pbo_splits(num_days: int) -> int:
    """An even number of CSCV blocks of about ``PBO_BLOCK_DAYS`` each, between 2 and 16."""
    s = min(16, num_days // PBO_BLOCK_DAYS)
    return max(2, s - s % 2)


def guard_row(trials: pd.DataFrame, pick: Any, periods_per_year: int) -> dict[str, Any]:
    """PSR and DSR of the ``pick`` column against all ``trials`` (dates x trials), and their PBO.

    Trial Sharpe ratios are per period, as the formulas want; a trial that never trades (flat
    returns) counts with Sharpe 0. Reported Sharpe ratios are annualised.
    """
    if trials.T.drop_duplicates().shape[0] < 2 or (trials.std() == 0).all():  # nothing to select among
        return {"trials": trials.shape[1], "pick": str(pick)}
    std = trials.std(ddof=1)
    sharpes = (trials.mean() / std.where(std > 0)).fillna(0.0)  # per period
    scale = math.sqrt(periods_per_year)
    pbo = probability_of_backtest_overfitting(trials, n_splits=pbo_splits(len(trials)))
    return {"trials": trials.shape[1], "pick": str(pick), "sharpe_pick": sharpes[pick] * scale,
            "sharpe_trials_std": sharpes.std(ddof=1) * scale,
            "sr0_best_of_n_lucky": expected_max_sharpe(trials.shape[1], float(sharpes.std(ddof=1))) * scale,
            "psr": probabilistic_sharpe_ratio(trials[pick]),
            "dsr": deflated_sharpe_ratio(trials[pick], trial_sharpes=sharpes),
            "effective_trials": effective_trials(trials),
            "dsr_effective": deflated_sharpe_ratio(trials[pick], "effective", trial_returns=trials),
            "pbo": pbo.pbo, "pbo_blocks": pbo.n_splits}


def best_by_sharpe(trials: pd.DataFrame) -> Any:
    return (trials.mean() / trials.std(ddof=1)).fillna(-np.inf).idxmax()


def overfitting_table(store: Path, market: MarketData, trial_sets: dict[str, list[BacktestResult]],
                      periods_per_year: int) -> pd.DataFrame:
    """One row per set of trials: the tournament's entries on the validation years (where the
    best was picked) and on the test years, then each set of seeds with two or more."""
    board = podracer.Leaderboard(store)
    pick = board.top(1)[0].id  # what tournament.best() loads: the best verified validation score
    rows = {}
    for split, label in (("valid", "validation 2017-2018 (the selection)"), ("test", "test 2019-2022")):
        trials = trial_returns_from_leaderboard(board, eval_env(market, split))
        rows[f"tournament entries, {label}"] = guard_row(trials, pick, periods_per_year)
    for name, results in trial_sets.items():
        if len(results) >= 2:
            trials = pd.DataFrame({r.name: r.returns() for r in results})
            rows[name] = guard_row(trials, best_by_sharpe(trials), periods_per_year)
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("trial set")  # keeps each column's dtype


# ---------------------------------------------------------------------------- walk-forward
def walk_forward_prices(tickers: list[str]) -> tuple[pd.DataFrame, pd.Series]:
    """Closes and the index from ``WALK_FORWARD_WARMUP + WALK_FORWARD_TRAIN_DAYS`` bars before the
    first test year to its last day, so that test window 0 starts on the test years' first day."""
    first, last = (pd.Timestamp(d) for d in WALK_FORWARD_TEST)
    prices = load_prices(tickers, end=last, source="sample")
    start = int(prices.index.searchsorted(first)) - WALK_FORWARD_TRAIN_DAYS - WALK_FORWARD_WARMUP
    if start < 0:
        raise ValueError(f"the sample starts {prices.index[0].date()}: too late for {WALK_FORWARD_TRAIN_DAYS} training "
                         f"days before {first.date()}; shorten WALK_FORWARD_TRAIN_DAYS")
    prices = prices.iloc[start:]
    return prices, load_benchmark(prices.index[0], last).reindex(prices.index).ffill()


def hold_out_validation(train: MarketData, days: int) -> MarketData:
    """The training window as a market: its last ``days`` become the ``valid`` split."""
    def cut(x: Any) -> dict[str, Any]:
        return {"train": x.iloc[:-days], "valid": x.iloc[-days:]}
    return MarketData(close=cut(train.close["train"]), features=cut(train.features["train"]),
                      turbulence=cut(train.turbulence["train"]), price_scale=train.price_scale)


def fit_single_pod(train: MarketData, steps: int, seed: int) -> Any:
    return single_pod(hold_out_validation(train, WALK_FORWARD_VALID_DAYS), steps, seed, verbose=False)


def fit_min_variance(train: MarketData) -> RebalancePolicy:
    return RebalancePolicy(train.env("train"), min_variance_weights(train.close["train"]))


def fit_equal_weight(train: MarketData) -> RebalancePolicy:
    return RebalancePolicy(train.env("train"))  # equal weights by default


def run_walk_forward(fit: Callable[[MarketData], Any], prices: pd.DataFrame, benchmark: pd.Series, name: str,
                     **env_kwargs: Any) -> WalkForwardResult:
    return walk_forward(fit, prices, WALK_FORWARD_TRAIN_DAYS, WALK_FORWARD_TEST_WINDOW, mode="rolling",
                        warmup=WALK_FORWARD_WARMUP, benchmark=benchmark, name=name, **env_kwargs)


def walk_forward_runs(market: MarketData, steps: int, seeds: int) -> tuple[list[WalkForwardResult],
                                                                             list[WalkForwardResult]]:
    """(PPO per seed, [min-variance refitted, equal weight rebalanced]) over the test years."""
    prices, benchmark = walk_forward_prices(market.tickers)
    ppo = [run_walk_forward(functools.partial(fit_single_pod, steps=steps, seed=s), prices, benchmark,
                            f"PPO walk-forward seed {s}", dtype=torch.float32) for s in range(seeds)]
    # A rebalance finishes on the window's first day (the env's default max_trade_shares spreads it).
    rebalanced = [run_walk_forward(fit, prices, benchmark, name, max_trade_shares=10**6)
                  for fit, name in ((fit_min_variance, "min-variance, refitted yearly"),
                                    (fit_equal_weight, "equal weight, rebalanced yearly"))]
    return ppo, rebalanced


def walk_forward_table(ppo: list[WalkForwardResult], rebalanced: list[WalkForwardResult]) -> pd.DataFrame:
    """Out-of-sample metrics: each PPO seed, their mean ± std, then the baselines (strings)."""
    table = with_sharpe_ci(compare(*ppo, *rebalanced, ppo[0].baselines), [*ppo, *rebalanced])
    shown = table.map(lambda x: f"{x:.3f}")
    seeds = table.loc[[r.name for r in ppo]]
    shown.loc[f"PPO walk-forward, mean ± std over {len(ppo)} seed(s)"] = [mean_std(seeds[c]) for c in table.columns]
    return shown.loc[[*seeds.index, shown.index[-1], *(r.name for r in rebalanced), *ppo[0].baselines]]


def walk_forward_windows(ppo: list[WalkForwardResult], rebalanced: list[WalkForwardResult]) -> pd.DataFrame:
    """Each test year's return: PPO mean ± std over seeds beside the refitted baselines."""
    w = ppo[0].windows
    out = pd.DataFrame({span: [f"{a:%Y-%m-%d}..{b:%Y-%m-%d}" for a, b in zip(w[f"{span}_start"], w[f"{span}_end"])]
                        for span in ("train", "test")})
    for metric, fmt in (("return", "{:.1%}"), ("sharpe", "{:.3f}")):
        per_seed = pd.DataFrame({r.name: r.windows[metric] for r in ppo})  # (windows, seeds)
        out[f"PPO {metric}"] = [mean_std(row, fmt) for _, row in per_seed.iterrows()]
    for r in rebalanced:
        out[f"{r.name.split(',')[0]} return"] = r.windows["return"].map("{:.1%}".format)
    return out


# ---------------------------------------------------------------------------- report
def report_text(size: str, elapsed: float, market: MarketData, table: pd.DataFrame, seeds: list[BacktestResult],
                guards: pd.DataFrame, wf_table: pd.DataFrame, wf_windows: pd.DataFrame, wf_steps: int,
                board: pd.DataFrame, comparison: pd.DataFrame, spa: SPAResult,
                execution: str = DEFAULT_EXECUTION, units: str = "% return over 2017-2018") -> str:
    pct = f"{CONFIDENCE:.0%}"
    return "\n".join([
        "# Podracer finance demo",
        "",
        f"Bundled sample of real prices (skfolio, BSD-3), {len(market.tickers)} US stocks; "
        f"size `{size}`; {elapsed:.0f} s with {torch.get_num_threads()} torch thread(s). "
        "Command: `make demo` (or `python -m finance.demo`).",
        "",
        (f"Fills: `execution=\"{execution}\"`, the default: each order fills at the close after the one its policy "
         "saw (a fill at that same close, `execution=\"close\"`, the default up to 1.1.0, is optimistic). "
         if execution == DEFAULT_EXECUTION else
         f"Fills: `execution=\"{execution}\"`" + (" (optimistic: each order fills at the close its policy has just "
                                                   "seen)" if execution == "close" else "") + ". ")
        + "Prices are back-adjusted closes of today's survivors (docs/trading_realism.md).",
        "",
        "## Splits", "", market.describe().to_markdown(), "",
        "## Test period (2019-2022): agents against the baselines, same costs (0.1%)", "",
        f"`sharpe_ci_low`..`sharpe_ci_high`: {pct} interval of the annual Sharpe ratio, stationary block bootstrap "
        f"(Politis & Romano 1994; {BOOTSTRAP_RESAMPLES:,} resamples, mean block n^(1/3) days, rounded). "
        "It measures the luck of the test years' path, not of training. "
        f"`{'`, `'.join(RELATIVE_COLUMNS)}`: against `{COMPARISON_BASELINE}` (annual excess return, information "
        "ratio, and Jensen's beta and annual alpha, risk-free rate 0).", "",
        table.to_markdown(floatfmt=".3f"), "",
        f"## Is any strategy distinguishable from {COMPARISON_BASELINE}?", "",
        f"Each strategy's Sharpe ratio against {COMPARISON_BASELINE}'s on the same days, H0: equal Sharpe ratios "
        "(two-sided): Ledoit & Wolf (2008), robust to fat tails and autocorrelation (HAC, Quadratic Spectral kernel), "
        "and Jobson & Korkie with Memmel's (2003) correction (IID normal returns). Then the best of them by mean "
        "return against it, corrected for having looked at all of them: Hansen's (2005) SPA, White's (2000) Reality "
        "Check, and Romano & Wolf's (2005) StepM for which beat it (`finance.spa_test`, on `arch`). Sharpe ratios "
        "annualised.", "",
        comparison.to_markdown(floatfmt=".3f"), "",
        comparison_verdict(comparison, spa), "",
        f"## Single-pod PPO over {len(seeds)} seeds (test period)", "",
        "Every number is deterministic for its seed; the spread is training luck.", "",
        seed_table(seeds).to_markdown(floatfmt=".3f"), "",
        "## How much was luck: PSR, deflated Sharpe ratio, PBO", "",
        "Trials are every leaderboard entry the tournament's pick (`tournament best`, the best validation "
        "score) was chosen from, backtested on each split; and the seeds of the single pod and of the "
        "walk-forward on the test years, where the pick is the best seed by Sharpe after the fact. "
        "`psr`: probability that the pick's true Sharpe ratio is above 0; `dsr`: above `sr0_best_of_n_lucky`, "
        "what the best of that many skill-less trials would show (Bailey & López de Prado 2014; 0.95 is the "
        "bar); `pbo`: share of CSCV splits of the dates into halves where the best trial on one half is at or "
        "below the median on the other (Bailey et al. 2017; 0.5 is a coin toss). On the validation years the "
        "DSR answers the textbook question (the pick is the best of N there); on the test years the pick was "
        "not chosen there, so the bar is conservative. Entries of one lineage are correlated: N overstates "
        "the independent trials; `effective_trials` estimates how many independent trials they are worth from "
        "the eigenvalues of their correlation matrix (Galwey 2009), and `dsr_effective` deflates for that many. "
        "Sharpe ratios annualised.", "",
        guards.to_markdown(floatfmt=".3f"), "",
        "## Walk-forward over the test years", "",
        f"The single-pod recipe retrained before each test year ({WALK_FORWARD_TEST_WINDOW}) on the "
        f"{WALK_FORWARD_TRAIN_DAYS} trading days before it (rolling), the last {WALK_FORWARD_VALID_DAYS} held out "
        f"to keep the best checkpoint; {wf_steps:,} env steps per window; feature scaler and price scale fitted "
        "on each training window; the account carries over between windows and pays for its rebalancing. "
        "Baselines walked forward the same way: long-only minimum variance refitted on each training "
        "window, equal weight rebalanced yearly; `equal_weight` and `index` buy and hold.", "",
        wf_table.to_markdown(), "",
        "Per test window:", "",
        wf_windows.to_markdown(), "",
        f"## Leaderboard (validation score: {units})", "",
        board.head(10).to_markdown(floatfmt=".3g"), "",
        "![equity](equity.png)", "",
    ])


def board_summary(board: pd.DataFrame) -> pd.DataFrame:
    """The leaderboard columns a reader wants: lineage, score, what changed, hyperparameters."""
    keep = ["parent_id", "generation", "pod", "score", "global_step", "changes"]
    return board[keep + [c for c in board.columns if c.startswith("hp/")]]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/demo", help="output folder (default runs/demo)")
    parser.add_argument("--pods", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=3, help="single-pod and walk-forward PPO seeds")
    parser.add_argument("--size", default=os.environ.get("PODRACER_SIZE", "smoke"), choices=sorted(SIZES))
    parser.add_argument("--backend", default="local", choices=["local", "ray"], help="where the pods run")
    parser.add_argument("--address", default=None, help='ray: cluster to join ("auto" on a cluster node)')
    return parser.parse_args(argv)


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run with ``n`` torch threads, then restore the caller's setting."""
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def main(argv: list[str] | None = None) -> Path:
    with torch_threads(THREADS):
        return run_demo(parse_args(argv))


def run_demo(args: argparse.Namespace) -> Path:
    sizes = SIZES[args.size]
    out = Path(args.out)
    store = out / "tournament"
    if store.exists():  # the demo is a fresh run each time; tournaments elsewhere resume
        shutil.rmtree(store)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()

    market = prepare_market()
    print(f"market: {len(market.tickers)} stocks\n{market.describe().to_string()}")

    print(f"\ntournament: {args.pods} PPO pods x {sizes['generations']} generations x "
          f"{sizes['generation_steps']:,} env steps")
    tournament = run_tournament(market, store, args.pods, sizes["generation_steps"], sizes["generations"],
                                backend=args.backend, address=args.address)
    board = tournament.board.to_frame()
    board.to_csv(out / "leaderboard.csv")  # the index is the entry id

    test_env = eval_env(market, "test")
    common = dict(benchmark=market.benchmark["test"], train_close=market.close["train"])
    best = backtest(tournament.best(), test_env, name="tournament best", **common)
    ensemble = backtest(tournament.ensemble(3), test_env, name="tournament ensemble (top 3)", baselines=False)

    print(f"\nsingle-pod PPO, {args.seeds} seeds x {sizes['single_steps']:,} env steps")
    seeds = [backtest(single_pod(market, sizes["single_steps"], s), test_env, name=f"PPO seed {s}", baselines=False)
             for s in range(args.seeds)]
    table = with_sharpe_ci(compare(best, ensemble, *seeds), [best, ensemble, *seeds])
    table = with_relative_columns(table, [best, ensemble, *seeds])
    comparison, spa = comparison_table([best, ensemble, *seeds])

    print(f"\nwalk-forward: {args.seeds} seeds x 4 test years x {sizes['walk_forward_steps']:,} env steps")
    ppo_walks, rebalanced = walk_forward_runs(market, sizes["walk_forward_steps"], args.seeds)

    print("\noverfitting guards: every leaderboard entry backtested on validation and test")
    guards = overfitting_table(store, market, {"single-pod seeds, test 2019-2022": seeds,
                                               "walk-forward seeds, 2019-2022": ppo_walks}, best.bars_per_year)

    fig = best.plot()
    fig.savefig(out / "equity.png", dpi=100)
    elapsed = time.perf_counter() - t0
    report = out / "report.md"
    walks = walk_forward_table(ppo_walks, rebalanced), walk_forward_windows(ppo_walks, rebalanced)
    report.write_text(report_text(args.size, elapsed, market, table, seeds, guards, *walks,
                                  sizes["walk_forward_steps"], board_summary(board), comparison, spa,
                                  execution=test_env.execution, units=score_units(tournament, market)))
    print(f"\n{table.to_string(float_format=lambda x: f'{x:.3f}')}")
    print(f"\n{comparison.to_string(float_format=lambda x: f'{x:.3f}')}\n{comparison_verdict(comparison, spa)}")
    print(f"\n{guards.to_string()}")
    print(f"\nreport: {report.resolve()}\nplot:   {(out / 'equity.png').resolve()}  ({elapsed:.0f} s)")
    return report


if __name__ == "__main__":
    main()
