"""Where pods run. A backend starts a pod from a ``PodSpec``, says whether it is still running,
and kills it; everything else (budget, selection, stop requests, errors) goes through the
leaderboard store, so a backend stays this small.

The interface, for anyone adding one::

    class Backend(Protocol):
        def start(self, spec: PodSpec) -> Handle   # run pod_main(spec) somewhere, return at once
        def poll(self, handle) -> int | None       # None while running, else an exit code
        def kill(self, handle) -> None             # stop now; the pod loses its current generation
        def fault(self, handle) -> str | None      # an ended pod's death that is not its failure (its node lost)
        def join(self, handle, timeout) -> None    # wait for it to end (up to timeout seconds)
        def capacity(self) -> int                  # pods the resources hold now (for pods="auto")
        def close(self) -> None                    # release the backend's own resources

Two backends: ``LocalBackend`` (spawned processes sharing the store on this machine's disk) and
``RayBackend`` in ``ray_backend.py`` (Ray actors on one machine or a cluster; the store stays on
the head node, served to the pods by an actor, see there). A backend may hand the pod a board
other than ``Leaderboard(store)`` through ``PodSpec.board``. User code does not change:
``Tournament(..., backend="ray")``.
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
from pathlib import Path
from typing import Any, Protocol

from podracer.tournament.config import BACKENDS, TournamentConfig
from podracer.tournament.pod import PodSpec, pod_main


class Backend(Protocol):
    def start(self, spec: PodSpec) -> Any: ...

    def poll(self, handle: Any) -> int | None: ...

    def kill(self, handle: Any) -> None: ...

    def fault(self, handle: Any) -> str | None: ...

    def join(self, handle: Any, timeout: float | None = None) -> None: ...

    def capacity(self) -> int: ...

    def close(self) -> None: ...


class LocalBackend:
    """Pods as processes on this machine, started with ``spawn`` (no state forked from the
    driver, safe with threads and CUDA), each with its own torch thread count."""

    def __init__(self, threads: int = 1) -> None:
        self.ctx = mp.get_context("spawn")
        self.threads = threads

    def start(self, spec: PodSpec) -> mp.process.BaseProcess:
        spec = dataclasses.replace(spec, parent_pid=os.getpid())
        process = self.ctx.Process(target=pod_main, args=(spec,), name=f"podracer-pod-{spec.pod_id}", daemon=True)
        process.start()
        return process

    def poll(self, handle: mp.process.BaseProcess) -> int | None:
        return handle.exitcode  # negative: killed by that signal (-9 for SIGKILL)

    def kill(self, handle: mp.process.BaseProcess) -> None:
        if handle.exitcode is None:
            handle.kill()

    def fault(self, handle: mp.process.BaseProcess) -> None:
        """None: a pod process on this machine has no node to lose apart from the driver's own."""
        return None

    def join(self, handle: mp.process.BaseProcess, timeout: float | None = None) -> None:
        handle.join(timeout)

    def capacity(self) -> int:
        """This machine's CPUs over the threads each pod uses (at least one pod)."""
        return max(1, (os.cpu_count() or 1) // self.threads)

    def close(self) -> None:
        """Nothing held beyond the processes, which the tournament joins or kills itself."""


RAY_INSTALL = 'pip install "podracer-rl[cluster]"'


SPAWNED_SCRIPT = (
    "a pod process ran the tournament again: pods start with multiprocessing's spawn, which imports the script "
    "that started the run once more (as __mp_main__), and this script runs a tournament when imported. Put the "
    "code that runs it under `if __name__ == \"__main__\":`, e.g.\n\n"
    "    if __name__ == \"__main__\":\n        board = tournament.run()\n")


def check_not_spawning() -> None:
    """Raise the fix when this process is a pod that spawn is starting, re-running the user's script
    (its ``run()`` would find the driver's lock held and say only that)."""
    if getattr(mp.current_process(), "_inheriting", False):  # set by spawn while it imports the main module
        raise RuntimeError(SPAWNED_SCRIPT)


def check_backend(name: str) -> None:
    """Fail now, with the fix, if backend ``name`` is unknown or cannot run here (Ray missing)."""
    if name == "ray":
        _ray_backend()
    elif name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; use one of {BACKENDS}")


def make_backend(config: TournamentConfig, store: str | Path) -> Backend:
    """The backend ``config.backend`` for a run on ``store``; ``close()`` it when the run ends."""
    check_backend(config.backend)
    if config.backend == "ray":
        return _ray_backend().RayBackend(config, store)
    return LocalBackend(config.threads)


def _ray_backend() -> Any:
    try:
        import ray  # noqa: F401
    except ImportError as e:
        raise ImportError(f"backend='ray' needs Ray, which is not installed here ({e}); install the cluster "
                          f"extra: {RAY_INSTALL}") from e
    from podracer.tournament import ray_backend

    return ray_backend
