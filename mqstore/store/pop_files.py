"""The files of one shard's pop state (``<directory>/pop/``): the journal (flock'ed:
one process at a time), its snapshots and the receipt handles' secret. What the files
hold and how opening recovers them: mqstore/store/pop.py's module docstring; their
bytes: mqstore/formats/pop_journal.py. Plain Python: no Ray, no gRPC.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from mqstore.errors import (
    CorruptFileError,
    InvalidArgumentError,
    StoreClosedError,
    StoreLockedError,
    StoreNotWritableError,
)
from mqstore.formats.pop_journal import (
    PopDelta,
    decode_body,
    decode_snapshot,
    encode_body,
    encode_frame,
    encode_snapshot_head,
    whole_frames,
)
from mqstore.store import faults
from mqstore.store.mapped_file import fsync_dir, note_sync_failure

log = structlog.get_logger(__name__)

POP_DIR = "pop"
JOURNAL_FILE = "journal"
SNAPSHOT_FILE = "snapshot"
SNAPSHOT_TMP = "snapshot.tmp"
SECRET_FILE = "handle_secret"
SECRET_TMP = "handle_secret.tmp"
SECRET_BYTES = 32
COMPACT_BYTES = 4 << 20  # default journal size that triggers a snapshot


@dataclass(frozen=True, slots=True)
class PopRecovery:
    """What opening found: ``snapshot_seq`` (0: no snapshot), journal records applied
    on top, bytes of torn tail cut off the journal, and the last seq now in force."""

    snapshot_seq: int
    replayed: int
    truncated_bytes: int
    seq: int


def _unwritable_cause(e: OSError) -> str:
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return "disk_full"
    if e.errno == errno.EROFS:
        return "read_only"
    return "io_error"


def _write_all(fd: int, data: bytes | memoryview, pos: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, pos)
        view, pos = view[n:], pos + n


def load_snapshot(path: Path, apply: Callable[[PopDelta], None]) -> int:
    """Apply the snapshot at ``path`` (CorruptFileError for any damage); its seq, 0 if
    there is none."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0
    seq, deltas = decode_snapshot(data, str(path))
    for d in deltas:
        apply(d)
    return seq


def replay_read_only(directory: Path, apply: Callable[[PopDelta], None]) -> None:
    """Apply the state of ``directory`` (a ``pop/``) as its files hold it, read-only:
    no lock, nothing written, cut or created. Replays as opening does; the first
    record that is short, fails its CRC or breaks the seq order ends the journal (one
    being written at that moment). CorruptFileError for a damaged snapshot or body."""
    snap_seq = load_snapshot(directory / SNAPSHOT_FILE, apply)
    try:
        data = (directory / JOURNAL_FILE).read_bytes()
    except FileNotFoundError:
        data = b""
    last = None
    for f in whole_frames(data):
        if (last is not None and f.seq <= last) or f.seq > max(last or 0, snap_seq) + 1:
            break  # an older journal's bytes, or a compaction between the two reads: as of the snapshot
        if f.seq > snap_seq:
            apply(decode_body(data, f.body_start, f.end, str(directory / JOURNAL_FILE)))
        last = f.seq


class PopFiles:
    """The journal, snapshots and secret of one pop state (see the module docstring).

    Locks: ``lock`` is the state's (PopState holds it around :meth:`append` and while
    it reads ``written_seq``); a lock of its own serialises fdatasyncs (group commit),
    snapshots and close, taken before ``lock``. A failed fdatasync (the record's fate
    unknown) makes every later :meth:`check_writable` fail until the files are opened
    again; reads keep answering from memory."""

    def __init__(  # noqa: PLR0913
        self,
        directory: Path,
        *,
        lock: threading.Lock,
        apply: Callable[[PopDelta], None],
        snapshot_of: Callable[[], list[PopDelta]],
        shard: int,
        fsync: bool,
        compact_bytes: int,
    ) -> None:
        """Open (creating ``directory`` if needed), lock, read or make the secret, and
        recover: the snapshot and journal records go to ``apply``, in order.
        ``snapshot_of``: the whole state as deltas, one per (group, topic)."""
        self._dir = directory
        self._journal_path = self._dir / JOURNAL_FILE
        self._snapshot_path = self._dir / SNAPSHOT_FILE
        self._log = log.bind(shard=shard, path=str(self._dir))
        self._lock = lock  # the state's: the journal's end and seq with it
        self._flush_lock = threading.Lock()  # fdatasyncs, snapshots, close; taken before _lock
        self._snapshot_of = snapshot_of
        self._fsync = fsync
        self._compact_bytes = compact_bytes
        self.closed = False
        self._broken: tuple[str, str] | None = None  # (cause, what) after a failed fdatasync
        self.snapshots_written = 0
        self._compact_at = compact_bytes  # journal size of the next snapshot
        self._fd = -1
        self.secret = b""
        self._open(apply)

    def _open(self, apply: Callable[[PopDelta], None]) -> None:
        if not self._dir.is_dir():
            self._dir.mkdir(parents=True, exist_ok=True)
            fsync_dir(self._dir.parent)
        self._fd = os.open(self._journal_path, os.O_RDWR | os.O_CREAT, 0o644)
        faults.created(self._fd)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            self._fd = -1
            raise StoreLockedError(f"{self._dir} is already open (its journal is locked)") from None
        try:
            self.secret = self._load_secret()
            self.recovery = self._recover(apply)
        except BaseException:
            os.close(self._fd)
            self._fd = -1
            raise

    def _load_secret(self) -> bytes:
        """The handles' key: read, or made once (0600 whatever the umask; renamed into
        place whole, so a crash leaves no half key). CorruptFileError if it is not
        :data:`SECRET_BYTES` long (someone else wrote it)."""
        path = self._dir / SECRET_FILE
        try:
            key = path.read_bytes()
        except FileNotFoundError:
            tmp = self._dir / SECRET_TMP
            key = os.urandom(SECRET_BYTES)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.fchmod(fd, 0o600)  # a tmp left by a crash may have been made wider by hand
                _write_all(fd, key, 0)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            fsync_dir(self._dir)  # the key must outlive a crash before any handle is signed with it
            self._log.info("pop_handle_secret_created")
        if len(key) != SECRET_BYTES:
            raise CorruptFileError(f"{path}: {len(key)} bytes, a handle secret has {SECRET_BYTES}")
        return key

    def _recover(self, apply: Callable[[PopDelta], None]) -> PopRecovery:
        tmp = self._dir / SNAPSHOT_TMP
        if tmp.exists():  # a snapshot that never got renamed: the journal still has it all
            tmp.unlink()
            fsync_dir(self._dir)
        snap_seq = load_snapshot(self._snapshot_path, apply)
        data = os.pread(self._fd, os.fstat(self._fd).st_size, 0)
        where = str(self._journal_path)
        pos, last, replayed = 0, None, 0
        for f in whole_frames(data):  # up to a torn or garbage tail: the journal ends there
            if last is not None and f.seq <= last:
                break  # an older journal's bytes behind a torn write
            if f.seq > max(last or 0, snap_seq) + 1:
                raise CorruptFileError(
                    f"{where}: record at byte {f.pos} has seq {f.seq}, expected at most "
                    f"{max(last or 0, snap_seq) + 1}: records are missing"
                )
            if f.seq > snap_seq:
                apply(decode_body(data, f.body_start, f.end, where))
                replayed += 1
            last, pos = f.seq, f.end
        cut = len(data) - pos
        if last is None or last <= snap_seq:
            pos = 0  # all in the snapshot already: restart the journal so seqs stay contiguous
        if pos < len(data):
            os.ftruncate(self._fd, pos)
            os.fdatasync(self._fd)
            if cut:
                self._log.warning("pop_journal_truncated", at=pos, bytes=cut)
        self.journal_size = pos
        self.written_seq = self._durable_seq = max(last or 0, snap_seq)
        self.snapshot_bytes = self._snapshot_path.stat().st_size if snap_seq else 0
        self._compact_at = max(self._compact_bytes, self.snapshot_bytes)
        return PopRecovery(snap_seq, replayed, cut, self.written_seq)

    # ------------------------------------------------------------------ writing

    def check_writable(self) -> None:
        """StoreClosedError or StoreNotWritableError unless a record may be appended."""
        if self.closed:
            raise StoreClosedError("the pop state is closed")
        if self._broken is not None:
            cause, what = self._broken
            raise StoreNotWritableError(f"the pop journal failed earlier ({what}); reopen the state", cause=cause)

    def append(self, delta: PopDelta) -> int:
        """Write ``delta`` as one record at the journal's end (the caller holds the
        state's lock); its seq. InvalidArgumentError if a value does not fit its
        field; on a failed write the journal is cut back, so the state is as before."""
        try:
            body = encode_body(delta)
        except struct.error as e:  # a value out of its field's range
            raise InvalidArgumentError(f"a value does not fit the pop journal: {e}") from None
        seq = self.written_seq + 1
        frame = encode_frame(seq, body)
        pos = self.journal_size
        try:
            faults.hit("pop.write", self._journal_path)
            if faults.armed("pop.write.torn"):  # a test's torn record: half, the point, the rest
                half = len(frame) // 2
                _write_all(self._fd, frame[:half], pos)
                faults.hit("pop.write.torn", self._journal_path)
                _write_all(self._fd, frame[half:], pos + half)
            else:
                _write_all(self._fd, frame, pos)
        except OSError as e:
            try:
                os.ftruncate(self._fd, pos)
            except OSError as e2:  # half a record stays: later ones would be cut at recovery
                self._broken = (_unwritable_cause(e2), f"cutting back a failed write: {e2}")
            raise StoreNotWritableError(f"writing the pop journal failed: {e}", cause=_unwritable_cause(e)) from e
        self.journal_size = pos + len(frame)
        self.written_seq = seq
        if not self._fsync:
            self._durable_seq = seq  # in the page cache: what fsync=False promises
        return seq

    def wait_durable(self, seq: int, *, read: bool = False) -> None:
        """Return once record ``seq`` is on disk, fdatasyncing if nobody else is.

        Group commit: the waiter that gets ``_flush_lock`` syncs every record written
        so far, and the others find their record covered when they get it."""
        if self._durable_seq >= seq:
            return
        with self._flush_lock:
            if self._durable_seq >= seq:
                return
            if self._broken is not None:
                if read:
                    return  # reads answer from memory once the journal has failed
                self.check_writable()
            target = self.written_seq  # records <= target are wholly written
            try:
                faults.hit("pop.sync", self._journal_path)
                os.fdatasync(self._fd)
            except OSError as e:
                note_sync_failure("pop.sync", self._journal_path, e)
                self._broken = ("flush_failed", f"fdatasync: {e}")
                if read:
                    return
                raise StoreNotWritableError(
                    f"fdatasync of the pop journal failed: {e}; the call may or may not have been kept",
                    cause="flush_failed",
                ) from e
            faults.synced(self._journal_path)
            self._durable_seq = max(self._durable_seq, target)

    # ------------------------------------------------------------------ snapshots

    def maybe_compact(self) -> None:
        """Write a snapshot and restart the journal if it grew past its mark."""
        if self.journal_size < self._compact_at:  # an unlocked peek; checked again below
            return
        with self._flush_lock, self._lock:
            if self.closed or self._broken is not None or self.journal_size < self._compact_at:
                return
            try:
                size = self._write_snapshot()
            except OSError as e:  # the journal still has everything; try again later
                self._log.error("pop_snapshot_failed", error=str(e))
                try:
                    (self._dir / SNAPSHOT_TMP).unlink(missing_ok=True)
                except OSError:
                    pass
                self._compact_at = self.journal_size + self._compact_bytes
                return
            self.snapshot_bytes = size
            self.snapshots_written += 1
            self._durable_seq = self.written_seq  # the snapshot holds every record written
            # why the max: a big state is rewritten at most once per as many journal bytes
            self._compact_at = max(self._compact_bytes, size)
            try:
                os.ftruncate(self._fd, 0)
            except OSError as e:  # harmless: recovery skips records the snapshot has
                self._log.error("pop_journal_restart_failed", error=str(e))
                self._compact_at = self.journal_size + max(self._compact_bytes, size)
                return
            self._log.info("pop_snapshot_written", seq=self.written_seq, bytes=size, journal_bytes=self.journal_size)
            self.journal_size = 0

    def _write_snapshot(self) -> int:
        """Write the whole state as ``snapshot`` (under both locks); its size."""
        seq = self.written_seq
        records = [encode_frame(seq, encode_body(d)) for d in self._snapshot_of()]
        head = encode_snapshot_head(seq, len(records))
        tmp = self._dir / SNAPSHOT_TMP
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        faults.created(fd)
        size = 0
        try:
            for part in (head, *records):
                _write_all(fd, part, size)
                size += len(part)
            faults.hit("pop.snapshot.sync", tmp)
            os.fsync(fd)
        finally:
            os.close(fd)
        faults.synced(tmp)
        faults.hit("pop.snapshot.rename", tmp)
        os.replace(tmp, self._snapshot_path)
        fsync_dir(self._dir)  # the rename must be durable before the journal restarts
        return size

    def close(self) -> None:
        """Sync and release the journal; every later call raises StoreClosedError.
        Closing twice is harmless."""
        with self._flush_lock, self._lock:
            if self.closed:
                return
            self.closed = True
            if self._broken is None:
                try:
                    os.fdatasync(self._fd)  # fsync=False's page-cache records, on a clean close
                    self._durable_seq = self.written_seq
                except OSError as e:
                    note_sync_failure("pop.sync", self._journal_path, e)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1


__all__ = [
    "COMPACT_BYTES",
    "JOURNAL_FILE",
    "POP_DIR",
    "SECRET_BYTES",
    "SECRET_FILE",
    "SNAPSHOT_FILE",
    "SNAPSHOT_TMP",
    "PopFiles",
    "PopRecovery",
    "load_snapshot",
    "replay_read_only",
]
