"""Every deprecated public name in one table, and the helpers that keep each old name working.

The rule (docs/stable_api.md): a renamed name keeps working, with a
``FutureWarning`` that names its new name and the version that removes it, through the next
minor version: renamed in 1.0, still there in 1.1, gone in 1.2. ``DEPRECATIONS`` holds one row
per old name (its new name, the version that deprecated it, the one version that removes it);
docs/deprecations.md and docs/stable_api.md's table are its text (``markdown_table``), and a test checks
that they agree and that every old name warns as its row says.

However a name reaches the user, it warns the same way (``message``), through one of these:

- ``renamed_fields(cls)``: a config field, mapped by ``common.make_config`` (and so by YAML
  presets and checkpoints);
- ``deprecated_alias("new")``: a class attribute (``nets = deprecated_alias("model")``);
- ``module_getattr(__name__)``: a module-level name, as the module's PEP 562 ``__getattr__``;
- ``renamed_function(old, new_function)``: a function kept under its old name;
- ``@renamed_argument("Owner.function.old")``: a keyword argument of a function or method;
- ``renamed_keys(state, cls)``: keys of a saved state or config (a checkpoint written before a
  rename holds the old attribute and field names);
- ``warn(old)``: anything else (a moved module warns on import).

A new rename is one row here plus one of these lines where the name lived; a row whose removal
version has come is a failing test (tests/test_deprecation.py), so nothing outlives its promise.
"""

from __future__ import annotations

import functools
import importlib
import warnings
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Deprecation:
    """One deprecated name: ``old`` is renamed ``new`` in ``since`` and is removed in ``removed_in``."""

    old: str  # qualified as a user meets it: "SACConfig.hidden", "podracer.agents.ppo.Batch"
    new: str  # the name to use instead, qualified the same way
    kind: str  # "config field", "attribute", "argument", "function", "module attribute", "module"
    since: str  # the version that deprecated it
    removed_in: str  # the first version without it
    note: str = ""  # a hint appended to the warning

    @property
    def new_short(self) -> str:
        """``new`` without the owner it shares with ``old`` ("SACConfig.hidden_sizes" -> "hidden_sizes")."""
        owner = self.old.rpartition(".")[0]
        return self.new[len(owner) + 1:] if owner and self.new.startswith(owner + ".") else self.new


_1_0, _1_1, _NEXT = "1.0", "1.1", "1.2"  # _NEXT: the release these changes go out in
_ROWS = [
    # renamed in 1.0: removed in 1.2, as the README and the code have always said
    Deprecation("SACConfig.hidden", "SACConfig.hidden_sizes", "config field", _1_0, "1.2"),
    Deprecation("TD3Config.hidden", "TD3Config.hidden_sizes", "config field", _1_0, "1.2"),
    Deprecation("DDPGConfig.hidden", "DDPGConfig.hidden_sizes", "config field", _1_0, "1.2"),
    Deprecation("DQNConfig.hidden", "DQNConfig.hidden_sizes", "config field", _1_0, "1.2"),
    Deprecation("DQNConfig.lr", "DQNConfig.learning_rate", "config field", _1_0, "1.2"),
    Deprecation("OffPolicyAgent.nets", "OffPolicyAgent.model", "attribute", _1_0, "1.2"),
    Deprecation("OffPolicyAgent.optim", "OffPolicyAgent.optimizer", "attribute", _1_0, "1.2"),
    Deprecation("OffPolicyAgent.rng", "OffPolicyAgent.generator", "attribute", _1_0, "1.2"),
    Deprecation("OffPolicyAgent.env_steps", "OffPolicyAgent.global_step", "attribute", _1_0, "1.2"),
    Deprecation("ReplayBuffer.rng", "ReplayBuffer.generator", "attribute", _1_0, "1.2"),
    Deprecation("podracer.get_agent_class", "podracer.resolve_agent", "module attribute", _1_0, "1.2"),
    # renamed in 1.1: removed in 1.3, as the README promised (the code said 1.2; the later one holds)
    Deprecation("podracer.agents.ppo.Batch", "podracer.agents.ppo.Rollout", "module attribute", _1_1, "1.3",
                "replay.Batch is the replay minibatch"),
    Deprecation("locomotion.make_gymnasium_env", "locomotion.gymnasium_env", "function", _1_1, "1.3",
                "or locomotion.make_env(task, n, backend='gymnasium')"),
    Deprecation("StockTradingVecEnv.price", "StockTradingVecEnv.prices", "attribute", _1_1, "1.3"),
    # warn from this release on (they never warned before): removed two minor versions later
    Deprecation("podracer.agents.get_agent_class", "podracer.agents.resolve_agent", "function", _NEXT, "1.4"),
    Deprecation("podracer.tournament.checkpoints", "podracer.checkpoints", "module", _NEXT, "1.4"),
    # one name per concept (1.2): env steps along an agent's whole life (ancestors included) are its
    # global_step, as the agents say; a pod's own env steps over its generations are its pod_steps
    Deprecation("Entry.env_steps", "Entry.global_step", "attribute", _NEXT, "1.4"),
    Deprecation("Leaderboard.submit.env_steps", "Leaderboard.submit.global_step", "argument", _NEXT, "1.4"),
    Deprecation("Leaderboard.record.env_steps", "Leaderboard.record.global_step", "argument", _NEXT, "1.4"),
    Deprecation("Pod.steps", "Pod.pod_steps", "attribute", _NEXT, "1.4"),
    Deprecation("podracer.tournament.ray_backend.checkpoint_bytes", "podracer.checkpoints.dumps",
                "module attribute", _NEXT, "1.4", "Leaderboard.checkpoint_bytes(entry) keeps its name"),
    Deprecation("PPOConfig.batch_size", "PPOConfig.rollout_size", "attribute", _NEXT, "1.4",
                "T x N samples per rollout; batch_size is the minibatch elsewhere: minibatch_size here"),
]
DEPRECATIONS: dict[str, Deprecation] = {row.old: row for row in _ROWS}


def version_tuple(version: str) -> tuple[int, ...]:
    """``"1.2"`` or ``"1.1.0"`` as comparable numbers: ``(1, 2)``, ``(1, 1, 0)``."""
    return tuple(int(part) for part in version.split(".")[:3])


def lookup(old: str) -> Deprecation:
    """The row of ``old``; a name missing from the table is a programming error that says so."""
    try:
        return DEPRECATIONS[old]
    except KeyError:
        raise KeyError(f"{old!r} is not in podracer.deprecation.DEPRECATIONS: add its row (new name, since, "
                       f"removed_in) before keeping it as a deprecated name") from None


def message(old: str) -> str:
    """The one warning text: the old name, its new name, when it goes."""
    row = lookup(old)
    note = f" ({row.note})" if row.note else ""
    return (f"{row.old} is renamed {row.new_short!r}{note}; the old name works until podracer {row.removed_in} "
            f"removes it (deprecated in {row.since})")


def warn(old: str, stacklevel: int = 2) -> None:
    """``FutureWarning(message(old))``, pointing at the caller's caller by default (the user's line)."""
    warnings.warn(message(old), FutureWarning, stacklevel=stacklevel + 1)


def resolve(qualified: str) -> Any:
    """The object at ``"package.module.name"`` (the longest importable module prefix, then attributes)."""
    parts = qualified.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            obj = getattr(obj, part)
        return obj
    raise ImportError(f"cannot import {qualified!r}")


# ---------------------------------------------------------------------------- the mechanisms
def _renames(cls: type, kind: str) -> dict[str, Deprecation]:
    """``{old: row}`` of class ``cls``'s renamed names of ``kind``, its bases' included (rows
    ``"<Class>.<old>"``: ``DoubleDQNConfig`` inherits ``"DQNConfig.lr"``)."""
    found: dict[str, Deprecation] = {}
    for klass in reversed(cls.__mro__):
        prefix = f"{klass.__name__}."
        found.update({row.old[len(prefix):]: row for row in _ROWS if row.kind == kind and row.old.startswith(prefix)})
    return found


def renamed_fields(cls: type) -> dict[str, Deprecation]:
    """``{old field: row}`` of config class ``cls``, for ``common.make_config``."""
    return _renames(cls, "config field")


class deprecated_alias:
    """A class attribute kept under its old name: ``nets = deprecated_alias("model")`` in class
    ``OffPolicyAgent`` serves the row ``"OffPolicyAgent.nets"``. Reading or setting it warns and
    forwards to the new attribute. A class that declares one without its row fails at import."""

    def __init__(self, new_name: str):
        self.new_name = new_name
        self.key = "?"

    def __set_name__(self, owner: type, name: str) -> None:
        self.key = f"{owner.__name__}.{name}"
        row = lookup(self.key)
        if row.new_short != self.new_name:
            raise ValueError(f"{self.key} forwards to {self.new_name!r} but its table row says {row.new_short!r}")

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        if obj is None:
            return self
        warn(self.key)
        return getattr(obj, self.new_name)

    def __set__(self, obj: Any, value: Any) -> None:
        warn(self.key)
        setattr(obj, self.new_name, value)


def module_attribute(module: str, name: str) -> Any:
    """The new object for the deprecated module-level ``module.name``, with the warning; an
    ``AttributeError`` (as Python's own) when ``name`` is no deprecated name of ``module``."""
    key = f"{module}.{name}"
    if key not in DEPRECATIONS:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    warn(key, stacklevel=3)  # the user's line, through the module's __getattr__
    return resolve(DEPRECATIONS[key].new)


def module_getattr(module: str) -> Callable[[str], Any]:
    """A PEP 562 ``__getattr__`` serving ``module``'s deprecated names from the table:
    ``__getattr__ = module_getattr(__name__)``."""

    def __getattr__(name: str) -> Any:
        return module_attribute(module, name)

    return __getattr__


def renamed_function(old: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` under its old name ``old`` (a table row): calling it warns, then calls it."""
    lookup(old)
    name = old.rpartition(".")[2]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        warn(old)
        return function(*args, **kwargs)

    wrapper.__name__ = wrapper.__qualname__ = name
    wrapper.__doc__ = f"Deprecated: {message(old)}."
    return wrapper


def renamed_argument(old: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator keeping a renamed keyword argument: ``@renamed_argument("Leaderboard.submit.env_steps")``
    on ``submit`` accepts ``env_steps=`` with the warning and passes it on as its row's new name
    (``global_step=``). Both names at once is a ``TypeError`` that says which one to keep."""
    row = lookup(old)
    keyword, new = old.rpartition(".")[2], row.new_short

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if keyword in kwargs:
                if new in kwargs:
                    raise TypeError(f"{old.rpartition('.')[0]}() got both {keyword}= and {new}=: pass only {new}= "
                                    f"({message(old)})")
                warn(old)
                kwargs[new] = kwargs.pop(keyword)
            return function(*args, **kwargs)

        renamed = {**getattr(function, "renamed_arguments", {}), keyword: row}  # read by tests/test_deprecation.py
        wrapper.renamed_arguments = renamed  # type: ignore[attr-defined]
        return wrapper

    return decorate


def renamed_keys(state: dict[str, Any], cls: type, what: str = "this checkpoint") -> dict[str, Any]:
    """``state`` (a saved state dict or config of class ``cls``) with the old keys of ``cls``'s
    renamed attributes and fields under their new names, and one warning listing them when
    there were any: the file still loads, and the warning says until when and to save it again."""
    renames = {**_renames(cls, "attribute"), **_renames(cls, "config field")}
    old = [k for k in state if k in renames]
    if old:
        said = "; ".join(message(renames[k].old) for k in old)
        warnings.warn(f"{what} uses old names, so save it again (agent.save(path)) to keep it loading: {said}",
                      FutureWarning, stacklevel=3)
    return {renames[k].new_short if k in renames else k: v for k, v in state.items()}


# ---------------------------------------------------------------------------- the docs page
def markdown_table() -> str:
    """The table as Markdown, one row per old name, in table order: docs/deprecations.md and
    docs/stable_api.md hold exactly this text."""
    lines = ["| old name | new name | kind | deprecated in | removed in |", "|---|---|---|---|---|"]
    lines += [f"| `{r.old}` | `{r.new}` | {r.kind} | {r.since} | {r.removed_in} |" for r in _ROWS]
    return "\n".join(lines) + "\n"


__all__ = ["DEPRECATIONS", "Deprecation", "deprecated_alias", "lookup", "markdown_table", "message",
           "module_attribute", "module_getattr", "renamed_argument", "renamed_fields", "renamed_function",
           "renamed_keys", "resolve", "version_tuple", "warn"]
