"""Batches a client encoded itself: records in RocketMQ's layout, checked before they are appended.

A producer can encode its batch with the store's own encoder (record_batch.BatchEncoder,
in the client library: services/query/client.py) and send the records as one buffer,
as RocketMQ brokers take MessageBatch bytes: the store then never builds a Python
object per message. The client leaves the fields only the put lock knows as
placeholders (QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP; QUEUEID may be -1: the
store picks the queue) and sets TOTALSIZE and the body CRC.

``parse_encoded`` checks what the columnar path checks, in compiled passes over the
buffer, so a bad record refuses the whole batch before anything is written:

    layout       every record's TOTALSIZE, magic, field lengths and body CRC (the scan
                 kernel), the records filling the buffer exactly;
    properties   well-formed UTF-8 ``name\\x01value\\x02`` pairs, names and values
                 non-empty (_scan.check_properties); none the store reserves
                 (SCHEDULE_SOURCE), no DELAY (a delayed message is rewritten to
                 SCHEDULE_TOPIC_XXXX, which only the columnar path does) and no
                 TIMER_DELAY_SEC / TIMER_DELAY_MS (message_rules.py);
    topics       their bytes UTF-8 (names are checked by the caller's policy); each
                 distinct topic's bytes are looked up in a table kept across batches
                 (``_TopicNames``), so a known topic costs no decode and its name is
                 the same str object every batch (the topic table's lookups by name
                 then hit its cache by object, kernels/_topics.pyx);
    sizes        body, properties and record within the store's limits;
    hosts        born host ports in 0..65535; born times in protobuf Timestamp's
                 range (message_rules.py); the store host of the store's kind
                 (sysflag bit 0x20: IPv6), since the store writes its own there.

What a producer may send (topic names and permissions, transaction bits, queue ids,
and message_rules.py's delivery times, groups, born times and message types) is the
caller's policy: ``LogStore.append_encoded`` applies the columnar path's rules to the
parsed columns and to the properties in place (``props_at``, ``props_len``).
"""

from __future__ import annotations

import threading

import numpy as np

from mqstore.errors import InvalidMessageError, InvalidTopicError, MessageTooLargeError
from mqstore.formats.message import BLANK_RECORD_BYTES, MIN_RECORD_BYTES
from mqstore.formats.msgid import encode_host
from mqstore.formats.properties import DELAY, SCHEDULE_SOURCE
from mqstore.kernels import _intern, _scan
from mqstore.store.config import StoreConfig
from mqstore.store.message_rules import MARKERS, MAX_TIME_MS, MIN_TIME_MS, born_time_problem

MAX_ENCODED_RECORDS = 10_000  # as many as a columnar batch (services/common/convert.py)
_RESERVED = (DELAY.encode(), SCHEDULE_SOURCE.encode(), b"TIMER_DELAY_SEC", b"TIMER_DELAY_MS")
_WHY_TIMER = "is not taken: give the delivery time as TIMER_DELIVER_MS (epoch ms)"
_WHY_RESERVED = (
    "DELAY is not taken in an encoded batch: send delayed messages as columns (SendBatch), "
    "which the store rewrites to its delay topic",
    "SCHEDULE_SOURCE is set by the store's delay scheduler only",
    f"TIMER_DELAY_SEC {_WHY_TIMER}",
    f"TIMER_DELAY_MS {_WHY_TIMER}",
)
_WHY_PROPS = {
    _scan.PROPS_NOT_UTF8: "its properties are not well-formed UTF-8",
    _scan.PROPS_MALFORMED: "its properties are not name\\x01value\\x02 pairs with non-empty names and values",
}


class EncodedBatch:
    """Records a client encoded, parsed and checked (``parse_encoded``): ``data`` as
    sent and one column per record. Nothing is written yet."""

    __slots__ = (
        "data",
        "n",
        "positions",
        "sizes",
        "queue_ids",
        "sysflags",
        "topics",
        "topic_codes",
        "props_at",
        "props_len",
        "marks",
    )

    def __init__(  # noqa: PLR0913
        self,
        data,
        positions,
        sizes,
        queue_ids,
        sysflags,
        topics,
        topic_codes,
        props_at=None,
        props_len=None,
        marks=None,
    ) -> None:
        self.data = data
        self.n = len(positions)
        self.positions: np.ndarray = positions
        self.sizes: np.ndarray = sizes
        self.queue_ids: np.ndarray = queue_ids  # AUTO_QUEUE (-1) where the store picks
        self.sysflags: np.ndarray = sysflags
        self.topics: list[str] = topics  # distinct, in order of first appearance
        self.topic_codes: np.ndarray = topic_codes  # index into topics, per record
        self.props_at: np.ndarray | None = props_at  # where each record's properties string lies
        self.props_len: np.ndarray | None = props_len
        self.marks: np.ndarray | None = marks  # bit m: the record has a property named MARKERS[m]


def parse_encoded(data: bytes | bytearray | memoryview, config: StoreConfig) -> EncodedBatch:
    """Parse and check an encoded batch (see the module docstring); raises
    InvalidMessageError (or a subclass) naming the first bad record."""
    end = len(data)
    if end == 0:
        raise InvalidMessageError("an encoded batch holds at least one record")
    cap = min(end // MIN_RECORD_BYTES + 1, MAX_ENCODED_RECORDS + 1)
    positions, sizes = np.empty(cap, np.int64), np.empty(cap, np.int64)
    cols = np.empty((_scan.COLUMNS, cap), np.int64)
    n, stop, code = _scan.scan(data, 0, end, end, -1, False, True, None, positions, sizes, cols)
    if code == _scan.STOP_FULL:
        raise InvalidMessageError(f"an encoded batch holds at most {MAX_ENCODED_RECORDS} records")
    if stop != end or code != _scan.STOP_CLASSIFY:
        why = {
            _scan.STOP_LAYOUT: "its fields disagree with its TOTALSIZE",
            _scan.STOP_CRC: "its body CRC does not match the body",
        }.get(code, "it is not a whole message record (TOTALSIZE, magic)")
        raise InvalidMessageError(f"encoded record {n} at byte {stop} of {end}: {why}; nothing was written")
    positions, sizes, cols = positions[:n], sizes[:n], cols[:, :n]
    sysflags = cols[_scan.COL_SYSFLAG]
    topic_at, topic_len, props_len = cols[_scan.COL_TOPIC_AT], cols[_scan.COL_TOPIC_LEN], cols[_scan.COL_PROPS_LEN]
    props_at = topic_at + topic_len + 2
    marks = np.empty(n, np.int64)  # which records carry a name the message rules read (MARKERS)
    bad, why, which = _scan.check_properties(data, props_at, props_len, _RESERVED, MARKERS, marks)
    if bad >= 0:
        text = _WHY_RESERVED[which] if why == _scan.PROPS_RESERVED else _WHY_PROPS[why]
        raise InvalidMessageError(f"encoded record {bad}: {text}; nothing was written")
    codes, topics = _TOPIC_NAMES.codes(data, topic_at, topic_len)
    _check_heads(data, positions, sizes, sysflags, config)
    return EncodedBatch(
        data, positions, sizes, cols[_scan.COL_QUEUE_ID], sysflags, topics, codes, props_at, props_len, marks
    )


class _TopicNames:
    """Topic byte strings -> names, kept across batches: at 10,000 topics round-robin
    every batch names 1,000 topics, and decoding each one, then finding its id in the
    topic table by a new str, cost more than the rest of the append (a served
    producer's topics arrive as bytes every time). One compiled pass numbers a batch's
    distinct topics (kernels/_intern.pyx, as ``_scan.topic_codes`` does) and gives each
    distinct byte string an id for the table's life; a name is decoded once per id.
    Bytes that are not UTF-8 keep an id with no name (refused every time). Past
    ``max_ids`` distinct byte strings (a client sending ever new names) the table
    starts again. Thread-safe (one lock)."""

    def __init__(self, max_ids: int = 1_000_000) -> None:
        self._max_ids = max_ids
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._ids = _intern.TopicByteIds()
        self._names = np.empty(1024, object)  # by id; None: not UTF-8

    def codes(self, data, topic_at: np.ndarray, topic_len: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """(per record: index into the names, the distinct names in order of first
        appearance); InvalidTopicError naming the first record whose topic is not UTF-8."""
        n = len(topic_at)
        codes, ids = np.empty(n, np.int64), np.empty(n, np.int64)
        at, ln = np.ascontiguousarray(topic_at, np.int64), np.ascontiguousarray(topic_len, np.int64)
        buf = data if isinstance(data, (bytes, bytearray)) else memoryview(data).cast("B")
        with self._lock:
            if len(self._ids) > self._max_ids:
                self._reset()
            known = len(self._ids)
            k = self._ids.codes(buf, at, ln, codes, ids)
            if len(self._ids) > known:
                self._name_new(known)
            names = self._names[ids[:k]].tolist()
        if None in names:
            bad = names.index(None)
            first = int(np.flatnonzero(codes == bad)[0])
            raise InvalidTopicError(f"encoded record {first}: its topic is not UTF-8; nothing was written")
        return codes, names

    def _name_new(self, known: int) -> None:
        count = len(self._ids)
        if count > len(self._names):
            grown = np.empty(max(count, 2 * len(self._names)), object)
            grown[: len(self._names)] = self._names
            self._names = grown
        for i in range(known, count):
            try:
                self._names[i] = self._ids.name(i).decode()
            except UnicodeDecodeError:
                self._names[i] = None


_TOPIC_NAMES = _TopicNames()


def _check_heads(data, positions: np.ndarray, sizes: np.ndarray, sysflags: np.ndarray, config: StoreConfig) -> None:
    v6_store = len(encode_host(config.store_host)) == 20
    limit = min(config.max_record_bytes, config.segment_bytes - BLANK_RECORD_BYTES)
    i, why, value = _scan.check_heads(
        data, positions, sizes, sysflags, v6_store, config.max_message_bytes, limit, MIN_TIME_MS, MAX_TIME_MS
    )
    if why == _scan.HEAD_OK:
        return
    if why == _scan.HEAD_STORE_HOST:
        raise InvalidMessageError(
            f"encoded record {i}: its store host is IPv{4 if v6_store else 6} (sysflag bit 0x20) and this "
            f"store's is IPv{6 if v6_store else 4}; nothing was written"
        )
    if why == _scan.HEAD_PORT:
        raise InvalidMessageError(f"encoded record {i}: born host port {value} is outside 0..65535")
    if why == _scan.HEAD_BORN:  # the message rules' range (message_rules.born_time_problem)
        raise InvalidMessageError(f"encoded record {i}: {born_time_problem(value)}; nothing was written")
    if why == _scan.HEAD_BODY:
        raise MessageTooLargeError(
            f"encoded record {i}: body of {value} bytes exceeds max_message_bytes {config.max_message_bytes}"
        )
    raise MessageTooLargeError(f"encoded record {i}: record of {value} bytes exceeds the limit of {limit} bytes")


__all__ = ["MAX_ENCODED_RECORDS", "EncodedBatch", "parse_encoded"]
