"""``Tournament``: a pool of pods training against one leaderboard, elastic and resumable.

The driver (this class, in your process) starts pods through a backend, watches them, replaces
the ones that die, adds or stops pods on request and ends when the board holds its budget of
entries. The budget is ``pods * generations`` entries, counted from the board itself: a run that
was interrupted resumes where the board stands, and elastically added pods simply finish it
sooner. The pods themselves need nothing from the driver but the store; see ``pod.py``.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import signal
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import torch

from podracer.agents.common import make_config
from podracer.agents.registry import agent_name, resolve_agent
from podracer.checkpoints import CheckpointError
from podracer.agents.registry import get_preset
from podracer.tournament.backends import check_backend, check_not_spawning, make_backend
from podracer.tournament.config import (TournamentConfig, callable_spec, check_picklable, check_trusted,
                                        resolve_callable)
from podracer.tournament.ensemble import (COMBINE, DIVERSITY, SELECT, Ensemble, action_similarity, check_choice,
                                          returns_similarity, score_weights, select_diverse)
from podracer.tournament.fitness import resolve_auto, saved_fitness
from podracer.tournament.leaderboard import Leaderboard
from podracer.tournament.pod import PodSpec
from podracer.tournament.progress import Progress
from podracer.tournament.storage import StorageSync, is_uri, open_storage, restore

try:
    import fcntl
except ImportError:  # Windows: no advisory lock; one driver per store is then on the user
    fcntl = None


AUTO_EVERY_S = 5.0  # pods="auto": how often the driver asks the backend how many pods fit


class Tournament:
    """Train ``pods`` agents at once; each generation starts from a good entry of the shared
    leaderboard with perturbed hyperparameters (population based training).

    ``make_env`` / ``make_eval_env`` build a pod's batched training and validation envs. They
    must be picklable (module-level functions or ``functools.partial``) because every pod is a
    new process. Any other ``TournamentConfig`` field can be passed as a keyword argument.
    ``store`` is a directory: run again with the same store and settings to resume.

    ``pods="auto"`` trains as many pods as the machine (or cluster) holds and follows it as nodes
    join and leave; its budget is then ``entries=`` (board entries) or ``time_budget=``.

    ``backend="local"`` runs pods as processes on this machine; ``backend="ray"`` as Ray actors
    on this machine or a cluster (``address=`` or ``$RAY_ADDRESS``, ``gpus_per_pod=``), the store
    staying on this machine (see ``ray_backend.py``). Nothing else changes.
    """

    def __init__(self, make_env: Callable[[], Any], make_eval_env: Callable[[], Any], agent: str | type = "ppo",
                 pods: int | str = 4, generation_steps: int = 20_000, generations: int | None = 10,
                 time_budget: float | None = None, store: str | Path = "runs/tournament", backend: str = "local",
                 agent_config: dict[str, Any] | None = None, seed: int = 0, **options: Any):
        check_picklable(make_env, "make_env")
        check_picklable(make_eval_env, "make_eval_env")
        self.make_env, self.make_eval_env = make_env, make_eval_env
        self.config = TournamentConfig(
            agent=agent_name(agent), agent_config=dict(agent_config or {}), pods=pods,
            generation_steps=generation_steps, generations=generations, time_budget=time_budget, seed=seed,
            backend=backend, make_env=callable_spec(make_env), make_eval_env=callable_spec(make_eval_env), **options)
        # "auto" becomes the eval env's task's fitness now, and the store keeps it (fitness.py)
        self.config.fitness = resolve_auto(self.config.fitness, make_eval_env)
        agent_cls = resolve_agent(self.config.agent)
        make_config(agent_cls.config_cls, self.config.agent_config)  # unknown keys: an error now, not in every pod
        if self.config.preset not in ("auto", None):
            get_preset(agent_cls, self.config.preset)  # an unknown preset too
        check_backend(self.config.backend)  # an unknown or unavailable backend fails here, not in run()
        self.store = Path(store)
        self.board = Leaderboard(self.store)
        self.storage = open_storage(self.config.storage_path, self.config.storage_sync_s)  # see storage.py
        saved = self.store / "tournament.yaml"
        if saved.exists():
            before = TournamentConfig.from_yaml(saved)
            before.fitness = saved_fitness(before.fitness)
            diff = before.differences(self.config)
            if diff:
                raise ValueError(f"{saved} describes a different tournament ({'; '.join(diff)}); use a new store, "
                                 f"or Tournament.from_store({str(self.store)!r}) to resume that one")
        self.config.to_yaml(saved)
        self.auto = self.config.pods == "auto"  # the pod count follows the backend's capacity
        self._target = 1 if self.auto else self.config.pods
        self._offset = 0  # add_pods / remove_pods with pods="auto": pods on top of the capacity
        self._capacity_checked = -math.inf
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.poll_s = 0.2

    @classmethod
    def from_store(cls, store: str | Path, make_env: Callable[[], Any] | None = None,
                   make_eval_env: Callable[[], Any] | None = None,
                   allow: Iterable[str | Callable[..., Any]] | None = None,
                   local_store: str | Path | None = None, **overrides: Any) -> "Tournament":
        """Rebuild a tournament from ``store/tournament.yaml`` (to resume or extend it). The env
        factories are re-imported from the file unless given; ``overrides`` change run fields
        such as ``generations`` or ``pods``.

        The file is untrusted input, like a checkpoint: anyone who can write the store can edit
        it. The env factories and agent it names run only when they are Podracer's own
        (``podracer.tournament.config.trusted_factories()``: the core's, the registered envs' and the
        installed domains' factories; the registry's agents), or the ones you
        name in ``allow`` (``"mypkg.envs:make_env"``, or the function or class itself); passing
        ``make_env=...`` yourself allows that factory too. Anything else is refused before it is
        imported, with an error naming it.

        ``store`` may be a storage URI (``s3://bucket/run``, ``file:///mnt/runs/run``: a run's
        ``storage_path``): its snapshot and checkpoints are downloaded into ``local_store``
        (default ``runs/<last part of the URI>``), and the run resumes there and goes on syncing
        to that URI (``storage.restore``)."""
        if is_uri(store):
            overrides.setdefault("storage_path", store)
            store = restore(store, local_store)
        path = Path(store) / "tournament.yaml"
        if not path.is_file():  # found by probing: a bare FileNotFoundError for tournament.yaml
            what = "a folder without tournament.yaml" if Path(store).is_dir() else "not there"
            raise FileNotFoundError(f"{store} is no tournament store ({what}): a store is the folder a Tournament(..., "
                                    f"store=...) or `podracer tournament --store` wrote, with its tournament.yaml; "
                                    f"check the path, or start a new run there with Tournament(...)")
        allow = list(allow or ())
        cfg = TournamentConfig.from_yaml(path).to_dict()
        cfg["fitness"] = saved_fitness(cfg["fitness"])  # as the run began, whatever "auto" means today
        env_specs = {k: cfg.pop(k) for k in ("make_env", "make_eval_env")}
        factories = {"make_env": make_env, "make_eval_env": make_eval_env}
        for k, fn in factories.items():
            if fn is not None:
                continue
            spec = env_specs[k]
            if spec is None:
                raise ValueError(f"{path} has no import spec for {k} (it was not a module-level function or "
                                 f"partial); pass {k}=... to from_store")
            if not isinstance(spec, dict) or not isinstance(spec.get("function"), str):
                raise ValueError(f"{path}: {k} must be {{function: 'module:name', args: [...], kwargs: {{...}}}}, "
                                 f"got {spec!r}")
            check_trusted(k, spec["function"], path, allow)
        if "agent" not in overrides:
            check_trusted("agent", cfg["agent"], path, allow)
        for k, fn in factories.items():  # only now, when every name has passed, import anything
            if fn is None:
                factories[k] = resolve_callable(env_specs[k])
        return cls(**factories, store=store, **{**cfg, **overrides})

    def __repr__(self) -> str:
        return (f"Tournament({self.config.agent!r}, pods={self._target}, store={str(self.store)!r}, "
                f"board={len(self.board)})")

    # ------------------------------------------------------------------------ running
    def run(self, progress: str | None = "auto") -> Leaderboard:
        """Run until the board holds ``pods * generations`` entries or ``time_budget`` seconds
        pass, then return the board. Ctrl-C kills the pods (their current generations are lost,
        the board stays consistent) and re-raises; ``run()`` again to resume."""
        sync = StorageSync(self.board, self.storage, self.config.storage_sync_s, self.config.storage_direct_bytes)
        with self._driver_lock(), sync:
            self._stop.clear()
            return self._drive(progress)

    def start(self, progress: str | None = None) -> "Tournament":
        """``run()`` in a background thread; use ``add_pods``, ``remove_pods``, ``stop`` and
        ``wait`` meanwhile."""
        if self.running:
            raise RuntimeError("this tournament is already running")
        self._thread = threading.Thread(target=self.run, args=(progress,), name="podracer-tournament", daemon=True)
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> Leaderboard:
        if self._thread is not None:
            self._thread.join(timeout)
        return self.board

    def stop(self) -> None:
        """Ask every pod to stop after its current generation; ``run`` then returns."""
        self._stop.set()

    def add_pods(self, n: int = 1) -> None:
        """Train with ``n`` more pods (now if running, else in the next ``run``); with
        ``pods="auto"``, ``n`` more than the resources hold (they wait for room)."""
        with self._lock:
            self._target += n
            self._offset += n

    def remove_pods(self, n: int = 1) -> None:
        """Train with ``n`` fewer pods; the removed ones finish their current generation first."""
        with self._lock:
            self._offset -= min(n, self._target)
            self._target = max(0, self._target - n)

    @property
    def pods(self) -> int:
        """Pods the run trains with now (with ``pods="auto"``: the capacity last seen, adjusted)."""
        return self._target

    def _follow_capacity(self, backend: Any) -> None:
        """``pods="auto"``: every ``AUTO_EVERY_S`` seconds, as many pods as the machine or cluster holds
        (nodes that join add pods; pods of nodes that leave die and are not replaced beyond it)."""
        if not self.auto or time.monotonic() - self._capacity_checked < AUTO_EVERY_S:
            return
        self._capacity_checked = time.monotonic()
        capacity = min(backend.capacity(), self.config.max_pods or math.inf)
        with self._lock:
            self._target = max(0, capacity + self._offset)

    def _drive(self, progress_mode: str | None) -> Leaderboard:
        """The driver loop: take the store over, then every ``poll_s`` reap the pods that ended,
        wind down when out of time or asked to stop, and start or stop pods to match the target."""
        cfg, board = self.config, self.board
        backend = make_backend(cfg, self.store)
        run = _RunState(start=time.monotonic())
        self._capacity_checked = -math.inf  # pods="auto": size the pool at once
        board.set_budget(cfg.budget)
        board.release_tickets()  # tickets of an earlier driver's pods: those generations are lost
        board.retire_pods()  # rows of an earlier driver's pods: none may claim tickets any more
        progress = Progress(board, cfg.budget, progress_mode)
        try:
            while True:
                self._reap(backend, run)
                self._follow_capacity(backend)
                winding_down = self._check_wind_down(run)
                self._scale(backend, run, winding_down)
                self._cancel_unstarted(backend, run, winding_down)
                if not run.handles and (winding_down or self._target == 0):
                    break
                progress.update(len(run.handles))
                time.sleep(self.poll_s)
        except BaseException:
            self._kill_all(backend, run)
            raise
        finally:
            progress.close(len(run.handles))
            backend.close()
        if cfg.budget is not None and len(board) < cfg.budget and not (run.out_of_time or self._stop.is_set()):
            warnings.warn(f"run ended with {len(board)}/{cfg.budget} entries: no pods left (all removed, or failed "
                          f"with replace_failed=False); run() again to finish", RuntimeWarning, stacklevel=3)
        return board

    def _reap(self, backend: Any, run: "_RunState") -> None:
        """Record the pods that ended. A failed one is reported, counted against its slot (the pod
        and those that took its place, as Ray Tune counts a trial's failures) and, by default,
        replaced; one lost with its node (``backend.fault``) is replaced and not counted."""
        cfg, board = self.config, self.board
        for pod, handle in list(run.handles.items()):
            code = backend.poll(handle)
            if code is None:
                continue
            del run.handles[pod]
            board.release_tickets(pod)
            slot = run.slots.pop(pod)
            run.free_slots.add(slot)  # the next pod started takes this slot, and its failure count
            fault = backend.fault(handle) if code != 0 else None
            if pod in run.cancelled or fault:  # killed on purpose before it started, or its node lost
                if pod in run.cancelled:  # why, in the pods table: not the backend's word for a kill (a fault's)
                    board.set_pod(pod, status="cancelled", exitcode=code, ended_at=time.time(),
                                  error=run.cancelled[pod])
                else:
                    board.set_pod(pod, status="preempted", exitcode=code, ended_at=time.time())
                    warnings.warn(f"pod {pod} ended ({fault}: not counted as a failure); its current generation is "
                                  f"lost and a new pod takes its place:\n{board.pod_error(pod)}", RuntimeWarning,
                                  stacklevel=4)
                run.stopping.discard(pod)
                continue
            failed = code != 0
            board.set_pod(pod, status="failed" if failed else "exited", exitcode=code, ended_at=time.time())
            if failed:
                run.failures[slot] += 1
                error = board.pod_error(pod) or _unstarted(board, pod, code)
                warnings.warn(f"pod {pod} died (exit code {code}); its current generation is lost"
                              + (f":\n{error}" if error else ""), RuntimeWarning, stacklevel=4)
                if run.failures[slot] > cfg.max_failures:
                    raise RuntimeError(f"pod {pod} died: failure {run.failures[slot]} of the pods in its place "
                                       f"(max_failures={cfg.max_failures} per pod; pods lost with their node are not "
                                       f"counted); last error:\n{error or f'exit code {code}'}")
                if not cfg.replace_failed and pod not in run.stopping:
                    self.remove_pods(1)
            run.stopping.discard(pod)

    def _check_wind_down(self, run: "_RunState") -> bool:
        """True once the run should end: out of time, asked to stop, or the budget is spent. The
        first two ask every pod to stop after its current generation."""
        cfg = self.config
        run.out_of_time = cfg.time_budget is not None and time.monotonic() - run.start > cfg.time_budget
        if (run.out_of_time or self._stop.is_set()) and len(run.stopping) < len(run.handles):
            self.board.request_stop()
            run.stopping |= set(run.handles)
        return run.out_of_time or self._stop.is_set() or self._remaining() <= 0

    def _remaining(self) -> float:
        budget = self.config.budget
        return math.inf if budget is None else budget - len(self.board)

    def _scale(self, backend: Any, run: "_RunState", winding_down: bool) -> None:
        """Start pods up to the target (never more than the entries still missing); ask the
        newest extra ones to stop after their generation (``remove_pods``)."""
        active = sorted(set(run.handles) - run.stopping)
        wanted = 0 if winding_down else min(self._target, self._remaining())
        while len(active) < wanted:
            pod = self.board.register_pod()
            run.slots[pod] = min(run.free_slots) if run.free_slots else len(run.slots) + len(run.free_slots)
            run.free_slots.discard(run.slots[pod])
            run.handles[pod] = backend.start(PodSpec(str(self.store), pod, self.config, self.make_env,
                                                     self.make_eval_env, threads=self.config.threads))
            active.append(pod)
        for pod in [] if winding_down else active[self._target:]:
            self.board.request_stop(pod)
            run.stopping.add(pod)

    def _cancel_unstarted(self, backend: Any, run: "_RunState", winding_down: bool) -> None:
        """Kill the pods that should stop but never started (no pid yet): a pod waiting for
        resources (a Ray actor no node can place) would otherwise keep the run from ending. They
        hold no ticket: nothing is lost."""
        candidates = (set(run.handles) if winding_down else run.stopping) - run.cancelled.keys()
        if not candidates:
            return
        pids = self.board.pods()["pid"]
        for pod in candidates:
            if pod in pids.index and pids.isna()[pod]:
                backend.kill(run.handles[pod])
                run.cancelled[pod] = self._cancel_reason(run, winding_down)

    def _cancel_reason(self, run: "_RunState", winding_down: bool) -> str:
        """What the pods table says of a pod cancelled before it started (the run's end, not a fault)."""
        if not winding_down:
            return "cancelled before it started: removed from the run (remove_pods)"
        if run.out_of_time:
            return f"cancelled before it started: the run's time_budget of {self.config.time_budget:g} s was spent"
        if self._stop.is_set():
            return "cancelled before it started: the run was asked to stop"
        return f"cancelled before it started: the board holds its budget of {self.config.budget} entries"

    def _kill_all(self, backend: Any, run: "_RunState") -> None:
        """Ctrl-C or an error: kill the pods now. Their tickets are released, their files without
        rows are orphans, every row on the board is complete."""
        with _sigint_ignored():  # a second Ctrl-C must not cut this clean-up short
            for handle in run.handles.values():
                backend.kill(handle)
            for pod, handle in run.handles.items():
                backend.join(handle, timeout=10)
                self.board.set_pod(pod, status="killed", exitcode=backend.poll(handle), ended_at=time.time())
            self.board.release_tickets()

    @contextlib.contextmanager
    def _driver_lock(self) -> Iterator[None]:
        if fcntl is None:
            yield
            return
        with open(self.store / "driver.lock", "w") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                check_not_spawning()  # a pod re-running a script without `if __name__ == "__main__":`
                raise RuntimeError(f"another Tournament is running on {self.store} (driver.lock is held); wait for "
                                   f"it to finish or use another store") from None
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    # ------------------------------------------------------------------------ results
    def best(self, device: str | None = None) -> Any:
        """The agent of the best entry whose checkpoint verifies (corrupt ones are skipped)."""
        return self.ensemble(1, device).agents[0]

    def ensemble(self, k: int = 5, device: str | None = None, *, select: str = "top", combine: str = "auto",
                 penalty: float = 1.0, pool: int | None = None, diversity: str = "auto", obs: Any = None,
                 weighting: str = "softmax", temperature: float = 1.0) -> Ensemble:
        """A policy combining ``k`` verified agents of the board (see ``ensemble.py``).

        ``select="top"`` (default): the ``k`` best by score. ``"diverse"``: from the best ``pool``
        entries (default ``3 * k``), greedily the best score less ``penalty`` (in units of the
        candidates' score spread) times the mean similarity to those chosen; the similarity is the
        correlation of the entries' stored validation returns (``diversity="returns"``) or how alike
        their deterministic actions are on ``obs`` (``"actions"``; default: observations of the
        best candidate's run on ``make_eval_env``); ``"auto"`` uses returns when every candidate kept them.
        ``combine``: ``"auto"`` (mean action, or majority vote), ``"mean"``, ``"median"``, ``"vote"``,
        or ``"weighted"`` by ``score_weights(scores, weighting, temperature)``.
        """
        check_choice("select", select, SELECT)
        check_choice("combine", combine, COMBINE)
        check_choice("diversity", diversity, DIVERSITY)
        if not (isinstance(k, int) and k >= 1):
            raise ValueError(f"k must be a positive integer, got {k!r}")
        if select == "top":
            entries, agents = self._verified(self.board.top(len(self.board)), device, k)
        else:
            entries, agents = self._diverse(k, device, penalty, pool, diversity, obs)
        if not agents:
            raise RuntimeError(f"no usable entry on the leaderboard at {self.store}; run() the tournament first")
        weights = score_weights([e.score for e in entries], weighting, temperature) if combine == "weighted" else None
        return Ensemble(agents, combine=combine, weights=weights, entries=[e.id for e in entries])

    def _verified(self, entries: Iterable[Any], device: str | None, k: int | None = None) -> tuple[list, list]:
        """The first ``k`` (default all) of ``entries`` whose checkpoints load, and their agents."""
        kept, agents = [], []
        for entry in entries:
            try:
                agents.append(self.board.load_agent(entry, device))
            except CheckpointError:
                continue  # already flagged and warned by the board
            kept.append(entry)
            if len(agents) == k:
                break
        return kept, agents

    def _diverse(self, k: int, device: str | None, penalty: float, pool: int | None, diversity: str,
                 obs: Any) -> tuple[list, list]:
        if pool is not None and not (isinstance(pool, int) and pool >= k):
            raise ValueError(f"pool must be an integer >= k={k} (the candidates to choose from), got {pool!r}")
        entries, agents = self._verified(self.board.top(pool or 3 * k), device)
        if not agents:
            return entries, agents
        kept = [e.returns for e in entries]
        has_returns = all(r is not None for r in kept) and len({len(r) for r in kept}) == 1
        if diversity == "returns" and not has_returns:
            raise ValueError("diversity='returns' needs every candidate's validation returns on one split, and some "
                             "entries kept none (a fitness without returns, or an older store); use "
                             "diversity='actions' or 'auto'")
        if diversity == "returns" or (diversity == "auto" and has_returns):
            similarity = returns_similarity(np.array(kept, dtype=float).T)
        else:
            if obs is None:
                obs = self._observations(agents[0])
            similarity = action_similarity(agents, obs)
        chosen = select_diverse([e.score for e in entries], similarity, k, penalty)
        return [entries[i] for i in chosen], [agents[i] for i in chosen]

    def _observations(self, agent: Any, steps: int = 32) -> Any:
        """Observations of ``agent``'s deterministic run on a fresh validation env (``steps`` steps of
        every sub-env, stacked): the states where the candidates' actions are compared."""
        env = self.make_eval_env()
        obs, _ = env.reset(seed=self.config.seed)
        seen = [obs]
        for _ in range(steps - 1):
            obs, *_ = env.step(agent.act(obs.to(agent.device), deterministic=True))
            seen.append(obs)
        return torch.cat(seen).to(agent.device)


@dataclasses.dataclass
class _RunState:
    """What the driver loop tracks between polls."""

    start: float  # time.monotonic() when run() began
    handles: dict[int, Any] = dataclasses.field(default_factory=dict)  # pod id -> backend handle
    stopping: set[int] = dataclasses.field(default_factory=set)  # pods asked to stop after their generation
    cancelled: dict[int, str] = dataclasses.field(default_factory=dict)  # pods killed before they started: why
    slots: dict[int, int] = dataclasses.field(default_factory=dict)  # running pod id -> its slot (max_failures)
    free_slots: set[int] = dataclasses.field(default_factory=set)  # slots of pods that ended, for the next ones
    failures: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # slot -> failures
    out_of_time: bool = False


def _unstarted(board: Leaderboard, pod: int, code: int) -> str | None:
    """What to say of a pod that died before it recorded anything: it never reached ``pod_main``."""
    if not board.pods()["pid"].isna().get(pod, False):
        return None
    return (f"exit code {code} before the pod started (its own output says why; with backend='local', a script "
            f"without `if __name__ == \"__main__\":` is the usual cause)")


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may touch signal handlers (and only it receives SIGINT)
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
