"""The reput dispatcher core (RocketMQ DefaultMessageStore.ReputMessageService).

It tails the commitlog from its ``reput_offset``, decodes records in bulk
(``CommitLog.scan``) and hands each chunk to its sinks as one ``DispatchBatch``:
the columns of RocketMQ's DispatchRequest for many records. Sinks (consume queues,
index) decide what they take: consume queues skip prepared and rollback
transaction records, the index skips rollback ones.

Who calls what: one thread (the dispatcher's) calls ``run_once``/``catch_up`` or
runs the loop with ``start``; ``reput_offset`` and ``lag`` may be read from any
thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import structlog

from mqstore.formats.javahash import java_string_hashes
from mqstore.formats.properties import locate_properties
from mqstore.store.commitlog import CommitLog, ScanChunk

log = structlog.get_logger(__name__)
_DISPATCHED = (b"TAGS", b"KEYS", b"UNIQ_KEY")


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
    keys: list[str | None]  # raw KEYS values (space separated)
    unique_keys: list[str | None]

    def __len__(self) -> int:
        return len(self.physical_offsets)


class DispatchSink(Protocol):
    """Something built from the commitlog: consume queues, the index."""

    def dispatch(self, batch: DispatchBatch) -> None: ...


def build_dispatch_batch(chunk: ScanChunk) -> DispatchBatch:
    """Columns for the sinks from one scanned chunk: TAGS, KEYS and UNIQ_KEY are
    located for all records at once; each distinct TAGS value is hashed once."""
    f, buf = chunk.fields, chunk.buffer
    (ts, te), (ks, ke), (us, ue) = locate_properties(buf, f.properties_at, f.properties_len, _DISPATCHED)
    tags = [buf[a:b] if a >= 0 else None for a, b in zip(ts.tolist(), te.tolist())]
    distinct = list(dict.fromkeys(t for t in tags if t))
    hashes = dict(zip(distinct, java_string_hashes([t.decode("utf-8", "replace") for t in distinct]).tolist()))
    tags_codes = np.fromiter((hashes[t] if t else 0 for t in tags), np.int64, len(tags))
    keys = [buf[a:b].decode("utf-8", "replace") if a >= 0 else None for a, b in zip(ks.tolist(), ke.tolist())]
    uniq = [buf[a:b].decode("utf-8", "replace") if a >= 0 else None for a, b in zip(us.tolist(), ue.tolist())]
    return DispatchBatch(
        chunk.physical_offsets, chunk.sizes, f.topics, f.topic_codes, f.queue_ids, f.queue_offsets,
        f.sysflags, f.store_timestamps, tags_codes, keys, uniq,
    )  # fmt: skip


class ReputLoop:
    """Feeds ``sinks`` from ``commitlog``, starting at ``reput_offset``.

    ``limit`` says how far records may be dispatched (default: the write position;
    under sync flush the store passes the flushed offset, so no consumer sees a
    record a crash could take back).
    """

    def __init__(
        self,
        commitlog: CommitLog,
        sinks: Sequence[DispatchSink],
        *,
        reput_offset: int,
        limit: Callable[[], int] | None = None,
        chunk_bytes: int = 4 << 20,
        idle_sleep_s: float = 0.001,
    ) -> None:
        self._log = commitlog
        self._sinks = list(sinks)
        self.reput_offset = max(reput_offset, commitlog.min_offset)
        self._limit = limit or (lambda: commitlog.wrote)
        self._chunk_bytes = chunk_bytes
        self._idle = idle_sleep_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.dispatched = 0

    @property
    def lag(self) -> int:
        """Commitlog bytes written but not yet dispatched."""
        return max(0, self._limit() - self.reput_offset)

    def run_once(self) -> int:
        """Dispatch one chunk; returns how many records it held (0: caught up)."""
        if self.reput_offset < self._log.min_offset:  # retention removed what we had not read
            self.reput_offset = self._log.min_offset
        chunk = self._log.scan(self.reput_offset, limit=self._limit(), max_bytes=self._chunk_bytes)
        if len(chunk.sizes):
            batch = build_dispatch_batch(chunk)
            for sink in self._sinks:
                sink.dispatch(batch)
            self.dispatched += len(batch)
        self.reput_offset = chunk.next_offset
        return len(chunk.sizes)

    def catch_up(self) -> int:
        """Dispatch until nothing is left below the limit; returns records dispatched."""
        total = 0
        while True:
            n = self.run_once()
            total += n
            if n == 0 and self.reput_offset >= self._limit():
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
        try:
            while not self._stop.is_set():
                if self.run_once() == 0:
                    self._stop.wait(self._idle)
        except BaseException as e:  # surfaced through .error and the store's status
            self.error = e
            log.error("reput_failed", error=str(e), reput_offset=self.reput_offset)


__all__ = ["DispatchBatch", "DispatchSink", "ReputLoop", "build_dispatch_batch"]
