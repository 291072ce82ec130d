"""Commitlog retention and the cleaning of derived files below it
(RocketMQ DefaultMessageStore.CleanCommitLogService + CleanConsumeQueueService).

One ``run_once(now_ms)`` does, in this order:

    1. disk usage u = disk_usage() (default: df's Use% of the commitlog's file system,
       RocketMQ's getDiskPartitionSpaceUsedPercent: writability.disk_used_ratio);
    2. expired deletion, when the local hour of ``now_ms`` is listed in ``delete_when``
       or u >= disk_max_used_ratio or u >= clean_forcibly_ratio: segments whose file
       mtime is at least ``file_reserved_hours`` old, oldest first;
    3. forced deletion, only when opted in (clean_forcibly_enable here or in the
       StoreConfig: off by default, where RocketMQ has it on) and u >= clean_forcibly_ratio:
       the oldest remaining segments although not expired, one at a time, disk usage asked
       again after each, until it is below clean_forcibly_ratio or nothing is eligible;
       at most ``max_deletes_per_run`` deletions per run for steps 2 and 3 together
       (RocketMQ DELETE_FILES_BATCH_MAX = 10; RocketMQ does not ask again and deletes
       up to 10 per run while the disk stays above the threshold). Logged as errors;
       the report names the commitlog range that went away;
    4. consume-queue files whose last unit points below the new commitlog min offset
       are deleted and every queue's min offset is corrected
       (ConsumeQueue.delete_files_below), then the index's files
       (``index.delete_files_below``), whenever the commitlog min offset moved up
       since the last run (and on the first run, so files left over from before a
       restart go too).

Never deleted: the last commitlog segment (it holds the write position) and any segment
not entirely below the dispatched offset (so the consume queues and the index
never lose a record they have not been built from).

u >= warning_ratio sets ``disk_full`` in the report and logs an error. Refusing writes
is the commitlog's own (writability.py: from StoreConfig.disk_warning_ratio until the
disk is below disk_resume_ratio), so without the opt-in a disk filled by anything
refuses new messages and never costs the acknowledged ones their place.

When forced deletion runs, every consumer group that had not read what went is
reported per queue (``consumer_losses``: a log line per group; the services keep
them for ``mqstore status``); ``forced_segments``/``forced_bytes`` count what it
deleted since the process started (``stats``, a metric).

Who calls what: one thread (``start`` runs one, or the caller's scheduler) calls
``run_once``; it may run while other threads append, dispatch and read. Stop it before
the store closes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from mqstore.errors import ConfigError
from mqstore.formats.names import offset_to_file_name
from mqstore.store import faults, writability
from mqstore.store.clock import Clock, SystemClock
from mqstore.store.commitlog import COMMITLOG_DIR, CommitLog, DeletedSegment
from mqstore.store.consume_queues import ConsumeQueues

log = structlog.get_logger(__name__)

_HOUR_MS = 3_600_000


@dataclass(frozen=True, kw_only=True)
class RetentionConfig:
    """When commitlog segments are deleted (RocketMQ MessageStoreConfig, spec section 14)."""

    file_reserved_hours: int = 72  # fileReservedTime
    delete_when: str = "04"  # deleteWhen: hours of the day, local time, ';'-separated
    disk_max_used_ratio: float = 0.75  # diskMaxUsedSpaceRatio: expired files go at any hour
    clean_forcibly_ratio: float = 0.85  # diskSpaceCleanForciblyRatio: unexpired files go too
    warning_ratio: float = 0.90  # the report's disk_full and its log line (refusing: StoreConfig.disk_warning_ratio)
    clean_forcibly_enable: bool = False  # cleanFileForciblyEnable (on in RocketMQ; opt-in here)
    max_deletes_per_run: int = 10  # DELETE_FILES_BATCH_MAX (5.x deleteFileBatchMax)
    check_interval_ms: int = 10_000  # cleanResourceInterval

    def __post_init__(self) -> None:
        if self.file_reserved_hours < 0:
            raise ConfigError(f"file_reserved_hours must be >= 0, got {self.file_reserved_hours}")
        self.delete_hours  # noqa: B018  # parses and checks delete_when
        for name in ("disk_max_used_ratio", "clean_forcibly_ratio", "warning_ratio"):
            if not 0 < getattr(self, name) <= 1:
                raise ConfigError(f"{name} must be in (0, 1], got {getattr(self, name)}")
        for name in ("max_deletes_per_run", "check_interval_ms"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)}")

    @property
    def delete_hours(self) -> frozenset[int]:
        """The hours of ``delete_when`` (RocketMQ UtilAll.isItTimeToDo: Integer.parseInt
        of each ';'-separated part, compared with the local HOUR_OF_DAY)."""
        hours = set()
        for part in self.delete_when.split(";"):
            try:
                h = int(part.strip())
            except ValueError:
                raise ConfigError(f"delete_when must be ';'-separated hours 0-23, got {self.delete_when!r}") from None
            if not 0 <= h <= 23:
                raise ConfigError(f"delete_when hour {h} is not in 0-23")
            hours.add(h)
        return frozenset(hours)


class IndexLike(Protocol):
    """What retention needs of an index (IndexService): drop files wholly below an offset."""

    def delete_files_below(self, commitlog_min_offset: int): ...


@dataclass(frozen=True)
class RetentionReport:
    """What one ``run_once`` saw and did.

    ``forced_range`` is the commitlog range [start, end) that forced deletion removed
    (None if none): records there had not expired, so consumers that had not read them
    lost them. ``queue_min_offsets`` maps each consume queue whose min offset moved to
    (before, after): a group whose committed offset in that queue is below ``after``
    lost the messages [max(offset, before), after), or [offset, after) if it had not
    reached ``before``.
    """

    now_ms: int
    disk_usage: float
    time_to_delete: bool  # the local hour is in delete_when
    space_to_delete: bool  # disk_usage >= disk_max_used_ratio
    forced: bool  # disk_usage >= clean_forcibly_ratio (and clean_forcibly_enable)
    disk_full: bool  # disk_usage >= warning_ratio
    dispatched_offset: int
    min_offset_before: int
    min_offset_after: int
    deleted: tuple[DeletedSegment, ...]
    forced_range: tuple[int, int] | None
    held_by_reput: bool  # a segment was due but not yet dispatched, so it stayed
    consume_queue_files_deleted: dict[tuple[str, int], tuple[str, ...]] = field(default_factory=dict)
    queue_min_offsets: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    index_files_deleted: tuple[str, ...] = ()
    consumer_losses: tuple[ConsumerLoss, ...] = ()  # per group: messages deleted before it read them


@dataclass(frozen=True)
class ConsumerLoss:
    """Queue offsets [from_offset, to_offset) of one queue that ``group`` had not consumed
    when retention deleted them; ``forced`` if they had not even expired (disk high
    watermark)."""

    group: str
    topic: str
    queue_id: int
    from_offset: int
    to_offset: int
    forced: bool


class ConsumerOffsetsLike(Protocol):
    def groups(self) -> list[str]: ...
    def offsets(self, group: str) -> dict[tuple[str, int], int]: ...


_CLEAN_SERIAL_UP_TO = 64  # more queues than this are cleaned by _CLEAN_THREADS threads
_CLEAN_THREADS = 16  # each queue's correction reads its first units: cold reads overlap on threads


def clean_queues_below(queues, commitlog_min: int, cq_files: dict, cq_mins: dict) -> None:
    """Delete each consume queue's files wholly below ``commitlog_min`` and move its
    min offset up; record the files deleted (``cq_files``) and the min offsets
    moved (``cq_mins``: (topic, queue id) -> (before, after)). Many queues are
    cleaned on threads: each is a read of its first units (and maybe an unlink),
    which on a cold disk waits 0.1-1 ms (400,000 queues one by one took 6 minutes)."""
    queues = list(queues)
    if len(queues) <= _CLEAN_SERIAL_UP_TO:
        _clean_each(queues, commitlog_min, cq_files, cq_mins)
        return
    parts = [({}, {}) for _ in range(_CLEAN_THREADS)]
    with ThreadPoolExecutor(_CLEAN_THREADS, thread_name_prefix="mqstore-cq-clean") as pool:
        done = [
            pool.submit(_clean_each, queues[k::_CLEAN_THREADS], commitlog_min, *parts[k]) for k in range(_CLEAN_THREADS)
        ]
        for d in done:
            d.result()
    for files, mins in parts:
        cq_files.update(files)
        cq_mins.update(mins)


def clean_all_queues(queues, commitlog_min: int, cq_files: dict, cq_mins: dict) -> None:
    """``clean_queues_below`` over every queue of a store's consume queues; a kind that
    cleans all its queues at once (rocks_queues.py: one RocksDB) does it itself."""
    clean_below = getattr(queues, "clean_below", None)
    if clean_below is not None:
        clean_below(commitlog_min, cq_files, cq_mins)
    else:
        clean_queues_below(queues.all(), commitlog_min, cq_files, cq_mins)


def _clean_each(queues, commitlog_min: int, cq_files: dict, cq_mins: dict) -> None:
    for cq in queues:
        key = (cq.topic, cq.queue_id)
        old_min = cq.min_offset
        files = cq.delete_files_below(commitlog_min)  # also corrects the min offset
        if files:
            cq_files[key] = tuple(files)
        if cq.min_offset != old_min:
            cq_mins[key] = (old_min, cq.min_offset)


def consumer_losses(
    consumer_offsets: ConsumerOffsetsLike, cq_mins: dict[tuple[str, int], tuple[int, int]], *, forced: bool
) -> tuple[ConsumerLoss, ...]:
    """Every (group, queue) whose committed offset the queue's new min offset passed:
    the messages [max(offset, old min), new min) are gone unread. Logged one line
    per group (error when forced), never silent."""
    if not cq_mins:
        return ()
    losses = []
    for group in consumer_offsets.groups():
        for (topic, qid), offset in consumer_offsets.offsets(group).items():
            moved = cq_mins.get((topic, qid))
            if moved is not None and offset < moved[1]:
                losses.append(ConsumerLoss(group, topic, qid, max(offset, moved[0]), moved[1], forced))
    by_group: dict[str, list[ConsumerLoss]] = {}
    for loss in losses:
        by_group.setdefault(loss.group, []).append(loss)
    for group, items in by_group.items():
        (log.error if forced else log.warning)(
            "unconsumed_messages_deleted",
            group=group,
            forced=forced,
            messages=sum(x.to_offset - x.from_offset for x in items),
            ranges=[f"{x.topic}-{x.queue_id}:[{x.from_offset},{x.to_offset})" for x in items[:100]],
        )
    return tuple(losses)


def _default_disk_usage(commitlog: CommitLog) -> Callable[[], float]:
    path = commitlog.store_dir / COMMITLOG_DIR
    return lambda: writability.disk_used_ratio(path)


def _local_hour(now_ms: int) -> int:
    return time.localtime(now_ms / 1000).tm_hour


class Retention:
    """Deletes old commitlog segments and the derived files below them; see the module docstring."""

    def __init__(
        self,
        commitlog: CommitLog,
        consume_queues: ConsumeQueues | None,
        *,
        dispatched_offset: Callable[[], int],
        index: IndexLike | None = None,
        config: RetentionConfig | None = None,
        clock: Clock | None = None,
        disk_usage: Callable[[], float] | None = None,
        local_hour: Callable[[int], int] = _local_hour,
        consumer_offsets: ConsumerOffsetsLike | None = None,
        on_report: Callable[[RetentionReport], None] | None = None,
    ) -> None:
        """``on_report`` is handed each pass's report by the background loop."""
        self._on_report = on_report
        self._commitlog = commitlog
        self._queues = consume_queues
        self._dispatched_offset = dispatched_offset
        self._index = index
        self.config = config or RetentionConfig()
        self._clock = clock or SystemClock()
        self._disk_usage = disk_usage or _default_disk_usage(commitlog)
        self._local_hour = local_hour
        self._consumer_offsets = consumer_offsets
        self._derived_min = 0  # commitlog min offset the derived files were last cleaned for (none point below 0)
        self._disk_full = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None  # the last failed run, if the loop hit one
        self.failures = 0  # passes that raised (each retried at the next interval)
        self.forced_segments = 0  # unexpired segments deleted since the process started (opt-in)
        self.forced_bytes = 0

    # ------------------------------------------------------------------ one pass

    def run_once(self, now_ms: int) -> RetentionReport:
        """One pass of the steps in the module docstring at wall-clock time ``now_ms``."""
        cfg = self.config
        cl = self._commitlog
        usage = self._disk_usage()
        time_up = self._local_hour(now_ms) in cfg.delete_hours
        space = usage >= cfg.disk_max_used_ratio
        forced = self.forced_enabled and usage >= cfg.clean_forcibly_ratio
        disk_full = usage >= cfg.warning_ratio
        self._note_disk_state(usage, disk_full)
        reput = self._dispatched_offset()
        before = cl.min_offset
        deleted: list[DeletedSegment] = []
        if time_up or space or forced:
            deleted += cl.delete_segments(
                older_than_ms=cfg.file_reserved_hours * _HOUR_MS,
                now_ms=now_ms,
                max_offset=reput,
                max_count=cfg.max_deletes_per_run,
            )
        forced_deleted: list[DeletedSegment] = []
        forced_stuck = False  # forced deletion wanted more but found nothing eligible
        while forced and len(deleted) < cfg.max_deletes_per_run:
            if deleted and self._disk_usage() < cfg.clean_forcibly_ratio:
                break
            got = cl.delete_segments(older_than_ms=None, now_ms=now_ms, max_offset=reput, force_count=1, max_count=1)
            if not got:
                forced_stuck = True
                break
            forced_deleted += got
            deleted += got
        forced_range = (forced_deleted[0].base_offset, forced_deleted[-1].end_offset) if forced_deleted else None
        if forced_range is not None:
            self.forced_segments += len(forced_deleted)
            self.forced_bytes += sum(d.end_offset - d.base_offset for d in forced_deleted)
            log.error(
                "commitlog_forced_deletion",
                disk_usage=round(usage, 4),
                ratio=cfg.clean_forcibly_ratio,
                segments=[d.name for d in forced_deleted],
                lost_from=forced_range[0],
                lost_to=forced_range[1],
            )
        if deleted:
            faults.hit("retention.delete")  # segments gone, derived files below them not cleaned yet
        held = (time_up or space or forced) and self._held_by_reput(now_ms, reput, forced_stuck)
        after = cl.min_offset
        cq_files: dict[tuple[str, int], tuple[str, ...]] = {}
        cq_mins: dict[tuple[str, int], tuple[int, int]] = {}
        index_files: tuple[str, ...] = ()
        if after > self._derived_min:
            index_files = self._clean_derived(after, cq_files, cq_mins)
            self._derived_min = after
        losses = self._consumer_losses(cq_mins, forced=forced_range is not None)
        if deleted:
            log.info(
                "retention_ran",
                deleted=len(deleted),
                min_offset=after,
                dispatched_offset=reput,
                disk_usage=round(usage, 4),
            )
        return RetentionReport(
            now_ms=now_ms,
            disk_usage=usage,
            time_to_delete=time_up,
            space_to_delete=space,
            forced=forced,
            disk_full=disk_full,
            dispatched_offset=reput,
            min_offset_before=before,
            min_offset_after=after,
            deleted=tuple(deleted),
            forced_range=forced_range,
            held_by_reput=held,
            consume_queue_files_deleted=cq_files,
            queue_min_offsets=cq_mins,
            index_files_deleted=index_files,
            consumer_losses=losses,
        )

    @property
    def forced_enabled(self) -> bool:
        """Whether unexpired segments may go (RetentionConfig's or StoreConfig's opt-in)."""
        return self.config.clean_forcibly_enable or getattr(self._commitlog.config, "clean_forcibly_enable", False)

    def _consumer_losses(
        self, cq_mins: dict[tuple[str, int], tuple[int, int]], *, forced: bool
    ) -> tuple[ConsumerLoss, ...]:
        if self._consumer_offsets is None:
            return ()
        return consumer_losses(self._consumer_offsets, cq_mins, forced=forced)

    def _held_by_reput(self, now_ms: int, reput: int, forced: bool) -> bool:
        """True if the oldest segment, not the last one, was due (expired, or any when
        forced) but stayed because the dispatcher has not passed its end."""
        cl = self._commitlog
        first = cl.min_offset
        end = first + cl.config.segment_bytes
        if end <= reput or end >= cl.wrote_offset:
            return False
        if not forced:
            try:
                mtime_ms = (cl.store_dir / COMMITLOG_DIR / offset_to_file_name(first)).stat().st_mtime_ns // 1_000_000
            except FileNotFoundError:
                return False
            if now_ms - mtime_ms < self.config.file_reserved_hours * _HOUR_MS:
                return False
        log.warning("retention_held_by_reput", segment=offset_to_file_name(first), dispatched_offset=reput)
        return True

    def _clean_derived(self, commitlog_min: int, cq_files: dict, cq_mins: dict) -> tuple[str, ...]:
        """Consume-queue files wholly below ``commitlog_min`` go, min offsets move up,
        then the index's files (RocketMQ CleanConsumeQueueService.deleteExpiredFiles).
        Fills ``cq_files`` and ``cq_mins``; returns the index files deleted. Without
        consume queues or index here (builders in processes of their own) each
        builder cleans its own files (``clean_queues_below``)."""
        if self._queues is not None:
            clean_all_queues(self._queues, commitlog_min, cq_files, cq_mins)
            self._queues.note_cleaned(commitlog_min)
        if self._index is None:
            return ()
        return tuple(self._index.delete_files_below(commitlog_min) or ())

    def _note_disk_state(self, usage: float, full: bool) -> None:
        if full and not self._disk_full:
            log.error("disk_full", disk_usage=round(usage, 4), ratio=self.config.warning_ratio)
        elif not full and self._disk_full:
            log.info("disk_space_ok", disk_usage=round(usage, 4))
        self._disk_full = full

    # ------------------------------------------------------------------ background loop

    def start(self) -> None:
        """Run ``run_once(clock.now_ms())`` every ``check_interval_ms`` in a daemon thread."""
        self._thread = threading.Thread(target=self._run, name="mqstore-retention", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the loop after the pass in hand (call before closing the store)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    @property
    def running(self) -> bool:
        """True while the background loop runs (started and not stopped)."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def stopped(self) -> str | None:
        """Why the loop is gone though nobody stopped it (None otherwise)."""
        if self._thread is None or self._thread.is_alive() or self._stop.is_set():
            return None
        return f"stopped: {type(self.error).__name__}: {self.error}" if self.error is not None else "stopped"

    def stats(self) -> dict:
        return {
            "running": self.running,
            "failures": self.failures,
            "forced_segments": self.forced_segments,
            "forced_bytes": self.forced_bytes,
            "error": None if self.error is None else repr(self.error),
        }

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.config.check_interval_ms / 1000):
                try:
                    report = self.run_once(self._clock.now_ms())
                    self.error = None
                    if self._on_report is not None:
                        self._on_report(report)
                except Exception as e:  # noqa: BLE001 - a failed pass is retried next interval, as RocketMQ does
                    self.error, self.failures = e, self.failures + 1
                    log.error("retention_failed", error=repr(e), failures=self.failures, action="retried next interval")
        except BaseException as e:  # noqa: BLE001
            self.error = e
            log.error("retention_stopped", exc_info=e, error=repr(e))
            # the thread ends here: ``stopped`` names it (health NOT_SERVING when served)


__all__ = ["ConsumerLoss", "IndexLike", "Retention", "RetentionConfig", "RetentionReport"]
