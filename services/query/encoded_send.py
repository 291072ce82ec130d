"""A producer's fast path: batches encoded by the client, sent as one buffer per shard.

``EncodedSender`` encodes a ``MessageBatch`` with the store's own compiled encoder
(record_batch.encode_for_send), so neither the front nor the commitlog builds a
Python object per message: the front reads the request's small fields (topics for
the ACL, the shard) and forwards its bytes unparsed; the commitlog checks the records
in compiled passes and writes them (mqstore/store/encoded_batch.py). The answer is
packed columns; msgIds are made here from the offsets and the shard's store host.

Routing follows GetRoute: one shard takes automatic queue ids (-1) and picks them
itself; with more, the sender picks each message's queue round robin over the
topic's write queues, splits the encoded records per shard (one compiled gather per
part) and sends the parts in parallel. A part refused because the route moved
(FAILED_PRECONDITION, nothing written) is routed again once; a part whose shard
failed is reported per message (SHARD_FAILED and the shard's error), never retried
here: an append whose answer was lost may have been stored, so the caller decides.

Delayed messages (a DELAY property) are not taken: send them with ``FrontClient.send``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

import grpc
import numpy as np

from mqstore.formats.msgid import decode_host
from mqstore.kernels import _decode, _encode
from mqstore.rpc.v1 import common_pb2, front_pb2
from mqstore.services.common import shard_rule
from mqstore.services.common.errors import REFUSED_CODES
from mqstore.services.common.headers import NOT_STORED_HEADER
from mqstore.store import message_rules
from mqstore.store.clock import SystemClock
from mqstore.store.config import StoreConfig
from mqstore.store.messages import AUTO_QUEUE, MessageBatch
from mqstore.store.record_batch import BatchEncoder, encode_for_send
from mqstore.store.tuning import tune_allocator

# The client leaves size limits to the store (it knows its own); only this bounds a body here.
_CLIENT_MAX_BODY = 64 << 20


@dataclass
class EncodedSendResult:
    """Per message, in the batch's order. ``statuses``: the proto's PutStatus
    (common_pb2.PUT_OK, FLUSH_DISK_TIMEOUT; where the message's shard failed,
    NOT_STORED when nothing of its part was written, so sending it again is safe, or
    SHARD_FAILED when that is not known; then its offsets are -1 and
    ``errors[shard]`` says why, "CODE: message")."""

    statuses: np.ndarray
    physical_offsets: np.ndarray
    queue_ids: np.ndarray
    queue_offsets: np.ndarray
    store_timestamps: np.ndarray
    shards: np.ndarray
    sizes: np.ndarray  # encoded record size of each message
    unique_key_parts: tuple[str, list[str]]
    prefixes: list[str]  # msgId prefix of each shard
    errors: dict[int, str]

    def __len__(self) -> int:
        return len(self.statuses)

    @property
    def ok(self) -> bool:
        """Every message stored (and durable under sync flush)."""
        return bool((self.statuses == common_pb2.PUT_OK).all())

    @property
    def msg_ids(self) -> list[str]:
        """Offset msgIds ("" for messages not stored), made on demand."""
        out = [""] * len(self)
        for s, prefix in enumerate(self.prefixes):
            stored = (self.statuses == common_pb2.PUT_OK) | (self.statuses == common_pb2.FLUSH_DISK_TIMEOUT)
            rows = np.flatnonzero((self.shards == s) & stored)
            if len(rows):
                for i, m in zip(rows.tolist(), _encode.offset_msg_ids(prefix, self.physical_offsets[rows])):
                    out[i] = m
        return out

    @property
    def unique_keys(self) -> list[str]:
        head, tails = self.unique_key_parts
        return [head + t for t in tails] if head else list(tails)


class EncodedSender:
    """Sends batches through ``stub`` (a FrontServiceStub), encoding them here.
    ``timeout``: seconds per call. Not thread-safe (one per producer thread)."""

    def __init__(self, stub, *, timeout: float = 30.0) -> None:
        tune_allocator()  # each batch is a buffer of a few hundred KiB: kept off fresh mmap()s
        self._stub = stub
        self._timeout = timeout
        self._route: front_pb2.GetRouteResponse | None = None
        self._encoders: dict[str, BatchEncoder] = {}
        self._round_robin: dict[str, int] = {}

    def route(self, *, refresh: bool = False) -> front_pb2.GetRouteResponse:
        if self._route is None or refresh:
            self._route = self._stub.GetRoute(front_pb2.GetRouteRequest(), timeout=self._timeout)
        return self._route

    def _encoder(self, prefix: str) -> BatchEncoder:
        """An encoder writing the shard's store host (its kind sets sysflag bit 0x20)."""
        enc = self._encoders.get(prefix)
        if enc is None:
            host = decode_host(bytes.fromhex(prefix))
            enc = BatchEncoder(StoreConfig(store_host=host, max_message_bytes=_CLIENT_MAX_BODY), SystemClock())
            self._encoders[prefix] = enc
        return enc

    def send(self, batch: MessageBatch) -> EncodedSendResult:
        """Encode and send ``batch``; see the module docstring. Raises
        grpc.RpcError when the batch is refused as a whole (bad input, permission)
        or when its only shard failed."""
        try:
            return self._send(self.route(), batch)
        except grpc.RpcError as e:
            if e.code() is grpc.StatusCode.UNAVAILABLE:
                self._route = None  # asked again next time; this send is the caller's to retry
            if e.code() is not grpc.StatusCode.FAILED_PRECONDITION:
                raise
        return self._send(self.route(refresh=True), batch)  # the route moved; nothing was written

    def _send(self, route: front_pb2.GetRouteResponse, batch: MessageBatch) -> EncodedSendResult:
        shards = route.shards
        if shards == 1:
            batch = message_rules.with_fifo_queues(
                batch, lambda t: route.write_queue_nums.get(t, route.default_queue_nums)
            )  # the store would pick them too; here costs less
            enc = encode_for_send(self._encoder(_prefix(route, 0)), batch)
            answer = self._stub.SendEncoded(_request(enc.data, _topics(batch), 0, 1), timeout=self._timeout)
            return _result(enc, [(0, np.arange(enc.n), answer)], list(route.msg_id_prefixes), {})
        batch, shard_of = self._routed(route, batch)
        present = np.unique(shard_of).tolist()
        prefix = next((_prefix(route, s) for s in present if route.msg_id_prefixes[s]), None)
        if prefix is None:
            raise _unavailable(present)
        enc = encode_for_send(self._encoder(prefix), batch)
        starts = np.concatenate([[0], np.cumsum(enc.sizes)[:-1]]).astype(np.int64)
        topics = _topic_list(batch, enc.n)
        pending = []
        for s in present:
            rows = np.flatnonzero(shard_of == s)
            part = _decode.gather(enc.data, starts[rows], enc.sizes[rows], np.empty(len(rows) + 1, np.int64))
            names = sorted({topics[i] for i in rows.tolist()})
            req = _request(part, names, s, shards)
            if len(present) == 1:  # a blocking call: the future API starts a thread per call
                answer = self._stub.SendEncoded(req, timeout=self._timeout)
                return _result(enc, [(s, rows, answer)], list(route.msg_id_prefixes), {}, shard_of)
            pending.append((s, rows, self._stub.SendEncoded.future(req, timeout=self._timeout)))
        answers, errors, not_stored = [], {}, []
        for s, rows, future in pending:
            try:
                answers.append((s, rows, future.result()))
            except grpc.RpcError as e:
                if e.code() is grpc.StatusCode.FAILED_PRECONDITION:
                    raise
                errors[s] = f"{e.code().name}: {e.details()}"
                if e.code() in REFUSED_CODES or _not_reached(e):
                    not_stored.append(rows)
        if not answers:
            raise _first_error(pending)
        res = _result(enc, answers, list(route.msg_id_prefixes), errors, shard_of)
        for rows in not_stored:
            res.statuses[rows] = common_pb2.NOT_STORED
        return res

    def _routed(self, route: front_pb2.GetRouteResponse, batch: MessageBatch) -> tuple[MessageBatch, np.ndarray]:
        """The batch with every queue picked (a FIFO message: its group's queue; others
        round robin over each topic's write queues where it said -1) and the shard of
        each message."""
        n = len(batch)
        topics = _topic_list(batch, n)
        names, codes = np.unique(np.asarray(topics, dtype=object), return_inverse=True)
        qids = np.broadcast_to(
            np.asarray(AUTO_QUEUE if batch.queue_ids is None else batch.queue_ids, np.int64), (n,)
        ).copy()
        props = batch.properties
        if props is not None:  # FIFO messages to their group's queue, as the store picks it
            rows = [props] * n if isinstance(props, Mapping) else props
            message_rules.pick_fifo_queues(
                qids, topics, rows, lambda t: route.write_queue_nums.get(t, route.default_queue_nums)
            )
        names = names.tolist()
        starts = np.array([self._round_robin.get(t, 0) for t in names], np.int64)
        write_queues = np.array([route.write_queue_nums.get(t, route.default_queue_nums) or 1 for t in names], np.int64)
        counts = pick_round_robin(qids, codes, starts, write_queues)
        for c in np.flatnonzero(counts).tolist():
            self._round_robin[names[c]] = int(starts[c] + counts[c])
        return dataclasses.replace(batch, queue_ids=qids), shard_rule.shards_by_code(names, codes, qids, route.shards)


def pick_round_robin(qids: np.ndarray, codes: np.ndarray, starts: np.ndarray, write_queues: np.ndarray) -> np.ndarray:
    """Sets each automatic queue id (-1) in ``qids``, in place: the k-th such message
    of topic code c in the batch gets ``(starts[c] + k) % write_queues[c]``. Returns the
    count of automatic messages per code. One pass over the batch whatever the number
    of distinct topics (a mask per topic cost topics x messages)."""
    rows = np.flatnonzero(qids == AUTO_QUEUE)
    auto_codes = codes[rows]
    counts = np.bincount(auto_codes, minlength=len(starts))
    order = np.argsort(auto_codes, kind="stable")  # by topic, batch order kept within one
    first_of_code = np.cumsum(counts) - counts
    rank = np.arange(len(rows)) - first_of_code[auto_codes[order]]
    c = auto_codes[order]
    qids[rows[order]] = (starts[c] + rank) % write_queues[c]
    return counts


def _not_reached(e: grpc.RpcError) -> bool:
    """The front says the part's shard was not reached: nothing of it was written."""
    trailing = e.trailing_metadata() if hasattr(e, "trailing_metadata") else None
    return any(k == NOT_STORED_HEADER for k, _ in trailing or ())


def _prefix(route: front_pb2.GetRouteResponse, shard: int) -> str:
    prefix = route.msg_id_prefixes[shard] if shard < len(route.msg_id_prefixes) else ""
    if not prefix:
        raise _unavailable([shard])
    return prefix


class _ShardsDown(grpc.RpcError):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self._text = text

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return self._text


def _unavailable(shards: list[int]) -> grpc.RpcError:
    return _ShardsDown(f"shard(s) {shards} did not answer the route lookup; nothing was sent")


def _first_error(pending) -> grpc.RpcError:
    for _, _, future in pending:
        e = future.exception()
        if e is not None:
            return e
    raise AssertionError("no part failed")


def _request(data: bytes, topics: list[str], shard: int, shards: int) -> common_pb2.EncodedBatch:
    return common_pb2.EncodedBatch(records=data, topics=topics, shard=shard, shards=shards)


def _topic_list(batch: MessageBatch, n: int) -> list[str]:
    return [batch.topics] * n if isinstance(batch.topics, str) else list(batch.topics)


def _topics(batch: MessageBatch) -> list[str]:
    return [batch.topics] if isinstance(batch.topics, str) else list(dict.fromkeys(batch.topics))


def _result(enc, answers, prefixes: list[str], errors: dict[int, str], shard_of=None) -> EncodedSendResult:
    n = enc.n
    statuses = np.full(n, common_pb2.SHARD_FAILED, np.int64)
    physical, queue_offsets, stamps = (np.full(n, -1, np.int64) for _ in range(3))
    queue_ids = np.asarray(enc.queue_ids, np.int64).copy()
    shards = np.zeros(n, np.int64) if shard_of is None else np.asarray(shard_of, np.int64)
    for s, rows, a in answers:
        statuses[rows] = a.status
        physical[rows] = np.frombuffer(a.physical_offsets, "<i8")
        queue_ids[rows] = np.frombuffer(a.queue_ids, "<i4")
        queue_offsets[rows] = np.frombuffer(a.queue_offsets, "<i8")
        stamps[rows] = a.store_timestamp
        if a.msg_id_prefix:
            prefixes[s] = a.msg_id_prefix
    return EncodedSendResult(
        statuses, physical, queue_ids, queue_offsets, stamps, shards, enc.sizes, enc.unique_keys, prefixes, errors
    )


__all__ = ["EncodedSendResult", "EncodedSender", "pick_round_robin"]
