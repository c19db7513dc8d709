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
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import sqlite3
import time
import uuid
import warnings
from pathlib import Path
from typing import Any, Iterator

import pandas as pd

from podracer import checkpoints
from podracer.checkpoints import CheckpointError, CheckpointMissingError

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
    """

    def __init__(self, store_dir: str | Path, busy_timeout_s: float = 60.0):
        self.store = Path(store_dir)
        self.store.mkdir(parents=True, exist_ok=True)
        self.checkpoint_dir = self.store / "checkpoints"
        self.checkpoint_dir.mkdir(exist_ok=True)
        self.path = self.store / "board.sqlite"
        self.busy_timeout_s = busy_timeout_s
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")  # persistent: set once, stored in the file
            db.executescript(SCHEMA)
            columns = {row[1] for row in db.execute("PRAGMA table_info(pods)")}
            for column in sorted(set(POD_COLUMNS_ADDED) - columns):  # a store written before they existed
                db.execute(f"ALTER TABLE pods ADD COLUMN {column} TEXT")

    def __repr__(self) -> str:
        return f"Leaderboard({str(self.store)!r}, entries={len(self)})"

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        # isolation_level=None: we issue BEGIN ourselves, so a write transaction takes the lock
        # up front (IMMEDIATE) instead of failing on upgrade from a read lock (SQLITE_BUSY).
        db = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None)
        db.row_factory = sqlite3.Row
        db.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
        db.execute("PRAGMA synchronous=FULL")
        try:
            yield db
        finally:
            db.close()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

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
        ckpt = agent if isinstance(agent, dict) else agent.checkpoint()
        name = agent_name or ckpt["agent"]
        rel = f"checkpoints/g{generation:04d}-p{pod:03d}-{uuid.uuid4().hex[:12]}.pt"
        checksum = checkpoints.write(ckpt, self.store / rel)  # durable before the row exists
        row = dict(parent_id=parent_id, generation=generation, pod=pod, agent=name,
                   hparams=json.dumps(hparams or {}), changes=json.dumps(changes or {}), env_steps=int(env_steps),
                   wall_time=float(wall_time), score=float(score), score_std=score_std, checkpoint=rel,
                   checksum=checksum, created_at=time.time(), ticket=ticket)
        if math.isnan(row["score"]):
            row["score"] = -math.inf  # NaN would sort nowhere; a diverged agent ranks last
        try:
            with self._transaction() as db:
                if ticket is not None and db.execute("DELETE FROM tickets WHERE id = ?", (ticket,)).rowcount == 0:
                    raise TicketError(f"ticket {ticket} is not claimed any more (released when a new driver took over "
                                      f"{self.store}, already consumed, or never claimed): this result is not "
                                      f"submitted, so the board stays within its budget")
                cur = db.execute(f"INSERT INTO entries ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                                 tuple(row.values()))
                entry_id = cur.lastrowid
        except BaseException:
            (self.store / rel).unlink(missing_ok=True)
            raise
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

    # ------------------------------------------------------------------------ checkpoints
    def load_checkpoint(self, entry: Entry | int, device: str = "cpu") -> dict[str, Any]:
        """The verified checkpoint dict of ``entry``. A damaged file is flagged ``corrupt`` in
        the board, reported with a warning, and raises ``CheckpointError``: it is never loaded.
        A missing file raises ``CheckpointMissingError`` with a warning but is not flagged: the
        entry is usable again when its file comes back."""
        entry = entry if isinstance(entry, Entry) else self.get(entry)
        try:
            return checkpoints.read(self.store / entry.checkpoint, entry.checksum, device)
        except CheckpointMissingError as e:
            warnings.warn(f"leaderboard entry {entry.id} skipped: {e} (missing, not flagged corrupt: it is used "
                          f"again once its file is back)", RuntimeWarning, stacklevel=2)
            raise
        except CheckpointError as e:
            self.mark_corrupt(entry.id)
            warnings.warn(f"leaderboard entry {entry.id} skipped: {e}", RuntimeWarning, stacklevel=2)
            raise

    def load_agent(self, entry: Entry | int, device: str | None = None) -> Any:
        """Rebuild the agent of ``entry`` (weights, optimizer, normalisers) from its checkpoint."""
        from podracer.agents.registry import resolve_agent

        entry = entry if isinstance(entry, Entry) else self.get(entry)
        ckpt = self.load_checkpoint(entry, device or "cpu")
        return resolve_agent(entry.agent).from_checkpoint(ckpt, device=device)

    def mark_corrupt(self, entry_id: int) -> None:
        with self._transaction() as db:
            db.execute("UPDATE entries SET corrupt = 1 WHERE id = ?", (int(entry_id),))

    def verify(self) -> list[int]:
        """Check every listed checkpoint against its checksum; return the ids that fail. Damaged
        ones are flagged ``corrupt``; missing ones are reported but not flagged (see the module doc)."""
        bad = []
        for e in self.entries():
            try:
                checkpoints.read(self.store / e.checkpoint, e.checksum)
            except CheckpointMissingError as err:
                warnings.warn(f"leaderboard entry {e.id} is missing its checkpoint: {err}", RuntimeWarning,
                              stacklevel=2)
                bad.append(e.id)
            except CheckpointError as err:
                self.mark_corrupt(e.id)
                warnings.warn(f"leaderboard entry {e.id} is corrupt: {err}", RuntimeWarning, stacklevel=2)
                bad.append(e.id)
        return bad

    # ------------------------------------------------------------------------ tournament bookkeeping
    def set_budget(self, entries: int | None) -> None:
        """Total entries the tournament aims for; ``None`` removes the limit."""
        with self._transaction() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES ('budget', ?)", (json.dumps(entries),))

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
