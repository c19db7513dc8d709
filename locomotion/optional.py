"""Import an optional dependency, or fail with an error that names the extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType

INSTALL_HINT = 'pip install "podracer-rl[locomotion]"'
"""The command that installs the locomotion backends, quoted in the errors that need it."""


def import_optional(module: str, backend: str) -> ModuleType:
    """``import module``; if it is missing, an ``ImportError`` saying which backend needs it and
    how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(f"the {backend!r} locomotion backend needs the {module!r} package, which is not "
                          f"installed ({err}); install it with: {INSTALL_HINT}") from err


__all__ = ["INSTALL_HINT", "import_optional"]
