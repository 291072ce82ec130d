"""The whole store in one process (RocketMQ DefaultMessageStore), composed of the
same parts ``mqstore serve`` runs in separate processes: the commitlog side
(log_store.LogStore: commitlog, queue-offset table, topic configs, delay scheduler,
retention), the consume-queue builder and the index builder (builders.py), and a
reput loop (dispatch.ReputLoop) feeding both builders from the commitlog. Reads go
through reads.py over local ports, as the front's go over gRPC.

Open: the four steps of open_protocol.py, in one thread; the reput loop then catches
up before ``__init__`` returns, consumer offsets past their queue's end are clamped,
and dispatch follows in a thread.

Watermarks (docs/architecture.md): ``wrote_offset`` >= ``flushed_offset``; the reput
loop never passes ``LogStore.confirm_offset`` (written under async flush, flushed
under sync flush: nothing a crash can take back is ever visible to a consumer).

Who calls what: any thread may append and read; ``close`` once, last.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import structlog

from mqstore.errors import StoreClosedError
from mqstore.store import open_protocol, reads
from mqstore.store.builders import ConsumerProgress, IndexBuilder, LocalCommitLogView, QueueBuilder
from mqstore.store.clock import Clock
from mqstore.store.config import StoreConfig
from mqstore.store.dispatch import ReputLoop
from mqstore.store.local_ports import LocalPorts, LocalReads, PullResult, RawPullResult
from mqstore.store.messages import AppendResult, MessageBatch
from mqstore.store.reads import QueueStatus
from mqstore.store.recovery import RecoveryProgress
from mqstore.store.retention import RetentionConfig
from mqstore.store.topic_configs import MessageType

log = structlog.get_logger(__name__)


class MessageStore(LocalReads):
    """See the module docstring. The parts are ``log``, ``queue_builder``,
    ``index_builder`` (None with the index off) and ``dispatcher``; ``commitlog``,
    ``consume_queues``, ``index``, ``consumer_offsets``, ``topics``, ``scheduler``
    and ``retention`` name what they hold."""

    def __init__(
        self,
        store_dir: str | Path,
        config: StoreConfig | None = None,
        *,
        clock: Clock | None = None,
        background_dispatch: bool = True,
        retention: RetentionConfig | None = None,
        progress: RecoveryProgress | None = None,
    ) -> None:
        # progress: readable from other threads while this opens
        self.log = open_protocol.recover_log(store_dir, config, clock=clock, progress=progress)
        self.store_dir, self.config, self.progress = self.log.store_dir, self.log.config, self.log.progress
        self.commitlog, self.topics = self.log.commitlog, self.log.topics
        self._closed = False
        self._idle = threading.Event()  # never set: a sleep
        self.queue_builder: QueueBuilder | None = None
        self.index_builder: IndexBuilder | None = None
        try:
            view = LocalCommitLogView(self.commitlog)
            self.progress.set_phase("consume_queues")
            self.queue_builder = open_protocol.recover_builder(
                "consumequeue", self.store_dir, self.config, view, clock=clock, on_durable=self.log.note_derived
            )
            if self.config.message_index_enable:
                self.index_builder = open_protocol.recover_builder(
                    "index", self.store_dir, self.config, view, clock=clock, on_durable=self.log.note_derived
                )
            builders = [b for b in (self.queue_builder, self.index_builder) if b is not None]
            queues = self.queue_builder.consume_queues
            self.log.attach_queue_ends(open_protocol.queue_ends(self.queue_builder), self.queue_builder.progress_offset)
            reput_from = open_protocol.resume_offset(b.progress_offset for b in builders)
            self.dispatcher = ReputLoop(
                self.commitlog,
                [self.queue_builder],
                trailing=[self.index_builder] if self.index_builder is not None else [],  # never holds the queues back
                dispatched_offset=reput_from,
                limit=lambda: self.log.confirm_offset,
                delays_ms=self.log.delays_ms,
                on_progress=self.log.note_dispatched,
            )
            self.progress.set_phase("dispatch", max(self.commitlog.wrote_offset - reput_from, 0))
            started = time.perf_counter()
            caught_up = self.dispatcher.catch_up()
            self.log.note_dispatched(self.dispatcher.dispatched_offset)  # (a clean open dispatches nothing: no report)
            log.info(
                "dispatch_recovered",
                reput_from=reput_from,
                records=caught_up,
                dispatched_offset=self.dispatcher.dispatched_offset,
                seconds=round(time.perf_counter() - started, 3),
            )
            self.clamped_consumer_offsets = self.queue_builder.clamp_consumer_offsets()
            self.log.dispatch_active = lambda: self.dispatcher.running
            self.log.start_background(
                queues, retention, start=background_dispatch, builder=self.queue_builder, index=self.index
            )
            if background_dispatch:
                self.dispatcher.start()
            self._ports = LocalPorts(
                self.commitlog, queues, self.index, self.consumer_offsets, perm_of=self.topics.perm_of
            )
            self.progress.set_phase("ready")
            log.info(
                "store_opened",
                recovery_seconds=round(self.commitlog.recovery.seconds, 3),
                clean_shutdown=self.commitlog.recovery.clean_shutdown,
            )
        except BaseException:
            for part in (self.index_builder, self.queue_builder, self.log):
                if part is not None:
                    try:
                        part.close()
                    except Exception as e:  # noqa: BLE001 - the open's own error is the one to raise
                        log.error("close_after_failed_open", part=type(part).__name__, error=str(e))
            raise

    # ------------------------------------------------------------------ what the parts hold

    @property
    def consume_queues(self):
        return self.queue_builder.consume_queues

    @property
    def consumer_offsets(self):
        return self.queue_builder.consumer_offsets

    @property
    def index(self):
        return self.index_builder.index if self.index_builder is not None else None

    @property
    def scheduler(self):
        return self.log.scheduler

    @property
    def retention(self):
        return self.log.retention

    # ------------------------------------------------------------------ writes

    def append(self, batch: MessageBatch) -> AppendResult:
        """Append to the commitlog (see LogStore.append); dispatch follows. Messages
        with a DELAY property go to SCHEDULE_TOPIC_XXXX first (see schedule.py).
        What a producer may not send (reserved topics, transaction bits, a topic
        without the write perm, ...: ``messages.check_client_batch``) raises before
        anything is written."""
        return self.log.append(batch)

    def update_topic(
        self,
        topic: str,
        *,
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
        perm: int | None = None,
        message_type: MessageType | str | None = None,
    ):
        """Create a topic's config or change what is given of it (persisted in
        config/topics.json): as RocketMQ's updateTopic, an argument left None keeps the
        topic's value (a new topic: 4 read and 4 write queues, perm 6, NORMAL).
        Automatic queue ids spread over the write queues. ``message_type`` (a
        MessageType or its name: NORMAL, FIFO, DELAY, TRANSACTION, MIXED) is stored as
        the attribute ``message.type``. Other attributes are kept."""
        tc = self.log.update_topic(
            topic,
            read_queue_nums=read_queue_nums,
            write_queue_nums=write_queue_nums,
            perm=perm,
            message_type=message_type,
        )
        nums = max(tc.read_queue_nums, tc.write_queue_nums)
        if all(self.commitlog.queue_offset(topic, q) == 0 for q in range(nums)):  # a topic with no message yet
            self.consume_queues.make_ahead(topic, range(nums))  # its first message then waits for no mkdir
        return tc

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record that ``group`` consumed (topic, queue_id) up to ``offset`` (the next
        offset to read); one past the queue's max is refused (see
        ``builders.commit_consumer_offset``)."""
        self._check_open()
        reads.check_queue(topic, queue_id)
        reads.check_offset(offset, "consumer offset")
        self.queue_builder.commit_offset(group, topic, queue_id, offset)

    def wait_dispatched(self, timeout_s: float = 10.0) -> bool:
        """Block until everything appended before this call that may be handed out
        (LogStore.confirm_offset) is in the consume queues and index (True), or the
        timeout passes (False)."""
        target = self.log.confirm_offset
        clock = self.log._clock
        deadline = clock.monotonic() + timeout_s
        while self.dispatcher.dispatched_offset < target or self.dispatcher.behind:  # (the index catching up too)
            if self.dispatcher.error is not None and not self.dispatcher.running:
                raise self.dispatcher.error  # stopped for good; a running one retries (a full disk)
            if clock.monotonic() > deadline:
                return False
            self._idle.wait(0.001)
        return True

    def flush_derived(self) -> None:
        """What the builders' thorough flush does every 60 s, now: consume queues and
        index written out and synced, the checkpoint's timestamps and
        config/derivedOffset.json moved up to what they hold."""
        self._check_open()
        for b in (self.queue_builder, self.index_builder):
            if b is not None:
                b.flush(thorough=True)

    # ------------------------------------------------------------------ state

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"store at {self.store_dir} is closed")

    @property
    def writable(self) -> bool:
        """False while appends are refused; ``unwritable_cause`` says why."""
        return self.log.writable

    @property
    def unwritable_cause(self) -> str | None:
        """None, or the cause appends fail with (StoreNotWritableError.cause):
        "flush_failed", "read_only", "io_error" (until a restart) or "disk_full"
        (until space is freed). Reads work in every case."""
        return self.log.unwritable_cause

    def stopped_loops(self) -> dict[str, str]:
        """Background loops that stopped while the store is open, ``{name: why}``:
        the reput dispatcher (stopped on an error it does not retry), the delay
        scheduler, retention, the commitlog's flusher (a failed sync) and the
        builders' flushers. Empty while all run, and before they are started."""
        if self._closed:
            return {}
        out = self.log.stopped_loops()
        d = self.dispatcher
        if d.error is not None and not d.running and d._thread is not None:
            out["reput"] = f"stopped: {type(d.error).__name__}: {d.error}"
        for name, b in (("consume_queue_flush", self.queue_builder), ("index_flush", self.index_builder)):
            if b is not None and b.stopped is not None:
                out[name] = b.stopped
        return out

    def status(self) -> dict:
        """What an operator (or a status endpoint) wants at a glance: the open's phase
        and progress (``progress`` is readable from another thread while the store
        opens: pass one in), whether appends are accepted and why not, the commitlog's
        offsets, the dispatch lag, the last recovery and the background loops
        (``loops``: their counters; ``stopped_loops``: see there)."""
        d = self.dispatcher
        st = self.log.status()
        return {
            "state": "ready" if not self._closed else "closed",
            "progress": st["progress"],
            "writable": st["writable"],
            "unwritable_cause": st["unwritable_cause"],
            "min_offset": st["min_offset"],
            "wrote": st["wrote"],
            "flushed": st["flushed"],
            "dispatch_lag_bytes": d.lag,
            "queues": self.consume_queues.count(),
            "last_recovery": st["last_recovery"],
            "loops": {
                **st["loops"],
                "reput": {
                    "running": d.running,
                    "dispatched": d.dispatched_records,
                    "error": None if d.error is None else str(d.error),
                },
            },
            "stopped_loops": self.stopped_loops(),
            # builders whose writes fail (the index on a full disk): fed again from their progress
            "stuck": {kind: dataclasses.asdict(b) for kind, b in d.behind.items()},
            "write_refusals": st["write_refusals"],  # appends refused: how many, since when, why
            "consumer_losses": st["consumer_losses"],  # groups' unread messages retention deleted
        }

    def close(self) -> None:
        """Dispatch everything, flush every file, write the checkpoint, release the locks.

        A step that fails (a failing disk under a consume queue, the index or a config
        file) is logged and the others still run, so every lock is released; the
        commitlog then leaves the abort marker, and the next open checks and rebuilds
        the derived files as after a crash."""
        if self._closed:
            return
        self._closed = True
        failed: list[str] = []

        def step(name: str, fn) -> None:
            try:
                fn()
            except Exception as e:  # noqa: BLE001  # logged; the next steps still run
                failed.append(name)
                log.error("close_step_failed", store=str(self.store_dir), step=name, error=str(e))

        for name, part in (("retention", self.retention), ("scheduler", self.scheduler)):
            if part is not None:
                step(name, part.stop)
        step("dispatch", self.dispatcher.stop)
        for b in (self.queue_builder, self.index_builder):
            if b is not None:
                step(b.kind, b.close)
                failed += [b.kind] if b.close_failed else []
        if failed:
            self.commitlog.mark_unclean("close:" + ",".join(failed))
        self.log.close()

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["ConsumerProgress", "MessageStore", "PullResult", "QueueStatus", "RawPullResult"]
