"""Consume queues in one RocksDB (RocketMQ 5 ``storeType=defaultRocksDB``): keys and values.

Layouts as RocketMQ's RocksDBConsumeQueueTable and RocksDBConsumeQueueOffsetTable
(big-endian; CTRL_1 is the byte 0x01, the topic is UTF-8).

A unit, in the default column family:

    key    offset  size  field
           0       4     topic length n
           4       1     CTRL_1
           5       n     topic
           5+n     1     CTRL_1
           6+n     4     queue id
           10+n    1     CTRL_1
           11+n    8     consume-queue offset         (19 + n bytes)
    value  0       8     commitlog offset of the record
           8       4     record size
           12      8     tags code
           20      8     store timestamp (ms)           (28 bytes)

A queue's min or max, in the column family ``offset``:

    key    0       4     topic length n
           4       1     CTRL_1
           5       n     topic
           5+n     1     CTRL_1
           6+n     3     b"max" or b"min"
           9+n     1     CTRL_1
           10+n    4     queue id                       (14 + n bytes)
    value  0       8     commitlog offset of the unit
           8       8     consume-queue offset of the unit (16 bytes)

"max" names the queue's last unit (its max offset is that offset + 1), "min" its
first kept unit. A queue made ahead without units has "max" (-1, -1). The entry of
topic ``CHECKPOINT_TOPIC``, "max", queue 0 holds in its commitlog-offset field the
commitlog end (offset + size) of the newest record dispatched (RocketMQ keeps the
max physical offset dispatched there to find it without a scan).

Keys of one queue share the prefix ``queue_prefix`` and sort by queue offset (the
offset is big-endian and never negative), so a queue's units are one key range:
``unit_key(prefix, lo)`` to ``unit_key(prefix, hi)`` (RocketMQ deletes a queue
between prefix + CTRL_0 and prefix + CTRL_2).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

CTRL_0, CTRL_1, CTRL_2 = b"\x00", b"\x01", b"\x02"
OFFSET_FAMILY = "offset"
CHECKPOINT_TOPIC = "CHECKPOINT_TOPIC"  # RocketMQ TopicValidator.RMQ_SYS_ROCKSDB_OFFSET_TOPIC
MAX, MIN = b"max", b"min"

VALUE = struct.Struct(">qiqq")
VALUE_SIZE = 28
assert VALUE.size == VALUE_SIZE
VALUE_DTYPE = np.dtype([("commitlog_offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8"), ("store_timestamp", ">i8")])
assert VALUE_DTYPE.itemsize == VALUE_SIZE
OFFSET_VALUE = struct.Struct(">qq")
_QID = struct.Struct(">i")
_QO = struct.Struct(">q")


def queue_prefix(topic: str, queue_id: int) -> bytes:
    """What every unit key of one queue starts with (all but the queue offset).

    >>> queue_prefix("T", 3).hex()
    '000000010154010000000301'
    """
    t = topic.encode()
    return struct.pack(">i", len(t)) + CTRL_1 + t + CTRL_1 + _QID.pack(queue_id) + CTRL_1


def unit_key(prefix: bytes, queue_offset: int) -> bytes:
    return prefix + _QO.pack(queue_offset)


def unit_keys(prefix: bytes, first: int, count: int) -> list[bytes]:
    """The keys of ``count`` units of one queue from ``first`` on."""
    offs = np.arange(first, first + count, dtype=">i8").view("V8").tolist()
    return [prefix + o for o in offs]


def split_unit_key(key: bytes) -> tuple[str, int, int]:
    """(topic, queue id, queue offset) of a unit key."""
    n = struct.unpack_from(">i", key)[0]
    topic = key[5 : 5 + n].decode()
    (qid,) = _QID.unpack_from(key, 6 + n)
    (qo,) = _QO.unpack_from(key, 11 + n)
    if len(key) != 19 + n or key[4:5] != CTRL_1 or key[5 + n : 6 + n] != CTRL_1 or key[10 + n : 11 + n] != CTRL_1:
        raise ValueError(f"not a consume-queue unit key: {key.hex()}")
    return topic, qid, qo


def encode_value(commitlog_offset: int, size: int, tags_code: int, store_timestamp: int) -> bytes:
    return VALUE.pack(commitlog_offset, size, tags_code, store_timestamp)


def encode_values(phys: np.ndarray, sizes: np.ndarray, tags: np.ndarray, times: np.ndarray) -> list[bytes]:
    """Many unit values at once (one bytes object each)."""
    out = np.empty(len(phys), VALUE_DTYPE)
    out["commitlog_offset"], out["size"], out["tags_code"], out["store_timestamp"] = phys, sizes, tags, times
    return out.view(f"V{VALUE_SIZE}").tolist()


def decode_values(values: list[bytes]) -> np.ndarray:
    """Unit values (VALUE_DTYPE), in the order given."""
    return np.frombuffer(b"".join(values), VALUE_DTYPE)


class PrefixTable:
    """Every queue's unit-key prefix as a row of one uint8 array (``rows[i, :lens[i]]``),
    so keys of many units are built with numpy, without Python per unit or per queue."""

    def __init__(self) -> None:
        self.rows = np.zeros((0, 16), np.uint8)
        self.lens = np.zeros(0, np.int64)
        self.count = 0

    def add(self, prefixes: list[bytes]) -> None:
        n = len(prefixes)
        width = max(self.rows.shape[1], max(map(len, prefixes), default=0))
        need = self.count + n
        if need > len(self.rows) or width > self.rows.shape[1]:  # grown by doubling: adds of one queue stay cheap
            rows = np.zeros((max(need, 2 * len(self.rows), 64), width), np.uint8)
            rows[: self.count, : self.rows.shape[1]] = self.rows[: self.count]
            lens = np.zeros(len(rows), np.int64)
            lens[: self.count] = self.lens[: self.count]
            self.rows, self.lens = rows, lens
        lens = np.fromiter(map(len, prefixes), np.int64, n)
        flat = np.frombuffer(b"".join(prefixes), np.uint8)
        row = np.repeat(np.arange(self.count, need), lens)
        col = np.arange(len(flat)) - np.repeat(np.cumsum(lens) - lens, lens)
        self.rows[row, col] = flat
        self.lens[self.count : need] = lens
        self.count = need

    def _build(self, pick: np.ndarray, extra: int, fill) -> list[bytes]:
        """One bytes object per row of ``pick``: ``fill(out, prefix rows, row numbers,
        prefix length)`` writes each length's keys (``extra`` bytes longer than the
        prefix) into ``out``."""
        n = len(pick)
        if not n:
            return []
        unit_len = self.lens[pick]
        lengths = np.unique(unit_len).tolist()
        out = np.empty(n, object) if len(lengths) > 1 else None
        for length in lengths:
            rows = np.flatnonzero(unit_len == length) if out is not None else np.arange(n)
            keys = np.empty((len(rows), length + extra), np.uint8)
            fill(keys, self.rows[pick[rows], :length], rows, length)
            built = keys.view(f"V{length + extra}").ravel().tolist()
            if out is None:
                return built
            out[rows] = built
        return out.tolist()

    def unit_keys(self, pick: np.ndarray, queue_offsets: np.ndarray) -> list[bytes]:
        """Key of each unit ``i``: queue ``pick[i]``'s prefix + its queue offset."""

        def fill(keys, prefixes, rows, length):
            keys[:, :length] = prefixes
            keys[:, length:] = queue_offsets[rows].astype(">i8").view(np.uint8).reshape(-1, 8)

        return self._build(pick, 8, fill)

    def offset_keys(self, pick: np.ndarray, which: bytes) -> list[bytes]:
        """Key of the ``MAX`` or ``MIN`` entry of each queue in ``pick``: the prefix's
        topic part, ``which``, CTRL_1, the prefix's queue id (see the table above)."""
        tag = np.frombuffer(which + CTRL_1, np.uint8)

        def fill(keys, prefixes, rows, length):
            topic_end = length - 5  # prefix: 4 + 1 + n + 1 | queue id 4 | CTRL_1
            keys[:, :topic_end] = prefixes[:, :topic_end]
            keys[:, topic_end : topic_end + 4] = tag
            keys[:, topic_end + 4 :] = prefixes[:, topic_end : length - 1]

        return self._build(pick, 3, fill)


def encode_unit_keys(prefixes: list[bytes], pick: np.ndarray, queue_offsets: np.ndarray) -> list[bytes]:
    """Key of each unit ``i``: ``prefixes[pick[i]]`` + its queue offset (PrefixTable's, for a list)."""
    table = PrefixTable()
    table.add(prefixes)
    return table.unit_keys(pick, queue_offsets)


def encode_offset_values(phys: np.ndarray, queue_offsets: np.ndarray) -> list[bytes]:
    """Many offset-table values at once."""
    out = np.empty((len(phys), 2), ">i8")
    out[:, 0], out[:, 1] = phys, queue_offsets
    return out.view("V16").ravel().tolist()


def offset_key(topic: str, queue_id: int, which: bytes) -> bytes:
    """Key of a queue's ``MAX`` or ``MIN`` entry.

    >>> offset_key("T", 3, MAX).hex()
    '000000010154016d61780100000003'
    """
    t = topic.encode()
    return struct.pack(">i", len(t)) + CTRL_1 + t + CTRL_1 + which + CTRL_1 + _QID.pack(queue_id)


def split_offset_key(key: bytes) -> tuple[str, int, bytes]:
    """(topic, queue id, MAX or MIN) of an offset-table key."""
    n = struct.unpack_from(">i", key)[0]
    if len(key) != 14 + n or key[4:5] != CTRL_1 or key[5 + n : 6 + n] != CTRL_1 or key[9 + n : 10 + n] != CTRL_1:
        raise ValueError(f"not a consume-queue offset key: {key.hex()}")
    which = key[6 + n : 9 + n]
    if which not in (MAX, MIN):
        raise ValueError(f"not a consume-queue offset key: {key.hex()}")
    return key[5 : 5 + n].decode(), _QID.unpack_from(key, 10 + n)[0], which


@dataclass(frozen=True)
class OffsetEntries:
    """Offset-table entries parsed in bulk: per entry its topic (an index into
    ``topics``, which are sorted), queue id, MAX or MIN, and value."""

    topics: list[str]
    topic_rank: np.ndarray
    queue_ids: np.ndarray
    is_max: np.ndarray
    phys: np.ndarray
    queue_offsets: np.ndarray


def parse_offset_entries(keys: list[bytes], values: list[bytes]) -> OffsetEntries:
    """``split_offset_key`` and ``OFFSET_VALUE`` over many entries, with numpy (the
    checkpoint entry excluded); ValueError if a key is not an offset key."""
    lens = np.fromiter(map(len, keys), np.int64, len(keys))
    buf = np.frombuffer(b"".join(keys), np.uint8)
    start = np.concatenate(([0], np.cumsum(lens)[:-1]))

    def be32(at: np.ndarray) -> np.ndarray:
        return buf[at[:, None] + np.arange(4)].copy().view(">i4").ravel().astype(np.int64)

    n = be32(start)
    tag = buf[start[:, None] + 6 + n[:, None] + np.arange(3)]
    is_max = (tag == np.frombuffer(MAX, np.uint8)).all(axis=1)
    is_min = (tag == np.frombuffer(MIN, np.uint8)).all(axis=1)
    ctrl = buf[np.stack([start + 4, start + 5 + n, start + 9 + n], axis=1)]
    if (lens != 14 + n).any() or not (is_max | is_min).all() or (ctrl != CTRL_1[0]).any():
        bad = int(np.flatnonzero((lens != 14 + n) | ~(is_max | is_min) | (ctrl != CTRL_1[0]).any(axis=1))[0])
        raise ValueError(f"not a consume-queue offset key: {keys[bad].hex()}")
    names = np.array([k[5 : 5 + m] for k, m in zip(keys, n.tolist())], dtype=object)
    # Keys come sorted (a scan of the column family): a topic's entries are together,
    # so a new topic is a change from the entry before; otherwise sort them.
    change = np.concatenate(([True], names[1:] != names[:-1]))
    heads = np.flatnonzero(change)
    if len(set(names[heads].tolist())) == len(heads):
        topics, rank = names[heads], np.cumsum(change) - 1
    else:
        topics, rank = np.unique(names, return_inverse=True)
    vals = np.frombuffer(b"".join(values), ">i8").reshape(-1, 2).astype(np.int64)
    return OffsetEntries(
        [t.decode() for t in topics.tolist()],
        rank.astype(np.int64),
        be32(start + 10 + n),
        is_max,
        vals[:, 0],
        vals[:, 1],
    )


CHECKPOINT_KEY = offset_key(CHECKPOINT_TOPIC, 0, MAX)

__all__ = [
    "CHECKPOINT_KEY",
    "CHECKPOINT_TOPIC",
    "MAX",
    "MIN",
    "OFFSET_FAMILY",
    "OFFSET_VALUE",
    "OffsetEntries",
    "PrefixTable",
    "VALUE",
    "VALUE_DTYPE",
    "VALUE_SIZE",
    "decode_values",
    "encode_offset_values",
    "encode_unit_keys",
    "encode_value",
    "encode_values",
    "offset_key",
    "parse_offset_entries",
    "queue_prefix",
    "split_offset_key",
    "split_unit_key",
    "unit_key",
    "unit_keys",
]
