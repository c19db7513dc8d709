"""A pod: one worker of the tournament, with its own env, eval env and share of the machine.

Each generation a pod claims a ticket from the board, starts from a parent drawn from the top of
the board (or a fresh agent), perturbs its mutable hyperparameters, trains ``generation_steps``
env steps with ``podracer.iterate_training``, evaluates the deterministic policy on its
validation env and submits the result. It repeats until the board's budget is spent or it is
asked to stop. A pod holds no state between generations that the board does not: killing one
loses at most the generation it was training.

A pod started by the local backend watches its driver: when the driver process is gone (killed,
even by SIGKILL), the pod releases its ticket and exits within a second instead of finishing a
generation nobody will collect. Should its result reach the board anyway after a new driver took
over the store, the board refuses it (``TicketError``: the ticket was released) and the pod stops.

A pod does not know which backend runs it: it talks to whatever ``spec.open_board()`` returns,
the ``Leaderboard`` on a shared store (local backend) or a client with the same methods
(``ray_backend.RemoteLeaderboard``, which reaches the store through an actor on the head node).
Its metrics go the same way, to ``spec.open_reporter()``: TensorBoard files in the store
(``tensorboard=True``), or what the backend gives (Ray metrics, and TensorBoard files written on
the head node).
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import signal
import socket
import sys
import threading
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

from podracer.agents.common import mutable_bounds
from podracer.agents.registry import make_agent, resolve_agent
from podracer.checkpoints import CheckpointError
from podracer.deprecation import deprecated_alias
from podracer.train import iterate_training, seed_everything
from podracer.tournament.config import TournamentConfig
from podracer.tournament.fitness import make_fitness, paired_difference
from podracer.tournament.leaderboard import Entry, Leaderboard, TicketError
from podracer.tournament.protocol import PodBoard
from podracer.tournament.selection import mutate, mutation_scales, select_parent, superseded_removed

TENSORBOARD_DIR = "tb"  # a store's TensorBoard logs: tb/pod-<id>, one run per pod (tensorboard --logdir store/tb)
WATCHDOG_INTERVAL_S = 0.5  # how often a pod checks that its driver is alive
FIRST_TICKET = 1  # the store's first ticket id (SQLite AUTOINCREMENT): its fresh agent keeps the configured hparams
ORPHAN_EXIT_CODE = 75  # the exit code of a pod whose driver is gone (EX_TEMPFAIL: its generation is lost)


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
    board: Callable[[], Any] | None = None  # opens the pod's leaderboard (set by the backend); None: Leaderboard(store)
    reporter: Callable[[], Any] | None = None  # opens the pod's metrics sink (set by the backend); see open_reporter

    def open_board(self) -> PodBoard:
        """The leaderboard this pod claims from and submits to (``protocol.PodBoard``: ``claim``, ``top``,
        ``load_agent``, ``submit``, ... behave as ``Leaderboard``'s)."""
        return Leaderboard(self.store) if self.board is None else self.board()

    def open_reporter(self) -> Any:
        """Where this pod's metrics go after each generation (``report(scalars)``, ``close()``): the
        backend's reporter if it set one, else TensorBoard files in the store with
        ``config.tensorboard``, else None."""
        if self.reporter is not None:
            return self.reporter()
        if self.config.tensorboard:
            return TensorBoardLog(Path(self.store) / TENSORBOARD_DIR / f"pod-{self.pod_id}")
        return None


Scalar = tuple[str, float, int]  # (TensorBoard tag, value, step)


class TensorBoardLog:
    """A pod's TensorBoard event files in ``log_dir``: every training row of its generations and,
    per generation, its result (``tournament/score``, ...) and hyperparameters (``hp/...``). The
    steps are the pod's own env steps, so each pod's curves run forward even when it switches
    lineage (an entry's ``global_step`` counts along its lineage instead)."""

    def __init__(self, log_dir: str | Path):
        from torch.utils.tensorboard import SummaryWriter  # slow to import: only when asked for

        self.writer = SummaryWriter(str(log_dir))

    def report(self, scalars: list[Scalar]) -> None:
        for tag, value, step in scalars:
            self.writer.add_scalar(tag, value, step)
        self.writer.flush()  # a pod can be killed at any time: what was reported is on disk

    def close(self) -> None:
        self.writer.close()


class Pod:
    steps = deprecated_alias("pod_steps")

    def __init__(self, spec: PodSpec):
        self.spec, self.config = spec, spec.config
        self.board = spec.open_board()
        self.agent_cls = resolve_agent(self.config.agent)
        self.env = spec.make_env()
        self.eval_env = spec.make_eval_env()
        self.fitness = make_fitness(self.config.fitness, self.eval_env)  # "auto": the eval env's task's default
        self.last: Entry | None = None  # this pod's latest submission (see ``keep_top``)
        self.reporter = spec.open_reporter()
        self.pod_steps = 0  # env steps this pod trained, over all its generations: its metrics' x axis

    def start_agent(self, rng: random.Random, seed: int, ticket: int = FIRST_TICKET
                    ) -> tuple[Any, Entry | None, dict[str, Any], dict[str, list]]:
        """``(agent, parent, hparams, changes)``: a mutated copy of a selected parent (weights,
        optimizer state, normalisers), or a fresh agent when the board is empty or by chance (its
        hparams partly redrawn unless ``ticket`` is the run's first, see ``init_resample_prob``).
        A pod whose latest entry leads the board (``keep_top``) trains on from it unchanged, except in
        the ``explore_prob`` share of generations, which start fresh whoever leads."""
        cfg = self.config
        unusable: set[int] = set()  # this draw: corrupt ones are also flagged, missing ones only skipped
        for _ in range(3):  # a parent whose checkpoint fails to load is skipped and another is drawn
            candidates = [e for e in self.board.top(max(cfg.top_k, cfg.keep_top) + len(unusable))
                          if e.id not in unusable]
            if not candidates or rng.random() < cfg.explore_prob:
                break
            own = self.leading(candidates, unusable)
            parent = own or select_parent(candidates, rng, cfg.selection, cfg.top_k, cfg.temperature)
            try:
                agent = self.board.load_agent(parent, device=str(self.env.device))
            except CheckpointError:  # warned by the board
                unusable.add(parent.id)
                continue
            bounds = mutable_bounds(agent.config)
            current = {k: getattr(agent.config, k) for k in bounds}
            if own is not None:  # PBT exploits and explores only when a member lags behind
                return agent, parent, current, {}
            hparams, changes = mutate(current, bounds, rng, cfg.perturb_factors, cfg.resample_prob,
                                      mutation_scales(agent.config))
            if changes:
                agent.set_hparams(**{k: hparams[k] for k in changes})
            return agent, parent, hparams, changes
        agent = make_agent(self.agent_cls, self.env, seed=seed, preset=cfg.preset, verbose=False, **cfg.agent_config)
        bounds = mutable_bounds(agent.config)
        hparams, changes = {k: getattr(agent.config, k) for k in bounds}, {}
        if ticket != FIRST_TICKET and cfg.init_resample_prob > 0:
            # Explore from generation 0: a fresh agent other than the first redraws some hparams
            # (changes are relative to the configured values); the first keeps them, so the
            # user's setting is always in the population.
            hparams, changes = mutate(hparams, bounds, rng, factors=(), resample_prob=cfg.init_resample_prob,
                                      scales=mutation_scales(agent.config))
            if changes:
                agent.set_hparams(**{k: hparams[k] for k in changes})
        return agent, None, hparams, changes

    def leading(self, candidates: list[Entry], unusable: set[int] | frozenset[int] = frozenset()) -> Entry | None:
        """This pod's latest entry when it is among the best ``keep_top`` of the front of
        ``candidates`` (PBT's truncation selection: such a member neither copies nor perturbs), or
        within ``exploit_margin`` standard errors of the best; None when its checkpoint is
        ``unusable`` in this draw. The standard error is the fitness's own: from the paired
        per-window differences when both entries have window scores, else Welch's over the eval
        env's episodes."""
        cfg, last = self.config, self.last
        if last is None or last.id in unusable:
            return None
        front = sorted(superseded_removed(candidates), key=lambda e: (-e.score, e.id))
        if last.id in {e.id for e in front[:keep_top(cfg)]}:
            return last
        superseded = last.id in {e.id for e in candidates} - {e.id for e in front}  # a descendant beat it
        if cfg.exploit_margin > 0 and front and not superseded:
            if front[0].score - last.score <= cfg.exploit_margin * self.difference_stderr(front[0], last):
                return last  # not worse beyond evaluation noise: copying the leader would follow luck
        return None

    def difference_stderr(self, leader: Entry, last: Entry) -> float:
        """The standard error of ``leader.score - last.score``: from their paired per-window scores
        when both have the same number of windows (the validation scheme's own noise estimate: both
        were scored on the same windows), else Welch's from ``score_std`` over the eval env's
        episodes (0, so no margin, with one episode or none recorded)."""
        a, b = leader.window_scores, last.window_scores
        if a is not None and b is not None and len(a) == len(b) and len(a) > 1:
            se = paired_difference(a, b)[1]
            if math.isfinite(se):  # a None (NaN) window score gives NaN: fall back to Welch
                return se
        n = max(int(getattr(self.eval_env, "num_envs", 1)), 1)
        return math.sqrt(((leader.score_std or 0.0) ** 2 + (last.score_std or 0.0) ** 2) / n)

    def run_generation(self, ticket: int) -> Entry:
        """Train, evaluate and submit one generation under ``ticket``."""
        start = time.perf_counter()
        seed = (self.config.seed * 1_000_003 + ticket) % 2**31  # distinct per generation, reproducible
        seed_everything(seed)
        rng = random.Random(seed)
        agent, parent, hparams, changes = self.start_agent(rng, seed, ticket)
        first, steps = int(getattr(agent, "global_step", 0)), 0
        scalars: list[Scalar] = []
        for row in iterate_training(agent, self.env, self.config.generation_steps, seed=seed):
            steps = int(row["global_step"]) - first  # this generation's; may overshoot by part of one train_step
            scalars += [(k, v, self.pod_steps + steps) for k, v in row.items() if k != "global_step"]
        train_s = time.perf_counter() - start
        result = self.fitness(agent, self.eval_env, seed=self.config.eval_seed)
        self.last = self.board.submit(
            agent, result.score, score_std=result.score_std, window_scores=result.window_scores,
            returns=result.returns, ticket=ticket,
            parent_id=parent.id if parent else None, generation=parent.generation + 1 if parent else 0,
            pod=self.spec.pod_id, agent_name=self.config.agent, hparams=hparams, changes=changes,
            global_step=(parent.global_step if parent else 0) + steps,
            wall_time=time.perf_counter() - start)
        self.pod_steps += steps
        self.report(scalars + generation_scalars(self.last, steps, train_s, self.pod_steps))
        return self.last

    def report(self, scalars: list[Scalar]) -> None:
        """Hand the generation's metrics to the reporter; a failure to log never stops training."""
        if self.reporter is None:
            return
        try:
            self.reporter.report(scalars)
        except Exception as e:
            warnings.warn(f"pod {self.spec.pod_id}: its metrics were not logged ({type(e).__name__}: {e})",
                          RuntimeWarning, stacklevel=2)

    def run(self) -> int:
        """Generations until the budget is spent, a stop is requested, the driver is gone, or the
        board refuses a result because its ticket was released (a new driver took over)."""
        done = 0
        try:
            while self.spec.parent_pid is None or os.getppid() == self.spec.parent_pid:
                ticket = self.board.claim(self.spec.pod_id)
                if ticket is None:
                    break
                try:
                    self.run_generation(ticket)
                except TicketError as e:
                    warnings.warn(f"pod {self.spec.pod_id} stops: {e}", RuntimeWarning, stacklevel=2)
                    break
                done += 1
        finally:
            if self.reporter is not None:
                self.reporter.close()
        return done


def keep_top(config: TournamentConfig) -> int:
    """``config.keep_top``, below the pod count: with as many pods as ``keep_top`` or fewer, every
    pod's latest entry would rank in the top ``keep_top`` and no pod would ever exploit a better one
    (with ``pods="auto"`` the count is not known ahead: as configured)."""
    if config.pods == "auto":
        return config.keep_top
    return min(config.keep_top, config.pods - 1)


def generation_scalars(entry: Entry, steps: int, train_s: float, pod_steps: int) -> list[Scalar]:
    """One generation's result as metrics at the pod's step count ``pod_steps``: ``tournament/...``
    (the names reporters look up) and the entry's hyperparameters as ``hp/<name>``."""
    values = {"tournament/score": entry.score, "tournament/generation": entry.generation,
              "tournament/global_step": entry.global_step, "tournament/generation_steps": steps,
              "tournament/steps_per_second": steps / max(train_s, 1e-9), "tournament/wall_time": entry.wall_time,
              **{f"hp/{k}": v for k, v in entry.hparams.items() if isinstance(v, (int, float))}}
    if entry.score_std is not None:
        values["tournament/score_std"] = entry.score_std
    return [(tag, float(value), pod_steps) for tag, value in values.items()]


def watch_driver(spec: PodSpec, interval_s: float = WATCHDOG_INTERVAL_S) -> threading.Thread | None:
    """Start a daemon thread that ends this pod process soon after its driver (``spec.parent_pid``)
    is gone: it releases the pod's ticket, marks the pod ``lost`` and exits with
    ``ORPHAN_EXIT_CODE``. Without it an orphan would train to the end of its generation."""
    if spec.parent_pid is None:
        return None

    def watch() -> None:
        while os.getppid() == spec.parent_pid:  # an orphan is re-parented (to init or a subreaper)
            time.sleep(interval_s)
        sys.stderr.write(f"podracer pod {spec.pod_id}: its driver (pid {spec.parent_pid}) is gone; exiting, "
                         f"its current generation is lost\n")
        try:  # best effort: a new driver releases the tickets and retires the pods anyway
            board = Leaderboard(spec.store, busy_timeout_s=5.0)
            board.release_tickets(spec.pod_id)
            board.set_pod(spec.pod_id, status="lost", ended_at=time.time(), exitcode=ORPHAN_EXIT_CODE,
                          error=f"driver (pid {spec.parent_pid}) gone")
        except Exception:
            pass
        finally:
            os._exit(ORPHAN_EXIT_CODE)  # now, from this thread: the main thread may be deep in training

    thread = threading.Thread(target=watch, name=f"podracer-pod-{spec.pod_id}-watchdog", daemon=True)
    thread.start()
    return thread


def where_am_i() -> dict[str, str]:
    """``host`` (hostname) and ``node`` (the Ray node id in a Ray worker, else the hostname) of this
    process, for the board's pods table: which machine ran which pod."""
    host = socket.gethostname()
    ray = sys.modules.get("ray")  # imported only where Ray runs this pod: never import it here
    if ray is not None and ray.is_initialized():
        return {"host": host, "node": ray.get_runtime_context().get_node_id()}
    return {"host": host, "node": host}


def pod_main(spec: PodSpec) -> None:
    """Entry point of a pod process (any backend). Errors are recorded in the board's pod table."""
    # Ctrl-C in a terminal reaches the whole process group: the driver alone decides what stops.
    if threading.current_thread() is threading.main_thread():  # only there may signal handlers change
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(spec.threads)
    watch_driver(spec)
    board = spec.open_board()
    board.set_pod(spec.pod_id, pid=os.getpid(), **where_am_i())
    try:
        Pod(spec).run()
    except BaseException:
        board.set_pod(spec.pod_id, error=traceback.format_exc())
        raise
