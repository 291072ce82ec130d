"""Recovery of the commitlog on open (RocketMQ CommitLog.recoverNormally / recoverAbnormally).

Inputs are explicit: the loaded segments, the checkpoint, and whether the last exit
was clean (the abort marker, read once by the caller). The walk validates records
(size, magic, layout, CRC, and that each record's PHYSICALOFFSET is its position),
stops at the first invalid one, and cuts the commitlog there: later segments are
deleted and the rest of the last segment is zeroed, so new appends overwrite the torn
tail and stale bytes can never be mistaken for records.

Where the validated walk starts:
  normal    the third-to-last segment (RocketMQ 4.9 - 5.3.1);
  abnormal  from the last segment backwards, the first whose first record is valid,
            has a store time != 0 and <= checkpoint.min_timestamp(); else segment 0.
Segments before the start are only walked for the queue-offset table (no CRC):
mqstore has no consume queues yet to take that table from.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import structlog

from mqstore.formats.checkpoint import Checkpoint
from mqstore.formats.message import (
    MAGIC_V1,
    MAGIC_V2,
    ScanOutcome,
    TRANSACTION_TYPE_MASK,
    RecordFields,
    record_fields,
    scan_records,
)
from mqstore.store.segments import SegmentQueue

log = structlog.get_logger(__name__)

QueueKey = tuple[str, int]


@dataclass(frozen=True)
class RecoveryReport:
    """What recovery found and did."""

    clean_shutdown: bool
    start_segment: str | None  # name of the first segment walked with validation
    write_position: int  # the commitlog offset the next append starts at
    truncated_at: int | None  # where invalid bytes began, if any were cut
    reason: str  # why the walk stopped there
    deleted_segments: list[str]
    records: int  # valid records walked with validation
    bytes_validated: int
    seconds: float
    last_store_timestamp: int
    queue_offsets: dict[QueueKey, int] = field(repr=False)  # next queue offset per (topic, queue id)


def _choose_start(queue: SegmentQueue, checkpoint: Checkpoint, clean: bool) -> int:
    segs = queue.segments
    if clean:
        return max(0, len(segs) - 3)
    limit = checkpoint.min_timestamp()
    for i in range(len(segs) - 1, -1, -1):
        first = scan_records(segs[i].mm, 0, segs[i].size, check_crc=True, max_records=1, base_offset=segs[i].base_offset)
        if len(first.positions):
            ts = int(record_fields(segs[i].mm, first.positions).store_timestamps[0])
            if ts != 0 and ts <= limit:
                return i
    return 0


def _merge_queue_offsets(table: dict[QueueKey, int], f: RecordFields) -> int:
    """Fold records into ``table``; returns the max store time."""
    if not len(f.queue_ids):
        return 0
    keep = (f.sysflags & TRANSACTION_TYPE_MASK) % 8 == 0  # NOT_TYPE 0 and COMMIT 8 advance
    if keep.any():
        key = (f.topic_codes[keep] << 32) | (f.queue_ids[keep] & 0xFFFFFFFF)
        uniq, inv = np.unique(key, return_inverse=True)
        top = np.full(len(uniq), -1, np.int64)
        np.maximum.at(top, inv, f.queue_offsets[keep])
        for k, q in zip(uniq.tolist(), top.tolist()):
            topic = f.topics[k >> 32]
            qid = k & 0xFFFFFFFF
            qid = qid - (1 << 32) if qid >= 1 << 31 else qid
            if table.get((topic, qid), 0) <= q:
                table[(topic, qid)] = q + 1
    return int(f.store_timestamps.max())


_CHUNK_BYTES = 4 << 20  # the passes over one chunk stay within the CPU's caches and TLB
_POPULATE_BYTES = 64 << 20


def _scan_segment(seg, table: dict[QueueKey, int], *, check_crc: bool):
    """Walk one segment in small chunks (bounded memory, cache-friendly; pages are
    populated ahead in one call each), folding records into ``table``. Returns the
    last scan result, the number of valid records and the newest store time."""
    pos = count = last_ts = populated = 0
    while True:
        if pos + _CHUNK_BYTES > populated:
            seg.populate(pos, _POPULATE_BYTES, write=False)
            populated = pos + _POPULATE_BYTES
        res = scan_records(seg.mm, pos, seg.size, check_crc=check_crc, max_bytes=_CHUNK_BYTES,
                           base_offset=seg.base_offset, fields=True)  # fmt: skip
        last_ts = max(last_ts, _merge_queue_offsets(table, res.fields))
        count += len(res.positions)
        if res.outcome is not ScanOutcome.LIMIT or not len(res.positions):
            return res, count, last_ts
        pos = res.stop


def recover(queue: SegmentQueue, checkpoint: Checkpoint, *, clean_shutdown: bool, check_crc: bool = True) -> RecoveryReport:
    """Validate the commitlog's tail, cut it at the first invalid record, and rebuild
    the write position and queue-offset table. See the module docstring."""
    t0 = time.perf_counter()
    segs = queue.segments
    table: dict[QueueKey, int] = {}
    if not segs:
        return RecoveryReport(clean_shutdown, None, 0, None, "no segments", [], 0, 0, 0.0, 0, table)
    start = _choose_start(queue, checkpoint, clean_shutdown)
    last_ts = 0
    for seg in segs[:start]:
        res, _, ts = _scan_segment(seg, table, check_crc=False)
        last_ts = max(last_ts, ts)
    records = validated = 0
    stop = segs[start].base_offset
    reason = ""
    truncated = False
    for seg in segs[start:]:
        res, count, ts = _scan_segment(seg, table, check_crc=check_crc)
        last_ts = max(last_ts, ts)
        records += count
        validated += res.stop
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
    later = [s for s in segs if s.base_offset > stop]
    truncated = truncated or any(_has_data(s) for s in later)
    deleted = queue.truncate_after(stop)
    report = RecoveryReport(
        clean_shutdown=clean_shutdown,
        start_segment=segs[start].path.name if start < len(segs) else None,
        write_position=stop,
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
        clean_shutdown=clean_shutdown, start_segment=report.start_segment, write_position=stop,
        truncated_at=report.truncated_at, reason=reason, deleted_segments=deleted, records=records,
        bytes_validated=validated, seconds=round(report.seconds, 3),
    )  # fmt: skip
    return report


def _has_data(seg) -> bool:
    size, magic = int.from_bytes(seg.mm[0:4], "big", signed=True), int.from_bytes(seg.mm[4:8], "big", signed=True)
    return size != 0 or magic in (MAGIC_V1, MAGIC_V2)


__all__ = ["QueueKey", "RecoveryReport", "recover"]
