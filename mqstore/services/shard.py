"""One store shard as the services see it: the MessageStore of one directory, its
state (recovering, serving, closing), and the progress of the remote dispatcher.

What runs where (see README.md): the commitlog writer, the consume queues and the
index files of a shard live in this one process, because they share the store's
recovery (queue offsets come from the consume queues, the consume queues are cut
against the commitlog, the resume offset needs all three) and its lock file. The
reput dispatcher does not: it runs in its own process (the dispatcher actor), tails
the commitlog through CommitLogService.ReadRange and sends units and keys through
ConsumeQueueService.PutUnits and IndexService.PutKeys. The store's in-process reput
loop only runs inside ``MessageStore``'s open (the catch-up of recovery) and close
(the last catch-up); between them its ``reput_offset`` records how far the remote
dispatcher got, so retention and ``close`` see the truth.

Blocking store calls run on ``executor`` threads (sync flush waits there, so
concurrent appends share a group commit); the event loop only waits.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import structlog

from mqstore.errors import StoreLockedError
from mqstore.formats.msgid import offset_msg_id_prefix
from mqstore.services.errors import Unavailable
from mqstore.services.metrics import ShardStats
from mqstore.store.config import FlushMode, StoreConfig
from mqstore.store.dispatch import DispatchBatch
from mqstore.store.message_store import MessageStore
from mqstore.store.recovery import RecoveryProgress
from mqstore.store.retention import RetentionConfig

log = structlog.get_logger(__name__)
T = TypeVar("T")


class ShardState(enum.Enum):
    RECOVERING = "RECOVERING"
    SERVING = "SERVING"
    CLOSING = "CLOSING"
    CLOSED = "CLOSED"
    FAILED = "FAILED"


class Shard:
    """See the module docstring. ``open`` (blocking) recovers the store; every
    servicer call goes through ``ready`` first."""

    def __init__(self, store_dir: str | Path, config: StoreConfig | None = None, *, index: int = 0,
                 retention: RetentionConfig | None = None, lock_wait_s: float = 30.0) -> None:  # fmt: skip
        self.store_dir = Path(store_dir)
        self.config = config or StoreConfig()
        self.index = index
        self.retention = retention
        self.lock_wait_s = lock_wait_s
        self.state = ShardState.RECOVERING
        self.error: str | None = None
        self.incarnation = random.getrandbits(62) + 1  # changes on every open
        self.progress = RecoveryProgress()
        self.stats = ShardStats()
        self.store: MessageStore | None = None
        self.executor = ThreadPoolExecutor(16, thread_name_prefix=f"mqstore-shard{index}")
        self.msg_id_prefix = offset_msg_id_prefix(self.config.store_host)
        self.cq_progress = 0  # commitlog offset below which every unit is in the consume queues
        self.index_progress = 0  # ... every key in the index
        self.cq_lock = threading.Lock()
        self.index_lock = threading.Lock()
        self._appended: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> None:
        """Recover and open the store (blocking; minutes for a big store after a crash).
        A lock still held by the previous incarnation's dying process is waited for."""
        deadline = time.monotonic() + self.lock_wait_s
        try:
            while True:
                try:
                    store = MessageStore(self.store_dir, self.config, background_dispatch=False,
                                         retention=self.retention, progress=self.progress)  # fmt: skip
                    break
                except StoreLockedError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            self._time_flushes(store)
            store.scheduler.start()
            store.retention.start()
            self.cq_progress = self.index_progress = store.dispatcher.reput_offset
            self.store = store
            self.state = ShardState.SERVING
            log.info("shard_serving", shard=self.index, store=str(self.store_dir), incarnation=self.incarnation,
                     reput_offset=self.cq_progress, wrote=store.commitlog.wrote)  # fmt: skip
        except BaseException as e:
            self.state = ShardState.FAILED
            self.error = f"{type(e).__name__}: {e}"
            log.error("shard_open_failed", shard=self.index, store=str(self.store_dir), error=self.error)
            raise

    def _time_flushes(self, store: MessageStore) -> None:
        # The commitlog's flusher has no timing hook: wrap the fsync callable it calls
        # (the attribute is read on every flush, so swapping it is safe while it runs).
        flusher = getattr(store.commitlog, "_flusher", None)
        sync = getattr(flusher, "_sync", None)
        if not callable(sync):
            log.warning("flush_latency_unavailable", shard=self.index)
            return
        flusher._sync = self.stats.timed_sync(sync, time.perf_counter)

    def close(self) -> None:
        """Close the store (dispatches what is left in-process, flushes everything,
        removes the abort file). Callers stop the gRPC server first."""
        store, self.store = self.store, None
        if self.state in (ShardState.CLOSED, ShardState.CLOSING):
            return
        self.state = ShardState.CLOSING
        try:
            if store is not None:
                store.close()
        finally:
            self.state = ShardState.CLOSED
            self.executor.shutdown(wait=False)
            log.info("shard_closed", shard=self.index, store=str(self.store_dir))

    # ------------------------------------------------------------------ for servicers

    def ready(self) -> MessageStore:
        """The open store, or Unavailable saying why not."""
        store = self.store
        if self.state is ShardState.SERVING and store is not None:
            return store
        if self.state is ShardState.RECOVERING:
            p = self.progress
            raise Unavailable(f"shard {self.index} is recovering its store (phase {p.phase}, {p.percent:.0f}%)")
        raise Unavailable(f"shard {self.index} is {self.state.value.lower()}" + (f": {self.error}" if self.error else ""))

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking store call on the executor."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, functools.partial(fn, *args, **kwargs))

    def confirm_offset(self, store: MessageStore) -> int:
        """How far records may be handed out: flushed under sync flush, else written."""
        cl = store.commitlog
        return cl.flushed if self.config.flush_mode is FlushMode.SYNC else cl.wrote

    @property
    def dispatched_offset(self) -> int:
        """Everything below is in the consume queues and (when enabled) the index."""
        store = self.store
        if store is not None and store.index is None:
            return self.cq_progress
        return min(self.cq_progress, self.index_progress)

    def put_units(self, batch: DispatchBatch, to_offset: int) -> int:
        """The dispatcher's units into the consume queues (blocking)."""
        store = self.ready()
        with self.cq_lock:
            if len(batch):
                store.consume_queues.dispatch(batch)
            self.cq_progress = max(self.cq_progress, to_offset)
            self._note_progress(store)
            return self.cq_progress

    def put_keys(self, entries, to_offset: int) -> tuple[int, int, int]:
        """The dispatcher's keys into the index (blocking): (indexed, skipped, progress)."""
        store = self.ready()
        with self.index_lock:
            indexed = skipped = 0
            if store.index is not None and len(entries[0]):
                res = store.index.put(entries)
                indexed, skipped = res.indexed, res.skipped
            self.index_progress = max(self.index_progress, to_offset)
            self._note_progress(store)
            return indexed, skipped, self.index_progress

    def _note_progress(self, store: MessageStore) -> None:
        # The store's own reput loop is idle between open and close; its offset is what
        # retention and close() read (see the module docstring).
        d = self.dispatched_offset
        store.dispatcher.reput_offset = max(store.dispatcher.reput_offset, d)

    # ------------------------------------------------------------------ append notifications

    def notify_appended(self) -> None:
        """Wake ReadRange calls waiting for records (call on the event loop)."""
        ev = self._appended
        if ev is not None:
            self._appended = None
            ev.set()

    async def wait_appended(self, timeout_s: float) -> None:
        """Until the next notify_appended or the timeout (appends that bypass the
        servicer, such as delayed deliveries, are seen at the timeout)."""
        if self._appended is None:
            self._appended = asyncio.Event()
        try:
            await asyncio.wait_for(self._appended.wait(), timeout_s)
        except TimeoutError:
            pass


__all__ = ["Shard", "ShardState"]
