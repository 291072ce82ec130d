"""File names of mapped file queues, and topic names that may become directory names.

CommitLog and ConsumeQueue files are named by the absolute byte offset of their
first byte, in decimal, zero-padded to 20 digits (RocketMQ UtilAll.offset2FileName).
"""

from __future__ import annotations

import re

from mqstore.errors import DecodeError, InvalidTopicError

FILE_NAME_DIGITS = 20
TOPIC_MAX_CHARS = 127
_TOPIC_RE = re.compile(r"[%|a-zA-Z0-9_-]+")


def offset_to_file_name(offset: int) -> str:
    """The 20-digit name of the file that starts at ``offset``.

    >>> offset_to_file_name(1073741824)
    '00000000001073741824'
    """
    if offset < 0:
        raise ValueError(f"file offsets are >= 0, got {offset}")
    return f"{offset:020d}"


def file_name_to_offset(name: str) -> int:
    """Inverse of :func:`offset_to_file_name`; a name that is not 20 digits is an error."""
    if len(name) != FILE_NAME_DIGITS or not name.isdigit() or not name.isascii():
        raise DecodeError(f"not a 20-digit file name: {name!r}")
    return int(name)


def check_topic(topic: str) -> None:
    """Raise InvalidTopicError unless ``topic`` is a legal RocketMQ topic name.

    RocketMQ's TopicValidator: characters ``[%|a-zA-Z0-9_-]`` only, 1 to 127 of them.
    The set has no ``/``, ``.`` or NUL, so a valid name is always a single, plain
    path component (the consume queue directory) inside the store.
    """
    if not isinstance(topic, str) or not topic:
        raise InvalidTopicError("topic name is empty")
    if len(topic) > TOPIC_MAX_CHARS:
        raise InvalidTopicError(f"topic name is {len(topic)} characters long; the limit is {TOPIC_MAX_CHARS}")
    if not _TOPIC_RE.fullmatch(topic):
        raise InvalidTopicError(f"topic name {topic!r} has characters outside [%|a-zA-Z0-9_-]")


__all__ = ["FILE_NAME_DIGITS", "TOPIC_MAX_CHARS", "check_topic", "file_name_to_offset", "offset_to_file_name"]
