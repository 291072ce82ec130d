"""Recovery of the commitlog on open (RocketMQ CommitLog.recoverNormally / recoverAbnormally).

Inputs are explicit: the loaded segments, the checkpoint, and whether the last exit
was clean (the abort marker, read once by the caller). The walk validates records
(size, magic, layout, CRC, and that each record's PHYSICALOFFSET is its position),
stops at the first invalid one, and cuts the commitlog there: later segments are
deleted and the rest of the last segment is zeroed, so new appends overwrite the torn
tail and stale bytes can never be mistaken for records.

Where the validated walk starts:
  normal    the third-to-last segment (RocketMQ 4.9 - 5.3.1);
  abnormal  the checkpoint's confirm offset (the flushed offset when it was written)
            when a record starts there: only what was not yet flushed is read; else
            (RocketMQ's rule) from the last segment backwards, the first whose first
            record is valid, has a store time != 0 and <= checkpoint.min_timestamp();
            else segment 0.
Segments before the start are walked for the queue-offset table only (no CRC), and
only when the caller has no consume queues to take that table from (a CommitLog on
its own); a MessageStore skips that walk, as RocketMQ does, so recovery time grows
with the data after the checkpoint, not with the whole store.

Progress (bytes validated, rate, percent) is logged about once a second and kept in
a ``RecoveryProgress`` the caller may read from another thread.
"""

from __future__ import annotations

import mmap
import os
import pickle
import time
from dataclasses import dataclass, field
from itertools import compress, repeat

import numpy as np
import structlog

from mqstore.formats.checkpoint import Checkpoint
from mqstore.formats.message import (
    MIN_RECORD_BYTES,
    RecordFields,
    ScanOutcome,
    advances_queue_offset,
    head_holds_data,
    record_fields,
    record_signatures,
    scan_records,
)
from mqstore.store import faults
from mqstore.store.segments import SegmentQueue

log = structlog.get_logger(__name__)

QueueKey = tuple[str, int]


@dataclass(frozen=True)
class RecoveryReport:
    """What recovery found and did."""

    clean_shutdown: bool
    start_segment: str | None  # name of the first segment walked with validation
    wrote_offset: int  # the commitlog offset the next append starts at
    truncated_at: int | None  # where invalid bytes began, if any were cut
    reason: str  # why the walk stopped there
    deleted_segments: list[str]
    records: int  # valid records walked with validation
    bytes_validated: int
    seconds: float
    last_store_timestamp: int
    queue_offsets: dict[QueueKey, int] = field(repr=False)  # next queue offset per (topic, queue id)


class RecoveryProgress:
    """Where an open of the store is: ``phase`` is "commitlog" (validating the tail),
    "consume_queues", "dispatch" (catching up derived files) or "ready". Written by
    the opening thread, read by any (status endpoints); plain ints, no lock needed."""

    def __init__(self) -> None:
        self.phase = "starting"
        self.bytes_done = 0
        self.bytes_total = 0
        self.started = time.monotonic()
        self._last_log = self.started

    @property
    def percent(self) -> float:
        return 100.0 if self.bytes_total <= 0 else round(min(100.0, 100.0 * self.bytes_done / self.bytes_total), 1)

    def set_phase(self, phase: str, total: int = 0) -> None:
        self.phase, self.bytes_done, self.bytes_total = phase, 0, total
        self.started = self._last_log = time.monotonic()

    def advance(self, nbytes: int) -> None:
        self.bytes_done += nbytes
        now = time.monotonic()
        if now - self._last_log >= 1.0:
            self._last_log = now
            log.info(
                "recovery_progress",
                phase=self.phase,
                bytes=self.bytes_done,
                percent=self.percent,
                mb_per_s=round(self.bytes_done / 1e6 / max(now - self.started, 1e-9), 1),
            )

    def as_dict(self) -> dict:
        return {
            "phase": self.phase,
            "bytes_done": self.bytes_done,
            "bytes_total": self.bytes_total,
            "percent": self.percent,
        }


def _choose_start(queue: SegmentQueue, checkpoint: Checkpoint, clean: bool) -> int:
    segs = queue.segments
    if clean:
        return max(0, len(segs) - 3)
    limit = checkpoint.min_timestamp()
    for i in range(len(segs) - 1, -1, -1):
        first = scan_records(
            segs[i].mm, 0, segs[i].size, check_crc=True, max_records=1, base_offset=segs[i].base_offset
        )
        if len(first.positions):
            ts = int(record_fields(segs[i].mm, first.positions).store_timestamps[0])
            if ts != 0 and ts <= limit:
                return i
    return 0


def merge_queue_offsets(table: dict[QueueKey, int], f: RecordFields) -> int:
    """Fold records into ``table``; returns the max store time."""
    if not len(f.queue_ids):
        return 0
    keep = advances_queue_offset(f.sysflags)
    if keep.any():
        key = (f.topic_codes[keep] << 32) | (f.queue_ids[keep] & 0xFFFFFFFF)
        uniq, inv = np.unique(key, return_inverse=True)
        top = np.full(len(uniq), -1, np.int64)
        np.maximum.at(top, inv, f.queue_offsets[keep])
        qids = uniq & 0xFFFFFFFF
        qids = np.where(qids >= 1 << 31, qids - (1 << 32), qids)
        # One chunk of 100,000 topics' records touches tens of thousands of queues:
        # the table's lookups and updates go through map/zip/compress (C loops).
        keys = list(zip(np.array(f.topics, object)[uniq >> 32].tolist(), qids.tolist()))
        nxt = top + 1
        old = np.fromiter(map(table.get, keys, repeat(0, len(keys))), np.int64, len(keys))
        raise_ = old < nxt  # (the loop's rule: table.get(key, 0) <= queue offset)
        table.update(zip(compress(keys, raise_.tolist()), nxt[raise_].tolist()))
    return int(f.store_timestamps.max())


_CHUNK_BYTES = 4 << 20  # the passes over one chunk stay within the CPU's caches and TLB
_POPULATE_BYTES = 64 << 20
_PARALLEL_MIN_BYTES = 128 << 20  # below this a second process costs more than it saves
_SPLIT_SEARCH_BYTES = 16 << 20


def _scan_range(
    seg, start: int, end: int, table: dict[QueueKey, int], *, check_crc: bool, progress: RecoveryProgress | None = None
):
    """Walk ``seg`` from ``start`` in small chunks (bounded memory, cache-friendly;
    pages populated ahead in one call each), folding records into ``table``, until
    the data ends or the walk reaches ``end`` exactly (LIMIT). Returns the last scan
    result, the number of valid records and the newest store time."""
    pos, count, last_ts, populated = start, 0, 0, start
    while True:
        if pos + _CHUNK_BYTES > populated:
            seg.populate(pos, _POPULATE_BYTES)
            populated = pos + _POPULATE_BYTES
        res = scan_records(
            seg.mm,
            pos,
            seg.size,
            check_crc=check_crc,
            max_bytes=min(_CHUNK_BYTES, max(end - pos, 1)),
            base_offset=seg.base_offset,
            fields=True,
        )
        last_ts = max(last_ts, merge_queue_offsets(table, res.fields))
        count += len(res.positions)
        if progress is not None:
            progress.advance(res.stop - pos)
        if res.outcome is not ScanOutcome.LIMIT or not len(res.positions) or res.stop >= end:
            return res._replace(fields=None), count, last_ts
        pos = res.stop


def data_end_estimate(seg) -> int:
    """Where written bytes seem to end in ``seg`` (anything with ``mm`` and ``size``:
    a Segment, or a read-only map): the end of the last page that is not all zeros,
    found by binary search. Only a hint for splitting work (here and in the Spark
    jobs' chunks); correctness never depends on it."""
    zero = bytes(mmap.PAGESIZE)
    lo, hi = 0, seg.size // mmap.PAGESIZE
    while lo < hi:
        mid = (lo + hi) // 2
        if seg.mm[mid * mmap.PAGESIZE : (mid + 1) * mmap.PAGESIZE] == zero:
            hi = mid
        else:
            lo = mid + 1
    return lo * mmap.PAGESIZE


def record_start_after(seg, at: int) -> int | None:
    """The first position >= ``at`` in ``seg`` (anything with ``mm``, ``size`` and
    ``base_offset``) that looks like a record start, searched within 16 MB: a record
    signature (formats.message.record_signatures; a crafted one is caught because the
    first half's walk must land on it). Verify resynchronises after damage with it."""
    n = min(_SPLIT_SEARCH_BYTES, seg.size - at - MIN_RECORD_BYTES)
    if n <= 0:
        return None
    hits = record_signatures(seg.mm, at, at + n, seg.base_offset)
    return int(hits[0]) if hits.size else None


def _confirmed_position(queue: SegmentQueue, confirmed: int) -> tuple[int, int] | None:
    """(segment index, position) of the checkpoint's confirm offset (the flushed
    offset when the checkpoint was written) if it is a record start the walk can
    begin at: a segment's first byte, or a record whose PHYSICALOFFSET is its own
    position. None otherwise (zero, garbage, or the end of the data, where no record
    starts: recovery falls back to the timestamp rule)."""
    segs = queue.segments
    if confirmed <= 0 or not segs or not segs[0].base_offset <= confirmed < segs[-1].end_offset:
        return None
    i = (confirmed - segs[0].base_offset) // (segs[0].end_offset - segs[0].base_offset)
    if not 0 <= i < len(segs) or not segs[i].base_offset <= confirmed < segs[i].end_offset:
        return None
    seg, pos = segs[i], confirmed - segs[i].base_offset
    if pos == 0:
        return i, 0
    if pos + MIN_RECORD_BYTES > seg.size:
        return None
    return (i, pos) if len(record_signatures(seg.mm, pos, pos + 1, seg.base_offset)) else None


def _scan_segment(
    seg, table: dict[QueueKey, int], *, check_crc: bool, progress: RecoveryProgress | None = None, start: int = 0
):
    """Scan one segment, on two cores when it holds enough data: a forked child scans
    the second half (from a record start found by signature) while this process scans
    the first; the halves are joined only if the first walk lands exactly on the split."""
    faults.hit("recovery.scan_segment", seg.path)  # also lets tests count the segments read
    split = None
    if (os.cpu_count() or 1) > 1 and hasattr(os, "fork"):
        end = data_end_estimate(seg)
        if end - start >= _PARALLEL_MIN_BYTES:
            split = record_start_after(seg, start + (end - start) // 2)
    if split is None:
        return _scan_range(seg, start, seg.size, table, check_crc=check_crc, progress=progress)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: scan the second half, send the result, leave without cleanup
        try:
            os.close(r)
            part: dict[QueueKey, int] = {}
            with os.fdopen(w, "wb") as out:
                pickle.dump((*_scan_range(seg, split, seg.size, part, check_crc=check_crc), part), out)
        finally:
            os._exit(0)
    os.close(w)
    first, count, last_ts = _scan_range(seg, start, split, table, check_crc=check_crc, progress=progress)
    with os.fdopen(r, "rb") as inp:
        data = inp.read()
    os.waitpid(pid, 0)
    if not (first.outcome is ScanOutcome.LIMIT and first.stop == split):
        if first.outcome is not ScanOutcome.LIMIT:
            return first, count, last_ts  # the data ended (or broke) before the split
        rest, more, ts = _scan_range(seg, first.stop, seg.size, table, check_crc=check_crc)  # split was not a record
        return rest, count + more, max(last_ts, ts)
    second, more, ts, part = pickle.loads(data)
    if progress is not None:
        progress.advance(second.stop - split)
    for key, nxt in part.items():
        if table.get(key, 0) < nxt:
            table[key] = nxt
    return second, count + more, max(last_ts, ts)


def recover(
    queue: SegmentQueue,
    checkpoint: Checkpoint,
    *,
    clean_shutdown: bool,
    check_crc: bool = True,
    rebuild_queue_offsets: bool = True,
    progress: RecoveryProgress | None = None,
) -> RecoveryReport:
    """Validate the commitlog's tail, cut it at the first invalid record, and rebuild
    the write position and queue-offset table (from the tail only, without
    ``rebuild_queue_offsets``: the caller takes the rest from its consume queues).
    See the module docstring."""
    t0 = time.perf_counter()
    segs = queue.segments
    table: dict[QueueKey, int] = {}
    if not segs:
        return RecoveryReport(clean_shutdown, None, 0, None, "no segments", [], 0, 0, 0.0, 0, table)
    start = _choose_start(queue, checkpoint, clean_shutdown)
    at = 0  # where in segs[start] the validated walk begins
    if not clean_shutdown and (confirmed := _confirmed_position(queue, checkpoint.confirm_phy_offset)) is not None:
        start, at = confirmed  # everything before it was flushed: validate only what follows
    last_ts = 0
    for seg in segs[:start] if rebuild_queue_offsets else ():
        res, _, ts = _scan_segment(seg, table, check_crc=False)
        last_ts = max(last_ts, ts)
    if at and rebuild_queue_offsets:
        last_ts = max(last_ts, _scan_range(segs[start], 0, at, table, check_crc=False)[2])
    if progress is not None:
        total = sum(seg.size for seg in segs[start:-1]) + data_end_estimate(segs[-1]) - at
        progress.set_phase("commitlog", max(total, 0))
    records = validated = 0
    stop = segs[start].base_offset + at
    reason = ""
    truncated = False
    for i, seg in enumerate(segs[start:]):
        first = at if i == 0 else 0
        res, count, ts = _scan_segment(seg, table, check_crc=check_crc, progress=progress, start=first)
        last_ts = max(last_ts, ts)
        records += count
        validated += res.stop - first
        if res.outcome is ScanOutcome.END_OF_SEGMENT:
            stop = seg.end_offset
            continue
        stop = seg.base_offset + res.stop
        reason = res.reason
        # A segment that ends in zeros is simply where writing stopped.
        tail = seg.mm[res.stop : res.stop + 8]
        truncated = res.outcome is ScanOutcome.INVALID and tail != bytes(len(tail))
        break
    else:
        reason = "end of the last segment"
    if not last_ts and at:  # the tail held no record: the newest is just before it
        last_ts = _scan_range(segs[start], 0, at, {}, check_crc=False)[2]
    if not last_ts and start and not rebuild_queue_offsets:
        last_ts = _scan_segment(segs[start - 1], {}, check_crc=False)[2]
    later = [s for s in segs if s.base_offset > stop]
    truncated = truncated or any(head_holds_data(s.mm) for s in later)
    deleted = queue.truncate_after(stop)
    report = RecoveryReport(
        clean_shutdown=clean_shutdown,
        start_segment=segs[start].path.name if start < len(segs) else None,
        wrote_offset=stop,
        truncated_at=stop if truncated else None,
        reason=reason,
        deleted_segments=deleted,
        records=records,
        bytes_validated=validated,
        seconds=time.perf_counter() - t0,
        last_store_timestamp=last_ts,
        queue_offsets=table,
    )
    log.info(
        "commitlog_recovered",
        clean_shutdown=clean_shutdown,
        start_segment=report.start_segment,
        wrote_offset=stop,
        truncated_at=report.truncated_at,
        reason=reason,
        deleted_segments=deleted,
        records=records,
        bytes_validated=validated,
        seconds=round(report.seconds, 3),
    )
    return report


__all__ = [
    "QueueKey",
    "RecoveryProgress",
    "RecoveryReport",
    "data_end_estimate",
    "merge_queue_offsets",
    "record_start_after",
    "recover",
]
