"""The store's SQLite file as ``Leaderboard``'s parts share it: opening it (read-only when this
process cannot write it), one short connection per call, write transactions, the ``meta`` table,
the online backup. See ``leaderboard.py`` for the store's layout and why SQLite."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import tempfile
import uuid
import warnings
import weakref
from pathlib import Path
from typing import Any, Iterator

from podracer.tournament import schema


class ReadOnlyBoardError(PermissionError):
    """A write to a board opened read-only (an archived store on read-only storage, or ``read_only=True``)."""


class DamagedBoardError(sqlite3.DatabaseError, ValueError):
    """``board.sqlite`` is not a SQLite database, or a damaged one (edited, truncated, overwritten).
    A ``sqlite3.DatabaseError`` as before, and a ``ValueError`` (bad input) for the CLI and callers."""


# What SQLite says of a file that is not a database or whose pages are damaged (error codes; the
# messages for a Python without ``sqlite_errorcode``, before 3.11).
_DAMAGED_CODES = (getattr(sqlite3, "SQLITE_NOTADB", 26), getattr(sqlite3, "SQLITE_CORRUPT", 11))
_DAMAGED_MESSAGES = ("file is not a database", "database disk image is malformed")


class BoardFile:
    """``store_dir``'s ``board.sqlite``, opened for writing, or read-only (see ``Leaderboard``)."""

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
            schema.create(db)

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

    def meta(self, key: str) -> Any:
        """A value stored with ``set_meta`` (``None`` when unset): the budget, the storage URI, ..."""
        with self._connect() as db:
            return schema.meta(db, key)

    def set_meta(self, key: str, value: Any) -> None:
        """Store a JSON-serialisable ``value`` under ``key`` in the board's ``meta`` table."""
        with self._transaction() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

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

    def integrity_check(self) -> str:
        """SQLite's own consistency check of the file: ``"ok"`` when sound."""
        with self._connect() as db:
            return schema.integrity_check(db)


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
