"""Which ensemble of a tournament's board trades best on test: top k, diverse k, weighted, median?

One trading tournament (the demo's market: 20 US stocks, train 2005-2016, validation 2017-2018,
test 2019-2022; PPO pods scored by ``finance.WindowedFitness``, so every entry keeps its daily
validation returns) and, from its board, several ensembles of ``k`` members (``Tournament.ensemble``):

- ``best``: the best entry alone;
- ``top-k mean``: today's default, the k best by score, mean action;
- ``top-k weighted``: the same members, actions weighted by the softmax of their scores;
- ``top-k median``: the same members, per-dimension median action (the continuous analogue of a vote);
- ``diverse-k mean``: greedy for score less ``penalty`` x the mean correlation of validation returns;
- ``diverse-k weighted``: those members, weighted by score.

Each is backtested on the test years. Not one draw: each arm's test Sharpe ratio is compared with
today's ``top-k mean`` by the Sharpe-difference test (Ledoit & Wolf 2008, HAC), and the PBO (CSCV
over the arms' daily test returns, ~60-day blocks) asks whether the arm that leads on half the test
days keeps leading on the other half, i.e. whether the arms differ at all beyond noise (arms that
picked the same members and so trade identically count once).
``--seeds N`` repeats it with N tournaments (seeds 0..N-1) and reports every seed's rows. ``pool corr``
is the mean [min, max] correlation of validation returns between the diverse arms' 3k candidates:
how much diversity there was to choose from.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/ensembles.py`` (``--quick``: a tiny
tournament, minutes; ``--k``, ``--penalty``, ``--pods``, ``--seeds``).
"""

from __future__ import annotations

import argparse
import functools
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import podracer
from finance import backtest, probability_of_backtest_overfitting, sharpe_difference_test
from finance.demo import PRESET, eval_env, pbo_splits, prepare_market, train_env
from podracer.tournament import returns_similarity

FITNESS = {"name": "windowed", "scheme": "windows", "n_windows": 4, "score": "sharpe"}
TRADING_DAYS = 252


def arms(tournament: podracer.Tournament, k: int, penalty: float) -> dict[str, podracer.Ensemble]:
    """The ensembles compared, by name (module doc)."""
    diverse = dict(select="diverse", penalty=penalty)
    return {"best": tournament.ensemble(1),
            f"top-{k} mean": tournament.ensemble(k),
            f"top-{k} weighted": tournament.ensemble(k, combine="weighted"),
            f"top-{k} median": tournament.ensemble(k, combine="median"),
            f"diverse-{k} mean": tournament.ensemble(k, **diverse),
            f"diverse-{k} weighted": tournament.ensemble(k, combine="weighted", **diverse)}


def run_seed(market, store: Path, seed: int, args: argparse.Namespace) -> pd.DataFrame:
    tournament = podracer.Tournament(functools.partial(train_env, market), functools.partial(eval_env, market),
                                     agent="ppo", pods=args.pods, generation_steps=args.generation_steps,
                                     generations=args.generations, store=store, agent_config=dict(PRESET.config),
                                     seed=seed, threads_per_pod=1, fitness=FITNESS)
    tournament.run(progress=None)
    test_env = eval_env(market, "test")
    ensembles = arms(tournament, args.k, args.penalty)
    returns = pd.DataFrame({name: backtest(policy, test_env, name=name, baselines=False).returns()
                            for name, policy in ensembles.items()}).fillna(0.0)
    baseline = f"top-{args.k} mean"
    # Arms that chose the same members trade the same: one strategy, counted once.
    distinct = returns.T.drop_duplicates().T
    pbo = probability_of_backtest_overfitting(distinct, n_splits=pbo_splits(len(returns))).pbo
    pool = tournament.board.top(3 * args.k)  # the diverse arms' candidates
    sim = returns_similarity(np.array([e.returns for e in pool], dtype=float).T)
    off = sim[~np.eye(len(sim), dtype=bool)]
    rows = []
    for name, policy in ensembles.items():
        test = sharpe_difference_test(returns[name], returns[baseline], periods_per_year=TRADING_DAYS)
        rows.append({"seed": seed, "arm": name, "members": ",".join(map(str, policy.entries)),
                     "test sharpe": test.sharpe_a, "vs top-k mean": test.difference,
                     "p": test.p_value if name != baseline else np.nan, "PBO (arms)": pbo,
                     "distinct arms": distinct.shape[1], "pool corr": f"{off.mean():.2f} [{off.min():.2f}, {off.max():.2f}]"})
    return pd.DataFrame(rows)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="a tiny tournament (2 pods x 3 generations x 4,096 steps)")
    p.add_argument("--pods", type=int, default=4)
    p.add_argument("--generations", type=int, default=4)
    p.add_argument("--generation-steps", type=int, default=16_384)
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--penalty", type=float, default=1.0)
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--csv", type=Path, default=None, help="also write the rows here")
    args = p.parse_args(argv)
    if args.quick:
        args.pods, args.generations, args.generation_steps = 2, 3, 4096
    return args


def main(argv: list[str] | None = None) -> pd.DataFrame:
    args = parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    market = prepare_market()
    with tempfile.TemporaryDirectory() as tmp:
        table = pd.concat([run_seed(market, Path(tmp) / f"seed{s}", s, args) for s in range(args.seeds)])
    print(table.to_markdown(index=False, floatfmt=".2f"))
    print(f"\n{args.pods} pods x {args.generations} generations x {args.generation_steps:,} env steps, k={args.k}, "
          f"penalty={args.penalty}; Sharpe ratios annualised; p: two-sided HAC test against top-k mean; "
          f"wall {time.perf_counter() - t0:.0f} s")
    if args.csv:
        table.to_csv(args.csv, index=False)
    return table


if __name__ == "__main__":
    main()
