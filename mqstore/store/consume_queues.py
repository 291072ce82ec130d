"""All consume queues of a store, as one dispatch sink (RocketMQ ConsumeQueueStore).

Queues are opened lazily on first use and kept open; ``load`` opens the ones on
disk (``consumequeue/<topic>/<queueId>``; names that are not a valid topic or
queue id are skipped with a warning, as RocketMQ ignores them).

Who calls what: the dispatcher thread calls ``dispatch`` and ``flush``; recovery
calls ``load``, ``recover`` and ``truncate_dirty`` before the dispatcher starts;
readers call ``get`` from any thread.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import structlog

from mqstore.errors import InvalidTopicError
from mqstore.formats.message import advances_queue_offset
from mqstore.formats.names import check_topic
from mqstore.store.commitlog import CommitLog
from mqstore.store.consume_queue import ConsumeQueue
from mqstore.store.dispatch import DispatchBatch
from mqstore.store.file_pool import FilePool

log = structlog.get_logger(__name__)

CONSUME_QUEUE_DIR = "consumequeue"


class ConsumeQueues:
    """The store's consume queues; a DispatchSink."""

    def __init__(self, store_dir: Path, *, file_bytes: int, max_open_files: int = 512) -> None:
        self._store_dir = store_dir
        self._file_bytes = file_bytes
        self.pool = FilePool(max_open_files)  # bounds descriptors over all queues
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._lock = threading.Lock()
        self.last_dispatched_timestamp = 0  # store time of the newest unit written

    def load(self) -> None:
        root = self._store_dir / CONSUME_QUEUE_DIR
        if not root.is_dir():
            return
        for topic_dir in sorted(root.iterdir()):
            try:
                check_topic(topic_dir.name)
            except InvalidTopicError:
                log.warning("consume_queue_dir_ignored", path=str(topic_dir))
                continue
            for qdir in sorted(topic_dir.iterdir()):
                if not (qdir.name.isdigit() and int(qdir.name) <= 65535):
                    log.warning("consume_queue_dir_ignored", path=str(qdir))
                    continue
                self.get(topic_dir.name, int(qdir.name))

    def get(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue of (topic, queue_id), opened (and created) on first use."""
        key = (topic, queue_id)
        cq = self._queues.get(key)
        if cq is None:
            with self._lock:
                cq = self._queues.get(key)
                if cq is None:
                    # Sparse files, as RocketMQ's setLength makes them: 200,000 queues x 6 MB
                    # pre-allocated would be 1.2 TB of blocks for nothing.
                    cq = ConsumeQueue(self._store_dir, topic, queue_id, file_bytes=self._file_bytes, pool=self.pool,
                                      preallocate=False)  # fmt: skip
                    self._queues[key] = cq
        return cq

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The queue if it exists on disk or was written; never creates one."""
        cq = self._queues.get((topic, queue_id))
        if cq is None and (self._store_dir / CONSUME_QUEUE_DIR / topic / str(queue_id)).is_dir():
            return self.get(topic, queue_id)
        return cq

    def keys(self) -> list[tuple[str, int]]:
        """(topic, queue id) of every queue open or on disk."""
        on_disk = set()
        root = self._store_dir / CONSUME_QUEUE_DIR
        if root.is_dir():
            for topic_dir in root.iterdir():
                for qdir in topic_dir.iterdir() if topic_dir.is_dir() else ():
                    if qdir.name.isdigit():
                        on_disk.add((topic_dir.name, int(qdir.name)))
        return sorted(on_disk | set(self._queues))

    def all(self) -> list[ConsumeQueue]:
        return list(self._queues.values())

    def dispatch(self, batch: DispatchBatch) -> None:
        """Write the units of NOT_TYPE and COMMIT records, grouped by queue."""
        take = advances_queue_offset(batch.sysflags)
        idx = np.flatnonzero(take) if not take.all() else np.arange(len(batch))
        if not len(idx):
            return
        codes, qids = batch.topic_codes[idx], batch.queue_ids[idx]
        order = np.lexsort((qids, codes))  # stable: commitlog order within a queue
        key = codes[order] * 65536 + qids[order]
        bounds = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1], [True])))
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            sel = idx[order[lo:hi]]
            cq = self.get(batch.topics[int(batch.topic_codes[sel[0]])], int(batch.queue_ids[sel[0]]))
            cq.put_units(batch.queue_offsets[sel], batch.physical_offsets[sel], batch.sizes[sel], batch.tags_codes[sel])
        self.last_dispatched_timestamp = int(batch.store_timestamps[idx[-1]])

    def flush(self, *, thorough: bool = True) -> None:
        """Flush every queue (``thorough``) or only those with at least two pages of
        new units (RocketMQ's every-second flush; a thorough one every 60 s): with
        thousands of queues an fsync for every queue every second would never end."""
        least = 0 if thorough else 2 * 4096
        for cq in self.all():
            cq.flush(least)

    def max_physical_offset(self) -> int:
        """offset+size of the newest unit over all queues (-1 if there is none)."""
        return max((cq.max_physical_offset for cq in self.all()), default=-1)

    def recover(self, commitlog: CommitLog, *, verify_tail: bool) -> None:
        """Cut torn unit tails and every unit at or past the commitlog's valid end.
        With ``verify_tail`` (after an abnormal exit) the last file's units are also
        checked against their records (size, queue id, queue offset): garbage that
        happens to look like units (offset >= 0, size > 0) is cut too, and the
        dispatcher rebuilds what follows."""
        for cq in self.all():
            cq.recover()
            cq.truncate_dirty(commitlog.wrote)
            cq.correct_min_offset(commitlog.min_offset)
            if verify_tail and cq.max_offset > cq.min_offset:
                start = max(cq.min_offset, cq.max_offset - cq.max_offset % (cq.file_bytes // 20))
                units = cq.read_units(start, cq.max_offset - start)
                good = commitlog.matching_units(units["commitlog_offset"], units["size"], cq.queue_id, start)
                if good < len(units):
                    cq.truncate_at(start + good)

    def close(self) -> None:
        for cq in self.all():
            cq.close()
        self._queues.clear()
        self.pool.close_all()


__all__ = ["CONSUME_QUEUE_DIR", "ConsumeQueues"]
