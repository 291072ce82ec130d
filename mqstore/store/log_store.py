"""The commitlog side of a store on its own: what the commitlog actor owns when the
consume queues and the index are built in other processes (builders.py).

It holds the commitlog, the topic configs, the delay scheduler, the retention of
commitlog segments, and the two records of derived progress (the checkpoint's
logics/index timestamps and ``config/derivedOffset.json``), which the builders
report through ``note_derived``.

Open is in two steps, because queue offsets continue from the consume queues
(RocketMQ recoverTopicQueueTable) and those live elsewhere:

  1. ``LogStore(...)``: lock, recover the commitlog (recovery.py), topic configs.
     Reads work from here on; the builders recover against this (``recovery_facts``).
  2. ``attach_queue_ends(ends, built_up_to)``: the consume-queue builder's queue ends
     raise the queue-offset table, then every record from ``built_up_to`` (where it
     stands) to the end raises it further. Only now are appends accepted.

``dispatched_offset`` is what the dispatcher last reported as acknowledged by both
builders: retention never deletes above it, and appends are held back while it
lags more than ``max_dispatch_lag_bytes`` (and the dispatcher reported recently).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path

import structlog

from mqstore.errors import StoreClosedError, StoreNotWritableError
from mqstore.formats.names import file_name_to_offset
from mqstore.store import message_rules
from mqstore.store.builders import redispatch_from
from mqstore.store.clock import Clock, SystemClock
from mqstore.store.commitlog import CommitLog
from mqstore.store.config import STORE_TYPE_ROCKSDB, FlushMode, StoreConfig
from mqstore.store.config_files import set_aside_unusable
from mqstore.store.consume_queues import CONSUME_QUEUE_DIR
from mqstore.store.delay_offsets import DELAY_OFFSET_FILE, parse_delay_levels
from mqstore.store.derived_offset import read_durable_offset, write_durable_offset
from mqstore.store.encoded_batch import EncodedBatch
from mqstore.store.layout import resolve_layout
from mqstore.store.loss_ledger import LossLedger
from mqstore.store.messages import (
    AppendResult,
    MessageBatch,
    check_client_batch,
    check_no_transaction,
    check_queue_ids,
    check_send_topics,
)
from mqstore.store.recovery import RecoveryProgress
from mqstore.store.retention import Retention, RetentionConfig, RetentionReport
from mqstore.store.schedule import SCHEDULE_TOPIC, DelayScheduler, QueuePicker, rewrite_delayed
from mqstore.store.topic_configs import TOPICS_FILE, MessageType, TopicConfigs
from mqstore.store.topic_table import BatchTopics

log = structlog.get_logger(__name__)

DERIVED_KINDS = ("consume_queue", "index")
_FLUSH_STOPPED = ("flush_failed", "read_only")  # unwritable causes that end the commitlog's flusher


def stopped_loops(commitlog: CommitLog, loops: dict) -> dict[str, str]:
    """Background loops that stopped though the store is open: ``{name: why}``.
    ``loops`` maps names to objects with a ``stopped`` property (None while they run,
    or once stopped on purpose); the commitlog's flusher ends on a failed sync."""
    out = {name: why for name, part in loops.items() if part is not None and (why := part.stopped) is not None}
    cause = commitlog.unwritable_cause
    if cause in _FLUSH_STOPPED:
        out["flush"] = f"stopped: {cause} (appends refused until a restart)"
    return out


_REPORT_FRESH_S = 5.0  # appends wait for a lagging dispatcher only while it reports


class LogStore:
    """See the module docstring."""

    def __init__(
        self,
        store_dir: str | Path,
        config: StoreConfig | None = None,
        *,
        clock: Clock | None = None,
        progress: RecoveryProgress | None = None,
        on_sync_seconds: Callable[[float], None] | None = None,
    ) -> None:
        """``on_sync_seconds``: told how long each commitlog fdatasync took (metrics)."""
        self.store_dir = Path(store_dir)
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.config = cfg = resolve_layout(self.store_dir, config or StoreConfig())
        self._clock = clock or SystemClock()
        self.progress = progress or RecoveryProgress()
        has_queues = any((self.store_dir / CONSUME_QUEUE_DIR).glob("*/*")) or (
            cfg.store_type == STORE_TYPE_ROCKSDB and (self.store_dir / CONSUME_QUEUE_DIR / "CURRENT").is_file()
        )
        self.commitlog = CommitLog(
            self.store_dir,
            cfg,
            clock=self._clock,
            queue_offsets_from_derived=has_queues,
            progress=self.progress,
            on_sync_seconds=on_sync_seconds,
        )
        try:
            self._set_aside = set_aside_unusable(self.store_dir, (TOPICS_FILE, DELAY_OFFSET_FILE))
            self.topics = TopicConfigs(self.store_dir, clock=self._clock)
            for name, tc in self.topics.all().items():
                self.commitlog.set_queue_nums(name, tc.write_queue_nums)
            self.topic_table = self.commitlog.topic_table
            self.topic_table.attach_configs(self.topics)  # a config change reaches the next batch
        except BaseException:
            self.commitlog.close()
            raise
        rec = self.commitlog.recovery
        self.start_offset = file_name_to_offset(rec.start_segment) if rec.start_segment else -1
        self.index_msg_timestamp = self.commitlog.checkpoint.index_msg_timestamp
        durable = read_durable_offset(self.store_dir)
        self._durable = dict.fromkeys(DERIVED_KINDS if cfg.message_index_enable else DERIVED_KINDS[:1], durable)
        self._delays_ms = parse_delay_levels(cfg.message_delay_level)
        self._pick_queue = QueuePicker(self.topics, cfg.default_queue_nums)
        self._lock = threading.Lock()
        self.dispatched_offset = 0
        # What retention's last pass left: (the commitlog's min offset, the end of the
        # newest range forced deletion removed), set together once a pass is done, so a
        # builder told the min offset is told whether its losses below it were forced.
        self.retention_told = (self.commitlog.min_offset, 0)
        self.losses = LossLedger()  # groups' unread messages retention deleted (one process: it computes them)
        self._reported_at = -1e18
        # Whether appends should wait for a lagging dispatcher: one that reported lately
        # (a dispatcher in another process); MessageStore: its reput thread runs.
        self.dispatch_active: Callable[[], bool] = lambda: self._clock.monotonic() - self._reported_at < _REPORT_FRESH_S
        self.accepting = False
        self.scheduler: DelayScheduler | None = None
        self.retention: Retention | None = None
        self._closed = False
        self._wake = threading.Event()  # never set: a sleep that is not the clock's

    @property
    def delays_ms(self) -> list[int]:
        """The delay levels' delays (config ``message_delay_level``), level 1 first."""
        return self._delays_ms

    # ------------------------------------------------------------------ open, step 2

    def attach_queue_ends(self, ends: dict[tuple[str, int], int], built_up_to: int) -> int:
        """Continue queue offsets from the consume queues' ends and the records past
        what they hold; appends are accepted from now on. Returns records read. A
        topics.json set aside at open is rebuilt from the queues (every topic with
        queues, as many queues as its highest queue id)."""
        if TOPICS_FILE in self._set_aside:
            self._rebuild_topics(ends)
        self.commitlog.raise_queue_offsets(ends)
        n = self.commitlog.raise_queue_offsets_from(
            max(min(built_up_to, self.commitlog.wrote_offset), self.commitlog.min_offset)
        )
        self.accepting = True
        log.info("queue_offsets_attached", queues=len(ends), records_after=n, built_up_to=built_up_to)
        return n

    def _rebuild_topics(self, ends: dict[tuple[str, int], int]) -> None:
        seen: dict[str, int] = {}
        for topic, qid in ends:
            if topic != SCHEDULE_TOPIC:
                seen[topic] = max(seen.get(topic, 0), qid + 1)
        for topic, nums in sorted(seen.items()):
            self.topics.create_or_update(topic, read_queue_nums=nums, write_queue_nums=nums)
            self.commitlog.set_queue_nums(topic, nums)
        self._set_aside.discard(TOPICS_FILE)
        log.warning("topic_configs_rebuilt", topics=len(seen), source="consume queues")

    def start_background(
        self, queues=None, retention: RetentionConfig | None = None, *, start: bool = True, builder=None, index=None
    ) -> None:
        """The retention of commitlog segments, and, in one process (MessageStore),
        delay deliveries over ``queues`` (the consume queues: ``find`` gives the delay
        topic's). There ``builder`` (the QueueBuilder) and ``index`` (the IndexService)
        are cleaned by retention in the same pass. In the services the delay scheduler
        runs in the consume-queue builder's process (it delivers through
        ``deliver``), and each builder cleans its own files once the dispatcher passes
        on the new min offset (``retention_told``). ``start`` False: made, not started
        (a store opened for one command)."""
        self.consume_queues = queues  # what DelayScheduler reads
        self.scheduler = DelayScheduler(self, self._delays_ms) if queues is not None else None
        self.retention = Retention(
            self.commitlog,
            queues if builder is not None else None,
            dispatched_offset=lambda: self.dispatched_offset,
            index=index,
            consumer_offsets=builder.consumer_offsets if builder is not None else None,
            config=retention or RetentionConfig(),
            clock=self._clock,
            on_report=self._note_retention,
        )
        if start:
            if self.scheduler is not None:
                self.scheduler.start()
            self.retention.start()

    def _note_retention(self, report: RetentionReport) -> None:
        self.losses.note(report.consumer_losses)
        forced_to = self.retention_told[1]
        if report.forced_range is not None:
            forced_to = max(forced_to, report.forced_range[1])
        self.retention_told = (max(report.min_offset_after, self.retention_told[0]), forced_to)

    @property
    def forced_deleted_to(self) -> int:
        """End of the newest range forced deletion (disk high watermark) removed: the
        consume-queue builder reports groups' losses below it as forced."""
        return self.retention_told[1]

    # ------------------------------------------------------------------ writes

    def append(self, batch: MessageBatch) -> AppendResult:
        """A producer's append (delayed messages go to the delay topic first); what a
        producer may not send raises first (``messages.check_client_batch``: reserved
        topics, transaction bits, the topic's write perm, ...), then the message rules
        every door applies (``message_rules.check_batch``); see CommitLog.append."""
        self._check_accepting()
        table = self.topic_table
        ids = check_client_batch(batch, max_queue_id=self.config.max_queue_id, perm_of=self.topics.perm_of, table=table)
        plain = ids is not None and ids.plain
        columns = None if ids is None or plain else table.columns(ids)
        message_rules.check_batch(batch, self.topics.get, self._clock.now_ms(), columns=columns, plain=plain)
        out = message_rules.with_fifo_queues(batch, self._write_queues_of)  # one group, one queue
        self._hold_back_for_dispatch()
        out = rewrite_delayed(out, len(self._delays_ms), self._pick_queue)
        # The ids still say the topics unless a DELAY level sent some to the delay topic.
        return self.commitlog.append(out, topic_ids=ids if out.topics is batch.topics else None)

    def _write_queues_of(self, topic: str) -> int:
        config = self.topics.get(topic)
        return self.config.default_queue_nums if config is None else config.write_queue_nums

    def append_encoded(self, batch: EncodedBatch) -> AppendResult:
        """A producer's batch as records it encoded itself (encoded_batch.parse_encoded
        checked their layout, properties and sizes); the producer rules of ``append``
        apply to its columns: topics, transaction bits, queue ids, and the message rules
        to its records (``message_rules.check_encoded``)."""
        self._check_accepting()
        table = self.topic_table
        found = table.sendable_ids(batch.topics, lambda names: check_send_topics(names, self.topics.perm_of))
        tids = found.ids
        ids = BatchTopics(None, int(tids[0])) if len(tids) == 1 else BatchTopics(tids[batch.topic_codes], -1)
        check_no_transaction(batch.sysflags)
        check_queue_ids(batch.queue_ids, self.config.max_queue_id)
        message_rules.check_encoded(
            batch.data,
            batch.props_at,
            batch.props_len,
            batch.marks,
            batch.topics,
            batch.topic_codes,
            batch.queue_ids,
            self.topics.get,
            self._clock.now_ms(),
            columns=None if found.plain else table.columns(ids),
            plain=found.plain,
        )
        self._hold_back_for_dispatch()
        return self.commitlog.append_encoded(batch, topic_ids=ids)

    def deliver(self, batch: MessageBatch) -> AppendResult:
        """A delay scheduler's delivery (DeliverDelayed): appended as given, no DELAY
        rewrite and no producer checks (the scheduler checked the real topic and queue
        and set SCHEDULE_SOURCE); refused until appends are accepted."""
        self._check_accepting()
        return self.commitlog.append(batch)

    def _check_accepting(self) -> None:
        if self._closed:
            raise StoreClosedError(f"store at {self.store_dir} is closed")
        if not self.accepting:
            raise StoreNotWritableError(
                "the commitlog waits for the consume queues' ends before appends", cause="recovering"
            )

    def _hold_back_for_dispatch(self) -> None:
        """Back-pressure: while the dispatcher is more than ``max_dispatch_lag_bytes``
        behind, appends wait (up to a second at a time) until it is half that. Without
        it an appender outruns dispatch (in one process it takes nearly all of the GIL)
        and consume queues fall ever further behind."""
        limit = self.config.max_dispatch_lag_bytes
        if self.dispatch_lag <= limit or not self.dispatch_active():  # the usual case
            return
        deadline = self._clock.monotonic() + 1.0
        while self.dispatch_lag > limit // 2 and self.dispatch_active() and self._clock.monotonic() < deadline:
            self._wake.wait(0.0005)

    @property
    def dispatch_lag(self) -> int:
        """Bytes the dispatcher may hand out but has not yet reported dispatched."""
        return max(0, self.confirm_offset - self.dispatched_offset)

    def update_topic(
        self,
        topic: str,
        *,
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
        perm: int | None = None,
        message_type: MessageType | str | None = None,
    ):
        """Create a topic's config or change what is given of it; every argument left
        None keeps the topic's value (a new topic: the defaults), as
        TopicConfigs.create_or_update."""
        tc = self.topics.create_or_update(
            topic,
            read_queue_nums=read_queue_nums,
            write_queue_nums=write_queue_nums,
            perm=perm,
            message_type=message_type,
        )
        self.commitlog.set_queue_nums(topic, tc.write_queue_nums)
        return tc

    # ------------------------------------------------------------------ progress of the builders

    @property
    def confirm_offset(self) -> int:
        """How far records may be handed out: flushed under sync flush, else written;
        in a replica's store never past the replicas' confirm offset (mqstore.store.ha)."""
        cl = self.commitlog
        local = cl.flushed_offset if self.config.flush_mode is FlushMode.SYNC else cl.wrote_offset
        replicated = cl.replica_confirm_offset
        return local if replicated is None else min(local, replicated)

    def note_dispatched(self, offset: int) -> None:
        """The dispatcher reports: everything below ``offset`` is in both builders."""
        self._reported_at = self._clock.monotonic()
        if offset > self.dispatched_offset:
            self.dispatched_offset = min(offset, self.commitlog.wrote_offset)

    def note_derived(self, kind: str, durable_offset: int, timestamp: int) -> int:
        """A builder made its files durable below ``durable_offset`` (newest store time
        ``timestamp``): the checkpoint's logics/index timestamp moves, and
        config/derivedOffset.json says the minimum over the builders."""
        if kind not in self._durable:
            raise ValueError(f"kind must be one of {sorted(self._durable)}, got {kind!r}")
        if timestamp > 0:
            if kind == "consume_queue":
                self.commitlog.note_derived_progress(logics_timestamp=timestamp)
            else:
                self.commitlog.note_derived_progress(index_timestamp=timestamp)
        with self._lock:
            self._durable[kind] = max(durable_offset, 0)
            known = [v for v in self._durable.values() if v is not None]
            low = min(known) if len(known) == len(self._durable) else None
            if low is not None:
                write_durable_offset(self.store_dir, min(low, self.commitlog.wrote_offset))
        return low if low is not None else -1

    def redispatch_from(self) -> int:
        """Where a builder that did not stop cleanly dispatches again from (the
        derived files' durable offset, else the start of recovery's walk)."""
        cl = self.commitlog
        return redispatch_from(
            self.store_dir,
            clean=False,
            wrote_offset=cl.wrote_offset,
            min_offset=cl.min_offset,
            start_offset=self.start_offset,
        )

    def recovery_facts(self) -> dict:
        """What the builders recover against (CommitLogService.GetRecovery)."""
        rec = self.commitlog.recovery
        return {
            "clean_shutdown": rec.clean_shutdown,
            "start_offset": self.start_offset,
            "min_offset": self.commitlog.min_offset,
            "wrote_offset": self.commitlog.wrote_offset,
            "redispatch_from": self.redispatch_from(),
            "index_msg_timestamp": self.index_msg_timestamp,
            "queue_offsets": rec.queue_offsets,
        }

    # ------------------------------------------------------------------ lifecycle

    def stopped_loops(self) -> dict[str, str]:
        """Background loops (delay scheduler, retention, the commitlog's flusher) that
        stopped while the store is open: ``{name: why}``; empty while all run. The
        shard's health is NOT_SERVING and its status names them while any has."""
        if self._closed:
            return {}
        return stopped_loops(self.commitlog, {"delay_scheduler": self.scheduler, "retention": self.retention})

    def loop_stats(self) -> dict:
        """Counters of the background loops: deliveries, records skipped, failed passes."""
        return {
            name: part.stats()
            for name, part in (("delay_scheduler", self.scheduler), ("retention", self.retention))
            if part is not None
        }

    def status(self) -> dict:
        """Offsets, writability, queues known, the last recovery and the background
        loops (``loops``: counters; ``stopped_loops``: see there), at a glance. The keys
        are ``status --store --format json``'s output: ``wrote``, ``flushed`` and
        ``dispatched`` are the watermarks' labels there (docs/architecture.md)."""
        cl = self.commitlog
        rec = cl.recovery
        return {
            "min_offset": cl.min_offset,
            "wrote": cl.wrote_offset,
            "flushed": cl.flushed_offset,
            "writable": self.writable,
            "unwritable_cause": self.unwritable_cause,
            "queues": cl.queue_count,
            "dispatched": self.dispatched_offset,
            "progress": self.progress.as_dict(),
            "last_recovery": {
                "clean_shutdown": rec.clean_shutdown,
                "start_segment": rec.start_segment,
                "bytes_validated": rec.bytes_validated,
                "seconds": round(rec.seconds, 3),
                "truncated_at": rec.truncated_at,
            },
            "loops": self.loop_stats(),
            "stopped_loops": self.stopped_loops(),
            "write_refusals": dataclasses.asdict(cl.write_refusals()),
            "consumer_losses": [dataclasses.asdict(r) for r in self.losses.records()],
        }

    @property
    def writable(self) -> bool:
        return self.commitlog.writable

    @property
    def unwritable_cause(self) -> str | None:
        return self.commitlog.unwritable_cause

    def close(self) -> None:
        """Stop deliveries and retention, flush, write the checkpoint, release the lock."""
        if self._closed:
            return
        self._closed = True
        for part in (self.retention, self.scheduler):
            if part is not None:
                try:
                    part.stop()
                except Exception as e:  # noqa: BLE001 - logged; the commitlog still closes
                    log.error("close_step_failed", store=str(self.store_dir), step=type(part).__name__, error=str(e))
        self.commitlog.close()


__all__ = ["DERIVED_KINDS", "LogStore"]
