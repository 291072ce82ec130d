"""Pop rules: what one pop hands out, when a message goes to the dead-letter queue, and
whether an ack, a change of invisible time or a dead letter by handle is taken.
RocketMQ 5's way of consuming (SimpleConsumer, PushConsumer), which the shard's pop
service (services/index/pop_service.py) serves. Plain Python: no Ray, no gRPC; the
time comes from an injected clock, the I/O through :class:`PopShard`.

Per (group, topic, queue) the shard keeps a cursor and the messages in flight, durably
(mqstore/store/pop.py, under ``<shard>/pop/``). A pop takes, in this order:

1. messages in flight whose invisible time passed (redelivered in place, attempt + 1:
   RocketMQ re-puts them into ``%RETRY%<group>_<topic>`` instead; mqstore keeps them
   where they are, so a redelivered message has its original queue and offset);
   one due for attempt ``max_attempts + 1`` goes to ``%DLQ%<group>`` instead;
2. new messages from each queue's cursor (a new group starts at the queue's min
   offset), the queues taken in turn from where the group's last pop left off:
   messages whose tag the filter does not take are consumed silently (the cursor
   moves past them), messages with a delivery time ahead (``TIMER_DELIVER_MS``,
   RocketMQ 5's delay messages) are held in flight until that time without being
   delivered.

FIFO groups take nothing new from a queue while one of its delivered messages is in
flight, so a queue's messages are delivered in order, a redelivery before anything
after it. A held delay message does not hold a FIFO queue: RocketMQ 5 refuses delay
messages on FIFO topics (the producer doors do too), and its timer puts a delay
message into its queue only at its delivery time, so one already stored (by an older
writer) is delivered when its time comes, in the queue's order from then on, and
what was sent after it is delivered meanwhile.

A record no RocketMQ 5 consumer can take (mqstore/store/consumer_rules.py: a born,
store or delivery time outside protobuf Timestamp's range) is never handed out: it
goes to ``%DLQ%<group>`` at once with ``DLQ_REASON``, alone (logged
``pop_record_set_aside``, reported in :attr:`PopAnswer.set_aside` for the front's
metric), and the pop answers the other messages. Receipt handles carry an HMAC tag
under the shard's secret (mqstore/formats/receipt_handle.py): a handle the shard did
not make for the group and topic is refused (MALFORMED or FORGED); a dead letter by
handle refuses forged, expired and stale handles as an ack does. A dead letter the
commitlog refuses (a full disk) is held and tried again ``DEAD_LETTER_RETRY_MS``
later; the pop answers what it handed out meanwhile.

Losses are never silent: queue offsets a group never got because retention deleted
them first go to :meth:`PopShard.lost`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import numpy as np
import structlog

from mqstore.errors import InvalidArgumentError, InvalidReceiptHandle
from mqstore.formats.javahash import tags_code
from mqstore.formats.message import MessageRecord, decode_records
from mqstore.formats.names import check_topic
from mqstore.store import reads
from mqstore.store.clock import Clock, SystemClock
from mqstore.store.consumer_offsets import check_group
from mqstore.store.consumer_rules import (
    MAX_TIME_MS,
    MIN_TIME_MS,
    TIMER_DELIVER_MS,
    Unconvertible,
    delivery_ms,
    unconvertible,
)
from mqstore.store.loss_ledger import runs
from mqstore.store.messages import MessageBatch
from mqstore.store.pop import AckOutcome, Delivery, InFlight, PopState, ReceiptHandle
from mqstore.store.reads import UnitsPage

log = structlog.get_logger(__name__)

DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
DLQ_REASON = "DLQ_REASON"  # mqstore's: why a record was set aside (RocketMQ's DLQ records carry no reason)
RETRY_TOPIC = "RETRY_TOPIC"
DLQ_PREFIX = "%DLQ%"
MAX_POP = 32  # the broker refuses bigger pop batches
MAX_INVISIBLE_MS = 12 * 3600 * 1000
MAX_WAIT_MS = 60_000
DEAD_LETTER_RETRY_MS = 1_000  # a dead letter the commitlog refused (a full disk) is tried again after this
SCAN_UNITS = 256  # units looked at per read when a filter skips messages
MAX_SET_ASIDE = 256  # unconvertible records set aside per look (one DLQ append)
_DUE_SLACK = 64  # due entries looked at beyond max_messages (some may be set aside or held back)
_FIRST = np.zeros(1, np.int64)  # decode_records' positions of a lone record
_DROPPED_PROPERTIES = ("TAGS", "KEYS", "UNIQ_KEY", "__CRC32#")  # columns of their own in the dead letter


def dead_letter_topic(group: str) -> str:
    """``%DLQ%<group>``: where a group's messages go after their last attempt."""
    return DLQ_PREFIX + group


class PopShard(Protocol):
    """The I/O the rules ask of the shard (the servicer gives its builder, local pulls
    and commitlog; tests give files in memory)."""

    def units(self, topic: str, queue_id: int, offset: int, max_units: int) -> UnitsPage:
        """Up to ``max_units`` units of the queue from ``offset`` clamped into [min, max]
        (local_ports.units_page)."""
        ...

    def records(self, offsets: Sequence[int], sizes: Sequence[int]) -> list[bytes | None]:
        """The stored records at ``offsets`` (None where retention removed one), in order."""
        ...

    def append_dead_letters(self, batch: MessageBatch) -> None:
        """Append ``batch`` (to ``%DLQ%<group>``) through the commitlog; raises if refused."""
        ...

    def lost(self, group: str, topic: str, queue_id: int, ranges: Sequence[tuple[int, int]]) -> None:
        """The group never read these [from, to) queue offsets: retention deleted them."""
        ...


def check_names(group: str, topic: str) -> None:
    """InvalidArgumentError unless both are legal names (any name error, as one kind)."""
    try:
        check_group(group)
        check_topic(topic)
    except Exception as e:  # noqa: BLE001 - the store's name errors, as a bad argument
        raise InvalidArgumentError(str(e)) from None


def check_invisible_ms(invisible_ms: int) -> None:
    if not 0 <= invisible_ms <= MAX_INVISIBLE_MS:
        raise InvalidArgumentError(f"invisible_ms must be in 0..{MAX_INVISIBLE_MS}, got {invisible_ms}")


@dataclass(frozen=True, kw_only=True)
class PopAsk:
    """One pop request, checked on construction (InvalidArgumentError, in this order:
    names, max_messages, invisible_ms, wait_ms, max_attempts, queue_ids, tags)."""

    group: str
    topic: str
    queue_ids: tuple[int, ...]
    max_messages: int
    invisible_ms: int
    wait_ms: int = 0  # the long poll's (the servicer's); checked here with the rest
    max_attempts: int
    fifo: bool = False
    tag_expression: str = ""
    dead_letter_queue_id: int = 0
    tags: frozenset[str] | None = field(init=False)  # None: every tag

    def __post_init__(self) -> None:
        check_names(self.group, self.topic)
        if not 1 <= self.max_messages <= MAX_POP:
            raise InvalidArgumentError(f"max_messages must be in 1..{MAX_POP}, got {self.max_messages}")
        check_invisible_ms(self.invisible_ms)
        if not 0 <= self.wait_ms <= MAX_WAIT_MS:
            raise InvalidArgumentError(f"wait_ms must be in 0..{MAX_WAIT_MS}, got {self.wait_ms}")
        if self.max_attempts < 1:
            raise InvalidArgumentError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if any(q < 0 for q in self.queue_ids) or not self.queue_ids:
            raise InvalidArgumentError("queue_ids must name at least one queue, none negative")
        tags = reads.parse_tag_expression(self.tag_expression)
        object.__setattr__(self, "tags", None if tags is None else frozenset(tags))


class Handed(NamedTuple):
    """One message a pop hands out: where it is, its attempt (1 = first delivery), its
    receipt handle's text and the stored record."""

    queue_id: int
    offset: int
    attempt: int
    receipt_handle: str
    record: bytes


@dataclass
class PopAnswer:
    """What one look at the queues gave: ``messages`` handed out, how many went to the
    DLQ after their last attempt, the codes (consumer_rules.Unconvertible.code) of
    records set aside, and the earliest deadline in flight (None: none), when a long
    poll should look again."""

    messages: list[Handed] = field(default_factory=list)
    dead_lettered: int = 0
    set_aside: list[str] = field(default_factory=list)
    next_due_ms: int | None = None


class _Look:
    """One pop's working set (under the key's lock)."""

    def __init__(self, pops: PopState, shard: PopShard, ask: PopAsk, now: int) -> None:
        self.pops, self.shard, self.ask, self.now = pops, shard, ask, now
        self.deliveries: list[Delivery] = []
        self.dead: list[tuple[int, InFlight]] = []
        self.aside: list[tuple[int, InFlight]] = []  # unconvertible: to the DLQ alone, never handed out
        self.reasons: dict[tuple[int, int], Unconvertible] = {}
        self.raws: dict[int, bytes] = {}  # commitlog offset -> record, read once per look
        self.cursors: dict[int, int] = {}


class PopRules:
    """The pop decisions of one shard (see the module docstring) over its
    :class:`PopState`, opened on first use by ``open_state`` and kept until
    :meth:`close`.

    Thread-safe: any thread may call; calls for one (group, topic) run one at a time
    (a lock each), so what a call checks still holds when it acts."""

    def __init__(self, open_state: Callable[[], PopState], *, shard: int, clock: Clock | None = None) -> None:
        self._open_state = open_state
        self.shard = shard
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._pops: PopState | None = None
        self._open_lock = threading.Lock()
        self._group_locks: dict[tuple[str, str], threading.Lock] = {}
        self._rotation: dict[tuple[str, str], int] = {}

    def state(self) -> PopState:
        """The pop state, opened on first use."""
        with self._open_lock:
            if self._pops is None:
                self._pops = self._open_state()
            return self._pops

    def close(self) -> None:
        """Close the state (a later call opens it again)."""
        with self._open_lock:
            if self._pops is not None:
                self._pops.close()
                self._pops = None

    def _lock(self, group: str, topic: str) -> threading.Lock:
        with self._open_lock:
            return self._group_locks.setdefault((group, topic), threading.Lock())

    # ------------------------------------------------------------------ pop

    def pop(self, ask: PopAsk, shard: PopShard) -> PopAnswer:
        """One look at the queues: due messages first, then new ones, as one durable
        step of the state; then the dead letters it decided on."""
        pops = self.state()
        with self._lock(ask.group, ask.topic):
            look = _Look(pops, shard, ask, self.clock.now_ms())
            self._take_due(look)
            self._take_new(look)
            answer = PopAnswer()
            if look.deliveries or look.cursors:
                self._hand_out(look, answer)
            group, topic = ask.group, ask.topic
            if look.aside and self._dead_letter_or_later(look, look.aside, look.reasons):
                answer.set_aside.extend(look.reasons[(q, e.offset)].code for q, e in look.aside)
            if look.dead and self._dead_letter_or_later(look, look.dead, None):
                answer.dead_lettered = len(look.dead)
            answer.next_due_ms = pops.next_deadline_ms(group, topic, list(ask.queue_ids))
            return answer

    def _take_due(self, look: _Look) -> None:
        """Due entries: redelivered, out of attempts (to ``dead``) or, in a FIFO queue,
        a held one whose time came while a delivered one is out (left for later)."""
        ask, pops, group, topic = look.ask, look.pops, look.ask.group, look.ask.topic
        for q, e in pops.due(group, topic, list(ask.queue_ids), look.now, ask.max_messages + _DUE_SLACK):
            if len(look.deliveries) >= ask.max_messages:
                break
            if e.attempt >= ask.max_attempts:
                look.dead.append((q, e))
            elif (
                ask.fifo
                and e.attempt == 0
                and (pops.delivered_in_flight(group, topic, q) or any(d.queue_id == q for d in look.deliveries))
            ):
                continue  # a delay message whose time came joins the queue's order behind what is out
            else:
                look.deliveries.append(Delivery(q, e.offset, e.commitlog_offset, e.size))
        look.deliveries = self._set_aside_due(look)

    def _set_aside_due(self, look: _Look) -> list[Delivery]:
        """The due deliveries whose records a consumer can take; the others (a record
        a crash left held before it was set aside, or one that was handed out before
        this check) go to ``aside``. Fills ``raws``."""
        if not look.deliveries:
            return look.deliveries
        ds = look.deliveries
        got = look.shard.records([d.commitlog_offset for d in ds], [d.size for d in ds])
        keep = []
        for d, raw in zip(ds, got):
            if raw is not None:
                look.raws[d.commitlog_offset] = raw
                why = unconvertible(_decode(raw))
                if why is not None:
                    e = look.pops.entry(look.ask.group, look.ask.topic, d.queue_id, d.offset)
                    if e is not None:
                        look.reasons[(d.queue_id, d.offset)] = why
                        look.aside.append((d.queue_id, e))
                    continue
            keep.append(d)
        return keep

    def _take_new(self, look: _Look) -> None:
        """New messages, the queues in turn from where the group's last pop left off."""
        ask, group, topic = look.ask, look.ask.group, look.ask.topic
        qids = list(ask.queue_ids)
        start = self._rotation.get((group, topic), 0)
        order = qids[start % len(qids) :] + qids[: start % len(qids)]
        self._rotation[(group, topic)] = start + 1
        for q in order:
            room = ask.max_messages - sum(1 for d in look.deliveries if d.hold_until_ms is None)
            if room <= 0:
                break
            if ask.fifo and (
                look.pops.delivered_in_flight(group, topic, q)
                or any(d.queue_id == q and d.hold_until_ms is None for d in look.deliveries)
            ):
                continue  # in order: nothing new while one is out (a held delay message is not out)
            taken, cursor = self._take_new_of(look, q, room)
            look.deliveries.extend(taken)
            if cursor is not None:
                look.cursors[q] = cursor

    def _take_new_of(self, look: _Look, q: int, room: int) -> tuple[list[Delivery], int | None]:  # noqa: C901
        """Up to ``room`` new deliveries of queue ``q`` from the group's cursor, and the
        cursor after them (None: nothing looked at). An unconvertible record is taken
        held until ``now`` (in flight, so a crash before its dead letter redoes it),
        with its reason in ``reasons``; a record to hand out goes into ``raws``."""
        group, topic, tags, now = look.ask.group, look.ask.topic, look.ask.tags, look.now
        cursor = look.pops.cursor(group, topic, q)
        taken: list[Delivery] = []
        moved = None
        shown = 0
        codes = None if tags is None else np.array([tags_code(t) for t in tags], np.int64)
        while shown < room:
            page = look.shard.units(topic, q, cursor if cursor is not None else 0, SCAN_UNITS)
            if not page.exists:
                break
            if cursor is not None and page.first_offset < cursor:
                # the queue ends below the group's cursor: cut back by a crash under async
                # flush. The cursor stays (it never moves back); new messages below it are
                # not popped for this group, logged once per look.
                log.warning(
                    "pop_cursor_past_queue_end",
                    group=group,
                    topic=topic,
                    queue=q,
                    cursor=cursor,
                    queue_end=page.first_offset,
                )
                break
            if cursor is None or page.first_offset != cursor:  # a new group, or retention moved the min past it
                moved = page.first_offset
                if cursor is not None:  # the group never read [cursor, min): counted and logged, never silent
                    look.shard.lost(group, topic, q, [(cursor, page.first_offset)])
            cursor = page.first_offset
            n = len(page.physical_offsets)
            if n == 0:
                break
            wanted = reads.real_units(page)  # pre-blank units hold no message
            if codes is not None:
                wanted &= np.isin(page.tags_codes, codes)
            candidates = np.flatnonzero(wanted)
            offsets, sizes = page.physical_offsets, page.sizes
            records = look.shard.records(offsets[candidates].tolist(), sizes[candidates].tolist())
            last = n  # units of this page consumed (the filtered ones included)
            gone: list[int] = []
            for i, raw in zip(candidates.tolist(), records):
                if raw is None:  # its segment is gone: the group never gets it
                    gone.append(cursor + i)
                    continue
                rec = _decode(raw)
                if tags is not None and rec.tags not in tags:
                    continue  # a hash collision: not this filter's tag
                why = unconvertible(rec)
                if why is not None:
                    look.reasons[(q, cursor + i)] = why
                    taken.append(Delivery(q, cursor + i, int(offsets[i]), int(sizes[i]), hold_until_ms=now))
                    if len(look.reasons) >= MAX_SET_ASIDE:  # a queue full of them: the rest next time
                        last = i + 1
                        break
                    continue
                hold = delivery_ms(rec.properties)
                held = hold if hold is not None and hold > now else None
                taken.append(Delivery(q, cursor + i, int(offsets[i]), int(sizes[i]), hold_until_ms=held))
                if held is None:
                    look.raws[int(offsets[i])] = raw
                    shown += 1
                    if shown >= room:
                        last = i + 1
                        break
            gone_runs = runs([o for o in gone if o < cursor + last])
            if gone_runs:  # retention deleted them before the group got them (the queue not cleaned yet)
                look.shard.lost(group, topic, q, gone_runs)
            cursor += last
            moved = cursor
            if last < n or n < SCAN_UNITS:
                break
        return taken, moved

    def _hand_out(self, look: _Look, answer: PopAnswer) -> None:
        """Record the look's deliveries and cursors as one durable step, then fill
        ``answer`` with the messages handed out (their records read if not yet)."""
        pops, group, topic = look.pops, look.ask.group, look.ask.topic
        handles = pops.pop(
            group, topic, look.deliveries, cursors=look.cursors, now_ms=look.now, invisible_ms=look.ask.invisible_ms
        )
        for d in look.deliveries:  # new unconvertible records, now in flight (held): set aside
            if (d.queue_id, d.offset) in look.reasons and d.hold_until_ms is not None:
                e = pops.entry(group, topic, d.queue_id, d.offset)
                if e is not None:
                    look.aside.append((d.queue_id, e))
        shown = [(d, h) for d, h in zip(look.deliveries, handles) if h is not None]
        if not shown:
            return
        missing = [d for d, _ in shown if d.commitlog_offset not in look.raws]
        got = look.shard.records([d.commitlog_offset for d in missing], [d.size for d in missing])
        look.raws.update((d.commitlog_offset, raw) for d, raw in zip(missing, got) if raw is not None)
        for d, h in shown:
            raw = look.raws.get(d.commitlog_offset)
            if raw is None:  # retention removed it: nothing to deliver, finished for the group
                pops.drop(group, topic, d.queue_id, [d.offset])
                continue
            e = pops.entry(group, topic, d.queue_id, d.offset)
            attempt = e.attempt if e is not None else 1
            answer.messages.append(Handed(d.queue_id, d.offset, attempt, h.encode(), raw))

    # ------------------------------------------------------------------ dead letters

    def _dead_letter_or_later(
        self,
        look: _Look,
        entries: list[tuple[int, InFlight]],
        reasons: dict[tuple[int, int], Unconvertible] | None,
    ) -> bool:
        """Dead-letter ``entries`` (True), or, when the DLQ write fails (a full disk
        refuses it), hold them ``DEAD_LETTER_RETRY_MS`` and try again then (False):
        the pop still answers what it handed out, and does not spin on the failure."""
        group, topic = look.ask.group, look.ask.topic
        try:
            self._dead_letter(look.pops, look.shard, group, topic, entries, look.ask.dead_letter_queue_id, reasons)
        except Exception as err:  # noqa: BLE001 - any failure of the DLQ write: retried later
            log.warning("pop_dead_letter_deferred", group=group, topic=topic, messages=len(entries), error=str(err))
            later = look.now + DEAD_LETTER_RETRY_MS
            look.pops.pop(
                group,
                topic,
                [Delivery(q, e.offset, e.commitlog_offset, e.size, hold_until_ms=later) for q, e in entries],
                cursors={},
                now_ms=look.now,
                invisible_ms=0,
            )
            return False
        return True

    @staticmethod
    def _dead_letter(  # noqa: PLR0913
        pops: PopState,
        shard: PopShard,
        group: str,
        topic: str,
        dead: list[tuple[int, InFlight]],
        dlq_queue: int,
        reasons: dict[tuple[int, int], Unconvertible] | None = None,
    ) -> int:
        """Append each message to %DLQ%<group> (through the commitlog, as the delay
        scheduler delivers), then finish it for the group. A crash between the two
        writes it again next time: at least once, never lost. A message with a reason
        (``reasons[(queue, offset)]``, an unconvertible record set aside) carries it
        in DLQ_REASON, its unconvertible time left out, so the dead letter is one a
        consumer can receive."""
        reasons = dict(reasons or {})
        raws = shard.records([e.commitlog_offset for _, e in dead], [e.size for _, e in dead])
        rows = [(q, e, raw) for (q, e), raw in zip(dead, raws)]
        records = [(q, e, _decode(raw)) for q, e, raw in rows if raw]
        for q, e, rec in records:
            why = reasons.get((q, e.offset)) or unconvertible(rec)  # one out of attempts may be one too
            if why is not None:
                reasons[(q, e.offset)] = why
                log.warning(
                    "pop_record_set_aside",
                    group=group,
                    topic=topic,
                    queue=q,
                    offset=e.offset,
                    commitlog_offset=e.commitlog_offset,
                    code=why.code,
                    reason=why.reason,
                )
        if records:
            shard.append_dead_letters(
                dead_letter_batch(
                    group, topic, [(e.attempt, r, reasons.get((q, e.offset))) for q, e, r in records], dlq_queue
                )
            )
        by_queue: dict[int, list[int]] = {}
        for q, e, _ in rows:
            by_queue.setdefault(q, []).append(e.offset)
        for q, offs in by_queue.items():
            pops.drop(group, topic, q, offs)
        log.info("pop_dead_lettered", group=group, topic=topic, messages=len(rows))
        return len(rows)

    # ------------------------------------------------------------------ ack, change, DLQ

    def _handle(self, text: str) -> ReceiptHandle | None:
        """The handle in ``text`` if it is one and names this shard, else None (malformed)."""
        try:
            h = ReceiptHandle.parse(text)
        except InvalidReceiptHandle:
            return None
        return h if h.shard == self.shard else None

    def ack(self, group: str, topic: str, texts: Sequence[str]) -> list[AckOutcome]:
        """Finish the messages whose handles are current, as one durable step; an
        outcome per handle text, in order (PopState.ack, MALFORMED for a text that is
        not a handle of this shard)."""
        check_names(group, topic)
        outcomes = [AckOutcome.MALFORMED] * len(texts)
        handles, where = [], []
        for i, text in enumerate(texts):
            h = self._handle(text)
            if h is not None:
                handles.append(h)
                where.append(i)
        if handles:
            pops = self.state()
            with self._lock(group, topic):
                done = pops.ack(group, topic, handles, self.clock.now_ms())
            for i, outcome in zip(where, done):
                outcomes[i] = outcome
        return outcomes

    def change_invisible(
        self, group: str, topic: str, text: str, invisible_ms: int
    ) -> tuple[AckOutcome, ReceiptHandle | None]:
        """A new deadline ``now + invisible_ms`` for a current handle's message: (OK,
        the new handle), or the refusal (MALFORMED, FORGED, EXPIRED, STALE; checked
        in that order) and None, with nothing changed."""
        check_names(group, topic)
        check_invisible_ms(invisible_ms)
        h = self._handle(text)
        if h is None:
            return AckOutcome.MALFORMED, None
        pops = self.state()
        try:  # the tag first, then expiry, then whether it is current (PopState.change_invisible)
            with self._lock(group, topic):
                new = pops.change_invisible(group, topic, h, self.clock.now_ms(), invisible_ms)
        except InvalidReceiptHandle as e:
            outcome = {"forged": AckOutcome.FORGED, "expired": AckOutcome.EXPIRED}.get(e.reason, AckOutcome.STALE)
            return outcome, None
        return AckOutcome.OK, new

    def to_dead_letter(  # noqa: PLR0913
        self, group: str, topic: str, text: str, dlq_queue: int, reason: str, shard: PopShard
    ) -> AckOutcome:
        """Send a current handle's message to ``%DLQ%<group>`` now and finish it (OK),
        or refuse as :meth:`ack` would, with nothing changed. ``reason`` (the front
        could not convert it) goes into DLQ_REASON: the core's own reason for the
        record if it has one, else ``reason`` (cut to 200 characters)."""
        check_names(group, topic)
        h = self._handle(text)
        if h is None:
            return AckOutcome.MALFORMED
        pops = self.state()
        with self._lock(group, topic):
            outcome = pops.check(group, topic, h, self.clock.now_ms())  # forged, expired, stale: refused
            entry = pops.entry(group, topic, h.queue_id, h.offset)
            if outcome is not AckOutcome.OK:
                return outcome
            if entry is None:  # not after a current check under the lock; kept for the type
                return AckOutcome.STALE
            reasons = {}
            if reason:
                raw = shard.records([entry.commitlog_offset], [entry.size])[0]
                why = unconvertible(_decode(raw)) if raw else None
                reasons[(h.queue_id, h.offset)] = why or Unconvertible("conversion", reason[:200])
            self._dead_letter(pops, shard, group, topic, [(h.queue_id, entry)], dlq_queue, reasons)
        return AckOutcome.OK


# ---------------------------------------------------------------------- a dead letter's record


def dead_letter_batch(
    group: str, topic: str, rows: Sequence[tuple[int, MessageRecord, Unconvertible | None]], dlq_queue: int
) -> MessageBatch:
    """The dead letters of ``rows`` (attempt, the record, why it was set aside or
    None) for ``%DLQ%<group>``'s queue ``dlq_queue``: body, tags, keys, unique key,
    flag and born host kept, reconsume times = the attempts made, properties as
    :func:`dead_letter_properties`."""
    return MessageBatch(
        topics=[dead_letter_topic(group)] * len(rows),
        bodies=[r.body for _, r, _ in rows],
        queue_ids=[dlq_queue] * len(rows),
        tags=[r.tags for _, r, _ in rows],
        keys=[r.keys for _, r, _ in rows],
        unique_keys=[r.unique_key for _, r, _ in rows],
        properties=[dead_letter_properties(r, topic, why) for _, r, why in rows],
        flags=[r.flag for _, r, _ in rows],
        sysflags=[0] * len(rows),
        born_timestamps=[born_ms(r) for _, r, _ in rows],
        born_hosts=[r.born_host for _, r, _ in rows],
        reconsume_times=[attempt for attempt, _, _ in rows],
    )


def born_ms(rec: MessageRecord) -> int:
    """The born time a dead letter keeps: the record's, or its store time (then 0)
    when a consumer could not take it (consumer_rules)."""
    for ms in (rec.born_timestamp, rec.store_timestamp):
        if MIN_TIME_MS <= ms <= MAX_TIME_MS:
            return ms
    return 0


def dead_letter_properties(rec: MessageRecord, topic: str, why: Unconvertible | None = None) -> dict[str, str]:
    """A dead letter's properties: the record's (less those with columns of their
    own), its origin topic and message id (as RocketMQ's), and ``why``'s reason in
    DLQ_REASON, without the delivery time that made it unreceivable."""
    props = {k: v for k, v in rec.properties.items() if k not in _DROPPED_PROPERTIES}
    props[DLQ_ORIGIN_TOPIC] = topic
    props[RETRY_TOPIC] = topic
    props[DLQ_ORIGIN_MESSAGE_ID] = rec.unique_key or rec.msg_id
    if why is not None:
        props[DLQ_REASON] = why.reason
        if why.code == "delivery_time":
            props.pop(TIMER_DELIVER_MS, None)  # else the dead letter would be just as unreceivable
    return props


def _decode(raw: bytes) -> MessageRecord:
    return decode_records(raw, _FIRST, check_crc=False)[0]


__all__ = [
    "DEAD_LETTER_RETRY_MS",
    "DLQ_ORIGIN_MESSAGE_ID",
    "DLQ_ORIGIN_TOPIC",
    "DLQ_REASON",
    "MAX_INVISIBLE_MS",
    "MAX_POP",
    "MAX_WAIT_MS",
    "RETRY_TOPIC",
    "Handed",
    "PopAnswer",
    "PopAsk",
    "PopRules",
    "PopShard",
    "born_ms",
    "check_names",
    "dead_letter_batch",
    "dead_letter_properties",
    "dead_letter_topic",
]
