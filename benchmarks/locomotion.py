"""Locomotion: env throughput per backend, and Podracer SAC vs Stable-Baselines3 SAC on HalfCheetah-v5.

What it measures
----------------
(a) **Env steps per second** (summed over sub-envs) with uniform random actions, for each
    installed backend of ``locomotion.make_env`` (``envpool``, ``gymnasium``, ``warp``) and each
    task, at several sub-env counts (1, 16, 64, 256; 4096 added on a GPU). The peer is gymnasium's
    own vector env, ``gymnasium.make_vec(id, n, vectorization_mode="sync")`` stepped with NumPy
    actions: the ratio column is backend / peer at the same sub-env count, so ``gymnasium`` shows
    what our tensor adapter costs and ``envpool`` what C++ batching gains. Every run first resets
    and steps a few times untimed: that excludes MuJoCo Warp's kernel compilation (it compiles on
    first use, tens of seconds on a CPU; printed separately as ``first use s``) and envpool's
    thread start. Then it steps for ``--seconds`` of wall-clock. Actions are made before timing.
(b) **SAC on HalfCheetah-v5, same wall-clock budget each** (``--budget`` s, default 600;
    ``--quick``: 120), one after the other in this process with the same torch thread count:
    Podracer SAC with its ``halfcheetah`` preset (``make_agent("sac", env)`` picks it; envpool
    sub-envs on the CPU) and Stable-Baselines3 SAC with RL Zoo's HalfCheetah settings (SB3
    defaults, ``learning_starts=10000``) on one ``gym.make("HalfCheetah-v5")``. Both are evaluated
    the same way at each quarter of the budget: ``podracer.evaluate`` with deterministic actions
    on 5 episodes of gymnasium's own HalfCheetah-v5 (``backend="gymnasium"``, reset with seed
    10_000, sub-env i seeded 10_000 + i). Evaluation time is not charged to the budget. A random
    policy scores about -280 there, the untrained deterministic one about 0.

The machine's load average is printed: on a shared machine other processes slow both sides.

How to run
----------
``.venv/bin/python benchmarks/locomotion.py --quick`` (about 10 min on a 2-core CPU; part (a) on
HalfCheetah and Ant only); without ``--quick`` every task and 10 min per SAC run (about 35 min).
``--skip-envs`` / ``--skip-sac`` run one part.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Callable

# Run as a script, this file's folder comes first on sys.path and "import locomotion" would import
# this file; drop it so the package is found.
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import locomotion  # noqa: E402
import podracer  # noqa: E402
from locomotion.make import choose_device  # noqa: E402
from podracer.cli import device_arg  # noqa: E402

EVAL_SEED, EVAL_EPISODES = 10_000, 5


def load() -> str:
    return "load average (1, 5, 15 min): " + ", ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} CPUs"


# ---------------------------------------------------------------------------- (a) env throughput
def time_steps(step: Callable[[Any], Any], actions: list[Any], seconds: float) -> float:
    """Env-step calls per second: call ``step`` on the prepared actions (cycled) for ``seconds``."""
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds or calls < 2:
        step(actions[calls % len(actions)])
        calls += 1
    return calls / elapsed


def ours(backend: str, task: str, n: int, device: str, seconds: float) -> tuple[float, float]:
    """(env steps/s, seconds of first use: build, reset and 3 untimed steps) of ``locomotion.make_env``."""
    start = time.perf_counter()
    env = locomotion.make_env(task, n, device=device, backend=backend, seed=0, verbose=False)
    low, high = (torch.as_tensor(b, device=env.device) for b in (env.single_action_space.low,
                                                                 env.single_action_space.high))
    gen = torch.Generator(device=env.device).manual_seed(0)
    actions = [low + (high - low) * torch.rand((n, *low.shape), generator=gen, device=env.device) for _ in range(16)]
    env.reset()
    for a in actions[:3]:  # warp compiles its kernels here
        env.step(a)
    if env.device.type == "cuda":
        torch.cuda.synchronize()
    first_use = time.perf_counter() - start

    def step(a: torch.Tensor) -> None:
        env.step(a)
        if env.device.type == "cuda":
            torch.cuda.synchronize()

    rate = time_steps(step, actions, seconds) * n
    env.close()
    return rate, first_use


def peer(task: str, n: int, seconds: float) -> float:
    """Env steps/s of gymnasium's own ``make_vec(..., vectorization_mode="sync")`` with NumPy actions."""
    env = gym.make_vec(locomotion.get_task(task).gym_id, num_envs=n, vectorization_mode="sync")
    env.action_space.seed(0)
    actions = [env.action_space.sample() for _ in range(16)]
    env.reset(seed=0)
    env.step(actions[0])
    rate = time_steps(env.step, actions, seconds) * n
    env.close()
    return rate


def bench_envs(tasks: list[str], sizes: list[int], seconds: float, device: str) -> None:
    backends = ["envpool"] if locomotion.envpool_available() else []
    backends.append("gymnasium")
    if locomotion.warp_available():
        backends.append("warp")
    print(f"\n(a) env steps/s, random actions, {seconds:g} s per cell after an untimed first use; device {device}; "
          f"peer: gymnasium.make_vec(sync). {load()}")
    print(f"{'task':12} {'num_envs':>8} {'backend':10} {'steps/s':>10} {'peer steps/s':>12} {'ratio':>7} "
          f"{'first use s':>11}")
    for task in tasks:
        for n in sizes:
            ref = peer(task, n, seconds) if n <= 256 else float("nan")  # 4096 Python envs: not worth it
            for backend in backends:
                if backend == "gymnasium" and n > 256:
                    continue
                rate, first = ours(backend, task, n, device, seconds)
                print(f"{task:12} {n:>8} {backend:10} {rate:>10,.0f} {ref:>12,.0f} {rate / ref:>6.2f}x {first:>11.1f}",
                      flush=True)


# ---------------------------------------------------------------------------- (b) SAC vs SB3
def eval_env() -> Any:
    return locomotion.make_env("HalfCheetah", EVAL_EPISODES, device="cpu", backend="gymnasium", verbose=False)


def run_podracer(budget: float, seed: int) -> list[tuple[float, int, float]]:
    """[(train seconds, env steps, eval return)] at each quarter of ``budget`` seconds of training."""
    podracer.seed_everything(seed)
    preset = podracer.get_preset("sac", "halfcheetah")
    env = locomotion.make_env("HalfCheetah", preset.num_envs, device="cpu", backend="auto", seed=seed, verbose=False)
    agent = podracer.make_agent("sac", env, seed=seed)  # picks the halfcheetah preset and says so
    evaluator, marks, out = eval_env(), [budget * q / 4 for q in (1, 2, 3, 4)], []
    for row in podracer.iterate_training(agent, env, total_steps=10**9, seed=seed):
        if row["time/train_s"] >= marks[len(out)]:
            ret = podracer.evaluate(agent, evaluator, seed=EVAL_SEED)["eval/return_mean"]
            out.append((row["time/train_s"], int(row["global_step"]), ret))
            print(f"  podracer  {out[-1][0]:6.0f} s {out[-1][1]:>8,} steps  return {ret:8.1f}", flush=True)
            if len(out) == len(marks):
                return out
    return out


def run_sb3(budget: float, seed: int) -> list[tuple[float, int, float]]:
    """The same for Stable-Baselines3 SAC with RL Zoo's HalfCheetah-v4 settings (SB3 defaults,
    learning_starts 10000: net (256, 256), lr 3e-4, batch 256, one update per step, auto entropy)."""
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback

    evaluator, marks, out = eval_env(), [budget * q / 4 for q in (1, 2, 3, 4)], []

    class EvalAtMarks(BaseCallback):
        def _on_training_start(self) -> None:
            self.start, self.eval_s = time.perf_counter(), 0.0

        def _on_step(self) -> bool:
            train_s = time.perf_counter() - self.start - self.eval_s
            if train_s < marks[len(out)]:
                return True
            t = time.perf_counter()
            policy = lambda obs: torch.as_tensor(self.model.predict(obs.numpy(), deterministic=True)[0])
            ret = podracer.evaluate(policy, evaluator, seed=EVAL_SEED)["eval/return_mean"]
            self.eval_s += time.perf_counter() - t
            out.append((train_s, self.num_timesteps, ret))
            print(f"  sb3       {train_s:6.0f} s {self.num_timesteps:>8,} steps  return {ret:8.1f}", flush=True)
            return len(out) < len(marks)

    podracer.seed_everything(seed)
    model = SAC("MlpPolicy", gym.make("HalfCheetah-v5"), learning_starts=10_000, seed=seed, device="cpu")
    model.learn(10**9, callback=EvalAtMarks())
    return out


def bench_sac(budget: float, seed: int, threads: int) -> None:
    p = podracer.get_preset("sac", "halfcheetah")
    print(f"\n(b) SAC on HalfCheetah-v5, {budget:g} s of training each, {threads} torch thread(s), seed {seed}; "
          f"eval: {EVAL_EPISODES} gymnasium episodes, deterministic. {load()}")
    print(f"  podracer preset: num_envs={p.num_envs} {p.config}")
    results = {"podracer": run_podracer(budget, seed), "sb3": run_sb3(budget, seed)}
    print(f"  after: {load()}")
    print(f"{'library':9} {'train s':>7} {'env steps':>10} {'steps/s':>8} {'return':>8}")
    for name, rows in results.items():
        s, steps, ret = rows[-1]
        print(f"{name:9} {s:>7.0f} {steps:>10,} {steps / s:>8.0f} {ret:>8.1f}")
    (_, ours_steps, ours_ret), (_, ref_steps, ref_ret) = results["podracer"][-1], results["sb3"][-1]
    print(f"podracer / sb3: {ours_steps / ref_steps:.1f}x the env steps in the same time; return "
          f"{ours_ret:.0f} vs {ref_ret:.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="HalfCheetah and Ant, 1 s per cell, 120 s per SAC run")
    parser.add_argument("--budget", type=float, default=None, help="seconds of training per SAC run (600; quick 120)")
    parser.add_argument("--seconds", type=float, default=None, help="seconds per throughput cell (3; quick 1)")
    parser.add_argument("--tasks", default=None, help="comma-separated tasks for (a); default all (quick: 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads, both libraries")
    parser.add_argument("--device", default="auto", type=lambda text: text if text == "auto" else device_arg(text),
                        help="device for (a): auto, cpu or cuda")
    parser.add_argument("--skip-envs", action="store_true")
    parser.add_argument("--skip-sac", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = str(choose_device(args.device))
    tasks = args.tasks.split(",") if args.tasks else (["HalfCheetah", "Ant"] if args.quick else
                                                      [t.name for t in locomotion.TASKS.values()])
    sizes = [1, 16, 64, 256] + ([4096] if device.startswith("cuda") else [])
    print(f"torch {torch.__version__}, {args.threads} thread(s); {load()}")
    if not args.skip_envs:
        bench_envs(tasks, sizes, args.seconds or (1.0 if args.quick else 3.0), device)
    if not args.skip_sac:
        bench_sac(args.budget or (120.0 if args.quick else 600.0), args.seed, args.threads)


if __name__ == "__main__":
    main()
