"""CommitLog message records (RocketMQ MessageExtEncoder / MessageDecoder).

Big-endian and signed throughout. One record, version 1 magic, IPv4 hosts; a field
after BORNHOST moves by 12 bytes for each IPv6 host (16-byte address instead of 4):

    offset  size   field                        notes
    0       4      total_size                   whole record, this field included
    4       4      magic                        V1 0xDAA320A7, V2 0xDAA320AB, BLANK 0xCBD43194
    8       4      body_crc                     zlib.crc32(body) & 0x7FFFFFFF; 0 for an empty body
    12      4      queue_id
    16      4      flag                         opaque producer flag
    20      8      queue_offset                 0 for prepared / rollback transaction records
    28      8      physical_offset              equals the record's position in the commitlog
    36      4      sysflag                      SysFlag bits below
    40      8      born_timestamp               producer ms
    48      8|20   born_host                    address + int32 port; 20 if SYSFLAG & BORNHOST_V6
    56|68   8      store_timestamp              broker ms, taken under the put lock
    ..      8|20   store_host                   20 if SYSFLAG & STOREHOST_V6
    ..      4      reconsume_times
    ..      8      prepared_transaction_offset
    ..      4+n    body_len, body
    ..      1+n    topic_len (signed byte), topic   V2: 2-byte length
    ..      2+n    props_len (signed short), props  see properties.py

The fixed part is 91 bytes for V1 with IPv4 hosts. A BLANK record ends a segment: only
its 8 bytes (total_size = bytes left in the segment, magic BLANK) are written, and a
record is never started unless ``size + 8`` bytes remain, so no record spans segments.

mqstore writes V1 only (topics are at most 127 characters) and reads V1 and V2.
"""

from __future__ import annotations

import enum
import functools
import struct
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from mqstore.errors import DecodeError
from mqstore.formats.crc import CRC_MASK, body_crc, crc32
from mqstore.formats.msgid import Host, decode_host, offset_msg_id_prefix
from mqstore.formats.properties import parse_properties

MAGIC_V1 = -626843481  # 0xDAA320A7
MAGIC_V2 = -626843477  # 0xDAA320AB
BLANK_MAGIC = -875286124  # 0xCBD43194
BLANK_RECORD_BYTES = 8  # END_FILE_MIN_BLANK_LENGTH: a record needs size + 8 bytes free
MAX_TOPIC_BYTES_V1 = 127


class SysFlag(enum.IntFlag):
    """SYSFLAG bits (RocketMQ MessageSysFlag)."""

    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TRANSACTION_PREPARED = 0x4
    TRANSACTION_COMMIT = 0x8
    TRANSACTION_ROLLBACK = 0xC  # both transaction bits: a two-bit type, not a flag
    BORNHOST_V6 = 0x10
    STOREHOST_V6 = 0x20
    NEED_UNWRAP = 0x40
    INNER_BATCH = 0x80


TRANSACTION_TYPE_MASK = 0xC
TRANSACTION_NOT_TYPE = 0x0
COMPRESSION_TYPE_MASK = 0x700  # 1 LZ4, 2 ZSTD, 3 ZLIB, 0 legacy (read as ZLIB)


def transaction_type(sysflag: int) -> int:
    """NOT_TYPE 0, PREPARED 0x4, COMMIT 0x8 or ROLLBACK 0xC."""
    return sysflag & TRANSACTION_TYPE_MASK


def advances_queue_offset(sysflag: int) -> bool:
    """Prepared and rollback records keep queue offset 0 and get no consume-queue unit."""
    return transaction_type(sysflag) in (0x0, 0x8)


def host_bytes(sysflag: int, flag: int) -> int:
    return 20 if sysflag & flag else 8


def record_size(*, body_len: int, topic_len: int, props_len: int, sysflag: int = 0, v2: bool = False) -> int:
    """TOTALSIZE of a record (RocketMQ calMsgLength)."""
    return (
        68
        + host_bytes(sysflag, SysFlag.BORNHOST_V6)
        + host_bytes(sysflag, SysFlag.STOREHOST_V6)
        + 4
        + body_len
        + (2 if v2 else 1)
        + topic_len
        + 2
        + props_len
    )


@functools.cache
def header_dtype(born_v6: bool, store_v6: bool) -> np.dtype:
    """The record's fixed head up to and including body_len, as a numpy record."""
    return np.dtype(
        [
            ("total_size", ">i4"),
            ("magic", ">i4"),
            ("body_crc", ">i4"),
            ("queue_id", ">i4"),
            ("flag", ">i4"),
            ("queue_offset", ">i8"),
            ("physical_offset", ">i8"),
            ("sysflag", ">i4"),
            ("born_timestamp", ">i8"),
            ("born_host", f"V{20 if born_v6 else 8}"),
            ("store_timestamp", ">i8"),
            ("store_host", f"V{20 if store_v6 else 8}"),
            ("reconsume_times", ">i4"),
            ("prepared_transaction_offset", ">i8"),
            ("body_len", ">i4"),
        ]
    )


def blank_record(remaining: int) -> bytes:
    """The 8 bytes that end a segment with ``remaining`` bytes left."""
    return struct.pack(">ii", remaining, BLANK_MAGIC)


class MessageRecord(NamedTuple):
    """One decoded record, every field as RocketMQ's MessageDecoder reads it."""

    total_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sysflag: int
    born_timestamp: int
    born_host: Host
    store_timestamp: int
    store_host: Host
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: dict[str, str]

    @property
    def msg_id(self) -> str:
        """The offset msgId (store host + physical offset)."""
        return f"{offset_msg_id_prefix(self.store_host)}{self.physical_offset & 0xFFFFFFFFFFFFFFFF:016X}"

    @property
    def tags(self) -> str | None:
        return self.properties.get("TAGS")

    @property
    def keys(self) -> str | None:
        return self.properties.get("KEYS")

    @property
    def unique_key(self) -> str | None:
        return self.properties.get("UNIQ_KEY")


_HEAD = struct.Struct(">iiiiiqqiq")  # total_size .. born_timestamp (48 bytes)
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I16 = struct.Struct(">h")
_SIZE_MAGIC = struct.Struct(">ii")


def decode_record(buf: bytes | memoryview, pos: int = 0, *, check_crc: bool = True) -> MessageRecord:
    """Decode the record at ``pos``; DecodeError says what is wrong and where.

    Validates as RocketMQ's checkMessageAndReturnSize does: magic, every length
    inside the record, TOTALSIZE equal to the computed size, and the body CRC
    (when ``check_crc`` and the body is not empty). A BLANK record is an error here:
    callers that walk segments use :func:`scan_records`.
    """
    end = len(buf)
    try:
        total, magic, crc, queue_id, flag, queue_offset, phys, sysflag, born_ts = _HEAD.unpack_from(buf, pos)
    except struct.error as e:
        raise DecodeError(f"record at {pos}: fewer than 48 bytes left") from e
    if magic == BLANK_MAGIC:
        raise DecodeError(f"record at {pos}: BLANK end-of-segment record, not a message")
    if magic not in (MAGIC_V1, MAGIC_V2):
        raise DecodeError(f"record at {pos}: unknown magic code {magic & 0xFFFFFFFF:#010x}")
    if total < 0 or pos + total > end:
        raise DecodeError(f"record at {pos}: size {total} runs past the end of the data ({end})")
    try:
        p = pos + 48
        bl = host_bytes(sysflag, SysFlag.BORNHOST_V6)
        born_host = decode_host(buf[p : p + bl])
        p += bl
        store_ts = _I64.unpack_from(buf, p)[0]
        p += 8
        sl = host_bytes(sysflag, SysFlag.STOREHOST_V6)
        store_host = decode_host(buf[p : p + sl])
        p += sl
        reconsume, prepared = struct.unpack_from(">iq", buf, p)
        p += 12
        body_len = _I32.unpack_from(buf, p)[0]
        p += 4
        if body_len < 0 or p + body_len > pos + total:
            raise DecodeError(f"record at {pos}: body length {body_len} does not fit the record")
        body = bytes(buf[p : p + body_len])
        p += body_len
        if magic == MAGIC_V2:
            topic_len = struct.unpack_from(">h", buf, p)[0]
            p += 2
        else:
            topic_len = struct.unpack_from(">b", buf, p)[0]
            p += 1
        if topic_len < 0:
            raise DecodeError(f"record at {pos}: negative topic length {topic_len}")
        topic = bytes(buf[p : p + topic_len]).decode("utf-8")
        p += topic_len
        props_len = _I16.unpack_from(buf, p)[0]
        p += 2
        if props_len < 0:
            raise DecodeError(f"record at {pos}: negative properties length {props_len}")
        props = bytes(buf[p : p + props_len]).decode("utf-8") if props_len else ""
        p += props_len
    except (struct.error, UnicodeDecodeError, ValueError) as e:
        if isinstance(e, DecodeError):
            raise
        raise DecodeError(f"record at {pos}: {e}") from e
    if p - pos != total:
        raise DecodeError(f"record at {pos}: TOTALSIZE {total} but the fields add up to {p - pos}")
    if check_crc and body_len and crc32(body) & CRC_MASK != crc:
        raise DecodeError(f"record at {pos}: body CRC mismatch (stored {crc})")
    return MessageRecord(
        total, magic, crc, queue_id, flag, queue_offset, phys, sysflag, born_ts, born_host,
        store_ts, store_host, reconsume, prepared, body, topic, parse_properties(props),
    )  # fmt: skip


class ScanOutcome(enum.Enum):
    """Why a scan stopped."""

    LIMIT = "limit"  # reached the requested end or record count; more may follow
    END_OF_SEGMENT = "end_of_segment"  # a BLANK record: continue at the next segment
    INVALID = "invalid"  # bad magic, size, layout or CRC: the valid data ends here


class ScanResult(NamedTuple):
    """Records found by :func:`scan_records`, as parallel arrays (one entry each)."""

    positions: np.ndarray  # int64 byte positions within the scanned buffer
    sizes: np.ndarray  # int64 TOTALSIZE
    stop: int  # where the next record would start / the first invalid byte
    outcome: ScanOutcome
    reason: str  # why INVALID (empty otherwise)


MIN_RECORD_BYTES = record_size(body_len=0, topic_len=0, props_len=0)


def _be_int(u8: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """Gather big-endian signed ints of ``width`` bytes at byte offsets ``at``."""
    v = np.zeros(at.shape, np.int64)
    for k in range(width):
        v = (v << 8) | u8[at + k]
    sign = np.int64(1) << (8 * width - 1)
    return (v ^ sign) - sign


def scan_records(
    buf: bytes | memoryview,
    start: int,
    end: int,
    *,
    check_crc: bool = True,
    max_records: int | None = None,
    max_bytes: int | None = None,
    base_offset: int | None = None,
) -> ScanResult:
    """Walk records from ``start`` up to ``end`` (the end of written data) and
    validate them in bulk.

    The walk follows TOTALSIZE (the only sequential part); layout, lengths and CRCs
    are then checked for all records at once. Stops at a BLANK record
    (END_OF_SEGMENT), at the first invalid record (INVALID: nothing from there on is
    trusted), or with LIMIT at ``end``, after ``max_records`` or before a record that
    would take the walk past ``start + max_bytes``. With ``base_offset`` (the
    buffer's commitlog offset) a record whose PHYSICALOFFSET field is not its own
    position is invalid too: stale bytes left past a truncation never pass.
    """
    positions: list[int] = []
    unpack = _SIZE_MAGIC.unpack_from
    pos = start
    outcome, reason = ScanOutcome.LIMIT, ""
    budget = max_records if max_records is not None else -1
    byte_limit = start + max_bytes if max_bytes is not None else end
    while pos + 8 <= end and budget != 0:
        size, magic = unpack(buf, pos)
        if magic == BLANK_MAGIC:
            outcome = ScanOutcome.END_OF_SEGMENT
            break
        if magic != MAGIC_V1 and magic != MAGIC_V2:
            outcome, reason = ScanOutcome.INVALID, f"unknown magic code {magic & 0xFFFFFFFF:#010x} at {pos}"
            break
        if size < MIN_RECORD_BYTES or pos + size > end:
            outcome, reason = ScanOutcome.INVALID, f"record at {pos} has size {size}, past the end of data {end}"
            break
        if pos + size > byte_limit and positions:
            break
        positions.append(pos)
        pos += size
        budget -= 1
    pos_arr = np.array(positions, np.int64)
    if not positions:
        return ScanResult(pos_arr, pos_arr.copy(), pos, outcome, reason)
    u8 = np.frombuffer(buf, np.uint8)
    sizes = _be_int(u8, pos_arr, 4)
    rec_end = pos_arr + sizes
    magic = _be_int(u8, pos_arr + 4, 4)
    sysflag = _be_int(u8, pos_arr + 36, 4)
    body_len_at = pos_arr + 68 + np.where(sysflag & 0x10, 20, 8) + np.where(sysflag & 0x20, 20, 8)
    bad = body_len_at + 4 > rec_end
    body_len_at = np.where(bad, pos_arr, body_len_at)
    body_len = _be_int(u8, body_len_at, 4)
    bad |= (body_len < 0) | (body_len_at + 4 + body_len + 3 > rec_end)
    topic_len_at = np.where(bad, pos_arr, body_len_at + 4 + body_len)
    v2 = magic == MAGIC_V2
    topic_len = np.where(v2, _be_int(u8, topic_len_at, 2), _be_int(u8, topic_len_at, 1))
    props_len_at = topic_len_at + np.where(v2, 2, 1) + topic_len
    bad |= (topic_len < 0) | (props_len_at + 2 > rec_end)
    props_len_at = np.where(bad, pos_arr, props_len_at)
    props_len = _be_int(u8, props_len_at, 2)
    bad |= (props_len < 0) | (props_len_at + 2 + props_len != rec_end)
    if base_offset is not None:
        bad |= _be_int8(u8, pos_arr + 28) != pos_arr + base_offset
    first_bad = int(np.argmax(bad)) if bad.any() else len(positions)
    if first_bad < len(positions):
        reason = f"record at {positions[first_bad]}: fields disagree with TOTALSIZE {int(sizes[first_bad])} or its position"
    if check_crc and first_bad:
        n = first_bad
        stored = _be_int(u8, pos_arr[:n] + 8, 4)
        mv = memoryview(buf)
        crc = crc32
        starts = (body_len_at[:n] + 4).tolist()
        lens = body_len[:n].tolist()
        actual = np.fromiter(
            (crc(mv[a : a + n_]) & CRC_MASK if n_ else 0 for a, n_ in zip(starts, lens)), np.int64, n
        )
        mismatch = np.flatnonzero(actual != stored)
        if mismatch.size:
            first_bad = int(mismatch[0])
            reason = f"record at {positions[first_bad]}: body CRC mismatch"
    if first_bad < len(positions):
        return ScanResult(pos_arr[:first_bad], sizes[:first_bad], positions[first_bad], ScanOutcome.INVALID, reason)
    return ScanResult(pos_arr, sizes, pos, outcome, reason)


class RecordFields(NamedTuple):
    """Columns of the records at ``positions`` (already validated by a scan)."""

    queue_ids: np.ndarray
    queue_offsets: np.ndarray
    sysflags: np.ndarray
    store_timestamps: np.ndarray
    topic_codes: np.ndarray  # index into ``topics`` for each record
    topics: list[str]


def record_fields(buf: bytes | memoryview, positions: np.ndarray) -> RecordFields:
    """Gather the fields that key a record (topic, queue) for many records at once.

    Topics repeat, so each distinct topic is decoded once: topic bytes are gathered
    into a fixed-width matrix and made unique as rows.
    """
    n = len(positions)
    if n == 0:
        empty = np.zeros(0, np.int64)
        return RecordFields(empty, empty, empty, empty, empty, [])
    u8 = np.frombuffer(buf, np.uint8)
    magic = _be_int(u8, positions + 4, 4)
    sysflag = _be_int(u8, positions + 36, 4)
    born = np.where(sysflag & 0x10, 20, 8)
    store_ts = _be_int8(u8, positions + 48 + born)
    body_len_at = positions + 68 + born + np.where(sysflag & 0x20, 20, 8)
    topic_len_at = body_len_at + 4 + _be_int(u8, body_len_at, 4)
    v2 = magic == MAGIC_V2
    topic_len = np.where(v2, _be_int(u8, topic_len_at, 2), _be_int(u8, topic_len_at, 1))
    topic_at = topic_len_at + np.where(v2, 2, 1)
    width = int(topic_len.max())
    cols = np.arange(width)
    idx = np.minimum(topic_at[:, None] + cols, len(u8) - 1)
    mat = np.where(cols < topic_len[:, None], u8[idx], 0).astype(np.uint8)
    rows = np.ascontiguousarray(mat).view(f"V{width}").ravel() if width else np.zeros(n, "V1")
    uniq, codes = np.unique(rows, return_inverse=True)
    topics = [bytes(u).rstrip(b"\x00").decode("utf-8", "replace") for u in uniq.tolist()] if width else [""]
    return RecordFields(
        _be_int(u8, positions + 12, 4),
        _be_int8(u8, positions + 20),
        sysflag,
        store_ts,
        codes.astype(np.int64).ravel(),
        topics,
    )


def _be_int8(u8: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Gather big-endian int64 at byte offsets ``at``."""
    hi = _be_int(u8, at, 4)
    lo = _be_int(u8, at + 4, 4) & 0xFFFFFFFF
    return (hi << 32) | lo


def topic_field(topic: str) -> bytes:
    """A V1 record's topic field: the length byte, then the UTF-8 name."""
    raw = topic.encode("utf-8")
    if len(raw) > MAX_TOPIC_BYTES_V1:
        raise ValueError(f"a V1 topic has at most {MAX_TOPIC_BYTES_V1} bytes, got {len(raw)}")
    return bytes((len(raw),)) + raw


class PreparedRecords:
    """Records encoded up to the fields known only under the put lock.

    RocketMQ encodes a message before it takes the put lock and patches QUEUEOFFSET,
    PHYSICALOFFSET and STORETIMESTAMP afterwards; this class does the same for a whole
    batch with numpy, and patches QUEUEID too (automatic queues are picked under the
    lock). All records of one instance share the host families (IPv4 or
    IPv6 born host, IPv4 or IPv6 store host); callers split mixed batches into runs.
    ``topics`` holds each record's topic field (:func:`topic_field`); repeating the
    same object for every message of a topic costs nothing. ``topic_lens`` (the
    topics' byte lengths) may be given when the caller knows them already.
    Not thread-safe: one caller (the CommitLog under its put lock) renders it.
    """

    def __init__(
        self,
        *,
        topics: Sequence[bytes],
        topic_lens: np.ndarray | None = None,
        bodies: Sequence[bytes],
        properties: Sequence[bytes],
        flags: np.ndarray | int,
        sysflags: np.ndarray | int,
        born_timestamps: np.ndarray | int,
        born_hosts: Sequence[bytes] | bytes,
        store_host: bytes,
        reconsume_times: np.ndarray | int = 0,
        prepared_transaction_offsets: np.ndarray | int = 0,
    ) -> None:
        n = len(bodies)
        born_v6 = len(born_hosts if isinstance(born_hosts, bytes) else born_hosts[0]) == 20 if n else False
        store_v6 = len(store_host) == 20
        dtype = header_dtype(born_v6, store_v6)
        self.body_lens = np.fromiter(map(len, bodies), np.int64, n)
        props_lens = np.fromiter(map(len, properties), np.int64, n)
        if topic_lens is None:
            topic_lens = np.fromiter(map(len, topics), np.int64, n) - 1
        self.props_lens = props_lens
        self.sizes = dtype.itemsize + self.body_lens + 1 + topic_lens + 2 + props_lens
        head = np.zeros(n, dtype)
        head["total_size"] = self.sizes
        head["magic"] = MAGIC_V1
        head["body_crc"] = np.fromiter(map(crc32, bodies), np.int64, n) & CRC_MASK
        head["flag"] = flags
        v6_bits = (SysFlag.BORNHOST_V6 if born_v6 else 0) | (SysFlag.STOREHOST_V6 if store_v6 else 0)
        head["sysflag"] = (np.asarray(sysflags, np.int64) & ~0x30) | v6_bits
        head["born_timestamp"] = born_timestamps
        head["born_host"] = np.void(born_hosts) if isinstance(born_hosts, bytes) else np.array(born_hosts, dtype["born_host"])
        head["store_host"] = np.void(store_host)
        head["reconsume_times"] = reconsume_times
        head["prepared_transaction_offset"] = prepared_transaction_offsets
        head["body_len"] = self.body_lens
        self.head = head
        self._void = f"V{dtype.itemsize}"
        self.bodies = bodies
        self.topics = topics
        self.props_len_bytes = props_lens.astype(">u2").view("V2").tolist()
        self.properties = properties

    def __len__(self) -> int:
        return len(self.bodies)

    def render(
        self,
        lo: int,
        hi: int,
        *,
        physical_offsets: np.ndarray,
        queue_ids: np.ndarray,
        queue_offsets: np.ndarray,
        store_timestamp: int,
    ) -> bytes:
        """The bytes of records ``lo:hi`` back to back, with the patched fields."""
        head = self.head[lo:hi]
        head["queue_id"] = queue_ids
        head["physical_offset"] = physical_offsets
        head["queue_offset"] = queue_offsets
        head["store_timestamp"] = store_timestamp
        pieces: list[bytes | None] = [None] * (5 * (hi - lo))
        pieces[0::5] = head.view(self._void).tolist()
        pieces[1::5] = self.bodies[lo:hi]
        pieces[2::5] = self.topics[lo:hi]
        pieces[3::5] = self.props_len_bytes[lo:hi]
        pieces[4::5] = self.properties[lo:hi]
        return b"".join(pieces)  # type: ignore[arg-type]


__all__ = [
    "BLANK_MAGIC",
    "BLANK_RECORD_BYTES",
    "MAGIC_V1",
    "MAGIC_V2",
    "MIN_RECORD_BYTES",
    "MessageRecord",
    "PreparedRecords",
    "RecordFields",
    "ScanOutcome",
    "ScanResult",
    "SysFlag",
    "advances_queue_offset",
    "blank_record",
    "body_crc",
    "decode_record",
    "header_dtype",
    "record_fields",
    "record_size",
    "scan_records",
    "topic_field",
    "transaction_type",
]
