"""A follower's side of replication: checking a master's batch and appending it
(RocketMQ AutoSwitchHAClient's transfer state, with its checks made strict).

A batch is (offset, bytes, epoch, epoch start, confirm offset): the master's
commitlog bytes [offset, offset + len) as they are, all of one epoch. The follower

1. checks the bytes (``check_batch``, before anything changes): whole records from
   ``offset`` on, each with its length, layout, CRC and PHYSICALOFFSET (= its own
   position) checked by the scan kernel; none across a segment end; a BLANK must
   close its segment exactly (the batch may end inside the BLANK's region; the
   follower's end is then that segment's end, as the master's is);
2. checks the offset: it must be the local end (ReplicaOffsetError naming both);
3. checks the epoch against its EpochCache: lower than the last -> StaleEpochError;
   the same -> the same start or StaleEpochError; higher -> accepted only if it
   starts at the local end (an empty follower: at or before it), and persisted to
   the epoch file before any byte of it is written;
4. appends (CommitLog.append_replicated): byte-identical, the queue-offset table
   follows (a promoted follower continues every queue), and returns the offset it
   may acknowledge: fsynced under sync flush (a step beyond RocketMQ, whose slaves
   acknowledge their page cache), written under async flush;
5. takes the master's confirm offset, capped at its own end, as its dispatch bound.

A new or empty follower starts from the master's oldest retained offset:
``start_empty_at`` gives a closed, empty store its first segment there.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import structlog

from mqstore.errors import (
    NoConsistentPointError,
    ReplicaBatchError,
    ReplicaOffsetError,
    StaleEpochError,
)
from mqstore.formats.epoch_file import EpochEntry
from mqstore.formats.message import ScanOutcome, head_holds_data, scan_records
from mqstore.store.ha.epochs import EpochCache
from mqstore.store.lockfile import StoreLock
from mqstore.store.recovery import QueueKey, merge_queue_offsets
from mqstore.store.segments import SegmentQueue

if TYPE_CHECKING:
    from mqstore.store.commitlog import CommitLog

log = structlog.get_logger(__name__)
_BLANK_SIZE = struct.Struct(">i")


class CheckedBatch(NamedTuple):
    """What ``check_batch`` found in a batch's bytes."""

    end: int  # the follower's end after it: the data's end, or the segment end a BLANK closes
    records: int
    queue_offsets: dict[QueueKey, int]  # next queue offset per (topic, queue id) the records imply
    store_timestamp: int  # the newest record's store time (0 without records)


def check_batch(data, offset: int, segment_bytes: int) -> CheckedBatch:
    """Check that ``data`` is whole, valid records at commitlog ``offset``; see the
    module docstring (step 1). ReplicaBatchError says what is wrong and where."""
    view = memoryview(data).cast("B")
    n = len(view)
    table: dict[QueueKey, int] = {}
    pos = records = newest = 0
    end = offset + n
    while pos < n:
        here = offset + pos
        seg_end = (here // segment_bytes + 1) * segment_bytes
        piece_end = min(n, seg_end - offset)
        res = scan_records(view, pos, piece_end, check_crc=True, base_offset=offset, fields=True)
        records += len(res.positions)
        newest = max(newest, merge_queue_offsets(table, res.fields))
        stop = offset + res.stop
        if res.outcome is ScanOutcome.INVALID:
            raise ReplicaBatchError(f"replicated batch at {offset}: {res.reason} (commitlog offset {stop})")
        if res.outcome is ScanOutcome.END_OF_SEGMENT:
            (size,) = _BLANK_SIZE.unpack_from(view, res.stop)
            if stop + size != seg_end:
                raise ReplicaBatchError(
                    f"replicated batch at {offset}: the BLANK at {stop} covers {size} bytes, "
                    f"its segment ends {seg_end - stop} bytes later"
                )
            pos = seg_end - offset
            end = max(end, seg_end)
            continue
        if res.stop != piece_end:  # (LIMIT short of the piece: a record runs past it, or < 8 bytes left)
            where = "the segment end" if piece_end == seg_end - offset else "the batch end"
            raise ReplicaBatchError(f"replicated batch at {offset}: the record at {stop} runs past {where}")
        if here + (piece_end - pos) == seg_end:
            raise ReplicaBatchError(
                f"replicated batch at {offset}: records reach the segment end {seg_end} without a BLANK"
            )
        pos = piece_end
    return CheckedBatch(end, records, table, newest)


class ReplicaFollower:
    """The follower's rules over its open commitlog and epoch cache. One caller at a
    time: the replica's commitlog actor (its stream from the master)."""

    def __init__(self, commitlog: CommitLog, epochs: EpochCache) -> None:
        self.commitlog = commitlog
        self.epochs = epochs
        self._log = log.bind(store=str(commitlog.store_dir))
        if commitlog.replica_confirm_offset is None:  # a new replica's store: nothing is confirmed yet
            commitlog.set_confirm_offset(commitlog.min_offset)

    @property
    def end(self) -> int:
        """Where the next batch must start: the local write position."""
        return self.commitlog.wrote_offset

    @property
    def is_empty(self) -> bool:
        """No record and no epoch: a new follower (it starts at the master's oldest offset)."""
        return not len(self.epochs) and self.commitlog.wrote_offset == self.commitlog.min_offset

    @property
    def durable_offset(self) -> int:
        """What may be acknowledged now: fsynced under sync flush, else written."""
        return self.commitlog.durable_offset

    def wait_durable(self, end: int, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for [.., end) to be durable; returns what is."""
        return self.commitlog.wait_durable(end, timeout_s)

    def consistent_point(self, master_epochs: list[EpochEntry], master_end: int) -> int:
        """How far the local log agrees with the master's (EpochCache.find_consistent_point
        with both ends); the local end when the follower is empty. Below the local end:
        truncate there first (truncation.request_truncation, then reopen).
        NoConsistentPointError when the logs share no epoch, or a log without epochs
        holds records (nothing tells what they are)."""
        if self.is_empty:
            return self.end
        if not len(self.epochs):
            raise NoConsistentPointError(
                f"the local log holds records [{self.commitlog.min_offset}, {self.end}) but no epochs: "
                "rebuild the replica from the master"
            )
        point = self.epochs.find_consistent_point(master_epochs, local_end=self.end, other_end=master_end)
        if point < self.commitlog.min_offset:
            raise NoConsistentPointError(
                f"the consistent point {point} is below the local min offset {self.commitlog.min_offset}: "
                "rebuild the replica from the master"
            )
        return point

    def append(
        self, offset: int, data, *, epoch: int, epoch_start: int, confirm_offset: int | None = None, wait: bool = True
    ) -> int:
        """Append one batch (module docstring, steps 1-5); returns the offset to
        acknowledge. Nothing is written or persisted when it raises. ``wait=False``
        (sync flush): return once written, with what is durable already; the fsync
        runs meanwhile (``durable_offset``, ``wait_durable``): a stream pipelines."""
        end = self.end
        new_epoch = self._check_epoch(epoch, epoch_start, offset)  # a deposed sender first: cheap, clearest
        checked = check_batch(data, offset, self.commitlog.config.segment_bytes)
        if offset != end:
            raise ReplicaOffsetError(f"batch at {offset}, but the log ends at {end}", expected=end, got=offset)
        if new_epoch:
            self.epochs.append(epoch, epoch_start)  # persisted before any byte of the epoch
            self._log.info("epoch_followed", epoch=epoch, start_offset=epoch_start)
        if len(memoryview(data)):
            ack = self.commitlog.append_replicated(
                offset,
                data,
                end=checked.end,
                queue_offsets=checked.queue_offsets,
                store_timestamp=checked.store_timestamp,
                wait=wait,
            )
        else:  # a heartbeat: what is durable of what came before
            ack = self.wait_durable(end, self.commitlog.config.sync_flush_timeout_ms / 1000 if wait else 0.0)
        if confirm_offset is not None:
            self.commitlog.set_confirm_offset(min(confirm_offset, self.commitlog.wrote_offset))
        return ack

    def _check_epoch(self, epoch: int, start: int, offset: int) -> bool:
        """Whether the batch's epoch is new here (to persist once its bytes checked);
        raises for an epoch this replica must refuse (module docstring, step 3)."""
        last = self.epochs.last_entry()
        if last is None:
            if self.commitlog.wrote_offset != self.commitlog.min_offset:
                raise NoConsistentPointError("the local log holds records but no epochs: rebuild the replica")
            if start > offset:
                raise ReplicaOffsetError(
                    f"epoch {epoch} starts at {start}, after the log's end {offset}", expected=offset, got=start
                )
            return True
        if epoch < last.epoch:
            raise StaleEpochError(
                f"a batch of epoch {epoch}, but this replica is in epoch {last.epoch}: the sender is deposed",
                epoch=epoch,
                last_epoch=last.epoch,
            )
        if epoch == last.epoch:
            if start != last.start_offset:
                raise StaleEpochError(
                    f"epoch {epoch} starts at {start} for the sender, at {last.start_offset} here",
                    epoch=epoch,
                    last_epoch=last.epoch,
                )
            return False
        if start != offset:
            raise ReplicaOffsetError(
                f"epoch {epoch} starts at {start}, not at this log's end {offset}: find the consistent point",
                expected=offset,
                got=start,
            )
        return True


def start_empty_at(store_dir: str | Path, base_offset: int, segment_bytes: int, *, preallocate: bool = True) -> None:
    """Give a closed store without records its first commitlog segment at
    ``base_offset`` (the master's oldest retained offset, a segment start), so the
    next open's write position is there. Refuses a store holding records
    (ValueError) or a base that is not a multiple of ``segment_bytes``."""
    from mqstore.store.commitlog import COMMITLOG_DIR  # (the commitlog imports this package)

    if base_offset < 0 or base_offset % segment_bytes:
        raise ValueError(f"base offset {base_offset} is not a multiple of segment_bytes {segment_bytes}")
    store_dir = Path(store_dir)
    store_dir.mkdir(parents=True, exist_ok=True)
    lock = StoreLock(store_dir)
    try:
        queue = SegmentQueue(store_dir / COMMITLOG_DIR, segment_bytes, preallocate=preallocate)
        queue.load()
        try:
            if any(head_holds_data(s.mm) for s in queue.segments):
                raise ValueError(f"{store_dir} holds records: only an empty store can start at {base_offset}")
            if queue.segments and queue.segments[0].base_offset == base_offset:
                return
            queue.truncate_after(-1)  # (empty segments at another base)
            queue.create_next(base_offset)
            queue.segments[-1].sync()
        finally:
            queue.close()
    finally:
        lock.release()
    log.info("store_starts_at", store=str(store_dir), base_offset=base_offset)


__all__ = ["CheckedBatch", "ReplicaFollower", "check_batch", "start_empty_at"]
