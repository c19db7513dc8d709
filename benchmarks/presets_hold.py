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
import os
import sys
import time

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
}


def markdown_row(row: dict, load: float) -> str:
    """One line of the presets table."""
    def num(v: float, fmt: str = ",.0f") -> str:
        return "-" if v != v else format(v, fmt)

    def ret(k: int) -> str:
        median, worst = row.get(f"return_{k}x_median", float("nan")), row.get(f"return_{k}x_worst", float("nan"))
        return f"{num(median)} ({num(worst)})"

    return (f"| {row['agent']} {row['task']} | {row['num_envs']} | {row['seeds']} | {row['target']:g} ± "
            f"{row['margin']:g} | {row['reached']}/{row['seeds']} | {num(row['first_steps'])} | "
            f"{num(row['first_s'], '.1f')} | {row['held']}/{row['seeds']} | {num(row['hold_s'], '.1f')} | "
            f"{ret(1)} | {ret(2)} | {ret(3)} | {num(row['worst_after_reach'])} | {load:.1f} |")


HEADER = ("| preset | sub-envs | seeds | target ± margin | reached | env steps to first reach | s to first reach | "
          "held | s to holding target | return at 1x (worst) | 2x (worst) | 3x (worst) | worst after reach | load |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")


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
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    target, margin = TARGETS.get((args.agent, args.task), (None, None))
    target = args.target if args.target is not None else target
    margin = args.margin if args.margin is not None else margin
    if target is None or margin is None:
        parser.error(f"no default target for {args.agent} on {args.task}: give --target and --margin")
    start = time.perf_counter()
    check = check_hold(args.agent, args.task, target, margin, seeds=args.seeds, env_scales=args.scales,
                       budget_factor=args.budget_factor)
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
