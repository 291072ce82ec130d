"""Pop consumption on the consume-queue builder's node (ConsumeQueueService Pop,
AckPop, ChangeInvisible, PopToDeadLetter): RocketMQ 5's way of consuming, which the
front's RocketMQ port (services/rocketmq) serves to the official clients.

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
``pop_record_set_aside``, reported in ``PopResponse.set_aside`` for the front's
metric), and the pop answers the other messages. Receipt handles carry an HMAC tag
under the shard's secret (mqstore/store/pop.py): a handle the shard did not make for
the group and topic is POP_MALFORMED; PopToDeadLetter refuses forged, expired and
stale handles as AckPop does. A dead letter the commitlog refuses (a full disk) is
held and tried again a second later; the pop answers what it handed out meanwhile.

An empty pop waits (long polling) for units to arrive, for a message in flight to
come due, or for ``wait_ms``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

import numpy as np
import structlog

from mqstore.errors import InvalidReceiptHandle
from mqstore.formats.javahash import tags_code
from mqstore.formats.message import decode_records
from mqstore.formats.names import check_topic
from mqstore.rpc.v1 import consume_queue_pb2 as pb
from mqstore.services.common.errors import BadRequest
from mqstore.services.index.delay import RemoteLog
from mqstore.services.index.local_pull import LocalPulls
from mqstore.services.index.state import BuilderState
from mqstore.store import reads
from mqstore.store.builders import QueueBuilder
from mqstore.store.consumer_offsets import check_group
from mqstore.store.consumer_rules import (
    MAX_TIME_MS,
    MIN_TIME_MS,
    TIMER_DELIVER_MS,
    Unconvertible,
    delivery_ms,
    unconvertible,
)
from mqstore.store.local_ports import units_page
from mqstore.store.loss_ledger import pop_gap, runs
from mqstore.store.messages import MessageBatch
from mqstore.store.pop import AckOutcome, Delivery, InFlight, PopState, ReceiptHandle

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
_SCAN_UNITS = 256  # units looked at per read when a filter skips messages
_MAX_SET_ASIDE = 256  # unconvertible records set aside per look (one DLQ append)
_FIRST = np.zeros(1, np.int64)  # decode_records' positions of a lone record
_OUTCOMES = {
    AckOutcome.OK: pb.POP_OK,
    AckOutcome.STALE: pb.POP_STALE,
    AckOutcome.EXPIRED: pb.POP_EXPIRED,
    AckOutcome.FORGED: pb.POP_MALFORMED,  # a tag this shard did not make: not one of its handles
}


def dead_letter_topic(group: str) -> str:
    """``%DLQ%<group>``: where a group's messages go after their last attempt."""
    return DLQ_PREFIX + group


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Popper:
    """The pops of one shard (see the module docstring). Its state opens on first use
    (``<shard>/pop/``) and lives as long as the process: it does not depend on the
    builder's files, so a reopen of the builder keeps it."""

    def __init__(self, state: BuilderState, pulls: LocalPulls) -> None:
        self._state = state
        self._pulls = pulls
        self._pops: PopState | None = None
        self._open_lock = threading.Lock()
        self._group_locks: dict[tuple[str, str], threading.Lock] = {}
        self._rotation: dict[tuple[str, str], int] = {}
        self._arrived: asyncio.Event | None = None  # replaced on every arrival (waiters hold the old one)

    # ------------------------------------------------------------------ state

    def _popstate(self) -> PopState:
        with self._open_lock:
            if self._pops is None:
                self._pops = PopState(self._state.store_dir, shard=self._state.shard)
            return self._pops

    def _lock(self, group: str, topic: str) -> threading.Lock:
        with self._open_lock:
            return self._group_locks.setdefault((group, topic), threading.Lock())

    def close(self) -> None:
        with self._open_lock:
            if self._pops is not None:
                self._pops.close()
                self._pops = None

    def units_arrived(self) -> None:
        """New units were built (called on the server's loop after PutUnits): wake long polls."""
        ev, self._arrived = self._arrived, None
        if ev is not None:
            ev.set()

    def _arrival(self) -> asyncio.Event:
        if self._arrived is None:
            self._arrived = asyncio.Event()
        return self._arrived

    # ------------------------------------------------------------------ pop

    async def pop(self, request: pb.PopRequest) -> pb.PopResponse:
        builder: QueueBuilder = self._state.ready()
        _check_names(request.group, request.topic)
        if not 1 <= request.max_messages <= MAX_POP:
            raise BadRequest(f"max_messages must be in 1..{MAX_POP}, got {request.max_messages}")
        if not 0 <= request.invisible_ms <= MAX_INVISIBLE_MS:
            raise BadRequest(f"invisible_ms must be in 0..{MAX_INVISIBLE_MS}, got {request.invisible_ms}")
        if not 0 <= request.wait_ms <= MAX_WAIT_MS:
            raise BadRequest(f"wait_ms must be in 0..{MAX_WAIT_MS}, got {request.wait_ms}")
        if request.max_attempts < 1:
            raise BadRequest(f"max_attempts must be at least 1, got {request.max_attempts}")
        if any(q < 0 for q in request.queue_ids) or not request.queue_ids:
            raise BadRequest("queue_ids must name at least one queue, none negative")
        tags = reads.parse_tag_expression(request.tag_expression)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + request.wait_ms / 1000
        aside: list[str] = []  # set aside while waiting: no reason to stop waiting, reported at the end
        while True:
            arrival = self._arrival()  # before looking, so an arrival meanwhile is not missed
            answer, next_due = await self._state.call(self._pop_once, builder, request, tags)
            aside += answer.set_aside
            left = give_up - loop.time()
            if answer.messages or answer.dead_lettered or left <= 0:
                answer.set_aside[:] = aside
                return answer
            if next_due is not None:
                left = min(left, max(0.0, (next_due - _now_ms()) / 1000))
            try:
                await asyncio.wait_for(arrival.wait(), timeout=left)
            except TimeoutError:
                pass
            builder = self._state.ready()

    def _pop_once(self, builder: QueueBuilder, req: pb.PopRequest, tags: set[str] | None):
        """One look at the queues (an executor thread): (answer, the earliest deadline
        among what is in flight, for the long poll)."""
        group, topic, qids = req.group, req.topic, list(req.queue_ids)
        pops = self._popstate()
        with self._lock(group, topic):
            now = _now_ms()
            deliveries: list[Delivery] = []
            dead: list[tuple[int, InFlight]] = []
            aside: list[tuple[int, InFlight]] = []  # unconvertible: to the DLQ alone, never handed out
            reasons: dict[tuple[int, int], Unconvertible] = {}
            raws: dict[int, bytes] = {}  # commitlog offset -> record, read once per look
            for q, e in pops.due(group, topic, qids, now, req.max_messages + 64):
                if len(deliveries) >= req.max_messages:
                    break
                if e.attempt >= req.max_attempts:
                    dead.append((q, e))
                elif (
                    req.fifo
                    and e.attempt == 0
                    and (pops.delivered_in_flight(group, topic, q) or any(d.queue_id == q for d in deliveries))
                ):
                    continue  # a delay message whose time came joins the queue's order behind what is out
                else:
                    deliveries.append(Delivery(q, e.offset, e.commitlog_offset, e.size))
            deliveries = self._set_aside_due(pops, group, topic, deliveries, raws, aside, reasons)
            cursors: dict[int, int] = {}
            start = self._rotation.get((group, topic), 0)
            order = qids[start % len(qids) :] + qids[: start % len(qids)]
            self._rotation[(group, topic)] = start + 1
            for q in order:
                room = req.max_messages - sum(1 for d in deliveries if d.hold_until_ms is None)
                if room <= 0:
                    break
                if req.fifo and (
                    pops.delivered_in_flight(group, topic, q)
                    or any(d.queue_id == q and d.hold_until_ms is None for d in deliveries)
                ):
                    continue  # in order: nothing new while one is out (a held delay message is not out)
                taken, cursor = self._take_new(builder, group, topic, q, room, tags, now, raws, reasons)
                deliveries.extend(taken)
                if cursor is not None:
                    cursors[q] = cursor
            answer = pb.PopResponse()
            if deliveries or cursors:
                handles = pops.pop(group, topic, deliveries, cursors=cursors, now_ms=now, invisible_ms=req.invisible_ms)
                for d in deliveries:  # new unconvertible records, now in flight (held): set aside
                    if (d.queue_id, d.offset) in reasons and d.hold_until_ms is not None:
                        e = pops.entry(group, topic, d.queue_id, d.offset)
                        if e is not None:
                            aside.append((d.queue_id, e))
                shown = [(d, h) for d, h in zip(deliveries, handles) if h is not None]
                if shown:
                    missing = [d for d, _ in shown if d.commitlog_offset not in raws]
                    got = self._records([d.commitlog_offset for d in missing], [d.size for d in missing])
                    raws.update((d.commitlog_offset, raw) for d, raw in zip(missing, got) if raw is not None)
                    parts = []
                    for d, h in shown:
                        raw = raws.get(d.commitlog_offset)
                        if raw is None:  # retention removed it: nothing to deliver, finished for the group
                            pops.drop(group, topic, d.queue_id, [d.offset])
                            continue
                        attempt = self._attempt_of(pops, group, topic, d)
                        answer.messages.add(
                            queue_id=d.queue_id,
                            queue_offset=d.offset,
                            attempt=attempt,
                            receipt_handle=h.encode(),
                            size=len(raw),
                        )
                        parts.append(raw)
                    answer.records = b"".join(parts)
            if aside and self._dead_letter_or_later(pops, group, topic, aside, req.dead_letter_queue_id, reasons, now):
                answer.set_aside.extend(reasons[(q, e.offset)].code for q, e in aside)
            if dead and self._dead_letter_or_later(pops, group, topic, dead, req.dead_letter_queue_id, None, now):
                answer.dead_lettered = len(dead)
            return answer, pops.next_deadline_ms(group, topic, qids)

    def _dead_letter_or_later(  # noqa: PLR0913
        self,
        pops: PopState,
        group: str,
        topic: str,
        entries: list[tuple[int, InFlight]],
        dlq_queue: int,
        reasons: dict[tuple[int, int], Unconvertible] | None,
        now: int,
    ) -> bool:
        """Dead-letter ``entries`` (True), or, when the DLQ write fails (a full disk
        refuses it), hold them ``DEAD_LETTER_RETRY_MS`` and try again then (False):
        the pop still answers what it handed out, and does not spin on the failure."""
        try:
            self._dead_letter(pops, group, topic, entries, dlq_queue, reasons)
        except Exception as err:  # noqa: BLE001 - any failure of the DLQ write: retried later
            log.warning("pop_dead_letter_deferred", group=group, topic=topic, messages=len(entries), error=str(err))
            later = now + DEAD_LETTER_RETRY_MS
            pops.pop(
                group,
                topic,
                [Delivery(q, e.offset, e.commitlog_offset, e.size, hold_until_ms=later) for q, e in entries],
                cursors={},
                now_ms=now,
                invisible_ms=0,
            )
            return False
        return True

    def _set_aside_due(
        self,
        pops: PopState,
        group: str,
        topic: str,
        deliveries: list[Delivery],
        raws: dict[int, bytes],
        aside: list[tuple[int, InFlight]],
        reasons: dict[tuple[int, int], Unconvertible],
    ) -> list[Delivery]:
        """The due deliveries whose records a consumer can take; the others (a record
        a crash left held before it was set aside, or one that was handed out before
        this check) go to ``aside``. Fills ``raws``."""
        if not deliveries:
            return deliveries
        got = self._records([d.commitlog_offset for d in deliveries], [d.size for d in deliveries])
        keep = []
        for d, raw in zip(deliveries, got):
            if raw is not None:
                raws[d.commitlog_offset] = raw
                why = unconvertible(decode_records(raw, _FIRST, check_crc=False)[0])
                if why is not None:
                    e = pops.entry(group, topic, d.queue_id, d.offset)
                    if e is not None:
                        reasons[(d.queue_id, d.offset)] = why
                        aside.append((d.queue_id, e))
                    continue
            keep.append(d)
        return keep

    @staticmethod
    def _attempt_of(pops: PopState, group: str, topic: str, d: Delivery) -> int:
        e = pops.entry(group, topic, d.queue_id, d.offset)
        return e.attempt if e is not None else 1

    def _take_new(  # noqa: PLR0913
        self,
        builder: QueueBuilder,
        group: str,
        topic: str,
        q: int,
        room: int,
        tags: set[str] | None,
        now: int,
        raws: dict[int, bytes],
        reasons: dict[tuple[int, int], Unconvertible],
    ) -> tuple[list[Delivery], int | None]:
        """Up to ``room`` new deliveries of queue ``q`` from the group's cursor, and the
        cursor after them (None: nothing looked at). An unconvertible record is taken
        held until ``now`` (in flight, so a crash before its dead letter redoes it),
        with its reason in ``reasons``; a record to hand out goes into ``raws``."""
        pops = self._popstate()
        cursor = pops.cursor(group, topic, q)
        taken: list[Delivery] = []
        moved = None
        shown = 0
        codes = None if tags is None else np.array([tags_code(t) for t in tags], np.int64)
        while shown < room:
            page = units_page(builder.consume_queues, topic, q, cursor if cursor is not None else 0, _SCAN_UNITS)
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
                    self._state.losses.note(
                        [pop_gap(group, topic, q, cursor, page.first_offset, forced=self._state.cleaned_forced)]
                    )
            cursor = page.first_offset
            n = len(page.physical_offsets)
            if n == 0:
                break
            wanted = reads.real_units(page)  # pre-blank units hold no message
            if codes is not None:
                wanted &= np.isin(page.tags_codes, codes)
            candidates = np.flatnonzero(wanted)
            offsets, sizes = page.physical_offsets, page.sizes
            records = self._records(offsets[candidates].tolist(), sizes[candidates].tolist())
            last = n  # units of this page consumed (the filtered ones included)
            gone: list[int] = []
            for i, raw in zip(candidates.tolist(), records):
                if raw is None:  # its segment is gone: the group never gets it
                    gone.append(cursor + i)
                    continue
                rec = decode_records(raw, _FIRST, check_crc=False)[0]
                if tags is not None and rec.tags not in tags:
                    continue  # a hash collision: not this filter's tag
                why = unconvertible(rec)
                if why is not None:
                    reasons[(q, cursor + i)] = why
                    taken.append(Delivery(q, cursor + i, int(offsets[i]), int(sizes[i]), hold_until_ms=now))
                    if len(reasons) >= _MAX_SET_ASIDE:  # a queue full of them: the rest next time
                        last = i + 1
                        break
                    continue
                hold = delivery_ms(rec.properties)
                held = hold if hold is not None and hold > now else None
                taken.append(Delivery(q, cursor + i, int(offsets[i]), int(sizes[i]), hold_until_ms=held))
                if held is None:
                    raws[int(offsets[i])] = raw
                    shown += 1
                    if shown >= room:
                        last = i + 1
                        break
            self._note_gone(group, topic, q, [o for o in gone if o < cursor + last])
            cursor += last
            moved = cursor
            if last < n or n < _SCAN_UNITS:
                break
        return taken, moved

    def _note_gone(self, group: str, topic: str, q: int, offsets: list[int]) -> None:
        """Queue offsets whose records retention deleted before the group got them
        (the consume queue not cleaned yet): counted and logged, one range per run."""
        forced = self._state.cleaned_forced
        self._state.losses.note([pop_gap(group, topic, q, a, b, forced=forced) for a, b in runs(offsets)])

    def _records(self, offsets: Sequence[int], sizes: Sequence[int]) -> list[bytes | None]:
        """The stored records at ``offsets`` (None where retention removed one), in the given order."""
        if not offsets:
            return []
        order = np.argsort(np.asarray(offsets, np.int64), kind="stable")
        at = np.asarray(offsets, np.int64)[order]
        sz = np.asarray(sizes, np.int64)[order]
        found, raws = self._pulls.read_raw(self._state.view, self._state.commitlog_min_offset, at, sz)
        by_offset = {
            int(o): raws.buffer[int(raws.offsets[k]) : int(raws.offsets[k + 1])].tobytes() for k, o in enumerate(found)
        }
        return [by_offset.get(int(o)) for o in offsets]

    def _dead_letter(  # noqa: PLR0913
        self,
        pops: PopState,
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
        raws = self._records([e.commitlog_offset for _, e in dead], [e.size for _, e in dead])
        rows = [(q, e, raw) for (q, e), raw in zip(dead, raws)]
        records = [(q, e, decode_records(raw, _FIRST, check_crc=False)[0]) for q, e, raw in rows if raw]
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
            batch = MessageBatch(
                topics=[dead_letter_topic(group)] * len(records),
                bodies=[r.body for _, _, r in records],
                queue_ids=[dlq_queue] * len(records),
                tags=[r.tags for _, _, r in records],
                keys=[r.keys for _, _, r in records],
                unique_keys=[r.unique_key for _, _, r in records],
                properties=[_dead_letter_properties(r, topic, reasons.get((q, e.offset))) for q, e, r in records],
                flags=[r.flag for _, _, r in records],
                sysflags=[0] * len(records),
                born_timestamps=[_born_ms(r) for _, _, r in records],
                born_hosts=[r.born_host for _, _, r in records],
                reconsume_times=[e.attempt for _, e, _ in records],
            )
            view = self._state.view
            if view is None:
                raise BadRequest("the builder is not open")
            RemoteLog(view).append(batch)  # the delay scheduler's internal append (DeliverDelayed)
        by_queue: dict[int, list[int]] = {}
        for q, e, _ in rows:
            by_queue.setdefault(q, []).append(e.offset)
        for q, offs in by_queue.items():
            pops.drop(group, topic, q, offs)
        log.info("pop_dead_lettered", group=group, topic=topic, messages=len(rows))
        return len(rows)

    # ------------------------------------------------------------------ ack, change, DLQ

    async def ack(self, request: pb.AckPopRequest) -> pb.AckPopResponse:
        self._state.ready()
        _check_names(request.group, request.topic)
        return await self._state.call(self._ack, request)

    def _ack(self, request: pb.AckPopRequest) -> pb.AckPopResponse:
        outcomes = [pb.POP_MALFORMED] * len(request.receipt_handles)
        handles, where = [], []
        for i, text in enumerate(request.receipt_handles):
            h = self._handle(text)
            if h is not None:
                handles.append(h)
                where.append(i)
        if handles:
            with self._lock(request.group, request.topic):
                done = self._popstate().ack(request.group, request.topic, handles, _now_ms())
            for i, outcome in zip(where, done):
                outcomes[i] = _OUTCOMES[outcome]
        return pb.AckPopResponse(outcomes=outcomes)

    async def change(self, request: pb.ChangeInvisibleRequest) -> pb.ChangeInvisibleResponse:
        self._state.ready()
        _check_names(request.group, request.topic)
        if not 0 <= request.invisible_ms <= MAX_INVISIBLE_MS:
            raise BadRequest(f"invisible_ms must be in 0..{MAX_INVISIBLE_MS}, got {request.invisible_ms}")
        return await self._state.call(self._change, request)

    def _change(self, request: pb.ChangeInvisibleRequest) -> pb.ChangeInvisibleResponse:
        h = self._handle(request.receipt_handle)
        if h is None:
            return pb.ChangeInvisibleResponse(outcome=pb.POP_MALFORMED)
        try:  # the tag first, then expiry, then whether it is current (PopState.change_invisible)
            with self._lock(request.group, request.topic):
                new = self._popstate().change_invisible(
                    request.group, request.topic, h, _now_ms(), request.invisible_ms
                )
        except InvalidReceiptHandle as e:
            outcome = {"forged": pb.POP_MALFORMED, "expired": pb.POP_EXPIRED}.get(e.reason, pb.POP_STALE)
            return pb.ChangeInvisibleResponse(outcome=outcome)
        return pb.ChangeInvisibleResponse(outcome=pb.POP_OK, receipt_handle=new.encode())

    async def to_dead_letter(self, request: pb.PopToDeadLetterRequest) -> pb.PopToDeadLetterResponse:
        self._state.ready()
        _check_names(request.group, request.topic)
        return await self._state.call(self._to_dead_letter, request)

    def _to_dead_letter(self, request: pb.PopToDeadLetterRequest) -> pb.PopToDeadLetterResponse:
        h = self._handle(request.receipt_handle)
        if h is None:
            return pb.PopToDeadLetterResponse(outcome=pb.POP_MALFORMED)
        pops = self._popstate()
        group, topic = request.group, request.topic
        with self._lock(group, topic):
            outcome = pops.check(group, topic, h, _now_ms())  # forged, expired, stale: refused as ack refuses
            entry = pops.entry(group, topic, h.queue_id, h.offset)
            if outcome is not AckOutcome.OK:
                return pb.PopToDeadLetterResponse(outcome=_OUTCOMES[outcome])
            if entry is None:  # not after a current check under the lock; kept for the type
                return pb.PopToDeadLetterResponse(outcome=pb.POP_STALE)
            reasons = {}
            if request.reason:  # the front could not convert it: the core's reason if it has one
                raw = self._records([entry.commitlog_offset], [entry.size])[0]
                why = unconvertible(decode_records(raw, _FIRST, check_crc=False)[0]) if raw else None
                reasons[(h.queue_id, h.offset)] = why or Unconvertible("conversion", request.reason[:200])
            self._dead_letter(pops, group, topic, [(h.queue_id, entry)], request.dead_letter_queue_id, reasons)
        return pb.PopToDeadLetterResponse(outcome=pb.POP_OK)

    def _handle(self, text: str) -> ReceiptHandle | None:
        try:
            h = ReceiptHandle.parse(text)
        except InvalidReceiptHandle:
            return None
        return h if h.shard == self._state.shard else None


def _check_names(group: str, topic: str) -> None:
    try:
        check_group(group)
        check_topic(topic)
    except Exception as e:  # noqa: BLE001 - the store's name errors, as a bad request
        raise BadRequest(str(e)) from None


def _born_ms(rec) -> int:
    """The born time a dead letter keeps: the record's, or its store time (then 0)
    when a consumer could not take it (consumer_rules)."""
    for ms in (rec.born_timestamp, rec.store_timestamp):
        if MIN_TIME_MS <= ms <= MAX_TIME_MS:
            return ms
    return 0


def _dead_letter_properties(rec, topic: str, why: Unconvertible | None = None) -> dict[str, str]:
    props = {k: v for k, v in rec.properties.items() if k not in ("TAGS", "KEYS", "UNIQ_KEY", "__CRC32#")}
    props[DLQ_ORIGIN_TOPIC] = topic
    props[RETRY_TOPIC] = topic
    props[DLQ_ORIGIN_MESSAGE_ID] = rec.unique_key or rec.msg_id
    if why is not None:
        props[DLQ_REASON] = why.reason
        if why.code == "delivery_time":
            props.pop(TIMER_DELIVER_MS, None)  # else the dead letter would be just as unreceivable
    return props


__all__ = ["MAX_POP", "Popper", "dead_letter_topic"]
