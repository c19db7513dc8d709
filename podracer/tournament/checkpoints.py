"""Moved to ``podracer.checkpoints`` (one checkpoint writer for agents and the tournament);
this module re-exports it so that ``podracer.tournament.checkpoints`` keeps working, with the
warning of ``podracer.deprecation`` until its removal version."""

from podracer.checkpoints import CheckpointError, CheckpointMissingError, read, write
from podracer.deprecation import warn

warn("podracer.tournament.checkpoints", stacklevel=2)

__all__ = ["CheckpointError", "CheckpointMissingError", "read", "write"]
