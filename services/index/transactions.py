"""Transaction messages of one shard, kept with the shard: TransactionService
(proto/mqstore/v1/transactions.proto), served by the shard's consume-queue builder
process, which builds the half and op queues it reads. RocketMQ 5's broker does the
same (broker/.../transaction: TransactionalMessageBridge,
TransactionalMessageServiceImpl, EndTransactionProcessor,
DefaultTransactionalMessageCheckListener; the proxy's SendMessageActivity and
GrpcClientChannel for the gRPC side). The rules are the core's
(mqstore/store/transaction_rules.py); the fronts' side is services/rocketmq/transactions.py.

One owner per shard, whatever the number of fronts: the pending halves, their check
counts and the progress point live here, so two fronts never both recover a shard,
write its progress or check the same half; any front may end any transaction (it
forwards EndTransaction to the shard its id names), and a check-back goes to one front
holding a producer of the half's topic.

Records, all written through ``CommitLogService.DeliverDelayed`` (the store's internal
append: "as given", no producer checks, which refuse these system topics):

    half     RMQ_SYS_TRANS_HALF_TOPIC, sysflag NOT_TYPE, the client's message with
             REAL_TOPIC, REAL_QID (the queue picked for it), TRAN_MSG=true, PGROUP (the
             topic: RocketMQ's proxy uses it as the gRPC producer group), UNIQ_KEY = the
             client's message id, CHECK_IMMUNITY_TIME_IN_SECONDS when the client sent an
             orphaned_transaction_recovery_duration. RocketMQ writes queue 0; here each
             shard has its own half queue: the lowest queue id of the half topic that
             the routing rule puts on the shard of the real message's queue (queue 0
             with one shard), so the half, its op and its commit are on one shard (the
             rule is pinned with the store: a real queue never moves to another shard).
             The front makes the records (Prepare); this service writes them.
    commit   the real message on REAL_TOPIC / REAL_QID: body, flag, tags, keys, born
             time and host, user properties of the half, UNIQ_KEY kept (consumers see the
             producer's message id), REAL_* / TRAN_MSG / CHECK_IMMUNITY_* removed, sysflag
             TRANSACTION_COMMIT (as EndTransactionProcessor; consumers read it as NORMAL).
             The commitlog has no column for the prepared-transaction offset: it stays 0.
    op       RMQ_SYS_TRANS_OP_HALF_TOPIC, tag "d", body "<half queue offset>," (the
             separator RocketMQ's batched op bodies use), on the lowest op-topic queue of
             the shard. A commit is one DeliverDelayed of [commit, op]: both or neither
             are written, so a commit is never delivered twice by a retried
             EndTransaction or a check answered after a crash between the two.
    discard  a half checked ``check_max`` times without an answer: written to
             TRANS_CHECK_MAX_TIME_TOPIC (as RocketMQ's check listener) together with its
             op record, and logged (``transaction_discarded``): it is rolled back.

The transaction id a SendResultEntry carries is the half record's offset msgId (store
host + commitlog offset): it names the shard and the half. End never reads the
commitlog at an offset a caller chose: the id must name a half this shard knows
(pending, or ended and still remembered: ``ENDED_KEPT``), of the request's topic, with
its message id; only then is the half's record read. Every miss (a blank or malformed
id, no such shard, no half at that offset, another topic's or another message's half, a
half forgotten since) is END_OUTCOME_NO_TRANSACTION, which the front answers with one
INVALID_TRANSACTION_ID text, so no answer tells what lies at an offset (README,
"Security").

State (``ShardTransactions``, on the builder's event loop): the core's ``ShardHalves``
(pending halves, the resolved ones at or past the progress point, the progress point
``(H, P)``: every half below queue offset H is ended and every op record below op-queue
offset P names a half below H). The progress is stored as the consumer offsets of group
``CID_RMQ_SYS_TRANS`` (RocketMQ's MixAll.CID_SYS_RMQ_TRANS) on the shard's half and op
queues (this builder's offsets file, as RocketMQ keeps its check progress), half
first, and only while nothing is being written on the shard, so it is never ahead of
what is durable.

The shard count (which places the half, op and discard queues) comes with the fronts'
calls: the service starts with the first call that names it (a front's CheckBacks
stream opens at the front's start). Recovery then (also after a restart of this
process): fetch (H, P), wait until the dispatcher has put every record written before
the recovery began into the consume queues (GetOffsets: dispatched >= wrote), read the
op queue from P (units + records: the half offsets each op names) and the half queue's
units from H; a half without an op is pending again (its record read for topic,
message id and store time; its check count starts at 0 again). Until it is done, End
waits (within the call's deadline) and the checker waits; Prepare goes on meanwhile.

Check-back (``tick``, every ``tick_s``): a pending half whose time came (store time +
CHECK_IMMUNITY_TIME_IN_SECONDS, else ``timeout_ms``: RocketMQ's transactionTimeOut 6 s;
then every ``check_interval_ms``, RocketMQ's transactionCheckInterval 30 s) is sent as a
CheckBack (the half's record) on the CheckBacks stream of one front that announced a
producer of its topic (``CheckRoutes``, in turn); the front sends
``TelemetryCommand{recover_orphaned_transaction_command}`` on one of its producers'
Telemetry streams, and the client answers with EndTransaction(SOURCE_SERVER_CHECK) on
whichever front it is connected to. No front holding a producer: the check still counts,
as in RocketMQ. A front that goes away drops out with its stream; the next check goes
elsewhere. After ``check_max`` (RocketMQ's transactionCheckMax 15) checks it is
discarded.

Ending a transaction that already has an op record (twice, or after a check's answer,
or after its discard) is END_OUTCOME_ALREADY_ENDED and writes nothing: whatever came
first stands. The shard remembers the last ``ENDED_KEPT`` ended halves (after a restart:
those from the last ``ENDED_KEPT`` units of the half queue, their records read when
asked); one ended longer ago is NO_TRANSACTION. A resolution other than COMMIT /
ROLLBACK is LEFT_OPEN and leaves the half to the checks (RocketMQ's "unknown").
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import AsyncIterator, Sequence

import grpc
import numpy as np
import structlog

from mqstore.errors import DecodeError
from mqstore.formats.message import MessageRecord, SysFlag, decode_records
from mqstore.formats.msgid import parse_offset_msg_id
from mqstore.rpc.v1 import commitlog_pb2, commitlog_pb2_grpc, common_pb2, transactions_pb2_grpc
from mqstore.rpc.v1 import transactions_pb2 as pb
from mqstore.services.common import shard_rule
from mqstore.services.common.errors import BadRequest, rpc, status_of
from mqstore.services.common.internal_auth import InternalAuth
from mqstore.services.common.internal_streams import OpenStreams
from mqstore.services.common.peers import Resolver
from mqstore.services.common.server import Registration
from mqstore.services.common.shard_clients import CommitLogClient, Connection
from mqstore.services.index.state import BuilderState
from mqstore.services.query.routing import STORE_PORT_BASE
from mqstore.store.local_ports import units_page
from mqstore.store.transaction_rules import (
    CHECK_INTERVAL_MS,
    CHECK_MAX,
    CHECK_MAX_TOPIC,
    COLUMN_PROPERTIES,
    ENDED_KEPT,
    HALF_TOPIC,
    NOT_COMMITTED,
    OP_TOPIC,
    REAL_TOPIC,
    REMOVE_TAG,
    SYSTEM_GROUP,
    TIMEOUT_MS,
    CheckRoutes,
    EndOutcome,
    Half,
    ShardHalves,
    check_or_discard,
    first_check_ms,
    op_body,
    real_queue,
    recover,
)

log = structlog.get_logger(__name__)

SERVICE = "mqstore.v1.TransactionService"
TICK_S = 1.0
DISPATCH_WAIT_S = 60.0  # recovery waits this long for the consume queues to catch up, then retries
RETRY_S = 2.0  # a recovery that failed is tried again after this
WARN_EVERY_MS = 30_000  # check failures are logged at most this often
OUTBOX_MAX = 10_000  # check-backs waiting for one front's stream: more are dropped (they count)
_READ_CHUNK = 10_000  # CommitLogService.Read takes at most this many offsets
_UNITS_PAGE = 10_000
_OUTCOMES = {
    EndOutcome.ENDED: pb.END_OUTCOME_ENDED,
    EndOutcome.ALREADY_ENDED: pb.END_OUTCOME_ALREADY_ENDED,
    EndOutcome.LEFT_OPEN: pb.END_OUTCOME_LEFT_OPEN,
    EndOutcome.NO_TRANSACTION: pb.END_OUTCOME_NO_TRANSACTION,
    EndOutcome.RECOVERING: pb.END_OUTCOME_RECOVERING,
}


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class _NoTransaction(Exception):
    """The id names no half of the request's topic and message (never leaves here)."""


# ---------------------------------------------------------------------- records (pure)


def committed_columns(half: MessageRecord) -> common_pb2.MessageColumns:
    """The real message a committed half becomes (see the module docstring)."""
    topic, queue_id = real_queue(half)
    props = {k: v for k, v in half.properties.items() if k not in NOT_COMMITTED and k not in COLUMN_PROPERTIES}
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
        bodies=[op_body(o) for o in half_offsets],
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
    props = {k: v for k, v in half.properties.items() if k not in COLUMN_PROPERTIES}
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


_JOINED = (
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
)


def join_columns(*parts: common_pb2.MessageColumns) -> common_pb2.MessageColumns:
    """Columns one after another (every part with the same columns filled)."""
    out = common_pb2.MessageColumns()
    for p in parts:
        for name in _JOINED:
            getattr(out, name).extend(getattr(p, name))
    n = len(out.bodies)
    for name in ("tags", "keys", "unique_keys", "properties", "flags", "sysflags", "born_timestamps"):
        if len(getattr(out, name)) != n:
            raise ValueError(f"column {name} is not filled in every part")
    return out


def _is_half(rec: MessageRecord, h: Half) -> bool:
    """Whether ``rec`` is still the record of half ``h`` (not another one written at its
    offset after a commitlog lost its tail)."""
    return rec.topic == HALF_TOPIC and h.transaction_id in ("", rec.msg_id.upper())


# ---------------------------------------------------------------------- the shard's state machine


class ShardTransactions:
    """The transactions of one shard (module docstring), on the builder's event loop:
    ``state`` its consume queues and offsets, ``commitlog`` its commitlog's client."""

    def __init__(self, state: BuilderState, commitlog: CommitLogClient) -> None:
        self.state = state
        self.shard = state.shard
        self.commitlog = commitlog
        self.timeout_ms = TIMEOUT_MS
        self.check_interval_ms = CHECK_INTERVAL_MS
        self.check_max = CHECK_MAX
        self.tick_s = TICK_S
        self.ended_kept = ENDED_KEPT
        self.shards: int | None = None  # the deployment's shard count, from the fronts' calls
        self.halves: ShardHalves | None = None
        self.check_max_queue = 0
        self.ready = asyncio.Event()  # set once the pending halves are all known
        self.routes = CheckRoutes()
        self._outboxes: dict[str, asyncio.Queue] = {}  # front -> its check-backs to send
        self._locks: dict[int, asyncio.Lock] = {}  # half queue offset -> the lock of its end
        self._tasks: list[asyncio.Task] = []
        self._warned_ms = 0
        self._closed = False

    @classmethod
    def over(cls, state: BuilderState, resolve_commitlog: Resolver, auth: InternalAuth) -> ShardTransactions:
        """The shard's transactions, with a commitlog client of their own."""
        conn = Connection(state.shard, "cl", resolve_commitlog, commitlog_pb2_grpc.CommitLogServiceStub, auth)
        return cls(state, CommitLogClient(conn))

    # ------------------------------------------------------------------ lifecycle

    def learn_shards(self, shards: int) -> ShardHalves:
        """The deployment's shard count, told by a front's call: the first starts the
        service (recovery and the checker, on this loop)."""
        if shards <= self.shard:
            raise BadRequest(f"shard {self.shard} can not be one of {shards} shards")
        if self.halves is not None:
            if shards != self.shards:
                raise BadRequest(f"this store has {self.shards} shards, not {shards}")
            return self.halves
        self.shards = shards

        def on(topic: str) -> int:
            return shard_rule.first_queue_on(topic, self.shard, shards)

        self.halves = ShardHalves(self.shard, on(HALF_TOPIC), on(OP_TOPIC), self.ended_kept)
        self.check_max_queue = on(CHECK_MAX_TOPIC)
        if not self._closed:
            ctx = contextvars.Context()  # no caller's deadline in background calls
            loop = asyncio.get_running_loop()
            self._tasks.append(loop.create_task(self._recover_until_done(), context=ctx))
            self._tasks.append(loop.create_task(self._run(), context=ctx))
        return self.halves

    async def stop(self) -> None:
        self._closed = True
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        await self.commitlog.close_stream()
        await self.commitlog.conn.reset()

    async def _run(self) -> None:
        await self.ready.wait()
        while True:
            await asyncio.sleep(self.tick_s)
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the commitlog down: the next tick tries again
                self._warn("transaction_check_failed", e)

    def _warn(self, event: str, e: Exception) -> None:
        now = _now_ms()
        if now - self._warned_ms > WARN_EVERY_MS:
            self._warned_ms = now
            log.warning(event, shard=self.shard, error=str(e))

    def _lock(self, queue_offset: int) -> asyncio.Lock:
        return self._locks.setdefault(queue_offset, asyncio.Lock())

    def _busy(self, queue_offset: int) -> bool:
        lock = self._locks.get(queue_offset)
        return lock is not None and lock.locked()

    def _ended(self, queue_offset: int) -> None:
        lock = self._locks.get(queue_offset)
        if lock is not None and not lock.locked():
            del self._locks[queue_offset]

    # ------------------------------------------------------------------ fronts

    def status(self) -> dict:
        """What the builder's status shows of the shard's transactions."""
        st = self.halves
        if st is None:
            return {"started": False}
        return {
            "started": True,
            "recovered": self.ready.is_set(),
            "pending": len(st.pending),
            "progress": list(st.saved),
            "fronts": len(self._outboxes),
        }

    def open_front(self, front: str) -> asyncio.Queue:
        """A front's CheckBacks stream opened: its check-backs go to the queue returned."""
        q = self._outboxes[front] = asyncio.Queue(OUTBOX_MAX)
        log.info("transaction_front_joined", shard=self.shard, front=front)
        return q

    def close_front(self, front: str, outbox: asyncio.Queue) -> None:
        if self._outboxes.get(front) is outbox:
            del self._outboxes[front]
            self.routes.drop(front)
            log.info("transaction_front_left", shard=self.shard, front=front)

    # ------------------------------------------------------------------ half messages

    async def prepare(self, halves: common_pb2.MessageColumns) -> common_pb2.AppendResult:
        """Write half records (every one on this shard's half queue) and keep them pending."""
        st = self.halves
        assert st is not None  # learn_shards first
        n = len(halves.bodies)
        if any(t != HALF_TOPIC for t in halves.topics) or any(q != st.half_queue for q in halves.queue_ids):
            raise BadRequest(f"half records go to {HALF_TOPIC}:{st.half_queue} on shard {self.shard}")
        if len(halves.topics) != n or len(halves.properties) != n or len(halves.unique_keys) != n:
            raise BadRequest("every half needs its topic, queue, properties and message id")
        now = _now_ms()
        st.busy += 1
        try:
            r = (await self.commitlog.deliver_delayed(halves)).result
            for k in range(n):
                props = dict(halves.properties[k].entries)
                st.add(
                    Half(
                        r.queue_offsets[k],
                        r.physical_offsets[k],
                        props.get(REAL_TOPIC, ""),
                        halves.unique_keys[k],
                        first_check_ms(r.store_timestamps[k] or now, props, self.timeout_ms),
                        transaction_id=r.msg_ids[k].upper(),
                    )
                )
            log.debug("transaction_prepared", shard=self.shard, halves=n)
            return r
        finally:
            st.busy -= 1

    # ------------------------------------------------------------------ End

    async def end(self, request: pb.EndRequest, *, wait_s: float | None) -> EndOutcome:
        """Commit or roll back the half ``request`` names (module docstring)."""
        st = self.halves
        assert st is not None  # learn_shards first
        try:
            host, offset = parse_offset_msg_id(request.transaction_id.strip())
        except (DecodeError, ValueError):
            return EndOutcome.NO_TRANSACTION
        if host.port - STORE_PORT_BASE != self.shard:  # shard i records store port 10911 + i
            return EndOutcome.NO_TRANSACTION
        transaction_id = request.transaction_id.strip().upper()
        topic, message_id = request.topic, request.message_id
        try:
            await asyncio.wait_for(self.ready.wait(), wait_s)
        except TimeoutError:
            return EndOutcome.RECOVERING
        entry = st.pending_at(offset)
        if entry is None or not entry.names(transaction_id, topic, message_id):
            if offset in st.ended_at and await self._ended_names(offset, transaction_id, topic, message_id):
                log.info("transaction_already_ended", transaction_id=request.transaction_id, source=request.source)
                return EndOutcome.ALREADY_ENDED
            return EndOutcome.NO_TRANSACTION
        if request.resolution not in (pb.RESOLUTION_COMMIT, pb.RESOLUTION_ROLLBACK):
            log.info("transaction_left_open", transaction_id=request.transaction_id)
            return EndOutcome.LEFT_OPEN
        try:
            half = await self._read_half(entry.physical_offset, transaction_id)
        except _NoTransaction:
            return EndOutcome.NO_TRANSACTION
        commit = request.resolution == pb.RESOLUTION_COMMIT
        # the writes outlive a front that gives up: a half half-ended is what the op prevents
        done = asyncio.get_running_loop().create_task(
            self._resolve(entry, half, commit=commit), context=contextvars.Context()
        )
        if not await asyncio.shield(done):
            return EndOutcome.ALREADY_ENDED
        log.info(
            "transaction_ended",
            shard=self.shard,
            transaction_id=request.transaction_id,
            topic=topic,
            message_id=message_id,
            resolution="COMMIT" if commit else "ROLLBACK",
            source=request.source,
        )
        return EndOutcome.ENDED

    async def _resolve(self, entry: Half, half: MessageRecord, *, commit: bool) -> bool:
        """Commit ([commit, op] in one append) or roll back (the op record) a pending
        half; False if it was resolved meanwhile."""
        st = self.halves
        try:
            async with self._lock(entry.queue_offset):
                if st.pending.get(entry.queue_offset) is not entry:
                    return False
                st.busy += 1
                try:
                    op = op_columns(st.op_queue, [entry.queue_offset], _now_ms())
                    cols = join_columns(committed_columns(half), op) if commit else op
                    r = (await self.commitlog.deliver_delayed(cols)).result
                    st.resolve(entry.queue_offset, r.queue_offsets[-1])
                    return True
                finally:
                    st.busy -= 1
        finally:
            self._ended(entry.queue_offset)

    # ------------------------------------------------------------------ checks

    async def tick(self) -> None:
        """Check the halves whose time came, discard those checked ``check_max`` times,
        store the progress."""
        st = self.halves
        if st is None or not self.ready.is_set():
            return
        now = _now_ms()
        due = [h for h in st.due(now) if not self._busy(h.queue_offset)]
        if due:
            await self._check(due, now)
        await self._save_progress()

    async def _check(self, due: list[Half], now: int) -> None:
        st = self.halves
        records = await self._read([h.physical_offset for h in due])
        for h in due:
            found = records.get(h.physical_offset)
            if found is None or not _is_half(found[0], h):  # deleted by retention (or lost): nothing to commit
                st.forget(h.queue_offset)
                log.warning("transaction_half_gone", shard=self.shard, queue_offset=h.queue_offset, topic=h.topic)
                continue
            rec, raw = found
            if not check_or_discard(h, now, check_max=self.check_max, check_interval_ms=self.check_interval_ms):
                await self._discard(h, rec)
                continue
            front = self.routes.pick(h.topic)
            transaction_id = rec.msg_id
            if front is None or front not in self._outboxes:
                log.info(
                    "transaction_check_no_producer",
                    shard=self.shard,
                    topic=h.topic,
                    message_id=h.message_id,
                    transaction_id=transaction_id,
                    check=h.checks,
                )
                continue
            with contextlib.suppress(asyncio.QueueFull):  # a stuck front: the check still counts
                self._outboxes[front].put_nowait(
                    pb.CheckBack(topic=h.topic, transaction_id=transaction_id, record=raw, check=h.checks)
                )
            log.info(
                "transaction_checked",
                shard=self.shard,
                topic=h.topic,
                message_id=h.message_id,
                transaction_id=transaction_id,
                check=h.checks,
                front=front,
            )

    async def _discard(self, h: Half, rec: MessageRecord) -> None:
        st = self.halves
        async with self._lock(h.queue_offset):
            if st.pending.get(h.queue_offset) is not h:
                return
            st.busy += 1
            try:
                keep = discard_columns(rec, self.check_max_queue)
                cols = join_columns(keep, op_columns(st.op_queue, [h.queue_offset], _now_ms()))
                r = (await self.commitlog.deliver_delayed(cols)).result
                st.resolve(h.queue_offset, r.queue_offsets[-1])
            finally:
                st.busy -= 1
        self._ended(h.queue_offset)
        log.error(
            "transaction_discarded",
            shard=self.shard,
            topic=h.topic,
            message_id=h.message_id,
            transaction_id=rec.msg_id,
            checks=h.checks,
            kept_in=CHECK_MAX_TOPIC,
        )

    async def _save_progress(self) -> None:
        st = self.halves
        p = st.progress()
        if p is None or p == st.saved:
            return
        h, op = p
        try:
            if h != st.saved[0]:
                await self._commit_offset(HALF_TOPIC, st.half_queue, h)
            st.saved = (h, st.saved[1])
            if op != st.saved[1]:
                await self._commit_offset(OP_TOPIC, st.op_queue, op)
            st.saved = (h, op)
        except Exception as e:  # noqa: BLE001 - e.g. past the queue's end until the dispatcher catches up
            log.debug("transaction_progress_not_saved", shard=self.shard, error=str(e))

    # ------------------------------------------------------------------ recovery

    async def _recover_until_done(self) -> None:
        """``recover`` until it succeeds (the builder or the commitlog still opening:
        logged as a warning only once that lasts, then every 30 s)."""
        since = warned = None
        while True:
            try:
                await self.recover()
                return
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - a part down or recovering: again later
                now = asyncio.get_running_loop().time()
                since = now if since is None else since
                if now - since >= WARN_EVERY_MS / 1000 and (warned is None or now - warned >= WARN_EVERY_MS / 1000):
                    warned = now
                    log.warning("transaction_recovery_failed", shard=self.shard, error=str(e), for_s=round(now - since))
                else:
                    log.debug("transaction_recovery_failed", shard=self.shard, error=str(e))
                await asyncio.sleep(RETRY_S)

    async def recover(self) -> None:
        """Rebuild the shard's pending halves from its half and op queues (module docstring)."""
        st = self.halves
        h0 = max(0, await self._fetch_offset(HALF_TOPIC, st.half_queue))
        p0 = max(0, await self._fetch_offset(OP_TOPIC, st.op_queue))
        await self._wait_dispatched()
        ops = [(q, rec.tags, rec.body) async for q, rec in self._records(OP_TOPIC, st.op_queue, p0)]
        units = [(q, phys) async for q, phys in self._units(HALF_TOPIC, st.half_queue, max(0, h0 - st.ended_kept))]
        got = recover(h0, p0, ops, units)
        for op_offset in got.skipped_ops:
            log.warning("transaction_op_skipped", shard=self.shard, op_offset=op_offset)
        for phys in got.ended:
            st.note_ended(phys, None)
        records = await self._read(list(got.open_halves.values()))
        now = _now_ms()
        for q, phys in got.open_halves.items():
            rec = records.get(phys, (None, b""))[0]
            if rec is None or rec.topic != HALF_TOPIC:
                continue
            try:
                topic, _ = real_queue(rec)
            except ValueError:
                log.warning("transaction_half_skipped", shard=self.shard, queue_offset=q, msg_id=rec.msg_id)
                continue
            due = max(now, first_check_ms(rec.store_timestamp, rec.properties, self.timeout_ms))
            st.add(Half(q, phys, topic, rec.unique_key or "", due, transaction_id=rec.msg_id.upper()))
        for q, op in got.resolved.items():
            gone = st.forget(q)
            if gone is not None:
                st.note_ended(gone.physical_offset, gone)
            st.resolved.setdefault(q, op)
        st.floor = max(st.floor, h0)
        st.half_end = max(st.half_end, got.half_end)
        st.op_end = max(st.op_end, got.op_end)
        st.saved = (h0, p0)
        self.ready.set()
        log.info(
            "transaction_recovered",
            shard=self.shard,
            pending=len(st.pending),
            half_from=h0,
            half_end=st.half_end,
            op_from=p0,
            op_end=st.op_end,
        )

    async def _wait_dispatched(self) -> None:
        """Return once every record written before now is in the shard's consume queues."""
        target = (await self.commitlog.get_offsets()).wrote_offset
        end = asyncio.get_running_loop().time() + DISPATCH_WAIT_S
        while True:
            got = await self.commitlog.get_offsets()
            if got.dispatched_offset >= target:
                return
            if asyncio.get_running_loop().time() > end:
                raise TimeoutError(f"shard {self.shard} dispatched to {got.dispatched_offset}, not yet {target}")
            await asyncio.sleep(0.05)

    # ------------------------------------------------------------------ reads

    async def _read(self, offsets: list[int]) -> dict[int, tuple[MessageRecord, bytes]]:
        """The records at ``offsets`` (those gone left out) and their bytes, by offset."""
        out: dict[int, tuple[MessageRecord, bytes]] = {}
        for i in range(0, len(offsets), _READ_CHUNK):
            part = offsets[i : i + _READ_CHUNK]
            rd = await self.commitlog.read(commitlog_pb2.ReadRequest(offsets=part, raw=True, skip_missing=True))
            sizes = np.frombuffer(rd.raw_sizes, "<i4").astype(np.int64)
            positions = np.concatenate(([0], np.cumsum(sizes)[:-1])) if len(sizes) else sizes
            data = rd.raw_data
            for off, at, size, rec in zip(
                rd.offsets, positions, sizes, decode_records(data, positions, check_crc=False)
            ):
                out[off] = (rec, data[int(at) : int(at + size)])
        return out

    async def _read_half(self, offset: int, transaction_id: str) -> MessageRecord:
        """The half record at ``offset``, an offset this shard knows for a half's (never
        one a caller chose); _NoTransaction if it is not that half (any more)."""
        try:
            found = await self._read([offset])
        except Exception as e:  # noqa: BLE001 - not readable as a record: no transaction
            code, _ = status_of(e)
            if code not in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.DATA_LOSS):
                raise
            raise _NoTransaction from None
        half = found.get(offset, (None, b""))[0]
        if half is None or half.topic != HALF_TOPIC or half.msg_id != transaction_id:
            raise _NoTransaction
        return half

    async def _ended_names(self, offset: int, transaction_id: str, topic: str, message_id: str) -> bool:
        """Whether the ended half at ``offset`` is ``transaction_id`` of ``topic`` and
        ``message_id`` (one known only by its offset: its record, read, tells)."""
        h = self.halves.ended_at.get(offset)
        if h is not None:
            return h.names(transaction_id, topic, message_id)
        try:
            rec = await self._read_half(offset, transaction_id)
        except _NoTransaction:
            return False
        return rec.properties.get(REAL_TOPIC) == topic and rec.unique_key == message_id

    async def _units(self, topic: str, queue: int, offset: int) -> AsyncIterator[tuple[int, int]]:
        """(queue offset, commitlog offset) of the local queue's units from ``offset``."""
        while True:
            builder = self.state.ready()
            page = await self.state.call(units_page, builder.consume_queues, topic, queue, offset, _UNITS_PAGE)
            if not len(page.physical_offsets):
                return
            for k, (phys, size) in enumerate(zip(page.physical_offsets.tolist(), page.sizes.tolist())):
                if size != 0x7FFFFFFF:
                    yield page.first_offset + k, phys
            offset = page.first_offset + len(page.physical_offsets)

    async def _records(self, topic: str, queue: int, offset: int) -> AsyncIterator[tuple[int, MessageRecord]]:
        """(queue offset, record) of the queue from ``offset``."""
        batch: list[tuple[int, int]] = []

        async def flush():
            records = await self._read([p for _, p in batch])
            return [(q, records[p][0]) for q, p in batch if p in records]

        async for q, phys in self._units(topic, queue, offset):
            batch.append((q, phys))
            if len(batch) >= _READ_CHUNK:
                for item in await flush():
                    yield item
                batch = []
        if batch:
            for item in await flush():
                yield item

    async def _fetch_offset(self, topic: str, queue: int) -> int:
        return self.state.ready().consumer_offsets.fetch(SYSTEM_GROUP, topic, queue)

    async def _commit_offset(self, topic: str, queue: int, offset: int) -> None:
        builder = self.state.ready()
        await self.state.call(builder.commit_offset, SYSTEM_GROUP, topic, queue, offset)


# ---------------------------------------------------------------------- the wire


class TransactionServicer(transactions_pb2_grpc.TransactionServiceServicer):
    """TransactionService over one shard's ``ShardTransactions``; ``streams``: the
    builder server's open streams (ended by its host when it stops)."""

    def __init__(self, keeper: ShardTransactions, streams: OpenStreams) -> None:
        self.keeper = keeper
        self.streams = streams

    def registration(self) -> Registration:
        return Registration(transactions_pb2_grpc.add_TransactionServiceServicer_to_server, self, SERVICE)

    @rpc
    async def Prepare(self, request: pb.PrepareRequest, context) -> pb.PrepareResponse:
        self.keeper.learn_shards(request.shards)
        return pb.PrepareResponse(result=await self.keeper.prepare(request.halves))

    @rpc
    async def End(self, request: pb.EndRequest, context) -> pb.EndResponse:
        self.keeper.learn_shards(request.shards)
        left = context.time_remaining()
        wait_s = None if left is None else max(0.0, left - 0.5)
        return pb.EndResponse(outcome=_OUTCOMES[await self.keeper.end(request, wait_s=wait_s)])

    async def CheckBacks(self, requests, context):
        """A front's stream: its FrontTopics in, its check-backs out (module docstring)."""
        async with self.streams.held(context):
            first = await anext(aiter(requests), None)
            if first is None:
                return
            try:
                self.keeper.learn_shards(first.shards)
            except BadRequest as e:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            front = first.front or context.peer()
            outbox = self.keeper.open_front(front)
            self.keeper.routes.announce(front, first.topics)

            async def listen() -> None:
                async for ann in requests:
                    self.keeper.routes.announce(front, ann.topics)

            listening = asyncio.ensure_future(listen())
            get = None
            try:
                while True:
                    get = asyncio.ensure_future(outbox.get())
                    done, _ = await asyncio.wait({get, listening}, return_when=asyncio.FIRST_COMPLETED)
                    if get not in done:
                        return  # the front closed its side
                    yield get.result()
            finally:
                for t in (get, listening):
                    if t is not None:
                        t.cancel()
                self.keeper.close_front(front, outbox)


__all__ = [
    "SERVICE",
    "ShardTransactions",
    "TransactionServicer",
    "committed_columns",
    "discard_columns",
    "join_columns",
    "op_columns",
]
