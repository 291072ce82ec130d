"""Blocking clients of the internal services, shaped like the store objects the core
code expects, for components that run in another process:

  RemoteCommitLog   a builder's ``CommitLogView`` (builders.py): GetRecovery facts,
                    ``units_match`` over CheckUnits, store times over Read
  RemoteQueues      the delay scheduler's ``consume_queues.find`` (schedule.py) in the
                    commitlog's process, over ConsumeQueueService.GetUnits

Each resolves its peer's endpoint with an async resolver (run on a private loop in
a thread of its own, at most ``RESOLVE_S``: these are called from plain threads,
and a peer that is gone for good must not hold up a close) and resolves again
after UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable

import grpc
import numpy as np

from mqstore.rpc.v1 import commitlog_pb2, commitlog_pb2_grpc, consume_queue_pb2, consume_queue_pb2_grpc
from mqstore.services.internal_auth import InternalAuth
from mqstore.services.server import sync_channel
from mqstore.store.builders import Recovered
from mqstore.formats.consume_queue import UNIT_DTYPE

Resolver = Callable[[], Awaitable[str]]
CHECK_CHUNK = 100_000  # units per CheckUnits call (the server takes at most 200,000)
RESOLVE_S = 10.0


class PeerUnavailable(ConnectionError):
    """The peer's endpoint could not be resolved in time (its actor restarts or is gone)."""


def resolve_within(resolve: Resolver, timeout_s: float = RESOLVE_S) -> str:
    """Run the async resolver to completion in a daemon thread, at most ``timeout_s``."""
    box: dict = {}

    def run() -> None:
        try:
            box["endpoint"] = asyncio.run(resolve())
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            box["error"] = e

    t = threading.Thread(target=run, name="mqstore-resolve", daemon=True)
    t.start()
    t.join(timeout_s)
    if "endpoint" in box:
        return box["endpoint"]
    why = f"{type(box['error']).__name__}: {box['error']}" if "error" in box else f"not resolved within {timeout_s:.0f} s"
    raise PeerUnavailable(why)


class _Peer:
    """A stub of one peer service. After the peer could not be resolved, calls fail
    at once for ``backoff_s`` (a caller polling many things must not wait on each)."""

    def __init__(self, resolve: Resolver, stub_class, auth: InternalAuth, *, resolve_s: float = RESOLVE_S,
                 backoff_s: float = 1.0) -> None:  # fmt: skip
        self._resolve = resolve
        self._auth = auth
        self._stub_class = stub_class
        self._resolve_s = resolve_s
        self._backoff_s = backoff_s
        self._down_until = 0.0
        self._closed = False
        self._channel: grpc.Channel | None = None
        self._lock = threading.Lock()

    def stub(self):
        with self._lock:
            if self._closed:
                raise PeerUnavailable("closed")
            if self._channel is None:
                if time.monotonic() < self._down_until:
                    raise PeerUnavailable("not resolved a moment ago")
                try:
                    self._channel = sync_channel(resolve_within(self._resolve, self._resolve_s), auth=self._auth)
                except PeerUnavailable:
                    self._down_until = time.monotonic() + self._backoff_s
                    raise
                self._stub = self._stub_class(self._channel)
            return self._stub

    def call(self, method: str, request, timeout: float = 30.0):
        try:
            return getattr(self.stub(), method)(request, timeout=timeout)
        except grpc.RpcError as e:
            if e.code() is grpc.StatusCode.UNAVAILABLE:
                self.reset()
            raise
        except ValueError as e:  # the channel was closed under the call (a reopen, a close)
            raise PeerUnavailable(str(e)) from e

    def reset(self, *, close: bool = False) -> None:
        with self._lock:
            ch, self._channel = self._channel, None
            self._closed |= close
        if ch is not None:
            ch.close()


class RemoteCommitLog:
    """The commitlog a builder recovers against (see the module docstring). The
    recovery facts are those of one commitlog open (``incarnation``); ``wrote`` and
    ``min_offset`` are asked again on each read."""

    def __init__(self, resolve: Resolver, auth: InternalAuth) -> None:
        self._peer = _Peer(resolve, commitlog_pb2_grpc.CommitLogServiceStub, auth)
        try:
            r = self._peer.call("GetRecovery", commitlog_pb2.GetRecoveryRequest())
        except BaseException:
            self._peer.reset(close=True)
            raise
        self.incarnation = r.incarnation
        self.clean_shutdown = r.clean_shutdown
        self.start_offset = r.start_offset
        self.redispatch_from = r.redispatch_from
        self.index_msg_timestamp = r.index_msg_timestamp
        self.recovery = Recovered({(q.topic, q.queue_id): q.max_offset for q in r.queues})
        self._min, self._wrote = r.min_offset, r.wrote_offset

    def offsets(self) -> commitlog_pb2.GetOffsetsResponse:
        """The commitlog's watermarks now (and its incarnation: a new one means it
        reopened and this view is stale)."""
        r = self._peer.call("GetOffsets", commitlog_pb2.GetOffsetsRequest(), timeout=10)
        if r.incarnation == self.incarnation:
            self._min, self._wrote = r.min_offset, r.wrote_offset
        return r

    @property
    def min_offset(self) -> int:
        return self._min

    @property
    def wrote(self) -> int:
        return self._wrote

    def units_match(self, phys: np.ndarray, sizes: np.ndarray, queue_ids: np.ndarray, queue_offsets: np.ndarray, *,
                    topics: list[str] | None = None, topic_index: np.ndarray | None = None,
                    tags_codes: np.ndarray | None = None, check_tags: np.ndarray | None = None,
                    check_from: int = 0, deep_from: int = 0) -> np.ndarray:  # fmt: skip
        """CommitLog.units_match, answered by the commitlog's process."""
        n = len(phys)
        topics = topics or [""]
        topic_index = np.zeros(n, np.int64) if topic_index is None else topic_index
        tags = np.zeros(n, np.int64) if tags_codes is None else tags_codes
        check = np.full(n, tags_codes is not None) if check_tags is None else check_tags
        out = np.zeros(n, bool)
        for lo in range(0, n, CHECK_CHUNK):
            sl = slice(lo, min(n, lo + CHECK_CHUNK))
            req = commitlog_pb2.CheckUnitsRequest(
                physical_offsets=phys[sl].tolist(), sizes=sizes[sl].tolist(), queue_ids=queue_ids[sl].tolist(),
                queue_offsets=queue_offsets[sl].tolist(), topics=topics, topic_codes=topic_index[sl].tolist(),
                tags_codes=tags[sl].tolist(), check_tags=check[sl].tolist(), check_from=check_from,
                deep_from=deep_from,
            )  # fmt: skip
            out[sl] = np.asarray(self._peer.call("CheckUnits", req, timeout=120).ok, bool)
        return out

    def store_times(self, offsets: np.ndarray) -> np.ndarray:
        """Store time of the record at each offset (-1 where none is stored)."""
        out = np.full(len(offsets), -1, np.int64)
        if not len(offsets):
            return out
        r = self._peer.call("Read", commitlog_pb2.ReadRequest(offsets=[int(o) for o in offsets], skip_missing=True))
        found = {o: rec.store_timestamp for o, rec in zip(r.offsets, r.records)}
        for i, off in enumerate(offsets.tolist()):
            out[i] = found.get(off, -1)
        return out

    def record_size(self, offset: int) -> int | None:
        """Size of the record starting at ``offset`` (None where none does): where the
        index builder resumes after the last record it indexed."""
        r = self._peer.call("Read", commitlog_pb2.ReadRequest(offsets=[offset], skip_missing=True))
        return r.records[0].size if r.records else None

    def note_derived(self, kind: str, durable_offset: int, timestamp: int) -> None:
        self._peer.call("NoteDerived", commitlog_pb2.NoteDerivedRequest(kind=kind, durable_offset=durable_offset,
                                                                         timestamp=timestamp))  # fmt: skip

    def close(self) -> None:
        self._peer.reset()


class _RemoteQueue:
    def __init__(self, peer: _Peer, topic: str, queue_id: int, min_offset: int) -> None:
        self._peer, self.topic, self.queue_id, self.min_offset = peer, topic, queue_id, min_offset

    def read_units(self, start: int, n: int) -> np.ndarray:
        try:
            r = self._peer.call("GetUnits", consume_queue_pb2.GetUnitsRequest(topic=self.topic, queue_id=self.queue_id,
                                                                             offset=start, max_units=n))  # fmt: skip
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
        self._peer = _Peer(resolve, consume_queue_pb2_grpc.ConsumeQueueServiceStub, auth, resolve_s=2.0)
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

    def queue_ends(self) -> tuple[int, int, dict[tuple[str, int], int]]:
        """(commitlog incarnation the builder recovered against, its progress, max
        offset per queue): what the commitlog continues queue offsets from."""
        r = self._peer.call("QueueEnds", consume_queue_pb2.QueueEndsRequest(), timeout=120)
        if r.progress.state != "SERVING":
            return 0, 0, {}
        return r.progress.commitlog_incarnation, r.progress.progress_offset, {
            (q.topic, q.queue_id): q.max_offset for q in r.queues}  # fmt: skip

    def close(self) -> None:
        """Every later call finds nothing (the commitlog is closing)."""
        self._peer.reset(close=True)


__all__ = ["PeerUnavailable", "RemoteCommitLog", "RemoteQueues", "resolve_within"]
