"""Transaction messages on the RocketMQ port, the fronts' side: half messages sent,
EndTransaction forwarded, check-backs passed on to clients. The transactions
themselves (pending halves, check counts, the progress point, recovery, discards) are
kept with each shard, by its consume-queue builder's process: services/index/transactions.py
tells the records, the rules and RocketMQ's semantics (its rules are the core's,
mqstore/store/transaction_rules.py). So any number of fronts is right: none of them
holds a transaction's state.

Here, per front:

- ``prepare``: the half records of a SendMessage's TRANSACTION messages (``half_columns``:
  REAL_TOPIC, REAL_QID, TRAN_MSG, PGROUP, CHECK_IMMUNITY_TIME_IN_SECONDS, on the shard's
  half queue) go to the shard of their real queue (TransactionService.Prepare), which
  writes them and keeps them pending; each SendResultEntry's transaction id is the
  half record's offset msgId (store host + commitlog offset: it names the shard).
- ``end``: EndTransaction, after Pub on the request's own topic (messaging.py), goes to
  the shard its transaction id names (any front may end any transaction). Every id that
  names no half of that topic and message (a blank or malformed id, no such shard, no
  half at that offset, another topic's or message's half, one ended too long ago)
  answers one INVALID_TRANSACTION_ID with one text (``NO_TRANSACTION``), so no answer
  tells what lies at an offset (README, "Security"). Ending an ended transaction
  answers OK ("already ended") and writes nothing; a shard still recovering its
  transactions past the call's deadline answers PROXY_TIMEOUT.
- check-backs: one long-lived CheckBacks stream to each shard's TransactionService,
  opened at ``start`` and again whenever it breaks (a restarted builder), announcing the
  topics this front holds producers of (Telemetry stream open, Pub allowed: the
  ``topics`` and ``producers`` callbacks), again every ``announce_s`` when they
  changed. Each CheckBack that comes is sent as
  ``TelemetryCommand{recover_orphaned_transaction_command{message, transaction_id}}`` on
  the Telemetry stream of one of those producers (in turn); the client answers with
  EndTransaction(SOURCE_SERVER_CHECK), on whichever front it is connected to.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import os
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

import grpc
import numpy as np
import structlog

from mqstore.errors import DecodeError
from mqstore.formats.message import MessageRecord, decode_records
from mqstore.formats.msgid import Host, parse_offset_msg_id
from mqstore.rpc.rocketmq_v2 import messaging_pb2 as v2
from mqstore.rpc.v1 import common_pb2
from mqstore.rpc.v1 import transactions_pb2 as tpb
from mqstore.services.query.routing import STORE_PORT_BASE
from mqstore.services.rocketmq import convert
from mqstore.services.rocketmq.status import Code, ProtocolError
from mqstore.store.transaction_rules import (
    CHECK_IMMUNITY,
    CHECK_MAX_TOPIC,
    HALF_TOPIC,
    NOT_COMMITTED,
    OP_TOPIC,
    PGROUP,
    REAL_QID,
    REAL_TOPIC,
    TRAN_MSG,
    real_queue,
)

if TYPE_CHECKING:
    from mqstore.services.common.shard_set import ShardSet
    from mqstore.services.rocketmq.settings import ClientSession

log = structlog.get_logger(__name__)

ANNOUNCE_S = 1.0  # the producer topics are announced again this long after they changed
RELINK_S = 1.0  # a CheckBacks stream that broke is opened again after this
WARN_EVERY_S = 30.0  # a shard's stream failing this long is a warning, then at most this often
_RESOLUTIONS = {v2.COMMIT: tpb.RESOLUTION_COMMIT, v2.ROLLBACK: tpb.RESOLUTION_ROLLBACK}


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


_FRONTS = itertools.count()  # fronts made in this process (LocalStack runs several)


def front_name() -> str:
    """A front's name on its CheckBacks streams (the shards' routes and logs): host,
    process and which front of the process."""
    return f"{socket.gethostname()}:{os.getpid()}:{next(_FRONTS)}"


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


def check_back_message(half: MessageRecord) -> v2.Message:
    """The message of a RecoverOrphanedTransactionCommand: the half as the real message
    it stands for (real topic and queue, the producer's message id, TRANSACTION)."""
    topic, queue_id = real_queue(half)
    props = {k: v for k, v in half.properties.items() if k not in NOT_COMMITTED}
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


def convert_status(ok: bool) -> v2.Status:
    """A half's entry status: OK, or written but not flushed in time (as sends answer it)."""
    if ok:
        return v2.Status(code=Code.OK, message="OK")
    return v2.Status(code=Code.MASTER_PERSISTENCE_TIMEOUT, message="flush timed out; the message is written")


# ---------------------------------------------------------------------- the front's side


class TransactionService:
    """The transactions' front side (module docstring) over the front's ShardSet
    (``shards``: typed clients and routing). ``producers(topic)``: the client sessions
    that may get the topic's check-backs (connected producers whose user may Pub on
    it); ``topics()``: the topics the front's connected producers publish (candidates
    for ``producers``); ``max_body``: the largest body a producer may send. One event
    loop (the front's)."""

    def __init__(
        self,
        shards: ShardSet,
        *,
        producers: Callable[[str], list[ClientSession]],
        max_body: int,
        topics: Callable[[], Iterable[str]] = lambda: (),
    ) -> None:
        self.shards = shards
        self._producers = producers
        self._topics = topics
        self.max_body = max_body
        self.announce_s = ANNOUNCE_S
        self.name = front_name()
        self._tasks: list[asyncio.Task] = []
        self._turn = 0
        self._known: tuple[float, list[str]] | None = None  # (when, producer_topics then)
        self.linked: dict[int, bool] = {}  # shard -> its CheckBacks stream is open (status, tests)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Open each shard's CheckBacks stream (and again whenever it breaks)."""
        if self._tasks:
            return
        ctx = contextvars.Context()  # no caller's deadline in background calls
        loop = asyncio.get_running_loop()
        for s in range(len(self.shards)):
            self._tasks.append(loop.create_task(self._link(s), context=ctx))

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t

    # ------------------------------------------------------------------ half messages

    async def prepare(self, shard: int, messages: Sequence[v2.Message], queue_ids: Sequence[int]) -> list:
        """Write the halves of ``messages`` (their real queues ``queue_ids``, all on
        ``shard``): the SendResultEntry of each, its transaction id the half's msgId."""
        half_queue = self.shards.queue_on(HALF_TOPIC, shard)
        cols = half_columns(messages, queue_ids, half_queue, self.max_body, _now_ms())
        r = (
            await self.shards[shard].transactions.prepare(tpb.PrepareRequest(shards=len(self.shards), halves=cols))
        ).result
        entries = [
            v2.SendResultEntry(
                status=convert_status(r.statuses[k] == common_pb2.PUT_OK),
                message_id=m.system_properties.message_id,
                transaction_id=r.msg_ids[k],
                offset=r.queue_offsets[k],
            )
            for k, m in enumerate(messages)
        ]
        log.debug("transaction_prepared", shard=shard, halves=len(entries))
        return entries

    # ------------------------------------------------------------------ EndTransaction

    async def end(self, request: v2.EndTransactionRequest, *, wait_s: float | None = None) -> bool:
        """Commit or roll back the half ``request`` names, on the shard its id names;
        False if it had already been ended (nothing written). The caller's Pub on
        ``request.topic`` is checked before (messaging.py); every id that names no half
        of that topic and message is ``no_transaction()``. ``wait_s``: unused (the
        shard waits for its recovery within the call's deadline)."""
        host, _ = parse_transaction_id(request.transaction_id)
        shard = host.port - STORE_PORT_BASE  # shard i records store port 10911 + i (query/routing.py)
        if not 0 <= shard < len(self.shards):
            raise no_transaction()
        answer = await self.shards[shard].transactions.end(
            tpb.EndRequest(
                shards=len(self.shards),
                transaction_id=request.transaction_id,
                topic=request.topic.name,
                message_id=request.message_id,
                resolution=_RESOLUTIONS.get(request.resolution, tpb.RESOLUTION_UNSPECIFIED),
                source=v2.TransactionSource.Name(request.source),
            )
        )
        outcome = answer.outcome
        if outcome == tpb.END_OUTCOME_NO_TRANSACTION:
            raise no_transaction()
        if outcome == tpb.END_OUTCOME_RECOVERING:
            raise ProtocolError(
                Code.PROXY_TIMEOUT, f"the transactions of shard {shard} are still being recovered; try again"
            )
        return outcome != tpb.END_OUTCOME_ALREADY_ENDED

    # ------------------------------------------------------------------ check-backs

    def producer_topics(self) -> list[str]:
        """The topics whose check-backs this front can pass on now (worked out once
        per ``announce_s`` for every shard's stream)."""
        now = time.monotonic()
        if self._known is None or now - self._known[0] >= self.announce_s / 2:
            self._known = (now, sorted(t for t in set(self._topics()) if self._producers(t)))
        return self._known[1]

    async def _announcements(self, shard: int):
        """This front's FrontTopics: at once, then whenever they changed."""
        last = self.producer_topics()
        yield tpb.FrontTopics(shards=len(self.shards), front=self.name, topics=last)
        while True:
            await asyncio.sleep(self.announce_s)
            now = self.producer_topics()
            if now != last:
                last = now
                yield tpb.FrontTopics(shards=len(self.shards), front=self.name, topics=now)

    async def _link(self, shard: int) -> None:
        """Shard ``shard``'s CheckBacks stream, open as long as the front runs (a
        failure is a warning only once it lasts ``WARN_EVERY_S``: a builder starting or
        restarting is normal; then at most every ``WARN_EVERY_S``)."""
        conn = self.shards[shard].transactions.conn
        since = warned = None
        while True:
            stub = opened = None
            try:
                stub = await conn.ready_stub()
                call = stub.CheckBacks(self._announcements(shard), metadata=conn.metadata)  # the secret
                self.linked[shard] = True
                opened = time.monotonic()
                async for check in call:
                    self._forward(check)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the builder restarting: open it again
                now = time.monotonic()
                if since is None or (opened is not None and now - opened > WARN_EVERY_S):
                    since = now  # a stream that stood a while broke: a new failure
                if now - since >= WARN_EVERY_S and (warned is None or now - warned >= WARN_EVERY_S):
                    warned = now
                    log.warning("transaction_link_broken", shard=shard, error=str(e), for_s=round(now - since))
                else:
                    log.debug("transaction_link_broken", shard=shard, error=str(e))
                if isinstance(e, grpc.aio.AioRpcError) and stub is not None:
                    await conn.reset(failed=stub)
            finally:
                self.linked[shard] = False
            await asyncio.sleep(RELINK_S)

    def _forward(self, check: tpb.CheckBack) -> None:
        """One check-back, on the Telemetry stream of one producer of its topic."""
        producers = self._producers(check.topic)
        if not producers:
            log.info("transaction_check_no_producer", topic=check.topic, transaction_id=check.transaction_id)
            return
        try:
            (half,) = decode_records(check.record, np.zeros(1, np.int64), check_crc=False)
            message = check_back_message(half)
        except (DecodeError, ValueError) as e:
            log.warning("transaction_check_unreadable", transaction_id=check.transaction_id, error=str(e))
            return
        self._turn += 1
        target = producers[self._turn % len(producers)]
        target.outbox.put_nowait(
            v2.TelemetryCommand(
                recover_orphaned_transaction_command=v2.RecoverOrphanedTransactionCommand(
                    message=message, transaction_id=check.transaction_id
                )
            )
        )
        log.info(
            "transaction_checked",
            topic=check.topic,
            message_id=half.unique_key,
            transaction_id=check.transaction_id,
            check=check.check,
            client_id=target.client_id,
        )


__all__ = [
    "CHECK_MAX_TOPIC",
    "HALF_TOPIC",
    "NO_TRANSACTION",
    "OP_TOPIC",
    "TransactionService",
    "check_back_message",
    "half_columns",
    "parse_transaction_id",
]
