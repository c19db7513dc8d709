"""Torch threads against training throughput for our network sizes (docs/performance.md).

Each workload is an agent with its preset, measured at each thread count in turn, in one process,
rounds alternating so that a change in the machine's load falls on every count alike:

- PPO on Pendulum, 512 sub-envs and the preset's 96: env steps per second of ``train_step``
  (collection and update);
- SAC on Pendulum and DQN on CartPole: gradient updates per second (``agent.update`` on replay
  minibatches of the preset's size).

``uptime``'s load average is printed before and after: on a shared machine it decides the
result more than anything else. ``.venv/bin/python benchmarks/threads.py --rounds 3``
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any, Callable

import torch

import podracer
from podracer.envs import CartPoleVecEnv, PendulumVecEnv


def ppo_workload(num_envs: int) -> Callable[[float], float]:
    env = PendulumVecEnv(num_envs)
    agent = podracer.make_agent("ppo", env, seed=0, verbose=False)
    agent.begin_training(10**9)
    state = {"obs": env.reset(seed=0)[0]}

    def window(seconds: float) -> float:  # env steps per second over whole train_step calls
        start, steps = time.perf_counter(), 0.0
        while steps == 0 or time.perf_counter() - start < seconds:
            state["obs"], metrics = agent.train_step(env, state["obs"])
            steps += metrics["env_steps"]
        return steps / (time.perf_counter() - start)

    return window


def update_workload(name: str, env: Any) -> Callable[[float], float]:
    agent = podracer.make_agent(name, env, seed=0, verbose=False)
    obs, _ = env.reset(seed=0)
    while agent.buffer.num_added < agent.config.batch_size:  # a buffer to sample from (warm-up actions)
        actions, stored = agent.explore(obs, warmup=True)
        next_obs, rewards, terminated, _, info = env.step(actions)
        agent.buffer.add(obs, stored, rewards, info["final_obs"], terminated)
        obs = next_obs

    def window(seconds: float) -> float:  # gradient updates per second
        start, updates = time.perf_counter(), 0
        while updates == 0 or time.perf_counter() - start < seconds:
            agent.updates += 1
            agent.update(agent.buffer.sample(agent.config.batch_size))
            updates += 1
        return updates / (time.perf_counter() - start)

    return window


WORKLOADS = {
    "ppo-512": ("PPO Pendulum, 512 sub-envs: env steps/s", lambda: ppo_workload(512)),
    "ppo-96": ("PPO Pendulum, preset (96 sub-envs): env steps/s", lambda: ppo_workload(96)),
    "sac": ("SAC Pendulum, preset (64 x 64, batch 128): updates/s", lambda: update_workload("sac", PendulumVecEnv(8))),
    "dqn": ("DQN CartPole, preset (128 x 128, batch 128): updates/s",
            lambda: update_workload("dqn", CartPoleVecEnv(16))),
}


def main(argv: list[str] | None = None) -> dict[str, dict[int, list[float]]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", default="1,2", help="thread counts to compare, comma-separated")
    parser.add_argument("--rounds", type=int, default=3, help="windows per thread count")
    parser.add_argument("--seconds", type=float, default=2.0, help="length of one window (at least one call)")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"of {', '.join(WORKLOADS)}")
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.threads.split(",")]
    before, results = torch.get_num_threads(), {}
    print(f"load average before: {os.getloadavg()}; {os.cpu_count()} CPUs; torch's default threads: {before}")
    print("| workload | " + " | ".join(f"{n} thread(s): median (range)" for n in counts) + " |")
    print("|---|" + "---|" * len(counts))
    try:
        for key in args.workloads.split(","):
            label, build = WORKLOADS[key]
            torch.set_num_threads(counts[0])
            window = build()
            window(0.2)  # warm: first calls allocate
            rates: dict[int, list[float]] = {n: [] for n in counts}
            for _ in range(args.rounds):
                for n in counts:
                    torch.set_num_threads(n)
                    rates[n].append(window(args.seconds))
            results[key] = rates
            cells = [f"{statistics.median(r):,.0f} ({min(r):,.0f}-{max(r):,.0f})" for r in rates.values()]
            print(f"| {label} | " + " | ".join(cells) + " |", flush=True)
    finally:
        torch.set_num_threads(before)
    print(f"load average after: {os.getloadavg()}")
    return results


if __name__ == "__main__":
    main()
