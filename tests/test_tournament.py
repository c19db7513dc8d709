"""Tournaments of pods: learning across generations, a pod killed mid-generation, Ctrl-C then
resume, elastic pods, config round trip, and the ensemble policy.

Pods are real processes (spawn), so each tournament here costs a few seconds of start-up; the
settings are as small as still shows the behaviour. Scheduling between processes is not
deterministic (which pod draws which ticket), so learning thresholds keep a wide margin.
"""

import functools
import math
import os
import random
import signal
import sqlite3
import threading
import time

import gymnasium as gym
import pytest
import torch
import yaml

import podracer
from podracer.agents.common import mutable_bounds
from podracer.agents.ppo import PPO, PRESETS, PPOConfig
from podracer.envs import CartPoleVecEnv, PendulumVecEnv
from podracer.tournament import Ensemble, Leaderboard, Pod, PodSpec, Tournament, TournamentConfig

PENDULUM_PPO = dict(PRESETS["pendulum"].config)
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


def test_tournament_raises_best_score_across_generations(pendulum_run):
    frame = pendulum_run.board.to_frame()
    assert len(frame) == 9
    best_by_generation = frame.groupby("generation")["score"].max()
    assert best_by_generation.index.max() >= 2
    # Fresh agents after 5k steps score -900 to -1200; two generations later about -220 to -450.
    assert best_by_generation.iloc[-1] > best_by_generation.iloc[0] + 300, best_by_generation
    assert frame["score"].idxmax() in frame.index[frame["generation"] > 0]
    assert_consistent(pendulum_run.board)


def test_lineage_records_parent_and_hyperparameter_changes(pendulum_run):
    board = pendulum_run.board
    bounds = mutable_bounds(PPOConfig())
    for entry in board.entries():
        assert set(entry.hparams) == set(bounds)
        assert all(bounds[k][0] <= v <= bounds[k][1] for k, v in entry.hparams.items())
        if entry.parent_id is None:
            assert entry.generation == 0 and entry.changes == {}
            continue
        parent = board.get(entry.parent_id)
        assert entry.generation == parent.generation + 1
        assert entry.env_steps >= parent.env_steps + 5_000
        for name, (old, new) in entry.changes.items():
            assert parent.hparams[name] == pytest.approx(old) and entry.hparams[name] == pytest.approx(new)
    best = board.top(1)[0]
    chain = board.lineage(best.id)
    assert chain[0].parent_id is None and chain[-1].id == best.id and len(chain) == best.generation + 1


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


def test_a_finished_run_resumes_as_a_no_op(pendulum_run):
    before = [(e.id, e.checksum) for e in pendulum_run.board.entries()]
    again = Tournament.from_store(pendulum_run.store)
    assert again.config == pendulum_run.config
    again.run(progress=None)  # the board already holds its budget: no pod starts
    assert [(e.id, e.checksum) for e in again.board.entries()] == before
    assert len(again.board.pods()) == len(pendulum_run.board.pods())


# ---------------------------------------------------------------------------- faults and elasticity
def test_pod_killed_mid_generation_leaves_the_board_intact(tmp_path):
    t = small_tournament(tmp_path, generations=3)
    killed = []

    def kill_one():
        wait_for(lambda: len(t.board) >= 1 and pod_in_generation(t.board) is not None, what="a pod mid-generation")
        pod, pid = pod_in_generation(t.board)
        os.kill(pid, signal.SIGKILL)
        killed.append(pod)

    killer = threading.Thread(target=kill_one, daemon=True)
    killer.start()
    with pytest.warns(RuntimeWarning, match="died"):
        t.run(progress=None)
    killer.join()
    pods = t.board.pods()
    assert pods.loc[killed[0], "exitcode"] == -signal.SIGKILL and pods.loc[killed[0], "status"] == "failed"
    assert len(pods) >= 3  # the dead pod was replaced
    assert len(t.board) == 6  # the run completed its budget all the same
    assert_consistent(t.board)


def test_interrupt_then_resume_loses_and_duplicates_nothing(tmp_path):
    t = small_tournament(tmp_path, generations=3)

    def interrupt():
        wait_for(lambda: len(t.board) >= 2, what="two entries")
        os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C in a terminal or notebook does

    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        t.run(progress=None)
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


def test_pods_can_be_added_and_removed_while_running(tmp_path):
    t = small_tournament(tmp_path, generations=30, pods=1)
    t.start()
    try:
        running = lambda: int((t.board.pods()["status"] == "running").sum())  # noqa: E731
        wait_for(lambda: len(t.board) >= 1, what="a first entry")
        t.add_pods(2)
        wait_for(lambda: running() == 3, what="three pods")
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
    assert_consistent(t.board)


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

    worse = board.submit(podracer.make_agent("ppo", env, seed=2, **TINY_PPO), -50.0, agent_name="ppo")
    path = board.store / worse.checkpoint
    path.write_bytes(path.read_bytes()[:100])  # truncated, as by a full disk
    with pytest.warns(RuntimeWarning, match=f"entry {worse.id} skipped"):
        best = t.best()
    obs = env.reset(seed=0)[0]
    torch.testing.assert_close(best.act(obs, deterministic=True), good_agent.act(obs, deterministic=True))


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
    with pytest.raises(NotImplementedError, match="Ray backend"):
        Tournament(make_env, make_eval_env, store=tmp_path, backend="ray")


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

    t = small_tournament(tmp_path / "run")
    saved = TournamentConfig.from_yaml(tmp_path / "run" / "tournament.yaml")
    assert saved == t.config and saved.make_env["function"] == "podracer.envs:make_env"
    small_tournament(tmp_path / "run", generations=8, pods=3)  # a bigger budget is a resume
    with pytest.raises(ValueError, match="generation_steps"):
        Tournament(make_small_env, make_small_eval_env, generation_steps=999, store=tmp_path / "run",
                   agent_config=TINY_PPO, seed=1)


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
