"""FrontService: mqstore's public API (proto/mqstore/v1/front.proto), an adapter over
the front's ``ShardSet`` (services/common/shard_set.py: routing, fan-out, the topic
table) and its typed shard clients (shard_clients.py), as in the architecture: pull =
ConsumeQueue.GetUnits -> CommitLog.Read; query by key = Index.Query on every shard ->
CommitLog.Read -> check topic, key and time; send = CommitLog.AppendBatch per shard,
in parallel. RocketMQ's API (services/rocketmq/messaging.py) is a sibling adapter over
the same shard set.

Beside this module: ``merge.py`` (a batch split over shards and its one answer),
``shard_status.py`` (StoreStatus rows, the metrics' stats), ``acl_rpcs.py`` (who may
call, and the ACL administration), ``ports.py`` (the reads' ports over gRPC).

A shard that stops answering is resolved again on the next call (a restarted actor
listens on a new port). Reads are retried once after UNAVAILABLE; sends are not (an
append whose answer was lost may have been stored: the client decides).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable

import grpc
import numpy as np
import structlog
from google.protobuf.message import DecodeError

from mqstore.errors import NotFoundError
from mqstore.formats.msgid import offset_msg_id_prefix, parse_offset_msg_id
from mqstore.rpc.v1 import common_pb2, consume_queue_pb2, front_pb2_grpc
from mqstore.rpc.v1 import front_pb2 as pb
from mqstore.services.common import deadline, validate
from mqstore.services.common.convert import (
    check_batch_limits,
    columns_to_batch,
    pull_answer_to_pb,
    queue_id_column,
    topic_column,
)
from mqstore.services.common.errors import BadRequest, Precondition, rpc
from mqstore.services.common.headers import NOT_STORED_HEADER
from mqstore.services.common.server import Registration
from mqstore.services.common.shard_clients import Shard, ShardUnreachable
from mqstore.services.common.shard_set import ShardSet, Topics
from mqstore.services.query import shard_status
from mqstore.services.query.acl import GROUP, TOPIC, Action
from mqstore.services.query.acl_rpcs import AclRpcs
from mqstore.services.query.merge import merge_parts, take_rows
from mqstore.services.query.ports import GrpcPorts
from mqstore.store import message_rules, reads
from mqstore.store.messages import AUTO_QUEUE, check_no_transaction, check_send_topics
from mqstore.store.reads import drive_async
from mqstore.store.system_topics import check_client_topics
from mqstore.store.topic_configs import PERM_READ, check_perm, parse_message_type

log = structlog.get_logger(__name__)
SERVICE = "mqstore.v1.FrontService"
_LONG_MAX = (1 << 63) - 1
STATUS_BUDGET_S = shard_status.STATUS_BUDGET_S
_merge_parts = merge_parts  # the name tests and older callers use


class FrontServicer(AclRpcs, front_pb2_grpc.FrontServiceServicer):
    """See the module docstring. ``shards``: the front's ShardSet (its
    ``default_queue_nums``: write queues of topics without a config). ``metrics``: a
    ``FrontMetrics`` that observes every call (``observe_rpc``). ``acl``: an acl.Acl, or
    None: anonymous."""

    def __init__(self, shards: ShardSet, *, metrics=None, acl=None) -> None:
        self.shards = shards
        self.acl = acl
        self.metrics = metrics  # a metrics.FrontMetrics, or None
        self._rr: dict[str, itertools.count] = {}

    @property
    def router(self) -> ShardSet:
        """The shard rule (``router.shard_of``): the shard set's."""
        return self.shards

    @property
    def default_queue_nums(self) -> int:
        return self.shards.default_queue_nums

    def registration(self) -> Registration:
        return Registration(_add_front, self, SERVICE)

    async def close(self) -> None:
        await self.shards.close()

    # ------------------------------------------------------------------ send

    @rpc
    async def SendBatch(self, request: pb.SendBatchRequest, context) -> pb.SendBatchResponse:
        self._allow_pub(context, request.messages.topics)
        cols = request.messages
        if len(self.shards) == 1:  # the shard checks everything and picks queues itself
            res = await self.shards[0].commitlog.append_batch(cols)
            return pb.SendBatchResponse(result=res.result)
        n = check_batch_limits(cols)
        topics = topic_column(cols, n)
        qids = queue_id_column(cols, n)
        table = await self.shards.topics.get()
        self._check_sendable(cols, sorted(set(topics)), table)  # before any shard writes a part of the batch
        props = cols.properties
        if any(message_rules.SHARDING_KEY in p.entries for p in props):  # FIFO: the group's queue
            rows = [props[0].entries] * n if len(props) == 1 else [p.entries for p in props]
            message_rules.pick_fifo_queues(qids, topics, rows, table.write_queues)
        for i in np.flatnonzero(qids == AUTO_QUEUE).tolist():
            t = topics[i]
            counter = self._rr.setdefault(t, itertools.count())
            qids[i] = next(counter) % table.write_queues(t)
        parts = self.shards.parts(self.shards.shards_of(topics, qids))

        async def append(s: int, rows: np.ndarray):
            sub = take_rows(cols, rows, n)
            sub.queue_ids[:] = qids[rows].tolist()
            return await self.shards[s].commitlog.append_batch(sub)

        answers = await asyncio.gather(*(append(s, rows) for s, rows in parts), return_exceptions=True)
        return merge_parts(n, qids, parts, answers)

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
            return await self.shards[req.shard].commitlog.append_encoded(raw)
        except ShardUnreachable:
            context.set_trailing_metadata(((NOT_STORED_HEADER, "1"),))  # the client may send it again safely
            raise

    @rpc
    async def GetRoute(self, request: pb.GetRouteRequest, context) -> pb.GetRouteResponse:
        self._caller(context)  # any signed user
        prefixes = await self.shards.prefixes()
        return pb.GetRouteResponse(
            shards=len(self.shards),
            write_queue_nums=(await self.shards.topics.get()).write_queue_nums(),
            default_queue_nums=self.default_queue_nums,
            msg_id_prefixes=prefixes,
        )

    @staticmethod
    def _check_sendable(cols, topics: list[str], table: Topics) -> None:
        """What every shard would refuse of a split batch, checked once before any
        part is written, with the store's own checks (messages.check_client_batch):
        reserved topics, the topics' write perm, transaction bits, and the message rules
        (message_rules.check_batch: delivery and born times, groups, types, queue ids)."""
        check_send_topics(set(topics), table.perm)
        check_no_transaction(np.asarray(cols.sysflags, np.int64))
        message_rules.check_batch(columns_to_batch(cols), table.config, time.time_ns() // 1_000_000)

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
        shard = self.shards.of(request.topic, request.queue_id)
        if request.raw:
            check_perm(request.topic, (await self.shards.topics.get(shard)).perm(request.topic), PERM_READ)
            return await shard.queues.pull_raw(raw)
        read = reads.pull(
            request.topic,
            request.queue_id,
            request.offset,
            max_count=request.max_messages or 32,
            tags=reads.parse_tag_expression(request.tag_expression),
        )
        return pull_answer_to_pb(await drive_async(read, self._ports(shard)), raw=False).SerializeToString()

    def _ports(self, shard: Shard) -> GrpcPorts:
        return GrpcPorts(shard, self.shards.topics)

    # ------------------------------------------------------------------ queries

    @rpc
    async def QueryByMsgId(self, request: pb.QueryByMsgIdRequest, context) -> pb.QueryResponse:
        """Sub on the record's topic decides before anything of the record (or of its
        absence) shapes the answer: every miss is the same NOT_FOUND (reads.by_msg_id)."""
        user = self._caller(context)
        if not request.msg_id:
            raise BadRequest("msg_id is empty")
        host, offset = parse_offset_msg_id(request.msg_id)
        shard = await self.shards.by_prefix(offset_msg_id_prefix(host))

        def may_read(topic: str) -> bool:
            if user is None or self.acl.decide(user, Action.SUB, TOPIC, topic)[0]:
                return True
            log.info("acl_refused", peer=context.peer(), code="NOT_FOUND", user=user.access_key, msg_id=request.msg_id)
            return False

        rec = await self._by_msg_id(request.msg_id, offset, shard, may_read)
        return pb.QueryResponse(records=[rec])

    async def _by_msg_id(
        self, msg_id: str, offset: int, shard: Shard | None, may_read: Callable[[str], bool]
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
        parts = await self.shards.fan_out(
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
            records=[await drive_async(read, self._ports(self.shards.of(request.topic, request.queue_id)))]
        )

    @rpc
    async def GetOffsetByTime(self, request: pb.GetOffsetByTimeRequest, context) -> pb.GetOffsetByTimeResponse:
        self._allow(context, (Action.SUB, TOPIC, request.topic))
        read = reads.offset_at_time(request.topic, request.queue_id, request.timestamp_ms)
        return pb.GetOffsetByTimeResponse(
            offset=await drive_async(read, self._ports(self.shards.of(request.topic, request.queue_id)))
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
        await self.shards.of(topic, qid).queues.commit_offset(
            consume_queue_pb2.CommitOffsetRequest(group=request.group, topic=topic, queue_id=qid, offset=request.offset)
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
        r = await self.shards.of(topic, qid).queues.fetch_offset(
            consume_queue_pb2.FetchOffsetRequest(group=request.group, topic=topic, queue_id=qid)
        )
        return pb.FrontFetchOffsetResponse(offset=r.offset)

    @rpc
    async def ConsumerProgress(self, request: pb.ConsumerProgressRequest, context) -> pb.ConsumerProgressResponse:
        self._allow(context, (Action.SUB, GROUP, request.group))
        parts = await self.shards.fan_out(
            lambda sh: drive_async(reads.consumer_progress(request.group), self._ports(sh))
        )
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
        parts = await self.shards.fan_out(lambda s: s.commitlog.update_topic(request.config))
        cfg = parts[0].config
        self.shards.topics.changed()  # both APIs see this change from their next call on
        await self._make_queues_ahead(cfg.topic, max(cfg.read_queue_nums, cfg.write_queue_nums))
        return pb.CreateOrUpdateTopicResponse(config=cfg)

    async def _make_queues_ahead(self, topic: str, queue_nums: int) -> None:
        """Each shard's consume-queue builder makes the topic's queue files in the
        background; a failure only means the first message makes them (logged)."""
        held = self.shards.queues_by_shard(topic, queue_nums)
        try:
            await self.shards.fan_out(lambda s: s.queues.make_queues(topic, held.get(s.shard, [])))
        except Exception as e:  # the topic is updated: the queues come with their first units
            log.warning("queues_not_made_ahead", topic=topic, error=str(e))

    @rpc
    async def TopicStatus(self, request: pb.TopicStatusRequest, context) -> pb.TopicStatusResponse:
        self._allow(context, (Action.SUB, TOPIC, request.topic))
        parts = await self.shards.fan_out(
            lambda s: drive_async(reads.topic_status(request.topic, s.shard), self._ports(s))
        )
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

    async def shard_stats(self, timeout: float = 2.0) -> list:
        """Every shard's GetStats (None where the shard did not answer), in parallel."""
        return await shard_status.shard_stats(self.shards, timeout)

    async def consumer_losses(self, timeout: float = 2.0) -> list:
        """Every shard's record of unread messages retention deleted, in parallel."""
        return await shard_status.consumer_losses(self.shards, timeout)

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
        return pb.StoreStatusResponse(shards=await self.shards.fan_out(lambda s: shard_status.shard_status(s, budget)))


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
    handlers["SendEncoded"] = grpc.unary_unary_rpc_method_handler(servicer.SendEncoded)
    handlers["Pull"] = grpc.unary_unary_rpc_method_handler(servicer.Pull)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_registered_method_handlers(SERVICE, handlers)


__all__ = ["SERVICE", "FrontServicer", "ShardUnreachable"]
