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


def java_string_hashes(keys: Sequence[str]) -> np.ndarray:
    """``java_string_hash`` of many strings at once (int64 array of int32 values).

    h(key) = sum(unit[i] * 31**(n-1-i)) mod 2**32 over UTF-16 code units: numpy uint32
    products and sums wrap exactly like Java's int arithmetic. Work and memory grow
    with the total number of units (prefix sums over one flat array), not with
    count x longest key, so one long key does not slow a batch down.
    """
    count = len(keys)
    if count == 0:
        return np.zeros(0, np.int64)
    joined = "".join(keys)
    units = np.frombuffer(joined.encode("utf-16-be", "surrogatepass"), ">u2").astype(np.uint32)
    char_lens = np.fromiter(map(len, keys), np.int64, count)
    if units.size == len(joined):
        unit_lens = char_lens  # no characters outside the BMP
    else:
        # A code point above U+FFFF is two UTF-16 units (a surrogate pair).
        points = np.frombuffer(joined.encode("utf-32-be", "surrogatepass"), ">u4")
        astral_before = np.zeros(points.size + 1, np.int64)
        np.cumsum(points > 0xFFFF, out=astral_before[1:])
        char_ends = np.cumsum(char_lens)
        unit_lens = np.diff(char_ends + astral_before[char_ends], prepend=0)
    ends = np.cumsum(unit_lens)
    longest = int(unit_lens.max())
    if longest == 0:
        return np.zeros(count, np.int64)
    pow31 = np.ones(longest, np.uint32)
    pow31[1:] = np.cumprod(np.full(longest - 1, 31, np.uint32), dtype=np.uint32)
    units_after = np.repeat(ends, unit_lens) - 1 - np.arange(units.size)
    terms = units * pow31[units_after]
    sums = np.zeros(units.size + 1, np.uint64)
    np.cumsum(terms, dtype=np.uint64, out=sums[1:])
    return ((sums[ends] - sums[ends - unit_lens]) & 0xFFFFFFFF).astype(np.uint32).view(np.int32).astype(np.int64)


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
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, bool)
    # All ranges' bytes in one flat array; h = prefix * 31**len + sum(byte * 31**(bytes after it)),
    # summed per range with one cumulative sum (uint64 sums wrap, the low 32 bits stay exact).
    total = int(lens.sum())
    offs = np.zeros(n, np.int64)
    np.cumsum(lens[:-1], out=offs[1:])
    u8 = np.frombuffer(buf, np.uint8)
    flat = u8[np.repeat(starts - offs, lens) + np.arange(total)].astype(np.uint32)
    del u8
    ends_flat = offs + lens
    after = np.repeat(ends_flat, lens) - 1 - np.arange(total)
    sums = np.zeros(total + 1, np.uint64)
    np.cumsum(flat * _pow31(int(lens.max()) + 1)[after], dtype=np.uint64, out=sums[1:])
    h = ((sums[ends_flat] - sums[offs]) & 0xFFFFFFFF).astype(np.uint32)
    if prefix is not None:
        h = h + prefix.astype(np.uint32) * _pow31(int(lens.max()) + 1)[lens]
    non_ascii = np.zeros(n, bool)
    high = np.flatnonzero(flat >= 0x80)
    if high.size:
        non_ascii[np.searchsorted(ends_flat, high, "right")] = True
    return h.view(np.int32).astype(np.int64), non_ascii


_POW31_CACHE = np.ones(1, np.uint32)


def _pow31(n: int) -> np.ndarray:
    """31**i mod 2**32 for i < n (uint32 products wrap)."""
    global _POW31_CACHE
    if len(_POW31_CACHE) < n:
        size = max(n, 2 * len(_POW31_CACHE))
        table = np.ones(size, np.uint32)
        table[1:] = np.cumprod(np.full(size - 1, 31, np.uint32), dtype=np.uint32)
        _POW31_CACHE = table
    return _POW31_CACHE


def tags_codes(tags: Sequence[str | None]) -> np.ndarray:
    """ConsumeQueue tagsCode of many TAGS values; each distinct value is hashed once."""
    distinct = list(dict.fromkeys(t for t in tags if t))
    codes = dict(zip(distinct, java_string_hashes(distinct).tolist()))
    codes[None] = codes[""] = 0
    return np.fromiter((codes[t] if t else 0 for t in tags), np.int64, len(tags))


__all__ = ["index_key_hash", "java_hash_of_ranges", "java_string_hash", "java_string_hashes", "tags_code", "tags_codes"]
