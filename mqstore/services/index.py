"""IndexService: keys in (from the dispatcher), offsets out by topic#key and time
(proto/mqstore/v1/index.proto)."""

from __future__ import annotations

import numpy as np

from mqstore.rpc.v1 import index_pb2 as pb
from mqstore.rpc.v1 import index_pb2_grpc
from mqstore.services import validate
from mqstore.services.errors import Aborted, BadRequest, Precondition, rpc
from mqstore.services.server import Registration
from mqstore.services.shard import Shard
from mqstore.store.dispatch import IndexEntries

SERVICE = "mqstore.v1.IndexService"
MAX_QUERY = 64
_LONG_MAX = (1 << 63) - 1


class IndexServicer(index_pb2_grpc.IndexServiceServicer):
    def __init__(self, shard: Shard) -> None:
        self.shard = shard

    def registration(self) -> Registration:
        return Registration(index_pb2_grpc.add_IndexServiceServicer_to_server, self, SERVICE)

    @rpc
    async def PutKeys(self, request: pb.PutKeysRequest, context) -> pb.PutKeysResponse:
        store = self.shard.ready()
        if request.incarnation != self.shard.incarnation:
            raise Aborted(f"keys read from shard incarnation {request.incarnation}; the shard reopened "
                          f"(incarnation {self.shard.incarnation})")  # fmt: skip
        validate.same_lengths(key_hashes=request.key_hashes, physical_offsets=request.physical_offsets,
                              store_timestamps=request.store_timestamps)  # fmt: skip
        if request.to_offset < request.from_offset:
            raise BadRequest(f"to_offset {request.to_offset} is before from_offset {request.from_offset}")
        if request.to_offset > store.commitlog.wrote:
            raise BadRequest(f"to_offset {request.to_offset} is past the commitlog's write position {store.commitlog.wrote}")
        phys = np.asarray(request.physical_offsets, np.int64)
        if len(phys) and (phys.min() < request.from_offset or phys.max() >= request.to_offset):
            raise BadRequest(f"entries must point into [from_offset, to_offset) = [{request.from_offset}, {request.to_offset})")
        if request.from_offset > self.shard.index_progress:
            raise Precondition(f"keys from commitlog offset {request.from_offset}, but the index is complete only "
                               f"up to {self.shard.index_progress}: the batch would leave a gap")  # fmt: skip
        entries = IndexEntries(np.asarray(request.key_hashes, np.int64), phys,
                               np.asarray(request.store_timestamps, np.int64))  # fmt: skip
        indexed, skipped, progress = await self.shard.call(self.shard.put_keys, entries, request.to_offset)
        return pb.PutKeysResponse(indexed=indexed, skipped=skipped, progress_offset=progress)

    @rpc
    async def Query(self, request: pb.IndexQueryRequest, context) -> pb.IndexQueryResponse:
        store = self.shard.ready()
        validate.topic(request.topic)
        validate.key(request.key)
        n = validate.count(request.max_num, default=32, high=MAX_QUERY, what="max_num")
        if store.index is None:
            raise Precondition("the message index is disabled on this store (message_index_enable=False)")
        begin, end = request.begin_ms, request.end_ms or _LONG_MAX
        if begin < 0 or end < begin:
            raise BadRequest(f"time range [{begin}, {end}] is empty or negative")
        offsets = await self.shard.call(store.index.query, request.topic, request.key, n, begin, end)
        return pb.IndexQueryResponse(physical_offsets=offsets)


__all__ = ["SERVICE", "IndexServicer"]
