"""Podracer's one-line announcements (which preset ``make_agent`` picked, which backend a
domain env runs on) on the ``"podracer"`` logger.

They are shown by default, because a user in a notebook or a script should see what was chosen for
them; an application that configures logging itself (a handler on the root or the "podracer"
logger) decides for itself, and ``logging.getLogger("podracer").setLevel(logging.WARNING)``
silences them.
"""

from __future__ import annotations

import logging

logger = logging.getLogger("podracer")


def announce(message: str) -> None:
    """Log ``message`` at INFO on the "podracer" logger, with a plain stderr handler added once
    unless the application configured logging itself."""
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)
    logger.info(message)
