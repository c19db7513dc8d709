"""Does a preset hold what it reaches? The holding criterion (``podracer.holding.check_hold``) for one preset.

Trains the agent's preset for the task ``--budget-factor`` (3) times its step budget, on each seed
and at the preset's sub-env count times each ``--scales`` (1, 0.5, 2), evaluating ten times per
budget (deterministic policy, 10 episodes from the same seed), and prints one table row per
sub-env count, in the columns of ``docs/results/presets.md``:

- first reach: median env steps and training seconds (evaluation excluded) to the first
  evaluation >= target, over the runs that reached it;
- holding: median seconds to the first evaluation >= target after which every evaluation stays
  within ``--margin`` of it (over the runs that got there: ``held`` counts runs that never fell
  more than the margin below the target after first reaching it);
- the median (worst) return at 1x, 2x and 3x the budget, and the worst evaluation after reaching.

Single-threaded (one torch thread). Steps do not depend on the machine; seconds do: the load
average is printed with the row.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/presets_hold.py ppo pendulum [--seeds 0 1 2 3 4]
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from pathlib import Path
from typing import Callable

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

from podracer.holding import check_hold  # noqa: E402

# (agent, task) -> (target, margin): the targets the presets are tuned to, and how far below it an
# evaluation may fall once reached. Margins are ~20% of the gap between a random policy and the target.
TARGETS: dict[tuple[str, str], tuple[float, float]] = {
    ("ppo", "pendulum"): (-250.0, 50.0),
    ("sac", "pendulum"): (-250.0, 50.0),
    ("td3", "pendulum"): (-250.0, 50.0),
    ("ddpg", "pendulum"): (-250.0, 50.0),
    ("ppo", "cartpole"): (475.0, 25.0),
    ("dqn", "cartpole"): (400.0, 50.0),
    ("double_dqn", "cartpole"): (400.0, 50.0),
    ("d3qn", "cartpole"): (400.0, 50.0),
    # HalfCheetah (4 episodes, random policy about -300): the presets' provenance, 2,945-3,823 (PPO)
    # and 3,047-3,295 (SAC) after the budget, less a margin.
    ("ppo", "halfcheetah"): (2500.0, 500.0),
    ("sac", "halfcheetah"): (2500.0, 500.0),
}


def stock_trading_envs() -> tuple[Callable, Callable, float, float]:
    """finance.demo's training accounts and its score, one account's % return over the validation
    years; the target is the provenance's, equal-weight buy-and-hold's return there (same costs),
    and the margin 10 points of return (the score moves ~10-40 points between evaluations)."""
    from _rllib_side import stock_target
    from finance.demo import eval_env, train_env
    from finance.market import prepare_market

    market = prepare_market()
    return functools.partial(train_env, market), functools.partial(eval_env, market), stock_target(market), 10.0


def portfolio_envs() -> tuple[Callable, Callable, float, float]:
    """The synthetic regime market the portfolio presets were tuned on (tests/test_portfolio_env.py):
    train on one draw, score 100 x log growth on another; the target is the learning test's, 0.7 of
    the oracle's (~85), the margin 0.15 of it."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from test_portfolio_env import episode_return, regime_close

    from finance.portfolio_env import PortfolioVecEnv

    train_close, test_close = regime_close(3000, 0), regime_close(300, 1)
    oracle = episode_return(PortfolioVecEnv(test_close, window=5), lambda o: torch.tensor(
        [[1.0, -1, -1]]) if o[0, 4] > 0 else torch.tensor([[-1.0, -1, 1]]))
    return (lambda n: PortfolioVecEnv(train_close, num_envs=n, window=5, episode_length=64, random_start=True, seed=0),
            lambda: PortfolioVecEnv(test_close, window=5), 0.7 * oracle, 0.15 * oracle)


def halfcheetah_envs() -> tuple[Callable, Callable, None, None]:
    """tests/test_locomotion.py's envs: training seeded 0, 4 evaluation episodes seeded 100."""
    here = Path(__file__).resolve().parent  # first on sys.path when run as a script: its locomotion.py
    sys.path = [p for p in sys.path if Path(p or ".").resolve() != here]  # would shadow the package
    import locomotion

    return (lambda n: locomotion.make_env("HalfCheetah", n, device="cpu", seed=0, verbose=False),
            lambda: locomotion.make_env("HalfCheetah", 4, device="cpu", seed=100, verbose=False), None, None)


# task -> its training env factory, evaluation env factory, target and margin (None: TARGETS'),
# for tasks scored elsewhere than on ``make_env(task)``'s episodes.
TASK_ENVS: dict[str, Callable[[], tuple]] = {"stock_trading": stock_trading_envs, "portfolio": portfolio_envs,
                                             "halfcheetah": halfcheetah_envs}


def markdown_row(row: dict, load: float) -> str:
    """One line of the presets table."""
    def num(v: float, fmt: str = ",.0f") -> str:
        return "-" if v != v else format(v, fmt)

    def ret(k: int) -> str:
        median, worst = row.get(f"return_{k}x_median", float("nan")), row.get(f"return_{k}x_worst", float("nan"))
        return f"{num(median)} ({num(worst)})"

    return (f"| {row['agent']} {row['task']} | {row['num_envs']} | {row['seeds']} | {row['target']:.4g} ± "
            f"{row['margin']:.3g} | {row['reached']}/{row['seeds']} | {num(row['first_steps'])} | "
            f"{num(row['first_s'], '.1f')} | {row['held']}/{row['seeds']} | {num(row['hold_s'], '.1f')} | "
            f"{ret(1)} | {ret(2)} | {ret(3)} | {num(row['worst_after_reach'])} | {load:.1f} |")


HEADER = ("| preset | sub-envs | seeds | target ± margin | reached | env steps to first reach | s to first reach | "
          "held | s to holding target | return at 1x (worst) | 2x (worst) | 3x (worst) | worst after reach | load |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def parse_overrides(parser: argparse.ArgumentParser, items: list[str]) -> dict:
    """``FIELD=VALUE`` strings -> a dict, each value read as YAML (``true`` a bool, ``[64, 64]`` a
    list) and a number in any notation as a number (YAML reads ``3e-3`` as text)."""
    import yaml

    out = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name:
            parser.error(f"--set takes FIELD=VALUE, got {item!r}")
        value = yaml.safe_load(text)
        if isinstance(value, str):
            try:
                value = float(text)
            except ValueError:
                pass
        out[name] = value
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("agent")
    parser.add_argument("task")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--scales", type=float, nargs="+", default=[1.0, 0.5, 2.0],
                        help="sub-env counts as multiples of the preset's")
    parser.add_argument("--target", type=float, default=None, help="default: TARGETS in this file")
    parser.add_argument("--margin", type=float, default=None)
    parser.add_argument("--budget-factor", type=int, default=3)
    parser.add_argument("--per-run", action="store_true", help="also print every run's evaluations")
    parser.add_argument("--set", nargs="+", default=[], metavar="FIELD=VALUE",
                        help="override preset config fields, e.g. --set learning_rate=3e-3 target_kl=0.015")
    parser.add_argument("--no-stagger", action="store_true",
                        help="train with all sub-envs' time limits in step (before issue 38's fix; to compare)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    make_train_env, make_eval_env, target, margin = TASK_ENVS.get(args.task, lambda: (None, None, None, None))()
    target, margin = TARGETS.get((args.agent, args.task), (target, margin))
    target = args.target if args.target is not None else target
    margin = args.margin if args.margin is not None else margin
    if target is None or margin is None:
        parser.error(f"no default target for {args.agent} on {args.task}: give --target and --margin")
    overrides = parse_overrides(parser, args.set)
    start = time.perf_counter()
    check = check_hold(args.agent, args.task, target, margin, seeds=args.seeds, env_scales=args.scales,
                       budget_factor=args.budget_factor, stagger_time_limits=not args.no_stagger,
                       make_train_env=make_train_env, make_eval_env=make_eval_env, **overrides)
    load = os.getloadavg()[0]
    if args.per_run:
        for run in check.runs:
            evals = run.history.dropna(subset=["eval/return_mean"])["eval/return_mean"].round().astype(int).tolist()
            print(f"{run.num_envs} envs seed {run.seed}: {'holds' if run.result.holds else 'fails'} {evals}")
    print(HEADER)
    for row in check.rows():
        print(markdown_row(row, load))
    print(f"budget {check.budget:,} env steps, trained {args.budget_factor}x; {time.perf_counter() - start:.0f} s in "
          f"all; load average {load:.1f} on {os.cpu_count()} cores; all held: {check.holds}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
