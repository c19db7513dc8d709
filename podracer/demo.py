"""The interim demo (``python -m podracer.demo``, what ``make demo`` runs): PPO on batched Pendulum.

Trains offline on the CPU in well under a minute with the tuned ``pendulum`` preset, then writes
``runs/demo/progress.csv`` (one row per training step; evaluation columns every 10k steps),
``runs/demo/learning_curve.png``, TensorBoard logs and checkpoints under ``runs/demo/``, and
prints where they are.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

import pandas as pd
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def learning_curve_figure(history: pd.DataFrame, title: str = "") -> Figure:
    """Training-episode returns and deterministic evaluation returns against env steps.

    Built on a bare ``Figure`` with the Agg canvas, so it never touches pyplot's global state.
    """
    fig = Figure(figsize=(7, 4), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if "charts/episodic_return" in history:
        train_rows = history.dropna(subset=["charts/episodic_return"])
        # Synchronised sub-envs finish together, so there may be only a few of these points.
        ax.plot(train_rows["global_step"], train_rows["charts/episodic_return"], marker="s", alpha=0.6,
                label="training episodes (stochastic)")
    if "eval/return_mean" in history:
        ev = history.dropna(subset=["eval/return_mean"])
        ax.errorbar(ev["global_step"], ev["eval/return_mean"], yerr=ev["eval/return_std"], marker="o",
                    capsize=3, label="evaluation (deterministic)")
    ax.set_xlabel("env steps (summed over sub-envs)")
    ax.set_ylabel("episode return")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    return fig


def main(argv: Sequence[str] | None = None) -> int:
    import podracer

    parser = argparse.ArgumentParser(prog="python -m podracer.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/demo", help="output folder")
    parser.add_argument("--steps", type=int, default=None, help="env steps (default: the preset's)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    preset = podracer.get_preset("ppo", "pendulum")  # sub-env count, step budget and config tuned for the task
    steps = args.steps or preset.total_steps
    out = Path(args.out)
    env = podracer.make_env("pendulum", num_envs=preset.num_envs)
    eval_env = podracer.make_env("pendulum", num_envs=16)
    agent = podracer.make_agent("ppo", env, seed=args.seed)  # picks the "pendulum" preset by itself
    print(f"Podracer demo: PPO on {preset.num_envs} batched Pendulum envs for {steps} steps (CPU, 1 thread)")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small MLPs: a second thread mostly adds overhead, and contention on a busy machine
    try:
        agent, history = podracer.train(agent, env, steps, eval_env=eval_env, eval_every=10_000, seed=args.seed,
                                        log_dir=out)
    finally:
        torch.set_num_threads(threads)

    fig = learning_curve_figure(history, title=f"PPO on Pendulum ({preset.num_envs} sub-envs)")
    fig.savefig(out / "learning_curve.png")
    last = history.dropna(subset=["eval/return_mean"]).iloc[-1]
    print(f"final eval return {last['eval/return_mean']:.1f} ± {last['eval/return_std']:.1f} "
          f"after {int(last['global_step'])} steps in {last['time/wall_s']:.1f} s "
          f"({last['charts/steps_per_second']:.0f} steps/s)")
    print(f"progress:       {out / 'progress.csv'}")
    print(f"learning curve: {out / 'learning_curve.png'}")
    ckpt = out / "checkpoints" / "last.pt"
    print(f"checkpoint:     {ckpt}  (try: podracer eval {ckpt} pendulum)")
    print(f"tensorboard:    tensorboard --logdir {out / 'tensorboard'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
