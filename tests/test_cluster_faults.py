"""A tournament that survives its cluster (issue 21): node losses are not pod failures, a restarted
leaderboard server kills no pod, a cluster that does not answer or cannot host a pod fails with
the fix instead of waiting forever, pods="auto" asks the autoscaler for its nodes, and pods report
metrics (Ray metrics, TensorBoard).

The fast tests check each rule alone (the verdict on a dead actor from the GCS's record, the
driver's failure counting with a scripted backend, ...). One slow test runs them all on a real
cluster on loopback: a head of 1 CPU and a node of 3, pods=4 with max_failures=0 (one counted
failure ends the run): the node is SIGKILLed with 3 pods mid-generation, started again, its 3 new
pods killed with it a second time, and the leaderboard server is killed in between while the pods
call it. The board ends with exactly its budget. Another runs pods="auto" on a head with an
autoscaler (Ray's fake multinode provider) and sees the run grow as the nodes it asked for arrive.
Every Ray process started here is stopped, by session id (see tests/test_ray_backend.py).
"""

import contextlib
import functools
import importlib
import json
import math
import multiprocessing as mp
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from types import SimpleNamespace

import pytest

import podracer
from podracer.tournament import Leaderboard, Pod, PodSpec, Tournament, TournamentConfig
from podracer.tournament import backends, pod as pod_module, tournament as tournament_module

ray = pytest.importorskip("ray")
from ray.core.generated import common_pb2  # noqa: E402

from podracer.tournament import ray_backend  # noqa: E402
from test_ray_backend import (HELD_CODE, HELD_MODULE, NODE_PORTS, TINY_PPO, _free_port, _killpg,  # noqa: E402
                              _sessions_under, _start_worth_retrying, _wait_gone, assert_consistent, loopback,
                              make_small_eval_env, no_ray_connected, wait_for)

make_small_env = functools.partial(podracer.make_env, "pendulum", num_envs=16)


# ---------------------------------------------------------------------------- why a pod's actor died
def _record(state="DEAD", node="n2", reason=None, never_started=False, node_died=False, message="gone"):
    """An actor record as ``ray._private.state.actors`` returns it (the parts classify_death reads)."""
    cause = common_pb2.ActorDeathCause()
    if reason is not None:
        context = cause.actor_died_error_context
        context.error_message, context.never_started = message, never_started
        context.reason = getattr(common_pb2.ActorDiedErrorContext, reason)
        if node_died:
            context.node_death_info.reason = common_pb2.NodeDeathInfo.UNEXPECTED_TERMINATION
    return {"State": state, "Address": {"NodeID": node}, "DeathCause": cause}


def test_a_pod_lost_with_its_node_or_never_started_is_not_its_failure():
    live, draining = {"n1", "n2"}, set()
    node_died = ray_backend.classify_death(_record(reason="NODE_DIED", node_died=True,
                                                   message="The actor died because its node has died."), live, draining)
    assert (node_died.fault, node_died.node, node_died.wait_s) == (ray_backend.NODE_LOST, "n2", 0.0)
    assert "its node has died" in node_died.message  # the pods table says why
    unstarted = ray_backend.classify_death(_record(reason="OWNER_DIED", never_started=True), live, draining)
    assert unstarted.fault == ray_backend.NEVER_STARTED
    killed = ray_backend.classify_death(_record(reason="RAY_KILL", message="killed by ray.kill"), live, draining)
    assert (killed.fault, killed.message, killed.wait_s) == (None, "killed by ray.kill", 0.0)
    # A worker that died on a live node is the pod's failure, unless its node follows in a moment
    crashed = ray_backend.classify_death(_record(reason="WORKER_DIED"), live, draining)
    assert crashed.fault is None and crashed.wait_s == ray_backend.WORKER_DEATH_CONFIRM_S
    assert ray_backend.classify_death(_record(reason="WORKER_DIED"), {"n1"}, draining).fault == ray_backend.NODE_LOST
    assert ray_backend.classify_death(_record(reason="WORKER_DIED"), live, {"n2"}).fault == ray_backend.NODE_LOST
    # Not marked dead yet: a SIGKILLed raylet's node looks alive for seconds; the verdict waits for Ray
    pending = ray_backend.classify_death(_record(state="ALIVE"), live, draining)
    assert pending.fault is None and pending.wait_s == ray_backend.DEATH_VERDICT_S
    assert ray_backend.classify_death(_record(state="ALIVE"), {"n1"}, draining).fault == ray_backend.NODE_LOST
    assert ray_backend.classify_death({}, live, draining).wait_s == ray_backend.DEATH_VERDICT_S  # no record


class ScriptedBackend:
    """Pods without processes: each started pod ends as the next outcome says. "ok" trains (submits
    entries) until the board's budget is spent; "node" ends lost with its node; "crash" fails; "waits"
    never starts (no node has room for it) and ends only when killed."""

    def __init__(self, outcomes):
        self.outcomes, self.started = list(outcomes), []

    def start(self, spec):
        board = Leaderboard(spec.store)
        self.started.append(spec.pod_id)
        return SimpleNamespace(pod=spec.pod_id, outcome=self.outcomes.pop(0), board=board, killed=False)

    def poll(self, handle):
        if handle.outcome == "waits":
            return -9 if handle.killed else None
        if handle.outcome != "ok" or handle.killed:
            handle.board.claim(handle.pod)  # dies mid-generation: the driver releases its ticket
            return -9
        while (ticket := handle.board.claim(handle.pod)) is not None:
            handle.board.submit({"agent": "ppo"}, -100.0, pod=handle.pod, ticket=ticket)  # a stand-in checkpoint
        return 0

    def fault(self, handle):
        return ray_backend.NODE_LOST if handle.outcome == "node" else None

    def kill(self, handle):
        handle.killed = True

    def join(self, handle, timeout=None):
        pass

    def capacity(self):
        return 2

    def close(self):
        pass


def _scripted_run(tmp_path, monkeypatch, outcomes, max_failures):
    backend = ScriptedBackend(outcomes)
    monkeypatch.setattr(tournament_module, "make_backend", lambda config, store: backend)
    t = Tournament(make_small_env, make_small_eval_env, agent="ppo", pods=2, generations=2, store=tmp_path,
                   agent_config=TINY_PPO, max_failures=max_failures)
    t.poll_s = 0.01
    return t, backend


def test_node_losses_are_not_counted_and_failures_count_per_pod(tmp_path, monkeypatch):
    # Pods start two at a time, in slots 0 and 1. Three node losses and one crash per slot, with
    # max_failures=1: the run finishes its budget
    t, backend = _scripted_run(tmp_path / "a", monkeypatch, ["node", "crash", "crash", "node", "node", "ok"], 1)
    with pytest.warns(RuntimeWarning, match="node lost: not counted as a failure"):
        board = t.run(progress=None)
    assert len(board) == 4 and board.in_flight() == 0
    status = board.pods()["status"].tolist()
    assert status.count("preempted") == 3 and status.count("failed") == 2 and status[-1] == "exited"
    # Two crashes of the pods in one slot (0, node losses between them not counted) exceed max_failures=1
    t, backend = _scripted_run(tmp_path / "b", monkeypatch, ["crash", "node", "node", "node", "crash", "ok"], 1)
    with pytest.warns(RuntimeWarning, match="died"), \
            pytest.raises(RuntimeError, match="pod 5 died: failure 2 of the pods in its place"):
        t.run(progress=None)
    assert backend.started == [1, 2, 3, 4, 5, 6] and len(t.board) == 0


# ---------------------------------------------------------------------------- small fixes
def _count_connections(monkeypatch, port, fail=None):
    """The attempts to reach ``port`` through ``socket.create_connection``, which raises ``fail`` if given."""
    attempts, real = [], ray_backend.socket.create_connection

    def create_connection(address, *args, **kwargs):
        if address[1] == port:
            attempts.append(address)
            if fail is not None:
                raise fail
        return real(address, *args, **kwargs)

    monkeypatch.setattr(ray_backend.socket, "create_connection", create_connection)
    return attempts


def test_a_cluster_that_does_not_answer_fails_after_connect_timeout(monkeypatch):
    """Nothing listens on port 1: the refusal comes back at once and is final, so connect fails on
    the first attempt, naming the refusal, instead of trying again for connect_timeout_s."""
    inits = no_ray_connected(monkeypatch)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    attempts = _count_connections(monkeypatch, 1)
    with pytest.raises(ConnectionError, match=r"no Ray cluster answers at address='127.0.0.1:1'.*"
                                              r"connection refused.*connect_timeout_s=1 s"):
        ray_backend.connect(TournamentConfig(backend="ray", address="127.0.0.1:1", connect_timeout_s=1))
    assert len(attempts) == 1 and inits == []  # no second try, and Ray was neither started nor joined
    with pytest.raises(ConnectionError, match=r"connection refused.*connect_timeout_s=60 s was not waited"):
        ray_backend.wait_for_cluster("127.0.0.1:1", timeout_s=60)
    assert len(attempts) == 2


def test_an_address_that_never_answers_is_tried_until_connect_timeout(monkeypatch):
    """A host that drops the packets (a firewall, a head still booting) is tried again until the timeout."""
    attempts = _count_connections(monkeypatch, 1, fail=TimeoutError("timed out"))
    with pytest.raises(ConnectionError, match=r"no Ray cluster answers .*timed out\) within connect_timeout_s=0.3 s"):
        ray_backend.wait_for_cluster("127.0.0.1:1", timeout_s=0.3)
    assert len(attempts) >= 2  # tried again until the deadline


def test_pods_waiting_for_resources_are_counted_with_what_is_missing():
    asked = ray_backend.pod_bundle(threads=2, gpus=0.5)
    text = ray_backend.waiting_message(2, 4, asked, {"CPU": 1.0, "GPU": 0.0, "memory": 2e9})
    assert text.startswith("2 of 4 pods are waiting for resources: each asks for 2 CPU, 0.5 GPU; the cluster has "
                           "1 CPU, 0 GPU free; missing: CPU (2 asked, 1 free), GPU (0.5 asked, 0 free).")
    custom = ray_backend.waiting_message(1, 3, {"CPU": 1, "tpu": 4}, {"CPU": 5.0, "tpu": 2.0})
    assert custom.startswith("1 of 3 pods is waiting") and "missing: tpu (4 asked, 2 free)." in custom
    assert "CPU (" not in custom  # enough CPUs: not missing
    spread = ray_backend.waiting_message(1, 2, {"CPU": 2}, {"CPU": 2.0})  # free in all, but on two nodes
    assert "2 CPU free (not all on one node)" in spread and "missing" not in spread


def test_pods_cancelled_at_the_end_say_so_not_like_a_fault(tmp_path, monkeypatch):
    """The budget met while pods wait unstarted (no pid): they are cancelled, and the pods table says
    why, not the backend's word for a kill (Ray's "killed by ray.kill" reads like a fault)."""
    t, backend = _scripted_run(tmp_path, monkeypatch, ["ok", "waits", "waits"], 0)
    t.add_pods(1)  # 3 pods for a budget of 4: the first fills it, the two others never start
    board = t.run(progress=None)
    pods = board.pods()
    assert len(board) == 4 and pods["status"].tolist() == ["exited", "cancelled", "cancelled"], pods
    assert (pods.loc[[2, 3], "error"] == "cancelled before it started: the board holds its budget of 4 entries").all()


def test_pods_auto_asks_the_autoscaler_for_max_pods(monkeypatch):
    calls = []
    monkeypatch.setattr(ray_backend, "request_resources", lambda **kw: calls.append(kw))
    config = TournamentConfig(backend="ray", pods="auto", entries=10, max_pods=3, gpus_per_pod=0.5)
    assert ray_backend.request_pods(config, threads=2)
    assert calls == [{"bundles": [{"CPU": 2, "GPU": 0.5}] * 3}]
    assert not ray_backend.request_pods(TournamentConfig(backend="ray", pods="auto", entries=10), threads=1)
    assert not ray_backend.request_pods(TournamentConfig(backend="ray", pods=2), threads=1) and len(calls) == 1
    with pytest.raises(ValueError, match="max_pods=3 bounds pods='auto'"):
        TournamentConfig(pods=2, max_pods=3)


def test_an_autoscaler_is_told_from_a_read_only_monitor():
    assert not ray_backend.autoscaled(None)
    read_only = '{"autoscaler_report": {"active_nodes": {"node_3f2a": 1, "node_9c1b": 1}, "pending_launches": {}}}'
    assert not ray_backend.autoscaled(read_only)  # `ray start` clusters: the monitor mirrors the nodes
    launching = '{"autoscaler_report": {"active_nodes": {"ray.head.default": 1}, "pending_launches": {"gpu": 2}}}'
    assert ray_backend.autoscaled(launching)


def test_a_pod_that_reruns_the_script_is_told_what_to_add(tmp_path, monkeypatch):
    """Probing found: the README's block with backend="local" and no main guard failed with a
    message about driver.lock; a spawned pod re-running the script now names the fix."""
    t = Tournament(make_small_env, make_small_eval_env, pods=1, generations=1, store=tmp_path)
    with t._driver_lock():  # the driver holds the store
        with pytest.raises(RuntimeError, match="driver.lock is held"):  # a second driver: as before
            t.run(progress=None)
        monkeypatch.setattr(mp.current_process(), "_inheriting", True, raising=False)  # as while spawn imports __main__
        with pytest.raises(RuntimeError, match=r'if __name__ == "__main__":'):
            t.run(progress=None)


def test_keep_top_stays_below_the_pod_count(tmp_path):
    """Probing found: with pods <= keep_top, no pod ever exploited (a pod trained on from -1378
    while a -227 entry existed). The worst pod now copies the leader."""
    assert pod_module.keep_top(TournamentConfig(pods=2, keep_top=2)) == 1
    assert pod_module.keep_top(TournamentConfig(pods=1, keep_top=2)) == 0
    assert pod_module.keep_top(TournamentConfig(pods=8, keep_top=2)) == 2
    assert pod_module.keep_top(TournamentConfig(pods="auto", entries=4, keep_top=2)) == 2
    config = TournamentConfig(pods=2, keep_top=2, exploit_margin=0.0)
    pod = Pod(PodSpec(str(tmp_path), 2, config, make_small_env, make_small_eval_env))
    leader = pod.board.submit({"agent": "ppo"}, -227.0, pod=1)  # stand-in checkpoints: only rows are read
    pod.last = pod.board.submit({"agent": "ppo"}, -1378.0, pod=2)
    assert pod.leading(pod.board.top(5)) is None  # pod 2 lags: it copies a parent instead of training on
    pod.last = leader
    assert pod.leading(pod.board.top(5)) == leader


def test_tensorboard_logs_each_generation_of_a_pod(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    config = TournamentConfig(pods=1, generation_steps=512, agent_config=TINY_PPO, tensorboard=True)
    pod = Pod(PodSpec(str(tmp_path), 7, config, make_small_env, make_small_eval_env))
    board = pod.board
    board.set_budget(2)
    assert pod.run() == 2
    logs = EventAccumulator(str(tmp_path / "tb" / "pod-7")).Reload()
    scores = logs.Scalars("tournament/score")
    assert [s.value for s in scores] == pytest.approx([e.score for e in board.entries()])
    assert [s.step for s in scores] == [512, 1024]  # the pod's own steps: its curves run forward
    assert {"loss/actor", "charts/steps_per_second", "hp/learning_rate"} <= set(logs.Tags()["scalars"])


# ---------------------------------------------------------------------------- a cluster that loses nodes
@pytest.fixture
def spot_cluster(tmp_path, monkeypatch):
    """A head of 1 CPU and a node of 3 on loopback (no GPU, no auth, so this process joins it as the
    driver), whose workers import HELD_MODULE; metrics reported every half second."""
    code_dir = tmp_path / "held_code"
    monkeypatch.syspath_prepend(str(code_dir))
    monkeypatch.setenv("RAY_metrics_report_interval_ms", "500")
    try:
        with loopback(code_dir, prefix="prf-", head_cpus=1, node2_cpus=3, gpus=0, token=False) as cluster:
            try:
                ray.init(address=cluster.address, logging_level="WARNING")
                yield cluster
            finally:
                if ray.is_initialized():
                    ray.shutdown()
    finally:
        sys.modules.pop(HELD_MODULE, None)


STEPS = 1024  # env steps per generation: 4 rollouts of TINY_PPO's 16 envs x 16 steps


def _in_flight(store) -> dict[int, int]:
    """pod -> ticket of the generations in flight."""
    with contextlib.closing(sqlite3.connect(store / "board.sqlite")) as db:
        return dict(db.execute("SELECT pod, id FROM tickets"))


def _with_status(board: Leaderboard, status: str) -> set[int]:
    pods = board.pods()
    return set(pods.index[pods["status"] == status])


def _pods_on(board: Leaderboard, node: str) -> set[int]:
    pods = board.pods()
    return set(pods.index[(pods["node"] == node) & pods["status"].isin(["running", "stopping"])])


def _metric(port: int, name: str) -> dict[str, float]:
    """pod tag -> value of the Ray metric ``name`` on a node's Prometheus endpoint ({} before any).
    On 127.0.0.1: a node's metrics agent listens on every interface, or on loopback only when the
    node's address is loopback (a machine without a network), so loopback reaches it either way."""
    with contextlib.suppress(OSError):
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        pattern = rf'^ray_{name}(?:_total)?{{[^}}]*pod="(\d+)"[^}}]*}} (\S+)$'
        return {m[1]: float(m[2]) for m in re.finditer(pattern, text, re.M)}
    return {}


TOKEN_AUTH_DRIVER = """
import functools
import sys

import podracer
from podracer.tournament import Tournament

make_env = functools.partial(podracer.make_env, "pendulum", num_envs=4)
try:
    Tournament(make_env, make_env, agent="ppo", pods=1, generations=1, store=sys.argv[2], backend="ray",
               address=sys.argv[1]).run(progress=None)
except RuntimeError as e:
    print("refused:", e)
"""


@pytest.mark.slow
def test_a_spot_cluster_loses_a_node_twice_and_its_server_once_and_the_board_is_exact(tmp_path, spot_cluster,
                                                                                      monkeypatch):
    cluster, store, hold = spot_cluster, tmp_path / "store", tmp_path / "hold"
    assert ray_backend.cluster_capacity(1, 0) == 4
    # A pod no node can host (a GPU on a cluster without one) fails the run after placement_timeout_s
    monkeypatch.setattr(ray_backend, "PLACEMENT_CHECK_S", 0.2)
    gpu = Tournament(make_small_env, make_small_eval_env, agent="ppo", pods=1, generations=1, store=tmp_path / "gpu",
                     backend="ray", gpus_per_pod=1, placement_timeout_s=1.0, threads_per_pod=1)
    with pytest.warns(RuntimeWarning, match="no autoscaler.* up to 1 s"), \
            pytest.raises(RuntimeError, match="none joined within placement_timeout_s=1 s"):
        gpu.run(progress=None)
    # A driver on token auth joins this cluster without auth, but Ray cancels each actor it creates: it is
    # told why and what to do. (A process that started a local Ray is on token auth for good, see
    # tests/conftest.py; a driver given RAY_AUTH_MODE=token is the same case, 10 s cheaper to start.)
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0123456789abcdef0123456789abcdef"}
    driver = subprocess.run([sys.executable, "-c", TOKEN_AUTH_DRIVER, cluster.address, str(tmp_path / "token")],
                            env=env, capture_output=True, text=True, timeout=180)
    assert "refused: Ray cancelled the leaderboard's actor" in driver.stdout, driver.stdout + driver.stderr[-3000:]
    assert "RAY_AUTH_MODE=token" in driver.stdout and "restart its kernel" in driver.stdout, driver.stdout

    hold.touch()  # every pod blocks in its next env step: mid-generation for sure
    make_held_env = functools.partial(importlib.import_module(HELD_MODULE).make_pendulum, 16, str(hold))
    # A budget of 14: at the second kill the board holds 3 to about 8 entries (3, one of them from the
    # node's pods, waited for; then at most one more per pod before the hold stops them) and 4
    # generations are in flight, so it is not spent early; every generation left after it trains on
    # the head's one CPU, so no more than that.
    t = Tournament(make_held_env, make_small_eval_env, agent="ppo", pods=4, generation_steps=STEPS, entries=14,
                   store=store, agent_config=TINY_PPO, threads_per_pod=1, seed=1, backend="ray", max_failures=0,
                   tensorboard=True).start()
    board, lost, node_ids = t.board, [], []

    def all_held(n_pods: int) -> bool:
        assert t.running, "the run ended early"
        return len(_in_flight(store)) == n_pods

    def kill_node2() -> None:
        """SIGKILL the node with 3 pods mid-generation; wait until the driver has seen them go."""
        wait_for(lambda: all_held(4), timeout=180, what="4 pods mid-generation")
        node = ray_backend.live_nodes() - {ray.get_runtime_context().get_node_id()}
        (node2,) = node
        on_node2 = _pods_on(board, node2)
        assert len(on_node2) == 3 and on_node2 <= set(_in_flight(store))
        cluster.stop_node2()
        wait_for(lambda: _with_status(board, "preempted") >= on_node2, timeout=60,
                 what="the driver to see the 3 pods lost with their node")
        lost.append(on_node2)
        node_ids.append(node2)

    kill_node2()
    assert ray_backend.cluster_capacity(1, 0) == 1
    cluster.start_node2(3)
    wait_for(lambda: ray_backend.cluster_capacity(1, 0) == 4, timeout=60, what="the restarted node to join")

    # The server is killed while 4 pods train and call it; Ray restarts it, the pods retry
    wait_for(lambda: all_held(4), timeout=180, what="3 new pods on the restarted node")
    (node2,) = ray_backend.live_nodes() - {ray.get_runtime_context().get_node_id()}
    on_node2 = _pods_on(board, node2)
    hold.unlink()
    wait_for(lambda: len(board) >= 1, timeout=120, what="a first entry")
    server = ray.get_actor(ray_backend.server_actor_name(store))
    old_pid = ray.get(server.pid.remote())
    ray.kill(server, no_restart=False)
    # Entries through the restarted server, one of them from a pod of the node: its metrics are read below
    wait_for(lambda: len(board) >= 3 and {e.pod for e in board.entries()} & on_node2, timeout=120,
             what="entries through the restarted server, one from the node's pods")
    assert ray.get(server.pid.remote()) != old_pid
    hold.touch()
    wait_for(lambda: all_held(4), timeout=180, what="4 pods mid-generation again")
    generations = {}
    wait_for(lambda: generations.update(_metric(cluster.metrics_ports["node2"], "podracer_pod_generations")) or
             generations, timeout=60, what="the pods' Ray metrics on the node's Prometheus endpoint")
    kill_node2()
    hold.unlink()
    t.wait(timeout=240)
    assert not t.running

    assert_consistent(board, 14, steps=STEPS)
    pods = board.pods()
    assert (pods["status"] != "failed").all(), pods.to_string()  # max_failures=0: one counted failure ends the run
    preempted = pods[pods["status"] == "preempted"]
    assert set(preempted.index) == lost[0] | lost[1] and len(lost[0] | lost[1]) == 6
    assert preempted["error"].str.contains("lost with its node").all()
    assert (preempted["node"].isin(node_ids)).all()
    assert set(pods.loc[~pods.index.isin(preempted.index), "status"]) <= {"exited", "cancelled"}
    tickets = {e.ticket for e in board.entries()}
    assert len(tickets) == 14  # every lost generation trained again, none twice

    # Observability: Ray metrics from the pods of the restarted node, TensorBoard files on the head
    assert generations and set(generations) <= {str(p) for p in pods.index}, generations
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for pod in {e.pod for e in board.entries()}:
        logs = EventAccumulator(str(store / "tb" / f"pod-{pod}")).Reload()
        assert sorted({s.value for s in logs.Scalars("tournament/score")}) == \
            pytest.approx(sorted({e.score for e in board.entries() if e.pod == pod})), pod


# ---------------------------------------------------------------------------- a cluster that grows
def _fake_autoscaler_config(gcs_address: str, max_nodes: int) -> dict:
    """An autoscaler config for Ray's fake multinode provider: the monitor on the head starts each
    node it launches as raylet processes on this machine. A head of 0 CPUs and one node type of
    1 CPU. (Ray's ``cluster_utils.AutoscalingCluster`` builds the same from a yaml the Ray 2.60 wheel
    lacks, on port 6379, after ``ray stop --force``, which would stop every Ray on the machine.)"""
    return {"cluster_name": "podracer-test", "max_workers": max_nodes, "upscaling_speed": 1.0,
            "idle_timeout_minutes": 5, "head_node_type": "ray.head.default",
            "provider": {"type": "fake_multinode", "gcs_address": gcs_address, "use_node_id_as_ip": True,
                         "disable_node_updaters": True, "disable_launch_config_check": True},
            "available_node_types": {
                "ray.head.default": {"resources": {"CPU": 0}, "node_config": {}, "max_workers": 0},
                "cpu1": {"resources": {"CPU": 1}, "node_config": {}, "min_workers": 0, "max_workers": max_nodes}},
            "auth": {"ssh_user": "ubuntu"}, "file_mounts": {}, "cluster_synced_files": [],
            "file_mounts_sync_continuously": False, "initialization_commands": [], "setup_commands": [],
            "head_setup_commands": [], "worker_setup_commands": [], "head_start_ray_commands": [],
            "worker_start_ray_commands": []}


@pytest.fixture
def autoscaling_cluster(tmp_path, monkeypatch):
    """A `ray start` head of 0 CPUs whose autoscaler (Ray's fake multinode provider, checking every
    second) adds nodes of 1 CPU on demand, up to 2, whose workers import HELD_MODULE; this process
    joins it as the driver. Its session is SIGKILLed at the end: the nodes the monitor started are in it."""
    code_dir = tmp_path / "held_code"
    code_dir.mkdir()
    (code_dir / f"{HELD_MODULE}.py").write_text(HELD_CODE)
    monkeypatch.syspath_prepend(str(code_dir))
    root = tempfile.mkdtemp(prefix="pra-")
    port = _free_port()
    config = tmp_path / "autoscaler.json"
    config.write_text(json.dumps(_fake_autoscaler_config(f"127.0.0.1:{port}", 2)))
    env = {**os.environ, "RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1", "RAY_AUTH_MODE": "disabled",
           "PYTHONPATH": os.pathsep.join(p for p in (str(code_dir), os.environ.get("PYTHONPATH")) if p)}
    env.pop("RAY_ADDRESS", None)
    sessions = []
    try:
        for attempt in range(2):  # tried again once, as LoopbackCluster does: a loaded machine may time a node out
            command = [os.path.join(os.path.dirname(sys.executable), "ray"), "start", "--head", f"--port={port}",
                       f"--autoscaling-config={config}", f"--temp-dir={root}", "--num-cpus=0",
                       "--include-dashboard=false", f"--dashboard-port={_free_port()}",
                       f"--ray-client-server-port={_free_port()}", "--include-log-monitor=false",
                       "--disable-usage-stats", *(f"--{p}={_free_port()}" for p in NODE_PORTS)]
            head = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    start_new_session=True)
            sessions.append(head.pid)
            out = head.communicate(timeout=180)[0]
            if head.returncode == 0 or not _start_worth_retrying(out):
                break
            _killpg(head.pid)
            _wait_gone(head.pid)
        assert head.returncode == 0, f"ray start --head failed:\n{out[-3000:]}"
        ray.init(address=f"127.0.0.1:{port}", logging_level="WARNING")
        yield
    finally:
        if ray.is_initialized():
            ray.shutdown()
        for session in sessions:
            _killpg(session)
        for pid in _sessions_under(root):  # none unless a process left the session
            _killpg(pid)
        shutil.rmtree(root, ignore_errors=True)
        sys.modules.pop(HELD_MODULE, None)


@pytest.mark.slow
def test_pods_auto_grows_as_the_autoscaler_adds_the_nodes_it_was_asked_for(tmp_path, autoscaling_cluster):
    """pods="auto", max_pods=2 on a head that hosts no pod: the backend asks the autoscaler for two
    pods' nodes (request_resources), the run starts with one pod waiting for a node and grows to two
    as the nodes arrive (the pods hold in their first generation until both train at once); the
    board ends at its budget, every entry trained on an added node."""
    store, hold = tmp_path / "store", tmp_path / "hold"
    head = ray.get_runtime_context().get_node_id()
    wait_for(ray_backend.autoscaler_present, timeout=60, what="the autoscaler's first status")
    assert ray_backend.cluster_capacity(1, 0) == 1  # no node hosts a pod yet: one pod, waiting
    hold.touch()
    make_held_env = functools.partial(importlib.import_module(HELD_MODULE).make_pendulum, 16, str(hold))
    t = Tournament(make_held_env, make_small_eval_env, agent="ppo", pods="auto", max_pods=2, entries=4,
                   generation_steps=STEPS, store=store, agent_config=TINY_PPO, threads_per_pod=1, seed=1,
                   backend="ray")

    def release_when_two_train():
        with contextlib.suppress(TimeoutError):  # the run's own assertions below say what went wrong
            wait_for(lambda: store.joinpath("board.sqlite").exists() and len(_in_flight(store)) == 2, timeout=180,
                     what="two pods mid-generation")
        hold.unlink(missing_ok=True)

    releaser = threading.Thread(target=release_when_two_train, daemon=True)
    releaser.start()
    try:
        with pytest.warns(RuntimeWarning, match="the autoscaler is asked for one"):
            board = t.run(progress=None)
    finally:
        hold.unlink(missing_ok=True)
        releaser.join(timeout=60)
    assert_consistent(board, 4, steps=STEPS)
    pods = board.pods()
    trained = pods.loc[sorted({e.pod for e in board.entries()})]
    assert len(trained) == 2 and trained["node"].nunique() == 2, pods.to_string()  # the run grew to two pods
    assert head not in set(pods["node"].dropna()), pods.to_string()  # both on nodes the autoscaler added
    assert ray_backend.cluster_capacity(1, 0) == 2
