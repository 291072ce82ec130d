"""The delay scheduler (store/schedule.py) in the consume-queue builder's process.

It reads the delay topic's queues here, where they are built, and the commitlog over
gRPC: records over Read, its progress recovery over ReadRange (from the position
saved in config/delayOffset.json); it delivers through
CommitLogService.DeliverDelayed. So in steady state every call goes builder ->
commitlog, and the commitlog never calls a builder. In one process (MessageStore)
the same scheduler runs over the local parts instead.
"""

from __future__ import annotations

import grpc
import numpy as np

from mqstore.errors import CorruptFileError, InvalidMessageError, OffsetError
from mqstore.formats.message import scan_records
from mqstore.rpc.v1 import commitlog_pb2, common_pb2
from mqstore.services.common.convert import record_from_pb
from mqstore.services.index.commitlog_view import RemoteCommitLog
from mqstore.store.clock import SystemClock
from mqstore.store.commitlog import ScanChunk
from mqstore.store.config import StoreConfig
from mqstore.store.messages import MessageBatch

_SCAN_BYTES = 8 << 20


class RemoteLog:
    """The commitlog as ``DelayScheduler`` uses it (``read``, ``scan``, ``append``,
    ``wrote``, ``min_offset``), over one commitlog open's gRPC view. ``wrote`` is
    the confirm offset: what ReadRange hands out (under sync flush a delivery is
    answered once flushed, so it is below it)."""

    def __init__(self, view: RemoteCommitLog) -> None:
        self._view = view

    @property
    def wrote_offset(self) -> int:
        return self._view.offsets().confirm_offset

    @property
    def min_offset(self) -> int:
        return self._view.offsets().min_offset

    def read(self, offset: int):
        try:
            r = self._view.client.read(commitlog_pb2.ReadRequest(offsets=[offset]), timeout=30)
        except grpc.RpcError as e:
            if e.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
                raise OffsetError(e.details()) from None
            raise
        return record_from_pb(r.records[0])

    def scan(self, offset: int) -> ScanChunk:
        """The records of one ReadRange from ``offset`` (a record start), decoded."""
        req = commitlog_pb2.ReadRangeRequest(offset=offset, max_bytes=_SCAN_BYTES, wait_ms=0)
        try:
            r = self._view.client.read_range(req, timeout=60)
        except grpc.RpcError as e:
            if e.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.DATA_LOSS):
                raise CorruptFileError(f"no record starts at commitlog offset {offset}: {e.details()}") from None
            raise
        data = r.data
        res = scan_records(data, 0, len(data), check_crc=False, base_offset=r.offset, fields=True)
        return ScanChunk(res.positions + r.offset, res.sizes, res.fields, data, r.next_offset)

    def append(self, batch: MessageBatch) -> None:
        try:
            self._view.client.deliver_delayed(delivery_columns(batch))
        except grpc.RpcError as e:
            if e.code() is grpc.StatusCode.INVALID_ARGUMENT:  # a record the commitlog can not take: skipped
                raise InvalidMessageError(e.details()) from None
            raise


class SchedulerStore:
    """What ``DelayScheduler`` asks of its store, in the consume-queue builder's
    process: the store directory (delayOffset.json), the config, the local consume
    queues and the remote commitlog."""

    def __init__(self, store_dir, config: StoreConfig, consume_queues, view: RemoteCommitLog) -> None:
        self.store_dir = store_dir
        self.config = config
        self.consume_queues = consume_queues
        self.commitlog = RemoteLog(view)
        self._clock = SystemClock()


def delivery_columns(batch: MessageBatch) -> common_pb2.MessageColumns:
    """The columns of a scheduler's delivery batch (every field a list, as
    ``DelayScheduler`` builds it)."""
    return common_pb2.MessageColumns(
        topics=list(batch.topics),
        bodies=list(batch.bodies),
        queue_ids=[int(q) for q in batch.queue_ids],
        tags=[t or "" for t in batch.tags],
        keys=[k or "" for k in batch.keys],
        unique_keys=[u or "" for u in batch.unique_keys],
        properties=[common_pb2.Properties(entries=p) for p in batch.properties],
        flags=[int(f) for f in batch.flags],
        sysflags=[int(f) for f in batch.sysflags],
        born_timestamps=[int(t) for t in np.asarray(batch.born_timestamps, np.int64)],
        born_hosts=[str(h) for h in batch.born_hosts],
        reconsume_times=[int(r) for r in batch.reconsume_times],
    )


__all__ = ["RemoteLog", "SchedulerStore", "delivery_columns"]
