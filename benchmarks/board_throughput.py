"""How many pods one leaderboard serves: checkpoint bytes and submit latency as pods and checkpoint size grow.

What it measures
----------------
Simulated pods, no training: each pod is a thread that runs ``--generations`` generations back
to back, each one what a real pod asks of the board per generation: ``claim`` a ticket, ``top(5)``,
fetch the best entry's checkpoint bytes (its parent) and ``submit`` a checkpoint of ``--sizes``
MB (a ``torch.save`` of random bytes, so nothing compresses). With no training between calls the
board is saturated: the generations per second it sustains is its capacity. Paths (``--paths``):

- ``server``: the Ray backend's ``LeaderboardServer`` (the actor on the head node) called directly
  from the pod threads, at most 8 calls at once (the actor's ``max_concurrency``); each pod's
  bytes are serialised before the clock starts, since a real pod does that on its own node. This
  is the head's own work per generation: verify the sha256, ``torch.load(weights_only=True)``,
  write and fsync the file, commit the row; read the parent's file;
- ``ray``: the same actor through Ray (a local instance), the bytes through the object store,
  as pods on the head's node see it;
- ``local``: the local backend's path: each pod writes its checkpoint file itself and commits its
  row in the shared SQLite file (no server; one machine only);
- ``record``: with ``storage_path``, from ``storage_direct_bytes`` on a pod writes its checkpoint
  to the storage itself and reads its parents from there; the server only checks that the file is
  there with its size and commits the row (``LeaderboardServer.record``). The pods' writes happen
  on their own nodes, so here each pod writes its file once before the clock starts and every
  generation records it again: what is timed is the head's work, which no longer grows with the
  checkpoint's size.

Reported per (path, pods, size): ``gens_per_s`` (generations the board completed per second, all
pods together), ``MB_per_s`` (checkpoint bytes in, parents' bytes out, through the head), submit
latency ``p50_ms`` / ``p95_ms``, ``head_ms``: seconds spent inside the server's methods per
generation (summed over its threads; the local path has no head: the pods' own board calls), and
``pods_at_60s``: how many pods whose generations take 60 s (training plus evaluation) this board
serves before it is the bottleneck, ``60 * gens_per_s`` at saturation.
That is a straight extrapolation of one machine's numbers: a real head also carries the network
(at 10 Gb/s, 1.25 GB/s in and out, which the ``MB_per_s`` column can be held against), and pods on
other nodes add the transfer time to each call's latency, not to the head's work.

How to run
----------
``.venv/bin/python benchmarks/board_throughput.py`` (about 2 minutes on 2 cores); ``--pods 1 4
16 64 --sizes 0.1 10 100``; ``--paths server local``; ``--store /some/disk`` to measure that
disk (the default is a temporary folder). The ``ray`` path needs ``pip install "podracer-rl[cluster]"``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import torch

from podracer import checkpoints
from podracer.tournament import Leaderboard
from podracer.tournament.storage import DIRECT_BYTES, STORAGE_KEY, Storage

SERVER_CONCURRENCY = 8  # ray_backend's LeaderboardServer: max_concurrency=8


def fake_checkpoint(nbytes: int, seed: int) -> dict[str, Any]:
    """An agent checkpoint of about ``nbytes`` incompressible bytes."""
    generator = torch.Generator().manual_seed(seed)
    blob = torch.randint(0, 256, (max(nbytes, 1),), dtype=torch.uint8, generator=generator)
    return {"agent": "ppo", "config": {}, "state": {"blob": blob}}


class Pods:
    """``pods`` threads, each running ``generations`` simulated generations against ``board``
    (anything with ``claim``, ``top``, ``parent_bytes``, ``submit``); collects submit latencies."""

    def __init__(self, board: Any, pods: int, generations: int):
        self.board, self.pods, self.generations = board, pods, generations
        self.latencies: list[float] = []
        self.bytes = 0
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()

    def run(self) -> float:
        threads = [threading.Thread(target=self._pod, args=(i,)) for i in range(self.pods)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if self.errors:
            raise self.errors[0]
        return time.perf_counter() - start

    def _pod(self, index: int) -> None:
        try:
            pod = self.board.register_pod()
            for g in range(self.generations):
                ticket = self.board.claim(pod)
                top = self.board.top(5)
                parent = self.board.parent_bytes(top[0].id) if top else 0
                start = time.perf_counter()
                sent = self.board.submit(index, g, pod, ticket)
                with self._lock:
                    self.latencies.append(time.perf_counter() - start)
                    self.bytes += parent + sent
        except BaseException as e:  # reported by run()
            self.errors.append(e)


class LocalBoard:
    """The local backend: every pod writes its own checkpoint file into the shared store."""

    def __init__(self, store: Path, nbytes: int, pods: int):
        self.board = Leaderboard(store)
        self.ckpts = [fake_checkpoint(nbytes, i) for i in range(pods)]
        self.register_pod, self.claim, self.top = self.board.register_pod, self.board.claim, self.board.top

    def parent_bytes(self, entry_id: int) -> int:
        return len((self.board.store / self.board.get(entry_id).checkpoint).read_bytes())

    def submit(self, index: int, generation: int, pod: int, ticket: int) -> int:
        entry = self.board.submit(self.ckpts[index], float(generation), pod=pod, ticket=ticket)
        return (self.board.store / entry.checkpoint).stat().st_size


class ServerBoard:
    """The head's ``LeaderboardServer``, called as its actor would be (``call`` runs one call:
    directly with at most 8 at once, or through Ray). ``direct``: checkpoints go to ``storage``
    from the pod, the server only records them."""

    def __init__(self, call: Callable[..., Any], nbytes: int, pods: int, storage: Storage | None = None):
        self.call, self.storage = call, storage
        self.payloads = [checkpoints.dumps(fake_checkpoint(nbytes, i)) for i in range(pods)]

    def register_pod(self) -> int:
        return self.call("register_pod")

    def claim(self, pod: int) -> int | None:
        return self.call("claim", pod)

    def top(self, k: int) -> list[Any]:
        return self.call("top", k)

    def parent_bytes(self, entry_id: int) -> int:
        if self.storage is not None:  # the pod reads its parent from storage: nothing through the head
            return 0
        return len(self.call("checkpoint_bytes", entry_id))

    def submit(self, index: int, generation: int, pod: int, ticket: int) -> int:
        data, checksum = self.payloads[index]
        if self.storage is None:
            self.call("submit", data, checksum, float(generation), pod=pod, ticket=ticket)
            return len(data)
        rel = f"checkpoints/direct-{index:03d}.pt"
        if generation == 0:  # a real pod writes every generation's file on its own node; see the docstring
            self.storage.write_bytes(rel, data)
        self.call("record", rel, checksum, len(data), float(generation), agent_name="ppo", pod=pod, ticket=ticket)
        return 0


class DirectCall:
    """Calls ``server``'s methods from many threads, at most ``SERVER_CONCURRENCY`` at once (the
    actor's pool), and adds up the time spent inside them (``busy``)."""

    def __init__(self, server: Any):
        self.server, self.busy = server, 0.0
        self._slots, self._lock = threading.BoundedSemaphore(SERVER_CONCURRENCY), threading.Lock()

    def __call__(self, method: str, *args: Any, **kwargs: Any) -> Any:
        with self._slots:
            start = time.perf_counter()
            try:
                return getattr(self.server, method)(*args, **kwargs)
            finally:
                with self._lock:
                    self.busy += time.perf_counter() - start


def ray_call(store: Path) -> tuple[Callable[..., Any], Callable[[], None]]:
    """(call, close): the server as a Ray actor with the backend's options, called through Ray."""
    import ray

    actor = ray.remote(_BenchServer).options(num_cpus=0, max_concurrency=SERVER_CONCURRENCY).remote(str(store))
    ray.get(actor.ping.remote())

    def call(method: str, *args: Any, **kwargs: Any) -> Any:
        return ray.get(actor.call.remote(method, *args, **kwargs))
    return call, lambda: ray.kill(actor)


class _BenchServer:
    """``LeaderboardServer`` plus ``register_pod`` (the driver's call in a real run), as one actor."""

    def __init__(self, store: str):
        from podracer.tournament.ray_backend import LeaderboardServer

        self.server = LeaderboardServer(store)

    def ping(self) -> str:
        return self.server.ping()

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        target = self.server.board if method == "register_pod" else self.server
        return getattr(target, method)(*args, **kwargs)


def measure(path: str, pods: int, size_mb: float, generations: int, root: Path) -> dict[str, Any]:
    nbytes = int(size_mb * 1e6)
    with tempfile.TemporaryDirectory(dir=root, prefix=f"board-{path}-") as tmp:
        store = Path(tmp) / "store"
        close = lambda: None  # noqa: E731
        if path == "local":
            board: Any = LocalBoard(store, nbytes, pods)
        elif path == "ray":
            call, close = ray_call(store)
            board = ServerBoard(call, nbytes, pods)
        else:
            from podracer.tournament.ray_backend import LeaderboardServer

            server = LeaderboardServer(str(store))
            server.register_pod = server.board.register_pod  # the driver's call in a real run
            storage = Storage((Path(tmp) / "storage").as_uri()) if path == "record" else None
            if storage is not None:  # what StorageSync records when a run with storage_path starts
                server.board.set_meta(STORAGE_KEY, storage.uri)
            call = DirectCall(server)
            board = ServerBoard(call, nbytes, pods, storage)
        try:
            runner = Pods(board, pods, generations)
            wall = runner.run()
        finally:
            close()
        lat = sorted(runner.latencies)
        gens = len(lat)
        busy = getattr(call, "busy", None) if path in ("server", "record") else None
        return {"path": path, "pods": pods, "size_MB": size_mb, "generations": gens, "wall_s": round(wall, 2),
                "gens_per_s": round(gens / wall, 1), "MB_per_s": round(runner.bytes / 1e6 / wall, 1),
                "p50_ms": round(1e3 * statistics.median(lat), 1), "p95_ms": round(1e3 * lat[int(0.95 * (gens - 1))], 1),
                "head_ms": None if busy is None else round(1e3 * busy / gens, 1), "pods_at_60s": int(60 * gens / wall)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paths", nargs="+", choices=("server", "ray", "local", "record"),
                        default=["server", "record", "local"])
    parser.add_argument("--pods", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--sizes", type=float, nargs="+", default=[0.1, 10, 100], help="checkpoint MB")
    parser.add_argument("--generations", type=int, default=None,
                        help="per pod (default: as many as keep each run within --budget-mb, 2 to 16)")
    parser.add_argument("--budget-mb", type=float, default=1000,
                        help="checkpoint MB one run aims at; a run that would need over 4x this is skipped")
    parser.add_argument("--store", default=None, help="folder for the temporary stores (default: the temp dir)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    root = Path(args.store or tempfile.gettempdir())
    rows = []
    if "ray" in args.paths:
        import ray

        ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    print(f"direct-to-storage threshold (storage.DIRECT_BYTES): {DIRECT_BYTES / 1e6:g} MB")
    for path in args.paths:
        for size in args.sizes:
            for pods in args.pods:
                generations = args.generations or max(2, min(16, int(args.budget_mb / max(size, 1e-3) / pods)))
                if pods * generations * size > 4 * args.budget_mb:
                    print(f"skipped {path}, {pods} pods of {size:g} MB: over 4x --budget-mb", flush=True)
                    continue
                rows.append(measure(path, pods, size, generations, root))
                print(pd.DataFrame(rows[-1:]).to_string(index=False, header=len(rows) == 1), flush=True)
    print()
    print(pd.DataFrame(rows).to_markdown(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
