"""One ConsumeQueue: the queue-offset index of one (topic, queue id) into the CommitLog.

Files (format in mqstore.formats.consume_queue):

    <store>/consumequeue/<topic>/<queueId>/<20-digit start byte offset>

Every file has exactly ``file_bytes`` bytes, zero-filled (sparse unless pre-allocated;
created under ``.tmp`` and renamed) and used through file_pool.PooledFile: no memory
map, descriptors from a bounded pool. Files are contiguous; the first may start
anywhere on a file boundary once older ones are deleted. Positions, all logical byte
offsets of the queue (unit ``n`` is at byte ``n * 20``):

    min    first unit a reader may ask for (min_offset * 20)
    wrote  where the next unit goes (max_offset * 20); bytes below it are valid units
    flushed <= wrote: bytes below it were made durable by flush()

Behaviour follows RocketMQ's ConsumeQueue (putMessagePositionInfo, fillPreBlank, recover,
truncateDirtyLogicFiles, correctMinOffset, deleteExpiredFile, binarySearchInQueueByTime)
with these differences, all on purpose: truncation zeroes the dropped bytes (RocketMQ
leaves them), min and max physical offsets never count pre-blank units, and opening the
queue finds the write position of the last file at once (RocketMQ assumes every file is
full until recover()).
"""

from __future__ import annotations

import errno
import functools
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import structlog

from mqstore.errors import CorruptFileError, InvalidMessageError, OffsetError, StoreClosedError, StoreNotWritableError
from mqstore.formats.consume_queue import (
    DEFAULT_FILE_BYTES,
    PRE_BLANK_SIZE,
    PRE_BLANK_UNIT,
    UNIT,
    UNIT_DTYPE,
    UNIT_SIZE,
    CqUnit,
    decode_units,
    encode_units,
    file_bytes_for,
    is_pre_blank,
    is_pre_blank_unit,
)
from mqstore.formats.names import check_topic, file_name_to_offset, offset_to_file_name
from mqstore.store import faults
from mqstore.store.file_pool import FilePool, PooledFile
from mqstore.store.mapped_file import fsync_dir

DEFAULT_POOL = FilePool(256)  # shared by queues opened without a pool of their own

log = structlog.get_logger(__name__)

CONSUME_QUEUE_DIR = "consumequeue"
MAX_QUEUE_ID = 65535


def queue_dir(store_dir: str | Path, topic: str, queue_id: int) -> Path:
    """``<store_dir>/consumequeue/<topic>/<queue_id>``, after checking both names.

    The topic must pass names.check_topic (no ``/``, ``.`` or NUL can appear) and the
    queue id must be an int in 0..65535, so the result is always inside the store.
    Raises InvalidTopicError or InvalidMessageError.
    """
    return Path(_queue_dir(store_dir, topic, queue_id))  # one parse: made for every new queue


_CHECKED_TOPICS: set[str] = set()  # names check_topic passed: a queue object is made for each of 400,000 queues


def _queue_dir(store_dir: str | Path, topic: str, queue_id: int) -> str:
    """``queue_dir`` as a string (an open of 80,000 queues makes no Path it does not use)."""
    if topic not in _CHECKED_TOPICS:
        check_topic(topic)
        if len(_CHECKED_TOPICS) >= 1 << 20:
            _CHECKED_TOPICS.clear()
        _CHECKED_TOPICS.add(topic)
    if isinstance(queue_id, bool) or not isinstance(queue_id, (int, np.integer)) or not 0 <= queue_id <= MAX_QUEUE_ID:
        raise InvalidMessageError(f"queue id {queue_id!r} is not an integer in 0..{MAX_QUEUE_ID}")
    return f"{store_dir}/{CONSUME_QUEUE_DIR}/{topic}/{int(queue_id)}"


@dataclass(frozen=True)
class PutResult:
    """What ``put_units`` did with a batch; the four counts add up to the batch size.

    ``gaps`` units were written although their queue offset was above the write
    position (RocketMQ logs this as a bug and writes them at the position anyway)."""

    written: int
    already_built: int  # commitlog offset + size <= max_physical_offset: dispatched before
    repeated: int  # queue offset below the write position
    gaps: int


@dataclass(frozen=True)
class TruncateReport:
    """The queue after ``recover`` or ``truncate_dirty``."""

    max_offset: int
    max_physical_offset: int
    dropped_units: int  # valid units that were before the cut (0 for recover)
    deleted_files: tuple[str, ...]
    zeroed: bool = False  # bytes after the cut were zeroed (not synced if the caller said so)


_SCAN_KEPT_BYTES = 64 << 10  # the open keeps the last file's units read (up to this much) for recovery


def _valid_units_and_rest(seg: PooledFile) -> tuple[int, int, bytes]:
    """How many valid units a file starts with, reading only as far as they go (4 KiB,
    then doubling): opening 200,000 queues must not read 6 MB each. Also where the
    bytes read end (a page boundary or the file's end) if any of those after the
    last valid unit is not zero (damage past the units), else -1 - that position;
    and the valid units' bytes (empty when there are more than _SCAN_KEPT_BYTES)."""
    count, chunk, kept = 0, 4096, []
    while count * UNIT_SIZE < seg.size:
        start = count * UNIT_SIZE
        end = min(seg.size, (start + chunk) // 4096 * 4096)
        raw = seg.read(start, end - start)
        end = start + len(raw)  # (a file shorter than it was: what is there)
        full = len(raw) // UNIT_SIZE
        got = len(decode_units(raw[: full * UNIT_SIZE]))
        count += got
        if count * UNIT_SIZE <= _SCAN_KEPT_BYTES:
            kept.append(raw[: got * UNIT_SIZE])
        if got < full or end >= seg.size or not raw:
            rest = raw[got * UNIT_SIZE :]
            keep = b"".join(kept) if count * UNIT_SIZE <= _SCAN_KEPT_BYTES else b""
            return count, -1 - end if rest == bytes(len(rest)) else end, keep
        chunk *= 2
    return count, -1 - seg.size, b""


class ConsumeQueue:
    """The unit files of one (topic, queue id); see the module docstring for the layout.

    Who calls what: one writer, the dispatcher (reput loop), calls ``put_units`` and
    ``flush``; recovery calls ``recover``, ``truncate_dirty`` and ``correct_min_offset``
    before readers start; the cleaner calls ``delete_files_below`` (and through it
    ``correct_min_offset``) serialised with the writer. Any number of reader threads
    may call ``read_units``, ``last_unit``, ``offset_at_time`` and the offset
    properties at the same time. One internal lock keeps a file from being closed
    while a reader copies from it; readers always get copies. ``close`` once, last.
    """

    def __init__(
        self,
        store_dir: str | Path,
        topic: str,
        queue_id: int,
        *,
        file_bytes: int = DEFAULT_FILE_BYTES,
        preallocate: bool = True,
        pool: FilePool | None = None,
        fresh: bool = False,
        repair: bool = False,
        read_only: bool = False,
        known: tuple[int, ...] | None = None,
    ) -> None:
        """Open (creating the directory if needed) the queue's files.

        ``known`` (first file's start byte, number of files, min offset, max offset,
        max physical offset, and optionally the last file's st_blocks), from the
        store's summary of queue ends (queue_ends.py): the queue is taken to be so,
        without any file access (ConsumeQueues decides when the summary may be
        trusted; after a crash ``recover`` still reads the last file).

        ``fresh`` says the caller knows the queue has nothing on disk: nothing is read or
        created until its first units are written out (a store with 200,000 queues must
        not pay a directory walk and two mkdirs per new queue on the dispatch path).

        ``file_bytes`` is rounded up to a multiple of 20 as RocketMQ does; every existing
        file must have that size (CorruptFileError otherwise, naming the file). Leftover
        ``*.tmp`` files of an interrupted file creation are removed, an empty last file is
        removed (as RocketMQ's load does), names that are not 20-digit offsets are ignored.

        ``repair`` (the store's open, whose layout file makes ``file_bytes`` certain): a
        last file of the wrong size (truncated or grown by damage) is resized to
        ``file_bytes`` with a warning instead of refused; recovery then cuts whatever
        units it lost or gained, and the store re-dispatches them.
        """
        self._dir = _queue_dir(store_dir, topic, queue_id)
        self.topic = topic
        self.queue_id = int(queue_id)
        self.file_bytes = file_bytes_for(file_bytes)
        self._preallocate = preallocate
        self._pool = pool or DEFAULT_POOL
        self._dir_dirty = False  # a file was created since the directory was last fsynced
        # Units put by the small-put path, not yet written: [_pending_at, _wrote). Every
        # other locked method writes them first (_drain), so files are complete there.
        self._pending = bytearray()
        self._pending_at = 0
        self._lock = threading.Lock()
        self._files: list[PooledFile] = []  # replaced, never changed in place
        self._min = 0
        self._wrote = 0
        self._flushed = 0
        self._max_phys = -1
        self._closed = False
        # Files made ahead (``make_files``) and no unit yet: the queue is as good as new
        # (its first unit may start anywhere; the file goes if that is in another file).
        self._ahead = False
        self._last_file_blocks: tuple[str, int] | None = None  # (name, st_blocks) of the last file at open
        self._read_only = read_only
        # The dispatch journal of the ConsumeQueues that own this queue may hold units
        # of it not yet given to it (ConsumeQueues.dispatch); _sync takes them first.
        self._journal = None
        self._dense = -1
        # After a crash, bytes below this are what the files held when the writer died,
        # which the re-dispatch writes again (ConsumeQueues._objects_for): compared
        # first and written only where they differ, so no page is dirtied for nothing.
        self._same_below = 0
        # The open's read of the last file, kept until recovery is done with it so that
        # a queue is read once: (its start byte, the valid units' bytes from its start,
        # _valid_units_and_rest's rest marker). Dropped by any change of the files.
        self._scan: tuple[int, bytes, int] | None = None
        if known is not None:
            self._take_known(*known)
        elif not fresh:
            self._load(repair and not read_only)

    @functools.cached_property
    def directory(self) -> Path:
        """The queue's directory (made on use: most queues of a big open never need it)."""
        return Path(self._dir)

    @property
    def _log(self):  # bound on use: most queues never log, and 200,000 bound loggers cost memory
        return log.bind(topic=self.topic, queue_id=self.queue_id)

    # ------------------------------------------------------------------ open

    def _take_known(
        self, first_file: int, files: int, min_offset: int, max_offset: int, max_phys: int, blocks: int = -1
    ) -> None:
        directory, sparse = self._dir, not self._preallocate
        self._files = [
            PooledFile(f"{directory}/{base:020d}", base, self.file_bytes, self._pool, sparse=sparse)
            for base in range(first_file, first_file + files * self.file_bytes, self.file_bytes)
        ]
        self._min = min_offset * UNIT_SIZE
        self._wrote = self._flushed = max_offset * UNIT_SIZE
        self._max_phys = max_phys
        if blocks >= 0 and self._files:
            self._last_file_blocks = (self._files[-1].name, blocks)  # see _data_after

    def _load(self, repair: bool = False) -> None:
        directory = self._dir  # (strings: a queue's open is a few syscalls, Path objects cost more)
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return  # nothing yet: the directory is made with the first file
        bases = []
        for name in names:
            if name.endswith(".tmp"):
                if not self._read_only:
                    self._log.warning("unfinished_file_removed", path=f"{directory}/{name}")
                    os.unlink(f"{directory}/{name}")
                continue
            try:
                bases.append(file_name_to_offset(name))
            except ValueError:
                self._log.warning("stray_file_ignored", path=f"{directory}/{name}")
        bases.sort()
        stats = [os.stat(f"{directory}/{b:020d}") for b in bases]  # one stat per file
        sizes = [st.st_size for st in stats]
        if bases and sizes[-1] == 0:
            last = self.directory / offset_to_file_name(bases[-1])
            if not self._read_only:
                self._log.warning("empty_file_removed", path=str(last))
                last.unlink()
            bases.pop()
            sizes.pop()
        if repair and bases and sizes[-1] != self.file_bytes and not bases[-1] % self.file_bytes:
            last = self.directory / offset_to_file_name(bases[-1])
            self._log.warning("consume_queue_file_resized", path=str(last), size=sizes[-1], expected=self.file_bytes)
            os.truncate(last, self.file_bytes)
            sizes[-1] = self.file_bytes
        files = []
        try:
            for i, (base, size) in enumerate(zip(bases, sizes, strict=True)):
                path = f"{directory}/{base:020d}"
                if base % self.file_bytes:
                    raise CorruptFileError(f"{path}: start offset is not a multiple of the file size {self.file_bytes}")
                if i and base != bases[i - 1] + self.file_bytes:
                    raise CorruptFileError(f"{self.directory}: consume queue files are not contiguous at {base:020d}")
                if size != self.file_bytes:
                    raise CorruptFileError(
                        f"{path}: consume queue file has {size} bytes, expected {self.file_bytes}; "
                        "open the store with the file size it was created with"
                    )
                files.append(PooledFile(path, base, self.file_bytes, self._pool, sparse=not self._preallocate))
        except BaseException:
            for seg in files:
                seg.close()
            raise
        self._files = files
        if not files:
            return
        last = files[-1]
        self._last_file_blocks = (last.name, stats[len(files) - 1].st_blocks)  # see _data_after
        count, read_to, kept = _valid_units_and_rest(last)
        if kept or not count:
            self._scan = (last.base_offset, kept, read_to)
        self._wrote = last.base_offset + count * UNIT_SIZE
        self._flushed = self._wrote
        self._min = self._first_real_byte(files[0].base_offset)
        self._max_phys = self._last_real_end()

    # ------------------------------------------------------------------ helpers (callers hold the lock)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"consume queue {self.topic}-{self.queue_id} is closed")

    def _find(self, byte: int) -> PooledFile | None:
        files = self._files
        if not files:
            return None
        i = (byte - files[0].base_offset) // self.file_bytes
        return files[i] if 0 <= i < len(files) else None

    def _read(self, seg: PooledFile, pos: int, n: int) -> bytes:
        """``seg.read``, served from the open's read of the last file when it holds the bytes."""
        scan = self._scan
        if scan is not None and scan[0] == seg.base_offset and pos + n <= len(scan[1]):
            return scan[1][pos : pos + n]
        return seg.read(pos, n)

    def forget_scan(self) -> None:
        """Drop the bytes the open read (recovery is done with them)."""
        self._scan = None

    def _valid_units(self, seg: PooledFile, start: int = 0) -> np.ndarray:
        """Valid units of ``seg`` from byte ``start`` up to the write position."""
        end = min(seg.size, self._wrote - seg.base_offset)
        return decode_units(self._read(seg, start, end - start)) if end > start else np.empty(0, UNIT_DTYPE)

    def _first_real_byte(self, start: int) -> int:
        """The first byte >= ``start`` whose unit is not a pre-blank (or ``wrote``)."""
        seg = self._find(start)
        if seg is None or start >= self._wrote:
            return self._wrote
        o, s, t = UNIT.unpack(self._read(seg, start - seg.base_offset, UNIT_SIZE))
        if o >= 0 and s > 0 and not (o == 0 and s == PRE_BLANK_SIZE and t == 0):
            return start  # the common case, without reading the file
        units = self._valid_units(seg, start - seg.base_offset)
        k = int(np.argmin(is_pre_blank(units))) if len(units) and not is_pre_blank(units).all() else len(units)
        return start + k * UNIT_SIZE

    def _last_real_end(self) -> int:
        """commitlog offset + size of the last unit that is not a pre-blank; -1 if none."""
        last_seg = self._find(self._wrote - UNIT_SIZE) if self._wrote >= UNIT_SIZE else None
        if last_seg is not None:
            o, s, t = UNIT.unpack(self._read(last_seg, self._wrote - UNIT_SIZE - last_seg.base_offset, UNIT_SIZE))
            if o >= 0 and s > 0 and not (o == 0 and s == PRE_BLANK_SIZE and t == 0):  # the common case: one unit
                return o + s
        for seg in reversed(self._files[-2:]):  # pre-blanks live in one file only
            units = self._valid_units(seg)
            real = np.flatnonzero(~is_pre_blank(units))
            if real.size:
                u = units[real[-1]]
                return int(u["commitlog_offset"]) + int(u["size"])
        return -1

    def _probe_locked(self, byte: int) -> tuple[int, int]:
        """(commitlog offset, size) of the unit at logical ``byte`` (inside the files)."""
        seg = self._find(byte)
        o, s, _ = UNIT.unpack(self._read(seg, byte - seg.base_offset, UNIT_SIZE))
        return o, s

    def _cut(self, cut: int, *, sync: bool = True) -> list[str]:
        """Delete files that start after ``cut``, zero the rest of the one holding it
        (synced unless ``sync`` is False: the caller syncs many queues at once)."""
        self._scan = None
        deleted = []
        files = list(self._files)
        while files and files[-1].base_offset > cut:
            seg = files.pop()
            deleted.append(seg.path.name)
            seg.delete()
        self._files = files
        if deleted:
            self._fsync_dirs(self.directory)
        seg = self._find(cut)
        if seg is not None and cut < seg.end_offset:
            seg.zero_from(cut - seg.base_offset)
            if sync:
                seg.sync()
        return deleted

    # ------------------------------------------------------------------ writes (the dispatcher)

    def _sync(self) -> None:
        """Take this queue's units from its owner's dispatch journal, if it holds any.
        Every read and every change from outside the dispatch path does, before its
        lock (the journal's lock comes first); the write-behind steps (``write_behind``,
        ``flush``, ``prepare_flush``, ``buffered_bytes``, ``has_files``) do not: the
        owner gives the queues the whole journal before them."""
        owner = self._journal
        if owner is not None and owner.journaled(self._dense):
            owner.move_in(self)

    def journal_state(self) -> tuple[int, int]:
        """What the next unit must continue, for the owner's dispatch journal: (its
        queue offset, or -1 when any will do: the queue holds no unit yet; the
        commitlog end of the last unit, -1 if none). ``append_run``'s rules."""
        with self._lock:
            fresh = (not self._files or self._ahead) and not self._pending
            return (-1 if fresh else self._wrote // UNIT_SIZE), self._max_phys

    def put_units(self, queue_offsets, phys_offsets, sizes, tags_codes) -> PutResult:
        """Append units in order (RocketMQ putMessagePositionInfo, for a whole batch).

        Per unit: skip it if ``phys + size <= max_physical_offset`` (already built, e.g.
        re-dispatched after a restart); if the queue has no file yet, create the file that
        holds its queue offset and fill the units before it with pre-blanks (min offset
        becomes its queue offset); otherwise, unless its queue offset is 0 (RocketMQ
        checks no position for offset 0), skip it if its queue offset is below the write
        position ("repeated") and log a gap if above, then write it at the write position.

        Encodes with numpy and issues one pwrite per file touched; files the batch needs
        are created before any byte is written. Arguments are sequences of equal length
        (scalars broadcast); commitlog offsets must be >= 0 and sizes > 0.
        """
        self._sync()
        qo, phys, sizes_, tags = np.broadcast_arrays(
            np.atleast_1d(np.asarray(queue_offsets, np.int64)),
            np.atleast_1d(np.asarray(phys_offsets, np.int64)),
            np.atleast_1d(np.asarray(sizes, np.int64)),
            np.atleast_1d(np.asarray(tags_codes, np.int64)),
        )
        n = qo.shape[0]
        if qo.ndim != 1:
            raise ValueError(f"units are given as 1-D sequences, got shape {qo.shape}")
        if n == 0:
            return PutResult(0, 0, 0, 0)
        if qo.min() < 0 or phys.min() < 0 or sizes_.min() <= 0:
            raise ValueError("queue offsets and commitlog offsets must be >= 0 and sizes > 0")
        ends = phys + sizes_
        with self._lock:
            self._drain()
            self._check_open()
            fresh = not self._files or self._ahead
            cur = qo[0] * UNIT_SIZE if fresh else self._wrote
            max_phys = self._max_phys
            already = repeated = gaps = 0
            if (
                ends[0] > max_phys
                and (n == 1 or (np.diff(ends) > 0).all())
                and (qo == cur // UNIT_SIZE + np.arange(n)).all()
            ):
                keep: slice | list[int] = slice(None)  # the usual case: a contiguous run
                written = n
            else:
                keep = []
                for i, (q, end) in enumerate(zip(qo.tolist(), ends.tolist(), strict=True)):
                    if end <= max_phys:
                        already += 1
                        continue
                    if fresh and not keep:
                        cur = q * UNIT_SIZE
                    elif q != 0:
                        if q * UNIT_SIZE < cur:
                            repeated += 1
                            continue
                        if q * UNIT_SIZE > cur:
                            gaps += 1
                            self._log.error("queue_offset_gap", queue_offset=q, write_position=cur // UNIT_SIZE)
                    elif cur:
                        self._log.warning("queue_offset_zero_appended", write_position=cur // UNIT_SIZE)
                    keep.append(i)
                    cur += UNIT_SIZE
                    max_phys = end
                written = len(keep)
            if already or repeated:
                self._log.info("units_skipped", already_built=already, repeated=repeated)
            if not written:
                return PutResult(0, already, repeated, gaps)
            first = int(qo[keep][0]) * UNIT_SIZE
            data = encode_units(phys[keep], sizes_[keep], tags[keep])
            if fresh:
                start = first - first % self.file_bytes
                data = PRE_BLANK_UNIT * ((first - start) // UNIT_SIZE) + data
                if first > start:
                    self._log.info(
                        "pre_blank_filled", file=offset_to_file_name(start), units=(first - start) // UNIT_SIZE
                    )
            else:
                start = self._wrote
            if self._ahead:
                self._leave_ahead(start)
            self._write(start, data)
            if fresh:
                self._min = first
                self._flushed = start
            self._wrote = start + len(data)
            self._max_phys = int(ends[keep][-1])
            return PutResult(written, already, repeated, gaps)

    def append_run(self, first_offset: int, count: int, first_end: int, last_end: int, data) -> int:
        """The dispatcher's path: ``count`` encoded units (``data``, 20 bytes each) that
        continue the queue exactly: the first has queue offset ``first_offset`` (the
        write position, or anything for a queue with no units yet) and ends past
        ``max_physical_offset`` in the commitlog (``first_end``), the rest follow it
        (the caller checked). They are only buffered: written out by ``write_behind``,
        ``flush`` or any read, so a unit costs a bytes append and a new queue no disk
        access here. Returns the bytes now buffered, or -1 when the run does not simply
        continue the queue (``put_units`` then sorts out repeats and gaps)."""
        with self._lock:
            if self._closed or first_end <= self._max_phys:
                return -1
            first = first_offset * UNIT_SIZE
            if (not self._files or self._ahead) and not self._pending:  # a new queue: pre-blanks up to its first unit
                start = first - first % self.file_bytes
                if self._ahead:
                    self._leave_ahead(start)
                self._min, self._flushed, self._pending_at = first, start, start
                if first > start:
                    self._pending += PRE_BLANK_UNIT * ((first - start) // UNIT_SIZE)
                    self._log.info(
                        "pre_blank_filled", file=offset_to_file_name(start), units=(first - start) // UNIT_SIZE
                    )
            elif first != self._wrote:
                return -1
            elif not self._pending:
                self._pending_at = first
            self._pending += data
            self._wrote = first + count * UNIT_SIZE
            self._max_phys = last_end
            return len(self._pending)

    def reserve_run(self, first_offset: int, count: int, first_end: int) -> tuple[str, int] | None:
        """The owner's write-out of many queues at once (ConsumeQueues._write_direct):
        when ``count`` units from queue offset ``first_offset`` (first ending at
        ``first_end`` in the commitlog) continue the queue exactly and fit in its last
        file, with nothing buffered before them and nothing the write must compare
        first (``_same_below``), the queue's lock is taken and kept until
        ``finish_run`` and (the last file's path, the byte in it where the units go)
        is returned; else None (lock not held: ``append_run`` takes them)."""
        self._lock.acquire()
        files, wrote = self._files, self._wrote
        if (
            files
            and not self._pending
            and not self._closed
            and first_offset * UNIT_SIZE == wrote
            and first_end > self._max_phys
            and wrote >= self._same_below
        ):
            last = files[-1]
            at = wrote - last.base_offset
            if 0 <= at and at + count * UNIT_SIZE <= last.size:
                return last._path, at
        self._lock.release()
        return None

    def finish_run(self, count: int, last_end: int, unwritten=None) -> None:
        """After ``reserve_run``: the units were written at the place it gave (or, with
        ``unwritten``, their bytes, could not be: they are buffered as ``append_run``
        buffers them, and the next write-out tries again); the queue now ends with
        them. Lets go of the lock."""
        try:
            if unwritten is not None:
                self._pending_at = self._wrote
                self._pending += unwritten
            self._wrote += count * UNIT_SIZE
            self._max_phys = last_end
            self._ahead = False  # (a file made ahead at the first unit's place is the queue's now)
            self._scan = None
        finally:
            self._lock.release()

    def _leave_ahead(self, start: int) -> None:
        """The first units of a queue whose file was made ahead go from byte ``start``
        (a file boundary): the made file goes unless it is that one (caller holds the lock)."""
        self._ahead = False
        if self._files and self._files[0].base_offset != start:
            for seg in self._files:
                seg.delete()
            self._files = []
            self._min = self._wrote = self._flushed = 0

    def make_files(self, base: int) -> bool:
        """Make the queue's directory and its file at byte ``base`` (a file boundary)
        now, before the first write-out needs them, so that the write-out is a plain
        pwrite: ConsumeQueues' creator thread calls this off the dispatch path (and
        ``make_ahead`` at topic creation). ``base`` is where the queue's first unit
        goes; units already buffered say it themselves. A queue with files (or closed,
        or read-only) is left alone. Sparse, not synced (the next flush syncs the
        names). Returns whether the file was made.

        The directory and file are made outside the queue's lock (a few hundred
        microseconds of metadata work that a write-out or a read must not wait
        for); a write-out that needs the file meanwhile makes it itself or takes
        this one (``PooledFile.create(adopt=True)``), and a file nobody took is
        removed."""
        todo = self.files_to_make(base)
        if todo is None:
            return False
        d, path, base = todo
        try:
            os.mkdir(d)
        except FileNotFoundError:
            os.makedirs(d, exist_ok=True)
        except FileExistsError:
            pass
        seg = PooledFile.create(
            Path(path), base, self.file_bytes, self._pool, preallocate=False, sync_dir=False, adopt=True
        )
        return self._take_made(seg)

    def files_to_make(self, base: int) -> tuple[str, str, int] | None:
        """What ``make_files(base)`` would make: (the queue's directory, the file's
        path, its start byte), or None when it would make nothing. The creator thread
        makes many queues' files at once (kernels/_files.pyx) and hands each to
        ``take_made``."""
        with self._lock:
            if self._closed or self._read_only or self._files or self._preallocate:
                return None
            if self._pending:
                base = self._pending_at
        return self._dir, f"{self._dir}/{base:020d}", base

    def take_made(self, path: str, base: int) -> bool:
        """The file ``files_to_make`` named was made (sparse, the queue file size):
        the queue takes it as ``make_files`` would."""
        return self._take_made(PooledFile(path, base, self.file_bytes, self._pool, sparse=True))

    def _take_made(self, seg: PooledFile) -> bool:
        base = seg.base_offset
        with self._lock:
            if self._closed or self._files or (self._pending and self._pending_at != base):
                if not any(f.base_offset == base for f in self._files):  # not taken by a write-out: not left behind
                    seg.delete()
                return False
            self._files = [seg]
            self._dir_dirty = True
            if not self._pending:  # no unit yet: empty at ``base`` until one comes
                self._min = self._wrote = self._flushed = base
                self._ahead = True
            return True

    def write_behind(self) -> int:
        """Write out buffered units (creating the queue's directory and files as needed);
        returns how many bytes were written. The flusher calls this off the dispatch path."""
        with self._lock:
            if self._closed:
                return 0
            n = len(self._pending)
            self._drain()
            return n

    @property
    def buffered_bytes(self) -> int:
        """Units put but not written out yet (bytes), those in the owner's dispatch
        journal included."""
        owner = self._journal
        return len(self._pending) + (owner.journaled_units(self._dense) * UNIT_SIZE if owner is not None else 0)

    def _fsync_dirs(self, *dirs: Path) -> None:
        with self._pool.transient():  # directory descriptors count against the pool's bound too
            for d in dirs:
                fsync_dir(d)

    def _make_directory(self) -> None:
        try:
            os.mkdir(self._dir)  # os, not pathlib: made for each of thousands of new queues
        except FileNotFoundError:
            os.makedirs(self._dir, exist_ok=True)
        except FileExistsError:
            return
        self._dir_dirty = True

    def _drain(self) -> None:
        """Write the buffered units (caller holds the lock)."""
        if self._pending:
            self._write(self._pending_at, bytes(self._pending))  # a failure (a full disk) keeps them for the next drain
            self._pending = bytearray()

    def _write(self, start: int, data: bytes) -> None:
        self._scan = None
        end = start + len(data)
        files = list(self._files)
        created: list[PooledFile] = []
        next_base = files[-1].end_offset if files else start - start % self.file_bytes
        if not files and next_base < end:
            self._make_directory()
        try:
            while next_base < end:  # every file first: a full disk fails before the queue moves on
                lo, hi = max(start, next_base), min(end, next_base + self.file_bytes)
                created.append(
                    PooledFile.create(
                        self.directory / offset_to_file_name(next_base),
                        next_base,
                        self.file_bytes,
                        self._pool,
                        preallocate=self._preallocate,
                        sync_dir=False,
                        data=data[lo - start : hi - start],
                        at=lo - next_base,
                        adopt=True,  # the creator thread may have made it (``make_files``)
                    )
                )
                self._dir_dirty = True  # made durable by the next flush: one fsync, off the hot path
                self._log.debug("file_created", file=offset_to_file_name(next_base))
                next_base += self.file_bytes
        except BaseException:
            for seg in created:  # an empty file after the last unit would look like a write position
                seg.delete()
            raise
        self._files = files + created
        byte = start
        end = min(end, created[0].base_offset) if created else end  # new files got their bytes at creation
        while byte < end:
            seg = self._find(byte)
            k = min(seg.end_offset, end) - byte
            if byte < self._same_below:
                k = min(k, self._same_below - byte)
                piece = data[byte - start : byte - start + k]
                if seg.read(byte - seg.base_offset, k) != piece:
                    seg.write(byte - seg.base_offset, piece)
            elif k > UNIT_SIZE and faults.armed("cq.write"):  # crash tests: a torn write, cut inside a unit
                k = k // 2 + UNIT_SIZE // 2 - (k // 2) % UNIT_SIZE
                seg.write(byte - seg.base_offset, data[byte - start : byte - start + k])
                faults.hit("cq.write", seg.path)
            else:
                seg.write(byte - seg.base_offset, data[byte - start : byte - start + k])
            byte += k

    def flush(self, least_bytes: int = 0) -> int:
        """Make every unit written so far durable, unless fewer than ``least_bytes``
        are waiting (RocketMQ flushConsumeQueueLeastPages); returns the queue offset
        below which all units are durable."""
        with self._lock:
            self._check_open()
            start, end = self._flushed, self._wrote
            if end - start < max(least_bytes, 1):
                return start // UNIT_SIZE  # buffered units stay buffered too
            self._drain()
            if self._dir_dirty:  # new files' names, and the queue's directories themselves
                self._fsync_dirs(self.directory, self.directory.parent, self.directory.parent.parent)
                self._dir_dirty = False
            for seg in self._files:
                lo, hi = max(start, seg.base_offset), min(end, seg.end_offset)
                if lo < hi:
                    seg.sync(lo - seg.base_offset, hi - seg.base_offset)
            self._flushed = end
            return end // UNIT_SIZE

    def prepare_flush(self, least_bytes: int = 0) -> int | None:
        """``flush`` without the fsync, for a caller that makes the whole file system
        durable at once (one syncfs for thousands of queues): writes out buffered units
        and returns the queue offset they reach, to hand to ``mark_flushed`` after the
        sync; None if fewer than ``least_bytes`` are waiting."""
        with self._lock:
            self._check_open()
            if self._wrote - self._flushed < max(least_bytes, 1):
                return None
            self._drain()
            return self._wrote // UNIT_SIZE

    def prepare_flush_row(self) -> tuple[int | None, tuple[int, int, int, int, int] | None]:
        """``prepare_flush`` and, in the same hold of the lock, the queue's row for the
        store's summary of queue ends (queue_ends.py): (first file's start byte, number
        of files, min offset, max offset, max physical offset) as written out now;
        None for a queue without files."""
        with self._lock:
            self._check_open()
            offset = None
            if self._wrote - self._flushed >= 1:
                self._drain()
                offset = self._wrote // UNIT_SIZE
            files = self._files
            if not files:
                return offset, None
            return offset, (
                files[0].base_offset,
                len(files),
                self._min // UNIT_SIZE,
                self._wrote // UNIT_SIZE,
                self._max_phys,
            )

    def sync_files(self) -> None:
        """fdatasync the queue's last file (after a ``recover`` that zeroed without syncing)."""
        with self._lock:
            if self._files and not self._closed:
                self._files[-1].sync()

    def mark_flushed(self, queue_offset: int) -> None:
        """Units below ``queue_offset`` were made durable by the caller (see ``flush``),
        and the names made so far (a caller that calls ``flush`` instead after
        ``prepare_flush`` still gets the directory fsyncs: a power-loss test lost
        every queue directory when ``prepare_flush`` cleared them)."""
        with self._lock:
            self._flushed = max(self._flushed, min(queue_offset * UNIT_SIZE, self._wrote))
            self._dir_dirty = False  # the caller's syncfs covered the names too

    # ------------------------------------------------------------------ reads (any thread)

    @property
    def min_offset(self) -> int:
        """The first queue offset a reader may ask for."""
        self._sync()
        return self._min // UNIT_SIZE

    @property
    def max_offset(self) -> int:
        """The queue offset the next unit gets (one past the last unit)."""
        self._sync()
        return self._wrote // UNIT_SIZE

    @property
    def max_physical_offset(self) -> int:
        """commitlog offset + size of the last unit written (pre-blanks aside); -1 if none."""
        self._sync()
        return self._max_phys

    @property
    def flushed_offset(self) -> int:
        """Units below this queue offset were made durable by ``flush``."""
        self._sync()
        return self._flushed // UNIT_SIZE

    @property
    def file_end(self) -> int:
        """The logical byte where the last file ends (0 without files)."""
        files = self._files
        return files[-1].end_offset if files else 0

    @property
    def has_files(self) -> bool:
        """False until the queue's first units are written out."""
        return bool(self._files)

    @property
    def files(self) -> list[str]:
        """Names of the queue's files, oldest first."""
        self._sync()
        return [seg.path.name for seg in self._files]

    def read_units(self, queue_offset: int, max_count: int) -> np.ndarray:
        """Up to ``max_count`` units from ``queue_offset`` on, across files (a copy, with
        UNIT_DTYPE; unit ``i`` has queue offset ``queue_offset + i``).

        Empty at or past ``max_offset``; OffsetError below ``min_offset``. Stops early
        at an invalid unit (damage no recover() has cut yet)."""
        self._sync()
        if max_count <= 0:
            raise ValueError(f"max_count must be > 0, got {max_count}")
        with self._lock:
            try:
                self._drain()
            except (OSError, StoreNotWritableError) as e:  # a full disk: serve the buffered units as they are
                self._log.debug("consume_queue_read_from_buffer", error=str(e))
            self._check_open()
            if queue_offset < self._min // UNIT_SIZE:
                raise OffsetError(
                    f"queue offset {queue_offset} of {self.topic}-{self.queue_id} is below the min offset "
                    f"{self._min // UNIT_SIZE}"
                )
            byte = queue_offset * UNIT_SIZE
            end = min(self._wrote, byte + max_count * UNIT_SIZE)
            buffered_from = self._pending_at if self._pending else end  # units from here on are not in files yet
            chunks = []
            while byte < end:
                if byte >= buffered_from:
                    chunks.append(bytes(self._pending[byte - buffered_from : end - buffered_from]))
                    break
                seg = self._find(byte)
                if seg is None:
                    break
                k = min(seg.end_offset, end, buffered_from) - byte
                chunks.append(self._read(seg, byte - seg.base_offset, k))
                byte += k
        return decode_units(b"".join(chunks))

    def last_unit(self) -> CqUnit | None:
        """The last unit written, or None if the queue holds none."""
        self._sync()
        with self._lock:
            self._drain()
            self._check_open()
            byte = self._wrote - UNIT_SIZE
            if byte < self._min or (seg := self._find(byte)) is None:
                return None
            o, s, t = UNIT.unpack(seg.read(byte - seg.base_offset, UNIT_SIZE))
        return CqUnit(byte // UNIT_SIZE, o, s, t)

    def _probe(self, seg: PooledFile, pos: int) -> tuple[int, int] | None:
        """(commitlog offset, size) of the unit at ``pos`` of ``seg``; None if the file is gone."""
        with self._lock:
            self._drain()
            if seg.closed:
                return None
            o, s, _ = UNIT.unpack(seg.read(pos, UNIT_SIZE))
        return o, s

    def offset_at_time(
        self, timestamp: int, store_time_of: Callable[[np.ndarray], np.ndarray], *, commitlog_min_offset: int = 0
    ) -> int:
        """The first queue offset whose message was stored at or after ``timestamp`` (ms).

        RocketMQ 5.x getOffsetInQueueByTime with BoundaryType.LOWER: pick the first file
        (not the last) whose last unit's store time is >= timestamp, else the last file;
        in it, if the last written unit is older, return the offset after it (so a time
        after every message gives ``max_offset``); if the first unit is newer, return the
        file's first offset (``min_offset`` for the first file: RocketMQ returns the
        file's start even when pre-blanks or deleted messages lie before min); else binary
        search, and on an exact hit step back over units with the same store time;
        without one, the first unit after the time. Units pointing below
        ``commitlog_min_offset`` are skipped to the right.

        ``store_time_of`` maps an int64 array of commitlog offsets to their
        STORETIMESTAMPs, -1 where it cannot read one. As in RocketMQ, a -1 met during
        the binary search returns 0. An empty queue returns ``max_offset``.
        """
        self._sync()
        with self._lock:
            self._drain()
            self._check_open()
            files, wrote, min_byte = list(self._files), self._wrote, self._min
        files = [seg for seg in files if seg.end_offset > min_byte and seg.base_offset < wrote]
        if not files:
            return wrote // UNIT_SIZE

        # Store times are asked for in batches and kept: served, each call is one RPC to
        # the commitlog. The search below asks exactly the units RocketMQ's would; the
        # batches only add the units its next steps may ask (``_prefetch``).
        known: dict[int, int] = {}

        def fetch(phys: list[int]) -> None:
            missing = list(dict.fromkeys(p for p in phys if p not in known))
            if missing:
                known.update(zip(missing, np.asarray(store_time_of(np.array(missing, np.int64))).tolist()))

        def time_of(phys: int) -> int:
            fetch([phys])
            return int(known[phys])

        seg = files[-1]
        if len(files) > 1:  # getConsumeQueueMappedFileByTime: the stop time of each full file
            lasts = [self._probe(f, f.size - UNIT_SIZE) for f in files[:-1]]
            if any(p is None for p in lasts):
                return self.min_offset  # the cleaner deleted files meanwhile
            phys = np.array([p[0] for p in lasts], np.int64)
            times = np.asarray(store_time_of(phys), np.int64)
            times = np.where(phys >= commitlog_min_offset, times, -1)
            hits = np.flatnonzero(times >= timestamp)
            if hits.size:
                seg = files[int(hits[0])]
        base = seg.base_offset
        floor = low = max(min_byte - base, 0)
        ceiling = high = min(seg.size, wrote - base) - UNIT_SIZE
        if ceiling < floor:
            return wrote // UNIT_SIZE
        top = self._probe(seg, ceiling)
        bottom = self._probe(seg, floor) if top is not None else None
        fetch([u[0] for u in (top, bottom) if u is not None])  # both ends in one call
        if top is None:
            return self.min_offset
        if time_of(top[0]) < timestamp:
            return (base + ceiling + UNIT_SIZE) // UNIT_SIZE
        if bottom is None:
            return self.min_offset
        if time_of(bottom[0]) > timestamp:
            return (base + floor) // UNIT_SIZE
        target = right = -1
        while high >= low:
            mid = (low + high) // (2 * UNIT_SIZE) * UNIT_SIZE
            if (p := self._probe(seg, mid)) is None:
                return self.min_offset
            if p[0] < commitlog_min_offset:
                low = mid + UNIT_SIZE
                continue
            if p[0] not in known:
                fetch(self._search_tree(seg, low, high, commitlog_min_offset))
            t = time_of(p[0])
            if t < 0:
                self._log.warning("store_time_unreadable", commitlog_offset=p[0])
                return 0
            if t == timestamp:
                target = mid
                break
            if t > timestamp:
                high, right = mid - UNIT_SIZE, mid
            else:
                low = mid + UNIT_SIZE
        if target < 0:
            return (base + right) // UNIT_SIZE if right >= 0 else wrote // UNIT_SIZE
        while target - UNIT_SIZE >= floor:
            if (p := self._probe(seg, target - UNIT_SIZE)) is None:
                break
            if p[0] not in known:  # the units before it, 64 at a time
                back = range(target - UNIT_SIZE, max(floor, target - 64 * UNIT_SIZE) - 1, -UNIT_SIZE)
                fetch([q[0] for q in (self._probe(seg, pos) for pos in back) if q is not None])
            if time_of(p[0]) != timestamp:
                break
            target -= UNIT_SIZE
        return (base + target) // UNIT_SIZE

    def _search_tree(
        self, seg: PooledFile, low: int, high: int, commitlog_min_offset: int, depth: int = 6
    ) -> list[int]:
        """Commitlog offsets of the units the binary search over [low, high] of ``seg``
        may probe in its next ``depth`` steps, whichever way each goes (at most
        2**depth - 1): fetched in one batch, they save an RPC per step."""
        out: list[int] = []
        todo = [(low, high, depth)]
        while todo:
            lo, hi, d = todo.pop()
            if d == 0 or hi < lo:
                continue
            mid = (lo + hi) // (2 * UNIT_SIZE) * UNIT_SIZE
            if (p := self._probe(seg, mid)) is None:
                continue
            if p[0] < commitlog_min_offset:
                todo.append((mid + UNIT_SIZE, hi, d - 1))
                continue
            out.append(p[0])
            todo += [(lo, mid - UNIT_SIZE, d - 1), (mid + UNIT_SIZE, hi, d - 1)]
        return out

    # ------------------------------------------------------------------ recovery and cleaning

    def recover(self, *, zero_tail: bool = True, sync: bool = True) -> TruncateReport:
        """RocketMQ ConsumeQueue.recover: scan from the third-to-last file, stop at the
        first invalid unit and cut there: later files are deleted and the rest of the
        file holding the cut is zeroed. A file that is valid to its end passes the scan
        to the next one. Files before the last are read whole; the last one only as far
        as its units go (opening 200,000 queues must not read 6 MB each), and not again
        if the open just read it.

        In the last file, bytes after the last unit are zeroed only if there are any
        (read as not zero, or data allocated past what was read: ``_data_after``);
        ``zero_tail`` (after a crash) zeroes them in a file that is not sparse too,
        where allocation tells nothing. ``sync=False`` leaves a zeroed file unsynced
        (the report says ``zeroed``): the caller syncs many queues at once."""
        self._sync()
        with self._lock:
            self._drain()
            self._check_open()
            files = self._files
            if not files:
                self._max_phys = -1
                return TruncateReport(0, -1, 0, ())
            cut = None
            zeroed = False
            for seg in files[max(0, len(files) - 3) : -1]:
                n = len(decode_units(seg.read(0, seg.size)))
                if n * UNIT_SIZE < seg.size:
                    cut = seg.base_offset + n * UNIT_SIZE
                    break
            if cut is None:
                last, scan = files[-1], self._scan
                if scan is not None and scan[0] == last.base_offset:
                    count, read_to = len(scan[1]) // UNIT_SIZE, scan[2]
                else:
                    count, read_to, kept = _valid_units_and_rest(last)
                    if kept or not count:
                        self._scan = (last.base_offset, kept, read_to)
                cut = last.base_offset + count * UNIT_SIZE
                if read_to >= 0 or self._data_after(last, -1 - read_to):
                    if not zero_tail:
                        self._log.warning("bytes_after_last_unit_zeroed", at=cut // UNIT_SIZE, file=last.path.name)
                    deleted, zeroed = self._cut(cut, sync=sync), True
                elif zero_tail and not last.sparse:
                    deleted, zeroed = self._cut(cut, sync=sync), True
                else:
                    deleted = []
            else:
                deleted, zeroed = self._cut(cut, sync=sync), True
            if deleted or cut < self._wrote:  # (past it: a queue opened from the summary of queue ends went on)
                self._log.warning(
                    "consume_queue_truncated", at=cut // UNIT_SIZE, was=self._wrote // UNIT_SIZE, deleted_files=deleted
                )
            self._wrote = self._flushed = cut
            self._min = min(self._min, cut)
            self._max_phys = self._last_real_end()
            return TruncateReport(cut // UNIT_SIZE, self._max_phys, 0, tuple(deleted), zeroed)

    def _data_after(self, seg: PooledFile, pos: int) -> bool:
        """Whether the last file ``seg`` holds data from ``pos`` (a page boundary past
        the last unit) on: damage, nothing is ever written there. Cheap, for every
        queue on every open: units are written from the file's start, so a sparse
        file whose allocated blocks (counted when the queue was opened) do not reach
        past ``pos`` has none; else lseek(SEEK_DATA) tells."""
        if pos >= seg.size or not seg.sparse:
            return False
        known = self._last_file_blocks
        if known is not None and known[0] == seg.name and known[1] * 512 <= pos:
            return False
        with seg._fd_in_use() as fd:  # the pooled descriptor reads use
            try:
                os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as e:  # ENXIO: only a hole follows
                return e.errno != errno.ENXIO
        return True

    def truncate_at(self, queue_offset: int) -> TruncateReport:
        """Drop every unit from ``queue_offset`` on (recovery found them not to match
        their records)."""
        self._sync()
        with self._lock:
            self._drain()
            self._check_open()
            before = self._wrote
            first = self._files[0].base_offset if self._files else 0
            cut = min(max(queue_offset * UNIT_SIZE, first), before)
            deleted = self._cut(cut)
            dropped = (before - cut) // UNIT_SIZE
            if dropped:
                self._log.warning("bad_units_truncated", at=queue_offset, dropped_units=dropped, deleted_files=deleted)
            self._wrote = cut
            self._flushed = min(self._flushed, cut)
            self._max_phys = self._last_real_end()
            return TruncateReport(cut // UNIT_SIZE, self._max_phys, dropped, tuple(deleted))

    def truncate_dirty(self, phys_offset: int) -> TruncateReport:
        """RocketMQ truncateDirtyLogicFiles: drop every unit pointing at or after
        ``phys_offset`` (the commitlog was cut there). From the last file backwards:
        a file whose first unit is invalid or points at >= ``phys_offset`` is deleted;
        in the first other one, units are kept while they point below it."""
        self._sync()
        with self._lock:
            self._drain()
            self._check_open()
            before = self._wrote
            if self._wrote > self._min and 0 <= self._max_phys <= phys_offset:
                # The usual case, without a read: the newest unit ends below the cut, so every unit does.
                return TruncateReport(before // UNIT_SIZE, self._max_phys, 0, ())
            files = list(self._files)
            deleted: list[str] = []
            cut = files[0].base_offset if files else 0
            while files:
                seg = files[-1]
                units = self._valid_units(seg)
                hit = np.flatnonzero(units["commitlog_offset"] >= phys_offset)
                keep = int(hit[0]) if hit.size else len(units)
                if keep:
                    cut = seg.base_offset + keep * UNIT_SIZE
                    break
                cut = seg.base_offset
                files.pop()
                deleted.append(seg.path.name)
                seg.delete()
            self._files = files
            if deleted:
                self._fsync_dirs(self.directory)
            if files:
                self._cut(cut)
            else:
                cut = 0
            dropped = max(0, before - cut) // UNIT_SIZE
            if dropped or deleted:
                self._log.warning(
                    "dirty_units_truncated",
                    commitlog_offset=phys_offset,
                    at=cut // UNIT_SIZE,
                    dropped_units=dropped,
                    deleted_files=deleted,
                )
            self._wrote = cut
            self._flushed = min(self._flushed, cut)
            self._min = min(self._min, cut) if files else 0
            self._max_phys = self._last_real_end()
            return TruncateReport(cut // UNIT_SIZE, self._max_phys, dropped, tuple(deleted))

    def correct_min_offset(self, commitlog_min_offset: int) -> int:
        """RocketMQ correctMinOffset: move ``min_offset`` up to the first unit that points
        at or after ``commitlog_min_offset`` (never down; pre-blanks are passed over).
        If even the last unit points below it, min becomes ``max_offset``. Returns the
        new min offset."""
        self._sync()
        with self._lock:
            self._drain()
            self._check_open()
            self._correct_min(commitlog_min_offset)
            return self._min // UNIT_SIZE

    def _correct_min(self, commitlog_min_offset: int) -> None:
        if not self._files:
            self._min, self._max_phys = 0, -1
            return
        if self._min >= self._wrote:
            return
        last, _ = self._probe_locked(self._wrote - UNIT_SIZE)
        first, size = self._probe_locked(self._min)
        if last < commitlog_min_offset:  # nothing valid left: min points at the next unit
            byte = self._wrote
        elif first >= commitlog_min_offset and not is_pre_blank_unit(first, size):
            return  # the usual case: min still points at a kept record
        else:
            byte = self._min
            while byte < self._wrote:
                seg = self._find(byte)
                units = self._valid_units(seg, byte - seg.base_offset)
                ok = np.flatnonzero((units["commitlog_offset"] >= commitlog_min_offset) & ~is_pre_blank(units))
                if ok.size:
                    byte += int(ok[0]) * UNIT_SIZE
                    break
                byte = seg.end_offset
        new = min(byte, self._wrote)
        if new != self._min:
            self._log.info(
                "min_offset_corrected", min_offset=new // UNIT_SIZE, commitlog_min_offset=commitlog_min_offset
            )
            self._min = new

    def delete_files_below(self, commitlog_min_offset: int) -> list[str]:
        """RocketMQ deleteExpiredFile(offset): delete files from the oldest on while their
        last unit points below ``commitlog_min_offset``; never the last file. Then
        ``correct_min_offset``. Returns the names of the deleted files."""
        self._sync()
        with self._lock:
            self._drain()
            self._check_open()
            files = list(self._files)
            deleted = []
            while len(files) > 1:
                seg = files[0]
                o, _, _ = UNIT.unpack(seg.read(seg.size - UNIT_SIZE, UNIT_SIZE))
                if o >= commitlog_min_offset:
                    break
                files.pop(0)
                deleted.append(seg.path.name)
                seg.delete()
            self._files = files
            if deleted:
                self._fsync_dirs(self.directory)
                self._log.info("files_deleted", files=deleted, commitlog_min_offset=commitlog_min_offset)
                self._min = max(self._min, files[0].base_offset)
            self._correct_min(commitlog_min_offset)
            return deleted

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        self._sync()
        with self._lock:
            self._drain()
            if self._closed:
                return
            for seg in self._files:
                seg.close()
            self._files = []
            self._closed = True

    def __enter__(self) -> ConsumeQueue:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["CONSUME_QUEUE_DIR", "MAX_QUEUE_ID", "ConsumeQueue", "PutResult", "TruncateReport", "queue_dir"]
