"""A pod: one worker of the tournament, with its own env, eval env and share of the machine.

Each generation a pod claims a ticket from the board, starts from a parent drawn from the top of
the board (or a fresh agent), perturbs its mutable hyperparameters, trains ``generation_steps``
env steps with ``podracer.iterate_training``, evaluates the deterministic policy on its
validation env and submits the result. It repeats until the board's budget is spent or it is
asked to stop. A pod holds no state between generations that the board does not: killing one
loses at most the generation it was training.
"""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import time
import traceback
from typing import Any, Callable

import torch

from podracer.agents.common import mutable_bounds
from podracer.agents.registry import make_agent
from podracer.evaluate import evaluate
from podracer.train import iterate_training, seed_everything
from podracer.tournament.checkpoints import CheckpointError
from podracer.tournament.config import TournamentConfig, resolve_agent
from podracer.tournament.leaderboard import Entry, Leaderboard
from podracer.tournament.selection import mutate, select_parent


@dataclasses.dataclass
class PodSpec:
    """Everything a pod process needs. Picklable, so any backend can ship it to a worker."""

    store: str
    pod_id: int
    config: TournamentConfig
    make_env: Callable[[], Any]
    make_eval_env: Callable[[], Any]
    threads: int = 1  # torch intra-op threads: this pod's share of the CPU
    parent_pid: int | None = None  # the driver's pid (local backend): an orphaned pod stops


class Pod:
    def __init__(self, spec: PodSpec):
        self.spec, self.config = spec, spec.config
        self.board = Leaderboard(spec.store)
        self.agent_cls = resolve_agent(self.config.agent)
        self.env = spec.make_env()
        self.eval_env = spec.make_eval_env()

    def start_agent(self, rng: random.Random, seed: int) -> tuple[Any, Entry | None, dict[str, Any], dict[str, list]]:
        """``(agent, parent, hparams, changes)``: a mutated copy of a selected parent (weights,
        optimizer state, normalisers), or a fresh agent when the board is empty or by chance."""
        cfg = self.config
        for _ in range(3):  # a parent whose checkpoint is corrupt is flagged and another is drawn
            candidates = self.board.top(cfg.top_k)
            if not candidates or rng.random() < cfg.explore_prob:
                break
            parent = select_parent(candidates, rng, cfg.selection, cfg.top_k, cfg.temperature)
            try:
                agent = self.board.load_agent(parent, device=str(self.env.device))
            except CheckpointError:
                continue
            bounds = mutable_bounds(agent.config)
            current = {k: getattr(agent.config, k) for k in bounds}
            hparams, changes = mutate(current, bounds, rng, cfg.perturb_factors, cfg.resample_prob)
            if changes:
                agent.set_hparams(**{k: hparams[k] for k in changes})
            return agent, parent, hparams, changes
        agent = make_agent(self.agent_cls, self.env, seed=seed, **cfg.agent_config)
        return agent, None, {k: getattr(agent.config, k) for k in mutable_bounds(agent.config)}, {}

    def run_generation(self, ticket: int) -> Entry:
        """Train, evaluate and submit one generation under ``ticket``."""
        start = time.perf_counter()
        seed = (self.config.seed * 1_000_003 + ticket) % 2**31  # distinct per generation, reproducible
        seed_everything(seed)
        rng = random.Random(seed)
        agent, parent, hparams, changes = self.start_agent(rng, seed)
        steps = 0
        for row in iterate_training(agent, self.env, self.config.generation_steps, seed=seed):
            steps = int(row["global_step"])  # may overshoot generation_steps by part of one train_step
        result = evaluate(agent, self.eval_env, seed=self.config.eval_seed)
        return self.board.submit(
            agent, result["eval/return_mean"], score_std=result["eval/return_std"], ticket=ticket,
            parent_id=parent.id if parent else None, generation=parent.generation + 1 if parent else 0,
            pod=self.spec.pod_id, agent_name=self.config.agent, hparams=hparams, changes=changes,
            env_steps=(parent.env_steps if parent else 0) + steps,
            wall_time=time.perf_counter() - start)

    def run(self) -> int:
        """Generations until the budget is spent, a stop is requested or the driver is gone."""
        done = 0
        while self.spec.parent_pid is None or os.getppid() == self.spec.parent_pid:
            ticket = self.board.claim(self.spec.pod_id)
            if ticket is None:
                break
            self.run_generation(ticket)
            done += 1
        return done


def pod_main(spec: PodSpec) -> None:
    """Entry point of a pod process (any backend). Errors are recorded in the board's pod table."""
    # Ctrl-C in a terminal reaches the whole process group: the driver alone decides what stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(spec.threads)
    board = Leaderboard(spec.store)
    board.set_pod(spec.pod_id, pid=os.getpid())
    try:
        Pod(spec).run()
    except BaseException:
        board.set_pod(spec.pod_id, error=traceback.format_exc())
        raise
