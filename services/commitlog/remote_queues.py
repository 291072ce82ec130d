"""``RemoteQueues``: the delay scheduler's ``consume_queues.find`` (store/schedule.py)
in the commitlog's process, over ConsumeQueueService.GetUnits of the builder."""

from __future__ import annotations

import time

import grpc
import numpy as np

from mqstore.formats.consume_queue import UNIT_DTYPE
from mqstore.rpc.v1 import consume_queue_pb2, consume_queue_pb2_grpc
from mqstore.services.common.internal_auth import InternalAuth
from mqstore.services.common.peers import Peer, PeerUnavailable, Resolver


class _RemoteQueue:
    def __init__(self, peer: Peer, topic: str, queue_id: int, min_offset: int) -> None:
        self._peer, self.topic, self.queue_id, self.min_offset = peer, topic, queue_id, min_offset

    def read_units(self, start: int, n: int) -> np.ndarray:
        try:
            r = self._peer.call(
                "GetUnits",
                consume_queue_pb2.GetUnitsRequest(topic=self.topic, queue_id=self.queue_id, offset=start, max_units=n),
            )
        except (grpc.RpcError, PeerUnavailable):  # the builder restarts: nothing due until it is back
            return np.zeros(0, UNIT_DTYPE)
        if r.first_offset != start:  # retention moved the queue's start: the caller asks again from there
            self.min_offset = r.min_offset
            return np.zeros(0, UNIT_DTYPE)
        units = np.zeros(len(r.physical_offsets), UNIT_DTYPE)
        units["commitlog_offset"], units["size"], units["tags_code"] = r.physical_offsets, r.sizes, r.tags_codes
        return units


class RemoteQueues:
    """``find(topic, queue_id)`` over ConsumeQueueService (the delay scheduler's reads,
    18 levels ten times a second): the queues of a topic are listed with one MinMax
    call at most every ``LIST_S``, so a level without a queue costs no call."""

    LIST_S = 1.0

    def __init__(self, resolve: Resolver, auth: InternalAuth) -> None:
        self._peer = Peer(resolve, consume_queue_pb2_grpc.ConsumeQueueServiceStub, auth, resolve_s=2.0)
        self._listed: dict[str, tuple[float, dict[int, int]]] = {}  # topic -> (when, queue id -> min offset)

    def find(self, topic: str, queue_id: int) -> _RemoteQueue | None:
        when, queues = self._listed.get(topic, (-1e18, {}))
        if time.monotonic() - when >= self.LIST_S:
            try:
                r = self._peer.call("MinMax", consume_queue_pb2.MinMaxRequest(topic=topic), timeout=10)
            except (grpc.RpcError, PeerUnavailable):  # the builder (re)starts or stops: nothing due now, asked again
                return None
            queues = {q.queue_id: q.min_offset for q in r.queues}
            self._listed[topic] = (time.monotonic(), queues)
        if queue_id not in queues:
            return None
        return _RemoteQueue(self._peer, topic, queue_id, queues[queue_id])

    def close(self) -> None:
        """Every later call finds nothing (the commitlog is closing)."""
        self._peer.reset(close=True)


__all__ = ["RemoteQueues"]
