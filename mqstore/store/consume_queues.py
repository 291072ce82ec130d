"""All consume queues of a store, as one dispatch sink (RocketMQ ConsumeQueueStore).

Queues are opened lazily on first use and kept open; ``load`` opens the ones on
disk (``consumequeue/<topic>/<queueId>``; names that are not a valid topic or
queue id are skipped with a warning, as RocketMQ ignores them).

Who calls what: the dispatcher thread calls ``dispatch`` and ``flush``; recovery
calls ``load``, ``recover`` and ``truncate_dirty`` before the dispatcher starts;
readers call ``get`` from any thread.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import structlog

from mqstore.errors import InvalidTopicError
from mqstore.formats.consume_queue import UNIT_SIZE, encode_units
from mqstore.formats.message import advances_queue_offset
from mqstore.formats.names import check_topic
from mqstore.store.commitlog import CommitLog
from mqstore.store.consume_queue import ConsumeQueue
from mqstore.store.dispatch import DispatchBatch
from mqstore.store.file_pool import FilePool
from mqstore.store.mapped_file import sync_file_system

log = structlog.get_logger(__name__)

CONSUME_QUEUE_DIR = "consumequeue"
_WRITE_OUT_BYTES = 64 * 1024  # a queue with this much buffered is written out by the dispatcher
_FSYNC_EACH_UP_TO = 64  # more queues than this are flushed with one syncfs
_WRITE_OUT_SERIAL_UP_TO = 64  # more queues than this are written out by _WRITER_THREADS threads
_WRITER_THREADS = 4
_WRITE_OUT_PAGE = 4096  # the every-second write-behind skips queues with less buffered...
_BUFFER_BUDGET = 64 << 20  # ...unless all queues together buffer more than this


def _write_behind_all(queues: list[ConsumeQueue]) -> None:
    for cq in queues:
        cq.write_behind()


class ConsumeQueues:
    """The store's consume queues; a DispatchSink."""

    def __init__(self, store_dir: Path, *, file_bytes: int, max_open_files: int = 512) -> None:
        self._store_dir = store_dir
        self._file_bytes = file_bytes
        self.pool = FilePool(max_open_files)  # bounds descriptors over all queues
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._lock = threading.Lock()
        self._dirty: set[ConsumeQueue] = set()  # queues with units buffered since the last write_behind
        self._writers: ThreadPoolExecutor | None = None
        self._loaded = False
        self.last_dispatched_timestamp = 0  # store time of the newest unit written

    def load(self) -> None:
        """Open every queue on disk, a few topics at a time on the writer threads (each
        queue is a directory listing, a stat and a read or three: on a cold disk these
        wait on metadata reads, which overlap across threads)."""
        self._loaded = True  # from now on a queue not in self._queues has no directory
        root = self._store_dir / CONSUME_QUEUE_DIR
        if not root.is_dir():
            return
        topics = []
        for name in sorted(os.listdir(root)):
            try:
                check_topic(name)
            except InvalidTopicError:
                log.warning("consume_queue_dir_ignored", path=str(root / name))
                continue
            topics.append(name)
        self._on_writers(self._load_topics, topics)

    def _load_topics(self, topics: list[str]) -> None:
        root = self._store_dir / CONSUME_QUEUE_DIR
        for topic in topics:
            try:
                names = sorted(os.listdir(root / topic))
            except NotADirectoryError:
                log.warning("consume_queue_dir_ignored", path=str(root / topic))
                continue
            for name in names:
                if not (name.isdigit() and int(name) <= 65535):
                    log.warning("consume_queue_dir_ignored", path=str(root / topic / name))
                    continue
                self.get(topic, int(name))

    def _on_writers(self, work, items: list) -> None:
        """Run ``work`` over ``items`` split across the writer threads (in this thread
        when there are few); the first error is raised here."""
        if len(items) <= _WRITE_OUT_SERIAL_UP_TO:
            work(items)
            return
        if self._writers is None:
            self._writers = ThreadPoolExecutor(_WRITER_THREADS, thread_name_prefix="mqstore-cq-write")
        for done in [self._writers.submit(work, items[i::_WRITER_THREADS]) for i in range(_WRITER_THREADS)]:
            done.result()

    def get(self, topic: str, queue_id: int, *, new: bool = False) -> ConsumeQueue:
        """The queue of (topic, queue_id), opened (and created) on first use. ``new``:
        the caller knows it is not on disk (the dispatcher, for a queue ``load`` did
        not find), so opening it touches no file."""
        key = (topic, queue_id)
        cq = self._queues.get(key)
        if cq is None:
            with self._lock:
                cq = self._queues.get(key)
                if cq is None:
                    # Sparse files, as RocketMQ's setLength makes them: 200,000 queues x 6 MB
                    # pre-allocated would be 1.2 TB of blocks for nothing.
                    cq = ConsumeQueue(self._store_dir, topic, queue_id, file_bytes=self._file_bytes, pool=self.pool,
                                      preallocate=False, fresh=new)  # fmt: skip
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
        """Buffer the units of NOT_TYPE and COMMIT records in their queues.

        Everything per unit is done for the whole batch with numpy (grouping by queue,
        the in-order checks, encoding); per queue touched there is a dict lookup and a
        bytes append (ConsumeQueue.append_run). Units are written out by the flusher
        (``flush``), when a queue has 64 KiB buffered, or before any read of it."""
        take = advances_queue_offset(batch.sysflags)
        idx = np.flatnonzero(take) if not take.all() else np.arange(len(batch))
        if not len(idx):
            return
        codes, qids = batch.topic_codes[idx], batch.queue_ids[idx]
        order = np.lexsort((qids, codes))  # stable: commitlog order within a queue
        sel = idx[order]
        qo, phys, sizes, tags = (batch.queue_offsets[sel], batch.physical_offsets[sel], batch.sizes[sel],
                                 batch.tags_codes[sel])  # fmt: skip
        ends = phys + sizes
        key = codes[order].astype(np.int64) * 65536 + qids[order]
        starts = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
        stops = np.append(starts[1:], len(sel))
        # Inside a run every unit must follow the one before it (queue offset + 1, later
        # in the commitlog); a run that does not goes through put_units' full rules.
        follows = np.ones(len(sel), bool)
        follows[1:] = (qo[1:] == qo[:-1] + 1) & (ends[1:] > ends[:-1])
        follows[starts] = True
        in_order = np.logical_and.reduceat(follows, starts)
        sane = (qo.min() >= 0) & (phys.min() >= 0) & (sizes.min() > 0)
        data = memoryview(encode_units(phys, sizes, tags)) if sane else None
        topics, queues, touched = batch.topics, self._queues, []
        for lo, hi, code, qid, ok, first, first_end, last_end in zip(
            starts.tolist(), stops.tolist(), codes[order][starts].tolist(), qids[order][starts].tolist(),
            in_order.tolist(), qo[starts].tolist(), ends[starts].tolist(), ends[stops - 1].tolist(),
        ):  # fmt: skip
            topic = topics[code]
            cq = queues.get((topic, qid)) or self._new_queue(topic, qid)
            buffered = cq.append_run(first, hi - lo, first_end, last_end, data[lo * UNIT_SIZE : hi * UNIT_SIZE]) if (
                ok and data is not None) else -1  # fmt: skip
            if buffered < 0:
                cq.put_units(qo[lo:hi], phys[lo:hi], sizes[lo:hi], tags[lo:hi])
            else:
                if buffered >= _WRITE_OUT_BYTES:
                    cq.write_behind()
                touched.append(cq)
        with self._lock:  # the flusher swaps the set: never add to one it has taken
            self._dirty.update(touched)
        self.last_dispatched_timestamp = int(batch.store_timestamps[idx[-1]])

    def _new_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        """A queue the dispatcher meets first; ``load`` opened every one on disk, so unless
        its directory appeared since, opening it needs no file access."""
        new = self._loaded or not (self._store_dir / CONSUME_QUEUE_DIR / topic / str(queue_id)).exists()
        return self.get(topic, queue_id, new=new)

    def write_behind(self, *, everything: bool = True) -> int:
        """Write out buffered units; returns how many queues wrote. The flusher's
        every-second step (``everything=False``) writes only what is worth a write
        now: new queues (their directories and files are made off the dispatch
        path), queues with a page or more buffered, and everything once the buffers
        pass _BUFFER_BUDGET. The rest waits for the thorough flush (every 60 s) or a
        read: with 200,000 queues one write per queue per second would never end.

        Many queues are written by a few threads at once: creating a queue's directory
        and file is two or three metadata operations that wait on the disk (0.1-1 ms
        each on a busy VM disk), and waits overlap where Python work cannot."""
        with self._lock:
            dirty, self._dirty = self._dirty, set()
        if not everything and sum(cq.buffered_bytes for cq in dirty) < _BUFFER_BUDGET:
            now = [cq for cq in dirty if cq.buffered_bytes >= _WRITE_OUT_PAGE or not cq.has_files]
            with self._lock:
                self._dirty.update(dirty.difference(now))
        else:
            now = list(dirty)
        self._on_writers(_write_behind_all, now)
        return len(now)

    def flush(self, *, thorough: bool = True) -> None:
        """Write out buffered units (``write_behind``); with ``thorough`` (every 60 s,
        and on close) write out all of them and make every queue durable.

        The every-second step fsyncs nothing: what makes consume queues safe is the
        checkpoint, whose logics timestamp only a thorough flush advances, so a crash
        re-dispatches everything after it. An fsync per queue per second (RocketMQ
        flushes each queue with two pages dirty) costs a disk round trip per queue,
        and with thousands of queues would never end; one syncfs past a few queues
        makes all of them, and their new directories, durable at once."""
        self.write_behind(everything=thorough)
        if not thorough:
            return
        ready = [(cq, offset) for cq in self.all() if (offset := cq.prepare_flush()) is not None]
        if len(ready) <= _FSYNC_EACH_UP_TO:
            for cq, _ in ready:
                cq.flush()
            return
        sync_file_system(self._store_dir)
        for cq, offset in ready:
            cq.mark_flushed(offset)

    def max_physical_offset(self) -> int:
        """offset+size of the newest unit over all queues (-1 if there is none)."""
        return max((cq.max_physical_offset for cq in self.all()), default=-1)

    def recover(self, commitlog: CommitLog, *, verify_tail: bool) -> None:
        """Cut torn unit tails and every unit at or past the commitlog's valid end.
        With ``verify_tail`` (after an abnormal exit) the last file's units are also
        checked against their records (size, queue id, queue offset): garbage that
        happens to look like units (offset >= 0, size > 0) is cut too, and the
        dispatcher rebuilds what follows. Queues are recovered on the writer threads."""
        self._on_writers(lambda queues: self._recover_queues(queues, commitlog, verify_tail), self.all())

    @staticmethod
    def _recover_queues(queues: list[ConsumeQueue], commitlog: CommitLog, verify_tail: bool) -> None:
        for cq in queues:
            cq.recover(zero_tail=verify_tail)
            cq.truncate_dirty(commitlog.wrote)
            cq.correct_min_offset(commitlog.min_offset)
            if verify_tail and cq.max_offset > cq.min_offset:
                per_file = cq.file_bytes // UNIT_SIZE  # the last file's units (a full one when it just filled)
                start = max(cq.min_offset, cq.max_offset - (cq.max_offset % per_file or per_file))
                units = cq.read_units(start, cq.max_offset - start)
                good = commitlog.matching_units(units["commitlog_offset"], units["size"], cq.queue_id, start)
                if good < len(units):
                    cq.truncate_at(start + good)

    def close(self) -> None:
        if self._writers is not None:
            self._writers.shutdown()
            self._writers = None
        for cq in self.all():
            cq.close()
        self._queues.clear()
        self.pool.close_all()


__all__ = ["CONSUME_QUEUE_DIR", "ConsumeQueues"]
