"""What adding pods buys: tournament throughput and time to target by pod count, local and Ray backends.

What it measures
----------------
For each backend (``local``: pods as processes on this machine; ``ray``: pods as Ray actors)
and each pod count (default 1, 2, 4), a fresh ``Tournament`` of PPO with one torch thread per
pod, the same ``--generations`` per pod (4) and ``--generation-steps`` per generation (so the
total work grows with the pods), the same seed, on a fresh temporary store. The task (``--task``):

- ``stock`` (default): the finance demo's tournament (``finance.demo``): the bundled 20-stock
  sample, the ``stock_trading`` preset, 65,536 env steps per generation (the demo's full
  size), one-year training episodes from random days of
  2005-2016, each generation scored on the validation years 2017-2018 (% return). Target:
  equal-weight buy-and-hold's return over those years (+20.3%), as in ``vs_rllib.py``;
- ``pendulum``: the ``pendulum`` preset on ``PendulumVecEnv`` (96 sub-envs), scored on 10
  episodes; target -250.

Reported per run:

- ``env_steps``: env steps trained, summed over all generations of all pods;
- ``wall_s``: ``Tournament.run()`` wall-clock, pod start-up included (processes spawned by the
  local backend; Ray actors, each a fresh worker process). ``ray.init`` runs once, before the
  first Ray tournament, and is printed, not counted;
- ``steps_per_s``: ``env_steps / wall_s``, the whole tournament's throughput;
- ``gen_steps_per_s``: throughput inside generations, summed over pods (each pod's trained
  steps over the summed ``wall_time`` of its entries: training and validation, not start-up);
- ``s_to_target``: wall seconds from the start of ``run()`` until the first board entry whose
  score reaches the target (its ``created_at``); ``-`` when none did; ``best``: the board's top;
- ``speed-up``: ``steps_per_s`` over the 1-pod run's on the same backend.

Where the cores run out: the pods are processes, one torch thread each, so throughput grows
with the pods only while there is a free core for each; past the machine's cores the pods share
them and the whole tournament's throughput stays flat (or drops, with the extra processes'
overhead), while each pod's generations get slower. On a 2-core machine that is from 2 pods on.
More pods still buy more of the search (more lineages and hyperparameters tried in the same
wall time), not more speed. On a bigger machine the defaults follow it (``--pods``: 1, 2, 4, ...
up to its cores, at least 4); on a Ray cluster, ``--address auto`` on one of its nodes runs the
Ray backend with 1, 2, 4, ... pods up to the cluster's CPUs (the local backend then stops at
this node's).

How to run
----------
``.venv/bin/python benchmarks/scaling.py`` (about 2.5 minutes on 2 cores; ``--quick``: about 2;
``--pods 1 2 4 8``; ``--backends ray``; ``--task pendulum``). The Ray backend needs ``pip
install "podracer-rl[cluster]"`` (``make install`` has it).
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import podracer  # noqa: E402
from podracer.tournament import Tournament  # noqa: E402

EVAL_EPISODES = 10


def task_setup(task: str) -> tuple[Any, Any, dict[str, Any], float, str]:
    """(make_env, make_eval_env, agent_config, default target, target's description) of ``task``."""
    if task == "pendulum":
        num_envs = podracer.get_preset("ppo", "pendulum").num_envs
        return (functools.partial(podracer.make_env, "pendulum", num_envs=num_envs),
                functools.partial(podracer.make_env, "pendulum", num_envs=EVAL_EPISODES), {}, -250.0,
                f"mean return on {EVAL_EPISODES} episodes")
    from finance.backtest import buy_and_hold
    from finance.demo import PRESET, eval_env, train_env
    from finance.market import prepare_market

    market = prepare_market()
    close = market.close["valid"]
    bh = 100.0 * float(buy_and_hold(close, np.full(close.shape[1], 1.0 / close.shape[1])).metrics()
                       ["cumulative_return"])
    # The market travels inside the partials, as in finance.demo: pickled to each pod.
    return (functools.partial(train_env, market), functools.partial(eval_env, market), dict(PRESET.config), bh,
            "% return on the validation years; default: equal-weight buy-and-hold's")


def run_tournament(backend: str, pods: int, args: argparse.Namespace, setup: tuple) -> dict[str, Any]:
    make_env, make_eval, agent_config, _, _ = setup
    with tempfile.TemporaryDirectory(prefix=f"podracer-scaling-{backend}-{pods}-") as store:
        t = Tournament(make_env, make_eval, agent="ppo", pods=pods, generations=args.generations,
                       generation_steps=args.generation_steps, store=store, backend=backend,
                       agent_config=agent_config, threads_per_pod=args.threads_per_pod, seed=args.seed)
        start_unix, start = time.time(), time.perf_counter()
        t.run(progress=None)
        wall = time.perf_counter() - start
        entries = t.board.entries()
    frame = pd.DataFrame({"id": [e.id for e in entries], "parent_id": [e.parent_id for e in entries],
                          "pod": [e.pod for e in entries], "global_step": [e.global_step for e in entries],
                          "wall_time": [e.wall_time for e in entries], "score": [e.score for e in entries],
                          "created_at": [e.created_at for e in entries]}).set_index("id")
    trained = frame["global_step"] - frame["parent_id"].map(frame["global_step"]).fillna(0)  # per generation
    per_pod = pd.DataFrame({"pod": frame["pod"], "steps": trained, "wall": frame["wall_time"]}).groupby("pod").sum()
    hits = frame.loc[frame["score"] >= args.target, "created_at"]
    row = {"backend": backend, "pods": pods, "entries": len(frame), "env_steps": int(trained.sum()), "wall_s": wall,
           "steps_per_s": float(trained.sum() / wall),
           "gen_steps_per_s": float((per_pod["steps"] / per_pod["wall"]).sum()),
           "s_to_target": float(hits.min() - start_unix) if len(hits) else math.nan,
           "best": float(frame["score"].max())}
    print(f"  {backend:5s} {pods} pod(s): {row['env_steps']:,} env steps in {wall:.1f} s, "
          f"{row['steps_per_s']:,.0f} steps/s, target at {row['s_to_target']:.1f} s, best {row['best']:.2f}",
          flush=True)
    return row


def pod_counts(cpus: int, threads_per_pod: int) -> list[int]:
    """1, 2, 4, ... up to the pods ``cpus`` CPUs hold at ``threads_per_pod`` each, and at least up to 4."""
    most = max(4, cpus // threads_per_pod)
    return [2**i for i in range(int(math.log2(most)) + 1)]


def markdown(frame: pd.DataFrame) -> str:
    """A markdown table of ``frame`` (no index), numbers to 3 significant digits, 1 decimal or whole."""
    def cell(v: Any) -> str:
        if isinstance(v, (float, np.floating)):
            if math.isnan(v):
                return "-"
            if abs(v) < 100 and not v.is_integer():
                return f"{v:.3g}"
            return f"{v:.1f}" if abs(v) < 1000 and not v.is_integer() else f"{v:,.0f}"
        return f"{v:,}" if isinstance(v, (int, np.integer)) else str(v)

    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "|".join("---" for _ in frame.columns) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 generations per pod instead of 4")
    parser.add_argument("--task", choices=("stock", "pendulum"), default="stock")
    parser.add_argument("--target", type=float, default=None, help="score to reach (default: the task's)")
    parser.add_argument("--pods", type=int, nargs="+", default=None,
                        help="pod counts (default: 1, 2, 4, ... up to the CPUs here, or the cluster's with "
                             "--address; at least up to 4)")
    parser.add_argument("--backends", nargs="+", choices=("local", "ray"), default=["local", "ray"])
    parser.add_argument("--generation-steps", type=int, default=None,
                        help="env steps per generation (default: stock 65,536, the demo's; pendulum 20,480)")
    parser.add_argument("--generations", type=int, default=None, help="generations per pod (default 4, quick 2)")
    parser.add_argument("--threads-per-pod", type=int, default=1)
    parser.add_argument("--address", default=None, help="a Ray cluster to join ('auto', 'host:6379'); default: a "
                                                        "local Ray of --num-cpus CPUs")
    parser.add_argument("--num-cpus", type=int, default=None,
                        help="CPUs of the local Ray (default: enough to run every pod at once, as the local "
                             "backend does)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.generations = args.generations or (2 if args.quick else 4)
    args.generation_steps = args.generation_steps or (65_536 if args.task == "stock" else 20_480)
    command = shlex.join(["python", "benchmarks/scaling.py", *(sys.argv[1:] if argv is None else argv)])
    local_cpus = os.cpu_count() or 1

    setup = task_setup(args.task)
    args.target = setup[3] if args.target is None else args.target
    ray = None
    counts = args.pods or pod_counts(local_cpus, args.threads_per_pod)
    cluster_cpus = local_cpus
    if "ray" in args.backends:
        import ray

        t = time.perf_counter()
        if args.address:
            ray.init(address=args.address, logging_level="WARNING")
        else:  # sized like the ray backend's own local instance: every pod runs at once, as with 'local'
            ray.init(address="local", num_cpus=args.num_cpus or max(local_cpus, max(counts) * args.threads_per_pod),
                     include_dashboard=False, logging_level="WARNING")
        cluster_cpus = int(ray.cluster_resources().get("CPU", 1))
        print(f"ray {ray.__version__}: ray.init took {time.perf_counter() - t:.1f} s; {len(ray.nodes())} node(s), "
              f"{cluster_cpus} CPUs", flush=True)
        if args.address:
            counts = args.pods or pod_counts(cluster_cpus, args.threads_per_pod)
    print(f"PPO on {args.task}, {args.generations} generations of {args.generation_steps:,} env steps per pod, "
          f"{args.threads_per_pod} thread(s) per pod, pods {counts}, target {args.target:.2f} ({setup[4]}), "
          f"this machine {local_cpus} CPUs", flush=True)
    rows = []
    try:
        for pods in counts:
            for backend in args.backends:
                if backend == "local" and pods * args.threads_per_pod > local_cpus and args.address:
                    continue  # more pods than this node has CPUs: the cluster's business
                rows.append(run_tournament(backend, pods, args, setup))
    finally:
        if ray is not None:
            ray.shutdown()

    frame = pd.DataFrame(rows)
    one = frame[frame["pods"] == 1].set_index("backend")["steps_per_s"]
    frame["speed-up"] = [f"{r.steps_per_s / one[r.backend]:.2f}x" if r.backend in one.index else "-"
                         for r in frame.itertuples()]
    frame = frame.sort_values(["backend", "pods"], kind="stable")
    where = (f"a Ray cluster of {cluster_cpus} CPUs ({args.address})" if args.address
             else f"one machine, {local_cpus} CPUs")
    print(f"\nTournament throughput and time to target ({args.target:.2f}), {args.task}, {where}, load average "
          f"{os.getloadavg()[1]:.1f} over the last 5 minutes (`{command}`)\n")
    print(markdown(frame))
    cores = cluster_cpus if args.address else local_cpus
    fit = cores // args.threads_per_pod  # pods with a core (or threads_per_pod cores) of their own
    print(f"\nEach pod is a process with {args.threads_per_pod} torch thread(s); {cores} cores here, so up to {fit} "
          f"pod(s) each have their own core(s) and more pods share them.")
    for backend, part in frame.groupby("backend", sort=False):
        inside, past = part[part["pods"] <= fit], part[part["pods"] > fit]
        if len(inside) and len(past):
            a, b = inside.iloc[-1], past.iloc[-1]
            print(f"{backend}: {int(a['pods'])} -> {int(b['pods'])} pods gave {b['steps_per_s'] / a['steps_per_s']:.2f}x "
                  f"the throughput: the cores ran out at {fit} pods, so anything above 1x is overlap (one pod starting, "
                  "validating or writing its checkpoint while another trains), not more compute, and each pod's "
                  "generations run slower; pods past the cores buy more search (lineages, hyperparameters tried), "
                  "not speed.")
    if not args.address:
        print("On a bigger machine the default pod counts go up to its cores; on a Ray cluster, run with --address "
              "auto on one of its nodes: the Ray backend then runs 1, 2, 4, ... pods up to the cluster's CPUs.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
