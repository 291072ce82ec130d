"""Checks of request fields shared by the servicers; each raises BadRequest (or the
store's own typed error) with a message that names the field and the rule."""

from __future__ import annotations

from mqstore.formats.names import check_topic
from mqstore.services.common.errors import BadRequest, TooLarge
from mqstore.store.consumer_offsets import check_group

MAX_QUEUE_ID = 65_535


def topic(name: str) -> str:
    """A legal topic name (InvalidTopicError -> INVALID_ARGUMENT otherwise)."""
    if not name:
        raise BadRequest("topic is empty")
    check_topic(name)
    return name


def queue_id(qid: int) -> int:
    if not 0 <= qid <= MAX_QUEUE_ID:
        raise BadRequest(f"queue id {qid} is out of range (0..{MAX_QUEUE_ID})")
    return qid


def offset(value: int, what: str = "offset") -> int:
    if value < 0:
        raise BadRequest(f"{what} {value} is negative")
    return value


def group(name: str) -> str:
    if not name:
        raise BadRequest("consumer group is empty")
    check_group(name)
    return name


def count(value: int, *, default: int, high: int, what: str) -> int:
    """0 = ``default``; otherwise 1..``high`` (past it: RESOURCE_EXHAUSTED)."""
    if value == 0:
        return default
    if value < 0:
        raise BadRequest(f"{what} {value} is negative")
    if value > high:
        raise TooLarge(f"{what} {value} is over the limit {high}")
    return value


def key(text: str, what: str = "key") -> str:
    if not text:
        raise BadRequest(f"{what} is empty")
    return text


def same_lengths(**columns) -> int:
    """The common length of the given columns (BadRequest if they differ)."""
    lens = {name: len(col) for name, col in columns.items()}
    n = next(iter(lens.values()), 0)
    if any(v != n for v in lens.values()):
        raise BadRequest(f"columns differ in length: {lens}")
    return n


__all__ = ["count", "group", "key", "offset", "queue_id", "same_lengths", "topic"]
