"""The leaderboard store: ranking and lineage, atomic checkpoints, checksums (a missing file is
not a corrupt one), tickets, and many processes writing at once. Also selection and PBT
mutation, which read the board."""

import ctypes
import multiprocessing as mp
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

import pytest
import torch

from podracer.agents.common import mutable_bounds
from podracer.agents.ppo import PPOConfig
from podracer.agents.registry import make_agent
from podracer.envs import PendulumVecEnv
from podracer import checkpoints
from podracer.tournament import (CheckpointError, CheckpointMissingError, DamagedBoardError, Leaderboard,
                                 ReadOnlyBoardError, TicketError, mutate, select_parent)
from podracer.tournament import schema


def small_agent(seed: int = 0):
    return make_agent("ppo", PendulumVecEnv(2), seed=seed, hidden_sizes=(8,), num_steps=4)


def test_submit_rank_lineage_and_frame(tmp_path):
    board = Leaderboard(tmp_path)
    root = board.submit(small_agent(), -900.0, hparams={"learning_rate": 3e-4}, global_step=100)
    child = board.submit(small_agent(1), -500.0, parent_id=root.id, generation=1, pod=2,
                         hparams={"learning_rate": 2.4e-4}, changes={"learning_rate": [3e-4, 2.4e-4]}, global_step=200)
    other = board.submit(small_agent(2), -700.0, global_step=100)
    grandchild = board.submit(small_agent(3), -600.0, parent_id=child.id, generation=2, global_step=300)

    assert len(board) == 4
    assert [e.id for e in board.top(3)] == [child.id, grandchild.id, other.id]
    assert [e.id for e in board.lineage(grandchild.id)] == [root.id, child.id, grandchild.id]
    assert board.lineage(child.id)[-1].changes == {"learning_rate": [3e-4, 2.4e-4]}

    frame = board.to_frame()
    assert list(frame.index) == [child.id, grandchild.id, other.id, root.id]  # ranked by score
    assert frame.loc[child.id, "hp/learning_rate"] == pytest.approx(2.4e-4)
    assert "learning_rate" in frame.loc[child.id, "changes"]
    assert frame.loc[grandchild.id, "global_step"] == 300  # along the lineage, as the agents count it
    with sqlite3.connect(board.path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"

    # The stored checkpoint gives back the same policy.
    obs = torch.randn(5, 3)
    restored = board.load_agent(child.id)
    torch.testing.assert_close(restored.act(obs, deterministic=True), small_agent(1).act(obs, deterministic=True))


def test_env_steps_the_old_name_of_global_step_still_works_and_old_stores_read(tmp_path):
    """``env_steps`` (the keyword and ``Entry``'s attribute) is renamed ``global_step``; the file
    keeps its column ``env_steps``, so a store written before the rename reads unchanged."""
    board = Leaderboard(tmp_path)
    with pytest.warns(FutureWarning, match="Leaderboard.submit.env_steps is renamed 'global_step'.*podracer 1.4"):
        entry = board.submit(small_agent(), -900.0, env_steps=128)
    assert entry.global_step == 128
    with pytest.warns(FutureWarning, match="Entry.env_steps is renamed 'global_step'"):
        assert entry.env_steps == 128
    with pytest.raises(TypeError, match="both env_steps= and global_step=: pass only global_step="):
        board.submit(small_agent(), -900.0, env_steps=1, global_step=1)
    with sqlite3.connect(board.path) as db:  # the file's column: what older versions read and write
        assert db.execute("SELECT env_steps FROM entries").fetchall() == [(128,)]
    with schema.read_file(board.path) as db:  # a snapshot, read-only: no migration could run on it
        assert [e.global_step for e in schema.entries(db)] == [128]
    assert list(board.to_frame()["global_step"]) == [128]


def test_crash_before_the_row_never_lists_a_half_written_checkpoint(tmp_path, monkeypatch):
    board = Leaderboard(tmp_path)
    board.submit(small_agent(), -100.0)

    def crash(*args, **kwargs):
        raise OSError("simulated crash during rename")

    monkeypatch.setattr(checkpoints.os, "replace", crash)
    with pytest.raises(OSError, match="simulated"):
        board.submit(small_agent(1), 0.0)
    monkeypatch.undo()
    assert len(board) == 1  # no row without a whole file
    assert len(list(board.checkpoint_dir.glob("*.pt"))) == 1  # only the temp file is left behind
    assert board.verify() == []


def test_corrupt_checkpoint_is_detected_flagged_and_skipped(tmp_path):
    board = Leaderboard(tmp_path)
    best = board.submit(small_agent(0), -10.0)
    second = board.submit(small_agent(1), -20.0)
    third = board.submit(small_agent(2), -30.0)
    path = board.store / best.checkpoint
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # truncated
    data = bytearray((board.store / second.checkpoint).read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte: loadable maybe, but not what was written
    (board.store / second.checkpoint).write_bytes(bytes(data))

    with pytest.warns(RuntimeWarning, match=f"entry {best.id} skipped"), pytest.raises(CheckpointError,
                                                                                         match="checksum"):
        board.load_agent(best.id)
    assert board.get(best.id).corrupt
    with pytest.warns(RuntimeWarning, match="corrupt"):
        assert board.verify() == [best.id, second.id]
    assert [e.id for e in board.top(5)] == [third.id]  # corrupt entries are not offered any more
    assert board.to_frame().loc[second.id, "corrupt"]
    # Without a checksum, a truncated file still fails to load instead of loading garbage.
    with pytest.raises(CheckpointError, match="cannot be loaded"):
        checkpoints.read(path)


def test_missing_checkpoint_is_skipped_but_not_flagged_and_usable_when_back(tmp_path):
    board = Leaderboard(tmp_path)
    entry = board.submit(small_agent(0), -10.0)
    other = board.submit(small_agent(1), -20.0)
    path = board.store / entry.checkpoint
    backup = path.rename(tmp_path / "backup.pt")  # gone for now: a slow network filesystem, a backup restore

    with pytest.warns(RuntimeWarning, match=f"entry {entry.id} skipped.*not flagged corrupt"), \
            pytest.raises(CheckpointMissingError):
        board.load_agent(entry.id)
    with pytest.warns(RuntimeWarning, match=f"entry {entry.id} is missing"):
        assert board.verify() == [entry.id]  # reported...
    assert not board.get(entry.id).corrupt  # ...but not flagged: still ranked and offered
    assert [e.id for e in board.top(5)] == [entry.id, other.id]

    backup.rename(path)  # the file is back: the entry is usable again
    obs = torch.randn(5, 3)
    torch.testing.assert_close(board.load_agent(entry.id).act(obs, deterministic=True),
                               small_agent(0).act(obs, deterministic=True))
    assert board.verify() == []


def test_tickets_bound_the_budget_and_are_consumed_once(tmp_path):
    board = Leaderboard(tmp_path)
    assert board.to_frame().empty and board.top(3) == []
    board.set_budget(2)
    pod = board.register_pod()
    t1, t2 = board.claim(pod), board.claim(pod)
    assert t1 is not None and t2 is not None and board.claim(pod) is None  # in-flight tickets count
    board.submit(small_agent(), -1.0, ticket=t1)
    with pytest.raises(TicketError, match=f"ticket {t1} is not claimed"):
        board.submit(small_agent(), -2.0, ticket=t1)  # a ticket yields at most one entry
    assert len(board) == 1 and len(list(board.checkpoint_dir.glob("*.pt"))) == 1
    assert board.release_tickets(pod) == 1  # t2 died with its pod
    board.request_stop(pod)
    assert board.claim(pod) is None  # a stopping pod gets no more work
    assert board.claim(board.register_pod()) is not None


def test_a_released_or_unknown_ticket_submits_nothing(tmp_path):
    # A driver killed with SIGKILL leaves its pods training; the driver that resumes the store
    # releases their tickets. A result that still arrives on one must not count: the budget holds.
    board = Leaderboard(tmp_path)
    board.set_budget(2)
    orphan = board.register_pod()
    ticket = board.claim(orphan)
    board.release_tickets()  # what a resuming driver does first
    board.retire_pods()
    resumed = board.register_pod()
    t1, t2 = board.claim(resumed), board.claim(resumed)
    assert board.claim(resumed) is None
    for stale in (ticket, 10_000):  # released, never claimed
        with pytest.raises(TicketError, match=f"ticket {stale} is not claimed"):
            board.submit(small_agent(), 0.0, pod=orphan, ticket=stale)
    assert len(board) == 0 and list(board.checkpoint_dir.iterdir()) == []  # no file left behind either
    board.submit(small_agent(1), -1.0, pod=resumed, ticket=t1)
    board.submit(small_agent(2), -2.0, pod=resumed, ticket=t2)
    assert len(board) == 2 and board.in_flight() == 0 and board.verify() == []


def _submit_many(store: str, worker: int, attempts: int) -> None:
    torch.set_num_threads(1)
    board = Leaderboard(store)
    pod = board.register_pod()
    for i in range(attempts):
        ticket = board.claim(pod)
        if ticket is not None:
            board.submit(small_agent(worker * 100 + i), float(worker * 100 + i), pod=pod,
                         hparams={"worker": worker, "i": i}, ticket=ticket)


@pytest.mark.slow
def test_concurrent_writers_keep_the_store_consistent(tmp_path):
    board = Leaderboard(tmp_path)
    board.set_budget(24)
    ctx = mp.get_context("spawn")
    workers = [ctx.Process(target=_submit_many, args=(str(tmp_path), w, 10)) for w in range(3)]
    for p in workers:
        p.start()
    for p in workers:
        p.join(timeout=240)
    assert [p.exitcode for p in workers] == [0, 0, 0]
    assert board.integrity_check() == "ok"
    entries = board.entries()
    assert len(entries) == 24  # 30 attempts, budget 24: the claims never overshoot
    assert len({(e.hparams["worker"], e.hparams["i"]) for e in entries}) == 24
    assert len({e.ticket for e in entries}) == 24 and board.in_flight() == 0
    assert len({e.checkpoint for e in entries}) == 24
    assert board.verify() == []


def test_mutation_stays_within_declared_bounds():
    bounds = mutable_bounds(PPOConfig())
    bounds_int = {**bounds, "num_steps": (8, 64)}
    rng = random.Random(0)
    hparams = {k: getattr(PPOConfig(), k) for k in bounds} | {"num_steps": 16}
    seen_changes = 0
    for _ in range(2000):
        hparams, changes = mutate(hparams, bounds_int, rng, resample_prob=0.2)
        seen_changes += bool(changes)
        for name, (low, high) in bounds_int.items():
            assert low <= hparams[name] <= high, (name, hparams[name])
        assert isinstance(hparams["num_steps"], int)
        for name, (old, new) in changes.items():
            assert old != new
    assert seen_changes > 1000
    with pytest.raises(ValueError, match="not mutable"):
        small_agent().set_hparams(vf_coef=0.25)


def test_selection_prefers_the_top_of_the_board(tmp_path):
    board = Leaderboard(tmp_path)
    for i, score in enumerate([-100.0, -200.0, -300.0, -1000.0, -1100.0, -1200.0]):
        board.submit(small_agent(i), score)
    entries = board.top(10)
    rng = random.Random(0)
    picks = [select_parent(entries, rng, "softmax", top_k=4, temperature=0.5).score for _ in range(2000)]
    assert set(picks) <= {-100.0, -200.0, -300.0, -1000.0}
    assert picks.count(-100.0) > picks.count(-300.0) > picks.count(-1000.0)
    picks = [select_parent(entries, rng, "topk", top_k=2).score for _ in range(400)]
    assert set(picks) == {-100.0, -200.0}
    with pytest.raises(ValueError, match="unknown selection"):
        select_parent(entries, rng, "roulette")


def test_a_store_from_before_host_columns_opens_and_gains_them(tmp_path):
    """A 0.x store's pods table has no host/node columns: opening it adds them, rows kept."""
    db = sqlite3.connect(tmp_path / "board.sqlite")
    db.execute("CREATE TABLE pods (id INTEGER PRIMARY KEY AUTOINCREMENT, pid INTEGER, status TEXT NOT NULL, "
               "started_at REAL NOT NULL, ended_at REAL, exitcode INTEGER, error TEXT)")
    db.execute("INSERT INTO pods (pid, status, started_at) VALUES (1, 'exited', 0)")
    db.commit()
    db.close()
    board = Leaderboard(tmp_path)
    board.set_pod(1, host="h", node="n")
    assert board.pods().loc[1, ["status", "host", "node"]].tolist() == ["exited", "h", "n"]
    with pytest.raises(ValueError, match="unknown pod column"):
        board.set_pod(1, **{"status = 'x' --": 1})


# ---------------------------------------------------------------------------- archived (read-only) stores
def _archived_store(path):
    """A finished store: two entries, the second one's checkpoint damaged."""
    board = Leaderboard(path)
    board.submit(small_agent(0), -10.0, hparams={"learning_rate": 3e-4})
    damaged = board.submit(small_agent(1), -20.0)
    (board.store / damaged.checkpoint).write_bytes(b"not a checkpoint")
    return board


def _assert_reads_and_refuses_writes(board):
    assert board.read_only and len(board) == 2 and board.integrity_check() == "ok"
    assert [e.score for e in board.top(2)] == [-10.0, -20.0]
    assert board.to_frame().loc[1, "hp/learning_rate"] == pytest.approx(3e-4)
    obs = torch.randn(4, 3)
    torch.testing.assert_close(board.load_agent(1).act(obs, deterministic=True),
                               small_agent(0).act(obs, deterministic=True))
    with pytest.warns(RuntimeWarning, match="entry 2 is corrupt.*not flagged corrupt: the board is read-only"):
        assert board.verify() == [2]
    assert not board.get(2).corrupt
    for write in (lambda: board.submit(small_agent(2), 0.0), lambda: board.claim(1), board.register_pod,
                  lambda: board.mark_corrupt(2), lambda: board.set_budget(3)):
        with pytest.raises(ReadOnlyBoardError, match="open read-only.*copy the store to a writable folder"):
            write()


def test_a_read_only_board_reads_everything_and_refuses_every_write(tmp_path):
    _archived_store(tmp_path)
    before = sorted(p.name for p in tmp_path.joinpath("checkpoints").iterdir())
    _assert_reads_and_refuses_writes(Leaderboard(tmp_path, read_only=True))
    assert sorted(p.name for p in tmp_path.joinpath("checkpoints").iterdir()) == before  # no file was written


def test_a_store_this_process_cannot_write_opens_read_only_by_itself(tmp_path, monkeypatch):
    """As root, chmod does not stop writes, so "cannot write" is os.access's answer, patched here;
    the folder is then also treated as one where no -shm can be created: SQLite's immutable=1."""
    _archived_store(tmp_path)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if mode & os.W_OK else real_access(p, mode, **kw))
    board = Leaderboard(tmp_path)
    assert board._uri.endswith("?immutable=1")
    _assert_reads_and_refuses_writes(board)
    with pytest.raises(FileNotFoundError, match="no board.sqlite in .*a read-only board must exist"):
        Leaderboard(tmp_path / "elsewhere", read_only=True)


def test_a_killed_writers_log_in_a_read_only_folder_is_read_from_a_copy(tmp_path, monkeypatch):
    """A writer killed before SQLite merged its -wal into the file leaves committed rows only in
    the -wal; a read-only folder cannot host the -shm needed to read it, so the board reads a copy."""
    board = Leaderboard(tmp_path / "live")
    board.submit(small_agent(0), -10.0)
    writer = sqlite3.connect(board.path)  # held open: the -wal is not merged into the file on close
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("UPDATE entries SET score = -1.0")
    writer.commit()
    archive = tmp_path / "archive"
    archive.mkdir()
    for name in ("board.sqlite", "board.sqlite-wal"):  # what a crash leaves; no -shm
        shutil.copy(board.store / name, archive / name)
    writer.close()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if mode & os.W_OK else real_access(p, mode, **kw))
    with pytest.warns(RuntimeWarning, match="never merged into the file.*private copy"):
        copy = Leaderboard(archive)
    assert [e.score for e in copy.entries()] == [-1.0]  # the committed update in the -wal is there


def _without_dac_override() -> None:
    """In a child of root, before exec: drop CAP_DAC_OVERRIDE from its bounding set, so the program it
    execs runs as root without it and file permissions bind it (Linux ``prctl(PR_CAPBSET_DROP)``)."""
    pr_capbset_drop, cap_dac_override = 24, 1  # from <linux/prctl.h> and <linux/capability.h>
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(pr_capbset_drop, cap_dac_override, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP, CAP_DAC_OVERRIDE) failed")


@pytest.mark.slow  # a fresh interpreter imports torch: ~4 s
def test_a_real_read_only_folder_opens_for_a_user_who_cannot_write_it(tmp_path):
    """The issue's case with real permissions: a store chmod'ed read-only, opened by a user who
    cannot write it. As root (who writes anyway) the reader runs without CAP_DAC_OVERRIDE, the
    capability that lets root ignore permissions, so chmod binds it as any user (no setpriv needed,
    and it can still read an interpreter installed under root's own 0700 home)."""
    store = Path(tempfile.mkdtemp(prefix="podracer-ro-"))  # /tmp/pytest-of-root is 0700: nobody could not enter
    try:
        _archived_store(store)
        for path in [store, store / "checkpoints", *store.rglob("*")]:
            path.chmod(0o555 if path.is_dir() else 0o444)
        code = ("import sys; from podracer.tournament import Leaderboard, ReadOnlyBoardError\n"
                "board = Leaderboard(sys.argv[1])\n"
                "try:\n    board.set_budget(1)\nexcept ReadOnlyBoardError:\n    pass\n"
                "print(board.read_only, board._uri.rsplit('?', 1)[1], [e.score for e in board.top(2)])")
        command = [sys.executable, "-c", code, str(store)]
        if os.geteuid() == 0 and not sys.platform.startswith("linux"):
            pytest.skip("root on a system without Linux capabilities: root writes a read-only folder there")
        result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=str(store),
                                preexec_fn=_without_dac_override if os.geteuid() == 0 else None)
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stdout.split("\n")[-2] == "True immutable=1 [-10.0, -20.0]"
        assert sorted(p.name for p in store.iterdir()) == ["board.sqlite", "checkpoints"]  # nothing written
    finally:
        for path in [store, *store.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        shutil.rmtree(store)


def test_a_store_path_that_is_a_file_says_so(tmp_path):
    board = Leaderboard(tmp_path / "store")
    with pytest.raises(NotADirectoryError, match=r"is a file, not a store directory: pass its folder"):
        Leaderboard(board.path)
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(NotADirectoryError, match="notes.txt' is a file.*folder that holds board.sqlite"):
        Leaderboard(tmp_path / "notes.txt")


def _damage(path: Path, offset: int, size: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset:offset + size] = bytes((i * 37 + 11) % 256 for i in range(size))  # not zeros: a page of noise
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("where", ["header", "pages"])
def test_an_edited_board_file_says_what_it_is_and_how_to_recover(tmp_path, where):
    """A board.sqlite someone edited, truncated or overwrote: a named error (a ValueError and the
    sqlite3.DatabaseError it was) naming the file and the ways back, not sqlite's bare message."""
    board = Leaderboard(tmp_path)
    for seed in range(3):
        board.submit(small_agent(seed), -900.0 + seed, global_step=100, hparams={"note": "x" * 3000})
    board.backup(tmp_path / "copy.sqlite")
    db = sqlite3.connect(board.path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # everything in the file itself
    db.close()
    if where == "header":
        _damage(board.path, 0, 100)  # the magic string and the page size
    else:
        _damage(board.path, 4096, 3 * 4096)  # the pages after the first: the tables' rows
    with pytest.raises(DamagedBoardError, match=r"board\.sqlite is not a readable leaderboard .*Leaderboard\.backup"
                                                r".*Tournament\.from_store.*move it aside") as info:
        Leaderboard(tmp_path).to_frame()
    assert isinstance(info.value, ValueError) and isinstance(info.value, sqlite3.DatabaseError)
    shutil.copy(tmp_path / "copy.sqlite", board.path)  # the way back it names
    assert len(Leaderboard(tmp_path)) == 3


# ---------------------------------------------------------------------------- export, backup
@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_export_writes_the_ranked_table(tmp_path, suffix):
    board = Leaderboard(tmp_path / "store")
    root = board.submit(small_agent(0), -30.0, hparams={"learning_rate": 3e-4})
    board.submit(small_agent(1), -10.0, parent_id=root.id, generation=1, hparams={"learning_rate": 2.4e-4},
                 changes={"learning_rate": [3e-4, 2.4e-4]})
    path = board.export(tmp_path / "out" / f"board{suffix}")
    frame = pd.read_csv(path, index_col="id") if suffix == ".csv" else pd.read_parquet(path)
    expected = board.to_frame()
    assert list(frame.index) == [2, 1] and list(frame.columns) == list(expected.columns)
    assert frame["hp/learning_rate"].tolist() == pytest.approx([2.4e-4, 3e-4])
    assert frame.loc[2, "changes"] == "learning_rate: 0.0003->0.00024"
    with pytest.raises(ValueError, match=r"cannot tell the format of .*board.xlsx: name it \*.csv or \*.parquet"):
        board.export(tmp_path / "board.xlsx")


def test_backup_is_one_consistent_file_that_opens_as_a_board(tmp_path):
    board = Leaderboard(tmp_path / "store")
    board.submit(small_agent(0), -10.0)
    reader = sqlite3.connect(board.path)  # a reader holding the WAL open does not stop the backup
    reader.execute("SELECT COUNT(*) FROM entries").fetchone()
    copy = board.backup(tmp_path / "copy" / "board.sqlite")
    reader.close()
    assert sorted(p.name for p in copy.parent.iterdir()) == ["board.sqlite"]  # no -wal, no temporary file
    assert [e.checksum for e in Leaderboard(copy.parent, read_only=True).entries()] == \
        [e.checksum for e in board.entries()]
