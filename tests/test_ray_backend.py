"""The Ray backend: a tournament finishes with exactly its budget and leaves a store the local
backend reads, checkpoints travel as checked bytes, a pod actor killed mid-generation loses
nothing on the board, a two-node cluster on loopback survives losing a node (and a node started
again gets pods), and without Ray the error names the install command.

Starting Ray costs ~10 s on a busy 2-core machine (a `ray start` node as much), so Ray starts
four times in all: by the backend itself (no Ray initialised: it must start a local instance and
shut it down), as a head and a second node (twice) for the cluster test, and once by a module
fixture the last tests share (the backend must then leave it running). Every wait has a timeout.
Every Ray process started here is stopped: ray.shutdown for the in-process instances, SIGKILL of
exactly the sessions `ray start` created for the cluster (never `ray stop`, which would stop
every Ray on the machine).
"""

import contextlib
import functools
import importlib
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch

import podracer
from podracer import checkpoints
from podracer.checkpoints import CheckpointError
from podracer.tournament import Leaderboard, TicketError, Tournament, TournamentConfig

ray = pytest.importorskip("ray")
from podracer.tournament import ray_backend  # noqa: E402  (needs ray)

TINY_PPO = {**podracer.get_preset("ppo", "pendulum").config, "hidden_sizes": (16,), "update_epochs": 2}
make_small_env = functools.partial(podracer.make_env, "pendulum", num_envs=16)
make_small_eval_env = functools.partial(podracer.make_env, "pendulum", num_envs=4)


def small_ray_tournament(store, generations=3, pods=2, backend="ray", **kw):
    """The small settings of tests/test_tournament.py on backend='ray': generations of ~1 s."""
    return Tournament(make_small_env, make_small_eval_env, agent="ppo", pods=pods, generation_steps=4096,
                      generations=generations, store=store, agent_config=TINY_PPO, threads_per_pod=1, seed=1,
                      backend=backend, **kw)


def wait_for(condition, timeout=120.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


def assert_ended_cleanly(pods: Any) -> None:
    """Every pod of ``pods`` (a board's pods table) exited 0, or never started and was cancelled
    once the others had filled the board: a Ray worker can take seconds to start on a loaded
    machine. At least one exited, and none failed."""
    assert ((pods["exitcode"] == 0) & (pods["status"] == "exited") | (pods["status"] == "cancelled")).all(), \
        pods.to_string()
    assert (pods["status"] == "exited").any(), pods.to_string()


def assert_consistent(board: Leaderboard, budget: int, steps: int = 4096) -> None:
    """Exactly ``budget`` whole entries, one per ticket, none in flight, lineage closed and coherent
    (each generation trained at least ``steps``)."""
    assert board.integrity_check() == "ok"
    assert board.in_flight() == 0
    assert board.verify() == []
    entries = board.entries()
    assert len(entries) == budget
    assert len({e.ticket for e in entries}) == budget and len({e.checksum for e in entries}) == budget
    by_id = {e.id: e for e in entries}
    for e in entries:
        if e.parent_id is None:  # fresh: ticket 1 keeps the configured hparams, later ones may redraw some
            assert e.generation == 0 and (e.ticket != 1 or e.changes == {})
            assert all(e.hparams[name] == pytest.approx(new) for name, (old, new) in e.changes.items())
            continue
        parent = by_id[e.parent_id]
        assert e.generation == parent.generation + 1 and e.global_step >= parent.global_step + steps
        for name, (old, new) in e.changes.items():
            assert parent.hparams[name] == pytest.approx(old) and e.hparams[name] == pytest.approx(new)


@pytest.mark.slow
def test_ray_tournament_starts_its_own_ray_finishes_the_budget_and_leaves_a_local_store(tmp_path):
    assert not ray.is_initialized()  # the backend must start a local instance, then shut it down
    t = small_ray_tournament(tmp_path, generations=2)
    try:
        t.run(progress=None)
    finally:
        if ray.is_initialized():  # only if the backend failed to: never leave Ray running
            ray.shutdown()
            pytest.fail("the ray backend left the Ray instance it started running")
    board = Leaderboard(tmp_path)  # the local backend's class reads a Ray run's store
    assert_consistent(board, 4)
    pods = board.pods()
    assert len(pods) == 2
    assert_ended_cleanly(pods)
    assert max(e.generation for e in board.entries()) >= 1  # second generations drew parents through the server

    torch.set_num_threads(1)
    best_entry = board.top(1)[0]
    score = podracer.evaluate(t.best(), make_small_eval_env(), seed=t.config.eval_seed)["eval/return_mean"]
    assert score == pytest.approx(best_entry.score, rel=0.05)  # the same validation episodes
    ensemble = t.ensemble(3)
    obs = make_small_eval_env().reset(seed=0)[0]
    members = torch.stack([a.act(obs, deterministic=True) for a in ensemble.agents])
    torch.testing.assert_close(ensemble(obs), members.mean(0))


def test_without_ray_the_error_names_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError, as when not installed
    with pytest.raises(ImportError, match=r'pip install "podracer-rl\[cluster\]"'):
        small_ray_tournament(tmp_path)
    with pytest.raises(ValueError, match="settings of backend='ray'"):
        TournamentConfig(backend="local", gpus_per_pod=0.5)
    with pytest.raises(ValueError, match="unknown backend"):
        TournamentConfig(backend="slurm")


def no_ray_connected(monkeypatch) -> list:
    """This process as one where Ray is not connected, whatever ran before in it (a Ray that another
    test left running); ``ray.init`` only records its calls, which it returns."""
    inits = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda *args, **kwargs: inits.append(kwargs))
    return inits


def test_a_ray_client_address_is_refused_before_connecting(monkeypatch):
    with pytest.raises(ValueError, match="Ray Client address"):
        TournamentConfig(backend="ray", address="ray://head:10001")
    inits = no_ray_connected(monkeypatch)
    monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")
    with pytest.raises(ValueError, match="Ray Client address"):
        ray_backend.connect(TournamentConfig(backend="ray"))
    assert inits == []  # refused before Ray was started or joined


def test_a_local_ray_that_times_out_starting_is_tried_again_then_says_what_to_do(monkeypatch):
    """Seen on a busy machine: Ray's node does not come up within its 30 s. start_local_ray tries
    once more, as the tests' `ray start` does; a second time-out names what to do."""
    inits = no_ray_connected(monkeypatch)
    timed_out = Exception("The current node timed out during startup. This could happen because ...")
    outcomes = [timed_out, None]

    def init(**kwargs):
        inits.append(kwargs)
        error = outcomes.pop(0)
        if error is not None:
            raise error

    monkeypatch.setattr(ray, "init", init)
    assert ray_backend.start_local_ray(num_cpus=2, runtime_env={"env_vars": {"X": "1"}})
    assert len(inits) == 2 and inits[1]["runtime_env"] == {"env_vars": {"X": "1"}} and inits[1]["num_cpus"] == 2
    outcomes[:] = [timed_out, timed_out]
    with pytest.raises(RuntimeError, match=r"did not start, 2 times.*timed out during startup.*ray start --head"):
        ray_backend.start_local_ray()
    outcomes[:] = [ValueError("num_cpus must be ...")]  # any other error is Ray's own, raised at once
    with pytest.raises(ValueError, match="num_cpus must be"):
        ray_backend.start_local_ray()
    assert len(inits) == 5


# A module outside Podracer that the Ray workers import (the fixtures put it on their PYTHONPATH):
# its env's step waits while the file `hold` exists, so a test knows for sure that a pod is
# mid-generation.
HELD_MODULE = "podracer_test_ray_held_env"
HELD_CODE = """
import os
import time

from podracer.envs import PendulumVecEnv


class HeldPendulum(PendulumVecEnv):
    def __init__(self, num_envs, hold):
        super().__init__(num_envs=num_envs)
        self.hold = hold

    def step(self, actions):
        while os.path.exists(self.hold):
            time.sleep(0.05)
        return super().step(actions)


def make_pendulum(num_envs, hold):
    return HeldPendulum(num_envs, hold)
"""


# ---------------------------------------------------------------------------- a two-node cluster on loopback
NODE_PORTS = ("node-manager-port", "object-manager-port", "dashboard-agent-listen-port", "dashboard-agent-grpc-port",
              "runtime-env-agent-port", "metrics-export-port")
# The GCS declares a node dead after ~2 s of missed health checks instead of ~30 s.
FAST_NODE_DEATH = {"RAY_health_check_initial_delay_ms": "1000", "RAY_health_check_period_ms": "500",
                   "RAY_health_check_timeout_ms": "1000", "RAY_health_check_failure_threshold": "4"}


_GIVEN_PORTS: set[int] = set()


def _free_port() -> int:
    """A port free now and never handed out before in this process: the kernel may give a just-released
    port again, and a `ray start` given one port for two of its components refuses to start."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _GIVEN_PORTS:
            _GIVEN_PORTS.add(port)
            return port


def _start_worth_retrying(out: str) -> bool:
    """Whether a failed `ray start` printing ``out`` may succeed if tried again with new ports: its
    node timed out on a loaded machine, or a port was taken by another process since it was picked."""
    return "timed out during startup" in out or "is trying to use a port number" in out


class LoopbackCluster:
    """A head and a second node started with `ray start` on this machine, each in a session of
    its own (so that stopping one kills exactly its processes), with its own temp dir and ports
    (the dashboard's too: two clusters on one machine must not collide on 8265), 1 CPU and 1
    logical GPU by default. Token auth with a token of its own (never ~/.ray/auth_token), or none
    (``token=False``) for a test that joins the cluster from its own process.

    Every address a test names is 127.0.0.1 (the GCS, the metrics endpoints). The nodes' own
    address is Ray's choice: Ray 2.60 replaces a loopback ``--node-ip-address`` (and ``ray.init``'s
    ``_node_ip_address``) with the address this machine reaches the outside by
    (``services.resolve_ip_for_localhost``), so passing 127.0.0.1 would change nothing; on a machine
    without a network interface Ray falls back to 127.0.0.1 itself (these tests pass so, run under
    ``unshare -n``)."""

    def __init__(self, root: str, code_dir: str, head_cpus: int = 1, node2_cpus: int = 1, gpus: int = 1,
                 token: bool = True):
        self.root, self.sessions, self.gpus, self.metrics_ports = root, [], gpus, {}
        self.gcs_port = _free_port()
        self.address = f"127.0.0.1:{self.gcs_port}"
        # token=False: no auth, so that the test process itself can join (Ray reads RAY_AUTH_MODE when imported)
        auth = ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16)} if token
                else {"RAY_AUTH_MODE": "disabled"})
        self.env = {**os.environ, **FAST_NODE_DEATH, **auth,
                    "PYTHONPATH": os.pathsep.join(p for p in (code_dir, os.environ.get("PYTHONPATH")) if p)}
        self.env.pop("RAY_ADDRESS", None)
        # No autoscaler monitor (a `ray start` head's is read-only: it adds no node) and no log monitor
        # (the pods' output stays in the node's logs): two Python processes less to start.
        self.head = self._start("head", "--head", f"--port={self.gcs_port}", f"--ray-client-server-port={_free_port()}",
                                "--include-dashboard=false", f"--dashboard-port={_free_port()}", "--no-monitor",
                                "--include-log-monitor=false", cpus=head_cpus, gpus=gpus)
        self.node2 = self.start_node2(node2_cpus)

    def _start(self, name: str, *args: str, cpus: int = 1, gpus: int = 1, attempts: int = 2) -> int:
        """`ray start`, tried again once: on a loaded machine a raylet may give up on its dashboard agent
        (a Python process it gives 15 s to start) and the node fails to start."""
        temp = tempfile.mkdtemp(prefix=f"{name}-", dir=self.root)  # short: Ray's socket paths must fit 107 chars
        ports = {p: _free_port() for p in NODE_PORTS}
        self.metrics_ports[name] = ports["metrics-export-port"]  # the node's Prometheus endpoint
        command = [os.path.join(os.path.dirname(sys.executable), "ray"), "start", *args, f"--temp-dir={temp}",
                   f"--num-cpus={cpus}", f"--num-gpus={gpus}", "--object-store-memory=100000000",
                   "--disable-usage-stats", *(f"--{p}={port}" for p, port in ports.items())]
        process = subprocess.Popen(command, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   start_new_session=True)
        self.sessions.append(process.pid)  # the session's id: every process `ray start` leaves behind is in it
        out = process.communicate(timeout=180)[0]
        if process.returncode != 0 and attempts > 1 and _start_worth_retrying(out):
            _killpg(process.pid)  # what it left behind, then a fresh try (its ports are free again)
            _wait_gone(process.pid)
            return self._start(name, *args, cpus=cpus, gpus=gpus, attempts=attempts - 1)
        assert process.returncode == 0, f"ray start {name} failed:\n{out[-3000:]}"
        return process.pid

    def start_node2(self, cpus: int = 1) -> int:
        self.node2 = self.add_node("node2", cpus)
        return self.node2

    def add_node(self, name: str, cpus: int = 1) -> int:
        """Start one more node (``ray start --address``); its session id, for ``_killpg``. Without a log
        monitor: one Python process less to start on a busy machine (the pods' output stays in its logs)."""
        return self._start(name, f"--address={self.address}", "--include-log-monitor=false", cpus=cpus,
                           gpus=self.gpus)

    def stop_node2(self) -> None:
        """SIGKILL the second node's raylet and its helpers (its workers exit when their raylet is gone)."""
        _killpg(self.node2)

    def close(self) -> None:
        for session in self.sessions:
            _killpg(session)
        _wait_gone(*self.sessions)


def _wait_gone(*sessions: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while any(_group_alive(s) for s in sessions) and time.monotonic() < deadline:
        time.sleep(0.2)


def _killpg(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@contextlib.contextmanager
def loopback(code_dir: Path, prefix: str = "prc-", **kwargs: Any) -> Iterator[LoopbackCluster]:
    """A ``LoopbackCluster(**kwargs)`` whose workers import HELD_MODULE from ``code_dir`` (written
    here), stopped on exit; after a failed ``ray start``, the processes it left are killed."""
    code_dir.mkdir()
    (code_dir / f"{HELD_MODULE}.py").write_text(HELD_CODE)
    root = tempfile.mkdtemp(prefix=prefix)
    cluster = None
    try:
        cluster = LoopbackCluster(root, str(code_dir), **kwargs)
        yield cluster
    finally:
        if cluster is not None:
            cluster.close()
        else:  # a failed `ray start`: its sessions are not known to a cluster object
            for pid in _sessions_under(root):
                _killpg(pid)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def loopback_cluster(tmp_path):
    with loopback(tmp_path / "held_code") as cluster:
        yield cluster


def _sessions_under(root: str) -> set[int]:
    """Session ids of the processes whose command line names ``root`` (only for a failed start)."""
    sessions = set()
    for proc in os.listdir("/proc"):
        if proc.isdigit():
            with contextlib.suppress(OSError):
                if root.encode() in Path(f"/proc/{proc}/cmdline").read_bytes():
                    sessions.add(os.getsid(int(proc)))
    return sessions


CLUSTER_DRIVER = """
import functools
import sys

import podracer
from podracer.tournament import Tournament
from {module} import make_pendulum

if __name__ == "__main__":
    store, hold = sys.argv[1], sys.argv[2]
    Tournament(functools.partial(make_pendulum, 16, hold), functools.partial(podracer.make_env, "pendulum", num_envs=4),
               agent="ppo", pods="auto", generation_steps=4096, entries=4, store=store, agent_config={config!r},
               threads_per_pod=1, gpus_per_pod=0.5, seed=1, backend="ray").run(progress=None)
"""


NO_TOKEN_DRIVER = """
import sys

import ray

from podracer.tournament import TournamentConfig, ray_backend

try:
    ray_backend.connect(TournamentConfig(backend="ray", address=sys.argv[1], connect_timeout_s=60))
except ConnectionError as e:
    print("refused:", e)
print("initialized:", ray.is_initialized())
"""


def _board_rows(store, sql: str) -> list[tuple]:
    """Rows of the store's board read without creating anything ([] before the driver made it)."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{store / 'board.sqlite'}?mode=ro", uri=True)) as db:
            return db.execute(sql).fetchall()
    except sqlite3.OperationalError:
        return []


@pytest.mark.slow
def test_two_node_cluster_loses_a_node_and_a_restarted_node_gets_pods(tmp_path, loopback_cluster):
    """pods="auto" on two nodes of 1 CPU with token auth: a driver without the token is refused with
    the fix; one with it runs a pod on each node, blocked mid-generation; the second node is
    SIGKILLed: its pod's generation is lost, and the pod is "preempted", not failed (it is not
    counted against max_failures); once the node is back, a new pod runs there."""
    cluster = loopback_cluster
    # First a driver given the address alone (no token): refused with the fix, before ray.init (which
    # would log "Failed to get cluster ID" each second for 20 s and then fail without saying why)
    no_token = {k: v for k, v in cluster.env.items() if not k.startswith("RAY_AUTH")}
    refused = subprocess.run([sys.executable, "-c", NO_TOKEN_DRIVER, cluster.address], env=no_token,
                             capture_output=True, text=True, timeout=300)
    assert "refused: the Ray cluster at address='127.0.0.1:" in refused.stdout, refused.stdout + refused.stderr
    assert "token authentication" in refused.stdout and "RAY_AUTH_MODE=token" in refused.stdout
    assert "initialized: False" in refused.stdout and "Failed to get cluster ID" not in refused.stderr

    store, hold = tmp_path / "store", tmp_path / "hold"
    hold.touch()
    script = tmp_path / "driver.py"
    script.write_text(CLUSTER_DRIVER.format(module=HELD_MODULE, config=TINY_PPO))
    log_path = tmp_path / "driver.log"
    tickets = lambda: _board_rows(store, "SELECT pod, id FROM tickets ORDER BY id")  # noqa: E731
    with open(log_path, "w") as log:
        driver = subprocess.Popen([sys.executable, str(script), str(store), str(hold)], stdout=log,
                                  stderr=subprocess.STDOUT, env={**cluster.env, "RAY_ADDRESS": cluster.address})
    try:
        def running() -> bool:
            return driver.poll() is None or pytest.fail(f"the driver exited:\n{log_path.read_text()[-5000:]}")

        wait_for(lambda: running() and len(tickets()) == 2, timeout=180, what="a pod on each node, mid-generation")
        first = dict(tickets())
        cluster.stop_node2()
        wait_for(lambda: running() and _board_rows(store, "SELECT id FROM pods WHERE status = 'preempted'"),
                 timeout=60, what="the driver to see the pod of the lost node die")
        cluster.start_node2()
        wait_for(lambda: running() and any(pod not in first for pod, _ in tickets()), timeout=180,
                 what="the replacement pod to start on the restarted node")
        hold.unlink()
        driver.wait(timeout=240)
    finally:
        hold.unlink(missing_ok=True)
        if driver.poll() is None:
            driver.kill()
            driver.wait(timeout=60)
    assert driver.returncode == 0, log_path.read_text()[-5000:]
    board = Leaderboard(store)
    assert_consistent(board, 4)  # the lost generation was trained again: nothing lost, nothing twice
    pods = board.pods()
    (lost,) = pods.index[pods["status"] == "preempted"]
    assert pods.loc[lost, "exitcode"] == ray_backend.POD_LOST_EXIT_CODE and lost in first
    assert "lost with its node" in pods.loc[lost, "error"]  # the pods table says why
    # With pods="auto" a pod started while node 2 was down can still be waiting for a CPU when the budget is met.
    assert_ended_cleanly(pods.drop(lost))
    assert first[lost] not in {e.ticket for e in board.entries()}  # its ticket was released, never submitted
    # Where pods ran: the first two on the two nodes, the one that trained after the restart on the
    # restarted node (a new raylet, a new node id), since the head's CPU was held by the other pod.
    ran = pods[pods.index.isin({e.pod for e in board.entries()}) | (pods.index == lost)]
    assert pods.loc[list(first), "node"].nunique() == 2, pods
    assert ran["node"].nunique() == 3 and (ran["host"] == socket.gethostname()).all(), pods


# ---------------------------------------------------------------------------- one local Ray, shared
@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    """A local Ray instance of 2 CPUs for the tests after the first, whose workers can import
    HELD_MODULE; shut down at the end. Yields the held env's module."""
    assert not ray.is_initialized()
    code_dir = tmp_path_factory.mktemp("held_code")
    (code_dir / f"{HELD_MODULE}.py").write_text(HELD_CODE)
    sys.path.insert(0, str(code_dir))
    # tried again if it times out starting on a busy machine
    ray_backend.start_local_ray(num_cpus=2, runtime_env={"env_vars": {"PYTHONPATH": str(code_dir)}})
    try:
        yield importlib.import_module(HELD_MODULE)
    finally:
        ray.shutdown()
        sys.path.remove(str(code_dir))
        sys.modules.pop(HELD_MODULE, None)


@pytest.mark.slow
def test_checkpoints_travel_as_bytes_and_are_checked_on_arrival(tmp_path, local_ray):
    board = Leaderboard(tmp_path)
    server = ray.remote(ray_backend.LeaderboardServer).options(num_cpus=0).remote(str(tmp_path))
    try:
        client = ray_backend.RemoteLeaderboard(server)
        agent = podracer.make_agent("ppo", make_small_env(), seed=0, **TINY_PPO)
        board.set_budget(2)
        pod = board.register_pod()
        ticket = client.claim(pod)
        entry = client.submit(agent, -500.0, agent_name="ppo", pod=pod, ticket=ticket)
        assert board.get(entry.id) == entry and board.load_agent(entry.id) is not None  # the store's own files
        with pytest.raises(TicketError, match="not claimed any more"):  # the board's errors arrive as they are
            client.submit(agent, -400.0, agent_name="ppo", pod=pod, ticket=ticket)

        data, checksum = checkpoints.dumps(agent.checkpoint())
        with pytest.raises(CheckpointError, match="fails its checksum"):  # altered in transit: refused
            ray.get(server.submit.remote(data[:-1] + b"x", checksum, -1.0, agent_name="ppo"))
        assert len(board) == 1 and len(list(board.checkpoint_dir.iterdir())) == 1

        loaded = client.load_agent(entry.id)
        obs = make_small_env().reset(seed=0)[0]
        torch.testing.assert_close(loaded.act(obs, deterministic=True), agent.act(obs, deterministic=True))
        path = board.store / entry.checkpoint
        path.write_bytes(path.read_bytes()[:100])  # damaged on the head node's disk
        with pytest.warns(RuntimeWarning, match=f"entry {entry.id} skipped"), pytest.raises(CheckpointError):
            client.load_agent(entry.id)
        assert board.get(entry.id).corrupt
    finally:
        ray.kill(server)


@pytest.mark.slow
def test_the_same_script_gives_the_same_kind_of_result_on_both_backends(tmp_path, local_ray):
    """Budget, lineage, best and ensemble, and the same store layout, whichever backend ran it."""
    boards = {}
    obs = make_small_eval_env().reset(seed=0)[0]
    for backend in ("local", "ray"):
        t = small_ray_tournament(tmp_path / backend, generations=2, backend=backend)
        board = t.run(progress=None)
        assert_consistent(board, 4)
        assert any(e.parent_id is not None for e in board.entries()), backend  # later generations had parents
        assert t.best()(obs).shape == t.ensemble(2)(obs).shape == (4, 1)
        assert board.pods()["host"].notna().all() and board.pods()["node"].notna().all()
        boards[backend] = board
    local, on_ray = boards["local"], boards["ray"]
    assert list(local.to_frame().columns) == list(on_ray.to_frame().columns)
    assert sorted(p.name for p in local.store.iterdir()) == sorted(p.name for p in on_ray.store.iterdir())
    assert on_ray.pods()["node"].iloc[0] == ray.get_runtime_context().get_node_id()  # a Ray node id, recorded


def test_every_board_method_a_pod_calls_is_served_and_sent_from_the_one_list(tmp_path):
    """PodBoard's methods, declared once: Leaderboard has each, the server forwards each to it, the
    pod's client sends each through its one retrying call, arguments in the protocol's order."""
    from podracer.tournament.protocol import POD_BOARD_METHODS, PodBoard

    assert {"claim", "top", "submit", "load_agent", "set_pod", "release_tickets"} <= set(POD_BOARD_METHODS)
    for name in POD_BOARD_METHODS:
        assert name in vars(ray_backend.LeaderboardServer) and name in vars(ray_backend.RemoteLeaderboard), name
    board = Leaderboard(tmp_path)
    assert isinstance(board, PodBoard)
    server = ray_backend.LeaderboardServer(str(tmp_path))  # called directly: no Ray
    pod = board.register_pod()
    assert server.claim(pod) == 1 and server.release_tickets(pod) == 1 and board.in_flight() == 0
    server.set_pod(pod, status="stopping")
    assert board.pods().loc[pod, "status"] == "stopping" and server.claim(pod) is None
    with pytest.raises(KeyError, match="no entry 7"):
        server.get(7)
    calls = []
    client = ray_backend.RemoteLeaderboard(server)
    client._call = lambda method, *args, **kwargs: calls.append((method, args, kwargs))
    client.claim(pod=3)  # by keyword: a retried claim still finds its pod in args[0]
    client.top()
    client.set_pod(2, status="exited", exitcode=0)
    assert calls == [("claim", (3,), {}), ("top", (), {}), ("set_pod", (2,), {"status": "exited", "exitcode": 0})]
    with pytest.raises(TypeError):
        client.claim(3, 4)  # checked against the protocol before anything is sent


def test_pods_on_node_counts_cpus_and_gpu_fractions():
    assert ray_backend.pods_on_node({"CPU": 8, "GPU": 1}, 2, 0.25) == 4
    assert ray_backend.pods_on_node({"CPU": 3, "GPU": 1}, 1, 0.3) == 3
    assert ray_backend.pods_on_node({"CPU": 3}, 2, 0) == 1
    assert ray_backend.pods_on_node({"CPU": 8}, 1, 0.5) == 0  # no GPU on the node


@pytest.mark.parametrize("request_", [dict(gpus_per_pod=0.5), dict(threads_per_pod=3)], ids=["gpu", "cpus"])
@pytest.mark.slow
def test_a_pod_no_node_can_host_is_reported_not_left_pending(tmp_path, local_ray, request_):
    config = TournamentConfig(backend="ray", **{"threads_per_pod": 1, **request_})
    with pytest.warns(RuntimeWarning, match="no node of the Ray cluster can host a pod"):
        backend = ray_backend.RayBackend(config, tmp_path)
    try:
        assert backend.capacity() == 1  # at least one pod: it waits for a node to join
    finally:
        backend.close()


@pytest.mark.slow
def test_a_leaderboard_actor_slow_to_start_is_explained(tmp_path, local_ray, monkeypatch):
    """Found while chasing a flaky test: on a busy machine Ray's workers (niceness 15) took minutes
    to start, and the backend's wait for the store's server ended in a bare GetTimeoutError."""
    monkeypatch.setattr(ray_backend, "SERVER_START_TIMEOUT_S", 1e-3)  # no actor process answers this soon
    with pytest.raises(RuntimeError, match=r"did not answer within 0.001 s.*niceness 15.*RAY_worker_niceness=0"):
        ray_backend.RayBackend(TournamentConfig(backend="ray", threads_per_pod=1), tmp_path)

    def server_gone():
        try:
            ray.get_actor(ray_backend.server_actor_name(tmp_path))
        except ValueError:
            return True
        return False

    wait_for(server_gone, timeout=60, what="the half-started server killed")  # closed, not left behind
    assert ray.is_initialized()  # the Ray it joined is not its own: left running


@pytest.mark.slow
def test_capacity_counts_the_pods_the_cluster_holds(tmp_path, local_ray):
    backend = ray_backend.RayBackend(TournamentConfig(backend="ray", threads_per_pod=1), tmp_path)
    try:
        assert backend.capacity() == 2  # the fixture's 2 CPUs
    finally:
        backend.close()


@pytest.mark.slow
def test_a_run_whose_pods_cannot_be_placed_still_stops(tmp_path, local_ray):
    """Probing found: with gpus_per_pod on a cluster without GPUs, stop() left the run waiting
    forever for pods Ray could never place. Pods that never started are now cancelled."""
    with pytest.warns(RuntimeWarning, match="no node of the Ray cluster can host a pod"):
        t = small_ray_tournament(tmp_path, generations=1, gpus_per_pod=0.5).start()
        wait_for(lambda: len(t.board.pods()) == 2, what="the pods registered")
        time.sleep(1.0)
        t.stop()
        t.wait(timeout=60)
    assert not t.running
    pods = t.board.pods()
    assert (pods["status"] == "cancelled").all() and pods["pid"].isna().all() and len(t.board) == 0
    assert (pods["error"] == "cancelled before it started: the run was asked to stop").all()  # not "ray.kill"


@pytest.mark.slow
def test_pod_actor_killed_mid_generation_loses_nothing_on_the_board(tmp_path, local_ray):
    hold = tmp_path / "hold"
    hold.touch()  # both pods block in their first env step: mid-generation for sure
    store = tmp_path / "store"
    t = Tournament(functools.partial(local_ray.make_pendulum, 16, str(hold)), make_small_eval_env, agent="ppo",
                   pods=2, generation_steps=4096, generations=2, store=store, agent_config=TINY_PPO,
                   threads_per_pod=1, seed=1, backend="ray")
    killed = {}

    def kill_one():
        wait_for(lambda: len(_tickets(t.board)) == 2, what="both pods in their first generation")
        killed["pod"], killed["ticket"] = _tickets(t.board)[0]
        pid = int(t.board.pods().loc[killed["pod"], "pid"])
        ray.kill(ray.get_actor(ray_backend.pod_actor_name(store, killed["pod"])))
        wait_for(lambda: not _alive(pid), timeout=60, what="the killed pod's process to end")
        hold.unlink()  # only now: the other pod (and the replacement) train on

    killer = threading.Thread(target=kill_one, daemon=True)
    killer.start()
    try:
        with pytest.warns(RuntimeWarning, match="died"):
            t.run(progress=None)
    finally:
        hold.unlink(missing_ok=True)
        killer.join(timeout=60)
    assert killed, "the killer thread found no pod mid-generation"
    pods = t.board.pods()
    assert pods.loc[killed["pod"], "status"] == "failed"
    assert pods.loc[killed["pod"], "exitcode"] == ray_backend.POD_LOST_EXIT_CODE
    assert len(pods) == 3  # the dead pod was replaced
    entries = t.board.entries()
    assert killed["ticket"] not in {e.ticket for e in entries}  # its generation is lost, and only that
    assert killed["pod"] not in {e.pod for e in entries}
    assert_consistent(t.board, 4)  # exactly the budget: the lost generation was trained again, nothing twice
    assert ray.is_initialized()  # the backend leaves a Ray it did not start running


def _tickets(board: Leaderboard) -> list[tuple[int, int]]:
    """(pod, ticket) of the generations in flight, oldest first."""
    with sqlite3.connect(board.path) as db:
        return list(db.execute("SELECT pod, id FROM tickets ORDER BY id"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True



RESUME_DRIVER = """
import functools
import sys

import ray

import podracer
from podracer.tournament import Tournament
from {module} import make_pendulum

if __name__ == "__main__":
    store, hold, address, code_dir = sys.argv[1:5]
    if code_dir:  # a job's workers import what its runtime_env gives them, not the driver's PYTHONPATH
        ray.init(address=address, runtime_env={{"env_vars": {{"PYTHONPATH": code_dir}}}}, logging_level="WARNING")
    Tournament(functools.partial(make_pendulum, 16, hold), functools.partial(podracer.make_env, "pendulum", num_envs=4),
               agent="ppo", pods=2, generation_steps=2048, generations=2, store=store, agent_config={config!r},
               threads_per_pod=1, seed=1, backend="ray", address=address).run(progress=None)
"""


@pytest.mark.slow
def test_a_pod_whose_code_the_workers_cannot_import_fails_with_the_fix(tmp_path, local_ray):
    """Probing found: a job started without the user's module on the workers' path ended with
    "6 pods died ... last error: exit code 1" (the spec fails to unpickle before pod_main runs)."""
    script = tmp_path / "driver.py"
    script.write_text(RESUME_DRIVER.format(module=HELD_MODULE, config=TINY_PPO).replace(
        "threads_per_pod=1,", "threads_per_pod=1, max_failures=0,"))  # the first failure ends the run
    code_dir = str(Path(local_ray.__file__).parent)
    res = subprocess.run([sys.executable, str(script), str(tmp_path / "store"), str(tmp_path / "hold"),
                          ray.get_runtime_context().gcs_address, ""], env={**os.environ, "PYTHONPATH": code_dir},
                         capture_output=True, text=True, timeout=300)
    assert res.returncode != 0
    assert "No module named 'podracer_test_ray_held_env'" in res.stderr, res.stderr[-3000:]
    assert "runtime_env" in res.stderr


@pytest.mark.slow
def test_driver_killed_then_a_new_driver_resumes_from_the_store(tmp_path, local_ray):
    """A driver on the cluster is SIGKILLed while both its pods are mid-generation: Ray ends the
    actors it owned (pods and the store's server); a new driver resumes from the store alone and
    finishes exactly the budget, the killed generations trained again."""
    store, hold = tmp_path / "store", tmp_path / "hold"
    hold.touch()
    script = tmp_path / "driver.py"
    script.write_text(RESUME_DRIVER.format(module=HELD_MODULE, config=TINY_PPO))
    code_dir = str(Path(local_ray.__file__).parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (code_dir, os.environ.get("PYTHONPATH")) if p)}
    env.pop("RAY_ADDRESS", None)
    address = ray.get_runtime_context().gcs_address
    log_path = tmp_path / "driver.log"
    with open(log_path, "w") as log:
        driver = subprocess.Popen([sys.executable, str(script), str(store), str(hold), address, code_dir], stdout=log,
                                  stderr=subprocess.STDOUT, env=env)
    try:
        board = lambda: Leaderboard(store)  # noqa: E731  (created by the driver)
        wait_for(lambda: (driver.poll() is None or pytest.fail(log_path.read_text()[-5000:]))
                 and store.joinpath("board.sqlite").exists() and len(_tickets(board())) == 2,
                 timeout=180, what="both pods of the first driver mid-generation")
        killed = _tickets(board())
        pids = [int(p) for p in board().pods()["pid"].dropna()]
        driver.kill()
        driver.wait(timeout=30)
        wait_for(lambda: not any(_alive(p) for p in pids), timeout=60, what="Ray to end the killed driver's pods")
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(timeout=30)
    hold.unlink()
    resumed = Tournament.from_store(store, allow=[f"{HELD_MODULE}:make_pendulum"])
    assert resumed.config.backend == "ray" and len(resumed.board) == 0
    board = resumed.run(progress=None)
    assert_consistent(board, 4, steps=2048)
    assert not {ticket for _, ticket in killed} & {e.ticket for e in board.entries()}  # lost, trained again
    pods = board.pods()
    assert (pods.loc[[pod for pod, _ in killed], "status"] == "lost").all()  # retired by the new driver
    assert_ended_cleanly(pods.drop([pod for pod, _ in killed]))  # the new driver's
