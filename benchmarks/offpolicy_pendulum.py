"""Time and env steps to a deterministic eval return >= -250 on Pendulum: Podracer SAC / TD3 vs
Stable-Baselines3 SAC / TD3.

Podracer: ``make_agent(name, PendulumVecEnv(8), preset="pendulum")`` (``podracer.get_preset(name,
"pendulum")``) trained by ``podracer.iterate_training`` (the loop of ``podracer.train``), stopped at
the target. SB3: ``SAC("MlpPolicy")`` / ``TD3("MlpPolicy")`` with default settings on gymnasium's
``Pendulum-v1`` (one env). Both are evaluated by ``podracer.evaluate`` every ``--eval-every`` env
steps on the same 10 episodes (``PendulumVecEnv(10)``, same dynamics as Pendulum-v1, reset with
seed 10_000), deterministic actions; training time excludes evaluation.
Both run in this process, one after the other, with the same torch thread count.

Two times each (``podracer.holding``): to the first evaluation >= -250 (first reach), and to a
target that holds: the first evaluation >= -250 after which the next ``--hold-evals`` evaluations
stay within ``--margin`` (50) of it. Each side trains on until its target has held that long.

Two clocks: wall-clock seconds, and the process's CPU seconds (``time.process_time``). Both
libraries train in one thread here, so on a quiet machine the two agree; on a shared one the wall
clock also counts other processes' turns, which land on whichever library runs at that moment,
and the CPU ratio is the steadier one. Our aims: SAC 8x and TD3 12x SB3's time, with at
most 0.6x and 0.45x its env steps.

    .venv/bin/python benchmarks/offpolicy_pendulum.py [--seeds 0,1,2] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Callable

import gymnasium as gym
import numpy as np
import torch

import podracer
from podracer import evaluate, iterate_training, make_agent
from podracer.envs import PendulumVecEnv
from podracer.holding import EvalLog

TARGET = -250.0
EVAL_SEED = 10_000  # podracer.train's default eval seed
AIMS = {"sac": (8.0, 0.6), "td3": (12.0, 0.45)}  # speed-up at least, env steps ours/SB3 at most


class Clock:
    """Training seconds on the wall clock and the process's CPU clock, evaluations excluded."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        self.eval_wall = self.eval_cpu = 0.0

    def evaluate(self, fn: Callable[[], float]) -> float:
        """``fn()``, off the clock."""
        wall, cpu = time.perf_counter(), time.process_time()
        out = fn()
        self.eval_wall += time.perf_counter() - wall
        self.eval_cpu += time.process_time() - cpu
        return out

    def seconds(self) -> tuple[float, float]:
        return (time.perf_counter() - self.wall - self.eval_wall, time.process_time() - self.cpu - self.eval_cpu)


def timed(log: EvalLog, cpu_at: list[float], clock: Clock) -> dict[str, float]:
    """Steps and seconds (wall, CPU) to the first reach and to the holding target; nan steps and
    the whole run's seconds where a run never got there."""
    r, (train_s, cpu_s) = log.result(), clock.seconds()
    out = {"return": r.last_return}
    hold = r.hold_steps if log.done() else None
    for key, at in (("", r.first_steps), ("hold_", hold)):
        i = None if at is None else log.steps.index(at)
        out[f"{key}steps"] = float("nan") if i is None else float(at)
        out[f"{key}train_s"] = train_s if i is None else log.seconds[i]
        out[f"{key}cpu_s"] = cpu_s if i is None else cpu_at[i]
    return out


def run_podracer(name: str, seed: int, eval_every: int, max_steps: int, log: EvalLog) -> dict[str, float]:
    preset = podracer.get_preset(name, "pendulum")
    podracer.seed_everything(seed)
    env = PendulumVecEnv(num_envs=preset.num_envs)
    agent = make_agent(name, env, seed=seed, preset="pendulum", verbose=False)
    chunk = agent.steps_per_train_step(env.num_envs)
    if eval_every % chunk:
        raise ValueError(f"--eval-every must be a multiple of the {chunk} env steps of one train_step")
    eval_env = PendulumVecEnv(num_envs=10)
    clock, cpu_at = Clock(), []
    for row in iterate_training(agent, env, max_steps, seed=seed):
        steps = int(row["global_step"])
        if steps % eval_every:
            continue
        train_s, cpu_s = clock.seconds()
        log.add(steps, train_s, clock.evaluate(lambda: evaluate(agent, eval_env, seed=EVAL_SEED)["eval/return_mean"]))
        cpu_at.append(cpu_s)
        if log.done():
            break
    return timed(log, cpu_at, clock)


def run_sb3(name: str, seed: int, eval_every: int, max_steps: int, log: EvalLog) -> dict[str, float]:
    from stable_baselines3 import SAC, TD3
    from stable_baselines3.common.callbacks import BaseCallback

    eval_env = PendulumVecEnv(num_envs=10)

    class EvalUntilTarget(BaseCallback):
        """Evaluate every ``eval_every`` steps with podracer.evaluate; stop once the target held."""

        def _on_step(self) -> bool:
            if self.num_timesteps % eval_every:
                return True
            policy = lambda obs: torch.as_tensor(self.model.predict(obs.numpy(), deterministic=True)[0])
            train_s, cpu_s = clock.seconds()
            log.add(self.num_timesteps, train_s,
                    clock.evaluate(lambda: evaluate(policy, eval_env, seed=EVAL_SEED)["eval/return_mean"]))
            cpu_at.append(cpu_s)
            return not log.done()

    podracer.seed_everything(seed)
    model = {"sac": SAC, "td3": TD3}[name]("MlpPolicy", gym.make("Pendulum-v1"), seed=seed, device="cpu")
    callback, cpu_at = EvalUntilTarget(), []
    clock = Clock()
    model.learn(max_steps, callback=callback)
    return timed(log, cpu_at, clock)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0", help="comma-separated seeds, e.g. 0,1,2")
    parser.add_argument("--algos", default="sac,td3")
    parser.add_argument("--eval-every", type=int, default=200)
    parser.add_argument("--max-steps", type=int, default=20_000, help="give up after this many env steps")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads, both libraries")
    parser.add_argument("--margin", type=float, default=50.0, help="how far below the target a held target may fall")
    parser.add_argument("--hold-evals", type=int, default=10,
                        help="evaluations after the holding one that must stay within --margin")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    seeds = [int(s) for s in args.seeds.split(",")]

    print(f"first deterministic eval >= {TARGET} (10 episodes every {args.eval_every} steps), and a target that "
          f"holds (kept within {args.margin} of it for {args.hold_evals} evaluations), {args.threads} torch "
          f"thread(s); train time excludes evaluation; load average {os.getloadavg()[0]:.1f}")
    print(f"{'algo':5} {'seed':>4} {'to':>5} | {'podracer steps':>14} {'wall s':>7} {'cpu s':>6} | {'sb3 steps':>9} "
          f"{'wall s':>7} {'cpu s':>6} | {'speed-up wall':>13} {'cpu':>6} {'steps ratio':>11}")
    summary: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for name in args.algos.split(","):
        for seed in seeds:
            ours = run_podracer(name, seed, args.eval_every, args.max_steps, EvalLog(TARGET, args.margin, args.hold_evals))
            ref = run_sb3(name, seed, args.eval_every, args.max_steps, EvalLog(TARGET, args.margin, args.hold_evals))
            for key, label in (("", "first"), ("hold_", "hold")):
                # nan where either run never got there: no honest ratio then.
                got = not (np.isnan(ours[f"{key}steps"]) or np.isnan(ref[f"{key}steps"]))
                speedup = ref[f"{key}train_s"] / ours[f"{key}train_s"] if got else float("nan")
                speedup_cpu = ref[f"{key}cpu_s"] / ours[f"{key}cpu_s"] if got else float("nan")
                steps_ratio = ours[f"{key}steps"] / ref[f"{key}steps"]
                summary.setdefault((name, label), []).append((speedup, speedup_cpu, steps_ratio))
                print(f"{name:5} {seed:>4} {label:>5} | {ours[f'{key}steps']:>14.0f} {ours[f'{key}train_s']:>7.1f} "
                      f"{ours[f'{key}cpu_s']:>6.1f} | {ref[f'{key}steps']:>9.0f} {ref[f'{key}train_s']:>7.1f} "
                      f"{ref[f'{key}cpu_s']:>6.1f} | {speedup:>12.1f}x {speedup_cpu:>5.1f}x {steps_ratio:>11.2f}",
                      flush=True)
    for (name, label), rows in summary.items():
        speedups, speedups_cpu, ratios = np.array(rows).T
        what = "first reach" if label == "first" else "holding target"
        line = (f"{name} to the {what}: median speed-up {np.nanmedian(speedups):.1f}x wall-clock, "
                f"{np.nanmedian(speedups_cpu):.1f}x CPU time; median steps ours/SB3 {np.nanmedian(ratios):.2f} (nan: a "
                f"run that never got there within --max-steps)")
        if name in AIMS:
            speed, steps = AIMS[name]
            met = np.nanmedian(speedups) >= speed and np.nanmedian(ratios) <= steps
            line += f"; aim {speed:.0f}x at <= {steps}x the steps: {'met' if met else 'NOT met'} on the wall clock"
        print(line)
    print(f"load average after: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
