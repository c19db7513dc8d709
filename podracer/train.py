"""One pod: collect, update, evaluate, log, checkpoint.

``iterate_training`` is the loop itself and yields one plain metrics dict per training step, so
the tournament, notebooks and tests consume the same numbers. ``train`` drives it with a
progress bar, CSV and TensorBoard logs and checkpoints, and returns the agent and its history.
"""

from __future__ import annotations

import math
import numbers
import os
import random
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np
import torch

from podracer.envs.wrappers import RecordEpisodeStatistics
from podracer.evaluate import evaluate

if TYPE_CHECKING:  # pandas and tqdm are imported by train() itself: `import podracer` stays torch plus a little
    import pandas as pd


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices). Call before building the agent so that the
    initial weights are reproducible too."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def iterate_training(agent: Any, env: Any, total_steps: int, eval_env: Any = None, eval_every: int = 10_000,
                     seed: int | None = None, eval_seed: int = 10_000,
                     stagger_time_limits: bool = True) -> Iterator[dict[str, float]]:
    """Yield a metrics dict after every ``agent.train_step``.

    The env is reset first (with ``seed`` when given; ``None`` continues the env's own random
    stream, so two calls see different episodes), then ``agent.begin_training(total_steps)`` lets
    the agent start its per-run state (PPO: reward-scaling return, learning-rate annealing).

    ``stagger_time_limits`` (default on): after the reset, each sub-env's time-limit counter starts
    at a random step (``TensorVecEnv.stagger_time_limits``, drawn from the env's seeded generator;
    envs without a time-limit counter are left alone), so that the sub-envs do not all truncate on
    the same step and each rollout mixes early and late phases of the episode. Without it a
    Pendulum preset drifted after reaching its target (docs/results/presets.md). The first,
    shortened episodes are left out of ``charts/episodic_return``. ``eval_env`` is never staggered.

    Keys: ``global_step`` (the agent's ``global_step`` after this call: env steps it has trained on
    over its life, summed over sub-envs, so a second run continues the count, as in TensorBoard; an
    agent without that attribute counts from 0 each run), ``time/wall_s``,
    ``time/train_s`` (excluding evaluation), ``charts/steps_per_second``, the agent's own
    ``loss/...`` keys, ``charts/episodic_return`` when episodes finished, and ``eval/...`` keys
    every ``eval_every`` steps and at the end (deterministic policy, ``eval_env.reset(eval_seed)``).
    """
    total_steps = _check_steps(total_steps)
    check_compatible(agent, env)
    if not isinstance(env, RecordEpisodeStatistics):
        env = RecordEpisodeStatistics(env)
    obs, _ = env.reset(seed=seed)
    if stagger_time_limits:
        env.stagger_time_limits()
    if hasattr(agent, "begin_training"):
        agent.begin_training(total_steps)
    first = int(getattr(agent, "global_step", 0))  # steps the agent had trained on before this run
    steps, next_eval = 0, eval_every  # steps: env steps in this run
    start = time.perf_counter()
    eval_time = 0.0
    while steps < total_steps:
        obs, metrics = agent.train_step(env, obs)
        steps += int(metrics["env_steps"])
        row: dict[str, float] = {"global_step": float(first + steps), **{k: float(v) for k, v in metrics.items()}}
        returns, lengths = env.pop_finished()
        if len(returns):
            row["charts/episodic_return"] = returns.mean().item()
            row["charts/episodic_length"] = lengths.float().mean().item()
        if eval_env is not None and (steps >= next_eval or steps >= total_steps):
            t = time.perf_counter()
            row.update(evaluate(agent, eval_env, seed=eval_seed))
            eval_time += time.perf_counter() - t
            next_eval = (steps // eval_every + 1) * eval_every
        wall = time.perf_counter() - start
        row["time/wall_s"] = wall
        row["time/train_s"] = wall - eval_time
        row["charts/steps_per_second"] = steps / max(wall - eval_time, 1e-9)
        yield row


def check_compatible(agent: Any, env: Any) -> None:
    """A clear error when ``agent`` was built for other spaces or another device than ``env``."""
    for what in ("observation_space", "action_space"):
        mine, theirs = getattr(agent, what, None), getattr(env, f"single_{what}", None)
        if mine is not None and theirs is not None and (type(mine) is not type(theirs) or mine.shape != theirs.shape
                                                         or getattr(mine, "n", None) != getattr(theirs, "n", None)):
            raise ValueError(f"the agent was built for {what} {mine}, but this env has single_{what} {theirs}; build the "
                             f"agent for this env: podracer.make_agent(name, env)")
    agent_device = getattr(agent, "device", None)
    if agent_device is not None and torch.device(agent_device) != torch.device(env.device):
        raise ValueError(f"the agent is on {agent_device} but the env on {env.device}; build both on one device "
                         f"(make_agent uses env.device by default)")


def _check_steps(total_steps: Any) -> int:
    if isinstance(total_steps, bool) or not isinstance(total_steps, numbers.Integral) or total_steps <= 0:
        raise ValueError(f"total_steps must be a positive whole number of env steps, got {total_steps!r}")
    return int(total_steps)


def planned_steps(agent: Any, num_envs: int, total_steps: int) -> int:
    """Env steps a run of ``total_steps`` really takes: whole ``train_step`` calls, so the next
    multiple of one call's steps. Warns, saying by how much, when ``total_steps`` is smaller than
    one call or the overshoot is 1% of ``total_steps`` or more (a few steps past 100,000 are
    not worth a warning; 131,072 steps for a budget of 10,000 are)."""
    per_call = agent.steps_per_train_step(num_envs) if hasattr(agent, "steps_per_train_step") else 0
    if per_call <= 0:
        return total_steps
    planned = math.ceil(total_steps / per_call) * per_call
    what = (f"one {type(agent).__name__}.train_step collects {per_call:,} env steps "
            f"({per_call // num_envs} vector steps x num_envs={num_envs})")
    if total_steps < per_call:
        warnings.warn(f"total_steps={total_steps:,} is smaller than one training step: {what}, so training runs "
                      f"{per_call:,} steps ({per_call - total_steps:,} more). Raise total_steps or lower num_steps "
                      f"or num_envs", UserWarning, stacklevel=3)
    elif planned - total_steps >= 0.01 * total_steps:
        warnings.warn(f"total_steps={total_steps:,} is not a multiple of one training step: {what}, so training "
                      f"runs {planned:,} steps ({planned - total_steps:,} more). Use total_steps={planned:,} or "
                      f"{planned - per_call:,} to silence this", UserWarning, stacklevel=3)
    return planned


THREADS_ENV = "PODRACER_NUM_THREADS"


def training_threads(threads: int | None = None) -> int:
    """The torch intra-op thread count ``train`` uses: ``threads`` when given, else the environment
    variable ``PODRACER_NUM_THREADS``, else 1. 0 keeps torch's own setting (one thread per core).

    One, because our networks are small (64 to 256 wide): a second thread has little to share,
    and on a machine busy with other work torch's default (a thread per core) made training 13 to
    80 times slower, its threads waiting for each other (docs/performance.md)."""
    if threads is None:
        text = os.environ.get(THREADS_ENV, "").strip()
        if not text:
            return 1
        if not text.isdigit():
            raise ValueError(f"{THREADS_ENV}={text!r}: expected a whole number of torch threads >= 0 (0: torch's own "
                             f"setting)")
        return int(text)
    if isinstance(threads, bool) or not isinstance(threads, numbers.Integral) or threads < 0:
        raise ValueError(f"threads must be a whole number of torch threads >= 0 (0: torch's own setting), "
                         f"got {threads!r}")
    return int(threads)


def train(agent: Any, env: Any, total_steps: int | None = None, eval_env: Any = None, eval_every: int = 10_000,
          seed: int | None = None, log_dir: str | Path | None = None, checkpoint_every: int | None = None,
          progress: bool = True, target_return: float | None = None,
          threads: int | None = None, stagger_time_limits: bool = True) -> tuple[Any, pd.DataFrame]:
    """Train ``agent`` on ``env`` for ``total_steps`` env steps (summed over sub-envs).

    ``total_steps=None`` takes the step budget of the preset the agent was built from
    (``agent.preset.total_steps``). Training runs whole ``train_step`` calls: when that overshoots
    ``total_steps`` (or ``total_steps`` is smaller than one call) a warning says by how much.
    ``seed`` seeds the env's reset (``None``: continue its own random stream).

    With ``log_dir``: ``progress.csv`` (rewritten after each evaluation and at the end),
    TensorBoard event files, and checkpoints ``checkpoints/step_<n>.pt`` every
    ``checkpoint_every`` steps plus ``checkpoints/last.pt``. ``target_return`` stops training at
    the first evaluation whose mean return reaches it. ``threads``: torch threads while training,
    restored after (``training_threads``: default ``PODRACER_NUM_THREADS``, else 1; 0 keeps
    torch's). ``stagger_time_limits``: start the sub-envs' time limits at random steps
    (``iterate_training``). Returns ``(agent, history)``.
    """
    if total_steps is None:
        preset = getattr(agent, "preset", None)
        if preset is None:
            raise ValueError(f"give total_steps: this {type(agent).__name__} was not built from a preset, so it has no "
                             f"step budget (podracer.presets() lists the presets and their budgets)")
        total_steps = preset.total_steps
    import pandas as pd  # here, not at the top: iterate_training and pods never need them (tests/test_import_time.py)
    from tqdm.auto import tqdm

    total_steps = _check_steps(total_steps)
    num_threads = training_threads(threads)
    planned_steps(agent, env.num_envs, total_steps)
    log_dir = Path(log_dir) if log_dir is not None else None
    writer = None
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        from torch.utils.tensorboard import SummaryWriter  # imported lazily: slow, and only needed here

        writer = SummaryWriter(str(log_dir / "tensorboard"))
    rows: list[dict[str, float]] = []
    first = int(getattr(agent, "global_step", 0))  # the history's global_step continues from here
    next_ckpt = first + checkpoint_every if checkpoint_every else math.inf
    bar = tqdm(total=total_steps, disable=not progress, unit="step", dynamic_ncols=True)
    previous_threads = torch.get_num_threads()
    if num_threads:
        torch.set_num_threads(num_threads)
    try:
        for row in iterate_training(agent, env, total_steps, eval_env, eval_every, seed,
                                    stagger_time_limits=stagger_time_limits):
            rows.append(row)
            step = int(row["global_step"])
            bar.update(step - first - bar.n)
            if "eval/return_mean" in row:
                bar.set_postfix(eval_return=f"{row['eval/return_mean']:.1f}")
            if writer is not None:
                for k, v in row.items():
                    if k != "global_step":
                        writer.add_scalar(k, v, step)
            if log_dir is not None:
                if step >= next_ckpt:
                    agent.save(log_dir / "checkpoints" / f"step_{step}.pt")
                    next_ckpt = (step // checkpoint_every + 1) * checkpoint_every
                if "eval/return_mean" in row:
                    pd.DataFrame(rows).to_csv(log_dir / "progress.csv", index=False)
            if target_return is not None and row.get("eval/return_mean", -math.inf) >= target_return:
                break
    finally:
        torch.set_num_threads(previous_threads)
        bar.close()
        if writer is not None:
            writer.close()
    history = pd.DataFrame(rows)
    if log_dir is not None:
        history.to_csv(log_dir / "progress.csv", index=False)
        agent.save(log_dir / "checkpoints" / "last.pt")
    return agent, history
