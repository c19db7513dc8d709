"""Storage that outlives the head node (podracer/tournament/storage.py): the store mirrored to a
``pyarrow.fs`` URI, restored from it into a new local store, and a tournament resumed from it.

Fast tests use a local ``file://`` URI and fsspec's in-memory filesystem (the
``PyFileSystem(FSSpecHandler(...))`` path). The slow ones run tournaments: on the local backend
with a ``file://`` URI, and on Ray with an S3-compatible server in this process (moto's
``ThreadedMotoServer`` on 127.0.0.1 and a free port), where the driver is SIGKILLed and its
store deleted (the head node and its disk are gone) before a new driver resumes from the bucket
alone and finishes exactly the budget.
"""

import contextlib
import functools
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pandas as pd
import pytest
import torch

import podracer
from podracer.agents.registry import make_agent
from podracer.envs import PendulumVecEnv
from podracer.checkpoints import CheckpointMissingError
from podracer.tournament import Leaderboard, TicketError, Tournament
from podracer.tournament import storage as storage_mod
from podracer.tournament.storage import Storage, StorageSync, restore

TINY_PPO = {**podracer.get_preset("ppo", "pendulum").config, "hidden_sizes": (16,), "update_epochs": 2}
make_small_env = functools.partial(podracer.make_env, "pendulum", num_envs=16)
make_small_eval_env = functools.partial(podracer.make_env, "pendulum", num_envs=4)


def small_agent(seed: int = 0):
    return make_agent("ppo", PendulumVecEnv(2), seed=seed, hidden_sizes=(8,), num_steps=4, verbose=False)


def wait_for(condition, timeout=120.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.1)


def remote_board(storage: Storage, tmp: Path) -> Leaderboard:
    """The snapshot in ``storage``, downloaded and opened read-only."""
    storage.download(storage_mod.SNAPSHOT, tmp / storage_mod.SNAPSHOT)
    return Leaderboard(tmp, read_only=True)


def assert_mirrored(storage: Storage, board: Leaderboard, tmp: Path) -> None:
    """The snapshot in storage lists what ``board`` lists, and every checkpoint it names is there."""
    remote = remote_board(storage, tmp)
    assert [(e.id, e.checksum) for e in remote.entries()] == [(e.id, e.checksum) for e in board.entries()]
    names = storage.listdir(storage_mod.CHECKPOINTS)
    assert {Path(e.checkpoint).name for e in remote.entries()} <= names


def assert_consistent(board: Leaderboard, budget: int) -> None:
    """Exactly ``budget`` whole entries, one per ticket, none in flight, every parent on the board
    (tests/test_ray_backend.py's definition of a run that ended at its exact budget)."""
    assert board.integrity_check() == "ok" and board.in_flight() == 0 and board.verify() == []
    entries = board.entries()
    assert len(entries) == budget and len({e.ticket for e in entries}) == budget
    ids = {e.id for e in entries}
    assert all(e.parent_id is None or e.parent_id in ids for e in entries)


# ---------------------------------------------------------------------------- fast: push, restore
@pytest.mark.parametrize("kind", ["file", "fsspec-memory"])
def test_push_then_restore_gives_back_the_board_and_its_checkpoints(tmp_path, kind):
    uri = (tmp_path / "remote").as_uri() if kind == "file" else f"memory://podracer-test/{tmp_path.name}"
    board = Leaderboard(tmp_path / "store")
    first = board.submit(small_agent(0), -10.0, hparams={"learning_rate": 3e-4})
    storage = Storage(uri)
    assert storage.push(board)["checkpoints"] == 1
    board.submit(small_agent(1), -5.0, parent_id=first.id, generation=1)
    assert storage.push(board)["checkpoints"] == 1  # a checkpoint goes up once; the snapshot each time
    assert storage.push(board)["checkpoints"] == 0
    assert_mirrored(storage, board, tmp_path / "peek")

    local = restore(uri, tmp_path / "new-head")
    restored = Leaderboard(local)
    assert [e.id for e in restored.top(2)] == [2, 1] and restored.integrity_check() == "ok"
    assert restored.verify() == []  # every checkpoint came down whole
    obs = torch.randn(3, 3)
    torch.testing.assert_close(restored.load_agent(2).act(obs, deterministic=True),
                               small_agent(1).act(obs, deterministic=True))


def test_the_snapshot_is_taken_before_the_checkpoints_are_listed(tmp_path, monkeypatch):
    """A row committed while a sync runs is either in the snapshot with its file uploaded, or in
    neither: the snapshot never names a checkpoint missing from storage."""
    board = Leaderboard(tmp_path / "store")
    board.submit(small_agent(0), -10.0)
    backup = Leaderboard.backup

    def backup_then_submit(self, dest):
        out = backup(self, dest)
        board.submit(small_agent(1), -5.0)  # lands after the snapshot, before the listing
        return out

    monkeypatch.setattr(Leaderboard, "backup", backup_then_submit)
    storage = Storage((tmp_path / "remote").as_uri())
    assert storage.push(board)["checkpoints"] == 2  # the late file goes up too: harmless, never missing
    remote = remote_board(storage, tmp_path / "peek")
    assert len(remote) == 1 and len(board) == 2


def test_restore_keeps_a_newer_local_copy_and_refuses_an_unrelated_board(tmp_path):
    uri = (tmp_path / "remote").as_uri()
    board = Leaderboard(tmp_path / "store")
    board.submit(small_agent(0), -10.0)
    with StorageSync(board, Storage(uri), every_s=3600):
        pass
    board.submit(small_agent(1), -5.0)  # the local store is now ahead of storage
    assert len(Leaderboard(restore(uri, tmp_path / "store"))) == 2  # kept, not rolled back

    other = Leaderboard(tmp_path / "other")
    other.submit(small_agent(2), 0.0)
    with pytest.raises(ValueError, match="holds another board.*empty folder"):
        restore(uri, tmp_path / "other")
    with pytest.raises(FileNotFoundError, match="nothing was synced there"):
        restore((tmp_path / "nowhere").as_uri(), tmp_path / "x")


def test_bad_storage_settings_fail_when_the_tournament_is_made(tmp_path):
    with pytest.raises(ValueError, match="neither pyarrow .* nor fsspec .* knows the scheme 'nosuchfs'"):
        Tournament(make_small_env, make_small_eval_env, pods=1, generations=1, store=tmp_path / "a",
                   storage_path="nosuchfs://bucket/run")
    with pytest.raises(ValueError, match="storage_sync_s must be > 0"):
        Tournament(make_small_env, make_small_eval_env, pods=1, generations=1, store=tmp_path / "b",
                   storage_path=str(tmp_path / "remote"), storage_sync_s=0)


def test_a_failing_sync_warns_and_is_tried_again(tmp_path, monkeypatch):
    board = Leaderboard(tmp_path / "store")
    storage = Storage((tmp_path / "remote").as_uri())
    sync = StorageSync(board, storage, every_s=0.05)
    calls = []

    def flaky(b):
        calls.append(time.monotonic())
        if len(calls) in (2, 3):
            raise OSError("storage unreachable")
        return {"checkpoints": 0, "bytes": 0}

    monkeypatch.setattr(storage, "push", flaky)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with sync:
            wait_for(lambda: len(calls) >= 5, timeout=10, what="syncs after the failures")
    assert sum("storage unreachable" in str(w.message) for w in caught) == 2
    assert board.meta("storage_path") == storage.uri  # restore() tells whose copy a store is by it


def test_a_big_checkpoint_goes_from_the_pod_to_storage_and_the_head_records_its_row(tmp_path, monkeypatch):
    """The Ray backend's pod client and head server, called directly (no Ray): from
    storage_direct_bytes on, the pod writes the checkpoint to storage and the head only records
    its row; smaller ones go through the head as before. Parents are read from storage."""
    ray_backend = pytest.importorskip("podracer.tournament.ray_backend")
    monkeypatch.setattr(ray_backend.RemoteLeaderboard, "_call",
                        lambda self, method, *args, **kwargs: getattr(self.server, method)(*args, **kwargs))
    uri = (tmp_path / "remote").as_uri()
    board = Leaderboard(tmp_path / "store")
    small, big = small_agent(0), make_agent("ppo", PendulumVecEnv(2), seed=1, hidden_sizes=(64, 64), verbose=False)
    with StorageSync(board, Storage(uri), every_s=3600, direct_bytes=30_000):  # between the two checkpoints
        pod = ray_backend.RemoteLeaderboard(ray_backend.LeaderboardServer(str(board.store)))
        board.set_budget(3)
        pod_id = board.register_pod()
        through_head = pod.submit(small, -20.0, pod=pod_id, ticket=board.claim(pod_id), agent_name="ppo")
        direct = pod.submit(big, -10.0, pod=pod_id, ticket=board.claim(pod_id), agent_name="ppo")
        assert (board.store / through_head.checkpoint).exists()
        assert not (board.store / direct.checkpoint).exists()  # never on the head's disk
        assert Storage(uri).exists(direct.checkpoint) and direct.agent == "ppo"
        obs = torch.randn(3, 3)
        for reader in (board, pod):  # the head's board and the pod both read it from storage
            torch.testing.assert_close(reader.load_agent(direct.id).act(obs, deterministic=True),
                                       big.act(obs, deterministic=True))
        ticket = board.claim(pod_id)
        board.release_tickets()  # a new driver took over: the pod's result must not land
        with pytest.raises(TicketError):
            pod.submit(big, 0.0, pod=pod_id, ticket=ticket, agent_name="ppo")
        assert Storage(uri).listdir("checkpoints") == {Path(direct.checkpoint).name}  # refused: deleted again
        with pytest.raises(CheckpointMissingError, match="holds None bytes"):
            board.record("checkpoints/nothing.pt", "0" * 64, 10, 0.0, agent_name="ppo")
    assert len(board) == 2 and board.verify() == []
    assert Leaderboard(restore(uri, tmp_path / "new-head")).verify() == []  # both come down on a new head
    with pytest.raises(ValueError, match="needs a board mirrored to storage"):
        Leaderboard(tmp_path / "plain").record(direct.checkpoint, direct.checksum, 10, 0.0, agent_name="ppo")


def test_the_cli_passes_the_storage_path_and_exports_the_final_board(tmp_path, monkeypatch, capsys):
    from podracer.cli import main

    board = Leaderboard(tmp_path / "store")
    board.submit(small_agent(0), -10.0)
    made = {}

    class FakeTournament:  # the CLI's part only: the run itself is tested above
        def __init__(self, *args, **kwargs):
            made.update(kwargs)

        def run(self, progress):
            return board

    monkeypatch.setattr(podracer, "Tournament", FakeTournament)
    uri = (tmp_path / "remote").as_uri()
    out = tmp_path / "final.parquet"
    main(["tournament", "ppo", "pendulum", "--store", str(board.store), "--storage-path", uri, "--export", str(out)])
    assert made["storage_path"] == uri and f"board exported to {out}" in capsys.readouterr().out
    assert list(pd.read_parquet(out).index) == [1]
    with pytest.raises(SystemExit, match="--export board.xlsx: name the file"):
        main(["tournament", "ppo", "pendulum", "--export", "board.xlsx"])


def test_the_config_default_direct_size_is_the_storage_modules():
    from podracer.tournament import TournamentConfig

    assert TournamentConfig().storage_direct_bytes == storage_mod.DIRECT_BYTES


# ---------------------------------------------------------------------------- slow: tournaments
@pytest.mark.slow
def test_a_tournament_resumes_on_a_new_head_from_a_local_uri(tmp_path):
    """A store synced to a file:// URI (one entry, as a first run leaves it) loses its head;
    from_store(uri) resumes into a new local store, finishes the budget and syncs there."""
    uri = (tmp_path / "shared-mount" / "run").as_uri()
    first = Tournament(make_small_env, make_small_eval_env, agent="ppo", pods=1, generation_steps=2048,
                       generations=1, store=tmp_path / "head1", agent_config=TINY_PPO, threads_per_pod=1, seed=1,
                       storage_path=uri, storage_sync_s=0.2)
    first.board.submit(make_agent("ppo", make_small_env(), seed=1, verbose=False, **TINY_PPO), -1000.0, ticket=None)
    with StorageSync(first.board, first.storage, first.config.storage_sync_s):  # what run() wraps its loop in
        pass
    (tmp_path / "head1" / "board.sqlite").unlink()  # the head and its disk are gone

    resumed = Tournament.from_store(uri, local_store=tmp_path / "head2", generations=2)
    assert resumed.config.storage_path == uri and len(resumed.board) == 1
    board = resumed.run(progress=None)
    assert len(board) == 2 and board.integrity_check() == "ok" and board.verify() == []
    assert board.entries()[1].parent_id in (None, 1)  # the second may start from the restored entry
    assert_mirrored(Storage(uri), board, tmp_path / "peek")  # the final sync went to the same URI


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def s3_server(monkeypatch):
    """An S3-compatible server (moto) in this process on 127.0.0.1; yields the URI of an empty
    bucket's folder. Credentials are the fake ones moto accepts, in the environment."""
    moto_server = pytest.importorskip("moto.server")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(key, value)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=_free_port(), verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        query = f"endpoint_override={host}:{port}&scheme=http&region=us-east-1"
        Storage(f"s3://podracer?{query}&allow_bucket_creation=true").fs.create_dir("podracer")  # the bucket
        yield f"s3://podracer/run?{query}"
    finally:
        server.stop()


S3_DRIVER = """
import functools
import sys

import ray

import podracer
from podracer.tournament import Tournament

if __name__ == "__main__":
    store, uri, address = sys.argv[1:4]
    ray.init(address=address, logging_level="WARNING")
    Tournament(functools.partial(podracer.make_env, "pendulum", num_envs=16),
               functools.partial(podracer.make_env, "pendulum", num_envs=4), agent="ppo", pods=2,
               generation_steps=2048, generations=2, store=store, agent_config={config!r}, threads_per_pod=1, seed=1,
               backend="ray", storage_path=uri, storage_sync_s=0.3).run(progress=None)
"""


@pytest.mark.slow
def test_head_killed_with_storage_on_s3_resumes_on_a_new_driver_to_the_exact_budget(tmp_path, s3_server):
    """The issue's scenario: a Ray driver with storage on an S3-compatible server is SIGKILLed and
    its local store deleted; a new driver resumes from the bucket and ends at exactly 4 entries."""
    ray = pytest.importorskip("ray")
    from podracer.tournament.ray_backend import start_local_ray

    assert not ray.is_initialized()
    start_local_ray(num_cpus=2)  # tried again if it times out starting on a busy machine
    try:
        storage = Storage(s3_server)
        script = tmp_path / "driver.py"
        script.write_text(S3_DRIVER.format(config=TINY_PPO))
        store, log_path = tmp_path / "head1", tmp_path / "driver.log"
        with open(log_path, "w") as log:
            driver = subprocess.Popen([sys.executable, str(script), str(store), s3_server,
                                       ray.get_runtime_context().gcs_address], stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True)
        try:
            def synced_entries() -> int:
                if driver.poll() is not None:
                    pytest.fail(f"the driver exited:\n{log_path.read_text()[-5000:]}")
                if not storage.exists(storage_mod.SNAPSHOT):
                    return 0
                return len(remote_board(storage, tmp_path / f"peek-{time.monotonic_ns()}"))

            wait_for(lambda: synced_entries() >= 1, timeout=240, what="a synced snapshot with an entry")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(driver.pid, signal.SIGKILL)  # the head kill: the driver and anything it started
            driver.wait(timeout=30)
        synced = remote_board(storage, tmp_path / "peek-at-kill").entries()
        assert 1 <= len(synced) < 4, "killed too late to resume anything"
        store.rename(tmp_path / "head1-lost")  # the head's disk is gone with it

        resumed = Tournament.from_store(s3_server, local_store=tmp_path / "head2")
        assert resumed.config.backend == "ray" and len(resumed.board) >= len(synced)
        board = resumed.run(progress=None)
    finally:
        ray.shutdown()
    assert_consistent(board, 4)  # exactly the budget: the generations lost with the head trained again
    assert [e.checksum for e in board.entries()][:len(synced)] == [e.checksum for e in synced]
    assert_mirrored(storage, board, tmp_path / "peek-final")
