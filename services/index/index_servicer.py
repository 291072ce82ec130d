"""IndexService: keys in (from the dispatcher, over PutKeysStream or PutKeys),
offsets out by topic#key and time, the builder's progress
(proto/mqstore/v1/index.proto). Served by the index builder's process (index/state.py).

PutKeys may repeat keys the builder has (a resume below its progress): the store
core puts each (key hash, record) pair once. Query answers each offset once, and
``max_num`` counts offsets (messages), not index entries."""

from __future__ import annotations

from mqstore.rpc.v1 import common_pb2, index_pb2_grpc
from mqstore.rpc.v1 import index_pb2 as pb
from mqstore.services.common import validate
from mqstore.services.common.columns import INT64, unpack
from mqstore.services.common.errors import BadRequest, rpc
from mqstore.services.common.internal_streams import OpenStreams, answer_in_order
from mqstore.services.common.server import Registration
from mqstore.services.index.state import BuilderState
from mqstore.store.dispatch import IndexEntries

SERVICE = "mqstore.v1.IndexService"
MAX_QUERY = 64
_LONG_MAX = (1 << 63) - 1


class IndexServicer(index_pb2_grpc.IndexServiceServicer):
    def __init__(self, state: BuilderState) -> None:
        self.state = state
        self.streams = OpenStreams()  # ended by the host when it stops

    def registration(self) -> Registration:
        return Registration(index_pb2_grpc.add_IndexServiceServicer_to_server, self, SERVICE)

    @rpc
    async def PutKeys(self, request: pb.PutKeysRequest, context) -> pb.PutKeysResponse:
        return await self._put_keys(request)

    async def PutKeysStream(self, requests, context):
        """PutKeys over one stream (the dispatcher's): in order, each answered with
        its seq and the unary call's status (services/common/internal_streams.py)."""
        async with self.streams.held(context):
            async for answer in answer_in_order(requests, self._put_keys, pb.PutKeysResponse):
                yield answer

    async def _put_keys(self, request: pb.PutKeysRequest) -> pb.PutKeysResponse:
        self.state.ready()
        self.state.check_incarnation(request.incarnation)
        hashes, phys, times = (
            unpack(request.key_hashes, INT64, "key_hashes"),
            unpack(request.physical_offsets, INT64, "physical_offsets"),
            unpack(request.store_timestamps, INT64, "store_timestamps"),
        )
        validate.same_lengths(key_hashes=hashes, physical_offsets=phys, store_timestamps=times)
        if request.to_offset < request.from_offset:
            raise BadRequest(f"to_offset {request.to_offset} is before from_offset {request.from_offset}")
        await self.state.check_to_offset(request.to_offset, request.incarnation, request.to_offset_vouch)
        if len(phys) and (phys.min() < request.from_offset or phys.max() >= request.to_offset):
            raise BadRequest(
                f"entries must point into [from_offset, to_offset) = [{request.from_offset}, {request.to_offset})"
            )
        entries = IndexEntries(hashes, phys, times)
        indexed, skipped, progress = await self.state.call(
            self.state.put, request.incarnation, entries, request.from_offset, request.to_offset
        )
        await self.state.clean_below(request.commitlog_min_offset)
        return pb.PutKeysResponse(indexed=indexed, skipped=skipped, progress_offset=progress)

    @rpc
    async def Query(self, request: pb.IndexQueryRequest, context) -> pb.IndexQueryResponse:
        builder = self.state.ready()
        validate.topic(request.topic)
        validate.key(request.key)
        n = validate.count(request.max_num, default=32, high=MAX_QUERY, what="max_num")
        begin, end = request.begin_ms, request.end_ms or _LONG_MAX
        if begin < 0 or end < begin:
            raise BadRequest(f"time range [{begin}, {end}] is empty or negative")
        offsets = await self.state.call(builder.index.query, request.topic, request.key, n, begin, end)
        return pb.IndexQueryResponse(physical_offsets=offsets)

    @rpc
    async def GetProgress(self, request, context) -> common_pb2.BuilderProgress:
        return self.state.progress()


__all__ = ["SERVICE", "IndexServicer"]
