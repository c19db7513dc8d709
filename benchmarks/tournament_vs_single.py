"""Does a tournament pay off? Three arms at equal env steps, over several seeds, on held-out data.

PBT's promise is to find good hyperparameters from an untuned start. Each arm trains PPO for the
same total env steps ``pods * generations * generation_steps`` and keeps the agent with the best
validation score; that agent is then scored on data no arm selected on:

- ``default``: one pod with PPO's plain config defaults (``make_agent(..., preset=None)``), on as
  many sub-envs as the preset uses; it evaluates every ``generation_steps`` and keeps the best;
- ``preset``: one pod with the tuned preset (``podracer.get_preset("ppo", "pendulum")``, ``"stock_trading"``), the
  same way: what hand tuning buys;
- ``tournament``: ``pods`` pods from the plain defaults (``TournamentConfig`` defaults too): the
  first fresh agent keeps them, the others redraw some (``init_resample_prob``); population based
  training (``podracer.tournament.selection``) lets a pod that leads the board, or trails the best
  by no more than evaluation noise, train on (``keep_top``, ``exploit_margin``) and makes the others
  copy a better parent and mutate its learning rate, γ, λ,
  clip ε and entropy coefficient. ``--tournament KEY=VALUE`` changes a setting (an ablation).

Every arm selects on the same validation score, the tournament's fitness (``TournamentConfig.fitness``,
``"auto"`` unless ``--tournament fitness=...``): on Pendulum the mean return over 32 start states; on
stocks finance's default, the annualised Sharpe ratio averaged over 4 consecutive windows of the
validation year (``finance.DEFAULT_FITNESS``; ``--tournament fitness=return``: the validation year's
return in % of cash, the score before it). The single pods keep the evaluation with the best score,
the tournament its board's best entry; the ``valid`` column is that score, in those units.

Tasks:

- ``pendulum``: validation on 32 start states (seed 10,000), test on 64 other ones (seed 777);
  the test score is the mean return.
- ``stocks``: a rolling walk-forward (``finance.walk_forward``) on the bundled sample of 20 US
  stocks: each window trains on 3 years and validates on the next year (selection, the
  tournament's scores), then trades the following year out of sample; the account carries over
  between windows. Every arm trains afresh in every window. The test score is the Sharpe ratio
  of the stitched out-of-sample curve. PBO (Bailey et al. 2017, CSCV with 16 blocks) is computed
  over the trials = every (arm, seed) walk-forward, their daily out-of-sample returns: it asks
  whether picking the best of these runs on half the out-of-sample days picks an above-median
  one on the other half, i.e. whether the differences between runs persist or are noise. Then the
  tournament's out-of-sample returns against one pod's (each seed's ``preset`` and ``default``
  runs) and against equal-weight buy-and-hold on the same days: the Sharpe-difference test
  (Ledoit-Wolf HAC, ``finance.sharpe_difference_test``) per seed and on the seed-averaged returns,
  and Hansen's SPA test (``finance.spa_test``) of the tournament's seeds against each benchmark.
- ``planted`` (``--tasks planted``, not run by default): a market with planted skill
  (``finance.planted``; ``--strength``, default moderate, a daily information coefficient of 0.04):
  10 stocks, no drift, the signal the only feature; one market for every arm and seed, train
  2001-2004, select on 2005, test 2006-2009; 196,608 env steps per arm (``--quick``: 65,536). The
  env (``--planted-env``): ``portfolio``, the default, a ``PortfolioVecEnv`` whose action is the
  long-short target weights, observing the last day's returns and the signal, with no costs and
  64-day episodes, the ``portfolio`` preset with γ = 0.5 for the ``preset`` arm (``PLANTED_PRESET_CONFIG``;
  the preset alone equals PPO's defaults there); ``stock``, the stock env as
  ``finance.demo`` trains it (share trades, long-only, 0.1% costs, one-year episodes), in which PPO
  does not learn the signal at this budget (docs/results/selection_power.md). The
  test score is the Sharpe ratio on the test years; ``true`` is the pick's true Sharpe ratio, its
  expected daily return (weights times the conditional mean return, less costs) over 12 years of a
  fresh sample of the same market (``selection_power.true_skill``). The PBO and the tests against
  one pod and equal weight are those of ``stocks``, on the test years' daily returns, and the true
  Sharpe ratios are compared paired by seed.

Wall time is reported but is not the comparison: the tournament's pods are processes with one
torch thread each, sharing whatever cores the machine has free.

Run: ``.venv/bin/python benchmarks/tournament_vs_single.py`` (``--quick``: a few minutes;
``--seeds N``; ``--tasks pendulum``). On a busy machine the stock runs can go one process per arm
and seed, ``--tasks stocks --seeds 1 --first-seed S --arms A --save DIR``, then
``--combine DIR...`` for the table and tests (docs/results/finance.md).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import math
import os
import tempfile
from pathlib import Path
import time
from dataclasses import dataclass
from typing import Any, Callable

import pandas as pd
import scipy.stats
import torch
import yaml

import podracer
from finance.planted import PLANTED_STRENGTHS
from podracer.tournament import Tournament, TournamentConfig
from podracer.tournament.fitness import EvalReturn, fitness_for_task, make_fitness, resolve_auto

PODS = 4
ARMS = ("default", "preset", "tournament")
VALID_SEED, TEST_SEED = 10_000, 777


@dataclass(frozen=True)
class Budget:
    generation_steps: int  # a multiple of the rollout sizes of both configs, so no arm overshoots
    generations: int

    @property
    def total(self) -> int:
        return PODS * self.generations * self.generation_steps


# Pendulum, 96 sub-envs: defaults roll out 22 x 96 = 2,112 steps (4 per generation of 8,448), the
# preset 16 x 96 = 1,536 (it evaluates after the rollout that crosses each multiple of 8,448); the
# totals are multiples of both. Generations of 8,448 rather than 16,896: twice the selection
# rounds in the same steps (tournament test -183 vs -212, mean of 3 seeds; README). Stocks, 64
# sub-envs: both roll out 32 x 64 = 2,048.
BUDGETS = {
    "pendulum": {"quick": Budget(8_448, 6), "full": Budget(8_448, 12)},
    "stocks": {"quick": Budget(8_192, 2), "full": Budget(8_192, 4)},
    # One split, not 3 walk-forward windows: 1.5 times one window's steps, half a stock run's in all.
    "planted": {"quick": Budget(8_192, 2), "full": Budget(8_192, 6)},
}
STOCK_WINDOWS = {"quick": 2, "full": 3}


# ---------------------------------------------------------------------------- the arms
def train_single(make_env: Callable[[], Any], make_valid: Callable[[], Any], preset: str | None, budget: Budget,
                 seed: int, fitness: Any = "auto", config: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
    """One pod for ``budget.total`` env steps; returns the agent whose evaluation scored best by
    ``fitness`` (the tournament's setting, so that every arm selects on the same score) and run facts."""
    torch.set_num_threads(1)  # the same share of the machine as one tournament pod
    start = time.perf_counter()
    env, valid = make_env(), make_valid()
    score = make_fitness(resolve_auto(fitness, make_valid), valid)
    agent = podracer.make_agent("ppo", env, preset=preset, seed=seed, verbose=False, **(config or {}))
    best, best_ckpt, steps = -math.inf, None, 0
    for row in podracer.iterate_training(agent, env, budget.total, eval_env=valid, eval_every=budget.generation_steps,
                                         seed=seed, eval_seed=VALID_SEED):
        steps = int(row["global_step"])
        if "eval/return_mean" not in row:
            continue
        value = row["eval/return_mean"] if isinstance(score, EvalReturn) else score(agent, valid, VALID_SEED).score
        if value > best:
            best, best_ckpt = value, copy.deepcopy(agent.checkpoint())
    best_agent = type(agent).from_checkpoint(best_ckpt)
    return best_agent, {"env_steps": steps, "valid": best, "wall_s": time.perf_counter() - start,
                        "learning_rate": agent.config.learning_rate, "gamma": agent.config.gamma}


def train_tournament(make_env: Callable[[], Any], make_valid: Callable[[], Any], budget: Budget, seed: int,
                     **options: Any) -> tuple[Any, dict[str, Any]]:
    """``PODS`` pods from the plain defaults (``preset=None``); returns the board's best agent."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="podracer-tvs-") as store:
        t = Tournament(make_env, make_valid, agent="ppo", pods=PODS, generations=budget.generations,
                       generation_steps=budget.generation_steps, store=store, threads_per_pod=1, seed=seed,
                       eval_seed=VALID_SEED, preset=None, **options)
        t.run(progress=None)
        torch.set_num_threads(1)
        frame = t.board.to_frame()
        best = t.best()
    trained = frame["global_step"] - frame["parent_id"].map(frame["global_step"]).fillna(0)  # per generation
    top = frame.sort_values("score", ascending=False).iloc[0]
    return best, {"env_steps": int(trained.sum()), "valid": float(top["score"]), "wall_s": time.perf_counter() - start,
                  "learning_rate": float(top["hp/learning_rate"]), "gamma": float(top.get("hp/gamma", math.nan)),
                  "best_generation": int(top["generation"]),
                  "stale_starts": stale_starts(frame)}


def stale_starts(frame: pd.DataFrame) -> int:
    """Generations that started from a parent already beaten by one of its children on the board
    (that child had been submitted before this generation started): a generation of training redone."""
    start = frame["created_at"] - pd.to_timedelta(frame["wall_time"], unit="s")
    count = 0
    for eid, row in frame[frame["parent_id"].notna()].iterrows():
        siblings = frame[(frame["parent_id"] == row["parent_id"]) & (frame.index != eid)]
        better = siblings["score"] > frame.loc[int(row["parent_id"]), "score"]
        count += bool((better & (siblings["created_at"] < start[eid])).any())
    return count


def train_arm(arm: str, make_env: Callable[[], Any], make_valid: Callable[[], Any], preset: str, budget: Budget,
              seed: int, preset_config: dict[str, Any] | None = None, **options: Any) -> tuple[Any, dict[str, Any]]:
    """Train ``arm``; ``preset_config`` overrides settings of the ``preset`` arm's preset (hand tuning)."""
    if arm == "tournament":
        return train_tournament(make_env, make_valid, budget, seed, **options)
    return train_single(make_env, make_valid, preset if arm == "preset" else None, budget, seed,
                        options.get("fitness", "auto"), preset_config if arm == "preset" else None)


# ---------------------------------------------------------------------------- Pendulum
PENDULUM_ENVS = podracer.get_preset("ppo", "pendulum").num_envs  # 96, for every arm


def pendulum(size: str, seeds: int, arms: tuple[str, ...] = ARMS, **options: Any) -> pd.DataFrame:
    budget = BUDGETS["pendulum"][size]
    make_env = functools.partial(podracer.make_env, "pendulum", num_envs=PENDULUM_ENVS)
    make_valid = functools.partial(podracer.make_env, "pendulum", num_envs=32)
    rows = []
    for seed in range(seeds):
        for arm in arms:
            agent, facts = train_arm(arm, make_env, make_valid, "pendulum", budget, seed, **options)
            test = podracer.evaluate(agent, podracer.make_env("pendulum", 64), seed=TEST_SEED)["eval/return_mean"]
            rows.append({"task": "pendulum", "arm": arm, "seed": seed, "test": test, **facts})
            print(_row(rows[-1]), flush=True)
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------- stocks, walk-forward
TRAIN_DAYS, VALID_DAYS, TEST_DAYS = 3 * 252, 252, 252  # per window: fit 3 years, select on 1, trade 1


def stock_prices(windows: int) -> pd.DataFrame:
    """The bundled sample from 2015, cut so that exactly ``windows`` test windows fit."""
    from finance.data import SAMPLE_TICKERS, load_prices
    from finance.features import DEFAULT_INDICATORS, warmup_days

    prices = load_prices(list(SAMPLE_TICKERS), "2015-01-01", "2022-12-31", source="sample")
    rows = warmup_days(DEFAULT_INDICATORS) + TRAIN_DAYS + VALID_DAYS + windows * TEST_DAYS + 1  # +1: the last mark
    if len(prices) < rows:
        raise ValueError(f"the sample has {len(prices)} days from 2015, {rows} needed for {windows} windows")
    return prices.iloc[:rows]


def with_validation(train: Any) -> Any:
    """The window's ``MarketData`` split in two: the first years to train on, the last to select on."""
    from finance.market import MarketData

    def cut(x: pd.DataFrame | pd.Series) -> dict[str, Any]:
        return {"train": x.iloc[:-VALID_DAYS], "valid": x.iloc[-VALID_DAYS:]}

    return MarketData(close=cut(train.close["train"]), features=cut(train.features["train"]),
                      turbulence=cut(train.turbulence["train"]), price_scale=train.price_scale)


def stock_fit(arm: str, seed: int, budget: Budget, facts: list[dict[str, Any]], options: dict[str, Any]
              ) -> Callable[[Any], Any]:
    from finance import demo

    def fit(train: Any) -> Any:
        market = with_validation(train)
        # Picklable partials, as in finance.demo: the market travels to each pod.
        make_env, make_valid = functools.partial(demo.train_env, market), functools.partial(demo.eval_env, market)
        agent, window = train_arm(arm, make_env, make_valid, "stock_trading", budget, seed, **options)
        facts.append(window)
        return agent

    return fit


def stocks(size: str, seeds: int, arms: tuple[str, ...] = ARMS, first_seed: int = 0, **options: Any
           ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rows per (arm, seed), and their daily out-of-sample returns with equal weight's beside them
    (column ``equal_weight``: buy-and-hold on the same days, the same for every run)."""
    from finance.walk_forward import walk_forward

    budget = BUDGETS["stocks"][size]
    prices = stock_prices(STOCK_WINDOWS[size])
    rows, trials = [], {}
    for seed in range(first_seed, first_seed + seeds):
        for arm in arms:
            facts: list[dict[str, Any]] = []
            result = walk_forward(stock_fit(arm, seed, budget, facts, options), prices,
                                  train_window=TRAIN_DAYS + VALID_DAYS, test_window=TEST_DAYS, dtype=torch.float32,
                                  name=f"{arm} {seed}")
            m = result.metrics()
            summed = pd.DataFrame(facts)
            rows.append({"task": "stocks", "arm": arm, "seed": seed, "test": m["sharpe"],
                         "oos_return_pct": 100 * m["cumulative_return"], "env_steps": int(summed["env_steps"].sum()),
                         "valid": summed["valid"].mean(), "wall_s": summed["wall_s"].sum(),
                         "learning_rate": summed["learning_rate"].mean(),
                         "stale_starts": summed["stale_starts"].sum() if "stale_starts" in summed else math.nan})
            trials[f"{arm} {seed}"] = result.returns()
            print(_row(rows[-1]), flush=True)
    trials["equal_weight"] = result.baselines["equal_weight"].returns()  # the same out-of-sample days for every run
    return pd.DataFrame(rows), pd.DataFrame(trials).dropna()


def against(trials: pd.DataFrame, equal_weight: pd.Series) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The tournament's out-of-sample returns against one pod's and against equal weight.

    Returns (Sharpe-difference tests, SPA tests). The first has a row per (seed or "mean over seeds",
    benchmark): the annual Sharpe ratios, their difference and the Ledoit-Wolf HAC p-value (two-sided).
    "mean over seeds" compares the seed-averaged daily returns (an arm's expected run, with less
    training noise). The second tests, per benchmark, whether the best tournament seed beats it by
    mean return once the search over seeds is counted (Hansen's SPA, White's Reality Check)."""
    from finance.statistics import sharpe_difference_test, spa_test

    seeds = [c.split()[1] for c in trials if c.startswith("tournament ")]
    arms = [a for a in ("preset", "default") if all(f"{a} {s}" in trials for s in seeds)]
    runs = {s: {a: trials[f"{a} {s}"] for a in ("tournament", *arms)} for s in seeds}
    runs["mean over seeds"] = {a: trials[[f"{a} {s}" for s in seeds]].mean(axis=1) for a in ("tournament", *arms)}
    rows = []
    for seed, arm in runs.items():
        for name, bench in [*((f"one pod ({a})", arm[a]) for a in arms), ("equal weight", equal_weight)]:
            test = sharpe_difference_test(arm["tournament"], bench, "hac", periods_per_year=252)
            rows.append({"seed": seed, "against": name, "sharpe tournament": test.sharpe_a, "sharpe other": test.sharpe_b,
                         "difference": test.difference, "p (HAC)": test.p_value})
    tournament = trials[[f"tournament {s}" for s in seeds]]
    spa = []
    for name, bench in [*((f"one pod ({a}), mean over seeds", runs["mean over seeds"][a]) for a in arms),
                        ("equal weight", equal_weight)]:
        r = spa_test(tournament, bench, reps=1_000, seed=0)
        spa.append({"against": name, "best seed": r.best, "SPA p": r.pvalue, "Reality Check p": r.reality_check_pvalue,
                    "StepM better": ", ".join(r.superior) or "none"})
    return pd.DataFrame(rows), pd.DataFrame(spa)


# ---------------------------------------------------------------------------- a planted market
# Where the true skill is known (finance.planted): 10 stocks whose next-day return a persistent
# signal predicts with a daily information coefficient ``ic``, no drift (holding the market earns
# nothing, so skill is the signal's use), the signal as the only feature. One market for every arm
# and seed: train 4 years, select on the next one (as the walk-forward's windows), test on 4.
PLANTED = dict(tickers=10, indicators=(), annual_drift=0.0)
PLANTED_SPLITS = dict(train=("2001-01-01", "2004-12-31"), valid=("2005-01-01", "2005-12-31"),
                      test=("2006-01-01", "2009-12-31"))
PLANTED_FRESH_SEED = 10_000  # a fresh sample of the same market: 12 years on which to measure true skill
# The planted task's env (--planted-env). In the stock env the action is a share trade, so a position
# is the running sum of actions, capped by max_trade_shares and the cash of a long-only account,
# and 0.1% costs eat most of a signal with a 7-day half-life: PPO reached a true Sharpe ratio of
# 0.1 on the easy market. Target weights make "hold w = f(signal)" a direct map; with shorts, no
# costs and 64-day episodes PPO learns the easy signal within this budget (1.7 of its 4.3) and a
# fifth of the moderate one (0.35 of 1.73) (docs/results/selection_power.md).
PLANTED_ENVS = ("portfolio", "stock")
PLANTED_PORTFOLIO = dict(window=1, long_short=True, cost_pct=0.0, dtype=torch.float32)  # every split's env
PLANTED_EPISODE_DAYS = 64  # training episodes; a next-day signal needs no long credit assignment
# The preset arm is what hand tuning buys. The portfolio preset equals PPO's defaults on 64 accounts, and the
# one setting found to help here is γ: 0.5 against 0.99 doubled the true Sharpe ratio on moderate.
PLANTED_PRESET_CONFIG = {"portfolio": {"gamma": 0.5}, "stock": {}}


def planted_markets(strength: str) -> tuple[Any, Any]:
    """The planted market the arms train, select and test on, and a fresh sample for the truth."""
    from finance.planted import planted_market

    ic = PLANTED_STRENGTHS[strength]
    market = planted_market(ic, seed=0, **PLANTED_SPLITS, **PLANTED)
    fresh = planted_market(ic, seed=PLANTED_FRESH_SEED, train=("2001-01-01", "2004-12-31"), valid=None,
                           test=("2005-01-01", "2016-12-31"), **PLANTED)
    return market, fresh


def planted_envs(market: Any, env: str = "portfolio") -> tuple[Callable[[], Any], Callable[[], Any],
                                                            Callable[[], Any], str]:
    """The planted task's env factories on ``market``: training, validation (selection) and test
    (None for a split the market lacks), and the preset of the ``preset`` arm. Picklable partials:
    the market travels to each pod."""
    if env == "stock":
        from finance import demo

        return (functools.partial(demo.train_env, market), functools.partial(demo.eval_env, market),
                functools.partial(demo.eval_env, market, "test"), "stock_trading")
    if env != "portfolio":
        raise ValueError(f"env must be one of {PLANTED_ENVS}, got {env!r}")
    from finance.portfolio_env import PortfolioVecEnv

    def on(split: str, num_envs: int, **episodes: Any) -> Callable[[], Any] | None:
        if split not in market.close:  # the fresh sample has no validation split
            return None
        return functools.partial(PortfolioVecEnv, market.close[split], market.features[split], num_envs,
                                 **PLANTED_PORTFOLIO, **episodes)

    train = on("train", podracer.get_preset("ppo", "portfolio").num_envs, episode_length=PLANTED_EPISODE_DAYS,
               random_start=True)
    return train, on("valid", 1), on("test", 1), "portfolio"


@functools.cache
def _selection_power() -> Any:
    """benchmarks/selection_power.py as a module (a script run from any folder: no package import)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_selection_power", Path(__file__).with_name("selection_power.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def true_skill(result: Any, expected_return: pd.DataFrame, positions_on: str = "decision") -> float:
    """An agent's true annual Sharpe ratio on a planted market (``selection_power.true_skill``;
    ``positions_on="fill"`` for a ``PortfolioVecEnv`` backtest)."""
    return _selection_power().true_skill(result, expected_return, positions_on)


def planted(size: str, seeds: int, arms: tuple[str, ...] = ARMS, first_seed: int = 0, strength: str = "moderate",
            env: str = "portfolio", **options: Any) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rows per (arm, seed) on a planted market, in the env ``env`` (``planted_envs``): the pick's
    test Sharpe ratio and its true one (``true``), and the daily test returns with equal weight's
    beside them (as ``stocks``)."""
    from finance.backtest import backtest

    budget = BUDGETS["planted"][size]
    market, fresh = planted_markets(strength)
    make_env, make_valid, make_test, preset = planted_envs(market, env)
    make_fresh = planted_envs(fresh, env)[2]
    positions_on = "decision" if env == "stock" else "fill"
    rows, trials = [], {}
    for seed in range(first_seed, first_seed + seeds):
        for arm in arms:
            agent, facts = train_arm(arm, make_env, make_valid, preset, budget, seed, PLANTED_PRESET_CONFIG[env],
                                     **options)
            result = backtest(agent, make_test(), name=f"{arm} {seed}")
            truth = true_skill(backtest(agent, make_fresh(), baselines=False), fresh.expected_return["test"],
                               positions_on)
            m = result.metrics()
            rows.append({"task": "planted", "arm": arm, "seed": seed, "env": env, "test": m["sharpe"], "true": truth,
                         "oos_return_pct": 100 * m["cumulative_return"], **facts})
            trials[f"{arm} {seed}"] = result.returns()
            print(_row(rows[-1]), flush=True)
    trials["equal_weight"] = result.baselines["equal_weight"].returns()
    return pd.DataFrame(rows), pd.DataFrame(trials).dropna()


# ---------------------------------------------------------------------------- report
def _row(row: dict[str, Any]) -> str:
    return "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items())


def summarize(results: pd.DataFrame) -> pd.DataFrame:
    """Per task and arm: the held-out score's mean, std (ddof=1), min and max over seeds."""
    g = results.groupby(["task", "arm"], sort=False)
    table = g["test"].agg(["mean", "std", "min", "max"]).add_prefix("test_")
    table["valid_mean"] = g["valid"].mean()
    if "true" in results:  # planted markets: the agent's true annual Sharpe ratio
        table["true_mean"] = g["true"].mean()
        table["true_std"] = g["true"].std()
    table["env_steps"] = g["env_steps"].mean().astype(int)
    table["wall_s"] = g["wall_s"].mean()
    if "stale_starts" in results:  # tournament: generations redone from a superseded parent, summed over seeds
        table["stale_starts"] = g["stale_starts"].sum(min_count=1)
    table["seeds"] = g.size()
    return table


def tournament_options(parser: argparse.ArgumentParser, pairs: list[str]) -> dict[str, Any]:
    """``["top_k=2", "selection=topk"]`` -> ``{"top_k": 2, "selection": "topk"}`` (values read as YAML)."""
    known = {f.name for f in dataclasses.fields(TournamentConfig)}
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in known:
            parser.error(f"--tournament takes KEY=VALUE with KEY a TournamentConfig field, got {pair!r}")
        options[key] = yaml.safe_load(value)
    try:  # refuse a bad value now, not after the single-pod arms have trained
        TournamentConfig(**options)
    except ValueError as exc:
        parser.error(f"--tournament: {exc}")
    return options


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer generations and windows: a few minutes")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per arm (default 3)")
    parser.add_argument("--tasks", nargs="+", default=["pendulum", "stocks"], choices=["pendulum", "stocks", "planted"],
                        help="planted: a market with planted skill (finance.planted), not run by default")
    parser.add_argument("--strength", default="moderate", choices=list(PLANTED_STRENGTHS),
                        help="planted: the signal's strength (default moderate, a daily IC of 0.04)")
    parser.add_argument("--planted-env", default="portfolio", choices=PLANTED_ENVS,
                        help="planted: portfolio (default: long-short target weights, no costs, 64-day episodes, "
                             "where PPO learns the signal) or stock (finance.demo's stock env, where it does not)")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS, help="a subset, e.g. to rerun one")
    parser.add_argument("--tournament", nargs="+", default=[], metavar="KEY=VALUE",
                        help="TournamentConfig settings of the tournament arm, e.g. selection=topk top_k=2")
    parser.add_argument("--first-seed", type=int, default=0, help="stocks: seeds first-seed .. first-seed + seeds - 1")
    parser.add_argument("--save", default=None, metavar="DIR",
                        help="stocks: write the runs (rows.csv, returns.csv) here, to --combine with other processes'")
    parser.add_argument("--combine", nargs="+", default=None, metavar="DIR",
                        help="stocks: no training; the table and tests over the runs these --save folders hold")
    args = parser.parse_args(argv)
    options = tournament_options(parser, args.tournament)
    if "stocks" in args.tasks and "planted" in args.tasks:
        parser.error("--tasks takes stocks or planted, not both: each has its own out-of-sample days")
    if args.seeds < 2 and not args.save:
        parser.error("--seeds must be at least 2: the spread over seeds is the point (or --save, then --combine)")
    size = "quick" if args.quick else "full"
    frames, trials = [], None
    if args.combine:
        frames = [pd.read_csv(Path(d) / "rows.csv") for d in args.combine]
        trials = pd.concat([pd.read_csv(Path(d) / "returns.csv", index_col=0, parse_dates=True) for d in args.combine],
                           axis=1)
        trials = trials.loc[:, ~trials.columns.duplicated()].dropna()
        args.tasks = list(dict.fromkeys(t for f in frames for t in f["task"]))
        args.seeds = len({int(s) for f in frames for s in f["seed"]})
        envs = {e for f in frames if "env" in f for e in f["env"].dropna()}  # planted runs say which env
        args.planted_env = ", ".join(sorted(envs)) if envs else "stock"  # runs saved before --planted-env: stock
    elif "pendulum" in args.tasks:
        frames.append(pendulum(size, args.seeds, tuple(args.arms), **options))
    if {"stocks", "planted"} & set(args.tasks) and not args.combine:
        if "stocks" in args.tasks:
            stock_rows, trials = stocks(size, args.seeds, tuple(args.arms), args.first_seed, **options)
        else:
            stock_rows, trials = planted(size, args.seeds, tuple(args.arms), args.first_seed, args.strength,
                                        args.planted_env, **options)
        frames.append(stock_rows)
        if args.save:
            Path(args.save).mkdir(parents=True, exist_ok=True)
            stock_rows.to_csv(Path(args.save) / "rows.csv", index=False)
            trials.to_csv(Path(args.save) / "returns.csv")
    results = pd.concat(frames, ignore_index=True)
    pbo, tests = None, None
    if trials is not None:
        from finance.overfitting import probability_of_backtest_overfitting

        runs = trials.drop(columns="equal_weight")
        hold = trials["equal_weight"]
        print(f"equal weight on the same days (buy-and-hold; a portfolio env's: rebalanced daily): Sharpe {hold.mean() / hold.std() * math.sqrt(252):.3g}, "
              f"return {100 * ((1 + hold).prod() - 1):.3g}%")
        pbo = probability_of_backtest_overfitting(runs, n_splits=16) if runs.shape[1] > 1 else None
        if any(c.startswith("tournament ") for c in runs) and runs.shape[1] > 1:
            tests = against(runs, hold)
    budgets = {"pendulum": f"pendulum {BUDGETS['pendulum'][size].total:,} env steps",
               "stocks": f"stocks {BUDGETS['stocks'][size].total:,} per window x {STOCK_WINDOWS[size]}",
               "planted": f"planted {BUDGETS['planted'][size].total:,} ({args.planted_env} env)"}
    print(f"\nsize={size}, {args.seeds} seeds, {PODS} pods; per arm and seed: "
          + ", ".join(budgets[t] for t in args.tasks)
          + f"; {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    print("test: pendulum = mean return on 64 held-out start states; stocks = Sharpe of the stitched "
          f"walk-forward ({STOCK_WINDOWS[size]} one-year out-of-sample windows); planted = Sharpe on the test years, "
          "true = true Sharpe on a fresh 12-year sample")
    print(f"valid (every arm's selection score, fitness={options.get('fitness', 'auto')!r}): "
          + "; ".join(f"{t} = {validation_units(t, options.get('fitness', 'auto'))}" for t in args.tasks))
    print(summarize(results).to_string(float_format=lambda x: f"{x:.3g}"))
    for task, group in results.groupby("task", sort=False):
        # Does the selection score predict the held-out one? If not, no selection rule can help.
        if len(group) > 2 and group["valid"].nunique() > 1 and group["test"].nunique() > 1:
            rho = group["valid"].corr(group["test"], method="spearman")
            print(f"{task}: rank correlation of validation and test score over the {len(group)} runs: {rho:.2f}")
    if "true" in results:
        print_truth(results[results.task == "planted"])
    if pbo is not None:
        print(f"\n{results.task.iloc[-1]} PBO over {runs.shape[1]} trials (arm x seed runs, daily "
              f"out-of-sample returns, CSCV S=16): {pbo.pbo:.2f}; degradation slope {pbo.degradation_slope:.2f}; "
              f"P(OOS loss) {pbo.prob_oos_loss:.2f}")
    if tests is not None:
        print(f"\n{results.task.iloc[-1]}, the tournament's out-of-sample returns against one pod and equal weight (annual Sharpe "
              "ratios; p: Ledoit-Wolf HAC, two-sided):")
        print(tests[0].to_string(index=False, float_format=lambda x: f"{x:.3g}"))
        print("SPA (best tournament seed by mean return, 1,000 stationary-bootstrap resamples):")
        print(tests[1].to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    return results


def print_truth(rows: pd.DataFrame) -> None:
    """Planted markets: the tournament's true Sharpe ratio against each single pod's, paired by seed."""
    true = rows.pivot(index="seed", columns="arm", values="true")
    if "tournament" not in true:
        return
    print("\nplanted: true annual Sharpe ratio, tournament minus one pod, paired by seed "
          "(mean, ± 95% t-interval, seeds ahead):")
    for arm in (a for a in ("preset", "default") if a in true):
        diff = (true["tournament"] - true[arm]).dropna()
        half = scipy.stats.t.ppf(0.975, len(diff) - 1) * diff.std() / math.sqrt(len(diff)) if len(diff) > 1 else math.nan
        print(f"  against one pod ({arm}): {diff.mean():+.3f} ± {half:.3f}; tournament ahead in "
              f"{int((diff > 0).sum())} of {len(diff)}")


def validation_units(task: str, fitness: Any) -> str:
    """What the ``valid`` column holds for ``task`` under the tournament's ``fitness`` setting."""
    spec = fitness if fitness != "auto" else fitness_for_task("stock_trading") if task != "pendulum" else None
    built = make_fitness(spec)
    if isinstance(built, EvalReturn):
        return ("mean return on 32 start states" if task == "pendulum" else
                "return over the validation year, % of initial cash")
    return built.describe(VALID_DAYS - 1) if hasattr(built, "describe") else repr(built)


if __name__ == "__main__":
    main()
