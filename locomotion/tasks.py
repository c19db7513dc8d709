"""The locomotion task table: which MuJoCo tasks Podracer ships, and their gymnasium v5 ids.

Every backend builds the same task from this table, with gymnasium v5's observation, reward and
termination definitions, so returns compare across backends. ``task.key`` (lower case) is what
envs carry in ``env.task`` and what presets are registered under.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Task:
    """One MuJoCo locomotion task."""

    name: str  # "HalfCheetah": how users write it
    max_episode_steps: int = 1000  # gymnasium v5's time limit; reaching it is a truncation

    @property
    def key(self) -> str:
        """Lower-case name, the value of ``env.task`` (``"halfcheetah"``)."""
        return self.name.lower()

    @property
    def gym_id(self) -> str:
        """The id of the same task in gymnasium's and envpool's registries."""
        return f"{self.name}-v5"


TASKS: dict[str, Task] = {t.key: t for t in (
    Task("Ant"), Task("HalfCheetah"), Task("Hopper"), Task("Walker2d"), Task("Humanoid"),
)}
"""The tasks Podracer ships, by ``task.key`` (lower-case name)."""


def is_task(name: str) -> bool:
    """True for a task name we ship, in any case, with or without ``-v5``: ``"halfcheetah"``,
    ``"HalfCheetah-v5"``."""
    key = name.lower()
    return key.removesuffix("-v5") in TASKS


def get_task(name: str) -> Task:
    """The task for ``name`` (any case, ``-v5`` optional); an unknown one is an error listing ours."""
    if not isinstance(name, str) or not is_task(name):
        raise ValueError(f"unknown locomotion task {name!r}; valid tasks: {[t.name for t in TASKS.values()]}")
    return TASKS[name.lower().removesuffix("-v5")]


__all__ = ["TASKS", "Task", "get_task", "is_task"]
