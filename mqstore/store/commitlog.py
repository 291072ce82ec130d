"""The CommitLog: every message of every topic, appended in arrival order.

Plain Python, usable in one process; the services wrap it later. Files:

    <store>/commitlog/<20-digit offset>   segments (segments.py, mapped_file.py)
    <store>/checkpoint                    flush timestamps (checkpoint_file.py)
    <store>/abort, <store>/lock           crash marker, one-process lock (lockfile.py)

Who calls what: any number of threads may call ``append`` (serialised by the put
lock, as RocketMQ's putMessageLock) and the read methods (no lock: they only see
bytes below ``wrote``). ``close`` once, after the others have returned.

Append path (RocketMQ CommitLog.asyncPutMessage): validate and encode the batch
outside the lock (record_batch.py); under the lock take the store time, pick
automatic queue ids, assign queue offsets and physical offsets (a record that does
not fit the current segment with 8 bytes to spare is preceded by a BLANK and goes to
the next segment), create any segment the batch needs *before* writing a byte (so a
full disk fails the whole batch and leaves no partial one), write each run of
records with its first TOTALSIZE still 0 and then set it (so a crash mid-copy leaves
no record whose unchecked properties are torn), then advance ``wrote``. Sync flush
waits for the group fsync after the lock is released.

When the disk fails (README "Faults") appends are refused with StoreNotWritableError
naming the cause (flush_failed, read_only, io_error until a restart; disk_full until
space is back) and reads go on: the states and their retries are writability.py.
This module keeps the log itself: segments, the append under the lock, flush and
checkpoint, reads, scans and retention.
"""

from __future__ import annotations

import dataclasses
import enum
import mmap
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import structlog

from mqstore.errors import (
    CorruptFileError,
    InvalidMessageError,
    OffsetError,
    ReplicaOffsetError,
    StoreClosedError,
    StoreNotWritableError,
)
from mqstore.formats.checkpoint import Checkpoint
from mqstore.formats.javahash import java_hash_of_ranges, java_string_hash
from mqstore.formats.message import (
    BLANK_RECORD_BYTES,
    MAGIC_V1,
    MAGIC_V2,
    NO_FIELDS,
    MessageRecord,
    RecordFields,
    ScanOutcome,
    blank_record,
    decode_record,
    locate_records,
    located_records,
    record_fields,
    record_heads,
    scan_records,
)
from mqstore.formats.msgid import offset_msg_id_prefix
from mqstore.formats.names import check_topic, file_name_to_offset
from mqstore.formats.packed import RawRecords
from mqstore.formats.properties import locate_properties
from mqstore.kernels import _encode
from mqstore.kernels._queues import QueueOffsets
from mqstore.store import faults
from mqstore.store.checkpoint_file import read_checkpoint, write_checkpoint
from mqstore.store.clock import Clock, SystemClock
from mqstore.store.config import FlushMode, StoreConfig
from mqstore.store.encoded_batch import EncodedBatch
from mqstore.store.flush import FlushService
from mqstore.store.ha.files import has_epoch_file
from mqstore.store.ha.truncation import complete_pending_truncation
from mqstore.store.lockfile import StoreLock, create_abort_marker, last_exit_was_clean, remove_abort_marker
from mqstore.store.mapped_file import forget_sync_failures, sync_failures
from mqstore.store.messages import AppendResult, MessageBatch, PutStatus
from mqstore.store.record_batch import BatchEncoder, PreparedBatch
from mqstore.store.recovery import QueueKey, RecoveryProgress, RecoveryReport, merge_queue_offsets, recover
from mqstore.store.segments import SegmentQueue
from mqstore.store.topic_table import BatchTopics, TopicTable
from mqstore.store.tuning import tune_allocator
from mqstore.store.writability import Writability, WriteRefusals, cause_of, errno_name

log = structlog.get_logger(__name__)

COMMITLOG_DIR = "commitlog"
_NO_OFFSETS = np.zeros(0, np.int64)
_NO_SIZE = bytes(4)


@dataclass(frozen=True)
class CommitLogStats:
    """A snapshot of the commitlog's watermarks (bytes are commitlog offsets)."""

    min_offset: int
    wrote_offset: int
    flushed_offset: int
    segments: int
    segment_bytes: int
    flush_mode: str
    writable: bool
    error: str | None
    unwritable_cause: str | None = None  # see StoreNotWritableError


class DeleteReason(enum.Enum):
    """Why retention deleted a segment."""

    EXPIRED = "expired"  # file mtime older than the reserved time (RocketMQ fileReservedTime)
    FORCED = "forced"  # not expired; deleted to free disk space (RocketMQ cleanImmediately)


@dataclass(frozen=True)
class DeletedSegment:
    """A segment ``delete_segments`` removed: commitlog bytes [base_offset, end_offset)."""

    name: str
    base_offset: int
    end_offset: int
    modified_ms: int  # the file's mtime when it was judged
    reason: DeleteReason


@dataclass(frozen=True)
class ReadBatch:
    """Records decoded by ``read_range``; ``next_offset`` is where to continue."""

    records: list[MessageRecord]
    next_offset: int


@dataclass(frozen=True)
class ScanChunk:
    """Records found by ``CommitLog.scan``: their commitlog offsets, sizes and key
    fields, the segment buffer they lie in (``fields.properties_at`` etc. are
    positions in it; valid while the store is open), and where the next scan starts."""

    physical_offsets: np.ndarray
    sizes: np.ndarray
    fields: RecordFields
    buffer: bytes | mmap.mmap
    next_offset: int


def _tags_codes(buf, f: RecordFields) -> np.ndarray:
    """ConsumeQueue tagsCode of each record (Java hashCode of TAGS, 0 without), as the
    dispatcher computes it."""
    ((ts, te),) = locate_properties(buf, f.properties_at, f.properties_len, [b"TAGS"])
    has = ts >= 0
    codes, non_ascii = java_hash_of_ranges(buf, np.where(has, ts, 0), np.where(has, te, 0))
    for i in np.flatnonzero(non_ascii).tolist():
        codes[i] = java_string_hash(buf[int(ts[i]) : int(te[i])].decode("utf-8", "replace"))
    return np.asarray(codes, np.int64)


class CommitLog:
    """An open commitlog; see the module docstring for the rules and the threads."""

    def __init__(
        self,
        store_dir: str | Path,
        config: StoreConfig | None = None,
        *,
        clock: Clock | None = None,
        queue_offsets_from_derived: bool = False,
        progress: RecoveryProgress | None = None,
        on_sync_seconds: Callable[[float], None] | None = None,
    ) -> None:
        """Open (and recover) the commitlog under ``store_dir``.

        ``queue_offsets_from_derived``: the caller restores the queue-offset table from
        its consume queues (``raise_queue_offsets``), so recovery does not walk the
        segments before its start for it. ``progress`` is updated while recovery runs.
        ``on_sync_seconds`` is told how long each flush's fdatasync took (metrics)."""
        self._on_sync_seconds = on_sync_seconds
        self._derived_offsets = queue_offsets_from_derived
        self._progress = progress
        self.store_dir = Path(store_dir)
        self.config = config or StoreConfig()
        self._clock = clock or SystemClock()
        self._closed = True
        tune_allocator()
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self._lock_file = StoreLock(self.store_dir)
        try:
            self._open()
        except BaseException:
            self._lock_file.release()
            raise

    def _open(self) -> None:
        cfg = self.config
        forget_sync_failures(self.store_dir)  # a new run: what failed in an earlier one is on disk or cut
        self._write_high = 0  # how far the append in progress wrote (to undo it if it fails)
        self._unclean: list[str] = []  # why close must leave the abort marker
        self._derived_frozen = False
        clean = last_exit_was_clean(self.store_dir)
        checkpoint = read_checkpoint(self.store_dir)
        self._segments = SegmentQueue(
            self.store_dir / COMMITLOG_DIR, cfg.segment_bytes, preallocate=cfg.preallocate_segments
        )
        self._segments.load()
        try:
            # A replica's truncation to its consistent point that a crash cut short is
            # finished before recovery reads a byte (ha/truncation.py): the stale tail
            # past the point never comes back.
            self.truncation = complete_pending_truncation(self.store_dir, self._segments)
            if self.truncation is not None:
                checkpoint = read_checkpoint(self.store_dir)
            self.recovery: RecoveryReport = recover(
                self._segments,
                checkpoint,
                clean_shutdown=clean,
                check_crc=cfg.check_crc_on_recover,
                rebuild_queue_offsets=not self._derived_offsets,
                progress=self._progress,
            )
            checkpoint = self._distrust_checkpoint_ahead(checkpoint, clean)
            # Whatever recovery kept is made durable before anything new is acknowledged
            # (segments before the recovery start were flushed before the checkpoint said so).
            start = file_name_to_offset(self.recovery.start_segment) if self.recovery.start_segment else 0
            self._segments.sync_range(max(self._segments.min_offset, start), self.recovery.wrote_offset)
        except BaseException:
            self._segments.close()
            raise
        self._checkpoint = checkpoint
        # A replica's store (it keeps epochs) hands out records only below the confirm
        # offset; after a restart that is the checkpoint's, corrected into the log as
        # RocketMQ's recovery does, until the master (or the SyncStateSet) moves it.
        self._replica_confirm: int | None = None
        if has_epoch_file(self.store_dir):
            low, high = self._segments.min_offset, self.recovery.wrote_offset
            self._replica_confirm = min(max(checkpoint.confirm_phy_offset, low), high)
        # Every topic by dense id (topic_table.py); the queue-offset table and the
        # automatic picks (kernels/_queues.pyx) share its ids.
        self.topic_table = TopicTable()
        self._queue_offsets = QueueOffsets(self.recovery.queue_offsets, ids=self.topic_table.ids)
        self._put_lock = threading.Lock()
        self._writability = Writability(
            self.store_dir,
            self._segments.directory,
            self._put_lock,
            self.mark_unclean,
            warning_ratio=cfg.disk_warning_ratio,
            resume_ratio=cfg.disk_resume_ratio,
        )
        self._checkpoint_lock = threading.Lock()
        self._wrote = self.recovery.wrote_offset
        self._last_store_ts = self.recovery.last_store_timestamp
        self._wrote_state = (self._wrote, self._last_store_ts)
        self._encoder = BatchEncoder(cfg, self._clock, self.topic_table)
        self._msg_id_prefix = offset_msg_id_prefix(cfg.store_host)
        self._last_checkpoint_write = -1e18
        self._flusher = FlushService(
            cfg,
            wrote=lambda: self._wrote_state,
            sync=lambda start, end: self._segments.sync_range(start, end),  # looked up per call: a seam for fault tests
            on_flushed=self._on_flushed,
            flushed=self._wrote,
            monotonic=self._clock.monotonic,
            on_error=self._flush_failed,
            on_sync_seconds=self._on_sync_seconds,
        )
        create_abort_marker(self.store_dir)
        self._closed = False
        self._flusher.start()
        log.info("commitlog_opened", store=str(self.store_dir), wrote=self._wrote, flush_mode=cfg.flush_mode.value)

    def _distrust_checkpoint_ahead(self, checkpoint: Checkpoint, clean: bool) -> Checkpoint:
        """A checkpoint timestamp later than the newest record is impossible (garbage
        in the file, or flushed data lost): recovery after a crash would start too
        late and the derived files would trust progress that never happened. Such
        timestamps are dropped (the physic one lowered to the newest record's), and
        after an abnormal exit recovery walks again from the first segment."""
        newest = self.recovery.last_store_timestamp
        fields = {
            "physic_msg_timestamp": checkpoint.physic_msg_timestamp,
            "logics_msg_timestamp": checkpoint.logics_msg_timestamp,
            "index_msg_timestamp": checkpoint.index_msg_timestamp,
        }
        ahead = {k: v for k, v in fields.items() if v > newest}
        if not newest or not ahead:
            return checkpoint
        log.warning(
            "checkpoint_ahead_of_data",
            newest_store_timestamp=newest,
            **ahead,
            action="ignored" + ("; recovery walks again from the first segment" if not clean else ""),
        )
        fixed = Checkpoint(
            physic_msg_timestamp=min(checkpoint.physic_msg_timestamp, newest),
            logics_msg_timestamp=0 if "logics_msg_timestamp" in ahead else checkpoint.logics_msg_timestamp,
            index_msg_timestamp=0 if "index_msg_timestamp" in ahead else checkpoint.index_msg_timestamp,
            master_flushed_offset=checkpoint.master_flushed_offset,
            confirm_phy_offset=checkpoint.confirm_phy_offset,
        )
        if not clean:
            self.recovery = recover(
                self._segments,
                Checkpoint(),
                clean_shutdown=False,
                check_crc=self.config.check_crc_on_recover,
                rebuild_queue_offsets=not self._derived_offsets,
                progress=self._progress,
            )
        return fixed

    # ------------------------------------------------------------------ append

    def set_queue_nums(self, topic: str, queue_nums: int) -> None:
        """How many queues automatic queue ids spread ``topic`` over (default from config)."""
        check_topic(topic)
        if not 0 < queue_nums <= self.config.max_queue_id + 1:
            raise InvalidMessageError(f"queue_nums must be in 1..{self.config.max_queue_id + 1}, got {queue_nums}")
        tid = self.topic_table.intern(topic)
        with self._put_lock:
            self._queue_offsets.set_queue_nums(tid, queue_nums)

    def append(self, batch: MessageBatch, *, topic_ids: BatchTopics | None = None) -> AppendResult:
        """Append a batch; returns per-message offsets and ids once the flush policy
        is met. Raises InvalidMessageError (and subclasses) before writing anything
        for bad input, StoreNotWritableError when the disk is full or failed,
        StoreClosedError after close. ``topic_ids``: the batch's topics as ids of
        ``topic_table`` the caller checked (TopicTable.sendable_ids), else looked up."""
        self._check_open()
        return self._append_prepared(self._encoder.prepare(batch, topic_ids))

    def append_encoded(self, batch: EncodedBatch, *, topic_ids: BatchTopics | None = None) -> AppendResult:
        """Append records a client encoded (parsed and checked by
        encoded_batch.parse_encoded): copied once, their store host, queue ids and
        offsets and store timestamp set under the put lock, then as ``append``
        (``topic_ids`` too, one per record)."""
        self._check_open()
        return self._append_prepared(self._encoder.adopt(batch, topic_ids))

    def _append_prepared(self, prep: PreparedBatch) -> AppendResult:
        if prep.n == 0:
            empty = np.zeros(0, np.int64)
            return AppendResult(PutStatus.PUT_OK, empty, empty, empty, empty, 0, ("", []), self._msg_id_prefix)
        try:
            with self._put_lock:
                self._check_open()
                self._writability.check()
                now = max(self._clock.now_ms(), self._last_store_ts)
                queue_ids = self._pick_queues(prep)
                queue_offsets, commit_offsets = self._assign_queue_offsets(prep, queue_ids)
                self._write_high = self._wrote
                try:
                    physical = self._write(prep, queue_ids, queue_offsets, now)
                except (OSError, StoreNotWritableError) as e:
                    raise self._write_failed(e) from e
                self._writability.wrote()
                commit_offsets()
                self._last_store_ts = now
                end = int(physical[-1] + prep.sizes[-1])
                self._wrote = end
                self._wrote_state = (end, now)
        finally:
            self._encoder.recycle(prep)
        faults.hit("commitlog.written")  # in the page cache, not yet flushed nor acknowledged
        status = PutStatus.PUT_OK
        if self.config.flush_mode is FlushMode.SYNC:
            try:
                ok = self._flusher.wait_flushed(end, self.config.sync_flush_timeout_ms / 1000)
            except Exception as e:
                raise StoreNotWritableError(
                    f"flush failed, batch not durable: {e}; the store accepts no more writes until it is restarted",
                    cause=cause_of(e, "flush_failed"),
                ) from e
            if not ok:
                status = PutStatus.FLUSH_DISK_TIMEOUT
        return AppendResult(
            status, physical, prep.sizes, queue_ids, queue_offsets, now, prep.unique_keys, self._msg_id_prefix
        )

    def _pick_queues(self, prep: PreparedBatch) -> np.ndarray:
        """Automatic queue ids, round robin per topic over its queue nums (one
        compiled pass; the batch's own ids if it asked for none)."""
        picked = self._queue_offsets.pick(prep.topic_ids, prep.topic_id, prep.queue_ids, self.config.default_queue_nums)
        return prep.queue_ids if picked is None else picked

    def _assign_queue_offsets(self, prep: PreparedBatch, queue_ids: np.ndarray):
        """Queue offsets for the batch (each queue's next ones, in arrival order; 0 for
        records that take none), and a function that commits the table."""
        out = np.empty(prep.n, np.int64)
        advances = None if prep.advances is None else prep.advances.view(np.uint8)
        self._queue_offsets.assign(prep.topic_ids, prep.topic_id, queue_ids, advances, out)
        return out, self._queue_offsets.commit

    def _write(
        self, prep: PreparedBatch, queue_ids: np.ndarray, queue_offsets: np.ndarray, store_ts: int
    ) -> np.ndarray:
        """Lay the records out from ``wrote``, create the segments they need, copy them in."""
        seg_bytes = self.config.segment_bytes
        sizes = prep.sizes
        n = prep.n
        physical = np.empty(n, np.int64)
        pos, blanks = _encode.place(sizes, self._wrote, seg_bytes, BLANK_RECORD_BYTES, physical)
        self._ensure_segments(pos - 1)
        for b in blanks:
            seg = self._segments.find(b)
            self._write_high = seg.end_offset
            seg.write(b - seg.base_offset, blank_record(seg.end_offset - b))
            faults.hit("segment.rollover")  # the BLANK ends the old segment; the new one holds nothing yet
        records = prep.records
        records.patch(0, n, queue_ids, queue_offsets, physical, store_ts)
        data = records.data  # the encoded batch, written as it is: one pwrite per segment touched
        j = 0
        while j < n:
            seg = self._segments.find(int(physical[j]))
            if blanks:
                k = j + int(np.searchsorted(physical[j:], seg.end_offset, side="left"))
            else:
                k = n  # the batch lies in one segment
            a, b = records.span(j, k)
            at = int(physical[j]) - seg.base_offset
            self._write_high = max(self._write_high, int(physical[j]) + b - a)
            data[a : a + 4] = _NO_SIZE  # the first TOTALSIZE goes last
            seg.write(at, memoryview(data)[a:b])
            seg.write(at, int(sizes[j]).to_bytes(4, "big"))  # only now is the run visible
            j = k
        return physical

    # ------------------------------------------------------------------ when the disk fails (writability.py)

    def _flush_failed(self, err: BaseException) -> None:
        """The flusher's fdatasync/msync failed (called in its thread, once)."""
        self._writability.flush_failed(err, wrote=self._wrote, flushed=self._flusher.flushed_offset)

    def _write_failed(self, err: BaseException) -> StoreNotWritableError:
        """An append's segment allocation or write failed; returns the error to raise.
        Bytes the attempt wrote past ``wrote`` are zeroed first (best effort), so no
        part of it can ever look like a record."""
        self._zero_attempt(self._wrote, self._write_high)
        if isinstance(err, StoreNotWritableError) and self.config.preallocate_segments:
            need = self.config.segment_bytes  # a segment allocation
        else:
            need = max(self._write_high - self._wrote, mmap.PAGESIZE)
        return self._writability.write_failed(err, need=need, wrote=self._wrote, flushed=self._flusher.flushed_offset)

    def _zero_attempt(self, start: int, end: int) -> None:
        try:
            pos = start
            while pos < end:
                seg = self._segments.find(pos)
                if seg is None:
                    break
                n = min(end, seg.end_offset) - pos
                seg.zero_range(pos - seg.base_offset, n)
                pos += n
        except OSError as e:  # the range stays as it is: nothing points at it (wrote did not move)
            log.warning("failed_append_not_zeroed", start=start, end=end, error=str(e))

    @property
    def writable(self) -> bool:
        """False while appends are refused (``unwritable_cause`` says why)."""
        return self._writability.cause is None

    @property
    def unwritable_cause(self) -> str | None:
        """None when writable; else "flush_failed", "read_only" or "io_error" (until a
        restart) or "disk_full" (until space is back: once a second this checks the
        free space, and the next append retries the allocation; or while the disk is
        used over StoreConfig.disk_warning_ratio, until it is below disk_resume_ratio)."""
        return self._writability.cause

    @property
    def unwritable_error(self) -> StoreNotWritableError | None:
        """The error appends get now (message and cause), or None."""
        return self._writability.error

    def write_refusals(self) -> WriteRefusals:
        """Appends refused since the process started, and since when and why now."""
        return self._writability.refusals()

    def mark_unclean(self, reason: str) -> None:
        """Make ``close`` leave the abort marker, so the next open runs the recovery
        that checks and rebuilds derived files (the store calls this when flushing a
        consume queue or index file failed; writability.py when appends stop for good)."""
        if reason not in self._unclean:
            self._unclean.append(reason)

    def _ensure_segments(self, last_byte: int) -> None:
        segs = self._segments
        seg_bytes = self.config.segment_bytes
        while segs.last() is None or segs.last().end_offset <= last_byte:
            last = segs.last()
            base = last.end_offset if last is not None else self._wrote - self._wrote % seg_bytes
            segs.create_next(base)
            if last is not None:
                log.info("segment_rolled", base_offset=base)

    # ------------------------------------------------------------------ reads

    def read(self, physical_offset: int) -> MessageRecord:
        """The record that starts at ``physical_offset``; OffsetError if none does."""
        self._check_open()
        seg = self._segment_for_read(physical_offset)
        try:
            return decode_record(seg.mm, physical_offset - seg.base_offset, check_crc=False)
        except ValueError as e:
            raise OffsetError(f"no record starts at commitlog offset {physical_offset}: {e}") from e

    def read_many(self, physical_offsets: np.ndarray) -> list[MessageRecord]:
        """``[self.read(o) for o in physical_offsets]`` (the first offset ``read`` refuses
        raises its OffsetError), decoded in one compiled pass per segment run
        (formats.message.locate_records) instead of one Python decode per record."""
        self._check_open()
        offsets = np.asarray(physical_offsets, np.int64)
        out: list[MessageRecord] = []
        i, n = 0, len(offsets)
        while i < n:
            seg = self._segment_for_read(int(offsets[i]))
            lo = max(seg.base_offset, self._segments.min_offset)
            hi = min(seg.base_offset + seg.size, self._wrote)
            run = offsets[i:]
            outside = np.flatnonzero((run < lo) | (run >= hi))
            j = i + (int(outside[0]) if len(outside) else len(run))
            positions = offsets[i:j] - seg.base_offset
            cols, k = locate_records(seg.mm, positions, check_crc=False)
            out.extend(located_records(seg.mm, cols, k))
            if k < j - i:
                self.read(int(offsets[i + k]))  # raises what is wrong there
                raise AssertionError(f"the decode kernel refused the record at {int(offsets[i + k])}; read did not")
            i = j
        return out

    def read_raw(self, physical_offsets: np.ndarray, sizes: np.ndarray) -> RawRecords:
        """The stored bytes of many records in one buffer (what a broker sends to
        consumers: RocketMQ pulls hand out commitlog bytes, clients decode), copied
        out of the maps by one compiled pass per segment. Offsets must come from the
        store (consume-queue units); ones below the min offset raise OffsetError; a
        size past its segment's end is cut there."""
        self._check_open()
        physical_offsets = np.asarray(physical_offsets, np.int64)
        sizes = np.asarray(sizes, np.int64)
        segs = self._segments.segments  # one snapshot: retention may replace the list meanwhile
        first = segs[0].base_offset if segs else 0
        if len(physical_offsets) and int(physical_offsets.min()) < first:
            raise OffsetError(f"commitlog offset {int(physical_offsets.min())} was deleted (min {first})")
        if not len(physical_offsets):
            return RawRecords.concat([])
        which = (physical_offsets - first) // self.config.segment_bytes
        cuts = (np.flatnonzero(np.diff(which)) + 1).tolist()  # runs of one segment (a queue's units ascend)
        parts = []
        for lo, hi in zip([0, *cuts], [*cuts, len(which)]):
            seg = segs[int(which[lo])]
            parts.append(RawRecords.gather(seg.mm, physical_offsets[lo:hi] - seg.base_offset, sizes[lo:hi]))
        return RawRecords.concat(parts)

    def read_range(self, offset: int, *, max_records: int = 1000, max_bytes: int = 4 << 20) -> ReadBatch:
        """Decode records from ``offset`` on, across segments, stopping at the write
        position, after ``max_records`` or before exceeding ``max_bytes`` (at least
        one record is returned if one exists). ``next_offset`` continues the walk."""
        self._check_open()
        if max_records <= 0 or max_bytes <= 0:
            raise ValueError("max_records and max_bytes must be > 0")
        out: list[MessageRecord] = []
        pos, used = offset, 0
        wrote = self._wrote
        if pos < wrote:
            self._segment_for_read(pos)
        while pos < wrote and len(out) < max_records and used < max_bytes:
            seg = self._segments.find(pos)
            if seg is None:  # retention deleted it since the check above
                raise OffsetError(f"commitlog offset {pos} is below the min offset {self._segments.min_offset}")
            local = pos - seg.base_offset
            end = min(seg.size, wrote - seg.base_offset)
            res = scan_records(
                seg.mm, local, end, check_crc=False, max_records=max_records - len(out), max_bytes=max_bytes - used
            )
            for p in res.positions.tolist():
                out.append(decode_record(seg.mm, p, check_crc=False))
            used += int(res.sizes.sum())
            pos = seg.base_offset + res.stop
            if res.outcome is ScanOutcome.END_OF_SEGMENT:
                pos = seg.end_offset
            elif res.outcome is ScanOutcome.INVALID:
                raise OffsetError(f"no record at commitlog offset {pos}: {res.reason}")
            elif not len(res.positions):
                break
        return ReadBatch(out, pos)

    def scan(
        self, offset: int, *, limit: int | None = None, max_bytes: int = 4 << 20, fields: bool = True
    ) -> ScanChunk:
        """Records from ``offset`` (a record start, or a segment's BLANK) up to
        ``limit`` (default: the write position), at most ``max_bytes`` of them (at
        least one), with their key fields gathered in bulk: what the reput
        dispatcher tails (without ``fields``: validated, positions and sizes only,
        for a caller that hands the bytes on). A BLANK moves ``next_offset`` to the
        next segment."""
        self._check_open()
        end_of_data = self._wrote if limit is None else min(limit, self._wrote)
        pos = max(offset, self._segments.min_offset)
        while pos < end_of_data:
            seg = self._segments.find(pos)
            if seg is None:  # retention deleted it since ``pos`` was chosen: go on from the new min
                if self._segments.min_offset <= pos:
                    break
                pos = self._segments.min_offset
                continue
            local = pos - seg.base_offset
            res = scan_records(
                seg.mm,
                local,
                min(seg.size, end_of_data - seg.base_offset),
                check_crc=False,
                max_bytes=max_bytes,
                base_offset=seg.base_offset,
                fields=fields,
            )
            if res.outcome is ScanOutcome.INVALID:
                raise CorruptFileError(f"{seg.path}: no valid record at commitlog offset {pos}: {res.reason}")
            nxt = seg.end_offset if res.outcome is ScanOutcome.END_OF_SEGMENT else seg.base_offset + res.stop
            if len(res.positions):
                return ScanChunk(res.positions + seg.base_offset, res.sizes, res.fields, seg.mm, nxt)
            pos = nxt
        return ScanChunk(_NO_OFFSETS, _NO_OFFSETS, NO_FIELDS, b"", pos)

    def units_match(
        self,
        phys: np.ndarray,
        sizes: np.ndarray,
        queue_ids: np.ndarray,
        queue_offsets: np.ndarray,
        *,
        topics: list[str] | None = None,
        topic_index: np.ndarray | None = None,
        tags_codes: np.ndarray | None = None,
        check_tags: np.ndarray | None = None,
        check_from: int = 0,
        deep_from: int = 0,
    ) -> np.ndarray:
        """Per consume-queue unit (any queues, any order; int64 columns): does it lie
        inside the commitlog and point at a record of exactly that size, queue id and
        queue offset (and, with ``topics``, of topic ``topics[topic_index[i]]``; with
        ``tags_codes``, whose TAGS hash to it where ``check_tags`` is true)? Records
        below ``check_from`` are not read: their units only have to lie inside; records
        below ``deep_from`` have their heads checked but not topic and tags (decoding
        those is most of the cost, and garbage matching size, queue id, queue offset and
        magic of a real record does not happen by chance). One pass per segment
        touched, for units of every queue at once (recovery checks thousands of queues)."""
        ok = (phys >= self.min_offset) & (sizes > 0) & (phys + sizes <= self._wrote)
        check = np.flatnonzero(ok & (phys >= check_from))
        if not check.size:
            return ok
        seg_bytes = self.config.segment_bytes
        segs = self._segments.segments
        first_base = segs[0].base_offset
        seg_index = (phys[check] - first_base) // seg_bytes
        order = np.argsort(seg_index, kind="stable")
        check, seg_index = check[order], seg_index[order]
        bounds = np.flatnonzero(np.diff(seg_index)) + 1
        want_topic = None if topics is None else np.array(topics, object)[topic_index]
        for sel in np.split(check, bounds):
            seg = segs[int((phys[sel[0]] - first_base) // seg_bytes)]
            head = record_heads(seg.mm, phys[sel] - seg.base_offset)
            good = (head["total_size"] == sizes[sel]) & (head["queue_id"] == queue_ids[sel])
            good &= (head["queue_offset"] == queue_offsets[sel]) & (
                (head["magic"] == MAGIC_V1) | (head["magic"] == MAGIC_V2)
            )
            deep = good & (phys[sel] >= deep_from)
            if (want_topic is not None or tags_codes is not None) and deep.any():
                real = sel[deep]
                f = record_fields(seg.mm, phys[real] - seg.base_offset)
                same = np.ones(len(real), bool)
                if want_topic is not None:
                    same &= np.array(f.topics, object)[f.topic_codes] == want_topic[real]
                if tags_codes is not None:
                    tags_ok = _tags_codes(seg.mm, f) == tags_codes[real]
                    same &= tags_ok if check_tags is None else (tags_ok | ~check_tags[real])
                good[np.flatnonzero(deep)[~same]] = False
            ok[sel] &= good
        return ok

    def _segment_for_read(self, offset: int):
        if not self._segments.min_offset <= offset < self._wrote:
            raise OffsetError(f"commitlog offset {offset} is outside [{self._segments.min_offset}, {self._wrote})")
        seg = self._segments.find(offset)
        if seg is None:
            raise OffsetError(f"commitlog offset {offset} is in no segment")
        return seg

    # ------------------------------------------------------------------ retention

    def delete_segments(
        self,
        *,
        older_than_ms: int | None,
        now_ms: int,
        max_offset: int,
        force_count: int = 0,
        max_count: int = 10,
    ) -> list[DeletedSegment]:
        """Delete whole segments from the oldest on (RocketMQ deleteExpiredFileByTime);
        returns what went, oldest first. Called by one retention thread at a time.

        A segment goes if it is eligible and either expired (``now_ms`` minus its
        file's mtime is >= ``older_than_ms``; RocketMQ judges by the file's last
        modified time, not by the store time of its last record) or one of the first
        ``force_count`` segments this call looks at (forced, to free space). Eligible:
        not the last segment (it holds the write position) and entirely below
        ``max_offset``, which the caller sets to the dispatched offset so no
        undispatched record is ever deleted. The walk stops at the first segment that
        stays, so the commitlog remains contiguous, and after ``max_count`` deletions
        (RocketMQ DELETE_FILES_BATCH_MAX = 10).

        Readers: ``min_offset`` moves up at once, so a read that starts later gets
        OffsetError; a read that already found a deleted segment finishes on its map,
        which stays valid until the last reference goes (SegmentQueue.release_detached).
        """
        self._check_open()
        if max_count <= 0 or force_count < 0:
            raise ValueError("max_count must be > 0 and force_count >= 0")
        segs = self._segments.segments
        limit = min(max_offset, self._wrote)
        chosen: list[DeletedSegment] = []
        for i, seg in enumerate(segs[:-1]):
            if len(chosen) >= max_count or seg.end_offset > limit:
                break
            try:
                modified_ms = os.stat(seg.path).st_mtime_ns // 1_000_000
            except FileNotFoundError:
                modified_ms = 0  # removed behind our back: nothing left to keep
            if older_than_ms is not None and now_ms - modified_ms >= older_than_ms:
                reason = DeleteReason.EXPIRED
            elif i < force_count:
                reason = DeleteReason.FORCED
            else:
                break
            chosen.append(DeletedSegment(seg.path.name, seg.base_offset, seg.end_offset, modified_ms, reason))
        if not chosen:
            return []
        with self._put_lock:  # appends add segments; the list is swapped under the same lock
            self._check_open()
            if any(a is not b for a, b in zip(self._segments.segments, segs[: len(chosen)])):
                return []  # the queue changed under us (not expected: one retention thread); try next run
            detached = self._segments.detach_first(len(chosen))
        self._segments.release_detached(detached)
        for d in chosen:
            log_fn = log.warning if d.reason is DeleteReason.FORCED else log.info
            log_fn(
                "segment_deleted",
                segment=d.name,
                reason=d.reason.value,
                base_offset=d.base_offset,
                end_offset=d.end_offset,
                modified_ms=d.modified_ms,
                age_ms=now_ms - d.modified_ms,
            )
        return chosen

    # ------------------------------------------------------------------ durability & lifecycle

    def flush(self) -> int:
        """Make everything appended so far durable now; returns the flushed offset."""
        self._check_open()
        target = self._wrote
        try:
            self._flusher.wait_flushed(target, self.config.sync_flush_timeout_ms / 1000)
        except Exception as e:
            raise StoreNotWritableError(f"flush failed: {e}", cause=cause_of(e, "flush_failed")) from e
        return self._flusher.flushed_offset

    def _on_flushed(self, offset: int, store_ts: int) -> None:
        now = self._clock.monotonic()
        if now - self._last_checkpoint_write < self.config.checkpoint_interval_ms / 1000 and not self._closed:
            return
        try:
            self._write_checkpoint(store_ts)
        except OSError as e:  # the old checkpoint stays (recovery starts earlier: safe); tried again next flush
            log.error("checkpoint_write_failed", store=str(self.store_dir), errno=errno_name(e), error=str(e))
            return
        self._last_checkpoint_write = now

    def _write_checkpoint(self, physic_ts: int) -> None:
        with self._checkpoint_lock:
            cp = self._checkpoint
            self._checkpoint = Checkpoint(
                physic_msg_timestamp=max(cp.physic_msg_timestamp, physic_ts),
                logics_msg_timestamp=cp.logics_msg_timestamp,
                index_msg_timestamp=cp.index_msg_timestamp,
                master_flushed_offset=cp.master_flushed_offset,
                confirm_phy_offset=self._confirm_to_persist(),
            )
            write_checkpoint(self.store_dir, self._checkpoint)

    def _confirm_to_persist(self) -> int:
        """The checkpoint's confirmPhyOffset: the flushed offset (RocketMQ without a
        controller: where recovery may start checking), or a replica's confirm offset,
        never above what is flushed here (recovery trusts the bytes below it)."""
        flushed = self._flusher.flushed_offset
        return flushed if self._replica_confirm is None else min(self._replica_confirm, flushed)

    # ------------------------------------------------------------------ replication (mqstore.store.ha)

    @property
    def replica_confirm_offset(self) -> int | None:
        """None unless the store is a replica's (it keeps epochs, or
        ``set_confirm_offset`` was called): then how far records may be handed out
        (dispatch stops there: LogStore.confirm_offset)."""
        return self._replica_confirm

    def set_confirm_offset(self, offset: int) -> None:
        """A replica's confirm offset (the master's SyncStateSet computes it; a
        follower takes the master's, capped at its own end). Persisted in the
        checkpoint (confirmPhyOffset) at its next write."""
        if offset < 0:
            raise ValueError(f"confirm offset must be >= 0, got {offset}")
        self._replica_confirm = min(int(offset), self._wrote)

    def set_master_flushed_offset(self, offset: int) -> None:
        """The checkpoint's masterFlushedOffset (byte 24): a follower records the
        master's flushed offset it last heard; written with the next checkpoint."""
        with self._checkpoint_lock:
            self._checkpoint = dataclasses.replace(self._checkpoint, master_flushed_offset=int(offset))

    def append_replicated(
        self,
        offset: int,
        data,
        *,
        end: int,
        queue_offsets: dict[QueueKey, int],
        store_timestamp: int,
        wait: bool = True,
    ) -> int:
        """Write bytes the master's commitlog holds at the same offsets (a follower;
        mqstore.store.ha.follower checked them and passes what it found): ``data``
        lands at ``offset``, which must be the write position (ReplicaOffsetError
        naming both otherwise), and the write position becomes ``end`` (the data's
        end, or the end of the segment a BLANK in it closes). Each segment's run is
        written with its first TOTALSIZE still 0, then that set, as ``append`` does;
        the queue-offset table and the newest store time follow the records.

        Returns the offset the follower may acknowledge: under sync flush what is
        fsynced once ``end`` is (or the sync flush timeout passed; StoreNotWritableError
        if the flush failed), else the write position. ``wait=False`` (sync flush)
        starts the fsync and returns what is durable already, so a stream can write
        its next batch meanwhile (``durable_offset`` / ``wait_durable`` tell the
        rest). Same lock as ``append``; disk failures as there."""
        self._check_open()
        with self._put_lock:
            self._check_open()
            if offset != self._wrote:
                raise ReplicaOffsetError(
                    f"replicated bytes at commitlog offset {offset}, but this log ends at {self._wrote}",
                    expected=self._wrote,
                    got=offset,
                )
            self._writability.check()
            self._write_high = self._wrote
            try:
                self._write_raw(offset, data, end)
            except (OSError, StoreNotWritableError) as e:
                raise self._write_failed(e) from e
            self._writability.wrote()
            for (topic, queue_id), nxt in queue_offsets.items():
                self._queue_offsets.raise_to(topic, queue_id, int(nxt))
            self._last_store_ts = max(self._last_store_ts, store_timestamp)
            self._wrote = end
            self._wrote_state = (end, self._last_store_ts)
        faults.hit("commitlog.written")
        if self.config.flush_mode is not FlushMode.SYNC:
            return end
        return self.wait_durable(end, self.config.sync_flush_timeout_ms / 1000 if wait else 0.0)

    @property
    def durable_offset(self) -> int:
        """What a replica may acknowledge: fsynced under sync flush, else written."""
        return self._flusher.flushed_offset if self.config.flush_mode is FlushMode.SYNC else self._wrote

    def wait_durable(self, end: int, timeout_s: float) -> int:
        """Start making [.., end) durable and wait up to ``timeout_s`` for it (0: not
        at all); returns ``durable_offset`` capped at ``end``. StoreNotWritableError if
        the flush failed."""
        if self.config.flush_mode is not FlushMode.SYNC:
            return min(end, self._wrote)
        try:
            ok = self._flusher.wait_flushed(end, timeout_s)
        except Exception as e:
            raise StoreNotWritableError(
                f"flush failed, replicated bytes not durable: {e}", cause=cause_of(e, "flush_failed")
            ) from e
        return end if ok else min(end, self._flusher.flushed_offset)  # a slow disk: ack what is durable

    def _write_raw(self, offset: int, data, end: int) -> None:
        view = memoryview(data).cast("B")
        self._ensure_segments(max(end, offset + len(view)) - 1)
        pos = 0
        while pos < len(view):
            seg = self._segments.find(offset + pos)
            n = min(len(view) - pos, seg.end_offset - (offset + pos))
            at = offset + pos - seg.base_offset
            self._write_high = max(self._write_high, offset + pos + n)
            head = min(4, n)  # the run's first TOTALSIZE (zero on disk until then) goes last
            seg.write(at + head, view[pos + head : pos + n])
            seg.write(at, view[pos : pos + head])  # only now is the run visible
            pos += n

    def read_log_bytes(self, offset: int, max_bytes: int) -> bytes:
        """The commitlog's bytes from ``offset`` (at least the min offset) up to
        ``max_bytes`` of them, never past the write position nor the end of
        ``offset``'s segment (what a master streams; ha/source.py cuts it at record
        ends). OffsetError below the min offset or past the write position."""
        self._check_open()
        if offset == self._wrote:
            return b""
        seg = self._segment_for_read(offset)
        n = max(0, min(max_bytes, seg.end_offset - offset, self._wrote - offset))
        at = offset - seg.base_offset
        return bytes(seg.mm[at : at + n])

    @property
    def checkpoint(self) -> Checkpoint:
        """The checkpoint as last read or written (the file is written on flushes)."""
        return self._checkpoint

    def note_derived_progress(self, *, logics_timestamp: int | None = None, index_timestamp: int | None = None) -> None:
        """Record how far the derived files are durable, for the next checkpoint
        write: ``logics_timestamp`` is the store time of the last consume-queue unit
        flushed, ``index_timestamp`` the end time of the last full (flushed) index file.

        Once any sync under the store failed in this run (mapped_file.sync_failures)
        the derived timestamps stay where they are: a consume queue or index file that
        "flushed" after a failed fsync may still lack data, and the checkpoint must not
        claim it (the next start re-dispatches from there)."""
        if not self._derived_frozen and sync_failures(self.store_dir):
            self._derived_frozen = True
            log.error(
                "derived_progress_frozen", store=str(self.store_dir), failed=sorted(sync_failures(self.store_dir))
            )
        if self._derived_frozen:
            return
        with self._checkpoint_lock:
            cp = self._checkpoint
            self._checkpoint = Checkpoint(
                physic_msg_timestamp=cp.physic_msg_timestamp,
                logics_msg_timestamp=cp.logics_msg_timestamp if logics_timestamp is None else logics_timestamp,
                index_msg_timestamp=cp.index_msg_timestamp if index_timestamp is None else index_timestamp,
                master_flushed_offset=cp.master_flushed_offset,
                confirm_phy_offset=cp.confirm_phy_offset,
            )

    @property
    def wrote_offset(self) -> int:
        return self._wrote

    @property
    def flushed_offset(self) -> int:
        return self._flusher.flushed_offset

    @property
    def min_offset(self) -> int:
        return self._segments.min_offset

    def raise_queue_offsets(self, next_offsets: dict[QueueKey, int]) -> None:
        """Raise the next queue offset of each (topic, queue id) to at least the given
        value (RocketMQ recoverTopicQueueTable takes the table from the consume queues'
        max offsets). Recovery rebuilds the table from the segments it has, so once
        retention deleted every record of a queue, only its consume queue remembers
        how far it went; without this its next message would get queue offset 0 again.
        The store calls it after the consume queues recovered, before appends start."""
        with self._put_lock:
            for (topic, queue_id), nxt in next_offsets.items():
                if nxt > 0:  # a queue that never took a message is not one
                    self._queue_offsets.raise_to(topic, queue_id, int(nxt))

    def raise_queue_offsets_from(self, offset: int) -> int:
        """Raise the queue-offset table past every record from ``offset`` (a record
        start) to the write position: the records no consume queue holds yet (an
        open whose consume queues live in another process takes their ends, then
        this). Returns the records read."""
        table: dict[QueueKey, int] = {}
        pos, count = offset, 0
        while pos < self._wrote:
            chunk = self.scan(pos, max_bytes=8 << 20)
            if len(chunk.sizes):
                merge_queue_offsets(table, chunk.fields)
                count += len(chunk.sizes)
            if chunk.next_offset <= pos:
                break
            pos = chunk.next_offset
        self.raise_queue_offsets(table)
        return count

    @property
    def queue_count(self) -> int:
        """Queues with a next queue offset (every queue written to, or restored)."""
        return len(self._queue_offsets)

    def queue_offset(self, topic: str, queue_id: int) -> int:
        """The next queue offset ``(topic, queue_id)`` will get (0 if never used)."""
        with self._put_lock:  # an append may grow the table's arrays meanwhile
            return self._queue_offsets.get(topic, queue_id)

    def stats(self) -> CommitLogStats:
        cause = self.unwritable_cause
        err = self.unwritable_error
        return CommitLogStats(
            min_offset=self.min_offset,
            wrote_offset=self._wrote,
            flushed_offset=self._flusher.flushed_offset,
            segments=len(self._segments.segments),
            segment_bytes=self.config.segment_bytes,
            flush_mode=self.config.flush_mode.value,
            writable=cause is None,
            error=None if err is None else str(err),
            unwritable_cause=cause,
        )

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"commitlog at {self.store_dir} is closed")

    def close(self) -> None:
        """Flush everything, write the checkpoint, remove the abort marker, release the lock."""
        if self._closed:
            return
        with self._put_lock:
            self._closed = True
        self._flusher.stop()
        unclean = list(self._unclean)
        if self._flusher.error is not None and "flush_failed" not in unclean:
            unclean.append("flush_failed")
        unclean += sorted({what for what, _ in sync_failures(self.store_dir).values()} - set(unclean))
        if not unclean:
            try:
                self._write_checkpoint(self._last_store_ts)
            except OSError as e:
                log.error("checkpoint_write_failed", store=str(self.store_dir), errno=errno_name(e), error=str(e))
                unclean.append("checkpoint.write")
        self._segments.close()
        if not unclean:
            try:
                remove_abort_marker(self.store_dir)
            except OSError as e:  # the marker may stay: the next open recovers as after a crash
                log.error("abort_marker_not_removed", store=str(self.store_dir), error=str(e))
        self._lock_file.release()
        if unclean:  # the abort marker stays: the next open checks the files as after a crash
            log.warning("commitlog_closed", store=str(self.store_dir), wrote=self._wrote, clean=False, because=unclean)
        else:
            log.info("commitlog_closed", store=str(self.store_dir), wrote=self._wrote, clean=True)

    def __enter__(self) -> CommitLog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["COMMITLOG_DIR", "CommitLog", "CommitLogStats", "DeleteReason", "DeletedSegment", "ReadBatch", "ScanChunk"]
