"""The reads' ports (reads.ShardPorts) over the files of this process, and the three
lookups the services answer with the same code: ``units_page`` (ConsumeQueue
GetUnits), ``queue_ranges`` (MinMax) and ``read_records`` (CommitLog Read)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from mqstore.errors import IndexDisabledError, InvalidArgumentError, NotFoundError, OffsetError
from mqstore.formats.consume_queue import is_pre_blank_unit
from mqstore.formats.message import MAGIC_V1, MAGIC_V2, MessageRecord
from mqstore.formats.msgid import parse_offset_msg_id
from mqstore.formats.packed import RawRecords
from mqstore.store import reads
from mqstore.store.builders import ConsumerProgress, consumer_progress
from mqstore.store.commitlog import CommitLog
from mqstore.store.consume_queues import ConsumeQueues
from mqstore.store.consumer_offsets import ConsumerOffsets
from mqstore.store.index_service import IndexService
from mqstore.store.reader import CommitLogView
from mqstore.store.reads import PullStatus, QueueRange, QueueStatus, UnitsPage, drive

_NONE = np.zeros(0, np.int64)


def units_page(queues: ConsumeQueues, topic: str, queue_id: int, offset: int, max_units: int) -> UnitsPage:
    """Up to ``max_units`` units of one queue from ``offset`` clamped into [min, max]."""
    cq = queues.find(topic, queue_id)
    if cq is None:
        return UnitsPage(False, offset, 0, 0, _NONE, _NONE, _NONE)
    for _ in range(3):  # retention may move the min offset between the read of it and the read of units
        lo, hi = cq.min_offset, cq.max_offset
        start = min(max(offset, lo), hi)
        try:
            units = cq.read_units(start, max_units) if start < hi else None
            break
        except OffsetError:
            continue
    else:
        raise OffsetError(f"{topic}:{queue_id} moved its min offset three times during one read; try again")
    if units is None or not len(units):
        return UnitsPage(True, start, lo, hi, _NONE, _NONE, _NONE)
    return UnitsPage(
        True,
        start,
        lo,
        hi,
        units["commitlog_offset"].astype(np.int64),
        units["size"].astype(np.int64),
        units["tags_code"].astype(np.int64),
    )


def queue_ranges(queues: ConsumeQueues, topic: str, queue_ids: Sequence[int] = ()) -> list[QueueRange]:
    """The offsets of ``topic``'s queues (those given, or all), with each one's newest record."""
    qids = queue_ids or sorted(q for t, q in queues.keys() if t == topic)  # noqa: SIM118 (not a dict)
    out = []
    for qid in qids:
        cq = queues.find(topic, qid)
        if cq is None:
            continue
        last = cq.last_unit()
        blank = last is None or is_pre_blank_unit(last.commitlog_offset, last.size, last.tags_code)
        last_phys = -1 if blank else last.commitlog_offset
        out.append(QueueRange(topic, qid, cq.min_offset, cq.max_offset, last_phys))
    return out


def read_records(
    commitlog: CommitLog | CommitLogView,
    offsets: np.ndarray,
    sizes: np.ndarray | None,
    raw: bool,
    *,
    skip_missing: bool = True,
    check_sizes: bool = False,
) -> tuple[np.ndarray, list[MessageRecord] | RawRecords]:
    """The records at ``offsets`` (decoded, or their stored bytes with ``raw``), those
    below the min offset or at/past the write position left out (``skip_missing``) or
    refused with NotFoundError naming the first. Raw reads take each record's size
    from its unit; ``check_sizes`` (sizes from a caller, not from the store's own
    units) refuses a size that does not match the record there."""
    offsets = np.asarray(offsets, np.int64)
    if len(offsets) and offsets.min() < 0:
        raise InvalidArgumentError(f"commitlog offset {int(offsets.min())} is negative")
    lo, hi = commitlog.min_offset, commitlog.wrote_offset
    gone = (offsets < lo) | (offsets >= hi)
    if gone.any():
        if not skip_missing:
            off = int(offsets[np.argmax(gone)])
            raise NotFoundError(
                f"no message at commitlog offset {off}: "
                + (f"deleted (min offset {lo})" if off < lo else f"past the write position {hi}")
            )
        offsets = offsets[~gone]
        sizes = None if sizes is None else np.asarray(sizes, np.int64)[~gone]
    if not raw:
        return offsets, commitlog.read_many(offsets)
    if sizes is None:
        sizes = np.array([commitlog.read(o).total_size for o in offsets.tolist()], np.int64)
    elif len(sizes) and np.min(sizes) <= 0:
        raise InvalidArgumentError("record sizes must be > 0")
    raws = commitlog.read_raw(offsets, np.asarray(sizes, np.int64))
    if check_sizes and raws:
        stored_sizes, magics = raws.heads()
        bad = np.flatnonzero((stored_sizes != sizes) | ~np.isin(magics, (MAGIC_V1, MAGIC_V2)))
        if len(bad):
            i = int(bad[0])
            raise InvalidArgumentError(
                f"no record of {int(sizes[i])} bytes starts at commitlog offset {int(offsets[i])}"
            )
    return offsets, raws


class LocalPorts:
    """reads.ShardPorts over one store's commitlog, consume queues, index (None: off)
    and consumer offsets, all in this process."""

    def __init__(
        self,
        commitlog: CommitLog | CommitLogView,
        queues: ConsumeQueues,
        index: IndexService | None,
        consumer_offsets: ConsumerOffsets,
        *,
        perm_of: Callable[[str], int | None],
    ) -> None:
        self.perm = perm_of
        self.commitlog = commitlog
        self.queues = queues
        self.index = index
        self.consumer_offsets = consumer_offsets

    def units(self, topic: str, queue_id: int, offset: int, max_units: int) -> UnitsPage:
        return units_page(self.queues, topic, queue_id, offset, max_units)

    def ranges(self, topic: str) -> list[QueueRange]:
        return queue_ranges(self.queues, topic)

    def read(self, offsets: np.ndarray, sizes: np.ndarray | None, raw: bool) -> tuple[np.ndarray, list]:
        return read_records(self.commitlog, offsets, sizes, raw)

    def keys(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[int]:
        if self.index is None:
            raise IndexDisabledError("the message index is disabled for this store (message_index_enable=False)")
        return self.index.query(topic, key, max_num=max_num, begin=begin, end=end)

    def offset_at_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        cq = self.queues.find(topic, queue_id)
        if cq is None:
            return 0
        return cq.offset_at_time(
            timestamp_ms, store_times_reader(self.commitlog.read), commitlog_min_offset=self.commitlog.min_offset
        )

    def progress(self, group: str) -> list:
        return consumer_progress(self.queues, self.consumer_offsets, group)


def store_times_reader(read: Callable[[int], MessageRecord]) -> Callable[[np.ndarray], np.ndarray]:
    """The store times of records at these offsets (-1 where none is left), as
    ``ConsumeQueue.offset_at_time`` asks for them."""

    def store_times(offsets: np.ndarray) -> np.ndarray:
        out = np.full(len(offsets), -1, np.int64)
        for i, off in enumerate(np.asarray(offsets).tolist()):
            try:
                out[i] = read(off).store_timestamp
            except OffsetError:
                pass
        return out

    return store_times


@dataclass(frozen=True)
class RawPullResult:
    """Encoded messages of one queue (see ``LocalReads.pull_raw``), in one buffer:
    ``messages`` is a sequence of each record's stored bytes."""

    messages: RawRecords
    next_offset: int
    min_offset: int
    max_offset: int
    status: PullStatus = PullStatus.FOUND


@dataclass(frozen=True)
class PullResult:
    """Messages of one queue from ``offset`` on, and the pull's status (reads.py);
    ``next_offset`` continues the pull."""

    records: list[MessageRecord]
    next_offset: int
    min_offset: int
    max_offset: int
    status: PullStatus = PullStatus.FOUND


class LocalReads:
    """The read API of a store in this process (``MessageStore``, and ``ReadView``
    for the query commands): each method is one read of reads.py over ``_ports``,
    the same lines the front runs over gRPC."""

    _ports: LocalPorts

    def _check_open(self) -> None:
        """Raise StoreClosedError once the store is closed (the subclass knows)."""

    def _read(self, read):
        self._check_open()
        return drive(read, self._ports)

    def pull(
        self, topic: str, queue_id: int, offset: int, *, max_count: int = 32, tags: set[str] | None = None
    ) -> PullResult:
        """Up to ``max_count`` (<= 10,000) messages of (topic, queue_id) from queue
        offset ``offset``, and a status (see reads.py: OFFSET_TOO_SMALL below the min
        offset, NO_NEW_MESSAGE at the max, ...; ``next_offset`` goes on from there);
        with ``tags``, only messages whose TAGS is one of them (matched by tagsCode in
        the queue first, then exactly on the record, as RocketMQ does). A topic whose
        perm lacks READ raises TopicPermissionError; a bad topic, queue id, offset or
        count raises before any file is touched."""
        a = self._read(reads.pull(topic, queue_id, offset, max_count=max_count, tags=tags))
        return PullResult(a.records, a.next_offset, a.min_offset, a.max_offset, a.status)

    def pull_raw(
        self, topic: str, queue_id: int, offset: int, *, max_count: int = 32, tags_codes: set[int] | None = None
    ) -> RawPullResult:
        """Like ``pull`` but the messages stay encoded (the stored record bytes, as a
        broker hands them to clients), filtered by tagsCode only, as RocketMQ's broker
        does (clients check the tag strings). The fast path for consumers."""
        a = self._read(reads.pull(topic, queue_id, offset, max_count=max_count, tags_codes=tags_codes, raw=True))
        return RawPullResult(a.records, a.next_offset, a.min_offset, a.max_offset, a.status)

    def offset_at_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset of (topic, queue_id) stored at or after
        ``timestamp_ms`` (RocketMQ getOffsetInQueueByTime, boundary LOWER)."""
        return self._read(reads.offset_at_time(topic, queue_id, timestamp_ms))

    def read_msg_id(self, msg_id: str) -> MessageRecord:
        """The record an offset msgId names (mqadmin queryMsgById); NotFoundError if
        none (deleted, never written, or a record of another store host there)."""
        _, offset = parse_offset_msg_id(msg_id)
        return self._read(reads.by_msg_id(msg_id, offset))

    def read_queue_offset(self, topic: str, queue_id: int, queue_offset: int) -> MessageRecord:
        """The message at one queue offset (mqadmin queryMsgByOffset); NotFoundError if none."""
        return self._read(reads.by_queue_offset(topic, queue_id, queue_offset))

    def topic_status(self, topic: str) -> list[QueueStatus]:
        """Per queue of ``topic``: min and max offset and the last message's store
        time; NotFoundError for a topic with no queues."""
        return reads.merge_topic_status(topic, [self._read(reads.topic_status(topic))])

    def query_by_key(
        self, topic: str, key: str, *, begin: int = 0, end: int = reads.LONG_MAX, max_num: int = 32
    ) -> list[MessageRecord]:
        """Messages of ``topic`` whose KEYS hold ``key``, stored in [begin, end] (ms),
        newest first, at most ``max_num`` (<= 64, RocketMQ's index limit);
        NotFoundError if none, IndexDisabledError if the store keeps no index."""
        found = self._read(reads.by_key(topic, key, begin=begin, end=end, max_num=max_num))
        return reads.newest_first([(0, found)], max_num, topic, key)

    def query_by_unique_key(self, topic: str, unique_key: str, *, max_num: int = 32) -> list[MessageRecord]:
        """Messages of ``topic`` with this UNIQ_KEY (the client's message id), as ``query_by_key``."""
        found = self._read(reads.by_key(topic, unique_key, max_num=max_num, unique=True))
        return reads.newest_first([(0, found)], max_num, topic, unique_key, unique=True)

    def fetch_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The group's committed offset of (topic, queue_id); -1 if it has none."""
        self._check_open()
        reads.check_queue(topic, queue_id)
        return self._ports.consumer_offsets.fetch(group, topic, queue_id)

    def consumer_progress(self, group: str) -> list[ConsumerProgress]:
        """Per queue the group has an offset for: broker (max) offset, consumer offset, lag."""
        return reads.merge_progress([self._read(reads.consumer_progress(group))])


__all__ = [
    "LocalPorts",
    "LocalReads",
    "PullResult",
    "RawPullResult",
    "queue_ranges",
    "read_records",
    "store_times_reader",
    "units_page",
]
