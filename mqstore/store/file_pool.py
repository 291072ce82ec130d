"""A bound on how many small store files are open at once.

A store with 50,000 topics x 4 queues has 200,000 consume-queue directories; keeping
a descriptor (and, worse, a memory map) per file open would break the default limits
(1,024 open files, 65,530 maps). Consume-queue files are therefore ``PooledFile``s:
no memory map at all (``pread``/``pwrite``), and a descriptor that the ``FilePool``
opens on use and closes, least recently used first, when more than ``max_open`` are
open. A file in use is pinned and never closed under its user.

Who calls what: any thread may use any pooled file; the pool's lock only guards its
bookkeeping (open, pin, evict), never the I/O itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

import structlog

from mqstore.errors import CorruptFileError, StoreClosedError
from mqstore.store.mapped_file import create_sized_file

log = structlog.get_logger(__name__)

_libc = ctypes.CDLL(None, use_errno=True)
_fallocate = _libc.fallocate
_fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
_PUNCH_HOLE_KEEP_SIZE = 0x02 | 0x01


class FilePool:
    """Keeps at most ``max_open`` pooled files open (see the module docstring)."""

    def __init__(self, max_open: int = 256) -> None:
        if max_open < 1:
            raise ValueError(f"max_open must be >= 1, got {max_open}")
        self.max_open = max_open
        self._lock = threading.Lock()
        self._open: OrderedDict[PooledFile, None] = OrderedDict()  # LRU order, oldest first
        self.opened = 0  # how many times a descriptor was opened (tests and stats)
        self.peak_open = 0

    @property
    def open_count(self) -> int:
        return len(self._open)

    def _pin(self, f: PooledFile) -> int:
        with self._lock:
            if f._fd < 0:
                if f._deleted:
                    raise StoreClosedError(f"{f.path} was closed")
                self._evict_for_one()
                f._fd = os.open(f.path, os.O_RDWR)
                self.opened += 1
            self._open[f] = None
            self._open.move_to_end(f)
            self.peak_open = max(self.peak_open, len(self._open))
            f._pins += 1
            return f._fd

    def _unpin(self, f: PooledFile) -> None:
        with self._lock:
            f._pins -= 1

    def _evict_for_one(self) -> None:
        """Close least recently used, unpinned files until one more fits."""
        pinned = []
        while len(self._open) + len(pinned) >= self.max_open and self._open:
            victim, _ = self._open.popitem(last=False)  # least recently used
            if victim._pins:
                pinned.append(victim)
                continue
            os.close(victim._fd)
            victim._fd = -1
        for f in pinned:  # in use right now: keep them, as the most recent
            self._open[f] = None
        if len(self._open) >= self.max_open:
            # Everything is pinned: go over the bound rather than deadlock.
            log.warning("file_pool_over_bound", open=len(self._open), max_open=self.max_open)

    def _forget(self, f: PooledFile) -> None:
        with self._lock:
            self._open.pop(f, None)
            if f._fd >= 0:
                os.close(f._fd)
                f._fd = -1

    def close_all(self) -> None:
        with self._lock:
            for f in list(self._open):
                if f._fd >= 0:
                    os.close(f._fd)
                    f._fd = -1
            self._open.clear()


class PooledFile:
    """A fixed-size, pre-allocated file read and written with pread/pwrite through a
    ``FilePool``. Same surface as ``mapped_file.Segment`` for the consume queues."""

    def __init__(self, path: Path, base_offset: int, size: int, pool: FilePool) -> None:
        self.path = path
        self.base_offset = base_offset
        self.size = size
        self._pool = pool
        self._fd = -1
        self._pins = 0
        self._deleted = False

    @classmethod
    def create(
        cls, path: Path, base_offset: int, size: int, pool: FilePool, *, preallocate: bool = True, sync_dir: bool = True
    ) -> PooledFile:
        """Create a zero-filled file under ``.tmp`` and rename it into place (a crash
        midway never leaves a file of the wrong size). With ``sync_dir=False`` the
        caller makes the directory entry durable later (one fsync for many files)."""
        create_sized_file(path, size, preallocate=preallocate, sync_dir=sync_dir)
        return cls(path, base_offset, size, pool)

    @classmethod
    def open(cls, path: Path, base_offset: int, size: int, pool: FilePool) -> PooledFile:
        """An existing file of exactly ``size`` bytes (nothing is opened yet)."""
        actual = path.stat().st_size
        if actual != size:
            raise CorruptFileError(f"{path}: file has {actual} bytes, expected {size}")
        return cls(path, base_offset, size, pool)

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.size

    @property
    def closed(self) -> bool:
        return self._deleted

    @contextlib.contextmanager
    def _fd_in_use(self) -> Iterator[int]:
        fd = self._pool._pin(self)
        try:
            yield fd
        finally:
            self._pool._unpin(self)

    def read(self, pos: int, n: int) -> bytes:
        with self._fd_in_use() as fd:
            return os.pread(fd, n, pos)

    def write(self, pos: int, data: bytes) -> None:
        with self._fd_in_use() as fd:
            if os.pwrite(fd, data, pos) != len(data):
                raise OSError(f"short write to {self.path.name} at {pos}")

    def sync(self, start: int = 0, end: int | None = None) -> None:
        """fdatasync (the files are small; a range buys nothing here)."""
        with self._fd_in_use() as fd:
            os.fdatasync(fd)

    def zero_from(self, pos: int) -> None:
        if pos >= self.size:
            return
        with self._fd_in_use() as fd:
            if _fallocate(fd, _PUNCH_HOLE_KEEP_SIZE, pos, self.size - pos) == 0:
                os.posix_fallocate(fd, pos, self.size - pos)
            else:
                os.pwrite(fd, bytes(self.size - pos), pos)

    def close(self) -> None:
        self._deleted = True
        self._pool._forget(self)

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


__all__ = ["FilePool", "PooledFile"]
