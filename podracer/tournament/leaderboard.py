"""The leaderboard: one SQLite file plus a folder of checkpoints, shared by every pod.

Layout of a store directory::

    store/
      board.sqlite         entries, tickets, pods (WAL mode: readers never block the writer)
      checkpoints/*.pt     one file per entry, written atomically before its row exists
      tournament.yaml      the TournamentConfig that produced it (written by Tournament)

Why SQLite: it is a transactional store in one file that many processes may write at once
(``BEGIN IMMEDIATE`` takes the write lock up front, the busy timeout queues the others), and a
process killed mid-transaction leaves nothing behind. A row is only inserted after its
checkpoint was fsynced and renamed into place, so a listed entry always has a whole file; an
orphan file without a row (a pod killed in between) is harmless.

Besides ``entries`` the file holds the tournament's bookkeeping, kept here because it must
change in the same transactions: ``tickets`` (a pod claims one before each generation, and its
submission consumes it, so the budget is never overshot and a ticket yields at most one entry;
a submission whose ticket was released meanwhile, by a driver that took over the store, is
refused) and ``pods`` (status, so a pod can be asked to stop after its current generation, and
the error that ended it).

A checkpoint that fails its checksum or does not load is flagged ``corrupt`` and never offered
again. A missing one is not: it is skipped while it is missing (a restored backup or a slow
network filesystem can bring it back) and is usable again once it is there.

A finished store can be archived on read-only storage (a read-only mount, a copy without write
permission): ``Leaderboard(store)`` notices that it cannot write there and opens the board
read-only (SQLite's ``mode=ro``, or ``immutable=1`` when not even the ``-shm`` file can be created),
and every write raises ``ReadOnlyBoardError``. ``backup`` writes a consistent copy of the board
while pods keep writing (SQLite's online backup), which ``storage.py`` ships to a storage URI;
``export`` writes the ranked table as CSV or Parquet.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import shutil
import sqlite3
import tempfile
import time
import uuid
import warnings
import weakref
from pathlib import Path
from typing import Any, Iterator

import pandas as pd

from podracer import checkpoints
from podracer.checkpoints import CheckpointError, CheckpointMissingError
from podracer.tournament.storage import (DIRECT_BYTES, DIRECT_KEY, STORAGE_KEY, DirectCheckpoints, Storage,
                                         checkpoint_name)
from podracer.tournament.storage import cached as storage_cache

SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    parent_id  INTEGER REFERENCES entries(id),
    generation INTEGER NOT NULL,            -- lineage depth: 0 for a fresh agent, parent's + 1
    pod        INTEGER NOT NULL,
    agent      TEXT    NOT NULL,            -- registry name or "module:Class"
    hparams    TEXT    NOT NULL,            -- JSON {name: value} of the mutable hyperparameters
    changes    TEXT    NOT NULL,            -- JSON {name: [parent value, new value]}
    env_steps  INTEGER NOT NULL,            -- env steps trained along the whole lineage
    wall_time  REAL    NOT NULL,            -- seconds this generation took (train + evaluate)
    score      REAL    NOT NULL,            -- validation return (deterministic policy)
    score_std  REAL,
    checkpoint TEXT    NOT NULL,            -- path relative to the store
    checksum   TEXT    NOT NULL,            -- sha256 of the checkpoint file
    created_at REAL    NOT NULL,            -- unix time of submission
    corrupt    INTEGER NOT NULL DEFAULT 0,  -- set when its checkpoint failed verification
    ticket     INTEGER UNIQUE               -- the ticket it consumed: one entry per ticket at most
);
CREATE INDEX IF NOT EXISTS entries_score ON entries(corrupt, score DESC);
CREATE TABLE IF NOT EXISTS tickets (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused, so it also seeds the generation
    pod        INTEGER NOT NULL,
    claimed_at REAL    NOT NULL
);
CREATE TABLE IF NOT EXISTS pods (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    pid        INTEGER,
    status     TEXT    NOT NULL,            -- running | stopping | exited | failed | killed | lost | cancelled
    started_at REAL    NOT NULL,
    ended_at   REAL,
    exitcode   INTEGER,
    error      TEXT,
    host       TEXT,                        -- the machine's hostname
    node       TEXT                         -- Ray node id under the ray backend, else the hostname
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


POD_COLUMNS = ("pid", "status", "started_at", "ended_at", "exitcode", "error", "host", "node")
POD_COLUMNS_ADDED = ("host", "node")  # since 1.0: added to older stores when opened
EXPORT_SUFFIXES = (".csv", ".parquet", ".pq")  # what Leaderboard.export writes, by the path's suffix


class ReadOnlyBoardError(PermissionError):
    """A write to a board opened read-only (an archived store on read-only storage, or ``read_only=True``)."""


class DamagedBoardError(sqlite3.DatabaseError, ValueError):
    """``board.sqlite`` is not a SQLite database, or a damaged one (edited, truncated, overwritten).
    A ``sqlite3.DatabaseError`` as before, and a ``ValueError`` (bad input) for the CLI and callers."""


# What SQLite says of a file that is not a database or whose pages are damaged (error codes; the
# messages for a Python without ``sqlite_errorcode``, before 3.11).
_DAMAGED_CODES = (getattr(sqlite3, "SQLITE_NOTADB", 26), getattr(sqlite3, "SQLITE_CORRUPT", 11))
_DAMAGED_MESSAGES = ("file is not a database", "database disk image is malformed")


class TicketError(RuntimeError):
    """A submission's ticket is not claimed any more: released (a new driver took over the store,
    or the pod was given up for dead), already consumed, or never claimed."""


@dataclasses.dataclass(frozen=True)
class Entry:
    """One submitted agent: who its parent was, what changed, how it scored, where it lives."""

    id: int
    parent_id: int | None
    generation: int
    pod: int
    agent: str
    hparams: dict[str, Any]
    changes: dict[str, list[Any]]
    env_steps: int
    wall_time: float
    score: float
    score_std: float | None
    checkpoint: str
    checksum: str
    created_at: float
    corrupt: bool
    ticket: int | None

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> "Entry":
        d = dict(row)
        d["hparams"], d["changes"] = json.loads(d["hparams"]), json.loads(d["changes"])
        d["corrupt"] = bool(d["corrupt"])
        return cls(**d)


class Leaderboard:
    """Entries ranked by validation score, persisted in ``store_dir``; safe for many processes.

    Open it from any process with the same ``store_dir``: every method opens its own short
    connection, so a ``Leaderboard`` is cheap, picklable and never shares a connection across
    processes or threads.

    ``read_only``: ``None`` (default) opens an existing board read-only when this process cannot
    write its folder or file (an archived store), ``True`` always, ``False`` never (a board that
    cannot be written then fails on its first write). Writes to a read-only board raise
    ``ReadOnlyBoardError``; damaged checkpoints are then reported but not flagged.
    """

    def __init__(self, store_dir: str | Path, busy_timeout_s: float = 60.0, read_only: bool | None = None):
        self.store = _store_dir(store_dir)
        self.checkpoint_dir = self.store / "checkpoints"
        self.path = self.store / "board.sqlite"
        self.busy_timeout_s = busy_timeout_s
        self.read_only = _cannot_write(self.store, self.path) if read_only is None else bool(read_only)
        self._uri: str | None = None  # a read-only board is opened through a SQLite URI
        if self.read_only:
            self._uri = self._read_only_uri()
            return
        try:
            self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        except PermissionError as e:
            raise PermissionError(f"cannot create the store {self.store} ({e}); give a folder you can write, or "
                                  f"open an existing store read-only: Leaderboard(store, read_only=True)") from e
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")  # persistent: set once, stored in the file
            db.executescript(SCHEMA)
            columns = {row[1] for row in db.execute("PRAGMA table_info(pods)")}
            for column in sorted(set(POD_COLUMNS_ADDED) - columns):  # a store written before they existed
                db.execute(f"ALTER TABLE pods ADD COLUMN {column} TEXT")

    def __repr__(self) -> str:
        mode = ", read_only=True" if self.read_only else ""
        return f"Leaderboard({str(self.store)!r}{mode}, entries={len(self)})"

    def _read_only_uri(self) -> str:
        """The SQLite URI that reads this board without writing anything next to it. A WAL
        database needs its ``-shm`` file: ``mode=ro`` when it exists or can be created, else
        ``immutable=1`` (nothing is written, and nobody may be writing). A crashed writer's
        uncommitted-to-the-file ``-wal`` in a read-only folder is read from a private copy."""
        if not self.path.is_file():
            raise FileNotFoundError(f"no board.sqlite in {self.store}: a read-only board must exist; check the path "
                                    f"(a store is the folder a Tournament or Leaderboard wrote)")
        wal, shm = (self.path.with_name(self.path.name + suffix) for suffix in ("-wal", "-shm"))
        if shm.exists() or os.access(self.store, os.W_OK):
            return f"{self.path.resolve().as_uri()}?mode=ro"
        if not wal.exists() or wal.stat().st_size == 0:
            return f"{self.path.resolve().as_uri()}?immutable=1"
        copy = Path(tempfile.mkdtemp(prefix="podracer-board-"))
        weakref.finalize(self, shutil.rmtree, copy, True)
        for source in (self.path, wal):
            shutil.copy2(source, copy / source.name)
        warnings.warn(f"{self.store} is read-only and its board.sqlite-wal holds transactions a writer never "
                      f"merged into the file (it was killed): reading a private copy in {copy}", RuntimeWarning,
                      stacklevel=3)
        return f"{(copy / self.path.name).as_uri()}?mode=ro"

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        # isolation_level=None: we issue BEGIN ourselves, so a write transaction takes the lock
        # up front (IMMEDIATE) instead of failing on upgrade from a read lock (SQLITE_BUSY).
        if self._uri is None:
            db = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None)
        else:
            db = sqlite3.connect(self._uri, uri=True, timeout=self.busy_timeout_s, isolation_level=None)
        db.row_factory = sqlite3.Row
        try:
            db.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
            db.execute("PRAGMA synchronous=FULL")
            yield db
        except sqlite3.DatabaseError as e:
            if isinstance(e, DamagedBoardError) or not (getattr(e, "sqlite_errorcode", None) in _DAMAGED_CODES
                                                        or str(e) in _DAMAGED_MESSAGES):
                raise
            raise DamagedBoardError(
                f"{self.path} is not a readable leaderboard ({e}): it was edited, truncated or overwritten. Restore "
                f"it from a copy (Leaderboard.backup writes one; a store with storage_path= resumes from its "
                f"snapshot with Tournament.from_store(uri)), or move it aside to start a new board in "
                f"{self.store}") from e
        finally:
            db.close()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self._check_writable()
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyBoardError(f"the board in {self.store} is open read-only (archived on storage this process "
                                     f"cannot write, or read_only=True): nothing can be written to it; copy the store "
                                     f"to a writable folder to change or resume it")

    # ------------------------------------------------------------------------ entries
    def submit(self, agent: Any, score: float, *, parent_id: int | None = None, generation: int = 0, pod: int = 0,
               agent_name: str | None = None, hparams: dict[str, Any] | None = None,
               changes: dict[str, list[Any]] | None = None, env_steps: int = 0, wall_time: float = 0.0,
               score_std: float | None = None, ticket: int | None = None) -> Entry:
        """Write ``agent``'s checkpoint (an agent or a ``checkpoint()`` dict), then insert its row.

        With ``ticket`` the row consumes that claimed ticket in the same transaction. A ticket
        that is not claimed any more (released, already consumed, never claimed) raises
        ``TicketError`` and the checkpoint file is removed again: the board never holds more
        entries than its budget, and a ticket yields at most one entry.
        """
        self._check_writable()  # before the checkpoint file, not only before the row
        ckpt = agent if isinstance(agent, dict) else agent.checkpoint()
        rel = checkpoint_name(generation, pod)
        checksum = checkpoints.write(ckpt, self.store / rel)  # durable before the row exists
        try:
            return self._insert(rel, checksum, score, agent_name=agent_name or ckpt["agent"], parent_id=parent_id,
                                generation=generation, pod=pod, hparams=hparams, changes=changes,
                                env_steps=env_steps, wall_time=wall_time, score_std=score_std, ticket=ticket)
        except BaseException:
            (self.store / rel).unlink(missing_ok=True)
            raise

    def record(self, checkpoint: str, checksum: str, size: int, score: float, *, agent_name: str,
               **fields: Any) -> Entry:
        """Insert the row of a checkpoint that a pod wrote to the board's storage itself (one of
        ``storage.DIRECT_BYTES`` or more, so that its bytes never pass through the head): as
        ``submit``, ``fields`` included, once the file is there with ``size`` bytes. Its content is
        checked against ``checksum`` whenever it is loaded, as every checkpoint's is. A refused
        ticket deletes the file again."""
        self._check_writable()
        storage = self.storage()
        if storage is None:
            raise ValueError(f"record() needs a board mirrored to storage (Tournament(storage_path=...)); {self.store} "
                             f"is not: submit the checkpoint instead")
        if not checkpoint.startswith("checkpoints/") or ".." in checkpoint or not checkpoint.endswith(".pt"):
            raise ValueError(f"checkpoint {checkpoint!r} must be checkpoints/<name>.pt (storage.checkpoint_name)")
        found = storage.size(checkpoint)
        if found != size:
            raise CheckpointMissingError(f"{storage.uri}/{checkpoint} holds {found} bytes, not the {size} written "
                                         f"(None: missing); not recorded")
        try:
            return self._insert(checkpoint, checksum, score, agent_name=agent_name, **fields)
        except TicketError:
            storage.delete(checkpoint)
            raise

    def _insert(self, rel: str, checksum: str, score: float, *, agent_name: str, parent_id: int | None = None,
                generation: int = 0, pod: int = 0, hparams: dict[str, Any] | None = None,
                changes: dict[str, list[Any]] | None = None, env_steps: int = 0, wall_time: float = 0.0,
                score_std: float | None = None, ticket: int | None = None) -> Entry:
        """Insert the row of the checkpoint at ``rel`` (written already), consuming ``ticket``."""
        row = dict(parent_id=parent_id, generation=generation, pod=pod, agent=agent_name,
                   hparams=json.dumps(hparams or {}), changes=json.dumps(changes or {}), env_steps=int(env_steps),
                   wall_time=float(wall_time), score=float(score), score_std=score_std, checkpoint=rel,
                   checksum=checksum, created_at=time.time(), ticket=ticket)
        if math.isnan(row["score"]):
            row["score"] = -math.inf  # NaN would sort nowhere; a diverged agent ranks last
        with self._transaction() as db:
            if ticket is not None and db.execute("DELETE FROM tickets WHERE id = ?", (ticket,)).rowcount == 0:
                raise TicketError(f"ticket {ticket} is not claimed any more (released when a new driver took over "
                                  f"{self.store}, already consumed, or never claimed): this result is not "
                                  f"submitted, so the board stays within its budget")
            cur = db.execute(f"INSERT INTO entries ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                             tuple(row.values()))
            entry_id = cur.lastrowid
        return self.get(entry_id)

    def get(self, entry_id: int) -> Entry:
        with self._connect() as db:
            row = db.execute("SELECT * FROM entries WHERE id = ?", (int(entry_id),)).fetchone()
        if row is None:
            raise KeyError(f"no entry {entry_id} in {self.path}")
        return Entry.from_row(row)

    def top(self, k: int = 10, include_corrupt: bool = False) -> list[Entry]:
        """The ``k`` best entries by score (ties: the earlier entry first)."""
        where = "" if include_corrupt else "WHERE corrupt = 0"
        with self._connect() as db:
            rows = db.execute(f"SELECT * FROM entries {where} ORDER BY score DESC, id ASC LIMIT ?", (k,)).fetchall()
        return [Entry.from_row(r) for r in rows]

    def entries(self) -> list[Entry]:
        """All entries in submission order."""
        with self._connect() as db:
            return [Entry.from_row(r) for r in db.execute("SELECT * FROM entries ORDER BY id")]

    def __len__(self) -> int:
        with self._connect() as db:
            return int(db.execute("SELECT COUNT(*) FROM entries").fetchone()[0])

    def lineage(self, entry_id: int) -> list[Entry]:
        """The chain of ancestors of ``entry_id``, root first and the entry itself last."""
        with self._connect() as db:
            rows = db.execute("""
                WITH RECURSIVE chain(id, depth) AS (
                    SELECT ?, 0
                    UNION ALL
                    SELECT e.parent_id, c.depth + 1 FROM entries e JOIN chain c ON e.id = c.id
                    WHERE e.parent_id IS NOT NULL)
                SELECT entries.* FROM chain JOIN entries USING (id) ORDER BY chain.depth DESC""",
                              (int(entry_id),)).fetchall()
        if not rows:
            raise KeyError(f"no entry {entry_id} in {self.path}")
        return [Entry.from_row(r) for r in rows]

    def to_frame(self) -> pd.DataFrame:
        """All entries as a DataFrame ranked by score, one ``hp/<name>`` column per hyperparameter."""
        entries = self.entries()
        rows = []
        for e in entries:
            d = dataclasses.asdict(e)
            hp = d.pop("hparams")
            d["changes"] = ", ".join(f"{k}: {_fmt(v[0])}->{_fmt(v[1])}" for k, v in e.changes.items())
            d.update({f"hp/{k}": v for k, v in hp.items()})
            rows.append(d)
        frame = pd.DataFrame(rows, columns=None if rows else [f.name for f in dataclasses.fields(Entry)])
        if len(frame):
            frame["created_at"] = pd.to_datetime(frame["created_at"], unit="s")
            frame = frame.sort_values(["score", "id"], ascending=[False, True])
        return frame.set_index("id")

    def export(self, path: str | Path) -> Path:
        """Write ``to_frame()`` to ``path``, as CSV (``.csv``) or Parquet (``.parquet``, ``.pq``); return the path."""
        path = Path(path)
        writers = dict(zip(EXPORT_SUFFIXES, (self.to_csv, self.to_parquet, self.to_parquet)))
        if path.suffix.lower() not in writers:
            raise ValueError(f"cannot tell the format of {path}: name it *.csv or *.parquet (or call to_csv / "
                             f"to_parquet)")
        return writers[path.suffix.lower()](path)

    def to_csv(self, path: str | Path) -> Path:
        """The ranked table (``to_frame()``, index ``id``) as CSV; ``pd.read_csv(path, index_col="id")`` reads it."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.to_frame().to_csv(path)
        return path

    def to_parquet(self, path: str | Path) -> Path:
        """The ranked table (``to_frame()``, index ``id``) as Parquet, types kept; needs pyarrow."""
        try:
            import pyarrow  # noqa: F401  (pandas' Parquet engine)
        except ImportError as e:
            raise ImportError(f"to_parquet needs pyarrow ({e}): pip install pyarrow, or export to CSV") from e
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.to_frame().to_parquet(path)
        return path

    def backup(self, dest: str | Path) -> Path:
        """A consistent copy of the board (one file, no ``-wal``) at ``dest``, taken with SQLite's
        online backup while pods keep writing; checkpoints are not copied. Atomic: ``dest`` is
        the old copy or the new one, never half of one."""
        dest = Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            with self._connect() as source, contextlib.closing(sqlite3.connect(tmp)) as copy:
                source.backup(copy)
                copy.execute("PRAGMA journal_mode=DELETE")  # one self-contained file; WAL again once opened to write
            os.replace(tmp, dest)
        finally:
            tmp.unlink(missing_ok=True)
        return dest

    # ------------------------------------------------------------------------ checkpoints
    def load_checkpoint(self, entry: Entry | int, device: str = "cpu") -> dict[str, Any]:
        """The verified checkpoint dict of ``entry``. A damaged file is flagged ``corrupt`` in
        the board, reported with a warning, and raises ``CheckpointError``: it is never loaded.
        A missing file raises ``CheckpointMissingError`` with a warning but is not flagged: the
        entry is usable again when its file comes back."""
        entry = entry if isinstance(entry, Entry) else self.get(entry)
        try:
            return checkpoints.loads(self.checkpoint_bytes(entry), entry.checksum, device,
                                     source=str(self.store / entry.checkpoint))
        except CheckpointMissingError as e:
            warnings.warn(f"leaderboard entry {entry.id} skipped: {e} (missing, not flagged corrupt: it is used "
                          f"again once its file is back)", RuntimeWarning, stacklevel=2)
            raise
        except CheckpointError as e:
            warnings.warn(f"leaderboard entry {entry.id} skipped: {e}{self._flag_corrupt(entry.id)}", RuntimeWarning,
                          stacklevel=2)
            raise

    def checkpoint_bytes(self, entry: Entry | int) -> bytes:
        """The bytes of ``entry``'s checkpoint file, unchecked: from the store, else (a checkpoint
        a pod wrote to storage, or a local file lost) from the storage the board is mirrored to.
        Raises ``CheckpointMissingError`` when neither has it."""
        entry = entry if isinstance(entry, Entry) else self.get(entry)
        path = self.store / entry.checkpoint
        try:
            return path.read_bytes()
        except OSError as local_error:
            storage = self.storage()
            if storage is None:
                raise CheckpointMissingError(f"cannot read checkpoint {path}: {local_error}") from local_error
            try:
                return storage.read_bytes(entry.checkpoint)
            except OSError as e:  # not there, or storage unreachable: missing for now, not corrupt
                raise CheckpointMissingError(f"checkpoint {entry.checkpoint} is neither in {self.store} "
                                             f"({local_error.strerror}) nor in {storage.uri} ({e})") from e

    def storage(self) -> Storage | None:
        """The ``Storage`` this board is mirrored to (``Tournament(storage_path=...)``), or ``None``."""
        uri = self.meta(STORAGE_KEY)
        return None if uri is None else storage_cache(uri)

    def direct_checkpoints(self) -> DirectCheckpoints:
        """Where pods under the Ray backend write big checkpoints themselves (no storage: nowhere)."""
        min_bytes = self.meta(DIRECT_KEY)
        return DirectCheckpoints(self.meta(STORAGE_KEY), DIRECT_BYTES if min_bytes is None else min_bytes)

    def load_agent(self, entry: Entry | int, device: str | None = None) -> Any:
        """Rebuild the agent of ``entry`` (weights, optimizer, normalisers) from its checkpoint."""
        from podracer.agents.registry import resolve_agent

        entry = entry if isinstance(entry, Entry) else self.get(entry)
        ckpt = self.load_checkpoint(entry, device or "cpu")
        return resolve_agent(entry.agent).from_checkpoint(ckpt, device=device)

    def mark_corrupt(self, entry_id: int) -> None:
        with self._transaction() as db:
            db.execute("UPDATE entries SET corrupt = 1 WHERE id = ?", (int(entry_id),))

    def _flag_corrupt(self, entry_id: int) -> str:
        """Flag ``entry_id`` corrupt unless the board is read-only; what to add to the warning."""
        if self.read_only:
            return " (not flagged corrupt: the board is read-only)"
        self.mark_corrupt(entry_id)
        return ""

    def verify(self) -> list[int]:
        """Check every listed checkpoint against its checksum; return the ids that fail. Damaged
        ones are flagged ``corrupt``; missing ones are reported but not flagged (see the module doc)."""
        bad = []
        for e in self.entries():
            try:
                checkpoints.loads(self.checkpoint_bytes(e), e.checksum, source=str(self.store / e.checkpoint))
            except CheckpointMissingError as err:
                warnings.warn(f"leaderboard entry {e.id} is missing its checkpoint: {err}", RuntimeWarning,
                              stacklevel=2)
                bad.append(e.id)
            except CheckpointError as err:
                warnings.warn(f"leaderboard entry {e.id} is corrupt: {err}{self._flag_corrupt(e.id)}", RuntimeWarning,
                              stacklevel=2)
                bad.append(e.id)
        return bad

    # ------------------------------------------------------------------------ tournament bookkeeping
    def set_budget(self, entries: int | None) -> None:
        """Total entries the tournament aims for; ``None`` removes the limit."""
        with self._transaction() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES ('budget', ?)", (json.dumps(entries),))

    def meta(self, key: str) -> Any:
        """A value stored with ``set_meta`` (``None`` when unset): the budget, the storage URI, ..."""
        with self._connect() as db:
            row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def set_meta(self, key: str, value: Any) -> None:
        """Store a JSON-serialisable ``value`` under ``key`` in the board's ``meta`` table."""
        with self._transaction() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

    def claim(self, pod: int) -> int | None:
        """A ticket for one more generation, or ``None`` when the budget is spent (counting the
        generations in flight) or ``pod`` was asked to stop."""
        with self._transaction() as db:
            status = db.execute("SELECT status FROM pods WHERE id = ?", (pod,)).fetchone()
            if status is not None and status[0] != "running":
                return None
            budget = db.execute("SELECT value FROM meta WHERE key = 'budget'").fetchone()
            budget = json.loads(budget[0]) if budget else None
            if budget is not None:
                used = db.execute("SELECT (SELECT COUNT(*) FROM entries) + (SELECT COUNT(*) FROM tickets)").fetchone()
                if used[0] >= budget:
                    return None
            return db.execute("INSERT INTO tickets (pod, claimed_at) VALUES (?, ?)", (pod, time.time())).lastrowid

    def release_tickets(self, pod: int | None = None) -> int:
        """Drop the unconsumed tickets of ``pod`` (all pods with ``None``): its generation died."""
        with self._transaction() as db:
            if pod is None:
                return db.execute("DELETE FROM tickets").rowcount
            return db.execute("DELETE FROM tickets WHERE pod = ?", (pod,)).rowcount

    def in_flight(self) -> int:
        """Generations being trained now (claimed tickets not yet submitted)."""
        with self._connect() as db:
            return int(db.execute("SELECT COUNT(*) FROM tickets").fetchone()[0])

    def tickets(self) -> pd.DataFrame:
        """The generations in flight: ticket id (index), ``pod``, ``claimed_at``; oldest first."""
        with self._connect() as db:
            return pd.read_sql_query("SELECT id, pod, claimed_at FROM tickets ORDER BY id", db).set_index("id")

    def register_pod(self) -> int:
        with self._transaction() as db:
            return db.execute("INSERT INTO pods (status, started_at) VALUES ('running', ?)", (time.time(),)).lastrowid

    def set_pod(self, pod: int, **fields: Any) -> None:
        """Update columns of a pod row (``POD_COLUMNS``: ``pid``, ``status``, ``exitcode``, ``error``, ...)."""
        unknown = sorted(set(fields) - set(POD_COLUMNS))
        if unknown:  # column names go into the SQL text: only known ones
            raise ValueError(f"unknown pod column(s) {unknown}; use some of {POD_COLUMNS}")
        cols = ", ".join(f"{k} = ?" for k in fields)
        with self._transaction() as db:
            db.execute(f"UPDATE pods SET {cols} WHERE id = ?", (*fields.values(), pod))

    def request_stop(self, pod: int | None = None) -> None:
        """Ask ``pod`` (every running pod with ``None``) to stop after its current generation."""
        with self._transaction() as db:
            if pod is None:
                db.execute("UPDATE pods SET status = 'stopping' WHERE status = 'running'")
            else:
                db.execute("UPDATE pods SET status = 'stopping' WHERE id = ? AND status = 'running'", (pod,))

    def retire_pods(self) -> None:
        """Mark every pod still listed as alive ``lost`` (its driver is gone): it cannot claim."""
        with self._transaction() as db:
            db.execute("UPDATE pods SET status = 'lost' WHERE status IN ('running', 'stopping')")

    def pods(self) -> pd.DataFrame:
        with self._connect() as db:
            return pd.read_sql_query("SELECT * FROM pods ORDER BY id", db).set_index("id")

    def pod_error(self, pod: int) -> str | None:
        with self._connect() as db:
            row = db.execute("SELECT error FROM pods WHERE id = ?", (pod,)).fetchone()
        return row[0] if row else None

    def integrity_check(self) -> str:
        """SQLite's own consistency check of the file: ``"ok"`` when sound."""
        with self._connect() as db:
            return str(db.execute("PRAGMA integrity_check").fetchone()[0])


def _fmt(v: Any) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def _store_dir(store_dir: str | Path) -> Path:
    """``store_dir`` as a Path, refusing a file with the fix (``board.sqlite`` itself: its folder)."""
    store = Path(store_dir)
    if store.exists() and not store.is_dir():
        fix = f"pass its folder, Leaderboard({str(store.parent)!r})" if store.name == "board.sqlite" else \
            "pass the folder that holds board.sqlite and checkpoints/, or a new folder for a new store"
        raise NotADirectoryError(f"store {str(store)!r} is a file, not a store directory: {fix}")
    return store


def _cannot_write(store: Path, board: Path) -> bool:
    """True when the board exists and this process cannot write it or its folder (an archive)."""
    return board.exists() and not (os.access(store, os.W_OK) and os.access(board, os.W_OK))
