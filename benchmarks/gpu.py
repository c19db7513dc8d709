"""What the GPU path is for: batched envs and learners at sizes a CPU cannot hold.

    .venv/bin/python benchmarks/gpu.py                       # on a CUDA machine: the full sizes
    .venv/bin/python benchmarks/gpu.py --device cpu --small  # the same code at small sizes (CI runs it tiny)

Four parts, each printed as a table with the load average:

1. **Stock env steps/s**: ``StockTradingVecEnv`` on the bundled 20-stock training years
   (``finance.prepare_market``), one-year episodes from random days (the training env of
   ``finance.demo``), float32 accounting, random actions made beforehand, at 4,096 to 262,144
   accounts (``--small``: 64 and 256). Default ``validate_actions=True`` (what training runs: one
   host sync per step for the finite check, besides the autoreset's), and once without it at the
   largest size.
2. **PPO end-to-end** (env + learner, env steps/s): ``make_agent("ppo", env)`` with the
   ``stock_trading`` preset on 4,096 accounts (``--small``: 64), ``iterate_training`` for a few
   ``train_step`` calls after two untimed ones (which allocate and warm the kernels).
3. **SAC updates/s**: gradient updates of ``make_agent("sac", PendulumVecEnv(...))`` (256x256 actor and
   two critics, SAC's default size; autotuned alpha) on batches of 256 and 4,096 sampled from its replay
   buffer, filled first by ``train_step``; ``agent.update(agent.buffer.sample(B))`` in a loop.
4. **MuJoCo Warp worlds/s** on Ant and Humanoid (``locomotion.make_env(..., backend="warp")``,
   which replays its substeps as a captured CUDA graph), 4,096 and 16,384 worlds (``--small``:
   16). Skipped, with a line saying why, when ``mujoco-warp``/``warp-lang`` cannot run, and by
   ``--skip-warp`` (on a CPU warp compiles its kernels for tens of seconds first).

Every timing is bracketed by ``torch.cuda.synchronize`` on a CUDA device (kernels are
asynchronous: without it the clock stops before the work does), after untimed warm-up calls, and
repeated ``--repeats`` times: best (the machine's capability) and median are printed. Nothing here
uses CUDA graphs except the warp backend; agents launch kernels one by one.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import podracer  # noqa: E402
from finance.demo import EPISODE_DAYS  # noqa: E402
from finance.market import MarketData, prepare_market  # noqa: E402
from podracer.cli import device_arg  # noqa: E402
from podracer.envs import PendulumVecEnv  # noqa: E402


def load() -> str:
    return f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def rate(fn: Callable[[], Any], calls: int, device: torch.device, repeats: int, warmup: int = 2) -> tuple[float, float]:
    """(best, median) calls per second of ``fn``, ``calls`` calls per timing, synchronised."""
    for _ in range(warmup):
        fn()
    rates = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync(device)
        rates.append(calls / (time.perf_counter() - t0))
    return max(rates), statistics.median(rates)


def row(*cells: Any) -> str:
    return "| " + " | ".join(f"{c:,.0f}" if isinstance(c, float) else str(c) for c in cells) + " |"


# ---------------------------------------------------------------------------- 1. stock env
def stock_env(market: MarketData, num_envs: int, device: torch.device, **kw: Any) -> Any:
    return market.env("train", num_envs, device=device, random_start=True, episode_length=EPISODE_DAYS,
                      dtype=torch.float32, seed=0, **kw)


def bench_stock_env(market: MarketData, sizes: list[int], device: torch.device, steps: int, repeats: int) -> None:
    print(f"\n## 1. StockTradingVecEnv env steps/s ({market.close['train'].shape[1]} stocks, float32, random actions)")
    print(row("accounts", "validate_actions", "env steps/s best", "median", "vector steps/s"))
    print(row(*["---"] * 5))
    for n, validate in [(n, True) for n in sizes] + [(sizes[-1], False)]:
        env = stock_env(market, n, device, validate_actions=validate)
        env.reset(seed=0)
        g = torch.Generator(device=device).manual_seed(0)
        actions = [torch.rand(n, env.num_stocks, generator=g, device=device) * 2 - 1 for _ in range(4)]
        k = [0]

        def step() -> None:
            env.step(actions[k[0] % 4])
            k[0] += 1

        best, median = rate(step, steps, device, repeats)
        print(row(n, validate, best * n, median * n, best))
        del env, actions


# ---------------------------------------------------------------------------- 2. PPO end to end
def bench_ppo(market: MarketData, num_envs: int, device: torch.device, calls: int, repeats: int,
              warmup: int = 2) -> None:
    env = stock_env(market, num_envs, device)
    agent = podracer.make_agent("ppo", env, seed=0, verbose=False)
    cfg = agent.config
    per_call = cfg.num_steps * num_envs
    print(f"\n## 2. PPO end to end on the stock env, stock_trading preset ({cfg.num_steps} steps x {num_envs:,} "
          f"accounts = {per_call:,} env steps per train_step; {cfg.update_epochs} epochs x {cfg.num_minibatches} "
          f"minibatches of {per_call // cfg.num_minibatches:,}; hidden {cfg.hidden_sizes})")
    loop = podracer.iterate_training(agent, env, per_call * (calls * repeats + warmup), seed=0)
    best, median = rate(lambda: next(loop), calls, device, repeats, warmup=warmup)
    print(row("accounts", "env steps/s best (env + learner)", "median", "train_step calls/s"))
    print(row(*["---"] * 4))
    print(row(num_envs, best * per_call, median * per_call, f"{best:.2f}"))


# ---------------------------------------------------------------------------- 3. SAC updates
def bench_sac(num_envs: int, batches: list[int], device: torch.device, updates: int, repeats: int) -> None:
    """Updates alone: the learner's ceiling (a train_step adds the env step and one buffer write per vector step)."""
    env = PendulumVecEnv(num_envs, device=device)
    fill = 4 * max(batches)  # random transitions, no updates: learning starts after them
    agent = podracer.make_agent("sac", env, seed=0, verbose=False, learning_starts=fill, num_steps=1,
                                hidden_sizes=(256, 256))  # SAC's default size, as for MuJoCo (not Pendulum's preset)
    obs, _ = env.reset(seed=0)
    while agent.buffer.num_added < fill:
        obs, _ = agent.train_step(env, obs)
    cfg = agent.config
    print(f"\n## 3. SAC gradient updates/s (Pendulum, hidden {cfg.hidden_sizes}, two critics, autotuned alpha; "
          f"buffer of {agent.buffer.num_added:,} transitions)")
    print(row("batch", "updates/s best", "median", "transitions/s (batch x updates)"))
    print(row(*["---"] * 4))
    for b in batches:
        best, median = rate(lambda: agent.update(agent.buffer.sample(b)), updates, device, repeats)
        print(row(b, best, median, best * b))


# ---------------------------------------------------------------------------- 4. MuJoCo Warp
def bench_warp(tasks: list[str], sizes: list[int], device: torch.device, steps: int, repeats: int) -> None:
    print("\n## 4. MuJoCo Warp worlds/s (locomotion backend 'warp', substeps replayed as a CUDA graph)")
    try:
        import locomotion
        ok = locomotion.warp_available()
        why = "mujoco-warp / warp-lang do not import here"
    except Exception as e:  # noqa: BLE001 (a missing mujoco, a broken native library: the part cannot run)
        ok, why = False, f"locomotion does not import ({type(e).__name__}: {e})"
    if not ok:
        print(f"SKIPPED: {why}; install with: pip install \"podracer-rl[warp]\"")
        return
    print(row("task", "worlds", "first use s (compile, graph capture)", "worlds x steps/s best", "median"))
    print(row(*["---"] * 5))
    for task in tasks:
        for n in sizes:
            t0 = time.perf_counter()
            env = locomotion.make_env(task, n, device=device, backend="warp", seed=0, verbose=False)
            env.reset(seed=0)
            low = torch.as_tensor(env.single_action_space.low, device=device)
            high = torch.as_tensor(env.single_action_space.high, device=device)
            g = torch.Generator(device=device).manual_seed(0)
            actions = [low + (high - low) * torch.rand(n, low.numel(), generator=g, device=device) for _ in range(4)]
            env.step(actions[0])
            sync(device)
            first = time.perf_counter() - t0
            k = [0]

            def step() -> None:
                env.step(actions[k[0] % 4])
                k[0] += 1

            best, median = rate(step, steps, device, repeats)
            print(row(task, n, f"{first:.1f}", best * n, median * n))
            env.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", type=device_arg)
    ap.add_argument("--small", action="store_true", help="CPU-sized problems (the same code paths)")
    ap.add_argument("--tiny", action="store_true", help="smallest sizes and one repeat: the test's smoke run")
    ap.add_argument("--repeats", type=int, default=5, help="timings per measurement (best and median printed)")
    ap.add_argument("--skip-warp", action="store_true", help="skip part 4 (MuJoCo Warp)")
    ap.add_argument("--parts", default="1234", help="which parts to run, e.g. 12")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    # One CPU thread by default: on a GPU the host thread only launches kernels; on a shared CPU
    # torch's threads stall each other (benchmarks/stock_env.py), and CI only keeps this running.
    torch.set_num_threads(args.threads)
    if args.tiny:  # a test: every code path once, in seconds
        env_sizes, ppo_envs, sac_batches, warp_sizes, steps, repeats = [8], 8, [32], [2], 2, 1
    elif args.small or device.type == "cpu":
        env_sizes, ppo_envs, sac_batches, warp_sizes, steps, repeats = [64, 256], 64, [256], [16], 20, args.repeats
    else:
        env_sizes, ppo_envs, sac_batches, warp_sizes = [4_096, 16_384, 65_536, 262_144], 4_096, [256, 4_096], \
            [4_096, 16_384]
        steps, repeats = 50, args.repeats
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"GPU benchmark on {device} ({name}); torch {torch.__version__}; {load()}")
    market = prepare_market()
    if "1" in args.parts:
        bench_stock_env(market, env_sizes, device, steps, repeats)
    if "2" in args.parts:
        bench_ppo(market, ppo_envs, device, calls=1 if args.tiny else 3, repeats=repeats, warmup=1 if args.tiny else 2)
    if "3" in args.parts:
        bench_sac(64 if not args.tiny else 8, sac_batches, device, updates=2 if args.tiny else 50, repeats=repeats)
    if "4" in args.parts:
        if args.skip_warp:
            print("\n## 4. MuJoCo Warp: SKIPPED (--skip-warp)")
        else:
            bench_warp(["Ant", "Humanoid"], warp_sizes, device, steps, repeats)
    print(f"\n{load()} after")


if __name__ == "__main__":
    main()
