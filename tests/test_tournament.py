"""Tournaments of pods: learning across generations, a pod killed mid-generation, Ctrl-C then
resume, a driver killed with SIGKILL then resume, elastic pods, config round trip, what a store's
YAML may run, and the ensemble policy.

Pods are real processes (spawn), so each tournament here costs a few seconds of start-up; the
settings are as small as still shows the behaviour. Scheduling between processes is not
deterministic (which pod draws which ticket), so learning thresholds keep a wide margin.
"""

import dataclasses
import functools
import importlib
import logging
import math
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml

import podracer
from podracer.agents import registry
from podracer.agents.common import check_config, declared_number, mutable_bounds
from podracer.agents.ppo import PPO, PPOConfig
from podracer.envs import CartPoleVecEnv, PendulumVecEnv
from podracer.tournament import Ensemble, Leaderboard, Pod, PodSpec, Tournament, TournamentConfig
from podracer.tournament import config as tournament_config

PENDULUM_PPO = dict(podracer.get_preset("ppo", "pendulum").config)
TINY_PPO = {**PENDULUM_PPO, "hidden_sizes": (16,), "update_epochs": 2}
make_env = functools.partial(podracer.make_env, "pendulum", num_envs=64)
make_eval_env = functools.partial(podracer.make_env, "pendulum", num_envs=16)
make_small_env = functools.partial(podracer.make_env, "pendulum", num_envs=16)
make_small_eval_env = functools.partial(podracer.make_env, "pendulum", num_envs=4)


def small_tournament(store, generations=4, pods=2, **kw):
    """Generations of ~1 s: long enough to be killed in the middle of one."""
    return Tournament(make_small_env, make_small_eval_env, agent="ppo", pods=pods, generation_steps=4096,
                      generations=generations, store=store, agent_config=TINY_PPO, threads_per_pod=1, seed=1, **kw)


def wait_for(condition, timeout=240.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


def pod_in_generation(board: Leaderboard, min_age_s: float = 0.2):
    """(pod id, pid) of a pod that has been training its current generation for min_age_s."""
    with sqlite3.connect(board.path) as db:
        return db.execute("SELECT pods.id, pods.pid FROM tickets JOIN pods ON pods.id = tickets.pod "
                          "WHERE pods.pid IS NOT NULL AND tickets.claimed_at < ? LIMIT 1",
                          (time.time() - min_age_s,)).fetchone()


# A module outside Podracer, as a user's own code would be: an env factory and an agent class.
# HeldPendulum's step waits while the file `hold` exists, so a test can keep a generation running
# for as long as it needs (a pod blocked there is "mid-generation" for sure).
USER_MODULE = "podracer_test_user_code"
USER_CODE = textwrap.dedent('''
    import os
    import time

    from podracer.agents.ppo import PPO
    from podracer.envs import PendulumVecEnv


    class MyPPO(PPO):
        pass


    class HeldPendulum(PendulumVecEnv):
        def __init__(self, num_envs, hold=None):
            super().__init__(num_envs=num_envs)
            self.hold = hold

        def step(self, actions):
            while self.hold is not None and os.path.exists(self.hold):
                time.sleep(0.05)
            return super().step(actions)


    def make_pendulum(num_envs, hold=None):
        return HeldPendulum(num_envs, hold)
''')


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """Import name of USER_CODE, importable here and in the pods this process spawns."""
    code_dir = tmp_path / "user_code"
    code_dir.mkdir()
    (code_dir / f"{USER_MODULE}.py").write_text(USER_CODE)
    monkeypatch.syspath_prepend(str(code_dir))  # spawn hands sys.path on to the pods
    return USER_MODULE


def process_alive(pid: int) -> bool:
    """False once ``pid`` has exited (a zombie not yet reaped by its new parent counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def assert_consistent(board: Leaderboard) -> None:
    assert board.integrity_check() == "ok"
    assert board.in_flight() == 0  # no ticket left claimed by a dead pod
    assert board.verify() == []  # every listed checkpoint is whole and matches its checksum
    entries = board.entries()
    assert len({e.ticket for e in entries}) == len(entries)
    ids = {e.id for e in entries}
    assert all(e.parent_id is None or e.parent_id in ids for e in entries)


# ---------------------------------------------------------------------------- learning
@pytest.fixture(scope="module")
def pendulum_run(tmp_path_factory):
    store = tmp_path_factory.mktemp("pendulum")
    t = Tournament(make_env, make_eval_env, agent="ppo", pods=3, generation_steps=5_000, generations=3, store=store,
                   agent_config=PENDULUM_PPO, threads_per_pod=1, explore_prob=0.0, seed=0)
    t.run(progress=None)
    return t


@pytest.mark.slow
def test_tournament_raises_best_score_across_generations(pendulum_run):
    frame = pendulum_run.board.to_frame()
    assert len(frame) == 9
    best_by_generation = frame.groupby("generation")["score"].max()
    assert best_by_generation.index.max() >= 2
    # Fresh agents after 5k steps score -900 to -1200; two generations later about -220 to -450.
    assert best_by_generation.iloc[-1] > best_by_generation.iloc[0] + 300, best_by_generation
    assert frame["score"].idxmax() in frame.index[frame["generation"] > 0]
    assert_consistent(pendulum_run.board)


@pytest.mark.slow
def test_lineage_records_parent_and_hyperparameter_changes(pendulum_run):
    board = pendulum_run.board
    bounds = mutable_bounds(PPOConfig())
    for entry in board.entries():
        assert set(entry.hparams) == set(bounds)
        assert all(bounds[k][0] <= v <= bounds[k][1] for k, v in entry.hparams.items())
        if entry.parent_id is None:  # fresh: changes are redraws from the configured values (none for ticket 1)
            assert entry.generation == 0 and (entry.ticket != 1 or entry.changes == {})
            for name, (old, new) in entry.changes.items():
                assert old == pytest.approx(PENDULUM_PPO.get(name, getattr(PPOConfig(), name)))
                assert entry.hparams[name] == pytest.approx(new)
            continue
        parent = board.get(entry.parent_id)
        assert entry.generation == parent.generation + 1
        assert entry.global_step >= parent.global_step + 5_000
        for name, (old, new) in entry.changes.items():
            assert parent.hparams[name] == pytest.approx(old) and entry.hparams[name] == pytest.approx(new)
    best = board.top(1)[0]
    chain = board.lineage(best.id)
    assert chain[0].parent_id is None and chain[-1].id == best.id and len(chain) == best.generation + 1


@pytest.mark.slow
def test_best_and_ensemble_are_policies(pendulum_run):
    torch.set_num_threads(1)  # tiny MLPs: a second thread only contends with the other tests' processes
    board = pendulum_run.board
    best_entry = board.top(1)[0]
    agent = pendulum_run.best()
    score = podracer.evaluate(agent, make_eval_env(), seed=pendulum_run.config.eval_seed)["eval/return_mean"]
    assert score == pytest.approx(best_entry.score, rel=0.05)  # the same validation episodes

    ensemble = pendulum_run.ensemble(3)
    assert len(ensemble) == 3
    obs = make_eval_env().reset(seed=0)[0]
    members = torch.stack([a.act(obs, deterministic=True) for a in ensemble.agents])
    torch.testing.assert_close(ensemble(obs), members.mean(0))
    torch.testing.assert_close(ensemble.act(obs, deterministic=True), members.mean(0))
    result = podracer.evaluate(ensemble, make_eval_env(), seed=123)
    assert math.isfinite(result["eval/return_mean"]) and result["eval/length_mean"] == 200


@pytest.mark.slow
def test_a_finished_run_resumes_as_a_no_op(pendulum_run):
    before = [(e.id, e.checksum) for e in pendulum_run.board.entries()]
    again = Tournament.from_store(pendulum_run.store)
    assert again.config == pendulum_run.config
    again.run(progress=None)  # the board already holds its budget: no pod starts
    assert [(e.id, e.checksum) for e in again.board.entries()] == before
    assert len(again.board.pods()) == len(pendulum_run.board.pods())


# ---------------------------------------------------------------------------- faults and elasticity
@pytest.mark.slow
def test_pod_killed_mid_generation_leaves_the_board_intact(tmp_path, user_module):
    # The pods block in their first env step while `hold` exists, so the one killed is mid-generation
    # for sure (a timing guess was flaky: on a quiet machine a ~1 s generation could end first).
    import importlib

    hold = tmp_path / "hold"
    hold.touch()
    make_held_env = functools.partial(importlib.import_module(user_module).make_pendulum, 16, str(hold))
    t = Tournament(make_held_env, make_small_eval_env, agent="ppo", pods=2, generation_steps=4096, generations=3,
                   store=tmp_path / "store", agent_config=TINY_PPO, threads_per_pod=1, seed=1)
    killed, errors = [], []

    def kill_one():
        try:
            wait_for(lambda: pod_in_generation(t.board) is not None, what="a pod mid-generation")
            pod, pid = pod_in_generation(t.board)
            os.kill(pid, signal.SIGKILL)
            killed.append(pod)
        except Exception as e:  # surfaced below: a thread's exception would otherwise vanish
            errors.append(e)
        finally:
            hold.unlink(missing_ok=True)

    killer = threading.Thread(target=kill_one, daemon=True)
    killer.start()
    with pytest.warns(RuntimeWarning, match="died"):
        t.run(progress=None)
    killer.join()
    assert not errors, errors
    pods = t.board.pods()
    assert pods.loc[killed[0], "exitcode"] == -signal.SIGKILL and pods.loc[killed[0], "status"] == "failed"
    assert len(pods) >= 3  # the dead pod was replaced
    assert len(t.board) == 6  # the run completed its budget all the same
    assert_consistent(t.board)


@pytest.mark.slow
def test_interrupt_then_resume_loses_and_duplicates_nothing(tmp_path, user_module):
    # Once two entries are in, `hold` keeps the pods inside their next generation, so the Ctrl-C
    # lands mid-generation for sure.
    hold = tmp_path / "hold"
    make_held_env = functools.partial(importlib.import_module(user_module).make_pendulum, 16, str(hold))

    def small_tournament(store, generations):
        return Tournament(make_held_env, make_small_eval_env, agent="ppo", pods=2, generation_steps=4096,
                          generations=generations, store=store, agent_config=TINY_PPO, threads_per_pod=1, seed=1)

    t = small_tournament(tmp_path, generations=3)

    def interrupt():
        wait_for(lambda: len(t.board) >= 2, what="two entries")
        hold.touch()
        time.sleep(0.5)  # the pods reach their next env step and wait there
        os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C in a terminal or notebook does

    # Ctrl-C raises KeyboardInterrupt in a terminal or a notebook, but a process started in the
    # background (`cmd &` in a script, as CI runners may do) inherits SIGINT ignored, and in the full
    # suite the signal then never surfaced: give the test the terminal's handler.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=interrupt, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            t.run(progress=None)
    finally:
        signal.signal(signal.SIGINT, previous)
        hold.unlink(missing_ok=True)  # never leave the pods blocked
    first = [(e.id, e.checksum) for e in t.board.entries()]
    assert 2 <= len(first) < 6
    assert_consistent(t.board)
    assert not (t.board.pods()["status"].isin(["running", "stopping"])).any()

    resumed = small_tournament(tmp_path, generations=3)  # same settings, same store
    resumed.run(progress=None)
    entries = resumed.board.entries()
    assert len(entries) == 6  # generations are counted from the board: nothing lost, nothing twice
    assert [(e.id, e.checksum) for e in entries][: len(first)] == first
    assert len({e.checksum for e in entries}) == 6
    assert_consistent(resumed.board)


DRIVER_SCRIPT = """
import functools
import sys

import podracer
from podracer.tournament import Tournament
from {module} import make_pendulum

if __name__ == "__main__":
    store, hold = sys.argv[1], sys.argv[2]
    Tournament(functools.partial(make_pendulum, 16, hold), functools.partial(podracer.make_env, "pendulum", num_envs=4),
               agent="ppo", pods=2, generation_steps=4096, generations=1, store=store, agent_config={config!r},
               threads_per_pod=1, seed=1).run(progress=None)
"""


@pytest.mark.skipif(os.name != "posix", reason="SIGKILL and re-parenting of orphans are POSIX")
@pytest.mark.slow
def test_driver_killed_with_sigkill_orphans_exit_and_resume_keeps_the_budget(tmp_path, user_module):
    store, hold = tmp_path / "store", tmp_path / "hold"
    hold.touch()  # the pods block in their first env step: the driver dies mid-generation for sure
    script = tmp_path / "driver.py"
    script.write_text(DRIVER_SCRIPT.format(module=user_module, config=TINY_PPO))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(tmp_path / "user_code"),
                                                                    os.environ.get("PYTHONPATH")) if p)}

    def pods_mid_generation() -> list[int]:
        """Pids of the pods that hold a ticket (read without creating anything in the store)."""
        assert driver.poll() is None, f"the driver exited early:\n{(tmp_path / 'driver.log').read_text()}"
        try:
            with sqlite3.connect(f"file:{store / 'board.sqlite'}?mode=ro", uri=True) as db:
                return [r[0] for r in db.execute("SELECT pods.pid FROM tickets JOIN pods ON pods.id = tickets.pod "
                                                 "WHERE pods.pid IS NOT NULL")]
        except sqlite3.OperationalError:  # not created yet
            return []

    orphans: list[int] = []
    with open(tmp_path / "driver.log", "w") as log:
        driver = subprocess.Popen([sys.executable, str(script), str(store), str(hold)], env=env, stdout=log,
                                  stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: len(pods_mid_generation()) == 2, what="both pods in their generation")
        orphans = pods_mid_generation()
        driver.kill()  # SIGKILL: no clean-up in the driver at all
        driver.wait(timeout=60)
        # Each orphan notices within a second (its watchdog), releases its ticket and exits; without
        # the watchdog they would train on (here: wait forever) and submit later.
        wait_for(lambda: not any(process_alive(pid) for pid in orphans), timeout=30, what="the orphan pods to exit")
    finally:
        if driver.poll() is None:
            driver.kill()
        for pid in orphans:
            if process_alive(pid):
                os.kill(pid, signal.SIGKILL)
    board = Leaderboard(store)
    assert len(board) == 0 and board.in_flight() == 0
    assert board.pods()["status"].tolist() == ["lost", "lost"]

    hold.unlink()
    with pytest.raises(ValueError, match=f"allow=\\['{user_module}:make_pendulum'\\]"):
        Tournament.from_store(store)  # a factory outside Podracer runs only when the caller allows it
    resumed = Tournament.from_store(store, allow=[f"{user_module}:make_pendulum"])
    resumed.run(progress=None)
    entries = resumed.board.entries()
    assert len(entries) == 2 == resumed.config.budget  # exactly the budget, nothing twice
    assert len({e.checksum for e in entries}) == 2
    assert_consistent(resumed.board)
    assert resumed.board.pods()["status"].tolist() == ["lost", "lost", "exited", "exited"]


def test_a_result_on_a_released_ticket_is_refused_and_the_pod_stops(tmp_path):
    t = small_tournament(tmp_path, generations=1, pods=1)
    t.board.set_budget(1)
    pod_id = t.board.register_pod()
    pod = Pod(PodSpec(str(tmp_path), pod_id, t.config, make_small_env, make_small_eval_env))
    claim = pod.board.claim

    def claim_then_lose_the_ticket(pod_id):
        ticket = claim(pod_id)
        t.board.release_tickets()  # a new driver takes the store over while this generation trains
        return ticket

    pod.board.claim = claim_then_lose_the_ticket
    with pytest.warns(RuntimeWarning, match=f"pod {pod_id} stops: ticket .* is not claimed any more"):
        assert pod.run() == 0
    assert len(t.board) == 0 and list(t.board.checkpoint_dir.iterdir()) == []


@pytest.mark.slow
def test_pods_can_be_added_and_removed_while_running(tmp_path):
    t = small_tournament(tmp_path, generations=30, pods=1)
    t.start()
    try:
        running = lambda: int((t.board.pods()["status"] == "running").sum())  # noqa: E731
        wait_for(lambda: len(t.board) >= 1, what="a first entry")
        t.add_pods(2)
        started = lambda: int(t.board.pods()["pid"].notna().sum())  # noqa: E731
        wait_for(lambda: running() == 3 and started() == 3, what="three pods started")
        t.remove_pods(2)
        wait_for(lambda: running() == 1, what="back to one pod")
        assert t.pods == 1
        t.stop()
        t.wait(timeout=240)
    finally:
        t.stop()
        t.wait(timeout=240)
    assert not t.running
    pods = t.board.pods()
    assert len(pods) == 3 and (pods["exitcode"] == 0).all()  # removed pods finished their generation
    assert 1 <= len(t.board) < 60


@pytest.mark.slow
def test_removed_pods_that_never_started_are_cancelled_not_failed(tmp_path):
    t = small_tournament(tmp_path, generations=30, pods=1)
    t.poll_s = 0.01
    t.start()
    try:
        wait_for(lambda: len(t.board) >= 1, what="a first entry")
        t.add_pods(2)
        wait_for(lambda: len(t.board.pods()) == 3, what="two more pods registered")
        t.remove_pods(2)  # at once: spawned processes take seconds to start, so these have no pid yet
        wait_for(lambda: (t.board.pods()["status"] == "cancelled").sum() == 2, what="two pods cancelled")
    finally:
        t.stop()
        t.wait(timeout=240)
    pods = t.board.pods()
    assert pods.loc[1, "exitcode"] == 0 and (pods.loc[[2, 3], "status"] == "cancelled").all()
    assert_consistent(t.board)
    assert_consistent(t.board)


@pytest.mark.slow
def test_pods_auto_fills_the_machine_and_entries_bound_the_run(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 3)  # capacity = 3 CPUs // 1 thread per pod
    with pytest.raises(ValueError, match="entries=N"):
        small_tournament(tmp_path / "none", pods="auto")  # pods * generations is no budget then
    with pytest.raises(ValueError, match="pods must be"):
        small_tournament(tmp_path / "zero", pods=0)
    t = small_tournament(tmp_path / "auto", pods="auto", entries=5)
    board = t.run(progress=None)
    assert t.pods == 3 and t.config.budget == 5
    assert_consistent(board)
    assert len(board) == 5  # entries, not pods * generations (3 * 4)
    pods = board.pods()
    assert len(pods) == 3 and (pods["exitcode"] == 0).all()
    assert (pods["host"] == pods["node"]).all() and pods["host"].nunique() == 1  # local: this machine
    # add_pods on top of the capacity; the run resumes to a larger board with a new entries budget
    t2 = small_tournament(tmp_path / "auto", pods="auto", entries=6)
    t2.add_pods(1)
    t2.run(progress=None)
    assert t2.pods == 4 and len(t2.board) == 6


@pytest.mark.slow
def test_a_pod_that_keeps_failing_stops_the_run_with_its_error(tmp_path):
    broken_env = functools.partial(podracer.make_env, "no-such-env", num_envs=4)  # fails inside the pod
    t = Tournament(broken_env, make_small_eval_env, pods=1, generations=2, store=tmp_path, max_failures=0)
    with pytest.warns(RuntimeWarning, match="died"), pytest.raises(RuntimeError, match="unknown env 'no-such-env'"):
        t.run(progress=None)
    assert t.board.pods()["status"].tolist() == ["failed"]
    assert len(t.board) == 0 and t.board.in_flight() == 0


def test_corrupt_checkpoints_are_skipped_by_pods_and_best(tmp_path):
    t = small_tournament(tmp_path, explore_prob=0.0, top_k=1)  # top_k=1: the corrupt entry is drawn first
    board = t.board
    env = make_small_env()
    good_agent = podracer.make_agent("ppo", env, seed=0, **TINY_PPO)
    good = board.submit(good_agent, -500.0, agent_name="ppo")
    bad = board.submit(podracer.make_agent("ppo", env, seed=1, **TINY_PPO), -100.0, agent_name="ppo")
    (board.store / bad.checkpoint).write_bytes(b"not a checkpoint")

    pod = Pod(PodSpec(str(tmp_path), 0, t.config, make_small_env, make_small_eval_env))
    with pytest.warns(RuntimeWarning, match=f"entry {bad.id} skipped"):
        agent, parent, _, _ = pod.start_agent(random.Random(0), seed=0)
    assert parent.id == good.id and board.get(bad.id).corrupt
    pod.last = bad  # the pod's own entry leads but cannot be loaded: it copies the next one, not a fresh agent
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        _, parent, _, _ = pod.start_agent(random.Random(0), seed=0, ticket=9)
    assert parent is not None and parent.id == good.id

    worse = board.submit(podracer.make_agent("ppo", env, seed=2, **TINY_PPO), -50.0, agent_name="ppo")
    path = board.store / worse.checkpoint
    path.write_bytes(path.read_bytes()[:100])  # truncated, as by a full disk
    with pytest.warns(RuntimeWarning, match=f"entry {worse.id} skipped"):
        best = t.best()
    obs = env.reset(seed=0)[0]
    torch.testing.assert_close(best.act(obs, deterministic=True), good_agent.act(obs, deterministic=True))


def test_missing_checkpoint_is_skipped_by_pods_but_not_flagged(tmp_path):
    t = small_tournament(tmp_path, explore_prob=0.0, top_k=1)
    board = t.board
    env = make_small_env()
    good = board.submit(podracer.make_agent("ppo", env, seed=0, **TINY_PPO), -500.0, agent_name="ppo")
    away = board.submit(podracer.make_agent("ppo", env, seed=1, **TINY_PPO), -100.0, agent_name="ppo")
    path = board.store / away.checkpoint
    backup = path.rename(tmp_path / "backup.pt")

    pod = Pod(PodSpec(str(tmp_path), 0, t.config, make_small_env, make_small_eval_env))
    with pytest.warns(RuntimeWarning, match=f"entry {away.id} skipped"):
        _, parent, _, _ = pod.start_agent(random.Random(0), seed=0)
    assert parent.id == good.id  # skipped for this draw...
    assert not board.get(away.id).corrupt  # ...not condemned
    backup.rename(path)  # restored
    _, parent, _, _ = pod.start_agent(random.Random(0), seed=0)
    assert parent.id == away.id


def test_pods_build_agents_quietly_with_the_configured_preset(tmp_path, caplog):
    # One resolver for agent names: the registry's, re-exported by the tournament config.
    assert tournament_config.resolve_agent is registry.resolve_agent
    assert tournament_config.agent_name is registry.agent_name
    t = small_tournament(tmp_path)
    pod = Pod(PodSpec(str(tmp_path), 0, t.config, make_small_env, make_small_eval_env))
    with caplog.at_level(logging.INFO, logger="podracer"):
        agent, parent, _, _ = pod.start_agent(random.Random(0), seed=0)  # empty board: a fresh agent
    assert parent is None and agent.preset == podracer.get_preset("ppo", "pendulum")  # preset="auto": the env's task
    assert not [r for r in caplog.records if r.name == "podracer"]  # no preset line every generation
    plain = TournamentConfig(**{**t.config.to_dict(), "preset": None})
    agent, _, _, _ = Pod(PodSpec(str(tmp_path), 0, plain, make_small_env, make_small_eval_env)).start_agent(
        random.Random(0), seed=0)
    assert agent.preset is None
    with pytest.raises(ValueError, match="no ppo preset 'no-such-task'"):
        small_tournament(tmp_path / "other", preset="no-such-task")


def test_fresh_agents_after_the_first_explore_from_generation_zero(tmp_path):
    t = small_tournament(tmp_path)
    pod = Pod(PodSpec(str(tmp_path), 0, t.config, make_small_env, make_small_eval_env))
    bounds = mutable_bounds(PPOConfig())
    configured = {k: PENDULUM_PPO.get(k, getattr(PPOConfig(), k)) for k in bounds}
    first = pod.start_agent(random.Random(1), seed=1, ticket=1)
    assert first[3] == {} and first[2] == pytest.approx(configured)  # the user's setting stays in the population
    draws = [pod.start_agent(random.Random(ticket), seed=ticket, ticket=ticket) for ticket in range(2, 8)]
    assert sum(bool(changes) for _, _, _, changes in draws) >= 4  # redrawn with probability 0.5 per hparam
    for agent, parent, hparams, changes in draws:
        assert parent is None and all(bounds[k][0] <= v <= bounds[k][1] for k, v in hparams.items())
        assert {k: getattr(agent.config, k) for k in bounds} == pytest.approx(hparams)  # applied to the agent
        for name, (old, new) in changes.items():
            assert old == pytest.approx(configured[name]) and hparams[name] == pytest.approx(new)
        if "learning_rate" in changes:
            assert agent.optimizer.param_groups[0]["lr"] == pytest.approx(hparams["learning_rate"])
    again = pod.start_agent(random.Random(2), seed=2, ticket=2)
    assert again[2] == draws[0][2]  # deterministic given the generation's seed
    off = TournamentConfig(**{**t.config.to_dict(), "init_resample_prob": 0.0})
    pod_off = Pod(PodSpec(str(tmp_path), 0, off, make_small_env, make_small_eval_env))
    assert pod_off.start_agent(random.Random(2), seed=2, ticket=2)[3] == {}
    with pytest.raises(ValueError, match="init_resample_prob are probabilities"):
        TournamentConfig(**{**t.config.to_dict(), "init_resample_prob": 1.5})


def test_a_leading_pod_trains_on_unchanged_and_a_lagging_one_copies_and_mutates(tmp_path):
    t = small_tournament(tmp_path, keep_top=1, exploit_margin=0.0, explore_prob=0.0)
    pod = Pod(PodSpec(str(tmp_path), 0, t.config, make_small_env, make_small_eval_env))
    agent = pod.start_agent(random.Random(1), seed=1)[0]
    hp = {k: getattr(agent.config, k) for k in mutable_bounds(agent.config)}
    best = pod.board.submit(agent, -200.0, hparams=hp, global_step=4096)
    worse = pod.board.submit(agent, -900.0, hparams=hp, global_step=4096)
    pod.last = best  # leads the board: PBT leaves it alone
    for s in range(5):
        _, parent, hparams, changes = pod.start_agent(random.Random(s), seed=s, ticket=9)
        assert parent.id == best.id and changes == {} and hparams == pytest.approx(hp)
    pod.last = worse  # lags: draws a parent from the top_k and perturbs it, as every pod did before keep_top
    draws = [pod.start_agent(random.Random(s), seed=s, ticket=9) for s in range(8)]
    assert all(changes for *_, changes in draws) and best.id in {parent.id for _, parent, _, _ in draws}
    pod.config = TournamentConfig(**{**t.config.to_dict(), "keep_top": 0})
    pod.last = best
    assert pod.start_agent(random.Random(0), seed=0, ticket=9)[3]  # keep_top=0: every generation mutates
    with pytest.raises(ValueError, match="keep_top must be an int >= 0"):
        TournamentConfig(**{**t.config.to_dict(), "keep_top": -1})


def test_a_pod_within_evaluation_noise_of_the_leader_does_not_copy_it(tmp_path):
    t = small_tournament(tmp_path, keep_top=1, exploit_margin=2.0, explore_prob=0.0)
    pod = Pod(PodSpec(str(tmp_path), 0, t.config, make_small_env, make_small_eval_env))  # 4 eval episodes
    agent = pod.start_agent(random.Random(1), seed=1)[0]
    hp = {k: getattr(agent.config, k) for k in mutable_bounds(agent.config)}
    pod.board.submit(agent, -1200.0, score_std=300.0, hparams=hp, global_step=4096)
    noisy = pod.board.submit(agent, -1300.0, score_std=300.0, hparams=hp, global_step=4096)
    clear = pod.board.submit(agent, -1900.0, score_std=300.0, hparams=hp, global_step=4096)
    pod.last = noisy  # 100 behind, standard error sqrt(2 x 300² / 4) = 212: noise, it trains on
    assert all(pod.start_agent(random.Random(s), seed=s, ticket=9)[1:] == (noisy, hp, {}) for s in range(4))
    pod.last = clear  # 700 behind: beyond 2 standard errors, it copies and mutates
    assert all(pod.start_agent(random.Random(s), seed=s, ticket=9)[3] for s in range(4))
    with pytest.raises(ValueError, match="exploit_margin must be >= 0"):
        TournamentConfig(**{**t.config.to_dict(), "exploit_margin": -1.0})

# ---------------------------------------------------------------------------- configuration
def test_env_factories_must_be_picklable(tmp_path):
    def local_factory():
        return PendulumVecEnv(4)

    for bad in (lambda: PendulumVecEnv(4), local_factory):
        with pytest.raises(ValueError, match="functools.partial"):
            Tournament(bad, make_eval_env, store=tmp_path)
    with pytest.raises(ValueError, match="unknown PPOConfig field"):
        Tournament(make_env, make_eval_env, store=tmp_path, agent_config={"learning_rat": 1e-3})
    assert Tournament(make_env, make_eval_env, agent=PPO, store=tmp_path / "cls").config.agent == "ppo"

    class LocalAgent(PPO):
        pass

    with pytest.raises(ValueError, match="importable"):
        Tournament(make_env, make_eval_env, agent=LocalAgent, store=tmp_path)
    with pytest.raises(ValueError, match="unknown backend"):
        Tournament(make_env, make_eval_env, store=tmp_path, backend="slurm")


def test_config_yaml_round_trip_and_store_mismatch(tmp_path):
    config = TournamentConfig(agent="ppo", agent_config=TINY_PPO, pods=3, generations=None, time_budget=60.0,
                              selection="topk", perturb_factors=(0.5, 2.0), make_env={"function": "m:f"})
    text = config.to_yaml()
    assert TournamentConfig.from_yaml(text) == config
    config.to_yaml(tmp_path / "c.yaml")
    assert TournamentConfig.from_yaml(tmp_path / "c.yaml") == config
    assert yaml.safe_load(text)["agent_config"]["hidden_sizes"] == [16]
    with pytest.raises(ValueError, match="unknown TournamentConfig field"):
        TournamentConfig.from_dict({**config.to_dict(), "podz": 3})
    old = {k: v for k, v in config.to_dict().items() if k not in ("keep_top", "init_resample_prob", "exploit_margin")}
    resumed = TournamentConfig.from_dict(old)  # a store from before keep_top: it goes on as it ran
    assert (resumed.keep_top, resumed.init_resample_prob, resumed.exploit_margin) == (0, 0.0, 0.0)
    assert (config.keep_top, config.init_resample_prob, config.exploit_margin) == (2, 0.5, 2.0)

    t = small_tournament(tmp_path / "run")
    saved = TournamentConfig.from_yaml(tmp_path / "run" / "tournament.yaml")
    assert saved == t.config and saved.make_env["function"] == "podracer.envs:make_env"
    small_tournament(tmp_path / "run", generations=8, pods=3)  # a bigger budget is a resume
    with pytest.raises(ValueError, match="generation_steps"):
        Tournament(make_small_env, make_small_eval_env, generation_steps=999, store=tmp_path / "run",
                   agent_config=TINY_PPO, seed=1)


def test_numeric_settings_must_be_numbers_with_a_named_error(tmp_path):
    t = small_tournament(tmp_path / "run", generations=2)
    yaml_path = tmp_path / "run" / "tournament.yaml"
    text = yaml_path.read_text()
    yaml_path.write_text(text.replace("temperature: 1.0", "temperature: 1e-3"))  # YAML reads 1e-3 as text
    with pytest.raises(ValueError, match=r"temperature must be a number, got '1e-3'.*write 0.001"):
        Tournament.from_store(tmp_path / "run")
    yaml_path.write_text(text.replace("top_k: 5", "top_k: 2.5"))
    with pytest.raises(ValueError, match="top_k must be a whole number, got 2.5"):
        Tournament.from_store(tmp_path / "run")
    with pytest.raises(ValueError, match="keep_top must be a whole number, got True"):
        TournamentConfig(**{**t.config.to_dict(), "keep_top": True})
    plain = TournamentConfig(**{**t.config.to_dict(), "generation_steps": 1e4, "seed": np.int64(3),
                                "exploit_margin": np.float32(1.5), "generations": None, "time_budget": 60})
    assert (plain.generation_steps, plain.seed, plain.exploit_margin) == (10_000, 3, 1.5)
    assert "generation_steps: 10000\n" in plain.to_yaml()  # plain numbers: the YAML stays readable
    for budget in (-1, 0, math.inf, math.nan):  # found by probing: -1 ran, trained nothing and "finished"
        with pytest.raises(ValueError, match="time_budget must be a positive number of seconds or None"):
            TournamentConfig(**{**t.config.to_dict(), "time_budget": budget})


def test_from_store_of_a_folder_that_is_no_store_says_so(tmp_path):
    """Found by probing: a mistyped store path gave a bare FileNotFoundError for tournament.yaml."""
    with pytest.raises(FileNotFoundError, match=r"missing is no tournament store \(not there\).*Tournament\("):
        Tournament.from_store(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="is no tournament store \\(a folder without tournament.yaml\\)"):
        Tournament.from_store(tmp_path)


def test_an_edited_tournament_yaml_that_is_not_a_mapping_of_fields_names_the_file(tmp_path):
    """Found by probing: a store whose tournament.yaml an edit broke raised yaml's bare ParserError."""
    path = tmp_path / "tournament.yaml"
    path.write_text("garbage: [\n")
    with pytest.raises(ValueError, match=rf"{path} is not valid YAML \(while parsing .*restore the file"):
        Tournament.from_store(tmp_path)
    path.write_text("- a list\n")
    with pytest.raises(ValueError, match=rf"{path} holds a list, not the mapping of TournamentConfig fields"):
        Tournament.from_store(tmp_path)


def test_from_store_runs_only_trusted_or_allowed_code(tmp_path, user_module):
    import importlib

    user = importlib.import_module(user_module)
    store = tmp_path / "run"
    small_tournament(store)
    path = store / "tournament.yaml"
    saved = yaml.safe_load(path.read_text())
    marker = tmp_path / "pwned"
    for name in ("posix:system", "os:system", "subprocess:getoutput"):
        path.write_text(yaml.safe_dump({**saved, "make_env": {"function": name, "args": [f"touch {marker}"],
                                                              "kwargs": {}}}))
        with pytest.raises(ValueError, match=rf"{path}.*make_env: '{name}'.*allow=\['{name}'\]"):
            Tournament.from_store(store)
    path.write_text(yaml.safe_dump({**saved, "make_eval_env": {"function": "os:system", "args": ["true"],
                                                               "kwargs": {}}}))
    with pytest.raises(ValueError, match="make_eval_env: 'os:system'"):
        Tournament.from_store(store, make_env=make_small_env)  # passing one factory allows only that one
    path.write_text(yaml.safe_dump({**saved, "agent": "os:system"}))
    with pytest.raises(ValueError, match="agent: 'os:system'"):
        Tournament.from_store(store)
    assert not marker.exists()
    path.write_text(yaml.safe_dump({**saved, "agent": "podracer.agents.ppo:PPO"}))  # the registry's own class
    assert Tournament.from_store(store).config.agent == "ppo"

    # A user's own factory and agent class: refused until allowed, by name or by object.
    mine = tmp_path / "mine"
    Tournament(functools.partial(user.make_pendulum, 16), make_small_eval_env, agent=user.MyPPO, generations=1,
               store=mine, agent_config=TINY_PPO)
    with pytest.raises(ValueError, match=f"make_env: '{user_module}:make_pendulum'"):
        Tournament.from_store(mine)
    with pytest.raises(ValueError, match=f"agent: '{user_module}:MyPPO'"):
        Tournament.from_store(mine, allow=[f"{user_module}:make_pendulum"])
    for allow in ([f"{user_module}:make_pendulum", f"{user_module}:MyPPO"], [user.make_pendulum, user.MyPPO]):
        t = Tournament.from_store(mine, allow=allow)
        assert t.config.agent == f"{user_module}:MyPPO" and t.make_env().num_envs == 16
    assert Tournament.from_store(mine, make_env=functools.partial(user.make_pendulum, 16),
                                 allow=[user.MyPPO]).config.agent == f"{user_module}:MyPPO"


# ---------------------------------------------------------------------------- ensemble
class ConstantAgent:
    def __init__(self, action, space):
        self.action, self.action_space = action, space
        self.observation_space = gym.spaces.Box(-1, 1, (3,))
        self.device = torch.device("cpu")

    def act(self, obs, deterministic=False):
        return self.action.expand(obs.shape[0], *self.action.shape).clone()


def test_ensemble_means_box_actions_and_votes_discrete_ones():
    box = gym.spaces.Box(-2, 2, (1,))
    ens = Ensemble([ConstantAgent(torch.tensor([v]), box) for v in (-2.0, 0.5, 1.0)])
    obs = torch.zeros(5, 3)
    torch.testing.assert_close(ens(obs), torch.full((5, 1), -0.5 / 3))
    result = podracer.evaluate(ens, PendulumVecEnv(4), seed=0)
    assert result["eval/length_mean"] == 200

    disc = gym.spaces.Discrete(2)
    vote = Ensemble([ConstantAgent(torch.tensor(v), disc) for v in (1, 0, 1)])
    assert vote.act(obs).tolist() == [1] * 5
    assert podracer.evaluate(vote, CartPoleVecEnv(4), seed=0)["eval/episodes"] == 4
    with pytest.raises(ValueError, match="disagree"):
        Ensemble([ConstantAgent(torch.tensor(1), disc), ConstantAgent(torch.tensor([1.0]), box)])
    with pytest.raises(ValueError, match="at least one"):
        Ensemble([])


def test_selection_draws_only_the_front_of_each_lineage():
    """A parent whose child on the board scored higher is superseded (PBT exploits each lineage's
    latest model): drawing it would redo a generation of training. A parent whose child did worse
    stays: it is still its lineage's best."""
    from podracer.tournament.leaderboard import Entry
    from podracer.tournament.selection import select_parent, superseded_removed

    def entry(i, score, parent=None):
        return Entry(id=i, parent_id=parent, generation=0 if parent is None else 1, pod=0, agent="ppo", hparams={},
                     changes={}, global_step=0, wall_time=0.0, score=score, score_std=None, checkpoint="", checksum="",
                     created_at=0.0, corrupt=False, ticket=None)

    # 1 -> 3 -> 5, each child better; 2 -> 4 worse. The two best scores (-80, -90) are 5 and its
    # parent 3: without the rule a top 2 would be {5, 3}.
    entries = [entry(1, -100.0), entry(2, -110.0), entry(3, -90.0, parent=1), entry(4, -300.0, parent=2),
               entry(5, -80.0, parent=3)]
    assert [e.id for e in superseded_removed(entries)] == [2, 4, 5]
    rng = random.Random(0)
    for method in ("softmax", "topk"):
        picks = {select_parent(entries, rng, method, top_k=2).id for _ in range(300)}
        assert picks == {5, 2}, method
    assert select_parent([entry(1, -100.0), entry(3, -90.0, parent=1)], rng).id == 3  # never an empty pool


def test_a_diverged_entry_is_no_parent_and_does_not_flatten_the_draw():
    """Found by review: a NaN-scored entry (stored as -inf) was weighted as the worst finite score
    minus 1, so it was drawn ~6-10% of the time, and on small score scales (returns as a fraction
    of cash) the "- 1" flattened the others' softmax to equal odds; a NaN given to select_parent
    directly broke the sort and dropped the true best from the pool."""
    from podracer.tournament.leaderboard import Entry
    from podracer.tournament.selection import select_parent

    def entry(i, score):
        return Entry(id=i, parent_id=None, generation=0, pod=0, agent="ppo", hparams={}, changes={}, global_step=0,
                     wall_time=0.0, score=score, score_std=None, checkpoint="", checksum="", created_at=0.0,
                     corrupt=False, ticket=None)

    small = [entry(1, 0.002), entry(2, 0.001)]
    rng = random.Random(0)
    alone = sum(select_parent(small, rng).id == 1 for _ in range(4000)) / 4000
    for bad in (-math.inf, math.inf, math.nan):
        rng = random.Random(0)
        picks = [select_parent([*small, entry(3, bad)], rng).id for _ in range(4000)]
        assert 3 not in picks, bad
        assert picks.count(1) / 4000 == pytest.approx(alone, abs=0.02) and alone > 0.8  # not flattened to 0.5
    nan_first = [entry(1, 1.0), entry(2, math.nan), entry(3, 5.0), entry(4, 4.0), entry(5, 3.0)]
    assert {select_parent(nan_first, rng, top_k=3).id for _ in range(500)} == {3, 4, 5}
    assert select_parent([entry(1, math.nan), entry(2, -math.inf)], rng).id in {1, 2}  # nothing better: still one


def test_whole_numbers_in_float_fields_mutate_as_floats():
    """Found by review: gae_lambda=1 (Python or YAML) stayed an int, which mutate treats as a count:
    rounded into (0.8, 0.99) it became 0, and ent_coef=0 never moved, even when redrawn."""
    from podracer.tournament.selection import mutate, mutation_scales

    config = PPOConfig(gae_lambda=1, ent_coef=0, learning_rate=1, update_epochs=3)
    assert (type(config.gae_lambda), type(config.ent_coef), type(config.update_epochs)) == (float, float, int)
    bounds = mutable_bounds(config)
    hparams = {name: getattr(config, name) for name in bounds}
    rng = random.Random(0)
    for _ in range(200):
        new, _ = mutate(hparams, bounds, rng, scales=mutation_scales(config), resample_prob=0.5)
        assert all(low <= new[k] <= high for k, (low, high) in bounds.items()), new
    assert 0.0 < mutate(hparams, {"ent_coef": bounds["ent_coef"]}, rng, resample_prob=1.0)[0]["ent_coef"] <= 0.01


def test_numeric_fields_are_read_alike_with_and_without_postponed_annotations():
    """Found by review: check_config read a field's kind from its annotation's text, which is
    "<class 'float'>" in a plugin agent's config written without ``from __future__ import
    annotations``: its whole numbers stayed ints and mutated as counts."""
    plain = dataclasses.make_dataclass("PluginConfig", [("lr", float, 1), ("clip", float | None, 0), ("steps", int, 3),
                                                        ("name", str, "x"), ("sizes", tuple[int, ...], (4,))])
    postponed = dataclasses.make_dataclass("PostponedConfig", [("lr", "float", 1), ("clip", "float | None", 0),
                                                               ("steps", "int", 3), ("name", "str", "x")])
    for cls in (plain, postponed):
        kinds = {f.name: declared_number(f) for f in dataclasses.fields(cls)}
        assert kinds == {"lr": ("float", False), "clip": ("float", True), "steps": ("int", False),
                         "name": (None, False), **({"sizes": (None, False)} if cls is plain else {})}
        config = cls()
        check_config(config)
        assert (type(config.lr), type(config.clip), type(config.steps)) == (float, float, int), cls


def test_mutation_moves_discounts_on_their_horizon_and_integers_by_at_least_one():
    """γ and λ sit just below 1: x1.25 would clip them to the upper bound, so they mutate on
    1 - x. Integers (epochs, minibatches) always move when perturbed: round(2 x 1.25) is 2."""
    from podracer.tournament.selection import mutate, mutation_scales

    config = PPOConfig()
    bounds, scales = mutable_bounds(config), mutation_scales(config)
    assert {"gamma", "gae_lambda"} <= set(bounds)
    assert scales == {"gamma": "one_minus", "gae_lambda": "one_minus"}
    rng = random.Random(0)
    one = {"gamma": (0.9, 0.999)}
    seen = {mutate({"gamma": 0.99}, one, rng, scales=scales, resample_prob=0.0)[0]["gamma"] for _ in range(50)}
    assert seen == {0.992, 0.9875}  # 1 - 0.01 x 0.8, 1 - 0.01 x 1.25 (stored to 6 digits)
    on_x = {mutate({"gamma": 0.99}, one, rng, resample_prob=0.0)[0]["gamma"] for _ in range(50)}
    assert on_x == {0.999, 0.9}  # what the plain log scale would do: jump to a bound
    redrawn = sorted(1 - mutate({"gamma": 0.99}, one, rng, scales=scales, resample_prob=1.0)[0]["gamma"]
                     for _ in range(400))
    assert 0.005 < redrawn[200] < 0.02  # log-uniform on 1 - γ in [0.001, 0.1]: median 0.01
    epochs = {"update_epochs": (1, 20)}
    up_down = {mutate({"update_epochs": 2}, epochs, rng, resample_prob=0.0)[0]["update_epochs"] for _ in range(50)}
    assert up_down == {1, 3}
    from_one = {mutate({"update_epochs": 1}, epochs, rng, resample_prob=0.0)[0]["update_epochs"] for _ in range(50)}
    assert from_one == {1, 2}
    odd = {"learning_rate": 0.000123456789, "ent_coef": 0.02}  # 9 digits, and above ent_coef's bound 0.01
    odd_bounds = {"learning_rate": (1e-5, 1e-2), "ent_coef": (0.0, 0.01)}
    assert mutate(odd, odd_bounds, rng, factors=(), resample_prob=0.0) == (odd, {})  # redraws only: untouched
    redrawn_only = [mutate(odd, odd_bounds, rng, factors=(), resample_prob=0.5)[1] for _ in range(40)]
    assert all(new != old for changes in redrawn_only for old, new in changes.values())
    assert {"learning_rate", "ent_coef"} == {name for changes in redrawn_only for name in changes}
    with pytest.raises(ValueError, match="one_minus scale needs bounds"):
        mutate({"gamma": 0.99}, {"gamma": (0.9, 1.0)}, rng, scales=scales)
    with pytest.raises(ValueError, match="unknown scale"):
        mutate({"gamma": 0.99}, one, rng, scales={"gamma": "sqrt"})

    @dataclasses.dataclass
    class LogFromZero:  # found by review: failed only when a redraw happened, with "math domain error"
        ent_coef: float = dataclasses.field(default=0.0, metadata={"mutable": (0.0, 0.01), "mutable_scale": "log"})

    with pytest.raises(ValueError, match="mutable_scale 'log' needs bounds above 0.*use 'linear'"):
        mutation_scales(LogFromZero())
