"""The rules of RocketMQ's transaction messages for one shard, as plain objects (no I/O,
no gRPC): which halves are pending, the progress point, recovery's reading of the half
and op queues, when a half is checked and when it is discarded, and which front gets a
check. The shard's consume-queue builder runs them (services/index/transactions.py,
whose docstring tells the whole design); the fronts only send halves, forward
EndTransaction and pass check-backs on to their clients (services/rocketmq/transactions.py).

Vocabulary (queue offsets are those of the shard's one half queue and one op queue):

    pending    a half without an op record: it may still be committed or rolled back
    resolved   a half with an op record at or past the progress point: op offset kept
    ended      a half with an op record (below the floor, or resolved)
    (H, P)     the progress point: every half below H is ended and every op record
               below P names a half below H; stored as CID_RMQ_SYS_TRANS's offsets

Who may call: one shard's event loop (the builder's), one caller at a time.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

from mqstore.formats.message import MessageRecord

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
SYSTEM_GROUP = "CID_RMQ_SYS_TRANS"  # RocketMQ MixAll.CID_SYS_RMQ_TRANS: the checker's offsets
REAL_TOPIC = "REAL_TOPIC"
REAL_QID = "REAL_QID"
TRAN_MSG = "TRAN_MSG"
PGROUP = "PGROUP"
CHECK_IMMUNITY = "CHECK_IMMUNITY_TIME_IN_SECONDS"
CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
REMOVE_TAG = "d"  # TransactionalMessageUtil.REMOVE_TAG: an op record's tag
OP_SEPARATOR = ","
TIMEOUT_MS = 6_000  # BrokerConfig.transactionTimeOut: first check this long after the half
CHECK_INTERVAL_MS = 30_000  # BrokerConfig.transactionCheckInterval: then every this long
CHECK_MAX = 15  # BrokerConfig.transactionCheckMax: checks before the half is discarded
ENDED_KEPT = 10_000  # ended halves remembered per shard, for "already ended" answers
# Properties of a half that the committed message does not carry (EndTransactionProcessor
# clears REAL_TOPIC / REAL_QID and TRAN_MSG; the check properties are the broker's), and
# the ones columns carry on their own (tags, keys, UNIQ_KEY) or the store sets.
NOT_COMMITTED = frozenset({REAL_TOPIC, REAL_QID, TRAN_MSG, CHECK_IMMUNITY, CHECK_TIMES})
COLUMN_PROPERTIES = frozenset({"TAGS", "KEYS", "UNIQ_KEY", "__CRC32#"})


class EndOutcome(enum.Enum):
    """What an EndTransaction did (the front turns it into the client's status)."""

    ENDED = "ended"  # committed or rolled back now
    ALREADY_ENDED = "already_ended"  # it had an op record: nothing written
    LEFT_OPEN = "left_open"  # neither COMMIT nor ROLLBACK: left to the checks
    NO_TRANSACTION = "no_transaction"  # the id names no transaction of that topic and message
    RECOVERING = "recovering"  # the shard's halves are not all known yet


def parse_op_body(body: bytes) -> list[int]:
    """The half queue offsets an op record names ("12," or RocketMQ's batched "12,13,"
    or an older "12"); what is not a number is left out, as RocketMQ logs and skips it."""
    out = []
    for part in body.decode("utf-8", "replace").split(OP_SEPARATOR):
        part = part.strip()
        if part.isascii() and part.isdigit():
            out.append(int(part))
    return out


def op_body(half_queue_offset: int) -> bytes:
    """The body of the op record that ends the half at ``half_queue_offset``."""
    return f"{half_queue_offset}{OP_SEPARATOR}".encode()


def real_queue(half: MessageRecord) -> tuple[str, int]:
    """REAL_TOPIC and REAL_QID of a half record (ValueError if they are missing or bad)."""
    topic = half.properties.get(REAL_TOPIC)
    qid = half.properties.get(REAL_QID, "")
    if not topic or not (qid.isascii() and qid.isdigit()):
        raise ValueError(f"half record {half.msg_id} has no REAL_TOPIC / REAL_QID")
    return topic, int(qid)


def first_check_ms(half_store_ms: int, properties: dict[str, str], timeout_ms: int) -> int:
    """When a half is first checked: its store time + the client's recovery duration
    (CHECK_IMMUNITY_TIME_IN_SECONDS), else + ``timeout_ms``."""
    given = properties.get(CHECK_IMMUNITY, "")
    if given.isascii() and given.isdigit():
        return half_store_ms + int(given) * 1000
    return half_store_ms + timeout_ms


@dataclass
class Half:
    """A half message still pending on its shard."""

    queue_offset: int
    physical_offset: int
    topic: str  # the real topic
    message_id: str
    due_ms: int  # when it is checked next
    checks: int = 0
    transaction_id: str = ""  # the half's offset msgId, upper case ("": not known yet)

    def names(self, transaction_id: str, topic: str, message_id: str) -> bool:
        """Whether an EndTransaction of ``transaction_id`` (upper case), ``topic`` and
        ``message_id`` is about this half."""
        return self.topic == topic and self.message_id == message_id and self.transaction_id in ("", transaction_id)


@dataclass
class ShardHalves:
    """One shard's transactions: pending halves, resolved ones at or past the progress
    point, the progress point (module docstring). ``ended_kept``: ended halves
    remembered (by commitlog offset) for "already ended" answers."""

    shard: int
    half_queue: int
    op_queue: int
    ended_kept: int = ENDED_KEPT
    pending: dict[int, Half] = field(default_factory=dict)
    resolved: dict[int, int] = field(default_factory=dict)  # half queue offset >= floor -> op offset
    floor: int = 0  # every half below this queue offset is ended
    half_end: int = 0  # past every half queue offset known
    op_end: int = 0  # past every op queue offset known
    busy: int = 0  # writes in flight on the shard: the progress is not stored meanwhile
    saved: tuple[int, int] = (-1, -1)
    # commitlog offset -> pending half queue offset; and the last ``ended_kept`` ended
    # halves (None: ended, known only as a half's offset; its record tells the rest)
    _pending_at: dict[int, int] = field(default_factory=dict)
    ended_at: dict[int, Half | None] = field(default_factory=dict)

    def add(self, half: Half) -> Half:
        self.half_end = max(self.half_end, half.queue_offset + 1)
        kept = self.pending.setdefault(half.queue_offset, half)
        self._pending_at[kept.physical_offset] = kept.queue_offset
        return kept

    def forget(self, queue_offset: int) -> Half | None:
        """Take a half out of the pending ones (resolved, or its record gone)."""
        h = self.pending.pop(queue_offset, None)
        if h is not None:
            self._pending_at.pop(h.physical_offset, None)
        return h

    def pending_at(self, physical_offset: int) -> Half | None:
        """The pending half whose record starts at ``physical_offset``, if any."""
        q = self._pending_at.get(physical_offset)
        return None if q is None else self.pending.get(q)

    def note_ended(self, physical_offset: int, half: Half | None) -> None:
        self.ended_at.pop(physical_offset, None)
        self.ended_at[physical_offset] = half
        while len(self.ended_at) > self.ended_kept:
            del self.ended_at[next(iter(self.ended_at))]

    def resolve(self, queue_offset: int, op_offset: int) -> None:
        h = self.forget(queue_offset)
        if h is not None:
            self.note_ended(h.physical_offset, h)
        self.resolved.setdefault(queue_offset, op_offset)
        self.op_end = max(self.op_end, op_offset + 1)

    def ended(self, queue_offset: int) -> bool:
        """Whether the half at ``queue_offset`` has an op record."""
        return queue_offset < self.floor or queue_offset in self.resolved

    def due(self, now_ms: int) -> list[Half]:
        """The pending halves whose check time came, oldest first."""
        return sorted((h for h in self.pending.values() if h.due_ms <= now_ms), key=lambda h: h.queue_offset)

    def progress(self) -> tuple[int, int] | None:
        """(H, P) to store now, or None while a write is in flight."""
        if self.busy:
            return None
        h = min(self.pending) if self.pending else self.half_end
        h = max(h, self.floor)
        self.floor = h
        for q in [q for q in self.resolved if q < h]:
            del self.resolved[q]
        p = min(self.resolved.values()) if self.resolved else self.op_end
        return h, p


def check_or_discard(half: Half, now_ms: int, *, check_max: int, check_interval_ms: int) -> bool:
    """A due half: True if it is to be checked (its count and next time moved on),
    False if it was checked ``check_max`` times and is to be discarded."""
    if half.checks >= check_max:
        return False
    half.checks += 1
    half.due_ms = now_ms + check_interval_ms
    return True


@dataclass
class Recovered:
    """What recovery read from the half and op queues (``recover``)."""

    resolved: dict[int, int]  # half queue offset >= H -> op offset that ended it
    open_halves: dict[int, int]  # half queue offset -> commitlog offset, without an op
    ended: list[int]  # commitlog offsets of ended halves (the last ``ended_kept``), oldest first
    half_end: int
    op_end: int
    skipped_ops: list[int]  # op offsets whose tag is not REMOVE_TAG


def recover(
    h0: int, p0: int, ops: Iterable[tuple[int, str | None, bytes]], half_units: Iterable[tuple[int, int]]
) -> Recovered:
    """Read the progress point ``(h0, p0)``, the op records from ``p0`` (op queue
    offset, tags, body) and the half queue's units (queue offset, commitlog offset)
    from ``h0 - ENDED_KEPT``: a half at or past ``h0`` without an op is open again;
    those below ``h0`` or with an op are ended."""
    resolved: dict[int, int] = {}
    skipped: list[int] = []
    op_end = p0
    for op_offset, tags, body in ops:
        op_end = op_offset + 1
        if tags != REMOVE_TAG:
            skipped.append(op_offset)
            continue
        for q in parse_op_body(body):
            if q >= h0:
                resolved.setdefault(q, op_offset)
    open_halves: dict[int, int] = {}
    ended: list[int] = []
    half_end = h0
    for q, phys in half_units:
        if q >= h0:
            half_end = q + 1
        if q < h0 or q in resolved:
            ended.append(phys)
        else:
            open_halves[q] = phys
    return Recovered(resolved, open_halves, ended, half_end, op_end, skipped)


class CheckRoutes:
    """Which front gets a topic's check-backs: each front announces the topics it
    holds producers for (with an open Telemetry stream); a check goes to one of those
    fronts, in turn. A front that goes away is dropped, and the next check goes
    elsewhere."""

    def __init__(self) -> None:
        self._topics: dict[str, frozenset[str]] = {}  # front -> topics it holds producers of
        self._turn = 0

    def announce(self, front: str, topics: Iterable[str]) -> None:
        self._topics[front] = frozenset(topics)

    def drop(self, front: str) -> None:
        self._topics.pop(front, None)

    def fronts(self) -> list[str]:
        return list(self._topics)

    def pick(self, topic: str) -> str | None:
        """A front holding a producer of ``topic`` (in turn), None if no front does."""
        holders = [f for f, ts in self._topics.items() if topic in ts]
        if not holders:
            return None
        self._turn += 1
        return holders[self._turn % len(holders)]


__all__ = [
    "CHECK_IMMUNITY",
    "CHECK_INTERVAL_MS",
    "CHECK_MAX",
    "CHECK_MAX_TOPIC",
    "CHECK_TIMES",
    "COLUMN_PROPERTIES",
    "ENDED_KEPT",
    "HALF_TOPIC",
    "NOT_COMMITTED",
    "OP_SEPARATOR",
    "OP_TOPIC",
    "PGROUP",
    "REAL_QID",
    "REAL_TOPIC",
    "REMOVE_TAG",
    "SYSTEM_GROUP",
    "TIMEOUT_MS",
    "TRAN_MSG",
    "CheckRoutes",
    "EndOutcome",
    "Half",
    "Recovered",
    "ShardHalves",
    "check_or_discard",
    "first_check_ms",
    "op_body",
    "parse_op_body",
    "real_queue",
    "recover",
]
