"""Time and env steps to a deterministic eval return >= -250 on Pendulum: Podracer SAC / TD3 vs
Stable-Baselines3 SAC / TD3.

Podracer: ``make_agent(name, PendulumVecEnv(8), preset="pendulum")`` (``podracer.get_preset(name,
"pendulum")``) trained by ``podracer.train_to_target`` (the unchanged ``podracer.train``, stopped at
the target). SB3: ``SAC("MlpPolicy")`` / ``TD3("MlpPolicy")`` with default settings on gymnasium's
``Pendulum-v1`` (one env). Both are evaluated by ``podracer.evaluate`` every ``--eval-every`` env
steps on the same 10 episodes (``PendulumVecEnv(10)``, same dynamics as Pendulum-v1, reset with
seed 10_000), deterministic actions; training time excludes evaluation.
Both run in this process, one after the other, with the same torch thread count.

    .venv/bin/python benchmarks/offpolicy_pendulum.py [--seeds 0,1,2] [--threads 1]
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
import torch

import podracer
from podracer import evaluate, make_agent, train_to_target
from podracer.envs import PendulumVecEnv

TARGET = -250.0
EVAL_SEED = 10_000  # podracer.train's default eval seed


def run_podracer(name: str, seed: int, eval_every: int, max_steps: int) -> dict[str, float]:
    preset = podracer.get_preset(name, "pendulum")
    podracer.seed_everything(seed)
    env = PendulumVecEnv(num_envs=preset.num_envs)
    agent = make_agent(name, env, seed=seed, preset="pendulum", verbose=False)
    chunk = agent.steps_per_train_step(env.num_envs)
    if eval_every % chunk:
        raise ValueError(f"--eval-every must be a multiple of the {chunk} env steps of one train_step")
    run = train_to_target(agent, env, PendulumVecEnv(num_envs=10), TARGET, max_steps, eval_every, seed=seed)
    # Not reached: steps nan, and the seconds of the whole run (as for SB3 below).
    return {"steps": float(run.steps) if run.reached else float("nan"), "train_s": run.train_s,
            "return": run.final_return}


def run_sb3(name: str, seed: int, eval_every: int, max_steps: int) -> dict[str, float]:
    from stable_baselines3 import SAC, TD3
    from stable_baselines3.common.callbacks import BaseCallback

    eval_env = PendulumVecEnv(num_envs=10)

    class EvalUntilTarget(BaseCallback):
        """Evaluate every ``eval_every`` steps with podracer.evaluate; stop at the target."""

        def __init__(self) -> None:
            super().__init__()
            self.eval_s, self.result = 0.0, {"steps": float("nan"), "return": float("nan")}

        def _on_step(self) -> bool:
            if self.num_timesteps % eval_every:
                return True
            t = time.perf_counter()
            policy = lambda obs: torch.as_tensor(self.model.predict(obs.numpy(), deterministic=True)[0])
            ret = evaluate(policy, eval_env, seed=EVAL_SEED)["eval/return_mean"]
            self.eval_s += time.perf_counter() - t
            self.result["return"] = ret
            if ret >= TARGET:
                self.result["steps"] = float(self.num_timesteps)
                return False
            return True

    podracer.seed_everything(seed)
    model = {"sac": SAC, "td3": TD3}[name]("MlpPolicy", gym.make("Pendulum-v1"), seed=seed, device="cpu")
    callback = EvalUntilTarget()
    start = time.perf_counter()
    model.learn(max_steps, callback=callback)
    return {**callback.result, "train_s": time.perf_counter() - start - callback.eval_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0", help="comma-separated seeds, e.g. 0,1,2")
    parser.add_argument("--algos", default="sac,td3")
    parser.add_argument("--eval-every", type=int, default=200)
    parser.add_argument("--max-steps", type=int, default=20_000, help="give up after this many env steps")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads, both libraries")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    seeds = [int(s) for s in args.seeds.split(",")]

    print(f"first deterministic eval >= {TARGET} (10 episodes every {args.eval_every} steps), "
          f"{args.threads} torch thread(s); train time excludes evaluation")
    print(f"{'algo':5} {'seed':>4} | {'podracer steps':>14} {'time s':>7} | {'sb3 steps':>9} {'time s':>7} | "
          f"{'speed-up':>8} {'steps ratio':>11}")
    summary: dict[str, list[tuple[float, float]]] = {}
    for name in args.algos.split(","):
        for seed in seeds:
            ours = run_podracer(name, seed, args.eval_every, args.max_steps)
            ref = run_sb3(name, seed, args.eval_every, args.max_steps)
            # nan where either run never reached the target: no honest ratio then.
            reached = not (np.isnan(ours["steps"]) or np.isnan(ref["steps"]))
            speedup = ref["train_s"] / ours["train_s"] if reached else float("nan")
            steps_ratio = ours["steps"] / ref["steps"]
            summary.setdefault(name, []).append((speedup, steps_ratio))
            print(f"{name:5} {seed:>4} | {ours['steps']:>14.0f} {ours['train_s']:>7.1f} | {ref['steps']:>9.0f} "
                  f"{ref['train_s']:>7.1f} | {speedup:>7.1f}x {steps_ratio:>11.2f}", flush=True)
    for name, rows in summary.items():
        speedups, ratios = np.array(rows).T
        print(f"{name}: median wall-clock speed-up {np.nanmedian(speedups):.1f}x, median steps ours/SB3 "
              f"{np.nanmedian(ratios):.2f} (nan: a run that never reached {TARGET} within --max-steps)")


if __name__ == "__main__":
    main()
