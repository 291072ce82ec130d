"""Pop state files (``<shard>/pop/journal`` and ``<shard>/pop/snapshot``): bytes <->
deltas. What they mean, when they are written and how recovery reads them:
mqstore/store/pop.py.

Journal: a sequence of records, nothing else. One record (big-endian):

    offset        size   field       meaning
    0             4      body_len    B, bytes of the body
    4             4      crc32       zlib.crc32 of bytes 8 .. 16+B (seq and body)
    8             8      seq         1, 2, 3, ...: +1 per record, continues across snapshots
    16            B      body        one delta of one (group, topic):

Body:

    offset        size   field       meaning
    0             2      version     1
    2             2      G           group length in bytes (UTF-8; names are ASCII)
    4             2      T           topic length in bytes
    6             4      C           cursor count
    10            4      S           entry count
    14            4      D           removal count
    18            G      group
    18+G          T      topic
    c = 18+G+T    12*C   cursors     per cursor: queue_id i32, cursor i64
    s = c+12*C    44*S   entries     per entry: queue_id i32, offset i64, commitlog_offset
                                     i64, size i32, deadline_ms i64, attempt i32,
                                     generation i64
    d = s+44*S    12*D   removals    per removal: queue_id i32, offset i64
    B == d+12*D

Snapshot:

    offset        size   field       meaning
    0             8      magic       b"MQPOPSS1"
    8             8      seq         the last journal record it includes
    16            4      R           record count
    20            4      crc32       zlib.crc32 of bytes 0 .. 20
    24            ...    records     R records framed as in the journal (their seq field is
                                     the snapshot's seq), one per (group, topic): its
                                     cursors and entries. The file ends after the R-th.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import NamedTuple

from mqstore.errors import CorruptFileError

BODY_VERSION = 1
SNAPSHOT_MAGIC = b"MQPOPSS1"

FRAME = struct.Struct(">IIQ")  # body_len, crc32, seq
BODY = struct.Struct(">HHHIII")  # version, G, T, C, S, D
CURSOR = struct.Struct(">iq")
ENTRY = struct.Struct(">iqqiqiq")
REMOVAL = struct.Struct(">iq")
SNAP_HEAD = struct.Struct(">8sQI")
SNAP_CRC = struct.Struct(">I")
assert FRAME.size == 16 and BODY.size == 18
assert CURSOR.size == 12 and ENTRY.size == 44 and REMOVAL.size == 12 and SNAP_HEAD.size == 20
SNAP_HEAD_SIZE = SNAP_HEAD.size + SNAP_CRC.size
_CRC_FROM = FRAME.size - 8  # the frame's CRC covers seq and body


class InFlight(NamedTuple):
    """One message in flight for a group (an entry; store/pop.py's vocabulary)."""

    offset: int
    commitlog_offset: int
    size: int
    deadline_ms: int
    attempt: int
    generation: int


class PopDelta(NamedTuple):
    """One record's body: set these cursors, put these entries, remove these
    (queue_id, offset), in that order, for one (group, topic)."""

    group: str
    topic: str
    cursors: list[tuple[int, int]]
    puts: list[tuple[int, InFlight]]
    removals: list[tuple[int, int]]


class Frame(NamedTuple):
    """A whole record at ``pos`` of a buffer: its seq and where its body is."""

    pos: int
    seq: int
    body_start: int
    end: int


def encode_body(d: PopDelta) -> bytes:
    """The body of ``d``; struct.error if a value does not fit its field."""
    g, t = d.group.encode(), d.topic.encode()
    parts = [BODY.pack(BODY_VERSION, len(g), len(t), len(d.cursors), len(d.puts), len(d.removals)), g, t]
    parts += [CURSOR.pack(q, c) for q, c in d.cursors]
    parts += [ENTRY.pack(q, *e) for q, e in d.puts]
    parts += [REMOVAL.pack(q, o) for q, o in d.removals]
    return b"".join(parts)


def encode_frame(seq: int, body: bytes) -> bytes:
    """One record: the frame's head, then ``body``."""
    tail = struct.pack(">Q", seq) + body
    return struct.pack(">II", len(body), zlib.crc32(tail)) + tail


def decode_body(buf: bytes, start: int, end: int, where: str) -> PopDelta:
    """The delta in ``buf[start:end]``; CorruptFileError (naming ``where``) if malformed."""
    try:
        if end - start < BODY.size:
            raise ValueError(f"{end - start} bytes, shorter than a body header")
        version, glen, tlen, nc, ns, nd = BODY.unpack_from(buf, start)
        if version != BODY_VERSION:
            raise ValueError(f"body version {version}")
        c = start + BODY.size + glen + tlen
        s = c + nc * CURSOR.size
        d = s + ns * ENTRY.size
        if d + nd * REMOVAL.size != end:
            raise ValueError("the counts do not add up to the body length")
        group = buf[start + BODY.size : start + BODY.size + glen].decode()
        topic = buf[start + BODY.size + glen : c].decode()
        cursors = list(CURSOR.iter_unpack(buf[c:s]))
        puts = [(f[0], InFlight(*f[1:])) for f in ENTRY.iter_unpack(buf[s:d])]
        removals = list(REMOVAL.iter_unpack(buf[d:end]))
    except (struct.error, ValueError) as e:  # UnicodeDecodeError is a ValueError
        raise CorruptFileError(f"{where}: malformed pop record body at byte {start}: {e}") from None
    return PopDelta(group, topic, cursors, puts, removals)


def whole_frames(data: bytes) -> Iterator[Frame]:
    """The records of a journal from its start, up to the first that is short or fails
    its CRC (a torn or garbage tail). The seq order is the reader's to check."""
    pos = 0
    while len(data) - pos >= FRAME.size:
        body_len, crc, seq = FRAME.unpack_from(data, pos)
        end = pos + FRAME.size + body_len
        if body_len < BODY.size or end > len(data) or zlib.crc32(data[pos + _CRC_FROM : end]) != crc:
            return
        yield Frame(pos, seq, pos + FRAME.size, end)
        pos = end


def encode_snapshot_head(seq: int, count: int) -> bytes:
    """A snapshot's header: ``count`` records follow, as of journal record ``seq``."""
    head = SNAP_HEAD.pack(SNAPSHOT_MAGIC, seq, count)
    return head + SNAP_CRC.pack(zlib.crc32(head))


def decode_snapshot(data: bytes, where: str) -> tuple[int, list[PopDelta]]:
    """A snapshot's seq and deltas; CorruptFileError (naming ``where``) for any damage:
    a snapshot is renamed into place whole, so none is a torn write."""
    if len(data) < SNAP_HEAD_SIZE:
        raise CorruptFileError(f"{where}: {len(data)} bytes, shorter than its header")
    magic, seq, count = SNAP_HEAD.unpack_from(data, 0)
    (crc,) = SNAP_CRC.unpack_from(data, SNAP_HEAD.size)
    if magic != SNAPSHOT_MAGIC or zlib.crc32(data[: SNAP_HEAD.size]) != crc:
        raise CorruptFileError(f"{where}: bad header (magic {magic!r} or header CRC)")
    pos = SNAP_HEAD_SIZE
    deltas = []
    for i in range(count):
        if len(data) - pos < FRAME.size:
            raise CorruptFileError(f"{where}: ends at byte {pos} inside record {i} of {count}")
        body_len, rcrc, rseq = FRAME.unpack_from(data, pos)
        end = pos + FRAME.size + body_len
        if end > len(data) or rseq != seq or zlib.crc32(data[pos + _CRC_FROM : end]) != rcrc:
            raise CorruptFileError(f"{where}: record {i} at byte {pos} is damaged")
        deltas.append(decode_body(data, pos + FRAME.size, end, where))
        pos = end
    if pos != len(data):
        raise CorruptFileError(f"{where}: {len(data) - pos} bytes after its last record at byte {pos}")
    return seq, deltas


__all__ = [
    "BODY",
    "FRAME",
    "Frame",
    "InFlight",
    "PopDelta",
    "decode_body",
    "decode_snapshot",
    "encode_body",
    "encode_frame",
    "encode_snapshot_head",
    "whole_frames",
]
