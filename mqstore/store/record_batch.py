"""Batch encoding: a MessageBatch turned into commitlog record bytes, before the put lock.

RocketMQ encodes a message before it takes the put lock (CommitLog.asyncPutMessage,
MessageExtEncoder) and patches the fields only the lock knows afterwards; this module
does the first half for a whole batch: ``BatchEncoder.prepare`` validates every column
(topics, queue ids, sizes, separators in user text), generates UNIQ_KEYs and has the
compiled encoder (mqstore/kernels/_encode.pyx, one pass without the GIL) write every
record into a reusable buffer (bodies given as ``messages.Bodies`` are read in place
from their one buffer, a list of bytes from each object), the one the CommitLog hands to ``pwrite`` once it has
patched queue id, queue offset, physical offset and store timestamp under its lock
(the record layout itself is documented in formats/message.py). The numpy encoder
this replaced is the reference model tests/kernels/model_encode.py.

What this module writes into the records, byte for byte:

    properties   ``TAGS\x01<tags>\x02KEYS\x01<keys>\x02UNIQ_KEY\x01<uniq>\x02``: RocketMQ's
                 messageProperties2String, every pair ``name\x01value\x02``; user
                 properties come first, in their order, then TAGS, KEYS and UNIQ_KEY
                 (a name the user gave too keeps the user's place, with the batch's
                 value); a message without tags or keys has no such pair.
    UNIQ_KEY     formats.msgid.UniqKeyGenerator (store host address, pid, a random
                 hash, ms since the month began, a 16-bit counter) unless the batch
                 gives one; generated keys share one head and differ in a 4-hex-digit tail.
    born host    address + int32 port, 8 bytes (IPv4) or 20 (IPv6), per record.
    topic        V1 length byte, or V2 (2-byte length) for a topic over 127 bytes.

Size limits (StoreConfig): a body up to ``max_message_bytes``, properties up to
MAX_PROPERTIES_BYTES (Short.MAX_VALUE), a record up to ``max_record_bytes`` and never
more than a segment less the 8 bytes of a BLANK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from mqstore.errors import InvalidMessageError, MessageTooLargeError, PropertiesTooLongError
from mqstore.formats.message import BLANK_RECORD_BYTES, advances_queue_offset
from mqstore.formats.msgid import Host, UniqKeyGenerator, encode_host
from mqstore.formats.properties import MAX_PROPERTIES_BYTES
from mqstore.kernels._encode import RecordBuffer, distinct
from mqstore.store.clock import Clock
from mqstore.store.config import StoreConfig
from mqstore.store.messages import AUTO_QUEUE, Bodies, MessageBatch, Texts
from mqstore.store.topic_table import BatchTopics, TopicTable

if TYPE_CHECKING:
    from mqstore.store.encoded_batch import EncodedBatch

_DEFAULT_BORN_HOST = encode_host(Host("127.0.0.1", 0))
_INT32 = (-(1 << 31), (1 << 31) - 1)
_POOLED_BUFFERS = 8  # record buffers kept for reuse (one per concurrent append)
_POOLED_BYTES = 64 << 20  # a buffer grown past this by a huge batch is not kept


class PreparedBatch:
    """A batch validated and encoded outside the put lock: its records in ``records``
    (less the fields only the put lock knows) and the columns the lock needs to assign
    them. Topics are dense ids of the store's topic table (topic_table.py):
    ``topic_ids`` one per message, or None when every message is of ``topic_id``.
    ``BatchEncoder.recycle`` takes the buffer back once the records are written."""

    __slots__ = ("records", "n", "topic_ids", "topic_id", "names", "queue_ids", "advances", "unique_keys", "sizes")

    def __init__(self, records, n, topic_ids, topic_id, names, queue_ids, advances, unique_keys, sizes):  # noqa: PLR0913
        self.records: RecordBuffer | None = records
        self.n = n
        self.topic_ids: np.ndarray | None = topic_ids  # dense topic id per message
        self.topic_id: int = topic_id  # every message's, when topic_ids is None
        self.names: list[str] = names  # the topic table's names by id
        self.queue_ids: np.ndarray = queue_ids  # AUTO_QUEUE where the store picks
        self.advances: np.ndarray | None = advances  # None: every message takes a queue offset
        self.unique_keys: tuple[str, list[str]] = unique_keys  # (head, tails)
        self.sizes: np.ndarray = sizes

    @property
    def topics(self) -> list[str]:
        """The batch's distinct topics, in order of first appearance (made on demand)."""
        return self._distinct()[0]

    @property
    def topic_codes(self) -> np.ndarray:
        """Each message's index into ``topics`` (made on demand)."""
        return self._distinct()[1]

    def _distinct(self) -> tuple[list[str], np.ndarray]:
        if self.n == 0:
            return [], np.zeros(0, np.int64)
        if self.topic_ids is None:
            return [self.names[self.topic_id]], np.zeros(self.n, np.int64)
        codes = np.empty(self.n, np.int64)
        ids = distinct(self.topic_ids.tolist(), codes)
        return [self.names[i] for i in ids], codes


def _broadcast(value, n: int) -> list:
    if value is None or isinstance(value, (str, bytes, int, Host, dict)):
        return [value] * n
    if len(value) != n:
        raise InvalidMessageError(f"a column has {len(value)} values for {n} messages")
    return list(value)


def _column(value, n: int):
    """A tags or keys column for the encoder: one value for all, a list of ``n``, or
    a Texts as its ``(buffer, offsets)`` (read in place)."""
    if type(value) is Texts:
        if len(value) != n:
            raise InvalidMessageError(f"a column has {len(value)} values for {n} messages")
        return (value.buffer, value.offsets)
    if value is None or isinstance(value, (str, bytes, int, Host, dict)):
        return value
    if len(value) != n:
        raise InvalidMessageError(f"a column has {len(value)} values for {n} messages")
    return value if type(value) is list else list(value)


def _int_column(value, n: int, name: str) -> np.ndarray | int:
    if isinstance(value, (int, np.integer)):
        return int(value)
    try:
        arr = np.asarray(value, dtype=np.int64)
    except (TypeError, ValueError, OverflowError) as e:
        raise InvalidMessageError(f"{name} must be integers: {e}") from e
    if arr.shape != (n,):
        raise InvalidMessageError(f"{name} has {arr.size} values for {n} messages")
    return arr


def _int32(value, name: str):
    """A 32-bit field given as one integer must fit (a column wraps, as numpy casts it)."""
    if isinstance(value, int) and not _INT32[0] <= value <= _INT32[1]:
        raise OverflowError(f"Python integer {value} out of bounds for int32 ({name})")
    return value


def _check_no_separators(what: str, values) -> None:
    joined = "".join(filter(None, values))
    if "\x01" in joined or "\x02" in joined:
        raise InvalidMessageError(f"{what} must not contain the property separators \\x01 or \\x02")


def _explain_properties(tags, keys, tails: list[str], user: list | None, n: int) -> None:
    """Raise what the encoder found wrong in a batch's property text (a value not a
    str, a separator), with the checks and messages of the Python encoder."""
    _check_no_separators("tags", _texts(tags, n, "tags"))
    _check_no_separators("keys", _texts(keys, n, "keys"))
    _check_no_separators("unique keys", tails)
    for p in user or ():
        if p:
            _check_no_separators("property names and values", list(p.keys()) + list(p.values()))
    raise InvalidMessageError("property names and values must be strings")


def _texts(column, n: int, what: str) -> list:
    """A tags or keys column as the encoder got it, as a list of ``n`` values."""
    if type(column) is not tuple:
        return _broadcast(column, n)
    values, out = Texts(*column), []
    for i in range(n):
        try:
            out.append(values[i])
        except UnicodeDecodeError as e:
            raise InvalidMessageError(f"{what} of message {i} is not well-formed UTF-8: {e.reason}") from None
    return out


class BatchEncoder:
    """Validates and encodes the batches of one commitlog. Appends call ``prepare``
    outside the put lock, from any number of threads (the topics seen are only a
    cache of names already checked; record buffers come from a pool, one per
    append in flight, and go back with ``recycle``)."""

    def __init__(self, config: StoreConfig, clock: Clock, table: TopicTable | None = None) -> None:
        """``table``: the store's topic table (the CommitLog's); a new one if None."""
        self.config = config
        self._clock = clock
        self.table = table if table is not None else TopicTable()  # names checked once per store
        self._uniq = UniqKeyGenerator(config.store_host)
        self._store_host = encode_host(config.store_host)
        self._pool: list[RecordBuffer] = []

    def recycle(self, prep: PreparedBatch) -> None:
        """Take back a prepared batch's buffer once its records are written (or dropped)."""
        buf, prep.records = prep.records, None
        if buf is not None and len(self._pool) < _POOLED_BUFFERS:
            buf.release(_POOLED_BYTES)
            self._pool.append(buf)

    def prepare(self, batch: MessageBatch, topic_ids: BatchTopics | None = None) -> PreparedBatch:
        """Validate and encode a batch. Raises InvalidMessageError (or a subclass)
        for bad input; nothing is written anywhere. ``topic_ids``: the batch's topics
        as ids of ``table`` a caller already checked (TopicTable.sendable_ids, one per
        message or one for all); else the names are looked up here."""
        bodies = batch.bodies
        n = len(bodies)
        if n == 0:
            z = np.zeros(0, np.int64)
            return PreparedBatch(None, 0, z, -1, self.table.names, z, None, ("", []), z)
        if isinstance(bodies, (bytes, str)):
            raise InvalidMessageError("bodies must be a sequence of bytes, one per message")
        ids, tid, _ = topic_ids if topic_ids is not None else self.table.legal_ids(batch.topics, n)
        queue_ids = self._queue_ids(batch.queue_ids, n)
        uniq, uniq_first = self._unique_keys(batch.unique_keys, n)
        try:
            buf = self._pool.pop()
        except IndexError:
            buf = RecordBuffer()
        buf.start(n)
        prep = PreparedBatch(buf, n, ids, tid, self.table.names, queue_ids, None, uniq, None)
        try:
            self._encode(prep, batch, bodies, uniq_first)
        except BaseException:
            self.recycle(prep)
            raise
        return prep

    def adopt(self, batch: EncodedBatch, topic_ids: BatchTopics | None = None) -> PreparedBatch:
        """A batch a client encoded (checked by encoded_batch.parse_encoded) as a
        prepared one: its records copied into a pooled buffer with this store's host
        written in; queue ids, offsets and store timestamp are set under the put lock.
        ``topic_ids``: as ``prepare``'s (one per record)."""
        if topic_ids is None:
            tids = self.table.legal_ids(batch.topics, len(batch.topics)).ids
            topic_ids = BatchTopics(None, int(tids[0])) if len(tids) == 1 else BatchTopics(tids[batch.topic_codes], -1)
        try:
            buf = self._pool.pop()
        except IndexError:
            buf = RecordBuffer()
        try:
            buf.adopt(batch.data, batch.positions, batch.sizes, batch.sysflags, self._store_host)
        except BaseException:
            self._pool.append(buf)
            raise
        takes_offset = advances_queue_offset(batch.sysflags)
        return PreparedBatch(
            buf,
            batch.n,
            topic_ids.ids,
            topic_ids.tid,
            self.table.names,
            batch.queue_ids,
            None if takes_offset.all() else takes_offset,
            ("", []),
            batch.sizes,
        )

    def _encode(self, prep: PreparedBatch, batch: MessageBatch, bodies, uniq_first: int) -> None:
        n, buf = prep.n, prep.records
        head, tails = prep.unique_keys
        try:
            tags, keys = _column(batch.tags, n), _column(batch.keys, n)
            user = None if batch.properties is None else _broadcast(batch.properties, n)
            if head:
                ok = buf.properties(tags, keys, head.encode(), uniq_first, None, user)
            else:
                ok = buf.properties(tags, keys, b"", 0, tails, user)
            if ok < 0:
                _explain_properties(tags, keys, tails, user, n)
        except TypeError as e:
            raise InvalidMessageError(f"tags, keys, unique keys and properties must be strings: {e}") from e
        cols = np.empty((5, n), np.int64)  # the rows of _encode.COLUMNS
        sysflags = _int_column(batch.sysflags, n, "sysflags")
        cols[1] = sysflags
        takes_offset = advances_queue_offset(sysflags)
        prep.advances = None if takes_offset.all() else np.broadcast_to(takes_offset, (n,))
        cols[2] = self._born_timestamps(batch.born_timestamps, n)
        cols[0] = _int32(_int_column(batch.flags, n, "flags"), "flags")
        cols[3] = _int32(_int_column(batch.reconsume_times, n, "reconsume_times"), "reconsume_times")
        cols[4] = _int_column(batch.prepared_transaction_offsets, n, "prepared_transaction_offsets")
        born = self._born_hosts(batch.born_hosts, n)
        if type(bodies) is Bodies:  # one buffer, read in place (its offsets were checked)
            buf.body_buffer(bodies.buffer, bodies.offsets)
        else:
            try:
                buf.bodies(bodies if type(bodies) is list else list(bodies))
            except (TypeError, BufferError) as e:
                raise InvalidMessageError(f"every body must be bytes: {e}") from e
        sizes, body_lens, props_lens = np.empty((3, n), np.int64)
        fields = self.table.ids.fields  # by id: the ids index it directly
        if prep.topic_ids is None:
            fields = [fields[prep.topic_id]]
        _, max_body, max_props, max_size = buf.layout(
            fields, prep.topic_ids, born, self._store_host, sizes, body_lens, props_lens
        )
        cfg = self.config
        if (
            max_body > cfg.max_message_bytes
            or max_props > MAX_PROPERTIES_BYTES
            or max_size > min(cfg.max_record_bytes, cfg.segment_bytes - BLANK_RECORD_BYTES)
        ):
            self._refuse_sizes(sizes, body_lens, props_lens)
        buf.encode(cols, self._store_host)
        prep.sizes = sizes

    def _queue_ids(self, value, n: int) -> np.ndarray:
        if value is None:
            return np.full(n, AUTO_QUEUE, np.int64)
        try:
            queue_ids = np.broadcast_to(np.asarray(value, np.int64), (n,))
        except (TypeError, ValueError) as e:
            raise InvalidMessageError(f"queue_ids must be integers, one per message: {e}") from e
        if queue_ids.min() < AUTO_QUEUE or queue_ids.max() > self.config.max_queue_id:
            i = int(np.argmax((queue_ids < AUTO_QUEUE) | (queue_ids > self.config.max_queue_id)))
            raise InvalidMessageError(
                f"message {i}: queue id {int(queue_ids[i])} is outside 0..{self.config.max_queue_id}"
            )
        return queue_ids

    def _unique_keys(self, value, n: int) -> tuple[tuple[str, list[str]], int]:
        """UNIQ_KEYs as (head, tails): generated ones share a head; given ones have head ''.
        With them the counter value of the first generated tail (the encoder makes the tails)."""
        if value is None:
            head, first, tails = self._uniq.reserve_counted(n, now_ms=self._clock.now_ms())
            return (head, tails), first
        given = list(value)
        if len(given) != n:
            raise InvalidMessageError(f"unique_keys has {len(given)} values for {n} messages")
        if None in given:
            head, tails = self._uniq.reserve(n, now_ms=self._clock.now_ms())
            given = [u or head + t for u, t in zip(given, tails)]
        return ("", given), 0

    def _born_timestamps(self, value, n: int) -> np.ndarray | int:
        if value is None:
            return self._clock.now_ms()
        if not isinstance(value, (int, np.ndarray)) and None in list(value):
            now = self._clock.now_ms()
            value = [now if t is None else t for t in value]
        return _int_column(value, n, "born_timestamps")

    @staticmethod
    def _born_hosts(value, n: int) -> bytes | list[bytes]:
        """The encoded born host of every message (one for all, or one each)."""
        try:
            if value is None:
                return _DEFAULT_BORN_HOST
            if isinstance(value, Host):
                return encode_host(value)
            return [encode_host(h) for h in _broadcast(value, n)]
        except (ValueError, TypeError) as e:
            raise InvalidMessageError(f"bad born host: {e}") from e

    def _refuse_sizes(self, sizes: np.ndarray, body_lens: np.ndarray, props_lens: np.ndarray) -> None:
        """Raise for the first message over a limit (bodies first, then properties, then records)."""
        cfg = self.config
        limit = min(cfg.max_record_bytes, cfg.segment_bytes - BLANK_RECORD_BYTES)
        if (body_lens > cfg.max_message_bytes).any():
            i = int(np.argmax(body_lens > cfg.max_message_bytes))
            raise MessageTooLargeError(
                f"message {i}: body of {int(body_lens[i])} bytes exceeds max_message_bytes {cfg.max_message_bytes}"
            )
        if (props_lens > MAX_PROPERTIES_BYTES).any():
            i = int(np.argmax(props_lens > MAX_PROPERTIES_BYTES))
            raise PropertiesTooLongError(
                f"message {i}: properties of {int(props_lens[i])} bytes exceed {MAX_PROPERTIES_BYTES}"
            )
        i = int(np.argmax(sizes > limit))
        raise MessageTooLargeError(f"message {i}: record of {int(sizes[i])} bytes exceeds the limit of {limit} bytes")


class EncodedForSend(NamedTuple):
    """A batch a producer encoded (``encode_for_send``): the records to send as one
    buffer, and what the producer keeps to read the store's answer."""

    data: bytes  # the records, back to back
    n: int
    unique_keys: tuple[str, list[str]]  # (head, tails), as AppendResult.unique_key_parts
    queue_ids: np.ndarray  # as sent (AUTO_QUEUE: the store picks)
    sizes: np.ndarray  # each record's size; records lie back to back from 0


def encode_for_send(encoder: BatchEncoder, batch: MessageBatch) -> EncodedForSend:
    """A producer's side of an encoded append (encoded_batch.py): the batch checked
    and encoded by ``encoder`` (a BatchEncoder whose config carries the store's host
    and limits), with TOTALSIZE and queue ids set and the fields only the store knows
    left 0 (queue offset, physical offset, store timestamp)."""
    prep = encoder.prepare(batch)
    try:
        if prep.n == 0:
            raise InvalidMessageError("a batch holds at least one message")
        zeros = np.zeros(prep.n, np.int64)
        prep.records.patch(0, prep.n, prep.queue_ids, zeros, zeros, 0)
        data = bytes(memoryview(prep.records.data)[: prep.records.total])
        return EncodedForSend(data, prep.n, prep.unique_keys, prep.queue_ids, prep.sizes)
    finally:
        encoder.recycle(prep)


__all__ = ["BatchEncoder", "EncodedForSend", "PreparedBatch", "encode_for_send"]
