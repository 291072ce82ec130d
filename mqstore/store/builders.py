"""The derived-file builders on their own: consume queues (with the consumer offsets)
and the index files of a store, each opened, fed and closed apart from the
commitlog, so each can run in a process of its own (the services' builder actors).

A builder never holds the commitlog. It recovers against a ``CommitLogView``: the
commitlog's recovery facts (incarnation, clean or not, where the log starts and
ends, where derived files were last durable) and ``units_match`` for the tail
check. In one process ``LocalCommitLogView`` wraps a ``CommitLog``; the services
answer the same over gRPC (CommitLogService.GetRecovery / CheckUnits).

Each builder has its own lock file and abort marker (``lockfile.builder_files``):
it stopped cleanly only if the commitlog's open was clean *and* its own marker was
gone. Recovery then follows MessageStore's rules for that part alone:

  consume queues  load (repair), cut torn tails, units past the log's end and below
                  its start, check the last file's units against their records
                  (all of them after a crash, deep only from ``redispatch_from``);
                  the summary of queue ends written at the last thorough flush
                  (queue_ends.py) spares reading the queues it lists: trusted after
                  a clean close, a starting point after a crash (``_usable_ends``);
  index           load (after a crash files past the checkpoint's index time are
                  dropped), cut entries past ``redispatch_from``.

``progress_offset`` says where the builder stands: every record below it is in the
builder (in memory or on disk), so the dispatcher resumes at the minimum over both
builders and puts skip what is already there. ``durable_offset`` is what its files
hold for sure: every thorough flush (60 s, close) moves it and reports it through
``on_durable`` (the commitlog records it in the checkpoint and
``config/derivedOffset.json``; the next recovery after a crash re-dispatches from
there).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import structlog

from mqstore.errors import OffsetError
from mqstore.formats.consume_queue import file_bytes_for
from mqstore.formats.names import file_name_to_offset
from mqstore.store import queue_ends
from mqstore.store.clock import Clock, SystemClock
from mqstore.store.config import StoreConfig
from mqstore.store.config_files import set_aside_unusable
from mqstore.store.consume_queues import ConsumeQueues
from mqstore.store.consumer_offsets import CONSUMER_OFFSET_FILE, ConsumerOffsets
from mqstore.store.derived_offset import read_durable_offset
from mqstore.store.dispatch import DispatchBatch, IndexEntries
from mqstore.store.index_service import IndexService
from mqstore.store.layout import resolve_layout
from mqstore.store.lockfile import (
    StoreLock,
    boot_id,
    builder_files,
    create_abort_marker,
    last_exit_was_clean,
    marker_boot,
    remove_abort_marker,
)
from mqstore.store.retention import ConsumerLoss, clean_all_queues, consumer_losses
from mqstore.store.store_type import open_consume_queues

log = structlog.get_logger(__name__)

THOROUGH_FLUSH_S = 60.0  # as MessageStore: everything written out and synced, durable offset reported
CONSUMER_OFFSETS_PERSIST_S = 5.0  # RocketMQ persists consumer offsets every 5 s


@dataclass(frozen=True)
class ConsumerProgress:
    """One queue of a consumer group: what the broker has, what the group consumed."""

    topic: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    lag: int


def commit_consumer_offset(
    queues: ConsumeQueues, offsets: ConsumerOffsets, group: str, topic: str, queue_id: int, offset: int
) -> None:
    """Record that ``group`` consumed (topic, queue_id) up to ``offset`` (the next
    offset to read). An offset past the queue's max is refused: it would skip
    messages not written yet (a crash can never make an acknowledged consumer
    offset point past the end)."""
    cq = queues.find(topic, queue_id)
    top = cq.max_offset if cq is not None else 0
    if offset > top:
        raise OffsetError(f"consumer offset {offset} is past the max offset {top} of {topic}:{queue_id}")
    offsets.commit(group, topic, queue_id, offset)


def consumer_progress(queues: ConsumeQueues, offsets: ConsumerOffsets, group: str) -> list[ConsumerProgress]:
    """Per queue the group has an offset for: broker (max) offset, consumer offset, lag."""
    rows = []
    for (topic, qid), consumed in sorted(offsets.offsets(group).items()):
        cq = queues.find(topic, qid)
        broker = cq.max_offset if cq is not None else 0
        rows.append(ConsumerProgress(topic, qid, broker, consumed, max(0, broker - consumed)))
    return rows


@dataclass
class Recovered:
    queue_offsets: dict[tuple[str, int], int] = field(default_factory=dict)


class CommitLogView(Protocol):
    """What a builder needs of the commitlog it recovers against."""

    incarnation: int
    clean_shutdown: bool
    start_offset: int  # where recovery's validated walk started (-1: empty log)
    min_offset: int
    wrote_offset: int
    redispatch_from: int  # derived files were durable below it (a builder that crashed dispatches again from here)
    index_msg_timestamp: int
    recovery: Recovered  # .queue_offsets: next queue offset per queue seen by recovery's walk

    def units_match(self, phys, sizes, queue_ids, queue_offsets, **kw) -> np.ndarray: ...

    # Optional: ``record_size(offset) -> int | None``, the size of the record starting
    # there; the index builder then resumes just past its last indexed record
    # (without it, at that record's start: its keys are skipped as present).


class LocalCommitLogView:
    """A ``CommitLogView`` of a CommitLog open in this process (tests, tools)."""

    def __init__(self, commitlog, *, incarnation: int = 1) -> None:
        self._cl = commitlog
        rec = commitlog.recovery
        self.incarnation = incarnation
        self.clean_shutdown = rec.clean_shutdown
        self.start_offset = file_name_to_offset(rec.start_segment) if rec.start_segment else -1
        self.index_msg_timestamp = commitlog.checkpoint.index_msg_timestamp
        self.recovery = Recovered(dict(rec.queue_offsets))
        self.redispatch_from = redispatch_from(
            commitlog.store_dir,
            clean=False,
            wrote_offset=commitlog.wrote_offset,
            min_offset=commitlog.min_offset,
            start_offset=self.start_offset,
        )

    @property
    def min_offset(self) -> int:
        return self._cl.min_offset

    @property
    def wrote_offset(self) -> int:
        return self._cl.wrote_offset

    def units_match(self, *args, **kw) -> np.ndarray:
        return self._cl.units_match(*args, **kw)

    def record_size(self, offset: int) -> int | None:
        return record_size_reader(self._cl)(offset)


def record_size_reader(commitlog) -> Callable[[int], int | None]:
    """``offset -> size`` of the record starting there in ``commitlog`` (None if
    none does): IndexService.resume_offset's ``record_size``."""

    def size(offset: int) -> int | None:
        try:
            return commitlog.read(offset).total_size
        except OffsetError:
            return None

    return size


def redispatch_from(store_dir: Path, *, clean: bool, wrote_offset: int, min_offset: int, start_offset: int) -> int:
    """After a crash: the offset below which derived files were durable, as the last
    thorough flush recorded it (config/derivedOffset.json); without that record,
    where the commitlog's recovery walk started (RocketMQ's rule). After a clean
    exit: the write position (nothing to dispatch again)."""
    if clean:
        return wrote_offset
    durable = read_durable_offset(store_dir)
    if durable is not None and min_offset <= durable <= wrote_offset:
        return durable
    return start_offset if start_offset >= 0 else min_offset


class _Builder:
    """Lock, abort marker, flusher thread and progress, shared by both builders."""

    kind = ""

    def __init__(
        self,
        store_dir: str | Path,
        config: StoreConfig | None,
        view: CommitLogView,
        *,
        on_durable: Callable[[int, int], None] | None = None,
        clock: Clock | None = None,
        on_step: Callable[[str, int, int], None] | None = None,
    ) -> None:
        """``on_step(what, done, total)``: told what recovery does as it goes (a
        status shows it; total 0 when unknown)."""
        self._step = on_step or (lambda what, done, total: None)
        self.store_dir = Path(store_dir)
        self.config = resolve_layout(self.store_dir, config or StoreConfig())
        self.view_incarnation = view.incarnation
        self._view = view
        self._clock = clock or SystemClock()
        self._on_durable = on_durable
        lock_name, self._abort_name = builder_files(self.kind)
        self._lock_file = StoreLock(self.store_dir, lock_name)
        self.crashed = not last_exit_was_clean(self.store_dir, self._abort_name)
        # The builder's last run died with the machine still up (its marker's boot is
        # this one), or closed cleanly: its files hold every byte it wrote.
        self.same_boot = not self.crashed or marker_boot(self.store_dir, self._abort_name) in {boot_id()} - {None}
        self.clean = view.clean_shutdown and not self.crashed
        self._put_lock = threading.Lock()
        # One flush at a time: the loop's and a caller's (flush_derived, close) would
        # both write the summary of queue ends, and an older one could land last.
        self._flush_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_thorough = self._clock.monotonic()  # the flush loop's last thorough flush, or a caller's
        self._closed = False
        self.close_failed = False  # close could not make everything durable: the abort marker stays
        self.progress_offset = 0
        self.durable_offset = 0

    def _started(self, progress: int) -> None:
        self.progress_offset = progress
        self.durable_offset = progress if self.clean else 0
        create_abort_marker(self.store_dir, self._abort_name)
        self._thread = threading.Thread(target=self._flush_loop, name=f"mqstore-{self.kind}-flush", daemon=True)
        self._thread.start()
        log.info(
            "builder_opened",
            kind=self.kind,
            store=str(self.store_dir),
            clean=self.clean,
            crashed=self.crashed,
            progress_offset=progress,
        )

    def _flush_loop(self) -> None:
        interval = self.config.flush_consume_queue_interval_ms / 1000
        last_extra = self._clock.monotonic()
        while not self._stop.wait(interval):
            now = self._clock.monotonic()
            try:
                self.flush(thorough=now - self._last_thorough >= THOROUGH_FLUSH_S)
                if now - last_extra >= CONSUMER_OFFSETS_PERSIST_S:
                    self._every_few_seconds()
                    last_extra = now
            except Exception as e:  # noqa: BLE001 - a failing disk: logged, retried next interval
                log.error("builder_flush_failed", kind=self.kind, error=str(e), action="retried next interval")

    def _every_few_seconds(self) -> None:
        pass

    @property
    def stopped(self) -> str | None:
        """Why the flush loop stopped while the builder is open (None while it runs)."""
        t = self._thread
        return "stopped" if t is not None and not t.is_alive() and not self._stop.is_set() else None

    def flush(self, *, thorough: bool = True) -> None:
        with self._flush_lock:
            self._flush(thorough)

    def _flush(self, thorough: bool) -> None:
        progress = self.progress_offset  # every record below it is in a buffer now
        ts = self._write_out(thorough)
        if thorough:
            # the next is due THOROUGH_FLUSH_S after this one, whoever asked for it (a
            # caller's flush_derived just wrote every queue: another at once writes the
            # same again, at 200,000 queues seconds of the dispatcher's time)
            self._last_thorough = self._clock.monotonic()
            self.durable_offset = max(self.durable_offset, progress)
            if self._on_durable is not None:
                try:
                    self._on_durable(progress, ts)
                except Exception as e:  # noqa: BLE001 - the commitlog may be restarting; reported again next flush
                    log.warning("durable_offset_not_reported", kind=self.kind, offset=progress, error=str(e))

    def _write_out(self, thorough: bool) -> int:
        raise NotImplementedError

    def _check_gap(self, from_offset: int) -> None:
        # (retention may have taken records the builder never saw: nothing is missing below the log's start)
        if from_offset > max(self.progress_offset, self._view.min_offset):
            raise GapError(
                f"{self.kind}: a batch from commitlog offset {from_offset}, but everything is built only "
                f"up to {self.progress_offset}: it would leave a gap"
            )

    def close(self) -> None:
        """Flush everything (reported durable), release the files and the lock."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        ok = True
        try:
            self.flush(thorough=True)
        except Exception as e:  # noqa: BLE001 - the marker stays: the next open recovers as after a crash
            ok = False
            self.close_failed = True
            log.error("builder_close_flush_failed", kind=self.kind, error=str(e))
        try:
            self._close_files()
            if ok:
                remove_abort_marker(self.store_dir, self._abort_name)
        finally:
            self._lock_file.release()
            log.info("builder_closed", kind=self.kind, store=str(self.store_dir), progress_offset=self.progress_offset)

    def _close_files(self) -> None:
        raise NotImplementedError


class GapError(ValueError):
    """A batch starting past what the builder has (it would leave records out)."""


class QueueBuilder(_Builder):
    """The consume queues and consumer offsets of a store; see the module docstring."""

    kind = "consumequeue"

    def __init__(
        self,
        store_dir: str | Path,
        config: StoreConfig | None,
        view: CommitLogView,
        *,
        on_durable: Callable[[int, int], None] | None = None,
        clock: Clock | None = None,
        on_step: Callable[[str, int, int], None] | None = None,
    ) -> None:
        super().__init__(store_dir, config, view, on_durable=on_durable, clock=clock, on_step=on_step)
        cfg = self.config
        self.consume_queues = None
        try:
            unusable = set_aside_unusable(self.store_dir, (CONSUMER_OFFSET_FILE,))
            self.consumer_offsets = ConsumerOffsets(self.store_dir)
            if unusable:
                self.consumer_offsets.persist()  # empty: groups start where their consumers' settings say
            self.consume_queues = open_consume_queues(self.store_dir, cfg)  # of the store's type (store_type.py)
            self._step("loading consume queues", 0, 0)
            ends = self._usable_ends(view) if self.consume_queues.uses_queue_ends else None
            self.consume_queues.load(repair=True, ends=ends, trusted=self.clean)
            self._step("checking consume-queue tails against the commitlog", 0, 0)
            deep = view.redispatch_from if not self.clean else view.wrote_offset
            self.consume_queues.same_boot = self.same_boot  # (ConsumeQueues: no probe past its rows then)
            self.consume_queues.recover(
                view, verify_tail=not self.clean, check_from=max(view.start_offset, 0), deep_from=deep
            )
            candidates = [max(self.consume_queues.max_physical_offset(), view.min_offset)]
            if not self.clean:
                candidates.append(view.redispatch_from)
            if self.consume_queues.rebuild_from is not None:
                candidates.append(self.consume_queues.rebuild_from)
            self._min_cleaned = view.min_offset
            self._started(max(min(candidates), view.min_offset))
        except BaseException:
            if self.consume_queues is not None:
                self.consume_queues.close()
            self._lock_file.release()
            raise

    def _usable_ends(self, view: CommitLogView) -> queue_ends.QueueEnds | None:
        """The store's summary of queue ends if this open may use it, else None (the
        queues are then read from their files; the reason is logged). It must decode,
        be of this store's file size, and its queues must have been corrected against
        the commitlog's present min offset (no retention pass since, whose deletions
        it would not know). After a clean close it is trusted only if it was written
        with everything dispatched up to the commitlog's end (the close that left
        the store clean wrote it); after a crash only if it is not older than the
        point dispatch resumes from (``redispatch_from``), so every record before
        that point has its units in the queues as listed or after."""
        try:
            ends = queue_ends.read(self.store_dir)
        except FileNotFoundError:
            log.info("queue_ends_missing", store=str(self.store_dir), action="every queue read from its files")
            return None
        except (OSError, queue_ends.QueueEndsError) as e:
            log.warning(
                "queue_ends_unusable",
                store=str(self.store_dir),
                reason=str(e),
                action="every queue read from its files",
            )
            return None
        why = None
        if ends.file_bytes != file_bytes_for(self.config.consume_queue_file_bytes):
            why = f"file size {ends.file_bytes}, the store's is {file_bytes_for(self.config.consume_queue_file_bytes)}"
        elif ends.cleaned_min != view.min_offset:
            why = f"queues corrected against commitlog min offset {ends.cleaned_min}, it is {view.min_offset} now"
        elif self.clean and ends.progress_offset != view.wrote_offset:
            why = f"written at commitlog offset {ends.progress_offset}, the commitlog ends at {view.wrote_offset}"
        elif not self.clean and not view.redispatch_from <= ends.progress_offset <= view.wrote_offset:
            why = (
                f"written at commitlog offset {ends.progress_offset}, dispatch resumes from "
                f"{view.redispatch_from} and the commitlog ends at {view.wrote_offset}"
            )
        if why is not None:
            log.warning(
                "queue_ends_stale", store=str(self.store_dir), reason=why, action="every queue read from its files"
            )
            return None
        log.info(
            "queue_ends_used",
            store=str(self.store_dir),
            queues=len(ends),
            progress_offset=ends.progress_offset,
            trusted=self.clean,
        )
        return ends

    def dispatch(self, batch: DispatchBatch, from_offset: int, to_offset: int) -> None:
        """DispatchSink (a ReputLoop in this process feeds it)."""
        self.put(batch, from_offset, to_offset)

    def put(self, batch: DispatchBatch, from_offset: int, to_offset: int) -> int:
        """Units of the records [from_offset, to_offset) (commitlog order); units
        already built are skipped. Returns the progress offset."""
        with self._put_lock:
            self._check_gap(from_offset)
            if len(batch):
                self.consume_queues.dispatch(batch)
            self.progress_offset = max(self.progress_offset, to_offset)
            return self.progress_offset

    def _write_out(self, thorough: bool) -> int:
        ts = self.consume_queues.last_dispatched_timestamp  # sampled before the flush, as RocketMQ does
        if thorough:
            self.consume_queues.flush(thorough=True, progress=self.progress_offset)
            return ts
        self.consume_queues.write_behind(everything=False)
        return 0

    def _every_few_seconds(self) -> None:
        self.consumer_offsets.persist()

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """See ``commit_consumer_offset``."""
        commit_consumer_offset(self.consume_queues, self.consumer_offsets, group, topic, queue_id, offset)

    def consumer_progress(self, group: str) -> list[ConsumerProgress]:
        return consumer_progress(self.consume_queues, self.consumer_offsets, group)

    def clamp_consumer_offsets(self) -> list[tuple[str, str, int, int, int]]:
        """A stored consumer offset past its queue's end (a damaged consumerOffset.json
        that still parses; a queue cut by recovery) would skip the queue's next
        messages: set it to the end, as a broker corrects an overflowing pull. Call it
        once the builder has caught up with the commitlog of its open, so every queue
        is as long as the commitlog makes it. Returns (group, topic, queue id, old, new)."""
        clamped = []
        for group in self.consumer_offsets.groups():
            for (topic, qid), offset in sorted(self.consumer_offsets.offsets(group).items()):
                cq = self.consume_queues.find(topic, qid)
                top = cq.max_offset if cq is not None else 0
                if offset <= top:
                    continue
                log.warning(
                    "consumer_offset_past_end",
                    group=group,
                    topic=topic,
                    queue_id=qid,
                    offset=offset,
                    max_offset=top,
                    action="set to the max offset",
                )
                try:
                    self.consumer_offsets.commit(group, topic, qid, top)
                    clamped.append((group, topic, qid, offset, top))
                except ValueError as e:  # a name the store would never have written: left alone
                    log.warning("consumer_offset_left_alone", group=group, topic=topic, queue_id=qid, error=str(e))
        return clamped

    def clean_below(self, commitlog_min: int, *, forced: bool = False) -> tuple[ConsumerLoss, ...]:
        """Retention's part for the consume queues: files wholly below the commitlog's
        new min offset go, min offsets move up; groups that had not consumed what went
        are reported (and logged; ``forced``: the messages had not expired)."""
        if commitlog_min <= self._min_cleaned:
            return ()
        cq_files: dict = {}
        cq_mins: dict = {}
        clean_all_queues(self.consume_queues, commitlog_min, cq_files, cq_mins)
        self.consume_queues.note_cleaned(commitlog_min)
        self._min_cleaned = commitlog_min
        if cq_files:
            log.info("consume_queue_files_deleted", queues=len(cq_files), commitlog_min_offset=commitlog_min)
        return consumer_losses(self.consumer_offsets, cq_mins, forced=forced)

    def _close_files(self) -> None:
        try:
            self.consumer_offsets.close()
        finally:
            self.consume_queues.close()


_NO_ENTRIES = IndexEntries(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))


class IndexBuilder(_Builder):
    """The index files of a store; see the module docstring."""

    kind = "index"

    def __init__(
        self,
        store_dir: str | Path,
        config: StoreConfig | None,
        view: CommitLogView,
        *,
        on_durable: Callable[[int, int], None] | None = None,
        clock: Clock | None = None,
        on_step: Callable[[str, int, int], None] | None = None,
    ) -> None:
        super().__init__(store_dir, config, view, on_durable=on_durable, clock=clock, on_step=on_step)
        cfg = self.config
        self.index = IndexService(
            self.store_dir, hash_slots=cfg.index_hash_slots, max_entries=cfg.index_max_entries, clock=self._clock
        )
        try:
            self._step("loading index files", 0, 0)
            self.index.load(self.clean, view.index_msg_timestamp, repair=True)
            candidates = []
            # Entries past the log's end point at nothing (a log cut by recovery or repair);
            # after a crash, entries past the last thorough flush may be torn: cut them,
            # they are put again (in time proportional to the entries cut).
            cut = view.wrote_offset if self.clean else min(view.redispatch_from, view.wrote_offset)
            self._step(f"cutting index entries past commitlog offset {cut}", 0, 0)
            report = self.index.truncate(cut)
            self._step(f"cut index entries past commitlog offset {cut}", report.dropped_entries, report.dropped_entries)
            if not self.clean:
                candidates.append(view.redispatch_from)
            # Just past the last indexed record (puts skip what the files hold, so a
            # resume below that re-indexes nothing).
            candidates.append(max(self.index.resume_offset(getattr(view, "record_size", None)), view.min_offset))
            self._started(max(min(candidates), view.min_offset))
        except BaseException:
            self.index.close()
            self._lock_file.release()
            raise

    def dispatch(self, batch: DispatchBatch, from_offset: int, to_offset: int) -> None:
        """DispatchSink (a ReputLoop in this process feeds it)."""
        self.put(batch.index_entries() if len(batch) else _NO_ENTRIES, from_offset, to_offset)

    def put(self, entries: IndexEntries, from_offset: int, to_offset: int) -> tuple[int, int, int]:
        """Keys of the records [from_offset, to_offset); (indexed, skipped, progress)."""
        with self._put_lock:
            self._check_gap(from_offset)
            indexed = skipped = 0
            if len(entries[0]):
                res = self.index.put(entries)
                indexed, skipped = res.indexed, res.skipped
            self.progress_offset = max(self.progress_offset, to_offset)
            return indexed, skipped, self.progress_offset

    def _write_out(self, thorough: bool) -> int:
        if not thorough:
            return 0
        self.index.flush()
        return self.index.index_msg_timestamp

    def clean_below(self, commitlog_min: int, *, forced: bool = False) -> tuple[str, ...]:
        """Retention's part for the index: files wholly below the commitlog's min go."""
        return tuple(self.index.delete_files_below(commitlog_min) or ())

    def _close_files(self) -> None:
        self.index.close()


__all__ = [
    "CommitLogView",
    "ConsumerProgress",
    "GapError",
    "Recovered",
    "IndexBuilder",
    "LocalCommitLogView",
    "QueueBuilder",
    "commit_consumer_offset",
    "consumer_progress",
    "record_size_reader",
    "redispatch_from",
]
