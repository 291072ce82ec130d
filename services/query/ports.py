"""The reads' ports (store/reads.py ShardPorts) of one shard over gRPC, for the front:
the same questions ``LocalPorts`` answers from files, asked of the shard's
consume-queue builder (units, ranges, offset by time, consumer progress), commitlog
(records, perms) and index builder (keys). Records stay ``Record`` messages; the
front hands them on as they came. A Read the commitlog refuses for what lies at an
offset becomes the store's own error with a text that quotes none of it
(``unreadable``): a read's caller may have chosen the offset (reads.by_msg_id)."""

from __future__ import annotations

from collections.abc import Sequence

import grpc
import numpy as np

from mqstore.errors import CorruptFileError, DecodeError, NotFoundError
from mqstore.formats.packed import RawRecords
from mqstore.rpc.v1 import commitlog_pb2, consume_queue_pb2, index_pb2
from mqstore.services.common.shard_clients import Shard
from mqstore.services.common.shard_set import TopicTable
from mqstore.store.reads import QueueRange, UnitsPage


class GrpcPorts:
    """reads.ShardPorts (as coroutines) of the shard ``shard`` (a shard_clients.Shard);
    ``topics``: the front's topic table (perms; asked of this shard first)."""

    def __init__(self, shard: Shard, topics: TopicTable) -> None:
        self.shard = shard
        self._topics = topics

    async def perm(self, topic: str) -> int | None:
        return (await self._topics.get(self.shard)).perm(topic)

    async def units(self, topic: str, queue_id: int, offset: int, max_units: int) -> UnitsPage:
        u = await self.shard.queues.get_units(
            consume_queue_pb2.GetUnitsRequest(topic=topic, queue_id=queue_id, offset=offset, max_units=max_units)
        )
        return UnitsPage(
            u.exists,
            u.first_offset,
            u.min_offset,
            u.max_offset,
            np.asarray(u.physical_offsets, np.int64),
            np.asarray(u.sizes, np.int64),
            np.asarray(u.tags_codes, np.int64),
        )

    async def ranges(self, topic: str) -> list[QueueRange]:
        mm = await self.shard.queues.min_max(topic)
        return [QueueRange(q.topic, q.queue_id, q.min_offset, q.max_offset, q.last_physical_offset) for q in mm.queues]

    async def read(self, offsets: np.ndarray, sizes: np.ndarray | None, raw: bool) -> tuple[np.ndarray, Sequence]:
        try:
            rd = await self.shard.commitlog.read(
                commitlog_pb2.ReadRequest(
                    offsets=offsets.tolist(), raw=raw, skip_missing=True, sizes=[] if sizes is None else sizes.tolist()
                )
            )
        except grpc.aio.AioRpcError as e:
            raise unreadable(e, self.shard.shard) from None
        return np.asarray(rd.offsets, np.int64), RawRecords.from_wire(rd.raw_data, rd.raw_sizes) if raw else list(
            rd.records
        )

    async def keys(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[int]:
        q = await self.shard.index.query(
            index_pb2.IndexQueryRequest(topic=topic, key=key, begin_ms=begin, end_ms=end, max_num=max_num)
        )
        return list(q.physical_offsets)

    async def offset_at_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        r = await self.shard.queues.offset_at_time(
            consume_queue_pb2.OffsetAtTimeRequest(topic=topic, queue_id=queue_id, timestamp_ms=timestamp_ms)
        )
        return r.offset

    async def progress(self, group: str) -> list:
        r = await self.shard.queues.group_offsets(group)
        return list(r.offsets)


_UNREADABLE = {
    grpc.StatusCode.INVALID_ARGUMENT: DecodeError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.DATA_LOSS: CorruptFileError,
}


def unreadable(e: grpc.aio.AioRpcError, shard: int) -> Exception:
    """A refused Read as the store's error, without the commitlog's words (which may
    quote the bytes or the record found at an offset); other failures as they are."""
    kind = _UNREADABLE.get(e.code())
    if kind is None:
        return e
    return kind(f"shard {shard}: no record could be read at a commitlog offset asked")


__all__ = ["GrpcPorts", "unreadable"]
