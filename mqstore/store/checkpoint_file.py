"""Reading and writing ``<store>/checkpoint`` (layout in mqstore.formats.checkpoint).

Writes go to a temporary file that is fsynced and renamed over the old one, so a
crash mid-write leaves either the old or the new checkpoint, never a torn one.
"""

from __future__ import annotations

import os
from pathlib import Path

import structlog

from mqstore.errors import DecodeError
from mqstore.formats.checkpoint import Checkpoint
from mqstore.store import faults
from mqstore.store.mapped_file import fsync_dir, note_sync_failure

log = structlog.get_logger(__name__)
CHECKPOINT_FILE = "checkpoint"


def read_checkpoint(store_dir: Path) -> Checkpoint:
    """The stored checkpoint; all zeros (recover from the first file) if absent or unreadable."""
    path = store_dir / CHECKPOINT_FILE
    try:
        return Checkpoint.decode(path.read_bytes())
    except FileNotFoundError:
        return Checkpoint()
    except DecodeError as e:
        log.warning("checkpoint_unreadable", path=str(path), error=str(e))
        return Checkpoint()


def write_checkpoint(store_dir: Path, checkpoint: Checkpoint) -> None:
    """Replace the checkpoint (module docstring). Raises OSError if the disk fails
    (fault point "checkpoint.write"); the old checkpoint then stays in force."""
    path = store_dir / CHECKPOINT_FILE
    tmp = path.with_name(CHECKPOINT_FILE + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    faults.created(fd)
    try:
        faults.hit("checkpoint.write", tmp)
        os.write(fd, checkpoint.encode())
        os.fdatasync(fd)
    except OSError as e:
        note_sync_failure("checkpoint.write", tmp, e)
        os.close(fd)
        tmp.unlink(missing_ok=True)  # the old checkpoint stays in force
        raise
    os.close(fd)
    faults.synced(tmp)
    faults.hit("checkpoint.write.tmp", tmp)  # the new checkpoint is durable under .tmp; the old one still rules
    os.replace(tmp, path)
    fsync_dir(store_dir)


__all__ = ["CHECKPOINT_FILE", "read_checkpoint", "write_checkpoint"]
