"""The commitlog side of one shard as the services see it: its LogStore, its state
(recovering, awaiting the builders, serving, closing) and incarnation.

What runs where (see README.md): this process (the commitlog actor) owns the
commitlog, the topic configs and the retention of segments (delay deliveries run in
the consume-queue builder's process and append through DeliverDelayed). The
consume-queue builder and the index builder are processes of their own
(index/state.py) and the reput dispatcher another (dispatcher/reput.py).

Its part of the open (mqstore/store/open_protocol.py): RECOVERING (step 1), then
AWAITING_BUILDERS, serving reads, ReadRange, GetRecovery and CheckUnits until the
consume-queue builder hands over its queue ends (AttachQueueEnds, step 3), then
SERVING: appends accepted, retention runs.

Blocking store calls run on ``executor`` threads (sync flush waits there, so
concurrent appends share a group commit); the event loop only waits.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import random
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import structlog

from mqstore.formats.msgid import offset_msg_id_prefix
from mqstore.services.common.errors import Aborted, Unavailable
from mqstore.services.common.metrics import ShardStats
from mqstore.store import open_protocol
from mqstore.store.config import StoreConfig
from mqstore.store.log_store import LogStore
from mqstore.store.recovery import RecoveryProgress
from mqstore.store.retention import RetentionConfig

log = structlog.get_logger(__name__)
T = TypeVar("T")


class CommitLogPhase(enum.Enum):
    RECOVERING = "RECOVERING"
    AWAITING_BUILDERS = "AWAITING_BUILDERS"
    SERVING = "SERVING"
    CLOSING = "CLOSING"
    CLOSED = "CLOSED"
    FAILED = "FAILED"


class CommitLogState:
    """See the module docstring. ``open`` (blocking) runs the protocol; servicer calls
    go through ``ready`` (appends: SERVING) or ``recovered`` (reads: from
    AWAITING_BUILDERS on)."""

    def __init__(
        self,
        store_dir: str | Path,
        config: StoreConfig | None = None,
        *,
        shard: int = 0,
        retention: RetentionConfig | None = None,
        lock_wait_s: float = 30.0,
    ) -> None:
        self.store_dir = Path(store_dir)
        self.config = config or StoreConfig()
        self.shard = shard
        self.retention = retention
        self.lock_wait_s = lock_wait_s
        self.phase = CommitLogPhase.RECOVERING
        self.error: str | None = None
        self.incarnation = random.getrandbits(62) + 1  # changes on every open
        self.progress = RecoveryProgress()
        self.stats = ShardStats()
        self.log_store: LogStore | None = None
        self.executor = ThreadPoolExecutor(16, thread_name_prefix=f"mqstore-shard{shard}")
        self.msg_id_prefix = offset_msg_id_prefix(self.config.store_host)
        self._appended: asyncio.Event | None = None
        self._ends: tuple[dict[tuple[str, int], int], int] | None = None  # (queue ends, builder progress) handed over
        self._ends_given = threading.Event()

    # ------------------------------------------------------------------ lifecycle

    def open(self, *, give_up: Callable[[], bool] = lambda: False) -> None:
        """Recover the commitlog, wait for the consume-queue builder's ends, serve
        (blocking; minutes for a big store after a crash). A lock still held by the
        previous incarnation's dying process is waited for."""
        try:
            log_store = open_protocol.recover_log(
                self.store_dir,
                self.config,
                progress=self.progress,
                on_sync_seconds=self.stats.flush_seconds.observe,
                lock_wait_s=self.lock_wait_s,
            )
            self.log_store = log_store
            self.phase = CommitLogPhase.AWAITING_BUILDERS
            self.progress.set_phase("awaiting_builders")
            log.info(
                "commitlog_recovered_awaiting_builders",
                shard=self.shard,
                incarnation=self.incarnation,
                wrote=log_store.commitlog.wrote_offset,
            )
            ends, built = self._wait_for_queue_ends(give_up)
            log_store.attach_queue_ends(ends, built)
            log_store.start_background(retention=self.retention)
            self.phase = CommitLogPhase.SERVING
            self.progress.set_phase("ready")
            log.info(
                "shard_serving",
                shard=self.shard,
                store=str(self.store_dir),
                incarnation=self.incarnation,
                wrote=log_store.commitlog.wrote_offset,
            )
        except BaseException as e:
            self.phase = CommitLogPhase.FAILED
            self.error = f"{type(e).__name__}: {e}"
            log.error("shard_open_failed", shard=self.shard, store=str(self.store_dir), error=self.error)
            raise

    def watch_loops(self, set_serving: Callable[[bool], None], stop: threading.Event, interval_s: float = 1.0) -> None:
        """Until ``stop`` is set (blocking; the host's opener thread runs it once the
        shard serves): health follows the store's background loops, NOT_SERVING
        (``set_serving(False)``) while one of them stopped (``LogStore.stopped_loops``:
        the delay scheduler, retention, the commitlog's flusher), SERVING again when
        none has. GetStats names them (``stopped_loops``, ``error``)."""
        healthy = True
        while not stop.wait(interval_s):
            log_store = self.log_store
            if log_store is None or self.phase is not CommitLogPhase.SERVING:
                continue
            try:
                stopped = log_store.stopped_loops()
            except Exception as e:  # noqa: BLE001 - closing under us: asked again next interval
                log.debug("loop_check_failed", shard=self.shard, error=str(e))
                continue
            if healthy == (not stopped):
                continue
            healthy = not stopped
            if stopped:
                log.error("background_loop_stopped", shard=self.shard, loops=stopped, health="NOT_SERVING")
            else:
                log.info("background_loops_running", shard=self.shard, health="SERVING")
            set_serving(healthy)

    def _wait_for_queue_ends(self, give_up: Callable[[], bool]):
        waited = 0.0
        while not self._ends_given.wait(0.1):
            if give_up():
                raise RuntimeError("gave up waiting for the consume-queue builder's queue ends")
            waited += 0.1
            if waited >= 5:
                waited = 0.0
                log.info("awaiting_consume_queue_builder", shard=self.shard, incarnation=self.incarnation)
        return self._ends

    def attach_queue_ends(self, incarnation: int, progress: int, ends: dict[tuple[str, int], int]) -> None:
        """The consume-queue builder's ends (AttachQueueEnds), taken once per open;
        Aborted if the builder recovered against another open. Once serving, a
        builder that reopened on its own hands them over again: nothing to do."""
        if incarnation != self.incarnation:
            raise Aborted(
                f"queue ends of a builder recovered against commitlog incarnation {incarnation}; "
                f"this open is {self.incarnation}: recover again"
            )
        if self.phase is CommitLogPhase.AWAITING_BUILDERS and not self._ends_given.is_set():
            self._ends = (ends, progress)
            self._ends_given.set()
        elif self.phase not in (CommitLogPhase.AWAITING_BUILDERS, CommitLogPhase.SERVING):
            raise self._unavailable()

    def close(self) -> None:
        """Close the store (flushes, writes the checkpoint, removes the abort file).
        Callers stop the gRPC server first (and the builders before that)."""
        log_store, self.log_store = self.log_store, None
        if self.phase in (CommitLogPhase.CLOSED, CommitLogPhase.CLOSING):
            return
        self.phase = CommitLogPhase.CLOSING
        try:
            if log_store is not None:
                log_store.close()
        finally:
            self.phase = CommitLogPhase.CLOSED
            self.executor.shutdown(wait=False)
            log.info("shard_closed", shard=self.shard, store=str(self.store_dir))

    # ------------------------------------------------------------------ for servicers

    def ready(self) -> LogStore:
        """The open store accepting appends, or Unavailable saying why not."""
        log_store = self.log_store
        if self.phase is CommitLogPhase.SERVING and log_store is not None:
            return log_store
        raise self._unavailable()

    def recovered(self) -> LogStore:
        """The store once its commitlog is recovered (reads, the builders' recovery)."""
        log_store = self.log_store
        if self.phase in (CommitLogPhase.SERVING, CommitLogPhase.AWAITING_BUILDERS) and log_store is not None:
            return log_store
        raise self._unavailable()

    def _unavailable(self) -> Unavailable:
        if self.phase is CommitLogPhase.RECOVERING:
            p = self.progress
            return Unavailable(f"shard {self.shard} is recovering its store (phase {p.phase}, {p.percent:.0f}%)")
        if self.phase is CommitLogPhase.AWAITING_BUILDERS:
            return Unavailable(
                f"shard {self.shard} is recovering its store (phase awaiting_builders: the consume "
                f"queues recover against the commitlog)"
            )
        return Unavailable(
            f"shard {self.shard} is {self.phase.value.lower()}" + (f": {self.error}" if self.error else "")
        )

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking store call on the executor."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, functools.partial(fn, *args, **kwargs))

    # ------------------------------------------------------------------ append notifications

    def notify_appended(self) -> None:
        """Wake ReadRange calls waiting for records (call on the event loop)."""
        ev = self._appended
        if ev is not None:
            self._appended = None
            ev.set()

    async def wait_appended(self, timeout_s: float) -> bool:
        """Until the next notify_appended (True) or the timeout (False: nothing was
        appended meanwhile). Every append goes through the servicer (AppendBatch,
        AppendEncoded, DeliverDelayed), which notifies once its records are visible,
        so a waiter sleeps for its whole timeout when idle."""
        if self._appended is None:
            self._appended = asyncio.Event()
        event = self._appended
        try:
            async with asyncio.timeout(timeout_s):  # (not wait_for: no task per wait)
                await event.wait()
        except TimeoutError:
            return False
        return True


__all__ = ["CommitLogPhase", "CommitLogState"]
