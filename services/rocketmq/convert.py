"""RocketMQ 5 messages (apache.rocketmq.v2.Message) <-> the store's records.

What a v2 message becomes, as RocketMQ's proxy stores it (MessageConst names):

    v2 field                              stored as
    system_properties.message_id          UNIQ_KEY (the producer's id, 34 hex digits)
    system_properties.tag                 TAGS
    system_properties.keys                KEYS, space-joined
    system_properties.message_group       __SHARDINGKEY (FIFO)
    system_properties.delivery_timestamp  TIMER_DELIVER_MS, epoch ms (DELAY)
    system_properties.trace_context       TRACE_CONTEXT
    born_timestamp / born_host            the record's born time and host (port 0)
    user_properties                       properties of their own names
    body (GZIP encoding)                  the body gunzipped

Read back, the type is FIFO with a message group, DELAY with a delivery time,
NORMAL otherwise; the digest is MD5 (upper-case hex), which every official client
checks alike; a record without UNIQ_KEY (sent through mqstore's own API without one)
gets its offset msgId as message id.
"""

from __future__ import annotations

import hashlib
import ipaddress
import zlib

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from mqstore.formats.message import MessageRecord
from mqstore.formats.properties import split_keys
from mqstore.rpc.rocketmq_v2 import messaging_pb2 as v2
from mqstore.rpc.v1 import common_pb2
from mqstore.services.rocketmq.status import Code, ProtocolError
from mqstore.store import message_rules
from mqstore.store.consumer_rules import delivery_ms
from mqstore.store.messages import STORE_ONLY_PROPERTIES

SHARDING_KEY = "__SHARDINGKEY"
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TRACE_CONTEXT = "TRACE_CONTEXT"
MAX_USER_PROPERTIES = 128
MAX_PROPERTIES_BYTES = 16 * 1024  # user properties + tag + keys (RocketMQ's proxy)
MAX_GROUP_BYTES = message_rules.MAX_GROUP_BYTES
MAX_DELAY_MS = message_rules.MAX_DELIVERY_AHEAD_MS
MAX_TRANSACTION_RECOVERY_S = 3600  # the proxy's maxTransactionRecoverySecond

# RocketMQ's MessageConst.STRING_HASH_SET: property names the broker owns, refused as
# user property names (ILLEGAL_MESSAGE_PROPERTY_KEY); and the ones it reads back into
# system properties.
RESERVED_PROPERTIES = frozenset(
    """1ST_POP_TIME ARRIVE_TIME BORN_TIMESTAMP BUYER_ID CLUSTER CONSUME_START_TIME CORRECTION_FLAG
    CORRELATION_ID DELAY DLQ_ORIGIN_MESSAGE_ID DLQ_ORIGIN_TOPIC DUP_INFO EXTEND_UNIQ_INFO
    INNER_MULTI_QUEUE_OFFSET INSTANCE_ID KEYS MAX_OFFSET MAX_RECONSUME_TIMES MIN_OFFSET MQ2_FLAG MSG_REGION
    MSG_TYPE ORIGIN_MESSAGE_ID PGROUP POP_CK POP_CK_OFFSET PUSH_REPLY_TIME REAL_QID REAL_TOPIC
    RECONSUME_TIME REPLY_TO_CLIENT RETRY_TOPIC TAGS TIMER_DELAY_LEVEL TIMER_DELAY_MS TIMER_DELAY_SEC
    TIMER_DELIVER_MS TIMER_DEL_UNIQKEY TIMER_DEQUEUE_MS TIMER_ENQUEUE_MS TIMER_OUT_MS TIMER_ROLL_TIMES
    TRACE_ON TRANSFER_FLAG TRAN_MSG TRAN_PREPARED_QUEUE_OFFSET TTL UNIQ_KEY WAIT __BORNHOST __CRC32#""".split()
)
_SYSTEM_READ_BACK = RESERVED_PROPERTIES | {SHARDING_KEY, TRACE_CONTEXT, "SCHEDULE_SOURCE"}
_MIXED = (v2.NORMAL, v2.FIFO, v2.DELAY, v2.TRANSACTION)
TYPE_BY_NAME = {"NORMAL": (v2.NORMAL,), "FIFO": (v2.FIFO,), "DELAY": (v2.DELAY,), "TRANSACTION": (v2.TRANSACTION,)}


def accepted_types(topic_type: str) -> tuple[int, ...]:
    """The v2 message types a topic of store type ``topic_type`` accepts ("" = NORMAL)."""
    return TYPE_BY_NAME.get(topic_type or "NORMAL", _MIXED)


def _control(text: str) -> bool:
    return any(ord(c) < 32 or ord(c) == 127 for c in text)


def check_message(m: v2.Message, topic_types: tuple[int, ...], now_ms: int, max_body: int) -> None:
    """ProtocolError with RocketMQ's code for what the proxy refuses in a message."""
    sp = m.system_properties
    if not sp.message_id.strip() or _control(sp.message_id):
        # stored as UNIQ_KEY: \x01 / \x02 would split the properties string
        raise ProtocolError(
            Code.ILLEGAL_MESSAGE_ID, f"message_id {sp.message_id[:80]!r} is blank or has control characters"
        )
    if not m.body:
        raise ProtocolError(Code.MESSAGE_BODY_EMPTY, "message body is empty")
    if len(m.body) > max_body:
        raise ProtocolError(
            Code.MESSAGE_BODY_TOO_LARGE, f"message body is {len(m.body)} bytes; the limit is {max_body}"
        )
    if sp.HasField("tag") and (not sp.tag.strip() or "|" in sp.tag or _control(sp.tag)):
        raise ProtocolError(Code.ILLEGAL_MESSAGE_TAG, f"tag {sp.tag!r} is blank or has '|' or control characters")
    for k in sp.keys:
        if not k.strip() or _control(k):
            raise ProtocolError(Code.ILLEGAL_MESSAGE_KEY, f"key {k!r} is blank or has control characters")
    if sp.HasField("message_group"):  # the store's rule for __SHARDINGKEY, every door's
        why = message_rules.group_problem(sp.message_group)
        if why is not None:
            raise ProtocolError(Code.ILLEGAL_MESSAGE_GROUP, why)
    if sp.HasField("born_timestamp"):
        why = _timestamp_problem(sp.born_timestamp) or message_rules.born_time_problem(_raw_ms(sp.born_timestamp))
        if why is not None:
            raise ProtocolError(Code.BAD_REQUEST, f"born_timestamp: {why}")
    if len(m.user_properties) > MAX_USER_PROPERTIES:
        raise ProtocolError(
            Code.MESSAGE_PROPERTIES_TOO_LARGE,
            f"{len(m.user_properties)} user properties; the limit is {MAX_USER_PROPERTIES}",
        )
    # tag, keys and user properties, as RocketMQ's proxy counts; and the message id and trace
    # context, stored as properties too (within this budget the store's 32767 bytes always hold)
    size = len(sp.tag.encode()) + sum(len(k.encode()) for k in sp.keys)
    size += len(sp.message_id.encode()) + len(sp.trace_context.encode())
    for name, value in m.user_properties.items():
        if name in RESERVED_PROPERTIES or name in (SHARDING_KEY, TRACE_CONTEXT) or name in STORE_ONLY_PROPERTIES:
            raise ProtocolError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property {name!r} is reserved for the broker")
        if not name or not value or _control(name) or _control(value):
            # an empty name or value: the properties string can not carry it (the store refuses it)
            raise ProtocolError(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                f"property {name!r} has an empty name or value, or control characters",
            )
        size += len(name.encode()) + len(value.encode())
    if size > MAX_PROPERTIES_BYTES:
        raise ProtocolError(
            Code.MESSAGE_PROPERTIES_TOO_LARGE, f"properties take {size} bytes; the limit is {MAX_PROPERTIES_BYTES}"
        )
    kind = sp.message_type or v2.NORMAL
    if kind not in topic_types:
        raise ProtocolError(
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            f"topic {m.topic.name!r} accepts {[v2.MessageType.Name(t) for t in topic_types]}, "
            f"not {v2.MessageType.Name(kind)} messages",
        )
    if kind == v2.FIFO and not sp.HasField("message_group"):
        raise ProtocolError(Code.ILLEGAL_MESSAGE_GROUP, "a FIFO message needs a message group")
    if kind == v2.DELAY and not sp.HasField("delivery_timestamp"):
        raise ProtocolError(Code.ILLEGAL_DELIVERY_TIME, "a DELAY message needs a delivery timestamp")
    if sp.HasField("delivery_timestamp"):  # whatever the type says: the time is stored and honoured
        why = _timestamp_problem(sp.delivery_timestamp) or message_rules.delivery_time_problem(
            _raw_ms(sp.delivery_timestamp), now_ms
        )
        if why is not None:
            raise ProtocolError(Code.ILLEGAL_DELIVERY_TIME, why)
    for field, what, owner in (
        ("message_group", "a message group", v2.FIFO),
        ("delivery_timestamp", "a delivery timestamp", v2.DELAY),
    ):  # RocketMQ's proxy takes the type from these fields: a message carrying one is of that type
        if sp.HasField(field) and kind != owner:
            raise ProtocolError(
                Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                f"a {v2.MessageType.Name(kind)} message can not carry {what} (only {v2.MessageType.Name(owner)} ones do)",
            )
    if kind == v2.TRANSACTION:  # a half message (transactions.py)
        recovery = sp.orphaned_transaction_recovery_duration
        if sp.HasField("orphaned_transaction_recovery_duration") and not (
            0 <= recovery.ToSeconds() <= MAX_TRANSACTION_RECOVERY_S
        ):
            raise ProtocolError(
                Code.BAD_REQUEST,
                f"orphaned_transaction_recovery_duration must be in 0..{MAX_TRANSACTION_RECOVERY_S} s, "
                f"got {recovery.ToSeconds()} s",
            )
    if sp.body_encoding not in (v2.ENCODING_UNSPECIFIED, v2.IDENTITY, v2.GZIP):
        raise ProtocolError(Code.BAD_REQUEST, f"unknown body encoding {sp.body_encoding}")


def _timestamp_problem(t: Timestamp) -> str | None:
    """Why a Timestamp is not a valid one (nanos outside 0..999,999,999), or None."""
    if not 0 <= t.nanos < 1_000_000_000:
        return f"nanos {t.nanos} is outside 0..999999999"
    return None


def _raw_ms(t: Timestamp) -> int:
    """A Timestamp's epoch ms as sent, unchecked (ToMilliseconds raises ValueError past
    Timestamp's range; the message rules say why instead)."""
    return t.seconds * 1000 + t.nanos // 1_000_000


def _body(m: v2.Message, max_body: int) -> bytes:
    if m.system_properties.body_encoding != v2.GZIP:
        return m.body
    try:
        d = zlib.decompressobj(wbits=31)
        body = d.decompress(m.body, max_body + 1)
    except zlib.error as e:
        raise ProtocolError(Code.MESSAGE_CORRUPTED, f"GZIP body does not inflate: {e}") from None
    if len(body) > max_body or d.unconsumed_tail:
        raise ProtocolError(Code.MESSAGE_BODY_TOO_LARGE, f"the inflated body is over the {max_body}-byte limit")
    return body


def _born_host(text: str) -> str:
    """The v2 born host (an address, sometimes with a port: ``a.b.c.d:port`` or
    ``[v6]:port``, or a host name) as the store's "address:port" (port 0 when not
    given or not a port; 127.0.0.1 for a host name)."""
    host, port = text.strip(), "0"
    if host.startswith("[") and "]" in host:  # [v6] or [v6]:port
        host, _, rest = host[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else "0"
    elif host.count(":") == 1:  # v4:port (or name:port)
        host, port = host.split(":")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return "127.0.0.1:0"
    # ASCII digits only: str.isdigit() also takes "²", which int() refuses
    port = port if port.isascii() and port.isdigit() and int(port) <= 65535 else "0"
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


def to_columns(messages: list[v2.Message], queue_ids: list[int], max_body: int) -> common_pb2.MessageColumns:
    """Columns of checked v2 messages (``check_message``), each to its queue."""
    cols = common_pb2.MessageColumns()
    for m, q in zip(messages, queue_ids):
        sp = m.system_properties
        props = dict(m.user_properties)
        if sp.HasField("message_group"):
            props[SHARDING_KEY] = sp.message_group
        if sp.HasField("delivery_timestamp"):
            props[TIMER_DELIVER_MS] = str(sp.delivery_timestamp.ToMilliseconds())
        if sp.HasField("trace_context") and sp.trace_context:
            props[TRACE_CONTEXT] = sp.trace_context
        cols.topics.append(m.topic.name)
        cols.bodies.append(_body(m, max_body))
        cols.queue_ids.append(q)
        cols.tags.append(sp.tag if sp.HasField("tag") else "")
        cols.keys.append(" ".join(sp.keys))
        cols.unique_keys.append(sp.message_id)
        cols.properties.append(common_pb2.Properties(entries=props))
        cols.flags.append(0)
        cols.born_timestamps.append(sp.born_timestamp.ToMilliseconds() if sp.HasField("born_timestamp") else 0)
        cols.born_hosts.append(_born_host(sp.born_host))
        cols.reconsume_times.append(0)
        cols.sysflags.append(0)
    return cols


def _timestamp(ms: int) -> Timestamp:
    t = Timestamp()
    t.FromMilliseconds(ms)
    return t


def to_message(rec: MessageRecord, *, receipt_handle: str, attempt: int, invisible_ms: int) -> v2.Message:
    """A stored record as a received v2 message (every field the clients need, §6 of
    the protocol notes: handle, IDENTITY encoding, MD5 digest, attempt >= 1). The
    record must pass consumer_rules.unconvertible (the shard's pop service sets the
    others aside); ValueError otherwise (a time outside Timestamp's range)."""
    props = rec.properties
    group = props.get(SHARDING_KEY)
    deliver = props.get(TIMER_DELIVER_MS)
    deliver_ms = delivery_ms(props)  # the shard set aside a record with one out of range (consumer_rules)
    kind = v2.FIFO if group else v2.DELAY if deliver else v2.NORMAL
    sp = v2.SystemProperties(
        keys=split_keys(rec.keys),
        message_id=rec.unique_key or rec.msg_id,
        body_digest=v2.Digest(type=v2.MD5, checksum=hashlib.md5(rec.body).hexdigest().upper()),
        body_encoding=v2.IDENTITY,
        message_type=kind,
        born_timestamp=_timestamp(rec.born_timestamp),
        born_host=rec.born_host.address,
        store_timestamp=_timestamp(rec.store_timestamp),
        store_host=f"{rec.store_host.address}:{rec.store_host.port}",
        receipt_handle=receipt_handle,
        queue_id=rec.queue_id,
        queue_offset=rec.queue_offset,
        invisible_duration=Duration(seconds=invisible_ms // 1000, nanos=(invisible_ms % 1000) * 1_000_000),
        delivery_attempt=max(1, attempt),
    )
    if rec.tags:
        sp.tag = rec.tags
    if group:
        sp.message_group = group
    if deliver_ms is not None:
        sp.delivery_timestamp.CopyFrom(_timestamp(deliver_ms))
    if props.get(TRACE_CONTEXT):
        sp.trace_context = props[TRACE_CONTEXT]
    user = {k: v for k, v in props.items() if k not in _SYSTEM_READ_BACK}
    return v2.Message(topic=v2.Resource(name=rec.topic), user_properties=user, system_properties=sp, body=rec.body)


__all__ = [
    "RESERVED_PROPERTIES",
    "accepted_types",
    "check_message",
    "to_columns",
    "to_message",
]
