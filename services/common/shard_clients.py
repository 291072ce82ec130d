"""Typed clients of one shard's services, over one connect/retry/deadline helper.

A shard is four processes: its commitlog, consume-queue builder, index builder and
dispatcher (services/README.md). ``Shard`` holds one typed client per process
(``CommitLogClient``, ``ConsumeQueueClient``, ``IndexClient``, ``DispatcherClient``),
each with one method per RPC the fronts call; every method goes through its
``Connection``, the only place a front's call to a shard is made:

found, connected and called by the rules every client of an internal peer keeps
(connect.py, ``FRONT_RULES``; the blocking ``peers.Peer`` keeps them too): one
resolution at a time shared by every call waiting for it, each waiting at most
``resolve_cap`` and what is left of the caller's deadline; connected within
``CONNECT_CAP_S``; a process not found, refusing connections or taking none is
``ShardUnreachable`` (UNAVAILABLE; nothing of the request was sent); called within
``timeout`` and the caller's deadline; after UNAVAILABLE the channel is dropped (the
next call resolves again: a restarted actor listens on a new port) and a read is
tried once more; a send is not (an append whose answer was lost may have been
stored: the client decides).

The internal secret (internal_auth.py) rides in each call's metadata: the channels
have no interceptor (internal_streams.internal_channel), which grpc.aio would run as a
task per call. Appends (AppendBatch, AppendEncoded, DeliverDelayed) go over one
``AppendStream`` per connection (``CallStream``: opened once, opened again after it
broke; the appends waiting go together, each answered once durable), with the unary
calls' deadlines, errors and rules: a stream that broke fails the appends it sent
UNAVAILABLE (their outcome unknown: never sent again here) and those it had not sent
``ShardUnreachable``. Acks, new invisible times and dead letters go the same way over
the consume-queue builder's ``PopStream`` (pops stay unary: a long poll would hold a
place in flight). Two RPCs pass bytes through unparsed
(``CommitLogClient.append_encoded``, ``ConsumeQueueClient.pull_raw``). The blocking
counterpart for core code in plain threads is ``peers.Peer`` (``SyncCommitLogClient``
below).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc

from mqstore.rpc.v1 import (
    commitlog_pb2,
    commitlog_pb2_grpc,
    common_pb2,
    consume_queue_pb2,
    consume_queue_pb2_grpc,
    dispatcher_pb2,
    dispatcher_pb2_grpc,
    index_pb2,
    index_pb2_grpc,
    transactions_pb2,
    transactions_pb2_grpc,
)
from mqstore.services.common import connect
from mqstore.services.common.connect import FRONT_RULES
from mqstore.services.common.errors import Precondition, Unavailable
from mqstore.services.common.internal_auth import InternalAuth
from mqstore.services.common.internal_streams import CallStream, internal_channel
from mqstore.services.common.peers import Locator, Peer, Placement, Resolver

RESOLVE_CAP_S = FRONT_RULES.resolve_cap_s  # a shard's actor not found again within this: UNAVAILABLE (retried)
# A call the front does not retry itself (a send, a status read) waits at most this for
# its shard's process to be found and connected: a shard that is down fails fast.
SEND_RESOLVE_CAP_S = 2.5
CONNECT_CAP_S = FRONT_RULES.connect_cap_s  # a channel that does not connect within this: unreachable
SERVICE_NAMES = {
    "cl": "commitlog",
    "cq": "consume-queue builder",
    "ix": "index builder",
    "dp": "dispatcher",
    "tx": "transaction service",
}
Pick = Callable[[Any], Any]  # stub -> its multicallable for one RPC (``lambda s: s.Read``)


class ShardUnreachable(Unavailable):
    """UNAVAILABLE before the request left the front: the shard's process was not
    found, or did not take a connection. Nothing of the request was written."""


def _raw_path(file_descriptor, service: str, method: str) -> str:
    """The gRPC path of ``service.method`` (KeyError at import if the contract lost it)."""
    s = file_descriptor.services_by_name[service]
    return f"/{s.full_name}/{s.methods_by_name[method].name}"


# requests without fields, made once
_GET_OFFSETS = commitlog_pb2.GetOffsetsRequest()
_GET_STATS = commitlog_pb2.GetStatsRequest()
_LIST_TOPICS = commitlog_pb2.ListTopicsRequest()
_QUEUES_PROGRESS = consume_queue_pb2.GetProgressRequest()
_INDEX_PROGRESS = index_pb2.IndexProgressRequest()
_PULL = _raw_path(consume_queue_pb2.DESCRIPTOR, "ConsumeQueueService", "Pull")


def _queues_stub(ch: grpc.aio.Channel):
    stub = consume_queue_pb2_grpc.ConsumeQueueServiceStub(ch)
    stub.pull_raw = ch.unary_unary(_PULL)
    return stub


class Connection:
    """One service of one shard: its channel and stub, found and connected on demand
    (see the module docstring). ``resolve`` None: the shard has no such process
    (Precondition on every call: the index disabled). One event loop."""

    def __init__(
        self, shard: int, role: str, resolve: Resolver | None, make_stub: Callable, auth: InternalAuth
    ) -> None:
        self.shard = shard
        self.role = role  # "cl", "cq", "ix" or "dp" (SERVICE_NAMES)
        self._resolve = resolve
        self._make_stub = make_stub
        self._auth = auth
        self.metadata = auth.metadata()  # the secret, on every call and stream open
        self.endpoint = ""  # where it was last found
        self._channel: grpc.aio.Channel | None = None
        self._stub = None
        self._resolving: asyncio.Future | None = None
        self.rules = FRONT_RULES

    @property
    def configured(self) -> bool:
        return self._resolve is not None

    async def call(
        self, pick: Pick, request, *, timeout: float = 30.0, retry: bool = True, resolve_cap: float | None = None
    ):
        """``pick(stub)(request)`` within ``timeout`` and the caller's deadline; finding
        the service and connecting to it at most ``resolve_cap`` each (default
        ``RESOLVE_CAP_S``, or ``SEND_RESOLVE_CAP_S`` without ``retry``: sends and status
        reads, whose callers retry or report). ShardUnreachable: nothing was sent."""
        rules = self.rules
        cap = resolve_cap if resolve_cap is not None else (RESOLVE_CAP_S if retry else SEND_RESOLVE_CAP_S)
        for attempt in range(2):
            cached = self._channel is not None
            stub = self._stub if cached else await self._find(cap)
            try:
                if not rules.connected(self._channel.get_state(try_to_connect=True)):  # READY costs no coroutine
                    await self._connect(cap)
                return await pick(stub)(request, timeout=rules.call_timeout(timeout), metadata=self.metadata)
            except (ShardUnreachable, grpc.aio.AioRpcError) as e:
                if not rules.drops_channel(e):
                    raise
                await self.reset(failed=stub)
                moved = cached and isinstance(e, ShardUnreachable)  # nothing sent; it may listen elsewhere now
                if not rules.may_retry(attempt, retry, moved=moved):
                    raise
                if not moved:
                    await asyncio.sleep(rules.retry_pause_s)
        raise AssertionError("unreachable")

    @property
    def stub(self):
        """The current channel's stub (None before it is found, and after a reset)."""
        return self._stub if self._channel is not None else None

    async def ready_stub(self, cap: float = RESOLVE_CAP_S):
        """The stub, found and connected (ShardUnreachable otherwise): for a caller that
        opens its own stream on it; after UNAVAILABLE on it, ``reset(failed=stub)``."""
        stub = self._stub if self._channel is not None else await self._find(cap)
        try:
            await self._connect(cap)
        except ShardUnreachable:
            await self.reset(failed=stub)
            raise
        return stub

    async def _find(self, cap: float):
        """The stub, resolving the endpoint first: one resolution at a time, shared
        by every call waiting for it, each waiting at most its own budget (an actor
        that restarts answers UNAVAILABLE). A waiter whose resolution's channel was
        dropped before it ran (another waiter found it refusing) is unreachable too,
        rather than starting a resolution of its own."""
        if self._channel is None:
            if self._resolve is None:
                if self.role == "ix":
                    raise Precondition(
                        f"the message index is disabled on shard {self.shard} (message_index_enable=False)"
                    )
                raise Precondition(f"shard {self.shard} has no {SERVICE_NAMES[self.role]} configured")
            pending = self._resolving
            if pending is None:
                pending = self._resolving = asyncio.ensure_future(self._resolve())
                pending.add_done_callback(self._resolved)
            wait_s = self.rules.resolve_wait(cap)
            try:
                await asyncio.wait_for(asyncio.shield(pending), wait_s)
            except TimeoutError as e:
                raise ShardUnreachable(
                    connect.not_found(f"shard {self.shard}", f"its {SERVICE_NAMES[self.role]}", wait_s)
                ) from e
            except Exception as e:  # noqa: BLE001 - a dead or unknown actor: the caller may retry later
                raise ShardUnreachable(f"shard {self.shard} can not be reached: {type(e).__name__}: {e}") from e
            if self._channel is None:
                raise ShardUnreachable(
                    f"shard {self.shard} can not be reached: its {SERVICE_NAMES[self.role]} was found and "
                    "dropped at once (refused or unavailable)"
                )
        return self._stub

    def _resolved(self, f: asyncio.Future) -> None:
        self._resolving = None
        if f.cancelled() or f.exception() is not None or self._channel is not None:
            return
        self.endpoint = f.result()
        self._channel = internal_channel(self.endpoint, self._auth)
        self._stub = self._make_stub(self._channel)

    async def _connect(self, cap: float) -> None:
        """Return once the channel is connected (rule 2 of connect.py; ``cap``: the
        call's resolve cap, at most ``CONNECT_CAP_S`` of it spent here)."""
        ch = self._channel
        if ch is None:
            return
        state = ch.get_state(try_to_connect=True)
        if self.rules.connected(state):
            return
        loop = asyncio.get_running_loop()
        wait_s = self.rules.connect_wait(cap)
        end = loop.time() + wait_s
        who, what = f"shard {self.shard}", f"its {SERVICE_NAMES[self.role]} at {self.endpoint or '?'}"
        while (ok := self.rules.connected(state)) is not True:
            if ok is False:
                raise ShardUnreachable(connect.refused(who, what))
            left = end - loop.time()
            if left <= 0:
                raise ShardUnreachable(connect.no_connection(who, what, wait_s))
            try:
                await asyncio.wait_for(ch.wait_for_state_change(state), left)
            except TimeoutError:
                continue
            state = ch.get_state()

    async def reset(self, *, failed=None) -> None:
        """Forget the channel. ``failed``: the stub a call failed on (a newer channel
        is kept); calls in flight on it get the rules' ``close_grace_s`` to end by themselves."""
        if failed is not None and self._stub is not failed:
            return
        ch, self._channel, self._stub = self._channel, None, None
        if ch is not None:
            if failed is None:
                await ch.close()
            else:
                asyncio.ensure_future(ch.close(self.rules.close_grace_s))


class StreamedCalls:
    """The calls of one ``Connection`` that go over one call stream
    (internal_streams.CallStream; the module docstring): opened on first use, and
    again after it broke or its channel was dropped (one opening at a time). A
    stream that broke drops the channel, so its service is found again (a restarted
    actor listens elsewhere); a call answered UNAVAILABLE alone does not."""

    def __init__(self, conn: Connection, method: Pick, request_type, name: str) -> None:
        self.conn = conn
        self._method = method  # stub -> its stream method (``lambda s: s.AppendStream``)
        self._request_type = request_type
        self._name = f"{name}-{conn.shard}"
        self.stream: CallStream | None = None
        self._stub = None  # the stub (so the channel) the stream is open on
        self._opening = asyncio.Lock()

    async def call(self, item, timeout: float):
        """``item`` on the stream, within ``timeout`` and the caller's deadline; never
        retried here. ShardUnreachable: nothing of it was sent."""
        budget = self.conn.rules.call_timeout(timeout)
        stream = self.stream
        if stream is None or stream.broken is not None or self._stub is not self.conn.stub:
            stream = await self._open(budget)
        try:
            return await stream.call(item, budget)
        except grpc.aio.AioRpcError as e:
            if e.code() is grpc.StatusCode.UNAVAILABLE and stream.broken is not None and stream is self.stream:
                await self.conn.reset(failed=self._stub)
            raise

    async def _open(self, budget: float) -> CallStream:
        async with self._opening:
            stream = self.stream
            if stream is not None and stream.broken is None and self._stub is self.conn.stub:
                return stream
            stub = await self.conn.ready_stub(min(budget, SEND_RESOLVE_CAP_S))
            if stream is not None and stream.broken is None:
                asyncio.ensure_future(stream.close())  # on a channel dropped: its calls end with it
            self.stream = stream = CallStream.open(
                self._method(stub), self._name, self.conn.metadata, self._request_type, not_sent=ShardUnreachable
            )
            self._stub = stub
            return stream

    async def close(self) -> None:
        stream, self.stream, self._stub = self.stream, None, None
        if stream is not None:
            await stream.close()


class CommitLogClient:
    """CommitLogService (proto/mqstore/commitlog/v1) of one shard. Appends go over
    its AppendStream (``appends``; the module docstring), never retried here."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.appends = StreamedCalls(conn, lambda s: s.AppendStream, commitlog_pb2.AppendStreamRequest, "AppendStream")

    async def append_batch(
        self, messages: common_pb2.MessageColumns, *, timeout: float = 60.0
    ) -> commitlog_pb2.AppendBatchResponse:
        """A send (AppendBatch's answer)."""
        answer = await self._append(
            commitlog_pb2.AppendCall(batch=commitlog_pb2.AppendBatchRequest(messages=messages)), timeout
        )
        return answer.batch

    async def deliver_delayed(
        self, messages: common_pb2.MessageColumns, *, timeout: float = 60.0
    ) -> commitlog_pb2.AppendBatchResponse:
        """The store's internal append ("as given"; DeliverDelayed's answer)."""
        answer = await self._append(
            commitlog_pb2.AppendCall(delayed=commitlog_pb2.AppendBatchRequest(messages=messages)), timeout
        )
        return answer.batch

    async def append_encoded(self, raw: bytes, *, timeout: float = 60.0) -> bytes:
        """An EncodedBatch's bytes as the client sent them; the answer's bytes
        (an EncodedAppendResult's)."""
        return (await self._append(commitlog_pb2.AppendCall(encoded=raw), timeout)).encoded

    async def _append(self, item: commitlog_pb2.AppendCall, timeout: float) -> commitlog_pb2.AppendAnswer:
        return await self.appends.call(item, timeout)  # the answer's status raised as the unary call's

    async def close_stream(self) -> None:
        await self.appends.close()

    # status reads: ``how`` is Connection.call's timeout, retry and resolve_cap
    async def get_offsets(self, **how) -> commitlog_pb2.GetOffsetsResponse:
        return await self.conn.call(lambda s: s.GetOffsets, _GET_OFFSETS, **how)

    async def get_stats(self, **how) -> commitlog_pb2.GetStatsResponse:
        return await self.conn.call(lambda s: s.GetStats, _GET_STATS, **how)

    async def list_topics(self, **how) -> commitlog_pb2.ListTopicsResponse:
        return await self.conn.call(lambda s: s.ListTopics, _LIST_TOPICS, **how)

    async def update_topic(self, config: common_pb2.TopicConfig) -> commitlog_pb2.UpdateTopicResponse:
        return await self.conn.call(lambda s: s.UpdateTopic, commitlog_pb2.UpdateTopicRequest(config=config))

    async def read(self, request: commitlog_pb2.ReadRequest) -> commitlog_pb2.ReadResponse:
        return await self.conn.call(lambda s: s.Read, request)


class ConsumeQueueClient:
    """ConsumeQueueService (proto/mqstore/consume_queue/v1) of one shard: units,
    offsets, pops (acks and the like on its PopStream, ``pop_calls``)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.pop_calls = StreamedCalls(conn, lambda s: s.PopStream, consume_queue_pb2.PopStreamRequest, "PopStream")

    async def pull_raw(self, raw: bytes) -> bytes:
        """A PullRequest's bytes as the client sent them; the answer's bytes."""
        return await self.conn.call(lambda s: s.pull_raw, raw)

    async def get_units(self, request: consume_queue_pb2.GetUnitsRequest) -> consume_queue_pb2.GetUnitsResponse:
        return await self.conn.call(lambda s: s.GetUnits, request)

    async def min_max(self, topic: str) -> consume_queue_pb2.MinMaxResponse:
        return await self.conn.call(lambda s: s.MinMax, consume_queue_pb2.MinMaxRequest(topic=topic))

    async def offset_at_time(
        self, request: consume_queue_pb2.OffsetAtTimeRequest
    ) -> consume_queue_pb2.OffsetAtTimeResponse:
        return await self.conn.call(lambda s: s.OffsetAtTime, request)

    async def group_offsets(self, group: str) -> consume_queue_pb2.GroupOffsetsResponse:
        return await self.conn.call(lambda s: s.GroupOffsets, consume_queue_pb2.GroupOffsetsRequest(group=group))

    async def commit_offset(
        self, request: consume_queue_pb2.CommitOffsetRequest, *, retry: bool = True
    ) -> consume_queue_pb2.CommitOffsetResponse:
        return await self.conn.call(lambda s: s.CommitOffset, request, retry=retry)

    async def fetch_offset(
        self, request: consume_queue_pb2.FetchOffsetRequest
    ) -> consume_queue_pb2.FetchOffsetResponse:
        return await self.conn.call(lambda s: s.FetchOffset, request)

    async def make_queues(self, topic: str, queue_ids: list[int]) -> consume_queue_pb2.MakeQueuesResponse:
        return await self.conn.call(
            lambda s: s.MakeQueues, consume_queue_pb2.MakeQueuesRequest(topic=topic, queue_ids=queue_ids)
        )

    async def get_progress(self, **how) -> common_pb2.BuilderProgress:
        """``how``: Connection.call's timeout, retry and resolve_cap."""
        return await self.conn.call(lambda s: s.GetProgress, _QUEUES_PROGRESS, **how)

    # pops: each answers an outcome the caller reports; none is retried here
    async def pop(self, request: consume_queue_pb2.PopRequest, *, timeout: float) -> consume_queue_pb2.PopResponse:
        return await self.conn.call(lambda s: s.Pop, request, timeout=timeout, retry=False)

    # acks, new invisible times and dead letters go over the PopStream (``pop_calls``)
    async def ack_pop(
        self, request: consume_queue_pb2.AckPopRequest, *, timeout: float = 30.0
    ) -> consume_queue_pb2.AckPopResponse:
        return (await self.pop_calls.call(consume_queue_pb2.PopCall(ack=request), timeout)).ack

    async def change_invisible(
        self, request: consume_queue_pb2.ChangeInvisibleRequest, *, timeout: float = 30.0
    ) -> consume_queue_pb2.ChangeInvisibleResponse:
        return (
            await self.pop_calls.call(consume_queue_pb2.PopCall(change_invisible=request), timeout)
        ).change_invisible

    async def pop_to_dead_letter(
        self, request: consume_queue_pb2.PopToDeadLetterRequest, *, timeout: float = 30.0
    ) -> consume_queue_pb2.PopToDeadLetterResponse:
        return (await self.pop_calls.call(consume_queue_pb2.PopCall(dead_letter=request), timeout)).dead_letter


class IndexClient:
    """IndexService (proto/mqstore/index/v1) of one shard (Precondition on every call
    where the index is disabled)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    async def query(self, request: index_pb2.IndexQueryRequest) -> index_pb2.IndexQueryResponse:
        return await self.conn.call(lambda s: s.Query, request)

    async def get_progress(self, **how) -> common_pb2.BuilderProgress:
        """``how``: Connection.call's timeout, retry and resolve_cap."""
        return await self.conn.call(lambda s: s.GetProgress, _INDEX_PROGRESS, **how)


class TransactionClient:
    """TransactionService (proto/mqstore/v1/transactions.proto) of one shard, served by
    its consume-queue builder's process: halves written, transactions ended, and the
    front's CheckBacks stream (opened on ``conn.ready_stub()``)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    async def prepare(self, request: transactions_pb2.PrepareRequest) -> transactions_pb2.PrepareResponse:
        """A send of halves: never retried here."""
        return await self.conn.call(lambda s: s.Prepare, request, timeout=60.0, retry=False)

    async def end(self, request: transactions_pb2.EndRequest) -> transactions_pb2.EndResponse:
        """Retried once after UNAVAILABLE: a second End of an ended half writes nothing."""
        return await self.conn.call(lambda s: s.End, request)


class DispatcherClient:
    """DispatcherService (proto/mqstore/dispatcher/v1) of one shard."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    async def status(self, *, timeout: float = 5.0) -> dispatcher_pb2.DispatcherStatusResponse:
        return await self.conn.call(
            lambda s: s.Status,
            dispatcher_pb2.DispatcherStatusRequest(),
            timeout=timeout,
            retry=False,
            resolve_cap=timeout,
        )


class Shard:
    """One shard's typed clients. ``resolvers``: "cl", "cq", "ix" -> resolver (no
    "ix": index disabled); ``resolve_dispatcher`` None: no dispatcher to ask;
    ``locate``: where the shard's processes are (Ray's actor table: status rows carry
    the node id and say why a part is missing), None without Ray."""

    def __init__(
        self,
        shard: int,
        resolvers: dict[str, Resolver],
        resolve_dispatcher: Resolver | None = None,
        *,
        auth: InternalAuth,
        locate: Locator | None = None,
    ) -> None:
        self.shard = shard
        self._locate = locate
        self.node_id = ""  # the Ray node its commitlog was last seen on
        self.msg_id_prefix: str | None = None  # its store host's msgId prefix, once asked
        self._conns = {
            "cl": Connection(shard, "cl", resolvers.get("cl"), commitlog_pb2_grpc.CommitLogServiceStub, auth),
            "cq": Connection(shard, "cq", resolvers.get("cq"), _queues_stub, auth),
            "ix": Connection(shard, "ix", resolvers.get("ix"), index_pb2_grpc.IndexServiceStub, auth),
            "dp": Connection(shard, "dp", resolve_dispatcher, dispatcher_pb2_grpc.DispatcherServiceStub, auth),
            # the consume-queue builder's process serves the shard's transactions too
            "tx": Connection(shard, "tx", resolvers.get("cq"), transactions_pb2_grpc.TransactionServiceStub, auth),
        }
        self.commitlog = CommitLogClient(self._conns["cl"])
        self.queues = ConsumeQueueClient(self._conns["cq"])
        self.index = IndexClient(self._conns["ix"])
        self.dispatcher = DispatcherClient(self._conns["dp"])
        self.transactions = TransactionClient(self._conns["tx"])

    @property
    def endpoint(self) -> str:
        """Where its commitlog was last found ("" before)."""
        return self._conns["cl"].endpoint

    @property
    def services(self) -> set[str]:
        """The store services of the shard ("cl", "cq", and "ix" unless the index is disabled)."""
        return {r for r, c in self._conns.items() if c.configured and r not in ("dp", "tx")}

    @property
    def has_dispatcher(self) -> bool:
        return self._conns["dp"].configured

    async def learn_prefix(self, *, timeout: float = 30.0, retry: bool = True) -> str:
        """The msgId prefix of the shard's store host (asked once, then kept)."""
        if self.msg_id_prefix is None:
            self.msg_id_prefix = (await self.commitlog.get_offsets(timeout=timeout, retry=retry)).msg_id_prefix
        return self.msg_id_prefix

    async def dispatcher_status(self, timeout: float = 5.0) -> dispatcher_pb2.DispatcherStatusResponse | None:
        """The dispatcher's Status (None: the shard has no dispatcher to ask)."""
        return await self.dispatcher.status(timeout=timeout) if self.has_dispatcher else None

    async def placement(self, wait_s: float) -> dict[str, Placement]:
        """Where the shard's processes are ({} without a locator); remembers the
        commitlog's node."""
        if self._locate is None:
            return {}
        found = await asyncio.wait_for(self._locate(), wait_s)
        cl = found.get("cl")
        if cl is not None and cl.node_id:
            self.node_id = cl.node_id
        return found

    async def reset(self) -> None:
        await self.commitlog.close_stream()
        await self.queues.pop_calls.close()
        for c in self._conns.values():
            await c.reset()

    async def close(self) -> None:
        await self.reset()


class SyncCommitLogClient:
    """CommitLogService over a blocking ``peers.Peer`` (core code in plain threads: a
    builder's view of its commitlog, the delay scheduler): one method per RPC, the
    Peer's connect rules (resolve again after UNAVAILABLE, back off after a failed
    resolution)."""

    def __init__(self, resolve: Resolver, auth: InternalAuth) -> None:
        self.peer = Peer(resolve, commitlog_pb2_grpc.CommitLogServiceStub, auth)

    def get_recovery(self) -> commitlog_pb2.GetRecoveryResponse:
        return self.peer.call(lambda s: s.GetRecovery, commitlog_pb2.GetRecoveryRequest())

    def get_offsets(self, *, timeout: float = 10.0) -> commitlog_pb2.GetOffsetsResponse:
        return self.peer.call(lambda s: s.GetOffsets, commitlog_pb2.GetOffsetsRequest(), timeout=timeout)

    def check_units(
        self, request: commitlog_pb2.CheckUnitsRequest, *, timeout: float = 120.0
    ) -> commitlog_pb2.CheckUnitsResponse:
        return self.peer.call(lambda s: s.CheckUnits, request, timeout=timeout)

    def read(self, request: commitlog_pb2.ReadRequest, *, timeout: float = 30.0) -> commitlog_pb2.ReadResponse:
        return self.peer.call(lambda s: s.Read, request, timeout=timeout)

    def read_range(
        self, request: commitlog_pb2.ReadRangeRequest, *, timeout: float = 60.0
    ) -> commitlog_pb2.ReadRangeResponse:
        return self.peer.call(lambda s: s.ReadRange, request, timeout=timeout)

    def deliver_delayed(
        self, messages: common_pb2.MessageColumns, *, timeout: float = 30.0
    ) -> commitlog_pb2.AppendBatchResponse:
        return self.peer.call(
            lambda s: s.DeliverDelayed, commitlog_pb2.AppendBatchRequest(messages=messages), timeout=timeout
        )

    def note_derived(self, request: commitlog_pb2.NoteDerivedRequest) -> commitlog_pb2.NoteDerivedResponse:
        return self.peer.call(lambda s: s.NoteDerived, request)

    def attach_queue_ends(
        self, request: commitlog_pb2.AttachQueueEndsRequest, *, timeout: float = 30.0
    ) -> commitlog_pb2.AttachQueueEndsResponse:
        return self.peer.call(lambda s: s.AttachQueueEnds, request, timeout=timeout)

    def close(self, *, for_good: bool = False) -> None:
        self.peer.reset(close=for_good)


__all__ = [
    "CONNECT_CAP_S",
    "RESOLVE_CAP_S",
    "SEND_RESOLVE_CAP_S",
    "SERVICE_NAMES",
    "CommitLogClient",
    "Connection",
    "ConsumeQueueClient",
    "DispatcherClient",
    "IndexClient",
    "Shard",
    "ShardUnreachable",
    "StreamedCalls",
    "SyncCommitLogClient",
    "TransactionClient",
]
