"""The tournament's bookkeeping on the board (``Leaderboard``'s part for it): the budget, the
tickets a pod claims before each generation, and the pods table (status, stop requests, errors).
Kept in the board's file because it must change in the same transactions as the entries."""

from __future__ import annotations

import json
import time
from typing import Any

import pandas as pd

from podracer.tournament import schema
from podracer.tournament.boardfile import BoardFile
from podracer.tournament.schema import POD_COLUMNS


class TicketError(RuntimeError):
    """A submission's ticket is not claimed any more: released (a new driver took over the store,
    or the pod was given up for dead), already consumed, or never claimed."""


class Tickets(BoardFile):
    """Budget, tickets and pods of a board (see ``Leaderboard``)."""

    def set_budget(self, entries: int | None) -> None:
        """Total entries the tournament aims for; ``None`` removes the limit."""
        with self._transaction() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES ('budget', ?)", (json.dumps(entries),))

    def claim(self, pod: int) -> int | None:
        """A ticket for one more generation, or ``None`` when the budget is spent (counting the
        generations in flight) or ``pod`` was asked to stop."""
        with self._transaction() as db:
            status = schema.pod_status(db, pod)
            if status is not None and status != "running":
                return None
            budget = schema.meta(db, "budget")
            if budget is not None and schema.count_entries(db) + schema.count_tickets(db) >= budget:
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
            return schema.count_tickets(db)

    def tickets(self) -> pd.DataFrame:
        """The generations in flight: ticket id (index), ``pod``, ``claimed_at``; oldest first."""
        with self._connect() as db:
            return schema.tickets(db)

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
            return schema.pods(db)

    def pod_error(self, pod: int) -> str | None:
        with self._connect() as db:
            return schema.pod_error(db, pod)
