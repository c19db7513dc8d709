"""The Ray backend: pods as Ray actors on this machine or a cluster, the store on the head node.

Nodes share no filesystem, so the SQLite store stays on the driver's node and one actor pinned
there (``LeaderboardServer``) owns it through the same ``Leaderboard`` class the local backend
uses. Pods reach it through ``RemoteLeaderboard``, a thin client with the ``Leaderboard`` methods
pods call (``claim``, ``top``, ``load_agent``, ``submit``, ``set_pod``, ``release_tickets``), so a
pod does not know which backend runs it::

    head node (the driver's)                                      any node
    Tournament ── Leaderboard(store) ── board.sqlite, checkpoints/
                  LeaderboardServer ─── the same store      <──── pod actor: RemoteLeaderboard

Checkpoints travel as bytes through Ray's object store and are checked on arrival as today: a pod
sends ``torch.save`` bytes with their sha256; the server verifies them, loads them with
``weights_only=True`` and stores them with ``Leaderboard.submit`` (``checkpoints.write``: the same
files and rows as the local backend, so ``Leaderboard(store)`` reads a Ray run afterwards). A
parent travels back as its file's bytes, which the pod verifies against the entry's checksum
before loading: a damaged one is flagged corrupt, a missing one only skipped, as locally.

Ray does the scheduling: each pod asks for ``num_cpus`` (its torch threads) and ``gpus_per_pod``
(fractions allowed) and pods are spread over nodes. A pod actor that dies (``ray.kill``, a crash,
its node lost) reports ``POD_LOST_EXIT_CODE``; the driver releases its ticket and starts a
replacement, which Ray places on a live node: the board loses at most that generation. With
``pods="auto"`` the driver asks ``capacity()`` (pods the live nodes hold) every few seconds and
follows it. A pod no node can host would wait silently in Ray: it is reported when the backend
starts. A pod that fails before ``pod_main`` runs (its spec cannot be unpickled: the workers lack
the user's module) gets Ray's error, with the fix, in the pods table. Each pod records its node.

Which Ray: one already initialised in this process is used as it is; else ``config.address`` or
``$RAY_ADDRESS`` is joined; else a local instance is started (``start_local_ray``: dashboard off,
quiet logs; a notebook calls it to start one Ray for several tournaments). The backend shuts down
only what it started. The driver must run on a node of the cluster (the store
lives next to it): a Ray Client address (``ray://``) is refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import signal
import warnings
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from podracer import checkpoints
from podracer.checkpoints import CheckpointError, CheckpointMissingError
from podracer.tournament.config import RAY_CLIENT_REFUSED, TournamentConfig
from podracer.tournament.leaderboard import Entry, Leaderboard
from podracer.tournament.pod import PodSpec, pod_main

POD_LOST_EXIT_CODE = -signal.SIGKILL  # a pod actor whose process is gone: reported like a SIGKILLed local pod
POD_ERROR_EXIT_CODE = 1  # pod_main raised; its traceback is in the board's pods table
SERVER_START_TIMEOUT_S = 120.0  # the leaderboard actor must be up by then (a busy machine takes ~10 s)


# ---------------------------------------------------------------------------- checkpoints as bytes
# The byte halves of checkpoints.write and checkpoints.read (which take paths); they belong there
# as checkpoints.dumps / checkpoints.loads, and these two should become those calls.
checkpoint_bytes = checkpoints.dumps  # (bytes, sha256) of a checkpoint, exactly as written to disk


def verified_checkpoint(data: bytes, checksum: str, source: str, device: str = "cpu") -> dict[str, Any]:
    """``checkpoints.read`` for bytes that arrived over the network (``checkpoints.loads``)."""
    return checkpoints.loads(data, checksum, device, source=source)


# ---------------------------------------------------------------------------- the store's actor and its client
class LeaderboardServer:
    """Owns the store on the head node (a Ray actor pinned there) and serves the calls pods make."""

    def __init__(self, store: str):
        self.board = Leaderboard(store)

    def ping(self) -> str:
        return str(self.board.store)

    def claim(self, pod: int) -> int | None:
        return self.board.claim(pod)

    def top(self, k: int) -> list[Entry]:
        return self.board.top(k)

    def get(self, entry_id: int) -> Entry:
        return self.board.get(entry_id)

    def checkpoint_bytes(self, entry_id: int) -> bytes:
        """The stored file's bytes, unchecked: the pod verifies them on arrival."""
        path = self.board.store / self.board.get(entry_id).checkpoint
        try:
            return path.read_bytes()
        except OSError as e:
            raise CheckpointMissingError(f"cannot read checkpoint {path} on the head node: {e}") from e

    def submit(self, data: bytes, checksum: str, score: float, **fields: Any) -> Entry:
        ckpt = verified_checkpoint(data, checksum, f"from pod {fields.get('pod')} (ticket {fields.get('ticket')})")
        return self.board.submit(ckpt, score, **fields)

    def mark_corrupt(self, entry_id: int) -> None:
        self.board.mark_corrupt(entry_id)

    def set_pod(self, pod: int, **fields: Any) -> None:
        self.board.set_pod(pod, **fields)

    def release_tickets(self, pod: int | None = None) -> int:
        return self.board.release_tickets(pod)


class RemoteLeaderboard:
    """The board as a pod under Ray sees it: ``Leaderboard``'s methods that pods call, each a call
    to the ``LeaderboardServer`` actor. Picklable (it holds only the actor's handle). Errors raised
    by the server (``TicketError``, ``CheckpointError``, ``KeyError``) are raised here as they are."""

    def __init__(self, server: Any):
        self.server = server

    def __repr__(self) -> str:
        return f"RemoteLeaderboard({self.server!r})"

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return ray.get(getattr(self.server, method).remote(*args, **kwargs))
        except ray.exceptions.RayTaskError as e:
            if isinstance(e.cause, Exception):
                raise e.cause from e  # the board's own exception, with the server's traceback chained
            raise

    def claim(self, pod: int) -> int | None:
        return self._call("claim", pod)

    def top(self, k: int = 10) -> list[Entry]:
        return self._call("top", k)

    def get(self, entry_id: int) -> Entry:
        return self._call("get", entry_id)

    def submit(self, agent: Any, score: float, **fields: Any) -> Entry:
        """As ``Leaderboard.submit``; the checkpoint goes to the server as bytes with their sha256."""
        ckpt = agent if isinstance(agent, dict) else agent.checkpoint()
        data, checksum = checkpoint_bytes(ckpt)
        return self._call("submit", data, checksum, score, **fields)

    def load_checkpoint(self, entry: Entry | int, device: str = "cpu") -> dict[str, Any]:
        """As ``Leaderboard.load_checkpoint``: damaged bytes flag the entry corrupt, missing ones do not."""
        entry = entry if isinstance(entry, Entry) else self.get(entry)
        try:
            data = self._call("checkpoint_bytes", entry.id)
            return verified_checkpoint(data, entry.checksum, f"{entry.checkpoint} (entry {entry.id})", device)
        except CheckpointMissingError as e:
            warnings.warn(f"leaderboard entry {entry.id} skipped: {e} (missing, not flagged corrupt: it is used "
                          f"again once its file is back)", RuntimeWarning, stacklevel=2)
            raise
        except CheckpointError as e:
            self.mark_corrupt(entry.id)
            warnings.warn(f"leaderboard entry {entry.id} skipped: {e}", RuntimeWarning, stacklevel=2)
            raise

    def load_agent(self, entry: Entry | int, device: str | None = None) -> Any:
        from podracer.agents.registry import resolve_agent

        entry = entry if isinstance(entry, Entry) else self.get(entry)
        ckpt = self.load_checkpoint(entry, device or "cpu")
        return resolve_agent(entry.agent).from_checkpoint(ckpt, device=device)

    def mark_corrupt(self, entry_id: int) -> None:
        self._call("mark_corrupt", entry_id)

    def set_pod(self, pod: int, **fields: Any) -> None:
        self._call("set_pod", pod, **fields)

    def release_tickets(self, pod: int | None = None) -> int:
        return self._call("release_tickets", pod)


# ---------------------------------------------------------------------------- pods
class PodActor:
    """One pod in a Ray worker process of its own: an actor, so ``ray.kill`` ends exactly this pod."""

    def run(self, spec: PodSpec) -> int:
        pod_main(spec)
        return 0


@dataclasses.dataclass
class RayPod:
    """A backend handle: the pod's actor and the reference its ``run`` resolves to."""

    actor: Any
    done: Any  # ray.ObjectRef of actor.run(spec)
    pod_id: int
    exitcode: int | None = None


def pod_actor_name(store: str | Path, pod_id: int) -> str:
    """The Ray name of pod ``pod_id``'s actor (``ray.get_actor(name)`` in the driver's job)."""
    return f"podracer-pod-{pod_id}@{Path(store).resolve()}"


class RayBackend:
    """Pods as Ray actors spread over the cluster's nodes; the store served by an actor on this node."""

    def __init__(self, config: TournamentConfig, store: str | Path):
        self.config, self.store = config, Path(store).resolve()
        self.started_ray = connect(config)
        self.pods: list[RayPod] = []
        self.server: Any = None
        self.local_board = Leaderboard(self.store)  # the driver's own view of the store, for pod errors
        try:
            here = ray.get_runtime_context().get_node_id()  # the store is on this node's disk
            self.server = ray.remote(LeaderboardServer).options(
                num_cpus=0, max_restarts=-1, max_concurrency=8,  # a Leaderboard call opens its own connection
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False),
            ).remote(str(self.store))
            ray.get(self.server.ping.remote(), timeout=SERVER_START_TIMEOUT_S)
            self.threads = pod_threads(config)
            warn_if_infeasible(self.threads, config.gpus_per_pod)
        except BaseException:
            self.close()
            raise
        self.board = functools.partial(RemoteLeaderboard, self.server)

    def start(self, spec: PodSpec) -> RayPod:
        spec = dataclasses.replace(spec, board=self.board, threads=self.threads, parent_pid=None)
        actor = ray.remote(PodActor).options(
            num_cpus=self.threads, num_gpus=self.config.gpus_per_pod, scheduling_strategy="SPREAD",
            max_restarts=0, name=pod_actor_name(self.store, spec.pod_id),  # the driver replaces dead pods itself
        ).remote()
        handle = RayPod(actor, actor.run.remote(spec), spec.pod_id)
        self.pods.append(handle)
        return handle

    def poll(self, handle: RayPod) -> int | None:
        if handle.exitcode is None and ray.wait([handle.done], timeout=0)[0]:
            handle.exitcode, error = _outcome(handle.done)
            if error and not self.local_board.pod_error(handle.pod_id):  # pod_main records its own errors
                self.local_board.set_pod(handle.pod_id, error=error)  # this one came before: unpickling the spec
            ray.kill(handle.actor)  # a finished pod's worker would hold its CPUs until its driver exits
        return handle.exitcode

    def kill(self, handle: RayPod) -> None:
        ray.kill(handle.actor, no_restart=True)

    def join(self, handle: RayPod, timeout: float | None = None) -> None:
        ray.wait([handle.done], timeout=timeout)

    def capacity(self) -> int:
        """Pods the cluster's live nodes hold now, each asking for ``threads`` CPUs and
        ``gpus_per_pod`` GPUs on one node (at least one: a pod that waits for a node to join)."""
        return max(1, sum(pods_on_node(n["Resources"], self.threads, self.config.gpus_per_pod)
                          for n in ray.nodes() if n["Alive"]))

    def close(self) -> None:
        """Kill the actors this backend started; shut down Ray only if this backend started it."""
        if ray.is_initialized():
            for actor in [p.actor for p in self.pods] + ([self.server] if self.server is not None else []):
                with contextlib.suppress(Exception):  # gone already
                    ray.kill(actor, no_restart=True)
        self.pods = []
        if self.started_ray:
            ray.shutdown()
            self.started_ray = False


def connect(config: TournamentConfig) -> bool:
    """Make sure this process is connected to Ray; True when this call did it (``close`` then
    shuts it down). No address and no ``$RAY_ADDRESS``: a local instance sized like the local
    backend (every pod runs at once, as there)."""
    if ray.is_initialized():
        return False
    address = config.address or os.environ.get("RAY_ADDRESS") or None
    if address is not None and address.startswith("ray://"):
        raise ValueError(RAY_CLIENT_REFUSED.format(address=address))
    if address is not None:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=True)
    else:  # to use a `ray start` cluster on this machine instead, pass address="auto"
        pods = 1 if config.pods == "auto" else config.pods  # "auto": as many pods as this machine's CPUs
        start_local_ray(num_cpus=max(os.cpu_count() or 1, pods * config.threads))
    return True


def start_local_ray(num_cpus: int | None = None, num_gpus: int | None = None) -> bool:
    """Start a local Ray instance in this process unless Ray is running in it already; True when
    this call started it (then ``ray.shutdown()`` is yours to call), False when it kept the running one.

    ``address="local"``: a new instance, even if a ``ray start`` cluster runs on this machine
    (``ray.init()`` would join that one and then refuse ``num_cpus``). ``num_cpus`` (default: this
    machine's CPUs) is what Ray *believes* it has, a logical resource it places actors by, not a limit
    on what they use; ``num_gpus=0`` makes a Ray without GPU even on a machine with one (``None``:
    Ray detects them). Dashboard off, warnings and errors only."""
    if num_cpus is not None and (isinstance(num_cpus, bool) or not isinstance(num_cpus, int) or num_cpus < 1):
        raise ValueError(f"num_cpus must be a whole number, at least 1, or None (this machine's CPUs), "
                         f"got {num_cpus!r}")
    if num_gpus is not None and (isinstance(num_gpus, bool) or not isinstance(num_gpus, int) or num_gpus < 0):
        raise ValueError(f"num_gpus must be a whole number, 0 or more, or None (Ray detects them), got {num_gpus!r}")
    if ray.is_initialized():
        return False
    ray.init(address="local", num_cpus=num_cpus or os.cpu_count() or 1, num_gpus=num_gpus, include_dashboard=False,
             logging_level=logging.WARNING, log_to_driver=True)
    return True


def pod_threads(config: TournamentConfig) -> int:
    """``threads_per_pod``, or by default the cluster's CPUs shared among the pods (no more than a
    node has); 1 with ``pods="auto"`` (a pod per CPU)."""
    if config.threads_per_pod:
        return config.threads_per_pod
    if config.pods == "auto":
        return 1
    cpus = [n["Resources"].get("CPU", 0) for n in ray.nodes() if n["Alive"]]
    return max(1, int(min(max(cpus, default=1), ray.cluster_resources().get("CPU", 1) // config.pods)))


def pods_on_node(resources: dict[str, float], threads: int, gpus: float) -> int:
    """How many pods asking for ``threads`` CPUs and ``gpus`` GPUs fit on a node with ``resources``."""
    fits = int(resources.get("CPU", 0) // threads)
    if gpus:
        fits = min(fits, int(resources.get("GPU", 0) / gpus + 1e-9))  # 0.25 GPU: four pods on one GPU
    return fits


def warn_if_infeasible(threads: int, gpus: float) -> None:
    """Ray keeps an actor that no node can host pending, silently: say so now, with the fix."""
    nodes = [n["Resources"] for n in ray.nodes() if n["Alive"]]
    if any(pods_on_node(r, threads, gpus) for r in nodes):
        return
    largest = max(nodes, key=lambda r: (r.get("GPU", 0), r.get("CPU", 0)), default={})
    warnings.warn(f"no node of the Ray cluster can host a pod now: each asks for {threads} CPU(s)"
                  + (f" and {gpus} GPU(s)" if gpus else "") + f"; the largest node has {largest.get('CPU', 0):g} "
                  f"CPU(s) and {largest.get('GPU', 0):g} GPU(s). Pods wait until such a node joins (an autoscaler "
                  f"adds one); else lower threads_per_pod or gpus_per_pod", RuntimeWarning, stacklevel=4)


def _outcome(done: Any) -> tuple[int, str | None]:
    """(exit code, error message or None) of a pod's ``run``."""
    try:
        ray.get(done)
    except ray.exceptions.RayActorError:  # the actor's process is gone: ray.kill, a crash, its node lost
        return POD_LOST_EXIT_CODE, None
    except ray.exceptions.RayError as e:  # pod_main raised (it recorded why), or the spec could not be unpickled
        message = str(e)
        if "ModuleNotFoundError" in message or "No module named" in message:
            message += ("\nThe Ray workers cannot import code the pod needs (your env factory's or agent's module): "
                        "install it on every node (in the image), or start Ray with it before the Tournament, e.g. "
                        "ray.init(address=..., runtime_env={'working_dir': '.'}) or runtime_env={'py_modules': [...]}")
        return POD_ERROR_EXIT_CODE, message
    return 0, None

