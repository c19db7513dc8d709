"""Where pods run. A backend starts a pod from a ``PodSpec``, says whether it is still running,
and kills it; everything else (budget, selection, stop requests, errors) goes through the
leaderboard store, so a backend stays this small.

The interface, for anyone adding one::

    class Backend(Protocol):
        def start(self, spec: PodSpec) -> Handle   # run pod_main(spec) somewhere, return at once
        def poll(self, handle) -> int | None       # None while running, else an exit code
        def kill(self, handle) -> None             # stop now; the pod loses its current generation
        def join(self, handle, timeout) -> None    # wait for it to end (up to timeout seconds)
        def close(self) -> None                    # release the backend's own resources

A Ray backend would implement it with ``ray.remote(pod_main).options(num_cpus=spec.threads,
num_gpus=...).remote(spec)``: ``poll`` maps to ``ray.wait([ref], timeout=0)`` (0 after a clean
return, 1 on a task error), ``kill`` to ``ray.cancel(ref, force=True)``. It needs the store on a
filesystem every node shares, with working POSIX locks for SQLite (not NFS), or the leaderboard
behind a small server; that is why it is not here yet. User code does not change:
``Tournament(..., backend="ray")``.
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
from typing import Any, Protocol

from podracer.tournament.pod import PodSpec, pod_main


class Backend(Protocol):
    def start(self, spec: PodSpec) -> Any: ...

    def poll(self, handle: Any) -> int | None: ...

    def kill(self, handle: Any) -> None: ...

    def join(self, handle: Any, timeout: float | None = None) -> None: ...

    def close(self) -> None: ...


class LocalBackend:
    """Pods as processes on this machine, started with ``spawn`` (no state forked from the
    driver, safe with threads and CUDA), each with its own torch thread count."""

    def __init__(self) -> None:
        self.ctx = mp.get_context("spawn")

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

    def join(self, handle: mp.process.BaseProcess, timeout: float | None = None) -> None:
        handle.join(timeout)

    def close(self) -> None:
        """Nothing held beyond the processes, which the tournament joins or kills itself."""


def make_backend(name: str) -> Backend:
    if name == "local":
        return LocalBackend()
    if name == "ray":
        raise NotImplementedError("the Ray backend is not implemented yet; use backend='local'. The interface it "
                                  "will implement is documented in podracer/tournament/backends.py")
    raise ValueError(f"unknown backend {name!r}; use 'local'")
