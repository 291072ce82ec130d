"""All consume queues of a store, as one dispatch sink (RocketMQ ConsumeQueueStore).

Queues are opened lazily on first use and kept open; ``load`` opens the ones on
disk (``consumequeue/<topic>/<queueId>``; names that are not a valid topic or
queue id are skipped with a warning, as RocketMQ ignores them).

Damage the store repairs on open (``load(repair=True)`` and ``recover``): a queue
whose files cannot be opened is discarded, one whose units disagree with the
commitlog is cut at the first bad unit, one with fewer units than the commitlog has
records for it is noted; ``rebuild_from`` then says from which commitlog offset the
store must re-dispatch so that the dispatcher rebuilds what went (units it already
holds are skipped, so re-dispatching more is harmless).

Units are written behind: ``dispatch`` only buffers them per queue (a new queue
touches no file); ``write_behind`` (every second, on a few writer threads) writes new
queues and those with a page buffered, ``flush(thorough=True)`` (every 60 s, on
close) writes everything and makes it durable with one syncfs past 64 queues; any
read of a queue writes its units first (or serves them from memory if the disk is
full). A crash loses only buffered units, which the store dispatches again from the
last thorough flush.

Who calls what: the dispatcher thread calls ``dispatch``; the store's flusher calls
``flush`` (and through it ``write_behind``); recovery calls ``load`` and ``recover``
before the dispatcher starts; readers call ``get``/``find`` from any thread.
"""

from __future__ import annotations

import os
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import structlog

from mqstore.errors import CorruptFileError, InvalidTopicError
from mqstore.formats.consume_queue import UNIT_DTYPE, UNIT_SIZE, encode_units, is_pre_blank
from mqstore.formats.message import advances_queue_offset
from mqstore.formats.names import check_topic
from mqstore.store.commitlog import CommitLog
from mqstore.store.consume_queue import ConsumeQueue
from mqstore.store.dispatch import DispatchBatch
from mqstore.store.file_pool import FilePool
from mqstore.store.mapped_file import fsync_dir, sync_file_system
from mqstore.store.schedule import SCHEDULE_TOPIC

log = structlog.get_logger(__name__)

CONSUME_QUEUE_DIR = "consumequeue"
_WRITE_OUT_BYTES = 64 * 1024  # a queue with this much buffered is written out by the dispatcher
_FSYNC_EACH_UP_TO = 64  # more queues than this are flushed with one syncfs
_WRITE_OUT_SERIAL_UP_TO = 64  # more queues than this are written out by _WRITER_THREADS threads
_WRITER_THREADS = 4
_WRITE_OUT_PAGE = 4096  # the every-second write-behind skips queues with less buffered...
_BUFFER_BUDGET = 64 << 20  # ...unless all queues together buffer more than this
_CHECK_BATCH_UNITS = 1 << 20  # recovery checks the queues' tails against the commitlog this many units at a time


def _write_behind_all(queues: list[ConsumeQueue]) -> None:
    for cq in queues:
        cq.write_behind()


class ConsumeQueues:
    """The store's consume queues; a DispatchSink."""

    def __init__(
        self, store_dir: Path, *, file_bytes: int, max_open_files: int = 512, read_only_above: int | None = None
    ) -> None:
        """``read_only_above``: a query's view (store/read_view.py) of a commitlog whose
        min offset is this; queues open on first use (``find``), opening one changes no
        file, and its min offset is corrected to the commitlog's in memory only."""
        self._store_dir = store_dir
        self._read_only_above = read_only_above
        self._file_bytes = file_bytes
        self.pool = FilePool(max_open_files)  # bounds descriptors over all queues
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._lock = threading.Lock()
        self._dirty: set[ConsumeQueue] = set()  # queues with units buffered since the last write_behind
        self._writers: ThreadPoolExecutor | None = None
        self._loaded = False
        self._repair = False
        self.last_dispatched_timestamp = 0  # store time of the newest unit written
        # The commitlog offset from which records must be dispatched again to rebuild
        # what load/recover cut or discarded (-1: from the commitlog's min offset);
        # None: nothing to rebuild.
        self.rebuild_from: int | None = None

    def load(self, *, repair: bool = False) -> None:
        """Open every queue on disk, a few topics at a time on the writer threads (each
        queue is a directory listing, a stat and a read or three: on a cold disk these
        wait on metadata reads, which overlap across threads).

        ``repair`` (the store's open): a last file of the wrong size is resized
        (ConsumeQueue ``repair``); a queue whose files still cannot be opened (a gap, a
        misnamed or wrongly sized earlier file) is deleted with a warning and rebuilt
        from the commitlog (``rebuild_from``). Without it such a queue raises
        CorruptFileError."""
        self._repair = repair
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
                if not self._repair:
                    self.get(topic, int(name))
                    continue
                try:
                    self.get(topic, int(name), repair=True)
                except CorruptFileError as e:
                    log.warning(
                        "consume_queue_discarded",
                        topic=topic,
                        queue_id=int(name),
                        reason=str(e),
                        action="deleted; rebuilt from the commitlog",
                    )
                    shutil.rmtree(root / topic / name)
                    fsync_dir(root / topic)
                    self._rebuild_from(-1)

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

    def _rebuild_from(self, offset: int) -> None:
        with self._lock:
            self.rebuild_from = offset if self.rebuild_from is None else min(self.rebuild_from, offset)

    def get(self, topic: str, queue_id: int, *, new: bool = False, repair: bool = False) -> ConsumeQueue:
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
                    cq = ConsumeQueue(
                        self._store_dir,
                        topic,
                        queue_id,
                        file_bytes=self._file_bytes,
                        pool=self.pool,
                        preallocate=False,
                        fresh=new,
                        repair=repair,
                        read_only=self._read_only_above is not None,
                    )
                    if self._read_only_above is not None:
                        cq.correct_min_offset(self._read_only_above)
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

    def dispatch(self, batch: DispatchBatch, from_offset: int = 0, to_offset: int = 0) -> None:
        """Buffer the units of NOT_TYPE and COMMIT records in their queues (a
        DispatchSink: the range is not needed here).

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
        qo, phys, sizes, tags = (
            batch.queue_offsets[sel],
            batch.physical_offsets[sel],
            batch.sizes[sel],
            batch.tags_codes[sel],
        )
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
            starts.tolist(),
            stops.tolist(),
            codes[order][starts].tolist(),
            qids[order][starts].tolist(),
            in_order.tolist(),
            qo[starts].tolist(),
            ends[starts].tolist(),
            ends[stops - 1].tolist(),
        ):
            topic = topics[code]
            cq = queues.get((topic, qid)) or self._new_queue(topic, qid)
            buffered = (
                cq.append_run(first, hi - lo, first_end, last_end, data[lo * UNIT_SIZE : hi * UNIT_SIZE])
                if (ok and data is not None)
                else -1
            )
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
        queues = self.all()
        if len(queues) <= _FSYNC_EACH_UP_TO:
            for cq in queues:
                cq.flush()
            return
        ready = [(cq, offset) for cq in queues if (offset := cq.prepare_flush()) is not None]
        sync_file_system(self._store_dir)
        for cq, offset in ready:
            cq.mark_flushed(offset)

    def max_physical_offset(self) -> int:
        """offset+size of the newest unit over all queues (-1 if there is none)."""
        return max((cq.max_physical_offset for cq in self.all()), default=-1)

    def recover(self, commitlog: CommitLog, *, verify_tail: bool, check_from: int = 0, deep_from: int = 0) -> None:
        """Cut torn unit tails and every unit at or past the commitlog's valid end.
        Then the last file's units are checked against their records (size, topic,
        queue id, queue offset, tagsCode): with ``verify_tail`` (after an abnormal
        exit) all of them, else those pointing at or after ``check_from`` (the tail
        recovery just read: no extra reads), the others only for lying inside the
        commitlog; garbage that happens to look like units is cut too. A queue with
        fewer units than the commitlog's records of it (recovery's queue-offset table)
        or one cut here sets ``rebuild_from``, so the dispatcher rebuilds what
        follows. Queues are recovered on the writer threads, their tails checked
        together (one pass per segment for all queues). After a crash, records are
        read only for units pointing at or after ``deep_from`` (what a crash can have
        left half-written: the caller passes where consume queues stopped being
        durable); every unit must still lie inside the commitlog and point further
        than the one before it, which random garbage does not (a unit copied from
        elsewhere does not either). Reading a record head for each of millions of
        older units was most of the open."""
        if verify_tail:
            check_from = deep_from
        else:
            deep_from = check_from
        tails: list[tuple[ConsumeQueue, int, int, np.ndarray | None]] = []
        self._on_writers(lambda queues: self._recover_queues(queues, commitlog, verify_tail, tails), self.all())
        batch, units = [], 0
        for tail in sorted(tails, key=lambda t: (t[0].topic, t[0].queue_id)):
            batch.append(tail)
            units += tail[2] - tail[1]
            if units >= _CHECK_BATCH_UNITS:
                self._check_tails(commitlog, batch, check_from, deep_from)
                batch, units = [], 0
        self._check_tails(commitlog, batch, check_from, deep_from)
        expected = commitlog.recovery.queue_offsets
        for cq in self.all():
            if cq.max_offset < expected.get((cq.topic, cq.queue_id), 0):
                if not verify_tail:  # after a crash, units still buffered in memory are expected to be lost
                    log.warning(
                        "consume_queue_short",
                        topic=cq.topic,
                        queue_id=cq.queue_id,
                        max_offset=cq.max_offset,
                        records_up_to=expected[(cq.topic, cq.queue_id)],
                        action="rebuilt from the commitlog",
                    )
                self._rebuild_from(cq.max_physical_offset)
        if not verify_tail:  # after a clean exit every queue with records was written: a missing one is damage
            missing = sorted(k for k in expected if k not in self._queues)
            if missing:
                log.warning(
                    "consume_queue_missing",
                    queues=missing[:20],
                    count=len(missing),
                    action="rebuilt from the commitlog",
                )
                self._rebuild_from(-1)

    def _recover_queues(
        self,
        queues: list[ConsumeQueue],
        commitlog: CommitLog,
        verify_tail: bool,
        tails: list[tuple[ConsumeQueue, int, int, np.ndarray | None]],
    ) -> None:
        found = []
        for cq in queues:
            cq.recover(zero_tail=verify_tail)
            cq.truncate_dirty(commitlog.wrote_offset)
            cq.correct_min_offset(commitlog.min_offset)
            if cq.max_offset > cq.min_offset:
                per_file = cq.file_bytes // UNIT_SIZE  # the last file's units (a full one when it just filled)
                start, end = max(cq.min_offset, cq.max_offset - (cq.max_offset % per_file or per_file)), cq.max_offset
                # Small tails are read here, on the writer threads; big ones when checked (bounded memory).
                found.append((cq, start, end, cq.read_units(start, end - start) if end - start <= 4096 else None))
        with self._lock:
            tails.extend(found)

    def _check_tails(
        self,
        commitlog: CommitLog,
        tails: list[tuple[ConsumeQueue, int, int, np.ndarray | None]],
        check_from: int,
        deep_from: int,
    ) -> None:
        """Check the units [start, end) of each (queue, start, end, units or None)
        against the commitlog at once; cut each queue at its first unit that does not
        match."""
        if not tails:
            return
        units = np.frombuffer(
            b"".join(
                [(u if u is not None else cq.read_units(start, end - start)).tobytes() for cq, start, end, u in tails]
            ),
            UNIT_DTYPE,
        )
        lens = np.array([end - start for _, start, end, _ in tails], np.int64)
        first = np.concatenate(([0], np.cumsum(lens)[:-1]))
        which = np.repeat(np.arange(len(tails)), lens)
        queue_offsets = (
            np.repeat(np.array([t[1] for t in tails], np.int64), lens) + np.arange(len(units)) - first[which]
        )
        names = sorted({t[0].topic for t in tails})
        code = {t: i for i, t in enumerate(names)}
        topic_index = np.repeat(np.array([code[t[0].topic] for t in tails], np.int64), lens)
        queue_ids = np.repeat(np.array([t[0].queue_id for t in tails], np.int64), lens)
        check_tags = np.repeat(np.array([t[0].topic != SCHEDULE_TOPIC for t in tails]), lens)  # there: a deliver time
        phys, sizes = units["commitlog_offset"].astype(np.int64), units["size"].astype(np.int64)
        blank = is_pre_blank(units)
        ok = blank | commitlog.units_match(
            phys,
            sizes,
            queue_ids,
            queue_offsets,
            topics=names,
            topic_index=topic_index,
            tags_codes=units["tags_code"].astype(np.int64),
            check_tags=check_tags,
            check_from=check_from,
            deep_from=deep_from,
        )
        real = np.flatnonzero(~blank)
        if len(real) > 1:  # inside one queue, real units point ever further into the commitlog
            same = which[real[1:]] == which[real[:-1]]
            ok[real[1:]] &= ~same | (phys[real[1:]] > phys[real[:-1]])
        bad = np.flatnonzero(~ok)
        if not bad.size:
            return
        queues, at = np.unique(which[bad], return_index=True)
        for q, b in zip(queues.tolist(), bad[at].tolist()):
            cq, start = tails[q][0], tails[q][1]
            cut = start + b - int(first[q])
            cq.truncate_at(cut)
            log.warning(
                "consume_queue_units_mismatch",
                topic=cq.topic,
                queue_id=cq.queue_id,
                at=cut,
                action="cut there; rebuilt from the commitlog",
            )
            self._rebuild_from(cq.max_physical_offset)

    def close(self) -> None:
        if self._writers is not None:
            self._writers.shutdown()
            self._writers = None
        for cq in self.all():
            cq.close()
        self._queues.clear()
        self.pool.close_all()


__all__ = ["CONSUME_QUEUE_DIR", "ConsumeQueues"]
