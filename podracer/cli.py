"""The ``podracer`` console command (also ``python -m podracer``).

Train one pod and evaluate it, evaluate a saved checkpoint, or run a tournament of pods on
this machine or a Ray cluster (the same command with ``--backend ray``)::

    podracer train ppo pendulum --steps 300000 --num-envs 256 --seed 0 --log-dir runs/ppo_pendulum
    podracer train ppo cartpole --set learning_rate=1e-3 --set hidden_sizes=[128,128]
    podracer eval runs/ppo_pendulum/checkpoints/last.pt pendulum --episodes 32
    podracer tournament ppo pendulum --pods 4 --generations 5 --store runs/t_pendulum
    podracer tournament ppo pendulum --pods 16 --generations 5 --backend ray --address auto

``ENV`` is a registered env name (``podracer.registered_envs()``: the tensor envs "pendulum" and
"cartpole", and what installed domains register, such as "HalfCheetah") or any registered
gymnasium id (through the adapter). When the agent has a tuned preset for ``ENV`` (``podracer.presets()``), its config,
sub-env count and training length are the defaults; ``--num-envs``, ``--steps`` and ``--set``
override them (a preset's learning-rate annealing follows ``--steps``, as ``train`` does from
Python). ``AGENT`` is a registry name or ``package.module:Class``. Torch runs on one CPU thread
unless ``--threads`` (or the environment variable ``PODRACER_NUM_THREADS``) says otherwise.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from pathlib import Path
from typing import Any, Sequence

import yaml


ENV_HELP = ('a registered env ("pendulum", "cartpole", and what installed domains register, such as '
            '"HalfCheetah"; podracer.registered_envs() lists them) or a gymnasium id')

def _parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """``["key=value", ...]`` -> dict, values parsed as YAML (``1e-3``, ``true``, ``[64, 64]``)."""
    overrides: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--set expects key=value (for example --set learning_rate=1e-3), got {item!r}")
        overrides[key.strip()] = yaml.safe_load(value)
    return overrides


def _fmt_eval(result: dict[str, float]) -> str:
    return (f"return {result['eval/return_mean']:.1f} ± {result['eval/return_std']:.1f} over "
            f"{int(result['eval/episodes'])} episodes (mean length {result['eval/length_mean']:.0f})")


def cmd_train(args: argparse.Namespace) -> int:
    import podracer
    from podracer.agents.registry import resolve_agent
    from podracer.agents.registry import find_preset

    try:
        agent_cls = resolve_agent(args.agent)
    except (ValueError, TypeError, ImportError, AttributeError) as err:  # the message lists the available agents
        raise SystemExit(f"podracer train: {err}") from None
    preset = find_preset(agent_cls, args.env)  # presets are optional per agent and task
    num_envs = args.num_envs or (preset.num_envs if preset else 16)
    steps = args.steps or (preset.total_steps if preset else 100_000)
    overrides = _parse_overrides(args.set)
    log_dir = Path(args.log_dir or f"runs/{args.agent.lower().replace(':', '_')}_{args.env.lower()}_seed{args.seed}")

    try:  # an unknown env name or --set key: the messages list the valid ones
        env = podracer.make_env(args.env, num_envs=num_envs, device=args.device)
        eval_env = podracer.make_env(args.env, num_envs=args.eval_episodes, device=args.device)
        podracer.seed_everything(args.seed)
        # The same call as from Python: the preset (if any) by the env's task, --set on top; its
        # learning-rate annealing (anneal_lr) follows the run length, --steps here.
        agent = podracer.make_agent(agent_cls, env, seed=args.seed, verbose=False, **overrides)
    except ValueError as err:
        raise SystemExit(f"podracer train: {err}") from None
    print(f"training {agent_cls.__name__} on {args.env} ({num_envs} sub-envs, {steps} steps, "
          f"{'preset ' + repr(args.env.lower()) if preset else 'default config'}) -> {log_dir}")
    agent, history = podracer.train(agent, env, steps, eval_env=eval_env, eval_every=args.eval_every,
                                    seed=args.seed, log_dir=log_dir, checkpoint_every=args.checkpoint_every,
                                    progress=not args.no_progress, target_return=args.target_return,
                                    threads=args.threads)
    last_eval = history.dropna(subset=["eval/return_mean"]).iloc[-1]
    final = {k: float(v) for k, v in last_eval.items() if k.startswith("eval/")}
    last = history.iloc[-1]
    print(f"final eval after {int(last['global_step'])} steps ({last['time/wall_s']:.1f} s, "
          f"{last['charts/steps_per_second']:.0f} steps/s): {_fmt_eval(final)}")
    print(f"checkpoint: {log_dir / 'checkpoints' / 'last.pt'}; progress: {log_dir / 'progress.csv'}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    import torch

    import podracer
    from podracer.agents.common import AgentBase
    from podracer.train import training_threads

    path = Path(args.checkpoint)
    if not path.is_file():
        raise SystemExit(f"podracer eval: no checkpoint at {path}; train one with `podracer train ... --log-dir DIR` "
                         f"and pass DIR/checkpoints/last.pt")
    torch.set_num_threads(training_threads(args.threads))
    try:
        agent = AgentBase.load(path, device=args.device)
    except (podracer.CheckpointError, ValueError, TypeError, ImportError) as err:
        raise SystemExit(f"podracer eval: {err}") from None
    try:
        env = podracer.make_env(args.env, num_envs=args.episodes, device=args.device)
    except ValueError as err:
        raise SystemExit(f"podracer eval: {err}") from None
    if env.single_observation_space.shape != agent.observation_space.shape:
        raise SystemExit(f"podracer eval: checkpoint expects observations of shape {agent.observation_space.shape}, "
                         f"env {args.env!r} gives {env.single_observation_space.shape}")
    print(f"{agent.name} from {path} on {args.env}: {_fmt_eval(podracer.evaluate(agent, env, seed=args.seed))}")
    return 0


def cmd_tournament(args: argparse.Namespace) -> int:
    import functools

    import podracer
    from podracer.agents.registry import resolve_agent
    from podracer.agents.registry import find_preset
    from podracer.tournament.leaderboard import EXPORT_SUFFIXES

    try:
        agent_cls = resolve_agent(args.agent)
    except (ValueError, TypeError, ImportError, AttributeError) as err:
        raise SystemExit(f"podracer tournament: {err}") from None
    preset = find_preset(agent_cls, args.env)
    num_envs = args.num_envs or (preset.num_envs if preset else 16)
    # functools.partial of podracer.make_env: picklable for the pods, and a trusted name in the store
    make_env = functools.partial(podracer.make_env, args.env, num_envs=num_envs, device=args.device)
    make_eval_env = functools.partial(podracer.make_env, args.env, num_envs=args.eval_episodes, device=args.device)
    store = Path(args.store or f"runs/tournament_{args.agent.lower().replace(':', '_')}_{args.env.lower()}")
    options = {k: v for k, v in dict(address=args.address, gpus_per_pod=args.gpus_per_pod,
                                      threads_per_pod=args.threads_per_pod, time_budget=args.time_budget,
                                      storage_path=args.storage_path).items()
               if v is not None}
    pods: int | str = args.pods  # a positive int or "auto" (pods_arg)
    if args.export and Path(args.export).suffix.lower() not in EXPORT_SUFFIXES:  # now, not after the run
        raise SystemExit(f"podracer tournament: --export {args.export}: name the file *.csv or *.parquet")
    try:
        make_env()  # an unknown env name fails here, with the list of names, not in every pod
        tournament = podracer.Tournament(make_env, make_eval_env, agent=args.agent, pods=pods,
                                         generation_steps=args.generation_steps, generations=args.generations,
                                         entries=args.entries, store=store, backend=args.backend, seed=args.seed,
                                         agent_config=_parse_overrides(args.set), **options)
    except (ValueError, ImportError) as err:  # bad settings, a different tournament in the store, Ray missing
        raise SystemExit(f"podracer tournament: {err}") from None
    print(f"{tournament} on {args.env} ({num_envs} sub-envs per pod, backend {args.backend})")
    try:
        board = tournament.run(progress=None if args.no_progress else "bar")
    except (ValueError, RuntimeError, ImportError) as err:  # e.g. $RAY_ADDRESS unusable, pods that keep failing
        raise SystemExit(f"podracer tournament: {err}") from None
    frame = board.to_frame()
    # The lineage's env steps: "global_step" once the board names it as the agents do, "env_steps" before.
    steps = next((c for c in ("global_step", "env_steps") if c in frame.columns), "")
    columns = [c for c in ("parent_id", "generation", "pod", "score", steps, "changes") if c in frame.columns]
    print(frame[columns].head(args.show).to_string(float_format=lambda x: f"{x:.1f}"))
    best = board.top(1)
    if best:
        print(f"best: entry {best[0].id}, score {best[0].score:.1f}; board of {len(board)} entries in {store} "
              f"(podracer.Leaderboard({str(store)!r}) reads it; run again to resume)")
    if args.export:
        print(f"board exported to {board.export(args.export)}")
    return 0


THREADS_HELP = ("torch CPU threads (default: $PODRACER_NUM_THREADS, else 1: on small MLPs more threads mostly "
                "add overhead, and on a busy machine contention; docs/performance.md)")


def positive_int(text: str) -> int:
    """An argparse type for counts (steps, sub-envs, episodes, threads), ``1e6`` included: argparse's own
    usage error for 0 or less, not a traceback from deep in training, nor a 0 silently read as "the default"."""
    try:
        value = int(text)
    except ValueError:
        try:
            number = float(text)  # 1e6 and 2.5e5 are whole numbers too
        except ValueError:
            number = math.nan
        if not number.is_integer():
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        value = int(number)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {value}")
    return value


def device_arg(text: str, here: bool = True) -> str:
    """``--device``: a device torch knows and, with ``here``, this machine has (``resolve_device``'s
    reason as argparse's usage error). ``here=False`` checks the name alone: a tournament's GPU pods
    may run on nodes of a cluster whose driver has none. The text is kept (``cuda``, not ``cuda:0``)."""
    from podracer.envs import parse_device, resolve_device

    try:
        resolve_device(text) if here else parse_device(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def pods_arg(text: str) -> int | str:
    """``--pods``: a positive whole number or "auto"."""
    if text == "auto":
        return text
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected a positive whole number or 'auto', got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="podracer", description="Train and evaluate Podracer agents.")
    sub = parser.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train one pod",
                       description="Train AGENT on ENV; log and checkpoint to --log-dir.")
    t.add_argument("agent", help="agent name, e.g. ppo")
    t.add_argument("env", help=ENV_HELP)
    t.add_argument("--steps", type=positive_int, default=None,
                   help="env steps summed over sub-envs (default: preset or 100000)")
    t.add_argument("--num-envs", type=positive_int, default=None,
                   help="sub-envs stepped together (default: preset or 16)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--log-dir", default=None, help="default runs/<agent>_<env>_seed<seed>")
    t.add_argument("--device", default="cpu", type=device_arg, help="cpu, cuda, cuda:1, ...")
    t.add_argument("--eval-every", type=positive_int, default=20_000, help="env steps between evaluations")
    t.add_argument("--eval-episodes", type=positive_int, default=16,
                   help="episodes per evaluation (one per eval sub-env)")
    t.add_argument("--checkpoint-every", type=positive_int, default=None, help="env steps between extra checkpoints")
    t.add_argument("--target-return", type=float, default=None, help="stop at the first eval reaching this")
    t.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field, value as YAML (repeatable)")
    t.add_argument("--threads", type=positive_int, default=None, help=THREADS_HELP)
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.set_defaults(func=cmd_train)

    e = sub.add_parser("eval", help="evaluate a checkpoint", description="Deterministic evaluation of a saved agent.")
    e.add_argument("checkpoint", help="a .pt file written by agent.save / podracer train")
    e.add_argument("env", help=ENV_HELP)
    e.add_argument("--episodes", type=positive_int, default=16, help="episodes (one per sub-env)")
    e.add_argument("--seed", type=int, default=10_000)
    e.add_argument("--device", default="cpu", type=device_arg)
    e.add_argument("--threads", type=positive_int, default=None, help=THREADS_HELP)
    e.set_defaults(func=cmd_eval)

    r = sub.add_parser("tournament", help="train a pool of pods against one leaderboard (local or Ray)",
                       description="Population based training of AGENT on ENV: pods train, evaluate and submit to "
                                   "the leaderboard in --store; run again with the same store to resume.")
    r.add_argument("agent", help="agent name, e.g. ppo")
    r.add_argument("env", help=ENV_HELP)
    r.add_argument("--pods", type=pods_arg, default=4,
                   help='pods training at once, or "auto": as many as the machine or cluster holds, following '
                        'it as nodes join and leave (default 4)')
    r.add_argument("--generations", type=positive_int, default=5,
                   help="generations per pod: the budget is pods * this")
    r.add_argument("--entries", type=positive_int, default=None,
                   help="board entries to reach instead (needed with --pods auto unless --time-budget is given)")
    r.add_argument("--generation-steps", type=positive_int, default=20_000, help="env steps per generation")
    r.add_argument("--time-budget", type=float, default=None, help="seconds; pods finish their generation, then stop")
    r.add_argument("--num-envs", type=positive_int, default=None, help="sub-envs per pod (default: preset or 16)")
    r.add_argument("--eval-episodes", type=positive_int, default=16, help="validation episodes per generation")
    r.add_argument("--store", default=None, help="leaderboard directory (default runs/tournament_<agent>_<env>)")
    r.add_argument("--backend", default="local", choices=["local", "ray"])
    r.add_argument("--address", default=None, help='ray: cluster to join ("auto" on a cluster node; default '
                                                   '$RAY_ADDRESS, else a local Ray instance)')
    r.add_argument("--gpus-per-pod", type=float, default=None, help="ray: GPUs per pod, fractions allowed")
    r.add_argument("--threads-per-pod", type=positive_int, default=None,
                   help="torch threads (and CPUs asked of Ray) per pod")
    r.add_argument("--device", default="cpu", type=functools.partial(device_arg, here=False),
                   help="device of each pod's envs and agent (cuda on GPU pods)")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override an agent config field, value as YAML (repeatable)")
    r.add_argument("--storage-path", default=None, help="URI the store is mirrored to, to outlive this node "
                                                        "(s3://bucket/run, gs://..., file:///mnt/...); resume with "
                                                        "podracer.Tournament.from_store(URI)")
    r.add_argument("--export", default=None, metavar="PATH", help="write the final board to PATH (.csv or .parquet)")
    r.add_argument("--show", type=int, default=10, help="board rows printed at the end")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.set_defaults(func=cmd_tournament)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
