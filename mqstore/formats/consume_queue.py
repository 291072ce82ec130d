"""ConsumeQueue file: one fixed-size unit per message of one (topic, queue id).

Big-endian, 20 bytes per unit (RocketMQ ConsumeQueue.CQ_STORE_UNIT_SIZE):

    offset  size  field             meaning
    0       8     commitlog_offset  PhysicalOffset of the record in the CommitLog
    8       4     size              TOTALSIZE of that record in bytes
    12      8     tags_code         javaHashCode(TAGS) sign-extended (javahash.tags_code), 0 without
                                    tags; a deliver timestamp for SCHEDULE_TOPIC_XXXX units

Unit ``n`` (queue offset ``n``) sits at logical byte ``n * 20`` of the queue: in the file
that starts at ``n*20 - (n*20) % file_bytes``, at position ``(n*20) % file_bytes``. Files
are named by that start byte offset (20 digits, names.offset_to_file_name), all have
exactly ``file_bytes`` bytes, pre-allocated and zero-filled. The default file holds
300,000 units (6,000,000 bytes); a configured size is rounded *up* to a multiple of 20
(MessageStoreConfig.getMappedFileSizeConsumeQueue).

Invariants: a unit is valid iff ``commitlog_offset >= 0 and size > 0``; the first invalid
unit ends the valid region (zeros after the write position, or torn bytes). commitlog
offsets increase from unit to unit. A queue whose first unit has queue offset ``q > 0``
starts its first file with pre-blank units ``(0, 0x7FFFFFFF, 0)`` up to ``q``
(ConsumeQueue.fillPreBlank); they count as valid but point at no record.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

UNIT = struct.Struct(">qiq")
UNIT_SIZE = 20
assert UNIT.size == UNIT_SIZE
UNIT_DTYPE = np.dtype([("commitlog_offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])
assert UNIT_DTYPE.itemsize == UNIT_SIZE

DEFAULT_FILE_UNITS = 300_000
DEFAULT_FILE_BYTES = DEFAULT_FILE_UNITS * UNIT_SIZE  # 6,000,000

PRE_BLANK_SIZE = 0x7FFFFFFF  # Integer.MAX_VALUE: no real record is this large
PRE_BLANK_UNIT = UNIT.pack(0, PRE_BLANK_SIZE, 0)

_INT32 = (-(1 << 31), (1 << 31) - 1)


class CqUnit(NamedTuple):
    """One unit with the queue offset it sits at (RocketMQ CqUnit)."""

    queue_offset: int
    commitlog_offset: int
    size: int
    tags_code: int


def file_bytes_for(configured_bytes: int) -> int:
    """The file size RocketMQ uses for a configured ``mappedFileSizeConsumeQueue``:
    rounded up to a whole number of units.

    >>> file_bytes_for(6_000_000), file_bytes_for(130), file_bytes_for(140)
    (6000000, 140, 140)
    """
    if configured_bytes <= 0:
        raise ValueError(f"a consume queue file size must be > 0, got {configured_bytes}")
    return -(-configured_bytes // UNIT_SIZE) * UNIT_SIZE


def unit_position(queue_offset: int, file_bytes: int) -> tuple[int, int]:
    """(start byte offset of the file, byte position in it) of unit ``queue_offset``.

    >>> unit_position(7, 140), unit_position(300_001, DEFAULT_FILE_BYTES)
    ((140, 0), (6000000, 20))
    """
    if queue_offset < 0:
        raise ValueError(f"queue offsets are >= 0, got {queue_offset}")
    if file_bytes <= 0 or file_bytes % UNIT_SIZE:
        raise ValueError(f"file_bytes must be a positive multiple of {UNIT_SIZE}, got {file_bytes}")
    byte = queue_offset * UNIT_SIZE
    pos = byte % file_bytes
    return byte - pos, pos


def encode_units(offsets, sizes, tags_codes) -> bytes:
    """Encode many units at once; each argument is a sequence (or a scalar, broadcast).

    >>> encode_units([1024], [210], [2598919]).hex()
    '0000000000000400000000d2000000000027a807'
    """
    o, s, t = np.broadcast_arrays(
        np.asarray(offsets, np.int64), np.asarray(sizes, np.int64), np.asarray(tags_codes, np.int64)
    )
    if o.ndim > 1:
        raise ValueError(f"units are given as 1-D sequences, got shape {o.shape}")
    o, s, t = (np.atleast_1d(a) for a in (o, s, t))
    if s.size and (s.min() < _INT32[0] or s.max() > _INT32[1]):
        raise ValueError("a unit size does not fit a signed 32-bit int")
    units = np.empty(o.shape[0], UNIT_DTYPE)
    units["commitlog_offset"] = o
    units["size"] = s
    units["tags_code"] = t
    return units.tobytes()


def decode_units(buf: bytes | bytearray | memoryview) -> np.ndarray:
    """Decode every whole unit of ``buf`` at once, stopping at the first invalid one.

    Returns a (read-only if ``buf`` is) view of ``buf`` with ``UNIT_DTYPE``; a trailing
    partial unit is ignored. Pre-blank units are valid.

    >>> decode_units(encode_units([0, 5, 0], [PRE_BLANK_SIZE, 9, 0], [0, 1, 0])).shape
    (2,)
    """
    units = np.frombuffer(buf, UNIT_DTYPE, count=len(buf) // UNIT_SIZE)
    end = np.flatnonzero((units["size"] <= 0) | (units["commitlog_offset"] < 0))
    return units[: end[0]] if end.size else units


def is_pre_blank(units: np.ndarray) -> np.ndarray:
    """Per unit: True for the ``(0, 0x7FFFFFFF, 0)`` filler written by fillPreBlank."""
    return is_pre_blank_unit(units["commitlog_offset"], units["size"], units["tags_code"])


def is_pre_blank_unit(commitlog_offset, size, tags_code=None):
    """:func:`is_pre_blank` on a unit's fields given apart: ints (a bool) or arrays
    (per unit). Without ``tags_code`` that field is not looked at (for callers that
    hold only offsets and sizes).

    >>> is_pre_blank_unit(0, PRE_BLANK_SIZE, 0), is_pre_blank_unit(0, 20, 0)
    (True, False)
    """
    blank = (commitlog_offset == 0) & (size == PRE_BLANK_SIZE)
    return blank if tags_code is None else blank & (tags_code == 0)


__all__ = [
    "DEFAULT_FILE_BYTES",
    "DEFAULT_FILE_UNITS",
    "PRE_BLANK_SIZE",
    "PRE_BLANK_UNIT",
    "UNIT",
    "UNIT_DTYPE",
    "UNIT_SIZE",
    "CqUnit",
    "decode_units",
    "encode_units",
    "file_bytes_for",
    "is_pre_blank",
    "is_pre_blank_unit",
    "unit_position",
]
