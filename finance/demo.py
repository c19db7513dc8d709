"""The finance job behind ``make demo``: offline, on the bundled sample of real prices.

1. ``prepare_market``: 20 US stocks, indicators and turbulence, scaler fitted on 2005-2016;
   validation 2017-2018; test 2019-2022.
2. A tournament of PPO pods trains on the training years (one-year episodes from random days)
   and scores each generation on the validation years.
3. The best agent and the top-k ensemble are backtested on the test years beside equal-weight
   buy-and-hold, the S&P 500 and the minimum-variance portfolio, with the same costs.
4. Single-pod PPO with several seeds gives the spread of the test metrics.

Writes ``runs/demo/report.md``, ``runs/demo/equity.png``, ``runs/demo/leaderboard.csv`` and prints
where they are. ``PODRACER_SIZE=full`` trains longer. Run: ``python -m finance.demo``.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pandas as pd
import torch

import podracer
from finance.backtest import BacktestResult, backtest, compare
from finance.market import MarketData, prepare_market

# The agent settings are the library's "stock_trading" preset (finance/presets.py): its config,
# its sub-env count, and its step budget as the full-size single-pod run. The demo adds only sizes.
PRESET = podracer.get_preset("ppo", "stock_trading")
SIZES = {  # generation_steps, generations, single-pod steps
    "smoke": dict(generation_steps=16_384, generations=3, single_steps=65_536),
    "full": dict(generation_steps=65_536, generations=6, single_steps=PRESET.total_steps),
}
EPISODE_DAYS = 252  # one trading year per training episode


def train_env(market: MarketData, num_envs: int = PRESET.num_envs) -> Any:
    """Training accounts: one-year episodes from random days of the training years."""
    return market.env("train", num_envs, random_start=True, episode_length=EPISODE_DAYS, dtype=torch.float32)


def eval_env(market: MarketData, split: str = "valid") -> Any:
    """One deterministic account over the whole split; its return is the score (% of cash)."""
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


def single_pod(market: MarketData, steps: int, seed: int) -> Any:
    """One PPO agent trained alone; the evaluation with the best validation score is kept."""
    env = train_env(market)
    agent = podracer.make_agent("ppo", env, seed=seed)  # env.task == "stock_trading": the preset above
    best_score, best_state = -float("inf"), None
    for row in podracer.iterate_training(agent, env, steps, eval_env=eval_env(market), eval_every=steps // 8,
                                         seed=seed):
        if row.get("eval/return_mean", -float("inf")) > best_score:
            best_score, best_state = row["eval/return_mean"], agent.checkpoint()
    return type(agent).from_checkpoint(best_state)


def _seed_table(results: list[BacktestResult]) -> pd.DataFrame:
    table = pd.DataFrame([r.metrics() for r in results])
    return pd.DataFrame({"mean": table.mean(), "std": table.std(ddof=1), "min": table.min(), "max": table.max()})


def _board_summary(board: pd.DataFrame) -> pd.DataFrame:
    """The leaderboard columns a reader wants: lineage, score, what changed, hyperparameters."""
    keep = ["parent_id", "generation", "pod", "score", "env_steps", "changes"]
    return board[keep + [c for c in board.columns if c.startswith("hp/")]]


def main(argv: list[str] | None = None) -> Path:
    size = os.environ.get("PODRACER_SIZE", "smoke")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/demo", help="output folder (default runs/demo)")
    parser.add_argument("--pods", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=3, help="single-pod PPO seeds for the spread of metrics")
    parser.add_argument("--size", default=size, choices=sorted(SIZES))
    parser.add_argument("--backend", default="local", choices=["local", "ray"], help="where the pods run")
    parser.add_argument("--address", default=None, help='ray: cluster to join ("auto" on a cluster node)')
    args = parser.parse_args(argv)
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

    table = compare(best, ensemble, *seeds)
    fig = best.plot()
    fig.savefig(out / "equity.png", dpi=100)
    elapsed = time.perf_counter() - t0
    report = out / "report.md"
    report.write_text("\n".join([
        "# Podracer finance demo",
        "",
        f"Bundled sample of real prices (skfolio, BSD-3), {len(market.tickers)} US stocks; "
        f"size `{args.size}`; {elapsed:.0f} s on {torch.get_num_threads()} threads. "
        "Command: `make demo` (or `python -m finance.demo`).",
        "",
        "## Splits", "", market.describe().to_markdown(), "",
        "## Test period (2019-2022): agents against the baselines, same costs (0.1%)", "",
        table.to_markdown(floatfmt=".3f"), "",
        f"## Single-pod PPO over {args.seeds} seeds (test period)", "",
        _seed_table(seeds).to_markdown(floatfmt=".3f"), "",
        "## Leaderboard (validation score: % return over 2017-2018)", "",
        _board_summary(board).head(10).to_markdown(floatfmt=".3g"), "",
        "![equity](equity.png)", "",
    ]))
    print(f"\n{table.to_string(float_format=lambda x: f'{x:.3f}')}")
    print(f"\nreport: {report.resolve()}\nplot:   {(out / 'equity.png').resolve()}  ({elapsed:.0f} s)")
    return report


if __name__ == "__main__":
    main()
