"""FrontService: the public API (proto/mqstore/v1/front.proto), routing every topic
queue to its shard (query/routing.py) and composing the shard services, as in the
architecture: pull = ConsumeQueue.GetUnits -> CommitLog.Read; query by key =
Index.Query on every shard -> CommitLog.Read -> check topic, key and time; send =
CommitLog.AppendBatch per shard, in parallel.

Shards are found through ``resolve(i)`` (the Ray actor by name, or a fixed address);
a shard that stops answering is resolved again on the next call (a restarted actor
listens on a new port). Reads are retried once after UNAVAILABLE; sends are not
(an append whose answer was lost may have been stored: the client decides).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable

import grpc
import numpy as np
import structlog
from google.protobuf.message import DecodeError

from mqstore.errors import NotFoundError
from mqstore.formats.msgid import offset_msg_id_prefix, parse_offset_msg_id
from mqstore.rpc.v1 import (
    commitlog_pb2,
    commitlog_pb2_grpc,
    common_pb2,
    consume_queue_pb2,
    consume_queue_pb2_grpc,
    dispatcher_pb2,
    dispatcher_pb2_grpc,
    front_pb2_grpc,
    index_pb2,
    index_pb2_grpc,
)
from mqstore.rpc.v1 import front_pb2 as pb
from mqstore.services.common import deadline, validate
from mqstore.services.common.convert import (
    check_batch_limits,
    columns_to_batch,
    pull_answer_to_pb,
    queue_id_column,
    topic_column,
)
from mqstore.services.common.errors import (
    REFUSED_CODES,
    BadRequest,
    PermissionDenied,
    Precondition,
    RpcError,
    Unauthenticated,
    Unavailable,
    rpc,
    status_of,
)
from mqstore.services.common.headers import NOT_STORED_HEADER
from mqstore.services.common.internal_auth import InternalAuth
from mqstore.services.common.peers import Locator, Placement
from mqstore.services.common.server import Registration, channel
from mqstore.services.query.acl import GROUP, TOPIC, Acl, Action, Rule, User
from mqstore.services.query.ports import GrpcPorts
from mqstore.services.query.routing import Router
from mqstore.store import message_rules, reads
from mqstore.store.messages import AUTO_QUEUE, check_no_transaction, check_send_topics
from mqstore.store.reads import drive_async
from mqstore.store.system_topics import check_client_topics
from mqstore.store.topic_configs import MESSAGE_TYPE_ATTRIBUTE, PERM_READ, TopicConfig, check_perm, parse_message_type

log = structlog.get_logger(__name__)
SERVICE = "mqstore.v1.FrontService"
_LONG_MAX = (1 << 63) - 1
Resolver = Callable[[], Awaitable[str]]
RESOLVE_CAP_S = 10.0  # a shard's actor not found again within this: UNAVAILABLE (the client retries)
# A call the front does not retry itself (a send, a status read) waits at most this for
# its shard's process to be found and connected: a shard that is down fails fast.
SEND_RESOLVE_CAP_S = 2.5
CONNECT_CAP_S = 2.5  # a channel that does not connect within this: the shard can not be reached
STATUS_BUDGET_S = 1.5  # StoreStatus asks every part of every shard at once, each for at most this
SERVICE_NAMES = {"cl": "commitlog", "cq": "consume-queue builder", "ix": "index builder", "dp": "dispatcher"}


class ShardUnreachable(Unavailable):
    """UNAVAILABLE before the request left the front: the shard's process was not
    found, or did not take a connection. Nothing of the request was written."""


class ShardClient:
    """Stubs of one shard's services (its commitlog, consume-queue builder, index
    builder and dispatcher, each a process of its own), re-resolved after
    UNAVAILABLE. ``resolvers``: "cl", "cq", "ix" -> resolver (no "ix": index disabled)."""

    _STUBS = {
        "cl": commitlog_pb2_grpc.CommitLogServiceStub,
        "cq": consume_queue_pb2_grpc.ConsumeQueueServiceStub,
        "ix": index_pb2_grpc.IndexServiceStub,
        "dp": dispatcher_pb2_grpc.DispatcherServiceStub,
    }

    def __init__(
        self,
        shard: int,
        resolvers: dict[str, Resolver],
        resolve_dispatcher: Resolver | None = None,
        *,
        auth: InternalAuth,
        locate: Locator | None = None,
    ) -> None:
        """``locate``: where the shard's processes are (Ray's actor table: status
        rows carry the node id and say why a part is missing); None without Ray."""
        self.shard = shard
        self._resolvers = dict(resolvers)
        if resolve_dispatcher is not None:
            self._resolvers["dp"] = resolve_dispatcher
        self._locate = locate
        self._auth = auth
        self.endpoint = ""
        self.node_id = ""  # the Ray node its commitlog was last seen on
        self._endpoints: dict[str, str] = {}
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs_by: dict[str, object] = {}
        self._resolving: dict[str, asyncio.Future] = {}
        self.msg_id_prefix: str | None = None

    @property
    def services(self) -> set[str]:
        """The store services of the shard ("cl", "cq", and "ix" unless the index is disabled)."""
        return set(self._resolvers) - {"dp"}

    @property
    def has_dispatcher(self) -> bool:
        return "dp" in self._resolvers

    async def _stub(self, service: str, cap: float = RESOLVE_CAP_S):
        """The stub of ``service``, resolving its endpoint first if needed: one
        resolution at a time per service, shared by every call waiting for it, each
        waiting at most its own budget (an actor that restarts answers UNAVAILABLE)."""
        while service not in self._channels:
            if service not in self._resolvers:
                raise Precondition(f"the message index is disabled on shard {self.shard} (message_index_enable=False)")
            pending = self._resolving.get(service)
            if pending is None:
                pending = self._resolving[service] = asyncio.ensure_future(self._resolvers[service]())
                pending.add_done_callback(lambda f, s=service: self._resolved(s, f))
            wait_s = deadline.budget(cap)
            try:
                await asyncio.wait_for(asyncio.shield(pending), wait_s)
            except TimeoutError as e:
                raise ShardUnreachable(
                    f"shard {self.shard} can not be reached: its {SERVICE_NAMES[service]} was not found within "
                    f"{wait_s:.1f} s (restarting, not placed on a node, or its node is down)"
                ) from e
            except Exception as e:  # noqa: BLE001 - a dead or unknown actor: the caller may retry later
                raise ShardUnreachable(f"shard {self.shard} can not be reached: {type(e).__name__}: {e}") from e
        return self._stubs_by[service]

    async def _connect(self, service: str, ch: grpc.aio.Channel, cap: float) -> None:
        """Return once ``ch`` is connected; ShardUnreachable at once if it refuses
        connections, or after ``cap`` (and what is left of the caller's deadline)
        if it does not connect: a host that is gone must not hold a call until its
        deadline."""
        ready = grpc.ChannelConnectivity.READY
        state = ch.get_state(try_to_connect=True)
        if state is ready:
            return
        loop = asyncio.get_running_loop()
        wait_s = deadline.budget(cap)
        end = loop.time() + wait_s
        where = f"its {SERVICE_NAMES[service]} at {self._endpoints.get(service, '?')}"
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

    def _resolved(self, service: str, f: asyncio.Future) -> None:
        self._resolving.pop(service, None)
        if f.cancelled() or f.exception() is not None or service in self._channels:
            return
        endpoint = f.result()
        if service == "cl":
            self.endpoint = endpoint
        self._endpoints[service] = endpoint
        self._channels[service] = channel(endpoint, self._auth)
        self._stubs_by[service] = self._STUBS[service](self._channels[service])

    async def reset(self, service: str | None = None, *, failed=None) -> None:
        """Forget a service's channel (every one: ``service`` None). ``failed``: the
        stub a call failed on; a newer channel is kept. In-flight calls on the old
        channel get up to 5 s to end by themselves."""
        for name in [service] if service else list(self._channels):
            if failed is not None and self._stubs_by.get(name) is not failed:
                continue
            ch = self._channels.pop(name, None)
            self._stubs_by.pop(name, None)
            if ch is not None:
                if failed is None:
                    await ch.close()
                else:
                    asyncio.ensure_future(ch.close(5.0))

    async def call(
        self,
        service: str,
        method: str,
        request,
        *,
        timeout: float = 30.0,
        retry: bool = True,
        raw: bool = False,
        resolve_cap: float | None = None,
    ):
        """``service`` is "cl", "cq", "ix" or "dp". The call takes at most ``timeout``
        and what is left of the client's deadline; finding the service and connecting
        to it at most ``resolve_cap`` each (default ``RESOLVE_CAP_S``, or
        ``SEND_RESOLVE_CAP_S`` without ``retry``: sends and status reads, whose
        callers retry or report). ShardUnreachable: nothing was sent. With ``raw``
        the request and the answer are serialized bytes, passed on as they are."""
        cap = resolve_cap if resolve_cap is not None else (RESOLVE_CAP_S if retry else SEND_RESOLVE_CAP_S)
        for attempt in (0, 1):
            stub = await self._stub(service, cap)
            ch = self._channels.get(service)
            try:
                if ch is not None:
                    await self._connect(service, ch, min(cap, CONNECT_CAP_S))
            except ShardUnreachable:
                await self.reset(service, failed=stub)
                if not retry or attempt:
                    raise
                await asyncio.sleep(0.2)
                continue
            try:
                if raw:
                    path = f"/mqstore.v1.{type(stub).__name__.removesuffix('Stub')}/{method}"
                    return await self._channels[service].unary_unary(path)(request, timeout=deadline.budget(timeout))
                return await getattr(stub, method)(request, timeout=deadline.budget(timeout))
            except grpc.aio.AioRpcError as e:
                if e.code() is not grpc.StatusCode.UNAVAILABLE:
                    raise
                await self.reset(service, failed=stub)
                if not retry or attempt:
                    raise
                await asyncio.sleep(0.2)
        raise AssertionError("unreachable")

    async def dispatcher_status(self, timeout: float = 5.0) -> dispatcher_pb2.DispatcherStatusResponse | None:
        """The dispatcher's Status (None: the shard has no dispatcher to ask)."""
        if not self.has_dispatcher:
            return None
        return await self.call(
            "dp", "Status", dispatcher_pb2.DispatcherStatusRequest(), timeout=timeout, retry=False, resolve_cap=timeout
        )

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

    async def close(self) -> None:
        await self.reset()


class FrontServicer(front_pb2_grpc.FrontServiceServicer):
    """See the module docstring. ``default_queue_nums``: write queues of topics
    without a config (the store's default). ``metrics``: a ``FrontMetrics`` that
    observes every call (``observe_rpc``)."""

    def __init__(self, shards: list[ShardClient], *, default_queue_nums: int = 4, metrics=None, acl=None) -> None:
        if not shards:
            raise ValueError("a front needs at least one shard")
        self.shards = shards
        self.acl = acl  # an acl.Acl, or None: anonymous
        self.metrics = metrics  # a metrics.FrontMetrics, or None
        self.router = Router(len(shards))
        self.default_queue_nums = default_queue_nums
        self._write_queues: dict[str, int] | None = None
        self._rr: dict[str, itertools.count] = {}
        self._down_until: dict[int, float] = {}  # shard -> loop time until which _any_shard asks it last

    def registration(self) -> Registration:
        return Registration(_add_front, self, SERVICE)

    async def close(self) -> None:
        for s in self.shards:
            await s.close()

    def _shard(self, topic: str, queue_id: int) -> ShardClient:
        return self.shards[self.router.shard_of(topic, queue_id)]

    async def _fan_out(self, fn: Callable[[ShardClient], Awaitable]) -> list:
        """fn on every shard at once; the first failure is raised."""
        return list(await asyncio.gather(*(fn(s) for s in self.shards)))

    # ------------------------------------------------------------------ users and permissions (query/acl.py)

    def _caller(self, context) -> User | None:
        """The user who signed the call (None: the front is anonymous); Unauthenticated otherwise."""
        if self.acl is None:
            return None
        try:
            return self.acl.authenticate(context.invocation_metadata())
        except Unauthenticated as e:
            log.info("acl_refused", peer=context.peer(), code="UNAUTHENTICATED", reason=str(e))
            raise

    def _allow(self, context, *needs: tuple[Action, str, str]) -> User | None:
        """Authenticate, then PermissionDenied unless every (action, kind, name) is allowed."""
        user = self._caller(context)
        try:
            for action, kind, name in needs if user is not None else ():
                self.acl.authorize(user, action, kind, name)
        except PermissionDenied as e:
            log.info("acl_refused", peer=context.peer(), code="PERMISSION_DENIED", reason=str(e))
            raise
        return user

    def _allow_pub(self, context, topics) -> None:
        """_allow of Pub on every topic of a send (a batch may name thousands)."""
        if self.acl is None:
            return
        user = self._caller(context)
        try:
            self.acl.authorize_all(user, Action.PUB, TOPIC, topics)
        except PermissionDenied as e:
            log.info("acl_refused", peer=context.peer(), code="PERMISSION_DENIED", reason=str(e))
            raise

    def _admin(self, context, what: str) -> User | None:
        user = self._caller(context)
        if user is not None and not user.admin:
            log.info("acl_refused", peer=context.peer(), code="PERMISSION_DENIED", user=user.access_key, what=what)
            self.acl.require_admin(user, what)
        return user

    # ------------------------------------------------------------------ send

    @rpc
    async def SendBatch(self, request: pb.SendBatchRequest, context) -> pb.SendBatchResponse:
        self._allow_pub(context, request.messages.topics)
        cols = request.messages
        if len(self.shards) == 1:  # the shard checks everything and picks queues itself
            res = await self.shards[0].call(
                "cl", "AppendBatch", commitlog_pb2.AppendBatchRequest(messages=cols), timeout=60, retry=False
            )
            return pb.SendBatchResponse(result=res.result)
        n = check_batch_limits(cols)
        topics = topic_column(cols, n)
        qids = queue_id_column(cols, n)
        await self._check_sendable(cols, sorted(set(topics)))  # before any shard writes a part of the batch
        props = cols.properties
        if any(message_rules.SHARDING_KEY in p.entries for p in props):  # FIFO: the group's queue
            rows = [props[0].entries] * n if len(props) == 1 else [p.entries for p in props]
            wq = await self._write_queue_nums()
            message_rules.pick_fifo_queues(qids, topics, rows, lambda t: wq.get(t, self.default_queue_nums))
        auto = np.flatnonzero(qids == AUTO_QUEUE)
        if len(auto):
            wq = await self._write_queue_nums()
            for i in auto.tolist():
                t = topics[i]
                counter = self._rr.setdefault(t, itertools.count())
                qids[i] = next(counter) % wq.get(t, self.default_queue_nums)
        shard_of = np.array([self.router.shard_of(t, q) for t, q in zip(topics, qids.tolist())], np.int64)
        parts = [(s, np.flatnonzero(shard_of == s)) for s in np.unique(shard_of).tolist()]

        async def append(s: int, rows: np.ndarray):
            sub = _take_rows(cols, rows, n)
            sub.queue_ids[:] = qids[rows].tolist()
            return await self.shards[s].call(
                "cl", "AppendBatch", commitlog_pb2.AppendBatchRequest(messages=sub), timeout=60, retry=False
            )

        answers = await asyncio.gather(*(append(s, rows) for s, rows in parts), return_exceptions=True)
        return _merge_parts(n, qids, parts, answers)

    @rpc
    async def SendEncoded(self, raw: bytes, context) -> bytes:
        """Registered to receive and answer bytes (``_add_front``): only
        the small fields are read; the request bytes go to the shard as they came."""
        try:
            req = common_pb2.EncodedBatch.FromString(raw)
        except DecodeError as e:
            raise BadRequest(f"the request is not an EncodedBatch: {e}") from None
        self._allow_pub(context, req.topics)
        if req.shards != len(self.shards) or not 0 <= req.shard < len(self.shards):
            raise Precondition(
                f"the batch was routed to shard {req.shard} of {req.shards}; this deployment has "
                f"{len(self.shards)} shard(s): ask GetRoute again"
            )
        try:
            return await self.shards[req.shard].call("cl", "AppendEncoded", raw, timeout=60, retry=False, raw=True)
        except ShardUnreachable:
            context.set_trailing_metadata(((NOT_STORED_HEADER, "1"),))  # the client may send it again safely
            raise

    @rpc
    async def GetRoute(self, request: pb.GetRouteRequest, context) -> pb.GetRouteResponse:
        self._caller(context)  # any signed user

        async def prefix(s: ShardClient) -> str:
            if s.msg_id_prefix is None:
                try:
                    s.msg_id_prefix = (
                        await s.call("cl", "GetOffsets", commitlog_pb2.GetOffsetsRequest(), timeout=2, retry=False)
                    ).msg_id_prefix
                except Exception:  # noqa: BLE001 - a shard down is "" here; sends to it say UNAVAILABLE
                    return ""
            return s.msg_id_prefix

        prefixes = await self._fan_out(prefix)
        return pb.GetRouteResponse(
            shards=len(self.shards),
            write_queue_nums=await self._write_queue_nums(),
            default_queue_nums=self.default_queue_nums,
            msg_id_prefixes=prefixes,
        )

    # ------------------------------------------------------------------ topic configs (perm checks)

    _topic_perms: dict[str, int] | None = None  # topic -> perm, from ListTopics (no entry: no config)
    _topic_configs: dict[str, TopicConfig] = {}  # topic -> config, refreshed with _topic_perms
    topics_changed = 0  # CreateOrUpdateTopic calls served: caches of topic configs start again
    _topic_perms_at = 0.0  # loop time of the last refresh; CreateOrUpdateTopic drops the table

    async def _perms(self, shard: ShardClient) -> dict[str, int]:
        """Every topic's perm (no entry: the topic has no config, sends and pulls
        allowed), from a table at most 1 s old (ListTopics on ``shard``, where the call
        goes anyway; every shard holds every topic's config)."""
        now = asyncio.get_running_loop().time()
        if self._topic_perms is None or now - self._topic_perms_at > 1.0:
            res = await shard.call(
                "cl", "ListTopics", commitlog_pb2.ListTopicsRequest(), resolve_cap=SEND_RESOLVE_CAP_S
            )
            self._topic_perms, self._topic_perms_at = {c.topic: c.perm for c in res.configs}, now
            self._topic_configs = {c.topic: _topic_config(c) for c in res.configs}
        return self._topic_perms

    async def _check_sendable(self, cols, topics: list[str]) -> None:
        """What every shard would refuse of a split batch, checked once before any
        part is written, with the store's own checks (messages.check_client_batch):
        reserved topics, the topics' write perm, transaction bits, and the message rules
        (message_rules.check_batch: delivery and born times, groups, types, queue ids)."""
        check_send_topics(set(topics), (await self._any_shard(self._perms)).get)
        check_no_transaction(np.asarray(cols.sysflags, np.int64))
        message_rules.check_batch(columns_to_batch(cols), self._topic_configs.get, time.time_ns() // 1_000_000)

    async def _write_queue_nums(self) -> dict[str, int]:
        if self._write_queues is None:

            async def list_topics(s: ShardClient):
                return await s.call(
                    "cl", "ListTopics", commitlog_pb2.ListTopicsRequest(), resolve_cap=SEND_RESOLVE_CAP_S
                )

            res = await self._any_shard(list_topics)
            self._write_queues = {c.topic: c.write_queue_nums for c in res.configs}
        return self._write_queues

    async def _any_shard(self, fn: Callable[[ShardClient], Awaitable]):
        """fn on the first shard that answers, in shard order (for what every shard
        holds alike: topic configs): a shard that is down does not stop the others'
        sends. UNAVAILABLE naming every shard if none answers."""
        now = asyncio.get_running_loop().time()
        failures = []
        for s in sorted(self.shards, key=lambda s: self._down_until.get(s.shard, 0.0) > now):  # down ones last
            try:
                answer = await fn(s)
            except Exception as e:  # noqa: BLE001 - only a shard that can not be reached is skipped
                code, message = status_of(e)
                if code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    raise
                self._down_until[s.shard] = asyncio.get_running_loop().time() + 5.0
                failures.append(f"shard {s.shard}: {message}")
                continue
            self._down_until.pop(s.shard, None)
            return answer
        raise Unavailable("no shard answered: " + "; ".join(failures))

    # ------------------------------------------------------------------ pull

    @rpc
    async def Pull(self, raw: bytes, context) -> bytes:
        """Registered to receive and answer bytes (``_add_front``). A raw pull goes,
        as it came, to the shard's consume-queue builder, which answers it on the
        store's node (units and record bytes: services/index/local_pull.py), and its
        answer comes back as it came; a decoded pull is composed here (units from the
        builder, records from the commitlog)."""
        try:
            request = pb.PullRequest.FromString(raw)
        except DecodeError as e:
            raise BadRequest(f"the request is not a PullRequest: {e}") from None
        user = self._allow(context, (Action.SUB, TOPIC, request.topic))
        if user is not None and not user.admin:  # system topics hold every user's messages: admins only
            check_client_topics([request.topic], "pulling from")
        reads.check_queue(request.topic, request.queue_id)
        shard = self._shard(request.topic, request.queue_id)
        if request.raw:
            check_perm(request.topic, (await self._perms(shard)).get(request.topic), PERM_READ)
            return await shard.call("cq", "Pull", raw, raw=True)
        read = reads.pull(
            request.topic,
            request.queue_id,
            request.offset,
            max_count=request.max_messages or 32,
            tags=reads.parse_tag_expression(request.tag_expression),
        )
        return pull_answer_to_pb(await drive_async(read, self._ports(shard)), raw=False).SerializeToString()

    def _ports(self, shard: ShardClient) -> GrpcPorts:
        return GrpcPorts(shard, self._perms)

    # ------------------------------------------------------------------ queries

    @rpc
    async def QueryByMsgId(self, request: pb.QueryByMsgIdRequest, context) -> pb.QueryResponse:
        """Sub on the record's topic decides before anything of the record (or of its
        absence) shapes the answer: every miss is the same NOT_FOUND (reads.by_msg_id)."""
        user = self._caller(context)
        if not request.msg_id:
            raise BadRequest("msg_id is empty")
        host, offset = parse_offset_msg_id(request.msg_id)
        shard = await self._shard_by_prefix(offset_msg_id_prefix(host))

        def may_read(topic: str) -> bool:
            if user is None or self.acl.decide(user, Action.SUB, TOPIC, topic)[0]:
                return True
            log.info("acl_refused", peer=context.peer(), code="NOT_FOUND", user=user.access_key, msg_id=request.msg_id)
            return False

        rec = await self._by_msg_id(request.msg_id, offset, shard, may_read)
        return pb.QueryResponse(records=[rec])

    async def _by_msg_id(
        self, msg_id: str, offset: int, shard: ShardClient | None, may_read: Callable[[str], bool]
    ) -> common_pb2.Record:
        """The shard whose store host the msgId names is asked; a host that is none of
        ours (records written under another host name: a store taken over from a
        broker) is looked for on every shard, and must match the record's own msgId."""
        for s in [shard] if shard is not None else self.shards:
            try:
                return await drive_async(reads.by_msg_id(msg_id, offset, may_read), self._ports(s))
            except NotFoundError:
                continue
        raise reads.no_message()

    async def _shard_by_prefix(self, prefix: str) -> ShardClient | None:
        for refresh in (False, True):
            missing = [s for s in self.shards if s.msg_id_prefix is None or refresh]

            async def learn(s: ShardClient) -> None:
                s.msg_id_prefix = (await s.call("cl", "GetOffsets", commitlog_pb2.GetOffsetsRequest())).msg_id_prefix

            await asyncio.gather(*(learn(s) for s in missing))
            for s in self.shards:
                if s.msg_id_prefix == prefix:
                    return s
        return None

    @rpc
    async def QueryByUniqueKey(self, request: pb.QueryByUniqueKeyRequest, context) -> pb.QueryResponse:
        self._allow(context, (Action.SUB, TOPIC, request.topic))
        found = await self._by_key(request.topic, request.unique_key, 0, _LONG_MAX, request.max_num or 32, unique=True)
        return pb.QueryResponse(records=found)

    @rpc
    async def QueryByKey(self, request: pb.QueryByKeyRequest, context) -> pb.QueryResponse:
        self._allow(context, (Action.SUB, TOPIC, request.topic))
        found = await self._by_key(
            request.topic,
            request.key,
            request.begin_ms,
            request.end_ms or _LONG_MAX,
            request.max_num or 32,
            unique=False,
        )
        return pb.QueryResponse(records=found)

    async def _by_key(self, topic: str, key: str, begin: int, end: int, max_num: int, *, unique: bool) -> list:
        reads.check_key_query(topic, key, begin, end, max_num, "unique key" if unique else "key")
        parts = await self._fan_out(
            lambda s: drive_async(
                reads.by_key(topic, key, begin=begin, end=end, max_num=max_num, unique=unique), self._ports(s)
            )
        )
        return reads.newest_first(enumerate(parts), max_num, topic, key, unique=unique)

    @rpc
    async def QueryByOffset(self, request: pb.QueryByOffsetRequest, context) -> pb.QueryResponse:
        self._allow(context, (Action.SUB, TOPIC, request.topic))
        read = reads.by_queue_offset(request.topic, request.queue_id, request.offset)
        return pb.QueryResponse(
            records=[await drive_async(read, self._ports(self._shard(request.topic, request.queue_id)))]
        )

    @rpc
    async def GetOffsetByTime(self, request: pb.GetOffsetByTimeRequest, context) -> pb.GetOffsetByTimeResponse:
        self._allow(context, (Action.SUB, TOPIC, request.topic))
        read = reads.offset_at_time(request.topic, request.queue_id, request.timestamp_ms)
        return pb.GetOffsetByTimeResponse(
            offset=await drive_async(read, self._ports(self._shard(request.topic, request.queue_id)))
        )

    # ------------------------------------------------------------------ consumer offsets

    @rpc
    async def CommitOffset(self, request: pb.FrontCommitOffsetRequest, context) -> pb.FrontCommitOffsetResponse:
        self._allow(
            context, (Action.SUB, GROUP, request.group), (Action.SUB, TOPIC, request.topic)
        )  # admins: any group's offsets
        validate.group(request.group)
        topic = validate.topic(request.topic)
        qid = validate.queue_id(request.queue_id)
        await self._shard(topic, qid).call(
            "cq",
            "CommitOffset",
            consume_queue_pb2.CommitOffsetRequest(
                group=request.group, topic=topic, queue_id=qid, offset=request.offset
            ),
        )
        return pb.FrontCommitOffsetResponse()

    @rpc
    async def FetchOffset(self, request: pb.FrontFetchOffsetRequest, context) -> pb.FrontFetchOffsetResponse:
        self._allow(
            context, (Action.SUB, GROUP, request.group), (Action.SUB, TOPIC, request.topic)
        )  # admins: any group's offsets
        validate.group(request.group)
        topic = validate.topic(request.topic)
        qid = validate.queue_id(request.queue_id)
        r = await self._shard(topic, qid).call(
            "cq", "FetchOffset", consume_queue_pb2.FetchOffsetRequest(group=request.group, topic=topic, queue_id=qid)
        )
        return pb.FrontFetchOffsetResponse(offset=r.offset)

    @rpc
    async def ConsumerProgress(self, request: pb.ConsumerProgressRequest, context) -> pb.ConsumerProgressResponse:
        self._allow(context, (Action.SUB, GROUP, request.group))
        parts = await self._fan_out(lambda sh: drive_async(reads.consumer_progress(request.group), self._ports(sh)))
        return pb.ConsumerProgressResponse(rows=reads.merge_progress(parts))

    # ------------------------------------------------------------------ topics and status

    @rpc
    async def CreateOrUpdateTopic(
        self, request: pb.CreateOrUpdateTopicRequest, context
    ) -> pb.CreateOrUpdateTopicResponse:
        self._admin(context, "changing a topic")
        validate.topic(request.config.topic)
        if request.config.message_type:  # refused here once, not by every shard
            parse_message_type(request.config.message_type, request.config.topic)
        parts = await self._fan_out(
            lambda s: s.call("cl", "UpdateTopic", commitlog_pb2.UpdateTopicRequest(config=request.config))
        )
        cfg = parts[0].config
        self._topic_perms = None  # perms as of this change from the next send or pull on
        self.topics_changed += 1  # the RocketMQ port's route table too (services/rocketmq)
        if self._write_queues is not None:
            self._write_queues[cfg.topic] = cfg.write_queue_nums
        await self._make_queues_ahead(cfg.topic, max(cfg.read_queue_nums, cfg.write_queue_nums))
        return pb.CreateOrUpdateTopicResponse(config=cfg)

    async def _make_queues_ahead(self, topic: str, queue_nums: int) -> None:
        """Each shard's consume-queue builder makes the topic's queue files in the
        background; a failure only means the first message makes them (logged)."""

        def ask(s: ShardClient):
            held = [q for q in range(queue_nums) if self.router.shard_of(topic, q) == s.shard]
            return s.call("cq", "MakeQueues", consume_queue_pb2.MakeQueuesRequest(topic=topic, queue_ids=held))

        try:
            await self._fan_out(ask)
        except Exception as e:  # the topic is updated: the queues come with their first units
            log.warning("queues_not_made_ahead", topic=topic, error=str(e))

    @rpc
    async def TopicStatus(self, request: pb.TopicStatusRequest, context) -> pb.TopicStatusResponse:
        self._allow(context, (Action.SUB, TOPIC, request.topic))
        parts = await self._fan_out(lambda s: drive_async(reads.topic_status(request.topic, s.shard), self._ports(s)))
        return pb.TopicStatusResponse(
            queues=[
                common_pb2.QueueRange(
                    topic=q.topic,
                    queue_id=q.queue_id,
                    min_offset=q.min_offset,
                    max_offset=q.max_offset,
                    last_store_timestamp=q.last_store_timestamp,
                    shard=q.shard,
                )
                for q in reads.merge_topic_status(request.topic, parts)
            ]
        )

    async def shard_stats(self, timeout: float = 2.0) -> list[tuple[int, commitlog_pb2.GetStatsResponse | None]]:
        """Every shard's GetStats (None where the shard did not answer), in parallel."""

        async def one(s: ShardClient):
            try:
                return s.shard, await s.call(
                    "cl", "GetStats", commitlog_pb2.GetStatsRequest(), timeout=timeout, retry=False
                )
            except Exception:  # noqa: BLE001 - a report names what is missing instead of failing
                return s.shard, None

        return list(await asyncio.gather(*(one(s) for s in self.shards)))

    async def consumer_losses(self, timeout: float = 2.0) -> list[tuple[int, list[common_pb2.ConsumerLoss]]]:
        """Every shard's record of unread messages retention deleted (its consume-queue
        builder's GetProgress; none where it did not answer), in parallel."""

        async def one(s: ShardClient):
            try:
                ask = consume_queue_pb2.GetProgressRequest()
                p = await s.call("cq", "GetProgress", ask, timeout=timeout, retry=False)
                return s.shard, list(p.consumer_losses)
            except Exception:  # noqa: BLE001 - shard_up says what is missing
                return s.shard, []

        return list(await asyncio.gather(*(one(s) for s in self.shards)))

    def observe_rpc(self, method: str, seconds: float, code: str, response) -> None:
        """Called by ``@rpc`` after every call (see errors.rpc)."""
        m = self.metrics
        if m is None:
            return
        m.observe(method, seconds, code)
        if method == "SendBatch" and response is not None:
            ok = sum(1 for x in response.result.statuses if x == common_pb2.PUT_OK)
            if ok:
                m.sent_messages.inc(ok)
        elif method == "SendEncoded" and response is not None:
            answer = common_pb2.EncodedAppendResult.FromString(response)
            if answer.status == common_pb2.PUT_OK:
                m.sent_messages.inc(len(answer.physical_offsets) // 8)

    @rpc
    async def StoreStatus(self, request, context) -> pb.StoreStatusResponse:
        """Every shard at once, every part of a shard at once, each for at most
        ``STATUS_BUDGET_S`` (less if the client's deadline is nearer): a shard that is
        down, restarting or not placed is a row saying so, never a late answer."""
        self._caller(context)  # any signed user
        budget = deadline.budget(STATUS_BUDGET_S)
        return pb.StoreStatusResponse(shards=await self._fan_out(lambda s: self._shard_status(s, budget)))

    async def _shard_status(self, s: ShardClient, budget: float) -> pb.ShardStatus:
        """One shard's row: GetStats of its commitlog, GetProgress of its builders,
        its dispatcher's Status and where its processes are, all asked at once."""

        async def within(aw):
            return await asyncio.wait_for(aw, budget)

        asks = {"cl": within(s.call("cl", "GetStats", commitlog_pb2.GetStatsRequest(), timeout=budget, retry=False))}
        builders = [
            ("cq", "queue_builder", consume_queue_pb2.GetProgressRequest()),
            ("ix", "index_builder", index_pb2.IndexProgressRequest()),
        ]
        for service, _, req in builders:
            if service in s.services:
                asks[service] = within(s.call(service, "GetProgress", req, timeout=budget, retry=False))
        if s.has_dispatcher:
            asks["dp"] = within(s.dispatcher_status(timeout=budget))
        asks["where"] = s.placement(budget)
        answers = dict(zip(asks, await asyncio.gather(*asks.values(), return_exceptions=True)))
        where = answers.pop("where")
        where = {} if isinstance(where, BaseException) else where
        missing: list[str] = []  # "commitlog: why" for each part that did not answer

        def why(role: str, e: BaseException) -> str:
            text = f"no answer within {budget:.1f} s" if isinstance(e, TimeoutError) else status_of(e)[1]
            p = where.get(role)
            if p is not None and p.state != "ALIVE":
                text += f" ({p.describe()})"
            missing.append(f"{SERVICE_NAMES[role]}: {text}")
            return text

        st = pb.ShardStatus(shard=s.shard, state="UNAVAILABLE", reput_offset=-1)
        o = answers["cl"]
        if isinstance(o, BaseException):
            code = status_of(o)[0] if not isinstance(o, TimeoutError) else grpc.StatusCode.UNAVAILABLE
            why("cl", o)
        else:
            st.state, st.error, st.incarnation = o.state, o.error, o.incarnation
            st.recovery_phase, st.recovery_percent = o.recovery_phase, o.recovery_percent
            st.min_offset, st.wrote_offset, st.flushed_offset = o.min_offset, o.wrote_offset, o.flushed_offset
            st.confirm_offset, st.dispatched_offset = o.confirm_offset, o.dispatched_offset
            st.writable, st.unwritable_cause = o.writable, o.unwritable_cause
            st.queue_count, st.commitlog_bytes, st.disk_free_bytes = o.queue_count, o.commitlog_bytes, o.disk_free_bytes
            st.clean_shutdown, st.recovery_seconds = o.clean_shutdown, o.recovery_seconds
            st.appended_messages = o.appended_messages
            st.stopped_loops.extend(o.stopped_loops)
            st.write_refusals.CopyFrom(o.write_refusals)
            st.forced_deleted_segments, st.forced_deleted_bytes = o.forced_deleted_segments, o.forced_deleted_bytes
        st.endpoint = s.endpoint
        cl_place = where.get("cl")
        st.node_id = cl_place.node_id if cl_place is not None and cl_place.node_id else s.node_id
        for service, field, _ in builders:
            if service not in answers:
                continue
            p = answers[service]
            if isinstance(p, BaseException):
                p = common_pb2.BuilderProgress(state="UNAVAILABLE", error=why(service, p))
            getattr(st, field).CopyFrom(p)
            st.consumer_losses.extend(p.consumer_losses)  # the consume-queue builder keeps them
            if p.stopped_loops:  # the consume-queue builder's delay scheduler
                st.stopped_loops.extend(p.stopped_loops)
                st.error = "; ".join([st.error, *p.stopped_loops] if st.error else p.stopped_loops)
        d = answers.get("dp")
        if isinstance(d, BaseException):
            why("dp", d)
        elif d is not None:
            st.reput_offset, st.dispatch_lag_bytes = d.dispatched_offset, d.lag_bytes
            ix = st.index_builder
            if d.index_stuck and ix.state and not ix.stuck:  # behind, not advancing: the dispatcher says why
                ix.stuck, ix.stuck_since_ms = d.index_error or "behind the consume queues", d.index_behind_since_ms
        for name, b in (("consume-queue builder", st.queue_builder), ("index builder", st.index_builder)):
            if b.stuck:  # its writes fail (a full disk): named in the row, the shard is not healthy
                st.error = "; ".join(filter(None, [st.error, f"{name} stuck: {b.stuck}"]))
        if isinstance(o, BaseException):  # the row names the shard and every part that is missing
            st.error = f"{code.name}: shard {s.shard} did not answer: " + "; ".join(missing)
        elif missing:
            st.error = "; ".join([st.error, *missing] if st.error else missing)
        return st

    # ------------------------------------------------------------------ ACL administration (admins only)

    def _acl_admin(self, context, what: str) -> tuple[Acl, str]:
        if self.acl is None:
            raise Precondition("this front has no ACL (start it with serve --acl FILE)")
        return self.acl, self._admin(context, what).access_key

    @rpc
    async def ListUsers(self, request: pb.ListUsersRequest, context) -> pb.ListUsersResponse:
        acl, _ = self._acl_admin(context, "listing users")
        return pb.ListUsersResponse(users=[_user_pb(u) for u in acl.users])

    @rpc
    async def AddUser(self, request: pb.AddUserRequest, context) -> pb.AddUserResponse:
        acl, by = self._acl_admin(context, "adding a user")
        user = User(request.access_key, request.secret_key, admin=request.admin)
        replaced = await asyncio.to_thread(acl.add_user, user, replace=request.replace)
        log.info("acl_user_added", by=by, user=user.access_key, admin=user.admin, replaced=replaced)
        return pb.AddUserResponse(user=_user_pb(user), replaced=replaced)

    @rpc
    async def RemoveUser(self, request: pb.RemoveUserRequest, context) -> pb.RemoveUserResponse:
        acl, by = self._acl_admin(context, "removing a user")
        n = await asyncio.to_thread(acl.remove_user, request.access_key)
        log.info("acl_user_removed", by=by, user=request.access_key, rules_removed=n)
        return pb.RemoveUserResponse(rules_removed=n)

    @rpc
    async def ListRules(self, request: pb.ListRulesRequest, context) -> pb.ListRulesResponse:
        acl, _ = self._acl_admin(context, "listing rules")
        return pb.ListRulesResponse(rules=[_rule_pb(r) for r in acl.rules(request.user or None)])

    @rpc
    async def AddRule(self, request: pb.AddRuleRequest, context) -> pb.AddRuleResponse:
        acl, by = self._acl_admin(context, "adding a rule")
        r = request.rule
        rule = Rule.of(r.user, r.resource, r.actions, r.decision or "Allow")
        replaced = await asyncio.to_thread(acl.add_rule, rule)
        log.info("acl_rule_added", by=by, **rule.to_json(), replaced=replaced)
        return pb.AddRuleResponse(rule=_rule_pb(rule), replaced=replaced)

    @rpc
    async def RemoveRule(self, request: pb.RemoveRuleRequest, context) -> pb.RemoveRuleResponse:
        acl, by = self._acl_admin(context, "removing a rule")
        gone = await asyncio.to_thread(acl.remove_rule, request.user, request.resource, request.decision or None)
        log.info("acl_rule_removed", by=by, user=request.user, resource=request.resource, removed=len(gone))
        return pb.RemoveRuleResponse(rules=[_rule_pb(r) for r in gone])


class _Handlers:
    """Catches the method handlers a generated ``add_..._to_server`` registers."""

    def add_generic_rpc_handlers(self, handlers) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: dict) -> None:
        self.handlers = handlers


def _add_front(servicer: FrontServicer, server: grpc.aio.Server) -> None:
    """Register FrontService with SendEncoded and Pull taking and answering bytes
    (a request is forwarded as it came, the shard's answer as it came back)."""
    caught = _Handlers()
    front_pb2_grpc.add_FrontServiceServicer_to_server(servicer, caught)
    handlers = dict(caught.handlers)
    for method in ("SendEncoded", "Pull"):
        handlers[method] = grpc.unary_unary_rpc_method_handler(getattr(servicer, method))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_registered_method_handlers(SERVICE, handlers)


def _user_pb(u: User) -> pb.AclUser:
    return pb.AclUser(access_key=u.access_key, admin=u.admin)  # never the secret


def _rule_pb(r: Rule) -> pb.AclRule:
    return pb.AclRule(**r.to_json())


def _merge_parts(n: int, qids: np.ndarray, parts: list, answers: list) -> pb.SendBatchResponse:
    """One answer for a batch split over shards: ``parts`` [(shard, rows)] and each
    part's AppendBatchResponse or exception. Every message gets its own status:
    the shard's (PUT_OK, FLUSH_DISK_TIMEOUT), NOT_STORED (its shard was not reached
    or refused the part) or SHARD_FAILED (its shard's answer was lost: it may be
    stored); ``shard_errors`` says why per failed shard. A batch whose parts all
    failed with one status code fails as a whole with it (nothing was stored, or
    as with one shard, nothing is known to be), naming every shard."""
    failed: dict[int, tuple[grpc.StatusCode, str, bool]] = {}  # shard -> (code, message, surely not written)
    for (s, rows), a in zip(parts, answers):
        if not isinstance(a, BaseException) and len(a.result.statuses) != len(rows):
            a = RpcError(f"shard {s} answered {len(a.result.statuses)} statuses for {len(rows)} messages")
        if isinstance(a, BaseException):
            code, message = status_of(a)
            failed[s] = (code, message, isinstance(a, ShardUnreachable) or code in REFUSED_CODES)
    if len(failed) == len(parts):
        codes = {code for code, _, _ in failed.values()}
        if len(parts) == 1:
            raise next(a for a in answers if isinstance(a, BaseException))
        if len(codes) == 1:
            raise RpcError(
                "every shard of the batch failed: " + "; ".join(f"shard {s}: {m}" for s, (_, m, _) in failed.items()),
                codes.pop(),
            )
    out = _empty_result(n)
    for (s, rows), a in zip(parts, answers):
        if s in failed:
            status = common_pb2.NOT_STORED if failed[s][2] else common_pb2.SHARD_FAILED
            for i in rows.tolist():
                out.statuses[i], out.shards[i], out.queue_ids[i] = status, s, int(qids[i])
            continue
        r = a.result
        for j, i in enumerate(rows.tolist()):
            out.statuses[i], out.msg_ids[i], out.physical_offsets[i] = (
                r.statuses[j],
                r.msg_ids[j],
                r.physical_offsets[j],
            )
            out.sizes[i], out.queue_ids[i], out.queue_offsets[i] = r.sizes[j], r.queue_ids[j], r.queue_offsets[j]
            out.unique_keys[i], out.store_timestamps[i], out.shards[i] = r.unique_keys[j], r.store_timestamps[j], s
    errors = [
        pb.ShardError(shard=s, code=code.name, message=message) for s, (code, message, _) in sorted(failed.items())
    ]
    return pb.SendBatchResponse(result=out, shard_errors=errors)


def _empty_result(n: int) -> common_pb2.AppendResult:
    return common_pb2.AppendResult(
        statuses=[common_pb2.PUT_STATUS_UNSPECIFIED] * n,
        msg_ids=[""] * n,
        physical_offsets=[-1] * n,
        sizes=[0] * n,
        queue_ids=[0] * n,
        queue_offsets=[-1] * n,
        unique_keys=[""] * n,
        store_timestamps=[0] * n,
        shards=[0] * n,
    )


def _topic_config(c: common_pb2.TopicConfig) -> TopicConfig:
    """A ListTopics entry as the store's TopicConfig (what message_rules reads of it)."""
    attributes = {MESSAGE_TYPE_ATTRIBUTE: c.message_type} if c.message_type else {}
    return TopicConfig(
        topic_name=c.topic,
        read_queue_nums=c.read_queue_nums,
        write_queue_nums=c.write_queue_nums,
        perm=c.perm,
        attributes=attributes,
    )


def _take_rows(cols: common_pb2.MessageColumns, rows: np.ndarray, n: int) -> common_pb2.MessageColumns:
    """The columns of the messages at ``rows`` (broadcast columns stay broadcast)."""
    if len(cols.unique_keys) not in (0, n):
        raise BadRequest(f"column unique_keys has {len(cols.unique_keys)} values for {n} messages (give 0 or {n})")
    out = common_pb2.MessageColumns()
    picked = rows.tolist()
    for field in common_pb2.MessageColumns.DESCRIPTOR.fields:
        src = getattr(cols, field.name)
        if field.name == "queue_ids":
            out.queue_ids.extend([0] * len(picked))
            continue
        if len(src) == 0:
            continue
        dst = getattr(out, field.name)
        if len(src) == 1 and n != 1:
            dst.append(src[0])
        elif len(src) == n:
            dst.extend([src[i] for i in picked])
        else:
            raise BadRequest(f"column {field.name} has {len(src)} values for {n} messages (give 0, 1 or {n})")
    return out


__all__ = ["SERVICE", "FrontServicer", "ShardClient", "ShardUnreachable"]
