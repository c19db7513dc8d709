"""Podracer vs RLlib PPO: time to the same evaluation target and env steps per second, same run, same CPUs.

What it measures
----------------
Two tasks, each trained by Podracer's PPO and by RLlib's PPO (``ray[rllib]`` 2.60), one process
at a time on the same machine with the same CPU budget (``--cpus``, default 2: RLlib gets
``ray.init(num_cpus=2)``; Podracer is one process and runs torch on ``--threads`` of those
CPUs; a second torch thread halved its speed on these small networks here, so 1 by default),
the same evaluation and the same target, and seeds as below:

**(a) Pendulum.** Podracer: ``PPO`` with the ``pendulum`` preset on ``PendulumVecEnv`` (96
batched sub-envs, our tensor port of gymnasium's dynamics), up to the preset's 150,528 env
steps. RLlib: RLlib's tuned example (``rllib/examples/algorithms/ppo/pendulum_ppo.py``, formerly
``rllib/tuned_examples/ppo/pendulum_ppo.py``) on gymnasium ``Pendulum-v1``: 20 envs per env
runner, ``MeanStdFilter``, train batch 1024, minibatch 128, lr 2e-4, gamma 0.95, lambda 0.5,
ReLU 256x256, 30 epochs; the example's 2 env runners scaled to the 2 CPUs: 1 env runner
sampling on one CPU, the learner in the driver on the other (``--rllib-env-runners``; 0 and 2
were no faster here). Up to the example's 400,000 env steps. Target: a mean return of -250
(``--pendulum-target``). Evaluation, the same code for both: every 2,000 env steps (at the
first chance after it; both can only be evaluated between updates), the deterministic policy
plays 10 gymnasium ``Pendulum-v1`` episodes from ``reset(seed=10_000 + i)``; for RLlib that is
the RLModule's deterministic action on the observation normalised by the training env runner's
own ``MeanStdFilter``, unsquashed into the action box as RLlib's env runners do.

**(b) Stock trading.** The bundled 20-stock sample prepared by ``finance.prepare_market()``
(offline), trained on 2005-2016 in one-year episodes from random days (``finance.demo.train_env``).
Podracer: ``StockTradingVecEnv`` with 128 accounts and the library's ``stock_trading`` PPO preset,
up to its 393,216 env steps. RLlib: the same env as a gymnasium env
(``_rllib_side.StockTradingGymEnv``: ``StockTradingVecEnv(num_envs=1)``, numpy in and out),
64 of them per env runner, and the earlier preset's settings translated to RLlib (5 epochs of 4
minibatches at lr 3e-4; it has no tuned example for this task; see ``_rllib_side.rllib_config``:
without the preset's "no KL penalty, no absolute value-loss clip" RLlib did not reach the target
in 300 s; given the current preset's 3 epochs of 2 minibatches at lr 3e-3 it peaked at +11.6%
and fell to -25%). Evaluation, the same code for both: the tournament's score,
``podracer.evaluate`` on ``finance.demo.eval_env`` (one deterministic account over the validation
years 2017-2018; % return), every 2,048 env steps: after every update of either library (each
trains on batches of 2,048 env steps), so neither waits for the next scheduled evaluation
after reaching the target (``--stock-eval-every``; until 1.1 every 8,192). Target: the return of equal-weight buy-and-hold
over those years with the same costs (+20.3%, ``--stock-target`` to change).

Seeds. How soon PPO reaches the stock target depends on the seed several-fold, for both
libraries: the preset's env steps to target over seeds 0-9 are median 16,384, worst 106,496, seed
0 its luckiest (8,192); RLlib's over seeds 0-2 were 81,920, 8,192 and 16,384, seed 0 its
unluckiest. One seed overstated the ratio 10x (143x at seed 0; 13.9x the median of seeds 0-2, same
seed against same seed). So on stocks both run 3 seeds by default (``--seed`` and the two after it;
``--seeds`` to choose; RLlib's runs take 15-45 s each with start-up on a quiet machine), each seed
of ours against RLlib's same seed; ``--rllib-seeds first`` runs RLlib on ``--seed`` alone (all of
ours then against it). Pendulum runs ``--seed`` alone unless ``--seeds`` is given.

Each library trains until its target has held (``podracer.holding``): reached, then kept within
a margin of it (``--pendulum-margin`` 50, ``--stock-margin`` 2 %-points) for ``--hold-evals`` (5)
evaluations; or to the end of its step budget, or ``--cap`` seconds of training. Columns:

- ``setup_s``: start-up, from launching the process to the first training step: interpreter,
  imports, data, ``ray.init`` and ``build_algo`` for RLlib, building env and agent for Podracer;
- ``train_s_to_target``: training seconds until the evaluation that reached the target,
  evaluations excluded (the evaluation is the benchmark's yardstick, not either library's work);
- ``train_s_to_hold``: training seconds until the first evaluation at the target after which
  every evaluation stayed within the margin (``>`` the run's time where the target never held);
- ``total_s_to_target``: start-up and ``train_s_to_target`` together;
- ``steps_to_target``: env steps trained by then; ``steps_per_s``: env steps over training
  seconds for the whole run (sampling and learning);
- ``peak_rss_mb``: the largest resident memory of the process and all its children (Ray's
  raylet, GCS and workers) summed, sampled every 0.2 s (shared pages count once per process);
- ``last_eval``: the last evaluation.

A row per library and seed. Then ``speed-up``, for each RLlib seed against Podracer's same seed:
how many times Podracer is better, RLlib's time over ours for the time columns and memory, ours
over RLlib's for ``steps_per_s``. A library that never reached the target shows ``>`` its
training time, and the speed-ups against it are lower bounds (upper bounds where Podracer missed
it). Below each table, the seconds of Podracer's training to target spent in PPO's update (its
epochs of minibatch steps; the rest is rollouts and GAE), and at the end each task's speed-ups
over Podracer's seeds, each seed's time against RLlib's: the median and the range (the low end is
Podracer's worst seed), the training-time median against our aims: 50x on Pendulum,
20x on stocks.

``--rllib-eval rllib`` scores RLlib with its own evaluation instead: one evaluation env runner
(one more process, and one more CPU: it runs between iterations), ``explore=False``, called by
us at the same cadence, with ``max_requests_in_flight_per_env_runner=2`` in its
``evaluation_config``: with the default of 1 the evaluation runner never receives the training
runners' observation filter, which overstated RLlib's time to target about 4x here. Episodes
are then RLlib's own (not our fixed seeds), so the common evaluation is the default.

How to run
----------
``make bench`` creates RLlib's environment (``make rllib-venv``: ``.venv/rllib``, ~1 minute,
1.8 GB) and runs every benchmark. Alone: ``.venv/bin/python benchmarks/vs_rllib.py`` (about 3
minutes on 2 cores, RLlib's runs dominating, up to 20 if RLlib never reaches a target;
``--quick``: caps of a third, at most about 7 minutes; ``--tasks pendulum`` for one task;
``--skip-rllib`` for ours only). RLlib's Python is
``$RLLIB_PYTHON`` or ``.venv/rllib/bin/python``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _rllib_side import RESULT, Clock, pendulum_return, stock_market, stock_score, stock_target  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SIDE = Path(__file__).resolve().parent / "_rllib_side.py"
DEFAULT_RLLIB_PYTHON = ROOT / ".venv" / "rllib" / "bin" / "python"
EVAL_EVERY = {"pendulum": 2_000, "stock": 2_048}
CAPS = {"pendulum": 240.0, "stock": 300.0}  # training seconds; --quick: a third
AIMS = {"pendulum": 50.0, "stock": 20.0}  # RLlib's training seconds to target over ours
COLUMNS = ["setup_s", "train_s_to_target", "train_s_to_hold", "total_s_to_target", "steps_to_target", "steps_per_s", "peak_rss_mb",
           "last_eval"]


# ---------------------------------------------------------------------------- the Podracer side (a subprocess)
def podracer_side(args: argparse.Namespace) -> dict[str, Any]:
    import podracer

    torch.set_num_threads(args.threads)
    podracer.seed_everything(args.seed)
    if args.task == "pendulum":
        preset = podracer.get_preset("ppo", "pendulum")
        env = podracer.make_env("pendulum", num_envs=preset.num_envs)
        agent = podracer.make_agent("ppo", env, seed=args.seed, verbose=False)

        @torch.no_grad()
        def policy(obs: np.ndarray) -> np.ndarray:
            return agent.act(torch.as_tensor(obs), deterministic=True).numpy()

        def evaluate() -> float:
            return pendulum_return(policy, args.eval_episodes)
    else:
        import finance  # noqa: F401  (registers the stock_trading preset)
        from finance.demo import train_env

        market = stock_market()
        preset = podracer.get_preset("ppo", "stock_trading")
        env = train_env(market, preset.num_envs)
        agent = podracer.make_agent("ppo", env, seed=args.seed, verbose=False)

        def evaluate() -> float:
            return stock_score(agent, market)

    # The learner's share of the training time: the seconds spent in PPO's update (its epochs of
    # minibatch steps), the rest being the rollouts (acting, env steps) and GAE.
    from podracer.agents import ppo as ppo_module

    update_s = [0.0]
    ppo_update = ppo_module.ppo_update

    def timed_update(*a: Any, **kw: Any) -> Any:
        t = time.perf_counter()
        out = ppo_update(*a, **kw)
        update_s[0] += time.perf_counter() - t
        return out

    ppo_module.ppo_update = timed_update
    clock = Clock("podracer", args.task, args.target, args.eval_every, args.cap_s, preset.total_steps, args.launched,
                  args.margin, args.hold_evals)
    clock.begin()
    update_s_to_target = math.nan
    for row in podracer.iterate_training(agent, env, preset.total_steps, seed=args.seed):
        clock.after_update(int(row["global_step"]), evaluate)
        if clock.reached and math.isnan(update_s_to_target):
            update_s_to_target = update_s[0]
        if clock.done():
            break
    return clock.result(version=f"podracer {podracer.__version__}, torch {torch.__version__}",
                        settings=f"{args.threads} torch thread(s), {preset.num_envs} sub-envs",
                        update_s=update_s[0], update_s_to_target=update_s_to_target)


# ---------------------------------------------------------------------------- running a side, watching its memory
def tree_rss(pid: int) -> int:
    import psutil

    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def run_side(command: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run one side, pass its progress through, return its RESULT with ``peak_rss_mb`` added."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    peak = 0
    while proc.poll() is None:
        peak = max(peak, tree_rss(proc.pid))
        time.sleep(0.2)
    reader.join()
    results = [json.loads(line[len(RESULT):]) for line in lines if line.startswith(RESULT)]
    if proc.returncode != 0 or not results:
        sys.stdout.write("".join(lines))
        raise RuntimeError(f"`{shlex.join(command)}` failed (exit code {proc.returncode})")
    return {**results[-1], "peak_rss_mb": peak / 2**20}


def side_args(args: argparse.Namespace, task: str, target: float, seed: int) -> list[str]:
    every = args.stock_eval_every if task == "stock" else EVAL_EVERY[task]
    return ["--task", task, "--target", repr(target), "--eval-every", str(every),
            "--eval-episodes", str(args.eval_episodes), "--cap-s", repr(args.caps[task]), "--seed", str(seed),
            "--launched", repr(time.time()), "--margin", repr(args.margins[task]), "--hold-evals", str(args.hold_evals)]


def task_seeds(args: argparse.Namespace, task: str) -> tuple[list[int], list[int]]:
    """(Podracer's seeds, RLlib's seeds) for ``task``. On stocks the time to target varies several-fold
    with the seed for both libraries, so both run three by default, pairing seed with seed."""
    ours = args.seeds or ([args.seed, args.seed + 1, args.seed + 2] if task == "stock" else [args.seed])
    return ours, (list(ours) if args.rllib_seeds == "all" else [args.seed])


# ---------------------------------------------------------------------------- the table
def cell(v: Any, column: str) -> str:
    if isinstance(v, str):
        return v
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if column in ("steps_to_target", "steps_per_s", "peak_rss_mb") or abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"


def speed_row(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, str]:
    """How many times Podracer is better than RLlib, column by column, for one pair of runs."""
    speed = {"library": f"speed-up (x), seed {ours['seed']}"}
    for col in COLUMNS:
        if col == "train_s_to_hold":
            mine, other = ours["s_to_hold"] if ours["held"] else math.nan, theirs["s_to_hold"]
            speed[col] = "-" if not ours["held"] else (f"{other / mine:.1f}x" if theirs["held"] else
                                                       f"> {theirs['train_s'] / mine:.1f}x")
            continue
        if col in ("steps_to_target", "last_eval"):
            speed[col] = "-"
            continue
        if col == "steps_per_s":
            speed[col] = f"{ours[col] / theirs[col]:.1f}x"
            continue
        if col == "setup_s" or col == "peak_rss_mb":
            speed[col] = f"{theirs[col] / ours[col]:.1f}x"
            continue
        if not ours["reached"]:
            speed[col] = "-"
            continue
        mine = ours["s_to_target"] + (ours["setup_s"] if col == "total_s_to_target" else 0.0)
        if theirs["reached"]:
            other = theirs["s_to_target"] + (theirs["setup_s"] if col == "total_s_to_target" else 0.0)
            speed[col] = f"{other / mine:.1f}x"
        else:  # RLlib's whole run is a lower bound on its time to target
            other = theirs["train_s"] + (theirs["setup_s"] if col == "total_s_to_target" else 0.0)
            speed[col] = f"> {other / mine:.1f}x"
    return speed


def table(rows: list[dict[str, Any]]) -> str:
    shown = []
    for r in rows:
        row = dict(r)
        row["library"] = f"{r['library']}, seed {r['seed']}"
        row["train_s_to_target"] = r["s_to_target"]
        row["train_s_to_hold"] = r["s_to_hold"] if r["held"] else f"> {r['train_s']:.0f} (not held)"
        if not r["reached"]:  # a lower bound: the whole run
            row["train_s_to_target"] = f"> {r['train_s']:.0f} (not reached)"
            row["total_s_to_target"] = f"> {r['setup_s'] + r['train_s']:.0f}"
            row["steps_to_target"] = f"> {r['env_steps']:,}"
        shown.append(row)
    ours = {r["seed"]: r for r in rows if r["library"] == "podracer"}
    shown += [speed_row(ours[r["seed"]], r) for r in rows if r["library"] == "rllib" and r["seed"] in ours]
    header = ["library", *COLUMNS]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for r in shown:
        lines.append("| " + " | ".join([r["library"], *(cell(r.get(c), c) for c in COLUMNS)]) + " |")
    return "\n".join(lines)


def speedups(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, float]:
    """RLlib's times over ours (ours over RLlib's for steps per second). A library short of the
    target counts its whole training time: a lower bound for RLlib, an upper bound for Podracer."""
    t_ours = ours["s_to_target"] if ours["reached"] else ours["train_s"]
    t_theirs = theirs["s_to_target"] if theirs["reached"] else theirs["train_s"]
    h_ours = ours["s_to_hold"] if ours["held"] else ours["train_s"]
    h_theirs = theirs["s_to_hold"] if theirs["held"] else theirs["train_s"]
    return {"train": t_theirs / t_ours, "hold": h_theirs / h_ours,
            "total": (t_theirs + theirs["setup_s"]) / (t_ours + ours["setup_s"]),
            "steps_per_s": ours["steps_per_s"] / theirs["steps_per_s"]}


def seed_summary(task: str, rows: list[dict[str, Any]]) -> str:
    """The speed-ups over Podracer's seeds, each against RLlib's same seed (or its one seed): median
    and range, the worst seed named, and the training-time median against our aim."""
    ours = [r for r in rows if r["library"] == "podracer"]
    rllib = {r["seed"]: r for r in rows if r["library"] == "rllib"}
    pairs = [(r, rllib.get(r["seed"], next(iter(rllib.values())))) for r in ours]
    s = [speedups(a, b) for a, b in pairs]
    train, total, hold = [x["train"] for x in s], [x["total"] for x in s], [x["hold"] for x in s]
    worst = min(range(len(pairs)), key=lambda i: train[i])
    w = pairs[worst][0]
    lower = "at least " if not all(b["reached"] for _, b in pairs) else ""
    missed = [str(a["seed"]) for a, _ in pairs if not a["reached"]]

    def spread(xs: list[float]) -> str:
        return f"{np.median(xs):.1f}x" + (f" (range {min(xs):.1f}-{max(xs):.1f}x)" if len(xs) > 1 else "")

    theirs = "each against RLlib's same seed" if set(rllib) >= {a["seed"] for a in ours} else \
        f"against RLlib's seed {', '.join(map(str, rllib))}"
    want = AIMS[task]  # our aims for the training time to target: 50x on Pendulum, 20x on stocks
    aim = f"{want:.0f}x train-time aim " + ("met" if np.median(train) >= want else "NOT met") + " at the median"
    if len(pairs) > 1:
        aim += ", " + ("met" if train[worst] >= want else "NOT met") + " at the worst seed"
    steps = f"{w['steps_to_target']:,} env steps" if w["reached"] else f"not reached in {w['env_steps']:,} env steps"
    return (f"{task}: over Podracer's seeds {', '.join(str(a['seed']) for a, _ in pairs)} ({theirs}), Podracer "
            f"reaches the target {lower}{spread(train)} faster than RLlib (start-up excluded), {lower}{spread(total)} "
            f"(start-up included); worst seed {w['seed']}: {w['s_to_target' if w['reached'] else 'train_s']:.2f} s, "
            f"{steps}; {np.median([x['steps_per_s'] for x in s]):.1f}x the env steps per second. {aim}. To a target "
            f"that holds ({pairs[0][0]['hold_evals']} evaluations within {pairs[0][0]['margin']:g}): "
            f"{'at least ' if not all(b['held'] for _, b in pairs) else ''}{spread(hold)} faster"
            + (f"; Podracer's target did not hold on seed(s) {', '.join(str(a['seed']) for a, _ in pairs if not a['held'])}"
               f" (upper bounds)" if not all(a["held"] for a, _ in pairs) else "") + "."
            + (f" Podracer missed the target on seed(s) {', '.join(missed)}: those ratios are upper bounds."
               if missed else ""))


# ---------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="training caps of 80 s (Pendulum) and 100 s (stock)")
    parser.add_argument("--tasks", nargs="+", choices=("pendulum", "stock"), default=["pendulum", "stock"])
    parser.add_argument("--cap", type=float, default=None,
                        help="training seconds per library and task (default 240 s Pendulum, 300 s stock)")
    parser.add_argument("--pendulum-target", type=float, default=-250.0)
    parser.add_argument("--pendulum-margin", type=float, default=50.0,
                        help="how far below the target a held target may fall (podracer.holding)")
    parser.add_argument("--stock-margin", type=float, default=2.0, help="the same on stocks, in %% points")
    parser.add_argument("--hold-evals", type=int, default=5,
                        help="evaluations after the holding one that must stay within the margin; each library "
                             "trains on past its first reach until then")
    parser.add_argument("--stock-target", type=float, default=None,
                        help="validation %% return (default: equal-weight buy-and-hold's, +20.3%%)")
    parser.add_argument("--stock-eval-every", type=int, default=EVAL_EVERY["stock"],
                        help="env steps between validation scores on stocks (default: every update of either library)")
    parser.add_argument("--seed", type=int, default=0, help="RLlib's seed, and Podracer's first")
    parser.add_argument("--seeds", type=int, nargs="+", default=None,
                        help="Podracer's seeds (default: --seed and the two after it on stocks, --seed on Pendulum)")
    parser.add_argument("--rllib-seeds", choices=("first", "all"), default="all",
                        help="RLlib on each of Podracer's seeds (default), or on --seed only (quicker; every ratio "
                             "then against RLlib's one seed)")
    parser.add_argument("--eval-episodes", type=int, default=10, help="Pendulum evaluation episodes")
    parser.add_argument("--cpus", type=int, default=2, help="RLlib's ray.init(num_cpus=...), the CPUs both get")
    parser.add_argument("--threads", type=int, default=1,
                        help="Podracer's torch threads (default 1: a second one halves its speed on these small "
                             "networks here)")
    parser.add_argument("--rllib-env-runners", type=int, default=1)
    parser.add_argument("--rllib-eval", choices=("common", "rllib"), default="common",
                        help="how RLlib is evaluated: our common evaluation, or its own evaluation env runner")
    parser.add_argument("--rllib-python", default=os.environ.get("RLLIB_PYTHON") or str(DEFAULT_RLLIB_PYTHON))
    parser.add_argument("--skip-rllib", action="store_true")
    # internal: one side of one task
    parser.add_argument("--side", choices=("podracer",), help=argparse.SUPPRESS)
    parser.add_argument("--task", help=argparse.SUPPRESS)
    parser.add_argument("--target", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--eval-every", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--cap-s", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--launched", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--margin", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:
        print(RESULT + json.dumps(podracer_side(args)), flush=True)
        return 0

    command = shlex.join(["python", "benchmarks/vs_rllib.py", *(sys.argv[1:] if argv is None else argv)])
    args.margins = {"pendulum": args.pendulum_margin, "stock": args.stock_margin}
    args.caps = {task: args.cap or (cap / 3 if args.quick else cap) for task, cap in CAPS.items()}
    rllib_python = Path(args.rllib_python)
    if not args.skip_rllib and not rllib_python.exists():
        print(f"RLlib's virtual environment is missing ({rllib_python}): create it with `make rllib-venv` "
              "(or run everything with `make bench`), or point RLLIB_PYTHON / --rllib-python at a Python with "
              "ray[rllib]==2.60.0; --skip-rllib runs Podracer alone.", file=sys.stderr)
        return 2
    targets = {"pendulum": args.pendulum_target}
    if "stock" in args.tasks:
        targets["stock"] = args.stock_target if args.stock_target is not None else stock_target(stock_market())
    print(f"Podracer vs RLlib, {os.cpu_count()} CPUs here, {args.cpus} for each library "
          f"(Podracer: {args.threads} torch thread(s); RLlib: ray.init(num_cpus={args.cpus}), "
          f"{args.rllib_env_runners} env runner(s)), load average {os.getloadavg()[0]:.1f}", flush=True)
    # Torch's OpenMP defaults for both: OMP_WAIT_POLICY=PASSIVE (which `make bench` sets for
    # stock_env.py) slowed RLlib's two-thread learner by a third to a half here.
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    results: dict[str, list[dict[str, Any]]] = {}
    for task in args.tasks:
        ours, theirs = task_seeds(args, task)
        print(f"\n{task}: target {targets[task]:.2f}, training cap {args.caps[task]:.0f} s, Podracer seed(s) "
              f"{', '.join(map(str, ours))}" + ("" if args.skip_rllib else
                                               f", RLlib seed(s) {', '.join(map(str, theirs))}"), flush=True)
        rows = [{**run_side([sys.executable, __file__, "--side", "podracer", "--threads", str(args.threads),
                             *side_args(args, task, targets[task], seed)], env), "seed": seed} for seed in ours]
        if not args.skip_rllib:
            rows += [{**run_side([str(rllib_python), str(SIDE), "--num-cpus", str(args.cpus), "--env-runners",
                                  str(args.rllib_env_runners), "--rllib-eval", args.rllib_eval,
                                  *side_args(args, task, targets[task], seed)], env), "seed": seed}
                     for seed in theirs]
        results[task] = rows

    titles = {"pendulum": f"(a) Pendulum-v1, target mean return {targets['pendulum']:.0f} "
                          f"({args.eval_episodes} fixed-seed gymnasium episodes, deterministic)",
              "stock": f"(b) stock trading, target {targets.get('stock', math.nan):.1f}% on the validation years "
                       "(equal-weight buy-and-hold)" if args.stock_target is None else
                       f"(b) stock trading, target {targets.get('stock', math.nan):.1f}% on the validation years"}
    print(f"\n`{command}` ({os.cpu_count()} CPUs, {args.cpus} per library, load average "
          f"{os.getloadavg()[1]:.1f} over the last 5 minutes)")
    for task, rows in results.items():
        print(f"\n{titles[task]}\n")
        print(table(rows))
        versions = {r["library"]: f"{r['library']}: {r['version']}, {r['settings']}" for r in rows}
        print("\n" + "; ".join(versions.values()))
        update = [f"seed {r['seed']} {r['update_s_to_target']:.2f} s of {r['s_to_target']:.2f} s "
                  f"({r['update_s_to_target'] / r['s_to_target']:.0%})"
                  for r in rows if r["library"] == "podracer" and r["reached"]]
        if update:
            print(f"Podracer's PPO update, of its training to target: {', '.join(update)}; the rest is rollouts "
                  f"(acting, env steps) and GAE. benchmarks/learner_bound.py times the update against its bare "
                  f"arithmetic.")
    if not args.skip_rllib:
        print()
        for task, rows in results.items():
            if not any(r["reached"] for r in rows if r["library"] == "podracer"):
                print(f"{task}: Podracer did not reach the target on any seed: no time-to-target ratio")
                continue
            print(seed_summary(task, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
