"""Delay-level messages (RocketMQ ScheduleMessageService).

A message with property DELAY = L (1..levels) is stored in ``SCHEDULE_TOPIC_XXXX``
queue L-1 with its real topic and queue in REAL_TOPIC / REAL_QID; its consume-queue
tagsCode is the deliver time (store time + delay of level L). ``DelayScheduler``
walks each level's queue and, for every unit whose deliver time has come, appends
the message again to its real topic (without DELAY), then records its progress in
``config/delayOffset.json``.

No delivery is lost or repeated across a restart: every delivered message carries
``SCHEDULE_SOURCE = "<level>:<queue offset>"``, and on start the scheduler scans the
commitlog from the position saved with the offsets for such messages, so deliveries
made after the last persist advance the progress instead of being made twice.

A unit the scheduler can not deliver is skipped, never retried and never allowed to
stop the loop: a record without a DELAY level or REAL_TOPIC (delivering it would write
it into SCHEDULE_TOPIC_XXXX again, every second, forever), a REAL_TOPIC that is no
legal topic or one only the store writes, a REAL_QID that is no queue id, a record that
can not be read, or one the commitlog refuses. Each is logged
(``delay_record_skipped``: level, queue offset, commitlog offset, reason) and counted
(``skipped``); progress moves past it, so every later delayed message is delivered,
also on a store that already holds such a record (written before producers were
refused the schedule topic). A pass that fails otherwise (a full disk, the consume
queues not answering) is logged (``delay_delivery_failed``), counted (``failures``)
and retried with a growing pause (at most 5 s); ``running`` is False only once the
thread is gone, and ``stopped`` then says why.

Who calls what: the store calls ``rewrite_delayed`` on its append path (any thread);
one scheduler thread calls ``deliver_due``; ``start``/``stop`` by the store.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import structlog

from mqstore.errors import CorruptFileError, DecodeError, InvalidMessageError, OffsetError
from mqstore.formats.message import TRANSACTION_TYPE_MASK
from mqstore.formats.names import check_topic
from mqstore.formats.properties import DELAY, REAL_QID, REAL_TOPIC, SCHEDULE_SOURCE, locate_properties
from mqstore.store.delay_offsets import DelayOffsets
from mqstore.store.messages import AUTO_QUEUE, NOT_ALLOWED_SEND_TOPICS, MessageBatch

log = structlog.get_logger(__name__)

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
_MAX_BACKOFF_S = 5.0
_CLEARED = {DELAY, REAL_TOPIC, REAL_QID, SCHEDULE_SOURCE, "UNIQ_KEY", "TAGS", "KEYS"}


def delay_level_of(props: dict | None) -> int:
    """The DELAY level a message asks for (0: none); a malformed value counts as none."""
    if not props or DELAY not in props:
        return 0
    try:
        return max(0, int(props[DELAY]))
    except (TypeError, ValueError):
        return 0


def rewrite_delayed(batch: MessageBatch, levels: int, pick_queue: Callable[[str], int]) -> MessageBatch:
    """Send messages with a DELAY level to SCHEDULE_TOPIC_XXXX queue level-1 (the level
    clamped to ``levels``), keeping their real topic and queue in REAL_TOPIC/REAL_QID.
    Transaction prepared/rollback messages are left alone, as RocketMQ does."""
    props = batch.properties
    if props is None or isinstance(props, dict):
        want = [delay_level_of(props)] * len(batch) if props is not None else []
    else:
        want = [delay_level_of(p) for p in props]
    if not any(want):
        return batch
    n = len(batch)
    topics = [batch.topics] * n if isinstance(batch.topics, str) else list(batch.topics)
    qids = np.broadcast_to(
        np.asarray(AUTO_QUEUE if batch.queue_ids is None else batch.queue_ids, np.int64), (n,)
    ).copy()
    sysflags = np.broadcast_to(np.asarray(batch.sysflags, np.int64), (n,))
    new_props = [dict(p or {}) for p in (props if isinstance(props, list) else [props] * n)]
    for i, level in enumerate(want):
        if level <= 0 or (int(sysflags[i]) & TRANSACTION_TYPE_MASK) in (0x4, 0xC):
            continue
        level = min(level, levels)
        real_q = int(qids[i]) if qids[i] != AUTO_QUEUE else pick_queue(topics[i])
        new_props[i].update({DELAY: str(level), REAL_TOPIC: topics[i], REAL_QID: str(real_q)})
        topics[i], qids[i] = SCHEDULE_TOPIC, level - 1
    return MessageBatch(
        topics=topics,
        bodies=batch.bodies,
        queue_ids=qids,
        tags=batch.tags,
        keys=batch.keys,
        unique_keys=batch.unique_keys,
        properties=new_props,
        flags=batch.flags,
        sysflags=batch.sysflags,
        born_timestamps=batch.born_timestamps,
        born_hosts=batch.born_hosts,
        reconsume_times=batch.reconsume_times,
        prepared_transaction_offsets=batch.prepared_transaction_offsets,
    )


class QueuePicker:
    """``rewrite_delayed``'s ``pick_queue``: a real queue for a delayed message sent
    with an automatic queue id, round robin over the topic's write queues (from
    ``topics``, a TopicConfigs; ``default_nums`` for a topic without a config)."""

    def __init__(self, topics, default_nums: int) -> None:
        self._topics = topics
        self._default_nums = default_nums
        self._next: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, topic: str) -> int:
        tc = self._topics.get(topic)
        nums = tc.write_queue_nums if tc is not None else self._default_nums
        with self._lock:
            i = self._next.get(topic, 0)
            self._next[topic] = i + 1
        return i % nums


def deliver_times(store_timestamps: np.ndarray, levels: np.ndarray, delays_ms: list[int]) -> np.ndarray:
    """tagsCode of schedule-topic units: store time + the level's delay (1 s if unknown)."""
    table = np.array([1000, *delays_ms], np.int64)
    lv = np.minimum(np.maximum(levels, 0), len(delays_ms))
    return store_timestamps + np.where(levels > 0, table[lv], 1000)


class DelayScheduler:
    """Delivers due delay-level messages; see the module docstring."""

    def __init__(self, store, delays_ms: list[int], *, interval_s: float = 0.1, batch: int = 1000) -> None:
        self._store = store
        self._delays = delays_ms
        self._offsets = DelayOffsets(store.store_dir)
        self._interval = interval_s
        self._batch = batch
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._max_queue_id = store.config.max_queue_id
        self.delivered = 0
        self.skipped = 0  # units never delivered: see the module docstring
        self.failures = 0  # passes that raised (retried)
        self.error: BaseException | None = None  # the last failed pass (None after a good one)
        self._recover_progress()

    def progress(self, level: int) -> int:
        return self._offsets.get(level)

    def _recover_progress(self) -> None:
        """Advance each level past deliveries made after the last persisted offsets."""
        cl = self._store.commitlog
        pos = max(self._offsets.commitlog_offset, cl.min_offset)
        found = 0
        while pos < cl.wrote_offset:
            try:
                chunk = cl.scan(pos)
            except CorruptFileError:
                if pos == cl.min_offset:
                    raise
                # delayOffset.json names no record start (damaged): look at every record instead.
                log.warning(
                    "delay_progress_position_invalid", commitlog_offset=pos, action="scanned from the commitlog's start"
                )
                pos = cl.min_offset
                continue
            if len(chunk.sizes):
                f = chunk.fields
                ((s, e),) = locate_properties(
                    chunk.buffer, f.properties_at, f.properties_len, [SCHEDULE_SOURCE.encode()]
                )
                for a, b in zip(s.tolist(), e.tolist()):
                    if a >= 0:
                        try:  # a producer could set it before the store refused that: never trusted blindly
                            level, qo = (int(x) for x in bytes(chunk.buffer[a:b]).split(b":"))
                        except ValueError:
                            level, qo = 0, -1
                        if not 1 <= level <= len(self._delays) or qo < 0:
                            log.warning(
                                "delay_source_ignored", value=bytes(chunk.buffer[a:b])[:64].decode("utf-8", "replace")
                            )
                            continue
                        if qo + 1 > self._offsets.get(level):
                            self._offsets.set(level, qo + 1)
                            found += 1
            pos = chunk.next_offset
        if found:
            log.info("delay_progress_recovered", deliveries_after_last_persist=found)
        self._offsets.set_commitlog_offset(cl.wrote_offset)
        self._offsets.persist()

    def deliver_due(self, now_ms: int) -> int:
        """Deliver every unit whose deliver time is <= ``now_ms`` (skipping what can not
        be delivered); returns how many were delivered."""
        total = 0
        for level in range(1, len(self._delays) + 1):
            cq = self._store.consume_queues.find(SCHEDULE_TOPIC, level - 1)
            if cq is None:
                continue
            while True:
                start = max(self._offsets.get(level), cq.min_offset)
                units = cq.read_units(start, self._batch)
                due = int(np.argmax(units["tags_code"] > now_ms)) if (units["tags_code"] > now_ms).any() else len(units)
                if due == 0:
                    break
                items = []
                for i, off in enumerate(units["commitlog_offset"][:due].tolist()):
                    rec, why = self._deliverable(int(off))
                    if why is None:
                        items.append((start + i, rec))
                    else:
                        self._skip(level, start + i, int(off), why)
                delivered = 0
                for chunk in _by_bytes(items, DELIVERY_BYTES):  # one append (one RPC when served) each
                    delivered += self._append(level, chunk)
                    self._offsets.set(level, chunk[-1][0] + 1)  # a later chunk that fails does not repeat this one
                self._offsets.set(level, start + due)
                self._offsets.set_commitlog_offset(self._store.commitlog.wrote_offset)
                self._offsets.persist()
                total += delivered
        self.delivered += total
        return total

    def _deliverable(self, offset: int):
        """(record, None) for a schedule-topic record that can be delivered, else
        (None, why not) (see the module docstring)."""
        try:
            r = self._store.commitlog.read(offset)
        except (OffsetError, CorruptFileError, DecodeError) as e:
            return None, f"unreadable: {e}"
        p = r.properties
        if delay_level_of(p) <= 0:
            return None, "no DELAY level (it would be delivered into SCHEDULE_TOPIC_XXXX again)"
        topic, qid = p.get(REAL_TOPIC), p.get(REAL_QID)
        if not topic:
            return None, "no REAL_TOPIC (it would be delivered into SCHEDULE_TOPIC_XXXX again)"
        try:
            check_topic(topic)
        except InvalidMessageError as e:
            return None, f"REAL_TOPIC: {e}"
        if topic in NOT_ALLOWED_SEND_TOPICS:
            return None, f"REAL_TOPIC {topic!r} is a topic only the store writes"
        if qid is None or not qid.isascii() or not qid.isdigit() or not 0 <= int(qid) <= self._max_queue_id:
            return None, f"REAL_QID {qid!r} is not a queue id in 0..{self._max_queue_id}"
        return r, None

    def _skip(self, level: int, queue_offset: int, offset: int, why: str) -> None:
        self.skipped += 1
        log.error(
            "delay_record_skipped",
            level=level,
            queue_offset=queue_offset,
            commitlog_offset=offset,
            reason=why[:300],
            skipped=self.skipped,
        )

    def _append(self, level: int, items) -> int:
        """Deliver (queue offset, record) pairs in one append; if the commitlog refuses
        the batch (a record it can not take), one by one, skipping what it refuses.
        Returns how many were delivered."""
        try:
            self._store.commitlog.append(self._real_messages(items, level))
            return len(items)
        except InvalidMessageError:
            pass
        done = 0
        for qo, r in items:
            try:
                self._store.commitlog.append(self._real_messages([(qo, r)], level))
                done += 1
            except InvalidMessageError as e:
                self._skip(level, qo, r.physical_offset, f"refused by the commitlog: {e}")
        return done

    @staticmethod
    def _real_messages(items, level: int) -> MessageBatch:
        """The batch that delivers (queue offset, record) pairs to their real topics."""
        records = [r for _, r in items]
        props = []
        for qo, r in items:
            p = {k: v for k, v in r.properties.items() if k not in _CLEARED}
            p[SCHEDULE_SOURCE] = f"{level}:{qo}"
            props.append(p)
        return MessageBatch(
            topics=[r.properties[REAL_TOPIC] for r in records],
            bodies=[r.body for r in records],
            queue_ids=[int(r.properties[REAL_QID]) for r in records],
            tags=[r.tags for r in records],
            keys=[r.keys for r in records],
            unique_keys=[r.unique_key for r in records],
            properties=props,
            flags=[r.flag for r in records],
            sysflags=[r.sysflag & ~0x30 for r in records],
            born_timestamps=[r.born_timestamp for r in records],
            born_hosts=[r.born_host for r in records],
            reconsume_times=[r.reconsume_times for r in records],
        )

    def _mark_scanned(self) -> None:
        """Persist the commitlog position below which every delivery is already counted
        in the offsets (this thread is the only one that appends deliveries, and it is
        between two), so a restart scans only what came after it, not the whole log."""
        wrote = self._store.commitlog.wrote_offset
        if wrote != self._offsets.commitlog_offset:
            self._offsets.set_commitlog_offset(wrote)
            self._offsets.persist()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="mqstore-schedule", daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        """True while the delivery thread runs (started and not stopped)."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def stopped(self) -> str | None:
        """Why the thread is gone though nobody stopped it (None while it runs, before
        start and after stop)."""
        if self._thread is None or self._thread.is_alive() or self._stop.is_set():
            return None
        return f"stopped: {type(self.error).__name__}: {self.error}" if self.error is not None else "stopped"

    def stats(self) -> dict:
        return {
            "running": self.running,
            "delivered": self.delivered,
            "skipped": self.skipped,
            "failures": self.failures,
            "error": None if self.error is None else str(self.error),
        }

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._mark_scanned()
        self._offsets.persist()

    def _run(self) -> None:
        clock = self._store._clock
        last_mark = clock.monotonic()
        pause = self._interval
        try:
            while not self._stop.wait(pause):
                try:
                    self.deliver_due(clock.now_ms())
                    if clock.monotonic() - last_mark >= _MARK_EVERY_S:
                        self._mark_scanned()
                        last_mark = clock.monotonic()
                    self.error, pause = None, self._interval
                except Exception as e:  # noqa: BLE001 - logged, counted, retried: the loop never ends on it
                    self.error, self.failures = e, self.failures + 1
                    pause = min(max(pause * 2, 0.1), _MAX_BACKOFF_S)
                    log.error(
                        "delay_delivery_failed",
                        error=f"{type(e).__name__}: {e}",
                        failures=self.failures,
                        action=f"retried in {pause:.1f} s",
                    )
        except BaseException as e:  # noqa: BLE001
            self.error = e
            log.error("delay_scheduler_stopped", exc_info=e, error=f"{type(e).__name__}: {e}")
            # the thread ends here: ``stopped`` names it (health NOT_SERVING when served)


def _by_bytes(items: list, limit: int):
    """``items`` ((queue offset, record) pairs) in runs of at most ``limit`` body bytes
    (at least one item each)."""
    run: list = []
    size = 0
    for item in items:
        n = len(item[1].body)
        if run and size + n > limit:
            yield run
            run, size = [], 0
        run.append(item)
        size += n
    if run:
        yield run


DELIVERY_BYTES = 8 << 20  # body bytes per delivery append: far below a gRPC message's limit when served
_MARK_EVERY_S = 1.0  # how often the scanned-up-to position is persisted (a restart scans at most ~1 s of log)

__all__ = ["SCHEDULE_SOURCE", "SCHEDULE_TOPIC", "DelayScheduler", "QueuePicker", "deliver_times", "rewrite_delayed"]
