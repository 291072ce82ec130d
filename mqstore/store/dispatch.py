"""The reput dispatcher core (RocketMQ DefaultMessageStore.ReputMessageService).

It tails the commitlog from its ``dispatched_offset``, decodes records in bulk
(``CommitLog.scan``) and hands each chunk to its sinks as one ``DispatchBatch``:
the columns of RocketMQ's DispatchRequest for many records. Sinks (consume queues,
index) decide what they take: consume queues skip prepared and rollback
transaction records, the index skips rollback ones.

A *trailing* sink (the index) never holds the others back: when it fails a chunk
(a full disk) it falls behind, the others are fed on, and each later round (at most
once a second while it fails) feeds it from its own ``progress_offset``, reading the
commitlog again, until it is in step (``behind`` says where it stands and why).

Who calls what: one thread (the dispatcher's) calls ``run_once``/``catch_up`` or
runs the loop with ``start``; ``dispatched_offset``, ``lag`` and ``behind`` may be
read from any thread.
"""

from __future__ import annotations

import mmap
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import numpy as np
import structlog

from mqstore.errors import StoreNotWritableError
from mqstore.formats.javahash import java_string_hash, java_string_hashes
from mqstore.formats.message import TRANSACTION_TYPE_MASK
from mqstore.formats.properties import locate_properties
from mqstore.kernels import _dispatch
from mqstore.store.commitlog import CommitLog, ScanChunk
from mqstore.store.schedule import SCHEDULE_TOPIC, deliver_times

log = structlog.get_logger(__name__)
if _dispatch.FORMAT != (TRANSACTION_TYPE_MASK, 0xC):  # ROLLBACK records are not indexed
    raise ImportError(
        f"mqstore.kernels._dispatch was built for another message format: rebuild it ({_dispatch.FORMAT})"
    )


@dataclass(frozen=True)
class DispatchBatch:
    """Records to dispatch, as columns (one entry per record, commitlog order)."""

    physical_offsets: np.ndarray
    sizes: np.ndarray
    topics: list[str]  # distinct topics; ``topic_codes`` index into it
    topic_codes: np.ndarray
    queue_ids: np.ndarray
    queue_offsets: np.ndarray
    sysflags: np.ndarray
    store_timestamps: np.ndarray
    tags_codes: np.ndarray  # ConsumeQueue tagsCode: Java hashCode of TAGS, 0 without
    buffer: bytes | mmap.mmap  # the KEYS and UNIQ_KEY values lie in it:
    keys_at: np.ndarray  # [keys_at, keys_end) per record, -1 without KEYS
    keys_end: np.ndarray
    uniq_at: np.ndarray
    uniq_end: np.ndarray
    # The process-wide id of each of ``topics`` (RecordFields.topic_ids; None when the
    # batch was made otherwise): sinks keep what they know per topic in arrays by it.
    topic_ids: np.ndarray | None = None
    # The index entries, when build_dispatch_batch made them in its pass (not copied by
    # dataclasses.replace: a batch of other rows makes its own).
    _entries: IndexEntries | None = field(default=None, init=False, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.physical_offsets)

    @classmethod
    def empty(cls) -> DispatchBatch:
        none = np.zeros(0, np.int64)
        return cls(none, none, [], none, none, none, none, none, none, b"", none, none, none, none)

    @property
    def keys(self) -> list[str | None]:
        """Raw KEYS values (space separated), decoded on demand."""
        return _texts(self.buffer, self.keys_at, self.keys_end)

    @property
    def unique_keys(self) -> list[str | None]:
        return _texts(self.buffer, self.uniq_at, self.uniq_end)

    def index_entries(self) -> IndexEntries:
        """The IndexFile entries of this batch, in RocketMQ's order (per record:
        ``topic#UNIQ_KEY``, then ``topic#k`` for each non-empty KEYS element), with
        key hashes computed on the bytes. Rollback records are not indexed.
        build_dispatch_batch makes them in its own pass (kept with the batch)."""
        return self._entries if self._entries is not None else _index_entries(self)


class IndexEntries(NamedTuple):
    """Keys to index: hash (IndexFile keyHash, >= 0), record offset, store time."""

    key_hashes: np.ndarray
    physical_offsets: np.ndarray
    store_timestamps: np.ndarray


def _texts(buf, starts: np.ndarray, ends: np.ndarray) -> list[str | None]:
    return [buf[a:b].decode("utf-8", "replace") if a >= 0 else None for a, b in zip(starts.tolist(), ends.tolist())]


def _index_entries(b: DispatchBatch) -> IndexEntries:
    """One compiled pass (mqstore/kernels/_dispatch.pyx, without the GIL) over the
    batch's KEYS and UNIQ_KEY ranges (build_dispatch_batch makes them in its own
    pass; this serves batches made otherwise). Reference model:
    tests/kernels/model_dispatch.py."""
    n = len(b)
    if n == 0:
        return IndexEntries(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
    prefixes = _prefix_hashes(b.topics, b.topic_ids)
    cols = [
        np.ascontiguousarray(c, np.int64)
        for c in (b.keys_at, b.keys_end, b.uniq_at, b.uniq_end, b.sysflags, b.topic_codes)
    ]
    scratch = _SCRATCH
    while True:
        out = scratch.entries(max(scratch.capacity, 4 * n))
        count = _dispatch.index_entries(b.buffer, *cols, prefixes, *out)
        if count >= 0:
            break
        scratch.entries(-1 - count)  # grow to the bound the kernel named and run it again
    return _entries_out(b.buffer, b.topics, cols[5], b.physical_offsets, b.store_timestamps, out, count)


def _entries_out(buf, topics: list[str], codes, phys, times, out: tuple[np.ndarray, ...], count: int) -> IndexEntries:
    """The first ``count`` entries the kernel wrote to ``out`` (scratch), copied out;
    keys that are not well-formed UTF-8 are hashed here from their decoded text
    (errors replaced)."""
    hashes, recs, starts, ends, bad = out
    rec = recs[:count].copy()
    key_hashes = hashes[:count].copy()
    for i in np.flatnonzero(bad[:count]).tolist():
        text = buf[int(starts[i]) : int(ends[i])].decode("utf-8", "replace")
        h = java_string_hash(f"{topics[codes[rec[i]]]}#{text}")
        key_hashes[i] = 0 if h == -(1 << 31) else abs(h)  # RocketMQ: abs, MIN_VALUE -> 0
    return IndexEntries(key_hashes, phys[rec], times[rec])


_PREFIXES: dict[str, int] = {}
_PREFIX_BY_ID = np.zeros(0, np.int64)  # by process-wide topic id (-1: not hashed yet)
_PREFIX_LOCK = threading.Lock()


def _prefix_hashes(topics: list[str], ids: np.ndarray | None = None) -> np.ndarray:
    """Java hash of ``topic + "#"`` per topic (as uint32 values in int64), kept per topic:
    a chunk of 10,000 topics hashes none again. With the topics' process-wide ids
    (RecordFields.topic_ids) a chunk is one gather from an array by id."""
    global _PREFIX_BY_ID
    if ids is not None:
        by_id = _PREFIX_BY_ID
        if len(ids) and (ids.max() >= len(by_id) or (by_id[ids] < 0).any()):
            with _PREFIX_LOCK:
                by_id = _PREFIX_BY_ID
                if ids.max() >= len(by_id):
                    by_id = np.concatenate([by_id, np.full(max(int(ids.max()) + 1, 2 * len(by_id)) - len(by_id), -1)])
                miss = np.flatnonzero(by_id[ids] < 0)
                by_id[ids[miss]] = _prefix_hashes([topics[i] for i in miss.tolist()])
                _PREFIX_BY_ID = by_id
        return by_id[ids]
    cache = _PREFIXES
    found = list(map(cache.get, topics))
    if None in found:
        if len(cache) > 1 << 18:
            cache.clear()
        missing = [t for t, h in zip(topics, found) if h is None]
        cache.update(zip(missing, java_string_hashes([t + "#" for t in missing]).astype(np.uint32).tolist()))
        found = [cache[t] for t in topics]
    return np.array(found, np.int64)


class _Scratch(threading.local):
    """Per-thread output arrays of the entries kernel, reused from chunk to chunk (the
    number of entries is known only after the pass; the entries are copied out)."""

    def __init__(self) -> None:
        self.capacity = 0
        self._arrays: tuple[np.ndarray, ...] = ()

    def entries(self, capacity: int, *, keep: int = 0) -> tuple[np.ndarray, ...]:
        """The arrays, at least ``capacity`` long (the first ``keep`` entries kept)."""
        if capacity > self.capacity or not self._arrays:
            capacity = max(capacity, 1024)
            grown = (*(np.empty(capacity, np.int64) for _ in range(4)), np.empty(capacity, np.uint8))
            for new, old in zip(grown, self._arrays):
                new[:keep] = old[:keep]
            self.capacity, self._arrays = capacity, grown
        return self._arrays


_SCRATCH = _Scratch()


class DispatchSink(Protocol):
    """Something built from the commitlog: consume queues, the index, a builder.
    ``batch`` holds the records of [from_offset, to_offset) (possibly none: a range
    that is only the BLANK end of a segment still moves a builder's progress)."""

    def dispatch(self, batch: DispatchBatch, from_offset: int, to_offset: int) -> None: ...


def build_dispatch_batch(chunk: ScanChunk, delays_ms: list[int] | None = None) -> DispatchBatch:
    """Columns for the sinks from one scanned chunk: TAGS, KEYS and UNIQ_KEY located
    and TAGS hashed in one compiled pass over the records' properties
    (mqstore/kernels/_dispatch.pyx, without the GIL; a TAGS value that is not
    well-formed UTF-8 is hashed here from its decoded text). Reference model:
    tests/kernels/model_dispatch.py."""
    f, buf = chunk.fields, chunk.buffer
    n = len(f.properties_at)
    cols = np.empty((6, n), np.int64)
    tags_codes = np.empty(n, np.int64)
    bad = np.empty(n, np.uint8)
    at, lens = np.ascontiguousarray(f.properties_at, np.int64), np.ascontiguousarray(f.properties_len, np.int64)
    sysflags, codes = np.ascontiguousarray(f.sysflags, np.int64), np.ascontiguousarray(f.topic_codes, np.int64)
    topic_ids = getattr(f, "topic_ids", None)  # fields made otherwise (tests) have none
    prefixes = _prefix_hashes(f.topics, topic_ids)
    scratch, first, k, flagged = _SCRATCH, 0, 0, 0
    out = scratch.entries(max(scratch.capacity, 4 * n))
    while True:
        first, k, more = _dispatch.extract_all(
            buf, at, lens, sysflags, codes, prefixes, cols, tags_codes, bad, *out, first, k
        )
        flagged += more
        if first >= n:
            break
        out = scratch.entries(2 * scratch.capacity, keep=k)  # more keys than room: grow, go on
    if flagged:
        ts, te = cols[0], cols[1]
        for i in np.flatnonzero(bad).tolist():
            tags_codes[i] = java_string_hash(buf[int(ts[i]) : int(te[i])].decode("utf-8", "replace"))
    entries = _entries_out(buf, f.topics, codes, chunk.physical_offsets, f.store_timestamps, out, k)
    ks, ke, us, ue = cols[2], cols[3], cols[4], cols[5]
    if delays_ms is not None and SCHEDULE_TOPIC in f.topics:
        # Delay-level messages: the unit's tagsCode is the deliver time (RocketMQ).
        sched = np.flatnonzero(f.topic_codes == f.topics.index(SCHEDULE_TOPIC))
        ((ds, de),) = locate_properties(buf, f.properties_at[sched], f.properties_len[sched], [b"DELAY"])
        levels = np.array([_int_or_zero(buf[a:b]) if a >= 0 else 0 for a, b in zip(ds.tolist(), de.tolist())], np.int64)
        tags_codes[sched] = deliver_times(f.store_timestamps[sched], levels, delays_ms)

    batch = DispatchBatch(
        chunk.physical_offsets,
        chunk.sizes,
        f.topics,
        f.topic_codes,
        f.queue_ids,
        f.queue_offsets,
        f.sysflags,
        f.store_timestamps,
        tags_codes,
        buf,
        ks,
        ke,
        us,
        ue,
        topic_ids,
    )
    object.__setattr__(batch, "_entries", entries)
    return batch


def _int_or_zero(raw: bytes) -> int:
    try:
        return int(raw)
    except ValueError:
        return 0


@dataclass
class SinkBehind:
    """A trailing sink that fell behind: where it stands, why, since when (epoch ms)."""

    progress_offset: int
    error: str
    since_ms: int
    retry_at: float = 0.0  # monotonic time of the next catch-up attempt


class ReputLoop:
    """Feeds ``sinks`` (and ``trailing`` sinks, see the module docstring) from
    ``commitlog``, starting at ``dispatched_offset``.

    ``limit`` says how far records may be dispatched (default: the write position;
    under sync flush the store passes the flushed offset, so no consumer sees a
    record a crash could take back). A trailing sink has a ``progress_offset``
    (everything below it is in the sink) and a ``kind`` naming it.
    """

    def __init__(
        self,
        commitlog: CommitLog,
        sinks: Sequence[DispatchSink],
        *,
        dispatched_offset: int,
        limit: Callable[[], int] | None = None,
        chunk_bytes: int = 8 << 20,
        idle_sleep_s: float = 0.001,
        delays_ms: list[int] | None = None,
        on_progress: Callable[[int], None] | None = None,
        trailing: Sequence[DispatchSink] = (),
    ) -> None:
        """``on_progress(dispatched_offset)``: told after every chunk the sinks took."""
        self._delays = delays_ms
        self._on_progress = on_progress
        self._log = commitlog
        self._sinks = list(sinks)
        self._trailing = list(trailing)
        self.behind: dict[str, SinkBehind] = {}  # trailing sinks behind, by kind
        self.dispatched_offset = max(dispatched_offset, commitlog.min_offset)
        self._limit = limit or (lambda: commitlog.wrote_offset)
        self._chunk_bytes = chunk_bytes
        self._idle = idle_sleep_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.dispatched_records = 0

    @property
    def running(self) -> bool:
        """True while the background loop runs."""
        return self._thread is not None and self._thread.is_alive() and not self._stop.is_set()

    @property
    def lag(self) -> int:
        """Commitlog bytes written but not yet dispatched."""
        return max(0, self._limit() - self.dispatched_offset)

    def run_once(self) -> int:
        """Dispatch one chunk; returns how many records it held (0: caught up)."""
        if self.dispatched_offset < self._log.min_offset:  # retention removed what we had not read
            self.dispatched_offset = self._log.min_offset
        start = self.dispatched_offset
        chunk = self._log.scan(start, limit=self._limit(), max_bytes=self._chunk_bytes)
        if chunk.next_offset > start:
            batch = build_dispatch_batch(chunk, self._delays) if len(chunk.sizes) else DispatchBatch.empty()
            for sink in self._sinks:
                sink.dispatch(batch, start, chunk.next_offset)
            for sink in self._trailing:
                if sink.kind not in self.behind:
                    try:
                        sink.dispatch(batch, start, chunk.next_offset)
                    except (OSError, StoreNotWritableError) as e:  # the others go on; it catches up later
                        self._fell_behind(sink, e)
            self.dispatched_records += len(batch)
            self.dispatched_offset = chunk.next_offset
            if self._on_progress is not None:
                self._on_progress(self.dispatched_offset)
        if self.behind:
            self._catch_up_trailing()
        return len(chunk.sizes)

    def _fell_behind(self, sink, e: BaseException) -> None:
        was = self.behind.get(sink.kind)
        self.behind[sink.kind] = SinkBehind(
            sink.progress_offset,
            f"{type(e).__name__}: {e}",
            was.since_ms if was else int(time.time() * 1000),
            time.monotonic() + _RETRY_S,
        )
        if was is None:
            log.error("dispatch_sink_behind", sink=sink.kind, error=str(e), action="others fed on; it catches up")

    def _catch_up_trailing(self) -> None:
        """One chunk for each trailing sink that is behind and due, from its own progress."""
        for sink in self._trailing:
            b = self.behind.get(sink.kind)
            if b is None or time.monotonic() < b.retry_at:
                continue
            start = max(sink.progress_offset, self._log.min_offset)
            try:
                if start < self.dispatched_offset:
                    chunk = self._log.scan(start, limit=self.dispatched_offset, max_bytes=self._chunk_bytes)
                    batch = build_dispatch_batch(chunk, self._delays) if len(chunk.sizes) else DispatchBatch.empty()
                    sink.dispatch(batch, start, chunk.next_offset)
            except (OSError, StoreNotWritableError) as e:
                self._fell_behind(sink, e)
                continue
            b.progress_offset, b.retry_at = sink.progress_offset, 0.0  # progress: the next chunk at once
            if sink.progress_offset >= self.dispatched_offset:
                del self.behind[sink.kind]
                log.info("dispatch_sink_caught_up", sink=sink.kind, progress_offset=sink.progress_offset)

    def catch_up(self) -> int:
        """Dispatch until nothing is left below the limit; returns records dispatched."""
        total = 0
        while True:
            n = self.run_once()
            total += n
            if n == 0 and self.dispatched_offset >= self._limit():
                return total

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="mqstore-reput", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the loop after the chunk in hand, then dispatch what is left."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.error is None:
            self.catch_up()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self.run_once() == 0:
                    self._stop.wait(self._idle)
                self.error = None
            except (
                OSError,
                StoreNotWritableError,
            ) as e:  # a full disk, a failing sync: try again (puts are idempotent)
                self.error = e
                log.error("reput_failed", error=str(e), dispatched_offset=self.dispatched_offset, action="retry in 1 s")
                self._stop.wait(_RETRY_S)
            except BaseException as e:  # anything else is a bug or damage: stop, surfaced through .error
                self.error = e
                log.error("reput_failed", error=str(e), dispatched_offset=self.dispatched_offset, action="stopped")
                return


_RETRY_S = 1.0

__all__ = ["DispatchBatch", "DispatchSink", "IndexEntries", "ReputLoop", "SinkBehind", "build_dispatch_batch"]
