"""Java ``String.hashCode`` and the two RocketMQ hashes built on it.

RocketMQ puts these on disk: the ConsumeQueue tagsCode is ``hashCode(TAGS)``
sign-extended to 64 bits, and the IndexFile key hash is ``abs(hashCode(topic#key))``
where Java's ``Math.abs(Integer.MIN_VALUE)`` stays negative and RocketMQ maps it to 0.
Java hashes UTF-16 code units, so a character outside the BMP counts as two
surrogates and nothing is normalised ("é" and "e\\u0301" differ). Never use Python's
salted ``hash()`` for anything on disk.
"""

from __future__ import annotations

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


__all__ = ["index_key_hash", "java_string_hash", "tags_code"]
