"""How a domain plugs into the core: it registers, the core never names it.

A package that brings envs, agent presets or env factories registers them when it is imported
(``podracer.register_env``, ``podracer.register_presets``, ``podracer.tournament.register_factory``).
So that ``podracer.make_env("HalfCheetah")`` works before anyone imported the package that knows
HalfCheetah, the package also declares itself in its ``pyproject.toml`` as an entry point of the
group ``podracer.domains``::

    [project.entry-points."podracer.domains"]
    mydomain = "mydomain"          # the module whose import registers everything

The first time a lookup misses (an env name, a preset, a trusted factory), the core imports every
declared domain once and looks again, as gymnasium loads its env plugins. Nothing here is
imported at ``import podracer`` time.
"""

from __future__ import annotations

import warnings
from importlib.metadata import entry_points

ENTRY_POINT_GROUP = "podracer.domains"

_loaded: dict[str, bool] = {}  # domain name -> imported without error


def load_domains() -> dict[str, bool]:
    """Import every installed domain package (once per process) so that it registers its envs,
    presets and factories. Returns ``{domain: imported}``. A domain that fails to import (a broken
    or partial install) is reported with a warning naming it and the error, and the others still
    load: a lookup then fails with the usual "unknown name" message."""
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in _loaded:
            continue
        try:
            ep.load()
            _loaded[ep.name] = True
        except Exception as e:  # noqa: BLE001 - one broken plugin must not hide the others
            _loaded[ep.name] = False
            warnings.warn(f"podracer domain {ep.name!r} ({ep.value}) failed to import: {type(e).__name__}: {e}. "
                          f"Its envs and presets are unavailable; reinstall it (pip install -e .) or fix the error",
                          RuntimeWarning, stacklevel=2)
    return dict(_loaded)


__all__ = ["ENTRY_POINT_GROUP", "load_domains"]
