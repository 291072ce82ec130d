"""The whole store engine in one process (RocketMQ DefaultMessageStore):
CommitLog, reput dispatcher, consume queues and (when the index is enabled) index files.

Open (``load`` + ``recover`` + ``start`` in RocketMQ's words):
  1. the CommitLog recovers itself (normal or abnormal, see recovery.py);
  2. every consume queue cuts its torn tail, then every unit at or past the
     commitlog's valid end (truncateDirtyLogicFiles), and corrects its min offset;
  3. the dispatcher resumes at the point where every derived file is complete: the
     newest consume-queue unit, no later than the index's end, and after an abnormal
     exit no later than the segment abnormal recovery started from. Re-dispatching
     what already exists is harmless (queues and index skip it); missing it is not.
  4. the dispatcher catches up before ``__init__`` returns, then follows in a thread.

Watermarks: ``commitlog.wrote`` >= ``commitlog.flushed``; the dispatcher never passes
``wrote`` (async flush) or ``flushed`` (sync flush: nothing a crash can take back is
ever visible to a consumer).

Who calls what: any thread may append and read; ``close`` once, last.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import structlog

from mqstore.errors import StoreClosedError
from mqstore.formats.names import file_name_to_offset
from mqstore.store import reads
from mqstore.store.builders import (ConsumerProgress, commit_consumer_offset, record_size_reader,
                                    redispatch_from)
from mqstore.store.clock import Clock, SystemClock
from mqstore.store.commitlog import CommitLog
from mqstore.store.config import FlushMode, StoreConfig
from mqstore.store.config_files import (
    BAK_SUFFIX,
    CONSUMER_OFFSET_FILE,
    DELAY_OFFSET_FILE,
    TOPICS_FILE,
    ConsumerOffsets,
    TopicConfigs,
    inspect_config_file,
    parse_delay_levels,
    write_derived_offset,
)
from mqstore.store.consume_queues import CONSUME_QUEUE_DIR, ConsumeQueues
from mqstore.store.dispatch import ReputLoop
from mqstore.store.index_service import IndexService
from mqstore.store.layout import resolve_layout
from mqstore.store.local_ports import LocalPorts, LocalReads, PullResult, RawPullResult
from mqstore.store.log_store import stopped_loops
from mqstore.store.lockfile import BUILDER_KINDS, StoreLock, builder_files, last_exit_was_clean, remove_abort_marker
from mqstore.store.mapped_file import fsync_dir
from mqstore.store.reads import QueueStatus
from mqstore.store.recovery import RecoveryProgress
from mqstore.store.retention import Retention, RetentionConfig
from mqstore.store.schedule import SCHEDULE_TOPIC, DelayScheduler, QueuePicker, rewrite_delayed
from mqstore.store.messages import AppendResult, MessageBatch, check_client_batch

log = structlog.get_logger(__name__)


class MessageStore(LocalReads):
    """See the module docstring."""

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
        self.store_dir = Path(store_dir)
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.config = cfg = resolve_layout(self.store_dir, config or StoreConfig())
        self._clock = clock or SystemClock()
        self.progress = progress or RecoveryProgress()  # readable from other threads while this opens
        # With consume queues on disk the queue-offset table comes from them (after the
        # catch-up dispatch too), so recovery reads only the commitlog after the checkpoint.
        has_queues = any((self.store_dir / CONSUME_QUEUE_DIR).glob("*/*"))
        self.commitlog = CommitLog(self.store_dir, cfg, clock=self._clock, queue_offsets_from_derived=has_queues,
                                   progress=self.progress)  # fmt: skip
        self._closed = False
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        self._builder_locks: list[StoreLock] = []
        try:
            # The services run consume queues and index in builder processes, each with its
            # own lock and abort marker: hold those locks too, and after a builder that
            # did not stop cleanly, recover the derived files as after a crash.
            self._derived_clean = self.commitlog.recovery.clean_shutdown
            for kind in BUILDER_KINDS:
                lock_name, abort_name = builder_files(kind)
                self._builder_locks.append(StoreLock(self.store_dir, lock_name))
                self._derived_clean &= last_exit_was_clean(self.store_dir, abort_name)
            unusable = self._set_aside_unusable_configs()
            self.consumer_offsets = ConsumerOffsets(self.store_dir)
            self.topics = TopicConfigs(self.store_dir, clock=self._clock)
            self._pick_queue = QueuePicker(self.topics, cfg.default_queue_nums)
            for name, tc in self.topics.all().items():
                self.commitlog.set_queue_nums(name, tc.write_queue_nums)
            self.consume_queues = ConsumeQueues(
                self.store_dir, file_bytes=cfg.consume_queue_file_bytes, max_open_files=cfg.max_open_queue_files
            )
            self.progress.set_phase("consume_queues")
            self.consume_queues.load(repair=True)
            self._rebuild_configs(unusable)
            rec = self.commitlog.recovery
            start = file_name_to_offset(rec.start_segment) if rec.start_segment else 0
            self.consume_queues.recover(self.commitlog, verify_tail=not self._derived_clean, check_from=start,
                                        deep_from=self._redispatch_from())  # fmt: skip
            # Queue offsets continue from the consume queues too (RocketMQ takes them from
            # there): after retention removed every record of a queue, the segments alone
            # would restart it at 0.
            self.commitlog.raise_queue_offsets({(cq.topic, cq.queue_id): cq.max_offset for cq in self.consume_queues.all()})
            sinks = [self.consume_queues]
            self.index: IndexService | None = None
            if cfg.message_index_enable:
                self.index = IndexService(self.store_dir, hash_slots=cfg.index_hash_slots,
                                          max_entries=cfg.index_max_entries, clock=self._clock)  # fmt: skip
                self.index.load(self._derived_clean, self.commitlog.checkpoint.index_msg_timestamp,
                                repair=True)  # fmt: skip
                # After a crash, entries past the last thorough flush may be torn: cut them,
                # re-dispatch (from there) puts them again.
                self.index.truncate(min(self._redispatch_from(), self.commitlog.wrote))
                sinks.append(self.index)
            self._ports = LocalPorts(self.commitlog, self.consume_queues, self.index, self.consumer_offsets,
                                     perm_of=self.topics.perm_of)  # fmt: skip
            reput_from = self._resume_offset()
            limit = (lambda: self.commitlog.flushed) if cfg.flush_mode is FlushMode.SYNC else (lambda: self.commitlog.wrote)
            self._delays_ms = parse_delay_levels(cfg.message_delay_level)
            self.dispatcher = ReputLoop(self.commitlog, sinks, reput_offset=reput_from, limit=limit, delays_ms=self._delays_ms)
            self.progress.set_phase("dispatch", max(self.commitlog.wrote - reput_from, 0))
            caught_up = self.dispatcher.catch_up()
            # Queues the catch-up rebuilt (derived files moved away by a repair) raise the table too.
            self.commitlog.raise_queue_offsets({(cq.topic, cq.queue_id): cq.max_offset for cq in self.consume_queues.all()})
            log.info("dispatch_recovered", reput_from=reput_from, records=caught_up, reput_offset=self.dispatcher.reput_offset)
            self._clamp_consumer_offsets()
            self.scheduler = DelayScheduler(self, self._delays_ms)
            self.retention = Retention(
                self.commitlog, self.consume_queues, reput_offset=lambda: self.dispatcher.reput_offset,
                index=self.index, config=retention or RetentionConfig(), clock=self._clock,
                consumer_offsets=self.consumer_offsets,
            )  # fmt: skip
            self._flusher = threading.Thread(target=self._flush_loop, name="mqstore-cq-flush", daemon=True)
            self._flusher.start()
            if background_dispatch:
                self.dispatcher.start()
                self.scheduler.start()
                self.retention.start()
            for kind in BUILDER_KINDS:  # the derived files are recovered: a builder's crash is dealt with
                remove_abort_marker(self.store_dir, builder_files(kind)[1])
            self.progress.set_phase("ready")
            log.info("store_opened", recovery_seconds=round(self.commitlog.recovery.seconds, 3),
                     clean_shutdown=self.commitlog.recovery.clean_shutdown)  # fmt: skip
        except BaseException:
            self._stop.set()
            if self._flusher is not None:
                self._flusher.join()
            for part in ("index", "consume_queues"):  # whatever was opened before the failure
                if getattr(self, part, None) is not None:
                    getattr(self, part).close()
            self._release_builder_locks()
            self.commitlog.close()
            raise

    def _redispatch_from(self) -> int:
        """After a crash: the offset below which consume queues and index were durable,
        as the last thorough flush recorded it (config/derivedOffset.json); without
        that record, the segment recovery started from (RocketMQ's rule). Either way
        every record from there on is dispatched again (puts skip what is built)."""
        rec, cl = self.commitlog.recovery, self.commitlog
        start = file_name_to_offset(rec.start_segment) if rec.start_segment else -1
        return redispatch_from(self.store_dir, clean=self._derived_clean, wrote=cl.wrote, min_offset=cl.min_offset,
                               start_offset=start)  # fmt: skip

    def _resume_offset(self) -> int:
        candidates = [max(self.consume_queues.max_physical_offset(), self.commitlog.min_offset)]
        if self.index is not None:  # just past the last indexed message
            candidates.append(max(self.index.resume_offset(record_size_reader(self.commitlog)), self.commitlog.min_offset))
        if not self._derived_clean:
            candidates.append(self._redispatch_from())
        if self.consume_queues.rebuild_from is not None:  # queues recovery cut or discarded
            candidates.append(self.consume_queues.rebuild_from)
        return max(min(candidates), self.commitlog.min_offset)

    def _set_aside_unusable_configs(self) -> set[str]:
        """Config files that neither parse nor have a usable .bak would start the store
        with an empty table and stay unreadable: each is renamed to
        ``<file>.corrupt`` (and its .bak to ``<file>.bak.corrupt``), to look at later,
        and rebuilt once the store is open (``_rebuild_configs``). Returns their names."""
        out = set()
        for name in (CONSUMER_OFFSET_FILE, TOPICS_FILE, DELAY_OFFSET_FILE):
            st = inspect_config_file(self.store_dir, name)
            if st.source != "none" or st.problem is None:
                continue
            for path in (st.path, st.path.with_name(st.path.name + BAK_SUFFIX)):
                if path.exists():
                    os.replace(path, path.with_name(path.name + ".corrupt"))
            fsync_dir(st.path.parent)
            log.warning("config_file_set_aside", path=str(st.path), problem=st.problem,
                        action=f"renamed to {st.path.name}.corrupt; rebuilt")  # fmt: skip
            out.add(name)
        return out

    def _rebuild_configs(self, unusable: set[str]) -> None:
        """Write the tables of the config files ``_set_aside_unusable_configs`` moved:
        topics from the consume queues on disk (every topic with queues, as many
        queues as its highest queue id), consumer offsets empty (groups then start
        where their consumers' settings say), delay offsets by the scheduler at start."""
        if TOPICS_FILE in unusable:
            seen: dict[str, int] = {}
            for topic, qid in self.consume_queues.keys():
                if topic != SCHEDULE_TOPIC:
                    seen[topic] = max(seen.get(topic, 0), qid + 1)
            for topic, nums in sorted(seen.items()):
                self.topics.create_or_update(topic, read_queue_nums=nums, write_queue_nums=nums)
                self.commitlog.set_queue_nums(topic, nums)
            log.warning("topic_configs_rebuilt", topics=len(seen), source="consume queues")
        if CONSUMER_OFFSET_FILE in unusable:
            self.consumer_offsets.persist()

    def _clamp_consumer_offsets(self) -> None:
        """A stored consumer offset past its queue's end (a damaged consumerOffset.json
        that still parses; a queue cut by recovery) would skip the queue's next
        messages: set it to the end, as a broker corrects an overflowing pull. Runs
        once dispatch caught up, so every queue is as long as the commitlog makes it.
        ``clamped_consumer_offsets`` lists (group, topic, queue id, old, new)."""
        self.clamped_consumer_offsets: list[tuple[str, str, int, int, int]] = []
        for group in self.consumer_offsets.groups():
            for (topic, qid), offset in sorted(self.consumer_offsets.offsets(group).items()):
                cq = self.consume_queues.find(topic, qid)
                top = cq.max_offset if cq is not None else 0
                if offset > top:
                    log.warning("consumer_offset_past_end", group=group, topic=topic, queue_id=qid, offset=offset,
                                max_offset=top, action="set to the max offset")  # fmt: skip
                    try:
                        self.consumer_offsets.commit(group, topic, qid, top)
                        self.clamped_consumer_offsets.append((group, topic, qid, offset, top))
                    except ValueError as e:  # a name the store would never have written: left alone
                        log.warning("consumer_offset_left_alone", group=group, topic=topic, queue_id=qid, error=str(e))

    # ------------------------------------------------------------------ writes

    def append(self, batch: MessageBatch) -> AppendResult:
        """Append to the commitlog (see CommitLog.append); dispatch follows. Messages
        with a DELAY property go to SCHEDULE_TOPIC_XXXX first (see schedule.py).
        What a producer may not send (reserved topics, transaction bits, a topic
        without the write perm, ...: ``messages.check_client_batch``) raises before
        anything is written."""
        check_client_batch(batch, max_queue_id=self.config.max_queue_id, perm_of=self.topics.perm_of)
        self._hold_back_for_dispatch()
        return self.commitlog.append(rewrite_delayed(batch, len(self._delays_ms), self._pick_queue))

    def _hold_back_for_dispatch(self) -> None:
        """Back-pressure: while the dispatcher is more than ``max_dispatch_lag_bytes``
        behind, appends wait (up to a second at a time) until it is half that. In one
        process the appender and the dispatcher share the GIL; without this the
        appender takes nearly all of it and consume queues fall ever further behind."""
        limit = self.config.max_dispatch_lag_bytes
        d = self.dispatcher
        if d.lag <= limit or not d.running:
            return
        deadline = self._clock.monotonic() + 1.0
        while d.lag > limit // 2 and d.running and self._clock.monotonic() < deadline:
            self._stop.wait(0.0005)

    def wait_dispatched(self, timeout_s: float = 10.0) -> bool:
        """Block until everything appended before this call is in the consume queues
        and index (True), or the timeout passes (False)."""
        target = self.commitlog.flushed if self.config.flush_mode is FlushMode.SYNC else self.commitlog.wrote
        deadline = self._clock.monotonic() + timeout_s
        while self.dispatcher.reput_offset < target:
            if self.dispatcher.error is not None and not self.dispatcher.running:
                raise self.dispatcher.error  # stopped for good; a running one retries (a full disk)
            if self._clock.monotonic() > deadline:
                return False
            self._stop.wait(0.001)
        return True

    def update_topic(self, topic: str, *, read_queue_nums: int = 4, write_queue_nums: int = 4, perm: int = 6):
        """Create or change a topic's config (persisted in config/topics.json); automatic
        queue ids then spread over ``write_queue_nums`` queues."""
        tc = self.topics.create_or_update(topic, read_queue_nums=read_queue_nums, write_queue_nums=write_queue_nums, perm=perm)
        self.commitlog.set_queue_nums(topic, write_queue_nums)
        return tc

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record that ``group`` consumed (topic, queue_id) up to ``offset`` (the next
        offset to read); one past the queue's max is refused (see
        ``builders.commit_consumer_offset``)."""
        self._check_open()
        reads.check_queue(topic, queue_id)
        reads.check_offset(offset, "consumer offset")
        commit_consumer_offset(self.consume_queues, self.consumer_offsets, group, topic, queue_id, offset)

    # ------------------------------------------------------------------ lifecycle

    def _flush_loop(self) -> None:
        interval = self.config.flush_consume_queue_interval_ms / 1000
        ticks = 0
        last_thorough = self._clock.monotonic()
        while not self._stop.wait(interval):
            ticks += 1
            try:
                thorough = self._clock.monotonic() - last_thorough >= 60
                self._flush_derived(thorough=thorough)
                if thorough:
                    last_thorough = self._clock.monotonic()
            except Exception as e:  # noqa: BLE001  # a failing disk: logged; consumer offsets still persist
                log.error("derived_flush_failed", error=str(e), action="retried next interval")
            if ticks * interval >= 5:  # consumer offsets every 5 s, as RocketMQ persists them
                self.consumer_offsets.persist()
                ticks = 0

    def _flush_derived(self, *, thorough: bool = True) -> None:
        ts = self.consume_queues.last_dispatched_timestamp  # sampled before the flush, as RocketMQ does
        reput = self.dispatcher.reput_offset if thorough else None  # every record below it is in a buffer now
        self.consume_queues.flush(thorough=thorough)
        if not thorough:
            ts = 0  # some queues may hold unflushed units: the checkpoint must not claim them
        index_ts = None
        if self.index is not None:
            self.index.flush()
            index_ts = self.index.index_msg_timestamp or None
        if ts or index_ts:
            self.commitlog.note_derived_progress(logics_timestamp=ts or None, index_timestamp=index_ts)
        if reput is not None:  # consume queues and index are durable for every record below it
            write_derived_offset(self.store_dir, reput)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"store at {self.store_dir} is closed")

    @property
    def writable(self) -> bool:
        """False while appends are refused; ``unwritable_cause`` says why."""
        return self.commitlog.writable

    @property
    def unwritable_cause(self) -> str | None:
        """None, or the cause appends fail with (StoreNotWritableError.cause):
        "flush_failed", "read_only", "io_error" (until a restart) or "disk_full"
        (until space is freed). Reads work in every case."""
        return self.commitlog.unwritable_cause

    def stopped_loops(self) -> dict[str, str]:
        """Background loops that stopped while the store is open, ``{name: why}``:
        the reput dispatcher (stopped on an error it does not retry), the delay
        scheduler, retention, the commitlog's flusher (a failed sync) and the
        consume-queue flusher. Empty while all run, and before they are started."""
        if self._closed:
            return {}
        loops = {"delay_scheduler": self.scheduler, "retention": self.retention}
        out = stopped_loops(self.commitlog, loops)
        d = self.dispatcher
        if d.error is not None and not d.running and d._thread is not None:
            out["reput"] = f"stopped: {type(d.error).__name__}: {d.error}"
        if self._flusher is not None and not self._flusher.is_alive() and not self._stop.is_set():
            out["consume_queue_flush"] = "stopped"
        return out

    def status(self) -> dict:
        """What an operator (or a status endpoint) wants at a glance: the open's phase
        and progress (``progress`` is readable from another thread while the store
        opens: pass one in), whether appends are accepted and why not, the commitlog's
        offsets, the dispatch lag, the last recovery and the background loops
        (``loops``: their counters; ``stopped_loops``: see there)."""
        rec = self.commitlog.recovery
        d = self.dispatcher
        return {
            "state": "ready" if not self._closed else "closed",
            "progress": self.progress.as_dict(),
            "writable": self.writable,
            "unwritable_cause": self.unwritable_cause,
            "min_offset": self.commitlog.min_offset,
            "wrote": self.commitlog.wrote,
            "flushed": self.commitlog.flushed,
            "dispatch_lag_bytes": self.dispatcher.lag,
            "queues": len(self.consume_queues.all()),
            "last_recovery": {"clean_shutdown": rec.clean_shutdown, "start_segment": rec.start_segment,
                              "bytes_validated": rec.bytes_validated, "seconds": round(rec.seconds, 3),
                              "truncated_at": rec.truncated_at},  # fmt: skip
            "loops": {"delay_scheduler": self.scheduler.stats(), "retention": self.retention.stats(),
                      "reput": {"running": d.running, "dispatched": d.dispatched,
                                "error": None if d.error is None else str(d.error)}},  # fmt: skip
            "stopped_loops": self.stopped_loops(),
        }

    def close(self) -> None:
        """Dispatch everything, flush every file, write the checkpoint, release the lock.

        A step that fails (a failing disk under a consume queue, the index or a config
        file) is logged and the others still run, so the lock is always released; the
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

        step("retention", self.retention.stop)
        step("scheduler", self.scheduler.stop)
        step("dispatch", self.dispatcher.stop)
        self._stop.set()
        if self._flusher is not None:
            self._flusher.join()
        step("flush_derived", self._flush_derived)
        step("consumer_offsets", self.consumer_offsets.close)
        if self.index is not None:
            step("index", self.index.close)
        step("consume_queues", self.consume_queues.close)
        if failed:
            self.commitlog.mark_unclean("close:" + ",".join(failed))
        self._release_builder_locks()
        self.commitlog.close()

    def _release_builder_locks(self) -> None:
        for lock in self._builder_locks:
            lock.release()
        self._builder_locks.clear()

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["ConsumerProgress", "MessageStore", "PullResult", "QueueStatus", "RawPullResult"]
