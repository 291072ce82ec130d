"""Between protobuf messages (mqstore.rpc.v1) and the store's values: columns in,
columns out, one pass per column (no Python object per message where avoidable).

Request columns follow the broadcast rule of common.proto: no value = default for
every row, one value = every row, N values = one per row; anything else is
INVALID_ARGUMENT.
"""

from __future__ import annotations

import ipaddress

import numpy as np

from mqstore.formats.message import MessageRecord
from mqstore.formats.msgid import Host
from mqstore.formats.names import check_topic
from mqstore.rpc.v1 import common_pb2 as pb
from mqstore.rpc.v1 import front_pb2
from mqstore.services.common.errors import BadRequest, TooLarge
from mqstore.store.messages import (
    AUTO_QUEUE,
    MAX_PORT,
    AppendResult,
    MessageBatch,
    PutStatus,
)

MAX_BATCH_MESSAGES = 10_000
MAX_BATCH_BODY_BYTES = 64 << 20
MAX_QUEUE_ID = 65_535
_PUT_STATUS = {PutStatus.PUT_OK: pb.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT: pb.FLUSH_DISK_TIMEOUT}


def pull_answer_to_pb(a, *, raw: bool) -> front_pb2.PullResponse:
    """The front's PullResponse of a reads.pull answer (raw: one buffer of records plus sizes)."""
    out = front_pb2.PullResponse(
        status=front_pb2.PullStatus.Value(a.status.name),
        next_offset=a.next_offset,
        min_offset=a.min_offset,
        max_offset=a.max_offset,
    )
    if raw:
        out.raw_data, out.raw_sizes = a.records.to_wire()
    else:
        out.records.extend(a.records)
    return out


def put_status_to_pb(status: PutStatus) -> int:
    return _PUT_STATUS[status]


def _column(values, n: int, name: str):
    """The column as given (len n), one value (broadcast), or None (no value)."""
    k = len(values)
    if k == 0:
        return None
    if k == 1:
        return values[0]
    if k != n:
        raise BadRequest(f"column {name} has {k} values for {n} messages (give 0, 1 or {n})")
    return list(values)


def _text_column(values, n: int, name: str):
    """Like _column; "" means "none" (None)."""
    col = _column(values, n, name)
    if col is None or isinstance(col, str):
        return col or None
    return [v or None for v in col]


def parse_host(text: str, what: str = "host") -> Host:
    """ "a.b.c.d:port" or "[v6]:port" -> Host."""
    addr, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise BadRequest(f"{what} {text!r} is not address:port")
    addr = addr[1:-1] if addr.startswith("[") and addr.endswith("]") else addr
    try:
        ipaddress.ip_address(addr)
    except ValueError:
        raise BadRequest(f"{what} {text!r}: {addr!r} is not an IP address") from None
    return Host(addr, int(port))


def _born_host(text: str) -> Host:
    """A producer's born host: parse_host, and a port in 0..65535 (records already
    stored are read back whatever their port)."""
    host = parse_host(text, "born host")
    if host.port > MAX_PORT:
        raise BadRequest(f"born host {text!r}: port {host.port} is outside 0..{MAX_PORT}")
    return host


def check_batch_limits(cols: pb.MessageColumns) -> int:
    """The batch size; TooLarge past the batch limits, BadRequest when empty."""
    n = len(cols.bodies)
    if n == 0:
        raise BadRequest("the batch has no messages (bodies is empty)")
    if n > MAX_BATCH_MESSAGES:
        raise TooLarge(f"a batch holds at most {MAX_BATCH_MESSAGES} messages, got {n}")
    total = sum(map(len, cols.bodies))
    if total > MAX_BATCH_BODY_BYTES:
        raise TooLarge(f"a batch holds at most {MAX_BATCH_BODY_BYTES} body bytes, got {total}")
    return n


def queue_id_column(cols: pb.MessageColumns, n: int) -> np.ndarray:
    """Queue ids per message (AUTO_QUEUE where the store picks), checked."""
    q = cols.queue_ids
    if len(q) not in (0, 1, n):
        raise BadRequest(f"column queue_ids has {len(q)} values for {n} messages (give 0, 1 or {n})")
    arr = np.full(n, AUTO_QUEUE, np.int64) if len(q) == 0 else np.broadcast_to(np.asarray(q, np.int64), (n,)).copy()
    bad = (arr < AUTO_QUEUE) | (arr > MAX_QUEUE_ID)
    if bad.any():
        raise BadRequest(
            f"queue id {int(arr[np.argmax(bad)])} is out of range (0..{MAX_QUEUE_ID}, or -1 for automatic)"
        )
    return arr


def topic_column(cols: pb.MessageColumns, n: int) -> list[str]:
    """Topic per message, every distinct one checked (InvalidTopicError otherwise)."""
    t = cols.topics
    if len(t) == 0:
        raise BadRequest("the batch has no topic (topics is empty)")
    if len(t) not in (1, n):
        raise BadRequest(f"column topics has {len(t)} values for {n} messages (give 1 or {n})")
    for name in set(t):
        check_topic(name)
    return [t[0]] * n if len(t) == 1 else list(t)


def columns_to_batch(
    cols: pb.MessageColumns, queue_ids: np.ndarray | None = None, *, exact_born_times: bool = False
) -> MessageBatch:
    """A MessageBatch from request columns (limits and names checked here; the store
    checks the rest: sizes, properties, separators). ``queue_ids`` overrides the column.
    A born time of 0 means the store's clock, unless ``exact_born_times`` (a delay
    delivery: the stored record's own times, 0 included, as they are)."""
    n = check_batch_limits(cols)
    topics = topic_column(cols, n)
    qids = queue_id_column(cols, n) if queue_ids is None else queue_ids
    props = _column(cols.properties, n, "properties")
    if isinstance(props, pb.Properties):
        props = dict(props.entries) or None
    elif props is not None:
        props = [dict(p.entries) or None for p in props]
    born_ts = _column(cols.born_timestamps, n, "born_timestamps")
    if exact_born_times:
        born_ts = np.asarray(born_ts, np.int64) if isinstance(born_ts, list) else born_ts
    elif isinstance(born_ts, list):
        arr = np.asarray(born_ts, np.int64)
        if (arr == 0).any():  # 0 = the store's clock; per message that is not expressible: all or none
            raise BadRequest("born_timestamps: give every message a time, or none (0 = the store's clock)")
        born_ts = arr
    elif born_ts == 0:
        born_ts = None
    hosts = _column(cols.born_hosts, n, "born_hosts")
    if isinstance(hosts, str):
        hosts = _born_host(hosts) if hosts else None
    elif hosts is not None:
        hosts = [_born_host(h) if h else Host("127.0.0.1", 0) for h in hosts]
    uniq = cols.unique_keys
    if len(uniq) not in (0, n):
        raise BadRequest(
            f"column unique_keys has {len(uniq)} values for {n} messages (give 0 or {n}: a UNIQ_KEY names one message)"
        )
    return MessageBatch(
        topics=topics[0] if len(set(topics)) == 1 else topics,
        bodies=list(cols.bodies),
        queue_ids=int(qids[0]) if (qids == qids[0]).all() else qids,
        tags=_text_column(cols.tags, n, "tags"),
        keys=_text_column(cols.keys, n, "keys"),
        unique_keys=[u or None for u in uniq] if len(uniq) else None,
        properties=props,
        flags=_int_or_list(_column(cols.flags, n, "flags"), 0),
        sysflags=_int_or_list(_column(cols.sysflags, n, "sysflags"), 0),
        born_timestamps=born_ts,
        born_hosts=hosts,
        reconsume_times=_int_or_list(_column(cols.reconsume_times, n, "reconsume_times"), 0),
    )


def _int_or_list(col, default: int):
    if col is None:
        return default
    return col


def append_result_to_pb(res: AppendResult, shard: int = 0) -> pb.AppendResult:
    n = len(res)
    return pb.AppendResult(
        statuses=[_PUT_STATUS[res.status]] * n,
        msg_ids=res.msg_ids,
        physical_offsets=res.physical_offsets.tolist(),
        sizes=res.sizes.tolist(),
        queue_ids=res.queue_ids.tolist(),
        queue_offsets=res.queue_offsets.tolist(),
        unique_keys=res.unique_keys,
        store_timestamps=[res.store_timestamp] * n,
        shards=[shard] * n,
    )


def record_to_pb(rec: MessageRecord, shard: int = 0) -> pb.Record:
    props = rec.properties
    return pb.Record(
        msg_id=rec.msg_id,
        topic=rec.topic,
        queue_id=rec.queue_id,
        queue_offset=rec.queue_offset,
        physical_offset=rec.physical_offset,
        size=rec.total_size,
        body=rec.body,
        properties=props,
        tags=props.get("TAGS", ""),
        keys=props.get("KEYS", ""),
        unique_key=props.get("UNIQ_KEY", ""),
        flag=rec.flag,
        sysflag=rec.sysflag,
        body_crc=rec.body_crc & 0xFFFFFFFF,
        born_timestamp=rec.born_timestamp,
        born_host=str(rec.born_host),
        store_timestamp=rec.store_timestamp,
        store_host=str(rec.store_host),
        reconsume_times=rec.reconsume_times,
        prepared_transaction_offset=rec.prepared_transaction_offset,
        shard=shard,
    )


def record_from_pb(r: pb.Record) -> MessageRecord:
    """The store's MessageRecord for a received Record (so the CLI renders both alike)."""
    return MessageRecord(
        total_size=r.size,
        magic=0,
        body_crc=r.body_crc,
        queue_id=r.queue_id,
        flag=r.flag,
        queue_offset=r.queue_offset,
        physical_offset=r.physical_offset,
        sysflag=r.sysflag,
        born_timestamp=r.born_timestamp,
        born_host=parse_host(r.born_host),
        store_timestamp=r.store_timestamp,
        store_host=parse_host(r.store_host),
        reconsume_times=r.reconsume_times,
        prepared_transaction_offset=r.prepared_transaction_offset,
        body=r.body,
        topic=r.topic,
        properties=dict(r.properties),
    )


def topic_config_to_pb(tc) -> pb.TopicConfig:
    """A TopicConfig as the answer of UpdateTopic / ListTopics: the message type always set."""
    return pb.TopicConfig(
        topic=tc.topic_name,
        read_queue_nums=tc.read_queue_nums,
        write_queue_nums=tc.write_queue_nums,
        perm=tc.perm,
        message_type=tc.message_type.value,
    )


__all__ = [
    "MAX_BATCH_BODY_BYTES",
    "MAX_BATCH_MESSAGES",
    "MAX_QUEUE_ID",
    "append_result_to_pb",
    "check_batch_limits",
    "columns_to_batch",
    "parse_host",
    "queue_id_column",
    "record_from_pb",
    "record_to_pb",
    "topic_column",
    "topic_config_to_pb",
]
