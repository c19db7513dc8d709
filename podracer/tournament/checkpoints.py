"""Moved to ``podracer.checkpoints`` (one checkpoint writer for agents and the tournament);
this module re-exports it so that ``podracer.tournament.checkpoints`` keeps working."""

from podracer.checkpoints import CheckpointError, CheckpointMissingError, read, write

__all__ = ["CheckpointError", "CheckpointMissingError", "read", "write"]
