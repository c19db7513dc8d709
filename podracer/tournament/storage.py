"""Storage that outlives the head node: a tournament's store mirrored to a ``pyarrow.fs`` URI.

The store a driver writes lives on its own disk (SQLite wants a local filesystem: its locks do
not hold on network filesystems or object stores). With ``storage_path`` set, as Ray Train and
Tune do it, the driver mirrors the store to a URI on any ``pyarrow.fs`` filesystem: a local path
or ``file://`` (a shared mount), ``s3://bucket/path`` (``?endpoint_override=host:9000&scheme=http``
for MinIO and other S3-compatible servers; credentials from the usual AWS variables), ``gs://``,
or any fsspec protocol pyarrow lacks (through ``pyarrow.fs.PyFileSystem(FSSpecHandler(...))``).
Under the URI the store keeps its own layout::

    <storage_path>/board.sqlite        the latest snapshot, replaced whole at each sync
    <storage_path>/checkpoints/*.pt    every checkpoint, uploaded once (a checkpoint never changes)
    <storage_path>/tournament.yaml     the config, for Tournament.from_store(<storage_path>)

A sync first takes the snapshot (SQLite's online backup: pods keep writing meanwhile), then
uploads the checkpoints not uploaded yet, then the snapshot, each through a temporary name moved
into place: a snapshot in storage never names a checkpoint that is not there, and a reader sees
the old snapshot or the new one. ``StorageSync`` syncs every ``storage_sync_s`` seconds from a
thread of the driver and once more when the run ends; a failed sync (the network, say) is warned
about and tried again, it does not stop the pods. A driver killed with its head node loses at
most the entries since the last sync: ``Tournament.from_store(<storage_path>)`` on a new head
downloads the snapshot and the checkpoints it names into a local working store (``restore``) and
resumes the run, which trains the lost generations again: the board still ends at its budget.

Big checkpoints skip the head (``DirectCheckpoints``): under the Ray backend a pod writes a
checkpoint of ``storage_direct_bytes`` or more to the storage itself and the head only records
its row (``Leaderboard.record``); pods read parents from the storage first, and a board whose
local file is missing reads it from its storage (``Leaderboard.checkpoint_bytes``). docs/storage.md
has the measurements behind the threshold.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
import threading
import uuid
import warnings
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from podracer.tournament import schema

SNAPSHOT = "board.sqlite"
CONFIG = "tournament.yaml"
CHECKPOINTS = "checkpoints"
STORAGE_KEY = "storage_path"  # the board's meta key naming the URI it is mirrored to
DIRECT_KEY = "storage_direct_bytes"  # and the one holding the run's DirectCheckpoints.min_bytes
INSTALL = 'pip install "podracer-rl[cluster]" (or pip install pyarrow)'
_OPEN: dict[str, "Storage"] = {}  # cached(): one filesystem per URI and process
# A pod under the Ray backend writes a checkpoint of this size or more to the storage itself and
# the head only records its row (Leaderboard.record), when the run has a storage_path; smaller
# ones travel through the head's LeaderboardServer. benchmarks/board_throughput.py measured why.
DIRECT_BYTES = 8 * 2**20


class MirroredBoard(Protocol):
    """What mirroring needs of a ``Leaderboard`` (which imports this module, so it is not named here)."""

    store: Path
    checkpoint_dir: Path

    def backup(self, dest: str | Path) -> Path: ...

    def meta(self, key: str) -> Any: ...

    def set_meta(self, key: str, value: Any) -> None: ...


def checkpoint_name(generation: int, pod: int) -> str:
    """A new checkpoint's path in a store (and its storage): unique, and it says whose it is."""
    return f"{CHECKPOINTS}/g{generation:04d}-p{pod:03d}-{uuid.uuid4().hex[:12]}.pt"


@dataclasses.dataclass(frozen=True)
class DirectCheckpoints:
    """A pod's side of checkpoints that bypass the head node (Ray backend with a ``storage_path``):
    the pod writes a checkpoint of ``min_bytes`` or more to storage itself and reads its parents
    from there; ``uri=None``: everything goes through the head. Picklable: it travels to pods."""

    uri: str | None = None
    min_bytes: int = DIRECT_BYTES

    def write(self, data: bytes, generation: int, pod: int) -> str | None:
        """Write ``data`` to storage and return its path in the store when it is big enough;
        ``None``: send it to the head instead."""
        if self.uri is None or len(data) < self.min_bytes:
            return None
        rel = checkpoint_name(generation, pod)
        cached(self.uri).write_bytes(rel, data)
        return rel

    def read(self, rel: str) -> bytes | None:
        """The checkpoint's bytes from storage; ``None`` when it is not there (not synced yet): ask the head."""
        if self.uri is None:
            return None
        try:
            return cached(self.uri).read_bytes(rel)
        except OSError:
            return None


def is_uri(store: str | Path) -> bool:
    """True for a storage URI (``s3://...``, ``file:///...``), False for a local path."""
    return isinstance(store, str) and "://" in store


class Storage:
    """A folder on a ``pyarrow.fs`` filesystem, named by ``uri``; ``filesystem`` overrides the
    one the URI names (then ``uri`` is the path on it), e.g. ``pyarrow.fs.PyFileSystem(
    pyarrow.fs.FSSpecHandler(fsspec_fs))`` for an fsspec filesystem built with options."""

    def __init__(self, uri: str | Path, filesystem: Any = None):
        self.uri = str(uri)
        self.fs, self.root = (filesystem, self.uri.rstrip("/")) if filesystem is not None else resolve(self.uri)
        self._uploaded: set[str] | None = None  # checkpoint names known to be in storage; listed once

    def __repr__(self) -> str:
        return f"Storage({self.uri!r})"

    def _path(self, rel: str) -> str:
        return f"{self.root}/{rel}"

    # ------------------------------------------------------------------------ files
    def exists(self, rel: str) -> bool:
        from pyarrow import fs as pafs

        return self.fs.get_file_info(self._path(rel)).type == pafs.FileType.File

    def listdir(self, rel: str) -> set[str]:
        """Names of the files directly under ``rel`` (empty when it does not exist)."""
        from pyarrow import fs as pafs

        infos = self.fs.get_file_info(pafs.FileSelector(self._path(rel), allow_not_found=True))
        return {info.base_name for info in infos if info.type == pafs.FileType.File}

    def size(self, rel: str) -> int | None:
        """The size of the file ``rel`` in bytes; ``None`` when it is not there."""
        from pyarrow import fs as pafs

        info = self.fs.get_file_info(self._path(rel))
        return info.size if info.type == pafs.FileType.File else None

    def delete(self, rel: str) -> None:
        """Remove the file ``rel`` if it is there."""
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_file(self._path(rel))

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Write ``data`` to ``rel`` through a temporary name moved into place (a whole object or none)."""
        part = self._part(rel)
        with self.fs.open_output_stream(part) as f:
            f.write(data)
        self.fs.move(part, self._path(rel))

    def read_bytes(self, rel: str) -> bytes:
        try:
            with self.fs.open_input_file(self._path(rel)) as f:
                return f.read()
        except FileNotFoundError as e:
            raise FileNotFoundError(f"{self.uri}/{rel} does not exist ({e})") from e

    def upload(self, local: str | Path, rel: str) -> int:
        """Copy the local file to ``rel`` (through a temporary name); return its size."""
        from pyarrow import fs as pafs

        part = self._part(rel)
        pafs.copy_files(str(Path(local).resolve()), part, source_filesystem=pafs.LocalFileSystem(),
                        destination_filesystem=self.fs)
        self.fs.move(part, self._path(rel))
        return Path(local).stat().st_size

    def download(self, rel: str, local: str | Path) -> Path:
        """Copy ``rel`` to the local file, atomically (a temporary name, then a rename)."""
        from pyarrow import fs as pafs

        local = Path(local)
        local.parent.mkdir(parents=True, exist_ok=True)
        tmp = local.with_name(f".{local.name}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            pafs.copy_files(self._path(rel), str(tmp.resolve()), source_filesystem=self.fs,
                            destination_filesystem=pafs.LocalFileSystem())
            os.replace(tmp, local)
        finally:
            tmp.unlink(missing_ok=True)
        return local

    def _part(self, rel: str) -> str:
        parent, name = PurePosixPath(rel).parent, PurePosixPath(rel).name
        self.fs.create_dir(self._path(str(parent)) if str(parent) != "." else self.root, recursive=True)
        return self._path(str(parent / f".{name}.{uuid.uuid4().hex[:8]}.part"))

    # ------------------------------------------------------------------------ the store
    def push(self, board: MirroredBoard) -> dict[str, int]:
        """Mirror ``board``'s store here: snapshot, new checkpoints, config, then the snapshot.
        Returns ``{"checkpoints": uploaded now, "bytes": their bytes and the snapshot's}``."""
        with tempfile.TemporaryDirectory(prefix="podracer-sync-") as tmp:
            snapshot = board.backup(Path(tmp) / SNAPSHOT)  # first: every row it holds has its file by now
            if self._uploaded is None:
                self._uploaded = self.listdir(CHECKPOINTS)
            new = sorted({p.name for p in board.checkpoint_dir.glob("*.pt")} - self._uploaded)
            sent = 0
            for name in new:
                sent += self.upload(board.checkpoint_dir / name, f"{CHECKPOINTS}/{name}")
                self._uploaded.add(name)
            if (board.store / CONFIG).exists():
                self.upload(board.store / CONFIG, CONFIG)
            sent += self.upload(snapshot, SNAPSHOT)
        return {"checkpoints": len(new), "bytes": sent}


def resolve(uri: str) -> tuple[Any, str]:
    """``(pyarrow filesystem, path on it)`` for a URI or a local path; fsspec protocols that
    pyarrow does not know go through ``PyFileSystem(FSSpecHandler(...))``."""
    try:
        from pyarrow import fs as pafs
    except ImportError as e:
        raise ImportError(f"storage_path needs pyarrow ({e}): {INSTALL}") from e
    if not is_uri(uri):
        return pafs.LocalFileSystem(), Path(uri).expanduser().resolve().as_posix()
    try:
        filesystem, path = pafs.FileSystem.from_uri(uri)
        return filesystem, path.rstrip("/")
    except Exception as arrow_error:  # pyarrow.ArrowInvalid for a scheme it lacks; try fsspec's
        return _fsspec(uri, arrow_error)


def _fsspec(uri: str, arrow_error: Exception) -> tuple[Any, str]:
    from pyarrow import fs as pafs

    protocol = uri.split("://", 1)[0]
    try:
        import fsspec

        filesystem = fsspec.filesystem(protocol)
    except (ImportError, ValueError) as e:
        raise ValueError(f"storage_path {uri!r}: neither pyarrow ({arrow_error}) nor fsspec ({e}) knows the "
                         f"scheme {protocol!r}; use a local path, file://, s3://, gs://, or install the fsspec "
                         f"package for {protocol}://") from e
    return pafs.PyFileSystem(pafs.FSSpecHandler(filesystem)), filesystem._strip_protocol(uri).rstrip("/")


def open_storage(storage_path: str | None, sync_s: float) -> Storage | None:
    """The ``Storage`` of a config's ``storage_path`` (``None`` when unset), checked now, not in ``run()``."""
    if storage_path is None:
        return None
    if not isinstance(storage_path, str) or not storage_path:
        raise ValueError(f"storage_path must be a URI or path string, got {storage_path!r}")
    if sync_s <= 0:
        raise ValueError(f"storage_sync_s must be > 0 seconds between syncs, got {sync_s}")
    return cached(storage_path)


def cached(uri: str) -> Storage:
    """``Storage(uri)``, made once per process (a board reading checkpoints from storage opens it often)."""
    if uri not in _OPEN:
        _OPEN[uri] = Storage(uri)
    return _OPEN[uri]


class StorageSync:
    """``with StorageSync(board, storage, every_s):`` pushes the store when entered (a storage that
    cannot be written fails the run before any pod starts), every ``every_s`` seconds from a
    daemon thread, and when left. It also records in the board where its storage is and from
    which size pods write checkpoints there themselves (``direct_bytes``, ``DirectCheckpoints``).
    ``storage=None``: does nothing."""

    def __init__(self, board: MirroredBoard, storage: Storage | None, every_s: float = 60.0,
                 direct_bytes: int = DIRECT_BYTES):
        self.board, self.storage, self.every_s, self.direct_bytes = board, storage, every_s, direct_bytes
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one push at a time: the thread's and the final one
        self.pushes = 0

    def __enter__(self) -> "StorageSync":
        if self.storage is None:
            return self
        if self.board.meta(STORAGE_KEY) != self.storage.uri:
            self.board.set_meta(STORAGE_KEY, self.storage.uri)  # restore() checks it: whose copy this is
        if self.board.meta(DIRECT_KEY) != self.direct_bytes:
            self.board.set_meta(DIRECT_KEY, self.direct_bytes)
        self.push()
        self._thread = threading.Thread(target=self._loop, name="podracer-storage-sync", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.storage is None:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            self.push()
        except Exception as e:  # never hide the run's own error behind a storage one
            warnings.warn(f"the final sync to {self.storage.uri} failed ({type(e).__name__}: {e}); the store in "
                          f"{self.board.store} is complete: sync it again with Storage(uri).push(Leaderboard(store))",
                          RuntimeWarning, stacklevel=2)

    def push(self) -> dict[str, int]:
        assert self.storage is not None
        with self._lock:
            stats = self.storage.push(self.board)
            self.pushes += 1
            return stats

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.push()
            except Exception as e:  # storage down for a while: the pods go on, the next sync catches up
                warnings.warn(f"sync of {self.board.store} to {self.storage.uri} failed ({type(e).__name__}: {e}); "
                              f"trying again in {self.every_s:g} s", RuntimeWarning, stacklevel=1)


def restore(uri: str, local_store: str | Path | None = None) -> Path:
    """Download the store mirrored at ``uri`` into ``local_store`` (default ``runs/<last part of
    the URI>``) and return that folder: the snapshot, the config and every checkpoint the
    snapshot names that is not there yet. A local store that is already a copy of ``uri`` is
    kept when it holds at least as many entries as the snapshot (it is the newer one)."""
    storage = cached(uri)
    if not storage.exists(SNAPSHOT):
        raise FileNotFoundError(f"no {SNAPSHOT} under {uri}: nothing was synced there (check the URI, and that "
                                f"the run had storage_path={uri!r})")
    local = Path(local_store) if local_store is not None else Path("runs") / PurePosixPath(storage.root).name
    with tempfile.TemporaryDirectory(prefix="podracer-restore-") as tmp:
        snapshot = storage.download(SNAPSHOT, Path(tmp) / SNAPSHOT)
        with schema.read_file(snapshot) as db:
            remote_entries = schema.count_entries(db)
        if not _keep_local(local, uri, remote_entries):
            _replace_board(local, snapshot)
    if storage.exists(CONFIG):
        storage.download(CONFIG, local / CONFIG)
    with schema.read_file(local / SNAPSHOT) as db:
        names = schema.checkpoints(db)
    for rel in names:
        if not (local / rel).exists() and storage.exists(rel):
            storage.download(rel, local / rel)
    return local


def _keep_local(local: Path, uri: str, remote_entries: int) -> bool:
    """True when ``local`` holds a board that is a copy of ``uri`` at least as far along; an
    unrelated board there is refused rather than overwritten."""
    if not (local / SNAPSHOT).exists():
        return False
    with schema.read_file(local / SNAPSHOT) as db:
        mirrored = schema.meta(db, STORAGE_KEY)
    if mirrored != uri:
        raise ValueError(f"{local} holds another board (mirrored to {mirrored!r}, not {uri!r}); restore into an "
                         f"empty folder: Tournament.from_store({uri!r}, local_store='...')")
    with schema.read_file(local / SNAPSHOT) as db:
        return schema.count_entries(db) >= remote_entries


def _replace_board(local: Path, snapshot: Path) -> None:
    (local / CHECKPOINTS).mkdir(parents=True, exist_ok=True)
    for suffix in ("-wal", "-shm"):  # a stale log would be replayed into the new file
        (local / f"{SNAPSHOT}{suffix}").unlink(missing_ok=True)
    os.replace(snapshot, local / SNAPSHOT)
