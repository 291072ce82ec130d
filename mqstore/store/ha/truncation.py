"""Truncating a replica to its consistent point, crash-safe (apache/rocketmq#10666).

When a replica follows a new master, the records past the point both logs share
(EpochCache.find_consistent_point) are a stale tail from an older epoch and must
go, together with everything derived from them. RocketMQ cuts them in memory and
on disk without recording the intent, so a crash in the middle can leave the stale
tail valid again. Here the point is made durable first, in a marker file, and every
step after it is idempotent; whoever opens the commitlog while the marker exists
(CommitLog._open, before recovery reads a byte) finishes the cut:

    step  action                                              fault point (faults.py, kill before it)
    1     ``<store>/truncation.json`` written, fsynced,        ha.truncate.marker
          renamed, directory fsynced (``request_truncation``)
    2     epochs starting at or after the point dropped        ha.truncate.epochs
          (epochFileCheckpoint rewritten, fsynced)
    3     checkpoint: confirmPhyOffset and masterFlushedOffset  ha.truncate.checkpoint
          lowered to the point, timestamps to the store time
          of a record below it; config/derivedOffset.json
          lowered to the point (and its .bak); the queue-ends
          summary removed (a cache, rebuilt at the next close)
    4     commitlog: segments after the point deleted (newest   ha.truncate.commitlog
          first), the rest of the point's segment zeroed and
          msynced (SegmentQueue.truncate_after, as recovery cuts)
    5     the marker removed, directory fsynced                ha.truncate.done

A crash before step 1 completes leaves the log as it was (no marker, or the old
one); after it, every open redoes 2-5 (each a no-op the second time) before the
log is read, so the stale tail is never read again and nothing below the point is
touched. Derived files are cut by the open that follows, with the existing rules
(builders.py: consume queues drop units past the log's end on every open, the index
drops entries past it; derivedOffset.json lowered in step 3 keeps a later crash
from trusting derived progress past the point). Consumer offsets past a queue's new
end are clamped by MessageStore's open (QueueBuilder.clamp_consumer_offsets).

Callers: ``truncate_store`` for a closed store (it opens a MessageStore once, so the
derived files are cut too, and closes it); a replica's actor marks the point
(``request_truncation``) with its store's appends stopped, closes the shard and
opens it again (the next session's services).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

import structlog

from mqstore.errors import CorruptFileError
from mqstore.formats.message import record_fields, scan_records
from mqstore.store import faults
from mqstore.store.checkpoint_file import read_checkpoint, write_checkpoint
from mqstore.store.derived_offset import read_durable_offset, write_durable_offset
from mqstore.store.ha.epochs import EpochCache
from mqstore.store.ha.files import has_epoch_file
from mqstore.store.mapped_file import fsync_dir
from mqstore.store.queue_ends import path_of as queue_ends_path
from mqstore.store.segments import SegmentQueue

log = structlog.get_logger(__name__)
TRUNCATION_FILE = "truncation.json"


@dataclass(frozen=True)
class TruncationReport:
    """What finishing a truncation did."""

    point: int  # the log ends here now
    epochs_dropped: list[tuple[int, int]]  # (epoch, start offset) of the epochs that went
    deleted_segments: list[str]
    wrote_before: int  # where the data seemed to end before (a hint: the first zero page)


def marker_path(store_dir: Path) -> Path:
    return Path(store_dir) / TRUNCATION_FILE


def pending_truncation(store_dir: str | Path) -> int | None:
    """The point a requested truncation cuts to, or None. CorruptFileError if the
    marker cannot be read: opening without it could revive the stale tail."""
    path = marker_path(Path(store_dir))
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        point = json.loads(raw)["truncateTo"]
        if not isinstance(point, int) or isinstance(point, bool) or point < 0:
            raise ValueError(f"truncateTo {point!r}")
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptFileError(f"{path}: unreadable truncation marker ({e}); the truncation it asked for is unknown")
    return point


def request_truncation(store_dir: str | Path, point: int) -> None:
    """Step 1: make ``point`` durable as the place the log must be cut (a lower point
    already marked wins). The store's appends must be stopped; the cut happens at
    the next open (``truncate_store``, or any CommitLog open)."""
    store_dir = Path(store_dir)
    if point < 0:
        raise ValueError(f"truncation point must be >= 0, got {point}")
    old = pending_truncation(store_dir)
    point = point if old is None else min(old, point)
    path = marker_path(store_dir)
    tmp = path.with_name(path.name + ".tmp")
    faults.hit("ha.truncate.marker", tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    faults.created(fd)
    try:
        os.write(fd, json.dumps({"truncateTo": point}).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    faults.synced(tmp)
    os.replace(tmp, path)
    fsync_dir(store_dir)
    log.warning("truncation_requested", store=str(store_dir), point=point)


def _store_time_below(segments: SegmentQueue, point: int) -> int:
    """The store time of a record below ``point`` (the first of the segment holding
    it, or of the one before): a timestamp the checkpoint may keep. 0 if none."""
    seg = segments.find(point)
    i = segments.segments.index(seg) if seg is not None else len(segments.segments)
    if seg is not None and point == seg.base_offset:
        i -= 1
    for s in reversed(segments.segments[: i + 1] if i >= 0 else []):
        first = scan_records(s.mm, 0, s.size, check_crc=False, max_records=1, base_offset=s.base_offset)
        if len(first.positions):
            return int(record_fields(s.mm, first.positions).store_timestamps[0])
    return 0


def complete_pending_truncation(store_dir: str | Path, segments: SegmentQueue) -> TruncationReport | None:
    """Steps 2-5 if a truncation is pending (module docstring); None otherwise.
    ``segments``: the commitlog's, loaded, under the store's lock."""
    store_dir = Path(store_dir)
    point = pending_truncation(store_dir)
    if point is None:
        return None
    segs = segments.segments
    wrote_before = segs[-1].end_offset if segs else 0
    if segs and point < segs[0].base_offset:
        log.warning("truncation_below_min_offset", point=point, min_offset=segs[0].base_offset)
    faults.hit("ha.truncate.epochs")
    dropped = []
    if has_epoch_file(store_dir):
        dropped = [(e.epoch, e.start_offset) for e in EpochCache(store_dir).truncate_suffix_by_offset(point)]
    faults.hit("ha.truncate.checkpoint")
    cp = read_checkpoint(store_dir)
    ts = _store_time_below(segments, point)
    lowered = dataclasses.replace(
        cp,
        physic_msg_timestamp=min(cp.physic_msg_timestamp, ts),
        logics_msg_timestamp=min(cp.logics_msg_timestamp, ts),
        index_msg_timestamp=min(cp.index_msg_timestamp, ts),
        master_flushed_offset=min(cp.master_flushed_offset, point),
        confirm_phy_offset=min(cp.confirm_phy_offset, point),
    )
    if lowered != cp:
        write_checkpoint(store_dir, lowered)
    durable = read_durable_offset(store_dir)
    if durable is not None and durable > point:
        for _ in range(2):  # the file and its .bak both say at most the point
            write_durable_offset(store_dir, point)
    summary = queue_ends_path(store_dir)
    if summary.exists():
        summary.unlink()
        fsync_dir(summary.parent)
    faults.hit("ha.truncate.commitlog")
    deleted = segments.truncate_after(point)
    faults.hit("ha.truncate.done")
    marker_path(store_dir).unlink()
    fsync_dir(store_dir)
    report = TruncationReport(point, dropped, deleted, wrote_before)
    log.warning(
        "truncation_completed",
        store=str(store_dir),
        point=point,
        epochs_dropped=dropped,
        deleted_segments=deleted,
    )
    return report


def truncate_store(store_dir: str | Path, point: int, config=None) -> TruncationReport | None:
    """Cut a closed store to ``point``: mark it, then open and close a MessageStore,
    whose open finishes the cut (CommitLog) and cuts the consume queues and the
    index to match (their recovery against the shorter log). Returns what the cut
    did. StoreLockedError if the store is open elsewhere (the marker then stays:
    that store's next open cuts)."""
    from mqstore.store.message_store import MessageStore  # (it imports the commitlog, which imports this)

    request_truncation(store_dir, point)
    store = MessageStore(store_dir, config, background_dispatch=False)
    try:
        return store.commitlog.truncation
    finally:
        store.close()


__all__ = [
    "TRUNCATION_FILE",
    "TruncationReport",
    "complete_pending_truncation",
    "pending_truncation",
    "request_truncation",
    "truncate_store",
]
