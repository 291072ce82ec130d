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

Units are written behind: ``dispatch`` only journals them (grouped by queue, the
queues' state in arrays by dense queue id; a new queue touches no file, and neither
it nor a queue the summary lists gets an object until used: ``get``, ``_objects_for``);
``write_behind`` (every second) writes the queues with a page journaled, all of them
once the journal passes its budget;
``flush(thorough=True)`` (every 60 s, on close) writes everything and makes it durable
with one syncfs past 64 queues; any read of a queue writes its units first (or serves
them from memory if the disk is full). A write-out of more than _DIRECT_FROM queues
writes the runs that continue their queues' last files straight into them, in
compiled loops without the GIL (``_write_direct``: at 50,000 topics a queue gets a
few units per write-out, and giving each queue its run and writing it through the
descriptor pool from Python cost 20-30 us a queue); only the others go through their
queue's buffer. A crash loses only journaled units, which the
store dispatches again from the last thorough flush. New queues' directories and
first files are made by one creator thread (``_make_loop``, many at a time in
compiled code without the GIL: ``_make_many``; ``_make_fresh`` by name for new
queues without an object, which take the file when made) as the dispatcher meets
them, or at topic creation (``make_ahead``).

A summary of every queue's ends (queue_ends.py, ``config/queueEnds.bin``) is
written at each thorough flush once the queues are durable (``flush(progress=...)``).
At the next open the builder may hand it to ``load``. After a clean close its
queues are not read: each is taken as listed once a stat of its files finds them
whole and not changed since the summary (older mtime), and opened on first use;
past _CHECK_AT_OPEN_UP_TO queues that stat too waits for the queue's first use
(``get``), so the open costs nothing per queue. Until then a listed queue is a row
in arrays (known_queues.py), not a Python object.
After a crash it spares the directory listing and stats of each queue, whose last
file is still read and checked in ``recover``; past _CHECK_AT_OPEN_UP_TO queues not
even that: the rows are kept as listed (a stat per topic directory), the re-dispatch
writes over what the write-behind left past each, and ``recover`` reads only queues
holding data where the re-dispatch does not write (queue_tails.py; no probe at all
after a process's death in the same boot: ``same_boot``). Queues it does not list, or whose
files do not fit their row, are read one by one, each once (a listing, a stat and
one read serving both its first and last units and recovery's checks).

Who calls what: the dispatcher thread calls ``dispatch``; the store's flusher calls
``flush`` (and through it ``write_behind``); the creator thread ``make_files`` of new
queues; topic creation may call ``make_ahead``; recovery calls ``load`` and ``recover``
before the dispatcher starts; readers call ``get``/``find`` from any thread.
"""

from __future__ import annotations

import os
import resource
import shutil
import stat
import threading
import time
from collections import deque
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import structlog

from mqstore.errors import CorruptFileError, InvalidTopicError, StoreClosedError, StoreNotWritableError
from mqstore.formats.consume_queue import UNIT_DTYPE, UNIT_SIZE, encode_units, is_pre_blank
from mqstore.formats.message import advances_queue_offset
from mqstore.formats.names import check_topic
from mqstore.kernels import _files
from mqstore.store import faults, queue_ends, queue_tails
from mqstore.store.commitlog import CommitLog
from mqstore.store.consume_queue import ConsumeQueue
from mqstore.store.dispatch import DispatchBatch
from mqstore.store.file_pool import FilePool
from mqstore.store.known_queues import KnownQueues, KnownRow
from mqstore.store.mapped_file import fsync_dir, sync_file_system
from mqstore.store.queue_ends import QueueEnds
from mqstore.store.schedule import SCHEDULE_TOPIC

log = structlog.get_logger(__name__)

CONSUME_QUEUE_DIR = "consumequeue"
_FSYNC_EACH_UP_TO = 64  # more queues than this are flushed with one syncfs
_WRITE_OUT_SERIAL_UP_TO = 64  # more queues than this are written out by _WRITER_THREADS threads
_WRITER_THREADS = 4
_WRITE_OUT_PAGE = 4096  # the every-second write-behind skips queues with less buffered...
_BUFFER_BUDGET = 96 << 20  # ...unless the journal holds more than this (then the dispatcher gives it all out)
_PAGE_UNITS = -(-_WRITE_OUT_PAGE // UNIT_SIZE)  # a page of units, at least
_RAW_UNIT = np.dtype(f"V{UNIT_SIZE}")  # an encoded unit, moved as bytes (numpy keeps them as they are)
_RUN_BYTES = 3 * 4 + 3 * 8 + 1  # what the journal keeps per run besides its units (``_Journal``)
_MAKE_AT_ONCE = 512  # the creator makes this many queues' files per compiled call (``_make_many``)
_DIRECT_FROM = 64  # a write-out of more queues than this writes their runs into their files at once (``_write_direct``)
_DIRECT_SLICE = 1024  # ...this many queues per compiled call (their locks are let go after each)
_CHECK_AT_OPEN_UP_TO = 4096  # after a clean close, more queues listed than this are checked at first use
# Threads of the open's per-queue work once it waits on the disk: a cold read or stat
# waits 0.1-1 ms on the test VM's disk, and more of them in flight overlap more.
_OPEN_THREADS = 16
_SPREAD_CHUNK = 64  # the open times its per-queue work this many items at a time (``_spread``)
_RUSAGE_THREAD = getattr(resource, "RUSAGE_THREAD", None)
_CHECK_BATCH_UNITS = 1 << 20  # recovery checks the queues' tails against the commitlog this many units at a time


@dataclass(eq=False)
class _Journal:
    """One chunk's units in the dispatch journal, encoded and grouped by dense queue id
    (commitlog order inside a group): group i is rows [run_lo[i], run_hi[i]) of queue
    run_ids[i] (ascending); ``run_qo`` is its first unit's queue offset, ``run_first_end``
    and ``run_last_end`` the commitlog ends of its first and last units (all a queue
    needs to take the group: 20 bytes a unit and 37 a group, as at 10,000 topics and
    more most groups are one unit); ``taken`` marks groups already given to their
    queue."""

    units: np.ndarray  # _RAW_UNIT: the encoded units
    run_ids: np.ndarray  # int32, as run_lo and run_hi
    run_lo: np.ndarray
    run_hi: np.ndarray
    run_qo: np.ndarray
    run_first_end: np.ndarray
    run_last_end: np.ndarray
    taken: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.taken = np.zeros(len(self.run_ids), bool)


@dataclass(eq=False)
class _DirectRuns:
    """Runs a write-out took from the journal for queues that ``reserve_run`` found
    ready (each queue's lock held until ``finish_run``): run i is bytes [lo[i], hi[i])
    of ``units``, to go to byte at[i] of file paths[i], and ends queue queues[i] at
    commitlog byte last_end[i]."""

    units: np.ndarray  # _RAW_UNIT
    queues: list[ConsumeQueue] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    at: list[int] = field(default_factory=list)
    lo: list[int] = field(default_factory=list)
    hi: list[int] = field(default_factory=list)
    last_end: list[int] = field(default_factory=list)
    status: np.ndarray = field(init=False)  # int32 per run: 0 written, else the errno (-1: not tried)
    done: np.ndarray = field(init=False)  # bool per run: its queue took it (its lock let go)
    failed: list[ConsumeQueue] = field(default_factory=list)  # queues that buffered their run instead

    def finish(self, a: int, b: int) -> None:
        """Runs [a, b) not finished yet go to their queues (``finish_run``): those
        written as written, the others as bytes to buffer. Each range is finished
        by one thread (a writer after its call, or the caller after every writer)."""
        todo = np.flatnonzero(~self.done[a:b]) + a
        if not len(todo):
            return
        self.done[todo] = True
        view = memoryview(self.units).cast("B")
        for i, status in zip(todo.tolist(), self.status[todo].tolist()):
            cq, lo, hi = self.queues[i], self.lo[i], self.hi[i]
            if status:
                cq.finish_run((hi - lo) // UNIT_SIZE, self.last_end[i], bytes(view[lo:hi]))
                self.failed.append(cq)
            else:
                cq.finish_run((hi - lo) // UNIT_SIZE, self.last_end[i])


def _blocking_waits() -> int | None:
    """How many times this thread has blocked (voluntary context switches); None
    where the platform does not count them per thread."""
    return None if _RUSAGE_THREAD is None else resource.getrusage(_RUSAGE_THREAD).ru_nvcsw


def _write_behind_all(queues: list[ConsumeQueue]) -> None:
    for cq in queues:
        cq.write_behind()


class ConsumeQueues:
    """The store's consume queues; a DispatchSink."""

    uses_queue_ends = True  # ``load`` takes the summary of queue ends (rocks_queues.py: False)

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
        # Queues the summary of queue ends lists and nothing has used yet: (first file,
        # files, min offset, max offset, max physical offset), made a ConsumeQueue by
        # ``get`` without any file access. Disjoint from _queues.
        self._known = KnownQueues()
        # After a clean close with more than _CHECK_AT_OPEN_UP_TO queues listed: the
        # summary's mtime, against which ``get`` checks a known queue's files at its
        # first use instead of the open checking all of them (``load``).
        self._check_since: int | None = None
        self._bounds: tuple[int, int] | None = None  # (commitlog end, min offset) recover cut against
        self.changed_since_summary = 0  # queues ``get`` found not as the summary listed them
        self._lock = threading.Lock()
        self._dirty: set[ConsumeQueue] = set()  # queues with units buffered since the last write_behind
        # The dispatch journal (``dispatch``) and the per-queue state it is checked
        # against, in arrays by dense queue id. Lock order: _jlock, then a queue's, then _lock.
        self._jlock = threading.RLock()
        self._journal: list[_Journal] = []
        self._journal_units = 0  # units in the journal not given to their queue yet
        self._journal_bytes = 0  # what the journal's chunks hold (taken groups too, until their chunk goes)
        self._topic_index: dict[str, int] = {}
        self._topic_names: list[str] = []
        self._topic_row_of_id = np.zeros(0, np.int64)  # by process-wide topic id: its _topic_names row (-1: none)
        self._keys = np.zeros(0, np.int64)  # (topic index << 16 | queue id), sorted
        self._key_ids = np.zeros(0, np.int64)  # the dense id of each key
        # None: no object yet (``_dense_of``): a queue the summary lists, or a new one the
        # dispatcher met (``_fresh``), made on first use (``get``, ``_objects_for``)
        self._by_id: list[ConsumeQueue | None] = []
        self._dense_of: dict[tuple[str, int], int] = {}  # dense ids of the queues without an object
        self._fresh = np.zeros(0, bool)  # by dense id: a new queue (nothing on disk but what the creator made)
        self._made_base = np.zeros(
            0, np.int64
        )  # by dense id, no object yet: start byte of the file the creator made (-1)
        self._fresh_unmade = 0  # new queues without an object (``count``)
        self._id_key = np.zeros(0, np.int64)  # the key of each dense id
        self._next = np.zeros(0, np.int64)  # queue offset the next unit must have (-1: any, a queue without units)
        self._max_end = np.zeros(0, np.int64)  # commitlog end of the queue's last unit (-1: none)
        self._jcount = np.zeros(0, np.int64)  # units in the journal
        self._jfirst = np.zeros(0, np.int64)  # number of the first journal chunk holding them
        self._jseq = 0  # number of the journal's first chunk (counted since the start)
        self._writers: ThreadPoolExecutor | None = None
        # Only ever the compiled write (``_write_direct``), never ``_writers``: a task there
        # may wait on a queue lock a reservation holds until its direct write is done.
        self._direct_writers: ThreadPoolExecutor | None = None
        # The creator (``_make_loop``): queues whose directory and first file are to be
        # made, as (queue or dense id of a new queue without an object, byte of its
        # first file or -1: where its first journaled unit goes).
        self._to_make: deque[tuple[ConsumeQueue | int, int]] = deque()
        self._make_cv = threading.Condition()
        self._maker: threading.Thread | None = None
        self._making = 0  # items the creator took and has not finished
        self._stopping = False
        self.made_ahead = 0  # queues whose files the creator made
        self._loaded = False
        self._repair = False
        self.last_dispatched_timestamp = 0  # store time of the newest unit written
        # The commitlog offset from which records must be dispatched again to rebuild
        # what load/recover cut or discarded (-1: from the commitlog's min offset);
        # None: nothing to rebuild.
        self.rebuild_from: int | None = None
        # The commitlog min offset every queue's min offset was corrected against
        # (recover, retention's passes: ``note_cleaned``); -1: not known.
        self.cleaned_min = -1
        self.summary_queues = 0  # how many queues ``load`` took from the summary of queue ends (not read)
        # After a crash with more than _CHECK_AT_OPEN_UP_TO queues listed: ``load`` kept
        # the rows without a stat per queue; ``recover`` probes past each (queue_tails.py).
        self._probe_rows = False
        # Set by the builder before ``recover``: the queues' last writer closed cleanly
        # or died while the machine stayed up (same boot), so its files hold every
        # byte it wrote, and no unit can point past the commitlog's recovered end but
        # by damage (``_probe_known`` then probes nothing).
        self.same_boot = False
        self.probed_dirty = 0  # queues ``recover`` read because data lay where the re-dispatch does not write

    def load(self, *, repair: bool = False, ends: QueueEnds | None = None, trusted: bool = False) -> None:
        """Open every queue on disk (each queue is a directory listing, a stat and one
        read; on a cold disk these wait on metadata reads, and the work moves to the
        writer threads, where the waits overlap: ``_spread``).

        ``ends``: the store's summary of queue ends, which the caller found usable
        (QueueBuilder): a queue it lists whose directory exists and whose files are
        there with the queue file size is not read here (see ``recover``); with
        ``trusted`` (after a clean close) its files must also be older than the
        summary (mtime), or it is read: a file changed since (damage, a tool) is
        not what the summary says. Its directory must be older too (no file made
        or removed since). Listed queues without a directory are gone.
        Queues on disk it does not list are read. A trusted summary of more than
        _CHECK_AT_OPEN_UP_TO queues is taken whole for the topics on disk, without
        a stat per queue (400,000 cold stats took two minutes on the test VM): each
        listed queue's files are checked at its first use instead (``get``,
        ``_checked_at_use``), and only topics it does not list are read here.

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
        known = self._known = KnownQueues(ends)
        since = ends.mtime_ns if ends is not None else None
        newest = since if trusted else None
        if trusted and ends is not None and len(ends) > _CHECK_AT_OPEN_UP_TO:
            # Each listed queue of a topic on disk is taken as listed; ``get`` checks its
            # files at first use (a stat per queue at the open: 400,000 queues on a cold
            # disk were 2 minutes of stats). Topics it does not list are read.
            self._check_since = since
            listed = set(known.topics)
            known.keep_topics(listed.intersection(topics))
            read = self._spread(
                lambda ts: self._load_topics(ts, None, None, None), [t for t in topics if t not in listed]
            )
        elif ends is not None and len(ends) > _CHECK_AT_OPEN_UP_TO:
            # After a crash: the rows are kept as listed for every queue directory there
            # (a stat per topic directory; a listing of those changed since), and
            # ``recover`` looks past each only where the re-dispatch will not write
            # (queue_tails.py): reading 400,000 last files was most of such an open.
            self._probe_rows = True
            read = self._spread(lambda ts: self._load_topics(ts, known, since, None, stat_queues=False), topics)
        else:
            read = self._spread(lambda ts: self._load_topics(ts, known if ends else None, since, newest), topics)
        self.summary_queues = len(known)
        if ends is not None:
            log.info(
                "consume_queues_loaded",
                from_summary=len(self._known),
                read=read,
                listed_but_gone=len(ends) - len(self._known),
            )

    def _load_topics(
        self,
        topics: list[str],
        listed: KnownQueues | None,
        since: int | None,
        newest: int | None,
        *,
        stat_queues: bool = True,
    ) -> int:
        """Open the queues of ``topics``; those ``listed`` by the summary whose files
        fit their row (``_row_fits``; without ``stat_queues``, every listed queue whose
        directory is there) are only noted (``_known``). A topic directory
        not changed since the summary was written (mtime before ``since``: no queue
        directory made or removed in it) is not listed: its queues are the summary's.
        (Before, not at: a file system stamps times in clock ticks of a few ms, and a
        change in the tick the summary was written in may have come after it.)
        Returns how many queues were read."""
        root = self._store_dir / CONSUME_QUEUE_DIR
        kept, blocks_of, read = [], [], 0
        for topic in topics:
            rows = (listed.topic_rows(topic) or None) if listed is not None else None
            qids = None
            if rows is not None and since is not None:
                try:
                    st = os.stat(f"{root}/{topic}")
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode) and st.st_mtime_ns < since:
                    qids = sorted(rows)
            if qids is None:
                try:
                    names = sorted(os.listdir(root / topic))
                except NotADirectoryError:
                    log.warning("consume_queue_dir_ignored", path=str(root / topic))
                    continue
                qids = []
                for name in names:
                    if name.isdigit() and int(name) <= 65535:
                        qids.append(int(name))
                    else:
                        log.warning("consume_queue_dir_ignored", path=str(root / topic / name))
                qids.sort()
            rows = rows or {}
            for qid in qids:
                i = rows.get(qid)
                if i is not None:
                    blocks = (
                        self._row_fits(f"{root}/{topic}/{qid}", listed.row(i), since, newest) if stat_queues else -1
                    )
                    if blocks >= 0 or not stat_queues:
                        kept.append(i)
                        blocks_of.append(blocks)
                        continue
                read += 1
                self._open_from_files(topic, qid)
        if kept:
            with self._lock:
                self._known.keep(np.array(kept, np.int64), np.array(blocks_of, np.int64))
        return read

    def _row_fits(self, directory: str, row: tuple[int, ...], since: int, newest: int | None) -> int:
        """A stat of a listed queue's directory and one of each of its files (one,
        mostly): the directory must not have changed since the summary was written
        (mtime before ``since``: no file made or removed since, such as a next file
        the queue began after it), each file must be there with the queue file size
        and, unless ``newest`` is None, not modified since either. Returns the last
        file's st_blocks (``_data_after`` reads them), -1 if the row does not fit:
        the queue is then read from its files."""
        try:
            if os.stat(directory).st_mtime_ns >= since:
                return -1
        except OSError:
            return -1
        first, files = row[0], row[1]
        blocks = -1
        for base in range(first, first + files * self._file_bytes, self._file_bytes):
            try:
                st = os.stat(f"{directory}/{base:020d}")
            except OSError:
                return -1
            if st.st_size != self._file_bytes or (newest is not None and st.st_mtime_ns >= newest):
                return -1
            blocks = st.st_blocks
        return blocks

    def _queue_object(self, topic: str, queue_id: int, **kwargs) -> ConsumeQueue:
        """A ConsumeQueue of this store (its pool and file size). Sparse files, as
        RocketMQ's setLength makes them: 200,000 queues x 6 MB pre-allocated would be
        1.2 TB of blocks for nothing."""
        return ConsumeQueue(
            self._store_dir, topic, queue_id, file_bytes=self._file_bytes, pool=self.pool, preallocate=False, **kwargs
        )

    def _open_from_files(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """Open a queue from its files (the open; the caller holds no lock, and no
        one else opens this queue meanwhile), outside the lock: many threads open
        queues at once and each waits on its reads. With ``repair``, a queue whose
        files cannot be opened is deleted and rebuilt from the commitlog (None)."""
        root = self._store_dir / CONSUME_QUEUE_DIR
        try:
            cq = self._queue_object(topic, queue_id, repair=self._repair)
        except CorruptFileError as e:
            if not self._repair:
                raise
            log.warning(
                "consume_queue_discarded",
                topic=topic,
                queue_id=queue_id,
                reason=str(e),
                action="deleted; rebuilt from the commitlog",
            )
            shutil.rmtree(root / topic / str(queue_id))
            fsync_dir(root / topic)
            self._rebuild_from(-1)
            return None
        with self._lock:
            self._queues[(topic, queue_id)] = cq
        return cq

    def _on_writers(self, work, items: list) -> None:
        """Run ``work`` over ``items`` split across the writer threads (in this thread
        when there are few); the first error is raised here."""
        if len(items) <= _WRITE_OUT_SERIAL_UP_TO:
            return work(items)
        if self._writers is None:
            self._writers = ThreadPoolExecutor(_WRITER_THREADS, thread_name_prefix="mqstore-cq-write")
        results = [
            done.result()
            for done in [self._writers.submit(work, items[i::_WRITER_THREADS]) for i in range(_WRITER_THREADS)]
        ]
        return sum(results) if all(isinstance(r, int) for r in results) else None

    def _spread(self, work, items: list) -> int:
        """The open's per-queue work (``work`` over ``items``, returning a count):
        in this thread, a chunk at a time, while the chunks compute; once a chunk
        waits on the disk (metadata and reads from a cold cache: at least one
        blocking wait per item, and wall time over twice its CPU time), the rest on
        the writer threads, whose waits overlap. With the files in the page cache a
        queue is a few microseconds of syscalls and far more of Python, and threads
        only contend for the GIL (4 threads opened 80,000 cached queues 1.6 times
        slower than one). Blocking waits are the thread's voluntary context
        switches: wall time alone would take a machine busy with other work for a
        slow disk."""
        total, i = 0, 0
        while i < len(items):
            part = items[i : i + _SPREAD_CHUNK]
            i += len(part)
            waits, wall, cpu = _blocking_waits(), time.perf_counter(), time.thread_time()
            total += work(part) or 0
            wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
            if waits is None:  # not counted here: wall time alone
                blocked = wall > 3 * cpu
            else:
                waits = _blocking_waits() - waits
                blocked = waits >= len(part) and wall > 2 * cpu
            if i < len(items) and blocked and wall > 0.005:
                log.info("consume_queues_open_spread", waits=waits, waiting=round(wall - cpu, 3), threads=_OPEN_THREADS)
                rest = items[i:]
                with ThreadPoolExecutor(_OPEN_THREADS, thread_name_prefix="mqstore-cq-open") as pool:
                    parts = [pool.submit(work, rest[k::_OPEN_THREADS]) for k in range(_OPEN_THREADS)]
                    return total + sum(done.result() or 0 for done in parts)
        return total

    def _rebuild_from(self, offset: int) -> None:
        with self._lock:
            self.rebuild_from = offset if self.rebuild_from is None else min(self.rebuild_from, offset)

    def get(self, topic: str, queue_id: int, *, new: bool = False, repair: bool = False) -> ConsumeQueue:
        """The queue of (topic, queue_id), opened (and created) on first use. ``new``:
        the caller knows it is not on disk (the dispatcher, for a queue ``load`` did
        not find), so opening it touches no file. A queue the summary of queue ends
        listed is made from its row, without file access either."""
        key = (topic, queue_id)
        cq = self._queues.get(key)
        if cq is None:
            with self._lock:
                cq = self._queues.get(key)
                if cq is None:
                    row = self._known.pop(key)
                    changed = row is not None and self._check_since is not None
                    if changed:
                        row = self._checked_at_use(topic, queue_id, row)
                        changed = row is None
                    d = self._dense_of.get(key)
                    fresh = d is not None and bool(self._fresh[d])  # a new queue the dispatcher met
                    cq = (
                        self._reopen_changed(topic, queue_id)
                        if changed
                        else self._queue_object(
                            topic,
                            queue_id,
                            fresh=(new or fresh) and row is None,
                            repair=repair,
                            read_only=self._read_only_above is not None,
                            known=row,
                        )
                    )
                    if self._read_only_above is not None:
                        cq.correct_min_offset(self._read_only_above)
                    if d is not None:  # the dispatcher journaled units of it before it had an object
                        del self._dense_of[key]
                        if fresh:
                            self._take_fresh(cq, d)
                        cq._journal, cq._dense = self, d
                        self._by_id[d] = cq
                    self._queues[key] = cq
        return cq

    def _take_fresh(self, cq: ConsumeQueue, dense: int) -> None:
        """A new queue's object, made now: it takes the file the creator made for it
        while it had none (``_make_fresh``). Caller holds the lock (the object is
        not shared yet, so taking its own lock here cannot wait)."""
        self._fresh_unmade -= 1
        base = int(self._made_base[dense])
        if base >= 0:
            cq.take_made(f"{cq._dir}/{base:020d}", base)

    def _checked_at_use(self, topic: str, queue_id: int, row: KnownRow) -> KnownRow | None:
        """After a clean close of a big store (``load``), the check the open spared a
        listed queue, made at its first use: its files must fit its row and be older
        than the summary (``_row_fits``). Returns the row with the last file's
        st_blocks, or None when the files changed since (damage, a tool that did not
        remove the summary): the queue is then read from them (``_reopen_changed``)."""
        directory = f"{self._store_dir}/{CONSUME_QUEUE_DIR}/{topic}/{queue_id}"
        blocks = self._row_fits(directory, row, self._check_since, self._check_since)
        if blocks >= 0:
            return (*row[:5], blocks)
        self.changed_since_summary += 1
        log.warning(
            "consume_queue_changed_since_summary",
            topic=topic,
            queue_id=queue_id,
            listed_max_offset=row[3],
            action="read from its files",
        )
        return None

    def _reopen_changed(self, topic: str, queue_id: int) -> ConsumeQueue:
        """A listed queue whose files changed after a clean close, opened from them and
        cut as the open's recovery cuts a queue it reads (torn tail, units past the
        commitlog's end, min offset). Units it lost against its row are not rebuilt
        here (the dispatcher is past them): logged, ``mqstore verify`` reports the
        queue and ``mqstore repair`` rebuilds it. Files that cannot be opened at all
        are deleted (the queue starts empty). Caller holds the lock."""
        try:
            cq = self._queue_object(topic, queue_id, repair=self._repair)
        except CorruptFileError as e:
            if not self._repair:
                raise
            log.error("consume_queue_discarded", topic=topic, queue_id=queue_id, reason=str(e), action="deleted")
            shutil.rmtree(self._store_dir / CONSUME_QUEUE_DIR / topic / str(queue_id), ignore_errors=True)
            return self._queue_object(topic, queue_id, fresh=True)
        cq.recover(zero_tail=False)
        if self._bounds is not None:
            cq.truncate_dirty(self._bounds[0])
            cq.correct_min_offset(self._bounds[1])
        cq.forget_scan()
        return cq

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The queue if it exists on disk or was written; never creates one."""
        cq = self._queues.get((topic, queue_id))
        if cq is None and (
            (topic, queue_id) in self._dense_of  # journaled units, no object yet
            or (topic, queue_id) in self._known
            or (self._store_dir / CONSUME_QUEUE_DIR / topic / str(queue_id)).is_dir()
        ):
            return self.get(topic, queue_id)
        return cq

    def keys(self) -> list[tuple[str, int]]:
        """(topic, queue id) of every queue open or on disk (once ``load`` ran: every
        queue it found, or made since)."""
        if self._loaded:
            with self._lock:
                return sorted(set(self._queues).union(self._known.keys(), self._dense_of))
        on_disk = set()
        root = self._store_dir / CONSUME_QUEUE_DIR
        if root.is_dir():
            for topic_dir in root.iterdir():
                for qdir in topic_dir.iterdir() if topic_dir.is_dir() else ():
                    if qdir.name.isdigit():
                        on_disk.add((topic_dir.name, int(qdir.name)))
        return sorted(on_disk | set(self._queues))

    def all(self) -> list[ConsumeQueue]:
        """Every open queue, each holding every unit dispatched so far (the queues
        listed by the summary of queue ends and not used yet are made now)."""
        self._move_all_in()
        with self._lock:
            known = self._known.keys()
        for key in known:
            self.get(*key)
        return list(self._queues.values())

    def count(self) -> int:
        """How many queues there are (``all`` without making them)."""
        with self._lock:
            return len(self._queues) + len(self._known) + self._fresh_unmade

    def ends(self) -> dict[tuple[str, int], int]:
        """The next queue offset (max offset) of every queue (step 3 of the open)."""
        self._move_all_in()
        with self._lock:
            known, live = self._known.max_offsets(), list(self._queues.items())
            out = dict(known)
        for key, cq in live:
            out[key] = cq.max_offset
        return out

    def note_cleaned(self, commitlog_min: int) -> None:
        """Every queue's min offset was corrected against ``commitlog_min`` (a
        retention pass over ``all()`` is done)."""
        self.cleaned_min = max(self.cleaned_min, commitlog_min)

    def dispatch(self, batch: DispatchBatch, from_offset: int = 0, to_offset: int = 0) -> None:
        """Journal the units of NOT_TYPE and COMMIT records (a DispatchSink: the range
        is not needed here).

        A chunk costs the same whatever the number of queues: each record's queue gets
        a dense id (a sorted-key lookup; a queue met for the first time is opened
        then, touching no file), the units are grouped by queue, and each group is
        checked against the queue's state kept in arrays by dense id (the next queue
        offset, the commitlog end of the last unit) and appended to one journal, all
        with numpy. The journal is given to the queues, grouped by queue, by the
        flusher (``write_behind``: queues with a page of units, counted in an array),
        past _BUFFER_BUDGET bytes (all of it), and for one queue before any use of it
        (ConsumeQueue._sync). A group that does not simply
        continue its queue goes through ``put_units``' full rules at once."""
        take = advances_queue_offset(batch.sysflags)
        idx = np.flatnonzero(take) if not take.all() else np.arange(len(batch))
        if not len(idx):
            return
        newest = int(idx[-1])
        direct: list[_DirectRuns] = []
        with self._jlock:
            dense = self._dense_ids(batch.topics, batch.topic_codes[idx], batch.queue_ids[idx], batch.topic_ids)
            # Units whose record ends at or before the end of their queue's last unit are
            # there already (a re-dispatch after a restart): put_units would skip each
            # of them, one queue at a time.
            built = (batch.physical_offsets[idx] + batch.sizes[idx]) <= self._max_end[dense]
            if built.any():
                keep = ~built
                idx, dense = idx[keep], dense[keep]
                if not len(idx):
                    self.last_dispatched_timestamp = int(batch.store_timestamps[newest])
                    return
            order = np.argsort(dense, kind="stable")  # stable: commitlog order within a queue
            sel, d = idx[order], dense[order]
            qo, phys, sizes, tags = (
                batch.queue_offsets[sel],
                batch.physical_offsets[sel],
                batch.sizes[sel],
                batch.tags_codes[sel],
            )
            ends = phys + sizes
            starts = np.flatnonzero(np.concatenate(([True], d[1:] != d[:-1])))
            stops = np.append(starts[1:], len(sel))
            # Inside a run every unit must follow the one before it (queue offset + 1, later
            # in the commitlog), and the run must continue its queue.
            follows = np.ones(len(sel), bool)
            follows[1:] = (qo[1:] == qo[:-1] + 1) & (ends[1:] > ends[:-1])
            follows[starts] = True
            run_d = d[starts]
            expected = self._next[run_d]
            ok = np.logical_and.reduceat(follows, starts)
            ok &= ((expected < 0) | (qo[starts] == expected)) & (ends[starts] > self._max_end[run_d])
            if not (qo.min() >= 0 and phys.min() >= 0 and sizes.min() > 0):
                ok[:] = False  # put_units says what is wrong
            counts = stops - starts
            good = np.flatnonzero(ok)
            if len(good):
                rows = np.repeat(ok, counts) if len(good) < len(ok) else slice(None)
                ids, last = run_d[good], stops[good] - 1
                self._next[ids] = qo[last] + 1
                self._max_end[ids] = ends[last]
                fresh = ids[self._jcount[ids] == 0]
                self._jfirst[fresh] = self._jseq + len(self._journal)  # where move_in starts looking
                self._jcount[ids] += counts[good]
                run_hi = np.cumsum(counts[good])
                units = np.frombuffer(encode_units(phys[rows], sizes[rows], tags[rows]), _RAW_UNIT)
                first = starts[good]
                self._journal.append(
                    _Journal(
                        units,
                        ids.astype(np.int32),
                        (run_hi - counts[good]).astype(np.int32),
                        run_hi.astype(np.int32),
                        qo[first],
                        ends[first],
                        ends[last],
                    )
                )
                self._journal_units += int(run_hi[-1])
                self._journal_bytes += units.nbytes + len(ids) * _RUN_BYTES
            for r in np.flatnonzero(~ok).tolist():  # rare: repeats, gaps, re-dispatch after a restart
                lo, hi, dd = int(starts[r]), int(stops[r]), int(run_d[r])
                cq = self._queue_at(dd)
                self._move_in_locked(cq)
                cq.put_units(qo[lo:hi], phys[lo:hi], sizes[lo:hi], tags[lo:hi])
                self._next[dd], self._max_end[dd] = cq.journal_state()
                with self._lock:
                    self._dirty.add(cq)
            if self._journal_bytes > _BUFFER_BUDGET:
                self._move_all_in_locked(direct)
        self._write_direct(direct)
        self.last_dispatched_timestamp = int(batch.store_timestamps[newest])

    def _dense_ids(
        self, topics: list[str], codes: np.ndarray, qids: np.ndarray, topic_ids: np.ndarray | None = None
    ) -> np.ndarray:
        """The dense id of each (topics[code], queue id); queues met for the first time
        get one (and are opened: ``_new_queue``, unless the summary of queue ends lists
        them). ``topic_ids``: the topics' process-wide ids (DispatchBatch.topic_ids),
        by which their rows here are one gather. Caller holds the journal lock."""
        if topic_ids is not None:
            tix = self._topic_rows_by_id(topics, topic_ids)
        else:
            tix = np.array(self._topic_rows(topics), np.int64)
        keys = (tix[codes] << 16) | qids.astype(np.int64)
        pos = np.minimum(np.searchsorted(self._keys, keys), max(len(self._keys) - 1, 0))
        hit = self._keys[pos] == keys if len(self._keys) else np.zeros(len(keys), bool)
        if not hit.all():
            new_keys = np.unique(keys[~hit])
            first = len(self._by_id)
            count = first + len(new_keys)
            if count > len(self._next):
                size = max(count, 2 * len(self._next), 64)
                self._next = np.concatenate([self._next, np.full(size - len(self._next), -1, np.int64)])
                self._max_end = np.concatenate([self._max_end, np.full(size - len(self._max_end), -1, np.int64)])
                self._jcount = np.concatenate([self._jcount, np.zeros(size - len(self._jcount), np.int64)])
                self._jfirst = np.concatenate([self._jfirst, np.zeros(size - len(self._jfirst), np.int64)])
                self._id_key = np.concatenate([self._id_key, np.zeros(size - len(self._id_key), np.int64)])
                self._fresh = np.concatenate([self._fresh, np.zeros(size - len(self._fresh), bool)])
                self._made_base = np.concatenate([self._made_base, np.full(size - len(self._made_base), -1, np.int64)])
            self._id_key[first:count] = new_keys
            names = self._topic_names
            pairs = [(names[k >> 16], k & 0xFFFF) for k in new_keys.tolist()]
            # A queue the summary of queue ends lists gets no object until it is used
            # (``_queue_at``, ``get``): its row says what its next unit must continue.
            # Nor does a new queue (once ``load`` ran, a queue without an object or a row
            # has nothing on disk): it continues nothing, and the creator makes its files
            # by dense id (``_make_fresh``). Making 40,000 objects was most of the
            # dispatcher's work in a pass over 10,000 new topics.
            opened, fresh = [], []
            lazy = self._loaded and self._read_only_above is None
            with self._lock:
                rows = self._known.find_many(pairs)
                for i, key in enumerate(pairs):
                    cq = self._queues.get(key)
                    if cq is None and (rows[i] >= 0 or lazy):
                        self._dense_of[key] = first + i
                        self._by_id.append(None)
                        if rows[i] < 0:
                            fresh.append(first + i)
                    else:
                        self._by_id.append(cq)
                        if cq is None:
                            opened.append(i)
                self._fresh[fresh] = True
                self._fresh_unmade += len(fresh)
            listed = np.flatnonzero(rows >= 0)
            if len(listed):
                self._next[first + listed] = self._known.column(rows[listed], "max_offset")
                self._max_end[first + listed] = self._known.column(rows[listed], "max_physical_offset")
            for i in opened:
                self._by_id[first + i] = self._queues.get(pairs[i]) or self._new_queue(*pairs[i])
            unmade: list[tuple[ConsumeQueue | int, int]] = [(d, -1) for d in fresh]
            for dd in range(first, count):
                cq = self._by_id[dd]
                if cq is None:
                    continue
                cq._journal, cq._dense = self, dd
                self._next[dd], self._max_end[dd] = cq.journal_state()
                if not cq.has_files:
                    unmade.append((cq, -1))
            self._hand_to_maker(unmade)
            all_keys = np.concatenate([self._keys, new_keys])
            all_ids = np.concatenate([self._key_ids, np.arange(first, count, dtype=np.int64)])
            o = np.argsort(all_keys)
            self._keys, self._key_ids = all_keys[o], all_ids[o]
            pos = np.searchsorted(self._keys, keys)
        return self._key_ids[pos]

    def _topic_rows(self, topics: list[str]) -> list[int]:
        """Each topic's number here (``_topic_names``), given to new ones."""
        index = self._topic_index
        found = list(map(index.get, topics))  # one C-level pass per chunk's distinct topics
        if None in found:
            for i, t in enumerate(topics):
                if found[i] is None:
                    found[i] = index[t] = len(self._topic_names)
                    self._topic_names.append(t)
        return found

    def _topic_rows_by_id(self, topics: list[str], ids: np.ndarray) -> np.ndarray:
        """``_topic_rows`` through an array by process-wide topic id: at 10,000 topics
        round-robin every chunk holds every topic, and a lookup by name per topic per
        chunk was a third of the dispatcher's time."""
        by_id = self._topic_row_of_id
        if len(ids) and ids.max() >= len(by_id):
            grown = max(int(ids.max()) + 1, 2 * len(by_id))
            by_id = self._topic_row_of_id = np.concatenate([by_id, np.full(grown - len(by_id), -1, np.int64)])
        rows = by_id[ids]
        miss = np.flatnonzero(rows < 0)
        if len(miss):
            rows[miss] = by_id[ids[miss]] = self._topic_rows([topics[i] for i in miss.tolist()])
        return rows

    def _objects_for(self, ids: np.ndarray) -> None:
        """Make at once the objects of the queues with these dense ids that have none
        yet: new ones (``_fresh``), and those the summary of queue ends listed
        (``get`` for each, less its per-queue lookups: after a crash the re-dispatch
        gives units to most of 400,000 such queues; not where ``get`` checks a
        queue's files at first use, ``_check_since``, or makes read-only queues).
        Caller holds the journal lock."""
        by_id = self._by_id
        if self._fresh_unmade:
            fresh = ids[self._fresh[ids]].tolist()
            names = self._topic_names
            with self._lock:
                for d in fresh:
                    if by_id[d] is not None:  # made meanwhile (``get``)
                        continue
                    k = int(self._id_key[d])
                    key = (names[k >> 16], k & 0xFFFF)
                    cq = self._queue_object(key[0], key[1], fresh=True)
                    self._take_fresh(cq, d)
                    cq._journal, cq._dense = self, d
                    by_id[d] = cq
                    del self._dense_of[key]
                    self._queues[key] = cq
        if self._check_since is not None or self._read_only_above is not None or not len(self._known):
            return
        missing = [d for d in ids.tolist() if by_id[d] is None]
        if not missing:
            return
        names = self._topic_names
        pairs = [(names[k >> 16], k & 0xFFFF) for k in self._id_key[missing].tolist()]
        with self._lock:
            rows = self._known.find_many(pairs)
            hit = np.flatnonzero(rows >= 0)
            made = self._known.take(rows[hit])
            same_to = (self._known.same_to[rows[hit]] * UNIT_SIZE).tolist()
            for i, row, same in zip(hit.tolist(), made, same_to):
                key, d = pairs[i], missing[i]
                cq = self._queue_object(key[0], key[1], known=row)
                cq._same_below = same
                cq._journal, cq._dense = self, d
                by_id[d] = cq
                self._dense_of.pop(key, None)
                self._queues[key] = cq

    def _queue_at(self, dense: int) -> ConsumeQueue:
        """The queue with this dense id, made now if it has no object yet (``get``
        binds it to its id). Caller holds the journal lock."""
        cq = self._by_id[dense]
        if cq is None:
            key = int(self._id_key[dense])
            cq = self.get(self._topic_names[key >> 16], key & 0xFFFF)
        return cq

    def journaled(self, dense: int) -> bool:
        """Whether the journal holds units of the queue with this dense id."""
        return dense >= 0 and bool(self._jcount[dense])

    def journaled_units(self, dense: int) -> int:
        """How many units of the queue with this dense id the journal holds."""
        return int(self._jcount[dense]) if dense >= 0 else 0

    def move_in(self, cq: ConsumeQueue) -> None:
        """Give ``cq`` its units from the journal (ConsumeQueue._sync)."""
        with self._jlock:
            self._move_in_locked(cq)

    def _move_in_locked(self, cq: ConsumeQueue) -> None:
        d = cq._dense
        if d < 0 or not self._jcount[d]:
            return
        parts = []
        for j in self._journal[max(int(self._jfirst[d]) - self._jseq, 0) :]:
            i = int(np.searchsorted(j.run_ids, d))
            if i < len(j.run_ids) and j.run_ids[i] == d and not j.taken[i]:
                j.taken[i] = True
                lo, hi = int(j.run_lo[i]), int(j.run_hi[i])
                parts.append((j.units[lo:hi], j.run_qo[i], j.run_first_end[i], j.run_last_end[i]))
        self._journal_units -= int(self._jcount[d])
        self._jcount[d] = 0
        self._drop_taken_chunks()
        if parts:
            units = np.concatenate([p[0] for p in parts])
            self._give(cq, units, int(parts[0][1]), int(parts[0][2]), int(parts[-1][3]))
            with self._lock:
                self._dirty.add(cq)

    def _drop_taken_chunks(self) -> None:
        """Let go of the journal's oldest chunks once every group in them was taken."""
        journal, k = self._journal, 0
        while k < len(journal) and journal[k].taken.all():
            self._journal_bytes -= journal[k].units.nbytes + len(journal[k].run_ids) * _RUN_BYTES
            k += 1
        if k:
            del journal[:k]
            self._jseq += k

    def _give(self, cq: ConsumeQueue, units: np.ndarray, first: int, first_end: int, last_end: int) -> None:
        """Encoded units that continue ``cq`` exactly (the journal checked), as a run."""
        if cq.append_run(first, len(units), first_end, last_end, memoryview(units).cast("B")) < 0:
            # the queue changed meanwhile: the full rules
            u = units.view(UNIT_DTYPE)
            cq.put_units(first + np.arange(len(u)), u["commitlog_offset"], u["size"], u["tags_code"])
            self._next[cq._dense], self._max_end[cq._dense] = cq.journal_state()

    def _move_all_in(self) -> None:
        direct: list[_DirectRuns] = []
        with self._jlock:
            self._move_all_in_locked(direct)
        self._write_direct(direct)

    def _move_all_in_locked(self, direct: list[_DirectRuns] | None = None) -> None:
        """Give every queue its units from the journal (``_move_ids_in_locked``); the
        journal is empty after."""
        journal, self._journal = self._journal, []
        self._journal_units = self._journal_bytes = 0
        self._jseq += len(journal)
        self._move_ids_in_locked(np.flatnonzero(self._jcount), journal, mark=False, direct=direct)

    def _move_ids_in_locked(
        self,
        ids: np.ndarray,
        journal: list[_Journal] | None = None,
        *,
        mark: bool = True,
        direct: list[_DirectRuns] | None = None,
    ) -> None:
        """Give the queues ``ids`` (ascending dense ids, each with units in the journal)
        their units, grouped by queue: each group is placed at its queue's place in one
        array (a counting sort: the journal's count per queue is known), then one
        ``append_run`` per queue (per-queue Python only for the queues given units,
        never per chunk). ``journal``: the chunks to look in (default: the journal's,
        from the oldest any of ``ids`` has units in); ``mark``: the groups taken are
        marked so (the chunks stay in the journal).

        ``direct`` (a caller that calls ``_write_direct`` with it once it has let go of
        the journal lock): past _DIRECT_FROM queues, those whose run simply continues
        their last file are not given their units but reserved (their locks held) to
        be written straight into their files, many at once without the GIL."""
        if not len(ids):
            return
        if journal is None:
            journal = self._journal[max(int(self._jfirst[ids].min()) - self._jseq, 0) :]
        wanted = None
        if mark:
            wanted = np.zeros(len(self._jcount), bool)
            wanted[ids] = True
        counts = self._jcount[ids]
        base = np.zeros(len(self._jcount), np.int64)
        base[ids[1:]] = np.cumsum(counts)[:-1]
        total = int(counts.sum())
        units = np.empty(total, _RAW_UNIT)
        first_qo = np.full(len(self._jcount), -1, np.int64)  # per queue: its first unit's queue offset,
        first_end = np.zeros(len(self._jcount), np.int64)  # that unit's commitlog end,
        last_end = np.zeros(len(self._jcount), np.int64)  # and the last unit's
        for j in journal:
            live = ~j.taken
            if wanted is not None:
                live &= wanted[j.run_ids]
                j.taken |= live
            if live.all():
                run_ids, lo, hi, rqo, rfe, rle = (
                    j.run_ids,
                    j.run_lo,
                    j.run_hi,
                    j.run_qo,
                    j.run_first_end,
                    j.run_last_end,
                )
            else:
                run_ids, lo, hi = j.run_ids[live], j.run_lo[live], j.run_hi[live]
                rqo, rfe, rle = j.run_qo[live], j.run_first_end[live], j.run_last_end[live]
            if not len(run_ids):
                continue
            lens = hi - lo
            before = np.repeat(np.concatenate(([0], np.cumsum(lens)[:-1])), lens)
            k = np.arange(int(lens.sum())) - before  # row number inside its group
            dest = base[run_ids]
            base[run_ids] += lens  # a queue's groups go one after the other, in journal order
            units[np.repeat(dest, lens) + k] = j.units[np.repeat(lo, lens) + k]
            new = first_qo[run_ids] < 0
            first_qo[run_ids[new]], first_end[run_ids[new]] = rqo[new], rfe[new]
            last_end[run_ids] = rle
        if mark:
            self._journal_units -= total
            self._drop_taken_chunks()
        stops = np.cumsum(counts)
        starts = stops - counts
        self._jcount[ids] = 0
        self._objects_for(ids)
        touched = []
        runs = None
        if direct is not None and len(ids) > _DIRECT_FROM:
            runs = _DirectRuns(units)
            direct.append(runs)
        for lo, hi, dd, fq, fe, le in zip(
            starts.tolist(),
            stops.tolist(),
            ids.tolist(),
            first_qo[ids].tolist(),
            first_end[ids].tolist(),
            last_end[ids].tolist(),
        ):
            cq = self._queue_at(dd)
            if runs is not None:
                spot = cq.reserve_run(fq, hi - lo, fe)
                if spot is not None:
                    runs.queues.append(cq)
                    runs.paths.append(spot[0])
                    runs.at.append(spot[1])
                    runs.lo.append(lo * UNIT_SIZE)
                    runs.hi.append(hi * UNIT_SIZE)
                    runs.last_end.append(le)
                    continue
            self._give(cq, units[lo:hi], fq, fe, le)
            touched.append(cq)
        with self._lock:  # the flusher swaps the set: never add to one it has taken
            self._dirty.update(touched)

    def _write_direct(self, direct: list[_DirectRuns]) -> None:
        """Write the runs ``_move_ids_in_locked`` reserved straight into their queues'
        last files: one compiled loop of open, pwrite and close per queue without the
        GIL (kernels/_files.pyx), on _WRITER_THREADS direct-writer threads past
        _DIRECT_FROM queues, _DIRECT_SLICE queues per call; after each call its
        queues take their runs and let go of their locks (``_DirectRuns.finish``). A
        run that could not be written (a full disk) is buffered in its queue instead,
        for the next write-out to try (and report) again. The caller holds no lock:
        the journal's is free for the dispatcher meanwhile, and a reader of one of
        these queues waits for its lock, then sees its units."""
        for runs in direct:
            n = len(runs.queues)
            if not n:
                continue
            runs.status = np.full(n, -1, np.int32)
            runs.done = np.zeros(n, bool)
            try:
                if n <= _DIRECT_FROM:
                    self._write_runs(runs, 0, n)
                else:
                    if self._direct_writers is None:
                        self._direct_writers = ThreadPoolExecutor(
                            _WRITER_THREADS, thread_name_prefix="mqstore-cq-direct"
                        )
                    parts = [
                        self._direct_writers.submit(
                            self._write_runs, runs, k * n // _WRITER_THREADS, (k + 1) * n // _WRITER_THREADS
                        )
                        for k in range(_WRITER_THREADS)
                    ]
                    wait(parts)
                    for part in parts:
                        part.result()
            finally:
                runs.finish(0, n)  # (after an error: the runs not written are buffered)
                if runs.failed:
                    status = runs.status
                    log.warning(
                        "consume_queue_runs_buffered",
                        queues=len(runs.failed),
                        error=os.strerror(int(status[status > 0][0])) if (status > 0).any() else "not written",
                        action="written out again at the next write-out",
                    )
                    with self._lock:
                        self._dirty.update(runs.failed)

    def _write_runs(self, runs: _DirectRuns, a: int, b: int) -> None:
        """Runs [a, b) of ``runs`` (``_write_direct``), _DIRECT_SLICE at a time."""
        at, lo, hi = (np.array(c[a:b], np.int64) for c in (runs.at, runs.lo, runs.hi))
        data = runs.units.view(np.uint8)
        with self.pool.transient():  # the descriptor the loop opens counts against the bound
            for s in range(a, b, _DIRECT_SLICE):
                e = min(s + _DIRECT_SLICE, b)
                try:
                    try:  # crash tests: a kill between slices; an errno fails the slice's runs as pwrite would
                        faults.hit("cq.write_runs", runs.paths[s])
                    except OSError as err:
                        runs.status[s:e] = err.errno
                        continue
                    _files.write_queue_runs(
                        runs.paths[s:e], at[s - a : e - a], data, lo[s - a : e - a], hi[s - a : e - a], runs.status[s:e]
                    )
                finally:
                    runs.finish(s, e)

    def _new_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        """A queue the dispatcher meets first; ``load`` opened every one on disk, so unless
        its directory appeared since, opening it needs no file access."""
        new = self._loaded or not (self._store_dir / CONSUME_QUEUE_DIR / topic / str(queue_id)).exists()
        return self.get(topic, queue_id, new=new)

    def write_behind(self, *, everything: bool = True) -> int:
        """Write out buffered units; returns how many queues wrote. The flusher's
        every-second step (``everything=False``) writes only what is worth a write
        now: queues with a page or more buffered (the dispatcher gives every queue
        its units once the journal passes _BUFFER_BUDGET; they are written then).
        The rest waits for the thorough flush (every 60 s) or a read: with 200,000
        queues one write per queue per second would never end.

        The every-second step finds those queues in an array by dense id (units
        journaled per queue): no Python per queue unless it writes, whatever the
        number of queues. New queues' files are made by the creator thread
        (``_make_loop``) as soon as the dispatcher meets them.

        Many queues are written by a few threads at once: creating a queue's directory
        and file is two or three metadata operations that wait on the disk (0.1-1 ms
        each on a busy VM disk), and waits overlap where Python work cannot."""
        if everything:
            self._move_all_in()
        else:
            direct: list[_DirectRuns] = []
            with self._jlock:
                self._move_ids_in_locked(np.flatnonzero(self._jcount >= _PAGE_UNITS), direct=direct)
            self._write_direct(direct)
        with self._lock:
            dirty, self._dirty = self._dirty, set()
        if not everything:  # the few queues a read or a repeat gave units to wait for their page too
            now = [cq for cq in dirty if cq.buffered_bytes >= _WRITE_OUT_PAGE or not cq.has_files]
            if len(now) < len(dirty):
                with self._lock:
                    self._dirty.update(dirty.difference(now))
        else:
            now = list(dirty)
        self._on_writers(_write_behind_all, now)
        return len(now)

    def flush(self, *, thorough: bool = True, progress: int | None = None) -> None:
        """Write out buffered units (``write_behind``); with ``thorough`` (every 60 s,
        and on close) write out all of them and make every queue durable.

        The every-second step fsyncs nothing: what makes consume queues safe is the
        checkpoint, whose logics timestamp only a thorough flush advances, so a crash
        re-dispatches everything after it. An fsync per queue per second (RocketMQ
        flushes each queue with two pages dirty) costs a disk round trip per queue,
        and with thousands of queues would never end; one syncfs past a few queues
        makes all of them, and their new directories, durable at once.

        ``progress`` (the builder's: every record below it had its units buffered
        before this flush began): once the queues are durable, the summary of queue
        ends (queue_ends.py) is written with each queue as it was written out here."""
        self.write_behind(everything=thorough)
        if not thorough:
            return
        self._move_all_in()
        with self._lock:
            queues, (known_topics, known_rows) = list(self._queues.values()), self._known.summary_rows()
        taken = [(cq, *cq.prepare_flush_row()) for cq in queues]
        if len(queues) <= _FSYNC_EACH_UP_TO:
            for cq in queues:
                cq.flush()
        else:
            sync_file_system(self._store_dir)
            for cq, offset, _ in taken:
                if offset is not None:
                    cq.mark_flushed(offset)
        if progress is not None:
            rows = [(cq.topic, cq.queue_id, *row) for cq, _, row in taken if row is not None]
            queue_ends.write(
                self._store_dir,
                queue_ends.build_with(
                    known_topics,
                    known_rows,
                    rows,
                    file_bytes=self._file_bytes,
                    progress_offset=progress,
                    cleaned_min=self.cleaned_min,
                ),
            )

    def max_physical_offset(self) -> int:
        """offset+size of the newest unit over all queues (-1 if there is none)."""
        self._move_all_in()
        with self._lock:
            known, live = self._known.max_physical_offset(), list(self._queues.values())
        return max(known, max((cq.max_physical_offset for cq in live), default=-1))

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
        older units was most of the open.

        Queues ``load`` took from the summary of queue ends: after a clean close they
        are taken as listed unless their last unit lies past the commitlog's end
        (then recovered as above); after a crash they are recovered as above from
        their listed files (no listing, no stat), and one whose last file turns out
        full is opened from its files (a later one may have been made since); past
        _CHECK_AT_OPEN_UP_TO queues they stay rows and only those ``_probe_known``
        finds holding data where the re-dispatch does not write are read (rows short
        of the commitlog's records are not rebuilt from their own end: the caller
        re-dispatches from ``redispatch_from``, which the summary is not older than).
        Zeroed tails are synced at the end, all at once."""
        if verify_tail:
            check_from = deep_from
        else:
            deep_from = check_from
        tails: list[tuple[ConsumeQueue, int, int, np.ndarray | None]] = []
        zeroed: list[ConsumeQueue] = []
        self._move_all_in()
        with self._lock:
            slow = list(self._queues.values())  # read from their files by load
            known = len(self._known)
            self._bounds = (commitlog.wrote_offset, commitlog.min_offset)
        if verify_tail and known and self._probe_rows:
            slow += self._probe_known(commitlog)
        elif verify_tail and known:
            with self._lock:
                keys = self._known.keys()
            listed = [self.get(*key) for key in keys]
            unfit: list[ConsumeQueue] = []
            self._spread(lambda qs: self._recover_queues(qs, commitlog, True, tails, zeroed, unfit), listed)
            for cq in unfit:  # the row does not fit the files: open the queue from them
                with self._lock:
                    del self._queues[(cq.topic, cq.queue_id)]
                cq.close()
                reopened = self._open_from_files(cq.topic, cq.queue_id)
                if reopened is not None:
                    slow.append(reopened)
            if unfit:
                log.warning("queue_ends_row_mismatch", queues=len(unfit), action="read from their files")
        elif known:
            with self._lock:
                past = self._known.past(commitlog.wrote_offset)
            slow += [self.get(*key) for key in past]
        self._spread(lambda queues: self._recover_queues(queues, commitlog, verify_tail, tails, zeroed), slow)
        if zeroed:  # cut tails, made durable at once
            if len(zeroed) <= _FSYNC_EACH_UP_TO:
                for cq in zeroed:
                    cq.sync_files()
            else:
                sync_file_system(self._store_dir)
        batch, units = [], 0
        for tail in sorted(tails, key=lambda t: (t[0].topic, t[0].queue_id)):
            batch.append(tail)
            units += tail[2] - tail[1]
            if units >= _CHECK_BATCH_UNITS:
                self._check_tails(commitlog, batch, check_from, deep_from)
                batch, units = [], 0
        self._check_tails(commitlog, batch, check_from, deep_from)
        expected = commitlog.recovery.queue_offsets
        ends = []  # (topic, queue id, max offset, max physical offset) of the queues with records recovered
        absent = []  # keys of ``expected`` with no queue
        with self._lock:
            keys = list(expected)
            rows = self._known.find_many(keys)  # at once: after a clean close it holds every queue
            max_offsets = self._known.column(rows, "max_offset")
            want = np.fromiter(expected.values(), np.int64, len(keys))
            # (After a crash, probed rows are short of the commitlog by design: the
            # re-dispatch, from no later than the summary's progress, writes the rest.)
            short = np.flatnonzero((rows >= 0) & (max_offsets < want) & (not self._probe_rows))
            phys = self._known.column(rows[short], "max_physical_offset")
            for i, max_phys in zip(short.tolist(), phys.tolist()):
                ends.append((*keys[i], int(max_offsets[i]), max_phys))
            for i in np.flatnonzero(rows < 0).tolist():
                cq = self._queues.get(keys[i])
                if cq is not None:
                    ends.append((*keys[i], cq.max_offset, cq.max_physical_offset))
                else:
                    absent.append(keys[i])
        for topic, qid, max_offset, max_phys in ends:
            if max_offset < expected.get((topic, qid), 0):
                if not verify_tail:  # after a crash, units still buffered in memory are expected to be lost
                    log.warning(
                        "consume_queue_short",
                        topic=topic,
                        queue_id=qid,
                        max_offset=max_offset,
                        records_up_to=expected[(topic, qid)],
                        action="rebuilt from the commitlog",
                    )
                self._rebuild_from(max_phys)
        if not verify_tail:  # after a clean exit every queue with records was written: a missing one is damage
            missing = sorted(absent)
            if missing:
                log.warning(
                    "consume_queue_missing",
                    queues=missing[:20],
                    count=len(missing),
                    action="rebuilt from the commitlog",
                )
                self._rebuild_from(-1)
        self.cleaned_min = commitlog.min_offset

    def _probe_known(self, commitlog: CommitLog) -> list[ConsumeQueue]:
        """After a crash (``load`` kept the summary's rows unread): each listed queue is
        probed where the re-dispatch stops writing it (queue_tails.py); the few whose
        files hold data there, do not fit their row, or whose last unit lies past the
        commitlog's end are opened from their files and returned, to be recovered as
        any queue read after a crash. The rest stay rows. In the boot the crash
        happened in (``same_boot``: a process died, the page cache kept what it
        wrote) no queue is probed: a unit is written only for a record the commitlog
        holds whole, which the recovery walk then finds."""
        with self._lock:
            live = self._known.live_rows()
            past = live[self._known.rows["max_physical_offset"][live] > commitlog.wrote_offset]
            stop_all = queue_tails.stop_offsets(self._known, live, commitlog.recovery.queue_offsets)
            self._known.same_to[live] = stop_all  # the files hold that already, or the probe says otherwise
            rows, stop = (live[:0], stop_all[:0]) if self.same_boot else (live, stop_all)
        root = f"{self._store_dir}/{CONSUME_QUEUE_DIR}"
        found: list[tuple[int, int]] = []

        def work(part: list[int]) -> int:
            idx = np.array(part, np.int64)
            got = queue_tails.probe_rows(root, self._known, rows[idx], stop[idx], self._file_bytes)
            with self._lock:
                found.extend(got)
            return len(part)

        self._spread(work, list(range(len(rows))))
        unfit = sum(1 for _, why in found if why == queue_tails.UNFIT)
        with self._lock:
            keys = self._known.drop(np.union1d(np.array([r for r, _ in found], np.int64), past))
        opened: list[ConsumeQueue] = []

        def open_all(part: list[tuple[str, int]]) -> int:
            got = [cq for cq in (self._open_from_files(*key) for key in part) if cq is not None]
            with self._lock:
                opened.extend(got)
            return len(got)

        self._spread(open_all, keys)
        self.probed_dirty = len(keys)
        log.info(
            "queue_ends_rows_probed",
            same_boot=self.same_boot,
            queues=len(rows),
            read=len(keys),
            dirty=len(found) - unfit,
            unfit=unfit,
            past_commitlog_end=len(past),
        )
        return opened

    def _recover_queues(
        self,
        queues: list[ConsumeQueue],
        commitlog: CommitLog,
        verify_tail: bool,
        tails: list[tuple[ConsumeQueue, int, int, np.ndarray | None]],
        zeroed: list[ConsumeQueue],
        unfit: list[ConsumeQueue] | None = None,
    ) -> None:
        """Recover each queue (see ``recover``). ``unfit``: the queues were made from
        the summary's rows after a crash; one whose last file turns out full (a later
        file may have been made since the summary) is put there instead, untouched
        but for a cut of torn bytes."""
        found, cut, misfits = [], [], []
        for cq in queues:
            if cq.recover(zero_tail=verify_tail, sync=False).zeroed:
                cut.append(cq)
            if unfit is not None and cq.max_offset * UNIT_SIZE == cq.file_end:
                misfits.append(cq)
                continue
            cq.truncate_dirty(commitlog.wrote_offset)
            cq.correct_min_offset(commitlog.min_offset)
            if cq.max_offset > cq.min_offset:
                per_file = cq.file_bytes // UNIT_SIZE  # the last file's units (a full one when it just filled)
                start, end = max(cq.min_offset, cq.max_offset - (cq.max_offset % per_file or per_file)), cq.max_offset
                # Small tails are read here (from what the open read), on the writer threads; big ones when checked.
                found.append((cq, start, end, cq.read_units(start, end - start) if end - start <= 4096 else None))
            cq.forget_scan()
        with self._lock:
            tails.extend(found)
            zeroed.extend(cut)
            if unfit is not None:
                unfit.extend(misfits)

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

    def make_ahead(self, topic: str, queue_ids: Iterable[int], *, first_offset: int = 0) -> int:
        """Have the directory and first file of each of ``topic``'s queues ``queue_ids``
        made now, in the background (topic creation, ``update-topic``),
        so that the first message to a new queue waits for no mkdir and its first
        write-out is a plain pwrite. ``first_offset``: the queue offset the queues'
        first units will have (0 for a new topic; a file made at the wrong place goes
        when the first unit comes). Queues with files are left alone. Returns how
        many queues were handed to the creator."""
        if self._read_only_above is not None:
            return 0
        items = []
        for qid in queue_ids:
            cq = self._queues.get((topic, qid)) or self._new_queue(topic, qid)
            if not cq.has_files:
                items.append((cq, -1 if cq._dense >= 0 else first_offset * UNIT_SIZE))
        self._hand_to_maker(items)
        return len(items)

    def _hand_to_maker(self, items: list[tuple[ConsumeQueue | int, int]]) -> None:
        if not items or self._read_only_above is not None:
            return
        with self._make_cv:
            if self._stopping:
                return
            self._to_make.extend(items)
            if self._maker is None:
                self._maker = threading.Thread(target=self._make_loop, name="mqstore-cq-create", daemon=True)
                self._maker.start()
            self._make_cv.notify()

    def wait_made(self, timeout: float | None = None) -> bool:
        """Wait until the creator has made every queue handed to it (tests, tools)."""
        with self._make_cv:
            return self._make_cv.wait_for(lambda: not self._to_make and not self._making, timeout)

    def _make_loop(self) -> None:
        """The creator: one thread, at a lower priority than appends and dispatch (a
        directory and a file are two metadata operations, 0.3-0.5 ms of kernel time
        each on this VM's disk), making queues' directories and first files in the
        order they were handed over, a batch at a time."""
        try:  # Linux: a thread's own nice value
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        except (AttributeError, OSError):
            pass
        while True:
            with self._make_cv:
                while not self._to_make and not self._stopping:
                    self._make_cv.wait()
                if self._stopping:
                    self._to_make.clear()  # the write-out makes what is left
                    self._making = 0
                    self._make_cv.notify_all()
                    return
                items, self._making = list(self._to_make), len(self._to_make)
                self._to_make.clear()
            made, error = 0, None
            # A new queue handed over by dense id may have got its object since (one got
            # after this sees its units moved in: ``_make_fresh`` asks the object then).
            items = [(self._by_id[q] or q, at) if type(q) is int else (q, at) for q, at in items]
            d = np.array([(q if type(q) is int else q._dense) if at < 0 else -1 for q, at in items], np.int64)
            first = np.zeros(len(items), np.int64)
            has = d >= 0
            with self._jlock:  # where each queue's first journaled unit goes (units moved in say it themselves)
                if has.any():
                    jc = self._jcount[d[has]]
                    first[has] = np.where(jc > 0, self._next[d[has]] - jc, 0)
            bases = [(at if at >= 0 else f * UNIT_SIZE) for (_, at), f in zip(items, first.tolist())]
            objects = [(q, b) for (q, _), b in zip(items, bases) if type(q) is not int]
            fresh = [(q, b) for (q, _), b in zip(items, bases) if type(q) is int]
            if faults.active():  # one by one, through the fault points (new queues' files: made at write-out)
                for cq, byte in objects:
                    if self._stopping:
                        break
                    try:
                        made += cq.make_files(byte - byte % cq.file_bytes)
                    except (OSError, StoreNotWritableError, StoreClosedError) as e:  # the write-out tries again
                        error = error or str(e)
            else:
                for part in (objects, fresh):
                    for i in range(0, len(part), _MAKE_AT_ONCE):
                        if self._stopping:
                            break
                        chunk = part[i : i + _MAKE_AT_ONCE]
                        make = self._make_many if part is objects else self._make_fresh
                        m, e = make([q for q, _ in chunk], [b for _, b in chunk])
                        made, error = made + m, error or e
            self.made_ahead += made
            with self._make_cv:
                self._making = 0
                self._make_cv.notify_all()
            log.debug("consume_queues_made", queues=made, of=len(items))
            if error is not None:
                log.warning("consume_queue_make_failed", error=error, action="made at write-out")

    def _make_many(self, queues: list[ConsumeQueue], bases: list[int]) -> tuple[int, str | None]:
        """Make the directories and first files of ``queues`` (each at its byte of
        ``bases``, rounded down to a file boundary) in one compiled loop without the
        GIL (kernels/_files.pyx: made one by one, each queue held the GIL for its
        path handling, the cold pass's largest user of it), then let each queue take
        its file (ConsumeQueue.take_made). Returns (queues made, the first error)."""
        todo = []
        for cq, byte in zip(queues, bases):
            plan = cq.files_to_make(byte - byte % cq.file_bytes)
            if plan is not None:
                todo.append((cq, *plan))
        if not todo:
            return 0, None
        status = np.empty(len(todo), np.int32)
        _files.make_queue_files([t[1] for t in todo], [t[2] for t in todo], todo[0][0].file_bytes, status)
        made, error = 0, None
        for (cq, _, path, base), code in zip(todo, status.tolist()):
            if code == 0:
                made += cq.take_made(path, base)
            elif error is None:
                error = f"{path}: {os.strerror(code) if code > 0 else 'a file of another size is there'}"
        return made, error

    def _make_fresh(self, ids: list[int], bases: list[int]) -> tuple[int, str | None]:
        """``_make_many`` for new queues without an object (dense ids): their files are
        made from their names, and the start byte of each is kept (``_made_base``)
        for the object to take when it is made (``_take_fresh``); a queue whose
        object was made meanwhile takes its file at once."""
        by_id = self._by_id  # those with an object by now: as objects (it may have files already)
        made, error = self._make_many(
            [by_id[d] for d in ids if by_id[d] is not None], [b for d, b in zip(ids, bases) if by_id[d] is not None]
        )
        bases = [b for d, b in zip(ids, bases) if by_id[d] is None]
        ids = [d for d in ids if by_id[d] is None]
        if not ids:
            return made, error
        names, size = self._topic_names, self._file_bytes
        root = f"{self._store_dir}/{CONSUME_QUEUE_DIR}"
        dirs, paths, starts = [], [], []
        for d, byte in zip(ids, bases):
            k = int(self._id_key[d])
            dirs.append(f"{root}/{names[k >> 16]}/{k & 0xFFFF}")
            starts.append(byte - byte % size)
            paths.append(f"{dirs[-1]}/{starts[-1]:020d}")
        status = np.empty(len(ids), np.int32)
        _files.make_queue_files(dirs, paths, size, status)
        late = []
        with self._lock:
            for d, path, base, code in zip(ids, paths, starts, status.tolist()):
                if code != 0:
                    if error is None:
                        error = f"{path}: {os.strerror(code) if code > 0 else 'a file of another size is there'}"
                    continue
                cq = self._by_id[d]
                if cq is None:
                    self._made_base[d] = base
                    made += 1
                else:
                    late.append((cq, path, base))
        for cq, path, base in late:
            made += cq.take_made(path, base)
        return made, error

    def close(self) -> None:
        with self._make_cv:
            self._stopping = True
            self._make_cv.notify_all()
        if self._maker is not None:
            self._maker.join()
            self._maker = None
        self._move_all_in()
        for pool in (self._writers, self._direct_writers):
            if pool is not None:
                pool.shutdown()
        self._writers = self._direct_writers = None
        for cq in list(self._queues.values()):
            cq.close()
        self._queues.clear()
        self._known.clear()
        self.pool.close_all()


__all__ = ["CONSUME_QUEUE_DIR", "ConsumeQueues"]
