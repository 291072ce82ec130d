"""FrontService: the public API (proto/mqstore/v1/front.proto), routing every topic
queue to its shard (routing.py) and composing the shard services, as in the
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
from collections.abc import Awaitable, Callable

import grpc
import numpy as np
import structlog

from mqstore.formats.javahash import tags_code
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
from mqstore.services import deadline, validate
from mqstore.services.acl import GROUP, TOPIC, Acl, Action, Rule, User
from mqstore.services.convert import check_batch_limits, queue_id_column, topic_column
from mqstore.services.errors import (BadRequest, NotFound, PermissionDenied, Precondition, Unauthenticated, Unavailable, rpc,
                                     status_of)  # fmt: skip
from mqstore.services.internal_auth import InternalAuth
from mqstore.services.routing import Router
from mqstore.services.server import Registration, channel
from mqstore.store.config_files import PERM_READ, check_perm
from mqstore.store.messages import AUTO_QUEUE, check_no_transaction, check_send_topics

log = structlog.get_logger(__name__)
SERVICE = "mqstore.v1.FrontService"
PRE_BLANK_SIZE = 0x7FFFFFFF
MAX_PULL = 10_000
MAX_QUERY = 64
_LONG_MAX = (1 << 63) - 1
Resolver = Callable[[], Awaitable[str]]
RESOLVE_CAP_S = 10.0  # a shard's actor not found again within this: UNAVAILABLE (the client retries)
SERVICE_NAMES = {"cl": "commitlog", "cq": "consume-queue builder", "ix": "index builder"}


def parse_tag_expression(expr: str) -> set[str] | None:
    """RocketMQ's tag expression ``TagA || TagB``; "" or "*" = every tag (None)."""
    if expr.strip() in ("", "*"):
        return None
    tags = {t.strip() for t in expr.split("||")}
    if "" in tags:
        raise BadRequest(f"bad tag expression {expr!r}: use 'TagA || TagB'")
    return tags


class ShardClient:
    """Stubs of one shard's services (its commitlog, consume-queue builder, index
    builder and dispatcher, each a process of its own), re-resolved after
    UNAVAILABLE. ``resolvers``: "cl", "cq", "ix" -> resolver (no "ix": index disabled)."""

    _STUBS = {"cl": commitlog_pb2_grpc.CommitLogServiceStub, "cq": consume_queue_pb2_grpc.ConsumeQueueServiceStub,
              "ix": index_pb2_grpc.IndexServiceStub}  # fmt: skip

    def __init__(self, index: int, resolvers: dict[str, Resolver], resolve_dispatcher: Resolver | None = None, *,
                 auth: InternalAuth) -> None:  # fmt: skip
        self.index = index
        self._resolvers = resolvers
        self._resolve_dispatcher = resolve_dispatcher
        self._auth = auth
        self.endpoint = ""
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs_by: dict[str, object] = {}
        self._resolving: dict[str, asyncio.Future] = {}
        self._dchannel: grpc.aio.Channel | None = None
        self.msg_id_prefix: str | None = None

    @property
    def services(self) -> set[str]:
        return set(self._resolvers)

    async def _stub(self, service: str, cap: float = RESOLVE_CAP_S):
        """The stub of ``service``, resolving its endpoint first if needed: one
        resolution at a time per service, shared by every call waiting for it, each
        waiting at most its own budget (an actor that restarts answers UNAVAILABLE)."""
        while service not in self._channels:
            if service not in self._resolvers:
                raise Precondition(f"the message index is disabled on shard {self.index} (message_index_enable=False)")
            pending = self._resolving.get(service)
            if pending is None:
                pending = self._resolving[service] = asyncio.ensure_future(self._resolvers[service]())
                pending.add_done_callback(lambda f, s=service: self._resolved(s, f))
            wait_s = deadline.budget(cap)
            try:
                await asyncio.wait_for(asyncio.shield(pending), wait_s)
            except TimeoutError as e:
                raise Unavailable(f"shard {self.index} can not be reached: its {SERVICE_NAMES[service]} "
                                  "did not come back in time") from e  # fmt: skip
            except Exception as e:  # noqa: BLE001 - a dead or unknown actor: the caller may retry later
                raise Unavailable(f"shard {self.index} can not be reached: {type(e).__name__}: {e}") from e
        return self._stubs_by[service]

    def _resolved(self, service: str, f: asyncio.Future) -> None:
        self._resolving.pop(service, None)
        if f.cancelled() or f.exception() is not None or service in self._channels:
            return
        endpoint = f.result()
        if service == "cl":
            self.endpoint = endpoint
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

    async def call(self, service: str, method: str, request, *, timeout: float = 30.0, retry: bool = True):
        """``service`` is "cl", "cq" or "ix". The call and the endpoint resolution
        take at most ``timeout`` and what is left of the client's deadline."""
        for attempt in (0, 1):
            stub = await self._stub(service)
            try:
                return await getattr(stub, method)(request, timeout=deadline.budget(timeout))
            except grpc.aio.AioRpcError as e:
                if e.code() is not grpc.StatusCode.UNAVAILABLE:
                    raise
                await self.reset(service, failed=stub)
                if not retry or attempt:
                    raise
                await asyncio.sleep(0.2)
        raise AssertionError("unreachable")

    async def dispatcher_status(self) -> dispatcher_pb2.DispatcherStatusResponse | None:
        if self._resolve_dispatcher is None:
            return None
        if self._dchannel is None:
            self._dchannel = channel(await asyncio.wait_for(self._resolve_dispatcher(), 10), self._auth)
        try:
            return await dispatcher_pb2_grpc.DispatcherServiceStub(self._dchannel).Status(
                dispatcher_pb2.DispatcherStatusRequest(), timeout=5)  # fmt: skip
        except grpc.aio.AioRpcError:
            ch, self._dchannel = self._dchannel, None
            await ch.close()
            raise

    async def close(self) -> None:
        await self.reset()
        if self._dchannel is not None:
            await self._dchannel.close()
            self._dchannel = None


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

    def registration(self) -> Registration:
        return Registration(front_pb2_grpc.add_FrontServiceServicer_to_server, self, SERVICE)

    async def close(self) -> None:
        for s in self.shards:
            await s.close()

    def _shard(self, topic: str, queue_id: int) -> ShardClient:
        return self.shards[self.router.shard_of(topic, queue_id)]

    async def _fan_out(self, fn: Callable[[ShardClient], Awaitable]) -> list:
        """fn on every shard at once; the first failure is raised."""
        return list(await asyncio.gather(*(fn(s) for s in self.shards)))

    # ------------------------------------------------------------------ users and permissions (acl.py)

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

    def _admin(self, context, what: str) -> User | None:
        user = self._caller(context)
        if user is not None and not user.admin:
            log.info("acl_refused", peer=context.peer(), code="PERMISSION_DENIED", user=user.access_key, what=what)
            self.acl.require_admin(user, what)
        return user

    # ------------------------------------------------------------------ send

    @rpc
    async def SendBatch(self, request: pb.SendBatchRequest, context) -> pb.SendBatchResponse:
        self._allow(context, *((Action.PUB, TOPIC, t) for t in dict.fromkeys(request.messages.topics)))
        cols = request.messages
        if len(self.shards) == 1:  # the shard checks everything and picks queues itself
            res = await self.shards[0].call("cl", "AppendBatch", commitlog_pb2.AppendBatchRequest(messages=cols),
                                            timeout=60, retry=False)  # fmt: skip
            return pb.SendBatchResponse(result=res.result)
        n = check_batch_limits(cols)
        topics = topic_column(cols, n)
        qids = queue_id_column(cols, n)
        await self._check_sendable(cols, sorted(set(topics)))  # before any shard writes a part of the batch
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
            return await self.shards[s].call("cl", "AppendBatch", commitlog_pb2.AppendBatchRequest(messages=sub),
                                             timeout=60, retry=False)  # fmt: skip

        answers = await asyncio.gather(*(append(s, rows) for s, rows in parts), return_exceptions=True)
        failed = [(s, a) for (s, _), a in zip(parts, answers) if isinstance(a, BaseException)]
        if len(failed) == len(parts):
            raise failed[0][1]
        out = _empty_result(n)
        for (s, rows), a in zip(parts, answers):
            if isinstance(a, BaseException):
                for i in rows.tolist():
                    out.statuses[i], out.shards[i], out.queue_ids[i] = common_pb2.SHARD_FAILED, s, int(qids[i])
                continue
            r = a.result
            for j, i in enumerate(rows.tolist()):
                out.statuses[i], out.msg_ids[i], out.physical_offsets[i] = r.statuses[j], r.msg_ids[j], r.physical_offsets[j]
                out.sizes[i], out.queue_ids[i], out.queue_offsets[i] = r.sizes[j], r.queue_ids[j], r.queue_offsets[j]
                out.unique_keys[i], out.store_timestamps[i], out.shards[i] = r.unique_keys[j], r.store_timestamps[j], s
        errors = []
        for s, e in failed:
            code, message = status_of(e)
            errors.append(pb.ShardError(shard=s, code=code.name, message=message))
        return pb.SendBatchResponse(result=out, shard_errors=errors)

    # ------------------------------------------------------------------ topic configs (perm checks)

    _topic_perms: dict[str, int] | None = None  # topic -> perm, from ListTopics (no entry: no config)
    _topic_perms_at = 0.0  # loop time of the last refresh; CreateOrUpdateTopic drops the table

    async def _perms(self, shard: ShardClient) -> dict[str, int]:
        """Every topic's perm (no entry: the topic has no config, sends and pulls
        allowed), from a table at most 1 s old (ListTopics on ``shard``, where the call
        goes anyway; every shard holds every topic's config)."""
        now = asyncio.get_running_loop().time()
        if self._topic_perms is None or now - self._topic_perms_at > 1.0:
            res = await shard.call("cl", "ListTopics", commitlog_pb2.ListTopicsRequest())
            self._topic_perms, self._topic_perms_at = {c.topic: c.perm for c in res.configs}, now
        return self._topic_perms

    async def _check_sendable(self, cols, topics: list[str]) -> None:
        """What every shard would refuse of a split batch, checked once before any
        part is written, with the store's own checks (messages.check_client_batch):
        reserved topics, the topics' write perm, transaction bits."""
        check_send_topics(set(topics), (await self._perms(self.shards[0])).get)
        check_no_transaction(np.asarray(cols.sysflags, np.int64))

    async def _write_queue_nums(self) -> dict[str, int]:
        if self._write_queues is None:
            res = await self.shards[0].call("cl", "ListTopics", commitlog_pb2.ListTopicsRequest())
            self._write_queues = {c.topic: c.write_queue_nums for c in res.configs}
        return self._write_queues

    # ------------------------------------------------------------------ pull

    @rpc
    async def Pull(self, request: pb.PullRequest, context) -> pb.PullResponse:
        self._allow(context, (Action.SUB, TOPIC, request.topic))
        topic = validate.topic(request.topic)
        qid = validate.queue_id(request.queue_id)
        offset = validate.offset(request.offset)
        want = validate.count(request.max_messages, default=32, high=MAX_PULL, what="max_messages")
        tags = parse_tag_expression(request.tag_expression)
        codes = None if tags is None else np.array(sorted({tags_code(t) for t in tags}), np.int64)
        shard = self._shard(topic, qid)
        check_perm(topic, (await self._perms(shard)).get(topic), PERM_READ)  # TopicPermissionError: PERMISSION_DENIED
        per_read = want if tags is None else min(max(want * 4, 256), 100_000)
        budget = max(per_read, 4096)  # units a filtered pull may pass over before it answers NO_MATCHED_MESSAGE
        out = pb.PullResponse()
        scanned = 0
        pos = offset
        while True:
            u = await shard.call("cq", "GetUnits", consume_queue_pb2.GetUnitsRequest(
                topic=topic, queue_id=qid, offset=pos, max_units=per_read))  # fmt: skip
            out.min_offset, out.max_offset = u.min_offset, u.max_offset
            if not u.exists:
                out.status, out.next_offset = pb.NO_MESSAGE_IN_QUEUE, 0
                return out
            if pos < u.min_offset:
                out.status, out.next_offset = pb.OFFSET_TOO_SMALL, u.min_offset
                return out
            if pos >= u.max_offset:
                out.status = pb.NO_NEW_MESSAGE if pos == u.max_offset else pb.OFFSET_OVERFLOW
                out.next_offset = u.max_offset
                if scanned:  # a filtered pull that passed over units first
                    out.status = pb.NO_MATCHED_MESSAGE if not _found(out) else pb.FOUND
                return out
            phys = np.asarray(u.physical_offsets, np.int64)
            sizes = np.asarray(u.sizes, np.int64)
            keep = sizes != PRE_BLANK_SIZE
            if codes is not None:
                keep &= np.isin(np.asarray(u.tags_codes, np.int64), codes)
            idx = np.flatnonzero(keep)
            got = len(out.records) + len(out.raw_records)
            taken_to = len(phys)  # units consumed by this round (all, unless the pull fills up)
            if len(idx):
                rd = await shard.call("cl", "Read", commitlog_pb2.ReadRequest(
                    offsets=phys[idx].tolist(), raw=request.raw, skip_missing=True,
                    sizes=sizes[idx].tolist() if request.raw else []))  # fmt: skip
                unit_of = dict(zip(phys[idx].tolist(), idx.tolist()))
                if request.raw:
                    for off, raw in zip(rd.offsets, rd.raw_records):
                        out.raw_records.append(raw)
                        got += 1
                        if got >= want:  # full: the next pull starts after this message
                            taken_to = unit_of[off] + 1
                            break
                else:
                    for off, rec in zip(rd.offsets, rd.records):
                        if tags is not None and rec.tags not in tags:
                            continue
                        out.records.append(rec)
                        got += 1
                        if got >= want:
                            taken_to = unit_of[off] + 1
                            break
            pos = u.first_offset + taken_to
            scanned += taken_to
            if got >= want or tags is None or scanned >= budget or pos >= u.max_offset:
                out.next_offset = pos
                out.status = pb.FOUND if got else pb.NO_MATCHED_MESSAGE
                return out

    # ------------------------------------------------------------------ queries

    @rpc
    async def QueryByMsgId(self, request: pb.QueryByMsgIdRequest, context) -> pb.QueryResponse:
        user = self._caller(context)
        if not request.msg_id:
            raise BadRequest("msg_id is empty")
        host, offset = parse_offset_msg_id(request.msg_id)
        prefix = offset_msg_id_prefix(host)
        shard = await self._shard_by_prefix(prefix)
        if shard is None:
            raise NotFound(f"msgId {request.msg_id} names store host {host}, which is no shard of this deployment")
        rd = await shard.call("cl", "Read", commitlog_pb2.ReadRequest(offsets=[offset]))
        if user is not None and not all(self.acl.decide(user, Action.SUB, TOPIC, r.topic)[0] for r in rd.records):
            log.info("acl_refused", peer=context.peer(), code="PERMISSION_DENIED", user=user.access_key, msg_id=request.msg_id)
            raise PermissionDenied(f"user {user.access_key!r} may not Sub on the topic of message {request.msg_id}")
        return pb.QueryResponse(records=rd.records)

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
        topic = validate.topic(request.topic)
        key = validate.key(request.unique_key, "unique_key")
        n = validate.count(request.max_num, default=32, high=MAX_QUERY, what="max_num")
        found = await self._query_index(topic, key, 0, _LONG_MAX, n, lambda r: r.unique_key == key)
        if not found:
            raise NotFound(f"no message of {topic!r} has UNIQ_KEY {key!r}")
        return pb.QueryResponse(records=found)

    @rpc
    async def QueryByKey(self, request: pb.QueryByKeyRequest, context) -> pb.QueryResponse:
        self._allow(context, (Action.SUB, TOPIC, request.topic))
        topic = validate.topic(request.topic)
        key = validate.key(request.key)
        n = validate.count(request.max_num, default=32, high=MAX_QUERY, what="max_num")
        begin, end = request.begin_ms, request.end_ms or _LONG_MAX
        if begin < 0 or end < begin:
            raise BadRequest(f"time range [{begin}, {end}] is empty or negative")
        found = await self._query_index(topic, key, begin, end, n, lambda r: key in r.keys.split(" "))
        if not found:
            raise NotFound(f"no message of {topic!r} has key {key!r} in that time range")
        return pb.QueryResponse(records=found)

    async def _query_index(self, topic, key, begin, end, max_num, matches) -> list[common_pb2.Record]:
        async def one(s: ShardClient) -> list[common_pb2.Record]:
            q = await s.call("ix", "Query", index_pb2.IndexQueryRequest(topic=topic, key=key, begin_ms=begin,
                                                                        end_ms=end, max_num=max_num))  # fmt: skip
            offsets = list(q.physical_offsets)  # each message once (the index counts messages, not entries)
            if not offsets:
                return []
            rd = await s.call("cl", "Read", commitlog_pb2.ReadRequest(offsets=offsets, skip_missing=True))
            # index hashes can collide: check what the records really hold
            return [r for r in rd.records if r.topic == topic and matches(r) and begin <= r.store_timestamp <= end]

        found = [r for part in await self._fan_out(one) for r in part]
        found.sort(key=lambda r: (r.store_timestamp, r.shard, r.physical_offset), reverse=True)
        return found[:max_num]

    @rpc
    async def QueryByOffset(self, request: pb.QueryByOffsetRequest, context) -> pb.QueryResponse:
        self._allow(context, (Action.SUB, TOPIC, request.topic))
        topic = validate.topic(request.topic)
        qid = validate.queue_id(request.queue_id)
        offset = validate.offset(request.offset)
        shard = self._shard(topic, qid)
        u = await shard.call("cq", "GetUnits", consume_queue_pb2.GetUnitsRequest(topic=topic, queue_id=qid,
                                                                                offset=offset, max_units=1))  # fmt: skip
        if not u.exists or not u.min_offset <= offset < u.max_offset or not u.physical_offsets:
            raise NotFound(f"{topic}:{qid} has no message at queue offset {offset} "
                           f"(it holds [{u.min_offset}, {u.max_offset}))")  # fmt: skip
        if u.sizes[0] == PRE_BLANK_SIZE:
            raise NotFound(f"{topic}:{qid} has no message at queue offset {offset} (a pre-blank unit)")
        rd = await shard.call("cl", "Read", commitlog_pb2.ReadRequest(offsets=[u.physical_offsets[0]]))
        return pb.QueryResponse(records=rd.records)

    @rpc
    async def GetOffsetByTime(self, request: pb.GetOffsetByTimeRequest, context) -> pb.GetOffsetByTimeResponse:
        self._allow(context, (Action.SUB, TOPIC, request.topic))
        topic = validate.topic(request.topic)
        qid = validate.queue_id(request.queue_id)
        r = await self._shard(topic, qid).call("cq", "OffsetAtTime", consume_queue_pb2.OffsetAtTimeRequest(
            topic=topic, queue_id=qid, timestamp_ms=request.timestamp_ms))  # fmt: skip
        return pb.GetOffsetByTimeResponse(offset=r.offset)

    # ------------------------------------------------------------------ consumer offsets

    @rpc
    async def CommitOffset(self, request: pb.FrontCommitOffsetRequest, context) -> pb.FrontCommitOffsetResponse:
        self._allow(context, (Action.SUB, GROUP, request.group), (Action.SUB, TOPIC, request.topic))  # admins: any group's offsets
        validate.group(request.group)
        topic = validate.topic(request.topic)
        qid = validate.queue_id(request.queue_id)
        await self._shard(topic, qid).call("cq", "CommitOffset", consume_queue_pb2.CommitOffsetRequest(
            group=request.group, topic=topic, queue_id=qid, offset=request.offset))  # fmt: skip
        return pb.FrontCommitOffsetResponse()

    @rpc
    async def FetchOffset(self, request: pb.FrontFetchOffsetRequest, context) -> pb.FrontFetchOffsetResponse:
        self._allow(context, (Action.SUB, GROUP, request.group), (Action.SUB, TOPIC, request.topic))  # admins: any group's offsets
        validate.group(request.group)
        topic = validate.topic(request.topic)
        qid = validate.queue_id(request.queue_id)
        r = await self._shard(topic, qid).call("cq", "FetchOffset", consume_queue_pb2.FetchOffsetRequest(
            group=request.group, topic=topic, queue_id=qid))  # fmt: skip
        return pb.FrontFetchOffsetResponse(offset=r.offset)

    @rpc
    async def ConsumerProgress(self, request: pb.ConsumerProgressRequest, context) -> pb.ConsumerProgressResponse:
        self._allow(context, (Action.SUB, GROUP, request.group))
        validate.group(request.group)
        parts = await self._fan_out(lambda s: s.call("cq", "GroupOffsets",
                                                     consume_queue_pb2.GroupOffsetsRequest(group=request.group)))  # fmt: skip
        rows = sorted((r for p in parts for r in p.offsets), key=lambda r: (r.topic, r.queue_id))
        return pb.ConsumerProgressResponse(rows=rows)

    # ------------------------------------------------------------------ topics and status

    @rpc
    async def CreateOrUpdateTopic(self, request: pb.CreateOrUpdateTopicRequest, context) -> pb.CreateOrUpdateTopicResponse:
        self._admin(context, "changing a topic")
        validate.topic(request.config.topic)
        parts = await self._fan_out(lambda s: s.call("cl", "UpdateTopic",
                                                     commitlog_pb2.UpdateTopicRequest(config=request.config)))  # fmt: skip
        cfg = parts[0].config
        self._topic_perms = None  # perms as of this change from the next send or pull on
        if self._write_queues is not None:
            self._write_queues[cfg.topic] = cfg.write_queue_nums
        return pb.CreateOrUpdateTopicResponse(config=cfg)

    @rpc
    async def TopicStatus(self, request: pb.TopicStatusRequest, context) -> pb.TopicStatusResponse:
        self._allow(context, (Action.SUB, TOPIC, request.topic))
        topic = validate.topic(request.topic)

        async def one(s: ShardClient) -> list[common_pb2.QueueRange]:
            mm = await s.call("cq", "MinMax", consume_queue_pb2.MinMaxRequest(topic=topic))
            queues = list(mm.queues)
            last = [q.last_physical_offset for q in queues if q.last_physical_offset >= 0]
            if last:
                rd = await s.call("cl", "Read", commitlog_pb2.ReadRequest(offsets=last, skip_missing=True))
                ts = {r.physical_offset: r.store_timestamp for r in rd.records}
                for q in queues:
                    q.last_store_timestamp = ts.get(q.last_physical_offset, 0)
            return queues

        queues = sorted((q for part in await self._fan_out(one) for q in part), key=lambda q: q.queue_id)
        if not queues:
            raise NotFound(f"topic {topic!r} has no queues")
        return pb.TopicStatusResponse(queues=queues)

    async def shard_stats(self, timeout: float = 5.0) -> list[tuple[int, commitlog_pb2.GetStatsResponse | None]]:
        """Every shard's GetStats (None where the shard did not answer), in parallel."""

        async def one(s: ShardClient):
            try:
                return s.index, await s.call("cl", "GetStats", commitlog_pb2.GetStatsRequest(), timeout=timeout, retry=False)
            except Exception:  # noqa: BLE001 - a report names what is missing instead of failing
                return s.index, None

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

    @rpc
    async def StoreStatus(self, request, context) -> pb.StoreStatusResponse:
        self._caller(context)  # any signed user
        async def one(s: ShardClient) -> pb.ShardStatus:
            st = pb.ShardStatus(shard=s.index, state="UNAVAILABLE", reput_offset=-1)
            try:
                o = await s.call("cl", "GetStats", commitlog_pb2.GetStatsRequest(), timeout=5, retry=False)
            except Exception as e:  # noqa: BLE001 - a status report names what failed instead of failing
                code, message = status_of(e)
                st.error = f"{code.name}: {message}"
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
            st.endpoint = s.endpoint
            for service, field, request in (("cq", "queue_builder", consume_queue_pb2.GetProgressRequest()),
                                            ("ix", "index_builder", index_pb2.IndexProgressRequest())):  # fmt: skip
                if service not in s.services:
                    continue
                try:
                    getattr(st, field).CopyFrom(await s.call(service, "GetProgress", request, timeout=5, retry=False))
                except Exception as e:  # noqa: BLE001 - reported in the row
                    getattr(st, field).CopyFrom(common_pb2.BuilderProgress(state="UNAVAILABLE", error=status_of(e)[1]))
            try:
                d = await s.dispatcher_status()
                if d is not None:
                    st.reput_offset, st.dispatch_lag_bytes = d.reput_offset, d.lag_bytes
            except Exception as e:  # noqa: BLE001
                st.error = (st.error + "; " if st.error else "") + f"dispatcher: {status_of(e)[1]}"
            return st

        return pb.StoreStatusResponse(shards=await self._fan_out(one))

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


def _user_pb(u: User) -> pb.AclUser:
    return pb.AclUser(access_key=u.access_key, admin=u.admin)  # never the secret


def _rule_pb(r: Rule) -> pb.AclRule:
    return pb.AclRule(**r.to_json())


def _found(out: pb.PullResponse) -> bool:
    return bool(out.records or out.raw_records)


def _empty_result(n: int) -> common_pb2.AppendResult:
    return common_pb2.AppendResult(
        statuses=[common_pb2.PUT_STATUS_UNSPECIFIED] * n, msg_ids=[""] * n, physical_offsets=[-1] * n,
        sizes=[0] * n, queue_ids=[0] * n, queue_offsets=[-1] * n, unique_keys=[""] * n,
        store_timestamps=[0] * n, shards=[0] * n,
    )  # fmt: skip


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


__all__ = ["SERVICE", "FrontServicer", "ShardClient", "parse_tag_expression"]
