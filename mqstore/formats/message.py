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
    ..      1+n    topic_len (signed byte), topic   V2: 2+n, topic_len a signed short
    ..      2+n    props_len (signed short), props  see properties.py

The fixed part is 91 bytes for V1 with IPv4 hosts. A BLANK record ends a segment: only
its 8 bytes (total_size = bytes left in the segment, magic BLANK) are written, and a
record is never started unless ``size + 8`` bytes remain, so no record spans segments.

Versions (RocketMQ 5.1+ MessageVersion): a V2 record (magic 0xDAA320AB) differs from
V1 only in the topic length field, 2 bytes (big-endian int16) instead of 1, so every
field after it moves by one byte and TOTALSIZE is one larger. RocketMQ 5 writes V2
exactly when the topic is longer than 127 characters (``autoMessageVersionOnTopicLen``;
only ``%RETRY%`` / ``%DLQ%`` topics may be, up to 255: names.check_topic); a V1
topic length byte read as signed could not hold more. mqstore does the same: V1 (the
bytes of 4.9 and 5.x) for a topic of at most 127 bytes, V2 for a longer one
(:func:`topic_field`, :class:`PreparedRecords`). Topics are ASCII, so characters and
UTF-8 bytes agree. A 200-character ``%RETRY%...`` topic, IPv4 hosts::

    4  magic 0xDAA320AB ... body_len, body | 00 C8 | 200 topic bytes | props_len, props

Every reader here (decode_record, scan_records and the RecordFields it gathers for
recovery, dispatch, verify and the Spark columns) accepts both magics.
"""

from __future__ import annotations

import enum
import functools
import struct
import threading
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from mqstore.errors import DecodeError
from mqstore.formats.crc import CRC_MASK, body_crc, crc32
from mqstore.formats.msgid import Host, decode_host, offset_msg_id_prefix
from mqstore.formats.properties import parse_properties
from mqstore.kernels import _decode, _encode, _intern, _scan

MAGIC_V1 = -626843481  # 0xDAA320A7
MAGIC_V2 = -626843477  # 0xDAA320AB
BLANK_MAGIC = -875286124  # 0xCBD43194
BLANK_RECORD_BYTES = 8  # END_FILE_MIN_BLANK_LENGTH: a record needs size + 8 bytes free
MAX_TOPIC_BYTES_V1 = 127  # a longer topic is written as V2
MAX_TOPIC_BYTES_V2 = 32767  # the int16 topic length of V2 (check_topic allows 255)


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


def advances_queue_offset(sysflags: int | np.ndarray) -> bool | np.ndarray:
    """NOT_TYPE and COMMIT records take a queue offset (and later a consume-queue
    unit); prepared and rollback ones keep queue offset 0. Works on arrays too."""
    return (np.asarray(sysflags) & TRANSACTION_TYPE_MASK) % 8 == 0


def host_bytes(sysflag: int, flag: int) -> int:
    return 20 if sysflag & flag else 8


def record_size(*, body_len: int, topic_len: int, props_len: int, sysflag: int = 0, v2: bool | None = None) -> int:
    """TOTALSIZE of a record (RocketMQ calMsgLength); ``v2`` None: the version
    mqstore writes for a topic of ``topic_len`` bytes (V2 above 127)."""
    if v2 is None:
        v2 = topic_len > MAX_TOPIC_BYTES_V1
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
_SIZE_MAGIC = struct.Struct(">ii")  # total_size, magic: the head every record and BLANK starts with
_MAGIC_AT = 4  # byte offsets in a record of the two fields a record signature is made of
_PHYSICAL_OFFSET_AT = 28
_MAGIC_FIRST_BYTE = 0xDA  # both message magics start with it (big-endian)
assert (MAGIC_V1 & 0xFFFFFFFF) >> 24 == (MAGIC_V2 & 0xFFFFFFFF) >> 24 == _MAGIC_FIRST_BYTE


def record_head(buf: bytes | memoryview, pos: int = 0) -> tuple[int, int]:
    """``(total_size, magic)``: the first 8 bytes of the record or BLANK at ``pos``
    (struct.error if fewer than 8 bytes are left)."""
    return _SIZE_MAGIC.unpack_from(buf, pos)


def head_holds_data(buf: bytes | memoryview, pos: int = 0) -> bool:
    """False for an unwritten head: the 8 bytes at ``pos`` (zero-padded when fewer
    are left) hold total_size 0 and no message magic, as in a pre-allocated,
    zero-filled segment. Recovery and verify decide by it whether a segment holds data."""
    size, magic = _SIZE_MAGIC.unpack(bytes(buf[pos : pos + 8]).ljust(8, b"\0"))
    return size != 0 or magic in (MAGIC_V1, MAGIC_V2)


def record_signatures(buf: bytes | memoryview, lo: int, hi: int, base_offset: int) -> np.ndarray:
    """The positions ``p`` in ``[lo, hi)`` that carry a record signature: a message
    magic (V1 or V2) at ``p + 4`` and a PHYSICALOFFSET equal to ``base_offset + p``
    at ``p + 28`` (12 bytes no body is likely to hold by chance; callers validate
    the record found there). Positions too close to the end of ``buf`` for a whole
    minimal record (``p + MIN_RECORD_BYTES > len(buf)``) are not looked at.
    Recovery (to split a segment), verify (to resynchronise after damage) and the
    Spark jobs (to start a chunk) search with it; int64 positions, in order."""
    size = len(buf)
    hi = min(hi, size - MIN_RECORD_BYTES + 1)
    if hi <= lo:
        return np.zeros(0, np.int64)
    u8 = np.frombuffer(buf, np.uint8, count=hi - lo, offset=lo + _MAGIC_AT)
    cand = np.flatnonzero(u8 == _MAGIC_FIRST_BYTE) + lo
    del u8
    magic = np.ndarray((size - 3,), dtype=">i4", buffer=buf, strides=(1,))
    phys = np.ndarray((size - 7,), dtype=">i8", buffer=buf, strides=(1,))
    m = magic[cand + _MAGIC_AT]
    ok = ((m == MAGIC_V1) | (m == MAGIC_V2)) & (phys[cand + _PHYSICAL_OFFSET_AT] == cand + base_offset)
    del magic, phys  # views of buf: an mmap cannot close while they live
    return cand[ok].astype(np.int64)


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
        # Java's new String(bytes, UTF_8) never fails: bad bytes become U+FFFD.
        topic = bytes(buf[p : p + topic_len]).decode("utf-8", "replace")
        p += topic_len
        props_len = _I16.unpack_from(buf, p)[0]
        p += 2
        if props_len < 0:
            raise DecodeError(f"record at {pos}: negative properties length {props_len}")
        props = bytes(buf[p : p + props_len]).decode("utf-8", "replace") if props_len else ""
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
        total,
        magic,
        crc,
        queue_id,
        flag,
        queue_offset,
        phys,
        sysflag,
        born_ts,
        born_host,
        store_ts,
        store_host,
        reconsume,
        prepared,
        body,
        topic,
        parse_properties(props),
    )


def locate_records(
    buf: bytes | memoryview, positions: np.ndarray, *, check_crc: bool = False
) -> tuple[np.ndarray, int]:
    """``(cols, k)``: the records at ``positions`` validated as :func:`decode_record`
    validates them and located, in one compiled pass without the GIL
    (mqstore/kernels/_decode.pyx ``locate``; ``cols`` rows ``_decode.COL_*``, int64).
    ``k`` records were accepted; ``k < len(positions)``: ``decode_record`` refuses the
    record at ``positions[k]`` (and says why)."""
    positions = np.ascontiguousarray(positions, np.int64)
    cols = np.empty((_decode.COLUMNS, len(positions)), np.int64)
    if not len(positions):
        return cols, 0
    return cols, _decode.locate(buf, positions, check_crc, cols)


@functools.lru_cache(maxsize=1024)
def _host_of(raw: bytes) -> Host:
    return decode_host(raw)


def located_records(buf: bytes | memoryview, cols: np.ndarray, k: int) -> list[MessageRecord]:
    """MessageRecords of the first ``k`` records :func:`locate_records` located in ``buf``."""
    return _decode.records(buf, cols, k, MessageRecord, _host_of)


def decode_records(buf: bytes | memoryview, positions: np.ndarray, *, check_crc: bool = True) -> list[MessageRecord]:
    """``[decode_record(buf, p, check_crc=check_crc) for p in positions]``, the records
    validated and located by one compiled pass, then made in one compiled loop (a
    host or topic equal to the previous record's is the same object). The first record
    decode_record refuses raises its DecodeError, as the loop would.
    tests/kernels/model_decode.py holds the reference model."""
    cols, k = locate_records(buf, positions, check_crc=check_crc)
    if k < len(cols[0]):
        decode_record(buf, int(positions[k]), check_crc=check_crc)  # raises what is wrong with it
        raise AssertionError(f"the decode kernel refused the record at {int(positions[k])}; decode_record did not")
    return located_records(buf, cols, k)


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
    fields: RecordFields | None = None  # with scan_records(..., fields=True)


MIN_RECORD_BYTES = record_size(body_len=0, topic_len=0, props_len=0)
# The compiled scan has these values built in.
assert _scan.FORMAT == (MAGIC_V1, MAGIC_V2, BLANK_RECORD_BYTES, MIN_RECORD_BYTES, CRC_MASK), _scan.FORMAT
assert _encode.FORMAT == (MAGIC_V1, MAGIC_V2, CRC_MASK, MAX_TOPIC_BYTES_V1 + 1), _encode.FORMAT
assert _decode.FORMAT == (MAGIC_V1, MAGIC_V2, CRC_MASK), _decode.FORMAT


class _Fields:
    """Big-endian ints at arbitrary byte offsets of one buffer, gathered in bulk.

    ``np.ndarray(..., strides=(1,))`` views the buffer as "the int starting at every
    byte", so reading a field of many records is a single fancy index."""

    def __init__(self, buf: bytes | memoryview) -> None:
        self._buf = buf
        self._n = len(buf)
        self._views: dict[str, np.ndarray] = {}

    def get(self, at: np.ndarray, fmt: str) -> np.ndarray:
        view = self._views.get(fmt)
        if view is None:
            width = np.dtype(fmt).itemsize
            view = np.ndarray((self._n - width + 1,), dtype=fmt, buffer=self._buf, strides=(1,))
            self._views[fmt] = view
        return view[at].astype(np.int64)

    def heads(self, at: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(head, store_timestamp, body_len_at)`` of the records at ``at``: the
        fixed head in one pass (one copy of 88 bytes per record, not a gather per
        field); the two fields an IPv6 host moves are re-read for those records only.
        Every record at ``at`` must hold at least MIN_RECORD_BYTES."""
        dtype = header_dtype(False, False)
        view = self._views.get("head")
        if view is None:
            view = np.ndarray((self._n - dtype.itemsize + 1,), dtype=dtype, buffer=self._buf, strides=(1,))
            self._views["head"] = view
        head = view[at]
        store_ts = head["store_timestamp"].astype(np.int64)
        body_len_at = at + (dtype.itemsize - 4)
        v6 = np.flatnonzero(head["sysflag"] & 0x30)
        if v6.size:
            sf = head["sysflag"][v6].astype(np.int64)
            born = np.where(sf & 0x10, 20, 8)
            store_ts[v6] = self.get(at[v6] + 48 + born, ">i8")
            body_len_at[v6] = at[v6] + 68 + born + np.where(sf & 0x20, 20, 8)
        return head, store_ts, body_len_at

    def release(self) -> None:
        self._views.clear()


def scan_records(
    buf: bytes | memoryview,
    start: int,
    end: int,
    *,
    check_crc: bool = True,
    max_records: int | None = None,
    max_bytes: int | None = None,
    base_offset: int | None = None,
    fields: bool = False,
) -> ScanResult:
    """Walk records from ``start`` up to ``end`` (the end of written data, at most
    ``len(buf)``) and validate them.

    One compiled pass (mqstore/kernels/_scan.pyx, without the GIL) follows TOTALSIZE
    and checks each record's magic, layout, lengths, position and CRC as it goes.
    Stops at a BLANK record (END_OF_SEGMENT), at the first invalid record (INVALID:
    nothing from there on is trusted), or with LIMIT at ``end``, after ``max_records``
    or before a record that would take the walk past ``start + max_bytes`` (one record
    at least). With ``base_offset`` (the buffer's commitlog offset) a record whose
    PHYSICALOFFSET field is not its own position is invalid too: stale bytes past a
    truncation never pass. With ``fields`` the result carries the valid records'
    RecordFields, gathered in the same pass. tests/kernels/model_scan.py is the
    reference model the kernel is held to.
    """
    if start < 0 or end > len(buf):
        raise ValueError(f"scan of [{start}, {end}) outside a buffer of {len(buf)} bytes")
    limit = end if max_bytes is None else min(end, start + max_bytes)
    budget = -1 if max_records is None else max_records
    # Valid records take at least MIN_RECORD_BYTES each (+1: the first may cross the limit).
    cap = max(limit - start, 0) // MIN_RECORD_BYTES + 1
    if max_records is not None and max_records >= 0:
        cap = min(cap, max(max_records, 1))
    cap = min(cap, _FIRST_CAPACITY)
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]] = []
    pos, first = start, True
    while True:
        positions, sizes = np.empty(cap, np.int64), np.empty(cap, np.int64)
        cols = np.empty((_scan.COLUMNS, cap), np.int64) if fields else None
        k, pos, code = _scan.scan(buf, pos, end, limit, budget, first, check_crc, base_offset, positions, sizes, cols)
        parts.append((positions[:k], sizes[:k], cols[:, :k] if cols is not None else None))
        if code != _scan.STOP_FULL:
            break
        first = False
        if budget > 0:
            budget -= k
        cap *= 4
    if len(parts) == 1:
        positions, sizes, cols = parts[0]
    else:
        positions = np.concatenate([p[0] for p in parts])
        sizes = np.concatenate([p[1] for p in parts])
        cols = np.concatenate([p[2] for p in parts], axis=1) if fields else None
    if code == _scan.STOP_LAYOUT:
        size = _I32.unpack_from(buf, pos)[0]
        reason = f"record at {pos} of {size} bytes: its fields disagree with TOTALSIZE or its position"
        res = ScanResult(positions, sizes, pos, ScanOutcome.INVALID, reason)
    elif code == _scan.STOP_CRC:
        res = ScanResult(positions, sizes, pos, ScanOutcome.INVALID, f"record at {pos}: body CRC mismatch")
    else:  # classify what lies where the walk stopped
        tail = _scan_stop_without_records(buf, pos, end, positions[:0])
        res = ScanResult(positions, sizes, pos, tail.outcome, tail.reason)
    if not fields:
        return res
    if not len(positions):
        return res._replace(fields=NO_FIELDS)
    return res._replace(fields=_fields_of(buf, *cols))


_FIRST_CAPACITY = 1 << 16  # records per kernel call before the output arrays grow (x4 each time)


def _scan_stop_without_records(buf, start: int, end: int, empty: np.ndarray) -> ScanResult:
    if start + 8 > end:
        return ScanResult(empty, empty.copy(), start, ScanOutcome.LIMIT, "")
    size, magic = _SIZE_MAGIC.unpack_from(buf, start)
    if magic == BLANK_MAGIC:
        return ScanResult(empty, empty.copy(), start, ScanOutcome.END_OF_SEGMENT, "")
    if magic in (MAGIC_V1, MAGIC_V2) and size >= MIN_RECORD_BYTES and start + size > end:
        reason = f"record at {start} of {size} bytes runs past the end of data {end}"
    elif magic in (MAGIC_V1, MAGIC_V2) and size >= MIN_RECORD_BYTES:
        return ScanResult(empty, empty.copy(), start, ScanOutcome.LIMIT, "")
    else:
        reason = f"no record at {start} (size {size}, magic {magic & 0xFFFFFFFF:#010x})"
    return ScanResult(empty, empty.copy(), start, ScanOutcome.INVALID, reason)


class RecordFields(NamedTuple):
    """Columns of the records at ``positions`` (already validated by a scan)."""

    queue_ids: np.ndarray
    queue_offsets: np.ndarray
    sysflags: np.ndarray
    store_timestamps: np.ndarray
    topic_codes: np.ndarray  # index into ``topics`` for each record
    topics: list[str]
    properties_at: np.ndarray  # buffer position of each record's properties string
    properties_len: np.ndarray
    # The process-wide id of each of ``topics`` (``topic_ids_of``; None where not known):
    # what a caller keeps per topic goes in arrays by it, gathered per chunk with numpy.
    topic_ids: np.ndarray | None = None


_EMPTY = np.zeros(0, np.int64)
NO_FIELDS = RecordFields(_EMPTY, _EMPTY, _EMPTY, _EMPTY, _EMPTY, [], _EMPTY, _EMPTY, _EMPTY)  # of no records


def record_fields(buf: bytes | memoryview, positions: np.ndarray) -> RecordFields:
    """Gather the fields that key a record (topic, queue) for many records at once."""
    n = len(positions)
    if n == 0:
        return NO_FIELDS
    f = _Fields(buf)
    try:
        head, store_ts, body_len_at = f.heads(positions)
        topic_len_at = body_len_at + 4 + f.get(body_len_at, ">i4")
        v2 = head["magic"] == MAGIC_V2
        topic_len = np.where(v2, f.get(topic_len_at, ">i2"), f.get(topic_len_at, "i1"))
        topic_at = topic_len_at + np.where(v2, 2, 1)
        return _fields_of(
            buf,
            head["queue_id"].astype(np.int64),
            head["queue_offset"].astype(np.int64),
            head["sysflag"].astype(np.int64),
            store_ts,
            topic_at,
            topic_len,
            f.get(topic_at + topic_len, ">i2"),
        )
    finally:
        f.release()


def record_heads(buf: bytes | memoryview, positions: np.ndarray) -> np.ndarray:
    """The fixed heads (``header_dtype(False, False)`` layout) of records believed to
    start at ``positions``, gathered in one pass; positions too close to the end of
    ``buf`` for a whole head get an all-zero head (never a valid record)."""
    dtype = header_dtype(False, False)
    safe = (positions >= 0) & (positions <= len(buf) - dtype.itemsize)
    f = _Fields(buf)
    try:
        head, _, _ = f.heads(np.where(safe, positions, 0))
    finally:
        f.release()
    head[~safe] = np.zeros(1, dtype)
    return head


# Topic bytes -> process-wide id (kernels/_intern.pyx) -> decoded name: the dispatcher
# meets the same topics chunk after chunk (10,000 distinct ones in each 8 MiB chunk at
# 10,000 topics); each is decoded once per process, and its id lets callers keep what
# they know of it in arrays (one str per topic also keeps its hash for lookups by name).
_TOPIC_IDS = _intern.TopicByteIds()
# Names by id, an object array (a chunk's names are one gather): filled up to
# len(_TOPIC_IDS), replaced by a bigger copy when full; read without the lock.
_TOPIC_ID_NAMES = np.empty(1024, object)
_TOPIC_IDS_LOCK = threading.Lock()


def topic_names_of(ids: np.ndarray) -> list[str]:
    """The names of the topics with these process-wide ids (RecordFields.topic_ids)."""
    return _TOPIC_ID_NAMES[ids].tolist()


def topic_ids_of_names(names: list[str]) -> np.ndarray:
    """The process-wide ids of these topic names (given ids if new), as a scan of
    records carrying them would give (a consume-queue builder told names over gRPC
    keeps its queues' rows by the same ids as a dispatcher in its own process)."""
    raw = [t.encode("utf-8") for t in names]
    n = len(raw)
    lens = np.fromiter(map(len, raw), np.int64, n)
    at = np.zeros(n, np.int64)
    np.cumsum(lens[:-1], out=at[1:])
    codes, ids = np.empty(n, np.int64), np.empty(n, np.int64)
    if not n:
        return ids
    with _TOPIC_IDS_LOCK:
        known = len(_TOPIC_IDS)
        k = _TOPIC_IDS.codes(b"".join(raw), at, lens, codes, ids)
        if len(_TOPIC_IDS) > known:
            _name_new_topics(known)
    return ids[:k][codes]


def _name_new_topics(known: int) -> None:
    """Decode the names of the topics given ids since ``known`` (caller holds the lock)."""
    global _TOPIC_ID_NAMES
    count = len(_TOPIC_IDS)
    names = _TOPIC_ID_NAMES
    if count > len(names):
        names = np.concatenate([names, np.empty(max(count, 2 * len(names)) - len(names), object)])
    for g in range(known, count):
        names[g] = _TOPIC_IDS.name(g).decode("utf-8", "replace")
    _TOPIC_ID_NAMES = names


def _fields_of(
    buf,
    queue_ids: np.ndarray,
    queue_offsets: np.ndarray,
    sysflags: np.ndarray,
    store_ts: np.ndarray,
    topic_at: np.ndarray,
    topic_len: np.ndarray,
    props_len: np.ndarray,
) -> RecordFields:
    """RecordFields from gathered head columns, topic locations and properties lengths
    (int64 arrays, one entry per record).

    Topics repeat, so each distinct topic is decoded once per process: the compiled
    pass ``_intern.TopicByteIds.codes`` numbers the distinct topic byte strings in order
    of first appearance (as ``_scan.topic_codes``, whose numpy model is in
    tests/kernels/model_scan.py) and gives each its process-wide id; a name is taken
    from the list by id, decoded only for a topic never met before."""
    n = len(queue_ids)
    topic_at = np.ascontiguousarray(topic_at, np.int64)
    topic_len = np.ascontiguousarray(topic_len, np.int64)
    codes, ids = np.empty(n, np.int64), np.empty(n, np.int64)
    with _TOPIC_IDS_LOCK:
        known = len(_TOPIC_IDS)
        k = _TOPIC_IDS.codes(buf, topic_at, topic_len, codes, ids)
        if len(_TOPIC_IDS) > known:
            _name_new_topics(known)
    ids = ids[:k].copy()
    return RecordFields(
        queue_ids,
        queue_offsets,
        sysflags,
        store_ts,
        codes,
        topic_names_of(ids),
        topic_at + topic_len + 2,
        props_len,
        ids,
    )


def topic_field(topic: str) -> bytes:
    """A record's topic field: the length, then the UTF-8 name.

    V1 (up to 127 bytes): one length byte. V2 (128 bytes or more): a big-endian int16
    length; the record must then carry MAGIC_V2, which :class:`PreparedRecords` sets
    from the field's length (a V1 field is at most 128 bytes, a V2 one at least 130).
    """
    raw = topic.encode("utf-8")
    n = len(raw)
    if n <= MAX_TOPIC_BYTES_V1:
        return bytes((n,)) + raw
    if n > MAX_TOPIC_BYTES_V2:
        raise ValueError(f"a topic has at most {MAX_TOPIC_BYTES_V2} bytes, got {n}")
    return _I16.pack(n) + raw


def topic_field_lengths(fields: Sequence[bytes]) -> np.ndarray:
    """The topics' byte lengths of :func:`topic_field` results (1 or 2 length bytes)."""
    lens = np.fromiter(map(len, fields), np.int64, len(fields))
    return lens - np.where(lens > MAX_TOPIC_BYTES_V1 + 1, 2, 1)


class PreparedRecords:
    """Records encoded up to the fields known only under the put lock.

    RocketMQ encodes a message before it takes the put lock and patches QUEUEOFFSET,
    PHYSICALOFFSET and STORETIMESTAMP afterwards; this class does the same for
    records whose properties are given whole (bytes), with the compiled encoder
    (mqstore/kernels/_encode.pyx: one pass, body CRC included), and patches QUEUEID
    too. Appends go through store.record_batch.BatchEncoder, which builds the
    properties too; this is the same encoder for callers holding ready properties
    (tools, tests, the golden vectors). ``topics`` holds each record's topic field
    (:func:`topic_field`); ``topic_lens`` is accepted for compatibility and not needed
    (the field's length says it). A record whose topic is longer than 127 bytes gets
    MAGIC_V2 (its field has the 2-byte length), every other one MAGIC_V1, as RocketMQ 5
    writes them. Born hosts may mix IPv4 and IPv6 (the sysflag bits follow each).
    Not thread-safe: one caller renders it.
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
        del topic_lens
        n = len(bodies)
        rec = _encode.RecordBuffer()
        rec.start(n)
        rec.raw_properties(list(properties))
        rec.bodies(list(bodies))
        self.sizes, self.body_lens, self.props_lens = np.empty((3, n), np.int64)
        hosts = born_hosts if isinstance(born_hosts, bytes) else list(born_hosts)
        rec.layout(list(topics), np.arange(n), hosts, bytes(store_host), self.sizes, self.body_lens, self.props_lens)
        cols = np.empty((5, n), np.int64)
        for row, value in enumerate((flags, sysflags, born_timestamps, reconsume_times, prepared_transaction_offsets)):
            cols[row] = value
        rec.encode(cols, bytes(store_host))
        self._rec = rec

    def __len__(self) -> int:
        return self._rec.n

    def render(
        self,
        lo: int,
        hi: int,
        *,
        physical_offsets: np.ndarray,
        queue_ids: np.ndarray,
        queue_offsets: np.ndarray,
        store_timestamp: int,
        hold_first_size: bool = False,
    ) -> bytes:
        """The bytes of records ``lo:hi`` back to back, with the patched fields.

        With ``hold_first_size`` the first record's TOTALSIZE is left 0: the writer
        copies the bytes first and sets that size afterwards, so a crash mid-copy
        leaves a run whose first record ends the valid data, never a record with torn
        properties (which no CRC covers).
        """
        k = hi - lo

        def column(v) -> np.ndarray:
            return np.broadcast_to(np.asarray(v, np.int64), (k,))

        rec = self._rec
        rec.patch(lo, hi, column(queue_ids), column(queue_offsets), column(physical_offsets), int(store_timestamp))
        a, b = rec.span(lo, hi)
        with memoryview(rec.data) as mv:
            out = bytes(mv[a:b])
        return bytes(4) + out[4:] if hold_first_size and k else out


__all__ = [
    "BLANK_MAGIC",
    "BLANK_RECORD_BYTES",
    "MAGIC_V1",
    "MAGIC_V2",
    "MAX_TOPIC_BYTES_V1",
    "MAX_TOPIC_BYTES_V2",
    "MIN_RECORD_BYTES",
    "NO_FIELDS",
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
    "decode_records",
    "head_holds_data",
    "header_dtype",
    "locate_records",
    "located_records",
    "record_fields",
    "record_head",
    "record_heads",
    "record_signatures",
    "record_size",
    "scan_records",
    "topic_field",
    "topic_field_lengths",
    "topic_names_of",
    "transaction_type",
]
