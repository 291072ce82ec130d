"""File names of mapped file queues, and topic names that may become directory names.

CommitLog and ConsumeQueue files are named by the absolute byte offset of their
first byte, in decimal, zero-padded to 20 digits (RocketMQ UtilAll.offset2FileName).
"""

from __future__ import annotations

import re

from mqstore.errors import DecodeError, InvalidTopicError

FILE_NAME_DIGITS = 20
TOPIC_MAX_CHARS = 127
# RocketMQ 5.x TopicValidator: retry and dead-letter topics (``%RETRY%<group>``,
# ``%DLQ%<group>``) may be up to 255 characters; commitlog records of a topic over
# 127 characters use the V2 magic (2-byte topic length, formats/message.py).
LONG_TOPIC_MAX_CHARS = 255
LONG_TOPIC_PREFIXES = ("%RETRY%", "%DLQ%")
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


def topic_max_chars(topic: str) -> int:
    """The length limit that applies to ``topic``: 255 for a retry / dead-letter topic
    (``%RETRY%...``, ``%DLQ%...``), 127 for any other."""
    return LONG_TOPIC_MAX_CHARS if topic.startswith(LONG_TOPIC_PREFIXES) else TOPIC_MAX_CHARS


def topic_error(topic: object) -> str | None:
    """Why ``topic`` is not a legal RocketMQ topic name, or None if it is."""
    if not isinstance(topic, str) or not topic:
        return "topic name is empty"
    limit = topic_max_chars(topic)
    if len(topic) > limit:
        if limit == TOPIC_MAX_CHARS and len(topic) <= LONG_TOPIC_MAX_CHARS:
            return (
                f"topic name is {len(topic)} characters long; the limit is {TOPIC_MAX_CHARS} "
                f"({LONG_TOPIC_MAX_CHARS} only for topics starting with %RETRY% or %DLQ%)"
            )
        return f"topic name is {len(topic)} characters long; the limit is {limit}"
    if not _TOPIC_RE.fullmatch(topic):
        return f"topic name {topic!r} has characters outside [%|a-zA-Z0-9_-]"
    return None


def check_topic(topic: str) -> None:
    """Raise InvalidTopicError unless ``topic`` is a legal RocketMQ topic name.

    RocketMQ 5.x TopicValidator: characters ``[%|a-zA-Z0-9_-]`` only, 1 to 127 of
    them, or up to 255 for a topic starting with ``%RETRY%`` or ``%DLQ%``. The set
    has no ``/``, ``.`` or NUL, so a valid name is always a single, plain path
    component (the consume queue directory; 255 bytes is the usual NAME_MAX) inside
    the store.
    """
    reason = topic_error(topic)
    if reason is not None:
        raise InvalidTopicError(reason)


__all__ = [
    "FILE_NAME_DIGITS",
    "LONG_TOPIC_MAX_CHARS",
    "LONG_TOPIC_PREFIXES",
    "TOPIC_MAX_CHARS",
    "check_topic",
    "file_name_to_offset",
    "offset_to_file_name",
    "topic_error",
    "topic_max_chars",
]
