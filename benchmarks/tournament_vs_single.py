"""One pod versus a tournament of four, at the same total env steps.

For each task this trains PPO (a) as one pod for ``pods * generations * generation_steps`` env
steps, evaluating every ``generation_steps``, and (b) as a ``Tournament`` of 4 pods, each
generation ``generation_steps`` long. It prints, for both:

- ``best_valid``: the best validation score seen (one pod: the best of its evaluations; the
  tournament: the top of the board). Both took the same number of evaluations, but the
  tournament's maximum is over 4 lineages, so it is optimistically biased;
- ``test``: the best-validated agent re-evaluated on held-out episodes (Pendulum: other start
  states; stocks: the following year), which is the honest number;
- ``test_ens3`` (tournament only): the ensemble of the top 3 on the same held-out episodes;
- ``wall_s``: wall-clock seconds. Pods are processes with one torch thread each, so 4 pods on a
  machine with fewer than 4 free cores run slower per pod than the single one.

Run: ``.venv/bin/python benchmarks/tournament_vs_single.py`` (PODRACER_SIZE=full for longer).
"""

from __future__ import annotations

import copy
import functools
import math
import os
import tempfile
import time

import pandas as pd
import torch

import podracer
from podracer.agents.ppo import PPO, PRESETS
from podracer.tournament import Tournament

SIZE = os.environ.get("PODRACER_SIZE", "smoke")
PODS = 4
GENERATIONS = {"smoke": 4, "full": 8}[SIZE]
VALID_SEED, TEST_SEED = 10_000, 777


# ---------------------------------------------------------------------------- tasks (module level: picklable)
def pendulum_env(num_envs: int) -> podracer.envs.PendulumVecEnv:
    return podracer.make_env("pendulum", num_envs)


@functools.lru_cache(maxsize=None)
def stock_close(split: str) -> pd.DataFrame:
    from finance.data import load_prices

    close = load_prices(["AAPL", "JPM", "KO", "MSFT", "XOM"], "2005-01-01", "2015-12-31", source="sample")
    close = close["close"]
    spans = {"train": ("2005-01-01", "2012-12-31"), "valid": ("2013-01-01", "2014-12-31"),
             "test": ("2015-01-01", "2015-12-31")}
    return close.loc[spans[split][0]:spans[split][1]]


def stock_env(split: str, num_envs: int):
    from finance.env import StockTradingVecEnv

    train_close = stock_close("train")
    if split == "train":  # one-year episodes from random days: varied starts for training
        return StockTradingVecEnv(train_close, num_envs=num_envs, episode_length=252, random_start=True,
                                  dtype=torch.float32)
    # The whole period from its first day, log prices scaled like the training env's.
    return StockTradingVecEnv(stock_close(split), num_envs=num_envs, price_scale=train_close.iloc[0].to_numpy(),
                              dtype=torch.float32)


TASKS = {
    "pendulum": dict(
        make_env=functools.partial(pendulum_env, 256), make_valid=functools.partial(pendulum_env, 32),
        make_test=functools.partial(pendulum_env, 64), test_seed=TEST_SEED, generation_steps=20_480,
        agent_config=dict(PRESETS["pendulum"].config)),
    "stocks": dict(
        make_env=functools.partial(stock_env, "train", 64), make_valid=functools.partial(stock_env, "valid", 1),
        make_test=functools.partial(stock_env, "test", 1), test_seed=0, generation_steps=16_384,
        agent_config=dict(num_steps=32, num_minibatches=4, update_epochs=5, learning_rate=3e-4, gamma=0.99,
                          log_std_init=-0.5, hidden_sizes=(64, 64))),
}


# ---------------------------------------------------------------------------- the two setups
def single_pod(task: dict, total_steps: int, seed: int = 0) -> dict:
    torch.set_num_threads(1)  # the same share of the machine as one tournament pod
    start = time.perf_counter()
    podracer.seed_everything(seed)
    env, valid = task["make_env"](), task["make_valid"]()
    agent = podracer.make_agent("ppo", env, seed=seed, **task["agent_config"])
    best, best_ckpt = -math.inf, None
    for row in podracer.iterate_training(agent, env, total_steps, eval_env=valid, eval_every=task["generation_steps"],
                                         seed=seed, eval_seed=VALID_SEED):
        if row.get("eval/return_mean", -math.inf) > best:
            best, best_ckpt = row["eval/return_mean"], copy.deepcopy(agent.checkpoint())
    wall = time.perf_counter() - start
    test = podracer.evaluate(PPO.from_checkpoint(best_ckpt), task["make_test"](), seed=task["test_seed"])
    return {"setup": "1 pod", "env_steps": total_steps, "best_valid": best, "test": test["eval/return_mean"],
            "test_ens3": math.nan, "wall_s": wall}


def tournament(task: dict, store: str, seed: int = 0) -> dict:
    start = time.perf_counter()
    t = Tournament(task["make_env"], task["make_valid"], agent="ppo", pods=PODS, generations=GENERATIONS,
                   generation_steps=task["generation_steps"], agent_config=task["agent_config"], store=store,
                   threads_per_pod=1, seed=seed, eval_seed=VALID_SEED, explore_prob=0.0)
    t.run(progress=None)
    wall = time.perf_counter() - start
    torch.set_num_threads(1)
    frame = t.board.to_frame()
    test = podracer.evaluate(t.best(), task["make_test"](), seed=task["test_seed"])
    ens = podracer.evaluate(t.ensemble(3), task["make_test"](), seed=task["test_seed"])
    trained = frame["env_steps"] - frame["parent_id"].map(frame["env_steps"]).fillna(0)  # per generation
    return {"setup": f"{PODS} pods", "env_steps": int(trained.sum()),
            "best_valid": frame["score"].max(), "test": test["eval/return_mean"],
            "test_ens3": ens["eval/return_mean"], "wall_s": wall}


def main() -> None:
    tasks = ["pendulum"]
    try:
        import finance.env  # noqa: F401  (the stock env is optional here)

        tasks.append("stocks")
    except ImportError as e:
        print(f"skipping the stock task: {e}")
    rows = []
    for name in tasks:
        task = TASKS[name]
        total = PODS * GENERATIONS * task["generation_steps"]
        with tempfile.TemporaryDirectory(prefix=f"podracer-{name}-") as store:
            for result in (single_pod(task, total), tournament(task, store)):
                rows.append({"task": name, **result})
                print(pd.DataFrame(rows[-1:]).to_string(index=False, float_format="%.1f"), flush=True)
    print(f"\nsize={SIZE}, {PODS} pods x {GENERATIONS} generations; cores: {os.cpu_count()}")
    print(pd.DataFrame(rows).to_string(index=False, float_format="%.1f"))


if __name__ == "__main__":
    main()
