"""Env names -> factories: ``make_env`` and ``register_env``.

The core registers its tensor envs (``pendulum``, ``cartpole``); a domain package registers its
own when imported (a physics domain its tasks, say). ``make_env(name)`` looks the name up, then,
for a name nobody registered, tries a gymnasium id through the adapter, and only then imports the
installed domains (``podracer.plugins.load_domains``) and looks once more.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from podracer.plugins import load_domains

# A factory is called as factory(num_envs=..., device=..., **kwargs) and returns a protocol env.
EnvFactory = Callable[..., Any]

# lower-case name -> (name as registered, factory)
_ENVS: dict[str, tuple[str, EnvFactory]] = {}


def register_env(name: str, factory: EnvFactory, overwrite: bool = False) -> None:
    """Make ``podracer.make_env(name, num_envs, device, **kw)`` call
    ``factory(num_envs=num_envs, device=device, **kw)``. Names are case-insensitive. Registering
    a taken name is an error unless ``overwrite=True`` (re-importing a module that registers is
    fine: the same factory again is accepted)."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"env name must be a non-empty string, got {name!r}")
    if not callable(factory):
        raise TypeError(f"factory for env {name!r} must be callable (num_envs=, device=, **kwargs), got {factory!r}")
    key = name.lower()
    if key in _ENVS and not overwrite and not _same(_ENVS[key][1], factory):
        raise ValueError(f"env {name!r} is already registered (by {_ENVS[key][1]!r}); pass overwrite=True to replace it")
    _ENVS[key] = (name, factory)


def _same(a: EnvFactory, b: EnvFactory) -> bool:
    """The same factory: the same object, or partials of one function with equal arguments."""
    if a is b:
        return True
    return all(hasattr(f, "func") for f in (a, b)) and (a.func, a.args, a.keywords) == (b.func, b.args, b.keywords)


def registered_envs() -> list[str]:
    """The registered env names, as registered, after importing the installed domains."""
    load_domains()
    return sorted((name for name, _ in _ENVS.values()), key=str.lower)


def env_factories() -> list[EnvFactory]:
    """The factories registered so far (without importing domains)."""
    return [factory for _name, factory in _ENVS.values()]


def env_factory(name: str) -> EnvFactory | None:
    """The factory registered for ``name``, or None (looks in the installed domains too)."""
    key = name.lower()
    if key not in _ENVS:
        load_domains()
    entry = _ENVS.get(key)
    return entry[1] if entry else None


def make_env(name: str, num_envs: int = 1, device: str | torch.device = "cpu", **kwargs: Any) -> Any:
    """A batched env by registered name (``"pendulum"``, ``"cartpole"``, and what installed domains
    register, such as the MuJoCo tasks ``"HalfCheetah"``, ``"Ant"``), else any registered
    gymnasium id (``"Pendulum-v1"``) through the adapter."""
    if not isinstance(name, str):
        raise TypeError(f"env name must be a string, got {type(name).__name__}")
    entry = _ENVS.get(name.lower())
    if entry is not None:
        return entry[1](num_envs=num_envs, device=device, **kwargs)
    import gymnasium as gym

    if name in gym.registry:
        from podracer.envs.gym_adapter import make_gym_env

        return make_gym_env(name, num_envs=num_envs, device=device, **kwargs)
    factory = env_factory(name)  # not registered yet: maybe an installed domain registers it
    if factory is not None:
        return factory(num_envs=num_envs, device=device, **kwargs)
    raise ValueError(f"unknown env {name!r}: use a registered name {registered_envs()} or a registered gymnasium id "
                     f"such as 'Pendulum-v1'; register your own with podracer.register_env(name, factory)")


__all__ = ["EnvFactory", "env_factories", "env_factory", "make_env", "register_env", "registered_envs"]
