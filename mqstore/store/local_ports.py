"""The reads' ports (reads.ShardPorts) over the files of this process, and the three
lookups the services answer with the same code: ``units_page`` (ConsumeQueue
GetUnits), ``queue_ranges`` (MinMax) and ``read_records`` (CommitLog Read)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from mqstore.errors import IndexDisabledError, InvalidArgumentError, NotFoundError, OffsetError
from mqstore.formats.consume_queue import PRE_BLANK_SIZE
from mqstore.formats.message import MAGIC_V1, MAGIC_V2, MessageRecord
from mqstore.store.builders import consumer_progress
from mqstore.store.commitlog import CommitLog
from mqstore.store.config_files import ConsumerOffsets
from mqstore.store.consume_queues import ConsumeQueues
from mqstore.store.index_service import IndexService
from mqstore.store.reads import QueueRange, UnitsPage

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
    return UnitsPage(True, start, lo, hi, units["commitlog_offset"].astype(np.int64), units["size"].astype(np.int64),
                     units["tags_code"].astype(np.int64))  # fmt: skip


def queue_ranges(queues: ConsumeQueues, topic: str, queue_ids: Sequence[int] = ()) -> list[QueueRange]:
    """The offsets of ``topic``'s queues (those given, or all), with each one's newest record."""
    qids = queue_ids or sorted(q for t, q in queues.keys() if t == topic)  # noqa: SIM118 (not a dict)
    out = []
    for qid in qids:
        cq = queues.find(topic, qid)
        if cq is None:
            continue
        last = cq.last_unit()
        blank = last is None or (last.commitlog_offset == 0 and last.size == PRE_BLANK_SIZE and last.tags_code == 0)
        last_phys = -1 if blank else last.commitlog_offset
        out.append(QueueRange(topic, qid, cq.min_offset, cq.max_offset, last_phys))
    return out


def read_records(commitlog: CommitLog, offsets: np.ndarray, sizes: np.ndarray | None, raw: bool, *,
                 skip_missing: bool = True) -> tuple[np.ndarray, list]:  # fmt: skip
    """The records at ``offsets`` (decoded, or their stored bytes with ``raw``), those
    below the min offset or at/past the write position left out (``skip_missing``) or
    refused with NotFoundError naming the first. Raw reads need each record's size
    (from its unit); a size that does not match the record there is refused."""
    offsets = np.asarray(offsets, np.int64)
    if len(offsets) and offsets.min() < 0:
        raise InvalidArgumentError(f"commitlog offset {int(offsets.min())} is negative")
    lo, hi = commitlog.min_offset, commitlog.wrote
    gone = (offsets < lo) | (offsets >= hi)
    if gone.any() and not skip_missing:
        off = int(offsets[np.argmax(gone)])
        raise NotFoundError(f"no message at commitlog offset {off}: "
                          + (f"deleted (min offset {lo})" if off < lo else f"past the write position {hi}"))  # fmt: skip
    offsets = offsets[~gone]
    if not raw:
        return offsets, [commitlog.read(o) for o in offsets.tolist()]
    if sizes is None:
        sizes = np.array([commitlog.read(o).total_size for o in offsets.tolist()], np.int64)
    else:
        sizes = np.asarray(sizes, np.int64)[~gone]
        if len(sizes) and sizes.min() <= 0:
            raise InvalidArgumentError("record sizes must be > 0")
    raws = commitlog.read_raw(offsets, sizes)
    for off, size, data in zip(offsets.tolist(), sizes.tolist(), raws):
        head = np.frombuffer(data[:8], ">i4") if len(data) >= 8 else ()
        if len(head) != 2 or head[0] != size or head[1] not in (MAGIC_V1, MAGIC_V2):
            raise InvalidArgumentError(f"no record of {size} bytes starts at commitlog offset {off}")
    return offsets, raws


class LocalPorts:
    """reads.ShardPorts over one store's commitlog, consume queues, index (None: off)
    and consumer offsets, all in this process."""

    def __init__(self, commitlog: CommitLog, queues: ConsumeQueues, index: IndexService | None,
                 consumer_offsets: ConsumerOffsets, *, perm_of: Callable[[str], int | None]) -> None:  # fmt: skip
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
        return cq.offset_at_time(timestamp_ms, store_times_reader(self.commitlog.read),
                                 commitlog_min_offset=self.commitlog.min_offset)  # fmt: skip

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


__all__ = ["LocalPorts", "queue_ranges", "read_records", "store_times_reader", "units_page"]
