"""ConsumeQueueService (proto/mqstore/v1/consume_queue.proto), served by the
consume-queue builder's process (index/state.py): units in (from the dispatcher
over PutUnitsStream, or PutUnits; with the commitlog's min offset: files below it
go), units out by queue offset, queue ranges, lookups by time, consumer offsets,
pop consumption (index/pop_service.py), and the builder's progress."""

from __future__ import annotations

import numpy as np

from mqstore.formats.message import topic_names_of
from mqstore.formats.names import check_topic
from mqstore.rpc.v1 import common_pb2, consume_queue_pb2_grpc, front_pb2
from mqstore.rpc.v1 import consume_queue_pb2 as pb
from mqstore.services.common import validate
from mqstore.services.common.columns import INT32, INT64, unpack
from mqstore.services.common.errors import BadRequest, rpc
from mqstore.services.common.internal_streams import OpenStreams, answer_as_done, answer_in_order, stream_rpc
from mqstore.services.common.server import Registration
from mqstore.services.index.local_pull import LocalPulls
from mqstore.services.index.pop_service import Popper
from mqstore.services.index.state import BuilderState
from mqstore.services.index.topic_epochs import TopicEpochs
from mqstore.store.builders import QueueBuilder
from mqstore.store.dispatch import DispatchBatch
from mqstore.store.local_ports import queue_ranges, units_page
from mqstore.store.pop_progress import read_pop_progress

SERVICE = "mqstore.v1.ConsumeQueueService"
MAX_UNITS = 100_000


class ConsumeQueueServicer(consume_queue_pb2_grpc.ConsumeQueueServiceServicer):
    def __init__(self, state: BuilderState) -> None:
        self.state = state
        self._pulls = LocalPulls(state.store_dir)
        self.popper = Popper(state, self._pulls)
        self._epochs = TopicEpochs()  # the dispatchers' topic ids (PutUnits' topic_epoch)
        self.streams = OpenStreams()  # ended by the host when it stops

    def registration(self) -> Registration:
        return Registration(consume_queue_pb2_grpc.add_ConsumeQueueServiceServicer_to_server, self, SERVICE)

    @rpc
    async def PutUnits(self, request: pb.PutUnitsRequest, context) -> pb.PutUnitsResponse:
        return await self._put_units(request)

    async def PutUnitsStream(self, requests, context):
        """PutUnits over one stream (the dispatcher's): in order, each answered with
        its seq and the unary call's status (services/common/internal_streams.py)."""
        async with self.streams.held(context):
            async for answer in answer_in_order(requests, self._put_units, pb.PutUnitsResponse):
                yield answer

    async def _put_units(self, request: pb.PutUnitsRequest) -> pb.PutUnitsResponse:
        self.state.ready()
        self.state.check_incarnation(request.incarnation)
        batch = _dispatch_batch(request, self._epochs)
        await self.state.check_to_offset(request.to_offset, request.incarnation, request.to_offset_vouch)
        progress = await self.state.call(
            self.state.put, request.incarnation, batch, request.from_offset, request.to_offset
        )
        await self.state.clean_below(request.commitlog_min_offset, request.forced_deleted_to)
        self.popper.units_arrived()
        return pb.PutUnitsResponse(progress_offset=progress)

    @rpc
    async def Pop(self, request: pb.PopRequest, context) -> pb.PopResponse:
        return await self.popper.pop(request)

    @rpc
    async def AckPop(self, request: pb.AckPopRequest, context) -> pb.AckPopResponse:
        return await self.popper.ack(request)

    @rpc
    async def ChangeInvisible(self, request: pb.ChangeInvisibleRequest, context) -> pb.ChangeInvisibleResponse:
        return await self.popper.change(request)

    @rpc
    async def PopToDeadLetter(self, request: pb.PopToDeadLetterRequest, context) -> pb.PopToDeadLetterResponse:
        return await self.popper.to_dead_letter(request)

    @stream_rpc
    async def PopStream(self, requests, context):
        """AckPop, ChangeInvisible and PopToDeadLetter multiplexed on the front's
        stream (consume_queue.proto): each call answered once done, in any order."""
        async with self.streams.held(context):
            async for answer in answer_as_done(requests, self.popper.call, pb.PopAnswer, pb.PopStreamResponse):
                yield answer

    @rpc
    async def Pull(self, request: front_pb2.PullRequest, context) -> front_pb2.PullResponse:
        builder: QueueBuilder = self.state.ready()
        if not request.raw:
            raise BadRequest("the consume-queue builder answers raw pulls only; decoded pulls go through the front")
        view, low = self.state.view, self.state.commitlog_min_offset
        return await self.state.call(self._pulls.pull, builder, view, low, request)

    @rpc
    async def GetProgress(self, request, context) -> common_pb2.BuilderProgress:
        return self.state.progress()

    @rpc
    async def MakeQueues(self, request: pb.MakeQueuesRequest, context) -> pb.MakeQueuesResponse:
        builder: QueueBuilder = self.state.ready()
        validate.topic(request.topic)
        qids = sorted(set(request.queue_ids))
        for q in qids[:1] + qids[-1:]:
            validate.queue_id(q)
        made = await self.state.call(builder.consume_queues.make_ahead, request.topic, qids)
        return pb.MakeQueuesResponse(queues=made)

    @rpc
    async def GetUnits(self, request: pb.GetUnitsRequest, context) -> pb.GetUnitsResponse:
        builder: QueueBuilder = self.state.ready()
        validate.topic(request.topic)
        validate.queue_id(request.queue_id)
        validate.offset(request.offset)
        n = validate.count(request.max_units, default=32, high=MAX_UNITS, what="max_units")
        return await self.state.call(_get_units, builder, request.topic, request.queue_id, request.offset, n)

    @rpc
    async def MinMax(self, request: pb.MinMaxRequest, context) -> pb.MinMaxResponse:
        builder: QueueBuilder = self.state.ready()
        validate.topic(request.topic)
        for q in request.queue_ids:
            validate.queue_id(q)
        return await self.state.call(self._min_max, builder, request.topic, list(request.queue_ids))

    def _min_max(self, builder: QueueBuilder, topic: str, queue_ids: list[int]) -> pb.MinMaxResponse:
        return pb.MinMaxResponse(
            queues=[
                common_pb2.QueueRange(
                    topic=q.topic,
                    queue_id=q.queue_id,
                    min_offset=q.min_offset,
                    max_offset=q.max_offset,
                    last_physical_offset=q.last_physical_offset,
                    shard=self.state.shard,
                )
                for q in queue_ranges(builder.consume_queues, topic, queue_ids)
            ]
        )

    @rpc
    async def OffsetAtTime(self, request: pb.OffsetAtTimeRequest, context) -> pb.OffsetAtTimeResponse:
        builder: QueueBuilder = self.state.ready()
        validate.topic(request.topic)
        validate.queue_id(request.queue_id)
        off = await self.state.call(
            self._offset_at_time, builder, request.topic, request.queue_id, request.timestamp_ms
        )
        return pb.OffsetAtTimeResponse(offset=off)

    def _offset_at_time(self, builder: QueueBuilder, topic: str, queue_id: int, timestamp_ms: int) -> int:
        cq = builder.consume_queues.find(topic, queue_id)
        if cq is None:
            return 0
        view = self.state.view
        return cq.offset_at_time(timestamp_ms, view.store_times, commitlog_min_offset=view.min_offset)

    @rpc
    async def CommitOffset(self, request: pb.CommitOffsetRequest, context) -> pb.CommitOffsetResponse:
        builder: QueueBuilder = self.state.ready()
        validate.group(request.group)
        validate.topic(request.topic)
        validate.queue_id(request.queue_id)
        validate.offset(request.offset, "consumer offset")
        await self.state.call(builder.commit_offset, request.group, request.topic, request.queue_id, request.offset)
        return pb.CommitOffsetResponse()

    @rpc
    async def FetchOffset(self, request: pb.FetchOffsetRequest, context) -> pb.FetchOffsetResponse:
        builder: QueueBuilder = self.state.ready()
        validate.group(request.group)
        validate.topic(request.topic)
        validate.queue_id(request.queue_id)
        return pb.FetchOffsetResponse(
            offset=builder.consumer_offsets.fetch(request.group, request.topic, request.queue_id)
        )

    @rpc
    async def GroupOffsets(self, request: pb.GroupOffsetsRequest, context) -> pb.GroupOffsetsResponse:
        builder: QueueBuilder = self.state.ready()
        validate.group(request.group)
        rows = await self.state.call(builder.consumer_progress, request.group)

        def max_offset(topic: str, queue_id: int) -> int:
            cq = builder.consume_queues.find(topic, queue_id)
            return cq.max_offset if cq is not None else 0

        # A RocketMQ 5 group's progress is its pop cursors (read from the files, as --store reads them).
        pops = await self.state.call(read_pop_progress, self.state.store_dir, request.group, max_offset)
        return pb.GroupOffsetsResponse(
            offsets=[
                common_pb2.GroupOffset(
                    topic=r.topic,
                    queue_id=r.queue_id,
                    broker_offset=r.broker_offset,
                    consumer_offset=r.consumer_offset,
                    lag=r.lag,
                    shard=self.state.shard,
                )
                for r in rows
            ]
            + [
                common_pb2.GroupOffset(
                    topic=r.topic,
                    queue_id=r.queue_id,
                    broker_offset=r.broker_offset,
                    consumer_offset=r.consumer_offset,
                    lag=r.lag,
                    shard=self.state.shard,
                    pop=True,
                    in_flight=r.in_flight,
                )
                for r in pops
            ]
        )


def _get_units(builder: QueueBuilder, topic: str, qid: int, offset: int, n: int) -> pb.GetUnitsResponse:
    page = units_page(builder.consume_queues, topic, qid, offset, n)
    return pb.GetUnitsResponse(
        exists=page.exists,
        first_offset=page.first_offset,
        min_offset=page.min_offset,
        max_offset=page.max_offset,
        physical_offsets=page.physical_offsets.tolist(),
        sizes=page.sizes.tolist(),
        tags_codes=page.tags_codes.tolist(),
    )


# PutUnits' packed per-record columns and their wire types.
_UNIT_COLUMNS = {
    "topic_codes": INT32,
    "queue_ids": INT32,
    "queue_offsets": INT64,
    "physical_offsets": INT64,
    "sizes": INT32,
    "tags_codes": INT64,
    "store_timestamps": INT64,
    "sysflags": INT32,
}


# Names check_topic passed (a pure rule of the name): a dispatch chunk names the same
# thousands of topics again and again; a set lookup in C each, not a check in Python.
_CHECKED_TOPICS: set[str] = set()
_MAX_CHECKED_TOPICS = 1_000_000


def _check_topics(names: list[str]) -> None:
    if _CHECKED_TOPICS.issuperset(names):
        return
    new = set(names).difference(_CHECKED_TOPICS)
    for t in new:
        check_topic(t)
    if len(_CHECKED_TOPICS) > _MAX_CHECKED_TOPICS:
        _CHECKED_TOPICS.clear()
    _CHECKED_TOPICS.update(new)


def _dispatch_batch(r: pb.PutUnitsRequest, epochs: TopicEpochs | None = None) -> DispatchBatch:
    """The consume-queue columns of a DispatchBatch from a PutUnits request, checked
    (a bad batch must fail before any unit is written). With ``topic_epoch`` the
    topics come as the dispatcher's ids (topic_epochs.py); names it carries are
    checked and learnt first."""
    cols = {name: unpack(getattr(r, name), dtype, name) for name, dtype in _UNIT_COLUMNS.items()}
    n = validate.same_lengths(**cols)
    if r.to_offset < r.from_offset:
        raise BadRequest(f"to_offset {r.to_offset} is before from_offset {r.from_offset}")
    names = list(r.topics)  # once: each read of a repeated string field makes new str objects
    _check_topics(names)
    if r.topic_epoch:
        if epochs is None:
            raise BadRequest("topic_epoch is not taken here")
        epochs.learn(r.topic_epoch, unpack(r.named_ids, INT32, "named_ids"), names)
        ids = epochs.ours(r.topic_epoch, unpack(r.topic_ids, INT32, "topic_ids"))
        topics = topic_names_of(ids)  # the same str objects every chunk: a gather
    else:
        topics = names
    codes, qids, phys, sizes, qo = (
        cols[c] for c in ("topic_codes", "queue_ids", "physical_offsets", "sizes", "queue_offsets")
    )
    if n:
        if codes.min() < 0 or codes.max() >= len(topics):
            raise BadRequest(f"topic_codes must index the batch's topics (0..{len(topics) - 1})")
        if qids.min() < 0 or qids.max() > validate.MAX_QUEUE_ID:
            raise BadRequest("queue ids must be in 0..65535")
        if qo.min() < 0 or sizes.min() <= 0:
            raise BadRequest("queue offsets must be >= 0 and sizes > 0")
        if phys.min() < r.from_offset or (phys + sizes).max() > r.to_offset:
            raise BadRequest(f"units must point into [from_offset, to_offset) = [{r.from_offset}, {r.to_offset})")
    none = np.full(n, -1, np.int64)
    return DispatchBatch(
        physical_offsets=phys,
        sizes=sizes,
        topics=topics,
        topic_codes=codes,
        queue_ids=qids,
        queue_offsets=qo,
        sysflags=cols["sysflags"],
        store_timestamps=cols["store_timestamps"],
        tags_codes=cols["tags_codes"],
        buffer=b"",
        keys_at=none,
        keys_end=none,
        uniq_at=none,
        uniq_end=none,
        # (not the ids: their rows by id cost the served builder more than lookups of these
        # same names, whose hashes the str objects keep; measured at 10,000 topics round-robin)
    )


__all__ = ["SERVICE", "ConsumeQueueServicer"]
