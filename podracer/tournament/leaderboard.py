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

The class is assembled from one module per job: ``schema.py`` (the tables and the read-only
queries, which ``storage.py`` shares), ``boardfile.py`` (opening the file, transactions, meta,
backup), ``entries.py`` (rows and the queries selection reads), ``tickets.py`` (budget, tickets,
pods) and ``board_io.py`` (checkpoint files, verification, export).
"""

from __future__ import annotations

from podracer.tournament.board_io import EXPORT_SUFFIXES, BoardIO
from podracer.tournament.boardfile import DamagedBoardError, ReadOnlyBoardError
from podracer.tournament.schema import ENTRY_COLUMNS_ADDED, POD_COLUMNS, POD_COLUMNS_ADDED, SCHEMA, Entry
from podracer.tournament.tickets import TicketError, Tickets

__all__ = ["DamagedBoardError", "ENTRY_COLUMNS_ADDED", "EXPORT_SUFFIXES", "Entry", "Leaderboard", "POD_COLUMNS",
           "POD_COLUMNS_ADDED", "ReadOnlyBoardError", "SCHEMA", "TicketError"]


class Leaderboard(BoardIO, Tickets):
    """Entries ranked by validation score, persisted in ``store_dir``; safe for many processes.

    Open it from any process with the same ``store_dir``: every method opens its own short
    connection, so a ``Leaderboard`` is cheap, picklable and never shares a connection across
    processes or threads.

    ``read_only``: ``None`` (default) opens an existing board read-only when this process cannot
    write its folder or file (an archived store), ``True`` always, ``False`` never (a board that
    cannot be written then fails on its first write). Writes to a read-only board raise
    ``ReadOnlyBoardError``; damaged checkpoints are then reported but not flagged.
    """

    def __repr__(self) -> str:
        mode = ", read_only=True" if self.read_only else ""
        return f"Leaderboard({str(self.store)!r}{mode}, entries={len(self)})"
