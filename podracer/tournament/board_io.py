"""Checkpoint files and exports of the board (``Leaderboard``'s part for them): a submission
writes its checkpoint before its row exists, a load verifies it (a damaged one is flagged
``corrupt``, a missing one only skipped), a board mirrored to storage reads what its own disk
lacks from there, and the ranked table is exported as CSV or Parquet."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from podracer import checkpoints
from podracer.checkpoints import CheckpointError, CheckpointMissingError
from podracer.deprecation import renamed_argument
from podracer.tournament.entries import Entries
from podracer.tournament.schema import Entry
from podracer.tournament.storage import (DIRECT_BYTES, DIRECT_KEY, STORAGE_KEY, DirectCheckpoints, Storage,
                                         checkpoint_name)
from podracer.tournament.storage import cached as storage_cache
from podracer.tournament.tickets import TicketError

EXPORT_SUFFIXES = (".csv", ".parquet", ".pq")  # what Leaderboard.export writes, by the path's suffix


class BoardIO(Entries):
    """Checkpoints in and out of a board, verification, export (see ``Leaderboard``)."""

    @renamed_argument("Leaderboard.submit.env_steps")
    def submit(self, agent: Any, score: float, *, parent_id: int | None = None, generation: int = 0, pod: int = 0,
               agent_name: str | None = None, hparams: dict[str, Any] | None = None,
               changes: dict[str, list[Any]] | None = None, global_step: int = 0, wall_time: float = 0.0,
               score_std: float | None = None, ticket: int | None = None,
               window_scores: Sequence[float] | None = None, returns: Sequence[float] | None = None) -> Entry:
        """Write ``agent``'s checkpoint (an agent or a ``checkpoint()`` dict), then insert its row.
        ``window_scores`` and ``returns``: the fitness's per-window scores and the per-period returns
        behind them (``fitness.FitnessResult``), kept in the row.

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
                                global_step=global_step, wall_time=wall_time, score_std=score_std, ticket=ticket,
                                window_scores=window_scores, returns=returns)
        except BaseException:
            (self.store / rel).unlink(missing_ok=True)
            raise

    @renamed_argument("Leaderboard.record.env_steps")
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

    # ------------------------------------------------------------------------ export
    def to_frame(self) -> pd.DataFrame:
        """All entries as a DataFrame ranked by score, one ``hp/<name>`` column per hyperparameter."""
        entries = self.entries()
        rows = []
        for e in entries:
            d = dataclasses.asdict(e)
            hp = d.pop("hparams")
            d.pop("returns")  # a series per entry: Leaderboard.validation_returns() gives them as a frame
            d["changes"] = ", ".join(f"{k}: {_fmt(v[0])}->{_fmt(v[1])}" for k, v in e.changes.items())
            d.update({f"hp/{k}": v for k, v in hp.items()})
            rows.append(d)
        frame = pd.DataFrame(rows, columns=None if rows else
                             [f.name for f in dataclasses.fields(Entry) if f.name not in ("hparams", "returns")])
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



def _fmt(v: Any) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)
