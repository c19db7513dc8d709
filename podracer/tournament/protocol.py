"""The board as a pod sees it: the ``Leaderboard`` methods a pod calls, declared once.

``Leaderboard`` has them (the local backend hands pods the board itself). Under Ray a pod gets
``ray_backend.RemoteLeaderboard`` instead, and the store's actor ``ray_backend.LeaderboardServer``
serves it: both are built from ``POD_BOARD_METHODS``, so a method added here (and to
``Leaderboard``) reaches pods on every backend without a line in ``ray_backend.py``. Only the
methods that do their work on the pod's side are written out there (``submit``: the checkpoint
travels as checked bytes; ``load_checkpoint`` and ``load_agent``: the bytes are checked on arrival).
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

from podracer.tournament.schema import Entry
from podracer.tournament.storage import DirectCheckpoints


@runtime_checkable
class PodBoard(Protocol):
    """What a pod calls on its board; each behaves as ``Leaderboard``'s method of that name."""

    def claim(self, pod: int) -> int | None:
        """A ticket for one more generation; ``None`` when the budget is spent or ``pod`` must stop."""

    def release_tickets(self, pod: int | None = None) -> int:
        """Drop the unconsumed tickets of ``pod`` (all pods with ``None``)."""

    def set_pod(self, pod: int, **fields: Any) -> None:
        """Update columns of ``pod``'s row in the pods table (status, pid, error, ...)."""

    def top(self, k: int = 10) -> list[Entry]:
        """The ``k`` best usable entries by score."""

    def get(self, entry_id: int) -> Entry:
        """The entry ``entry_id`` (``KeyError`` when there is none)."""

    def submit(self, agent: Any, score: float, *, score_std: float | None = None,
               window_scores: Sequence[float] | None = None, returns: Sequence[float] | None = None,
               **fields: Any) -> Entry:
        """Store ``agent``'s checkpoint and insert its row, consuming ``fields["ticket"]``; ``score_std``,
        ``window_scores`` and ``returns`` are the fitness's (``fitness.FitnessResult``)."""

    def record(self, checkpoint: str, checksum: str, size: int, score: float, **fields: Any) -> Entry:
        """Insert the row of a checkpoint the pod wrote to the board's storage itself."""

    def checkpoint_bytes(self, entry: Entry | int) -> bytes:
        """The bytes of ``entry``'s checkpoint, unchecked."""

    def direct_checkpoints(self) -> DirectCheckpoints:
        """Where the pod writes big checkpoints itself (the board's storage), if anywhere."""

    def load_checkpoint(self, entry: Entry | int, device: str = "cpu") -> dict[str, Any]:
        """``entry``'s verified checkpoint; a damaged one is flagged corrupt, a missing one skipped."""

    def load_agent(self, entry: Entry | int, device: str | None = None) -> Any:
        """The agent of ``entry``, rebuilt from its verified checkpoint."""

    def mark_corrupt(self, entry_id: int) -> None:
        """Flag ``entry_id``'s checkpoint as damaged: it is never offered again."""


POD_BOARD_METHODS = tuple(name for name, value in vars(PodBoard).items()
                          if callable(value) and not name.startswith("_"))
