"""What a stored record must hold for a consumer to receive it: the one check the
shard's pop service runs before it hands a record out (services/index/pop_service.py)
and the RocketMQ port's converter relies on (services/rocketmq/convert.py
``to_message``). Plain Python: no Ray, no gRPC.

The producer doors refuse such records (mqstore/store/message_rules.py), but a store
may hold them anyway: written before those checks, or by another writer of the same
files. A RocketMQ 5 consumer gets every time as a protobuf Timestamp, so a time
outside Timestamp's range can not be sent to it:

    field              what makes the record unconvertible
    born time          outside 0001-01-01 .. 9999-12-31 (Timestamp's range)
    store time         the same
    TIMER_DELIVER_MS   an integer (ASCII digits, an optional '-') outside that range,
                       int64's included; a value that is no integer is no delivery
                       time (the record is delivered at once, as before)

Such a record is set aside alone: dead-lettered at once with the reason in its
``DLQ_REASON`` property, never handed out, never failing a receive or taking the
messages popped with it along.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NamedTuple

from mqstore.formats.message import MessageRecord

TIMER_DELIVER_MS = "TIMER_DELIVER_MS"  # RocketMQ MessageConst.PROPERTY_TIMER_DELIVER_MS
MIN_TIME_MS = -62_135_596_800_000  # 0001-01-01T00:00:00Z, protobuf Timestamp's first
MAX_TIME_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, its last

_INTEGER = re.compile(r"-?[0-9]+")  # ASCII only: str.isdigit() takes "²", which int() refuses
_BEYOND = 1 << 64  # what a value of more than 20 digits stands for (int() of a huge text is slow or refused)


class Unconvertible(NamedTuple):
    """Why a record can not be handed to a consumer: ``code`` a short name for
    metrics (``born_time``, ``store_time``, ``delivery_time``), ``reason`` a sentence."""

    code: str
    reason: str


def delivery_ms(properties: Mapping[str, str]) -> int | None:
    """The record's delivery time (TIMER_DELIVER_MS, epoch ms) if it is an integer,
    else None (no delivery time). It may be out of range: see :func:`unconvertible`."""
    value = properties.get(TIMER_DELIVER_MS)
    if not value or _INTEGER.fullmatch(value) is None:
        return None
    if len(value) > 21:
        return -_BEYOND if value[0] == "-" else _BEYOND
    return int(value)


def _in_range(ms: int) -> bool:
    return MIN_TIME_MS <= ms <= MAX_TIME_MS


def unconvertible(rec: MessageRecord) -> Unconvertible | None:
    """Why ``rec`` can not be received (see the module docstring), or None."""
    if not _in_range(rec.born_timestamp):
        return Unconvertible(
            "born_time", f"born time {rec.born_timestamp} ms is outside 0001-01-01..9999-12-31 (protobuf Timestamp)"
        )
    if not _in_range(rec.store_timestamp):
        return Unconvertible(
            "store_time", f"store time {rec.store_timestamp} ms is outside 0001-01-01..9999-12-31 (protobuf Timestamp)"
        )
    at = delivery_ms(rec.properties)
    if at is not None and not _in_range(at):
        shown = rec.properties[TIMER_DELIVER_MS]
        shown = shown if len(shown) <= 40 else shown[:40] + "..."
        return Unconvertible(
            "delivery_time", f"{TIMER_DELIVER_MS} {shown} is outside 0001-01-01..9999-12-31 (protobuf Timestamp)"
        )
    return None


__all__ = ["MAX_TIME_MS", "MIN_TIME_MS", "TIMER_DELIVER_MS", "Unconvertible", "delivery_ms", "unconvertible"]
