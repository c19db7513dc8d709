"""The Ray backend: pods as Ray actors on this machine or a cluster, the store on the head node.

Nodes share no filesystem, so the SQLite store stays on the driver's node and one actor pinned
there (``LeaderboardServer``) owns it through the same ``Leaderboard`` class the local backend
uses. Pods reach it through ``RemoteLeaderboard``, a client with the ``Leaderboard`` methods pods
call (``protocol.PodBoard``: ``claim``, ``top``, ``load_agent``, ``submit``, ``set_pod``, ...), so a
pod does not know which backend runs it. Both are generic over ``PodBoard``'s list: the server
forwards each method to its ``Leaderboard``, the client sends each to the server, retried::

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
(fractions allowed) and pods are spread over nodes. A pod actor that dies reports
``POD_LOST_EXIT_CODE``, and the driver releases its ticket and starts a replacement: the board
loses at most that generation. Why it died decides whether it counts against ``max_failures``:
the GCS's record of the dead actor says (``classify_death``). A pod lost with its node (killed,
preempted, drained) or placed on a node that died before it started is not the pod's failure
(``RayBackend.fault``); a crash, ``ray.kill`` or an error is. While Ray does not know yet (a node
whose raylet was SIGKILLed looks alive until its health checks fail) the verdict waits, so the
replacement is not placed on the dying node; nodes that just lost pods are also avoided for
``COOL_DOWN_S`` (soft anti-affinity on the ``ray.io/node-id`` label). The cause lands in the
pods table's ``error``.

The server has ``max_restarts=-1``: killed, it is back in seconds on the head node, and the
pods' calls are retried with backoff meanwhile (``RemoteLeaderboard._call``). A call whose answer
was lost may have run: a retried ``claim`` first looks for the ticket the pod holds, a retried
``submit`` for the entry of its ticket, so nothing is claimed or submitted twice.

With ``pods="auto"`` the driver asks ``capacity()`` (pods the live nodes hold) every few seconds
and follows it; with ``max_pods`` the autoscaler, if any, is asked for nodes for that many pods
(``request_pods``). A pod no node can host is reported at once, and is an error after
``placement_timeout_s`` (``PlacementWatch``). A pod that fails before ``pod_main`` runs (its spec
cannot be unpickled: the workers lack the user's module) gets Ray's error, with the fix, in the
pods table. Each pod records its node.

Metrics: each pod sets Ray metrics (``RayReporter``: ``podracer_pod_*`` gauges and counters,
tagged with the pod and store, in Prometheus through each node's metrics agent) and, with
``tensorboard=True``, sends its scalars to the server, which writes them in the store's
``tb/pod-<id>`` on the head node.

Which Ray: one already initialised in this process is used as it is; else ``config.address`` or
``$RAY_ADDRESS`` is joined; else a local instance is started (``start_local_ray``: dashboard off,
quiet logs; a notebook calls it to start one Ray for several tournaments; a start that times
out on a busy machine is tried again once). An address that does not answer fails after
``connect_timeout_s`` (``wait_for_cluster``) instead of Ray's endless retries, one where nothing
listens (the connection is refused) fails at once, and one whose token auth refuses this driver
fails at once, naming the token
(``token_refused``). The backend shuts down only what it started. The driver must run on a node
of the cluster (the store lives next to it): a Ray Client address (``ray://``) is refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import json
import logging
import os
import signal
import socket
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, NodeLabelSchedulingStrategy, NotIn

from podracer import checkpoints
from podracer.checkpoints import CheckpointError, CheckpointMissingError
from podracer.deprecation import module_getattr
from podracer.logs import announce
from podracer.tournament.config import RAY_CLIENT_REFUSED, TournamentConfig
from podracer.tournament.leaderboard import Entry, Leaderboard
from podracer.tournament.pod import TENSORBOARD_DIR, PodSpec, Scalar, TensorBoardLog, pod_main
from podracer.tournament.protocol import POD_BOARD_METHODS, PodBoard
from podracer.tournament.storage import DirectCheckpoints

POD_LOST_EXIT_CODE = -signal.SIGKILL  # a pod actor whose process is gone: reported like a SIGKILLed local pod
POD_ERROR_EXIT_CODE = 1  # pod_main raised; its traceback is in the board's pods table
SERVER_START_TIMEOUT_S = 120.0  # the leaderboard actor must be up by then (a busy machine takes ~10 s)
SERVER_RETRY_S = 120.0  # a pod's call waits this long for a restarting server (back in ~3 s) before failing
RETRY_FIRST_S, RETRY_MAX_S = 0.2, 5.0  # the backoff between retries: doubling from the first to the max
DEATH_VERDICT_S = 120.0  # a pod's actor is gone but Ray does not say why: a failure once this has passed
WORKER_DEATH_CONFIRM_S = 5.0  # a worker that died on a live node: wait this long to see whether its node goes too
COOL_DOWN_S = 60.0  # a node that just lost a pod is avoided this long when placing new ones
PLACEMENT_CHECK_S = 5.0  # how often a run whose pods no node can host checks again
PLACEMENT_TIMEOUT_S = {False: 60.0, True: 900.0}  # placement_timeout_s=None, without / with an autoscaler
NODE_ID_LABEL = "ray.io/node-id"  # every Ray node carries its id as this label
NODE_LOST, NEVER_STARTED = "node lost", "never started"  # RayBackend.fault: deaths that are not the pod's failure


# ---------------------------------------------------------------------------- checkpoints as bytes
# ``checkpoint_bytes``, once this module's alias of checkpoints.dumps, is a deprecated name (the
# table in podracer.deprecation): the board method ``checkpoint_bytes(entry)`` is the one of that name.
__getattr__ = module_getattr(__name__)


def verified_checkpoint(data: bytes, checksum: str, source: str, device: str = "cpu") -> dict[str, Any]:
    """``checkpoints.read`` for bytes that arrived over the network (``checkpoints.loads``)."""
    return checkpoints.loads(data, checksum, device, source=source)


# ---------------------------------------------------------------------------- the store's actor and its client
class LeaderboardServer:
    """Owns the store on the head node (a Ray actor pinned there) and serves the calls pods make:
    each ``PodBoard`` method (``protocol.py``) is forwarded to the store's ``Leaderboard``
    (``_forwarded``), except ``submit``, which receives the checkpoint as bytes and checks them."""

    def __init__(self, store: str):
        self.board = Leaderboard(store)
        self.tensorboard: dict[int, Any] = {}  # pod id -> its TensorBoardLog, opened at its first report

    def ping(self) -> str:
        return str(self.board.store)

    def pid(self) -> int:
        return os.getpid()

    def ticket_of(self, pod: int) -> int | None:
        """The ticket ``pod`` holds, if any (a pod holds one at a time): the result of a ``claim``
        whose answer was lost."""
        tickets = self.board.tickets()
        held = tickets.index[tickets["pod"] == pod]
        return int(held[-1]) if len(held) else None

    def entry_of(self, ticket: int, pod: int | None) -> Entry | None:
        """The entry that consumed ``ticket`` for ``pod``, if any: the result of a ``submit`` whose
        answer was lost (scanned: only after a server restart)."""
        return next((e for e in self.board.entries() if e.ticket == ticket and e.pod == pod), None)

    def log_scalars(self, pod: int, scalars: list[Scalar]) -> None:
        """Write a pod's metrics to TensorBoard files in the store (``tb/pod-<id>``, on this node)."""
        if pod not in self.tensorboard:
            self.tensorboard[pod] = TensorBoardLog(self.board.store / TENSORBOARD_DIR / f"pod-{pod}")
        self.tensorboard[pod].report(scalars)

    def submit(self, data: bytes, checksum: str, score: float, **fields: Any) -> Entry:
        ckpt = verified_checkpoint(data, checksum, f"from pod {fields.get('pod')} (ticket {fields.get('ticket')})")
        return self.board.submit(ckpt, score, **fields)


def _forwarded(name: str) -> Callable[..., Any]:
    """The server's method ``name``: ``Leaderboard.<name>`` on the store, errors raised as they are
    (the pod's ``RemoteLeaderboard`` raises them again). Checkpoints (``checkpoint_bytes``) leave
    unchecked: the pod verifies them on arrival."""

    def method(self: LeaderboardServer, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.board, name)(*args, **kwargs)

    method.__name__, method.__qualname__ = name, f"LeaderboardServer.{name}"
    method.__doc__ = f"``Leaderboard.{name}`` on the store (``PodBoard.{name}``)."
    return method


class RemoteLeaderboard:
    """The board as a pod under Ray sees it: every ``PodBoard`` method, each a call to the
    ``LeaderboardServer`` actor through ``_call`` (``_remote``), except those that work on this side
    (``submit`` sends the checkpoint as bytes, ``load_checkpoint`` checks the bytes that arrive,
    ``load_agent`` builds the agent from them). Picklable (it holds only the actor's handle). Errors raised by the
    server (``TicketError``, ``CheckpointError``, ``KeyError``) are raised here as they are."""

    def __init__(self, server: Any):
        self.server = server
        self.direct: DirectCheckpoints | None = None  # asked of the server at the first checkpoint

    def __repr__(self) -> str:
        return f"RemoteLeaderboard({self.server!r})"

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``method`` on the server. While the server restarts (killed, or its worker crashed: Ray
        restarts it on the head node in seconds) the call is retried with backoff for up to
        ``SERVER_RETRY_S``. A call whose answer was lost may have run: a retry first looks up its
        result (``_lost_answer``), so a claim or a submission never happens twice."""
        delay, deadline, retried = RETRY_FIRST_S, time.monotonic() + SERVER_RETRY_S, False
        while True:
            try:
                found = self._lost_answer(method, args, kwargs) if retried else None
                return found if found is not None else self._call_once(method, *args, **kwargs)
            except (ray.exceptions.ActorUnavailableError, ray.exceptions.ActorDiedError) as e:
                if time.monotonic() + delay > deadline:
                    raise ConnectionError(f"the leaderboard server (the actor that serves the store on the head node) "
                                          f"did not answer {method!r} for {SERVER_RETRY_S:.0f} s: {e}") from e
            time.sleep(delay)
            delay, retried = min(2 * delay, RETRY_MAX_S), True

    def _call_once(self, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return ray.get(getattr(self.server, method).remote(*args, **kwargs))
        except ray.exceptions.RayTaskError as e:
            if isinstance(e.cause, Exception):
                raise e.cause from e  # the board's own exception, with the server's traceback chained
            raise

    def _lost_answer(self, method: str, args: tuple, kwargs: dict[str, Any]) -> Any:
        """The result of an earlier attempt of a call that changes the board, if it ran: the ticket a
        ``claim`` took, the entry a ``submit`` (or ``record``) made with its ticket; None: run it."""
        if method == "claim":
            return self._call_once("ticket_of", args[0])
        if method in ("submit", "record") and kwargs.get("ticket") is not None:
            return self._call_once("entry_of", kwargs["ticket"], kwargs.get("pod"))
        return None

    def submit(self, agent: Any, score: float, **fields: Any) -> Entry:
        """As ``Leaderboard.submit``; the checkpoint goes to the server as bytes with their sha256."""
        ckpt = agent if isinstance(agent, dict) else agent.checkpoint()
        data, checksum = checkpoints.dumps(ckpt)
        rel = self._direct().write(data, fields.get("generation", 0), fields.get("pod", 0))
        if rel is not None:  # a big one, written to storage by this pod: the head only records its row
            fields["agent_name"] = fields.get("agent_name") or ckpt["agent"]
            return self._call("record", rel, checksum, len(data), score, **fields)
        return self._call("submit", data, checksum, score, **fields)

    def _direct(self) -> DirectCheckpoints:
        if self.direct is None:
            self.direct = self._call("direct_checkpoints")
        return self.direct

    def load_checkpoint(self, entry: Entry | int, device: str = "cpu") -> dict[str, Any]:
        """As ``Leaderboard.load_checkpoint``: damaged bytes flag the entry corrupt, missing ones do not."""
        entry = entry if isinstance(entry, Entry) else self.get(entry)
        try:
            data = self._direct().read(entry.checkpoint) or self._call("checkpoint_bytes", entry.id)
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

    def log_scalars(self, pod: int, scalars: list[Scalar]) -> None:
        """A pod's metrics, for the server to write to TensorBoard files in the store (``RayReporter``)."""
        self._call("log_scalars", pod, scalars)


def _remote(name: str) -> Callable[..., Any]:
    """The client's method ``name``: ``PodBoard.<name>``'s signature and docstring, its arguments
    checked here and passed as the protocol orders them (a retried ``claim`` finds its pod), run on
    the server through ``_call`` (retried while the server restarts)."""
    declared = getattr(PodBoard, name)
    signature = inspect.signature(declared)

    @functools.wraps(declared)
    def method(self: RemoteLeaderboard, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, *args, **kwargs)
        return self._call(name, *bound.args[1:], **bound.kwargs)

    method.__qualname__ = f"RemoteLeaderboard.{name}"
    return method


for _name in POD_BOARD_METHODS:  # a new PodBoard method: served and called with no line here
    if _name not in vars(LeaderboardServer):
        setattr(LeaderboardServer, _name, _forwarded(_name))
    if _name not in vars(RemoteLeaderboard):
        setattr(RemoteLeaderboard, _name, _remote(_name))
del _name


class RayReporter:
    """A pod's metrics under Ray (``PodSpec.reporter``): Ray metrics, which each node's metrics agent
    exports to Prometheus (the dashboard's Metrics view, ``ray_podracer_pod_...``), tagged with the
    pod and the store; and with ``tensorboard`` the scalars, sent to the server, which writes them
    in the store on the head node (a pod's node may not share the store's disk)."""

    GAUGES = {"score": "validation score of the pod's latest entry",
              "steps_per_second": "env steps per second of training in the pod's latest generation",
              "generation": "lineage depth of the pod's latest entry (0: a fresh agent)"}

    def __init__(self, server: Any, pod_id: int, store: str, tensorboard: bool):
        from ray.util.metrics import Counter, Gauge

        keys = ("pod", "store")
        self.tags = {"pod": str(pod_id), "store": store}
        self.gauges = {name: Gauge(f"podracer_pod_{name}", description=text, tag_keys=keys)
                       for name, text in self.GAUGES.items()}
        self.generations = Counter("podracer_pod_generations", description="generations submitted", tag_keys=keys)
        self.pod_steps = Counter("podracer_pod_steps", description="env steps the pod trained", tag_keys=keys)
        self.pod_id = pod_id
        self.board = RemoteLeaderboard(server) if tensorboard else None

    def report(self, scalars: list[Scalar]) -> None:
        latest = {tag: value for tag, value, _ in scalars}
        for name, gauge in self.gauges.items():
            gauge.set(latest[f"tournament/{name}"], tags=self.tags)
        self.generations.inc(1.0, tags=self.tags)
        if latest["tournament/generation_steps"] > 0:
            self.pod_steps.inc(latest["tournament/generation_steps"], tags=self.tags)
        if self.board is not None:
            self.board.log_scalars(self.pod_id, scalars)

    def close(self) -> None:
        """Nothing to close: the metrics agent and the server hold what was reported."""


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
    lost_at: float | None = None  # time.monotonic() when its actor was found gone: the verdict is pending
    fault: str | None = None  # NODE_LOST or NEVER_STARTED when its death is not its own failure
    killed: bool = False  # the driver killed it (RayBackend.kill): its end needs no verdict from Ray


def pod_actor_name(store: str | Path, pod_id: int) -> str:
    """The Ray name of pod ``pod_id``'s actor (``ray.get_actor(name)`` in the driver's job)."""
    return f"podracer-pod-{pod_id}@{Path(store).resolve()}"


def server_actor_name(store: str | Path) -> str:
    """The Ray name of the store's ``LeaderboardServer`` actor (``ray.get_actor(name)`` in the driver's job)."""
    return f"podracer-board@{Path(store).resolve()}"


class RayBackend:
    """Pods as Ray actors spread over the cluster's nodes; the store served by an actor on this node."""

    def __init__(self, config: TournamentConfig, store: str | Path):
        self.config, self.store = config, Path(store).resolve()
        self.started_ray = connect(config)
        self.pods: list[RayPod] = []
        self.server: Any = None
        self.requested = False  # request_pods asked the autoscaler for nodes: withdrawn by close()
        self.cooling: dict[str, float] = {}  # node id -> when it last lost a pod (COOL_DOWN_S)
        self.local_board = Leaderboard(self.store)  # the driver's own view of the store, for pod errors
        self.waiting, self.waiting_checked = 0, -float("inf")  # pods the live nodes cannot hold, last said
        try:
            here = ray.get_runtime_context().get_node_id()  # the store is on this node's disk
            self.server = ray.remote(LeaderboardServer).options(
                num_cpus=0, max_restarts=-1, max_concurrency=8,  # a Leaderboard call opens its own connection
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False),
                name=server_actor_name(self.store),
            ).remote(str(self.store))
            try:
                ray.get(self.server.ping.remote(), timeout=SERVER_START_TIMEOUT_S)
            except ray.exceptions.ActorDiedError as e:
                raise RuntimeError(server_never_started(e)) from e
            except ray.exceptions.GetTimeoutError:
                raise RuntimeError(SERVER_SLOW_TO_START.format(timeout=SERVER_START_TIMEOUT_S)) from None
            self.threads = pod_threads(config)
            self.placement = PlacementWatch(self.threads, config.gpus_per_pod, config.placement_timeout_s)
            self.placement.check()  # a pod no node can host: said now, with the wait
            self.requested = request_pods(config, self.threads)
        except BaseException:
            self.close()
            raise
        self.board = functools.partial(RemoteLeaderboard, self.server)

    def start(self, spec: PodSpec) -> RayPod:
        spec = dataclasses.replace(spec, board=self.board, threads=self.threads, parent_pid=None,
                                   reporter=functools.partial(RayReporter, self.server, spec.pod_id, str(self.store),
                                                              self.config.tensorboard))
        actor = ray.remote(PodActor).options(
            num_cpus=self.threads, num_gpus=self.config.gpus_per_pod, scheduling_strategy=self._placement(),
            max_restarts=0, name=pod_actor_name(self.store, spec.pod_id),  # the driver replaces dead pods itself
        ).remote()
        handle = RayPod(actor, actor.run.remote(spec), spec.pod_id)
        self.pods.append(handle)
        return handle

    def _placement(self) -> Any:
        """Spread over the nodes, preferring those that lost no pod in the last ``COOL_DOWN_S``: a node
        whose raylet just died still looks alive to the GCS for seconds, and a pod placed there
        would die unstarted. Soft: a cooling node is still used when no other one has room."""
        now = time.monotonic()
        self.cooling = {node: t for node, t in self.cooling.items() if now - t < COOL_DOWN_S}
        if not self.cooling:
            return "SPREAD"
        return NodeLabelSchedulingStrategy(hard={}, soft={NODE_ID_LABEL: NotIn(*self.cooling)})

    def poll(self, handle: RayPod) -> int | None:
        """None while the pod runs (or Ray has not yet said why its actor is gone), else its exit code."""
        if handle.exitcode is not None:
            return handle.exitcode
        self.placement.check()  # raises once pods have waited too long for a node that can host them
        self._report_waiting()
        if handle.lost_at is None:
            if not ray.wait([handle.done], timeout=0)[0]:
                return None
            code, error = _outcome(handle.done)
            if code != POD_LOST_EXIT_CODE:
                return self._ended(handle, code, error)
            handle.lost_at = time.monotonic()
        if handle.killed:  # by the driver: Ray's word would be "killed by ray.kill", a fault's; the driver says why
            return self._ended(handle, POD_LOST_EXIT_CODE, None)
        death = classify_death(actor_record(handle.actor), live_nodes(), draining_nodes())
        if death.wait_s > time.monotonic() - handle.lost_at:
            return None  # Ray may yet find its node dead: decide then, and place no replacement there meanwhile
        handle.fault = death.fault
        if death.node:
            self.cooling[death.node] = time.monotonic()
        return self._ended(handle, POD_LOST_EXIT_CODE, death.message)

    def _report_waiting(self) -> None:
        """Say, once per change, how many pods wait for resources the live nodes lack (spot nodes that
        came back smaller, pods added beyond the cluster) and what is missing; checked every
        ``PLACEMENT_CHECK_S``. Ray itself keeps such actors pending without a word."""
        now = time.monotonic()
        if now - self.waiting_checked < PLACEMENT_CHECK_S:
            return
        self.waiting_checked = now
        running = [h.done for h in self.pods if h.exitcode is None and h.lost_at is None and not h.killed]
        ended = ray.wait(running, num_returns=len(running), timeout=0)[0] if running else []
        active = len(running) - len(ended)  # a pod lost with its node is not waiting: it is gone
        hosted = sum(pods_on_node(n["Resources"], self.threads, self.config.gpus_per_pod)
                     for n in ray.nodes() if n["Alive"])
        waiting = max(0, active - hosted)
        if waiting == self.waiting:
            return
        if waiting:
            announce(waiting_message(waiting, active, pod_bundle(self.threads, self.config.gpus_per_pod),
                                     ray.available_resources()))
        elif active:
            announce(f"no pod is waiting for resources now ({active} running)")
        self.waiting = waiting

    def _ended(self, handle: RayPod, code: int, error: str | None) -> int:
        handle.exitcode = code
        if error and not self.local_board.pod_error(handle.pod_id):  # pod_main records its own errors
            self.local_board.set_pod(handle.pod_id, error=error)  # these came before it, or from Ray: why it died
        with contextlib.suppress(Exception):  # gone already
            ray.kill(handle.actor)  # a finished pod's worker would hold its CPUs until its driver exits
        return code

    def fault(self, handle: RayPod) -> str | None:
        """Why an ended pod's death is not its own failure (``NODE_LOST``, ``NEVER_STARTED``), or None."""
        return handle.fault

    def kill(self, handle: RayPod) -> None:
        handle.killed = True
        ray.kill(handle.actor, no_restart=True)

    def join(self, handle: RayPod, timeout: float | None = None) -> None:
        ray.wait([handle.done], timeout=timeout)

    def capacity(self) -> int:
        """Pods the cluster's live nodes hold now, each asking for ``threads`` CPUs and
        ``gpus_per_pod`` GPUs on one node (at least one: a pod that waits for a node to join)."""
        return cluster_capacity(self.threads, self.config.gpus_per_pod)

    def close(self) -> None:
        """Kill the actors this backend started, withdraw its request to the autoscaler; shut down
        Ray only if this backend started it."""
        if self.requested and ray.is_initialized():
            with contextlib.suppress(Exception):  # best effort: the cluster may be gone
                request_resources(bundles=[])  # the nodes asked for may be scaled down again
            self.requested = False
        if ray.is_initialized():
            for actor in [p.actor for p in self.pods] + ([self.server] if self.server is not None else []):
                with contextlib.suppress(Exception):  # gone already
                    ray.kill(actor, no_restart=True)
        self.pods = []
        if self.started_ray:
            ray.shutdown()
            self.started_ray = False


SERVER_SLOW_TO_START = (
    "the store's leaderboard actor did not answer within {timeout:g} s of being created on this node: its Ray worker "
    "is still starting. Ray runs its workers at niceness 15 (its worker_niceness setting), so on a machine whose "
    "CPUs other processes keep busy they wait for them. Free the CPUs, or start Ray with RAY_worker_niceness=0 in "
    "its environment (for the local Ray a Tournament starts: set it in this process before the run), then run "
    "again: nothing on the board has changed")


def server_never_started(error: Exception) -> str:
    """The message for a leaderboard actor that Ray cancelled before it ran, with the one cause seen."""
    message = f"Ray cancelled the leaderboard's actor before it started ({str(error).splitlines()[-1]})"
    if os.environ.get("RAY_AUTH_MODE") == "token":
        # Ray 2.60: a driver on token auth joins a cluster without auth, but none of its actors start there.
        # A local ray.init puts the process on token auth for good (RAY_AUTH_MODE=token, kept after shutdown).
        message += (". This process runs with token auth (RAY_AUTH_MODE=token: from its environment, or set by Ray "
                    "for the rest of the process once a local Ray has started in it), and a cluster without auth "
                    "cancels every actor such a process creates. Join from a new interpreter (a notebook: restart "
                    "its kernel) without RAY_AUTH_MODE=token and without starting a local Ray first, or start the "
                    "cluster with token auth (RAY_AUTH_MODE=token and its RAY_AUTH_TOKEN on every node)")
    return message


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
        address = wait_for_cluster(address, config.connect_timeout_s)
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=True)
    else:  # to use a `ray start` cluster on this machine instead, pass address="auto"
        pods = 1 if config.pods == "auto" else config.pods  # "auto": as many pods as this machine's CPUs
        start_local_ray(num_cpus=max(os.cpu_count() or 1, pods * config.threads))
    return True


def start_local_ray(num_cpus: int | None = None, num_gpus: int | None = None,
                    runtime_env: dict[str, Any] | None = None) -> bool:
    """Start a local Ray instance in this process unless Ray is running in it already; True when
    this call started it (then ``ray.shutdown()`` is yours to call), False when it kept the running one.

    ``address="local"``: a new instance, even if a ``ray start`` cluster runs on this machine
    (``ray.init()`` would join that one and then refuse ``num_cpus``). ``num_cpus`` (default: this
    machine's CPUs) is what Ray *believes* it has, a logical resource it places actors by, not a limit
    on what they use; ``num_gpus=0`` makes a Ray without GPU even on a machine with one (``None``:
    Ray detects them). ``runtime_env`` is Ray's (what the workers get: env vars, code). Dashboard
    off, warnings and errors only. On a busy machine Ray's node may not come up within its 30 s
    ("The current node timed out during startup"): what it started is stopped and it is tried again
    once, as the tests' ``ray start`` is; a second time-out says what to do."""
    if num_cpus is not None and (isinstance(num_cpus, bool) or not isinstance(num_cpus, int) or num_cpus < 1):
        raise ValueError(f"num_cpus must be a whole number, at least 1, or None (this machine's CPUs), "
                         f"got {num_cpus!r}")
    if num_gpus is not None and (isinstance(num_gpus, bool) or not isinstance(num_gpus, int) or num_gpus < 0):
        raise ValueError(f"num_gpus must be a whole number, 0 or more, or None (Ray detects them), got {num_gpus!r}")
    if ray.is_initialized():
        return False
    options = dict(address="local", num_cpus=num_cpus or os.cpu_count() or 1, num_gpus=num_gpus,
                   include_dashboard=False, logging_level=logging.WARNING, log_to_driver=True)
    if runtime_env is not None:
        options["runtime_env"] = runtime_env
    for attempt in range(1, START_ATTEMPTS + 1):
        before = _descendants()
        try:
            ray.init(**options)
            return True
        except Exception as e:
            if STARTUP_TIMED_OUT not in str(e):
                raise
            for pid in _descendants() - before:  # the half-started node's processes: the next try starts its own
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            if attempt == START_ATTEMPTS:
                raise RuntimeError(LOCAL_RAY_TIMED_OUT.format(attempts=START_ATTEMPTS, error=e)) from e
    raise AssertionError("unreachable")


START_ATTEMPTS = 2  # a local Ray whose start timed out is tried once more
STARTUP_TIMED_OUT = "timed out during startup"  # Ray's words when its node did not come up (a busy machine)
LOCAL_RAY_TIMED_OUT = (
    "the local Ray did not start, {attempts} times ({error}): this machine is too busy for Ray to start its "
    "processes within its 30 s. Free some CPUs and run again, or start Ray once yourself, when the machine is "
    "quieter, and join it: `ray start --head` in a shell, then address='auto' (or RAY_ADDRESS=auto)")


def _descendants() -> set[int]:
    """Pids of this process's descendants (Linux ``/proc``; empty elsewhere)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state
    found, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def pod_threads(config: TournamentConfig) -> int:
    """``threads_per_pod``, or by default the cluster's CPUs shared among the pods (no more than a
    node has); 1 with ``pods="auto"`` (a pod per CPU)."""
    if config.threads_per_pod:
        return config.threads_per_pod
    if config.pods == "auto":
        return 1
    cpus = [n["Resources"].get("CPU", 0) for n in ray.nodes() if n["Alive"]]
    return max(1, int(min(max(cpus, default=1), ray.cluster_resources().get("CPU", 1) // config.pods)))


def cluster_capacity(threads: int, gpus: float) -> int:
    """Pods asking for ``threads`` CPUs and ``gpus`` GPUs each that the live nodes hold (at least one)."""
    return max(1, sum(pods_on_node(n["Resources"], threads, gpus) for n in ray.nodes() if n["Alive"]))


def pods_on_node(resources: dict[str, float], threads: int, gpus: float) -> int:
    """How many pods asking for ``threads`` CPUs and ``gpus`` GPUs fit on a node with ``resources``."""
    fits = int(resources.get("CPU", 0) // threads)
    if gpus:
        fits = min(fits, int(resources.get("GPU", 0) / gpus + 1e-9))  # 0.25 GPU: four pods on one GPU
    return fits


# ---------------------------------------------------------------------------- placement and the autoscaler
class PlacementWatch:
    """Ray keeps an actor that no live node can host pending, silently and forever. Say so at once,
    with the wait, and fail the run once pods have waited ``timeout_s`` for such a node (None: 60 s
    without an autoscaler, where none will come unless someone starts it; 900 s with one, where a
    new node takes minutes). ``check`` is cheap: it looks at the nodes every ``PLACEMENT_CHECK_S``."""

    def __init__(self, threads: int, gpus: float, timeout_s: float | None):
        self.threads, self.gpus, self.timeout_s = threads, gpus, timeout_s
        self.since: float | None = None  # when no node could host a pod, since the last time one could
        self.checked = -float("inf")

    def check(self) -> None:
        now = time.monotonic()
        if now - self.checked < PLACEMENT_CHECK_S:
            return
        self.checked = now
        nodes = [n["Resources"] for n in ray.nodes() if n["Alive"]]
        if any(pods_on_node(r, self.threads, self.gpus) for r in nodes):
            self.since = None
            return
        if self.since is None:
            self.since = now
            autoscaler = autoscaler_present()
            self.limit = self.timeout_s if self.timeout_s is not None else PLACEMENT_TIMEOUT_S[autoscaler]
            wait = ("the autoscaler is asked for one (pending actors); pods wait for it" if autoscaler else
                    "this cluster has no autoscaler: pods wait for one to be started (ray start --address ...)")
            warnings.warn(f"{self._unhostable(nodes)}. {wait} for up to {self.limit:g} s (placement_timeout_s), "
                          f"then the run fails; else lower threads_per_pod or gpus_per_pod", RuntimeWarning,
                          stacklevel=2)
        elif now - self.since > self.limit:
            raise RuntimeError(f"{self._unhostable(nodes)}, and none joined within placement_timeout_s="
                               f"{self.limit:g} s: lower threads_per_pod or gpus_per_pod, add such a node, or raise "
                               f"placement_timeout_s")

    def _unhostable(self, nodes: list[dict[str, float]]) -> str:
        largest = max(nodes, key=lambda r: (r.get("GPU", 0), r.get("CPU", 0)), default={})
        return (f"no node of the Ray cluster can host a pod now: each asks for {self.threads} CPU(s)"
                + (f" and {self.gpus:g} GPU(s)" if self.gpus else "") + f"; the largest node has "
                f"{largest.get('CPU', 0):g} CPU(s) and {largest.get('GPU', 0):g} GPU(s)")


def autoscaler_present() -> bool:
    """Whether the cluster has an autoscaler that can add nodes. Autoscaler v2 (KubeRay, ``ray up``
    with v2) publishes its node groups; v1 names its node types in its status, where a cluster without
    one (a plain ``ray start`` head runs a read-only monitor) shows only ``node_<id>`` types."""
    try:
        from ray._private import ray_constants
        from ray._private.state import state
        from ray.experimental.internal_kv import _internal_kv_get

        config = state.get_cluster_config()
        if config is not None and any(group.max_count != 0 for group in config.node_group_configs):
            return True
        return autoscaled(_internal_kv_get(ray_constants.DEBUG_AUTOSCALING_STATUS))
    except Exception:  # an older or newer Ray without these: assume none, the shorter wait
        return False


def autoscaled(status: bytes | str | None) -> bool:
    """From autoscaler v1's status JSON: node types (active, idle, launching) other than the
    read-only provider's ``node_<id>``."""
    if not status:
        return False
    report = json.loads(status).get("autoscaler_report") or {}
    types = {*(report.get("active_nodes") or {}), *(report.get("idle_nodes") or {}),
             *(report.get("pending_launches") or {})}
    return any(not str(t).startswith("node_") for t in types)


def waiting_message(waiting: int, pods: int, asked: dict[str, float], free: dict[str, float]) -> str:
    """What to say when ``waiting`` of a run's ``pods`` cannot be placed: each pod asks for ``asked``
    (``pod_bundle``: CPUs, GPUs, any custom resource), the cluster has ``free`` now
    (``ray.available_resources()``); the resources short of one pod's ask are named as missing."""
    def amounts(resources: dict[str, float]) -> str:
        return ", ".join(f"{resources.get(name, 0):g} {name}" for name in asked)

    missing = [f"{name} ({amount:g} asked, {free.get(name, 0):g} free)" for name, amount in asked.items()
               if free.get(name, 0) + 1e-9 < amount]
    text = (f"{waiting} of {pods} pods {'is' if waiting == 1 else 'are'} waiting for resources: each asks for "
            f"{amounts(asked)}; the cluster has {amounts(free)} free")
    text += f"; missing: {', '.join(missing)}" if missing else " (not all on one node)"
    return text + ". They start when a node with room joins or another pod ends; a smaller threads_per_pod or " \
                  "gpus_per_pod fits more"


def pod_bundle(threads: int, gpus: float) -> dict[str, float]:
    """The resources one pod asks Ray for."""
    return {"CPU": threads, **({"GPU": gpus} if gpus else {})}


def request_pods(config: TournamentConfig, threads: int) -> bool:
    """``pods="auto"`` with ``max_pods``: ask the autoscaler for nodes holding ``max_pods`` pods (a
    bundle per pod, which it packs onto its node types); the driver's capacity polls grow the run as
    they arrive. The request stands until ``RayBackend.close`` withdraws it; without an autoscaler
    nothing happens. True when asked."""
    if config.pods != "auto" or config.max_pods is None:
        return False
    request_resources(bundles=[pod_bundle(threads, config.gpus_per_pod)] * config.max_pods)
    return True


def request_resources(**kwargs: Any) -> None:
    """``ray.autoscaler.sdk.request_resources``, imported when first needed (it imports the autoscaler)."""
    from ray.autoscaler import sdk

    sdk.request_resources(**kwargs)


# ---------------------------------------------------------------------------- reaching the cluster
def wait_for_cluster(address: str, timeout_s: float) -> str:
    """The GCS address of the cluster at ``address`` (``"auto"``: the one started on this machine),
    once it accepts connections. Ray itself would retry "Failed to get cluster ID from GCS" for
    minutes: after ``timeout_s`` this raises a ConnectionError that names the fix; a refused
    connection (nothing listens there) raises it at once, as no wait would help. A cluster with
    token auth that refuses this process (no token, or another one) is a ConnectionError at once:
    ray.init would retry for 20 s, then fail without saying why."""
    from ray._private.services import canonicalize_bootstrap_address_or_die

    try:
        resolved = canonicalize_bootstrap_address_or_die(address)
    except (ConnectionError, OSError, ValueError) as e:
        raise ConnectionError(f"no Ray cluster found for address={address!r} ({e}); start one (ray start --head) "
                              f"or pass its address") from e
    host, _, port = resolved.rpartition(":")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=max(0.1, min(5.0, deadline - time.monotonic()))):
                break
        except ConnectionRefusedError as e:  # the host answered: nothing listens on that port, no wait helps
            raise ConnectionError(
                f"no Ray cluster answers at address={address!r} ({resolved}: connection refused ({e.errno}): nothing "
                f"listens on port {port}): start it (ray start --head --port={port}) or fix address= or $RAY_ADDRESS; "
                f"a refusal is final, so connect_timeout_s={timeout_s:g} s was not waited") from None
        except OSError as e:
            if time.monotonic() >= deadline:
                raise ConnectionError(
                    f"no Ray cluster answers at address={address!r} ({resolved}: {e}) within connect_timeout_s="
                    f"{timeout_s:g} s: start it (ray start --head --port={port}), fix address= or $RAY_ADDRESS, or "
                    f"give it longer with connect_timeout_s") from None
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
    if token_refused(resolved, timeout_s=max(1.0, min(10.0, deadline - time.monotonic()))):
        raise ConnectionError(
            f"the Ray cluster at address={address!r} ({resolved}) uses token authentication and refused this "
            f"driver's token (none, or another one): start the driver with RAY_AUTH_MODE=token and the cluster's "
            f"token in RAY_AUTH_TOKEN (or in the file RAY_AUTH_TOKEN_PATH names, default ~/.ray/auth_token), set "
            f"before Python starts, as on the cluster's nodes")
    return resolved


def token_refused(address: str, timeout_s: float) -> bool:
    """Whether the GCS at ``address`` answers this process "unauthenticated": the cluster runs with
    token auth (``RAY_AUTH_MODE=token``) and this process lacks its token. One call, as ray.init's
    first (the cluster's id), through Ray's own channel (which adds the token when this process has
    one); any other outcome (an answer, a timeout, a Ray without these modules) is not a refusal."""
    try:
        import grpc
        from ray._private.grpc_utils import init_grpc_channel
        from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc
    except ImportError:
        return False
    channel = init_grpc_channel(address)
    try:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=timeout_s)
    except grpc.RpcError as e:
        return e.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        channel.close()
    return False


# ---------------------------------------------------------------------------- why a pod's actor died
@dataclasses.dataclass(frozen=True)
class Death:
    """Why a pod's actor is gone: ``fault`` is ``NODE_LOST`` or ``NEVER_STARTED`` when it is not the
    pod's failure, None when it is; ``message`` goes to the pods table; ``node`` is where it was
    placed; the verdict may still change until ``wait_s`` after the loss (0: final)."""

    fault: str | None
    message: str
    node: str | None
    wait_s: float = 0.0


def classify_death(record: dict[str, Any], live: set[str], draining: set[str]) -> Death:
    """The verdict on a pod whose actor is gone, from the GCS's record of it (``actor_record``) and
    the nodes alive and draining now. A node that died (or is being drained: preemption) takes its
    pods with it: not their failure, nor is an actor that never started. A worker that died on a
    node still alive is the pod's failure, unless its node follows within ``WORKER_DEATH_CONFIRM_S``."""
    from ray.core.generated.common_pb2 import ActorDiedErrorContext

    node = (record.get("Address") or {}).get("NodeID") or None
    node_gone = node is not None and (node not in live or node in draining)
    if record.get("State") != "DEAD":  # Ray has not noticed yet: a SIGKILLed raylet looks alive for seconds
        if node_gone:
            return Death(NODE_LOST, f"lost with its node {node}, which left the cluster", node)
        return Death(None, f"its actor is gone and Ray did not say why within {DEATH_VERDICT_S:g} s", node,
                     DEATH_VERDICT_S)
    cause = record.get("DeathCause")
    context = cause.actor_died_error_context if cause is not None and cause.HasField("actor_died_error_context") \
        else None
    if context is None:  # an OOM kill, a failed runtime env, ...: the pod's (or its settings') failure
        which = cause.WhichOneof("context") if cause is not None else None
        return Death(None, getattr(getattr(cause, which), "error_message", str(cause)) if which else "no cause", node)
    message = context.error_message.strip()
    if node_gone or context.reason == ActorDiedErrorContext.NODE_DIED:
        return Death(NODE_LOST, f"lost with its node: {message}", node)
    if context.never_started:
        return Death(NEVER_STARTED, f"never started: {message}", node)
    if context.reason == ActorDiedErrorContext.WORKER_DIED:
        return Death(None, message, node, WORKER_DEATH_CONFIRM_S)
    return Death(None, message, node)


def actor_record(actor: Any) -> dict[str, Any]:
    """The GCS's record of ``actor`` (state, node, death cause); {} when it cannot be read."""
    try:
        from ray._private.state import actors

        return actors(actor_id=actor._actor_id.hex())
    except Exception:
        return {}


def live_nodes() -> set[str]:
    return {n["NodeID"] for n in ray.nodes() if n["Alive"]}


def draining_nodes() -> set[str]:
    """Nodes being drained (the autoscaler's preemption or idle termination); empty when unknown."""
    try:
        from ray._private.state import state

        return set(state.get_draining_nodes())
    except Exception:
        return set()


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

