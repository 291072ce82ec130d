"""Typed clients of one shard's services, over one connect/retry/deadline helper.

A shard is four processes: its commitlog, consume-queue builder, index builder and
dispatcher (services/README.md). ``Shard`` holds one typed client per process
(``CommitLogClient``, ``ConsumeQueueClient``, ``IndexClient``, ``DispatcherClient``),
each with one method per RPC the fronts call; every method goes through its
``Connection``, the only place a front's call to a shard is made:

- found through a resolver (the Ray actor by name, or a fixed address), one
  resolution at a time shared by every call waiting for it, each waiting at most
  ``resolve_cap`` and what is left of the caller's deadline (deadline.py);
- connected within ``CONNECT_CAP_S``: a process that refuses connections or takes
  none is ``ShardUnreachable`` (UNAVAILABLE; nothing of the request was sent);
- called within ``timeout`` and the caller's deadline; after UNAVAILABLE the channel
  is dropped (the next call resolves again: a restarted actor listens on a new port)
  and a read is tried once more; a send is not (an append whose answer was lost may
  have been stored: the client decides).

The internal secret (internal_auth.py) rides on every call through the channel
(server.channel). Two RPCs pass bytes through unparsed (``CommitLogClient.append_encoded``,
``ConsumeQueueClient.pull_raw``). The blocking counterpart for core code in plain
threads is ``peers.Peer`` (``SyncCommitLogClient`` below).
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
)
from mqstore.services.common import deadline
from mqstore.services.common.errors import Precondition, Unavailable
from mqstore.services.common.internal_auth import InternalAuth
from mqstore.services.common.peers import Locator, Peer, Placement, Resolver
from mqstore.services.common.server import channel

RESOLVE_CAP_S = 10.0  # a shard's actor not found again within this: UNAVAILABLE (the client retries)
# A call the front does not retry itself (a send, a status read) waits at most this for
# its shard's process to be found and connected: a shard that is down fails fast.
SEND_RESOLVE_CAP_S = 2.5
CONNECT_CAP_S = 2.5  # a channel that does not connect within this: the shard can not be reached
RETRY_PAUSE_S = 0.2  # before the one retry of a read after UNAVAILABLE
CLOSE_GRACE_S = 5.0  # calls in flight on a dropped channel get this long to end
SERVICE_NAMES = {"cl": "commitlog", "cq": "consume-queue builder", "ix": "index builder", "dp": "dispatcher"}
_READY = grpc.ChannelConnectivity.READY
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
_APPEND_ENCODED = _raw_path(commitlog_pb2.DESCRIPTOR, "CommitLogService", "AppendEncoded")
_PULL = _raw_path(consume_queue_pb2.DESCRIPTOR, "ConsumeQueueService", "Pull")


def _commitlog_stub(ch: grpc.aio.Channel):
    stub = commitlog_pb2_grpc.CommitLogServiceStub(ch)
    stub.append_encoded_raw = ch.unary_unary(_APPEND_ENCODED)  # bytes in, bytes out
    return stub


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
        self.endpoint = ""  # where it was last found
        self._channel: grpc.aio.Channel | None = None
        self._stub = None
        self._resolving: asyncio.Future | None = None

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
        cap = resolve_cap if resolve_cap is not None else (RESOLVE_CAP_S if retry else SEND_RESOLVE_CAP_S)
        for attempt in (0, 1):
            stub = self._stub if self._channel is not None else await self._find(cap)
            try:
                if self._channel.get_state(try_to_connect=True) is not _READY:  # the common case costs no coroutine
                    await self._connect(min(cap, CONNECT_CAP_S))
            except ShardUnreachable:
                await self.reset(failed=stub)
                if not retry or attempt:
                    raise
                await asyncio.sleep(RETRY_PAUSE_S)
                continue
            try:
                return await pick(stub)(request, timeout=deadline.budget(timeout))
            except grpc.aio.AioRpcError as e:
                if e.code() is not grpc.StatusCode.UNAVAILABLE:
                    raise
                await self.reset(failed=stub)
                if not retry or attempt:
                    raise
                await asyncio.sleep(RETRY_PAUSE_S)
        raise AssertionError("unreachable")

    async def ready_stub(self, cap: float = RESOLVE_CAP_S):
        """The stub, found and connected (ShardUnreachable otherwise): for a caller that
        opens its own stream on it; after UNAVAILABLE on it, ``reset(failed=stub)``."""
        stub = self._stub if self._channel is not None else await self._find(cap)
        try:
            await self._connect(min(cap, CONNECT_CAP_S))
        except ShardUnreachable:
            await self.reset(failed=stub)
            raise
        return stub

    async def _find(self, cap: float):
        """The stub, resolving the endpoint first: one resolution at a time, shared
        by every call waiting for it, each waiting at most its own budget (an actor
        that restarts answers UNAVAILABLE)."""
        while self._channel is None:
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
            wait_s = deadline.budget(cap)
            try:
                await asyncio.wait_for(asyncio.shield(pending), wait_s)
            except TimeoutError as e:
                raise ShardUnreachable(
                    f"shard {self.shard} can not be reached: its {SERVICE_NAMES[self.role]} was not found within "
                    f"{wait_s:.1f} s (restarting, not placed on a node, or its node is down)"
                ) from e
            except Exception as e:  # noqa: BLE001 - a dead or unknown actor: the caller may retry later
                raise ShardUnreachable(f"shard {self.shard} can not be reached: {type(e).__name__}: {e}") from e
        return self._stub

    def _resolved(self, f: asyncio.Future) -> None:
        self._resolving = None
        if f.cancelled() or f.exception() is not None or self._channel is not None:
            return
        self.endpoint = f.result()
        self._channel = channel(self.endpoint, self._auth)
        self._stub = self._make_stub(self._channel)

    async def _connect(self, cap: float) -> None:
        """Return once the channel is connected; ShardUnreachable at once if it refuses
        connections, or after ``cap`` (and what is left of the caller's deadline) if it
        does not connect: a host that is gone must not hold a call until its deadline."""
        ch = self._channel
        if ch is None:
            return
        ready = grpc.ChannelConnectivity.READY
        state = ch.get_state(try_to_connect=True)
        if state is ready:
            return
        loop = asyncio.get_running_loop()
        wait_s = deadline.budget(cap)
        end = loop.time() + wait_s
        where = f"its {SERVICE_NAMES[self.role]} at {self.endpoint or '?'}"
        while state is not ready:
            if state in (grpc.ChannelConnectivity.TRANSIENT_FAILURE, grpc.ChannelConnectivity.SHUTDOWN):
                raise ShardUnreachable(f"shard {self.shard} can not be reached: {where} refuses connections")
            left = end - loop.time()
            if left <= 0:
                raise ShardUnreachable(
                    f"shard {self.shard} can not be reached: {where} took no connection within {wait_s:.1f} s"
                )
            try:
                await asyncio.wait_for(ch.wait_for_state_change(state), left)
            except TimeoutError:
                continue
            state = ch.get_state()

    async def reset(self, *, failed=None) -> None:
        """Forget the channel. ``failed``: the stub a call failed on (a newer channel
        is kept); calls in flight on it get ``CLOSE_GRACE_S`` to end by themselves."""
        if failed is not None and self._stub is not failed:
            return
        ch, self._channel, self._stub = self._channel, None, None
        if ch is not None:
            if failed is None:
                await ch.close()
            else:
                asyncio.ensure_future(ch.close(CLOSE_GRACE_S))


class CommitLogClient:
    """CommitLogService (proto/mqstore/commitlog/v1) of one shard."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    async def append_batch(
        self, messages: common_pb2.MessageColumns, *, timeout: float = 60.0
    ) -> commitlog_pb2.AppendBatchResponse:
        """A send: never retried here (see the module docstring)."""
        return await self.conn.call(
            lambda s: s.AppendBatch, commitlog_pb2.AppendBatchRequest(messages=messages), timeout=timeout, retry=False
        )

    async def deliver_delayed(
        self, messages: common_pb2.MessageColumns, *, timeout: float = 60.0
    ) -> commitlog_pb2.AppendBatchResponse:
        """The store's internal append ("as given"), never retried here."""
        return await self.conn.call(
            lambda s: s.DeliverDelayed,
            commitlog_pb2.AppendBatchRequest(messages=messages),
            timeout=timeout,
            retry=False,
        )

    async def append_encoded(self, raw: bytes, *, timeout: float = 60.0) -> bytes:
        """An EncodedBatch's bytes as the client sent them; the answer's bytes."""
        return await self.conn.call(lambda s: s.append_encoded_raw, raw, timeout=timeout, retry=False)

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
    offsets, pops."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

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

    async def ack_pop(self, request: consume_queue_pb2.AckPopRequest) -> consume_queue_pb2.AckPopResponse:
        return await self.conn.call(lambda s: s.AckPop, request, retry=False)

    async def change_invisible(
        self, request: consume_queue_pb2.ChangeInvisibleRequest
    ) -> consume_queue_pb2.ChangeInvisibleResponse:
        return await self.conn.call(lambda s: s.ChangeInvisible, request, retry=False)

    async def pop_to_dead_letter(
        self, request: consume_queue_pb2.PopToDeadLetterRequest
    ) -> consume_queue_pb2.PopToDeadLetterResponse:
        return await self.conn.call(lambda s: s.PopToDeadLetter, request, retry=False)


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
            "cl": Connection(shard, "cl", resolvers.get("cl"), _commitlog_stub, auth),
            "cq": Connection(shard, "cq", resolvers.get("cq"), _queues_stub, auth),
            "ix": Connection(shard, "ix", resolvers.get("ix"), index_pb2_grpc.IndexServiceStub, auth),
            "dp": Connection(shard, "dp", resolve_dispatcher, dispatcher_pb2_grpc.DispatcherServiceStub, auth),
        }
        self.commitlog = CommitLogClient(self._conns["cl"])
        self.queues = ConsumeQueueClient(self._conns["cq"])
        self.index = IndexClient(self._conns["ix"])
        self.dispatcher = DispatcherClient(self._conns["dp"])

    @property
    def endpoint(self) -> str:
        """Where its commitlog was last found ("" before)."""
        return self._conns["cl"].endpoint

    @property
    def services(self) -> set[str]:
        """The store services of the shard ("cl", "cq", and "ix" unless the index is disabled)."""
        return {r for r, c in self._conns.items() if c.configured and r != "dp"}

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
    "SyncCommitLogClient",
]
