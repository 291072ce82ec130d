"""Transaction messages on the RocketMQ port: half messages, EndTransaction and the
check-back of orphaned halves, as RocketMQ 5's broker does them (broker/.../transaction:
TransactionalMessageBridge, TransactionalMessageServiceImpl, EndTransactionProcessor,
DefaultTransactionalMessageCheckListener; the proxy's SendMessageActivity and
GrpcClientChannel for the gRPC side).

Records, all written through ``CommitLogService.DeliverDelayed`` (the store's internal
append: "as given", no producer checks, which refuse these system topics):

    half     RMQ_SYS_TRANS_HALF_TOPIC, sysflag NOT_TYPE, the client's message with
             REAL_TOPIC, REAL_QID (the queue picked for it), TRAN_MSG=true, PGROUP (the
             topic: RocketMQ's proxy uses it as the gRPC producer group), UNIQ_KEY = the
             client's message id, CHECK_IMMUNITY_TIME_IN_SECONDS when the client sent an
             orphaned_transaction_recovery_duration. RocketMQ writes queue 0; here each
             shard has its own half queue: the lowest queue id of the half topic that
             the routing rule puts on the shard of the real message's queue (queue 0
             with one shard), so the half, its op and its commit are on one shard.
    commit   the real message on REAL_TOPIC / REAL_QID: body, flag, tags, keys, born
             time and host, user properties of the half, UNIQ_KEY kept (consumers see the
             producer's message id), REAL_* / TRAN_MSG / CHECK_IMMUNITY_* removed, sysflag
             TRANSACTION_COMMIT (as EndTransactionProcessor; consumers read it as NORMAL).
             The commitlog has no column for the prepared-transaction offset: it stays 0.
    op       RMQ_SYS_TRANS_OP_HALF_TOPIC, tag "d", body "<half queue offset>," (the
             separator RocketMQ's batched op bodies use), on the lowest op-topic queue of
             the half's shard. A commit is one DeliverDelayed of [commit, op]: both or
             neither are written, so a commit is never delivered twice by a retried
             EndTransaction or a check answered after a crash between the two.
    discard  a half checked ``check_max`` times without an answer: written to
             TRANS_CHECK_MAX_TIME_TOPIC (as RocketMQ's check listener) together with its
             op record, and logged (``transaction_discarded``): it is rolled back.

The transaction id a SendResultEntry carries is the half record's offset msgId (store
host + commitlog offset): it names the shard and the half. EndTransaction never reads the
commitlog at an offset a caller chose: after Pub on the request's own topic, the id must
name a half this front knows (pending, or ended and still remembered: ``ENDED_KEPT`` per
shard), of that topic, with that message id; only then is the half's record read. Every
miss (a blank or malformed id, no such shard, no half at that offset, another topic's or
another message's half, a half forgotten since) answers one INVALID_TRANSACTION_ID with
one text (``NO_TRANSACTION``), so no answer tells what lies at an offset (README,
"Security").

State (``TransactionService``, on the front's event loop, per shard): the halves still
pending (half queue offset -> commitlog offset, real topic, message id, when to check
next, checks made), the halves resolved at or past the progress point, and the
progress point itself: ``(H, P)``, every half below queue offset H is resolved and
every op record below op-queue offset P names a half below H. The progress is stored as
the consumer offsets of group ``CID_RMQ_SYS_TRANS`` (RocketMQ's MixAll.CID_SYS_RMQ_TRANS)
on the shard's half and op queues (``ConsumeQueueService.CommitOffset``: the
consume-queue builder's offsets file, as RocketMQ keeps its check progress), half
first, and only while nothing is being written on the shard, so it is never ahead of
what is durable.

Restart: a new front (``start``) recovers each shard on its own: fetch (H, P), wait
until the dispatcher has put every record written before the recovery began into the
consume queues (GetOffsets: dispatched >= wrote), read the op queue from P (units +
records: the half offsets each op names) and the half queue's units from H; a half
without an op is pending again (its record read for topic, message id and store time;
its check count starts at 0 again). Until its shard is recovered, EndTransaction waits
(within the call's deadline) and the checker leaves the shard alone; sends of halves
go on meanwhile.

Check-back (``tick``, every ``tick_s``): a pending half whose time came (store time +
CHECK_IMMUNITY_TIME_IN_SECONDS, else ``timeout_ms``: RocketMQ's transactionTimeOut 6 s;
then every ``check_interval_ms``, RocketMQ's transactionCheckInterval 30 s) is sent as
``TelemetryCommand{recover_orphaned_transaction_command{message, transaction_id}}`` on
the Telemetry stream of a connected producer whose publishing settings name its topic
(one of them, in turn; none connected: the check still counts, as in RocketMQ); the
client answers with EndTransaction(source = SOURCE_SERVER_CHECK). After ``check_max``
(RocketMQ's transactionCheckMax 15) checks it is discarded.

Ending a transaction that already has an op record (twice, or after a check's answer,
or after its discard) answers OK ("already ended") and writes nothing: whatever came
first stands. The front remembers the last ``ENDED_KEPT`` ended halves of each shard
(after a restart: those from the last ``ENDED_KEPT`` units of the half queue, their
records read when asked); one ended longer ago is INVALID_TRANSACTION_ID. A resolution
other than COMMIT / ROLLBACK answers OK and leaves the half to the checks (RocketMQ's
"unknown").
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import grpc
import numpy as np
import structlog

from mqstore.errors import DecodeError
from mqstore.formats.message import MessageRecord, SysFlag, decode_records
from mqstore.formats.msgid import Host, parse_offset_msg_id
from mqstore.rpc.rocketmq_v2 import messaging_pb2 as v2
from mqstore.rpc.v1 import commitlog_pb2, common_pb2
from mqstore.rpc.v1 import consume_queue_pb2 as cq
from mqstore.services.common.errors import status_of
from mqstore.services.query.routing import STORE_PORT_BASE
from mqstore.services.rocketmq import convert
from mqstore.services.rocketmq.status import Code, ProtocolError

if TYPE_CHECKING:
    from mqstore.services.common.shard_clients import Shard
    from mqstore.services.common.shard_set import ShardSet
    from mqstore.services.rocketmq.settings import ClientSession

log = structlog.get_logger(__name__)

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
TICK_S = 1.0
DISPATCH_WAIT_S = 60.0  # recovery waits this long for the consume queues to catch up, then retries
RETRY_S = 2.0  # a shard whose recovery failed is tried again after this
WARN_EVERY_MS = 30_000  # a shard's check failures are logged at most this often
ENDED_KEPT = 10_000  # ended halves remembered per shard, for "already ended" answers
_READ_CHUNK = 10_000  # CommitLogService.Read takes at most this many offsets
_UNITS_PAGE = 10_000
# Properties of a half that the committed message does not carry (EndTransactionProcessor
# clears REAL_TOPIC / REAL_QID and TRAN_MSG; the check properties are the broker's), and
# the ones columns carry on their own (tags, keys, UNIQ_KEY) or the store sets.
_NOT_COMMITTED = frozenset({REAL_TOPIC, REAL_QID, TRAN_MSG, CHECK_IMMUNITY, CHECK_TIMES})
_COLUMNS = frozenset({"TAGS", "KEYS", "UNIQ_KEY", "__CRC32#"})


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


# ---------------------------------------------------------------------- records (pure)


def half_columns(
    messages: Sequence[v2.Message], real_queue_ids: Sequence[int], half_queue: int, max_body: int, now_ms: int
) -> common_pb2.MessageColumns:
    """The half records of checked TRANSACTION messages (``convert.check_message``), all
    to ``half_queue`` of the half topic (see the module docstring)."""
    cols = convert.to_columns(list(messages), [half_queue] * len(messages), max_body)
    for i, (m, q) in enumerate(zip(messages, real_queue_ids)):
        sp = m.system_properties
        cols.topics[i] = HALF_TOPIC
        props = cols.properties[i].entries
        props[REAL_TOPIC] = m.topic.name
        props[REAL_QID] = str(q)
        props[TRAN_MSG] = "true"
        props[PGROUP] = m.topic.name
        if sp.HasField("orphaned_transaction_recovery_duration"):
            props[CHECK_IMMUNITY] = str(sp.orphaned_transaction_recovery_duration.ToSeconds())
        if cols.born_timestamps[i] == 0:  # DeliverDelayed keeps born times as given
            cols.born_timestamps[i] = now_ms
    return cols


def committed_columns(half: MessageRecord) -> common_pb2.MessageColumns:
    """The real message a committed half becomes (see the module docstring)."""
    topic, queue_id = real_queue(half)
    props = {k: v for k, v in half.properties.items() if k not in _NOT_COMMITTED and k not in _COLUMNS}
    return common_pb2.MessageColumns(
        topics=[topic],
        bodies=[half.body],
        queue_ids=[queue_id],
        tags=[half.tags or ""],
        keys=[half.keys or ""],
        unique_keys=[half.unique_key or ""],
        properties=[common_pb2.Properties(entries=props)],
        flags=[half.flag],
        sysflags=[int(SysFlag.TRANSACTION_COMMIT)],
        born_timestamps=[half.born_timestamp],
        born_hosts=[str(half.born_host)],
        reconsume_times=[half.reconsume_times],
    )


def op_columns(op_queue: int, half_offsets: Sequence[int], now_ms: int) -> common_pb2.MessageColumns:
    """One op record per half queue offset: tag "d", body "<offset>,"."""
    n = len(half_offsets)
    return common_pb2.MessageColumns(
        topics=[OP_TOPIC] * n,
        bodies=[f"{o}{OP_SEPARATOR}".encode() for o in half_offsets],
        queue_ids=[op_queue] * n,
        tags=[REMOVE_TAG] * n,
        keys=[""] * n,
        unique_keys=[""] * n,
        properties=[common_pb2.Properties()] * n,
        flags=[0] * n,
        sysflags=[0] * n,
        born_timestamps=[now_ms] * n,
        born_hosts=["127.0.0.1:0"] * n,
        reconsume_times=[0] * n,
    )


def discard_columns(half: MessageRecord, queue: int) -> common_pb2.MessageColumns:
    """A half checked too often, as RocketMQ keeps it: on TRANS_CHECK_MAX_TIME_TOPIC with
    its properties (REAL_TOPIC and all)."""
    props = {k: v for k, v in half.properties.items() if k not in _COLUMNS}
    return common_pb2.MessageColumns(
        topics=[CHECK_MAX_TOPIC],
        bodies=[half.body],
        queue_ids=[queue],
        tags=[half.tags or ""],
        keys=[half.keys or ""],
        unique_keys=[half.unique_key or ""],
        properties=[common_pb2.Properties(entries=props)],
        flags=[half.flag],
        sysflags=[half.sysflag],
        born_timestamps=[half.born_timestamp],
        born_hosts=[str(half.born_host)],
        reconsume_times=[half.reconsume_times],
    )


def join_columns(*parts: common_pb2.MessageColumns) -> common_pb2.MessageColumns:
    """Columns one after another (every part with the same columns filled)."""
    out = common_pb2.MessageColumns()
    for p in parts:
        for name in (
            "topics",
            "bodies",
            "queue_ids",
            "tags",
            "keys",
            "unique_keys",
            "properties",
            "flags",
            "sysflags",
            "born_timestamps",
            "born_hosts",
            "reconsume_times",
        ):
            getattr(out, name).extend(getattr(p, name))
    n = len(out.bodies)
    for name in ("tags", "keys", "unique_keys", "properties", "flags", "sysflags", "born_timestamps"):
        if len(getattr(out, name)) != n:
            raise ValueError(f"column {name} is not filled in every part")
    return out


def parse_op_body(body: bytes) -> list[int]:
    """The half queue offsets an op record names ("12," or RocketMQ's batched "12,13,"
    or an older "12"); what is not a number is left out, as RocketMQ logs and skips it."""
    out = []
    for part in body.decode("utf-8", "replace").split(OP_SEPARATOR):
        part = part.strip()
        if part.isascii() and part.isdigit():
            out.append(int(part))
    return out


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


def check_back_message(half: MessageRecord) -> v2.Message:
    """The message of a RecoverOrphanedTransactionCommand: the half as the real message
    it stands for (real topic and queue, the producer's message id, TRANSACTION)."""
    topic, queue_id = real_queue(half)
    props = {k: v for k, v in half.properties.items() if k not in _NOT_COMMITTED}
    real = half._replace(topic=topic, queue_id=queue_id, properties=props)
    m = convert.to_message(real, receipt_handle="", attempt=1, invisible_ms=0)
    sp = m.system_properties
    for name in ("receipt_handle", "invisible_duration", "delivery_attempt"):
        sp.ClearField(name)
    sp.message_type = v2.TRANSACTION
    return m


# The one answer to every transaction id that names no transaction of the caller's topic
# and message: the same text whatever the id and whatever lies at its offset.
NO_TRANSACTION = (
    "no transaction of this topic and message id has this transaction id (not one this store's "
    "store hosts gave out, not open, or ended too long ago)"
)


def no_transaction() -> ProtocolError:
    return ProtocolError(Code.INVALID_TRANSACTION_ID, NO_TRANSACTION)


def parse_transaction_id(text: str) -> tuple[Host, int]:
    """(store host, commitlog offset) of a transaction id; INVALID_TRANSACTION_ID
    (``NO_TRANSACTION``) if it is blank or malformed."""
    try:
        return parse_offset_msg_id(text.strip())
    except (DecodeError, ValueError):
        raise no_transaction() from None


# ---------------------------------------------------------------------- state


@dataclass
class Half:
    """A half message still pending on its shard."""

    queue_offset: int
    physical_offset: int
    topic: str  # the real topic
    message_id: str
    due_ms: int  # when it is checked next
    checks: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    transaction_id: str = ""  # the half's offset msgId, upper case ("": not checked)


@dataclass
class ShardHalves:
    """One shard's transactions (see the module docstring: pending halves, resolved
    ones at or past the progress point, the progress point)."""

    shard: int
    half_queue: int
    op_queue: int
    pending: dict[int, Half] = field(default_factory=dict)
    resolved: dict[int, int] = field(default_factory=dict)  # half queue offset >= floor -> op offset
    floor: int = 0  # every half below this queue offset is resolved
    half_end: int = 0  # past every half queue offset known
    op_end: int = 0  # past every op queue offset known
    busy: int = 0  # writes in flight on the shard: the progress is not stored meanwhile
    saved: tuple[int, int] = (-1, -1)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    warned_ms: int = 0  # when the checker last logged a failure of the shard
    # commitlog offset -> pending half queue offset; and the last ENDED_KEPT ended halves
    # (None: ended, known only as a half's offset; its record tells the rest)
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
        while len(self.ended_at) > ENDED_KEPT:
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


class TransactionService:
    """Half messages, EndTransaction and the checker of one front (see the module
    docstring), over the front's ShardSet (``shards``: its typed clients and routing).
    ``producers(topic)``: the client sessions that may get the topic's check-backs
    (connected producers whose user may Pub on it); ``max_body``: the largest body a
    producer may send."""

    def __init__(self, shards: ShardSet, *, producers: Callable[[str], list[ClientSession]], max_body: int) -> None:
        self.shards = shards
        self._producers = producers
        self.max_body = max_body
        self.timeout_ms = TIMEOUT_MS
        self.check_interval_ms = CHECK_INTERVAL_MS
        self.check_max = CHECK_MAX
        self.tick_s = TICK_S
        self._shards: dict[int, ShardHalves] = {}
        self._tasks: list[asyncio.Task] = []
        self._turn = 0

    def shard(self, s: int) -> ShardHalves:
        st = self._shards.get(s)
        if st is None:
            q = self.shards.queue_on
            st = self._shards[s] = ShardHalves(s, q(HALF_TOPIC, s), q(OP_TOPIC, s))
        return st

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Recover every shard (each on its own) and run the checker, on this loop."""
        if self._tasks:
            return
        ctx = contextvars.Context()  # no caller's deadline in background calls
        loop = asyncio.get_running_loop()
        for s in range(len(self.shards)):
            self._tasks.append(loop.create_task(self._recover_until_done(self.shard(s)), context=ctx))
        self._tasks.append(loop.create_task(self._run(), context=ctx))

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.tick_s)
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - a shard down: the next tick tries again
                log.warning("transaction_check_failed", error=str(e))

    # ------------------------------------------------------------------ half messages

    async def prepare(self, shard: int, messages: Sequence[v2.Message], queue_ids: Sequence[int]) -> list:
        """Write the halves of ``messages`` (their real queues ``queue_ids``, all on
        ``shard``): the SendResultEntry of each, its transaction id the half's msgId."""
        st = self.shard(shard)
        now = _now_ms()
        cols = half_columns(messages, queue_ids, st.half_queue, self.max_body, now)
        st.busy += 1
        try:
            r = (await self._deliver(st.shard, cols)).result
            entries = []
            for k, m in enumerate(messages):
                sp = m.system_properties
                props = dict(cols.properties[k].entries)
                st.add(
                    Half(
                        r.queue_offsets[k],
                        r.physical_offsets[k],
                        m.topic.name,
                        sp.message_id,
                        first_check_ms(r.store_timestamps[k] or now, props, self.timeout_ms),
                        transaction_id=r.msg_ids[k].upper(),
                    )
                )
                ok = r.statuses[k] == common_pb2.PUT_OK
                entries.append(
                    v2.SendResultEntry(
                        status=convert_status(ok),
                        message_id=sp.message_id,
                        transaction_id=r.msg_ids[k],
                        offset=r.queue_offsets[k],
                    )
                )
            log.debug("transaction_prepared", shard=shard, halves=len(entries))
            return entries
        finally:
            st.busy -= 1

    # ------------------------------------------------------------------ EndTransaction

    async def end(self, request: v2.EndTransactionRequest, *, wait_s: float | None) -> bool:
        """Commit or roll back the half ``request`` names; False if it had already been
        ended (nothing written). ``wait_s``: how long to wait for the shard's recovery.
        The caller's Pub on ``request.topic`` is checked before (messaging.py); every id
        that names no half of that topic and message is ``no_transaction()``."""
        host, offset = parse_transaction_id(request.transaction_id)
        transaction_id = request.transaction_id.strip().upper()
        topic, message_id = request.topic.name, request.message_id
        shard = host.port - STORE_PORT_BASE  # shard i records store port 10911 + i (query/routing.py)
        if not 0 <= shard < len(self.shards):
            raise no_transaction()
        st = self.shard(shard)
        try:
            await asyncio.wait_for(st.ready.wait(), wait_s)  # the pending halves are all known once ready
        except TimeoutError:
            raise ProtocolError(
                Code.PROXY_TIMEOUT, f"the transactions of shard {st.shard} are still being recovered; try again"
            ) from None

        def names(h: Half) -> bool:
            return h.topic == topic and h.message_id == message_id and h.transaction_id in ("", transaction_id)

        entry = st.pending_at(offset)
        if entry is None or not names(entry):
            if offset in st.ended_at and await self._ended_names(st, offset, transaction_id, topic, message_id):
                log.info(
                    "transaction_already_ended",
                    transaction_id=request.transaction_id,
                    source=v2.TransactionSource.Name(request.source),
                )
                return False
            raise no_transaction()
        if request.resolution not in (v2.COMMIT, v2.ROLLBACK):
            log.info("transaction_left_open", transaction_id=request.transaction_id, resolution=request.resolution)
            return True
        half = await self._read_half(self.shards[shard], entry.physical_offset, transaction_id)
        commit = request.resolution == v2.COMMIT
        # the writes outlive a client that gives up: a half half-ended is what the op prevents
        done = asyncio.get_running_loop().create_task(
            self._resolve(st, entry, half, commit=commit), context=contextvars.Context()
        )
        ended = await asyncio.shield(done)
        if ended:
            log.info(
                "transaction_ended",
                transaction_id=request.transaction_id,
                topic=topic,
                message_id=message_id,
                resolution="COMMIT" if commit else "ROLLBACK",
                source=v2.TransactionSource.Name(request.source),
            )
        return ended

    async def _resolve(self, st: ShardHalves, entry: Half, half: MessageRecord, *, commit: bool) -> bool:
        """Commit (the real message and the op record in one append where both live on
        the half's shard) or roll back (the op record) a pending half; False if it was
        resolved meanwhile."""
        async with entry.lock:
            if st.pending.get(entry.queue_offset) is not entry:
                return False
            st.busy += 1
            try:
                op = op_columns(st.op_queue, [entry.queue_offset], _now_ms())
                if commit:
                    real = committed_columns(half)
                    shard = self.shards.shard_of(real.topics[0], real.queue_ids[0])
                    if shard == st.shard:
                        r = (await self._deliver(st.shard, join_columns(real, op))).result
                        st.resolve(entry.queue_offset, r.queue_offsets[-1])
                        return True
                    await self._deliver(shard, real)
                r = (await self._deliver(st.shard, op)).result
                st.resolve(entry.queue_offset, r.queue_offsets[-1])
                return True
            finally:
                st.busy -= 1

    # ------------------------------------------------------------------ checks

    async def tick(self) -> None:
        """Check the halves whose time came, discard those checked ``check_max`` times,
        store the progress of every recovered shard."""
        now = _now_ms()
        for st in list(self._shards.values()):
            if not st.ready.is_set():
                continue
            try:
                due = [h for h in st.pending.values() if h.due_ms <= now and not h.lock.locked()]
                if due:
                    await self._check(st, due, now)
                await self._save_progress(st)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - a shard down: the next tick tries again
                if now - st.warned_ms > WARN_EVERY_MS:
                    st.warned_ms = now
                    log.warning("transaction_check_failed", shard=st.shard, error=str(e))

    async def _check(self, st: ShardHalves, due: list[Half], now: int) -> None:
        client = self.shards[st.shard]
        records = await self._read(client, [h.physical_offset for h in due])
        for h in due:
            rec = records.get(h.physical_offset)
            if rec is None:  # deleted by retention: nothing left to commit
                st.forget(h.queue_offset)
                log.warning("transaction_half_gone", shard=st.shard, queue_offset=h.queue_offset, topic=h.topic)
                continue
            if h.checks >= self.check_max:
                await self._discard(st, h, rec)
                continue
            h.checks += 1
            h.due_ms = now + self.check_interval_ms
            # only sessions whose user may Pub on the topic (and so end the transaction)
            producers = self._producers(h.topic)
            transaction_id = rec.msg_id
            if not producers:
                log.info(
                    "transaction_check_no_producer",
                    topic=h.topic,
                    message_id=h.message_id,
                    transaction_id=transaction_id,
                    check=h.checks,
                )
                continue
            self._turn += 1
            target = producers[self._turn % len(producers)]
            target.outbox.put_nowait(
                v2.TelemetryCommand(
                    recover_orphaned_transaction_command=v2.RecoverOrphanedTransactionCommand(
                        message=check_back_message(rec), transaction_id=transaction_id
                    )
                )
            )
            log.info(
                "transaction_checked",
                topic=h.topic,
                message_id=h.message_id,
                transaction_id=transaction_id,
                check=h.checks,
                client_id=target.client_id,
            )

    async def _discard(self, st: ShardHalves, h: Half, rec: MessageRecord) -> None:
        async with h.lock:
            if st.pending.get(h.queue_offset) is not h:
                return
            st.busy += 1
            try:
                keep = discard_columns(rec, self.shards.queue_on(CHECK_MAX_TOPIC, st.shard))
                r = (
                    await self._deliver(
                        st.shard, join_columns(keep, op_columns(st.op_queue, [h.queue_offset], _now_ms()))
                    )
                ).result
                st.resolve(h.queue_offset, r.queue_offsets[-1])
            finally:
                st.busy -= 1
        log.error(
            "transaction_discarded",
            topic=h.topic,
            message_id=h.message_id,
            transaction_id=rec.msg_id,
            checks=h.checks,
            kept_in=CHECK_MAX_TOPIC,
        )

    async def _save_progress(self, st: ShardHalves) -> None:
        p = st.progress()
        if p is None or p == st.saved:
            return
        client = self.shards[st.shard]
        h, op = p
        try:
            if h != st.saved[0]:
                await self._commit_offset(client, HALF_TOPIC, st.half_queue, h)
            st.saved = (h, st.saved[1])
            if op != st.saved[1]:
                await self._commit_offset(client, OP_TOPIC, st.op_queue, op)
            st.saved = (h, op)
        except grpc.aio.AioRpcError as e:  # e.g. past the queue's end until the dispatcher catches up
            log.debug("transaction_progress_not_saved", shard=st.shard, error=e.details())

    # ------------------------------------------------------------------ recovery

    async def _recover_until_done(self, st: ShardHalves) -> None:
        """``recover`` until it succeeds (a shard still opening answers UNAVAILABLE for
        a while: logged as a warning only once that lasts, then every 30 s)."""
        since = warned = None
        while True:
            try:
                await self.recover(st)
                return
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - a shard down or recovering: again later
                now = asyncio.get_running_loop().time()
                since = now if since is None else since
                if now - since >= WARN_EVERY_MS / 1000 and (warned is None or now - warned >= WARN_EVERY_MS / 1000):
                    warned = now
                    log.warning("transaction_recovery_failed", shard=st.shard, error=str(e), for_s=round(now - since))
                else:
                    log.debug("transaction_recovery_failed", shard=st.shard, error=str(e))
                await asyncio.sleep(RETRY_S)

    async def recover(self, st: ShardHalves) -> None:
        """Rebuild the shard's pending halves from its half and op queues (module docstring)."""
        client = self.shards[st.shard]
        h0 = max(0, await self._fetch_offset(client, HALF_TOPIC, st.half_queue))
        p0 = max(0, await self._fetch_offset(client, OP_TOPIC, st.op_queue))
        await self._wait_dispatched(client)
        resolved: dict[int, int] = {}
        op_end = p0
        async for op_offset, rec in self._records(client, OP_TOPIC, st.op_queue, p0):
            op_end = op_offset + 1
            if rec.tags != REMOVE_TAG:
                log.warning("transaction_op_skipped", shard=st.shard, op_offset=op_offset, tags=rec.tags)
                continue
            for q in parse_op_body(rec.body):
                if q >= h0:
                    resolved.setdefault(q, op_offset)
        open_halves: dict[int, int] = {}
        half_end = h0
        # the last ENDED_KEPT halves below h0 are ended: known by their offsets, for "already ended"
        async for q, phys, _ in self._units(client, HALF_TOPIC, st.half_queue, max(0, h0 - ENDED_KEPT)):
            if q >= h0:
                half_end = q + 1
            if q < h0 or q in resolved:
                st.note_ended(phys, None)
            else:
                open_halves[q] = phys
        records = await self._read(client, list(open_halves.values()))
        now = _now_ms()
        for q, phys in open_halves.items():
            rec = records.get(phys)
            if rec is None or rec.topic != HALF_TOPIC:
                continue
            try:
                topic, _ = real_queue(rec)
            except ValueError:
                log.warning("transaction_half_skipped", shard=st.shard, queue_offset=q, msg_id=rec.msg_id)
                continue
            due = max(now, first_check_ms(rec.store_timestamp, rec.properties, self.timeout_ms))
            st.add(Half(q, phys, topic, rec.unique_key or "", due, transaction_id=rec.msg_id.upper()))
        for q, op in resolved.items():
            gone = st.forget(q)
            if gone is not None:
                st.note_ended(gone.physical_offset, gone)
            st.resolved.setdefault(q, op)
        st.floor = max(st.floor, h0)
        st.half_end = max(st.half_end, half_end)
        st.op_end = max(st.op_end, op_end)
        st.saved = (h0, p0)
        st.ready.set()
        log.info(
            "transaction_recovered",
            shard=st.shard,
            pending=len(st.pending),
            half_from=h0,
            half_end=st.half_end,
            op_from=p0,
            op_end=st.op_end,
        )

    async def _wait_dispatched(self, client: Shard) -> None:
        """Return once every record written before now is in the shard's consume queues."""
        target = (await client.commitlog.get_offsets()).wrote_offset
        end = asyncio.get_running_loop().time() + DISPATCH_WAIT_S
        while True:
            got = await client.commitlog.get_offsets()
            if got.dispatched_offset >= target:
                return
            if asyncio.get_running_loop().time() > end:
                raise TimeoutError(f"shard {client.shard} dispatched to {got.dispatched_offset}, not yet {target}")
            await asyncio.sleep(0.05)

    # ------------------------------------------------------------------ shard calls

    async def _deliver(self, shard: int, cols: common_pb2.MessageColumns) -> commitlog_pb2.AppendBatchResponse:
        return await self.shards[shard].commitlog.deliver_delayed(cols)

    async def _read(self, client: Shard, offsets: list[int]) -> dict[int, MessageRecord]:
        """The records at ``offsets`` (those gone left out), by offset."""
        out: dict[int, MessageRecord] = {}
        for i in range(0, len(offsets), _READ_CHUNK):
            part = offsets[i : i + _READ_CHUNK]
            rd = await client.commitlog.read(commitlog_pb2.ReadRequest(offsets=part, raw=True, skip_missing=True))
            sizes = np.frombuffer(rd.raw_sizes, "<i4").astype(np.int64)
            positions = np.concatenate(([0], np.cumsum(sizes)[:-1])) if len(sizes) else sizes
            for off, rec in zip(rd.offsets, decode_records(rd.raw_data, positions, check_crc=False)):
                out[off] = rec
        return out

    async def _read_half(self, client: Shard, offset: int, transaction_id: str) -> MessageRecord:
        """The half record at ``offset``, an offset this front knows for a half's (never
        one a caller chose); ``no_transaction()`` if it is not that half (any more)."""
        try:
            found = await self._read(client, [offset])
        except Exception as e:  # noqa: BLE001 - not readable as a record: no transaction
            code, _ = status_of(e)
            if code not in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.DATA_LOSS):
                raise
            raise no_transaction() from None
        half = found.get(offset)
        if half is None or half.topic != HALF_TOPIC or half.msg_id != transaction_id:
            raise no_transaction()
        return half

    async def _ended_names(
        self, st: ShardHalves, offset: int, transaction_id: str, topic: str, message_id: str
    ) -> bool:
        """Whether the ended half at ``offset`` is ``transaction_id`` of ``topic`` and
        ``message_id`` (one known only by its offset: its record, read, tells)."""
        h = st.ended_at.get(offset)
        if h is not None:
            return h.topic == topic and h.message_id == message_id and h.transaction_id in ("", transaction_id)
        try:
            rec = await self._read_half(self.shards[st.shard], offset, transaction_id)
        except ProtocolError:
            return False
        return rec.properties.get(REAL_TOPIC) == topic and rec.unique_key == message_id

    async def _units(self, client: Shard, topic: str, queue: int, offset: int) -> AsyncIterator:
        """(queue offset, commitlog offset, size) of the queue's units from ``offset``."""
        while True:
            u = await client.queues.get_units(
                cq.GetUnitsRequest(topic=topic, queue_id=queue, offset=offset, max_units=_UNITS_PAGE)
            )
            if not u.physical_offsets:
                return
            for k, (phys, size) in enumerate(zip(u.physical_offsets, u.sizes)):
                if size != 0x7FFFFFFF:
                    yield u.first_offset + k, phys, size
            offset = u.first_offset + len(u.physical_offsets)

    async def _records(self, client: Shard, topic: str, queue: int, offset: int) -> AsyncIterator:
        """(queue offset, record) of the queue from ``offset``."""
        batch: list[tuple[int, int]] = []

        async def flush():
            records = await self._read(client, [p for _, p in batch])
            return [(q, records[p]) for q, p in batch if p in records]

        async for q, phys, _ in self._units(client, topic, queue, offset):
            batch.append((q, phys))
            if len(batch) >= _READ_CHUNK:
                for item in await flush():
                    yield item
                batch = []
        if batch:
            for item in await flush():
                yield item

    async def _fetch_offset(self, client: Shard, topic: str, queue: int) -> int:
        r = await client.queues.fetch_offset(cq.FetchOffsetRequest(group=SYSTEM_GROUP, topic=topic, queue_id=queue))
        return r.offset

    async def _commit_offset(self, client: Shard, topic: str, queue: int, offset: int) -> None:
        await client.queues.commit_offset(
            cq.CommitOffsetRequest(group=SYSTEM_GROUP, topic=topic, queue_id=queue, offset=offset), retry=False
        )


def convert_status(ok: bool) -> v2.Status:
    """A half's entry status: OK, or written but not flushed in time (as sends answer it)."""
    if ok:
        return v2.Status(code=Code.OK, message="OK")
    return v2.Status(code=Code.MASTER_PERSISTENCE_TIMEOUT, message="flush timed out; the message is written")


__all__ = [
    "CHECK_MAX_TOPIC",
    "HALF_TOPIC",
    "OP_TOPIC",
    "TransactionService",
    "check_back_message",
    "committed_columns",
    "half_columns",
    "op_columns",
    "parse_op_body",
    "parse_transaction_id",
]
