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
import errno
import functools
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

import structlog

from mqstore.errors import StoreClosedError, StoreNotWritableError
from mqstore.store import faults
from mqstore.store.mapped_file import create_sized_file, fsync_dir, note_sync_failure

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
        self._opening = 0  # descriptors being opened outside the lock
        self._opened_one = threading.Condition(self._lock)  # a file in flight was installed

    @property
    def open_count(self) -> int:
        return len(self._open)

    def _pin(self, f: PooledFile) -> int:
        """f's descriptor, opened if needed, pinned until ``_unpin``. Opening and closing
        happen outside the lock: on a cold disk they wait for metadata reads, and many
        writer threads must not queue up behind one of them."""
        with self._lock:
            while f._in_flight:  # another thread is opening it: one descriptor per file, never two
                self._opened_one.wait()
            f._pins += 1
            if f._fd >= 0:
                self._open.move_to_end(f)
                return f._fd
            if f._deleted:
                f._pins -= 1
                raise StoreClosedError(f"{f.path} was closed")
            f._in_flight = True
            victims = self._make_room()
        try:
            self._close_fds(victims)
            fd = os.open(f._path, os.O_RDWR)
        except BaseException:
            with self._lock:
                f._pins -= 1
                self._opening -= 1
                f._in_flight = False
                self._opened_one.notify_all()
            raise
        self._install(f, fd)
        with self._lock:
            if f._fd < 0:  # deleted while we opened it
                f._pins -= 1
                raise StoreClosedError(f"{f.path} was closed")
            return f._fd

    @contextlib.contextmanager
    def transient(self) -> Iterator[None]:
        """Room for one descriptor the caller opens and closes itself (a file being
        created, a directory being fsynced), so those count against the bound too."""
        with self._lock:
            victims = self._make_room()
        try:
            self._close_fds(victims)
            yield
        finally:
            with self._lock:
                self._opening -= 1

    def _install(self, f: PooledFile, fd: int) -> None:
        with self._lock:
            self._opening -= 1
            if f._in_flight:
                f._in_flight = False
                self._opened_one.notify_all()
            if f._fd >= 0 or f._deleted:  # another thread opened it meanwhile, or it is gone
                os.close(fd)
                return
            f._fd = fd
            self._open[f] = None
            self.opened += 1
            self.peak_open = max(self.peak_open, len(self._open))

    def _unpin(self, f: PooledFile) -> None:
        with self._lock:
            f._pins -= 1

    def _make_room(self) -> list[int]:
        """Take least recently used, unpinned files off the open list until one more
        fits; returns their descriptors for the caller to close (lock held)."""
        pinned, victims = [], []
        self._opening += 1  # counted until _install: threads opening at once stay inside the bound
        while len(self._open) + len(pinned) + self._opening > self.max_open and self._open:
            victim, _ = self._open.popitem(last=False)  # least recently used
            if victim._pins:
                pinned.append(victim)
                continue
            victims.append(victim._fd)
            victim._fd = -1
        for f in pinned:  # in use right now: keep them, as the most recent
            self._open[f] = None
        self.peak_open = max(self.peak_open, len(self._open) + self._opening)
        if len(self._open) + self._opening > self.max_open:
            # Everything is pinned: go over the bound rather than deadlock.
            log.warning("file_pool_over_bound", open=len(self._open), max_open=self.max_open)
        return victims

    @staticmethod
    def _close_fds(fds: list[int]) -> None:
        for fd in fds:
            os.close(fd)

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

    def __init__(self, path: Path | str, base_offset: int, size: int, pool: FilePool, *, sparse: bool = False) -> None:
        self._path = os.fspath(path)  # a string: an open of 80,000 queues makes no Path it does not use
        self.sparse = sparse  # blocks are not reserved: zeroing punches holes and allocates nothing
        self.base_offset = base_offset
        self.size = size
        self._pool = pool
        self._fd = -1
        self._pins = 0
        self._in_flight = False  # a thread is opening its descriptor outside the pool's lock
        self._deleted = False

    @classmethod
    def create(
        cls,
        path: Path,
        base_offset: int,
        size: int,
        pool: FilePool,
        *,
        preallocate: bool = True,
        sync_dir: bool = True,
        data: bytes = b"",
        at: int = 0,
        adopt: bool = False,
    ) -> PooledFile:
        """Create a zero-filled file of ``size`` bytes, with ``data`` written at ``at``.

        Pre-allocated files are sized under ``.tmp`` and renamed into place (a crash
        midway never leaves a file of the wrong size). Sparse ones reserve no blocks,
        so they skip the rename (two syscalls fewer for each of thousands of new
        queues): a crash before the ftruncate leaves an empty file, which a queue's
        load removes, and after it a zero file. With ``sync_dir=False`` the caller
        makes the directory entry durable later (one fsync for many files).

        ``adopt`` (sparse files only): a file already there with no bytes or ``size``
        zero bytes is taken instead (one a creator thread made ahead, zero-filled:
        ConsumeQueue.make_files); anything else there is still an error.

        A full disk raises StoreNotWritableError (cause "disk_full") and leaves no file;
        the fault point is "cq.create"."""
        with pool.transient():
            if preallocate:
                fd = create_sized_file(
                    path, size, preallocate=True, sync_dir=sync_dir, keep_open=True, fault_point="cq.create"
                )
            else:
                try:
                    faults.hit("cq.create", path)
                    try:
                        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                    except FileExistsError:
                        if not adopt:
                            raise
                        fd = os.open(path, os.O_RDWR)
                        if os.fstat(fd).st_size not in (0, size):
                            os.close(fd)
                            raise
                except OSError as e:
                    if e.errno in (errno.ENOSPC, errno.EDQUOT):  # no inode left
                        raise StoreNotWritableError(f"disk full: cannot create {path}", cause="disk_full") from e
                    raise
                faults.created(fd)
            try:
                if not preallocate:
                    os.ftruncate(fd, size)
                if data and os.pwrite(fd, data, at) != len(data):
                    raise OSError(errno.ENOSPC, f"short write to {path.name} at {at}")
            except BaseException as e:
                os.close(fd)
                path.unlink(missing_ok=True)
                if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise StoreNotWritableError(f"disk full: cannot create {path}", cause="disk_full") from e
                raise
            os.close(fd)  # reopened through the pool on use
            if sync_dir and not preallocate:
                fsync_dir(path.parent)
        return cls(path, base_offset, size, pool, sparse=not preallocate)

    @functools.cached_property
    def path(self) -> Path:
        return Path(self._path)

    @property
    def name(self) -> str:
        """The file's name (``path.name``)."""
        return os.path.basename(self._path)

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
        fd = self._pool._pin(self)  # read and write pin by hand: they are the hot calls
        try:
            return os.pread(fd, n, pos)
        finally:
            self._pool._unpin(self)

    def write(self, pos: int, data: bytes) -> None:
        fd = self._pool._pin(self)
        try:
            if os.pwrite(fd, data, pos) != len(data):
                raise OSError(f"short write to {self.path.name} at {pos}")
        finally:
            self._pool._unpin(self)

    def sync(self, start: int = 0, end: int | None = None) -> None:
        """fdatasync (the files are small; a range buys nothing here). Fault point
        "cq.sync"; a failure is logged and remembered (mapped_file.sync_failures)."""
        with self._fd_in_use() as fd:
            try:
                faults.hit("cq.sync", self.path)
                os.fdatasync(fd)
            except OSError as e:
                note_sync_failure("cq.sync", self.path, e)
                raise
            faults.synced(self.path)

    def zero_from(self, pos: int) -> None:
        """Zero the file from ``pos`` on: a punched hole (a sparse file stays sparse; a
        pre-allocated one gets its blocks back), or written zeros where holes are not
        supported."""
        if pos >= self.size:
            return
        with self._fd_in_use() as fd:
            if _fallocate(fd, _PUNCH_HOLE_KEEP_SIZE, pos, self.size - pos) == 0:
                if not self.sparse:
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
