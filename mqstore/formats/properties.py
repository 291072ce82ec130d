"""The message properties string (RocketMQ MessageDecoder.messageProperties2String).

Layout, UTF-8 on disk, stored after a signed 16-bit length (so at most 32,767 bytes):

    name \\x01 value \\x02 name \\x01 value \\x02 ...

Every entry ends with ``\\x02``, the last one included. Order carries no meaning
(Java writes HashMap order); entries whose value is None are skipped.

Parsing follows Java's quirks exactly: split on ``\\x02``; a part counts only if it is
at least 3 characters long and has a ``\\x01`` with at least one character before and
after it; the value is everything after the *first* ``\\x01`` (so it may hold more
``\\x01``); later duplicates win; a missing final ``\\x02`` is tolerated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from mqstore.kernels import _dispatch

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
MAX_PROPERTIES_BYTES = 32767

# Keys the store itself reads (MessageConst).
KEYS = "KEYS"
TAGS = "TAGS"
UNIQ_KEY = "UNIQ_KEY"
WAIT = "WAIT"
DELAY = "DELAY"
REAL_TOPIC = "REAL_TOPIC"
REAL_QID = "REAL_QID"
TRAN_MSG = "TRAN_MSG"
KEY_SEPARATOR = " "
# mqstore's own: "<level>:<queue offset>" on a delivered delayed message (schedule.py).
SCHEDULE_SOURCE = "SCHEDULE_SOURCE"


def serialize_properties(items: Mapping[str, str | None] | Iterable[tuple[str, str | None]]) -> str:
    """Properties to their on-disk string, keeping the given order.

    >>> serialize_properties({"TAGS": "TagA", "KEYS": "k1 k2"})
    'TAGS\\x01TagA\\x02KEYS\\x01k1 k2\\x02'
    """
    pairs = items.items() if isinstance(items, Mapping) else items
    return "".join(f"{k}\x01{v}\x02" for k, v in pairs if v is not None)


def unstorable_property(name: object, value: object) -> str | None:
    """Why one user property can not survive the round trip through the properties
    string (None if it can): names and values are non-empty strings without the
    separators, since :func:`parse_properties` drops an entry with an empty name or
    value, and a separator would split it.

    >>> unstorable_property("", "x")
    "a property has an empty name (RocketMQ's properties string can not carry it)"
    """
    if not isinstance(name, str) or not isinstance(value, str):
        return f"property names and values must be strings, got {type(name).__name__}: {type(value).__name__}"
    if not name:
        return "a property has an empty name (RocketMQ's properties string can not carry it)"
    if not value:
        return f"property {name!r} has an empty value (RocketMQ's properties string can not carry it)"
    for text in (name, value):
        if NAME_VALUE_SEPARATOR in text or PROPERTY_SEPARATOR in text:
            return f"property {name!r} contains the property separators \\x01 or \\x02"
    return None


def parse_properties(s: str) -> dict[str, str]:
    """The on-disk string back to a dict, with Java's parsing rules (module doc)."""
    out: dict[str, str] = {}
    for part in s.split(PROPERTY_SEPARATOR):
        if len(part) < 3:
            continue
        i = part.find(NAME_VALUE_SEPARATOR)
        if 0 < i < len(part) - 1:
            out[part[:i]] = part[i + 1 :]
    return out


CRC32_PROPERTY = "__CRC32#"
CRC32_RESERVED_BYTES = 20


def crc32_property(crc: int) -> bytes:
    """The optional 5.2+ whole-record CRC property (``enabledAppendPropCRC``).

    The value is the CRC's 10 decimal digits, least significant first, padded with
    zeros at the end (CRC 1234567 -> ``7654321000``), framed as one property entry.

    >>> crc32_property(1234567)
    b'__CRC32#\\x017654321000\\x02'
    """
    digits = str(crc & 0x7FFFFFFF)[::-1].ljust(10, "0")
    return f"{CRC32_PROPERTY}{NAME_VALUE_SEPARATOR}{digits}{PROPERTY_SEPARATOR}".encode()


def find_property(props: bytes, name: bytes) -> bytes | None:
    """The value of ``name`` in a raw properties string, as Java's parse would give
    it (the last complete entry wins), without parsing the rest.

    >>> find_property(b"TAGS\\x01TagA\\x02KEYS\\x01k1 k2\\x02", b"KEYS")
    b'k1 k2'
    """
    needle = name + b"\x01"
    end = len(props)
    while True:
        i = props.rfind(needle, 0, end)
        if i < 0:
            return None
        if i == 0 or props[i - 1] == 2:  # an entry starts here, not inside a value
            j = props.find(b"\x02", i)
            value = props[i + len(needle) : j if j >= 0 else len(props)]
            if value:
                return value
        end = i


def locate_properties(
    buf: bytes | memoryview, at: np.ndarray, lens: np.ndarray, names: Sequence[bytes]
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Where the values of ``names`` lie in many properties strings at once.

    ``buf[at[i] : at[i] + lens[i]]`` is record i's properties string. For each name
    the result holds ``(starts, ends)``: the value's byte range in ``buf`` per record,
    -1 where the record has no such (valid) entry. Same rules as
    :func:`parse_properties` (entries end at \\x02, the value follows the first
    \\x01, empty names or values do not count, the last entry wins), found by one
    compiled pass over the strings (mqstore/kernels/_dispatch.pyx, without the GIL;
    its reference model is tests/kernels/model_dispatch.py). ValueError if a string
    lies outside ``buf``.
    """
    n = len(at)
    starts = np.empty((len(names), n), np.int64)
    ends = np.empty((len(names), n), np.int64)
    if names:
        _dispatch.locate(
            buf,
            np.ascontiguousarray(at, np.int64),
            np.ascontiguousarray(lens, np.int64),
            [bytes(name) for name in names],
            starts,
            ends,
        )
    return [(starts[k], ends[k]) for k in range(len(names))]


def split_keys(keys: str | None) -> list[str]:
    """The non-empty entries of a KEYS value (space separated), as the index uses them."""
    return [k for k in keys.split(KEY_SEPARATOR) if k] if keys else []


__all__ = [
    "CRC32_PROPERTY",
    "CRC32_RESERVED_BYTES",
    "DELAY",
    "KEYS",
    "KEY_SEPARATOR",
    "MAX_PROPERTIES_BYTES",
    "REAL_QID",
    "REAL_TOPIC",
    "SCHEDULE_SOURCE",
    "TAGS",
    "TRAN_MSG",
    "UNIQ_KEY",
    "WAIT",
    "crc32_property",
    "find_property",
    "locate_properties",
    "parse_properties",
    "serialize_properties",
    "split_keys",
    "unstorable_property",
]
