"""Reads, written once for both engines: pull (with a tag filter, decoded or raw),
queries by commitlog offset (msgId), key, unique key and queue offset, topic
status, offset by time and consumer progress.

Each read is a generator over one shard. It yields port calls, ``(method, *args)``
tuples naming a method of :class:`ShardPorts`, receives each answer, and returns its
result; it never does I/O itself. :func:`drive` answers the calls synchronously
(``MessageStore`` over ``local_ports.LocalPorts``), :func:`drive_async` awaits them
(the front over gRPC, one set of ports per shard). So ``--store`` and ``--server``
run the same lines and give the same answers. Reads that span shards (keys, topic
status, consumer progress) run one generator per shard and merge with the
functions at the end. A port call that fails is raised inside the generator, so a read
can turn an error into its answer.

What lies in the store never shapes an answer the caller may not read (README,
"Security"): a read at a commitlog offset the caller chose (a msgId) answers
``no_message()`` alike for no record there, bytes that are no record, another store
host's record and a record of a topic the caller may not read; records reached through
a topic's own units or keys are checked to be of that topic.

Pull semantics (RocketMQ's GetMessageStatus): below the queue's min offset
OFFSET_TOO_SMALL, at its max NO_NEW_MESSAGE, past it OFFSET_OVERFLOW, an unknown
queue or one whose max offset is 0 (made ahead, never written) NO_MESSAGE_IN_QUEUE, units passed over without a match NO_MATCHED_MESSAGE,
else FOUND; ``next_offset`` is where the next pull starts. A tag-filtered pull reads
pages of max(4n, 256) units until it has ``max_count`` matches, the queue ends, or
it has passed over ``TAG_SCAN_UNITS`` units (then NO_MATCHED_MESSAGE or FOUND with
fewer: the caller pulls again from ``next_offset``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import numpy as np

from mqstore.errors import (
    CorruptFileError,
    DecodeError,
    InvalidArgumentError,
    LimitExceededError,
    NotFoundError,
    OffsetError,
)
from mqstore.formats.consume_queue import is_pre_blank_unit
from mqstore.formats.javahash import tags_code
from mqstore.formats.names import check_topic
from mqstore.formats.packed import RawRecords
from mqstore.store.consumer_offsets import check_group
from mqstore.store.topic_configs import PERM_READ, check_perm

MAX_QUEUE_ID = 65_535
MAX_PULL = 10_000  # messages per pull
MAX_KEY_QUERY = 64  # messages per key query (RocketMQ's index limit)
MAX_UNITS = 100_000  # units per page a pull asks for
TAG_SCAN_UNITS = 4096  # units a filtered pull passes over before it answers
LONG_MAX = (1 << 63) - 1


class PullStatus(enum.Enum):
    """RocketMQ's GetMessageStatus, as far as a pull can end (front.proto PullStatus)."""

    FOUND = "FOUND"
    NO_NEW_MESSAGE = "NO_NEW_MESSAGE"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    OFFSET_OVERFLOW = "OFFSET_OVERFLOW"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


class UnitsPage(NamedTuple):
    """Consume-queue units of one queue from ``first_offset`` (the asked offset
    clamped into [min_offset, max_offset]); empty columns at or past the max."""

    exists: bool  # False: the queue has no consume queue (then min and max are 0)
    first_offset: int
    min_offset: int
    max_offset: int
    physical_offsets: np.ndarray  # int64 columns, one row per unit
    sizes: np.ndarray
    tags_codes: np.ndarray


class QueueRange(NamedTuple):
    """One queue's offsets; ``last_physical_offset`` is its newest unit's record (-1: none)."""

    topic: str
    queue_id: int
    min_offset: int
    max_offset: int
    last_physical_offset: int


@dataclass(frozen=True)
class QueueStatus:
    """One queue of a topic: offsets and the newest message's store time (ms, 0 if none)."""

    topic: str
    queue_id: int
    min_offset: int
    max_offset: int
    last_store_timestamp: int
    shard: int = field(default=0, compare=False)


@dataclass(frozen=True)
class PullAnswer:
    """What a pull found: records (decoded, or with ``raw=True`` RawRecords: the stored bytes),
    where to go on, and the queue's range at the time."""

    status: PullStatus
    records: Sequence
    next_offset: int
    min_offset: int
    max_offset: int


class ShardPorts(Protocol):
    """What the reads need of one shard. ``LocalPorts`` answers from the files of this
    process; the front's gRPC ports have the same methods as coroutines. Records are
    the engine's own type (``MessageRecord`` or the ``Record`` message); the reads use
    only ``topic``, ``tags``, ``keys``, ``unique_key`` and ``store_timestamp``."""

    def perm(self, topic: str) -> int | None:
        """The topic's perm bits (None: no config, every perm)."""

    def units(self, topic: str, queue_id: int, offset: int, max_units: int) -> UnitsPage: ...

    def ranges(self, topic: str) -> list[QueueRange]: ...

    def read(self, offsets: np.ndarray, sizes: np.ndarray | None, raw: bool) -> tuple[np.ndarray, Sequence]:
        """The records at these commitlog offsets, those below the min offset or past
        the write position left out: (offsets found, a list of records or RawRecords)."""

    def keys(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Commitlog offsets the index holds under topic#key (hash matches), newest first."""

    def offset_at_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int: ...

    def progress(self, group: str) -> list: ...


Read = Generator[tuple, Any, Any]


def drive(read: Read, ports: Any) -> Any:
    """Run ``read`` against synchronous ports; its result. A port's error is raised
    inside ``read`` (which may answer it)."""
    try:
        call = next(read)
        while True:
            try:
                answer = getattr(ports, call[0])(*call[1:])
            except Exception as e:  # noqa: BLE001 - the read decides what it means
                call = read.throw(e)
            else:
                call = read.send(answer)
    except StopIteration as done:
        return done.value


async def drive_async(read: Read, ports: Any) -> Any:
    """Run ``read`` against ports whose methods are coroutines; its result (port
    errors as in :func:`drive`)."""
    try:
        call = next(read)
        while True:
            try:
                answer = await getattr(ports, call[0])(*call[1:])
            except Exception as e:  # noqa: BLE001 - the read decides what it means
                call = read.throw(e)
            else:
                call = read.send(answer)
    except StopIteration as done:
        return done.value


# ---------------------------------------------------------------------- checks


def _integer(value, what: str) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
        raise InvalidArgumentError(f"{what} must be an integer, got {value!r}")
    return int(value)


def check_queue(topic: str, queue_id: int) -> None:
    """A legal topic name and a queue id in 0..65535."""
    if not topic:
        raise InvalidArgumentError("topic is empty")
    check_topic(topic)
    if not 0 <= _integer(queue_id, "queue id") <= MAX_QUEUE_ID:
        raise InvalidArgumentError(f"queue id {queue_id} is outside 0..{MAX_QUEUE_ID}")


def check_offset(offset: int, what: str = "queue offset") -> None:
    if _integer(offset, what) < 0:
        raise InvalidArgumentError(f"{what} {offset} is negative")


def check_count(count: int, high: int, what: str) -> None:
    """1..``high``; above it LimitExceededError (RESOURCE_EXHAUSTED over gRPC)."""
    if _integer(count, what) < 1:
        raise InvalidArgumentError(f"{what} must be >= 1, got {count}")
    if count > high:
        raise LimitExceededError(f"{what} {count} is over the limit {high}")


def parse_tag_expression(expr: str | None) -> set[str] | None:
    """RocketMQ's tag expression: ``TagA || TagB``; ``*``, empty or None means every tag."""
    if expr is None or expr.strip() in ("", "*"):
        return None
    tags = {t.strip() for t in expr.split("||")}
    if "" in tags:
        raise InvalidArgumentError(f"bad tag expression {expr!r}: use 'TagA || TagB'")
    return tags


# ---------------------------------------------------------------------- pull


def real_units(page: UnitsPage) -> np.ndarray:
    """Per unit: False for a pre-blank unit (formats.consume_queue), which holds no message."""
    return ~is_pre_blank_unit(page.physical_offsets, page.sizes, page.tags_codes)


def pull(
    topic: str,
    queue_id: int,
    offset: int,
    *,
    max_count: int = 32,
    tags: set[str] | None = None,
    tags_codes: Iterable[int] | None = None,
    raw: bool = False,
) -> Read:
    """Up to ``max_count`` messages of one queue from ``offset`` (see the module doc).
    ``tags`` filters by tagsCode, then (decoded records only) by the exact TAGS, as
    RocketMQ's broker and client do; ``tags_codes`` filters raw pulls by code alone."""
    check_queue(topic, queue_id)
    check_offset(offset)
    check_count(max_count, MAX_PULL, "max_count")
    check_perm(topic, (yield ("perm", topic)), PERM_READ)  # TopicPermissionError without READ
    if tags is not None:
        tags_codes = {tags_code(t) for t in tags}
    codes = None if tags_codes is None else np.array(sorted(set(tags_codes)), np.int64)
    exact = tags if not raw else None
    per_read = max_count if codes is None else min(max(max_count * 4, 256), MAX_UNITS)
    budget = max(per_read, TAG_SCAN_UNITS)
    taken: list = []  # what each page gave: lists of records, or RawRecords
    count = scanned = 0
    pos = offset
    while True:
        page: UnitsPage = yield ("units", topic, queue_id, pos, per_read)
        lo, hi = page.min_offset, page.max_offset
        if not page.exists or hi == 0:  # RocketMQ: a queue whose max offset is 0 has no message
            return PullAnswer(PullStatus.NO_MESSAGE_IN_QUEUE, _joined([], raw), 0, lo, hi)
        if pos < lo and not count:  # (retention may pass a filtered pull between pages: keep what it found)
            return PullAnswer(PullStatus.OFFSET_TOO_SMALL, _joined([], raw), lo, lo, hi)
        if pos >= hi:
            if scanned:  # a filtered pull that passed over units first
                return PullAnswer(
                    PullStatus.FOUND if count else PullStatus.NO_MATCHED_MESSAGE, _joined(taken, raw), hi, lo, hi
                )
            status = PullStatus.NO_NEW_MESSAGE if pos == hi else PullStatus.OFFSET_OVERFLOW
            return PullAnswer(status, _joined([], raw), hi, lo, hi)
        keep = real_units(page)
        if codes is not None:
            keep &= np.isin(page.tags_codes, codes)
        idx = np.flatnonzero(keep)
        taken_to = len(page.physical_offsets)  # units this page used up (all, unless the pull fills)
        if len(idx):
            phys = page.physical_offsets[idx]  # ascending: a queue's units follow the commitlog
            found_at, items = yield ("read", phys, page.sizes[idx] if raw else None, raw)
            chosen = range(len(items)) if exact is None else [k for k, r in enumerate(items) if r.tags in exact]
            chosen = chosen[: max_count - count]
            taken.append(items[: len(chosen)] if exact is None else [items[k] for k in chosen])
            count += len(chosen)
            if count >= max_count:  # full: the next pull starts after the last message taken
                taken_to = int(idx[np.searchsorted(phys, found_at[chosen[-1]])]) + 1
        pos = page.first_offset + taken_to
        scanned += taken_to
        if count >= max_count or codes is None or scanned >= budget or pos >= hi or not taken_to:
            return PullAnswer(
                PullStatus.FOUND if count else PullStatus.NO_MATCHED_MESSAGE, _joined(taken, raw), pos, lo, hi
            )


def _joined(parts: list, raw: bool):
    """The records of a pull's pages as one: RawRecords for a raw pull, else a list."""
    if raw:
        return RawRecords.concat(parts)
    return parts[0] if len(parts) == 1 else [r for p in parts for r in p]


# ---------------------------------------------------------------------- single records


def by_queue_offset(topic: str, queue_id: int, offset: int) -> Read:
    """The message at one queue offset (mqadmin queryMsgByOffset); NotFoundError if none."""
    check_queue(topic, queue_id)
    check_offset(offset)
    page: UnitsPage = yield ("units", topic, queue_id, offset, 1)
    where = f"{topic}:{queue_id} has no message at queue offset {offset}"
    if not page.exists or not page.min_offset <= offset < page.max_offset or not len(page.physical_offsets):
        raise NotFoundError(f"{where} (it holds [{page.min_offset}, {page.max_offset}))")
    if not real_units(page)[0]:
        raise NotFoundError(f"{where} (a pre-blank unit)")
    _, records = yield ("read", page.physical_offsets[:1], None, False)
    if not records or records[0].topic != topic:  # (a unit never points into another topic's record)
        raise NotFoundError(f"{where} (its record was deleted by retention)")
    return records[0]


# What a read at an offset no record starts at raises (commitlog, or its port over gRPC).
NO_RECORD_THERE = (OffsetError, DecodeError, CorruptFileError, InvalidArgumentError)
NO_MESSAGE = (
    "no message with this msgId here (another store host's, deleted, never written, or of a topic you may not read)"
)


def by_msg_id(msg_id: str, offset: int, may_read: Callable[[str], bool] | None = None) -> Read:
    """The record of this shard that ``msg_id`` (store host + ``offset``) names, if
    ``may_read`` (None: anyone) allows its topic. The record at that offset must carry
    the same msgId: a msgId of another store host finds nothing, rather than whatever
    record sits at its offset here. Every miss is the same ``no_message()``: the
    offset is the caller's choice, and what lies there is not the caller's to learn."""
    try:
        _, records = yield ("read", np.array([offset], np.int64), None, False)
    except NO_RECORD_THERE:
        raise no_message() from None
    if not records or records[0].msg_id.upper() != msg_id.upper():
        raise no_message()
    if may_read is not None and not may_read(records[0].topic):
        raise no_message()
    return records[0]


def no_message() -> NotFoundError:
    """The one answer to a msgId that finds nothing the caller may read: the same text
    whatever the msgId."""
    return NotFoundError(NO_MESSAGE)


# ---------------------------------------------------------------------- keys


def check_key_query(topic: str, key: str, begin: int, end: int, max_num: int, what: str = "key") -> None:
    if not topic:
        raise InvalidArgumentError("topic is empty")
    check_topic(topic)
    if not isinstance(key, str) or not key:
        raise InvalidArgumentError(f"{what} must be a non-empty string, got {key!r}")
    check_count(max_num, MAX_KEY_QUERY, "max_num")
    if _integer(begin, "begin") < 0 or _integer(end, "end") < begin:
        raise InvalidArgumentError(f"time range [{begin}, {end}] is empty or negative")


def by_key(
    topic: str, key: str, *, begin: int = 0, end: int = LONG_MAX, max_num: int = 32, unique: bool = False
) -> Read:
    """One shard's messages of ``topic`` whose KEYS hold ``key`` (``unique``: whose
    UNIQ_KEY is ``key``), stored in [begin, end]. Index hits are hash matches, so each
    record is checked; merge shards with :func:`newest_first`."""
    check_key_query(topic, key, begin, end, max_num, "unique key" if unique else "key")
    offsets = yield ("keys", topic, key, max_num, begin, end)
    if not len(offsets):
        return []
    _, records = yield ("read", np.asarray(offsets, np.int64), None, False)
    if unique:
        return [r for r in records if r.topic == topic and r.unique_key == key and begin <= r.store_timestamp <= end]
    return [
        r
        for r in records
        if r.topic == topic and key in (r.keys or "").split(" ") and begin <= r.store_timestamp <= end
    ]


def newest_first(
    parts: Iterable[tuple[int, list]], max_num: int, topic: str, key: str, *, unique: bool = False
) -> list:
    """Key-query answers of several shards (shard index, records), newest first (store
    time, then shard, then offset), cut to ``max_num``; NotFoundError if none."""
    found = [(r.store_timestamp, shard, r.physical_offset, r) for shard, records in parts for r in records]
    if not found:
        what = f"has UNIQ_KEY {key!r}" if unique else f"has key {key!r} in that time range"
        raise NotFoundError(f"no message of {topic!r} {what}")
    found.sort(key=lambda t: t[:3], reverse=True)
    return [t[3] for t in found[:max_num]]


# ---------------------------------------------------------------------- queues and groups


def topic_status(topic: str, shard: int = 0) -> Read:
    """One shard's queues of ``topic``, each with its newest message's store time."""
    if not topic:
        raise InvalidArgumentError("topic is empty")
    check_topic(topic)
    ranges: list[QueueRange] = yield ("ranges", topic)
    last = [q.last_physical_offset for q in ranges if q.last_physical_offset >= 0]
    times: dict[int, int] = {}
    if last:
        found_at, records = yield ("read", np.array(last, np.int64), None, False)
        times = {
            int(at): r.store_timestamp for at, r in zip(np.asarray(found_at).tolist(), records) if r.topic == topic
        }
    return [
        QueueStatus(q.topic, q.queue_id, q.min_offset, q.max_offset, times.get(q.last_physical_offset, 0), shard)
        for q in ranges
    ]


def merge_topic_status(topic: str, parts: Iterable[list[QueueStatus]]) -> list[QueueStatus]:
    """Every shard's queues by queue id; NotFoundError if the topic has none."""
    queues = sorted((q for part in parts for q in part), key=lambda q: q.queue_id)
    if not queues:
        raise NotFoundError(f"topic {topic!r} has no queues")
    return queues


def offset_at_time(topic: str, queue_id: int, timestamp_ms: int) -> Read:
    """The first queue offset stored at or after ``timestamp_ms`` (RocketMQ
    getOffsetInQueueByTime); 0 for a queue that does not exist."""
    check_queue(topic, queue_id)
    return (yield ("offset_at_time", topic, queue_id, _integer(timestamp_ms, "timestamp")))


def consumer_progress(group: str) -> Read:
    """One shard's rows (topic, queue_id, broker_offset, consumer_offset, lag) of ``group``."""
    if not group:
        raise InvalidArgumentError("consumer group is empty")
    check_group(group)
    return (yield ("progress", group))


def merge_progress(parts: Iterable[Sequence]) -> list:
    return sorted((r for part in parts for r in part), key=lambda r: (r.topic, r.queue_id))


__all__ = [
    "LONG_MAX",
    "MAX_KEY_QUERY",
    "MAX_PULL",
    "NO_MESSAGE",
    "NO_RECORD_THERE",
    "PullAnswer",
    "PullStatus",
    "QueueRange",
    "QueueStatus",
    "ShardPorts",
    "UnitsPage",
    "by_key",
    "by_msg_id",
    "by_queue_offset",
    "check_count",
    "check_offset",
    "check_queue",
    "consumer_progress",
    "drive",
    "drive_async",
    "merge_progress",
    "merge_topic_status",
    "newest_first",
    "no_message",
    "offset_at_time",
    "parse_tag_expression",
    "pull",
    "topic_status",
]
