"""Pop consumption state of one shard: per (group, topic, queue) a cursor and the
messages in flight, durable. RocketMQ 5's SimpleConsumer and PushConsumer consume by
"pop"; the pop rules (mqstore/store/pop_rules.py) decide what to hand out and
record it here. Plain Python: no Ray, no gRPC.

Vocabulary (one key = (group, topic, queue_id)):

    term        meaning
    cursor      the next queue offset never handed out; every offset below it is acked,
                in flight, or skipped (filtered out). Absent for a new key.
    in flight   an entry ``InFlight(offset, commitlog_offset, size, deadline_ms, attempt,
                generation)``: handed out (or held) and not finished yet. Always < cursor.
    deadline    when the entry becomes visible again (``deadline_ms``); due iff
                ``deadline_ms <= now_ms``
    attempt     how many times it was delivered; 0 = held, never delivered (a delay
                message kept until its delivery time)
    generation  +1 on each (re)delivery, hold and change of invisible time; a receipt
                handle carries the generation it was issued with
    current     a handle is current iff its generation, deadline and commitlog offset are
                the entry's; it is expired iff ``now_ms > handle.deadline_ms``

Files, all under ``<directory>/pop/`` (nothing is created elsewhere):

    journal        one record per mutating call, appended, then fdatasynced (group commit)
    snapshot       the whole state as of journal record ``seq``
    snapshot.tmp   a snapshot being written; removed at open
    handle_secret  32 random bytes, mode 0600, made once (written as handle_secret.tmp,
                   fsynced, renamed): the key of the receipt handles' tags, so a handle
                   stays valid across restarts and only this shard can make one

Journal and snapshot bytes: mqstore/formats/pop_journal.py (a journal is a sequence of
records, each one delta of one (group, topic) with a seq and a CRC; a snapshot is a
header and one record per (group, topic)). Receipt handles: mqstore/formats/receipt_handle.py.

Applying a delta sets its cursors, puts its entries (replacing the entry at the same
offset), then removes its removals. A call's whole effect is one delta, so one record:
a torn record is the whole call or nothing. A snapshot is written as ``snapshot.tmp``,
fsynced, renamed, and the directory fsynced.

Compaction: once the journal reaches ``max(compact_bytes, snapshot size)`` bytes
(4 MiB by default; the snapshot size term keeps the rewrite cost per journal byte
under 2), the next mutating call writes a snapshot of everything and truncates the
journal to 0. Records written after it continue the seq numbering.

Recovery (at open): load the snapshot (any damage: CorruptFileError, it was renamed
into place whole), then read the journal from its start: records with ``seq <=``
the snapshot's are already in it and skipped (a crash between the snapshot's rename
and the journal's truncation leaves them); the others are applied in order. The first
record that is short, fails its CRC or does not continue the seq numbering (bytes of
an older journal behind a torn write) ends the journal: it and everything after it are
cut off (a torn tail is the normal result of a kill -9 or power cut mid-write). A
record that passes its CRC but skips seq numbers, or whose body is malformed, is not a
torn write: CorruptFileError.

Durability: a mutating call returns after its record is fdatasynced (``fsync=True``);
concurrent calls share fdatasyncs (the first waiter syncs everything written so far).
Reads wait the same way for the calls whose effect they show, so nothing a read
returns can be lost by a crash. With ``fsync=False`` a record reaches the OS page
cache before the call returns: a process crash loses nothing, a power cut may lose
the latest calls.

Fault points (mqstore/store/faults.py): ``pop.write`` (before a journal write),
``pop.write.torn`` (between the two halves of a journal record, only when armed),
``pop.sync`` (before a journal fdatasync), ``pop.snapshot.sync`` (before the
snapshot's fsync), ``pop.snapshot.rename`` (before its rename).
"""

from __future__ import annotations

import errno
import fcntl
import heapq
import operator
import os
import struct
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import NamedTuple, TypeVar

import structlog

from mqstore.errors import (
    CorruptFileError,
    InvalidArgumentError,
    InvalidReceiptHandle,
    StoreClosedError,
    StoreLockedError,
    StoreNotWritableError,
)
from mqstore.formats.pop_journal import (
    InFlight,
    PopDelta,
    decode_body,
    decode_snapshot,
    encode_body,
    encode_frame,
    encode_snapshot_head,
    whole_frames,
)
from mqstore.formats.receipt_handle import HANDLE_VERSION, ReceiptHandle, authentic, signed
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

_I32_MAX = (1 << 31) - 1
_I64_MAX = (1 << 63) - 1

_R = TypeVar("_R")


# ---------------------------------------------------------------------- value types


class Delivery(NamedTuple):
    """One message a :meth:`PopState.pop` hands out (or holds): a new one at or past
    the key's cursor, or a due one in flight. ``hold_until_ms`` set: keep it in flight
    undelivered until then (a delay message), attempt unchanged, no handle."""

    queue_id: int
    offset: int
    commitlog_offset: int
    size: int
    hold_until_ms: int | None = None


class AckOutcome(Enum):
    """What :meth:`PopState.ack` did with one handle (and the pop rules' answer to
    an ack, a change of invisible time or a dead letter by handle)."""

    OK = "ok"  # the handle was current: the message is finished for the group
    STALE = "stale"  # not current: acked, redelivered or changed since, unknown, or another shard
    EXPIRED = "expired"  # now_ms > handle.deadline_ms: refused (RocketMQ's proxy does the same)
    FORGED = "forged"  # its tag is not this shard's for the group and topic: not a handle it made
    MALFORMED = "malformed"  # not a receipt handle of this shard's at all (pop_rules; PopState never says it)


@dataclass(frozen=True, slots=True)
class PopKeyStatus:
    """One key's state, for status and debugging (:meth:`PopState.groups`)."""

    group: str
    topic: str
    queue_id: int
    cursor: int | None
    in_flight: int
    next_deadline_ms: int | None


@dataclass(frozen=True, slots=True)
class PopRecovery:
    """What opening found: ``snapshot_seq`` (0: no snapshot), journal records applied
    on top, bytes of torn tail cut off the journal, and the last seq now in force."""

    snapshot_seq: int
    replayed: int
    truncated_bytes: int
    seq: int


@dataclass(frozen=True, slots=True)
class PopStats:
    """Sizes of the state: keys, entries in flight, journal and snapshot bytes, the
    last record's seq, and how many snapshots this process wrote."""

    keys: int
    in_flight: int
    journal_bytes: int
    snapshot_bytes: int
    seq: int
    snapshots_written: int


# ---------------------------------------------------------------------- one key in memory


class _Queue:
    """One key: cursor, entries by offset, and a heap of (deadline_ms, offset,
    generation) over them. The heap is lazy: an item whose generation is no longer
    the entry's (or whose entry is gone) is skipped and dropped when met, and the heap
    is rebuilt when such items outnumber the live ones."""

    __slots__ = ("cursor", "entries", "heap")

    def __init__(self) -> None:
        self.cursor: int | None = None
        self.entries: dict[int, InFlight] = {}
        self.heap: list[tuple[int, int, int]] = []

    def put(self, e: InFlight) -> None:
        self.entries[e.offset] = e
        heapq.heappush(self.heap, (e.deadline_ms, e.offset, e.generation))
        self._maybe_rebuild()

    def remove(self, offset: int) -> None:
        if self.entries.pop(offset, None) is not None:
            self._maybe_rebuild()

    def _maybe_rebuild(self) -> None:
        # why: an entry acked long before its deadline leaves its item deep in the heap
        if len(self.heap) > 2 * len(self.entries) + 64:
            self.heap = [(e.deadline_ms, e.offset, e.generation) for e in self.entries.values()]
            heapq.heapify(self.heap)

    def _live(self, item: tuple[int, int, int]) -> bool:
        e = self.entries.get(item[1])
        return e is not None and e.generation == item[2]

    def first_deadline(self) -> int | None:
        heap = self.heap
        while heap and not self._live(heap[0]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def due(self, now_ms: int, limit: int) -> list[InFlight]:
        """Up to ``limit`` entries with deadline <= now_ms, earliest first: O(k log n)."""
        heap, taken, out = self.heap, [], []
        while heap and len(out) < limit and heap[0][0] <= now_ms:
            item = heapq.heappop(heap)
            if self._live(item):
                taken.append(item)
                out.append(self.entries[item[1]])
        for item in taken:
            heapq.heappush(heap, item)
        return out


def _current(e: InFlight | None, h: ReceiptHandle) -> bool:
    return (
        e is not None
        and e.generation == h.generation
        and e.deadline_ms == h.deadline_ms
        and e.commitlog_offset == h.commitlog_offset
    )


def _check_int(name: str, value: object, low: int = 0, high: int = _I64_MAX) -> int:
    """``value`` as an int (numpy integers welcome, bools not) if in low..high."""
    try:
        v = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        v = None
    if v is None or isinstance(value, bool) or not low <= v <= high:
        raise InvalidArgumentError(f"{name} must be an integer in {low}..{high}, got {value!r}")
    return v


def _check_name(kind: str, name: object) -> None:
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"{kind} name must be a non-empty string, got {name!r}")
    try:
        n = len(name.encode())
    except UnicodeEncodeError:
        raise InvalidArgumentError(f"{kind} name {name!r} is not encodable as UTF-8") from None
    if n > 0xFFFF:
        raise InvalidArgumentError(f"{kind} name is {n} bytes long; at most 65535")


def _checked_delivery(d: object) -> Delivery:
    if not isinstance(d, Delivery):
        raise InvalidArgumentError(f"deliveries must be Delivery values, got {type(d).__name__}")
    return Delivery(
        _check_int("queue_id", d.queue_id, 0, _I32_MAX),
        _check_int("offset", d.offset),
        _check_int("commitlog_offset", d.commitlog_offset),
        _check_int("size", d.size, 0, _I32_MAX),
        None if d.hold_until_ms is None else _check_int("hold_until_ms", d.hold_until_ms),
    )


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


# ---------------------------------------------------------------------- the state


class PopState:
    """The durable pop state of one shard (see the module docstring).

    Thread-safe: any thread may call any method. One lock guards the state and the
    journal's appends; a second serialises fdatasyncs (group commit) and snapshots.
    One process at a time: the journal is flock'ed (StoreLockedError otherwise).

    Every mutating call (:meth:`pop`, :meth:`ack`, :meth:`change_invisible`,
    :meth:`drop`) is validated whole before anything changes (InvalidArgumentError,
    a ValueError, leaves the state as it was), then written as one journal record,
    applied, and made durable before it returns. A write failure raises
    StoreNotWritableError with the state unchanged; a failed fdatasync (the record's
    fate unknown) raises it too and makes every later mutating call fail with it until
    the state is opened again (reads keep answering from memory).

    Costs (measured on the 2-core development machine): memory ~320 bytes per entry in
    flight; a pop or ack of 32 messages ~0.5 ms with its fdatasync, concurrent calls
    sharing fdatasyncs; :meth:`due` and :meth:`next_deadline_ms` are O(log n) per
    entry looked at (a heap per key); :meth:`entry` is O(1), :meth:`blocked` and
    :meth:`in_flight` O(entries of the key); a snapshot (every ~4 MiB of journal, at
    least the snapshot's own size) holds the lock while it writes 44 bytes per entry
    (100k entries: 4.4 MB, 0.12 s); reopening replays ~4 MiB of journal at most
    (100k entries: ~0.4 s).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        shard: int = 0,
        fsync: bool = True,
        compact_bytes: int = COMPACT_BYTES,
    ) -> None:
        """Open (creating ``<directory>/pop/`` if needed) and recover; see
        :attr:`recovery` for what was found. ``compact_bytes``: the journal size
        that triggers a snapshot (tests use tiny ones)."""
        self.shard = _check_int("shard", shard, 0, _I32_MAX)
        self._fsync = bool(fsync)
        self._compact_bytes = _check_int("compact_bytes", compact_bytes, 1)
        self._dir = Path(directory) / POP_DIR
        self._journal_path = self._dir / JOURNAL_FILE
        self._snapshot_path = self._dir / SNAPSHOT_FILE
        self._log = log.bind(shard=shard, path=str(self._dir))
        self._lock = threading.Lock()  # the state, the journal's end and seq
        self._flush_lock = threading.Lock()  # fdatasyncs, snapshots, close; taken before _lock
        self._keys: dict[tuple[str, str], dict[int, _Queue]] = {}
        self._closed = False
        self._broken: tuple[str, str] | None = None  # (cause, what) after a failed fdatasync
        self._snapshots_written = 0
        self._compact_at = self._compact_bytes  # journal size of the next snapshot
        self._fd = -1
        self._secret = b""
        self._open()

    # ------------------------------------------------------------------ open and recovery

    def _open(self) -> None:
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
            self._secret = self._load_secret()
            self.recovery = self._recover()
        except BaseException:
            os.close(self._fd)
            self._fd = -1
            raise
        self._log.info(
            "pop_state_opened",
            snapshot_seq=self.recovery.snapshot_seq,
            replayed=self.recovery.replayed,
            truncated_bytes=self.recovery.truncated_bytes,
            keys=sum(len(qs) for qs in self._keys.values()),
        )

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

    def _signed(self, group: str, topic: str, h: ReceiptHandle) -> ReceiptHandle:
        return signed(self._secret, group, topic, h)

    def _authentic(self, group: str, topic: str, h: ReceiptHandle) -> bool:
        """True iff this shard made ``h`` for (group, topic): its tag is ours (constant time)."""
        return authentic(self._secret, self.shard, group, topic, h)

    def _recover(self) -> PopRecovery:
        tmp = self._dir / SNAPSHOT_TMP
        if tmp.exists():  # a snapshot that never got renamed: the journal still has it all
            tmp.unlink()
            fsync_dir(self._dir)
        snap_seq = self._load_snapshot()
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
                self._apply(decode_body(data, f.body_start, f.end, where))
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
        self._journal_size = pos
        self._written_seq = self._durable_seq = max(last or 0, snap_seq)
        self._snapshot_bytes = self._snapshot_path.stat().st_size if snap_seq else 0
        self._compact_at = max(self._compact_bytes, self._snapshot_bytes)
        return PopRecovery(snap_seq, replayed, cut, self._written_seq)

    def _load_snapshot(self) -> int:
        try:
            data = self._snapshot_path.read_bytes()
        except FileNotFoundError:
            return 0
        seq, deltas = decode_snapshot(data, str(self._snapshot_path))
        for d in deltas:
            self._apply(d)
        return seq

    # ------------------------------------------------------------------ applying

    def _apply(self, d: PopDelta) -> None:
        """Apply a delta to memory (live calls and replay alike); never fails."""
        queues = self._keys.setdefault((d.group, d.topic), {})
        for q, c in d.cursors:
            qs = queues.get(q) or queues.setdefault(q, _Queue())
            qs.cursor = c
        for q, e in d.puts:
            qs = queues.get(q) or queues.setdefault(q, _Queue())
            qs.put(e)
        for q, off in d.removals:
            qs = queues.get(q)
            if qs is not None:
                qs.remove(off)
                if qs.cursor is None and not qs.entries:
                    del queues[q]
        if not queues:
            del self._keys[(d.group, d.topic)]

    # ------------------------------------------------------------------ writing

    def _check_writable(self) -> None:
        if self._closed:
            raise StoreClosedError("the pop state is closed")
        if self._broken is not None:
            cause, what = self._broken
            raise StoreNotWritableError(f"the pop journal failed earlier ({what}); reopen the state", cause=cause)

    def _append(self, body: bytes) -> int:
        """Write one record at the journal's end (under ``_lock``); its seq. On a
        failed write the journal is cut back, so the state is as before."""
        seq = self._written_seq + 1
        frame = encode_frame(seq, body)
        pos = self._journal_size
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
        self._journal_size = pos + len(frame)
        self._written_seq = seq
        if not self._fsync:
            self._durable_seq = seq  # in the page cache: what fsync=False promises
        return seq

    def _wait_durable(self, seq: int, *, read: bool = False) -> None:
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
                self._check_writable()
            target = self._written_seq  # records <= target are wholly written
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

    def _mutate(self, plan: Callable[[], tuple[_R, PopDelta | None]]) -> _R:
        """Run ``plan`` (validates and computes, changes nothing) under the lock, write
        its delta as one record, apply it, then wait until it is durable."""
        with self._lock:
            self._check_writable()
            result, delta = plan()
            if delta is None:
                seq = self._written_seq  # nothing changed; what we read must be durable
            else:
                try:
                    body = encode_body(delta)
                except struct.error as e:  # a value out of its field's range
                    raise InvalidArgumentError(f"a value does not fit the pop journal: {e}") from None
                seq = self._append(body)
                self._apply(delta)
        self._wait_durable(seq)
        self._maybe_compact()
        return result

    def _read(self, fn: Callable[[], _R]) -> _R:
        with self._lock:
            if self._closed:
                raise StoreClosedError("the pop state is closed")
            result = fn()
            seq = self._written_seq
        self._wait_durable(seq, read=True)  # show nothing a crash could still undo
        return result

    # ------------------------------------------------------------------ snapshots

    def _maybe_compact(self) -> None:
        if self._journal_size < self._compact_at:  # an unlocked peek; checked again below
            return
        with self._flush_lock, self._lock:
            if self._closed or self._broken is not None or self._journal_size < self._compact_at:
                return
            try:
                size = self._write_snapshot()
            except OSError as e:  # the journal still has everything; try again later
                self._log.error("pop_snapshot_failed", error=str(e))
                try:
                    (self._dir / SNAPSHOT_TMP).unlink(missing_ok=True)
                except OSError:
                    pass
                self._compact_at = self._journal_size + self._compact_bytes
                return
            self._snapshot_bytes = size
            self._snapshots_written += 1
            self._durable_seq = self._written_seq  # the snapshot holds every record written
            # why the max: a big state is rewritten at most once per as many journal bytes
            self._compact_at = max(self._compact_bytes, size)
            try:
                os.ftruncate(self._fd, 0)
            except OSError as e:  # harmless: recovery skips records the snapshot has
                self._log.error("pop_journal_restart_failed", error=str(e))
                self._compact_at = self._journal_size + max(self._compact_bytes, size)
                return
            self._log.info("pop_snapshot_written", seq=self._written_seq, bytes=size, journal_bytes=self._journal_size)
            self._journal_size = 0

    def _write_snapshot(self) -> int:
        """Write the whole state as ``snapshot`` (under both locks); its size."""
        seq = self._written_seq
        records = []
        for (group, topic), queues in sorted(self._keys.items()):
            cursors = [(q, qs.cursor) for q, qs in sorted(queues.items()) if qs.cursor is not None]
            puts = [(q, e) for q, qs in sorted(queues.items()) for e in sorted(qs.entries.values())]
            records.append(encode_frame(seq, encode_body(PopDelta(group, topic, cursors, puts, []))))
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

    # ------------------------------------------------------------------ reads

    def cursor(self, group: str, topic: str, queue_id: int) -> int | None:
        """The key's cursor: the next offset never handed out; None for a new key (the
        caller then starts at the queue's min offset)."""

        def read() -> int | None:
            qs = self._keys.get((group, topic), {}).get(queue_id)
            return None if qs is None else qs.cursor

        return self._read(read)

    def entry(self, group: str, topic: str, queue_id: int, offset: int) -> InFlight | None:
        """The entry in flight at ``offset`` of the key, or None (acked, skipped, never
        handed out): O(1), where :meth:`in_flight` lists the whole key."""

        def read() -> InFlight | None:
            qs = self._keys.get((group, topic), {}).get(queue_id)
            return None if qs is None else qs.entries.get(offset)

        return self._read(read)

    def in_flight(self, group: str, topic: str, queue_id: int) -> list[InFlight]:
        """The key's entries in flight, by offset."""

        def read() -> list[InFlight]:
            qs = self._keys.get((group, topic), {}).get(queue_id)
            return [] if qs is None else sorted(qs.entries.values())

        return self._read(read)

    def due(
        self, group: str, topic: str, queue_ids: Sequence[int], now_ms: int, limit: int
    ) -> list[tuple[int, InFlight]]:
        """Up to ``limit`` (queue_id, entry) of the given queues whose deadline is
        <= now_ms, earliest deadline first (then queue id, then offset)."""

        def read() -> list[tuple[int, InFlight]]:
            queues = self._keys.get((group, topic))
            if not queues or limit <= 0:
                return []
            out = []
            for q in dict.fromkeys(queue_ids):
                qs = queues.get(q)
                if qs is not None:
                    out.extend((q, e) for e in qs.due(now_ms, limit))
            out.sort(key=lambda qe: (qe[1].deadline_ms, qe[0], qe[1].offset))
            return out[:limit]

        return self._read(read)

    def blocked(self, group: str, topic: str, queue_id: int, now_ms: int) -> bool:
        """FIFO: True if an entry of the key is in flight and not due yet (nothing new
        may be handed out from the queue). O(entries of the key)."""

        def read() -> bool:
            qs = self._keys.get((group, topic), {}).get(queue_id)
            return qs is not None and any(e.deadline_ms > now_ms for e in qs.entries.values())

        return self._read(read)

    def delivered_in_flight(self, group: str, topic: str, queue_id: int) -> bool:
        """FIFO: True if a delivered entry (attempt >= 1) of the key is in flight, due or
        not: nothing new may be handed out from the queue until it is finished. A held
        entry (attempt 0, a delay message waiting for its time) does not count: it
        takes its place in the order when it is delivered, as RocketMQ's timer puts a
        delay message into its queue only at its delivery time. O(entries of the key)."""

        def read() -> bool:
            qs = self._keys.get((group, topic), {}).get(queue_id)
            return qs is not None and any(e.attempt > 0 for e in qs.entries.values())

        return self._read(read)

    def next_deadline_ms(self, group: str, topic: str, queue_ids: Sequence[int]) -> int | None:
        """The earliest deadline among the entries in flight in these queues (it may be
        past), or None: when a long poll should look again."""

        def read() -> int | None:
            queues = self._keys.get((group, topic), {})
            firsts = (queues[q].first_deadline() for q in dict.fromkeys(queue_ids) if q in queues)
            return min((d for d in firsts if d is not None), default=None)

        return self._read(read)

    def groups(self) -> list[PopKeyStatus]:
        """Every key with a cursor or entries in flight, sorted by (group, topic, queue)."""

        def read() -> list[PopKeyStatus]:
            return [
                PopKeyStatus(g, t, q, qs.cursor, len(qs.entries), qs.first_deadline())
                for (g, t), queues in sorted(self._keys.items())
                for q, qs in sorted(queues.items())
            ]

        return self._read(read)

    def stats(self) -> PopStats:
        """Sizes (see :class:`PopStats`)."""

        def read() -> PopStats:
            return PopStats(
                keys=sum(len(qs) for qs in self._keys.values()),
                in_flight=sum(len(q.entries) for qs in self._keys.values() for q in qs.values()),
                journal_bytes=self._journal_size,
                snapshot_bytes=self._snapshot_bytes,
                seq=self._written_seq,
                snapshots_written=self._snapshots_written,
            )

        return self._read(read)

    # ------------------------------------------------------------------ mutating calls

    def pop(
        self,
        group: str,
        topic: str,
        deliveries: Sequence[Delivery],
        *,
        cursors: Mapping[int, int],
        now_ms: int,
        invisible_ms: int,
    ) -> list[ReceiptHandle | None]:
        """Hand out (or hold) ``deliveries`` and move ``cursors``, as one durable step.

        Each delivery is either new (offset >= the key's cursor, or a new key): the
        key's cursor after this call (``cursors`` or the old one) must be past it; or
        an entry in flight that is due at ``now_ms``. It gets generation + 1 and:
        delivered: attempt + 1, deadline ``now_ms + invisible_ms``, a handle;
        held (``hold_until_ms`` set): attempt unchanged, deadline ``hold_until_ms``, None.
        Returns the handles aligned with ``deliveries``. A cursor never moves back.
        InvalidArgumentError (a ValueError) for any breach, with nothing changed."""
        _check_name("group", group)
        _check_name("topic", topic)
        now_ms = _check_int("now_ms", now_ms)
        invisible_ms = _check_int("invisible_ms", invisible_ms, 0, _I64_MAX - now_ms)
        moves = {_check_int("queue_id", q, 0, _I32_MAX): _check_int("cursor", c) for q, c in cursors.items()}
        deliveries = [_checked_delivery(d) for d in deliveries]

        def plan() -> tuple[list[ReceiptHandle | None], PopDelta | None]:
            queues = self._keys.get((group, topic), {})
            changed = []
            for q, c in moves.items():
                old = queues[q].cursor if q in queues else None
                if old is not None and c < old:
                    raise InvalidArgumentError(f"cursor of {group}/{topic}/{q} would move back from {old} to {c}")
                if c != old:
                    changed.append((q, c))
            handles: list[ReceiptHandle | None] = []
            puts: list[tuple[int, InFlight]] = []
            seen: set[tuple[int, int]] = set()
            for d in deliveries:
                q = d.queue_id
                if (q, d.offset) in seen:
                    raise InvalidArgumentError(f"offset {d.offset} of queue {q} is delivered twice in one pop")
                seen.add((q, d.offset))
                qs = queues.get(q)
                old_cursor = None if qs is None else qs.cursor
                if old_cursor is None or d.offset >= old_cursor:
                    new_cursor = moves.get(q, old_cursor)
                    if new_cursor is None or new_cursor <= d.offset:
                        raise InvalidArgumentError(
                            f"new offset {d.offset} of {group}/{topic}/{q} needs the cursor moved past it "
                            f"(cursor {old_cursor}, moved to {moves.get(q)})"
                        )
                    attempt, generation = 0, 0
                else:
                    e = qs.entries.get(d.offset) if qs is not None else None
                    if e is None:
                        raise InvalidArgumentError(
                            f"offset {d.offset} of {group}/{topic}/{q} is below the cursor {old_cursor} "
                            "and not in flight (acked or skipped)"
                        )
                    if e.deadline_ms > now_ms:
                        raise InvalidArgumentError(
                            f"offset {d.offset} of {group}/{topic}/{q} is in flight until {e.deadline_ms}, "
                            f"not due at {now_ms}"
                        )
                    attempt, generation = e.attempt, e.generation
                if d.hold_until_ms is not None:
                    entry = InFlight(d.offset, d.commitlog_offset, d.size, d.hold_until_ms, attempt, generation + 1)
                    handles.append(None)
                else:
                    entry = InFlight(
                        d.offset, d.commitlog_offset, d.size, now_ms + invisible_ms, attempt + 1, generation + 1
                    )
                    handles.append(
                        self._signed(
                            group,
                            topic,
                            ReceiptHandle(
                                self.shard, q, d.offset, entry.generation, now_ms, invisible_ms, d.commitlog_offset
                            ),
                        )
                    )
                puts.append((q, entry))
            if not changed and not puts:
                return handles, None
            return handles, PopDelta(group, topic, changed, puts, [])

        return self._mutate(plan)

    def ack(self, group: str, topic: str, handles: Sequence[ReceiptHandle], now_ms: int) -> list[AckOutcome]:
        """Finish the messages whose handles are current, as one durable step; an
        outcome per handle, in order: FORGED (its tag is not this shard's for the group
        and topic: checked first, so nothing about the entry shows), OK (removed),
        EXPIRED (``now_ms`` is past the handle's deadline: refused, the entry stays and
        comes back when due) or STALE (anything else: acked already, redelivered or
        changed since, unknown)."""
        _check_name("group", group)
        _check_name("topic", topic)
        now_ms = _check_int("now_ms", now_ms)
        handles = list(handles)
        for h in handles:
            if not isinstance(h, ReceiptHandle):
                raise InvalidArgumentError(f"handles must be ReceiptHandle values, got {type(h).__name__}")

        def plan() -> tuple[list[AckOutcome], PopDelta | None]:
            queues = self._keys.get((group, topic), {})
            outcomes, removals, gone = [], [], set()
            for h in handles:
                if not self._authentic(group, topic, h):
                    outcomes.append(AckOutcome.FORGED)
                    continue
                if now_ms > h.deadline_ms:
                    outcomes.append(AckOutcome.EXPIRED)
                    continue
                qs = queues.get(h.queue_id)
                e = qs.entries.get(h.offset) if qs is not None else None
                if h.shard != self.shard or (h.queue_id, h.offset) in gone or not _current(e, h):
                    outcomes.append(AckOutcome.STALE)
                    continue
                outcomes.append(AckOutcome.OK)
                gone.add((h.queue_id, h.offset))
                removals.append((h.queue_id, h.offset))
            return outcomes, (PopDelta(group, topic, [], [], removals) if removals else None)

        return self._mutate(plan)

    def change_invisible(
        self, group: str, topic: str, handle: ReceiptHandle, now_ms: int, invisible_ms: int
    ) -> ReceiptHandle:
        """Give a current handle's message a new deadline ``now_ms + invisible_ms``, as
        one durable step; returns the new handle (generation + 1, ``pop_ms = now_ms``,
        attempt unchanged), the old one is void. InvalidReceiptHandle (reason
        ``forged``, ``expired`` or ``stale``) if the handle is not usable, with nothing
        changed."""
        _check_name("group", group)
        _check_name("topic", topic)
        if not isinstance(handle, ReceiptHandle):
            raise InvalidArgumentError(f"handle must be a ReceiptHandle, got {type(handle).__name__}")
        now_ms = _check_int("now_ms", now_ms)
        invisible_ms = _check_int("invisible_ms", invisible_ms, 0, _I64_MAX - now_ms)
        h = handle

        def plan() -> tuple[ReceiptHandle, PopDelta]:
            if not self._authentic(group, topic, h):
                raise InvalidReceiptHandle(
                    f"receipt handle of {group}/{topic} was not made by shard {self.shard} for them", reason="forged"
                )
            if now_ms > h.deadline_ms:
                raise InvalidReceiptHandle(
                    f"receipt handle expired at {h.deadline_ms} (now {now_ms})", reason="expired"
                )
            qs = self._keys.get((group, topic), {}).get(h.queue_id)
            e = qs.entries.get(h.offset) if qs is not None else None
            if h.shard != self.shard or not _current(e, h):
                raise InvalidReceiptHandle(
                    f"receipt handle of {group}/{topic}/{h.queue_id} offset {h.offset} is stale "
                    "(acked, redelivered or changed since)",
                    reason="stale",
                )
            assert e is not None
            new = e._replace(deadline_ms=now_ms + invisible_ms, generation=e.generation + 1)
            out = self._signed(
                group,
                topic,
                ReceiptHandle(
                    self.shard, h.queue_id, h.offset, new.generation, now_ms, invisible_ms, e.commitlog_offset
                ),
            )
            return out, PopDelta(group, topic, [], [(h.queue_id, new)], [])

        return self._mutate(plan)

    def check(self, group: str, topic: str, handle: ReceiptHandle, now_ms: int) -> AckOutcome:
        """What :meth:`ack` would answer for ``handle`` alone, changing nothing: for a
        caller that finishes the message another way (to the DLQ, then :meth:`drop`)
        under the key's lock, so the answer still holds when it acts."""
        _check_name("group", group)
        _check_name("topic", topic)
        if not isinstance(handle, ReceiptHandle):
            raise InvalidArgumentError(f"handle must be a ReceiptHandle, got {type(handle).__name__}")
        now_ms = _check_int("now_ms", now_ms)

        def read() -> AckOutcome:
            if not self._authentic(group, topic, handle):
                return AckOutcome.FORGED
            if now_ms > handle.deadline_ms:
                return AckOutcome.EXPIRED
            qs = self._keys.get((group, topic), {}).get(handle.queue_id)
            e = qs.entries.get(handle.offset) if qs is not None else None
            return AckOutcome.OK if _current(e, handle) else AckOutcome.STALE

        return self._read(read)

    def drop(self, group: str, topic: str, queue_id: int, offsets: Iterable[int]) -> int:
        """Remove entries in flight without a handle check (after a message went to
        the DLQ, or when its record is gone), as one durable step; offsets not in
        flight are ignored. Returns how many were removed."""
        _check_name("group", group)
        _check_name("topic", topic)
        queue_id = _check_int("queue_id", queue_id, 0, _I32_MAX)
        wanted = [_check_int("offset", o) for o in offsets]

        def plan() -> tuple[int, PopDelta | None]:
            qs = self._keys.get((group, topic), {}).get(queue_id)
            found = sorted({o for o in wanted if qs is not None and o in qs.entries})
            delta = PopDelta(group, topic, [], [], [(queue_id, o) for o in found]) if found else None
            return len(found), delta

        return self._mutate(plan)

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Sync and release the journal; every later call raises StoreClosedError.
        Closing twice is harmless."""
        with self._flush_lock, self._lock:
            if self._closed:
                return
            self._closed = True
            if self._broken is None:
                try:
                    os.fdatasync(self._fd)  # fsync=False's page-cache records, on a clean close
                    self._durable_seq = self._written_seq
                except OSError as e:
                    note_sync_failure("pop.sync", self._journal_path, e)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> PopState:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _KeysView:
    """The keys of a state being read, not opened: PopState's replay (snapshot, then
    deltas) into memory, without its files, locks or journal end."""

    _apply = PopState._apply
    _load_snapshot = PopState._load_snapshot

    def __init__(self, directory: Path) -> None:
        self._keys: dict[tuple[str, str], dict[int, _Queue]] = {}
        self._snapshot_path = directory / SNAPSHOT_FILE


def read_keys(directory: str | os.PathLike[str]) -> list[PopKeyStatus]:
    """Every key of ``<directory>/pop/`` as its files hold them, read-only: no lock,
    nothing written, cut or created (``mqstore consumer-progress --store`` next to a
    running shard). Replays as opening does; the first record that is short, fails its
    CRC or breaks the seq order ends the journal (one being written at that moment).
    No state there: []. CorruptFileError for a damaged snapshot or record body."""
    where = Path(directory) / POP_DIR
    view = _KeysView(where)
    snap_seq = view._load_snapshot()
    try:
        data = (where / JOURNAL_FILE).read_bytes()
    except FileNotFoundError:
        data = b""
    last = None
    for f in whole_frames(data):
        if (last is not None and f.seq <= last) or f.seq > max(last or 0, snap_seq) + 1:
            break  # an older journal's bytes, or a compaction between the two reads: as of the snapshot
        if f.seq > snap_seq:
            view._apply(decode_body(data, f.body_start, f.end, str(where / JOURNAL_FILE)))
        last = f.seq
    return [
        PopKeyStatus(g, t, q, qs.cursor, len(qs.entries), qs.first_deadline())
        for (g, t), queues in sorted(view._keys.items())
        for q, qs in sorted(queues.items())
    ]


__all__ = [
    "COMPACT_BYTES",
    "HANDLE_VERSION",
    "JOURNAL_FILE",
    "POP_DIR",
    "SECRET_FILE",
    "SNAPSHOT_FILE",
    "AckOutcome",
    "Delivery",
    "InFlight",
    "PopKeyStatus",
    "PopRecovery",
    "PopState",
    "PopStats",
    "ReceiptHandle",
    "read_keys",
]
