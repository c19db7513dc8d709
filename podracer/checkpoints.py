"""Checkpoint files a crash can never half-write, and a load that never trusts a damaged one.

The one checkpoint writer of Podracer: ``AgentBase.save`` / ``AgentBase.load`` and the
tournament's leaderboard both go through ``write`` and ``read``.

A checkpoint is ``AgentBase.checkpoint()``: tensors and plain Python values only, written with
``torch.save`` and read back with ``torch.load(..., weights_only=True)`` so that loading never
unpickles arbitrary objects. Writing goes to a temporary file that is fsynced, then renamed over
the final name (atomic on POSIX), then the directory is fsynced: a reader sees either nothing or
the whole file. The sha256 of the bytes is returned so the leaderboard can record it; ``read``
recomputes it and refuses a file whose bytes changed (truncated, bit-flipped, overwritten).
"""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import Any

import torch


class CheckpointError(RuntimeError):
    """A checkpoint is missing, truncated, altered (checksum mismatch) or unreadable."""


class CheckpointMissingError(CheckpointError, FileNotFoundError):
    """The checkpoint file does not exist (or cannot be opened). Missing is not corrupt: the file
    may come back (a restored backup, a slow network filesystem), so callers must not flag it."""


def dumps(ckpt: dict[str, Any]) -> tuple[bytes, str]:
    """``(bytes, sha256 hex digest)`` of ``ckpt`` as ``write`` stores it: what travels between
    machines (the Ray backend) is exactly what lands on disk."""
    buffer = io.BytesIO()
    torch.save(ckpt, buffer)
    data = buffer.getvalue()
    return data, hashlib.sha256(data).hexdigest()


def loads(data: bytes, checksum: str | None = None, device: str | torch.device = "cpu",
          source: str = "<bytes>") -> dict[str, Any]:
    """Inverse of ``dumps``: with ``checksum``, refuse bytes whose sha256 differs; refuse anything
    ``torch.load(weights_only=True)`` rejects or that is not an agent checkpoint. ``source`` names
    where the bytes came from in the error."""
    if checksum is not None:
        actual = hashlib.sha256(data).hexdigest()
        if actual != checksum:
            raise CheckpointError(f"checkpoint {source} fails its checksum (sha256 {actual[:12]}..., "
                                  f"recorded {checksum[:12]}...): truncated or altered on disk or in transit")
    try:
        ckpt = torch.load(io.BytesIO(data), map_location=device, weights_only=True)
    except Exception as e:  # any unpickling error means the same thing here: unusable bytes
        raise CheckpointError(f"checkpoint {source} cannot be loaded: not a file written by agent.save, podracer "
                              f"train or a tournament, or damaged ({type(e).__name__}: {e})") from e
    if not isinstance(ckpt, dict) or "state" not in ckpt:
        raise CheckpointError(f"checkpoint {source} is not an agent checkpoint (no 'state' key)")
    return ckpt


def write(ckpt: dict[str, Any], path: str | Path) -> str:
    """Atomically write ``ckpt`` to ``path``; return the sha256 hex digest of the file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data, digest = dumps(ckpt)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)  # make the rename itself durable, not only the bytes
    return digest


def read(path: str | Path, checksum: str | None = None, device: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint written by ``write``; with ``checksum``, verify it first.

    Raises ``CheckpointMissingError`` when the file is missing or unreadable, and
    ``CheckpointError`` (never returns a partly valid object) when its sha256 differs from
    ``checksum`` or ``torch.load(weights_only=True)`` rejects it.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError as e:
        raise CheckpointMissingError(f"checkpoint {path} does not exist; check the path (a directory of "
                                     f"runs keeps them under <log_dir>/checkpoints/)") from e
    except OSError as e:
        raise CheckpointMissingError(f"cannot read checkpoint {path}: {e}") from e
    return loads(data, checksum, device, source=str(path))


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # some platforms (Windows) cannot open directories; the rename is still atomic
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
