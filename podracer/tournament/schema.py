"""The board's SQLite file: its schema, its rows as ``Entry``, and the read-only queries.

The one place that knows the tables. ``Leaderboard`` (and its parts: ``entries.py``,
``tickets.py``, ``board_io.py``) writes through its own transactions and reads through the
queries here; ``storage.py`` reads a downloaded snapshot through them too, without opening a
``Leaderboard`` (which would write next to the file). Each query takes an open connection.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import sqlite3
from pathlib import Path
from typing import Any, Iterator

import pandas as pd

from podracer.deprecation import deprecated_alias

SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    parent_id  INTEGER REFERENCES entries(id),
    generation INTEGER NOT NULL,            -- lineage depth: 0 for a fresh agent, parent's + 1
    pod        INTEGER NOT NULL,
    agent      TEXT    NOT NULL,            -- registry name or "module:Class"
    hparams    TEXT    NOT NULL,            -- JSON {name: value} of the mutable hyperparameters
    changes    TEXT    NOT NULL,            -- JSON {name: [parent value, new value]}
    env_steps  INTEGER NOT NULL,            -- Entry.global_step: env steps trained along the whole lineage
    wall_time  REAL    NOT NULL,            -- seconds this generation took (train + evaluate)
    score      REAL    NOT NULL,            -- the fitness's score (see TournamentConfig.fitness)
    score_std  REAL,
    checkpoint TEXT    NOT NULL,            -- path relative to the store
    checksum   TEXT    NOT NULL,            -- sha256 of the checkpoint file
    created_at REAL    NOT NULL,            -- unix time of submission
    corrupt    INTEGER NOT NULL DEFAULT 0,  -- set when its checkpoint failed verification
    ticket     INTEGER UNIQUE,              -- the ticket it consumed: one entry per ticket at most
    window_scores TEXT,                     -- JSON [score per validation window] (fitness.py); NULL: none
    returns    TEXT                         -- JSON [per-period validation returns] the score came from; NULL: none
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
ENTRY_COLUMNS_ADDED = ("window_scores", "returns")  # since the fitness setting: added to older stores when opened
# Entry fields stored under another column name: {field: column}. ``global_step`` keeps its 1.1
# column rather than being renamed in the file: a store read-only (a snapshot), or opened by a pod
# or reader of an older version beside this one, reads and writes it unchanged, and no migration
# can go half-way.
ENTRY_COLUMN_NAMES = {"global_step": "env_steps"}


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
    global_step: int  # env steps trained along the whole lineage, ancestors included (the agent's global_step)
    wall_time: float
    score: float
    score_std: float | None
    checkpoint: str
    checksum: str
    created_at: float
    corrupt: bool
    ticket: int | None
    # The fitness's per-window scores and the per-period returns they came from (fitness.py); None
    # for a fitness without windows, and for every entry of a store written before they existed.
    window_scores: tuple[float, ...] | None = None
    returns: tuple[float, ...] | None = dataclasses.field(default=None, repr=False)

    env_steps = deprecated_alias("global_step")

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> "Entry":
        d = dict(row)
        for field, column in ENTRY_COLUMN_NAMES.items():
            d[field] = d.pop(column)
        d["hparams"], d["changes"] = json.loads(d["hparams"]), json.loads(d["changes"])
        d["corrupt"] = bool(d["corrupt"])
        for column in ENTRY_COLUMNS_ADDED:  # absent from an old store opened read-only (not migrated)
            values = None if d.get(column) is None else json.loads(d[column])
            d[column] = None if values is None else tuple(math.nan if v is None else float(v) for v in values)
        return cls(**d)


def create(db: sqlite3.Connection) -> None:
    """Create the tables of a new board, and add the pod and entry columns an older one lacks."""
    db.execute("PRAGMA journal_mode=WAL")  # persistent: set once, stored in the file
    db.executescript(SCHEMA)
    for table, added in (("pods", POD_COLUMNS_ADDED), ("entries", ENTRY_COLUMNS_ADDED)):
        columns = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        for column in sorted(set(added) - columns):  # a store written before they existed: NULL in its rows
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column} TEXT")


@contextlib.contextmanager
def read_file(board: Path) -> Iterator[sqlite3.Connection]:
    """A connection that reads the board file ``board`` and writes nothing next to it (a snapshot)."""
    with contextlib.closing(sqlite3.connect(f"{board.resolve().as_uri()}?mode=ro", uri=True)) as db:
        db.row_factory = sqlite3.Row
        yield db


# ---------------------------------------------------------------------------- entries
def entry(db: sqlite3.Connection, entry_id: int) -> Entry | None:
    row = db.execute("SELECT * FROM entries WHERE id = ?", (int(entry_id),)).fetchone()
    return None if row is None else Entry.from_row(row)


def top(db: sqlite3.Connection, k: int, include_corrupt: bool = False) -> list[Entry]:
    """The ``k`` best entries by score (ties: the earlier entry first)."""
    where = "" if include_corrupt else "WHERE corrupt = 0"
    rows = db.execute(f"SELECT * FROM entries {where} ORDER BY score DESC, id ASC LIMIT ?", (k,)).fetchall()
    return [Entry.from_row(r) for r in rows]


def entries(db: sqlite3.Connection) -> list[Entry]:
    """All entries in submission order."""
    return [Entry.from_row(r) for r in db.execute("SELECT * FROM entries ORDER BY id")]


def count_entries(db: sqlite3.Connection) -> int:
    return int(db.execute("SELECT COUNT(*) FROM entries").fetchone()[0])


def checkpoints(db: sqlite3.Connection) -> list[str]:
    """The checkpoint path (relative to the store) of every entry."""
    return [row[0] for row in db.execute("SELECT checkpoint FROM entries")]


def lineage(db: sqlite3.Connection, entry_id: int) -> list[Entry]:
    """The chain of ancestors of ``entry_id``, root first and the entry itself last ([]: no such entry)."""
    rows = db.execute("""
        WITH RECURSIVE chain(id, depth) AS (
            SELECT ?, 0
            UNION ALL
            SELECT e.parent_id, c.depth + 1 FROM entries e JOIN chain c ON e.id = c.id
            WHERE e.parent_id IS NOT NULL)
        SELECT entries.* FROM chain JOIN entries USING (id) ORDER BY chain.depth DESC""",
                      (int(entry_id),)).fetchall()
    return [Entry.from_row(r) for r in rows]


# ---------------------------------------------------------------------------- meta, tickets, pods
def meta(db: sqlite3.Connection, key: str) -> Any:
    """The JSON value stored under ``key`` in the ``meta`` table (``None`` when unset)."""
    row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return json.loads(row[0]) if row else None


def count_tickets(db: sqlite3.Connection) -> int:
    return int(db.execute("SELECT COUNT(*) FROM tickets").fetchone()[0])


def tickets(db: sqlite3.Connection) -> pd.DataFrame:
    """The generations in flight: ticket id (index), ``pod``, ``claimed_at``; oldest first."""
    return pd.read_sql_query("SELECT id, pod, claimed_at FROM tickets ORDER BY id", db).set_index("id")


def pod_status(db: sqlite3.Connection, pod: int) -> str | None:
    row = db.execute("SELECT status FROM pods WHERE id = ?", (pod,)).fetchone()
    return row[0] if row else None


def pods(db: sqlite3.Connection) -> pd.DataFrame:
    return pd.read_sql_query("SELECT * FROM pods ORDER BY id", db).set_index("id")


def pod_error(db: sqlite3.Connection, pod: int) -> str | None:
    row = db.execute("SELECT error FROM pods WHERE id = ?", (pod,)).fetchone()
    return row[0] if row else None


def integrity_check(db: sqlite3.Connection) -> str:
    """SQLite's own consistency check of the file: ``"ok"`` when sound."""
    return str(db.execute("PRAGMA integrity_check").fetchone()[0])
