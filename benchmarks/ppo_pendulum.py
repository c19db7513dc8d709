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
deterministic policy over the same number of episodes (``--eval-episodes``), and both stop at
the first evaluation whose mean return is at least ``--target``. The time reported is training
wall-clock up to that evaluation *excluding* time spent evaluating (evaluation cost differs and
is not what we compare); the total including evaluation is printed too. Training time is taken
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


@dataclass
class Result:
    name: str
    seed: int
    reached: bool
    env_steps: int
    train_s: float  # excluding evaluation
    wall_s: float  # including evaluation
    final_return: float
    cpu_s: float  # CPU seconds of training, excluding evaluation

    def line(self) -> str:
        flag = "" if self.reached else "  (target NOT reached)"
        return (f"{self.name:9s} seed {self.seed}: {self.train_s:7.2f} s train ({self.cpu_s:6.2f} s CPU, "
                f"{self.wall_s:6.2f} s with eval), {self.env_steps:>8d} env steps, eval return "
                f"{self.final_return:8.1f}{flag}")


def run_podracer(seed: int, target: float, eval_every: int, eval_episodes: int, max_steps: int | None,
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
    next_eval, final, steps = eval_every, -float("inf"), 0
    for row in podracer.iterate_training(agent, env, max_steps, seed=seed):
        steps = int(row["global_step"])
        if steps < next_eval and steps < max_steps:
            continue
        t, c = time.perf_counter(), time.process_time()
        final = podracer.evaluate(agent, eval_env, seed=10_000)["eval/return_mean"]  # podracer.train's eval seed
        eval_s, eval_cpu = eval_s + time.perf_counter() - t, eval_cpu + time.process_time() - c
        next_eval = (steps // eval_every + 1) * eval_every
        if final >= target:
            break
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    return Result("podracer", seed, final >= target, steps, wall - eval_s, wall, final, cpu - eval_cpu)


def run_sb3(seed: int, target: float, eval_every: int, eval_episodes: int, max_steps: int) -> Result:
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    class EvalUntil(BaseCallback):
        """Evaluate every ``eval_every`` env steps; stop at the first mean return >= target."""

        def __init__(self) -> None:
            super().__init__()
            self.eval_env = make_vec_env("Pendulum-v1", n_envs=eval_episodes, seed=10_000 + seed)
            self.next_eval, self.eval_s, self.last_return, self.reached = eval_every, 0.0, -float("inf"), False
            self.eval_cpu = 0.0

        def _on_step(self) -> bool:
            if self.num_timesteps < self.next_eval:
                return True
            t, c = time.perf_counter(), time.process_time()
            mean, _ = evaluate_policy(self.model, self.eval_env, n_eval_episodes=eval_episodes, deterministic=True)
            self.eval_s += time.perf_counter() - t
            self.eval_cpu += time.process_time() - c
            self.next_eval = (self.num_timesteps // eval_every + 1) * eval_every
            self.last_return = float(mean)
            self.reached = mean >= target
            return not self.reached

    env = make_vec_env("Pendulum-v1", n_envs=4, seed=seed)
    model = PPO("MlpPolicy", env, n_steps=1024, batch_size=64, gae_lambda=0.95, gamma=0.9, n_epochs=10,
                ent_coef=0.0, learning_rate=1e-3, clip_range=0.2, use_sde=True, sde_sample_freq=4, seed=seed,
                device="cpu", verbose=0)
    callback = EvalUntil()
    start, start_cpu = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=max_steps, callback=callback)
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    return Result("sb3", seed, callback.reached, int(model.num_timesteps), wall - callback.eval_s, wall,
                  callback.last_return, cpu - callback.eval_cpu)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--target", type=float, default=-250.0)
    parser.add_argument("--eval-every", type=int, default=2_000)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--max-steps-ours", type=int, default=None, help="default: the preset's total_steps")
    parser.add_argument("--max-steps-sb3", type=int, default=200_000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", type=device_arg,
                        help="device for our PPO (SB3 always runs on the CPU)")
    parser.add_argument("--skip-sb3", action="store_true")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    print(f"target {args.target}, deterministic eval of {args.eval_episodes} episodes every {args.eval_every} "
          f"env steps, {args.threads} torch thread(s), torch {torch.__version__}")
    ours, theirs = [], []
    for seed in args.seeds:
        ours.append(run_podracer(seed, args.target, args.eval_every, args.eval_episodes, args.max_steps_ours,
                                 args.device))
        print(ours[-1].line(), flush=True)
        if not args.skip_sb3:
            theirs.append(run_sb3(seed, args.target, args.eval_every, args.eval_episodes, args.max_steps_sb3))
            print(theirs[-1].line(), flush=True)

    def med(rs: list[Result], attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in rs)

    print(f"podracer median: {med(ours, 'train_s'):.2f} s ({med(ours, 'cpu_s'):.2f} s CPU), "
          f"{med(ours, 'env_steps'):.0f} env steps, {sum(r.reached for r in ours)}/{len(ours)} reached")
    if theirs:
        print(f"sb3      median: {med(theirs, 'train_s'):.2f} s ({med(theirs, 'cpu_s'):.2f} s CPU), "
              f"{med(theirs, 'env_steps'):.0f} env steps, {sum(r.reached for r in theirs)}/{len(theirs)} reached")
        print(f"speed-up (sb3 / podracer, median train time excluding eval): "
              f"{med(theirs, 'train_s') / med(ours, 'train_s'):.1f}x wall-clock, "
              f"{med(theirs, 'cpu_s') / med(ours, 'cpu_s'):.1f}x CPU time")
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
