"""The board's entries (``Leaderboard``'s part for them): inserting a row once its checkpoint is
in place, consuming its ticket in the same transaction, and the queries selection reads (``top``,
``get``, ``lineage``)."""

from __future__ import annotations

import json
import math
import time
from typing import Any, Sequence

import pandas as pd

from podracer.tournament import schema
from podracer.tournament.boardfile import BoardFile
from podracer.tournament.schema import Entry
from podracer.tournament.tickets import TicketError


class Entries(BoardFile):
    """The rows of ``entries`` (see ``Leaderboard``)."""

    def _insert(self, rel: str, checksum: str, score: float, *, agent_name: str, parent_id: int | None = None,
                generation: int = 0, pod: int = 0, hparams: dict[str, Any] | None = None,
                changes: dict[str, list[Any]] | None = None, global_step: int = 0, wall_time: float = 0.0,
                score_std: float | None = None, ticket: int | None = None,
                window_scores: Sequence[float] | None = None, returns: Sequence[float] | None = None) -> Entry:
        """Insert the row of the checkpoint at ``rel`` (written already), consuming ``ticket``."""
        row = dict(parent_id=parent_id, generation=generation, pod=pod, agent=agent_name,
                   hparams=json.dumps(hparams or {}), changes=json.dumps(changes or {}), global_step=int(global_step),
                   wall_time=float(wall_time), score=float(score), score_std=score_std, checkpoint=rel,
                   checksum=checksum, created_at=time.time(), ticket=ticket,
                   window_scores=_json_floats(window_scores, "window_scores"), returns=_json_floats(returns, "returns"))
        row = {schema.ENTRY_COLUMN_NAMES.get(k, k): v for k, v in row.items()}  # field -> its column
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
            found = schema.entry(db, entry_id)
        if found is None:
            raise KeyError(f"no entry {entry_id} in {self.path}")
        return found

    def top(self, k: int = 10, include_corrupt: bool = False) -> list[Entry]:
        """The ``k`` best entries by score (ties: the earlier entry first)."""
        with self._connect() as db:
            return schema.top(db, k, include_corrupt)

    def entries(self) -> list[Entry]:
        """All entries in submission order."""
        with self._connect() as db:
            return schema.entries(db)

    def validation_returns(self, include_corrupt: bool = False) -> pd.DataFrame:
        """The per-period validation returns each entry's fitness kept (periods x entry id, in
        submission order), so that statistics over the board's trials (PBO, the deflated Sharpe)
        need no re-run; entries without them (a fitness without returns, an older store) are left out."""
        kept = {e.id: e.returns for e in self.entries() if e.returns is not None and (include_corrupt or not e.corrupt)}
        lengths = {len(r) for r in kept.values()}
        if len(lengths) > 1:
            raise ValueError(f"the entries of {self.path} kept returns of different lengths {sorted(lengths)}: they "
                             f"were not scored on one validation split, so they are no matrix of trials")
        frame = pd.DataFrame({k: [math.nan if v is None else v for v in r] for k, r in kept.items()}, dtype=float)
        return frame.rename_axis(index="period", columns="entry")

    def __len__(self) -> int:
        with self._connect() as db:
            return schema.count_entries(db)

    def lineage(self, entry_id: int) -> list[Entry]:
        """The chain of ancestors of ``entry_id``, root first and the entry itself last."""
        with self._connect() as db:
            chain = schema.lineage(db, entry_id)
        if not chain:
            raise KeyError(f"no entry {entry_id} in {self.path}")
        return chain

    def mark_corrupt(self, entry_id: int) -> None:
        with self._transaction() as db:
            db.execute("UPDATE entries SET corrupt = 1 WHERE id = ?", (int(entry_id),))


def _json_floats(values: Sequence[float] | None, name: str) -> str | None:
    """A column of floats as JSON (NaN and infinities as null: JSON has no numbers for them)."""
    if values is None:
        return None
    try:
        floats = [float(v) for v in values]
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} must be a sequence of numbers or None, got {values!r:.80} ({e})") from None
    return json.dumps([v if math.isfinite(v) else None for v in floats])
