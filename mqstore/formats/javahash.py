"""Java ``String.hashCode`` and the two RocketMQ hashes built on it.

RocketMQ puts these on disk: the ConsumeQueue tagsCode is ``hashCode(TAGS)``
sign-extended to 64 bits, and the IndexFile key hash is ``abs(hashCode(topic#key))``
where Java's ``Math.abs(Integer.MIN_VALUE)`` stays negative and RocketMQ maps it to 0.
Java hashes UTF-16 code units, so a character outside the BMP counts as two
surrogates and nothing is normalised ("é" and "e\\u0301" differ). Never use Python's
salted ``hash()`` for anything on disk.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_MIN_INT = -(1 << 31)


def java_string_hash(s: str) -> int:
    """Java ``String.hashCode``: ``h = 31*h + unit`` over UTF-16 units, signed 32-bit.

    >>> java_string_hash("TagA")
    2598919
    """
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def tags_code(tags: str | None) -> int:
    """ConsumeQueue tagsCode of a TAGS value: its hash, or 0 when absent or empty."""
    return java_string_hash(tags) if tags else 0


def index_key_hash(key: str) -> int:
    """IndexFile key hash: ``abs(hashCode)``, with ``abs(MIN_VALUE)`` replaced by 0.

    >>> index_key_hash("polygenelubricants")
    0
    """
    h = java_string_hash(key)
    return 0 if h == _MIN_INT else abs(h)


def java_string_hashes(strings: Sequence[str]) -> np.ndarray:
    """``java_string_hash`` of many strings at once (int64 array of int32 values).

    Horner's rule runs column by column over a matrix of UTF-16 code units, so the
    Python work is one encode per string, not one step per character.
    """
    n = len(strings)
    if n == 0:
        return np.zeros(0, np.int64)
    units = [np.frombuffer(s.encode("utf-16-be", "surrogatepass"), ">u2") for s in strings]
    lens = np.fromiter(map(len, units), np.int64, n)
    width = int(lens.max())
    mat = np.zeros((n, width), np.uint32)
    if width:
        flat = np.concatenate(units).astype(np.uint32)
        rows = np.repeat(np.arange(n), lens)
        cols = np.arange(len(flat)) - np.repeat(np.cumsum(lens) - lens, lens)
        mat[rows, cols] = flat
    h = np.zeros(n, np.uint32)
    for c in range(width):
        live = c < lens  # shorter strings stop: Horner must not multiply past their end
        h = np.where(live, h * np.uint32(31) + mat[:, c], h)
    return h.astype(np.int32).astype(np.int64)


def java_hash_of_ranges(
    buf: bytes | memoryview, starts: np.ndarray, ends: np.ndarray, *, prefix: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``java_string_hash(p_i + buf[starts[i]:ends[i]].decode())`` for many ranges,
    computed on the bytes: for ASCII text the UTF-16 code units are the bytes.

    ``prefix`` holds each range's prefix hash h(p_i) (e.g. of ``"topic#"``). Returns
    the hashes (int64 holding int32 values) and a mask of the ranges that are not
    ASCII: their hash here is meaningless and the caller hashes their decoded text.
    """
    n = len(starts)
    lens = ends - starts
    h = np.zeros(n, np.uint32) if prefix is None else prefix.astype(np.uint32)  # Horner continues it
    non_ascii = np.zeros(n, bool)
    if n == 0:
        return h.astype(np.int64), non_ascii
    u8 = np.frombuffer(buf, np.uint8)
    for c in range(int(lens.max())):  # Horner, one column of all ranges at a time
        live = c < lens
        byte = u8[np.where(live, starts + c, 0)].astype(np.uint32)
        non_ascii |= live & (byte >= 0x80)
        h = np.where(live, h * np.uint32(31) + byte, h)
    del u8
    return h.view(np.int32).astype(np.int64), non_ascii


def tags_codes(tags: Sequence[str | None]) -> np.ndarray:
    """ConsumeQueue tagsCode of many TAGS values; each distinct value is hashed once."""
    distinct = list(dict.fromkeys(t for t in tags if t))
    codes = dict(zip(distinct, java_string_hashes(distinct).tolist()))
    codes[None] = codes[""] = 0
    return np.fromiter((codes[t] if t else 0 for t in tags), np.int64, len(tags))


__all__ = ["index_key_hash", "java_hash_of_ranges", "java_string_hash", "java_string_hashes", "tags_code", "tags_codes"]
