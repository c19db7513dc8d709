"""Wall-clock to solve Pendulum: Podracer PPO on batched tensor envs vs Stable-Baselines3 PPO.

What it measures
----------------
For each seed, in the same process on the same machine, one after the other:

- **Podracer**: ``PPO`` with the ``pendulum`` preset on ``PendulumVecEnv`` (its preset number of
  sub-envs), trained by ``podracer.iterate_training`` (the loop of ``podracer.train``) until an
  evaluation reaches the target.
- **SB3**: ``stable_baselines3.PPO`` with the RL-Zoo hyperparameters for Pendulum-v1 (4 envs,
  n_steps 1024, batch 64, gamma 0.9, gae_lambda 0.95, 10 epochs, lr 1e-3, clip 0.2, ent_coef 0,
  gSDE with sde_sample_freq 4) on gymnasium ``Pendulum-v1``, stopped by a callback.

Both are evaluated at the same interval (every ``--eval-every`` env steps, summed over sub-envs,
or at the first chance after it: our PPO can only be evaluated between updates) with the
deterministic policy over the same number of episodes (``--eval-episodes``). Two times are
reported (``podracer.holding``): to the first evaluation whose mean return is at least
``--target`` (first reach), and to a target that holds: the first evaluation at the target after
which the next ``--hold-evals`` evaluations all stay within ``--margin`` of it. Each side trains
until its target has held that long (or its budget ends). The times are training wall-clock up
to that evaluation *excluding* time spent evaluating (evaluation cost differs and is not what we
compare); the total including evaluation is printed too. Training time is taken
on two clocks: the wall clock and the process's CPU clock (``time.process_time``), which on a
shared machine does not count other processes' turns (both train in one thread here, so on a
quiet machine the two agree). Both use the same torch
thread count (``--threads``, default 1: on small MLPs a second thread mostly adds overhead, and
on a shared 2-core machine it adds contention). Runs that never reach the target within
``--max-steps`` count as that budget's time and are flagged. Ours defaults to the preset's
``total_steps``: the budget the preset promises to solve within, and the run length that its
learning-rate schedule (``anneal_lr``) is set for.

How to run
----------
``.venv/bin/python benchmarks/ppo_pendulum.py`` (about a minute per seed; ``--seeds 0 1 2``;
``--skip-sb3`` for ours only). It prints one line per run, then the medians and their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass

import torch

from podracer.cli import device_arg
from podracer.holding import EvalLog


@dataclass
class Result:
    name: str
    seed: int
    reached: bool
    env_steps: int
    train_s: float  # excluding evaluation, to the first reach (the whole run when never reached)
    wall_s: float  # including evaluation, the whole run
    final_return: float
    cpu_s: float  # CPU seconds of training, excluding evaluation, to the first reach
    held: bool = False  # a holding target was found (reached and kept for --hold-evals evaluations)
    hold_s: float = float("nan")  # training seconds to the holding target (the whole run when none)
    hold_cpu_s: float = float("nan")
    hold_steps: int = 0

    def line(self) -> str:
        flag = "" if self.reached else "  (target NOT reached)"
        hold = (f"holds from {self.hold_s:.2f} s ({self.hold_cpu_s:.2f} s CPU, {self.hold_steps} env steps)"
                if self.held else "target NOT held")
        return (f"{self.name:9s} seed {self.seed}: first reach {self.train_s:7.2f} s train ({self.cpu_s:6.2f} s CPU), "
                f"{self.env_steps:>8d} env steps; {hold}; {self.wall_s:6.2f} s with eval, last eval return "
                f"{self.final_return:8.1f}{flag}")


def timed(name: str, seed: int, log: EvalLog, cpu: list[float], wall_s: float, total_s: float, total_cpu: float,
          steps: int) -> Result:
    """A Result from a run's evaluation log (``cpu``: CPU seconds at each evaluation); a run that
    never reached (or never held) counts its whole training time, flagged."""
    r = log.result()
    first = log.steps.index(r.first_steps) if r.reached else None
    hold = log.steps.index(r.hold_steps) if r.hold_steps is not None and log.done() else None
    return Result(name, seed, r.reached, r.first_steps if r.reached else steps,
                  log.seconds[first] if first is not None else total_s, wall_s, r.last_return,
                  cpu[first] if first is not None else total_cpu, held=hold is not None,
                  hold_s=log.seconds[hold] if hold is not None else total_s,
                  hold_cpu_s=cpu[hold] if hold is not None else total_cpu,
                  hold_steps=log.steps[hold] if hold is not None else steps)


def run_podracer(seed: int, log: EvalLog, eval_every: int, eval_episodes: int, max_steps: int | None,
                 device: str) -> Result:
    import podracer

    preset = podracer.get_preset("ppo", "pendulum")
    env = podracer.make_env("pendulum", num_envs=preset.num_envs, device=device)
    eval_env = podracer.make_env("pendulum", num_envs=eval_episodes, device=device)
    podracer.seed_everything(seed)
    agent = podracer.make_agent("ppo", env, seed=seed, verbose=False)  # picks the "pendulum" preset
    max_steps = max_steps or preset.total_steps
    start, start_cpu = time.perf_counter(), time.process_time()
    eval_s = eval_cpu = 0.0
    next_eval, steps, cpu_at = eval_every, 0, []
    for row in podracer.iterate_training(agent, env, max_steps, seed=seed):
        steps = int(row["global_step"])
        if steps < next_eval and steps < max_steps:
            continue
        t, c = time.perf_counter(), time.process_time()
        train_s, train_cpu = t - start - eval_s, c - start_cpu - eval_cpu
        final = podracer.evaluate(agent, eval_env, seed=10_000)["eval/return_mean"]  # podracer.train's eval seed
        eval_s, eval_cpu = eval_s + time.perf_counter() - t, eval_cpu + time.process_time() - c
        log.add(steps, train_s, final)
        cpu_at.append(train_cpu)
        next_eval = (steps // eval_every + 1) * eval_every
        if log.done():
            break
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    return timed("podracer", seed, log, cpu_at, wall, wall - eval_s, cpu - eval_cpu, steps)


def run_sb3(seed: int, log: EvalLog, eval_every: int, eval_episodes: int, max_steps: int) -> Result:
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    class EvalUntil(BaseCallback):
        """Evaluate every ``eval_every`` env steps; stop once the target has held (``log.done()``)."""

        def __init__(self) -> None:
            super().__init__()
            self.eval_env = make_vec_env("Pendulum-v1", n_envs=eval_episodes, seed=10_000 + seed)
            self.next_eval, self.eval_s, self.eval_cpu, self.cpu_at = eval_every, 0.0, 0.0, []

        def _on_step(self) -> bool:
            if self.num_timesteps < self.next_eval:
                return True
            t, c = time.perf_counter(), time.process_time()
            train_s, train_cpu = t - start - self.eval_s, c - start_cpu - self.eval_cpu
            mean, _ = evaluate_policy(self.model, self.eval_env, n_eval_episodes=eval_episodes, deterministic=True)
            self.eval_s += time.perf_counter() - t
            self.eval_cpu += time.process_time() - c
            self.next_eval = (self.num_timesteps // eval_every + 1) * eval_every
            log.add(self.num_timesteps, train_s, float(mean))
            self.cpu_at.append(train_cpu)
            return not log.done()

    env = make_vec_env("Pendulum-v1", n_envs=4, seed=seed)
    model = PPO("MlpPolicy", env, n_steps=1024, batch_size=64, gae_lambda=0.95, gamma=0.9, n_epochs=10,
                ent_coef=0.0, learning_rate=1e-3, clip_range=0.2, use_sde=True, sde_sample_freq=4, seed=seed,
                device="cpu", verbose=0)
    callback = EvalUntil()
    start, start_cpu = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=max_steps, callback=callback)
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    return timed("sb3", seed, log, callback.cpu_at, wall, wall - callback.eval_s, cpu - callback.eval_cpu,
                 int(model.num_timesteps))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--target", type=float, default=-250.0)
    parser.add_argument("--eval-every", type=int, default=2_000)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--margin", type=float, default=50.0, help="how far below --target a held target may fall")
    parser.add_argument("--hold-evals", type=int, default=10,
                        help="evaluations after the holding one that must stay within --margin")
    parser.add_argument("--max-steps-ours", type=int, default=None, help="default: the preset's total_steps")
    parser.add_argument("--max-steps-sb3", type=int, default=200_000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", type=device_arg,
                        help="device for our PPO (SB3 always runs on the CPU)")
    parser.add_argument("--skip-sb3", action="store_true")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    print(f"target {args.target}, deterministic eval of {args.eval_episodes} episodes every {args.eval_every} "
          f"env steps, held: kept within {args.margin} of it for {args.hold_evals} evaluations, "
          f"{args.threads} torch thread(s), torch {torch.__version__}")
    ours, theirs = [], []
    for seed in args.seeds:
        ours.append(run_podracer(seed, EvalLog(args.target, args.margin, args.hold_evals), args.eval_every,
                                 args.eval_episodes, args.max_steps_ours, args.device))
        print(ours[-1].line(), flush=True)
        if not args.skip_sb3:
            theirs.append(run_sb3(seed, EvalLog(args.target, args.margin, args.hold_evals), args.eval_every,
                                  args.eval_episodes, args.max_steps_sb3))
            print(theirs[-1].line(), flush=True)

    def med(rs: list[Result], attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in rs)

    for name, rs in (("podracer", ours), ("sb3", theirs)):
        if rs:
            print(f"{name:8s} median: first reach {med(rs, 'train_s'):.2f} s ({med(rs, 'cpu_s'):.2f} s CPU), "
                  f"{med(rs, 'env_steps'):.0f} env steps, {sum(r.reached for r in rs)}/{len(rs)} reached; holding "
                  f"target {med(rs, 'hold_s'):.2f} s ({med(rs, 'hold_cpu_s'):.2f} s CPU), {med(rs, 'hold_steps'):.0f} "
                  f"env steps, {sum(r.held for r in rs)}/{len(rs)} held")
    if theirs:
        for label, wall, cpu in (("first reach", "train_s", "cpu_s"), ("holding target", "hold_s", "hold_cpu_s")):
            print(f"speed-up to the {label} (sb3 / podracer, median train time excluding eval): "
                  f"{med(theirs, wall) / med(ours, wall):.1f}x wall-clock, {med(theirs, cpu) / med(ours, cpu):.1f}x "
                  f"CPU time")
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
